"""The engine's waiting queue, one class per ``scheduling_policy`` (after vLLM v1's
``vllm/v1/core/sched/request_queue.py``: the same operations, on workload row numbers).

* :class:`FcfsQueue` serves requests in the order they were added; a preempted request is
  put back at the front (``prepend_request``), so it is the next to start.
* :class:`PriorityQueue` serves the lowest ``(priority, arrival_s)`` first, whatever the
  order they were added in; ``prepend_request`` is ``add_request`` (the key decides).

:func:`make_request_queue` picks one for a policy.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt


class RequestQueue(ABC):
    """The waiting requests (workload rows) in the order the scheduler takes them."""

    @abstractmethod
    def add_request(self, i: int) -> None:
        """Add row ``i`` where the policy puts a new request."""

    @abstractmethod
    def prepend_request(self, i: int) -> None:
        """Put row ``i`` back where a preempted request goes (the front, under FCFS)."""

    @abstractmethod
    def peek_request(self) -> int | None:
        """The row the scheduler would take next, or None when the queue is empty."""

    @abstractmethod
    def pop_request(self) -> int:
        """Take the row :meth:`peek_request` names (the queue is not empty)."""

    @abstractmethod
    def remove_request(self, i: int) -> None:
        """Take row ``i`` out (it is queued)."""

    @abstractmethod
    def columns_changed(
        self,
        priority: npt.NDArray[np.int64],
        arrival_s: npt.NDArray[np.float64],
        order: npt.NDArray[np.int64] | None,
    ) -> None:
        """The engine's per-request columns grew (``order``: the rows' order for ties, when it
        is not the row numbers' own)."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[int]:
        """The rows in the order they would be taken."""


class FcfsQueue(RequestQueue):
    """First come, first served; preempted requests go back to the front."""

    def __init__(self) -> None:
        self._rows: deque[int] = deque()

    def add_request(self, i: int) -> None:
        self._rows.append(i)

    def prepend_request(self, i: int) -> None:
        self._rows.appendleft(i)

    def peek_request(self) -> int | None:
        return self._rows[0] if self._rows else None

    def pop_request(self) -> int:
        return self._rows.popleft()

    def remove_request(self, i: int) -> None:
        self._rows.remove(i)

    def columns_changed(
        self,
        priority: npt.NDArray[np.int64],
        arrival_s: npt.NDArray[np.float64],
        order: npt.NDArray[np.int64] | None,
    ) -> None:
        """Nothing to do: the order of adding decides."""

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)


class PriorityQueue(RequestQueue):
    """Lowest ``(priority, arrival_s)`` first (ties by row, or by ``order``), a binary heap."""

    def __init__(self, priority: npt.NDArray[np.int64], arrival_s: npt.NDArray[np.float64]) -> None:
        self._priority = priority
        self._arrival_s = arrival_s
        self._order: npt.NDArray[np.int64] | None = None
        self._heap: list[tuple[int, float, int, int]] = []

    def columns_changed(
        self,
        priority: npt.NDArray[np.int64],
        arrival_s: npt.NDArray[np.float64],
        order: npt.NDArray[np.int64] | None,
    ) -> None:
        self._priority, self._arrival_s, self._order = priority, arrival_s, order

    def add_request(self, i: int) -> None:
        tie = i if self._order is None else self._order.item(i)
        heapq.heappush(self._heap, (self._priority.item(i), float(self._arrival_s[i]), tie, i))

    def prepend_request(self, i: int) -> None:
        self.add_request(i)  # the key, not the order of adding, decides

    def peek_request(self) -> int | None:
        return self._heap[0][3] if self._heap else None

    def pop_request(self) -> int:
        return heapq.heappop(self._heap)[3]

    def remove_request(self, i: int) -> None:
        self._heap = [e for e in self._heap if e[3] != i]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[int]:
        return iter([e[3] for e in sorted(self._heap)])


def make_request_queue(
    policy: str, priority: npt.NDArray[np.int64], arrival_s: npt.NDArray[np.float64]
) -> RequestQueue:
    """The waiting queue of ``scheduling_policy`` ``policy`` ("fcfs" or "priority")."""
    if policy == "priority":
        return PriorityQueue(priority, arrival_s)
    if policy == "fcfs":
        return FcfsQueue()
    raise ValueError(f"unknown scheduling_policy {policy!r}; known: fcfs, priority")
