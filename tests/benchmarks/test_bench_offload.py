"""Smoke test of benchmarks/bench_offload.py: its CPU-hit case loads from CPU (worked by hand)
and its table prints. The published figures are not asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_offload.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_offload", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cpu_hit_case_loads_the_evicted_prompt(bench: ModuleType, tmp_path: Path) -> None:
    miss, cpu, gpu, off = bench.predict(1024, bench.coder_model(tmp_path))
    # 64 blocks of 16 tokens; the GPU holds 65: the second prompt evicts all but the first
    # prompt's head block (evicted last). The lookup stops at (1024 - 1) // 16 = 63 blocks:
    # the head hits on the GPU, 62 blocks (992 tokens) load, the last block is computed
    assert off["cpu_hit_tokens"] == 992 and off["num_loads"] == 1
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 x 2 x 2 bytes per token
    assert off["load_bytes_per_gpu"] == 992 * 98_304
    assert gpu < cpu < miss


def test_the_table_prints_predicted_and_published(bench: ModuleType,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--lengths", "1024"]) == 0
    out = capsys.readouterr().out
    assert "gahow/agentic-kvc" in out and "miss/CPU" in out and "CPU-GPU" in out
