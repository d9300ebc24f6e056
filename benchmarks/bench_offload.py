"""vLLM's native CPU KV offloading against a published measurement of its TTFT gain.

The anchor: gahow/agentic-kvc, commit 837df6bc9e05f5a5b4af27a36356efdd4cff2ecd ("Measures TTFT
to serve a reused prefix of length L from each KV tier on a single H20 (Qwen3-Coder-30B-A3B,
vLLM 0.18.1): miss (recompute), CPU-tier hit (native DRAM offload), GPU-tier hit (HBM prefix
cache) ... GPU hit is ~flat (42->111 ms over 1k->64k tokens); CPU hit is transfer-bound (PCIe
H2D ~54 GB/s, 57->272 ms); miss grows superlinearly (78 ms -> 15.2 s) ... miss/CPU up to 56x").
Only the two ends (1k and 64k tokens) are published in that text; they are what is compared.

The setup here, nothing fitted: kvbudget's defaults (GPU preset ``H20``, the ``vllm-v1`` step
model, the ``vllm-api-server`` front end: the source timed HTTP requests), the bundled
``Qwen3-30B-A3B`` shapes (Qwen3-Coder-30B-A3B has the same layers, heads and experts) with its
context raised to Qwen3-Coder's 262,144 tokens, prefix hashes per 16-token block (vLLM's), a
GPU cache of one prompt (so a second prompt evicts the first: the source's CPU-tier case) and
``kv_offloading_size`` 64 GiB. Each case is one request on an idle engine:

* miss: the prompt, nothing cached;
* CPU hit: the prompt, then another of the same length (evicting it from the GPU), then the
  first again: its prefix loads from CPU (bytes / (0.7 x 64 GB/s) + 6 us) and the last block
  is computed;
* GPU hit: the prompt twice; CPU-GPU, the CPU hit's TTFT less the GPU hit's, is what the
  load itself costs (the rest, the step model's and the front end's, is common to both).

Usage: python benchmarks/bench_offload.py [--lengths 1024 65536]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvbudget.perf.hardware import GPUSpec, get_gpu  # noqa: E402
from kvbudget.perf.models import get_model  # noqa: E402
from kvbudget.perf.step_time import VllmStepModel  # noqa: E402
from kvbudget.perf.vllm_defaults import batch_defaults  # noqa: E402
from kvbudget.policies import TierConfig, make_policy  # noqa: E402
from kvbudget.simulator.engine_config import EngineConfig  # noqa: E402
from kvbudget.simulator.run import SimConfig, simulate  # noqa: E402
from kvbudget.workloads import Workload  # noqa: E402

SOURCE = ("gahow/agentic-kvc 837df6bc (H20, Qwen3-Coder-30B-A3B, vLLM 0.18.1, native CPU "
          "offload)")
# length -> (miss, CPU hit, GPU hit) TTFT seconds, as the source states them
PUBLISHED: dict[int, tuple[float, float, float]] = {
    1024: (0.078, 0.057, 0.042),
    65536: (15.2, 0.272, 0.111),
}
BLOCK = 16
GAP_S = 100.0  # between the requests of a case: each runs on an idle engine


def coder_model(tmp: Path) -> Path:
    """The bundled Qwen3-30B-A3B config with Qwen3-Coder-30B-A3B's context."""
    config = json.loads((REPO / "perf" / "model_configs" / "Qwen3-30B-A3B.json").read_text())
    config["max_position_embeddings"] = 262_144
    path = tmp / "Qwen3-Coder-30B-A3B.json"
    path.write_text(json.dumps(config))
    return path


def workload(prompts: list[list[int]], length: int) -> Workload:
    """One request per entry of ``prompts`` (a prompt's hash ids), ``GAP_S`` apart."""
    n = len(prompts)
    flat = [h for p in prompts for h in p]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in prompts])]).astype(np.int64)
    return Workload(
        arrival_s=np.arange(n, dtype=np.float64) * GAP_S,
        prompt_tokens=np.full(n, length, np.int64),
        output_tokens=np.ones(n, np.int64), max_output_tokens=np.ones(n, np.int64),
        tier=np.zeros(n, np.int16), tier_names=("interactive",), deadline_s=np.full(n, np.nan),
        request_id=np.arange(n, dtype=np.int64), prefix_hashes=np.asarray(flat, np.int64),
        prefix_offsets=offsets, prefix_block_tokens=BLOCK)


def predict(length: int, model: Path) -> tuple[float, float, float, dict[str, Any]]:
    """Simulated TTFT of a miss, a CPU hit and a GPU hit of a ``length``-token prompt."""
    blocks = length // BLOCK
    a = list(range(blocks))
    b = list(range(10**6, 10**6 + blocks))
    engine = EngineConfig(num_gpu_blocks=blocks + 1, kv_offloading_size=64.0,
                          enable_prefix_caching=True)
    config = SimConfig(gpu="H20", model=str(model), engine=engine,
                       tiers=(TierConfig("interactive", max_sequence_tokens=2**20,
                                         queue_timeout_s=None),))
    policy = make_policy("unlimited")
    cpu = simulate(workload([a, b, a], length), policy, config)
    gpu = simulate(workload([a, a], length), make_policy("unlimited"), config)
    ttft = cpu.records.ttft_s
    return (float(ttft[0]), float(ttft[2]), float(gpu.records.ttft_s[1]),
            cpu.summary["engine"]["kv_offloading"])


def miss_breakdown(length: int, model: Path, gpu: GPUSpec | None = None) -> dict[str, float]:
    """The miss's engine time by the step model's terms, summed over its prefill chunks
    (``max_num_batched_tokens`` each, vLLM's default on an H20), and first principles' FLOPs:

    * ``attention_s``: each step's time less the same step without attention FLOPs (its KV read
      stays: milliseconds); ``attention_flops``: what the model counts, a chunk of ``c`` tokens
      after ``p`` doing ``c (p + c)`` pairs; ``causal_attention_flops``: ``c (p + (c + 1) / 2)``
      pairs, what a causal kernel that skips masked tiles does; ``causal_step_s``: the steps'
      time with those pairs;
    * ``gemm_s``: the step without attention FLOPs less the fixed overheads; ``gemm_flops``
      its matmuls (the LM head once a chunk); ``dense_gemm_s`` those at the dense GEMM rate
      (the rest of ``gemm_s`` is the routed experts' fused_moe below it);
    * ``overhead_s``: the step gap and per-layer overheads of every step;
    * ``published_tflops``: first principles' FLOPs (matmuls and causal attention) over the
      published miss TTFT.

    ``gpu``: another H20 spec (the preset by default; a test gives it without its measured
    attention rate)."""
    gpu = get_gpu("H20") if gpu is None else gpu
    spec = get_model(str(model))
    sm = VllmStepModel(gpu, spec)
    chunk, _ = batch_defaults(gpu)
    moe_layers = spec.moe.num_moe_layers if spec.moe is not None else 0
    fixed = (sm.step_overhead_s + spec.num_layers * sm.layer_overhead_s
             + moe_layers * sm.moe_layer_overhead_s)
    pair = spec.attention_flops_per_token_pair()
    lm_head = 2.0 * spec.vocab_size * spec.hidden_size
    out = dict.fromkeys(("step_s", "causal_step_s", "attention_s", "gemm_s", "overhead_s",
                         "attention_flops", "causal_attention_flops", "gemm_flops"), 0.0)
    for done in range(0, length, chunk):
        c = min(chunk, length - done)
        after = float(done + c)
        full = float(sm.step_time(float(c), 0.0, after, c * after, 1.0))
        no_attn = float(sm.step_time(float(c), 0.0, after, 0.0, 1.0))
        out["step_s"] += full
        out["causal_step_s"] += float(sm.step_time(float(c), 0.0, after,
                                                   c * (done + (c + 1) / 2), 1.0))
        out["attention_s"] += full - no_attn
        out["gemm_s"] += no_attn - fixed
        out["overhead_s"] += fixed
        out["attention_flops"] += pair * c * after
        out["causal_attention_flops"] += pair * c * (done + (c + 1) / 2)
        out["gemm_flops"] += (spec.flops_per_token() - lm_head) * c + lm_head
    peak = gpu.peak_flops(spec.weight_dtype)
    out["dense_gemm_s"] = out["gemm_flops"] / (peak * sm.gemm_efficiency)
    out["attention_tflops"] = out["attention_flops"] / out["attention_s"] / 1e12
    first_principles = out["gemm_flops"] + out["causal_attention_flops"]
    out["published_tflops"] = (first_principles / PUBLISHED[length][0] / 1e12
                               if length in PUBLISHED else float("nan"))
    out["peak_tflops"] = peak / 1e12
    return out


def gain_factors(length: int, model: Path) -> dict[str, float]:
    """The miss/CPU gain's error taken apart: the gain is the miss's TTFT over the CPU hit's, so
    its predicted-over-published factor is the miss's factor over the CPU hit's (``miss``,
    ``cpu``, ``gain``); ``load_share``: the CPU hit's load (CPU hit less GPU hit) as a share of
    the CPU hit's TTFT, predicted and published (``load_share``, ``load_share_published``);
    ``gain_causal``: the predicted gain were the miss's prefill attention counted as a causal
    kernel does it (:func:`miss_breakdown`'s ``causal_step_s`` for its steps, the front end's
    part unchanged): a what-if of the step model, which this feature does not change."""
    miss, cpu, gpu, _ = predict(length, model)
    pub = PUBLISHED[length]
    b = miss_breakdown(length, model)
    return {
        "miss": miss / pub[0], "cpu": cpu / pub[1], "gain": (miss / cpu) / (pub[0] / pub[1]),
        "load_share": (cpu - gpu) / cpu, "load_share_published": (pub[1] - pub[2]) / pub[1],
        "gain_causal": (miss - b["step_s"] + b["causal_step_s"]) / cpu,
    }


def _tflop(flops: float) -> str:
    return f"{flops / 1e12:,.0f}" if flops >= 1e13 else f"{flops / 1e12:.2f}"


def print_breakdown(length: int, model: Path) -> None:
    """:func:`miss_breakdown`'s figures, one line each."""
    b = miss_breakdown(length, model)
    print(f"miss of {length} tokens, engine steps {b['step_s']:.2f} s: attention "
          f"{b['attention_s']:.2f} s ({_tflop(b['attention_flops'])} TFLOP counted, "
          f"{b['attention_tflops']:.1f} TFLOPS; causal {_tflop(b['causal_attention_flops'])}"
          f" TFLOP), GEMMs {b['gemm_s']:.2f} s ({_tflop(b['gemm_flops'])} TFLOP; "
          f"{b['dense_gemm_s']:.2f} s at the dense rate), overheads {b['overhead_s']:.3f} s; "
          f"{b['causal_step_s']:.2f} s with causal pairs")
    if length == 65536:
        print(f"  the published {PUBLISHED[length][0]} s: "
              f"{_tflop(b['gemm_flops'] + b['causal_attention_flops'])} TFLOP at "
              f"{b['published_tflops']:.0f} TFLOPS, {b['published_tflops'] / b['peak_tflops']:.2f}"
              f" of the H20's {b['peak_tflops']:.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=sorted(PUBLISHED))
    args = parser.parse_args(argv)
    print(f"published: {SOURCE}")
    print(f"{'tokens':>7}  {'case':<8} {'predicted':>10} {'published':>10} {'error':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        model = coder_model(Path(tmp))
        for length in args.lengths:
            miss, cpu, gpu, off = predict(length, model)
            pub = PUBLISHED.get(length)
            rows = [("miss", miss), ("CPU hit", cpu), ("GPU hit", gpu), ("CPU-GPU", cpu - gpu),
                    ("miss/CPU", miss / cpu)]
            pubs = (None,) * 5 if pub is None else (*pub, pub[1] - pub[2], pub[0] / pub[1])
            for (case, value), p in zip(rows, pubs, strict=True):
                err = "" if p is None else f"{(value - p) / p:+7.0%}"
                shown = "-" if p is None else f"{p:10.3f}"
                print(f"{length:>7}  {case:<8} {value:10.3f} {shown:>10} {err:>7}")
            print(f"{'':>9}(the CPU hit loaded {off['cpu_hit_tokens']} tokens, "
                  f"{off['load_bytes_per_gpu'] / 1e9:.2f} GB in {off['load_time_s'] * 1e3:.1f} ms)")
        for length in args.lengths:
            print_breakdown(length, model)
        for length in (n for n in args.lengths if n in PUBLISHED):
            f = gain_factors(length, model)
            print(f"gain of {length} tokens, predicted over published: miss x{f['miss']:.2f} "
                  f"/ CPU hit x{f['cpu']:.2f} = gain x{f['gain']:.2f}; the load "
                  f"{f['load_share']:.0%} of the CPU hit (published "
                  f"{f['load_share_published']:.0%}); with causal prefill pairs the gain "
                  f"would be {f['gain_causal']:.1f}x")
    print("assumed: host link 0.7 x 64 GB/s per direction (the source measured ~54 GB/s); "
          "16-token prefix hashes; the vllm-api-server front end's per-request cost; "
          "TTFT = the engine's plus the front end's")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
