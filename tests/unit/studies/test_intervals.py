"""Predictions with intervals (kvbudget.studies.intervals, ``simulate --interval``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, save_cost_model
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.perf.step_uncertainty import STATED_RANGES
from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import make_scenario
from kvbudget.studies import intervals as iv
from kvbudget.studies.fit_uncertainty import FitUncertainty

runner = CliRunner()


def h100_model() -> VllmStepModel:
    return VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-8B"))


def _values(model: object) -> dict[str, float]:
    assert isinstance(model, VllmStepModel)  # no structural error on H100
    return {name: float(getattr(model, name)) for name in STATED_RANGES}


def test_stated_draws_spread_each_constant_symmetrically_around_its_default() -> None:
    model = h100_model()
    draws = iv.stated_draws(model)
    rng = np.random.default_rng(7)
    sample = [_values(draws.draw(rng).cost_model(model)[0]) for _ in range(4000)]
    assert set(sample[0]) == set(STATED_RANGES)
    for name, (lo, hi, _source) in STATED_RANGES.items():
        base = float(getattr(model, name))
        logs = np.log([d[name] / base for d in sample])
        half = math.log(hi / lo) / 2
        assert logs.max() <= half + 1e-12 and logs.min() >= -half - 1e-12, name
        if name in iv.FRACTIONS:
            assert max(d[name] for d in sample) <= 1.0
        if base * math.exp(half) <= 1.0:  # not cut at 1: uniform in log space, centred
            assert abs(float(logs.mean())) < 0.05 * half, name
            assert float(logs.std()) == pytest.approx(half / math.sqrt(3), rel=0.05), name
    # the same generator state gives the same draws
    assert draws.draw(np.random.default_rng(3)) == draws.draw(np.random.default_rng(3))


def test_a_model_without_stated_ranges_is_refused() -> None:
    with pytest.raises(ValueError, match="no stated uncertainty"):
        iv.stated_draws(LinearCostModel(0.01, 0.0, 0.0, 0.0))


def test_posterior_draws_follow_the_fits_covariance_within_its_bounds() -> None:
    post = FitUncertainty(("mem_efficiency", "step_overhead_s"), (0.0, 0.1), (True, True),
                          (0.8, 2e-4), ((0.01, 0.0), (0.0, 0.04)), 0.01, 10,
                          ((-0.1, 0.1), (-1.0, 1.0)))
    draws = iv.posterior_draws(post)
    rng = np.random.default_rng(1)
    sample = [dict(draws.draw(rng).values) for _ in range(4000)]
    x_mem = np.log([d["mem_efficiency"] / 0.8 for d in sample])
    x_step = np.log([d["step_overhead_s"] / 2e-4 for d in sample])
    assert x_mem.min() >= -0.1 - 1e-12 and x_mem.max() <= 0.1 + 1e-12  # cut to the bounds
    assert float(x_step.mean()) == pytest.approx(0.1, abs=0.02)
    assert float(x_step.std()) == pytest.approx(0.2, rel=0.05)
    assert abs(float(np.corrcoef(x_mem, x_step)[0, 1])) < 0.05


def test_intervals_are_the_draws_quantiles() -> None:
    """At positions p (n + 1): 0.05 x 101 = 5.05 and 0.95 x 101 = 95.95 of the values 1 ..
    100 (numpy's default, p (n - 1) + 1, would give 5.95 and 95.05: an interval that covers a
    further draw only (n - 1) / (n + 1) x 0.9 of the time)."""
    values = [{"overall": {"x": float(v), "y": math.nan}} for v in range(1, 101)]
    band = iv.intervals_of(values, 0.9)["overall"]
    assert band["x"] == pytest.approx((5.05, 95.95))
    assert all(math.isnan(v) for v in band["y"])


def test_an_interval_covers_a_further_draw_at_its_level() -> None:
    """Forty draws and one more from the same distribution, many times over: the interval
    holds the further draw 90 % of the time (numpy's default quantiles: 0.9 x 39 / 41 =
    0.856)."""
    rng = np.random.default_rng(11)
    sample = rng.standard_normal((20_000, 41))
    held = 0
    for row in sample:
        lo, hi = iv.intervals_of([{"s": {"x": float(v)}} for v in row[:40]], 0.9)["s"]["x"]
        held += lo <= row[40] <= hi
    assert held / len(sample) == pytest.approx(0.90, abs=0.006)


def test_headline_reads_the_summary_figures() -> None:
    scn = make_scenario(None, ("workload.duration_s=10",))
    result = simulate(scn.workload(), scn.make_policy(), scn.sim_config())
    figs = iv.headline(result.summary)
    assert set(figs) == {"overall", *result.summary["tiers"]}
    assert figs["overall"]["ttft_s.p99"] == result.summary["overall"]["ttft_s"]["p99"]
    assert figs["overall"]["completed"] == result.summary["overall"]["completed"]


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"{0.05 * i:.2f},{200 + 10 * i},{40 + i}" for i in range(60)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_zero_width_ranges_collapse_the_interval_to_the_run(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """With every stated range one point and a trace (the seed draws nothing), each draw is
    the nominal run: every interval is that run's figure."""
    monkeypatch.setattr(iv, "STATED_RANGES", {k: (1.0, 1.0, "") for k in STATED_RANGES})
    scn = make_scenario(None, (), trace=_trace(tmp_path))
    result, band = iv.scenario_intervals(scn, None, level=0.9, num_draws=3)
    plain = simulate(scn.workload(), scn.make_policy(), scn.sim_config())
    assert result.summary["overall"] == plain.summary["overall"]
    for scope, figs in iv.headline(result.summary).items():
        for name, value in figs.items():
            lo, hi = band.figures[scope][name]
            if math.isfinite(value):
                assert lo == hi == pytest.approx(value, rel=1e-12), (scope, name)


def test_a_slower_draw_widens_the_interval_on_the_slow_side(tmp_path: Path) -> None:
    scn = make_scenario(None, (), trace=_trace(tmp_path))
    result, band = iv.scenario_intervals(scn, None, level=0.9, num_draws=12)
    tpot = iv.headline(result.summary)["overall"]["tpot_s.p50"]
    lo, hi = band.figures["overall"]["tpot_s.p50"]
    assert lo < tpot < hi and hi / lo > 1.05
    assert band.to_json()["method"].startswith("each draw: the next seed")
    # the throughput over the time the work took moves with the step model's speed (over the
    # arrival window it would not: the same requests complete in every draw)
    sustained = iv.headline(result.summary)["overall"]["sustained_output_tokens_per_s"]
    lo, hi = band.figures["overall"]["sustained_output_tokens_per_s"]
    assert lo < sustained < hi and hi / lo > 1.001


def test_cli_prints_and_writes_the_intervals(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--interval", "0.8",
                              "--interval-draws", "4"])
    assert res.exit_code == 0, res.stdout
    assert "80 % intervals over 4 draws" in res.stdout and "TPOT p50" in res.stdout
    rows = [line.split() for line in res.stdout.splitlines() if line.startswith("overall")]
    assert ["overall", "out", "tok/s"] in [r[:3] for r in rows]
    # the arrival window's throughput gets no interval: narrow whatever the draws
    assert not any(r[1:4] == ["tok/s", "arr.", "win"] for r in rows)
    assert ("out tok/s: output tokens of the completed requests over the time the work took, "
            "first arrival to last finish") in " ".join(res.stdout.split())
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--interval", "0.8",
                              "--interval-draws", "4", "--json"])
    intervals = json.loads(res.stdout)["intervals"]
    assert intervals["level"] == 0.8 and intervals["num_draws"] == 4
    low, high = intervals["figures"]["overall"]["tpot_s.p50"]
    assert low <= high


@pytest.mark.parametrize(("args", "needle"), [
    (["--interval", "1.5"], "--interval: interval level must be between 0 and 1"),
    (["--interval", "0.9", "--interval-draws", "1"], "interval draws must be at least 2"),
])
def test_cli_bad_interval_is_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    res = runner.invoke(app, ["simulate", "--trace", str(_trace(tmp_path)), *args])
    assert res.exit_code == 2
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_cost_file_without_a_posterior_is_refused_by_name(tmp_path: Path) -> None:
    cost = tmp_path / "linear.json"
    save_cost_model(LinearCostModel(0.01, 1e-5, 1e-4, 1e-7), cost)
    res = runner.invoke(app, ["simulate", "--trace", str(_trace(tmp_path)), "--cost-model",
                              str(cost), "--interval", "0.9", "--interval-draws", "3"])
    assert res.exit_code == 2
    assert str(cost) in res.stderr and "no calibration.uncertainty" in res.stderr


def test_compare_gives_each_policy_intervals_over_the_same_draws(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path))
    res = runner.invoke(app, ["compare", "--trace", trace, "--policies",
                              "unlimited,conservative", "--interval", "0.9",
                              "--interval-draws", "3", "--json"])
    assert res.exit_code == 0, res.stdout
    summaries = json.loads(res.stdout)
    assert [s["policy"] for s in summaries] == ["unlimited", "conservative"]
    for s in summaries:
        assert s["intervals"]["num_draws"] == 3
    # a 60-request trace fits the KV cache at once: both policies run the same requests, so
    # the same draws give the same TPOT intervals
    tpot = [s["intervals"]["figures"]["overall"]["tpot_s.p50"] for s in summaries]
    assert tpot[0] == tpot[1]
    res = runner.invoke(app, ["compare", "--trace", trace, "--policies", "unlimited",
                              "--interval", "0.9", "--interval-draws", "3"])
    assert res.exit_code == 0 and "policy unlimited:" in res.stdout


def test_compare_interval_with_replications_is_refused() -> None:
    res = runner.invoke(app, ["compare", "-r", "3", "--interval", "0.9"])
    assert res.exit_code == 2
    assert "--interval: with --replications" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
