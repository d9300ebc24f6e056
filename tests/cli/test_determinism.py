"""Determinism across processes (issue 20 item 5): the same scenario and seed give
byte-identical ``requests.parquet`` and the same ``summary.json`` (bar its wall time) in
separate processes whatever their string-hash seed, and the studies give the same tables with one
worker and two. (A sweep through Ray, under another string-hash seed than the local pool's, is
checked on a real two-node cluster in tests/unit/studies/test_ray_cluster.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, small_scenario_dict


def _kvbudget(args: list[str], hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    res = subprocess.run([sys.executable, "-m", "kvbudget.cli.main", *args], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr


def _summary(run: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run / "summary.json").read_text())
    summary.pop("wall_time_s", None)
    return summary


def _scenario(tmp_path: Path) -> Path:
    import tomli_w

    table = small_scenario_dict(n=300, policy="preemptive")
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(table))
    return path


def test_simulate_is_byte_identical_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    scenario = _scenario(tmp_path)
    runs = []
    for hash_seed in ("0", "1"):
        out = tmp_path / f"run-{hash_seed}"
        _kvbudget(["simulate", "--scenario", str(scenario), "--out", str(out)], hash_seed)
        runs.append(out)
    a, b = runs
    assert (a / "requests.parquet").read_bytes() == (b / "requests.parquet").read_bytes()
    assert (a / "timeline.parquet").read_bytes() == (b / "timeline.parquet").read_bytes()
    assert _summary(a) == _summary(b)
    assert "wall_time_s" in json.loads((a / "summary.json").read_text())  # the one excluded


def _sweep_rows(out: Path) -> Any:
    import pandas as pd

    df = pd.read_parquet(out / "sweep.parquet")
    wall = [c for c in df.columns if "wall" in c]
    return df.drop(columns=wall).sort_values("run_key").reset_index(drop=True)


STUDIES = {  # command -> (its flags, its tables)
    "sweep": (["--policies", "conservative,overcommit", "--rate-scale", "1,2", "-r", "1",
               "--no-plot"], ["sweep.parquet", "points.csv", "sweep.json"]),
    "tune": (["--param", "policy_params.overcommit_ratio=0.2:1", "--constraint",
              "overall_slo_attainment>=0.1", "-r", "1", "--grid-points", "3", "--refine-evals",
              "1", "--validate", "1"],
             ["evidence.parquet", "evaluations.csv", "tune.json", "best.toml"]),
    "capacity": (["--policies", "conservative,overcommit", "-r", "1", "--rel-tol", "0.3",
                  "--curve-points", "2", "--no-plot"],
                 ["evidence.parquet", "capacity.json", "curve.csv"]),
    "plan": (["--gpus", "A100-80GB,H100-80GB", "--replicas", "1,2", "-r", "1", "--slo",
              "overall_slo_attainment>=0.1"], ["runs.parquet", "plan.csv", "plan.json"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(STUDIES))
def test_a_study_is_the_same_with_one_worker_and_two(tmp_path: Path, command: str) -> None:
    """``-j 1`` (every run in this process) and ``-j 2`` (worker processes, each with its own
    string-hash seed) give the same tables, bar the wall time of each run."""
    import pandas as pd
    import tomli_w
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    scn = tmp_path / "s.toml"
    scn.write_text(tomli_w.dumps(small_scenario_dict(n=40, rate=6.0, policy="overcommit")))
    flags, tables = STUDIES[command]
    outs = []
    for jobs in ("1", "2"):
        out = tmp_path / f"out-{jobs}"
        res = CliRunner().invoke(app, [command, "--scenario", str(scn), *flags, "--out",
                                       str(out), "-j", jobs])
        assert res.exit_code == 0, res.output
        outs.append(out)
    a, b = outs
    for name in tables:
        if name.endswith(".parquet"):
            da, db = pd.read_parquet(a / name), pd.read_parquet(b / name)
            assert "wall_time_s" in da.columns  # the one column excluded
            pd.testing.assert_frame_equal(da.drop(columns="wall_time_s"),
                                          db.drop(columns="wall_time_s"))
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name
