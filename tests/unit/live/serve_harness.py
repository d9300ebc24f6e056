"""Loopback harness for ``kvbudget serve`` tests: a fake OpenAI upstream and the gateway, both
uvicorn servers on 127.0.0.1 (a free port each) in the test's own event loop, stopped when the
block ends.

No sleeps: the fake holds each completion until the test sets ``release`` (an event), and every
wait is on an event with a bound (:func:`until`). The servers run with uvicorn's signal capture
off (so a stuck test can still be interrupted) and a bounded graceful shutdown (a connection
left open cannot hold the test).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from kvbudget.live.gateway_server import GatewayServer, ServeConfig
from kvbudget.live.serve_admission import Admission, Ticket
from kvbudget.live.serve_forward import Call
from kvbudget.live.serve_request import parse_completion
from kvbudget.live.serve_upstream import UpstreamOptions, Upstreams
from kvbudget.policies import make_policy
from kvbudget.policies.gateway import Action, Gateway, GatewayConfig
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.policies.tiers import TierConfig

TIERS = (
    TierConfig("interactive", max_sequence_tokens=4096, priority=0, queue_timeout_s=None),
    TierConfig("batch", max_sequence_tokens=8192, priority=1, queue_timeout_s=None,
               retryable_on_overload=True),
)
WAIT_BOUND_S = 20.0  # no event a test waits for takes this long unless the code is broken
BLOCK_SIZE = 16


@dataclass
class FakeUpstream:
    """An OpenAI-compatible fake. Each completion is logged, then held until ``release`` is set
    (``hold="headers"``: before answering; ``"first_chunk"``: a stream after its first chunk;
    ``"after_done"``: a stream after its ``[DONE]``, the connection still open);
    ``on_request`` sees each arrival first. ``changed`` is set (and replaced) at each change."""

    num_tokens: int = 3
    hold: str = "headers"
    usage_tokens: Any = None  # None: num_tokens
    num_gpu_blocks: int = 1001
    kv_usage: float | None = None  # vllm:kv_cache_usage_perc on /metrics (None: not there)
    num_preemptions: int | None = None  # vllm:num_preemptions_total on /metrics
    release: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    received: list[dict[str, Any]] = field(default_factory=list)
    on_request: Callable[[Request, dict[str, Any]], None] | None = None
    held: int = 0
    peak_held: int = 0
    aborted: int = 0
    num_tokenized: int = 0
    refuse: tuple[int, str] | None = None  # (HTTP status, or 200 for an event mid-stream, msg)
    refuse_tokenize: tuple[int, str] | None = None  # /tokenize's refusal: (HTTP status, msg)
    # an engine's own error answer: (HTTP status, or 200 for an event in a stream, its JSON)
    refuse_body: tuple[int, dict[str, Any]] | None = None
    on_tokenize: Callable[[], None] | None = None  # called as /tokenize counts
    max_model_len: int | None = None  # told by /v1/models, as vLLM does (None: not told)
    block_size: int = BLOCK_SIZE  # told by /metrics' vllm:cache_config_info

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/v1/completions", self.completion, methods=["POST"]),
            Route("/v1/chat/completions", self.completion, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/tokenize", self.tokenize, methods=["POST"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ])

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def models(self, request: Request) -> Response:
        told = {} if self.max_model_len is None else {"max_model_len": self.max_model_len}
        return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model",
                                                         **told}]},
                            headers={"x-upstream-secret": "s3cret"})

    async def tokenize(self, request: Request) -> Response:
        """``count``: the prompt's words plus one (a BOS token), a figure the tests can tell
        apart from the byte bound."""
        body = await request.json()
        self.num_tokenized += 1
        if self.on_tokenize is not None:
            self.on_tokenize()
        if self.refuse_tokenize is not None:  # vLLM 0.32.0's error body
            status, message = self.refuse_tokenize
            return JSONResponse({"error": {"message": message, "type": "BadRequestError",
                                           "param": None, "code": status}}, status_code=status)
        text = body.get("prompt") or " ".join(  # content parts: their JSON's words
            m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            for m in body["messages"])
        if body.get("tools"):  # rendered into the prompt, as a chat template does
            text = f"{text} {json.dumps(body['tools'])}"
        return JSONResponse({"count": len(str(text).split()) + 1, "max_model_len": 8192,
                             "tokens": []})

    async def metrics(self, request: Request) -> Response:
        usage = "" if self.kv_usage is None else \
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="fake"}} {self.kv_usage}\n'
        if self.num_preemptions is not None:
            usage += (f'vllm:num_preemptions_total{{engine="0",model_name="fake"}} '
                      f'{self.num_preemptions}\n')
        return PlainTextResponse(
            f'vllm:cache_config_info{{block_size="{self.block_size}",'
            f'num_gpu_blocks="{self.num_gpu_blocks}"}} 1.0\n' + usage)

    async def _hold(self, request: Request | None = None) -> None:
        """Wait for ``release``; with ``request``, a client that goes away first is counted
        as an abort (vLLM's handlers are cancelled when their client disconnects)."""
        self.held += 1
        self.peak_held = max(self.peak_held, self.held)
        self._changed()
        waits = {asyncio.ensure_future(self.release.wait())}
        if request is not None:
            waits.add(asyncio.ensure_future(_disconnected(request)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not self.release.is_set():  # the client went away
                self.aborted += 1
                raise asyncio.CancelledError
        finally:
            for w in waits:
                w.cancel()
            self.held -= 1
            self._changed()

    async def completion(self, request: Request) -> Response:
        body = await request.json()
        body["_headers"] = dict(request.headers)
        self.received.append(body)
        if self.on_request is not None:
            self.on_request(request, body)
        self._changed()
        tokens = self.num_tokens if self.usage_tokens is None else self.usage_tokens
        usage = {"prompt_tokens": 5, "completion_tokens": tokens,
                 "total_tokens": 5 + tokens if isinstance(tokens, int) else None}
        if self.hold == "headers":
            try:
                await self._hold(request)
            except asyncio.CancelledError:
                return Response(status_code=499)
        if self.refuse_body is not None:
            status, payload = self.refuse_body
            if status != 200 or not body.get("stream"):
                return JSONResponse(payload, status_code=status)
            return StreamingResponse(iter([f"data: {json.dumps(payload)}\n\n",
                                           "data: [DONE]\n\n"]),
                                     media_type="text/event-stream")
        if self.refuse is not None:
            status, message = self.refuse
            error = {"error": {"object": "error", "message": message, "type": "ServiceUnavailable",
                               "param": None, "code": 503}}
            if status != 200 or not body.get("stream"):
                return JSONResponse(error, status_code=status)
            return StreamingResponse(iter([f"data: {json.dumps(error)}\n\n", "data: [DONE]\n\n"]),
                                     media_type="text/event-stream")
        if not body.get("stream"):
            key = "message" if "messages" in body else "text"
            return JSONResponse({"id": "c", "object": "text_completion", "model": "fake",
                                 "choices": [{"index": 0, key: "x" * self.num_tokens,
                                              "finish_reason": "length"}], "usage": usage},
                                headers={"x-upstream-secret": "s3cret"})
        return StreamingResponse(self._events(body, usage), media_type="text/event-stream")

    async def _events(self, body: dict[str, Any], usage: dict[str, Any]) -> AsyncIterator[str]:
        try:
            for i in range(self.num_tokens):
                yield "data: " + json.dumps({"id": "c", "model": "fake", "choices": [
                    {"index": 0, "text": "x", "finish_reason": None}]}) + "\n\n"
                if i == 0 and self.hold == "first_chunk":
                    await self._hold()
            if (body.get("stream_options") or {}).get("include_usage"):
                yield "data: " + json.dumps({"id": "c", "model": "fake", "choices": [],
                                             "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"
            if self.hold == "after_done":
                await self._hold()
        except asyncio.CancelledError:
            self.aborted += 1
            self._changed()
            raise


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until(pred: Callable[[], bool], *sources: Callable[[], asyncio.Event]) -> None:
    """Wait until ``pred()`` holds, re-checking at each event of ``sources`` (each gives the
    current event, taken right after the check so no change is missed); bounded."""
    async with asyncio.timeout(WAIT_BOUND_S):
        while not pred():
            waits = [asyncio.ensure_future(source().wait()) for source in sources]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()


class _LoopbackServer(uvicorn.Server):
    """uvicorn without its signal handlers (the test process keeps its own), telling when it
    has started by an event."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.up = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.up.set()


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Run ``app`` on a free loopback port of this loop; yield its base URL; stop it after
    (connections still open after 5 s are cut)."""
    sock = loopback_socket()
    server = _LoopbackServer(uvicorn.Config(app, log_level="warning", lifespan="on",
                                            timeout_graceful_shutdown=5))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(WAIT_BOUND_S):
            up = asyncio.ensure_future(server.up.wait())
            await asyncio.wait({up, task}, return_when=asyncio.FIRST_COMPLETED)
            up.cancel()
            if task.done():
                task.result()
                raise RuntimeError("the server did not start")
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        async with asyncio.timeout(WAIT_BOUND_S):
            await task
        sock.close()


def make_server(upstream: str, capacity_tokens: int = 100_000, policy: str = "conservative",
                params: dict[str, Any] | None = None, on_action: Callable[[Action], None]
                | None = None, tiers: tuple[TierConfig, ...] = TIERS,
                **options: Any) -> GatewayServer:
    block = options.pop("reservation_granularity", 1)  # the upstreams' block_size, told
    gateway = Gateway(GatewayConfig(capacity_tokens=capacity_tokens, tiers=tiers,
                                    reservation_granularity=block),
                      make_policy(policy, params or {}))
    recorder = options.pop("recorder", None)
    clock = options.pop("clock", None)  # the admission's (time.monotonic by default)
    reload = options.pop("reload", None)
    settings = options.pop("settings", None)  # the upstreams' as told at the start
    router = options.pop("router", "round_robin")
    upstreams = (upstream, *options.pop("upstreams_extra", ()))
    options.setdefault("count_tokens", "bytes")
    config = ServeConfig(trust_tier_header=True, **options)
    admission = Admission(gateway, on_action=on_action) if clock is None else \
        Admission(gateway, on_action=on_action, clock=clock)
    return GatewayServer(admission,
                         Upstreams(UpstreamOptions(upstreams, api_key="sk-upstream",
                                                   router=router)),
                         config, recorder=recorder, reload=reload, settings=settings)


def assert_nothing_held(server: GatewayServer) -> None:
    gw = server.admission.gateway
    assert gw.budget.num_leases == 0 and gw.budget.reserved_tokens == 0
    assert not gw.admitted and gw.num_waiting() == 0
    assert server.admission.num_tickets == 0 and server.num_in_flight == 0
    assert server.upstreams.outstanding == [0] * len(server.upstreams.urls)


@contextlib.asynccontextmanager
async def stack(fake: FakeUpstream, **kwargs: Any) -> AsyncIterator[tuple[GatewayServer, str]]:
    """The fake upstream and a gateway in front of it; after the block, no lease is left."""
    async with serving(fake.app()) as up:
        server = make_server(up, **kwargs)
        async with serving(server.app) as url:
            yield server, url
            fake.release.set()  # whatever the test left held may end now
            await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
    assert_nothing_held(server)


def streamed_call(wants_usage: bool = False) -> Call:
    """A streamed completion's forwarding state (5 prompt tokens, ``max_tokens`` 8), asking
    for the usage chunk or not, for the relay's tests."""
    body: dict[str, Any] = {"model": "fake", "prompt": "hello", "max_tokens": 8, "stream": True}
    if wants_usage:
        body["stream_options"] = {"include_usage": True}
    comp = parse_completion(json.dumps(body).encode(), False, TIERS[0], 16)
    loop = asyncio.new_event_loop()
    try:
        ticket = Ticket(GatewayRequest(request_id=0, tier="interactive", arrival_s=0.0,
                                       prompt_tokens=5, max_output_tokens=8),
                        loop.create_future())
    finally:
        loop.close()
    return Call(ticket, comp, 0)
