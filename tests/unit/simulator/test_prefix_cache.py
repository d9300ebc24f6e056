"""Automatic prefix caching from prefix hashes (Mooncake ``hash_ids``): hits skip prefill, share
KV blocks, and unreferenced prefixes are evicted least recently released first."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.fast_decode import DecodeGroup, SkipAheadEngine
from kvbudget.simulator.prefix_cache import PrefixCache
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import Workload
from tests.conftest import assert_token_gaps_consistent, assert_token_gaps_equal

TIERS = (TierConfig("interactive", queue_timeout_s=None),)


def workload(
    arrival: Sequence[float],
    prompt: Sequence[int],
    output: Sequence[int],
    hashes: Sequence[Sequence[int]],
) -> Workload:
    n = len(arrival)
    flat = [h for hs in hashes for h in hs]
    offsets = np.concatenate([[0], np.cumsum([len(hs) for hs in hashes])]).astype(np.int64)
    return Workload(
        arrival_s=np.asarray(arrival, np.float64),
        prompt_tokens=np.asarray(prompt, np.int64),
        output_tokens=np.asarray(output, np.int64),
        max_output_tokens=np.asarray(output, np.int64),
        tier=np.zeros(n, np.int16),
        tier_names=("interactive",),
        deadline_s=np.full(n, np.nan),
        request_id=np.arange(n, dtype=np.int64),
        prefix_hashes=np.asarray(flat, np.int64),
        prefix_offsets=offsets,
        prefix_block_tokens=512,
    )


def config(cache: bool, *, blocks: int = 1000, cost: LinearCostModel | None = None,
           skip: bool = True, **engine: Any) -> SimConfig:
    return SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=blocks, enable_prefix_caching=cache, skip_ahead=skip, **engine
        ),
        tiers=TIERS,
        cost_model=cost or LinearCostModel(0.01, 0.001, 0.0, 0.0),
    )


def test_cache_counts_references_and_evicts_the_least_recently_released_tail_first() -> None:
    c = PrefixCache(blocks_per_hash=2)
    assert all(c.insert(h) for h in (1, 2, 3))
    assert not c.insert(2)  # cached already
    assert c.release([1, 2, 3]) == 6  # tail first: 3, then 2, then 1 become evictable
    assert c.evict(1) == 2 and 3 not in c  # the deepest block of the prefix goes first
    assert c.match([1, 2, 3]) == 2
    assert c.acquire([1]) == 2  # referenced again: no longer evictable
    assert c.evict(10) == 2 and c.num_cached == 1  # only 2 could go
    assert c.match([1, 2]) == 1


@pytest.mark.parametrize("skip", [False, True])
def test_a_prefix_hit_skips_its_prefill(skip: bool) -> None:
    # two requests with the same 1024-token prompt (2 hashes), the second after the first
    # finished: it hits one block of 512 (the last token is always computed again, so the hit
    # stops at (1024 - 1) // 512 blocks) and prefills 512 tokens instead of 1024
    w = workload([0.0, 5.0], [1024, 1024], [2, 2], [[7, 8], [7, 8]])
    res = simulate(w, make_policy("unlimited"), config(True, skip=skip))
    assert list(res.records.ttft_s) == pytest.approx([0.01 + 1.024, 0.01 + 0.512])
    eng = res.summary["engine"]
    assert eng["prefix_cache_hit_tokens"] == 512
    assert eng["prefix_cache_query_tokens"] == 2048
    assert eng["prefix_cache_hit_rate"] == pytest.approx(0.25)
    cold = simulate(w, make_policy("unlimited"), config(False, skip=skip))
    assert list(cold.records.ttft_s) == pytest.approx([1.034, 1.034])
    assert cold.summary["engine"]["prefix_cache_hit_rate"] is None


@pytest.mark.parametrize("skip", [False, True])
def test_concurrent_requests_share_the_cached_prefix_blocks(skip: bool) -> None:
    # 1 s steps. A (1025 tokens, 2 full hashes) prefills in step 1; B arrives at 0.5 s and
    # starts in step 2 on A's 64 cached blocks: during step 2 A holds ceil(1026 / 16) = 65
    # blocks and B one block of its own, 66 in all; without the cache B holds 65 more
    w = workload([0.0, 0.5], [1025, 1025], [4, 4], [[7, 8, 9], [7, 8, 9]])
    cost = LinearCostModel(1.0, 0.0, 0.0, 0.0)
    # (B starts in the step after it comes: no async scheduling, whose lag would make it 3)
    warm = simulate(w, make_policy("unlimited"),
                    config(True, cost=cost, skip=skip, async_scheduling=False))
    cold = simulate(w, make_policy("unlimited"),
                    config(False, cost=cost, skip=skip, async_scheduling=False))
    assert warm.timeline.kv_used_tokens[1] == 66 * 16
    assert cold.timeline.kv_used_tokens[1] == 130 * 16
    assert list(warm.records.ttft_s) == list(cold.records.ttft_s) == [1.0, 1.5]


@pytest.mark.parametrize("skip", [False, True])
def test_unreferenced_prefixes_are_evicted_when_blocks_run_out(skip: bool) -> None:
    # 80 blocks of 16 tokens; a hash covers 512 tokens = 32 blocks. A caches hash 10 and
    # finishes; B (1000 tokens, 63 blocks) needs more than the 48 free blocks, so hash 10 is
    # evicted; C (hash 10 again) misses and prefills all 513 tokens. Without B it hits.
    a, b, c = (0.0, [513], [10, 11]), (10.0, [1000], [20, 21]), (20.0, [513], [10, 12])
    cfg = config(True, blocks=80, skip=skip)
    both = workload([a[0], b[0], c[0]], a[1] + b[1] + c[1], [2, 2, 2], [a[2], b[2], c[2]])
    rec = simulate(both, make_policy("unlimited"), cfg).records
    assert rec.ttft_s[2] == pytest.approx(0.01 + 0.513)
    without_b = workload([a[0], c[0]], a[1] + c[1], [2, 2], [a[2], c[2]])
    rec = simulate(without_b, make_policy("unlimited"), cfg).records
    assert rec.ttft_s[1] == pytest.approx(0.01 + 0.001)


def shared_prefix_workload(n: int, seed: int) -> Workload:
    """Requests on a few shared system prompts (1-4 hash blocks) plus private tails."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.15, n))
    system = rng.integers(0, 5, n)
    shared = system % 4 + 1
    private = rng.integers(1, 3, n)
    prompt = (shared + private - 1) * 512 + rng.integers(1, 512, n)
    hashes = [
        [1000 * (s + 1) + k for k in range(sh)] + [10**6 + 10 * i + k for k in range(pr)]
        for i, (s, sh, pr) in enumerate(zip(system, shared, private, strict=True))
    ]
    output = rng.integers(1, 300, n)
    return workload(arrival.tolist(), prompt.tolist(), output.tolist(), hashes)


@pytest.mark.parametrize("name", ["vllm", "tgi", "sglang", "trtllm"])
def test_skip_ahead_is_exact_with_prefix_caching(name: str) -> None:
    w = shared_prefix_workload(250, seed=4)
    out = []
    for skip in (False, True):
        cfg = config(True, blocks=1500, skip=skip, name=name, max_num_batched_tokens=2048)
        out.append(simulate(w, make_policy("unlimited"), cfg))
    a, b = out
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    assert_token_gaps_consistent(a)
    assert a.summary["engine"] == b.summary["engine"]
    assert a.summary["engine"]["prefix_cache_hit_rate"] > 0.3
    assert (a.timeline.kv_used_tokens <= a.timeline.kv_capacity_tokens).all()


def _check_running_figures(engine: Engine) -> None:
    """What hooks read of running requests is their true state (a decode group's members'
    arrays lag behind its steps), with shared blocks counted once per request holding them."""
    rows = engine.running_rows()
    output = engine.num_output_tokens[rows].copy()
    blocks = engine.kv.num_blocks[rows].copy()
    g = engine._group if isinstance(engine, SkipAheadEngine) else None
    if isinstance(g, DecodeGroup):
        for k, i in enumerate(rows.tolist()):
            if i in g.members:
                d = g.step - g.members[i]
                output[k] += d
                computed = int(engine.num_computed_tokens[i]) + d
                blocks[k] = max(blocks[k], -(-computed // engine.block_size))
    assert engine.running_output_tokens().tolist() == output.tolist()
    assert engine.kv.num_running_blocks == int(blocks.sum())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**32 - 1),
    st.integers(5, 60),
    st.sampled_from(["vllm", "tgi", "sglang", "trtllm", "trtllm-max"]),
    st.sampled_from([200, 400, 1500]),
    st.sampled_from([64, 512, 2048]),
    st.sampled_from(["unlimited", "overcommit"]),
)
def test_skip_ahead_is_exact_with_prefix_caching_on_random_workloads(
    seed: int, n: int, name: str, blocks: int, budget: int, policy: str
) -> None:
    """Every preset with prefix caching, on the decode group, equals stepping on random
    shared-prefix workloads, also with few blocks (evictions, preemptions, SGLang's
    retractions) and token budgets that chunk prefills; what hooks read of running requests
    is checked before every step."""
    w = shared_prefix_workload(n, seed=seed)
    extra: dict[str, Any] = {}
    if name == "trtllm-max":
        name, extra = "trtllm", {"capacity_scheduler_policy": "MAX_UTILIZATION"}
    out = []
    Engine.step_observer = _check_running_figures
    try:
        for skip in (False, True):
            cfg = config(True, blocks=blocks, skip=skip, name=name,
                         max_num_batched_tokens=budget, max_num_seqs=8, **extra)
            out.append(simulate(w, make_policy(policy), cfg))
    finally:
        Engine.step_observer = None
    a, b = out
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert a.summary["engine"] == b.summary["engine"]


def test_prefix_caching_on_the_mooncake_trace(shared: Path) -> None:
    from kvbudget.workloads.traces.load import load_trace
    from kvbudget.workloads.traces.options import TraceOptions

    path = shared / "traces" / "mooncake" / "synthetic_trace.jsonl"
    w = load_trace(path, TraceOptions(window=(0.0, 120.0))).workload
    assert w.prefix_hashes is not None
    runs = {}
    for cache in (False, True):
        for skip in (False, True):
            # the capacity and step times this test was written for (kvbudget 0.1's defaults)
            cfg = SimConfig(engine=EngineConfig(enable_prefix_caching=cache, skip_ahead=skip),
                            engine_defaults="kvbudget-0.1")
            runs[cache, skip] = simulate(w, make_policy("unlimited"), cfg)
    for cache in (False, True):
        assert runs[cache, False].records.equals(runs[cache, True].records)
    warm, cold = runs[True, True].summary, runs[False, True].summary
    assert warm["engine"]["prefix_cache_hit_rate"] > 0.1
    # skipped prefill shows as a lower time to first token
    assert warm["overall"]["ttft_s"]["mean"] < cold["overall"]["ttft_s"]["mean"]
