"""Model specifications from Hugging Face ``config.json``: the bundled presets' parameter counts
against the figures their publishers give, KV bytes per token against arithmetic written out
here, tensor-parallel sharding, and bad configs refused with one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import kvbudget.perf.models as models_module
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import legacy_num_gpu_blocks, num_gpu_blocks
from kvbudget.perf.models import (
    ModelConfigError,
    ModelSpec,
    get_model,
    model_from_config,
    model_sources,
    preset_names,
)
from kvbudget.perf.roofline import RooflineCostModel

CONFIGS = Path(models_module.__file__).resolve().parent / "model_configs"
runner = CliRunner()

# Published parameter counts: (total, active or None, who publishes them). Model cards on
# huggingface.co unless named; "HF count" is the parameter count the model's Hugging Face page
# shows from its safetensors files, where the card gives only a nominal size.
PUBLISHED: dict[str, tuple[float, float | None, str]] = {
    "DeepSeek-V2-Lite": (15.7e9, 2.4e9, "card: 15.7B total, 2.4B activated"),
    "DeepSeek-V3": (671e9, 37e9, "card: 671B total, 37B activated (MTP module not counted)"),
    "Gemma-2-27B": (27.2e9, None, "HF count"),
    "Gemma-2-9B": (9.24e9, None, "HF count"),
    "Gemma-3-12B": (12e9, None, "card: 12B (with the ~0.4B vision tower, not modelled)"),
    "Gemma-3-27B": (27e9, None, "card: 27B (with the ~0.4B vision tower, not modelled)"),
    "Llama-2-13B": (13e9, None, "card: 13B"),
    "Llama-2-70B": (69e9, None, "HF count"),
    "Llama-2-7B": (6.74e9, None, "HF count"),
    "Llama-3.1-405B": (405e9, None, "card: 405B"),
    "Llama-3.1-70B": (70.6e9, None, "HF count"),
    "Llama-3.1-8B": (8.03e9, None, "HF count"),
    "Llama-3.2-1B": (1.23e9, None, "card: 1.23B"),
    "Llama-3.2-3B": (3.21e9, None, "card: 3.21B"),
    "Llama-3.3-70B": (70e9, None, "card: 70B"),
    "Mistral-7B-v0.3": (7.25e9, None, "HF count"),
    "Mixtral-8x22B": (141e9, 39e9, "mistral.ai: 141B total, 39B active"),
    "Mixtral-8x7B": (46.7e9, 12.9e9, "mistral.ai: 46.7B total, 12.9B per token"),
    "Phi-4": (14.7e9, None, "HF count"),
    "Qwen2.5-14B": (14.7e9, None, "card: 14.7B"),
    "Qwen2.5-32B": (32.5e9, None, "card: 32.5B"),
    "Qwen2.5-72B": (72.7e9, None, "card: 72.7B"),
    "Qwen2.5-7B": (7.62e9, None, "HF count (the card says 7.61B)"),
    "Qwen3-14B": (14.8e9, None, "card: 14.8B"),
    "Qwen3-235B-A22B": (235e9, 22e9, "card: 235B total, 22B activated"),
    "Qwen3-30B-A3B": (30.5e9, 3.3e9, "card: 30.5B total, 3.3B activated"),
    "Qwen3-32B": (32.8e9, None, "card: 32.8B"),
    "Qwen3-8B": (8.2e9, None, "card: 8.2B"),
    "gpt-oss-120b": (116.83e9, 5.13e9, "OpenAI model card: 116.83B total, 5.13B active"),
    "gpt-oss-20b": (20.91e9, 3.61e9, "OpenAI model card: 20.91B total, 3.61B active"),
}
# Qwen's cards count the input embedding table among "activated" parameters; DeepSeek, OpenAI
# and Mistral do not (ModelSpec.num_active_params follows the latter).
ACTIVE_COUNTS_EMBEDDING = {"Qwen3-30B-A3B", "Qwen3-235B-A22B"}


def test_every_bundled_config_is_in_the_table_and_cites_its_source() -> None:
    assert set(preset_names()) == set(PUBLISHED)
    for meta in model_sources():
        assert meta["hf_repo"] and meta["source"] and meta["params_source"], meta["name"]
        assert meta["num_params_published"] == PUBLISHED[meta["name"]][0], meta["name"]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_the_published_figures(name: str) -> None:
    m = get_model(name)
    total, active, _ = PUBLISHED[name]
    assert m.num_params == pytest.approx(total, rel=0.03)
    if active is None:
        assert m.moe is None
        untied_table = 0 if m.tie_word_embeddings else m.vocab_size * m.hidden_size
        assert m.num_active_params == m.num_params - untied_table
    else:
        assert m.moe is not None
        counted = m.num_active_params
        if name in ACTIVE_COUNTS_EMBEDDING:
            counted += m.vocab_size * m.hidden_size
        assert counted == pytest.approx(active, rel=0.03)


def test_dense_and_moe_counts_written_out() -> None:
    # Llama-3.1-8B: embeddings and LM head 2 * 128256 * 4096; per layer q and o 4096 * 4096
    # each, k and v 4096 * 1024 each, MLP 3 * 4096 * 14336, two norms of 4096; final norm.
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    llama = get_model("Llama-3.1-8B")
    assert llama.num_params == 2 * 128256 * 4096 + 32 * per_layer + 4096 == 8_030_261_248
    # Mixtral-8x7B: per layer attention as above, 8 experts of 3 * 4096 * 14336, router 4096 * 8
    per_layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 8 * 3 * 4096 * 14336 + 4096 * 8 + 2 * 4096
    mixtral = get_model("Mixtral-8x7B")
    assert mixtral.num_params == 2 * 32000 * 4096 + 32 * per_layer + 4096 == 46_702_792_704
    unused = 32 * 6 * 3 * 4096 * 14336
    assert mixtral.num_active_params == mixtral.num_params - 32000 * 4096 - unused
    # DeepSeek-V2-Lite: 27 layers, the first dense; MLA with no q compression (16 heads, q/k
    # head 128 + 64, v head 128, latent 512): q 2048*16*192, kv_a 2048*(512+64) and its norm
    # 512, kv_b 512*16*(128+128), o 16*128*2048; 26 MoE layers of 64 routed and 2 shared
    # experts of 3*2048*1408 and a router 2048*64.
    attn = 2048 * 16 * 192 + 2048 * 576 + 512 + 512 * 16 * 256 + 16 * 128 * 2048
    moe = 66 * 3 * 2048 * 1408 + 2048 * 64
    ds = get_model("DeepSeek-V2-Lite")
    expected = (2 * 102400 * 2048 + 27 * (attn + 2 * 2048) + 3 * 2048 * 10944 + 26 * moe + 2048)
    assert ds.num_params == expected
    assert ds.moe is not None and ds.moe.num_moe_layers == 26 and ds.moe.num_shared_experts == 2


def test_kv_bytes_per_token_written_out() -> None:
    # 2 (K and V) * layers * KV heads on the GPU * head_dim * bytes
    assert get_model("Llama-3.1-8B").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131072
    assert get_model("Llama-3.1-8B").kv_bytes_per_token(1, "fp8") == 2 * 32 * 8 * 128 * 1
    # Llama-3.1-70B: 8 KV heads over 4 GPUs = 2 each; over 8 = 1; over 16 replicated, still 1
    l70 = get_model("Llama-3.1-70B")
    assert l70.kv_bytes_per_token(4) == 2 * 80 * 2 * 128 * 2 == 81920
    assert l70.kv_bytes_per_token(8) == l70.kv_bytes_per_token(16) == 2 * 80 * 1 * 128 * 2
    assert l70.num_kv_heads_per_gpu(16) == 1
    # Mixtral-8x7B at TP2: 8 KV heads -> 4 per GPU
    assert get_model("Mixtral-8x7B").kv_bytes_per_token(2) == 2 * 32 * 4 * 128 * 2 == 65536
    # Qwen3-32B at TP2: head_dim 128 from the config (64 heads * 128 != hidden 5120)
    q32 = get_model("Qwen3-32B")
    assert q32.head_dim == 128
    assert q32.kv_bytes_per_token(2) == 2 * 64 * 4 * 128 * 2 == 131072
    # Qwen3-30B-A3B: 48 layers, 4 KV heads of 128
    q30 = get_model("Qwen3-30B-A3B")
    assert q30.kv_bytes_per_token() == 2 * 48 * 4 * 128 * 2 == 98304
    assert q30.kv_bytes_per_token(8) == 2 * 48 * 1 * 128 * 2
    # DeepSeek-V2-Lite (MLA): 27 layers * (kv_lora_rank 512 + rope 64) values, on every GPU
    ds = get_model("DeepSeek-V2-Lite")
    assert ds.kv_bytes_per_token() == ds.kv_bytes_per_token(2) == 27 * (512 + 64) * 2 == 31104
    assert ds.kv_bytes_per_token(4, "fp8_e4m3") == 27 * 576
    assert get_model("DeepSeek-V3").kv_bytes_per_token(8) == 61 * 576 * 2 == 70272
    # gpt-oss-20b: 24 layers alternating sliding (window 128) and full, 8 KV heads of 64
    oss = get_model("gpt-oss-20b")
    assert (oss.sliding_window, oss.num_sliding_layers) == (128, 12)
    assert oss.kv_bytes_per_token_full_and_sliding() == (12 * 2 * 8 * 64 * 2, 12 * 2 * 8 * 64 * 2)
    assert oss.kv_bytes_per_token() == 24 * 2 * 8 * 64 * 2 == 49152
    # Gemma-3-27B: 62 layers, every 6th global (10), 52 sliding (window 1024), 16 KV heads of 128
    g3 = get_model("Gemma-3-27B")
    assert (g3.sliding_window, g3.num_sliding_layers) == (1024, 52)
    assert g3.kv_bytes_per_token_full_and_sliding() == (10 * 2 * 16 * 128 * 2,
                                                        52 * 2 * 16 * 128 * 2)
    assert g3.kv_bytes_per_token() == 62 * 2 * 16 * 128 * 2 == 507904
    # Gemma-2-9B: 42 layers, even ones local
    assert get_model("Gemma-2-9B").num_sliding_layers == 21
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        q30.kv_bytes_per_token(1, "int3")


def test_weight_bytes_per_gpu_under_tensor_and_expert_parallelism() -> None:
    llama = get_model("Llama-3.1-8B")
    assert llama.weight_bytes() == 2 * llama.num_params
    norms = 32 * 2 * 4096 + 4096  # replicated on every GPU
    assert llama.weight_bytes(2) == pytest.approx(2 * ((llama.num_params - norms) / 2 + norms))
    assert llama.dense_weight_bytes(2) == llama.weight_bytes(2)
    assert llama.expert_weight_bytes() == 0.0
    # Llama-3.1-70B at TP16: the 8 KV heads are replicated (one per GPU), so k and v weigh more
    # than a 16th of theirs
    l70 = get_model("Llama-3.1-70B")
    kv_weights = 80 * 2 * 8192 * 128 * 2
    rest = l70.weight_bytes(16) - 80 * 2 * 8192 * 1 * 128 * 2
    assert rest + kv_weights / 16 < l70.weight_bytes(16)
    # Mixtral-8x7B: one expert is 3 * 4096 * 14336 bf16 weights; TP2 shards it, EP keeps it whole
    mix = get_model("Mixtral-8x7B")
    one = 3 * 4096 * 14336 * 2
    assert mix.expert_weight_bytes() == one
    assert mix.expert_weight_bytes(2) == one / 2
    assert mix.expert_weight_bytes(2, enable_expert_parallel=True) == one
    assert mix.weight_bytes(2) == pytest.approx(mix.dense_weight_bytes(2) + 32 * 8 * one / 2)
    assert mix.weight_bytes(2, 2) == pytest.approx(mix.dense_weight_bytes(2) + 32 * 8 * one / 4)
    # gpt-oss-20b: routed experts' matrices in MXFP4 (4.25 bits), their biases and all else bf16
    oss = get_model("gpt-oss-20b")
    matrices = 24 * 32 * 3 * 2880 * 2880
    biases = 24 * 32 * (2 * 2880 + 2880)
    assert oss.weight_bytes() == pytest.approx(
        matrices * 4.25 / 8 + 2 * (oss.num_params - matrices))
    assert oss.weight_bytes() - oss.dense_weight_bytes() == pytest.approx(
        matrices * 4.25 / 8 + biases * 2)
    # DeepSeek-V3 in FP8: linear layers one byte, embeddings/head/norms/routers bf16
    v3 = get_model("DeepSeek-V3")
    assert v3.weight_dtype == "fp8"
    assert v3.num_params < v3.weight_bytes() < 1.01 * v3.num_params


def test_expected_distinct_experts() -> None:
    mix = get_model("Mixtral-8x7B")  # 8 experts, 2 per token
    assert mix.expected_distinct_experts(1.0) == pytest.approx(2.0)
    assert mix.expected_distinct_experts(2.0) == pytest.approx(8 * (1 - 0.75**2))
    tokens = np.array([0.0, 1.0, 4.0, 1000.0])
    got = mix.expected_distinct_experts(tokens)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, 8 * (1 - 0.75**tokens))
    assert got[-1] == pytest.approx(8.0)
    q30 = get_model("Qwen3-30B-A3B")  # 128 experts, 8 per token
    assert q30.expected_distinct_experts(16.0) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    assert get_model("Llama-3.1-8B").expected_distinct_experts(5.0) == 0.0


def test_flops_written_out() -> None:
    llama = get_model("Llama-3.1-8B")
    matmul = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
    assert llama.flops_per_token() == 2 * matmul
    assert llama.attention_flops_per_token_pair() == 32 * 4 * 32 * 128
    mix = get_model("Mixtral-8x7B")  # two experts per token, plus the router
    matmul = (32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 2 * 3 * 4096 * 14336 + 4096 * 8)
              + 32000 * 4096)
    assert mix.flops_per_token() == 2 * matmul
    ds = get_model("DeepSeek-V2-Lite")  # 16 heads: QK over 128 + 64, PV over 128
    assert ds.attention_flops_per_token_pair() == 27 * (2 * 16 * 192 + 2 * 16 * 128)
    assert ds.attention_flops_per_token_pair(absorbed=True) == 27 * (2 * 16 * 576 + 2 * 16 * 512)
    oss = get_model("gpt-oss-20b")
    full, sliding = oss.attention_flops_per_token_pair_full_and_sliding()
    assert full == sliding == 12 * 4 * 64 * 64


def test_names_repo_ids_aliases_and_paths(tmp_path: Path) -> None:
    llama = get_model("Llama-3.1-8B")
    assert get_model("llama-3.1-8b") is llama
    assert get_model("meta-llama/Llama-3.1-8B") is llama
    assert get_model("Mistral-7B").name == "Mistral-7B-v0.3"  # the former preset name
    data = json.loads((CONFIGS / "Qwen3-30B-A3B.json").read_text())
    del data["_kvbudget"]
    folder = tmp_path / "qwen3-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    for ref in (str(folder), str(folder / "config.json")):
        m = get_model(ref)
        bundled = get_model("Qwen3-30B-A3B")
        assert m.name == "qwen3-moe" and m.source == str(folder / "config.json")
        assert (m.num_params, m.kv_bytes_per_token(), m.moe) == (
            bundled.num_params, bundled.kv_bytes_per_token(), bundled.moe)
    with pytest.raises(ValueError, match="unknown model preset 'gpt-9'"):
        get_model("gpt-9")


def _llama(**changes: Any) -> dict[str, Any]:
    data = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
    del data["_kvbudget"]
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_config_quirks() -> None:
    # Gemma 3: sizes under text_config, sparse (defaults filled in), dtype at the top level
    cfg = {"model_type": "gemma3", "torch_dtype": "float16", "text_config": {
        "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504,
        "num_hidden_layers": 62, "num_attention_heads": 32, "num_key_value_heads": 16,
        "head_dim": 128, "sliding_window": 1024}}
    g = model_from_config(cfg, name="g3", source="g3.json")
    assert (g.vocab_size, g.max_position_embeddings, g.tie_word_embeddings) == (262208, 131072,
                                                                                True)
    assert (g.weight_dtype, g.num_sliding_layers, g.norms_per_layer) == ("float16", 52, 4)
    # Qwen2's sliding window counts only when use_sliding_window is set
    qwen = json.loads((CONFIGS / "Qwen2.5-7B.json").read_text())
    assert model_from_config(qwen, name="q", source="q").num_sliding_layers == 0
    qwen.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    q = model_from_config(qwen, name="q", source="q")
    assert (q.sliding_window, q.num_sliding_layers) == (4096, 8)
    # Mistral v0.1: a window on every layer
    m = model_from_config(_llama(model_type="mistral", sliding_window=4096), name="m", source="m")
    assert (m.sliding_window, m.num_sliding_layers) == (4096, 32)
    # no num_key_value_heads: multi-head attention; newer transformers write "dtype"
    mha = model_from_config(_llama(num_key_value_heads=None, torch_dtype=None, dtype="float16"),
                            name="x", source="x")
    assert (mha.num_kv_heads, mha.weight_dtype) == (32, "float16")
    # float32 checkpoints are served in 16 bits; GPTQ/AWQ 4-bit
    assert model_from_config(_llama(torch_dtype="float32"), name="x",
                             source="x").weight_dtype == "bfloat16"
    awq = model_from_config(_llama(quantization_config={"quant_method": "awq", "bits": 4}),
                            name="x", source="x")
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert awq.weight_dtype == "int4"
    assert awq.weight_bytes() == pytest.approx(linear * (4 + 16 / 128) / 8
                                               + 2 * (awq.num_params - linear))


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"model_type": "mamba", "hidden_size": 1}, "model_type: 'mamba' is not supported"),
        ({"hidden_size": 1}, "model_type: missing"),
        (_llama(num_hidden_layers=None), "num_hidden_layers: missing"),
        (_llama(vocab_size="big"), "vocab_size: must be an integer"),
        (_llama(num_key_value_heads=5), "num_key_value_heads: 5 does not divide"),
        (_llama(quantization_config={"quant_method": "bnb"}), "quant_method: 'bnb'"),
        (_llama(torch_dtype="int8"), "torch_dtype: 'int8'"),
        ({"model_type": "gemma3", "text_config": 3}, "text_config: must be a table"),
        ({**_llama(), "model_type": "mixtral"}, "num_local_experts: missing"),
    ],
)
def test_bad_configs_name_the_file_and_field(config: dict[str, Any], needle: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        model_from_config(config, name="bad", source="/x/config.json")
    message = str(info.value)
    assert message.startswith("/x/config.json: ") and needle in message
    assert "\n" not in message


def test_tensor_parallel_roofline_and_capacity_as_the_former_tp_presets() -> None:
    """Llama-3.1-70B at tensor_parallel_size 4 is sized as the former "Llama-3.1-70B-TP4"
    preset was: 70.6e9 parameters, a quarter of them and of the FFN activations per GPU, two
    KV heads per GPU."""
    h100 = get_gpu("H100-80GB")
    l70 = get_model("Llama-3.1-70B")
    roof = RooflineCostModel(h100, l70, tensor_parallel_size=4)
    weights = 70.6e9 * 2 / 4
    step = roof.step_time(0.0, 8.0, 8000.0, 0.0, 0.0)
    compute = 2.0 * 70.6e9 / 4 * 8 / (h100.bf16_flops * 0.55)
    memory = (weights + 81920 * 8000) / (h100.hbm_bandwidth_bytes_s * 0.75)
    assert step == pytest.approx(0.004 + 0.0005 + max(compute, memory))
    # kvbudget 0.1's capacity estimate (engine_defaults = "kvbudget-0.1"), on nvidia-smi's total
    per_token = (4 * 8192 + 2 * 28672) * 2
    reserve = per_token * 8192 / 4 + 256 * 128256 * 4 + 1024 * 2**20
    assert h100.memory_mib_smi is not None
    total = h100.memory_mib_smi * 2**20
    blocks = math.floor((total * 0.9 - weights - reserve) / (81920 * 16))
    assert legacy_num_gpu_blocks(h100, l70, tensor_parallel_size=4) == blocks
    with pytest.raises(ValueError, match="does not fit"):
        num_gpu_blocks(h100, l70)  # 141 GB of weights on one 80 GB GPU


def test_tensor_parallel_size_in_scenarios_and_flags(tmp_path: Path) -> None:
    from kvbudget.simulator.scenario import load_scenario
    from kvbudget.studies.capacity import num_gpus

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "config.json").write_text((CONFIGS / "Mixtral-8x7B.json").read_text())
    scn_file = tmp_path / "s.toml"
    scn_file.write_text('model = "models/config.json"\n[engine]\ntensor_parallel_size = 4\n'
                        "enable_expert_parallel = true\n[fleet]\nnum_replicas = 2\n")
    scn = load_scenario(scn_file)
    config = scn.sim_config()
    assert config.model == str(tmp_path / "models" / "config.json")
    assert config.engine.tensor_parallel_size == 4 and config.engine.enable_expert_parallel
    assert num_gpus(scn) == 8
    bad = tmp_path / "bad.toml"
    bad.write_text('model = "Llama-3.1-8B"\n[engine]\ntensor_parallel_size = 3\n')
    with pytest.raises(ValueError, match="tensor_parallel_size 3 does not divide"):
        load_scenario(bad)
    bad.write_text('model = "Llama-3.1-8B"\n[engine]\ntensor_parallel_size = 0\n')
    with pytest.raises(ValueError, match=r"engine\.tensor_parallel_size"):
        load_scenario(bad)


def test_model_spec_validates() -> None:
    with pytest.raises(ValueError, match="num_attention_heads"):
        ModelSpec("x", "llama", 2, 64, 6, 4, 16, 128, 100)
    with pytest.raises(ValueError, match="weight_dtype"):
        ModelSpec("x", "llama", 2, 64, 4, 4, 16, 128, 100, weight_dtype="fp3")
    with pytest.raises(ValueError, match="sliding"):
        ModelSpec("x", "llama", 2, 64, 4, 4, 16, 128, 100, num_sliding_layers=1)
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        get_model("Llama-3.1-8B").kv_bytes_per_token(0)
    phi = get_model("Phi-4")  # 40 heads, 10 KV heads
    phi.check_tensor_parallel(2)
    with pytest.raises(ValueError, match="does not shard Phi-4's 10 KV heads"):
        phi.check_tensor_parallel(4)
    with pytest.raises(ValueError, match="does not divide Phi-4's 40 attention heads"):
        phi.check_tensor_parallel(16)
    get_model("Qwen3-30B-A3B").check_tensor_parallel(8)  # 4 KV heads, each on two GPUs
    get_model("DeepSeek-V2-Lite").check_tensor_parallel(16)  # MLA: one latent on every GPU


def test_docs_list_every_preset() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "models.md").read_text()
    for name in preset_names():
        assert f"| {name} | {get_model(name).source.split('(')[1].rstrip(')')} |" in docs, name


def test_qwen2_moe_shared_expert() -> None:
    """Qwen2-MoE has a shared expert with a one-output gate; shapes of Qwen1.5-MoE-A2.7B,
    whose card gives 14.3B parameters, 2.7B activated (Qwen counts the embedding table)."""
    cfg = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
           "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
           "vocab_size": 151936, "max_position_embeddings": 8192, "num_experts": 60,
           "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1,
           "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    m = model_from_config(cfg, name="qwen2-moe", source="qwen2-moe.json")
    assert m.moe is not None and m.attention_bias
    assert (m.moe.num_shared_experts, m.moe.shared_expert_intermediate_size) == (1, 5632)
    assert m.moe.shared_expert_gate and m.num_dense_layers == 0
    assert m.num_params == pytest.approx(14.3e9, rel=0.03)
    assert m.num_active_params + 151936 * 2048 == pytest.approx(2.7e9, rel=0.03)
    # every other layer MoE: the rest are dense FFNs of intermediate_size
    half = model_from_config({**cfg, "decoder_sparse_step": 2}, name="q", source="q")
    assert half.moe is not None and half.moe.num_moe_layers == 12 and half.num_dense_layers == 12


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(PUBLISHED)), tp=st.sampled_from([1, 2, 4, 8, 16]),
       num_tokens=st.integers(min_value=0, max_value=100_000))
def test_sharding_properties(name: str, tp: int, num_tokens: int) -> None:
    """More GPUs never hold more per GPU, replication keeps the total at or above the whole,
    and the distinct experts a step touches lie between its first token's and all of them."""
    m = get_model(name)
    try:
        m.check_tensor_parallel(tp)
    except ValueError:
        assume(False)
    one = m.weight_bytes()
    assert m.weight_bytes(tp) <= one
    assert m.weight_bytes(tp) * tp >= one * (1 - 1e-12)
    assert m.kv_bytes_per_token(tp) <= m.kv_bytes_per_token()
    assert m.kv_bytes_per_token(tp) * tp >= m.kv_bytes_per_token() or m.mla is not None
    assert sum(m.kv_bytes_per_token_full_and_sliding(tp)) == m.kv_bytes_per_token(tp)
    assert m.dense_weight_bytes(tp) <= m.weight_bytes(tp)
    tokens = float(num_tokens)
    distinct = m.expected_distinct_experts(tokens)
    if m.moe is None:
        assert distinct == 0.0
    else:
        e, k = m.moe.num_experts, m.moe.num_experts_per_tok
        assert distinct <= min(e, k * tokens) * (1 + 1e-9)
        if tokens >= 1:
            assert distinct >= k * (1 - 1e-9)
        assert m.num_active_params < m.num_params
