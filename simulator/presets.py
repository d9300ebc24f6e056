"""GPU and model presets, KV capacity, and the roofline step-time model.

Figures come from public specifications:

GPUs (dense BF16 tensor throughput, without sparsity; HBM capacity and bandwidth):
* A100-80GB SXM: 312 TFLOP/s, 80 GB HBM2e, 2,039 GB/s; PCIe Gen4 x16 (64 GB/s) to the host.
  NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
  nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
* H100-80GB SXM5: 989 TFLOP/s, 80 GB HBM3, 3.35 TB/s; PCIe Gen5 x16 (128 GB/s).
  NVIDIA H100 datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet).
* H200-141GB SXM: 989 TFLOP/s, 141 GB HBM3e, 4.8 TB/s; PCIe Gen5 x16 (128 GB/s).
  NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/).
* L40S: 362 TFLOP/s, 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16 (64 GB/s).
  NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/).
Memory sizes are what the driver reports as total (nvidia-smi MiB), since vLLM multiplies that by
``gpu_memory_utilization``: A100 81,920 MiB; H100 81,559 MiB; H200 143,771 MiB; L40S 46,068 MiB.

Models (Hugging Face ``config.json`` of each: num_hidden_layers, hidden_size,
num_attention_heads, num_key_value_heads, intermediate_size, vocab_size; parameter counts from
the model cards):
* meta-llama/Llama-3.1-8B: 32 layers, 4096 hidden, 32 heads, 8 KV heads, head_dim 128,
  14,336 FFN, 128,256 vocab, 8.03 B parameters.
* meta-llama/Llama-3.1-70B: 80 layers, 8192 hidden, 64 heads, 8 KV heads, head_dim 128,
  28,672 FFN, 128,256 vocab, 70.6 B parameters.
* Qwen/Qwen2.5-7B: 28 layers, 3584 hidden, 28 heads, 4 KV heads, head_dim 128, 18,944 FFN,
  152,064 vocab, 7.62 B parameters.
* mistralai/Mistral-7B-v0.3: 32 layers, 4096 hidden, 32 heads, 8 KV heads, head_dim 128,
  14,336 FFN, 32,768 vocab, 7.25 B parameters.
* meta-llama/Llama-2-7b-hf: 32 layers, 4096 hidden, 32 heads, 32 KV heads (no GQA), head_dim
  128, 11,008 FFN, 32,000 vocab, 6.74 B parameters (the configuration other simulators are
  benchmarked on).

KV bytes per token are ``2 (K and V) * layers * kv_heads * head_dim * dtype_bytes``; under tensor
parallelism each GPU holds ``kv_heads / tp`` heads (at least one), which is how vLLM shards GQA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

F = TypeVar("F", float, npt.NDArray[np.float64])
MIB = 1024**2


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_s: float
    bf16_flops: float
    pcie_bandwidth_bytes_s: float

    def __post_init__(self) -> None:
        for field_name in (
            "memory_bytes",
            "hbm_bandwidth_bytes_s",
            "bf16_flops",
            "pcie_bandwidth_bytes_s",
        ):
            if not getattr(self, field_name) > 0:
                raise ValueError(f"GPU {self.name!r}: {field_name} must be > 0")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_params: float
    tensor_parallel: int = 1
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for field_name in (
            "num_layers",
            "hidden_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
            "tensor_parallel",
            "dtype_bytes",
        ):
            if not getattr(self, field_name) >= 1:
                raise ValueError(f"model {self.name!r}: {field_name} must be >= 1")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name!r}: num_heads must be a multiple of num_kv_heads")

    @property
    def kv_heads_per_gpu(self) -> int:
        return max(1, self.num_kv_heads // self.tensor_parallel)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token occupies on one GPU: 2 * layers * kv_heads * head_dim * dtype."""
        return 2 * self.num_layers * self.kv_heads_per_gpu * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes_per_gpu(self) -> float:
        return self.num_params * self.dtype_bytes / self.tensor_parallel

    def with_tp(self, tensor_parallel: int) -> ModelSpec:
        return ModelSpec(
            f"{self.name.split('-TP')[0]}-TP{tensor_parallel}"
            if tensor_parallel > 1
            else self.name,
            self.num_layers,
            self.hidden_size,
            self.num_heads,
            self.num_kv_heads,
            self.head_dim,
            self.intermediate_size,
            self.vocab_size,
            self.num_params,
            tensor_parallel,
            self.dtype_bytes,
        )


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("A100-80GB", 81_920 * MIB, 2.039e12, 312e12, 64e9),
        GPUSpec("H100-80GB", 81_559 * MIB, 3.35e12, 989e12, 128e9),
        GPUSpec("H200-141GB", 143_771 * MIB, 4.8e12, 989e12, 128e9),
        GPUSpec("L40S", 46_068 * MIB, 0.864e12, 362e12, 64e9),
    )
}

_LLAMA31_70B = ModelSpec("Llama-3.1-70B", 80, 8192, 64, 8, 128, 28_672, 128_256, 70.6e9)
MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("Llama-3.1-8B", 32, 4096, 32, 8, 128, 14_336, 128_256, 8.03e9),
        _LLAMA31_70B.with_tp(4),
        _LLAMA31_70B.with_tp(8),
        ModelSpec("Qwen2.5-7B", 28, 3584, 28, 4, 128, 18_944, 152_064, 7.62e9),
        ModelSpec("Mistral-7B", 32, 4096, 32, 8, 128, 14_336, 32_768, 7.25e9),
        ModelSpec("Llama-2-7B", 32, 4096, 32, 32, 128, 11_008, 32_000, 6.74e9),
    )
}


def get_gpu(name: str) -> GPUSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown GPU preset {name!r}; known: {', '.join(GPUS)}") from None


def get_model(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(MODELS)}") from None


def activation_reserve_bytes(model: ModelSpec, max_num_batched_tokens: int) -> float:
    """Memory vLLM's profiling run finds taken by activations and CUDA graphs besides weights.

    Estimated as the peak of one prefill of ``max_num_batched_tokens`` tokens (hidden states,
    FFN intermediates and logits of the last tokens, in ``dtype_bytes``) plus a fixed 1 GiB for
    CUDA graphs, the CUDA context and allocator slack (vLLM logs show 0.5-1.5 GiB there).
    """
    per_token = (4 * model.hidden_size + 2 * model.intermediate_size) * model.dtype_bytes
    logits = 256 * model.vocab_size * 4
    return per_token * max_num_batched_tokens / model.tensor_parallel + logits + 1024 * MIB


def num_gpu_blocks(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
) -> int:
    """KV blocks per GPU the way vLLM sizes them: what is left of ``memory * utilization`` after
    weights and the activation peak, divided by the bytes of one block."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    budget = gpu.memory_bytes * gpu_memory_utilization
    free = (
        budget
        - model.weight_bytes_per_gpu
        - activation_reserve_bytes(model, max_num_batched_tokens)
    )
    blocks = math.floor(free / (model.kv_bytes_per_token * block_size))
    if blocks < 1:
        raise ValueError(
            f"{model.name} does not fit on {gpu.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no memory left for the KV cache"
        )
    return blocks


@dataclass(frozen=True, slots=True)
class _RooflineTerms:
    """The constants of :meth:`RooflineCostModel.step_time`, computed once."""

    flops_per_token: float
    attn_flops: float
    flops_s: float
    weight_bytes: float
    kv_bytes_per_token: int
    bytes_s: float
    overhead_s: float


@dataclass(frozen=True, slots=True)
class RooflineCostModel:
    """A roofline step time: the slower of compute and memory traffic, plus a fixed overhead.

    * compute: ``2 * params`` FLOPs per token computed (prefill and decode), plus prefill
      attention ``4 * layers * heads * head_dim`` FLOPs per (token, context token) pair,
      split over ``tensor_parallel`` GPUs, at ``mfu`` of the dense BF16 peak;
    * memory: the weights once per step plus the KV of every attended token, at ``mbu`` of the
      HBM bandwidth;
    * ``overhead_s`` per step: scheduling, sampling and kernel launches (CUDA graphs keep it at a
      few milliseconds in vLLM), plus ``tp_overhead_s`` per step for tensor-parallel all-reduces.

    Efficiency defaults (``mfu`` 0.55, ``mbu`` 0.75, 4 ms overhead) are typical of measured vLLM
    throughput on Hopper and Ampere; a calibrated :class:`~simulator.cost_model.LinearCostModel`
    replaces them with measurements.
    """

    gpu: GPUSpec
    model: ModelSpec
    mfu: float = 0.55
    mbu: float = 0.75
    overhead_s: float = 0.004
    tp_overhead_s: float = 0.0005
    _terms: _RooflineTerms = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("mfu", "mbu"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"roofline {name} must be in (0, 1], got {value!r}")
        if self.overhead_s < 0:
            raise ValueError(f"roofline overhead_s must be >= 0, got {self.overhead_s!r}")
        m, g = self.model, self.gpu
        tp = m.tensor_parallel
        terms = _RooflineTerms(
            flops_per_token=2.0 * m.num_params / tp,
            attn_flops=4.0 * m.num_layers * m.num_heads * m.head_dim / tp,
            flops_s=g.bf16_flops * self.mfu,
            weight_bytes=m.weight_bytes_per_gpu,
            kv_bytes_per_token=m.kv_bytes_per_token,
            bytes_s=g.hbm_bandwidth_bytes_s * self.mbu,
            overhead_s=self.overhead_s + (self.tp_overhead_s if tp > 1 else 0.0),
        )
        object.__setattr__(self, "_terms", terms)

    def step_time(
        self,
        num_prefill_tokens: F,
        num_decode_seqs: F,
        num_context_tokens: F,
        prefill_attention: F,
        num_prefill_seqs: F,
    ) -> F:
        """``num_prefill_seqs`` is not used: the fixed overhead is per step."""
        c = self._terms
        compute = (
            c.flops_per_token * (num_prefill_tokens + num_decode_seqs)
            + c.attn_flops * prefill_attention
        ) / c.flops_s
        memory = (c.weight_bytes + c.kv_bytes_per_token * num_context_tokens) / c.bytes_s
        overhead = c.overhead_s
        if isinstance(compute, float) and isinstance(memory, float):
            scalar: F = overhead + max(compute, memory)  # same bits as np.maximum, faster
            return scalar
        result: F = overhead + np.maximum(compute, memory)
        return result

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "roofline",
            "gpu": self.gpu.name,
            "model": self.model.name,
            "mfu": self.mfu,
            "mbu": self.mbu,
            "overhead_s": self.overhead_s,
            "tp_overhead_s": self.tp_overhead_s,
        }
