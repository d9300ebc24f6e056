"""Pieces of ``kvbudget serve``'s forwarding: OpenAI's error bodies, a race between an awaited
step and the events that end it (the client gone, the lease revoked), and the reading of an
upstream's server-sent events as they are passed on (one line at a time, never buffered: the
usage the gateway settles from is read on the way)."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response

from kvbudget.live.serve_admission import Ticket
from kvbudget.live.serve_request import Completion, usage_problem
from kvbudget.live.serve_upstream import Upstreams
from kvbudget.results.records import engine_refusal, error_text, server_refusal

_T = TypeVar("_T")


def openai_error(status: int, message: str, kind: str, code: str | None = None,
                 param: str | None = None,
                 headers: Mapping[str, str] | None = None) -> JSONResponse:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param,
                                   "code": code}}, status_code=status, headers=headers)


async def models_answer(upstreams: Upstreams) -> Response:
    """``GET /v1/models`` of the first upstream, relayed as it answered (502 when it gave no
    answer)."""
    try:
        async with upstreams.session.get(upstreams.url(0, "/v1/models"),
                                         allow_redirects=False) as resp:
            content = await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        return openai_error(502, f"upstream unreachable ({type(exc).__name__})",
                            "upstream_error")
    return Response(content, status_code=resp.status,
                    media_type=resp.headers.get("content-type", "application/json"))


STOPPED = {
    "preempted": "the gateway took the request's KV lease back (preempted); retry later",
    "draining": "the gateway is shutting down (draining); retry later",
    "lease_expired": "the request's KV lease expired at the gateway; retry later",
    "backend_error": "the upstream server broke the stream off; retry later",
}
"""What a stream's closing error event says, by its ``code``."""


def sse_error(reason: str) -> bytes:
    """The event that ends a stream the gateway stopped (its lease taken back, or the
    upstream's stream broken off: ``backend_error``, an ``upstream_error``)."""
    error = {"error": {"message": STOPPED.get(reason, f"request stopped by the gateway "
                                                      f"({reason}); retry later"),
                       "type": "upstream_error" if reason == "backend_error"
                       else "overloaded_error", "param": None, "code": reason}}
    return f"data: {json.dumps(error)}\n\n".encode()


def more_body(data: bytes) -> dict[str, Any]:
    """The ASGI message that sends ``data`` of a streamed answer, more to come."""
    return {"type": "http.response.body", "body": data, "more_body": True}


class Disconnect:
    """A future done when the client goes away. Started once the body is read: from then on the
    ASGI server's ``receive`` only ever answers ``http.disconnect``."""

    def __init__(self, request: HttpRequest) -> None:
        self.handed_over = False  # a streamed answer closes it when its stream ends
        self.future: asyncio.Task[None] = asyncio.ensure_future(self._watch(request))

    @staticmethod
    async def _watch(request: HttpRequest) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    def close(self) -> None:
        self.future.cancel()


async def first_of(work: Awaitable[_T], *stops: asyncio.Future[Any]) -> _T | None:
    """``work``'s result, or ``None`` when one of ``stops`` is done first (``work`` is then
    cancelled, so nothing it holds is left open). A ``work`` already done (an admission decided
    at arrival) is answered at once, without a turn of the loop.

    ``work`` runs in the caller's own task, as ``asyncio.timeout`` runs its block: a stop
    cancels that task (:class:`_Stop`; counted, and taken back with ``uncancel``, so that a
    cancellation from outside still propagates), where a task of its own and ``asyncio.wait``
    cost two more turns of the loop a request."""
    if isinstance(work, asyncio.Future) and work.done() and not work.cancelled():
        done: asyncio.Future[_T] = work
        return done.result()
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("first_of runs in a task")
    stop = _Stop(task)
    for future in stops:
        future.add_done_callback(stop)
    try:
        result = await work
    except BaseException as exc:
        # a stop's cancellation, and no other, ends in None; the stop's count is taken back
        # however ``work`` ended (an ``asyncio.timeout`` later in the task counts them)
        if stop.stopped and task.uncancel() == 0 and isinstance(exc, asyncio.CancelledError):
            return None
        raise
    finally:
        stop.active = False  # a callback already scheduled (a stop done before) does nothing
        for future in stops:
            future.remove_done_callback(stop)
    if stop.stopped:  # ``work`` took the stop's cancellation in and ended: give it back
        task.uncancel()
    return result


class _Stop:
    """The done callback of :func:`first_of`'s stops: cancel ``task`` once, while active."""

    __slots__ = ("active", "stopped", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.active = True
        self.stopped = False

    def __call__(self, _: object) -> None:
        if self.active and not self.stopped:
            self.stopped = True
            self.task.cancel()


_NOT_PLAIN = (b"\r", b"[DONE]", b'"usage"', b'"error"')


def _plain_prefix(data: bytes) -> int:
    """The bytes of the whole lines at the start of a read that :meth:`Call.on_line` passes on
    unchanged, every ``data:`` line among them a chunk of output: up to the line that holds a
    ``\\r`` (a CRLF line loses its ``\\r``), a ``[DONE]``, a ``"usage"`` or an ``"error"``
    (events read as JSON), or to the last ``\\n``. Lines that are not ``data:`` (comments,
    ``event:``) and blank lines pass on as they are either way."""
    first = len(data)
    for marker in _NOT_PLAIN:
        found = data.find(marker, 0, first)
        if found >= 0:
            first = found
    return data.rfind(b"\n", 0, first) + 1


@dataclass(slots=True)
class Call:
    """One admitted completion as it is forwarded: its times (admission clock), the events of
    its stream, and the count it will be settled with."""

    ticket: Ticket
    completion: Completion
    upstream: int
    output_tokens: int | None = None
    problem: str = ""
    first_token_s: float = math.nan
    chunk_times_s: list[float] = field(default_factory=list)
    skip_blank: bool = False
    ended: bool = False
    partial: bytes = b""
    upstream_error: str = ""
    done: bool = False
    """The upstream's ``data: [DONE]`` has been read: the stream is whole."""

    def usage(self, usage: Any) -> None:
        """Read the upstream's count (its protocol checked as the replay checks it)."""
        problem = usage_problem(usage, self.completion.max_tokens)
        if problem:
            self.problem = problem
        else:
            self.output_tokens = int(usage["completion_tokens"])

    def on_read(self, data: bytes, now_s: float) -> bytes:
        """The bytes to pass on for one read of the upstream's stream: its complete lines as
        :meth:`on_line` makes them, in one piece (one write to the client a read); a line
        still arriving waits for its end (``\\n``; ``\\r\\n`` taken as one)."""
        if self.partial:
            data = self.partial + data
        elif not self.skip_blank:
            # the leading lines of plain output chunks (most reads are only those): passed on
            # as they came, each data line counted as on_line counts it, with no split and no
            # join; the lines after them (the usage, [DONE]) line by line
            cut = _plain_prefix(data)
            if cut:
                head = data[:cut]
                num_chunks = head.count(b"\ndata:") + head.startswith(b"data:")
                for _ in range(num_chunks):
                    self._chunk(now_s)
                return head if cut == len(data) else head + self._lines(data[cut:], now_s)
        return self._lines(data, now_s)

    def _lines(self, data: bytes, now_s: float) -> bytes:
        """:meth:`on_read` line by line (the partial line at the end kept for the next)."""
        end = data.rfind(b"\n") + 1
        self.partial = data[end:]
        if not end:
            return b""
        out = [self.on_line(line.removesuffix(b"\r"), now_s)
               for line in data[:end].split(b"\n")[:-1]]
        return b"".join(piece for piece in out if piece is not None)

    def on_end(self, now_s: float) -> bytes:
        """The last line when the stream ended without its newline (``b""`` when none)."""
        line, self.partial = self.partial, b""
        return (self.on_line(line.removesuffix(b"\r"), now_s) or b"") if line else b""

    def on_line(self, line: bytes, now_s: float) -> bytes | None:
        """The bytes to pass on for one line of the upstream's stream, without its newline
        (``None``: drop it)."""
        if not line:
            if self.skip_blank:
                self.skip_blank = False
                return None
            return b"\n"
        if not line.startswith(b"data:"):
            return line + b"\n"
        if line[5:].strip() == b"[DONE]":
            self.done = True
            return line + b"\n"
        if b'"usage"' not in line and b'"error"' not in line:
            self._chunk(now_s)  # a chunk of output (the fast path: no JSON read)
            return line + b"\n"
        try:
            event = json.loads(line[5:])
        except ValueError:
            self.problem = "a stream event that is not JSON"
            return line + b"\n"
        if not isinstance(event, dict):
            return line + b"\n"
        error = error_text(event)
        if error:  # the upstream failed the request mid-stream: passed on, noted (any engine's
            # shape: SGLang's and TensorRT-LLM's {"object": "error", ...} too)
            self.upstream_error = error
            return line + b"\n"
        usage = event.get("usage")
        if usage is not None:
            self.usage(usage)
        if event.get("choices"):
            self._chunk(now_s)
        if usage is None or self.completion.wants_usage:
            return line + b"\n"
        if not event.get("choices"):
            self.skip_blank = True  # the usage chunk the client did not ask for, and its end
            return None
        event.pop("usage")
        return f"data: {json.dumps(event)}\n".encode()

    def _chunk(self, now_s: float) -> None:
        if math.isnan(self.first_token_s):
            self.first_token_s = now_s
        self.chunk_times_s.append(now_s)

    def gaps_s(self) -> tuple[float, ...]:
        """The gaps between successive output chunks (ITL, as ``vllm bench serve`` counts)."""
        times = self.chunk_times_s
        return tuple(b - a for a, b in itertools.pairwise(times))


ERROR_CHARS = 200
"""How much of an upstream's error message a row keeps (the replay's cut:
``live/openai_client.py`` ``error_answer``)."""

_ECHOED_INPUT = re.compile(r"input_value=.*?(?=, input_type=|\]|$)", re.DOTALL)
"""The input pydantic's validation errors echo (vLLM's 400 to a field it refuses quotes the
field's value: a prompt's text, for one): never kept in a row."""


def recorded_error(message: str, secret: str | None, status: int | None = None) -> str:
    """A row's ``error`` for an upstream's refusal or failure: ``HTTP <status>: <its
    message>`` as the replay records it (``status`` None: a stream's error event, its message),
    the upstream's API key and any echoed input redacted, then cut to :data:`ERROR_CHARS`
    (after redacting: a cut through a secret would leave its first characters)."""
    text = message.replace(secret, "***") if secret else message
    text = " ".join(_ECHOED_INPUT.sub("input_value=***", text).split())[:ERROR_CHARS]
    if status is None:
        return text
    return f"HTTP {status}" + (f": {text}" if text else "")


def upstream_failure(status: int, content: bytes, secret: str | None) -> tuple[str, str, str]:
    """The record's status, reason and error for an upstream's answer other than 200: a
    refusal of the request as sent as the replay records it (``results.records.server_refusal``,
    read from the body's message in whichever engine's shape, ``error_text``), else a failure
    (:func:`failure_reason`); the error keeps the message (:func:`recorded_error`), which names
    the engine whose words a refusal for the model's context had (``validate --records``)."""
    text = content.decode("utf-8", "replace")
    try:
        message = error_text(json.loads(text)) or text
    except (ValueError, RecursionError):
        message = text
    status_reason = server_refusal(status, message) or ("rejected_overloaded",
                                                        failure_reason(status, message))
    return (*status_reason, recorded_error(message, secret, status))


def stream_failure(error: str, had_output: bool, secret: str | None) -> tuple[str, str, str]:
    """The record's status, reason and error for an error event ``error`` in a stream begun
    with 200: before any output, a refusal of the request as sent where its words say so
    (TGI's of a request over its context: ``results.records.CONTEXT_REFUSALS``), else a
    failure or an engine's queue cap (:func:`failure_reason`)."""
    refused = server_refusal(None, error) if not had_output else None
    status_reason = refused or ("rejected_overloaded", failure_reason(None, error))
    return (*status_reason, recorded_error(error, secret))


def failure_reason(status: int | None, message: str) -> str:
    """The record's reason for an upstream's failure: its engine's own queue cap when its
    status and message say so (``results.records.ENGINE_REFUSALS``, the name the simulator
    and the replay give it; ``status`` None: an error event in a stream begun with 200), else
    ``backend_error``."""
    named = engine_refusal(message, status)
    return named[1] if named is not None else "backend_error"
