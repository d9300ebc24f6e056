"""Hypothesis properties over random workloads and configurations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import accumulate

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.decode_plan import (
    GROUP_SMALL_K,
    DecodeRunPlanner,
    block_takes,
    run_used,
)
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.engine_variants import ENGINE_CLASSES, TrtllmEngine
from kvbudget.simulator.fast_decode import DecodeGroup, SkipAheadEngine
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import FleetConfig
from kvbudget.workloads import Workload, from_columns
from tests.conftest import assert_skip_ahead_matches_stepping, assert_token_gaps_equal

TIERS = (
    TierConfig("interactive", max_sequence_tokens=4096, priority=0, queue_timeout_s=3.0),
    TierConfig(
        "batch",
        max_sequence_tokens=4096,
        priority=1,
        queue_timeout_s=30.0,
        retryable_on_overload=True,
    ),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Workload, SimConfig, str, dict[str, object]]:
    n = draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(draw(st.sampled_from([0.05, 0.3, 1.0])), n))
    prompt = rng.integers(1, draw(st.sampled_from([50, 400, 1500])), n)
    cap = rng.integers(1, draw(st.sampled_from([20, 300, 1200])), n)
    out = np.maximum(1, (cap * rng.random(n)).astype(np.int64))
    tiers = list(np.where(rng.random(n) < 0.5, "interactive", "batch"))
    w = from_columns(arrival, prompt, out, max_output_tokens=cap, tiers=tiers)
    block_size = draw(st.sampled_from([1, 4, 16]))
    blocks = draw(st.integers(1, 400)) * 16 // block_size
    engine = EngineConfig(
        num_gpu_blocks=blocks,
        block_size=block_size,
        max_num_seqs=draw(st.integers(1, 16)),
        max_num_batched_tokens=draw(st.sampled_from([16, 128, 2048])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "priority"])),
        skip_ahead=draw(st.booleans()),
    )
    cfg = SimConfig(
        engine=engine,
        tiers=TIERS,
        cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7),
        timeline_period_s=0.05,
    )
    policy = draw(st.sampled_from(["unlimited", "conservative", "overcommit", "preemptive"]))
    params: dict[str, object] = {}
    if policy in ("overcommit", "preemptive"):
        params["overcommit_ratio"] = draw(st.sampled_from([0.1, 0.5, 1.0]))
    if policy == "preemptive":
        params["mode"] = draw(st.sampled_from(["preempt", "defer"]))
    return w, cfg, policy, params


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(scenarios())
def test_every_request_ends_in_exactly_one_terminal_status(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    res = simulate(w, make_policy(policy, params), cfg)
    rec = res.records
    assert len(rec) == len(w)
    assert rec.request_id.is_unique
    assert set(rec.status) <= {
        "completed",
        "rejected_too_large",
        "rejected_overloaded",
        "expired",
        "preempted_dropped",
    }
    done = rec.status == "completed"
    assert (rec.output_tokens[done].to_numpy() == w.output_tokens[done.to_numpy()]).all()
    assert (rec.first_token_s[done] >= rec.arrival_s[done]).all()
    assert (rec.finished_s[done] >= rec.first_token_s[done]).all()
    assert rec.finished_s[~done].isna().all()
    assert sum(
        res.summary["overall"][s]
        for s in (
            "completed",
            "rejected_too_large",
            "rejected_overloaded",
            "expired",
            "preempted_dropped",
        )
    ) == len(w)


@SETTINGS
@given(scenarios())
def test_kv_never_exceeds_capacity(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    tl = simulate(w, make_policy(policy, params), cfg).timeline
    assert (tl.kv_used_tokens <= tl.kv_capacity_tokens).all()
    assert (tl.kv_used_tokens >= 0).all()


@SETTINGS
@given(scenarios())
def test_conservative_never_oversubscribes_and_never_preempts(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, _, _ = case
    res = simulate(w, make_policy("conservative"), cfg)
    assert (res.timeline.kv_reserved_tokens <= res.summary["kv_capacity_tokens"]).all()
    assert res.summary["engine"]["num_engine_preemptions"] == 0
    assert int(res.records.num_preemptions.sum()) == 0
    # the seed's invariant: every admitted request's reservation fits its tier and capacity
    admitted = res.records[res.records.admitted_s.notna()]
    assert (admitted.reserved_tokens <= 4096 + cfg.engine.block_size).all()
    assert (admitted.reserved_tokens >= admitted.prompt_tokens + admitted.max_output_tokens).all()


@SETTINGS
@given(scenarios())
def test_same_inputs_give_identical_records(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    a = simulate(w, make_policy(policy, params), cfg)
    b = simulate(w, make_policy(policy, params), cfg)
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)


@SETTINGS
@given(scenarios())
def test_skip_ahead_matches_step_by_step(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    assert_skip_ahead_matches_stepping(w, cfg, policy, params)


@SETTINGS
@given(
    scenarios(),
    st.sampled_from(["adaptive", "peak", "conservative", "overcommit"]),
    st.sampled_from([None, 0.3, 1.0, 3.0]),
)
def test_skip_ahead_matches_step_by_step_when_the_gateway_reads_mid_run(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
    policy: str,
    lease_ttl_s: float | None,
) -> None:
    """Mid-run reads of the engine: ``adaptive`` and ``peak`` read running requests' output
    tokens at arrivals; an expired lease revokes a running request, whose record keeps the
    tokens of the steps that ended before. Both land inside skip-ahead decode runs."""
    from dataclasses import replace

    w, cfg, _, _ = case
    assert_skip_ahead_matches_stepping(w, replace(cfg, lease_ttl_s=lease_ttl_s), policy)


@SETTINGS
@given(scenarios(), st.sampled_from(["vllm", "vllm-swap"]))
def test_skip_ahead_follows_the_most_blocks_victim_rule(
    case: tuple[Workload, SimConfig, str, dict[str, object]], name: str
) -> None:
    """The preemption victim rule is one method of the reference (``Engine._victim``): the
    speed-ups, which have no line of their own for it, give stepping's results under either
    rule."""
    w, cfg, policy, params = case
    engine = replace(cfg.engine, name=name,  # type: ignore[arg-type]
                     preemption_victim="most_blocks")
    assert_skip_ahead_matches_stepping(w, replace(cfg, engine=engine), policy, params)


@SETTINGS
@given(
    scenarios(),
    st.sampled_from(["round_robin", "least_tokens", "prefix_affinity"]),
    st.sampled_from(["global", "per_replica"]),
    st.integers(2, 5),
    st.sampled_from(["unlimited", "overcommit", "preemptive", "adaptive", "peak"]),
    st.sampled_from([None, 0.3]),
    st.sampled_from(sorted(ENGINE_CLASSES)),
)
def test_skip_ahead_matches_step_by_step_in_a_fleet(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
    router: str,
    budget: str,
    num_replicas: int,
    policy: str,
    lease_ttl_s: float | None,
    name: str,
) -> None:
    """A fleet's replicas plan their decode runs to about when the router sends them their
    next request, not to the fleet's next arrival: whatever reaches a replica in the middle of
    a run (a request routed to it, a revocation, a read of its output tokens by ``adaptive``
    or ``peak``, another replica's completion admitting a waiting request) ends the run where
    stepping would have. Preemption-heavy: scenarios draw KV as small as 16 blocks a replica."""
    from kvbudget.simulator.fleet import FleetConfig

    w, cfg, drawn, params = case
    if policy != "unlimited":
        drawn, params = policy, {}
    engine = cfg.engine
    cfg = replace(
        cfg,
        engine=replace(engine, name=name),  # type: ignore[arg-type]
        fleet=FleetConfig(num_replicas, router=router, budget=budget),  # type: ignore[arg-type]
        lease_ttl_s=lease_ttl_s,
    )
    assert_skip_ahead_matches_stepping(w, cfg, drawn, params)


GRID_TIERS = (TierConfig("interactive", queue_timeout_s=5.0, max_sequence_tokens=10**6),
              TierConfig("batch", queue_timeout_s=None, max_sequence_tokens=10**6))


def _grid_fleet_case(
    seed: int, router: str, budget: str, blocks: int, step_s: float, name: str,
    per_prefill_seq_s: float = 0.0,
) -> tuple[Workload, SimConfig]:
    """60 requests arriving on a 0.25 s grid, served by 2 replicas of ``blocks`` blocks each
    whose steps all take ``step_s`` (plus ``per_prefill_seq_s`` per prefilling request): step
    ends fall exactly on arrivals, queue-timeout timers (arrival + 5 s), gateway samples (every
    second) and on the other replica's step ends."""
    rng = np.random.default_rng(seed)
    n = 60
    arrival = np.sort(rng.integers(0, 80, n)) * 0.25
    prompt, out = rng.integers(1, 200, n), rng.integers(1, 60, n)
    w = from_columns(arrival.astype(np.float64), prompt, out,
                     max_output_tokens=out + rng.integers(0, 20, n),
                     tiers=rng.choice(["interactive", "batch"], n).tolist())
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=blocks, block_size=16, max_num_seqs=8,
                            max_num_batched_tokens=256, name=name),  # type: ignore[arg-type]
        tiers=GRID_TIERS,
        cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0, 0.0, per_prefill_seq_s),
        fleet=FleetConfig(2, router=router, budget=budget),  # type: ignore[arg-type]
    )
    return w, cfg


FLEET_GRID = (
    st.integers(0, 2**16),
    st.sampled_from(["round_robin", "least_tokens", "prefix_affinity"]),
    st.sampled_from([20, 40, 60]),
    st.sampled_from([0.25, 0.125, 0.1]),
    st.sampled_from(["preemptive", "overcommit", "unlimited"]),
    st.sampled_from(sorted(ENGINE_CLASSES)),
    st.sampled_from([0, 1]),
)
"""The fleet grid's draws: seed, router, blocks, step, policy, engine, prefill term."""


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*FLEET_GRID)
def test_skip_ahead_matches_stepping_on_the_fleet_grid_with_per_replica_budgets(
    seed: int, router: str, blocks: int, step_s: float, policy: str, name: str, prefill: int
) -> None:
    """The fleet grid (:func:`_grid_fleet_case`) with few blocks (preemptions, a queue at
    each replica's gateway), steps of one length or (``prefill``) longer with prefills:
    skip-ahead byte-identical to stepping."""
    w, cfg = _grid_fleet_case(seed, router, "per_replica", blocks, step_s, name,
                              prefill * step_s)
    assert_skip_ahead_matches_stepping(w, cfg, policy)


def test_a_request_revoked_readmitted_and_revoked_again_within_a_step_stays_out() -> None:
    """At t = 11.75 the gateway revokes row 28 while a step is in flight (the abort waits for
    the step's end), admits it again (the re-admission waits for the abort) and revokes it
    again: it must stay out. It used to be added back at the step's end, a request the
    gateway no longer held, and when the gateway admitted it later the engine waited for an
    abort that never came, appending to the list it was reading (a hang, then MemoryError,
    stepping and skip-ahead alike)."""
    w, cfg = _grid_fleet_case(11, "round_robin", "per_replica", 60, 0.1, "sglang")
    assert_skip_ahead_matches_stepping(w, cfg, "preemptive")


def test_a_decode_runs_end_lands_on_the_instant_stepping_reaches() -> None:
    """SimPy schedules a timeout at ``now + delay``: from a decode run's start, ``t1 - now``
    can round so that the run's end lands an ulp away from ``t1`` (here 1.5, an arrival),
    where stepping, whose last step's event is made at that step's start, lands on ``t1``
    exactly; the request arriving then got its first token a step late. The run now waits
    from its last step's start when the direct delay would miss ``t1`` (found by the fleet
    grid of the global-budget branch of issue 37, seed 36)."""
    w, cfg = _grid_fleet_case(36, "round_robin", "per_replica", 60, 0.1, "sglang")
    assert_skip_ahead_matches_stepping(w, cfg, "preemptive")


def test_skip_ahead_matches_stepping_on_a_fleet_tie_where_a_finish_admits_onto_a_run() -> None:
    """The fleet grid with one global budget and few blocks: at t = 14.499999999999964 both
    replicas' steps end (steps of 0.1 s, started at the same instants since before 14.2 s,
    where replica 0's step end came first; replica 0 then admitted a request of its own
    finish, which does not make its next step one started from idle); replica 1's finish
    admits a request routed to replica 0, in the middle of replica 0's decode run. Stepping
    runs replica 0's step end first (its end event was made first), so the request waits a
    step; the run's step ending then must count as ended first (``fleet_ties``). It used to
    take the request a step early."""
    w, cfg = _grid_fleet_case(0, "round_robin", "global", 20, 0.1, "vllm")
    assert_skip_ahead_matches_stepping(w, cfg, "preemptive")


def test_a_gateway_timer_armed_during_a_run_for_its_last_steps_end_comes_first() -> None:
    """Per-replica budgets, TGI, steps of 0.25 s: replica 0 plans a decode run (from before
    20.75 s) whose last step ends at 21.5 s with a finish. At 20.75 s the gateway's timer rings
    and arms the next one for 21.5 s, during the run. Stepping makes the step's end event at
    that step's start (21.25 s), after the timer's, so the timer runs first at 21.5 s (and arms
    the next one for 22 s, which arms 23 s at 22 s, after that sample's timeout was made); the
    run's end event, made when the run started, used to run before it, so the timer chain
    went 21.5 -> 23 s, armed before the 23 s sample's timeout, and the sample at t = 23 read
    the gateway after the timer had moved two requests out of its queue: num_waiting 22, not
    24 (records equal). The fleet told its replicas of every gateway timer armed, and a replica
    whose decode run ended then made the run's end event at its last step's start; the timer
    is now URGENT (``simulator/alarm.py``), so it runs before every step ending at its instant,
    whenever either was made (found by the per-replica fleet grid)."""
    w, cfg = _grid_fleet_case(26695, "least_tokens", "per_replica", 40, 0.25, "tgi", 0.25)
    assert_skip_ahead_matches_stepping(w, cfg, "preemptive")


def test_a_gateway_timer_armed_during_a_run_for_its_last_steps_end_admits_before_it() -> None:
    """The same tie as above, acting on the records: the gateway's timers ring every 0.25 to
    0.5 s here (15.5, 15.75, 16.25 s: queue timeouts), each armed during replica 1's decode
    run for an instant where one of its steps ends. Stepping runs the timer first (armed
    before that step started), so what it admits joins replica 1's next step; skip-ahead ran
    the run's end first, so replica 1's next step started without it and request 7 finished a
    step early (16.5 s, not 16.75 s; request 36's first token 16.75 s, not 17.25 s)."""
    w, cfg = _grid_fleet_case(143, "least_tokens", "per_replica", 40, 0.25, "tgi", 0.25)
    assert_skip_ahead_matches_stepping(w, cfg, "preemptive")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*FLEET_GRID)
def test_skip_ahead_matches_stepping_on_the_fleet_grid_with_a_global_budget(
    seed: int, router: str, blocks: int, step_s: float, policy: str, name: str, prefill: int
) -> None:
    """The fleet grid (:func:`_grid_fleet_case`) with one gateway for both replicas and few
    blocks: a finish on one replica admits a queued request onto the other, aborts one there or
    reads its output tokens at an instant where the other's steps end too (steps of one length
    tie at every step; ``prefill``: longer with prefills). Skip-ahead byte-identical to
    stepping (records, timeline, gaps). Stepping's own gap count is not checked here: with
    gateway revocations it can count more gaps than tokens (seed 43, round robin, 20 blocks,
    0.1 s, trtllm, preemptive: 852 gaps for 828 in the batch tier), a separate issue of the
    reference that skip-ahead reproduces exactly."""
    w, cfg = _grid_fleet_case(seed, router, "global", blocks, step_s, name, prefill * step_s)
    step = simulate(w, make_policy(policy), replace(cfg, engine=replace(cfg.engine,
                                                                     skip_ahead=False)))
    skip = simulate(w, make_policy(policy), replace(cfg, engine=replace(cfg.engine,
                                                                     skip_ahead=True)))
    assert step.records.equals(skip.records)
    assert step.timeline.equals(skip.timeline)
    assert_token_gaps_equal(step, skip)


def _true_state(engine: Engine, rows: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
    """``num_computed_tokens``, ``num_tokens``, ``num_output_tokens`` and ``num_blocks`` of
    ``rows``, with the decode group's steps added to its members (see ``DecodeGroup``)."""
    computed = engine.num_computed_tokens[rows].copy()
    tokens = engine.num_tokens[rows].copy()
    output = engine.num_output_tokens[rows].copy()
    blocks = engine.kv.num_blocks[rows].copy()
    g = engine._group if isinstance(engine, SkipAheadEngine) else None
    if isinstance(g, DecodeGroup):
        for k, i in enumerate(rows.tolist()):
            if i in g.members:
                d = g.step - g.members[i]
                computed[k] += d
                tokens[k] += d
                output[k] += d
                # (one holding blocks beyond its computed tokens keeps its array's)
                blocks[k] = max(blocks[k], -(-computed[k] // engine.block_size))
    return computed, tokens, output, blocks


def _assert_group_facts(engine: Engine) -> None:
    """The decode group's running sums, blocks taken by step and finish heap agree with its
    members."""
    g = engine._group if isinstance(engine, SkipAheadEngine) else None
    if not isinstance(g, DecodeGroup):
        return
    members = list(g.members)
    # the members are the first running requests, in running order (join order), what
    # running_output_tokens relies on
    assert members == engine.running[: len(members)]
    if engine.commit.all_decode:
        assert members == engine.running
    rows = np.asarray(members, dtype=np.int64)
    computed, tokens, output, blocks = _true_state(engine, rows)
    bs = engine.block_size
    # the array values a member joined with, and the step it joined at
    joined = np.asarray(list(g.members.values()), dtype=np.int64)
    assert engine.joined_at[rows].tolist() == joined.tolist()
    assert g.size == len(members)
    assert g.context == int(computed.sum())
    # a member takes a block in each step that finds its blocks full, to its last step: from
    # the step that fills those it holds now (TGI: blocks for its whole output), every bs
    assert (blocks * bs >= computed).all()
    if not g.over:
        assert (blocks * bs < computed + bs).all()
    left = (engine.target_output[rows] - output).tolist()
    want = np.zeros(max(left, default=0) + 1, np.int64)
    for room, n in zip((blocks * bs - computed).tolist(), left, strict=True):
        want[room:n:bs] += 1
    assert g.take[g.step : g.step + len(want)].tolist() == want[: len(g.take) - g.step].tolist()
    assert not g.take[g.step + len(want) :].any()
    # ties in the heap break by join order, which is running order (finishes in running order)
    assert [i for _, _, i in sorted(g.finish, key=lambda e: e[1])] == members
    finish = {i: f for f, _, i in g.finish}
    assert len(finish) == len(g.finish) == len(members)
    for k, i in enumerate(members):
        assert finish[i] - g.step == int(engine.target_output[i]) - int(output[k])
    assert (tokens - computed == 1).all()
    assert (output > 0).all() and (output < engine.target_output[rows]).all()


def _assert_running_facts(engine: Engine) -> None:
    """The facts the engine keeps about its running set (``Engine.commit.all_decode``,
    ``running`` as an array, the decode group) and its invariants: every block is free,
    held by a request or cached; the seats."""
    rows = np.asarray(engine.running, dtype=np.int64)
    cached = engine._running_array._arr  # (None: to be rebuilt)
    if cached is not None:
        assert cached.tolist() == engine.running
    assert len(engine.running) <= engine.config.max_num_seqs
    _assert_group_facts(engine)
    computed, tokens, output, blocks = _true_state(engine, rows)
    # what the run driver reads (ServingEngine) is current without a sync: the group's steps
    # are counted
    assert engine.output_tokens()[rows].tolist() == output.tolist()
    assert [engine.output_tokens_of(i) for i in rows.tolist()] == output.tolist()
    # ... and so is what the variants' hooks read of running requests
    assert engine.running_output_tokens().tolist() == output.tolist()
    assert engine.kv.num_running_blocks == int(blocks.sum())
    # no request generates more than it declared, so none holds more than its worst case
    worst = -(-(engine.prompt_tokens[rows] + engine.max_output_tokens[rows] - 1)
              // engine.block_size)
    assert (blocks <= np.maximum(worst, 1)).all()
    if isinstance(engine, TrtllmEngine):  # its admission reads the running requests' worst case
        assert engine._running_worst == int(engine.worst_case_blocks[rows].sum())
    # a running request's blocks hold its computed tokens (the decode group's blocks taken
    # by step, DecodeGroup, rely on it)
    assert (blocks * engine.block_size >= computed).all()
    if engine.commit.all_decode:
        assert (tokens - computed == 1).all()
        assert (output > 0).all()
    # block conservation (no prefix caching here): the waiting requests' blocks as their
    # arrays say, the running ones' as their true state does
    held = int(engine.kv.num_blocks[engine.in_engine].sum()) - int(engine.kv.num_blocks[rows].sum())
    assert held + int(blocks.sum()) + engine.kv.num_free_blocks == engine.num_gpu_blocks
    if engine.config.name != "tgi":
        # running requests hold exactly the blocks of their computed tokens (TGI: blocks for
        # the whole output, from the start)
        assert (blocks == -(-computed // engine.block_size)).all()


def _simulate_checking_every_step(
    w: Workload, cfg: SimConfig, policy: str, params: dict[str, object]
) -> None:
    Engine.step_observer = _assert_running_facts
    try:
        simulate(w, make_policy(policy, params), cfg)
    finally:
        Engine.step_observer = None


# every preset on the decode group, with the knobs that change what its hooks do
GROUP_PRESETS: list[tuple[str, dict[str, object]]] = [
    ("vllm", {}),
    ("vllm-swap", {"swap_space_gib": 4.0, "preemption_mode": "swap"}),
    # little swap space: falls back to recompute too
    ("vllm-swap", {"swap_space_gib": 0.0005, "preemption_mode": "swap"}),
    ("tgi", {}),
    ("sglang", {}),
    ("sglang", {"schedule_conservativeness": 0.3}),
    ("trtllm", {}),
    ("trtllm", {"capacity_scheduler_policy": "MAX_UTILIZATION"}),
]


@SETTINGS
@given(scenarios(), st.sampled_from(GROUP_PRESETS))
def test_every_preset_on_the_decode_group_matches_stepping(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
    engine: tuple[str, dict[str, object]],
) -> None:
    """Records and timeline of each preset with skip-ahead (the decode group) equal stepping's,
    on random workloads: small KV (preemptions, SGLang's retractions and its new_token_ratio,
    TensorRT-LLM's victim choice, swap and its fallback), token budgets that cut prefills."""
    w, cfg, policy, params = case
    name, extra = engine
    cfg = replace(cfg, engine=replace(cfg.engine, name=name, **extra))  # type: ignore[arg-type]
    a, b = assert_skip_ahead_matches_stepping(w, cfg, policy, params)
    # the engine's own figures too (retractions, the final new_token_ratio, swap traffic)
    assert a.summary["engine"] == b.summary["engine"]


@SETTINGS
@given(scenarios(), st.sampled_from(sorted(ENGINE_CLASSES)))
def test_running_set_facts_hold_before_every_step(
    case: tuple[Workload, SimConfig, str, dict[str, object]], name: str
) -> None:
    w, cfg, policy, params = case
    cfg = replace(cfg, engine=replace(cfg.engine, name=name))  # type: ignore[arg-type]
    _simulate_checking_every_step(w, cfg, policy, params)




@SETTINGS
@given(
    scenarios(),
    st.sampled_from(["adaptive", "peak", None]),
    st.sampled_from([None, 0.3]),
    st.sampled_from(GROUP_PRESETS),
)
def test_decode_group_facts_hold_before_every_step(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
    policy: str | None,
    lease_ttl_s: float | None,
    engine: tuple[str, dict[str, object]],
) -> None:
    """Every preset with skip-ahead keeps its decoding requests as a decode group; its sums,
    blocks taken by step (TGI's members holding blocks beyond their tokens too) and finish heap
    match the requests' true state before every step, and so do what hooks read of running requests, also when the gateway reads
    output tokens mid-run (adaptive, peak) or revokes leases."""
    w, cfg, drawn, params = case
    name, extra = engine
    cfg = replace(cfg, engine=replace(
        cfg.engine, name=name, skip_ahead=True, **extra,  # type: ignore[arg-type]
    ))
    cfg = replace(cfg, lease_ttl_s=lease_ttl_s)
    if policy is not None:
        drawn, params = policy, {}
    _simulate_checking_every_step(w, cfg, drawn, params)


@SETTINGS
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([2, 3, 4, 6, 8]),
    st.integers(8, 40),
    st.sampled_from(["unlimited", "overcommit"]),
)
def test_skip_ahead_matches_step_by_step_when_the_budget_cuts_a_prefill(
    seed: int, budget: int, blocks: int, policy: str
) -> None:
    """A token budget of one token per running request: a request resuming after a
    preemption (it has output already) may get one token of its recomputation, the budget's
    last, alongside decoding ones. One token each is then not a decode step."""
    rng = np.random.default_rng(seed)
    n = 30
    arrival = np.cumsum(rng.exponential(0.05, n))
    prompt = rng.integers(1, 60, n)
    out = rng.integers(1, 80, n)
    w = from_columns(arrival, prompt, out, max_output_tokens=out + 10)
    engine = EngineConfig(
        num_gpu_blocks=blocks, block_size=4, max_num_seqs=budget, max_num_batched_tokens=budget
    )
    cfg = SimConfig(
        engine=engine, cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7), timeline_period_s=0.05
    )
    assert_skip_ahead_matches_stepping(w, cfg, policy)


@SETTINGS
@given(scenarios(), st.sampled_from(sorted(ENGINE_CLASSES)))
def test_every_engine_schedules_what_fits(
    case: tuple[Workload, SimConfig, str, dict[str, object]], name: str
) -> None:
    """Every request that fits the model's length ends in one terminal status, on every engine
    preset: none waits forever on an idle engine (SGLang once did, when a client declared a
    max_tokens beyond the context; SGLang clips it, and so does the preset now)."""
    from dataclasses import replace

    w, cfg, policy, params = case
    cfg = replace(cfg, engine=replace(cfg.engine, name=name))  # type: ignore[arg-type]
    rec = simulate(w, make_policy(policy, params), cfg).records
    assert len(rec) == len(w)
    assert rec.request_id.is_unique


@SETTINGS
@given(
    st.sampled_from(["linear", "roofline", "tiny", "vllm-v1"]),
    st.integers(1, 256),
    st.integers(0, 2_000_000),
    st.integers(1, GROUP_SMALL_K),
    st.floats(1.0, 1e5),
    st.one_of(st.just(-1), st.integers(0, GROUP_SMALL_K + 2)),
)
def test_short_decode_run_step_times_match_the_array_path(
    kind: str, n: int, c0: int, k_max: int, t: float, ext_at: int
) -> None:
    """:meth:`DecodeRunPlanner.steps` in Python numbers (one scalar step_time call per step)
    gives the bits of the array path, and :meth:`~DecodeRunPlanner.keep`'s cut at t_ext of
    either (also when t_ext is exactly a step's end, or beyond the run) is ``searchsorted``'s:
    the step in progress at t_ext, the one ending then where one does (``decode_plan._TIE``)."""
    cost: LinearCostModel | RooflineCostModel | VllmStepModel = {
        "linear": LinearCostModel(0.003, 1e-4, 2e-4, 3e-8),
        # the default step model: a dense model on one GPU has its own float path
        "vllm-v1": VllmStepModel(get_gpu("A100-80GB"), get_model("Llama-2-7B")),
        # steps too short to move a clock past 1 s: end times repeat, so ``t_ext`` equal to
        # one of them is equal to them all
        "tiny": LinearCostModel(1e-17, 0.0, 0.0, 0.0),
    }.get(kind) or RooflineCostModel(get_gpu("H100-80GB"), get_model("Llama-3.1-8B"))
    planner = DecodeRunPlanner(cost, 16)
    context = np.arange(c0 + n, c0 + n * (k_max + 1), n, dtype=np.float64)
    on_arrays: Callable[..., npt.NDArray[np.float64]] = cost.step_time
    dts = np.asarray(on_arrays(0.0, float(n), context, 0.0, 0.0), np.float64)
    ends = dts.copy()
    ends[0] += t
    np.add.accumulate(ends, out=ends)
    t_ext = float(ends[ext_at]) if 0 <= ext_at < k_max else (np.inf if ext_at < 0 else t)
    k = k_max
    if t_ext < ends[-1]:
        k = int(ends.searchsorted(t_ext, side="left")) + 1
    dt0 = planner.decode_step(n, c0 + n)
    assert planner.bound(k_max, t, np.inf, dt0) == min(k_max, 4096)
    got_ends, got_dts = planner.steps(n, c0, k_max, t, dt0, True)
    assert planner.keep(got_ends, t_ext, t_ext) == planner.keep(ends, t_ext, t_ext) == k
    assert got_ends == ends.tolist()
    assert got_dts == dts.tolist()


@SETTINGS
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=GROUP_SMALL_K + 8),
    st.integers(1, GROUP_SMALL_K),
    st.integers(0, 400),
    st.integers(0, 10**5),
)
def test_a_short_group_runs_blocks_are_the_array_plans(
    take: list[int], k_max: int, free: int, used_now: int
) -> None:
    """:func:`run_used` of a short run in Python numbers gives the blocks in use of its
    arrays (the blocks steps 1.. take, summed, cut where they run out of the free ones), plus
    those in use now; both are the steps' sums, cut at the first step that does not fit."""
    s0 = len(take) // 3
    take_a = np.array(take + [0] * (s0 + k_max), np.int64)
    want = run_used(take_a, s0, k_max, free, used_now, False)
    assert run_used(take_a, s0, k_max, free, used_now, True) == want.tolist()
    steps = list(accumulate(take_a[s0 + 1 : s0 + k_max].tolist(), initial=used_now))
    assert want.tolist() == [u for u in steps if u - used_now <= free]  # (they only rise)


@SETTINGS
@given(
    st.sampled_from([1, 2, 16, 32]),
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 200)), max_size=30),
)
def test_a_formed_groups_blocks_by_step_are_each_members_steps(
    bs: int, members: list[tuple[int, int]]
) -> None:
    """:func:`block_takes` (a decode group forming: its members' blocks by step, counted by
    phase with arrays) gives each member's block in steps ``first``, ``first + bs``, ..
    before ``end``, one member at a time."""
    first = np.array([f for f, _ in members], np.int64)
    end = np.array([e for _, e in members], np.int64)
    want = np.zeros(max((e for _, e in members), default=0) + 1, np.int64)
    for f, e in members:
        want[f:e:bs] += 1
    assert block_takes(first, end, bs).tolist() == want.tolist()


def test_a_runs_last_step_start_takes_its_turn_among_tied_step_ends() -> None:
    """The fleet grid with one global budget (seed 186, 40 blocks, steps of 0.125 s, longer
    with prefills, SGLang): replica 1's decode run, planned at 16.75 s behind a refused head
    past the next event to the sample at 17 s, waits for its last step's start (17 s, made
    then as stepping makes it); at 17 s replica 0's step ends too, first in stepping's order,
    and its finish admits request 10 onto replica 1. The run's last step used to start before
    that (its wait was made at 16.75 s, replica 0's step end at 16.875 s): the sample at 17 s
    counted 22 requests waiting, stepping 23 (found by the explore profile of the global-budget
    fleet grid). The last step's start took its turn among the step ends due then
    (``_last_start_turn``); a run now waits for its end as one event, and the fleet's ties count
    its steps ended at 17 s in stepping's order (``TiedSteps._steps_done``)."""
    w, cfg = _grid_fleet_case(186, "round_robin", "global", 40, 0.125, "sglang", 0.125)
    step = simulate(w, make_policy("preemptive"), replace(cfg, engine=replace(cfg.engine,
                                                                          skip_ahead=False)))
    skip = simulate(w, make_policy("preemptive"), replace(cfg, engine=replace(cfg.engine,
                                                                          skip_ahead=True)))
    assert step.records.equals(skip.records)
    assert step.timeline.equals(skip.timeline)
    assert_token_gaps_equal(step, skip)
