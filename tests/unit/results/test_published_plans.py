"""vLLM's performance-benchmark test definitions given for results: named, with the files their
script writes (results/recorded_plans.py cites the script).

The shapes are those of github.com/pytorch/pytorch-integration-testing 06dce126
``vllm-benchmarks/benchmarks/hpu/serving-tests-hpu.json`` (a list of serving tests), vLLM's
``.buildkite/performance-benchmarks/tests/`` files with ``defaults`` and ``tests`` (the layout
run-performance-benchmarks.sh merges) and vllm-project/vllm-ascend's
``benchmarks/tests/latency-tests.json``; written here, not copied. The first got "cannot tell
the recording format (a JSON list that is not inference-perf's per_request_lifecycle_metrics
.json)" from validate --records and, from trace convert, the advice to pass it to validate
--records as a load tool's result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

SERVING = {
    "test_name": "serving_mixtral8x7B_tp2_sharegpt",
    "qps_list": [1, 4, 16, "inf"],
    "server_environment_variables": {"PT_HPU_LAZY_MODE": 1},
    "server_parameters": {
        "model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "tensor_parallel_size": 2,
    },
    "client_parameters": {
        "model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "backend": "vllm",
        "dataset_name": "sharegpt",
        "num_prompts": 200,
    },
}


def refusal(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_recording(path)
    return str(info.value)


def test_a_list_of_serving_tests_is_named_with_the_results_its_script_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "serving-tests-hpu.json"
    path.write_text(json.dumps([SERVING], indent=4))
    said = refusal(path)
    assert said.startswith(f"{path}: is a list of vLLM's performance-benchmark tests, "), said
    assert "(1: serving_mixtral8x7B_tp2_sharegpt)" in said
    assert "<test_name>_qps_<qps>_concurrency_<c>.json" in said and "--save-detailed" in said
    with pytest.raises(TraceError, match="performance-benchmark tests"):
        detect_recording_format(path, usage="kvbudget trace convert {} --out t.csv")


def test_defaults_and_tests_are_named_too(tmp_path: Path) -> None:
    path = tmp_path / "serving-tests.json"
    tests = [
        {"test_name": f"serving_llama8B_tp1_{n}", "client_parameters": {"num_prompts": n}}
        for n in (100, 200, 300, 400)
    ]
    path.write_text(
        json.dumps({"defaults": {"qps_list": ["inf"], "server_parameters": {}}, "tests": tests})
    )
    said = refusal(path)
    assert (
        "(4: serving_llama8B_tp1_100, serving_llama8B_tp1_200, serving_llama8B_tp1_300, ...)"
    ) in said, said


def test_offline_tests_are_told_there_is_no_load(tmp_path: Path) -> None:
    path = tmp_path / "latency-tests.json"
    path.write_text(
        json.dumps(
            [
                {
                    "test_name": "latency_qwen3_8B_tp1",
                    "parameters": {
                        "model": "Qwen/Qwen3-8B",
                        "tensor_parallel_size": 1,
                        "num_iters": 15,
                    },
                }
            ]
        )
    )
    said = refusal(path)
    assert "run the engine offline" in said and "no load to replay" in said, said


def test_other_lists_named_by_test_are_not_plans(tmp_path: Path) -> None:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"test_name": "a", "score": 1}]))
    assert "performance-benchmark" not in refusal(path)


TPU_CASES = (
    Path(__file__).parents[2]
    / "fixtures"
    / "recordings"
    / "published"
    / "tpu-inference-gpt-oss-120b-cases-excerpt.json"
)
"""vllm-project/tpu-inference's ``.buildkite/benchmark/cases/daily/gpt_oss_120b.json`` (Apache-2.0),
its ``global_env`` and 2 of its 5 cases (tests/fixtures/recordings/published/README.md): each a
``vllm serve`` and a ``vllm bench serve`` command's arguments, which its run_bm.sh runs."""


def test_tpu_inferences_benchmark_cases_are_named() -> None:
    # it was told "cannot tell the recording format (a JSON object of none of the known tools
    # nor a record of the generic format); pass a format", which none fits
    said = refusal(TPU_CASES)
    assert said.startswith(f"{TPU_CASES}: is a list of tpu-inference's benchmark cases"), said
    assert "(2: gpt-oss-120b-dataset_random-inlen_1024-outlen_8192-C1, " in said
    assert "temp_logs/bm_log.txt, aggregates only" in said
    assert '"save-result": true and "save-detailed": true' in said
    assert "pass a format" not in said
    with pytest.raises(TraceError, match="tpu-inference's benchmark cases"):
        detect_recording_format(TPU_CASES, usage="kvbudget trace convert {} --out t.csv")


def test_other_lists_of_cases_are_not_tpu_plans(tmp_path: Path) -> None:
    # named cases with no command of a server or client: no plan of tpu-inference's
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"benchmark_cases": [{"case_name": "a", "score": 1}]}))
    assert "tpu-inference" not in refusal(path)


NIGHTLY = {
    "test_name": "llama8B_tp1_sharegpt",
    "qps_list": [4, 8, 16, 32, "inf"],
    "common_parameters": {
        "model": "meta-llama/Meta-Llama-3-8B-Instruct",
        "tp": 1,
        "dataset_name": "sharegpt",
        "num_prompts": 500,
        "port": 8000,
        "reuse_server": False,
    },
    "vllm_server_parameters": {"dtype": "bfloat16"},
    "vllm_client_parameters": {},
    "sglang_server_parameters": {"dtype": "bfloat16"},
    "sglang_client_parameters": {},
}
"""A test of vLLM's nightly-tests.json, its shape as run-nightly-benchmarks.sh (vLLM c0efaf9f)
reads it and as github.com/ddps-lab/vllm-disaggregation 6007776 keeps it; written here."""

GENAI_PERF = {
    "test_name": "llama8B_tp1_genai_perf",
    "qps_list": [4, 8, 16, 32],
    "common_parameters": {
        "model": "meta-llama/Meta-Llama-3-8B-Instruct",
        "tp": 1,
        "port": 8000,
        "num_prompts": 500,
        "reuse_server": False,
    },
    "vllm_server_parameters": {"gpu_memory_utilization": 0.9, "max_num_seqs": 512},
    "genai_perf_input_parameters": {},
}
"""A test of vLLM's genai-perf-tests.json (the same sources): run with genai-perf profile."""


def test_nightly_tests_are_named_with_each_engines_result_file(tmp_path: Path) -> None:
    # it was said to be what run-performance-benchmarks.sh runs, its results named without
    # the engine run-nightly-benchmarks.sh puts first
    path = tmp_path / "nightly-tests.json"
    path.write_text(json.dumps([NIGHTLY], indent=4))
    said = refusal(path)
    assert said.startswith(
        f"{path}: is a list of vLLM's nightly benchmark tests, what its "
        ".buildkite/nightly-benchmarks/scripts/run-nightly-benchmarks.sh "
        "runs (1: llama8B_tp1_sharegpt)"
    ), said
    assert "<engine>_<test_name>_qps_<qps>.json in results/" in said
    assert "run-performance-benchmarks.sh" not in said and "genai-perf" not in said


def test_genai_perf_tests_are_not_said_to_save_vllm_bench_serve_results(tmp_path: Path) -> None:
    # they were said to save "each serving run's vllm bench serve result as <test_name>_qps_
    # <qps>_concurrency_<c>.json" and told to pass one saved with --save-detailed
    path = tmp_path / "genai-perf-tests.json"
    path.write_text(json.dumps([GENAI_PERF], indent=4))
    said = refusal(path)
    assert "(1: llama8B_tp1_genai_perf)" in said, said
    assert "runs these with genai-perf profile (no vllm bench serve)" in said
    assert "results/artifacts/" in said and "_concurrency_<c>.json" not in said
