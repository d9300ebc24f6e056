"""Run-wide figures of a set of engine replicas, summed or maximised over them: what a fleet
(:class:`kvbudget.simulator.fleet.Fleet`) and a disaggregated deployment
(:class:`kvbudget.simulator.disagg.DisaggFleet`) answer the run driver alike."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbudget.simulator.engine import Engine


class ReplicaTotals:
    """The totals over ``replicas`` (the subclass's engines)."""

    replicas: list[Engine]

    @property
    def num_preemptions_total(self) -> int:
        return sum(e.num_preemptions_total for e in self.replicas)

    @property
    def t(self) -> float:
        """The latest replica's time."""
        return max(e.t for e in self.replicas)

    @property
    def num_steps(self) -> int:
        return sum(e.num_steps for e in self.replicas)

    @property
    def num_recomputed_tokens(self) -> int:
        return sum(e.num_recomputed_tokens for e in self.replicas)
