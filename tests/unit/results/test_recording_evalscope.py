"""evalscope perf's ``benchmark_data.db`` (``tests/fixtures/recordings/evalscope-1.14.1/``, made
by ``scripts/make_recording_fixtures.sh evalscope`` against the CPU vLLM of the live tests):
read to evalscope's own ``benchmark_summary.json`` of the same run, each run's load as
``benchmark_args.json`` says evalscope ran it, a sweep's runs as stages on one clock; what
cannot be replayed refused in one line. The hand-made cases change a copy of a real run the
way evalscope 1.14.1 writes them (``evalscope/perf/utils/db_util.py``)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "evalscope-1.14.1"
SWEEP = FIXTURES / "sweep"
OPEN = FIXTURES / "open" / "rate_8.0_number_16"
CAPPED = FIXTURES / "capped" / "parallel_2_number_12"


@pytest.mark.parametrize(("run", "stage"), [
    (SWEEP / "parallel_1_number_8", RecordedStage("parallel_1_number_8", "closed", None, 1)),
    (SWEEP / "parallel_2_number_12", RecordedStage("parallel_2_number_12", "closed", None, 2)),
    (OPEN, RecordedStage("rate_8.0_number_16", "open", 8.0, None)),
    (CAPPED, RecordedStage("parallel_2_number_12", "capped", 8.0, 2)),
])
def test_evalscope_reads_to_its_own_summary(run: Path, stage: RecordedStage) -> None:
    summary = json.loads((run / "benchmark_summary.json").read_text())
    for path in (run, run / "benchmark_data.db"):
        assert detect_recording_format(path) == "evalscope"
        rec = read_recording(path)
        m = rec.measured
        assert rec.tool == "evalscope perf" and rec.stages == (stage,)
        assert rec.num_usable == len(m) == summary["Success Requests"] == summary["Total Requests"]
        # evalscope rounds its averages: ms to 2 places, seconds and tokens to 4
        assert round(float(m["ttft_s"].mean()) * 1000, 2) == summary["Avg TTFT (ms)"]
        assert round(float(m["e2e_s"].mean()), 4) == summary["Avg Latency (s)"]
        assert round(float(m["tpot_s"].mean()) * 1000, 2) == summary["Avg TPOT (ms)"]
        assert round(float(m["prompt_tokens"].mean()), 4) == summary["Avg Input Tokens"]
        assert float(m["output_tokens"].mean()) == summary["Avg Output Tokens"]
        assert m["arrival_s"].min() == 0.0 and m["arrival_s"].is_monotonic_increasing
        # max_tokens is each request body's (16, sent with ignore_eos), not the realised output
        assert rec.workload.max_output_tokens.tolist() == [16] * len(m)
        assert rec.config["model"] == "tiny" and rec.config["ignore_eos"] is True
        assert "max_tokens: the tool's recorded setting for every request" in rec.notes


def test_a_sweep_directory_is_one_recording_a_stage_a_run_on_one_clock() -> None:
    assert detect_recording_format(SWEEP) == "evalscope"
    rec = read_recording(SWEEP)
    assert [st.max_concurrency for st in rec.stages] == [1, 2]
    m = rec.measured
    first, second = m[m["stage"] == "parallel_1_number_8"], m[m["stage"] == "parallel_2_number_12"]
    assert (len(first), len(second)) == (8, 12)
    # --sleep-interval 1: the second run starts over a second after the first one's last answer
    gap = second["arrival_s"].min() - (first["arrival_s"] + first["e2e_s"]).max()
    assert 1.0 <= gap < 2.0
    assert any(n.startswith("2 runs of one sweep, one stage each") for n in rec.notes)
    assert "max_concurrency" not in rec.config  # one a stage


@pytest.mark.parametrize(("run", "needle"), [
    (FIXTURES / "unstreamed", "was not streamed (--no-stream; is_stream 0): evalscope times a "
     "non-streamed request's first chunk at its end"),
    (FIXTURES / "all_failed", "every one of its 4 requests failed (success 0; evalscope keeps "
     "no error text in the database"),
])
def test_what_cannot_be_replayed_is_refused_in_one_line(run: Path, needle: str) -> None:
    with pytest.raises(TraceError) as info:
        read_recording(run)
    text = str(info.value)
    assert "\n" not in text and needle in text
    assert text.startswith(str(next(run.glob("*/benchmark_data.db"))))


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def _sql(run: Path, statement: str, *params: Any) -> None:
    con = sqlite3.connect(run / "benchmark_data.db")
    with con:
        con.execute(statement, params)
    con.close()


def _args(run: Path, **changes: Any) -> None:
    path = run / "benchmark_args.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_a_failed_request_is_counted_and_dropped_not_measured(tmp_path: Path) -> None:
    # insert_benchmark_data's failure branch: start and completed times, body, nothing else
    run = _copy(OPEN, tmp_path / "rate_8.0_number_16")
    _sql(run, "UPDATE result SET success = 0, latency = NULL, first_chunk_latency = NULL, "
         "prompt_tokens = NULL, completion_tokens = NULL, time_per_output_token = NULL, "
         "max_gpu_memory_cost = NULL, inter_token_latencies = '[]' WHERE rowid = 3")
    rec = read_recording(run)
    assert rec.num_usable == len(rec) == 15
    assert rec.counts["num_rows_read"] == 16 and rec.counts["num_dropped_failed_request"] == 1
    assert any(n.startswith("1 request failed (success 0): evalscope keeps no tokens")
               for n in rec.notes)


def test_a_run_that_streamed_some_requests_only_measures_those(tmp_path: Path) -> None:
    run = _copy(OPEN, tmp_path / "rate_8.0_number_16")
    _sql(run, "UPDATE result SET is_stream = 0, first_chunk_latency = latency WHERE rowid <= 2")
    rec = read_recording(run)
    assert rec.num_usable == 14 and rec.counts["num_missing_ttft"] == 2
    assert "2 requests not streamed (is_stream 0): no TTFT, not measured" in rec.notes


@pytest.mark.parametrize(("changes", "needle"), [
    ({"multi_turn": True}, "is a multi-turn run (--multi-turn): its result table does not say "
     "which conversation each turn belongs to"),
    ({"api": "openai_embedding"}, "is a run of --api openai_embedding: its requests generate "
     "no tokens"),
])
def test_runs_kvbudget_cannot_replay_are_named(tmp_path: Path, changes: dict[str, Any],
                                               needle: str) -> None:
    run = _copy(OPEN, tmp_path / "rate_8.0_number_16")
    _args(run, **changes)
    with pytest.raises(TraceError, match="^" + str(run / "benchmark_data.db")) as info:
        read_recording(run)
    assert needle in str(info.value)


def test_a_duration_limits_a_closed_stage_from_its_first_send(tmp_path: Path) -> None:
    # --duration: sending stops that long after the first measured send, the requests in
    # flight run to their end (core/strategies/closed_loop.py, _arm_deadline; soft exit)
    run = _copy(SWEEP / "parallel_2_number_12", tmp_path / "parallel_2_number_12")
    _args(run, duration=0.5, warmup_num=2)
    rec = read_recording(run)
    (stage,) = rec.stages
    assert (stage.load, stage.time_limit_end_s, stage.grace_s) == ("closed", 0.5, np.inf)
    assert any("stopped by its 0.5 s time limit (evalscope perf --duration): replayed "
               "time-limited" in n and "run to their end" in n for n in rec.notes)
    assert any("its warm-up requests (--warmup-num 2) are not in the database" in n
               for n in rec.notes)


def test_a_run_with_fewer_requests_than_it_asked_for_is_said(tmp_path: Path) -> None:
    run = _copy(CAPPED, tmp_path / "parallel_2_number_12")
    _args(run, number=20)
    rec = read_recording(run)
    assert any("the database holds 12 requests of the 20 --number asked for" in n
               for n in rec.notes)


def test_runs_that_overlap_are_not_one_sweep(tmp_path: Path) -> None:
    _copy(OPEN, tmp_path / "mixed" / "rate_8.0_number_16")
    _copy(OPEN, tmp_path / "mixed" / "parallel_8_number_16")
    with pytest.raises(TraceError, match="not one evalscope perf sweep run after run on one "
                       "clock; pass each run directory alone"):
        read_recording(tmp_path / "mixed")


def test_without_its_arguments_the_load_is_unknown(tmp_path: Path) -> None:
    run = _copy(OPEN, tmp_path / "run")
    (run / "benchmark_args.json").unlink()
    rec = read_recording(run)
    assert rec.stages == (RecordedStage("", "unknown"),)
    assert any("no benchmark_args.json beside the database: load mode unknown" in n
               for n in rec.notes)


def _first_layout(path: Path, ttft: float) -> Path:
    """evalscope's first database (modelscope/evalscope at da64aa11,
    evalscope/perf/utils/db_utils.py create_result_table: the request pickled, chunk_times,
    n_chunks, no is_stream), three requests."""
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE result(request TEXT, start_time REAL, chunk_times TEXT, "
                    "success INTEGER, response_messages TEXT, completed_time REAL, latency REAL, "
                    "first_chunk_latency REAL, n_chunks INTEGER, chunk_time REAL, "
                    "prompt_tokens INTEGER, completion_tokens INTEGER)")
        con.executemany("INSERT INTO result VALUES (?, ?, '[]', 1, '', ?, 0.5, ?, 8, 0.4, 100, "
                        "8)", [("gASV", 1000.0 + i, 1000.5 + i, ttft) for i in range(3)])
    con.close()
    return path


def test_the_first_database_layout_reads_and_its_unstreamed_runs_are_refused(
        tmp_path: Path) -> None:
    rec = read_recording(_first_layout(tmp_path / "bench.db", 0.1))
    assert rec.num_usable == 3 and rec.measured["arrival_s"].tolist() == [0.0, 1.0, 2.0]
    assert rec.measured["ttft_s"].tolist() == [0.1] * 3
    assert "max_tokens: its realised output length" in " ".join(rec.notes)
    with pytest.raises(TraceError, match="was not streamed"):
        read_recording(_first_layout(tmp_path / "unstreamed.db", 0.5))


@pytest.mark.parametrize(("statement", "where"), [
    ("UPDATE result SET start_time = NULL WHERE rowid = 1", "row 0: field 'result.start_time': "
     "missing"),
    ("UPDATE result SET first_chunk_latency = latency + 1 WHERE rowid = 2",
     "row 1: field 'result.latency': the request ends"),
    ("UPDATE result SET completion_tokens = 'many' WHERE rowid = 3",
     "row 2: field 'result.completion_tokens': not a number"),
    ("UPDATE result SET success = 2 WHERE rowid = 1", "row 0: field 'result.success': must be 1 "
     "or 0"),
])
def test_a_damaged_database_names_the_row_and_column(tmp_path: Path, statement: str,
                                                     where: str) -> None:
    run = _copy(OPEN, tmp_path / "rate_8.0_number_16")
    _sql(run, statement)
    with pytest.raises(TraceError) as info:
        read_recording(run)
    assert str(info.value).startswith(f"{run / 'benchmark_data.db'}: {where}")


def test_validate_reads_an_evalscope_sweep_end_to_end(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(SWEEP), "--model",
                                   "Llama-3.1-8B", "--gpu", "H100", "--out",
                                   str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "parallel_1_number_8 8" in out and "parallel_2_number_12 12" in out
    table = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert table["counts"]["num_measured"] == 20
    # forced by name, one run's database
    res = CliRunner().invoke(app, ["validate", "--records", str(OPEN / "benchmark_data.db"),
                                   "--records-format", "evalscope", "--model", "Llama-3.1-8B",
                                   "--gpu", "H100", "--out", str(tmp_path / "w")])
    assert res.exit_code == 0, res.stderr


def test_validate_refuses_an_unstreamed_run_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(FIXTURES / "unstreamed"),
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "was not streamed" in res.stderr and not (tmp_path / "v").exists()


def test_the_directory_above_a_sweep_names_the_sweeps_in_it() -> None:
    # <outputs-dir>/<name>/parallel_P_number_N/: --outputs-dir holds one sweep a --name
    assert detect_recording_format(FIXTURES) == "evalscope"
    with pytest.raises(TraceError) as info:
        read_recording(FIXTURES)
    assert str(info.value).endswith("; its sweeps are in all_failed, capped, open, sweep, "
                                    "unstreamed: pass one")


def test_runs_of_a_sweep_are_labelled_by_their_directories(tmp_path: Path) -> None:
    _copy(SWEEP / "parallel_1_number_8", tmp_path / "mine" / "first")
    _copy(SWEEP / "parallel_2_number_12", tmp_path / "mine" / "second")
    rec = read_recording(tmp_path / "mine")
    assert [(st.label, st.max_concurrency) for st in rec.stages] == [("first", 1), ("second", 2)]
    # one run under another name: the name evalscope gives its arguments
    (stage,) = read_recording(tmp_path / "mine" / "second").stages
    assert stage.label == "parallel_2_number_12"


def test_a_workload_trace_run_is_an_open_loop_at_the_traces_times_not_a_rate(
        tmp_path: Path) -> None:
    # --dataset workload_trace --open-loop sends each request at its trace offset
    # (core/strategies/open_loop.py, has_trace_offsets): --rate (validated > 0) is not used
    run = _copy(OPEN, tmp_path / "rate_8.0_number_16")
    _args(run, dataset="workload_trace")
    rec = read_recording(run)
    assert rec.stages == (RecordedStage("rate_8.0_number_16", "open", None, None),)
    assert "request_rate" not in rec.config
    assert any("--dataset workload_trace" in n for n in rec.notes)
