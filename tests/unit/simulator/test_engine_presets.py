"""Known answers for the engine presets (vllm-swap, tgi, sglang, trtllm), worked out by hand from
each engine's rules, and skip-ahead == step-by-step for every preset."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine import EngineHooks, RequestColumns
from kvbudget.simulator.engine_config import ENGINE_NAMES, EngineConfig
from kvbudget.simulator.engine_variants import SglangEngine, make_engine
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import ReplicaSetup
from kvbudget.workloads import Workload, from_columns
from tests.conftest import assert_skip_ahead_matches_stepping, make_workload, mixed_workload

TIERS = (
    TierConfig("interactive", queue_timeout_s=None),
    TierConfig("batch", priority=1, queue_timeout_s=None),
)
SQUEEZE = LinearCostModel(1.0, 0.1, 0.0, 0.0)  # 1 s per step plus 0.1 s per prefill token


def config(name: str, skip: bool = True, **engine: Any) -> SimConfig:
    cost = engine.pop("cost", SQUEEZE)
    base: dict[str, Any] = {"num_gpu_blocks": 4, "block_size": 4}
    base.update(engine)
    return SimConfig(
        engine=EngineConfig(name=name, skip_ahead=skip, **base),  # type: ignore[arg-type]
        tiers=TIERS,
        cost_model=cost,
    )


def squeeze() -> Workload:
    # 4 blocks of 4 tokens; two requests of 4 prompt + 8 output tokens: vLLM preempts the
    # second at step 6 (tests/unit/simulator/test_engine.py works the recompute case out)
    return make_workload([0.0, 0.0], [4, 4], [8, 8])


# --- vllm-swap --------------------------------------------------------------------------------


@pytest.mark.parametrize("skip", [False, True])
def test_swap_moves_the_victims_blocks_over_pcie_instead_of_recomputing(skip: bool) -> None:
    res = simulate(squeeze(), make_policy("unlimited"), config("vllm-swap", skip))
    rec = res.records
    # B (2 blocks of 4 tokens) goes to host memory at step 6 and back at step 9, each copy
    # costing bytes / PCIe bandwidth; A finishes after step 8, B after step 11 with no
    # recompute (the recompute case ends B at 12.7 s)
    nbytes = 2 * 4 * get_model("Llama-3.1-8B").kv_bytes_per_token()
    delta = nbytes / get_gpu("H100-80GB").pcie_bandwidth_bytes_s
    assert list(rec.num_preemptions) == [0, 1]
    assert rec.finished_s[0] == pytest.approx(1.8 + 7 + delta, abs=1e-12)
    assert rec.finished_s[1] == pytest.approx(1.8 + 7 + delta + 3 + delta, abs=1e-12)
    eng = res.summary["engine"]
    assert eng["engine"] == "vllm-swap"
    assert eng["num_recomputed_tokens"] == 0
    assert eng["swap_out_bytes"] == eng["swap_in_bytes"] == nbytes
    assert eng["num_swap_outs"] == eng["num_swap_ins"] == 1
    assert eng["swap_time_s"] == pytest.approx(2 * delta)


def test_swap_without_swap_space_recomputes_like_vllm() -> None:
    swap = simulate(squeeze(), make_policy("unlimited"), config("vllm-swap", swap_space_gib=0.0))
    vllm = simulate(squeeze(), make_policy("unlimited"), config("vllm"))
    assert swap.records.equals(vllm.records)
    assert swap.summary["engine"]["num_swap_fallbacks"] == 1


def test_preemption_mode_swap_is_the_vllm_swap_engine() -> None:
    assert EngineConfig(preemption_mode="swap").name == "vllm-swap"
    assert EngineConfig(name="vllm-swap").preemption_mode == "swap"
    with pytest.raises(ValueError, match="'tgi'"):
        EngineConfig(name="tgi", preemption_mode="swap")
    with pytest.raises(ValueError, match="unknown engine 'hf'"):
        EngineConfig(name="hf")  # type: ignore[arg-type]


# --- tgi --------------------------------------------------------------------------------------


@pytest.mark.parametrize("skip", [False, True])
def test_tgi_reserves_the_worst_case_never_preempts_and_blocks_the_queue(skip: bool) -> None:
    res = simulate(squeeze(), make_policy("unlimited"), config("tgi", skip))
    rec = res.records
    # A takes blocks for 4 + 8 - 1 = 11 tokens (3 blocks) at admission; B needs 3 too and
    # waits behind it although its first steps would fit: A runs alone (1.4 s prefill, then
    # 7 decode steps), then B
    assert list(rec.num_preemptions) == [0, 0]
    assert rec.finished_s[0] == pytest.approx(1.4 + 7)
    assert rec.ttft_s[1] == pytest.approx(8.4 + 1.4)
    assert rec.finished_s[1] == pytest.approx(8.4 + 1.4 + 7)
    assert res.summary["engine"]["num_engine_preemptions"] == 0
    assert res.summary["engine"]["head_of_line_blocked_s"] == pytest.approx(8.4)
    assert res.timeline.kv_used_tokens[0] == 12  # all 3 blocks from the first step


def test_tgi_never_preempts_under_heavy_overload() -> None:
    """Beyond its router's 128 permits (TGI's default ``--max-concurrent-requests``) TGI
    answers 429 at once; with permits for all, every request waits and completes; in neither
    case is anything preempted."""
    w = mixed_workload(150, rate_rps=20.0, seed=1)
    cfg = SimConfig(engine=EngineConfig(name="tgi", num_gpu_blocks=800))
    res = simulate(w, make_policy("unlimited"), cfg)
    assert res.summary["engine"]["num_engine_preemptions"] == 0
    refused = res.records[res.records.status != "completed"]
    assert len(refused) > 0 and set(refused.reason) == {"engine_max_concurrent_requests"}
    res = simulate(w, make_policy("unlimited"), replace(
        cfg, engine=replace(cfg.engine, max_concurrent_requests=150)))
    assert res.summary["engine"]["num_engine_preemptions"] == 0
    assert (res.records.status == "completed").all()
    vllm = simulate(w, make_policy("unlimited"), replace(cfg, engine=EngineConfig(num_gpu_blocks=800)))
    assert vllm.summary["engine"]["num_engine_preemptions"] > 0


# --- trtllm -----------------------------------------------------------------------------------


@pytest.mark.parametrize("skip", [False, True])
def test_trtllm_guaranteed_no_evict_reserves_logically_and_never_evicts(skip: bool) -> None:
    res = simulate(squeeze(), make_policy("unlimited"), config("trtllm", skip))
    rec = res.records
    # the same admissions as TGI (B waits until A's 3 blocks to completion are released),
    # but blocks are allocated as tokens are computed: one block after the first step
    assert list(rec.num_preemptions) == [0, 0]
    assert rec.finished_s[1] == pytest.approx(8.4 + 1.4 + 7)
    assert res.timeline.kv_used_tokens[0] == 4


def test_trtllm_max_utilization_pauses_the_most_recently_started_request() -> None:
    # batch starts at t=0, interactive at step 2; at step 6 both need a third block. vLLM's
    # priority victim is the batch request; TensorRT-LLM's MAX_UTILIZATION pauses the last
    # started, the interactive one
    w = make_workload([0.0, 0.5], [4, 4], [8, 8], tiers=["batch", "interactive"])
    cost = LinearCostModel(1.0, 0.0, 0.0, 0.0)
    by_engine = {}
    cases: list[tuple[str, dict[str, Any]]] = [
        ("vllm", {}),
        ("trtllm", {"capacity_scheduler_policy": "MAX_UTILIZATION"}),
    ]
    for name, extra in cases:
        rec = simulate(
            w,
            make_policy("unlimited"),
            config(name, scheduling_policy="priority", cost=cost, **extra),
        ).records
        by_engine[name] = dict(zip(rec.tier, rec.num_preemptions, strict=True))
    assert by_engine["vllm"] == {"batch": 1, "interactive": 0}
    assert by_engine["trtllm"] == {"batch": 0, "interactive": 1}


# --- sglang -----------------------------------------------------------------------------------


def sglang_start_step(
    num_blocks: int, block_size: int, a_prompt: int, a_max: int, b_need: int
) -> int:
    """The first step at which SGLang's PrefillAdder admits B while A decodes, from its rule:
    ``extend + min(max_new, 4096) < free tokens - new_token_ratio * A's clipped remaining``,
    the ratio decaying from 0.7 by (0.7 - 0.098) / 600 per decode step (none for A's prefill
    step 1); at step s, A has s - 1 output tokens and holds blocks for a_prompt + s - 1."""
    decay = (0.7 - 0.7 * 0.14) / 600
    for s in range(2, a_max + 1):
        ratio = max(0.7 - (s - 2) * decay, 0.7 * 0.14)
        blocks_a = -(-(a_prompt + s - 1) // block_size)
        rem_total = (num_blocks - blocks_a) * block_size - ratio * float(min(a_max - (s - 1), 4096))
        if b_need < rem_total:
            return s
    raise AssertionError("B never starts while A runs")


@pytest.mark.parametrize("skip", [False, True])
def test_sglang_admits_only_when_new_token_ratio_says_the_output_will_fit(skip: bool) -> None:
    # A (100 prompt, 1000 output) decodes; B (100 prompt, declares 1100 output) arrives at
    # 5 ms. vLLM starts B at step 2; SGLang waits until the decayed ratio times A's remaining
    # output leaves room for B's prompt plus its declared output
    w = make_workload([0.0, 0.005], [100, 100], [1000, 10], max_output_tokens=[1000, 1100])
    cost = LinearCostModel(0.01, 0.0, 0.0, 0.0)
    # (scheduled after each step: the overlap scheduler's one-step lag is tested apart)
    cfg = config("sglang", skip, num_gpu_blocks=120, block_size=16, cost=cost,
                 async_scheduling=False)
    rec = simulate(w, make_policy("unlimited"), cfg).records
    s = sglang_start_step(120, 16, 100, 1000, 100 + 1100)
    assert 2 < s < 1000
    assert rec.ttft_s[1] == pytest.approx(0.01 * s - 0.005)
    vllm = simulate(w, make_policy("unlimited"), replace(cfg, engine=EngineConfig(
        num_gpu_blocks=120, block_size=16, skip_ahead=skip, async_scheduling=False))).records
    assert vllm.ttft_s[1] == pytest.approx(0.02 - 0.005)


def test_sglang_retract_decode_frees_fewest_outputs_then_longest_prompt_first() -> None:
    env = simpy.Environment()
    hooks = EngineHooks(
        on_finish=lambda i, t: None,
        on_preempt=lambda i, t: None,
        next_external_s=lambda: math.inf,
        gateway_state=lambda: (0, 0),
    )
    prompt = np.array([10, 30, 20, 5], np.int64)
    out = np.array([5, 2, 2, 0], np.int64)
    setup = ReplicaSetup(gpu=get_gpu("A100-80GB"), model=get_model("Llama-2-7B"),
                         engine=EngineConfig(name="sglang", num_gpu_blocks=75, block_size=1),
                         num_gpu_blocks=75, cost_model=LinearCostModel(0.01, 0.0, 0.0, 0.0))
    columns = RequestColumns(prompt, np.full(4, 50, np.int64), np.zeros(4, np.int64), np.zeros(4))
    eng = make_engine(env, setup, columns, hooks)
    assert isinstance(eng, SglangEngine)
    eng.add_request(3)  # waiting already
    for i in (0, 1, 2):  # running, holding prompt + output tokens
        eng.in_engine[i] = True
        eng.num_output_tokens[i] = out[i]
        eng.num_tokens[i] = prompt[i] + out[i]
        eng.num_computed_tokens[i] = prompt[i] + out[i]
        eng.kv.num_blocks[i] = prompt[i] + out[i]
        eng.running.append(i)
    eng.kv.num_free_blocks = 75 - int(eng.kv.num_blocks.sum())  # 6 free
    eng._retract()
    # 6 free < 20 x 3: retract 1 (2 outputs, prompt 30) -> 38 free < 20 x 2: retract 2 ->
    # 60 >= 20 x 1; request 0 (5 outputs) stays
    assert eng.running == [0]
    assert list(eng.num_preemptions[:3]) == [0, 1, 1]
    assert eng.num_recomputed_tokens == 32 + 22
    # new_token_ratio = (decoded + 20 x kept) / (sum max_new_tokens + 1) of the kept requests
    assert eng.new_token_ratio == pytest.approx((5 + 20) / (50 + 1))
    # retracted requests go to the back of the waiting queue (SGLang extends it)
    assert list(eng.waiting) == [3, 1, 2]


def test_sglang_schedule_conservativeness_scales_the_ratio() -> None:
    assert EngineConfig(name="sglang", schedule_conservativeness=0.5).schedule_conservativeness == 0.5
    with pytest.raises(ValueError, match="schedule_conservativeness"):
        EngineConfig(name="sglang", schedule_conservativeness=0.0)


# --- every preset: skip-ahead is exact ----------------------------------------------------------

PRESETS: list[tuple[str, dict[str, Any]]] = [
    ("vllm", {}),
    ("vllm", {"scheduling_policy": "priority", "watermark": 0.01}),
    ("vllm-swap", {}),
    ("vllm-swap", {"swap_space_gib": 0.05}),
    ("tgi", {}),
    ("sglang", {}),
    ("sglang", {"schedule_conservativeness": 0.3}),
    ("trtllm", {}),
    ("trtllm", {"capacity_scheduler_policy": "MAX_UTILIZATION"}),
]


def assert_identical(a: Any, b: Any) -> None:
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    ea, eb = dict(a.summary["engine"]), dict(b.summary["engine"])
    assert ea == eb
    sa, sb = dict(a.summary), dict(b.summary)
    for s in (sa, sb):
        s.pop("wall_time_s")
    assert sa == sb


PRESET_IDS = [name + "".join(f"-{v}" for v in extra.values()) for name, extra in PRESETS]


@pytest.mark.parametrize(("name", "extra"), PRESETS, ids=PRESET_IDS)
@pytest.mark.parametrize("policy", ["unlimited", "overcommit"])
def test_skip_ahead_gives_identical_results_for_every_preset(
    name: str, extra: dict[str, Any], policy: str
) -> None:
    w = mixed_workload(100, rate_rps=6.0, seed=3)
    out = []
    for skip in (False, True):
        engine = EngineConfig(
            name=name,  # type: ignore[arg-type]
            num_gpu_blocks=1000,
            skip_ahead=skip,
            max_num_batched_tokens=2048,
            **extra,
        )
        out.append(simulate(w, make_policy(policy), SimConfig(engine=engine)))
    assert_identical(*out)


@st.composite
def preset_cases(draw: st.DrawFn) -> tuple[Workload, SimConfig, str]:
    n = draw(st.integers(1, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    arrival = np.cumsum(rng.exponential(draw(st.sampled_from([0.05, 0.3])), n))
    prompt = rng.integers(1, draw(st.sampled_from([50, 400, 1500])), n)
    cap = rng.integers(1, draw(st.sampled_from([20, 300, 1200])), n)
    out = np.maximum(1, (cap * rng.random(n)).astype(np.int64))
    tiers = list(np.where(rng.random(n) < 0.5, "interactive", "batch"))
    w = from_columns(arrival, prompt, out, max_output_tokens=cap, tiers=tiers)
    name, extra = draw(st.sampled_from(PRESETS))
    block_size = draw(st.sampled_from([1, 4, 16]))
    engine = EngineConfig(
        name=name,
        num_gpu_blocks=draw(st.integers(1, 300)) * 16 // block_size,
        block_size=block_size,
        max_num_seqs=draw(st.integers(1, 16)),
        max_num_batched_tokens=draw(st.sampled_from([16, 128, 2048])),
        **extra,
    )
    cfg = SimConfig(
        engine=engine,
        tiers=(
            TierConfig("interactive", max_sequence_tokens=4096, queue_timeout_s=3.0),
            TierConfig("batch", max_sequence_tokens=4096, priority=1, queue_timeout_s=30.0),
        ),
        cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7),
        timeline_period_s=0.05,
    )
    policy = draw(st.sampled_from(["unlimited", "conservative", "overcommit", "preemptive"]))
    return w, cfg, policy


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset_cases())
def test_skip_ahead_matches_step_by_step_for_random_presets(
    case: tuple[Workload, SimConfig, str],
) -> None:
    w, cfg, policy = case
    a, _ = assert_skip_ahead_matches_stepping(w, cfg, policy)
    assert (a.timeline.kv_used_tokens <= a.timeline.kv_capacity_tokens).all()
    if cfg.engine.name == "tgi" or (
        cfg.engine.name == "trtllm" and cfg.engine.capacity_scheduler_policy == "GUARANTEED_NO_EVICT"
    ):
        assert a.summary["engine"]["num_engine_preemptions"] == 0


def test_engine_names_are_the_presets() -> None:
    assert ENGINE_NAMES == ("vllm", "vllm-swap", "tgi", "sglang", "trtllm")


def test_sglang_clips_a_declared_max_tokens_beyond_the_context() -> None:
    """A client may declare more max_tokens than the context holds; SGLang clips
    max_new_tokens to ``max_req_len - input_len - 1`` at arrival, so an idle engine starts the
    request (unclipped, its admission estimate never fits and nothing is ever scheduled)."""
    # prompt + max_tokens = 16 = the KV pool: the gateway admits it, and it fits the context
    w = from_columns(
        np.array([0.0, 0.1]), np.array([6, 1]), np.array([3, 2]), max_output_tokens=np.array([10, 6])
    )
    cfg = SimConfig(
        engine=EngineConfig(
            name="sglang", num_gpu_blocks=16, block_size=1, max_num_seqs=1, max_num_batched_tokens=16
        ),
        cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7),
    )
    rec = simulate(w, make_policy("unlimited"), cfg).records
    assert rec.status.tolist() == ["completed", "completed"]
    assert rec.output_tokens.tolist() == [3, 2]


@pytest.mark.parametrize("name", sorted(ENGINE_NAMES))
@pytest.mark.parametrize("seed", [0, 6, 7])
def test_skip_ahead_matches_stepping_when_steps_end_on_a_gateway_timer(name: str,
                                                                       seed: int) -> None:
    """Steps of exactly 0.25 s (or 1/16 s) and arrivals on a 0.25 s grid: step ends fall on
    the gateway's queue-timeout timers (arrival + 5 s) and on arrivals exactly. An interactive
    request that expires at a step's end lets the one behind it in; stepping starts it in the
    very next step, and a planned decode run must end where stepping would see it (it used to
    run through that step, the request starting a step later: 1 case in 30 of this grid)."""
    rng = np.random.default_rng(seed)
    n = 40
    arrival = np.sort(rng.integers(0, 80, n)) * 0.25
    out = rng.integers(1, 60, n)
    w = from_columns(arrival.astype(np.float64), rng.integers(1, 200, n), out,
                     max_output_tokens=out + rng.integers(0, 20, n),
                     tiers=rng.choice(["interactive", "batch"], n).tolist())
    for step_s in (0.25, 0.0625):
        cfg = SimConfig(
            engine=EngineConfig(name=name, num_gpu_blocks=24, block_size=16, max_num_seqs=8,
                                max_num_batched_tokens=256),
            tiers=(TierConfig("interactive", queue_timeout_s=5.0, max_sequence_tokens=10**6),
                   TierConfig("batch", queue_timeout_s=None, max_sequence_tokens=10**6)),
            cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0),
        )
        for policy in ("preemptive", "overcommit"):
            assert_skip_ahead_matches_stepping(w, cfg, policy)


# --- decode runs past arrivals while the waiting head is refused ----------------------------------

def backed_up_workload(n: int, seed: int) -> Workload:
    """Requests arriving faster than the engines below serve them: the waiting queue backs up
    behind a head that is refused (TGI's and TensorRT-LLM's reservations, SGLang's estimate,
    vLLM's seats)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.04, n))
    prompt = rng.integers(16, 300, n)
    cap = rng.integers(20, 300, n)
    out = np.maximum(1, (cap * rng.random(n)).astype(np.int64))
    tiers = list(np.where(rng.random(n) < 0.5, "interactive", "batch"))
    return from_columns(arrival, prompt, out, max_output_tokens=cap, tiers=tiers)


SPAN_CASES: list[tuple[str, dict[str, Any]]] = [
    ("tgi", {}),
    ("trtllm", {}),
    ("sglang", {}),
    ("vllm", {"max_num_seqs": 3}),
    # an interactive request that arrives goes before a batch head: that run ends at once
    ("vllm", {"max_num_seqs": 3, "scheduling_policy": "priority"}),
    ("tgi", {"scheduling_policy": "priority"}),
]


@pytest.mark.parametrize(("name", "extra"), SPAN_CASES,
                         ids=[n + "".join(f"-{v}" for v in e.values()) for n, e in SPAN_CASES])
@pytest.mark.parametrize("fleet", [None, "least_tokens", "round_robin"])
def test_decode_runs_go_past_arrivals_behind_a_refused_head_as_stepping_does(
    name: str, extra: dict[str, Any], fleet: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the waiting head is refused, a request that arrives joins the queue behind it and
    changes only the timeline's figures of the steps after it: a decode run goes on over
    arrivals to the next timeline sample (a fleet's replica: from a request routed to it
    sooner than planned), and records, timeline and gaps stay those of stepping."""
    from kvbudget.simulator.decode_plan import DecodeRunPlanner
    from kvbudget.simulator.fleet import FleetConfig

    longer: list[int] = []
    keep = DecodeRunPlanner.keep

    def counting(planner: DecodeRunPlanner, ends: Any, t_ext: float, until: float,
                 lag: int = 0) -> int:
        kept = keep(planner, ends, t_ext, until, lag)
        longer.append(kept > min(len(ends), int(np.searchsorted(ends, t_ext)) + 1))
        return kept

    monkeypatch.setattr(DecodeRunPlanner, "keep", counting)
    w = backed_up_workload(120, seed=len(name) + len(extra))
    engine = EngineConfig(name=name, num_gpu_blocks=120, block_size=16,  # type: ignore[arg-type]
                          max_num_batched_tokens=512, **extra)
    cfg = SimConfig(
        engine=engine,
        tiers=(TierConfig("interactive", queue_timeout_s=None),
               TierConfig("batch", priority=1, queue_timeout_s=None)),
        cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7),
        timeline_period_s=0.5 if fleet is None else 0.05,
        fleet=None if fleet is None else FleetConfig(2, router=fleet),  # type: ignore[arg-type]
    )
    a, b = assert_skip_ahead_matches_stepping(w, cfg, "unlimited")
    assert a.summary["engine"] == b.summary["engine"]
    assert any(longer)  # some runs went past the next arrival
