"""A harness's runs of ``vllm bench serve``, one JSON array, each run's figures one object down.

github.com/jasl/vllm-ds4-sm120-harness (MIT) runs ``vllm bench serve`` at each concurrency and
writes one row a run (``ds4_harness/cli.py`` lines 1441-1449 at c911a0e: ``concurrency``,
``ok``, ``detail``, ``metrics``, ``command``...), the ``metrics`` parsed from what the benchmark
printed (``ds4_harness/bench.py`` lines 10-32: ``mean_ttft_ms``, ``p99_ttft_ms``, its
speculative decoding's acceptance...), no request. ``kvbudget validate --records`` said it
"cannot tell the recording format (a JSON list that is not inference-perf's
per_request_lifecycle_metrics.json)", and ``simulate --trace`` that the array was "not a trace"
as a dataset of conversations is: neither said it holds a run's figures only. Both now do,
naming the figures where they are (``metrics.mean_ttft_ms``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PUBLISHED = Path(__file__).parents[2] / "fixtures" / "recordings" / "published"
BENCH = PUBLISHED / "ds4-harness-gb10-agent-mtp2-bench-excerpt.json"
SAID = "holds aggregate figures, one JSON object a run (metrics.mean_ttft_ms, "


def test_the_excerpt_is_the_harness_rows() -> None:
    rows = json.loads(BENCH.read_text())
    assert [row["concurrency"] for row in rows] == [1, 2]
    assert rows[0]["command"][1:3] == ["bench", "serve"]
    assert "--save-detailed" not in rows[0]["command"]  # vllm bench serve saved no request


def test_the_runs_are_said_to_be_aggregates() -> None:
    with pytest.raises(TraceError) as err:
        read_recording(BENCH)
    said = str(err.value)
    assert SAID in said, said
    assert "cannot tell the recording format" not in said


@pytest.mark.parametrize(
    "args",
    [["validate", "--records"], ["simulate", "--trace"]],
    ids=["validate", "simulate"],
)
def test_every_command_says_so(args: list[str]) -> None:
    res = CliRunner().invoke(app, [*args, str(BENCH)])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, said
    assert SAID in said, said
    assert "Traceback" not in said and "dataset of conversations" not in said


def test_requests_holding_objects_of_no_summary_are_not_runs(tmp_path: Path) -> None:
    # a harness's requests, each with its usage one object down: no summary there, not a run
    requests = [
        {
            "case": f"c{i}",
            "elapsed_seconds": 20.4 + i,
            "usage": {"prompt_tokens": 74, "completion_tokens": 5097},
        }
        for i in range(3)
    ]
    path = tmp_path / "generation.json"
    path.write_text(json.dumps(requests, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert "holds 3 per-request result(s)" in said and "one JSON object a run" not in said
