"""benchmarks/bench_splitwise_published.py: Splitwise's throughput search and SLO rule (worked by
hand), the stand-in model's size, a request alone meeting its own reference, and the figures of
docs/disaggregation.md's Splitwise section that are cheap to recompute. The published ratios are
not asserted."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from kvbudget.perf.models import model_from_config
from tests.benchmarks.bench_module import load_bench
from tests.benchmarks.doc_figures import section

DOC = Path(__file__).resolve().parents[2] / "docs" / "disaggregation.md"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_splitwise_published")


def test_throughput_is_the_highest_passing_rate(bench: ModuleType) -> None:
    rates = tuple(range(30, 161, 10))  # 14 rates: indices 0..13
    tried: list[int] = []

    def ok(rate: int) -> bool:
        tried.append(rate)
        return rate < 75

    # bisection on indices (-1, 14): 6 -> 90 fails, 2 -> 50 passes, 4 -> 70 passes,
    # 5 -> 80 fails: 70, the highest passing rate of the grid
    assert bench.max_throughput(ok, rates) == 70
    assert tried == [90, 50, 70, 80]
    assert bench.max_throughput(lambda r: False, rates) == 0
    assert bench.max_throughput(lambda r: True, rates) == 160


def test_all_nine_slos_strictly_below_their_targets(bench: ModuleType) -> None:
    at = dict(bench.SLOS)  # every percentile exactly at its target: fails (strict <)
    assert not bench.within_slo(at)
    below = {k: v * 0.999 for k, v in at.items()}
    assert bench.within_slo(below)
    # one of nine over (P50 TBT 1.26 > 1.25) fails the rate
    assert not bench.within_slo({**below, ("tbt", 0.5): 1.26})
    assert sorted(set(bench.SLOS.values())) == [1.25, 1.5, 2.0, 3.0, 5.0, 6.0]


def test_slowdowns_as_the_authors_divide_them(bench: ModuleType) -> None:
    # TTFT 0.2 s against 0.1; TBT (0.6 - 0.2) / 5 tokens = 0.08 s against 0.05; E2E 0.6 against
    # 0.1 + 0.05 x 4 = 0.3
    ref = (np.array([0.1]), np.array([0.05]), np.array([0.3]))
    sd = bench.slowdowns(np.array([100]), np.array([5]), np.array([0.2]), np.array([0.6]), ref)
    assert sd["ttft"][0] == pytest.approx(2.0)
    assert sd["tbt"][0] == pytest.approx(1.6)
    assert sd["e2e"][0] == pytest.approx(2.0)


def test_the_reference_prices_a_lone_request_in_chunks(bench: ModuleType) -> None:
    def step(n: float, d: float, c: float, a: float, s: float) -> float:
        return 0.01 + 1e-5 * n + 1e-6 * c

    # 3,000 prompt tokens: a 2,048-token chunk (0.01 + 0.02048 + 0.002048) and a 952-token one
    # attending to 3,000 (0.01 + 0.00952 + 0.003); one decode step at 3,001 tokens
    # 0.01 + 0.003001; E2E with 4 output tokens: TTFT + 3 steps
    ttft, tbt, e2e = bench.reference(step, np.array([3000]), np.array([4]))
    assert ttft[0] == pytest.approx(0.032528 + 0.02252)
    assert tbt[0] == pytest.approx(0.013001)
    assert e2e[0] == pytest.approx(0.055048 + 3 * 0.013001)


def test_the_percentiles_are_linear(bench: ModuleType) -> None:
    x = np.arange(1.0, 11.0)  # 1..10: P50 5.5, P90 9.1, P99 9.91 (pandas' linear quantile)
    pct = bench.percentiles({"ttft": x, "tbt": x, "e2e": x})
    assert pct[("ttft", 0.5)] == pytest.approx(5.5)
    assert pct[("tbt", 0.9)] == pytest.approx(9.1)
    assert pct[("e2e", 0.99)] == pytest.approx(9.91)


def test_the_stand_in_has_bloom_176b_s_size(bench: ModuleType) -> None:
    spec = model_from_config(bench.BLOOM_176B, name="bloom-stand-in", source="bench")
    # BLOOM's MLP: two 14,336 x 57,344 matrices a layer; the stand-in's three gated ones
    mlp = 3 * 14336 * bench.BLOOM_176B["intermediate_size"]
    assert abs(mlp / (2 * 14336 * 57344) - 1) < 1e-4
    # BigScience's count for BLOOM-176B: 176,247,271,424 parameters (biases and norms are a
    # few million of them)
    assert spec.num_params == pytest.approx(176_247_271_424, rel=1e-3)
    assert spec.num_layers == 70 and spec.num_kv_heads == 112


def test_a_lone_request_meets_its_reference(bench: ModuleType, shared: Path,
                                            tmp_path: Path) -> None:
    p, o = bench.azure_pairs(shared / "traces" / "azure_llm_2023" /
                             "AzureLLMInferenceTrace_conv.csv")
    assert len(p) == 19_366 and int(p.max()) == 14_050 and int(o.min()) >= 1
    csv, model_json = tmp_path / "pairs.csv", tmp_path / "config.json"
    np.savetxt(csv, np.column_stack([p, o]), fmt="%d", delimiter=",",
               header="prompt_tokens,output_tokens", comments="")
    model_json.write_text(json.dumps(bench.BLOOM_176B))
    ref = bench.machine_cost(model_json, bench.REFERENCE_GPU).step_time
    # one request a minute (two of them 28 ms apart) on two machines colocated, or two prompt
    # machines and a token machine: nothing contends, so its TTFT is its reference's (the
    # first token from the prompt machine) and its E2E within the growth of its context
    for design in (bench.Design("c", "A100-80GB", 2), bench.Design("s", "A100-80GB", 3, (2, 1))):
        prompt, output, ttft, e2e = bench.run(bench.scenario(csv, model_json, 1 / 60, 300, 0,
                                                             design))
        sd = bench.slowdowns(prompt, output, ttft, e2e, bench.reference(ref, prompt, output))
        assert len(prompt) == 5
        np.testing.assert_allclose(sd["ttft"], 1.0, rtol=1e-9)
        assert np.all((sd["e2e"] > 0.999) & (sd["e2e"] < 1.1))


def test_the_docs_step_times(bench: ModuleType, tmp_path: Path) -> None:
    model_json = tmp_path / "config.json"
    model_json.write_text(json.dumps(bench.BLOOM_176B))
    text = section(DOC, "## Checked against Splitwise's published throughput")
    for prompt, kv_pre, kv_tok, sw_pre, sw_tok in bench.step_times(model_json, "A100-80GB"):
        row = f"| {prompt:,} | {kv_pre:.1f} | {kv_tok:.1f} | {sw_pre:.1f} | {sw_tok:.1f} |"
        assert row in text, row


@pytest.mark.slow
def test_the_docs_iso_power_row(bench: ModuleType, shared: Path, tmp_path: Path) -> None:
    # the bench's own runs (120 s, 3 seeds) at the rates that decide the iso-power row:
    # Baseline-A100 passes at 20 (below the grid) and fails at 30, the grid's lowest; Splitwise-AA
    # passes at 40 and fails at 50 (the iso-cost row is the bench's alone: minutes of CPU)
    p, o = bench.azure_pairs(shared / "traces" / "azure_llm_2023" /
                             "AzureLLMInferenceTrace_conv.csv")
    csv, model_json = tmp_path / "pairs.csv", tmp_path / "config.json"
    np.savetxt(csv, np.column_stack([p, o]), fmt="%d", delimiter=",",
               header="prompt_tokens,output_tokens", comments="")
    model_json.write_text(json.dumps(bench.BLOOM_176B))
    ref = bench.machine_cost(model_json, bench.REFERENCE_GPU).step_time
    baseline, split, _ = bench.DESIGNS["iso-power"]

    class Args:
        duration, seeds = 120.0, 3

    base, seen = bench.design_throughput(csv, model_json, baseline, (20, 30), Args(), ref)
    tput, seen_split = bench.design_throughput(csv, model_json, split, (40, 50), Args(), ref)
    assert (base, tput) == (20, 40)
    text = " ".join(section(DOC, "## Checked against Splitwise's published throughput").split())
    assert f"at 30 requests a second its P99 TTFT slowdown is {seen[30][('ttft', 0.99)]:.2f}" in text
    tbt = [f"{seen_split[r][('tbt', 0.5)]:.2f}" for r in (40, 50)]
    assert f"({tbt[0]} at 40 requests a second, {tbt[1]} at 50 on iso-power" in text
    assert "| iso-power | Baseline-A100, 70 x DGX-A100 | none of 30-160 |" in text
    assert "| Splitwise-AA, 45 + 25 x DGX-A100 | 40 | none | 2.15 | no |" in text
