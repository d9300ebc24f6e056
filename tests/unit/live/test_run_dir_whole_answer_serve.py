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
