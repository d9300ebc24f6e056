"""Engine knobs under vLLM's own names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One serving engine (a replica): its KV cache and scheduler limits.

    ``num_gpu_blocks`` overrides the capacity computed from the GPU and model presets (vLLM's
    ``--num-gpu-blocks-override``). ``scheduling_policy`` is vLLM's ``--scheduling-policy``:
    ``fcfs`` serves the waiting queue in arrival order (preempted requests go back to its front);
    ``priority`` orders it by (tier priority, arrival). In both, the preemption victim is the
    running request of lowest priority, then latest arrival (under ``fcfs`` every request has the
    same priority, so it is the latest arrival, as ``running.pop()`` in vLLM v1).
    ``watermark`` keeps that fraction of blocks free when admitting waiting requests (vLLM v0's
    block-manager watermark, 0.01 there; v1 has none, hence the default 0).
    ``skip_ahead`` computes runs of pure-decode steps analytically instead of one by one; results
    are identical (tests compare both).
    """

    block_size: int = 16
    num_gpu_blocks: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    preemption_mode: Literal["recompute"] = "recompute"
    watermark: float = 0.0
    enable_chunked_prefill: bool = True
    skip_ahead: bool = True

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size!r}")
        if self.num_gpu_blocks is not None and self.num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {self.num_gpu_blocks!r}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs!r}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(
                f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens!r}"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len!r}")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(
                f"scheduling_policy must be 'fcfs' or 'priority', got {self.scheduling_policy!r}"
            )
        if self.preemption_mode not in ("recompute",):
            raise ValueError(f"preemption_mode must be 'recompute', got {self.preemption_mode!r}")
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark!r}")
