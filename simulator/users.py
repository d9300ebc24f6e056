"""The users of a closed loop (:class:`kvbudget.workloads.closed_loop.ClosedLoop`) in a
simulation: each sends its next request a think time after its last one ended, so the send
times are decided as the run goes."""

from __future__ import annotations

import contextlib
import heapq
import math
from collections.abc import Generator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import simpy

from kvbudget.policies import Request
from kvbudget.simulator.alarm import UrgentTimeout
from kvbudget.workloads import Workload
from kvbudget.workloads.ticks import Ticks
from kvbudget.workloads.turn_order import TurnOrder

if TYPE_CHECKING:
    from kvbudget.workloads.closed_loop import ClosedLoop


class _Driver(Protocol):
    """What the users use of the run driver (:class:`kvbudget.simulator.run._Simulation`)."""

    env: simpy.Environment

    def offer(self, request: Request, t: float) -> None: ...
    def expect_arrival(self, t: float) -> None: ...


class ClosedLoopUsers:
    """A heap of the times of the sends the users have scheduled, and the think times drawn
    from the run's seed (one stream, in the order users become free).

    :attr:`workload` is a copy of the run's workload whose arrival column is written as each
    request is sent (zeros until then; the engine reads the same array), and whose deadlines
    are set at the send, at the workload's own distance from the arrival. The driver runs
    :meth:`arrivals` as its arrival process and calls :meth:`user_free` when a request ends.
    The requests are sent in the workload's order, unless the loop has conversations
    (``ClosedLoop.conversations``): then a later turn goes only after the turn before it
    ended, and :attr:`turns` (:class:`~kvbudget.workloads.turn_order.TurnOrder`) says which
    request a free user sends; a user holding its conversation (``Conversations.held``) is
    not free until its last turn ended, and sends each later turn when it is ready.
    """

    def __init__(self, workload: Workload, loop: ClosedLoop, seed: int) -> None:
        n = len(workload)
        self.loop = loop
        self.deadline_offset_s = (workload.deadline_s - workload.arrival_s).tolist()
        # a capped open loop: the i-th request is not sent before its own arrival
        self.not_before_s = workload.arrival_s.tolist() if loop.not_before_arrival else None
        # a loop paced by ticks (AIPerf's capped rate): the schedule's ticks, the workload's
        # arrivals first and drawn on as needed; the next one a send may take
        self.ticks = Ticks(self.not_before_s or [], loop, seed) \
            if loop.tick_rate_per_s is not None else None
        self.num_sent = 0
        self.turns = None if loop.conversations is None else TurnOrder(
            loop.conversations, None if self.ticks is not None else self.not_before_s)
        self.sent = np.zeros(n, dtype=bool) if self.turns is not None else None
        # zeros until sent (a Workload's arrivals are finite and sorted; sends keep them sorted)
        self.workload = replace(workload, arrival_s=np.zeros(n), deadline_s=np.full(n, np.nan))
        self.n = n
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC105ED]))
        self.pending: list[float] = []
        self.num_scheduled = 0
        self.running = False
        self._process: simpy.Process | None = None
        self._waiting_until: float | None = None  # the send the arrival process waits for
        self._driver: _Driver | None = None

    # --- the users ----------------------------------------------------------------------------
    def think_s(self) -> float:
        return self.loop.think_s(self.rng)

    def user_free(self, t: float, row: int = -1) -> None:
        """A user's request (``row``) ended at ``t`` (as its user sees it): it sends its next
        one a think time later, unless the run is over or every request is scheduled; the
        turn after ``row`` in its conversation may go."""
        if not self.running:
            return
        if self.turns is not None and row >= 0:
            ready = self.turns.ended(row, t)
            if self.turns.holds(row):  # its user keeps the conversation: sends its next turn
                self._announce()
                return
            if ready and self.num_scheduled >= self.n:
                self._announce()  # a user waiting for a turn may send it now
        if self.num_scheduled >= self.n:
            return
        heapq.heappush(self.pending, t + self.think_s())
        self.num_scheduled += 1
        self._announce()

    def next_send_s(self) -> float:
        t = self.pending[0] if self.pending else math.inf
        if self.turns is not None:
            t = self.turns.next_send(t)[0]
            return t if self.ticks is None else self.ticks.first_at_or_after(t)
        if self.ticks is not None:
            return self.ticks.first_at_or_after(t)
        if self.not_before_s is not None and self.num_sent < self.n:
            return max(t, float(self.not_before_s[self.num_sent]))
        return t

    def _pop(self) -> int:
        """The row sent now (the workload's next, or :attr:`turns`'), its user's time taken."""
        i = self.num_sent
        took_user = True
        t = self.pending[0] if self.pending else math.inf
        if self.turns is not None:
            t, i = self.turns.next_send(t)
        tick = t if self.ticks is None else self.ticks.take(t)
        if self.turns is not None:
            assert self.sent is not None
            i = self.turns.at_tick(tick, i)  # at its tick, a held turn ready by then goes first
            took_user = self.turns.sent(i)  # a held turn's user is not among the free
            self.sent[i] = True
        if took_user:
            heapq.heappop(self.pending)
        self.num_sent += 1
        return i

    def _announce(self) -> None:
        """Tell the driver the next send's time (inf: none), and wake the arrival process when
        it waits for a later one (an interrupt: URGENT, as the send's own wait)."""
        assert self._driver is not None
        t = self.next_send_s() if self.num_sent < self.n else math.inf
        until = self.loop.send_until_s
        if until is not None and t > until:  # a time-limited loop sends nothing after it
            t = math.inf
        self._driver.expect_arrival(t)
        if self._waiting_until is not None and t < self._waiting_until:
            assert self._process is not None
            self._waiting_until = None
            self._process.interrupt()

    # --- the arrival process -----------------------------------------------------------------
    def arrivals(self, driver: _Driver) -> Generator[simpy.Event, Any, None]:
        """Send each request at its user's time, in the workload's order. A send is URGENT
        (``alarm.UrgentTimeout``), as an open loop's arrival: it comes before every step
        ending at its instant, whenever either was made, so stepping and skip-ahead order it
        alike."""
        env, w = driver.env, self.workload
        self._driver = driver
        self._process = env.active_process
        self.running = True
        for _ in range(min(self.loop.num_users, self.n)):
            heapq.heappush(self.pending, env.now)
            self.num_scheduled += 1
        self._announce()
        until = self.loop.send_until_s
        while self.num_sent < self.n:
            t = self.next_send_s()
            if until is not None and t > until:
                t = math.inf  # past the loop's time limit: the rest are never sent
            if t > env.now:  # wait for the send time, or for an earlier one (_announce)
                self._waiting_until = t
                with contextlib.suppress(simpy.Interrupt):
                    yield UrgentTimeout(env, t - env.now) if t < math.inf else env.event()
                self._waiting_until = None
                continue
            i = self._pop()
            now_s = max(t, env.now)
            w.arrival_s[i] = now_s
            self._announce()
            offset = self.deadline_offset_s[i]
            driver.offer(Request(i, w.tier_names[w.tier.item(i)], now_s, w.prompt_tokens.item(i),
                                 w.max_output_tokens.item(i),
                                 None if offset != offset else now_s + float(offset),
                                 w.prefix_of(i) if w.prefix_hashes is not None else ()),
                         now_s)
        self.running = False

    def close(self, end_s: float) -> None:
        """The run ended at ``end_s``: the requests never sent (their users' requests never
        ended, or a time-limited loop's users were freed after its limit) "arrive" at the end
        as the users see it: ``end_s``, or the latest send a user had scheduled when that is
        later (a request's user is freed when the client sees it end, after the engine
        finished it: the API server's modelled time, so the engine may go idle before the
        limit while every user is freed after it; ``studies.recorded_replay`` takes a request
        dated after the limit for one the users did not send)."""
        self.running = False
        end_s = max([end_s, *(t for t in self.pending if t < math.inf)])
        if self.sent is not None:
            self.workload.arrival_s[~self.sent] = end_s
        else:
            self.workload.arrival_s[self.num_sent:] = end_s

    def describe(self) -> dict[str, Any]:
        return self.loop.describe()
