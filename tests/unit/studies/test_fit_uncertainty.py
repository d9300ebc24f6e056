"""Physical fits with their uncertainty (issue: users' own recordings in, trusted answers out,
item 6): a fit is regularised toward the start, parameters a recording cannot identify stay
at the start and are said, each fitted parameter and each predicted figure has a 95 %
interval (in the cost file, the calibrate table and validate's), and a recording too small to
fit is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import kvbudget.cli.recorded as recorded_mod
import kvbudget.studies.calibrate as calibrate_mod
import kvbudget.studies.validate as validate_mod
from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.calibrate import REQUESTS_PER_PARAMETER, calibrate_recording
from kvbudget.studies.fit_uncertainty import (
    IDENTIFIED,
    FitUncertainty,
    identify,
    noise_variance,
    posterior_covariance,
    prior_sd,
)
from tests.unit.studies.test_calibrate_records import ENGINE, ENGINE_FLAGS, TRUTH, recorded_run

START = LinearCostModel(0.02, 2e-5, 1e-4, 5e-7)  # 0.4x to 2.5x off TRUTH


@pytest.fixture(scope="module")
def recording_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("rec") / "records.csv")


@pytest.fixture(scope="module")
def calibration(recording_csv: Path) -> calibrate_mod.RecordedCalibration:
    return calibrate_recording(read_recording(recording_csv), SimConfig(engine=ENGINE), START,
                               fit_overhead=False, max_evals=150)


def test_the_intervals_cover_the_truth_and_the_measured_figures(
        calibration: calibrate_mod.RecordedCalibration) -> None:
    post = calibration.uncertainty
    assert post is not None and set(post.names) == set(calibration.fitted)
    spans = post.intervals()
    for name in ("intercept_s", "per_prefill_token_s", "per_decode_seq_s",
                 "per_context_token_s"):
        lo, hi = spans[name]
        assert lo < calibration.fitted[name] < hi, name
        assert lo <= getattr(TRUTH, name) <= hi, (name, lo, hi, getattr(TRUTH, name))
    # where a measurement of each figure may fall: at 95 %, nearly all of the 13 do
    table = calibration.table[calibration.table["stage"] == "all"].set_index("metric")
    table = table.drop(index="completed")
    inside = ((table["sim_low_95"] <= table["measured"])
              & (table["measured"] <= table["sim_high_95"]))
    assert int(inside.sum()) >= len(table) - 2, table


def test_the_cost_file_carries_the_posterior_and_the_predicted_intervals(
        calibration: calibrate_mod.RecordedCalibration, recording_csv: Path,
        tmp_path: Path) -> None:
    rec = read_recording(recording_csv)
    path = tmp_path / "cost.json"
    calibration.save(path, rec, SimConfig(engine=ENGINE), policy="unlimited")
    section = json.loads(path.read_text())["calibration"]
    unc = section["uncertainty"]
    assert unc["coordinates"] == list(calibration.fitted)
    assert set(unc["interval_95"]) == set(calibration.fitted)
    again = FitUncertainty.from_json(unc).intervals()
    for name, span in calibration.uncertainty.intervals().items():  # type: ignore[union-attr]
        assert again[name] == pytest.approx(span)
    assert set(section["predicted_95"]) >= {"ttft_p50_s", "tpot_p50_s", "e2e_p99_s",
                                            "output_tokens_per_s"}


@pytest.mark.parametrize("damage", [
    {"covariance": [[1.0]]},  # the wrong size
    {"covariance": "many"},
    {"x": [float("nan")] * 4, "covariance": [[float("nan")] * 4] * 4},
    {"coordinates": None},
])
def test_a_damaged_posterior_is_one_line(calibration: calibrate_mod.RecordedCalibration,
                                         damage: dict[str, object]) -> None:
    block = {**calibration.uncertainty.to_json(), **damage}  # type: ignore[union-attr]
    with pytest.raises(ValueError, match=r"calibration\.uncertainty"):
        FitUncertainty.from_json(block)


def test_the_identification_sets_aside_what_the_data_do_not_pin_down() -> None:
    sds = np.array([1.0, 1.0, 1.0])
    # residuals move with the first coordinate strongly; the second and third only together
    # (collinear): one of them can be fitted, not both
    jac = np.array([[5.0, 1.0, 1.0], [0.0, 2.0, 2.0], [3.0, 0.5, 0.5]])
    keep, dropped = identify(jac, 0.01, sds)
    assert 0 in keep and len(keep) == 2 and len(dropped) == 1
    assert all(r > IDENTIFIED for r in dropped.values())
    # a coordinate the residuals do not move at all is never identified
    keep, dropped = identify(np.array([[1.0, 0.0], [2.0, 0.0]]), 0.01, np.array([1.0, 1.0]))
    assert keep == [0] and dropped == {1: pytest.approx(1.0)}
    # the posterior of a well-measured coordinate is far narrower than its prior
    cov = posterior_covariance(np.array([[10.0], [10.0]]), 0.01, np.array([1.0]))
    assert math.sqrt(cov[0, 0]) < 0.01
    assert prior_sd(0.0, math.sqrt(12.0)) == pytest.approx(1.0)


def test_the_noise_is_at_least_what_the_fit_left_over() -> None:
    sampled = np.array([1e-3, 3e-3, np.nan])
    assert noise_variance(sampled) == pytest.approx(2e-3)
    assert noise_variance(np.array([0.0, 0.0])) == pytest.approx(1e-4)  # the floor
    residuals = np.full(12, 0.2)
    assert noise_variance(sampled, residuals, 2) == pytest.approx(12 * 0.04 / 10)


def test_a_parameter_the_recording_cannot_see_is_left_at_the_start(tmp_path: Path) -> None:
    # short prompts and outputs at a light load: the per-context-token term moves a step by
    # under 0.1 %, far below the recording's noise
    rng = np.random.default_rng(5)
    n = 80
    arrival = np.cumsum(rng.exponential(1.0, n))
    prompt = rng.integers(20, 40, n)
    output = rng.integers(5, 10, n)
    ttft = 0.012 + 4e-5 * prompt * rng.lognormal(0, 0.02, n)
    e2e = ttft + output * 0.0125 * rng.lognormal(0, 0.02, n)
    path = tmp_path / "short.csv"
    pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
                  "ttft_s": ttft, "e2e_s": e2e}).to_csv(path, index=False)
    cal = calibrate_recording(read_recording(path), SimConfig(engine=ENGINE), START,
                              fit_overhead=False, max_evals=30)
    assert "per_context_token_s" not in cal.fitted
    assert "does not identify" in cal.fixed["per_context_token_s"]
    assert cal.model.per_context_token_s == START.per_context_token_s  # type: ignore[attr-defined]
    assert "intercept_s" in cal.fitted


def test_a_recording_too_small_to_fit_is_refused_unless_asked(tmp_path: Path) -> None:
    small = recorded_run(tmp_path / "small.csv", n=30)  # 5 coordinates need 50
    out = tmp_path / "cost.json"
    args = ["calibrate", "--records", str(small), "--fit", "linear", "--max-evals", "12",
            "--out", str(out), *ENGINE_FLAGS]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1, res.output
    line = res.stderr.strip().splitlines()[-1]
    assert "too few to fit" in line and "--allow-small-fit" in line and "not written" in line
    assert f"{REQUESTS_PER_PARAMETER} per parameter" in line
    assert not out.exists()
    res = CliRunner().invoke(app, [*args, "--allow-small-fit"])
    assert res.exit_code == 0, res.output
    assert "fitted anyway (--allow-small-fit)" in res.stderr and out.exists()


def test_the_gates_replay_is_the_fits_first_trial(recording_csv: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = validate_mod.simulate_recording

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(validate_mod, "simulate_recording", counting)
    monkeypatch.setattr(calibrate_mod, "simulate_recording", counting)
    monkeypatch.setattr(recorded_mod, "simulate_recording", counting)  # the gate's
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(recording_csv), "--fit",
                                   "linear", "--max-evals", "10", "--out", str(out),
                                   *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    num = json.loads(out.read_text())["calibration"]["num_simulations"]
    assert len(calls) == num  # the start is simulated once, for the gate and the fit


def test_an_interval_stays_within_the_search_bounds() -> None:
    # a coordinate as wide as its prior: its interval is its physical range, not beyond
    post = FitUncertainty(("step_overhead_s", "frontend_overhead_s"), (0.0, 1.0), (True, False),
                          (150e-6, 0.01), ((4.0, 0.0), (0.0, 100.0)), 1e-4, 200,
                          ((0.0, math.log(6e-3 / 150e-6)), (0.0, 100.0)))
    spans = post.intervals()
    assert spans["step_overhead_s"] == pytest.approx((150e-6, 6e-3))
    assert spans["frontend_overhead_s"] == pytest.approx((0.0, 0.01 + 1.96 * 10 * 0.01),
                                                         rel=1e-3)
    assert FitUncertainty.from_json(post.to_json()).intervals() == spans
