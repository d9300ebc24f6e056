"""A streaming client for OpenAI-compatible ``/v1/completions`` (vLLM, SGLang, TGI, llama.cpp).

One call streams one completion and returns a :class:`StreamResult`: every failure (an HTTP error
status, a mid-stream error event, a reset connection, a timeout) is data on the result, never an
exception, so a replay records it on the request's row. Only cancellation propagates (the live
gateway cancels a stream to revoke a lease; closing the connection makes the server abort the
request and free its KV blocks).

Exact lengths: the prompt is sent as token ids (``prompt: [ids]``, accepted by vLLM, SGLang and
llama.cpp), so the server computes exactly that many prompt tokens; the output length is forced
with ``max_tokens`` plus ``ignore_eos`` and ``min_tokens``. Output tokens are counted from the
final ``usage`` (``stream_options.include_usage``), not from chunks: vLLM merges several tokens
into one chunk under load. Times come from ``time.perf_counter`` through the caller's clock.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

ErrorKind = Literal["", "http", "timeout", "connect", "reset", "stream_error", "protocol"]
TRANSPORT_ERRORS: frozenset[str] = frozenset({"connect", "reset", "timeout"})
"""Error kinds after which the replay checks whether the server is still there."""


def redact_url(url: str) -> str:
    """``url`` without the ``user:password@`` part, for printing."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{tail}"


@dataclass(frozen=True, slots=True)
class ServerTarget:
    """Where and how to send completions.

    ``base_url`` is the server root (``http://127.0.0.1:8000``; a trailing ``/v1`` is accepted).
    ``model`` is the served model name. ``read_timeout_s`` bounds the silence between two bytes
    of a response (a stalled stream becomes a ``timeout`` error on its row).
    ``exact_output`` sends ``ignore_eos`` and ``min_tokens`` so that the server generates exactly
    ``max_tokens`` tokens; ``extra_body`` is merged into every request body.
    """

    base_url: str
    model: str = ""
    api_key: str | None = field(default=None, repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 600.0
    exact_output: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    """``user:password@`` of the URL given, taken out of ``base_url`` (which is printed and
    written to run directories) and sent as an ``Authorization: Basic`` header instead."""

    def __post_init__(self) -> None:
        from urllib.parse import unquote, urlsplit, urlunsplit

        url = self.base_url.rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError("server URL must start with http:// or https://, got "
                             f"{redact_url(self.base_url)!r}")
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            host = parts.netloc.rpartition("@")[2]
            url = urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
            object.__setattr__(self, "basic_auth", (unquote(parts.username or ""),
                                                    unquote(parts.password or "")))
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        object.__setattr__(self, "base_url", url)
        for name in ("connect_timeout_s", "read_timeout_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0, got {value!r}")

    def url(self, path: str) -> str:
        return self.base_url + path

    def redact(self, text: str) -> str:
        """``text`` with this target's secrets (API key, URL password) replaced by ``***``."""
        for secret in (self.api_key, self.basic_auth[1] if self.basic_auth else None):
            if secret:
                text = text.replace(secret, "***")
        return text

    def headers(self) -> dict[str, str]:
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        if self.basic_auth is not None:
            import base64

            token = base64.b64encode(":".join(self.basic_auth).encode()).decode()
            return {"Authorization": f"Basic {token}"}
        return {}

    def timeout(self) -> httpx.Timeout:
        return httpx.Timeout(
            connect=self.connect_timeout_s, read=self.read_timeout_s,
            write=self.connect_timeout_s, pool=None,
        )


@dataclass(slots=True)
class StreamResult:
    """What one streamed completion did, on the caller's clock (seconds).

    ``chunk_s`` holds the arrival time of every chunk that carried output (TTFT is its first
    entry minus ``sent_s``); ``output_tokens`` is the server's ``usage.completion_tokens`` when it
    sent usage, else the number of such chunks. ``chunk_tokens`` holds the cumulative output
    tokens at each such chunk: exact where the server reports usage on every chunk (vLLM's and
    SGLang's ``stream_options.continuous_usage_stats``), else one per chunk. ``error`` is empty
    on success. ``retry_after_s``: what an error answer's ``Retry-After`` (or
    ``retry-after-ms``) header asked for, in seconds (``None``: no such header).
    """

    sent_s: float
    finished_s: float = math.nan
    chunk_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    usage_reported: bool = False
    finish_reason: str | None = None
    http_status: int | None = None
    retry_after_s: float | None = None
    error: str = ""
    error_kind: ErrorKind = ""

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def first_token_s(self) -> float:
        return self.chunk_s[0] if self.chunk_s else math.nan

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.sent_s

    def inter_chunk_gaps_s(self) -> list[float]:
        """Gaps between consecutive output chunks (a merged chunk hides one gap)."""
        return [b - a for a, b in itertools.pairwise(self.chunk_s)]


def completion_body(
    target: ServerTarget, prompt_ids: Sequence[int], max_tokens: int
) -> dict[str, Any]:
    """The JSON body of one streamed completion with exact prompt and output lengths."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    if not prompt_ids:
        raise ValueError("prompt_ids must not be empty")
    body: dict[str, Any] = {
        "model": target.model,
        "prompt": list(prompt_ids),
        "max_tokens": int(max_tokens),
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if target.exact_output:
        body["ignore_eos"] = True
        body["min_tokens"] = int(max_tokens)
    body.update(target.extra_body)
    return body


def _error_message(payload: Any) -> str:
    """The message of an OpenAI-style error object (``{"error": {...}}`` or ``{"object":
    "error", "message": ...}``), or '' when the payload is not an error."""
    if not isinstance(payload, dict):
        return ""
    err = payload.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    if isinstance(err, str) and err:
        return err
    if payload.get("object") == "error":
        return str(payload.get("message") or payload)
    return ""


def _count(value: Any) -> bool:
    """A token count as JSON carries one: a non-negative integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _event_problem(payload: Any, max_tokens: int) -> str:
    """What makes a parsed stream event unusable ('' when nothing): not an object, ``choices``
    not a list of objects, a ``usage`` that is not an object or whose counts are not
    non-negative integers, or more completion tokens than the request allowed. A server that
    sends such an event is not trusted with the rest of the stream: the request fails with a
    protocol error on its row, the replay goes on."""
    if not isinstance(payload, dict):
        return f"a {type(payload).__name__}, not an object"
    choices = payload.get("choices")
    if choices is not None and not (
            isinstance(choices, list) and all(isinstance(c, dict) for c in choices)):
        return "choices is not a list of objects"
    usage = payload.get("usage")
    if usage is None:
        return ""
    if not isinstance(usage, dict):
        return "usage is not an object"
    for key in ("completion_tokens", "prompt_tokens"):
        value = usage.get(key)
        if value is not None and not _count(value):
            return f"usage.{key} {value!r} is not a token count"
    completion = usage.get("completion_tokens")
    if completion is not None and completion > max_tokens:
        return f"usage.completion_tokens {completion} > max_tokens {max_tokens}"
    return ""


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """Seconds a response asks the client to wait: ``retry-after-ms`` (milliseconds, as the
    OpenAI SDKs read first), else ``Retry-After`` as seconds or an HTTP date (RFC 9110
    section 10.2.3); ``None`` when there is neither or it does not parse."""
    import email.utils
    import time

    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        when = email.utils.parsedate_tz(raw)
        if when is None:
            return None
        value = max(0.0, email.utils.mktime_tz(when) - time.time())
    return value if math.isfinite(value) and value >= 0 else None


async def stream_completion(
    client: httpx.AsyncClient,
    target: ServerTarget,
    prompt_ids: Sequence[int],
    max_tokens: int,
    *,
    clock: Callable[[], float],
    on_chunk: Callable[[int], None] | None = None,
) -> StreamResult:
    """Stream one completion; return what happened (errors included) on ``clock``'s time.

    ``on_chunk(tokens_so_far)`` is called at every output chunk (tokens counted from chunks, so
    a lower bound under chunk merging). Cancellation propagates and closes the connection.
    """
    body = completion_body(target, prompt_ids, max_tokens)
    res = StreamResult(sent_s=clock())
    counted = 0
    done = False
    loop = asyncio.get_running_loop()
    try:
        # ``read_timeout_s`` between two pieces of output, not only between two bytes: a server
        # that drips keep-alive bytes (or one line a byte at a time) without ever sending a
        # token ends as a timeout instead of holding the request forever
        async with asyncio.timeout(target.read_timeout_s) as progress, client.stream(
            "POST", target.url("/v1/completions"), json=body, headers=target.headers(),
            timeout=target.timeout(),
        ) as response:
            res.http_status = response.status_code
            if response.status_code >= 400:
                res.retry_after_s = retry_after_header(response.headers)
                raw = await response.aread()
                res.finished_s = clock()
                detail = ""
                try:
                    detail = _error_message(json.loads(raw))
                except ValueError:
                    detail = raw[:200].decode("utf-8", "replace").strip()
                detail = target.redact(detail)  # a server may echo the request's headers
                res.error = f"HTTP {response.status_code}" + (f": {detail}" if detail else "")
                res.error_kind = "http"
                return res
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue  # SSE comments, event names, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                try:
                    payload = json.loads(data)
                except ValueError:
                    res.finished_s = clock()
                    res.error = target.redact(f"malformed stream event: {data[:120]!r}")
                    res.error_kind = "protocol"
                    res.output_tokens = counted
                    return res
                message = _error_message(payload)
                if message:
                    res.finished_s = clock()
                    res.error = target.redact(f"stream error: {message}")
                    res.error_kind = "stream_error"
                    res.output_tokens = counted
                    return res
                problem = _event_problem(payload, max_tokens)
                if problem:
                    res.finished_s = clock()
                    res.error = target.redact(
                        f"malformed stream event ({problem}): {data[:120]!r}")
                    res.error_kind = "protocol"
                    res.output_tokens = counted
                    return res
                choices = payload.get("choices") or []
                usage = payload.get("usage")
                has_usage = isinstance(usage, dict) and usage.get("completion_tokens") is not None
                if choices or has_usage:
                    progress.reschedule(loop.time() + target.read_timeout_s)
                if choices:
                    now = clock()
                    counted = int(usage["completion_tokens"]) if has_usage else counted + 1
                    res.chunk_s.append(now)
                    res.chunk_tokens.append(counted)
                    reason = choices[0].get("finish_reason")
                    if reason:
                        res.finish_reason = str(reason)
                    if on_chunk is not None:
                        on_chunk(counted)
                if has_usage:
                    res.output_tokens = int(usage["completion_tokens"])
                    if usage.get("prompt_tokens") is not None:
                        res.prompt_tokens = int(usage["prompt_tokens"])
                    res.usage_reported = True
    except httpx.TimeoutException as exc:
        res.error, res.error_kind = f"timeout: {type(exc).__name__}", "timeout"
    except TimeoutError:
        res.error = f"timeout: no output for {target.read_timeout_s:g} s"
        res.error_kind = "timeout"
    except httpx.ConnectError as exc:
        res.error, res.error_kind = f"cannot connect to {target.base_url}: {exc}", "connect"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        res.error = f"connection closed mid-stream: {exc or type(exc).__name__}"
        res.error_kind = "reset"
    except httpx.HTTPError as exc:
        res.error, res.error_kind = f"{type(exc).__name__}: {exc}", "protocol"
    res.finished_s = clock()
    if not res.usage_reported:
        res.output_tokens = counted
    if not res.error and not done and res.finish_reason is None:
        res.error, res.error_kind = "stream ended before its last event", "reset"
    return res
