"""AIPerf's ``agentic_replay`` timing is recorded in its summary: the profiling phase's
``timing_mode`` (stamped by a ``--scenario`` that locks it, or set in a config file), dumped
with ``exclude_unset`` (AIPerf 0.13.0 ``exporters/metrics_json_exporter.py``); the phase keeps
its default ``concurrency`` shape, its ``concurrency`` absent when left at 1. The reader called
such a run ``load mode not recorded`` (no ``concurrency``) or a closed loop of ``--concurrency``
users with no think time (the trace's inter-turn delays dropped).

Hand-made edge cases: the real concurrency4 records (AIPerf 0.13.0 against the CPU vLLM) under
a summary whose profiling phase is what AIPerf 0.13.0 writes for an agentic replay (checked
with its ``ConcurrencyPhase``: ``timing_mode`` ``agentic_replay`` after ``name``, ``kind``,
``type``, ``duration``, ``concurrency``); a real run needs a trajectory trace dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.studies.recorded_replay import replay_mode, stage_plans

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"


def _agentic(tmp_path: Path, *, concurrency: int | None, stamped: bool = True,
             scenario: str | None = None) -> Any:
    (tmp_path / "run.jsonl").write_text((AIPERF / "concurrency4.jsonl").read_text())
    summary = json.loads((AIPERF / "concurrency4_aiperf.json").read_text())
    for phase in summary["input_config"]["phases"]:
        if phase["kind"] == "profiling":
            phase.pop("concurrency")
            if concurrency is not None:
                phase["concurrency"] = concurrency
            if stamped:
                phase["timing_mode"] = "agentic_replay"
    if scenario is not None:
        summary["input_config"]["scenario"] = scenario
    (tmp_path / "run_aiperf.json").write_text(json.dumps(summary))
    return read_recording(tmp_path / "run.jsonl")


@pytest.mark.parametrize(("concurrency", "label"), [(4, "agentic replay, 4 lanes"),
                                                    (None, "agentic replay, 1 lane")])
def test_aiperf_agentic_replay_is_read_from_the_phases_timing_mode(
        tmp_path: Path, concurrency: int | None, label: str) -> None:
    rec = _agentic(tmp_path, concurrency=concurrency)
    (stage,) = rec.stages
    assert (stage.label, stage.load, stage.max_concurrency) == (label, "open", None)
    said = replay_mode(stage)
    assert said == "open loop at the recorded send times"
    assert "load mode not recorded" not in said
    assert stage_plans(rec) is None  # not a closed loop of lanes with no think time
    note = next(n for n in rec.notes if "agentic_replay" in n)
    assert f"stage '{label}': AIPerf's agentic_replay timing " \
        "(input_config.phases[1].timing_mode)" in note
    assert "kvbudget simulates no such sessions" in note
    assert "AIPerf's recorded sends" in note


def test_aiperf_agentic_scenario_without_the_stamp_is_read_from_its_name(
        tmp_path: Path) -> None:
    rec = _agentic(tmp_path, concurrency=4, stamped=False, scenario="inferencex-agentx-mvp")
    assert rec.stages[0].label == "agentic replay, 4 lanes"
    assert any("(input_config.scenario 'inferencex-agentx-mvp')" in n for n in rec.notes)


def test_aiperf_concurrency_run_is_still_a_closed_loop(tmp_path: Path) -> None:
    rec = _agentic(tmp_path, concurrency=4, stamped=False)
    assert (rec.stages[0].label, rec.stages[0].load) == ("concurrency 4", "closed")
    assert not any("agentic_replay" in n for n in rec.notes)
