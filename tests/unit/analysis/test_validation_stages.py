"""The whole run's output throughput in an offline validation of a recording with several
stages (GuideLLM's sweep, ``vllm bench serve --append-result`` lines): counted over the time
the stages ran, not the idle time between them that the simulation copies from the recording."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.analysis.validation import OVERALL, compare_recorded
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import validate_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _records(arrival: list[float], e2e: float) -> pd.DataFrame:
    n = len(arrival)
    a = np.array(arrival)
    return pd.DataFrame({"request_id": np.arange(n), "arrival_s": a, "status": "completed",
                         "ttft_s": 0.1 * e2e, "tpot_s": 0.01, "e2e_s": e2e,
                         "finished_s": a + e2e, "output_tokens": 100})


def _value(table: pd.DataFrame, stage: str, metric: str, column: str) -> float:
    row = table[(table["stage"] == stage) & (table["metric"] == metric)]
    return float(row[column].iloc[0])


def test_the_whole_runs_throughput_leaves_out_the_idle_time_between_stages() -> None:
    # two stages of 10 requests 0.1 s apart, 60 s between them (a sweep computing its next
    # rate); the simulated server takes half the time: each stage's throughput is higher, and
    # so is the whole run's; over first arrival to last finish the minute of idle time
    # (the same on both sides) made them agree within 2 %
    arrival = [0.1 * k for k in range(10)] + [60 + 0.1 * k for k in range(10)]
    measured, simulated = _records(arrival, 2.0), _records(arrival, 1.0)
    stages = ["a"] * 10 + ["b"] * 10
    table = compare_recorded(simulated, measured, stages)
    for stage in ("a", "b"):
        assert _value(table, stage, "output_tokens_per_s", "measured") == pytest.approx(
            1000 / 2.9)
        assert _value(table, stage, "output_tokens_per_s", "simulated") == pytest.approx(
            1000 / 1.9)
    assert _value(table, OVERALL, "output_tokens_per_s", "measured") == pytest.approx(
        2000 / 5.8)
    assert _value(table, OVERALL, "output_tokens_per_s", "rel_error") == pytest.approx(
        2.9 / 1.9 - 1)
    # stages that overlap (a backlog running into the next window) count their union once
    arrival = [0.1 * k for k in range(20)]
    table = compare_recorded(_records(arrival, 1.0), _records(arrival, 2.0), stages)
    assert _value(table, OVERALL, "output_tokens_per_s", "measured") == pytest.approx(
        2000 / 3.9)


def test_a_real_append_result_files_throughput_is_vllms_own_not_diluted_by_the_gap() -> None:
    # two vllm bench serve runs appended to one file, 9.9 s apart (the second client starting
    # up): the whole run's measured throughput was 640 tokens over 12.8 s, a quarter of what
    # vLLM reported for its two runs (total_output_tokens over their durations)
    path = FIXTURES / "vllm-bench-0.32.0" / "append.jsonl"
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    own = sum(d["total_output_tokens"] for d in docs) / sum(d["duration"] for d in docs)
    rec = read_recording(path)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=4000, max_num_seqs=64,
                                           max_num_batched_tokens=2048))
    table = validate_recording(rec, config).table
    assert _value(table, OVERALL, "output_tokens_per_s", "measured") == pytest.approx(own,
                                                                                     rel=0.05)


def test_a_real_guidellm_sweeps_throughput_is_over_its_benchmarks_not_the_gaps() -> None:
    # a GuideLLM sweep (synchronous, throughput, one constant rate): with the minute of
    # GuideLLM's own work between its benchmarks counted, the whole run's measured throughput
    # was 2.0 tokens/s against 91 over its benchmarks' durations, and the simulated one (the
    # gaps copied into it) agreed with it whatever each stage did
    path = FIXTURES / "guidellm-0.8.1" / "sweep.json"
    doc = json.loads(path.read_text())
    benchmarks = doc["benchmarks"]
    tokens = sum(r["output_tokens"] for b in benchmarks for r in b["requests"]["successful"])
    own = tokens / sum(b["duration"] for b in benchmarks)
    rec = read_recording(path)
    assert [s.load for s in rec.stages] == ["closed", "closed", "capped"]
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=4000, max_num_seqs=64,
                                           max_num_batched_tokens=2048))
    table = validate_recording(rec, config).table
    assert _value(table, OVERALL, "output_tokens_per_s", "measured") == pytest.approx(own,
                                                                                     rel=0.05)
