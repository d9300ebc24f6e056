"""The shortcuts of ``kvbudget serve``'s request path (issue 40, CPU a request) change nothing
a client or the records see: a read of plain chunks is passed on as the line-by-line path
would pass it, the stream's head is Starlette's, the histograms count as before, the admission's
timer still applies a deadline, a revocation still reaches the forwarding, and a completion
path with another method still gets Starlette's 405."""

from __future__ import annotations

import asyncio
import itertools

import httpx
import numpy as np
import pytest
from starlette.responses import StreamingResponse

from kvbudget.live.gateway_server import SSE_HEADERS
from kvbudget.live.serve_admission import Admission, Ticket
from kvbudget.live.serve_forward import Call, first_of
from kvbudget.live.serve_metrics import ServeMetrics
from kvbudget.policies import make_policy
from kvbudget.policies.gateway import Admit, Gateway, GatewayConfig, Reject
from kvbudget.policies.request import Request
from tests.unit.live.serve_harness import TIERS, FakeUpstream, make_server, serving, streamed_call

pytestmark = pytest.mark.timeout(60)

CHUNK = b'data: {"id":"c","choices":[{"index":0,"text":"x","finish_reason":null}]}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n'




def _line_by_line(call: Call, data: bytes, now_s: float) -> bytes:
    """What the relay passes on for ``data`` read whole lines at a time, one line at a time
    through :meth:`Call.on_line` (the path every read took before the shortcut)."""
    out = [call.on_line(line.removesuffix(b"\r"), now_s) for line in data.split(b"\n")[:-1]]
    return b"".join(piece for piece in out if piece is not None)


def test_a_read_of_plain_chunks_is_passed_on_as_it_came_and_each_chunk_counted() -> None:
    call = streamed_call()
    two = CHUNK + b": a comment\n\n" + CHUNK
    assert call.on_read(two, 1.0) == two  # the same bytes, the comment and blanks kept
    assert call.chunk_times_s == [1.0, 1.0] and call.first_token_s == 1.0
    assert call.on_read(CHUNK, 2.5) == CHUNK
    assert call.chunk_times_s == [1.0, 1.0, 2.5] and call.first_token_s == 1.0
    # a CRLF read loses its \r as before; the usage chunk the client did not ask for, and
    # its blank line, are dropped as before
    assert call.on_read(CHUNK.replace(b"\n", b"\r\n"), 3.0) == CHUNK
    assert call.on_read(USAGE + b"data: [DONE]\n\n", 4.0) == b"data: [DONE]\n\n"
    assert call.output_tokens == 3 and call.done and len(call.chunk_times_s) == 4


def test_reads_of_any_stream_give_what_the_line_by_line_path_gives() -> None:
    """Random streams of chunks, comments, CRLF lines, a usage chunk and [DONE], split into
    reads of whole lines at random: the bytes passed on and the chunk times are the
    line-by-line path's, read by read."""
    rng = np.random.default_rng(40)
    pieces = [CHUNK, CHUNK, CHUNK, b": ping\n\n", CHUNK.replace(b"\n", b"\r\n"),
              b'data: {"error":{"message":"boom"}}\n\n', b"event: x\n"]
    for case in range(200):
        lines = [pieces[i] for i in rng.integers(0, len(pieces), int(rng.integers(1, 12)))]
        lines += [USAGE] if rng.random() < 0.7 else []
        lines += [b"data: [DONE]\n\n"]
        wants_usage = bool(rng.random() < 0.5)
        fast, slow = streamed_call(wants_usage), streamed_call(wants_usage)
        cuts = sorted(set(rng.integers(0, len(lines) + 1, 3).tolist()) | {0, len(lines)})
        for k, (a, b) in enumerate(itertools.pairwise(cuts)):
            data = b"".join(lines[a:b])
            assert fast.on_read(data, float(k)) == _line_by_line(slow, data, float(k)), case
        for name in ("chunk_times_s", "first_token_s", "output_tokens", "problem",
                     "upstream_error", "done", "skip_blank"):
            assert str(getattr(fast, name)) == str(getattr(slow, name)), (case, name)


def test_the_stream_head_is_starlettes_event_stream_head() -> None:
    async def nothing() -> object:
        yield b""

    made = StreamingResponse(nothing(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})
    assert list(SSE_HEADERS) == made.raw_headers


def test_histograms_count_each_value_in_every_bucket_it_fits() -> None:
    """Hand-worked: 0.005 (on the first bound), 0.007 and 0.3 s, and 100 s (past the last
    bound: only +Inf); each bucket counts the values at or under its bound."""
    metrics = ServeMetrics(("interactive",))
    for ttft in (0.005, 0.007, 0.3, 100.0):
        metrics.observe("interactive", ttft, float("nan"))
    page = metrics.render(0, 1, 0, {}, 0)
    expected = {"0.005": 1, "0.01": 2, "0.025": 2, "0.25": 2, "0.5": 3, "60.0": 3, "+Inf": 4}
    for bound, count in expected.items():
        assert f'kvbudget_ttft_seconds_bucket{{tier="interactive",le="{bound}"}} {count}' \
            in page, bound
    assert 'kvbudget_ttft_seconds_sum{tier="interactive"} 100.312' in page
    assert 'kvbudget_e2e_seconds_count{tier="interactive"} 0' in page


def test_a_revocation_reaches_a_future_made_before_or_after_it() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ticket = Ticket(Request(request_id=0, tier="batch", arrival_s=0.0, prompt_tokens=5,
                                max_output_tokens=8), loop.create_future())
        early = ticket.revoked_future()
        assert not early.done() and ticket.revoked_future() is early
        ticket.revoke("preempted")
        assert early.done() and ticket.revoked.is_set() and ticket.revoke_reason == "preempted"
        late = Ticket(ticket.request, loop.create_future())
        late.revoke("draining")
        assert late.revoked_future().done()
    asyncio.run(main())


def test_the_admission_timer_refuses_a_request_at_its_deadline() -> None:
    """Room for one request: a second one that may wait 1 ms waits (no decision at its
    arrival) and is refused (``deadline``) by the timer the admission sets, with no other
    arrival or finish to wake it."""
    async def main() -> None:
        gateway = Gateway(GatewayConfig(capacity_tokens=100, tiers=TIERS),
                          make_policy("conservative", {}))
        admission = Admission(gateway)
        first = admission.arrive("interactive", 40, 50, None)
        assert isinstance(first.decided.result(), Admit)
        timers = asyncio.create_task(admission.run_timers())
        await asyncio.sleep(0)
        second = admission.arrive("interactive", 40, 50, 1e-3)
        assert not second.decided.done()
        decision = await asyncio.wait_for(second.decided, 20)
        assert isinstance(decision, Reject) and decision.error.reason == "deadline"
        timers.cancel()
        with pytest.raises(asyncio.CancelledError):
            await timers
        admission.finish(first, 3)
        assert gateway.budget.num_leases == 0 and admission.num_tickets == 0
    asyncio.run(main())


def test_a_completion_path_with_another_method_gets_405() -> None:
    async def main() -> None:
        fake = FakeUpstream()
        async with serving(fake.app()) as up:
            server = make_server(up)
            async with serving(server.app) as url, httpx.AsyncClient() as client:
                for path in ("/v1/completions", "/v1/chat/completions"):
                    assert (await client.get(url + path)).status_code == 405
                    assert (await client.put(url + path, json={})).status_code == 405
        assert not fake.received
    asyncio.run(main())


def test_first_of_runs_the_work_in_its_callers_task_and_a_stop_ends_it() -> None:
    """:func:`first_of` without a task of its own: a stop ends the work (cancelled, its
    ``finally`` run) with None and leaves the caller's task uncancelled; a cancellation from
    outside still propagates; a stop done before the work ends it too, and a work that ends
    first is answered with no cancellation left behind for the caller's next await."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        cleaned: list[str] = []

        async def slow(name: str) -> str:
            try:
                await asyncio.sleep(3600)
            finally:
                cleaned.append(name)
            return name

        stop = loop.create_future()
        loop.call_soon(stop.set_result, None)
        assert await first_of(slow("stopped"), stop) is None
        assert cleaned == ["stopped"]
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        assert await first_of(slow("stopped before"), stop) is None  # a stop already done
        assert cleaned == ["stopped", "stopped before"]

        async def quick() -> str:
            return "done"

        late = loop.create_future()
        assert await first_of(quick(), late) == "done"
        late.set_result(None)  # after the work ended: nothing is cancelled by it
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

        never = loop.create_future()
        outer = asyncio.ensure_future(first_of(slow("outside"), never))
        await asyncio.sleep(0)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert cleaned[-1] == "outside" and not never.done()

    asyncio.run(main())
