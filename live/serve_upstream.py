"""The upstream servers of ``kvbudget serve``: one pooled HTTP client, a router, the prompt's
tokens from an upstream's ``/tokenize`` and the fleet's KV capacity from their ``/metrics``.

Only fixed paths are ever requested (the completions, ``/v1/models``, ``/tokenize``,
``/metrics``) on the configured base URLs: the gateway is no open proxy. The upstream's API key
goes on each request to it and never into an answer to a client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from kvbudget.live.server_metrics import snapshot

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


NUM_POOLS = 64
"""Connection pools the forwarded requests are spread over. httpcore's pool scans every
connection it holds at each request's start and end (``AsyncConnectionPool.
_assign_requests_to_connections``), so one pool of a thousand streams costs a thousand checks
a request; measured with benchmarks/bench_serve.py (the figures are in the issue)."""


STREAMS_PER_POOL = 8


class UpstreamError(Exception):
    """An upstream did not answer as it should (one line: which, what)."""


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    """``connect_timeout_s``/``read_timeout_s``: httpx's, per upstream request (the read
    timeout bounds a wait between two chunks of a stream, not a whole generation)."""

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
        headers = {"authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self._headers = headers
        # one TLS context for every pool: building one reads the CA bundle (about 30 ms of
        # CPU), which each pool made under load would otherwise pay again
        self._ssl = httpx.create_ssl_context(trust_env=False)
        self._urls: dict[tuple[int, str], httpx.URL] = {}
        self._clients: list[httpx.AsyncClient | None] = [None] * NUM_POOLS
        self.client = self._pool(0)

    def _pool(self, index: int) -> httpx.AsyncClient:
        client = self._clients[index]
        if client is None:  # made when first needed (each builds an SSL context)
            options = self.options
            client = httpx.AsyncClient(
                headers=self._headers, follow_redirects=False, trust_env=False, verify=self._ssl,
                timeout=httpx.Timeout(options.read_timeout_s,
                                      connect=options.connect_timeout_s),
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=256,
                                    keepalive_expiry=KEEPALIVE_EXPIRY_S))
            self._clients[index] = client
        return client

    def client_for(self, request_id: int, num_in_flight: int) -> httpx.AsyncClient:
        """The pool of a request sent while ``num_in_flight`` are: requests spread over one
        pool for each :data:`STREAMS_PER_POOL` in flight (up to :data:`NUM_POOLS`), so that a
        light load reuses warm connections and a heavy one keeps every pool small."""
        num_pools = min(NUM_POOLS, 1 + num_in_flight // STREAMS_PER_POOL)
        return self._pool(request_id % num_pools)

    def url(self, index: int, path: str) -> httpx.URL:
        """The URL of ``path`` on upstream ``index``, parsed once."""
        key = (index, path)
        url = self._urls.get(key)
        if url is None:
            url = self._urls[key] = httpx.URL(self.urls[index] + path)
        return url

    def pick(self, tokens: int, prefix: bytes = b"") -> int:
        """The upstream for a request of ``tokens`` whose prompt starts with ``prefix``."""
        router = self.options.router
        if router == "round_robin":
            index = self._next % len(self.urls)
            self._next += 1
        elif router == "prefix_affinity":
            index = self._prefix_affinity(prefix_hashes(prefix))
        else:
            index = self._least_tokens()
        self.outstanding[index] += tokens
        self.in_flight[index] += 1
        return index

    def done(self, index: int, tokens: int) -> None:
        self.outstanding[index] -= tokens
        self.in_flight[index] -= 1

    def _least_tokens(self) -> int:
        return min(range(len(self.urls)), key=lambda i: (self.outstanding[i], i))

    def _prefix_affinity(self, hashes: list[int]) -> int:
        """The simulator's router (``simulator/fleet.py``): the upstream that last took the
        longest leading run of the prompt's block hashes, unless the in-flight counts are
        imbalanced (SGLang's cache-aware router's thresholds); else the fewest tokens."""
        busiest, idlest = max(self.in_flight), min(self.in_flight)
        imbalanced = busiest - idlest > BALANCE_ABS_THRESHOLD and \
            busiest > BALANCE_REL_THRESHOLD * idlest
        best = -1
        if not imbalanced:
            for h in hashes:
                owner = self._owner.get(h)
                if owner is None:
                    break
                best = owner
        index = best if best >= 0 else self._least_tokens()
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
        try:
            resp = await self.client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{url}: {type(exc).__name__}") from None
        try:
            count = resp.json().get("count") if resp.status_code == 200 else None
        except (ValueError, AttributeError):
            count = None
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise UpstreamError(f"{url}: HTTP {resp.status_code}, no token count")
        return count

    async def capacity_tokens(self) -> tuple[int, int]:
        """The fleet's usable KV capacity, the sum of each upstream's, and the smallest of
        them (a request runs on one: the largest reservation), from their ``/metrics``
        (vLLM's ``vllm:cache_config_info``; see :mod:`kvbudget.live.server_metrics`)."""
        each: list[int] = []
        for base in self.urls:
            url = base + "/metrics"
            try:
                resp = await self.client.get(url)
            except httpx.HTTPError as exc:
                raise UpstreamError(f"{url}: {type(exc).__name__}") from None
            if resp.status_code != 200:
                raise UpstreamError(f"{url}: HTTP {resp.status_code}")
            snap = snapshot(resp.text)
            if snap.kv_capacity_tokens is None:
                why = snap.capacity_problem or "no KV capacity (vllm:cache_config_info)"
                raise UpstreamError(f"{url}: {why}")
            each.append(snap.kv_capacity_tokens)
        return sum(each), min(each)

    async def aclose(self) -> None:
        for client in self._clients:
            if client is not None:
                await client.aclose()
