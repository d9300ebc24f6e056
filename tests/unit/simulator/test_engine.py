"""Known answers for the engine model, worked out by hand from vLLM v1's scheduling rules."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import RunResult, SimConfig, simulate
from tests.conftest import make_workload

TIERS = (
    TierConfig("interactive", queue_timeout_s=None),
    TierConfig("batch", priority=1, queue_timeout_s=None),
)


def config(
    skip: bool,
    *,
    blocks: int = 10_000,
    block_size: int = 16,
    batched: int = 8192,
    seqs: int = 256,
    cost: LinearCostModel | None = None,
    scheduling: str = "fcfs",
) -> SimConfig:
    return SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=blocks,
            block_size=block_size,
            max_num_batched_tokens=batched,
            max_num_seqs=seqs,
            skip_ahead=skip,
            scheduling_policy=scheduling,
            # the steps worked out below are a scheduler's that schedules after each step;
            # async scheduling's one-step lag has its own known answers
            # (test_async_scheduling.py)
            async_scheduling=False,
        ),  # type: ignore[arg-type]
        tiers=TIERS,
        cost_model=cost or LinearCostModel(0.01, 0.001, 0.0, 0.0),
    )


@pytest.mark.parametrize("skip", [False, True])
def test_single_request_prefill_then_decode(skip: bool) -> None:
    w = make_workload([0.0], [100], [5])
    r = simulate(w, make_policy("unlimited"), config(skip)).records.iloc[0]
    # one prefill step of 100 tokens (0.01 + 0.1 s) gives the first token; 4 decode steps
    assert r.status == "completed"
    assert r.ttft_s == pytest.approx(0.11)
    assert r.e2e_s == pytest.approx(0.15)
    assert r.tpot_s == pytest.approx(0.01)
    assert r.output_tokens == 5 and r.num_preemptions == 0


@pytest.mark.parametrize("skip", [False, True])
def test_chunked_prefill_splits_the_prompt_under_the_token_budget(skip: bool) -> None:
    w = make_workload([0.0], [100], [5])
    r = simulate(w, make_policy("unlimited"), config(skip, batched=64)).records.iloc[0]
    # 64 tokens (0.074 s), then 36 tokens (0.046 s) -> first token at 0.12; 4 decodes
    assert r.ttft_s == pytest.approx(0.12)
    assert r.e2e_s == pytest.approx(0.16)


@pytest.mark.parametrize("skip", [False, True])
def test_max_num_seqs_queues_in_the_engine(skip: bool) -> None:
    w = make_workload([0.0, 0.0, 0.0], [10, 10, 10], [3, 3, 3])
    cost = LinearCostModel(1.0, 0.0, 0.0, 0.0)
    rec = simulate(w, make_policy("unlimited"), config(skip, seqs=2, cost=cost)).records
    # two run for 3 steps; the third starts at step 4
    assert list(rec.finished_s) == [3.0, 3.0, 6.0]
    assert list(rec.ttft_s) == [1.0, 1.0, 4.0]


@pytest.mark.parametrize("skip", [False, True])
def test_preemption_by_recompute_pays_the_recompute(skip: bool) -> None:
    # 4 blocks of 4 tokens = 16 tokens; two requests of 4 prompt + 8 output tokens each.
    # Steps 1-5 fit (2 blocks each); at step 6 A needs a 3rd block: B (latest) is preempted,
    # A finishes at step 8; B recomputes its 4 + 5 tokens (9 prefill tokens) at step 9 and
    # finishes at step 11.
    w = make_workload([0.0, 0.0], [4, 4], [8, 8])
    cost = LinearCostModel(1.0, 0.1, 0.0, 0.0)
    res = simulate(w, make_policy("unlimited"), config(skip, blocks=4, block_size=4, cost=cost))
    rec = res.records
    assert list(rec.num_preemptions) == [0, 1]
    assert rec.finished_s[0] == pytest.approx(1.8 + 7)
    assert rec.finished_s[1] == pytest.approx(1.8 + 7 + 1.9 + 2)
    assert res.summary["engine"]["num_recomputed_tokens"] == 8
    assert rec.ttft_s[1] == pytest.approx(1.8)  # the first token the caller saw


@pytest.mark.parametrize("skip", [False, True])
def test_priority_victim_is_the_lowest_priority(skip: bool) -> None:
    # same KV squeeze; the batch request arrives first but is the victim under priority
    w = make_workload([0.0, 0.0], [4, 4], [8, 8], tiers=["batch", "interactive"])
    cost = LinearCostModel(1.0, 0.0, 0.0, 0.0)
    rec = simulate(
        w,
        make_policy("unlimited"),
        config(skip, blocks=4, block_size=4, cost=cost, scheduling="priority"),
    ).records
    by_tier = dict(zip(rec.tier, rec.num_preemptions, strict=True))
    assert by_tier == {"batch": 1, "interactive": 0}


@pytest.mark.parametrize("skip", [False, True])
@pytest.mark.parametrize("rule", ["latest_arrival", "most_blocks"])
def test_preemption_victim_rule_in_a_decode_step(skip: bool, rule: str) -> None:
    # 5 blocks of 4 tokens. Step 1 prefills A (12 tokens, 3 blocks) and B (4 tokens, 1 block)
    # and samples a token of each; step 2 is pure decode: A takes its 4th block, B finds none.
    # vLLM's rule preempts the latest arrival (B, itself: the loop ends, A decodes alone);
    # most_blocks preempts A (4 blocks, scheduled already: its token goes back to the budget)
    # and B gets A's blocks. The speed-ups preempt through the same method.
    w = make_workload([0.0, 0.0], [12, 4], [6, 6])
    cost = LinearCostModel(1.0, 0.0, 0.0, 0.0)
    cfg = config(skip, blocks=5, block_size=4, cost=cost)
    cfg = replace(cfg, engine=replace(cfg.engine, preemption_victim=rule))  # type: ignore[arg-type]
    rec = simulate(w, make_policy("unlimited"), cfg).records
    if rule == "latest_arrival":
        assert list(rec.num_preemptions) == [0, 1]
        assert list(rec.finished_s) == [6.0, 11.0]  # B restarts once A has finished
    else:
        assert list(rec.num_preemptions) == [1, 0]
        assert list(rec.finished_s) == [11.0, 6.0]


def test_preemption_victim_rule_is_refused_where_the_engine_has_its_own() -> None:
    with pytest.raises(ValueError, match="preemption_victim 'most_blocks' is for vllm"):
        EngineConfig(name="sglang", preemption_victim="most_blocks")
    with pytest.raises(ValueError, match="preemption_victim must be"):
        EngineConfig(preemption_victim="oldest")  # type: ignore[arg-type]
    assert EngineConfig(name="vllm-swap", preemption_victim="most_blocks").preemption_victim


def test_request_longer_than_the_kv_cache_is_rejected_too_large() -> None:
    w = make_workload([0.0, 0.1], [60, 10], [10, 10])
    rec = simulate(w, make_policy("unlimited"), config(True, blocks=4, block_size=16)).records
    assert list(rec.status) == ["rejected_too_large", "completed"]


def test_conservative_admits_the_second_request_when_the_first_finishes() -> None:
    # 8 blocks of 16 = 128 tokens; each request reserves 64 + 64 = 128 tokens
    w = make_workload([0.0, 0.5], [64, 64], [10, 10], max_output_tokens=[64, 64])
    cost = LinearCostModel(0.1, 0.0, 0.0, 0.0)
    rec = simulate(w, make_policy("conservative"), config(True, blocks=8, cost=cost)).records
    assert rec.admitted_s[0] == 0.0
    assert rec.admitted_s[1] == pytest.approx(rec.finished_s[0])
    assert list(rec.reserved_tokens) == [128, 128]


def test_admission_deadline_expires_waiting_requests() -> None:
    tiers = (TierConfig("interactive", queue_timeout_s=0.2),)
    w = make_workload([0.0, 0.1], [64, 64], [10, 10], max_output_tokens=[64, 64])
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=8),
        tiers=tiers,
        cost_model=LinearCostModel(0.1, 0.0, 0.0, 0.0),
    )
    res = simulate(w, make_policy("conservative"), cfg)
    assert list(res.records.status) == ["completed", "expired"]
    assert res.records.reason[1] == "deadline"
    assert res.summary["overall"]["expired"] == 1


WORKLOAD_CASES = [
    ("unlimited", {}, 300, 2000),
    ("conservative", {}, 300, 2000),
    ("overcommit", {"overcommit_ratio": 0.3}, 300, 2000),
    ("preemptive", {}, 300, 2000),
    ("preemptive", {"mode": "defer"}, 200, 1500),
]


@pytest.mark.parametrize(("policy", "params", "n", "blocks"), WORKLOAD_CASES)
def test_skip_ahead_gives_identical_records_and_timeline(
    policy: str, params: dict[str, object], n: int, blocks: int
) -> None:
    from tests.conftest import mixed_workload

    w = mixed_workload(n, rate_rps=6.0, seed=3)
    out = []
    for skip in (False, True):
        cfg = SimConfig(
            engine=EngineConfig(num_gpu_blocks=blocks, skip_ahead=skip, max_num_batched_tokens=2048)
        )
        out.append(simulate(w, make_policy(policy, params), cfg))
    a, b = out
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("wall_time_s")
    sb.pop("wall_time_s")
    steps_a = sa.pop("engine")["num_steps"]
    steps_b = sb.pop("engine")["num_steps"]
    assert steps_a == steps_b
    assert sa == sb


def test_a_variant_that_reads_running_arrays_steps_on_the_skip_ahead_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An engine class saying ``decode_group = False`` (its hooks read running requests'
    arrays between steps) keeps no decode group with skip-ahead, so it has no decode runs: it
    steps, with stepping's records and steps."""
    from kvbudget.simulator.fast_decode import SkipAheadEngine
    from tests.conftest import mixed_workload

    w = mixed_workload(120, rate_rps=6.0, seed=5)
    formed: list[int] = []
    form = SkipAheadEngine._group_form

    def counted(self: SkipAheadEngine) -> None:
        formed.append(1)
        form(self)

    monkeypatch.setattr(SkipAheadEngine, "_group_form", counted)
    out: list[RunResult] = []
    for skip in (False, True, True):
        if len(out) == 2:  # the third run: the class says its hooks read running arrays
            assert formed  # the second run kept its decoding requests as a group
            monkeypatch.setattr(SkipAheadEngine, "decode_group", False)
            formed.clear()
        cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=400, skip_ahead=skip))
        out.append(simulate(w, make_policy("unlimited"), cfg))
    step, _, no_group = out
    assert not formed  # the third run formed no group
    assert step.records.equals(no_group.records)
    assert step.summary["engine"]["num_steps"] == no_group.summary["engine"]["num_steps"]


@pytest.mark.parametrize("name", ["vllm", "tgi", "sglang"])
def test_skip_ahead_schedules_every_step_through_the_one_schedule(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The decode group answers only the running loop's ``_schedule_fit``: every step skip-ahead
    runs, the group's and the others, is scheduled by ``Scheduler._schedule`` (which asserts
    the invariants), so the waiting loop runs only from it (not when it preempted). With
    400 blocks, steps run outside the group too (prefills beside running requests, preemptions
    or retractions)."""
    from collections import Counter

    from kvbudget.simulator.engine import Engine
    from kvbudget.simulator.fast_decode import SkipAheadEngine
    from kvbudget.simulator.scheduler import Scheduler
    from tests.conftest import mixed_workload

    seen: Counter[str] = Counter()
    inside = [False]

    def counted(cls: type, method: str, key: str, schedule: bool = False) -> None:
        real = getattr(cls, method)

        def wrapper(self: Scheduler, *args: object) -> object:
            seen[key] += 1
            if not schedule:
                seen["outside " + key] += not inside[0]
                return real(self, *args)
            inside[0] = True
            try:
                return real(self, *args)
            finally:
                inside[0] = False
        monkeypatch.setattr(cls, method, wrapper)

    counted(Scheduler, "_schedule", "schedule", schedule=True)
    counted(Scheduler, "_schedule_waiting", "waiting")
    counted(SkipAheadEngine, "_group_iteration", "group")
    counted(Engine, "_run_step", "step")
    w = mixed_workload(120, rate_rps=6.0, seed=5)
    run = simulate(w, make_policy("unlimited"),
                   SimConfig(engine=EngineConfig(name=name, num_gpu_blocks=400)))
    assert run.summary["engine"]["num_steps"] > seen["schedule"]  # (the group's decode runs)
    assert seen["group"] > 0 and seen["step"] > 0
    assert seen["schedule"] == seen["group"] + seen["step"]
    assert 0 < seen["waiting"] <= seen["schedule"]
    assert seen["outside waiting"] == 0


def test_vllm_waiting_loop_says_whether_a_class_keeps_both_admission_hooks() -> None:
    """``vllm_waiting_loop`` (a hand-off is admitted within a decode run only then) is set per
    class: true for the base and for a class overriding neither ``_admit_waiting`` nor
    ``_on_schedule_waiting`` (skip-ahead's included), false when one of them is overridden
    (TGI admits by its own rule) by the class or a base."""
    from kvbudget.simulator.engine import Engine
    from kvbudget.simulator.engine_variants import engine_class

    class Plain(Engine):
        pass

    class Hooked(Engine):
        def _on_schedule_waiting(self) -> None:
            pass

    class Below(Hooked):
        pass

    assert Engine.vllm_waiting_loop and Plain.vllm_waiting_loop
    assert engine_class(EngineConfig(name="vllm")).vllm_waiting_loop
    assert not Hooked.vllm_waiting_loop and not Below.vllm_waiting_loop
    assert not engine_class(EngineConfig(name="tgi")).vllm_waiting_loop


def test_same_seed_same_bytes() -> None:
    from tests.conftest import mixed_workload

    w = mixed_workload(300, rate_rps=8.0, seed=5)
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=3000))
    a = simulate(w, make_policy("overcommit"), cfg).records
    b = simulate(w, make_policy("overcommit"), cfg).records
    assert a.equals(b)
    assert np.array_equal(a.to_numpy(dtype=str), b.to_numpy(dtype=str))


def test_skip_ahead_chooses_the_fast_decode_subclass_of_the_reference_engine() -> None:
    """Stepping is :class:`Engine` itself (or a preset's own class); ``skip_ahead`` runs the
    same hooks over :class:`SkipAheadEngine` (every preset's hooks read running requests
    through the group-aware accessors), with or without prefix caching."""
    from kvbudget.simulator.engine import Engine
    from kvbudget.simulator.engine_config import ENGINE_NAMES
    from kvbudget.simulator.engine_variants import ENGINE_CLASSES, engine_class
    from kvbudget.simulator.fast_decode import SkipAheadEngine

    assert engine_class(EngineConfig(skip_ahead=False)) is Engine
    assert engine_class(EngineConfig()) is SkipAheadEngine
    assert engine_class(EngineConfig(enable_prefix_caching=True)) is SkipAheadEngine
    assert set(ENGINE_CLASSES) == set(ENGINE_NAMES)
    for name in ENGINE_NAMES:
        step = engine_class(EngineConfig(name=name, skip_ahead=False))
        assert step is ENGINE_CLASSES[name] and not issubclass(step, SkipAheadEngine)
        skip = engine_class(EngineConfig(name=name))
        assert issubclass(skip, SkipAheadEngine) and issubclass(skip, step)
        # the preset's hooks come first, then the skip-ahead engine's
        mro = skip.__mro__
        assert mro.index(step) < mro.index(SkipAheadEngine) or step is Engine
        assert step.decode_group


def test_the_engine_refuses_more_output_than_declared() -> None:
    """TGI's and TensorRT-LLM's worst-case reservations rely on a request never generating
    more than its max_output_tokens (workloads check it too): an engine's columns refuse it,
    as they are made and as a fleet's replica grows them."""
    import math

    import simpy

    from kvbudget.simulator.engine import Engine, EngineHooks, RequestColumns

    one = np.ones(1, np.int64)
    message = "request 0: output_tokens 2 exceeds max_output_tokens 1"
    with pytest.raises(ValueError, match=message):
        RequestColumns(one, 2 * one, 0 * one, np.zeros(1), max_output_tokens=one)
    hooks = EngineHooks(lambda i, t: None, lambda i, t: None, lambda: math.inf, lambda: (0, 0))
    engine = Engine(simpy.Environment(), EngineConfig(), LinearCostModel(0.01, 0, 0, 0),
                    RequestColumns(one, one, 0 * one, np.zeros(1)), num_gpu_blocks=10, hooks=hooks)
    grown = {"prompt_tokens": [1, 1], "output_tokens": [1, 2], "max_output_tokens": [1, 1],
             "priority": [0, 0], "arrival_s": [0.0, 0.0]}
    with pytest.raises(ValueError, match=message.replace("request 0", "request 1")):
        engine.grow_rows(grown)


def _gaps(res: object) -> list[float]:
    gaps = res.token_gaps  # type: ignore[attr-defined]
    assert gaps is not None
    return sorted(np.repeat(gaps["gap_s"].to_numpy(), gaps["num_gaps"].to_numpy()).tolist())


@pytest.mark.parametrize("skip", [False, True])
def test_itl_gaps_are_the_steps_between_tokens(skip: bool) -> None:
    # A (100 + 4) alone: prefill 0.11 s (token 1 at 0.11), decode 0.12 (token 2); B (100 + 3)
    # arrives during that step and its prefill shares the next step with A's decode: 0.11 s
    # (A's token 3 and B's first at 0.23); then 0.24 (A's last, B's 2nd), 0.25 (B's last).
    w = make_workload([0.0, 0.115], [100, 100], [4, 3])
    res = simulate(w, make_policy("unlimited"), config(skip))
    assert list(res.records.finished_s) == pytest.approx([0.24, 0.25])
    assert _gaps(res) == pytest.approx([0.01, 0.01, 0.01, 0.01, 0.11])
    itl = res.summary["overall"]["itl_s"]
    assert itl["p50"] == pytest.approx(0.01) and itl["mean"] == pytest.approx(0.03)
    assert itl["p99"] == pytest.approx(0.01 + 0.96 * 0.1)  # numpy's linear percentile of 5
    # with the API server's per-token cost in every gap (none in the engine's steps)
    served = simulate(w, make_policy("unlimited"),
                      replace(config(skip), frontend="vllm-api-server"))
    assert _gaps(served) == pytest.approx([g + 45.9e-6 for g in _gaps(res)])


@pytest.mark.parametrize("skip", [False, True])
def test_itl_has_one_long_gap_across_a_preemption(skip: bool) -> None:
    # the preemption case above: B's tokens 1-5 at 1.8, 2.8, ..., 5.8; preempted at step 6;
    # its recompute ends at 1.8 + 7 + 1.9 = 10.7 (token 6), then 11.7, 12.7
    w = make_workload([0.0, 0.0], [4, 4], [8, 8])
    cost = LinearCostModel(1.0, 0.1, 0.0, 0.0)
    res = simulate(w, make_policy("unlimited"), config(skip, blocks=4, block_size=4, cost=cost))
    gaps = res.token_gaps
    assert gaps is not None
    assert int(gaps["num_gaps"].sum()) == 7 + 7
    assert _gaps(res) == pytest.approx([1.0] * 13 + [10.7 - 5.8])


def test_the_blocks_invariant_counts_the_running_rows_then_every_row() -> None:
    """Every block is free, held or cached: counted from the running requests' num_blocks
    (prompts of 20, 40 and 30 tokens in 16-token blocks: 2 + 3 + 2 = 7 of 10 blocks, 3 free),
    from every row's while a row outside running holds blocks (a KV load), and a block
    counted that the pool never handed out fails it."""
    import math

    import simpy

    from kvbudget.simulator.engine import Engine, EngineHooks, RequestColumns

    prompt = np.array([20, 40, 30], np.int64)
    hooks = EngineHooks(lambda i, t: None, lambda i, t: None, lambda: math.inf, lambda: (0, 0))
    engine = Engine(simpy.Environment(), EngineConfig(block_size=16, watermark=0.0),
                    LinearCostModel(0.01, 0, 0, 0),
                    RequestColumns(prompt, np.ones(3, np.int64), np.zeros(3, np.int64),
                                   np.zeros(3)), num_gpu_blocks=10, hooks=hooks)
    for i in range(3):
        engine.add_request(i)
    rows, _, started, _ = engine._schedule()  # nothing running: all three start
    assert len(rows) == 0 and started == [(0, 20), (1, 40), (2, 30)]
    kv = engine.kv
    assert (kv.num_held_blocks(engine.running_rows()), kv.num_free_blocks) == (7, 3)
    engine._stop_running([1])  # row 1 holds its 3 blocks outside running, as a KV load does
    assert kv.num_held_blocks(engine.running_rows()) == 4
    assert kv.num_held_blocks() == 7
    engine._schedule()  # (rows 0 and 2 hold their blocks already: nothing taken)
    kv.num_blocks[1] += 1  # a block counted that the pool never handed out
    with pytest.raises(AssertionError, match="blocks lost"):
        engine._schedule()
