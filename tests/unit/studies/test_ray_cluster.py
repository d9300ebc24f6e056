"""The distributed path on a real cluster: a Ray head and a worker started as separate
processes on 127.0.0.1 (``ray start --head``, ``ray start --address``), a sweep run on it with
``--executor ray --address`` under another string-hash seed than the local process pool's, and
its table equal to the local one; and a driver that joined the cluster itself, whose executor
uses it and leaves it running. One cluster serves the module (a start costs tens of seconds of
CPU)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import small_scenario_dict

REPO = Path(__file__).resolve().parents[3]
RAY = Path(sys.executable).parent / "ray"
START_TIMEOUT_S = 240.0  # a generous bound for a loaded machine, not a speed assertion


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    # the cluster's workers import this checkout's kvbudget; no usage report, no token prompt
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled"}


def _accepts(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _alive_nodes(address: str, env: dict[str, str]) -> int:
    """Alive nodes of the cluster at ``address`` as a fresh driver sees them (0 if none)."""
    probe = (f"import ray; ray.init(address={address!r}, logging_level='error', "
             "log_to_driver=False); print(sum(1 for n in ray.nodes() if n['Alive'])); "
             "ray.shutdown()")
    try:
        done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 0
    lines = done.stdout.split()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else 0


COMMON = ["--num-cpus=1", "--block", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
PORT_TRIES = 3  # a port found free can be taken before the head binds it (a vLLM the live tests
# start at the same time on another worker): the head exits, and another port is tried


def _start_head(env: dict[str, str], temp_dir: str, procs: list[subprocess.Popen[bytes]],
                deadline: float) -> int:
    """Start the head (appended to ``procs``) on a free port; wait until that port accepts;
    return it. A head that exits first is started again on another port, up to
    ``PORT_TRIES`` times."""
    log_path = Path(temp_dir, "head.log")
    for tries_left in range(PORT_TRIES - 1, -1, -1):
        port = _free_port()
        with log_path.open("wb") as log:
            procs.append(subprocess.Popen(
                [str(RAY), "start", "--head", f"--port={port}", f"--temp-dir={temp_dir}",
                 "--include-dashboard=false", *COMMON],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        # the head's GCS port accepting connections is cheap to watch; a driver probe (a
        # Python process that imports ray) costs seconds of CPU, so it is only used after
        while not _accepts(port):
            if procs[-1].poll() is not None:
                break
            assert time.monotonic() < deadline, "the Ray head did not come up"
            time.sleep(0.5)
        else:
            return port
        assert tries_left, log_path.read_text()[-2000:]
    raise AssertionError("unreachable")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a ``ray start --block`` and everything it started (its own process group)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # ray drains and stops its processes
        proc.wait(timeout=45)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what did not stop in time
    proc.wait()


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """The address of a two-node Ray cluster on 127.0.0.1 (one CPU each); both nodes are
    stopped when the module's tests end, whatever happened."""
    pytest.importorskip("ray", reason="ray is not installed (pip install 'kvbudget[ray]')")
    if not RAY.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    env = _env()
    # a short path: Ray's Unix sockets live under it (at most ~107 characters)
    temp_dir = tempfile.mkdtemp(prefix="kvb-ray-", dir="/tmp")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        port = _start_head(env, temp_dir, procs, deadline)
        address = f"127.0.0.1:{port}"
        with open(os.path.join(temp_dir, "worker.log"), "wb") as log:
            procs.append(subprocess.Popen(
                [str(RAY), "start", f"--address={address}", *COMMON],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        while _alive_nodes(address, env) < 2:
            assert procs[1].poll() is None, Path(temp_dir, "worker.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the Ray worker did not join the head"
            time.sleep(2)
        yield address
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _sweep(tmp_path: Path, name: str, executor: list[str], hash_seed: str) -> pd.DataFrame:
    import tomli_w

    scenario = tmp_path / "tiny.toml"
    if not scenario.exists():
        scenario.write_text(tomli_w.dumps(small_scenario_dict(120, 8.0, seed=5, name="tiny")))
    out = tmp_path / name
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget.cli.main", "sweep", "--scenario", str(scenario),
         "--out", str(out), "--policies", "conservative,overcommit,preemptive", "-r", "2",
         "--no-plot", *executor],
        cwd=REPO, env={**_env(), "PYTHONHASHSEED": hash_seed}, capture_output=True, text=True,
        timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_parquet(out / "sweep.parquet").drop(columns=["wall_time_s"])
    return table.sort_values("run_key").reset_index(drop=True)


@pytest.mark.slow
def test_a_sweep_on_a_two_node_cluster_equals_the_local_one(
    ray_cluster: str, tmp_path: Path
) -> None:
    local = _sweep(tmp_path, "local", ["--executor", "local", "-j", "2"], hash_seed="0")
    remote = _sweep(tmp_path, "ray", ["--executor", "ray", "--address", ray_cluster],
                    hash_seed="1")
    assert len(local) == 3 * 2
    pd.testing.assert_frame_equal(remote, local)


@pytest.mark.slow
def test_an_executor_joins_the_cluster_its_driver_joined_and_leaves_it_running(
    ray_cluster: str,
) -> None:
    import ray

    from kvbudget.simulator.scenario import scenario_from_dict
    from kvbudget.studies.executors import LocalExecutor, RayExecutor
    from kvbudget.studies.sweep import Axis, SweepPlan, execute, run_one

    scn = scenario_from_dict(small_scenario_dict(120, 8.0, seed=5, name="tiny"), Path("."))
    plan = SweepPlan(scn, (Axis("policy", ("conservative", "overcommit")),), replications=2)
    with LocalExecutor(1) as local:
        ref = pd.DataFrame(execute(plan.runs, local))
    # the nodes' workers import this checkout's kvbudget (the PYTHONPATH the nodes started with)
    ray.init(address=ray_cluster, logging_level="error", log_to_driver=False)
    try:
        ex = RayExecutor()  # joins the instance this driver joined
        assert ex.num_workers == 2  # one CPU on each node
        got = pd.DataFrame(row for _, row in ex.map_unordered(run_one, plan.runs))
        ex.close()
        assert ray.is_initialized()  # left as it found it
        assert len(ray.nodes()) == 2
    finally:
        ray.shutdown()
    key = ["run_key"]
    pd.testing.assert_frame_equal(
        got.drop(columns=["wall_time_s"]).sort_values(key).reset_index(drop=True),
        ref.drop(columns=["wall_time_s"]).sort_values(key).reset_index(drop=True))
