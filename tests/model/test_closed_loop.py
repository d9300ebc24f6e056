"""Closed-loop load in the simulator: users wait for their answer, think, send again."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.policies import make_policy
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import FleetConfig
from kvbudget.workloads.closed_loop import ClosedLoop
from tests.conftest import assert_token_gaps_consistent, mixed_workload


def _inflight(rec: dict) -> list[int]:
    a = np.asarray(rec["arrival_s"])
    f = np.asarray(rec["finished_s"])
    return [int(((a <= x) & (f > x)).sum()) for x in a]


def test_64_users_keep_64_requests_in_flight() -> None:
    w = mixed_workload(500, 5.0, seed=3)
    r = simulate(w, make_policy("unlimited"), SimConfig(closed_loop=ClosedLoop(64)))
    rec = r.records
    assert (np.asarray(rec["status"]) == "completed").all()
    counts = _inflight(rec)
    assert max(counts) == 64
    a = np.asarray(rec["arrival_s"])
    assert np.all(np.diff(a) >= 0) and a[63] == 0.0 and a[64] > 0.0
    assert r.summary["closed_loop"] == {"num_users": 64, "think_time_s": 0.0,
                                        "think_distribution": "fixed"}


def test_64_users_closed_loop_has_itl_consistent_with_its_tokens() -> None:
    w = mixed_workload(300, 5.0, seed=8)
    r = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=ClosedLoop(64, 0.1)))
    assert max(_inflight(r.records)) <= 64
    itl = r.summary["overall"]["itl_s"]
    assert itl["p50"] is not None and 0 < itl["p50"] <= itl["p90"] <= itl["p99"]
    for tier in ("interactive", "batch"):
        assert r.summary["tiers"][tier]["itl_s"]["mean"] > 0
    assert_token_gaps_consistent(r)


def test_one_user_sends_a_think_time_after_each_answer() -> None:
    w = mixed_workload(40, 5.0, seed=4)
    r = simulate(w, make_policy("conservative"), SimConfig(closed_loop=ClosedLoop(1, 0.25)))
    a = np.asarray(r.records["arrival_s"])
    f = np.asarray(r.records["finished_s"])
    np.testing.assert_allclose(a[1:] - f[:-1], 0.25, atol=1e-9)


def test_response_time_law() -> None:
    """Throughput = N / (R + Z) (the interactive response-time law, Denning and Buzen 1978)."""
    n_users, think = 8, 2.0
    w = mixed_workload(800, 5.0, seed=5)
    r = simulate(w, make_policy("unlimited"),
                 SimConfig(closed_loop=ClosedLoop(n_users, think, "exponential")))
    a = np.asarray(r.records["arrival_s"])
    e2e = np.asarray(r.records["e2e_s"])
    throughput = (len(a) - 1) / (a[-1] - a[0])
    assert throughput == pytest.approx(n_users / (e2e.mean() + think), rel=0.05)


def test_closed_loop_runs_are_reproducible_and_seeded() -> None:
    w = mixed_workload(200, 5.0, seed=6)
    before = w.arrival_s.copy()
    loop = ClosedLoop(4, 0.5, "exponential")
    one = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=1))
    two = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=1))
    other = simulate(w, make_policy("overcommit"), SimConfig(closed_loop=loop, seed=2))
    np.testing.assert_array_equal(one.records["arrival_s"], two.records["arrival_s"])
    assert not np.array_equal(one.records["arrival_s"], other.records["arrival_s"])
    np.testing.assert_array_equal(w.arrival_s, before)  # the caller's workload is untouched


def test_closed_loop_on_a_fleet() -> None:
    w = mixed_workload(300, 5.0, seed=7)
    r = simulate(w, make_policy("conservative"),
                 SimConfig(closed_loop=ClosedLoop(16), fleet=FleetConfig(2, router="least_tokens")))
    assert max(_inflight(r.records)) <= 16
    assert r.summary["overall"]["offered"] == 300


def test_bad_closed_loops_are_refused() -> None:
    with pytest.raises(ValueError, match="num_users"):
        ClosedLoop(0)
    with pytest.raises(ValueError, match="think_time_s"):
        ClosedLoop(2, -1.0)


def test_simulate_cli_takes_users() -> None:
    res = CliRunner().invoke(app, ["simulate", "--users", "64", "--think-time-s", "0.5",
                                   "--set", "workload.duration_s=20", "--json"])
    assert res.exit_code == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["closed_loop"]["num_users"] == 64 and s["closed_loop"]["think_time_s"] == 0.5
