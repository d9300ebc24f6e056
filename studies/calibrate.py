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
recordings made by an HTTP client include it, engine-side logs do not. It is the first
token's fixed part only: the part that grows with the step (the queue, async scheduling's
extra step, the prefill) is the simulated engine's, and the fixed term is profiled out at each
trial of the step model's parameters, within its physical bounds
(:mod:`~kvbudget.studies.first_token`), not searched as one more coordinate.

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

from kvbudget.analysis.validation import OVERALL, compare_recorded, metric_counts
from kvbudget.perf.cost_model import FEATURES, CostModel, LinearCostModel, save_cost_model
from kvbudget.perf.fit import fit_linear_cost_model
from kvbudget.perf.fitted_on_write import fitted_on_extra
from kvbudget.perf.step_uncertainty import STATED_RANGES
from kvbudget.results.recordings import RecordedStage, Recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.first_token import (
    FixedTermFit,
    best_fixed_term,
    fixed_term_bounds,
    fixed_term_warnings,
    paired_stats,
    parameter_warnings,
    settle_fixed_term,
)
from kvbudget.studies.fit_uncertainty import (
    FIT_KEYS,
    FIT_METRICS,
    INTERVAL_COLUMNS,
    NUM_BOOTSTRAP,
    PREDICTED,
    Coordinate,
    FitUncertainty,
    Sensitivity,
    compared_stats,
    identify,
    noise_variance,
    posterior_covariance,
    sampling_variance,
    sensitivity,
    with_intervals,
)
from kvbudget.studies.flat_latency import flat_latency_said
from kvbudget.studies.server_ttft import MeasuredFrontEnd, measured_front_end
from kvbudget.studies.setting import errors_line, study_repr
from kvbudget.studies.validate import (
    check_recorded_model,
    recording_stages,
    simulate_recording,
)

if TYPE_CHECKING:
    import pandas as pd

SPAN = 100.0
"""Each fitted parameter stays between ``1 / SPAN`` and ``SPAN`` times its starting value."""

_PENALTY = 1e6  # loss of a trial the model refuses (an mfu above 1) or that completes nothing


GPU_FRACTIONS = ("mem_efficiency", "gemm_efficiency", "attention_efficiency")
"""The step model's fractions a GPU spec may carry as its own measured figure."""

PHYSICAL_RANGES: dict[str, tuple[float, float]] = {
    # the published extremes of docs/fidelity.md's "Achievable fractions" and step-model table
    # (sources: kvbudget.perf.step_uncertainty.STATED_RANGES)
    **{name: STATED_RANGES[name][:2] for name in (
        "mem_efficiency", "kv_mem_efficiency", "gemm_efficiency", "attention_efficiency",
        "link_efficiency")},
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
    the measured side is skipped, one undefined on the simulated side costs a penalty
    (:meth:`~kvbudget.studies.first_token.PairedStats.loss`)."""
    return paired_stats(simulated, measured, rows).loss(FIT_METRICS)


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
    uncertainty: FitUncertainty | None = None
    """The fit's posterior (None when not asked for or nothing was fitted)."""
    sensitivity: Sensitivity | None = None
    """The simulations around the fitted point (for intervals on other rows)."""
    search_bounds: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """Each fitted step-model parameter's values at the ends of its search."""
    term: FixedTermFit | None = None
    """The fitted fixed front-end term and its bounds (None when not fitted)."""
    stages: tuple[str, ...] | None = None
    """Each measured request's load stage (:func:`~kvbudget.studies.validate.
    recording_stages`): the table's output tokens/s, and its interval, count the time the
    stages ran, not the idle time between them."""
    flat: str | None = None
    """The warning of a recording whose TTFT or TPOT does not move with the prompt or the
    batch as the fitted GPU's does (:func:`~kvbudget.studies.flat_latency.flat_latency_said`):
    a server simulator or a fixed-latency mock."""
    front_end: MeasuredFrontEnd | str | None = None
    """The front-end term measured from the recording's server-side TTFT (used, so no term
    was fitted), or why those figures were not used; None: the recording has none, or no term
    was fitted (:func:`~kvbudget.studies.first_token.measured_front_end`)."""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    """How many of the fitted requests each of TTFT, TPOT and E2E is compared over
    (:func:`~kvbudget.analysis.validation.metric_counts`: one read whole has no TTFT nor
    TPOT), which the file's ``in_sample_counts`` keeps beside its errors."""
    search_stopped: int | None = None
    """``max_evals`` when the search of the step model's parameters ran out of it before it
    converged (or, at 1, did not run): the fitted values are where it stopped, not a minimum;
    None when it converged or had nothing to search."""

    def __repr__(self) -> str:
        """What a notebook shows: what was fitted to what, start against fitted, the warnings
        a calibration prints (a value at a bound of its search), the in-sample errors and where
        the rest is; not the model's and the tables' dump."""
        gpu, spec = (getattr(getattr(self.model, k, None), "name", None) for k in ("gpu", "model"))
        said = "; ".join(f"{k} {self.start[k]:.4g} -> {v:.4g}" if k in self.start else
                         f"{k} {v:.4g}" for k, v in self.fitted.items())
        return study_repr(
            f"RecordedCalibration: {type(self.model).__name__}"
            + (f" of {spec} on {gpu}" if spec and gpu else "")
            + f" fitted to {self.num_rows:,} measured requests in {self.num_evals} simulations; "
              f"loss {self.start_loss:.4g} -> {self.loss:.4g}", (),
            [f"fitted: {said or 'nothing'}",
             *([f"front-end term {1e3 * self.frontend_overhead_s:.2f} ms, measured: the "
                f"client's TTFT less the server's queue time and TTFT, mean over "
                f"{self.front_end.num_requests} requests"]
               if isinstance(self.front_end, MeasuredFrontEnd) else []),
             *(f"left at the start: {k} ({why})" for k, why in self.fixed.items()),
             *(f"warning: {w}" for w in self.warnings()), errors_line(self.table, OVERALL)
             + " (in sample)"],
            f".model, .table ({len(self.table):,} rows: stage x metric), .start, .fitted, "
            ".warnings()" + ("" if self.simulated is None else ", .simulated"))

    def warnings(self) -> list[str]:
        """One line for each fitted value at a bound of its search or outside its published
        range (:mod:`~kvbudget.studies.first_token`); printed by every calibration and
        written to the file (``calibration.warnings``)."""
        steps = {k: v for k, v in self.fitted.items() if k != OVERHEAD}
        gpu = getattr(self.model, "gpu", None)  # its own measured fractions are physical
        own = {name: float(v) for name in GPU_FRACTIONS
               if (v := getattr(gpu, name, None)) is not None}
        out = parameter_warnings(steps, self.search_bounds, own)
        if self.term is not None:
            out += fixed_term_warnings(self.term.value_s, self.term.bounds)
        if isinstance(self.front_end, str):  # the server's figures, and why they went unused
            out.append(self.front_end)
        if self.search_stopped is not None:
            out.append(search_stopped_said(self.search_stopped))
        return out + ([self.flat] if self.flat else [])

    def intervals_on(self, measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None
                     ) -> dict[str, tuple[float, float]]:
        """95 % prediction intervals of :data:`PREDICTED` over other measured ``rows`` (a
        held-out part) from the simulations already run; empty without a posterior."""
        if self.uncertainty is None or self.sensitivity is None or self.simulated is None:
            return {}
        values = compared_stats(self.simulated, measured, rows, PREDICTED, stages=self.stages)
        return self.uncertainty.predicted(
            values, self.sensitivity.gradient(measured, PREDICTED, rows, stages=self.stages),
            PREDICTED)

    def in_sample_errors(self) -> dict[str, float | None]:
        """``{metric: signed relative error}`` over the fitted rows (stage ``all``)."""
        sub = self.table[self.table["stage"] == OVERALL]
        return {str(m): (float(e) if math.isfinite(float(e)) else None)
                for m, e in zip(sub["metric"], sub["rel_error"], strict=True)}

    def predicted_intervals(self) -> dict[str, list[float]]:
        """``{figure: [low, high]}``: the 95 % intervals of the simulated figures (stage
        ``all``) that have one."""
        if INTERVAL_COLUMNS[0] not in self.table:
            return {}
        sub = self.table[self.table["stage"] == OVERALL]
        return {str(r["metric"]): [float(r[INTERVAL_COLUMNS[0]]), float(r[INTERVAL_COLUMNS[1]])]
                for r in sub.to_dict(orient="records")
                if math.isfinite(float(r[INTERVAL_COLUMNS[0]]))}

    def to_json_extra(self, recording: Recording, config: SimConfig, *,
                      policy: str, holdout: float | None = None,
                      held_out: dict[str, Any] | None = None) -> dict[str, Any]:
        """Provenance for the cost-model file: what it was fitted on, its in-sample error and,
        with ``holdout``, what the held-out check found (``held_out``:
        :func:`held_out_block`; None until it has run)."""
        engine = dataclasses.asdict(config.engine)
        return {
            **fitted_on_extra(self.model, config.fit_target(),
                              dataclasses.asdict(config.engine_for())),
            "frontend_overhead_s": self.frontend_overhead_s,
            "calibration": {
                "method": "simulator in the loop: bounded Nelder-Mead (scipy) in log space on "
                          "the squared log ratios of TTFT, TPOT and E2E mean/p50/p90/p99, "
                          "regularised toward the start",
                "records": str(Path(recording.path).resolve()),
                "records_format": recording.format,
                "tool": recording.tool,
                "stages": [_stage_said(st) for st in recording.stages],
                "notes": list(recording.notes),
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
                "search_converged": self.search_stopped is None,
                "loss": self.loss,
                "start_loss": self.start_loss,
                "start": self.start,
                "fitted": self.fitted,
                "physical_ranges": {n: list(PHYSICAL_RANGES[n]) for n in self.fitted
                                    if n in PHYSICAL_RANGES},
                "not_fitted": self.fixed,
                "warnings": self.warnings(),
                "first_token": self.first_token(config),
                "in_sample_error": self.in_sample_errors(),
                "in_sample_counts": self.counts,
                "held_out": held_out,
                "uncertainty": (None if self.uncertainty is None
                                else self.uncertainty.to_json()),
                "predicted_95": self.predicted_intervals(),
            },
        }

    def first_token(self, config: SimConfig) -> dict[str, Any]:
        """How the fit splits the first token's delay: the engine's part simulated (with or
        without async scheduling), the front end's fixed part fitted (or not) and its
        bounds."""
        term = self.term
        return {
            "engine_part": "simulated: queue, the step in flight, "
                           + ("async scheduling's extra step, " if config.engine_for()
                              .async_scheduling else "")
                           + "the prefill step(s); not fitted",
            "async_scheduling": bool(config.engine_for().async_scheduling),
            "fixed_part_s": self.frontend_overhead_s,
            "fixed_part_fitted": term is not None,
            "fixed_part_measured": (self.front_end.to_json()
                                    if isinstance(self.front_end, MeasuredFrontEnd) else None),
            "server_figures_unused": (self.front_end if isinstance(self.front_end, str)
                                      else None),
            "fixed_part_bounds_s": (None if term is None
                                    else [term.bounds.lower_s, term.bounds.upper_s]),
        }

    def save(self, path: Path, recording: Recording, config: SimConfig, *, policy: str,
             holdout: float | None = None, held_out: dict[str, Any] | None = None) -> None:
        save_cost_model(self.model, path, extra=self.to_json_extra(
            recording, config, policy=policy, holdout=holdout, held_out=held_out))


def held_out_block(table: pd.DataFrame, num_requests: int, fraction: float,
                   counts: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What a held-out check found, for the cost file's ``calibration.held_out``: the part held
    out (the last ``fraction`` of the recording), the ``num_requests`` compared, how many each
    of TTFT, TPOT and E2E is over (``counts``: :func:`~kvbudget.analysis.validation.
    metric_counts`) and each figure's signed relative error over them (stage ``all`` of
    ``table``, the validation's)."""
    sub = table[table["stage"] == OVERALL]
    return {"fraction": fraction, "num_requests": num_requests,
            **({} if counts is None else {"counts": dict(counts)}),
            "error": {str(m): (float(e) if math.isfinite(float(e)) else None)
                      for m, e in zip(sub["metric"], sub["rel_error"], strict=True)}}


class _Trials:
    """Simulations of the recording at points of the search coordinates, counted."""

    def __init__(self, recording: Recording, config: SimConfig, start: CostModel,
                 coordinates: tuple[Coordinate, ...], *, measured: pd.DataFrame,
                 rows: npt.NDArray[np.bool_] | None, fit_overhead: bool,
                 start_overhead_s: float, policy: str | None,
                 policy_params: Mapping[str, Any] | None,
                 progress: Callable[[int, float], None] | None) -> None:
        self.recording, self.config, self.start = recording, config, start
        self.measured, self.rows = measured, rows
        self.coordinates = coordinates
        self.fit_overhead, self.start_overhead_s = fit_overhead, start_overhead_s
        self.policy, self.policy_params = policy, policy_params
        self.progress = progress
        self.num_evals = 0
        self.best = math.inf
        self.overhead_s = start_overhead_s
        """The front-end overhead the simulations run with (the fitted one once settled)."""
        self.term_bounds = fixed_term_bounds(measured, rows)
        self.last_term_s = start_overhead_s
        """The best fixed term for the last :meth:`run` (profiled when ``fit_overhead``)."""

    def build(self, x: npt.NDArray[np.float64]) -> tuple[CostModel, float]:
        """The cost model and front-end overhead at ``x`` (ValueError: the model refuses)."""
        values = {c.name: c.value(float(v)) for c, v in zip(self.coordinates, x, strict=True)}
        overhead = values.pop(OVERHEAD, self.overhead_s)
        model = dataclasses.replace(self.start, **values)  # type: ignore[type-var]
        return model, overhead

    def _records(self, x: npt.NDArray[np.float64], overhead_s: float | None = None
                 ) -> pd.DataFrame:
        model, overhead = self.build(x)
        return simulate_recording(self.recording, self.config, policy=self.policy,
                                  policy_params=self.policy_params, cost_model=model,
                                  frontend_overhead_s=overhead if overhead_s is None
                                  else overhead_s).records

    def run(self, x: npt.NDArray[np.float64]) -> tuple[pd.DataFrame, float]:
        """The simulated records at ``x`` and their loss, with the fixed front-end term
        profiled out when it is fitted (the loss at the best term for these records, kept in
        :attr:`last_term_s`). ValueError: the model refuses these values."""
        records = self._records(x)
        if self.fit_overhead:
            self.last_term_s, loss = best_fixed_term(
                paired_stats(records, self.measured, self.rows), FIT_METRICS,
                simulated_term_s=self.overhead_s, bounds=self.term_bounds)
        else:
            loss = recorded_loss(records, self.measured, self.rows)
        self.count(loss)
        return records, loss

    def simulate(self, x: npt.NDArray[np.float64]) -> pd.DataFrame:
        """The simulated records at ``x``, with :attr:`overhead_s` (counted)."""
        records = self._records(x)
        self.count(recorded_loss(records, self.measured, self.rows))
        return records

    def settle(self, x: npt.NDArray[np.float64], start_s: float) -> FixedTermFit:
        """Fit the fixed term at ``x`` to convergence (closed loops' users wait for it) and
        run the later simulations with it."""
        def run(term_s: float) -> pd.DataFrame:
            records = self._records(x, term_s)
            self.count(recorded_loss(records, self.measured, self.rows))
            return records
        fit = settle_fixed_term(run, self.measured, self.rows, FIT_METRICS, start_s=start_s)
        self.overhead_s = fit.value_s
        return fit

    def count(self, loss: float) -> None:
        self.num_evals += 1
        self.best = min(self.best, loss)
        if self.progress is not None:
            self.progress(self.num_evals, self.best)


OVERHEAD = "frontend_overhead_s"
"""The name of the front-end overhead's search coordinate."""


def coordinates(start: CostModel, names: tuple[str, ...]) -> tuple[Coordinate, ...]:
    """Each fitted parameter's search coordinate: log of the value over the start's within
    :func:`_log_bounds`. The front-end overhead is no coordinate: it is profiled out
    (:class:`_Trials`)."""
    return tuple(Coordinate(n, float(getattr(start, n)), *_log_bounds(n, float(getattr(start, n))))
                 for n in names)


def search_stopped_said(max_evals: int) -> str:
    """The warning of a fit whose search ran out of simulations before it converged."""
    if max_evals <= 1:
        return ("the step model's parameters were not searched (--max-evals 1: the start's "
                "simulation only): their 'fitted' values are the start's")
    return (f"the search stopped at --max-evals {max_evals} simulations before it converged: "
            "the fitted values are where it stopped, not the loss's minimum; a larger "
            "--max-evals may fit closer")


def _search(trials: _Trials, active: list[int], noise_var: float, max_evals: int
            ) -> tuple[npt.NDArray[np.float64], pd.DataFrame | None, float, float, bool]:
    """Bounded Nelder-Mead over the ``active`` coordinates (the others at their start) on
    the loss plus the prior's penalty (:mod:`~kvbudget.studies.fit_uncertainty`), at most
    ``max_evals`` simulations: the best point, its records (None if none simulated), its
    loss (without the penalty), the best fixed front-end term there and whether the search
    converged (scipy's ``success``: False when it ran out of ``max_evals``)."""
    from scipy.optimize import minimize

    coords = trials.coordinates
    x0 = np.array([c.x0 for c in coords], dtype=np.float64)
    sds = np.array([coords[j].prior_sd for j in active])
    best: dict[str, Any] = {"objective": math.inf, "x": x0, "sim": None, "loss": math.inf,
                            "term": trials.overhead_s}

    def objective(z: npt.NDArray[np.float64]) -> float:
        x = _with(x0, active, z)
        try:
            sim, loss = trials.run(x)
        except ValueError:
            trials.count(_PENALTY)
            return _PENALTY
        value = loss + noise_var * float(np.sum(((z - x0[active]) / sds) ** 2))
        if value < best["objective"]:
            best.update(objective=value, x=x, sim=sim, loss=loss, term=trials.last_term_s)
        return value

    z0 = x0[active]
    simplex = np.tile(z0, (len(active) + 1, 1))
    for k, j in enumerate(active):
        simplex[k + 1, k] += 0.7 if coords[j].log else 0.5
        try:
            trials.build(_with(x0, active, simplex[k + 1]))
        except ValueError:  # past a bound the model enforces (an mfu of 1): the other way
            simplex[k + 1, k] = z0[k] - 0.7
    found = minimize(objective, z0, method="Nelder-Mead",
                     bounds=[(coords[j].lo, coords[j].hi) for j in active],
                     options={"maxfev": max_evals, "initial_simplex": simplex, "xatol": 1e-3,
                              "fatol": 1e-6})
    return best["x"], best["sim"], best["loss"], best["term"], bool(found.success)


def calibrate_recording(
    recording: Recording,
    config: SimConfig,
    start: CostModel,
    *,
    policy: str | None = None,
    policy_params: Mapping[str, Any] | None = None,
    rows: npt.NDArray[np.bool_] | None = None,
    fit_overhead: bool = True,
    start_overhead_s: float = 0.0,
    parameters: tuple[str, ...] | None = None,
    max_evals: int = 200,
    progress: Callable[[int, float], None] | None = None,
    start_records: pd.DataFrame | None = None,
    uncertainty: bool = True,
    seed: int = 0,
    model_chosen: bool = False,
) -> RecordedCalibration:
    """Fit ``start``'s ``FIT_PARAMETERS`` (or ``parameters``) so that simulating the recording
    on ``config`` reproduces the measured latencies of ``rows`` (default: every measured
    request); those that do not move the step time are left as they are
    (:func:`effective_parameters`, listed in ``fixed``). With ``uncertainty`` (the default),
    those the recording does not identify are left at the start too, the fit is regularised
    toward the start, and the result carries the posterior (:mod:`~kvbudget.studies.
    fit_uncertainty`; ``seed`` draws the bootstrap). ``max_evals`` bounds the start's and the
    search's simulations; the sensitivities take two more per parameter before the search and
    two per fitted one after it. ``start_records``: the start's simulation when already run;
    ``progress(num_evals, best_loss)`` is called after every simulation. With ``fit_overhead``
    the fixed front-end term is measured where the recording has the server's own TTFT
    (:func:`measured_front_end`, ``front_end`` of the result), else profiled out of the search
    (the best for each trial, within 0 and the shortest TTFT) and settled with up to four
    more simulations (``term``). A recording naming a model ``config`` leaves at the default is
    refused (:func:`check_recorded_model`) unless ``model_chosen`` (the command line)."""
    if not model_chosen:
        check_recorded_model(recording, config)
    names, fixed = effective_parameters(start, parameters)
    if max_evals < 1:
        raise ValueError(f"max_evals must be >= 1, got {max_evals!r}")
    server, fit_overhead, start_overhead_s = _front_end(recording, rows, fit_overhead,
                                                        start_overhead_s)
    measured = recording.records()
    if rows is not None and not bool((rows & (measured["status"] == "completed")).any()):
        raise ValueError("the rows to fit hold no measured request")
    span = float(recording.workload.arrival_s[-1] - recording.workload.arrival_s[0])
    coords = coordinates(start, names)
    trials = _Trials(recording, dataclasses.replace(config, timeline_period_s=max(1.0, span / 100)),
                     start, coords, measured=measured, rows=rows, fit_overhead=fit_overhead,
                     start_overhead_s=start_overhead_s,
                     policy=policy, policy_params=policy_params, progress=progress)
    x0 = np.array([c.x0 for c in coords], dtype=np.float64)
    start_sim = trials.simulate(x0) if start_records is None else start_records
    if start_records is not None:  # simulated by the caller: still one of the fit's
        trials.count(recorded_loss(start_records, measured, rows))
    start_loss = recorded_loss(start_sim, measured, rows)
    rng = np.random.default_rng(seed)
    stages = recording_stages(recording)
    noise_var = noise_variance(sampling_variance(start_sim, measured, rows, rng, stages=stages))
    active = list(range(len(coords)))
    if uncertainty and coords:
        jac = sensitivity(coords, x0, start_sim, trials.simulate).gradient(
            measured, FIT_KEYS, rows, stages=stages)
        active, dropped = identify(jac, noise_var, np.array([c.prior_sd for c in coords]))
        for j, ratio in dropped.items():
            fixed[coords[j].name] = (f"the recording does not identify it (its posterior sd "
                                     f"is {ratio:.2f} of the prior's): left at the start")
    best_x, best_sim, best_loss, term = x0, start_sim, start_loss, start_overhead_s
    stopped = max_evals if active else None
    if active and max_evals > 1:
        x, sim, loss, at, converged = _search(trials, active, noise_var, max_evals - 1)
        stopped = None if converged else max_evals
        if sim is not None and loss < start_loss:
            best_x, best_sim, best_loss, term = x, sim, loss, at
    settled = trials.settle(best_x, term) if fit_overhead else None  # to convergence, at x
    if settled is not None:
        best_sim, best_loss = settled.records, settled.loss
    cal = _result(trials, recording, measured, rows, best_x, best_sim,
                  losses=(start_loss, best_loss), active=active, fixed=fixed,
                  rng=rng if uncertainty else None, term=settled)
    cal.search_stopped, cal.front_end = stopped, server
    return cal


def _front_end(recording: Recording, rows: npt.NDArray[np.bool_] | None, fit_overhead: bool,
               start_s: float) -> tuple[MeasuredFrontEnd | str | None, bool, float]:
    """The recording's measured front-end term (:func:`measured_front_end`, or why it is not
    used), whether the term is still to be fitted and the one to start from: a measured term
    is used as it is, not fitted; none is looked for when ``fit_overhead`` is off."""
    server = measured_front_end(recording, rows) if fit_overhead else None
    if isinstance(server, MeasuredFrontEnd):
        return server, False, server.value_s
    return server, fit_overhead, start_s


def _result(trials: _Trials, recording: Recording, measured: pd.DataFrame,
            rows: npt.NDArray[np.bool_] | None, x: npt.NDArray[np.float64],
            simulated: pd.DataFrame, *, losses: tuple[float, float], active: list[int],
            fixed: dict[str, str], rng: np.random.Generator | None,
            term: FixedTermFit | None = None) -> RecordedCalibration:
    """The calibration at the chosen point ``x``: the fitted model, its comparison table and,
    with ``rng`` (the bootstrap's), its posterior and the predicted figures' 95 %
    intervals; ``term``: the fitted fixed front-end term, when fitted."""
    model, overhead = trials.build(x)
    if "source" in {f.name for f in dataclasses.fields(model)}:  # type: ignore[arg-type]
        model = dataclasses.replace(  # type: ignore[type-var]
            model, source=f"calibrated from {Path(recording.path).name}")
    stages = recording_stages(recording)
    table = compare_recorded(simulated, measured, stages, rows)
    coords = [trials.coordinates[j] for j in active]
    fitted = {c.name: c.value(float(x[j])) for c, j in zip(coords, active, strict=True)}
    start_values = {c.name: c.base for c in coords}
    bounds = {c.name: (c.value(c.lo), c.value(c.hi)) for c in coords}
    if term is not None:
        fitted[OVERHEAD], start_values[OVERHEAD] = term.value_s, trials.start_overhead_s
    post = sens = None
    if rng is not None and active:
        sens = sensitivity(coords, x[active], simulated,
                           lambda z: trials.simulate(_with(x, active, z)))
        jac = sens.gradient(measured, FIT_KEYS, rows, stages=stages)
        residuals = (compared_stats(simulated, measured, rows, stages=stages)
                     - compared_stats(measured, measured, rows, stages=stages))
        noise_var = noise_variance(sampling_variance(simulated, measured, rows, rng,
                                                     stages=stages), residuals, len(active))
        cov = posterior_covariance(jac, noise_var, np.array([c.prior_sd for c in coords]))
        post = FitUncertainty(tuple(c.name for c in coords), tuple(float(x[j]) for j in active),
                              tuple(c.log for c in coords),
                              tuple(c.base if c.log else c.unit for c in coords),
                              tuple(tuple(float(v) for v in r) for r in cov), noise_var,
                              NUM_BOOTSTRAP, tuple((c.lo, c.hi) for c in coords))
        values = compared_stats(simulated, measured, rows, PREDICTED, stages=stages)
        table = with_intervals(table, post.predicted(
            values, sens.gradient(measured, PREDICTED, rows, stages=stages), PREDICTED))
    num_rows = int(((measured["status"] == "completed").to_numpy()
                    & (True if rows is None else rows)).sum())
    return RecordedCalibration(model=model, frontend_overhead_s=overhead, table=table,
                               loss=losses[1], start_loss=losses[0],
                               num_evals=trials.num_evals, start=start_values, fitted=fitted,
                               num_rows=num_rows, fixed=fixed, simulated=simulated,
                               uncertainty=post, sensitivity=sens, search_bounds=bounds,
                               term=term, stages=tuple(stages),
                               flat=flat_latency_said(model, measured, rows),
                               counts=metric_counts(measured, rows))


def _with(x: npt.NDArray[np.float64], active: list[int], z: npt.NDArray[np.float64]
          ) -> npt.NDArray[np.float64]:
    out = x.copy()
    out[active] = z
    return out


def validation_intervals(recording: Recording, config: SimConfig, model: CostModel,
                         frontend_overhead_s: float, posterior: FitUncertainty, *,
                         simulated: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None,
                         policy: str | None = None,
                         policy_params: Mapping[str, Any] | None = None
                         ) -> dict[str, tuple[float, float]]:
    """95 % prediction intervals of :data:`PREDICTED` for a fitted model (its file's
    ``posterior``) on another recording: two simulations per fitted parameter around the
    fitted values (``simulated``: the records at them)."""
    coords = tuple(Coordinate(n, float(getattr(model, n)) if lg else frontend_overhead_s,
                              -math.inf, math.inf, log=lg, unit=1.0 if lg else s)
                   for n, lg, s in zip(posterior.names, posterior.log, posterior.scales,
                                       strict=True))
    measured = recording.records()
    trials = _Trials(recording, config, model, coords, measured=measured, rows=rows,
                     fit_overhead=OVERHEAD in posterior.names,
                     start_overhead_s=frontend_overhead_s, policy=policy,
                     policy_params=policy_params, progress=None)
    sens = sensitivity(coords, np.array([c.x0 for c in coords]), simulated, trials.simulate)
    stages = recording_stages(recording)
    base = compared_stats(simulated, measured, rows, PREDICTED, stages=stages)
    return posterior.predicted(
        base, sens.gradient(measured, PREDICTED, rows, stages=stages), PREDICTED)


REQUESTS_PER_PARAMETER = 10
"""The fewest measured requests per fitted parameter a fit is accepted on: the "ten events per
variable" rule for regression models (Peduzzi et al., J. Clin. Epidemiol. 49(12), 1996,
doi:10.1016/S0895-4356(96)00236-3; Harrell, *Regression Modeling Strategies*, 2nd ed., 4.4:
below it fitted coefficients are unstable and over-fit). A request, not a statistic, is the
unit: the loss matches statistics of the requests' latency distributions."""


@dataclass(frozen=True)
class Refusal:
    """Why a fit must not be written: one line, and whether it is only that the recording is
    small (which ``--allow-small-fit`` overrides)."""

    text: str
    small: bool = False


def refusal(cal: RecordedCalibration) -> Refusal | None:
    """Why a fit must not be used, or None: its simulation completes none of the measured
    requests, the recording identifies none of the parameters, the fit did not lower its
    loss, or the recording has fewer than :data:`REQUESTS_PER_PARAMETER` measured requests
    per fitted parameter."""
    sub = cal.table[(cal.table["stage"] == OVERALL) & (cal.table["metric"] == "completed")]
    if not (len(sub) and float(sub["simulated"].iloc[0]) > 0):
        return Refusal(f"the fitted simulation completes none of the {cal.num_rows} measured "
                       "requests: nothing was fitted")
    if not cal.fitted:
        why = "; ".join(f"{k}: {v}" for k, v in cal.fixed.items())
        return Refusal(f"the recording identifies none of the parameters ({why})")
    if not cal.loss < cal.start_loss:
        return Refusal(f"the fit did not lower its loss ({cal.start_loss:.4g} at the start, "
                       f"{cal.loss:.4g} after {cal.num_evals} simulations)")
    need = REQUESTS_PER_PARAMETER * len(cal.fitted)
    if cal.num_rows < need:
        return Refusal(f"{cal.num_rows} measured requests are too few to fit "
                       f"{len(cal.fitted)} parameters (at least {need}: "
                       f"{REQUESTS_PER_PARAMETER} per parameter)", small=True)
    return None


def read_calibration(path: Path) -> dict[str, Any]:
    """The ``calibration`` section of a cost-model file (empty when it has none)."""
    payload = json.loads(path.read_text())
    section = payload.get("calibration", {}) if isinstance(payload, dict) else {}
    return section if isinstance(section, dict) else {}


def _stage_said(stage: RecordedStage) -> dict[str, Any]:
    """A recorded stage in the cost file (JSON has no Infinity; ``tick_pattern`` only when
    the stage has one, ``time_limit_end_s`` and ``grace_s`` only for a time-limited one,
    ``cut`` and ``status_changes`` only for one not cut after a grace period)."""
    said = dataclasses.asdict(stage)
    if stage.cut == "grace":
        del said["cut"], said["status_changes"]
    else:
        said["status_changes"] = list(stage.status_changes)
    if stage.request_rate == math.inf:
        said["request_rate"] = "inf"
    if not stage.tick_pattern:
        del said["tick_pattern"]
    if stage.time_limit_end_s is None:
        del said["time_limit_end_s"], said["grace_s"]
    elif stage.grace_s == math.inf:
        said["grace_s"] = "inf"
    return said
