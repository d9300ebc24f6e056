"""Smoke test of benchmarks/bench_disagg_published.py: its bisection (worked by hand), its
dataset pruning and one run of each deployment. The published figure is not asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_disagg_published.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_disagg_published", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_goodput_is_the_last_rate_at_90_percent(bench: ModuleType) -> None:
    # attainment 1 - rate / 10: 0.9 at rate 1; bisection on [0, 6] to 0.02 stays below it
    g = bench.goodput(lambda r: 1 - r / 10)
    assert 1 - 0.02 <= g <= 1


def test_the_dataset_is_pruned_as_distserve_prunes_it(bench: ModuleType, shared: Path) -> None:
    p, o = bench.sharegpt_pairs(shared / "traces" / "sharegpt_lengths" / (
        "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))
    assert len(p) > 10_000 and int((p + o).max()) < 2048


def test_both_deployments_run(bench: ModuleType, shared: Path, tmp_path: Path) -> None:
    p, o = bench.sharegpt_pairs(shared / "traces" / "sharegpt_lengths" / (
        "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"))
    csv = tmp_path / "pairs.csv"
    np.savetxt(csv, np.column_stack([p, o]), fmt="%d", delimiter=",",
               header="prompt_tokens,output_tokens", comments="")
    # far below either deployment's capacity every request meets generous SLOs
    for dis in (True, False):
        assert bench.attainment(bench.scenario(csv, 20, 0.2, 5.0, 1.0, 0, dis)) == 1.0
