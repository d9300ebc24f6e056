"""Determinism across processes (issue 20 item 5): the same scenario and seed give
byte-identical ``requests.parquet`` and the same ``summary.json`` (bar its wall time) in
separate processes whatever their string-hash seed, and a sweep gives the same rows through the
local process pool and through Ray."""

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


@pytest.mark.slow
def test_a_sweep_is_the_same_through_local_processes_and_ray(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'kvbudget[ray]')")
    import pandas as pd

    scenario = _scenario(tmp_path)
    grid = ["--grid", "engine.num_gpu_blocks=1500,2500", "--policies", "overcommit", "-r", "2",
            "--no-plot", "--scenario", str(scenario)]
    local, ray = tmp_path / "local", tmp_path / "ray"
    _kvbudget(["sweep", *grid, "--out", str(local), "-j", "2"], "0")
    _kvbudget(["sweep", *grid, "--out", str(ray), "--executor", "ray", "-j", "2"], "1")
    a, b = _sweep_rows(local), _sweep_rows(ray)
    assert len(a) == 4
    pd.testing.assert_frame_equal(a, b)
