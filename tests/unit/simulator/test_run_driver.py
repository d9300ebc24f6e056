"""The run driver's parts (simulator/run.py, alarm.py, users.py) and the engine knobs' checks."""

from __future__ import annotations

import math
from typing import Any, get_args

import numpy as np
import pytest
import simpy

from kvbudget.policies import make_policy
from kvbudget.simulator import engine_config
from kvbudget.simulator.alarm import Alarm, UrgentTimeout
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import FrontendDelays, SimConfig, simulate, timeline_columns
from kvbudget.workloads import from_columns
from kvbudget.workloads.closed_loop import ClosedLoop


# --- Alarm --------------------------------------------------------------------------------------
def _alarm() -> tuple[simpy.Environment, Alarm, list[tuple[float, float]]]:
    env = simpy.Environment()
    rang: list[tuple[float, float]] = []
    return env, Alarm(env, lambda at: rang.append((at, env.now))), rang


def test_an_alarm_keeps_the_earliest_time_and_rings_at_it() -> None:
    env, alarm, rang = _alarm()
    alarm.arm(5.0)
    alarm.arm(7.0)  # later than the pending 5: nothing scheduled
    assert alarm.at_s == 5.0
    env.run()
    assert rang == [(5.0, 5.0)] and alarm.at_s == math.inf
    alarm.arm(math.inf)  # nothing to wait for
    env.run()
    assert rang == [(5.0, 5.0)]


def test_an_earlier_time_supersedes_and_the_superseded_timeout_still_rings() -> None:
    """As the gateway timer and the clients' events have always had it: each timeout scheduled
    rings its owner (which does what is due then); only the pending one clears ``at_s``."""
    env, alarm, rang = _alarm()
    alarm.arm(5.0)
    alarm.arm(2.0)
    assert alarm.at_s == 2.0
    env.run(until=3.0)
    assert rang == [(2.0, 2.0)] and alarm.at_s == math.inf
    alarm.arm(9.0)
    env.run()
    assert rang == [(2.0, 2.0), (5.0, 5.0), (9.0, 9.0)] and alarm.at_s == math.inf


def test_a_time_already_past_rings_now() -> None:
    env, alarm, rang = _alarm()
    env.run(until=4.0)
    alarm.arm(1.0)
    env.run()
    assert rang == [(1.0, 4.0)]


@pytest.mark.parametrize(("urgent", "order"), [(False, ["step", "alarm"]),
                                             (True, ["alarm", "step"])])
def test_an_urgent_alarm_rings_before_an_ordinary_event_due_then_made_earlier(
        urgent: bool, order: list[str]) -> None:
    """SimPy runs events due at one instant by priority, then in the order they were made: an
    ordinary alarm armed after a step's end event (made at t = 0, due at 5) rings after it;
    an urgent one (the run driver's and the clients') before it, however late it was armed."""
    env = simpy.Environment()
    seen: list[str] = []
    env.timeout(5.0).callbacks.append(lambda _: seen.append("step"))
    alarm = Alarm(env, lambda at: seen.append("alarm"), urgent=urgent)
    env.run(until=2.0)
    alarm.arm(5.0)  # made at 2, after the step's event
    env.run()
    assert seen == order and env.now == 5.0


def test_an_urgent_timeout_made_last_runs_first_among_those_due_then() -> None:
    env = simpy.Environment()
    seen: list[str] = []
    env.timeout(1.0).callbacks.append(lambda _: seen.append("ordinary"))
    UrgentTimeout(env, 1.0).callbacks.append(lambda _: seen.append("urgent"))
    env.timeout(0.5).callbacks.append(  # made at 0.5, due at 1: after the first urgent one
        lambda _: UrgentTimeout(env, 0.5).callbacks.append(lambda _: seen.append("late")))
    env.run()
    assert seen == ["urgent", "late", "ordinary"]


# --- simulate's checks and parts -----------------------------------------------------------------
def _workload(n: int, request_id: list[int] | None = None) -> Any:
    rng = np.random.default_rng(1)
    return from_columns(np.sort(rng.uniform(0.0, 60.0, n)), rng.integers(20, 200, n),
                        rng.integers(2, 20, n), request_id=request_id)


def test_a_negative_request_id_is_refused_before_the_run() -> None:
    ids = list(range(1500))
    ids[1400] = -7
    told: list[int] = []
    with pytest.raises(ValueError, match="request_id must be >= 0, got -7"):
        simulate(_workload(1500, ids), make_policy("unlimited"), progress=told.append)
    assert told == []  # nothing ran (the 1,000th arrival would have been told)


def test_the_front_end_is_resolved_once_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []
    resolve = SimConfig.resolved_frontend

    def counting(self: SimConfig) -> Any:
        calls.append(self.frontend)
        return resolve(self)

    monkeypatch.setattr(SimConfig, "resolved_frontend", counting)
    config = SimConfig(closed_loop=ClosedLoop(4, 0.1))  # a delay per finish, as users see it
    result = simulate(_workload(60), make_policy("unlimited"), config)
    assert calls == [None]
    assert (result.records["status"] == "completed").all()


def test_front_end_delays_add_the_calibrated_overhead_and_the_api_servers_cost() -> None:
    prompt, output = np.array([100, 1000]), np.array([1, 50])
    t = np.array([1.0, 2.0])
    none = FrontendDelays(SimConfig(frontend="none"))
    assert none.is_zero and none.first_token_s(t, prompt) is t and none.finish_s(
        t, prompt, output) is t
    calibrated = FrontendDelays(SimConfig(frontend="none", frontend_overhead_s=0.01))
    np.testing.assert_array_equal(calibrated.finish_s(t, prompt, output), t + 0.01)
    api = FrontendDelays(SimConfig())
    cost = api.cost
    per = cost.per_output_token_s
    assert per > 0 and not api.is_zero
    np.testing.assert_allclose(api.first_token_s(t, prompt),
                               t + cost.per_request_s + per + cost.per_prompt_token_s * prompt)
    np.testing.assert_allclose(api.finish_s(t, prompt, output) - api.first_token_s(t, prompt),
                               per * (output - 1) + cost.post_decode_s)
    np.testing.assert_array_equal(api.gaps_s(np.array([0.5])), [0.5 + per])
    assert api.describe()["per_output_token_s"] == per


def test_timeline_columns_name_the_seven_samples() -> None:
    samples = np.arange(14, dtype=np.float64).reshape(2, 7)
    columns = timeline_columns(samples)
    assert list(columns) == ["time_s", "kv_used_tokens", "kv_reserved_tokens",
                             "kv_capacity_tokens", "num_running", "num_waiting",
                             "num_preemptions"]
    assert columns["num_preemptions"].tolist() == [6, 13]
    assert columns["kv_used_tokens"].dtype == np.int64


# --- the engine knobs ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(engine_config.KNOB_CHOICES))
def test_a_few_choice_knob_takes_what_its_type_names_and_nothing_else(name: str) -> None:
    choices = engine_config.KNOB_CHOICES[name]
    annotation = {"scheduling_policy": engine_config.SchedulingPolicy,
                  "preemption_mode": engine_config.PreemptionMode,
                  "preemption_victim": engine_config.PreemptionVictim,
                  "capacity_scheduler_policy": engine_config.CapacitySchedulerPolicy}[name]
    assert choices == get_args(annotation) and len(choices) >= 2
    for value in choices:
        knobs: dict[str, Any] = {name: value}
        EngineConfig(**knobs)
    bad: dict[str, Any] = {name: "nope"}
    with pytest.raises(ValueError, match=f"^{name} must be '.+' or '.+', got 'nope'$"):
        EngineConfig(**bad)


@pytest.mark.parametrize(("knobs", "needle"), [
    ({"block_size": 0}, r"block_size must be in \[1, 65536\], got 0"),
    ({"max_num_seqs": 2**31}, r"max_num_seqs must be in \[1, 2147483647\]"),
    ({"max_num_batched_tokens": 0}, r"max_num_batched_tokens must be in \[1, "),
    ({"max_model_len": 1}, r"max_model_len must be in \[2, "),
    ({"max_model_len": 2**41}, r"max_model_len must be in \[2, "),
    ({"num_gpu_blocks": 0}, r"num_gpu_blocks must be in \[1, "),
    ({"num_gpu_blocks": 2**30, "block_size": 2**11}, "tokens of KV cache, beyond any"),
    ({"schedule_conservativeness": math.nan}, r"schedule_conservativeness must be in \(0, "),
    ({"watermark": 1.0}, r"watermark must be in \[0, 1\)"),
])
def test_counts_and_sizes_beyond_any_deployment_are_refused(knobs: dict[str, Any],
                                                           needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        EngineConfig(**knobs)
