"""The roofline step-time model of a GPU and model pair."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import GPUSpec
from kvbudget.perf.models import ModelSpec
from kvbudget.perf.step_features import decode_step_times

F = TypeVar("F", float, npt.NDArray[np.float64])


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
      split over ``tensor_parallel_size`` GPUs, at ``mfu`` of the dense BF16 peak;
    * memory: the weights once per step plus the KV of every attended token, at ``mbu`` of the
      HBM bandwidth;
    * ``overhead_s`` per step: scheduling, sampling and kernel launches (CUDA graphs keep it at a
      few milliseconds in vLLM), plus ``tp_overhead_s`` per step for tensor-parallel all-reduces.

    The model is sized as the presets were before configs were parsed
    (:attr:`~kvbudget.perf.models.ModelSpec.legacy_num_params`), so results do not move.

    Efficiency defaults (``mfu`` 0.55, ``mbu`` 0.75, 4 ms overhead) are typical of measured vLLM
    throughput on Hopper and Ampere; a calibrated :class:`~kvbudget.perf.cost_model.LinearCostModel`
    replaces them with measurements.
    """

    FIT_PARAMETERS: ClassVar[tuple[str, ...]] = ("mfu", "mbu", "overhead_s")
    """The float fields a calibrator may change (``dataclasses.replace``)."""

    gpu: GPUSpec
    model: ModelSpec
    mfu: float = 0.55
    mbu: float = 0.75
    overhead_s: float = 0.004
    tp_overhead_s: float = 0.0005
    tensor_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    _terms: _RooflineTerms = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("mfu", "mbu"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"roofline {name} must be in (0, 1], got {value!r}")
        if self.overhead_s < 0:
            raise ValueError(f"roofline overhead_s must be >= 0, got {self.overhead_s!r}")
        if not (isinstance(self.tensor_parallel_size, int) and self.tensor_parallel_size >= 1):
            raise ValueError(
                f"roofline tensor_parallel_size must be >= 1, got {self.tensor_parallel_size!r}"
            )
        m, g = self.model, self.gpu
        tp = self.tensor_parallel_size
        terms = _RooflineTerms(
            flops_per_token=2.0 * m.legacy_num_params / tp,
            attn_flops=4.0 * m.num_layers * m.num_attention_heads * m.head_dim / tp,
            flops_s=g.bf16_flops * self.mfu,
            weight_bytes=m.legacy_weight_bytes(tp),
            kv_bytes_per_token=m.kv_bytes_per_token(tp, self.kv_cache_dtype),
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

    def decode_step_times(
        self, num_decode_seqs: int, first_context: int, num_steps: int
    ) -> npt.NDArray[np.float64]:
        """:func:`~kvbudget.perf.step_features.decode_step_times` of this model."""
        return decode_step_times(self.step_time, num_decode_seqs, first_context, num_steps)

    def describe(self) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.tensor_parallel_size > 1:
            extra["tensor_parallel_size"] = self.tensor_parallel_size
        if self.kv_cache_dtype != "auto":
            extra["kv_cache_dtype"] = self.kv_cache_dtype
        return {
            "kind": "roofline",
            "gpu": self.gpu.name,
            "model": self.model.name,
            "mfu": self.mfu,
            "mbu": self.mbu,
            "overhead_s": self.overhead_s,
            "tp_overhead_s": self.tp_overhead_s,
            **extra,
        }
