"""Are the intervals honest? How often a 90 % interval of the default model holds the measured
value.

:mod:`kvbudget.studies.intervals` gives a figure the spread left by the step model's stated
uncertainty (each default constant uniform in log space over the range its sources leave open,
:data:`kvbudget.perf.step_uncertainty.STATED_RANGES`, a PCIe link's over
:data:`~kvbudget.perf.step_uncertainty.INTERCONNECT_RANGES`; wherever the configuration
extrapolates beyond the constants' derivation, to another GPU, model or parallelism, the
structural error too: its spread estimated leave-one-GPU-out on the published step figures,
:data:`kvbudget.perf.step_uncertainty.STRUCTURAL_SIGMA`, per way, drawn from the predictive
Student t of nine figures) and the seed. An honest 90 % interval holds the measured value about
90 % of the time. Checked here on what can be measured here:

(a) the recorded runs of ``../shared/measured/`` (simulated as ``bench_fidelity.py`` simulates
    them: their own engine configuration, engine-side): TTFT, TPOT and E2E mean, p50 and p99,
    nine figures a run; a trace has no seed to vary, so only the constants are drawn;
(b) the published single-point step figures of ``bench_fidelity.py --only published``. Three of
    them defined constants (marked ``in-sample``: the model meets them by construction), the
    two B200 intercepts set the overheads' ranges and all nine set the structural spread, so
    (b) is a weak check; (a) is the real one (nothing of it enters a range or the spread);
(c) the published curves of ``bench_fidelity_published.py`` (HTTP ``vllm bench serve`` runs of
    vLLM 0.6 to 0.19), each point simulated as that benchmark simulates it, its workload drawn
    with each draw's seed; a concurrency-8 run's median ITL is held against the drawn model's
    decode step at the draw's mean batch and context (the benchmark's ``decode_step_ms``).
    Their vLLM versions are older than the step model's constants, for most of them.

Prints each figure's interval, the measured value and whether it is inside, then the share
inside per part. Nothing here is fitted. A run's nine figures move together (one draw of the
step model makes all of them): part (a) is three draws of the model's error, not 27.

Usage: python benchmarks/bench_intervals.py [--draws N] [--level L]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fidelity import METRICS, MeasuredRun, find_runs, published_rows, simulate_run

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.studies.intervals import StepDraw, intervals_of, over_draws, stated_draws

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel

STATS = ("mean", "p50", "p99")
IN_SAMPLE = ("Llama-3.1-8B H100 bf16 KV, batch 1|decode step ms at context 0",
             "gpt-oss-20b H100 bf16 KV, batch 1|decode step ms at context 0",
             "Llama-3.1-8B H100 bf16 KV, batch 8 x 21k|decode step ms")


def figures(times: dict[str, np.ndarray]) -> dict[str, float]:
    out = {}
    for m in METRICS:
        v = times[m][np.isfinite(times[m])]
        out.update({f"{m} mean": float(v.mean()), f"{m} p50": float(np.percentile(v, 50)),
                    f"{m} p99": float(np.percentile(v, 99))})
    return out


def default_model(run: MeasuredRun) -> VllmStepModel:
    return VllmStepModel(get_gpu(run.gpu), get_model(run.model),
                         tensor_parallel_size=run.tensor_parallel_size)


def run_checks(run: MeasuredRun, level: float, num_draws: int) -> list[tuple[Any, ...]]:
    model = default_model(run)
    draws = stated_draws(model)

    def one(_d: int, draw: StepDraw) -> dict[str, dict[str, float]]:
        return {"run": figures(simulate_run(run, cost_model=draw.cost_model(model)[0]))}

    band = intervals_of(over_draws(one, draws, num_draws=num_draws, seed=0), level)["run"]
    measured = figures(run.measured)
    nominal = figures(simulate_run(run))
    return [(run.name, name, nominal[name], *band[name], measured[name]) for name in measured]


def step_checks(level: float, num_draws: int) -> list[tuple[Any, ...]]:
    def one(_d: int, draw: StepDraw) -> dict[str, dict[str, float]]:
        # each default model gets the same draw: its own constants times the draw's factors,
        # and the structural error by its GPU's validation status
        def tweak(m: VllmStepModel) -> CostModel:
            return draw.cost_model(m)[0]

        return {"step": {f"{r.run}|{r.metric}": r.simulated["mean"]
                         for r in published_rows([], tweak)}}

    ref = VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-8B"))
    band = intervals_of(over_draws(one, stated_draws(ref), num_draws=num_draws, seed=0),
                        level)["step"]
    return [(r.run + (" (in-sample)" if f"{r.run}|{r.metric}" in IN_SAMPLE else ""), r.metric,
             r.simulated["mean"], *band[f"{r.run}|{r.metric}"], r.measured["mean"])
            for r in published_rows([])]


def curve_checks(level: float, num_draws: int) -> list[tuple[Any, ...]]:
    """Part (c): ``(setup @ load, metric, nominal, low, high, published)`` per published point."""
    import bench_fidelity_published as bp

    out: list[tuple[Any, ...]] = []
    for setup in bp.SETUPS:
        for i, load in enumerate(setup.loads):
            base = bp.sim_config(setup, load)
            model = base.resolved_cost_model()
            published = ({k: v for k, v in bp.CONC8_PUBLISHED[setup.name].items()
                          if k != "tpot_p50_ms"} if setup.closed_loop
                         else {setup.metric: setup.published[i]})

            def one(d: int, draw: StepDraw, setup: Any = setup, load: float = load,
                    base: Any = base, model: Any = model, published: Any = published
                    ) -> dict[str, dict[str, float]]:
                n = setup.num_prompts
                rng = np.random.default_rng(d)
                lengths = setup.lengths(n, rng)
                arrival = (np.zeros(n) if setup.closed_loop
                           else bp.poisson_arrivals(n, load, rng))
                got = bp.figures(bp.run_once(draw.config(base), arrival, lengths), lengths[1])
                b = max(1.0, round(got["mean_batch"]))
                got["decode_step_ms"] = 1e3 * draw.cost_model(model)[0].step_time(
                    0.0, b, b * got["mean_context"], 0.0, 0.0)
                return {"curve": {k: got[k] for k in published}}

            band = intervals_of(over_draws(one, stated_draws(model), num_draws=num_draws,
                                           seed=0), level)["curve"]
            nominal = bp.simulate_point(setup, load, setup.num_prompts)
            nominal["decode_step_ms"] = bp.breakdown(setup, nominal["mean_batch"],
                                                     nominal["mean_context"])["step_ms"]
            label = f"c={int(load)}" if setup.closed_loop else f"qps={load:g}"
            out += [(f"{setup.name} @ {label}", metric, nominal[metric], *band[metric], pub)
                    for metric, pub in published.items()]
    return out


def render(title: str, rows: list[tuple[Any, ...]]) -> list[str]:
    lines = [title, f"  {'run':<48} {'figure':<30} {'value':>10} {'low':>10} {'high':>10} "
             f"{'measured':>10}  inside"]
    inside = 0
    for run, name, value, low, high, meas in rows:
        ok = low <= meas <= high
        inside += ok
        lines.append(f"  {run:<48} {name:<30} {value:>10.4g} {low:>10.4g} {high:>10.4g} "
                     f"{meas:>10.4g}  {'yes' if ok else 'no'}")
    share = inside / len(rows) if rows else math.nan
    lines.append(f"  inside: {inside} of {len(rows)} ({share:.0%})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument("--level", type=float, default=0.9)
    args = parser.parse_args()
    runs = find_runs()
    rows = [row for run in runs for row in run_checks(run, args.level, args.draws)]
    print("\n".join(render(f"(a) recorded runs, {args.level:.0%} intervals, {args.draws} draws",
                           rows)))
    print()
    print("\n".join(render(f"(b) published step figures, {args.level:.0%} intervals",
                           step_checks(args.level, args.draws))))
    print()
    print("\n".join(render(f"(c) published curves, {args.level:.0%} intervals, {args.draws} "
                           "draws", curve_checks(args.level, args.draws))))


if __name__ == "__main__":
    main()
