"""AIPerf's user-centric rate timing (``--user-centric-rate R --num-users N``: a profiling
phase of ``type`` ``user_centric`` with ``rate`` and ``users``) sends each simulated user's
turns ``N / R`` seconds apart, the next turn scheduled only when the answer to the one before
it returned (AIPerf 0.13.0 ``aiperf/timing/strategies/user_centric_rate.py``,
``handle_credit_return``). The reader called such a phase an open loop at the global rate,
saying nothing of the users waiting for their answers.

Hand-made edge cases: the real rate8 / capped8c2 records (AIPerf 0.13.0 against the CPU vLLM)
under a summary whose profiling phase is what AIPerf 0.13.0's ``UserCentricPhase`` dumps with
``exclude_unset`` (checked: ``name``, ``kind``, ``type``, ``requests``, ``rate``, ``users``); a
real run needs a multi-turn dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.studies.recorded_replay import replay_mode

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"


def _user_centric(tmp_path: Path, name: str, *, users: int = 3) -> Any:
    (tmp_path / "run.jsonl").write_text((AIPERF / f"{name}.jsonl").read_text())
    summary = json.loads((AIPERF / f"{name}_aiperf.json").read_text())
    for phase in summary["input_config"]["phases"]:
        if phase["kind"] == "profiling":
            phase["type"] = "user_centric"
            phase["users"] = users
        else:  # the warm-up, as AIPerf builds it with no --request-rate: by --concurrency, or 1
            phase.update(type="concurrency", concurrency=phase.get("concurrency") or 1)
            phase.pop("rate", None)
    (tmp_path / "run_aiperf.json").write_text(json.dumps(summary))
    return read_recording(tmp_path / "run.jsonl")


def test_aiperf_user_centric_phase_says_each_user_waits_for_its_answer(
        tmp_path: Path) -> None:
    rec = _user_centric(tmp_path, "rate8")
    (stage,) = rec.stages
    assert (stage.label, stage.load) == ("user-centric, 3 users, 8 req/s", "open")
    assert replay_mode(stage) == "open loop at the recorded send times"
    note = next(n for n in rec.notes if "user_centric" in n)
    assert note.startswith("stage 'user-centric, 3 users, 8 req/s': AIPerf's user_centric "
                           "timing (--user-centric-rate 8 --num-users 3)")
    assert "0.375 s apart" in note  # N / R
    assert "when the answer to the one before it returned" in note
    assert "a slower simulated server does not delay a user's later turns" in note


def test_aiperf_user_centric_with_concurrency_says_the_session_slots(tmp_path: Path) -> None:
    rec = _user_centric(tmp_path, "capped8c2", users=4)
    warmup, stage = rec.stages  # its warm-up phase a closed loop of 2 before it
    assert warmup == RecordedStage("warm-up, concurrency 2", "closed", None, 2)
    assert (stage.label, stage.load, stage.max_concurrency) == (
        "user-centric, 4 users, 8 req/s, concurrency 2", "capped", 2)
    note = next(n for n in rec.notes if "AIPerf's user_centric" in n)
    assert "at most 2 users' conversations open at once" in note
    assert not any("tick of its user_centric" in n for n in rec.notes)


@pytest.mark.parametrize("name", ["rate8", "capped8c2"])
def test_aiperf_rate_phases_are_not_user_centric(name: str) -> None:
    rec = read_recording(AIPERF / f"{name}.jsonl")
    assert not rec.stages[0].label.startswith("user-centric")
    assert not any("user_centric" in n for n in rec.notes)


def test_aiperf_user_centric_turns_linked_by_their_records_wait_for_the_turn_before(
        tmp_path: Path) -> None:
    # records that name their session and turn (x_correlation_id, turn_index, as a
    # multi-turn dataset's do): the replay holds a later turn until the turn before it ended
    # (plus the recorded gap), and the note says so instead of "does not delay"
    lines = (AIPERF / "rate8.jsonl").read_text().splitlines()
    linked = []
    for i, line in enumerate(lines):
        rec = json.loads(line)
        rec["metadata"]["x_correlation_id"] = f"session-{i % 2}"
        rec["metadata"]["turn_index"] = i // 2
        linked.append(json.dumps(rec))
    _user_centric(tmp_path, "rate8")  # the user-centric summary beside the records
    (tmp_path / "run.jsonl").write_text("\n".join(linked) + "\n")
    rec = read_recording(tmp_path / "run.jsonl")
    assert rec.conversations is not None and rec.conversations.num_later_turns > 0
    note = next(n for n in rec.notes if "user_centric" in n)
    assert "does not delay" not in note
    assert "sends a later turn no sooner than the turn before it ended" in note
