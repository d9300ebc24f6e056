"""The CPU work ``kvbudget serve`` does a request, as instructions counted by valgrind
(cachegrind, no cache simulation): a figure the machine's load does not move, where
``bench_serve.py``'s timings on a shared machine wander by tens of per cent between runs.

The gateway runs under valgrind in front of ``bench_serve.py``'s fake upstream
(``--count-tokens bytes``, a budget no burst fills); this process is the client. Each count is
a whole gateway process: started, warmed with ``--warm`` sequential streams, sent ``--requests``
streams in bursts of ``--burst`` (all of a burst at once, as ``bench_serve.py`` sends them),
stopped (SIGTERM). The instructions a request are the difference between a process that served
them and one that served only the warm-up, divided by their number: the process's start-up,
imports and shutdown cancel out. Two stream lengths (``--tokens``, e.g. ``2,34``) split it into
the work a request (its admission, its first chunk and its end) and the work a chunk relayed:
``a + b * tokens``, solved from the two.

``PYTHONHASHSEED=0``; two counts of the same tree agree to about 1 % (the event loop's wake-ups
follow the timing of the client and the fake: the residue is theirs).

``--floor static`` or ``--floor aiohttp`` counts a bare proxy on the gateway's stack instead
(``serve_floor.py``: uvicorn answering by itself, or posting upstream with aiohttp and relaying
the stream, with no admission, counting, parsing or settlement): the difference from the
gateway's count is the gateway's own work.

Usage: python benchmarks/bench_serve_instructions.py [--requests 200] [--burst 100]
       [--tokens 2,34] [--warm 10] [--tree DIR] [--floor {static,aiohttp}]
(``--tree``: count another checkout's gateway, e.g. a worktree of the commit before a change.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_serve import burst, free_port, wait_port
from bytecode import compile_project

REPO = Path(__file__).resolve().parents[1]
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def count(tree: Path, up_port: int, num_requests: int, burst_size: int, num_warm: int,
          log_dir: Path, floor: str | None = None) -> int:
    """Instructions of one gateway process (or ``floor``'s bare proxy) that served
    ``num_warm`` streams one at a time, then ``num_requests`` in bursts of ``burst_size``."""
    port = free_port()
    log = log_dir / f"cachegrind-{up_port}-{num_requests}.log"
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0",
           "OPENBLAS_NUM_THREADS": "1"}
    upstream = f"http://127.0.0.1:{up_port}"
    server = [str(REPO / "benchmarks" / "serve_floor.py"), floor, upstream, str(port)] \
        if floor else ["-m", "kvbudget.cli.main", "serve", "--upstream", upstream, "--port",
                       str(port), "--count-tokens", "bytes", "--capacity-tokens", str(10**9)]
    proc = subprocess.Popen(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         f"--log-file={log}", sys.executable, *server],
        env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc, bound_s=600)
        url = f"http://127.0.0.1:{port}"
        for _ in range(num_warm):
            asyncio.run(burst(url, 1))
        done = 0
        while done < num_requests:
            size = min(burst_size, num_requests - done)
            asyncio.run(burst(url, size))
            done += size
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)
    return instructions_of(log.read_text(), str(log))


def instructions_of(text: str, source: str = "valgrind's log") -> int:
    """The ``I refs`` of a cachegrind summary."""
    found = _REFS.search(text)
    if found is None:
        raise RuntimeError(f"no instruction count in {source}")
    return int(found.group(1).replace(",", ""))


def split(per_stream: dict[int, float]) -> tuple[float, float]:
    """``(a, b)`` with ``per_stream[t] == a + b * t`` for the two stream lengths ``t``: the
    work a request less its chunks, and the work a chunk relayed."""
    (t0, i0), (t1, i1) = per_stream.items()
    per_chunk = (i1 - i0) / (t1 - t0)
    return i0 - per_chunk * t0, per_chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--tokens", default="2,34")
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--tree", type=Path, default=REPO)
    parser.add_argument("--floor", choices=("static", "aiohttp"),
                        help="count serve_floor.py's bare proxy instead of the gateway")
    args = parser.parse_args()
    lengths = [int(t) for t in args.tokens.split(",")]
    compile_project(args.tree)  # else the first process would count compiling it
    per_request: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for tokens in lengths:
            up_port = free_port()
            fake = subprocess.Popen(
                [sys.executable, str(REPO / "benchmarks" / "bench_serve.py"), "--fake",
                 str(up_port), str(tokens), "1"], env={**os.environ, "PYTHONPATH": str(REPO)})
            try:
                wait_port(up_port, fake)
                base = count(args.tree, up_port, 0, args.burst, args.warm, Path(tmp),
                             args.floor)
                full = count(args.tree, up_port, args.requests, args.burst, args.warm,
                             Path(tmp), args.floor)
            finally:
                fake.terminate()
                fake.wait(timeout=60)
            per_request[tokens] = (full - base) / args.requests
            print(f"{tokens} chunks a stream: {full - base:,} instructions for "
                  f"{args.requests} streams ({base:,} for start-up and warm-up)",
                  file=sys.stderr, flush=True)
    out: dict[str, object] = {
        "tree": str(args.tree), "floor": args.floor, "requests": args.requests,
        "burst": args.burst,
        "instructions_per_stream": {str(k): round(v) for k, v in per_request.items()}}
    if len(lengths) == 2 and lengths[0] != lengths[1]:
        less_chunks, per_chunk = split(per_request)
        out["instructions_per_chunk"] = round(per_chunk)
        out["instructions_per_request_less_chunks"] = round(less_chunks)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
