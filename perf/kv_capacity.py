"""KV-cache capacity: how many blocks vLLM finds room for on one GPU."""

from __future__ import annotations

import math

from kvbudget.perf.hardware import MIB, GPUSpec
from kvbudget.perf.models import ModelSpec


def activation_reserve_bytes(
    model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1
) -> float:
    """Memory vLLM's profiling run finds taken by activations and CUDA graphs besides weights.

    Estimated as the peak of one prefill of ``max_num_batched_tokens`` tokens (hidden states,
    FFN intermediates and logits of the last tokens, in ``dtype_bytes``) plus a fixed 1 GiB for
    CUDA graphs, the CUDA context and allocator slack (vLLM logs show 0.5-1.5 GiB there).
    """
    per_token = (4 * model.hidden_size + 2 * model.intermediate_size) * model.dtype_bytes
    logits = 256 * model.vocab_size * 4
    return per_token * max_num_batched_tokens / tensor_parallel_size + logits + 1024 * MIB


def num_gpu_blocks(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    tensor_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
) -> int:
    """KV blocks per GPU the way vLLM sizes them: what is left of ``memory * utilization`` after
    weights and the activation peak, divided by the bytes of one block (each of the
    ``tensor_parallel_size`` GPUs holds its share of the weights and of every block)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    budget = gpu.memory_bytes * gpu_memory_utilization
    free = (
        budget
        - model.legacy_weight_bytes(tensor_parallel_size)
        - activation_reserve_bytes(model, max_num_batched_tokens, tensor_parallel_size)
    )
    kv_bytes = model.kv_bytes_per_token(tensor_parallel_size, kv_cache_dtype)
    blocks = math.floor(free / (kv_bytes * block_size))
    if blocks < 1:
        raise ValueError(
            f"{model.name} does not fit on {gpu.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no memory left for the KV cache"
        )
    return blocks


