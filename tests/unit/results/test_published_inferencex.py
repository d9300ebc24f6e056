"""SemiAnalysisAI/InferenceX (formerly InferenceMAX) result rows, as people publish them.

github.com/Jacob0226/SGLang-benchmarks Agentic/archive/amd_GLM-5.3-Flash-Quark-MXFP4/.../
glm5.3flash_tp4_conc1_kvnone_spec-mtp_..._conc1_local-mi355x.json at cadb08f (no licence: the
rows below are written by hand with the keys InferenceX's own source writes, Apache-2.0,
SemiAnalysisAI/InferenceX at 843c625: utils/process_result.py and
utils/agentic/aggregation/process_agentic_result.py ``build_agg``) got "cannot tell the
recording format ... pass a format", as if a format flag could read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

AGENTIC = {"hw": "mi355x", "conc": 1, "model": "amd/GLM-5.3-Flash-Quark-MXFP4",
           "infmax_model_prefix": "glm5.3flash", "framework": "sglang", "precision": "fp4",
           "spec_decoding": "mtp", "disagg": False, "scenario_type": "agentic-coding",
           "is_multinode": False, "num_gpus": 4, "tp": 4, "ep": 1, "dp_attention": "false",
           "num_requests_total": 289, "num_requests_successful": 277,
           "request_accounting": {"records_total": 289, "records_profiled": 277,
                                  "records_warmup_dropped": 11, "records_error_dropped": 12},
           "request_metrics": {"latency": {"ttft": {"mean": 1.11733, "p50": 1.08186}}},
           "kv_cache_pool_tokens": 11508608}
FIXED = {"hw": "b200", "conc": 4, "model": "Qwen/Qwen3.5-397B-A17B",
         "infmax_model_prefix": "qwen3.5", "framework": "sglang", "precision": "bf16",
         "spec_decoding": "none", "disagg": False, "isl": 8192, "osl": 1024,
         "is_multinode": False, "tp": 8, "ep": 1, "dp_attention": "false",
         "tput_per_gpu": 1234.5, "output_tput_per_gpu": 140.2, "input_tput_per_gpu": 1094.3,
         "mean_ttft": 0.512, "median_ttft": 0.498, "mean_tpot": 0.0123, "mean_intvty": 81.3}


def _refusal(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "agg_result.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    return str(info.value)


def test_an_agentic_row_names_the_aiperf_file_it_came_from(tmp_path: Path) -> None:
    said = _refusal(tmp_path, AGENTIC)
    assert "is an InferenceX (formerly InferenceMAX) result row (model " \
        "amd/GLM-5.3-Flash-Quark-MXFP4, hw mi355x, tp 4, ep 1, conc 1; its agentic" in said
    assert "pass the AIPerf profile_export.jsonl it was made from" in said
    assert "cannot tell" not in said


def test_a_fixed_length_row_says_its_result_needs_save_detailed(tmp_path: Path) -> None:
    said = _refusal(tmp_path, FIXED)
    assert "utils/process_result.py" in said and "rerun it with --save-detailed" in said
    said = _refusal(tmp_path, [FIXED, {**FIXED, "conc": 8}])  # the rows collected in a list
    assert said.split(": ", 1)[1].startswith("is a list of 2 rows; the first an InferenceX")


def test_its_raw_result_without_save_detailed_says_it_keeps_only_the_lengths(
        tmp_path: Path) -> None:
    """InferenceX's benchmark_serving.py (its PR #1705, June 2026) keeps ``input_lens`` and
    ``output_lens`` in a result saved without --save-detailed, and drops the times; it was
    refused as one "without per-request data", which the lengths beside it belie."""
    doc = {"date": "20260610-101010", "backend": "vllm", "model_id": "deepseek-ai/DeepSeek-R1",
           "tokenizer_id": "deepseek-ai/DeepSeek-R1", "num_prompts": 2, "request_rate": "inf",
           "burstiness": 1.0, "max_concurrency": 2, "duration": 4.0, "completed": 2,
           "total_input_tokens": 2000, "total_output_tokens": 200, "request_throughput": 0.5,
           "mean_ttft_ms": 100.0, "median_ttft_ms": 100.0, "p99_ttft_ms": 120.0,
           "mean_tpot_ms": 20.0, "input_lens": [1000, 1000], "output_lens": [100, 100]}
    said = _refusal(tmp_path, doc)
    # said of the whole file, not put to the field it lacks ("field 'ttfts': is a ...")
    assert ".json: is a vllm bench serve result that keeps each request's lengths " \
        "(input_lens, output_lens) but not its times (ttfts, itls: saved only with " \
        "--save-detailed)" in said
