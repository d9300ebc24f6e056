"""Which request a closed loop's free user sends next when the requests are turns of
conversations (:class:`kvbudget.workloads.closed_loop.Conversations`).

A load tool sends a conversation's next turn only when the turn before it returned (and its
think time passed), and a free user of its takes such a turn before a new conversation:
GuideLLM 0.8.1 ``scheduler/worker.py`` ``_get_next_ready_node`` claims a ready node of a
conversation in flight before it dequeues a new one (0.6-0.7 ``_dequeue_next_conversation``
pops its requeued ``turns_queue`` first). So the requests are no longer sent in the
workload's order: a free user sends the later turn that became ready first, else the next
request of the workload's order that is not a later turn, else waits for a turn to become
ready. With no conversation the order is the workload's, as
:class:`kvbudget.simulator.users.ClosedLoopUsers` sends it without one. When a user holds its conversation (``Conversations.held``, AIPerf's session
slot) a ready turn has its own user, the one that sent the turn before it: it goes when it is
ready whether or not another user is free, and only first turns wait for a free user.

The one rule of both executors: the simulator's users (``simulator/users.py``) and the live
replay's (``live/replay_turns.py``) ask it, each on its own clock.
"""

from __future__ import annotations

import heapq
import math

from kvbudget.workloads.closed_loop import Conversations


class TurnOrder:
    """The requests not yet sent: the first turns (and requests of no conversation) in the
    workload's order, and the later turns whose turn before ended, by when they may go.
    ``not_before_s``: each request's own earliest send (a capped loop's recorded arrival)."""

    def __init__(self, conversations: Conversations, not_before_s: list[float] | None) -> None:
        self.previous = conversations.previous
        self.delay_s = conversations.delay_s
        self.held = conversations.held
        self.following = [-1] * len(self.previous)
        for i, p in enumerate(self.previous):
            if p >= 0:
                self.following[p] = i
        self.first_turns = [i for i, p in enumerate(self.previous) if p < 0]
        self.next_first = 0
        self.not_before_s = not_before_s
        self.ready: list[tuple[float, int]] = []  # (earliest send, row) of later turns

    def _earliest(self, row: int, t: float) -> float:
        return t if self.not_before_s is None else max(t, self.not_before_s[row])

    def next_send(self, free_s: float) -> tuple[float, int]:
        """When a user free at ``free_s`` (inf: none) sends and which row (inf, -1: nothing
        can go until a turn ends): a ready later turn before a first turn due no sooner. A
        held turn's user is its own: it goes when ready, whenever others are free."""
        first = -1
        t_first = math.inf
        if self.next_first < len(self.first_turns):
            first = self.first_turns[self.next_first]
            t_first = self._earliest(first, free_s)
        if self.ready:
            t_turn = self.ready[0][0] if self.held else max(free_s, self.ready[0][0])
            if t_turn <= t_first:
                return t_turn, self.ready[0][1]
        return t_first, first

    def at_tick(self, tick_s: float, row: int) -> int:
        """The row a paced loop sends at ``tick_s`` where :meth:`next_send` gave ``row``: a
        held turn ready by then goes before a first turn (AIPerf 0.13.0's
        ``RequestRateStrategy``: a queued continuation turn takes the tick before a new
        session)."""
        if self.held and self.ready and self.ready[0][0] <= tick_s:
            return self.ready[0][1]
        return row

    def sent(self, row: int) -> bool:
        """``row`` (the one :meth:`next_send` gave) was sent; whether it took a free user (a
        first turn, or any turn not held)."""
        if self.ready and self.ready[0][1] == row:
            heapq.heappop(self.ready)
            return not self.held
        assert self.first_turns[self.next_first] == row
        self.next_first += 1
        return True

    def holds(self, row: int) -> bool:
        """Whether ``row``'s user keeps its conversation after it: a turn follows, held."""
        return self.held and self.following[row] >= 0

    def ended(self, row: int, t: float) -> bool:
        """``row`` ended at ``t`` (as its user saw it; completed, refused or failed: the turn
        after it is sent all the same): its next turn may go its delay later. Whether one
        became ready."""
        nxt = self.following[row]
        if nxt < 0:
            return False
        heapq.heappush(self.ready, (self._earliest(nxt, t + self.delay_s[nxt]), nxt))
        return True
