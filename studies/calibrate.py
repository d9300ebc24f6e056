"""Calibrate the step-time model from a recorded run (``kvbudget calibrate --records``).

The simulator sits inside the fit: each trial set of coefficients simulates the whole recorded
workload on the recorded configuration, and the fit minimises how far the simulated TTFT, TPOT
and E2E (mean, p50, p90 and p99 of each, over the measured requests) are from the measured
ones, as the sum of squared log ratios (:func:`recorded_loss`). A log ratio weighs a 10 %
miss of a 40 ms TPOT as much as one of a 60 s TTFT, and is symmetric in over- and
under-prediction.

Any cost model that is a frozen dataclass with a class attribute ``FIT_PARAMETERS`` (the names
of the float fields a calibrator may change with :func:`dataclasses.replace`) can be fitted:
:class:`~kvbudget.perf.cost_model.LinearCostModel` (intercept, per prefill token, per decode
sequence, per context token) and :class:`~kvbudget.perf.roofline.RooflineCostModel` (``mfu``,
``mbu``, ``overhead_s``) are. The search runs in log space (each parameter between 1/100 and
100 times its starting value) with scipy's bounded Nelder-Mead, from the starting model's
values; a linear fit starts from :func:`linear_start`, a least-squares regression of the
starting model's step times over a grid of batch states, so it begins where the default model
is. The API server's own time per request (``frontend_overhead_s``) can be fitted with them:
recordings made by an HTTP client include it, engine-side logs do not.

The simulator is deterministic: the same recording, configuration and settings give the same
coefficients.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.analysis.validation import OVERALL, STATS, compare_recorded, latency_stats
from kvbudget.perf.cost_model import FEATURES, CostModel, LinearCostModel, save_cost_model
from kvbudget.perf.fit import fit_linear_cost_model
from kvbudget.perf.fitted_on import fitted_on_extra
from kvbudget.results.recordings import Recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import recording_stages, simulate_recording

if TYPE_CHECKING:
    import pandas as pd

FIT_METRICS = ("ttft", "tpot", "e2e")
"""The latency metrics whose :data:`~kvbudget.analysis.validation.STATS` the fit matches."""

SPAN = 100.0
"""Each fitted parameter stays between ``1 / SPAN`` and ``SPAN`` times its starting value."""

MAX_OVERHEAD_S = 1.0
"""Upper bound of a fitted front-end overhead (seconds per request)."""

_OVERHEAD_UNIT_S = 0.01  # the overhead's search coordinate is in units of 10 ms
_PENALTY = 1e6  # loss of a trial the model refuses (an mfu above 1) or that completes nothing


PHYSICAL_RANGES: dict[str, tuple[float, float]] = {
    # the published extremes of docs/fidelity.md's "Achievable fractions" and step-model table
    "mem_efficiency": (0.79, 1.0),  # gpu-stream: MI300X 0.79 .. L40 0.98 (RRZE gpu-benches)
    "kv_mem_efficiency": (0.66, 1.0),  # the same x 0.836 (FP8-KV blog, derived)
    "gemm_efficiency": (0.45, 1.0),  # MI300X reports 45-55 %; torch.mm H100 PCIe 0.66 .. 1.0
    "attention_efficiency": (0.35, 0.75),  # FA2 50-73 % (A100), FA3 <= 75 % (H100); paged,
    # chunked prefill below the papers' (docs/fidelity.md): 0.7 x FA2's low end
    "link_efficiency": (0.55, 0.83),  # PCIe 35/64 .. 52.8/64 (nvbandwidth#24); NCCL busbw
    # 230/300 A100 (nccl-tests#149), 358/450 H20 (Mooncake #3484)
    "step_overhead_s": (150e-6, 6e-3),  # vLLM PR #11133: 150-170 us async, 5-6 ms before
}
"""Each :class:`~kvbudget.perf.step_time.VllmStepModel` parameter's physical range: the
least and most that published measurements show (sources in comments and docs/fidelity.md).
A fit searches only inside it (a default outside it widens it to include the default)."""


def _log_bounds(name: str, base: float) -> tuple[float, float]:
    lo, hi = -math.log(SPAN), math.log(SPAN)
    if name in PHYSICAL_RANGES:
        p_lo, p_hi = PHYSICAL_RANGES[name]
        lo = max(lo, min(0.0, math.log(p_lo / base)))
        hi = min(hi, max(0.0, math.log(p_hi / base)))
    return lo, hi


def fit_parameters(model: CostModel) -> tuple[str, ...]:
    """The ``FIT_PARAMETERS`` of a cost model; ValueError when it has none to fit."""
    names = getattr(type(model), "FIT_PARAMETERS", None)
    if not dataclasses.is_dataclass(model) or not names:
        raise ValueError(f"{type(model).__name__} declares no FIT_PARAMETERS: it cannot be "
                         "calibrated")
    return tuple(names)


_PROBES = (  # (prefill tokens, decode seqs, context tokens, prefill attention, prefill seqs)
    (0.0, 1.0, 512.0, 0.0, 0.0),
    (0.0, 32.0, 32 * 2048.0, 0.0, 0.0),
    (0.0, 256.0, 256 * 1024.0, 0.0, 0.0),
    (2048.0, 0.0, 2048.0, 2048.0**2, 1.0),
    (512.0, 16.0, 512.0 + 16 * 1024.0, 512.0**2, 1.0),
)


def effective_parameters(model: CostModel, names: tuple[str, ...] | None = None
                         ) -> tuple[tuple[str, ...], dict[str, str]]:
    """The fit parameters that move ``model``'s step times (on a few batch states), and why
    each other one is left as it is: a starting value of zero (the log-space search scales
    values), or no effect on the step time in this configuration (an all-reduce latency at
    tensor parallelism 1, say)."""
    names = names or fit_parameters(model)
    base = [float(model.step_time(*p)) for p in _PROBES]
    keep: list[str] = []
    fixed: dict[str, str] = {}
    for name in names:
        value = float(getattr(model, name))
        if not (math.isfinite(value) and value > 0):
            fixed[name] = f"starts at {value!r}"
            continue
        moved = None
        for factor in (1.5, 1 / 1.5):
            try:
                moved = dataclasses.replace(model, **{name: value * factor})  # type: ignore[type-var]
                break
            except ValueError:
                continue
        if moved is None:
            fixed[name] = "cannot be moved either way"
            continue
        change = max(abs(float(moved.step_time(*p)) - b) / b for p, b in zip(_PROBES, base,
                                                                             strict=True))
        if change < 1e-9:
            fixed[name] = "does not change the step time here"
            continue
        keep.append(name)
    if not keep:
        raise ValueError(f"none of {type(model).__name__}'s fit parameters changes its step "
                         f"times ({'; '.join(f'{k}: {v}' for k, v in fixed.items())})")
    return tuple(keep), fixed


def linear_start(model: CostModel, *, max_num_batched_tokens: int, max_num_seqs: int,
                 max_context_tokens: int = 8192) -> LinearCostModel:
    """The linear model closest (least squares on relative error) to ``model``'s step times
    over a grid of batch states: decode batches of 1 to ``max_num_seqs`` sequences at contexts
    up to ``max_context_tokens``, and prefill chunks up to ``max_num_batched_tokens``."""
    import pandas as pd

    rows = []
    seqs = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, max_num_seqs} - {0})
    seqs = [s for s in seqs if s <= max(1, max_num_seqs)]
    contexts = [128, 512, 2048, max_context_tokens]
    for s in seqs:
        for c in contexts:
            rows.append((0.0, float(s), float(s * c), 0.0, 0.0))
    chunks = sorted({64, 256, 1024, max_num_batched_tokens})
    for chunk in chunks:
        for decode in (0, min(8, max_num_seqs)):
            rows.append((float(chunk), float(decode), float(chunk + decode * 1024),
                         float(chunk * chunk), 1.0))
    samples = pd.DataFrame(rows, columns=list(FEATURES))
    cols = [samples[f].to_numpy(dtype=np.float64) for f in FEATURES]
    samples["step_time_s"] = np.asarray(model.step_time(*cols), dtype=np.float64)
    # the linear model fitted here has the four terms a recorded run constrains: the prefill
    # attention and per-prefill-sequence costs are folded into them
    samples["prefill_attention"] = 0.0
    samples["num_prefill_seqs"] = 0.0
    fit = fit_linear_cost_model(samples, source=f"linear fit of {model.describe()['kind']}")
    m = fit.model
    # keep the four recorded-run coefficients positive so that the log-space search can move
    # each of them (a zero would stay zero)
    floor = {"intercept_s": 1e-4, "per_prefill_token_s": 1e-8, "per_decode_seq_s": 1e-7,
             "per_context_token_s": 1e-10}
    return dataclasses.replace(m, **{k: max(getattr(m, k), v) for k, v in floor.items()},
                               per_prefill_attention_s=0.0, per_prefill_seq_s=0.0)


def recorded_loss(simulated: pd.DataFrame, measured: pd.DataFrame,
                  rows: npt.NDArray[np.bool_] | None = None) -> float:
    """Sum over TTFT, TPOT and E2E and their mean, p50, p90, p99 of ``log(sim / measured)^2``
    over the measured requests (``rows`` of them); a statistic that is zero or undefined on
    the measured side is skipped, one undefined on the simulated side costs a penalty."""
    keep = (measured["status"] == "completed").to_numpy()
    if rows is not None:
        keep = keep & rows
    meas = latency_stats(measured[keep])
    ids = measured["request_id"].to_numpy()[keep]
    sim = latency_stats(simulated.set_index("request_id").loc[ids].reset_index())
    total = 0.0
    for metric in FIT_METRICS:
        for stat in STATS:
            key = f"{metric}_{stat}_s"
            m, s = meas[key], sim[key]
            if not (math.isfinite(m) and m > 0):
                continue
            if not (math.isfinite(s) and s > 0):
                total += 100.0
                continue
            total += math.log(s / m) ** 2
    # requests the simulation did not complete (aborted, refused) are misses too
    missing = meas["completed"] - sim["completed"]
    if meas["completed"] > 0 and missing > 0:
        total += 10.0 * missing / meas["completed"]
    return total


@dataclass(eq=False)
class RecordedCalibration:
    """A cost model fitted to a recording and how well it reproduces it.

    ``table``: the in-sample comparison (simulated against measured on the fitted rows,
    :data:`~kvbudget.analysis.validation.STAGE_COLUMNS`); ``start``: the starting values of
    the fitted parameters; ``fitted``: their fitted values (``frontend_overhead_s`` among them
    when it was fitted).
    """

    model: CostModel
    frontend_overhead_s: float
    table: pd.DataFrame
    loss: float
    start_loss: float
    num_evals: int
    start: dict[str, float]
    fitted: dict[str, float]
    num_rows: int
    fixed: dict[str, str] = dataclasses.field(default_factory=dict)
    simulated: pd.DataFrame | None = None
    """The records of the fitted model's simulation of the whole recording."""

    def in_sample_errors(self) -> dict[str, float | None]:
        """``{metric: signed relative error}`` over the fitted rows (stage ``all``)."""
        sub = self.table[self.table["stage"] == OVERALL]
        return {str(m): (float(e) if math.isfinite(float(e)) else None)
                for m, e in zip(sub["metric"], sub["rel_error"], strict=True)}

    def to_json_extra(self, recording: Recording, config: SimConfig, *,
                      policy: str, holdout: float | None = None) -> dict[str, Any]:
        """Provenance for the cost-model file: what it was fitted on and its in-sample error."""
        engine = dataclasses.asdict(config.engine)
        return {
            **fitted_on_extra(self.model, config.fit_target(),
                              dataclasses.asdict(config.engine_for())),
            "frontend_overhead_s": self.frontend_overhead_s,
            "calibration": {
                "method": "simulator in the loop: bounded Nelder-Mead (scipy) in log space on "
                          "the squared log ratios of TTFT, TPOT and E2E mean/p50/p90/p99",
                "records": str(Path(recording.path).resolve()),
                "records_format": recording.format,
                "rows": self.num_rows,
                "holdout": holdout,
                "counts": recording.counts,
                "gpu": config.gpu,
                "model": config.model,
                "engine": engine,
                "policy": policy,
                "recorded_config": {k: v for k, v in recording.config.items()
                                    if isinstance(v, str | int | float | bool) or v is None},
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "num_simulations": self.num_evals,
                "loss": self.loss,
                "start_loss": self.start_loss,
                "start": self.start,
                "fitted": self.fitted,
                "physical_ranges": {n: list(PHYSICAL_RANGES[n]) for n in self.fitted
                                    if n in PHYSICAL_RANGES},
                "not_fitted": self.fixed,
                "in_sample_error": self.in_sample_errors(),
            },
        }

    def save(self, path: Path, recording: Recording, config: SimConfig, *, policy: str,
             holdout: float | None = None) -> None:
        save_cost_model(self.model, path, extra=self.to_json_extra(
            recording, config, policy=policy, holdout=holdout))


def calibrate_recording(
    recording: Recording,
    config: SimConfig,
    start: CostModel,
    *,
    policy: str = "unlimited",
    policy_params: Mapping[str, Any] | None = None,
    rows: npt.NDArray[np.bool_] | None = None,
    fit_overhead: bool = True,
    start_overhead_s: float = 0.0,
    parameters: tuple[str, ...] | None = None,
    max_evals: int = 200,
    progress: Callable[[int, float], None] | None = None,
) -> RecordedCalibration:
    """Fit ``start``'s ``FIT_PARAMETERS`` (or ``parameters``) so that simulating the recording
    on ``config`` reproduces the measured latencies of ``rows`` (default: every measured
    request); those that do not move the step time are left as they are
    (:func:`effective_parameters`, listed in ``fixed``). ``progress(num_evals, best_loss)`` is
    called after every simulation."""
    from scipy.optimize import minimize

    names, fixed = effective_parameters(start, parameters)
    base = {n: float(getattr(start, n)) for n in names}
    if max_evals < 1:
        raise ValueError(f"max_evals must be >= 1, got {max_evals!r}")
    measured = recording.records()
    if rows is not None and not bool((rows & (measured["status"] == "completed")).any()):
        raise ValueError("the rows to fit hold no measured request")
    span = float(recording.workload.arrival_s[-1] - recording.workload.arrival_s[0])
    sim_config = dataclasses.replace(config, timeline_period_s=max(1.0, span / 100))
    state = {"evals": 0, "best": math.inf}

    def build(x: npt.NDArray[np.float64]) -> tuple[CostModel, float]:
        values = {n: base[n] * math.exp(float(x[j])) for j, n in enumerate(names)}
        model = dataclasses.replace(start, **values)  # type: ignore[type-var]
        overhead = (max(0.0, float(x[-1])) * _OVERHEAD_UNIT_S if fit_overhead
                    else start_overhead_s)
        return model, overhead

    def loss(x: npt.NDArray[np.float64]) -> float:
        try:
            model, overhead = build(x)
        except ValueError:
            value = _PENALTY
        else:
            sim = simulate_recording(recording, sim_config, policy=policy,
                                     policy_params=policy_params, cost_model=model,
                                     frontend_overhead_s=overhead)
            value = recorded_loss(sim.records, measured, rows)
        state["evals"] += 1
        state["best"] = min(state["best"], value)
        if progress is not None:
            progress(int(state["evals"]), float(state["best"]))
        return value

    dim = len(names) + (1 if fit_overhead else 0)
    x0 = np.zeros(dim)
    if fit_overhead:
        x0[-1] = start_overhead_s / _OVERHEAD_UNIT_S
    start_loss = loss(x0)
    simplex = np.tile(x0, (dim + 1, 1))
    for j in range(dim):
        simplex[j + 1, j] += 0.7 if j < len(names) else 0.5
        try:
            build(simplex[j + 1])
        except ValueError:  # past a bound the model enforces (an mfu of 1): the other way
            simplex[j + 1, j] = x0[j] - 0.7
    bounds = [_log_bounds(n, base[n]) for n in names]
    if fit_overhead:
        bounds.append((0.0, MAX_OVERHEAD_S / _OVERHEAD_UNIT_S))
    if max_evals > 1:
        res = minimize(loss, x0, method="Nelder-Mead", bounds=bounds,
                       options={"maxfev": max_evals - 1, "initial_simplex": simplex,
                                "xatol": 1e-3, "fatol": 1e-6})
        best_x = np.asarray(res.x, dtype=np.float64)
        best_loss = float(res.fun)
        if start_loss <= best_loss:
            best_x, best_loss = x0, start_loss
    else:
        best_x, best_loss = x0, start_loss
    model, overhead = build(best_x)
    if "source" in {f.name for f in dataclasses.fields(model)}:  # type: ignore[arg-type]
        model = dataclasses.replace(  # type: ignore[type-var]
            model, source=f"calibrated from {Path(recording.path).name}")
    sim = simulate_recording(recording, sim_config, policy=policy, policy_params=policy_params,
                             cost_model=model, frontend_overhead_s=overhead)
    table = compare_recorded(sim.records, measured, recording_stages(recording), rows)
    fitted = {n: float(getattr(model, n)) for n in names}
    start_values = dict(base)
    if fit_overhead:
        fitted["frontend_overhead_s"] = overhead
        start_values["frontend_overhead_s"] = start_overhead_s
    num_rows = int(((measured["status"] == "completed").to_numpy()
                    & (True if rows is None else rows)).sum())
    return RecordedCalibration(model=model, frontend_overhead_s=overhead, table=table,
                               loss=best_loss, start_loss=start_loss,
                               num_evals=int(state["evals"]), start=start_values, fitted=fitted,
                               num_rows=num_rows, fixed=fixed, simulated=sim.records)


def read_calibration(path: Path) -> dict[str, Any]:
    """The ``calibration`` section of a cost-model file (empty when it has none)."""
    payload = json.loads(path.read_text())
    section = payload.get("calibration", {}) if isinstance(payload, dict) else {}
    return section if isinstance(section, dict) else {}
