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
import base64
import email.utils
import itertools
import json
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from kvbudget.results.records import error_text

ErrorKind = Literal["", "http", "timeout", "connect", "reset", "stream_error", "protocol"]
TRANSPORT_ERRORS: frozenset[str] = frozenset({"connect", "reset", "timeout"})
"""Error kinds after which the replay checks whether the server is still there."""


def redact_url(url: str) -> str:
    """``url`` without the ``user:password@`` part, for printing (also when the scheme is
    missing: ``user:password@host:8000``), and without what follows a ``?`` or ``#`` (a query
    may carry a key: ``?api_key=...``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    for mark in ("?", "#"):
        head, found, _ = rest.partition(mark)
        rest = f"{head}{mark}***" if found else rest
    netloc, slash, tail = rest.partition("/")
    if not slash:  # a query straight after the host (http://host?key=...)
        for mark in ("?", "#"):
            netloc, found, _ = netloc.partition(mark)
            if found:
                tail, slash = f"{mark}***", ""
                break
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{tail}"


def _header_safe(secret: str) -> bool:
    """Whether ``secret`` can go in an HTTP header as it is: printable ASCII, no spaces."""
    return all(33 <= ord(c) <= 126 for c in secret)


def _checked_url(given: str) -> str:
    """``given`` as a server root httpx can send to, or ValueError quoting it (credentials
    left out): http or https, a host, a port in range, no query or fragment (the API paths are
    appended to the root)."""
    shown = repr(redact_url(given))
    url = given.strip()
    scheme = url.partition("://")[0].lower()
    if scheme not in ("http", "https") or "://" not in url:
        raise ValueError(f"server URL must start with http:// or https://, got {shown}")
    url = (scheme + url[len(scheme):]).rstrip("/")
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError when not a number in 0..65535
        httpx.URL(url)
    except (ValueError, httpx.InvalidURL) as exc:
        raise ValueError(f"server URL {shown} is not a valid URL: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"server URL {shown} names no host")
    if port == 0:
        raise ValueError(f"server URL {shown}: port 0 is no server's port")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError(f"server URL {shown} has a query or fragment; give the server root "
                         "(e.g. http://127.0.0.1:8000)")
    return url


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
        if self.api_key is not None and not _header_safe(self.api_key):
            # never quoted: h11 would refuse the header with its value in the message
            raise ValueError("the API key (--api-key, KVBUDGET_API_KEY) holds whitespace, a "
                             "control character or a non-ASCII character (a trailing "
                             "newline?); give the key alone")
        url = _checked_url(self.base_url)
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
        """``text`` with this target's secrets (API key, URL password, and the Basic token
        that encodes it) replaced by ``***``. Cut a text short only after redacting it: a cut
        through a secret would leave its first characters."""
        secrets = [self.api_key]
        if self.basic_auth is not None:
            secrets += [self._basic_token(), self.basic_auth[1]]
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    def _basic_token(self) -> str:
        assert self.basic_auth is not None
        return base64.b64encode(":".join(self.basic_auth).encode()).decode()

    def headers(self) -> dict[str, str]:
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        if self.basic_auth is not None:
            return {"Authorization": f"Basic {self._basic_token()}"}
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
    target: ServerTarget, prompt_ids: Sequence[int], max_tokens: int,
    min_tokens: int | None = None,
) -> dict[str, Any]:
    """The JSON body of one streamed completion with exact prompt and output lengths:
    ``min_tokens`` (default ``max_tokens``) is the output forced where ``exact_output``; a
    smaller one is the output a server that lowers ``max_tokens`` to the context left will
    give (vLLM refuses a ``min_tokens`` above the lowered ``max_tokens``)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    if min_tokens is None:
        min_tokens = max_tokens
    if not 0 <= min_tokens <= max_tokens:
        raise ValueError(f"min_tokens must be in 0..max_tokens {max_tokens}, got {min_tokens!r}")
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
        body["min_tokens"] = int(min_tokens)
    body.update(target.extra_body)
    return body


def error_message(payload: Any) -> str:
    """The message of an engine's error object, or '' when the payload is not an error
    (``results.records.error_text``: every engine's shape)."""
    return error_text(payload)


def _count(value: Any) -> bool:
    """A token count as JSON carries one: a non-negative integer (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


PROMPT_TOKENS_SLACK = 16
"""``usage.prompt_tokens`` may exceed the prompt sent by this many tokens (a server that adds a
BOS token or a template); beyond it the count is not this request's."""


def _event_problem(payload: Any, max_tokens: int, num_prompt: int) -> str:
    """What makes a parsed stream event unusable ('' when nothing): not an object, ``choices``
    not a list of objects each with a ``text`` string or a ``finish_reason`` (a string), a
    ``usage`` that is not an object or whose counts are not non-negative integers, more
    completion tokens than the request allowed, or a prompt far longer than the one sent. A
    server that sends such an event is not trusted with the rest of the stream: the request
    fails with a protocol error on its row, the replay goes on."""
    if not isinstance(payload, dict):
        return f"a {type(payload).__name__}, not an object"
    choices = payload.get("choices")
    if choices is not None and not (
            isinstance(choices, list) and all(isinstance(c, dict) for c in choices)):
        return "choices is not a list of objects"
    for choice in choices or ():
        text, reason = choice.get("text"), choice.get("finish_reason")
        if text is not None and not isinstance(text, str):
            return f"choices[].text {text!r} is not a string"
        if reason is not None and not isinstance(reason, str):
            return f"choices[].finish_reason {reason!r} is not a string"
        if text is None and reason is None:
            return "a choice with neither text nor finish_reason"
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
    prompt = usage.get("prompt_tokens")
    if prompt is not None and prompt > num_prompt + PROMPT_TOKENS_SLACK:
        return f"usage.prompt_tokens {prompt} for a prompt of {num_prompt} tokens"
    return ""


MAX_RETRY_AFTER_S = 86400.0
"""A ``Retry-After`` beyond a day is no wait a client honours (the OpenAI SDKs ignore one over
60 s and back off on their own): it is read as no header at all."""


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    """Seconds a response asks the client to wait: ``retry-after-ms`` (milliseconds, as the
    OpenAI SDKs read first), else ``Retry-After`` as seconds or an HTTP date (RFC 9110
    section 10.2.3); ``None`` when there is neither, it does not parse, or it asks for a
    negative wait or one beyond :data:`MAX_RETRY_AFTER_S`."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000
        except ValueError:
            value = math.nan
        if math.isfinite(value) and 0 <= value <= MAX_RETRY_AFTER_S:
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
    return value if math.isfinite(value) and 0 <= value <= MAX_RETRY_AFTER_S else None


MAX_EVENT_CHARS = 16 << 20
"""The longest line of an event stream taken (16 Mi characters; vLLM's events are a few
hundred): a server that sends an endless line fails the request instead of filling memory."""

_NEWLINE = re.compile(r"\r\n|\r|\n")


class _EventTooLong(Exception):
    pass


async def _stream_lines(response: httpx.Response, limit: int = MAX_EVENT_CHARS
                        ) -> AsyncIterator[str]:
    """The lines of an event stream (``\r\n``, ``\r`` or ``\n``; one split across two reads
    may add a blank line, which an event stream ignores); :class:`_EventTooLong` past
    ``limit`` characters without a line end."""
    pending: list[str] = []
    size = 0
    async for text in response.aiter_text():
        parts = _NEWLINE.split(text)
        if len(parts) == 1:
            pending.append(text)
            size += len(text)
            if size > limit:
                raise _EventTooLong
            continue
        pending.append(parts[0])
        yield "".join(pending)
        for line in parts[1:-1]:
            yield line
        pending, size = [parts[-1]], len(parts[-1])
    tail = "".join(pending)
    if tail:
        yield tail


async def stream_completion(
    client: httpx.AsyncClient,
    target: ServerTarget,
    prompt_ids: Sequence[int],
    max_tokens: int,
    *,
    clock: Callable[[], float],
    on_chunk: Callable[[int], None] | None = None,
    min_tokens: int | None = None,
) -> StreamResult:
    """Stream one completion; return what happened (errors included) on ``clock``'s time.

    ``on_chunk(tokens_so_far)`` is called at every output chunk (tokens counted from chunks, so
    a lower bound under chunk merging). ``min_tokens``: :func:`completion_body`'s.
    Cancellation propagates and closes the connection.
    """
    body = completion_body(target, prompt_ids, max_tokens, min_tokens)
    stream = _Stream(target, max_tokens, len(prompt_ids), clock, on_chunk,
                     StreamResult(sent_s=clock()))
    try:
        if await stream.exchange(client, body):
            return stream.res
    except (_EventTooLong, TimeoutError, httpx.HTTPError) as exc:
        stream.res.error, stream.res.error_kind = _failure(exc, target)
    return stream.settled()


def _failure(exc: Exception, target: ServerTarget) -> tuple[str, ErrorKind]:
    """The error and its kind for an exception that ended a stream."""
    if isinstance(exc, _EventTooLong):
        return (f"malformed stream event: a line longer than {MAX_EVENT_CHARS:,} characters",
                "protocol")
    if isinstance(exc, httpx.TimeoutException):
        return f"timeout: {type(exc).__name__}", "timeout"
    if isinstance(exc, TimeoutError):
        return f"timeout: no output for {target.read_timeout_s:g} s", "timeout"
    if isinstance(exc, httpx.ConnectError):
        return target.redact(f"cannot connect to {target.base_url}: {exc}"), "connect"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return target.redact(
            f"connection closed mid-stream: {str(exc) or type(exc).__name__}"), "reset"
    return target.redact(f"{type(exc).__name__}: {exc}"), "protocol"


@dataclass(slots=True)
class _Stream:
    """One streamed completion being read: the request, its result so far, and what the
    events taken so far counted."""

    target: ServerTarget
    max_tokens: int
    num_prompt: int
    clock: Callable[[], float]
    on_chunk: Callable[[int], None] | None
    res: StreamResult
    content_type: str = ""
    counted: int = 0
    text_chunks: int = 0  # chunks with text: each carried at least one token
    last_empty_s: float | None = None  # when the last chunk of no text that ended the choice came
    events: int = 0
    done: bool = False

    async def exchange(self, client: httpx.AsyncClient, body: dict[str, Any]) -> bool:
        """Send ``body`` and read the answer into :attr:`res`; True when the result is final
        (an error answer, a redirect, a bad event), False when the stream ended and its result
        is to be settled."""
        target = self.target
        # ``read_timeout_s`` between two pieces of output, not only between two bytes: a server
        # that drips keep-alive bytes (or one line a byte at a time) without ever sending a
        # token ends as a timeout instead of holding the request forever
        async with asyncio.timeout(target.read_timeout_s) as progress, client.stream(
            "POST", target.url("/v1/completions"), json=body, headers=target.headers(),
            timeout=target.timeout(),
        ) as response:
            self.res.http_status = response.status_code
            self.content_type = response.headers.get("content-type", "")
            if response.status_code >= 400:
                await self.error_answer(response)
                return True
            if 300 <= response.status_code < 400:
                self.redirect(response)
                return True
            async for line in _stream_lines(response):
                if not line.startswith("data:"):
                    continue  # SSE comments, event names, blank separators
                data = line[5:].strip()
                self.events += 1
                if data == "[DONE]":
                    self.done = True
                    break
                if self.take(data, progress):
                    return True
        return False

    async def error_answer(self, response: httpx.Response) -> None:
        """Record an HTTP error status, its ``Retry-After`` and its message (redacted, cut)."""
        res = self.res
        res.retry_after_s = retry_after_header(response.headers)
        raw = await response.aread()
        res.finished_s = self.clock()
        detail = ""
        try:
            detail = error_message(json.loads(raw))
        except (ValueError, RecursionError):
            detail = raw[:65536].decode("utf-8", "replace").strip()
        # a server may echo the request's headers: redact, then cut
        detail = self.target.redact(detail)[:200]
        res.error = f"HTTP {response.status_code}" + (f": {detail}" if detail else "")
        res.error_kind = "http"

    def redirect(self, response: httpx.Response) -> None:
        """Record a redirect as an error: never followed, the request (and its API key) goes
        to this server only."""
        where = self.target.redact(redact_url(response.headers.get("location", "")))[:200]
        self.res.finished_s = self.clock()
        self.res.error = (f"HTTP {response.status_code}: a redirect"
                          + (f" to {where!r}" if where else "") + ", not followed")
        self.res.error_kind = "http"

    def ended(self, kind: ErrorKind, error: str) -> bool:
        """The stream ends here as a failed request, with the tokens it counted so far."""
        res = self.res
        res.finished_s = self.clock()
        res.error = error
        res.error_kind = kind
        res.output_tokens = self.counted
        return True

    def malformed(self, problem: str, data: str) -> bool:
        """The stream ends here on an event with ``problem``."""
        target = self.target
        return self.ended("protocol", target.redact(
            f"malformed stream event ({problem}): {target.redact(data)[:120]!r}"))

    def take(self, data: str, progress: asyncio.Timeout) -> bool:
        """Take one event's ``data``; True when it ends the stream as a failed request. An
        event with output (or usage) gives the stream another ``read_timeout_s``."""
        target = self.target
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError):
            return self.ended("protocol", f"malformed stream event: {target.redact(data)[:120]!r}")
        message = error_message(payload)
        if message:
            return self.ended("stream_error", f"stream error: {target.redact(message)[:200]}")
        problem = _event_problem(payload, self.max_tokens, self.num_prompt)
        if problem:
            return self.malformed(problem, data)
        choices = payload.get("choices") or []
        usage = payload.get("usage")
        has_usage = isinstance(usage, dict) and usage.get("completion_tokens") is not None
        # a chunk whose text is empty and that only says why the stream ends carries
        # no token (llama.cpp's and TGI's last chunk)
        token_chunk = bool(choices) and (
            bool(choices[0].get("text")) or not choices[0].get("finish_reason"))
        problem = _count_problem(
            usage["completion_tokens"] if has_usage else None, self.res.output_tokens,
            self.text_chunks + (token_chunk and bool(choices[0].get("text"))),
            self.counted + (token_chunk and not has_usage), self.max_tokens)
        if problem:
            return self.malformed(problem, data)
        if choices or has_usage:
            progress.reschedule(asyncio.get_running_loop().time() + target.read_timeout_s)
        self.count(choices, usage if has_usage else None, token_chunk)
        return False

    def count(self, choices: list[Any], usage: dict[str, Any] | None,
              token_chunk: bool) -> None:
        """Count a checked event: its finish reason, its chunk of output (when it carries a
        token) and its usage (``None``: none with a completion count)."""
        res = self.res
        if choices:
            reason = choices[0].get("finish_reason")
            if reason:
                res.finish_reason = str(reason)
            if not token_chunk:
                self.last_empty_s = self.clock()
        if token_chunk:
            now = self.clock()
            self.counted = (int(usage["completion_tokens"]) if usage is not None
                            else self.counted + 1)
            self.text_chunks += bool(choices[0].get("text"))
            res.chunk_s.append(now)
            res.chunk_tokens.append(self.counted)
            if self.on_chunk is not None:
                self.on_chunk(self.counted)
        if usage is not None:
            res.output_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                res.prompt_tokens = int(usage["prompt_tokens"])
            res.usage_reported = True

    def settled(self) -> StreamResult:
        """The result of a stream that ended without a final error: its output count, and an
        error when it ended early, was no event stream, or carried no output."""
        res = self.res
        res.finished_s = self.clock()
        if not res.usage_reported:
            res.output_tokens = self.counted
        if not res.error and not self.done and res.finish_reason is None:
            if not self.events and self.content_type and "event-stream" not in self.content_type:
                res.error = (f"not an event stream (Content-Type {self.content_type[:60]!r}): "
                             "the server ignored \"stream\": true")
                res.error_kind = "protocol"
            else:
                res.error, res.error_kind = "stream ended before its last event", "reset"
        if (not res.error and not res.chunk_s and res.usage_reported and res.output_tokens > 0
                and self.last_empty_s is not None):
            # the only chunk had no text and ended the choice, yet the usage counts tokens: it
            # carried them (vLLM holds back the text of a token that ends inside a UTF-8
            # character, so a one-token answer can stream as {"text": "", "finish_reason":
            # "length"}); a server whose last chunk carries no token sends others before it
            res.chunk_s.append(self.last_empty_s)
            res.chunk_tokens.append(res.output_tokens)
        if not res.error and not res.chunk_s:
            # every completion asks for at least one token: an answer without any is no answer
            # (a server that ignored "stream": true sends one JSON object without "data:")
            res.error = "stream ended without any output"
            res.error_kind = "protocol"
            res.output_tokens = 0
        return res


def _count_problem(usage_tokens: int | None, last_usage: int, text_chunks: int, counted: int,
                   max_tokens: int) -> str:
    """What is wrong with the token counts once an event is taken ('' when nothing): a usage
    count below an earlier one or below the chunks of text seen (each carried a token), or,
    without usage, more chunks than ``max_tokens``."""
    if usage_tokens is not None:
        if usage_tokens < last_usage:
            return f"usage.completion_tokens went back from {last_usage} to {usage_tokens}"
        if usage_tokens < text_chunks:
            return (f"usage.completion_tokens {usage_tokens} < the {text_chunks} chunks of text "
                    "sent")
    elif counted > max_tokens:
        return f"{counted} output chunks > max_tokens {max_tokens}"
    return ""
