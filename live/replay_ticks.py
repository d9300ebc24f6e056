"""The users of a live capped loop paced by its rate's ticks (``ClosedLoop.tick_rate_per_s``:
AIPerf's ``--request-rate R --concurrency C``), on the wall clock.

AIPerf 0.13.0 issues a credit only at its rate's intervals and, at an interval that finds
every session slot taken, issues none and waits for the next one (``RequestRateStrategy.
execute_phase``: ``try_issue_credit`` returns None, "No slot available, retry later"; the
interval schedule is kept, ``next_target_perf += next_interval()``; ai-dynamo/aiperf
``src/aiperf/timing/strategies/request_rate.py``). So a request waiting for a slot goes at the
first tick after the slot frees, not when it frees. The ticks are the simulator's
(:class:`~kvbudget.workloads.ticks.Ticks`: the workload's arrivals first, AIPerf's recorded
issue times, then the rate's, drawn from the run's seed), and the rows go in their order, as
the simulator's users (``simulator/users.py``) send them. A loop of conversations under ticks
(AIPerf's continuation turns, which take a tick before a new session) is not sent here.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections.abc import Callable, Sequence

from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.ticks import Ticks


class TickedUsers:
    """``loop.num_users`` slots sending ``rows`` in their order, each at the first tick not yet
    taken at or after a slot's free time. ``first_ticks``: the schedule's first ticks (the
    workload's arrivals, on the run's clock); ``clock()``: the run's time; ``send(row)``: send
    it now; ``seed``: the run's (the Poisson ticks' draws)."""

    def __init__(self, loop: ClosedLoop, rows: Sequence[int], *, first_ticks: list[float],
                 clock: Callable[[], float], send: Callable[[int], None], seed: int) -> None:
        if loop.tick_rate_per_s is None or loop.conversations is not None:
            raise ValueError("closed_loop: TickedUsers sends a loop paced by ticks "
                             "(tick_rate_per_s) of no conversations")
        self.ticks = Ticks(first_ticks, loop, seed)
        self.rows = list(rows)
        self.clock = clock
        self.send = send
        self.free: list[float] = [clock()] * min(loop.num_users, len(self.rows))
        self.changed = asyncio.Event()

    def ended(self, row: int, t: float) -> None:
        """``row`` ended at ``t`` (as its slot's user saw it): the slot is free from then (a
        paced loop has no think time, ``ClosedLoop`` checks it)."""
        heapq.heappush(self.free, t)
        self.changed.set()

    async def run(self) -> None:
        """Send every row at its tick, on the wall clock."""
        for row in self.rows:
            while True:
                t = self.ticks.first_at_or_after(self.free[0]) if self.free else math.inf
                now = self.clock()
                if t <= now:
                    break
                self.changed.clear()  # wait for the tick, or for a slot to free sooner
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if t == math.inf else t - now):
                        await self.changed.wait()
            self.ticks.take(heapq.heappop(self.free))
            self.send(row)
