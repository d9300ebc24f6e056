"""Least-squares fit of the linear step-time model to measured steps, and error reports.

Both ``kvbudget calibrate`` (steps timed on a live server) and ``kvbudget profile-fit`` (steps
timed by :mod:`kvbudget.live.profiler`) turn a table of measured steps into a
:class:`~kvbudget.perf.cost_model.LinearCostModel` with :func:`fit_linear_cost_model`.

The fit minimises the sum of squared *relative* errors,
``sum(((intercept + coef . x_i) - t_i) / t_i) ** 2``, under ``coef >= 0`` and
``intercept > 0`` (a bounded-variable least-squares problem, ``scipy.optimize.lsq_linear``).
Relative weighting keeps a 5 ms decode step as important as a 2 s prefill: with plain least
squares the long steps would decide every coefficient and the short ones, which dominate a
serving engine's time line, would get the intercept wrong by a large factor.

pandas and scipy are imported inside the functions (command start-up time is benchmarked).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.perf.cost_model import FEATURES, CostModel, LinearCostModel

if TYPE_CHECKING:
    import pandas as pd

MEASURED_COLUMN = "step_time_s"
"""The measured step time in an input ``samples`` table."""

TABLE_COLUMNS = (*FEATURES, "point_class", "measured_s", "predicted_s", "rel_error")
"""Columns of :attr:`FitResult.table` (and of :func:`compare_cost_model`'s result)."""

POINT_CLASSES = ("prefill", "decode", "mixed", "empty")

COEFFICIENT_NAMES = ("intercept_s", "per_prefill_token_s", "per_decode_seq_s",
                     "per_context_token_s", "per_prefill_attention_s", "per_prefill_seq_s")
"""LinearCostModel's coefficients, in the order of ``("1", *FEATURES)``."""

_MIN_INTERCEPT_S = 1e-9
"""Lower bound of the fitted intercept: LinearCostModel requires it to be strictly positive."""


@dataclass(frozen=True, eq=False)
class FitResult:
    """A fitted linear cost model and its error on every sample it was fitted to.

    ``table`` has one row per sample: the five features, ``point_class`` (see
    :func:`point_classes`), ``measured_s``, ``predicted_s`` and ``rel_error`` (signed,
    ``(predicted - measured) / measured``). ``mape`` and ``max_abs_rel_error`` are fractions
    (0.05 is 5 %).
    """

    model: LinearCostModel
    table: pd.DataFrame
    mape: float
    max_abs_rel_error: float

    @property
    def num_samples(self) -> int:
        return len(self.table)

    def per_class(self) -> pd.DataFrame:
        """Error summary of the fit per point class (see :func:`summarize_errors`)."""
        return summarize_errors(self.table)

    def to_json_extra(self) -> dict[str, Any]:
        """The fit's provenance and errors, for ``save_cost_model(model, path, extra=...)``.

        Returns ``{"fit": {...}}``: method, number of samples, MAPE, largest error, the errors per
        point class, and every sample's features, measured and predicted time (so a cost-model
        file documents exactly what it was fitted to).
        """
        per_class = {
            str(row["point_class"]): {
                "num_points": int(row["num_points"]),
                "mape": float(row["mape"]),
                "max_abs_rel_error": float(row["max_abs_rel_error"]),
                "mean_rel_error": float(row["mean_rel_error"]),
            }
            for row in self.per_class().to_dict(orient="records")
        }
        points = [
            {
                **{f: float(rec[f]) for f in FEATURES},
                "point_class": str(rec["point_class"]),
                "measured_s": float(rec["measured_s"]),
                "predicted_s": float(rec["predicted_s"]),
                "rel_error": float(rec["rel_error"]),
            }
            for rec in self.table.to_dict(orient="records")
        ]
        return {
            "fit": {
                "method": "bounded least squares on relative error (scipy lsq_linear, bvls)",
                "num_samples": self.num_samples,
                "mape": self.mape,
                "max_abs_rel_error": self.max_abs_rel_error,
                "per_class": per_class,
                "points": points,
            }
        }


def _validate_samples(samples: pd.DataFrame, measured: str) -> tuple[
        npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    missing = [c for c in (*FEATURES, measured) if c not in samples.columns]
    if missing:
        raise ValueError(
            f"samples: missing column {missing[0]!r} (need {', '.join((*FEATURES, measured))})"
        )
    x = samples.loc[:, list(FEATURES)].to_numpy(dtype=np.float64, copy=True)
    t = samples[measured].to_numpy(dtype=np.float64, copy=True)
    for j, name in enumerate(FEATURES):
        col = x[:, j]
        bad = np.flatnonzero(~np.isfinite(col) | (col < 0))
        if bad.size:
            raise ValueError(
                f"samples: column {name!r} must be finite and >= 0, "
                f"got {float(col[bad[0]])!r} at row {int(bad[0])}"
            )
    bad = np.flatnonzero(~np.isfinite(t) | (t <= 0))
    if bad.size:
        raise ValueError(
            f"samples: column {measured!r} must be finite and > 0, "
            f"got {float(t[bad[0]])!r} at row {int(bad[0])}"
        )
    return x, t


def point_classes(samples: pd.DataFrame) -> npt.NDArray[np.str_]:
    """Each step's class: ``prefill`` (prefill tokens, no decode), ``decode`` (decode only),
    ``mixed`` (both) or ``empty`` (neither)."""
    has_prefill = samples["num_prefill_tokens"].to_numpy(dtype=np.float64) > 0
    has_decode = samples["num_decode_seqs"].to_numpy(dtype=np.float64) > 0
    return np.select(
        [has_prefill & has_decode, has_prefill, has_decode],
        ["mixed", "prefill", "decode"],
        default="empty",
    ).astype(np.str_)


def fit_linear_cost_model(samples: pd.DataFrame, *, source: str = "least-squares fit") -> FitResult:
    """Fit ``t = intercept + sum(coef * feature)`` to measured steps, all coefficients >= 0.

    ``samples`` has the columns of :data:`kvbudget.perf.cost_model.FEATURES` and ``step_time_s``
    (seconds, > 0), one row per measured step (or per grid point's median). Minimises the
    squared relative error of every row. A feature that is zero in every row gets coefficient 0.
    Raises ValueError naming the column and row of a bad value.
    """
    import pandas as pd
    from scipy.optimize import lsq_linear

    x, t = _validate_samples(samples, MEASURED_COLUMN)
    if len(t) < 2:
        raise ValueError(f"samples: need at least 2 rows to fit, got {len(t)}")

    design = np.column_stack([np.ones(len(t)), x])  # columns: 1, *FEATURES
    weighted = design / t[:, None]  # relative error: (design @ c - t) / t = weighted @ c - 1
    target = np.ones(len(t))
    # Scale columns to unit max so the solver sees a well-conditioned problem (features span
    # 1 to 1e9, coefficients 1e-3 to 1e-12). Columns that are zero throughout are left out.
    scale = np.abs(weighted).max(axis=0)
    active = scale > 0
    scaled = weighted[:, active] / scale[active]
    lower = np.zeros(int(active.sum()))
    lower[0] = _MIN_INTERCEPT_S * scale[0]  # the intercept column is always active
    upper = np.full_like(lower, np.inf)
    solution = lsq_linear(scaled, target, bounds=(lower, upper), method="bvls")
    coef = np.zeros(design.shape[1])
    coef[active] = np.maximum(solution.x / scale[active], 0.0)
    coef[0] = max(coef[0], _MIN_INTERCEPT_S)

    model = LinearCostModel(**{name: float(c) for name, c in zip(COEFFICIENT_NAMES, coef,
                                                                 strict=True)},
                            source=source)
    table = _error_table(pd.DataFrame(x, columns=list(FEATURES)), t, model)
    abs_err = np.abs(table["rel_error"].to_numpy())
    return FitResult(model=model, table=table, mape=float(abs_err.mean()),
                     max_abs_rel_error=float(abs_err.max()))


def _error_table(features: pd.DataFrame, measured: npt.NDArray[np.float64],
                 cost_model: CostModel) -> pd.DataFrame:
    cols = [features[f].to_numpy(dtype=np.float64) for f in FEATURES]
    predicted = np.asarray(cost_model.step_time(*cols), dtype=np.float64)
    predicted = np.broadcast_to(predicted, measured.shape).astype(np.float64)
    table = features.loc[:, list(FEATURES)].astype(np.float64).reset_index(drop=True)
    table["point_class"] = point_classes(table)
    table["measured_s"] = measured
    table["predicted_s"] = predicted
    table["rel_error"] = (predicted - measured) / measured
    return table


def compare_cost_model(table: pd.DataFrame, cost_model: CostModel) -> pd.DataFrame:
    """Any cost model's prediction and signed relative error at every measured point.

    ``table`` has the four features and the measured time as ``measured_s`` (a
    :attr:`FitResult.table`) or ``step_time_s`` (a profile or samples table). Returns the
    :data:`TABLE_COLUMNS` with this model's ``predicted_s`` and ``rel_error``.
    """
    measured = "measured_s" if "measured_s" in table.columns else MEASURED_COLUMN
    _, t = _validate_samples(table, measured)
    return _error_table(table.reset_index(drop=True), t, cost_model)


def summarize_errors(errors: pd.DataFrame) -> pd.DataFrame:
    """Per point class, then ``all``: ``num_points``, ``mape``, ``max_abs_rel_error`` and
    ``mean_rel_error`` (the bias: > 0 when the model predicts slower steps than measured)."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    groups: list[tuple[str, pd.DataFrame]] = [
        (cls, errors[errors["point_class"] == cls]) for cls in POINT_CLASSES
    ]
    groups.append(("all", errors))
    for cls, part in groups:
        if part.empty:
            continue
        rel = part["rel_error"].to_numpy(dtype=np.float64)
        rows.append({"point_class": cls, "num_points": len(part),
                     "mape": float(np.abs(rel).mean()),
                     "max_abs_rel_error": float(np.abs(rel).max()),
                     "mean_rel_error": float(rel.mean())})
    return pd.DataFrame(rows, columns=["point_class", "num_points", "mape", "max_abs_rel_error",
                                       "mean_rel_error"])


EXACT_REL_ERROR = 1e-6
"""Below this largest relative error a class of points is fitted exactly (its MAPE prints as
0.00 %)."""


def in_sample_classes(errors: pd.DataFrame) -> dict[str, tuple[int, bool]]:
    """The point classes (and ``all``) of a fit's ``table`` with no more points than the
    coefficients that reach them (the intercept and each feature non-zero in one of them):
    the fit can pass through every one of them, so their errors test nothing. Per class: the
    number of those coefficients, and whether the fit is exact there (largest relative error
    under :data:`EXACT_REL_ERROR`)."""
    groups = [(cls, errors[errors["point_class"] == cls]) for cls in POINT_CLASSES]
    out: dict[str, tuple[int, bool]] = {}
    for cls, part in [*groups, ("all", errors)]:
        if part.empty:
            continue
        k = 1 + sum(1 for f in FEATURES if bool((part[f] != 0).any()))
        if len(part) <= k:
            worst = float(np.abs(part["rel_error"].to_numpy(dtype=np.float64)).max())
            out[cls] = (k, worst < EXACT_REL_ERROR)
    return out


def roofline_error(table: pd.DataFrame, cost_model: CostModel) -> pd.DataFrame:
    """How far a cost model (typically a :class:`kvbudget.perf.roofline.RooflineCostModel`) is from
    measured steps, per point class (``prefill``, ``decode``, ... and ``all``).

    ``table`` as for :func:`compare_cost_model`. Returns :func:`summarize_errors`' columns.
    """
    return summarize_errors(compare_cost_model(table, cost_model))


def errors_as_dict(summary: pd.DataFrame) -> dict[str, Mapping[str, float]]:
    """A :func:`summarize_errors` frame as ``{class: {metric: value}}`` for JSON files."""
    return {
        str(rec["point_class"]): {k: float(rec[k]) for k in
                                  ("num_points", "mape", "max_abs_rel_error", "mean_rel_error")}
        for rec in summary.to_dict(orient="records")
    }
