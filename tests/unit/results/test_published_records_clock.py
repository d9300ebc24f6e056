"""A per-request table a load tool of its own wrote, read as the generic records format.

The source: github.com/AdithyaSrivastava01/llm-serving-bench at commit 365e487,
``results/20260630_092448_9d2de2ac/vllm/e69537de6482/metrics.parquet`` (Qwen3-8B on vLLM, its
``config.json``: a closed loop of 1 user, 20 requests less 2 warm-ups): columns
``request_id, prompt_tokens, completion_tokens, ttft, e2e_latency, itl_mean, itl_values,
start_time, end_time, error``, ``start_time`` from ``time.perf_counter`` (10,434,805.88 s for
the first). Not copied in: a table of the same shape is written here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvbudget.results.recorded_records import OPEN_REPLAY_NOTE
from kvbudget.results.recordings import read_recording

COLUMNS = {"arrival_s": "start_time", "output_tokens": "completion_tokens", "ttft_s": "ttft",
           "e2e_s": "e2e_latency"}


def table(tmp_path: Path, first: float) -> Path:
    """18 requests one after the other (a closed loop of one user), 809-token prompts, 64
    tokens out, 1.54 s each, the first sent at ``first`` on the tool's clock."""
    n = 18
    start = [first + 1.55 * i for i in range(n)]
    df = pd.DataFrame({"request_id": [f"req-{i}" for i in range(n)], "prompt_tokens": [809] * n,
                       "completion_tokens": [64] * n, "ttft": [0.0546] * n,
                       "e2e_latency": [1.538] * n, "start_time": start,
                       "end_time": [s + 1.538 for s in start], "error": [None] * n})
    path = tmp_path / "metrics.parquet"
    df.to_parquet(path)
    return path


def test_arrivals_on_a_clock_of_the_machines_uptime_are_rebased_and_said(tmp_path: Path) -> None:
    # read as written, the first request arrived 120 days in: validate's simulation refused
    # with "timeline_period_s 1: the timeline would take 1.04e+07 samples over the 1.04e+07 s
    # to the last arrival", which named neither the file nor its column
    rec = read_recording(table(tmp_path, 10_434_805.88), columns=COLUMNS)
    assert rec.workload.arrival_s.min() == 0.0
    assert rec.workload.arrival_s[1] == pytest.approx(1.55)
    said = [n for n in rec.notes if "rebased so the first request arrives at 0" in n]
    assert len(said) == 1 and "start_time starts at 10,434,806 s" in said[0]


def test_arrivals_from_the_runs_start_are_kept(tmp_path: Path) -> None:
    rec = read_recording(table(tmp_path, 3600.0), columns=COLUMNS)
    assert rec.workload.arrival_s.min() == 3600.0
    assert not any("rebased" in n for n in rec.notes)


def test_the_replay_at_the_recorded_sends_is_said(tmp_path: Path) -> None:
    # the table keeps no load mode: its closed loop was replayed at the recorded sends, and
    # no line said so (a records file prints no stage line)
    rec = read_recording(table(tmp_path, 0.0), columns=COLUMNS)
    assert rec.stages == () and OPEN_REPLAY_NOTE in rec.notes
    assert "sent at its recorded arrival_s (an open loop)" in OPEN_REPLAY_NOTE
