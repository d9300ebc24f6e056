"""A second hostile campaign against everything that talks to a server (issue 20 items 3-5).

Fake OpenAI-compatible servers on 127.0.0.1 / ::1 (the scripted :class:`Hostile` server of
``test_hostile_servers``) answer with what a careless proxy, a broken engine or an attacker
could send: event streams framed oddly (CRLF, bare CR, comments, no ``data:`` prefix, a byte
per packet, a huge event), JSON of the wrong shape, usage counts no engine produces, HTTP
errors with every kind of ``Retry-After``, redirects to another host, gzip, ``/metrics`` and
``/v1/models`` pages with absurd figures. Every case must end as one of: a valid result, data
on the request's row (the replay goes on), or one clean error line; never an exception, a hang
or a figure taken on trust. Nothing is sequenced by a timer: where a timeout must fire, the
server stays silent (or drips bytes) until the test ends, so only the timeout can end the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvbudget.live.openai_client import ServerTarget, StreamResult, stream_completion
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.live.server import BackendUnavailable, discover
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.workloads import from_columns
from tests.unit.live.test_hostile_servers import (
    METRICS,
    SSE_HEAD,
    Hostile,
    Script,
    _chunk,
    _event,
    _serve_one,
    hostile,  # noqa: F401  (the fixture)
    sse,
    status,
)

DONE = _event("[DONE]")


def _stream(server: Hostile, max_tokens: int = 4, **target: Any) -> StreamResult:
    t = ServerTarget(server.url, model="m", **target)

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as client:
            return await asyncio.wait_for(stream_completion(
                client, t, [1, 2, 3, 4, 5], max_tokens, clock=lambda: 0.0), 60)

    return asyncio.run(go())


def _replay(server: Hostile, tmp_path: Path, n: int = 3, **config: Any) -> Any:
    cfg = ReplayConfig(ServerTarget(server.url, read_timeout_s=5.0), poll_period_s=0.05,
                       tiers=(INTERACTIVE, BATCH), **config)
    meta = ReplayMeta("t", "unlimited", {}, 1.0, 0, server.url)
    w = from_columns([0.0] * n, [5] * n, [4] * n, tiers=["batch"] * n)
    return replay(w, make_policy("unlimited"), cfg, tmp_path / "run", meta=meta)


def _sane(res: StreamResult, max_tokens: int = 4) -> None:
    """A stream's result is a valid completion or an error on the row, never nonsense."""
    assert 0 <= res.output_tokens <= max_tokens, res
    if res.ok:
        assert res.output_tokens >= 1 and res.chunk_s, res  # a completion produced output
    else:
        assert res.error_kind and res.error, res


def raw(data: bytes) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.sendall(data)
    return script


def pieces(data: bytes, size: int) -> Script:
    """``data`` in TCP segments of ``size`` bytes (no coalescing: TCP_NODELAY)."""
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(data), size):
            conn.sendall(data[i:i + size])
    return script


GOOD = _chunk(1) + _chunk(2) + _chunk(3) + _chunk(4, finish="length") + DONE

# --- event streams: framing -------------------------------------------------------------------
FRAMING: dict[str, tuple[Script, bool]] = {  # name -> (script, whether it is a valid answer)
    "LF": (sse(GOOD), True),
    "CRLF": (raw(SSE_HEAD + GOOD.replace(b"\n", b"\r\n")), True),
    "bare CR": (raw(SSE_HEAD + GOOD.replace(b"\n", b"\r")), True),
    "comments between events": (raw(SSE_HEAD + b": keep-alive\n\n" + _chunk(1) + b":\n\n"
                                    + _chunk(4, finish="length") + b": bye\n\n" + DONE), True),
    "event and id fields": (raw(SSE_HEAD + b"event: message\nid: 1\nretry: 5\n"
                                + _chunk(4, finish="length") + DONE), True),
    "data: without a space": (raw(SSE_HEAD + GOOD.replace(b"data: ", b"data:")), True),
    "no [DONE], a finish reason": (sse(_chunk(1), _chunk(4, finish="length")), True),
    "no [DONE], no finish reason": (sse(_chunk(1), _chunk(2)), False),
    "no data: prefix": (raw(SSE_HEAD + GOOD.replace(b"data: ", b"")), False),
    "one byte a segment": (pieces(SSE_HEAD + GOOD, 1), True),
    "seven bytes a segment": (pieces(SSE_HEAD + GOOD, 7), True),
    "split inside a UTF-8 character": (pieces(SSE_HEAD + _event(
        {"choices": [{"text": "\u00e9\u4e2d", "finish_reason": "length"}],
         "usage": {"completion_tokens": 4}}) + DONE, 3), True),
    "[DONE] and nothing else": (sse(DONE), False),
    # vLLM holds back the text of a token that ends inside a UTF-8 character: a one-token
    # answer can be one chunk of no text that ends the choice; the usage says it had a token
    "one token of no text, with usage": (sse(
        _event({"choices": [{"text": "", "finish_reason": "length"}]}),
        _event({"choices": [], "usage": {"completion_tokens": 1}}), DONE), True),
    "one chunk of no text, no usage": (sse(
        _event({"choices": [{"text": "", "finish_reason": "length"}]}), DONE), False),
    "usage only, no output": (sse(_event({"choices": [], "usage": {"completion_tokens": 4}}),
                                  DONE), False),
    "a huge event (4 MiB of text)": (sse(_event({"choices": [{"text": "x" * (4 << 20),
                                                             "finish_reason": "length"}],
                                                "usage": {"completion_tokens": 4}}),
                                         DONE), True),
    "invalid UTF-8": (raw(SSE_HEAD + b"data: {\"choices\": [{\"text\": \"\xff\xfe\"}]}\n\n"
                          + _chunk(4, finish="length") + DONE), True),
    "two JSON objects on one line": (raw(SSE_HEAD + b"data: {} {}\n\n" + DONE), False),
    "a JSON number": (sse(_event("5"), DONE), False),
    "an error object nested in choices": (sse(_event({"choices": [{"error": {"message": "x"}}]}),
                                              DONE), False),
    "error of an odd shape": (sse(_chunk(1), _event({"error": [1, 2]}), DONE), False),
    "error as a number": (sse(_chunk(1), _event({"error": 7}), DONE), False),
    "finish_reason of an odd type": (sse(_event({"choices": [{"text": "a", "finish_reason":
                                                             {"x": 1}}],
                                                "usage": {"completion_tokens": 4}}), DONE),
                                     False),
    "more chunks than max_tokens, no usage": (sse(*[_chunk() for _ in range(9)], DONE), False),
    "usage going backwards": (sse(_chunk(3), _chunk(1, finish="length"), DONE), False),
    "usage below the chunks seen": (sse(_chunk(), _chunk(), _chunk(), _event(
        {"choices": [{"text": "a", "finish_reason": "length"}]}),
        _event({"choices": [], "usage": {"completion_tokens": 1}}), DONE), False),
    "prompt_tokens of 10^12": (sse(_event({"choices": [{"text": "a", "finish_reason": "length"}],
                                           "usage": {"completion_tokens": 4,
                                                     "prompt_tokens": 10**12}}), DONE), False),
    "fewer tokens than asked": (sse(_chunk(1), _chunk(2, finish="stop"), DONE), True),
    "gzip-encoded stream": (raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                b"Content-Encoding: gzip\r\nConnection: close\r\n\r\n"
                                + gzip.compress(GOOD)), True),
    "gzip claimed, not gzip": (raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                   b"Content-Encoding: gzip\r\nConnection: close\r\n\r\n"
                                   + GOOD), False),
    "a JSON answer, not a stream": (raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                        b"Connection: close\r\n\r\n" + json.dumps(
                                            {"choices": [{"text": "abcd"}], "usage": {
                                                "completion_tokens": 4}}).encode()), False),
    "an empty 200": (raw(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), False),
    "204 no content": (raw(b"HTTP/1.1 204 No Content\r\n\r\n"), False),
    "not HTTP at all": (raw(b"SSH-2.0-OpenSSH_9.6\r\n"), False),
    "a garbage status line": (raw(b"HTTP/1.1 abc\r\n\r\n"), False),
    "a bad chunked encoding": (raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   b"zz\r\nabc\r\n"), False),
    "Content-Length shorter than the body": (raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 20\r\n\r\n"
        + GOOD), False),
    "Content-Length longer than the body": (raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 99999\r\n"
        b"Connection: close\r\n\r\n" + _chunk(1)), False),
    "nothing, then close": (raw(b""), False),
}


@pytest.mark.parametrize("case", sorted(FRAMING))
def test_stream_framing(hostile: Hostile, case: str) -> None:  # noqa: F811
    script, valid = FRAMING[case]
    hostile.completions = script
    res = _stream(hostile)
    _sane(res)
    assert res.ok == valid, res
    if case == "one token of no text, with usage":
        assert res.output_tokens == 1 and len(res.chunk_s) == 1, res
    if case == "a JSON answer, not a stream":
        assert "not an event stream (Content-Type 'application/json')" in res.error, res.error


# --- HTTP answers -----------------------------------------------------------------------------
RETRY_AFTER = {
    b"Retry-After: 3\r\n": 3.0,
    b"Retry-After: 0\r\n": 0.0,
    b"Retry-After: 2.5\r\n": 2.5,
    b"Retry-After: -4\r\n": None,
    b"Retry-After: 1e12\r\n": None,  # beyond any real back-off: not a figure to sleep on
    b"Retry-After: inf\r\n": None,
    b"Retry-After: nan\r\n": None,
    b"Retry-After: soon\r\n": None,
    b"Retry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n": 0.0,  # a date in the past
    b"Retry-After: Wed, 21 Oct 9999 07:28:00 GMT\r\n": None,  # a date far in the future
    b"retry-after-ms: 1500\r\n": 1.5,
    b"retry-after-ms: -1\r\nRetry-After: 2\r\n": 2.0,
    b"": None,
}


@pytest.mark.parametrize("header", sorted(RETRY_AFTER), ids=repr)
def test_429_retry_after(hostile: Hostile, header: bytes) -> None:  # noqa: F811
    hostile.completions = status(429, header)
    res = _stream(hostile)
    assert res.error_kind == "http" and res.http_status == 429
    assert res.retry_after_s == RETRY_AFTER[header]


# --- HTTP statuses and connections: data on the row -------------------------------------------
def _reset_now(before_headers: bool) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        if not before_headers:
            conn.sendall(SSE_HEAD)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return script


ANSWERS: dict[str, tuple[Script, str]] = {  # name -> (script, the error kind on the row)
    "400": (status(400), "http"),
    "401": (status(401), "http"),
    "404 with an HTML page": (raw(b"HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\n"
                                  b"Connection: close\r\n\r\n<html><h1>nope</h1></html>"),
                              "http"),
    "413": (status(413), "http"),
    "500": (status(500), "http"),
    "502 with an empty body": (raw(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n"),
                               "http"),
    "503": (status(503), "http"),
    "a JSON list as the error body": (raw(b"HTTP/1.1 500 X\r\nContent-Type: application/json\r\n"
                                          b"Connection: close\r\n\r\n[1, 2]"), "http"),
    "a nested error object": (raw(b"HTTP/1.1 500 X\r\nConnection: close\r\n\r\n"
                                  + json.dumps({"error": {"error": {"message": "deep"}}}
                                               ).encode()), "http"),
    "301 to another host": (raw(b"HTTP/1.1 301 Moved\r\nLocation: http://127.0.0.2:9/v1/"
                                b"completions\r\nContent-Length: 0\r\n\r\n"), "http"),
    "307 to another host": (raw(b"HTTP/1.1 307 X\r\nLocation: http://evil.invalid/x\r\n"
                                b"Content-Length: 0\r\n\r\n"), "http"),
    "500 mid-stream (error event)": (sse(_chunk(1), _event({"error": {"message": "boom"}})),
                                     "stream_error"),
    "500 mid-stream (object: error)": (sse(_chunk(1), _event({"object": "error",
                                                               "message": "boom"})),
                                       "stream_error"),
    "reset before the headers": (_reset_now(True), "reset"),
    "reset after the headers": (_reset_now(False), "reset"),
}


@pytest.mark.parametrize("case", sorted(ANSWERS))
def test_http_answers_are_errors_on_the_row(hostile: Hostile, case: str) -> None:  # noqa: F811
    script, kind = ANSWERS[case]
    hostile.completions = script
    res = _stream(hostile)
    _sane(res)
    assert res.error_kind == kind, res


def test_a_replay_keeps_going_through_every_answer(hostile: Hostile,  # noqa: F811
                                                   tmp_path: Path) -> None:
    """One replay meets every answer above in turn: each request gets its row, the replay
    completes."""
    scripts = [ANSWERS[c][0] for c in sorted(ANSWERS)] + [FRAMING[c][0] for c in sorted(FRAMING)]
    lock = threading.Lock()
    served: list[int] = []

    def rotating(conn: socket.socket, body: dict[str, Any]) -> None:
        with lock:
            served.append(1)
            script = scripts[(len(served) - 1) % len(scripts)]
        script(conn, body)

    hostile.completions = rotating
    out = _replay(hostile, tmp_path, n=len(scripts))
    assert out.complete, out.error
    rec = out.records
    assert len(rec) == len(scripts) and len(served) == len(scripts)
    assert (rec["output_tokens"] >= 0).all() and (rec["output_tokens"] <= 4).all()
    ok = rec["status"] == "completed"
    assert ((rec["error"] == "") == ok).all()
    assert (rec.loc[ok, "output_tokens"] >= 1).all()


def test_redirects_are_not_followed_and_the_key_stays_home(hostile: Hostile) -> None:  # noqa: F811
    """A 307 to another server: the request (and its Authorization header) never goes there."""
    other = Hostile()
    with _serving(other):
        seen: list[bytes] = []

        def recording(conn: socket.socket, body: dict[str, Any]) -> None:
            seen.append(b"completion")
            conn.sendall(SSE_HEAD + GOOD)

        other.completions = recording
        for code in (301, 302, 307, 308):
            hostile.completions = raw(
                f"HTTP/1.1 {code} X\r\nLocation: {other.url}/v1/completions\r\n"
                "Content-Length: 0\r\n\r\n".encode())
            res = _stream(hostile, api_key="sk-SECRET-redirect")
            assert res.error_kind == "http" and "not followed" in res.error, res
            assert "sk-SECRET" not in res.error
        for code in (301, 307):
            hostile.paths["/v1/models"] = raw(
                f"HTTP/1.1 {code} X\r\nLocation: {other.url}/v1/models\r\n"
                "Content-Length: 0\r\n\r\n".encode())
            with pytest.raises(BackendUnavailable, match=f"HTTP {code}, not a model list"):
                _discover(hostile, api_key="sk-SECRET-redirect")
        assert seen == [] and other.bodies == []


def _discover(server: Hostile | str, **target: Any) -> Any:
    url = server if isinstance(server, str) else server.url

    async def go() -> Any:
        async with httpx.AsyncClient() as client:
            return await discover(client, ServerTarget(url, **target))
    return asyncio.run(go())


def _cli(*args: object, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    res = CliRunner().invoke(app, [str(a) for a in args], env=env)
    return res.exit_code, res.stdout, res.stderr


def _trace(tmp_path: Path, n: int = 2) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 4,
                                        "tier": "batch"}) + "\n" for _ in range(n)))
    return path


@contextlib.contextmanager
def _serving(server: Hostile, host: str = "127.0.0.1") -> Iterator[Hostile]:
    """Serve ``server`` on ``host`` until the block ends (the fixture's loop, for a second
    server or another address family)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family)
    sock.bind((host, 0))
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
    try:
        yield server
    finally:
        server.release.set()
        stop.set()
        thread.join(timeout=5)
        sock.close()


# --- server URLs --------------------------------------------------------------------------------
BAD_URLS = ["http://127.0.0.1:99999", "http://[::1", "http://", "http://:80",
            "http://127.0.0.1:1/?q=1", "http://127.0.0.1:1#frag", "http://127.0.0.1:abc",
            "http://127.0.0.1:0", "http://999.1.1.1:1", "http://\x01:1", "ftp://127.0.0.1:1",
            "127.0.0.1:8000", "admin:hunter2-PW@127.0.0.1:8000",
            "ftp://admin:hunter2-PW@127.0.0.1:1", "http://admin:hunter2-PW@127.0.0.1:99999"]


@pytest.mark.parametrize("url", BAD_URLS)
def test_a_bad_url_is_one_line_without_its_password(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match="server URL") as err:
        ServerTarget(url)
    assert "hunter2" not in str(err.value)
    code, stdout, stderr = _cli("replay", "--url", url, "--trace", _trace(tmp_path), "--out",
                                tmp_path / "run")
    assert code == 2 and stderr.startswith("error: server URL"), stderr
    assert len(stderr.strip().splitlines()) == 1 and "hunter2" not in stdout + stderr
    assert not (tmp_path / "run").exists()


def test_url_forms_that_are_fine() -> None:
    assert ServerTarget("HTTP://127.0.0.1:8000/v1/").base_url == "http://127.0.0.1:8000"
    assert ServerTarget("  http://[::1]:8000  ").base_url == "http://[::1]:8000"
    t = ServerTarget("http://u%40x:p%3Ass@127.0.0.1:8000")
    assert t.base_url == "http://127.0.0.1:8000" and t.basic_auth == ("u@x", "p:ss")


def test_an_ipv6_loopback_server(tmp_path: Path) -> None:
    server = Hostile()
    try:
        with _serving(server, "::1"):
            url = f"http://[::1]:{server.port}"
            server.completions = sse(GOOD)
            code, stdout, stderr = _cli("replay", "--url", url, "--trace", _trace(tmp_path),
                                        "--out", tmp_path / "run", "--poll-period", "0.05",
                                        "--max-output", "4", "--json")
            assert code == 0, stderr
            assert json.loads(stdout)["overall"]["completed"] == 2
    except OSError as exc:  # no IPv6 on this machine
        pytest.skip(f"no IPv6 loopback: {exc}")


def test_tls_to_a_plain_server_unresolvable_and_refusing(hostile: Hostile,  # noqa: F811
                                                         tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "no-such-host.invalid":  # answered here: no query leaves the machine
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    # a port held bound but not listening refuses connections, and no other test's server
    # (another worker's, under -n) can take it meanwhile, as it could a port closed again
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        refusing = held.getsockname()[1]
        for url, said in (("http://no-such-host.invalid:8000",
                           "cannot reach http://no-such-host"),
                          (f"http://127.0.0.1:{refusing}", "cannot reach http://127.0.0.1")):
            with pytest.raises(BackendUnavailable, match=said):
                _discover(url)
            code, _, stderr = _cli("replay", "--url", url, "--trace", _trace(tmp_path), "--out",
                                   tmp_path / "run")
            assert code == 1 and stderr.startswith(f"error: {said}"), stderr
            assert len(stderr.strip().splitlines()) == 1


# asyncio (CPython 3.11) leaves the socket of a failed TLS handshake to the collector: a
# ResourceWarning from the standard library, not a leak of kvbudget's (collected here, so that
# it is not reported in whichever test runs next)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_tls_to_a_plain_server(hostile: Hostile, tmp_path: Path) -> None:  # noqa: F811
    import gc

    url = hostile.url.replace("http://", "https://")
    with pytest.raises(BackendUnavailable, match="cannot reach https://"):
        _discover(url)
    code, _, stderr = _cli("replay", "--url", url, "--trace", _trace(tmp_path), "--out",
                           tmp_path / "run")
    assert code == 1 and stderr.startswith("error: cannot reach https://"), stderr
    assert len(stderr.strip().splitlines()) == 1
    gc.collect()


# --- discovery and /metrics ----------------------------------------------------------------------
BAD_MODEL_LISTS = {
    b'{"data": [{"id": null}]}': "lists no model",
    b'{"data": [{"id": 5}]}': "lists no model",
    b'{"data": [{"id": ""}]}': "lists no model",
    b'{"error": {"message": "nope"}}': "lists no model: nope",
    b'{"object": "error", "message": "auth"}': "lists no model: auth",
}


@pytest.mark.parametrize("models", sorted(BAD_MODEL_LISTS))
def test_model_lists_without_a_model(hostile: Hostile, models: bytes) -> None:  # noqa: F811
    hostile.models = models
    with pytest.raises(BackendUnavailable, match=BAD_MODEL_LISTS[models]):
        _discover(hostile)


def test_model_lengths_and_names(hostile: Hostile) -> None:  # noqa: F811
    for raw_len, expected in ((0.5, None), (0, None), (-3, None), (3, 3), (4096.0, 4096),
                              (1e300, None), ("4096", None), (None, None)):
        hostile.models = json.dumps({"data": [{"id": "m", "max_model_len": raw_len}]}).encode()
        assert _discover(hostile).max_model_len == expected, raw_len
    hostile.models = json.dumps({"data": [{"id": 7}, {"id": "a"}, {"id": "b"}]}).encode()
    assert _discover(hostile).model == "a"
    assert _discover(hostile, model="b").model == "b"
    with pytest.raises(BackendUnavailable, match=r"does not serve model 'typo'.*'a', 'b'"):
        _discover(hostile, model="typo")


B = b'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="200"} 1.0\n'
ODD_METRICS = {  # a page -> the gateway's capacity, or the error
    b"usage 1e300": (B + b"vllm:kv_cache_usage_perc 1e300\n", 3184),
    b"usage NaN": (B + b"vllm:kv_cache_usage_perc NaN\n", 3184),
    b"usage -5": (B + b"vllm:kv_cache_usage_perc -5\n", 3184),
    b"running 1e300": (B + b"vllm:num_requests_running 1e300\n", 3184),
    b"running -3": (B + b"vllm:num_requests_running -3\n", 3184),
    b"waiting 1e30": (B + b"vllm:num_requests_waiting 1e30\n", 3184),
    b"waiting +Inf": (B + b"vllm:num_requests_waiting +Inf\n", 3184),
    b"preemptions 1e300": (B + b"vllm:num_preemptions_total 1e300\n", 3184),
    b"preemptions -1": (B + b"vllm:num_preemptions_total -1\n", 3184),
    b"labels escaped": (b'vllm:cache_config_info{block_size="16",engine="0\\"x",'
                        b'num_gpu_blocks="200"} 1.0\n', 3184),
    # vLLM 0.32.0: both engines' series carry the front end's sum over them (200 blocks)
    b"two engines": (b'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="200"} 1'
                     b'\nvllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="200"}'
                     b' 1\n', 3168),
    b"blocks 1e18": (b'vllm:cache_config_info{block_size="16",num_gpu_blocks="1e18"} 1.0\n',
                     "does not tell the KV capacity"),
    b"blocks 10^24": (b'vllm:cache_config_info{block_size="16",num_gpu_blocks="'
                      + b"1" * 25 + b'"} 1.0\n', "does not tell the KV capacity"),
    b"blocks 10^13": (b'vllm:cache_config_info{block_size="16",num_gpu_blocks="'
                      + b"1" * 14 + b'"} 1.0\n', "which no server has"),
    b"blocks 1": (b'vllm:cache_config_info{block_size="16",num_gpu_blocks="1"} 1.0\n',
                  "KV capacity of 0 tokens"),
    b"blocks -4": (b'vllm:cache_config_info{block_size="16",num_gpu_blocks="-4"} 1.0\n',
                   "does not tell the KV capacity"),
    b"block_size 0": (b'vllm:cache_config_info{block_size="0",num_gpu_blocks="200"} 1.0\n',
                      "does not tell the KV capacity"),
    b"sglang 1e300": (b"sglang:max_total_num_tokens 1e300\n", "does not tell the KV capacity"),
    b"sglang 0.4": (b"sglang:max_total_num_tokens 0.4\n", "does not tell the KV capacity"),
    b"sglang -7": (b"sglang:max_total_num_tokens -7\n", "does not tell the KV capacity"),
    b"sglang 5000": (b"sglang:max_total_num_tokens 5000\nsglang:token_usage 0.5\n", 5000),
    b"an HTML page": (b"<html><body>metrics</body></html>", "does not tell the KV capacity"),
    b"binary garbage": (bytes(range(256)) * 4, "does not tell the KV capacity"),
    b"empty": (b"", "does not tell the KV capacity"),
}


@pytest.mark.parametrize("case", sorted(ODD_METRICS))
def test_odd_metrics_pages(hostile: Hostile, tmp_path: Path, case: bytes) -> None:  # noqa: F811
    page, expected = ODD_METRICS[case]
    hostile.metrics = page
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            _replay(hostile, tmp_path)
        assert not (tmp_path / "run").exists()  # refused before anything was written
        return
    out = _replay(hostile, tmp_path)
    assert out.complete, out.error
    assert out.summary["kv_capacity_tokens"] == expected
    tl = out.timeline
    assert len(tl) >= 2  # scraped at the start and the end
    for col in ("kv_used_tokens", "num_running", "num_waiting", "num_preemptions"):
        assert (tl[col] >= 0).all(), (col, tl[col].tolist())
    assert (tl["kv_used_tokens"] <= tl["kv_capacity_tokens"]).all()


def test_a_capacity_given_overrides_an_absurd_page(hostile: Hostile,  # noqa: F811
                                                   tmp_path: Path) -> None:
    hostile.metrics = b'vllm:cache_config_info{block_size="16",num_gpu_blocks="' + b"9" * 14 \
        + b'"} 1.0\nvllm:kv_cache_usage_perc 0.5\n'
    out = _replay(hostile, tmp_path, capacity_tokens=1000)
    assert out.complete and out.summary["kv_capacity_tokens"] == 1000
    assert (out.timeline["kv_capacity_tokens"] == 1000).all()


# --- silence: timeouts that are proven to fire -----------------------------------------------------
def _silent(server: Hostile, head: bytes = b"", drip: bytes = b"") -> Script:
    """Sends ``head``, then ``drip`` every 10 ms (or nothing) until the test ends: only a
    timeout can end the client's wait."""
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        if head:
            conn.sendall(head)
        while not server.release.wait(0.01):
            if drip:
                conn.sendall(drip)
    return script


@pytest.mark.parametrize("path", ["/v1/models", "/metrics"])
@pytest.mark.parametrize("how", ["silent", "headers then silent", "drip"])
def test_discovery_that_never_ends_times_out(hostile: Hostile, path: str,  # noqa: F811
                                             how: str) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99999\r\n\r\n"
    hostile.paths[path] = {"silent": _silent(hostile),
                           "headers then silent": _silent(hostile, head),
                           "drip": _silent(hostile, head, b" ")}[how]
    if path == "/v1/models":
        with pytest.raises(BackendUnavailable, match="cannot reach"):
            _discover(hostile, connect_timeout_s=0.3)
    else:  # a page that never ends is no page: the run goes on without metrics
        info = _discover(hostile, connect_timeout_s=0.3)
        assert not info.has_metrics and info.kv_capacity_tokens is None
    assert not hostile.release.is_set()  # the server was still there: the timeout ended it


def test_an_error_body_that_never_ends_times_out(hostile: Hostile) -> None:  # noqa: F811
    hostile.completions = _silent(
        hostile, b"HTTP/1.1 500 X\r\nContent-Length: 99999\r\n\r\n{", b" ")
    res = _stream(hostile, read_timeout_s=0.3)
    assert res.error_kind == "timeout" and "no output for 0.3 s" in res.error, res
    assert not hostile.release.is_set()


def test_metrics_that_stall_mid_run_do_not_stop_the_replay(hostile: Hostile,  # noqa: F811
                                                           tmp_path: Path) -> None:
    scrapes: list[int] = []

    def metrics(conn: socket.socket, body: dict[str, Any]) -> None:
        scrapes.append(1)
        if len(scrapes) == 1:  # the first scrape (discovery) answers; then silence
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(METRICS)
                         + METRICS)
        else:
            hostile.release.wait(60)

    hostile.paths["/metrics"] = metrics
    cfg = ReplayConfig(ServerTarget(hostile.url, read_timeout_s=5.0, connect_timeout_s=0.2),
                       poll_period_s=0.05, tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta("t", "unlimited", {}, 1.0, 0, hostile.url)
    w = from_columns([0.0] * 3, [5] * 3, [4] * 3, tiers=["batch"] * 3)
    out = replay(w, make_policy("unlimited"), cfg, tmp_path / "run", meta=meta)
    assert out.complete, out.error
    assert len(scrapes) >= 2 and not hostile.release.is_set()


# --- secrets ------------------------------------------------------------------------------------
SECRET = "sk-CAMPAIGN-0123456789abcdef"
PASSWORD = "pw-CAMPAIGN-987"


def _echo_auth(server: Hostile, frame: Callable[[str], bytes]) -> Script:
    """Answers with ``frame(the request's Authorization header)``: a server that echoes it."""
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.sendall(frame(server.auth[-1]))
    return script


ECHOES: dict[str, Callable[[str], bytes]] = {
    "a JSON error body": lambda a: status_bytes(401, json.dumps({"error": {"message": a}})),
    "a text body, the key across the cut at 200": lambda a: status_bytes(401, "x" * 190 + a),
    "a stream error event": lambda a: SSE_HEAD + _chunk(1) + _event({"error": {"message": a}}),
    "a malformed event": lambda a: SSE_HEAD + f"data: {{{a}\n\n".encode(),
    "an odd event": lambda a: SSE_HEAD + _event({"choices": [{"text": 5}], "echo": a}),
}


def status_bytes(code: int, body: str) -> bytes:
    raw_body = body.encode()
    return (f"HTTP/1.1 {code} X\r\nContent-Length: {len(raw_body)}\r\nConnection: close\r\n"
            "\r\n").encode() + raw_body


@pytest.mark.parametrize("echo", sorted(ECHOES))
@pytest.mark.parametrize("how", ["key", "url password"])
def test_an_echoed_secret_is_masked(hostile: Hostile, tmp_path: Path, echo: str,  # noqa: F811
                                    how: str) -> None:
    hostile.completions = _echo_auth(hostile, ECHOES[echo])
    if how == "key":
        target = ServerTarget(hostile.url, api_key=SECRET)
    else:
        target = ServerTarget(hostile.url.replace("//", f"//admin:{PASSWORD}@"))
    res = _replay_target(target, tmp_path)
    assert hostile.auth and all(a.startswith(("Bearer ", "Basic ")) for a in hostile.auth)
    token = hostile.auth[-1].split(" ", 1)[1]
    blob = _everything_in(tmp_path / "run")
    assert res.records["error"].str.len().gt(0).all()
    for secret in (SECRET, PASSWORD, token):
        for prefix in (secret[:8], secret[-8:]):
            assert prefix.encode() not in blob, (echo, prefix)
    assert target.redact(hostile.auth[-1]).endswith("***")


def _replay_target(target: ServerTarget, tmp_path: Path, n: int = 2) -> Any:
    cfg = ReplayConfig(target, poll_period_s=0.05, tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta("t", "unlimited", {}, 1.0, 0, target.base_url)
    w = from_columns([0.0] * n, [5] * n, [4] * n, tiers=["batch"] * n)
    return replay(w, make_policy("unlimited"), cfg, tmp_path / "run", meta=meta)


def _everything_in(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


@pytest.mark.parametrize("key", [SECRET + "\n", " " + SECRET, SECRET + "\x00", SECRET + "\u00e9"])
def test_a_key_that_cannot_be_a_header_is_refused_unquoted(tmp_path: Path, key: str) -> None:
    with pytest.raises(ValueError, match="API key") as err:
        ServerTarget("http://127.0.0.1:8000", api_key=key)
    assert SECRET not in str(err.value)
    ways: list[tuple[list[str], dict[str, str] | None]] = [(["--api-key", key], None)]
    if "\x00" not in key:  # no environment variable holds a NUL
        ways.append(([], {"KVBUDGET_API_KEY": key}))
    for args, env in ways:
        code, stdout, stderr = _cli("replay", "--url", "http://127.0.0.1:8000", "--trace",
                                    _trace(tmp_path), "--out", tmp_path / "run", *args, env=env)
        assert code == 2 and stderr.startswith("error: the API key"), stderr
        assert SECRET not in stdout + stderr


def test_the_resume_hint_leaves_the_secrets_out(hostile: Hostile, tmp_path: Path,  # noqa: F811
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay whose server dies prints the command to resume it: without the key's value or
    the URL's password (the hint is built from the process's command line)."""
    def dead(conn: socket.socket, body: dict[str, Any]) -> None:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    hostile.completions = dead
    hostile.paths["/health"] = dead  # and it no longer answers: the replay stops
    url = hostile.url.replace("//", f"//admin:{PASSWORD}@")
    for key_args in (["--api-key", SECRET], [f"--api-key={SECRET}"]):
        out = tmp_path / f"run{len(key_args)}"
        argv = ["replay", "--url", url, "--trace", str(_trace(tmp_path)), "--out", str(out),
                *key_args, "--poll-period", "0.05"]
        monkeypatch.setattr("sys.argv", ["kvbudget", *argv])
        code, stdout, stderr = _cli(*argv)
        assert code == 1 and "stopped answering" in stderr, stderr
        assert "resume with: kvbudget replay --url" in stderr and "--api-key" in stderr
        assert SECRET not in stdout + stderr and PASSWORD not in stdout + stderr
        assert SECRET.encode() not in _everything_in(out)
        assert PASSWORD.encode() not in _everything_in(out)


# --- interruption ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", ["SIGTERM"])  # SIGINT: test_ctrl_c_keeps_what_finished
def test_an_interrupted_replay_keeps_its_rows_and_resumes(hostile: Hostile,  # noqa: F811
                                                          tmp_path: Path, sig: str) -> None:
    """The server answers two requests and then holds every stream: the signal comes mid-run
    however slow the machine. What finished is on disk and reads as incomplete; ``--resume``
    replays only the rest, and every request ends with exactly one row."""
    import signal
    import subprocess
    import sys
    import time

    from kvbudget.live.run_dir import REQUESTS_PART
    from kvbudget.results.run_result import read_run
    from tests.conftest import REPO

    answered: list[int] = []
    lock = threading.Lock()

    def two_then_hold(conn: socket.socket, body: dict[str, Any]) -> None:
        with lock:
            answered.append(1)
            first = len(answered) <= 2
        if first:
            conn.sendall(SSE_HEAD + GOOD)
        else:
            hostile.release.wait(60)

    hostile.completions = two_then_hold
    n = 12
    trace = _trace(tmp_path, n)
    out = tmp_path / "run"
    args = ["replay", "--url", hostile.url, "--trace", str(trace), "--out", str(out),
            "--max-output", "4", "--policy", "unlimited", "--poll-period", "0.05",
            "--api-key", SECRET]
    # a shell starts background jobs with SIGINT ignored: restore Python's handler
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
            " sys.argv[0] = 'kvbudget'; runpy.run_module('kvbudget.cli.main', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", boot, *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        part = out / REQUESTS_PART
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:  # an event: two rows
            if part.exists() and len(part.read_text().splitlines()) >= 2:
                break
            time.sleep(0.01)
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted;"), stderr
    assert "Traceback" not in stderr and SECRET not in stdout + stderr
    assert "--api-key '***'" in stderr or "--api-key ***" in stderr
    run = read_run(out)
    assert len(run.records) == 2 and run.summary["complete"] is False
    assert run.summary["workload"] == {"num_requests": n, "num_recorded": 2}
    # the rest, resumed against a server that answers
    hostile.completions = sse(GOOD)
    code, stdout, stderr = _cli(*args, "--resume", "--json")
    assert code == 0, stderr
    assert "resuming: 2 requests already done, 10 to replay" in stderr
    run = read_run(out)
    assert run.summary["complete"] is True and len(run.records) == n
    assert sorted(run.records["request_id"]) == list(range(n))
    assert (run.records["status"] == "completed").all()
    assert SECRET.encode() not in _everything_in(out)


# --- closed-loop users and client models against the same answers ----------------------------------
def _rotating(scripts: list[Script]) -> Script:
    lock = threading.Lock()
    count = [0]

    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        with lock:
            i = count[0]
            count[0] += 1
        scripts[i % len(scripts)](conn, body)
    return script


def test_closed_loop_users_go_on_through_every_answer(hostile: Hostile,  # noqa: F811
                                                      tmp_path: Path) -> None:
    from kvbudget.workloads.closed_loop import ClosedLoop

    good = sse(GOOD)
    served_good = [0]

    def counted_good(conn: socket.socket, body: dict[str, Any]) -> None:
        served_good[0] += 1
        good(conn, body)

    scripts = [ANSWERS[c][0] for c in sorted(ANSWERS)] + [counted_good]
    hostile.completions = _rotating(scripts)
    out = _replay(hostile, tmp_path, n=2 * len(scripts), closed_loop=ClosedLoop(3))
    assert out.complete, out.error
    assert len(out.records) == 2 * len(scripts)
    # every good answer completes its request (which request meets which answer depends on
    # the order the three users' connections reach the server: not asserted)
    assert served_good[0] >= 1
    assert (out.records["status"] == "completed").sum() == served_good[0]


def test_absurd_think_times_are_refused(tmp_path: Path) -> None:
    from kvbudget.workloads.closed_loop import ClosedLoop

    for think in (1e12, math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="think_time_s"):
            ClosedLoop(2, think)
    code, _, stderr = _cli("replay", "--url", "http://127.0.0.1:1", "--trace", _trace(tmp_path),
                           "--out", tmp_path / "run", "--users", "2", "--think-time-s", "1e12")
    assert code == 2 and "think_time_s" in stderr and len(stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("header", [b"Retry-After: 1e12\r\n", b"Retry-After: -3\r\n",
                                    b"Retry-After: Wed, 21 Oct 9999 07:28:00 GMT\r\n",
                                    b"Retry-After: soon\r\n", b""], ids=repr)
def test_a_client_never_sleeps_on_an_absurd_retry_after(hostile: Hostile, tmp_path: Path,  # noqa: F811
                                                        header: bytes) -> None:
    """A client that honours Retry-After with no cap of its own retries at once (its back-off
    is 0 here) instead of sleeping for the 31,000 years the server asked for."""
    from kvbudget.policies.clients import ClientModel

    client = ClientModel(name="eager", max_attempts=3, retry_on=("overloaded_retryable",),
                         initial_backoff_s=0.0, max_backoff_s=0.0, honor_retry_after=True)
    hostile.completions = _rotating([status(429, header), sse(GOOD)])
    out = _replay(hostile, tmp_path, n=1, clients=(("batch", client),))
    assert out.complete, out.error
    assert out.records["status"].tolist() == ["completed"]
    assert out.records["num_attempts"].tolist() == [2]  # the 429, then the answer


# --- determinism of what a replay sends ------------------------------------------------------------
def test_a_replay_sends_the_same_requests_for_the_same_seed(tmp_path: Path) -> None:
    """The prompts are drawn from (seed, request id), never from the process: two replays with
    one seed send the same bodies; another seed sends other prompts."""
    sent = []
    for i, seed in enumerate((3, 3, 4)):
        server = Hostile()
        with _serving(server):
            server.completions = sse(GOOD)
            out = _replay(server, tmp_path / str(i), n=4, seed=seed)
            assert out.complete, out.error
            sent.append(sorted(json.dumps(b, sort_keys=True) for b in server.bodies))
    assert sent[0] == sent[1] and sent[0] != sent[2]


def test_an_endless_line_fails_the_request(hostile: Hostile) -> None:  # noqa: F811
    """A line that never ends: past MAX_EVENT_CHARS the request fails (nothing fills memory);
    one that drips slower than that ends at the read timeout, the server still dripping."""
    from kvbudget.live.openai_client import MAX_EVENT_CHARS

    hostile.completions = _silent(hostile, SSE_HEAD + _chunk(1) + b"data: "
                                  + b"x" * (MAX_EVENT_CHARS + 1024))
    res = _stream(hostile, read_timeout_s=30)
    assert res.error_kind == "protocol" and "a line longer than" in res.error, res
    assert res.output_tokens == 1 and not hostile.release.is_set()
    hostile.completions = _silent(hostile, SSE_HEAD + _chunk(1) + b"data: ", b"x" * 64)
    res = _stream(hostile, read_timeout_s=0.3)
    assert res.error_kind == "timeout" and "no output for 0.3 s" in res.error, res
    assert not hostile.release.is_set()


def test_an_answer_before_a_large_request_is_sent(hostile: Hostile) -> None:  # noqa: F811
    """The server answers (and closes) before reading a 200,000-token prompt: the request
    ends as an answer or as a reset on its row, never as an exception or a hang."""
    hostile.early = True
    hostile.completions = sse(GOOD)
    t = ServerTarget(hostile.url, model="m", read_timeout_s=10)

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as client:
            return await asyncio.wait_for(stream_completion(
                client, t, list(range(10, 200_010)), 4, clock=lambda: 0.0), 60)

    res = asyncio.run(go())
    _sane(res)
    assert res.ok or res.error_kind == "reset", res


# --- validate --url -----------------------------------------------------------------------------
def _never(server: Hostile) -> Script:
    def script(conn: socket.socket, body: dict[str, Any]) -> None:
        server.release.wait(60)
    return script


VALIDATE = {  # name -> (how the server is set up, exit code, what the one line says)
    "answers": (lambda s: None, 0, ""),
    "503 to every request": (lambda s: setattr(s, "completions", status(503)), 1,
                             "completed none of its 4 requests (4 rejected_overloaded; first "
                             "error: HTTP 503"),
    "[DONE] only": (lambda s: setattr(s, "completions", sse(DONE)), 1,
                    "first error: stream ended without any output"),
    "resets": (lambda s: setattr(s, "completions", _reset_now(True)), 1,
               "first error: connection closed mid-stream: "),
    "never answers": (lambda s: setattr(s, "completions", _never(s)), 1,
                      "first error: timeout: no output for 0.5 s"),
    "an absurd KV capacity": (lambda s: setattr(s, "metrics", b'vllm:cache_config_info{'
                                                b'block_size="16",num_gpu_blocks="'
                                                + b"9" * 14 + b'"} 1\n'), 2,
                              "which no server has; validate needs the server's real KV"),
    "a model not served": (lambda s: setattr(s, "models", b'{"data": [{"id": "other"}]}'), 1,
                           "does not serve model 'm' (--model); it serves 'other'"),
}


@pytest.mark.parametrize("case", sorted(VALIDATE))
def test_validate_against_hostile_servers(hostile: Hostile, tmp_path: Path,  # noqa: F811
                                          case: str) -> None:
    setup, code, said = VALIDATE[case]
    hostile.completions = sse(GOOD)
    setup(hostile)
    trace = _trace(tmp_path, 4)
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"kind": "linear", "coefficients": {
        "intercept_s": 0.004, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4,
        "per_context_token_s": 0.0}}))
    out = tmp_path / "v"
    got, stdout, stderr = _cli("validate", "--url", hostile.url, "--model", "m", "--trace",
                               trace, "--cost-model", cost, "--out", out, "--read-timeout",
                               "0.5", "--poll-period", "0.05", "--no-speed-check",
                               "--max-output", "4")
    assert got == code, stderr
    if code == 0:
        assert (out / "validation.json").exists() and "wrote" in stdout
    else:
        assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1, stderr
        assert said in stderr, stderr
        assert not (out / "validation.json").exists()  # no result that reads as one


# --- calibrate --url ----------------------------------------------------------------------------
CALIBRATE = {
    "[DONE] only": (sse(DONE), "stream ended without any output"),
    "usage only": (FRAMING["usage only, no output"][0], "stream ended without any output"),
    "a JSON answer": (FRAMING["a JSON answer, not a stream"][0], "not an event stream"),
    "503": (status(503), "HTTP 503"),
    "a redirect": (ANSWERS["307 to another host"][0], "not followed"),
    "reset": (_reset_now(True), "connection closed mid-stream"),
    "usage going backwards": (FRAMING["usage going backwards"][0], "went back from 3 to 1"),
}


@pytest.mark.parametrize("case", sorted(CALIBRATE))
def test_calibrate_against_hostile_servers(hostile: Hostile, tmp_path: Path,  # noqa: F811
                                           case: str) -> None:
    """Every answer that is no measurement stops the calibration with one line (exit 1) and
    writes no cost model (a stream without output used to fail with an IndexError)."""
    script, said = CALIBRATE[case]
    hostile.completions = script
    out = tmp_path / "cost.json"
    code, _, stderr = _cli("calibrate", "--url", hostile.url, "--out", out, "--prefill-tokens",
                           "16,32", "--decode-batches", "1,2", "--context-tokens", "16",
                           "--repeats", "1", "--idle-gap", "0", "--read-timeout", "0.5",
                           # the server's batch limits given: none assumed, so nothing but the
                           # error is said
                           "--max-num-seqs", "8", "--max-num-batched-tokens", "2048")
    assert code == 1 and stderr.startswith("error: calibration request failed"), stderr
    assert said in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_a_preemption_counter_that_goes_down_was_reset(hostile: Hostile,  # noqa: F811
                                                       tmp_path: Path) -> None:
    """``vllm:num_preemptions_total`` 5, 9, then 2 (the server restarted), 4, 4...: the replay
    counts 4 + 2 + 2 = 8 preemptions, never a negative number."""
    seq = [0, 5, 9, 2, 4]  # the first page is discovery's, before the replay's own start
    scrapes: list[int] = []
    lock = threading.Lock()
    gate = threading.Event()

    def metrics(conn: socket.socket, body: dict[str, Any]) -> None:
        with lock:
            total = seq[min(len(scrapes), len(seq) - 1)]
            scrapes.append(total)
            if len(scrapes) >= len(seq):
                gate.set()  # the counter has gone round: the request may finish
        page = METRICS + b"vllm:num_preemptions_total %d\n" % total
        # Connection: close, as the fixture's own pages say: this handler closes the socket,
        # and a client that reused it would lose that scrape to a race with the close
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                     % len(page) + page)

    def held(conn: socket.socket, body: dict[str, Any]) -> None:
        gate.wait(60)  # an event, not a timer
        conn.sendall(SSE_HEAD + GOOD)

    hostile.paths["/metrics"] = metrics
    hostile.completions = held
    out = _replay(hostile, tmp_path, n=1)
    assert out.complete, out.error
    tl = out.timeline["num_preemptions"].tolist()
    # one row a scrape; a scrape the client lost (a slow machine) has no row, but the counts it
    # carries are still counted at the next one: the rows are some of 0, 4, 6, 8 in that order
    # and the last (the scrape after the replay) is 8
    assert tl[0] == 0 and tl[-1] == 8 and tl == sorted(tl) and set(tl) <= {0, 4, 6, 8}, tl
    assert out.summary["engine"]["num_engine_preemptions"] == 8


def test_an_interrupted_validate_leaves_no_result(hostile: Hostile,  # noqa: F811
                                                  tmp_path: Path) -> None:
    """SIGTERM in the middle of ``validate --url``'s replay: exit 130, the finished rows in
    live/ read as incomplete, no validation file that would read as a result."""
    import signal
    import subprocess
    import sys
    import time

    from kvbudget.live.run_dir import REQUESTS_PART
    from kvbudget.results.run_result import read_run
    from tests.conftest import REPO

    answered: list[int] = []
    lock = threading.Lock()

    def two_then_hold(conn: socket.socket, body: dict[str, Any]) -> None:
        with lock:
            answered.append(1)
            first = len(answered) <= 2
        if first:
            conn.sendall(SSE_HEAD + GOOD)
        else:
            hostile.release.wait(60)

    hostile.completions = two_then_hold
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"kind": "linear", "coefficients": {
        "intercept_s": 0.004, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4,
        "per_context_token_s": 0.0}}))
    out = tmp_path / "v"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbudget.cli.main", "validate", "--url", hostile.url,
         "--trace", str(_trace(tmp_path, 8)), "--cost-model", str(cost), "--out", str(out),
         "--no-speed-check", "--poll-period", "0.05", "--max-output", "4"],
        cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        part = out / "live" / REQUESTS_PART
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:  # an event: two rows
            if part.exists() and len(part.read_text().splitlines()) >= 2:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted;"), stderr
    assert "Traceback" not in stderr
    run = read_run(out / "live")
    assert len(run.records) == 2 and run.summary["complete"] is False
    assert not (out / "validation.json").exists() and not (out / "validation.csv").exists()
