"""In-process throughput of many simulations: a sweep of ``--runs`` runs of one 2,000-request
bench workload on one core (``LocalExecutor(1)``: every run in this process, so what one run
leaves behind, the parsed workload above all, serves the next).

The plan is the bench configuration of bench_simulate.py (a) (Llama-2-7B on A100-80GB, 7,672
blocks of 16 tokens, max_num_batched_tokens 4,096) over four policies x ``--runs / 4`` values
of ``max_num_seqs`` (so no two runs are the same). It prints the wall and CPU seconds of the
sweep, runs per minute, CPU per run, and the first run apart from the rest (the first parses
the trace; later ones reuse it).

Usage: python benchmarks/bench_many_runs.py [--runs 100] [--workload conv_n2000_q6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bytecode import compile_project

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
sys.path.insert(0, str(REPO))  # this checkout's kvbudget, whatever is installed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--workload", default="conv_n2000_q6")
    args = ap.parse_args()
    compile_project()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from kvbudget.simulator.scenario import default_scenario_dict, scenario_from_dict
    from kvbudget.studies.sweep import Axis, SweepPlan, run_one

    path = SHARED / "bench" / f"{args.workload}.jsonl"
    data = default_scenario_dict(workload=False)
    data.update(gpu="A100-80GB", model="Llama-2-7B",
                engine={"num_gpu_blocks": 7672, "block_size": 16, "max_num_seqs": 256,
                        "max_num_batched_tokens": 4096},
                workload={"kind": "trace", "path": str(path)})
    scn = scenario_from_dict(data, REPO)
    per_policy = max(1, args.runs // 4)
    plan = SweepPlan(scn, (
        Axis("policy", ("unlimited", "conservative", "overcommit", "preemptive")),
        Axis("engine.max_num_seqs", tuple(range(257 - per_policy, 257))),
    ), replications=1)
    runs = plan.runs
    load0 = os.getloadavg()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    first_cpu = 0.0
    for k, spec in enumerate(runs):
        run_one(spec)
        if k == 0:
            first_cpu = time.process_time() - cpu0
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    load1 = os.getloadavg()
    n = len(runs)
    rest = (cpu - first_cpu) / max(1, n - 1)
    print(f"{n} runs of {args.workload} in one process: wall {wall:.2f} s, CPU {cpu:.2f} s, "
          f"{n / wall * 60:.0f} runs per minute (wall), {n / cpu * 60:.0f} per CPU minute")
    print(f"CPU per run: first {first_cpu * 1e3:.0f} ms (parses the trace), "
          f"the rest {rest * 1e3:.0f} ms each")
    print(f"load average before {load0[0]:.2f}, after {load1[0]:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
