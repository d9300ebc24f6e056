"""The figures docs/fidelity.md quotes in its prose and small tables, outside the benchmark
tables that tests/benchmarks/test_bench_*.py recompute: each is computed here from the library
(or from the checked table it is derived from) at the precision shown."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from kvbudget.perf.cost_model import FRONTENDS
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.policies import make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import Workload
from tests.benchmarks.doc_figures import (
    agrees,
    numbers,
    rewrite,
    row_line,
    section,
    stale,
    table_rows,
)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "fidelity.md"


def flat(heading: str) -> str:
    return " ".join(section(DOC, heading).split())


def idle_ttft_ms(prompt: int, frontend: str) -> float:
    """One Llama-2-7B request on an idle H100 (vLLM's serve defaults), 247 output tokens."""
    n = 1
    workload = Workload(np.zeros(n), np.array([prompt]), np.array([247]), np.array([247]),
                        np.zeros(n, np.int16), ("interactive",), np.full(n, np.nan),
                        np.arange(n), name="idle")
    config = SimConfig(gpu="H100-80GB", model="Llama-2-7B", frontend=frontend)
    records = simulate(workload, make_policy("unlimited"), config).records
    return float(records["ttft_s"][0]) * 1e3


def test_the_api_server_transfer_table() -> None:
    """"API server": kvbudget's engine-side idle TTFT for Llama-2-7B on H100 at each prompt
    length, and the difference from BLIS's (BLIS's column is its own run, a source figure,
    shown rounded: the difference is checked to that rounding and its own)."""
    rows = table_rows(section(DOC, "## API server"), "| prompt tokens | BLIS TTFT |")
    assert [int(r[0]) for r in rows] == [128, 466, 566, 713, 2048]
    problems = []
    for cells in rows:
        blis = float(numbers(cells[1])[0])
        engine = idle_ttft_ms(int(cells[0]), "none")
        values = [engine, blis - engine]
        # the difference is from BLIS's unrounded TTFT: half a unit of BLIS's figure more
        off = abs(float(numbers(cells[3])[0]) - values[1]) > 0.1 + 1e-9
        if stale(cells[2], values[:1]) or off:
            problems.append(f"was {row_line(cells)}\nnow " + row_line(
                [*cells[:2], rewrite(cells[2], values[:1]), rewrite(cells[3], values[1:])]))
    assert not problems, "docs/fidelity.md, 'API server' table: stale rows\n" + "\n".join(problems)


def test_the_idle_ttft_with_the_api_server() -> None:
    """"With it, kvbudget's idle TTFT for Llama-2-7B on H100 is 17.4 / 23.2 / 53.3 ms at
    128 / 566 / 2,048 prompt tokens" (the default ``vllm-api-server`` front end)."""
    m = re.search(r"idle TTFT for Llama-2-7B on H100 is ([\d.]+) / ([\d.]+) / ([\d.]+) ms at "
                  r"128 / 566 / 2,048 prompt tokens", flat("## API server"))
    assert m, "the idle-TTFT sentence"
    values = [idle_ttft_ms(p, "vllm-api-server") for p in (128, 566, 2048)]
    assert all(agrees(n, v) for n, v in zip(m.groups(), values, strict=True)), (
        "should read: " + " / ".join(f"{v:.1f}" for v in values) + " ms")


def test_the_per_request_cost_keeps_the_566_token_front_end() -> None:
    """"`per_request_s` is 12.0 ms less 566 x `per_prompt_token_s` (0.69 ms), 11.3 ms": the
    default front end's set-up plus 566 prompt tokens is the table's 566-token difference
    (BLIS's TTFT less kvbudget's engine-side one), to the table's rounding."""
    api = FRONTENDS["vllm-api-server"]
    rows = {int(r[0]): r for r in table_rows(section(DOC, "## API server"),
                                             "| prompt tokens | BLIS TTFT |")}
    difference_ms = float(numbers(rows[566][3])[0])
    assert abs((api.per_request_s + 566 * api.per_prompt_token_s) * 1e3 - difference_ms) <= 0.05
    m = re.search(r"`per_request_s` is ([\d.]+) ms less 566 x `per_prompt_token_s` \(([\d.]+) "
                  r"ms\), ([\d.]+) ms", flat("## API server"))
    assert m, "the per-request sentence"
    values = (difference_ms, 566 * api.per_prompt_token_s * 1e3, api.per_request_s * 1e3)
    assert all(agrees(n, v) for n, v in zip(m.groups(), values, strict=True)), values


def test_the_overload_prose_is_the_overload_tables() -> None:
    """"a 19 % faster step drains the queue 18 % sooner and lets it grow 41 % more slowly;
    35 % (Qwen3-32B) makes E2E 40 % short": the table's (simulated / measured) figures, which
    tests/benchmarks/test_bench_overload.py recomputes."""
    text = section(DOC, "## The overloaded regime")
    start = text.index("<!-- bench_overload table")
    rows = {r[0]: [tuple(float(x) for x in c.split(" / ")) for c in r[1:]]
            for r in table_rows(text[start:], "| run |")}
    pro, qwen = rows["RTX PRO 6000, Llama-3.1-8B"], rows["2x RTX PRO 6000, Qwen3-32B TP2"]
    sooner = 100 * (1 - pro[3][0] / pro[3][1])
    slower = 100 * (1 - pro[0][0] / pro[0][1])
    short = 100 * (1 - qwen[2][0] / qwen[2][1])
    m = re.search(r"drains the queue (\d+) % sooner and lets it grow (\d+) % more slowly; "
                  r"35 % \(Qwen3-32B\) makes E2E (\d+) % short", " ".join(text.split()))
    assert m, "the overload sentence"
    assert all(agrees(n, v) for n, v in zip(m.groups(), (sooner, slower, short), strict=True)), (
        f"should read: drains the queue {sooner:.0f} % sooner and lets it grow {slower:.0f} % "
        f"more slowly; ... makes E2E {short:.0f} % short")


@pytest.mark.parametrize("fragment", ["118,544-token KV", "kvbudget 118,544, -0.7 %"])
def test_the_known_gaps_llama2_kv_capacity(fragment: str) -> None:
    """"Known gaps": Llama-2-7B's KV on one H100 at vLLM's defaults, in tokens, against the
    7,463 blocks of 16 BLIS's experiments use."""
    engine = EngineConfig().resolved(get_gpu("H100-80GB"))
    tokens = 16 * num_gpu_blocks(
        get_gpu("H100-80GB"), get_model("Llama-2-7B"), block_size=16,
        gpu_memory_utilization=engine.gpu_memory_utilization,
        max_num_batched_tokens=engine.max_num_batched_tokens, max_num_seqs=engine.max_num_seqs)
    error = 100 * (tokens / (7463 * 16) - 1)
    text = flat("## Known gaps")
    assert "7,463 blocks of 16 tokens (119,408" in text
    assert fragment in text, (f"should read {tokens:,}-token KV; kvbudget {tokens:,}, "
                              f"{error:+.1f} %")
    assert f"{tokens:,}" in fragment and (fragment.endswith("KV") or agrees("-0.7", error))


def test_the_async_scheduling_step_range() -> None:
    """"The first token": one step of 1 to 32 running requests of 1,000 tokens on H100s
    (tests/unit/simulator/test_async_scheduling.py holds the same figures)."""
    from kvbudget.perf.step_time import VllmStepModel

    m = re.search(r"gives ([\d.]+)-([\d.]+) ms for Llama-3.1-8B and ([\d.]+)-([\d.]+) ms for "
                  r"Llama-3.1-70B at tensor parallelism 4", flat("## The first token: async scheduling"))
    assert m, "the step-range sentence"
    values = []
    for name, tp in (("Llama-3.1-8B", 1), ("Llama-3.1-70B", 4)):
        model = VllmStepModel(get_gpu("H100-SXM"), get_model(name), tensor_parallel_size=tp)
        values += [model.step_time(0.0, float(n), n * 1000.0, 0.0, 0.0) * 1e3 for n in (1, 32)]
    assert all(agrees(n, v) for n, v in zip(m.groups(), values, strict=True)), (
        "should read: gives {:.1f}-{:.1f} ms for Llama-3.1-8B and {:.1f}-{:.1f} ms".format(*values))


def test_the_intervals_prose_adds_up_the_coverage_table() -> None:
    """"they hold the measured value for 14 of 27 figures": the recorded-run rows of the
    coverage table (which tests/benchmarks/test_bench_intervals.py recomputes), summed."""
    text = section(DOC, "## Predictions with intervals")
    start = text.index("<!-- bench_intervals coverage")
    rows = [r for r in table_rows(text[start:], "| checked on |") if "(recorded run)" in r[0]]
    inside = sum(int(r[2].split(" of ")[0]) for r in rows)
    total = sum(int(r[2].split(" of ")[1]) for r in rows)
    should = f"on the recorded runs: they hold the measured value for {inside} of {total} figures"
    assert should in " ".join(text.split()), should


# --- "KV read (decode attention)": the candidate terms checked and not landed ---------------
H100_PEAK_BYTES_S = 3.35e12
# Dao-AILab/flash-attention#1572 (a user's H100, FA3, paged MHA 32/32 heads of 128, batch 16):
# 292.0 us at 2,000 tokens, 567.2 us at 4,000
FA3_MHA_MARGINAL = 16 * 2_000 * 32 * 128 * 2 * 2 / ((567.2 - 292.0) * 1e-6) / H100_PEAK_BYTES_S
# microsoft/onnxruntime#21414 (H100 SXM, FA2 paged decode, Llama-3-70B's 64/8 heads, 64 seqs):
# 28.780 us at 128 tokens, 43.563 us at 256 (33 and 65 MiB read)
FA2_GQA_MARGINAL = 32 * 2**20 / ((43.563 - 28.780) * 1e-6) / H100_PEAK_BYTES_S


def kv_candidate(model: VllmStepModel, candidate: str) -> VllmStepModel:
    """The default step model with the KV-read term of ``candidate``: "now" (one fraction),
    "head layout" (an MHA model's KV at FA3's MHA marginal rate over FA2's GQA one), or
    "batch-1 slope" (every KV read at the streaming fraction)."""
    if candidate == "now":
        return model
    if candidate == "head layout":
        mha = model.model.mla is None and model.model.num_kv_heads == model.model.num_attention_heads
        factor = FA3_MHA_MARGINAL / FA2_GQA_MARGINAL if mha else 1.0
        return dataclasses.replace(model, kv_mem_efficiency=model.kv_mem_efficiency * factor)
    assert candidate == "batch-1 slope", candidate
    return dataclasses.replace(model, kv_mem_efficiency=model.mem_efficiency)


def kv_candidate_figures(candidate: str) -> list[float]:
    """The published KV figures (ns per context token at batch 1: Llama-3.1-8B H100, B200;
    gpt-oss-20b H100, B200; the Llama-3.1-8B H100 batch 8 x 21k step, ms) and Llama-2-7B's
    H100 decode step at 80 x 700 tokens (ms) under ``candidate``."""
    out = []
    for gpu, name in (("H100-SXM", "Llama-3.1-8B"), ("B200", "Llama-3.1-8B"),
                      ("H100-SXM", "gpt-oss-20b"), ("B200", "gpt-oss-20b")):
        m = kv_candidate(VllmStepModel(get_gpu(gpu), get_model(name)), candidate)
        t0 = m.step_time(0.0, 1.0, 1.0, 0.0, 0.0)
        out.append((m.step_time(0.0, 1.0, 100_001.0, 0.0, 0.0) - t0) / 1e5 * 1e9)
    m = kv_candidate(VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-8B")), candidate)
    out.append(m.step_time(0.0, 8.0, 8 * 21_000.0, 0.0, 0.0) * 1e3)
    m = kv_candidate(VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-2-7B")), candidate)
    out.append(m.step_time(0.0, 80.0, 80 * 700.0, 0.0, 0.0) * 1e3)
    return out


def test_the_kv_read_candidates_table() -> None:
    """"KV read (decode attention)": each candidate's figures with their errors against the
    FP8-KV blog's (the last column: the change from the current model), and the two marginal
    rates the head-layout candidate is made of."""
    text = section(DOC, "## TP and MoE steps from measurements")
    m = re.search(r"FA3's paged MHA decode reads at ([\d.]+) of peak between 2,000 and 4,000 "
                  r"tokens .* FA2's paged GQA decode at ([\d.]+) between 128 and 256 tokens",
                  " ".join(text.split()))
    assert m, "the marginal-rate sentence"
    assert agrees(m.group(1), FA3_MHA_MARGINAL) and agrees(m.group(2), FA2_GQA_MARGINAL), (
        f"should read {FA3_MHA_MARGINAL:.2f} and {FA2_GQA_MARGINAL:.2f}")
    published = [43.7, 18.0, 8.94, 3.56, 15.18]
    rows = table_rows(text, "| KV-read term |")
    assert [r[0].split(":")[0] for r in rows] == ["now", "head layout", "batch-1 slope"]
    now = kv_candidate_figures("now")
    problems = []
    for cells in rows:
        figures = kv_candidate_figures(cells[0].split(":")[0])
        values = [[v, 100 * (v / p - 1)] for v, p in zip(figures, published, strict=False)]
        values.append([figures[-1], 100 * (figures[-1] / now[-1] - 1)])
        fresh = [rewrite(c, v) for c, v in zip(cells[1:], values, strict=True)]
        if any(stale(c, v) for c, v in zip(cells[1:], values, strict=True)):
            problems.append(f"was {row_line(cells)}\nnow {row_line([cells[0], *fresh])}")
    assert not problems, "docs/fidelity.md, KV-read candidates: stale rows\n" + "\n".join(problems)
