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


def test_a_run_spans_a_copy_s_end_up_to_the_step_count_its_request_is_due_at() -> None:
    # a decode run planned at 0.0 (no steps done), its steps ending every 10 ms: the copy
    # ending at 0.025 is polled by the step starting at 0.03 (step 2's end: count 3), so its
    # request is schedulable from count 4 (one boundary later), 6 with async scheduling
    ends = [0.01 * k for k in range(1, 9)]
    for async_scheduling, cut in ((False, 4), (True, 6)):
        n = LoadNotices(async_scheduling)
        n.add(7, 0.025)
        n.add(8, 0.071)
        assert n.first_unseen_s() == 0.025 and n.next_due_s() == math.inf
        assert n.run_cut(ends) == cut
    n = LoadNotices(async_scheduling=False)
    n.add(7, 0.03)  # ends on a boundary: that boundary's step polls it, as ready does
    assert n.run_cut(ends) == 4
    assert LoadNotices(async_scheduling=False).first_unseen_s() == math.inf


def test_a_run_s_boundaries_see_the_copies_as_stepping_s_schedules_do() -> None:
    # the run of 4 steps from count 2 (ends 0.03 .. 0.06): copies ending by its last
    # boundary but one (0.05) are seen where stepping's ready would see them; the one ending
    # in its last step is left to the next schedule's ready, as under stepping
    ends = [0.03, 0.04, 0.05, 0.06]
    run = LoadNotices(async_scheduling=True)
    stepping = LoadNotices(async_scheduling=True)
    for n in (run, stepping):
        n.add(1, 0.035)  # seen at 0.04 (count 4): due at 7
        n.add(2, 0.05)  # seen at 0.05 (count 5): due at 8
        n.add(3, 0.055)  # seen at 0.06 (count 6, the run's end): due at 9
        n.add(4, 0.2)
    run.steps_ran(ends, 6)
    assert run.first_unseen_s() == 0.055 and run.run_end(100, 0) == (7, 0.055)  # due at 7
    for k in range(3, 6):
        assert stepping.ready(0.01 * k, k) == []
    for k in range(6, 10):  # from the run's end on, the same boundaries give the same rows
        assert run.ready(0.01 * k, k) == stepping.ready(0.01 * k, k) == ([] if k < 7 else [k - 6])
    run.steps_ran([0.1], 10)  # one step: no boundary within it
    assert run.first_unseen_s() == 0.2


def test_run_end_cuts_a_run_at_the_first_due_step_and_gives_the_first_unseen_copy() -> None:
    # async scheduling: a copy seen at boundary 0.02 (count 2) is due at count 5; a run
    # planned at count 3 for up to 10 steps then takes 2 (to count 5), and the copy not yet
    # seen (0.07) is its read limit (run_cut); with nothing waiting, the run is left as it is
    n = LoadNotices(async_scheduling=True)
    assert n.run_end(10, 3) == (10, math.inf)
    n.add(1, 0.015)
    n.add(2, 0.07)
    assert n.ready(0.02, 2) == []  # seen, not yet due (nor is the one ending at 0.07)
    assert n.run_end(10, 3) == (2, 0.07)
    assert n.run_end(1, 3) == (1, 0.07)
    assert n.ready(0.04, 4) == [] and n.ready(0.05, 5) == [1]
    assert n.run_end(10, 5) == (10, 0.07)
