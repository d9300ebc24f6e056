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

Router = Literal["round_robin", "least_tokens"]
ROUTERS: tuple[Router, ...] = ("round_robin", "least_tokens")


KEEPALIVE_EXPIRY_S = 2.0
"""How long an idle pooled connection to an upstream is kept: under uvicorn's
``--timeout-keep-alive`` default of 5 s (vLLM's API server runs uvicorn), so that the gateway
never sends on a connection the upstream is closing."""


NUM_POOLS = 16
"""Connection pools the forwarded requests are spread over. httpcore's pool scans every
connection it holds at each request's start and end (``AsyncConnectionPool.
_assign_requests_to_connections``), so one pool of a thousand streams costs a thousand checks
a request; measured with benchmarks/bench_serve.py (the figures are in the issue)."""


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
        self._next = 0
        headers = {"authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self.clients = tuple(httpx.AsyncClient(
            headers=headers, follow_redirects=False, trust_env=False,
            timeout=httpx.Timeout(options.read_timeout_s, connect=options.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=256,
                                keepalive_expiry=KEEPALIVE_EXPIRY_S))
            for _ in range(NUM_POOLS))
        self.client = self.clients[0]

    def client_for(self, request_id: int) -> httpx.AsyncClient:
        """The pool of one request (requests spread over :data:`NUM_POOLS` pools)."""
        return self.clients[request_id % NUM_POOLS]

    def pick(self, tokens: int) -> int:
        if self.options.router == "least_tokens":
            index = min(range(len(self.urls)), key=lambda i: (self.outstanding[i], i))
        else:
            index = self._next % len(self.urls)
            self._next += 1
        self.outstanding[index] += tokens
        return index

    def done(self, index: int, tokens: int) -> None:
        self.outstanding[index] -= tokens

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
        for client in self.clients:
            await client.aclose()
