"""The H200 preset's efficiencies and the eager-PyTorch profile against what one H200 measured.

``benchmarks/data/h200-2026-12-04/`` holds what a lent NVIDIA H200 (driver 580.159.04, PyTorch
2.11.0+cu130, transformers 5.17.0) measured on 2026-12-04:

* ``gemm_bandwidth.json`` (script ``gemm_bandwidth.py`` beside it): bf16 GEMMs of
  Llama-3.1-8B's shapes at 1 to 8,192 tokens and HBM streaming over 0.25-16 GiB;
* ``H200-141GB_Llama-3.1-8B.csv`` and its sidecar: ``kvbudget profile`` of Llama-3.1-8B (bf16,
  random weights, eager transformers with SDPA) as docs/profile.md's GPU script runs it.

This prints (1) the large-GEMM fraction of dense bf16 peak per shape beside the preset's
``gemm_efficiency``, (2) the streaming fraction of peak bandwidth beside the preset's
``achievable_bandwidth_fraction``, and (3) the ``vllm-v1`` step model's error against the
profile's compute-bound prefill points (the other points are launch-bound eager PyTorch with a
copying KV cache: docs/profile.md says why they are no model of vLLM).

Usage: python benchmarks/bench_h200_measured.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO / "benchmarks" / "data" / "h200-2026-12-04"
LARGE_M = (2048, 8192)
"""Token counts at which a GEMM of these shapes is compute-bound on an H200."""
COMPUTE_BOUND_PREFILL = 2048
"""The shortest profiled prefill whose time is mostly GEMMs (shorter ones are launch-bound)."""


def gemm_fractions(data: dict[str, Any], peak_flops: float) -> dict[str, float]:
    """Per weight shape (``KxN``), the mean fraction of ``peak_flops`` at :data:`LARGE_M`."""
    by_shape: dict[str, list[float]] = {}
    for key, row in data["gemm"].items():
        m, k, n = key.split("x")
        if int(m) in LARGE_M:
            by_shape.setdefault(f"{k}x{n}", []).append(row["tflops"] * 1e12 / peak_flops)
    return {shape: sum(v) / len(v) for shape, v in by_shape.items()}


def stream_fractions(data: dict[str, Any], peak_bytes_s: float) -> dict[str, float]:
    """Each streaming measurement (and the weight-streaming GEMV of the largest matrix) as a
    fraction of the peak bandwidth."""
    out = {k: v * 1e12 / peak_bytes_s for k, v in data["bw_TBps"].items()}
    out["gemv_1x4096x128256"] = data["gemm"]["1x4096x128256"]["tbps"] * 1e12 / peak_bytes_s
    return out


def prefill_errors(path: Path) -> list[tuple[int, float, float]]:
    """``(tokens, measured_s, predicted_s)`` of the profile's compute-bound prefill points, the
    prediction the default step model's (``vllm-v1``) of Llama-3.1-8B on the H200 preset."""
    import pandas as pd

    from kvbudget.perf.fit import compare_cost_model
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model
    from kvbudget.perf.step_time import VllmStepModel

    table = pd.read_csv(path)
    errors = compare_cost_model(table, VllmStepModel(get_gpu("H200"), get_model("Llama-3.1-8B")))
    keep = (table["point_class"] == "prefill") & (table["seq_len"] >= COMPUTE_BOUND_PREFILL)
    return [(int(n), float(m), float(p)) for n, m, p in zip(
        table["seq_len"][keep], table["step_time_s"][keep], errors["predicted_s"][keep],
        strict=True)]


def main() -> None:
    from kvbudget.perf.hardware import get_gpu

    gpu = get_gpu("H200")
    data = json.loads((DATA / "gemm_bandwidth.json").read_text())
    print(f"H200 preset: gemm_efficiency {gpu.achievable_gemm_fraction:.2f}, "
          f"bandwidth fraction {gpu.achievable_bandwidth_fraction:.2f}")
    print("large GEMMs (2,048 and 8,192 tokens), fraction of dense bf16 peak:")
    for shape, frac in gemm_fractions(data, gpu.bf16_flops).items():
        print(f"  {shape:>12}  {frac:.3f}")
    print("HBM streaming, fraction of peak bandwidth:")
    for name, frac in stream_fractions(data, gpu.hbm_bandwidth_bytes_s).items():
        print(f"  {name:>20}  {frac:.3f}")
    print("eager-PyTorch prefill (compute-bound points) vs the vllm-v1 step model:")
    for n, measured, predicted in prefill_errors(DATA / "H200-141GB_Llama-3.1-8B.csv"):
        print(f"  {n:>6} tokens  measured {1e3 * measured:8.2f} ms  model {1e3 * predicted:8.2f}"
              f" ms  {100 * (predicted / measured - 1):+6.1f} %")


if __name__ == "__main__":
    main()
