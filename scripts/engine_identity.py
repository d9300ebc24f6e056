"""A digest of every result the engine family writes (records, timeline, token gaps and the
summary less its wall time) on the shared bench workloads and the engine/fleet cases, with
stepping (the reference, ``skip_ahead=False``) and with the speed-up: run it before and after an
engine change and compare the two files (issue 37's identity check).

Usage: python scripts/engine_identity.py OUT.json [--n N] [--only TEXT]
(``--n``: the first N requests of each workload, default 400, so a run takes minutes on a
loaded 2-core machine). Each line of the output names a case, a mode and a sha256 per part.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.perf.speculative import SpeculativeConfig
from kvbudget.policies import make_policy
from kvbudget.simulator.autoscale_config import AutoscaleConfig
from kvbudget.simulator.disagg_config import DisaggConfig, PoolConfig
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import FleetConfig, SimConfig, simulate
from kvbudget.workloads.traces import load_trace

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
if not (SHARED / "bench").is_dir():
    SHARED = Path("/work/shared")
BENCH = {"gpu": "A100-80GB", "model": "Llama-2-7B"}
MOONCAKE_MODEL = "Llama-3.1-8B"
ENGINE = {"num_gpu_blocks": 7672, "block_size": 16, "max_num_seqs": 256,
          "max_num_batched_tokens": 4096}
VARIANTS = ("vllm", "vllm-swap", "tgi", "sglang", "trtllm")
ROUTERS = ("round_robin", "least_tokens", "prefix_affinity")


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(label, trace, options): options name the engine, its blocks, a fleet's router, a
    speed-up of the arrivals, prefix caching."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for trace in ("conv_n2000_q2", "conv_n2000_q6", "conv_n10000_q2", "conv_n10000_q6"):
        out.append((f"{trace}: vllm", trace, {}))
    for name in VARIANTS:  # every variant, plenty of blocks and few (preemptions)
        out.append((f"q6: {name}", "conv_n2000_q6", {"name": name}))
        out.append((f"q6: {name}, 400 blocks", "conv_n2000_q6", {"name": name, "blocks": 400}))
    for router in ROUTERS:  # fleets: an eighth of the blocks each; at 8x rate; few blocks
        out.append((f"fleet {router}", "conv_n2000_q6", {"fleet": router, "blocks": 7672 // 8}))
        out.append((f"fleet {router} 8x rate", "conv_n2000_q6", {"fleet": router, "speedup": 8}))
        out.append((f"fleet {router} 8x rate, 200 blocks", "conv_n2000_q6",
                    {"fleet": router, "speedup": 8, "blocks": 200}))
        out.append((f"fleet {router} tgi 8x rate", "conv_n2000_q2",
                    {"fleet": router, "speedup": 8, "name": "tgi"}))
    out.append(("mooncake: vllm, no caching", "mooncake",
                {"blocks": 3000, "enable_prefix_caching": False}))
    for name in ("vllm", "tgi", "sglang", "trtllm"):
        out.append((f"mooncake: {name} + caching", "mooncake",
                    {"blocks": 3000, "enable_prefix_caching": True, "name": name}))
        out.append((f"mooncake: {name} + caching, 300 blocks", "mooncake",
                    {"blocks": 300, "enable_prefix_caching": True, "name": name}))
    for router in ROUTERS:
        out.append((f"mooncake fleet {router} + caching", "mooncake",
                    {"blocks": 600, "enable_prefix_caching": True, "fleet": router}))
    for split, extra in (("3P+5D", {}), ("2P+6D", {"blocks": 300}),
                         ("3P+5D", {"policy": "conservative"})):
        # disaggregated (issue 38): 8x rate, the base engine's blocks each unless given
        words = ", ".join(f"{k} {v}" for k, v in extra.items())
        out.append((f"disagg {split} 8x rate{', ' + words if words else ''}", "conv_n2000_q6",
                    {"disagg": split, "speedup": 8, **extra}))
    out.append(("disagg mooncake 2P+2D prefix_affinity + caching", "mooncake",
                {"blocks": 3000, "enable_prefix_caching": True, "disagg": "2P+2D",
                 "fleet": "prefix_affinity"}))
    out.append(("mooncake: vllm + caching, 16 GiB offload", "mooncake",
                {"blocks": 3000, "enable_prefix_caching": True, "offload": 16.0}))
    for label, spec, more in (  # speculative decoding (issue 39): its runs of verify steps
            ("eagle k3 rate 0.7", ("eagle", 3, 0.7), {}),
            ("eagle k5 rate 1.0, 8x rate", ("eagle", 5, 1.0), {"speedup": 8}),
            ("ngram k3 rate 0.5, vllm-swap 400 blocks", ("ngram", 3, 0.5),
             {"name": "vllm-swap", "blocks": 400}),
            ("eagle k2 rate 0.3, fleet least_tokens 8x rate", ("eagle", 2, 0.3),
             {"fleet": "least_tokens", "speedup": 8}),
            ("eagle3 tree of 6 (3 levels) rate 0.7, 8x rate", ("eagle3", 6, 0.7),
             {"speedup": 8, "tree": "[(0,), (1,), (0, 0), (1, 0), (0, 0, 0), (1, 0, 0)]"})):
        out.append((f"spec {label}", "conv_n2000_q6", {"spec": spec, **more}))
    for router, metric, target in (  # autoscaled fleets (issue 39): up from 1 and back down
            ("least_tokens", "vllm:num_requests_running", 8.0),
            ("round_robin", "vllm:num_requests_waiting", 1.0)):
        out.append((f"autoscale {router} on {metric.split(':')[1]} 8x rate", "conv_n2000_q6",
                    {"fleet": router, "speedup": 8, "autoscale": (metric, target)}))
    return out


def _digest(obj: Any) -> str:
    h = hashlib.sha256()
    if isinstance(obj, dict):
        for key in sorted(obj):
            h.update(key.encode())
            h.update(_digest(obj[key]).encode())
    elif isinstance(obj, np.ndarray):
        h.update(str(obj.dtype).encode())
        h.update(np.ascontiguousarray(obj).tobytes() if obj.dtype != object
                 else repr(obj.tolist()).encode())
    else:
        h.update(json.dumps(obj, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:16]


def _columns(cols: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if cols is None else {k: np.asarray(v) for k, v in cols.items()}


def run_case(trace: str, opts: dict[str, Any], n: int, skip_ahead: bool) -> dict[str, str]:
    path = (SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl" if trace == "mooncake"
            else SHARED / "bench" / f"{trace}.jsonl")
    workload = load_trace(path).workload
    workload = workload.take(np.arange(min(n, len(workload))))
    engine: dict[str, Any] = dict(ENGINE, skip_ahead=skip_ahead)
    if "blocks" in opts:
        engine["num_gpu_blocks"] = opts["blocks"]
    if "name" in opts:
        engine["name"] = opts["name"]
    if "enable_prefix_caching" in opts:
        engine["enable_prefix_caching"] = opts["enable_prefix_caching"]
    if "offload" in opts:  # a CPU KV tier (issue 38)
        engine["kv_offloading_size"] = opts["offload"]
    if "spec" in opts:
        method, k, rate = opts["spec"]
        engine["speculative_config"] = SpeculativeConfig(
            method, k, acceptance_rate=rate, speculative_token_tree=opts.get("tree"))
    if "speedup" in opts:
        workload = dataclasses.replace(workload, arrival_s=workload.arrival_s / opts["speedup"])
    fleet = opts.get("fleet")
    disagg = None
    if "disagg" in opts:  # "3P+5D": pools of 3 and 5 replicas (``fleet``: the prefill router)
        p, d = (int(x[:-1]) for x in opts["disagg"].split("+"))
        disagg = DisaggConfig(PoolConfig(p, router=fleet or "least_tokens"), PoolConfig(d))
        fleet = None
    # the Mooncake trace's prompts (12.9 k tokens on average) need a long context: with
    # Llama-2-7B's 4,096 most were refused and no prefix was ever hit
    model = MOONCAKE_MODEL if trace == "mooncake" else BENCH["model"]
    autoscale = None
    if "autoscale" in opts:  # 1 to 8 replicas, decisions every 2 s, each up 5 s later
        metric, target = opts["autoscale"]
        autoscale = AutoscaleConfig(1, 8, metric, target, polling_interval_s=2.0,
                                    scale_down_stabilization_s=10.0, scale_up_delay_s=5.0)
    config = SimConfig(gpu=BENCH["gpu"], model=model, engine=EngineConfig(**engine),
                       fleet=None if fleet is None else FleetConfig(
                           num_replicas=8, router=fleet, autoscale=autoscale),
                       disaggregation=disagg)
    result = simulate(workload, make_policy(opts.get("policy", "unlimited")), config)
    summary = {k: v for k, v in result.summary.items() if "wall" not in k}
    return {"records": _digest(_columns(result.record_columns)),
            "timeline": _digest(_columns(result.timeline_columns)),
            "token_gaps": _digest(_columns(result.token_gap_columns)),
            "summary": _digest(summary)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--only", default="")
    parser.add_argument("--modes", default="step,skip")
    args = parser.parse_args()
    lines = []
    for label, trace, opts in cases():
        if args.only not in label:
            continue
        for mode in args.modes.split(","):
            digest = run_case(trace, opts, args.n, skip_ahead=mode == "skip")
            lines.append({"case": label, "mode": mode, **digest})
            print(json.dumps(lines[-1]), flush=True)
    Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))
    print(f"{len(lines)} runs", file=sys.stderr)


if __name__ == "__main__":
    main()
