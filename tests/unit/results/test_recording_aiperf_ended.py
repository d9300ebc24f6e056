"""AIPerf records that ended with no output, failed or cancelled, are said in one note of one
shape (``results/recorded_aiperf.py`` ``_failed``): their kinds, how long they held their
users, how they are counted, and how a closed loop they held is replayed. The two kinds had
two copies of that note, worded apart: the cancelled one left out the timeout that ended
failed requests beside it, and that the output tokens/s compared then spans the held time."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

from kvbudget.results.recordings import read_recording
from tests.unit.results.test_recording_aiperf_cancelled import _cancelled
from tests.unit.results.test_recording_aiperf_failed import two_urls_with_timeouts

FIXTURE = Path(__file__).parents[2] / "fixtures/recordings/aiperf-0.13.0"
SHAPE = re.compile(
    r"^(\d+) requests (failed|ended) with no output \((.+), after [\d.]+ m?s on average"
    r"(?: \(--request-timeout-seconds \d+\))?\): counted (.+), as AIPerf's summary counts them "
    r"\((.+)\), and not simulated: the server sent none of their tokens\. stage '(.+)': each "
    r"held its user of the closed loop of (\d+) until it (failed|ended) \([\d.]+ m?s held in "
    r"all, of the stage's [\d.]+ m?s(?:; AIPerf frees a user's slot when its request returns, "
    r"cancelled or not)?\): replayed as an open loop at the recorded sends, at most \d+ in "
    r"flight, so that this time is kept and the output tokens/s compared spans it on both "
    r"sides \(as a closed loop with them dropped the simulated users would send the next "
    r"request at once, a server that answers every request\); a simulated server faster than "
    r"the recorded one cannot send sooner than recorded, so its completed count and output "
    r"tokens/s agree by construction: compare its latencies$")


def _held_note(notes: Sequence[str]) -> str:
    return next(n for n in notes if "held its user" in n)


def test_failed_and_cancelled_are_said_in_one_shape(tmp_path: Path) -> None:
    for sub in ("f", "c"):
        (tmp_path / sub).mkdir()
    failed = _held_note(read_recording(two_urls_with_timeouts(tmp_path / "f")).notes)
    cancelled = _held_note(_cancelled(tmp_path / "c", "concurrency4").notes)
    for note in (failed, cancelled):
        assert SHAPE.match(note), note
    assert failed.startswith("10 requests failed with no output (10 TimeoutError, after 20.4 s "
                             "on average (--request-timeout-seconds 20)): counted failed "
                             "(num_failed)")
    assert cancelled.startswith("3 requests ended with no output (3 cancelled by AIPerf")
    assert "held in all, of the stage's" in cancelled and \
        "spans it on both sides" in cancelled


def test_a_timeout_beside_cancellations_is_said(tmp_path: Path) -> None:
    # a closed loop with a cancelled request and one that timed out: the timeout that ended
    # the failed one was left unsaid when cancellations were in the run
    _cancelled(tmp_path, "concurrency4")
    path = tmp_path / "run.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[6])
    rec["metrics"] = {"error_isl": rec["metrics"]["input_sequence_length"]}
    rec["error"] = {"type": "TimeoutError", "message": "TimeoutError()"}
    lines[6] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    summary_path = tmp_path / "run_aiperf.json"
    summary = json.loads(summary_path.read_text())
    summary["input_config"]["endpoint"]["timeout_seconds"] = 30.0
    summary_path.write_text(json.dumps(summary))
    note = _held_note(read_recording(path).notes)
    assert SHAPE.match(note), note
    assert note.startswith("4 requests ended with no output (1 TimeoutError, 3 cancelled by "
                           "AIPerf (--request-cancellation-rate 15 %, "
                           "--request-cancellation-delay 0.5 s), after ")
    assert "on average (--request-timeout-seconds 30)): counted failed (num_failed) or " \
        "cancelled (num_cancelled)" in note
    assert "stage 'concurrency 4, 1 failed, 3 cancelled'" in note


def test_a_wait_under_a_second_is_said_in_ms() -> None:
    # AIPerf's own run (cancel50_concurrency2: --request-cancellation-delay 0.05 s): its three
    # cancelled requests held their users 63-144 ms (95 ms on average), said "after 0.1 s on
    # average" and "0.3 s held in all": in tenths of a second they all read alike
    path = FIXTURE / "cancel50_concurrency2.jsonl"
    held = [(m["request_end_ns"] - m["request_start_ns"]) * 1e-6
            for m in (json.loads(line)["metadata"] for line in path.read_text().splitlines())
            if m["was_cancelled"]]
    note = _held_note(read_recording(path).notes)
    assert SHAPE.match(note), note
    assert len(held) == 3 and max(held) < 1000
    assert f"after {sum(held) / 3:.0f} ms on average)" in note
    assert f"({sum(held):.0f} ms held in all, of the stage's 1.9 s;" in note
