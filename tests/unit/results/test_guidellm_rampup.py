"""A GuideLLM closed loop started over a ramp-up, made by the real tool
(``scripts/make_recording_fixtures.sh guidellm-rampup``: GuideLLM 0.8.1 ``--profile
kind=concurrent,streams=4,rampup_duration=2``, 20 requests).

GuideLLM starts the i-th of such a loop's first 4 requests 2 x i / 4 s after the start
(0.8.1 ``scheduler/strategies.py``, ``ConcurrentStrategy.next_request_time``); the report
keeps ``rampup_duration`` in the strategy and each request's due time
(``info.timings.targeted_start``). It was replayed as a closed loop of 4 users sending at once:
a burst at the start the recorded server never saw, without a word."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recorded_guidellm_rampup import ramp_hold_s, rampup_s
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import replay_mode
from kvbudget.studies.validate import simulate_recording

FIXTURE = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "guidellm-0.8.1"
           / "rampup2_concurrent4.json")
CONFIG = SimConfig(engine=EngineConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8,
                                       max_num_batched_tokens=2048))
FAST = LinearCostModel(intercept_s=0.001, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                       per_context_token_s=0.0)  # 16 steps of 1 ms a request


def test_a_ramped_closed_loop_is_read_as_slots_due_at_the_ramps_times() -> None:
    rec = read_recording(FIXTURE)
    (stage,) = rec.stages
    assert (stage.load, stage.send_times, stage.max_concurrency) == ("capped", "ramped", 4)
    assert any("ramped its 4 users up over 2 s" in note for note in rec.notes)
    assert "ramp-up" in replay_mode(stage)
    # the later requests offered at the ramp's last due time tie on purpose: no advice to
    # spread a coarse clock
    assert not any("share their timestamp" in note for note in rec.notes)
    offered = np.sort(rec.workload.arrival_s - rec.workload.arrival_s.min())
    # the first four due at 0, 0.5, 1 and 1.5 s; none of the later ones held past the last
    np.testing.assert_allclose(offered[[0, -1]], [0.0, 1.5], atol=1e-6)
    assert np.isclose(offered[:, None], [0.5, 1.0]).any(axis=0).all()


def test_a_ramped_closed_loop_is_simulated_ramping_then_closed() -> None:
    rec = read_recording(FIXTURE)
    run = simulate_recording(rec, CONFIG, cost_model=FAST, frontend_overhead_s=0.0)
    sent = np.sort(run.records["arrival_s"].to_numpy())
    sent = sent - sent[0]
    # the users start as GuideLLM started them (one at 0 s, the last at 1.5 s), not all at
    # once, which the closed loop did (four sends at 0 s)...
    assert int((sent < 0.1).sum()) == 1
    assert np.isclose(sent[:, None], [0.5, 1.0, 1.5], atol=1e-6).any(axis=0).all()
    # ...and once the ramp is over, a fast server's users send at its own pace, not the
    # recorded server's (its last request was sent 2.47 s after its first)
    recorded = np.sort(rec.measured["arrival_s"].to_numpy())
    assert sent[-1] < 1.6 < recorded[-1] - recorded[0]


def test_the_ramps_hold_and_its_duration() -> None:
    assert ramp_hold_s("concurrent", 4, 2.0) == pytest.approx(1.5)
    assert ramp_hold_s("throughput", 4, 2.0) == pytest.approx(2.0)  # the rest due at its end
    assert rampup_s({"rampup_duration": 2}) == 2.0
    assert rampup_s({"rampup_duration": 0.0}) == rampup_s({}) == rampup_s(
        {"rampup_duration": True}) == 0.0
