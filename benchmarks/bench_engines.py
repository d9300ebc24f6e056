"""CPU per request of every engine variant, prefix caching and fleets beside the base engine,
on the same workload (issue 22 item 2), in one process: ``simulate`` timed with
``time.process_time`` (the trace parsed once, outside the timing), the median of ``--repeats``
runs, each configuration in turn within a round so that load on the machine hits all alike.

Usage: python benchmarks/bench_engines.py [--trace PATH] [--repeats N]
(default: ../shared/bench/conv_n2000_q6.jsonl, the bench engine of bench_simulate.py; prefix
caching on the Mooncake conversation trace, whose requests carry prefix hashes)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
BENCH = {"gpu": "A100-80GB", "model": "Llama-2-7B"}
ENGINE = {"num_gpu_blocks": 7672, "block_size": 16, "max_num_seqs": 256,
          "max_num_batched_tokens": 4096}


def cases(trace: Path, mooncake: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    out: list[tuple[str, Path, dict[str, Any]]] = [("vllm (base)", trace, {})]
    for name in ("vllm-swap", "tgi", "sglang", "trtllm"):
        out.append((name, trace, {"name": name}))
    for router in ("round_robin", "least_tokens", "prefix_affinity"):
        out.append((f"fleet 8 x vllm, {router}", trace, {"fleet": router}))
    out.append(("mooncake: vllm (base)", mooncake, {"blocks": 3000}))
    out.append(("mooncake: vllm + prefix caching", mooncake,
                {"blocks": 3000, "enable_prefix_caching": True}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(SHARED / "bench" / "conv_n2000_q6.jsonl"))
    parser.add_argument("--mooncake",
                        default=str(SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policy", default="unlimited")
    args = parser.parse_args()

    from kvbudget.policies import make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import FleetConfig, SimConfig, simulate
    from kvbudget.workloads.traces import load_trace

    todo = cases(Path(args.trace), Path(args.mooncake))
    loaded = {path: load_trace(path).workload for path in {c[1] for c in todo}}
    configs = []
    for label, path, opts in todo:
        opts = dict(opts)
        fleet = opts.pop("fleet", None)
        blocks = opts.pop("blocks", None)
        engine = dict(ENGINE, **opts)
        if blocks is not None:
            engine["num_gpu_blocks"] = blocks
        if fleet is not None:
            engine["num_gpu_blocks"] = ENGINE["num_gpu_blocks"] // 8
        cfg = SimConfig(**BENCH, engine=EngineConfig(**engine),
                        fleet=None if fleet is None else FleetConfig(num_replicas=8, router=fleet))
        configs.append((label, loaded[path], cfg))
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in configs}
    for _ in range(args.repeats):
        for label, w, cfg in configs:
            start = time.process_time()
            simulate(w, make_policy(args.policy), cfg)
            cpu[label].append(time.process_time() - start)
    base = {path: None for path in loaded}
    print(f"{'configuration':<34}{'requests':>9}{'cpu ms/req':>12}{'x base':>8}")
    for label, w, _cfg in configs:
        per = statistics.median(cpu[label]) / len(w) * 1e3
        key = next(p for p, wl in loaded.items() if wl is w)
        if base[key] is None:
            base[key] = per
        print(f"{label:<34}{len(w):>9,}{per:>12.4f}{per / base[key]:>8.2f}")


if __name__ == "__main__":
    main()
