"""Whole-process cost of ``kvbudget simulate``: CPU seconds, wall seconds, peak memory.

Start-up is included (users pay for it). Each figure is the median of ``--repeats`` runs, each
run a fresh process measured with ``os.wait4`` (the kernel's own accounting of the child), after
the project's modules are byte-compiled as an installed package's are (``bytecode.py``):

(a) the four workloads in ../shared/bench/ with the configuration other simulators were timed
    on there (Llama-2-7B on A100-80GB, 7,672 blocks of 16 tokens, max_num_seqs 256,
    max_num_batched_tokens 4,096, policy unlimited), with CPU milliseconds per request beside
    the figures quoted in ../shared/bench/README.md;
(b) the Azure LLM inference 2023 conversation trace (19,366 requests, one hour) under each
    seed policy (Llama-3.1-8B on H100-80GB);
(c) a synthetic run of a million requests.

With ``--blis CMD`` (e.g. ``../shared/bench/peers/blis/run.sh``, called as ``CMD WORKLOAD``) it
times instead kvbudget and that peer side by side on the four workloads of (a): ``--repeats``
pairs per workload, the two commands alternating (which one goes first alternates too), and
prints the medians, the least of each, the ratio of the medians (BLIS / kvbudget) and the
ratio of the least, with the machine's load average before and after (absolute times move
with the machine and its other jobs; the ratio is the figure to compare).

Usage: python benchmarks/bench_simulate.py [--repeats N] [--only a|b|c] [--million-requests N]
       python benchmarks/bench_simulate.py --blis ../shared/bench/peers/blis/run.sh [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bytecode import compile_project

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
KVBUDGET = [sys.executable, "-m", "kvbudget.cli.main"]
BENCH_ENGINE = ["--gpu", "A100-80GB", "--model", "Llama-2-7B", "--num-gpu-blocks", "7672",
                "--block-size", "16", "--max-num-seqs", "256", "--max-num-batched-tokens", "4096"]
# CPU seconds quoted in ../shared/bench/README.md (whole process, quiet 2-core machine)
QUOTED = {
    "conv_n2000_q2": ("23.3", "1.4-1.9"),
    "conv_n2000_q6": ("9.9", "1.4"),
    "conv_n10000_q2": ("97.8", "9.1-9.3"),
    "conv_n10000_q6": ("28.6", "7.7"),
}


def measure(args: list[str]) -> tuple[float, float, float]:
    """(cpu_s, wall_s, peak_rss_mb) of one child process."""
    # stderr to a file, not a pipe: a peer that logs more than a pipe holds would block
    with tempfile.TemporaryFile() as errfile:
        start = time.perf_counter()
        proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=errfile)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            errfile.seek(0)
            err = errfile.read().decode(errors="replace")[-4000:]
            raise SystemExit(f"failed: {' '.join(args)}\n{err}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def median_of(args: list[str], repeats: int) -> tuple[float, float, float, float]:
    """Median CPU s, median wall s, peak MB over the runs, and the least CPU s (on a shared
    machine the minimum is the steadiest figure: other jobs only ever add to it)."""
    runs = [measure(args) for _ in range(repeats)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            max(r[2] for r in runs), min(r[0] for r in runs))


def bench_a(repeats: int) -> None:
    print("(a) ../shared/bench workloads, Llama-2-7B / A100-80GB, 7672 x 16-token blocks, "
          "policy unlimited")
    print(f"{'workload':<16}{'requests':>9}{'cpu s':>8}{'min':>7}{'wall s':>8}{'MB':>7}"
          f"{'cpu ms/req':>12}{'min':>7}{'Vidur s':>9}{'BLIS s':>9}")
    for name in QUOTED:
        path = SHARED / "bench" / f"{name}.jsonl"
        n = sum(1 for _ in path.open())
        cpu, wall, mb, least = median_of(
            [*KVBUDGET, "simulate", "--trace", str(path), *BENCH_ENGINE, "--policy", "unlimited",
             "--json"], repeats)
        vidur, blis = QUOTED[name]
        print(f"{name:<16}{n:>9,}{cpu:>8.2f}{least:>7.2f}{wall:>8.2f}{mb:>7.0f}"
              f"{cpu / n * 1e3:>12.3f}{least / n * 1e3:>7.3f}{vidur:>9}{blis:>9}")


def bench_blis(blis: list[str], repeats: int) -> None:
    """kvbudget and a peer alternating on each bench workload: medians, least, ratios."""
    print(f"side by side with {' '.join(blis)} WORKLOAD: {repeats} alternating pairs per "
          "workload, whole-process CPU seconds (user + system)")
    load0 = os.getloadavg()
    print(f"load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
          f"({os.cpu_count()} CPUs)")
    print(f"{'workload':<16}{'kvbudget s':>11}{'min':>7}{'BLIS s':>9}{'min':>7}"
          f"{'ratio':>8}{'ratio of min':>14}{'kvb ms/req':>12}")
    for name in QUOTED:
        path = SHARED / "bench" / f"{name}.jsonl"
        n = sum(1 for _ in path.open())
        ours = [*KVBUDGET, "simulate", "--trace", str(path), *BENCH_ENGINE, "--policy",
                "unlimited", "--json"]
        theirs = [*blis, name]
        kvb: list[float] = []
        peer: list[float] = []
        for k in range(repeats):
            first, second = (ours, theirs) if k % 2 == 0 else (theirs, ours)
            a, b = measure(first)[0], measure(second)[0]
            kvb.append(a if first is ours else b)
            peer.append(b if first is ours else a)
        mk, mp = statistics.median(kvb), statistics.median(peer)
        print(f"{name:<16}{mk:>11.3f}{min(kvb):>7.3f}{mp:>9.3f}{min(peer):>7.3f}"
              f"{mp / mk:>8.1f}{min(peer) / min(kvb):>14.1f}{mk / n * 1e3:>12.3f}", flush=True)
    load1 = os.getloadavg()
    print(f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")


def bench_b(repeats: int) -> None:
    path = SHARED / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    print("\n(b) Azure LLM inference 2023 conv trace (19,366 requests, 1 h), "
          "Llama-3.1-8B / H100-80GB")
    print(f"{'policy':<14}{'cpu s':>8}{'min':>7}{'wall s':>8}{'MB':>7}{'cpu ms/req':>12}")
    for policy in ("unlimited", "conservative", "overcommit", "preemptive"):
        cpu, wall, mb, least = median_of(
            [*KVBUDGET, "simulate", "--trace", str(path), "--policy", policy, "--json"], repeats)
        print(f"{policy:<14}{cpu:>8.2f}{least:>7.2f}{wall:>8.2f}{mb:>7.0f}"
              f"{cpu / 19366 * 1e3:>12.3f}")


def bench_c(repeats: int, n: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    rate = 40.0  # requests per second: a fleet-sized load on one big replica
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "million.jsonl"
        arrival = np.cumsum(rng.exponential(1 / rate, n))
        prompt = rng.integers(16, 2048, n)
        output = rng.integers(4, 256, n)
        with path.open("w") as f:
            for i in range(n):
                f.write(f'{{"id": {i}, "arrival_s": {arrival[i]:.6f}, '
                        f'"prompt_tokens": {prompt[i]}, "output_tokens": {output[i]}}}\n')
        print(f"\n(c) synthetic: {n:,} requests, Poisson {rate:.0f} req/s, "
              "Llama-3.1-8B / H200-141GB, policy conservative")
        cpu, wall, mb, _ = median_of(
            [*KVBUDGET, "simulate", "--trace", str(path), "--gpu", "H200-141GB",
             "--policy", "conservative", "--json"], repeats)
        print(f"{'cpu s':>8}{'wall s':>8}{'MB':>7}{'cpu ms/req':>12}")
        print(f"{cpu:>8.2f}{wall:>8.2f}{mb:>7.0f}{cpu / n * 1e3:>12.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["a", "b", "c"])
    parser.add_argument("--million-requests", type=int, default=1_000_000)
    parser.add_argument("--blis", help="a peer's command, run as CMD WORKLOAD, to time "
                        "side by side with kvbudget (e.g. ../shared/bench/peers/blis/run.sh)")
    args = parser.parse_args()
    compile_project()
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED} is missing")
    if args.blis:
        bench_blis(shlex.split(args.blis), args.repeats)
        return
    if args.only in (None, "a"):
        bench_a(args.repeats)
    if args.only in (None, "b"):
        bench_b(args.repeats)
    if args.only in (None, "c"):
        bench_c(max(1, args.repeats // 3), args.million_requests)


if __name__ == "__main__":
    main()
