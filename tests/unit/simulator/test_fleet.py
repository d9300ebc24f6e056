"""N replicas behind one gateway: routers, global and per-replica budgets, heterogeneous GPUs.

The scaling checks. Exactly: N identical replicas with per-replica budgets and round-robin
routing give every request the same record as N independent single replicas each offered every
N-th request (so a fleet at N times the load is N single replicas at the base rate).
Statistically, against one replica offered one of N independent Poisson streams merged into the
fleet's: per replica output throughput within 10 % (the fleet's run lasts until its slowest
replica's last request, which lowers its tokens per second a little), mean time per output
token within 5 %, completions within 2 %, mean time to first token within 15 % for batch and
50 % for interactive (at 300 requests per stream the interactive tail is a few bursts, and
round-robin thins the merged stream into smoother ones than Poisson).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import get_model
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.fleet import FleetConfig, Router
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import Workload, from_columns
from tests.conftest import (
    assert_skip_ahead_matches_stepping,
    assert_token_gaps_consistent,
    assert_token_gaps_equal,
    make_workload,
    mixed_workload,
)


def streams(n: int, rate: float, seeds: list[int]) -> Workload:
    """Independent Poisson streams of mixed interactive and batch traffic, merged."""
    parts = [mixed_workload(n, rate, seed) for seed in seeds]
    tiers = np.concatenate([np.array(w.tier_names)[w.tier] for w in parts])
    return from_columns(
        np.concatenate([w.arrival_s for w in parts]),
        np.concatenate([w.prompt_tokens for w in parts]),
        np.concatenate([w.output_tokens for w in parts]),
        max_output_tokens=np.concatenate([w.max_output_tokens for w in parts]),
        tiers=list(tiers),
    )


def test_fleet_config_is_validated() -> None:
    with pytest.raises(ValueError, match="num_replicas"):
        FleetConfig(0)
    with pytest.raises(ValueError, match="2 GPU presets for 3 replicas"):
        FleetConfig(3, gpus=("H100-80GB", "L40S"))
    with pytest.raises(ValueError, match="unknown router 'random'"):
        FleetConfig(2, router="random")  # type: ignore[arg-type]
    # the replica's GPU is named by its index in fleet.gpus (--set's dotted form), as a
    # disaggregated pool's is (disaggregation.decode.gpu); it was "unknown GPU preset" alone
    with pytest.raises(ValueError, match=r"^fleet\.gpus\.1: unknown GPU preset 'B300' \(did you"):
        SimConfig(fleet=FleetConfig(2, gpus=("H100-80GB", "B300")))


def test_a_fleet_of_one_is_the_single_engine() -> None:
    w = mixed_workload(150, rate_rps=6.0, seed=2)
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=1500))
    one = simulate(w, make_policy("overcommit"), replace(cfg, fleet=FleetConfig(1)))
    single = simulate(w, make_policy("overcommit"), cfg)
    assert one.records.equals(single.records)
    assert one.summary["kv"] == single.summary["kv"]


@pytest.mark.parametrize("policy", ["conservative", "overcommit", "quantile", "preemptive"])
def test_per_replica_round_robin_fleet_is_n_independent_replicas(policy: str) -> None:
    w = mixed_workload(240, rate_rps=15.0, seed=5)
    n_rep = 3
    engine = EngineConfig(num_gpu_blocks=1200)
    fleet = simulate(
        w,
        make_policy(policy),
        SimConfig(engine=engine, fleet=FleetConfig(n_rep, budget="per_replica")),
    ).records
    for r in range(n_rep):
        rows = np.arange(r, len(w), n_rep)
        single = simulate(w.take(rows), make_policy(policy), SimConfig(engine=engine)).records
        assert fleet.iloc[rows].reset_index(drop=True).equals(single)


@pytest.mark.parametrize("policy", ["conservative", "overcommit"])
def test_n_replicas_at_n_times_the_load_behave_like_one_replica(policy: str) -> None:
    n_rep, n, rate = 3, 300, 5.0
    seeds = [100 + s for s in range(n_rep)]
    engine = EngineConfig(num_gpu_blocks=3000)
    singles = [
        simulate(streams(n, rate, [s]), make_policy(policy), SimConfig(engine=engine)).summary
        for s in seeds
    ]
    fleet = simulate(
        streams(n, rate, seeds),
        make_policy(policy),
        SimConfig(engine=engine, fleet=FleetConfig(n_rep, budget="per_replica")),
    ).summary
    for tier in ("interactive", "batch"):
        one: dict[str, Any] = {
            key: np.mean([s["tiers"][tier][key] for s in singles])
            for key in ("output_tokens_per_s", "completed")
        }
        for metric in ("ttft_s", "tpot_s"):
            one[metric] = np.mean([s["tiers"][tier][metric]["mean"] for s in singles])
        got = fleet["tiers"][tier]
        assert got["output_tokens_per_s"] / n_rep == pytest.approx(
            one["output_tokens_per_s"], rel=0.10
        )
        assert got["tpot_s"]["mean"] == pytest.approx(one["tpot_s"], rel=0.05)
        rel = 0.50 if tier == "interactive" else 0.15
        assert got["ttft_s"]["mean"] == pytest.approx(one["ttft_s"], rel=rel)
        assert got["completed"] / n_rep == pytest.approx(one["completed"], rel=0.02)


@pytest.mark.parametrize("router", ["round_robin", "least_tokens", "prefix_affinity"])
@pytest.mark.parametrize("budget", ["global", "per_replica"])
def test_skip_ahead_is_exact_in_a_fleet(router: str, budget: str) -> None:
    w = mixed_workload(150, rate_rps=15.0, seed=5)
    out = []
    for skip in (False, True):
        cfg = SimConfig(
            engine=EngineConfig(num_gpu_blocks=1200, skip_ahead=skip),
            fleet=FleetConfig(3, router=router, budget=budget),  # type: ignore[arg-type]
        )
        out.append(simulate(w, make_policy("preemptive"), cfg))
    a, b = out
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    assert_token_gaps_consistent(a)
    assert a.summary["engine"]["fleet"] == b.summary["engine"]["fleet"] | {
        "replicas": [
            r | {"num_steps": ra["num_steps"]}
            for r, ra in zip(
                b.summary["engine"]["fleet"]["replicas"],
                a.summary["engine"]["fleet"]["replicas"],
                strict=True,
            )
        ]
    }


def test_replicas_of_different_gpus_get_their_own_capacity_and_load() -> None:
    w = mixed_workload(200, rate_rps=8.0, seed=6)
    cfg = SimConfig(fleet=FleetConfig(2, gpus=("H100-80GB", "L40S"), router="least_tokens"))
    res = simulate(w, make_policy("conservative"), cfg)
    replicas = res.summary["engine"]["fleet"]["replicas"]
    model = get_model("Llama-3.1-8B")
    # each replica sized with vLLM's defaults for its own GPU (8,192 / 1,024 and 2,048 / 256)
    expected = [num_gpu_blocks(get_gpu(g), model, max_num_batched_tokens=b, max_num_seqs=s)
                for g, b, s in (("H100-80GB", 8192, 1024), ("L40S", 2048, 256))]
    assert [r["num_gpu_blocks"] for r in replicas] == expected
    assert res.summary["kv_capacity_tokens"] == 16 * sum(expected)
    # least outstanding tokens per token of capacity: the bigger replica takes more
    assert replicas[0]["num_requests"] > replicas[1]["num_requests"]
    assert sum(r["num_requests"] for r in replicas) == int((res.records.status == "completed").sum())


def test_routers_choose_as_documented() -> None:
    w = make_workload([0.0] * 4, [100, 100, 100, 100], [10] * 4, max_output_tokens=[100] * 4)
    rr = Router("round_robin", [1000, 1000, 1000], w)
    assert [rr.route(i, [0, 1, 2]) for i in range(4)] == [0, 1, 2, 0]
    assert rr.route(0, [2]) == 2  # only where the request fits
    lt = Router("least_tokens", [1000, 2000], w)
    assert [lt.route(i, [0, 1]) for i in range(3)] == [0, 1, 1]  # per token of capacity
    lt.leave(0, 0)
    assert lt.route(3, [0, 1]) == 0


def test_prefix_affinity_follows_the_longest_cached_prefix_until_imbalanced() -> None:
    n = 200
    hashes = [[1, 2, 3]] * n
    w = Workload(
        arrival_s=np.zeros(n),
        prompt_tokens=np.full(n, 1600, np.int64),
        output_tokens=np.full(n, 10, np.int64),
        max_output_tokens=np.full(n, 10, np.int64),
        tier=np.zeros(n, np.int16),
        tier_names=("interactive",),
        deadline_s=np.full(n, np.nan),
        request_id=np.arange(n, dtype=np.int64),
        prefix_hashes=np.asarray([h for hs in hashes for h in hs], np.int64),
        prefix_offsets=np.arange(0, 3 * n + 1, 3, dtype=np.int64),
    )
    router = Router("prefix_affinity", [10_000, 10_000], w)
    routed = [router.route(i, [0, 1]) for i in range(n)]
    # the first goes to the least loaded (0) and the rest follow it until replica 0 holds
    # more than 64 more requests than replica 1 and more than 1.5 times as many
    assert routed[:65] == [0] * 65
    assert routed[65] == 1
    assert 60 < routed.count(1) < 140


def test_prefix_affinity_raises_the_fleets_prefix_hit_rate(shared: Path) -> None:
    from kvbudget.workloads.traces.load import load_trace
    from kvbudget.workloads.traces.options import TraceOptions

    path = shared / "traces" / "mooncake" / "synthetic_trace.jsonl"
    w = load_trace(path, TraceOptions(window=(0.0, 600.0))).workload
    rates = {}
    for router in ("round_robin", "prefix_affinity"):
        cfg = SimConfig(
            engine=EngineConfig(enable_prefix_caching=True),
            fleet=FleetConfig(4, router=router),
        )
        # conservative: no engine preemption, so no request re-hits its own prefix
        rates[router] = simulate(w, make_policy("conservative"), cfg).summary["engine"][
            "prefix_cache_hit_rate"
        ]
    # multi-turn conversations return to the replica holding their earlier turns
    assert rates["prefix_affinity"] > 2 * rates["round_robin"]
    assert rates["prefix_affinity"] > rates["round_robin"] + 0.05


def _bursts(n: int, seed: int) -> Workload:
    """Mixed traffic whose requests come in bursts of equal arrival times (ties in a priority
    queue fall to the rows' order)."""
    w = mixed_workload(n, rate_rps=12.0, seed=seed)
    return replace(w, arrival_s=np.repeat(w.arrival_s[::4], 4)[:n].copy())


@pytest.mark.parametrize("scheduling_policy", ["fcfs", "priority"])
def test_a_fleet_of_one_with_clients_and_revocations_is_the_single_engine(
    scheduling_policy: str,
) -> None:
    """The replica's own row numbers (not the workload's) map back exactly: clients that time
    out and retry (each new attempt forgets its first token), revocations, and a priority
    queue whose ties follow the workload rows' order, not the order rows reach the replica."""
    from kvbudget.policies.clients import client_model

    w = _bursts(200, seed=3)
    batch = client_model({"preset": "batch-pipeline", "backoff": "constant",
                          "initial_backoff_s": 2.0, "jitter": "none", "timeout_s": 60.0})
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=700, scheduling_policy=scheduling_policy),  # type: ignore[arg-type]
        clients=(("batch", batch),),
        lease_ttl_s=8.0,
    )
    single = simulate(w, make_policy("overcommit"), cfg)
    one = simulate(w, make_policy("overcommit"), replace(cfg, fleet=FleetConfig(1)))
    assert one.records.equals(single.records)
    assert one.attempts is not None and single.attempts is not None
    assert one.attempts.equals(single.attempts)
    assert (single.records.num_attempts > 1).any()  # some retried
    assert single.summary["engine"]["num_gateway_revocations"] > 0
    assert single.summary["engine"]["num_engine_preemptions"] > 0


@pytest.mark.parametrize("router", ["round_robin", "least_tokens"])
def test_replicas_hold_only_the_rows_routed_to_them(router: str) -> None:
    """Each replica's per-request arrays are as long as (at most twice) the rows routed to it,
    not the workload; the records are those of stepping one step at a time."""
    from kvbudget.simulator.engine import Engine

    w = mixed_workload(400, rate_rps=20.0, seed=8)
    longest: dict[int, int] = {}

    def note(engine: Engine) -> None:
        longest[id(engine)] = max(longest.get(id(engine), 0), len(engine.num_tokens))

    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=1500),
                    fleet=FleetConfig(4, router=router))  # type: ignore[arg-type]
    Engine.step_observer = note
    try:
        _, skipped = assert_skip_ahead_matches_stepping(w, cfg, "overcommit")
    finally:
        Engine.step_observer = None
    routed = [r["num_requests"] for r in skipped.summary["engine"]["fleet"]["replicas"]]
    assert len(longest) == 8 and sum(routed) == len(w)
    assert max(longest.values()) <= 2 * max(routed) < len(w)


@pytest.mark.parametrize("engine", ["vllm", "vllm-swap", "tgi", "sglang", "trtllm"])
@pytest.mark.parametrize("budget", ["global", "per_replica"])
def test_a_request_larger_than_any_replica_is_too_large(engine: str, budget: str) -> None:
    """Its reservation (100 + 3,000 tokens) fits the two replicas' budget (3,200 tokens) but
    not one replica's (1,600): it is refused before any prefill, as one engine refuses it
    (before, a global budget admitted it and tgi and trtllm stopped: no request could run)."""
    w = make_workload([0.0, 0.1], [100, 100], [50, 50], max_output_tokens=[3000, 50])
    for fleet in (None, FleetConfig(2, budget=budget)):  # type: ignore[arg-type]
        cfg = SimConfig(engine=EngineConfig(name=engine, num_gpu_blocks=100, block_size=16),  # type: ignore[arg-type]
                        fleet=fleet)
        for policy in ("unlimited", "conservative", "overcommit"):
            rec = simulate(w, make_policy(policy), cfg).records
            assert list(rec.status) == ["rejected_too_large", "completed"], (fleet, policy)


@pytest.mark.parametrize("router", ["round_robin", "least_tokens", "prefix_affinity"])
@pytest.mark.parametrize("budget", ["global", "per_replica"])
def test_skip_ahead_matches_stepping_in_a_fleet_when_events_tie(router: str, budget: str) -> None:
    """Arrivals on a 0.25 s grid (as traces with whole-second timestamps have) and steps of
    exactly 0.25 s or 0.1 s: a replica's step ends fall on arrivals, on gateway samples (every
    second) and on queue-timeout timers (arrival + 5 s), exactly. A replica's decode run is
    planned past the fleet's events that do not touch it; one that finished a request at such
    an instant used to finish it before the event where stepping runs the event first (the
    gateway sampled after the finish, an arrival admitted into the freed room): 50 of 240
    cases of this grid (round robin, global budget, seeds 0-1) differed. With KV room for
    everyone (200 blocks: no preemption)."""
    tiers = (TierConfig("interactive", queue_timeout_s=5.0, max_sequence_tokens=10**6),
             TierConfig("batch", queue_timeout_s=None, max_sequence_tokens=10**6))
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        n = 60
        arrival = np.sort(rng.integers(0, 80, n)) * 0.25
        prompt, out = rng.integers(1, 200, n), rng.integers(1, 60, n)
        w = from_columns(arrival.astype(np.float64), prompt, out,
                         max_output_tokens=out + rng.integers(0, 20, n),
                         tiers=rng.choice(["interactive", "batch"], n).tolist())
        for step_s in (0.25, 0.1):
            cfg = SimConfig(
                engine=EngineConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                    max_num_batched_tokens=256),
                tiers=tiers,
                cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0),
                fleet=FleetConfig(2, router=router, budget=budget),  # type: ignore[arg-type]
            )
            for policy in ("preemptive", "overcommit"):
                assert_skip_ahead_matches_stepping(w, cfg, policy)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])  # replicas by their own rows; by workload rows
@pytest.mark.parametrize("router", ["round_robin", "least_tokens"])
def test_request_figures_are_the_merged_arrays_and_let_each_replicas_state_go(
    engine: str, router: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The figures the driver reads at the end (a replica at a time) are the replicas'
    arrays merged by workload row (row by row here: the output tokens of the row's last
    replica, the earliest first token and finish, preemptions and recomputed tokens summed),
    dtypes included; afterwards no replica holds per-request state."""
    from kvbudget.simulator.fleet import Fleet

    names = ("output_tokens", "first_token_s", "finished_s", "num_preemptions",
             "recomputed_tokens")
    original = Fleet.request_figures
    seen: dict[str, Any] = {}

    def checked(self: Fleet, keep: Any, tier: Any) -> Any:
        n = len(self.replica_of)
        want: dict[str, Any] = {"output_tokens": np.zeros(n, np.int64),
                                "first_token_s": np.full(n, np.nan),
                                "finished_s": np.full(n, np.nan),
                                "num_preemptions": np.zeros(n, np.int64),
                                "recomputed_tokens": np.zeros(n, np.int64)}
        for r, e in enumerate(self.replicas):
            rows = self._local[r].rows.tolist() if self._compact else range(n)
            for j, i in enumerate(rows):
                if self.replica_of[i] == r:
                    want["output_tokens"][i] = e.output_tokens()[j]
                for name in ("first_token_s", "finished_s"):
                    want[name][i] = np.fmin(want[name][i], getattr(e, name)[j])
                for name in ("num_preemptions", "recomputed_tokens"):
                    want[name][i] += getattr(e, name)[j]
        got = original(self, keep, tier)
        for name in names:
            assert getattr(got, name).dtype == want[name].dtype
            np.testing.assert_array_equal(getattr(got, name), want[name])
        assert (got.gap_tier.dtype, got.gap_s.dtype, got.num_gaps.dtype) == (
            np.int64, np.float64, np.int64)
        seen["compact"] = self._compact
        seen["rows"] = [len(e.num_tokens) + len(e.first_token_s) for e in self.replicas]
        seen["preempted"] = int(got.num_preemptions.sum())
        return got

    monkeypatch.setattr(Fleet, "request_figures", checked)
    w = mixed_workload(400, rate_rps=20.0, seed=8)
    cfg = SimConfig(engine=EngineConfig(name=engine, num_gpu_blocks=1000),  # type: ignore[arg-type]
                    fleet=FleetConfig(4, router=router))  # type: ignore[arg-type]
    simulate(w, make_policy("overcommit"), cfg)
    assert seen["compact"] == (engine == "vllm")
    assert seen["rows"] == [0, 0, 0, 0]
    assert seen["preempted"] > 0
