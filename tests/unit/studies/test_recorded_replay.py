"""Closed loop replayed as closed loop (issue: users' own recordings in, trusted answers out):
each stage of a recording simulated in the load mode its tool ran it in."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import make_policy
from kvbudget.results.recording import load_words
from kvbudget.results.recordings import RecordedStage, Recording, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.recorded_replay import replay_mode, stage_plans
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.ticks import Ticks
from tests.conftest import make_workload

ENGINE = EngineConfig(num_gpu_blocks=4000, max_num_seqs=64, max_num_batched_tokens=1024)
FAST = LinearCostModel(intercept_s=0.01, per_prefill_token_s=1e-5, per_decode_seq_s=0.0,
                       per_context_token_s=0.0)
SLOW = dataclasses.replace(FAST, intercept_s=0.02, per_prefill_token_s=2e-5)  # every step 2x


def test_a_capped_open_loop_sends_at_its_time_or_when_a_slot_frees() -> None:
    # one slot: the second request (due at 0.1 s) waits for the first to finish; the third is
    # due at 10 s, long after both finished, and is sent then
    w = make_workload([0.0, 0.1, 10.0], [10, 10, 10], [50, 50, 50])  # ~0.5 s each
    cfg = SimConfig(engine=ENGINE, cost_model=FAST,
                    closed_loop=ClosedLoop(num_users=1, not_before_arrival=True))
    rec = simulate(w, make_policy("unlimited"), cfg).records.sort_values("request_id")
    arrival, finished = rec["arrival_s"].to_numpy(), rec["finished_s"].to_numpy()
    assert arrival[0] == 0.0
    assert arrival[1] == pytest.approx(finished[0]) and finished[0] > 0.1
    assert arrival[2] == 10.0
    # the plain closed loop sends the third one as soon as the second ended
    cfg = dataclasses.replace(cfg, closed_loop=ClosedLoop(num_users=1))
    rec = simulate(w, make_policy("unlimited"), cfg).records.sort_values("request_id")
    assert rec["arrival_s"].iloc[2] == pytest.approx(rec["finished_s"].iloc[1])


def _recording(tmp_path: Path, n: int = 120) -> Recording:
    """Two stages of 60 requests: 'a' at 20 req/s, then 'b' 30 s later."""
    rng = np.random.default_rng(3)
    arrival = np.concatenate([np.arange(n // 2) / 20.0, 30 + np.arange(n // 2) / 20.0])
    frame = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": rng.integers(100, 400, n),
                          "output_tokens": rng.integers(50, 100, n), "ttft_s": 0.05,
                          "e2e_s": 1.0, "stage": ["a"] * (n // 2) + ["b"] * (n // 2)})
    path = tmp_path / "rec.csv"
    frame.to_csv(path, index=False)
    return read_recording(path)


def _throughput(records: pd.DataFrame) -> float:
    done = records[records["status"] == "completed"]
    span = float(done["finished_s"].max() - done["arrival_s"].min())
    return float(done["output_tokens"].sum()) / span


def test_a_closed_stage_slows_down_with_a_slower_server_an_open_one_does_not(
        tmp_path: Path) -> None:
    base = _recording(tmp_path)
    closed = dataclasses.replace(base, stages=(RecordedStage("a", "closed", None, 4),
                                               RecordedStage("b", "closed", None, 4)))
    config = SimConfig(engine=ENGINE)
    ratios = {}
    for name, rec in (("closed", closed), ("open", base)):
        fast = simulate_recording(rec, config, cost_model=FAST).records
        slow = simulate_recording(rec, config, cost_model=SLOW).records
        assert (fast["status"] == "completed").all() and (slow["status"] == "completed").all()
        ratios[name] = _throughput(slow[slow["request_id"] < 60]) / _throughput(
            fast[fast["request_id"] < 60])
    # 4 users of a server twice as slow send half as many requests a second
    assert ratios["closed"] == pytest.approx(0.5, rel=0.05)
    # an open loop at 20 req/s offers the same load: throughput follows the offered rate (the
    # slower server's drain adds a tail)
    assert ratios["open"] > 0.75


def test_stages_are_joined_on_the_recordings_clock_and_ids(tmp_path: Path) -> None:
    rec = dataclasses.replace(_recording(tmp_path), stages=(
        RecordedStage("a", "closed", None, 2), RecordedStage("b", "open", 20.0)))
    plans = stage_plans(rec)
    assert plans is not None and [p.start_s for p in plans] == [0.0, 30.0]
    run = simulate_recording(rec, SimConfig(engine=ENGINE), cost_model=FAST)
    records = run.records
    assert records["request_id"].tolist() == rec.measured["request_id"].tolist()
    b = records[records["request_id"] >= 60]
    # the open stage keeps its recorded send times, on the recording's clock
    assert b["arrival_s"].to_numpy() == pytest.approx(rec.workload.arrival_s[60:])
    a = records[records["request_id"] < 60]
    assert a["arrival_s"].min() == 0.0 and a["arrival_s"].max() < 30
    assert [s["replayed_as"] for s in run.summary["stages"]] == [
        "closed loop, 2 users", "open loop at the recorded send times"]
    assert (records["status"] == "completed").all()
    times = run.timeline["time_s"].to_numpy()
    assert times.min() < 30 <= times.max()  # both stages' samples, on the recording's clock
    assert np.all(np.diff(times) >= 0)
    # what it simulated is said of the stages together (a notebook's repr of the joined run
    # said 'workload None: 0 requests' and no engine knobs: the joined summary had neither)
    assert run.summary["workload"]["num_requests"] == len(rec) == 120
    assert run.summary["engine_knobs"]["max_num_seqs"] == 64
    assert repr(run).splitlines()[1].startswith("simulated: ")
    assert "max_num_seqs 64" in repr(run) and f"{len(rec):,} requests" in repr(run)


def test_a_stage_sent_all_at_once_is_written_as_valid_json(tmp_path: Path) -> None:
    # a --request-rate inf stage beside a closed one: summary.json held "request_rate":
    # Infinity, which JSON has not (jq, JSON.parse refuse the file)
    import json

    rec = dataclasses.replace(_recording(tmp_path), stages=(
        RecordedStage("a", "closed", None, 2), RecordedStage("b", "open", float("inf"))))
    run = simulate_recording(rec, SimConfig(engine=ENGINE), cost_model=FAST)
    run.write(tmp_path / "run")

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} in summary.json")

    summary = json.loads((tmp_path / "run" / "summary.json").read_text(),
                         parse_constant=no_constant)
    assert [s["request_rate"] for s in summary["stages"]] == [None, "inf"]


def test_an_open_recording_is_one_run_as_before(tmp_path: Path) -> None:
    rec = dataclasses.replace(_recording(tmp_path), stages=(
        RecordedStage("a", "open", 20.0), RecordedStage("b", "unknown")))
    assert stage_plans(rec) is None
    assert replay_mode(RecordedStage("b", "unknown")).endswith("(load mode not recorded)")
    assert replay_mode(RecordedStage("c", "capped", 8.0, 4)).endswith("at most 4 in flight")


def test_a_tick_paced_capped_loop_sends_only_at_its_ticks_and_skips_busy_ones() -> None:
    # AIPerf's --request-rate 10 --concurrency 1 (constant): a request waiting for the slot
    # goes at the first tick after the slot frees, and the ticks it found busy are lost (no
    # catch-up); the FIFO wait sent it the instant the slot freed, and the next one at once
    w = make_workload([0.0, 0.1, 0.2], [10, 10, 10], [50, 50, 50])  # ~0.5 s each
    loop = ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=10.0)
    cfg = SimConfig(engine=ENGINE, cost_model=FAST, closed_loop=loop)
    rec = simulate(w, make_policy("unlimited"), cfg).records.sort_values("request_id")
    arrival, finished = rec["arrival_s"].to_numpy(), rec["finished_s"].to_numpy()
    assert arrival[0] == 0.0
    for k in (1, 2):
        tick = math.ceil(finished[k - 1] / 0.1 - 1e-9) * 0.1
        assert arrival[k] == pytest.approx(tick) and arrival[k] >= finished[k - 1]
    assert arrival[1] > finished[0] + 1e-6  # not when the slot freed
    # Poisson ticks are drawn on from the run's seed: the same every run, on or after a free slot
    poisson = dataclasses.replace(cfg, closed_loop=dataclasses.replace(loop,
                                                                       tick_pattern="poisson"))
    runs = [simulate(w, make_policy("unlimited"), poisson).records.sort_values("request_id")
            for _ in range(2)]
    assert np.array_equal(runs[0]["arrival_s"].to_numpy(), runs[1]["arrival_s"].to_numpy())
    sends, ends = runs[0]["arrival_s"].to_numpy(), runs[0]["finished_s"].to_numpy()
    assert (sends[1:] >= ends[:-1]).all()
    with pytest.raises(ValueError, match="tick_rate_per_s must be a finite rate > 0 of a loop "
                                         "with not_before_arrival"):
        ClosedLoop(num_users=1, tick_rate_per_s=10.0)


@pytest.mark.parametrize("pattern", ["constant", "poisson"])
def test_a_long_run_of_busy_ticks_is_skipped_in_one_draw(pattern: str) -> None:
    # AIPerf at 10,000 req/s capped at a few slots of a slow server skips most ticks: the
    # first tick at or after a free slot is drawn directly, not the million before it
    loop = ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=1e4,
                      tick_pattern=pattern)  # type: ignore[arg-type]
    ticks = Ticks([0.0, 0.0001], loop, seed=0)
    ticks.take(0.0)
    assert ticks.first_at_or_after(0.0) == 0.0001  # the given ticks first
    ticks.take(0.0)
    t = ticks.first_at_or_after(100.0)
    assert t >= 100.0 and len(ticks.times) == 3
    if pattern == "constant":
        assert t == pytest.approx(100.0)  # on the grid
    ticks.take(100.0)
    assert ticks.first_at_or_after(100.0) > t and len(ticks.times) == 4
    with pytest.raises(ValueError, match="no think time"):
        ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=10.0,
                   think_time_s=1.0)


def test_the_joined_stages_keep_the_dtype_and_every_stages_too_large_counts(
        tmp_path: Path) -> None:
    """The summary of a recording simulated in stages dropped ``weight_dtype`` and
    ``gateway_too_large`` (what a single run's summary says), so the joined run's lines said
    neither the weights' dtype nor which too-large refusals the context accounts for."""
    frame = pd.DataFrame({
        "arrival_s": np.r_[np.arange(4) / 20.0, 30 + np.arange(4) / 20.0],
        "prompt_tokens": [100, 300_000, 100, 100, 100, 300_000, 100, 100],
        "output_tokens": 10, "ttft_s": 0.05, "e2e_s": 1.0, "stage": ["a"] * 4 + ["b"] * 4})
    frame.to_csv(tmp_path / "rec.csv", index=False)
    rec = dataclasses.replace(read_recording(tmp_path / "rec.csv"), stages=(
        RecordedStage("a", "closed", None, 2), RecordedStage("b", "open", 20.0)))
    assert stage_plans(rec) is not None  # simulated stage by stage, then joined
    run = simulate_recording(rec, SimConfig(engine=ENGINE), cost_model=FAST)
    one = simulate_recording(dataclasses.replace(rec, stages=()), SimConfig(engine=ENGINE),
                             cost_model=FAST)  # one run, as the simulator writes it
    assert run.summary["weight_dtype"] == one.summary["weight_dtype"] == "bfloat16"
    # one prompt beyond the context in each stage: both counted
    assert run.summary["gateway_too_large"]["prompt_too_long"] == 2
    assert one.summary["gateway_too_large"]["prompt_too_long"] == 2


def test_a_closed_loop_of_one_user_is_said_in_the_singular() -> None:
    # "closed loop of 1 users; replayed as closed loop, 1 users" (an evalscope sweep's first run)
    one, two = RecordedStage("a", "closed", None, 1), RecordedStage("b", "closed", None, 2)
    assert load_words(one) == "closed loop of 1 user"
    assert replay_mode(one) == "closed loop, 1 user"
    assert load_words(two) == "closed loop of 2 users"
    assert replay_mode(two) == "closed loop, 2 users"
