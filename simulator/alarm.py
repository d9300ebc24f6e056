"""A wake-up on the SimPy clock at the earliest time asked for: the run driver's gateway timer
(admission deadlines, lease expiry) and the clients' events (timeouts, retries) each keep one.

The outside world first at an instant: the run driver's events (open-loop arrivals, the gateway's
timer, the clients' timeouts and retries) are SimPy events of URGENT priority, so they run before
every engine step ending at the same instant, whenever they were made (issue 37 item 4).
SimPy runs events due at one instant by priority, then in the order they were made; stepping
makes each step's end event as the step starts, skip-ahead one event for a whole decode run,
so with ordinary events the order of a step's end and an
event of the outside world made during the run differed between the two (an abort waited a
step, an arrival was counted a step late). With this order, a step ending at the instant of
such an event is the step in flight when it happens (its aborts wait for that step's end, what
it adds joins the next step at the earliest), as vLLM's engine core would see a request that
comes as a step ends, and skip-ahead's runs need no event where stepping has one. The
autoscaler's evaluations and a replica's coming up are urgent too."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import simpy
from simpy.events import URGENT, Timeout


class UrgentTimeout(Timeout):
    """``env.timeout(delay)`` at SimPy's URGENT priority: it runs before every ordinary event
    due at the same instant, whenever that was made. A ``Timeout`` whose fields are set as
    ``Timeout.__init__`` sets them, in its order (the closer to a ``Timeout``, the better the
    interpreter's attribute caches in SimPy's loop hold: base engine on conv_n2000_q6, 760.3 M
    instructions with the arrivals' events plain Timeouts, 765.5 M with these, 768.4 M with a
    plain ``Event`` subclass; docs/performance.md)."""

    def __init__(self, env: simpy.Environment, delay: float) -> None:
        # (not Timeout.__init__: it schedules at NORMAL priority)
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = delay
        self._ok = True
        env.schedule(self, URGENT, delay)


class Alarm:
    """Rings ``ring(at)`` at the earliest time :meth:`arm` was given since it last rang.

    Arming a later time than the one pending does nothing (the owner re-arms its next time when
    it rings); arming an earlier one schedules another timeout. Every timeout scheduled rings,
    a superseded one too (its owner does what is due at that time, often nothing), and the one
    at the pending time clears it. ``at_s`` is the pending time (inf: none), which an owner may
    compare against before calling :meth:`arm`.

    ``urgent``: its timeouts run before every ordinary event due at the same instant
    (:class:`UrgentTimeout`), whenever they were made: before every engine step ending then,
    stepping or skipping ahead alike (see the module docstring). The run driver's gateway
    timer and the clients' alarm are urgent.
    """

    def __init__(self, env: simpy.Environment, ring: Callable[[float], None], *,
                 urgent: bool = False) -> None:
        self.env = env
        self.ring = ring
        self._urgent = urgent
        self.at_s = math.inf

    def arm(self, t: float) -> None:
        """Ring at ``t`` (at once when it is past) unless an earlier time is pending."""
        if t >= self.at_s:  # also when there is nothing to wait for (inf)
            return
        self.at_s = t
        env = self.env
        delay = max(0.0, t - env.now)
        event = UrgentTimeout(env, delay) if self._urgent else env.timeout(delay)
        event.callbacks.append(partial(self._timeout, t))

    def _timeout(self, at: float, _event: object = None) -> None:
        if at == self.at_s:
            self.at_s = math.inf
        self.ring(at)
