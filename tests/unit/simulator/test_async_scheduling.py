"""Async scheduling (vLLM's default): the engine schedules step N+1 while step N runs, so a
request that comes during step N is first scheduled in step N+2.

Known answers worked by hand under a test cost model where every step takes 10 ms: a request of
one prompt token and 50 output tokens starts at 0 and takes one step per token, so steps end at
0.01, 0.02, ... 0.50.
"""

from __future__ import annotations

import math

import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns
from kvbudget.workloads.workload import Workload

STEP_S = 0.01


def run(workload: Workload, *, async_scheduling: bool | None, skip_ahead: bool,
        **engine: int) -> RunResult:
    config = SimConfig(
        engine=EngineConfig(**{"num_gpu_blocks": 1000, "max_num_seqs": 8, **engine},
                            skip_ahead=skip_ahead, async_scheduling=async_scheduling),
        tiers=(TierConfig("interactive", queue_timeout_s=None, max_sequence_tokens=10**9),),
        cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0),
    )
    return simulate(workload, make_policy("unlimited"), config)


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_a_request_that_comes_during_a_step_starts_a_step_later(skip_ahead: bool) -> None:
    """The second request comes at 0.105, during the step [0.10, 0.11]. Without async
    scheduling it is scheduled in [0.11, 0.12] (first token at 0.12); with it, [0.11, 0.12]
    was scheduled while [0.10, 0.11] ran, so it starts in [0.12, 0.13]: first token at 0.13,
    and its 5 tokens end at 0.17 instead of 0.16. The first request is not delayed."""
    w = from_columns([0.0, 0.105], [1, 1], [50, 5])
    on = run(w, async_scheduling=True, skip_ahead=skip_ahead).records
    off = run(w, async_scheduling=False, skip_ahead=skip_ahead).records
    assert off.first_token_s.tolist() == pytest.approx([0.01, 0.12])
    assert on.first_token_s.tolist() == pytest.approx([0.01, 0.13])
    assert (on.arrival_s + on.e2e_s).tolist() == pytest.approx([0.50, 0.17])
    assert (off.arrival_s + off.e2e_s).tolist() == pytest.approx([0.50, 0.16])


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_an_idle_engine_starts_a_request_at_once(skip_ahead: bool) -> None:
    """The first request finishes at 0.50; one that comes at 0.7 finds the engine idle and
    starts at once (first token 0.71), as vLLM schedules it on arrival."""
    w = from_columns([0.0, 0.7], [1, 1], [50, 5])
    rec = run(w, async_scheduling=True, skip_ahead=skip_ahead).records
    assert rec.first_token_s.tolist() == pytest.approx([0.01, 0.71])


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_a_request_during_the_last_step_starts_right_after_it(skip_ahead: bool) -> None:
    """It comes at 0.495, during the first request's last step [0.49, 0.50]. vLLM schedules no
    step [0.50, 0.51] for a request that reaches its max_tokens in [0.49, 0.50]
    (``vllm/v1/core/sched/scheduler.py``: async scheduling skips it), so nothing is in flight
    after 0.50 and the new request is scheduled at once: first token at 0.51, as without
    async scheduling."""
    w = from_columns([0.0, 0.495], [1, 1], [50, 5])
    on = run(w, async_scheduling=True, skip_ahead=skip_ahead).records
    off = run(w, async_scheduling=False, skip_ahead=skip_ahead).records
    assert on.first_token_s.tolist() == pytest.approx([0.01, 0.51])
    assert off.first_token_s.tolist() == on.first_token_s.tolist()


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_a_client_that_gives_up_before_it_is_scheduled_leaves_nothing(skip_ahead: bool) -> None:
    """The second request comes at 0.105 and its client gives up after 5 ms, at 0.11, before
    the step it would join ([0.12, 0.13]): it never runs, and the first is not disturbed."""
    w = from_columns([0.0, 0.105], [1, 1], [50, 5], timeout_s=[math.inf, 0.005])
    result = run(w, async_scheduling=True, skip_ahead=skip_ahead)
    rec = result.records
    assert rec.status.tolist() == ["completed", "client_timeout"]
    assert math.isnan(rec.first_token_s.iloc[1])
    assert (rec.arrival_s + rec.e2e_s).iloc[0] == pytest.approx(0.50)


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_the_timeline_counts_a_request_not_yet_scheduled_as_waiting(skip_ahead: bool) -> None:
    """Requests every 2 ms for 0.1 s beside a long one: each waits a step before it can be
    scheduled, so with async scheduling the timeline's waiting count is never below the one
    without (the same requests, each scheduled one step later)."""
    n = 50
    w = from_columns([0.0] + [0.001 + 0.002 * k for k in range(n)], [1] * (n + 1),
                     [200] + [3] * n)
    on = run(w, async_scheduling=True, skip_ahead=skip_ahead, max_num_seqs=2).timeline
    off = run(w, async_scheduling=False, skip_ahead=skip_ahead, max_num_seqs=2).timeline
    assert on.num_waiting.sum() >= off.num_waiting.sum() > 0


def test_the_engines_defaults() -> None:
    from kvbudget.perf.hardware import get_gpu

    gpu = get_gpu("H100-80GB")
    resolved = {name: EngineConfig(name=name).resolved(gpu).async_scheduling
                for name in ("vllm", "vllm-swap", "sglang", "trtllm", "tgi")}
    assert resolved == {"vllm": True, "vllm-swap": False, "sglang": True, "trtllm": True,
                        "tgi": False}
    assert EngineConfig().resolved(gpu, "kvbudget-0.1").async_scheduling is False
    assert EngineConfig(async_scheduling=False).resolved(gpu).async_scheduling is False
    with pytest.raises(ValueError, match="async_scheduling: TGI's router"):
        EngineConfig(name="tgi", async_scheduling=True)


def test_the_step_it_adds_is_the_figure_the_docs_quote() -> None:
    """docs/fidelity.md ("The first token"): one step of 1 to 32 running requests of 1,000
    tokens on H100s: 6.5-8.1 ms (Llama-3.1-8B), 16.0-18.5 ms (Llama-3.1-70B, TP 4)."""
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model
    from kvbudget.perf.step_time import VllmStepModel

    h100 = get_gpu("H100-SXM")
    for name, tp, quoted in (("Llama-3.1-8B", 1, (6.5, 8.1)), ("Llama-3.1-70B", 4, (16.0, 18.5))):
        model = VllmStepModel(h100, get_model(name), tensor_parallel_size=tp)
        steps = [model.step_time(0.0, float(n), n * 1000.0, 0.0, 0.0) * 1e3 for n in (1, 32)]
        assert [round(v, 1) for v in steps] == list(quoted)
