"""Autoscaled fleets (``[fleet.autoscale]``, ``simulator.autoscaler``): known answers worked by
hand, the HPA rule, the cold start, properties (no request on a replica before it is up, none
lost on scale-down, the replica count within its bounds, stepping == skip-ahead), and the
settings' validation."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.analysis.tables import kv_summary
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.policies import TierConfig, make_policy
from kvbudget.results.features_said import autoscale_line
from kvbudget.results.run_result import read_run
from kvbudget.simulator import autoscaler as autoscaler_module
from kvbudget.simulator.autoscale_config import AutoscaleConfig
from kvbudget.simulator.autoscaler import BOOTING, DRAINING, OFF, UP, Autoscaler
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.fleet import FleetConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns
from tests.conftest import assert_skip_ahead_matches_stepping, make_workload

NO_TIMEOUT = (TierConfig("interactive", queue_timeout_s=None, max_sequence_tokens=10**6),
              TierConfig("batch", queue_timeout_s=None, max_sequence_tokens=10**6))


def _config(scale: AutoscaleConfig, *, router: str = "round_robin", budget: str = "global",
            step_s: float = 0.25, blocks: int = 110) -> SimConfig:
    return SimConfig(
        # the steps worked out by hand below are a scheduler's that schedules after each step
        # (async scheduling's one-step lag: tests/unit/simulator/test_async_scheduling.py)
        engine=EngineConfig(num_gpu_blocks=blocks, block_size=16, async_scheduling=False),
        tiers=NO_TIMEOUT,
        cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0),
        fleet=FleetConfig(router=router, budget=budget,  # type: ignore[arg-type]
                          autoscale=scale),
    )


HAND = AutoscaleConfig(min_replicas=1, max_replicas=2, metric="vllm:num_requests_running",
                       target=1.5, polling_interval_s=7.0, scale_up_delay_s=5.0,
                       scale_down_stabilization_s=0.0)


def test_scale_up_then_drain_known_answer() -> None:
    """Worked by hand. Every step takes 0.25 s; a request of 700 + 100 tokens holds 50 blocks
    (800 tokens), a replica has 110 blocks (1,760 tokens), so the conservative budget of one
    replica admits two. r0, r1, r2 arrive at 0: r0 and r1 run on replica 0 (100 steps: they
    finish at 25.0), r2 waits at the gateway.

    * t=7 (first evaluation): 2 running on the one replica up; ceil(2 / 1.5) = 2 (2 / 1.5 is
      beyond the 10 % tolerance): replica 1 boots, up at 7 + 5 = 12.0, where the budget grows
      to 3,520 tokens and r2 is admitted, onto replica 1 (its first request exactly at the
      delay); it finishes at 12 + 25 = 37.0.
    * t=14, 21: 3 running, ceil(3 / 1.5) = 2: no change. t=28: r0, r1 have finished, 1 running
      over 2 replicas, ceil(1 / 1.5) = 1: replica 1 (up last) drains (no stabilisation window).
    * r3 (t=29) and r4 (t=30) can go only to replica 0 (round robin would have sent r4 to
      replica 1): the budget is replica 0's 1,760 tokens with r2's 800 still held, so r3 is
      admitted at 29 and r4 waits until r2 finishes, at 37.0, when replica 1 goes off.
    * t=35: 1 running, ceil(1/1.5) = 1, no change; t=42: r3 and r4 run on replica 0, 2 / 1.5:
      replica 1 boots again, up at 47; nothing more arrives. r3 finishes at 29 + 25 = 54.0 and
      r4 at 37 + 25 = 62.0, the run's end. t=49: 2 running, no change; t=56: 1 running over 2,
      ceil(1 / 1.5) = 1: replica 1 drains, and being idle goes off at once.

    Replica-seconds: replica 0 for 62 s, replica 1 from 7 to 37 and from 42 to 56: 106."""
    w = make_workload([0, 0, 0, 29, 30], [700] * 5, [100] * 5, max_output_tokens=[100] * 5,
                      tiers=["interactive"] * 5)
    _, b = assert_skip_ahead_matches_stepping(w, _config(HAND), "conservative")
    rec = b.records
    assert rec["status"].tolist() == ["completed"] * 5
    assert rec["admitted_s"].tolist() == [0.0, 0.0, 12.0, 29.0, 37.0]
    assert rec["finished_s"].tolist() == [25.0, 25.0, 37.0, 54.0, 62.0]
    fleet = b.summary["engine"]["fleet"]
    assert [r["num_requests"] for r in fleet["replicas"]] == [4, 1]
    scale = fleet["autoscale"]
    assert scale["replica_seconds"] == 106.0
    assert scale["gpu_hours"] == 106.0 / 3600
    assert (scale["num_scale_ups"], scale["num_scale_downs"], scale["peak_replicas"]) == (2, 2, 2)
    tl = b.timeline.set_index("time_s")
    assert tl.loc[[6.0, 7.0, 11.0, 12.0], "num_replicas_booting"].tolist() == [0, 1, 1, 0]
    assert tl.loc[[11.0, 12.0, 27.0, 28.0], "num_replicas_up"].tolist() == [1, 2, 2, 1]
    assert tl.loc[[27.0, 28.0, 36.0, 37.0], "num_replicas_draining"].tolist() == [0, 1, 1, 0]
    # the capacity column is the replicas serving: one, two from 12, the drained one to 37
    assert tl.loc[[11.0, 12.0, 36.0, 37.0], "kv_capacity_tokens"].tolist() == [
        1760, 3520, 3520, 1760]


def test_the_timeline_and_summary_round_trip_a_run_directory(tmp_path: Path) -> None:
    w = make_workload([0, 0, 0, 29, 30], [700] * 5, [100] * 5, max_output_tokens=[100] * 5,
                      tiers=["interactive"] * 5)
    result = simulate(w, make_policy("conservative"), _config(HAND))
    result.write(tmp_path / "run")
    back = read_run(tmp_path / "run")
    assert back.timeline.equals(result.timeline)
    assert "num_replicas_draining" in back.timeline


def test_without_an_autoscaler_the_timeline_has_no_replica_columns() -> None:
    w = make_workload([0, 1], [700, 700], [10, 10], tiers=["interactive"] * 2)
    cfg = replace(_config(HAND), fleet=FleetConfig(2))
    result = simulate(w, make_policy("conservative"), cfg)
    assert "num_replicas_up" not in result.timeline
    assert "autoscale" not in result.summary["engine"]["fleet"]


def test_per_replica_budgets_drain_the_requests_queued_at_the_replica() -> None:
    """With a gateway per replica, a request waiting at a draining replica's own gateway is
    still served there (it was routed at arrival): the replica goes off only after it."""
    w = make_workload([0, 0, 0, 1, 2, 29, 30], [700] * 7, [100] * 7,
                      max_output_tokens=[100] * 7, tiers=["interactive"] * 7)
    _, b = assert_skip_ahead_matches_stepping(
        w, _config(HAND, budget="per_replica"), "conservative")
    assert b.records["status"].tolist() == ["completed"] * 7


def test_the_hpa_rule_by_hand() -> None:
    import simpy

    env = simpy.Environment()
    from types import SimpleNamespace

    c = AutoscaleConfig(min_replicas=1, max_replicas=10, target=10.0, polling_interval_s=1000)
    idle = SimpleNamespace(running=[], num_gpu_blocks=1, capacity_tokens=1)
    s = Autoscaler(env, c, [idle] * 10, 0.0, 1, on_change=lambda: None,
                   next_external_s=lambda: math.inf, waiting_at=lambda r: 0)
    assert s.recommend(total=45.0, current=4) == 5  # 45 / 40 = 1.125: beyond 10 %, ceil(4.5)
    assert s.recommend(total=43.0, current=4) == 4  # 43 / 40 = 1.075: within the tolerance
    assert s.recommend(total=35.0, current=4) == 4  # 0.875 -> ceil(3.5) = 4
    assert s.recommend(total=29.0, current=4) == 3
    assert s.recommend(total=0.0, current=4) == 1  # min_replicas
    assert s.recommend(total=500.0, current=4) == 10  # max_replicas
    # scale-down stabilisation: the highest recommendation of the window (300 s by default)
    assert s.stabilised(5, 4) == 5
    env.run(until=100)
    assert s.stabilised(2, 5) == 5  # 5 was recommended 100 s ago
    env.run(until=401)
    assert s.stabilised(2, 5) == 2  # the 5 is 401 s old; the 2s are in the window
    # a scale-up adds at most max(4, current) replicas an evaluation
    env.run(until=402)
    assert s.stabilised(10, 2) == 6
    env.run(until=403)
    assert s.stabilised(10, 5) == 10


def test_the_cold_start_is_the_weights_over_pcie_plus_the_engine_start() -> None:
    """Llama-3.1-8B in bf16 on one H100: its weights' bytes over the H100's PCIe bandwidth
    (``perf.hardware``), then vLLM's 14.18 s engine start (vLLM pull request 11005)."""
    w = make_workload([0], [100], [5], tiers=["interactive"])
    scale = replace(HAND, scale_up_delay_s=None)
    cfg = replace(_config(scale), cost_model=None, engine=EngineConfig(num_gpu_blocks=500))
    result = simulate(w, make_policy("conservative"), cfg)
    delay = result.summary["engine"]["fleet"]["autoscale"]["scale_up_delay_s"]
    gpu, model = get_gpu("H100-80GB"), get_model("Llama-3.1-8B")
    assert delay == model.weight_bytes(1) / gpu.pcie_bandwidth_bytes_s + 14.18
    # ~8.03 billion parameters of 2 bytes over ~64 GB/s: about a quarter of a minute
    assert pytest.approx(delay, rel=0.05) == 16e9 / 64e9 + 14.18
    said = result.summary["engine"]["fleet"]["autoscale"]
    assert said["engine_start_s"] == 14.18
    assert said["scale_up_delay"].startswith("worked out: ")
    assert f"up after {delay:.1f} s (cold start: weights + engine_start_s 14.18 s)" in (
        autoscale_line([result.summary]))


def test_a_given_delay_is_said_as_given_without_the_engine_start_it_does_not_use() -> None:
    """With ``scale_up_delay_s`` given, the summary listed the default ``engine_start_s``
    (14.18) beside it, which the delay does not use, and the screen said the delay alone: it
    now says the delay was given and lists no engine start."""
    w = make_workload([0], [100], [5], tiers=["interactive"])
    result = simulate(w, make_policy("conservative"), _config(HAND))
    said = result.summary["engine"]["fleet"]["autoscale"]
    assert said["scale_up_delay_s"] == 5.0
    assert said["scale_up_delay"] == "given (fleet.autoscale.scale_up_delay_s)"
    assert "engine_start_s" not in said
    assert "up after 5.0 s (given), down" in autoscale_line([result.summary])
    # a summary written before (engine_start_s listed, "given" alone) reads the same
    old = {**said, "scale_up_delay": "given", "engine_start_s": 14.18}
    assert "up after 5.0 s (given), down" in autoscale_line(
        [{"engine": {"fleet": {"autoscale": old}}}])


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"min_replicas": 3, "max_replicas": 2}, "min_replicas (3) must be <= max_replicas (2)"),
    ({"scale_up_delay_s": -1.0}, "scale_up_delay_s"),
    ({"engine_start_s": -1.0}, "engine_start_s"),
    ({"scale_down_stabilization_s": -5.0}, "scale_down_stabilization_s"),
    ({"polling_interval_s": 0.0}, "polling_interval_s"),
    ({"target": 0.0}, "target"),
    ({"metric": "vllm:gpu_cache_usage_perc"}, "metric"),
    ({"metric": "vllm:kv_cache_usage_perc", "target": 80.0}, "target"),
    ({"initial_replicas": 9}, "initial_replicas"),
    # a field nothing reads in the setting given (was dropped): the rate window of a gauge,
    # the engine start of a cold start given whole
    ({"rate_window_s": 30.0}, "rate_window_s: the rate window of vllm:request_success only"),
    ({"scale_up_delay_s": 20.0, "engine_start_s": 10.0}, "engine_start_s: part of the cold "
     "start worked out when scale_up_delay_s is left out"),
])
def test_bad_settings_are_refused_by_name(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"fleet.autoscale.{field}".replace("(", r"\(")
                       .replace(")", r"\)")):
        AutoscaleConfig(**kwargs)


def test_num_replicas_and_gpus_follow_max_replicas() -> None:
    with pytest.raises(ValueError, match="max_replicas"):
        FleetConfig(3, autoscale=AutoscaleConfig(max_replicas=4))
    with pytest.raises(ValueError, match="2 GPU presets for 4 replicas"):
        FleetConfig(gpus=("H100-80GB", "H100-80GB"), autoscale=AutoscaleConfig(max_replicas=4))
    assert FleetConfig(autoscale=AutoscaleConfig(max_replicas=4)).num_slots == 4


# --- properties ------------------------------------------------------------------------------
@st.composite
def scaled_runs(draw: st.DrawFn) -> tuple[Any, SimConfig, str]:
    n = draw(st.integers(5, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrival = np.sort(rng.integers(0, 240, n)) * 0.5
    prompt, out = rng.integers(1, 400, n), rng.integers(1, 120, n)
    w = from_columns(arrival.astype(np.float64), prompt, out,
                     max_output_tokens=out + rng.integers(0, 30, n),
                     tiers=rng.choice(["interactive", "batch"], n).tolist())
    lo = draw(st.integers(1, 3))
    hi = draw(st.integers(lo, 4))
    metric = draw(st.sampled_from(["vllm:num_requests_running", "vllm:num_requests_waiting",
                                   "vllm:kv_cache_usage_perc", "vllm:request_success"]))
    target = draw(st.sampled_from([0.2, 0.5, 1.0, 3.0]))
    scale = AutoscaleConfig(
        min_replicas=lo, max_replicas=hi, metric=metric,  # type: ignore[arg-type]
        target=min(target, 1.0) if metric == "vllm:kv_cache_usage_perc" else target,
        polling_interval_s=draw(st.sampled_from([1.0, 2.5, 7.0])),
        scale_up_delay_s=draw(st.sampled_from([0.0, 0.75, 4.0])),
        scale_down_stabilization_s=draw(st.sampled_from([0.0, 5.0, 300.0])),
        # (the rate window is request_success's alone: refused with another metric)
        **({"rate_window_s": 5.0} if metric == "vllm:request_success" else {}))
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=draw(st.integers(40, 200)), block_size=16,
                            max_num_seqs=8, max_num_batched_tokens=256),
        tiers=NO_TIMEOUT,
        cost_model=LinearCostModel(draw(st.sampled_from([0.25, 0.1, 0.03])), 0.0, 0.0, 0.0),
        fleet=FleetConfig(router=draw(st.sampled_from(["round_robin", "least_tokens"])),
                          budget=draw(st.sampled_from(["global", "per_replica"])),
                          autoscale=scale),
    )
    return w, cfg, draw(st.sampled_from(["conservative", "overcommit", "preemptive"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=scaled_runs())
def test_scaling_properties(run: tuple[Any, SimConfig, str]) -> None:
    """No request is added to a replica that is not up; every request completes (no timeout,
    so none may be lost to a drain); up + booting stays within [min, max] and, with the
    draining ones, within max; stepping and skip-ahead give the same records, timeline and
    gaps."""
    w, cfg, policy = run
    assert cfg.fleet is not None and cfg.fleet.autoscale is not None
    scale = cfg.fleet.autoscale
    per_replica = cfg.fleet.budget == "per_replica"
    seen: list[Autoscaler] = []
    original = Autoscaler.added

    def added(self: Autoscaler, r: int, i: int) -> None:
        # a request queued at a draining replica's own gateway before it drained runs there
        assert self.state[r] == UP or (self.state[r] == DRAINING and per_replica), self.state
        if self not in seen:
            seen.append(self)
        original(self, r, i)

    original_eval = Autoscaler.evaluate

    def evaluate(self: Autoscaler) -> None:
        original_eval(self)
        counted = self.state.count(UP) + self.state.count(BOOTING)
        assert scale.min_replicas <= counted <= scale.max_replicas
        assert counted + self.state.count(DRAINING) <= scale.max_replicas
        assert set(self.state) <= {OFF, BOOTING, UP, DRAINING}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(autoscaler_module.Autoscaler, "added", added)
        patch.setattr(autoscaler_module.Autoscaler, "evaluate", evaluate)
        a, b = assert_skip_ahead_matches_stepping(w, cfg, policy)
    assert (b.records["status"] == "completed").all(), b.records["status"].value_counts()
    assert seen
    for s in seen:
        for _, up, booting, draining, _ in s.history:
            assert up >= 1 and up + booting + draining <= scale.max_replicas
    assert a.summary["engine"]["fleet"]["autoscale"] == b.summary["engine"]["fleet"]["autoscale"]


# --- the command line ------------------------------------------------------------------------
@pytest.mark.parametrize(("setting", "needle"), [
    ("fleet.autoscale.min_replicas=5", "fleet.autoscale.min_replicas (5) must be <= max_replicas (4)"),
    ("fleet.autoscale.scale_up_delay_s=-1", "fleet.autoscale.scale_up_delay_s"),
    ("fleet.autoscale.engine_start_s=-3", "fleet.autoscale.engine_start_s"),
    ("fleet.autoscale.scale_down_stabilization_s=-1", "fleet.autoscale.scale_down_stabilization_s"),
    ("fleet.autoscale.polling_interval_s=0", "fleet.autoscale.polling_interval_s"),
    ("fleet.num_replicas=3", "fleet.num_replicas (3) differs from fleet.autoscale.max_replicas (4)"),
    ("fleet.autoscale.colour=1", "fleet.autoscale.colour"),
    ("fleet.autoscale.rate_window_s=30", "fleet.autoscale.rate_window_s: the rate window of "
     "vllm:request_success only; metric 'vllm:num_requests_running' is read as it is"),
])
def test_bad_autoscale_input_exits_2_with_one_line(tmp_path: Path, setting: str,
                                                   needle: str) -> None:
    import tomli_w
    from typer.testing import CliRunner

    from kvbudget.cli.main import app
    from tests.conftest import small_scenario_dict

    data = small_scenario_dict(20)
    data["fleet"] = {"autoscale": {"min_replicas": 1, "max_replicas": 4}}
    path = tmp_path / "scaled.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(path), "--set", setting])
    err = res.stderr.strip()
    assert res.exit_code == 2 and len(err.splitlines()) == 1, err
    # the bad value is the --set's: the error leads with the field typed, not the file
    assert err.startswith(f"error: {setting.partition('=')[0]}") and needle in err, err
    assert str(path) not in err, err


# --- plan: the autoscaler's bound as the replica dimension, priced by GPU-hours --------------
def test_plan_takes_the_autoscalers_bound_and_prices_gpu_hours(tmp_path: Path) -> None:
    from kvbudget.simulator.scenario import scenario_from_dict
    from kvbudget.studies.executors import make_executor
    from kvbudget.studies.plan import PlanSpec, plan
    from kvbudget.studies.tune import Constraint
    from tests.conftest import small_scenario_dict

    data = small_scenario_dict(60, 4.0, policy="conservative")
    data["fleet"] = {"router": "least_tokens", "autoscale": {
        "min_replicas": 1, "max_replicas": 2, "target": 4.0, "polling_interval_s": 5.0,
        "scale_up_delay_s": 3.0}}
    spec = PlanSpec(scenario_from_dict(data, tmp_path), gpus=("H100-80GB",), replicas=(1, 3),
                    prices={"H100-80GB": 2.0}, replications=1,
                    slos=(Constraint.parse("overall_slo_attainment>=0"),))
    with make_executor("local", jobs=1) as executor:
        result = plan(spec, executor)
    table = result.table()
    row = table.iloc[0]
    assert row["replicas"] == 1 and row["feasible"]  # the first bound meets the SLO
    run = result.runs[0]
    assert run["autoscale_peak_replicas"] == 1
    assert row["gpu_hours"] == run["autoscale_gpu_hours"]
    assert row["usd_run"] == run["autoscale_gpu_hours"] * 2.0
    # one replica held over the whole span: the mean GPUs held is one
    assert row["usd_per_hour"] == pytest.approx(2.0)
    # per million output tokens: the GPU-hours held times the price over the tokens served
    served = run["overall_sustained_output_tokens_per_s"] * run["duration_s"]
    assert row["usd_per_m_output_tokens"] == pytest.approx(
        run["autoscale_gpu_hours"] * 2.0 / served * 1e6)
    from kvbudget.cli.plan import render_plan

    said = " ".join(render_plan(result).split())
    assert "$/h = GPUs x price per GPU-hour (an autoscaled fleet: the mean GPUs held)" in said
    assert ("(first arrival to last finish; an autoscaled fleet: the GPU-hours its replicas "
            "were held) x price") in said


@pytest.mark.parametrize("metric", ["vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                                    "vllm:num_requests_waiting"])
def test_the_metric_read_mid_run_is_steppings(metric: str) -> None:
    """The metric each evaluation reads (the KV blocks in use through a planned decode run's
    blocks per step) is the same with and without the speed-up, and not trivially zero."""
    rng = np.random.default_rng(4)
    n = 80
    w = from_columns(np.sort(rng.uniform(0, 60, n)), rng.integers(50, 400, n),
                     rng.integers(20, 300, n), tiers=["interactive"] * n)
    scale = AutoscaleConfig(min_replicas=1, max_replicas=3, metric=metric,  # type: ignore[arg-type]
                            target=0.3 if metric == "vllm:kv_cache_usage_perc" else 2.0,
                            polling_interval_s=1.3, scale_up_delay_s=2.0,
                            scale_down_stabilization_s=4.0)
    cfg = replace(_config(scale, step_s=0.05, blocks=120, router="least_tokens"),
                  tiers=(TierConfig("interactive", queue_timeout_s=None),))
    seen: dict[bool, list[float]] = {}
    original = Autoscaler.metric_total
    for skip in (False, True):
        values: list[float] = []

        def metric_total(self: Autoscaler, values: list[float] = values) -> float:
            v = original(self)
            values.append(v)
            return v

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(autoscaler_module.Autoscaler, "metric_total", metric_total)
            simulate(w, make_policy("overcommit"),
                     replace(cfg, engine=replace(cfg.engine, skip_ahead=skip)))
        seen[skip] = values
    assert seen[False] == seen[True]
    assert sum(v > 0 for v in seen[True]) > 5


def test_the_command_lines_table_says_what_the_autoscaler_assumed_and_used() -> None:
    from kvbudget.cli.tables import render_summaries

    w = make_workload([0, 0, 0, 29, 30], [700] * 5, [100] * 5, max_output_tokens=[100] * 5,
                      tiers=["interactive"] * 5)
    scaled = simulate(w, make_policy("conservative"), _config(HAND)).summary
    text = render_summaries([scaled]).replace("\n  ", " ")
    assert ("autoscaled fleet: conservative: 1-2 replicas on vllm:num_requests_running "
            "(target 1.5 a replica, every 7 s, up after 5.0 s (given), down after a 0 s window): "
            f"{106 / 3600:.3g} GPU-h, peak 2, 2 up / 2 down") in text
    fixed = simulate(w, make_policy("conservative"),
                     replace(_config(HAND), fleet=FleetConfig(2))).summary
    assert "autoscaled fleet" not in render_summaries([fixed])


def test_a_replica_brought_up_again_starts_with_an_empty_prefix_cache() -> None:
    """The known answer's fleet with one shared 512-token prefix: replica 1 caches it serving
    r2 (12-37 s), drains and goes off at 37, boots again at 42 (up at 47); r5 (50 s) is routed
    there by round robin and finds the cache empty, as a new pod's (vLLM's
    ``reset_prefix_cache``); kept, it would have hit the 512 tokens."""
    from kvbudget.simulator.kv_blocks import KVBlocks
    from kvbudget.workloads import Workload

    n = 6
    w = Workload(
        arrival_s=np.array([0, 0, 0, 29, 30, 50], np.float64),
        prompt_tokens=np.full(n, 700, np.int64), output_tokens=np.full(n, 100, np.int64),
        max_output_tokens=np.full(n, 100, np.int64), tier=np.zeros(n, np.int16),
        tier_names=("interactive",), deadline_s=np.full(n, np.nan),
        request_id=np.arange(n, dtype=np.int64), prefix_hashes=np.full(n, 7, np.int64),
        prefix_offsets=np.arange(n + 1, dtype=np.int64), prefix_block_tokens=512)
    base = _config(HAND)
    cfg = replace(base, engine=replace(base.engine, enable_prefix_caching=True))
    _, b = assert_skip_ahead_matches_stepping(w, cfg, "conservative")
    replicas = b.summary["engine"]["fleet"]["replicas"]
    assert [r["num_requests"] for r in replicas] == [4, 2]
    assert replicas[1]["prefix_cache_query_tokens"] == 1400  # r2's and r5's prompts
    assert replicas[1]["prefix_cache_hit_tokens"] == 0
    with pytest.MonkeyPatch.context() as patch:  # a cache kept through the scale-down
        patch.setattr(KVBlocks, "reset_prefix_cache", lambda self: None)
        kept = simulate(w, make_policy("conservative"), cfg)
    assert kept.summary["engine"]["fleet"]["replicas"][1]["prefix_cache_hit_tokens"] == 512


def test_guaranteed_pools_beyond_the_scaled_down_budget_are_refused_before_the_run(
        tmp_path: Path) -> None:
    """A global budget's guaranteed pools must fit ``min_replicas``' budget: refused up front,
    naming fleet.autoscale (the run used to fail at its first scale-down, naming neither)."""
    import tomli_w
    from typer.testing import CliRunner

    from kvbudget.cli.main import app
    from tests.conftest import small_scenario_dict

    data = small_scenario_dict(20)
    data["fleet"] = {"autoscale": {"min_replicas": 1, "max_replicas": 3, "initial_replicas": 3}}
    data["tiers"] = [{"name": "interactive", "priority": 0, "guaranteed_tokens": 50_000},
                     {"name": "batch", "priority": 1, "retryable_on_overload": True}]
    path = tmp_path / "pools.toml"
    path.write_bytes(tomli_w.dumps(data).encode())
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(path)])
    err = res.stderr.strip()
    assert res.exit_code == 2 and len(err.splitlines()) == 1, err
    assert ("fleet.autoscale.min_replicas (1): the tiers' guaranteed_tokens (50000) exceed the "
            "global budget of 1 replica(s) (40000 tokens)") in err, err
    # two replicas' budget holds the pools: the same file runs
    res = CliRunner().invoke(app, ["simulate", "--scenario", str(path),
                                   "--set", "fleet.autoscale.min_replicas=2"])
    assert res.exit_code == 0, res.stderr


def test_kv_used_is_over_the_capacity_serving_on_both_screens() -> None:
    """An autoscaled fleet's "KV used" was over the capacity at its most replicas on
    simulate's screen (the summary's ``kv`` block) and over the capacity serving at each sample
    in ``report``: one label, two figures. Both are now token-seconds used over the
    token-seconds of the capacity serving (up or draining replicas). The known answer's fleet:
    replica 0 (1,760 tokens) serves over the whole span, 0 to 62 s, replica 1 from 12 to 37
    (up, then draining) and from 47 to 56 (drained at once, being idle): 1,760 x 96
    token-seconds over 62 s, not 3,520 x 62."""
    w = make_workload([0, 0, 0, 29, 30], [700] * 5, [100] * 5, max_output_tokens=[100] * 5,
                      tiers=["interactive"] * 5)
    run = simulate(w, make_policy("conservative"), _config(HAND))
    kv = run.summary["kv"]
    held = 1760 * 96 / 62
    assert kv["capacity_mean_tokens"] == pytest.approx(held)
    assert kv["used_mean_fraction"] == pytest.approx(kv["used_mean"] / held)
    assert kv["reserved_mean_fraction"] == pytest.approx(kv["reserved_mean"] / held)
    assert run.summary["kv_capacity_tokens"] == 3520  # the KV capacity column: the most
    # report's figure, from the timeline's 1 s samples, is the same share (not the old one)
    report = kv_summary(run.timeline)
    assert report["used_mean_fraction"] == pytest.approx(kv["used_mean_fraction"], rel=0.03)
    assert report["reserved_mean_fraction"] == pytest.approx(kv["reserved_mean_fraction"],
                                                             rel=0.03)
    assert kv["used_mean"] / 3520 < 0.8 * report["used_mean_fraction"]
    assert ("KV used/reserved over the capacity serving (up or draining replicas: "
            f"{held:,.0f} tokens on average; the KV capacity column is at the most replicas)"
            ) in autoscale_line([run.summary])
    # a fixed fleet's figures are over its capacity, as before, and said nowhere new
    fixed = simulate(w, make_policy("conservative"), replace(_config(HAND), fleet=FleetConfig(2)))
    assert "capacity_mean_tokens" not in fixed.summary["kv"]
    assert fixed.summary["kv"]["used_mean_fraction"] == fixed.summary["kv"]["used_mean"] / 3520
