"""One simulation as a function call: workload + policy + configuration -> :class:`RunResult`.

The gateway (``policies.Gateway``) and the engine (:class:`kvbudget.simulator.engine.Engine`) run as
SimPy processes on one clock: the arrival process offers each request to the gateway, the
gateway's actions start, refuse or abort engine work, the engine's completions settle and
release leases, and a timer applies admission deadlines and lease expiry. No global state: two
calls with the same inputs give identical records.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable, Generator
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from simpy.events import Timeout

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
from kvbudget.policies.tiers import tier_map
from kvbudget.results.metrics import aggregate_token_gaps, summarize
from kvbudget.results.records import (
    PENDING,
    STATUS_CODES,
    STATUSES,
    derive_latencies,
)
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.clients import _Clients
from kvbudget.simulator.engine import EngineHooks
from kvbudget.simulator.engine_variants import engine_inputs, make_engine
from kvbudget.simulator.fleet import Fleet
from kvbudget.simulator.serving import ServingEngine
from kvbudget.simulator.sim_config import FleetConfig, ReplicaSetup, SimConfig, gateway_config
from kvbudget.workloads import Workload

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel
    from kvbudget.policies.clients import Answer
    from kvbudget.simulator.fleet import FleetGateway
    from kvbudget.workloads.closed_loop import ClosedLoop

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
    def __init__(
        self,
        workload: Workload,
        policy: BasePolicy,
        config: SimConfig,
        setup: ReplicaSetup,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.progress = progress
        self.setup = setup
        self._loop: _ClosedLoopState | None = None
        if config.closed_loop is not None:
            # the send times are decided as the run goes: a copy of the workload whose arrival
            # column is written as each request is sent (the engine reads the same array)
            self._loop = _ClosedLoopState(workload, config.closed_loop, config.seed)
            workload = self._loop.workload
        self.w = workload
        self.policy = policy
        self.config = config
        n = len(workload)
        self.n = n
        self.env = simpy.Environment()
        tiers = tier_map(config.tiers)
        missing = sorted(set(workload.tier_names) - set(tiers))
        if missing:
            raise ValueError(
                f"workload tier {missing[0]!r} has no tier configuration; "
                f"configured tiers: {sorted(tiers)}"
            )
        tier_prio = np.array([tiers[t].priority for t in workload.tier_names], dtype=np.int64)
        assert setup.engine.max_model_len is not None  # filled in (engine_for)
        self.beyond_context = context_refusals(workload, setup.engine.max_model_len)
        self._clients: _Clients | None = None
        if config.clients or workload.timeout_s is not None:
            self._clients = _Clients(self, config)
        hooks = EngineHooks(
            on_finish=self._on_finish,
            on_preempt=self._on_preempt,
            next_external_s=(
                self._next_external_s if self._clients is None
                else self._next_external_with_clients
            ),
            gateway_state=self._gateway_state,
        )
        self.engine: ServingEngine
        self.gateway: Gateway | FleetGateway
        if config.fleet is None:
            blocks = setup.num_gpu_blocks
            assert blocks is not None  # resolved for a run without a fleet (simulate)
            self.kv_capacity_tokens = blocks * config.engine.block_size
            self.gateway = Gateway(
                gateway_config(config, config.gateway_capacity_tokens or self.kv_capacity_tokens),
                policy,
            )
            self.engine = make_engine(
                self.env,
                setup.engine,
                setup.cost_model,
                num_gpu_blocks=blocks,
                hooks=hooks,
                **engine_inputs(
                    workload,
                    tier_prio[workload.tier],
                    timeline_period_s=config.timeline_period_s,
                    model=setup.model,
                    gpu=setup.gpu,
                    tensor_parallel_size=config.engine.tensor_parallel_size,
                    kv_cache_dtype=config.engine.kv_cache_dtype,
                ),
            )
        else:
            fleet = Fleet(
                self.env,
                workload,
                tier_prio[workload.tier],
                config,
                hooks,
                policy,
                gateway_config=partial(gateway_config, config),
                setup=setup,
            )
            self.engine = fleet
            self.gateway = fleet.gateway
            self.kv_capacity_tokens = fleet.capacity_tokens
        self.gateway.attach_engine(_Probe(self.engine))
        self.status = np.full(n, PENDING, dtype=np.int8)
        self.reason: dict[int, str] = {}
        self.admitted_s = np.full(n, np.nan)
        self.reserved_tokens = np.zeros(n, dtype=np.int64)
        self.num_revocations = np.zeros(n, dtype=np.int64)
        self.next_arrival = 0
        # the arrival time of row ``next_arrival`` (inf past the last), read by every engine
        # loop iteration; a closed loop's is written as sends are scheduled. No per-request
        # Python objects: a list of ten million floats would take 320 MB.
        self._next_arrival_s = (
            float(workload.arrival_s[0]) if n and self._loop is None else math.inf)
        self._timer_at = math.inf
        self._reserved_ts = 0.0
        self._reserved_last_t = 0.0
        self._reserved_now = 0
        # what the engine hooks read of the gateway, noted after every gateway call
        # (_note_gateway): the hooks run once per engine loop iteration
        self._gateway_timer_s = math.inf
        self._state = (self._reserved_now, self.gateway.num_waiting())

    # --- hooks ------------------------------------------------------------------------------
    def _now(self, t: float) -> float:
        return max(t, self.gateway.now_s)

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
        if self._loop is not None:  # the user sees the answer after the front end's delays
            self._user_free(t + self._client_delay_s(i))

    def _on_preempt(self, i: int, t: float) -> None:
        self.gateway.engine_preempted(i, self._now(t))

    # --- gateway actions ------------------------------------------------------------------------
    def clock(self, t: float) -> float:
        """The gateway's time for a call at ``t``; integrates the reserved tokens up to it."""
        now = max(t, self.gateway.now_s)  # _now
        self._reserved_ts += self._reserved_now * (now - self._reserved_last_t)
        self._reserved_last_t = now
        return now

    def carry_out(self, actions: list[Action], now: float) -> None:
        """Carry out the actions of a gateway call made at ``now`` (see :meth:`clock`)."""
        self._note_gateway()
        if actions:
            self._apply(actions, now)
        if self._gateway_timer_s < self._timer_at:
            self._arm_timer()

    def _note_gateway(self) -> None:
        """Note the gateway's next timer and its state as its last call left them."""
        gateway = self.gateway
        nxt = gateway.next_timer_s()
        self._gateway_timer_s = math.inf if nxt is None else nxt
        self._reserved_now = reserved = gateway.budget.reserved_tokens
        self._state = (reserved, gateway.num_waiting())

    def _apply(self, actions: list[Action], now: float) -> None:
        failed: list[Action] = []
        engine = self.engine
        for action in actions:
            i = action.request.request_id
            if isinstance(action, Admit):
                self.admitted_s[i] = now
                self.reserved_tokens[i] = action.lease.reserved_tokens
                if i in self.beyond_context:  # vLLM's front answers 400 before the engine
                    self._outcome(i, now, "rejected_too_large", self.beyond_context[i],
                                  "too_large")
                    failed.extend(self.gateway.fail(i, now))
                    self._note_gateway()
                elif engine.fits(i):
                    if self._clients is not None:
                        self._clients.admitted(i)
                    engine.add_request(i)
                else:
                    self._outcome(i, now, "rejected_too_large", "max_model_len", "too_large")
                    failed.extend(self.gateway.fail(i, now))
                    self._note_gateway()
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

    def set_status(self, i: int, status: str, reason: str) -> None:
        self.status[i] = STATUS_CODES[status]
        if reason:
            self.reason[i] = reason
        if self._loop is not None and self._loop.running:
            self._user_free(self.env.now)

    # --- closed loop ----------------------------------------------------------------------------
    def _client_delay_s(self, i: int) -> float:
        """What the front end adds to request ``i``'s finish as its client sees it (as the
        records' ``finished_s`` do)."""
        frontend = self.config.resolved_frontend()
        delay = self.config.frontend_overhead_s
        if not frontend.is_zero:
            delay += float(frontend.finish_delay_s(
                self.w.prompt_tokens[i : i + 1], self.w.output_tokens[i : i + 1])[0])
        return delay

    def _user_free(self, t: float) -> None:
        """A user's request ended at ``t``: it sends its next one a think time later."""
        loop = self._loop
        assert loop is not None
        if loop.user_free(t):
            self._sync_next_send()

    def _sync_next_send(self) -> None:
        loop = self._loop
        assert loop is not None
        self._next_arrival_s = loop.next_send_s() if self.next_arrival < self.n else math.inf
        loop.wake()

    def _closed_loop_arrivals(self) -> Generator[simpy.Event, Any, None]:
        loop = self._loop
        assert loop is not None
        env, w = self.env, self.w
        loop.start(env)
        self._sync_next_send()
        while self.next_arrival < self.n:
            t = loop.next_send_s()
            if t > env.now:  # wait for the send time, or for an earlier one to be scheduled
                event = loop.waiter(env)
                if t < math.inf:
                    yield env.any_of([env.timeout(t - env.now), event])
                else:
                    yield event
                continue
            loop.pop()
            i = self.next_arrival
            now_s = max(t, env.now)
            w.arrival_s[i] = now_s
            self.next_arrival = i + 1
            self._sync_next_send()
            if self.progress is not None and (i + 1) % 1000 == 0:
                self.progress(1000)
            offset = loop.deadline_offset_s[i]
            request = Request(i, w.tier_names[w.tier.item(i)], now_s, w.prompt_tokens.item(i),
                              w.max_output_tokens.item(i),
                              None if offset != offset else now_s + float(offset),
                              w.prefix_of(i) if w.prefix_hashes is not None else ())
            now = self.clock(now_s)
            self.carry_out(self.gateway.arrive(request, now), now)
        loop.running = False

    def _arm_timer(self) -> None:
        nxt = self._gateway_timer_s
        if nxt >= self._timer_at:  # also when there is no timer (inf)
            return
        self._timer_at = nxt
        event = self.env.timeout(max(0.0, nxt - self.env.now))
        event.callbacks.append(partial(self._on_timer, nxt))

    def _on_timer(self, at: float, _event: object = None) -> None:
        if at == self._timer_at:
            self._timer_at = math.inf
        now = self.clock(max(at, self.env.now))
        self.carry_out(self.gateway.advance(now), now)

    def _arrivals(self) -> Generator[simpy.Event, Any, None]:
        w = self.w
        if self.n and int(w.request_id.min()) < 0:
            # Workload.request raises on such a row when it is reached
            yield from self._arrivals_one_by_one()
            return
        # the columns as Python lists, a chunk of rows at a time (a million rows' lists would
        # take ~150 MB): the Request of row i (with request_id i) built directly, as
        # ``_with_id(w.request(i), i)`` would build it
        with_prefix = w.prefix_hashes is not None
        env, arrive, clock, carry_out = self.env, self.gateway.arrive, self.clock, self.carry_out
        clients = self._clients
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
                    yield Timeout(env, t - env.now)  # env.timeout, without its descriptor
                self.next_arrival = i + 1
                self._next_arrival_s = arrival[j + 1]
                if self.progress is not None and (i + 1) % 1000 == 0:
                    self.progress(1000)
                d = deadline[j]
                # positional: keyword arguments cost ~0.4 us per request here
                request = Request(
                    i,  # request_id
                    tiers[j],
                    t,  # arrival_s
                    prompt[j],
                    max_output[j],
                    None if d != d else d,  # deadline_s (NaN: none)
                    w.prefix_of(i) if with_prefix else (),
                )
                now = clock(t)
                if clients is not None:
                    clients.sent(i, now)
                carry_out(arrive(request, now), now)

    def _arrivals_one_by_one(self) -> Generator[simpy.Event, Any, None]:
        arrival = self.w.arrival_s
        for i in range(self.n):
            t = float(arrival[i])
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            self.next_arrival = i + 1
            self._next_arrival_s = float(arrival[i + 1]) if i + 1 < self.n else math.inf
            if self.progress is not None and (i + 1) % 1000 == 0:
                self.progress(1000)
            request = self.w.request(i)
            request = _with_id(request, i)
            now = self.clock(t)
            if self._clients is not None:
                self._clients.sent(i, now)
            self.carry_out(self.gateway.arrive(request, now), now)

    # --- run -------------------------------------------------------------------------------
    def run(self, wall_start: float) -> RunResult:
        self.env.process(self._arrivals() if self._loop is None
                         else self._closed_loop_arrivals())
        self.env.run()
        end_t = max(self.engine.t, self.env.now)
        if self._loop is not None:
            self._loop.running = False
            # never sent (their users' requests never ended): they "arrive" at the end
            self.w.arrival_s[self.next_arrival:] = end_t
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
        completed = self.status == STATUS_CODES["completed"]
        # everything the records and summary take from the engine, read first; then the
        # engine and its per-request state are let go (a 10 M-request fleet's replicas hold
        # ~2 GB of them) before the records' own columns are built
        e = self.engine
        # the run's figures first; then the per-row ones, which a fleet reads a replica at a
        # time, letting each one's per-request state go as it goes
        tl = np.array(e.timeline, dtype=np.float64).reshape(-1, 7)
        span = max(e.t, float(w.arrival_s[-1]) if self.n else 0.0) - (
            float(w.arrival_s[0]) if self.n else 0.0
        )
        kv_token_seconds = e.kv_token_seconds()
        num_gpu_blocks, block_size = e.num_gpu_blocks, e.block_size
        num_steps, num_engine_preemptions = e.num_steps, e.num_preemptions_total
        num_recomputed_tokens, stats = e.num_recomputed_tokens, e.stats()
        fig = e.request_figures(completed, np.asarray(w.tier, np.int64))
        output = np.where(completed, w.output_tokens, fig.output_tokens)
        first = fig.first_token_s
        finished = np.where(completed, fig.finished_s, np.nan)
        gap_tier, gap_s, num_gaps = fig.gap_tier, fig.gap_s, fig.num_gaps
        num_preemptions = fig.num_preemptions + self.num_revocations
        recomputed = fig.recomputed_tokens
        recomputed_by_tier = {name: int(recomputed[w.tier == code].sum())
                              for code, name in enumerate(w.tier_names)}
        del recomputed, fig
        engine_figures = {
            "num_steps": num_steps,
            "num_engine_preemptions": num_engine_preemptions,
            "num_gateway_revocations": int(self.num_revocations.sum()),
            "num_recomputed_tokens": num_recomputed_tokens,
            "recomputed_tokens_by_tier": recomputed_by_tier,
            **stats,
        }
        attempts = None
        if self._clients is not None:
            attempts = self._clients.table(w.request_id)
        del e
        self._let_engine_go()
        frontend = self.config.resolved_frontend()
        calibrated = self.config.frontend_overhead_s
        if calibrated or not frontend.is_zero:
            first = first + (calibrated + frontend.first_token_delay_s(w.prompt_tokens))
            finished = finished + (
                calibrated + frontend.finish_delay_s(w.prompt_tokens, output.astype(np.int64))
            )
        ttft, tpot, e2e = derive_latencies(w.arrival_s, first, finished, output)
        # the gaps between a completed request's tokens, each with the front end's per-token
        # cost (as finished_s has it for every token after the first)
        if frontend.per_output_token_s:
            gap_s = gap_s + frontend.per_output_token_s
        token_gaps = aggregate_token_gaps(gap_tier, list(w.tier_names), gap_s, num_gaps)
        del gap_tier, gap_s, num_gaps
        ttft = np.where(completed, ttft, np.nan)
        tpot = np.where(completed, tpot, np.nan)
        status_names = np.array(STATUSES, dtype=object)[self.status]
        reason = np.full(self.n, "", dtype=object)
        for i, why in self.reason.items():
            reason[i] = why
        tier_names = np.array(w.tier_names, dtype=object)[w.tier]
        records: dict[str, Any] = {
            "request_id": w.request_id,
            "tier": tier_names,
            "arrival_s": w.arrival_s,
            "prompt_tokens": w.prompt_tokens,
            "max_output_tokens": w.max_output_tokens,
            "output_tokens": output.astype(np.int64),
            "status": status_names,
            "reason": reason,
            "admitted_s": self.admitted_s,
            "first_token_s": first,
            "finished_s": finished,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "num_preemptions": num_preemptions,
            "reserved_tokens": self.reserved_tokens,
        }
        if self._clients is not None:
            records["num_attempts"] = self._clients.attempt.copy()
        timeline: dict[str, Any] = {
            "time_s": tl[:, 0],
            "kv_used_tokens": tl[:, 1].astype(np.int64),
            "kv_reserved_tokens": tl[:, 2].astype(np.int64),
            "kv_capacity_tokens": tl[:, 3].astype(np.int64),
            "num_running": tl[:, 4].astype(np.int64),
            "num_waiting": tl[:, 5].astype(np.int64),
            "num_preemptions": tl[:, 6].astype(np.int64),
        }
        summary = summarize(
            records,
            timeline,
            tiers=self.config.tiers,
            kv_capacity_tokens=self.kv_capacity_tokens,
            policy=self.policy.name,
            seed=self.config.seed,
            wall_time_s=wall_time_s,
            kv_token_seconds=(kv_token_seconds, self._reserved_ts, span),
            attempts=attempts,
            token_gaps=token_gaps,
            extra={
                "policy_params": _jsonable(self.policy.describe()),
                "gpu": self.config.gpu,
                "model": self.config.model,
                "num_gpu_blocks": num_gpu_blocks,
                "block_size": block_size,
                "cost_model": _jsonable(self.setup.cost_model.describe()),
                "frontend_overhead_s": self.config.frontend_overhead_s,
                "frontend": {"name": self.config.frontend, **_jsonable(
                    {k: getattr(frontend, k) for k in frontend.__dataclass_fields__})},
                "engine_defaults": self.config.engine_defaults,
                "engine": engine_figures,
                "workload": {"name": w.name, "num_requests": self.n},
                **({"closed_loop": self._loop.describe()} if self._loop is not None else {}),
                **(
                    {"clients": self._clients.describe()} if self._clients is not None else {}
                ),
            },
        )
        return RunResult(records, timeline, summary, attempts, token_gaps)

    def _let_engine_go(self) -> None:
        """Drop the engine, the gateway and the clock once the results have been read from
        them (``_result``): the engine's per-request state is freed before the records are
        built. The simulation cannot go on after this."""
        del self.engine, self.gateway, self.env
        if self.n >= _COLLECT_ROWS:
            gc.collect()  # the engine's processes, hooks and replicas refer to one another


class _ClosedLoopState:
    """The users of a closed loop: a heap of the times of the sends they have scheduled, and
    the think times drawn from the run's seed (one stream, in the order users become free)."""

    def __init__(self, workload: Workload, loop: ClosedLoop, seed: int) -> None:
        n = len(workload)
        self.loop = loop
        self.deadline_offset_s = (workload.deadline_s - workload.arrival_s).tolist()
        # a capped open loop: the i-th request is not sent before its own arrival
        self.not_before_s = workload.arrival_s.tolist() if loop.not_before_arrival else None
        self.num_sent = 0
        # zeros until sent (a Workload's arrivals are finite and sorted; sends keep them sorted)
        self.workload = replace(workload, arrival_s=np.zeros(n), deadline_s=np.full(n, np.nan))
        self.n = n
        self.rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC105ED]))
        self.pending: list[float] = []
        self.num_scheduled = 0
        self.running = False
        self._event: simpy.Event | None = None

    def start(self, env: simpy.Environment) -> None:
        self.running = True
        for _ in range(min(self.loop.num_users, self.n)):
            heapq.heappush(self.pending, env.now)
            self.num_scheduled += 1

    def think_s(self) -> float:
        return self.loop.think_s(self.rng)

    def user_free(self, t: float) -> bool:
        """Schedule the free user's next send; False when every request is scheduled."""
        if not self.running or self.num_scheduled >= self.n:
            return False
        heapq.heappush(self.pending, t + self.think_s())
        self.num_scheduled += 1
        return True

    def next_send_s(self) -> float:
        t = self.pending[0] if self.pending else math.inf
        if self.not_before_s is not None and self.num_sent < self.n:
            return max(t, float(self.not_before_s[self.num_sent]))
        return t

    def pop(self) -> float:
        t = heapq.heappop(self.pending)
        if self.not_before_s is not None:
            t = max(t, float(self.not_before_s[self.num_sent]))
        self.num_sent += 1
        return t

    def waiter(self, env: simpy.Environment) -> simpy.Event:
        self._event = env.event()
        return self._event

    def wake(self) -> None:
        if self._event is not None and not self._event.triggered:
            self._event.succeed()

    def describe(self) -> dict[str, Any]:
        return self.loop.describe()


class _Probe:
    """What a policy may read of the simulated engine."""

    def __init__(self, engine: ServingEngine) -> None:
        self._engine = engine

    def num_output_tokens(self, request_id: int) -> int:
        return self._engine.output_tokens_of(request_id)

    @property
    def num_preemptions_total(self) -> int:
        return self._engine.num_preemptions_total


def _with_id(request: Any, i: int) -> Any:
    if request.request_id == i:
        return request
    return replace(request, request_id=i)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float | int | str | bool) or obj is None:
        return obj
    return str(obj)


def context_refusals(workload: Workload, limit: int) -> dict[int, str]:
    """Rows vLLM's front refuses (HTTP 400) for the model's context length ``L`` (``limit``:
    the engine's ``max_model_len`` when set, else the model's ``max_position_embeddings``,
    vLLM's default, as :meth:`SimConfig.engine_for` fills it in).
    A prompt longer than ``L`` is ``prompt_too_long`` (vLLM, commit 01055a4b,
    vllm/v1/engine/processor.py ``Processor._validate_model_input``: ``if prompt_len >
    max_prompt_len`` with ``max_prompt_len = model_config.max_model_len``, "The decoder prompt
    (length N) is longer than the maximum model length of L"); a prompt plus the request's own
    ``max_tokens`` over ``L`` is ``context_length`` (vllm/entrypoints/openai/serving_engine.py
    ``OpenAIServing._validate_input``: ``token_num + max_tokens > self.max_model_len``, "This
    model's maximum context length is L tokens. However, you requested ...")."""
    prompt = workload.prompt_tokens
    total = prompt + workload.max_output_tokens
    out: dict[int, str] = {}
    for i in np.flatnonzero(total > limit).tolist():
        out[int(i)] = "prompt_too_long" if prompt.item(i) > limit else "context_length"
    return out


def simulate(
    workload: Workload,
    policy: BasePolicy,
    config: SimConfig | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Simulate ``workload`` through the gateway ``policy`` and the engine model.

    Gateway request ids are the workload's row numbers; the records carry the workload's own
    ``request_id`` column. ``progress`` is called with the number of requests offered since its
    last call (every 1,000 arrivals), for a progress bar.
    """
    wall_start = time.perf_counter()
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    config = config or SimConfig()
    _check_timeline_size(workload, config.timeline_period_s)
    # the GPU and the model looked up, the engine's defaults filled in and the step-time model
    # built once for the run (a fleet's replicas size their own KV blocks)
    setup = config.replica_setup(with_blocks=config.fleet is None)
    if config.cost_model is not None or config.gpu.endswith((".json", ".toml")) or (
            config.model.endswith(".json") or "/" in config.model):
        _check_step_time(setup.cost_model,  # figures from a file: bounded
                         f"gpu {config.gpu}, model {config.model}"
                         + ("" if config.cost_model is None else ", the given cost model"))
    return _Simulation(workload, policy, config, setup, progress).run(wall_start)


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
