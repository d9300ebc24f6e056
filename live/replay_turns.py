"""The users of a live closed loop, on the wall clock: those of a loop whose requests are
turns of conversations (:class:`kvbudget.workloads.closed_loop.Conversations`), and
:func:`users_in_order` for the others.

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
from collections.abc import Callable, Sequence

import numpy as np

from kvbudget.workloads import Workload
from kvbudget.workloads.closed_loop import ClosedLoop, Conversations
from kvbudget.workloads.turn_order import TurnOrder


def history_of(workload: Workload, turns: Conversations) -> dict[int, int]:
    """``{row: its turn before}`` for the later turns whose prompt begins with the whole prompt
    of the turn before, as the workload's prefix hashes say: the row's hashes begin with all
    of the turn before's, which name each of its prompt's whole blocks (a recording's
    conversation so far, ``results/recorded_guidellm_turns.py`` ``conversation_prefix``,
    which the simulator's prefix cache shares). Other later turns share nothing."""
    if workload.prefix_hashes is None:
        return {}
    block = workload.prefix_block_tokens
    prompt = workload.prompt_tokens
    history = {}
    for row, before in enumerate(turns.previous):
        if before < 0:
            continue
        mine, theirs = workload.prefix_of(row), workload.prefix_of(before)
        if (theirs and len(theirs) == int(prompt[before]) // block
                and mine[:len(theirs)] == theirs and prompt[row] >= prompt[before]):
            history[row] = before
    return history


def turns_said(num_later: int, num_history: int) -> str:
    """What a replay of conversations assumed: how it sent ``num_later`` later turns, of which
    ``num_history`` began with the turn before's prompt (:func:`history_of`)."""
    head = (f"{num_later} requests are later turns of conversations, each sent only after the "
            "turn before it returned and its delay passed (in the order the simulator's users "
            "send them)")
    if num_history == num_later:
        return (f"{head}; each later turn's prompt (its recorded length, in token ids) begins "
                "with the whole blocks of the prompt of the turn before, the blocks the "
                "simulation shares, but not with that turn's answer (the server's own text, not "
                "sent back): the server's prefix cache serves the earlier prompts, not the "
                "earlier answers")
    shared = (f"; {num_history} of them begin with the whole blocks of the prompt of the turn "
              "before (those the simulation shares), not with that turn's answer" if num_history
              else "")
    return (f"{head}{shared}; {num_later - num_history} of them: each its recorded length in "
            "token ids of its own, not the conversation so far (the workload's prefix hashes do "
            "not say it holds it), so the server's prefix cache serves none of its history, "
            "where the real run's server could: their TTFT is too high by that prefill")


async def users_in_order(loop: ClosedLoop, rows: Sequence[int], *, clock: Callable[[], float],
                         send: Callable[[int], None],
                         ended: Callable[[int], asyncio.Event], rng: np.random.Generator,
                         not_before_s: Sequence[float] | None = None) -> None:
    """``loop.num_users`` users sending ``rows`` in their order (a loop of no conversation),
    each its next row a think time after its last one ended (``ended(row)``: set when it
    ended; taken before the send). ``not_before_s``: each row's own earliest send (a capped
    loop's arrivals): a user that took a row waits for its time, and for the row taken
    before it to go, so the rows go in their order, each at the later of its time and the
    first user free, as the simulator's users (``simulator/users.py``) send them."""
    todo = iter(rows)  # one shared iterator: each row goes to one user
    sent_before = asyncio.Event()  # the row taken before the one a user takes went
    sent_before.set()

    async def user() -> None:
        nonlocal sent_before
        for i in todo:
            done = ended(i)
            before, sent_before = sent_before, asyncio.Event()
            mine = sent_before
            wait = 0.0 if not_before_s is None else float(not_before_s[i]) - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            await before.wait()
            send(i)
            mine.set()
            await done.wait()
            think = loop.think_s(rng)
            if think > 0:
                await asyncio.sleep(think)

    await asyncio.gather(*(user() for _ in range(min(loop.num_users, len(rows)))))


class TurnUsers:
    """``loop.num_users`` users sending ``num_rows`` rows (the workload's, all of them) as
    :class:`TurnOrder` says. ``clock()``: the run's time; ``send(row)``: send it now;
    ``rng``: the think times' generator (the run's seed); ``not_before_s``: each row's own
    earliest send, on the run's clock (a capped loop's arrivals, an open stage's recorded
    sends; None: none)."""

    def __init__(self, loop: ClosedLoop, num_rows: int, *, clock: Callable[[], float],
                 send: Callable[[int], None], rng: np.random.Generator,
                 not_before_s: list[float] | None = None) -> None:
        assert loop.conversations is not None
        if len(loop.conversations.previous) != num_rows:
            raise ValueError(f"closed_loop.conversations: {len(loop.conversations.previous)} "
                             f"rows for a workload of {num_rows}")
        self.loop = loop
        self.turns = TurnOrder(loop.conversations, not_before_s)
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
