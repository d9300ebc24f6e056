"""A reservation ends at the upstream's context: vLLM serves prompt + ``max_tokens`` over its
``max_model_len`` with the output cut there, so the gateway reserves no more KV than that
(:func:`~kvbudget.live.serve_request.context_max_tokens`); what the upstreams tell of
themselves at the start (:func:`~kvbudget.live.serve_run.upstream_facts`) and at each
capacity read after (:class:`~kvbudget.live.serve_settings.UpstreamSettings`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pandas as pd
import pytest

from kvbudget.live.run_dir import META_FILE
from kvbudget.live.serve_records import ServeRecorder
from kvbudget.live.serve_request import context_max_tokens
from kvbudget.live.serve_run import upstream_facts
from kvbudget.live.serve_settings import UpstreamSettings, told
from kvbudget.live.serve_upstream import UpstreamOptions, Upstreams
from tests.unit.live.serve_harness import TIERS, FakeUpstream, serving, stack

pytestmark = pytest.mark.timeout(60)

VLLM_OVER_CONTEXT = ("max_tokens=500 cannot be greater than max_model_len=64. Please request "
                     "fewer output tokens.")  # vLLM 0.32.0's words (renderers/params.py)
SGLANG_OVER_CONTEXT = ("Requested token count exceeds the model's maximum context length of 64 "
                       "tokens.")  # SGLang 0.5.23's


def test_the_output_reserved_ends_at_the_context() -> None:
    # a context of 100: 30 prompt tokens leave 70 (vLLM's get_max_tokens), 500 asked
    assert context_max_tokens(30, 500, 100) == 70
    assert context_max_tokens(30, 50, 100) == 50  # within it: as asked
    assert context_max_tokens(30, 500, None) == 500  # no context told: as asked
    assert context_max_tokens(100, 5, 100) == 5  # the prompt fills it: the upstream refuses
    # a bound of the prompt (--count-tokens bytes) at or over the context may be a prompt under
    # it, which vLLM serves within the context: the bound and one token hold more than that
    assert context_max_tokens(130, 500, 100, exact=False) == 1
    assert context_max_tokens(30, 500, 100, exact=False) == 70  # under it: as counted


def test_a_bytes_bound_over_the_context_is_not_refused_as_too_large() -> None:
    """``--count-tokens bytes`` counts a prompt of 40 characters as at least 40 tokens; with a
    context of 32 and a tier limit of 64, prompt + max_tokens 500 was refused as too large,
    where vLLM serves the real (shorter) prompt cut at its context."""
    async def go() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, capacity_tokens=64, max_model_len=32) as (server, url), \
                httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json={
                "model": "fake", "prompt": "x" * 40, "max_tokens": 500})
            assert r.status_code == 200, r.text
            assert server.admission.gateway.budget.reserved_tokens == 0  # settled
    asyncio.run(go())


def test_a_request_over_the_context_is_reserved_up_to_it() -> None:
    """A budget of 100 tokens, a context of 64: ``max_tokens`` 500 would never fit the
    budget; reserved up to the context it is admitted, and forwarded as the client sent it."""
    async def go() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, capacity_tokens=100, max_model_len=64) as (server, url), \
                httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json={
                "model": "fake", "prompt": "hello", "max_tokens": 500})
            assert r.status_code == 200, r.text
            assert fake.received[-1]["max_tokens"] == 500
            assert server.admission.gateway.budget.reserved_tokens == 0  # settled
        async with stack(FakeUpstream(), capacity_tokens=100) as (_, url), \
                httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json={
                "model": "fake", "prompt": "hello", "max_tokens": 500},
                headers={"x-kvbudget-tier": "batch"})
            # without the context told, prompt + max_tokens never fits the budget
            assert r.status_code == 400 and "the limit is 100 tokens" in r.text
    asyncio.run(go())


@pytest.mark.parametrize("refused", [None, (400, VLLM_OVER_CONTEXT), (400, SGLANG_OVER_CONTEXT)])
def test_a_row_records_the_max_tokens_the_request_declared_where_refused_for_it(
        refused: tuple[int, str] | None, tmp_path: Path) -> None:
    """Reserved up to a context of 64, requests of ``max_tokens`` 500, 50 and 8. Served (cut at
    the context), their rows keep the reservation's figure, as the simulated gateway weighs
    and the simulated vLLM serves it; refused by the upstream for its context (vLLM 0.32.0's
    ``max_tokens`` over it, SGLang's prompt + ``max_tokens`` over it), they keep what they
    declared, which the simulated engine refuses as the upstream did. Before, a refused row
    said the reservation's: validate --records simulated it served, load the real server
    never had (the live CPU vLLM: 5000 recorded as 864, served in the simulation)."""
    async def go() -> None:
        fake = FakeUpstream(refuse=refused)
        fake.release.set()
        recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                                 rotate_requests=100, meta={})
        async with stack(fake, capacity_tokens=100, max_model_len=64, recorder=recorder) as (
                _, url), httpx.AsyncClient() as client:
            for max_tokens in (500, 50, 8):
                r = await client.post(url + "/v1/completions", json={
                    "model": "fake", "prompt": "hello", "max_tokens": max_tokens})
                assert r.status_code == (200 if refused is None else 400), r.text
    asyncio.run(go())
    rows = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
    bound = int(rows["prompt_tokens"].iloc[0])  # the bytes bound of "hello"
    reserved = [min(bound + m, 64) for m in (500, 50, 8)]
    assert rows["reserved_tokens"].tolist() == reserved
    declared = rows["max_output_tokens"].tolist()
    assert declared == ([r - bound for r in reserved] if refused is None else [500, 50, 8])


def test_the_upstreams_say_their_context_and_cache() -> None:
    async def go() -> None:
        async with serving(FakeUpstream(max_model_len=4096).app()) as a, \
                serving(FakeUpstream().app()) as b:
            told = await upstream_facts(UpstreamOptions((a, b, "http://127.0.0.1:9")))
        assert told[0]["max_model_len"] == 4096 and told[0]["model"] == "fake"
        assert told[0]["num_gpu_blocks"] == 1001
        assert "max_model_len" not in told[1]
        assert told[2] == {}  # nothing listens there: it says nothing, and serve starts
    asyncio.run(go())


@pytest.mark.parametrize("change", ["max_model_len", "num_gpu_blocks"])
def test_an_upstream_restarted_with_other_settings_is_followed(
        change: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Serve started against a context of 1024; the upstream restarted with 2048 (or with
    other KV blocks). The context was read only at the start: a prompt of 100 with
    ``max_tokens`` 1500 stayed reserved 1024 where it could use 1600 (an under-reservation),
    and every later run directory said the old server. The capacity read now reads the
    settings again: the next request is reserved up to the new context, and a new run
    directory records the new settings."""
    async def go() -> None:
        async with serving(FakeUpstream(max_model_len=1024).app()) as before:
            facts = await upstream_facts(UpstreamOptions((before,)))
        fake = FakeUpstream(max_model_len=1024)
        fake.release.set()
        recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                                 rotate_requests=100, meta=told(facts))
        prompt = " ".join(["word"] * 99)  # the fake counts 99 words and a BOS: 100 tokens
        async with stack(fake, recorder=recorder, settings=UpstreamSettings(facts),
                         max_model_len=1024, count_tokens="upstream") as (server, url), \
                httpx.AsyncClient() as client:
            body = {"model": "fake", "prompt": prompt, "max_tokens": 1500}
            assert (await client.post(url + "/v1/completions", json=body)).status_code == 200
            await server.refresh_capacity()  # the same settings: nothing changes
            assert not recorder.closed and server.config.max_model_len == 1024
            if change == "max_model_len":
                fake.max_model_len = 2048
            else:
                fake.num_gpu_blocks = 501
            await server.refresh_capacity()
            assert [p.name for p in recorder.closed] == ["run-0001"]
            said = [r.getMessage() for r in caplog.records if "settings changed" in r.message]
            assert len(said) == 1 and f"{change} " in said[0], said
            assert (await client.post(url + "/v1/completions", json=body)).status_code == 200
        first, second = (tmp_path / f"run-000{n}" for n in (1, 2))
        reserved = [int(pd.read_parquet(p / "requests.parquet")["reserved_tokens"].iloc[0])
                    for p in (first, second)]
        servers = [json.loads((p / META_FILE).read_text())["server"] for p in (first, second)]
        assert servers[0]["max_model_len"] == 1024 and servers[0]["num_gpu_blocks"] == 1001
        if change == "max_model_len":
            assert reserved == [1024, 1600]
            assert servers[1]["max_model_len"] == 2048 and servers[1]["num_gpu_blocks"] == 1001
        else:
            assert reserved == [1024, 1024]
            assert servers[1]["max_model_len"] == 1024 and servers[1]["num_gpu_blocks"] == 501
    asyncio.run(go())


def test_an_upstream_that_said_nothing_at_the_start_is_read_when_it_answers() -> None:
    """Two upstreams, one of which said nothing at the start (down then): no context cap, as
    at the start. Once it answers, its settings are read and the cap is the larger context;
    a model list it cannot give keeps the last read (no change, nothing logged)."""
    async def go() -> None:
        late = FakeUpstream(max_model_len=2048)
        async with serving(FakeUpstream(max_model_len=1024).app()) as a, \
                serving(late.app()) as b:
            facts = await upstream_facts(UpstreamOptions((a,)))
            settings = UpstreamSettings([*facts, {}])
            assert settings.context is None
            upstreams = Upstreams(UpstreamOptions((a, b)))
            try:
                snaps = await upstreams.snapshots()
                assert await settings.follow(upstreams, snaps, None, 0.0)
                assert settings.context == 2048 and settings.facts[1]["num_gpu_blocks"] == 1001
                late.max_model_len = 4096
                dead = Upstreams(UpstreamOptions((a, "http://127.0.0.1:9")))
                try:  # the second's /v1/models cannot be read: its last read stands
                    assert not await settings.follow(dead, snaps, None, 0.0)
                finally:
                    await dead.aclose()
                assert settings.context == 2048
            finally:
                await upstreams.aclose()
    asyncio.run(go())
