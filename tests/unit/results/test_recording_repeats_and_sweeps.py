"""Load-tool runs of repeats, sweeps and length ranges, on files the real tools wrote
(``scripts/make_recording_fixtures.sh vllm-ranges aiperf-runs inference-perf-sweep``, against
the CPU vLLM of the live tests): each run reads to the tool's own summary, its load as the
tool offered it; a folder of runs is refused naming each run's file (by validate --records
and by trace convert, which called it "holds no ServeGen chunk-N-trace.csv files"); what the
files leave out is said.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, Recording, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM = FIXTURES / "vllm-bench-0.32.0" / "options"
RUNS = FIXTURES / "aiperf-0.13.0" / "runs2_concurrency2"
SWEEP = FIXTURES / "aiperf-0.13.0" / "sweep_rate4_8"
IP_SWEEP = FIXTURES / "inference-perf-0.7.0" / "sweep"
PROFILE_RUNS_SAID = (
    "holds 2 runs of AIPerf's --num-profile-runs, 2 repeats of one load (profile_runs/run_NNNN/, "
    "by default only the first with AIPerf's warm-up)"
)


def usable(rec: Recording) -> pd.DataFrame:
    return rec.measured[rec.measured["usable"]]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# --------------------------------------------------------------------------- vllm bench serve


@pytest.mark.parametrize(
    ("name", "stage"),
    [
        # a linear ramp of the rate, saved with request_rate "inf": sent as the ramp drew
        (
            "prefix16_range05_rampup.json",
            RecordedStage("ramp-up linear 2 to 12 req/s", "open", None, None),
        ),
        ("prefix16_range05_rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
    ],
)
def test_vllm_bench_prefix_with_range_ratio_reads_to_its_own_summary(
    name: str, stage: RecordedStage
) -> None:
    """--random-prefix-len 16 --random-range-ratio 0.5: each prompt is one shared 16-token
    prefix and 15 to 47 random tokens (vLLM 0.32.0 benchmarks/datasets/utils.py
    get_sampling_params: input_len less the tokenizer's special token, +-50 %), each output 8
    to 24 tokens, with ignore_eos set by the client for the random dataset: the file's own
    lengths, the realised outputs as their max_tokens."""
    path = VLLM / name
    doc = json.loads(path.read_text())
    rec = read_recording(path)
    u = usable(rec)
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 10
    assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    assert u["prompt_tokens"].tolist() == doc["input_lens"]
    assert u["output_tokens"].tolist() == doc["output_lens"]
    assert u["prompt_tokens"].between(16 + 15, 16 + 47 + 1).all()
    assert u["output_tokens"].between(8, 24).all() and u["output_tokens"].nunique() > 1
    assert rec.stages == (stage,)
    assert (rec.workload.max_output_tokens == rec.workload.output_tokens).all()


# --------------------------------------------------------------------------- AIPerf


def _aiperf_summary(path: Path) -> Any:
    return json.loads((path.parent / "profile_export_aiperf.json").read_text())


@pytest.mark.parametrize(("run", "num_warmup"), [("run_0001", 2), ("run_0002", 0)])
def test_aiperf_profile_runs_each_read_to_their_own_summary(run: str, num_warmup: int) -> None:
    """--num-profile-runs 2: two runs of one closed loop of 2 users, the warm-up in the first
    only (--profile-run-disable-warmup-after-first, on by default)."""
    path = RUNS / "profile_runs" / run / "profile_export.jsonl"
    rec = read_recording(path)
    summary = _aiperf_summary(path)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"] == 10
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert rec.counts["num_warmup"] == num_warmup
    assert rec.stages == (RecordedStage("concurrency 2", "closed", None, 2),)


@pytest.mark.parametrize("rate", [4, 8])
def test_aiperf_rate_sweep_runs_each_read_to_their_own_summary(rate: int) -> None:
    """--request-rate 4,8: AIPerf promotes the list to a sweep, one run a rate."""
    path = SWEEP / f"rate_{rate:.1f}" / "profile_export.jsonl"
    rec = read_recording(path)
    summary = _aiperf_summary(path)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"] == 10
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert rec.stages == (RecordedStage(f"{rate} req/s", "open", float(rate), None),)


def test_a_folder_of_aiperf_profile_runs_names_each_runs_file(tmp_path: Path) -> None:
    """AIPerf's --num-profile-runs folder keeps each run two folders down
    (profile_runs/run_0001/): validate --records said "not a run directory (requests.parquet
    is missing)", naming neither the tool nor the file to pass; then "holds 2 AIPerf run(s) in
    its folders", not that they repeat one load, any one of which can be validated. The
    profile_runs folder itself is said the same; a sweep's runs are not said to repeat."""
    for folder in (RUNS, RUNS / "profile_runs"):
        with pytest.raises(TraceError) as caught:
            read_recording(folder)
        text = str(caught.value)
        assert PROFILE_RUNS_SAID in text and "any one of them can be validated" in text, text
        assert "run_0001/profile_export.jsonl, " in text
        assert "run_0002/profile_export.jsonl" in text
        assert "requests.parquet is missing" not in text
    # as the real runs show: the warm-up records are the first run's alone
    phases = [
        [json.loads(line)["metadata"]["benchmark_phase"] for line in f.read_text().splitlines()]
        for f in sorted(RUNS.glob("profile_runs/run_*/profile_export.jsonl"))
    ]
    assert [p.count("warmup") for p in phases] == [2, 0]
    with pytest.raises(TraceError) as caught:
        read_recording(SWEEP)
    assert "holds 2 AIPerf run(s) in its folders" in str(caught.value)
    assert "repeats" not in str(caught.value)


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (RUNS, PROFILE_RUNS_SAID),
        (SWEEP, "holds 2 AIPerf run(s) in its folders"),
        (SWEEP / "rate_4.0", "is AIPerf's output directory"),
        (IP_SWEEP, "is inference-perf's output directory"),
    ],
)
def test_trace_convert_of_a_load_tools_folder_names_the_file_to_pass(
    tmp_path: Path, folder: Path, said: str
) -> None:
    """trace convert of a load tool's output folder said "holds no ServeGen
    chunk-N-trace.csv files" (every folder was taken for ServeGen's), not what it was; then it
    named the file to pass as "--records FILE", an option trace convert has not (it takes the
    file as its argument): the file is named in trace convert's own form."""
    res = CliRunner().invoke(
        app, ["trace", "convert", str(folder), "--out", str(tmp_path / "t.csv")]
    )
    err = " ".join(res.stderr.split())
    assert res.exit_code != 0
    assert said in err and "ServeGen" not in err, err
    assert "--records" not in err, err
    assert f"kvbudget trace convert {folder}/" in err and f"--out {tmp_path / 't.csv'}" in err
    assert not (tmp_path / "t.csv").exists()


# --------------------------------------------------------------------------- inference-perf


def test_inference_perf_sweep_stages_read_to_its_own_summary_and_its_probe_is_said(
    tmp_path: Path,
) -> None:
    """load.sweep: a saturation probe (stage -1, 40 requests over 5 s) the reports leave out,
    then 2 constant stages at the rates it set (inference-perf 0.7.0
    loadgen/load_generator.py, preprocess): the stages read as their stage files say, the
    probe said from the run's config.yaml."""
    path = IP_SWEEP / "per_request_lifecycle_metrics.json"
    rec = read_recording(path)
    assert len(rec.stages) == 2
    for k, stage in enumerate(rec.stages):
        own = json.loads((IP_SWEEP / f"stage_{k}_lifecycle_metrics.json").read_text())
        rate = own["load_summary"]["requested_rate"]
        assert stage == RecordedStage(f"stage {k}: {rate:g} req/s", "open", rate)
        assert (rec.measured["stage"] == stage.label).sum() == own["successes"]["count"]
    assert rec.stages[0].request_rate == 1.0  # a linear sweep starts at 1 req/s
    said = [n for n in rec.notes if n.startswith("load.sweep (the run's config.yaml)")]
    assert len(said) == 1 and "saturation probe of 40 requests over 5 s" in said[0]
    # without its config.yaml nothing says it was a sweep
    for report in IP_SWEEP.glob("*.json"):
        shutil.copy(report, tmp_path / report.name)
    alone = read_recording(tmp_path / path.name)
    assert not [n for n in alone.notes if n.startswith("load.sweep")]
    assert alone.stages == rec.stages


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (RUNS, PROFILE_RUNS_SAID),
        (IP_SWEEP, "is inference-perf's output directory"),
    ],
)
def test_report_of_a_load_tools_folder_names_the_file_to_pass(
    tmp_path: Path, folder: Path, said: str
) -> None:
    """report of a load tool's output folder said "not a run directory (requests.parquet is
    missing)", naming neither the tool nor its file, where report of one of its files names
    the tool and validate --records. The file was then named "e.g. --records FILE", an option
    report has not: it is named in the command that reads it, validate --records FILE --out
    DIR."""
    res = CliRunner().invoke(app, ["report", str(folder), "--out", str(tmp_path / "r")])
    err = " ".join(res.stderr.split())
    assert res.exit_code != 0
    assert said in err and "report takes the simulated run that validate --records" in err, err
    assert f"kvbudget validate --records {folder}/" in err and " --out DIR" in err, err
    assert f", --records {folder}" not in err and f"e.g. --records {folder}" not in err, err
    assert "requests.parquet is missing" not in err
