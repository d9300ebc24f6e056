"""Physical fits (issue: users' own recordings in, trusted answers out): a calibration of the
default step model searches each parameter only inside its published range
(``studies.calibrate.PHYSICAL_RANGES``), where an unbounded fit to a slow recording lands on
impossible values (memory efficiency 0.30, GEMM efficiency 0.23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.perf.step_time import VllmStepModel
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.calibrate import PHYSICAL_RANGES, calibrate_recording
from tests.unit.studies.test_calibrate_records import ENGINE, recorded_run


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("rec") / "records.csv", n=60)


def test_a_default_model_fit_stays_in_the_physical_ranges(small_csv: Path,
                                                          tmp_path: Path) -> None:
    rec = read_recording(small_csv)
    config = SimConfig(engine=ENGINE)
    start = config.resolved_cost_model()
    assert isinstance(start, VllmStepModel)
    # the recording was made by a slow linear model: an unbounded fit drives the default
    # model's efficiencies far below anything measured
    cal = calibrate_recording(rec, config, start, max_evals=40)
    moved = 0
    for name, value in cal.fitted.items():
        if name in PHYSICAL_RANGES:
            lo, hi = PHYSICAL_RANGES[name]
            first = cal.start[name]
            assert min(lo, first) - 1e-12 <= value <= max(hi, first) + 1e-12, name
            moved += value != first
    assert moved > 0 and cal.loss < cal.start_loss
    cal.save(tmp_path / "cost.json", rec, config, policy="unlimited")
    ranges = json.loads((tmp_path / "cost.json").read_text())["calibration"]["physical_ranges"]
    assert ranges and all(list(PHYSICAL_RANGES[n]) == r for n, r in ranges.items())
