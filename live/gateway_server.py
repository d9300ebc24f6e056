"""``kvbudget serve``: the admission gateway as an OpenAI-compatible HTTP server (Starlette).

It forwards ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed or not) and
``GET /v1/models`` to the upstreams, and nothing else; it answers ``/health``, ``/ready`` and
``/metrics`` itself. Every completion is admitted before any upstream sees it: its tier from the
caller's key (or, where trusted, the ``x-kvbudget-tier`` header), its prompt's tokens from the
upstream's ``/tokenize`` or a bound from its bytes, ``max_tokens`` from the body or the default,
and a lease from the project's :class:`~kvbudget.policies.gateway.Gateway`
(:class:`~kvbudget.live.serve_admission.Admission`). The lease is settled from the upstream's own
``usage`` (a stream is asked for ``stream_options.include_usage``), released at once when the
client disconnects, and taken back (the upstream request closed, which makes vLLM abort it) when
the policy revokes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

import aiohttp
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.requests import Request as HttpRequest
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from kvbudget.live.serve_admission import Admission, Ticket
from kvbudget.live.serve_forward import (
    STOPPED,
    Call,
    Disconnect,
    first_of,
    models_answer,
    more_body,
    openai_error,
    sse_error,
    stream_failure,
    upstream_failure,
)
from kvbudget.live.serve_metrics import ServeMetrics
from kvbudget.live.serve_ready import Reachability
from kvbudget.live.serve_records import Outcome, ServeRecorder, gateway_row
from kvbudget.live.serve_reload import Reloaded, apply_reload
from kvbudget.live.serve_request import (
    BadRequest,
    Completion,
    KeyTable,
    context_max_tokens,
    parse_completion,
)
from kvbudget.live.serve_settings import UpstreamSettings
from kvbudget.live.serve_tokenizer import LocalTokenizer
from kvbudget.live.serve_upstream import (
    EngineCounter,
    UpstreamError,
    Upstreams,
    kv_used_tokens,
)
from kvbudget.live.server_metrics import EngineSnapshot
from kvbudget.policies.base import Policy
from kvbudget.policies.errors import Overloaded, RequestTooLarge
from kvbudget.policies.gateway import Admit, Reject
from kvbudget.policies.tiers import TierConfig

log = logging.getLogger("kvbudget.serve")

TIER_HEADER = "x-kvbudget-tier"
DEADLINE_HEADER = "x-kvbudget-deadline-s"  # seconds the caller will wait for admission
REQUEST_ID_HEADER = "x-kvbudget-request-id"  # sent upstream: the lease's holder
DRAINING = "draining"  # the code of a refusal or abort because the server stops
CLIENT_CLOSED = 499  # nginx's "client closed request": logged, never seen by the client
COMPLETION_PATHS = frozenset(("/v1/completions", "/v1/chat/completions"))
SSE_HEADERS = ((b"cache-control", b"no-cache"),
               (b"content-type", b"text/event-stream; charset=utf-8"))
"""The head of a relayed stream (Starlette's for an event stream, which
``tests/unit/live/test_serve_relay.py`` checks)."""
CountTokens = Literal["upstream", "bytes", "local"]
COUNT_TOKENS: tuple[CountTokens, ...] = ("upstream", "bytes", "local")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """How the server answers (the policy, tiers and capacity are the gateway's).

    ``trust_tier_header``: take the tier from ``x-kvbudget-tier`` (safe only on loopback or
    behind a proxy that sets it); else a key of ``keys`` is required. ``overload_status``: 429
    or 503 for a refusal. ``retry_after_s``: the ``Retry-After`` when the policy gives none.
    ``count_tokens``: ``upstream`` (its ``/tokenize``), ``bytes`` (an upper bound from the
    UTF-8 bytes, :func:`~kvbudget.live.serve_request.prompt_token_bound`) or ``local``
    (``tokenizer``, the model's own, loaded here: :mod:`kvbudget.live.serve_tokenizer`).
    ``body_timeout_s``: the longest a client may take to send its body (a slow client gets 408).
    """

    keys: KeyTable = field(default_factory=KeyTable)
    trust_tier_header: bool = False
    default_tier: str = "interactive"
    overload_status: int = 429
    retry_after_s: float = 1.0
    default_max_tokens: int = 256
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0
    count_tokens: CountTokens = "upstream"
    tokenizer: LocalTokenizer | None = None
    capacity_period_s: float | None = None
    timeline_period_s: float = 1.0
    max_model_len: int | None = None
    """The upstreams' context (the largest where they differ), where each tells one: a
    request's reservation ends there (:func:`~kvbudget.live.serve_request.context_max_tokens`)."""

    def __post_init__(self) -> None:
        if self.overload_status not in (429, 503):
            raise ValueError(f"overload_status must be 429 or 503, got {self.overload_status}")
        if self.count_tokens not in COUNT_TOKENS:
            raise ValueError(f"count_tokens must be one of {', '.join(COUNT_TOKENS)}, "
                             f"got {self.count_tokens!r}")
        if (self.count_tokens == "local") != (self.tokenizer is not None):
            raise ValueError("count_tokens 'local' goes with a tokenizer, and only it")
        for name in ("retry_after_s", "body_timeout_s", "timeline_period_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")
        if self.default_max_tokens < 1 or self.max_body_bytes < 1:
            raise ValueError("default_max_tokens and max_body_bytes must be >= 1")
        if not self.keys.digests and not self.trust_tier_header:
            raise ValueError("no way to tell a caller's tier: give a key file, or trust the "
                             "tier header (loopback only)")


class _BodyTooLarge(Exception):
    pass


async def _read_body(request: HttpRequest, limit: int) -> bytes:
    """The request's body, read from the ASGI ``receive`` as Starlette's ``Request.stream``
    reads it (``ClientDisconnect`` when the client goes first), without its generator: most
    bodies come in one message."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        if message["type"] != "http.request":
            continue
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        if not message.get("more_body", False):
            return chunk if not chunks else b"".join((*chunks, chunk))
        chunks.append(chunk)


def _resize_said(admission: Admission, capacity: int, largest: int | None) -> None:
    """Resize the budget to the upstreams' KV read again, in one line where it moved (an
    upstream restarted with other KV blocks: it moved unsaid before, only ``/metrics``'
    ``kvbudget_capacity_tokens`` showing it)."""
    was = admission.gateway.config.capacity_tokens
    admission.resize(capacity, largest)
    if capacity != was:
        log.warning("budget now %s tokens (was %s): the upstreams' KV, read again from their "
                    "/metrics; what now fits is admitted, leases held keep theirs",
                    f"{capacity:,}", f"{was:,}")


def _wait_s(request: HttpRequest, tier: TierConfig) -> float | None:
    """How long a request may wait for admission: its tier's ``queue_timeout_s``, or the
    shorter ``x-kvbudget-deadline-s`` it sends."""
    own = tier.queue_timeout_s
    try:
        asked = float(request.headers.get(DEADLINE_HEADER, "inf"))
    except ValueError:
        asked = math.inf
    if not (math.isfinite(asked) and asked >= 0):
        return own
    return asked if own is None else min(own, asked)


class _Dispatch:
    """The gateway's ASGI app. A completion goes straight to its handler, without Starlette's
    middleware and router (about a tenth of the gateway's Python calls a request, measured by
    ``benchmarks/bench_serve_instructions.py``); everything else, and a completion path with
    another method (405), through Starlette's ``routes``, as before."""

    __slots__ = ("completion", "routes")

    def __init__(self, completion: Callable[[HttpRequest], Awaitable[Any]],
                 routes: Starlette) -> None:
        self.completion = completion
        self.routes = routes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and \
                scope["path"] in COMPLETION_PATHS:
            response = await self.completion(HttpRequest(scope, receive, send))
            await response(scope, receive, send)
        else:
            await self.routes(scope, receive, send)


class GatewayServer:
    """The ASGI app (``.app``) around one :class:`Admission`. ``recorder``: the run
    directories (none: nothing written); ``reload``: reads the policy again (SIGHUP), or the
    policy and the gateway's settings (a :class:`Reloaded`)."""

    def __init__(self, admission: Admission, upstreams: Upstreams, config: ServeConfig, *,
                 recorder: ServeRecorder | None = None,
                 reload: Callable[[], Policy | Reloaded] | None = None,
                 settings: UpstreamSettings | None = None) -> None:
        self.admission = admission
        self.upstreams = upstreams
        self.config = config
        self.recorder = recorder
        self.reload_policy = reload
        self.settings = settings  # the upstreams' as last read, followed at each capacity read
        self.metrics = ServeMetrics(tuple(admission.gateway.tiers))
        self.draining = False
        self.capacity_problem = ""
        self.reach = Reachability(upstreams)  # /ready: can an upstream be reached
        self.kv_used: int | None = None  # the upstreams' KV in use, as last read
        self.engine_preemptions = EngineCounter()  # theirs, as last read
        self.num_in_flight = 0
        self._drain_timer: asyncio.TimerHandle | None = None
        self._flight_changed: asyncio.Event | None = None  # made when asked for
        self._tasks: list[asyncio.Task[None]] = []
        self.routes = Starlette(routes=[
            Route("/v1/completions", self.completion, methods=["POST"]),
            Route("/v1/chat/completions", self.completion, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/ready", self.ready, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
        ], lifespan=self._lifespan, exception_handlers={HTTPException: _http_error})
        self.app = _Dispatch(self.completion, self.routes)  # the ASGI app

    # --- lifecycle ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._tasks = [asyncio.create_task(self.admission.run_timers()),
                       asyncio.create_task(self._sample_loop()), asyncio.create_task(
                           self.reach.run())]
        try:
            yield
        finally:
            if self._drain_timer is not None:
                self._drain_timer.cancel()
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.upstreams.aclose()
            if self.recorder is not None:
                self.sample(self.kv_used)  # the last read
                self.recorder.close(self.admission.now())

    async def refresh_capacity(self, snaps: list[EngineSnapshot] | None = None) -> None:
        """Read the upstreams' KV capacity (from ``snaps``, their ``/metrics`` read already,
        else read now), resize the budget and follow their settings (a failed read keeps both,
        logs one line and makes ``/ready`` answer 503 until a read succeeds)."""
        try:
            snaps = snaps if snaps is not None else await self.upstreams.snapshots()
            capacity, largest = self.upstreams.fleet_capacity(snaps)
        except UpstreamError as exc:
            if str(exc) != self.capacity_problem:
                log.warning("capacity not read, kept at %d tokens: %s",
                            self.admission.gateway.config.capacity_tokens, exc)
            self.capacity_problem = str(exc)
            return
        self.capacity_problem = ""
        _resize_said(self.admission, capacity, largest)
        if self.settings is not None and await self.settings.follow(
                self.upstreams, snaps, self.recorder, self.admission.now()):
            self.config = replace(self.config, max_model_len=self.settings.context)
            self.admission.round_to(self.settings.block_tokens)  # and its KV block size

    async def _sample_loop(self) -> None:
        period = self.config.capacity_period_s
        next_capacity = 0.0 if period is not None else math.inf
        while True:
            due = period is not None and self.admission.now() >= next_capacity
            await self.read_and_sample(due)
            if due and period is not None:
                next_capacity = self.admission.now() + period
            await asyncio.sleep(self.config.timeline_period_s)

    async def read_and_sample(self, capacity_due: bool) -> None:
        """Read the upstreams' ``/metrics`` (when recording: the KV their engines hold, for
        the timeline; when ``capacity_due``: the capacity) and write a timeline row."""
        snaps = None
        if self.recorder is not None:
            with contextlib.suppress(UpstreamError):
                snaps = await self.upstreams.snapshots()
        if capacity_due:
            await self.refresh_capacity(snaps)
        self.kv_used = None if snaps is None else kv_used_tokens(snaps)
        if snaps is not None:
            self.engine_preemptions.update(snaps)
        self.sample(self.kv_used)

    def sample(self, kv_used: int | None = None) -> None:
        """One timeline row (:func:`~kvbudget.live.serve_records.gateway_row`)."""
        if self.recorder is not None:
            row = gateway_row(self.admission, kv_used, self.engine_preemptions.total)
            self.recorder.sample(row, self.admission.now(), kv_used_known=kv_used is not None)

    def drain(self, deadline_s: float) -> None:
        """Stop taking work (SIGTERM): new completions get 503 ``draining``, requests waiting
        for admission get the overload answer now, and those in flight that have not ended
        ``deadline_s`` from now are aborted upstream, their leases released (a stream ends
        with an SSE error event ``draining``, a non-streamed one gets 503)."""
        if self._drain_timer is not None:  # draining already: the first deadline holds
            return
        self.draining = True
        num_refused = self.admission.refuse_waiting()
        if num_refused:
            log.warning("draining: %d request(s) waiting for admission refused", num_refused)
        self._drain_timer = asyncio.get_running_loop().call_later(
            max(deadline_s, 0.0), self._drain_deadline)

    def _drain_deadline(self) -> None:
        num_aborted = self.admission.revoke_admitted(DRAINING)
        if num_aborted:
            log.warning("drain deadline passed: %d request(s) in flight aborted", num_aborted)

    def reload(self) -> bool:
        """Read the scenario again, apply what is safe to change live (``apply_reload``: new
        policy or caps in a new run directory); False if nothing was read or applied."""
        return self.reload_policy is not None and apply_reload(
            self.admission, self.reload_policy,
            None if self.recorder is None else self.recorder.new_policy,
            lambda: self.sample(self.kv_used))  # a timeline row at it: a budget moved then

    @property
    def flight_changed(self) -> asyncio.Event:
        """Set at the next change of :attr:`num_in_flight` (a fresh event after each; made
        when asked for)."""
        if self._flight_changed is None:
            self._flight_changed = asyncio.Event()
        return self._flight_changed

    def _flight(self, delta: int) -> None:
        self.num_in_flight += delta
        if self._flight_changed is not None:
            self._flight_changed.set()
            self._flight_changed = None

    # --- plain routes -------------------------------------------------------------------
    async def health(self, request: HttpRequest) -> Response:
        return PlainTextResponse("ok\n")

    async def ready(self, request: HttpRequest) -> Response:
        if self.draining:
            return PlainTextResponse("draining\n", status_code=503)
        problem = self.capacity_problem and f"capacity unknown: {self.capacity_problem}"
        if problem or self.reach.problem:
            return PlainTextResponse(f"{problem or self.reach.problem}\n", status_code=503)
        return PlainTextResponse("ready\n")

    async def prometheus(self, request: HttpRequest) -> Response:
        gw = self.admission.gateway
        text = self.metrics.render(gw.budget.reserved_tokens, gw.config.capacity_tokens,
                                   gw.budget.num_leases,
                                   {t: gw.num_waiting(t) for t in gw.tiers}, self.num_in_flight)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def models(self, request: HttpRequest) -> Response:
        if isinstance(self._tier(request), Response):
            return openai_error(401, "invalid or missing API key", "authentication_error",
                                "invalid_api_key")
        return await models_answer(self.upstreams)

    # --- admission ----------------------------------------------------------------------
    def _tier(self, request: HttpRequest) -> str | Response:
        auth = request.headers.get("authorization", "")
        tiers = self.admission.gateway.tiers
        if auth[:7].lower() == "bearer " and self.config.keys.digests:
            tier = self.config.keys.tier_of(auth[7:].strip())
            if tier is not None:
                return tier
        elif self.config.trust_tier_header:
            claimed = request.headers.get(TIER_HEADER, self.config.default_tier)
            if claimed in tiers:
                return claimed
            return openai_error(401, f"unknown tier {claimed!r} in {TIER_HEADER}",
                                "authentication_error", "unknown_tier")
        self.metrics.refused("", "unauthorized")
        return openai_error(401, "invalid or missing API key", "authentication_error",
                            "invalid_api_key")

    def _record(self, ticket: Ticket, outcome: Outcome) -> None:
        if self.recorder is not None:
            self.recorder.write_request(ticket, outcome, self.admission.now())

    async def _prompt_tokens(self, comp: Completion, gone: Disconnect,
                             tier: str) -> int | Response | None:
        if self.config.count_tokens == "bytes":
            return comp.prompt_bound
        if self.config.tokenizer is not None:
            try:
                return self.config.tokenizer.count(comp)
            except BadRequest as exc:
                self.metrics.refused(tier, "bad_request")
                return openai_error(400, str(exc), "invalid_request_error", param=exc.param)
        prompt = comp.body.get("prompt")
        if not comp.chat and isinstance(prompt, list):
            # token ids are their own count (the engine adds none to them), and vLLM's
            # /tokenize takes text only (0.32.0, vllm/entrypoints/serve/tokenize/protocol.py:
            # TokenizeCompletionRequest.prompt: str): it refuses ids
            return len(prompt)
        try:
            return await first_of(self.upstreams.count_tokens(comp.tokenize_body), gone.future)
        except UpstreamError as exc:
            if exc.refusal is not None:  # the upstream refused the request: its answer, as is
                status, content, kind = exc.refusal
                self.metrics.refused(tier, "bad_request")
                return Response(content, status_code=status, media_type=kind)
            log.warning("tokenize failed: %s", exc)
            return openai_error(502, f"the upstream could not count the prompt's tokens: "
                                f"{exc}", "upstream_error")

    async def completion(self, request: HttpRequest) -> Response | _RelayResponse:
        if self.draining:
            return openai_error(503, "the gateway is draining", "overloaded_error", DRAINING,
                                headers={"retry-after": "1"})
        tier = self._tier(request)
        if isinstance(tier, Response):
            return tier
        try:
            async with asyncio.timeout(self.config.body_timeout_s):  # a timer, not a task
                raw = await _read_body(request, self.config.max_body_bytes)
            comp = parse_completion(raw, request.scope["path"].endswith("/chat/completions"),
                                    self.admission.gateway.tiers[tier],
                                    self.config.default_max_tokens, self.config.count_tokens)
        except _BodyTooLarge:
            self.metrics.refused(tier, "body_too_large")
            return openai_error(413, f"the body is over {self.config.max_body_bytes} bytes",
                                "invalid_request_error")
        except ClientDisconnect:  # gone before its body was all there: nobody to answer
            return Response(status_code=CLIENT_CLOSED)
        except TimeoutError:
            self.metrics.refused(tier, "slow_client")
            return openai_error(408, f"the body took over {self.config.body_timeout_s} s",
                                "invalid_request_error")
        except BadRequest as exc:
            self.metrics.refused(tier, "bad_request")
            return openai_error(400, str(exc), "invalid_request_error", param=exc.param)
        arrived = self.admission.now()  # its TTFT, E2E and admission wait count from here
        self._flight(1)
        gone = Disconnect(request)
        try:
            return await self._admit_and_forward(request, tier, comp, gone, arrived)
        finally:
            if not gone.handed_over:  # else the stream's response closes it
                gone.close()
                self._flight(-1)

    async def _admit_and_forward(self, request: HttpRequest, tier: str, comp: Completion,
                                 gone: Disconnect,
                                 arrived: float) -> Response | _RelayResponse:
        """Count the prompt, admit (the wait counted from ``arrived``, when the request's body
        was read: the upstream's ``/tokenize`` is time its caller waits too), forward."""
        prompt_tokens = await self._prompt_tokens(comp, gone, tier)
        if prompt_tokens is None:
            return Response(status_code=CLIENT_CLOSED)
        if isinstance(prompt_tokens, Response):
            return prompt_tokens
        limits = self.admission.gateway.tiers[tier]
        # a max_tokens over the tier's limit is refused as the request declared it (as too
        # large, and recorded), not lowered to the upstreams' context first
        max_tokens = comp.max_tokens if comp.max_tokens > limits.max_sequence_tokens else \
            context_max_tokens(prompt_tokens, comp.max_tokens, self.config.max_model_len,
                               self.config.count_tokens != "bytes")
        ticket = self.admission.arrive(tier, prompt_tokens, max_tokens, _wait_s(request, limits),
                                       arrived, comp.max_tokens)
        try:
            decision = await first_of(asyncio.shield(ticket.decided), gone.future)
        except asyncio.CancelledError:
            self.admission.cancel(ticket)
            raise
        if decision is None:  # the client left while it waited (or as it was admitted)
            self.admission.cancel(ticket)
            self._record(ticket, Outcome("client_timeout", finished_s=self.admission.now()))
            return Response(status_code=CLIENT_CLOSED)
        if isinstance(decision, Reject):
            error = decision.error
            status = "rejected_too_large" if isinstance(error, RequestTooLarge) else (
                "expired" if error.reason == "deadline" else "rejected_overloaded")
            reason = "" if isinstance(error, RequestTooLarge) else error.reason
            self._record(ticket, Outcome(status, reason, finished_s=self.admission.now()))
            self.metrics.refused(tier, "too_large" if isinstance(error, RequestTooLarge)
                                 else error.reason)
            return refusal_answer(error, self.config)
        assert isinstance(decision, Admit)
        self.metrics.admitted(tier)
        prefix = comp.prefix() if self.upstreams.options.router == "prefix_affinity" else b""
        call = Call(ticket, comp, self.upstreams.pick(ticket.reserved_tokens, prefix,
                                                      self.reach.down))
        try:
            if comp.stream:
                return await self._stream(call, gone, request.scope["path"])
            return await self._unary(call, gone, request.scope["path"])
        except BaseException as exc:  # whatever went wrong, the lease does not outlive it
            if not call.ended and not gone.handed_over:
                self._end(call, "rejected_overloaded", "backend_error", type(exc).__name__)
            raise

    # --- ending a call ------------------------------------------------------------------
    def _end(self, call: Call, status: str, reason: str = "", error: str = "") -> None:
        """Settle or release the call's lease, free its upstream share, write its row."""
        if call.ended:
            return
        call.ended = True
        ticket = call.ticket
        now = self.admission.now()
        self.upstreams.done(call.upstream, ticket.reserved_tokens)
        # what was generated: the upstream's count when it completed, else the output chunks
        # passed on before it ended (one token a chunk, as the replay counts a cut stream:
        # a recording's failed request with output is still load to simulate)
        out = len(call.chunk_times_s)
        if status == "completed":
            out = call.output_tokens if call.output_tokens is not None else 0
            self.admission.finish(ticket, out)
            self.metrics.observe(ticket.request.tier, call.first_token_s -
                                 ticket.request.arrival_s, now - ticket.request.arrival_s)
        elif status == "protocol_error":
            # the server's count is not to be trusted: settled at the reservation
            self.admission.finish(ticket, ticket.request.max_output_tokens)
            self.metrics.refused(ticket.request.tier, "protocol_error")
            status, reason = "rejected_overloaded", "backend_error"
            log.warning("request %d: protocol error: %s", ticket.request.request_id, error)
        else:
            self.admission.cancel(ticket)
        if self.recorder is not None:  # no row made where none is written
            self._record(ticket, Outcome(
                status, reason, out, ticket.admitted_s, call.first_token_s, now,
                ticket.reserved_tokens, int(ticket.revoke_reason not in ("", DRAINING)),
                error, call.gaps_s()))

    def _upstream_failed(self, call: Call, status: str, reason: str, error: str) -> None:
        """End a call its upstream answered with other than a completion: a refusal (the
        request as sent: ``prompt_too_long``, ``context_length``, ``server_<status>``; or the
        engine's queue cap) counts in ``kvbudget_refused_total`` by the reason its row records
        (it counted in ``kvbudget_admitted_total`` once, when the gateway admitted it: not
        again); a failure (``backend_error``) is no refusal."""
        if reason != "backend_error":
            self.metrics.refused(call.ticket.request.tier, reason)
        self._end(call, status, reason, error)

    async def _send(self, call: Call, path: str) -> aiohttp.ClientResponse:
        """Send the call upstream; its response once its head is read."""
        return await self.upstreams.session.post(
            self.upstreams.url(call.upstream, path), data=call.completion.upstream_body,
            headers={"content-type": "application/json",
                     REQUEST_ID_HEADER: str(call.ticket.request.request_id)},
            allow_redirects=False)

    async def _fetch(self, call: Call, path: str) -> tuple[int, bytes, str]:
        """A non-streamed call: the upstream's status, body and content type."""
        async with await self._send(call, path) as resp:
            return (resp.status, await resp.read(),
                    resp.headers.get("content-type", "application/json"))

    def _unreachable(self, call: Call, exc: aiohttp.ClientError | TimeoutError) -> Response:
        """The answer to a call whose upstream gave no answer: 502; an upstream that refused
        the connection is down for ``/ready`` from now (:class:`Reachability`)."""
        self._end(call, "rejected_overloaded", "backend_error", type(exc).__name__)
        if isinstance(exc, aiohttp.ClientConnectorError):
            self.reach.refused(call.upstream, f"{type(exc).__name__} ({exc.strerror})")
        return openai_error(502, "upstream unreachable", "upstream_error")

    def _revoked_answer(self, call: Call) -> Response:
        reason = call.ticket.revoke_reason
        self.metrics.refused(call.ticket.request.tier, reason)
        self._end(call, "preempted_dropped", reason)
        return openai_error(503, STOPPED.get(reason, f"request stopped by the gateway "
                                             f"({reason}); retry later"),
                            "overloaded_error", reason,
                            headers={"retry-after": str(math.ceil(self.config.retry_after_s))})

    # --- forwarding ---------------------------------------------------------------------
    async def _unary(self, call: Call, gone: Disconnect, path: str) -> Response:
        try:
            answer = await first_of(self._fetch(call, path), call.ticket.revoked_future(),
                                    gone.future)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._unreachable(call, exc)
        except asyncio.CancelledError:
            self._end(call, "client_timeout")
            raise
        if answer is None:
            if call.ticket.revoked.is_set():
                return self._revoked_answer(call)
            self._end(call, "client_timeout")
            return Response(status_code=CLIENT_CLOSED)
        self.reach.answered(call.upstream)
        status, content, media_type = answer
        if status != 200:
            self._upstream_failed(call, *upstream_failure(status, content,
                                                          self.upstreams.options.api_key))
        else:
            # no first token is seen: the answer comes whole, so its TTFT is unknown (the
            # record's first_token_s stays NaN, not its finish: TTFT = E2E and TPOT ~0 went to
            # the summary, /metrics and calibrate --records)
            try:
                body = json.loads(content)
            except ValueError:
                body = None
            call.usage(body.get("usage") if isinstance(body, dict) else None)
            self._end(call, "protocol_error" if call.problem else "completed",
                      error=call.problem)
        return Response(content, status_code=status, media_type=media_type)

    async def _stream(self, call: Call, gone: Disconnect,
                      path: str) -> Response | _RelayResponse:
        revoked = call.ticket.revoked_future()  # the admission's: never cancelled here
        try:
            resp = await first_of(self._send(call, path), revoked, gone.future)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._unreachable(call, exc)
        except asyncio.CancelledError:
            self._end(call, "client_timeout")
            raise
        if resp is None:
            if call.ticket.revoked.is_set():
                return self._revoked_answer(call)
            self._end(call, "client_timeout")
            return Response(status_code=CLIENT_CLOSED)
        self.reach.answered(call.upstream)
        if resp.status != 200:
            try:
                content = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                content = b""
            finally:
                resp.close()
            self._upstream_failed(call, *upstream_failure(resp.status, content,
                                                          self.upstreams.options.api_key))
            return Response(content, status_code=resp.status,
                            media_type=resp.headers.get("content-type", "application/json"))
        gone.handed_over = True

        def on_close() -> None:
            gone.close()
            self._flight(-1)
            if not call.ended:  # the client went away (or the stream was cut): free it now
                self._end(call, "client_timeout")
            resp.close()  # a stream read to its end has given its connection back already

        return _RelayResponse(partial(self._relay, call, resp, revoked, gone), on_close)

    async def _relay(self, call: Call, resp: aiohttp.ClientResponse, revoked: asyncio.Future[Any],
                     gone: Disconnect, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Pass the upstream's lines on (``send``: the client's) as they come; end with an
        error event when the lease is taken back; release the lease at once when the client
        goes. The lines are read plainly (no race per line): a revocation or the client
        leaving closes the upstream response, which ends the read."""
        def interrupt(done: asyncio.Future[Any]) -> None:
            if not done.cancelled():
                resp.close()

        revoked.add_done_callback(interrupt)
        gone.future.add_done_callback(interrupt)
        now = self.admission.now
        try:  # each read as it comes (decompressed if the upstream compressed it)
            async for data in resp.content.iter_any():
                out = call.on_read(data, now())
                if call.done and not call.ended and not call.ticket.revoked.is_set():
                    # the stream is whole (its usage read): settle before the client, handed
                    # its [DONE], may go (then its send raises, or nothing more is sent)
                    self._settle(call)
                if out:
                    await send(more_body(out))
            out = call.on_end(now())
            if out:
                await send(more_body(out))
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not (revoked.done() or gone.future.done() or call.ended):  # the upstream broke off
                self._end(call, "rejected_overloaded", "backend_error", type(exc).__name__)
                await send(more_body(sse_error("backend_error")))
                return
        if call.ended:
            return
        if call.ticket.revoked.is_set():
            self.metrics.refused(call.ticket.request.tier, call.ticket.revoke_reason)
            self._end(call, "preempted_dropped", call.ticket.revoke_reason)
            await send(more_body(sse_error(call.ticket.revoke_reason)))
        elif call.upstream_error or not gone.future.done():
            self._settle(call)

    def _settle(self, call: Call) -> None:
        """End a call whose stream ended: failed by the upstream mid-stream, or completed (a
        protocol error when its usage is missing or absurd)."""
        if call.upstream_error:
            self._upstream_failed(call, *stream_failure(call.upstream_error, bool(
                call.chunk_times_s), self.upstreams.options.api_key))
            return
        problem = call.problem or ("" if call.output_tokens is not None
                                   else "the stream ended without its usage")
        self._end(call, "protocol_error" if problem else "completed", error=problem)


async def _http_error(request: HttpRequest, exc: Exception) -> Response:
    """A path the gateway does not serve (404) or a method it does not take there (405), as
    OpenAI's error JSON (Starlette's is plain text, which the SDK cannot read a message
    from): nothing else is forwarded."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return openai_error(status, f"{detail}: {request.method} {request.url.path} is not served "
                        "by the gateway (it forwards POST /v1/completions, POST "
                        "/v1/chat/completions and GET /v1/models)", "invalid_request_error",
                        headers=getattr(exc, "headers", None))


def refusal_answer(error: RequestTooLarge | Overloaded, config: ServeConfig) -> Response:
    """The client's answer to the gateway's refusal: 400 ``context_length_exceeded`` naming the
    limit, or the overload status with ``Retry-After`` (the policy's, else the configured)."""
    if isinstance(error, RequestTooLarge):
        return openai_error(400, f"request too large: {error.requested} tokens (prompt + "
                            f"max_tokens) requested, the limit is {error.limit} tokens",
                            "invalid_request_error", "context_length_exceeded")
    wait = error.retry_after_s if error.retry_after_s is not None else config.retry_after_s
    return openai_error(config.overload_status, f"overloaded ({error.reason}); "
                        f"retry after {math.ceil(wait)} s", "overloaded_error", error.reason,
                        headers={"retry-after": str(max(1, math.ceil(wait)))})


class _RelayResponse:
    """A streamed answer (an ASGI app): the stream's head, what ``relay`` sends (it is handed
    the ASGI ``send``: each read of the upstream is sent as it comes, with no generator
    between), the end; ``on_close`` always runs when the ASGI call ends, however it ends (a
    stream cut before its first chunk included).

    Its head is the one Starlette's ``StreamingResponse(media_type="text/event-stream",
    headers={"cache-control": "no-cache"})`` sends, made once (:data:`SSE_HEADERS`), not
    built again each request. Unlike Starlette's, it runs no task of its own listening for the
    client's disconnect: the call's :class:`~kvbudget.live.serve_forward.Disconnect` already
    does, and closes the upstream response, which ends ``relay``'s reads."""

    __slots__ = ("_on_close", "relay")
    status_code = 200

    def __init__(self, relay: Callable[[Callable[[dict[str, Any]], Awaitable[None]]],
                                       Awaitable[None]],
                 on_close: Callable[[], None]) -> None:
        self.relay = relay
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await self.relay(send)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:  # the client went away (ASGI 2.4 servers say so this way)
            pass
        finally:
            self._on_close()
