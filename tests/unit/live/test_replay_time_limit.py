"""A stage its load tool cut at a time limit, replayed live as the tool ran it.

``kvbudget replay --records`` refused such a stage ("the live replay sends every recorded
request and waits for each"): it now sends nothing due after the limit (measured from the
stage's first send), cancels what still runs its grace period after it (the stream closed:
vLLM aborts the request), and records each request as the simulator's records say it
(``client_timeout`` with ``time_limit_cancelled`` or ``time_limit_not_sent``), so that
``validate --records`` of the run directory simulates the same limit. The fake server is
sequenced by events (a gate that holds every stream after N completions), never by sleeps; the
replay's own clock keeps the limit.

AIPerf stops issuing when no time is left (ai-dynamo/aiperf
``src/aiperf/timing/phase/stop_conditions.py`` ``DurationStopCondition``: ``time_left > 0``;
``lifecycle.py`` ``time_left_in_seconds``, the duration plus ``grace_period_sec`` for the wait
on requests in flight): a send at the limit's very instant is a matter of nanoseconds there;
the replay sends a request due at the limit, as the simulator does (``simulator/users.py``:
a send later than ``send_until_s`` is never made)."""

from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.policies.clients import NO_RETRY
from kvbudget.results.recordings import read_recording
from kvbudget.results.records import TIME_LIMIT_CANCELLED, TIME_LIMIT_NOT_SENT
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import live_stage, stage_plans
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads import from_columns
from kvbudget.workloads.closed_loop import ClosedLoop, TimeLimit
from kvbudget.workloads.errors import TraceError
from tests.unit.live.test_backends_live_gateway import Fake, _cli, fake  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"
GUIDELLM_TIMED = RECORDINGS / "guidellm-0.8.1" / "duration2_concurrent4.json"
"""Made by GuideLLM 0.8.1 (``make_recording_fixtures.sh guidellm-timed``): a concurrent
benchmark of 4 users stopped by its 2 s ``max_duration``, 39 requests."""


def _meta(url: str) -> ReplayMeta:
    return ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=url)


def test_a_closed_stage_cut_at_its_limit_stops_sending_and_cancels_after_its_grace(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    # GuideLLM 0.8.1's 2 s concurrent benchmark (cancelled 0.21 s after its limit, the
    # report's end_requests_time): the server completes 8 requests, then holds every stream,
    # so at the limit each of the 4 users has one in flight, cancelled at the grace's end,
    # and the rest are never sent
    st = fake.state
    st.token_s = 0.001
    st.gate = lambda: st.completions < 8
    out = tmp_path / "run"
    code, stdout, stderr = _cli("replay", "--url", fake.url, "--records", str(GUIDELLM_TIMED),
                                "--out", str(out), "--poll-period", "0.05")
    said = " ".join(stderr.split())
    assert code == 0, said
    assert "replaying 39 requests" in said and "closed loop, 4 users, time-limited" in said
    rec = read_recording(out)  # the run directory, as validate --records reads it
    measured = rec.measured
    status = measured["status"].astype(str)
    cancelled = status == f"client_timeout ({TIME_LIMIT_CANCELLED})"
    not_sent = status == f"client_timeout ({TIME_LIMIT_NOT_SENT})"
    completed = status == "completed"
    assert int(cancelled.sum()) == 4  # the 4 users' requests held by the server
    assert int(completed.sum()) >= 8 and int((completed | cancelled | not_sent).sum()) == 39
    assert int(not_sent.sum()) == 35 - int(completed.sum())
    # the summary counts them as validate's simulation does (time_limit_said), neither done
    # nor refused: it said neither before, and its refused: line called them refusals
    shown = " ".join(stdout.split())
    assert (f"time limit: the replay had not sent {int(not_sent.sum())} of the recorded "
            "requests by the tool's time limit and 4 were still running after its grace "
            "period (cancelled, as the tool does)") in shown, shown
    assert not re.search(r"^refused: ", stdout, re.M) and TIME_LIMIT_NOT_SENT not in shown
    summary = json.loads((out / "summary.json").read_text())
    assert any(line.startswith("time limit: ") for line in summary["said"])
    assert len(st.bodies) == 39 - int(not_sent.sum())  # the server saw only those sent
    sent = rec.workload.arrival_s[~not_sent.to_numpy()]
    assert float(sent.max()) <= 2.0  # nothing sent after the limit
    # a row never sent "arrives" at the limit, or at its own later recorded time (GuideLLM's
    # workers sent 4 after it: status after_limit), so the rows keep their order
    unsent_at = rec.workload.arrival_s[not_sent.to_numpy()]
    assert (unsent_at >= 2.0).all() and (unsent_at == 2.0).sum() >= int(not_sent.sum()) - 4
    # a cancelled request is offered with its declared maximum (test below)
    np.testing.assert_array_equal(rec.workload.output_tokens[cancelled.to_numpy()],
                                  rec.workload.max_output_tokens[cancelled.to_numpy()])
    told = json.loads((out / "replay.json").read_text())
    assert told["closed_loop"]["send_until_s"] == 2.0
    assert told["time_limit"]["send_until_s"] == 2.0
    assert told["time_limit"]["grace_s"] == pytest.approx(0.2077648639678955)
    # validate --records RUNDIR simulates the same limit: 4 users, nothing sent after 2 s,
    # those still running 0.21 s later cancelled
    (stage,) = rec.stages
    assert (stage.load, stage.max_concurrency, stage.time_limit_end_s) == ("closed", 4, 2.0)
    assert stage.grace_s == pytest.approx(0.2077648639678955)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].loop is not None
    assert plans[0].loop.send_until_s == pytest.approx(2.0 - plans[0].start_s)
    slow = LinearCostModel(intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                           per_context_token_s=0.0)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=400, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=4096))
    sim = simulate_recording(rec, config, cost_model=slow).records
    reasons = set(sim["reason"].astype(str))
    assert TIME_LIMIT_NOT_SENT in reasons and TIME_LIMIT_CANCELLED in reasons
    simulated_sent = sim["reason"] != TIME_LIMIT_NOT_SENT
    assert float(sim.loc[simulated_sent, "arrival_s"].max()) <= 2.0


@pytest.mark.parametrize(("grace_s", "ends"), [(math.inf, "completed"),
                                               (0.0, f"client_timeout/{TIME_LIMIT_CANCELLED}")])
def test_an_open_stage_sends_a_request_due_at_the_limit_and_none_after(
        fake: Fake, tmp_path: Path, grace_s: float, ends: str) -> None:  # noqa: F811
    # the boundary: request 2 is due exactly at the 0.1 s limit and is sent (the simulator's
    # rule), request 3 is due after it and never is; with no grace period the server holds
    # every stream and each request sent is cancelled at the limit
    st = fake.state
    st.token_s = 0.001
    if grace_s == 0:
        st.gate = lambda: False
    w = from_columns([0.0, 0.05, 0.1, 0.15], [20] * 4, [4] * 4, tiers=["batch"] * 4)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.05, tiers=(INTERACTIVE, BATCH),
                          time_limit=TimeLimit(0.1, grace_s))
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=_meta(fake.url))
    assert not out.error
    rec = out.records.sort_values("request_id")
    said = (rec["status"] + np.where(rec["reason"] != "", "/" + rec["reason"], "")).tolist()
    assert said == [ends] * 3 + [f"client_timeout/{TIME_LIMIT_NOT_SENT}"]
    assert rec["arrival_s"].iloc[3] == pytest.approx(0.15)  # its due time, never sent
    assert np.isnan(rec["ttft_s"].iloc[3])
    told = json.loads((tmp_path / "run" / "replay.json").read_text())
    assert told["time_limit"] == {"send_until_s": 0.1,
                                  "grace_s": "inf" if grace_s == math.inf else grace_s}
    if grace_s == math.inf:  # (with none completed, validate has nothing to compare)
        assert len(st.bodies) == 3
        (stage,) = read_recording(tmp_path / "run").stages
        assert (stage.load, stage.time_limit_end_s, stage.grace_s) == ("open", 0.1, grace_s)


def test_a_cancelled_requests_tokens_so_far_are_not_offered_as_its_output(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    # a stream asking 8 tokens or more sends one, then only keep-alive comments until the
    # client leaves: requests 1 and 2 have one token each when the grace period ends; the run
    # directory offered that 1 token as their output (a request that short, simulated, ends in
    # time), and now offers their declared maximum, as a request that never ran
    fake.state.token_s = 0.001
    fake.state.endless_min_tokens = 8
    w = from_columns([0.0, 0.01, 0.02], [20] * 3, [4, 12, 12], tiers=["batch"] * 3)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.05, tiers=(INTERACTIVE, BATCH),
                          time_limit=TimeLimit(0.3, 0.2))
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=_meta(fake.url))
    rec = out.records.sort_values("request_id")
    assert rec["reason"].tolist() == ["", TIME_LIMIT_CANCELLED, TIME_LIMIT_CANCELLED]
    assert rec["output_tokens"].tolist() == [4, 1, 1]  # what the client saw
    read = read_recording(tmp_path / "run")
    assert read.workload.output_tokens.tolist() == [4, 12, 12]
    told = json.loads((tmp_path / "run" / "replay.json").read_text())
    for bad, field in (({"send_until_s": -1}, "time_limit.send_until_s"),
                       ({"send_until_s": 0.3, "grace_s": "long"}, "time_limit.grace_s"),
                       ("0.3 s", "time_limit")):
        (tmp_path / "run" / "replay.json").write_text(json.dumps({**told, "time_limit": bad}))
        with pytest.raises(TraceError, match=re.escape(field)):
            read_recording(tmp_path / "run")


def test_a_time_limit_without_its_config_or_with_client_models_or_resumed_is_refused(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    target = ServerTarget("http://127.0.0.1:1")
    with pytest.raises(ValueError, match=r"closed_loop.send_until_s 2: the live replay keeps"):
        ReplayConfig(target, closed_loop=ClosedLoop(num_users=2, send_until_s=2.0))
    with pytest.raises(ValueError, match=r"closed_loop.send_until_s 2: the live replay keeps"):
        ReplayConfig(target, closed_loop=ClosedLoop(num_users=2, send_until_s=2.0),
                     time_limit=TimeLimit(1.0))
    ReplayConfig(target, closed_loop=ClosedLoop(num_users=2, send_until_s=2.0),
                 time_limit=TimeLimit(2.0, 0.5))
    with pytest.raises(ValueError, match="not with client models"):
        ReplayConfig(target, clients=(("batch", NO_RETRY),), time_limit=TimeLimit(1.0))
    with pytest.raises(ValueError, match=r"time_limit\.grace_s must be >= 0"):
        TimeLimit(1.0, -1.0)
    fake.state.token_s = 0.001
    w = from_columns([0.0, 0.01], [20] * 2, [4] * 2, tiers=["batch"] * 2)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.05, tiers=(INTERACTIVE, BATCH),
                          time_limit=TimeLimit(5.0))
    assert replay(w, make_policy("unlimited"), config, tmp_path / "run",
                  meta=_meta(fake.url)).complete
    with pytest.raises(ValueError, match="a time-limited replay is not resumed"):
        replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=_meta(fake.url),
               resume=True)


def test_a_stage_whose_tool_cut_at_a_status_change_is_refused_saying_what_to_do(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    # hand-made edge case: the GuideLLM 0.8.1 report said as 0.7.3, which cancels at the
    # first status change after its limit (results/recorded_guidellm_cut.py): not a fixed
    # grace period, which is all the live replay keeps
    doc: dict[str, Any] = json.loads(GUIDELLM_TIMED.read_text())
    doc["metadata"]["guidellm_version"] = "0.7.3"
    path = tmp_path / "0.7.3.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"GuideLLM 0\.5-0\.7"):
        live_stage(read_recording(path))
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out",
                           str(tmp_path / "run"))
    said = " ".join(stderr.split())
    assert code == 2 and "record the load again with GuideLLM 0.8 or later" in said, said
    assert "`kvbudget validate --records` simulates it as the tool ran it" in said
    assert not fake.state.bodies  # nothing sent


def test_aiperfs_time_limited_stage_awaits_its_warm_up_and_keeps_its_limit() -> None:
    # AIPerf 0.13.0 --benchmark-duration 2 --benchmark-grace-period 0 at concurrency 4 (made
    # by AIPerf, with 2 warm-up requests): its limit 2 s after its first profiling send, its
    # warm-up rows awaited whatever the limit (a phase of their own), as the simulator cuts it
    rec = read_recording(RECORDINGS / "aiperf-0.13.0" / "duration2_concurrency4_grace0.jsonl")
    workload, loop, mode, limit = live_stage(rec)
    (stage,) = rec.stages
    assert loop is not None and limit is not None and "time-limited" in mode
    start = float(rec.workload.arrival_s.min())
    assert stage.time_limit_end_s is not None
    assert limit.send_until_s == pytest.approx(stage.time_limit_end_s - start)
    assert loop.send_until_s == limit.send_until_s and limit.grace_s == 0.0
    warm = np.flatnonzero(rec.measured["status"].astype(str).to_numpy() == "warmup")
    assert limit.awaited_rows == frozenset(warm.tolist()) and len(warm) == 2
    assert len(workload) == len(rec.workload)


def test_a_task_cancelled_before_it_ran_leaves_no_coroutine_unawaited() -> None:
    # a request admitted and cancelled in one step of the loop (a time limit's grace of 0):
    # its task never started the wrapper, and the attempt's coroutine inside it was collected
    # never awaited ('RuntimeWarning: coroutine ... was never awaited'; a failure under
    # pytest's unraisable-exception check, seen beside two CPU-bound processes)
    import asyncio
    import gc
    import warnings

    from kvbudget.live.replay import _task_of

    ran: list[bool] = []

    async def attempt() -> None:
        ran.append(True)

    async def main() -> None:
        task = _task_of(attempt())
        task.cancel()  # before the loop runs it
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert not ran
    assert not [w for w in caught if "never awaited" in str(w.message)], caught
