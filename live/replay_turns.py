"""The users of a live closed loop whose requests are turns of conversations
(:class:`kvbudget.workloads.closed_loop.Conversations`), on the wall clock.

Which request a free user sends next is :class:`kvbudget.workloads.turn_order.TurnOrder`'s to
say, the object the simulator's users (``simulator/users.py``) ask: a later turn goes only
after the turn before it ended and its delay passed, a free user takes a ready later turn
before a new conversation (GuideLLM 0.8.1), and a held turn (AIPerf's session slot) goes on its
own user when it is ready. This class only keeps the users' free times, draws their think
times in the order they become free (as the simulator does), and sleeps until the next send
or until a request ends (:meth:`TurnUsers.ended`, called as the replay records it).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
from collections.abc import Callable

import numpy as np

from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.turn_order import TurnOrder

HISTORY_SAID = (
    "{n} requests are later turns of conversations, each sent only after the turn before it "
    "returned and its delay passed (the order the simulator's users send them in); each turn's "
    "prompt is its recorded length in token ids of its own, not the conversation so far: the "
    "server's prefix cache serves none of a turn's history, where the real run's server (and "
    "a simulation with prefix caching, which shares the turn before's prompt blocks) could, so "
    "the replay's TTFT of later turns is too high by that prefill")
"""Said in a replay's ``assumed`` when it sent conversations (``{n}``: the later turns)."""


class TurnUsers:
    """``loop.num_users`` users sending ``num_rows`` rows (the workload's, all of them) as
    :class:`TurnOrder` says. ``clock()``: the run's time; ``send(row)``: send it now;
    ``rng``: the think times' generator (the run's seed)."""

    def __init__(self, loop: ClosedLoop, num_rows: int, *, clock: Callable[[], float],
                 send: Callable[[int], None], rng: np.random.Generator) -> None:
        assert loop.conversations is not None
        if len(loop.conversations.previous) != num_rows:
            raise ValueError(f"closed_loop.conversations: {len(loop.conversations.previous)} "
                             f"rows for a workload of {num_rows}")
        self.loop = loop
        self.turns = TurnOrder(loop.conversations, None)
        self.num_rows = num_rows
        self.clock = clock
        self.send = send
        self.rng = rng
        start = clock()
        self.free: list[float] = [start] * min(loop.num_users, num_rows)  # users' free times
        self.num_sent = 0
        self.changed = asyncio.Event()

    def ended(self, row: int, t: float) -> None:
        """``row`` ended at ``t`` (completed, refused or failed, as its user saw it): the turn
        after it may go its delay later; its user is free a think time later, unless it holds
        its conversation."""
        self.turns.ended(row, t)
        if not self.turns.holds(row):
            heapq.heappush(self.free, t + self.loop.think_s(self.rng))
        self.changed.set()

    async def run(self) -> None:
        """Send every row, each when :class:`TurnOrder` says, on the wall clock."""
        while self.num_sent < self.num_rows:
            t, row = self.turns.next_send(self.free[0] if self.free else math.inf)
            now = self.clock()
            if t > now:  # nothing may go yet: wait for its time, or for a request to end
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(None if t == math.inf else t - now):
                        await self.changed.wait()
                continue
            if self.turns.sent(row):  # it took a free user (not a held turn's own)
                heapq.heappop(self.free)
            self.num_sent += 1
            self.send(row)
