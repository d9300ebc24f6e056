"""Benchmark plans given for results, named: vLLM's performance-benchmark test definitions.

vLLM's ``.buildkite/performance-benchmarks/scripts/run-performance-benchmarks.sh``
(github.com/vllm-project/vllm at 01e4fce0; ``.buildkite/nightly-benchmarks/`` before) runs the
tests a JSON file lists: ``serving-tests*.json`` a list of ``{"test_name": "serving_...",
"server_parameters", "client_parameters", "qps_list", "max_concurrency_list",
"server_environment_variables"}`` (or ``{"defaults": {...}, "tests": [...]}``, each test
merged over the defaults), ``latency-tests*.json`` and ``throughput-tests*.json`` lists of
``{"test_name", "parameters", "environment_variables"}``. It saves a serving test's ``vllm bench
serve --save-result`` result as ``<test_name>_qps_<qps>_concurrency_<c>.json`` in its results
folder (``<test_name>_qps_<qps>.json`` in the nightly script), without ``--save-detailed``
unless the client parameters ask it (``"save_detailed": ""``); a latency or throughput test's
``vllm bench latency``/``throughput --output-json`` as ``<test_name>.json``. The same files are
kept by vllm-project/vllm-ascend (``benchmarks/tests/``) and pytorch/pytorch-integration-testing
(``vllm-benchmarks/benchmarks/<device>/``).

One of them (pytorch-integration-testing 06dce126, ``vllm-benchmarks/benchmarks/hpu/serving-tests-
hpu.json``) given to ``validate --records`` was told "cannot tell the recording format (a JSON
list that is not inference-perf's per_request_lifecycle_metrics.json)", and ``trace convert``
sent it to ``validate --records`` as a load tool's result.

vLLM's nightly comparison of engines (``.buildkite/nightly-benchmarks/scripts/run-nightly-
benchmarks.sh`` at c0efaf9f) keeps two more: ``nightly-tests.json``, tests of
``{"test_name", "qps_list", "common_parameters", "<engine>_server_parameters",
"<engine>_client_parameters"}`` that ``run_serving_tests`` runs against the container's engine
(vLLM, SGLang, TGI, TensorRT-LLM or lmdeploy) with ``vllm bench serve --save-result --result-dir
results/ --result-filename <engine>_<test_name>_qps_<qps>.json``, and ``genai-perf-tests.json``,
whose tests (``genai_perf_input_parameters``) ``run_genai_perf_tests`` runs with ``genai-perf
profile`` and no output folder, its ``artifacts/`` then moved into ``results/``. Both were said
to be what run-performance-benchmarks.sh runs, the second as if it saved vllm bench serve
results (github.com/ddps-lab/vllm-disaggregation 6007776, a fork that keeps both files).

vllm-project/tpu-inference's TPU benchmarks keep theirs as ``{"global_env": {...},
"benchmark_cases": [{"case_name", "env", "server_command_options": {"command_type":
"vllm_serve", "args": {...}}, "client_command_options": {"command_type": "vllm_bench_serve",
"args": {...}}}]}`` (``.buildkite/benchmark/cases/``): ``.buildkite/benchmark/scripts/
parser_case.py`` (at 019afc23, ``main()``'s ``data.get("benchmark_cases")``) builds each
command from its ``command_type`` (``CMD_MAP``, lines 20-25) and its ``args``, a true flag as
``--key`` (``build_command``, lines 94-110), and ``run_bm.sh`` (at 00d41e3c, ``run_benchmark()``)
writes what ``vllm bench serve`` printed to ``temp_logs/bm_log.txt`` and reads its request
throughput and P99 E2EL from it: no file of requests unless the case's client args ask it. One
of them (``cases/daily/gpt_oss_120b.json``) was told "cannot tell the recording format (a
JSON object of none of the known tools ...); pass a format", which none fits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_SERVING_KEYS = frozenset({"server_parameters", "client_parameters", "qps_list"})
_OFFLINE_KEYS = frozenset({"parameters"})


def _tests(doc: Any) -> list[Mapping[str, Any]]:
    """The test definitions ``doc`` lists (a list of them, or ``{"tests": [...]}``), each a
    mapping with a ``test_name``; empty for anything else."""
    tests = doc.get("tests") if isinstance(doc, Mapping) and "defaults" in doc else doc
    if not isinstance(tests, list) or not tests:
        return []
    if not all(isinstance(t, Mapping) and isinstance(t.get("test_name"), str) for t in tests):
        return []
    return tests


def _tpu_cases(doc: Any) -> list[Mapping[str, Any]]:
    """tpu-inference's benchmark cases ``doc`` lists (its ``benchmark_cases``, each a mapping
    with a ``case_name`` and a server's or client's ``command_type``); empty for anything else."""
    cases = doc.get("benchmark_cases") if isinstance(doc, Mapping) else None
    if not isinstance(cases, list) or not cases:
        return []
    if not all(
        isinstance(c, Mapping)
        and isinstance(c.get("case_name"), str)
        and any(
            isinstance(c.get(side), Mapping) and "command_type" in c[side]
            for side in ("server_command_options", "client_command_options")
        )
        for c in cases
    ):
        return []
    return cases


def _tpu_plan_refusal(cases: list[Mapping[str, Any]]) -> str:
    names = ", ".join(str(c["case_name"]) for c in cases[:3]) + (", ..." if len(cases) > 3 else "")
    return (
        f"is a list of tpu-inference's benchmark cases, what its .buildkite/benchmark/scripts/"
        f"run_bm.sh runs through parser_case.py ({len(cases)}: {names}): each case's vllm serve "
        "and vllm bench serve arguments, settings, no result; run_bm.sh keeps what vllm bench "
        "serve printed (temp_logs/bm_log.txt, aggregates only): to replay a case, run it with "
        '"save-result": true and "save-detailed": true in its client_command_options args '
        "(passed as --save-result --save-detailed) and pass the JSON vllm bench serve writes, "
        "which lists each request"
    )


def benchmark_plan_refusal(doc: Any) -> str | None:
    """Why a file of vLLM's performance-benchmark test definitions (or tpu-inference's benchmark
    cases) is no recording (settings to run, no result), naming the result files its script
    writes; None for anything else."""
    cases = _tpu_cases(doc)
    if cases:
        return _tpu_plan_refusal(cases)
    tests = _tests(doc)
    defaults = doc.get("defaults") if isinstance(doc, Mapping) else None
    keys = set(defaults) if isinstance(defaults, Mapping) else set()
    for test in tests:
        keys |= set(test)
    serving = bool(keys & _SERVING_KEYS)
    if not tests or not (serving or keys & _OFFLINE_KEYS):
        return None
    names = ", ".join(str(t["test_name"]) for t in tests[:3]) + (", ..." if len(tests) > 3 else "")
    if "common_parameters" in keys:  # run-nightly-benchmarks.sh's, each engine's parameters
        return _nightly_refusal(f"({len(tests)}: {names})", "genai_perf_input_parameters" in keys)
    plan = (
        f"is a list of vLLM's performance-benchmark tests, what its .buildkite/performance-"
        f"benchmarks/scripts/run-performance-benchmarks.sh runs ({len(tests)}: {names}): "
        "settings, no result; "
    )
    if serving:
        return plan + (
            "the script saves each serving run's vllm bench serve result as "
            "<test_name>_qps_<qps>_concurrency_<c>.json (<test_name>_qps_<qps>.json in the "
            'nightly script) in its results folder: pass one saved with --save-detailed ("save_'
            'detailed": "" in the test\'s client_parameters), which lists each request'
        )
    return plan + (
        "its latency and throughput tests run the engine offline (vllm bench latency or "
        "throughput --output-json <test_name>.json), no request sent to a server, so no load "
        "to replay; record a served run (vllm bench serve --save-result --save-detailed)"
    )


def _nightly_refusal(listed: str, genai_perf: bool) -> str:
    plan = (
        f"is a list of vLLM's nightly benchmark tests, what its .buildkite/nightly-benchmarks/"
        f"scripts/run-nightly-benchmarks.sh runs {listed}: settings, no result; "
    )
    if genai_perf:
        return plan + (
            "it runs these with genai-perf profile (no vllm bench serve), whose artifacts it "
            "moves into results/artifacts/: genai-perf's files keep no token count a request "
            "(its profile_export.json: timestamps and text); record the load with vllm bench "
            "serve --save-result --save-detailed or AIPerf (profile_export.jsonl) instead"
        )
    return plan + (
        "it saves each run's vllm bench serve result, against whichever engine the container "
        "serves (vLLM, SGLang, TGI, TensorRT-LLM, lmdeploy), as <engine>_<test_name>_qps_<qps>"
        ".json in results/, without --save-detailed unless the test's <engine>_client_parameters "
        'ask it ("save_detailed": ""): pass one saved so, which lists each request'
    )
