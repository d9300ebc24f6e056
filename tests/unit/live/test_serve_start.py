"""``kvbudget serve``'s start against its upstreams' ``/metrics``: a data-parallel upstream's
KV is its engines' together, and a request runs on one of them, so the most one request may
reserve is one engine's share; and each upstream's ``/metrics`` is read once at the start (the
capacity and the settings the run directories record from the same page)."""

from __future__ import annotations

import asyncio
import signal
import socket
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from kvbudget.live.gateway_server import ServeConfig
from kvbudget.live.serve_request import KeyTable, key_digest
from kvbudget.live.serve_run import ServeSettings, bind, serve
from kvbudget.live.serve_upstream import UpstreamOptions, Upstreams
from kvbudget.live.server_metrics import snapshot
from kvbudget.policies import make_policy
from kvbudget.results.run_result import read_run
from tests.unit.live.serve_harness import TIERS, FakeUpstream, serving, stack

DP2_PAGE = (Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
            / "vllm-0.32.0-cpu-dp2.prom")
"""A vLLM 0.32.0 server of ``--data-parallel-size 2`` (CPU): each engine's ``cache_config_info``
series says the front end's sum, 8192 blocks of 128 tokens, 4096 each."""
SMALL_DP2_PAGE = "".join(
    f'vllm:cache_config_info{{block_size="16",engine="{e}",model_name="fake",'
    f'num_gpu_blocks="10"}} 1.0\n' for e in (0, 1))
"""Hand-made, as the real one: two engines, 10 blocks of 16 in all (5 each, one of them null)."""


@dataclass
class PagedUpstream(FakeUpstream):
    """The fake upstream whose ``/metrics`` is ``page``, each read counted."""

    page: str = ""
    num_metrics_reads: int = 0

    async def metrics(self, request: Request) -> Response:
        self.num_metrics_reads += 1
        return PlainTextResponse(self.page)


def test_a_data_parallel_upstreams_request_cap_is_one_engines_kv() -> None:
    """The real DP=2 page: 8192 blocks over 2 engines, one null block each. The budget is all
    of it (8190 x 128); one request at most one engine's (4095 x 128), where it was the whole."""
    snap = snapshot(DP2_PAGE.read_text())
    assert snap.engine_capacity_tokens == 4095 * 128
    assert Upstreams(UpstreamOptions(("http://a",))).fleet_capacity([snap]) == (
        8190 * 128, 4095 * 128)
    # hand-made: figures that differ are each engine's own, and the smaller one holds less
    uneven = snapshot("".join(
        f'vllm:cache_config_info{{block_size="16",engine="{e}",num_gpu_blocks="{n}"}} 1.0\n'
        for e, n in ((0, 6), (1, 10))))
    assert (uneven.kv_capacity_tokens, uneven.engine_capacity_tokens) == (14 * 16, 5 * 16)
    single = snapshot('vllm:cache_config_info{block_size="16",num_gpu_blocks="1001"} 1.0\n')
    assert Upstreams(UpstreamOptions(("http://a",))).fleet_capacity([single]) == (16000, None)
    assert Upstreams(UpstreamOptions(("http://a", "http://b"))).fleet_capacity(
        [snap, single]) == (8190 * 128 + 16000, 16000)
    assert Upstreams(UpstreamOptions(("http://a", "http://b"))).fleet_capacity(
        [snap, snap]) == (2 * 8190 * 128, 4095 * 128)


def test_a_request_larger_than_one_data_parallel_engine_is_refused() -> None:
    """One upstream of two engines, 64 tokens each: 21 + 60 tokens fit the upstream's 128,
    no engine's 64; it was admitted (one upstream had no cap), now refused 400."""
    async def main() -> None:
        fake = PagedUpstream(page=SMALL_DP2_PAGE)
        fake.release.set()
        async with stack(fake) as (server, url), httpx.AsyncClient() as client:
            await server.refresh_capacity()
            config = server.admission.gateway.config
            assert (config.capacity_tokens, config.max_request_tokens) == (128, 64)
            r = await client.post(url + "/v1/completions", json={
                "model": "fake", "prompt": "x " * 10, "max_tokens": 60})
            assert r.status_code == 400, r.text
            assert "the limit is 64 tokens" in r.json()["error"]["message"]
            assert not fake.received
    asyncio.run(main())


def test_serve_reads_each_upstreams_metrics_once_at_the_start() -> None:
    """serve read the upstream's /metrics for the capacity, then again for its settings (the
    run directories' server): two reads of one page at the start, now one. Counted when serve
    says it listens (its own reads after that are the running gateway's), then it is stopped
    as SIGTERM would (its handler, called)."""
    lines: list[str] = []
    counted: list[int] = []
    caps: list[int | None] = []

    async def main() -> None:
        fake = PagedUpstream(page=DP2_PAGE.read_text())
        async with serving(fake.app()) as up:
            def announce(line: str) -> None:
                lines.append(line)
                if "listening on" in line:
                    counted.append(fake.num_metrics_reads)
                    asyncio.get_running_loop().call_soon(stop)

            def stop() -> None:
                handler = signal.getsignal(signal.SIGTERM)
                assert callable(handler) and type(getattr(handler, "__self__", None)
                                                  ).__name__ == "_Uvicorn", handler
                handler(signal.SIGTERM, None)

            settings = ServeSettings(
                tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
                upstream=UpstreamOptions((up,)), config=ServeConfig(count_tokens="bytes", trust_tier_header=True),
                port=0, drain_timeout_s=1.0)
            async with asyncio.timeout(30):
                server = await serve(settings, announce)
        caps.append(server.admission.gateway.config.max_request_tokens)

    asyncio.run(main())
    assert counted == [1], counted
    assert caps == [4095 * 128]
    said = [line for line in lines if "a request reserves at most" in line]
    assert len(said) == 1 and "524,160 tokens" in said[0] and \
        "2 data-parallel engines" in said[0], lines


def _start_lines(settings: ServeSettings, fake: FakeUpstream) -> list[str]:
    """What ``serve`` says as it starts, up to its last start line; then it is stopped as
    SIGTERM would stop it."""
    lines: list[str] = []

    async def main() -> None:
        async with serving(fake.app()) as up:
            def announce(line: str) -> None:
                lines.append(line)
                if "a request without max_tokens" in line:  # the last line always said
                    asyncio.get_running_loop().call_soon(stop)

            def stop() -> None:
                handler = signal.getsignal(signal.SIGTERM)
                assert callable(handler)
                handler(signal.SIGTERM, None)

            async with asyncio.timeout(30):
                await serve(replace(settings, upstream=replace(settings.upstream, urls=(up,))),
                            announce)

    asyncio.run(main())
    return lines


def test_serve_says_where_its_budget_policy_and_tiers_come_from() -> None:
    """The start lines said the capacity's figure, not whence (the upstreams' /metrics, the
    flag, the scenario), nor the policy it admits by, nor how a request's tier is told and
    whether a key is checked: a user could not tell what the gateway assumed."""
    page = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="101"} 1.0\n'
    settings = ServeSettings(
        tiers=TIERS, new_policy=lambda: make_policy("overcommit", {"overcommit_ratio": 0.5}),
        upstream=UpstreamOptions(("http://unused",)),
        config=ServeConfig(count_tokens="bytes", trust_tier_header=True, capacity_period_s=7.0),
        port=0, drain_timeout_s=1.0)
    lines = _start_lines(settings, PagedUpstream(page=page))
    assert ("capacity 1600 tokens, the upstreams' KV, vllm:cache_config_info on their "
            "/metrics, read again every 7 s; prompt tokens counted by a bound of one token a "
            "UTF-8 byte plus 16 (never fewer than the tokenizer's: it over-reserves") in lines[0]
    said = next(line for line in lines if "policy " in line)
    assert said.startswith("kvbudget serve: policy overcommit (") and \
        "overcommit_ratio 0.5" in said, said
    assert ("a request's tier is its x-kvbudget-tier header, trusted (no --keys, a loopback "
            "address), interactive without one; no API key is checked; clients' API keys are "
            "not passed upstream (it gets none)") in said

    keys = KeyTable.parse(f"{key_digest('sk-a')} batch\n", "keys.txt", {t.name: t for t in TIERS})
    given = replace(settings, capacity_tokens=4000, capacity_from="--capacity-tokens",
                    config=ServeConfig(count_tokens="upstream", keys=keys),
                    upstream=UpstreamOptions(("http://unused",), api_key="up-secret"))
    lines = _start_lines(given, FakeUpstream())
    assert ("capacity 4000 tokens, --capacity-tokens; prompt tokens counted by the upstream "
            "/tokenize (exact") in lines[0], lines[0]
    said = next(line for line in lines if "policy " in line)
    assert ("a request's tier is its API key (--keys: 1 key; a missing or unknown key gets "
            "401); clients' API keys are not passed upstream (--upstream-api-key is sent)") \
        in said, said
    assert "up-secret" not in "".join(lines)


def test_a_reservation_is_rounded_up_to_the_upstreams_kv_blocks(tmp_path: Path) -> None:
    """kvbudget serve reserved a request's exact tokens while its upstream allocates KV in
    blocks: against the CPU vLLM of the tests (9 usable blocks of 128, 1,152 tokens),
    ``conservative`` admitted five requests of 220 tokens (1,100 reserved, 10 blocks needed)
    and the engine preempted 6 times under the policy that reserves all it may use; and a
    simulation of the run directory, which rounds to the recorded ``block_size`` as the
    simulator and ``kvbudget replay`` do, admitted four. Each reservation is now rounded up
    to the upstreams' ``block_size`` (16 here: 18 prompt tokens by the bytes bound + 60 = 78
    reserved as 80), and the start says so."""
    lines: list[str] = []
    out = tmp_path / "runs"

    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with serving(fake.app()) as up:
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def announce(line: str) -> None:
                lines.append(line)
                if "listening on " in line:
                    ready.set_result(line.split("listening on ")[1].split()[0])

            settings = ServeSettings(
                tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
                upstream=UpstreamOptions((up,)), out=out, port=0, drain_timeout_s=1.0,
                config=ServeConfig(count_tokens="bytes", trust_tier_header=True))
            served = asyncio.create_task(serve(settings, announce))
            url = await asyncio.wait_for(ready, 30)
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(url + "/v1/completions",
                                      json={"model": "fake", "prompt": "hi", "max_tokens": 60})
                assert r.status_code == 200
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
            await asyncio.wait_for(served, 30)

    asyncio.run(main())
    rows = read_run(out / "run-0001").records
    assert list(rows["reserved_tokens"]) == [80]
    assert any("rounded up to whole KV blocks of 16 tokens" in line
               and "read at the start only: no capacity read follows" in line
               for line in lines), lines


def test_the_socket_listens_before_the_start_line_says_so() -> None:
    """``kvbudget serve`` says "listening on" once its socket is bound, then uvicorn's start
    listened on it: a client that connected on reading the line was refused on a loaded
    machine (the CLI tests' first request failed so: "All connection attempts failed"). The
    socket now listens as it is bound; a connection waits in its backlog until uvicorn
    accepts it."""
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5.0):
            pass  # queued in the backlog: nothing has accepted it yet
    finally:
        sock.close()
