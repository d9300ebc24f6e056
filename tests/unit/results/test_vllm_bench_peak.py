"""``vllm bench serve``'s "Peak concurrent requests" (``max_concurrent_requests``) beside the
simulated one.

vLLM 0.32.0 prints and saves it (``vllm/benchmarks/serve.py``, ``calculate_metrics`` lines
672-724, the result's key at line 1300), as does vllm-project/vllm at 009e6d4a; kvbudget read
it nowhere, so a closed loop replayed open-loop, or a cap the replay missed, showed only in the
latencies. The fixtures are real runs (scripts/make_recording_fixtures.sh vllm).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recorded_vllm_bench_peak import PEAK_KEY, RESULT_KEY, peak_per_second
from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import validate_recording

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
CONFIG = SimConfig(
    engine=EngineConfig(
        num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048
    ),
)
SLOW = LinearCostModel(  # 0.1 s a step: each request runs over several one-second buckets
    intercept_s=0.1, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_context_token_s=0.0
)


def vllms_count(start: list[float], end: list[float]) -> int:
    """vLLM 0.32.0's loop (serve.py lines 685-724), as written there, for the check."""
    if not start:
        return 0
    min_start, max_end = min(start), max(end)
    per_second = np.zeros(int(np.ceil(max_end - min_start)) + 1)
    for s, e in zip(start, end, strict=True):
        for second in range(int(s - min_start), int(e - min_start) + 1):
            per_second[second] += 1
    return int(np.max(per_second))


@pytest.mark.parametrize(
    "name",
    [
        "burst05.json",
        "concurrency4.json",
        "inf.json",
        "prefix16.json",
        "rampup.json",
        "rate8.json",
        "append.jsonl",
    ],
)
def test_the_count_from_the_records_is_the_one_vllm_saved(name: str) -> None:
    rec = read_recording(VLLM / name)
    saved = rec.config[PEAK_KEY]
    assert saved  # every 0.32.0 result keeps it
    measured = rec.measured[rec.measured["status"] == "completed"]
    for label, peak in saved.items():
        mine = measured[measured["stage"] == label]
        start = mine["arrival_s"].to_numpy()
        end = start + mine["e2e_s"].to_numpy()
        assert peak_per_second(start, end) == peak == vllms_count(start.tolist(), end.tolist())


def test_two_requests_in_one_second_count_two_though_never_in_flight_together() -> None:
    assert peak_per_second([0.0, 0.5], [0.4, 0.9]) == 2
    assert peak_per_second([0.0, 1.5], [0.4, 1.9]) == 1
    assert peak_per_second([], []) == 0
    assert peak_per_second([0.0, math.nan], [0.4, 0.5]) == 1


def _simulated_count(records: pd.DataFrame) -> int:
    done = records[records["status"] == "completed"]
    return vllms_count(done["arrival_s"].tolist(), done["finished_s"].tolist())


def test_validate_says_the_recorded_peak_beside_the_simulated_one() -> None:
    rec = read_recording(VLLM / "concurrency4.json")
    assert rec.stages == (RecordedStage("concurrency 4", "closed", None, 4),)
    closed = validate_recording(
        rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0, model_chosen=True
    )
    peak = _simulated_count(closed.simulated.records)
    line = next(s for s in closed.said if s.startswith("peak concurrent requests"))
    assert line.endswith(f": recorded 20, simulated {peak}")
    assert f"simulated {peak}" in repr(closed)
    # the same run replayed open-loop (all 20 sent as recorded, within its first second):
    # its count is the recording's, where the closed loop of 4 users held it lower
    opened = replace(rec, stages=(RecordedStage("concurrency 4", "open"),))
    wide = validate_recording(
        opened, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0, model_chosen=True
    )
    assert _simulated_count(wide.simulated.records) == 20
    assert peak < 20


def test_each_appended_run_says_its_own() -> None:
    rec = read_recording(VLLM / "append.jsonl")
    result = validate_recording(
        rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0, model_chosen=True
    )
    line = next(s for s in result.said if s.startswith("peak concurrent requests"))
    assert "stage 'line 1: 8 req/s, concurrency 2' recorded 9, simulated " in line
    assert "; stage 'line 2: concurrency 4' recorded 20, simulated " in line


def test_a_result_without_the_figure_says_nothing(tmp_path: Path) -> None:
    doc = (VLLM / "rate8.json").read_text().replace(f'"{RESULT_KEY}"', '"not_kept"')
    (tmp_path / "rate8.json").write_text(doc)
    rec = read_recording(tmp_path / "rate8.json")
    assert PEAK_KEY not in rec.config
    result = validate_recording(
        rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0, model_chosen=True
    )
    assert not any(s.startswith("peak concurrent requests") for s in result.said)
