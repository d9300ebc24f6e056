"""Closed-loop load in the live replay: N users, each sending after its last answer."""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.live.replay_ticks import TickedUsers
from kvbudget.live.run_dir import TIMELINE_PART
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.studies.recorded_replay import stage_plans
from kvbudget.workloads import from_columns
from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.ticks import Ticks
from tests.unit.live.test_backends_live_gateway import (  # noqa: F401 (the fixture)
    Fake,
    _workload,
    fake,
    written_rows,
)


def test_closed_loop_keeps_num_users_in_flight(fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    fake.state.token_s = 0.001
    # trace times far apart: an open-loop replay would send one at a time
    w = _workload(12, 20, 10, gap_s=100.0)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02,
                          tiers=(INTERACTIVE, BATCH), closed_loop=ClosedLoop(3))
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete and not out.error
    rec = out.records.sort_values("request_id")
    assert (rec["status"] == "completed").all()
    assert fake.state.max_active <= 3
    arrival = rec["arrival_s"].to_numpy()
    finished = rec["finished_s"].to_numpy()
    assert arrival.max() < 100.0  # sent as users freed up, not at the trace's times
    for k in range(3, 12):  # the k-th send waits for k - 2 answers (3 users)
        assert int((finished <= arrival[k] + 1e-9).sum()) >= k - 2
    inflight = [int(((arrival <= a) & (finished > a)).sum()) for a in arrival]
    assert max(inflight) <= 3 and np.all(np.diff(np.sort(arrival)) >= 0)


@pytest.mark.parametrize("pattern", ["constant", "poisson"])
def test_a_loop_paced_by_ticks_sends_each_request_at_a_tick_a_busy_tick_skipped(
        fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        pattern: Literal["constant", "poisson"]) -> None:
    # AIPerf's --request-rate R --concurrency C: a request goes only at a tick, the first
    # after a slot frees (a tick finding both slots busy is skipped); the live replay refused
    # it, and sending as a slot frees would send before the tick
    fake.state.token_s = 0.01
    # the first two streams send no token until the replay's clock has passed 0.12 s (its
    # timeline says so): both slots stay busy across the ticks at 0.05 and 0.1 s, which are
    # skipped on any machine, whatever the token time
    run = tmp_path / "run"
    fake.state.gate = lambda: any(row["time_s"] >= 0.12
                                  for row in written_rows(run / TIMELINE_PART))
    seen: dict[int, float] = {}
    ended = TickedUsers.ended

    def spy(self: TickedUsers, row: int, t: float) -> None:
        seen[row] = t
        ended(self, row, t)

    monkeypatch.setattr(TickedUsers, "ended", spy)
    taken: list[tuple[Ticks, float]] = []  # the replay's own schedule and the ticks it gave
    take = Ticks.take

    def take_spy(self: Ticks, t: float) -> float:
        tick = take(self, t)
        taken.append((self, tick))
        return tick

    monkeypatch.setattr(Ticks, "take", take_spy)
    first = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25]  # AIPerf's recorded issue times: the first ticks
    w = from_columns(first + [0.25] * 2, [20] * 8, [12] * 8, tiers=["batch"] * 8)
    loop = ClosedLoop(2, not_before_arrival=True, tick_rate_per_s=20.0, tick_pattern=pattern)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop, seed=3)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=3, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, run, meta=meta)
    assert out.complete and not out.error
    rec = out.records.sort_values("request_id")
    arrival = rec["arrival_s"].to_numpy()
    assert fake.state.max_active <= 2 and (np.diff(arrival) >= 0).all()
    replay_ticks, replay_took = taken[0][0], [tick for _, tick in taken]
    assert all(own is replay_ticks for own, _ in taken)
    # the ticks each row took, for the ends the replay saw: the first two at once, then each
    # at the first tick not yet taken at or after a slot's free time (the simulator's Ticks).
    # A Poisson schedule draws its ticks as it is asked (Ticks: a query earlier than a drawn
    # tick draws in the gap), and the replay asks at times a loaded machine moves: its own
    # ticks are checked there, each at or after its slot's free time; a grid's are the same
    # whoever asks, so they are worked out again here
    ticks = Ticks(list(w.arrival_s), loop, seed=3)
    free = [0.0, 0.0]
    took = []
    for row in range(len(w)):
        slot_free = heapq.heappop(free)
        took.append(ticks.take(slot_free))
        if pattern == "poisson":
            assert replay_took[row] >= slot_free - 1e-9, (row, replay_took, slot_free)
        heapq.heappush(free, seen[row])
    if pattern == "poisson":
        took, ticks = replay_took, replay_ticks
    assert (arrival >= np.array(took) - 1e-9).all(), (arrival, took)
    # one request a tick: the recording's issue times hold 0.25 three times (three ticks
    # there), so a time may be taken as often as the schedule holds it, never more
    schedule = Counter(ticks.times)
    assert all(n <= schedule[t] for t, n in Counter(took).items()), (took, ticks.times)
    # the first two requests held their slots across the ticks at 0.05 and 0.1 s (the gate):
    # those were skipped, so the last rows take ticks past the recording's
    assert any(t not in first for t in took) and sorted(took) == took


def test_a_capped_loop_sends_each_request_at_its_time_once_a_slot_is_free(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    # vllm bench serve --request-rate R --max-concurrency C: each request waits for its due
    # time and for one of C slots (ClosedLoop.not_before_arrival, as the simulator's users
    # send it); the live replay refused it, and replaying it as a closed loop would send the
    # later requests before their time
    fake.state.token_s = 0.001
    # no token until both slots are taken: rows 0-3 are due at once, so the slots bind them
    fake.state.gate = lambda: fake.state.max_active >= 2 or fake.state.completions >= 2
    due = [0.0, 0.0, 0.0, 0.0, 0.4, 0.4, 0.8]
    w = from_columns(due, [20] * len(due), [3] * len(due), tiers=["batch"] * len(due))
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=ClosedLoop(2, not_before_arrival=True))
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete and not out.error
    rec = out.records.sort_values("request_id")
    assert (rec["status"] == "completed").all()
    arrival = rec["arrival_s"].to_numpy()
    finished = rec["finished_s"].to_numpy()
    assert fake.state.max_active <= 2
    assert (arrival >= np.array(due) - 1e-9).all()  # never before its time
    assert (np.diff(arrival) >= 0).all()  # in their order
    for k in range(2, len(due)):  # the k-th send waits for k - 1 answers (2 slots)
        assert int((finished <= arrival[k] + 1e-9).sum()) >= k - 1


def test_a_time_limited_loop_needs_the_replays_time_limit_not_run_whole() -> None:
    # the live users never read send_until_s: the replay keeps it as its time_limit
    # (tests/unit/live/test_replay_time_limit.py), and refuses a loop's limit without it
    loop = ClosedLoop(num_users=2, send_until_s=2.0)
    with pytest.raises(ValueError, match=r"the live replay keeps a time limit given as"):
        ReplayConfig(ServerTarget("http://127.0.0.1:1"), closed_loop=loop)
    with pytest.raises(ValueError, match=r"send_until_s must be a finite time >= 0"):
        ClosedLoop(num_users=2, send_until_s=-1.0)



@pytest.mark.parametrize(("loop", "load"), [(ClosedLoop(3), "closed"),
                                            (ClosedLoop(3, not_before_arrival=True), "capped"),
                                            (ClosedLoop(3, think_time_s=0.01), None)])
def test_a_run_directory_says_the_loop_its_replay_sent_in(fake: Fake, tmp_path: Path,  # noqa: F811
                                                         loop: ClosedLoop,
                                                         load: str | None) -> None:
    # validate --records RUNDIR simulated a closed-loop replay at its recorded send times (the
    # run directory kept no loop), so the simulated throughput followed the measured one by
    # construction; the loop is now read back and simulated, or said where it cannot be
    fake.state.token_s = 0.001
    w = _workload(6, 20, 3)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = tmp_path / "run"
    assert replay(w, make_policy("unlimited"), config, out, meta=meta).complete
    rec = read_recording(out)
    plans = stage_plans(rec)
    if load is None:
        assert rec.stages == () and plans is None  # at the recorded sends, said
        assert any("a closed loop of 3 users with a think time of 0.01 s" in n and
                   "simulated at its recorded send times instead" in n for n in rec.notes)
        return
    assert [(s.load, s.max_concurrency) for s in rec.stages] == [(load, 3)]
    assert plans is not None and len(plans) == 1 and plans[0].loop is not None
    assert plans[0].loop.num_users == 3 and len(plans[0].rows) == 6
    assert plans[0].loop.not_before_arrival == (load == "capped")
    assert any(f"the replay sent its requests by a {load} loop of 3 users" in n
               for n in rec.notes), rec.notes


def test_a_malformed_loop_in_replay_json_is_refused_naming_its_field(fake: Fake,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    fake.state.token_s = 0.001
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=ClosedLoop(2))
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = tmp_path / "run"
    assert replay(_workload(4, 20, 3), make_policy("unlimited"), config, out, meta=meta).complete
    told = json.loads((out / "replay.json").read_text())
    for bad, field in (({**told["closed_loop"], "num_users": 0}, "closed_loop.num_users"),
                       ({**told["closed_loop"], "think_time_s": -1}, "closed_loop.think_time_s"),
                       ("four users", "closed_loop")):
        (out / "replay.json").write_text(json.dumps({**told, "closed_loop": bad}))
        with pytest.raises(TraceError, match=re.escape(field)):
            read_recording(out)
