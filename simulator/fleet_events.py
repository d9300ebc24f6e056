"""The events of a fleet a replica's planned decode run must not span (``decode_plan._TIE``):
the arrivals (counted on as the clock moves), the gateway's next timer, the timeline's
samples. A replica's planner asks :meth:`FleetEvents.first_tie`; the fleet asks
:meth:`FleetEvents.arrived` where its replicas' runs are planned to end."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable

import numpy as np
import simpy

from kvbudget.simulator.serving import FloatArray

__all__ = ["FleetEvents"]


class FleetEvents:
    """The fleet's arrivals (``arrival_s``: sorted and fixed for an open loop; a closed loop
    writes them as it sends, ``sorted_arrivals`` False), its gateway's next timer
    (``next_timer_s``) and the timeline's sample period."""

    __slots__ = ("_arrival_s", "_env", "_next_arrival_s", "_next_timer_s", "_num_arrived",
                 "_period_s", "_sorted")

    def __init__(self, env: simpy.Environment, arrival_s: FloatArray, sorted_arrivals: bool,
                 next_timer_s: Callable[[], float | None], period_s: float) -> None:
        self._env = env
        self._arrival_s = arrival_s
        self._sorted = sorted_arrivals
        self._next_timer_s = next_timer_s
        self._period_s = period_s
        # the arrivals due by now, counted on as the clock moves (arrived)
        self._num_arrived = 0
        self._next_arrival_s = float(arrival_s[0]) if len(arrival_s) else math.inf

    def arrived(self) -> int:
        """The arrivals due by now, ``arrival_s.searchsorted(now, side="right")``: counted on
        from the last call where arrivals are sorted and fixed (the clock only moves on), the
        next one's time kept (``_next_arrival_s``)."""
        arrival = self._arrival_s
        now = self._env.now
        if not self._sorted:
            return int(arrival.searchsorted(now, side="right"))
        j = self._num_arrived
        if self._next_arrival_s <= now:
            n = len(arrival)
            j += 1
            while j < n and arrival[j] <= now:
                j += 1
            self._num_arrived = j
            self._next_arrival_s = float(arrival[j]) if j < n else math.inf
        return j

    def first_tie(self, ends: FloatArray | list[float]) -> int:
        """The first of a replica's planned step ``ends`` at which an event of the fleet that
        may touch it is due (an arrival, the gateway's next timer), or the run's last step
        then when it ends on a gateway sample (which reads what a request finishing then
        changes), -1 for none: the run ends before it (``decode_plan._TIE``).

        With sorted arrivals, only those within ``[ends[0], ends[-1]]`` can tie (a few: a
        replica's run spans the arrivals routed to the others), each looked up among the
        ends by bisection (on the array itself: a few element reads, no copy to a list); else
        every end is searched among the arrivals."""
        if not self._sorted:
            return self._first_tie_searched(ends)
        size = len(ends)
        first, last = float(ends[0]), float(ends[-1])
        k = size
        arrival = self._arrival_s
        j, n = self.arrived(), len(arrival)
        a = self._next_arrival_s  # the next arrival, on to the first at or after ends[0]
        while a < first:
            j += 1
            a = float(arrival[j]) if j < n else math.inf
        while a <= last:  # ends and arrivals both sorted: the first tie is the earliest end
            at = bisect.bisect_left(ends, a)
            if ends[at] == a:
                k = at
                break
            j += 1
            a = float(arrival[j]) if j < n else math.inf
        timer = self._next_timer_s()
        if timer is not None and first <= timer <= last:
            at = bisect.bisect_left(ends, timer)
            if ends[at] == timer:
                k = min(k, at)
        return self._tie_step(ends, k)

    def _first_tie_searched(self, ends: FloatArray | list[float]) -> int:
        """:meth:`first_tie` searching each end among the arrivals (a closed loop's arrival
        column, written as requests are sent, is not sorted throughout)."""
        t = np.asarray(ends, np.float64)
        arrival = self._arrival_s
        k = len(t)
        tie = np.zeros(k, np.bool_)
        if len(arrival):
            j = np.minimum(arrival.searchsorted(t), len(arrival) - 1)
            tie = arrival[j] == t
        timer = self._next_timer_s()
        if timer is not None:
            tie |= t == timer
        hit = np.flatnonzero(tie)
        if hit.size:
            k = int(hit[0])
        return self._tie_step(t, k)

    def _tie_step(self, t: FloatArray | list[float], k: int) -> int:
        """:meth:`first_tie` from the first step ``k`` of ``t`` that ends on an event of the
        fleet (``len(t)``: none)."""
        if k < 2:  # the run ends with its first step: nothing to cut
            return k if k < len(t) else -1
        period = self._period_s
        last = float(t[k - 1])
        if round(last / period) * period == last:  # a sample time, m * period
            return k - 1
        return k if k < len(t) else -1
