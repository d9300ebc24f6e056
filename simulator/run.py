"""One simulation as a function call: workload + policy + configuration -> :class:`RunResult`.

The gateway (``policies.Gateway``) and the engine (:class:`kvbudget.simulator.engine.Engine`) run as
SimPy processes on one clock: the arrival process offers each request to the gateway, the
gateway's actions start, refuse or abort engine work, the engine's completions settle and
release leases, and a timer applies admission deadlines and lease expiry. No global state: two
calls with the same inputs give identical records.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import simpy

from kvbudget.policies import (
    Action,
    Admit,
    BasePolicy,
    Gateway,
    Reject,
    Request,
    RequestTooLarge,
    Revoke,
)
from kvbudget.policies.tiers import TierConfig, tier_map
from kvbudget.results.metrics import aggregate_token_gaps, summarize
from kvbudget.results.records import (
    PENDING,
    STATUS_CODES,
    STATUSES,
    derive_latencies,
)
from kvbudget.results.run_result import RunResult
from kvbudget.simulator import queue_caps
from kvbudget.simulator.alarm import Alarm, UrgentTimeout
from kvbudget.simulator.budget_moves import BudgetMoves
from kvbudget.simulator.clients import Clients
from kvbudget.simulator.disagg import DisaggFleet
from kvbudget.simulator.engine import EngineHooks, RequestColumns
from kvbudget.simulator.engine_variants import make_engine
from kvbudget.simulator.fleet import Fleet
from kvbudget.simulator.kv_offload import OffloadEngine
from kvbudget.simulator.limits_said import limits_said
from kvbudget.simulator.served import (
    engine_knobs,
    fleet_knobs,
    jsonable,
    pools_knobs,
    served_entries,
)
from kvbudget.simulator.serving import RequestFigures, ServingEngine
from kvbudget.simulator.sim_config import FleetConfig, ReplicaSetup, SimConfig, gateway_config
from kvbudget.simulator.spec_decode import draft_warning
from kvbudget.simulator.users import ClosedLoopUsers
from kvbudget.workloads import Workload
from kvbudget.workloads.context_limit import CUTTING_ENGINES, context_refusals, cut_to_context
from kvbudget.workloads.mix import mix_of
from kvbudget.workloads.traces.report import load_said

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel
    from kvbudget.policies.clients import Answer
    from kvbudget.simulator.fleet import FleetGateway

__all__ = ["FleetConfig", "SimConfig", "gateway_config", "simulate"]

_COMPLETED = STATUS_CODES["completed"]
_COLLECT_ROWS = 1 << 18
"""Runs of this many requests or more (half a minute of CPU or more) collect the engine at
once after it is read (a full ``gc.collect`` costs ~50-200 ms in a process with pandas loaded:
too much for the short runs a sweep makes in one process, whose engines the collector finds in
its own time)."""
_ARRIVAL_CHUNK = 1 << 16  # rows whose columns the arrival process holds as lists at once
_REASON_STATUS = {
    "deadline": "expired",
    "preempted": "preempted_dropped",
    "lease_expired": "preempted_dropped",
}


class _Simulation:
    """One run: the SimPy clock, the engine (one, or a fleet), the gateway in front of it, the
    arrival process and the per-request outcome columns the records are built from.

    The engine calls its hooks (``_on_finish``, ``_on_preempt``, ``_next_external_s``,
    ``_gateway_state``) once per loop iteration or event; the clients
    (:class:`~kvbudget.simulator.clients.Clients`) and a closed loop's users
    (:class:`~kvbudget.simulator.users.ClosedLoopUsers`) drive it through its public methods.
    Its arrivals and gateway timer, like the clients' events, run before every engine step
    ending at their instant (:mod:`kvbudget.simulator.alarm`: URGENT events).
    """

    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig,
        setup: ReplicaSetup,
        progress: Callable[[int], None] | None = None,
        token_gaps_of: npt.NDArray[np.bool_] | None = None,
    ) -> None:
        self.progress = progress
        self.token_gaps_of = token_gaps_of
        self.setup = setup
        self.policy = policy
        self.config = config
        self.frontend = FrontendDelays(config)
        assert setup.engine.max_model_len is not None  # filled in (engine_for)
        cuts = setup.engine.name in CUTTING_ENGINES
        self.beyond_context = context_refusals(workload, setup.engine.max_model_len, cuts)
        # vLLM serves prompt + max_tokens over the context with max_tokens lowered: its output
        # ends at the context (workloads/context_limit.py)
        workload, self.num_cut_to_context = cut_to_context(
            workload, setup.engine.max_model_len, cuts)
        self.users: ClosedLoopUsers | None = None
        if config.closed_loop is not None:
            # the send times are decided as the run goes: a copy of the workload whose arrival
            # column is written as each request is sent (the engine reads the same array)
            self.users = ClosedLoopUsers(workload, config.closed_loop, config.seed)
            workload = self.users.workload
        self.w = workload
        n = len(workload)
        self.n = n
        self.env = simpy.Environment()
        priority = tier_priorities(workload, config.tiers)
        self._clients = Clients(self, config) if Clients.wanted(workload, config) else None
        self._moves = BudgetMoves(config.gateway_capacity_schedule)  # applied by clock()
        self._next_move_s = self._moves.next_s
        self.engine, self.gateway, self.kv_capacity_tokens = self._serve(priority)
        self.gateway.attach_engine(_Probe(self.engine))
        self.status = np.full(n, PENDING, dtype=np.int8)
        self.reason: dict[int, str] = {}
        self.admitted_s = np.full(n, np.nan)
        self.reserved_tokens = np.zeros(n, dtype=np.int64)
        self.num_revocations = np.zeros(n, dtype=np.int64)
        # the arrival time of the next row to arrive (inf past the last), read by every engine
        # loop iteration; a closed loop's users tell it as sends are scheduled
        # (expect_arrival). No per-request Python objects: a list of ten million floats would
        # take 320 MB.
        self._next_arrival_s = (
            float(workload.arrival_s[0]) if n and self.users is None else math.inf)
        self._timer = Alarm(self.env, self._on_timer, urgent=True)
        self._reserved_ts = 0.0
        self._reserved_last_t = 0.0
        self._reserved_now = 0
        # what the engine hooks read of the gateway, noted after every gateway call
        # (_note_gateway): the hooks run once per engine loop iteration
        self._gateway_timer_s = math.inf
        self._state = (self._reserved_now, self.gateway.num_waiting())
        if config.gateway_capacity_schedule and not isinstance(self.gateway, Gateway):
            raise ValueError("gateway_capacity_schedule moves one gateway's budget: this "
                             "fleet has a gateway a replica")

    def _serve(self, priority: npt.NDArray[np.int64]
               ) -> tuple[ServingEngine, Gateway | FleetGateway, int]:
        """The engine (one, or a fleet of replicas) with this run's hooks, the gateway in front
        of it, and the KV capacity in tokens the gateway's budget stands for. ``priority``: each
        workload row's tier priority."""
        config, setup, w = self.config, self.setup, self.w
        hooks = EngineHooks(
            on_finish=self._on_finish,
            on_preempt=self._on_preempt,
            next_external_s=(
                self._next_external_s if self._clients is None
                else self._next_external_with_clients
            ),
            gateway_state=self._gateway_state,
        )
        if config.disaggregation is not None:
            pools = DisaggFleet(self.env, w, priority, config, hooks, self.policy,
                                gateway_config=partial(gateway_config, config))
            pools.on_transfer_end = partial(self._first_stage_done, pools.gateway)
            return pools, pools.gateway, pools.capacity_tokens
        if config.fleet is not None:
            fleet = Fleet(self.env, w, priority, config, hooks, self.policy,
                          gateway_config=partial(gateway_config, config), setup=setup)
            if fleet.autoscaler is not None:  # its resizes are gateway calls of the run
                fleet.clock, fleet.carry_out = self.clock, self.carry_out
            return fleet, fleet.gateway, fleet.capacity_tokens
        blocks = setup.num_gpu_blocks
        assert blocks is not None  # resolved for a run without a fleet (simulate)
        capacity = blocks * setup.engine.block_size
        gateway = Gateway(
            gateway_config(config, config.gateway_capacity_tokens or capacity), self.policy)
        engine = make_engine(self.env, setup, RequestColumns.of(w, priority), hooks,
                             timeline_period_s=config.timeline_period_s)
        return engine, gateway, capacity

    # --- hooks ------------------------------------------------------------------------------
    def _next_external_s(self) -> float:
        return min(self._next_arrival_s, self._gateway_timer_s)

    def _next_external_with_clients(self) -> float:
        assert self._clients is not None
        return min(
            self._next_arrival_s, self._gateway_timer_s, self._clients.next_s()
        )

    def _gateway_state(self) -> tuple[int, int]:
        return self._state

    def _on_finish(self, i: int, t: float) -> None:
        if self._clients is not None and not self._clients.completed(i, t):
            return
        self.status[i] = _COMPLETED
        now = self.clock(t)
        self.carry_out(self.gateway.finish(i, self.w.output_tokens.item(i), now), now)
        if self.users is not None:  # the user sees the answer after the front end's delays
            w, row = self.w, slice(i, i + 1)
            self.users.user_free(float(self.frontend.finish_s(
                np.array([t]), w.prompt_tokens[row], w.output_tokens[row])[0]), i)

    def _first_stage_done(self, gateway: Gateway, i: int, t: float) -> None:
        """Row ``i``'s KV has left the prefill pool (a disaggregated run): its part of the
        prefill pool's budget goes back."""
        now = self.clock(t)
        actions = gateway.first_stage_done(i, now)
        if actions:  # else the gateway is as the last call left it (noted then)
            self.carry_out(actions, now)

    def _on_preempt(self, i: int, t: float) -> None:
        self.gateway.engine_preempted(i, max(t, self.gateway.now_s))

    # --- arrivals ---------------------------------------------------------------------------
    def expect_arrival(self, t: float) -> None:
        """The next row arrives at ``t`` (inf: none is scheduled): a closed loop's users say
        it as they schedule their sends."""
        self._next_arrival_s = t

    def offer(self, request: Request, t: float) -> None:
        """Row ``request.request_id`` arrives at ``t``: its client's attempt noted, offered to
        the gateway, the gateway's actions carried out (``progress`` is told every 1,000
        rows)."""
        i = request.request_id
        if self.progress is not None and (i + 1) % 1000 == 0:
            self.progress(1000)
        now = self.clock(t)
        if self._clients is not None:
            self._clients.sent(i, now)
        self.carry_out(self.gateway.arrive(request, now), now)

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        """The open loop: each row offered at its own arrival time, in order."""
        # the columns as Python lists, a chunk of rows at a time (a million rows' lists would
        # take ~150 MB): the Request of row i built directly, with request_id i
        # (``Workload.request(i)`` gives the workload's own id)
        w = self.w
        with_prefix = w.prefix_hashes is not None
        env, offer = self.env, self.offer
        for lo in range(0, self.n, _ARRIVAL_CHUNK):
            rows = slice(lo, lo + _ARRIVAL_CHUNK)
            # with the next chunk's first arrival (or inf) as a sentinel
            arrival = [*w.arrival_s[lo : lo + _ARRIVAL_CHUNK + 1].tolist(), math.inf]
            tiers = [w.tier_names[c] for c in w.tier[rows].tolist()]
            prompt = w.prompt_tokens[rows].tolist()
            max_output = w.max_output_tokens[rows].tolist()
            deadline = w.deadline_s[rows].tolist()
            for j in range(len(prompt)):
                i = lo + j
                t = arrival[j]
                if t > env.now:
                    yield UrgentTimeout(env, t - env.now)  # before a step ending then
                self._next_arrival_s = arrival[j + 1]
                d = deadline[j]
                # positional: keyword arguments cost ~0.4 us per request here
                offer(Request(
                    i,  # request_id
                    tiers[j],
                    t,  # arrival_s
                    prompt[j],
                    max_output[j],
                    None if d != d else d,  # deadline_s (NaN: none)
                    w.prefix_of(i) if with_prefix else (),
                ), t)

    # --- gateway actions ------------------------------------------------------------------------
    def clock(self, t: float) -> float:
        """The gateway's time for a call at ``t``; integrates the reserved tokens up to it."""
        now = max(t, self.gateway.now_s)
        self._reserved_ts += self._reserved_now * (now - self._reserved_last_t)
        self._reserved_last_t = now
        if now >= self._next_move_s:  # the budget moved (SimConfig.gateway_capacity_schedule)
            budget, self._next_move_s = self._moves.due(now), self._moves.next_s
            gateway = self.gateway  # a Gateway (checked at the start)
            assert isinstance(gateway, Gateway) and budget is not None
            self.carry_out(gateway.resize(budget, now, gateway.config.max_request_tokens), now)
        return now

    def carry_out(self, actions: list[Action], now: float) -> None:
        """Carry out the actions of a gateway call made at ``now`` (see :meth:`clock`)."""
        self._note_gateway()
        if actions:
            self._apply(actions, now)
        if self._gateway_timer_s < self._timer.at_s:
            self._timer.arm(self._gateway_timer_s)

    def _note_gateway(self) -> None:
        """Note the gateway's next timer and its state as its last call left them."""
        gateway = self.gateway
        nxt = gateway.next_timer_s()
        self._gateway_timer_s = math.inf if nxt is None else nxt
        if self._gateway_timer_s > self._next_move_s and gateway.num_waiting():
            self._gateway_timer_s = self._next_move_s  # a move may admit those waiting
        self._reserved_now = reserved = gateway.budget.reserved_tokens
        self._state = (reserved, gateway.num_waiting())

    def _on_timer(self, at: float) -> None:
        """The gateway's timer (admission deadlines, lease expiry) rang."""
        now = self.clock(max(at, self.env.now))
        self.carry_out(self.gateway.advance(now), now)

    def _apply(self, actions: list[Action], now: float) -> None:
        failed: list[Action] = []
        engine = self.engine
        for action in actions:
            i = action.request.request_id
            if isinstance(action, Admit):
                failed.extend(self._admit(i, action.lease.reserved_tokens, now))
            elif isinstance(action, Revoke):
                engine.abort_request(i)
                self.num_revocations[i] += 1
                if self._clients is not None:
                    self._clients.revoked(i)
            elif isinstance(action, Reject):
                error = action.error
                if isinstance(error, RequestTooLarge):
                    self._outcome(i, now, "rejected_too_large", "", "too_large")
                else:
                    reason = error.reason
                    self._outcome(
                        i,
                        now,
                        _REASON_STATUS.get(reason, "rejected_overloaded"),
                        reason,
                        "overloaded_retryable" if error.retryable else "overloaded",
                        error.retry_after_s,
                    )
        if failed:  # after the actions before them, in order (first in, first out)
            self._apply(failed, now)

    def _admit(self, i: int, reserved_tokens: int, now: float) -> list[Action]:
        """Hand admitted row ``i`` to the engine; when its front refuses it (vLLM's 400 for a
        prompt beyond the context, ``max_model_len``, the engine's own queue caps:
        ``simulator.queue_caps``) record that and free the lease: what the freed room admits."""
        self.admitted_s[i] = now
        self.reserved_tokens[i] = reserved_tokens
        answer: Answer = "too_large"
        if i in self.beyond_context:  # vLLM's front answers 400 before the engine
            status, reason = "rejected_too_large", self.beyond_context[i]
        elif not self.engine.fits(i):
            status, reason = "rejected_too_large", "max_model_len"
        elif refused := self.engine.add_request(i):
            status, reason, answer = "rejected_overloaded", refused, queue_caps.answer(refused)
        else:
            if self._clients is not None:
                self._clients.admitted(i)
            return []
        self._outcome(i, now, status, reason, answer)
        failed = self.gateway.fail(i, now)
        self._note_gateway()
        return failed

    def _outcome(
        self,
        i: int,
        now: float,
        status: str,
        reason: str,
        answer: Answer,
        retry_after_s: float | None = None,
    ) -> None:
        """Attempt ``i`` ended unanswered: final unless its client tries again."""
        if self._clients is not None and self._clients.ended(
            i, now, answer, reason, retry_after_s
        ):
            return
        self.set_status(i, status, reason)

    def new_attempt(self, i: int) -> None:
        """Row ``i``'s client sends it again (``clients.Clients``): a disaggregated run's
        records give this attempt's replicas, not an earlier one's."""
        if isinstance(self.engine, DisaggFleet):
            self.engine.new_attempt(i)

    def set_status(self, i: int, status: str, reason: str) -> None:
        self.status[i] = STATUS_CODES[status]
        if reason:
            self.reason[i] = reason
        if self.users is not None:
            self.users.user_free(self.env.now, i)

    # --- run -------------------------------------------------------------------------------
    def run(self, wall_start: float) -> RunResult:
        self.env.process(self._arrivals() if self.users is None
                         else self.users.arrivals(self))
        self.env.run()
        end_t = max(self.engine.t, self.env.now)
        if self.users is not None:
            self.users.close(end_t)
        self._reserved_ts += self._reserved_now * (end_t - self._reserved_last_t)
        # requests still waiting when nothing else can happen never got capacity
        leftover = self.status == PENDING
        for i in np.flatnonzero(leftover).tolist():
            if self._clients is not None:
                self._clients.close_leftover(i, end_t)
            self.set_status(i, "expired", "end_of_run")
        return self._result(time.perf_counter() - wall_start)

    def _result(self, wall_time_s: float) -> RunResult:
        w = self.w
        completed = self.status == _COMPLETED
        # everything the records and summary take from the engine, read first: the run's
        # figures, then the per-row ones, which a fleet reads a replica at a time, letting each
        # one's per-request state go as it goes; then the engine is let go (a 10 M-request
        # fleet's replicas hold ~2 GB) before the records' own columns are built
        e = self.engine
        tl = np.array(e.timeline, dtype=np.float64).reshape(-1, 7)
        pool_kv = e.cpu_timeline(tl[:, 0]) if isinstance(e, OffloadEngine) else None
        if isinstance(e, DisaggFleet):  # the prefill pool's KV beside the decode pool's
            pool_kv = e.prefill_timeline(len(tl))
        scale_columns = _scale_columns(e, tl)  # (no local keeps the autoscaler, or the fleet)
        span = max(e.t, float(w.arrival_s[-1]) if self.n else 0.0) - (
            float(w.arrival_s[0]) if self.n else 0.0
        )
        kv_token_seconds = e.kv_token_seconds()
        # an autoscaled fleet's KV fractions are over the capacity serving, not its most
        scaler = e.autoscaler if isinstance(e, Fleet) else None
        t0 = float(w.arrival_s[0]) if self.n else 0.0
        capacity_ts = None if scaler is None else scaler.capacity_token_seconds(t0, t0 + span)
        num_gpu_blocks, block_size = e.num_gpu_blocks, e.block_size
        figures: dict[str, Any] = {
            "num_steps": e.num_steps,
            "num_engine_preemptions": e.num_preemptions_total,
            "num_gateway_revocations": int(self.num_revocations.sum()),
            "num_recomputed_tokens": e.num_recomputed_tokens,
        }
        stats = e.stats(span) if isinstance(e, DisaggFleet) else e.stats()
        self._disagg_columns = e.record_columns() if isinstance(e, DisaggFleet) else None
        given = self.config.engine.gpu_memory_utilization
        self._knobs_said = (  # a disaggregated run's knobs are its pools', not [engine]'s;
            pools_knobs(self.config, e.setups) if isinstance(e, DisaggFleet)  # a fleet's its replicas'
            else fleet_knobs(e.setups, given) if isinstance(e, Fleet)
            else engine_knobs(self.setup.engine, given))
        codes = np.asarray(w.tier, np.int64)
        if self.token_gaps_of is not None:  # the chosen rows' gaps apart: codes past the tiers'
            codes = codes + len(w.tier_names) * self.token_gaps_of
        fig = e.request_figures(completed, codes)
        recomputed = fig.recomputed_tokens
        figures["recomputed_tokens_by_tier"] = {
            name: int(recomputed[w.tier == code].sum()) for code, name in enumerate(w.tier_names)}
        figures.update(stats)
        attempts = None if self._clients is None else self._clients.table(w.request_id)
        del e, recomputed
        self._let_engine_go()
        token_gaps, chosen_gaps = self._token_gaps(fig)
        records = self._records(completed, fig)
        del fig
        timeline = timeline_columns(tl)
        if pool_kv is not None:
            timeline.update(pool_kv)
        timeline.update(scale_columns)  # an autoscaled fleet's replicas
        summary = summarize(
            records,
            timeline,
            tiers=self.config.tiers,
            kv_capacity_tokens=self.kv_capacity_tokens,
            policy=self.policy.name,
            seed=self.config.seed,
            wall_time_s=wall_time_s,
            kv_token_seconds=(kv_token_seconds, self._reserved_ts, span),
            kv_capacity_token_seconds=capacity_ts,
            attempts=attempts,
            token_gaps=token_gaps,
            extra=self._summary_extra(figures, num_gpu_blocks, block_size),
        )
        return RunResult(records, timeline, summary, attempts, token_gaps,
                         chosen_token_gap_columns=chosen_gaps)

    def _token_gaps(self, fig: RequestFigures) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The token-gaps table of the completed requests (``fig``'s gap rows, their codes the
        tiers') and, with ``token_gaps_of``, that of the completed requests it chose (their
        codes past the tiers': the first table is the same as without it, equal gaps of a tier
        merged into one row either way). Each gap with the front end's per-token cost (as
        finished_s has it for every token after the first)."""
        names = list(self.w.tier_names)
        gap_s = self.frontend.gaps_s(fig.gap_s)
        if self.token_gaps_of is None:
            return aggregate_token_gaps(fig.gap_tier, names, gap_s, fig.num_gaps), None
        tier = fig.gap_tier % len(names)
        chosen = fig.gap_tier >= len(names)
        return (aggregate_token_gaps(tier, names, gap_s, fig.num_gaps),
                aggregate_token_gaps(tier[chosen], names, gap_s[chosen], fig.num_gaps[chosen]))

    def _records(self, completed: npt.NDArray[np.bool_], fig: RequestFigures) -> dict[str, Any]:
        """The records' columns, one row per workload row: the gateway's outcome columns, and
        the engine's figures (``fig``) with the front end's delays as the client sees them."""
        w = self.w
        output = np.where(completed, w.output_tokens, fig.output_tokens)
        first = self.frontend.first_token_s(fig.first_token_s, w.prompt_tokens)
        finished = self.frontend.finish_s(np.where(completed, fig.finished_s, np.nan),
                                          w.prompt_tokens, output.astype(np.int64))
        ttft, tpot, e2e = derive_latencies(w.arrival_s, first, finished, output)
        reason = np.full(self.n, "", dtype=object)
        for i, why in self.reason.items():
            reason[i] = why
        records: dict[str, Any] = {
            "request_id": w.request_id,
            "tier": np.array(w.tier_names, dtype=object)[w.tier],
            "arrival_s": w.arrival_s,
            "prompt_tokens": w.prompt_tokens,
            "max_output_tokens": w.max_output_tokens,
            "output_tokens": output.astype(np.int64),
            "status": np.array(STATUSES, dtype=object)[self.status],
            "reason": reason,
            "admitted_s": self.admitted_s,
            "first_token_s": first,
            "finished_s": finished,
            "ttft_s": np.where(completed, ttft, np.nan),
            "tpot_s": np.where(completed, tpot, np.nan),
            "e2e_s": e2e,
            "num_preemptions": fig.num_preemptions + self.num_revocations,
            "reserved_tokens": self.reserved_tokens,
        }
        if self._clients is not None:
            records["num_attempts"] = self._clients.attempt.copy()
        if self._disagg_columns is not None:
            records.update(self._disagg_columns)
        return records

    def _summary_extra(self, engine_figures: dict[str, Any], num_gpu_blocks: int,
                       block_size: int) -> dict[str, Any]:
        """The summary's entries beyond the records' and the timeline's figures: what ran."""
        config = self.config
        return {
            "policy_params": jsonable(self.policy.describe()),
            **served_entries(config, self.setup),
            "num_gpu_blocks": num_gpu_blocks,
            "block_size": block_size,
            "frontend_overhead_s": config.frontend_overhead_s,
            "frontend": {"name": config.frontend, **jsonable(self.frontend.describe())},
            "engine": engine_figures,
            "engine_knobs": self._knobs_said,
            "workload": {"name": self.w.name, "num_requests": self.n, **load_said(
                self.w.meta, closed_loop=self.users is not None), "mix": mix_of(self.w)},
            **limits_said(self.w, self.config, self.setup, self.status, self.reason,
                          self.beyond_context, self.num_cut_to_context),
            **({"warnings": [warning]} if (warning := draft_warning(
                config.engine.speculative_config, config.model)) else {}),
            **({"closed_loop": self.users.describe()} if self.users is not None else {}),
            **({"clients": self._clients.describe()} if self._clients is not None else {}),
        }

    def _let_engine_go(self) -> None:
        """Drop the engine, the gateway and the clock once the results have been read from
        them (``_result``): the engine's per-request state is freed before the records are
        built. The simulation cannot go on after this."""
        del self.engine, self.gateway, self.env
        if self.n >= _COLLECT_ROWS:
            gc.collect()  # the engine's processes, hooks and replicas refer to one another


class FrontendDelays:
    """What a completed request's client sees beyond the engine, resolved once for a run: the
    API server's cost (:meth:`SimConfig.resolved_frontend`) and the calibrated
    ``frontend_overhead_s``, added to its first token and its finish (the engine and the
    gateway do not see them). A plain class (see :class:`RequestFigures`)."""

    __slots__ = ("cost", "is_zero", "overhead_s")

    def __init__(self, config: SimConfig) -> None:
        self.cost = config.resolved_frontend()
        self.overhead_s = config.frontend_overhead_s
        self.is_zero = not self.overhead_s and self.cost.is_zero

    def first_token_s(self, t: npt.NDArray[np.float64], prompt_tokens: npt.NDArray[np.int64]
                      ) -> npt.NDArray[np.float64]:
        """The first tokens at ``t`` (seconds, per row) as their clients see them."""
        if self.is_zero:
            return t
        return t + (self.overhead_s + self.cost.first_token_delay_s(prompt_tokens))

    def finish_s(self, t: npt.NDArray[np.float64], prompt_tokens: npt.NDArray[np.int64],
                 output_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The finishes at ``t`` (per row) as their clients see them."""
        if self.is_zero:
            return t
        return t + (self.overhead_s + self.cost.finish_delay_s(prompt_tokens, output_tokens))

    def gaps_s(self, gap_s: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Gaps between two tokens of a request as its client sees them: each with the
        per-token cost (as :meth:`finish_s` has it for every token after the first)."""
        per_token = self.cost.per_output_token_s
        return gap_s + per_token if per_token else gap_s

    def describe(self) -> dict[str, float]:
        cost = self.cost
        return {k: getattr(cost, k) for k in cost.__dataclass_fields__}


class _Probe:
    """What a policy may read of the simulated engine."""

    def __init__(self, engine: ServingEngine) -> None:
        self._engine = engine

    def num_output_tokens(self, request_id: int) -> int:
        return self._engine.output_tokens_of(request_id)

    @property
    def num_preemptions_total(self) -> int:
        return self._engine.num_preemptions_total


def tier_priorities(workload: Workload, tiers: Sequence[TierConfig]) -> npt.NDArray[np.int64]:
    """Each row's tier priority; every tier of the workload must be configured."""
    by_name = tier_map(tiers)
    missing = sorted(set(workload.tier_names) - set(by_name))
    if missing:
        raise ValueError(
            f"workload tier {missing[0]!r} has no tier configuration; "
            f"configured tiers: {sorted(by_name)}; map the trace's tiers onto them with "
            "--tier-map VALUE=TIER (a ServeGen client N: N=TIER; in a scenario, "
            "[workload.options] tier_map) or configure the tier in the scenario's [[tiers]]"
        )
    priority = np.array([by_name[t].priority for t in workload.tier_names], dtype=np.int64)
    return priority[workload.tier]


def _scale_columns(engine: ServingEngine, samples: npt.NDArray[np.float64]
                   ) -> dict[str, npt.NDArray[np.int64]]:
    """An autoscaled fleet's replica columns at the timeline's sample times (none else)."""
    scale = engine.autoscaler if isinstance(engine, Fleet) else None
    if scale is None:
        return {}
    return {k: np.asarray(v, np.int64)
            for k, v in scale.timeline_columns(samples[:, 0].tolist()).items()}


def timeline_columns(samples: npt.NDArray[np.float64]) -> dict[str, Any]:
    """The timeline's columns from the engine's samples (:attr:`ServingEngine.timeline`, one
    row of seven a period)."""
    return {
        "time_s": samples[:, 0],
        "kv_used_tokens": samples[:, 1].astype(np.int64),
        "kv_reserved_tokens": samples[:, 2].astype(np.int64),
        "kv_capacity_tokens": samples[:, 3].astype(np.int64),
        "num_running": samples[:, 4].astype(np.int64),
        "num_waiting": samples[:, 5].astype(np.int64),
        "num_preemptions": samples[:, 6].astype(np.int64),
    }


def simulate(
    workload: Workload,
    policy: BasePolicy,
    config: SimConfig | None = None,
    *,
    progress: Callable[[int], None] | None = None,
    token_gaps_of: npt.NDArray[np.bool_] | None = None,
) -> RunResult:
    """Simulate ``workload`` through the gateway ``policy`` (:func:`kvbudget.make_policy`) and
    the engine model; return the :class:`~kvbudget.results.run_result.RunResult` (records,
    timeline, and a summary that says what the run took and assumed).

    Without ``config``: :class:`SimConfig`'s defaults, Llama-3.1-8B on one H100-80GB with vLLM's
    defaults and the default tiers (the result's ``simulated:`` line says them). Gateway request
    ids are the workload's row numbers; the records carry the workload's own ``request_id``
    column. ``progress`` is called with the number of requests offered since its last call
    (every 1,000 arrivals), for a progress bar. ``token_gaps_of`` (a flag per workload row):
    the result also has the inter-token gaps of the completed requests it flags
    (``chosen_token_gap_columns``, not written to a run directory; ``kvbudget validate --url``
    compares ITL over the requests its client did not read whole at once); every other figure
    is the same as without it.
    """
    wall_start = time.perf_counter()
    config = SimConfig() if config is None else config
    for name, given, kind, hint in (  # not a deep AttributeError from inside the run
            ("workload", workload, Workload, "a kb.Workload (a Scenario's: scn.workload())"),
            ("policy", policy, BasePolicy, "a policy object: kb.make_policy(name)"),
            ("config", config, SimConfig, "a kb.SimConfig or None")):
        if not isinstance(given, kind):
            raise TypeError(f"simulate: {name} must be {hint}, got {type(given).__name__} "
                            f"{given!r:.60}")
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    _check_timeline_size(workload, config.timeline_period_s)
    _check_request_ids(workload)
    if token_gaps_of is not None:
        token_gaps_of = np.asarray(token_gaps_of)
        if token_gaps_of.dtype != np.bool_ or token_gaps_of.shape != (len(workload),):
            raise ValueError(f"simulate: token_gaps_of must be a flag per workload row "
                             f"({len(workload)}), got {token_gaps_of.dtype} of shape "
                             f"{token_gaps_of.shape}")
    # the GPU and the model looked up, the engine's defaults filled in, the KV blocks sized and
    # the step-time model built once for the run (the KV blocks where a replica runs on the
    # config's GPU: a fleet resolves its other GPUs itself, once each)
    fleet = config.fleet
    setup = config.replica_setup(
        with_blocks=fleet is None or not fleet.gpus or config.gpu in fleet.gpus)
    if config.cost_model is not None or config.gpu.endswith((".json", ".toml")) or (
            config.model.endswith(".json") or "/" in config.model):
        _check_step_time(setup.cost_model,  # figures from a file: bounded
                         f"gpu {config.gpu}, model {config.model}"
                         + ("" if config.cost_model is None else ", the given cost model"))
    return _Simulation(workload, policy, config, setup, progress, token_gaps_of).run(wall_start)


MAX_STEP_S = 600.0
"""The longest engine step one short request may take (ten minutes, against milliseconds on any
GPU): a cost model, GPU or model file beyond it is off by orders of magnitude, and would
simulate for hours (or, at 1e300 s a step, never end)."""


def _check_step_time(cost: CostModel, where: str) -> None:
    """A prefill of 1,024 tokens and a decode step of one sequence at 1,024 tokens of context
    each take a finite time under :data:`MAX_STEP_S`."""
    prefill = float(cost.step_time(1024.0, 0.0, 0.0, 1024.0 * 1024.0 / 2, 1.0))
    decode = float(cost.step_time(0.0, 1.0, 1024.0, 0.0, 0.0))
    worst = max(prefill, decode)
    if not (math.isfinite(prefill) and math.isfinite(decode) and worst <= MAX_STEP_S):
        raise ValueError(
            f"the step-time model takes {worst:.3g} s for one step of a single 1,024-token "
            f"request (at most {MAX_STEP_S:g} s; {where}): a figure of the cost model, GPU or "
            "model is off by orders of magnitude")


def _check_request_ids(workload: Workload) -> None:
    """A gateway request id is >= 0 (:class:`~kvbudget.policies.Request`): a workload row with
    a negative ``request_id`` is refused before the run, with the request's own error."""
    negative = np.flatnonzero(workload.request_id < 0)
    if len(negative):
        workload.request(int(negative[0]))  # raises, naming the id


MAX_TIMELINE_SAMPLES = 10_000_000
"""A timeline longer than this (80 MB a column) is a mistake, not a measurement: refused."""


def _check_timeline_size(workload: Workload, period_s: float) -> None:
    """The timeline takes a sample every ``period_s`` from 0 to the end: its length over the
    arrivals alone must stay bounded (a period of 1e-7 s, or a trace whose clock starts at
    Unix-epoch seconds, would take hours and gigabytes before the first request)."""
    last = float(workload.arrival_s.max())
    samples = last / period_s
    if not samples <= MAX_TIMELINE_SAMPLES:
        raise ValueError(
            f"timeline_period_s {period_s:g}: the timeline would take {samples:.3g} samples over "
            f"the {last:.3g} s to the last arrival (at most {MAX_TIMELINE_SAMPLES:,}); raise "
            "timeline_period_s")
