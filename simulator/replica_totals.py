"""Run-wide figures of a set of engine replicas, summed or maximised over them: what a fleet
(:class:`kvbudget.simulator.fleet.Fleet`) and a disaggregated deployment
(:class:`kvbudget.simulator.disagg.DisaggFleet`) answer the run driver alike, and the timeline
they both merge from the replicas' and the gateway's samples."""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from kvbudget.simulator.exact_sum import to_float

if TYPE_CHECKING:
    import simpy

    from kvbudget.simulator.autoscaler import Autoscaler
    from kvbudget.simulator.engine import Engine, EngineHooks
    from kvbudget.simulator.serving import TimelineRow
    from kvbudget.simulator.sim_config import SimConfig


class ReplicaTotals:
    """The totals over ``replicas`` (the subclass's engines); the subclass starts
    :meth:`_sample_gateway` with ``_gateway_samples`` empty."""

    replicas: list[Engine]
    env: simpy.Environment
    config: SimConfig
    hooks: EngineHooks
    _gateway_samples: list[tuple[int, int]]
    autoscaler: Autoscaler | None = None
    kv_from: int = 0
    """The first of ``replicas`` whose KV the run's KV figures count (the timeline's KV
    columns, :meth:`kv_token_seconds`): all of them, but a disaggregated deployment's decode
    pool alone, the gateway's budget."""

    def kv_token_seconds(self) -> float:
        """The replicas' integrals added exactly, rounded once (``math.fsum`` of all their
        terms)."""
        return to_float(sum(e.kv_token_seconds_exact() for e in self.replicas[self.kv_from:]))

    def _idle(self) -> bool:
        return all(e.idle for e in self.replicas)

    def _sample_gateway(self) -> Generator[simpy.Event, Any, None]:
        """Reserved tokens and gateway waiting at every sample time, until nothing is left
        (a replica's decode run may span others' completions, which change the gateway)."""
        period = self.config.timeline_period_s
        m = 0
        while True:
            due = m * period
            if due > self.env.now:
                yield self.env.timeout(due - self.env.now)
            self._gateway_samples.append(self.hooks.gateway_state())
            m += 1
            if self._idle() and self.hooks.next_external_s() == math.inf:
                return

    @property
    def timeline(self) -> list[TimelineRow]:
        """The replicas' samples summed at each sample time (an idle replica contributes its
        capacity and its preemptions), with the gateway's own samples; with an autoscaler,
        the capacity of the replicas serving then (up or draining). The KV columns are those of
        the replicas from :attr:`kv_from` on."""
        rows = max(len(e.timeline) for e in self.replicas)
        merged: list[TimelineRow] = []
        period = self.config.timeline_period_s
        gw = self._gateway_samples
        for m in range(rows):
            reserved, waiting = gw[min(m, len(gw) - 1)] if gw else (0, 0)
            used = cap = running = preempted = 0
            for k, e in enumerate(self.replicas):
                if m < len(e.timeline):
                    _, u, _, c, run, wait, pre = e.timeline[m]
                else:
                    u, c, run, wait, pre = 0, e.capacity_tokens, 0, 0, e.num_preemptions_total
                if k >= self.kv_from:
                    used += u
                    cap += c
                running += run
                waiting += wait
                preempted += pre
            if self.autoscaler is not None:
                cap = self.autoscaler.at(m * period)[3]
            merged.append((m * period, used, reserved, cap, running, waiting, preempted))
        return merged

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
