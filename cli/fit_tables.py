"""How ``calibrate --url`` and ``profile --fit-out`` print a linear fit: its coefficients, and
its errors per point class, a class the fit can pass through exactly said as such."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.cli.tables import render
from kvbudget.perf.fit import COEFFICIENT_NAMES, in_sample_classes

if TYPE_CHECKING:
    from kvbudget.perf.fit import FitResult


def coefficient_table(fit: FitResult, extra: tuple[tuple[str, float], ...] = ()) -> str:
    """The fitted coefficients (seconds), one a row, then ``extra`` rows (the front-end
    overhead a calibration measures besides)."""
    m = fit.model
    return render(
        ("coefficient", "value"),
        [[name, getattr(m, name)] for name in COEFFICIENT_NAMES]
        + [[name, value] for name, value in extra],
    )


def class_error_table(fit: FitResult) -> tuple[str, list[str]]:
    """The fit's errors per point class as a table, and a line for each class whose points are
    no more than the coefficients that reach it (its error is in-sample, exact when it shows
    0 %: it tests nothing)."""
    in_sample = in_sample_classes(fit.table)
    rows = []
    for r in fit.per_class().to_dict(orient="records"):
        cls = str(r["point_class"])
        exact = in_sample.get(cls, (0, False))[1]
        rows.append(
            [
                cls,
                r["num_points"],
                "exact fit" if exact else 100 * r["mape"],
                "-" if exact else 100 * r["max_abs_rel_error"],
                "-" if exact else 100 * r["mean_rel_error"],
            ]
        )
    lines = [
        f"{cls}: {n} point{'s' if n != 1 else ''}, no more than the {k} coefficients that reach "
        f"{'them' if n != 1 else 'it'}: "
        + (
            "the fit passes through each exactly, so its error tests nothing"
            if exact
            else "its error is in-sample and tests little"
        )
        + " (more points of the class, or held-out ones, would)"
        for cls, (k, exact) in in_sample.items()
        for n in [int((fit.table["point_class"] == cls).sum()) if cls != "all" else len(fit.table)]
    ]
    return render(("points", "n", "MAPE %", "max |err| %", "bias %"), rows), lines
