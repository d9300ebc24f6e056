"""How sure a recorded fit is: the recording's own noise, the parameters it identifies, and
95 % intervals on the fitted parameters and on the figures they predict.

The fit (:mod:`kvbudget.studies.calibrate`) matches the log of twelve statistics of the
measured latencies (TTFT, TPOT and E2E: mean, p50, p90, p99). Each of them is itself an
estimate from a finite sample of requests. Here:

- **Noise.** Resampling the compared requests with replacement, simulated and measured
  together (the nonparametric bootstrap, Efron and Tibshirani, *An Introduction to the
  Bootstrap*, 1993, ch. 6), gives each residual's sampling variance (a residual: the log of a
  simulated statistic over the measured one); their mean, ``noise_variance``, is the variance
  of one residual of the loss. At the fitted point the residuals left over count too: the
  variance is at least their sum of squares over the residuals less the parameters (the
  classical estimate of nonlinear least squares, Bates and Watts, *Nonlinear Regression
  Analysis and Its Applications*, 1988, 2.3), so a model that cannot reproduce the recording
  gets wide intervals, not narrow ones.
- **Prior.** Each fitted coordinate starts at the default (the start model) and may move only
  inside its search bounds (the physical range where one is published); the prior is the
  Gaussian with that uniform's standard deviation, ``(hi - lo) / sqrt(12)``, centred at the
  start. The fit minimises ``loss + noise_variance * sum(((x - x0) / prior_sd) ** 2)``: minus
  twice the log posterior when the residuals are independent with that variance (a maximum a
  posteriori fit, i.e. ridge regularisation toward the default).
- **Sensitivity.** Two simulations per coordinate, moved by :data:`STEP` up and down, give
  the Jacobian ``J`` of the residuals by central differences.
- **Identification.** The Laplace (Gauss-Newton) posterior covariance is
  ``C = (J'J / noise_variance + diag(1 / prior_sd**2))^-1``. A coordinate whose posterior
  standard deviation is more than :data:`IDENTIFIED` of its prior's is one the recording does
  not pin down: the least identified such coordinate is left at its default and the rest are
  checked again (two parameters that only move the step time together are not both fitted).
- **Intervals.** At the fitted point ``C`` again; a parameter's 95 % interval is
  ``x +- 1.96 sd`` in its search coordinate, and a predicted figure's is its log
  ``+- 1.96 sd_f`` with ``sd_f^2 = g' C g + noise_variance``: the parameters' uncertainty
  through the figure's own sensitivity ``g`` (the delta method) plus one residual's variance,
  so that a measured figure falls inside it 95 % of the time. A figure is taken as the
  comparison table shows it (:func:`compared_stats`): output tokens/s of a recording with
  several load stages over the time the stages ran, not the idle time between them.

The intervals are local: they describe the basin the fit ended in. A loss of simulated
percentiles can have several basins; a recording that constrains a parameter weakly shows it
as a wide interval, and ``validate`` on another recording is the check that covers the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.analysis.validation import OVERALL, STATS, latency_stats, same_requests

if TYPE_CHECKING:
    import pandas as pd

FIT_METRICS = ("ttft", "tpot", "e2e")
"""The latency metrics whose :data:`~kvbudget.analysis.validation.STATS` the fit matches."""

FIT_KEYS = tuple(f"{m}_{s}_s" for m in FIT_METRICS for s in STATS)
"""The twelve statistics of the loss, in the order of a residual vector."""

NUM_BOOTSTRAP = 200
"""Bootstrap resamples of the measured requests: enough for a standard error within about 5 %
of its limit (Efron and Tibshirani 1993, section 6.4: 50 to 200 suffice for a standard error)."""

STEP = 0.3
"""Finite-difference step, in a coordinate's own units (log of the parameter: 35 %). A
simulated loss is rough at small scales (a step more or less in a queue moves a percentile),
so derivatives are taken over a step wider than that roughness, as for any noisy simulation
(More and Wild, "Estimating derivatives of noisy simulations", ACM TOMS 38(3), 2012)."""

IDENTIFIED = 0.5
"""A coordinate is identified when the recording shrinks its prior standard deviation to at
most this fraction (the data hold at least three times the prior's information on it)."""

Z95 = 1.959963984540054
"""The standard normal's 97.5 % quantile: a two-sided 95 % interval."""

NOISE_FLOOR = 1e-4
"""Smallest residual variance used ((1 %)^2 in log): a recording whose statistics do not move
under resampling (identical requests) is not taken as exact."""

PREDICTED = (*FIT_KEYS, "output_tokens_per_s")
"""The figures a calibration or validation gives 95 % intervals for."""


INTERVAL_COLUMNS = ("sim_low_95", "sim_high_95")
"""The columns a comparison table gains for its predicted figures' 95 % intervals."""


def with_intervals(table: pd.DataFrame, intervals: Mapping[str, tuple[float, float]],
                   stage: str = OVERALL) -> pd.DataFrame:
    """``table`` (:data:`~kvbudget.analysis.validation.STAGE_COLUMNS`) with
    :data:`INTERVAL_COLUMNS` filled for ``stage``'s rows that have an interval (NaN
    elsewhere)."""
    out = table.copy()
    for k, col in enumerate(INTERVAL_COLUMNS):
        out[col] = [intervals[m][k] if s == stage and m in intervals else math.nan
                    for s, m in zip(out["stage"], out["metric"], strict=True)]
    return out


def log_stats(records: pd.DataFrame, keys: Sequence[str] = FIT_KEYS,
              stages: Sequence[str] | npt.NDArray[np.object_] | None = None
              ) -> npt.NDArray[np.float64]:
    """``log`` of the statistics ``keys`` of :func:`~kvbudget.analysis.validation.
    latency_stats` over the records' completed rows (NaN where undefined or not positive).
    ``stages``: each row's load stage; output tokens/s is then counted over the time the
    stages ran, as the comparison table's is (:func:`~kvbudget.analysis.validation.
    compare_recorded`), not over the idle time between them."""
    labels = None if stages is None else np.asarray(stages, dtype=object)
    if labels is not None and len(labels) != len(records):
        raise ValueError(f"{len(labels)} stage labels for {len(records)} records")
    stats = latency_stats(records, labels)
    out = np.array([stats.get(k, math.nan) for k in keys], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(out > 0, np.log(np.where(out > 0, out, 1.0)), math.nan)


def sampling_variance(simulated: pd.DataFrame, measured: pd.DataFrame,
                      rows: npt.NDArray[np.bool_] | None, rng: np.random.Generator, *,
                      stages: Sequence[str] | None, num_bootstrap: int = NUM_BOOTSTRAP,
                      keys: Sequence[str] = FIT_KEYS) -> npt.NDArray[np.float64]:
    """Each residual's variance (``log`` simulated statistic minus ``log`` measured one) over
    bootstrap resamples of the compared requests (the measured completed ``rows``), both
    sides resampled together, each request keeping its stage (``stages``: a label per measured
    row, :func:`log_stats`); NaN where a statistic is undefined."""
    ids, labels = _compared_ids(measured, rows, stages)
    n = len(ids)
    if n < 2:
        return np.full(len(keys), math.nan)
    meas = _subset(measured, ids)
    sim = same_requests(simulated, meas)
    draws = np.empty((num_bootstrap, len(keys)))
    for b in range(num_bootstrap):
        pick = rng.integers(0, n, n)
        picked = None if labels is None else labels[pick]
        draws[b] = (log_stats(sim.iloc[pick], keys, picked)
                    - log_stats(meas.iloc[pick], keys, picked))
    with np.errstate(invalid="ignore"):
        return np.asarray(np.nanvar(draws, axis=0, ddof=1), dtype=np.float64)


def noise_variance(variance: npt.NDArray[np.float64],
                   residuals: npt.NDArray[np.float64] | None = None,
                   num_parameters: int = 0) -> float:
    """The mean of the finite per-statistic variances, at least :data:`NOISE_FLOOR` and, with
    ``residuals``, at least their sum of squares over their number less ``num_parameters``."""
    finite = variance[np.isfinite(variance)]
    out = max(NOISE_FLOOR, float(finite.mean())) if finite.size else NOISE_FLOOR
    if residuals is not None:
        r = residuals[np.isfinite(residuals)]
        if r.size > num_parameters:
            out = max(out, float(np.sum(r ** 2)) / (r.size - num_parameters))
    return out


def prior_sd(lo: float, hi: float) -> float:
    """The standard deviation of the uniform over a coordinate's search bounds."""
    return (hi - lo) / math.sqrt(12.0)


def jacobian(plus: Sequence[npt.NDArray[np.float64]], minus: Sequence[npt.NDArray[np.float64]],
             steps: Sequence[float]) -> npt.NDArray[np.float64]:
    """Finite differences: column ``j`` is ``(plus[j] - minus[j]) / steps[j]``; a row
    undefined at any point is zero (it carries no information)."""
    cols = [(p - m) / s for p, m, s in zip(plus, minus, steps, strict=True)]
    jac = np.column_stack(cols) if cols else np.zeros((0, 0))
    jac[~np.isfinite(jac).all(axis=1)] = 0.0
    return jac


def posterior_covariance(jac: npt.NDArray[np.float64], noise_var: float,
                         prior_sds: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``(J'J / noise_var + diag(1 / prior_sd^2))^-1``."""
    info = jac.T @ jac / noise_var + np.diag(1.0 / prior_sds ** 2)
    return np.asarray(np.linalg.inv(info), dtype=np.float64)


def identify(jac: npt.NDArray[np.float64], noise_var: float,
             prior_sds: npt.NDArray[np.float64]) -> tuple[list[int], dict[int, float]]:
    """The coordinates the data identify, and for each other one the ratio of its posterior
    to its prior standard deviation when it was set aside (greedy: the worst first)."""
    keep = list(range(jac.shape[1]))
    dropped: dict[int, float] = {}
    while keep:
        cov = posterior_covariance(jac[:, keep], noise_var, prior_sds[keep])
        ratio = np.sqrt(np.diag(cov)) / prior_sds[keep]
        worst = int(np.argmax(ratio))
        if ratio[worst] <= IDENTIFIED:
            break
        dropped[keep.pop(worst)] = float(ratio[worst])
    return keep, dropped


@dataclass(frozen=True)
class Coordinate:
    """One fitted parameter as the search sees it: ``value = base * exp(x)`` (``log``) or
    ``value = x * unit`` (linear, the front-end overhead), searched in ``[lo, hi]``."""

    name: str
    base: float
    lo: float
    hi: float
    log: bool = True
    unit: float = 1.0

    @property
    def x0(self) -> float:
        return 0.0 if self.log else self.base / self.unit

    @property
    def prior_sd(self) -> float:
        return prior_sd(self.lo, self.hi)

    def value(self, x: float) -> float:
        return self.base * math.exp(x) if self.log else max(0.0, x) * self.unit


@dataclass(frozen=True)
class Sensitivity:
    """The simulated records at a point and at each coordinate moved by its step."""

    coordinates: tuple[Coordinate, ...]
    x: tuple[float, ...]
    steps: tuple[float, ...]
    """Each coordinate's distance between its ``plus`` and ``minus`` points."""
    plus: tuple[pd.DataFrame, ...]
    minus: tuple[pd.DataFrame, ...]

    def gradient(self, measured: pd.DataFrame, keys: Sequence[str],
                 rows: npt.NDArray[np.bool_] | None = None, *,
                 stages: Sequence[str] | None) -> npt.NDArray[np.float64]:
        """The Jacobian of the log statistics ``keys`` (over the measured completed ``rows``,
        with their ``stages``: :func:`compared_stats`) by the coordinates."""
        plus = [compared_stats(m, measured, rows, keys, stages=stages) for m in self.plus]
        minus = [compared_stats(m, measured, rows, keys, stages=stages) for m in self.minus]
        return jacobian(plus, minus, self.steps)


def _compared_ids(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None,
                  stages: Sequence[str] | None = None
                  ) -> tuple[npt.NDArray[Any], npt.NDArray[np.object_] | None]:
    """The compared requests' ids and, with ``stages`` (a label per measured row), theirs."""
    keep = (measured["status"] == "completed").to_numpy()
    if rows is not None:
        keep = keep & np.asarray(rows, dtype=bool)
    if stages is None:
        return measured["request_id"].to_numpy()[keep], None
    labels = np.asarray(stages, dtype=object)
    if len(labels) != len(measured):
        raise ValueError(f"{len(labels)} stage labels for {len(measured)} measured requests")
    return measured["request_id"].to_numpy()[keep], labels[keep]


def _subset(records: pd.DataFrame, ids: npt.NDArray[Any]) -> pd.DataFrame:
    return records.set_index("request_id").loc[ids].reset_index()


def compared_stats(records: pd.DataFrame, measured: pd.DataFrame,
                   rows: npt.NDArray[np.bool_] | None, keys: Sequence[str] = FIT_KEYS, *,
                   stages: Sequence[str] | None) -> npt.NDArray[np.float64]:
    """:func:`log_stats` of the rows of ``records`` (joined on ``request_id``) that
    ``measured`` shows completed, of ``rows``, each in its stage, each metric over those that
    measured it (:func:`~kvbudget.analysis.validation.same_requests`): the figures of the
    comparison table's stage ``all`` (:func:`~kvbudget.analysis.validation.compare_recorded`
    with the same ``rows`` and ``stages``, a label per measured row), so that an interval is
    centred on the figure it is printed beside."""
    ids, labels = _compared_ids(measured, rows, stages)
    return log_stats(same_requests(records, _subset(measured, ids)), keys, labels)


def sensitivity(coordinates: Sequence[Coordinate], x: npt.NDArray[np.float64],
                base: pd.DataFrame,
                simulate: Callable[[npt.NDArray[np.float64]], pd.DataFrame]) -> Sensitivity:
    """Simulate each coordinate moved from ``x`` by :data:`STEP` up and down (central
    differences), less where a bound is nearer, one way only where the other is at its bound
    or the model refuses it (``simulate`` raises ValueError: an mfu above 1). ``base``: the
    records at ``x``."""
    plus, minus, steps = [], [], []
    for j, c in enumerate(coordinates):
        ends: dict[float, pd.DataFrame] = {}
        width = 0.0
        for sign, room in ((1.0, c.hi - x[j]), (-1.0, x[j] - c.lo)):
            step = min(STEP, float(room))
            if not step > 1e-6:
                continue
            point = np.array(x, dtype=np.float64)
            point[j] += sign * step
            try:
                ends[sign] = simulate(point)
            except ValueError:
                continue
            width += step
        if not ends:
            raise ValueError(f"{c.name}: cannot be moved either way from {c.value(x[j]):g}")
        plus.append(ends.get(1.0, base))
        minus.append(ends.get(-1.0, base))
        steps.append(width)
    return Sensitivity(tuple(coordinates), tuple(float(v) for v in x), tuple(steps),
                       tuple(plus), tuple(minus))


@dataclass(frozen=True)
class FitUncertainty:
    """A fit's posterior at its fitted point (search coordinates ``names``)."""

    names: tuple[str, ...]
    x: tuple[float, ...]
    log: tuple[bool, ...]
    scales: tuple[float, ...]
    """A coordinate's value is ``scale * exp(x)`` (log) or ``scale * x`` (linear)."""
    covariance: tuple[tuple[float, ...], ...]
    noise_variance: float
    num_bootstrap: int
    bounds: tuple[tuple[float, float], ...] = ()
    """Each coordinate's search bounds: its interval is cut to them (none: unbounded)."""

    def sd(self) -> dict[str, float]:
        """Each coordinate's posterior standard deviation (log units for a log coordinate)."""
        cov = np.asarray(self.covariance, dtype=np.float64)
        return {n: float(math.sqrt(max(0.0, cov[j, j]))) for j, n in enumerate(self.names)}

    def intervals(self) -> dict[str, tuple[float, float]]:
        """Each parameter's 95 % interval in its own units, within its search bounds."""
        out = {}
        for j, (name, sd) in enumerate(self.sd().items()):
            lo, hi = self.bounds[j] if self.bounds else (-math.inf, math.inf)
            ends = (max(lo, self.x[j] - Z95 * sd), min(hi, self.x[j] + Z95 * sd))
            scale = self.scales[j]
            out[name] = ((scale * math.exp(ends[0]), scale * math.exp(ends[1])) if self.log[j]
                         else (max(0.0, ends[0] * scale), max(0.0, ends[1] * scale)))
        return out

    def predicted(self, values: npt.NDArray[np.float64], jac: npt.NDArray[np.float64],
                  keys: Sequence[str]) -> dict[str, tuple[float, float]]:
        """95 % prediction intervals of figures whose logs are ``values`` with Jacobian
        ``jac``: the parameters' uncertainty through the figure's sensitivity plus one
        residual's variance (where a measurement of the figure may fall)."""
        cov = np.asarray(self.covariance, dtype=np.float64)
        out = {}
        for k, key in enumerate(keys):
            if not math.isfinite(float(values[k])):
                continue
            sd = math.sqrt(max(0.0, float(jac[k] @ cov @ jac[k])) + self.noise_variance)
            out[key] = (math.exp(values[k] - Z95 * sd), math.exp(values[k] + Z95 * sd))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "method": "Laplace approximation at the fitted point: residual variance from "
                      f"{self.num_bootstrap} bootstrap resamples of the compared requests (at "
                      "least the fit's left-over residuals), Jacobian by central differences, "
                      "prior = the search bounds' uniform sd, centred at the start",
            "coordinates": list(self.names),
            "log_coordinates": list(self.log),
            "x": list(self.x),
            "scales": list(self.scales),
            "covariance": [list(r) for r in self.covariance],
            "bounds": [list(b) for b in self.bounds],
            "noise_variance": self.noise_variance,
            "sd": self.sd(),
            "interval_95": {k: list(v) for k, v in self.intervals().items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> FitUncertainty:
        """The ``uncertainty`` block of a cost file (ValueError naming what is wrong)."""
        if not isinstance(data, dict):
            raise ValueError("calibration.uncertainty: expected an object")
        try:
            names = tuple(str(n) for n in data["coordinates"])
            cov = tuple(tuple(float(v) for v in row) for row in data["covariance"])
            out = cls(names, tuple(float(v) for v in data["x"]),
                      tuple(bool(v) for v in data["log_coordinates"]),
                      tuple(float(v) for v in data["scales"]), cov,
                      float(data["noise_variance"]), 0,
                      tuple((float(lo), float(hi)) for lo, hi in data.get("bounds", [])))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"calibration.uncertainty: {e}") from None
        d = len(names)
        if (len(out.x) != d or len(out.log) != d or len(out.scales) != d or len(cov) != d
                or len(out.bounds) not in (0, d)
                or any(len(r) != d for r in cov)
                or not np.isfinite(np.asarray(cov, dtype=np.float64)).all()):
            raise ValueError("calibration.uncertainty: coordinates, x, scales and covariance "
                             "disagree in size or hold a non-finite number")
        return out
