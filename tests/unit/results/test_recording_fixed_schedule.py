"""AIPerf ``--fixed-schedule`` runs (a mooncake-style trace sent at its timestamps), made by the
real AIPerf 0.13.0 (``scripts/make_recording_fixtures.sh aiperf-trace``): the trace as written,
with ``--fixed-schedule-auto-offset``, and with ``--fixed-schedule-start-offset 1000
--fixed-schedule-end-offset 2000``. The stage was read as ``unknown`` and the validate line said
"load mode not recorded" of a phase whose summary names it; it is an open loop at AIPerf's
recorded sends, and one note says what the schedule was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbudget.analysis.validation import OVERALL
from kvbudget.results.recording import RecordedStage
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import replay_mode, stage_plans
from kvbudget.studies.validate import validate_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
OPEN = RecordedStage("fixed schedule", "open", None, None)


def _summary(name: str) -> dict[str, object]:
    doc = json.loads((AIPERF / f"{name}_aiperf.json").read_text())
    assert isinstance(doc, dict)
    return doc


def _schedule_note(notes: tuple[str, ...]) -> str:
    said = [n for n in notes if "--fixed-schedule" in n]
    assert len(said) == 1, notes
    return said[0]


@pytest.mark.parametrize(("name", "zero", "window"), [
    ("trace_fixed", "its first timestamp (auto_offset)", False),
    ("trace_auto_offset", "its first timestamp (auto_offset)", False),
    ("trace_window", "1000 ms (--fixed-schedule-start-offset)", True),
])
def test_a_fixed_schedule_run_is_an_open_loop_at_its_sends_and_says_its_schedule(
        name: str, zero: str, window: bool) -> None:
    rec = read_recording(AIPERF / f"{name}.jsonl")
    summary = _summary(name)
    assert rec.stages == (OPEN,)
    assert "not recorded" not in replay_mode(rec.stages[0])
    assert stage_plans(rec) is None  # open: simulated as one run at the recorded sends
    count = summary["request_count"]
    assert isinstance(count, dict)
    assert rec.counts["num_measured"] == count["avg"] == len(rec.workload)
    note = _schedule_note(rec.notes)
    assert f"AIPerf sent the {len(rec.workload)} requests at their trace timestamps" in note
    assert f"the schedule's zero at {zero}" in note
    assert ("only the entries stamped 1000 .. 2000 ms" in note) == window
    assert "replayed as an open loop at AIPerf's recorded sends" in note


@pytest.mark.parametrize("name", ["trace_fixed", "trace_window"])
def test_a_fixed_schedule_runs_throughput_is_aiperfs_own_span(name: str) -> None:
    # AIPerf's benchmark_duration runs from the first send to the last end, not from the
    # phase's start (the idle time before the first timestamp): the measured throughput is the
    # server's output tokens over it
    summary = _summary(name)
    own = summary["total_usage_completion_tokens"]["avg"] / summary[  # type: ignore[index]
        "benchmark_duration"]["avg"]  # type: ignore[index]
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=4000, max_num_seqs=64,
                                           max_num_batched_tokens=2048))
    table = validate_recording(read_recording(AIPERF / f"{name}.jsonl"), config).table
    row = table[(table["stage"] == OVERALL) & (table["metric"] == "output_tokens_per_s")]
    assert float(row["measured"].iloc[0]) == pytest.approx(own, rel=1e-3)


def test_a_fixed_schedule_with_a_concurrency_cap_is_capped_at_its_sends(tmp_path: Path) -> None:
    # AIPerf's phases take --concurrency beside --fixed-schedule: a request due while every
    # slot was busy waited; replayed open, a slower simulated server would run more at once
    shutil.copy(AIPERF / "trace_fixed.jsonl", tmp_path / "trace_fixed.jsonl")
    summary = _summary("trace_fixed")
    phases = summary["input_config"]["phases"]  # type: ignore[index]
    phases[0]["concurrency"] = 2
    (tmp_path / "trace_fixed_aiperf.json").write_text(json.dumps(summary))
    rec = read_recording(tmp_path / "trace_fixed.jsonl")
    assert rec.stages == (RecordedStage("fixed schedule, concurrency 2", "capped", None, 2),)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].loop is not None
    assert plans[0].loop.num_users == 2 and plans[0].loop.not_before_arrival
    assert plans[0].loop.tick_rate_per_s is None
    assert "at most 2 in flight (--concurrency)" in _schedule_note(rec.notes)
