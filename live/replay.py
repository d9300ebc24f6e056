"""The live gateway: replay a workload through an admission policy against a real server.

The same :class:`policies.Gateway` state machine and :class:`policies.Policy` objects as the
simulator decide admission; this module only supplies a clock (``time.perf_counter``) and carries
out the gateway's actions on the asyncio event loop:

* ``Admit`` streams the request to the server (exact prompt and output lengths, see
  :mod:`kvbudget.live.openai_client`), behind a safety cap on requests in flight;
* ``Revoke`` cancels the stream (closing the connection makes vLLM abort the request and free its
  KV blocks); a re-queued request is streamed again from scratch when re-admitted;
* ``Reject`` records the refusal.

With client models (``ReplayConfig.clients``, or per-request ``timeout_s`` in the workload) the
replay also plays each tier's client (:mod:`kvbudget.policies.clients`), exactly as the
simulator does: a refusal (the gateway's, or the server's HTTP 429/503 with its
``Retry-After``), a backend error or the client's own timeout ends an *attempt*; the client
model says whether and when the next one is sent (it sleeps on the run's clock, jitter drawn
from a generator seeded by the run's seed); a timeout cancels the stream (the server aborts the
request and frees its KV) and the gateway forgets the request. Every attempt is a row of
``attempts.parquet``; the request's row counts ``num_attempts``.

Arrivals are open loop at the workload's timestamps; a timer task applies admission deadlines
and lease expiry when :meth:`Gateway.next_timer_s` says; a poller scrapes ``/metrics`` into the
timeline. Every finished request is appended to the run directory at once
(:mod:`kvbudget.live.run_dir`). When the server stops answering, the replay stops, keeps what
finished and reports :class:`ReplayOutcome.error`; a later run with ``resume=True`` replays only
the requests that have no row yet.

Times: the run's clock equals the trace's (its zero is the trace's zero), so ``arrival_s`` in
the records is when the request actually reached the gateway on that clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import numpy as np
import numpy.typing as npt

from kvbudget.live.openai_client import (
    TRANSPORT_ERRORS,
    ServerTarget,
    StreamResult,
    stream_completion,
)
from kvbudget.live.replay_limit import keep_time_limit, sent_by_limit
from kvbudget.live.replay_ticks import TickedUsers
from kvbudget.live.replay_turns import TurnUsers, history_of, turns_said, users_in_order
from kvbudget.live.run_dir import (
    TOKEN_GAPS_KEY,
    RunDir,
    attempts_frame,
    engine_preemptions,
    read_parts,
    token_gaps_of_parts,
    write_outputs,
)
from kvbudget.live.server import (
    BackendUnavailable,
    ServerInfo,
    discover,
    fetch_snapshot,
    server_alive,
    with_model,
)
from kvbudget.live.server_metrics import EngineSnapshot, kv_used_unknown_said
from kvbudget.policies import (
    DEFAULT_TIERS,
    Action,
    Admit,
    FrontDoor,
    Gateway,
    GatewayConfig,
    Policy,
    Reject,
    Request,
    RequestTooLarge,
    Revoke,
    TierConfig,
)
from kvbudget.policies.clients import CLIENT_SEED_TAG, NO_RETRY, Answer, ClientModel
from kvbudget.results.metrics import summarize
from kvbudget.results.recorded_refusals import engine_rules_said
from kvbudget.results.records import (
    TIME_LIMIT_CANCELLED,
    TIME_LIMIT_NOT_SENT,
    context_refusal,
    derive_latencies,
    engine_refusal,
    server_refusal,
)
from kvbudget.results.run_parts import itl_means_of, token_gaps_of_rows
from kvbudget.results.said import context_cut, time_limit_said
from kvbudget.workloads import Workload
from kvbudget.workloads.closed_loop import ClosedLoop, TimeLimit
from kvbudget.workloads.context_limit import context_refusals, cut_to_context

if TYPE_CHECKING:
    import pandas as pd

_T = TypeVar("_T")
_REASON_STATUS = {
    "deadline": "expired",
    "preempted": "preempted_dropped",
    "lease_expired": "preempted_dropped",
}
BACKEND_ERROR = "backend_error"


CLOSED_LOOP_TAG = 0xC105ED
"""Mixed into the seed of a closed loop's think times."""


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """How to replay, besides the workload and the policy.

    ``capacity_tokens``: the gateway's budget; ``None`` reads the server's KV capacity from
    ``/metrics`` (vLLM: ``num_gpu_blocks * block_size``). ``block_size``: reservations are
    rounded up to it (the engine allocates whole blocks); ``None`` takes the server's.
    ``max_in_flight``: a safety cap on streams open at once, whatever the policy admits.
    ``token_ids``: the half-open range prompt token ids are drawn from (seeded per request);
    the default is valid for any vocabulary of at least 256 entries. ``poll_period_s``: how
    often ``/metrics`` is scraped (a scrape costs the API server a few milliseconds, on the
    same cores that stream the tokens on a CPU server). ``front_door``: the gateway's caps on
    concurrency and queues (429/503 before any reservation), as in the simulator.
    ``clients``: ``(tier, ClientModel)`` pairs: what each tier's client does with answers
    (a tier not named has ``no-retry``; none at all replays as before client models).
    ``closed_loop``: send as :class:`kvbudget.workloads.closed_loop.ClosedLoop` users do
    instead of at the trace's times (each request's ``arrival_s`` is when it was sent); a
    capped loop (``not_before_arrival``) sends a request no sooner than its own time either,
    one paced by ticks (``tick_rate_per_s``) at its ticks (:mod:`kvbudget.live.replay_ticks`);
    a loop of conversations
    (``ClosedLoop.conversations``) sends each later turn as the simulator's users do
    (:mod:`kvbudget.live.replay_turns`), and is not resumed. ``time_limit``: a load tool's time
    limit kept as the tool kept it (:mod:`kvbudget.live.replay_limit`; a time-limited loop's
    ``send_until_s`` is its ``send_until_s``); not with client models, whose retries would go
    on past it.
    """

    target: ServerTarget
    tiers: tuple[TierConfig, ...] = DEFAULT_TIERS
    capacity_tokens: int | None = None
    block_size: int | None = None
    lease_ttl_s: float | None = None
    max_in_flight: int = 256
    poll_period_s: float = 1.0
    token_ids: tuple[int, int] = (10, 250)
    seed: int = 0
    front_door: FrontDoor | None = None
    clients: tuple[tuple[str, ClientModel], ...] = ()
    closed_loop: ClosedLoop | None = None
    time_limit: TimeLimit | None = None

    def __post_init__(self) -> None:
        names = {t.name for t in self.tiers}
        for tier, _ in self.clients:
            if tier not in names:
                raise ValueError(f"clients.{tier}: no such tier; tiers: {sorted(names)}")
        if self.capacity_tokens is not None and self.capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1, got {self.capacity_tokens!r}")
        if self.block_size is not None and self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size!r}")
        if self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {self.max_in_flight!r}")
        if not (math.isfinite(self.poll_period_s) and self.poll_period_s > 0):
            raise ValueError(f"poll_period_s must be > 0, got {self.poll_period_s!r}")
        lo, hi = self.token_ids
        if not 0 <= lo < hi:
            raise ValueError(f"token_ids must be a range 0 <= low < high, got {self.token_ids!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        until = None if self.closed_loop is None else self.closed_loop.send_until_s
        if until is not None and (self.time_limit is None
                                  or self.time_limit.send_until_s != until):
            # its users would go on sending past the limit: a time-limited run replayed whole
            raise ValueError(f"closed_loop.send_until_s {until:g}: the live replay keeps a time "
                             "limit given as time_limit (with its grace period), the same")
        if self.time_limit is not None and self.clients:
            raise ValueError("time_limit: not with client models (clients), whose retries "
                             "would go on past the limit")


@dataclass(eq=False)
class ReplayOutcome:
    """What a replay produced. ``complete`` is False when it stopped early (``error`` says why);
    the records then hold every request that finished, and the run directory can be resumed.
    ``itl_mean_s``: per row of ``records``, the mean time apart of its tokens after the first
    as the client read them (:func:`~kvbudget.results.run_parts.itl_means_of_parts`; None: not
    known), from which ``validate --url`` finds the answers the client read whole at once;
    ``token_gaps_s``: per row, the gaps between its answer's chunks as the client read them
    (:func:`~kvbudget.results.run_parts.token_gaps_of_rows`; None: not completed, or not
    kept), from which it compares ITL over the other requests."""

    records: pd.DataFrame
    timeline: pd.DataFrame
    summary: dict[str, Any]
    complete: bool
    error: str = ""
    num_replayed: int = 0
    itl_mean_s: npt.NDArray[np.float64] | None = None
    token_gaps_s: list[npt.NDArray[np.float64] | None] | None = None


@dataclass(eq=False)
class _State:
    index: int
    request: Request
    true_output_tokens: int
    arrival_s: float = math.nan
    admitted_s: float = math.nan
    first_token_s: float = math.nan
    reserved_tokens: int = 0
    num_revocations: int = 0
    tokens_so_far: int = 0
    generation: int = 0
    task: asyncio.Task[None] | None = None
    attempt: int = 0  # attempts sent (client models)
    in_flight: bool = False
    attempt_row: dict[str, Any] | None = None


class _Probe:
    """What a policy may read of the live engine."""

    def __init__(self, replay: _Replay) -> None:
        self._replay = replay

    def num_output_tokens(self, request_id: int) -> int:
        st = self._replay.states.get(request_id)
        return 0 if st is None else st.tokens_so_far

    @property
    def num_preemptions_total(self) -> int:
        return self._replay.engine_preemptions


def scale_time(workload: Workload, time_scale: float) -> Workload:
    """The workload with every arrival time multiplied by ``time_scale`` (0.5 replays twice as
    fast); explicit deadlines keep their distance to the arrival."""
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
    if time_scale == 1.0:
        return workload
    arrival = workload.arrival_s * time_scale
    deadline = arrival + (workload.deadline_s - workload.arrival_s)
    return replace(workload, arrival_s=arrival, deadline_s=deadline)


def prompt_token_ids(request_id: int, length: int, seed: int, token_ids: tuple[int, int]
                     ) -> list[int]:
    """The prompt of one request: ``length`` ids drawn from ``token_ids`` with a generator
    seeded by ``(seed, request_id)`` (the same prompt on every attempt and every run)."""
    rng = np.random.default_rng([seed, request_id])
    return [int(x) for x in rng.integers(token_ids[0], token_ids[1], size=length)]


PREFIX_STREAM = 1
"""The draws of a prompt block named by a prefix hash (``[seed, PREFIX_STREAM, hash]``), apart
from a request's own (``[seed, request_id]``)."""


def prompt_of(workload: Workload, i: int, length: int, seed: int, token_ids: tuple[int, int]
              ) -> list[int]:
    """Row ``i``'s prompt of ``length`` ids: a block of ``prefix_block_tokens`` ids drawn for
    each of its leading prefix hashes that names a whole block of it (the blocks the
    simulation's prefix cache shares: ``simulator/prefix_cache.py``), so rows whose hashes
    agree send the same ids there and the server's prefix cache can serve them (Mooncake's
    ``hash_ids``, a recording's conversation so far); then ids of its own
    (:func:`prompt_token_ids`)."""
    hashes = workload.prefix_of(i)
    block = workload.prefix_block_tokens
    prompt: list[int] = []
    for h in hashes[: length // block]:
        rng = np.random.default_rng([seed, PREFIX_STREAM, h & 0xFFFF_FFFF_FFFF_FFFF])
        prompt += rng.integers(token_ids[0], token_ids[1], size=block).tolist()
    return prompt + prompt_token_ids(int(workload.request_id[i]), length - len(prompt), seed,
                                     token_ids)


def shared_blocks_said(workload: Workload) -> tuple[str, ...]:
    """How the prompts of a workload with prefix hashes were made (:func:`prompt_of`): how
    many of its requests share a block with another; ``()`` without hashes."""
    if workload.prefix_hashes is None:
        return ()
    block = workload.prefix_block_tokens
    rows = [workload.prefix_of(i)[: int(workload.prompt_tokens[i]) // block]
            for i in range(len(workload))]
    seen = Counter(h for hashes in rows for h in set(hashes))
    num_sharing = sum(1 for hashes in rows if any(seen[h] > 1 for h in hashes))
    return (f"prompts from the workload's prefix hashes: each whole {block}-token block a hash "
            "names is the same token ids in every request naming it, as the simulation shares "
            f"its KV ({num_sharing:,} of {len(workload):,} requests share a block with another),"
            " so the server's prefix cache can serve them where it caches; the rest of each "
            "prompt is token ids of its own",)


class _Replay:
    def __init__(self, workload: Workload, policy: Policy, config: ReplayConfig, run_dir: RunDir,
                 on_record: Callable[[Mapping[str, Any]], None] | None) -> None:
        self.workload = workload
        self.policy = policy
        self.config = config
        self.target = config.target
        self.run_dir = run_dir
        self.on_record = on_record
        done = set(run_dir.done)
        self.todo = [i for i in range(len(workload)) if int(workload.request_id[i]) not in done]
        self.states: dict[int, _State] = {}
        self.pending: set[int] = set(self.todo)
        self.engine_preemptions = 0
        self.preemptions_base: int | None = None
        self._preemptions_last = 0
        self._preemptions_before_reset = 0
        self.snapshot: EngineSnapshot | None = None
        self.fatal = ""
        self.finished = asyncio.Event()
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.done_events: dict[int, asyncio.Event] = {}  # closed loop: set when i is recorded
        # a closed loop of conversations, or one paced by ticks: told when a row ends
        self.turn_users: TurnUsers | TickedUsers | None = None
        self.limit_phase = 0  # 1: the time limit passed (nothing more sent); 2: its grace too
        self.num_written = 0
        self.max_model_len: int | None = None
        self.sends: dict[int, tuple[int, int]] = {}  # row -> (max_tokens, min_tokens) to send
        self.num_kv_unknown = 0  # timeline rows whose KV in use the server did not tell
        self.kv_capacity_tokens = 0
        self.engine_capacity_tokens: int | None = None
        self._t0 = time.perf_counter()
        self._offset = float(workload.arrival_s[self.todo[0]]) if self.todo else 0.0
        self.gateway: Gateway | None = None
        self.client: httpx.AsyncClient | None = None
        self.slots = asyncio.Semaphore(config.max_in_flight)
        self.with_clients = bool(config.clients) or workload.timeout_s is not None
        by_tier = dict(config.clients)
        self.client_of: dict[str, ClientModel] = {
            t: by_tier.get(t, NO_RETRY) for t in workload.tier_names
        }
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, CLIENT_SEED_TAG]))

    # --- clock ------------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self._t0 + self._offset

    # --- set-up -----------------------------------------------------------------------------
    async def run(self, info: ServerInfo,
                  on_start: Callable[[int, int], None] | None) -> None:
        limits = httpx.Limits(max_connections=self.config.max_in_flight + 4,
                              max_keepalive_connections=self.config.max_in_flight + 4)
        async with httpx.AsyncClient(limits=limits, timeout=self.target.timeout()) as client:
            self.client = client
            self.target = with_model(self.target, info)
            self.max_model_len = info.max_model_len
            if info.max_model_len is not None:
                self.sends = context_sends(self.workload, info.max_model_len)
            self.engine_capacity_tokens = info.kv_capacity_tokens
            capacity = gateway_capacity(self.config, info)
            self.kv_capacity_tokens = capacity
            block = self.config.block_size or info.block_size or 1
            self.gateway = Gateway(
                GatewayConfig(capacity_tokens=capacity, tiers=self.config.tiers,
                              lease_ttl_s=self.config.lease_ttl_s,
                              reservation_granularity=block,
                              front_door=self.config.front_door),
                self.policy,
                engine=_Probe(self),
            )
            if on_start is not None:
                on_start(len(self.workload) - len(self.todo), len(self.todo))
            # the run's clock starts here, so that the first scrape is the timeline's first row
            # (it was timed from before the gateway was built, and sorted after later rows)
            self._t0 = time.perf_counter()
            if info.has_metrics:
                await self._scrape()
            if not self.todo:
                return
            workers = [
                _task_of(self._arrivals()),
                _task_of(self._timers()),
                _task_of(self._poll(info.has_metrics)),
            ]
            if self.config.time_limit is not None:
                workers.append(_task_of(keep_time_limit(
                    self.config.time_limit, clock=self.now, stop_sending=self._stop_sending,
                    cancel_running=self._cancel_running)))
            try:
                await self.finished.wait()
            finally:
                pending = [*workers, *self.tasks]
                for task in pending:
                    task.cancel()
                done, _ = await asyncio.wait(pending, timeout=10.0)
                for task in done:
                    # a task that failed as it was cancelled (an interrupt inside httpx's own
                    # task group, mid-scrape) has nothing more to say: its exception is
                    # retrieved here, else asyncio prints it with a traceback at exit
                    if not task.cancelled():
                        task.exception()
            if info.has_metrics and not self.fatal:
                await self._scrape()

    def _stop(self, message: str) -> None:
        if not self.fatal:
            self.fatal = message
        self.finished.set()

    # --- arrivals, timers, metrics ----------------------------------------------------------------
    async def _arrivals(self) -> None:
        if self.config.closed_loop is not None:
            await self._closed_loop(self.config.closed_loop)
            return
        try:
            for i in self.todo:
                due = float(self.workload.arrival_s[i])
                if not sent_by_limit(due, self.config.time_limit):
                    return  # due after the limit: never sent (_stop_sending)
                if due - self.now() > 0:
                    await asyncio.sleep(due - self.now())
                self._arrive(i)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must stop the run loudly, not hang it
            self._stop(f"internal error in the arrival loop: {exc!r}")

    async def _closed_loop(self, loop: ClosedLoop) -> None:
        """``num_users`` users, each sending the next request of the trace a think time after
        its last one ended (its record written); a capped loop's (``not_before_arrival``)
        no sooner than the request's own arrival either (:mod:`kvbudget.live.replay_turns`)."""
        rng = np.random.default_rng(np.random.SeedSequence([self.config.seed, CLOSED_LOOP_TAG]))
        not_before = self.workload.arrival_s.tolist() if loop.not_before_arrival else None
        try:
            if loop.tick_rate_per_s is not None:  # AIPerf's capped rate: at its ticks
                self.turn_users = TickedUsers(loop, self.todo, first_ticks=not_before or [],
                                              clock=self.now, send=self._arrive,
                                              seed=self.config.seed)
                await self.turn_users.run()
                return
            if loop.conversations is None:
                await users_in_order(loop, self.todo, clock=self.now, send=self._arrive,
                                     ended=self._ended_event, rng=rng, not_before_s=not_before)
                return
            # TurnOrder says which row a user sends next
            self.turn_users = TurnUsers(loop, len(self.workload), clock=self.now,
                                        send=self._arrive, rng=rng, not_before_s=not_before)
            await self.turn_users.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must stop the run loudly, not hang it
            self._stop(f"internal error in the closed loop: {exc!r}")

    def _ended_event(self, i: int) -> asyncio.Event:
        return self.done_events.setdefault(i, asyncio.Event())

    def _arrive(self, i: int) -> None:
        """Request ``i`` arrives now (a closed loop's, unless the time limit passed)."""
        if i not in self.pending or (self.limit_phase and self.config.closed_loop is not None):
            return
        request = self.workload.request(i)
        st = _State(i, request, int(self.workload.output_tokens[i]))
        st.arrival_s = self.now()
        self.states[i] = st
        if self.limit_phase == 2:  # due at the limit, its grace period 0: cancelled as sent
            self._record(st, "client_timeout", TIME_LIMIT_CANCELLED)
            return
        arrival, deadline = request.arrival_s, request.deadline_s
        if self.config.closed_loop is not None:  # sent now: the deadline keeps its distance
            arrival = st.arrival_s
            deadline = None if deadline is None else arrival + deadline - request.arrival_s
        gateway_request = Request(
            request_id=i, tier=request.tier, arrival_s=arrival,
            prompt_tokens=request.prompt_tokens,
            max_output_tokens=request.max_output_tokens,
            deadline_s=deadline, prefix_hashes=request.prefix_hashes,
        )
        st.request = gateway_request
        now = self.now()
        if self.with_clients:
            self._send(st, st.arrival_s)  # the first attempt's time is the arrival
            return
        self._apply(self._gw().arrive(gateway_request, now), now)

    async def _timers(self) -> None:
        try:
            while True:
                nxt = self._gw().next_timer_s()
                timeout = None if nxt is None else max(0.0, nxt - self.now())
                self.wake.clear()
                if timeout is None or timeout > 0:
                    # asyncio.timeout, not wait_for: in Python 3.11 wait_for can swallow a
                    # cancellation that arrives as the event is set, and this loop would then
                    # outlive the replay (a Ctrl-C that never ends)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(timeout):
                            await self.wake.wait()
                else:
                    await asyncio.sleep(0)
                now = self.now()
                self._apply(self._gw().advance(now), now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stop(f"internal error in the gateway timer: {exc!r}")

    async def _scrape(self) -> bool:
        assert self.client is not None
        try:
            snap = await fetch_snapshot(self.client, self.target)
        except httpx.HTTPError:
            return False
        self.snapshot = snap
        total = snap.num_preemptions_total
        if total is not None:
            if self.preemptions_base is None:
                self.preemptions_base = self._preemptions_last = total
            if total < self._preemptions_last:
                # a counter that went down was reset (the server restarted): what it had
                # counted still happened, and it counts on from zero (Prometheus's rule)
                self._preemptions_before_reset += self._preemptions_last
            self._preemptions_last = total
            self.engine_preemptions = (total + self._preemptions_before_reset
                                       - self.preemptions_base)
        self._timeline_row(snap)
        return True

    def _timeline_row(self, snap: EngineSnapshot) -> None:
        gw = self._gw()
        cap = self.engine_capacity_tokens or self.kv_capacity_tokens
        used = snap.kv_used_tokens(cap)
        self.num_kv_unknown += used is None  # written as 0: the summary says so
        running = snap.num_running if snap.num_running is not None else len(gw.admitted)
        waiting = (snap.num_waiting or 0) + gw.num_waiting()
        self.run_dir.write_timeline({
            "time_s": self.now(),
            "kv_used_tokens": 0 if used is None else used,
            "kv_reserved_tokens": gw.budget.reserved_tokens,
            "kv_capacity_tokens": cap,
            "num_running": running,
            "num_waiting": waiting,
            "num_preemptions": self.engine_preemptions,
        })

    async def _poll(self, has_metrics: bool) -> None:
        assert self.client is not None
        while True:
            await asyncio.sleep(self.config.poll_period_s)
            if not has_metrics:
                continue
            if not await self._scrape() and not await server_alive(self.client, self.target):
                self._stop(f"the server at {self.target.base_url} stopped answering")
                return

    # --- gateway actions ----------------------------------------------------------------------
    def _gw(self) -> Gateway:
        assert self.gateway is not None
        return self.gateway

    def _apply(self, actions: Sequence[Action], now: float) -> None:
        for action in actions:
            st = self.states[action.request.request_id]
            if isinstance(action, Admit):
                st.admitted_s = now
                st.reserved_tokens = action.lease.reserved_tokens
                st.generation += 1
                st.tokens_so_far = 0
                task = _task_of(self._attempt(st, st.generation))
                st.task = task
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            elif isinstance(action, Revoke):
                st.num_revocations += 1
                st.generation += 1
                if action.requeued:
                    st.tokens_so_far = 0  # its work is lost; it starts again when re-admitted
                if st.task is not None:
                    st.task.cancel()
                    st.task = None
            elif isinstance(action, Reject):
                error = action.error
                if isinstance(error, RequestTooLarge):
                    self._ended(st, now, "too_large", "", None, "rejected_too_large", "")
                else:
                    reason = error.reason
                    answer: Answer = "overloaded_retryable" if error.retryable else "overloaded"
                    self._ended(st, now, answer, reason, error.retry_after_s,
                                _REASON_STATUS.get(reason, "rejected_overloaded"), reason)
        self.wake.set()

    # --- clients (see the module doc) ---------------------------------------------------------
    def _send(self, st: _State, now: float) -> None:
        """Send attempt ``st.attempt + 1`` of a request to the gateway at ``now``."""
        st.attempt += 1
        st.in_flight = True
        st.first_token_s = math.nan  # the user's first token is the final attempt's
        req = st.request
        if st.attempt > 1:
            req = Request(request_id=req.request_id, tier=req.tier, arrival_s=now,
                          prompt_tokens=req.prompt_tokens,
                          max_output_tokens=req.max_output_tokens,
                          deadline_s=req.deadline_s, prefix_hashes=req.prefix_hashes)
            st.request = req
        st.attempt_row = {"request_id": int(self.workload.request_id[st.index]),
                          "attempt": st.attempt, "sent_s": now}
        timeout = self._timeout_of(st)
        if timeout is not None:
            self._spawn(self._time_out_at(st, st.attempt, now + timeout))
        self._apply(self._gw().arrive(req, now), now)

    def _timeout_of(self, st: _State) -> float | None:
        own = self.workload.timeout_s
        if own is not None and not math.isnan(float(own[st.index])):
            return float(own[st.index])
        return self.client_of[st.request.tier].timeout_s

    def _spawn(self, coro: Any) -> None:
        task = _task_of(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _time_out_at(self, st: _State, attempt: int, at: float) -> None:
        try:
            delay = at - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            if st.attempt != attempt or not st.in_flight:
                return
            now = self.now()
            st.generation += 1  # the stream, if any, no longer owns the request
            if st.task is not None:
                st.task.cancel()  # closing the connection makes the server abort it
                st.task = None
            actions = self._gw().cancel(st.request.request_id, now)
            self._ended(st, now, "timeout", "", None, "client_timeout", "")
            self._apply(actions, now)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stop(f"internal error in a client timeout: {exc!r}")

    async def _send_at(self, st: _State, at: float) -> None:
        try:
            delay = at - self.now()
            if delay > 0:
                await asyncio.sleep(delay)
            self._send(st, max(at, self.now()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stop(f"internal error in a client retry: {exc!r}")

    def _ended(self, st: _State, now: float, answer: Answer, reason: str,
               retry_after_s: float | None, status: str, status_reason: str, *,
               result: StreamResult | None = None) -> None:
        """An attempt ended unanswered: the client retries, or ``status`` is final."""
        if not self.with_clients:
            self._record(st, status, status_reason, result=result)
            return
        if not st.in_flight:
            return
        at = self.client_of[st.request.tier].next_attempt_s(
            answer, attempt=st.attempt, now_s=now, first_s=st.arrival_s,
            retry_after_s=retry_after_s, rng=self.rng,
        )
        deadline = st.request.deadline_s
        if at is not None and deadline is not None and at > deadline:
            at = None
        self._close_attempt(st, now, answer, reason, retry_after_s, at)
        if at is None:
            self._record(st, status, status_reason, result=result)
        else:
            self._spawn(self._send_at(st, at))

    def _close_attempt(self, st: _State, now: float, answer: str, reason: str,
                       retry_after_s: float | None, next_s: float | None) -> None:
        st.in_flight = False
        row = st.attempt_row
        if row is None:
            return
        row.update({"ended_s": now, "answer": answer, "reason": reason,
                    "retry_after_s": retry_after_s, "next_attempt_s": next_s})
        self.run_dir.write_attempt(row)
        st.attempt_row = None

    async def _attempt(self, st: _State, generation: int) -> None:
        try:
            await self._attempt_inner(st, generation)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._stop(f"internal error on request {int(self.workload.request_id[st.index])}: "
                       f"{exc!r}")

    async def _attempt_inner(self, st: _State, generation: int) -> None:
        assert self.client is not None
        req = st.request
        max_tokens, min_tokens = self.sends.get(st.index, (st.true_output_tokens, None))
        prompt = prompt_of(self.workload, st.index, req.prompt_tokens, self.config.seed,
                           self.config.token_ids)

        def on_chunk(tokens: int) -> None:
            if st.generation == generation:
                st.tokens_so_far = tokens
                self._gw().progress(req.request_id, req.prompt_tokens + tokens)

        async with self.slots:
            result = await stream_completion(self.client, self.target, prompt, max_tokens,
                                             clock=self.now, on_chunk=on_chunk,
                                             min_tokens=min_tokens)
        if st.generation != generation:
            return  # revoked while finishing: the re-queued attempt owns the request now
        if result.chunk_s:
            st.first_token_s = min(st.first_token_s, result.first_token_s) if math.isfinite(
                st.first_token_s) else result.first_token_s
        if result.ok:
            now = self.now()
            if self.with_clients and st.in_flight:
                self._close_attempt(st, now, "completed", "", None, None)
            self._record(st, "completed", "", result=result)
            self._apply(self._gw().finish(req.request_id, result.output_tokens, now), now)
            return
        if result.error_kind in TRANSPORT_ERRORS and not await server_alive(
            self.client, self.target
        ):
            self._stop(f"the server at {self.target.base_url} stopped answering "
                       f"({result.error})")
            return
        if st.generation != generation:
            return
        now = self.now()
        answer, reason = _server_answer(result)
        actions = self._gw().fail(req.request_id, now)
        self._ended(st, now, answer, reason, result.retry_after_s, *_recorded(result, reason),
                    result=result)
        self._apply(actions, now)

    # --- a load tool's time limit (:mod:`kvbudget.live.replay_limit`) ---------------------------
    def _stop_sending(self) -> None:
        """The limit: the rows not sent by now (an open stage's: due after it) never are."""
        self.limit_phase = 1
        self.turn_users = None  # its users send nothing more: none is told of an end
        limit = self.config.time_limit
        assert limit is not None
        for i in [i for i in self.todo if i in self.pending and i not in self.states]:
            due = float(self.workload.arrival_s[i])
            if self.config.closed_loop is None and sent_by_limit(due, limit):
                continue  # the arrival loop sends it at its time
            st = _State(i, self.workload.request(i), 0, arrival_s=max(due, limit.send_until_s))
            self._record(st, "client_timeout", TIME_LIMIT_NOT_SENT)

    def _cancel_running(self) -> None:
        """The grace period's end: what still runs is cancelled (the stream closed: vLLM
        aborts it) or, not yet admitted, forgotten by the gateway."""
        now = self.now()
        self.limit_phase = 2
        awaited = self.config.time_limit.awaited_rows if self.config.time_limit else ()
        for st in [s for s in self.states.values()
                   if s.index in self.pending and s.index not in awaited]:
            st.generation += 1  # the stream, if any, no longer owns the request
            if st.task is not None:
                st.task.cancel()
                st.task = None
            actions = self._gw().cancel(st.request.request_id, now)
            self._record(st, "client_timeout", TIME_LIMIT_CANCELLED)
            self._apply(actions, now)

    # --- records ------------------------------------------------------------------------------
    def _record(self, st: _State, status: str, reason: str, *,
                result: StreamResult | None = None) -> None:
        i = st.index
        if i not in self.pending:
            return
        row = _record_row(self.workload, st, status, reason, result, self.with_clients)
        self.run_dir.write_record(row)
        self.num_written += 1
        self.pending.discard(i)
        done = self.done_events.get(i)
        if done is not None:
            done.set()
        if self.turn_users is not None:  # its user sees it end now
            self.turn_users.ended(i, self.now())
        if self.on_record is not None:
            self.on_record(row)
        if not self.pending:
            self.finished.set()


def _record_row(workload: Workload, st: _State, status: str, reason: str,
                result: StreamResult | None, with_clients: bool) -> dict[str, Any]:
    """A request's row of ``requests.parquet`` as it ended (``status``, ``reason``); its
    latencies only where it completed."""
    completed = status == "completed" and result is not None
    output = st.tokens_so_far  # what was generated (a lease that expired mid-stream)
    first = finished = math.nan
    error = ""
    if result is not None:
        output = result.output_tokens
        error = result.error
        if completed:
            first, finished = st.first_token_s, result.finished_s
    ttft, tpot, e2e = derive_latencies(
        np.array([st.arrival_s]), np.array([first]), np.array([finished]),
        np.array([output], dtype=np.int64),
    )
    row: dict[str, Any] = {
        "request_id": int(workload.request_id[st.index]),
        "tier": st.request.tier,
        "arrival_s": st.arrival_s,
        "prompt_tokens": st.request.prompt_tokens,
        "max_output_tokens": st.request.max_output_tokens,
        "output_tokens": output,
        "status": status,
        "reason": reason,
        "admitted_s": st.admitted_s,
        "first_token_s": first,
        "finished_s": finished,
        "ttft_s": float(ttft[0]),
        "tpot_s": float(tpot[0]),
        "e2e_s": float(e2e[0]),
        "num_preemptions": st.num_revocations,
        "reserved_tokens": st.reserved_tokens,
        "error": error,
    }
    if with_clients:
        row["num_attempts"] = st.attempt
    if completed:
        # the answer's inter-chunk gaps (ITL, as vllm bench serve counts them): kept in
        # the part file with its row, so a resumed replay still has them
        row[TOKEN_GAPS_KEY] = result.inter_chunk_gaps_s() if result is not None else []
    return row


def context_sends(workload: Workload, max_model_len: int) -> dict[int, tuple[int, int]]:
    """``{row: (max_tokens, min_tokens)}`` for the rows whose request the model's context
    changes (:mod:`kvbudget.workloads.context_limit`, vLLM 0.32.0's front end); the others send
    their true output as both. The server, not the replay, answers each: a row whose
    prompt + output is over the context sends ``min_tokens`` at the context left (the output
    vLLM gives once it lowers ``max_tokens``: above it, vLLM refuses the request for its
    ``min_tokens``, which only the replay sends); a row whose declared ``max_output_tokens``
    is over the context sends it as ``max_tokens`` (the client's request, which vLLM refuses
    before any output, ``context_length``); a prompt as long as the context or longer is sent
    as it is (vLLM refuses it, ``prompt_too_long``)."""
    cut, _ = cut_to_context(workload, max_model_len, cuts=True)
    true, declared = workload.output_tokens, workload.max_output_tokens
    sends = {i: (int(true[i]), int(cut.output_tokens[i]))
             for i in np.flatnonzero(cut.output_tokens < true).tolist()}
    for i, reason in context_refusals(workload, max_model_len, cuts=True).items():
        if reason == "context_length":
            sends[i] = (int(declared[i]), int(true[i]))
    return sends


def _recorded(result: StreamResult, reason: str) -> tuple[str, str]:
    """The record's status and reason for a request whose last attempt failed: a server's
    refusal of it as sent as ``kvbudget serve`` records it (``results.records.
    server_refusal``: a vLLM 400 for a prompt over its context joins the simulator's
    ``prompt_too_long``); an engine's own queue cap keeps its name (the simulator's); any
    other failure is a backend error, its answer in the attempts."""
    refused = None
    if result.error_kind == "http" and result.http_status is not None:
        refused = server_refusal(result.http_status, result.error or "")
    elif result.error_kind == "stream_error" and result.output_tokens == 0:
        # an error event in a stream begun with 200, before any output: TGI's refusal of a
        # request over its max_total_tokens (results.records.CONTEXT_REFUSALS)
        refused = server_refusal(None, result.error or "")
    return refused or ("rejected_overloaded",
                       reason if reason.startswith("engine_") else BACKEND_ERROR)


def _server_answer(result: StreamResult) -> tuple[Answer, str]:
    """What a failed stream means to a client: the server's 429 is a retryable refusal (its
    Retry-After in ``result``), 503 a final one (either named after the engine's queue cap
    when its message says so: ``results.records.ENGINE_REFUSALS``), 400/413 a request too
    large (so is any 4xx, or an error event, whose message names the model's context), any
    other 4xx but 408, 409 and 429 a refusal (``refused``: final), anything else a backend
    error."""
    code = result.http_status if result.error_kind == "http" else None
    context = context_refusal(result.error or "")
    if context is not None and (result.error_kind == "stream_error" or (
            code is not None and 400 <= code < 500 and code not in (408, 429))):
        return "too_large", context  # any 4xx (TGI's 422) or an error event (TGI's stream)
    if code in (429, 503) or result.error_kind == "stream_error":
        # an engine's own queue cap, named as the simulator names it (also when vLLM sends it
        # as an error event in a stream begun with 200: results.records.ENGINE_REFUSALS)
        named = engine_refusal(result.error or "", code)
        if named is not None or code is not None:
            status, reason = named or (code, f"server_{code}")
            return ("overloaded_retryable" if status == 429 else "overloaded"), reason
    if code in (400, 413):
        return "too_large", f"server_{code}"
    if code is not None and 400 <= code < 500 and code not in (408, 409, 429):
        # a 404 for a model the server does not serve, a 422: the same request gets the same
        # answer, and the OpenAI SDK does not retry it (it retries 408, 409, 429 and 5xx)
        return "refused", f"server_{code}"
    return "backend_error", result.error_kind or "error"


@dataclass(frozen=True, slots=True)
class ReplayMeta:
    """Provenance written to ``replay.json`` and checked on resume."""

    trace: str
    policy: str
    policy_params: Mapping[str, Any]
    time_scale: float
    seed: int
    url: str
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"trace": self.trace, "policy": self.policy,
                "policy_params": dict(self.policy_params), "time_scale": self.time_scale,
                "seed": self.seed, "url": self.url, **self.extra}


async def replay_async(
    workload: Workload,
    policy: Policy,
    config: ReplayConfig,
    out_dir: Path,
    *,
    meta: ReplayMeta,
    resume: bool = False,
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> ReplayOutcome:
    """Replay ``workload`` through ``policy`` against the server; write ``out_dir``.

    Raises :class:`BackendUnavailable` when the server cannot be reached at the start and
    ``ValueError`` for bad settings. A server that dies mid-run gives an outcome with
    ``complete=False`` (the output is still written). ``on_start(num_done, num_todo)`` is called
    once the server answered.
    """
    if len(workload) == 0:
        raise ValueError("the workload has no requests")
    async with httpx.AsyncClient(timeout=config.target.timeout()) as client:
        info = await discover(client, config.target)
    capacity = gateway_capacity(config, info)
    loop = config.closed_loop  # read back by validate --records (results/recorded_run_loop.py)
    limit = config.time_limit
    if resume and limit is not None:
        raise ValueError("time_limit: a time-limited replay is not resumed (its limit is on the "
                         "clock of the run resumed): replay it again into a new directory")
    run_dir = RunDir(out_dir, {**meta.as_dict(), "kv_capacity_tokens": capacity,
                               "kv_capacity_given": config.capacity_tokens is not None,
                               "server": info.facts(),
                               **({"closed_loop": loop.describe()} if loop else {}),
                               **({"time_limit": limit.describe()} if limit else {})},
                     resume=resume)
    said = conversations_said(workload, config, run_dir) + shared_blocks_said(workload)
    wall = time.perf_counter()
    rep = _Replay(workload, policy, config, run_dir, on_record)
    try:
        await rep.run(info, on_start)
    finally:
        # also on Ctrl-C (the task is cancelled) and on errors: keep what finished
        run_dir.close()
        outcome = finalize(out_dir, policy, config.tiers, capacity_tokens=capacity,
                           seed=config.seed, wall_time_s=time.perf_counter() - wall,
                           num_requests=len(workload),
                           context=(workload, info.max_model_len),
                           num_kv_unknown=rep.num_kv_unknown, assumed=said)
    outcome.error = rep.fatal
    outcome.complete = not rep.fatal and len(outcome.records) == len(workload)
    outcome.num_replayed = rep.num_written
    return outcome


def conversations_said(workload: Workload, config: ReplayConfig, run_dir: RunDir
                       ) -> tuple[str, ...]:
    """What a replay of conversations assumes (:data:`~kvbudget.live.replay_turns.
    HISTORY_SAID`), else ``()``. Raises ``ValueError`` (``run_dir`` closed) for conversations
    not of the workload's rows, or a resumed one: its users would send a later turn whose
    turn before ended in another session without waiting for it."""
    loop = config.closed_loop
    if loop is None or loop.conversations is None:
        return ()
    turns = loop.conversations
    problem = ""
    if len(turns.previous) != len(workload):
        problem = (f"closed_loop.conversations: {len(turns.previous)} rows for a workload of "
                   f"{len(workload)}")
    elif run_dir.done:
        problem = ("closed_loop.conversations: a replay of conversations is not resumed (a "
                   "later turn would go without its turn before, which ended in the run "
                   "resumed): replay it again into a new directory")
    if problem:
        run_dir.close()
        raise ValueError(problem)
    return (turns_said(turns.num_later_turns, len(history_of(workload, turns))),)


def gateway_capacity(config: ReplayConfig, info: ServerInfo) -> int:
    """The gateway's budget: the configured capacity, else the server's usable KV capacity."""
    capacity = config.capacity_tokens or info.kv_capacity_tokens
    if capacity is None:
        why = info.capacity_problem or "it does not tell the KV capacity (vllm:cache_config_info)"
        raise ValueError(
            f"{config.target.url('/metrics')}: {why}; give the capacity in tokens explicitly"
        )
    return capacity


def finalize(
    out_dir: Path,
    policy: Policy,
    tiers: Sequence[TierConfig],
    *,
    capacity_tokens: int,
    seed: int,
    wall_time_s: float,
    num_requests: int,
    context: tuple[Workload, int | None] | None = None,
    num_kv_unknown: int = 0,
    assumed: Sequence[str] = (),
) -> ReplayOutcome:
    """Write ``requests.parquet``, ``timeline.parquet`` and ``summary.json`` from the part files
    (everything finished so far, across resumed runs). ``context``: the workload replayed and
    the server's ``max_model_len``, for the line on the outputs it cut (``said``);
    ``num_kv_unknown``: this session's timeline rows whose KV in use the server's ``/metrics``
    did not tell (written as 0, said in ``assumed``, as ``kvbudget serve`` says it);
    ``assumed``: more lines for it (how conversations were sent)."""
    records, timeline = read_parts(out_dir)
    attempts = attempts_frame(out_dir)
    gaps = token_gaps_of_parts(out_dir)
    revocations = int(records["num_preemptions"].sum()) if len(records) else 0
    summary = summarize(
        _columns(records), _columns(timeline), tiers=tiers, kv_capacity_tokens=max(capacity_tokens, 1),
        policy=policy.name, seed=seed, wall_time_s=wall_time_s,
        attempts=None if attempts is None else _columns(attempts),
        token_gaps=gaps,
        extra={
            "executor": "live",
            "policy_params": {str(k): _plain(v) for k, v in policy.describe().items()},
            "engine": {
                "num_engine_preemptions": engine_preemptions(out_dir),
                "num_gateway_revocations": revocations,
            },
            "workload": {"num_requests": num_requests, "num_recorded": len(records)},
            "complete": len(records) == num_requests,
            **_said(records, context),
            **_assumed(records, num_kv_unknown, assumed),
        },
    )
    _unsampled_kv(summary, records, timeline)
    write_outputs(out_dir, records, timeline, summary, attempts, gaps)
    by_row = token_gaps_of_rows(out_dir, records)
    return ReplayOutcome(records, timeline, summary, complete=len(records) == num_requests,
                         itl_mean_s=itl_means_of(by_row, records), token_gaps_s=by_row)


def _said(records: pd.DataFrame, context: tuple[Workload, int | None] | None
          ) -> dict[str, Any]:
    """``{"said": [lines]}``: what the server or the load tool's time limit did to the run's
    figures, said as a simulated run says it, else ``{}``: the outputs the server cut at its
    context (:func:`_num_cut`, ``results.said.context_cut``) and the requests a time-limited
    stage's replay did not send by the limit or cancelled after its grace period
    (``results.said.time_limit_said``; the table counts them neither done nor refused)."""
    lines = []
    num_cut = _num_cut(records, context)
    if num_cut:
        assert context is not None and context[1] is not None  # _num_cut checks them
        lines.append(context_cut(f"max_model_len {context[1]:,} (the server's)", num_cut))
    limit = time_limit_said(records["reason"], sender="the replay") if len(records) else None
    if limit:
        lines.append(limit)
    return {"said": lines} if lines else {}


def _num_cut(records: pd.DataFrame, context: tuple[Workload, int | None] | None) -> int:
    """How many completed outputs the server cut at its context (shorter than the trace's,
    ending at ``max_model_len``: :func:`context_sends`); 0 without the context."""
    if context is None or context[1] is None or not len(records):
        return 0
    workload, limit = context
    true = dict(zip(workload.request_id.tolist(), workload.output_tokens.tolist(), strict=True))
    done = records[records["status"] == "completed"]
    return sum(out < true.get(rid, out) and prompt + out >= limit for rid, prompt, out in zip(
        done["request_id"].tolist(), done["prompt_tokens"].tolist(),
        done["output_tokens"].tolist(), strict=True))


def _assumed(records: pd.DataFrame, num_kv_unknown: int, more: Sequence[str] = ()
             ) -> dict[str, Any]:
    """``{"assumed": [lines]}``: the timeline rows whose KV in use ``/metrics`` did not tell,
    and the server's refusals for the model's context in the words of an engine whose rules
    are not vLLM's (``results.recorded_refusals.engine_rules_said``), and ``more``, else
    ``{}``."""
    lines = [kv_used_unknown_said(num_kv_unknown, "the server's /metrics")] if (
        num_kv_unknown) else []
    if len(records) and "error" in records:
        refused = records.loc[records["status"] == "rejected_too_large", "error"]
        rules = engine_rules_said(str(e) for e in refused.tolist())
        if rules:
            lines.append(rules)
    lines.extend(more)
    return {"assumed": lines} if lines else {}


KV_UNSAMPLED = ("KV used and reserved: no scrape of the server's /metrics fell within the run's "
                "work (first arrival to last finish, {span:.2f} s; one a --poll-period): not "
                "measured, so not shown (a shorter --poll-period samples them)")
"""The ``assumed`` line of a replay whose timeline has no sample while it worked: its KV
figures would read 0 (the samples before the first arrival and after the last finish)."""


def _unsampled_kv(summary: dict[str, Any], records: pd.DataFrame, timeline: pd.DataFrame
                  ) -> None:
    """A run whose work (first arrival to last finish) fell between two scrapes of
    ``/metrics`` has no KV figure: its ``kv`` block is set to None and ``assumed`` says why,
    rather than a used and reserved 0 that were never measured."""
    done = records[records["status"] == "completed"] if len(records) else records
    if not len(done) or not len(timeline):
        return
    start, end = float(records["arrival_s"].min()), float(done["finished_s"].max())
    times = timeline["time_s"].to_numpy()
    if ((times > start) & (times < end)).any():
        return
    summary["kv"] = {k: None for k in summary.get("kv", {})}
    summary["assumed"] = [*summary.get("assumed", ()), KV_UNSAMPLED.format(span=end - start)]


def _columns(df: pd.DataFrame) -> dict[str, Any]:
    return {str(c): df[c].to_numpy() for c in df.columns}


def _plain(value: Any) -> Any:
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def _task_of(coro: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """A task running ``coro`` through :func:`_ends_cancelled`. ``coro`` is closed when the
    task is done: a task cancelled before it first ran (a request admitted and cancelled in
    one step of the loop: a time limit's grace period of 0, a revocation) never started the
    wrapper, which would leave ``coro`` never awaited ("RuntimeWarning: coroutine ... was
    never awaited" when it is collected); closing a finished coroutine does nothing."""
    task = asyncio.create_task(_ends_cancelled(coro))
    task.add_done_callback(lambda _: coro.close())
    return task


async def _ends_cancelled(coro: Coroutine[Any, Any, _T]) -> _T:
    """Await ``coro``; when its task is being cancelled, whatever it raises as it unwinds ends
    the task as cancelled. httpx (through anyio's task groups) can turn a cancellation in the
    middle of a request into an exception group, and ``asyncio.run``, which cancels the tasks
    left after an interrupt (Ctrl-C, SIGTERM), prints such a task's exception with a traceback
    ("unhandled exception during asyncio.run() shutdown") under the one-line message."""
    try:
        return await coro
    except asyncio.CancelledError:
        raise
    except BaseException:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError from None
        raise


def replay(
    workload: Workload,
    policy: Policy,
    config: ReplayConfig,
    out_dir: Path,
    *,
    meta: ReplayMeta,
    resume: bool = False,
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> ReplayOutcome:
    """Synchronous :func:`replay_async` (runs its own event loop)."""
    return asyncio.run(replay_async(workload, policy, config, out_dir, meta=meta, resume=resume,
                                    on_record=on_record, on_start=on_start))


__all__ = ["BackendUnavailable", "ReplayConfig", "ReplayMeta", "ReplayOutcome", "finalize",
           "gateway_capacity", "prompt_token_ids", "replay", "replay_async", "scale_time"]
