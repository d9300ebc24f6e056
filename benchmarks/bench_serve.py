"""What ``kvbudget serve`` adds to a stream: TTFT and inter-chunk gaps through the gateway
against a direct connection to the same fast fake upstream, at 1 (unloaded), 100 and 1,000
concurrent streams.

Three processes on loopback: a fake OpenAI upstream (a raw ASGI app under uvicorn that streams
``--tokens`` chunks ``--gap-ms`` apart, and answers a usage chunk when asked), ``kvbudget
serve`` in front of it (``--count-tokens bytes`` unless told otherwise, a budget no burst
fills: admission never waits), and this process as the client (httpx, one stream per task, all started at once). For
each concurrency it runs the burst direct and through the gateway, ``--rounds`` times each,
alternating, and prints:

- TTFT p50/p99 (client send to first chunk) both ways and the difference (the added TTFT);
- the inter-chunk gap p50/p99 both ways (a gateway that buffered would show it here);
- the gateway's CPU seconds (``/proc/PID/stat``) per request and requests per CPU-second, and
  its resident memory (``VmRSS``) after the burst.

With ``--steady-s S`` each concurrency is held for ``S`` seconds instead, as a load tool's
concurrency holds it: every user sends its next stream when its last ends, users started
spread over one stream's length (:func:`steady`); the streams of the first and last stream
length are left out.

``--count-tokens upstream`` makes the gateway count each prompt with the fake's ``/tokenize``
(it answers the prompt's bytes at once: the figure is the gateway's round trip, not a
tokenizer's work); ``--tokenizer DIR`` with ``--count-tokens local``, with that tokenizer.

With ``--compare DIR`` a second ``kvbudget serve``, another checkout's (e.g. the commit before
a change), runs beside this one in front of the same fake and is measured the same way, in the
same rounds (its figures under ``compare_*``): the two are timed under the same load.

With ``--litellm PATH`` (a ``litellm`` executable, ``pip install 'litellm[proxy]'`` in its own
environment) LiteLLM's proxy, one worker, runs in front of the same fake and is measured the
same way (its figures under ``litellm_*``).

Usage: python benchmarks/bench_serve.py [--streams 1,100,1000] [--rounds 3] [--tokens 16]
       [--gap-ms 10] [--steady-s 0] [--count-tokens bytes] [--tokenizer DIR]
       [--litellm PATH] [--compare DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- the fake upstream (run as ``bench_serve.py --fake PORT TOKENS GAP_MS``) -----------------
async def read_body(receive: Any) -> bytes:
    """An ASGI request's whole body (its ``http.request`` messages joined)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def fake_app(num_tokens: int, gap_s: float) -> Any:
    chunk = b'data: {"id":"c","object":"text_completion","model":"fake","choices":[{"index":0,' \
            b'"text":"x","finish_reason":null}]}\n\n'
    usage = ('data: {"id":"c","model":"fake","choices":[],"usage":{"prompt_tokens":4,'
             f'"completion_tokens":{num_tokens},"total_tokens":{num_tokens + 4}}}}}\n\n').encode()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = await read_body(receive)
        if scope["path"] == "/tokenize":  # a count at once: the prompt's bytes
            count = json.dumps({"count": max(len(body) // 4, 1)}).encode()
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": count})
            return
        wants_usage = b'"include_usage": true' in body or b'"include_usage":true' in body
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(num_tokens):
            if i:
                await asyncio.sleep(gap_s)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        tail = (usage if wants_usage else b"") + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    return app


def run_fake(port: int, num_tokens: int, gap_ms: float) -> None:
    import uvicorn

    uvicorn.run(fake_app(num_tokens, gap_ms / 1000), host="127.0.0.1", port=port,
                log_level="warning", access_log=False, backlog=4096)


# --- the client ------------------------------------------------------------------------------
async def one_stream(client: Any, url: str, start: asyncio.Event) -> tuple[float, list[float]]:
    await start.wait()
    t0 = time.perf_counter()
    times: list[float] = []
    body = {"model": "fake", "prompt": "hello", "max_tokens": 16, "stream": True}
    async with client.stream("POST", url + "/v1/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    if not times:
        raise RuntimeError(f"{url}: a stream without chunks")
    return times[0] - t0, [b - a for a, b in itertools.pairwise(times)]


async def burst(url: str, num_streams: int, headers: dict[str, str] | None = None
                ) -> tuple[list[float], list[float], int]:
    import httpx

    limits = httpx.Limits(max_connections=num_streams, max_keepalive_connections=num_streams)
    async with httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client:
        start = asyncio.Event()
        tasks = [asyncio.create_task(one_stream(client, url, start)) for _ in range(num_streams)]
        await asyncio.sleep(0)
        start.set()
        results = await asyncio.gather(*tasks)
    return [r[0] for r in results], [g for r in results for g in r[1]], num_streams


async def steady(url: str, num_streams: int, duration_s: float, stream_s: float,
                 headers: dict[str, str] | None = None) -> tuple[list[float], list[float], int]:
    """``num_streams`` streams kept open for ``duration_s``, as a load tool's concurrency
    (``vllm bench serve --max-concurrency``, GuideLLM's ``concurrent`` profile) keeps them:
    each of ``num_streams`` users sends its next stream when its last one ends. The users start
    spread over one stream's length (``stream_s``), not together; streams sent in the first
    and last ``stream_s`` (warm-up and wind-down) are left out of the figures. A stream that
    fails is counted (stderr) and left out; the count returned is of those that did not."""
    import httpx

    limits = httpx.Limits(max_connections=num_streams, max_keepalive_connections=num_streams)
    ttft: list[float] = []
    gaps: list[float] = []
    sent_all = [0]
    failed: list[str] = []
    async with httpx.AsyncClient(limits=limits, timeout=120, headers=headers) as client:
        t0 = time.perf_counter()
        go = asyncio.Event()
        go.set()

        async def user(k: int) -> None:
            await asyncio.sleep(k * stream_s / num_streams)
            while (sent := time.perf_counter() - t0) < duration_s:
                sent_all[0] += 1
                try:
                    first, g = await one_stream(client, url, go)
                except (httpx.HTTPError, RuntimeError) as exc:  # counted, not measured
                    failed.append(f"{type(exc).__name__}: {exc}")
                    continue
                if stream_s <= sent <= duration_s - stream_s:
                    ttft.append(first)
                    gaps.extend(g)

        await asyncio.gather(*(user(k) for k in range(num_streams)))
    if failed:
        print(f"{url}: {len(failed)} of {sent_all[0]} streams failed, e.g. {failed[0]}",
              file=sys.stderr)
    return ttft, gaps, sent_all[0] - len(failed)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], bound_s: float = 60) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"a server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {bound_s} s")


def cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` and of every process below it (a proxy's workers)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            _, tail = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        if int(stat.parent.name) == pid or _descends(int(fields[1]), pid):
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def _descends(parent: int, pid: int) -> bool:
    while parent > 1:
        if parent == pid:
            return True
        try:
            parent = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            return False
    return False


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


LITELLM_CONFIG = """model_list:
  - model_name: fake
    litellm_params:
      model: openai/fake
      api_base: http://127.0.0.1:{port}/v1
      api_key: none
litellm_settings:
  telemetry: false
"""


Proxy = tuple[subprocess.Popen[bytes], str, dict[str, str]]
"""A proxy under test: its process, its base URL, the headers its clients send."""


def start_proxies(args: argparse.Namespace, up_port: int, tmp: Path) -> dict[str, Proxy]:
    """``kvbudget serve`` (and LiteLLM's proxy with ``--litellm``, one worker, its master key
    set: it refuses to start without one) in front of the fake on ``up_port``."""
    out: dict[str, Proxy] = {}
    trees = {"gateway": REPO, **({"compare": Path(args.compare)} if args.compare else {})}
    for name, tree in trees.items():
        port = free_port()
        out[name] = (subprocess.Popen(
            [sys.executable, "-m", "kvbudget.cli.main", "serve", "--upstream",
             f"http://127.0.0.1:{up_port}", "--port", str(port), "--count-tokens",
             args.count_tokens, *(["--tokenizer", args.tokenizer] if args.tokenizer else []),
             "--capacity-tokens", str(10**9)], env={**os.environ, "PYTHONPATH": str(tree)},
            cwd=tree, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}", {})
    if args.litellm:
        config = tmp / "litellm.yaml"
        config.write_text(LITELLM_CONFIG.format(port=up_port))
        port, key = free_port(), "sk-bench-" + os.urandom(16).hex()
        out["litellm"] = (subprocess.Popen(
            [args.litellm, "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--num_workers", "1", "--telemetry", "False"],
            env={**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": key},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), f"http://127.0.0.1:{port}",
            {"authorization": f"Bearer {key}"})
    return out


def measure(args: argparse.Namespace, n: int, direct: str, proxies: dict[str, Proxy]
            ) -> dict[str, Any]:
    """One concurrency ``n``: every path ``args.rounds`` times, alternating; the figures."""
    paths = {"direct": (direct, {}),
             **{name: (url, headers) for name, (_, url, headers) in proxies.items()}}
    ttft: dict[str, list[float]] = {k: [] for k in paths}
    gaps: dict[str, list[float]] = {k: [] for k in paths}
    cpu = dict.fromkeys(proxies, 0.0)
    num = dict.fromkeys(proxies, 0)
    for _ in range(args.rounds):
        for name, (url, headers) in paths.items():
            before = cpu_s(proxies[name][0].pid) if name in proxies else 0.0
            t, g, sent = asyncio.run(
                steady(url, n, args.steady_s, args.tokens * args.gap_ms / 1000, headers)
                if args.steady_s else burst(url, n, headers))
            if name in proxies:
                cpu[name] += cpu_s(proxies[name][0].pid) - before
                num[name] += sent
            ttft[name] += t
            gaps[name] += g
    row: dict[str, Any] = {
        "streams": n,
        "ttft_ms": {k: {"p50": 1e3 * pct(v, 0.5), "p99": 1e3 * pct(v, 0.99)}
                    for k, v in ttft.items()},
        "gap_ms": {k: {"p50": 1e3 * pct(v, 0.5), "p99": 1e3 * pct(v, 0.99)}
                   for k, v in gaps.items()},
    }
    for name, (proc, _, _) in proxies.items():
        prefix = "" if name == "gateway" else f"{name}_"
        row[f"{prefix}added_ttft_ms"] = {
            q: 1e3 * (pct(ttft[name], p) - pct(ttft["direct"], p))
            for q, p in (("p50", 0.5), ("p99", 0.99))}
        row[f"{name}_streams"] = num[name]
        row[f"{name}_cpu_ms_per_request"] = 1e3 * cpu[name] / num[name]
        row[f"{name}_requests_per_cpu_s"] = num[name] / cpu[name] if cpu[name] else float("inf")
        row[f"{name}_rss_mib"] = rss_mib(proc.pid)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="1,100,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=10.0)
    parser.add_argument("--steady-s", type=float, default=0.0,
                        help="keep each concurrency's streams open this long, each user "
                        "sending its next stream when its last ends (default 0: all at once)")
    parser.add_argument("--count-tokens", default="bytes",
                        choices=("bytes", "upstream", "local"),
                        help="how the gateway counts prompts (upstream: the fake's /tokenize)")
    parser.add_argument("--tokenizer", help="with --count-tokens local: its tokenizer")
    parser.add_argument("--litellm", help="a litellm executable: measure its proxy too")
    parser.add_argument("--compare", help="another checkout's root: measure its gateway too")
    parser.add_argument("--fake", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake:
        run_fake(int(args.fake[0]), int(args.fake[1]), float(args.fake[2]))
        return
    up_port = free_port()
    fake = subprocess.Popen([sys.executable, __file__, "--fake", str(up_port), str(args.tokens),
                             str(args.gap_ms)], env={**os.environ, "PYTHONPATH": str(REPO)})
    with tempfile.TemporaryDirectory() as tmp:
        proxies = start_proxies(args, up_port, Path(tmp))
        try:
            wait_port(up_port, fake)
            for proc, url, headers in proxies.values():
                wait_port(int(url.rsplit(":", 1)[1]), proc, bound_s=180)
                asyncio.run(burst(url, 10, headers))  # warm it
            rows = [measure(args, int(n), f"http://127.0.0.1:{up_port}", proxies)
                    for n in args.streams.split(",")]
            print(json.dumps({"tokens": args.tokens, "gap_ms": args.gap_ms,
                              "count_tokens": args.count_tokens,
                              "rounds": args.rounds, "steady_s": args.steady_s,
                              "cpus": os.cpu_count(), "results": rows}, indent=2))
        finally:
            procs = [fake, *(proc for proc, _, _ in proxies.values())]
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()


if __name__ == "__main__":
    main()
