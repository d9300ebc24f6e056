"""CPU per request of every engine variant, prefix caching and fleets beside the base engine,
on the same workload (issue 22 item 2), in one process: ``simulate`` timed with
``time.process_time`` (the trace parsed once, outside the timing), the median of ``--repeats``
runs, each configuration in turn within a round so that load on the machine hits all alike.

Usage: python benchmarks/bench_engines.py [--trace PATH] [--repeats N] [--only TEXT]
(default: ../shared/bench/conv_n2000_q6.jsonl, the bench engine of bench_simulate.py).

Fleets of 8 replicas come two ways: on the trace as it is, each replica with an eighth of the
base engine's KV blocks (so an eighth of its load), and "at 8x rate", each replica with the base
engine's blocks and the trace's arrival times divided by 8 (so each replica is offered the base
engine's request rate, and an eighth of the requests). Prefix caching runs on the Mooncake
conversation trace, whose requests carry prefix hashes: each engine with it on, beside the base
engine with it off, on the same trace and KV blocks. ``x base`` is the ratio to the first row of
the same trace; the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BENCH: dict[str, Any] = {"gpu": "A100-80GB", "model": "Llama-2-7B"}
ENGINE = {"num_gpu_blocks": 7672, "block_size": 16, "max_num_seqs": 256,
          "max_num_batched_tokens": 4096}


def cases(trace: Path, mooncake: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    out: list[tuple[str, Path, dict[str, Any]]] = [("vllm (base)", trace, {})]
    for name in ("vllm-swap", "tgi", "sglang", "trtllm"):
        out.append((name, trace, {"name": name}))
    for router in ("round_robin", "least_tokens", "prefix_affinity"):
        out.append((f"fleet 8 x vllm, {router}", trace, {"fleet": router}))
    # the same fleets with each replica loaded as the base engine is: its blocks, and the
    # trace's arrivals 8x as fast, so that a replica is offered the base engine's rate
    for router in ("round_robin", "least_tokens", "prefix_affinity"):
        out.append((f"fleet 8 x vllm at 8x rate, {router}", trace,
                    {"fleet": router, "speedup": 8}))
    # prefix caching is on by default (vLLM v1): the base row turns it off
    out.append(("mooncake: vllm (base), no caching", mooncake,
                {"blocks": 3000, "enable_prefix_caching": False}))
    for name in ("vllm", "tgi", "sglang", "trtllm"):  # vllm-swap: not modelled with caching
        out.append((f"mooncake: {name} + prefix caching", mooncake,
                    {"blocks": 3000, "enable_prefix_caching": True, "name": name}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(SHARED / "bench" / "conv_n2000_q6.jsonl"))
    parser.add_argument("--mooncake",
                        default=str(SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policy", default="unlimited")
    parser.add_argument("--only", action="append", default=[],
                        help="keep the configurations whose label contains TEXT (repeatable; "
                             "the base row of each trace they use is kept)")
    args = parser.parse_args()

    from kvbudget.policies import make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import FleetConfig, SimConfig, simulate
    from kvbudget.workloads.traces import load_trace

    todo = cases(Path(args.trace), Path(args.mooncake))
    if args.only:  # the rows asked for, and the base row of each trace they use
        keep = [c for c in todo if any(t in c[0] for t in args.only)]
        firsts = {next(c for c in todo if c[1] == path)[0] for path in {c[1] for c in keep}}
        todo = [c for c in todo if c[0] in firsts or c in keep]
    loaded = {path: load_trace(path).workload for path in {c[1] for c in todo}}
    configs = []
    for label, path, opts in todo:
        opts = dict(opts)
        fleet = opts.pop("fleet", None)
        blocks = opts.pop("blocks", None)
        speedup = opts.pop("speedup", None)
        engine = dict(ENGINE, **opts)
        workload = loaded[path]
        if blocks is not None:
            engine["num_gpu_blocks"] = blocks
        if speedup is not None:
            workload = dataclasses.replace(workload, arrival_s=workload.arrival_s / speedup)
        elif fleet is not None:
            engine["num_gpu_blocks"] = ENGINE["num_gpu_blocks"] // 8
        cfg = SimConfig(**BENCH, engine=EngineConfig(**engine),
                        fleet=None if fleet is None else FleetConfig(num_replicas=8, router=fleet))
        configs.append((label, path, workload, cfg))
    cpu: dict[str, list[float]] = {label: [] for label, _, _, _ in configs}
    one, five, fifteen = os.getloadavg()
    print(f"load average before: {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)")
    for _ in range(args.repeats):
        for label, _path, w, cfg in configs:
            start = time.process_time()
            simulate(w, make_policy(args.policy), cfg)
            cpu[label].append(time.process_time() - start)
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    base: dict[Path, float | None] = {path: None for path in loaded}
    print(f"{'configuration':<48}{'requests':>9}{'cpu ms/req':>12}{'min':>9}{'x base':>8}")
    for label, key, w, _cfg in configs:
        per = statistics.median(cpu[label]) / len(w) * 1e3
        least = min(cpu[label]) / len(w) * 1e3
        if base[key] is None:
            base[key] = per
        ratio = per / (base[key] or per)
        print(f"{label:<48}{len(w):>9,}{per:>12.4f}{least:>9.4f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
