"""SGLang's ``bench_serving`` saves the server's own settings (``server_info``) beside the
requests: how many GPUs an engine, how many data-parallel engines, each one's KV pool. Seen in a
published run with no licence (so reproduced here, not copied): github.com/
Scicom-AI-Enterprise-Organization/llm-benchmaq at 123eefe1,
``benchmarks/sglang/runpod_h100sxm/Qwen3-8B/tp4_dp2_Qwen3-8B_in1024_out128_p100_c100_38769a
.jsonl``: SGLang 0.5.9, ``tp_size`` 4, ``dp_size`` 2 (``load_balance_method`` round_robin),
``max_total_num_tokens`` 1916167, ``context_length`` 12000, ``chunked_prefill_size`` 8192,
``max_running_requests`` null (each rank's ``effective_max_running_requests_per_dp`` 4096),
``disable_radix_cache`` false, ``quantization`` null. kvbudget simulated it as one engine on one
GPU and said "tensor_parallel_size 1 (ASSUMED: the recording does not say how many GPUs
served the model)" and "the recording does not say whether the server quantized them"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.cli.recorded import recorded_setup
from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"

SERVER_INFO: dict[str, Any] = {
    "model_path": "/workspace/qwen-3-8b", "tp_size": 4, "dp_size": 2,
    "load_balance_method": "round_robin", "enable_dp_attention": False,
    "context_length": 12000, "chunked_prefill_size": 8192, "max_running_requests": None,
    "disable_radix_cache": False, "kv_cache_dtype": "auto", "quantization": None,
    "page_size": 1, "max_total_num_tokens": 1916167, "version": "0.5.9",
    "internal_states": [{"memory_usage": {"token_capacity": 1916167},
                         "effective_max_running_requests_per_dp": 4096}] * 2}


def sglang_run(tmp_path: Path, **info: Any) -> Path:
    """vLLM's concurrency-4 fixture as SGLang's bench_serving writes a run with its
    ``server_info`` (and no vLLM-only keys)."""
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    for key in ("model_id", "tokenizer_id", "start_times", "latencies", "date"):
        doc.pop(key, None)
    doc.update(backend="sglang", dataset_name="random", total_output_tokens_retokenized=320,
               server_info={**SERVER_INFO, **info})
    path = tmp_path / "tp4_dp2_in1024_out128_p100_c100.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    return path


def test_sglang_server_info_gives_the_servers_settings(tmp_path: Path) -> None:
    rec = read_recording(sglang_run(tmp_path), seed=0)
    assert rec.tool == "sglang.bench_serving"
    config = rec.config
    assert config["tensor_parallel_size"] == 4
    assert config["num_replicas"] == config["data_parallel_size"] == 2
    assert config["data_parallel_balance"] == "round_robin"
    assert config["kv_tokens_per_engine"] == 1916167
    assert config["max_num_seqs"] == 4096 and config["max_num_batched_tokens"] == 8192
    assert config["max_model_len"] == 12000 and config["enable_prefix_caching"] is True
    assert config["quantization"] == "none" and config["server_version"] == "0.5.9"
    assert "kv_cache_dtype" not in config  # "auto": the model's dtype, nothing to set
    assert any("1,916,167 tokens an engine" in n for n in rec.notes)
    assert any("--chunked-prefill-size 8192" in n for n in rec.notes)
    assert any(n.startswith("the server was SGLang 0.5.9: ") and "--set engine.name=sglang" in n
               for n in rec.notes)


def test_sglang_data_parallel_attention_is_one_engine(tmp_path: Path) -> None:
    rec = read_recording(sglang_run(tmp_path, enable_dp_attention=True), seed=0)
    assert rec.config["tensor_parallel_size"] == 4
    assert "num_replicas" not in rec.config
    assert any("data-parallel attention" in n for n in rec.notes)


def test_an_sglang_result_without_server_info_takes_nothing(tmp_path: Path) -> None:
    path = sglang_run(tmp_path)
    doc = json.loads(path.read_text())
    del doc["server_info"]
    path.write_text(json.dumps(doc) + "\n")
    rec = read_recording(path, seed=0)
    assert "tensor_parallel_size" not in rec.config and "num_replicas" not in rec.config


def _setup(path: Path) -> Any:
    return recorded_setup(path, records_format=None, columns=None, tier="default", seed=0,
                          gpu="H100", model="Qwen/Qwen3-8B", scenario=None, overrides=None,
                          num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                          max_num_batched_tokens=None, cost_model=None, policy=None,
                          params=None)


def test_sglang_server_is_simulated_as_it_ran(tmp_path: Path) -> None:
    setup = _setup(sglang_run(tmp_path))
    engine = setup.config.engine_for()
    assert engine.tensor_parallel_size == 4
    assert setup.config.resolved_num_gpu_blocks() == 1916167 // 16
    assert engine.max_num_seqs == 4096 and engine.max_num_batched_tokens == 8192
    fleet = setup.config.fleet
    assert fleet is not None and fleet.num_replicas == 2 and fleet.router == "round_robin"


@pytest.mark.parametrize(("method", "router", "said"), [
    ("round_robin", "round_robin", "(the recording's --load-balance-method round_robin)"),
    ("shortest_queue", "least_tokens",
     "(ASSUMED: its --load-balance-method shortest_queue has no router of its own"),
])
def test_sglang_settings_line_says_what_the_file_told(tmp_path: Path, method: str, router: str,
                                                       said: str) -> None:
    path = sglang_run(tmp_path, load_balance_method=method)
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen/Qwen3-8B", "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert "does not say how many GPUs" not in err
    assert "tensor_parallel_size=4" in err and "num_gpu_blocks=119760" in err
    assert "2 data-parallel engines (sglang --dp-size 2) simulated as 2 replicas, " \
        f"fleet.router={router} {said}" in err
    assert "vLLM tells only their sum" not in err
    assert "weights bfloat16 (the checkpoint's: the recording's server ran no --quantization)" in err


def test_appended_runs_of_differing_servers_take_no_setting(tmp_path: Path) -> None:
    one = sglang_run(tmp_path).read_text()
    other = json.loads(one)
    other["server_info"]["tp_size"] = 8
    path = tmp_path / "two.jsonl"
    path.write_text(one + json.dumps(other) + "\n")
    rec = read_recording(path, seed=0)
    assert "tensor_parallel_size" not in rec.config and "num_replicas" not in rec.config
    assert any("server_info differ" in n for n in rec.notes)


def test_no_quantization_on_a_checkpoint_named_quantized_is_not_the_16_bit_preset(
        tmp_path: Path) -> None:
    # a server that ran no --quantization serves the checkpoint's own weights: when the
    # checkpoint's name says FP8 and --model gives a 16-bit preset, "the checkpoint's" bfloat16
    # would be wrong: the name is said
    path = sglang_run(tmp_path, model_path="/workspace/Qwen3-8B-FP8")
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen/Qwen3-8B", "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    err = " ".join(result.stderr.split())
    assert "the checkpoint's: the recording's server ran no --quantization" not in err, err
    assert "is named as quantized (FP8)" in err, err
