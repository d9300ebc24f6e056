"""The timeline's samples of a run of steps: the same rows whether the run's step ends come as a
list or an array, and whatever the number of sample times the run spans (bisection for a few,
numpy's search for more)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.simulator.timeline import Timeline


def _rows(ends: list[float] | np.ndarray, used: list[int] | np.ndarray, start: float,
          period: float) -> list[tuple[float, int, int, int, int, int, int]]:
    timeline = Timeline(period, capacity_tokens=10_000, block_size=16)
    timeline.sample_step(start, 3, 0, (1, 0), 0)  # the samples before the run
    timeline.sample_steps(ends, used, 7, (5, 2), 1)
    return timeline.rows


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(1e-4, 2.0), min_size=1, max_size=60),
    st.floats(0.0, 50.0),
    st.sampled_from([0.05, 0.25, 1.0, 3.0]),
)
def test_a_runs_samples_are_the_same_from_a_list_and_an_array(
    durations: list[float], start: float, period: float
) -> None:
    """Each sample time in the run reads the blocks of the step in progress then (the first
    step ending after it, the last step for a time at or after the run's end)."""
    ends = list(np.cumsum(durations) + start)
    used = [10 + j for j in range(len(ends))]
    from_list = _rows(ends, used, start, period)
    from_array = _rows(np.array(ends), np.array(used, np.int64), start, period)
    assert from_list == from_array
    assert [r[0] for r in from_list] == [m * period for m in range(len(from_list))]
    for g, kv_used, *_ in from_list:
        if g < start:  # sampled before the run
            assert kv_used == 3 * 16
            continue
        k = min(int(np.searchsorted(ends, g, side="right")), len(ends) - 1)
        assert kv_used == used[k] * 16


def test_a_long_run_spans_many_samples() -> None:
    """A run spanning dozens of sample times (numpy's search) samples each one."""
    ends = np.arange(1, 401, dtype=np.float64) * 0.1  # 40 s of 0.1 s steps
    used = np.arange(400, dtype=np.int64)
    rows = _rows(ends, used, 0.0, 1.0)
    times = [r[0] for r in rows]
    assert times == [float(m) for m in range(40)]
    # the sample at m seconds reads the step in progress then: the one ending after m
    assert [r[1] // 16 for r in rows[1:]] == [int(np.searchsorted(ends, m, side="right"))
                                              for m in range(1, 40)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.integers(0, 200))
def test_the_step_logs_last_ends_are_the_tail_of_its_ends(sizes: list[int], n: int) -> None:
    """``StepLog.last_ends(n)`` (what a fleet's ties walk back over) is ``ends()[-n:]``, across
    chunks of runs, single steps and the merges at samples."""
    from kvbudget.simulator.step_log import StepLog

    log = StepLog(0.5, capacity_tokens=10_000, block_size=16)
    t = 0.0
    for k, size in enumerate(sizes):
        ends = (t + 0.1 * np.arange(1, size + 1)).tolist()
        t = ends[-1]
        if k % 2:
            log.ended_run(np.array(ends))
        else:
            for e in ends:
                log.ended(e)
        if k % 3 == 2:
            log.scheduled(t + 0.1, 0.1, 1, False, 0, (1, 0), 0)  # a sample: the ends flushed
    expect = log.ends().tolist()
    assert log.last_ends(n) == (expect[-n:] if n else [])
