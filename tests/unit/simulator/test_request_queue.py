"""The waiting queue classes (``kvbudget.simulator.request_queue``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.simulator.request_queue import FcfsQueue, PriorityQueue, make_request_queue


def test_fcfs_serves_in_order_and_a_preempted_request_first() -> None:
    q = FcfsQueue()
    for i in (4, 2, 7):
        q.add_request(i)
    q.prepend_request(9)
    assert list(q) == [9, 4, 2, 7]
    assert q.peek_request() == 9 and q.pop_request() == 9
    q.remove_request(2)
    assert list(q) == [4, 7] and len(q) == 2
    assert [q.pop_request(), q.pop_request()] == [4, 7]
    assert q.peek_request() is None and len(q) == 0


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=30))
def test_priority_serves_lowest_priority_then_arrival_whatever_the_order_added(
    keys: list[tuple[int, int]],
) -> None:
    prio = np.array([p for p, _ in keys], np.int64)
    arrival = np.array([a for _, a in keys], np.float64)
    q = PriorityQueue(prio, arrival)
    for i in reversed(range(len(keys))):
        (q.prepend_request if i % 2 else q.add_request)(i)
    expected = sorted(range(len(keys)), key=lambda i: (keys[i][0], keys[i][1], i))
    assert list(q) == expected
    q.remove_request(expected[-1])
    popped = [q.pop_request() for _ in range(len(q))]
    assert popped == expected[:-1]


def test_make_request_queue_names_the_policy() -> None:
    z = np.zeros(1, np.int64)
    assert isinstance(make_request_queue("fcfs", z, z * 1.0), FcfsQueue)
    assert isinstance(make_request_queue("priority", z, z * 1.0), PriorityQueue)
    with pytest.raises(ValueError, match="lifo"):
        make_request_queue("lifo", z, z * 1.0)
