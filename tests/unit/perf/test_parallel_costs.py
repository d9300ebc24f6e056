"""TP all-reduce and MoE layer costs (perf/parallel_costs.py): known answers worked by hand from
the cited figures, the step model charging them, and floats and arrays giving the same bits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.parallel_costs import (
    FUSED_MOE_H100_MIXTRAL_TP2_US,
    FUSED_MOE_OVERHEAD_S,
    MOE_GEMM_RELATIVE,
    MOE_GEMM_TOKENS_PER_EXPERT,
    TWO_STAGE_LINK_FRACTION,
    AllReduceCost,
    custom_limit_bytes,
    fused_moe_gemm_fractions,
    fused_moe_overhead_from_benchmark,
    moe_gemm_relative_efficiency,
    one_shot_limit_bytes,
)
from kvbudget.perf.step_time import MOE_LAYER_OVERHEAD_S, VllmStepModel

NVLINK = 0.80 * 450e9  # H100 NVLink per direction at the default link_efficiency
HIDDEN_BYTES = 8192 * 2.0  # Llama-70B's hidden state in bf16, the benchmarks' shape


def _ar(tp: int, interconnect: str = "nvlink", link: float = NVLINK,
        latency: float = 6e-6) -> AllReduceCost:
    return AllReduceCost.of(tp, interconnect, latency, link, HIDDEN_BYTES)


def test_the_one_shot_limits_are_vllms() -> None:
    """csrc/custom_all_reduce.cuh REDUCE_CASE: TP 2 always (within the 8 MiB max_size), fully
    connected TP <= 4 below 512 KiB, TP <= 8 below 256 KiB; PCIe beyond TP 2 and TP 16: NCCL."""
    assert one_shot_limit_bytes(2, "nvlink") == one_shot_limit_bytes(2, "pcie") == 8 * 2**20
    assert one_shot_limit_bytes(4, "nvlink") == one_shot_limit_bytes(4, "xgmi") == 512 * 1024
    assert one_shot_limit_bytes(6, "nvlink") == one_shot_limit_bytes(8, "nvlink") == 256 * 1024
    assert one_shot_limit_bytes(4, "pcie") == one_shot_limit_bytes(16, "nvlink") == 0.0


def test_one_shot_known_answers_and_vllms_measurements() -> None:
    """By hand: 6 us + (n - 1) x bytes / (0.80 x 450 GB/s). TP 2, 32 tokens (512 KiB):
    6 + 524,288 / 360e9 s = 7.456 us (vllm#24111, H100: 7 us); TP 4, 31 tokens (496 KiB):
    6 + 3 x 507,904 / 360e9 = 10.233 us (vllm#24532 at 512 KiB: 10 us); TP 8, 15 tokens:
    6 + 7 x 245,760 / 360e9 = 10.779 us."""
    assert _ar(2).time(32.0) == pytest.approx(7.456e-6, abs=1e-9)
    assert _ar(4).time(31.0) == pytest.approx(10.233e-6, abs=1e-9)
    assert _ar(8).time(15.0) == pytest.approx(10.779e-6, abs=1e-9)
    # vllm#24532's forced one-stage custom all-reduce at TP 4 (ca_1stage): 10 / 14 / 23 / 38 us
    # at 0.5 / 1 / 2 / 4 MiB: the one-shot form, within 10 %
    one = _ar(4)
    for mib, measured in ((0.5, 10e-6), (1, 14e-6), (2, 23e-6), (4, 38e-6)):
        tokens = mib * 2**20 / HIDDEN_BYTES
        form = one.one_shot_latency_s + one.one_shot_per_token_s * tokens
        assert form == pytest.approx(measured, rel=0.10)


def test_two_stage_and_ring_known_answers() -> None:
    """From the one-shot limit to the custom kernel's (8 MiB at TP 4): two-stage,
    12 us + 2 (n - 1) / n x bytes / (360e9 x 0.58). TP 4, 128 tokens (2 MiB):
    12 + 1.5 x 2,097,152 / 360e9 / 0.58 = 27.066 us (vllm#24532's ca_2stage: 26 us). From
    8 MiB (512 tokens): symmetric memory, 12 + 1.5 x 8,388,608 / 360e9 = 46.953 us. TP 8 has
    no two-stage range (both limits 256 KiB): 16 tokens, 12 + 1.75 x 262,144 / 360e9 =
    13.274 us; TP 6 has one (256-512 KiB): 16 tokens, 12 + (5/3) x 262,144 / 360e9 / 0.58 =
    14.092 us. TP 4 on PCIe (no custom kernel), NCCL's ring with one latency:
    18 + 1.5 x 2,097,152 / (0.70 x 64e9) us = 88.217 us."""
    assert custom_limit_bytes(4, "nvlink") == 8 * 2**20
    assert custom_limit_bytes(6, "nvlink") == 512 * 1024
    assert custom_limit_bytes(8, "nvlink") == 256 * 1024
    assert _ar(4).time(128.0) == pytest.approx(27.066e-6, abs=1e-9)
    assert _ar(4).time(512.0) == pytest.approx(46.953e-6, abs=1e-9)
    assert _ar(8).time(16.0) == pytest.approx(13.274e-6, abs=1e-9)
    assert _ar(6).time(16.0) == pytest.approx(14.092e-6, abs=1e-9)
    pcie = _ar(4, "pcie", 0.70 * 64e9, 18e-6)
    assert pcie.time(128.0) == pytest.approx(88.217e-6, abs=1e-9)
    assert pcie.time(1.0) == pytest.approx(18e-6 + 1.5 * HIDDEN_BYTES / (0.70 * 64e9))


def test_the_two_stage_rate_reproduces_vllms_measurements() -> None:
    """TWO_STAGE_LINK_FRACTION is the least-squares fit of vllm#24532's TP 4 ca_2stage rows
    (17 / 18 / 25 / 26 / 35 / 42 us at 0.5 / 1 / 1.5 / 2 / 3 / 4 MiB) with two latencies of
    6 us: x_i = 1.5 x S_i / 360e9, y_i = t_i - 12 us, 1 / f = sum(x y) / sum(x^2) -> 0.58; the
    form is then within 9 % of every row. vllm#24111's TP 6 symmetric-memory multimem rows
    (16 / 18 / 21 / 25 / 31 us at 1-4 MiB), what vLLM runs there above 512 KiB: the ring form
    within 8 %."""
    rows = ((0.5, 17e-6), (1, 18e-6), (1.5, 25e-6), (2, 26e-6), (3, 35e-6), (4, 42e-6))
    x = np.array([1.5 * mib * 2**20 / NVLINK for mib, _ in rows])
    y = np.array([t - 12e-6 for _, t in rows])
    assert float((x * x).sum() / (x * y).sum()) == pytest.approx(TWO_STAGE_LINK_FRACTION,
                                                                 abs=0.005)
    tp4 = _ar(4)
    for mib, measured in rows:
        tokens = mib * 2**20 / HIDDEN_BYTES
        assert tp4.time(tokens) == pytest.approx(measured, rel=0.09)
    tp6 = _ar(6)
    for mib, measured in ((1, 16e-6), (1.5, 18e-6), (2, 21e-6), (3, 25e-6), (4, 31e-6)):
        assert tp6.time(mib * 2**20 / HIDDEN_BYTES) == pytest.approx(measured, rel=0.08)


def test_the_step_charges_two_all_reduces_a_layer_by_size() -> None:
    """Llama-3.1-70B at TP 4 (80 layers, hidden 8192): 160 all-reduces a step. 10 us more of
    latency adds 160 x 10 us = 1.6 ms below the one-shot limit (16 decodes: 256 KiB) and
    160 x 20 us = 3.2 ms from it (128 decodes: 2 MiB, two latencies each, two-stage)."""
    base = VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-70B"), tensor_parallel_size=4)
    slow = dataclasses.replace(base, allreduce_latency_s=16e-6)
    for batch, added in ((16.0, 1.6e-3), (128.0, 3.2e-3)):
        args = (0.0, batch, batch * 1000.0, 0.0, 0.0)
        assert slow.step_time(*args) - base.step_time(*args) == pytest.approx(added, rel=1e-9)


def test_the_fused_moe_overhead_is_vllms_benchmark_less_the_expert_reads() -> None:
    """vllm#24700's Mixtral-8x7B H100 TP 2 kernel times (1-128 tokens) less the expected
    distinct experts (E (1 - (1 - k/E)^T): 2, 3.5, 5.47, 7.2, 7.92, ... of 8) of 176,160,768 B
    each at 0.90 x 3.35 TB/s: 27.2, 24.8, 31.6, 14.4, 8.7, 11.3, 20.0, 20.4, 15.7, 27.0,
    24.0 us, mean 20.5 us."""
    spec = get_model("Mixtral-8x7B")
    expert = spec.expert_weight_bytes(2)
    assert expert == 3 * 4096 * 14336 * 2 / 2
    distinct = {b: float(spec.expected_distinct_experts(float(b)))
                for b in FUSED_MOE_H100_MIXTRAL_TP2_US}
    assert distinct[1] == 2.0 and distinct[2] == pytest.approx(3.5)
    derived = fused_moe_overhead_from_benchmark(expert, distinct, 0.90 * 3.35e12)
    assert derived == pytest.approx(FUSED_MOE_OVERHEAD_S, abs=0.05e-6)


def test_the_moe_layer_overhead_follows_the_experts_format() -> None:
    """16-bit and FP8 experts (Triton fused_moe): 20.5 us a MoE layer; MXFP4 (gpt-oss): the
    FP8-KV blog's 70.3 us. Mixtral's 32 MoE layers then add 32 x 20.5 us = 0.656 ms a step."""
    h100 = get_gpu("H100-SXM")
    mixtral = VllmStepModel(h100, get_model("Mixtral-8x7B"), tensor_parallel_size=2)
    assert mixtral.moe_layer_overhead_s == FUSED_MOE_OVERHEAD_S
    assert VllmStepModel(h100, get_model("gpt-oss-20b")).moe_layer_overhead_s == (
        MOE_LAYER_OVERHEAD_S)
    none = dataclasses.replace(mixtral, moe_layer_overhead_s=0.0)
    args = (0.0, 16.0, 16_000.0, 0.0, 0.0)
    assert mixtral.step_time(*args) - none.step_time(*args) == pytest.approx(32 * 20.5e-6)
    # a file's (or a calibration's) value is kept
    assert dataclasses.replace(mixtral, moe_layer_overhead_s=5e-5).moe_layer_overhead_s == 5e-5


def test_dense_single_gpu_models_do_not_change() -> None:
    """No all-reduce and no MoE layer: the FP8-KV blog's batch-1 Llama-3.1-8B intercept (6.44
    ms, by construction) is what it was."""
    model = VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-8B"))
    assert model.step_time(0.0, 1.0, 1.0, 0.0, 0.0) == pytest.approx(6.44e-3, rel=0.005)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4096), min_size=1, max_size=16),
       st.sampled_from([2, 4, 8, 16]), st.sampled_from(["H100-SXM", "RTX-PRO-6000", "MI300X"]))
def test_floats_and_arrays_give_the_same_bits_across_the_limits(
        tokens: list[int], tp: int, gpu: str) -> None:
    model = VllmStepModel(get_gpu(gpu), get_model("Llama-3.1-70B"), tensor_parallel_size=tp)
    col = np.array([float(t) for t in tokens])
    zeros = np.zeros(len(tokens))
    arr = model.step_time(zeros, col, col * 500.0, zeros, zeros)
    for j, t in enumerate(tokens):
        assert model.step_time(0.0, float(t), t * 500.0, 0.0, 0.0) == arr[j]
    steps = model.decode_step_times(tokens[0] + 1, 100, 5)
    one_by_one = [model.step_time(0.0, float(tokens[0] + 1), 100.0 + k * (tokens[0] + 1), 0.0,
                                  0.0) for k in range(5)]
    assert steps.tolist() == one_by_one


def test_the_grouped_gemm_fractions_are_vllms_benchmark() -> None:
    """vllm#24700 at 256 / 512 / 1,024 / 1,536 tokens (536.77 / 662.33 / 833.72 / 1,122.93 us):
    less 20.5 us, the step model's smooth_max of all 8 experts' bytes (467.4 us at
    0.90 x 3.35 TB/s) and a compute time c: c = (T^4 - 467.4^4)^(1/4) = 390.8 / 590.9 / 790.1 /
    1,093.4 us for 512 / 1,024 / 2,048 / 3,072 (token, expert) pairs of 2 x 3 x 4096 x 7168
    FLOPs: 0.233 / 0.309 / 0.462 / 0.500 of 989.4 TFLOP/s, at 64 / 128 / 256 / 384 tokens per
    expert. The first is left out: its compute (390.8 us) is below the weights' read (467.4 us),
    so the time does not identify it; from 128 on compute exceeds the read."""
    spec = get_model("Mixtral-8x7B")
    memory_s = 8 * spec.expert_weight_bytes(2) / (0.90 * 3.35e12)
    got = fused_moe_gemm_fractions(spec.expert_weight_bytes(2), 0.90 * 3.35e12,
                                   2 * 3 * 4096 * 7168, 989.4e12)
    assert list(got) == [64.0, *MOE_GEMM_TOKENS_PER_EXPERT]
    assert got[64.0] == pytest.approx(0.233, abs=0.001)
    assert memory_s > 390.8e-6  # compute at 64 per expert: not identified
    for (_, fraction), relative in zip(list(got.items())[1:], MOE_GEMM_RELATIVE, strict=True):
        assert fraction == pytest.approx(relative * 0.80, abs=0.001)
    # linear between the points, flat outside: 192 tokens per expert, (0.309 + 0.462) / 2 / 0.8
    assert moe_gemm_relative_efficiency(192.0) == pytest.approx(0.481875)
    assert moe_gemm_relative_efficiency(1.0) == moe_gemm_relative_efficiency(128.0)
    assert moe_gemm_relative_efficiency(64.0) == pytest.approx(0.309 / 0.80)
    assert moe_gemm_relative_efficiency(4096.0) == pytest.approx(0.625)


def test_a_prefill_steps_expert_gemms_run_at_fused_moes_rate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixtral-8x7B at TP 2, a step of 8,192 prompt tokens (2,048 tokens per expert: the last
    published point's 0.625 of a dense GEMM's rate, held): the experts' GEMMs take 1 / 0.625 =
    1.6 times what a dense GEMM would, i.e. 8,192 x 2 x 32 x 2 x 3 x 4096 x 14336 / 2 =
    9.236e13 FLOPs x 0.6 / (989.4e12 x 0.80) = 70.0 ms more (the step is compute-bound:
    smooth_max is its GEMMs' time within 0.01 %). MXFP4 experts (gpt-oss) keep the dense rate."""
    import kvbudget.perf.step_time as st_mod

    h100 = get_gpu("H100-SXM")
    model = VllmStepModel(h100, get_model("Mixtral-8x7B"), tensor_parallel_size=2)
    gptoss = VllmStepModel(h100, get_model("gpt-oss-20b"))
    args = (8192.0, 0.0, 8192.0, 8192.0 * 8193 / 2, 1.0)
    slow, gptoss_step = model.step_time(*args), gptoss.step_time(*args)
    monkeypatch.setattr(st_mod, "moe_gemm_relative_efficiency", lambda x: x * 0.0 + 1.0)
    dense_rate = model.step_time(*args)
    expert_flops = 8192 * 2 * 32 * 2 * 3 * 4096 * 14336 / 2
    assert slow - dense_rate == pytest.approx(expert_flops * 0.6 / (989.4e12 * 0.80), rel=1e-3)
    assert slow - dense_rate == pytest.approx(70.0e-3, abs=0.1e-3)
    assert gptoss.step_time(*args) == gptoss_step


def test_the_docs_what_moved_table_gives_todays_steps() -> None:
    """docs/fidelity.md "What moved": the 'after' decode steps (700 tokens of context, H100) are
    what the step model gives now, to the 0.01 ms shown."""
    import re
    from pathlib import Path

    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.step_time import VllmStepModel

    doc = (Path(__file__).resolve().parents[3] / "docs" / "fidelity.md").read_text()
    section = doc.split("**What moved.**", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines()
            if line.startswith("| ") and "->" in line}
    h100 = get_gpu("H100-SXM")
    for label, name, tp in (("Llama-2-70B TP 4", "Llama-2-70B", 4),
                            ("Mixtral-8x7B TP 2", "Mixtral-8x7B", 2),
                            ("Qwen3-30B-A3B TP 1", "Qwen3-30B-A3B", 1)):
        model = VllmStepModel(h100, get_model(name), tensor_parallel_size=tp)
        now = [round(model.step_time(0.0, float(n), n * 700.0, 0.0, 0.0) * 1e3, 2)
               for n in (1, 16, 32, 64, 128, 256)]
        shown = [float(v) for v in re.findall(r"-> ([\d.]+)", rows[label])]
        assert shown == now, (label, now)
