"""The flags that read and fit a recording, given to ``calibrate --url`` or ``validate --url``:
before, each was accepted and ignored (``calibrate --url ... --holdout 0.5`` timed the server
and fitted the whole grid; ``validate --url ... --fit linear`` replayed and compared with the
cost file as it was), the command going on to ask the server. Each is refused, naming it,
before any server is asked (port 9 has none: a refusal after asking would say it cannot reach
it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

LIVE = ["--url", "http://127.0.0.1:9"]
FIT_FLAGS = [["--holdout", "0.5"], ["--fit", "linear"], ["--max-evals", "5"],
             ["--no-fit-overhead"], ["--column", "ttft_s=x"], ["--records-format", "vllm-bench"]]


@pytest.mark.parametrize("flag", [*FIT_FLAGS, ["--cost-model", "c.json"], ["--tier", "batch"]])
def test_calibrate_url_refuses_what_only_a_recording_uses(flag: list[str], tmp_path: Path
                                                           ) -> None:
    res = CliRunner().invoke(app, ["calibrate", *LIVE, "--out", str(tmp_path / "c.json"),
                                   *flag])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (f"error: {flag[0]} applies to --records, not to a live "
                                  "calibration")


@pytest.mark.parametrize("flag", FIT_FLAGS)
def test_validate_url_refuses_what_only_a_recording_uses(flag: list[str], tmp_path: Path
                                                          ) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    res = CliRunner().invoke(app, ["validate", *LIVE, "--trace", str(trace), "--cost-model",
                                   str(tmp_path / "none.json"), "--out", str(tmp_path / "v"),
                                   *flag])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (f"error: {flag[0]} applies to --records, not to a live "
                                  "validation")


def test_what_the_live_runs_use_is_still_taken(tmp_path: Path) -> None:
    """calibrate --url records --gpu, -tp and --kv-cache-dtype in its file; validate --url
    takes the trace's --tier and --max-output and the gateway's --policy: none refused (the
    server at port 9 is then not reached)."""
    res = CliRunner().invoke(app, ["calibrate", *LIVE, "--out", str(tmp_path / "c.json"),
                                   "--gpu", "L4", "-tp", "2", "--kv-cache-dtype", "fp8",
                                   "--max-num-seqs", "8", "--max-num-batched-tokens", "2048"])
    assert res.exit_code == 1 and "cannot reach http://127.0.0.1:9" in res.stderr, res.output
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    cost = tmp_path / "cost.json"
    cost.write_text('{"kind": "linear", "coefficients": {"intercept_s": 0.004, '
                    '"per_prefill_token_s": 0, "per_decode_seq_s": 0, "per_context_token_s": 0}}')
    res = CliRunner().invoke(app, ["validate", *LIVE, "--trace", str(trace), "--cost-model",
                                   str(cost), "--out", str(tmp_path / "v"), "--tier", "batch",
                                   "--max-output", "30", "--policy", "unlimited"])
    assert res.exit_code == 1 and "cannot reach http://127.0.0.1:9" in res.stderr, res.output
