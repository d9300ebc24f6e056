"""``kvbudget serve``'s run directories keep each streamed request's chunk gaps in
``requests.part.jsonl`` as a replay's do: ``validate --records`` / ``calibrate --records`` of
one read them (``results/run_parts.py`` ``itl_means_of_parts``) to find the answers read whole
at once; a request answered whole (not streamed) has none."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import httpx
import numpy as np
import pytest

from kvbudget.live.serve_records import ServeRecorder
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_parts import REQUESTS_PART, TOKEN_GAPS_KEY, read_jsonl
from tests.unit.live.serve_harness import TIERS, FakeUpstream, stack

pytestmark = pytest.mark.timeout(60)


def test_a_serve_run_directory_gives_the_reader_each_streamed_requests_gaps(
        tmp_path: Path) -> None:
    recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={})

    async def main() -> None:
        fake = FakeUpstream(num_tokens=6)
        fake.release.set()
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            for stream in (True, False):
                body = {"model": "fake", "prompt": "hello", "max_tokens": 6, "stream": stream}
                r = await client.post(url + "/v1/completions", json=body)
                assert r.status_code == 200
    asyncio.run(main())
    path = recorder.closed[0]
    rows = sorted(read_jsonl(path / REQUESTS_PART), key=lambda r: r["arrival_s"])
    gaps = rows[0][TOKEN_GAPS_KEY]
    assert len(gaps) == 5 and rows[1][TOKEN_GAPS_KEY] == []
    recording = read_recording(path)
    m = recording.measured
    assert m["itl_mean_s"][0] == pytest.approx(math.fsum(gaps) / 5)
    assert m["itl_mean_s"][0] <= m["tpot_s"][0] + 1e-12
    assert np.isnan(m["itl_mean_s"][1])  # not streamed: no gap, its TPOT as before


def test_a_serve_directorys_whole_answers_are_said_read_by_the_gateway(
        tmp_path: Path) -> None:
    """validate's note of answers read whole at once blamed 'the client ... (a client or API
    server busy elsewhere, a proxy buffering the stream ...)'; in a serve directory the reader
    is the gateway itself, streaming from its upstream: the note now says so, and why (the
    server sent the tokens in bursts, or the gateway's client did not stream). A burst of a
    streamed answer (the fake sends its tokens at once) and a request not streamed."""
    recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})

    async def main() -> None:
        fake = FakeUpstream(num_tokens=6)
        fake.release.set()
        async with stack(fake, recorder=recorder) as (_server, url), \
                httpx.AsyncClient() as client:
            for stream in (True, False):
                body = {"model": "fake", "prompt": "hello", "max_tokens": 6, "stream": stream}
                r = await client.post(url + "/v1/completions", json=body)
                assert r.status_code == 200
    asyncio.run(main())
    recording = read_recording(recorder.closed[0])
    said = " ".join(" ".join(recording.notes).split())
    assert "2 of 2 completed requests got the tokens after their first less than 100 us apart" \
        in said, said
    assert "kvbudget serve read the whole answer at once, from the upstream it streams from " \
        "(the server sent the tokens in bursts, or the gateway's client did not stream, and " \
        "the gateway sees no first token of a whole answer), so their TTFT is about their E2E " \
        "and their TPOT near 0, when the gateway read them, not when the server made them" \
        in said, said
    assert "proxy" not in said and "the client read" not in said, said
