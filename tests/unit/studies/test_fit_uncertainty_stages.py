"""The 95 % intervals of a recording with several load stages (a GuideLLM sweep, ``vllm bench
serve`` at several rates): each interval measures the figure it is printed beside.

The comparison table counts output tokens/s over the time the stages ran (each stage's first
arrival to its last finish, their union), not the idle time between them
(``tests/unit/analysis/test_validation_stages.py``); the intervals were taken over the whole
recording's span, idle time and all. On GuideLLM's sweep fixture ``validate --records``
printed output tokens/s 69.4 (measured 91.3) beside a 95 % interval of 0.51-7.79: an interval
of a figure nobody was shown, holding neither it nor the measurement.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.analysis.validation import OVERALL, THROUGHPUT_SAID
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.calibrate import calibrate_recording, validation_intervals
from kvbudget.studies.fit_uncertainty import (
    INTERVAL_COLUMNS,
    compared_stats,
    log_stats,
    with_intervals,
)
from kvbudget.studies.validate import validate_recording
from tests.conftest import make_workload
from tests.unit.studies.test_calibrate_records import ENGINE, TRUTH

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SWEEP = FIXTURES / "guidellm-0.8.1" / "sweep.json"
GAP_S = 120.0
"""Idle time between the two stages (a load tool computing its next rate)."""


def _overall(table: pd.DataFrame) -> pd.DataFrame:
    sub = table[(table["stage"] == OVERALL) & np.isfinite(table[INTERVAL_COLUMNS[0]])]
    return sub.set_index("metric")


def _brackets(table: pd.DataFrame, column: str) -> pd.Series:
    sub = _overall(table)
    return (sub[INTERVAL_COLUMNS[0]] <= sub[column]) & (sub[column] <= sub[INTERVAL_COLUMNS[1]])


def staged_run(path: Path, n: int = 160, seed: int = 3, noise: float = 0.02) -> Path:
    """Two stages simulated with TRUTH, ``GAP_S`` apart, each request labelled with its stage;
    TTFT and E2E with noise."""
    rng = np.random.default_rng(seed)
    half = n // 2
    arrival = np.concatenate([np.cumsum(rng.exponential(1 / 3.0, half)),
                              np.cumsum(rng.exponential(1 / 10.0, n - half))])
    arrival[half:] += arrival[half - 1] + GAP_S
    arrival -= arrival[0]
    prompt = rng.integers(50, 1500, n)
    output = rng.integers(20, 300, n)
    workload = make_workload(arrival, prompt, output, max_output_tokens=output)
    sim = simulate(workload, make_policy("unlimited"),
                   SimConfig(engine=ENGINE, cost_model=TRUTH)).records
    ttft = sim["ttft_s"].to_numpy() * rng.lognormal(0, noise, n)
    e2e = np.maximum(sim["e2e_s"].to_numpy() * rng.lognormal(0, noise, n), ttft)
    stage = ["0: light"] * half + ["1: heavy"] * (n - half)
    pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
                  "ttft_s": ttft, "e2e_s": e2e, "stage": stage}).to_csv(path, index=False)
    return path


def test_the_stats_count_throughput_over_the_stages_not_the_gap_between() -> None:
    arrival = np.array([0.0, 1.0, 100.0, 101.0])
    records = pd.DataFrame({"request_id": np.arange(4), "arrival_s": arrival,
                            "status": "completed", "ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 1.0,
                            "finished_s": arrival + 1.0, "output_tokens": 100})
    stages = ["a", "a", "b", "b"]
    keys = ("output_tokens_per_s",)
    assert np.exp(log_stats(records, keys, stages)) == pytest.approx(400 / 4.0)
    assert np.exp(log_stats(records, keys)) == pytest.approx(400 / 102.0)
    # of the compared rows (the measured ones completed, of ``rows``), each in its stage
    rows = np.array([True, True, True, False])
    assert np.exp(compared_stats(records, records, rows, keys, stages=stages)) == (
        pytest.approx(300 / 3.0))
    with pytest.raises(ValueError, match="3 stage labels for 4"):
        compared_stats(records, records, None, keys, stages=stages[:3])
    # and the line under every comparison table says so
    assert "not the idle time between stages" in THROUGHPUT_SAID


def test_a_staged_recordings_intervals_hold_the_figures_they_sit_beside(tmp_path: Path) -> None:
    # the simulator's own recording (TRUTH, 2 % noise), two stages two minutes apart: the fit
    # starts at TRUTH, so the measured figures are where the simulated ones should be
    rec = read_recording(staged_run(tmp_path / "staged.csv"))
    config = SimConfig(engine=ENGINE)
    cal = calibrate_recording(rec, config, TRUTH, fit_overhead=False, max_evals=20)
    assert cal.uncertainty is not None
    inside = _brackets(cal.table, "simulated")
    assert inside.all(), _overall(cal.table)
    # where a measurement may fall: the throughput and nearly all of the rest
    measured = _brackets(cal.table, "measured")
    assert measured["output_tokens_per_s"], _overall(cal.table)
    assert int(measured.sum()) >= len(measured) - 2, _overall(cal.table)
    # the same figures over other rows (validate --holdout) are taken the same way
    again = cal.intervals_on(rec.records(), None)
    sub = _overall(cal.table)
    assert again["output_tokens_per_s"] == pytest.approx(
        tuple(sub.loc["output_tokens_per_s", list(INTERVAL_COLUMNS)]))
    # validate --records --cost-model: the intervals from the file's posterior
    result = validate_recording(rec, config, cost_model=cal.model,
                                frontend_overhead_s=cal.frontend_overhead_s)
    spans = validation_intervals(rec, config, cal.model, cal.frontend_overhead_s,
                                 cal.uncertainty, simulated=result.simulated.records)
    table = with_intervals(result.table, spans)
    assert _brackets(table, "simulated").all(), _overall(table)
    assert _brackets(table, "measured")["output_tokens_per_s"], _overall(table)


def test_a_guidellm_sweeps_intervals_hold_the_figures_they_sit_beside() -> None:
    # GuideLLM 0.8.1's sweep (synchronous, throughput, one constant rate; about a minute of
    # GuideLLM's own work between them): output tokens/s 69.4 was printed beside 0.51-7.79
    rec = read_recording(SWEEP)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=4000, max_num_seqs=64,
                                           max_num_batched_tokens=2048))
    cal = calibrate_recording(rec, config, LinearCostModel(0.02, 2e-5, 1e-4, 5e-7),
                              fit_overhead=False, max_evals=1)
    assert cal.uncertainty is not None
    inside = _brackets(cal.table, "simulated")
    assert "output_tokens_per_s" in inside.index
    assert inside.all(), _overall(cal.table)
