"""``kvbudget serve``'s gateway against a fake upstream on loopback (see serve_harness): every
server is stopped by the test, every wait is an event with a bound, and after each test no lease,
ticket or request is left (``stack`` checks it)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from starlette.requests import Request

from kvbudget.live.gateway_server import REQUEST_ID_HEADER
from kvbudget.live.serve_ready import Reachability
from kvbudget.live.serve_records import Outcome, ServeRecorder, request_row
from kvbudget.live.serve_reload import Reloaded
from kvbudget.live.serve_request import KeyTable, key_digest, prompt_token_bound
from kvbudget.live.serve_upstream import EngineCounter
from kvbudget.live.server_metrics import EngineSnapshot
from kvbudget.policies import TierConfig, make_policy
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.results.recorded_refusals import engine_rules_said
from kvbudget.results.run_result import read_run
from tests.unit.live.serve_harness import (
    TIERS,
    WAIT_BOUND_S,
    FakeUpstream,
    assert_nothing_held,
    make_server,
    serving,
    stack,
    until,
)

pytestmark = pytest.mark.timeout(60)


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def _body(max_tokens: Any = 8, stream: bool = False, **extra: Any) -> dict[str, Any]:
    return {"model": "fake", "prompt": "hello", "max_tokens": max_tokens, "stream": stream,
            **extra}


async def _sse(client: httpx.AsyncClient, url: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, list[str]]:
    async with client.stream("POST", url + "/v1/completions", json=body,
                             headers=headers or {}) as resp:
        return resp.status_code, [line async for line in resp.aiter_lines() if line]


def test_forwards_unary_chat_and_stream_and_hides_the_usage_chunk() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake) as (_server, url), httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"authorization": "Bearer client-key"})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
            assert "x-upstream-secret" not in r.headers
            sent = fake.received[-1]["_headers"]
            assert sent["authorization"] == "Bearer sk-upstream"  # never the client's key
            chat = await client.post(url + "/v1/chat/completions", json={
                "model": "fake", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4})
            assert chat.status_code == 200 and "message" in chat.json()["choices"][0]
            status, lines = await _sse(client, url, _body(stream=True))
            assert status == 200 and lines[-1] == "data: [DONE]"
            assert not any('"usage"' in line for line in lines)  # the client did not ask
            assert sum('"text": "x"' in line for line in lines) == 3
            assert fake.received[-1]["stream_options"] == {"include_usage": True}
            status, lines = await _sse(client, url, _body(
                stream=True, stream_options={"include_usage": True}))
            assert any('"completion_tokens": 3' in line for line in lines)
            models = await client.get(url + "/v1/models")
            assert models.json()["data"][0]["id"] == "fake"
            assert "x-upstream-secret" not in models.headers
            for path in ("/v1/embeddings", "/tokenize", "/v1/../metrics2", "/admin"):
                assert (await client.post(url + path, json={})).status_code in (404, 405)
            metrics = (await client.get(url + "/metrics")).text
            assert 'kvbudget_admitted_total{tier="interactive"} 4' in metrics
            # the two streams' first tokens; a whole answer's TTFT is not seen (below)
            assert 'kvbudget_ttft_seconds_count{tier="interactive"} 2' in metrics
            assert 'kvbudget_e2e_seconds_count{tier="interactive"} 4' in metrics
            assert "kvbudget_leases 0" in metrics
            assert (await client.get(url + "/health")).status_code == 200
            assert (await client.get(url + "/ready")).status_code == 200
        assert len(fake.received) == 4  # nothing else reached the upstream
    run(main())


def test_bad_input_is_a_clean_error_and_leaks_nothing() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, max_body_bytes=1000) as (_server, url), \
                httpx.AsyncClient() as client:
            post = client.post
            bad = await post(url + "/v1/completions", content=b"{not json",
                             headers={"content-type": "application/json"})
            assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
            assert bad.json()["error"]["type"] == "invalid_request_error"
            big = await post(url + "/v1/completions", json=_body(prompt="x" * 2000))
            assert big.status_code == 413
            for value in (-1, 0, 10**7 + 1, 2**40 + 1, "8", True, 1.5):
                r = await post(url + "/v1/completions", json=_body(max_tokens=value))
                assert r.status_code == 400, value
                assert "4096" in r.json()["error"]["message"]
                assert r.json()["error"]["param"] == "max_tokens"
            # the prompt's bound + max_tokens over the tier's limit, or max_tokens alone over
            # it (refused by the admission, as too large): the limit is named
            for value in (4090, 10**7):
                r = await post(url + "/v1/completions", json=_body(max_tokens=value))
                assert r.status_code == 400
                assert r.json()["error"]["code"] == "context_length_exceeded"
                assert "the limit is 4096 tokens" in r.json()["error"]["message"]
            for body in ([1, 2], {"model": "fake", "prompt": ""}, _body(n=2),
                         {"model": "fake", "messages": []}):
                path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
                assert (await post(url + path, json=body)).status_code == 400
            r = await post(url + "/v1/completions", json=_body(),
                           headers={"x-kvbudget-tier": "nobody"})
            assert r.status_code == 401
            assert not fake.received  # none of these reached the upstream
            ok = await post(url + "/v1/completions", json=_body())
            assert ok.status_code == 200  # still serving the others
    run(main())


def test_a_slow_client_gets_408_and_the_others_are_served() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, body_timeout_s=0.2) as (_server, url):
            host, port = url.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n"
                         b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{")
            await writer.drain()  # ... and never the rest of its body
            async with httpx.AsyncClient() as client:
                ok = await client.post(url + "/v1/completions", json=_body())
                assert ok.status_code == 200
            async with asyncio.timeout(20):
                status_line = await reader.readline()
            assert b" 408 " in status_line
            writer.close()
            assert not fake.received[1:]
    run(main())


def test_api_keys_pick_the_tier_and_unknown_keys_are_refused() -> None:
    tiers = {t.name: t for t in TIERS}
    table = KeyTable.parse(f"{key_digest('sk-batch')} batch  # a comment\n\n", "keys.txt", tiers)
    assert table.tier_of("sk-batch") == "batch" and table.tier_of("sk-other") is None
    with pytest.raises(ValueError, match=r"keys\.txt: line 1: unknown tier 'gold'"):
        KeyTable.parse(f"{key_digest('k')} gold", "keys.txt", tiers)
    with pytest.raises(ValueError, match=r"line 2: the key digest must be 64 hex"):
        KeyTable.parse(f"{key_digest('k')} batch\nsk-plain batch", "keys.txt", tiers)

    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, keys=table) as (_server, url), httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"authorization": "Bearer sk-batch"})
            assert r.status_code == 200
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"authorization": "Bearer sk-wrong"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            metrics = (await client.get(url + "/metrics")).text
            assert 'kvbudget_admitted_total{tier="batch"} 1' in metrics
            assert len(fake.received) == 1
    run(main())


def test_prompt_bound_counts_bytes_and_messages() -> None:
    assert prompt_token_bound(False, {"prompt": "héllo"}) == 6 + 16
    assert prompt_token_bound(False, {"prompt": [1, 2, 3]}) == 3 + 16
    chat = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "user", "content": [{"type": "text", "text": "abc"}]}]}
    assert prompt_token_bound(True, chat) == 16 + (2 + 16) + (3 + 16)


def test_the_upstream_tokenizer_counts_the_prompt() -> None:
    seen: list[int] = []
    tools: list[dict[str, Any]] = []

    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake, count_tokens="upstream") as (server, url), \
                httpx.AsyncClient() as client:
            def check(request: Request, body: dict[str, Any]) -> None:
                entry = server.admission.gateway.admitted[int(request.headers[REQUEST_ID_HEADER])]
                seen.append(entry.request.prompt_tokens)

            fake.on_request = check
            r = await client.post(url + "/v1/completions",
                                  json=_body(prompt="one two three four"))
            assert r.status_code == 200
            # token ids are counted as they are, without asking (vLLM's /tokenize takes text
            # only: it answers 400 to ids, which made the gateway answer 502)
            ids = await client.post(url + "/v1/completions", json=_body(prompt=[7, 8, 9]))
            assert ids.status_code == 200
            # a chat's tools are rendered into its prompt: counted with it (they were left
            # out of /tokenize, and the lease under-reserved by them)
            tools[:] = [{"type": "function", "function": {
                "name": "lookup", "description": "find a thing by its name in the catalogue",
                "parameters": {"type": "object", "properties": {"name": {"type": "string"}}}}}]
            chat = await client.post(url + "/v1/chat/completions", json={
                "model": "fake", "max_tokens": 4, "tools": tools,
                "messages": [{"role": "user", "content": "one two three four"}]})
            assert chat.status_code == 200
        assert fake.num_tokenized == 2
    run(main())
    with_tools = 4 + len(json.dumps(tools).split()) + 1
    assert seen == [5, 3, with_tools]  # the fake's count (4 words + 1), not the byte bound


NO_TEMPLATE = ("As of transformers v4.44, default chat template is no longer allowed, so you "
               "must provide a chat template if the tokenizer does not define one.")


@pytest.mark.parametrize("status", [400, 404])
def test_an_upstream_refusing_to_count_the_prompt_is_the_clients_answer(status: int) -> None:
    """The upstream's ``/tokenize`` refusing a request (vLLM answers 400 to a chat for a model
    without a chat template, 404 for a model it does not serve) is the client's answer, as the
    upstream gave it: the SDK raises BadRequestError (NotFoundError) with vLLM's message and
    does not retry it. Before, it was 502 'the upstream could not count', which the SDK took
    for a server error (InternalServerError) and sent twice more; nothing reached the
    completions endpoint either way."""
    openai = pytest.importorskip("openai")

    async def main() -> None:
        fake = FakeUpstream(refuse_tokenize=(status, NO_TEMPLATE))
        fake.release.set()
        async with stack(fake, count_tokens="upstream") as (server, url):
            sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-unused", max_retries=2)
            with pytest.raises(openai.APIStatusError) as caught:
                await sdk.chat.completions.create(
                    model="fake", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            await sdk.close()
            assert type(caught.value) is {400: openai.BadRequestError,
                                          404: openai.NotFoundError}[status]
            assert caught.value.status_code == status
            assert caught.value.body["message"] == NO_TEMPLATE  # type: ignore[index]
            assert fake.num_tokenized == 1 and not fake.received  # asked once, sent nowhere
            assert server.metrics.num_refused[("interactive", "bad_request")] == 1
    run(main())


def test_overload_429_with_retry_after_and_interactive_waits_its_turn() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        # room for one request: the bound of "hello" (5 + 16) + 8 = 29 tokens
        async with stack(fake, capacity_tokens=40, retry_after_s=3.0,
                         params={"batch_on_overload": "reject"}) as (server, url), \
                httpx.AsyncClient() as client:
            gw = server.admission.gateway
            first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            batch = await client.post(url + "/v1/completions", json=_body(),
                                      headers={"x-kvbudget-tier": "batch"})
            assert batch.status_code == 429 and batch.headers["retry-after"] == "3"
            assert batch.json()["error"]["code"] == "no_capacity"
            # an interactive request with a zero deadline: the overload answer at once
            late = await client.post(url + "/v1/completions", json=_body(),
                                     headers={"x-kvbudget-deadline-s": "0"})
            assert late.status_code == 429 and late.json()["error"]["code"] == "deadline"
            # an interactive one waits in its queue, and is admitted when the first ends
            third = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: gw.num_waiting("interactive") == 1,
                        lambda: server.admission.changed)
            assert len(fake.received) == 1
            fake.release.set()
            assert (await first).status_code == 200
            assert (await third).status_code == 200
            assert len(fake.received) == 2
    run(main())


def test_overload_status_503_when_configured() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=40, overload_status=503,
                         params={"batch_on_overload": "reject"}) as (_server, url), \
                httpx.AsyncClient() as client:
            first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"x-kvbudget-tier": "batch"})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            fake.release.set()
            assert (await first).status_code == 200
    run(main())


@pytest.mark.parametrize("hold", ["headers", "first_chunk"])
def test_a_disconnected_client_releases_its_lease_at_once(hold: str) -> None:
    async def main() -> None:
        fake = FakeUpstream(hold=hold)
        async with stack(fake) as (server, url):
            gw = server.admission.gateway
            async with httpx.AsyncClient() as client:
                task = asyncio.create_task(_sse(client, url, _body(stream=True)))
                await until(lambda: fake.held == 1, lambda: fake.changed)
                assert gw.budget.num_leases == 1
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            # released while the upstream still holds the request: the client's leaving freed it
            await until(lambda: gw.budget.num_leases == 0, lambda: server.admission.changed)
            assert not fake.release.is_set()
            await until(lambda: fake.aborted == 1, lambda: fake.changed)  # the upstream aborted
    run(main())


def _recorder(tmp_path: Path) -> ServeRecorder:
    return ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                         rotate_requests=100, meta={})


async def _stream_until(url: str, stop: Callable[[str], bool]) -> None:
    """A streamed completion read line by line until ``stop`` says a line is the last read;
    then the client closes its connection."""
    async with httpx.AsyncClient() as client, \
            client.stream("POST", url + "/v1/completions", json=_body(stream=True)) as resp:
        async for line in resp.aiter_lines():
            if stop(line):
                break


def test_a_stream_cut_short_records_the_tokens_it_passed_on(tmp_path: Path) -> None:
    """A client that leaves after its first token: its row counts the output passed on (one
    token a chunk, as the replay counts a cut stream), the work the upstream did. It recorded
    0, and a recording drops a failed request without output from the load it simulates."""
    async def main() -> None:
        fake = FakeUpstream(hold="first_chunk")
        async with stack(fake, recorder=_recorder(tmp_path)) as (server, url):
            # the first token read: the client goes
            await _stream_until(url, lambda line: line.startswith("data: {"))
            await until(lambda: server.admission.gateway.budget.num_leases == 0,
                        lambda: server.admission.changed)
        row = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet").iloc[0]
        assert (row["status"], row["output_tokens"]) == ("client_timeout", 1)
        assert row["ttft_s"] >= 0
    run(main())


def test_a_client_that_leaves_after_done_is_recorded_completed(tmp_path: Path) -> None:
    """The openai SDK stops reading at ``[DONE]`` and closes its connection; the upstream's
    stream may end a moment later. The gateway settles the request when it reads ``[DONE]``
    (its usage already read), before passing it on: it used to record such a request as
    ``client_timeout`` when the client's leaving came first (seen under load)."""
    async def main() -> None:
        fake = FakeUpstream(hold="after_done")
        async with stack(fake, recorder=_recorder(tmp_path)) as (server, url):
            await _stream_until(url, lambda line: line == "data: [DONE]")  # and close, as the SDK does
            await until(lambda: fake.held == 1, lambda: fake.changed)  # the upstream is open
            await until(lambda: server.admission.gateway.budget.num_leases == 0,
                        lambda: server.admission.changed)
            fake.release.set()
        records = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        assert records["status"].tolist() == ["completed"]
        assert records["output_tokens"].tolist() == [fake.num_tokens]
    run(main())


def test_a_client_leaving_the_queue_frees_its_place() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=40) as (server, url):
            gw = server.admission.gateway
            async with httpx.AsyncClient() as client:
                first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
                await until(lambda: fake.held == 1, lambda: fake.changed)
                queued = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
                await until(lambda: gw.num_waiting() == 1, lambda: server.admission.changed)
                queued.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await queued
                await until(lambda: gw.num_waiting() == 0, lambda: server.admission.changed)
                fake.release.set()
                assert (await first).status_code == 200
            assert len(fake.received) == 1
    run(main())


@pytest.mark.parametrize("usage", [-5, 10**9, "3", None])
def test_bad_usage_is_a_protocol_error_settled_at_the_reservation(usage: Any,
                                                                   tmp_path: Path) -> None:
    async def main() -> None:
        fake = FakeUpstream(usage_tokens=usage if usage is not None else "missing")
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            status, _ = await _sse(client, url, _body(stream=True))
            assert status == 200
            metrics = (await client.get(url + "/metrics")).text
            assert 'reason="protocol_error"} 1' in metrics
        records = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        row = records.iloc[0]
        assert row["reason"] == "backend_error" and "usage" in row["error"]
    run(main())


def test_a_revoked_batch_stream_ends_with_a_preempted_event() -> None:
    async def main() -> None:
        fake = FakeUpstream(hold="first_chunk")
        async with stack(fake, policy="preemptive", capacity_tokens=60) as (_server, url), \
                httpx.AsyncClient() as client:
            batch = asyncio.create_task(_sse(client, url, _body(max_tokens=30, stream=True),
                                             {"x-kvbudget-tier": "batch"}))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            inter = asyncio.create_task(client.post(url + "/v1/completions",
                                                    json=_body(max_tokens=30)))
            status, lines = await batch
            assert status == 200 and lines[0].startswith("data: {")  # its first token came
            error = json.loads(lines[-1][5:])["error"]
            assert error["code"] == "preempted" and error["type"] == "overloaded_error"
            await until(lambda: fake.aborted == 1, lambda: fake.changed)  # closed upstream
            fake.release.set()
            assert (await inter).status_code == 200
    run(main())


def test_a_revoked_unary_batch_request_gets_503_with_retry_after() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, policy="preemptive", capacity_tokens=60) as (_server, url), \
                httpx.AsyncClient() as client:
            batch = asyncio.create_task(client.post(url + "/v1/completions",
                                                    json=_body(max_tokens=30),
                                                    headers={"x-kvbudget-tier": "batch"}))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            inter = asyncio.create_task(client.post(url + "/v1/completions",
                                                    json=_body(max_tokens=30)))
            r = await batch
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "preempted"
            fake.release.set()
            assert (await inter).status_code == 200
    run(main())


def test_run_directories_rotate_and_read_back(tmp_path: Path) -> None:
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                                 rotate_requests=2, meta={"upstreams": ["fake"]})
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            for stream in (False, True, True):
                assert (await client.post(url + "/v1/completions",
                                          json=_body(stream=stream))).status_code == 200
            r = await client.post(url + "/v1/completions", json=_body(max_tokens=4090))
            assert r.status_code == 400
        assert [p.name for p in recorder.closed] == ["run-0001", "run-0002"]
        first, second = (read_run(p) for p in recorder.closed)
        assert list(first.records["status"]) == ["completed", "completed"]
        assert list(first.records["output_tokens"]) == [3, 3]
        assert list(second.records["status"]) == ["completed", "rejected_too_large"]
        assert first.summary["executor"] == "serve"
    run(main())


def test_a_whole_answer_has_no_first_token_time(tmp_path: Path) -> None:
    """A non-streamed answer comes whole: the gateway sees its end, not its first token. Its
    record has no TTFT nor TPOT (it had TTFT = E2E and a TPOT of ~0, which went into the
    summary's percentiles, /metrics' TTFT histogram and ``calibrate --records``' fit), and its
    E2E; a stream's has all three."""
    async def main() -> None:
        fake = FakeUpstream(num_tokens=5)
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            for stream in (False, True):
                r = await client.post(url + "/v1/completions", json=_body(stream=stream))
                assert r.status_code == 200
            metrics = (await client.get(url + "/metrics")).text
            assert 'kvbudget_ttft_seconds_count{tier="interactive"} 1' in metrics
            assert 'kvbudget_e2e_seconds_count{tier="interactive"} 2' in metrics
        run_ = read_run(recorder.closed[0])
        whole, streamed = (run_.records.iloc[i] for i in range(2))
        assert whole["status"] == streamed["status"] == "completed"
        assert whole["output_tokens"] == streamed["output_tokens"] == 5
        assert pd.isna(whole["first_token_s"]) and pd.isna(whole["ttft_s"])
        assert pd.isna(whole["tpot_s"]) and whole["e2e_s"] > 0
        assert streamed["ttft_s"] > 0 and streamed["tpot_s"] >= 0
        assert streamed["e2e_s"] >= streamed["ttft_s"]
        assert run_.summary["overall"]["ttft_s"]["p50"] == pytest.approx(streamed["ttft_s"])
    run(main())


def test_capacity_read_from_the_upstream_metrics_and_policy_reload() -> None:
    policies = [make_policy("overcommit", {"overcommit_ratio": 0.5})]

    def reload() -> Any:
        if not policies:
            raise ValueError("scenario.toml: policy_params.overcommit_ratio must be in (0, 1]")
        return policies.pop()

    async def main() -> None:
        fake = FakeUpstream(num_gpu_blocks=101)
        async with stack(fake, reload=reload) as (server, _url):
            await server.refresh_capacity()
            assert server.admission.gateway.config.capacity_tokens == 100 * 16
            fake.num_gpu_blocks = 51
            await server.refresh_capacity()
            assert server.admission.gateway.config.capacity_tokens == 50 * 16
            assert server.reload() and server.admission.gateway.policy.name == "overcommit"
            assert not server.reload()  # a bad file: the running policy stays
            assert server.admission.gateway.policy.name == "overcommit"
    run(main())


def test_a_reloaded_policy_starts_a_run_directory_that_records_it(tmp_path: Path) -> None:
    """A SIGHUP (or a changed scenario file) that swapped the policy left the open run
    directory open: its rows before and after the reload were one directory whose
    ``replay.json`` and summary named the policy of the start, so ``validate --records``
    simulated the requests refused under the new policy with the old one, and the report
    credited the old policy with them. The reload now closes it (its requests ran under the
    policy it names) and the next directory records the new policy."""
    before = make_policy("conservative", {})
    after = make_policy("overcommit", {"overcommit_ratio": 0.5})

    async def main() -> None:
        fake = FakeUpstream(num_tokens=3)
        fake.release.set()
        recorder = ServeRecorder(tmp_path, tiers=TIERS, policy=before.describe(),
                                 rotate_requests=100,
                                 meta={"executor": "serve", "policy": before.describe()})
        async with stack(fake, recorder=recorder, reload=lambda: after) as (server, url), \
                httpx.AsyncClient() as client:
            assert (await client.post(url + "/v1/completions", json=_body())).status_code == 200
            await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
            assert server.reload()
            assert [p.name for p in recorder.closed] == ["run-0001"]
            assert server.reload() and len(recorder.closed) == 1  # the same policy: kept open
            assert (await client.post(url + "/v1/completions", json=_body())).status_code == 200
            await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
        recorder.close(server.admission.now())
        first, second = (read_run(p) for p in recorder.closed)
        assert first.summary["policy"] == "conservative" and len(first.records) == 1
        assert second.summary["policy"] == "overcommit" and len(second.records) == 1
        said = json.loads((recorder.closed[1] / "replay.json").read_text())
        assert said["policy"] == after.describe()
    run(main())


def test_the_openai_sdk_retries_a_429_and_gets_through() -> None:
    openai = pytest.importorskip("openai")

    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=40, retry_after_s=1.0,
                         params={"batch_on_overload": "reject"}) as (server, url), \
                httpx.AsyncClient() as client:
            first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-unused", max_retries=2,
                                     default_headers={"x-kvbudget-tier": "batch"})
            answer = asyncio.create_task(sdk.completions.create(model="fake", prompt="hello",
                                                                max_tokens=8))
            refused = server.metrics.num_refused
            await until(lambda: refused[("batch", "no_capacity")] == 1,
                        lambda: server.admission.changed)
            fake.release.set()  # the first ends; the SDK's retry (after Retry-After) fits
            assert (await first).status_code == 200
            result = await answer
            assert result.usage is not None and result.usage.completion_tokens == 3
            assert refused[("batch", "no_capacity")] == 1 and len(fake.received) == 2
            await sdk.close()
    run(main())


@pytest.mark.parametrize("router", ["round_robin", "least_tokens"])
def test_two_upstreams_share_the_requests(router: str) -> None:
    async def main() -> None:
        other = FakeUpstream()
        other.release.set()
        async with serving(other.app()) as second:
            fake = FakeUpstream()
            fake.release.set()
            async with stack(fake, router=router, upstreams_extra=(second,)) as (_server, url), \
                    httpx.AsyncClient() as client:
                if router == "least_tokens":  # the first upstream holds a large request
                    fake.release.clear()
                    big = asyncio.create_task(client.post(url + "/v1/completions",
                                                          json=_body(max_tokens=900)))
                    await until(lambda: fake.held == 1, lambda: fake.changed)
                    for _ in range(3):
                        r = await client.post(url + "/v1/completions", json=_body())
                        assert r.status_code == 200
                    assert (len(fake.received), len(other.received)) == (1, 3)
                    fake.release.set()
                    assert (await big).status_code == 200
                else:
                    for _ in range(4):
                        r = await client.post(url + "/v1/completions", json=_body())
                        assert r.status_code == 200
                    assert (len(fake.received), len(other.received)) == (2, 2)
    run(main())


def test_an_interactive_request_waits_up_to_its_queue_timeout_then_gets_the_overload() -> None:
    tiers = (TierConfig("interactive", max_sequence_tokens=4096, queue_timeout_s=0.2),)

    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=40, tiers=tiers) as (server, url), \
                httpx.AsyncClient() as client:
            first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            waited = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: server.admission.gateway.num_waiting() == 1,
                        lambda: server.admission.changed)
            late = await waited  # its tier's queue_timeout_s passes while the first is held
            assert late.status_code == 429 and late.json()["error"]["code"] == "deadline"
            assert late.headers["retry-after"] == "1"
            fake.release.set()
            assert (await first).status_code == 200
            assert len(fake.received) == 1
    run(main())


DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens there


def test_an_unreachable_upstream_is_a_502_and_frees_its_lease(tmp_path: Path) -> None:
    async def main() -> None:
        server = make_server(DEAD, recorder=_recorder(tmp_path))
        server.reach.period_s = 1e6  # the probe at start only
        async with serving(server.app) as url, httpx.AsyncClient() as client:
            answers = [await client.post(url + "/v1/completions", json=_body(stream=s))
                       for s in (False, True)]
            assert [r.status_code for r in answers] == [502, 502]  # all down: tried, 502
            assert answers[0].json()["error"]["type"] == "upstream_error"
            await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
        assert_nothing_held(server)
        rows = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        assert list(rows["reason"]) == ["backend_error", "backend_error"]
        assert list(rows["error"]) == ["ClientConnectorError"] * 2
    run(main())


@pytest.mark.parametrize("router", ["round_robin", "least_tokens", "prefix_affinity"])
@pytest.mark.parametrize("stream", [False, True])
def test_completions_are_routed_around_a_down_upstream(router: str, stream: bool) -> None:
    """Of two upstreams, one refuses connections: once readiness has it down (its probe, or
    a completion refused), no completion is sent there while the other is up (before: every
    router kept sending it its share, each a 502)."""
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with serving(fake.app()) as up:
            server = make_server(DEAD, router=router, upstreams_extra=(up,))  # the dead first
            async with serving(server.app) as url, httpx.AsyncClient() as client:
                await until(lambda: 0 in server.reach.down, lambda: server.reach.changed)
                answers = [await client.post(url + "/v1/completions",
                                             json=_body(stream=stream)) for _ in range(4)]
                assert [r.status_code for r in answers] == [200] * 4
                assert len(fake.received) == 4
                await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
        assert_nothing_held(server)
    run(main())


def test_over_two_upstreams_a_request_must_fit_the_smaller_one() -> None:
    async def main() -> None:
        other = FakeUpstream(num_gpu_blocks=4 + 1)  # 64 tokens
        async with serving(other.app()) as second:
            fake = FakeUpstream(num_gpu_blocks=20 + 1)  # 320 tokens
            fake.release.set()
            async with stack(fake, upstreams_extra=(second,)) as (server, url), \
                    httpx.AsyncClient() as client:
                await server.refresh_capacity()
                config = server.admission.gateway.config
                assert (config.capacity_tokens, config.max_request_tokens) == (384, 64)
                r = await client.post(url + "/v1/completions", json=_body(max_tokens=60))
                assert r.status_code == 400  # 21 + 60 tokens fit the fleet, not one replica
                assert "the limit is 64 tokens" in r.json()["error"]["message"]
                assert not fake.received and not other.received
    run(main())


def test_prefix_affinity_sends_a_shared_prefix_back_to_its_upstream() -> None:
    a, b = "system prompt A " * 8 + "question 1", "system prompt B " * 8 + "question 2"

    async def main() -> None:
        other = FakeUpstream()
        other.release.set()
        async with serving(other.app()) as second:
            fake = FakeUpstream()
            async with stack(fake, router="prefix_affinity", upstreams_extra=(second,)) as (
                    _server, url), httpx.AsyncClient() as client:
                first = asyncio.create_task(client.post(url + "/v1/completions",
                                                        json=_body(prompt=a)))
                await until(lambda: fake.held == 1, lambda: fake.changed)  # upstream 0 busy
                r = await client.post(url + "/v1/completions", json=_body(prompt=b))
                assert r.status_code == 200  # a new prefix: the upstream with fewer tokens
                again = asyncio.create_task(client.post(url + "/v1/completions",
                                                        json=_body(prompt=a[:-1] + "9")))
                await until(lambda: fake.held == 2, lambda: fake.changed)  # back to its own
                fake.release.set()
                assert (await first).status_code == 200 and (await again).status_code == 200
        assert [body["prompt"][:16] for body in fake.received] == [a[:16]] * 2
        assert [body["prompt"][:16] for body in other.received] == [b[:16]]
    run(main())


async def _one_held_one_waiting(
    server: Any, url: str, client: httpx.AsyncClient, fake: FakeUpstream,
) -> tuple[asyncio.Task[httpx.Response], asyncio.Task[httpx.Response]]:
    """Two requests on a budget with room for one: the first held by the upstream, the second
    waiting at the gateway (both still in flight)."""
    gw = server.admission.gateway
    first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
    await until(lambda: fake.held == 1, lambda: fake.changed)
    queued = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
    await until(lambda: gw.num_waiting() == 1, lambda: server.admission.changed)
    return first, queued


def test_drain_refuses_the_waiting_at_once_and_lets_those_in_flight_finish() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        # room for one request; the interactive tier waits without a deadline of its own
        async with stack(fake, capacity_tokens=40) as (server, url), \
                httpx.AsyncClient() as client:
            gw = server.admission.gateway
            first, queued = await _one_held_one_waiting(server, url, client, fake)
            server.drain(deadline_s=10 * WAIT_BOUND_S)  # a deadline this test never reaches
            refused = await queued  # answered at once, not at a deadline (it has none)
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "no_capacity"
            assert gw.num_waiting() == 0
            late = await client.post(url + "/v1/completions", json=_body())
            assert late.status_code == 503 and late.json()["error"]["code"] == "draining"
            assert (await client.get(url + "/ready")).status_code == 503
            fake.release.set()
            assert (await first).status_code == 200  # in flight: it finishes
            assert len(fake.received) == 1
            assert server.metrics.num_refused[("interactive", "no_capacity")] == 1
    run(main())


@pytest.mark.parametrize("stream", [True, False])
def test_drain_aborts_what_outlasts_its_deadline_and_releases_the_leases(
        stream: bool, tmp_path: Path) -> None:
    async def main() -> None:
        fake = FakeUpstream(hold="first_chunk" if stream else "headers")
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (server, url), \
                httpx.AsyncClient() as client:
            gw = server.admission.gateway
            if stream:
                task: asyncio.Task[Any] = asyncio.create_task(
                    _sse(client, url, _body(stream=True)))
            else:
                task = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            assert gw.budget.num_leases == 1
            server.drain(deadline_s=0.0)  # the deadline passes with the request still held
            if stream:
                status, lines = await task
                assert status == 200 and lines[0].startswith("data: {")
                error = json.loads(lines[-1][5:])["error"]
            else:
                answer = await task
                status, error = answer.status_code, answer.json()["error"]
                assert status == 503 and answer.headers["retry-after"] == "1"
            assert error["code"] == "draining" and error["type"] == "overloaded_error"
            assert error["message"] == "the gateway is shutting down (draining); retry later"
            await until(lambda: gw.budget.num_leases == 0, lambda: server.admission.changed)
            await until(lambda: fake.aborted == 1, lambda: fake.changed)  # closed upstream
            assert not fake.release.is_set()
        records = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        assert list(records["status"]) == ["preempted_dropped"]
        assert list(records["reason"]) == ["draining"]
        assert list(records["num_preemptions"]) == [0]  # not the policy's preemption
        assert list(records["output_tokens"]) == [0]  # none read (the first held unread)
    run(main())


def test_a_reload_applies_the_budget_front_door_and_lease_ttl_and_refuses_a_tier_change(
        caplog: pytest.LogCaptureFixture) -> None:
    door = FrontDoor(max_num_queued_requests=5)
    readings: list[Any] = [
        Reloaded(make_policy("overcommit", {"overcommit_ratio": 0.5}), TIERS, 100, door, 60.0),
        ValueError("scenario.toml: line 3: policy 'nonesuch' is unknown"),
        Reloaded(make_policy("conservative"), (TIERS[0],), 10_000),
        Reloaded(make_policy("conservative"), (replace(TIERS[0], queue_timeout_s=1.0),
                                               TIERS[1]), 10_000),
    ]

    def reload() -> Any:
        reading = readings.pop(0)
        if isinstance(reading, Exception):
            raise reading
        return reading

    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=40, reload=reload) as (server, url), \
                httpx.AsyncClient() as client:
            gw = server.admission.gateway
            first, queued = await _one_held_one_waiting(server, url, client, fake)
            assert server.reload()  # the budget grows: the waiting request is admitted now
            await until(lambda: fake.held == 2, lambda: fake.changed)
            assert gw.config.capacity_tokens == 100 and gw.policy.name == "overcommit"
            assert gw.config.lease_ttl_s == 60.0 and gw.config.front_door == door
            assert "kvbudget_capacity_tokens 100" in (await client.get(url + "/metrics")).text
            # said as the start line says a policy, not as Python's reprs ({'name': ...}, None)
            said = [r.getMessage() for r in caplog.records if "reloaded:" in r.getMessage()]
            assert said == ["reloaded: policy overcommit (batch_on_overload wait, "
                            "overcommit_ratio 0.5); capacity 100 tokens; lease TTL 60 s; front "
                            "door max_concurrent_requests 128, max_num_queued_requests 5, "
                            "evict_lower_priority True"], said
            caplog.clear()
            for _ in range(3):  # a bad file, a tier removed, a tier's setting changed
                assert not server.reload()
            refusals = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert len(refusals) == 3 and "nonesuch" in refusals[0]
            assert "the tiers changed from interactive, batch to interactive" in refusals[1]
            assert "tier 'interactive' changed" in refusals[2]
            assert all("tiers change only at a restart" in r for r in refusals[1:])
            assert gw.config.capacity_tokens == 100 and gw.policy.name == "overcommit"
            assert gw.config.lease_ttl_s == 60.0
            fake.release.set()
            assert (await first).status_code == 200 and (await queued).status_code == 200
    run(main())


VLLM_BUSY = ("The engine is currently busy and cannot accept new requests. Please try again "
             "later or on a different instance.")
"""vLLM 0.32.0's ``QueueOverflowError`` message (``vllm/exceptions.py``): its
``--max-num-queued-reqs`` refusal."""


TGI_TOTAL = ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8. Given: 5 "
             "`inputs` tokens and 8 `max_new_tokens`")  # TGI v3.3.7 validation.rs:999
SGLANG_TOTAL = ("Requested token count exceeds the model's maximum context length of 8 tokens. "
                "You requested a total of 13 tokens: 5 tokens from the input messages and 8 "
                "tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit.")  # SGLang 0.5.23


def test_a_bare_error_object_in_a_stream_is_the_upstreams_error() -> None:
    """An error event in SGLang's body shape, ``{"object": "error", "message": ...}``
    (serving_base.py create_error_response, 0.5.23), with no ``error`` member: before, the
    relay read it as an empty chunk and the request as a protocol error (``backend_error``,
    not counted as a refusal); now its message is read, here SGLang's queue cap."""
    async def main() -> None:
        fake = FakeUpstream(refuse_body=(200, {"object": "error", "message": "The request "
                                               "queue is full.", "type": "SERVICE_UNAVAILABLE",
                                               "param": None, "code": 503}))
        fake.release.set()
        async with stack(fake) as (_server, url), httpx.AsyncClient() as client:
            await client.post(url + "/v1/completions", json=_body(stream=True))
            metrics = (await client.get(url + "/metrics")).text
        assert ('kvbudget_refused_total{tier="interactive",reason="engine_max_queued_requests"}'
                ' 1') in metrics
    run(main())


@pytest.mark.parametrize(("refuse", "stream"), [
    # TGI v3.3.7: 422 {"error": ..., "error_type": "validation"} unstreamed (server.rs:2409)
    ((422, {"error": TGI_TOTAL, "error_type": "validation"}), False),
    # ... and an error event in its completions stream, begun 200 (infer/mod.rs:445-452)
    ((200, {"error": {"message": TGI_TOTAL, "http_status_code": 422}}), True),
    # SGLang 0.5.23: 400 {"object": "error", ...}, streamed or not (serving_base.py:123-128)
    ((400, {"object": "error", "message": SGLANG_TOTAL, "type": "BadRequest", "param": None,
            "code": 400}), True),
])
def test_other_engines_context_refusals_are_recorded_as_the_simulation_names_them(
        refuse: tuple[int, dict[str, Any]], stream: bool, tmp_path: Path) -> None:
    """An upstream TGI's or SGLang's refusal of prompt + max_tokens over its context is the
    simulator's ``context_length``, in the row and in ``kvbudget_refused_total``. Before: TGI's
    422 was ``rejected_overloaded`` ``server_422``, its stream event ``backend_error`` (no
    refusal at all), SGLang's 400 ``server_400``."""
    async def main() -> None:
        fake = FakeUpstream(refuse_body=refuse)
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            answer = await client.post(url + "/v1/completions", json=_body(stream=stream))
            assert answer.status_code == refuse[0]  # passed on as the upstream wrote it
            metrics = (await client.get(url + "/metrics")).text
        assert 'kvbudget_refused_total{tier="interactive",reason="context_length"} 1' in metrics
        row = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet").iloc[0]
        assert (row["status"], row["reason"]) == ("rejected_too_large", "context_length")
    run(main())


@pytest.mark.parametrize(("refuse", "stream", "reason"), [
    ((503, VLLM_BUSY), True, "engine_max_num_queued_reqs"),
    ((503, VLLM_BUSY), False, "engine_max_num_queued_reqs"),
    ((200, VLLM_BUSY), True, "engine_max_num_queued_reqs"),  # mid-stream, as vLLM sends a burst's
    ((200, "out of memory"), True, "backend_error"),
    ((503, "Service Unavailable"), True, "backend_error"),
])
def test_an_upstream_refusal_is_recorded_as_what_it_is(refuse: tuple[int, str], stream: bool,
                                                        reason: str, tmp_path: Path) -> None:
    """An upstream's own queue cap refusing (HTTP 503, or an error event in a stream begun with
    200) is recorded with the simulator's reason for it; the client gets the upstream's answer;
    an error event is no output token (before: the fast path took it for a chunk, and the call
    ended as a protocol error with a first token)."""
    async def main() -> None:
        fake = FakeUpstream(refuse=refuse)
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            resp = await client.post(url + "/v1/completions", json=_body(stream=stream))
            assert resp.status_code == refuse[0]
            assert refuse[1] in resp.text
        records = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        row = records.iloc[0]
        assert (row["status"], row["reason"]) == ("rejected_overloaded", reason)
        assert pd.isna(row["first_token_s"])
    run(main())


VLLM_TOO_LONG = ("This model's maximum context length is 1024 tokens. However, your prompt "
                 "contains at least 1025 input tokens, which exceeds this limit even without "
                 "any output tokens. Please reduce the length of the input prompt. "
                 "(parameter=input_tokens, value=1025)")  # vLLM 0.32.0's, as it answered


SGLANG_TOO_LONG = ("Requested token count exceeds the model's maximum context length of 1024 "
                   "tokens. You requested a total of 1100 tokens: 1000 tokens from the input "
                   "messages and 100 tokens for the completion.")  # SGLang 0.5.23's


@pytest.mark.parametrize(("message", "reason"), [(VLLM_TOO_LONG, "prompt_too_long"),
                                                 (SGLANG_TOO_LONG, "context_length"),
                                                 ("temperature must be >= 0", "server_400")])
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_400_is_recorded_too_large_and_passed_on(message: str, reason: str,
                                                             stream: bool,
                                                             tmp_path: Path) -> None:
    """vLLM's 400 to a prompt over its context (admitted: the tier's limit and the budget are
    the gateway's, not the model's) reaches the client as vLLM wrote it (the SDK's
    BadRequestError), its lease is released, and its row says what it was: rejected too large,
    with the simulator's reason (``prompt_too_long``) where the message names the model's
    context, else ``server_400`` as the replay records it. Before: ``rejected_overloaded``,
    ``backend_error``, which the report counted among the overloads."""
    openai = pytest.importorskip("openai")

    async def main() -> None:
        fake = FakeUpstream(refuse=(400, message))
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (_server, url):
            sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-unused", max_retries=0)
            with pytest.raises(openai.BadRequestError) as caught:
                answer = await sdk.completions.create(model="fake", prompt="hello",
                                                      max_tokens=8, stream=stream)
                if stream:
                    async for _ in answer:  # type: ignore[union-attr]
                        pass
            await sdk.close()
            assert caught.value.body["message"] == message  # type: ignore[index]
        row = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet").iloc[0]
        assert (row["status"], row["reason"], row["error"]) == ("rejected_too_large", reason,
                                                                f"HTTP 400: {message[:200]}")
    run(main())
    # the server's words are kept: read back as validate --records reads a run directory, a
    # refusal in SGLang's says whose rules they were (results/recorded_records.read_run_dir)
    said = engine_rules_said(pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")["error"])
    assert (said is not None and "SGLang's words" in said) == (message == SGLANG_TOO_LONG), said


@pytest.mark.parametrize(("status", "stream"), [(400, False), (400, True), (200, True)])
def test_an_upstream_error_is_recorded_bounded_without_its_key_or_echoed_input(
        status: int, stream: bool, tmp_path: Path) -> None:
    """A row keeps an upstream's error message cut to 200 characters, with the upstream's API
    key and the input a validation error echoes (pydantic's ``input_value=``: the prompt)
    redacted, whether the refusal came as a 4xx or as an error event in a 200 stream."""
    secret = "sk-upstream"  # the harness's upstream key
    message = (f"Bearer {secret} 1 validation error: [type=string_type, input_value='the user's"
               f" private prompt', input_type=int] " + "x" * 400)

    async def main() -> None:
        fake = FakeUpstream(refuse=(status, message))
        fake.release.set()
        async with stack(fake, recorder=_recorder(tmp_path)) as (_server, url), \
                httpx.AsyncClient() as client:
            await client.post(url + "/v1/completions", json=_body(stream=stream))
    run(main())
    error = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet").iloc[0]["error"]
    head = "HTTP 400: " if status == 400 else ""
    assert error.startswith(head + "Bearer *** 1 validation error: [type=string_type, "
                            "input_value=***, input_type=int]"), error
    assert secret not in error and "private prompt" not in error
    assert len(error) == len(head) + 200


@pytest.mark.parametrize(("refuse", "stream", "reason"), [
    ((400, VLLM_TOO_LONG), False, "prompt_too_long"),
    ((400, VLLM_TOO_LONG), True, "prompt_too_long"),
    ((404, "The model `x` does not exist."), False, "server_404"),
    ((200, VLLM_BUSY), True, "engine_max_num_queued_reqs"),  # an error event mid-stream
    ((503, "Service Unavailable"), False, None),  # a failure, no refusal
])
def test_an_upstream_refusal_counts_in_refused_total_by_its_reason(
        refuse: tuple[int, str], stream: bool, reason: str | None) -> None:
    """``kvbudget_refused_total`` is complete: a request the gateway admitted and its upstream
    refused counts there by the reason its row records (before: only in
    ``kvbudget_admitted_total``), and in ``kvbudget_admitted_total`` once, not again."""
    async def main() -> None:
        fake = FakeUpstream(refuse=refuse)
        fake.release.set()
        async with stack(fake) as (_server, url), httpx.AsyncClient() as client:
            await client.post(url + "/v1/completions", json=_body(stream=stream))
            metrics = (await client.get(url + "/metrics")).text
        assert 'kvbudget_admitted_total{tier="interactive"} 1' in metrics
        refused = [line for line in metrics.splitlines()
                   if line.startswith("kvbudget_refused_total{")]
        assert refused == ([] if reason is None else
                           [f'kvbudget_refused_total{{tier="interactive",reason="{reason}"}} 1'])
    run(main())


def test_a_caller_that_will_not_wait_is_admitted_into_free_room() -> None:
    """``x-kvbudget-deadline-s: 0`` (the caller will not wait for admission) into an empty
    budget is admitted; it got 429 ``deadline`` before, whatever the room."""
    async def main() -> None:
        fake = FakeUpstream()
        fake.release.set()
        async with stack(fake) as (_server, url), httpx.AsyncClient() as client:
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"x-kvbudget-deadline-s": "0"})
            assert r.status_code == 200, r.text
    run(main())


def test_the_wait_and_the_times_count_from_the_request_not_from_its_count(
        tmp_path: Path) -> None:
    """The prompt is counted by the upstream's ``/tokenize`` before admission; a busy upstream
    takes its time (seconds, seen against the CPU vLLM). That time is the caller's too: its
    record's arrival is when its body was read, so TTFT and E2E hold it, and its admission
    deadline counts from then (a request whose count outlasted its wait is admitted only into
    room free at once). Before, both started after the count (a batch request's tier wait of
    2 s ended 4.5 s after the client sent it). The admission's clock is a counter here that
    /tokenize moves 5 s."""
    now = [100.0]

    async def main() -> None:
        fake = FakeUpstream(hold="headers")
        fake.on_tokenize = lambda: now.__setitem__(0, now[0] + 5.0)
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder, count_tokens="upstream", capacity_tokens=15,
                         clock=lambda: now[0]) as (_server, url), httpx.AsyncClient() as client:
            first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            # no room while the first holds its lease; its wait of 2 s is spent counting
            r = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"x-kvbudget-deadline-s": "2"})
            assert r.status_code == 429 and r.json()["error"]["code"] == "deadline"
            fake.release.set()
            assert (await first).status_code == 200
        rows = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        done, late = rows.iloc[0], rows.iloc[1]  # by request id
        assert (done["status"], done["arrival_s"], done["admitted_s"]) == ("completed", 0.0, 5.0)
        assert done["e2e_s"] == 10.0  # the second's count moved the clock on
        # counted from 5 s to 10 s: its deadline (7 s) passed meanwhile, and there is no room
        assert (late["status"], late["arrival_s"], late["e2e_s"]) == ("expired", 5.0, 5.0)
    run(main())


@pytest.mark.parametrize("kv_usage", [0.25, None])
def test_the_timeline_holds_the_engines_kv_in_use(kv_usage: float | None,
                                                  tmp_path: Path) -> None:
    """The timeline's ``kv_used_tokens`` is the KV the upstreams' engines hold, read from
    their ``/metrics`` (vLLM's ``kv_cache_usage_perc`` times its capacity), as the replay
    reads it. It was the gateway's ledger's settled use, which is 0 whenever sampled (a lease
    is settled as it ends): every serve run said KV used 0 % and reservation efficiency 0.
    Where the upstream does not tell it, the rows hold 0 and the summary says so."""
    async def main() -> None:
        fake = FakeUpstream(kv_usage=kv_usage)
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (server, url), \
                httpx.AsyncClient() as client:
            assert (await client.post(url + "/v1/completions", json=_body())).status_code == 200
            await server.read_and_sample(capacity_due=False)
        run_ = read_run(recorder.closed[0])
        used = run_.timeline["kv_used_tokens"]
        if kv_usage is None:
            assert (used == 0).all()
            assert any("KV used" in a and "/metrics" in a for a in run_.summary["assumed"])
        else:
            assert used.iloc[-1] == 0.25 * (1001 - 1) * 16  # usage x usable blocks x size
            assert "assumed" not in run_.summary
            assert run_.summary["kv"]["used_p99"] > 0
    run(main())


def test_an_unserved_path_or_method_is_openais_error_json() -> None:
    """A path the gateway does not forward gets 404, a method it does not take there 405,
    each as OpenAI's error JSON, which the SDK reads (NotFoundError with the message; it was
    Starlette's plain 'Not Found', a message-less error)."""
    openai = pytest.importorskip("openai")

    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake) as (_server, url), httpx.AsyncClient() as client:
            sdk = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-unused", max_retries=0)
            with pytest.raises(openai.NotFoundError) as caught:
                await sdk.embeddings.create(model="fake", input="hi")
            await sdk.close()
            assert "POST /v1/embeddings is not served" in caught.value.message
            wrong = await client.get(url + "/v1/completions")
            assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
            assert "GET /v1/completions" in wrong.json()["error"]["message"]
            assert not fake.received
    run(main())


def test_a_run_directory_left_open_is_closed_at_the_next_start(tmp_path: Path) -> None:
    """A gateway killed (SIGKILL, a crash, systemd's stop timeout) leaves its directory with
    its part files only, which no command read ('not a run directory (requests.parquet is
    missing)') and a restart numbered past. The next start closes it from its rows, its
    summary saying so, and goes on with the next number."""
    first = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "overcommit"},
                          rotate_requests=100, meta={"policy": {"name": "overcommit"}})
    request = GatewayRequest(request_id=0, tier="interactive", arrival_s=1.0,
                             prompt_tokens=5, max_output_tokens=8)
    first.write(request_row(request, Outcome("completed", "", 8, 1.0, 1.1, 1.5, 13)), 1.5)
    first.sample({"time_s": 2.0, "kv_used_tokens": 10, "kv_reserved_tokens": 13,
                  "kv_capacity_tokens": 100, "num_running": 1, "num_waiting": 0,
                  "num_preemptions": 0}, 2.0)
    assert first._run is not None
    first._run.close()  # the process dies here: nothing more is written
    again = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                          rotate_requests=100, meta={})
    assert again.recovered == [tmp_path / "run-0001"]
    run_ = read_run(tmp_path / "run-0001")
    assert list(run_.records["status"]) == ["completed"]
    assert run_.summary["policy"] == "overcommit"  # the run's own, from its replay.json
    assert any("stopped without closing it" in a for a in run_.summary["assumed"])
    again.write(request_row(request, Outcome("completed", "", 8, 1.0, 1.1, 1.5, 13)), 3.0)
    assert again.close(3.0) == tmp_path / "run-0002"


def test_a_directory_left_open_is_summarized_by_its_own_tiers(tmp_path: Path) -> None:
    """A directory left open was closed with the restarted gateway's tiers (its summary's tier
    SLOs and per-tier figures), said as assumed, though its replay.json keeps its own."""
    own = (TierConfig("chat", ttft_s=0.1), TierConfig("bulk", priority=1))
    first = ServeRecorder(tmp_path, tiers=own, policy={"name": "conservative"},
                          rotate_requests=100, meta={"tiers": [asdict(t) for t in own]})
    request = GatewayRequest(request_id=0, tier="chat", arrival_s=1.0, prompt_tokens=5,
                             max_output_tokens=8)
    first.write(request_row(request, Outcome("completed", "", 8, 1.0, 1.5, 1.6, 13)), 1.6)
    assert first._run is not None
    first._run.close()  # killed
    ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"}, rotate_requests=100,
                  meta={})
    summary = read_run(tmp_path / "run-0001").summary
    assert list(summary["tiers"]) == ["chat", "bulk"]
    assert summary["tiers"]["chat"]["slo_attainment"] == 0.0  # its TTFT 0.5 s over 0.1 s
    assert not any("restarted gateway's" in a for a in summary["assumed"])


def test_the_timeline_counts_the_engines_preemptions_not_the_gateways(tmp_path: Path) -> None:
    """The timeline's ``num_preemptions`` is the engine's column (the simulator's, the
    replay's; the report's 'engine preemptions'): the upstreams' own
    ``vllm:num_preemptions_total``, counted from the directory's start. serve wrote its own
    revocations there (and the engines' preemptions nowhere); those are each request's
    ``num_preemptions`` and the summary's ``num_gateway_revocations``."""
    async def main() -> None:
        fake = FakeUpstream(kv_usage=0.0, num_preemptions=5)
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (server, url), \
                httpx.AsyncClient() as client:
            await server.read_and_sample(capacity_due=False)  # 5 before the run's first row
            assert (await client.post(url + "/v1/completions", json=_body())).status_code == 200
            fake.num_preemptions = 7
            await server.read_and_sample(capacity_due=False)
        run_ = read_run(recorder.closed[0])
        assert run_.timeline["num_preemptions"].tolist()[0] == 0
        assert run_.timeline["num_preemptions"].tolist()[-1] == 2
        assert run_.summary["engine"] == {"num_engine_preemptions": 2,
                                          "num_gateway_revocations": 0}
    run(main())


def test_the_engines_preemptions_count_on_across_a_restart() -> None:
    """An upstream that restarts counts its preemptions from 0 again: what it had counted
    still happened (Prometheus's rule, as the replay counts them)."""
    def snap(total: int | None) -> EngineSnapshot:
        return EngineSnapshot(None, None, None, total, None, None)

    counter = EngineCounter()
    counter.update([snap(None)])
    assert counter.total is None  # not told
    for totals, want in (([3, 4], 7), ([5, 4], 9), ([1, 6], 12)):  # the first restarts at 1
        counter.update([snap(t) for t in totals])
        assert counter.total == want


@pytest.mark.parametrize("code", [404, 422])
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_4xx_is_its_own_failure_not_an_overload(code: int, stream: bool,
                                                            tmp_path: Path) -> None:
    """An upstream's 4xx other than 400/413 and 429 (404 for a model name it does not serve,
    which ``--count-tokens bytes`` does not catch before the completion; 422 for a field it
    will not take) reaches the client as the upstream wrote it, frees its lease, and its row's
    reason is ``server_<status>`` as a replay names the server's answers. Before: reason
    ``backend_error``, which the report read as the backend failing under load."""
    async def main() -> None:
        message = "The model `nope` does not exist."
        fake = FakeUpstream(refuse=(code, message))
        fake.release.set()
        recorder = _recorder(tmp_path)
        async with stack(fake, recorder=recorder) as (server, url), \
                httpx.AsyncClient() as client:
            resp = await client.post(url + "/v1/completions", json=_body(stream=stream))
            assert resp.status_code == code and message in resp.text
            assert server.admission.gateway.budget.num_leases == 0
        row = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet").iloc[0]
        assert (row["status"], row["reason"], row["error"]) == (
            "rejected_overloaded", f"server_{code}", f"HTTP {code}: {message}")
    run(main())


def test_ready_is_503_while_no_upstream_can_be_reached() -> None:
    """With ``--capacity-tokens`` no upstream ``/metrics`` is read, so nothing noticed every
    upstream gone: ``/ready`` answered 200. Now each upstream's ``/health`` is probed (at start
    and on a period): 503 while none answers, 200 while one does (a 404 there is an answer)."""
    async def main() -> None:
        dead = "http://127.0.0.1:9"  # the discard port: nothing listens there
        server = make_server(dead, capacity_tokens=400)
        async with serving(server.app) as url, httpx.AsyncClient() as client:
            await until(lambda: server.reach.num_probes > 0, lambda: server.reach.changed)
            ready = await client.get(url + "/ready")
            assert ready.status_code == 503 and "no upstream reachable" in ready.text
            assert "127.0.0.1:9/health" in ready.text
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=400, upstreams_extra=(dead,)) as (live, url), \
                httpx.AsyncClient() as client:
            await until(lambda: live.reach.num_probes > 0, lambda: live.reach.changed)
            assert live.reach.down and (await client.get(url + "/ready")).status_code == 200
    run(main())


def test_an_image_chat_is_forwarded_where_the_upstream_counts_it() -> None:
    """With ``--count-tokens upstream`` a chat with an image part is counted by the upstream's
    ``/tokenize`` and forwarded (before: 400 in every count mode); with ``bytes`` the 400 says
    which count takes it."""
    chat = {"model": "fake", "max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is in it?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}
    async def main() -> None:
        for mode, status in (("upstream", 200), ("bytes", 400)):
            fake = FakeUpstream()
            fake.release.set()
            async with stack(fake, count_tokens=mode) as (_server, url), \
                    httpx.AsyncClient() as client:
                resp = await client.post(url + "/v1/chat/completions", json=chat)
                assert resp.status_code == status, mode
                assert (fake.num_tokenized, len(fake.received)) == (
                    (1, 1) if mode == "upstream" else (0, 0))
                if status == 400:
                    assert "--count-tokens upstream" in resp.json()["error"]["message"]
    run(main())


def test_an_upstream_that_does_not_answer_its_probe_in_time_is_unreachable() -> None:
    """The readiness probe is bounded: an upstream that takes the connection and does not
    answer ``/health`` within the probe's timeout counts as unreachable (before: the probe
    waited for the read timeout, 600 s, and ``/ready`` kept its last answer). A timeout of 0
    runs out at the probe's first wait, whatever the machine's speed."""
    async def main() -> None:
        fake = FakeUpstream()
        async with stack(fake, capacity_tokens=400) as (server, _url):
            reach = Reachability(server.upstreams, timeout_s=0.0)
            await reach.probe()
            assert "no answer in 0 s" in reach.problem
            in_time = Reachability(server.upstreams)  # the same upstream, the default bound
            await in_time.probe()
            assert not in_time.down and not in_time.problem
    run(main())
