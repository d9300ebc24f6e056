"""The ticks of a capped loop paced by its rate (``ClosedLoop.tick_rate_per_s``: AIPerf's
``--request-rate R --concurrency C``), which both executors' users take: the simulator's
(``simulator/users.py``) and the live replay's (``live/replay_ticks.py``)."""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvbudget.workloads.closed_loop import ClosedLoop


class Ticks:
    """The ticks of a paced capped loop (``ClosedLoop.tick_rate_per_s``): the given first ones,
    then ``1 / rate`` apart or a Poisson process of that rate (from ``seed``), drawn as
    needed; :attr:`next` is the first tick a send may still take (the one after the last
    send's). Past the given ones only the first tick at or after a query is drawn (the grid's
    next point; for Poisson, by memorylessness, an exponential gap from the query or the last
    tick), so a long run of busy ticks costs one draw. The time from which a drawn tick was
    drawn is kept (:attr:`drawn_from`): the schedule is known empty only from there, so a
    later query before it (a user free, or a held turn ready, sooner than the send the loop
    waited for) draws the ticks of that gap in turn (the grid's points in it; for Poisson, an
    exponential gap from the query, kept if it falls before), not the tick drawn after it."""

    def __init__(self, first: list[float], loop: ClosedLoop, seed: int) -> None:
        assert loop.tick_rate_per_s is not None
        self.times = sorted(first) or [0.0]
        self.gap_s = 1.0 / loop.tick_rate_per_s
        self.poisson = loop.tick_pattern == "poisson"
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0x71C4]))
        self.next = 0
        self.drawn_from: dict[float, float] = {}  # a drawn tick: the time it was drawn from

    def _draw(self, start: float) -> float:
        """The first tick after ``start`` (the schedule's last tick at or before it)."""
        last = self.times[-1]
        if self.poisson:
            return start + float(self.rng.exponential(self.gap_s))
        return last + max(1, math.ceil((start - last) / self.gap_s - 1e-9)) * self.gap_s

    def _index(self, t: float) -> int:
        j = max(self.next, bisect.bisect_left(self.times, t))
        if j == len(self.times):
            tick = self._draw(max(t, self.times[-1]))
            self.times.append(tick)
            self.drawn_from[tick] = max(t, self.times[-2])
            return j
        start = self.drawn_from.get(self.times[j])
        if start is None or t >= start:
            return j
        # the schedule is not known empty before ``start``: the ticks of [t, start)
        after = j > 0 and self.times[j - 1] >= t  # the gap begins after the tick before
        before = self.times[j - 1] if after else t
        if self.poisson:
            tick = before + float(self.rng.exponential(self.gap_s))
        else:  # the grid's first point in it, counted back from the drawn tick
            back = (self.times[j] - before) / self.gap_s
            k = math.ceil(back - 1e-9) - 1 if after else math.floor(back + 1e-9)
            tick = self.times[j] - k * self.gap_s
        if tick < start and (j == 0 or tick > self.times[j - 1]):
            self.times.insert(j, tick)
            self.drawn_from[tick] = before
        else:
            self.drawn_from[self.times[j]] = before
        return j

    def first_at_or_after(self, t: float) -> float:
        """The first tick not yet taken at or after ``t`` (a slot's free time; inf: none)."""
        return math.inf if t == math.inf else self.times[self._index(t)]

    def take(self, t: float) -> float:
        """A send took the first tick at or after ``t`` (returned): the next send takes a later
        one."""
        j = self._index(t)
        self.next = j + 1
        return self.times[j]
