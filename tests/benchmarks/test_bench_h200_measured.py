"""docs/profile.md's "Results (H200, 2026-12-04)" checked against the measured files that
benchmarks/bench_h200_measured.py reads: every figure the section quotes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_h200_measured.py"
PROFILE = REPO / "benchmarks" / "data" / "h200-2026-12-04" / "H200-141GB_Llama-3.1-8B.csv"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_h200_measured", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data(bench: ModuleType) -> dict[str, object]:
    import json

    loaded: dict[str, object] = json.loads((bench.DATA / "gemm_bandwidth.json").read_text())
    return loaded


def test_the_docs_quote_the_measured_gemm_and_bandwidth_fractions(
        bench: ModuleType, data: dict[str, object]) -> None:
    from kvbudget.perf.hardware import get_gpu

    gpu = get_gpu("H200")
    gemm = bench.gemm_fractions(data, gpu.bf16_flops)
    layers = [v for k, v in gemm.items() if k != "4096x128256"]
    assert len(layers) == 3 and round(min(layers), 2) == 0.77 and round(max(layers), 2) == 0.81
    assert round(gemm["4096x128256"], 2) == 0.69
    assert gpu.achievable_gemm_fraction == 0.80 and gpu.bf16_flops == 989.4e12
    stream = bench.stream_fractions(data, gpu.hbm_bandwidth_bytes_s)
    big = [v for k, v in stream.items() if k.endswith(("_1GiB", "_4GiB", "_16GiB"))]
    assert round(min(big), 2) == 0.86 and round(max(big), 2) == 0.90
    assert round(stream["gemv_1x4096x128256"], 2) == 0.90
    assert gpu.achievable_bandwidth_fraction == 0.90 and gpu.hbm_bandwidth_bytes_s == 4.8e12
    text = (REPO / "docs" / "profile.md").read_text()
    for quoted in ("0.77-0.81", "reaches 0.69", "0.86-0.90 of 4.8 TB/s", "matrix 0.90"):
        assert quoted in " ".join(text.split()), quoted


def test_the_docs_quote_the_profiles_gaps(bench: ModuleType) -> None:
    errors = bench.prefill_errors(PROFILE)
    assert [n for n, _, _ in errors] == [2048, 4096, 8192]
    below = [1 - predicted / measured for _, measured, predicted in errors]
    assert round(100 * min(below)) == 19 and round(100 * max(below)) == 32
    assert below == sorted(below, reverse=True)  # the gap shrinks as GEMMs dominate
    assert "predicts 19-32 % less" in " ".join((REPO / "docs" / "profile.md").read_text().split())
    table = pd.read_csv(PROFILE)
    prefill = table[table["point_class"] == "prefill"]
    small_prefill = prefill[prefill["seq_len"] <= 512]["step_time_s"]
    decode = table[table["point_class"] == "decode"]
    small_decode = decode[(decode["batch_size"] <= 8) | (decode["seq_len"] == 256)]["step_time_s"]
    both = pd.concat([small_prefill, small_decode])
    assert len(small_prefill) == 3 and len(small_decode) == 9
    assert both.min() >= 0.018 and both.max() <= 0.036
