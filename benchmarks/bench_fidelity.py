"""How close the default (uncalibrated) simulation comes to real vLLM servers.

Simulates every recorded run in ``../shared/measured/`` (read its README) with kvbudget's
defaults (the bundled model, the GPU preset, the ``vllm-v1`` step model, KV capacity as vLLM v1
sizes it, prefix caching on) on the run's own engine configuration (its ``meta.json``: tensor
parallelism, ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization``; vLLM 0.19
did not yet take CUDA-graph memory off the KV cache) and no API-server cost (the recordings
drive ``AsyncLLM`` in-process). Prints per run the simulated and measured mean / p50 / p90 / p99
of TTFT, TPOT and E2E and the output throughput, with relative errors; then the KV blocks
against those vLLM reported, and the step model against published single-point figures.

Rows are made by one function per kind (:func:`uncalibrated_rows`, :func:`capacity_rows`,
:func:`published_rows`, :func:`calibrated_rows`: fitted on the recordings, see
``bench_fidelity_calibrated.py``); each returns :class:`Row` s and joins ``ROW_KINDS``.

Usage: python benchmarks/bench_fidelity.py [--only uncalibrated|capacity|published|calibrated]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's kvbudget, not an installed one
SHARED = REPO.parent / "shared"
MEASURED = SHARED / "measured"
METRICS = ("ttft", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p99")

# folder prefix -> GPU preset (the README's table; meta.json names the device of one run only)
GPU_OF_FOLDER = {"RTX4090": "RTX-4090", "RTXPRO6000": "RTX-PRO-6000"}
# Hugging Face id -> bundled model
MODEL_OF_ID = {"meta-llama/Llama-3.1-8B": "Llama-3.1-8B", "Qwen/Qwen3-32B": "Qwen3-32B"}


@dataclass
class MeasuredRun:
    name: str
    folder: Path
    gpu: str
    model: str
    tensor_parallel_size: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None
    gpu_memory_utilization: float
    reported_num_gpu_blocks: int | None
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    measured: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Row:
    """One line of the report: a run (or a published figure) under one kind of prediction."""

    kind: str
    run: str
    metric: str
    simulated: dict[str, float]
    measured: dict[str, float]


def find_runs(root: Path = MEASURED) -> list[MeasuredRun]:
    runs = []
    for meta_path in sorted(root.glob("*/*/meta.json")):
        folder = meta_path.parent
        meta = json.loads(meta_path.read_text())
        kw = meta["engine_kwargs"]
        prefix = folder.name.split("_")[0]
        kv = meta.get("kv_cache", {})
        with (folder / "requests.csv").open() as f:
            rows = list(csv.DictReader(f))
        col = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
        order = np.argsort(col["arrival_s"], kind="stable")
        runs.append(MeasuredRun(
            name=f"{folder.parent.name}/{folder.name}",
            folder=folder,
            gpu=GPU_OF_FOLDER[prefix],
            model=MODEL_OF_ID[kw["model"]],
            tensor_parallel_size=int(kw["tensor_parallel_size"]),
            max_num_seqs=int(kw["max_num_seqs"]),
            max_num_batched_tokens=int(kw["max_num_batched_tokens"]),
            max_model_len=kw.get("max_model_len"),
            # the README: 0.9 for every run (meta.json records it for the RTX 4090 run)
            gpu_memory_utilization=float(kv.get("gpu_memory_utilization", 0.9)),
            reported_num_gpu_blocks=kv.get("num_gpu_blocks"),
            arrival_s=col["arrival_s"][order],
            prompt_tokens=col["prompt_tokens"][order].astype(np.int64),
            output_tokens=col["output_tokens"][order].astype(np.int64),
            measured={m: col[f"{m}_s"][order] for m in METRICS},
        ))
    return runs


def stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if not len(v):
        return {s: math.nan for s in STATS}
    return {"mean": float(v.mean()), **{f"p{q}": float(np.percentile(v, q)) for q in (50, 90, 99)}}


def throughput(arrival_s: np.ndarray, e2e_s: np.ndarray, output: np.ndarray) -> float:
    ok = np.isfinite(e2e_s)
    span = float(np.max(arrival_s[ok] + e2e_s[ok]) - np.min(arrival_s))
    return float(output[ok].sum()) / span


def engine_config(run: MeasuredRun):  # type: ignore[no-untyped-def]
    from kvbudget.simulator.engine_config import EngineConfig

    return EngineConfig(
        max_num_seqs=run.max_num_seqs,
        max_num_batched_tokens=run.max_num_batched_tokens,
        max_model_len=run.max_model_len,
        gpu_memory_utilization=run.gpu_memory_utilization,
        enable_prefix_caching=True,
        tensor_parallel_size=run.tensor_parallel_size,
        profile_cudagraph_memory=False,  # vLLM 0.19
    )


def simulate_run(run: MeasuredRun, cost_model: object | None = None) -> dict[str, np.ndarray]:
    """Simulated TTFT / TPOT / E2E of ``run`` (``cost_model``: the defaults' when None)."""
    from kvbudget.policies import TierConfig, make_policy
    from kvbudget.simulator.run import SimConfig, simulate
    from kvbudget.workloads import Workload

    n = len(run.arrival_s)
    workload = Workload(
        run.arrival_s, run.prompt_tokens, run.output_tokens, run.output_tokens.copy(),
        np.zeros(n, np.int16), ("default",), np.full(n, np.nan), np.arange(n),
        name=run.name,
    )
    tier = TierConfig(name="default", max_sequence_tokens=10**7, priority=0,
                      queue_timeout_s=None, retryable_on_overload=True, ttft_s=60.0, tpot_s=1.0)
    config = SimConfig(gpu=run.gpu, model=run.model, engine=engine_config(run), tiers=(tier,),
                       cost_model=cost_model, frontend="none")  # type: ignore[arg-type]
    rec = simulate(workload, make_policy("unlimited"), config).records
    return {m: np.asarray(rec[f"{m}_s"], dtype=np.float64) for m in METRICS}


def compare_rows(kind: str, run: MeasuredRun, sim: dict[str, np.ndarray]) -> list[Row]:
    rows = [Row(kind, run.name, m, stats(sim[m]), stats(run.measured[m])) for m in METRICS]
    rows.append(Row(kind, run.name, "output tok/s",
                    {"mean": throughput(run.arrival_s, sim["e2e"], run.output_tokens)},
                    {"mean": throughput(run.arrival_s, run.measured["e2e"], run.output_tokens)}))
    return rows


def uncalibrated_rows(runs: list[MeasuredRun]) -> list[Row]:
    """Every run simulated with the defaults."""
    out: list[Row] = []
    for run in runs:
        out += compare_rows("uncalibrated", run, simulate_run(run))
    return out


def capacity_rows(runs: list[MeasuredRun]) -> list[Row]:
    """KV blocks kvbudget computes against those vLLM reported (runs that recorded them, and the
    published reports in docs/fidelity.md)."""
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.kv_capacity import num_gpu_blocks
    from kvbudget.perf.models import get_model

    out = []
    for run in runs:
        if run.reported_num_gpu_blocks is None:
            continue
        blocks = num_gpu_blocks(
            get_gpu(run.gpu), get_model(run.model), block_size=16,
            gpu_memory_utilization=run.gpu_memory_utilization,
            max_num_batched_tokens=run.max_num_batched_tokens, max_num_seqs=run.max_num_seqs,
            tensor_parallel_size=run.tensor_parallel_size, profile_cudagraph_memory=False,
        )
        out.append(Row("capacity", run.name, "num_gpu_blocks", {"mean": float(blocks)},
                       {"mean": float(run.reported_num_gpu_blocks)}))
    return out


def published_rows(_runs: list[MeasuredRun], tweak: Callable[[Any], Any] = lambda m: m
                   ) -> list[Row]:
    """The step model against published vLLM step figures (docs/fidelity.md, "Checks");
    ``tweak`` changes each default model first (``bench_intervals.py`` draws its constants)."""
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model
    from kvbudget.perf.step_time import VllmStepModel

    llama = get_model("Llama-3.1-8B")
    h100 = tweak(VllmStepModel(get_gpu("H100-SXM"), llama))
    b200 = tweak(VllmStepModel(get_gpu("B200"), llama))
    out = []
    # vLLM FP8-KV blog (2026-04-22): ITL = intercept + slope * context at concurrency 1
    for name, model, intercept_ms, slope_ns in (
        ("Llama-3.1-8B H100 bf16 KV, batch 1", h100, 6.44, 43.7),
        ("Llama-3.1-8B B200 bf16 KV, batch 1", b200, 3.93, 18.0),
    ):
        t0 = model.step_time(0.0, 1.0, 1.0, 0.0, 0.0)
        t1 = model.step_time(0.0, 1.0, 100_001.0, 0.0, 0.0)
        out.append(Row("published", name, "decode step ms at context 0",
                       {"mean": t0 * 1e3}, {"mean": intercept_ms}))
        out.append(Row("published", name, "ns per context token",
                       {"mean": (t1 - t0) / 1e5 * 1e9}, {"mean": slope_ns}))
    gptoss = get_model("gpt-oss-20b")
    for name, gpu, intercept_ms, slope_ns in (
        ("gpt-oss-20b H100 bf16 KV, batch 1", "H100-SXM", 4.05, 8.94),
        ("gpt-oss-20b B200 bf16 KV, batch 1", "B200", 3.15, 3.56),
    ):
        model = tweak(VllmStepModel(get_gpu(gpu), gptoss))
        t0 = model.step_time(0.0, 1.0, 1.0, 0.0, 0.0)
        t1 = model.step_time(0.0, 1.0, 100_001.0, 0.0, 0.0)
        out.append(Row("published", name, "decode step ms at context 0",
                       {"mean": t0 * 1e3}, {"mean": intercept_ms}))
        out.append(Row("published", name, "ns per context token",
                       {"mean": (t1 - t0) / 1e5 * 1e9}, {"mean": slope_ns}))
    # same blog: concurrency 8, ~20,000 input + ~2,000 output tokens, median ITL 15.18 ms
    t8 = h100.step_time(0.0, 8.0, 8 * 21_000.0, 0.0, 0.0)
    out.append(Row("published", "Llama-3.1-8B H100 bf16 KV, batch 8 x 21k", "decode step ms",
                   {"mean": t8 * 1e3}, {"mean": 15.18}))
    return out


def calibrated_rows(_runs: list[MeasuredRun]) -> list[Row]:
    """Calibrated from the recordings themselves (``benchmarks/bench_fidelity_calibrated.py``):
    fitted on a whole run (in sample), on one half of it and compared on the other, and the
    default model's parameters moved between the two models of the same GPU."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_fidelity_calibrated import calibrated_results

    out = []
    for kind, run, table in calibrated_results(uncalibrated=False):
        overall = table[table["stage"] == "all"].set_index("metric")

        def value(metric: str, side: str) -> float:
            return float(overall.loc[metric, side])  # noqa: B023 (used at once)

        for m in METRICS:
            out.append(Row(kind, run, m, {s: value(f"{m}_{s}_s", "simulated") for s in STATS},
                           {s: value(f"{m}_{s}_s", "measured") for s in STATS}))
        out.append(Row(kind, run, "output tok/s",
                       {"mean": value("output_tokens_per_s", "simulated")},
                       {"mean": value("output_tokens_per_s", "measured")}))
    return out


ROW_KINDS: dict[str, Callable[[list[MeasuredRun]], list[Row]]] = {
    "uncalibrated": uncalibrated_rows,
    "capacity": capacity_rows,
    "published": published_rows,
    "calibrated": calibrated_rows,
}


def _err(sim: float, meas: float) -> str:
    if not (math.isfinite(sim) and math.isfinite(meas)) or meas == 0:
        return "-"
    return f"{(sim / meas - 1) * 100:+.1f}%"


def render(rows: Iterable[Row]) -> str:
    lines = []
    header = f"{'kind':<13} {'run':<44} {'metric':<28}"
    for s in STATS:
        header += f" {s + ' sim':>11} {s + ' meas':>11} {'err':>7}"
    lines.append(header)
    for r in rows:
        scale = 1e3 if r.metric in METRICS else 1.0
        name = r.metric + (" ms" if r.metric in METRICS else "")
        line = f"{r.kind:<13} {r.run:<44} {name:<28}"
        for s in STATS:
            if s not in r.measured:
                line += f" {'':>11} {'':>11} {'':>7}"
                continue
            sim, meas = r.simulated[s], r.measured[s]
            line += f" {sim * scale:>11.1f} {meas * scale:>11.1f} {_err(sim, meas):>7}"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=sorted(ROW_KINDS), action="append")
    args = parser.parse_args()
    runs = find_runs()
    if not runs:
        raise SystemExit(f"no recorded runs under {MEASURED}")
    rows: list[Row] = []
    for kind in args.only or list(ROW_KINDS):
        rows += ROW_KINDS[kind](runs)
    print(render(rows))


if __name__ == "__main__":
    main()
