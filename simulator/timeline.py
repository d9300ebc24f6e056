"""An engine's timeline: one sample every ``period_s`` seconds of simulated time, taken at the
grid times ``m * period_s`` from the step in progress then (the state it was scheduled with)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

# (time_s, kv_used_tokens, kv_reserved_tokens, kv_capacity_tokens, num_running, num_waiting,
#  num_preemptions)
TimelineRow = tuple[float, int, int, int, int, int, int]


class Timeline:
    """Samples of one engine; ``rows`` in time order."""

    def __init__(self, period_s: float, capacity_tokens: int, block_size: int) -> None:
        if not 0 < period_s < float("inf"):
            raise ValueError(f"timeline_period_s must be > 0 and finite, got {period_s!r}")
        self.period_s = period_s
        self.capacity_tokens = capacity_tokens
        self.block_size = block_size
        self.rows: list[TimelineRow] = []
        self._next = 0  # the grid index of the next sample
        self.next_s = 0.0  # its time, ``_next * period_s``: a sample is due before t > next_s

    def due(self, until: float) -> bool:
        """Whether a sample falls before ``until`` (the engine loop reads ``next_s``)."""
        return self.next_s < until

    def sample_in(self, t0: float, t1: float) -> bool:
        """Whether a sample to come falls in ``[t0, t1)`` (the step from ``t0`` to ``t1``
        gives its figures)."""
        return self.next_s < t1 and self.first_at_or_after(t0) < t1

    def first_at_or_after(self, t: float) -> float:
        """The first sample time to come that is at or after ``t`` (inf for ``t = inf``)."""
        if t == math.inf:
            return t
        period = self.period_s
        m = max(self._next, math.ceil(t / period))
        while m * period < t:  # the grid's own products, as _grid computes them
            m += 1
        while m > self._next and (m - 1) * period >= t:
            m -= 1
        return m * period

    def _grid(self, until: float) -> list[float]:
        """Sample times ``m * period`` in [next sample, until), advancing the next sample."""
        period = self.period_s
        out: list[float] = []
        m = self._next
        while m * period < until:
            out.append(m * period)
            m += 1
        self._next = m
        self.next_s = m * period
        return out

    def sample_step(
        self, end: float, used_blocks: int, reserved: int, counts: tuple[int, int], preempted: int
    ) -> None:
        """Samples up to the end of one step: ``counts`` are the running and waiting (engine
        plus gateway) requests when it was scheduled, ``preempted`` the preemptions so far."""
        running, waiting = counts
        used = used_blocks * self.block_size
        for g in self._grid(end):
            self.rows.append(
                (g, used, reserved, self.capacity_tokens, running, waiting, preempted)
            )

    def sample_steps(
        self,
        ends: Sequence[float] | npt.NDArray[np.float64],
        used_blocks: Sequence[int] | npt.NDArray[np.int64],
        reserved: int,
        counts: tuple[int, int],
        preempted: int,
    ) -> None:
        """Samples up to ``ends[-1]``, the ends of a run of steps with ``used_blocks`` each
        (see :meth:`sample_step`)."""
        grid = self._grid(float(ends[-1]))
        if not grid:
            return
        last = len(ends) - 1
        if not isinstance(ends, np.ndarray) or len(grid) <= 4:
            # bisection, on an array too: a grid is most often a point or two, where a few
            # element reads cost less than numpy's searchsorted and minimum (~1 against ~6 us)
            idx = [min(bisect.bisect_right(ends, g), last) for g in grid]
        else:
            idx = np.minimum(ends.searchsorted(grid, side="right"), last).tolist()
        running, waiting = counts
        for g, s in zip(grid, idx, strict=True):
            self.rows.append(
                (
                    g,
                    int(used_blocks[s]) * self.block_size,
                    reserved,
                    self.capacity_tokens,
                    running,
                    waiting,
                    preempted,
                )
            )

    def sample_idle(self, until: float, reserved: int, gateway_waiting: int, preempted: int,
                    used_blocks: int = 0) -> None:
        """Samples of an engine running no step up to ``until``: ``used_blocks`` held meanwhile
        (by work held outside its queues, a KV load; none without it)."""
        used = used_blocks * self.block_size
        for g in self._grid(until):
            self.rows.append(
                (g, used, reserved, self.capacity_tokens, 0, gateway_waiting, preempted)
            )
