"""Ctrl-C twice during ``plan`` or ``tune`` ends them (issue 36 item 5; before, 8 of 10 tries
hung in the pool's shutdown), and pool workers print no ``KeyboardInterrupt`` traceback.

The interrupts go to the whole process group, as a terminal sends them. The timeout bounds a
hang only: an interrupted study exits in about a second; nothing here asserts a speed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HANG_S = 120.0

COMMANDS = {
    "plan": ["plan", "--gpus", "A100-80GB,H100-80GB,L40S", "--replicas", "1,2,3,4", "-r", "3",
             "--slo", "overall_slo_attainment>=0.999", "--jobs", "2",
             "--set", "workload.num_requests=3000"],
    "tune": ["tune", "--policy", "overcommit", "--param", "policy_params.overcommit_ratio=0.2:1",
             "--grid-points", "20", "-r", "3", "--jobs", "2",
             "--set", "workload.num_requests=3000"],
    "sweep": ["sweep", "--grid", "policy_params.overcommit_ratio=0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0",
              "--policies", "overcommit", "-r", "4", "--jobs", "2",
              "--set", "workload.num_requests=3000"],
}


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _wait_for_workers(proc: subprocess.Popen[str]) -> None:
    """Until a pool worker runs: a grandchild (the forkserver's child) of the command."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline and proc.poll() is None:
        if any(_children(child) for child in _children(proc.pid)):
            return
        time.sleep(0.05)
    pytest.fail("the study started no worker")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_two_interrupts_end_the_study_without_tracebacks(tmp_path: Path, command: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-m", "kvbudget.cli.main",
            *COMMANDS[command], "--out", str(tmp_path / "out")]
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen: list[str] = []
    _wait_for_workers(proc)
    os.killpg(proc.pid, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{command} still running {HANG_S:.0f} s after two Ctrl-C: {''.join(seen)}")
    err = "".join(seen) + err
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
