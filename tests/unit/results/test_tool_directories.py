"""A load tool's output folder passed to ``--records`` where one of its files is meant: named
with the file to pass, not refused as "not a run directory (requests.parquet is missing)",
which named neither the tool nor the file. The folders are laid out as the tools write them
(the fixtures the real tools made, copied in)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "recordings"


def refusal(path: Path) -> str:
    with pytest.raises(TraceError) as caught:
        read_recording(path)
    text = str(caught.value)
    assert "\n" not in text and "requests.parquet is missing" not in text, text
    return text


def test_aiperf_artifact_directory_names_its_per_request_file(tmp_path: Path) -> None:
    # AIPerf 0.13.0's own artifact directory (inputs.json, profile_export.jsonl,
    # profile_export_aiperf.json), one of a sweep's under artifacts/
    run = tmp_path / "artifacts" / "tiny-openai-chat-rate8"
    shutil.copytree(FIXTURES / "aiperf-0.13.0" / "prefix2x16_rate8", run)
    text = refusal(run)
    assert "AIPerf" in text and f"--records {run / 'profile_export.jsonl'}" in text
    # the folder above a sweep's runs: each run named, one to pass
    text = refusal(tmp_path / "artifacts")
    assert "1 AIPerf run(s)" in text and "tiny-openai-chat-rate8/profile_export.jsonl" \
        in text


def test_inference_perf_report_directory_of_summaries_says_how_to_get_requests(
        tmp_path: Path) -> None:
    # github.com/bnayahu/inference-perf-agentic demos/kubecon-na-2025/vllm/results/ at 66daf74
    # (as kubernetes-sigs/inference-perf's own demos): stage_0..6_lifecycle_metrics.json,
    # summary_lifecycle_metrics.json and the Prometheus summaries, no per-request file
    for name in ("stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json",
                 "summary_lifecycle_metrics.json", "stage_0_prometheus_metrics.json"):
        (tmp_path / name).write_text('{"load_summary": {}, "successes": {}}')
    text = refusal(tmp_path)
    assert "inference-perf" in text and "aggregates only" in text
    assert "report.request_lifecycle.per_request: true" in text
    # with the per-request file beside them, that file is named
    shutil.copy(FIXTURES / "inference-perf-0.7.0" / "per_request_lifecycle_metrics.json",
                tmp_path)
    assert f"--records {tmp_path / 'per_request_lifecycle_metrics.json'}" in refusal(tmp_path)


def test_a_folder_of_result_files_names_them(tmp_path: Path) -> None:
    # github.com/simon-mo/R1-Benchmark saved-results/v0.8.4/deepseek-r1/h200/2025-04-16/
    # deepseek-r1-h200-04162025/ at d538cdc: 14 vllm benchmark_serving.py results
    for name in ("sgl-1000-2000.json", "trt-1000-2000.json", "vllm-1000-2000.json",
                 "vllm-sharegpt.json"):
        shutil.copy(FIXTURES / "vllm-bench-0.32.0" / "rate8.json", tmp_path / name)
    text = refusal(tmp_path)
    assert "4 data file(s)" in text and "sgl-1000-2000.json" in text and "and 1 more" in text


def test_kvbudget_directories_are_still_read_as_runs(tmp_path: Path) -> None:
    # a damaged run, or a serve run left open (its part files), keeps the run's own message
    (tmp_path / "summary.json").write_text("{}")
    assert detect_recording_format(tmp_path) == "run"
    (tmp_path / "summary.json").unlink()
    (tmp_path / "requests.part.jsonl").write_text("")
    assert detect_recording_format(tmp_path) == "run"
    (tmp_path / "requests.part.jsonl").unlink()
    assert detect_recording_format(tmp_path) == "run"  # empty: nothing else to name


def genai_perf_run(run: Path) -> None:
    """genai-perf's artifact folder as it writes one (triton-inference-server/perf_analyzer
    genai-perf ``README``: ``artifacts/<model>-<service>-<mode><value>/`` holding
    perf_analyzer's ``profile_export.json`` beside ``profile_export_genai_perf.json`` and
    ``.csv``); the per-request file reduced to its shape."""
    run.mkdir(parents=True)
    (run / "profile_export.json").write_text(
        '{"experiments": [{"experiment": {"mode": "concurrency", "value": 4}, "requests": '
        '[{"timestamp": 1, "request_inputs": {"payload": "{}"}, "response_timestamps": [2, 3], '
        '"response_outputs": [{"response": "data: {}"}, {"response": "data: [DONE]"}]}]}], '
        '"version": "", "service_kind": "openai", "endpoint": "v1/chat/completions"}')
    (run / "profile_export_genai_perf.json").write_text('{"request_throughput": {"avg": 1}}')
    (run / "profile_export_genai_perf.csv").write_text("Metric,avg\n")


def test_genai_perf_artifact_folders_name_the_per_request_file_they_hold(
        tmp_path: Path) -> None:
    # A genai-perf run folder was refused as "holding aggregates only (profile_export_genai_
    # perf.csv, ...), no per-request file", though its profile_export.json is one (it lacks
    # token counts); the artifacts/ folder above its runs as "not a run directory
    # (requests.parquet is missing)".
    run = tmp_path / "artifacts" / "llama-openai-chat-concurrency4"
    genai_perf_run(run)
    text = refusal(run)
    assert "genai-perf" in text and "no per-request file" not in text
    assert "profile_export.json (perf_analyzer's)" in text and "no token counts" in text
    text = refusal(tmp_path / "artifacts")
    assert "llama-openai-chat-concurrency4/profile_export.json (perf_analyzer's)" in text
    # without the per-request file, the aggregates are said as before
    (run / "profile_export.json").unlink()
    assert "aggregates only" in refusal(run) and "no per-request file" in refusal(run)


def test_an_llmperf_results_folder_says_why_neither_file_is_read(tmp_path: Path) -> None:
    # LLMPerf's --results-dir as token_benchmark_ray.py writes it (ray-project/llmperf:
    # <model>_<input>_<output>_summary.json beside _individual_responses.json). The folder was
    # told to "pass one of them", and either file is then refused: now it says why, at once.
    name = "meta-llama-Llama-2-7b-chat-hf_550_150"
    (tmp_path / f"{name}_summary.json").write_text(
        '{"model": "meta-llama/Llama-2-7b-chat-hf", "num_concurrent_requests": 5, '
        '"mean_input_tokens": 550}')
    (tmp_path / f"{name}_individual_responses.json").write_text(
        '[{"error_code": null, "error_msg": "", "inter_token_latency_s": 0.02, "ttft_s": 0.1, '
        '"end_to_end_latency_s": 2.0, "request_output_throughput_token_per_s": 50, '
        '"number_total_tokens": 650, "number_output_tokens": 100, '
        '"number_input_tokens": 550}]')
    text = refusal(tmp_path)
    assert "LLMPerf's results directory" in text and "pass one of them" not in text
    assert f"{name}_individual_responses.json" in text and "no send time" in text


PROMETHEUS = FIXTURES / "handmade" / "inference-perf-0.7.0-summary_prometheus_metrics-handmade.json"
"""inference-perf 0.7.0's summary of a server's Prometheus metrics, written by its own report
code without a server (``~/.cache/kvbudget/loadtools/inference-perf-0.7.0/venv/bin/python``:
``json.dumps(summarize_prometheus_metrics(ModelServerMetrics()).model_dump(), indent=2)``, the
figures of a client that collected none, all zero): the layout of its
``summary_prometheus_metrics.json`` and ``stage_N_prometheus_metrics.json``."""


def test_inference_perf_folder_of_prometheus_metrics_only_names_what_is_missing(
        tmp_path: Path) -> None:
    # report.request_lifecycle writing nothing, report.prometheus its default summary and
    # per_stage: the server's metrics only. It was told "it holds 2 data file(s) (...): pass
    # one of them", and each file was then called "an inference-perf summary"
    for name in ("summary_prometheus_metrics.json", "stage_0_prometheus_metrics.json"):
        shutil.copy(PROMETHEUS, tmp_path / name)
    text = refusal(tmp_path)
    assert "pass one of them" not in text
    assert text.startswith(f"{tmp_path}: is inference-perf's output directory holding "
                           "aggregates only (stage_0_prometheus_metrics.json, summary_prometheus"
                           "_metrics.json), no per-request file: they are the model server's "
                           "Prometheus metrics over the run"), text
    assert text.endswith("which writes per_request_lifecycle_metrics.json"), text
    # one of the files, passed as it is
    text = refusal(tmp_path / "summary_prometheus_metrics.json")
    assert "is inference-perf's summary of the model server's Prometheus metrics" in text
    assert "pass per_request_lifecycle_metrics.json" in text
    # its summary of the requests keeps its own refusal
    text = refusal(FIXTURES / "inference-perf-0.7.0" / "summary_lifecycle_metrics.json")
    assert "Prometheus" not in text and "per_request_lifecycle_metrics.json" in text


def test_inference_perf_folders_of_its_other_reports_name_what_is_missing(
        tmp_path: Path) -> None:
    """A trace session replay's session reports alone, and the per-LoRA-adapter summaries
    alone (inference-perf 0.7.0 ``reportgen/base.py``: ``per_session_lifecycle_metrics.json``,
    ``adapter_<name>_lifecycle_metrics.json``), were told "pass one of them", each then
    refused: the folder now names them and the per-request file that is missing."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    shutil.copy(FIXTURES / "handmade" /
                "inference-perf-0.7.0-per_session_lifecycle_metrics-handmade.json",
                sessions / "per_session_lifecycle_metrics.json")
    text = refusal(sessions)
    assert "pass one of them" not in text
    assert "is inference-perf's output directory holding reports per session " \
        "(per_session_lifecycle_metrics.json), no per-request file: they are its session " \
        "reports" in text and text.endswith("writes per_request_lifecycle_metrics.json"), text
    adapters = tmp_path / "adapters"
    adapters.mkdir()
    shutil.copy(FIXTURES / "inference-perf-0.7.0" / "summary_lifecycle_metrics.json",
                adapters / "adapter_lora-a_lifecycle_metrics.json")
    text = refusal(adapters)
    assert "is inference-perf's output directory holding aggregates only " \
        "(adapter_lora-a_lifecycle_metrics.json)" in text, text
    assert "report.request_lifecycle.per_request: true" in text
