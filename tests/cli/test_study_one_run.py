"""Studies of a trace whose every draw is fixed ran their replications (3 by default) and
tune's validation seeds though each replication was the same run (said on stderr, shown as
'± 0' columns). They now run once and say why in one line; where any draw remains (a sampled
trace, a synthetic workload, speculative decoding, --interval, an axis that may draw) the
replications are kept. The one run is today's first replication, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.simulator.scenario import make_scenario, scenario_from_dict
from kvbudget.studies import capacity as capacity_module
from kvbudget.studies import compare as compare_module
from kvbudget.studies import sweep as sweep_module
from kvbudget.studies.capacity import CapacitySpec, capacity
from kvbudget.studies.compare import compare
from kvbudget.studies.setting import one_run_said
from kvbudget.studies.sweep import Axis, SweepPlan, run_sweep
from tests.conftest import small_scenario_dict

runner = CliRunner()
ONE_RUN = "one run: the trace's every draw is fixed"
SAME = "replications: each runs the trace's same requests"  # said in its place by the one run


def replicated(monkeypatch: pytest.MonkeyPatch) -> None:
    """Today's replicated runs, as the library ran them before it decided to run once: the
    decision (``once_where_fixed``) kept out, so every replication asked for runs."""
    for module in (capacity_module, compare_module, sweep_module):
        monkeypatch.setattr(module, "once_where_fixed",
                            lambda scn, n, varies=(), interval=None: (n, None))


def _trace(tmp_path: Path, n: int = 60) -> Path:
    rng = np.random.default_rng(5)  # timed rows with lengths: the file fixes every draw
    t = np.cumsum(rng.exponential(0.25, n))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": float(a), "input_length": int(p), "output_length": int(o)})
        + "\n" for a, p, o in zip(t, rng.integers(50, 800, n), rng.integers(5, 200, n),
                                  strict=True)))
    return path


def test_one_run_is_said_only_where_every_draw_is_fixed(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    fixed = make_scenario(trace=trace)
    said = one_run_said(fixed)
    assert said is not None and said.startswith(ONE_RUN)
    assert one_run_said(fixed, ["policy", "rate_scale", "engine.max_num_seqs"]) == said
    kept = {  # a draw remains in each
        "sampled trace": (make_scenario(trace=trace, trace_options={"sample_fraction": 0.5}),
                          ()),
        "synthetic workload": (scenario_from_dict(small_scenario_dict(n=20), tmp_path), ()),
        "speculative decoding": (make_scenario(trace=trace, overrides=[
            'engine.speculative_config.method="ngram"',
            "engine.speculative_config.num_speculative_tokens=2",
            "engine.speculative_config.acceptance_rate=0.7"]), ()),
        "an axis over the workload": (fixed, ["workload.options.sample_fraction"]),
        "an axis over the seed": (fixed, ["seed"]),
    }
    for what, (scn, varies) in kept.items():
        assert one_run_said(scn, varies) is None, what
    assert one_run_said(fixed, interval=0.9) is None  # each replication draws the step model


def _table(df: pd.DataFrame) -> pd.DataFrame:
    df = df.drop(columns=[c for c in df.columns if "wall" in c or c == "search"])
    return df.sort_values([c for c in ("run_key", "rate_scale") if c in df.columns]
                          ).reset_index(drop=True)


def test_a_sweep_of_a_fixed_trace_runs_once_and_is_the_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "sweep"
    res = runner.invoke(app, ["sweep", "--trace", str(trace), "--out", str(out), "-j", "1",
                              "--policies", "conservative,overcommit", "--no-plot"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count(ONE_RUN) == 1 and SAME not in res.stderr and "2 configurations x 1 replication" in res.stderr
    assert "replications: each runs" not in res.stderr  # the one-run line in its place
    assert "±" not in res.stdout
    once = pd.read_parquet(out / "sweep.parquet")
    assert once["replication"].tolist() == [0, 0]
    # today's three replications: each the same run, the first of them this one exactly
    replicated(monkeypatch)
    three = run_sweep(SweepPlan(make_scenario(trace=trace),
                                (Axis("policy", ("conservative", "overcommit")),), 3, None))
    cols = [c for c in three.columns if c not in ("seed", "run_key", "replication")
            and "wall" not in c]
    by_rep = [three[three["replication"] == r][cols].reset_index(drop=True) for r in range(3)]
    pd.testing.assert_frame_equal(by_rep[0], by_rep[1])
    pd.testing.assert_frame_equal(by_rep[0], by_rep[2])
    first = three[three["replication"] == 0]
    pd.testing.assert_frame_equal(_table(once), _table(first))


def test_a_capacity_search_of_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "cap"
    res = runner.invoke(app, ["capacity", "--trace", str(trace), "--out", str(out), "-j", "1",
                              "--rel-tol", "0.3", "--no-plot"])
    assert res.exit_code == 0, res.output
    assert res.stderr.count(ONE_RUN) == 1 and SAME not in res.stderr and "mean over 1 replication" in res.stdout
    assert json.loads((out / "capacity.json").read_text())["replications"] == 1
    once = pd.read_parquet(out / "evidence.parquet")
    replicated(monkeypatch)
    three = capacity(CapacitySpec(make_scenario(trace=trace), rel_tol=0.3,
                                  replications=3)).table()
    first = three[three["replication"] == 0]
    assert len(three) == 3 * len(once)  # the same loads visited, each three times
    pd.testing.assert_frame_equal(_table(once), _table(first))


@pytest.mark.parametrize(("study", "flags"), [
    ("plan", ["--gpus", "H100-80GB", "--replicas", "1", "--slo",
              "overall_slo_attainment>=0.1"]),
    ("tune", ["--param", "policy_params.overcommit_ratio=0.3:0.9", "--policy", "overcommit",
              "--constraint", "overall_slo_attainment>=0.1", "--grid-points", "2",
              "--refine-evals", "0", "--objective", "overall_sustained_output_tokens_per_s"]),
])
def test_plan_and_tune_of_a_fixed_trace_run_once(tmp_path: Path, study: str,
                                                 flags: list[str]) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / study
    res = runner.invoke(app, [study, "--trace", str(trace), "--out", str(out), "-j", "1",
                              *flags])
    assert res.exit_code == 0, res.output
    assert res.stderr.count(ONE_RUN) == 1 and SAME not in res.stderr
    said = json.loads((out / f"{study}.json").read_text())
    assert said["replications"] == 1
    if study == "tune":  # no fresh seeds: they would re-run the same runs
        assert said["validation"] is None
    # a draw left (a sampled trace): the replications are kept, no line
    out2 = tmp_path / f"{study}2"
    res = runner.invoke(app, [study, "--trace", str(trace), "--out", str(out2), "-j", "1",
                              "--sample-fraction", "0.9", *flags])
    assert res.exit_code == 0, res.output
    assert ONE_RUN not in res.stderr
    assert json.loads((out2 / f"{study}.json").read_text())["replications"] > 1


def test_compare_r_of_a_fixed_trace_runs_once_as_its_first_replication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", "--trace", str(trace), "-r", "3", "--seed", "4",
                              "--policies", "conservative,overcommit", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert res.stderr.count(ONE_RUN) == 1 and SAME not in res.stderr and "±" not in res.stdout
    assert f"wrote {out}/runs.parquet, compare.csv" in res.stdout
    once = pd.read_parquet(out / "runs.parquet")
    replicated(monkeypatch)
    three = compare(make_scenario(trace=trace, seed=4), ["conservative", "overcommit"],
                    replications=3, root_seed=4).runs
    assert once["replication"].tolist() == [0, 0] and len(three) == 6
    # one run is compare's own (the scenario's seed, --seed): its figures are replication 0's
    figures = [c for c in once.columns if c != "seed" and "wall" not in c]
    pd.testing.assert_frame_equal(
        once[figures].reset_index(drop=True),
        three[three["replication"] == 0][figures].reset_index(drop=True))
