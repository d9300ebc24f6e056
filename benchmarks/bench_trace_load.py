"""Loading speed and memory of big traces: a generated 1.5 M-row BurstGPT-style file (the real
``BurstGPT_1.csv`` has 1.43 M rows) and, with ``--azure``, an Azure-2024-style file
(``+00:00`` timestamps; the real week-long trace has 16.8 M rows).

The file is generated in a temporary directory by a child process, and each load runs in a
fresh process so that its peak memory is its own (``os.wait4``'s ``ru_maxrss``; the parent stays
small because a forked child's peak counts the parent's pages until it execs). Figures: rows per second of ``load_trace``
alone (timed inside the child with ``time.perf_counter``, and its CPU seconds with
``time.process_time``: the steadier figure on a busy machine), the child's peak RSS beside that of
a child that only imports the same modules (and what the load adds, in bytes a row), the bytes
a row of the loaded workload's own columns (:func:`workload_bytes_per_row`), the peak of
Python-tracked allocations (``tracemalloc``, which includes numpy arrays) and Arrow's
memory-pool peak.

Usage: python benchmarks/bench_trace_load.py [--rows N] [--repeats R] [--azure]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvbudget.workloads.workload import Workload

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

CHILD = """
import json, sys, time, tracemalloc
import pyarrow as pa, pyarrow.csv, pandas
from kvbudget.workloads.traces import TraceOptions, load_trace
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else ".")
if sys.argv[1] == "baseline":
    print(json.dumps({}))
    raise SystemExit
tracemalloc.start()
start, start_cpu = time.perf_counter(), time.process_time()
loaded = load_trace(sys.argv[1], TraceOptions(**json.loads(sys.argv[2])))
elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
_, peak = tracemalloc.get_traced_memory()
from bench_trace_load import workload_bytes_per_row
print(json.dumps({"seconds": elapsed, "cpu_seconds": cpu, "rows": len(loaded.workload),
                  "workload_bytes_per_row": workload_bytes_per_row(loaded.workload),
                  "dropped": loaded.report.dropped_rows, "format": loaded.report.format,
                  "tracemalloc_peak_mb": peak / 2**20,
                  "arrow_pool_peak_mb": pa.default_memory_pool().max_memory() / 2**20}))
"""


def workload_bytes_per_row(workload: Workload) -> float:
    """The bytes a request of a loaded workload's array columns (arrival, the three token
    counts, tier, deadline, id; prefix hashes and timeouts where it has them)."""
    arrays = [getattr(workload, f.name) for f in dataclasses.fields(workload)]
    total = sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))
    return total / len(workload) if len(workload) else 0.0


def generate_burstgpt(path: Path, rows: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(3.6, size=rows)).round(0)
    request = np.ceil(rng.lognormal(5.8, 1.1, size=rows)).astype(np.int64)
    response = np.ceil(rng.lognormal(5.0, 1.0, size=rows)).astype(np.int64)
    failed = rng.random(rows) < 0.018  # about 1.8% failures, as in BurstGPT_1
    request[failed] = 0
    response[failed] = 0
    model = np.where(rng.random(rows) < 0.8, "ChatGPT", "GPT-4")
    log = np.where(rng.random(rows) < 0.97, "Conversation log", "API log")
    table = pa.table({
        "Timestamp": ts, "Model": model, "Request tokens": request,
        "Response tokens": response, "Total tokens": request + response, "Log Type": log,
    })
    pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="none"))


def generate_azure_2024(path: Path, rows: int, seed: int = 0) -> None:
    import pandas as pd

    rng = np.random.default_rng(seed)
    start = np.datetime64("2024-05-10T00:00:00", "us")
    stamps = start + np.cumsum(rng.exponential(36_000.0, size=rows)).astype("timedelta64[us]")
    text = pd.Series(stamps).dt.strftime("%Y-%m-%d %H:%M:%S.%f+00:00")
    frame = pd.DataFrame({"TIMESTAMP": text,
                          "ContextTokens": np.ceil(rng.lognormal(7.0, 1.0, rows)).astype(int),
                          "GeneratedTokens": np.ceil(rng.lognormal(4.0, 1.2, rows)).astype(int)})
    frame.to_csv(path, index=False)


def run_child(args: list[str]) -> tuple[dict[str, float], float, float]:
    """(the child's JSON, its CPU seconds, its peak RSS in MiB)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    with proc.stdout, proc.stderr:
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        err = proc.stderr.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"child failed: {err}")
    return json.loads(out), usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def bench(label: str, path: Path, options: Mapping[str, object], repeats: int) -> None:
    _, _, base_rss = run_child(["baseline"])
    runs = [run_child([str(path), json.dumps(options), str(HERE)]) for _ in range(repeats)]
    seconds = statistics.median(r[0]["seconds"] for r in runs)
    cpu = statistics.median(r[0]["cpu_seconds"] for r in runs)
    first = runs[0][0]
    rows_read = first["rows"] + first["dropped"]
    peak = max(r[2] for r in runs)
    print(f"{label}: {path.stat().st_size / 2**20:,.1f} MiB, {rows_read:,.0f} rows "
          f"({first['format']}, {first['dropped']:,.0f} dropped)")
    print(f"  load_trace      {seconds:8.2f} s   {rows_read / seconds:>12,.0f} rows/s "
          f"(median of {repeats}, wall)")
    print(f"  load_trace CPU  {cpu:8.2f} s   {rows_read / cpu:>12,.0f} rows a CPU second "
          "(all its threads)")
    print(f"  process CPU     {statistics.median(r[1] for r in runs):8.2f} s   (incl. start-up)")
    print(f"  peak RSS        {peak:8.0f} MiB  (imports alone: {base_rss:.0f} MiB, "
          f"load adds {peak - base_rss:.0f} MiB: "
          f"{(peak - base_rss) * 2**20 / rows_read:.0f} bytes a row)")
    print(f"  workload        {first['workload_bytes_per_row']:8.0f} bytes a row (its columns)")
    print(f"  tracemalloc     {first['tracemalloc_peak_mb']:8.0f} MiB  peak of Python/numpy "
          "allocations")
    print(f"  arrow pool      {first['arrow_pool_peak_mb']:8.0f} MiB  peak")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_500_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--azure", action="store_true", help="also an Azure-2024-style file")
    parser.add_argument("--generate", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        kind, out = args.generate
        (generate_burstgpt if kind == "burstgpt" else generate_azure_2024)(Path(out), args.rows)
        return
    with tempfile.TemporaryDirectory() as tmp:
        runs = [("BurstGPT-style", "burstgpt", {"tier_column": "Log Type", "tier_map": {
            "Conversation log": "interactive", "API log": "batch"}})]
        if args.azure:
            runs.append(("Azure-2024-style", "azure", {}))
        for label, kind, options in runs:
            path = Path(tmp) / f"{kind}_bench.csv"
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--generate",
                            kind, str(path)], check=True, cwd=REPO)
            print(f"{label}: generated in {time.perf_counter() - t:.1f} s")
            bench(label, path, options, args.repeats)


if __name__ == "__main__":
    main()
