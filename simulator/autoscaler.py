"""The autoscaler of a fleet (``[fleet.autoscale]``, :mod:`kvbudget.simulator.autoscale_config`):
the Kubernetes HPA's rule over a vLLM metric, applied every ``polling_interval_s``, and each
replica's state.

A fleet with an autoscaler holds ``max_replicas`` replica slots (engines), each ``off``,
``booting`` (counted by the Deployment, not yet taking requests), ``up`` (routed to) or
``draining`` (chosen to go: takes no new request, goes ``off`` when its last request has
finished or left). The replicas the HPA counts (``currentReplicas``) are the up and booting
ones; a draining replica still holds its slot (a terminating pod), so up + booting + draining
never exceeds ``max_replicas`` (a scale-up waits for a slot).

At each evaluation (time ``T``):

1. the metric of each up replica, as its Prometheus gauge reads at ``T``
   (:meth:`Autoscaler.metric_total`): the requests running or waiting in its engine, or its
   KV blocks in use over its blocks (vLLM's ``BlockPool.get_usage``: cached blocks nobody
   references count as free), summed; or the fleet's finished requests over the last
   ``rate_window_s``, per second;
2. ``recommendation = ceil(total / target)`` unless ``total / (target * current)`` is within
   ``tolerance`` of 1 (then ``current``), clamped to ``[min_replicas, max_replicas]``;
3. stabilisation: the desired count is at least the lowest recommendation of the last
   ``scale_up_stabilization_s`` and at most the highest of the last
   ``scale_down_stabilization_s`` (the HPA's ``stabilizeRecommendationWithBehaviors``); a
   scale-up adds at most ``max(4, current)``;
4. up: slots that are off start booting, up ``scale_up_delay_s`` later; down: booting replicas
   are cancelled first (the latest first), then up replicas drain (the one up last first).

The fleet reads :meth:`Autoscaler.allowed` when it routes and tells it what arrives at and
leaves a replica (:meth:`added`, :meth:`left`); every figure it reads is current in stepping
and with skip-ahead alike (the engines' running and waiting lists change only at events the
fleet sees; the KV blocks in use through ``Engine.kv_used_blocks_now``), so the two give the
same decisions.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Protocol

import simpy

from kvbudget.policies import Action, Gateway
from kvbudget.simulator.alarm import UrgentTimeout
from kvbudget.simulator.autoscale_config import HPA_SCALE_UP_PODS, AutoscaleConfig, cold_start_s
from kvbudget.simulator.sim_config import ReplicaSetup

__all__ = ["BOOTING", "DRAINING", "OFF", "UP", "Autoscaler", "ScaledReplica", "budget_tokens",
           "make_autoscaler"]

OFF, BOOTING, UP, DRAINING = 0, 1, 2, 3


class ScaledReplica(Protocol):
    """What the autoscaler reads of a replica's engine."""

    running: Any
    num_gpu_blocks: int
    capacity_tokens: int
    kv: Any  # its KVBlocks (reset_prefix_cache)

    @property
    def idle(self) -> bool: ...

    def num_waiting(self) -> int: ...

    def kv_used_blocks_now(self) -> int: ...


class Autoscaler:
    """Replica states over ``len(replicas)`` slots and the SimPy process that evaluates the HPA
    rule. ``on_change()`` is called whenever the set of up replicas changes (the fleet resizes
    its gateway); ``next_external_s()`` (the run's next arrival or timer) and ``busy()``
    (anything queued at a gateway) say when nothing is left to scale for."""

    def __init__(self, env: simpy.Environment, config: AutoscaleConfig,
                 replicas: Sequence[ScaledReplica], delay_s: float, gpus_per_replica: int,
                 *, on_change: Callable[[], None], next_external_s: Callable[[], float],
                 waiting_at: Callable[[int], int]) -> None:
        self.env = env
        self.config = config
        self.replicas = replicas
        self.delay_s = delay_s
        self.gpus_per_replica = gpus_per_replica
        self._on_change = on_change
        self._next_external_s = next_external_s
        self._waiting_at = waiting_at
        n = len(replicas)
        self.state = [UP if r < config.num_initial else OFF for r in range(n)]
        self.up = [r for r in range(n) if self.state[r] == UP]
        # the requests (workload rows) added to each replica and not yet left
        self.in_flight: list[set[int]] = [set() for _ in range(n)]
        self._caps = [e.capacity_tokens for e in replicas]
        self._booted = [0] * n  # a boot's number (a cancelled boot's event does nothing)
        self._up_order: list[int] = list(self.up)  # up replicas, the one up last at the end
        self._recent: deque[tuple[float, int]] = deque()  # (time, recommendation)
        self._finished: deque[float] = deque()  # finish times within the rate window
        self._rate = config.metric == "vllm:request_success"
        # the run's history: (time, up, booting, draining) at each change
        self.history: list[tuple[float, int, int, int, int]] = [
            (0.0, len(self.up), 0, 0, sum(self._caps[r] for r in self.up))]
        self.num_scale_ups = 0
        self.num_scale_downs = 0
        self.process = env.process(self._run())

    # --- what the fleet asks and tells ------------------------------------------------------
    def allowed(self, fitting: list[int]) -> list[int]:
        """Of the replicas ``fitting`` a request, the up ones (all up ones if none fits)."""
        up = self.up
        out = [r for r in fitting if self.state[r] == UP]
        return out or list(up)

    def added(self, r: int, i: int) -> None:
        """Request ``i`` was added to replica ``r``."""
        self.in_flight[r].add(i)

    def left(self, r: int, i: int, *, finished: bool = False) -> None:
        """Request ``i`` left replica ``r`` (``finished``: it completed there)."""
        self.in_flight[r].discard(i)
        if finished and self._rate:  # kept only for the rate (a run's every finish else)
            self._finished.append(self.env.now)
        if self.state[r] == DRAINING:
            self._drained(r)

    def gateway_left(self, r: int) -> None:
        """A request waiting at replica ``r``'s own gateway left it (refused or timed out)."""
        if self.state[r] == DRAINING:
            self._drained(r)

    def _drained(self, r: int) -> None:
        if not self.in_flight[r] and self._waiting_at(r) == 0:
            self.state[r] = OFF
            self._note()

    # --- the evaluation ---------------------------------------------------------------------
    def _run(self) -> Generator[simpy.Event, Any, None]:
        period = self.config.polling_interval_s
        m = 1
        while True:
            due = m * period
            # before any step ending then is committed, stepping or skipping ahead (alarm.py)
            yield UrgentTimeout(self.env, due - self.env.now)
            m += 1
            self.evaluate()
            if self._done():
                return

    def _done(self) -> bool:
        """Nothing left to scale for: nothing in flight, booting or due from outside."""
        return (not any(self.in_flight) and BOOTING not in self.state
                and self._next_external_s() == math.inf
                and not any(self._waiting_at(r) for r in range(len(self.state))))

    def metric_total(self) -> float:
        """The metric summed over the up replicas (the fleet's rate for request_success)."""
        metric = self.config.metric
        now = self.env.now
        if metric == "vllm:request_success":
            window = self.config.rate_window_s
            finished = self._finished
            while finished and finished[0] <= now - window:
                finished.popleft()
            return len(finished) / window
        total = 0.0
        for r in self.up:
            e = self.replicas[r]
            if metric == "vllm:num_requests_running":
                total += len(e.running)
            elif metric == "vllm:num_requests_waiting":
                total += e.num_waiting()
            else:
                total += e.kv_used_blocks_now() / e.num_gpu_blocks
        return total

    def recommend(self, total: float, current: int) -> int:
        """The HPA's rule for an ``AverageValue`` target, clamped to the bounds."""
        c = self.config
        ratio = total / (c.target * current)
        rec = current if abs(ratio - 1.0) <= c.tolerance else math.ceil(total / c.target)
        return min(max(rec, c.min_replicas), c.max_replicas)

    def stabilised(self, rec: int, current: int) -> int:
        """The HPA's stabilisation windows and its default scale-up limit."""
        c = self.config
        now = self.env.now
        recent = self._recent
        recent.append((now, rec))
        longest = max(c.scale_down_stabilization_s, c.scale_up_stabilization_s)
        while recent and recent[0][0] < now - longest:
            recent.popleft()
        up_rec = min(v for t, v in recent if t >= now - c.scale_up_stabilization_s)
        down_rec = max(v for t, v in recent if t >= now - c.scale_down_stabilization_s)
        desired = current
        if desired < up_rec:
            desired = up_rec
        if desired > down_rec:
            desired = down_rec
        return min(desired, current + max(HPA_SCALE_UP_PODS, current))

    def evaluate(self) -> None:
        """One evaluation of the rule at the current time."""
        state = self.state
        current = state.count(UP) + state.count(BOOTING)
        desired = self.stabilised(self.recommend(self.metric_total(), current), current)
        if desired > current:
            self._scale_up(desired - current)
        elif desired < current:
            self._scale_down(current - desired)

    def _scale_up(self, n: int) -> None:
        for r, s in enumerate(self.state):
            if n == 0:
                break
            if s == OFF:
                replica = self.replicas[r]
                if replica.idle:  # a new pod: its prefix cache starts empty
                    replica.kv.reset_prefix_cache()
                self.state[r] = BOOTING
                self._booted[r] += 1
                self.env.process(self._boot(r, self._booted[r]))
                self.num_scale_ups += 1
                n -= 1
        self._note()

    def _boot(self, r: int, number: int) -> Generator[simpy.Event, Any, None]:
        yield UrgentTimeout(self.env, self.delay_s)
        if self.state[r] == BOOTING and self._booted[r] == number:
            self.state[r] = UP
            bisect.insort(self.up, r)
            self._up_order.append(r)
            self._note()
            self._on_change()

    def _scale_down(self, n: int) -> None:
        state = self.state
        booting = [r for r in range(len(state)) if state[r] == BOOTING]
        while n and booting:  # not ready: deleted first (the latest boot first)
            r = max(booting, key=lambda q: (self._booted[q], q))
            booting.remove(r)
            state[r] = OFF
            n -= 1
            self.num_scale_downs += 1
        changed = False
        while n:
            r = self._up_order.pop()  # the one up last
            self.up.remove(r)
            state[r] = DRAINING
            self.num_scale_downs += 1
            changed = True
            n -= 1
            self._drained(r)
        self._note()
        if changed:
            self._on_change()

    def _note(self) -> None:
        s = self.state
        serving = sum(self._caps[r] for r in range(len(s)) if s[r] in (UP, DRAINING))
        row = (self.env.now, s.count(UP), s.count(BOOTING), s.count(DRAINING), serving)
        if row[1:] != self.history[-1][1:]:
            self.history.append(row)

    # --- figures ------------------------------------------------------------------------------
    def at(self, t: float) -> tuple[int, int, int, int]:
        """(up, booting, draining, the KV capacity of those up or draining) at time ``t``: as
        the last change at or before it left them."""
        k = bisect.bisect_right(self.history, (t, math.inf)) - 1
        _, up, booting, draining, capacity = self.history[max(k, 0)]
        return up, booting, draining, capacity

    def timeline_columns(self, times: Sequence[float]) -> dict[str, list[int]]:
        """The timeline's replica columns at the sample ``times``."""
        rows = [self.at(t) for t in times]
        return {"num_replicas_up": [r[0] for r in rows],
                "num_replicas_booting": [r[1] for r in rows],
                "num_replicas_draining": [r[2] for r in rows]}

    def replica_seconds(self, end_s: float) -> float:
        """Replicas held (booting, up or draining) integrated over ``[0, end_s]``."""
        total = 0.0
        hist = self.history
        for k, (t, up, booting, draining, _) in enumerate(hist):
            t_next = hist[k + 1][0] if k + 1 < len(hist) else end_s
            total += (up + booting + draining) * max(0.0, min(t_next, end_s) - t)
        return total

    def capacity_token_seconds(self, start_s: float, end_s: float) -> float:
        """The KV capacity of the replicas serving (up or draining), as the timeline's
        ``kv_capacity_tokens`` counts it, integrated over ``[start_s, end_s]``: what the
        summary's KV fractions are over (``results.metrics.summarize``)."""
        total = 0.0
        hist = self.history
        for k, (t, _, _, _, capacity) in enumerate(hist):
            t_next = hist[k + 1][0] if k + 1 < len(hist) else math.inf
            lo, hi = max(t, start_s), min(t_next, end_s)
            if hi > lo:
                total += capacity * (hi - lo)
        return total

    def stats(self, end_s: float) -> dict[str, object]:
        held = [up + booting + draining for _, up, booting, draining, _ in self.history]
        replica_s = self.replica_seconds(end_s)
        return {
            **self.config.describe(self.delay_s),
            "gpus_per_replica": self.gpus_per_replica,
            "replica_seconds": replica_s,
            "gpu_hours": replica_s * self.gpus_per_replica / 3600.0,
            "peak_replicas": max(held),
            "peak_replicas_up": max(row[1] for row in self.history),
            "num_scale_ups": self.num_scale_ups,
            "num_scale_downs": self.num_scale_downs,
            "end_s": end_s,
        }


class _ScaledFleet(Protocol):
    """What :func:`make_autoscaler` reads of the fleet (``simulator.fleet.Fleet``): its
    replicas, its gateway (one :class:`Gateway`, or a ``FleetGateway`` of one per replica),
    the driver's hooks and gateway calls (``clock``, ``carry_out``)."""

    env: simpy.Environment
    replicas: Any
    gpus: list[str]
    gateway: Any
    hooks: Any
    config: Any
    clock: Callable[[float], float]
    carry_out: Callable[[list[Action], float], None]


def budget_tokens(total: int | None, serving: list[int], caps: list[int]) -> int:
    """A global budget over the replicas of capacities ``serving`` (of the fleet's ``caps``):
    their sum, or the configured ``total``'s share of them."""
    if total is None:
        return sum(serving)
    if len(serving) == len(caps):
        return total
    return max(1, total * sum(serving) // sum(caps))


def _check_guaranteed_pools(fleet: _ScaledFleet, config: AutoscaleConfig) -> None:
    """Refuse, before the run, a global budget whose tiers' guaranteed pools would not fit
    the budget once the fleet has scaled down to ``min_replicas`` (the smallest ones, as the
    autoscaler may drain any): the run would otherwise fail at its first scale-down."""
    gateway = fleet.gateway
    if not isinstance(gateway, Gateway):
        return
    guaranteed = sum(t.guaranteed_tokens for t in gateway.config.tiers)
    caps = [e.capacity_tokens for e in fleet.replicas]
    floor = budget_tokens(fleet.config.gateway_capacity_tokens,
                          sorted(caps)[: config.min_replicas], caps)
    if guaranteed > floor:
        raise ValueError(
            f"fleet.autoscale.min_replicas ({config.min_replicas}): the tiers' guaranteed_tokens "
            f"({guaranteed}) exceed the global budget of {config.min_replicas} replica(s) "
            f"({floor} tokens); raise min_replicas or lower the tiers' guaranteed_tokens")


def make_autoscaler(fleet: _ScaledFleet, config: AutoscaleConfig,
                    setups: Mapping[str, ReplicaSetup]) -> Autoscaler:
    """The autoscaler of ``fleet``, its scale-up delay resolved: as given, or the slowest
    replica GPU's cold start (:func:`~kvbudget.simulator.autoscale_config.cold_start_s`: each
    GPU's shard of the weights over its PCIe link, then ``engine_start_s``)."""
    delay = config.scale_up_delay_s
    used = [setups[g] for g in dict.fromkeys(fleet.gpus)]
    if delay is None:
        delay = max(cold_start_s(s.model.weight_bytes(s.engine.tensor_parallel_size),
                                 s.gpu.pcie_bandwidth_bytes_s, config.engine_start_s)
                    for s in used)
    gpus_per_replica = max(s.engine.tensor_parallel_size for s in used)
    _check_guaranteed_pools(fleet, config)

    def scaled() -> None:
        """The replicas up changed: a global budget is resized to their capacity (what then
        fits is admitted; a drained replica's leases stay until they finish); a replica's own
        gateway keeps its own budget."""
        gateway = fleet.gateway
        if not isinstance(gateway, Gateway):
            return
        caps = [e.capacity_tokens for e in fleet.replicas]
        budget = budget_tokens(fleet.config.gateway_capacity_tokens,
                               [caps[r] for r in scaler.up], caps)
        now = fleet.clock(fleet.env.now)
        fleet.carry_out(gateway.resize(budget, now, max(caps)), now)

    def waiting_at(r: int) -> int:
        """Requests waiting at replica ``r``'s own gateway (none with a global one)."""
        gateway = fleet.gateway
        return 0 if isinstance(gateway, Gateway) else int(gateway.gateways[r].num_waiting())

    scaler = Autoscaler(fleet.env, config, fleet.replicas, delay, gpus_per_replica,
                        on_change=scaled, next_external_s=fleet.hooks.next_external_s,
                        waiting_at=waiting_at)
    return scaler
