"""The order of a fleet's replicas' step ends due at one instant, as stepping has it (issue 37
item 4: skip-ahead byte-identical to stepping on the fleet's ties).

Stepping makes each step's end event when the step starts, and SimPy runs the events due at one
instant in the order they were made: of two steps ending at ``t``, the one started earlier ends
first; of two started together, the one whose previous step ended first, a step started from
idle after every step end due then and after those woken before it (:meth:`FleetTies._walk`).
A skip-ahead replica has one event for a decode run (its last step's end); the run driver's
events, URGENT, come before them all (``simulator/alarm.py``). What of that order can be seen:

1. the replicas' events due at one instant (each tells the one gateway of its finishes in turn):
   a replica whose event comes due with another's that comes first waits for it
   (:meth:`FleetTies.turn`);
2. a run's step ending at the instant another replica, ending a step then, adds work to it,
   aborts some or reads its output (through the gateway: ``actor``, kept for the instant, as
   what follows at once, a closed loop's send, follows from that finish): the run's step has
   ended first when it comes first in stepping's order (:meth:`TiedSteps._steps_done`).

Both are checked only where times are equal (8 replicas on conv_n2000_q6, no tie: +0.9 to
+1.0 % instructions). Only a fleet with one gateway for all replicas (a global budget) uses this.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import simpy
from simpy.events import URGENT, Event

from kvbudget.simulator.decode_plan import Floats
from kvbudget.simulator.step_log import StepLog

__all__ = ["FleetTies", "TiedSteps", "tie_replicas"]


class _Urgent(Event):
    """An event that, once fired, SimPy runs before every ordinary event due now (URGENT)."""

    def fire(self) -> None:
        self._ok = True
        self._value = None
        self.env.schedule(self, URGENT)


class FleetTies:
    """The fleet's side: ``replicas[r]`` writes in ``due[r]`` when its next event is due, tells
    :meth:`root` of a step started from idle and waits for :meth:`turn` when its event comes
    due with another's; the fleet sets ``actor`` and ``actor_s`` as a replica's finish is told
    to the gateway."""

    def __init__(self, env: simpy.Environment, replicas: Sequence[TiedSteps]) -> None:
        self.env = env
        self.replicas = replicas
        # the end of each replica's step (or run) whose event has not run; inf
        self.due = [math.inf] * len(replicas)
        # per replica: step number -> (instant, order) of its steps started from idle
        self._roots: list[dict[int, tuple[float, int]]] = [{} for _ in replicas]
        self._num_roots = 0
        self._waiting: dict[int, _Urgent] = {}  # replicas waiting for their turn
        # (a, b) -> (t, whether a's step ending at t ended before b's), the last asked
        self._order: dict[tuple[int, int], tuple[float, bool]] = {}
        # the replica whose finish the gateway was told of last (-1: none), at actor_s
        self.actor = -1
        self.actor_s = -math.inf

    # --- a replica's steps ------------------------------------------------------------------
    def root(self, r: int, step: int) -> None:
        """Replica ``r`` starts its step number ``step`` from idle (woken, or its first)."""
        self._roots[r][step] = (self.env.now, self._num_roots)
        self._num_roots += 1

    def turn(self, r: int, t: float) -> Generator[simpy.Event, Any, None]:
        """Wait until the replicas whose events are due at ``t`` and come before ``r``'s in
        stepping's order have run; then let the next one run after ``r``."""
        while self._first_due(t) != r:
            yield self._waiting.setdefault(r, _Urgent(self.env))
        self.due[r] = math.inf
        if t in self.due:  # the next one runs when r has (before whatever else is due)
            def release(_: object) -> None:  # (if it waits)
                if t in self.due and (waiting := self._waiting.pop(self._first_due(t), None)):
                    waiting.fire()
            after = _Urgent(self.env)
            after.callbacks.append(release)
            after.fire()

    def _first_due(self, t: float) -> int:
        """Of the replicas whose events are due at ``t``, the one first in stepping's order."""
        first = -1
        for q, e in enumerate(self.due):
            if e == t and (first < 0 or self._before(q, first, t)):
                first = q
        return first

    # --- stepping's order -------------------------------------------------------------------
    def before(self, b: int, t: float) -> bool:
        """Whether replica ``b``'s step ending at ``t`` (now) ended, in stepping, before that of
        :attr:`actor`, whose finish acts (or acted last) now. False when none has acted at
        ``t``: the outside world's events come before every step end then."""
        a = self.actor
        if a < 0 or a == b or self.actor_s != t:
            return False
        return self._before(b, a, t)

    def _before(self, a: int, b: int, t: float) -> bool:
        """Whether replica ``a``'s step ending at ``t`` ended before ``b``'s, in stepping; kept
        for the pair (in lockstep they tie at every step: the next walk stops here)."""
        n = 16
        while (first := self._walk(a, b, t, n)) is None:
            n *= 4
        self._order[(a, b)] = (t, first)
        self._order[(b, a)] = (t, not first)
        return first

    def _walk(self, a: int, b: int, t: float, n: int) -> bool | None:
        """:meth:`_before` from each one's last ``n`` step ends (the module docstring's rule,
        walked back, or known: ``_order``); None when they do not decide."""
        ea, ma = self._ends_to(a, t, n)
        eb, mb = self._ends_to(b, t, n)
        ra, rb = self._roots[a], self._roots[b]
        known = self._order.get((a, b))
        i, j = len(ea) - 1, len(eb) - 1
        while True:
            if known is not None and known[0] == ea[i]:  # both steps end at ea[i] == eb[j]
                return known[1]
            root_a, root_b = ra.get(ma - (len(ea) - 1 - i)), rb.get(mb - (len(eb) - 1 - j))
            if (root_a is None and i == 0) or (root_b is None and j == 0):
                return None
            sa = root_a[0] if root_a is not None else ea[i - 1]
            sb = root_b[0] if root_b is not None else eb[j - 1]
            if sa != sb:
                return sa < sb
            if root_a is not None or root_b is not None:
                if root_a is not None and root_b is not None:
                    return root_a[1] < root_b[1]
                return root_b is not None  # a step end makes its step before a wake
            i -= 1
            j -= 1

    def _ends_to(self, q: int, t: float, n: int) -> tuple[list[float], int]:
        """The last ``n`` (or fewer) of replica ``q``'s step ends up to its step ending at
        ``t`` (logged, then the run's or the step's in flight), and that step's number."""
        e = self.replicas[q]
        run = e.run_in_flight()
        if run is not None and run[0] <= t:
            j = bisect.bisect_left(run, t)
            ends: list[float] = np.asarray(run[max(0, j + 1 - n) : j + 1], np.float64).tolist()
            return e.log.last_ends(n - len(ends)) + ends, e.num_steps + j
        ends = e.log.last_ends(n)
        if ends and ends[-1] == t:
            return ends, e.num_steps - 1
        return [*ends[1 - n :], t] if n > 1 else [t], e.num_steps


class TiedSteps:
    """A replica's side of :class:`FleetTies` (a base of ``fast_decode.SkipAheadEngine``)."""

    ties: FleetTies | None = None
    tie_index = -1
    _chained = False  # its next step starts as its last ends (not from idle)
    _due: list[float]  # ties.due, once joined
    # what FleetTies reads of it (Engine's and SkipAheadEngine's)
    log: StepLog
    num_steps: int
    run_in_flight: Callable[[], Floats | None]
    _on_idle: Callable[[], None]  # (Engine's)
    _wait_run: Callable[[float], Generator[simpy.Event, Any, None]]

    def join_ties(self, ties: FleetTies, index: int) -> None:
        """Be replica ``index`` of ``ties``' fleet: a step waits through ``_wait_run``, going
        idle is noted (on this engine alone: one outside such a fleet pays nothing)."""
        self.ties, self.tie_index, self._due = ties, index, ties.due
        self._wait = self._wait_run
        self._on_idle_untied = self._on_idle
        self._on_idle = self._tied_on_idle

    def _tied_on_idle(self) -> None:  # the preset's; the next step starts from idle
        self._chained = False
        self._on_idle_untied()

    def _steps_done(self, ends: Floats, now: float) -> int:
        """How many of a run's step ``ends`` have ended at ``now``: those before it, and the one
        ending now if it ended before the acting replica's (:meth:`FleetTies.before`)."""
        j = bisect.bisect_left(ends, now)
        ties = self.ties
        if ties is not None and j < len(ends) and ends[j] == now and ties.before(
                self.tie_index, now):
            j += 1
        return j


def tie_replicas(env: simpy.Environment, replicas: Sequence[object]) -> FleetTies | None:
    """The :class:`FleetTies` of two or more ``replicas``, each joined, all skip-ahead; else
    None."""
    tied = [e for e in replicas if isinstance(e, TiedSteps)]
    if len(tied) != len(replicas) or len(tied) < 2:
        return None
    ties = FleetTies(env, tied)
    for r, e in enumerate(tied):
        e.join_ties(ties, r)
    return ties
