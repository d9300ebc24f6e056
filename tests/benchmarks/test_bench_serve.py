"""Smoke test of benchmarks/bench_serve.py: a tiny run (2 streams of 3 chunks, one round) prints
its figures for both paths, and every stream went through the gateway and back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(180)
def test_bench_serve_prints_both_paths() -> None:
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--streams", "2",
         "--rounds", "1", "--tokens", "3", "--gap-ms", "1"],
        capture_output=True, text=True, timeout=170, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    (row,) = out["results"]
    assert row["streams"] == 2
    assert set(row["ttft_ms"]) == set(row["gap_ms"]) == {"direct", "gateway"}
    assert set(row["added_ttft_ms"]) == {"p50", "p99"}
    assert row["gateway_rss_mib"] > 0


@pytest.mark.timeout(180)
def test_bench_serve_holds_a_steady_concurrency() -> None:
    """``--steady-s``: users each send their next stream when the last ends; every figure is
    there, and more streams went through the gateway than users (each sent several)."""
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--streams", "2",
         "--rounds", "1", "--tokens", "3", "--gap-ms", "20", "--steady-s", "1.5"],
        capture_output=True, text=True, timeout=170, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["steady_s"] == 1.5
    (row,) = out["results"]
    assert set(row["ttft_ms"]) == set(row["gap_ms"]) == {"direct", "gateway"}
    assert row["gateway_requests_per_cpu_s"] > 0
    assert row["gateway_streams"] > 2


@pytest.mark.timeout(180)
def test_bench_serve_counts_prompts_with_the_upstreams_tokenize() -> None:
    """``--count-tokens upstream``: the gateway asks the fake's ``/tokenize`` before each
    stream, and every stream still goes through."""
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--streams", "2",
         "--rounds", "1", "--tokens", "3", "--gap-ms", "1", "--count-tokens", "upstream"],
        capture_output=True, text=True, timeout=170, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["count_tokens"] == "upstream"
    (row,) = out["results"]
    assert row["gateway_streams"] == 2


@pytest.mark.timeout(240)
def test_bench_serve_times_another_checkouts_gateway_beside_this_one() -> None:
    """``--compare DIR``: a second gateway (here this checkout again) is measured in the same
    rounds, its figures under ``compare_*``."""
    res = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--streams", "2",
         "--rounds", "1", "--tokens", "3", "--gap-ms", "1", "--compare", str(REPO)],
        capture_output=True, text=True, timeout=230, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-3000:]
    (row,) = json.loads(res.stdout)["results"]
    assert set(row["ttft_ms"]) == {"direct", "gateway", "compare"}
    assert set(row["compare_added_ttft_ms"]) == {"p50", "p99"}
    assert row["compare_streams"] == row["gateway_streams"] == 2
    assert row["compare_cpu_ms_per_request"] >= 0
