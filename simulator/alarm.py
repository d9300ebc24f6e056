"""A wake-up on the SimPy clock at the earliest time asked for: the run driver's gateway timer
(admission deadlines, lease expiry) and the clients' events (timeouts, retries) each keep one."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import simpy


class Alarm:
    """Rings ``ring(at)`` at the earliest time :meth:`arm` was given since it last rang.

    Arming a later time than the one pending does nothing (the owner re-arms its next time when
    it rings); arming an earlier one schedules another timeout. Every timeout scheduled rings,
    a superseded one too (its owner does what is due at that time, often nothing), and the one
    at the pending time clears it. ``at_s`` is the pending time (inf: none), which an owner may
    compare against before calling :meth:`arm`.
    """

    def __init__(self, env: simpy.Environment, ring: Callable[[float], None]) -> None:
        self.env = env
        self.ring = ring
        self.at_s = math.inf
        # told of every time armed (a timeout made now, due then): a fleet's replicas
        # (fleet_events.FleetEvents.timer_armed)
        self.on_arm: Callable[[float], None] | None = None

    def arm(self, t: float) -> None:
        """Ring at ``t`` (at once when it is past) unless an earlier time is pending."""
        if t >= self.at_s:  # also when there is nothing to wait for (inf)
            return
        self.at_s = t
        env = self.env
        event = env.timeout(max(0.0, t - env.now))
        event.callbacks.append(partial(self._timeout, t))
        if self.on_arm is not None:
            self.on_arm(t)

    def _timeout(self, at: float, _event: object = None) -> None:
        if at == self.at_s:
            self.at_s = math.inf
        self.ring(at)
