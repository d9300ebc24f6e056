"""Excerpts of result files others published (``tests/fixtures/recordings/published/``, each
with its source, commit and licence in that folder's README.md), read as a demanding user
would check them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recorded_guidellm_prefix import body_key, prefix_lengths
from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.excerpts import set_excerpt_counts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
PUBLISHED = FIXTURES / "published"
CODELLAMA = PUBLISHED / "inference-sim-jan20-codellama-prefill-1-excerpt.json"


# inference-sim/inference-sim eval/ground_truth/jan20-codellama-prefill-1/guidellm-results.json
# at e7a4aa3: a GuideLLM 0.6.0.dev5 sweep whose synthetic data gave every prompt (about 3,000
# tokens) a 1,024-token prefix, one per benchmark; vLLM 0.11.0 caches prefixes by default.
# kvbudget simulated every prompt as its own: the whole file's TTFT came out +64 % (mean) and
# +370 % in the two busiest stages with the server's own flags, for that alone. Now the
# prefix is read from the request bodies as a shared prefix block.
def test_guidellm_synthetic_prefix_is_simulated_as_shared() -> None:
    rec = read_recording(CODELLAMA)
    assert rec.tool == "guidellm 0.6.0.dev5"
    assert rec.stages[0] == RecordedStage("0: synchronous", "closed", None, 1)
    w = rec.workload
    assert w.prefix_block_tokens == 1024
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    # one hash a request; the excerpt's two benchmarks each drew their own prefix
    assert np.diff(w.prefix_offsets).tolist() == [1] * 8
    stage = rec.measured["stage"].to_numpy()
    by_stage = {s: set(w.prefix_hashes[stage == s].tolist()) for s in set(stage.tolist())}
    assert sorted(len(v) for v in by_stage.values()) == [1, 1]
    assert len(set().union(*by_stage.values())) == 2
    note = next(n for n in rec.notes if "prefix_tokens=1024" in n)
    assert "2 distinct prefixes in the bodies of 8 requests" in note


def test_the_shared_prefix_is_prefilled_once() -> None:
    rec = read_recording(CODELLAMA)
    # prefill at 1 ms a token, nothing else: a request's TTFT is its uncached prompt
    cost = LinearCostModel(
        intercept_s=1e-6, per_prefill_token_s=1e-3, per_decode_seq_s=1e-4, per_context_token_s=0.0
    )
    config = SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=4000,
            block_size=16,
            max_num_seqs=8,
            max_num_batched_tokens=8192,
            enable_prefix_caching=True,
        )
    )
    run = simulate_recording(rec, config, cost_model=cost, frontend_overhead_s=0.0)
    records = run.records.sort_values("arrival_s")
    sync = records[
        records["request_id"].isin(
            rec.workload.request_id[rec.measured["stage"] == "0: synchronous"]
        )
    ]
    prompts = sync["prompt_tokens"].to_numpy()
    ttft = sync["ttft_s"].to_numpy()
    assert ttft[0] == pytest.approx(prompts[0] * 1e-3, rel=0.02)  # the first computes it all
    assert np.allclose(ttft[1:], (prompts[1:] - 1024) * 1e-3, rtol=0.02)  # the rest hit it


def _report(tmp_path: Path, data: Any) -> Path:
    doc = json.loads(CODELLAMA.read_text())
    doc["args"]["data"] = data
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    "data",
    [
        ["prompt_tokens=2048,prefix_tokens=1024,output_tokens=32"],  # the CLI's key=value form
        [
            json.dumps(
                {
                    "prompt_tokens": 2048,
                    "prefix_buckets": [
                        {"bucket_weight": 100, "prefix_count": 2, "prefix_tokens": 1024}
                    ],
                }
            )
        ],
        [{"prompt_tokens": 2048, "prefix_tokens": 1024}],  # a YAML report's mapping
    ],
)
def test_each_form_of_guidellm_data_settings_gives_the_prefix(tmp_path: Path, data: Any) -> None:
    rec = read_recording(_report(tmp_path, data))
    assert rec.workload.prefix_block_tokens == 1024
    assert rec.workload.prefix_hashes is not None


def test_several_prefix_lengths_are_said_not_guessed(tmp_path: Path) -> None:
    data = [
        json.dumps(
            {
                "prompt_tokens": 2048,
                "prefix_buckets": [
                    {"bucket_weight": 50, "prefix_count": 1, "prefix_tokens": 512},
                    {"bucket_weight": 50, "prefix_count": 1, "prefix_tokens": 1024},
                ],
            }
        )
    ]
    rec = read_recording(_report(tmp_path, data))
    assert rec.workload.prefix_hashes is None
    assert any(
        "prefix_tokens=512/1024" in n and "does not say which request" in n for n in rec.notes
    )


def test_a_report_without_a_prefix_gets_no_hashes() -> None:
    rec = read_recording(FIXTURES / "guidellm-0.6.1" / "benchmarks.json")
    assert rec.workload.prefix_hashes is None
    assert not any("prefix_tokens" in n for n in rec.notes)


def test_prefix_settings_and_keys() -> None:
    assert prefix_lengths({"args": {"data": ["data.jsonl"]}}) == set()
    assert prefix_lengths({"args": {"data": ["{'prefix_tokens': 1000}"]}}) == {1000}
    assert body_key({"prompt": "x" * 100}) == "x" * 64
    assert (
        body_key(
            {
                "messages": [
                    {"role": "system", "content": "sys prefix"},
                    {"role": "user", "content": "q"},
                ]
            }
        )
        == "sys prefix"
    )
    assert body_key({}) is None


# github.com/er0080/vllm-benchmarking packages/api/tests/fixtures/vllm_sweep_v0.25.1/
# SERVE--max_num_seqs=4-BENCH--max_concurrency=2-num_prompts=8/run=0.json at 1949e7f (no
# licence: not copied): vllm bench sweep serve writes run_number and each --serve-params
# override (max_num_seqs: 4) into the run's result (vLLM vllm/benchmarks/sweep/serve.py,
# _update_run_data). With --save-detailed in the sweep's --bench-cmd such a file was read
# with max_num_seqs ASSUMED at vLLM's default (1024 on an H100) though it says 4; without,
# it was told to "run vllm bench serve with --save-detailed" (the sweep runs it).
def _sweep_run(tmp_path: Path, **server: Any) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc.update({"run_number": 0, **server})
    path = tmp_path / "run=0.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_sweep_run_gives_the_server_settings_it_swept(tmp_path: Path) -> None:
    rec = read_recording(
        _sweep_run(
            tmp_path,
            **{
                "max_num_seqs": 4,
                "max-num-batched-tokens": 512,
                "enable_prefix_caching": False,
                "gpu_memory_utilization": 0.5,
            },
        )
    )
    assert rec.config["max_num_seqs"] == 4
    assert rec.config["max_num_batched_tokens"] == 512
    assert rec.config["enable_prefix_caching"] is False
    note = next(n for n in rec.notes if "vllm bench sweep serve run" in n)
    assert "--set engine.gpu_memory_utilization=0.5" in note


def test_a_plain_result_takes_no_server_setting(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc["max_num_seqs"] = 4  # not a sweep's run file: no run_number
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert "max_num_seqs" not in read_recording(path).config


def test_a_sweep_run_without_requests_says_where_to_add_save_detailed(tmp_path: Path) -> None:
    doc = {
        "date": "20260818-021333",
        "endpoint_type": "openai",
        "backend": "openai",
        "model_id": "facebook/opt-125m",
        "num_prompts": 8,
        "request_rate": "inf",
        "max_concurrency": 2,
        "duration": 1.37,
        "completed": 8,
        "failed": 0,
        "mean_ttft_ms": 217.3,
        "run_number": 0,
        "max_num_seqs": 4,
    }
    path = tmp_path / "run=0.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="add --save-detailed to the sweep's --bench-cmd"):
        read_recording(path)


# github.com/sgl-project/genai-bench regression_main_branch/ at 89619fa (its own runs against
# a hosted GLM-4.6): D100_100_text-to-text_num_concurrency_1_time_120s.json and
# experiment_metadata.json both got "cannot tell the recording format ... pass a format"; then
# were refused as having no reader; now the result is read (one closed-loop stage, max_tokens
# from its D(100,100)) and the metadata alone names the run results it needs beside it
GENAI_BENCH_RESULT = {
    "aggregated_metrics": {
        "scenario": "D(100,100)",
        "num_concurrency": 1,
        "batch_size": 1,
        "iteration_type": "num_concurrency",
        "run_duration": 10.59,
        "num_completed_requests": 10,
        "num_requests": 10,
        "stats": {},
    },
    "individual_request_metrics": [
        {
            "ttft": 0.350,
            "tpot": 0.00615,
            "e2e_latency": 0.959,
            "output_latency": 0.608,
            "num_input_tokens": 106,
            "num_output_tokens": 100,
            "total_tokens": 206,
            "error_code": None,
            "error_message": None,
        }
    ],
    "_time_unit": "s",
}
GENAI_BENCH_METADATA = {
    "cmd": "genai-bench --num-concurrency 1 ...",
    "benchmark_version": "0.0.2",
    "api_backend": "baseten",
    "api_model_name": "zai-org/GLM-4.6",
    "num_concurrency": [1],
    "traffic_scenario": ["D(100,100)"],
    "max_requests_per_run": 10,
}


def test_a_genai_bench_result_alone_is_read(tmp_path: Path) -> None:
    path = tmp_path / "D100_100_text-to-text_num_concurrency_1_time_120s.json"
    path.write_text(json.dumps(GENAI_BENCH_RESULT))
    set_excerpt_counts(path)  # its 1 request of the 10 counted
    rec = read_recording(path)
    assert rec.format == "genai-bench" and len(rec) == 1
    assert [(st.label, st.load, st.max_concurrency) for st in rec.stages] == [
        ("D(100,100) concurrency 1", "closed", 1)
    ]
    assert rec.workload.max_output_tokens.tolist() == [100]
    assert any(n.startswith("no experiment_metadata.json beside the file") for n in rec.notes)


def test_a_genai_bench_metadata_alone_names_the_results_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "experiment_metadata.json"
    path.write_text(json.dumps(GENAI_BENCH_METADATA))
    with pytest.raises(TraceError, match="holds no genai-bench run result"):
        read_recording(path)


# github.com/ntuhpc/inference_results_v5.1 (MLPerf Inference v5.1 results) closed/ASUSTeK/
# code_AMD/llama2-70b-99*/measure_per_gpu_perf/...: mlperf_log_summary.txt was read as a CSV
# whose header is its rule of '=' ("missing column 'prompt_tokens' ... the header has:
# ======"), mlperf_log_detail.txt as one whose header is its first :::MLLOG line
@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        (
            "mlperf_log_summary.txt",
            "================================================\nMLPerf Results Summary\n"
            "================================================\nSUT name : PySUT\n"
            "Scenario : Offline\nMode     : PerformanceOnly\nSamples per second: 15.9912\n"
            "Tokens per second: 4163.89\nResult is : VALID\n",
            "is an MLPerf LoadGen summary (mlperf_log_summary.txt) of the Offline scenario",
        ),
        (
            "mlperf_log_detail.txt",
            ':::MLLOG {"key": "loadgen_version", "value": "5.0.21 @ 0910c6e300", "time_ms": 0.008924, '
            '"namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {}}\n',
            "is an MLPerf LoadGen detail log (mlperf_log_detail.txt)",
        ),
        (
            "mlperf_log_accuracy.json",
            '[{"seq_id": 0, "qsl_idx": 12, "data": "0A0B", "token_count": 2}]\n',
            "is an MLPerf LoadGen accuracy log (mlperf_log_accuracy.json)",
        ),
        # github.com/jshim0978/MLPerf_local_test (MIT) 8b504b52 official_mlperf/
        # fresh_200_samples/mlperf_log_summary.txt holds only the tally loadgen/logging.cc
        # (AsyncLog::SetLogFiles) writes to every summary: read as a CSV whose header is
        # "No warnings encountered during test."
        (
            "mlperf_log_summary.txt",
            "\nNo warnings encountered during test.\n\nNo errors encountered during test.\n",
            "is an MLPerf LoadGen summary (mlperf_log_summary.txt) holding only its warning "
            "and error tally",
        ),
        (
            "mlperf_log_summary.txt",
            "\n2 warnings encountered. See detailed log.\n\n1 ERROR encountered. See detailed log.\n",
            "holding only its warning and error tally, no MLPerf Results Summary section",
        ),
    ],
)
def test_mlperf_loadgen_logs_are_named(tmp_path: Path, name: str, text: str, said: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert said in str(info.value)
    assert "time no request" in str(info.value)


# github.com/LambdaLabsML/vllm-benchmark results/prompt_10/1xH100-80GB-SXM/
# Meta-Llama-3.1-8B-FP8_tp1_len2048.json at a4f9f43 (no licence: not copied): 3 of its 10
# requests completed (errors "", completed 10) with output_lens 0, ttfts 0.0 and no itls, the
# model having ended at once; they held 1,056 of its 1,369 prompt tokens. They were dropped
# ("0 output tokens"), so the simulated server prefilled a quarter of the recorded prompts.
def test_requests_completed_without_a_word_are_simulated(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    for i in (1, 5):
        doc["output_lens"][i], doc["ttfts"][i], doc["itls"][i] = 0, 0.0, []
        doc["generated_texts"][i] = ""
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert len(rec.workload) == len(doc["input_lens"])
    assert rec.counts["num_measured"] == len(doc["input_lens"]) - 2
    assert rec.counts["num_missing_ttft"] == 2
    assert "num_failed" not in rec.counts or rec.counts["num_failed"] == 0
    silent = rec.measured[~rec.measured["ttft_s"].notna()]
    assert silent["output_tokens"].tolist() == [1, 1]
    assert sorted(silent["prompt_tokens"].tolist()) == sorted(doc["input_lens"][i] for i in (1, 5))
    assert any("2 requests completed without a word" in n for n in rec.notes)


# A failed HTTP answer whose reason phrase is empty is saved with error "" beside output_lens
# 0 and ttfts 0.0, as a request that completed without a word; the run's completed count
# tells them apart (vllm/benchmarks/lib/endpoint_request_func.py: response.reason or "").
def test_failures_saved_with_an_empty_error_are_failures_by_the_completed_count(
    tmp_path: Path,
) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    n = len(doc["input_lens"])
    for i in (1, 5):
        doc["output_lens"][i], doc["ttfts"][i], doc["itls"][i] = 0, 0.0, []
        doc["generated_texts"][i] = ""
    doc["completed"], doc["failed"] = n - 2, 2
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts["num_failed"] == 2
    assert rec.counts["num_measured"] == n - 2
    assert not any("completed without a word" in note for note in rec.notes)
    assert any("2 requests with an empty error and no output failed" in note for note in rec.notes)
    # one of the two failed, the other completed without a word: which cannot be told
    doc["completed"], doc["failed"] = n - 1, 1
    path.write_text(json.dumps(doc))
    with pytest.raises(
        TraceError,
        match=r"1 failed with an empty one .* 2 requests have no "
        r"output: which failed cannot be told",
    ):
        read_recording(path)
    # a count that disagrees where no request lacks an answer: read as listed, said
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc["completed"] = n - 1
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts.get("num_failed", 0) == 0
    assert any(
        f"completed is {n - 1} of {n} requests, but {n} have no error" in note for note in rec.notes
    )


def test_guidellm_0_8_prefix_buckets_in_the_spec_are_read(tmp_path: Path) -> None:
    # GuideLLM 0.7+ keeps the data settings as config.spec.data (prefix_buckets resolved from
    # --data ...,prefix_tokens=N); made here from the 0.8.1 fixture the real tool wrote, its
    # prompts given one shared prefix the way GuideLLM joins it (prefix + " " + prompt)
    doc = json.loads((FIXTURES / "guidellm-0.8.1" / "benchmarks.json").read_text())
    doc["config"]["spec"]["data"][0]["prefix_buckets"] = [
        {"bucket_weight": 100, "prefix_count": 1, "prefix_tokens": 16}
    ]
    for bench in doc["benchmarks"]:
        for req in bench["requests"]["successful"]:
            args = json.loads(req["request_args"])
            args["body"]["prompt"] = (
                "a shared system prompt of sixteen tokens " + args["body"]["prompt"]
            )
            req["request_args"] = json.dumps(args)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.workload.prefix_block_tokens == 16
    assert rec.workload.prefix_hashes is not None
    assert set(rec.workload.prefix_hashes.tolist()) == {1}
    assert any("1 distinct prefixes" in n for n in rec.notes)


def test_guidellm_cached_tokens_are_said(tmp_path: Path) -> None:
    # GuideLLM 0.8 keeps each request's cached_tokens (the server's
    # usage.prompt_tokens_details.cached_tokens); unread, a report of a server that served
    # much of its prompts from cache gave no reason for a simulated TTFT too high
    doc = json.loads((FIXTURES / "guidellm-0.8.1" / "benchmarks.json").read_text())
    reqs = [r for b in doc["benchmarks"] for r in b["requests"]["successful"]]
    for r in reqs[:4]:
        r["cached_tokens"] = 16
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts["num_prompt_tokens_cached"] == 64
    assert any(
        "served 64 of the" in n and "cached_tokens" in n and "caches none" in n for n in rec.notes
    )
    assert (
        "num_prompt_tokens_cached"
        not in read_recording(FIXTURES / "guidellm-0.8.1" / "benchmarks.json").counts
    )
