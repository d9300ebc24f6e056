"""A request sent before its run began is impossible: each reader whose tool records when its
run began, or stamps its sends on a clock that is never negative, refuses one in one line that
names the file, the request and the field. Each was read before, the request placed hours
(or, in GuideLLM's epoch seconds, decades) ahead of the others."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

REC = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _copy(tmp_path: Path, rel: str) -> Path:
    source = REC / rel
    base = source.parent
    shutil.copytree(base, tmp_path / base.name)
    return tmp_path / base.name / source.name


def test_evalscope_negative_start_time(tmp_path: Path) -> None:
    """evalscope stamps start_time with time.perf_counter() (seconds since boot): a third row
    at minus its value was read as sent 8.6 hours before the run's others."""
    run = tmp_path / "parallel_2_number_12"
    shutil.copytree(REC / "evalscope-1.14.1" / "capped" / "parallel_2_number_12", run)
    db = run / "benchmark_data.db"
    with sqlite3.connect(db) as con:
        third = con.execute("SELECT rowid FROM result ORDER BY rowid LIMIT 1 OFFSET 2").fetchone()
        con.execute("UPDATE result SET start_time=-start_time WHERE rowid=?", third)
    con.close()
    with pytest.raises(TraceError, match=r"perf_counter") as refused:
        read_recording(run)
    assert str(refused.value).startswith(f"{db}: row 2: field 'result.start_time': negative: -")


@pytest.mark.parametrize(
    "rel",
    [
        "inference-perf-0.7.0/concurrent/per_request_lifecycle_metrics.json",
        "published/inference-perf-0.5-llmd-qwen3-30b-excerpt/per_request_lifecycle_metrics.json",
    ],
)
def test_inference_perf_negative_start_time(tmp_path: Path, rel: str) -> None:
    """inference-perf stamps start_time with time.perf_counter() too
    (inference_perf/client/modelserver/openai_client.py)."""
    path = _copy(tmp_path, rel)
    rows = json.loads(path.read_text())
    rows[1]["start_time"] = -rows[1]["start_time"]
    path.write_text(json.dumps(rows))
    with pytest.raises(TraceError, match=r"perf_counter") as refused:
        read_recording(path)
    assert str(refused.value).startswith(f"{path}: row 1: field 'start_time': negative: -")


def test_a_positive_clock_reads(tmp_path: Path) -> None:
    """Any start time at or above zero on the clock is read: 0 (a machine just booted) is
    not refused."""
    path = _copy(tmp_path, "inference-perf-0.7.0/concurrent/per_request_lifecycle_metrics.json")
    rows = json.loads(path.read_text())
    shift = min(r["start_time"] for r in rows)
    for r in rows:  # the whole run moved so its first request is sent at the clock's zero
        r["start_time"] -= shift
        r["end_time"] -= shift
        metrics = r["info"]["response_metrics"]
        for key in ("output_token_times", "chunk_times"):
            metrics[key] = [t - shift for t in metrics.get(key) or []]
    path.write_text(json.dumps(rows))
    assert len(read_recording(path).measured) == len(rows)


@pytest.mark.parametrize(
    ("field", "before_s"),
    [("request_start_time", 600.0), ("info.timings.targeted_start", 1e-3)],
)
def test_guidellm_request_before_its_benchmark_began(
    tmp_path: Path, field: str, before_s: float
) -> None:
    """GuideLLM 0.4+ records when the benchmark began (scheduler_metrics.start_time); a
    request sent or due before it was read (a targeted_start at minus its value put the
    requests 57 years later)."""
    path = _copy(tmp_path, "guidellm-0.8.1/rampup2_concurrent4.json")
    doc = json.loads(path.read_text())
    bench = doc["benchmarks"][0]
    began = bench["scheduler_metrics"]["start_time"]
    req = bench["requests"]["successful"][5]
    if field == "request_start_time":
        req["request_start_time"] = began - before_s
    else:
        req["info"]["timings"]["targeted_start"] = began - before_s
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="before the benchmark began") as refused:
        read_recording(path)
    assert str(refused.value).startswith(
        f"{path}: field 'benchmarks[0].requests.successful[5].{field}': "
    )


@pytest.mark.parametrize(
    ("credit", "said"),
    [
        (lambda c, s: -c, "must be epoch nanoseconds"),
        (lambda c, s: 0, "must be epoch nanoseconds"),
        (lambda c, s: s + 2_000_000_000, "2 s after the request was sent"),
    ],
)
def test_aiperf_issue_time_after_the_send_or_not_a_time(
    tmp_path: Path, credit: Callable[[int, int], int], said: str
) -> None:
    """AIPerf issues a credit before a worker sends its request; a credit_issued_ns at or
    below zero, or after request_start_ns, was read as no issue time (the request offered
    at its send in a capped stage, the tick AIPerf took dropped without a word)."""
    path = _copy(tmp_path, "aiperf-0.13.0/capped8c2.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    rec = json.loads(lines[11])
    meta = rec["metadata"]
    meta["credit_issued_ns"] = credit(meta["credit_issued_ns"], meta["request_start_ns"])
    lines[11] = json.dumps(rec) + "\n"
    path.write_text("".join(lines))
    with pytest.raises(TraceError, match=said) as refused:
        read_recording(path)
    assert str(refused.value).startswith(f"{path}: line 12: field 'metadata.credit_issued_ns': ")
