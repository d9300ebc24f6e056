"""Closed-loop load in the live replay: N users, each sending after its last answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.policies import make_policy
from kvbudget.workloads.closed_loop import ClosedLoop
from tests.unit.live.test_backends_live_gateway import (  # noqa: F401 (the fixture)
    BATCH,
    INTERACTIVE,
    Fake,
    _workload,
    fake,
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


def test_a_capped_loop_is_refused_by_the_live_replay_not_run_as_a_closed_one() -> None:
    # the live users send when their last request ended and never read not_before_arrival or
    # the ticks: a capped loop (AIPerf's or vllm bench's --request-rate R with a cap) was
    # replayed as a closed loop of C users, silently
    for loop in (ClosedLoop(num_users=2, not_before_arrival=True),
                 ClosedLoop(num_users=2, not_before_arrival=True, tick_rate_per_s=8.0)):
        with pytest.raises(ValueError, match=r"a capped open loop .* is simulated, not replayed"):
            ReplayConfig(ServerTarget("http://127.0.0.1:1"), closed_loop=loop)
    ReplayConfig(ServerTarget("http://127.0.0.1:1"), closed_loop=ClosedLoop(num_users=2))


def test_a_time_limited_loop_is_refused_by_the_live_replay_not_run_whole() -> None:
    # the live users never read send_until_s: they would go on sending past the limit
    loop = ClosedLoop(num_users=2, send_until_s=2.0)
    with pytest.raises(ValueError, match=r"runs no time limit \(send_until_s\)"):
        ReplayConfig(ServerTarget("http://127.0.0.1:1"), closed_loop=loop)
    with pytest.raises(ValueError, match=r"send_until_s must be a finite time >= 0"):
        ClosedLoop(num_users=2, send_until_s=-1.0)

