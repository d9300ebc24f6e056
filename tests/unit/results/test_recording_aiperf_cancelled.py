"""AIPerf's ``--request-cancellation-rate P --request-cancellation-delay D``: P % of the
requests are cancelled D s after they were sent. AIPerf 0.13.0 returns such a request as a new
record with no responses (``transports/aiohttp_client.py``, ``_request_with_cancellation``:
``RequestCancellationError``, code 499, ``cancellation_perf_ns``; ``was_cancelled`` in its
metadata, ``records/record_processor_service.py``), counted in its summary's
``error_request_count`` and ``error_summary`` (``RequestCancellationError``); the credit then
returns and the user's slot frees, cancelled or not (``credit/callback_handler.py``), so in a
closed loop the user was held until the cancel. The reader counted in ``num_cancelled`` only
the cancelled records it kept (with output: none in 0.13.0), and replayed a closed loop with
the cancelled ones dropped, its users sending the next request at once.

Hand-made edge cases: the real concurrency4 / rate8 records (AIPerf 0.13.0 against the CPU
vLLM) with three profiling records turned into what AIPerf 0.13.0 writes for a cancelled one
(its metrics cut to ``error_isl``, ended 0.5 s after its send) and the summary's error counts
and phase ``cancellation`` (``config/cancellation.py``: ``rate``, ``delay``) to match; a real
run with cancellations is not among the fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbudget.results.recordings import read_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
CANCELLED = (4, 9, 15)  # record lines turned cancelled (profiling records: warm-up first two)


def _cancelled(tmp_path: Path, name: str) -> Any:
    lines = (AIPERF / f"{name}.jsonl").read_text().splitlines()
    for k in CANCELLED:
        rec = json.loads(lines[k])
        meta = rec["metadata"]
        assert meta["benchmark_phase"] == "profiling"
        end = meta["request_start_ns"] + 500_000_000
        meta.update(request_end_ns=end, cancellation_time_ns=end, was_cancelled=True)
        meta.pop("request_ack_ns", None)
        isl = rec["metrics"]["input_sequence_length"]["value"]
        rec["metrics"] = {"error_isl": {"value": isl, "unit": "tokens"}}
        rec["error"] = {"code": 499, "type": "RequestCancellationError",
                        "message": "Request cancelled 0.500s after being sent"}
        lines[k] = json.dumps(rec)
    (tmp_path / "run.jsonl").write_text("\n".join(lines) + "\n")
    summary = json.loads((AIPERF / f"{name}_aiperf.json").read_text())
    summary["error_request_count"] = {"unit": "requests", "avg": len(CANCELLED)}
    summary["request_count"]["avg"] -= len(CANCELLED)  # the valid ones: as AIPerf counts
    summary["error_summary"] = [{"error_details": {
        "code": 499, "type": "RequestCancellationError",
        "message": "Request cancelled 0.500s after being sent"}, "count": len(CANCELLED)}]
    for phase in summary["input_config"]["phases"]:
        if phase["kind"] == "profiling":
            phase["cancellation"] = {"rate": 15.0, "delay": 0.5}
    (tmp_path / "run_aiperf.json").write_text(json.dumps(summary))
    return read_recording(tmp_path / "run.jsonl")


def test_cancelled_records_are_counted_as_aiperfs_summary_counts_them(tmp_path: Path) -> None:
    rec = _cancelled(tmp_path, "rate8")
    assert rec.counts["num_cancelled"] == 3  # error_summary's RequestCancellationError
    assert rec.counts["num_failed"] + rec.counts["num_cancelled"] == 3  # error_request_count
    note = next(n for n in rec.notes if "cancelled" in n and "no output" in n)
    assert "3 cancelled by AIPerf (--request-cancellation-rate 15 %, " \
        "--request-cancellation-delay 0.5 s)" in note
    assert rec.stages[0].load == "open"  # its sends are the recorded ones already


def test_a_closed_loop_held_by_cancelled_requests_keeps_their_time(tmp_path: Path) -> None:
    rec = _cancelled(tmp_path, "concurrency4")
    (stage,) = rec.stages
    assert (stage.label, stage.load, stage.max_concurrency) == (
        "concurrency 4, 3 cancelled", "capped", 4)
    note = next(n for n in rec.notes if "held its user" in n)
    assert "open loop at the recorded sends, at most 4 in flight" in note
    assert "1.5 s held in all" in note


def test_runs_without_cancellations_count_none() -> None:
    rec = read_recording(AIPERF / "concurrency4.jsonl")
    assert rec.counts["num_cancelled"] == 0
    assert (rec.stages[0].label, rec.stages[0].load) == ("concurrency 4", "closed")
