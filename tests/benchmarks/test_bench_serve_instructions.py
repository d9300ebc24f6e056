"""Smoke test of benchmarks/bench_serve_instructions.py without valgrind: valgrind's summary
line is read, and the two stream lengths are solved into the work a request and a chunk
(hand-worked figures). The counts themselves are the benchmark's to print."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.benchmarks.bench_module import load_bench


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
