"""The default step-time model: vLLM v1 on one GPU and model, from physics and public measurements.

One engine step (``t`` seconds) is modelled as

    t = step_overhead_s + num_layers * layer_overhead_s + num_moe_layers * moe_layer_overhead_s
        + smooth_max(gemm_flops / (peak * gemm_efficiency),  weight_bytes / (bw * mem_efficiency))
        + smooth_max(attn_flops / (peak * attention_efficiency), kv_bytes / (bw * mem_efficiency))
        + communication

* **GEMMs against their weights.** ``gemm_flops`` are the matmul FLOPs of the step's tokens
  (``ModelSpec.flops_per_token`` per token, the LM head only for the tokens that are sampled:
  decodes and the last token of each prefill chunk), split over the tensor-parallel ranks.
  ``weight_bytes`` are the bytes of weights one GPU reads: the dense weights (less the input
  embedding table, of which a step reads only its tokens' rows) plus, for MoE layers, the
  experts the step's tokens touch (``ModelSpec.expected_distinct_experts`` of the step's tokens,
  each expert once), under expert parallelism the experts of this GPU only. The routed experts'
  FLOPs (16-bit and FP8 experts: vLLM's Triton ``fused_moe``) run at ``gemm_efficiency`` times
  :func:`~kvbudget.perf.parallel_costs.moe_gemm_relative_efficiency` of their tokens per
  expert (vllm#24700's H100 kernel times: 0.39-0.63 of a dense GEMM's rate at 128-384).
* **Attention against the KV cache.** ``attn_flops`` are the score and value FLOPs of prefill
  chunks (``prefill_attention`` pairs); ``kv_bytes`` the KV every scheduled sequence reads
  (``num_context_tokens`` times the KV bytes of a token on one GPU; sliding-window layers read
  at most their window per sequence).
* The two kernel classes run one after the other, each as fast as its slower resource allows;
  ``smooth_max(a, b) = (a^4 + b^4)^(1/4)`` (1.19x the max where the two are equal, the max away
  from it): a GEMM or attention kernel near its ridge point reaches neither roof.
* **Communication** with tensor parallelism: two all-reduces per layer (Megatron-style: after
  the attention's output projection and after the MLP's down projection) of the step's hidden
  states, each priced by vLLM's algorithm for its size
  (:class:`~kvbudget.perf.parallel_costs.AllReduceCost`): one-shot, ``allreduce_latency_s +
  (n-1) * bytes / (link_efficiency * link bandwidth)``, below the custom all-reduce's one-shot
  limit; two-shot, ``2 * allreduce_latency_s + 2 (n-1)/n * bytes / (...)`` (the ring's
  traffic), above it; with expert parallelism, an all-to-all dispatch and combine per MoE
  layer of each token's ``top_k`` hidden states.
* **Overheads.** ``step_overhead_s`` is the host's gap between two GPU steps with CUDA graphs
  and async scheduling (vLLM PR #11133: 150-170 us); ``layer_overhead_s`` the per-layer cost of
  kernel launches and the small kernels (norms, rotary, activation, sampling) that a roofline of
  GEMMs and attention leaves out. It is derived from one published measurement (the intercept of
  vLLM's FP8-KV blog's decode fit, Llama-3.1-8B on H100, 6.44 ms at batch 1, less the model's own
  weight reading time and the step gap, per layer); docs/fidelity.md has the derivation and the
  check against the blog's B200 figure. ``moe_layer_overhead_s`` is what an MoE layer adds to
  that (routing, token permutation, grouped GEMM launches), from the same blog's gpt-oss-20b
  intercept on H100 (4.05 ms), checked against its B200 figure, for MXFP4 experts; 16-bit and
  FP8 experts run vLLM's Triton ``fused_moe``, whose published H100 times give 20.5 us
  (:data:`~kvbudget.perf.parallel_costs.FUSED_MOE_OVERHEAD_S`).

Every default constant names its source in docs/fidelity.md ("Step-time model").
:attr:`VllmStepModel.FIT_PARAMETERS` names the floats a calibration may change (with
``dataclasses.replace``); :func:`kvbudget.perf.cost_model.save_cost_model` writes the model and
:func:`kvbudget.perf.cost_model.load_cost_model` reads it back.

``step_time`` uses element-wise arithmetic only (``+ - * /`` and ``sqrt``, which IEEE rounds
correctly), so floats and numpy arrays give the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import GPUSpec, get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.parallel_costs import (
    FUSED_MOE_OVERHEAD_S,
    AllReduceCost,
    moe_gemm_relative_efficiency,
)
from kvbudget.perf.step_features import decode_step_times

if TYPE_CHECKING:
    from kvbudget.perf.models import ModelSpec

F = TypeVar("F", float, npt.NDArray[np.float64])

# --- default constants (sources: docs/fidelity.md, "Step-time model") -----------------------
STEP_OVERHEAD_S = 150e-6  # vLLM PR #11133: step gap 150-170 us with async scheduling + graphs
# FlashAttention-2 paper: 50-73 % of peak on A100; FlashAttention-3: up to 75 % on H100. vLLM's
# chunked, paged prefill runs shorter sequences than the papers' benchmarks: the lower end. A
# GPU with its own measurement (GPUSpec.attention_efficiency: H20's 0.83) uses that instead.
# FlashAttention's benchmarks count a causal pass as half the pairs (flash-attention 0251105,
# benchmarks/benchmark_flash_attention.py:29, hopper/benchmark_attn.py:63-64); step_time divides
# the fraction into c (p + c) pairs a chunk, each chunk's triangle in full: counting the causal
# pairs instead raised the fidelity benchmarks' errors (docs/fidelity.md, "Achievable fractions").
ATTENTION_EFFICIENCY = 0.50
ALLREDUCE_LATENCY_S = {  # per all-reduce, small messages
    "nvlink": 6e-6,  # NVIDIA/nccl#1259: ~6 us with 2 GPUs, CUDA graphs (vLLM captures them)
    "xgmi": 6e-6,  # no public MI300X figure found: NVLink's
    "pcie": 18e-6,  # no public PCIe figure found: the eager-mode floor on H20 (Mooncake #3484)
}
LINK_EFFICIENCY = {  # achieved fraction of per-direction link bandwidth, large messages
    "nvlink": 0.80,  # NCCL all-reduce busbw: A100 ~230/300 GB/s (nccl-tests#149), H20 358/450
    "xgmi": 0.80,
    "pcie": 0.70,  # H100 host link: 35 (H2D) and 52.8 (D2H) of 64 GB/s (nvbandwidth#24)
}
# the FP8-KV blog's decode fit (vLLM 0.19.1, Llama-3.1-8B, H100, BF16 KV, concurrency 1):
# ITL = 6.44 ms + 4.37e-5 ms per context token
BLOG_H100_INTERCEPT_S = 6.44e-3
# Llama-3.1-8B bf16: 16,060,522,496 B of safetensors less the 128,256 x 4,096 input embeddings
_BLOG_H100_WEIGHT_READ_BYTES = 16_060_522_496 - 2 * 128_256 * 4_096
_BLOG_LLAMA8B_LAYERS = 32
_BLOG_H100_BANDWIDTH = 3.35e12 * 0.90
LAYER_OVERHEAD_S = (
    BLOG_H100_INTERCEPT_S - STEP_OVERHEAD_S - _BLOG_H100_WEIGHT_READ_BYTES / _BLOG_H100_BANDWIDTH
) / _BLOG_LLAMA8B_LAYERS  # ~41 us per layer
ACTIVATION_BYTES = 2  # bf16 hidden states on the wire
EXPERT_TABLE_SIZE = 1 << 15  # tokens a step may schedule, tabulated for MoE weight reads
ATTENTION_TABLE_SIZE = 1 << 18
"""A dense model tabulates its pure-decode attention term by context (tokens) below this, as
the decode runs reach them (an array grown to the next power of two: at most 2 MB); a larger
context's term is computed as it comes."""
# the same blog's gpt-oss-20b fit on H100: ITL ~4.05 ms at context 0 (4.03-4.07); the model
# without an MoE term gives 2.364 ms (weights read, step gap, 24 x layer_overhead_s), so its
# 24 MoE layers add (4.05 - 2.364) / 24 = 70 us each
BLOG_H100_GPTOSS20B_INTERCEPT_S = 4.05e-3
MOE_LAYER_OVERHEAD_S = (BLOG_H100_GPTOSS20B_INTERCEPT_S - 2.3636e-3) / 24
"""An MXFP4 MoE layer's (gpt-oss); 16-bit and FP8 experts: ``FUSED_MOE_OVERHEAD_S``."""
# Paged decode attention streams the KV cache below the streaming-read fraction: the same
# blog's concurrency-8 run (Llama-3.1-8B, H100, ~20,000 input + ~2,000 output tokens, BF16 KV)
# has a median ITL of 15.18 ms; less the batch-1 intercept (6.44 ms: weights and overheads),
# 8.74 ms read 8 x 21,000 tokens x 128 KiB = 22.0 GB: 2.52 TB/s, 0.752 of 3.35 TB/s, i.e.
# 0.835 of the 0.90 streaming fraction.
BLOG_H100_CONC8_ITL_S = 15.18e-3
KV_READ_FACTOR = (8 * 21_000 * 131_072 / (BLOG_H100_CONC8_ITL_S - BLOG_H100_INTERCEPT_S)) / (
    3.35e12 * 0.90
)


def _smooth_max(a: F, b: F) -> F:
    """``(a^4 + b^4)^(1/4)`` with products and square roots only (same bits for floats and
    arrays)."""
    a2 = a * a
    b2 = b * b
    s = a2 * a2 + b2 * b2
    if isinstance(s, float):
        return math.sqrt(math.sqrt(s))
    result: F = np.sqrt(np.sqrt(s))
    return result


@dataclass(frozen=True, slots=True)
class _Terms:
    """What a step's time needs of the model, the GPU and the parallelism, whatever the batch
    (computed once per step model)."""

    gemm_flops_per_token: float
    lm_head_flops: float
    gemm_flops_s: float
    expert_flops_per_token: float  # the routed experts' share of gemm_flops_per_token
    expert_share: float  # tokens per expert per token: top_k / num_experts
    attn_flops_per_pair: float
    attn_flops_s: float
    dense_read_bytes: float
    expert_bytes: float
    num_moe_layers: int
    local_experts: float
    ep_share: float
    kv_full_per_token: float
    kv_sliding_per_token: float
    sliding_window: float
    bytes_s: float
    kv_bytes_s: float
    overhead_s: float
    num_allreduces: int
    allreduce: AllReduceCost | None
    comm_per_step_s: float
    comm_per_token_s: float


MAX_OVERHEAD_S = 1.0
"""The largest fixed time a step, a layer or an all-reduce may add: a second, a thousand times
what vLLM's steps measure (about 0.1-1 ms); beyond it a step model would simulate for ages."""


@dataclass(frozen=True, slots=True)
class VllmStepModel:
    """vLLM v1's step time on ``gpu`` for ``model`` (see the module docstring).

    ``mem_efficiency``, ``gemm_efficiency`` and ``attention_efficiency`` default to the GPU's
    (``GPUSpec``; :data:`ATTENTION_EFFICIENCY` where it has no attention measurement);
    ``moe_layer_overhead_s`` to the experts' kernel's (``FUSED_MOE_OVERHEAD_S`` for 16-bit and
    FP8 experts, :data:`MOE_LAYER_OVERHEAD_S` for MXFP4); the other constants to the module's
    sourced values.
    """

    gpu: GPUSpec
    model: ModelSpec
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    mem_efficiency: float = math.nan
    kv_mem_efficiency: float = math.nan
    gemm_efficiency: float = math.nan
    attention_efficiency: float = math.nan
    step_overhead_s: float = STEP_OVERHEAD_S
    layer_overhead_s: float = LAYER_OVERHEAD_S
    moe_layer_overhead_s: float = math.nan
    allreduce_latency_s: float = math.nan
    link_efficiency: float = math.nan
    source: str = "defaults"
    _terms: _Terms = field(init=False, repr=False, compare=False)
    _experts_table: list[float] = field(init=False, repr=False, compare=False)
    _experts_array: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)
    _dense: _DenseTerms | None = field(init=False, repr=False, compare=False)
    # a dense model's pure-decode terms as runs need them: by batch size, and by context (an
    # array replaced by a longer one, never changed in place)
    _decode_fixed: dict[int, float] = field(init=False, repr=False, compare=False)
    _attention: npt.NDArray[np.float64] = field(init=False, repr=False, compare=False)
    # verify steps' attention term by context for chunks of ``q`` tokens, by ``q``
    _chunk_attention: dict[int, npt.NDArray[np.float64]] = field(
        init=False, repr=False, compare=False)
    # and their overhead and weights' term by (requests, q)
    _chunk_fixed: dict[tuple[int, int], float] = field(init=False, repr=False, compare=False)

    KIND: ClassVar[str] = "vllm-v1"
    FIT_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "mem_efficiency",
        "kv_mem_efficiency",
        "gemm_efficiency",
        "attention_efficiency",
        "step_overhead_s",
        "layer_overhead_s",
        "moe_layer_overhead_s",
        "allreduce_latency_s",
        "link_efficiency",
    )

    def __post_init__(self) -> None:
        g = self.gpu
        tp, ep = self.tensor_parallel_size, self.expert_parallel_size
        if tp < 1 or ep < 1:
            raise ValueError(
                f"tensor_parallel_size and expert_parallel_size must be >= 1, got {tp}, {ep}"
            )
        if math.isnan(self.mem_efficiency):
            object.__setattr__(self, "mem_efficiency", float(g.achievable_bandwidth_fraction))
        defaults = {
            "kv_mem_efficiency": min(1.0, self.mem_efficiency * KV_READ_FACTOR),
            "gemm_efficiency": g.achievable_gemm_fraction,
            "attention_efficiency": (ATTENTION_EFFICIENCY if g.attention_efficiency is None
                                     else g.attention_efficiency),
            # Triton fused_moe for 16-bit and FP8 experts; MXFP4's (a dense model never reads
            # it and keeps that one, as its summaries always showed)
            "moe_layer_overhead_s": (FUSED_MOE_OVERHEAD_S if self.model.moe is not None
                                     and self.model.weight_dtype != "mxfp4"
                                     else MOE_LAYER_OVERHEAD_S),
            "allreduce_latency_s": ALLREDUCE_LATENCY_S[g.interconnect],
            "link_efficiency": LINK_EFFICIENCY[g.interconnect],
        }
        for name, value in defaults.items():
            if math.isnan(getattr(self, name)):
                object.__setattr__(self, name, float(value))
        for name in ("mem_efficiency", "kv_mem_efficiency", "gemm_efficiency",
                     "attention_efficiency", "link_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"step model {name} must be in (0, 1], got {value!r}")
        for name in ("step_overhead_s", "layer_overhead_s", "moe_layer_overhead_s",
                     "allreduce_latency_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"step model {name} must be >= 0, got {value!r}")
            if value > MAX_OVERHEAD_S:
                raise ValueError(f"step model {name} must be <= {MAX_OVERHEAD_S:g} s (a "
                                 f"thousand times any measured engine's), got {value!r}")
        object.__setattr__(self, "_terms", self._compute_terms())
        # experts read per step for 0 .. EXPERT_TABLE_SIZE - 1 tokens, computed once: floats
        # and arrays then read the same values (and a step costs a lookup, not a power)
        size = EXPERT_TABLE_SIZE if self._terms.num_moe_layers else 0  # dense: never read
        table = self._experts_exact(np.arange(size, dtype=np.float64))
        object.__setattr__(self, "_experts_array", table)
        object.__setattr__(self, "_experts_table", table.tolist())
        object.__setattr__(self, "_dense", _DenseTerms.of(self._terms))
        object.__setattr__(self, "_decode_fixed", {})
        object.__setattr__(self, "_attention", np.zeros(0, np.float64))
        object.__setattr__(self, "_chunk_attention", {})
        object.__setattr__(self, "_chunk_fixed", {})

    def _compute_terms(self) -> _Terms:
        g, m = self.gpu, self.model
        tp, ep = self.tensor_parallel_size, self.expert_parallel_size
        peak = g.peak_flops(m.weight_dtype)
        attn_peak = g.peak_flops("bf16")
        embed = m.vocab_size * m.hidden_size * m.dtype_bytes / tp  # embeddings stay 16-bit
        lm_head = 2.0 * m.vocab_size * m.hidden_size / tp
        moe = m.moe
        expert_flops = share = 0.0  # fused_moe's grouped GEMMs (not MXFP4's kernels)
        if moe is not None and m.weight_dtype != "mxfp4":
            expert_flops = (2.0 * moe.num_moe_layers * moe.num_experts_per_tok * 3
                            * m.hidden_size * moe.expert_intermediate_size / tp)
            share = moe.num_experts_per_tok / moe.num_experts
        if moe is not None:
            dense = m.dense_weight_bytes(tp)
            # one touched expert's bytes on this GPU: its 1/tp slice, or all of it under EP
            expert = m.expert_weight_bytes(tp, enable_expert_parallel=ep > 1)
            num_moe_layers = moe.num_moe_layers
            local = moe.num_experts / ep
        else:
            dense = m.weight_bytes(tp)
            expert, num_moe_layers, local = 0.0, 0, 0.0
        # tied embeddings: the table is the LM head, read whole every step
        read = dense if getattr(m, "tie_word_embeddings", False) else dense - embed
        full, sliding = m.kv_bytes_per_token_full_and_sliding(tp, self.kv_cache_dtype)
        window = float(m.sliding_window) if m.sliding_window and sliding else math.inf
        layers = m.num_layers
        comm_step = comm_token = 0.0
        link = g.link_bandwidth_bytes_s * self.link_efficiency
        allreduce = None
        if tp > 1:  # two a layer: the attention's output projection's and the MLP's
            allreduce = AllReduceCost.of(tp, g.interconnect, self.allreduce_latency_s, link,
                                         m.hidden_size * ACTIVATION_BYTES)
        if moe is not None and ep > 1:
            share = (ep - 1) / ep
            comm_step += 2 * num_moe_layers * self.allreduce_latency_s
            comm_token += (
                2 * num_moe_layers * moe.num_experts_per_tok * m.hidden_size
                * ACTIVATION_BYTES * share / link
            )
        return _Terms(
            gemm_flops_per_token=m.flops_per_token() / tp - lm_head,
            lm_head_flops=lm_head,
            gemm_flops_s=peak * self.gemm_efficiency,
            expert_flops_per_token=expert_flops,
            expert_share=share,
            attn_flops_per_pair=m.attention_flops_per_token_pair() / tp,
            attn_flops_s=attn_peak * self.attention_efficiency,
            dense_read_bytes=read,
            expert_bytes=expert,
            num_moe_layers=num_moe_layers,
            local_experts=local,
            ep_share=1.0 / ep,
            kv_full_per_token=float(full),
            kv_sliding_per_token=float(sliding),
            sliding_window=window,
            bytes_s=g.hbm_bandwidth_bytes_s * self.mem_efficiency,
            kv_bytes_s=g.hbm_bandwidth_bytes_s * self.kv_mem_efficiency,
            overhead_s=self.step_overhead_s + layers * self.layer_overhead_s
            + num_moe_layers * self.moe_layer_overhead_s,
            num_allreduces=2 * layers if allreduce is not None else 0,
            allreduce=allreduce,
            comm_per_step_s=comm_step,
            comm_per_token_s=comm_token,
        )

    def step_time(
        self,
        num_prefill_tokens: F,
        num_decode_seqs: F,
        num_context_tokens: F,
        prefill_attention: F,
        num_prefill_seqs: F,
    ) -> F:
        k = self._dense
        if (k is not None and type(num_decode_seqs) is float and type(num_context_tokens) is float
                and type(num_prefill_tokens) is float and type(prefill_attention) is float
                and type(num_prefill_seqs) is float):
            # a dense model on one GPU in Python floats (stepping makes one such call a step):
            # the general path's operations, in its order, without its attribute reads
            if (num_prefill_tokens == 0.0 and prefill_attention == 0.0
                    and num_prefill_seqs == 0.0 and -math.inf < num_decode_seqs < math.inf):
                return k.fixed(num_decode_seqs) + k.attention(num_context_tokens)
            return k.step(num_prefill_tokens, num_decode_seqs, num_context_tokens,
                          prefill_attention, num_prefill_seqs)
        c = self._terms
        tokens = num_prefill_tokens + num_decode_seqs
        sampled = num_decode_seqs + num_prefill_seqs
        gemm_c = (c.gemm_flops_per_token * tokens + c.lm_head_flops * sampled) / c.gemm_flops_s
        if c.num_moe_layers:
            if c.expert_flops_per_token:
                # the routed experts' GEMMs at fused_moe's efficiency for their tokens per
                # expert (parallel_costs.moe_gemm_relative_efficiency)
                rel = moe_gemm_relative_efficiency(tokens * c.expert_share)
                gemm_c = gemm_c + c.expert_flops_per_token * tokens * (1.0 / rel - 1.0) / (
                    c.gemm_flops_s)
            gemm_m = (c.dense_read_bytes + c.expert_bytes * self._experts_read(tokens)) / c.bytes_s
        else:
            gemm_m = c.dense_read_bytes / c.bytes_s + tokens * 0.0
        attn_c = c.attn_flops_per_pair * prefill_attention / c.attn_flops_s
        kv = c.kv_full_per_token * num_context_tokens
        if c.kv_sliding_per_token:
            kv = kv + c.kv_sliding_per_token * _minimum(
                num_context_tokens, c.sliding_window * (num_decode_seqs + num_prefill_seqs)
            )
        attn_m = kv / c.kv_bytes_s
        t = c.overhead_s + _smooth_max(gemm_c, gemm_m) + _smooth_max(attn_c, attn_m)
        if c.allreduce is not None:
            t = t + c.num_allreduces * c.allreduce.time(tokens)
        if c.comm_per_step_s or c.comm_per_token_s:
            t = t + (c.comm_per_step_s + c.comm_per_token_s * tokens)
        return t

    def decode_step_times(
        self, num_decode_seqs: int, first_context: int, num_steps: int
    ) -> npt.NDArray[np.float64]:
        """:meth:`step_time` of ``num_steps`` pure-decode steps of ``num_decode_seqs`` requests,
        the first attending to ``first_context`` tokens, each next to ``num_decode_seqs`` more:
        an array with the bits of one call per step (:meth:`decode_terms`' table where it
        serves, else :func:`~kvbudget.perf.step_features.decode_step_times`)."""
        stop = first_context + num_decode_seqs * num_steps
        terms = self.decode_terms(num_decode_seqs, stop)
        if terms is not None:
            times: npt.NDArray[np.float64] = terms[0] + terms[1][first_context:stop:num_decode_seqs]
            return times
        return decode_step_times(self.step_time, num_decode_seqs, first_context, num_steps)

    def decode_times_at(self, num_decode_seqs: int,
                        context: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``step_time(0.0, num_decode_seqs, context, 0.0, 0.0)`` of pure-decode steps, one a
        ``context``, with the bits of one call per step."""
        return self._times_at(num_decode_seqs, 0, context)

    def decode_terms(self, num_decode_seqs: int,
                     stop: int) -> tuple[float, npt.NDArray[np.float64]] | None:
        """The terms of pure-decode steps of ``num_decode_seqs`` requests attending to fewer
        than ``stop`` tokens, a step's time ``fixed + table[context]`` (:meth:`_DenseTerms.fixed`
        by batch size, the attention term by context); None where the table does not serve
        (not a dense model on one GPU, or a context of :data:`ATTENTION_TABLE_SIZE` or more)."""
        if self._dense is None or stop > ATTENTION_TABLE_SIZE:
            return None
        table = self._attention
        if stop > len(table):
            table = self._attention_table(stop)
        return self._fixed_term(num_decode_seqs), table

    def chunk_times_at(self, num_seqs: int, chunk: int,
                       context: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``step_time(num_seqs * chunk, 0.0, context, chunk * context, num_seqs)`` (speculative
        decoding's verify steps of ``num_seqs`` chunks of ``chunk`` query tokens), one a
        ``context``, with the bits of one call per step."""
        return self._times_at(num_seqs, chunk, context)

    def _times_at(self, n: int, chunk: int,
                  context: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """:meth:`decode_times_at` (``chunk`` 0) or :meth:`chunk_times_at`."""
        stop = int(np.maximum.reduce(context)) + 1 if len(context) else 0
        terms = (None if not stop else self.chunk_terms(n, chunk, stop) if chunk
                 else self.decode_terms(n, stop))
        if terms is not None:
            times: npt.NDArray[np.float64] = terms[0] + terms[1][context]
            return times
        on_arrays: Callable[..., npt.NDArray[np.float64]] = self.step_time
        if not chunk:
            return on_arrays(0.0, float(n), context.astype(np.float64), 0.0, 0.0)
        return on_arrays(float(n * chunk), 0.0, context.astype(np.float64),
                         (chunk * context).astype(np.float64), float(n))

    def chunk_terms(self, num_seqs: int, chunk: int,
                    stop: int) -> tuple[float, npt.NDArray[np.float64]] | None:
        """:meth:`chunk_times_at`'s terms for contexts below ``stop``, as :meth:`decode_terms`'
        (a table kept for each ``chunk``)."""
        dense = self._dense
        if dense is None or stop > ATTENTION_TABLE_SIZE:
            return None
        table = self._chunk_attention.get(chunk)
        if table is None or stop > len(table):
            size = max(1 << 12, 1 << (stop - 1).bit_length())
            ctx = np.arange(size, dtype=np.float64)
            table = dense.chunk_attention(chunk * ctx, ctx)
            table.flags.writeable = False
            self._chunk_attention[chunk] = table
        fixed = self._chunk_fixed.get((num_seqs, chunk))
        if fixed is None:
            fixed = dense.overhead_and_gemm(float(num_seqs * chunk) + 0.0, float(num_seqs))
            self._chunk_fixed[num_seqs, chunk] = fixed
        return fixed, table

    def _fixed_term(self, num_decode_seqs: int) -> float:
        """:meth:`_DenseTerms.fixed` of ``num_decode_seqs``, remembered."""
        fixed = self._decode_fixed.get(num_decode_seqs)
        if fixed is None:
            assert self._dense is not None
            fixed = self._dense.fixed(float(num_decode_seqs))
            self._decode_fixed[num_decode_seqs] = fixed
        return fixed

    def _attention_table(self, stop: int) -> npt.NDArray[np.float64]:
        """The attention terms of every context below ``stop`` (up to the next power of two) in
        a new array, with the float path's operations (the same bits)."""
        assert self._dense is not None
        old = self._attention
        size = max(1 << 12, 1 << (stop - 1).bit_length())
        context = np.arange(len(old), size, dtype=np.float64)
        table = np.concatenate((old, self._dense.attention(context)))
        table.flags.writeable = False
        object.__setattr__(self, "_attention", table)
        return table

    def _experts_exact(self, arr: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        c = self._terms
        if not c.num_moe_layers:
            return arr * 0.0
        distinct = self.model.expected_distinct_experts(arr) * c.ep_share
        local: npt.NDArray[np.float64] = np.minimum(distinct, c.local_experts) * c.num_moe_layers
        return local

    def _experts_read(self, tokens: F) -> F:
        """Experts one GPU reads in a step, summed over the MoE layers (a table lookup for
        whole token counts below :data:`EXPERT_TABLE_SIZE`, numpy's arithmetic otherwise:
        either way floats and arrays share the bits)."""
        if isinstance(tokens, float):
            i = int(tokens)
            if i == tokens and 0 <= i < EXPERT_TABLE_SIZE:
                return self._experts_table[i]
            return float(self._experts_exact(np.array([tokens], dtype=np.float64))[0])
        idx = tokens.astype(np.int64)
        if len(idx) and idx.min() >= 0 and idx.max() < EXPERT_TABLE_SIZE and np.all(idx == tokens):
            looked: F = self._experts_array[idx]
            return looked
        flat = np.asarray(tokens, dtype=np.float64).ravel()
        exact: F = self._experts_exact(flat).reshape(np.shape(tokens))
        return exact

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "gpu": self.gpu.name,
            "model": self.model.name,
            "tensor_parallel_size": self.tensor_parallel_size,
            "expert_parallel_size": self.expert_parallel_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            **{name: getattr(self, name) for name in self.FIT_PARAMETERS},
            "source": self.source,
        }

    def to_json(self) -> dict[str, Any]:
        """What :func:`~kvbudget.perf.cost_model.save_cost_model` writes: the GPU's figures in
        full, the model by name, the parallelism and the :attr:`FIT_PARAMETERS`."""
        gpu = {f.name: getattr(self.gpu, f.name) for f in dataclass_fields(self.gpu)}
        return {
            "gpu": gpu,
            "model": self.model.name,
            "tensor_parallel_size": self.tensor_parallel_size,
            "expert_parallel_size": self.expert_parallel_size,
            "kv_cache_dtype": self.kv_cache_dtype,
            "parameters": {name: getattr(self, name) for name in self.FIT_PARAMETERS},
            "source": self.source,
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any], model: ModelSpec | None = None) -> VllmStepModel:
        """The model :meth:`to_json` wrote; ``ValueError`` naming the field. ``model``: the
        model's shapes as the file embeds them (then its ``model`` field is only a name)."""
        gpu_raw = payload.get("gpu")
        if isinstance(gpu_raw, str):
            gpu = get_gpu(gpu_raw)
        elif isinstance(gpu_raw, dict):
            try:
                gpu = GPUSpec(**gpu_raw)
            except TypeError as exc:
                raise ValueError(f"field 'gpu': {exc}") from None
        else:
            raise ValueError("field 'gpu' must be a preset name or an object of GPU figures")
        name = payload.get("model")
        if not isinstance(name, str):
            raise ValueError("field 'model' must be a model preset name or config path")
        if model is None:
            try:
                model = get_model(name)
            except ValueError as exc:
                raise ValueError(f"field 'model': {exc}") from None
        params = payload.get("parameters", {})
        if not isinstance(params, dict):
            raise ValueError("field 'parameters' must be an object")
        unknown = sorted(set(params) - set(cls.FIT_PARAMETERS))
        if unknown:
            raise ValueError(f"unknown field 'parameters.{unknown[0]}'")
        for key, value in params.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"field 'parameters.{key}' must be a number")
            if not math.isfinite(value):  # NaN means "the GPU's default" only in code
                raise ValueError(f"field 'parameters.{key}' must be finite, got {value!r}")
        ints: dict[str, int] = {}
        for key in ("tensor_parallel_size", "expert_parallel_size"):
            value = payload.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"field {key!r} must be an integer >= 1")
            ints[key] = value
        dtype = payload.get("kv_cache_dtype", "auto")
        if not isinstance(dtype, str):
            raise ValueError("field 'kv_cache_dtype' must be a string")
        source = payload.get("source", "file")
        model_obj = cls(gpu, model, ints["tensor_parallel_size"], ints["expert_parallel_size"],
                        kv_cache_dtype=dtype, source=str(source))
        floats: dict[str, Any] = {k: float(v) for k, v in params.items()}
        return replace(model_obj, **floats)


@dataclass(frozen=True, slots=True)
class _DenseTerms:
    """The constants of :meth:`VllmStepModel.step_time` for a dense model on one GPU (no MoE,
    sliding windows or collectives; all finite) and the step's time written once in them:
    :meth:`fixed` (a pure decode step's overhead and weights' term, by batch size) plus
    :meth:`attention` (its KV read's, by context), or :meth:`step` with prefill. Floats and
    arrays give the same bits."""

    gemm_flops_per_token: float
    lm_head_flops: float
    gemm_flops_s: float
    read_s: float  # dense_read_bytes / bytes_s, the division the general path makes
    attn_flops_per_pair: float
    attn_flops_s: float
    kv_full_per_token: float
    kv_bytes_s: float
    overhead_s: float
    read4: float  # read_s's fourth power as the general path forms it

    @classmethod
    def of(cls, c: _Terms) -> _DenseTerms | None:
        """The constants of ``c``, or ``None`` where the general path is needed."""
        if (c.num_moe_layers or c.kv_sliding_per_token or c.allreduce is not None
                or c.comm_per_step_s or c.comm_per_token_s):
            return None
        read_s = c.dense_read_bytes / c.bytes_s
        values = (c.gemm_flops_per_token, c.lm_head_flops, c.gemm_flops_s, read_s,
                  c.attn_flops_per_pair, c.attn_flops_s, c.kv_full_per_token, c.kv_bytes_s,
                  c.overhead_s)
        if not all(math.isfinite(v) for v in values):
            return None
        read2 = read_s * read_s
        return cls(*values, read2 * read2)

    def fixed(self, num_decode_seqs: float) -> float:
        """``overhead + gemm`` of a pure decode step of ``num_decode_seqs`` requests (tokens and
        sampled both ``num_decode_seqs``; the weights' term's fourth power :attr:`read4`)."""
        num = num_decode_seqs
        a = (self.gemm_flops_per_token * num + self.lm_head_flops * num) / self.gemm_flops_s
        a2 = a * a
        return self.overhead_s + math.sqrt(math.sqrt(a2 * a2 + self.read4))

    def attention(self, num_context_tokens: F) -> F:
        """The attention term of a pure decode step attending to ``num_context_tokens``
        (the attention FLOPs' term is a zero, whose fourth power adds exactly)."""
        b = self.kv_full_per_token * num_context_tokens / self.kv_bytes_s
        b2 = b * b
        if isinstance(b2, float):
            return math.sqrt(math.sqrt(b2 * b2))
        result: F = np.sqrt(np.sqrt(b2 * b2))
        return result

    def step(self, num_prefill_tokens: float, num_decode_seqs: float, num_context_tokens: float,
             prefill_attention: float, num_prefill_seqs: float) -> float:
        """Any step's time in Python floats: :meth:`overhead_and_gemm` + :meth:`chunk_attention`."""
        return self.overhead_and_gemm(num_prefill_tokens + num_decode_seqs,
                                      num_decode_seqs + num_prefill_seqs) + (
            self.chunk_attention(prefill_attention, num_context_tokens))

    def overhead_and_gemm(self, tokens: float, sampled: float) -> float:
        """``overhead + gemm`` of a step of ``tokens`` tokens, ``sampled`` of them sampled."""
        a = (self.gemm_flops_per_token * tokens + self.lm_head_flops * sampled) / (
            self.gemm_flops_s)
        return self.overhead_s + _smooth_max(a, self.read_s + tokens * 0.0)

    def chunk_attention(self, prefill_attention: F, num_context_tokens: F) -> F:
        """The attention term of ``prefill_attention`` pairs reading ``num_context_tokens``' KV."""
        attn_c = self.attn_flops_per_pair * prefill_attention / self.attn_flops_s
        attn_m = self.kv_full_per_token * num_context_tokens / self.kv_bytes_s
        return _smooth_max(attn_c, attn_m)


def _minimum(a: F, b: F) -> F:
    if isinstance(a, float) and isinstance(b, float):
        return min(a, b)
    result: F = np.minimum(a, b)
    return result
