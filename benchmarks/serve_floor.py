"""The floor under ``kvbudget serve``'s CPU a request: a bare proxy on the gateway's own stack
(uvicorn with :func:`kvbudget.live.serve_run.server_config`'s settings, its bounded httptools
parser, the uvloop event loop), counted by ``bench_serve_instructions.py --floor`` as the
gateway is counted.

``static``: uvicorn answers every request with a fixed two-chunk stream itself (the server
side alone). ``aiohttp``: the body is read, the usage request written in, and it is posted to
the upstream with aiohttp's client as the gateway posts it (one pooled session, the same
connector settings); the upstream's stream is passed on read by read. No admission, no prompt
count, no parsing, no settlement: what is left of the gateway's work a request.

Usage: python benchmarks/serve_floor.py {static,aiohttp} UPSTREAM_URL PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import uvicorn
from bench_serve import read_body
from yarl import URL

from kvbudget.live.serve_run import bind, event_loop, server_config
from kvbudget.live.serve_upstream import KEEPALIVE_EXPIRY_S

HEAD = ((b"cache-control", b"no-cache"), (b"content-type", b"text/event-stream; charset=utf-8"))
CHUNK = b'data: {"id":"c","choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'
STATIC = CHUNK * 2 + b"data: [DONE]\n\n"
USAGE = b',"stream_options":{"include_usage":true}}'


def floor_app(mode: str, upstream: str) -> Any:
    url = URL(upstream.rstrip("/") + "/v1/completions")
    sessions: list[aiohttp.ClientSession] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            for session in sessions:
                await session.close()
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": HEAD})
        if mode == "static":
            await send({"type": "http.response.body", "body": STATIC, "more_body": False})
            return
        if not sessions:
            sessions.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(
                limit=0, keepalive_timeout=KEEPALIVE_EXPIRY_S), trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar()))
        async with sessions[0].post(url, data=body.rstrip()[:-1] + USAGE,
                                    headers={"content-type": "application/json"}) as resp:
            async for data in resp.content.iter_any():
                await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


async def serve(mode: str, upstream: str, port: int) -> None:
    sock = bind("127.0.0.1", port)
    config = server_config(floor_app(mode, upstream), drain_timeout_s=1.0, keep_alive_s=5.0)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    mode, upstream, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode not in ("static", "aiohttp"):
        raise SystemExit(f"unknown floor {mode!r}: static or aiohttp")
    with asyncio.Runner(loop_factory=event_loop()) as runner:
        runner.run(serve(mode, upstream, port))


if __name__ == "__main__":
    main()
