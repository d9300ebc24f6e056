"""A JSON object that holds no request of any kind is said to be what it is, in general terms.

Two published files were told "cannot tell the recording format (a JSON object of none of the
known tools ...); pass a format (records, run, vllm-bench, ...)", though no format reads them:

- a harness's summary of a run's figures (github.com/sfxnz/DeepSeek-V4.1-Flash-EXL3-vLLM-2x-
  DGX-Spark 1f60373 ``results/2026-09-20-baseline-live/four_numbers.json``): its ``prose_runs``,
  nine runs' decode rates, looked like a tool's per-request list, so its medians and rates were
  not said to be aggregates;
- a benchmark's row of server settings (github.com/systalyze/vllm-benchmarks 004db0c
  ``configs/qwen3-32b/g7/config-1/row-eagle3.json``): ``served_model_name``,
  ``speculative_config``, ``vllm_args`` and no figure.

``simulate --trace`` sent both on to ``validate --records`` as "a load tool's result". Their
layouts are reproduced below, not copied (keys as published, figures made here).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

NEEDS = "not per-request records: kvbudget replays each request"

SUMMARY: dict[str, Any] = {
    "arm": "baseline-live",
    "ts": "2026-09-20T16:23:21Z",
    "host": "spark1",
    "prose_median_tok_s": 34.5,
    "prose_runs": [31.3, 29.2, 34.8, 36.4, 30.6, 36.1, 28.3, 36.0, 34.5],
    "acceptance": 2.8,
    "prefill_8k_tok_s": 693.3,
    "prefill_32k_tok_s": 715.0,
    "lail_prose_median_tok_s": 25.7,
    "lail_runs": [25.7, 25.2, 26.3],
    "notes": "number 3 not captured",
    "partial": False,
}

ROW: dict[str, Any] = {
    "row_id": "spec2-g7-qwen-opt1-eagle3-k3",
    "served_model_name": "spec2-g7-qwen-opt1-eagle3-k3",
    "model_path": "/data/models/Qwen3-32B-NVFP4",
    "tokenizer_id": "qwen3-32b",
    "image": "vllm/vllm-openai:v0.28.0",
    "tp": 2,
    "gpus": [4, 5],
    "lambda_sat": 1.14,
    "vllm_args": ["--max-model-len", "12288", "--max-num-seqs", "64", "--kv-cache-dtype", "fp8"],
    "env": {},
    "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
    "workload_overrides": {"ignore_eos": False, "min_tokens": None},
}


def _said(path: Path, doc: object) -> str:
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    return str(err.value)


def test_a_summary_with_each_runs_figures_is_said_to_hold_aggregates(tmp_path: Path) -> None:
    said = _said(tmp_path / "four_numbers.json", SUMMARY)
    assert "holds aggregate figures (prose_median_tok_s, prefill_8k_tok_s, " in said
    assert NEEDS in said and "pass a format" not in said


def test_a_row_of_server_settings_is_said_to_be_a_configuration(tmp_path: Path) -> None:
    said = _said(tmp_path / "row-eagle3.json", ROW)
    assert (
        "holds a configuration (served_model_name, speculative_config; vllm_args: "
        "--max-model-len, --max-num-seqs, --kv-cache-dtype): a server's or a run's settings, "
        "with no figure measured and no request in it"
    ) in said
    assert NEEDS in said and "pass a format" not in said


@pytest.mark.parametrize(("name", "doc"), [("four_numbers.json", SUMMARY), ("row.json", ROW)])
def test_given_as_a_trace_they_are_said_so_too(tmp_path: Path, name: str, doc: object) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(doc, indent=2))
    result = CliRunner().invoke(app, ["simulate", "--trace", str(path)])
    assert result.exit_code != 0
    out = " ".join(result.output.split())
    assert f"{path}: not a trace: it holds " in out and "validate --records" not in out


@pytest.mark.parametrize(
    "doc",
    [
        # a list of numbers under another name is still a per-request list
        {("prose_tok_s" if k == "prose_runs" else k): v for k, v in SUMMARY.items()}
        | {"lail_runs": [1.0]},
        # each run's figures as objects: not a list of numbers, as before
        {"mean_ttft_ms": 1.0, "p99_ttft_ms": 2.0, "runs": [{"ttft_ms": 1.0}, {"ttft_ms": 2.0}]},
    ],
)
def test_other_lists_keep_their_reading(tmp_path: Path, doc: dict[str, Any]) -> None:
    assert "holds aggregate figures (" not in _said(tmp_path / "other.json", doc)


@pytest.mark.parametrize(
    "doc",
    [
        {**ROW, "mean_ttft_ms": 40.0},  # a figure measured beside the settings
        {**ROW, "requests": [{"prompt": "x"}, {"prompt": "y"}]},  # a list of objects
        {"row_id": "r", "served_model_name": "m", "tp": 2},  # one setting alone
    ],
)
def test_settings_beside_anything_else_are_not_said_a_configuration(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    assert "holds a configuration" not in _said(tmp_path / "other.json", doc)
