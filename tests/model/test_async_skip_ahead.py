"""Skip-ahead under async scheduling: a decode run goes on through the step after the one in
progress when a request comes (the request is schedulable only once that step has ended,
``engine.Engine._add``), unless a timeline sample falls in that step; the results stay
stepping's.

Known answers worked by hand with steps of 0.125 s (exact in binary, so sums from 0 land on
the grid): step ``j`` (from 0) of a run starting at 0 ends at ``0.125 (j + 1)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.decode_plan import GROUP_SMALL_K, DecodeRunPlanner
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns
from kvbudget.workloads.workload import Workload
from tests.conftest import assert_skip_ahead_matches_stepping

STEP_S = 0.125
TIERS = (TierConfig("interactive", queue_timeout_s=None, max_sequence_tokens=10**9),)


def planner(period_s: float) -> DecodeRunPlanner:
    """A planner whose steps all take :data:`STEP_S`, with timeline samples every
    ``period_s`` (``first_at_or_after`` of a grid from 0)."""
    p = DecodeRunPlanner(LinearCostModel(STEP_S, 0.0, 0.0, 0.0), block_size=16)
    p.sample_in = lambda t0, t1: math.ceil(t0 / period_s) * period_s < t1
    return p


@pytest.mark.parametrize(("t_ext", "lag", "period_s", "steps"), [
    (0.3, 0, 1.0, 3),  # the step in progress at 0.3 is [0.25, 0.375): the run's last
    (0.3, 1, 1.0, 4),  # one step more: [0.375, 0.5)
    (0.3, 1, 0.25, 4),  # the sample at 0.5 falls in the step after it, not in it
    (0.3, 1, 0.4, 3),  # the sample at 0.4 falls in [0.375, 0.5): it reads that step's figures
    # the arrival ties with a step end: it comes before that step's end (URGENT), the step
    # [0.25, 0.375) is the one in progress, and the run goes on through the next
    (0.375, 0, 1.0, 3),
    (0.375, 1, 1.0, 4),
    (3.05, 0, 10.0, 25),  # [3.0, 3.125) is the 25th step
    (3.05, 1, 10.0, 26),
])
def test_a_run_goes_on_through_the_step_after_an_arrival(
    t_ext: float, lag: int, period_s: float, steps: int
) -> None:
    p = planner(period_s)
    dt0 = p.decode_step(1, 1)
    assert dt0 == STEP_S
    k_max = p.bound(1000, 0.0, t_ext, dt0, lag)
    ends, _ = p.steps(1, 0, k_max, 0.0, dt0, False)
    assert p.keep(ends, t_ext, t_ext, lag) == steps
    assert ends[:steps].tolist() == [STEP_S * (j + 1) for j in range(steps)]
    if k_max <= GROUP_SMALL_K:  # both paths: the same steps
        small_ends, _ = p.steps(1, 0, k_max, 0.0, dt0, True)
        assert small_ends == ends.tolist()
        assert p.keep(small_ends, t_ext, t_ext, lag) == steps


def run(workload: Workload, *, async_scheduling: bool, skip_ahead: bool,
        period_s: float = 1.0) -> tuple[list[float], int]:
    """First-token times and the engine loop's iterations (steps or runs of steps)."""
    config = SimConfig(
        engine=EngineConfig(num_gpu_blocks=1000, max_num_seqs=8, skip_ahead=skip_ahead,
                            async_scheduling=async_scheduling),
        tiers=TIERS, cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0),
        timeline_period_s=period_s)
    result, calls = simulate_counting_turns(workload, config)
    return result.records.first_token_s.tolist(), calls


def simulate_counting_turns(workload: Workload, config: SimConfig) -> tuple[RunResult, int]:
    """The run (policy ``unlimited``) and the engine loop's turns (steps or runs of steps)."""
    calls = 0

    def count(_: Engine) -> None:
        nonlocal calls
        calls += 1

    with observing(count):
        result = simulate(workload, make_policy("unlimited"), config)
    return result, calls


@contextmanager
def observing(fn: Callable[[Engine], None]) -> Iterator[None]:
    """``Engine.step_observer`` (called before every turn of the engine loop) set to ``fn``
    while in the block."""
    Engine.step_observer = fn
    try:
        yield
    finally:
        Engine.step_observer = None


@pytest.mark.parametrize("period_s", [1.0, 0.4])
def test_an_arrival_during_a_decode_run_costs_no_step_of_its_own(period_s: float) -> None:
    """Row 0 (1 prompt token, 50 output tokens) decodes from its first token at 0.125; row 1
    comes at 1.3, during the step [1.25, 1.375). Without async scheduling it starts in
    [1.375, 1.5) (first token 1.5); with it, [1.375, 1.5) was scheduled while [1.25, 1.375)
    ran, so it starts in [1.5, 1.625) (first token 1.625), stepping and skip-ahead alike.
    Skip-ahead's run goes on through [1.375, 1.5) (no timeline sample falls in it: they are at
    1.0 and 2.0, or 1.2 and 1.6), so the engine loop turns as often as without async
    scheduling (before, the run ended at 1.375 and [1.375, 1.5) took a turn of its own)."""
    w = from_columns([0.0, 1.3], [1, 1], [50, 5])
    off_step, _ = run(w, async_scheduling=False, skip_ahead=False, period_s=period_s)
    on_step, _ = run(w, async_scheduling=True, skip_ahead=False, period_s=period_s)
    off, off_calls = run(w, async_scheduling=False, skip_ahead=True, period_s=period_s)
    on, on_calls = run(w, async_scheduling=True, skip_ahead=True, period_s=period_s)
    assert off == off_step == pytest.approx([0.125, 1.5])
    assert on == on_step == pytest.approx([0.125, 1.625])
    assert on_calls == off_calls


def test_a_sample_in_the_step_after_an_arrival_ends_the_run_before_it() -> None:
    """As above with samples every 0.7 s: the one at 1.4 falls in [1.375, 1.5), which stepping
    schedules with row 1 counted as waiting; the run ends at 1.375 and that step is taken on
    its own (one loop turn more than without async scheduling), and the timeline is
    stepping's."""
    w = from_columns([0.0, 1.3], [1, 1], [50, 5])
    _, off_calls = run(w, async_scheduling=False, skip_ahead=True, period_s=0.7)
    on, on_calls = run(w, async_scheduling=True, skip_ahead=True, period_s=0.7)
    assert on == pytest.approx([0.125, 1.625])
    assert on_calls == off_calls + 1
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=1000, max_num_seqs=8),
                       tiers=TIERS, cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0),
                       timeline_period_s=0.7)
    step, _ = assert_skip_ahead_matches_stepping(w, config, "unlimited")
    sample = step.timeline[np.isclose(step.timeline.time_s, 1.4)]
    assert sample.num_waiting.tolist() == [1]


GRID_TIERS = (TierConfig("interactive", queue_timeout_s=5.0, max_sequence_tokens=10**6),
              TierConfig("batch", queue_timeout_s=None, max_sequence_tokens=10**6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# an arrival on a step's end that a quiet lagged run (DecodeRunPlanner.quiet, since removed:
# every lagged run now waits its end as one event) counted as after
# that step, where stepping's URGENT arrival comes before it (the speedbound and clienttie
# branches each exact, merged not)
@example(1000, 0.125, 0.25, 0.0, "preemptive", "vllm", 1.0)
@example(1024, 0.125, 0.25, 0.125, "preemptive", "sglang", 1.0)
@given(
    st.integers(0, 2**16),
    st.sampled_from([0.125, 0.25]),
    st.sampled_from([0.25, 0.125, 0.1]),
    st.sampled_from([0.0, 0.0625, 0.125]),
    st.sampled_from(["preemptive", "overcommit", "unlimited"]),
    st.sampled_from(["vllm", "sglang", "trtllm"]),
    st.sampled_from([1.0, 0.25, 0.3]),
)
def test_skip_ahead_matches_stepping_on_a_grid_under_async_scheduling(
    seed: int, grid_s: float, step_s: float, prefill_s: float, policy: str, name: str,
    period_s: float,
) -> None:
    """One engine with async scheduling, 60 requests arriving on a grid of ``grid_s``, steps
    of ``step_s`` (``prefill_s`` more per prefilling request): step ends fall exactly on
    arrivals (one strictly inside a step, the next on its end), queue-timeout timers (arrival
    + 5 s) and timeline samples, where the step after an arrival's is kept in a run or not.
    Skip-ahead byte-identical to stepping. (The waiting head is never refused here: runs
    planned past arrivals behind a refused head, ``fast_decode``'s spans, do not order their
    ends with grid arrivals as stepping does, on main before this change too.)"""
    rng = np.random.default_rng(seed)
    n = 60
    arrival = np.sort(rng.integers(0, int(20 / grid_s), n)) * grid_s
    prompt, out = rng.integers(1, 200, n), rng.integers(1, 60, n)
    w = from_columns(arrival.astype(np.float64), prompt, out,
                     max_output_tokens=out + rng.integers(0, 20, n),
                     tiers=rng.choice(["interactive", "batch"], n).tolist())
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=2000, block_size=16, max_num_seqs=64,
                            max_num_batched_tokens=4096, name=name,  # type: ignore[arg-type]
                            async_scheduling=True),
        tiers=GRID_TIERS,
        cost_model=LinearCostModel(step_s, 0.0, 0.0, 0.0, 0.0, prefill_s),
        timeline_period_s=period_s,
    )
    assert_skip_ahead_matches_stepping(w, cfg, policy)


def test_an_abort_after_an_arrival_kept_the_next_step_still_ends_the_run() -> None:
    """One seat (``max_num_seqs=1``), so a run is planned past arrivals to the next sample;
    at 0.710266 row 9 comes during its second step (it keeps the step after, 0.714251 to
    0.719353), and at 0.713597 row 8's lease expires in the same step: its abort waits for
    that step's end, where stepping drops it, so the run must end there, with row 8's 2
    tokens (the run used to go on to 0.719353 and count 3). Found by hypothesis."""
    arrival = [0.0339966, 0.08497645, 0.08596678, 0.08608025, 0.11359739, 0.19509442,
               0.22877356, 0.26653863, 0.40737793, 0.71026558, 0.874587, 0.87465138,
               0.98810612, 0.991731, 1.04520102]
    prompt = [42, 9, 5, 43, 2, 27, 4, 15, 24, 21, 20, 2, 1, 7, 1]
    out = [554, 245, 104, 222, 387, 284, 223, 491, 1117, 345, 672, 146, 488, 385, 305]
    cap = [805, 631, 776, 309, 738, 917, 461, 553, 1196, 966, 1177, 456, 822, 1140, 780]
    tiers = ["batch", "interactive", "batch", "interactive", "batch", "batch", "interactive",
             "batch", "interactive", "interactive", "interactive", "interactive", "batch",
             "interactive", "interactive"]
    w = from_columns(np.array(arrival), np.array(prompt), np.array(out),
                     max_output_tokens=np.array(cap), tiers=tiers)
    cfg = SimConfig(
        engine=EngineConfig(block_size=1, num_gpu_blocks=2624, max_num_seqs=1,
                            max_num_batched_tokens=16),
        tiers=(TierConfig("interactive", max_sequence_tokens=4096, queue_timeout_s=3.0),
               TierConfig("batch", max_sequence_tokens=4096, priority=1, queue_timeout_s=30.0,
                          retryable_on_overload=True)),
        cost_model=LinearCostModel(0.005, 1e-4, 1e-4, 1e-7), timeline_period_s=0.05,
        lease_ttl_s=0.3)
    step, _ = assert_skip_ahead_matches_stepping(w, cfg, "adaptive")
    assert step.records.output_tokens[8] == 2


def test_an_arrival_as_a_kept_step_starts_comes_before_the_step_before_ends() -> None:
    """Row 1 comes at 1.3, during [1.25, 1.375): the run goes on through [1.375, 1.5). Row 2
    comes at exactly 1.375: an arrival is an URGENT event (``simulator/alarm.py``), run before
    every step ending at its instant whenever either was made, so [1.25, 1.375) has not ended
    and row 2 too came during it: schedulable once [1.375, 1.5) has ended, it starts with
    row 1 in [1.5, 1.625) (first tokens 1.625 both). Skip-ahead's run, which waits for its
    end from its start (no arrival due at 1.5, no timer), counts the step ending at 1.375 as
    not ended then, as stepping does."""
    w = from_columns([0.0, 1.3, 1.375], [1, 1, 1], [50, 5, 5])
    on_step, _ = run(w, async_scheduling=True, skip_ahead=False)
    on, _ = run(w, async_scheduling=True, skip_ahead=True)
    assert on == on_step == pytest.approx([0.125, 1.625, 1.625])


def test_a_request_behind_the_refused_head_does_not_end_a_run_when_schedulable() -> None:
    """One seat, steps of 0.125 s. Row 0 (20 output tokens) runs from 0 (first token 0.125,
    finished 2.5). Row 1 comes at 0.01, during row 0's first step: it is schedulable from the
    third step on and waits, refused a seat, until row 0 finishes (first token 2.625,
    finished 3.125); row 2 comes at 0.2, during the second step, and is schedulable from the
    fourth, behind row 1 (first token 3.25). Row 3 comes at 5.0. From 0.25 the run goes past
    row 3's arrival to the next sample (the refused head: ``fast_decode._plan_until``) and past
    the step from which row 2 is schedulable: in an FCFS queue behind the refused head it
    changes nothing the steps do, and it counts as waiting either way. The engine loop turns
    9 times (10 when that step ended the run), with stepping's results."""
    w = from_columns([0.0, 0.01, 0.2, 5.0], [1, 1, 1, 1], [20, 5, 5, 5])
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=1000, max_num_seqs=1),
                       tiers=TIERS, cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0))
    skip, calls = simulate_counting_turns(w, config)
    step, _ = assert_skip_ahead_matches_stepping(w, config, "unlimited")
    assert skip.records.first_token_s.tolist() == pytest.approx([0.125, 2.625, 3.25, 5.125])
    assert step.records.finished_s.tolist() == pytest.approx([2.5, 3.125, 3.75, 5.625])
    assert calls == 9
