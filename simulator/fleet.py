"""N engine replicas behind one gateway, with a router.

``SimConfig(fleet=FleetConfig(...))`` replaces the single engine by :class:`Fleet`, which looks
like one engine to the driver (``kvbudget.simulator.run``; both implement
:class:`kvbudget.simulator.serving.ServingEngine`): it routes each admitted request to a replica
and merges their records, timelines and figures. Replicas may run different GPU presets
(``gpus``); each gets its KV capacity from its own preset (or ``EngineConfig.num_gpu_blocks``
for all) and its step times from its own roofline (an explicit ``SimConfig.cost_model`` applies
to the replicas on ``SimConfig.gpu``).

The token budget (``budget``):

* ``"global"``: one gateway whose capacity is the sum of the replicas' KV capacities; a request
  is routed when it is admitted (a gateway in front of a load-balanced pool);
* ``"per_replica"``: one gateway per replica over that replica's capacity, each with its own
  copy of the policy (its own learning state); a request is routed when it arrives and waits at
  that replica's gateway (N independent gateway+engine deployments behind a load balancer).

Routers (``router``), deterministic:

* ``"round_robin"``: replicas in turn;
* ``"least_tokens"``: the replica with the fewest outstanding tokens (``prompt +
  max_output_tokens`` of the requests routed to it and not finished) per token of its KV
  capacity, ties to the lowest index;
* ``"prefix_affinity"``: the replica that last took the longest leading run of the request's
  prefix hashes (so its prefix cache likely holds them), unless the replicas' in-flight request
  counts are imbalanced, that is the busiest holds more than ``balance_abs_threshold`` (64) more
  than the idlest and more than ``balance_rel_threshold`` (1.5) times it (the defaults of
  SGLang's cache-aware router, ``sgl-router --policy cache_aware``); no match or imbalance falls
  back to ``least_tokens``.

Timeline rows sum the replicas' samples at each sample time (an idle replica contributes its
capacity and nothing else); the gateway columns (reserved tokens, gateway waiting) are sampled
at the sample times themselves by a sampler of the gateway (a replica's decode run may span
other replicas' completions, which change the shared gateway).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import simpy

from kvbudget.policies import (
    Action,
    BasePolicy,
    EngineProbe,
    Gateway,
    GatewayConfig,
    Reject,
    Request,
)
from kvbudget.results.metrics import merge_gap_rows
from kvbudget.simulator.autoscaler import Autoscaler, budget_tokens, make_autoscaler
from kvbudget.simulator.engine import Engine, EngineHooks, FloatArray, IntArray, RequestColumns
from kvbudget.simulator.engine_variants import ENGINE_CLASSES, make_engine
from kvbudget.simulator.fast_decode import SkipAheadEngine
from kvbudget.simulator.fleet_events import FleetEvents
from kvbudget.simulator.fleet_ties import tie_replicas
from kvbudget.simulator.replica_totals import ReplicaTotals
from kvbudget.simulator.served import replica_entry
from kvbudget.simulator.serving import RequestFigures
from kvbudget.simulator.sim_config import (
    ROUTERS,
    FleetConfig,
    ReplicaSetup,
    RouterName,
    SimConfig,
)
from kvbudget.simulator.spec_decode import fleet_stats
from kvbudget.workloads import Workload

__all__ = ["ROUTERS", "Fleet", "FleetConfig", "FleetGateway", "Router", "RouterName"]
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5

class Router:
    """Chooses a replica for a request; told when requests leave a replica. Its counts are
    Python numbers (a handful of replicas: cheaper than arrays, the same values), kept only by
    the routers that read them (not round robin); ``load[r]`` is
    ``outstanding[r] / capacity[r]``, worked out when ``outstanding[r]`` changes."""

    def __init__(
        self,
        name: RouterName,
        capacity_tokens: list[int],
        workload: Workload,
        row_tokens: list[int] | None = None,
    ) -> None:
        self.name = name
        self.capacity = [float(c) for c in capacity_tokens]
        self.outstanding = [0] * len(capacity_tokens)
        self.load = [0.0] * len(capacity_tokens)
        self.in_flight = [0] * len(capacity_tokens)
        self.w = workload
        # the tokens each row counts for on its replica (its prompt and max output), made once
        # (or given: a disaggregated deployment's two pools share one list)
        self.row_tokens: list[int] = row_tokens if row_tokens is not None else (
            workload.prompt_tokens.astype(np.int64) + workload.max_output_tokens).tolist()
        self._counts = name != "round_robin"
        self._next = 0
        self._owner: dict[int, int] = {}

    def _count(self, r: int, tokens: int, requests: int) -> None:
        out = self.outstanding[r] = self.outstanding[r] + tokens
        self.load[r] = out / self.capacity[r]
        self.in_flight[r] += requests

    def _least_tokens(self, allowed: list[int]) -> int:
        """The least loaded of ``allowed``, the first of equals (as ``argmin``)."""
        loads = self.load  # a loop: min(allowed, key=...) costs ~2,000 instructions more
        best = allowed[0]
        least = loads[best]
        for r in allowed:
            if loads[r] < least:
                best, least = r, loads[r]
        return best

    def route(self, i: int, allowed: list[int]) -> int:
        """The replica for workload row ``i`` among ``allowed`` (non-empty), and count it there."""
        if self.name == "round_robin":
            n = len(self.capacity)
            for step in range(n):
                r = (self._next + step) % n
                if r in allowed:
                    break
            self._next = (r + 1) % n
        elif self.name == "least_tokens":
            r = self._least_tokens(allowed)
        else:
            r = self._prefix_affinity(i, allowed)
        if self._counts:
            self._count(r, self.row_tokens[i], 1)
        return r

    def _prefix_affinity(self, i: int, allowed: list[int]) -> int:
        hashes = self.w.prefix_of(i)
        if not hashes:  # nothing to follow (and nothing to note)
            return self._least_tokens(allowed)
        loads = [self.in_flight[r] for r in allowed]
        busiest, idlest = max(loads), min(loads)
        imbalanced = (
            busiest - idlest > BALANCE_ABS_THRESHOLD and busiest > BALANCE_REL_THRESHOLD * idlest
        )
        best = -1
        if not imbalanced:
            for h in hashes:
                owner = self._owner.get(h)
                if owner is None or owner not in allowed:
                    break
                best = owner
        r = best if best >= 0 else self._least_tokens(allowed)
        for h in hashes:
            self._owner[h] = r
        return r

    def arrivals_until(self, r: int) -> int:
        """About how many arrivals from now the next one routed to replica ``r`` is (0: the
        next): exact for round robin when every replica is allowed; for the others, four
        times the replicas less loaded than ``r`` now (the next arrivals likely go to those
        first). A run planned too short costs another run, one planned too long only an
        interruption (an arrival routed to the replica ends it with the step in progress,
        :meth:`Engine.add_request`), about a third of that, so the guess leans long: measured
        on conv_n2000_q6, least tokens, 8 replicas, four times took 6 % fewer instructions
        than twice, eight times 5 %; planning past every arrival (unless ``r`` is the least
        loaded) to an interruption 8 %, but it moved the power-of-two grid cases with a global
        budget and 24 blocks that differed from stepping (then a known limitation, since made
        exact: ``fleet_ties``) from 109 to 110, while four and eight times left 109."""
        if self.name == "round_robin":
            return (r - self._next) % len(self.capacity)
        loads = self.load
        load = loads[r]
        below = 0
        for q, other in enumerate(loads):
            if other < load or (q < r and other == load):
                below += 1
        return 4 * below

    def leave(self, i: int, r: int) -> None:
        if self._counts:
            self._count(r, -self.row_tokens[i], -1)


class _Budget:
    """The summed ledger figure of per-replica gateways that the driver reads."""

    def __init__(self, gateways: list[Gateway]) -> None:
        self._gateways = gateways

    @property
    def reserved_tokens(self) -> int:
        return sum(g.budget.reserved_tokens for g in self._gateways)


class FleetGateway:
    """One gateway per replica behind the router: the interface of :class:`policies.Gateway`
    that the driver uses, routing each request at arrival."""

    def __init__(self, fleet: Fleet, gateways: list[Gateway]) -> None:
        self._fleet = fleet
        self.gateways = gateways
        self.budget = _Budget(gateways)
        self._of: dict[int, int] = {}

    @property
    def now_s(self) -> float:
        return max(g.now_s for g in self.gateways)

    def attach_engine(self, engine: EngineProbe) -> None:
        for g in self.gateways:
            g.attach_engine(engine)

    def num_waiting(self, tier: str | None = None) -> int:
        return sum(g.num_waiting(tier) for g in self.gateways)

    def next_timer_s(self) -> float | None:
        times = [t for g in self.gateways if (t := g.next_timer_s()) is not None]
        return min(times) if times else None

    def arrive(self, request: Request, now_s: float) -> list[Action]:
        i = request.request_id
        r = self._fleet.route(i)
        self._of[i] = r
        return self._settle(self.gateways[r].arrive(request, now_s))

    def finish(self, request_id: int, output_tokens: int, now_s: float) -> list[Action]:
        g = self.gateways[self._of[request_id]]
        return self._settle(g.finish(request_id, output_tokens, now_s))

    def fail(self, request_id: int, now_s: float) -> list[Action]:
        self._fleet.left(request_id)
        return self._settle(self.gateways[self._of[request_id]].fail(request_id, now_s))

    def cancel(self, request_id: int, now_s: float) -> list[Action]:
        self._fleet.left(request_id)
        return self._settle(self.gateways[self._of[request_id]].cancel(request_id, now_s))

    def engine_preempted(self, request_id: int, now_s: float) -> None:
        self.gateways[self._of[request_id]].engine_preempted(request_id, now_s)

    def advance(self, now_s: float) -> list[Action]:
        out: list[Action] = []
        for g in self.gateways:
            out.extend(g.advance(now_s))
        return self._settle(out)

    def _settle(self, actions: list[Action]) -> list[Action]:
        """Requests refused at their replica's gateway leave the router's counts."""
        for a in actions:
            if isinstance(a, Reject):
                self._fleet.left(a.request.request_id)
        return actions


_LOCAL_COLUMNS = {"prompt_tokens": np.int64, "output_tokens": np.int64,
                  "max_output_tokens": np.int64, "arrival_s": np.float64, "priority": np.int64,
                  "order": np.int64}


_MERGED: dict[str, tuple[float, Callable[..., Any], type[np.generic]]] = {
    "first_token_s": (math.nan, np.fmin, np.float64),  # the first a caller saw, anywhere
    "finished_s": (math.nan, np.fmin, np.float64),
    "num_preemptions": (0, np.add, np.int64),
    "recomputed_tokens": (0, np.add, np.int64),
}
"""The replicas' per-row arrays a fleet merges by workload row: the value of a row no replica
took, how one replica's value joins the others', and the merged array's dtype."""


class _ReplicaRows:
    """The rows routed to one replica, numbered 0, 1, ... in the order they first reached it:
    the replica's own columns (``order`` is each one's workload row), grown by a quarter
    (64 rows at least)."""

    def __init__(self) -> None:
        self.n = 0
        self.columns: dict[str, Any] = {k: np.zeros(8, t) for k, t in _LOCAL_COLUMNS.items()}

    @property
    def rows(self) -> IntArray:
        """The workload row of each of the replica's rows."""
        return np.asarray(self.columns["order"][: self.n], np.int64)

    def add(self, engine: Engine, w: Workload, priority: IntArray, i: int) -> int:
        """Give workload row ``i`` the replica's next row number (growing the replica's
        columns, and its engine's state, when full)."""
        cols = self.columns
        j = self.n
        if j == len(cols["order"]):
            # by a quarter (less idle room than doubling, few more copies), and by at least
            # 64 rows: a replica's first thousand rows took some twenty copies of every column
            size = j + max(j // 4, 64)
            for k, old in list(cols.items()):
                new = np.zeros(size, old.dtype)
                new[:j] = old
                cols[k] = new
            engine.grow_rows(cols)
        cols["prompt_tokens"][j] = w.prompt_tokens[i]
        cols["output_tokens"][j] = w.output_tokens[i]
        cols["max_output_tokens"][j] = w.max_output_tokens[i]
        cols["arrival_s"][j] = w.arrival_s[i]
        cols["priority"][j] = priority[i]
        cols["order"][j] = i
        self.n = j + 1
        return j

    def drop(self) -> None:
        """Let the columns go (the run is over and its figures read)."""
        self.columns = {k: np.zeros(0, v.dtype) for k, v in self.columns.items()}
        self.n = 0


def _join_dropping(parts: list[tuple[IntArray, FloatArray, IntArray]]
                   ) -> tuple[IntArray, FloatArray, IntArray]:
    """The parts' columns end to end, each part dropped once copied: the joined arrays'
    pages are written as the parts go (a large ``np.empty`` takes no memory until written),
    so the parts and their join are not held whole at once (a long fleet run's gap rows run
    to hundreds of MB)."""
    total = sum(len(p[1]) for p in parts)
    out = (np.empty(total, np.int64), np.empty(total, np.float64), np.empty(total, np.int64))
    lo = 0
    parts.reverse()
    while parts:
        part = parts.pop()
        hi = lo + len(part[1])
        for column, values in zip(out, part, strict=True):
            column[lo:hi] = values
        del part
        lo = hi
    return out


class Fleet(ReplicaTotals):
    """Replicas that look like one engine to the driver.

    Each replica's engine is indexed by the rows routed to it (:class:`_ReplicaRows`; its
    per-request arrays hold those rows only), mapped back to workload rows for the records;
    with prefix caching, or a preset whose per-request arrays cannot grow
    (``Engine.rows_grow``), by workload rows.
    """

    def __init__(
        self,
        env: simpy.Environment,
        workload: Workload,
        priority: IntArray,
        config: SimConfig,
        hooks: EngineHooks,
        policy: BasePolicy,
        *,
        gateway_config: Callable[[int, int | None], GatewayConfig],
        setup: ReplicaSetup | None = None,
    ) -> None:
        assert config.fleet is not None
        self.fleet = config.fleet
        self.hooks = hooks
        self.config = config
        n = len(workload)
        self.w = workload
        self._priority = priority
        self.replicas: list[Engine] = []
        self.gpus: list[str] = []
        self.served: list[dict[str, object]] = []  # each replica's GPU and caps, as resolved
        # an open-loop workload's arrivals are sorted and fixed; a closed loop writes them
        self.events = FleetEvents(env, workload.arrival_s, config.closed_loop is None,
                                  self._next_timer_s, config.timeline_period_s)
        gpus = [self.fleet.gpu_of(r, config.gpu) for r in range(self.fleet.num_slots)]
        setups = self._setups(config, gpus, setup)
        self.setups = [setups[g] for g in gpus]  # each replica's, as resolved on its GPU
        self._compact = all(
            ENGINE_CLASSES[s.engine.name].rows_grow
            and not (s.engine.enable_prefix_caching and workload.prefix_hashes is not None)
            for s in setups.values()
        )
        self._local: list[_ReplicaRows] = [_ReplicaRows() for _ in gpus]
        # row -> the first replica it reached and its number there; rows that reached more
        # than one (revoked, then admitted again elsewhere): (row, replica) -> number
        self._first_replica = np.full(n if self._compact else 0, -1, np.int32)
        self._first_local = np.zeros(n if self._compact else 0, np.int32)
        self._more_local: dict[tuple[int, int], int] = {}
        for r, gpu in enumerate(gpus):
            self._add_replica(env, r, gpu, setups[gpu])
        caps = [e.capacity_tokens for e in self.replicas]
        self.capacity_tokens = sum(caps)
        self.num_gpu_blocks = sum(e.num_gpu_blocks for e in self.replicas)
        self.block_size = self.replicas[-1].block_size
        self.router = Router(self.fleet.router, caps, workload)
        # replicas that refuse the same requests (Engine.fits: max_model_len, the watermark)
        self._alike = len({(e.max_model_len, e.block_size, e.num_gpu_blocks - e.watermark_blocks)
                           for e in self.replicas}) == 1
        self._everyone = list(range(len(self.replicas)))
        self._fits_row, self._fits_ok = -1, False  # the last row _fits_alike asked about
        self.replica_of = np.full(n, -1, np.int64)
        self.env = env
        self._arrival_s = workload.arrival_s
        self._gateway_samples: list[tuple[int, int]] = []
        env.process(self._sample_gateway())
        self.autoscaler: Autoscaler | None = None
        self.clock: Callable[[float], float] = float  # the driver's (an autoscaler's resizes)
        self.carry_out: Callable[[list[Action], float], None] = lambda actions, now: None
        self.gateway: Gateway | FleetGateway = self._make_gateway(config, policy, gateway_config, caps)
        if self.fleet.autoscale is not None:
            self.autoscaler = make_autoscaler(self, self.fleet.autoscale, setups)
        # one gateway: a replica's step end may act on another's at the same instant
        self.ties = None if self._global is None else tie_replicas(env, self.replicas)

    def _make_gateway(self, config: SimConfig, policy: BasePolicy,
                      gateway_config: Callable[[int, int | None], GatewayConfig],
                      caps: list[int]) -> Gateway | FleetGateway:
        """One gateway for the fleet (a global budget, kept as ``_global`` too) or one per
        replica, each with its share of the budget (``FleetGateway``)."""
        if self.fleet.budget == "global":
            # a request runs on one replica: a reservation beyond the largest replica's
            # capacity could never run, though it fits the fleet's budget (RequestTooLarge,
            # as a single engine's gateway refuses it)
            self._global: Gateway | None = Gateway(
                gateway_config(budget_tokens(config.gateway_capacity_tokens,
                                             caps[: self.fleet.num_initial], caps), max(caps)),
                policy,
            )
            return self._global
        self._global = None
        total = config.gateway_capacity_tokens
        shares = [cap if total is None else max(1, total * cap // self.capacity_tokens)
                  for cap in caps]
        return FleetGateway(
            self, [Gateway(gateway_config(s, None), copy.deepcopy(policy)) for s in shares])

    def _add_replica(self, env: simpy.Environment, r: int, gpu: str,
                     on_gpu: ReplicaSetup) -> None:
        """Replica ``r``'s engine on ``gpu`` (its resolved configuration ``on_gpu``), with hooks
        that map its rows back to the workload's."""
        self.gpus.append(gpu)
        self.served.append(replica_entry(gpu, on_gpu, bool(self.fleet.gpus)))
        if self._compact:  # the replica's own rows (without prefix hashes)
            local = self._local[r].columns
            columns = RequestColumns(**{k: local[k] for k in _LOCAL_COLUMNS if k != "order"})
        else:
            columns = RequestColumns.of(self.w, self._priority)
        replica_hooks = EngineHooks(
            on_finish=partial(self._on_finish, r),
            on_preempt=partial(self._on_preempt, r),
            next_external_s=partial(self._next_touch_s, r),
            gateway_state=partial(self._gateway_state, r),
        )
        self.replicas.append(make_engine(env, on_gpu, columns, replica_hooks,
                                         timeline_period_s=self.config.timeline_period_s))
        if self._compact:
            self.replicas[r].grow_rows(self._local[r].columns)  # the ties' order
        replica = self.replicas[r]
        if isinstance(replica, SkipAheadEngine):  # runs span the fleet's events (first_tie)
            replica.planner.tie = self.events.first_tie

    # --- routing -------------------------------------------------------------------------------
    def _fits(self, e: Engine, i: int) -> bool:
        """Whether workload row ``i`` could ever run on replica ``e`` (:meth:`Engine.fits`)."""
        return e.fits_tokens(self.w.prompt_tokens.item(i), self.w.output_tokens.item(i))

    def _fits_alike(self, i: int) -> bool:
        """:meth:`_fits` of row ``i`` when every replica fits the same requests: one replica
        asked, once a row (the driver asks :meth:`fits`, then the router :meth:`_allowed`)."""
        if i != self._fits_row:
            self._fits_row = i
            self._fits_ok = self._fits(self.replicas[0], i)
        return self._fits_ok

    def _allowed(self, i: int) -> list[int]:
        if self._alike:  # every replica fits the same requests: ask one
            return self._everyone if self._fits_alike(i) else [0]
        return [r for r, e in enumerate(self.replicas) if self._fits(e, i)] or [
            int(np.argmax([e.max_model_len for e in self.replicas]))
        ]

    def route(self, i: int) -> int:
        allowed = self._allowed(i)
        if self.autoscaler is not None:  # the replicas up
            allowed = self.autoscaler.allowed(allowed)
        r = self.router.route(i, allowed)
        self.replica_of[i] = r
        return r

    def left(self, i: int) -> None:
        r = self.replica_of.item(i)
        if r >= 0 and self._global is None:
            self.router.leave(i, r)
            if self.autoscaler is not None:
                self.autoscaler.gateway_left(r)

    # --- each replica's own rows ----------------------------------------------------------------
    def _row_on(self, i: int, r: int, *, add: bool = False) -> int:
        """Replica ``r``'s number for workload row ``i`` (``add``: give it one if it has none;
        else -1 then). Workload rows themselves where replicas are indexed by them."""
        if not self._compact:
            return i
        first = self._first_replica.item(i)
        if first == r:
            return self._first_local.item(i)
        if first >= 0:
            j = self._more_local.get((i, r), -1)
            if j < 0 and add:
                j = self._more_local[(i, r)] = self._new_row(i, r)
            return j
        if not add:
            return -1
        j = self._new_row(i, r)
        self._first_replica[i] = r
        self._first_local[i] = j
        return j

    def _new_row(self, i: int, r: int) -> int:
        return self._local[r].add(self.replicas[r], self.w, self._priority, i)

    def _workload_row(self, r: int, j: int) -> int:
        """The workload row of replica ``r``'s row ``j``."""
        return self._local[r].columns["order"].item(j) if self._compact else j

    # --- the engine interface the driver uses ----------------------------------------------------
    def fits(self, i: int) -> bool:
        if self._global is None:
            return self._fits(self.replicas[self.replica_of.item(i)], i)
        if self._alike:
            return self._fits_alike(i)
        return any(self._fits(e, i) for e in self.replicas)

    def add_request(self, i: int) -> str:
        r = self.route(i) if self._global is not None else self.replica_of.item(i)
        why = self.replicas[r].add_request(self._row_on(i, r, add=True))
        if why and self._global is not None:  # refused by the replica's own queue caps
            self.router.leave(i, r)
        if not why and self.autoscaler is not None:
            self.autoscaler.added(r, i)
        return why

    def abort_request(self, i: int) -> None:
        r = self.replica_of.item(i)
        self.replicas[r].abort_request(self._row_on(i, r))
        if self._global is not None:
            self.router.leave(i, r)
        if self.autoscaler is not None:
            self.autoscaler.left(r, i)

    def forget_first_token(self, i: int) -> None:
        """A new attempt of row ``i`` starts: forget the first token of earlier ones, on every
        replica it reached (``simulator.clients``)."""
        for r, e in enumerate(self.replicas):
            j = self._row_on(i, r)
            if j >= 0:
                e.forget_first_token(j)

    def _on_finish(self, r: int, j: int, t: float) -> None:
        i = self._workload_row(r, j)
        self.router.leave(i, r)
        ties = self.ties
        if ties is not None:
            # what the gateway does now, and what follows from it at this instant (a user's
            # next send), r's step end does (fleet_ties.FleetTies.before)
            ties.actor, ties.actor_s = r, t
        self.hooks.on_finish(i, t)
        if self.autoscaler is not None:
            self.autoscaler.left(r, i, finished=True)

    def _on_preempt(self, r: int, j: int, t: float) -> None:
        self.hooks.on_preempt(self._workload_row(r, j), t)

    def _next_touch_s(self, r: int) -> float:
        """Where replica ``r``'s decode runs are planned to end (its ``next_external_s``): about
        when the next request is routed to it. Only a plan: whatever the fleet does to a
        replica comes through :meth:`Engine.add_request` or :meth:`Engine.abort_request`, which
        end a run in progress with the step in progress (as stepping would have), and what the
        gateway reads of it mid-run (output tokens) counts the steps that have ended; so a run
        need not be cut at every arrival of the fleet, and one planned too long or too short
        gives the same results."""
        t_next = self.hooks.next_external_s()
        if t_next == math.inf:
            return t_next
        arrival = self._arrival_s
        j = self.events.arrived() + self.router.arrivals_until(r)
        return max(t_next, float(arrival[j])) if j < len(arrival) else math.inf

    def _next_timer_s(self) -> float | None:
        return self.gateway.next_timer_s()

    @staticmethod
    def _setups(
        config: SimConfig, gpus: list[str], setup: ReplicaSetup | None
    ) -> dict[str, ReplicaSetup]:
        """Each replica GPU's configuration, resolved once per GPU: the run's own ``setup``
        (resolved without KV blocks, on the config's GPU) with the blocks added, or
        :meth:`SimConfig.replica_setup` for another GPU."""
        out: dict[str, ReplicaSetup] = {}
        for gpu in dict.fromkeys(gpus):
            if setup is not None and gpu == config.gpu:
                blocks = setup.num_gpu_blocks
                if blocks is None:
                    blocks = config.resolved_num_gpu_blocks(gpu)
                out[gpu] = replace(setup, num_gpu_blocks=blocks)
            else:
                out[gpu] = config.replica_setup(gpu)
        return out

    def _gateway_state(self, r: int) -> tuple[int, int]:
        return 0, 0  # the gateway is sampled on its own (_sample_gateway)

    def output_tokens_of(self, i: int) -> int:
        r = self.replica_of.item(i)
        j = -1 if r < 0 else self._row_on(i, r)
        return 0 if j < 0 else self.replicas[r].output_tokens_of(j)

    # --- merged results ----------------------------------------------------------------------------
    def _merge_in(self, out: Any, e: Engine, local: _ReplicaRows, name: str,
                  merge: Callable[..., Any]) -> Any:
        """``out`` (by workload row) with replica ``e``'s array ``name`` merged in:
        ``merge(so_far, replica's)``."""
        if not self._compact:  # indexed by workload rows
            return merge(out, getattr(e, name))
        rows = local.rows
        out[rows] = merge(out[rows], getattr(e, name)[: local.n])
        return out

    def _output_into(self, out: IntArray, r: int, e: Engine, local: _ReplicaRows) -> None:
        """Replica ``r``'s output tokens of the rows whose last replica it is, into ``out``."""
        if not self._compact:
            mask = self.replica_of == r
            out[mask] = e.output_tokens()[mask]
            return
        rows = local.rows
        here = self.replica_of[rows] == r  # rows whose last replica is this one
        out[rows[here]] = e.output_tokens()[: local.n][here]

    def _gaps_of(self, e: Engine, local: _ReplicaRows, keep: npt.NDArray[np.bool_],
                 tier: IntArray, num_codes: int) -> tuple[IntArray, FloatArray, IntArray]:
        """Replica ``e``'s gaps of the requests ``keep`` selects that finished there, its equal
        gaps of a tier as one row (``results.metrics.merge_gap_rows``)."""
        if not self._compact:  # indexed by workload rows
            return merge_gap_rows(*e.token_gaps(keep, tier), num_codes)
        rows, size = local.rows, len(e.finished_s)
        mine = np.zeros(size, np.bool_)
        mine[: local.n] = keep[rows]
        codes = np.zeros(size, np.int64)
        codes[: local.n] = tier[rows]
        return merge_gap_rows(*e.token_gaps(mine, codes), num_codes)

    def request_figures(self, keep: npt.NDArray[np.bool_], tier: IntArray) -> RequestFigures:
        """Each row's output tokens on the replica it was routed to (its last), the
        :data:`_MERGED` arrays (the first token a caller saw, on whichever replica it came
        from) and every replica's gaps of the requests that finished there, each replica's
        equal gaps of a tier as one row (a replica's steps give one row each, millions in a
        long run, and the table merges equal ones in the end); read a replica at a time, each
        replica's per-request state let go once read (``Engine.drop_request_state``: ~170
        bytes a request in a 16-replica fleet, so the figures never sit beside all of it). The
        replicas cannot go on after this."""
        num_codes = int(tier.max()) + 1 if tier.size else 0
        output = np.zeros(len(self.replica_of), np.int64)
        # each merge before any replica's: its empty value in every row, the replicas' dtype
        merged = {name: np.full(len(output), empty, getattr(self.replicas[0], name).dtype)
                  for name, (empty, _, _) in _MERGED.items()}
        parts = []
        for r, (e, local) in enumerate(zip(self.replicas, self._local, strict=True)):
            self._output_into(output, r, e, local)
            for name, (_, merge, _) in _MERGED.items():
                merged[name] = self._merge_in(merged[name], e, local, name, merge)
            parts.append(self._gaps_of(e, local, keep, tier, num_codes))
            if self._compact:
                local.drop()
            e.drop_request_state()
        first, finished, preemptions, recomputed = (
            np.asarray(out, _MERGED[name][2]) for name, out in merged.items())
        return RequestFigures(output, first, finished, preemptions, recomputed,
                              *_join_dropping(parts))

    def stats(self) -> dict[str, object]:
        per = [e.stats() for e in self.replicas]
        queries = sum(e.kv.prefix_query_tokens for e in self.replicas)
        hits = sum(e.kv.prefix_hit_tokens for e in self.replicas)
        out: dict[str, object] = {
            "engine": self.config.engine.name,
            "head_of_line_blocked_s": math.fsum(e.head_of_line_blocked_s() for e in self.replicas),
            "prefix_caching": self.replicas[0].kv.prefix is not None,
            "prefix_cache_query_tokens": queries,
            "prefix_cache_hit_tokens": hits,
            "prefix_cache_hit_rate": hits / queries if queries else None,
        }
        if "queue_caps" in per[0]:  # each replica's own (one engine configuration)
            out["queue_caps"] = per[0]["queue_caps"]
        if "speculative" in per[0]:  # the replicas' counts summed
            out["speculative"] = fleet_stats([cast(dict[str, object], p["speculative"])
                                              for p in per])
        for key in ("swap_out_bytes", "swap_in_bytes", "num_swap_outs", "num_swap_ins",
                    "num_retractions"):
            if key in per[0]:
                out[key] = sum(int(p[key]) for p in per)  # type: ignore[call-overload]
        out["fleet"] = {
            "num_replicas": len(self.replicas),
            "router": self.fleet.router,
            "budget": self.fleet.budget,
            **({"autoscale": self.autoscaler.stats(self.t)} if self.autoscaler is not None
               else {}),
            "replicas": [
                {
                    **served,
                    "num_gpu_blocks": e.num_gpu_blocks,
                    "num_requests": int((self.replica_of == r).sum()),
                    "num_steps": e.num_steps,
                    "num_preemptions": e.num_preemptions_total,
                    **{k: v for k, v in p.items() if k != "engine"},
                }
                for r, (served, e, p) in enumerate(
                    zip(self.served, self.replicas, per, strict=True))
            ],
        }
        return out
