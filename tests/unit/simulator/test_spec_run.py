"""Speculative decoding on the speed-up path (issue 39 item 3, simulator/spec_run.py): runs of
verify steps planned at once give stepping's results bit for bit; known answers worked by hand;
properties over drawn scenarios (preemptions, refused heads, revocations mid-run, fleets)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.speculative import SpeculativeConfig
from kvbudget.policies import TierConfig, make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.scenario import make_scenario
from kvbudget.simulator.spec_run import SpecGroup, SpecSkipAheadEngine
from kvbudget.workloads import Workload
from tests.conftest import REPO, make_workload
from tests.model.test_properties import SETTINGS, scenarios

TIERS = (TierConfig("interactive", queue_timeout_s=None),
         TierConfig("batch", priority=1, queue_timeout_s=None))
LINEAR = LinearCostModel(0.01, 0.001, 0.0, 0.0)  # 10 ms a step + 1 ms a prefill/verify token


def _same(a: RunResult, b: RunResult) -> None:
    """Stepping's and the speed-up's results, bit for bit (the wall time aside)."""
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    ga, gb = a.token_gaps, b.token_gaps
    assert (ga is None) == (gb is None)
    if ga is not None and gb is not None:
        assert ga.equals(gb)
    drop = ("wall_time_s",)
    assert ({k: v for k, v in a.summary.items() if k not in drop}
            == {k: v for k, v in b.summary.items() if k not in drop})


def _both(w: Workload, cfg: SimConfig, policy: str = "unlimited",
          params: dict[str, object] | None = None) -> tuple[RunResult, RunResult, list[int]]:
    """``w`` stepped and with skip-ahead; the engine's calls of ``_step`` each way (a run of
    steps planned at once is one call)."""
    calls: list[int] = []
    out = []
    for skip in (False, True):
        seen = [0]

        def observe(e: Engine, seen: list[int] = seen) -> None:
            seen[0] += 1

        Engine.step_observer = observe
        try:
            out.append(simulate(w, make_policy(policy, params or {}),
                                replace(cfg, engine=replace(cfg.engine, skip_ahead=skip))))
        finally:
            Engine.step_observer = None
        calls.append(seen[0])
    return out[0], out[1], calls


def _config(spec: SpeculativeConfig, **engine: object) -> SimConfig:
    kw: dict[str, object] = {"num_gpu_blocks": 10_000, "max_num_batched_tokens": 8192,
                             "max_num_seqs": 256, "speculative_config": spec, **engine}
    return SimConfig(engine=EngineConfig(**kw), tiers=TIERS,  # type: ignore[arg-type]
                     cost_model=LINEAR)


# --- known answers --------------------------------------------------------------------------
def test_a_run_of_verify_steps_is_planned_at_once_with_the_acceptance_arithmetic() -> None:
    # every draft accepted (n-gram, rate 1, k = 3): after the prefill (0.01 + 0.100 s, first
    # token) each verify step (4 query tokens: 0.01 + 0.004 s) emits 4 tokens: 1 -> 5 -> ... ->
    # 41, ten steps. Stepping calls _step 11 times; the speed-up twice (the prefill, then the
    # ten verify steps as one run, planned after the first was scheduled)
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=1.0)
    a, b, calls = _both(make_workload([0.0], [100], [41]), _config(spec))
    _same(a, b)
    r = b.records.iloc[0]
    assert r.output_tokens == 41
    assert r.e2e_s == pytest.approx(0.11 + 10 * 0.014)
    s = b.summary["engine"]["speculative"]
    assert (s["num_engine_steps"], s["num_verify_steps"], s["num_accepted_tokens"]) == (11, 10, 30)
    assert calls == [11, 2]


def test_a_run_ends_at_the_first_step_a_request_finishes() -> None:
    # two requests, every draft accepted: row 0 needs 1 + 4 * 2 = 9 tokens (two verify steps),
    # row 1 1 + 4 * 5 = 21 (five); the run ends with the step row 0 finishes in (step 3 of the
    # engine), the next run is row 1's last three steps: 1 prefill + 2 runs = 3 calls
    spec = SpeculativeConfig("eagle", 3, acceptance_rate=1.0)
    a, b, calls = _both(make_workload([0.0, 0.0], [40, 40], [9, 21]), _config(spec))
    _same(a, b)
    assert b.records.output_tokens.tolist() == [9, 21]
    assert b.summary["engine"]["speculative"]["num_engine_steps"] == 1 + 5
    assert calls == [6, 3]


def test_a_run_stops_before_the_step_whose_blocks_do_not_fit() -> None:
    # blocks of 4 tokens, 12 in all, two requests of 8 prompt tokens, every draft accepted:
    # a step holds blocks for computed + 4 scheduled + 3 lookahead tokens, so each holds
    # ceil(11/4) = 3 blocks after the prefill, then 4, 5, 6 (12 in all) as it computes 8, 12,
    # 16, 20 tokens; the 5th step needs a 7th block for row 0: none is free, row 1 (the last
    # running) is preempted. The run after the prefill is planned up to that step and stops
    # before it (the scheduler preempts there, as stepping)
    spec = SpeculativeConfig("eagle", 3, acceptance_rate=1.0)
    cfg = _config(spec, num_gpu_blocks=12, block_size=4)
    a, b, calls = _both(make_workload([0.0, 0.0], [8, 8], [30, 30]), cfg)
    _same(a, b)
    assert b.summary["engine"]["num_engine_preemptions"] == 1
    assert b.records.num_preemptions.tolist() == [0, 1]
    assert b.records.output_tokens.tolist() == [30, 30]
    assert calls[1] < calls[0]


def test_a_run_stops_before_the_step_whose_drafts_the_model_length_clips() -> None:
    # max_model_len 139 = 100 prompt + 39 output, every draft accepted: outputs 1 (prefill),
    # 5, 9, ..., 37 (nine verify steps of 3 drafts), then the request holds 137 tokens and
    # gets min(3, 139 - 137) = 2 drafts, of which 1 may be accepted (its own token is the
    # 39th): 10 verify steps, 29 drafts, 28 accepted. The run covers the nine full steps and
    # stops before the clipped one, which steps
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=1.0)
    a, b, calls = _both(make_workload([0.0], [100], [39]), _config(spec, max_model_len=139))
    _same(a, b)
    s = b.summary["engine"]["speculative"]
    assert (s["num_verify_steps"], s["num_draft_tokens"], s["num_accepted_tokens"]) == (
        10, 29, 28)
    assert calls == [11, 3]


def test_a_run_goes_on_through_the_step_after_an_arrival_under_async_scheduling() -> None:
    # n-gram (no draft time) with async scheduling, every draft accepted: A's prefill (40
    # tokens: 0.05 s), then verify steps of 4 tokens (0.014 s) ending at 0.064, 0.078, 0.092,
    # 0.106, ...; B comes at 0.085, during A's third verify step (engine step 4), so it is
    # schedulable once step 5 has ended and starts in step 6 (A's fifth verify step and B's
    # prefill: 0.054 s, to 0.160); step 7 verifies both (0.018 s) and B finishes (1 + 4
    # tokens, at 0.178); A's last four steps follow. The run after A's prefill goes on through
    # step 5 (DecodeRunPlanner.keep), so the speed-up calls _step five times: A's prefill,
    # that run, step 6, step 7 (B's first finish ends any run at once) and A's last run
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=1.0)
    w = make_workload([0.0, 0.085], [40, 40], [41, 5])
    a, b, calls = _both(w, _config(spec, async_scheduling=True))
    _same(a, b)
    assert b.records.ttft_s.tolist() == pytest.approx([0.05, 0.160 - 0.085])
    assert b.records.e2e_s.tolist() == pytest.approx([0.05 + 4 * 0.014 + 0.054 + 0.018
                                                      + 4 * 0.014, 0.178 - 0.085])
    assert b.summary["engine"]["speculative"]["num_engine_steps"] == 11
    assert calls == [11, 5]


def test_an_arrival_at_a_step_end_of_a_run_is_seen_as_stepping_sees_it() -> None:
    # step times on a grid of powers of two (a verify step of one request: 2**-6 + 4 * 2**-8
    # = 2**-5 s exactly): the second request arrives exactly at the end of the first's third
    # verify step; the arrival comes before that step's end (URGENT, decode_plan._TIE), so the
    # step after it is scheduled with the arrival in it, as stepping does
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=1.0)
    cost = LinearCostModel(2**-6, 2**-8, 0.0, 0.0)
    prefill = 2**-6 + 100 * 2**-8
    for n_steps in (1, 3, 6):
        w = make_workload([0.0, prefill + n_steps * 2**-5], [100, 50], [41, 21])
        cfg = replace(_config(spec), cost_model=cost)
        a, b, _ = _both(w, cfg)
        _same(a, b)


def test_the_speed_up_class_serves_speculative_engines_and_not_offload() -> None:
    from kvbudget.simulator.engine_variants import spec_engine_class

    spec = SpeculativeConfig("eagle", 3, acceptance_rate=0.5)
    for name in ("vllm", "vllm-swap"):
        cls = spec_engine_class(EngineConfig(name=name, speculative_config=spec))
        assert issubclass(cls, SpecSkipAheadEngine)
        stepped = spec_engine_class(EngineConfig(name=name, speculative_config=spec,
                                                 skip_ahead=False))
        assert not issubclass(stepped, SpecSkipAheadEngine)


@pytest.mark.parametrize("sets", [
    # the roofline cost model (the run's step times as arrays, stepping's as floats)
    ["engine.speculative_config.method=eagle3", "engine.speculative_config.num_speculative_tokens=4",
     "engine.speculative_config.acceptance_length=2.5", "engine.num_gpu_blocks=1500"],
    # a tier's own rate; drafts clipped by the model's length
    ["engine.speculative_config.method=eagle", "engine.speculative_config.num_speculative_tokens=3",
     "engine.speculative_config.acceptance_rate=0.7",
     "engine.speculative_config.acceptance_by_tier.batch=0.4", "engine.max_model_len=2100"],
    # swap preemption, MTP, a few blocks
    ["engine.name=vllm-swap", "engine.speculative_config.method=mtp",
     "engine.speculative_config.num_speculative_tokens=2",
     "engine.speculative_config.acceptance_rate=0.9", "engine.num_gpu_blocks=1200"],
    # n-gram (no async scheduling) at a higher rate
    ["engine.speculative_config.method=ngram", "engine.speculative_config.num_speculative_tokens=3",
     "engine.speculative_config.acceptance_rate=0.5", "workload.arrival.rate_rps=12"],
])
def test_scenarios_with_speculation_give_stepping_results(sets: list[str]) -> None:
    runs = []
    for skip in ("false", "true"):
        scn = make_scenario(REPO / "scenarios" / "synth_conservative.toml",
                            [*sets, "workload.duration_s=20", f"engine.skip_ahead={skip}"])
        runs.append(simulate(scn.workload(), scn.make_policy(None), scn.sim_config()))
    _same(*runs)


# --- properties -----------------------------------------------------------------------------
@SETTINGS
@given(scenarios(), st.integers(1, 5), st.sampled_from([0.0, 0.3, 0.7, 0.95, 1.0]),
       st.sampled_from(["ngram", "eagle", "mtp"]),
       st.sampled_from(["unlimited", "conservative", "overcommit", "adaptive", "peak"]),
       st.sampled_from([None, 0.3, 1.0]), st.sampled_from(["vllm", "vllm-swap"]))
def test_speculative_runs_give_stepping_results(
        case: tuple[Workload, SimConfig, str, dict[str, object]], k: int, rate: float,
        method: str, policy: str, lease_ttl_s: float | None, name: str) -> None:
    """Drawn workloads and engines (few blocks: preemptions; refused heads; priority queues),
    with gateways that read output tokens mid-run (adaptive, peak) and leases that revoke
    running requests mid-run: the speed-up's results are stepping's."""
    w, cfg, _, _ = case
    spec = SpeculativeConfig(method, k, acceptance_rate=rate)
    engine = replace(cfg.engine, name=name, speculative_config=spec,  # type: ignore[arg-type]
                     enable_prefix_caching=False if name == "vllm-swap" else None)
    a, b, _ = _both(w, replace(cfg, engine=engine, lease_ttl_s=lease_ttl_s), policy)
    _same(a, b)
    s = a.summary["engine"]["speculative"]
    assert s["num_accepted_tokens"] <= s["num_draft_tokens"] <= k * s["num_verify_steps"]


@SETTINGS
@given(scenarios(), st.integers(2, 4), st.sampled_from(["round_robin", "least_tokens"]))
def test_speculative_runs_in_a_fleet_give_stepping_results(
        case: tuple[Workload, SimConfig, str, dict[str, object]], replicas: int,
        router: str) -> None:
    from kvbudget.simulator.sim_config import FleetConfig

    w, cfg, policy, params = case
    spec = SpeculativeConfig("eagle", 3, acceptance_rate=0.6)
    cfg = replace(cfg, engine=replace(cfg.engine, speculative_config=spec),
                  fleet=FleetConfig(num_replicas=replicas, router=router))  # type: ignore[arg-type]
    a, b, _ = _both(w, cfg, policy, params)
    _same(a, b)


def test_geometric_draws_are_the_stepping_draws() -> None:
    """``SpecDecode.geometric`` at steps ``s .. s + m - 1`` equals the drafts ``verify``
    accepts one step at a time (uncapped: the targets are far)."""
    from kvbudget.simulator.spec_decode import SpecDecode

    spec = SpeculativeConfig("ngram", 4, acceptance_rate=0.6)
    sd = SpecDecode(spec, None, np.random.default_rng(3), 5)
    w = make_workload([0.0, 0.5, 1.0, 1.5, 2.0], [10] * 5, [10_000] * 5)

    class Rows:
        num_tokens = np.zeros(5, np.int64)
        num_computed_tokens = np.zeros(5, np.int64)
        num_output_tokens = np.zeros(5, np.int64)
        target_output = np.full(5, 10_000, np.int64)
        arrival_s = np.asarray(w.arrival_s, np.float64)
        tier_priority = np.zeros(5, np.int64)
        in_engine = np.zeros(5, np.bool_)

    e = Rows()
    for i in range(5):
        sd.reset(e, i)
        e.in_engine[i] = True
    rows = np.array([4, 1, 3], np.int64)
    sd.num_output_steps[rows] = [7, 0, 2]
    ahead = sd.geometric(e, rows, sd.num_output_steps[rows], 6)
    for j in range(6):  # a verify step of 4 drafts each, then the step's own token
        sd.num_spec_tokens[rows] = 4
        before = e.num_output_tokens[rows].copy()
        sd.verify(e, rows, np.full(3, 5, np.int64), e.num_computed_tokens[rows] + 5)
        assert (e.num_output_tokens[rows] - before).tolist() == ahead[:, j].tolist()
        e.num_output_tokens[rows] += 1
        sd.output_steps(rows)


def _splitmix(x: int) -> int:
    """SplitMix64's finaliser on a Python integer (Steele, Lea and Flood 2014)."""
    mask = (1 << 64) - 1
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & mask
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def test_a_requests_draws_are_made_as_it_comes_in_from_its_key_and_steps() -> None:
    """The draws ``reset`` makes for a request, worked from the definition (a uniform of the
    request's key and its count of steps with output, inverted to ``min(k, floor(log u / log
    rate))``), for every step it may take (its target output); 3,000 other requests' draws (the
    store grown and compacted to those in the engine) leave them as they were; a tier's own
    rate (1: every draft,
    0: none) applies to its requests."""
    import struct

    from kvbudget.perf.speculative import accepted_from_uniform
    from kvbudget.simulator.spec_decode import SpecDecode

    golden = 0x9E3779B97F4A7C15
    spec = SpeculativeConfig("eagle", 3, acceptance_rate=0.6)
    sd = SpecDecode(spec, None, np.random.default_rng(7), 3003)
    key = int(np.random.default_rng(7).integers(0, 2**63, dtype=np.int64))  # (the same draw)

    class Rows:
        num_tokens = np.zeros(3003, np.int64)
        num_computed_tokens = np.zeros(3003, np.int64)
        num_output_tokens = np.zeros(3003, np.int64)
        target_output = np.array([1, 5, 9] + [1000] * 3000, np.int64)
        arrival_s = np.linspace(0.0, 3.0, 3003)
        tier_priority = np.array([0, 0, 0] + [1] * 3000, np.int64)
        in_engine = np.zeros(3003, np.bool_)

    e = Rows()
    sd.reset(e, 2)
    e.in_engine[2] = True
    (bits,) = struct.unpack("<Q", struct.pack("<d", float(e.arrival_s[2])))
    row_key = _splitmix(key ^ ((2 * golden) & (2**64 - 1)) ^ bits)
    want = [accepted_from_uniform(((_splitmix(row_key ^ ((s * golden) & (2**64 - 1))) >> 11) + 1)
                                  / 2**53, 0.6, 3) for s in range(9)]
    got = sd.geometric(e, np.array([2]), np.array([0]), 9)
    assert got.tolist() == [want] and 0 < sum(want) < 27
    for i in range(3, 3003):  # (some still in the engine, the others finished)
        sd.reset(e, i)
        e.in_engine[i] = i % 2 == 0
    assert sd.geometric(e, np.array([2]), np.array([4]), 5).tolist() == [want[4:]]

    e.in_engine[:] = False  # (another engine's rows)
    by_tier = SpecDecode(replace(spec, rate_by_priority=((0, 1.0), (1, 0.0))), None,
                         np.random.default_rng(7), 3003)
    for i in (1, 3):
        by_tier.reset(e, i)
    assert by_tier.geometric(e, np.array([1, 3]), np.array([0, 0]), 4).tolist() == [
        [3, 3, 3, 3], [0, 0, 0, 0]]


def test_draws_made_ahead_are_each_rows_own_and_a_changed_arrival_is_drawn_again() -> None:
    """The first row to come has the next rows' draws made with its own (``_draw_ahead``):
    each row's are still those of its key (worked as in the test above, from the run's key,
    its row and its arrival); a row whose arrival changed before it came (a closed loop's user
    sends it) gets the draws of its new key; a run's gains are the draws plus one a step,
    summed, and it ends with the first step that gives a row its output."""
    import struct

    from kvbudget.perf.speculative import accepted_from_uniform
    from kvbudget.simulator.spec_decode import SpecDecode

    golden, mask = 0x9E3779B97F4A7C15, 2**64 - 1
    sd = SpecDecode(SpeculativeConfig("eagle", 3, acceptance_rate=0.6), None,
                    np.random.default_rng(7), 8)
    key = int(np.random.default_rng(7).integers(0, 2**63, dtype=np.int64))

    class Rows:
        num_tokens = np.zeros(8, np.int64)
        num_computed_tokens = np.zeros(8, np.int64)
        num_output_tokens = np.zeros(8, np.int64)
        target_output = np.array([4, 6, 7, 5, 9, 8, 3, 6], np.int64)
        arrival_s = np.linspace(0.0, 3.5, 8)
        tier_priority = np.zeros(8, np.int64)
        in_engine = np.zeros(8, np.bool_)

    def want(i: int, n: int) -> list[int]:
        (bits,) = struct.unpack("<Q", struct.pack("<d", float(e.arrival_s[i])))
        row_key = _splitmix(key ^ ((i * golden) & mask) ^ bits)
        return [accepted_from_uniform(((_splitmix(row_key ^ ((s * golden) & mask)) >> 11) + 1)
                                      / 2**53, 0.6, 3) for s in range(n)]

    e = Rows()
    sd.reset(e, 0)  # rows 1..7 drawn with it
    e.in_engine[0] = True
    e.arrival_s[5] = 9.25  # sent later than planned
    for i in range(1, 8):
        sd.reset(e, i)
        e.in_engine[i] = True
    for i in range(8):
        n = int(e.target_output[i])
        assert sd.geometric(e, np.array([i]), np.array([0]), n).tolist() == [want(i, n)]
    # the running gains: a row's draws plus one a step, summed from where its next draw is,
    # from its computed tokens (100) up to the step that gives its output left
    sd.num_output_steps[3] = 1
    sums = [np.cumsum([0] + [a + 1 for a in want(3, 5)[1:]]).tolist(),
            np.cumsum([0] + [a + 1 for a in want(4, 9)]).tolist()]
    for i, s, left in ((3, sums[0], 4), (4, sums[1], 9)):
        comp, steps = sd.steps_ahead(i, 100, left)
        assert comp.tolist() == [100 + x for x in s if x < left]
        assert steps == sd.num_output_steps[i]


def test_a_started_row_that_samples_counts_its_step_and_gets_its_drafts() -> None:
    """``SpecDecode.sampled_row`` (a request that starts in a verify step, committed as the
    decode group's tail): its first step with output counted, ``k`` = 3 drafts clipped to the
    model's length (103 - 101 = 2 fit), none for a row that has all its output."""
    from kvbudget.simulator.spec_decode import SpecDecode

    sd = SpecDecode(SpeculativeConfig("eagle", 3, acceptance_rate=0.6), None,
                    np.random.default_rng(7), 3)

    class Rows:
        num_tokens = np.array([101, 41, 60], np.int64)
        num_computed_tokens = num_output_tokens = tier_priority = np.zeros(3, np.int64)
        target_output = np.array([5, 1, 9], np.int64)
        arrival_s = np.zeros(3, np.float64)
        in_engine = np.ones(3, np.bool_)
        max_model_len = 103

    e = Rows()
    sd.num_output_steps[2] = 4  # (a request resumed after a preemption)
    assert [sd.sampled_row(e, 0, 1), sd.sampled_row(e, 1, 1), sd.sampled_row(e, 2, 5)] == [1, 1, 5]
    assert sd.num_spec_tokens.tolist() == [2, 0, 3]
    assert e.num_tokens.tolist() == [103, 41, 63]


def test_a_group_keeps_its_members_steps_as_sums_and_finishes_each_at_its_step() -> None:
    """``SpecGroup`` by hand: ``k`` = 2 drafts all accepted (rate 1: 3 tokens a step),
    lookahead 2 (EAGLE), blocks of 4. A: 10 tokens computed, 1 of 8 output tokens, 4 blocks;
    B: 5 computed, 1 of 5 output, 3 blocks. A computes 10, 13, 16 as its steps 0, 1, 2 are
    scheduled and has its 7 tokens after 3 steps (17 computed); B 5, 8 and its 4 after 2 (9).
    The context by step (with each member's 3 tokens): 21, 27, 19. Blocks (tokens + 3 new + 2
    lookahead, over 4): A 4, 5, 6, B 3, 4: steps 1 and 2 take 2 and 1. Two steps committed: B finishes (its arrays
    written: 9 computed, the cap, 5 output, the 4 blocks of step 1), 6 drafts accepted (A 4,
    B 2 of its 3 tokens a step: 4 tokens, one its step's); A's arrays lag until written: 16
    computed, 7 output, 2 drafts, 5 blocks."""
    from types import SimpleNamespace

    from kvbudget.simulator.spec_decode import SpecDecode
    from kvbudget.simulator.spec_run import SpecGroup

    sd = SpecDecode(SpeculativeConfig("eagle", 2, acceptance_rate=1.0), None,
                    np.random.default_rng(0), 2)
    taken: list[int] = []
    e = SimpleNamespace(
        num_computed_tokens=np.array([10, 5]), num_output_tokens=np.array([1, 1]),
        target_output=np.array([8, 5]), num_tokens=np.array([13, 8]),
        arrival_s=np.zeros(2), tier_priority=np.zeros(2, np.int64),
        in_engine=np.zeros(2, np.bool_), max_model_len=1000, spec=sd,
        kv=SimpleNamespace(block_size=4, num_blocks=np.array([4, 3]), take=taken.append))
    for i in (0, 1):
        sd.reset(e, i)
        e.in_engine[i] = True
        sd.num_output_steps[i] = 1
        sd.num_spec_tokens[i] = 2
    g = SpecGroup(e, sd, LINEAR)  # type: ignore[arg-type]
    for i in (0, 1):
        g.join(i, int(e.num_computed_tokens[i]), int(e.num_output_tokens[i]), True)
    assert g.ctx[:4].tolist() == [15 + 6, 21 + 6, 16 + 3, 0]  # (each member's 3 tokens)
    assert g.take[:4].tolist() == [0, 2, 1, 0]  # (A's 5 and B's 4 blocks, then A's 6)
    assert g.finc == {2: 9 + 3, 3: 17 + 3}
    assert [m[5] for m in g.members.values()] == [3, 2] and g.fin_min == 2
    assert g.advance(2) == [1]  # (the engine takes steps 1..'s blocks: _group_iteration)
    assert taken == [] and sd.num_accepted_tokens == 6
    assert e.num_computed_tokens.tolist() == [10, 9]
    assert e.num_output_tokens.tolist() == [1, 5]
    assert e.num_tokens.tolist() == [13, 10] and sd.num_spec_tokens.tolist() == [2, 0]
    assert e.kv.num_blocks.tolist() == [4, 4]
    assert list(g.members) == [0] and g.fin_min == 3
    g.write(scheduled=False)
    assert e.num_computed_tokens.tolist() == [16, 9]
    assert e.num_output_tokens.tolist() == [7, 5]
    assert sd.num_output_steps.tolist() == [3, 3]
    assert e.num_tokens.tolist() == [16 + 1 + 2, 10]
    assert e.kv.num_blocks.tolist() == [5, 4]


def test_step_terms_from_the_tables_are_the_step_models_times_bit_for_bit() -> None:
    """``SpecDecode.step_terms``: the verify steps' times read from the target's chunk table
    and the draft's passes from the draft's decode table are ``step_time``'s and
    ``SpecDecode.passes_seconds``' bits (EAGLE, 3 drafts, 5 requests); zeros without a draft
    (n-gram); no answer for a tree (its passes are priced by width) or another cost model."""
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model
    from kvbudget.perf.step_time import VllmStepModel
    from kvbudget.simulator.spec_decode import make_spec_decode

    gpu, model = get_gpu("H100-80GB"), get_model("Llama-3.1-8B")
    target = VllmStepModel(gpu, model)
    n, q, context = 5, 4, [1020, 1037, 1051, 2990]
    eagle = make_spec_decode(SpeculativeConfig("eagle", 3, acceptance_rate=0.7), gpu, model, 1, 8)
    terms = eagle.step_terms(target, n, 2991)
    assert terms is not None
    limit, fixed, table, dfixed, dtable, gap, k = terms
    assert limit > 2990 and k == 3
    verify = [fixed + table.item(c) for c in context]
    assert verify == [float(target.step_time(n * q, 0.0, c, q * c, n)) for c in context]
    assert ([(dfixed + dtable.item(c) - gap) * k for c in context]
            == [eagle.passes_seconds(n, 3, float(c)) for c in context])
    ngram = make_spec_decode(SpeculativeConfig("ngram", 3, acceptance_rate=0.7), gpu, model, 1, 8)
    nterms = ngram.step_terms(target, n, 2991)
    assert nterms is not None and nterms[:3] == (len(table), fixed, table)
    assert ((nterms[3] + nterms[4] - nterms[5]) * nterms[6] == 0.0).all()  # (no draft)
    tree = make_spec_decode(SpeculativeConfig("eagle3", 2, acceptance_rate=0.7,
                                              speculative_token_tree="[(0,), (1,)]"),
                            gpu, model, 1, 8)
    assert tree.step_terms(target, n, 2991) is None
    assert eagle.step_terms(LINEAR, n, 2991) is None


def test_a_variant_that_reads_running_arrays_keeps_no_speculative_group(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A :class:`SpecGroup`'s members' arrays lag as a decode group's do, so it forms under the
    same contract: an engine class saying ``decode_group = False`` (its hooks read running
    requests' arrays between steps) keeps none with skip-ahead (nor a decode group: its steps
    give several tokens), so it steps, with stepping's results and as many steps."""
    from kvbudget.simulator import spec_run
    from kvbudget.simulator.fast_decode import SkipAheadEngine

    made: list[int] = []

    class Counted(SpecGroup):
        def __init__(self, *args: Any) -> None:
            made.append(1)
            super().__init__(*args)

    def no_decode_group(self: SkipAheadEngine) -> None:
        raise AssertionError("a speculative engine formed a decode group")

    monkeypatch.setattr(spec_run, "SpecGroup", Counted)
    monkeypatch.setattr(SkipAheadEngine, "_group_form", no_decode_group)
    # test_a_run_ends_at_the_first_step_a_request_finishes' two requests: a prefill and two
    # runs (3 calls of _step) with the group; without, the 6 steps one by one
    w = make_workload([0.0, 0.0], [40, 40], [9, 21])
    cfg = _config(SpeculativeConfig("eagle", 3, acceptance_rate=1.0))
    a, b, calls = _both(w, cfg)
    _same(a, b)
    assert made and calls == [6, 3]
    made.clear()
    monkeypatch.setattr(SpecSkipAheadEngine, "decode_group", False)
    a, c, calls = _both(w, cfg)
    _same(a, c)
    assert not made and calls == [6, 6]


def test_draws_by_the_bands_are_the_logarithms_draws_at_and_near_each_edge() -> None:
    """A single rate's draws counted against each ``j``'s band (``x <= lo`` counts, ``x > hi``
    does not; one inside a band takes the logarithms for its batch) are the logarithms'
    ``min(k, floor(log(u) / log(rate)))`` of ``u = (x + 1) / 2**53``: at and beside both edges
    of every band, inside it, at the true threshold and at 2,000 random ``x``."""
    from kvbudget.simulator.spec_decode import SpecDecode

    mask = (1 << 64) - 1

    def unmix(z: int) -> int:  # _splitmix's inverse: the counter that mixes to z
        z ^= (z >> 31) ^ (z >> 62)
        z = (z * pow(0x94D049BB133111EB, -1, 1 << 64)) & mask
        z ^= (z >> 27) ^ (z >> 54)
        z = (z * pow(0xBF58476D1CE4E5B9, -1, 1 << 64)) & mask
        return z ^ (z >> 30) ^ (z >> 60)

    for rate, k in ((0.7, 3), (0.05, 2), (0.97, 8)):
        sd = SpecDecode(SpeculativeConfig("eagle", k, acceptance_rate=rate), None,
                        np.random.default_rng(0), 1)
        log_rate = float(np.log(rate))
        edges = [x for j in range(1, k + 1)
                 for x in (int(rate**j * 2**53) - 1, int(rate**j * 2**53))]
        edges += [x + d for lo, hi in sd._bands for x in (lo, hi) for d in (-1, 0, 1)]
        rng = np.random.default_rng(5)
        # each edge alone (a batch with one inside a band takes the logarithms), then a batch
        for xs in [[x] for x in edges] + [rng.integers(0, 1 << 53, 2000).tolist()]:
            assert all(_splitmix(unmix(x << 11 | 0x5A5)) >> 11 == x for x in xs)
            hashed = np.array([unmix(x << 11 | 0x5A5) for x in xs], np.uint64)
            u = (np.array(xs, np.float64) + 1.0) / 2.0**53
            want = np.minimum((np.log(u) / log_rate).astype(np.int64), k)
            assert sd._accepted_of(hashed).tolist() == want.tolist()
