"""A closed or capped stage its load tool stopped by a time limit (GuideLLM ``max_duration`` /
``--max-seconds``, AIPerf ``--benchmark-duration``) gets one note naming the stage and the limit:
replayed time-limited where the file says when the limit fell
(tests/unit/studies/test_time_limited_replay.py), else with the requests it sent, its simulated
``completed`` agreeing by construction. A stage stopped by its request count, or
an open stage (its rate set the count), gets none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SAID = "time limit"


def limit_notes(path: Path) -> list[str]:
    return [n for n in read_recording(path).notes if SAID in n]


def guidellm_08(tmp_path: Path, ended: dict[str, Any]) -> Path:
    doc = json.loads((FIXTURES / "guidellm-0.8.1/benchmarks.json").read_text())
    doc["benchmarks"][0]["scheduler_state"]["end_queuing_constraints"] = ended
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


def test_guidellm_closed_loop_stopped_by_max_duration_is_said(tmp_path: Path) -> None:
    ended = {"max_duration": {"request_queuing": "stop", "metadata": {"max_duration": 30.0},
                              "progress": {"total_duration": 30.0}}}
    notes = limit_notes(guidellm_08(tmp_path, ended))
    assert len(notes) == 1
    assert notes[0].startswith("stage '0: concurrent x4' was stopped by its 30 s time limit "
                               "(GuideLLM max_duration): replayed with the 20 requests it sent")
    assert "completed count equals the measured one by construction" in notes[0]


def test_guidellm_stopped_by_its_request_count_says_no_limit() -> None:
    assert limit_notes(FIXTURES / "guidellm-0.8.1/benchmarks.json") == []
    # cut short by a duration while processing, but its sending stopped at max_requests
    assert limit_notes(FIXTURES / "guidellm-0.8.1/cancelled.json") == []


@pytest.mark.parametrize(("max_number", "said"), [(None, 1), (20, 0), (500, 1)])
def test_guidellm_0_2_max_duration_is_said_when_it_stopped_the_stage(
        tmp_path: Path, max_number: int | None, said: int) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.2.1/benchmarks.json").read_text())
    doc["benchmarks"][0]["args"].update(max_duration=12.5, max_number=max_number)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    notes = limit_notes(path)
    assert len(notes) == said
    assert all("12.5 s time limit (GuideLLM max_duration)" in n for n in notes)


def aiperf(tmp_path: Path, name: str, **phase: Any) -> Path:
    shutil.copy(FIXTURES / f"aiperf-0.13.0/{name}.jsonl", tmp_path / f"{name}.jsonl")
    summary = json.loads((FIXTURES / f"aiperf-0.13.0/{name}_aiperf.json").read_text())
    for p in summary["input_config"]["phases"]:
        if p["kind"] == "profiling":
            p.update(phase)
            if p["requests"] is None:  # no request count: only the duration stops it
                del p["requests"]
    (tmp_path / f"{name}_aiperf.json").write_text(json.dumps(summary))
    return tmp_path / f"{name}.jsonl"


def test_aiperf_benchmark_duration_closed_loop_is_said(tmp_path: Path) -> None:
    notes = limit_notes(aiperf(tmp_path, "concurrency4", duration=10.0, requests=None))
    assert len(notes) == 1
    assert notes[0].startswith("stage 'concurrency 4' was stopped by its 10 s time limit "
                               "(--benchmark-duration): replayed time-limited: the simulated "
                               "users send nothing after the limit and those still running at "
                               "the limit are cancelled")  # the summary gives no grace period
    assert "At most the 20 requests it sent are offered" in notes[0]


def test_aiperf_run_that_reached_its_request_count_says_no_limit(tmp_path: Path) -> None:
    assert limit_notes(aiperf(tmp_path, "concurrency4", duration=10.0, requests=20)) == []
    assert limit_notes(FIXTURES / "aiperf-0.13.0/concurrency4.jsonl") == []


def test_an_open_aiperf_stage_stopped_by_its_duration_says_its_cut(tmp_path: Path) -> None:
    # an open stage offers its recorded sends; AIPerf cancels what still runs when its grace
    # ends whatever the load (before: nothing said, and nothing cut)
    said = limit_notes(aiperf(tmp_path, "rate8", duration=10.0, requests=None))
    assert len(said) == 1
    assert ("stage '8 req/s' was stopped by its 10 s time limit (--benchmark-duration): the 20 "
            "requests it sent are offered at their recorded send times and those still running "
            "at the limit are cancelled") in said[0]  # the summary gives no grace period: 0
    said = limit_notes(aiperf(tmp_path, "rate8", duration=10.0, requests=None,
                              grace_period=30.0))
    assert len(said) == 1 and "still running 30 s after it (its grace period)" in said[0]


def test_a_capped_aiperf_stage_stopped_by_its_duration_is_said(tmp_path: Path) -> None:
    notes = limit_notes(aiperf(tmp_path, "capped8c2", duration=3.0, requests=None))
    assert len(notes) == 1 and notes[0].startswith("stage '8 req/s, concurrency 2' was stopped")
