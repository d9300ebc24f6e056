"""The upstream servers of ``kvbudget serve``: one pooled HTTP client, a router, the prompt's
tokens from an upstream's ``/tokenize`` and the fleet's KV capacity from their ``/metrics``.

The client is aiohttp's (``ClientSession`` over one ``TCPConnector`` pool): its response parser
is compiled (llhttp) and a stream's reads come straight from the connection's buffer, where
httpx (httpcore, h11 and anyio, all Python) spent about half the gateway's CPU a request
(``benchmarks/bench_serve.py``; the figures are in docs/serve.md).

Only fixed paths are ever requested (the completions, ``/v1/models``, ``/tokenize``,
``/metrics``) on the configured base URLs: the gateway is no open proxy. The upstream's API key
goes on each request to it and never into an answer to a client.
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
from yarl import URL

from kvbudget.live.server_metrics import EngineSnapshot, snapshot

Router = Literal["round_robin", "least_tokens", "prefix_affinity"]
ROUTERS: tuple[Router, ...] = ("round_robin", "least_tokens", "prefix_affinity")
PREFIX_BLOCK_BYTES = 64
"""Prompt bytes per prefix block hashed by the ``prefix_affinity`` router (about 16 tokens of
English, vLLM's default ``block_size``)."""
MAX_PREFIX_BLOCKS = 256
MAX_PREFIX_OWNERS = 1 << 16
"""Block hashes remembered (the oldest forgotten first): a bound on the router's memory."""
BALANCE_ABS_THRESHOLD = 64
BALANCE_REL_THRESHOLD = 1.5
"""SGLang's cache-aware router's defaults (``sgl-router --policy cache_aware``), as the
simulator's fleet uses them: affinity yields to the fewest tokens when the busiest upstream has
more than 64 more requests in flight than the idlest and more than 1.5 times as many."""


def prefix_hashes(prefix: bytes) -> list[int]:
    """Chained hashes of the prompt's leading blocks of :data:`PREFIX_BLOCK_BYTES` (a block's
    hash covers every block before it, as vLLM's prefix cache keys do)."""
    out: list[int] = []
    h = 0
    for start in range(0, min(len(prefix), PREFIX_BLOCK_BYTES * MAX_PREFIX_BLOCKS)
                       - PREFIX_BLOCK_BYTES + 1, PREFIX_BLOCK_BYTES):
        h = hash((h, prefix[start:start + PREFIX_BLOCK_BYTES]))
        out.append(h)
    return out


KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle pooled connection to an upstream is kept: under uvicorn's
``--timeout-keep-alive`` default of 5 s (vLLM's API server runs uvicorn), so that the gateway
never sends on a connection the upstream is closing."""


def failure_said(exc: BaseException) -> str:
    """An upstream call's failure for a log line: its type and, where it has one, aiohttp's
    message (``ClientConnectorError: Cannot connect to host 127.0.0.1:8000 ssl:default
    [Connect call failed ...]``), where the type alone left an operator guessing whether the
    upstream was down, slow or refusing; at most 200 characters."""
    said = str(exc).strip()
    name = type(exc).__name__
    if isinstance(exc, TimeoutError) and not said:
        said = "no answer within the timeout"
    return (f"{name}: {said}" if said else name)[:200]


class UpstreamError(Exception):
    """An upstream did not answer as it should (one line: which, what). ``refusal``: the
    upstream's own answer when it refused the request as the client's fault (HTTP 4xx: its
    status, body and content type), which is the client's to see."""

    def __init__(self, message: str, refusal: tuple[int, bytes, str] | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    """``connect_timeout_s``/``read_timeout_s``: per upstream request (aiohttp's ``connect``
    and ``sock_read``: the read timeout bounds a wait between two reads of a stream, not a
    whole generation)."""

    urls: tuple[str, ...]
    api_key: str | None = None
    router: Router = "round_robin"
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.urls:
            raise ValueError("serve needs at least one --upstream")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"--upstream {url!r}: expected an http:// or https:// URL")
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known: {', '.join(ROUTERS)}")


class Upstreams:
    """The pool. :meth:`pick` chooses an upstream for ``tokens`` (round robin, or the one with
    the fewest reserved tokens outstanding), :meth:`done` gives them back."""

    def __init__(self, options: UpstreamOptions) -> None:
        self.options = options
        self.urls = tuple(u.rstrip("/") for u in options.urls)
        self.outstanding = [0] * len(self.urls)
        self.in_flight = [0] * len(self.urls)
        self._owner: dict[int, int] = {}  # prefix block hash -> the upstream that last took it
        self._next = 0
        self._headers = {"authorization": f"Bearer {options.api_key}"} \
            if options.api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self._parsed: dict[tuple[int, str], URL] = {}  # (upstream, path): a few fixed paths

    @property
    def session(self) -> aiohttp.ClientSession:
        """The pooled client, made at its first use (in the running loop: aiohttp's wants
        one). Its connections share aiohttp's one default TLS context (building one reads the
        CA bundle, about 30 ms of CPU)."""
        if self._session is None:
            options = self.options
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S)
            # no cookie jar: a cookie one client's answer set must not go with another's
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, connect=options.connect_timeout_s,
                                              sock_read=options.read_timeout_s))
        return self._session

    def url(self, index: int, path: str) -> URL:
        """The URL of ``path`` on upstream ``index``, parsed once (aiohttp takes it as it is;
        a string would be parsed again each request)."""
        key = (index, path)
        url = self._parsed.get(key)
        if url is None:
            url = self._parsed[key] = URL(self.urls[index] + path)
        return url

    def pick(self, tokens: int, prefix: bytes = b"", down: Container[int] = ()) -> int:
        """The upstream for a request of ``tokens`` whose prompt starts with ``prefix``, among
        those not ``down`` (:class:`~kvbudget.live.serve_ready.Reachability`'s: a refused
        connection or a failed probe) while one is up; among all when all are down, so the
        client gets the answer for an unreachable upstream (502) and the first completion an
        upstream answers again marks it up. Envoy routes so: only healthy hosts, until too few
        are, then all of them ("panic threshold", envoyproxy.io, Load balancing); here the
        threshold is none up, a down being a refused connection, not a slow answer."""
        num = len(self.urls)
        # one upstream: it (down or not), whatever the router
        index = 0 if num == 1 else self._route(
            prefix, [i for i in range(num) if i not in down] or range(num))
        self.outstanding[index] += tokens
        self.in_flight[index] += 1
        return index

    def _route(self, prefix: bytes, up: Sequence[int]) -> int:
        """The router's choice among ``up``."""
        router = self.options.router
        if router == "round_robin":
            num = len(self.urls)
            index = next(i % num for i in range(self._next, self._next + num) if i % num in up)
            self._next = index + 1
            return index
        if router == "prefix_affinity":
            return self._prefix_affinity(prefix_hashes(prefix), up)
        return self._least_tokens(up)

    def done(self, index: int, tokens: int) -> None:
        self.outstanding[index] -= tokens
        self.in_flight[index] -= 1

    def _least_tokens(self, up: Sequence[int]) -> int:
        return min(up, key=lambda i: (self.outstanding[i], i))

    def _prefix_affinity(self, hashes: list[int], up: Sequence[int]) -> int:
        """The simulator's router (``simulator/fleet.py``): the upstream that last took the
        longest leading run of the prompt's block hashes, unless the in-flight counts are
        imbalanced (SGLang's cache-aware router's thresholds); else the fewest tokens."""
        busiest, idlest = (f(self.in_flight[i] for i in up) for f in (max, min))
        imbalanced = busiest - idlest > BALANCE_ABS_THRESHOLD and \
            busiest > BALANCE_REL_THRESHOLD * idlest
        best = -1
        if not imbalanced:
            for h in hashes:
                owner = self._owner.get(h)
                if owner is None:
                    break
                best = owner
        index = best if best >= 0 and best in up else self._least_tokens(up)
        for h in hashes:
            self._owner.pop(h, None)
            self._owner[h] = index  # most recent last: the oldest are dropped first
        while len(self._owner) > MAX_PREFIX_OWNERS:
            del self._owner[next(iter(self._owner))]
        return index

    async def count_tokens(self, body: dict[str, Any]) -> int:
        """The prompt's tokens as the first upstream's tokenizer counts them: vLLM's
        ``POST /tokenize`` (``vllm/entrypoints/openai/protocol.py``: ``TokenizeCompletionRequest``
        takes ``prompt``, ``TokenizeChatRequest`` ``messages`` and ``add_generation_prompt``;
        ``TokenizeResponse`` answers ``count``)."""
        url = self.urls[0] + "/tokenize"
        status, content, kind = await self.get(url, body)
        try:
            count = json.loads(content).get("count") if status == 200 else None
        except (ValueError, AttributeError):
            count = None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            # a 4xx is the request's fault (a chat the model has no template for, a model it
            # does not serve): the upstream's own answer, for the client
            raise UpstreamError(f"{url}: HTTP {status}, no token count",
                                (status, content, kind) if 400 <= status < 500 else None)
        return count

    async def get(self, url: str, body: dict[str, Any] | None = None
                  ) -> tuple[int, bytes, str]:
        """GET ``url`` (POST ``body`` as JSON when given): its status, body and content type
        (:class:`UpstreamError` when it cannot be reached or read)."""
        try:
            async with self.session.request("GET" if body is None else "POST", url,
                                            json=body, allow_redirects=False) as resp:
                return (resp.status, await resp.read(),
                        resp.headers.get("content-type", "application/json"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamError(f"{url}: {failure_said(exc)}") from None

    async def snapshots(self) -> list[EngineSnapshot]:
        """Each upstream's ``/metrics`` read (:class:`UpstreamError` when one cannot be)."""
        each: list[EngineSnapshot] = []
        for base in self.urls:
            url = base + "/metrics"
            status, content, _ = await self.get(url)
            if status != 200:
                raise UpstreamError(f"{url}: HTTP {status}")
            each.append(snapshot(content.decode("utf-8", "replace")))
        return each

    def fleet_capacity(self, snaps: list[EngineSnapshot]) -> tuple[int, int | None]:
        """The fleet's usable KV capacity, the sum of each upstream's, and the largest
        reservation one request may hold: the smallest engine's capacity (a request runs on
        one upstream, and on one of its data-parallel engines: a vLLM ``--data-parallel-size
        N`` upstream's ``/metrics`` tells all its N engines' KV), None where that is the whole
        budget (one upstream of one engine). From their ``/metrics`` (vLLM's
        ``vllm:cache_config_info``; see :mod:`kvbudget.live.server_metrics`)."""
        each: list[int] = []
        engines: list[int] = []
        for base, snap in zip(self.urls, snaps, strict=True):
            if snap.kv_capacity_tokens is None:
                why = snap.capacity_problem or "no KV capacity (vllm:cache_config_info)"
                raise UpstreamError(f"{base}/metrics: {why}")
            if snap.engine_capacity_tokens is None:
                raise UpstreamError(f"{base}/metrics: {snap.num_gpu_blocks} KV blocks over "
                                    f"{snap.num_engines} engines: no engine holds one")
            each.append(snap.kv_capacity_tokens)
            engines.append(snap.engine_capacity_tokens)
        total, cap = sum(each), min(engines)
        return total, cap if cap < total else None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def kv_used_tokens(snaps: list[EngineSnapshot]) -> int | None:
    """Tokens in the upstreams' allocated KV blocks (each one's usage fraction times its
    capacity, summed), or None when one of them does not tell it."""
    used = [snap.kv_used_tokens() for snap in snaps]
    return None if not used or any(u is None for u in used) else sum(
        u for u in used if u is not None)


class EngineCounter:
    """The upstreams' engines' preemptions (``vllm:num_preemptions_total``), summed, counted
    on across an upstream's restart (a counter that went down was reset: what it had counted
    still happened, Prometheus's rule; the replay counts them so). ``total``: None until
    every upstream has told it."""

    def __init__(self) -> None:
        self._last: list[int] | None = None
        self._carried = 0
        self.total: int | None = None

    def update(self, snaps: list[EngineSnapshot]) -> None:
        values = [snap.num_preemptions_total for snap in snaps]
        if not values or any(v is None for v in values):
            return
        now = [int(v) for v in values if v is not None]
        if self._last is not None and len(self._last) == len(now):
            self._carried += sum(last for last, v in zip(self._last, now, strict=True)
                                 if v < last)
        self._last = now
        self.total = self._carried + sum(now)
