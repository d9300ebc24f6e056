"""Fixed start-up cost of the CLI: whole-process CPU seconds of commands that do almost no work.

Each figure is the median of ``--repeats`` fresh processes measured with ``os.wait4`` (the
kernel's own accounting of the child), after the project's modules are byte-compiled as an
installed package's are (``bytecode.py``):

- ``simulate`` on the first 5 requests of ../shared/bench/conv_n2000_q2.jsonl with the
  configuration of bench_simulate.py (a) (everything but the simulation loop);
- ``simulate`` of the same 5 requests with the rows printed as a table instead of JSON;
- ``kvbudget --help`` (the commands listed from their summaries: no command module imported).

For reference it also times a bare interpreter and one importing what every simulate needs
whatever kvbudget does (typer, numpy, simpy, pyarrow's JSON reader):
the difference between that floor and the simulate figure is kvbudget's own start-up.

Usage: python benchmarks/bench_startup.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bytecode import compile_project

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
KVBUDGET = [sys.executable, "-m", "kvbudget.cli.main"]
BENCH_ENGINE = ["--gpu", "A100-80GB", "--model", "Llama-2-7B", "--num-gpu-blocks", "7672",
                "--block-size", "16", "--max-num-seqs", "256", "--max-num-batched-tokens", "4096",
                "--policy", "unlimited"]
FLOOR = "import typer, numpy, simpy, pyarrow.json"


def cpu_s(args: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + system) of one child process."""
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode() if proc.stderr else ""
        raise SystemExit(f"failed: {' '.join(args)}\n{err}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    compile_project()
    source = SHARED / "bench" / "conv_n2000_q2.jsonl"
    if not source.exists():
        raise SystemExit(f"{source}: missing (the benchmark workloads live in ../shared/bench/)")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.jsonl"
        with source.open() as fh:
            tiny.write_text("".join(next(fh) for _ in range(5)))
        # what kvbudget's entry point sets for itself (see cli/main.py)
        floor_env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get(
            "OPENBLAS_NUM_THREADS", "1")}
        cases = [
            ("python -c pass", [sys.executable, "-c", "pass"], None),
            ("floor: " + FLOOR, [sys.executable, "-c", FLOOR], floor_env),
            ("kvbudget --help", [*KVBUDGET, "--help"], None),
            ("simulate 5 requests --json", [*KVBUDGET, "simulate", "--trace", str(tiny),
                                            *BENCH_ENGINE, "--json"], None),
            ("simulate 5 requests (table)", [*KVBUDGET, "simulate", "--trace", str(tiny),
                                             *BENCH_ENGINE], None),
        ]
        print(f"whole-process CPU seconds, median of {args.repeats} runs")
        for label, cmd, env in cases:
            runs = [cpu_s(cmd, env) for _ in range(args.repeats)]
            print(f"  {label:<60} {statistics.median(runs):6.3f}  (min {min(runs):.3f})")


if __name__ == "__main__":
    main()
