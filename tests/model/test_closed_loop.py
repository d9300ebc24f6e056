"""Closed-loop load in the simulator: users wait for their answer, think, send again."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import FleetConfig
from kvbudget.workloads import Workload, from_columns
from kvbudget.workloads.closed_loop import ClosedLoop
from tests.conftest import (
    assert_skip_ahead_matches_stepping,
    assert_token_gaps_consistent,
    mixed_workload,
)
from tests.model.test_async_skip_ahead import GRID_TIERS


def _inflight(rec: dict) -> list[int]:
    a = np.asarray(rec["arrival_s"])
    f = np.asarray(rec["finished_s"])
    return [int(((a <= x) & (f > x)).sum()) for x in a]


def test_64_users_keep_64_requests_in_flight() -> None:
    w = mixed_workload(500, 5.0, seed=3)
    r = simulate(w, make_policy("unlimited"), SimConfig(closed_loop=ClosedLoop(64)))
    rec = r.records
    assert (np.asarray(rec["status"]) == "completed").all()
    counts = _inflight(rec)
    assert max(counts) == 64
    a = np.asarray(rec["arrival_s"])
    assert np.all(np.diff(a) >= 0) and a[63] == 0.0 and a[64] > 0.0
    assert r.summary["closed_loop"] == {"num_users": 64, "think_time_s": 0.0,
                                        "think_distribution": "fixed"}


def test_64_users_closed_loop_has_itl_consistent_with_its_tokens() -> None:
    w = mixed_workload(300, 5.0, seed=8)
    r = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=ClosedLoop(64, 0.1)))
    assert max(_inflight(r.records)) <= 64
    itl = r.summary["overall"]["itl_s"]
    assert itl["p50"] is not None and 0 < itl["p50"] <= itl["p90"] <= itl["p99"]
    for tier in ("interactive", "batch"):
        assert r.summary["tiers"][tier]["itl_s"]["mean"] > 0
    assert_token_gaps_consistent(r)


def test_one_user_sends_a_think_time_after_each_answer() -> None:
    w = mixed_workload(40, 5.0, seed=4)
    r = simulate(w, make_policy("conservative"), SimConfig(closed_loop=ClosedLoop(1, 0.25)))
    a = np.asarray(r.records["arrival_s"])
    f = np.asarray(r.records["finished_s"])
    np.testing.assert_allclose(a[1:] - f[:-1], 0.25, atol=1e-9)


def test_response_time_law() -> None:
    """Throughput = N / (R + Z) (the interactive response-time law, Denning and Buzen 1978)."""
    n_users, think = 8, 2.0
    w = mixed_workload(800, 5.0, seed=5)
    r = simulate(w, make_policy("unlimited"),
                 SimConfig(closed_loop=ClosedLoop(n_users, think, "exponential")))
    a = np.asarray(r.records["arrival_s"])
    e2e = np.asarray(r.records["e2e_s"])
    throughput = (len(a) - 1) / (a[-1] - a[0])
    assert throughput == pytest.approx(n_users / (e2e.mean() + think), rel=0.05)


def test_closed_loop_runs_are_reproducible_and_seeded() -> None:
    w = mixed_workload(200, 5.0, seed=6)
    before = w.arrival_s.copy()
    loop = ClosedLoop(4, 0.5, "exponential")
    one = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=1))
    two = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=1))
    other = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=2))
    np.testing.assert_array_equal(one.records["arrival_s"], two.records["arrival_s"])
    assert not np.array_equal(one.records["arrival_s"], other.records["arrival_s"])
    np.testing.assert_array_equal(w.arrival_s, before)  # the caller's workload is untouched


def test_closed_loop_on_a_fleet() -> None:
    w = mixed_workload(300, 5.0, seed=7)
    r = simulate(w, make_policy("conservative"),
                 SimConfig(closed_loop=ClosedLoop(16), fleet=FleetConfig(2, router="least_tokens")))
    assert max(_inflight(r.records)) <= 16
    assert r.summary["overall"]["offered"] == 300


def test_bad_closed_loops_are_refused() -> None:
    with pytest.raises(ValueError, match="num_users"):
        ClosedLoop(0)
    with pytest.raises(ValueError, match="think_time_s"):
        ClosedLoop(2, -1.0)


def test_simulate_cli_takes_users() -> None:
    res = CliRunner().invoke(app, ["simulate", "--users", "64", "--think-time-s", "0.5",
                                   "--set", "workload.duration_s=20", "--json"])
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["closed_loop"]["num_users"] == 64 and s["closed_loop"]["think_time_s"] == 0.5


def closed_loop_draw(seed: int, fleet: bool = False) -> tuple[Workload, SimConfig, str]:
    """The closed-loop grid's draw ``seed`` (``scripts/closed_loop_grid.py``): 80 requests
    sent by 1-11 users thinking 0-0.5 s on steps of 0.1-0.25 s, an engine preset, async
    scheduling on or off, one engine or (``fleet``) two replicas; the workload, the
    configuration and the policy."""
    rng = np.random.default_rng(seed)
    n = 80
    prompt, out = rng.integers(1, 200, n), rng.integers(1, 60, n)
    w = from_columns(np.zeros(n), prompt, out, max_output_tokens=out + rng.integers(0, 20, n),
                     tiers=rng.choice(["interactive", "batch"], n).tolist())
    step_s = float(rng.choice([0.25, 0.125, 0.1]))
    think = float(rng.choice([0.0, 0.125, 0.25, 0.5]))
    users = int(rng.integers(1, 12))
    policy = str(rng.choice(["preemptive", "overcommit", "unlimited"]))
    name, asy = str(rng.choice(["vllm", "sglang", "trtllm"])), bool(rng.integers(0, 2))
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=int(rng.choice([60, 200, 2000])), block_size=16,
                            max_num_seqs=int(rng.integers(1, 8)), max_num_batched_tokens=4096,
                            name=name, async_scheduling=asy),  # type: ignore[arg-type]
        tiers=GRID_TIERS,
        cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0, 0.0, float(rng.choice([0.0, 0.125]))),
        timeline_period_s=float(rng.choice([1.0, 0.25])), closed_loop=ClosedLoop(users, think))
    if fleet:
        router = str(rng.choice(["round_robin", "least_tokens"]))
        pool = FleetConfig(num_replicas=2, router=router)  # type: ignore[arg-type]
        cfg = replace(cfg, fleet=pool)
    return w, cfg, policy


@pytest.mark.parametrize("seed", [4, 233])
def test_a_send_on_a_step_end_is_ordered_alike_stepping_and_skipping_ahead(seed: int) -> None:
    """Users thinking 0.5 s on a 0.125 s step grid send exactly as steps end: a send is URGENT
    (``simulator/users.py``, as an open loop's arrival), so it comes before the step ending
    then whenever either was made, and skip-ahead's records and timeline equal stepping's
    (these two draws differed at 0fc8ebf: the send waited behind a step end stepping made
    after it)."""
    w, cfg, policy = closed_loop_draw(seed)
    assert cfg.closed_loop is not None and cfg.closed_loop.think_time_s == 0.5
    assert isinstance(cfg.cost_model, LinearCostModel) and cfg.cost_model.intercept_s == 0.125
    assert (cfg.engine.name, cfg.engine.async_scheduling) == ("trtllm", True)
    assert_skip_ahead_matches_stepping(w, cfg, policy)


def test_a_send_a_finish_frees_comes_after_the_step_ends_before_that_finish() -> None:
    """Draw 5 of the fleet's grid (two replicas, one gateway, least tokens, SGLang, steps of
    0.1 s, 7 users thinking 0). Both replicas start at 0, replica 0 first, so wherever their
    steps end together replica 0's step ends first in stepping (its end event was made
    first). At 1.1 s replica 0's step finishes request 2; its user sends request 8 at once
    (the users' process is interrupted: URGENT, right after that step end and before replica
    1's), routed to replica 1, whose step ending then has not ended: request 8 joins replica 1's
    next step, its first token at 1.2 s, one step after it was sent. At 1.4 s replica 1's step
    finishes request 5; its user sends request 9, routed to replica 0, whose step ending then
    has ended: request 9 waits for replica 0's step from 1.4 s, its first token at 1.6 s, two
    steps after it was sent. Skip-ahead gave request 9 its token a step early (the send came
    after the fleet's finish hook had returned, so replica 0's decode run counted its step
    ending then as not ended: ``fleet_ties.FleetTies.actor`` is now kept for the instant), and,
    with the actor kept, request 8 a step late (replica 0 had started a decode run at 1.1 s,
    whose first step's end was read as its step ending then: ``FleetTies._ends_to``)."""
    w, cfg, policy = closed_loop_draw(5, fleet=True)
    assert cfg.fleet is not None and cfg.fleet.router == "least_tokens"
    assert cfg.closed_loop is not None and cfg.closed_loop.think_time_s == 0.0
    assert isinstance(cfg.cost_model, LinearCostModel) and cfg.cost_model.intercept_s == 0.1
    step, _ = assert_skip_ahead_matches_stepping(w, cfg, policy)
    rec = step.records
    assert rec["finished_s"][2] == rec["arrival_s"][8] == pytest.approx(1.1)
    assert rec["finished_s"][5] == rec["arrival_s"][9] == pytest.approx(1.4)
    assert rec["first_token_s"][8] == pytest.approx(1.2)
    assert rec["first_token_s"][9] == pytest.approx(1.6)


@pytest.mark.parametrize("seed", [3, 12, 14])
def test_closed_loops_on_a_fleet_are_alike_stepping_and_skipping_ahead(seed: int) -> None:
    """Draws of the fleet's closed-loop grid (users thinking 0: each sends as a finish frees
    it, at an instant where both replicas' steps end) on which skip-ahead's first tokens came
    a step early (vLLM; TensorRT-LLM and vLLM under async scheduling)
    before the sends followed the finishing replica's step end (issue 37 item 4)."""
    w, cfg, policy = closed_loop_draw(seed, fleet=True)
    assert cfg.closed_loop is not None and cfg.closed_loop.think_time_s == 0.0
    assert_skip_ahead_matches_stepping(w, cfg, policy)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**16), st.booleans())
def test_skip_ahead_matches_stepping_on_the_closed_loop_grid(seed: int, fleet: bool) -> None:
    """The closed-loop grid (:func:`closed_loop_draw`: sends and step ends tie), on one engine
    or two replicas with one gateway: skip-ahead byte-identical to stepping."""
    w, cfg, policy = closed_loop_draw(seed, fleet)
    assert_skip_ahead_matches_stepping(w, cfg, policy)
