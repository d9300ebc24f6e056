"""A gateway budget that moves at given times (``SimConfig.gateway_capacity_schedule``): the
budget a live ``kvbudget serve`` held, re-read from its upstreams' ``/metrics`` or reloaded
while it ran (its run directory's timeline ``kv_capacity_tokens``), simulated as it moved
rather than as one budget throughout.

The run's clock applies each move (:meth:`~kvbudget.policies.gateway.Gateway.resize`: what now
fits is admitted, leases held keep their reservations, as the live gateway's
:meth:`~kvbudget.live.serve_admission.Admission.resize` does) before the first gateway call at
or after its time, and rings the gateway's timer at its time while requests wait (a larger
budget admits them then); the policies stay clock-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["BudgetMoves", "check_schedule"]


def check_schedule(schedule: Sequence[tuple[float, int]]) -> None:
    """A ``ValueError`` naming the entry unless ``schedule`` is ``(time_s, budget)`` pairs of
    finite times >= 0 in increasing order and whole budgets >= 1."""
    last = -math.inf
    for k, entry in enumerate(schedule):
        try:
            t, budget = entry
        except (TypeError, ValueError):
            raise ValueError(
                f"gateway_capacity_schedule[{k}] must be (time_s, budget), got {entry!r}"
            ) from None
        if not (isinstance(t, int | float) and math.isfinite(t) and t >= 0 and t > last):
            raise ValueError(
                f"gateway_capacity_schedule[{k}]: time_s must be finite, >= 0 "
                f"and after the one before, got {t!r}"
            )
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise ValueError(
                f"gateway_capacity_schedule[{k}]: budget must be a whole number "
                f">= 1, got {budget!r}"
            )
        last = float(t)


class BudgetMoves:
    """The moves of a schedule not yet applied."""

    def __init__(self, schedule: Sequence[tuple[float, int]]) -> None:
        check_schedule(schedule)
        self._moves = [(float(t), int(b)) for t, b in schedule]
        self._next = 0

    @property
    def next_s(self) -> float:
        """The time of the next move (inf: none is left)."""
        return self._moves[self._next][0] if self._next < len(self._moves) else math.inf

    def due(self, now_s: float) -> int | None:
        """The budget of the last move due by ``now_s`` (those before it are passed: no
        gateway call came between them), ``None`` when none is due."""
        budget = None
        while self._next < len(self._moves) and self._moves[self._next][0] <= now_s:
            budget = self._moves[self._next][1]
            self._next += 1
        return budget
