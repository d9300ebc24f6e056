"""vLLM's native CPU KV offloading (``kv_offloading_size``): prompt blocks stored to CPU as they
are computed, evicted least recently used first, and loaded over the host link instead of
recomputed when a waiting request's prefix continues there (simulator/kv_offload.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import GIB, GPUS, get_gpu
from kvbudget.perf.models import get_model
from kvbudget.policies import make_policy
from kvbudget.results.records import OPTIONAL_TIMELINE_COLUMNS
from kvbudget.results.run_result import read_run
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.kv_offload import (
    H2D_EFFICIENCY,
    TRANSFER_LATENCY_S,
    CpuKVTier,
    OffloadEngine,
)
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import FleetConfig
from tests.conftest import assert_token_gaps_equal
from tests.unit.simulator.test_prefix_cache import TIERS, shared_prefix_workload, workload

# Llama-3.1-8B (the default model): 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
KV_BYTES_PER_TOKEN = 131_072
H100_H2D_BYTES_S = 64e9 * H2D_EFFICIENCY  # H100-SXM's PCIe Gen5 x16 per direction


def config(*, blocks: int = 80, offload: float | None = 1.0, skip: bool = True,
           cost: Any = None, **engine: Any) -> SimConfig:
    return SimConfig(
        engine=EngineConfig(num_gpu_blocks=blocks, enable_prefix_caching=True, skip_ahead=skip,
                            kv_offloading_size=offload, **engine),
        tiers=TIERS,
        cost_model=cost or LinearCostModel(0.01, 0.001, 0.0, 0.0),
    )


def test_the_kv_bytes_and_host_link_the_hand_figures_use() -> None:
    assert get_model("Llama-3.1-8B").kv_bytes_per_token(1, "auto") == KV_BYTES_PER_TOKEN
    assert GPUS["H100-SXM"].pcie_bandwidth_bytes_s == 64e9
    assert GPUS["H100-SXM"].host_memory_bytes == 256 * GIB  # DGX H100: 2 TB / 8 GPUs


def test_the_tier_evicts_the_least_recently_used_and_keeps_a_prompts_head_longest() -> None:
    t = CpuKVTier(num_hashes=3, hash_bytes=10)
    t.store([1, 2])  # the head (1) most recent: order 2, 1
    t.store([3])  # 2, 1, 3
    assert t.match([1, 2, 3]) == 3 and len(t) == 3
    t.store([4])  # full: the least recently used, 2, goes
    assert 2 not in t and t.match([1, 2]) == 1 and t.num_evicted == 1
    t.touch([3])  # 1, 4, 3
    t.store([5, 6])  # two go: 1 and 4
    assert [h in t for h in (1, 3, 4, 5, 6)] == [False, True, False, True, True]
    t.store([7, 8, 9, 10])  # more than the tier holds: dropped whole, nothing evicted
    assert t.num_dropped == 4 and len(t) == 3 and t.num_evicted == 3
    t.store([3, 5])  # stored already: refreshed, not stored again
    assert t.num_stored == 6  # 1, 2, 3, 4, 5, 6


@pytest.mark.parametrize("skip", [False, True])
def test_a_prefix_evicted_from_the_gpu_is_loaded_from_cpu_in_the_time_worked_by_hand(
        skip: bool) -> None:
    # 80 blocks of 16 tokens; prompts of 1024 tokens (64 blocks, two 512-token hashes). A runs
    # at 0 and caches [1, 2]; B at 3 needs 64 blocks and evicts A's (only 16 are free). C at 6
    # has A's prompt: its GPU hit is empty, but both of A's blocks were stored to CPU as A
    # computed them. Its lookup stops at (1024 - 1) // 512 = 1 hash (the last token is
    # computed again): 512 tokens, 512 x 131,072 B = 64 MiB on the GPU's link at
    # 0.7 x 64 GB/s, plus 6 us. The engine is idle: the step that admits C's load runs no
    # model, so the copy starts at 6 and ends at 6.001504; the idle engine polls it every
    # 1 ms (remote_kv.IDLE_POLL_S) from 6: the poll at 6.002 sees it, and the schedule two
    # iterations later (async scheduling, vLLM's default: the poll's output comes back an
    # iteration later), at 6.004, prefills the other 512 tokens in one step of
    # 0.01 + 0.001 x 512 s.
    w = workload([0.0, 3.0, 6.0], [1024] * 3, [2] * 3, [[1, 2], [3, 4], [1, 2]])
    load_s = 512 * KV_BYTES_PER_TOKEN / H100_H2D_BYTES_S + TRANSFER_LATENCY_S
    assert load_s == pytest.approx(1.504e-3, abs=1e-6)
    result = simulate(w, make_policy("unlimited"), config(skip=skip))
    assert result.records.ttft_s.tolist() == pytest.approx(
        [0.01 + 1.024, 0.01 + 1.024, 0.002 + 0.002 + 0.01 + 0.512], rel=1e-12)
    off = result.summary["engine"]["kv_offloading"]
    assert off["num_loads"] == 1 and off["cpu_hit_tokens"] == 512
    assert off["load_bytes_per_gpu"] == 512 * KV_BYTES_PER_TOKEN
    assert off["load_time_s"] == pytest.approx(load_s, rel=1e-12)
    # 1 GiB / (2 MiB blocks): 512 blocks, 16 hashes; A's and B's four hashes stored (C
    # computes its second, [2], which is in CPU already)
    assert off["cpu_blocks"] == 512 and off["stored_blocks"] == 4 * 32
    assert result.summary["engine"]["prefix_cache_hit_tokens"] == 0  # the hit was the CPU's
    # the timeline (a sample a second) shows the tier: A's two hashes stored when its step
    # ended at 1.034 (1,024 tokens), B's at 4.034; C's second one is in CPU already
    tl = result.timeline
    assert tl.cpu_kv_capacity_tokens.unique().tolist() == [512 * 16]
    assert tl.cpu_kv_used_tokens.tolist() == [0, 0, 1024, 1024, 1024, 2048, 2048]  # 0..6 s
    # without the tier C computes its whole prompt again
    without = simulate(w, make_policy("unlimited"), config(skip=skip, offload=None))
    assert without.records.ttft_s[2] == pytest.approx(0.01 + 1.024)
    assert "kv_offloading" not in without.summary["engine"]
    assert "cpu_kv_used_tokens" not in without.timeline


@pytest.mark.parametrize("skip", [False, True])
def test_the_blocks_of_a_load_waiting_on_an_idle_engine_count_as_used(skip: bool) -> None:
    # The case above, its KV token-seconds worked by hand (a step holds the blocks of the
    # tokens it computes; linear steps 0.01 + 0.001 a prefill token). A: its prefill
    # [0, 1.034] holds 64 blocks (1,024 tokens), its decode step [1.034, 1.044] 65 (1,040
    # tokens); B the same from 3. C is given the blocks of its CPU hit (512 tokens, 32
    # blocks) at 6 and holds them while the engine runs no model until 6.004, then prefills
    # [6.004, 6.526] with 64 blocks and decodes [6.526, 6.536] with 65. Before, the 4 ms the
    # idle engine held C's 32 blocks counted nothing (2,683.36 token-seconds).
    w = workload([0.0, 3.0, 6.0], [1024] * 3, [2] * 3, [[1, 2], [3, 4], [1, 2]])
    result = simulate(w, make_policy("unlimited"), config(skip=skip))
    step_ts = 1024 * 1.034 + 1040 * 0.01
    token_s = 2 * step_ts + 512 * 0.004 + 1024 * 0.522 + 1040 * 0.01
    assert token_s == pytest.approx(2685.408)
    assert result.summary["kv"]["used_mean"] == pytest.approx(token_s / 6.536, rel=1e-12)


@pytest.mark.parametrize("skip", [False, True])
def test_cached_blocks_no_request_holds_count_as_free_while_the_engine_is_idle(
        skip: bool) -> None:
    # Without the tier: A as above ([0, 1.034] with 64 blocks, [1.034, 1.044] with 65), then
    # the engine is idle until B comes at 3 with A's prompt. A's blocks stay in the prefix
    # cache, which no request holds: free (KVBlocks.num_used_blocks), so the idle 1.956 s add
    # nothing. B hits one 512-token hash on the GPU and prefills the rest [3, 3.522] with 64
    # blocks, then decodes [3.522, 3.532] with 65.
    w = workload([0.0, 3.0], [1024] * 2, [2] * 2, [[1, 2], [1, 2]])
    result = simulate(w, make_policy("unlimited"), config(skip=skip, offload=None))
    assert result.summary["engine"]["prefix_cache_hit_tokens"] == 512
    token_s = 1024 * 1.034 + 1040 * 0.01 + 1024 * 0.522 + 1040 * 0.01
    assert result.summary["kv"]["used_mean"] == pytest.approx(token_s / 3.532, rel=1e-12)


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize(("async_scheduling", "ttft_c"), [(False, 0.558), (True, 0.588)])
def test_a_load_on_a_busy_engine_is_noticed_a_step_after_its_copy_and_scheduled_after(
        skip: bool, async_scheduling: bool, ttft_c: float) -> None:
    # As above (A, B, then C loading A's first hash from CPU: 1.504 ms), with D decoding
    # (a 16-token prompt at 5, 200 outputs) while C loads: D's prefill ends at 5.026, then a
    # decode step every 0.01 s, boundaries b(k) = 5.026 + 0.01 k. C comes at 6, during the
    # step ending at b(98) = 6.006.
    # Without async scheduling C is admitted at b(98); its copy starts as the step then
    # scheduled ends, b(99) = 6.016 (vLLM's copy stream waits for the forward), and ends at
    # 6.017504; the poll of the step starting at b(100) = 6.026 sees it, that step's output
    # marks C, and the schedule at b(101) = 6.036 prefills C's 512 tokens beside D's decode:
    # 0.01 + 0.512 s, C's first token at 6.558.
    # With async scheduling C comes in step 98 and is first scheduled at b(99): its copy
    # starts at b(100), ends at 6.027504, is polled at b(101) = 6.036 and C is scheduled three
    # boundaries later, at b(104) = 6.066: its first token at 6.588.
    w = workload([0.0, 3.0, 5.0, 6.0], [1024, 1024, 16, 1024], [2, 2, 200, 2],
                 [[1, 2], [3, 4], [], [1, 2]])
    result = simulate(w, make_policy("unlimited"),
                      config(skip=skip, async_scheduling=async_scheduling))
    assert result.summary["engine"]["kv_offloading"]["cpu_hit_tokens"] == 512
    assert result.records.ttft_s.tolist() == pytest.approx(
        [0.01 + 1.024, 0.01 + 1.024, 0.026, ttft_c], rel=1e-9)


def test_a_cpu_hit_stops_where_the_tier_was_evicted() -> None:
    # a tier of one hash (64 MiB: kv_offloading_size 1/16 GiB) holds only the last prompt
    # block stored: B's [3] (B stored 3 after A's 1), so C finds nothing of A's in CPU
    w = workload([0.0, 3.0, 6.0], [1024] * 3, [2] * 3, [[1, 2], [3, 4], [1, 2]])
    result = simulate(w, make_policy("unlimited"), config(offload=1 / 16))
    off = result.summary["engine"]["kv_offloading"]
    assert off["cpu_blocks"] == 32 and off["num_loads"] == 0
    assert result.records.ttft_s[2] == pytest.approx(0.01 + 1.024)


class _CountingCost(LinearCostModel):
    """The linear model, counting the prefill tokens of the engine's steps it prices (a step
    attends to at least its new tokens; the run driver's estimates before it, to none)."""

    prefill_tokens = 0.0

    def step_time(self, *features: Any) -> Any:
        if np.all(np.asarray(features[2]) > 0):
            _CountingCost.prefill_tokens += float(np.sum(features[0]))
        return super().step_time(*features)


def _check_capacities(engine: Engine) -> None:
    assert engine.kv.num_free_blocks >= 0
    if not engine.config.skip_ahead:  # (a decode group's members' num_blocks lag)
        assert engine.kv.num_held_blocks() + engine.kv.num_free_blocks == engine.num_gpu_blocks
    if isinstance(engine, OffloadEngine):
        assert len(engine.tier) <= engine.tier.num_hashes


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(5, 50), st.sampled_from([200, 400, 1500]),
       st.sampled_from([512, 2048]), st.sampled_from([0.25, 1.0, 8.0]))
def test_stepping_and_skip_ahead_are_identical_and_kv_stays_within_both_tiers(
        seed: int, n: int, blocks: int, budget: int, gib: float) -> None:
    """With the tier on, the speed-up gives the same records, timeline and gaps as stepping;
    before every step the GPU's blocks are all free, held or cached and the CPU tier holds
    at most its size; and when nothing is preempted, the prefill tokens computed are the
    prompts less the GPU and CPU hits: a CPU hit's tokens are never computed."""
    w = shared_prefix_workload(n, seed=seed)
    out = []
    Engine.step_observer = _check_capacities
    try:
        for skip in (False, True):
            _CountingCost.prefill_tokens = 0.0
            cost = _CountingCost(0.01, 0.001, 0.0, 0.0)
            cfg = config(blocks=blocks, skip=skip, offload=gib, cost=cost,
                         max_num_batched_tokens=budget, max_num_seqs=8)
            out.append((simulate(w, make_policy("unlimited"), cfg), _CountingCost.prefill_tokens))
    finally:
        Engine.step_observer = None
    (a, prefill), (b, _) = out
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    assert a.summary["engine"] == b.summary["engine"]
    eng = a.summary["engine"]
    assume(int(a.records.num_preemptions.sum()) == 0)
    hits = eng["prefix_cache_hit_tokens"] + eng["kv_offloading"]["cpu_hit_tokens"]
    # the prompts the engine served (a request over the tier's limit never reaches it)
    served = (a.records.status == "completed").to_numpy()
    assert (a.records.status[~served] == "rejected_too_large").all()
    assert prefill == int(w.prompt_tokens[served].sum()) - hits


def test_the_tier_pays_on_a_prefix_heavy_workload() -> None:
    # few GPU blocks: the shared system prompts are evicted between uses; the tier brings
    # them back, so fewer prompt tokens are computed and TTFT falls
    w = shared_prefix_workload(200, seed=3)
    runs = {gib: simulate(w, make_policy("unlimited"), config(blocks=400, offload=gib,
                                                               max_num_batched_tokens=2048))
            for gib in (None, 4.0)}
    off = runs[4.0].summary["engine"]["kv_offloading"]
    assert off["num_loads"] > 0 and off["cpu_hit_tokens"] > 0
    assert runs[4.0].records.ttft_s.mean() < runs[None].records.ttft_s.mean()


@pytest.mark.parametrize(("knobs", "message"), [
    # each names the knob as --set takes it (engine.KNOB)
    ({"kv_offloading_size": -1.0},
     "^engine.kv_offloading_size must be in (0, 65536] GiB, got -1.0"),
    ({"kv_offloading_size": 0}, "^engine.kv_offloading_size must be in"),
    ({"kv_offloading_backend": "disk"},
     "^engine.kv_offloading_backend must be one of native, lmcache"),
    ({"kv_offloading_size": 1.0, "kv_offloading_backend": "lmcache"},
     "^engine.kv_offloading_backend 'lmcache' is not modelled"),
    ({"kv_offloading_size": 1.0, "name": "sglang"},
     "^engine.kv_offloading_size .* engine 'sglang' has none modelled"),
    ({"kv_offloading_size": 1.0, "enable_prefix_caching": False},
     "^engine.kv_offloading_size needs engine.enable_prefix_caching"),
])
def test_bad_offloading_knobs_are_refused(knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        EngineConfig(**knobs)


def test_offload_larger_than_the_host_memory_is_refused() -> None:
    w = workload([0.0], [1024], [2], [[1, 2]])
    with pytest.raises(ValueError, match="kv_offloading_size 300 GiB is more than the host "
                       "memory of the replica's 1 GPU"):
        simulate(w, make_policy("unlimited"), config(offload=300.0))
    # two GPUs' host memory (tensor parallel): vLLM's size is the ranks' total
    simulate(w, make_policy("unlimited"), config(offload=300.0, tensor_parallel_size=2))


def test_a_workload_without_prefix_hashes_is_refused() -> None:
    w = workload([0.0], [1024], [2], [[1, 2]])
    w = dataclasses.replace(w, prefix_hashes=None, prefix_offsets=None)
    with pytest.raises(ValueError, match="needs prefix caching over a workload with"):
        simulate(w, make_policy("unlimited"), config())


def test_the_cpu_timeline_columns_are_written_and_read_back(tmp_path: Path) -> None:
    w = workload([0.0, 3.0, 6.0], [1024] * 3, [2] * 3, [[1, 2], [3, 4], [1, 2]])
    result = simulate(w, make_policy("unlimited"), config())
    result.write(tmp_path / "run")
    back = read_run(tmp_path / "run")
    assert back.timeline.equals(result.timeline)
    assert back.timeline.columns[-2:].tolist() == ["cpu_kv_used_tokens", "cpu_kv_capacity_tokens"]
    assert {"cpu_kv_used_tokens", "cpu_kv_capacity_tokens"} <= set(OPTIONAL_TIMELINE_COLUMNS)


@pytest.mark.parametrize("budget", ["global", "per_replica"])
def test_a_fleets_replicas_each_have_a_tier_and_skip_ahead_equals_stepping(budget: str) -> None:
    w = shared_prefix_workload(120, seed=5)
    out = []
    for skip in (False, True):
        cfg = dataclasses.replace(
            config(blocks=400, skip=skip, offload=2.0, max_num_batched_tokens=2048),
            fleet=FleetConfig(num_replicas=2, router="prefix_affinity", budget=budget))
        out.append(simulate(w, make_policy("unlimited"), cfg))
    a, b = out
    assert a.records.equals(b.records) and a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    replicas = a.summary["engine"]["fleet"]["replicas"]
    assert all(r["kv_offloading"]["cpu_blocks"] == 1024 for r in replicas)
    assert sum(r["kv_offloading"]["num_loads"] for r in replicas) > 0


def test_a_preempted_request_resumes_with_its_prompt_loaded_from_cpu() -> None:
    # 80 blocks; A (prompt [1], 512 tokens) at 0 and B ([2]) at 0.2, 700 output tokens each.
    # Both decode until their blocks fill the GPU: B (the later) is preempted with 639 tokens
    # computed (512 + 127). A's growth then evicts B's cached prompt block from the GPU, but B
    # stored it to CPU when it computed it. When A finishes, B's lookup finds [2] in CPU: it
    # loads 512 tokens (1.504 ms) and computes 128 (its 128 outputs so far) instead of 640.
    w = workload([0.0, 0.2], [512, 512], [700, 700], [[1], [2]])
    runs = {}
    for gib in (None, 1.0):
        _CountingCost.prefill_tokens = 0.0
        # (B starts in the step after it comes, as the counts above assume: no async
        # scheduling, whose one-step lag tests/unit/simulator/test_async_scheduling.py covers)
        result = simulate(w, make_policy("unlimited"), config(
            offload=gib, skip=False, cost=_CountingCost(0.01, 0.001, 0.0, 0.0),
            async_scheduling=False))
        runs[gib] = (result, _CountingCost.prefill_tokens)
    (cold, cold_prefill), (warm, warm_prefill) = runs[None], runs[1.0]
    assert cold.records.num_preemptions.tolist() == warm.records.num_preemptions.tolist() == [0, 1]
    assert cold.summary["engine"]["num_recomputed_tokens"] == 639
    assert (cold_prefill, warm_prefill) == (1024 + 640, 1024 + 128)
    assert warm.summary["engine"]["kv_offloading"]["cpu_hit_tokens"] == 512
    # B's load (1.504 ms) starts as A finishes (the step admitting it runs no model); the idle
    # engine's poll at 2 ms sees it and, without async scheduling, the next iteration, at
    # 3 ms, schedules B's 128 tokens: 3 ms instead of 512 tokens' 0.512 s
    assert cold.records.e2e_s[1] - warm.records.e2e_s[1] == pytest.approx(0.512 - 0.003)


def test_a_gpu_file_may_give_its_host_memory(tmp_path: Path) -> None:
    good = tmp_path / "gpu.json"
    good.write_text('{"name": "X", "memory_gib": 80, "hbm_bandwidth_bytes_s": 3e12, '
                    '"bf16_flops": 1e15, "host_memory_bytes": 137438953472}')
    assert get_gpu(str(good)).host_memory_bytes == 128 * GIB
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "X", "memory_gib": 80, "hbm_bandwidth_bytes_s": 3e12, '
                   '"bf16_flops": 1e15, "host_memory_bytes": -1}')
    with pytest.raises(ValueError, match=r"bad.json: field 'host_memory_bytes'"):
        get_gpu(str(bad))
    assert GPUS["A100-80GB"].host_memory_bytes is None  # no vendor figure found: not checked


@pytest.mark.parametrize("skip", [False, True])
def test_the_timelines_waiting_count_includes_requests_not_yet_schedulable(skip: bool) -> None:
    """With room for every prompt on the GPU the tier is never read, so the run is the plain
    engine's, its timeline included: a request held for async scheduling's next step counts as
    waiting in both (``Engine.num_waiting``), as well as one loading its KV from CPU."""
    w = shared_prefix_workload(40, seed=3)
    runs = [simulate(w, make_policy("unlimited"),
                     dataclasses.replace(config(blocks=4000, skip=skip, offload=gib,
                                                async_scheduling=True, max_num_seqs=4),
                                         timeline_period_s=0.01))
            for gib in (1.0, None)]
    offload, plain = runs
    assert offload.summary["engine"]["kv_offloading"]["cpu_hit_tokens"] == 0
    assert offload.records.equals(plain.records)
    assert (offload.timeline.num_waiting.to_numpy() == plain.timeline.num_waiting.to_numpy()).all()
    assert int(plain.timeline.num_waiting.max()) > 0
