"""Smoke test of benchmarks/bench_instructions.py without valgrind: its child process simulates
(or only loads the trace) for an engine and a fleet, and valgrind's summary line is read. The
counts themselves are not asserted (they are the benchmark's to print)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.bench_module import BENCHMARKS, load_bench

SHARED = BENCHMARKS.parents[1] / "shared"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_instructions")


def test_valgrinds_summary_is_read(bench: ModuleType) -> None:
    stderr = ("==123== Cachegrind, a high-precision tracing profiler\n==123== \n"
              "==123== I   refs:      1,536,372,839\n")
    assert bench.instructions_of(stderr) == 1_536_372_839
    with pytest.raises(RuntimeError, match="no instruction count"):
        bench.instructions_of("==123== ERROR SUMMARY: 0 errors\n")


@pytest.mark.parametrize(("engine", "router", "speedup"),
                         [("tgi", None, 1), ("vllm", "least_tokens", 1), ("vllm", "round_robin", 8)])
@pytest.mark.parametrize("simulate", [False, True])
def test_the_child_runs(bench: ModuleType, tmp_path: Path, engine: str, router: str | None,
                        speedup: int, simulate: bool) -> None:
    trace = tmp_path / "t.jsonl"
    with (SHARED / "bench" / "conv_n2000_q6.jsonl").open() as fh:
        trace.write_text("".join(next(fh) for _ in range(20)))
    args = bench.child_args(trace, engine, router, simulate, speedup)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("deployment", [0, 1])
def test_the_disaggregation_commands_run(bench: ModuleType, deployment: int) -> None:
    """(c)'s commands, on the trace's first second (the part it subtracts)."""
    trace = SHARED / bench.AZURE_CONV
    if not trace.is_file():  # a worktree beside the main checkout
        trace = Path("/work/shared") / bench.AZURE_CONV
    args = bench.disagg_args(trace, bench.DEPLOYMENTS[deployment][1], True)
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "interactive" in done.stdout
