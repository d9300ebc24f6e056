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
the simulator's users (``simulator/users.py``) send them; a loop of held conversations under
ticks (AIPerf's multi-turn sessions at a capped rate) in :class:`TurnOrder`'s order, a
continuation turn ready by a tick taking it before a new session ("Priority 1: Queued
continuation turns", the same ``execute_phase``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections.abc import Callable, Sequence

from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.ticks import Ticks
from kvbudget.workloads.turn_order import TurnOrder


class TickedUsers:
    """``loop.num_users`` slots sending ``rows`` at the rate's ticks, each at the first tick
    not yet taken at or after a slot's free time: in their order, or for a loop of held
    conversations (``ClosedLoop.conversations``, AIPerf's session slots; every row of the
    workload) in :class:`TurnOrder`'s, a later turn ready by a tick taking it before a new
    conversation (``TurnOrder.at_tick``) and keeping its slot. ``first_ticks``: the schedule's
    first ticks (the workload's arrivals, on the run's clock); ``clock()``: the run's time;
    ``send(row)``: send it now; ``seed``: the run's (the Poisson ticks' draws)."""

    def __init__(self, loop: ClosedLoop, rows: Sequence[int], *, first_ticks: list[float],
                 clock: Callable[[], float], send: Callable[[int], None], seed: int) -> None:
        if loop.tick_rate_per_s is None:
            raise ValueError("closed_loop: TickedUsers sends a loop paced by ticks "
                             "(tick_rate_per_s)")
        self.ticks = Ticks(first_ticks, loop, seed)
        self.rows = list(rows)
        self.turns = None if loop.conversations is None else TurnOrder(loop.conversations, None)
        if loop.conversations is not None and len(loop.conversations.previous) != len(rows):
            raise ValueError(f"closed_loop.conversations: {len(loop.conversations.previous)} "
                             f"rows for a workload of {len(rows)}")
        self.clock = clock
        self.send = send
        self.free: list[float] = [clock()] * min(loop.num_users, len(self.rows))
        self.changed = asyncio.Event()

    def ended(self, row: int, t: float) -> None:
        """``row`` ended at ``t`` (as its slot's user saw it): the slot is free from then (a
        paced loop has no think time, ``ClosedLoop`` checks it), unless it holds its
        conversation, whose next turn may go its delay later."""
        if self.turns is not None:
            self.turns.ended(row, t)
            if self.turns.holds(row):
                self.changed.set()
                return
        heapq.heappush(self.free, t)
        self.changed.set()

    def _next(self, k: int) -> tuple[float, int]:
        """When the ``k``-th send may go at the earliest and which row (TurnOrder's)."""
        free = self.free[0] if self.free else math.inf
        if self.turns is None:
            return free, self.rows[k]
        return self.turns.next_send(free)

    async def run(self) -> None:
        """Send every row at its tick, on the wall clock."""
        for k in range(len(self.rows)):
            while True:
                t, row = self._next(k)
                tick = self.ticks.first_at_or_after(t)
                now = self.clock()
                if tick <= now:
                    break
                self.changed.clear()  # wait for the tick, or for a slot or turn sooner
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if tick == math.inf else tick - now):
                        await self.changed.wait()
            tick = self.ticks.take(t)
            took_slot = True
            if self.turns is not None:
                row = self.turns.at_tick(tick, row)  # a held turn ready by then goes first
                took_slot = self.turns.sent(row)
            if took_slot:
                heapq.heappop(self.free)
            self.send(row)
