"""How ``kvbudget serve`` passes a stream on: one write to the client for each read from the
upstream (not one for each line), the same bytes however the upstream's reads split the lines,
and a stream's upstream connection given back to the pool for the next request."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import pytest

from kvbudget.live.serve_forward import Call
from tests.unit.live.serve_harness import (
    FakeUpstream,
    assert_nothing_held,
    make_server,
    serving,
    streamed_call,
    until,
)

pytestmark = pytest.mark.timeout(60)

NUM_TOKENS = 5


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


STREAM = b"".join(
    [_event({"id": "c", "choices": [{"index": 0, "text": "x", "finish_reason": None}]})] * 3
    + [b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"y\"}]}\r\n\r\n",
       _event({"id": "c", "choices": [], "usage": {"prompt_tokens": 5,
                                                  "completion_tokens": 4}}),
       b"data: [DONE]\n\n"])




def _relayed(reads: list[bytes], wants_usage: bool) -> tuple[bytes, Call]:
    call = streamed_call(wants_usage)
    out = b"".join(call.on_read(data, float(i)) for i, data in enumerate(reads))
    return out + call.on_end(float(len(reads))), call


@pytest.mark.parametrize("wants_usage", [False, True])
def test_the_relayed_bytes_do_not_depend_on_how_the_reads_split_the_lines(
        wants_usage: bool) -> None:
    whole, call = _relayed([STREAM], wants_usage)
    assert call.output_tokens == 4 and not call.problem
    assert len(call.chunk_times_s) == 4
    assert (b'"usage"' in whole) is wants_usage
    assert whole.count(b"data: {") == 4 + wants_usage and whole.endswith(b"data: [DONE]\n\n")
    assert b"\r" not in whole  # CRLF lines passed on as LF, as an SSE client reads them
    for cut in range(1, len(STREAM)):
        split, other = _relayed([STREAM[:cut], STREAM[cut:]], wants_usage)
        assert split == whole, cut
        assert other.output_tokens == 4
    bytewise, _ = _relayed([STREAM[i:i + 1] for i in range(len(STREAM))], wants_usage)
    assert bytewise == whole
    unterminated, last = _relayed([STREAM.removesuffix(b"\n\n")], wants_usage)
    assert unterminated == whole.removesuffix(b"\n") and last.output_tokens == 4


def test_a_stream_is_written_to_the_client_once_a_read_not_once_a_line() -> None:
    """The fake writes each event (a data line and its blank line) in one piece: the gateway
    must not split it into two writes (it did: one per line, twice the sends a token)."""
    bodies: list[bytes] = []

    def counting(app: Any) -> Any:
        async def wrapped(scope: Any, receive: Any, send: Any) -> None:
            async def counted(message: Any) -> None:
                if message["type"] == "http.response.body" and scope["path"].startswith("/v1"):
                    bodies.append(message["body"])
                await send(message)
            await app(scope, receive, counted)
        return wrapped

    async def main() -> None:
        fake = FakeUpstream(num_tokens=NUM_TOKENS)
        fake.release.set()
        async with serving(fake.app()) as up:
            server = make_server(up)
            async with serving(counting(server.app)) as url, httpx.AsyncClient() as client:
                body = {"model": "fake", "prompt": "hi", "max_tokens": 8, "stream": True}
                async with client.stream("POST", url + "/v1/completions", json=body) as resp:
                    lines = [line async for line in resp.aiter_lines() if line]
                await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
        assert lines[-1] == "data: [DONE]" and len(lines) == NUM_TOKENS + 1
        # the upstream's events: NUM_TOKENS chunks, the usage chunk (dropped), [DONE]; then
        # the empty body that ends the answer
        assert len(bodies) <= NUM_TOKENS + 3, bodies
        assert all(b.endswith(b"\n\n") for b in bodies if b)
        assert_nothing_held(server)

    asyncio.run(main())


def test_streams_read_to_their_end_give_their_upstream_connection_back() -> None:
    """A stream read to its ``[DONE]`` and end returns its connection to the pool: the next
    request reuses it (the upstream sees one client port), where closing it would cost a new
    connection (a TCP handshake, a socket) for every request."""
    ports: list[int] = []

    def seen(request: Any, body: dict[str, Any]) -> None:
        ports.append(request.client.port)

    async def main() -> None:
        fake = FakeUpstream(num_tokens=NUM_TOKENS, on_request=seen)
        fake.release.set()
        async with serving(fake.app()) as up:
            server = make_server(up)
            async with serving(server.app) as url, httpx.AsyncClient() as client:
                for stream in (True, True, False, True):
                    body = {"model": "fake", "prompt": "hi", "max_tokens": 8, "stream": stream}
                    resp = await client.post(url + "/v1/completions", json=body)
                    assert resp.status_code == 200
                    await until(lambda: server.num_in_flight == 0,
                                lambda: server.flight_changed)
            await server.upstreams.aclose()
        assert len(ports) == 4 and len(set(ports)) == 1, ports
        assert_nothing_held(server)

    asyncio.run(main())


def test_the_gateways_connections_send_each_write_at_once() -> None:
    """The listening socket names ``IPPROTO_TCP``, so asyncio turns Nagle's algorithm off
    (``TCP_NODELAY``) on every connection accepted from it. Made with protocol 0 (as before),
    asyncio left it on: on a kept-alive connection each token written after the first waited
    for the client's delayed ACK (~40 ms on Linux), and streams reached clients in one piece."""
    import socket

    from kvbudget.live.serve_run import bind

    async def accepted_nodelay() -> int:
        got: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            got.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        listening = bind("127.0.0.1", 0)
        server = await asyncio.start_server(handle, sock=listening)
        port = listening.getsockname()[1]
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            value = await got
            writer.close()
            return value
        finally:
            server.close()
            await server.wait_closed()

    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP
    assert asyncio.run(accepted_nodelay()) != 0


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_the_gateways_http_server_refuses_a_head_over_its_limit(
        parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server ``kvbudget serve`` runs reads requests with httptools bounded by the
    gateway (uvicorn's own httptools protocol has no head limit, and llhttp buffers a header
    until it ends), or with h11 and its option where httptools is not installed: a head over
    ``MAX_HEADER_BYTES`` is refused, in one write or trickled in small ones; one under it is
    served, and so is a large body sent with its head in one write (the bytes after the head
    are not counted as head)."""

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request as HttpRequest
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    from kvbudget.live import serve_run
    from kvbudget.live.serve_run import MAX_HEADER_BYTES, bind, server_config

    if parser == "h11":
        def missing() -> Any:
            raise ImportError("httptools")
        monkeypatch.setattr(serve_run, "_bounded_httptools", missing)
    else:
        pytest.importorskip("httptools")

    async def ok(request: HttpRequest) -> PlainTextResponse:
        return PlainTextResponse(f"ok {len(await request.body())}")

    config = server_config(Starlette(routes=[Route("/", ok, methods=["GET", "POST"])]),
                           drain_timeout_s=1.0, keep_alive_s=5.0)
    assert (config.http == "h11") == (parser == "h11")

    async def status_for(head_bytes: int, port: int, piece: int = 0, body: int = 0) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        data = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(body).encode()
                + b"\r\nX-Pad: " + b"a" * head_bytes + b"\r\n\r\n" + b"b" * body)
        for start in range(0, len(data), piece or len(data)):
            if writer.is_closing() or reader.at_eof():
                break
            writer.write(data[start:start + (piece or len(data))])
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        line = await reader.readline()
        writer.close()
        return line

    async def main() -> list[bytes]:
        sock = bind("127.0.0.1", 0)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                await asyncio.sleep(0)
            port = sock.getsockname()[1]
            return [await status_for(MAX_HEADER_BYTES // 2, port),
                    await status_for(2 * MAX_HEADER_BYTES, port),
                    await status_for(2 * MAX_HEADER_BYTES, port, piece=4096),
                    await status_for(100, port, body=4 * MAX_HEADER_BYTES)]
        finally:
            server.should_exit = True
            await task
            sock.close()

    small, large, trickled, big_body = asyncio.run(main())
    assert small.startswith(b"HTTP/1.1 200"), small
    assert large.startswith(b"HTTP/1.1 400"), large
    assert trickled.startswith(b"HTTP/1.1 400"), trickled
    assert big_body.startswith(b"HTTP/1.1 200"), big_body


def test_the_gateway_runs_on_uvloop_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from kvbudget.live.serve_run import event_loop

    uvloop = pytest.importorskip("uvloop")
    assert event_loop() is uvloop.new_event_loop
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not installed: asyncio's own
    assert event_loop() is asyncio.new_event_loop


def test_a_cookie_an_upstream_sets_never_goes_with_another_request() -> None:
    """The gateway's client to the upstreams keeps no cookies: one an answer to one client set
    would otherwise go upstream with every later client's requests (httpx's client, before,
    kept them; aiohttp's default jar keeps those of a named host, and fails this test when
    told to keep those of an address too)."""
    from starlette.applications import Starlette
    from starlette.requests import Request as HttpRequest
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    cookies: list[str | None] = []

    async def completions(request: HttpRequest) -> JSONResponse:
        cookies.append(request.headers.get("cookie"))
        answer = JSONResponse({"id": "c", "choices": [{"index": 0, "text": "x"}],
                               "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
        answer.set_cookie("session", f"client-{len(cookies)}")
        return answer

    async def main() -> None:
        upstream = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
        async with serving(upstream) as up:
            server = make_server(up)
            async with serving(server.app) as url, httpx.AsyncClient() as client:
                for _ in range(2):
                    body = {"model": "fake", "prompt": "hi", "max_tokens": 8}
                    resp = await client.post(url + "/v1/completions", json=body)
                    assert resp.status_code == 200
                await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
            await server.upstreams.aclose()
        assert cookies == [None, None]
        assert_nothing_held(server)

    asyncio.run(main())
