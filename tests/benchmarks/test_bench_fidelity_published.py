"""benchmarks/bench_fidelity_published.py: its workload builders, one tiny simulation of each
kind (open and closed loop), and docs/fidelity.md's "Checked against published curves" table
recomputed (every kvbudget and error figure at the precision shown)."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.benchmarks.doc_figures import (
    agrees,
    numbers,
    rewrite,
    row_line,
    section,
    stale,
    table_rows,
    value_of,
)

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_fidelity_published.py"


def bench_module_data() -> bool:
    return (REPO.parent / "shared" / "traces" / "sharegpt_lengths").is_dir()


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


# docs/fidelity.md, "Checked against published curves": each row of its table -> the setup of
# benchmarks/bench_fidelity_published.py and the figures (``rows``' metrics) it quotes
DOC_ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("v0.6 Llama-3-8B H100 TPOT", ("tpot_mean_ms",)),
    ("v0.6 Llama-3-8B H100 req/s", ("req_per_s",)),
    ("v0.6 Llama-3-70B 4xH100 TPOT", ("tpot_mean_ms",)),
    ("v0.6 Llama-3-70B 4xH100 req/s", ("req_per_s",)),
    ("V1a Llama-3.1-8B H100 E2E", ("e2e_mean_s",)),
    ("V1a Llama-3.3-70B 4xH100 E2E", ("e2e_mean_s",)),
    ("PR20759 Llama-3.1-70B 4xB200 TPOT", ("tpot_mean_ms",)),
    ("FP8blog Llama-3.1-8B H100 c8", ("ttft_p50_ms",)),
    ("FP8blog Llama-3.1-8B H100 c8", ("decode_step_ms", "tpot_p50_ms")),
    ("FP8blog Llama-3.1-8B H100 c8", ("tok_per_s",)),
    ("FP8blog gpt-oss-20b H100 c8", ("ttft_p50_ms",)),
    ("FP8blog gpt-oss-20b H100 c8", ("decode_step_ms", "tpot_p50_ms")),
    ("FP8blog gpt-oss-20b H100 c8", ("tok_per_s",)),
)


@pytest.mark.skipif(not bench_module_data(), reason="needs ../shared/traces/sharegpt_lengths")
def test_the_docs_published_curves_table_is_what_the_benchmark_gives(bench: ModuleType) -> None:
    """Every published, kvbudget and error figure of the table, at the precision shown (the
    whole benchmark at its own sizes: ~2 s). On a mismatch the message is the table's rows as
    they should read."""
    doc = section(REPO / "docs" / "fidelity.md", "## Checked against published curves")
    table = table_rows(doc, "| setup (source) |")
    assert len(table) == len(DOC_ROWS), [r[0] for r in table]
    computed = {name: bench.rows(next(s for s in bench.SETUPS if s.name == name), None)
                for name in dict(DOC_ROWS)}
    problems = []
    for cells, (name, metrics) in zip(table, DOC_ROWS, strict=True):
        points = [(sim, pub) for _, metric, sim, pub, _ in computed[name] if metric in metrics]
        published = list(dict.fromkeys(pub for _, pub in points))
        kvbudget = [sim for sim, _ in points]
        error = [100.0 * (sim / pub - 1.0) for sim, pub in points]
        assert [value_of(n) for n in numbers(cells[3])] == published, (cells, published)
        if stale(cells[4], kvbudget) or stale(cells[5], error):
            new = row_line([*cells[:4], rewrite(cells[4], kvbudget), rewrite(cells[5], error)])
            problems.append(f"was {row_line(cells)}\nnow {new}")
    assert not problems, ("docs/fidelity.md, 'Checked against published curves' (`python "
                          "benchmarks/bench_fidelity_published.py`): stale rows\n"
                          + "\n".join(problems))


@pytest.mark.skipif(not bench_module_data(), reason="needs ../shared/traces/sharegpt_lengths")
def test_the_docs_saturation_figures_are_what_the_benchmark_gives(bench: ModuleType) -> None:
    """"What the errors say", older vLLM at heavy load: the V1 alpha engine's saturation
    throughput (``--breakdown``'s saturation line: QPS inf) and the 8B's saturated batch and
    output rate, at the precision quoted."""
    text = " ".join(section(REPO / "docs" / "fidelity.md",
                            "## Checked against published curves").split())
    m = re.search(r"V1 alpha engine is (\d+) req/s \(8B\) and (\d+) req/s \(70B TP4\)", text)
    assert m, "the saturation sentence"
    b = re.search(r"saturated batch of ~(\d+) its mean step is ~(\d+) ms \((\d+) / ([\d.]+)k tok/s",
                  text)
    assert b, "the saturated-batch sentence"
    cap = {name: bench.simulate_point(setup, math.inf, setup.num_prompts)
           for setup in bench.SETUPS for name in [setup.name] if name.startswith("V1a")}
    llama, big = cap["V1a Llama-3.1-8B H100 E2E"], cap["V1a Llama-3.3-70B 4xH100 E2E"]
    now = (f"V1 alpha engine is {llama['req_per_s']:.0f} req/s (8B) and {big['req_per_s']:.0f} "
           f"req/s (70B TP4); saturated batch of ~{llama['mean_batch']:.0f} its mean step is "
           f"~{1e3 * llama['mean_batch'] / llama['tok_per_s']:.0f} ms "
           f"({llama['mean_batch']:.0f} / {llama['tok_per_s'] / 1e3:.1f}k tok/s)")
    assert agrees(m.group(1), llama["req_per_s"]) and agrees(m.group(2), big["req_per_s"]), now
    assert abs(int(b.group(1)) - llama["mean_batch"]) <= 10, now  # "~440": to the ten
    assert abs(int(b.group(3)) - llama["mean_batch"]) <= 10, now
    assert agrees(b.group(2), 1e3 * llama["mean_batch"] / llama["tok_per_s"]), now
    assert agrees(b.group(4), llama["tok_per_s"] / 1e3), now
