"""vllm_bench's files (PyPI vllm-benchmark 0.1.1, github.com/viniciusCSreis/vllm_benchmark),
passed to ``--records``: named as the harness's, with what to do instead.

The fixtures are what ``vllm_bench run_only --service-url leader=URL`` wrote against the CPU
vLLM (``scripts/make_recording_fixtures.sh vllm-benchmark``: a benchmark script sending 8
completions from 2 threads). vllm_bench sends no request itself; around its user's script it
saves the server's Prometheus counters and the script's run time. Before, ``reports/summary.json``,
``runs.csv`` and ``engines.csv`` (one row a trial) were called "per-request results in a layout
of no tool kvbudget reads", the samples "cannot tell the recording format", the results folder
was told to "pass" run.json, and its reports folder (a ``summary.json``, as a kvbudget run has)
was read as a broken kvbudget run: "not a run directory (requests.parquet is missing)"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_vllm_benchmark import vllm_benchmark_refusal
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "recordings"
RUN = FIXTURES / "vllm-benchmark-0.1.1"
TRIAL = RUN / "data" / "completions" / "closed2" / "run_1"
INSTEAD = "vllm_bench sends no request itself (its benchmark script does)"


def refusal(path: Path) -> str:
    with pytest.raises(TraceError) as caught:
        read_recording(path)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{path}: is vllm_bench's (PyPI "), text
    return text


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (
            "data/completions/closed2/run_1/result.json",
            "trial result (result.json, benchmark 'completions', scenario 'closed2')",
        ),
        ("reports/summary.json", "reports/summary.json: 1 trial result(s)"),
        ("reports/runs.csv", "reports/runs.csv: one row a trial"),
        ("reports/engines.csv", "reports/engines.csv: one row a trial and server"),
        ("run.json", "run.json, the run's manifest"),
        ("data/completions/closed2/run_1/metrics_samples.jsonl", "metrics_samples.jsonl"),
        ("data/completions/closed2/run_1/metrics_before.json", "metrics_before.json or"),
        ("data/completions/closed2/run_1/metrics_after.json", "metrics_before.json or"),
    ],
)
def test_each_file_it_wrote_is_named_with_what_to_do(name: str, said: str) -> None:
    text = refusal(RUN / name)
    assert said in text and INSTEAD in text and "--save-detailed" in text
    assert "layout of no tool" not in text and "cannot tell" not in text


def test_the_trial_result_it_names_is_the_fixture_run() -> None:
    # what the text says of the file: the trial's names, and no request in it (its engines'
    # counter differences: 8 requests, 16 generation tokens each, ignore_eos in the script)
    doc = json.loads((TRIAL / "result.json").read_text())
    assert doc["status"] == "ok" and doc["output_rows"] == 8
    engine = doc["engines"][0]
    assert (engine["requests"], engine["generation_tokens"]) == (8.0, 128.0)
    assert vllm_benchmark_refusal({k: v for k, v in doc.items() if k != "engines"}) is None


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (RUN, "results folder (run.json"),
        (RUN / "reports", "reports folder (summary.json, runs.csv, engines.csv"),
        (TRIAL, "trial folder (result.json"),
    ],
)
def test_its_folders_are_named(folder: Path, said: str) -> None:
    text = refusal(folder)
    assert said in text and INSTEAD in text
    assert "requests.parquet" not in text and "pass one of them" not in text


def test_a_trial_folder_with_the_scripts_own_result_names_that_file(tmp_path: Path) -> None:
    # a benchmark script that ran vllm bench serve --result-dir into its output_dir (the
    # trial folder): that file is named, not the harness's advice
    trial = tmp_path / "run_1"
    shutil.copytree(TRIAL, trial)
    shutil.copy(FIXTURES / "vllm-bench-0.32.0" / "rate8.json", trial / "rate8.json")
    text = refusal(trial)
    assert "its benchmark script left rate8.json beside them: pass the one" in text
    assert INSTEAD not in text
    assert len(read_recording(trial / "rate8.json").measured) == 20


def test_a_failed_scrape_is_still_named_and_other_objects_are_not(tmp_path: Path) -> None:
    # hand-made: an engine whose /metrics failed (metrics.py snapshot: empty values, error)
    # beside one that answered
    failed = {
        "leader-1": {"values": {"vllm:num_requests_running": 0.0}},
        "worker-1": {"values": {}, "error": "Connection refused"},
    }
    assert "metrics_before.json or" in (vllm_benchmark_refusal(failed) or "")
    assert vllm_benchmark_refusal({"leader-1": {"values": {"http_requests": 1.0}}}) is None
    assert vllm_benchmark_refusal({"leader-1": {"values": {}, "error": "x"}}) is None
    assert vllm_benchmark_refusal([{"benchmark": "b", "scenario": "s"}]) is None


def test_validate_says_it_in_one_line_and_fails() -> None:
    result = CliRunner().invoke(app, ["validate", "--records", str(RUN / "reports" / "runs.csv")])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "vllm_bench's (PyPI vllm-benchmark) reports/runs.csv" in lines[0]
