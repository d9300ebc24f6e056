"""The overloaded regime: how the default simulation's queue grows against real vLLM servers.

Every recorded run in ``../shared/measured/`` is overloaded (its README: queueing and KV
pressure at one load level). Capacity answers live there, and there a small step-time error is
amplified by the queue, so this benchmark looks at the queue itself, not only at latency
percentiles (``bench_fidelity.py``): each run is simulated with the defaults exactly as
``bench_fidelity.py`` simulates it (same engine configuration, no API-server cost), and at
a quarter, half, three quarters and the end of the measured makespan it prints

- requests completed by then (the records' ``arrival_s + e2e_s``; measured: ``requests.csv``);
- requests waiting and running then (the simulated timeline; measured: ``timeseries.csv``,
  vLLM's own per-second gauges);

then per run the slope of the waiting queue over the arrival window (requests per second, a
least-squares line through the per-second counts: the fluid model's ``lambda - mu``), the
peak of the waiting queue, the mean E2E and the makespan, each with its relative error.

No published queue-growth curve of a real server was found to add (a queue length over time is
rarely published; throughput-latency curves are covered by ``bench_fidelity_published.py``).
The engine's own fluid behaviour past saturation is tested with known answers in
``tests/model/test_overload.py``.

Usage: python benchmarks/bench_overload.py
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fidelity import MeasuredRun, engine_config, find_runs

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True)
class Queue:
    """One run's queue, simulated or measured: end times of the requests, and per-second
    waiting and running counts."""

    end_s: np.ndarray
    time_s: np.ndarray
    num_waiting: np.ndarray
    num_running: np.ndarray
    e2e_s: np.ndarray


def measured_queue(run: MeasuredRun) -> Queue:
    with (run.folder / "timeseries.csv").open() as f:
        rows = list(csv.DictReader(f))
    col = {k: np.array([float(r[k]) for r in rows]) for k in ("t", "running", "waiting")}
    e2e = run.measured["e2e"]
    return Queue(run.arrival_s + e2e, col["t"], col["waiting"], col["running"], e2e)


def simulated_queue(run: MeasuredRun) -> Queue:
    from kvbudget.policies import TierConfig, make_policy
    from kvbudget.simulator.run import SimConfig, simulate
    from kvbudget.workloads import Workload

    n = len(run.arrival_s)
    workload = Workload(
        run.arrival_s, run.prompt_tokens, run.output_tokens, run.output_tokens.copy(),
        np.zeros(n, np.int16), ("default",), np.full(n, np.nan), np.arange(n), name=run.name,
    )
    tier = TierConfig(name="default", max_sequence_tokens=10**7, priority=0,
                      queue_timeout_s=None, retryable_on_overload=True, ttft_s=60.0, tpot_s=1.0)
    config = SimConfig(gpu=run.gpu, model=run.model, engine=engine_config(run), tiers=(tier,),
                       frontend="none")
    result = simulate(workload, make_policy("unlimited"), config)
    rec, tl = result.record_columns, result.timeline_columns
    e2e = np.asarray(rec["e2e_s"], np.float64)
    return Queue(np.asarray(rec["arrival_s"], np.float64) + e2e,
                 np.asarray(tl["time_s"], np.float64), np.asarray(tl["num_waiting"], np.float64),
                 np.asarray(tl["num_running"], np.float64), e2e)


def at(queue: Queue, t: float) -> tuple[float, float, float]:
    """(completed by ``t``, waiting at ``t``, running at ``t``): the gauges' last sample at or
    before ``t``."""
    k = max(int(np.searchsorted(queue.time_s, t, side="right")) - 1, 0)
    done = float(np.count_nonzero(queue.end_s <= t))
    return done, float(queue.num_waiting[k]), float(queue.num_running[k])


def growth(queue: Queue, t0: float, t1: float) -> float:
    """Least-squares slope of the waiting count over ``[t0, t1]`` (requests per second)."""
    m = (queue.time_s >= t0) & (queue.time_s <= t1)
    if np.count_nonzero(m) < 2:
        return math.nan
    return float(np.polyfit(queue.time_s[m], queue.num_waiting[m], 1)[0])


def _err(sim: float, meas: float) -> str:
    if not (math.isfinite(sim) and math.isfinite(meas)) or meas == 0:
        return "n/a"
    return f"{(sim - meas) / abs(meas) * 100:+.1f}%"


def headline(run: MeasuredRun, sim: Queue, meas: Queue) -> dict[str, tuple[float, float]]:
    """The run's figures, ``name: (simulated, measured)`` (docs/fidelity.md quotes them)."""
    start = float(run.arrival_s.min())
    window = (start, float(run.arrival_s.max()))
    return {
        "queue growth over the arrivals (req/s)": (growth(sim, *window), growth(meas, *window)),
        "peak waiting": (float(sim.num_waiting.max()), float(meas.num_waiting.max())),
        "E2E mean (s)": (float(np.nanmean(sim.e2e_s)), float(np.nanmean(meas.e2e_s))),
        "makespan (s)": (float(np.nanmax(sim.end_s)) - start, float(np.nanmax(meas.end_s)) - start),
    }


def report(run: MeasuredRun) -> list[str]:
    meas, sim = measured_queue(run), simulated_queue(run)
    makespan = float(np.nanmax(meas.end_s) - run.arrival_s.min())
    lines = [f"{run.name}  ({len(run.arrival_s)} requests, {run.gpu}, {run.model}, "
             f"max_num_seqs {run.max_num_seqs})",
             f"  {'time':>8} {'done sim':>9} {'meas':>6} {'waiting sim':>12} {'meas':>6} "
             f"{'running sim':>12} {'meas':>6}"]
    for f in FRACTIONS:
        t = run.arrival_s.min() + f * makespan
        s, m = at(sim, t), at(meas, t)
        lines.append(f"  {t:>7.1f}s {s[0]:>9.0f} {m[0]:>6.0f} {s[1]:>12.0f} {m[1]:>6.0f} "
                     f"{s[2]:>12.0f} {m[2]:>6.0f}")
    for name, (s_value, m_value) in headline(run, sim, meas).items():
        lines.append(f"  {name:<40} sim {s_value:>9.2f}  measured {m_value:>9.2f}  "
                     f"{_err(s_value, m_value)}")
    return lines


def main() -> None:
    runs = find_runs()
    if not runs:
        sys.exit("no measured runs under ../shared/measured")
    for run in runs:
        print("\n".join(report(run)), flush=True)
        print()


if __name__ == "__main__":
    main()
