"""Other simulators' per-request tables passed where a measured run is meant.

github.com/MIST-Simulator/SC_Paper_Charts (MIT) publishes, at commit 907fd62e, beside the real
vLLM runs of its validation (``data/validation/T1/vllm_l40s_qwen3-32b_tp2.json``), the same
requests simulated by Vidur (``vidur_l40s_qwen3-32b_tp2_request_metrics.csv``, Vidur's
``request_metrics.csv``) and by LLMServingSim2.0 (``llmservingsim_l40s_tp2_result.csv``, its
``--output`` CSV, times in simulated ns). ``kvbudget validate --records`` told the first to map a
``prompt_tokens`` column and the second to map ``arrival`` with ``--arrival-unit``; ``trace
convert`` told both that a load tool's result "is a recording: kvbudget validate --records FILE
simulates its requests and compares". Followed, kvbudget would have been compared with (and
calibrated to) another simulator, its table called measured. Each is now named as what it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_simulators import LLMSERVINGSIM_COLUMNS, simulated_output_refusal
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PUBLISHED = Path(__file__).parents[2] / "fixtures" / "recordings" / "published"
VIDUR = PUBLISHED / "mist-vidur-l40s-qwen3-32b-request-metrics-excerpt.csv"
LLMSERVINGSIM = PUBLISHED / "mist-llmservingsim-l40s-tp2-result-excerpt.csv"
NAMED = {VIDUR: "is Vidur's simulated request metrics", LLMSERVINGSIM: "is LLMServingSim's"}


@pytest.mark.parametrize("path", [VIDUR, LLMSERVINGSIM], ids=["vidur", "llmservingsim"])
def test_a_simulators_table_is_not_read_as_a_measured_run(path: Path) -> None:
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert NAMED[path] in said and "another simulator's output, not a measured run" in said
    assert "--column" not in said and "--arrival-unit" not in said


@pytest.mark.parametrize("path", [VIDUR, LLMSERVINGSIM], ids=["vidur", "llmservingsim"])
@pytest.mark.parametrize("command", ["validate", "calibrate", "convert", "report"])
def test_every_command_names_it(tmp_path: Path, path: Path, command: str) -> None:
    args = {
        "validate": ["validate", "--records", str(path), "--out", str(tmp_path / "v")],
        "calibrate": ["calibrate", "--records", str(path)],
        "convert": ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")],
        "report": ["report", str(path)],
    }[command]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert NAMED[path] in said and "not a measured run" in said, said
    assert "is a recording" not in said and "Traceback" not in said
    assert not (tmp_path / "t.jsonl").exists()


def test_a_forks_longer_header_is_named_and_a_records_file_is_not() -> None:
    # LLMServingSim's forks append columns (cache hits, preemptions) after its twelve
    fork = [*LLMSERVINGSIM_COLUMNS, "cache_hit", "n_preempted"]
    assert (simulated_output_refusal(fork) or "").startswith("is LLMServingSim's")
    # a column or two of the same names in a file of another layout says nothing
    records = ["arrival_s", "prompt_tokens", "output_tokens", "TTFT", "ITL", "request_e2e_time"]
    assert simulated_output_refusal(records) is None
    assert simulated_output_refusal(["request id", "model", "input", "output"]) is None
