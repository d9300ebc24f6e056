"""What tensor parallelism and MoE layers cost a vLLM step, from published kernel measurements.

**All-reduce by message size.** vLLM reduces a tensor-parallel layer's output with its own
custom all-reduce below a size limit and with (torch symmetric-memory or NCCL) collectives above
it (vLLM 0.32.0, ``distributed/device_communicators/cuda_communicator.py:362-440``: the custom
all-reduce when ``CustomAllreduce.should_custom_ar``, ``custom_all_reduce.py:499-513``, else
symmetric memory, else pynccl). The custom kernel has two algorithms
(``csrc/custom_all_reduce.cuh``, ``CustomAllreduce::allreduce``'s ``REDUCE_CASE``):

* **one-shot** (``cross_device_reduce_1stage``): every GPU reads the whole message from each of
  the ``n - 1`` others and sums it: ``latency + (n - 1) x bytes / link``. Always at TP 2; on
  fully NVLinked GPUs below 512 KiB at TP <= 4 and below 256 KiB at TP <= 8;
* **two-stage** (``cross_device_reduce_2stage``: a reduce-scatter and an all-gather, two
  barrier rounds): ``2 x latency + 2 (n - 1) / n x bytes / (link x 0.58)``, the ring's traffic
  at the rate vLLM's TP 4 measurements of it show (:data:`TWO_STAGE_LINK_FRACTION`).

Above the custom kernel's limit (8 MiB at TP <= 4, ``max_size=8192 * 1024``,
``custom_all_reduce.py:141``; Hopper's ``CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]``, 512 KiB at TP 6
and 256 KiB at TP 8, ``all_reduce_utils.py:31-37``) vLLM reduces with torch symmetric memory
(two-shot at TP 2 and 4, multimem at TP 6 and 8, vllm PR #20759) or NCCL:
``2 x latency + 2 (n - 1) / n x bytes / link``. GPUs on PCIe run the custom kernel at TP 2
only (``should_custom_ar``: "world_size == 2 or fully_connected"); beyond, NCCL's ring with
one latency: ``latency + 2 (n - 1) / n x bytes / link``.

The latency (``allreduce_latency_s``, 6 us on NVLink) and the link's achieved fraction
(``link_efficiency``, 0.80) are the step model's constants; the one-shot form reproduces vLLM's
own H100 measurements of the custom kernel (``benchmarks/kernels/benchmark_device_communicators.py``,
bf16, hidden 8192): TP 2 at 0.5 MiB 7 us (vllm PR #24111; the form gives 7.5), TP 4 at
0.5 / 1 / 2 / 4 MiB 10 / 14 / 23 / 38 us (PR #24532; 10.4 / 14.7 / 23.5 / 41.0), TP 6 at
0.5 MiB 13 us (PR #24111; 13.3). docs/fidelity.md ("TP and MoE steps") has the checks of the
two-shot form.

**MoE layers.** :data:`MOE_LAYER_OVERHEAD_S` by the experts' weight format: what an MoE layer's
kernels take beyond reading the experts it touches at the streaming rate. For 16-bit and FP8
experts vLLM runs its Triton ``fused_moe`` on Hopper (``fused_moe/oracle/unquantized.py:76-80``
prefers it to FlashInfer there) with tuned block sizes per shape
(``fused_moe/configs/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json`` for Mixtral-8x7B at
TP 2); vllm PR #24700 publishes that kernel's times on H100 by batch (``benchmark_moe.py``, tuned
config): 144 / 229 / 351 / 435 / 471 / 478 / 487 / 488 / 483 / 494 / 491 us at 1, 2, 4, 8, 16,
24, 32, 48, 64, 96, 128 tokens. Less the expected distinct experts' bytes at 0.90 x 3.35 TB/s
(the model's weight read), 8.7-31.6 us remain, 20.5 us on average: :data:`FUSED_MOE_OVERHEAD_S`.
MXFP4 experts (gpt-oss) go through other kernels on Hopper (``oracle/mxfp4.py:614``,
``select_mxfp4_moe_backend``); for them the step model keeps the figure derived from the FP8-KV
blog's gpt-oss-20b intercept (``step_time.MOE_LAYER_OVERHEAD_S``).

Every function here is element-wise arithmetic with a selection (the same IEEE operations for
floats and numpy arrays, so both give the same bits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

F = TypeVar("F", float, npt.NDArray[np.float64])

KIB = 1024
MIB = 1024 * 1024
CUSTOM_AR_MAX_BYTES = 8 * MIB
"""vLLM's custom all-reduce's limit (``custom_all_reduce.py:141``, ``max_size=8192 * 1024``;
Hopper's ``CUSTOM_ALL_REDUCE_MAX_SIZES`` of 64 / 32 MiB at TP 2 / 4 do not lower it)."""


def one_shot_limit_bytes(tensor_parallel_size: int, interconnect: str) -> float:
    """Messages below this many bytes are reduced in one shot (``csrc/custom_all_reduce.cuh``,
    ``REDUCE_CASE``: TP 2 always, within the kernel's 8 MiB; fully connected GPUs (NVLink,
    xGMI) below 512 KiB at TP <= 4 and 256 KiB at TP <= 8); 0 where vLLM does not run its custom
    kernel (PCIe beyond TP 2, TP > 8)."""
    tp = tensor_parallel_size
    if tp == 2:
        return float(CUSTOM_AR_MAX_BYTES)
    if interconnect == "pcie" or tp > 8:
        return 0.0
    return float(512 * KIB if tp <= 4 else 256 * KIB)


def custom_limit_bytes(tensor_parallel_size: int, interconnect: str) -> float:
    """Messages below this many bytes go through vLLM's custom kernel (one-shot or two-stage):
    its 8 MiB ``max_size`` (``custom_all_reduce.py:141``) at TP <= 4, lowered on Hopper to
    ``CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"]``'s 512 KiB at TP 6 and 256 KiB at TP 8
    (``all_reduce_utils.py:31-37``, ``custom_all_reduce.py:240-255``); above it, symmetric
    memory or NCCL. 0 where the custom kernel does not run."""
    tp = tensor_parallel_size
    if one_shot_limit_bytes(tp, interconnect) == 0.0:
        return 0.0
    return float(CUSTOM_AR_MAX_BYTES if tp <= 4 else 512 * KIB if tp <= 6 else 256 * KIB)


TWO_STAGE_LINK_FRACTION = 0.58
"""The custom kernel's two-stage algorithm moves the ring's bytes at this fraction of the rate
the one-shot reaches: the least-squares fit, with two latencies of 6 us, of vLLM's own TP 4
measurements (vllm PR #24532, ``benchmark_device_communicators.py``, bf16, hidden 8192,
``ca_2stage``: 17 / 18 / 25 / 26 / 35 / 42 us at 0.5 / 1 / 1.5 / 2 / 3 / 4 MiB) against
``2 (n - 1) / n x bytes / (0.80 x 450 GB/s)``."""


@dataclass(frozen=True, slots=True)
class AllReduceCost:
    """One tensor-parallel all-reduce of ``tokens`` hidden states, in seconds: one-shot below
    :attr:`one_shot_tokens`, the custom kernel's two-stage below :attr:`custom_tokens`, from
    there symmetric memory or NCCL (the module docstring)."""

    one_shot_tokens: float
    custom_tokens: float
    one_shot_latency_s: float
    one_shot_per_token_s: float
    two_stage_per_token_s: float
    ring_latency_s: float
    ring_per_token_s: float

    @classmethod
    def of(cls, tensor_parallel_size: int, interconnect: str, latency_s: float,
           link_bytes_s: float, bytes_per_token: float) -> AllReduceCost:
        """The cost of ``tensor_parallel_size`` GPUs on ``interconnect`` reducing
        ``bytes_per_token`` a token, the link carrying ``link_bytes_s`` per direction."""
        n = tensor_parallel_size
        one_shot = one_shot_limit_bytes(n, interconnect)
        ring = 2.0 * (n - 1) / n * bytes_per_token / link_bytes_s
        return cls(
            one_shot_tokens=one_shot / bytes_per_token,
            custom_tokens=max(one_shot, custom_limit_bytes(n, interconnect)) / bytes_per_token,
            one_shot_latency_s=latency_s,
            one_shot_per_token_s=(n - 1) * bytes_per_token / link_bytes_s,
            two_stage_per_token_s=ring / TWO_STAGE_LINK_FRACTION,
            # two barrier rounds (two-stage, symmetric memory's two-shot); NCCL's ring alone
            ring_latency_s=2.0 * latency_s if one_shot > 0.0 else latency_s,
            ring_per_token_s=ring,
        )

    def time(self, tokens: F) -> F:
        """Seconds to reduce ``tokens`` tokens' hidden states."""
        one = self.one_shot_latency_s + self.one_shot_per_token_s * tokens
        two = self.ring_latency_s + self.two_stage_per_token_s * tokens
        ring = self.ring_latency_s + self.ring_per_token_s * tokens
        if isinstance(tokens, float):
            if tokens < self.one_shot_tokens:
                return one
            return two if tokens < self.custom_tokens else ring
        result: F = np.where(tokens < self.one_shot_tokens, one,
                             np.where(tokens < self.custom_tokens, two, ring))
        return result


# --- MoE layers -------------------------------------------------------------------------------
# vllm PR #24700 (mgoin, 2025-09-11), benchmark_moe.py on H100, Mixtral-8x7B bf16 at TP 2
# (E=8, N=7168), the tuned config: kernel microseconds by batch size
FUSED_MOE_H100_MIXTRAL_TP2_US = {1: 144.03, 2: 229.28, 4: 351.10, 8: 434.98, 16: 471.49,
                                 24: 478.27, 32: 487.35, 48: 487.85, 64: 483.14, 96: 494.42,
                                 128: 491.39}
FUSED_MOE_OVERHEAD_S = 20.5e-6
"""A 16-bit or FP8 MoE layer's kernels beyond their expert reads: the mean over
:data:`FUSED_MOE_H100_MIXTRAL_TP2_US` of the time less the expected distinct experts' bytes
(176,160,768 each on one of two GPUs) at 0.90 x 3.35 TB/s (8.7-31.6 us; the
known-answer test recomputes it)."""


def fused_moe_overhead_from_benchmark(expert_bytes: float, distinct: dict[int, float],
                                      bytes_s: float) -> float:
    """The mean of ``time - distinct experts x expert_bytes / bytes_s`` over
    :data:`FUSED_MOE_H100_MIXTRAL_TP2_US` (``distinct``: the expected distinct experts of each
    batch size), in seconds: how :data:`FUSED_MOE_OVERHEAD_S` is derived."""
    rest = [t * 1e-6 - distinct[b] * expert_bytes / bytes_s
            for b, t in FUSED_MOE_H100_MIXTRAL_TP2_US.items()]
    return sum(rest) / len(rest)


# the same benchmark's larger batches (vllm PR #24700): 536.77 / 662.33 / 833.72 / 1,122.93 us at
# 256 / 512 / 1,024 / 1,536 tokens, i.e. 64 / 128 / 256 / 384 tokens per expert (top-2 of 8)
FUSED_MOE_H100_MIXTRAL_TP2_LARGE_US = {256: 536.77, 512: 662.33, 1024: 833.72, 1536: 1122.93}
H100_GEMM_FRACTION = 0.80
"""H100's large-GEMM fraction of dense peak (the preset's ``gemm_efficiency``, torch.mm)."""


def fused_moe_gemm_fractions(expert_bytes: float, bytes_s: float, flops_per_pair: float,
                             peak_flops: float) -> dict[float, float]:
    """Tokens per expert -> the fraction of ``peak_flops`` the grouped GEMMs reach, from
    :data:`FUSED_MOE_H100_MIXTRAL_TP2_LARGE_US`: each time less :data:`FUSED_MOE_OVERHEAD_S` is
    the step model's ``smooth_max(compute, memory)`` of all 8 experts' bytes at ``bytes_s``,
    so ``compute = (T^4 - memory^4)^(1/4)``, against ``tokens x 2`` (token, expert) pairs of
    ``flops_per_pair``: 0.233 / 0.309 / 0.462 / 0.500 of H100's peak."""
    memory = 8 * expert_bytes / bytes_s
    out: dict[float, float] = {}
    for tokens, micros in FUSED_MOE_H100_MIXTRAL_TP2_LARGE_US.items():
        total = micros * 1e-6 - FUSED_MOE_OVERHEAD_S
        compute = (total**4 - memory**4) ** 0.25
        out[tokens * 2 / 8] = tokens * 2 * flops_per_pair / compute / peak_flops
    return out


# tokens per expert -> fused_moe's grouped-GEMM efficiency relative to a dense GEMM's (the
# fractions above over H100_GEMM_FRACTION); the known-answer test recomputes them
MOE_GEMM_TOKENS_PER_EXPERT = (64.0, 128.0, 256.0, 384.0)
MOE_GEMM_RELATIVE = (0.233 / H100_GEMM_FRACTION, 0.309 / H100_GEMM_FRACTION,
                     0.462 / H100_GEMM_FRACTION, 0.500 / H100_GEMM_FRACTION)


def moe_gemm_relative_efficiency(tokens_per_expert: F) -> F:
    """The routed experts' GEMMs' efficiency as a fraction of the GPU's ``gemm_efficiency``,
    by tokens per expert: vllm#24700's Mixtral-8x7B H100 points (:data:`MOE_GEMM_RELATIVE`),
    linear between them, held flat outside (below 64 tokens per expert the experts' weights
    bound the kernel and the compute term hardly counts; above 384 no figure was published)."""
    xs, ys = MOE_GEMM_TOKENS_PER_EXPERT, MOE_GEMM_RELATIVE
    if isinstance(tokens_per_expert, float):
        return float(np.interp(tokens_per_expert, xs, ys))
    result: F = np.interp(tokens_per_expert, xs, ys)
    return result

