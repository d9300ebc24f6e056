"""Runs a load tool stopped by a time limit, made by the real tools
(``scripts/make_recording_fixtures.sh aiperf-timed guidellm-timed``): AIPerf 0.13.0
``--concurrency 4 --benchmark-duration 2 --benchmark-grace-period 0`` and GuideLLM 0.8.1
``--profile kind=concurrent,streams=4 --constraint kind=max_duration,seconds=2``.

A closed loop stopped by its time limit was replayed with every request it sent: on a
simulated server slower than the recorded one, its users went on sending past the tool's limit
and those requests counted as completed (the completed count agreed by construction). It is
replayed time-limited: nothing is sent after the limit, requests running past the tool's grace
period are cancelled, and both are the client's (``client_timeout``), neither completed nor
the server's failures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.analysis.validation import OVERALL
from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, save_cost_model
from kvbudget.results.recorded_aiperf import UNRECORDED_CANCELS
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import CANCELLED, NOT_SENT, replay_mode, stage_plans
from kvbudget.studies.validate import replay_problems, simulate_recording, validate_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
AIPERF = FIXTURES / "aiperf-0.13.0" / "duration2_concurrency4_grace0.jsonl"
GUIDELLM = FIXTURES / "guidellm-0.8.1" / "duration2_concurrent4.json"
CONFIG = SimConfig(engine=EngineConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8,
                                       max_num_batched_tokens=2048))
SLOW = LinearCostModel(intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                       per_context_token_s=0.0)  # 16 steps of 50 ms: 0.8 s a request


def _completed(table: pd.DataFrame) -> tuple[float, float]:
    row = table[(table["stage"] == OVERALL) & (table["metric"] == "completed")]
    return float(row["simulated"].iloc[0]), float(row["measured"].iloc[0])


@pytest.mark.parametrize(("path", "limit_s", "grace_s"), [(AIPERF, 2.0, 0.0),
                                                          (GUIDELLM, 2.0, 0.2077648639678955)])
def test_a_time_limited_closed_loop_sends_nothing_after_the_tools_limit(
        path: Path, limit_s: float, grace_s: float) -> None:
    rec = read_recording(path)
    stage = rec.stages[0]
    assert stage.load == "closed" and stage.grace_s == pytest.approx(grace_s, abs=1e-9)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].loop is not None
    until = plans[0].loop.send_until_s
    assert until is not None
    # the limit counts from the profiling phase's first send (AIPerf's warm-up before it)
    assert limit_s <= until <= limit_s + 0.2
    run = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0)
    records = run.records
    start = plans[0].start_s
    sent = records["reason"] != NOT_SENT
    assert (records.loc[sent, "arrival_s"] - start <= until + 1e-9).all()
    assert (~sent).sum() > 0  # the slow server's users could not send them all in the time
    assert (records.loc[~sent, "status"] == "client_timeout").all()
    done = records["status"] == "completed"
    if grace_s == 0:  # no grace: nothing completes after the limit
        assert (records.loc[done, "finished_s"] - start <= until + 1e-9).all()
        assert (records["reason"] == CANCELLED).sum() > 0
    # neither the unsent nor the cancelled are the server's losses: the gate lets it through
    assert replay_problems(rec, records) is None
    table = validate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0).table
    simulated, measured = _completed(table)
    assert simulated < measured  # a slower server completes fewer in the tool's window
    assert "time-limited" in replay_mode(stage)


def test_the_time_limit_note_says_how_it_is_replayed() -> None:
    notes = [n for n in read_recording(AIPERF).notes if "time limit" in n]
    assert len(notes) == 1
    assert ("stage 'concurrency 4' was stopped by its 2 s time limit (--benchmark-duration): "
            "replayed time-limited: the simulated users send nothing after the limit and those "
            "still running at the limit are cancelled") in notes[0]
    assert "equals the measured one by construction" not in notes[0]
    # GuideLLM 0.8.1's workers cancel what is in flight once they see max_duration's stop
    # (scheduler/worker.py, _process_requests); before, its replay let them run to their end.
    # Its last request ended or was cancelled 0.21 s after the limit (end_requests_time)
    notes = [n for n in read_recording(GUIDELLM).notes if "was stopped by its" in n]
    assert len(notes) == 1 and ("those still running 0.207765 s after it (its grace period) "
                                "are cancelled") in notes[0]
    assert read_recording(GUIDELLM).counts["num_incomplete"] == 1  # the one it cancelled


def test_an_open_time_limited_stage_keeps_its_sends() -> None:
    # --request-rate 8 --benchmark-duration 2 (AIPerf's default 30 s grace): the rate set what
    # was sent in the time; one run, nothing of it running 30 s past the limit
    rec = read_recording(FIXTURES / "aiperf-0.13.0" / "duration2_rate8.jsonl")
    stage = rec.stages[0]
    assert stage.load == "open" and stage.time_limit_end_s is not None and stage.grace_s == 30
    assert stage_plans(rec) is None
    run = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0)
    assert (run.records["status"] == "completed").all()


OPEN_GRACE0 = FIXTURES / "aiperf-0.13.0" / "duration3_rate4_grace0.jsonl"
"""AIPerf 0.13.0 ``--request-rate 4 --benchmark-duration 3 --benchmark-grace-period 0`` with
64-token answers (``scripts/make_recording_fixtures.sh aiperf-timed-open``)."""


def test_an_open_time_limited_stage_cancels_what_runs_past_the_tools_grace() -> None:
    """AIPerf stops sending at --benchmark-duration whatever the load, waits the grace period
    for the requests in flight and cancels those still running then (aiperf 0.13.0
    timing/phase/runner.py ``_wait_for_returning_complete``: ``time_left_in_seconds(
    include_grace_period=True)``, then ``cancel_all_credits``). An open stage was simulated
    whole: on a slower simulated server its requests ran past the limit and counted as
    completed, though the tool would have cancelled them."""
    rec = read_recording(OPEN_GRACE0)
    stage = rec.stages[0]
    assert stage.load == "open" and stage.grace_s == 0.0
    assert stage.time_limit_end_s is not None
    limit = stage.time_limit_end_s
    measured = rec.measured
    sent = measured["arrival_s"].to_numpy()
    assert (sent <= limit).all()  # the tool sent nothing after its limit
    assert stage_plans(rec) is None  # one stage: one run, cut after it
    run = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0)
    records = run.records
    done = records["status"] == "completed"
    assert (records.loc[done, "finished_s"] <= limit + 1e-9).all()
    cut = records["reason"] == CANCELLED
    assert cut.sum() > 0 and (records.loc[cut, "status"] == "client_timeout").all()
    assert (records.loc[cut, "finished_s"] > limit).all()
    assert not (records["reason"] == NOT_SENT).any()  # its sends are the recorded ones
    # the same run unchanged but for those: the cut is made after the whole run
    assert len(records) == len(rec.workload)
    assert replay_problems(rec, records) is None  # the client's, not the server's losses
    assert "time-limited" in replay_mode(stage)
    table = validate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0).table
    simulated, measured_done = _completed(table)
    assert simulated < measured_done
    # the requests AIPerf cancelled left no record (its log: 8 of the 9 it sent): said
    assert UNRECORDED_CANCELS in rec.notes
    assert UNRECORDED_CANCELS not in read_recording(FIXTURES / "aiperf-0.13.0" /
                                                    "rate8.jsonl").notes


def test_an_open_stage_cut_before_another_is_simulated_stage_by_stage() -> None:
    """A stage's cancelled requests would go on loading the server into the next stage in
    one run, not in the tool's: a cut stage with another after it is simulated on its own."""
    rec = read_recording(OPEN_GRACE0)
    stage = rec.stages[0]
    later = replace(stage, label="later", time_limit_end_s=None, grace_s=np.inf)
    labels = rec.measured["stage"].to_numpy(dtype=object).copy()
    labels[len(labels) // 2:] = "later"
    two = replace(rec, stages=(stage, later),
                  measured=rec.measured.assign(stage=labels))
    plans = stage_plans(two)
    assert plans is not None and [p.loop for p in plans] == [None, None]
    assert plans[0].limit_s is not None and plans[1].limit_s is None
    # the cut stage last: one run, cut after it
    assert stage_plans(replace(two, stages=(later, stage))) is None


def test_guidellm_requests_sent_after_its_time_limit_are_not_called_cool_down() -> None:
    # no cool-down was asked for: the 4 requests GuideLLM's workers sent just after the 2 s
    # limit (queued before it) were said to be "cool-down requests simulated"
    rec = read_recording(GUIDELLM)
    assert rec.counts["num_cooldown"] == 0 and rec.counts["num_after_limit"] == 4
    assert not [n for n in rec.notes if "cool-down" in n]
    said = [n for n in rec.notes if "sent after its time limit" in n]
    assert len(said) == 1 and said[0].startswith("4 requests GuideLLM's workers sent after")
    # with a cool-down asked for, the requests after the window are still its cool-down
    rec = read_recording(FIXTURES / "guidellm-0.8.1" / "benchmarks.json")
    assert rec.counts["num_cooldown"] > 0 and rec.counts["num_after_limit"] == 0


def test_validate_says_what_the_time_limit_left_to_the_client(tmp_path: Path) -> None:
    # the table's completed fell from 52 to a handful with no line saying why
    save_cost_model(SLOW, tmp_path / "slow.json")
    res = CliRunner().invoke(app, ["validate", "--records", str(AIPERF), "--model",
                                   "Llama-3.1-8B", "--cost-model", str(tmp_path / "slow.json"),
                                   "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    err = " ".join(res.stderr.split())
    records = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet")
    not_sent = int((records["reason"] == NOT_SENT).sum())
    cancelled = int((records["reason"] == CANCELLED).sum())
    assert not_sent > 0 and cancelled > 0
    assert (f"note: time limit: the simulated users had not sent {not_sent} of the recorded "
            f"requests by the tool's time limit and {cancelled} were still running after its "
            "grace period") in err
    assert "replayed as closed loop, 4 users, time-limited" in " ".join(res.stdout.split())


@pytest.mark.parametrize("name", ["duration2_concurrency4_grace0", "duration2_rate8",
                                  "duration3_rate4_grace0"])
def test_aiperf_time_limited_runs_read_to_aiperfs_own_summary(name: str) -> None:
    path = FIXTURES / "aiperf-0.13.0" / f"{name}.jsonl"
    summary = json.loads(path.with_name(f"{name}_aiperf.json").read_text())
    rec = read_recording(path)
    m = rec.measured[rec.measured["usable"]]
    assert len(m) == summary["request_count"]["avg"]
    assert m["ttft_s"].mean() * 1e3 == pytest.approx(summary["time_to_first_token"]["avg"])
    assert m["e2e_s"].mean() * 1e3 == pytest.approx(summary["request_latency"]["avg"])
    assert int(m["output_tokens"].sum()) == summary["total_usage_completion_tokens"]["avg"]
    # its throughput's span, benchmark_duration, is first send to last end, as kvbudget's
    span = float((m["arrival_s"] + m["e2e_s"]).max() - rec.measured["arrival_s"][
        rec.measured["status"] != "warmup"].min())
    assert span == pytest.approx(summary["benchmark_duration"]["avg"], rel=1e-3)


def test_guidellm_time_limited_run_reads_to_guidellms_own_counts() -> None:
    bench = json.loads(GUIDELLM.read_text())["benchmarks"][0]
    rec = read_recording(GUIDELLM)
    totals = bench["metrics"]["request_totals"]
    assert int(rec.measured["usable"].sum()) == totals["successful"]
    assert rec.counts["num_incomplete"] == len(bench["requests"]["incomplete"])


def test_the_docs_figures_of_the_tools_cuts() -> None:
    """docs/recordings.md quotes GuideLLM's observed grace and what AIPerf's records hold."""
    doc = " ".join((Path(__file__).resolve().parents[3] / "docs" / "recordings.md")
                   .read_text().split())
    grace = read_recording(GUIDELLM).stages[0].grace_s
    assert f"{grace:.2f} s in `duration2_concurrent4.json`" in doc
    rec = read_recording(OPEN_GRACE0)
    measured = int((rec.measured["status"] != "warmup").sum())
    assert (f"its files hold the {measured} request that ended in time and the "
            f"{rec.counts['num_warmup']} warm-ups") in doc


@pytest.mark.parametrize("path", [AIPERF, GUIDELLM])
def test_requests_unsent_at_the_limit_are_the_clients_when_the_engine_idles_before_it(
        path: Path) -> None:
    """A request its user sees end after the engine finished it (the API server's modelled
    time, ``frontend_overhead_s``) frees its user after the last engine step: with the engine
    idle before the tool's limit and every user freed after it, the run ended before the limit.
    The requests never sent were dated at that end, before the limit, so they were not taken
    for unsent but counted as the server's losses ("expired (end_of_run)"), and validate refused
    the comparison (a real genai-bench run of 2 users over 120 s: 197 of 1,554). They are dated
    when the users would next have sent, after the limit: the client's."""
    rec = read_recording(path)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].loop is not None
    until = plans[0].loop.send_until_s
    assert until is not None
    # 0.8 s in the engine, then 2.5 s more before its user sees the end: the engine is idle
    # from about 0.8 s, every user freed after the limit
    run = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=2.5)
    records = run.records
    assert (records.loc[records["status"] == "completed", "finished_s"] >= until).all()
    assert not (records["status"] == "expired").any()
    assert (records["reason"] == NOT_SENT).sum() > 0
    assert replay_problems(rec, records) is None
