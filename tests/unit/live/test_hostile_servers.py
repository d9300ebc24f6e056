"""Servers that misbehave (issue 24 item 4 and the live part of the bad-input campaign).

A small OpenAI-compatible server on 127.0.0.1 whose ``/v1/completions`` answer is a script of
raw bytes chosen by the test: odd JSON events, usage counts no engine produces, 429 with and
without ``Retry-After``, 503, 500 mid-stream, a reset connection, a server that accepts and
never answers, one that drips a byte at a time, one that answers before the request is read.
Every case must end as data on the request's row (the replay goes on) or as one clean error,
never as an exception out of the replay. Nothing here waits on a timer to sequence the test:
where a timeout must fire, the server never answers, so only the timeout can end the wait.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvbudget.live.openai_client import ServerTarget, StreamResult, stream_completion
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.live.server import BackendUnavailable, discover
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.workloads import from_columns

METRICS = (b'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="200"} 1.0\n'
           b'vllm:num_requests_running{engine="0"} 0.0\n')

Script = Callable[[socket.socket, dict[str, Any]], None]


def _event(payload: Any) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _chunk(tokens: int | None = None, *, finish: str | None = None) -> bytes:
    usage = None if tokens is None else {"prompt_tokens": 5, "completion_tokens": tokens}
    return _event({"choices": [{"index": 0, "text": "a", "finish_reason": finish}],
                   "usage": usage})


SSE_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Connection: close\r\n\r\n")


def sse(*events: bytes) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.sendall(SSE_HEAD + b"".join(events))
    return script


def status(code: int, extra_headers: bytes = b"") -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        raw = json.dumps({"object": "error", "message": f"fake {code}"}).encode()
        conn.sendall(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n".encode()
                     + extra_headers + f"Content-Length: {len(raw)}\r\n".encode()
                     + b"Connection: close\r\n\r\n" + raw)
    return script


def reset_after(*events: bytes) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.sendall(SSE_HEAD + b"".join(events))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return script


@dataclass
class Hostile:
    """The server: ``completions`` answers POST /v1/completions; ``models`` is the raw JSON of
    GET /v1/models; ``release`` ends every wait of a script that never answers."""

    completions: Script = field(default_factory=lambda: sse(_chunk(1, finish="length"),
                                                            _event("[DONE]")))
    models: bytes = json.dumps({"data": [{"id": "m", "max_model_len": 4096}]}).encode()
    metrics: bytes = METRICS
    paths: dict[str, Script] = field(default_factory=dict)  # any path, answered by a script
    auth: list[str] = field(default_factory=list)  # the Authorization header of each request
    early: bool = False  # answer before reading the request body
    release: threading.Event = field(default_factory=threading.Event)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _read_request(conn: socket.socket, *, body: bool,
                  auth: list[str] | None = None) -> tuple[str, dict[str, Any]]:
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(65536)
        if not got:
            return "", {}
        data += got
        if not data[:1].isalpha():  # not HTTP (a TLS hello): a plain server's 400 and close
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return "", {}
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1]
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
        if line.lower().startswith("authorization:") and auth is not None:
            auth.append(line.split(":", 1)[1].strip())
    if not body:
        return path, {}
    while len(rest) < length:
        got = conn.recv(65536)
        if not got:
            break
        rest += got
    return path, json.loads(rest) if rest else {}


def _serve_one(server: Hostile, conn: socket.socket) -> None:
    with conn:
        try:
            path, body = _read_request(conn, body=not server.early, auth=server.auth)
            if path in server.paths:
                server.paths[path](conn, body)
            elif path == "/v1/models":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             + f"Content-Length: {len(server.models)}\r\n".encode()
                             + b"Connection: close\r\n\r\n" + server.models)
            elif path == "/metrics":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                             + f"Content-Length: {len(server.metrics)}\r\n".encode()
                             + b"Connection: close\r\n\r\n" + server.metrics)
            elif path == "/v1/completions":
                server.bodies.append(body)
                server.completions(conn, body)
            elif path:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close"
                             b"\r\n\r\n{}")
        except OSError:
            pass


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.05)
    server.port = sock.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=_serve_one, args=(server, conn), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server
    server.release.set()
    stop.set()
    thread.join(timeout=5)
    sock.close()


def _stream(server: Hostile, max_tokens: int = 4, **target: Any) -> StreamResult:
    t = ServerTarget(server.url, model="m", **target)

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as client:
            # a regression that hangs fails here instead of holding the suite
            return await asyncio.wait_for(stream_completion(
                client, t, [1, 2, 3, 4, 5], max_tokens, clock=lambda: 0.0), 60)

    return asyncio.run(go())


def _replay(server: Hostile, tmp_path: Path, n: int = 3) -> Any:
    config = ReplayConfig(ServerTarget(server.url, read_timeout_s=5.0), poll_period_s=0.05,
                          tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta("t", "unlimited", {}, 1.0, 0, server.url)
    w = from_columns([0.0] * n, [5] * n, [4] * n, tiers=["batch"] * n)
    return replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)


# --- issue 24 item 4: a replay does not trust the server --------------------------------------
ODD_EVENTS = {
    "negative usage": [_chunk(1), _chunk(-5, finish="length")],
    "usage of 10^12": [_chunk(1), _chunk(10**12, finish="length")],
    "more tokens than asked": [_chunk(1), _chunk(9, finish="length")],
    "a JSON list": [_event([1, 2, 3])],
    "choices as a string": [_event({"choices": "abc", "usage": None})],
    "choices of numbers": [_event({"choices": [1, 2], "usage": None})],
    "usage as a list": [_event({"choices": [{"text": "a"}], "usage": [4]})],
    "usage of a string": [_chunk(1), _event({"choices": [], "usage": {"completion_tokens": "4"}})],
    "usage of a bool": [_chunk(1), _event({"choices": [], "usage": {"completion_tokens": True}})],
    "a float count": [_chunk(1), _event({"choices": [], "usage": {"completion_tokens": 2.5}})],
    "invalid JSON": [b"data: {not json\n\n"],
    "a bare string": [_event('"hello"')],
    "null event": [_event("null")],
}


@pytest.mark.parametrize("case", sorted(ODD_EVENTS))
def test_an_odd_event_fails_the_request_not_the_replay(hostile: Hostile, tmp_path: Path,
                                                       case: str) -> None:
    hostile.completions = sse(*ODD_EVENTS[case], _event("[DONE]"))
    res = _stream(hostile)
    assert res.error_kind == "protocol" and "malformed stream event" in res.error, res.error
    assert 0 <= res.output_tokens <= 4
    out = _replay(hostile, tmp_path)
    assert out.complete, out.error  # every request has its row; nothing stopped the replay
    rec = out.records
    assert len(rec) == 3 and (rec["status"] != "completed").all()
    assert rec["error"].str.contains("malformed stream event").all()
    assert (rec["output_tokens"] >= 0).all() and (rec["output_tokens"] <= 4).all()
    assert out.summary["overall"]["output_tokens_per_s"] >= 0


def test_null_usage_counts_chunks(hostile: Hostile) -> None:
    hostile.completions = sse(_chunk(), _chunk(), _event(
        {"choices": [{"text": "a", "finish_reason": "length"}],
         "usage": {"completion_tokens": None}}), _event("[DONE]"))
    res = _stream(hostile)
    assert res.ok and res.output_tokens == 3 and not res.usage_reported


def test_fewer_tokens_than_asked_is_what_was_generated(hostile: Hostile) -> None:
    hostile.completions = sse(_chunk(1), _chunk(2, finish="stop"), _event("[DONE]"))
    res = _stream(hostile, max_tokens=4)
    assert res.ok and res.output_tokens == 2 and res.finish_reason == "stop"


@pytest.mark.parametrize("models", [b"[]", b"[1, 2]", b'"x"', b"null", b"{not json",
                                    b'{"data": "m"}', b'{"data": [1, "m", null]}',
                                    b'{"data": [{"id": "m", "max_model_len": true}]}'])
def test_odd_model_lists_are_a_clean_error_or_ignored(hostile: Hostile, models: bytes) -> None:
    hostile.models = models

    async def go() -> Any:
        async with httpx.AsyncClient() as client:
            return await discover(client, ServerTarget(hostile.url))

    try:
        info = asyncio.run(go())
    except BackendUnavailable as exc:
        assert "lists no model" in str(exc)
    else:  # only the last one names a model; its bool max_model_len is no length
        assert info.model == "m" and info.max_model_len is None


# --- the rest of the live campaign: every answer is data on the row ---------------------------
def test_http_errors_are_rows(hostile: Hostile, tmp_path: Path) -> None:
    for script, code in ((status(429, b"Retry-After: 1\r\n"), 429), (status(429), 429),
                         (status(503), 503), (status(500), 500)):
        hostile.completions = script
        res = _stream(hostile)
        assert res.error_kind == "http" and res.http_status == code, res.error
    hostile.completions = status(503)
    out = _replay(hostile, tmp_path)
    assert out.complete and (out.records["status"] != "completed").all()


def test_500_mid_stream_and_reset_are_rows(hostile: Hostile) -> None:
    hostile.completions = sse(_chunk(1), _event({"error": {"message": "boom", "code": 500}}))
    res = _stream(hostile)
    assert res.error_kind == "stream_error" and res.output_tokens == 1
    hostile.completions = reset_after(_chunk(1))
    res = _stream(hostile)
    assert res.error_kind == "reset", res.error


def test_a_server_that_never_answers_times_out(hostile: Hostile) -> None:
    def never(conn: socket.socket, body: dict[str, Any]) -> None:
        hostile.release.wait(60)  # holds the connection open, silent, until the test ends

    hostile.completions = never
    res = _stream(hostile, read_timeout_s=0.2)
    # only the read timeout can end this: the server sends nothing until teardown
    assert res.error_kind == "timeout", res.error
    assert not hostile.release.is_set()


def test_a_server_that_answers_before_the_request_is_read(hostile: Hostile) -> None:
    hostile.early = True
    hostile.completions = sse(_chunk(1), _chunk(2, finish="length"), _event("[DONE]"))
    res = _stream(hostile, max_tokens=2)
    assert res.ok or res.error_kind in ("reset", "protocol"), res.error


@pytest.mark.parametrize("drip", [b":", b": keep-alive\n\n"])
def test_a_server_that_drips_bytes_without_tokens_times_out(hostile: Hostile,
                                                            drip: bytes) -> None:
    def dripping(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.sendall(SSE_HEAD + _chunk(1))
        while not hostile.release.wait(0.01):  # never a token again, bytes until teardown
            conn.sendall(drip)

    hostile.completions = dripping
    res = _stream(hostile, read_timeout_s=0.3)
    # the bytes keep every read short of httpx's read timeout: only the bound on the silence
    # between two pieces of output can end the stream, and the server is still dripping
    assert res.error_kind == "timeout" and "no output for 0.3 s" in res.error, res.error
    assert res.output_tokens == 1 and not hostile.release.is_set()


@pytest.mark.parametrize("script", ["503", "never"])
def test_validate_against_a_refusing_server_is_one_line(hostile: Hostile, tmp_path: Path,
                                                        script: str) -> None:
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    if script == "503":
        hostile.completions = status(503)
    else:
        def never(conn: socket.socket, body: dict[str, Any]) -> None:
            hostile.release.wait(60)
        hostile.completions = never
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 2}\n')
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"kind": "linear", "coefficients": {
        "intercept_s": 0.004, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4,
        "per_context_token_s": 0.0}}))
    res = CliRunner().invoke(app, ["validate", "--url", hostile.url, "--trace", str(trace),
                                   "--cost-model", str(cost), "--out", str(tmp_path / "v"),
                                   "--read-timeout", "0.3"])
    assert res.exit_code == 1, res.stderr
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1


def body_answer(code: int, payload: dict[str, Any]) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        raw = json.dumps(payload).encode()
        conn.sendall(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n".encode()
                     + f"Content-Length: {len(raw)}\r\n".encode()
                     + b"Connection: close\r\n\r\n" + raw)
    return script


TGI_TOTAL = ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8. Given: 5 "
             "`inputs` tokens and 4 `max_new_tokens`")  # TGI v3.3.7 validation.rs:999
SGLANG_PROMPT = "The input (5 tokens) is longer than the model's context length (4 tokens)."

ENGINE_ANSWERS = {
    # TGI v3.3.7 unstreamed: 422 {"error": ..., "error_type": "validation"} (server.rs:2409)
    "tgi 422": body_answer(422, {"error": TGI_TOTAL, "error_type": "validation"}),
    # TGI's completions stream: 200, then the event of infer/mod.rs:445-452, then the end
    "tgi stream event": sse(_event({"error": {"message": TGI_TOTAL, "http_status_code": 422}})),
    # SGLang 0.5.23: 400 {"object": "error", ...} (serving_base.py:123-128)
    "sglang 400": body_answer(400, {"object": "error", "message": SGLANG_PROMPT,
                                    "type": "BadRequest", "param": None, "code": 400}),
}


@pytest.mark.parametrize(("case", "reason"), [("tgi 422", "context_length"),
                                              ("tgi stream event", "context_length"),
                                              ("sglang 400", "prompt_too_long")])
def test_other_engines_context_refusals_are_rows_the_simulation_joins(
        hostile: Hostile, tmp_path: Path, case: str, reason: str) -> None:
    # a TGI 422 was rejected_overloaded server_422, its stream event rejected_overloaded
    # backend_error, SGLang's 400 rejected_too_large server_400: never the simulator's reason
    hostile.completions = ENGINE_ANSWERS[case]
    rec = _replay(hostile, tmp_path).records
    assert rec["status"].tolist() == ["rejected_too_large"] * 3
    assert rec["reason"].tolist() == [reason] * 3


def test_a_replay_against_tgi_says_its_context_rules_are_not_vllms(hostile: Hostile,
                                                                   tmp_path: Path) -> None:
    # the replay sends as vLLM's rules say (validate --url simulates them); TGI refused what
    # vLLM would serve cut, and nothing said so: the summary's assumed lines now do
    hostile.completions = ENGINE_ANSWERS["tgi 422"]
    summary = _replay(hostile, tmp_path).summary
    assert any("in TGI's words" in line and "--set engine.name=tgi" in line
               for line in summary.get("assumed", [])), summary.get("assumed")
    hostile.completions = ENGINE_ANSWERS["sglang 400"]  # a prompt alone over the context
    assert any("SGLang" in line
               for line in _replay(hostile, tmp_path / "b").summary.get("assumed", []))


def test_a_replays_run_against_tgi_read_as_a_recording_says_so(hostile: Hostile,
                                                               tmp_path: Path) -> None:
    # validate --records on the run offered the refused request again under vLLM's rules
    # (served cut) without a word
    answers = iter([ENGINE_ANSWERS["tgi 422"]])

    def first_refused(conn: socket.socket, body: dict[str, Any]) -> None:
        next(answers, sse(_chunk(1), _chunk(4, finish="length"), _event("[DONE]")))(conn, body)

    hostile.completions = first_refused
    _replay(hostile, tmp_path)
    rec = read_recording(tmp_path / "run")
    assert any("in TGI's words" in n and "--set engine.name=tgi" in n for n in rec.notes), \
        rec.notes
