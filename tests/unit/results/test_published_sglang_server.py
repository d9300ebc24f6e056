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
from kvbudget.workloads.errors import TraceError

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
    # the server is said as SGLang, and no note says it is simulated by vLLM's rules
    assert config["server_engine"] == "sglang"
    assert not any("vLLM's scheduling rules" in n for n in rec.notes)


def test_sglang_data_parallel_attention_is_refused_as_one_engine(tmp_path: Path) -> None:
    # --enable-dp-attention: one engine whose attention ranks each schedule their own requests
    # over their own pool (max_total_num_tokens is one rank's): simulated as one engine with
    # one rank's pool, a fraction of the KV the server had, said only as "simulated with
    # tensor-parallel attention"
    path = sglang_run(tmp_path, enable_dp_attention=True)
    rec = read_recording(path, seed=0)
    assert rec.config["tensor_parallel_size"] == 4
    assert "num_replicas" not in rec.config and "kv_tokens_per_engine" not in rec.config
    assert "max_num_seqs" not in rec.config
    assert rec.config["sglang_dp_attention"] == 2
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen/Qwen3-8B", "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 2, result.output
    err = " ".join(result.stderr.split())
    assert "ran data-parallel attention (--dp-size 2 --enable-dp-attention): one engine whose " \
        "2 attention ranks each scheduled their own requests over their own KV pool of " \
        "1,916,167 tokens each" in err
    assert "pass --num-gpu-blocks N" in err and "Traceback" not in result.output
    # the one engine to simulate in its place, given: simulated with those blocks
    setup = recorded_setup(path, records_format=None, columns=None, tier="default", seed=0,
                           gpu="H100", model="Qwen/Qwen3-8B", scenario=None, overrides=None,
                           num_gpu_blocks=200000, block_size=None, max_num_seqs=None,
                           max_num_batched_tokens=None, cost_model=None, policy=None,
                           params=None)
    assert setup.config.resolved_num_gpu_blocks() == 200000 and setup.config.fleet is None


def test_sglang_0_5_23_attention_ranks_are_refused_as_one_engine(tmp_path: Path) -> None:
    """A hand-made edge case of SGLang 0.5.23's ``server_info`` (no run of it here: the
    wheel's ``sglang/srt/arg_groups``, read line by line). Attention data parallelism has its
    own width, ``attn_dp_size`` (``fields/parallel.py``: "the number of data-parallel
    attention groups inside the TP group, one scheduler each"); the old ``--dp-size N
    --enable-dp-attention`` resolves to ``attn_dp_size`` N and ``dp_size`` 1
    (``parallel_hook.py`` ``_handle_deprecated_dp_attention``), and ``resolved_dict`` reports
    ``enable_dp_attention`` true beside it (``server_args.py``). kvbudget read ``dp_size`` 1
    as one engine and took one rank's ``max_total_num_tokens`` for the engine's pool: the
    server had twice the KV, unsaid."""
    path = sglang_run(tmp_path, dp_size=1, attn_dp_size=2, enable_dp_attention=True,
                      version="0.5.23")
    rec = read_recording(path, seed=0)
    assert rec.config["sglang_dp_attention"] == 2
    assert "kv_tokens_per_engine" not in rec.config and "num_replicas" not in rec.config
    assert rec.config["sglang_kv_tokens_per_attention_rank"] == 1916167
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen/Qwen3-8B", "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 2, result.output
    err = " ".join(result.stderr.split())
    assert "ran data-parallel attention (--attn-dp-size 2): one engine whose 2 attention " \
        "ranks each scheduled their own requests over their own KV pool of 1,916,167 " \
        "tokens each" in err
    # attn_dp_size 1 (its default) with dp_size 2 is two replicas, as before
    rec = read_recording(sglang_run(tmp_path, attn_dp_size=1), seed=0)
    assert rec.config["num_replicas"] == 2 and "sglang_dp_attention" not in rec.config


def test_an_sglang_result_without_server_info_takes_nothing(tmp_path: Path) -> None:
    path = sglang_run(tmp_path)
    doc = json.loads(path.read_text())
    del doc["server_info"]
    path.write_text(json.dumps(doc) + "\n")
    rec = read_recording(path, seed=0)
    assert "tensor_parallel_size" not in rec.config and "num_replicas" not in rec.config


def _setup(path: Path, overrides: list[str] | None = None, engine: str | None = None,
           model: str = "Qwen/Qwen3-8B") -> Any:
    return recorded_setup(path, records_format=None, columns=None, tier="default", seed=0,
                          gpu="H100", model=model, scenario=None, overrides=overrides,
                          num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                          max_num_batched_tokens=None, cost_model=None, policy=None,
                          params=None, engine={"name": engine})


def test_sglang_server_is_simulated_as_it_ran(tmp_path: Path) -> None:
    setup = _setup(sglang_run(tmp_path))
    engine = setup.config.engine_for()
    assert engine.tensor_parallel_size == 4
    # its pages held 1 token (page_size 1): the pool's every token, not 16-token blocks
    assert engine.block_size == 1
    assert setup.config.resolved_num_gpu_blocks() == 1916167
    assert engine.max_num_seqs == 4096 and engine.max_num_batched_tokens == 8192
    fleet = setup.config.fleet
    assert fleet is not None and fleet.num_replicas == 2 and fleet.router == "round_robin"
    # simulated with kvbudget's SGLang engine, not vLLM's rules in its place
    assert engine.name == "sglang"


@pytest.mark.parametrize(("page", "said"), [
    (64, "the SGLang server's KV pages held 64 tokens (server_info page_size): simulated with "
     "block_size 64"),
    (None, "the SGLang server_info keeps no page_size"),
])
def test_sglangs_page_size_is_the_block_size(tmp_path: Path, page: int | None,
                                             said: str) -> None:
    # SGLang's page_size is vLLM's block_size (1 by default; an attention backend may raise
    # it, FlashMLA to 64): the file said it, the simulation took 16 in its place and said
    # nothing
    path = sglang_run(tmp_path, page_size=page)
    rec = read_recording(path, seed=0)
    assert any(said in n for n in rec.notes)
    setup = _setup(path)
    size = 16 if page is None else page
    assert setup.config.engine_for().block_size == size
    assert setup.config.resolved_num_gpu_blocks() == 1916167 // size


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
    err = " ".join(result.stderr.split())
    assert "does not say how many GPUs" not in err
    assert "tensor_parallel_size=4" in err and "block_size=1," in err
    assert "num_gpu_blocks=1916167" in err  # page_size 1: blocks of one token
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


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_the_settings_line_names_the_recordings_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _setup(sglang_run(tmp_path))
    assert ", engine sglang (the recording's server, SGLang 0.5.9)" in _said(capsys)


def test_sglangs_own_knobs_go_to_its_engine(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang's server_info names, each the sglang engine's knob of the same name
    # (python/sglang/srt/server_args.py): they were dropped, simulated at kvbudget's defaults
    path = sglang_run(tmp_path, schedule_conservativeness=1.3, max_queued_requests=64,
                      disable_overlap_schedule=True)
    engine = _setup(path).config.engine_for()
    assert engine.name == "sglang" and engine.schedule_conservativeness == 1.3
    assert engine.max_queued_requests == 64 and engine.async_scheduling is False
    err = _said(capsys)
    assert "schedule_conservativeness=1.3, max_queued_requests=64, async_scheduling=false" in err
    # --set gives its own: the recording's is not applied over it
    engine = _setup(path, overrides=["engine.schedule_conservativeness=2.0"]).config.engine_for()
    assert engine.schedule_conservativeness == 2.0 and engine.max_queued_requests == 64


def test_another_engine_chosen_is_said_not_the_recordings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sglang_run(tmp_path, max_queued_requests=64)
    engine = _setup(path, engine="vllm").config.engine_for()
    assert engine.name == "vllm" and engine.max_queued_requests is None
    err = _said(capsys)
    assert ", engine vllm (--engine; NOT the recording's server, SGLang 0.5.9: the simulation " \
        "schedules by vllm's rules, not the ones the recording measured, and leaves out its " \
        "max_queued_requests=64)" in err
    assert _setup(path, overrides=["engine.name=sglang"]).config.engine_for().name == "sglang"
    assert ", engine sglang (--set engine.name; the recording's server, SGLang 0.5.9)" in \
        _said(capsys)


@pytest.mark.parametrize(("info", "batched", "chunked", "said"), [
    ({"max_prefill_tokens": 4096}, 4096, True,
     "--chunked-prefill-size 8192 and --max-prefill-tokens 4096 (its prefill tokens a batch) "
     "simulated as max_num_batched_tokens 4096"),
    ({"max_prefill_tokens": 16384}, 8192, True,
     "--chunked-prefill-size 8192 (its prefill tokens a batch) simulated as "
     "max_num_batched_tokens 8192"),
    ({"chunked_prefill_size": -1}, None, False, "without chunked prefill"),
])
def test_sglangs_prefill_budget(tmp_path: Path, info: dict[str, Any], batched: int | None,
                                chunked: bool, said: str) -> None:
    rec = read_recording(sglang_run(tmp_path, **info), seed=0)
    assert rec.config.get("max_num_batched_tokens") == batched
    assert rec.config.get("enable_chunked_prefill", True) is chunked
    assert any(said in n for n in rec.notes), rec.notes
    if not chunked:
        assert _setup(sglang_run(tmp_path, **info)).config.engine_for() \
            .enable_chunked_prefill is False


@pytest.mark.parametrize(("policy", "said"), [
    ("fcfs", None),
    ("lpm", "the recording's prompts are simulated sharing none, where that order is arrival"),
    ("lof", "ASSUMED: first come, first served; the SGLang server ran --schedule-policy lof"),
])
def test_sglangs_schedule_policy_is_said(tmp_path: Path, policy: str, said: str | None) -> None:
    rec = read_recording(sglang_run(tmp_path, schedule_policy=policy), seed=0)
    told = [n for n in rec.notes if "schedule-policy" in n]
    assert (told == []) if said is None else (said in told[0]), told


@pytest.mark.parametrize(("backend", "server"), [("sglang", "sglang"),
                                                 ("sglang-native", "sglang"),
                                                 ("sglang-oai", None), ("vllm", None)])
def test_sglangs_native_backend_tells_the_server(tmp_path: Path, backend: str,
                                                 server: str | None) -> None:
    # bench_serving's sglang backends post to SGLang's own /generate: only SGLang answers it;
    # its OpenAI backends (sglang-oai, vllm) reach any server
    path = sglang_run(tmp_path)
    doc = json.loads(path.read_text())
    del doc["server_info"]
    doc["backend"] = backend
    path.write_text(json.dumps(doc) + "\n")
    rec = read_recording(path, seed=0)
    assert rec.config.get("server_engine") == server
    name = _setup(path).config.engine_for().name
    assert name == (server or "vllm")


def test_gpt_oss_pool_is_the_full_attention_layers(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # SGLang's hybrid SWA memory: max_total_num_tokens is the full-attention layers' pool, the
    # sliding-window layers' holding swa_full_tokens_ratio as many (model_runner_kv_cache_mixin
    # .py, set_num_tokens_hybrid_swa); the recorded prompts (32 tokens) are within the window
    info = {"model_path": "openai/gpt-oss-20b", "tp_size": 1, "dp_size": 1,
            "max_total_num_tokens": 500000, "context_length": 8192}
    setup = _setup(sglang_run(tmp_path, **info), model="gpt-oss-20b")
    assert setup.config.resolved_num_gpu_blocks() == 500000  # page_size 1
    err = _said(capsys)
    assert "warning: the SGLang server's KV pool of 500,000 tokens an engine " \
        "(max_total_num_tokens) is gpt-oss-20b's 12 full-attention layers'" in err
    assert "20 of the recorded prompts are shorter" in err
    # the hybrid pool turned off: one pool of every layer, as kvbudget models it
    _setup(sglang_run(tmp_path, **info, disable_hybrid_swa_memory=True), model="gpt-oss-20b")
    assert "full-attention layers'" not in _said(capsys)
    # prompts past the window over the ratio (160 tokens): the simulated pool is the one that
    # fills first, said as a note
    path = sglang_run(tmp_path, **info)
    doc = json.loads(path.read_text())
    doc["input_lens"] = [1024] * len(doc["input_lens"])
    path.write_text(json.dumps(doc) + "\n")
    _setup(path, model="gpt-oss-20b")
    err = _said(capsys)
    assert "note: the SGLang server's KV pool of 500,000 tokens" in err
    assert "every recorded prompt is at least that" in err and "warning" not in err
    # blocks given in the pool's place: the user's choice, nothing said of the pool
    recorded_setup(sglang_run(tmp_path, **info), records_format=None, columns=None,
                   tier="default", seed=0, gpu="H100", model="gpt-oss-20b", scenario=None,
                   overrides=None, num_gpu_blocks=1000, block_size=None, max_num_seqs=None,
                   max_num_batched_tokens=None, cost_model=None, policy=None, params=None)
    assert "full-attention layers'" not in _said(capsys)
    # a model SGLang sizes as full attention says nothing
    _setup(sglang_run(tmp_path))
    assert "full-attention layers'" not in _said(capsys)


STEADY_STATE: dict[str, Any] = {
    "concurrency_ratio": 0.8, "window_start": 1.25, "window_end": 30.5, "duration": 29.25,
    "concurrency_threshold": 51, "completed": 812, "total_input": 831488,
    "input_throughput": 28426.9, "total_output": 103936.0, "total_output_retokenized": 103901.0,
    "output_throughput": 3553.4, "output_throughput_retokenized": 3552.2,
    "average_concurrency": 58.2, "peak_concurrency": 64, "peak_output_throughput": 4100.0}
"""A hand-made line of SGLang 0.5.23's ``python -m sglang.benchmark.steady_state_serving
--steady-state-output-file F`` (no run of it here): ``_append_metrics`` writes
``json.dumps(asdict(metrics))`` of a ``SteadyStateMetrics``, whose fields (in order) are these
(``sglang/benchmark/steady_state.py`` and ``steady_state_serving.py`` in the 0.5.23 wheel)."""


def test_sglangs_steady_state_file_is_refused_by_name(tmp_path: Path) -> None:
    # it holds total_output_retokenized, so it was called "an SGLang bench_serving result
    # without per-request data" and told to add --output-details, which that file never has
    path = tmp_path / "steady.jsonl"
    path.write_text(json.dumps(STEADY_STATE) + "\n")
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen/Qwen3-8B", "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 2, result.output
    err = " ".join(result.stderr.split())
    assert "is SGLang's steady-state window (python -m sglang.benchmark.steady_state_serving " \
        "--steady-state-output-file): aggregates of the window where at least 0.8 of the " \
        "peak concurrency was in flight" in err
    assert "--output-file F --output-details" in err and "Traceback" not in result.output


def test_sglangs_server_info_saved_alone_is_named_as_such(tmp_path: Path) -> None:
    # SGLang's answer to GET /server_info saved on its own (reproduced, the source has no
    # licence: github.com/mattbucci/2x-R9700-RDNA4-GFX1201-sglang-inference 28f8146
    # benchmarks/profiling/native-decode-laguna-eager/server_info.json, SGLang 0.5.16.dev47,
    # tp_size 2) was told it "holds aggregate figures (limit_mm_data_per_request,
    # internal_states[0].limit_mm_data_per_request, internal_states[0].last_gen_throughput)"
    state = {"limit_mm_data_per_request": None, "last_gen_throughput": 29.4,
             "memory_usage": {"token_capacity": 1013362}}
    info = {**SERVER_INFO, "model_path": "/data/models/Laguna-XS.2-FP8", "tp_size": 2,
            "dp_size": 1, "mem_fraction_static": 0.85, "max_total_num_tokens": 1013362,
            "limit_mm_data_per_request": None, "version": "0.5.16.dev47+g1362e52b6",
            "internal_states": [state]}
    path = tmp_path / "server_info.json"
    path.write_text(json.dumps(info))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert said.startswith(f"{path}: is SGLang 0.5.16.dev47+g1362e52b6's server info (GET "
                           "/server_info or /get_server_info: the server's settings, "
                           "model_path /data/models/Laguna-XS.2-FP8, tp_size 2, "
                           "max_total_num_tokens 1013362), not a recording")
    assert "aggregate" not in said and "saves this answer as its server_info" in said
    for command in (["validate", "--records", str(path)], ["report", str(path)],
                    ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, command
        assert "server info" in result.output and "Traceback" not in result.output, command
    # the same answer inside a bench_serving result is still read for its settings
    rec = read_recording(sglang_run(tmp_path, mem_fraction_static=0.85), seed=0)
    assert rec.config["tensor_parallel_size"] == 4
