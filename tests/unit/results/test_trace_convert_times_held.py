"""Which times ``trace convert`` says a capped stage's converted trace holds: exactly the
ones it holds (the recorded sends, or due times and how far before the sends), and a wait for
a slot only where the stage's requests in flight filled its slots (``cap_reached``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvbudget.cli.trace import _recording_said
from kvbudget.results.recordings import read_recording

FILES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"


def _stage_line(lines: list[str]) -> str:
    return " ".join(next(line for line in lines if "at most 2 in flight" in line).split())


def test_due_times_of_a_stage_that_never_filled_its_slots_are_said_as_scheduling() -> None:
    # the real ShareGPT run (at most 1 in flight of 2) held as due times 0.1 ms before its
    # sends, as a reader offering due times would hold it: the line said "at their recorded
    # sends" (arrays equal) or "the tool sent some later" (arrays not), never which
    rec = read_recording(FILES / "files" / "sharegpt_rate8_c2.json")
    sent = rec.measured.assign(arrival_s=rec.measured["arrival_s"] + 1e-4)
    due = replace(rec, measured=sent)
    said = _stage_line(_recording_said(due, Path("t.csv")))
    assert (
        "holds its requests at the times they were due, 0.1 ms before their recorded sends "
        "(median; at most 0.1 ms): its 2 slots were never all busy, so no request waited "
        "for one, and the lag is the tool's own scheduling"
    ) in said, said
    assert "slots freed" not in said and "at their recorded sends" not in said
    said = _stage_line(_recording_said(rec, Path("t.csv")))
    assert "holds its requests at their recorded sends" in said, said
