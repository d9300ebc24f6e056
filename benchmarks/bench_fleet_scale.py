"""A fleet at scale (issue 22 item 4): N synthetic requests through a fleet of replicas, the
whole ``kvbudget simulate`` process measured with ``os.wait4`` (the kernel's accounting of the
child: CPU seconds and peak resident memory, ``ru_maxrss``), records written with ``--out``.

The workload (a scenario file written to a temporary folder): Poisson arrivals at ``--rate``
requests a second, one interactive tier, prompts uniform 16-2,048 tokens, outputs uniform
4-256 (``max_output_tokens`` 256), served by ``--replicas`` replicas of Llama-3.1-8B on H200
(vLLM's defaults for the GPU) behind ``--router``, policy ``--policy``. The child's standard
error is passed through, so its progress bar shows at a terminal.

Usage: python benchmarks/bench_fleet_scale.py [--requests 1000000] [--replicas 16]
           [--router round_robin] [--policy conservative] [--rate 400] [--keep DIR]
"""

from __future__ import annotations

import argparse
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

[workload]
kind = "synthetic"
num_requests = {requests}
arrival = {{ kind = "poisson", rate_rps = {rate} }}

[[workload.tiers]]
name = "interactive"
share = 1.0
prompt = {{ kind = "uniform", low = 16, high = 2048 }}
output = {{ kind = "uniform", low = 4, high = 256 }}
max_output = {{ kind = "fixed", tokens = 256 }}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--router", default="round_robin")
    parser.add_argument("--policy", default="conservative")
    parser.add_argument("--rate", type=float, default=400.0)
    parser.add_argument("--keep", help="write the run folder here (default: a temporary one)")
    args = parser.parse_args()
    compile_project()
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "fleet_scale.toml"
        scenario.write_text(SCENARIO.format(replicas=args.replicas, router=args.router,
                                            requests=args.requests, rate=args.rate))
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
