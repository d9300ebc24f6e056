"""The library's studies (``CapacitySpec``, ``PlanSpec``, ``TuneSpec``, ``SweepPlan``,
``compare(replications=...)``, as notebooks and the README use them) ran every replication of
a trace whose every draw is fixed, each the same run, where ``kvbudget capacity``, ``plan``,
``tune``, ``sweep`` and ``compare -r`` ran once and said why. The spec now decides
(:func:`~kvbudget.studies.setting.once_where_fixed`): it runs once, keeps the line
(``once``) and its result's setting says it in place of the replications line; the one run
is today's first replication, row for row. Where any draw remains (a sampled trace) the
replications are kept."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.simulator.scenario import Scenario, make_scenario
from kvbudget.studies import capacity as capacity_module
from kvbudget.studies import compare as compare_module
from kvbudget.studies import plan as plan_module
from kvbudget.studies import sweep as sweep_module
from kvbudget.studies import tune as tune_module
from kvbudget.studies.capacity import CapacitySpec, capacity
from kvbudget.studies.compare import compare
from kvbudget.studies.plan import PlanSpec, plan
from kvbudget.studies.setting import SAME_REQUESTS
from kvbudget.studies.sweep import Axis, SweepPlan, run_sweep
from kvbudget.studies.tune import Constraint, Param, TuneSpec, tune

ONE_RUN = "one run: the trace's every draw is fixed"
POLICIES = ("conservative", "overcommit")


def _trace(tmp_path: Path, n: int = 60) -> Path:
    rng = np.random.default_rng(5)  # timed rows with lengths: the file fixes every draw
    t = np.cumsum(rng.exponential(0.25, n))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": float(a), "input_length": int(p), "output_length": int(o)})
        + "\n" for a, p, o in zip(t, rng.integers(50, 800, n), rng.integers(5, 200, n),
                                  strict=True)))
    return path


def _replicated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's runs: the decision kept out of every study, so each replication asked runs."""
    for module in (capacity_module, compare_module, plan_module, sweep_module, tune_module):
        monkeypatch.setattr(module, "once_where_fixed",
                            lambda scn, n, varies=(), interval=None: (n, None))


def _said_once(setting: tuple[str, ...]) -> None:
    assert sum(line.startswith(ONE_RUN) for line in setting) == 1, setting
    assert SAME_REQUESTS not in setting


def _first(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Replication 0's rows, less what a run's wall clock or seed changes, in key order."""
    df = table[table["replication"] == 0]
    df = df.drop(columns=[c for c in df.columns if "wall" in c or c in ("seed", "run_key")])
    return df.sort_values([k for k in keys if k in df.columns]).reset_index(drop=True)


def _sampled(trace: Path) -> Scenario:
    return make_scenario(trace=trace, trace_options={"sample_fraction": 0.9})


def test_a_sweep_plan_of_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    axes = (Axis("policy", POLICIES),)
    sweep = SweepPlan(make_scenario(trace=trace), axes, 3, None)
    assert sweep.replications == 1 and len(sweep.runs) == 2
    assert sweep.once is not None and sweep.once.startswith(ONE_RUN)
    once = run_sweep(sweep, out_dir=tmp_path / "sweep")
    assert json.loads((tmp_path / "sweep" / sweep_module.MANIFEST_FILE).read_text())["once"] == sweep.once
    kept = SweepPlan(_sampled(trace), axes, 3, None)
    assert kept.replications == 3 and kept.once is None
    assert SweepPlan(make_scenario(trace=trace), (Axis("closed_loop.num_users", (2, 4)),),
                     3).replications == 3  # an axis that may draw
    _replicated(monkeypatch)
    three = run_sweep(SweepPlan(make_scenario(trace=trace), axes, 3, None))
    assert len(three) == 6
    pd.testing.assert_frame_equal(_first(once, ["point"]), _first(three, ["point"]))


def test_a_capacity_spec_of_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    spec = CapacitySpec(make_scenario(trace=trace), POLICIES, rel_tol=0.3, replications=3)
    assert spec.replications == 1 and spec.once is not None
    result = capacity(spec)
    _said_once(result.setting)
    assert "(mean over 1 replication)" in " ".join(repr(result).split())
    assert CapacitySpec(_sampled(trace), rel_tol=0.3, replications=3).replications == 3
    assert CapacitySpec(make_scenario(trace=trace), rel_tol=0.3, replications=3,
                        interval=0.9).replications == 3  # each draws the step model
    _replicated(monkeypatch)
    three = capacity(CapacitySpec(make_scenario(trace=trace), POLICIES, rel_tol=0.3,
                                  replications=3))
    assert SAME_REQUESTS in three.setting
    once, first = result.table(), three.table()
    assert len(first) == 3 * len(once)  # the same loads visited, each three times
    pd.testing.assert_frame_equal(_first(once, ["policy", "rate_scale"]),
                                  _first(first, ["policy", "rate_scale"]))
    assert [c.capacity_rps for c in result.capacities] == [
        c.capacity_rps for c in three.capacities]


def test_a_plan_spec_of_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)

    def spec_of(scn: Scenario) -> PlanSpec:
        return PlanSpec(scn, gpus=("H100-80GB",), replicas=(1, 2), replications=3,
                        slos=(Constraint.parse("overall_slo_attainment>=0.1"),))

    spec = spec_of(make_scenario(trace=trace))
    assert spec.replications == 1 and spec.once is not None
    result = plan(spec)
    _said_once(result.setting)
    assert spec_of(_sampled(trace)).replications == 3
    _replicated(monkeypatch)
    three = plan(spec_of(make_scenario(trace=trace)))
    assert [(c.gpu, c.replicas) for c in result.candidates] == [
        (c.gpu, c.replicas) for c in three.candidates]
    keys = ["point", "gpu", "policy", "num_replicas"]
    pd.testing.assert_frame_equal(_first(pd.DataFrame(result.runs), keys),
                                  _first(pd.DataFrame(three.runs), keys))


def test_a_tune_spec_of_a_fixed_trace_runs_once_without_validation_seeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)

    def spec(scn: Scenario) -> TuneSpec:
        return TuneSpec(scn, (Param.parse("policy_params.overcommit_ratio=0.3:0.9"),),
                        objective="overall_sustained_output_tokens_per_s",
                        constraints=(Constraint.parse("overall_slo_attainment>=0.1"),),
                        replications=3, grid_points=2, refine_evals=0, validate=2)

    fixed = make_scenario(trace=trace, policy="overcommit")
    once = spec(fixed)
    assert (once.replications, once.validate) == (1, 0) and once.once is not None
    result = tune(once)
    _said_once(result.setting)
    assert result.validation is None
    kept = spec(make_scenario(trace=trace, policy="overcommit",
                              trace_options={"sample_fraction": 0.9}))
    assert (kept.replications, kept.validate, kept.once) == (3, 2, None)
    _replicated(monkeypatch)
    three = tune(spec(fixed))
    assert three.validation is not None
    assert result.best is not None and three.best is not None
    assert result.best.params == three.best.params
    keys = ["policy_params.overcommit_ratio", "replication"]
    pd.testing.assert_frame_equal(_first(result.table(), keys),
                                  _first(three.table()[three.table()["replication"] < 3], keys))


def test_compare_replicated_on_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    once = compare(make_scenario(trace=trace, seed=4), list(POLICIES), replications=3,
                   root_seed=4)
    assert once.replications == 1 and once.runs["replication"].tolist() == [0, 0]
    _said_once(once.setting)
    kept = compare(_sampled(trace), list(POLICIES), replications=2)
    assert kept.replications == 2 and not any(s.startswith(ONE_RUN) for s in kept.setting)
    _replicated(monkeypatch)
    three = compare(make_scenario(trace=trace, seed=4), list(POLICIES), replications=3,
                    root_seed=4)
    figures = [c for c in once.runs.columns if c != "seed" and "wall" not in c]
    pd.testing.assert_frame_equal(
        once.runs[figures].reset_index(drop=True),
        three.runs[three.runs["replication"] == 0][figures].reset_index(drop=True))
