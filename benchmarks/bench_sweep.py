"""Sweep throughput: simulation runs per minute with the local process pool and with Ray.

The same plan (the default scenario: Llama-3.1-8B on one H100-80GB, 300 s of mixed traffic;
a grid of policies and overcommit ratios x replications) runs on

* ``local -j 1``: one process (the serial baseline),
* ``local``: a process pool over every core,
* ``ray``: a local Ray instance with every core,

each timed from a cold start (pool or Ray start-up included) and warm (after one small run per
worker has started the workers and imported the simulator), and the script checks that every
executor produced the same metrics. Usage::

    .venv/bin/python benchmarks/bench_sweep.py [--replications 3] [--duration-s 300]
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from kvbudget.simulator.scenario import default_scenario
from kvbudget.studies import sweep
from kvbudget.studies.executors import LocalExecutor, RayExecutor, available_cores
from kvbudget.studies.sweep import Axis, SweepPlan, execute


def _metrics(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("run_key", "interactive_ttft_p99_s", "batch_output_tokens_per_s",
            "overall_slo_attainment", "engine_num_steps")
    return sorted(tuple(r[k] for k in keys) for r in rows)


def _warm_up(ex: Any, workers: int) -> None:
    """One tiny run per worker: starts the workers and imports the simulator in each."""
    tiny = default_scenario(["workload.num_requests=20", "workload.duration_s=1000"])
    execute(SweepPlan(tiny, (), replications=max(1, workers)).runs, ex)


def _timed(label: str, make: Any, plan: SweepPlan) -> tuple[float, float, list[Any]]:
    out = []
    rows: list[dict[str, Any]] = []
    for warm in (False, True):
        sweep._WORKLOADS.clear()  # no workloads memoised in this process from a previous pass
        with make() as ex:
            if warm:
                _warm_up(ex, ex.num_workers)
            t0 = time.perf_counter()
            rows = execute(plan.runs, ex)
            wall = time.perf_counter() - t0
        rate = len(rows) / wall * 60
        out.append(rate)
        tag = "warm" if warm else "cold"
        print(f"{label + ' ' + tag:<26} {len(rows):>5} runs  {wall:8.2f} s  {rate:8.1f} runs/min",
              flush=True)
    return out[0], out[1], _metrics(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replications", type=int, default=3)
    ap.add_argument("--duration-s", type=float, default=300.0)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    scn = default_scenario([f"workload.duration_s={args.duration_s}"])
    plan = SweepPlan(scn, (
        Axis("policy", ("unlimited", "conservative", "overcommit", "preemptive")),
        Axis("policy_params.overcommit_ratio", (0.4, 0.7)),
    ), replications=args.replications)
    cores = available_cores()
    print(f"plan: {len(plan.points)} configurations x {args.replications} replications = "
          f"{len(plan.runs)} runs, {cores} cores; default scenario, {args.duration_s:g} s")
    _, serial, ref = _timed("local -j 1", lambda: LocalExecutor(1), plan)
    local_cold, local, got = _timed(f"local -j {cores}", LocalExecutor, plan)
    assert got == ref, "the local pool's results differ from the serial run's"
    if args.no_ray:
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray: not installed (pip install 'kvbudget[ray]')")
        return
    ray_cold, ray_warm, got = _timed(f"ray {cores} CPUs", lambda: RayExecutor(num_cpus=cores),
                                     plan)
    assert got == ref, "Ray's results differ from the local executor's"
    print(f"warm speed-up over one process: local {local / serial:.2f}x, ray "
          f"{ray_warm / serial:.2f}x; cold: local {local_cold / serial:.2f}x, ray "
          f"{ray_cold / serial:.2f}x; results identical across executors")
    assert math.isfinite(local)


if __name__ == "__main__":
    main()
