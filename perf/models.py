"""Model specifications, read from Hugging Face ``config.json`` files.

A :class:`ModelSpec` holds the shapes that size a model's weights, KV cache and FLOPs: dense and
grouped-query attention, mixture-of-experts layers (:class:`MoESpec`: routed and shared experts,
dense layers among them), DeepSeek's multi-head latent attention (:class:`MLASpec`),
sliding-window layers, and the weight dtype (16-bit, FP8, MXFP4 experts, 4/8-bit integer).
:func:`model_from_config` parses a ``config.json`` of the families listed in
:data:`MODEL_TYPES`; :func:`get_model` takes a bundled preset name (case-insensitive, or the
model's Hugging Face repository id) or a path to a ``config.json`` (or a folder holding one).

The bundled presets are ``model_configs/<name>.json`` beside this module: each is the
sizing-relevant part of the model's Hugging Face ``config.json``, keys spelled as Hugging Face
spells them, plus a ``_kvbudget`` table with the model's repository, where the copy of the config
came from (a public repository and commit), and the parameter count its card publishes
(``docs/models.md`` lists them).

How the figures are counted (each is what vLLM allocates or computes; facts from vLLM 0.32.0,
``vllm/config/model.py`` ``get_num_kv_heads`` and ``vllm/v1/kv_cache_interface.py``):

* KV bytes per token and layer: ``2 * kv_heads_per_gpu * head_dim * dtype`` (K and V), with
  ``kv_heads_per_gpu = max(1, num_kv_heads // tp)`` (vLLM replicates KV heads when there are
  fewer than GPUs). MLA stores one latent of ``kv_lora_rank + qk_rope_head_dim`` values per
  token and layer, the same on every tensor-parallel rank. ``kv_cache_dtype`` ``auto`` is the
  model's 16-bit activation dtype (2 bytes); ``fp8``, ``fp8_e4m3`` and ``fp8_e5m2`` are 1 byte.
* Weights on one GPU under tensor parallelism as vLLM shards them: embeddings and LM head split
  by vocabulary, attention by heads (KV heads replicated below one per GPU; MLA's down
  projections replicated), dense and shared-expert FFNs by intermediate size, routers and norms
  replicated; routed experts split over ``tp * ep`` GPUs (each expert's intermediate dimension
  sharded, or whole experts per GPU with ``--enable-expert-parallel``: the same total).
* Bytes per parameter: 2 for bfloat16/float16 (a float32 checkpoint is served in 16 bits:
  vLLM's ``--dtype auto``), 1 for FP8 linear layers (DeepSeek-V3's block-128 checkpoints; the
  float32 block scales add 4 bytes per 16,384 weights and are left out), 4.25 bits for MXFP4
  (4-bit values plus one 8-bit scale per 32: gpt-oss's routed experts only; its attention,
  router, embeddings and LM head stay bf16), 4/8 bits plus a 16-bit scale per 128 for GPTQ/AWQ.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

F = TypeVar("F", float, npt.NDArray[np.float64])

#: ``model_type`` values :func:`model_from_config` parses.
MODEL_TYPES: tuple[str, ...] = (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "deepseek_v2",
    "deepseek_v3", "gpt_oss", "gemma", "gemma2", "gemma3", "gemma3_text", "phi3",
)
#: Weight dtypes and their bytes per parameter for the layers they apply to.
WEIGHT_DTYPES: dict[str, float] = {
    "bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "fp8": 1.0, "mxfp4": 4.25 / 8,
    "int4": (4 + 16 / 128) / 8, "int8": (8 + 16 / 128) / 8,
}
#: ``kv_cache_dtype`` values (vLLM's ``--kv-cache-dtype``) and their bytes per element; ``auto``
#: is the model's activation dtype.
KV_CACHE_DTYPES: dict[str, int | None] = {
    "auto": None, "bfloat16": 2, "float16": 2, "bf16": 2, "fp16": 2, "half": 2,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
_GEMMA = ("gemma", "gemma2", "gemma3", "gemma3_text")


class ModelConfigError(ValueError):
    """A ``config.json`` kvbudget cannot size: the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class MoESpec:
    """The mixture-of-experts layers of a model.

    ``num_experts`` routed experts per MoE layer, ``num_experts_per_tok`` of them per token, each a
    gated FFN of ``expert_intermediate_size``; ``num_moe_layers`` of the model's layers are MoE
    (the others are dense FFNs of the model's ``intermediate_size``). ``num_shared_experts``
    always-active experts of ``shared_expert_intermediate_size`` each (DeepSeek: its
    ``moe_intermediate_size``; Qwen2-MoE: one, of ``shared_expert_intermediate_size``, with a
    one-output sigmoid gate, ``shared_expert_gate``). ``expert_bias``: each expert's projections
    have biases (gpt-oss); ``router_bias``: the router has one bias per expert (gpt-oss,
    DeepSeek-V3's score-correction bias).
    """

    num_experts: int
    num_experts_per_tok: int
    expert_intermediate_size: int
    num_moe_layers: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    shared_expert_gate: bool = False
    expert_bias: bool = False
    router_bias: bool = False

    def __post_init__(self) -> None:
        for name in ("num_experts", "num_experts_per_tok", "expert_intermediate_size",
                     "num_moe_layers"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"moe {name} must be >= 1, got {getattr(self, name)!r}")
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"moe num_experts_per_tok ({self.num_experts_per_tok}) exceeds num_experts "
                f"({self.num_experts})"
            )
        if self.num_shared_experts < 0 or self.shared_expert_intermediate_size < 0:
            raise ValueError("moe shared experts must be >= 0")


@dataclass(frozen=True, slots=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): K and V come from a ``kv_lora_rank`` latent
    plus a ``qk_rope_head_dim`` positional key shared by all heads, which is what the KV cache
    holds; queries are low-rank too when ``q_lora_rank`` is set."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"mla {name} must be >= 1, got {getattr(self, name)!r}")
        if self.q_lora_rank is not None and self.q_lora_rank < 1:
            raise ValueError(f"mla q_lora_rank must be >= 1 or None, got {self.q_lora_rank!r}")

    @property
    def kv_elements_per_token(self) -> int:
        """Values one token stores per layer: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shapes of one model (see the module docstring for how they are counted).

    ``intermediate_size`` is the FFN size of the dense (non-MoE) layers; it counts for nothing
    where every layer is MoE (Mixtral, Qwen3-MoE, gpt-oss). ``head_dim`` of an MLA model is the
    query/key head size (``qk_nope_head_dim + qk_rope_head_dim``) and its ``num_kv_heads`` the
    config's nominal figure (MLA's cache does not depend on it). ``num_sliding_layers`` of the
    layers attend only to the last ``sliding_window`` tokens. ``num_params_published`` is a
    parameter count known apart from the shapes: the one the model's card publishes (bundled
    presets) or torch's count of a profiled model.
    """

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    weight_dtype: str = "bfloat16"
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    source: str = ""
    num_params_published: float | None = None
    attention_bias: bool = False  # q, k and v projections have biases (Qwen2, gpt-oss)
    attention_output_bias: bool = False  # the output projection has one (gpt-oss)
    qk_norm: bool = False  # per-head RMSNorm of q and k (Qwen3, Gemma 3)
    norms_per_layer: int = 2  # RMSNorms of hidden_size per layer (Gemma 2/3: 4)

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
                           "head_dim", "vocab_size", "max_position_embeddings"):
            value = getattr(self, field_name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"model {self.name!r}: {field_name} must be >= 1, got {value!r}")
        if self.intermediate_size < 0:
            raise ValueError(f"model {self.name!r}: intermediate_size must be >= 0")
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"model {self.name!r}: num_attention_heads ({self.num_attention_heads}) must be "
                f"a multiple of num_kv_heads ({self.num_kv_heads})"
            )
        if self.weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(
                f"model {self.name!r}: weight_dtype {self.weight_dtype!r} is not one of "
                f"{', '.join(WEIGHT_DTYPES)}"
            )
        if self.weight_dtype == "mxfp4" and self.moe is None:
            raise ValueError(f"model {self.name!r}: mxfp4 weights are for MoE experts only")
        if self.moe is not None and self.moe.num_moe_layers > self.num_layers:
            raise ValueError(f"model {self.name!r}: more MoE layers than layers")
        if not 0 <= self.num_sliding_layers <= self.num_layers:
            raise ValueError(
                f"model {self.name!r}: num_sliding_layers must be in [0, {self.num_layers}], "
                f"got {self.num_sliding_layers!r}"
            )
        if self.num_sliding_layers and not (self.sliding_window and self.sliding_window >= 1):
            raise ValueError(f"model {self.name!r}: sliding layers need a sliding_window >= 1")

    # --- dtypes -------------------------------------------------------------------------------
    @property
    def dtype_bytes(self) -> int:
        """Bytes of the model's activation dtype (and of its unquantized weights): 4 for a
        float32 model (the profiler's CPU runs), else 2."""
        return 4 if self.weight_dtype == "float32" else 2

    def _linear_bpp(self) -> float:
        """Bytes per parameter of the linear layers (attention, dense FFN, shared experts)."""
        if self.weight_dtype in ("fp8", "int4", "int8"):
            return WEIGHT_DTYPES[self.weight_dtype]
        return float(self.dtype_bytes)

    def _expert_bpp(self) -> float:
        """Bytes per parameter of the routed experts' weight matrices."""
        if self.weight_dtype == "mxfp4":
            return WEIGHT_DTYPES["mxfp4"]
        return self._linear_bpp()

    # --- parameter counts, per GPU ------------------------------------------------------------
    @property
    def num_dense_layers(self) -> int:
        """Layers whose FFN is a dense one of ``intermediate_size``."""
        return self.num_layers - (self.moe.num_moe_layers if self.moe is not None else 0)

    @property
    def num_full_attention_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    def num_kv_heads_per_gpu(self, tp: int = 1) -> int:
        """KV heads one GPU holds: ``max(1, num_kv_heads // tp)`` (1 for MLA)."""
        _check_parallel(tp)
        if self.mla is not None:
            return 1
        return max(1, self.num_kv_heads // tp)

    def check_tensor_parallel(self, tp: int) -> None:
        """``ValueError`` unless vLLM can shard this model over ``tp`` GPUs: ``tp`` divides the
        attention heads, and the KV heads divide evenly over the GPUs (or, fewer than them,
        replicate evenly: ``tp`` a multiple of them), as vLLM's ``QKVParallelLinear`` asserts."""
        _check_parallel(tp)
        heads, kv = self.num_attention_heads, self.num_kv_heads
        if heads % tp:
            raise ValueError(f"tensor_parallel_size {tp} does not divide {self.name}'s {heads} "
                             "attention heads (vLLM requires it to)")
        if self.mla is None and (kv % tp if kv >= tp else tp % kv):
            raise ValueError(f"tensor_parallel_size {tp} does not shard {self.name}'s {kv} KV "
                             "heads evenly (vLLM requires one to divide the other)")

    def _attention_params(self, tp: int) -> tuple[float, float]:
        """One layer's attention on one GPU: (linear weights, biases and norms)."""
        h, heads, d = self.hidden_size, self.num_attention_heads, self.head_dim
        if self.mla is not None:
            m = self.mla
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank is None:
                q_sharded, q_replicated, q_norm = h * heads * qk, 0, 0
            else:
                q_sharded = m.q_lora_rank * heads * qk
                q_replicated, q_norm = h * m.q_lora_rank, m.q_lora_rank
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim)  # replicated in vLLM
            kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            o = heads * m.v_head_dim * h
            linear = (q_sharded + kv_b + o) / tp + q_replicated + kv_a
            return linear, float(q_norm + m.kv_lora_rank)
        kv = self.num_kv_heads_per_gpu(tp)
        linear = 2 * h * heads * d / tp + 2 * h * kv * d
        other = 0.0
        if self.attention_bias:
            other += heads * d / tp + 2 * kv * d
        if self.attention_output_bias:
            other += h
        if self.qk_norm:
            other += 2 * d
        return linear, other

    def _expert_params(self) -> tuple[int, int]:
        """(weight matrices, biases) of one routed expert in one layer, whole."""
        assert self.moe is not None
        h, i = self.hidden_size, self.moe.expert_intermediate_size
        return 3 * h * i, (2 * i + h) if self.moe.expert_bias else 0

    def _ffn_params(self, tp: int) -> tuple[float, float]:
        """(linear weights, other weights) of every layer's FFN together on one GPU, routed
        experts left out."""
        h = self.hidden_size
        linear = self.num_dense_layers * 3 * h * self.intermediate_size / tp
        other = 0.0
        if self.moe is not None:
            m = self.moe
            shared = m.num_shared_experts * 3 * h * m.shared_expert_intermediate_size / tp
            router = h * m.num_experts + (m.num_experts if m.router_bias else 0)
            gate = h if m.shared_expert_gate else 0
            linear += m.num_moe_layers * shared
            other += m.num_moe_layers * (router + gate)
        return linear, other

    def _embedding_params(self, tp: int) -> float:
        tables = 1 if self.tie_word_embeddings else 2
        return tables * self.vocab_size * self.hidden_size / tp

    def _norm_params(self) -> int:
        return self.num_layers * self.norms_per_layer * self.hidden_size + self.hidden_size

    @property
    def num_params(self) -> float:
        """Total parameters, counted from the shapes (embeddings once when tied)."""
        return self._dense_params(1) + self._routed_params(1, 1)

    def _dense_params(self, tp: int) -> float:
        attn_linear, attn_other = self._attention_params(tp)
        ffn_linear, ffn_other = self._ffn_params(tp)
        return (self.num_layers * (attn_linear + attn_other) + ffn_linear + ffn_other
                + self._embedding_params(tp) + self._norm_params())

    def _routed_params(self, tp: int, ep: int) -> float:
        if self.moe is None:
            return 0.0
        matrices, biases = self._expert_params()
        return self.moe.num_moe_layers * self.moe.num_experts * (matrices + biases) / (tp * ep)

    @property
    def num_active_params(self) -> float:
        """Parameters one token computes with: the total less the input embedding table (a
        lookup; with tied embeddings the table is the LM head and counts) and less the routed
        experts it is not routed to. DeepSeek and OpenAI count "activated parameters" so;
        Qwen's cards add the embedding table."""
        active = self.num_params
        if not self.tie_word_embeddings:
            active -= self.vocab_size * self.hidden_size
        if self.moe is not None:
            matrices, biases = self._expert_params()
            unused = self.moe.num_experts - self.moe.num_experts_per_tok
            active -= self.moe.num_moe_layers * unused * (matrices + biases)
        return active

    # --- bytes ----------------------------------------------------------------------------------
    def dense_weight_bytes(self, tp: int = 1) -> float:
        """Bytes on one GPU of every weight but the routed experts (read by every step)."""
        _check_parallel(tp)
        b16 = float(self.dtype_bytes)
        linear_bpp = self._linear_bpp()
        attn_linear, attn_other = self._attention_params(tp)
        ffn_linear, ffn_other = self._ffn_params(tp)
        return (
            (self.num_layers * attn_linear + ffn_linear) * linear_bpp
            + (self.num_layers * attn_other + ffn_other) * b16
            + (self._embedding_params(tp) + self._norm_params()) * b16
        )

    def expert_weight_bytes(
        self, tp: int = 1, ep: int = 1, *, enable_expert_parallel: bool = False
    ) -> float:
        """Bytes of one routed expert of one layer on a GPU that holds it: ``1 / (tp * ep)`` of
        it when experts are tensor-sharded (vLLM's default), all of it under
        ``enable_expert_parallel`` (whole experts spread over the GPUs). 0 for a dense model."""
        _check_parallel(tp, ep)
        if self.moe is None:
            return 0.0
        matrices, biases = self._expert_params()
        whole = matrices * self._expert_bpp() + biases * self.dtype_bytes
        return whole if enable_expert_parallel else whole / (tp * ep)

    def weight_bytes(self, tp: int = 1, ep: int = 1) -> float:
        """Bytes of weights on one GPU: the dense part sharded over ``tp``, the routed experts
        over ``tp * ep`` GPUs."""
        routed = 0.0
        if self.moe is not None:
            routed = (self.moe.num_moe_layers * self.moe.num_experts
                      * self.expert_weight_bytes(tp, ep))
        return self.dense_weight_bytes(tp) + routed

    def expected_distinct_experts(self, num_tokens: F) -> F:
        """Expected distinct routed experts per MoE layer that a step of ``num_tokens`` tokens
        touches, routing uniform top-k: ``E * (1 - (1 - k/E) ** T)`` (0 for a dense model).
        Works elementwise on arrays."""
        if self.moe is None:
            zero: F = num_tokens * 0.0
            return zero
        e, k = float(self.moe.num_experts), float(self.moe.num_experts_per_tok)
        if isinstance(num_tokens, float | int):
            scalar: F = e * (1.0 - (1.0 - k / e) ** float(num_tokens))
            return scalar
        result: F = e * (1.0 - np.power(1.0 - k / e, num_tokens))
        return result

    # --- FLOPs ----------------------------------------------------------------------------------
    def flops_per_token(self) -> float:
        """``2 *`` the weights a token multiplies by: attention projections, its FFN (the
        routed experts it goes to, shared experts, router) and the LM head; not the embedding
        lookup, norms, biases or attention scores (:meth:`attention_flops_per_token_pair`)."""
        attn_linear, _ = self._attention_params(1)
        ffn_linear, ffn_other = self._ffn_params(1)
        routed = 0.0
        if self.moe is not None:
            matrices, _ = self._expert_params()
            routed = self.moe.num_moe_layers * self.moe.num_experts_per_tok * matrices
        lm_head = self.vocab_size * self.hidden_size
        return 2.0 * (self.num_layers * attn_linear + ffn_linear + ffn_other
                      + routed + lm_head)

    def _attention_flops_per_layer(self, absorbed: bool) -> float:
        heads = self.num_attention_heads
        if self.mla is None:
            return 4.0 * heads * self.head_dim
        m = self.mla
        if absorbed:  # decode: scores over the latent and the rotary key, values in the latent
            return 2.0 * heads * (m.kv_lora_rank + m.qk_rope_head_dim) + 2.0 * heads * m.kv_lora_rank
        return 2.0 * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2.0 * heads * m.v_head_dim

    def attention_flops_per_token_pair(self, *, absorbed: bool = False) -> float:
        """FLOPs of one (query token, context token) pair over all layers: ``QK^T`` and ``PV``,
        ``4 * heads * head_dim`` per layer; MLA's per its dimensions (``absorbed``: the form vLLM
        decodes with, attention over the ``kv_lora_rank`` latent)."""
        return self.num_layers * self._attention_flops_per_layer(absorbed)

    def attention_flops_per_token_pair_full_and_sliding(
        self, *, absorbed: bool = False
    ) -> tuple[float, float]:
        """:meth:`attention_flops_per_token_pair` of the full-attention and of the
        sliding-window layers (a sliding layer's pairs stop at its window)."""
        per_layer = self._attention_flops_per_layer(absorbed)
        return (self.num_full_attention_layers * per_layer, self.num_sliding_layers * per_layer)

    # --- KV cache -------------------------------------------------------------------------------
    def kv_bytes_per_token_per_layer(self, tp: int = 1, kv_cache_dtype: str = "auto") -> int:
        element = kv_element_bytes(kv_cache_dtype, self.dtype_bytes)
        if self.mla is not None:
            _check_parallel(tp)
            return self.mla.kv_elements_per_token * element
        return 2 * self.num_kv_heads_per_gpu(tp) * self.head_dim * element

    def kv_bytes_per_token_full_and_sliding(
        self, tp: int = 1, kv_cache_dtype: str = "auto"
    ) -> tuple[int, int]:
        """KV bytes one token occupies on one GPU in the full-attention layers and in the
        sliding-window layers."""
        per_layer = self.kv_bytes_per_token_per_layer(tp, kv_cache_dtype)
        return per_layer * self.num_full_attention_layers, per_layer * self.num_sliding_layers

    def kv_bytes_per_token(self, tp: int = 1, kv_cache_dtype: str = "auto") -> int:
        """KV bytes one token occupies on one GPU over all attention layers."""
        return self.kv_bytes_per_token_per_layer(tp, kv_cache_dtype) * self.num_layers

    # --- the former presets' sizing (RooflineCostModel, num_gpu_blocks) ------------------------
    @property
    def legacy_num_params(self) -> float:
        """The parameter count the roofline and KV-capacity presets sized a model by before
        configs were parsed: the published figure where the preset has one, else the count
        from the shapes (kept so their results do not move)."""
        return self.num_params_published if self.num_params_published is not None \
            else self.num_params

    def legacy_weight_bytes(self, tp: int = 1) -> float:
        """Weights on one GPU as the former presets sized them: ``legacy_num_params *
        dtype_bytes / tp`` for 16-bit models; :meth:`weight_bytes` for quantized ones."""
        if self.weight_dtype in ("bfloat16", "float16", "float32"):
            return self.legacy_num_params * self.dtype_bytes / tp
        return self.weight_bytes(tp)


def _check_parallel(tp: int, ep: int = 1) -> None:
    if not (isinstance(tp, int) and tp >= 1):
        raise ValueError(f"tensor_parallel_size must be an integer >= 1, got {tp!r}")
    if not (isinstance(ep, int) and ep >= 1):
        raise ValueError(f"expert-parallel size must be an integer >= 1, got {ep!r}")


def kv_element_bytes(kv_cache_dtype: str, auto_bytes: int = 2) -> int:
    """Bytes of one KV-cache element for vLLM's ``--kv-cache-dtype`` (``auto``: ``auto_bytes``)."""
    try:
        size = KV_CACHE_DTYPES[kv_cache_dtype]
    except KeyError:
        raise ValueError(
            f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}"
        ) from None
    return auto_bytes if size is None else size


# --- config.json --------------------------------------------------------------------------------
MAX_CONFIG_INT = 2**31 - 1
"""The largest integer a config.json field may hold (sizes, counts, positions)."""


class _Fields:
    """Typed reads of one config table; every failure names the file and the field."""

    def __init__(self, table: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.table, self.source, self.prefix = table, source, prefix

    def fail(self, key: str, why: str) -> ModelConfigError:
        return ModelConfigError(f"{self.source}: {self.prefix}{key}: {why}")

    def has(self, key: str) -> bool:
        return self.table.get(key) is not None

    def int_(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.table.get(key)
        if value is None:
            if default is None:
                raise self.fail(key, "missing (needed to size the model)")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise self.fail(key, f"must be an integer, got {value!r}")
        if int(value) < minimum:
            raise self.fail(key, f"must be >= {minimum}, got {value!r}")
        if int(value) > MAX_CONFIG_INT:  # no model has 2^31 layers, heads or positions
            raise self.fail(key, f"must be <= {MAX_CONFIG_INT:,}, got {value!r}")
        return int(value)

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        return self.int_(key, minimum=minimum) if self.has(key) else None

    def bool_(self, key: str, default: bool) -> bool:
        value = self.table.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"must be true or false, got {value!r}")
        return value

    def str_(self, key: str) -> str | None:
        value = self.table.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {value!r}")
        return value


# Defaults of transformers' Gemma3TextConfig for the keys a real Gemma 3 ``text_config`` omits
# (it serialises only values that differ from them).
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262_208, "max_position_embeddings": 131_072, "sliding_window": 4096,
    "sliding_window_pattern": 6, "head_dim": 256, "tie_word_embeddings": True,
}


_COMPRESSED_WEIGHTS = {(8, "float"): "fp8", (8, "int"): "int8", (4, "int"): "int4"}
"""The weights of a ``compressed-tensors`` checkpoint (``config_groups.*.weights``: ``num_bits``
and ``type``, vLLM ``CompressedTensorsConfig._quantization_scheme_map_from_config``) that
kvbudget models, as its weight dtypes: FP8 (RedHatAI's ``-FP8`` and ``-FP8-dynamic``), W8A8
int8 and W4A16 int4. 4-bit floats (NVFP4) are not modelled."""


def _compressed_tensors_dtype(q: _Fields) -> str:
    """The one weight dtype of a ``compressed-tensors`` config's ``config_groups``; a group of
    other weights, or groups that differ, are refused by name."""
    groups = q.table.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise q.fail("config_groups", "missing: the weights' bits and type are not told")
    found = set()
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise q.fail(f"config_groups.{name}.weights", "missing or not a table")
        key = (weights.get("num_bits"), weights.get("type"))
        if key not in _COMPRESSED_WEIGHTS:
            raise q.fail(f"config_groups.{name}.weights", f"{key[0]}-bit {key[1]} weights are "
                         "not modelled (8-bit float, 8-bit int, 4-bit int)")
        found.add(_COMPRESSED_WEIGHTS[key])
    if len(found) > 1:
        raise q.fail("config_groups", f"groups of different weights ({', '.join(sorted(found))})"
                     " are not modelled")
    return found.pop()


def _weight_dtype(f: _Fields) -> str:
    """The weights' dtype: the ``quantization_config``'s where there is one (``fbgemm_fp8``,
    Meta's FP8 checkpoints such as meta-llama/Llama-3.1-405B-FP8, stores its weights as
    ``float8_e4m3fn``, as ``fp8`` does: vLLM ``FBGEMMFp8Config``), else ``torch_dtype``."""
    quant = f.table.get("quantization_config")
    if quant is not None:
        if not isinstance(quant, Mapping):
            raise f.fail("quantization_config", "must be a table")
        q = _Fields(quant, f.source, f"{f.prefix}quantization_config.")
        method = q.str_("quant_method")
        if method in ("fp8", "fbgemm_fp8"):
            return "fp8"
        if method == "compressed-tensors":
            return _compressed_tensors_dtype(q)
        if method == "mxfp4":
            return "mxfp4"
        if method in ("gptq", "awq"):
            bits = q.int_("bits", 4)
            if bits not in (4, 8):
                raise q.fail("bits", f"{method} with {bits} bits is not modelled (4 or 8)")
            return f"int{bits}"
        raise q.fail("quant_method", f"{method!r} is not modelled (fp8, fbgemm_fp8, "
                     "compressed-tensors, mxfp4, gptq, awq)")
    dtype = f.str_("torch_dtype") or f.str_("dtype") or "bfloat16"
    if dtype in ("bfloat16", "float16"):
        return dtype
    if dtype == "float32":  # vLLM's --dtype auto serves float32 checkpoints in 16 bits
        return "bfloat16"
    raise f.fail("torch_dtype", f"{dtype!r} is not one of bfloat16, float16, float32")


def _text_table(config: Mapping[str, Any], source: str) -> tuple[Mapping[str, Any], str]:
    """The language model's table: ``text_config`` (with the top-level dtype and quantization
    where it lacks them) for a multimodal config, else the config itself."""
    text = config.get("text_config")
    if text is None:
        return config, ""
    if not isinstance(text, Mapping):
        raise ModelConfigError(f"{source}: text_config: must be a table")
    merged = dict(text)
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if key in config and key not in merged:
            merged[key] = config[key]
    return merged, "text_config."


def model_from_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    num_params_published: float | None = None,
) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` (parsed): ``name`` names the
    model, ``source`` the file (error messages start with it). Raises
    :class:`ModelConfigError` naming the field for an unknown ``model_type`` or a missing or
    malformed field."""
    model_type = _model_type(config, source)
    table, prefix = _text_table(config, source)
    if model_type == "gemma3" and prefix:
        table = {**_GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in table.items() if v is not None}}
    f = _Fields(table, source, prefix)

    layers = f.int_("num_hidden_layers")
    hidden = f.int_("hidden_size")
    heads = f.int_("num_attention_heads")
    kv_heads = f.int_("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.fail("num_key_value_heads",
                     f"{kv_heads} does not divide num_attention_heads ({heads})")
    weight_dtype = _weight_dtype(f)
    vocab = f.int_("vocab_size")
    max_len = f.int_("max_position_embeddings")
    tie = f.bool_("tie_word_embeddings", model_type in _GEMMA)

    moe = _moe(model_type, f, layers)
    mla, head_dim = _attention_shape(model_type, f, hidden, heads)
    # a dense FFN size is needed where some layer is dense
    dense_layers = layers - (moe.num_moe_layers if moe is not None else 0)
    if dense_layers or model_type in ("mixtral", "gpt_oss"):
        intermediate = f.int_("intermediate_size")
    else:
        intermediate = f.int_("intermediate_size", 0, minimum=0)
    window, num_sliding = _sliding(model_type, f, layers)
    if weight_dtype == "mxfp4" and moe is None:
        raise f.fail("quantization_config", "mxfp4 is modelled for MoE experts only")
    try:
        return ModelSpec(
            name=name,
            model_type=model_type,
            num_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=intermediate,
            vocab_size=vocab,
            tie_word_embeddings=tie,
            max_position_embeddings=max_len,
            weight_dtype=weight_dtype,
            moe=moe,
            mla=mla,
            sliding_window=window,
            num_sliding_layers=num_sliding,
            source=source,
            num_params_published=num_params_published,
            attention_bias=f.bool_("attention_bias", model_type in ("qwen2", "qwen2_moe")),
            attention_output_bias=model_type == "gpt_oss" and f.bool_("attention_bias", False),
            qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"),
            norms_per_layer=4 if model_type in ("gemma2", "gemma3", "gemma3_text") else 2,
        )
    except ValueError as exc:
        raise ModelConfigError(f"{source}: {exc}") from None


def _model_type(config: Mapping[str, Any], source: str) -> str:
    """The config's ``model_type``, refused when missing or not one of :data:`MODEL_TYPES`
    (or when the config is not an object)."""
    if not isinstance(config, Mapping):
        raise ModelConfigError(f"{source}: not a JSON object")
    top = _Fields(config, source)
    model_type = top.str_("model_type")
    if model_type is None:
        raise top.fail("model_type", "missing (needed to know how to read the config)")
    if model_type not in MODEL_TYPES:
        raise top.fail("model_type", f"{model_type!r} is not supported "
                                     f"(supported: {', '.join(MODEL_TYPES)})")
    return model_type


def _attention_shape(model_type: str, f: _Fields, hidden: int, heads: int
                     ) -> tuple[MLASpec | None, int]:
    """The multi-head latent attention of a DeepSeek config with ``kv_lora_rank`` (else None)
    and the head dimension: ``head_dim``, MLA's query head, else ``hidden_size / heads``."""
    mla = None
    head_dim = f.int_("head_dim") if f.has("head_dim") else 0
    if model_type in ("deepseek_v2", "deepseek_v3") and f.has("kv_lora_rank"):
        mla = MLASpec(
            kv_lora_rank=f.int_("kv_lora_rank"),
            qk_rope_head_dim=f.int_("qk_rope_head_dim"),
            qk_nope_head_dim=f.int_("qk_nope_head_dim"),
            v_head_dim=f.int_("v_head_dim"),
            q_lora_rank=f.opt_int("q_lora_rank"),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if not head_dim:
        if hidden % heads:
            raise f.fail("head_dim", f"missing and hidden_size ({hidden}) is not a multiple of "
                                     f"num_attention_heads ({heads})")
        head_dim = hidden // heads
    return mla, head_dim


def _moe(model_type: str, f: _Fields, layers: int) -> MoESpec | None:
    if model_type in ("mixtral", "gpt_oss"):
        experts = f.int_("num_local_experts")
        top_k = f.int_("num_experts_per_tok") if f.has("num_experts_per_tok") or \
            not f.has("experts_per_token") else f.int_("experts_per_token")
        gpt = model_type == "gpt_oss"
        return _moe_spec(f, experts, top_k, f.int_("intermediate_size"), layers,
                         expert_bias=gpt, router_bias=gpt)
    if model_type in ("qwen2_moe", "qwen3_moe"):
        experts = f.int_("num_experts")
        step = f.int_("decoder_sparse_step", 1)
        only = f.table.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
            raise f.fail("mlp_only_layers", f"must be a list of layer indices, got {only!r}")
        moe_layers = sum(1 for i in range(layers) if i not in only and (i + 1) % step == 0)
        shared = f.int_("shared_expert_intermediate_size", 0, minimum=0) \
            if model_type == "qwen2_moe" else 0
        return _moe_spec(f, experts, f.int_("num_experts_per_tok"),
                         f.int_("moe_intermediate_size"), moe_layers,
                         num_shared=1 if shared else 0, shared_size=shared,
                         shared_gate=bool(shared))
    if model_type in ("deepseek_v2", "deepseek_v3"):
        if not f.has("n_routed_experts"):
            return None
        first_dense = f.int_("first_k_dense_replace", 0, minimum=0)
        freq = f.int_("moe_layer_freq", 1)
        moe_layers = sum(1 for i in range(layers) if i >= first_dense and i % freq == 0)
        size = f.int_("moe_intermediate_size")
        shared = f.int_("n_shared_experts", 0, minimum=0)
        return _moe_spec(f, f.int_("n_routed_experts"), f.int_("num_experts_per_tok"), size,
                         moe_layers, num_shared=shared, shared_size=size if shared else 0,
                         router_bias=model_type == "deepseek_v3")
    return None


def _moe_spec(f: _Fields, experts: int, top_k: int, size: int, moe_layers: int, *,
              num_shared: int = 0, shared_size: int = 0, shared_gate: bool = False,
              expert_bias: bool = False, router_bias: bool = False) -> MoESpec | None:
    if moe_layers == 0:
        return None
    if top_k > experts:
        raise f.fail("num_experts_per_tok", f"{top_k} exceeds the number of experts ({experts})")
    return MoESpec(experts, top_k, size, moe_layers, num_shared, shared_size, shared_gate,
                   expert_bias, router_bias)


def _sliding(model_type: str, f: _Fields, layers: int) -> tuple[int | None, int]:
    """(window, number of sliding-window layers) as the model's transformers code reads them."""
    types = f.table.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise f.fail("layer_types", f"must list num_hidden_layers ({layers}) entries")
        unknown = sorted({t for t in types if t not in ("sliding_attention", "full_attention")},
                         key=str)
        if unknown:
            raise f.fail("layer_types", f"unknown layer type {unknown[0]!r}")
        count = sum(1 for t in types if t == "sliding_attention")
        return (f.int_("sliding_window"), count) if count else (None, 0)
    if model_type == "gemma2":  # even layers local, odd layers global
        return f.int_("sliding_window", 4096), (layers + 1) // 2
    if model_type in ("gemma3", "gemma3_text"):  # every pattern-th layer global
        pattern = f.int_("sliding_window_pattern", 6)
        return f.int_("sliding_window", 4096), layers - layers // pattern
    if model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        # sliding_window and max_window_layers are inert unless use_sliding_window is set;
        # then layers from max_window_layers on use the window
        if not f.bool_("use_sliding_window", False):
            return None, 0
        first = f.int_("max_window_layers", layers, minimum=0)
        count = max(0, layers - first)
        return (f.int_("sliding_window"), count) if count else (None, 0)
    if model_type in ("mistral", "mixtral", "phi3") and f.has("sliding_window"):
        return f.int_("sliding_window"), layers  # every layer
    return None, 0


# --- presets and files --------------------------------------------------------------------------
#: Names the former preset table used, and the bundled preset each now means.
ALIASES: dict[str, str] = {"mistral-7b": "Mistral-7B-v0.3"}
_META = "_kvbudget"


def _bundled_dir() -> Path:
    """``model_configs/`` beside this module: the path ``importlib.resources.files`` gives for
    it (a package on the file system), without its ~2 M instructions of lookups per start."""
    return Path(__file__).parent / "model_configs"


@lru_cache(maxsize=1)
def _bundled_files() -> dict[str, str]:
    """lower-cased preset name -> file name of every bundled config."""
    return {
        entry.name[: -len(".json")].lower(): entry.name
        for entry in _bundled_dir().iterdir()
        if entry.name.endswith(".json")
    }


@lru_cache(maxsize=1)
def _repo_ids() -> dict[str, str]:
    """lower-cased Hugging Face repository id -> lower-cased preset name (reads every file)."""
    out: dict[str, str] = {}
    for key, file in _bundled_files().items():
        meta = json.loads(_bundled_dir().joinpath(file).read_text()).get(_META, {})
        repo = meta.get("hf_repo")
        if isinstance(repo, str):
            out[repo.lower()] = key
    return out


def preset_names() -> list[str]:
    """Names of the bundled model presets."""
    return sorted((file[: -len(".json")] for file in _bundled_files().values()), key=str.lower)


PRESET_SOURCE = "model preset "
"""How a bundled preset's ``ModelSpec.source`` begins (a ``config.json``'s is its path)."""


@cache
def _load_bundled(file: str) -> ModelSpec:
    data = json.loads(_bundled_dir().joinpath(file).read_text())
    meta = data.get(_META, {})
    name = file[: -len(".json")]
    published = meta.get("num_params_published")
    return model_from_config(
        data, name=name, source=f"{PRESET_SOURCE}{name} ({meta.get('hf_repo', '?')})",
        num_params_published=float(published) if published is not None else None,
    )


def load_model_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from a ``config.json`` file, or a folder holding one."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ModelConfigError(f"{p}: no such model config file") from None
    except OSError as exc:
        raise ModelConfigError(f"{p}: cannot read it ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        where = (f"line {exc.lineno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                 else "nested too deeply")
        raise ModelConfigError(f"{p}: not valid JSON ({where})") from None
    if name is None:
        name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return model_from_config(data, name=name, source=str(p))


def is_preset(name: str) -> bool:
    """Whether ``name`` names a bundled preset (or its repository id, or a former name)."""
    key = name.strip().lower()
    key = ALIASES.get(key, "").lower() or key
    return key in _bundled_files() or ("/" in key and key in _repo_ids())


SAME_ARCHITECTURE_PARTS: frozenset[str] = frozenset({"instruct", "chat", "it", "hf", "base"})
"""Dash-separated parts of a Hugging Face model name that name a fine-tune or a packaging of the
same weights' shape, not another architecture: ``-Instruct`` and ``-Chat`` (instruction and
chat tuning: meta-llama/Llama-3.1-8B-Instruct's config.json differs from Llama-3.1-8B's in
``eos_token_id`` only), ``-it`` (Gemma's instruction-tuned), ``-hf`` (Llama-2's transformers
conversion), ``-Base``. Quantised variants (``-FP8``, ``-AWQ``, ``-GPTQ``) change the weights'
bytes and are not stripped."""


_HUB_CACHE_DIR = re.compile(r"(?:^|/)models--([^/]+)(?:/snapshots/[^/]+)?$")
"""A model's folder in the Hugging Face hub cache, as servers are given it when they load a
downloaded model by path: ``.../hub/models--Qwen--Qwen3-8B/snapshots/<revision>``
(huggingface_hub ``file_download.repo_folder_name``: ``models--`` and the repository id with
its ``/`` written ``--``, which ``validate_repo_id`` forbids inside a name; an SGLang
``bench_serving`` result's ``server_info.model_path`` in github.com/bowenwan6/
sglang-vllm-profiler ``experiments/phase1/raw/`` at 454fdb0a)."""


def _as_repo_id(text: str) -> str:
    """``text`` without a trailing ``/``, and a hub-cache folder as its repository id."""
    text = text.rstrip("/")
    cached = _HUB_CACHE_DIR.search(text)
    return cached.group(1).replace("--", "/") if cached else text


def resolve_model_name(name: str) -> str | None:
    """The bundled preset a model name as Hugging Face and servers write it means, or None.

    Tried in order: the name itself (case-insensitive, a preset or a repository id; a folder's
    trailing ``/`` dropped, a Hugging Face hub-cache folder read as the repository id it holds),
    its last ``/`` part (an organisation's prefix or a local folder's path dropped), then that
    part without a leading ``Meta-`` (``Meta-Llama-3.1-8B``, the repositories' former names) and
    without the :data:`SAME_ARCHITECTURE_PARTS` (``Llama-3.1-8B-Instruct`` -> ``Llama-3.1-8B``,
    ``Mistral-7B-Instruct-v0.3`` -> ``Mistral-7B-v0.3``, ``gemma-2-9b-it`` -> ``Gemma-2-9B``).
    """
    text = _as_repo_id(name.strip())
    if not text:
        return None
    last = text.rsplit("/", 1)[-1]
    parts = [p for p in last.split("-") if p]
    if parts and parts[0].lower() == "meta":
        parts = parts[1:]
    stripped = "-".join(p for p in parts if p.lower() not in SAME_ARCHITECTURE_PARTS)
    names = {p.lower(): p for p in preset_names()}
    for candidate in (text, last, stripped):
        key = candidate.lower()
        key = ALIASES.get(key, "").lower() or key
        if key in names:
            return names[key]
        if "/" in key and key in _repo_ids():
            return names[_repo_ids()[key]]
    return None


def suggest_model(name: str) -> str:
    """``" (did you mean X?)"`` for the closest bundled preset names, or ``""``."""
    last = _as_repo_id(name.strip()).rsplit("/", 1)[-1]
    names = {p.lower(): p for p in preset_names()}
    close = difflib.get_close_matches(last.lower(), list(names), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(names[c] for c in close)}?)" if close else ""


def _path_is(text: str, kind: str) -> bool:
    """``Path(text).is_dir()`` / ``is_file()``, false for a name no file system takes (too
    long, a NUL byte) instead of an ``OSError``."""
    try:
        path = Path(text).expanduser()
        return path.is_dir() if kind == "dir" else path.is_file()
    except (OSError, ValueError):
        return False


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or text.startswith((".", "/", "~")) or _path_is(text, "dir")


@lru_cache(maxsize=64)
def get_model(name_or_path: str) -> ModelSpec:
    """A bundled preset (by name, case-insensitive, or by its Hugging Face repository id) or
    the model of a ``config.json`` path (or a folder holding one)."""
    key = name_or_path.strip().lower()
    files = _bundled_files()
    key = ALIASES.get(key, "").lower() or key
    if key in files:
        return _load_bundled(files[key])
    if "/" in key and key in _repo_ids():
        return _load_bundled(files[_repo_ids()[key]])
    if not name_or_path.strip():
        raise ValueError("model: empty name")
    if _looks_like_path(name_or_path) or _path_is(name_or_path, "file"):
        return load_model_config(name_or_path)
    resolved = resolve_model_name(name_or_path)
    if resolved is not None:
        return _load_bundled(files[resolved.lower()])
    raise ValueError(
        f"unknown model preset {name_or_path!r}{suggest_model(name_or_path)} (and no such "
        f"config.json file); known presets: {', '.join(preset_names())}"
    )


def bundled_models() -> dict[str, ModelSpec]:
    """Every bundled preset, by name."""
    return {name: get_model(name) for name in preset_names()}


def model_sources() -> list[dict[str, Any]]:
    """The ``_kvbudget`` table of every bundled config: repository, source, published count."""
    out = []
    for name in preset_names():
        data = json.loads(_bundled_dir().joinpath(_bundled_files()[name.lower()]).read_text())
        out.append({"name": name, **data.get(_META, {})})
    return out


