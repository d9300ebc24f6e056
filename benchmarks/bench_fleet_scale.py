"""A fleet at scale (issue 22 item 4): N synthetic requests through a fleet of replicas, the
whole ``kvbudget simulate`` process measured with ``os.wait4`` (the kernel's accounting of the
child: CPU seconds and peak resident memory, ``ru_maxrss``), records written with ``--out``.

The workload (a scenario file written to a temporary folder): Poisson arrivals at ``--rate``
requests a second, one interactive tier, prompts uniform 16-2,048 tokens, outputs uniform
4-256 (``max_output_tokens`` 256), served by ``--replicas`` replicas of Llama-3.1-8B on H200
(vLLM's defaults for the GPU) behind ``--router``, policy ``--policy``. The child's standard
error is passed through, so its progress bar shows at a terminal.

The autoscaled case (``--diurnal PERIOD_S``): the same requests arriving on a day's shape,
a sinusoid of mean ``--rate``, amplitude 0.9 (the trough a tenth of the peak), one period of
``PERIOD_S`` seconds (86,400 for a day, less for a day scaled into fewer seconds), run twice:
a fixed fleet of ``--replicas`` and an autoscaled one of 1 to ``--replicas`` replicas
(``[fleet.autoscale]``: ``vllm:num_requests_running``, target ``--target`` a replica, KEDA's
30 s polling, the HPA's 300 s scale-down window, the default cold start), each process
measured alike; the autoscaled run's replica-hours and scale events are printed beside.

Usage: python benchmarks/bench_fleet_scale.py [--requests 1000000] [--replicas 16]
           [--router round_robin] [--policy conservative] [--rate 400] [--keep DIR]
           [--diurnal PERIOD_S] [--target 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_project

REPO = Path(__file__).resolve().parents[1]

SCENARIO = """\
name = "fleet-scale"
seed = 1
gpu = "H200"
model = "Llama-3.1-8B"

[fleet]
num_replicas = {replicas}
router = "{router}"
{autoscale}
[workload]
kind = "synthetic"
num_requests = {requests}
arrival = {arrival}

[[workload.tiers]]
name = "interactive"
share = 1.0
prompt = {{ kind = "uniform", low = 16, high = 2048 }}
output = {{ kind = "uniform", low = 4, high = 256 }}
max_output = {{ kind = "fixed", tokens = 256 }}
"""


AUTOSCALE = """
[fleet.autoscale]
min_replicas = 1
max_replicas = {replicas}
metric = "vllm:num_requests_running"
target = {target}
"""


def run(args: argparse.Namespace, tmp: str, *, autoscale: bool) -> dict[str, float]:
    """One ``kvbudget simulate`` process on the scenario: its CPU, wall time and peak memory
    (and the autoscaler's figures from the summary)."""
    scenario = Path(tmp) / f"fleet_scale_{int(autoscale)}.toml"
    arrival = (f"{{ kind = \"poisson\", rate_rps = {args.rate} }}" if args.diurnal is None
               else f"{{ kind = \"diurnal\", mean_rate_rps = {args.rate}, amplitude = 0.9, "
                    f"period_s = {args.diurnal}, peak_s = {args.diurnal / 2} }}")
    scenario.write_text(SCENARIO.format(
        replicas=args.replicas, router=args.router, requests=args.requests, arrival=arrival,
        autoscale=AUTOSCALE.format(replicas=args.replicas, target=args.target) if autoscale
        else ""))
    out = Path(args.keep) / f"run_{int(autoscale)}" if args.keep else Path(tmp) / "run"
    cmd = [sys.executable, "-m", "kvbudget.cli.main", "simulate", "--scenario",
           str(scenario), "--policy", args.policy, "--out", str(out)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}")
    summary = json.loads((out / "summary.json").read_text())
    fig = {"cpu": usage.ru_utime + usage.ru_stime, "wall": wall,
           "peak_mb": usage.ru_maxrss / 1024, "records_mb": (out / "requests.parquet")
           .stat().st_size / 1e6, "completed": summary["overall"]["completed"]}
    scale = summary["engine"]["fleet"].get("autoscale")
    if scale is not None:
        fig.update(replica_h=scale["replica_seconds"] / 3600, peak=scale["peak_replicas"],
                   ups=scale["num_scale_ups"], downs=scale["num_scale_downs"],
                   delay=scale["scale_up_delay_s"])
    fig["end_h"] = summary["duration_s"] / 3600
    return fig


def diurnal_main(args: argparse.Namespace) -> None:
    """The fixed fleet and the autoscaled one on the same day-shaped arrivals."""
    n = args.requests
    with tempfile.TemporaryDirectory() as tmp:
        for autoscale in (False, True):
            f = run(args, tmp, autoscale=autoscale)
            what = (f"autoscaled 1-{args.replicas}" if autoscale
                    else f"fixed {args.replicas}")
            print(f"{what}: cpu {f['cpu']:.1f} s ({f['cpu'] / n * 1e3:.4f} ms a request), "
                  f"wall {f['wall']:.1f} s, peak RSS {f['peak_mb']:,.0f} MB, completed "
                  f"{f['completed']:,}, span {f['end_h']:.2f} h")
            if autoscale:
                print(f"  replica-hours {f['replica_h']:.2f} (fixed: "
                      f"{args.replicas * f['end_h']:.2f}), peak {f['peak']} replicas, "
                      f"{f['ups']} scale-ups, {f['downs']} scale-downs, cold start "
                      f"{f['delay']:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--router", default="round_robin")
    parser.add_argument("--policy", default="conservative")
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--keep", help="write the run folder here (default: a temporary one)")
    parser.add_argument("--diurnal", type=float, default=None,
                        help="the autoscaled case: arrivals on a day's shape of this period (s)")
    parser.add_argument("--target", type=float, default=64.0)
    args = parser.parse_args()
    compile_project()
    if args.diurnal is not None:
        print(f"{args.requests:,} requests, H200 Llama-3.1-8B, {args.router}, {args.policy}, "
              f"diurnal mean {args.rate:g} req/s, period {args.diurnal:g} s, --out")
        diurnal_main(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "fleet_scale.toml"
        scenario.write_text(SCENARIO.format(
            replicas=args.replicas, router=args.router, requests=args.requests, autoscale="",
            arrival=f"{{ kind = \"poisson\", rate_rps = {args.rate} }}"))
        out = Path(args.keep) if args.keep else Path(tmp) / "run"
        cmd = [sys.executable, "-m", "kvbudget.cli.main", "simulate", "--scenario",
               str(scenario), "--policy", args.policy, "--out", str(out)]
        load_before = os.getloadavg()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        load_after = os.getloadavg()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed ({os.waitstatus_to_exitcode(status)}): {' '.join(cmd)}")
        records = out / "requests.parquet"
        size_mb = records.stat().st_size / 1e6
    cpu = usage.ru_utime + usage.ru_stime
    peak_mb = usage.ru_maxrss / 1024  # kilobytes on Linux
    n = args.requests
    print(f"{n:,} requests, {args.replicas} x H200 Llama-3.1-8B, {args.router}, "
          f"{args.policy}, {args.rate:g} req/s, --out")
    print(f"cpu {cpu:.1f} s ({cpu / n * 1e3:.4f} ms a request), wall {wall:.1f} s, "
          f"peak RSS {peak_mb:,.0f} MB ({peak_mb * 1e6 / n:.0f} bytes a request), "
          f"records {size_mb:,.0f} MB")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} "
          f"(1 min; {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
