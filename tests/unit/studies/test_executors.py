"""Executors: the local process pool and Ray map a task over specs and agree exactly."""

from __future__ import annotations

import math
import operator
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kvbudget.simulator.scenario import scenario_from_dict
from kvbudget.studies.executors import LocalExecutor, RayExecutor, available_cores, make_executor
from kvbudget.studies.sweep import Axis, SweepPlan, execute, run_one
from tests.conftest import small_scenario_dict


def _scenario() -> dict[str, Any]:
    return small_scenario_dict(120, 8.0, seed=5, name="tiny")


def _plan() -> SweepPlan:
    scn = scenario_from_dict(_scenario(), Path("."))
    return SweepPlan(scn, (Axis("policy", ("conservative", "overcommit", "preemptive")),),
                     replications=2)


def _metrics(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows).drop(columns=["wall_time_s"])
    return df.sort_values("run_key").reset_index(drop=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_local_executor_yields_every_result_with_its_index(workers: int) -> None:
    tasks = list(range(-5, 15))
    with LocalExecutor(workers) as ex:
        got = dict(ex.map_unordered(operator.neg, tasks))
        assert ex.num_workers == workers
        # the pool is kept between maps
        assert dict(ex.map_unordered(abs, tasks[:3])) == {0: 5, 1: 4, 2: 3}
    assert got == {i: -t for i, t in enumerate(tasks)}


def test_local_executor_propagates_a_task_error() -> None:
    with LocalExecutor(2) as ex, pytest.raises(ValueError, match="math domain error"):
        list(ex.map_unordered(math.sqrt, [4.0, -1.0, 9.0]))


def test_empty_task_list_and_bad_arguments() -> None:
    assert list(LocalExecutor(2).map_unordered(abs, [])) == []
    assert LocalExecutor().num_workers == available_cores()
    with pytest.raises(ValueError, match="max_workers must be an integer >= 1, got 0"):
        LocalExecutor(0)
    with pytest.raises(ValueError, match="unknown executor 'spark'"):
        make_executor("spark")
    with pytest.raises(ValueError, match="--address applies to the ray executor only"):
        make_executor("local", address="auto")
    assert isinstance(make_executor("ray", jobs=2), RayExecutor)


def test_a_process_pool_gives_the_same_rows_as_one_process() -> None:
    plan = _plan()
    with LocalExecutor(1) as one:
        ref = execute(plan.runs, one)
    with LocalExecutor(2) as pool:
        got = execute(plan.runs, pool)
    pd.testing.assert_frame_equal(_metrics(got), _metrics(ref))


@pytest.mark.slow
def test_ray_results_are_identical_to_the_local_executor() -> None:
    """A local Ray instance the executor starts itself (``--executor ray`` on one machine) and
    stops again at close. Joining a cluster someone else started is checked on a real two-node
    cluster in test_ray_cluster.py."""
    # Ray is the optional extra `kvbudget[ray]`; the Makefile installs it for the tests.
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'kvbudget[ray]')")
    plan = _plan()
    with LocalExecutor(1) as local:
        ref = execute(plan.runs, local)
    ex = RayExecutor(num_cpus=2)
    try:
        with warnings.catch_warnings():
            # Ray's start-up may warn about its own environment (not about our code)
            warnings.simplefilter("ignore")
            assert ex.num_workers == 2
        finished: list[int] = []
        got = []
        for i, row in ex.map_unordered(run_one, plan.runs):
            finished.append(i)
            got.append(row)
        assert sorted(finished) == list(range(len(plan.runs)))
        pd.testing.assert_frame_equal(_metrics(got), _metrics(ref))
    finally:
        ex.close()
    assert not ray.is_initialized()  # the instance it started is stopped


@pytest.mark.skipif("forkserver" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="the worker server is forkserver's")
def test_workers_come_from_a_server_that_ignores_ctrl_c_from_its_start() -> None:
    """The pool's worker server imports ``studies.quiet_workers`` first (Ctrl-C ignored before
    it forks anything, so a worker is never between its fork and its initializer with Ctrl-C
    live); the command itself never imports it (its own Ctrl-C must stay live)."""
    import sys

    from kvbudget.studies.executors import QUIET_WORKERS

    with LocalExecutor(2) as ex:
        seen = [found for _, found in ex.map_unordered(_imported_in_worker, [QUIET_WORKERS] * 2)]
    assert seen == [True, True]
    assert QUIET_WORKERS not in sys.modules


def _imported_in_worker(name: str) -> bool:
    import sys

    return name in sys.modules
