"""Sweeps: grids, common random numbers, the tidy table, incremental output and resume."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.analysis.pareto import pareto_mask, plot_attainment, plot_pareto
from kvbudget.cli.main import app
from kvbudget.simulator.scenario import scenario_from_dict
from kvbudget.studies.executors import LocalExecutor
from kvbudget.studies.sweep import (
    Axis,
    RunStore,
    SweepPlan,
    expand_grid,
    flatten_summary,
    metric_range,
    parse_axis,
    replication_seeds,
    run_sweep,
    scale_rate,
    summarize_points,
    t_interval,
)
from kvbudget.workloads import from_columns
from tests.conftest import small_scenario_dict

T = TypeVar("T")
R = TypeVar("R")


def small_scenario(n: int = 200, rate: float = 6.0) -> dict[str, Any]:
    """A few hundred requests on a small KV cache (2,500 blocks) so that policies differ."""
    return small_scenario_dict(n, rate, policy_params={"overcommit_ratio": 0.5})


def metric_view(df: pd.DataFrame) -> pd.DataFrame:
    """The table without its wall-clock column, in a canonical order."""
    return df.drop(columns=["wall_time_s"]).sort_values("run_key").reset_index(drop=True)



# --- seeds and load --------------------------------------------------------------------------


def test_replication_seeds_are_children_of_one_seed_sequence() -> None:
    seeds = replication_seeds(7, 5)
    assert seeds == replication_seeds(7, 5)
    assert len(set(seeds)) == 5
    assert replication_seeds(7, 2, start=3) == seeds[3:]
    assert replication_seeds(8, 5) != seeds
    assert all(0 <= s < 2**63 for s in seeds)


def test_scale_rate_compresses_arrivals_and_keeps_deadline_delays() -> None:
    w = from_columns([1.0, 2.0, 5.0], [10, 20, 30], [1, 2, 3],
                     deadline_s=[3.0, math.nan, 6.5])
    s = scale_rate(w, 2.0)
    np.testing.assert_allclose(s.arrival_s, [1.0, 1.5, 3.0])
    np.testing.assert_allclose(s.deadline_s - s.arrival_s, w.deadline_s - w.arrival_s)
    np.testing.assert_array_equal(s.prompt_tokens, w.prompt_tokens)
    assert scale_rate(w, 1.0) is w
    with pytest.raises(ValueError, match="rate_scale must be a finite number > 0, got 0"):
        scale_rate(w, 0)


# --- summary columns -------------------------------------------------------------------------


def test_flatten_summary_names_the_metrics_as_columns() -> None:
    summary = {
        "policy": "x", "seed": 3, "wall_time_s": 0.5, "duration_s": 10.0,
        "overall": {"offered": 4, "slo_attainment": 0.75, "ttft_s": {"p99": 1.5, "mean": 1.0},
                    "rejections_by_reason": {"deadline": 1}},
        "tiers": {"interactive": {"ttft_s": {"p99": 2.5}, "output_tokens_per_s": 9.0},
                  "batch": {"output_tokens_per_s": 12.0, "tpot_s": {"p50": 0.02}}},
        "kv": {"used_mean": 3.0}, "engine": {"num_steps": 8}, "policy_params": {"a": 1},
    }
    flat = flatten_summary(summary)
    assert flat["interactive_ttft_p99_s"] == 2.5
    assert flat["batch_output_tokens_per_s"] == 12.0
    assert flat["overall_slo_attainment"] == 0.75
    assert flat["overall_ttft_mean_s"] == 1.0
    assert flat["batch_tpot_p50_s"] == 0.02
    assert flat["overall_reason_deadline"] == 1
    assert flat["kv_used_mean"] == 3.0 and flat["engine_num_steps"] == 8
    assert flat["duration_s"] == 10.0
    assert "policy" not in flat and "seed" not in flat


# --- grids -----------------------------------------------------------------------------------


def test_parse_axis_lists_ranges_and_strings() -> None:
    assert parse_axis("engine.max_num_seqs=64,128").values == (64, 128)
    assert parse_axis("policy_params.overcommit_ratio=0.2:1:5").values == (0.2, 0.4, 0.6, 0.8,
                                                                            1.0)
    assert parse_axis("gpu=H100-80GB,A100-80GB").values == ("H100-80GB", "A100-80GB")
    assert parse_axis("engine.skip_ahead=true,false").values == (True, False)
    with pytest.raises(ValueError, match="expected key=v1,v2"):
        parse_axis("engine.max_num_seqs")
    with pytest.raises(ValueError, match="empty value"):
        parse_axis("engine.max_num_seqs=1,,2")
    with pytest.raises(ValueError, match="rate_scale values must be numbers > 0"):
        parse_axis("rate_scale=1,-2")
    with pytest.raises(ValueError, match="'seed' cannot be a grid axis"):
        parse_axis("seed=1,2")


def test_policy_parameters_apply_only_to_policies_that_have_them() -> None:
    base = small_scenario()
    points = expand_grid(base, [Axis("policy", ("conservative", "overcommit")),
                                Axis("policy_params.overcommit_ratio", (0.3, 0.6))])
    described = [(p.policy, dict(p.values)["policy_params.overcommit_ratio"]) for p in points]
    assert described == [("conservative", None), ("overcommit", 0.3), ("overcommit", 0.6)]
    with pytest.raises(ValueError, match="no policy in the grid has a parameter 'ratio'"):
        expand_grid(base, [Axis("policy_params.ratio", (0.3,))])
    with pytest.raises(ValueError, match="given twice"):
        expand_grid(base, [Axis("gpu", ("H100-80GB",)), Axis("gpu", ("A100-80GB",))])


def test_a_bad_grid_value_fails_before_any_run_naming_the_point() -> None:
    scn = scenario_from_dict(small_scenario(), Path("."))
    with pytest.raises(ValueError, match=r"grid point engine.max_num_seqs=0: engine.max_num_seqs"):
        SweepPlan(scn, (Axis("engine.max_num_seqs", (8, 0)),), replications=1)


# --- running ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plan() -> SweepPlan:
    scn = scenario_from_dict(small_scenario(), Path("."))
    return SweepPlan(scn, (
        Axis("policy", ("conservative", "overcommit")),
        Axis("engine.max_num_seqs", (16, 256)),
        Axis("rate_scale", (1.0, 2.0)),
    ), replications=2)


@pytest.fixture(scope="module")
def table(plan: SweepPlan) -> pd.DataFrame:
    with LocalExecutor(1) as ex:
        return run_sweep(plan, ex)


def test_the_table_has_a_row_per_run_with_grid_values_and_metrics(
    plan: SweepPlan, table: pd.DataFrame
) -> None:
    assert len(plan.points) == 8 and len(table) == 16
    for col in ("run_key", "point", "replication", "seed", "policy", "engine.max_num_seqs",
                "rate_scale", "interactive_ttft_p99_s", "batch_output_tokens_per_s",
                "overall_slo_attainment", "offered_rate_rps"):
        assert col in table.columns
    assert table["run_key"].is_unique
    assert set(table["replication"]) == {0, 1}
    assert sorted(set(table["seed"])) == sorted(plan.seeds)
    assert (table["overall_offered"] == 200).all()


def test_common_random_numbers_every_configuration_sees_the_same_arrivals(
    table: pd.DataFrame,
) -> None:
    for _, rep in table.groupby("replication"):
        assert rep["seed"].nunique() == 1
        # same requests everywhere; the offered rate differs only by the load scale
        assert rep["num_requests"].nunique() == 1
        base = rep["offered_rate_rps"] / rep["rate_scale"]
        np.testing.assert_allclose(base, base.iloc[0], rtol=1e-9)
    per_rep = table.groupby("replication")["offered_rate_rps"].first()
    assert per_rep.nunique() == 2  # replications do differ


def test_configurations_differ_and_load_hurts(table: pd.DataFrame) -> None:
    pts = summarize_points(table, ["overall_slo_attainment", "interactive_ttft_p99_s"])
    assert pts["interactive_ttft_p99_s_mean"].nunique() > 1
    by_load = pts.groupby("rate_scale")["interactive_ttft_p99_s_mean"].mean()
    assert by_load[2.0] > by_load[1.0]


def test_results_are_deterministic_and_identical_on_a_process_pool(
    plan: SweepPlan, table: pd.DataFrame
) -> None:
    with LocalExecutor(2) as ex:
        again = run_sweep(plan, ex)
    pd.testing.assert_frame_equal(metric_view(again), metric_view(table))


def test_summarize_points_gives_t_intervals(table: pd.DataFrame) -> None:
    pts = summarize_points(table, ["batch_output_tokens_per_s"])
    row = pts.iloc[0]
    runs = table[table["point"] == row["point"]]["batch_output_tokens_per_s"].to_numpy()
    mean, low, high = t_interval(runs)
    assert row["batch_output_tokens_per_s_mean"] == pytest.approx(runs.mean())
    assert (row["batch_output_tokens_per_s_low"], row["batch_output_tokens_per_s_high"]) == (
        pytest.approx(low), pytest.approx(high))
    assert row["replications"] == 2 and row["policy"] == "conservative"
    # t interval: 2 values a, b -> mean +- t(0.975, 1) * |a - b| / 2
    half = 12.706204736174707 * abs(runs[0] - runs[1]) / 2
    assert high - mean == pytest.approx(half)


def test_intervals_stay_within_what_a_metric_can_take() -> None:
    # two replications give t(0.975, 1) = 12.7 half-widths: p99 TTFT 0.2 and 1.0 s read
    # "-4.5 .. 5.7 s", attainment 0.8 and 1.0 "-0.37 .. 2.17"
    df = pd.DataFrame({"point": [0, 0], "interactive_ttft_p99_s": [0.2, 1.0],
                       "overall_slo_attainment": [0.8, 1.0], "kv_used_mean_fraction": [0.9, 1.0]})
    row = summarize_points(df, list(df.columns[1:])).iloc[0]
    assert (row["interactive_ttft_p99_s_low"], row["interactive_ttft_p99_s_high"]) == (
        0.0, pytest.approx(0.6 + 12.706204736174707 * 0.4))
    assert (row["overall_slo_attainment_low"], row["overall_slo_attainment_high"]) == (0.0, 1.0)
    assert row["kv_used_mean_fraction_high"] == 1.0
    assert metric_range("overall_goodput_rps") == (0.0, math.inf)
    mean, low, high = t_interval([0.2, 1.0])  # uncut without a range: a difference may be < 0
    assert low < 0 < high and mean == pytest.approx(0.6)


def test_presets_are_grid_axes() -> None:
    data = small_scenario(n=100, rate=8.0)
    del data["engine"]  # KV capacity from the GPU preset
    scn = scenario_from_dict(data, Path("."))
    plan = SweepPlan(scn, (Axis("gpu", ("H100-80GB", "A100-80GB")),
                           Axis("engine.name", ("vllm", "tgi"))), replications=1)
    with LocalExecutor(1) as ex:
        df = run_sweep(plan, ex)
    assert len(df) == 4
    kv = df.groupby("gpu")["kv_capacity_tokens"].first()
    assert kv["A100-80GB"] != kv["H100-80GB"]
    pts = summarize_points(df, ["overall_ttft_p99_s"])
    assert {"gpu", "engine.name", "kv_capacity_tokens"} <= set(pts.columns)
    tgi = df[df["engine.name"] == "tgi"]
    assert (tgi["engine_num_engine_preemptions"] == 0).all()  # TGI reserves, never preempts


class _Interrupting:
    """Runs tasks in process and raises KeyboardInterrupt after ``limit`` results."""

    name = "interrupting"

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0

    @property
    def num_workers(self) -> int:
        return 1

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, task in enumerate(tasks):
            if i == self.limit:
                raise KeyboardInterrupt
            self.calls += 1
            yield i, fn(task)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Interrupting:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def test_an_interrupted_sweep_keeps_finished_runs_and_resume_runs_only_the_rest(
    plan: SweepPlan, table: pd.DataFrame, tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(plan, _Interrupting(5), out)
    kept = RunStore(out).keys()
    assert len(kept) == 5
    assert json.loads((out / "sweep.json").read_text())["num_runs"] == 16
    with pytest.raises(ValueError, match="already holds 5 finished runs; pass --resume"):
        run_sweep(plan, LocalExecutor(1), out)
    started: list[tuple[int, int]] = []
    resumed = _Interrupting(100)
    df = run_sweep(plan, resumed, out, resume=True, on_start=lambda a, b: started.append((a, b)))
    assert started == [(11, 5)] and resumed.calls == 11
    pd.testing.assert_frame_equal(metric_view(df), metric_view(table))
    on_disk = pd.read_parquet(out / "sweep.parquet")
    pd.testing.assert_frame_equal(metric_view(on_disk), metric_view(table))
    # nothing left to do
    again = _Interrupting(100)
    run_sweep(plan, again, out, resume=True)
    assert again.calls == 0


# --- plots -----------------------------------------------------------------------------------


def test_pareto_mask() -> None:
    x = [1.0, 2.0, 3.0, 2.0, math.nan]
    y = [1.0, 1.0, 3.0, 0.5, 0.1]
    # maximise x, minimise y: (2, 0.5) dominates (1, 1) and (2, 1); (3, 3) is on the front
    assert pareto_mask(x, y).tolist() == [False, False, True, True, False]


def test_plots_are_written_as_png_and_svg(table: pd.DataFrame, tmp_path: Path) -> None:
    pts = summarize_points(table, ["interactive_ttft_p99_s",
                                   "batch_sustained_output_tokens_per_s"])
    files = plot_pareto(pts, tmp_path / "pareto", label_columns=["engine.max_num_seqs"])
    curve = summarize_points(table, ["overall_slo_attainment", "offered_rate_rps"],
                             by=["policy", "rate_scale"])
    files += plot_attainment(curve, tmp_path / "att", target=0.9,
                             capacities={"overcommit": 8.0})
    assert [f.name for f in files] == ["pareto.png", "pareto.svg", "att.png", "att.svg"]
    for f in files:
        assert f.stat().st_size > 1000
    assert files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in files[1].read_bytes()[:2000]


# --- command line ----------------------------------------------------------------------------


def _scenario_file(tmp_path: Path) -> Path:
    import tomli_w

    path = tmp_path / "small.toml"
    path.write_text(tomli_w.dumps(small_scenario(n=120, rate=8.0)))
    return path


def test_cli_sweep_writes_the_table_and_resumes(tmp_path: Path) -> None:
    runner = CliRunner()
    scn = _scenario_file(tmp_path)
    out = tmp_path / "out"
    args = ["sweep", "--scenario", str(scn), "--out", str(out), "--policies",
            "conservative,overcommit", "--grid", "policy_params.overcommit_ratio=0.4,0.8",
            "--rate-scale", "1,2", "-r", "2", "-j", "1"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert re.search(r"^12 runs in [0-9.]+ s: [0-9.]+ runs per minute$", res.output, re.M)
    said = " ".join(res.stdout.split())
    assert ("(means over the replications; times in seconds; ttft and tpot quantiles: each "
            "run's, over the completed requests (refused and expired ones have none), TTFT from "
            "arrival at the gateway, its wait included (a p99 over 100 completed requests or "
            "fewer, here as few as ") in said
    # the interactive tier's share of 120 requests: its p99 is about its maximum, said
    assert ("in a run, lies between the two largest values, about the maximum, which one "
            "request moves); out tok/s") in said
    assert "offered req/s (offered_rate_rps): requests over the arrival window" in said
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 3 * 2 * 2
    for name in ("points.csv", "pareto-rate1.png", "pareto-rate2.svg", "attainment.png",
                 "attainment.svg"):
        assert (out / name).exists()
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    assert "already holds 12 finished runs; pass --resume" in again.output
    resumed = runner.invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert "12 already in" in resumed.output


@pytest.mark.parametrize(("extra", "message"), [
    (["--grid", "engine.max_num_seqs=8,0"], "engine.max_num_seqs"),
    (["--grid", "policy_params.nope=1"], "no policy in the grid has a parameter 'nope'"),
    (["--policies", "fastest"], "unknown policy 'fastest'"),
    (["--executor", "dask"], "unknown executor 'dask'"),
    (["--address", "auto"], "--address applies to the ray executor only"),
])
def test_cli_sweep_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    res = CliRunner().invoke(app, ["sweep", "--scenario", str(_scenario_file(tmp_path)),
                                   "--out", str(tmp_path / "o"), *extra])
    assert res.exit_code == 2
    assert message in res.output
    assert "Traceback" not in res.output


def test_a_closed_loop_takes_no_rate_scale_and_its_rate_is_what_its_users_sent() -> None:
    # before: a sweep's rate_scale axis changed nothing but the 'offered req/s' column (the
    # workload's drawn arrivals, 4x at scale 4, results identical), and capacity answered
    # 358 req/s 'censored' for 8 users sending 1 request at a time each
    from kvbudget.studies.capacity import CapacitySpec

    data = {**small_scenario(n=30), "closed_loop": {"num_users": 2}}
    scn = scenario_from_dict(data, Path("."))
    with pytest.raises(ValueError, match=r"rate_scale 4: a closed loop of users sends"):
        SweepPlan(scn, (Axis("rate_scale", (1.0, 4.0)),), replications=1)
    with pytest.raises(ValueError, match=r"capacity searches the arrival rate, and a closed"):
        CapacitySpec(scn)
    plan = SweepPlan(scn, (Axis("closed_loop.num_users", (1, 4)),), replications=1)
    with LocalExecutor(1) as ex:
        rows = run_sweep(plan, ex).sort_values("closed_loop.num_users")
    # requests over the span of their sends: the summary's offered window (first to last)
    sent = (rows["num_requests"] - 1) / rows["offered_window_s"]
    assert np.allclose(rows["offered_rate_rps"], sent)
    assert rows["offered_rate_rps"].iloc[0] < rows["offered_rate_rps"].iloc[1]
