"""``/ready`` of ``kvbudget serve`` follows the latest evidence on its upstreams
(``live/serve_ready.py``): a completion refused its connection marks the upstream down at once,
an answer marks it up, and a probe that began before such evidence does not overrule it. Every
step is sequenced by events (no sleeps, no timers)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from kvbudget.live.serve_ready import Reachability
from kvbudget.live.serve_upstream import UpstreamError
from tests.unit.live.serve_harness import FakeUpstream, make_server, serving, until

pytestmark = pytest.mark.timeout(60)

NO_PROBE_S = 1e6
"""A probe period no test reaches: only the first probe (at start) runs."""


@pytest.mark.parametrize("stream", [False, True])
def test_ready_is_503_once_a_completion_finds_the_upstream_refusing(stream: bool) -> None:
    # the upstream stopped mid-run: completions got 502, and /ready stayed 200 until the next
    # probe (5 s by default): a load balancer kept sending to a gateway that could only fail
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        upstream = contextlib.AsyncExitStack()
        up = await upstream.enter_async_context(serving(fake.app()))
        server = make_server(up, capacity_tokens=400)
        server.reach.period_s = NO_PROBE_S
        async with serving(server.app) as url, httpx.AsyncClient() as client:
            await until(lambda: server.reach.num_probes > 0, lambda: server.reach.changed)
            body = {"model": "fake", "prompt": "hello", "max_tokens": 8, "stream": stream}
            assert (await client.post(url + "/v1/completions", json=body)).status_code == 200
            assert (await client.get(url + "/ready")).status_code == 200
            await upstream.aclose()  # its port now refuses connections
            answer = await client.post(url + "/v1/completions", json=body)
            assert answer.status_code == 502
            ready = await client.get(url + "/ready")
            assert ready.status_code == 503 and "no upstream reachable" in ready.text
            assert "a completion forwarded" in ready.text and up in ready.text
            assert server.reach.num_probes == 1  # the completion said it, not a probe
            assert (await client.get(url + "/health")).status_code == 200  # alive all along
    asyncio.run(main())


class _Upstreams:
    """Two upstreams whose ``/health`` answers only when the test lets it (``gates``)."""

    def __init__(self) -> None:
        self.urls = ["http://a", "http://b"]
        self.gates = {url: asyncio.Event() for url in self.urls}
        self.asked = asyncio.Event()
        self.fail = {url: False for url in self.urls}

    async def get(self, url: str, body: Any = None) -> tuple[int, bytes, str]:
        base = url.removesuffix("/health")
        self.asked.set()
        await self.gates[base].wait()
        if self.fail[base]:
            raise UpstreamError(f"{url}: ClientConnectorError")
        return 200, b"ok", "text/plain"


def test_a_probe_that_began_before_a_completions_evidence_does_not_overrule_it() -> None:
    async def main() -> None:
        ups = _Upstreams()
        reach = Reachability(ups)  # type: ignore[arg-type]
        probe = asyncio.create_task(reach.probe())
        await ups.asked.wait()  # the probe is asking
        reach.refused(0, "ClientConnectorError (Connect call failed)")  # then a completion
        reach.refused(1, "ClientConnectorError (Connect call failed)")
        assert reach.problem.startswith("no upstream reachable: http://a: ")
        for gate in ups.gates.values():
            gate.set()  # both /health answer, from before the completions' failures
        await probe
        assert reach.problem and set(reach.down) == {0, 1}
        reach.answered(1)  # a completion got an answer from b
        assert reach.problem == "" and set(reach.down) == {0}
        await reach.probe()  # a probe begun after them rules: a answers /health now
        assert reach.down == {}
        ups.fail["http://b"] = True
        await reach.probe()
        assert set(reach.down) == {1} and reach.problem == ""  # a still answers
    asyncio.run(main())
