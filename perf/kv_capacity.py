"""KV-cache capacity: how many blocks vLLM v1 finds room for on each GPU of a replica.

vLLM v1 (``Worker.determine_available_memory``, vllm/v1/worker/gpu_worker.py; the formula as of
0.32.0, docs/fidelity.md "KV capacity" has the line references) sizes the KV cache per GPU as

    requested  = ceil(total_memory * gpu_memory_utilization)
    kv_bytes   = requested - weights - non_torch - profile_peak - cudagraph_estimate
    num_blocks = kv_bytes // (block_size * kv bytes of one token on this GPU)

* ``total_memory``: what CUDA reports (:attr:`GPUSpec.memory_bytes`);
* ``weights``: this GPU's share under tensor (and expert) parallelism;
* ``non_torch``: memory taken outside PyTorch's allocator (cuBLAS workspaces, NCCL, kernels):
  0.35 GiB, as vLLM logged it for Llama-3.1-8B on an RTX 3090 (vllm#10517);
* ``profile_peak``: the transient peak of the profiling forward pass of
  ``max_num_batched_tokens`` tokens (the MLP's gate/up output, its activation and the hidden
  states: ``2 B * (3 * ffn_width + 3 * hidden)`` per token, 108 KiB for Llama-3.1-8B, where
  vllm#10517's two logs give 110 KiB per token), plus the dummy sampler run over
  ``max_num_seqs`` rows of logits (fp32 logits, the top-k/top-p sort's values and int64
  indices, and the probabilities: five fp32-sized copies of ``max_num_seqs x vocab``);
* ``cudagraph_estimate``: since vLLM v0.21 the memory of the CUDA graphs is measured before the
  KV cache is sized (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, default on) and taken off;
  modelled as 1.7 MiB + 0.055 MiB per token of each captured batch size (vLLM's capture logs
  in PR #22897 and #23184: 6-8 MiB per graph near 100 tokens, 24-28 MiB near 450), summed over
  vLLM's capture sizes. Earlier versions captured the graphs inside the ``1 - utilization``
  slack (``profile_cudagraph_memory=False``).

Every GPU of a TP group holds the same number of blocks, each with its share of the KV heads
(vLLM replicates KV heads when there are fewer than ranks; MLA's latent cache is whole on every
rank) -- the model spec's ``kv_bytes_per_token(tp, kv_cache_dtype)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvbudget.perf.hardware import GIB, MIB, GPUSpec

if TYPE_CHECKING:
    from kvbudget.perf.models import ModelSpec

NON_TORCH_BYTES = int(0.35 * GIB)  # vllm#10517 (RTX 3090, Llama-3.1-8B): "non_torch 0.35 GiB"
ACTIVATION_BYTES = 2  # bf16/fp16 activations
SAMPLER_COPIES = 5  # fp32 logits, sorted values, int64 indices (2), probabilities
LOGITS_BYTES = 4
CUDAGRAPH_BASE_BYTES = 1.7 * MIB  # per captured graph (vLLM PR #22897 / #23184 logs)
CUDAGRAPH_PER_TOKEN_BYTES = 0.055 * MIB  # per token of the captured batch size


def cudagraph_capture_sizes(
    max_num_seqs: int, max_num_batched_tokens: int, *, large_blackwell: bool = False
) -> list[int]:
    """vLLM's default decode capture sizes (``VllmConfig._set_cudagraph_sizes``): up to
    ``min(2 * max_num_seqs, 512, max_num_batched_tokens)`` (1024 on data-centre Blackwell),
    ``[1, 2, 4]``, then steps of 8 below 256 and of 16 from 256."""
    cap = min(2 * max_num_seqs, 1024 if large_blackwell else 512, max_num_batched_tokens)
    sizes = [s for s in (1, 2, 4) if s <= cap]
    sizes += list(range(8, min(cap + 1, 256), 8))
    sizes += list(range(256, cap + 1, 16))
    if max_num_batched_tokens <= cap and max_num_batched_tokens not in sizes:
        sizes.append(max_num_batched_tokens)
    return sizes


@dataclass(frozen=True, slots=True)
class KVBudget:
    """Where one GPU's memory goes, in bytes, and the blocks that are left."""

    requested_bytes: int
    weight_bytes: float
    non_torch_bytes: float
    activation_bytes: float
    sampler_bytes: float
    cudagraph_bytes: float
    kv_cache_bytes: float
    block_bytes: int
    num_gpu_blocks: int

    def rows(self) -> list[tuple[str, float]]:
        return [
            ("requested (utilization x total)", self.requested_bytes / GIB),
            ("weights", self.weight_bytes / GIB),
            ("non-torch (cuBLAS, NCCL, kernels)", self.non_torch_bytes / GIB),
            ("activation peak (profile forward)", self.activation_bytes / GIB),
            ("dummy sampler", self.sampler_bytes / GIB),
            ("CUDA graphs", self.cudagraph_bytes / GIB),
            ("KV cache", self.kv_cache_bytes / GIB),
        ]


def weights_per_gpu(model: ModelSpec, tensor_parallel_size: int, expert_parallel_size: int = 1
                    ) -> float:
    """Weight bytes on one GPU: the dense part over the TP ranks; routed experts sharded over
    them too, or (``expert_parallel_size`` > 1, vLLM's ``--enable-expert-parallel``) whole,
    ``num_experts / ep`` of them per GPU."""
    tp, ep = tensor_parallel_size, expert_parallel_size
    moe = model.moe
    if moe is None or ep == 1:
        return model.weight_bytes(tp)
    whole = model.expert_weight_bytes(tp, enable_expert_parallel=True)
    return model.dense_weight_bytes(tp) + moe.num_moe_layers * moe.num_experts / ep * whole


def activation_peak_bytes(
    model: ModelSpec, max_num_batched_tokens: int, tensor_parallel_size: int = 1,
    expert_parallel_size: int = 1,
) -> float:
    """The profiling forward's transient peak: ``2 B * (3 * ffn + 3 * hidden)`` per token,
    ``ffn`` the widest MLP of one GPU (a dense MLP, or an MoE layer's ``top_k`` experts plus
    its shared experts)."""
    tp = tensor_parallel_size
    widths = [model.intermediate_size / tp]
    moe = model.moe
    if moe is not None:
        expert_tp = 1 if expert_parallel_size > 1 else tp
        widths.append(
            moe.num_experts_per_tok * moe.expert_intermediate_size / expert_tp
            + moe.num_shared_experts * moe.shared_expert_intermediate_size / tp
        )
    per_token = ACTIVATION_BYTES * (3 * max(widths) + 3 * model.hidden_size)
    return per_token * max_num_batched_tokens


def kv_budget(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.92,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    tensor_parallel_size: int = 1,
    expert_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
    profile_cudagraph_memory: bool = True,
) -> KVBudget:
    """One GPU's memory as vLLM v1 divides it (see the module docstring)."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    tp, ep = tensor_parallel_size, expert_parallel_size
    requested = math.ceil(gpu.memory_bytes * gpu_memory_utilization)
    weights = weights_per_gpu(model, tp, ep)
    activation = activation_peak_bytes(model, max_num_batched_tokens, tp, ep)
    sampler = float(SAMPLER_COPIES * LOGITS_BYTES * max_num_seqs * model.vocab_size)
    graphs = 0.0
    if profile_cudagraph_memory:
        large_blackwell = gpu.generation == "blackwell" and gpu.memory_kind == "hbm"
        sizes = cudagraph_capture_sizes(
            max_num_seqs, max_num_batched_tokens, large_blackwell=large_blackwell
        )
        graphs = len(sizes) * CUDAGRAPH_BASE_BYTES + CUDAGRAPH_PER_TOKEN_BYTES * sum(sizes)
    kv = requested - weights - NON_TORCH_BYTES - activation - sampler - graphs
    block_bytes = model.kv_bytes_per_token(tp, kv_cache_dtype) * block_size
    blocks = int(kv // block_bytes) if kv > 0 else 0
    return KVBudget(requested, weights, float(NON_TORCH_BYTES), activation, sampler, graphs,
                    kv, block_bytes, blocks)


def num_gpu_blocks(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.92,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    tensor_parallel_size: int = 1,
    expert_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
    profile_cudagraph_memory: bool = True,
) -> int:
    """KV blocks per GPU the way vLLM v1 sizes them (:func:`kv_budget`); an error when the
    model leaves no room."""
    budget_args: dict[str, Any] = dict(
        block_size=block_size, gpu_memory_utilization=gpu_memory_utilization,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        expert_parallel_size=expert_parallel_size, kv_cache_dtype=kv_cache_dtype,
        profile_cudagraph_memory=profile_cudagraph_memory)
    budget = kv_budget(gpu, model, tensor_parallel_size=tensor_parallel_size, **budget_args)
    if budget.num_gpu_blocks < 1:
        tp = f" x{tensor_parallel_size}" if tensor_parallel_size > 1 else ""
        raise ValueError(
            f"{model.name} does not fit on {gpu.name}{tp} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: {budget.weight_bytes / GIB:.1f} GiB of weights per GPU "
            "leave no memory for the KV cache"
            + _where_it_fits(gpu, model, tensor_parallel_size, budget_args)
        )
    return budget.num_gpu_blocks


def _where_it_fits(gpu: GPUSpec, model: ModelSpec, tp: int, args: dict[str, Any]) -> str:
    """``"; it fits at engine.tensor_parallel_size=N"``: the smallest tensor parallelism of
    up to eight GPUs that shards the model (vLLM's head rule) and leaves room for KV, or a
    clause saying none does."""
    for size in (2, 4, 8):
        if size <= tp:
            continue
        try:
            model.check_tensor_parallel(size)
        except ValueError:
            continue
        if kv_budget(gpu, model, tensor_parallel_size=size, **args).num_gpu_blocks >= 1:
            return f"; it fits at engine.tensor_parallel_size={size}"
    return "" if tp >= 8 else "; not on up to eight GPUs with tensor parallelism either"


def legacy_num_gpu_blocks(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    block_size: int = 16,
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    tensor_parallel_size: int = 1,
    kv_cache_dtype: str = "auto",
) -> int:
    """kvbudget 0.1's estimate (``engine_defaults = "kvbudget-0.1"``): nvidia-smi's total times
    the utilization, less the weights, one prefill's activations, 256 rows of logits and a fixed
    1 GiB."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(
            f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    tp = tensor_parallel_size
    total = gpu.memory_mib_smi * MIB if gpu.memory_mib_smi else gpu.memory_bytes
    per_token = (4 * model.hidden_size + 2 * model.intermediate_size) * model.dtype_bytes
    reserve = per_token * max_num_batched_tokens / tp + 256 * model.vocab_size * 4 + 1024 * MIB
    free = total * gpu_memory_utilization - model.legacy_weight_bytes(tp) - reserve
    blocks = math.floor(free / (model.kv_bytes_per_token(tp, kv_cache_dtype) * block_size))
    if blocks < 1:
        raise ValueError(
            f"{model.name} does not fit on {gpu.name} at gpu_memory_utilization="
            f"{gpu_memory_utilization}: no memory left for the KV cache"
        )
    return blocks


def sliding_model_short_of_max_model_len(
    model: ModelSpec, num_blocks: int, block_size: int, max_model_len: int,
    max_num_batched_tokens: int, *, tensor_parallel_size: int = 1,
) -> bool:
    """Whether a model with sliding-window layers, which :func:`check_holds_max_model_len`
    does not check, cannot hold one request of ``max_model_len`` tokens even so: the KV memory
    of ``num_blocks`` (counted here for every layer) is less than vLLM's
    ``check_enough_kv_cache_memory`` needs, each layer's ``max_memory_usage_bytes``
    (vllm/v1/kv_cache_interface.py, 0.32.0): ``cdiv(max_model_len, block_size)`` blocks a
    full-attention layer, ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
    block_size) + 1`` a sliding-window one. vLLM refuses to start there. False for a model
    without sliding-window layers."""
    if not model.num_sliding_layers or max_model_len <= 0:
        return False
    per_block = block_size * model.kv_bytes_per_token_per_layer(tensor_parallel_size)
    window = model.sliding_window or 0
    sliding_tokens = min(window - 1 + max_num_batched_tokens, max_model_len)
    needed = per_block * (
        model.num_full_attention_layers * -(-max_model_len // block_size)
        + model.num_sliding_layers * (-(-sliding_tokens // block_size) + 1))
    held = num_blocks * block_size * model.kv_bytes_per_token(tensor_parallel_size)
    return held < needed


def check_holds_max_model_len(
    model: ModelSpec, gpu: GPUSpec, num_blocks: int, block_size: int, max_model_len: int,
    *, given: bool, tensor_parallel_size: int = 1,
) -> None:
    """vLLM refuses to start when its KV cache cannot hold one request of ``max_model_len``
    tokens (``check_enough_kv_cache_memory``, vllm/v1/core/kv_cache_utils.py, 0.32.0: a
    full-attention layer needs ``cdiv(max_model_len, block_size)`` blocks, checked against
    the blocks less the one the block pool holds back as its null block), naming the
    largest length that fits: a ValueError that says so. Models with sliding-window layers
    are not checked (vLLM's hybrid allocator sizes their groups apart; their KV here is
    counted for every layer)."""
    if model.num_sliding_layers or max_model_len <= 0:
        return
    if -(-max_model_len // block_size) <= num_blocks - 1:
        return
    whose = "given" if given else "the model's context, vLLM's default"
    tp = f" x{tensor_parallel_size}" if tensor_parallel_size > 1 else ""
    fits = max(num_blocks - 1, 0) * block_size
    raise ValueError(
        f"engine.max_model_len: {model.name} on {gpu.name}{tp} has KV room for "
        f"{num_blocks * block_size:,} tokens, fewer than one request of max_model_len "
        f"{max_model_len:,} ({whose}) needs: vLLM refuses to start (check_enough_kv_cache_"
        f"memory); give your server's --max-model-len as --set engine.max_model_len=N "
        f"(at most {fits:,} here), or more GPUs (engine.tensor_parallel_size) or a larger GPU"
    )
