"""Instructions counted by valgrind (cachegrind, no cache simulation): a measure of CPU work
that does not move with the machine's load or speed, for A/B comparisons of two trees and for
ratios between configurations (issue 22's "x base" table), where timings on a shared machine
wander by 20-50 % between runs.

(a) whole ``kvbudget simulate`` processes on the four bench workloads and on the first 5
    requests of one (the command bench_simulate.py times, start-up included);
(b) the simulation alone on conv_n2000_q6: a process that loads the trace and simulates once,
    less one that only loads it (the same imports), for the base engine, the other engines and
    8-replica fleets under each router, with an eighth of the blocks each and at 8x the rate
    with the base engine's blocks each (bench_engines.py's configurations without prefix
    caching), with each one's ratio to the base engine;
(c) a disaggregated deployment against a colocated one (issue 38: "CPU per request within 1.3x
    of a colocated engine on the same workload"): docs/disaggregation.md's what-if, the whole
    Azure conversation trace at 15 times its rate (19,366 requests), 8 colocated replicas
    (least-tokens routing) against 3 prefill + 5 decode replicas, each the simulation alone (a
    ``kvbudget simulate`` process less the same command on the trace's first second) and the
    whole process, with the disaggregated run's ratio to the colocated one (the same requests:
    the ratio per request).

Valgrind runs a process about 50x slower than Python alone: (a) takes ~6 minutes on a 2-core
machine, (b) ~8, (c) ~10. ``PYTHONHASHSEED=0`` and one OpenBLAS thread, so that two counts of the same
tree agree to ~0.5 %.

Usage: python benchmarks/bench_instructions.py [--only a|b|c] [--tree DIR]
(``--tree``: count another checkout's code, e.g. a worktree of the commit before a change,
with this checkout's virtual environment; its modules are byte-compiled first, or compiling
them would be counted too)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_engines import BENCH, ENGINE
from bench_simulate import BENCH_ENGINE, QUOTED, REPO, SHARED
from bytecode import compile_project

WORKLOADS = tuple(QUOTED)  # the four bench workloads
BENCH_FLAGS = [*BENCH_ENGINE, "--policy", "unlimited", "--json"]  # bench_simulate.py's command
# (label, engine name, router of an 8-replica fleet or None, arrival speed-up of the fleet:
# 1, an eighth of the blocks each; 8, the base engine's blocks each and arrivals 8x as fast)
CONFIGS: tuple[tuple[str, str, str | None, int], ...] = (
    ("vllm (base)", "vllm", None, 1),
    ("vllm-swap", "vllm-swap", None, 1),
    ("tgi", "tgi", None, 1),
    ("sglang", "sglang", None, 1),
    ("trtllm", "trtllm", None, 1),
    ("fleet 8 x vllm, round_robin", "vllm", "round_robin", 1),
    ("fleet 8 x vllm, least_tokens", "vllm", "least_tokens", 1),
    ("fleet 8 x vllm, prefix_affinity", "vllm", "prefix_affinity", 1),
    ("fleet at 8x rate, round_robin", "vllm", "round_robin", 8),
    ("fleet at 8x rate, least_tokens", "vllm", "least_tokens", 8),
    ("fleet at 8x rate, prefix_affinity", "vllm", "prefix_affinity", 8),
)
# the child of (b): load the trace, then simulate once if asked (the fleet module is imported
# either way, so that the difference is the simulation, not an import)
CHILD = """\
import dataclasses, json, sys
from pathlib import Path
from kvbudget.policies import make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import FleetConfig, SimConfig, simulate
import kvbudget.simulator.fleet
from kvbudget.workloads.traces import load_trace
spec = json.loads(sys.argv[1])
workload = load_trace(Path(spec["trace"])).workload
if spec["simulate"]:
    engine = dict(spec["engine"])
    fleet = spec["router"]
    if fleet is not None and spec["speedup"] == 1:
        engine["num_gpu_blocks"] //= 8
    elif fleet is not None:
        workload = dataclasses.replace(workload, arrival_s=workload.arrival_s / spec["speedup"])
    config = SimConfig(gpu=spec["gpu"], model=spec["model"], engine=EngineConfig(**engine),
                       fleet=None if fleet is None else FleetConfig(num_replicas=8, router=fleet))
    simulate(workload, make_policy("unlimited"), config)
"""
# (c): the what-if's trace and flags (docs/disaggregation.md), and the two deployments
AZURE_CONV = Path("traces") / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
WHAT_IF = ["--rate-scale", "15", "--set", 'tiers=[{name="interactive", ttft_s=0.25, tpot_s=0.01}]']
DEPLOYMENTS: tuple[tuple[str, list[str]], ...] = (
    ("8 colocated (least_tokens)", ["--set", "fleet.num_replicas=8",
                                    "--set", "fleet.router=least_tokens"]),
    ("3 prefill + 5 decode", ["--set", "disaggregation.prefill.num_replicas=3",
                              "--set", "disaggregation.decode.num_replicas=5"]),
)
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def instructions_of(stderr: str) -> int:
    """The instruction count in valgrind's summary (``==PID== I refs: 1,234,567``)."""
    found = _REFS.findall(stderr)
    if not found:
        raise RuntimeError("no instruction count in valgrind's output:\n" + stderr[-2000:])
    return int(found[-1].replace(",", ""))


def count(args: list[str], tree: Path) -> int:
    """Instructions of one process, run in ``tree`` with its code first on the path."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "PYTHONPATH": str(tree)}
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, *args]
    done = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... exited {done.returncode}:\n"
                           + done.stderr[-2000:])
    return instructions_of(done.stderr)


def child_args(
    trace: Path, engine: str, router: str | None, simulate: bool, speedup: int = 1
) -> list[str]:
    spec = {"trace": str(trace), "engine": dict(ENGINE, name=engine), "router": router,
            "simulate": simulate, "speedup": speedup, **BENCH}
    return ["-c", CHILD, json.dumps(spec)]


def bench_a(tree: Path) -> None:
    print("(a) whole `kvbudget simulate` processes, millions of instructions")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = Path(tmp) / "tiny.jsonl"
        with (SHARED / "bench" / "conv_n2000_q2.jsonl").open() as fh:
            tiny.write_text("".join(next(fh) for _ in range(5)))
        paths = [("5 requests", tiny)] + [(w, SHARED / "bench" / f"{w}.jsonl") for w in WORKLOADS]
        for label, path in paths:
            n = count(["-m", "kvbudget.cli.main", "simulate", "--trace", str(path),
                       *BENCH_FLAGS], tree)
            print(f"  {label:<20}{n / 1e6:>10,.0f} M", flush=True)


def bench_b(tree: Path) -> None:
    trace = SHARED / "bench" / "conv_n2000_q6.jsonl"
    print("(b) the simulation alone on conv_n2000_q6 (a process that simulates once, less one "
          "that only loads the trace), millions of instructions")
    load = count(child_args(trace, "vllm", None, False), tree)
    print(f"  {'loading the trace (subtracted)':<34}{load / 1e6:>10,.0f} M", flush=True)
    base = 0
    for label, engine, router, speedup in CONFIGS:
        n = count(child_args(trace, engine, router, True, speedup), tree) - load
        base = base or n
        print(f"  {label:<34}{n / 1e6:>10,.0f} M {n / base:>8.2f} x base", flush=True)


def disagg_args(trace: Path, deployment: list[str], first_second: bool) -> list[str]:
    """(c)'s ``kvbudget simulate`` command: the what-if on ``trace`` (only its first second,
    the start-up to subtract, with ``first_second``)."""
    window = ["--window", "0:1"] if first_second else []
    return ["-m", "kvbudget.cli.main", "simulate", "--trace", str(trace), *WHAT_IF, *window,
            *deployment]


def bench_c(tree: Path) -> None:
    trace = SHARED / AZURE_CONV
    if not trace.is_file():  # a worktree beside the main checkout
        trace = Path("/work/shared") / AZURE_CONV
    print("(c) disaggregated vs colocated, the Azure conversation trace at 15x (19,366 "
          "requests), millions of instructions")
    sims, wholes = [], []
    for label, deployment in DEPLOYMENTS:
        whole = count(disagg_args(trace, deployment, False), tree)
        start = count(disagg_args(trace, deployment, True), tree)
        sims.append(whole - start)
        wholes.append(whole)
        print(f"  {label:<30} simulation {sims[-1] / 1e6:>8,.0f} M   whole process "
              f"{whole / 1e6:>8,.0f} M   (first second {start / 1e6:,.0f} M)", flush=True)
    print(f"  disaggregated / colocated: simulation {sims[1] / sims[0]:.3f} x, whole process "
          f"{wholes[1] / wholes[0]:.3f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("a", "b", "c"))
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the checkout whose code is counted (default: this one)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("bench_instructions: valgrind not found (Debian: apt-get install valgrind)")
    tree = args.tree.resolve()
    compile_project(tree)
    if args.only in (None, "a"):
        bench_a(tree)
    if args.only in (None, "b"):
        bench_b(tree)
    if args.only in (None, "c"):
        bench_c(tree)


if __name__ == "__main__":
    main()
