"""Model specifications: the shapes that size weights, KV and FLOPs.

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

from dataclasses import dataclass


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



def get_model(name: str) -> ModelSpec:
    """The model preset of that name; an unknown name is a ValueError listing the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model preset {name!r}; known: {', '.join(MODELS)}") from None


