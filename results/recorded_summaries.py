"""Load tools' files that hold no request: named, with the file to pass instead.

People publish what their tool printed or saved by default, and much of it is aggregates: a
``vllm bench serve --save-result`` JSON without ``--save-detailed``, SGLang's ``bench_serving
--output-file`` lines without ``--output-details`` (python/sglang/bench_serving.py: the lists
are written only with it), ``vllm bench sweep``'s ``summary.json`` (a list of such results),
LLMPerf's ``*_summary.json`` and its ``*_individual_responses.json`` (github.com/ray-project/
llmperf, ``token_benchmark_ray.py``: per request ``ttft_s``, ``end_to_end_latency_s``,
``inter_token_latency_s``, ``number_input_tokens``, ``number_output_tokens``, ``error_code``,
and no send time), huggingface/inference-benchmarker's report (percentiles only). None of
them can be replayed; each is refused in one line that names the
tool as its own keys show it, and what to pass instead (:func:`summary_refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from kvbudget.results.recorded_guidellm_parser import guidellm_parser_refusal
from kvbudget.results.recorded_llama_benchy import llama_benchy_report_refusal
from kvbudget.results.recorded_locust import locust_csv_refusal, locust_refusal
from kvbudget.results.recorded_merges import ray_serve_merge_refusal
from kvbudget.results.recorded_trtllm_bench import trtllm_bench_refusal
from kvbudget.results.recorded_vllm_bench_client import (
    audio_problem,
    forward_said,
    pooling_problem,
)
from kvbudget.results.recorded_vllm_benchmark import (
    vllm_benchmark_csv_refusal,
    vllm_benchmark_refusal,
)
from kvbudget.workloads.text_files import open_utf8

LLMPERF_REQUEST_KEYS = frozenset({"ttft_s", "end_to_end_latency_s", "number_input_tokens"})
"""Keys of one LLMPerf individual response (``llmperf/common_metrics.py``)."""

_DETAILED = (
    "pass a file that lists each request: vllm bench serve --save-result "
    "--save-detailed, or SGLang's bench_serving --output-file F --output-details"
)


_VLLM_TABLE = (
    "is vLLM's performance-benchmarks table (benchmark_results.json, its "
    'convert-results-json-to-markdown.py: one row a test, "Test name", "Tput '
    '(req/s)", "Mean TTFT (ms)"...): aggregates only; pass one test\'s result '
    "beside it (serving_*.json) saved with --save-detailed"
)


def _is_vllm_table_row(row: Any) -> bool:
    """One row of vLLM's performance-benchmarks table, as pandas writes it (by record, or a
    column of ``{"0": value, ...}`` by row number): its "Test name" beside a throughput or
    latency column (``.buildkite/nightly-benchmarks/scripts/
    convert-results-json-to-markdown.py``, ``serving_column_mapping`` and its kin)."""
    return (
        isinstance(row, Mapping)
        and "Test name" in row
        and any(k in row for k in ("Tput (req/s)", "Mean TTFT (ms)", "Mean latency (ms)"))
    )


def latency_summary(doc: Mapping[str, Any]) -> bool:
    """A serving-benchmark summary in vLLM's layout (SGLang's client copies it):
    ``mean_ttft_ms``, ``median_ttft_ms``, ... with ``completed`` and ``duration`` or the
    run's ``request_rate``."""
    timed = any(
        isinstance(k, str) and k.endswith(("_ttft_ms", "_e2e_latency_ms", "_e2el_ms")) for k in doc
    )
    return ("completed" in doc and "duration" in doc) or (timed and "request_rate" in doc)


def is_sglang(doc: Mapping[str, Any]) -> bool:
    """SGLang's ``bench_serving`` writes ``total_output_tokens_retokenized`` (and, in later
    versions, ``server_info``), which vLLM's client does not; its refactored client writes its
    ``BenchmarkMetrics`` as they are, ``total_output_retokenized`` among them
    (sgl-project/sglang python/sglang/benchmark/metrics.py at 1291c7fc and 6e48df33)."""
    return (
        "total_output_tokens_retokenized" in doc
        or "server_info" in doc
        or "total_output_retokenized" in doc
    )


def is_trtllm(doc: Mapping[str, Any]) -> bool:
    """TensorRT-LLM's copy of vLLM's client (tensorrt_llm/serve/scripts/benchmark_serving.py)
    writes ``user_throughput`` and ``avg_decoded_tokens_per_iter``, which vLLM's does not."""
    return "user_throughput" in doc or "avg_decoded_tokens_per_iter" in doc


def _is_inference_benchmarker(doc: Mapping[str, Any]) -> bool:
    """huggingface/inference-benchmarker's ``results/<tokenizer>_<date>.json``
    (``src/writers.rs``, ``BenchmarkReportWriter``: ``config``, ``results``, ``start_time``,
    ``end_time``, ``system``; a result, ``BenchmarkResultsWriter``, holds ``executor_type``,
    ``total_requests``, ``time_to_first_token_ms`` percentiles and the like, no request)."""
    results = doc.get("results")
    first = results[0] if isinstance(results, list) and results else None
    return (
        "system" in doc
        and isinstance(first, Mapping)
        and "executor_type" in first
        and "time_to_first_token_ms" in first
    )


_RECORD_A_SERVED_RUN = (
    "record a run against a server with a tool kvbudget reads "
    "(docs/recordings.md), e.g. vllm bench serve --save-result "
    "--save-detailed"
)

_OFFLINE_VLLM = (
    "a vLLM offline {what} result (--output-json of benchmarks/benchmark_{what}.py, "
    "or of vllm bench {what}, its successor since vLLM PR #16508 of April 2025)"
)
"""Who wrote an offline vLLM result: the keys of both writers are the same, and a file of
February 2025 was called a result of a command that did not exist yet."""

EVALSCOPE_SUMMARY_KEYS = (
    ("Time taken for tests (s)", "Number of concurrency"),
    ("Test Duration (s)", "Concurrency"),
)
"""The first keys of evalscope perf's ``benchmark_summary.json``: before and after its
rename (modelscope/evalscope evalscope/perf/utils/perf_constants.py, ``Metrics``)."""

_EVALSCOPE_DB = (
    "its requests are in benchmark_data.db (SQLite) beside it: pass that, or the "
    "run directory holding both (kvbudget reads it as --records-format evalscope)"
)


def _offline_refusal(doc: Mapping[str, Any]) -> str | None:
    """The refusal of a result that times no request sent to a server: an engine benchmark run
    offline (vLLM's ``bench latency`` / ``bench throughput --output-json``, vllm/benchmarks/
    latency.py and throughput.py of vLLM 0.32.0, moved there by vLLM PR #16508 (April 2025)
    from the scripts ``benchmarks/benchmark_latency.py`` and ``benchmark_throughput.py``, whose
    ``--output-json`` wrote the same keys, so a file cannot tell which wrote it; SGLang's ``bench_one_batch``,
    ``bench_one_batch_server`` and ``bench_offline_throughput`` result lines,
    sgl-project/sglang python/sglang/bench_one_batch.py at fe867456,
    bench_one_batch_server.py at b23a42fc, bench_offline_throughput.py at 00d02fb4;
    llama.cpp's ``llama-bench -o json|jsonl``: ``avg_ts`` of a prompt or generation test;
    ``vllm bench forward --output-json``: :func:`~kvbudget.results.recorded_vllm_bench_client.
    forward_said`)."""
    keys = set(doc)
    forward = forward_said(keys)
    if forward:
        return f"{forward}; {_RECORD_A_SERVED_RUN}"
    if {"avg_latency", "latencies", "percentiles"} <= keys:
        return (
            f"is {_OFFLINE_VLLM.format(what='latency')}: the time of one batch run "
            "offline, repeated; no request was sent to a server, so there is no load to "
            f"replay; {_RECORD_A_SERVED_RUN}"
        )
    if {"elapsed_time", "num_requests", "requests_per_second"} <= keys:
        return (
            f"is {_OFFLINE_VLLM.format(what='throughput')}: totals of an offline run "
            "(every request handed to the engine at once, none timed); no load to replay; "
            f"{_RECORD_A_SERVED_RUN}"
        )
    if {"run_name", "batch_size", "input_len", "output_len"} <= keys:
        tool = "bench_one_batch" if "prefill_latency" in keys else "bench_one_batch_server"
        return (
            f"is an SGLang {tool} result line: the latency of one batch of batch_size "
            "requests of input_len and output_len tokens run together, no request's own "
            "times; run SGLang's bench_serving --output-file F --output-details instead"
        )
    if {"successful_requests", "total_latency", "total_output_tokens"} <= keys:
        return (
            "is an SGLang bench_offline_throughput result line: totals of an offline run "
            "(no request timed); run SGLang's bench_serving --output-file F "
            "--output-details instead"
        )
    if {"avg_ts", "n_prompt", "n_gen"} <= keys:
        return (
            "is a llama-bench result: tokens a second of a prompt or generation test run "
            "in the process, no request sent to a server; record llama-server under load "
            "with a tool kvbudget reads (docs/recordings.md)"
        )
    return None


def _evalscope_refusal(doc: Mapping[str, Any]) -> str | None:
    """The refusal of evalscope perf's summary: its requests are in an SQLite database that
    kvbudget has no reader for."""
    if any(all(k in doc for k in pair) for pair in EVALSCOPE_SUMMARY_KEYS):
        return f"is evalscope perf's benchmark_summary.json: aggregates only; {_EVALSCOPE_DB}"
    return None


def _multi_turn_refusal(doc: Mapping[str, Any]) -> str | None:
    """The refusal of vllm-project/vllm-bench's ``--multi-turn`` result (the Rust port of
    ``vllm bench serve``; ``src/output/json.rs`` at f313182, ``build_multi_turn_result_json``:
    ``mode`` ``multi_turn``, ``num_conversations``, ``turns_per_conversation``,
    ``multi_turn_concurrency``, ``inter_turn_delay_ms``, aggregates and ``per_turn_metrics``).
    Only its single-turn ``build_result_json`` writes per-request lists with
    ``--save-detailed``; this one writes none (its ``failed_requests`` lists the failed turns
    only), so adding that flag would not help."""
    if doc.get("mode") != "multi_turn" or not {"per_turn_metrics", "turns_per_conversation"} & set(
        doc
    ):
        return None
    said = []
    if isinstance(doc.get("num_conversations"), int):
        turns, done = doc.get("turns_per_conversation", "?"), doc.get("avg_turns_completed")
        said.append(
            f"{doc['num_conversations']} conversations of {turns} turns"
            + (
                f", {done:g} completed on average"
                if isinstance(done, int | float) and not isinstance(done, bool) and done != turns
                else ""
            )
        )
    if isinstance(doc.get("multi_turn_concurrency"), int):
        said.append(f"{doc['multi_turn_concurrency']} at once")
    if isinstance(doc.get("inter_turn_delay_ms"), int | float):
        said.append(f"{doc['inter_turn_delay_ms']:g} ms between turns")
    run = f" ({', '.join(said)})" if said else ""
    return (
        f"is a vllm-bench --multi-turn result{run}: "
        "aggregates over all turns and per turn; that mode lists no request, "
        "--save-detailed or not (only vllm-bench's single-turn results do), so its "
        "conversations cannot be replayed: record them with a tool that lists each turn, "
        "e.g. AIPerf with a multi-turn dataset (its profile_export.jsonl), or vLLM's "
        "benchmarks/multi_turn/benchmark_serving_multi_turn.py --stats-json-output "
        "written out as the generic records format (docs/recordings.md)"
    )


def _none_completed(doc: Mapping[str, Any]) -> str:
    """A clause for a summary whose every request failed (``completed`` 0, ``failed`` N: a
    published vllm bench serve run whose server refused all 100, llm-benchmaq's
    ``benchmarks/vllm/runpod_b200/GLM-4.7-FP8/run_1_TP4_DP2_CTX2048_*.json``): the run has
    nothing to validate against however it is saved again; '' otherwise."""
    completed, failed = doc.get("completed"), doc.get("failed")
    if completed == 0 and isinstance(failed, int) and not isinstance(failed, bool) and failed:
        return (
            f"; besides, every one of its {failed} requests failed (completed 0): the "
            "server answered none, so the run measured nothing to validate against; see "
            "why the server refused them (its log) before running it again"
        )
    return ""


CLIENT_BACKENDS = frozenset(
    {
        "vllm",
        "openai",
        "openai-chat",
        "openai-responses",
        "openai-audio",
        "openai-embeddings",
        "openai-embeddings-chat",
        "openai-embeddings-clip",
        "openai-embeddings-vlm2vec",
        "infinity-embeddings",
        "infinity-embeddings-clip",
        "vllm-pooling",
        "vllm-rerank",
        "tgi",
        "lmdeploy",
        "deepspeed-mii",
        "tensorrt-llm",
        "scalellm",
        "sglang",
        "llama.cpp",
        "sglang-native",
        "sglang-oai",
        "sglang-oai-chat",
        "vllm-chat",
        "lmdeploy-chat",
        "trt",
        "gserver",
        "truss",
    }
)
"""The ``--backend`` names of vLLM's serving benchmark and SGLang's copy of it: vLLM 0.32.0
``vllm/benchmarks/lib/endpoint_request_func.py`` ``ASYNC_REQUEST_FUNCS`` (``vllm`` to
``vllm-rerank``), the older ``benchmarks/backend_request_func.py``'s (``tgi``, ``lmdeploy``,
``deepspeed-mii``, ``tensorrt-llm``, ``scalellm``, ``sglang``, ``llama.cpp``) and SGLang's
``python/sglang/bench_serving.py`` (``sglang-native`` to ``truss``). A result in their layout
whose ``backend`` is none of these was written by another script or a fork."""


def _foreign_backend(doc: Mapping[str, Any]) -> str | None:
    """The refusal of a summary in vLLM's layout whose ``backend`` no vLLM or SGLang client has
    (github.com/ovg-project/kvcached ``benchmarks/bench_dgx_spark/workflow_benchmark.py``
    writes ``openai-chat-workflow``: each of its requests a guard model's, a main model's and
    the guard's again), or None."""
    backend = doc.get("backend")
    if not isinstance(backend, str) or backend in CLIENT_BACKENDS:
        return None
    return (
        f"is a serving-benchmark summary in vllm bench serve's layout, but its backend "
        f"{backend[:40]!r} is none of vLLM's or SGLang's benchmark clients' (another "
        f"script, or a fork, wrote it): aggregates only, no request; {_DETAILED}"
    )


def foreign_backend_note(doc: Mapping[str, Any]) -> str | None:
    """A note for a per-request file in vLLM's layout whose ``backend`` no vLLM or SGLang client
    has (:data:`CLIENT_BACKENDS`): it is read as vLLM's client writes its lists, which the
    script that wrote it may mean otherwise; None for any other."""
    backend = doc.get("backend")
    if not isinstance(backend, str) or backend in CLIENT_BACKENDS:
        return None
    return (
        f"the file's backend {backend[:40]!r} is none of vLLM's or SGLang's benchmark "
        "clients': another script, or a fork, wrote it; its lists are read as vllm bench "
        "serve's (each entry one request to one server: input_lens, output_lens, ttfts, "
        "itls, start_times), which that script may mean otherwise"
    )


STEADY_STATE_KEYS = frozenset(
    {"concurrency_ratio", "window_start", "window_end", "concurrency_threshold", "peak_concurrency"}
)
"""Fields of SGLang 0.5.23's ``SteadyStateMetrics`` (``sglang/benchmark/steady_state.py``),
each line of ``steady_state_serving.py --steady-state-output-file`` (``_append_metrics``:
``json.dumps(asdict(metrics))``): the longest span with at least ``ceil(concurrency_ratio *
peak)`` requests in flight (``find_steady_state_window``), and its throughput; it holds
``total_output_retokenized`` as bench_serving's own results do."""


def _is_sglang_steady_state(doc: Mapping[str, Any]) -> bool:
    ratio = doc.get("concurrency_ratio")
    return (
        set(doc) >= STEADY_STATE_KEYS
        and isinstance(ratio, int | float)
        and not isinstance(ratio, bool)
    )


def _latency_refusal(doc: Mapping[str, Any]) -> str:
    """The refusal of a serving-benchmark summary in vLLM's layout, naming the client that
    wrote it and the flag that saves its requests."""
    if _is_sglang_steady_state(doc):
        ratio = doc.get("concurrency_ratio")
        return (
            "is SGLang's steady-state window (python -m sglang.benchmark.steady_state_serving "
            "--steady-state-output-file): aggregates of the window where at least "
            f"{ratio:g} of the peak concurrency was in flight, no request; give kvbudget "
            "the same run's --output-file F --output-details instead"
        )
    if is_sglang(doc):
        return (
            "is an SGLang bench_serving result without per-request data (its "
            "--output-file lines hold aggregates only, unless --output-details is "
            "given); run it again with --output-file F --output-details"
        )
    if is_trtllm(doc):
        return (
            "is a TensorRT-LLM benchmark_serving result without per-request data "
            "(aggregates only); run it again with --save-result --save-detailed"
        )
    if isinstance(doc.get("run_number"), int):
        return (
            "is one run of vllm bench sweep serve (run=N.json) without per-request "
            "data (aggregates only); add --save-detailed to the sweep's --bench-cmd"
        )
    foreign = _foreign_backend(doc) or ray_serve_merge_refusal(doc)
    if foreign:
        return foreign
    if "model_id" in doc or "tokenizer_id" in doc or "endpoint_type" in doc:
        if "input_lens" in doc and "ttfts" not in doc:
            # SemiAnalysisAI/InferenceX's benchmark_serving.py (PR #1705, June 2026) keeps
            # input_lens and output_lens without --save-detailed, and drops the times
            return (
                "is a vllm bench serve result that keeps each request's lengths "
                "(input_lens, output_lens) but not its times (ttfts, itls: saved only with "
                "--save-detailed); run it again with --save-result --save-detailed"
            )
        return _vllm_aggregates(doc)
    return (
        "is a serving-benchmark summary (mean, median and percentile latencies, no "
        f"request); {_DETAILED}"
    )


SAVE_DETAILED_DATE = "20250316"
"""The day ``--save-detailed`` came (vllm-project/vllm PR #14879, "[Benchmark] Do not save
detailed info to json by default", merged 16 March 2025): before it ``benchmarks/
benchmark_serving.py --save-result`` saved every request's ``input_lens``, ``output_lens``,
``ttfts``, ``itls``, ``generated_texts`` and ``errors`` (``benchmark()``'s ``result``, merged
whole into the file), and had no such flag."""


def _vllm_aggregates(doc: Mapping[str, Any]) -> str:
    """The refusal of a vLLM client's result without its requests, worded for the client of
    the file's ``date`` (``%Y%m%d-%H%M%S``, as ``--save-result`` writes it): one from
    before :data:`SAVE_DETAILED_DATE` was saved with its requests and cut down since."""
    date = doc.get("date")
    if (
        isinstance(date, str)
        and re.fullmatch(r"\d{8}-\d{6}", date)
        and date[:8] < SAVE_DETAILED_DATE
    ):
        day = f"{date[:4]}-{date[4:6]}-{date[6:8]}"
        return (
            f"is a vLLM benchmark_serving.py result of {day} without per-request data "
            "(aggregates only): benchmark_serving.py --save-result saved each request's "
            "input_lens, output_lens, ttfts and itls itself until vLLM PR #14879 (16 March "
            "2025) put them behind --save-detailed, which it did not have, so they were "
            "taken out of this file after it was saved (or another script wrote it); pass "
            "the file as --save-result wrote it, or run again with vllm bench serve "
            "--save-result --save-detailed"
        )
    return (
        "is a vllm bench serve result without per-request data (aggregates "
        "only); run vllm bench serve with --save-result --save-detailed"
    )


def _inferencex_refusal(doc: Mapping[str, Any]) -> str | None:
    """SemiAnalysisAI/InferenceX's (formerly InferenceMAX) result rows, ``agg_<result>.json``:
    a fixed-length run's (``utils/process_result.py``: the ``benchmark_serving.py`` result's
    aggregates beside the cluster shape, ``isl``, ``osl``, ``conc``, ``tput_per_gpu``) or an
    agentic run's (``utils/agentic/aggregation/process_agentic_result.py``, ``build_agg``:
    its AIPerf run's aggregates, ``request_accounting`` and the server's ``/metrics``)."""
    if "infmax_model_prefix" not in doc and not {"hw", "conc", "tput_per_gpu"} <= set(doc):
        return None
    shape = ", ".join(
        f"{k} {doc[k]}"
        for k in ("model", "hw", "tp", "ep", "conc")
        if isinstance(doc.get(k), str | int) and not isinstance(doc[k], bool) and doc[k] != ""
    )
    head = f"is an InferenceX (formerly InferenceMAX) result row ({shape}"
    if doc.get("scenario_type") == "agentic-coding" or "request_accounting" in doc:
        return (
            f"{head}; its agentic scenario, utils/agentic/aggregation/"
            "process_agentic_result.py): aggregates of an AIPerf run and the server's "
            "metrics, no request; pass the AIPerf profile_export.jsonl it was made from "
            "(the run's aiperf_artifacts/)"
        )
    return (
        f"{head}; utils/process_result.py): the aggregates of one benchmark_serving.py "
        "result, per GPU, no request; that result (the run's --result-filename JSON) lists "
        "each request only when saved with --save-detailed, which InferenceX's "
        "benchmarks/benchmark_lib.sh does not pass: rerun it with --save-detailed"
    )


K6_CSV_HEADER = ["metric_name", "timestamp", "metric_value"]
"""The first columns of k6's ``--out csv`` (grafana/k6 ``internal/output/csv/output.go`` at
4b6aa058, ``MakeHeader``: then a column a system tag, ``extra_tags``, ``metadata``): one row a
metric sample."""

_K6_WHAT = (
    "k6 records metric samples (http_req_duration, http_reqs and its script's own "
    "metrics, each with a time and tags), not requests with their prompt and output "
    "tokens, so kvbudget cannot replay it: have the k6 script write each request's "
    "send time, token counts, TTFT and E2E in the generic records format (arrival_s, "
    "prompt_tokens, output_tokens, ttft_s, e2e_s: docs/recordings.md), or record the "
    "load with a tool kvbudget reads"
)


def k6_refusal(doc: Mapping[str, Any]) -> str | None:
    """k6's results (github.com/grafana/k6): its ``--out json`` lines (``internal/output/json/
    wrapper.go`` at 4815d6c5, ``sampleEnvelope`` and ``metricEnvelope``: ``{"type": "Point" |
    "Metric", "data": ..., "metric": NAME}``, a metric declared on a line before its samples)
    and its ``--summary-export`` file (``root_group`` and ``metrics`` of aggregates, as k6's
    ``TestSummarizeMetricsJSON`` expects them). Both were told "cannot tell the recording format; pass a format (records, run,
    ...)", which none fits, and k6's CSV (:data:`K6_CSV_HEADER`) to map its sample time as
    the arrival time, which then lacked prompt_tokens."""
    if set(doc) == {"type", "data", "metric"} and doc.get("type") in ("Metric", "Point"):
        return f"is k6's --out json output (one metric sample or declaration a line): {_K6_WHAT}"
    if "root_group" in doc and isinstance(doc.get("metrics"), Mapping):
        return (
            f"is k6's end-of-test summary (--summary-export, or handleSummary's data): "
            f"aggregates only; {_K6_WHAT}"
        )
    return None


AIPERF_SUMMARY_KEYS = frozenset({"was_cancelled", "error_summary"})
"""Keys of AIPerf's ``profile_export_aiperf.json`` that genai-perf's summary never has, with or
without ``aiperf_version`` (which early AIPerf did not write): ``JsonExportData``'s
``was_cancelled`` and ``error_summary`` beside its metrics (ai-dynamo/aiperf v0.1.1
``aiperf/exporters/json_exporter.py:23-30``; db4f6397 ``aiperf/common/models/
export_models.py:83-87``). genai-perf's is its statistics, ``telemetry_stats``, ``input_config``
and ``sessions`` (triton-inference-server/perf_analyzer 263c5f6e
``genai-perf/genai_perf/export_data/json_exporter.py`` ``_merge_stats_and_args``)."""
AIPERF_CONFIG_KEYS = frozenset({"loadgen", "cli_command"})
"""Sections of AIPerf's ``input_config`` (its ``UserConfig``: ai-dynamo/aiperf v0.1.1
``aiperf/common/config/user_config.py:94-108``, ``cli_command`` the ``aiperf profile ...``
line) that genai-perf's never has: its arguments (``vars(args)``, perf_analyzer 605cba34
``json_exporter.py``) or its config's sections (``model_names``, ``analyze``, ``endpoint``,
``perf_analyzer``, ``input``, ``output``, ``tokenizer``, ``process``: 263c5f6e
``genai-perf/genai_perf/config/input/config_command.py:55-83``)."""


def is_aiperf_summary(doc: Mapping[str, Any]) -> bool:
    """Whether a JSON object is AIPerf's summary: its ``aiperf_version``, or, where early AIPerf
    wrote none, ``input_config`` beside fields genai-perf never writes
    (:data:`AIPERF_SUMMARY_KEYS`, :data:`AIPERF_CONFIG_KEYS`)."""
    if "aiperf_version" in doc:
        return True
    config = doc.get("input_config")
    return isinstance(config, Mapping) and bool(
        AIPERF_SUMMARY_KEYS & set(doc) or AIPERF_CONFIG_KEYS & set(config)
    )


def _genai_perf_summary_refusal(doc: Mapping[str, Any]) -> str | None:
    """genai-perf's ``profile_export_genai_perf.json``: its statistics and ``input_config``, as
    AIPerf's summary has them, but genai-perf's own: the configuration holds its
    ``perf_analyzer`` section (the tool it drives), or, in the flat arguments of its first
    releases, ``service_kind``; its GPU figures are ``telemetry_stats`` (AIPerf's are
    ``telemetry_data``). Seen in github.com/wellflat/k8s-dev
    ``bench/etl/profile_export_genai_perf.json`` at e17e8f5b (openai/gpt-oss-20b, genai-perf of
    the tritonserver 25.07 SDK image), which was told to pass AIPerf's profile_export.jsonl, a
    file genai-perf never writes. Its per-request file is perf_analyzer's
    ``profile_export.json`` (:func:`_object_refusal`), with no token counts."""
    config = doc.get("input_config")
    if not isinstance(config, Mapping) or "aiperf_version" in doc:
        return None
    if not ("perf_analyzer" in config or "service_kind" in config or "telemetry_stats" in doc):
        return None
    return (
        "is genai-perf's summary (profile_export_genai_perf.json): aggregates only; its "
        "per-request file, perf_analyzer's profile_export.json beside it, keeps each "
        "request's timestamps and text but no token counts (genai-perf counts them with "
        "its tokenizer), so neither can be replayed: rerun with AIPerf, genai-perf's "
        "successor, and pass its profile_export.jsonl (each request's times and token "
        "counts)"
    )


def _inputs_json_refusal(doc: Mapping[str, Any]) -> str | None:
    """The ``inputs.json`` genai-perf and AIPerf write into a run's artifact folder before
    sending: the request bodies they generated, ``{"data": [...]}``, no time nor output of any.

    genai-perf's (triton-inference-server/perf_analyzer at 263c5f6e,
    ``genai-perf/genai_perf/inputs/inputs.py`` ``_write_json_to_file``, handed to perf_analyzer
    as ``--input-data``): one record a request, its body under ``payload``
    (``inputs/converters/base_converter.py`` ``_finalize_payload``) or, for Triton's formats,
    its fields at the top (``text_input``); the run's measurements are perf_analyzer's
    ``profile_export.json``. AIPerf's (0.13.0 ``dataset/dataset_manager.py``
    ``_generate_inputs_json_file``, ``common/models/dataset_models.py`` ``InputsFile``): one
    record a session, ``session_id`` and a body a turn under ``payloads``; its per-request
    records are ``profile_export.jsonl`` beside it."""
    data = doc.get("data")
    if (
        set(doc) != {"data"}
        or not isinstance(data, list)
        or not data
        or not all(isinstance(r, Mapping) for r in data[:8])
    ):
        return None
    if all("payloads" in r for r in data[:8]):
        return (
            f"is AIPerf's inputs.json: the request bodies of its {len(data)} sessions, "
            "written before it sent them, no time nor output of any; pass the run's "
            "per-request records, profile_export.jsonl in the same artifact folder"
        )
    if not all("payload" in r or "text_input" in r for r in data[:8]):
        return None
    return (
        f"is genai-perf's inputs.json: the {len(data)} request bodies it generated for "
        "perf_analyzer to send (--input-data), no time nor output of any; the run's "
        "measurements are in profile_export.json beside it (perf_analyzer's), which keeps "
        "each request's timestamps but no token counts, so neither can be replayed: rerun "
        "with AIPerf, genai-perf's successor, and pass its profile_export.jsonl (each "
        "request's times and token counts)"
    )


def _object_refusal(doc: Mapping[str, Any]) -> str | None:
    """The refusal of one JSON object (a result line, a summary file)."""
    offline = (
        _offline_refusal(doc)
        or _evalscope_refusal(doc)
        or _multi_turn_refusal(doc)
        or _inferencex_refusal(doc)
        or pooling_problem(doc)
        or audio_problem(doc)
        or _inputs_json_refusal(doc)
        or _genai_perf_summary_refusal(doc)
        or k6_refusal(doc)
    )
    if offline:
        return offline
    if latency_summary(doc):
        return _latency_refusal(doc) + _none_completed(doc)
    runs = doc.get("experiments")
    if isinstance(runs, list) and runs and isinstance(runs[0], Mapping) and "requests" in runs[0]:
        return (
            "is perf_analyzer's profile_export.json (written under genai-perf): each "
            "request's timestamps and text, but no token counts (genai-perf counts them "
            "with its tokenizer); kvbudget reads AIPerf's profile_export.jsonl, genai-perf's "
            "successor, which records them"
        )
    if "aggregation_type" in doc and (
        "per_combination_metrics" in doc or "num_profile_runs" in doc
    ):
        return (
            "is AIPerf's aggregate of several profile runs (profile_export_aiperf_sweep.json "
            "or a --num-profile-runs aggregate): aggregates only; pass one run's "
            "per-request profile_export.jsonl"
        )
    if _is_inference_benchmarker(doc):
        return (
            "is huggingface/inference-benchmarker's report: each benchmark's TTFT, "
            "inter-token and E2E percentiles and request and token totals, but no request "
            "(no send time, TTFT or token counts of any one; the tool writes nothing "
            "else): record the run with a tool kvbudget reads (docs/recordings.md)"
        )
    if any(isinstance(k, str) and k.startswith("results_ttft_s") for k in doc) or {
        "num_concurrent_requests",
        "mean_input_tokens",
    } <= set(doc):
        return (
            "is LLMPerf's summary (aggregates only); its individual_responses file lists "
            "no send time either, so neither can be replayed: record the run with a tool "
            "kvbudget reads (docs/recordings.md)"
        )
    return None


def _keyed_refusal(doc: Mapping[str, Any]) -> str | None:
    """The refusal of an object whose values are each a file's refusable object, keyed by run
    (github.com/philschmid/llmperf-bench ``main.py`` writes ``results/<version>/<model>_tp_<tp>
    _results.json``: LLMPerf's summaries keyed by their concurrency); None for any other."""
    values = list(doc.values())
    if not values or not all(isinstance(v, Mapping) for v in values):
        return None
    first = _object_refusal(values[0])
    if first is None:
        return None
    keys = ", ".join(repr(k) for k in list(doc)[:3]) + (", ..." if len(doc) > 3 else "")
    return (
        f"is an object of {len(doc)} results keyed by run ({keys}); the first "
        f"({next(iter(doc))!r}) {first}"
    )


def summary_refusal(doc: Any) -> str | None:
    """Why ``doc`` (a file's first JSON value) holds no request to replay, naming its tool, one
    sentence about the whole file (raised with no field: "field 'input_lens': is a vLLM ..."
    read as if the field were the file); None when it is not such a file."""
    trtllm = (
        trtllm_bench_refusal(doc)
        or guidellm_parser_refusal(doc)
        or vllm_benchmark_refusal(doc)
        or locust_refusal(doc)
    )
    if trtllm:
        return trtllm
    if isinstance(doc, Mapping):
        if any(_is_vllm_table_row(doc.get(k)) for k in ("serving", "throughput", "latency")):
            return _VLLM_TABLE
        return _object_refusal(doc) or _keyed_refusal(doc) or llama_benchy_report_refusal(doc)
    if isinstance(doc, list) and doc and isinstance(doc[0], Mapping):
        first = doc[0]
        if _is_vllm_table_row(first):
            return _VLLM_TABLE
        if set(first) >= LLMPERF_REQUEST_KEYS:
            return (
                "is LLMPerf's individual_responses file: each request's TTFT, E2E and "
                "tokens, but no send time nor which of its concurrent clients sent it, so "
                "its load cannot be replayed: record the run with a tool kvbudget reads "
                "(docs/recordings.md)"
            )
        offline = _offline_refusal(first)
        if offline:
            return offline
        row = _inferencex_refusal(first)
        if row:
            return f"is a list of {len(doc)} rows; the first {row.removeprefix('is ')}"
        if {"ttft_ms", "latency_ms", "start_time_ms", "input_num_tokens"} <= set(first):
            return (
                "is vLLM's multi-turn benchmark per-request stats "
                "(benchmarks/multi_turn/benchmark_serving_multi_turn.py "
                "--stats-json-output), which kvbudget has no reader for: its load (clients "
                "working through conversations turn by turn) is not in the file; write it "
                "as the generic records format (start_time_ms / 1000 as arrival_s, "
                "input_num_tokens as prompt_tokens, output_num_tokens as output_tokens, "
                "ttft_ms / 1000 as ttft_s, latency_ms / 1000 as e2e_s: docs/recordings.md), "
                "which replays its send times"
            )
        if {"qsl_idx", "data"} <= set(first) and ("seq_id" in first or "token_count" in first):
            return (
                "is an MLPerf LoadGen accuracy log (mlperf_log_accuracy.json): each "
                "sample's output tokens, " + _MLPERF_NO_REQUEST
            )
        if "Percentiles" in first:
            return (
                f"is evalscope perf's benchmark_percentile.json: percentiles only; {_EVALSCOPE_DB}"
            )
        if {"benchmark", "model", "metric"} <= set(first):
            return (
                "is vLLM's PyTorch benchmark-database record (*.pytorch.json, written with "
                "SAVE_TO_PYTORCH_BENCHMARK_FORMAT set): each metric's values, no request; "
                f"{_DETAILED}"
            )
        if latency_summary(first) and "input_lens" not in first:
            return (
                f"is a list of {len(doc)} serving-benchmark summaries (vllm bench sweep's "
                f"summary.json): aggregates only; {_DETAILED}"
            )
    return None


LMBENCH_RESULT = [
    "timestamp",
    "request_id",
    "latency",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "error",
]
"""The header LMBench's trace replayer writes (LMCache/LMBench 3-workloads/trace-replayer/
trace-replayer-qa.py, commit 48172cd1, ``save_results``): one row a request of a replay that
does not stream (its ``send_request`` posts without ``stream`` and reads the whole answer), so
no time to the first token."""

LONG_DOC_QA_COLUMNS = ["prompt_id", "request_start", "ttft", "request_end"]
"""The first columns of LMCache's long-document QA benchmark's ``warmup_round.csv`` and
``query_round.csv`` (LMCache/LMCache ``benchmarks/long_doc_qa/long_doc_qa.py`` at 0482cd9f:
``RequestStats``, then ``ttft_time``; forks add ``successful`` and ``is_miss``): one row a
request, its send, TTFT and end in seconds from the round's start, and no token counts (the
prompts are ``--document-length`` words, the answers at most ``--output-len`` tokens, neither
written)."""

_LONG_DOC_QA = (
    "is LMCache's long-document QA round (benchmarks/long_doc_qa/long_doc_qa.py: "
    "warmup_round.csv or query_round.csv): each request's send, TTFT and end, but "
    "not its prompt or output tokens (the run's --document-length and --output-len "
    "are not in it), which kvbudget needs to simulate it; add prompt_tokens and "
    "output_tokens columns from the run's settings and e2e_s (request_end - "
    "request_start), and pass it as the generic records format with --column "
    "arrival_s=request_start --column ttft_s=ttft (docs/recordings.md), or record "
    "the load with a tool kvbudget reads"
)


_BENCH_CONSOLE = (b" Serving Benchmark Result ", b"bench_type='serve'", b"\nBurstiness factor: ")
"""What a serving benchmark prints, never a file it saves: its summary's banner (vLLM 0.32.0
``vllm/benchmarks/serve.py`` ``benchmark``, ``" Serving Benchmark Result "`` centred in ``=``;
SGLang's ``bench_serving.py`` and TensorRT-LLM's ``benchmark_serving.py`` print the same), the
``vllm bench serve`` arguments it echoes (``Namespace(subparser='bench', bench_type='serve',
...``) and the load it announces before sending (``Traffic request rate: R`` then ``Burstiness
factor: B (Poisson process)``, ``Maximum request concurrency: C``)."""

_BENCH_SAID = (
    ("backend", rb"\nBackend:\s+(\S+)"),
    ("request rate", rb"\nTraffic request rate:\s+(\S+)"),
    ("max concurrency", rb"\nMaximum request concurrency:\s+(\S+)"),
    ("successful requests", rb"\nSuccessful requests:\s+(\d+)"),
)

CONSOLE_HEAD = 1 << 16
"""How much of a file the recordings' reader looks at to tell its format (its head)."""


def _console_lines(path: Path) -> Iterator[bytes]:
    """``path`` a line at a time (each prefixed with its newline, as :data:`_BENCH_SAID`'s
    patterns read), at most 64 KiB read at once: a progress bar's line of carriage returns is
    read in pieces, never the file whole. A piece that does not start a line gets no newline."""
    with open_utf8(path) as fh:
        start = True
        while piece := fh.readline(CONSOLE_HEAD):
            yield (b"\n" if start else b"") + piece
            start = piece.endswith(b"\n")


def _console_runs(texts: Iterable[bytes]) -> tuple[int, dict[str, list[str]]]:
    """How many runs ``texts`` (a file's head, or its lines) print (their summary banners, or
    announced loads where more) and each setting's values in order."""
    banners = announced = 0
    values: dict[str, list[str]] = {name: [] for name, _ in _BENCH_SAID}
    for text in texts:
        banners += text.count(_BENCH_CONSOLE[0])
        announced += text.count(b"\nTraffic request rate:")
        for name, pattern in _BENCH_SAID:
            values[name] += [v.decode("utf-8", "replace") for v in re.findall(pattern, text)]
    return max(banners, announced), values


def bench_console_refusal(head: bytes, path: Path | None = None) -> str | None:
    """Why a serving benchmark's console output (``vllm bench serve ... | tee bench.log``) is no
    recording: it prints its settings and summary, not each request; None for any other file
    (a JSON or YAML document is never one). Several runs printed to one file say each one's
    settings and how many there are: a sweep's log (github.com/thienlng/llm-bench-results-16-04
    5c16239 ``benchmark_results/results/minimax27/benchmark_summary.txt``, vllm bench serve at
    max concurrency 10 to 150, seven runs) was said as its first run alone ("max concurrency
    10, successful requests 500"). Where ``head`` (the first 64 KiB) is not the whole file, the
    runs and their settings are counted over ``path`` to its end, streamed a line at a time
    (:func:`_console_lines`): only for this count, never loaded whole."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") or not any(
        mark in head for mark in _BENCH_CONSOLE
    ):
        return None
    runs, values = _console_runs(
        [head] if path is None or len(head) < CONSOLE_HEAD else _console_lines(path)
    )
    said = [
        f"{name} {'/'.join(dict.fromkeys(values[name]))}" for name, _ in _BENCH_SAID if values[name]
    ]
    if runs > 1:  # runs one after another, tee'd to one file: each one's settings said
        said.insert(0, f"{runs} runs")
    return (
        "is a serving benchmark's console output (vllm bench serve, or SGLang's or "
        "TensorRT-LLM's benchmark_serving, as printed"
        + (f": {', '.join(said)}" if said else "")
        + "): its settings and summary, no request; "
        + (
            _BEFORE_SAVE_DETAILED
            if re.search(rb"\bNamespace\([^\n]*\bsave_result=", head)
            and b"save_detailed=" not in head
            else "rerun it with --save-result --save-detailed (SGLang's bench_serving: "
            "--output-file F --output-details) and pass the JSON it writes (docs/recordings.md)"
        )
    )


_BEFORE_SAVE_DETAILED = (
    "rerun it with --save-result and pass the JSON it writes (docs/recordings.md): the "
    "arguments it echoes (Namespace(... save_result=...)) have no save_detailed: a "
    "benchmark_serving.py from before vLLM PR #14879 (16 March 2025), or a copy of one, whose "
    "--save-result saved each request itself (it would refuse --save-detailed, which came "
    "with that PR)"
)
"""What a console of ``benchmark_serving.py`` from before ``--save-detailed`` is told: its
echoed arguments (``print(args)``, a ``Namespace(...)`` with ``save_result`` and no
``save_detailed``) show the script had no such flag (github.com/BennielAllan/benchmark aed2fec
``ppio/reasoning_result.txt``, a fork's ``bench_serve.py``, was told to rerun with
``--save-result --save-detailed``)."""


_LLMPERF_CONSOLE = (
    b"Results for token benchmark for ",
    b"\nNumber Of Completed Requests: ",
    b"\nCompleted Requests Per Minute: ",
)
"""What LLMPerf's ``token_benchmark_ray.py`` prints (github.com/ray-project/llmperf at f1d6bed,
``metrics_summary``: ``\\Results for token benchmark for {model} queried with the {llm_api}
api.`` before its per-metric quantiles, ``Number Of Completed Requests: N`` and ``Completed
Requests Per Minute: R`` after them), never a file it saves."""


def llmperf_console_refusal(head: bytes) -> str | None:
    """Why LLMPerf's console output (``python token_benchmark_ray.py ... > run.txt``) is no
    recording: it prints each metric's quantiles and the run's totals, no request; None for
    any other file."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"[") or not any(
        mark in head for mark in _LLMPERF_CONSOLE
    ):
        return None
    model = re.search(rb"Results for token benchmark for (\S+) queried with the (\S+) api", head)
    said = (
        f" for {model.group(1).decode('utf-8', 'replace')} through its "
        f"{model.group(2).decode('utf-8', 'replace')} client"
        if model
        else ""
    )
    return (
        f"is LLMPerf's console output (token_benchmark_ray.py, as printed{said}): each "
        "metric's quantiles and the run's totals, no request; the "
        "_individual_responses.json it saves with --results-dir lists no send time "
        "either, so its load cannot be replayed: record the run with a tool kvbudget "
        "reads (docs/recordings.md)"
    )


_MLPERF_NO_REQUEST = (
    "no request's own send, first token or end (LoadGen's summary, detail "
    "and accuracy logs time no request); record the system under load with a "
    "tool kvbudget reads (docs/recordings.md)"
)


_MLPERF_TALLY = re.compile(
    rb"(?:No warnings|1 warning|\d+ warnings) encountered(?: during test\.|\. See detailed log\.)"
    rb"\s+(?:No errors|1 ERROR|\d+ ERRORS) encountered(?: during test\.|\. See detailed log\.)"
)
"""The tally LoadGen writes at the end of every ``mlperf_log_summary.txt``
(github.com/mlcommons/inference 642e92fe ``loadgen/logging.cc``, ``AsyncLog::SetLogFiles``),
all such a file holds when it has no results section: github.com/jshim0978/MLPerf_local_test
8b504b52 ``official_mlperf/fresh_200_samples/mlperf_log_summary.txt`` (and 945088ab's
``accuracy_test_fp16/``) was read as a CSV whose 'prompt_tokens' column was to be mapped, "the
header has: No warnings encountered during test."."""


def mlperf_log_refusal(head: bytes) -> str | None:
    """Why an MLPerf inference LoadGen log is no recording (mlcommons/inference ``loadgen``:
    ``mlperf_log_summary.txt`` opens with a rule and ``MLPerf Results Summary``,
    ``mlperf_log_detail.txt`` is ``:::MLLOG {json}`` lines of settings and aggregates); None for
    any other file."""
    start = head.lstrip(b"\xef\xbb\xbf")
    if start.startswith(b":::MLLOG "):
        return (
            "is an MLPerf LoadGen detail log (mlperf_log_detail.txt): the run's settings and "
            "aggregates as :::MLLOG lines, " + _MLPERF_NO_REQUEST
        )
    if start.startswith(b"=") and b"MLPerf Results Summary" in start[:400]:
        scenario = re.search(rb"Scenario\s*:\s*(\w+)", start)
        said = f" of the {scenario.group(1).decode()} scenario" if scenario else ""
        return (
            f"is an MLPerf LoadGen summary (mlperf_log_summary.txt){said}: samples and "
            "tokens a second and latency percentiles, " + _MLPERF_NO_REQUEST
        )
    if _MLPERF_TALLY.fullmatch(start.strip()):
        return (
            "is an MLPerf LoadGen summary (mlperf_log_summary.txt) holding only its warning "
            "and error tally, no MLPerf Results Summary section, " + _MLPERF_NO_REQUEST
        )
    return None


def html_refusal(head: bytes) -> str | None:
    """Why an HTML page is no recording: GuideLLM's ``--output kind=html`` report (0.8.1
    ``benchmark/outputs/html.py``; its page titled "GuideLLM Benchmark Report"), ``vllm bench
    serve --plot-timeline``'s ``<result>.timeline.html`` (a plotly chart, vLLM 0.32.0
    ``benchmarks/plot.py``) or any other page is drawn for a browser; None for any other
    file."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:15].lower()
    if not start.startswith((b"<!doctype html", b"<html")):
        return None
    if b"GuideLLM" in head:
        return (
            "is a GuideLLM HTML report (--output kind=html): a page of the run's charts "
            "and aggregates for a browser; pass the same run's JSON or YAML report "
            "(--output kind=json,path=benchmarks.json), which lists each request"
        )
    return (
        "is an HTML page (a report or chart for a browser, such as vllm bench serve "
        "--plot-timeline's .timeline.html), not a recording; pass the load tool's own "
        "result file (docs/recordings.md)"
    )


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3.1)."""

SQLITE_REFUSAL = (
    "is an SQLite database with no result table of evalscope perf's (start_time, "
    "first_chunk_latency: its benchmark_data.db, which kvbudget reads), not a "
    "recording kvbudget reads; pass the load tool's own result file "
    "(docs/recordings.md)"
)


def csv_summary_refusal(first_line: bytes, name: str = "") -> str | None:
    """Why a CSV whose first line is ``first_line`` cannot be read as a recording: AIPerf's
    ``profile_export_aiperf.csv`` (and genai-perf's ``profile_export_genai_perf.csv``) is one row
    of statistics a metric (``Metric,avg,min,max,...``); llama-bench's ``-o csv`` a row a test
    (``avg_ts``); a serving benchmark's results flattened to a table, one row a run (their
    JSON keys as columns, ``mean_ttft_ms``, ``completed``: github.com/moguizhizi/learning_project
    ``benchmarks/output/qwen2_5_vl_72B/differ/*.csv`` at 9239dfc6, written beside each
    ``benchmark_serving.py`` JSON) holds no request either; LMBench's trace-replayer result has
    no TTFT (:data:`LMBENCH_RESULT`), LMCache's long-document QA rounds no token counts
    (:data:`LONG_DOC_QA_COLUMNS`); None for any other CSV. ``name``, the file's name, tells
    genai-perf's table from AIPerf's (their first lines are alike): genai-perf wrote no
    profile_export.jsonl to pass instead."""
    header = [h.strip().lower() for h in first_line.decode("utf-8", "replace").split(",")]
    if header[:2] == ["metric", "avg"] and "genai_perf" in name.lower():
        return (
            "is genai-perf's table of aggregates (profile_export_genai_perf.csv), one row "
            "a metric: no request; genai-perf's per-request file, perf_analyzer's "
            "profile_export.json, keeps no token counts either: rerun with AIPerf, "
            "genai-perf's successor, and pass its profile_export.jsonl"
        )
    if header[:2] == ["metric", "avg"]:
        return (
            "is a table of aggregates, one row a metric (AIPerf's "
            "profile_export_aiperf.csv, or genai-perf's profile_export_genai_perf.csv): no "
            "request; pass AIPerf's per-request profile_export.jsonl from the same run"
        )
    harness = vllm_benchmark_csv_refusal(header) or locust_csv_refusal(header)
    if harness:
        return harness
    if {"avg_ts", "n_prompt", "n_gen"} <= set(header):
        return _offline_refusal({"avg_ts": 0, "n_prompt": 0, "n_gen": 0})
    if (
        "mean_ttft_ms" in header
        and {"completed", "request_throughput"} & set(header)
        and not {"prompt_tokens", "ttft_s", "arrival_s"} & set(header)
    ):
        return (
            "is a table of serving-benchmark summaries, one row a run (vllm bench serve's "
            "or SGLang's bench_serving result keys as columns: mean_ttft_ms, "
            f"request_throughput...): aggregates only; {_DETAILED}"
        )
    if header[:3] == K6_CSV_HEADER:
        return f"is k6's --out csv output (one row a metric sample): {_K6_WHAT}"
    if header[:4] == LONG_DOC_QA_COLUMNS and not {"prompt_tokens", "output_tokens"} & set(header):
        return _LONG_DOC_QA
    if header == LMBENCH_RESULT:
        return (
            "is LMBench's trace-replayer result: its requests were not streamed, so it "
            "records each one's whole latency but no time to its first token, and kvbudget "
            "compares TTFT, TPOT and E2E; to simulate the load it offered, pass the trace it "
            "replayed to kvbudget simulate --trace"
        )
    return None
