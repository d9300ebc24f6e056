"""Trade-off plots of sweeps and capacity searches (matplotlib; PNG and SVG).

* :func:`plot_pareto`: interactive tail latency against batch throughput (by default
  ``batch_sustained_output_tokens_per_s``: batch output tokens over the time the work took, first
  arrival to last finish; over the arrival window a run past capacity shows tokens it served
  long after the last arrival as if served by then), one marker per grid
  point (mean over replications, with faint t-interval error bars), coloured by policy, and
  the Pareto front over all points (no other point has both more throughput and a lower tail),
  its points labelled with their configuration.
* :func:`plot_attainment`: SLO attainment against offered load, one line per policy, with the
  target and each policy's capacity marked.

Figures are drawn on a :class:`matplotlib.figure.Figure` without pyplot (no global state, no
display needed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

FORMATS: tuple[str, ...] = ("png", "svg")

PARETO_X = "batch_sustained_output_tokens_per_s"
""":func:`plot_pareto`'s default x: the batch tier's output tokens per second of the time the
work took (first arrival to last finish), what ``kvbudget sweep`` plots."""

_SPANS = (("_sustained_output_tokens_per_s", "first arrival to last finish"),
          ("_output_tokens_per_s", "over the arrival window"),
          ("_goodput_rps", "over the arrival window"))
"""The span a throughput column is over, as an axis says it."""


def pareto_mask(x: Sequence[float] | np.ndarray[Any, Any],
                y: Sequence[float] | np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Points not dominated when ``x`` is to be maximised and ``y`` minimised (a point is
    dominated by one at least as good in both and better in one). NaN points are never on the
    front."""
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xa) & np.isfinite(ya)
    mask = np.zeros(xa.size, dtype=np.bool_)
    for i in np.flatnonzero(ok):
        better_eq = ok & (xa >= xa[i]) & (ya <= ya[i])
        strictly = (xa > xa[i]) | (ya < ya[i])
        mask[i] = not np.any(better_eq & strictly)
    return mask


def _save(fig: Any, stem: Path) -> list[Path]:
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for fmt in FORMATS:
        path = stem.parent / f"{stem.name}.{fmt}"  # not with_suffix: "rate1.5" keeps its ".5"
        fig.savefig(path, format=fmt, dpi=120, bbox_inches="tight")
        out.append(path)
    return out


def _spread_labels(fig: Any, labels: Sequence[Any], max_moves: int = 40) -> None:
    """Move point labels apart: each label that overlaps one placed before it is pushed up
    (then down) in steps of its own height until it overlaps none."""
    if len(labels) < 2:
        return
    get = getattr(fig.canvas, "get_renderer", None)
    if get is None:  # a bare Figure: give it an Agg canvas to measure text with
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        get = FigureCanvasAgg(fig).get_renderer
    renderer = get()
    placed: list[Any] = []
    for label in labels:
        box = label.get_window_extent(renderer)
        dx, dy = label.xyann
        step = box.height / fig.dpi * 72 + 1  # points
        for k in range(max_moves):
            if not any(box.overlaps(other) for other in placed):
                break
            shift = (k // 2 + 1) * step * (1 if k % 2 == 0 else -1)
            label.xyann = (dx, dy + shift)
            box = label.get_window_extent(renderer)
        placed.append(box)


def axis_label(column: str) -> str:
    """A metric's axis title: the column, the span a rate is over, the mean."""
    span = next((said for end, said in _SPANS if column.endswith(end)), None)
    return f"{column} ({'' if span is None else span + '; '}mean over replications)"


def _label(row: Mapping[Any, Any], columns: Sequence[str]) -> str:
    parts = []
    for c in columns:
        v = row.get(c)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        short = c.split(".")[-1]
        parts.append(f"{short}={v:g}" if isinstance(v, float) else f"{short}={v}")
    return ", ".join(parts)


def plot_pareto(
    points: pd.DataFrame,
    stem: Path,
    *,
    x: str = PARETO_X,
    y: str = "interactive_ttft_p99_s",
    label_columns: Sequence[str] = (),
    title: str | None = None,
) -> list[Path]:
    """Plot a per-point summary (``kvbudget.studies.sweep.summarize_points`` with metrics ``x`` and
    ``y``: columns ``{x}_mean``, ``{x}_low``, ... and ``policy``) to ``stem.png`` and
    ``stem.svg``. An axis of a throughput says the span it is over."""
    from matplotlib.figure import Figure

    for c in (f"{x}_mean", f"{y}_mean", "policy"):
        if c not in points.columns:
            raise ValueError(f"cannot plot the Pareto front: no column {c!r}")
    fig = Figure(figsize=(7.5, 5))
    ax = fig.add_subplot()
    xs = points[f"{x}_mean"].to_numpy(dtype=np.float64)
    ys = points[f"{y}_mean"].to_numpy(dtype=np.float64)
    front = pareto_mask(xs, ys)
    has_ci = f"{x}_low" in points.columns and f"{y}_low" in points.columns
    for policy, g in points.groupby("policy", sort=True):
        gx = g[f"{x}_mean"].to_numpy(dtype=np.float64)
        gy = g[f"{y}_mean"].to_numpy(dtype=np.float64)
        dots = ax.scatter(gx, gy, s=28, label=str(policy), zorder=3)
        if has_ci:
            xerr = np.nan_to_num(np.abs(np.vstack([
                gx - g[f"{x}_low"].to_numpy(np.float64),
                g[f"{x}_high"].to_numpy(np.float64) - gx])))
            yerr = np.nan_to_num(np.abs(np.vstack([
                gy - g[f"{y}_low"].to_numpy(np.float64),
                g[f"{y}_high"].to_numpy(np.float64) - gy])))
            ax.errorbar(gx, gy, xerr=xerr, yerr=yerr, fmt="none", elinewidth=0.6,
                        alpha=0.3, color=dots.get_facecolor()[0], zorder=2)
    labels: list[Any] = []
    if front.any():
        order = np.argsort(xs[front])
        fx, fy = xs[front][order], ys[front][order]
        ax.plot(fx, fy, color="black", linewidth=1.2, linestyle="--", marker="o",
                markerfacecolor="none", markersize=10, label="Pareto front", zorder=4)
        if label_columns:
            labels = [ax.annotate(_label(points.iloc[int(i)].to_dict(),
                                         ["policy", *label_columns]),
                                  (xs[i], ys[i]), fontsize=7, xytext=(6, 6),
                                  textcoords="offset points")
                      for i in np.flatnonzero(front)]
    finite_x = xs[np.isfinite(xs)]
    finite_y = ys[np.isfinite(ys)]
    if finite_x.size and finite_y.size:
        pad_x = 0.08 * (np.ptp(finite_x) or abs(finite_x.max()) or 1.0)
        pad_y = 0.15 * (np.ptp(finite_y) or abs(finite_y.max()) or 1.0)
        ax.set_xlim(max(0.0, finite_x.min() - pad_x), finite_x.max() + pad_x)
        ax.set_ylim(max(0.0, finite_y.min() - pad_y), finite_y.max() + pad_y)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.set_title(title or "Interactive tail latency against batch throughput")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _spread_labels(fig, labels)  # after the limits: they move the points on the canvas
    return _save(fig, stem)


def plot_attainment(
    curve: pd.DataFrame,
    stem: Path,
    *,
    metric: str = "overall_slo_attainment",
    target: float | None = None,
    capacities: Mapping[str, float] | None = None,
    x: str = "offered_rate_rps",
    title: str | None = None,
) -> list[Path]:
    """Attainment against load per policy from a per-point summary with columns
    ``policy``, ``{x}_mean`` (or ``x``) and ``{metric}_mean`` (``_low``/``_high`` optional)."""
    from matplotlib.figure import Figure

    xcol = f"{x}_mean" if f"{x}_mean" in curve.columns else x
    for c in (xcol, f"{metric}_mean", "policy"):
        if c not in curve.columns:
            raise ValueError(f"cannot plot attainment against load: no column {c!r}")
    fig = Figure(figsize=(7.5, 5))
    ax = fig.add_subplot()
    for policy, g in curve.groupby("policy", sort=True):
        g = g.sort_values(xcol)
        gx = g[xcol].to_numpy(dtype=np.float64)
        gy = g[f"{metric}_mean"].to_numpy(dtype=np.float64)
        line = ax.plot(gx, gy, marker="o", markersize=3, label=str(policy))[0]
        if f"{metric}_low" in g.columns:
            lo = g[f"{metric}_low"].to_numpy(dtype=np.float64)
            hi = g[f"{metric}_high"].to_numpy(dtype=np.float64)
            ok = np.isfinite(lo) & np.isfinite(hi)
            if ok.any():
                ax.fill_between(gx[ok], lo[ok], hi[ok], alpha=0.15, color=line.get_color())
        if capacities and str(policy) in capacities:
            cap = capacities[str(policy)]
            if math.isfinite(cap) and cap > 0:
                ax.axvline(cap, color=line.get_color(), linestyle=":", linewidth=1)
    if target is not None:
        ax.axhline(target, color="black", linestyle="--", linewidth=1, label=f"target {target:g}")
    ax.set_xlabel("offered load (requests/s)" if x == "offered_rate_rps" else x)
    ax.set_ylabel(metric)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or "SLO attainment against load")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)
