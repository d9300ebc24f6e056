"""GuideLLM 0.5-0.7 check a benchmark's time limit (``max_duration``) only when a request's
status changes (``scheduler/worker_group.py`` ``received_callback``; their
``request_updates`` evaluate nothing on a quiet 0.1 s), 0.8 also every 0.1 s without one.

A replay of a 0.5-0.7 time-limited stage cancelled its requests in flight a fixed grace after
the limit (the report's ``end_requests_time``): a slower simulated server cancelled the
synchronous request GuideLLM let finish. It is cut at the first simulated status change (a
send, a first token from 0.6, an end) at or after the limit.

The 0.7.3 reports here are hand-made edge cases: ``guidellm-0.8.1/duration2_concurrent4.json``
(made by GuideLLM 0.8.1, ``make_recording_fixtures.sh guidellm-timed``) with its
``guidellm_version`` said as 0.7.3 (0.7.3 writes the same ``max_duration`` constraint, its
``progress.stop_time``, ``scheduler/constraints/request.py``), and for the synchronous case
its strategy said ``synchronous``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recorded_guidellm_cut import cut_rule
from kvbudget.results.recording import RecordedStage
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import (
    CANCELLED,
    NOT_SENT,
    replay_mode,
    stage_plans,
    status_change_cut_s,
)
from kvbudget.studies.validate import simulate_recording

FIXTURE = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "guidellm-0.8.1"
           / "duration2_concurrent4.json")
CONFIG = SimConfig(engine=EngineConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8,
                                       max_num_batched_tokens=2048))
SLOW = LinearCostModel(intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                       per_context_token_s=0.0)  # 16 steps of 50 ms: 0.8 s a request


def _as(tmp_path: Path, version: str, strategy: str | None = None,
        outputs: list[int] | None = None) -> Path:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text())
    doc["metadata"]["guidellm_version"] = version
    bench = doc["benchmarks"][0]
    if strategy:
        bench["config"]["strategy"]["type_"] = strategy
    for i, req in enumerate(bench["requests"]["successful"] if outputs else ()):
        req["output_tokens"] = req["output_metrics"]["text_tokens"] = outputs[i % len(outputs)]
        req["output_metrics"]["total_tokens"] = outputs[i % len(outputs)]
    path = tmp_path / f"{version}_{strategy or 'concurrent'}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_synchronous_request_in_flight_at_the_limit_ends_at_the_next_status_change() -> None:
    # worked by hand: one user, limit 2.0; requests sent 0.8 s apart; the one sent at 1.6 has
    # its first token at 1.65 and ends at 2.4, the first status change after the limit
    sent, first, ended = np.array([0.0, 0.8, 1.6]), np.array([0.05, 0.85, 1.65]), \
        np.array([0.8, 1.6, 2.4])
    assert status_change_cut_s(2.0, [sent, first, ended]) == 2.4  # it completes (2.4 <= 2.4)
    # a first token after the limit is a status change from 0.6: the request is cut there
    assert status_change_cut_s(2.0, [sent, np.array([0.05, 0.85, 2.1]), ended]) == 2.1
    assert status_change_cut_s(2.0, [sent, ended]) == 2.4  # 0.5 sends no first_token update
    assert status_change_cut_s(2.0, [sent[:2], ended[:2]]) == math.inf  # none in flight


def test_concurrent_requests_in_flight_are_cancelled_at_the_first_end_after_the_limit() -> None:
    # worked by hand: limit 1.0; in flight then: A (sent 0.5, ends 1.2), B (0.8, 1.5),
    # C (0.9, 1.1), first tokens before the limit: C's end at 1.1 is the first change
    sent, first = np.array([0.5, 0.8, 0.9]), np.array([0.6, 0.9, 0.95])
    ended = np.array([1.2, 1.5, 1.1])
    cut = status_change_cut_s(1.0, [sent, first, ended])
    assert cut == 1.1
    assert list(ended <= cut) == [False, False, True]  # C completes, A and B are cancelled


@pytest.mark.parametrize(("version", "rule"), [
    ("0.4.0", ("grace", ())), ("0.5.4", ("next_status_change", ("sent", "ended"))),
    ("0.6.1", ("next_status_change", ("sent", "first_token", "ended"))),
    ("0.7.3", ("next_status_change", ("sent", "first_token", "ended"))),
    ("0.8.0", ("grace", ())), ("0.8.1", ("grace", ())), ("", ("grace", ()))])
def test_the_cut_rule_of_each_guidellm(version: str, rule: tuple[str, tuple[str, ...]]) -> None:
    parts = tuple(int(p) for p in version.split(".")) if version else ()
    assert cut_rule(parts) == rule


def test_a_stage_says_its_cut_rule() -> None:
    with pytest.raises(ValueError, match=r"RecordedStage\.cut"):
        RecordedStage("0", "closed", None, 1, time_limit_end_s=2.0, cut="next_status_change")
    with pytest.raises(ValueError, match=r"RecordedStage\.cut"):
        RecordedStage("0", "closed", None, 1, cut="grace", status_changes=("sent",))


def test_a_guidellm_0_7_synchronous_request_crossing_the_limit_completes(
        tmp_path: Path) -> None:
    """The 0.8.1 file's grace (0.21 s) cancelled the request a slow simulated server ran
    across the limit (sent at 1.6 s, ended 2.4 s); GuideLLM 0.7.3 let it run to its end."""
    rec = read_recording(_as(tmp_path, "0.7.3", "synchronous"))
    stage = rec.stages[0]
    assert (stage.load, stage.cut) == ("closed", "next_status_change")
    said = " ".join(rec.notes)
    assert "at the first status change" in said
    # the exception is a parenthesis: the sentence goes on to what is cancelled, in order
    assert "runs to its end) are cancelled, as the tool cancels them" in said
    assert "status change" in replay_mode(stage)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].describe()["cut"] == "next_status_change"
    start = plans[0].start_s
    records = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0).records
    sent = records["reason"] != NOT_SENT
    assert (records.loc[sent, "arrival_s"] - start).round(6).tolist() == [0.0, 0.8, 1.6]
    assert (records.loc[sent, "status"] == "completed").all()
    assert records.loc[sent, "finished_s"].max() - start == pytest.approx(2.4)
    assert not (records["reason"] == CANCELLED).any()
    # the same file said as 0.8.1 (its poll): cancelled 0.21 s after the limit, as before
    as_08 = simulate_recording(read_recording(_as(tmp_path, "0.8.1", "synchronous")), CONFIG,
                               cost_model=SLOW, frontend_overhead_s=0.0).records
    assert (as_08["reason"] == CANCELLED).sum() == 1


def test_a_guidellm_0_7_concurrent_stage_is_cut_at_its_first_change_after_the_limit(
        tmp_path: Path) -> None:
    rec = read_recording(_as(tmp_path, "0.7.3", outputs=[4, 9, 13, 16]))
    stage = rec.stages[0]
    assert stage.cut == "next_status_change" and stage.time_limit_end_s is not None
    plans = stage_plans(rec)
    assert plans is not None and plans[0].limit_s is not None
    limit = plans[0].start_s + plans[0].limit_s
    records = simulate_recording(rec, CONFIG, cost_model=SLOW, frontend_overhead_s=0.0).records
    ran = records[records["reason"] != NOT_SENT]
    changes = np.concatenate([ran["arrival_s"], ran["first_token_s"], ran["finished_s"]])
    cut = float(np.nanmin(changes[changes >= limit]))
    done = ran["status"] == "completed"
    cancelled = ran["reason"] == CANCELLED
    assert (ran.loc[done, "finished_s"] <= cut).all()
    assert (ran.loc[cancelled, "finished_s"] > cut).all() and cancelled.sum() >= 1
    assert (done | cancelled).all()
    assert cut - limit != pytest.approx(stage.grace_s)  # not the report's fixed lag


def test_the_docs_say_the_status_change_cut() -> None:
    doc = " ".join((Path(__file__).resolve().parents[3] / "docs" / "recordings.md")
                   .read_text().split())
    assert "the stage's `cut` is `next_status_change`" in doc
    assert "GuideLLM 0.5 to 0.7 check their limit only when a request's status changes" in doc


@pytest.mark.parametrize(("version", "constraint", "changes"), [
    ("0.5.4", "max_seconds", ("sent", "ended")),
    ("0.7.4", "max_duration", ("sent", "first_token", "ended")),
])
def test_real_0_5_and_0_7_time_limited_reports_read_with_the_status_change_cut(
        version: str, constraint: str, changes: tuple[str, ...]) -> None:
    """Real reports (make_recording_fixtures.sh guidellm-timed-0.5.4 guidellm-timed-0.7.4): a
    closed loop of 4 stopped after 2 s; 0.5.4 names its constraint max_seconds
    (``--max-seconds``), 0.7.4 max_duration. Each is read time-limited with its version's cut,
    every request listed counted; in 0.7.4's every cancelled one was still running at the first
    status change at or after the limit (its first token came after it), as the rule says."""
    path = FIXTURE.parents[1] / f"guidellm-{version}" / "duration2_concurrent4.json"
    bench = json.loads(path.read_text())["benchmarks"][0]
    rec = read_recording(path)
    (stage,) = rec.stages
    assert (stage.load, stage.max_concurrency, stage.cut, stage.status_changes) == (
        "closed", 4, "next_status_change", changes)
    assert any(f"2 s time limit (GuideLLM {constraint})" in n for n in rec.notes)
    listed = {k: len(bench["requests"][k] or []) for k in ("successful", "incomplete")}
    assert rec.counts["num_incomplete"] == listed["incomplete"] > 0
    assert rec.counts["num_measured"] == listed["successful"]
    if version == "0.7.4":
        stop = bench["scheduler_state"]["end_queuing_constraints"][constraint]["progress"][
            "stop_time"]
        reqs = [r for k in ("successful", "incomplete") for r in bench["requests"][k]]
        changed = [t for r in reqs for t in (r["request_start_time"],
                                             r["info"]["timings"]["first_token_iteration"],
                                             r["request_end_time"]) if t and t >= stop]
        cut = min(changed)
        assert all(r["request_end_time"] <= cut for r in bench["requests"]["successful"])
        assert all(r["request_start_time"] < cut < r["request_end_time"]
                   for r in bench["requests"]["incomplete"])


@pytest.mark.parametrize(("version", "seen"), [
    ("0.5.4", ": here 3 request(s) completed and 4 were sent after it, which the replay cancels "
              "or does not send"),
    ("0.7.4", ""),
])
def test_the_workers_poll_lag_is_said_with_what_the_real_report_shows(
        version: str, seen: str) -> None:
    """GuideLLM 0.5.4's real time-limited report: after the first status change at or after
    the limit (an end 2 ms after it) 3 more requests completed and 4 were sent (cancelled
    later), as its workers act only at their next 0.1 s poll of the event; the replay cuts at
    the change itself, so a note says so. 0.7.4's run shows none."""
    path = FIXTURE.parents[1] / f"guidellm-{version}" / "duration2_concurrent4.json"
    said = [n for n in read_recording(path).notes if "next poll" in n]
    assert said == ["stage '0: concurrent x4': GuideLLM's workers act on the limit at their "
                    "next poll for it, up to 0.1 s after the status change that reached it, "
                    f"which the replay does not model{seen}"]
    assert not any("next poll" in n for n in read_recording(FIXTURE).notes)  # 0.8: grace
