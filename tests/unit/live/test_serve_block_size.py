"""``kvbudget serve`` rounds each reservation up to the upstreams' KV blocks (their
``block_size``, read at the start). An upstream restarted with another ``--block-size`` kept
the old rounding: reservations of 16-token blocks in front of an engine allocating 32, so
reserved tokens no longer bounded the blocks it could take. The capacity read follows the
block size as it follows the context: one line says the new rounding, the next reservation
takes it, and the next run directory records the new block size."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path

import httpx
import pandas as pd
import pytest

from kvbudget.live.run_dir import META_FILE
from kvbudget.live.serve_records import ServeRecorder
from kvbudget.live.serve_run import upstream_facts
from kvbudget.live.serve_settings import UpstreamSettings, block_tokens, told
from kvbudget.live.serve_upstream import UpstreamOptions, Upstreams
from tests.unit.live.serve_harness import TIERS, FakeUpstream, serving, stack

pytestmark = pytest.mark.timeout(120)
BODY = {"model": "fake", "prompt": "hello", "max_tokens": 20}
"""Reserved as the bytes bound of "hello" (5 + 16) + 20 = 41 tokens: 48 in blocks of 16, 64
in blocks of 32."""


def test_an_upstream_restarted_with_another_block_size_is_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with serving(fake.app()) as first:
            facts = await upstream_facts(UpstreamOptions((first,)))
        assert facts[0]["block_size"] == 16
        recorder = ServeRecorder(
            tmp_path,
            tiers=TIERS,
            policy={"name": "conservative"},
            rotate_requests=100,
            meta=told(facts),
        )
        caplog.set_level(logging.WARNING, logger="kvbudget.serve")
        async with (
            stack(
                fake,
                recorder=recorder,
                settings=UpstreamSettings(facts),
                reservation_granularity=block_tokens(facts),
                capacity_tokens=1000 * 16,  # as read at the start: (1001 - 1) blocks of 16
            ) as (server, url),
            httpx.AsyncClient() as client,
        ):
            assert (await client.post(url + "/v1/completions", json=BODY)).status_code == 200
            await server.refresh_capacity()  # the same settings: nothing changes
            assert not recorder.closed
            fake.block_size = 32  # restarted with --block-size 32
            await server.refresh_capacity()
            said = [r.getMessage() for r in caplog.records if "settings changed" in r.message]
            assert len(said) == 1, said
            assert "block_size 16 -> 32" in said[0], said
            assert "rounded up to whole KV blocks of 32 tokens (was 16" in said[0], said
            assert server.admission.gateway.config.reservation_granularity == 32
            assert server.admission.gateway.config.capacity_tokens == 1000 * 32
            moved = [r.getMessage() for r in caplog.records if "budget now" in r.message]
            assert moved == [
                "budget now 32,000 tokens (was 16,000): the upstreams' KV, read again from "
                "their /metrics; what now fits is admitted, leases held keep theirs"
            ], moved
            assert [p.name for p in recorder.closed] == ["run-0001"]
            assert (await client.post(url + "/v1/completions", json=BODY)).status_code == 200
        recorder.close(server.admission.now())
        reserved = [
            int(
                pd.read_parquet(tmp_path / f"run-000{n}" / "requests.parquet")[
                    "reserved_tokens"
                ].iloc[0]
            )
            for n in (1, 2)
        ]
        assert reserved == [48, 64]
        servers = [
            json.loads((tmp_path / f"run-000{n}" / META_FILE).read_text())["server"] for n in (1, 2)
        ]
        assert [s["block_size"] for s in servers] == [16, 32]

    asyncio.run(go())


def test_a_mixed_fleet_rounds_to_its_largest_block() -> None:
    """Two upstreams of 16-token blocks; one restarts with 32: reservations are rounded to 32
    (the largest, as at the start: a reservation in 32-token blocks covers the blocks of
    either), and back to 16 when it returns to 16."""
    assert block_tokens([{"block_size": 16}, {"block_size": 32}, {}]) == 32
    assert block_tokens([{}, {"block_size": None}]) == 1

    async def go() -> None:
        late = FakeUpstream()
        async with serving(FakeUpstream().app()) as a, serving(late.app()) as b:
            settings = UpstreamSettings(await upstream_facts(UpstreamOptions((a, b))))
            assert settings.block_tokens == 16
            upstreams = Upstreams(UpstreamOptions((a, b)))
            try:
                late.block_size = 32
                assert await settings.follow(upstreams, await upstreams.snapshots(), None, 0.0)
                assert settings.block_tokens == 32
                late.block_size = 16
                assert await settings.follow(upstreams, await upstreams.snapshots(), None, 0.0)
                assert settings.block_tokens == 16
            finally:
                await upstreams.aclose()

    asyncio.run(go())


def test_an_upstream_not_reached_is_said_with_why(caplog: pytest.LogCaptureFixture) -> None:
    """A capacity read of an upstream that refuses the connection (restarting) logged
    'capacity not read, kept at ... tokens: URL/metrics: ClientConnectorError', the type
    alone; the line now has aiohttp's message, which says it could not connect and where."""

    async def go() -> None:
        closed = socket.socket()  # bound, never listening: a connection to it is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        fake = FakeUpstream()
        caplog.set_level(logging.WARNING, logger="kvbudget.serve")
        try:
            async with stack(fake, capacity_tokens=1600) as (server, _):
                running = server.upstreams
                server.upstreams = Upstreams(UpstreamOptions((f"http://127.0.0.1:{port}",)))
                try:
                    await server.refresh_capacity()
                finally:
                    await server.upstreams.aclose()
                    server.upstreams = running
        finally:
            closed.close()
        said = [r.getMessage() for r in caplog.records if "capacity not read" in r.message]
        assert len(said) == 1, said
        assert (
            f"/metrics: ClientConnectorError: Cannot connect to host 127.0.0.1:{port}" in said[0]
        ), said

    asyncio.run(go())
