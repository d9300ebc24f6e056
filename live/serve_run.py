"""Running ``kvbudget serve`` as a process: the gateway built from its settings, uvicorn on a
socket of ours, and the signals: SIGTERM (or Ctrl-C) drains (new connections refused, ``/ready``
503, requests waiting for admission refused at once, requests in flight finish within
``drain_timeout_s`` or are aborted then, the run directory closed), SIGHUP or
a change of the scenario file reloads the policy, the budget, the front door and the lease TTL
(a bad file, or a change of tiers, keeps everything running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import uvicorn

from kvbudget.live.gateway_server import GatewayServer, ServeConfig
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.serve_admission import Admission
from kvbudget.live.serve_records import ServeRecorder, gateway_meta
from kvbudget.live.serve_reload import Reloaded, ScenarioReloads, policy_said
from kvbudget.live.serve_settings import UpstreamSettings, block_tokens, fleet_context, told
from kvbudget.live.serve_upstream import UpstreamOptions, Upstreams
from kvbudget.live.server import BackendUnavailable, discover
from kvbudget.live.server_metrics import EngineSnapshot
from kvbudget.policies.base import Policy
from kvbudget.policies.gateway import FrontDoor, Gateway, GatewayConfig
from kvbudget.policies.tiers import DEFAULT_TIERS, TierConfig
from kvbudget.workloads.fetch import is_loopback_host

MAX_HEADER_BYTES = 64 * 1024
"""The largest request head the gateway accepts (h11's own default is 16 KiB): beyond it the
connection is answered 400 and closed, by :class:`_BoundedHttpTools` or by h11's
``h11_max_incomplete_event_size``."""

LISTEN_BACKLOG = 2048
"""The listening socket's backlog: uvicorn's default (``uvicorn.Config(backlog=2048)``), which
its start gives the socket again."""

DRAIN_BACKSTOP_S = 5.0
"""uvicorn's own graceful-shutdown bound is the drain's deadline plus this: the gateway aborts
what is left at the deadline itself (:meth:`GatewayServer.drain`), and uvicorn cancels whatever
that did not end (its connections' tasks) only after."""


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Everything ``kvbudget serve`` runs with. ``new_policy`` makes the policy (again, on a
    reload, unless ``reload`` reads the scenario's settings with it); ``watch``: a file whose
    change reloads it; ``capacity_tokens``: the budget, or ``None`` to read it from the
    upstreams' ``/metrics`` (again every ``config.capacity_period_s``)."""

    tiers: tuple[TierConfig, ...]
    new_policy: Callable[[], Policy]
    upstream: UpstreamOptions
    config: ServeConfig
    host: str = "127.0.0.1"
    port: int = 8100
    out: Path | None = None
    rotate_requests: int = 10_000
    drain_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    watch: Path | None = None
    capacity_tokens: int | None = None
    front_door: FrontDoor | None = None
    lease_ttl_s: float | None = None
    reload: Callable[[], Reloaded] | None = None
    capacity_from: str = "--capacity-tokens"
    """Where a given ``capacity_tokens`` came from (the flag, or the scenario's
    ``gateway_capacity_tokens``), said as the gateway starts."""

    def gateway(self, capacity_tokens: int, max_request_tokens: int | None = None,
                block_tokens: int = 1) -> GatewayConfig:
        """The gateway's settings; ``block_tokens``: the upstreams' KV block size, to which
        every reservation is rounded up (as the engine allocates, and as a simulation of the
        run directory reserves)."""
        return GatewayConfig(capacity_tokens=capacity_tokens, tiers=self.tiers,
                             lease_ttl_s=self.lease_ttl_s, front_door=self.front_door,
                             max_request_tokens=max_request_tokens,
                             reservation_granularity=block_tokens)


async def read_capacity(options: UpstreamOptions
                        ) -> tuple[int, int | None, list[EngineSnapshot]]:
    """The upstreams' KV capacity now, in all and the most one request may reserve
    (:meth:`~kvbudget.live.serve_upstream.Upstreams.fleet_capacity`), and their ``/metrics``
    as read (:class:`~kvbudget.live.serve_upstream.UpstreamError` when one does not tell it)."""
    upstreams = Upstreams(options)
    try:
        snaps = await upstreams.snapshots()
    finally:
        await upstreams.aclose()
    return (*upstreams.fleet_capacity(snaps), snaps)


async def upstream_facts(options: UpstreamOptions,
                         snaps: Sequence[EngineSnapshot] | None = None) -> list[dict[str, Any]]:
    """What each upstream says of itself (:meth:`~kvbudget.live.server.ServerInfo.facts`: its
    ``/v1/models`` and ``/metrics``; ``snaps``: their ``/metrics`` read already, at the
    start by :func:`read_capacity`, not read twice), in ``options.urls``' order; an upstream
    that does not answer says nothing (``{}``): the gateway starts anyway, and its run
    directories then do not say that server's settings."""
    async def one(client: httpx.AsyncClient, index: int) -> dict[str, Any]:
        target = ServerTarget(options.urls[index], api_key=options.api_key,
                              connect_timeout_s=options.connect_timeout_s)
        try:
            return (await discover(client, target,
                                   None if snaps is None else snaps[index])).facts()
        except (BackendUnavailable, httpx.HTTPError):
            return {}

    async with httpx.AsyncClient() as client:
        return list(await asyncio.gather(*(one(client, i) for i in range(len(options.urls)))))


def request_cap_said(urls: Sequence[str], snaps: Sequence[EngineSnapshot], cap: int) -> str:
    """The start line of the most one request may reserve (one engine's KV, where that is
    less than the budget): which upstream's engines, and why."""
    parallel = [f"{url} runs {snap.num_engines} data-parallel engines, "
                f"{snap.num_gpu_blocks:,} KV blocks in all" for url, snap in zip(
                    urls, snaps, strict=True) if snap.num_engines > 1]
    why = "; ".join(parallel) + ("; " if parallel else "")
    return (f"a request reserves at most {cap:,} tokens (prompt + max_tokens), the smallest "
            f"engine's KV ({why}a request runs on one engine; the budget is all of them): "
            "a larger one is refused (400)")


def build_server(settings: ServeSettings, gateway: GatewayConfig,
                 servers: list[dict[str, Any]] | None = None) -> GatewayServer:
    """The app, its admission over a fresh :class:`Gateway`, and its run directories (whose
    ``replay.json`` keeps the tiers it admits by and what the upstreams said of themselves, ``servers``: a lone
    upstream's as ``server``, as a replay's, read back as the recording's settings; at the
    start, and again when an upstream changes them:
    :class:`~kvbudget.live.serve_settings.UpstreamSettings`)."""
    policy = settings.new_policy()
    recorder = None
    if settings.out is not None:
        recorder = ServeRecorder(settings.out, tiers=gateway.tiers, policy=policy.describe(),
                                 rotate_requests=settings.rotate_requests,
                                 meta={"executor": "serve", "upstreams": list(
                                     settings.upstream.urls), "policy": policy.describe(),
                                     "router": settings.upstream.router,
                                     "tiers": [asdict(t) for t in gateway.tiers],
                                     "count_tokens": settings.config.count_tokens,
                                     **gateway_meta(gateway),
                                     **told(servers or [])})
    return GatewayServer(Admission(Gateway(gateway, policy)), Upstreams(settings.upstream),
                         settings.config, recorder=recorder,
                         reload=settings.reload or settings.new_policy,
                         settings=UpstreamSettings(servers) if servers else None)


class _Uvicorn(uvicorn.Server):
    """uvicorn whose SIGTERM/SIGINT first mark the gateway draining (``/ready`` answers 503 and
    new completions 503) and whose process then exits 0 (uvicorn re-raises a caught signal
    after its shutdown otherwise)."""

    def __init__(self, config: uvicorn.Config, gateway: GatewayServer, drain_timeout_s: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(config)
        self.gateway = gateway
        self.drain_timeout_s = drain_timeout_s
        self.loop = loop

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        old = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT,
                                                                      signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.gateway.draining:
            print(f"kvbudget serve: draining ({signal.Signals(sig).name}): no new requests, "
                  f"those waiting refused; those in flight have {self.drain_timeout_s:g} s",
                  file=sys.stderr, flush=True)
            # a signal handler runs between any two bytecodes of the loop's thread: the
            # admission is changed from the loop itself
            self.loop.call_soon_threadsafe(self.gateway.drain, self.drain_timeout_s)
        self.gateway.draining = True
        super().handle_exit(sig, frame)


def _counted_by(config: ServeConfig) -> str:
    """How prompts are counted, and the count's error, for the start line."""
    if config.tokenizer is not None:
        return (f"the local tokenizer {config.tokenizer.name} (exact when it is the served "
                "model's)")
    if config.count_tokens == "upstream":
        return "the upstream /tokenize (exact: the served model's own count)"
    return ("a bound of one token a UTF-8 byte plus 16 (never fewer than the tokenizer's: it "
            "over-reserves, about 4x for English text)")


def _capacity_said(settings: ServeSettings) -> str:
    """Where the budget comes from, for the start line."""
    period = settings.config.capacity_period_s
    if settings.capacity_tokens is None:
        return ("the upstreams' KV, vllm:cache_config_info on their /metrics"
                + ("" if period is None else f", read again every {period:g} s"))
    return settings.capacity_from


def _admission_said(settings: ServeSettings, policy: Mapping[str, Any]) -> str:
    """The policy the gateway admits by, and how a request's tier is told: its API key or the
    tier header (whom that trusts), and that clients' keys are not passed upstream."""
    config = settings.config
    keys = f"{len(config.keys.digests)} key" + ("s" if len(config.keys.digests) != 1 else "")
    if config.keys.digests and config.trust_tier_header:
        tier = (f"its API key (--keys: {keys}), else, with no key, its x-kvbudget-tier "
                f"header (--trust-tier-header), {config.default_tier} without one; an unknown "
                "key gets 401")
    elif config.keys.digests:
        tier = f"its API key (--keys: {keys}; a missing or unknown key gets 401)"
    else:
        tier = ("its x-kvbudget-tier header, trusted (no --keys, " + (
            "a loopback address" if is_loopback_host(settings.host) else "--trust-tier-header")
            + f"), {config.default_tier} without one; no API key is checked")
    return (f"policy {policy_said(policy)}"
            + (f" from {settings.watch} (reloaded on SIGHUP or when it changes)"
               if settings.watch else "")
            + f"; a request's tier is {tier}; clients' API keys are not passed upstream ("
            + ("--upstream-api-key is sent" if settings.upstream.api_key else "it gets none")
            + ")")


def _tiers_said(tiers: tuple[TierConfig, ...]) -> str:
    """Each tier's request limit and admission wait, and whether they are the defaults (a
    limit nobody set refuses requests the upstream's model would take)."""
    whose = (" (the defaults: a --scenario's [[tiers]] sets them)" if tiers == DEFAULT_TIERS
             else "")
    return whose + ": " + "; ".join(
        f"{t.name} up to {t.max_sequence_tokens:,} tokens a request (prompt + max_tokens), "
        + ("waits without limit" if t.queue_timeout_s is None
           else f"waits up to {t.queue_timeout_s:g} s")
        + (", retryable" if t.retryable_on_overload else "") for t in tiers)


def _default_max_tokens_said(config: ServeConfig) -> str:
    """What a request that gives no ``max_tokens`` is sent with: the gateway must reserve its
    output, so it writes one in, and the output stops there."""
    return (f"a request without max_tokens is sent with max_tokens {config.default_max_tokens} "
            "(--default-max-tokens; less where its tier's limit is smaller) and its output "
            "stops there, where the upstream's own default (vLLM: the model's context less "
            "the prompt) would go on")


def http_protocol() -> type[asyncio.Protocol] | str:
    """The HTTP/1.1 parser of the gateway's server: httptools (llhttp, compiled) where it is
    installed, bounded to :data:`MAX_HEADER_BYTES` by :class:`_BoundedHttpTools` (uvicorn's
    own httptools protocol has no head limit); else h11 (Python), whose option bounds it."""
    try:
        return _bounded_httptools()
    except ImportError:
        return "h11"


def _bounded_httptools() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _BoundedHttpTools(HttpToolsProtocol):
        """uvicorn's httptools protocol that answers 400 and closes a connection whose request
        head is still incomplete after :data:`MAX_HEADER_BYTES` (llhttp buffers a header
        until it ends, without a bound of its own). The bytes counted are those of the reads
        during which the head was incomplete: a read that also ends a previous body is
        counted whole, an error of at most one read on the safe side."""

        _head_bytes = 0
        _in_head = False

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_head = True

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._head_bytes = 0
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self._in_head:
                return
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                self._in_head = False
                self.send_400_response("Request head too large.")

    return _BoundedHttpTools


def event_loop() -> Callable[[], asyncio.AbstractEventLoop]:
    """The gateway's event loop: uvloop's (libuv, compiled) where it is installed, else
    asyncio's own. Its cost a request is measured in docs/serve.md ("Measured")."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def server_config(app: Any, *, drain_timeout_s: float, keep_alive_s: float) -> uvicorn.Config:
    """uvicorn's settings for the gateway: its HTTP parser is :func:`http_protocol`'s (never
    uvicorn's ``auto``, which takes httptools without a head limit whenever it is
    installed); no proxy-header middleware."""
    return uvicorn.Config(
        app, lifespan="on", log_level="warning", access_log=False,
        # no X-Forwarded-* rewriting of the client's address (uvicorn's default, for
        # 127.0.0.1): the gateway reads no client address, and it costs a layer a request
        proxy_headers=False,
        timeout_graceful_shutdown=math.ceil(drain_timeout_s + DRAIN_BACKSTOP_S),
        timeout_keep_alive=max(int(keep_alive_s), 1),
        http=http_protocol(), h11_max_incomplete_event_size=MAX_HEADER_BYTES)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket. Made with ``IPPROTO_TCP`` named: asyncio disables Nagle's
    algorithm (``TCP_NODELAY``) on a connection only when its socket says so
    (``asyncio.base_events._set_nodelay``), and connections accepted from a socket made with
    protocol 0 held each token written after the first on a kept-alive connection until the
    client's delayed ACK (~40 ms on Linux): a stream reached its client in one piece.
    It listens at once (uvicorn's own backlog, :data:`LISTEN_BACKLOG`), before the start line
    says so: the line came before uvicorn's start listened, and a client that connected on
    reading it (a test, a supervisor's probe) was refused on a loaded machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    return sock


async def serve(settings: ServeSettings, announce: Callable[[str], Any] = print) -> GatewayServer:
    """Run the gateway until SIGTERM/SIGINT; return it (its run directories closed). Without
    a configured capacity it is read from the upstreams first (``UpstreamError`` if none
    tells it)."""
    log = logging.getLogger("kvbudget.serve")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("kvbudget serve: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    capacity, largest, snaps = settings.capacity_tokens, None, None
    if capacity is None:  # one /metrics read an upstream: the capacity and its settings
        capacity, largest, snaps = await read_capacity(settings.upstream)
    servers = await upstream_facts(settings.upstream, snaps)
    gateway = settings.gateway(capacity, largest, block_tokens(servers))
    context = fleet_context(servers)
    followed = settings.config.capacity_period_s is not None
    if settings.config.max_model_len is None and followed:
        # the cap only where a capacity read follows the upstreams: one that restarted with a
        # larger context would otherwise use more than it reserved
        settings = replace(settings, config=replace(settings.config, max_model_len=context))
    server = build_server(settings, gateway, servers)
    sock = bind(settings.host, settings.port)
    config = server_config(server.app, drain_timeout_s=settings.drain_timeout_s,
                           keep_alive_s=settings.keep_alive_s)
    loop = asyncio.get_running_loop()
    runner = _Uvicorn(config, server, settings.drain_timeout_s, loop)
    # one reload a change of the scenario, whether SIGHUP or the watcher sees it first
    reloads = None if settings.watch is None else ScenarioReloads(settings.watch, server.reload)
    loop.add_signal_handler(signal.SIGHUP, server.reload if reloads is None
                            else reloads.signalled)
    watcher = None if reloads is None else asyncio.create_task(reloads.watch())
    host, port = sock.getsockname()[:2]
    announce(f"kvbudget serve: listening on http://{host}:{port} "
             f"(upstreams: {', '.join(settings.upstream.urls)}; capacity "
             f"{gateway.capacity_tokens} tokens, {_capacity_said(settings)}; prompt tokens "
             f"counted by {_counted_by(settings.config)})")
    described = server.admission.gateway.policy.describe()
    announce(f"kvbudget serve: {_admission_said(settings, described)}")
    if largest is not None and snaps is not None:
        announce(f"kvbudget serve: {request_cap_said(settings.upstream.urls, snaps, largest)}")
    announce(f"kvbudget serve: tiers{_tiers_said(settings.tiers)}")
    announce(f"kvbudget serve: {_default_max_tokens_said(settings.config)}")
    if gateway.reservation_granularity > 1:
        announce(f"kvbudget serve: a reservation is rounded up to whole KV blocks of "
                 f"{gateway.reservation_granularity} tokens (the upstreams' block_size, the "
                 "largest where they differ), as their engines allocate KV" + (
                     "; read again at each capacity read" if followed else
                     "; read at the start only: no capacity read follows the upstreams (a budget "
                     "given)"))
    if settings.config.max_model_len is not None:
        announce(f"kvbudget serve: a reservation ends at the upstreams' context, max_model_len "
                 f"{settings.config.max_model_len:,} (prompt + max_tokens over it is served "
                 "with its output cut there, as vLLM does, where max_tokens alone is within "
                 "it; the context as the upstreams tell it, read again at each capacity read)")
    elif context is not None and not followed:
        announce(f"kvbudget serve: a reservation is prompt + max_tokens, not cut at the "
                 f"upstreams' context ({context:,} tokens at the start): with --capacity-tokens "
                 "no read follows the upstreams, and one restarted with a larger context would "
                 "use more than it reserved")
    try:
        await runner.serve(sockets=[sock])
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
        if watcher is not None:
            watcher.cancel()
        sock.close()
    if server.recorder is not None and server.recorder.closed:
        announce(f"kvbudget serve: stopped; run directories: "
                 f"{', '.join(str(p) for p in server.recorder.closed)}")
    else:
        announce("kvbudget serve: stopped")
    sys.stdout.flush()
    return server
