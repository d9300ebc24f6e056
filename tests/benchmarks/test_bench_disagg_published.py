"""Smoke test of benchmarks/bench_disagg_published.py: DistServe's search and pass rule (worked
by hand), its dataset pruning and one run of each deployment. The published figure is not
asserted."""

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


def test_goodput_is_the_last_passing_midpoint(bench: ModuleType) -> None:
    # passing below 1.6: to 0.02 on [0, 5] the search ends within 0.02 below it
    g = bench.goodput(lambda r: r < 1.6)
    assert 1.6 - 0.02 <= g < 1.6


def test_the_readme_search_gives_its_midpoints(bench: ModuleType) -> None:
    # DistServe's search on [0, 5], esp 0.25, passing below 1.6: 2.5 fails, 1.25 passes,
    # 1.875 fails, 1.5625 passes (hi - lo = 0.3125), 1.71875 fails (0.15625 <= 0.25): 1.5625,
    # the README's "1.56"; passing nowhere: 0
    tried: list[float] = []

    def ok(r: float) -> bool:
        tried.append(r)
        return r < 1.6

    assert bench.goodput(ok, esp=0.25) == 1.5625
    assert tried == [2.5, 1.25, 1.875, 1.5625, 1.71875]
    assert bench.goodput(lambda r: False, esp=0.25) == 0.0


def test_a_rate_passes_on_each_percentile_apart(bench: ModuleType) -> None:
    # ten requests: TTFT 0.1 ... 1.0 s, P90 (linear) 0.91 s; TPOT all 0.05 s
    ttft = np.arange(1, 11) / 10
    tpot = np.full(10, 0.05)
    assert bench.contained(ttft, tpot, 0.92, 0.1)
    assert not bench.contained(ttft, tpot, 0.91, 0.1)  # strictly below, as DistServe
    assert not bench.contained(ttft, tpot, 0.92, 0.05)
    # twenty requests, two over the TTFT target and two others over the TPOT one: 80 % meet
    # both, yet P90 TTFT 0.1 + 0.1 x 0.9 = 0.19 s and P90 TPOT 0.05 + 0.1 x 0.15 = 0.065 s
    # are within, and DistServe's search passes the rate
    ttft = np.array([0.1] * 18 + [1.0] * 2)
    tpot = np.array([0.05] * 16 + [0.2] * 2 + [0.05] * 2)
    assert bench.contained(ttft, tpot, 0.2, 0.1)


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
        ttft, tpot = bench.latencies(bench.scenario(csv, 20, 0.2, 5.0, 1.0, 0, dis))
        assert len(ttft) == 20 and bench.contained(ttft, tpot, 5.0, 1.0)
    # DistServe's first token: the prefill instance's
    assert bench.scenario(csv, 20, 0.2, 5.0, 1.0, 0, True)["disaggregation"][
        "first_token"] == "prefill"


def test_step_times_beside_distserves_profiles(bench: ModuleType) -> None:
    rows = {(engine, tp): (pre, dec) for engine, tp, pre, dec in bench.step_times(100, 2, 99)}
    # DistServe's TP 1 profile by hand: 18.1025 + 0.101912 x 100 + 7.1223e-6 x 100^2 ms, and
    # 19.9347 + 0.00062694 x 2 x 100 + 0.038507 x 2 ms
    pre, dec = rows[("DistServe sim, DistServe", 1)]
    assert pre == pytest.approx(18.1025 + 10.1912 + 0.0712, abs=1e-3)
    assert dec == pytest.approx(19.9347 + 0.1254 + 0.0770, abs=1e-3)
    # kvbudget's own: two GPUs prefill faster than one
    assert 0 < rows[("kvbudget vLLM", 2)][0] < rows[("kvbudget vLLM", 1)][0]
