"""Features of result files people published, each reproduced in a minimal file built from a
fixture the real tool made (the published file itself is not copied in: its source is cited
beside each test)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints

from kvbudget.results.recorded_guidellm import default_max_concurrency
from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def guidellm_0_3(tmp_path: Path, strategy: dict[str, Any], peak: float | None = None) -> Path:
    """GuideLLM 0.3.1's fixture with its one benchmark's strategy (and measured peak
    concurrency) replaced."""
    doc = json.loads((FIXTURES / "guidellm-0.3.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["args"]["strategy"] = strategy
    if peak is not None:
        for kind in ("successful", "total"):
            bench["metrics"]["request_concurrency"][kind]["max"] = peak
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


# github.com/graz-dev/vllm-benchmark, _old/benchmarks.json at 56ac70f: GuideLLM 0.2-0.3,
# `--rate-type throughput` without --max-concurrency: 1000 requests, strategy
# {"type_": "throughput", "max_concurrency": null}, request_concurrency max 512. GuideLLM held
# it to settings.max_concurrency (512): it was read as an open loop sending all 1000 at once.
def test_guidellm_throughput_without_a_cap_is_a_closed_loop_at_the_default(
        tmp_path: Path) -> None:
    path = guidellm_0_3(tmp_path, {"type_": "throughput", "max_concurrency": None})
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("0: throughput x512", "closed", None, 512),)
    assert any("records no max_concurrency" in n and "512" in n and "assumed" in n
               for n in rec.notes)


def test_guidellm_throughput_measured_above_the_default_takes_what_it_measured(
        tmp_path: Path) -> None:
    path = guidellm_0_3(tmp_path, {"type_": "throughput", "max_concurrency": None}, peak=900)
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("0: throughput x900", "closed", None, 900),)
    assert any("GUIDELLM__MAX_CONCURRENCY was set" in n for n in rec.notes)


def assert_named(path: Path, text: str, message: str) -> None:
    """``text`` written to ``path`` is refused in one line that begins with ``message``."""
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value).startswith(f"{path}: {message}")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("version", "cap"), [
    ("", 512), ("0.4.0", 512), ("0.6.1", 512), ("0.7.0", 10240), ("0.8.1", 10240),
    ("0.10.2", 10240), ("1.0.0", 10240), ("0.8.0.dev18", 10240),
])
def test_guidellm_default_cap_by_version(version: str, cap: int) -> None:
    # settings.max_concurrency: 512 in src/guidellm/config.py (0.2-0.3) and settings.py
    # (0.4-0.6), 1024 * 10 from 0.7
    assert default_max_concurrency(version) == cap


def guidellm_0_6_without_model(tmp_path: Path, body_models: list[str]) -> Path:
    """GuideLLM 0.6.1's fixture as a report of a run given no --model: its settings say
    ``model: null`` and the request bodies name the server's model (one each, in turn)."""
    doc = json.loads((FIXTURES / "guidellm-0.6.1" / "benchmarks.json").read_text())
    doc["args"]["model"] = None
    for k, bench in enumerate(doc["benchmarks"]):
        bench["config"]["backend"]["model"] = None
        for r, req in enumerate(bench["requests"]["successful"]):
            args = json.loads(req["request_args"])
            args["body"]["model"] = body_models[(k + r) % len(body_models)]
            req["request_args"] = json.dumps(args)
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


# github.com/inference-sim/inference-sim, eval/ground_truth/jan20-prefill-llama7b-tp1-1/
# guidellm-results.json at e7a4aa3: GuideLLM 0.6.0.dev2 run without --model ("model": null in
# args and config.backend), every request body {"model": "codellama/CodeLlama-34b-Instruct-hf",
# ...}: kvbudget said "the recording names no model" and would not read it without --model.
def test_guidellm_model_named_only_by_the_request_bodies_is_the_recordings(
        tmp_path: Path) -> None:
    rec = read_recording(guidellm_0_6_without_model(tmp_path, ["meta-llama/Llama-3.1-8B"]))
    assert rec.config["model"] == "meta-llama/Llama-3.1-8B"


def test_guidellm_requests_to_several_models_are_refused(tmp_path: Path) -> None:
    path = guidellm_0_6_without_model(tmp_path, ["model-a", "model-b"])
    with pytest.raises(TraceError, match=r"2 models \(model-a, model-b\)"):
        read_recording(path)


# Files that hold no request, each with the keys of a published one:
# github.com/datacrunch-research/h200-benchmarks sglang/outputs/llama_3_3_70b_online_output.jsonl
# (SGLang bench_serving --output-file without --output-details: it was called "a vllm bench
# serve result" and told to rerun vllm with --save-detailed); github.com/nv-action/
# vllm-benchmarks benchmarks/tem_res/serving_llama8B_tp1_1.json (vLLM's summary keys without
# completed/duration: "cannot tell the recording format"); github.com/er0080/vllm-benchmarking
# packages/api/tests/fixtures/vllm_sweep_v0.25.1/.../summary.json (vllm bench sweep's list of
# results); github.com/ray-project/llmperf-leaderboard raw_data/individual/groq_70b.json and
# raw_data/summary/groq_70b.json (LLMPerf; both "cannot tell the recording format").
SGLANG_LINE = {"backend": "sglang", "dataset_name": "random", "request_rate": 1.0,
               "max_concurrency": None, "total_input_tokens": 152612,
               "total_output_tokens": 160347, "total_output_tokens_retokenized": 160192,
               "median_ttft_ms": 85.7, "output_throughput": 537.4, "duration": 298.4,
               "completed": 300}
VLLM_SUMMARY = {"date": "20250304-014141", "backend": "vllm", "model_id": "m",
                "tokenizer_id": "m", "num_prompts": 200, "request_rate": 1.0,
                "max_concurrency": None, "mean_ttft_ms": 111.2, "median_ttft_ms": 103.9}
LLMPERF_RESPONSE = {"error_code": None, "error_msg": "", "inter_token_latency_s": 0.0059,
                    "ttft_s": 0.298, "end_to_end_latency_s": 0.89,
                    "request_output_throughput_token_per_s": 167.4,
                    "number_total_tokens": 700, "number_output_tokens": 150,
                    "number_input_tokens": 550}
LLMPERF_SUMMARY = {"version": "2023-08-31", "name": "llama2-70b-4096_550_150_summary",
                   "model": "llama2-70b-4096", "mean_input_tokens": 550,
                   "num_concurrent_requests": 5,
                   "results_ttft_s_quantiles_p50": 0.3}


@pytest.mark.parametrize(("name", "text", "message"), [
    ("online.jsonl", json.dumps(SGLANG_LINE) + "\n" + json.dumps(SGLANG_LINE) + "\n",
     "holds 2 JSON lines (none with per-request data); the first line is an SGLang "
     "bench_serving result without per-request data"),
    # said of the whole file, one sentence after its path: it read "FILE: field 'input_lens':
    # is a vLLM ...", the file's description put to a field it lacks
    ("serving.json", json.dumps(VLLM_SUMMARY),
     "is a vLLM benchmark_serving.py result of 2025-03-04 without "
     "per-request data"),
    ("summary.json", json.dumps([{**VLLM_SUMMARY, "completed": 8, "duration": 1.4}] * 2),
     "is a list of 2 serving-benchmark summaries (vllm bench sweep's summary.json)"),
    ("individual.json", json.dumps([LLMPERF_RESPONSE] * 3),
     "is LLMPerf's individual_responses file"),
    ("groq_summary.json", json.dumps(LLMPERF_SUMMARY), "is LLMPerf's summary"),
    # github.com/akamaslabs/vllm-benchmark studies/26-g7-4500-gpu-slice-right-sizing/results/
    # aiperf-exp7-no-mig-repeat/: concurrency_16/profile_export_aiperf.csv was read as a
    # generic records CSV ("missing column 'prompt_tokens'") and sweep_aggregate/
    # profile_export_aiperf_sweep.json got "cannot tell the recording format"
    ("profile_export_aiperf.csv",
     "Metric,avg,min,max,sum,p1,p5,p10,p25,p50,p75,p90,p95,p99,std\n"
     "Time to First Token (ms),28.74,22.09,85.41,58736.71,23.35,24.31,24.77,25.60,26.77,"
     "28.47,33.01,40.51,66.76,7.24\n\nMetric,Value\nRequest Count,2044.00\n",
     "is a table of aggregates, one row a metric (AIPerf's profile_export_aiperf.csv"),
    # genai-perf's CSV, written beside its profile_export_genai_perf.json (the JSON as
    # github.com/wellflat/k8s-dev bench/etl/ publishes it): its first line is AIPerf's, and it
    # was told to pass AIPerf's profile_export.jsonl from the same run, which genai-perf never
    # writes
    ("profile_export_genai_perf.csv",
     "Metric,avg,min,max,p99,p95,p90,p75,p50,p25\n"
     "Time To First Token (ms),1524.63,330.53,2360.24,2342.05,2295.04,2203.80,2096.08,1416.93,"
     "1153.87\n",
     "is genai-perf's table of aggregates (profile_export_genai_perf.csv), one row a metric: "
     "no request; genai-perf's per-request file"),
    # AIPerf's own example (ai-dynamo/aiperf 7c31f579 examples/artifacts/run1/
    # profile_export_aiperf.json, early AIPerf) records no aiperf_version: it was told it is
    # "AIPerf's profile_export_aiperf.json or genai-perf's profile_export_genai_perf.json",
    # though its was_cancelled and error_summary, and its input_config's loadgen and
    # cli_command, are AIPerf's and never genai-perf's (results.recorded_summaries
    # AIPERF_SUMMARY_KEYS, AIPERF_CONFIG_KEYS cite both writers): each names AIPerf alone
    ("summary.json", json.dumps({
        "records": {"request_count": {"tag": "request_count", "unit": "requests",
                                      "avg": 89.0}},
        "input_config": {"endpoint": {"model_names": ["openai/gpt-oss-20b"], "type": "chat"},
                         "loadgen": {"concurrency": 100},
                         "cli_command": "aiperf profile -m openai/gpt-oss-20b"},
        "was_cancelled": False, "error_summary": [],
        "start_time": "2025-10-03T13:13:39.146443"}),
     "is AIPerf's summary (profile_export_aiperf.json): aggregates only; pass the per-request "
     "profile_export.jsonl beside it"),
    ("summary.json", json.dumps({"records": {}, "input_config": {"endpoint": {}},
                                 "was_cancelled": False}),
     "is AIPerf's summary (profile_export_aiperf.json): aggregates only"),
    ("summary.json", json.dumps({"request_latency": {"unit": "ms", "avg": 2083.0},
                                 "input_config": {"endpoint": {}, "cli_command": "aiperf"}}),
     "is AIPerf's summary (profile_export_aiperf.json): aggregates only"),
    # hand-made: statistics and an input_config whose fields neither tool alone writes stay
    # said as either's
    ("summary.json", json.dumps({"request_latency": {"unit": "ms", "avg": 2083.0},
                                 "input_config": {"endpoint": {"type": "chat"}}}),
     "is a profile summary (AIPerf's profile_export_aiperf.json or genai-perf's "),
    # github.com/wellflat/k8s-dev bench/etl/profile_export_genai_perf.json at e17e8f5b (no
    # licence: hand-made in its layout): genai-perf's summary (input_config with its
    # perf_analyzer section, telemetry_stats) was told to pass AIPerf's profile_export.jsonl,
    # which genai-perf never writes; the same in the flat arguments of early genai-perf
    ("profile_export_genai_perf.json", json.dumps({
        "request_throughput": {"unit": "requests/sec", "avg": 0.47},
        "time_to_first_token": {"unit": "ms", "avg": 1524.6, "p50": 1416.9},
        "telemetry_stats": {"gpu_power_usage": {"unit": "W", "0": {"avg": 57.0}}},
        "input_config": {"model_names": ["openai/gpt-oss-20b"], "subcommand": "profile",
                         "endpoint": {"service_kind": "openai", "type": "chat"},
                         "perf_analyzer": {"stimulus": {"concurrency": 1}}}}),
     "is genai-perf's summary (profile_export_genai_perf.json): aggregates only; its "
     "per-request file, perf_analyzer's profile_export.json beside it, keeps each "
     "request's timestamps and text but no token counts"),
    ("profile_export_genai_perf.json", json.dumps({
        "request_latency": {"unit": "ms", "avg": 2083.0},
        "input_config": {"model": ["gpt2"], "service_kind": "openai", "concurrency": 1}}),
     "is genai-perf's summary (profile_export_genai_perf.json): aggregates only"),
    # k6's outputs (grafana/k6 internal/output/json/wrapper.go at 4815d6c5, internal/output/
    # csv/output.go at 4b6aa058 MakeHeader, --summary-export's root_group and metrics), as a
    # k6 script load-testing an LLM endpoint writes them: each got "cannot tell the recording
    # format; pass a format (records, run, ...)", none of which fits, or (the CSV) "map
    # timestamp as arrival_s", a metric sample's time, after which prompt_tokens was missing
    ("k6.json", "\n".join(json.dumps(line) for line in (
        {"type": "Metric", "data": {"name": "http_req_duration", "type": "trend",
                                    "contains": "time", "thresholds": [], "submetrics": None},
         "metric": "http_req_duration"},
        {"type": "Point", "data": {"time": "2025-01-10T10:00:00.123456Z", "value": 2100.5,
                                   "tags": {"method": "POST", "status": "200"}},
         "metric": "http_req_duration"})) + "\n",
     "is k6's --out json output (one metric sample or declaration a line): k6 records metric "
     "samples"),
    ("summary.json", json.dumps({
        "root_group": {"name": "", "path": "", "id": "d41d8cd98f00b204e9800998ecf8427e",
                       "groups": {}, "checks": {}},
        "metrics": {"http_req_duration": {"avg": 2100.2, "min": 800.1, "med": 2050.0,
                                          "max": 5100.3, "p(90)": 3000.1, "p(95)": 3500.2},
                    "http_reqs": {"count": 120, "rate": 1.99}}}),
     "is k6's end-of-test summary (--summary-export, or handleSummary's data): aggregates "
     "only"),
    ("k6.csv", "metric_name,timestamp,metric_value,check,error,error_code,expected_response,"
     "group,method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,"
     "metadata\nhttp_req_duration,1736503200,2100.512000,,,,true,,POST,"
     "http://127.0.0.1:8000/v1/completions,HTTP/1.1,default,,200,,,"
     "http://127.0.0.1:8000/v1/completions,,\n",
     "is k6's --out csv output (one row a metric sample): k6 records metric samples"),
    # perf_analyzer's export under genai-perf (triton-inference-server/client genai-perf
    # tests/test_llm_profile_data_parser.py: experiments[].requests[] with timestamp,
    # response_timestamps and text, no token counts): "cannot tell the recording format"
    ("profile_export.json", json.dumps({
        "experiments": [{"experiment": {"mode": "concurrency", "value": 10}, "requests": [
            {"timestamp": 1, "request_inputs": {"payload": "{}"},
             "response_timestamps": [3, 5, 8], "response_outputs": [{"response": "{}"}]}]}],
        "version": "", "service_kind": "openai", "endpoint": "v1/chat/completions"}),
     "is perf_analyzer's profile_export.json (written under genai-perf)"),
    # github.com/inference-sim/inference-sim eval/ground_truth/jan20-prefill-llama7b-tp1-1/
    # traces.json at e7a4aa3: vLLM's llm_request spans as OTLP JSON lines (one export a line),
    # read since (test_recording_otel.py); a span stripped of its token counts is refused
    ("traces.json", json.dumps({"resourceSpans": [{"resource": {"attributes": []},
                                                   "scopeSpans": [{"spans": [
                                                       {"name": "llm_request"}]}]}]}) + "\n"
     + json.dumps({"resourceSpans": []}) + "\n",
     "line 1: field 'resourceSpans[0].scopeSpans[0].spans[0].attributes': an llm_request span "
     "without gen_ai.usage.prompt_tokens"),
    # LMCache/LMBench 3-workloads/trace-replayer/trace-replayer-qa.py (commit 48172cd1)
    # save_results: a non-streamed replay's rows; it got "has no arrival_s column but
    # 'timestamp' looks like the arrival time: map it", and mapped, no TTFT to compare
    ("trace_replayer_results.csv",
     "timestamp,request_id,latency,prompt_tokens,completion_tokens,total_tokens,error\n"
     "0.0,1,1.2,2101,84,2185,\n0.06,2,0.9,3650,74,3724,\n",
     "is LMBench's trace-replayer result: its requests were not streamed"),
    # LMCache/LMCache benchmarks/long_doc_qa/long_doc_qa.py at 0482cd9f (RequestStats, then
    # ttft_time; forks add is_miss, successful): query_round.csv / warmup_round.csv, as
    # published at github.com/sampan26/kvbm_bench query_round.csv (9be59115) and
    # github.com/pzsjasonpg/model_bench query_round.csv (68d50921), their first rows here (no
    # licence: not copied whole); it got "missing column 'prompt_tokens' ... map it (--column
    # prompt_tokens=prompt_id)", a prompt's index offered as its token count
    ("query_round.csv",
     "prompt_id,request_start,ttft,request_end,is_miss,ttft_time\n"
     "0,0.0010211467742919922,0.13550925254821777,0.8535919189453125,False,0.13653039932250977\n",
     "is LMCache's long-document QA round (benchmarks/long_doc_qa/long_doc_qa.py: "
     "warmup_round.csv or query_round.csv): each request's send, TTFT and end, but not its "
     "prompt or output tokens"),
    ("warmup_round.csv",
     "prompt_id,request_start,ttft,request_end,successful,is_miss,ttft_time\n"
     "0,0.0,0.10504269599914551,1.9163687229156494,True,False,0.10504269599914551\n",
     "is LMCache's long-document QA round"),
    # huggingface/inference-benchmarker src/writers.rs at dfef39d5 (BenchmarkReportWriter,
    # BenchmarkResultsWriter): results/<tokenizer>_<date>.json holds one object of percentiles
    # a benchmark and no request; it got "cannot tell the recording format"
    ("meta-llama_Llama-3_1-8B_2025-03-28-10-00-00.json", json.dumps({
        "config": {"max_vus": 8, "duration_secs": 60, "benchmark_kind": "Sweep",
                   "rates": None, "num_rates": 2},
        "results": [{"id": "warmup", "executor_type": "ConstantVUs",
                     "config": {"max_vus": 1, "duration_secs": 30, "rate": None},
                     "total_requests": 12, "total_tokens": 1200,
                     "time_to_first_token_ms": {"p50": 20.5, "p99": 31.0, "avg": 21.2},
                     "successful_requests": 12, "failed_requests": 0}],
        "start_time": "2025-03-28T10:00:00+00:00", "end_time": "2025-03-28T10:03:00+00:00",
        "system": {"cpu": ["x"], "memory": "64.00 GB"}}),
     "is huggingface/inference-benchmarker's report: each benchmark's TTFT"),
    ("profile_export_aiperf_sweep.json",
     json.dumps({"aggregation_type": "sweep", "num_profile_runs": 12,
                 "per_combination_metrics": [{"parameters": {"concurrency": 16}}]}),
     "is AIPerf's aggregate of several profile runs"),
])
def test_files_without_requests_are_named_by_their_tool(tmp_path: Path, name: str, text: str,
                                                        message: str) -> None:
    assert_named(tmp_path / name, text, message)


def test_aiperfs_own_example_summary_is_named_aiperfs() -> None:
    """AIPerf's own example summary (published excerpt, README.md cites it: AIPerf 0.1.x, no
    aiperf_version) was told it is "AIPerf's profile_export_aiperf.json or genai-perf's
    profile_export_genai_perf.json"; its was_cancelled, error_summary, loadgen and
    cli_command are AIPerf's alone."""
    path = FIXTURES / "published" / "aiperf-gpt-oss-20b-cancel10-excerpt" / "profile_export_aiperf.json"
    assert "aiperf_version" not in json.loads(path.read_text())
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert err.value.problem == ("is AIPerf's summary (profile_export_aiperf.json): aggregates "
                                 "only; pass the per-request profile_export.jsonl beside it")


@pytest.mark.parametrize(("date", "older"), [("20250304-014141", True),
                                             ("20250315-235959", True),
                                             ("20250316-000000", False),
                                             ("20261204-122333", False), ("x", False)])
def test_a_vllm_summary_is_told_the_flag_of_its_day(tmp_path: Path, date: str,
                                                    older: bool) -> None:
    # the aggregates-only refusal told every file to rerun with --save-detailed, a flag
    # benchmark_serving.py got only with vLLM PR #14879 (16 March 2025): its --save-result
    # saved each request's lists before, so an older file was cut down after it was written
    path = tmp_path / "serving.json"
    path.write_text(json.dumps({**VLLM_SUMMARY, "date": date}))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert ("benchmark_serving.py --save-result saved each request's input_lens, output_lens, "
            "ttfts and itls itself until vLLM PR #14879 (16 March 2025)" in said) is older
    assert ("result of 2025-03-" in said) is older
    assert ("is a vllm bench serve result without per-request data (aggregates only); run "
            "vllm bench serve with --save-result --save-detailed" in said) is not older


# Round 57: results of benchmarks that send no request over time, and per-request files of
# tools kvbudget has no reader for, each got "cannot tell the recording format" (or "is a
# binary file"): each is named with what it holds and what to pass or write instead.
EVALSCOPE_SUMMARY = {  # evalscope perf's benchmark_summary.json, as published (Qwen3-235B-
    # A22B-GPTQ-Int4 on 8 A100s, vLLM 0.9.2, "10个并发"; a blog post in the code index, id
    # 32751880326): the keys of evalscope/perf/utils/perf_constants.py's Metrics before 1.x
    "Time taken for tests (s)": 78.9037, "Number of concurrency": 10, "Total requests": 20,
    "Succeed requests": 20, "Failed requests": 0, "Output token throughput (tok/s)": 259.5567,
    "Average latency (s)": 39.4105, "Average time to first token (s)": 1.1695}
# evalscope 1.x renamed them (modelscope/evalscope perf_constants.py, Metrics)
EVALSCOPE_SUMMARY_1X = {"Test Duration (s)": 78.9, "Concurrency": 10, "Total Requests": 20,
                        "Success Requests": 20, "TTFT (ms)": 1169.5}


@pytest.mark.parametrize(("name", "text", "message"), [
    # sgl-project/sglang python/sglang/bench_one_batch_server.py at b23a42fc (--result-filename:
    # one line a batch size) and bench_one_batch.py at fe867456 (the same, run in-process)
    ("result.jsonl", json.dumps({"run_name": "default", "batch_size": 16, "input_len": 1024,
                                 "output_len": 8, "latency": 1.2, "output_throughput": 100.0,
                                 "overall_throughput": 2000.0,
                                 "last_gen_throughput": 300.0}) + "\n",
     "is an SGLang bench_one_batch_server result line"),
    ("result.jsonl", json.dumps({"run_name": "before", "batch_size": 1, "input_len": 1024,
                                 "output_len": 16, "prefill_latency": 0.1,
                                 "prefill_throughput": 10240.0, "median_decode_latency": 0.01,
                                 "median_decode_throughput": 100.0, "total_latency": 0.3,
                                 "overall_throughput": 3000.0}) + "\n",
     "is an SGLang bench_one_batch result line"),
    # sgl-project/sglang python/sglang/bench_offline_throughput.py at 00d02fb4 (throughput_test)
    ("offline.jsonl", json.dumps({"backend": "engine", "successful_requests": 1000,
                                  "total_latency": 50.0, "total_input_tokens": 200000,
                                  "total_output_tokens": 100000, "request_throughput": 20.0,
                                  "output_throughput": 2000.0}) + "\n",
     "is an SGLang bench_offline_throughput result line"),
    # llama.cpp's llama-bench -o json (a list), -o jsonl and -o csv: a row a test, avg_ts
    ("bench.json", json.dumps([{"build_commit": "c46583b", "model_type": "qwen35 0.8B Q4_K",
                                "n_prompt": 512, "n_gen": 0, "avg_ts": 210.5,
                                "samples_ts": [208.0, 211.0]}]),
     "is a llama-bench result"),
    ("bench.jsonl", json.dumps({"build_commit": "c46583b", "n_prompt": 0, "n_gen": 128,
                                "avg_ts": 40.0}) + "\n", "is a llama-bench result"),
    ("bench.csv", "build_commit,build_number,model_filename,n_prompt,n_gen,avg_ts,stddev_ts\n"
     "c46583b,1,m.gguf,512,0,210.5,2.1\n", "is a llama-bench result"),
    ("benchmark_summary.json", json.dumps(EVALSCOPE_SUMMARY, indent=4),
     "is evalscope perf's benchmark_summary.json: aggregates only; its requests are in "
     "benchmark_data.db (SQLite) beside it: pass that, or the run directory holding both"),
    ("benchmark_summary.json", json.dumps(EVALSCOPE_SUMMARY_1X, indent=4),
     "is evalscope perf's benchmark_summary.json"),
    # evalscope/perf/utils/db_util.py summary_result: PercentileResult.to_list()
    ("benchmark_percentile.json", json.dumps([{"Percentiles": "10%", "TTFT (s)": 0.1,
                                               "Latency (s)": 30.0}], indent=4),
     "is evalscope perf's benchmark_percentile.json"),
    # vllm-project/vllm benchmarks/multi_turn/benchmark_serving_multi_turn.py at 00d39539
    # --stats-json-output: [s._asdict() for s in client_metrics], one RequestStats a request
    ("stats.json", json.dumps([{"ttft_ms": 62.3, "tpot_ms": 25.3, "latency_ms": 2573.0,
                                "start_time_ms": 1200.5, "input_num_turns": 7,
                                "input_num_tokens": 2019, "output_num_tokens": 99,
                                "output_num_chunks": 98, "output_num_first_chunk_tokens": 1,
                                "approx_cached_percent": 80.0, "conversation_id": "CONV_1",
                                "client_id": 0}], indent=2),
     "is vLLM's multi-turn benchmark per-request stats"),
    # vllm/benchmarks/lib/utils.py convert_to_pytorch_benchmark_format (vLLM 0.32.0), written
    # beside a result as *.pytorch.json with SAVE_TO_PYTORCH_BENCHMARK_FORMAT set
    ("serve.pytorch.json", json.dumps([{"benchmark": {"name": "vLLM benchmark",
                                                      "extra_info": {"args": {}}},
                                        "model": {"name": "m"},
                                        "metric": {"name": "ttft", "benchmark_values": [1.0],
                                                   "extra_info": {}}}]),
     "is vLLM's PyTorch benchmark-database record"),
])
def test_results_without_a_replayable_load_are_named(tmp_path: Path, name: str, text: str,
                                                     message: str) -> None:
    assert_named(tmp_path / name, text, message)


def test_vllm_offline_benchmarks_are_named(tmp_path: Path) -> None:
    # vllm bench throughput --output-json, written by the real tool
    # (scripts/make_recording_fixtures.sh vllm-offline)
    throughput = FIXTURES / "vllm-bench-0.32.0" / "offline" / "throughput.json"
    with pytest.raises(TraceError, match="is a vLLM offline throughput result"):
        read_recording(throughput)
    # vllm bench latency --output-json (vllm/benchmarks/latency.py of vLLM 0.32.0, main: the
    # keys avg_latency, latencies, percentiles), which cannot run on the fixtures' tiny model
    latency = tmp_path / "latency.json"
    latency.write_text(json.dumps({"avg_latency": 1.23, "latencies": [1.22, 1.24],
                                   "percentiles": {"10": 1.22, "50": 1.23, "99": 1.24}},
                                  indent=4))
    with pytest.raises(TraceError, match="is a vLLM offline latency result"):
        read_recording(latency)


def test_vllm_bench_forward_output_is_named(tmp_path: Path) -> None:
    # vllm bench forward --output-json (new in vLLM 0.33.0; 0.34.0
    # vllm/benchmarks/forward/main.py lines 265-272, json.dump(results, f, indent=2)): one item
    # a case, the requests of its fixed batch and the median of its CUDA-graph replays. It
    # needs a CUDA GPU (it captures CUDA graphs), so this file is hand-made from that source;
    # it was refused as "a JSON list that is not inference-perf's", naming nothing
    forward = tmp_path / "forward.json"
    rank = {"num_tokens": 32, "kv_blocks": 2048, "routing": None,
            "latency_us": {"timer": "graph_events", "median": 812.4, "sample_spread_pct": 0.1,
                           "mean": 812.5, "std": 1.0, "min": 810.0, "p90": 813.0, "count": 3,
                           "samples_us": [810.0, 812.4, 815.0]},
            "graph_vs_eager": {"max_abs": 0.0, "relative_rms": 0.0}}
    forward.write_text(json.dumps([{
        "case": "decode",
        "requests": [{"query_len": 1, "kv_len": 8192, "num_draft_tokens": 0,
                      "chunked": False}] * 32,
        "median_us": 812.4,
        "ranks": [rank],
    }], indent=2))
    with pytest.raises(TraceError, match="is vllm bench forward's --output-json") as err:
        read_recording(forward)
    assert "no request was sent to a server" in str(err.value)


@pytest.mark.parametrize(("script", "doc"), [
    # benchmarks/benchmark_throughput.py --output-json before vllm bench throughput existed
    # (vLLM PR #16508, April 2025): results = {elapsed_time, num_requests, total_num_tokens,
    # requests_per_second, tokens_per_second}, json.dump(..., indent=4); a February 2025 run
    ("throughput", {"elapsed_time": 35.21, "num_requests": 1000, "total_num_tokens": 500000,
                    "requests_per_second": 28.4, "tokens_per_second": 14204.5}),
    # benchmarks/benchmark_latency.py --output-json: avg_latency, latencies, percentiles
    ("latency", {"avg_latency": 1.23, "latencies": [1.22, 1.24],
                 "percentiles": {"10": 1.22, "50": 1.23, "99": 1.24}}),
])
def test_vllm_offline_scripts_results_name_the_script_and_the_command(
        tmp_path: Path, script: str, doc: dict[str, object]) -> None:
    # both write the same keys, so the file cannot tell which: a February 2025 script's output
    # was called "a vllm bench throughput result", a command that did not exist when it ran
    path = tmp_path / f"{script}.json"
    path.write_text(json.dumps(doc, indent=4))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(f"{path}: is a vLLM offline {script} result (--output-json of "), said
    assert f"benchmarks/benchmark_{script}.py" in said and f"vllm bench {script}" in said
    assert "no load to replay" in said


@pytest.mark.parametrize("first_line", [
    # inference-sim/inference-sim eval/ground_truth/jan20-codellama-prefill-1/vllm.log at
    # a43487f6 (vLLM 0.11.0 under a logging config's %(asctime)s %(levelname)s %(name)s)
    "2026-01-20 06:08:47,625 INFO vllm.platforms: Automatically detected platform cuda.",
    # vLLM 0.32.0's own format (vllm/logger.py _FORMAT), and before the process prefix
    "(APIServer pid=4242) INFO 12-06 05:01:05 [api_server.py:1050] Starting vLLM API server",
    "INFO 08-21 10:11:12 [__init__.py:241] Automatically detected platform cuda.",
])
def test_a_vllm_server_log_is_named(tmp_path: Path, first_line: str) -> None:
    # it got "missing column 'prompt_tokens' needed by the generic format (the header has:
    # 2026-01-20 06:08:47, 625 INFO ...)"
    path = tmp_path / "vllm.log"
    path.write_text(first_line + "\n2026-01-20 06:11:13,161 INFO vllm.v1.metrics.loggers: "
                    "Engine 000: Avg prompt throughput: 598.2 tokens/s\n")
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value).startswith(f"{path}: is a vLLM server log")


# github.com/Wentao274/vllm-benchmark-test reports/benchmark/nvidia_h100/MiniMax-M2.5/test_05/
# 01/8-1000-i512-o256/bench-test_05-8-1000-i512-o256.log at 21f4d96 (no licence: its shape,
# not its text): what vllm bench serve printed, saved by its run_benchmark.py. Its first line is
# the vllm command's own INFO log, so it was called "a vLLM server log: the engine's throughput
# and queue every 10 s"; with the log lines stripped it got "header repeats column '(720'" (the
# echoed Namespace read as a CSV header). The lines are those vLLM 0.32.0 vllm/benchmarks/
# serve.py prints (benchmark: the load before sending, then the summary's banner).
VLLM_CONSOLE = (
    "Namespace(subparser='bench', bench_type='serve', seed=123, num_prompts=1000, "
    "dataset_name='random', random_input_len=512, random_output_len=256, "
    "random_mm_bucket_config={(256, 256, 1): 0.5, (720, 1280, 1): 0.5}, backend='openai-chat')\n"
    "Starting main benchmark run...\nTraffic request rate: inf\n"
    "Burstiness factor: 1.0 (Poisson process)\nMaximum request concurrency: 8\n"
    "============ Serving Benchmark Result ============\n"
    "Successful requests:                     1000      \n"
    "Failed requests:                         0         \n"
    "Maximum request concurrency:             8         \n"
    "Benchmark duration (s):                  327.03    \n")
# SGLang's bench_serving prints the same banner and its backend first (as published in
# github.com/WILLIAM-qmul/SGLang-dLoRA sglang+dLoRA/lora/migration_ilp/dlora_results.md)
SGLANG_CONSOLE = ("# request rate: 2\n\n============ Serving Benchmark Result ============\n"
                  "Backend:                                 sglang    \n"
                  "Traffic request rate:                    2.0       \n"
                  "Successful requests:                     996       \n")


@pytest.mark.parametrize(("text", "said"), [
    ("INFO 05-01 15:22:52 [nixl_utils.py:20] Setting UCX_RCACHE_MAX_UNRELEASED to '1024'\n"
     + VLLM_CONSOLE, "request rate inf, max concurrency 8, successful requests 1000"),
    (VLLM_CONSOLE, "request rate inf, max concurrency 8, successful requests 1000"),
    (SGLANG_CONSOLE, "backend sglang, request rate 2.0, successful requests 996"),
    # a sweep's runs printed to one file (github.com/thienlng/llm-bench-results-16-04 5c16239
    # benchmark_results/results/minimax27/benchmark_summary.txt: seven, max concurrency 10 to
    # 150) were said as the first run alone
    ("".join(VLLM_CONSOLE.replace("concurrency: 8", f"concurrency: {c}").replace(
        "concurrency:             8", f"concurrency:             {c}") for c in (10, 25, 50)),
     "3 runs, request rate inf, max concurrency 10/25/50, successful requests 1000"),
    # past the 64 KiB read to tell the format, the runs are counted to the file's end (a
    # line at a time): "at least 2 runs" of 3
    (VLLM_CONSOLE * 2 + "progress\r" * 8000 + VLLM_CONSOLE.replace("1000", "999"),
     "3 runs, request rate inf, max concurrency 8, successful requests 1000/999"),
    # a progress bar's 270 KB line of carriage returns is read in pieces
    (VLLM_CONSOLE + "progress\r" * 30000 + "\n" + VLLM_CONSOLE.replace("concurrency: 8",
     "concurrency: 16").replace("concurrency:             8", "concurrency:             16"),
     "2 runs, request rate inf, max concurrency 8/16, successful requests 1000"),
    (SGLANG_CONSOLE + SGLANG_CONSOLE.replace("2.0", "4.0").replace("996", "998"),
     "2 runs, backend sglang, request rate 2.0/4.0, successful requests 996/998"),
])
def test_a_serving_benchmarks_console_output_is_named(tmp_path: Path, text: str,
                                                      said: str) -> None:
    assert_named(tmp_path / "bench.log", text,
                 "is a serving benchmark's console output (vllm bench serve, or SGLang's or "
                 f"TensorRT-LLM's benchmark_serving, as printed: {said}): its settings and "
                 "summary, no request; rerun it with --save-result --save-detailed")


# github.com/philschmid/llmperf-bench results/2.0.1/meta-llama_Meta-Llama-3-8B-Instruct_tp_1_
# results.json at e099ae4 (MIT): its main.py keeps LLMPerf's summary of each concurrency (1 to
# 128) under that concurrency; it got "cannot tell the recording format ... pass a format", as
# if a format flag could read it
def test_llmperf_summaries_keyed_by_concurrency_are_named(tmp_path: Path) -> None:
    runs = {str(c): {**LLMPERF_SUMMARY, "num_concurrent_requests": c} for c in (1, 2, 4, 8)}
    assert_named(tmp_path / "results.json", json.dumps(runs, indent=2),
                 "is an object of 4 results keyed by run ('1', '2', '4', ...); the first ('1') "
                 "is LLMPerf's summary (aggregates only)")


def test_an_sqlite_database_is_named_not_called_a_binary_trace(tmp_path: Path) -> None:
    # it got "line 1: is a binary file, not a text trace"; evalscope perf's benchmark_data.db
    # (its result table) is read (tests/unit/results/test_recording_evalscope.py), another
    # database is named
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE requests(sent REAL, ttft REAL)")
    con.close()
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value).startswith(f"{path}: is an SQLite database with no result table of "
                                      "evalscope perf's (start_time, first_chunk_latency")


def test_an_empty_evalscope_database_is_named_not_read(tmp_path: Path) -> None:
    # evalscope/perf/utils/db_util.py create_result_table, no request written
    path = tmp_path / "benchmark_data.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE result(request TEXT, start_time REAL, latency REAL, "
                    "first_chunk_latency REAL, prompt_tokens INTEGER, "
                    "completion_tokens INTEGER, success INTEGER)")
    con.close()
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value) == f"{path}: its result table holds no request"


def test_an_sglang_summary_forced_as_vllm_bench_is_named_as_sglangs(tmp_path: Path) -> None:
    path = tmp_path / "online.jsonl"
    path.write_text(json.dumps(SGLANG_LINE) + "\n")
    with pytest.raises(TraceError, match="is an SGLang bench_serving result") as info:
        read_recording(path, format="vllm-bench")
    # said of the file, not of a field it lacks ("field 'input_lens': is an SGLang ...")
    assert info.value.field is None
    assert str(info.value).startswith(f"{path}: is an SGLang bench_serving result")


# github.com/llm-d/llm-d-benchmark llmdbenchmark/analysis/benchmark_report/br_v0_1_example.yaml:
# a schema 0.1 report keeps its aggregates under `metrics` (0.2: `results`) and names its load
# tool in scenario.load.name; it got "cannot tell the recording format (a JSON object ...)".
@pytest.mark.parametrize(("load", "named"), [
    ({"name": "inference-perf", "type": "long-input"}, "of an inference-perf run"),
    ({"name": "guidellm"}, "of a guidellm run"),
    ({}, "of an unnamed load tool's run"),
])
def test_llmd_schema_0_1_report_is_named_and_refused(tmp_path: Path, load: dict[str, Any],
                                                     named: str) -> None:
    path = tmp_path / "br_v0_1.yaml"
    path.write_text(yaml.safe_dump({
        "version": "0.1", "scenario": {"description": "d", "load": load},
        "metrics": {"requests": {"total": 10}, "latency": {}}}))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert f"is an llm-d-benchmark report (schema 0.1) {named}:" in str(info.value)


def test_an_unknown_yaml_file_is_not_called_a_json_object(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump({"version": "9", "something": {"else": 1}}))
    with pytest.raises(TraceError, match=r"cannot tell the recording format \(a YAML mapping"):
        read_recording(path)


def aiperf_first_layout(tmp_path: Path) -> Path:
    """AIPerf's first per-request layout, as in its repository's example artifacts: records
    with ``metadata.timestamp_ns`` and ``credit_phase``, metrics ``ttft`` and
    ``request_latency`` in ms, cancelled records with no input length; the summary's
    ``input_config.endpoint.model_names`` and ``loadgen.concurrency``."""
    ok = [{"metadata": {"timestamp_ns": 1_759_522_419_154_000_000 + k * 1_000_000,
                        "credit_phase": "profiling", "turn_index": 0},
           "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
                       "ttft": {"value": 1000.0 + k, "unit": "ms"},
                       "request_latency": {"value": 8000.0 + k, "unit": "ms"},
                       "output_sequence_length": {"value": 193, "unit": "tokens"},
                       "inter_token_latency": {"value": 32.5, "unit": "ms"}},
           "error": None} for k in range(4)]
    cancelled = {"metadata": {"timestamp_ns": 1_759_522_419_154_500_000,
                              "credit_phase": "profiling"},
                 "metrics": {"error_request_count": {"value": 1, "unit": "requests"}},
                 "error": {"code": 499, "type": "RequestCancellationError",
                           "message": "Request was cancelled after 0.000 seconds"}}
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [cancelled, *ok]))
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps({
        "records": {}, "input_config": {
            "endpoint": {"model_names": ["openai/gpt-oss-20b"], "type": "chat",
                         "streaming": True, "url": "localhost:9000"},
            "loadgen": {"concurrency": 4, "request_rate_mode": "concurrency_burst",
                        "request_count": 5}}}))
    return path


# github.com/ai-dynamo/aiperf examples/artifacts/run1/profile_export.jsonl at 7c31f57 (AIPerf's
# own example, --concurrency 100 --request-cancellation-rate 10, gpt-oss-20b): its records name
# the start timestamp_ns and credit_phase, and 11 cancelled records carry no input length. It
# got "cannot tell the recording format", and with --records-format aiperf "missing
# metadata.request_start_ns".
def test_aiperf_first_layout_is_read(tmp_path: Path) -> None:
    path = aiperf_first_layout(tmp_path)
    assert detect_recording_format(path) == "aiperf"
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("concurrency 4", "closed", None, 4),)
    assert rec.config["model"] == "openai/gpt-oss-20b"
    assert rec.config["target"] == "localhost:9000"
    measured = rec.measured[rec.measured["usable"]]
    assert len(measured) == 4
    assert measured["ttft_s"].tolist() == pytest.approx([1.0, 1.001, 1.002, 1.003])
    assert measured["e2e_s"].tolist() == pytest.approx([8.0, 8.001, 8.002, 8.003])
    assert rec.workload.prompt_tokens.tolist() == [550] * 4
    assert sum(v for k, v in rec.counts.items() if k.startswith("num_dropped")) == 1
    # the output-count note counts the requests served, not the dropped record ("the server's
    # usage count for 0 of 100 requests" on AIPerf's example, whose 11 cancelled were dropped)
    assert ("output tokens: the server's usage count for 0 of 4 requests, AIPerf's tokenizer "
            "count for the others") in rec.notes


def test_the_headline_says_why_requests_were_dropped(tmp_path: Path) -> None:
    # inference-sim/inference-sim's GuideLLM ground truth (above) has 3 errored requests with
    # no output: the headline said "197 requests simulated, 197 measured, 0 output tokens 3
    # dropped"
    from kvbudget.cli.recorded import recording_headline

    rec = read_recording(aiperf_first_layout(tmp_path))
    line = recording_headline(rec)
    assert line.endswith(", 1 dropped (failed request)"), line


# github.com/llm-d/llm-d-benchmark tests/fixtures/guidellm_report_v2.json (GuideLLM 0.8.0.dev18,
# two constant benchmarks): metrics.request_totals count 2 requests each, requests.successful /
# errored / incomplete are empty; the refusal did not say that the report counts requests it
# does not list.
def test_guidellm_report_with_emptied_request_lists_says_what_it_counted(
        tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.8.1" / "benchmarks.json").read_text())
    counted = 0
    for bench in doc["benchmarks"]:
        counted += bench["metrics"]["request_totals"]["total"]
        bench["requests"] = {"successful": [], "errored": [], "incomplete": [], "total": None}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=f"its metrics count {counted} requests, but its "
                       "request lists are empty"):
        read_recording(path)


# github.com/neuralmagic/guidellm tests/unit/entrypoints/assets/benchmarks_stripped.json at
# a1fe883 (GuideLLM's own test asset, a 0.2-0.3 report cut down by hand): request_totals count
# 47 requests, the lists hold 1 and request_samples is null; it was simulated as a run of one
# request with no word of the other 46, then read with a note; now refused, as any cut copy.
def test_guidellm_report_cut_down_by_hand_is_refused(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.3.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    counted = bench["request_totals"]["successful"]
    bench["requests"]["successful"] = bench["requests"]["successful"][:1]
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value) == (
        f"{path}: field 'benchmarks[0].requests.successful': lists 1 successful requests, but "
        f"the report's own count says {counted} (request_totals.successful): requests missing "
        "(a cut or partly copied file?); trimmed on purpose, it reads as a run of the requests "
        "it holds once benchmarks[0].request_totals.successful is set to 1")


@pytest.mark.parametrize("version", ["0.2.1", "0.3.1", "0.4.0", "0.6.1", "0.8.1"])
def test_guidellm_reports_as_written_get_no_cut_down_note(version: str) -> None:
    folder = FIXTURES / f"guidellm-{version}"
    for path in [*folder.glob("*.json"), *folder.glob("*.yaml")]:
        assert not any("cut down" in n for n in read_recording(path).notes), path


# github.com/er0080/vllm-benchmarking packages/protocol/tests/fixtures/
# bench_serve_speculative_v0.25.1.json (vllm bench serve 0.25.1 against a speculative server):
# spec_decode_acceptance_length 3.16 and three per-position acceptance rates; a detailed file
# with them was simulated decoding one token a step, unsaid.
def test_a_speculative_server_is_said_and_how_to_give_it(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
    doc.update({"spec_decode_acceptance_length": 3.161111111111111,
                "spec_decode_acceptance_rate": 72.03703703703704,
                "spec_decode_per_position_acceptance_rates": [0.85, 0.7167, 0.5944]})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    notes = read_recording(path).notes
    assert any("the server ran speculative decoding (mean acceptance length 3.16, 3 drafts a "
               "step" in n and "num_speculative_tokens=3" in n for n in notes), notes
    assert not any("speculative" in n
                   for n in read_recording(FIXTURES / "vllm-bench-0.32.0" / "rate8.json").notes)


# github.com/LambdaLabsML/vllm-benchmark results/prompt_10/1xH100-80GB-SXM/
# Meta-Llama-3-8B-Instruct_tp1_len2048.json (benchmark_serving.py, 2024-09-07: per-request
# lists, no start_times, request_rate "inf"): the stage line said "replayed as open loop at the
# send times redrawn (the file has none)" though nothing was drawn: every request is sent at 0.
def test_an_inf_rate_run_without_send_times_says_every_request_at_once(tmp_path: Path) -> None:
    from kvbudget.studies.recorded_replay import replay_mode

    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
    for key in ("start_times", "latencies"):
        doc.pop(key, None)
    doc["request_rate"] = "inf"
    doc["max_concurrency"] = None
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert np.all(rec.workload.arrival_s == 0)
    assert replay_mode(rec.stages[0]) == ("every request at once (rate inf; the file has no "
                                          "send times)")
    doc["request_rate"] = 8.0
    path.write_text(json.dumps(doc))
    assert "send times redrawn" in replay_mode(read_recording(path).stages[0])


# GuideLLM 0.2-0.3 (src/guidellm/scheduler/strategy.py: SchedulingStrategy.
# processing_requests_limit = settings.max_concurrency) also held its constant and poisson
# benchmarks to 512 in flight; their reports record no max_concurrency, and they were read as
# uncapped open loops (graz-dev/vllm-benchmark's report is a throughput one; the rule is the
# same). The note comes only where the cap could bind: more requests than slots.
@pytest.mark.parametrize(("requests", "noted"), [(16, False), (600, True)])
def test_guidellm_rate_benchmark_without_a_cap_is_capped_at_the_default(
        tmp_path: Path, requests: int, noted: bool) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.3.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["args"]["strategy"] = {"type_": "constant", "rate": 4.0, "max_concurrency": None}
    reqs = bench["requests"]["successful"]
    bench["requests"]["successful"] = [reqs[k % len(reqs)] for k in range(requests)]
    bench["request_totals"]["total"] = requests
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("0: constant 4 req/s x512", "capped", 4.0, 512),)
    assert any("replayed at most 512 in flight (assumed)" in n for n in rec.notes) == noted


# GuideLLM 0.2.1 and 0.3.1 (vllm-project/guidellm scheduler/scheduler.py _start_processes,
# worker.py process_loop_asynchronous): throughput, constant and poisson alike are held to
# settings.max_concurrency (512), not 0.1's 511: each worker process holds an
# asyncio.Semaphore of its share (512 // processes, one more for the first 512 % processes)
# and the shares sum to 512. A request waits for its own process's share, which the single
# pool of 512 the replay uses does not: that was not said.
@pytest.mark.parametrize("strategy", [
    {"type_": "throughput", "max_concurrency": None},
    {"type_": "constant", "rate": 4.0, "max_concurrency": None, "initial_burst": True},
    {"type_": "poisson", "rate": 4.0, "max_concurrency": None, "random_seed": 42}])
def test_guidellm_0_2_0_3_cap_is_the_setting_split_among_worker_processes(
        tmp_path: Path, strategy: dict[str, Any]) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.3.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["args"]["strategy"] = strategy
    reqs = bench["requests"]["successful"]
    many = [json.loads(json.dumps(reqs[k % len(reqs)])) for k in range(600)]
    for k, req in enumerate(many):
        req["scheduler_info"]["process_id"] = k % 10
    bench["requests"]["successful"] = many
    bench["request_totals"]["total"] = 600
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.stages[0].max_concurrency == 512
    # at most 23 in flight in a process against its share of 51: none waited for it
    assert not any("worker processes" in n for n in rec.notes)
    for req in many:  # every copy sent and ended as the first: 60 in flight a process
        req["scheduler_info"].update({k: reqs[0]["scheduler_info"][k]
                                      for k in ("request_start", "request_end")})
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    split = [n for n in rec.notes if "worker processes" in n]
    assert split == ["0: GuideLLM split its cap of 512 in flight among the 10 worker processes "
                     "the requests name, about 51 each, and 10 of them held their share in "
                     "flight at times (up to 60), when a request waited for its own process's "
                     "share; replayed as one pool of 512 (assumed: requests may start sooner "
                     "than they did where the load was uneven across processes)"]
    # one process, or fewer requests than the cap: nothing to say
    for req in many:
        req["scheduler_info"]["process_id"] = 0
    path.write_text(json.dumps(doc))
    assert not any("worker processes" in n for n in read_recording(path).notes)
    for k, req in enumerate(many):
        req["scheduler_info"]["process_id"] = k % 10
    bench["requests"]["successful"] = many[:16]
    bench["request_totals"]["total"] = 16
    path.write_text(json.dumps(doc))
    assert not any("worker processes" in n for n in read_recording(path).notes)


# GuideLLM 0.4-0.7 split the cap the same way (scheduler/worker_group.py per_proc_max_conc,
# worker.py _process_requests_loop's asyncio.Semaphore(async_limit)); a request names its
# process as info.scheduler_process_id.
def test_guidellm_0_4_on_cap_split_is_said_too(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "guidellm-0.8.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["config"]["strategy"] = {"type_": "constant", "rate": 4.0, "max_concurrency": 4}
    for k, req in enumerate(bench["requests"]["successful"]):
        req["info"]["scheduler_process_id"] = k % 2
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.stages[0].max_concurrency == 4
    assert any(n.startswith("0: GuideLLM split its cap of 4 in flight among the 2 worker "
                            "processes the requests name, about 2 each") for n in rec.notes)


def sglang_details(**changes: Any) -> dict[str, Any]:
    """One line of SGLang's ``bench_serving --output-file F --output-details``, in the keys of
    sgl-project/sglang python/sglang/benchmark/metrics.py ``save_results`` (commit 1291c7fc:
    the run's arguments, its metrics, then ``input_lens``, ``output_lens``, ``ttfts``,
    ``itls``, ``generated_texts``, ``errors``), with small made-up values."""
    line: dict[str, Any] = {
        "backend": "sglang", "dataset_name": "random", "request_rate": 4.0,
        "max_concurrency": None, "sharegpt_output_len": None, "random_input_len": 32,
        "random_output_len": 4, "random_range_ratio": 0.0, "duration": 1.5, "completed": 3,
        "total_input_tokens": 96, "total_output_tokens": 12,
        "total_output_tokens_retokenized": 12, "request_throughput": 2.0,
        "median_ttft_ms": 20.0, "mean_itl_ms": 10.0, "output_throughput": 8.0,
        "mean_e2e_latency_ms": 50.0, "accept_length": None,
        "input_lens": [32, 32, 32], "output_lens": [4, 4, 4], "ttfts": [0.02, 0.021, 0.02],
        "itls": [[0.01, 0.01, 0.01]] * 3, "generated_texts": ["a b c d"] * 3,
        "errors": ["", "", ""]}
    return {**line, **changes}


# SGLang's bench_serving with --dataset-name mooncake and the sglang backend replays the trace
# on its own clock, "ignoring --request-rate" (python/sglang/bench_serving.py benchmark();
# python/sglang/benchmark/datasets/mooncake.py get_mooncake_request_over_time at 17481b4e:
# each session at its timestamp times --mooncake-slowdown-factor, its rounds at once), and
# saves the request_rate it was given (inf by default); --use-trace-timestamps saves it as
# "trace" (python/sglang/benchmark/metrics.py save_results at 1291c7fc). The first was read
# as every request sent at once (exit 0), the second refused as "not a rate: 'trace'".
@pytest.mark.parametrize(("changes", "field"), [
    ({"dataset_name": "mooncake", "request_rate": float("inf")}, "dataset_name"),
    ({"dataset_name": "mooncake", "request_rate": "trace"}, "request_rate"),
])
def test_sglang_runs_sent_at_a_traces_timestamps_are_refused(
        tmp_path: Path, changes: dict[str, Any], field: str) -> None:
    path = tmp_path / "sglang_mooncake.jsonl"
    path.write_text(json.dumps(sglang_details(**changes)) + "\n")
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.field == field
    assert str(info.value).startswith(
        f"{path}: field '{field}': is an SGLang bench_serving run that sent each request at "
        "its Mooncake trace's timestamp")
    assert "simulate the trace itself" in str(info.value)
    # the same run of another dataset, at a rate, is read as before
    path.write_text(json.dumps(sglang_details()) + "\n")
    assert read_recording(path).stages[0].load == "open"
    # a mooncake dataset sent through another backend followed --request-rate
    path.write_text(json.dumps(sglang_details(dataset_name="mooncake",
                                              backend="sglang-oai")) + "\n")
    assert read_recording(path).stages[0].request_rate == 4.0


def trtllm_result(**changes: Any) -> dict[str, Any]:
    """A result of TensorRT-LLM's copy of vLLM's client (NVIDIA/TensorRT-LLM
    tensorrt_llm/serve/scripts/benchmark_serving.py at commit 0228a712: ``--save-result
    --save-detailed`` writes vLLM's lists with each request's E2E as ``e2els``, no
    ``latencies`` nor ``start_times``, and adds ``user_throughput`` and
    ``avg_decoded_tokens_per_iter``), made from the vLLM fixture's requests with the E2E
    lengthened by 5 ms, so that it differs from TTFT plus the inter-token times."""
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
    lists = {k: doc[k] for k in ("input_lens", "output_lens", "ttfts", "itls",
                                 "generated_texts", "errors")}
    result = {"date": "20251001-101010", "backend": "openai", "model_id": "tiny",
              "tokenizer_id": "tiny", "num_prompts": 20, "duration": 2.6, "completed": 20,
              "total_input_tokens": 648, "total_output_tokens": 320,
              "request_throughput": 7.65, "output_throughput": 122.4,
              "total_token_throughput": 370.4, "user_throughput": 180.2,
              "avg_decoded_tokens_per_iter": {"mean": 0.0, "min": 0.0, "max": 0.0,
                                              "median": 0.0, "std": 0.0, "percentiles": {}},
              **lists, "e2els": [x + 0.005 for x in doc["latencies"]],
              "mean_ttft_ms": 73.9, "median_ttft_ms": 63.2, "request_rate": 8.0,
              "burstiness": 1.0, "max_concurrency": None}
    return {**result, **changes}


# NVIDIA/TensorRT-LLM's benchmark_serving (its docs' run-benchmark-with-trtllm-serve.md): its
# detailed result was called "vllm bench serve", its measured e2els ignored ("no latencies in
# the file: E2E = TTFT + the sum of the inter-token times"), its acceptance length
# (avg_decoded_tokens_per_iter) not said, and a result without --save-detailed was called a
# vllm bench serve result.
def test_tensorrt_llm_benchmark_serving_is_read_as_its_own(tmp_path: Path) -> None:
    path = tmp_path / "openai-8.0qps-tiny.json"
    doc = trtllm_result()
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.tool == "tensorrt_llm benchmark_serving"
    measured = rec.measured.sort_values("request_id")
    assert np.allclose(measured["e2e_s"], doc["e2els"])
    assert not any("no latencies" in n for n in rec.notes)
    assert not any("speculative" in n for n in rec.notes)
    assert any("(tensorrt_llm benchmark_serving does not save it)" in n for n in rec.notes)
    spec = trtllm_result(avg_decoded_tokens_per_iter={"mean": 2.5, "min": 1.0, "max": 4.0})
    path.write_text(json.dumps(spec))
    assert any("the server ran speculative decoding (mean acceptance length 2.5" in n
               for n in read_recording(path).notes)
    summary = {k: v for k, v in doc.items() if not isinstance(v, list)}
    path.write_text(json.dumps(summary))
    with pytest.raises(TraceError, match="is a TensorRT-LLM benchmark_serving result without "
                       "per-request data"):
        read_recording(path)


# SGLang's bench_serving --disable-stream (python/sglang/bench_serving.py at 0033168f,
# async_request_openai_completions: the answer arrives as one chunk, which sets the TTFT to the
# whole answer's time and appends no inter-token time) was refused as a damaged file: "no
# inter-token times for 4 output tokens".
def test_a_run_that_did_not_stream_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "sglang_nostream.jsonl"
    path.write_text(json.dumps(sglang_details(ttfts=[0.05, 0.052, 0.05], itls=[[]] * 3)) + "\n")
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.field == "itls"
    assert str(info.value).endswith(
        "no inter-token times for 4 output tokens: none of the 3 completed requests of several "
        "tokens has one, a run that did not stream (SGLang's bench_serving --disable-stream: "
        "the whole answer in one chunk, its time saved as the TTFT); kvbudget compares "
        "streamed TTFT, TPOT and E2E: record a streamed run")
    # one request without, among streamed ones, got its whole answer in one chunk (SGLang
    # 0.5.9's real runs against the CPU vLLM have such rows: test_sglang_bench_serving.py),
    # which was refused as a damaged file: it is read, its TTFT and TPOT not compared
    path.write_text(json.dumps(sglang_details(itls=[[0.01] * 3, [], [0.01] * 3])) + "\n")
    rec = read_recording(path)
    assert len(rec.measured) == 3
    assert any(n.startswith("1 of 3 completed requests got the tokens after their first")
               for n in rec.notes)


def guidellm_0_1_report(mode: str = "sweep") -> dict[str, Any]:
    """A GuideLLM 0.1 report (vllm-project/guidellm tag v0.1.0: ``GuidanceReport`` in
    src/guidellm/core/report.py holds ``TextGenerationBenchmarkReport``s of
    ``TextGenerationBenchmark``s, src/guidellm/core/result.py: ``mode``, ``rate``,
    ``results`` with ``prompt_token_count``, ``output_token_count``, ``start_time``,
    ``first_token_time``, ``end_time``, and ``errors`` without times), small made-up values."""
    def result(t: float) -> dict[str, Any]:
        return {"request": {"id": "r", "prompt": "p", "prompt_token_count": 32,
                            "output_token_count": 16, "params": {}},
                "prompt": "p", "prompt_word_count": 20, "prompt_token_count": 32,
                "output": "o", "output_word_count": 10, "output_token_count": 16,
                "last_time": t + 0.5, "start_time": t, "first_token_time": t + 0.05,
                "end_time": t + 0.5}

    benches = [
        {"mode": "synchronous", "rate": None, "results": [result(100.0), result(100.5)],
         "errors": [], "concurrencies": []},
        {"mode": "throughput", "rate": None, "results": [result(102.0), result(102.0)],
         "errors": [{"request": {"id": "e", "prompt": "p"}, "message": "timeout"}],
         "concurrencies": []},
        {"mode": "asynchronous", "rate": 2.0, "results": [result(104.0), result(104.5)],
         "errors": [], "concurrencies": []}]
    return {"benchmarks": [{"benchmarks": benches, "args": {
        "backend_type": "openai_server", "target": "http://localhost:8000/v1",
        "model": "meta-llama/Llama-3.1-8B-Instruct", "data_type": "emulated",
        "data": "prompt_tokens=32,generated_tokens=16", "tokenizer": "t", "mode": mode,
        "rate": None, "max_number": 2, "max_duration": None}}]}


# GuideLLM 0.1 (`guidellm --target ... --output-path report.json`, late 2024) nests its
# benchmarks one level deeper than 0.2: the report was refused with "field
# 'benchmarks[0].requests': must hold a 'requests' object (successful, errored, incomplete)".
@pytest.mark.parametrize(("mode", "rate_kind"), [("sweep", "constant"), ("poisson", "poisson")])
def test_guidellm_0_1_report_is_read(tmp_path: Path, mode: str, rate_kind: str) -> None:
    path = tmp_path / "guidance_report.json"
    path.write_text(json.dumps(guidellm_0_1_report(mode)))
    assert detect_recording_format(path) == "guidellm"
    rec = read_recording(path)
    assert rec.tool == "guidellm 0.1"
    assert rec.config["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert rec.stages == (
        RecordedStage("0: synchronous", "closed", None, 1),
        RecordedStage("1: throughput x511", "closed", None, 511),
        RecordedStage(f"2: {rate_kind} 2 req/s x511", "capped", 2.0, 511))
    assert rec.counts["num_errored"] == 1
    assert any("1 errored requests: GuideLLM 0.1 keeps no time of them" in n
               for n in rec.notes)
    measured = rec.measured
    assert np.allclose(measured["ttft_s"], 0.05) and np.allclose(measured["e2e_s"], 0.5)
    assert measured["prompt_tokens"].tolist() == [32] * 6
    # a report that measured more in flight ran under a raised setting: that many
    doc = guidellm_0_1_report(mode)
    doc["benchmarks"][0]["benchmarks"][1]["concurrencies"] = [
        {"time": 102.0, "completed": 0, "errored": 0, "processing": 900}]
    path.write_text(json.dumps(doc))
    assert read_recording(path).stages[1] == RecordedStage("1: throughput x900", "closed",
                                                           None, 900)


# SGLang's bench_serving --dataset-name generated-shared-prefix (python/sglang/bench_serving.py
# sample_generated_shared_prefix_requests at 0033168f: each prompt is its group's system prompt
# plus a question, so the server's prefix cache served most of it) saves the dataset's name
# only: its requests were simulated sharing nothing, unsaid.
def test_an_sglang_shared_prefix_run_says_the_prefixes_are_not_simulated(
        tmp_path: Path) -> None:
    path = tmp_path / "sglang_gsp.jsonl"
    path.write_text(json.dumps(sglang_details(dataset_name="generated-shared-prefix")) + "\n")
    notes = read_recording(path).notes
    assert any(n.startswith("dataset generated-shared-prefix: SGLang's prompts shared their "
                            "group's system prompt") and "share no prefix" in n for n in notes)
    path.write_text(json.dumps(sglang_details()) + "\n")
    assert not any("shared-prefix" in n for n in read_recording(path).notes)


def guidellm_0_6(tmp_path: Path, version: str, edit: Any) -> Path:
    """GuideLLM 0.6.1's fixture as a report of ``version``, changed by ``edit(doc, bench)``."""
    doc = json.loads((FIXTURES / "guidellm-0.6.1" / "benchmarks.json").read_text())
    doc["metadata"]["guidellm_version"] = version
    edit(doc, doc["benchmarks"][0])
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


# github.com/nirjhar17/guidellm-pd-disaggregation reports/concurrent4-benchmarks.json at
# 2ff15754 (GuideLLM 0.5.0, chat completions, concurrent 4 stopped by --max-seconds 60): the
# requests in flight at the limit were cancelled with output_tokens null though they had
# streamed 51, 99 and 104 chunks (info.timings.token_iterations). kvbudget read them as 0
# output tokens and dropped them ("with 0 output tokens"): the server's work on them was left
# out of the simulated load, and the note said they had generated nothing.
def test_guidellm_cancelled_requests_that_streamed_are_simulated_with_their_chunks(
        tmp_path: Path) -> None:
    def cancel(doc: dict[str, Any], bench: dict[str, Any]) -> None:
        cut = bench["requests"]["successful"].pop()
        cut["info"]["status"] = "cancelled"
        cut["info"]["timings"]["request_end"] = None
        cut["info"]["timings"]["token_iterations"] = 9
        cut.update(output_tokens=None, request_latency=None)
        cut["output_metrics"]["text_tokens"] = None
        cut["output_metrics"]["total_tokens"] = None
        silent = json.loads(json.dumps(cut))  # cancelled before its first chunk
        silent["info"]["timings"]["token_iterations"] = 0
        bench["requests"]["incomplete"] = [cut, silent]
        made = bench["scheduler_metrics"]["requests_made"]  # as GuideLLM counts them
        made.update(successful=made["successful"] - 1, incomplete=made["incomplete"] + 2)

    rec = read_recording(guidellm_0_6(tmp_path, "0.5.0", cancel))
    assert rec.counts["num_output_from_chunks"] == 1
    assert rec.counts["num_dropped_0_output_tokens"] == 1
    assert len(rec.workload) == 20
    assert sorted(rec.workload.output_tokens.tolist())[0] == 9
    assert any("1 cancelled or errored requests streamed output but the report counts none"
               in n for n in rec.notes)


# GuideLLM applies --sample-requests from 0.5.4 to 0.6.x (config.sample_requests; 0.7+
# config.sample_size): a sampled 0.6 report was told it had been "cut down after GuideLLM
# wrote it ... pass the report as GuideLLM wrote it", which is the report GuideLLM wrote.
def test_guidellm_sample_requests_of_0_5_4_to_0_6_is_a_sample(tmp_path: Path) -> None:
    def sample(doc: dict[str, Any], bench: dict[str, Any]) -> None:
        bench["requests"]["successful"] = bench["requests"]["successful"][:10]
        bench["config"]["sample_requests"] = 10

    notes = read_recording(guidellm_0_6(tmp_path, "0.6.1", sample)).notes
    assert any("kept a sample of 10 of its 20 requests" in n for n in notes)
    assert not any("cut down" in n for n in notes)


def test_guidellm_sample_requests_before_0_5_4_sampled_nothing(tmp_path: Path) -> None:
    # 0.4.0-0.5.3 record sample_requests but keep every request (the accumulators that sample
    # never receive it): a report listing fewer was cut down after GuideLLM wrote it, refused
    # (it was read with a note, a smaller run than the report counts)
    def cut(doc: dict[str, Any], bench: dict[str, Any]) -> None:
        bench["requests"]["successful"] = bench["requests"]["successful"][:10]
        bench["config"]["sample_requests"] = 10

    with pytest.raises(TraceError) as info:
        read_recording(guidellm_0_6(tmp_path, "0.5.0", cut))
    assert info.value.field == "benchmarks[0].requests.successful"
    assert info.value.problem.startswith(
        "lists 10 successful requests, but the report's own count says 20 "
        "(scheduler_metrics.requests_made.successful): requests missing")


VLLM_ONLY = ("date", "model_id", "tokenizer_id", "endpoint_type", "label", "start_times",
             "latencies", "queue_times", "rtfx", "max_output_tokens_per_s", "burstiness",
             "total_input_tokens", "total_output_tokens", "request_goodput",
             "max_concurrent_requests", "num_prompts")
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")


def sglang_refactored(nested: bool) -> dict[str, Any]:
    """vLLM's rate-8 fixture as SGLang's refactored client writes a run
    (sgl-project/sglang python/sglang/benchmark/metrics.py save_results: the run's arguments,
    ``**metrics.__dict__`` with ``total_output_retokenized``, no model; the lists beside them
    at 1291c7fc, under ``details`` at 6e48df33)."""
    doc: dict[str, Any] = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
    for key in VLLM_ONLY:
        doc.pop(key, None)
    doc.update(backend="sglang", dataset_name="random", total_input=640, total_output=320,
               total_output_retokenized=320, concurrency=1.3)
    if nested:
        doc["details"] = {key: doc.pop(key) for key in PER_REQUEST}
    return doc


# SGLang's refactored bench_serving (python/sglang/benchmark/metrics.py) writes
# total_output_retokenized, not bench_serving.py's total_output_tokens_retokenized, and no
# server_info: its files were read as "vllm bench serve" (and an SGLang mooncake run was not
# refused); at 6e48df33 --output-details nests the lists under "details", and such a file was
# refused as "a serving-benchmark summary ... pass ... --output-details", the flag it was
# written with.
@pytest.mark.parametrize("nested", [False, True])
def test_sglang_refactored_client_results_are_read_as_sglangs(tmp_path: Path,
                                                              nested: bool) -> None:
    path = tmp_path / "sglang_0101_20_32_16.jsonl"
    path.write_text(json.dumps(sglang_refactored(nested)) + "\n")
    assert detect_recording_format(path) == "vllm-bench"
    rec = read_recording(path, seed=0)
    assert rec.tool == "sglang.bench_serving"
    assert len(rec.workload) == 20
    assert rec.stages[0].load == "open" and rec.stages[0].request_rate == 8


def test_sglang_refactored_client_without_details_is_named(tmp_path: Path) -> None:
    doc = sglang_refactored(nested=True)
    del doc["details"]
    path = tmp_path / "online.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    with pytest.raises(TraceError, match="is an SGLang bench_serving result without "
                       "per-request data"):
        read_recording(path)


def test_sglang_refactored_mooncake_run_is_refused(tmp_path: Path) -> None:
    doc = sglang_refactored(nested=True)
    doc.update(dataset_name="mooncake", request_rate="trace")
    path = tmp_path / "mooncake.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    with pytest.raises(TraceError, match="Mooncake trace"):
        read_recording(path)


# github.com/anud18/qwen36-vllm-aiperf-benchmark results/nvfp4/r100_chatbot_flat_c2/
# chatbot_flat/c2/profile_export.jsonl at d753e8f9 (AIPerf 0.10.0, a Mooncake-trace dataset at
# concurrency 2 against vLLM): each record carries usage_prompt_cache_read_tokens, the
# server's count of prompt tokens served from its prefix cache (30,653 of 65,546 in all,
# 47 %). kvbudget said only that prompts which "shared a prefix on the server" would hit where
# the simulation does not, while the file says how many did.
def test_aiperf_prompt_tokens_the_server_cached_are_said(tmp_path: Path) -> None:
    src = FIXTURES / "aiperf-0.13.0" / "concurrency4.jsonl"
    records = [json.loads(line) for line in src.read_text().splitlines()]
    for rec in records[:10]:
        rec["metrics"]["usage_prompt_cache_read_tokens"] = {"value": 16, "unit": "tokens"}
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "profile_export_aiperf.json").write_text(
        (FIXTURES / "aiperf-0.13.0" / "concurrency4_aiperf.json").read_text())
    rec = read_recording(path)
    total = int(rec.workload.prompt_tokens.sum())
    assert rec.counts["num_prompt_tokens_cached"] == 160
    assert any(n.startswith(f"the server served 160 of the {total:,} prompt tokens "
                            f"({100 * 160 / total:.0f} %) from its prefix cache")
               for n in rec.notes)
    # a run whose server reported no hits gets no such note
    plain = read_recording(FIXTURES / "aiperf-0.13.0" / "concurrency4.jsonl")
    assert "num_prompt_tokens_cached" not in plain.counts


def aiperf_fixed_schedule(tmp_path: Path, concurrency: int | None,
                          later_turns: int = 0) -> Path:
    """AIPerf 0.13.0's concurrency-4 fixture as a run whose profiling phase replayed a trace
    (``type: fixed_schedule``, as AIPerf promotes a Mooncake trace dataset by itself)."""
    src = FIXTURES / "aiperf-0.13.0"
    summary = json.loads((src / "concurrency4_aiperf.json").read_text())
    for phase in summary["input_config"]["phases"]:
        if phase.get("kind") == "profiling":
            phase["type"] = "fixed_schedule"
            phase.pop("concurrency", None)
            if concurrency is not None:
                phase["concurrency"] = concurrency
        elif phase.get("kind") == "warmup":  # as AIPerf builds it: by --concurrency, else 1
            phase.update(type="concurrency", concurrency=concurrency or 1)
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    records = [json.loads(line) for line in (src / "concurrency4.jsonl").read_text().splitlines()]
    for rec in records[-later_turns:] if later_turns else []:
        rec["metadata"]["turn_index"] = 1
    path = tmp_path / "profile_export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# AIPerf's fixed_schedule phase (aiperf 0.13.0 timing/strategies/fixed_schedule.py: each
# conversation's first turn at its trace timestamp, later turns when the turn before ended)
# was read as "load mode not recorded", its concurrency cap dropped: a capped replay was
# simulated uncapped, unsaid.
@pytest.mark.parametrize(("concurrency", "expected"), [
    (None, RecordedStage("fixed schedule", "open", None, None)),
    (2, RecordedStage("fixed schedule, concurrency 2", "capped", None, 2)),
])
def test_aiperf_fixed_schedule_is_the_traces_timestamps(
        tmp_path: Path, concurrency: int | None, expected: RecordedStage) -> None:
    rec = read_recording(aiperf_fixed_schedule(tmp_path, concurrency))
    # the warm-up phase, a closed loop of its --concurrency, a stage of its own before a
    # capped schedule (test_aiperf_warmup_load.py); an open one replays it at its sends
    assert rec.stages == ((expected,) if concurrency is None else (
        RecordedStage(f"warm-up, concurrency {concurrency}", "closed", None, concurrency),
        expected))
    said = [n for n in rec.notes if "is offered no sooner than that recorded send" in n]
    assert len(said) == (concurrency is not None)
    assert not any("later turns" in n for n in rec.notes)


def test_aiperf_fixed_schedule_later_turns_are_said(tmp_path: Path) -> None:
    rec = read_recording(aiperf_fixed_schedule(tmp_path, None, later_turns=5))
    assert any(n.startswith("5 of the 22 records are later turns of their conversations")
               for n in rec.notes)


def llm_load_test_result(user: int, k: int, start: float, prompt: int, output: int,
                         error: int | None = None) -> dict[str, Any]:
    """One ``RequestResult.asdict()`` of openshift-psap/llm-load-test (src/llm_load_test/
    result.py at b27aad1, its streaming OpenAI plugin's fields), its times in time.time()
    seconds (ttft, response_time, tpot in ms)."""
    first, end = start + 0.2 + 0.01 * k, start + 0.2 + 0.01 * k + 0.02 * (output - 1)
    done = error is None
    return {"user_id": user, "input_id": k, "input_tokens": prompt, "output_text": "...",
            "output_tokens": output if done else None,
            "output_tokens_before_timeout": output if done else None,
            "start_time": start, "ack_time": start + 0.1,
            "first_token_time": first if done else None, "end_time": end,
            "response_time": 1000 * (end - start) if done else None,
            "tt_ack": 100.0 if done else None, "ttft": 1000 * (first - start) if done else None,
            "itl": 20.0 if done else None, "tpot": None, "stop_reason": "length" if done else None,
            "error_code": error, "error_text": None if done else "Internal Server Error"}


def llm_load_test_file(tmp_path: Path, users: Any = 2) -> tuple[Path, list[dict[str, Any]]]:
    """llm-load-test's output-002.json (utils.py write_output: results gathered user by user,
    the run's config with load_options.concurrency set to its users, a summary): two users
    each sending its next request when its last one returned, for a 20 s duration, one
    request failing with HTTP 500."""
    results: list[dict[str, Any]] = []
    for user in range(2):
        t = 1708535304.5 + 0.05 * user
        for k in range(4):
            err = 500 if (user, k) == (1, 2) else None
            rec = llm_load_test_result(user, k, t, 100 + 10 * k + user, 16 + k, err)
            results.append(rec)
            t = rec["end_time"] + 0.001
    doc = {"results": results,
           "config": {"load_options": {"type": "constant", "concurrency": users,
                                       "duration": 20},
                      "plugin": "openai_plugin",
                      "plugin_options": {"streaming": True, "model_name":
                                         "meta-llama/Llama-3.1-8B-Instruct",
                                         "host": "http://127.0.0.1:8000",
                                         "endpoint": "/v1/completions"},
                      "output": {"dir": "./output/", "file": "output-{concurrency:03d}.json"}},
           "summary": {"total_requests": 8, "total_failures": 1}}
    path = tmp_path / "output-002.json"
    path.write_text(json.dumps(doc, indent=2))
    return path, results


# openshift-psap/llm-load-test (OpenShift AI's load tool; not on PyPI, so the test's file is
# built from its source): its output.json lists each request with its send, first-token and
# end times, token counts and error; it got "cannot tell the recording format".
def test_llm_load_test_output_is_read(tmp_path: Path) -> None:
    path, results = llm_load_test_file(tmp_path)
    assert detect_recording_format(path) == "llm-load-test"
    rec = read_recording(path)
    assert rec.tool == "llm-load-test"
    assert rec.stages == (RecordedStage("concurrency 2", "closed", None, 2),)
    assert rec.config["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert rec.counts["num_measured"] == 7
    # the failed request streamed nothing: dropped, as the trace loader drops it
    assert rec.counts["num_dropped_0_output_tokens"] == 1 and len(rec.workload) == 7
    ok = [r for r in results if r["error_code"] is None]
    measured = rec.measured.sort_values("arrival_s")
    assert np.allclose(measured["ttft_s"], [r["ttft"] / 1000 for r in
                                            sorted(ok, key=lambda r: r["start_time"])])
    assert np.allclose(measured["e2e_s"], [r["response_time"] / 1000 for r in
                                           sorted(ok, key=lambda r: r["start_time"])])
    assert sorted(rec.workload.prompt_tokens.tolist()) == sorted(r["input_tokens"] for r in ok)
    assert any("stopped by its 20 s time limit" in n for n in rec.notes)
    assert any("max_tokens = min_tokens" in n for n in rec.notes)


def test_llm_load_test_with_no_one_concurrency_says_so(tmp_path: Path) -> None:
    path, _ = llm_load_test_file(tmp_path, users=[1, 2])
    rec = read_recording(path)
    assert rec.stages[0].load == "unknown"
    assert any("names no one number of users" in n for n in rec.notes)


def test_llm_load_test_first_layout_is_read(tmp_path: Path) -> None:
    # openshift-psap/llm-load-test 64f000d (2024-01-29) to 36eb1ca: plugins/plugin.py
    # _calculate_results_stream wrote start, end (s), ttft (ms), worker_id, input_tokens
    path, results = llm_load_test_file(tmp_path)
    doc = json.loads(path.read_text())
    doc["results"] = [{"start": r["start_time"], "end": r["end_time"], "ttft": r["ttft"],
                       "tt_ack": r["tt_ack"], "tpot": r["tpot"],
                       "response_time": r["response_time"], "output_tokens": r["output_tokens"],
                       "worker_id": r["user_id"], "input_tokens": r["input_tokens"],
                       "response_string": "...", "input_string": "..."}
                      for r in results if r["error_code"] is None]
    del doc["summary"]  # its write_output wrote results and config only (summary: d503eba)
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.tool == "llm-load-test" and rec.counts["num_measured"] == 7
    ok = sorted((r for r in results if r["error_code"] is None), key=lambda r: r["start_time"])
    measured = rec.measured.sort_values("arrival_s")
    assert np.allclose(measured["ttft_s"], [r["ttft"] / 1000 for r in ok])
    assert np.allclose(measured["e2e_s"], [r["response_time"] / 1000 for r in ok])


def test_a_long_doc_qa_round_with_its_token_counts_added_reads_as_its_refusal_says(
    tmp_path: Path,
) -> None:
    """What the refusal of LMCache's long_doc_qa round tells to do works: its token counts
    and e2e_s added, read as the generic records format with the two columns mapped."""
    path = tmp_path / "query_round.csv"
    path.write_text(
        "prompt_id,request_start,ttft,request_end,is_miss,ttft_time,prompt_tokens,"
        "output_tokens,e2e_s\n"
        "0,0.0,0.1355,0.8536,False,0.1355,1002,100,0.8536\n"
        "1,0.8537,0.1298,1.6809,False,0.9835,1002,100,0.8272\n"
    )
    rec = read_recording(path, columns={"arrival_s": "request_start", "ttft_s": "ttft"})
    assert rec.format == "records"
    assert rec.measured["ttft_s"].tolist() == [0.1355, 0.1298]
    assert rec.workload.arrival_s.tolist() == [0.0, 0.8537]
