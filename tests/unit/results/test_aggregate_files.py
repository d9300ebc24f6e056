"""Files of a run's aggregate figures from a tool kvbudget does not know are refused as such.

A JSON object of ``mean_ttft_ms`` / ``p99_ttft_ms`` / throughput keys was refused with "cannot
tell the recording format ...; pass a format (records, run, vllm-bench, ...)", as if a format
flag would read it; a CSV of one row a run (``concurrency, throughput, mean_ttft_ms, ...``)
with "missing column 'prompt_tokens' needed by the generic format". Neither said that the file
holds no request, nor what kvbudget needs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.excerpts import excerpt_copy

NEEDS = "not per-request records: kvbudget replays each request"


@pytest.mark.parametrize(
    "doc",
    [
        {
            "model": "llama",
            "concurrency": 8,
            "mean_ttft_ms": 45.2,
            "p99_ttft_ms": 120.1,
            "throughput_tok_s": 1500.2,
            "num_requests": 500,
        },
        {"ttft": {"mean": 0.045, "p50": 0.04, "p99": 0.12}, "num_requests": 500},
    ],
)
def test_a_json_object_of_aggregates_is_said_to_be_one(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert "holds aggregate figures (" in said and NEEDS in said
    assert "docs/recordings.md" in said and "pass a format" not in said


def test_a_csv_of_aggregate_rows_is_said_to_be_one(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text(
        "concurrency,throughput,mean_ttft_ms,p50_ttft_ms,p99_ttft_ms\n"
        "1,100.2,40.1,39.0,60.2\n8,700.5,55.3,50.1,120.0\n"
    )
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert "holds aggregate figures, one row a run or a metric (throughput, mean_ttft_ms" in said
    assert NEEDS in said and "prompt_tokens" in said and "missing column" not in said


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "x", "mean_ttft_ms": 1.0, "p99_ttft_ms": 2.0, "samples_ms": [0.1, 0.2]},
        {"name": "x", "mean_ttft_ms": 1.0, "max_tokens": 256},
    ],
)
def test_other_unknown_json_keeps_its_refusal(tmp_path: Path, doc: dict[str, Any]) -> None:
    # per-request lists beside the figures, or a single statistic: not said to be aggregates
    path = tmp_path / "other.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="cannot tell the recording format"):
        read_recording(path)


def test_a_per_request_csv_missing_a_column_keeps_its_refusal(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text(
        "arrival_s,output_tokens,ttft_s,e2e_s,mean_itl_s,p99_itl_s\n0.0,30,0.03,0.25,0.007,0.009\n"
    )
    with pytest.raises(TraceError, match="missing column 'prompt_tokens'"):
        read_recording(path)


def test_a_column_mapping_reads_the_file_as_the_user_named_it(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text(
        "start,p_in,n_out,ttft_mean,e2e_mean\n0.0,200,30,0.03,0.25\n0.1,200,30,0.03,0.25\n"
    )
    rec = read_recording(
        path,
        columns={
            "arrival_s": "start",
            "prompt_tokens": "p_in",
            "output_tokens": "n_out",
            "ttft_s": "ttft_mean",
            "e2e_s": "e2e_mean",
        },
    )
    assert len(rec) == 2


def test_a_csv_time_series_of_rates_is_said_to_be_one(tmp_path: Path) -> None:
    # bentoml/llm-bench's rows (6f31190, data/*.csv): one row each five seconds of a Locust run;
    # it was refused as "missing column 'prompt_tokens' needed by the generic format"
    path = tmp_path / "benchmark-openllm-user=1_time=120.0.csv"
    path.write_text(
        "time_elapsed,active_users,requests_per_second,total_requests,"
        "active_requests,cpu_utilization,gpu_utilization,gpu_memory_usage,"
        "response_head_latency,response_latency,response_tokens_per_second\n"
        "12,1,0.0,1,1,7.5,0.0,0.99,0,0,0.0\n"
        "17,1,3.4,20,1,8.7,87.0,0.99,0.0087,0.2545,68.0\n"
    )
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures, one row a time window (time_elapsed: a time series) "
        "(requests_per_second, response_tokens_per_second)"
    ) in said
    assert NEEDS in said and "missing column" not in said


@pytest.mark.parametrize("wrap", [True, False])
def test_per_request_results_of_no_known_tool_say_what_to_write(tmp_path: Path, wrap: bool) -> None:
    # a home-made benchmark's results (varad-more/inference-engine-benchmark-system cdb5e45,
    # results/*/single_request_latency_vllm_*.json): told "cannot tell the recording format;
    # pass a format (records, run, ...)", which none fits
    requests = [
        {
            "request_id": i,
            "prompt_len": 8,
            "success": True,
            "ttft_ms": 90.4 + i,
            "total_ms": 5260.8,
            "output_tokens": 128,
            "error": "",
        }
        for i in range(3)
    ]
    doc: object = (
        {
            "scenario_name": "single_request_latency",
            "requests": requests,
            "metrics": {"mean_ttft_ms": 90.0, "p99_ttft_ms": 99.0},
        }
        if wrap
        else requests
    )
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds 3 per-request result(s) in a layout of no tool kvbudget reads ("
        + ("under 'requests': " if wrap else "")
        + "ttft_ms, total_ms, request_id, ...)"  # both its measured times first
    ) in said
    assert "with no send time among their keys" in said and "generic records format" in said
    assert "pass a format" not in said
    requests[0]["start_time"] = 0.0  # a send time among the keys: not said missing
    path.write_text(json.dumps(requests))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "per-request result(s)" in str(err.value) and "no send time" not in str(err.value)


def _line_records(with_start: bool) -> list[dict[str, object]]:
    # the layout of a home-made SGLang bench wrapper's per-request lines (github.com/liqcui/
    # sglang-benchmark-tools 8d465f33, examples/logs/conc-32-standard__baseline.requests.jsonl:
    # no licence, so its keys only, with figures made here)
    rows: list[dict[str, object]] = [
        {
            "request_id": str(i),
            "input_len": 4096,
            "output_len": 2048,
            "ttft_ms": 700.0 + i,
            "tpot_ms": 9.0,
            "itl_ms": 10.0,
            "e2e_ms": 19345.0 + i,
            "status": "ok",
            "error": None,
        }
        for i in range(3)
    ]
    for i, row in enumerate(rows):
        if with_start:
            row["start_time"] = float(i)
    return rows


def test_per_request_lines_of_no_known_tool_say_what_to_write(tmp_path: Path) -> None:
    # one request a line: told "cannot tell the recording format (a JSON object of none of the
    # known tools ...); pass a format", though none fits
    path = tmp_path / "conc-32.requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _line_records(False)))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds per-request results, one a line, in a layout of no tool kvbudget reads "
        "(ttft_ms, tpot_ms, itl_ms, ...), with no send time among their keys"
    ) in said
    assert "generic records format" in said and "pass a format" not in said
    path.write_text("".join(json.dumps(r) + "\n" for r in _line_records(True)))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "one a line" in str(err.value) and "no send time" not in str(err.value)


def test_one_json_object_alone_keeps_its_refusal(tmp_path: Path) -> None:
    # a file of one object is not said to hold requests "one a line"
    path = tmp_path / "one.json"
    path.write_text(json.dumps(_line_records(False)[0]) + "\n")
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "cannot tell the recording format" in str(err.value)


def test_aggregates_two_objects_down_are_said_to_be_aggregates(tmp_path: Path) -> None:
    # the layout of vllm-project/production-stack 0b945e8 mock_benchmark_results.json (a
    # router benchmark's report: averages two objects down, lists of latencies without tokens),
    # told "cannot tell the recording format ...; pass a format", which none fits
    doc = {
        "timestamp": 1754149492.8,
        "sequential_vs_parallel": {
            "sequential": {"total_time": 3.7, "avg_latency": 0.74},
            "parallel": {"total_time": 0.55, "avg_latency": 0.45},
        },
        "cache_efficiency": {
            "standard": {"avg_latency": 1.43, "latencies": [1.36, 1.58]},
            "cache_speedup": 2.74,
        },
        "summary": {"parallel_speedup": 6.68},
    }
    path = tmp_path / "mock_benchmark_results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures (sequential_vs_parallel.sequential.avg_latency, "
        "sequential_vs_parallel.parallel.avg_latency, cache_efficiency.standard.avg_latency)"
    ) in said
    assert NEEDS in said and "pass a format" not in said


def test_per_request_timestamps_are_said_with_how_to_write_them(tmp_path: Path) -> None:
    # the layout of a home-made harness's results (github.com/maerory/vllm-bench 9c1f1d8,
    # results/20260531-080839-vllm-c16.json: no licence, so its keys only, figures made here):
    # each request's send, first-token and end timestamps, no latency key, so told "cannot
    # tell the recording format ...; pass a format", which none fits
    requests = [
        {
            "prompt_id": f"short_{i:02d}",
            "tier": "short",
            "prompt": "x",
            "prompt_tokens": 43,
            "output_tokens": 256,
            "output_text": "y",
            "t_request_sent": 1780215063.09 + i,
            "t_first_token": 1780215064.11 + i,
            "t_complete": 1780215068.03 + i,
            "token_arrival_times": [1.02, 1.15],
            "batch_id": 0,
            "batch_t_start": 1780215063.09,
            "batch_t_end": 1780215121.8,
            "finish_reason": "length",
        }
        for i in range(2)
    ]
    path = tmp_path / "20260531-080839-vllm-c16.json"
    path.write_text(
        json.dumps({"metadata": {"runner": "vllm", "concurrency": 16}, "results": requests})
    )
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds 2 per-request result(s) in a layout of no tool kvbudget reads (under "
        "'results': t_first_token, t_complete, prompt_id, ...)"
    ) in said
    assert "no send time" not in said and "pass a format" not in said
    assert "ttft_s and e2e_s are times from the send" in said


def test_a_llama_bench_wrappers_rates_are_said_to_be_aggregates(tmp_path: Path) -> None:
    # the layout of github.com/MMeffert/intel-llm-bench 057f2c2 results.jsonl (one line a
    # model and device: llama-bench's prompt and generation rates), told "cannot tell the
    # recording format ...; pass a format", which none fits
    rows = [
        {
            "name": "gemma-4-e4b",
            "quant": "Q4_K_M",
            "device": device,
            "status": "ok",
            "pp_tok_s": 796.4,
            "tg_tok_s": 46.9,
            "vram_mb": None,
            "error": None,
            "timestamp": "2026-08-13T18:29:00.547890Z",
        }
        for device in ("a770", "igpu")
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert "holds aggregate figures (pp_tok_s, tg_tok_s)" in said and NEEDS in said


# ROCm MAD's perf.csv (github.com/ROCm/MAD e162173 test_logs/perf_Kimi-K3.csv: a
# benchmark_serving.py run's figures, one row a metric, in its `performance` column): refused
# with "missing column 'prompt_tokens' needed by the generic format (the header has:
# hf_pipeline_tag, model, benchmark, ...)", as if a --column would map it. Rows in its layout,
# made up here.
def test_a_csv_of_one_row_a_metric_is_said_to_be_aggregates(tmp_path: Path) -> None:
    path = tmp_path / "perf_Kimi-K3.csv"
    cmd = '"python -m benchmark_serving --max-concurrency 1 --num-prompts 10 --save-result"'
    path.write_text(
        "hf_pipeline_tag,model,benchmark,tp,inp,out,kv_cache_dtype,num_prompts,"
        "max_concurrency,bs,cmd,performance,metric,unit\n"
        f",Kimi-K3,serving,8,8192,1024,fp8,10,1,,{cmd},68.2,throughput_tot,tok/sec\n"
        f",Kimi-K3,serving,8,8192,1024,fp8,10,1,,{cmd},529.0,median_ttft,ms\n"
    )
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures, one row a metric (its metric column names a figure, "
        "performance holds it" in said
    )
    assert NEEDS in said and "missing column" not in said


# LMCache's benchmarks/long_doc_qa/long_doc_qa.py --json-output summary: the query round's mean
# TTFT and each round's duration over its prompts; the published file is github.com/LMCache/
# LMCache 989cf451465c57d3f8c5e7d6718ee2cdb7b5ae0f benchmarks/long_doc_qa/async-20260723.json
# (Apache-2.0), as below; later versions add the run's settings and its warmup round's request
# ids. kvbudget told it "cannot tell the recording format ...; pass a format (records, run, ...)"
LMCACHE_LONG_DOC_QA = {
    "query_ttft_per_prompt": 8.241159355640411,
    "query_round_time_per_prompt": 0.9524147152900696,
    "warmup_round_time_per_prompt": 1.5416658520698547,
}


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"document_length": 10000, "num_documents": 8, "warmup_request_ids": ["r0", "r1", "r2"]},
    ],
)
def test_lmcache_long_doc_qa_averages_are_said_to_be_aggregates(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    path = tmp_path / "async-20260723.json"
    path.write_text(json.dumps({**LMCACHE_LONG_DOC_QA, **extra}) + "\n")
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "holds aggregate figures (query_ttft_per_prompt, query_round_time_per_prompt, " in str(
        err.value
    )
    assert NEEDS in str(err.value)


def test_per_request_lists_of_figures_are_not_aggregates(tmp_path: Path) -> None:
    # a list of numbers (or of objects) beside statistics is a tool's per-request list: the file
    # is not refused as aggregates (a list of names, as above, is no such list)
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"mean_ttft_ms": 1.0, "p99_ttft_ms": 2.0, "ttfts": [0.1, 0.2]}))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "holds aggregate figures" not in str(err.value)


def _point(cc: int, req_s: float, ttft_ms: float) -> dict[str, Any]:
    return {
        "cc": cc,
        "req_s": req_s,
        "input_tok_s": 87002.5,
        "ttft_mean_ms": ttft_ms,
        "ttft_p50_ms": ttft_ms,
        "ttft_p99_ms": ttft_ms + 4.1,
        "duration_s": 7.06,
        "requests_sent": 200,
        "requests_completed": 200,
        "errors": 0,
    }


def test_a_sweeps_points_in_lists_of_objects_are_said_to_be_aggregates(tmp_path: Path) -> None:
    # github.com/sgl-project/sglang fd67a1b benchmark/amd_mi350x_prefill/data/
    # gpt-oss-120b-quark-w4a8.json's layout (Apache-2.0; its notes and build cut): a sweep's
    # points under runs[].points[], each a concurrency's figures from bench_serving; kvbudget
    # told it "cannot tell the recording format ...; pass a format (records, run, ...)"
    doc = {
        "model": "gpt-oss-120b (Quark W4A8)",
        "tp": 1,
        "hardware": "MI350X gfx950",
        "notes": ["Optimal config only.", "Measurement windows are short."],
        "runs": [
            {
                "arm": "optimal-prefill-graph-fused-pad",
                "client_command": "python3 -m sglang.bench_serving --backend sglang ...",
                "page_size": 64,
                "points": [_point(1, 28.33, 35.15), _point(2, 32.45, 61.03)],
            },
            {"arm": "eager", "page_size": 64, "points": [_point(1, 20.1, 60.2)]},
        ],
    }
    path = tmp_path / "gpt-oss-120b-quark-w4a8.json"
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures (runs[0].points[0].req_s, runs[0].points[0].input_tok_s, " in said
    )
    assert NEEDS in said


# github.com/llm-serving-lab/vllm-benchmark 86449c9 runs/cost_test_clean_cost.json: a home-made
# harness's cost summary of one run, its keys (figures rounded, its note cut) as published.
# kvbudget told it "cannot tell the recording format ...; pass a format (records, run, ...)",
# none of which reads it: its rates over the run's hours, per dollar and per thousand tokens say
# it holds figures of the run, not of its requests
COST_SUMMARY = {
    "hardware_usd": 2000.0,
    "lifetime_years": 2.0,
    "hourly_hardware_usd": 0.1142,
    "electricity_per_kwh": 0.15,
    "power_sample_count": 59,
    "avg_gpu_power_watts": 12.73,
    "hourly_electricity_usd": 0.0019,
    "run_duration_s": 68.66,
    "total_output_tokens": 1588,
    "total_run_cost_usd": 0.0022,
    "cost_per_1k_tokens_usd": 0.0014,
    "tokens_per_dollar": 717383.09,
    "note": "GPU-only electricity cost",
}


def test_a_cost_summary_of_a_run_is_said_to_be_aggregates(tmp_path: Path) -> None:
    path = tmp_path / "cost_test_clean_cost.json"
    path.write_text(json.dumps(COST_SUMMARY, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert said.startswith(
        f"{path}: holds aggregate figures (hourly_hardware_usd, avg_gpu_power_watts, "
        "hourly_electricity_usd, ...), not per-request records"
    ), said
    assert "pass a format" not in said


def test_a_requests_time_per_token_is_not_a_rate_of_the_run(tmp_path: Path) -> None:
    # one request's TPOT (time_per_token_ms) beside a rate: a record, not the run's aggregates
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"id": "r1", "time_per_token_ms": 20.0, "tokens_per_sec": 50.0}))
    with pytest.raises(TraceError, match="cannot tell the recording format"):
        read_recording(path)


def _run_lines() -> str:
    """A harness's runs, one a JSON line, shaped as github.com/LottoLottoLotto/
    4x3090-llm-benchmarks bd22281 ``data/benchmarks.jsonl`` (no licence: reproduced, not
    copied): each run's configured ``prompt_tokens`` and ``gen_tokens`` beside its percentiles
    and rates."""
    runs = [
        {
            "run_id": f"vllm_BF16_tp4_c{c}",
            "engine": "vllm",
            "engine_version": "0.23.0",
            "tp": 4,
            "concurrency": c,
            "prompt_tokens": 512,
            "gen_tokens": 256,
            "output_tok_s": 35.6 * c,
            "req_s": 0.14 * c,
            "ttft_p50_ms": 534.78,
            "ttft_p99_ms": 632.89,
            "itl_p50_ms": 25.87,
            "tpot_p50_ms": None,
            "e2e_p99_ms": 7253.08,
        }
        for c in (1, 8)
    ]
    return "".join(json.dumps(r) + "\n" for r in runs)


def test_lines_of_runs_are_said_to_be_aggregates(tmp_path: Path) -> None:
    # validate and report told them "holds per-request results, one a line, ... with no send
    # time", trace convert to map output_tok_s (a rate) as each request's output_tokens
    path = tmp_path / "benchmarks.jsonl"
    path.write_text(_run_lines())
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert "holds aggregate figures, one line a run or a metric (ttft_p50_ms, ttft_p99_ms, " in said
    assert NEEDS in said and "per-request results" not in said
    for command in (
        ["validate", "--records", str(path)],
        ["report", str(path)],
        ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")],
    ):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, command
        assert "holds aggregate figures, one line a run" in result.output, command
        assert "output_tok_s;" not in result.output and "Traceback" not in result.output


def test_per_request_lines_with_rates_of_their_own_are_still_records(tmp_path: Path) -> None:
    # a request's own rates (no percentile among them) do not make it a run's aggregates
    rows = [
        {
            "arrival_s": float(i),
            "prompt_tokens": 100,
            "output_tokens": 20,
            "ttft_s": 0.05,
            "e2e_s": 0.5,
            "output_tokens_per_second": 44.4,
            "prefill_tok_s": 2000.0,
        }
        for i in range(3)
    ]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(read_recording(path).workload) == 3


def test_a_rate_or_another_canonical_column_is_not_guessed_as_a_token_count(
    tmp_path: Path,
) -> None:
    # the generic loader's guess of the column to map was output_tok_s (a rate), then, that
    # left out, prompt_tokens (the other count) as output_tokens
    path = tmp_path / "rates.csv"
    path.write_text("arrival_s,prompt_tokens,output_tok_s\n0,10,5.0\n")
    result = CliRunner().invoke(
        app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 2
    assert "missing column 'output_tokens'" in result.output
    assert "(--column output_tokens=COLUMN;" in result.output


def test_aggregates_three_objects_down_are_said_to_be_aggregates(tmp_path: Path) -> None:
    # a dashboard's data by model, then by concurrency, shaped as github.com/thienlng/
    # llm-bench-results-16-04 5c16239 benchmark_data.json (no licence: reproduced, not
    # copied), told "cannot tell the recording format ...; pass a format", which none fits
    run = {
        "successful_requests": 500,
        "req_throughput": 0.1,
        "ttft_mean_ms": 2121.99,
        "ttft_median_ms": 2227.24,
        "ttft_p99_ms": 5237.65,
        "tpot_mean_ms": 19.87,
    }
    doc = {
        "MiniMax-M2.7": {
            "full_name": "MiniMaxAI/MiniMax-M2.7-FP8",
            "gpu_count": 4,
            "ccu_levels": [1, 10],
            "data": {"1": run, "10": run},
        },
    }
    path = tmp_path / "benchmark_data.json"
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures (MiniMax-M2.7.data.1.req_throughput, "
        "MiniMax-M2.7.data.1.ttft_mean_ms, MiniMax-M2.7.data.1.ttft_median_ms, ...)"
    ) in said
    assert NEEDS in said and "pass a format" not in said


# github.com/rsevilla87/guidellm-results-parser (54a97206 README.md) writes with --verbose a JSON
# array: the run's summary first, then one document a request (its README's example, here as
# shown there). Told it "holds 3 per-request result(s) ... (ttft_mean_ms, ttft_p99_ms,
# metricName, ...)": the summary counted as a request, its keys shown as the requests'.
PARSED_VERBOSE = [
    {
        "metricName": "guidellmBenchmarkSummary",
        "uuid": "c054eaf6-7b10-4dd5-a462-fbc010f7b09d",
        "guidellm_version": "0.5.2",
        "timestamp": "2025-09-23T23:59:06.125779",
        "strategy": "constant",
        "rate": 10,
        "total_requests": 609,
        "successful_requests": 586,
        "prompt_tokens": 128,
        "output_tokens": 128,
        "backend_model": "Qwen/Qwen3-0.6B",
        "ttft_mean_ms": 1006.21,
        "ttft_p99_ms": 1019.42,
        "itl_mean_ms": 10.42,
    },
    {
        "metricName": "guidellmRequestResult",
        "timestamp": "2025-09-23T23:59:06.126977",
        "status": True,
        "request_latency_seconds": 2.331,
        "tokens_per_second": 108.09,
        "output_tokens_per_second": 54.91,
        "tpot_ms": 10.29,
        "itl_ms": 10.37,
        "ttft_ms": 1014.30,
        "uuid": "c054eaf6-7b10-4dd5-a462-fbc010f7b09d",
        "job_name": "interactive-chat",
        "sample": 0,
    },
    {
        "metricName": "guidellmRequestError",
        "timestamp": "2025-09-23T23:59:30.445123",
        "errored": True,
        "completed": False,
        "uuid": "c054eaf6-7b10-4dd5-a462-fbc010f7b09d",
        "job_name": "interactive-chat",
    },
]


def test_a_summary_ahead_of_the_requests_is_not_counted_as_one(tmp_path: Path) -> None:
    # the parser's own output is named (test_guidellm_results_parser_output_is_named); the same
    # layout without its metricName is a home-made summary-then-requests file
    path = tmp_path / "parsed_results.json"
    home_made = [{k: v for k, v in d.items() if k != "metricName"} for d in PARSED_VERBOSE]
    path.write_text(json.dumps(home_made, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds 3 JSON objects, the first a run's aggregate figures, the other 2 per-request "
        "result(s) in a layout of no tool kvbudget reads (request_latency_seconds, tpot_ms, "
    ) in said
    assert "ttft_mean_ms" not in said
    # a list of requests alone is counted as before
    path.write_text(json.dumps(PARSED_VERBOSE[1:]))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "holds 2 per-request result(s) in a layout" in str(err.value)


# rsevilla87/guidellm-results-parser (Apache-2.0) parses a GuideLLM report into figures for
# OpenSearch. Hand-made in its three layouts (guidellm_parser.py parse_benchmarks): the object
# committed as parsed_results.json at d6d69459 (benchmark_id, run_id, flat means and p99s); the
# list of d6d69459's README (its summary, then a request an item: ttft_ms, no token counts);
# the later metricName list (guidellmBenchmarkSummary alone without --verbose). Each was
# refused as aggregate figures or requests of "no tool kvbudget reads", to rewrite by hand,
# though the report it was parsed from is a GuideLLM report kvbudget reads.
PARSER_SUMMARY = {
    "total_requests": 30,
    "successful_requests": 28,
    "errored_requests": 0,
    "incomplete_requests": 2,
    "backend_model": "m",
    "prompt_tokens": 64,
    "output_tokens": 32,
    "ttft_mean_ms": 50.0,
    "ttft_p99_ms": 70.0,
    "itl_mean_ms": 5.0,
    "itl_p99_ms": 6.0,
    "throughput_mean_rps": 2.0,
    "time_per_output_token_mean_ms": 5.1,
    "time_per_output_token_p99_ms": 6.2,
}
PARSER_REQUEST = {
    "timestamp": "2025-10-01T10:00:00.250000",
    "errored": False,
    "completed": True,
    "request_latency_seconds": 0.21,
    "tokens_per_second": 457.0,
    "output_tokens_per_second": 152.0,
    "tpot_ms": 5.2,
    "itl_ms": 5.3,
    "ttft_ms": 52.0,
    "uuid": "run-1",
    "job_name": "chat",
}
PARSER = "is rsevilla87/guidellm-results-parser's output (guidellm_parser.py --output: the "
REPORT = (
    "pass that report instead (the file its --results read, benchmarks.json by default), "
    "which lists the run's requests"
)
PUBLISHED_REPORT = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "published"
    / "guidellm-results-parser-qwen3-0.6b-constant10-excerpt.json"
)


@pytest.mark.parametrize(
    ("doc", "requests"),
    [
        (PARSER_SUMMARY | {"benchmark_id": "b", "run_id": "r", "type": "generative_benchmark"}, 0),
        (
            [
                PARSER_SUMMARY | {"uuid": "run-1", "job_name": "chat"},
                PARSER_REQUEST,
                PARSER_REQUEST,
            ],
            2,
        ),
        (
            [
                {
                    "metricName": "guidellmBenchmarkSummary",
                    "uuid": "u",
                    "ttft_mean_ms": 1.0,
                    "ttft_p99_ms": 2.0,
                }
            ],
            0,
        ),
        (PARSED_VERBOSE, 2),
    ],
)
def test_guidellm_results_parser_output_is_named(tmp_path: Path, doc: Any, requests: int) -> None:
    path = tmp_path / "parsed_results.json"
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert PARSER in said and REPORT in said
    assert "aggregate figures of a GuideLLM report's first benchmark" in said
    held = f"then {requests} request(s) with their start and latencies but no token counts"
    assert (held in said) == bool(requests)
    assert NEEDS not in said and "no tool kvbudget reads" not in said
    # the report it points to is read: the repository's own example_output/benchmarks.json
    assert read_recording(excerpt_copy(PUBLISHED_REPORT, tmp_path)).tool == "guidellm"


def _decode_sweep() -> list[dict[str, object]]:
    """A harness's sweep written as one JSON array, shaped as github.com/sfxnz/
    DeepSeek-V4.1-Flash-EXL3-vLLM-2x-DGX-Spark 2d2a4d9 ``results/2026-09-24-review/campaign/
    s2-old-fresh/04-bench-decode.summary.json`` (no licence found: reproduced, not copied):
    one object a phase and concurrency, its medians and a TTFT percentile."""
    return [
        {
            "phase": phase,
            "concurrency": c,
            "median_decode_tok_s": 37.1 / c,
            "median_agg_tok_s": 37.1,
            "median_run_acceptance_len": 2.53,
            "median_ms_per_step": 67.8 * c,
            "post_eos_fraction": 0.57,
            "ttft_s_p50": 0.263,
            "natural_completion_tokens": 86,
        }
        for phase in ("prose", "structured")
        for c in (1, 2)
    ]


def test_a_json_array_of_runs_is_said_to_be_aggregates(tmp_path: Path) -> None:
    # validate and report told it "holds 4 per-request result(s) in a layout of no tool
    # kvbudget reads (ttft_s_p50, phase, concurrency, ...), with no send time among their keys"
    path = tmp_path / "04-bench-decode.summary.json"
    path.write_text(json.dumps(_decode_sweep(), indent=1))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds aggregate figures, one JSON object a run (median_decode_tok_s, "
        "median_agg_tok_s, median_run_acceptance_len, ...)"
    ) in said
    assert NEEDS in said and "per-request result" not in said
    result = CliRunner().invoke(app, ["validate", "--records", str(path)])
    assert result.exit_code == 2 and "one JSON object a run" in result.output
    assert "Traceback" not in result.output
    # one object of requests among them (no summary of its own): not a list of runs
    requests = [{"ttft_ms": 90.0 + i, "total_ms": 5260.8, "prompt_len": 8} for i in range(2)]
    path.write_text(json.dumps([*_decode_sweep()[:1], *requests]))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "one JSON object a run" not in str(err.value)


def _smoke_results() -> dict[str, object]:
    """A home-made smoke test's per-request results, shaped as github.com/coolbho3k/
    DeepSeek-v4.1-Flash-2x-DGX-Spark 1c1c7eb ``release/experimental/nvfp4_kv/
    serving-results.json`` (no licence found: reproduced, not copied): each test's answer,
    its time to the first content and its whole time in seconds, and the server's usage."""
    tests = [
        ("arithmetic", "323", 0.332, 0.859, 18, 2),
        ("long_prefill_retrieval", "AMBER-731", 5.815, 5.995, 6036, 5),
        ("concurrent_0", "30", 0.649, 0.806, 17, 2),
    ]
    return {
        "mode": "nvfp4_4over6",
        "ranks": 2,
        "status": "pass",
        "tests": [
            {
                "content": content,
                "finish_reason": "stop",
                "first_content_seconds": first,
                "name": name,
                "passed": True,
                "reasoning": "",
                "total_seconds": total,
                "usage": {
                    "completion_tokens": out,
                    "completion_tokens_details": {"reasoning_tokens": 0},
                    "prompt_tokens": prompt,
                    "total_tokens": prompt + out,
                },
            }
            for name, content, first, total, prompt, out in tests
        ],
        "validation_date": "2026-09-22",
    }


def test_timed_results_with_a_content_key_are_not_called_a_dataset(tmp_path: Path) -> None:
    # validate told it "is a load tool's input dataset, 3 prompt(s) to send (under 'tests':
    # content, finish_reason, first_content_seconds, ...) ... not a recording: no request's send
    # or measured time is in it", though each holds its time to first content and its whole time
    path = tmp_path / "serving-results.json"
    path.write_text(json.dumps(_smoke_results(), indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds 3 per-request result(s) in a layout of no tool kvbudget reads (under 'tests': "
        "first_content_seconds, total_seconds, content, ...), with no send time among their keys"
    ) in said
    assert "input dataset" not in said and "measured time is in it" not in said
    assert "timestamps less the send's" not in said  # durations, not timestamps
    result = CliRunner().invoke(app, ["validate", "--records", str(path)])
    assert result.exit_code == 2 and "per-request result(s)" in result.output
    # the same prompts without their times are still a dataset
    untimed = _smoke_results()
    untimed["tests"] = [
        {k: v for k, v in t.items() if not k.endswith("_seconds")}
        for t in untimed["tests"]  # type: ignore[attr-defined]
    ]
    path.write_text(json.dumps(untimed))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "is a load tool's input dataset, 3 prompt(s) to send" in str(err.value)


def _harness_cases() -> dict[str, object]:
    """A home-made harness's run, shaped as github.com/jodyalbritton/dgx-spark-model-bench
    125e6fb ``results/2026-09-10-baseline/raw/throughput-glm53-flash-exl3-r1.json`` (no
    licence found: reproduced, not copied): its summary by arm, then one case a request, each
    with its TTFT, duration and token counts beside its own decode rate and acceptance."""

    def case(arm: str, prompt: int, out: int, ttft_ms: int, duration_ms: int) -> dict[str, object]:
        return {
            "ok": True,
            "seq": 1,
            "max_tokens": 900,
            "acceptance": {"drafts": 262, "accepted_tokens": 640, "acceptance_rate": 0.349},
            "prompt_tokens": prompt,
            "cached_tokens": 0,
            "completion_tokens": out,
            "duration_ms": duration_ms,
            "decode_tok_s": 30.71,
            "ttft_ms": ttft_ms,
            "finish_reason": "length",
            "arm": arm,
            "prefill_tok_s": 836.4,
        }

    return {
        "label": "glm53-flash-exl3-r1",
        "kind": "throughput",
        "summary": {
            "failed": 0,
            "by_arm": {"ingest": {"n": 3, "decode_tok_s": 29.84, "prefill_tok_s": 974.1}},
        },
        "cases": [
            case("synthetic", 1222, 900, 1461, 30736),
            case("json_free", 61, 711, 389, 31499),
            case("prose", 31, 900, 270, 34107),
        ],
    }


def test_requests_with_rates_of_their_own_are_not_called_aggregates(tmp_path: Path) -> None:
    # validate told it "holds aggregate figures (cases[0].decode_tok_s, cases[0].prefill_tok_s,
    # summary.by_arm.ingest.decode_tok_s, ...), not per-request records"
    path = tmp_path / "throughput-glm53-flash-exl3-r1.json"
    path.write_text(json.dumps(_harness_cases(), indent=2))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        "holds 3 per-request result(s) in a layout of no tool kvbudget reads (under 'cases': "
        "duration_ms, ttft_ms, ok, ...), with no send time among their keys"
    ) in said
    assert "aggregate figures" not in said
    # its summary alone is still aggregate figures
    path.write_text(json.dumps({k: v for k, v in _harness_cases().items() if k != "cases"}))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "holds aggregate figures (summary.by_arm.ingest.decode_tok_s" in str(err.value)
