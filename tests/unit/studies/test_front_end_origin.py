"""``validate --records F --cost-model C`` says where C's fitted front-end time came from when
C was fitted on another tool's recording (``cli/recorded.py``).

A cost file fitted on a ``vllm bench serve`` recording carries its client's fixed time per
request (14.6 ms on ``concurrency4.json``): validating an AIPerf recording of the same server
with it added those 14.6 ms to every simulated first token, and the output said only "a
calibrated front-end overhead of 14.6 ms a request", as if it were the server's own; the TTFT
errors then hold the two clients' difference. Now a note says which recording the term was
fitted on and that this one may count it otherwise; a recording of the same tool gets none.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SETUP = ["--model", "Llama-3.1-8B", "--gpu", "H100-80GB"]
NOTE = "the cost file's front-end time"


@pytest.fixture(scope="module")
def cost(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(
        RECORDINGS / "vllm-bench-0.32.0" / "concurrency4.json"), *SETUP, "--max-evals", "1",
        "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def _validate(records: Path, cost: Path, out: Path) -> str:
    res = CliRunner().invoke(app, ["validate", "--records", str(records), *SETUP,
                                   "--cost-model", str(cost), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return " ".join(res.stderr.split())


def test_another_tools_recording_is_told_where_the_term_came_from(cost: Path,
                                                                  tmp_path: Path) -> None:
    said = _validate(RECORDINGS / "aiperf-0.13.0" / "rate8.jsonl", cost, tmp_path / "v")
    assert (f"note: {NOTE}, 14.59 ms a request, was fitted on a vllm bench serve recording "
            "(vllm-bench); this one is aiperf 0.13.0's (aiperf)") in said


def test_the_same_tools_recording_is_not(cost: Path, tmp_path: Path) -> None:
    said = _validate(RECORDINGS / "vllm-bench-0.32.0" / "rate8.json", cost, tmp_path / "v")
    assert NOTE not in said
