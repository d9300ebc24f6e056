"""Smoke test of benchmarks/bench_serve_instructions.py without valgrind: valgrind's summary
line is read, and the two stream lengths are solved into the work a request and a chunk
(hand-worked figures). The counts themselves are the benchmark's to print."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from types import ModuleType

import pytest

from tests.benchmarks.bench_module import BENCHMARKS, load_bench

REPO = BENCHMARKS.parent


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_serve_instructions")


def test_valgrinds_summary_is_read(bench: ModuleType) -> None:
    assert bench.instructions_of("==7== Cachegrind\n==7== I   refs:      147,456,520\n") \
        == 147_456_520
    with pytest.raises(RuntimeError, match="no instruction count"):
        bench.instructions_of("==7== ERROR SUMMARY: 0 errors\n")


def test_two_stream_lengths_split_into_a_request_and_a_chunk(bench: ModuleType) -> None:
    """1,000,000 + 50,000 a chunk: 1.1 M for 2 chunks, 2.7 M for 34."""
    less_chunks, per_chunk = bench.split({2: 1_100_000.0, 34: 2_700_000.0})
    assert per_chunk == pytest.approx(50_000)
    assert less_chunks == pytest.approx(1_000_000)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("floor", ["static", "aiohttp"])
def test_the_floor_proxies_answer_streams(floor: str) -> None:
    """``serve_floor.py``, what ``--floor`` counts: uvicorn's own fixed stream, or the fake's
    stream relayed through aiohttp (its 3 chunks and the usage chunk asked for on the way)."""
    serve = load_bench("bench_serve")
    up_port, port = serve.free_port(), serve.free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(BENCHMARKS / "bench_serve.py"), "--fake",
                               str(up_port), "3", "1"], env=env)]
    try:
        procs.append(subprocess.Popen([sys.executable, str(BENCHMARKS / "serve_floor.py"), floor,
                                       f"http://127.0.0.1:{up_port}", str(port)], env=env))
        serve.wait_port(up_port, procs[0])
        serve.wait_port(port, procs[1])
        _, gaps, num = asyncio.run(serve.burst(f"http://127.0.0.1:{port}", 2))
        # each stream's data lines less one: static 2 chunks; relayed 3 chunks and the usage
        assert (num, len(gaps)) == (2, 2 if floor == "static" else 6)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
