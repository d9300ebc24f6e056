"""KV capacity as vLLM v1 sizes it, against block counts vLLM reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.perf.hardware import GIB, get_gpu
from kvbudget.perf.kv_capacity import (
    check_holds_max_model_len,
    cudagraph_capture_sizes,
    kv_budget,
    num_gpu_blocks,
    sliding_model_short_of_max_model_len,
)
from kvbudget.perf.models import get_model


def test_rtx4090_llama31_8b_matches_the_blocks_vllm_reported(shared: Path) -> None:
    """vLLM 0.19 on an RTX 4090 reported 2,588 blocks for Llama-3.1-8B at utilization 0.9
    (LLMServingSim's recorded meta.json); the figure is read from the recording itself."""
    run = shared / "measured" / "llmservingsim_vllm019" / "RTX4090_Llama-3.1-8B"
    meta = json.loads((run / "meta.json").read_text())
    kw, kv = meta["engine_kwargs"], meta["kv_cache"]
    gpu = get_gpu("RTX-4090")
    assert gpu.memory_bytes == meta["hardware"]["device_total_memory_bytes"]
    blocks = num_gpu_blocks(
        gpu, get_model("Llama-3.1-8B"), block_size=kv["block_size"],
        gpu_memory_utilization=kv["gpu_memory_utilization"],
        max_num_batched_tokens=kw["max_num_batched_tokens"], max_num_seqs=kw["max_num_seqs"],
        profile_cudagraph_memory=False,  # vLLM 0.19: graphs captured in the slack
    )
    assert abs(blocks / kv["num_gpu_blocks"] - 1) < 0.03


def test_the_budget_adds_up_and_shards_over_tensor_parallel_ranks() -> None:
    gpu, model = get_gpu("H100-SXM"), get_model("Llama-3.1-70B")
    b2 = kv_budget(gpu, model, tensor_parallel_size=2)
    b4 = kv_budget(gpu, model, tensor_parallel_size=4)
    for b in (b2, b4):
        parts = (b.weight_bytes + b.non_torch_bytes + b.activation_bytes + b.sampler_bytes
                 + b.cudagraph_bytes + b.kv_cache_bytes)
        assert parts == pytest.approx(b.requested_bytes)
        assert b.num_gpu_blocks == int(b.kv_cache_bytes // b.block_bytes)
    assert b4.weight_bytes == pytest.approx(b2.weight_bytes / 2, rel=0.02)
    assert b4.block_bytes * 2 == b2.block_bytes  # 8 KV heads: 4 per GPU, then 2
    assert b4.num_gpu_blocks > 2 * b2.num_gpu_blocks  # half the weights per GPU, half the KV
    # 70 GB of bf16 weights do not fit one 80 GB GPU with room for KV
    with pytest.raises(ValueError, match="does not fit on L4"):
        num_gpu_blocks(get_gpu("L4"), model)
    # the refusal names the smallest tensor parallelism that holds it (70 B of bf16 weights:
    # 35 GB a GPU on two H100s leave room; 140 GB over eight 24 GB L4s leave none)
    with pytest.raises(ValueError, match=r"it fits at engine\.tensor_parallel_size=2$"):
        num_gpu_blocks(get_gpu("H100-SXM"), model)
    with pytest.raises(ValueError, match="not on up to eight GPUs with tensor parallelism"):
        num_gpu_blocks(get_gpu("L4"), model)


def test_more_memory_utilization_more_blocks_and_graph_memory_comes_off() -> None:
    gpu, model = get_gpu("H100-SXM"), get_model("Llama-3.1-8B")
    lo = num_gpu_blocks(gpu, model, gpu_memory_utilization=0.8)
    hi = num_gpu_blocks(gpu, model, gpu_memory_utilization=0.92)
    assert hi > lo
    without = num_gpu_blocks(gpu, model, profile_cudagraph_memory=False)
    assert without > hi
    graphs = kv_budget(gpu, model).cudagraph_bytes
    assert 0.2 * GIB < graphs < 1.5 * GIB


def test_capture_sizes_are_vllms() -> None:
    """vllm.py:2463-2597: H100 serve defaults (1,024 seqs, 8,192 tokens) capture 51 sizes up to
    512; data-centre Blackwell up to 1,024; small max_num_seqs cap them at twice that."""
    sizes = cudagraph_capture_sizes(1024, 8192)
    assert len(sizes) == 51 and sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 512
    assert cudagraph_capture_sizes(1024, 16384, large_blackwell=True)[-1] == 1024
    assert cudagraph_capture_sizes(8, 2048) == [1, 2, 4, 8, 16]


def test_a_kv_cache_short_of_max_model_len_is_refused_at_vllms_bound() -> None:
    """vLLM's ``check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_utils.py): one request of
    ``max_model_len`` needs ``cdiv(max_model_len, block_size)`` blocks of those left after the
    block pool's null block; a model with sliding-window layers is not checked here."""
    gpu, llama = get_gpu("A10G"), get_model("Llama-3.1-8B")
    check_holds_max_model_len(llama, gpu, 101, 16, 1600, given=True)  # 100 blocks + the null one
    with pytest.raises(ValueError, match=r"at most 1,600 here"):
        check_holds_max_model_len(llama, gpu, 101, 16, 1601, given=True)
    with pytest.raises(ValueError, match=r"max_model_len 1,601 \(given\)"):
        check_holds_max_model_len(llama, gpu, 101, 16, 1601, given=True)
    check_holds_max_model_len(get_model("Gemma-2-9B"), gpu, 10, 16, 8192, given=False)


def test_a_sliding_window_model_short_of_max_model_len_is_told_at_vllms_bound() -> None:
    """vLLM's ``check_enough_kv_cache_memory`` sums each layer's ``max_memory_usage_bytes``
    (vllm/v1/kv_cache_interface.py): ``cdiv(max_model_len, block_size)`` blocks a
    full-attention layer, ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
    block_size) + 1`` a sliding-window one. Gemma-2-9B (21 full, 21 sliding layers, window
    4,096) at 8,192 tokens with 2,048 batched: 21 x 512 + 21 x (384 + 1) = 18,837 layer-blocks,
    i.e. 448.5 blocks of all 42 layers; a model without sliding layers is never told here."""
    gemma = get_model("Gemma-2-9B")
    assert (gemma.num_full_attention_layers, gemma.num_sliding_layers) == (21, 21)
    assert gemma.sliding_window == 4096
    assert sliding_model_short_of_max_model_len(gemma, 448, 16, 8192, 2048)
    assert not sliding_model_short_of_max_model_len(gemma, 449, 16, 8192, 2048)
    # a window longer than the context: every layer needs the whole request (+1 block sliding)
    assert not sliding_model_short_of_max_model_len(gemma, 257, 16, 4096, 8192)
    assert sliding_model_short_of_max_model_len(gemma, 256, 16, 4096, 8192)
    assert not sliding_model_short_of_max_model_len(get_model("Llama-3.1-8B"), 1, 16, 8192, 2048)


def test_a_sliding_window_models_kv_capacity_counts_every_layer() -> None:
    """docs/models.md and docs/fidelity.md: the capacity counts a sliding-window layer's KV as a
    full layer's (vLLM's --disable-hybrid-kv-cache-manager), where the step model reads it up
    to the window: a block of Gemma-2-9B (21 full, 21 sliding layers) holds all 42 layers."""
    gemma = get_model("Gemma-2-9B")
    full, sliding = gemma.kv_bytes_per_token_full_and_sliding()
    assert full and sliding
    budget = kv_budget(get_gpu("H100-80GB"), gemma)
    assert budget.block_bytes == 16 * (full + sliding) == 16 * gemma.kv_bytes_per_token()
