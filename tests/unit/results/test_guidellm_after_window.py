"""GuideLLM 0.8 benchmarks read as GuideLLM ran them: one that set no cool-down but whose
measurement window closed before some of its requests were sent; the replay profile.

GuideLLM 0.8.1 closes the window of a benchmark with no cool-down where its scheduler reported
it stopped (``benchmark/schemas/accumulator.py``, ``update_estimate``: ``measure_end`` is
``request_end``, the scheduler's ``progress.stop_time``); a real run here (concurrent, 2
streams, 10 requests of synthetic data with length distributions) had it close after the
second request ended, and GuideLLM's own metrics counted 3 of the 10. kvbudget left the other
7 out too, as GuideLLM does, but said "0 warm-up and 7 cool-down requests" of a run that set
no cool-down. The run could not be made again on demand (the next two runs of the same command
closed their windows at their ends), so the case is made from the real sweep report by moving
its first benchmark's ``measure_end_time`` to its first request's end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, read_recording

SWEEP = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "guidellm-0.8.1"
    / "sweep.json"
)


def _window_moved(tmp_path: Path) -> Path:
    """The real sweep report with its first benchmark's window closed at its first request's
    end, as GuideLLM closed a real run's (see the module's docstring)."""
    doc = json.loads(SWEEP.read_text())
    bench = doc["benchmarks"][0]
    assert bench["config"]["cooldown"]["percent"] is None and not bench["cooldown_duration"]
    first, second = sorted(
        bench["requests"]["successful"], key=lambda r: r["info"]["timings"]["request_start"]
    )
    bench["scheduler_metrics"]["measure_end_time"] = first["info"]["timings"]["request_end"]
    assert second["info"]["timings"]["request_start"] > first["info"]["timings"]["request_end"]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    return path


def test_requests_after_the_window_of_a_benchmark_without_cool_down_are_not_called_cool_down(
    tmp_path: Path,
) -> None:
    rec = read_recording(_window_moved(tmp_path))
    assert (rec.counts["num_after_window"], rec.counts["num_cooldown"]) == (1, 0)
    assert (rec.measured["status"] == "after_window").sum() == 1
    assert not any("cool-down requests simulated" in n for n in rec.notes)
    assert any(
        n.startswith(
            "1 request sent after GuideLLM's measurement window closed though their "
            "benchmark set no cool-down"
        )
        for n in rec.notes
    )
    # left out of the measured statistics, as GuideLLM's metrics leave it out
    stage0 = rec.measured[rec.measured["stage"] == rec.stages[0].label]
    assert int(stage0["usable"].sum()) == 1
    # the report as GuideLLM wrote it: no request outside a window
    plain = read_recording(SWEEP)
    assert (plain.counts["num_after_window"], plain.counts["num_cooldown"]) == (0, 0)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("window_moved", "1 request sent after GuideLLM's measurement window closed"),
        (
            "benchmarks.json",
            "3 warm-up and 1 cool-down requests simulated (they loaded the server)",
        ),
    ],
)
def test_validate_does_not_call_requests_outside_the_window_not_completed(
    tmp_path: Path, name: str, said: str
) -> None:
    """validate --records said of requests GuideLLM sent and the server answered but GuideLLM
    left out of its window "the simulation completed 4 of the 4 requests the recording shows
    not completed (3 warmup; 1 cooldown): they loaded the simulated server and not the real
    one", in the reader's status words (``cooldown`` for an after-window request of a benchmark
    with no cool-down): the real server answered them too. The recording's own note says them,
    in words."""
    path = _window_moved(tmp_path) if name == "window_moved" else SWEEP.parent / name
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    err = " ".join(res.stderr.split())
    assert res.exit_code == 0, err
    assert f"note: {said}" in err
    assert "the recording shows not completed" not in err
    for word in ("warmup", "cooldown", "after_window"):
        assert word not in err


REPLAY = SWEEP.parent / "replay_trace.json"


def test_a_replay_profile_is_its_traces_timestamps_not_an_unrecorded_load() -> None:
    """GuideLLM 0.8's replay profile (strategy ``trace``: ``TraceReplayStrategy`` sends each
    request at its trace's timestamp) was read as "load mode not recorded", though the report
    names its strategy; the real run (``make_recording_fixtures.sh guidellm-replay``) sent its
    requests at the trace's timestamps, 0 to 1.9 s."""
    bench = json.loads(REPLAY.read_text())["benchmarks"][0]
    assert bench["config"]["strategy"]["type_"] == "trace"
    rec = read_recording(REPLAY)
    assert rec.stages == (RecordedStage("0: trace replay", "open", None, None),)
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert "the stage `0: trace replay`, an open loop" in " ".join(docs.read_text().split())
    assert any(
        n.startswith(
            "0: trace: GuideLLM's replay profile sent each request at its trace's "
            "timestamp (schedule_turn idle_gap), not at a rate"
        )
        for n in rec.notes
    )
    starts = sorted(q["info"]["timings"]["request_start"] for q in bench["requests"]["successful"])
    assert len(rec.workload) == len(starts)
    assert rec.workload.arrival_s.max() == pytest.approx(starts[-1] - starts[0])


BENCHMARKS = SWEEP.parent / "benchmarks.json"


def _warmup_errored(tmp_path: Path) -> tuple[Path, int]:
    """The real report (3 warm-up, 16 measured, 1 cool-down) with its earliest warm-up request
    moved to ``requests.errored``, as GuideLLM 0.8.1 lists a request whose backend raised
    (``info.status`` errored, ``info.error`` its message; benchmark/schemas/accumulator.py,
    ``GenerativeBenchmarkAccumulator.update_estimate``, routes it to ``errored``): no run here
    errored, so the case is made by hand. Returns the file and its number of requests."""
    doc = json.loads(BENCHMARKS.read_text())
    bench = doc["benchmarks"][0]
    requests = bench["requests"]
    first = min(requests["successful"], key=lambda r: r["request_end_time"])
    assert first["request_end_time"] < bench["scheduler_metrics"]["measure_start_time"]
    requests["successful"].remove(first)
    first["info"].update(status="errored", error="Server disconnected")
    requests["errored"] = [first]
    made = bench["scheduler_metrics"]["requests_made"]  # as GuideLLM counts them
    made.update(successful=made["successful"] - 1, errored=made["errored"] + 1)
    path = tmp_path / "errored_warmup.json"
    path.write_text(json.dumps(doc))
    return path, len(requests["successful"]) + 1


def test_an_errored_request_outside_the_window_keeps_its_error(tmp_path: Path) -> None:
    """A request that errored in GuideLLM's warm-up took the status ``warmup`` and lost its
    error: the recording showed 0 errored requests, and validate counted it among the requests
    the real server answered. It keeps ``errored`` (as genai-bench's reader keeps a failed
    warm-up request's error), and a note says it was outside the window."""
    path, num = _warmup_errored(tmp_path)
    rec = read_recording(path)
    status = rec.measured["status"]
    assert (status == "errored").sum() == 1 and rec.counts["num_errored"] == 1
    assert rec.counts["num_errored_outside_window"] == 1
    assert (rec.counts["num_warmup"], rec.counts["num_cooldown"]) == (2, 1)
    assert len(status) == num and int(rec.measured["usable"].sum()) == 16
    said = [n for n in rec.notes if "outside GuideLLM's measurement window" in n]
    assert said == [
        "requests sent outside GuideLLM's measurement window that did not succeed keep their "
        "status: 1 errored (1 warm-up); they are counted among the requests the recording "
        "shows not completed (as GuideLLM's scheduler_metrics.requests_made counts them; its "
        "metrics.request_totals leave them out), not among the warm-up or cool-down requests"
    ]
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    err = " ".join(res.stderr.split())
    assert res.exit_code == 0, err
    assert "2 warm-up and 1 cool-down requests simulated" in err
    assert "did not succeed keep their status: 1 errored (1 warm-up)" in err
    assert "not completed (1 errored)" in err, err
