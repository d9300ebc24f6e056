"""When a request whose KV loads asynchronously is schedulable again
(simulator/remote_kv.py, ``LoadNotices``): the step boundaries and idle polls vLLM 0.32.0
takes to notice a copy's end, worked by hand."""

from __future__ import annotations

import math

import pytest

from kvbudget.simulator.remote_kv import IDLE_POLL_S, LoadNotices


def test_a_busy_engine_schedules_a_load_one_boundary_after_it_is_polled() -> None:
    # boundaries every 10 ms from 0 (step count k at k x 0.01): the copy ends at 0.025, the
    # boundary at 0.03 (3 steps done) is the first at or after it: its step polls it
    n = LoadNotices(async_scheduling=False)
    n.add(7, 0.025)
    assert n.ready(0.02, 2) == [] and n.next_s(0.02) == 0.025
    assert n.ready(0.03, 3) == []  # seen now: due from step count 4
    assert n.next_s(0.03) == 0.03  # a skip-ahead run is cut to one step meanwhile
    assert n.ready(0.04, 4) == [7] and len(n) == 0 and n.next_s(0.04) == math.inf


def test_with_async_scheduling_it_takes_three_boundaries() -> None:
    n = LoadNotices(async_scheduling=True)
    n.add(1, 0.03)  # ends on a boundary: that boundary's step polls it
    n.ready(0.03, 3)
    assert [n.ready(0.01 * k, k) for k in (4, 5, 6)] == [[], [], [1]]


def test_an_idle_engine_polls_every_millisecond() -> None:
    assert IDLE_POLL_S == 1e-3
    # idle from 5.0: polls at 5.000, 5.001, ...; the copy ending at 5.0025 is seen at 5.003,
    # scheduled one poll later (5.004) without async scheduling, two (5.005) with it
    for async_scheduling, due in ((False, 5.004), (True, 5.005)):
        n = LoadNotices(async_scheduling)
        n.add(3, 5.0025)
        assert n.idle_until_s(5.0, 10) == pytest.approx(due)
        assert n.ready(due - 1e-9, 10) == [] and n.ready(due, 10) == [3]


def test_a_load_seen_by_a_busy_step_then_idle_waits_at_most_the_idle_polls() -> None:
    n = LoadNotices(async_scheduling=True)
    n.add(2, 0.015)
    n.ready(0.02, 2)  # seen: due at step count 5
    # the engine goes idle at 0.03 (3 steps done): two steps were left, two polls at most
    assert n.idle_until_s(0.03, 3) == pytest.approx(0.032)
    n = LoadNotices(async_scheduling=True)
    n.add(2, 0.015)
    n.ready(0.02, 2)
    assert n.idle_until_s(0.04, 4) == pytest.approx(0.041)  # one step left: one poll


def test_rows_go_in_the_order_their_copies_end_and_an_abort_takes_one_out() -> None:
    n = LoadNotices(async_scheduling=False)
    n.add(5, 0.012)
    n.add(4, 0.011)
    n.add(6, 0.013)
    assert n.rows() == [5, 4, 6] and 4 in n
    n.cancel(6)
    n.cancel(6)  # (twice: nothing more)
    n.ready(0.02, 2)
    assert n.ready(0.03, 3) == [4, 5] and 6 not in n and len(n) == 0
