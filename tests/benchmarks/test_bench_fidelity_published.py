"""Smoke test of benchmarks/bench_fidelity_published.py: its workload builders and one tiny
simulation of each kind (open and closed loop). The published figures are not asserted."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_fidelity_published.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fidelity_published", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    spec.loader.exec_module(module)
    return module


def test_sharegpt_lengths_are_filtered_and_scaled(bench: ModuleType, tmp_path: Path) -> None:
    csv = tmp_path / "lengths.csv"
    # the last two rows break vLLM's filter (prompt > 1024; total > 2048)
    csv.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                   "100,50,150,2\n300,150,450,2\n2000,10,2010,200\n1000,1100,2100,0.9\n")
    prompt, output = bench.sharegpt_lengths(400, np.random.default_rng(0), mean_prompt=20.0,
                                            mean_output=10.0, path=csv)
    assert set(prompt.tolist()) == {10, 30} and set(output.tolist()) == {5, 15}


def test_random_lengths_stay_in_the_range(bench: ModuleType) -> None:
    prompt, output = bench.random_lengths(200, np.random.default_rng(1), 1000, 100, 0.15)
    assert prompt.min() >= 850 and prompt.max() <= 1150
    assert output.min() >= 85 and output.max() <= 115


def test_poisson_arrivals(bench: ModuleType) -> None:
    rng = np.random.default_rng(2)
    assert not bench.poisson_arrivals(5, math.inf, rng).any()
    arrival = bench.poisson_arrivals(4000, 10.0, rng)
    assert np.all(np.diff(arrival) >= 0) and 9.0 < 4000 / arrival[-1] < 11.0


@pytest.mark.parametrize("name", ["V1a Llama-3.1-8B H100 E2E", "FP8blog gpt-oss-20b H100 c8"])
def test_a_tiny_setup_simulates(bench: ModuleType, name: str) -> None:
    setup = next(s for s in bench.SETUPS if s.name == name)
    got = bench.simulate_point(setup, setup.loads[0], 10)
    assert got["e2e_mean_s"] > 0 and got["tok_per_s"] > 0 and got["mean_batch"] >= 1
    if setup.closed_loop:  # 8 users, 10 requests: never more than 8 in flight
        assert got["mean_batch"] <= 8
