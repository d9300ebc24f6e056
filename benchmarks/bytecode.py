"""Byte-compile kvbudget's packages before timing whole processes.

An installed package has its bytecode compiled at install time, and an editable install writes
it on first import. Where ``PYTHONDONTWRITEBYTECODE`` is set (some CI and container images), or
after an edit, every process would compile the changed modules again (~30 ms for the simulator
alone), a cost no installed kvbudget pays. The benchmarks compile them once, first, with the
methods of kvbudget's dataclasses, which the command line keeps beside them
(``cli/method_cache.py``).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kvbudget", "cli", "simulator", "policies", "workloads", "results", "perf", "analysis", "studies", "live")


def compile_project(root: Path = REPO) -> None:
    """Write up-to-date ``.pyc`` files for every module of the project's packages (of the
    checkout at ``root``: this one by default)."""
    for package in PACKAGES:
        if not compileall.compile_dir(root / package, quiet=1):
            raise SystemExit(f"could not byte-compile {root / package}")
    # and the compiled methods of its dataclasses (``make bytecode`` does the same)
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "kvbudget.cli.method_cache"], cwd=root,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"could not write the dataclass methods of {root}:\n{done.stderr}")
