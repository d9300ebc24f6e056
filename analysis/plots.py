"""Plots of run results (matplotlib, Agg): each function takes analysis tables and returns a
:class:`matplotlib.figure.Figure`.

Figures are made without pyplot (no global figure registry, nothing to close) on the Agg canvas;
in Jupyter they display like any figure, and :func:`png_bytes` / :func:`save_png` render them.
Conventions in every plot: a *policy* (or run) has one colour (a colour-blind-safe palette, in
the order the runs are given), a *tier* one line style (interactive solid, batch dashed) or, on
bars, one hatch; axes name their quantity and unit.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

from kvbudget.analysis import tables as analysis

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

# Okabe & Ito's colour-blind-safe palette (without yellow, hard to see on white).
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#999999",
)
LINE_STYLES: tuple[Any, ...] = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
HATCHES: tuple[str, ...] = ("", "///", "...", "xx", "\\\\")
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v")
KNOWN_TIERS: tuple[str, ...] = ("interactive", "batch")
AXIS_LABELS: dict[str, str] = {
    "ttft_s": "TTFT (s)",
    "tpot_s": "TPOT (s per output token)",
    "e2e_s": "E2E latency (s)",
    "time_s": "time since start (s)",
}
SIM_COLOR = "#0072B2"
MEAS_COLOR = "#000000"


# --- styles -------------------------------------------------------------------------------------


class Styles:
    """Colour per run/policy label, line style (and hatch, marker) per tier."""

    def __init__(self, runs: Sequence[str], tiers: Sequence[str]) -> None:
        self.runs = list(dict.fromkeys(runs))
        known = [t for t in KNOWN_TIERS if t in tiers]
        self.tiers = known + [t for t in dict.fromkeys(tiers) if t not in known]

    def color(self, run: str) -> str:
        i = self.runs.index(run) if run in self.runs else len(self.runs)
        return PALETTE[i % len(PALETTE)]

    def _tier_index(self, tier: str) -> int:
        return self.tiers.index(tier) if tier in self.tiers else len(self.tiers)

    def linestyle(self, tier: str) -> Any:
        return LINE_STYLES[self._tier_index(tier) % len(LINE_STYLES)]

    def hatch(self, tier: str) -> str:
        return HATCHES[self._tier_index(tier) % len(HATCHES)]

    def marker(self, tier: str) -> str:
        return MARKERS[self._tier_index(tier) % len(MARKERS)]

    def legend_handles(self, *, runs: bool = True, tiers: bool = True) -> list[Any]:
        handles: list[Any] = []
        if runs and len(self.runs) > 0 and self.runs != [""]:
            handles += [Line2D([], [], color=self.color(r), lw=2.5, label=r) for r in self.runs]
        if tiers:
            handles += [
                Line2D([], [], color="#444444", lw=1.8, ls=self.linestyle(t), label=f"tier: {t}")
                for t in self.tiers
            ]
        return handles


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _run_column(df: pd.DataFrame, run_column: str | None) -> str | None:
    if run_column is None or run_column not in df.columns:
        return None
    return run_column


def _labels(df: pd.DataFrame, column: str | None) -> list[str]:
    if column is None:
        return [""]
    col = df[column]
    cats = getattr(col, "cat", None)
    if cats is not None:
        return [str(c) for c in col.cat.categories if (col == c).any()]
    return [str(x) for x in dict.fromkeys(col.tolist())]


def _tiers(df: pd.DataFrame) -> list[str]:
    return [str(x) for x in dict.fromkeys(df["tier"].astype(str).tolist())] if "tier" in df else []


def _seconds(x: float, _pos: int | None = None) -> str:
    if x <= 0 or not math.isfinite(x):
        return "0"
    if x >= 1:
        return f"{x:g}"
    return f"{x:.3g}"


def _log_seconds(axis: Any) -> None:
    """Log-scale ticks written as plain seconds (no 6x10^1 labels): 1-2-5 steps over a narrow
    range, decades over a wide one (call it once the data are plotted)."""
    lo, hi = (float(v) for v in axis.get_view_interval())
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 2.2 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(_seconds))
    axis.set_minor_formatter(NullFormatter())


def _empty(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#555555")
    # hide this panel's ticks without touching a locator another (shared) panel uses
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)


def _legend(fig: Figure, handles: list[Any], ncol: int | None = None) -> None:
    if handles:
        fig.legend(
            handles=handles,
            loc="outside lower center",
            ncol=ncol or min(len(handles), 6),
            frameon=False,
        )


# --- latency distributions ----------------------------------------------------------------------


def latency_cdfs(
    records: pd.DataFrame,
    *,
    metrics: Sequence[str] = analysis.METRICS,
    run_column: str | None = "policy",
    complementary: bool = False,
    title: str | None = None,
) -> Figure:
    """Distributions of TTFT, TPOT and E2E latency of completed requests, one panel per metric,
    one line per (policy, tier), log-scaled latency axis.

    ``complementary=True`` plots ``P(X >= x)`` on a log axis (the tail in detail); otherwise the
    CDF with p50/p90/p99 guide lines.
    """
    run_col = _run_column(records, run_column)
    styles = Styles(_labels(records, run_col), _tiers(records))
    fig = _figure(4.6 * len(metrics), 4.2)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    by = [c for c in (run_col, "tier") if c is not None]
    for ax, metric in zip(axes, metrics, strict=True):
        found = analysis.cdf_by(records, metric, by=by)
        data = found[found["value"] > 0]
        if data.empty:
            label = analysis.METRIC_LABELS.get(metric, metric)
            _empty(ax, f"no completed requests with a {label}" if found.empty else
                   f"every {label} is 0 s: nothing to show on a log axis")
            continue
        for key, grp in data.groupby(by, sort=False, observed=True):
            key_t = key if isinstance(key, tuple) else (key,)
            run = str(key_t[0]) if run_col is not None else ""
            tier = str(key_t[-1])
            color = styles.color(run) if run_col is not None else PALETTE[styles.tiers.index(tier)]
            y = grp["ccdf" if complementary else "cdf"].to_numpy()
            ax.step(
                grp["value"].to_numpy(),
                y,
                where="post",
                color=color,
                ls=styles.linestyle(tier),
                lw=1.6,
            )
        ax.set_xscale("log")
        _log_seconds(ax.xaxis)
        ax.set_xlabel(AXIS_LABELS.get(metric, metric))
        if complementary:
            ax.set_yscale("log")
            ax.set_ylabel("fraction of completed requests ≥ x")
            for q in (0.1, 0.01):
                ax.axhline(q, color="#bbbbbb", lw=0.8, zorder=0)
        else:
            ax.set_ylabel("fraction of completed requests ≤ x")
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, 1.02)
            for q in (0.5, 0.9, 0.99):
                ax.axhline(q, color="#bbbbbb", lw=0.8, zorder=0)
                ax.text(0.01, q, f"p{round(q * 100)}", transform=ax.get_yaxis_transform(),
                        ha="left", va="bottom", fontsize=7, color="#777777")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(analysis.METRIC_LABELS.get(metric, metric))
    kind = "tail (CCDF)" if complementary else "CDF"
    fig.suptitle(title or f"Latency {kind} of completed requests")
    _legend(fig, styles.legend_handles(runs=run_col is not None))
    return fig


def percentile_intervals(
    table: pd.DataFrame,
    *,
    quantile: float = 0.99,
    metrics: Sequence[str] = analysis.METRICS,
    run_column: str | None = "policy",
    title: str | None = None,
) -> Figure:
    """One quantile per (policy, tier) with its bootstrap confidence interval, one panel per
    metric (from :func:`analysis.percentile_table` grouped by policy and tier)."""
    run_col = _run_column(table, run_column)
    sub = table[np.isclose(table["quantile"].to_numpy(dtype=np.float64), quantile)]
    styles = Styles(_labels(sub, run_col), _tiers(sub))
    fig = _figure(4.2 * len(metrics), 3.6)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    name = analysis.quantile_name(quantile)
    runs = styles.runs
    for ax, metric in zip(axes, metrics, strict=True):
        part = sub[sub["metric"] == metric]
        values = part["value"].to_numpy(dtype=np.float64)
        if part.empty or not np.isfinite(values).any():
            _empty(ax, "no data")
            continue
        if not (values > 0).any():  # a log axis shows none of them (matplotlib warned so)
            _empty(ax, f"{name} 0 s in every group (tokens that came together)")
            continue
        width = 0.8 / max(len(styles.tiers), 1)
        for _, row in part.iterrows():
            run = str(row[run_col]) if run_col is not None else ""
            tier = str(row["tier"])
            x = runs.index(run) + (styles.tiers.index(tier) - (len(styles.tiers) - 1) / 2) * width
            v, lo, hi = float(row["value"]), float(row["ci_low"]), float(row["ci_high"])
            yerr = None
            if math.isfinite(lo) and math.isfinite(hi):
                yerr = [[max(v - lo, 0.0)], [max(hi - v, 0.0)]]
            color = styles.color(run) if run_col is not None else PALETTE[0]
            ax.errorbar([x], [v], yerr=yerr, fmt=styles.marker(tier), color=color, ms=7,
                        capsize=4, lw=1.5)
        ax.set_xticks(range(len(runs)), runs if run_col is not None else [""], rotation=15)
        ax.set_yscale("log")
        _log_seconds(ax.yaxis)
        ax.set_ylabel(f"{name} {AXIS_LABELS.get(metric, metric)}")
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.set_title(f"{name} {analysis.METRIC_LABELS.get(metric, metric)}")
    fig.suptitle(title or f"{name} latency per policy and tier, with 95% bootstrap intervals")
    handles = [
        Line2D([], [], color="#444444", marker=styles.marker(t), ls="", label=f"tier: {t}")
        for t in styles.tiers
    ]
    _legend(fig, handles)
    return fig


# --- the timeline -------------------------------------------------------------------------------


def kv_timeline(
    timelines: Mapping[str, pd.DataFrame],
    *,
    notes: Mapping[str, str] | None = None,
    title: str | None = None,
) -> Figure:
    """KV cache used and reserved over time, one panel per run, as a share of the KV capacity,
    with the engine's preemptions marked along the top. ``notes`` adds text to a run's panel
    title (for example its gateway revocations, which the timeline does not count)."""
    if not timelines:
        raise ValueError("no timelines to plot")
    styles = Styles(list(timelines), [])
    n = len(timelines)
    fig = _figure(10, 2.2 * n + 1.2)
    axes = fig.subplots(n, 1, squeeze=False, sharex=True)[:, 0]
    for ax, (label, tl) in zip(axes, timelines.items(), strict=True):
        kv = analysis.kv_timeline(tl)
        if kv.empty:
            _empty(ax, f"{label}: empty timeline")
            continue
        t = kv["time_s"].to_numpy(dtype=np.float64)
        used = kv["used_fraction"].to_numpy(dtype=np.float64)
        reserved = kv["reserved_fraction"].to_numpy(dtype=np.float64)
        color = styles.color(label)
        ax.fill_between(t, used, step="post", color=color, alpha=0.25, lw=0)
        ax.step(t, used, where="post", color=color, lw=1.4)
        if np.nanmax(reserved) > 0:
            ax.step(t, reserved, where="post", color="#333333", ls="--", lw=1.3)
        ax.axhline(1.0, color="#999999", lw=0.8)
        ev = kv[kv["new_preemptions"] > 0]
        top = max(1.05, float(np.nanmax(np.append(reserved, used))) * 1.05)
        total = int(kv["num_preemptions"].iloc[-1])
        if not ev.empty:
            ax.scatter(ev["time_s"], np.full(len(ev), top), marker="v", s=22, color="#D55E00",
                       zorder=3, clip_on=False)
        ax.set_ylim(0, top * 1.04)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        cap = int(kv["kv_capacity_tokens"].iloc[0])
        ax.set_ylabel("KV cache\n(% of capacity)")
        text = f"{label}: capacity {cap:,} tokens, {total:,} engine preemptions"
        if notes and notes.get(label):
            text += f", {notes[label]}"
        ax.set_title(text, loc="left", fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel(AXIS_LABELS["time_s"])
    fig.suptitle(title or "KV cache used and reserved over time")
    _legend(
        fig,
        [
            Patch(facecolor="#bbbbbb", edgecolor="#666666", label="KV used (blocks allocated)"),
            Line2D([], [], color="#333333", ls="--", label="KV reserved (gateway leases)"),
            Line2D([], [], color="#999999", lw=0.8, label="capacity"),
            Line2D([], [], color="#D55E00", marker="v", ls="", label="engine preemption"),
        ],
    )
    return fig


def queue_depth(timelines: Mapping[str, pd.DataFrame], *, title: str | None = None) -> Figure:
    """Waiting requests (gateway queues plus the engine's waiting queue) and running requests
    over time, one line per run."""
    if not timelines:
        raise ValueError("no timelines to plot")
    styles = Styles(list(timelines), [])
    fig = _figure(10, 5.2)
    ax_wait, ax_run = fig.subplots(2, 1, sharex=True)
    for label, tl in timelines.items():
        tl = tl.sort_values("time_s")
        t = tl["time_s"].to_numpy(dtype=np.float64)
        ax_wait.step(t, tl["num_waiting"].to_numpy(), where="post", color=styles.color(label),
                     lw=1.4)
        ax_run.step(t, tl["num_running"].to_numpy(), where="post", color=styles.color(label),
                    lw=1.4)
    ax_wait.set_ylabel("waiting requests")
    ax_wait.set_title("Queue depth (gateway + engine waiting queue)", loc="left", fontsize=10)
    ax_run.set_ylabel("running requests")
    ax_run.set_title("Requests running in the engine", loc="left", fontsize=10)
    ax_run.set_xlabel(AXIS_LABELS["time_s"])
    for ax in (ax_wait, ax_run):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    fig.suptitle(title or "Queue depth over time")
    _legend(fig, styles.legend_handles(tiers=False))
    return fig


# --- outcomes -----------------------------------------------------------------------------------


def rejections(
    records: pd.DataFrame, *, run_column: str | None = "policy", title: str | None = None
) -> Figure:
    """Requests that did not complete, by outcome and reason: one bar per (policy, tier)
    within each outcome, colour per policy, hatch per tier."""
    run_col = _run_column(records, run_column)
    by = [c for c in (run_col, "tier") if c is not None]
    counts = analysis.outcome_counts(records, by=by)
    styles = Styles(_labels(records, run_col), _tiers(records))
    outcomes = list(dict.fromkeys(counts["outcome"].tolist()))
    fig = _figure(9, 1.2 + 0.55 * max(len(outcomes), 2) * max(len(styles.runs), 1) ** 0.5)
    ax = fig.add_subplot()
    if counts.empty:
        _empty(ax, "every request completed: no rejections, expiries or drops")
        fig.suptitle(title or "Requests that did not complete")
        return fig
    groups = [(r, t) for r in styles.runs for t in styles.tiers]
    height = 0.8 / len(groups)
    for gi, (run, tier) in enumerate(groups):
        mask = counts["tier"].astype(str) == tier
        if run_col is not None:
            mask &= counts[run_col].astype(str) == run
        sel = counts[mask]
        ys, vals = [], []
        for _, row in sel.iterrows():
            ys.append(outcomes.index(str(row["outcome"])) + (gi - (len(groups) - 1) / 2) * height)
            vals.append(int(row["count"]))
        if not ys:
            continue
        color = styles.color(run) if run_col is not None else PALETTE[0]
        bars = ax.barh(ys, vals, height=height * 0.95, color=color, alpha=0.85,
                       hatch=styles.hatch(tier), edgecolor="white" if not styles.hatch(tier)
                       else "#222222", lw=0.5)
        ax.bar_label(bars, fontsize=7, padding=2)
    ax.set_yticks(range(len(outcomes)), outcomes)
    ax.invert_yaxis()
    ax.set_xlabel("requests")
    ax.grid(True, axis="x", alpha=0.3)
    ax.margins(x=0.12)
    fig.suptitle(title or "Requests that did not complete, by outcome and reason")
    handles: list[Any] = []
    if run_col is not None:
        handles += [Patch(color=styles.color(r), label=r) for r in styles.runs]
    handles += [Patch(facecolor="#dddddd", edgecolor="#222222", hatch=styles.hatch(t),
                      label=f"tier: {t}") for t in styles.tiers]
    _legend(fig, handles)
    return fig


def windowed_quantile(
    windowed: pd.DataFrame,
    *,
    column: str = "p99",
    metric: str = "ttft_s",
    run_column: str | None = "policy",
    title: str | None = None,
) -> Figure:
    """A quantile per time window (from :func:`analysis.windowed_percentiles`), one line per
    (policy, tier), log latency axis."""
    run_col = _run_column(windowed, run_column)
    styles = Styles(_labels(windowed, run_col), _tiers(windowed))
    fig = _figure(10, 4.2)
    ax = fig.add_subplot()
    by = [c for c in (run_col, "tier") if c is not None and c in windowed.columns]
    if windowed.empty:
        _empty(ax, "no completed requests")
    else:
        groups = windowed.groupby(by, sort=False, observed=True) if by else [((), windowed)]
        for key, grp in groups:
            key_t = key if isinstance(key, tuple) else (key,)
            run = str(key_t[0]) if run_col is not None else ""
            tier = str(key_t[-1]) if "tier" in by else ""
            mid = (grp["window_start_s"] + grp["window_end_s"]).to_numpy(dtype=np.float64) / 2
            color = styles.color(run) if run_col is not None else PALETTE[0]
            ax.plot(mid, grp[column].to_numpy(dtype=np.float64), color=color,
                    ls=styles.linestyle(tier), marker=".", ms=4, lw=1.4)
        ax.set_yscale("log")
        _log_seconds(ax.yaxis)
        ax.grid(True, which="both", alpha=0.3)
    ax.set_xlabel("arrival time (s, window midpoint)")
    ax.set_ylabel(f"{column} {AXIS_LABELS.get(metric, metric)}")
    fig.suptitle(title or f"{column} {analysis.METRIC_LABELS.get(metric, metric)} over time")
    _legend(fig, styles.legend_handles(runs=run_col is not None, tiers="tier" in by))
    return fig


def slo_attainment(
    curve: pd.DataFrame,
    *,
    metric: str = "ttft_s",
    run_column: str | None = "policy",
    title: str | None = None,
) -> Figure:
    """Attainment against the latency target (from :func:`analysis.slo_attainment_curve`)."""
    run_col = _run_column(curve, run_column)
    styles = Styles(_labels(curve, run_col), _tiers(curve))
    fig = _figure(7, 4.4)
    ax = fig.add_subplot()
    by = [c for c in (run_col, "tier") if c is not None and c in curve.columns]
    groups = curve.groupby(by, sort=False, observed=True) if by else [((), curve)]
    for key, grp in groups:
        key_t = key if isinstance(key, tuple) else (key,)
        run = str(key_t[0]) if run_col is not None else ""
        tier = str(key_t[-1]) if "tier" in by else ""
        color = styles.color(run) if run_col is not None else PALETTE[0]
        ax.plot(grp["threshold_s"], grp["attainment"], color=color, ls=styles.linestyle(tier),
                lw=1.6)
    ax.set_xscale("log")
    _log_seconds(ax.xaxis)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"{AXIS_LABELS.get(metric, metric)} target")
    ax.set_ylabel("offered requests within target")
    ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title or f"SLO attainment against the {analysis.METRIC_LABELS.get(metric, metric)} target")
    _legend(fig, styles.legend_handles(runs=run_col is not None, tiers="tier" in by), ncol=3)
    return fig


def tail_attribution(
    attribution: pd.DataFrame,
    *,
    metric: str = "ttft_s",
    run_column: str | None = "policy",
    title: str | None = None,
) -> Figure:
    """Mean latency parts of the body and the tail (from :func:`analysis.tail_attribution`):
    one stacked horizontal bar per (policy, tier, segment)."""
    run_col = _run_column(attribution, run_column)
    parts = [c for c in analysis.COMPONENTS if c != "decode_s" or metric != "ttft_s"]
    parts = [c for c in parts if np.isfinite(attribution[c].to_numpy(dtype=np.float64)).any()]
    colors = {"gateway_wait_s": "#E69F00", "engine_queue_s": "#56B4E9", "prefill_s": "#009E73",
              "decode_s": "#CC79A7"}
    labels = []
    for _, row in attribution.iterrows():
        who = f"{row[run_col]} · " if run_col is not None else ""
        labels.append(f"{who}{row['tier']} · {row['segment']} (n={int(row['n'])})")
    fig = _figure(10, 1.4 + 0.32 * max(len(labels), 2))
    ax = fig.add_subplot()
    if attribution.empty:
        _empty(ax, "no completed requests")
        return fig
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for c in parts:
        v = np.nan_to_num(attribution[c].to_numpy(dtype=np.float64))
        ax.barh(y, v, left=left, color=colors[c], label=analysis.METRIC_LABELS[c], height=0.7)
        left += v
    pre = attribution["preempted_fraction"].to_numpy(dtype=np.float64)
    for yi, (x, p) in enumerate(zip(left, pre, strict=True)):
        if p > 0:
            ax.text(x, yi, f"  {p:.0%} preempted", va="center", fontsize=7, color="#D55E00")
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(f"mean {AXIS_LABELS.get(metric, metric)}, split into parts")
    ax.grid(True, axis="x", alpha=0.3)
    ax.margins(x=0.15)
    thr_name = "tail = at or above the group's p99"
    fig.suptitle(title or f"Where the {analysis.METRIC_LABELS.get(metric, metric)} tail comes "
                 f"from ({thr_name})")
    _legend(fig, [Patch(color=colors[c], label=analysis.METRIC_LABELS[c]) for c in parts])
    return fig


# --- simulated against measured -----------------------------------------------------------------


def sim_vs_measured(errors: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Simulated against measured latency quantiles (from :func:`analysis.quantile_errors`):
    one panel per metric, measured in black, simulated in blue, line style per tier, the
    relative error written beside each simulated point."""
    metrics = list(dict.fromkeys(errors["metric"].tolist())) or list(analysis.METRICS)
    styles = Styles([], _tiers(errors))
    fig = _figure(4.6 * len(metrics), 4.2)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        part = errors[errors["metric"] == metric]
        names = list(dict.fromkeys(part["name"].tolist()))
        if part.empty:
            _empty(ax, "no data")
            continue
        tiers = styles.tiers or [""]
        for tier in tiers:
            sel = part[part["tier"].astype(str) == tier] if "tier" in part else part
            x = np.array([names.index(n) for n in sel["name"]], dtype=np.float64)
            ls = styles.linestyle(tier)
            ax.plot(x, sel["measured"], color=MEAS_COLOR, ls=ls, marker="o", lw=1.4)
            ax.plot(x, sel["simulated"], color=SIM_COLOR, ls=ls, marker="x", ms=8, lw=1.4)
            for xi, s, r in zip(x, sel["simulated"], sel["relative_error"], strict=True):
                if math.isfinite(r) and math.isfinite(s):
                    ax.annotate(f"{r:+.0%}", (xi, s), textcoords="offset points",
                                xytext=(6, 4), fontsize=7, color=SIM_COLOR)
        ax.set_xticks(range(len(names)), names)
        ax.set_xlabel("quantile")
        vals = part[["measured", "simulated"]].to_numpy(dtype=np.float64)
        if np.all(vals[np.isfinite(vals)] > 0):
            ax.set_yscale("log")
            _log_seconds(ax.yaxis)
        ax.set_ylabel(AXIS_LABELS.get(metric, metric))
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(analysis.METRIC_LABELS.get(metric, metric))
        ax.margins(x=0.15)
    fig.suptitle(title or "Simulated against measured latency quantiles (label: relative error)")
    handles = [
        Line2D([], [], color=MEAS_COLOR, marker="o", lw=1.4, label="measured"),
        Line2D([], [], color=SIM_COLOR, marker="x", ms=8, lw=1.4, label="simulated"),
        *styles.legend_handles(runs=False),
    ]
    _legend(fig, handles)
    return fig


def paired_scatter(
    joined: pd.DataFrame,
    *,
    metrics: Sequence[str] = ("ttft_s", "e2e_s"),
    title: str | None = None,
) -> Figure:
    """Per request, simulated against measured (from :func:`analysis.join_measured`, requests
    completed in both), log-log, with the diagonal and a factor-of-two band; one colour and
    marker per tier."""
    both = joined[(joined["status_sim"] == "completed") & (joined["status_meas"] == "completed")]
    styles = Styles([], _tiers(both))
    fig = _figure(4.8 * len(metrics), 4.6)
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, metric in zip(axes, metrics, strict=True):
        meas = both[f"{metric}_meas"].to_numpy(dtype=np.float64)
        sim = both[f"{metric}_sim"].to_numpy(dtype=np.float64)
        ok = np.isfinite(meas) & np.isfinite(sim) & (meas > 0) & (sim > 0)
        if not ok.any():
            _empty(ax, "no paired requests")
            continue
        tiers = both["tier"].astype(str).to_numpy()
        for i, tier in enumerate(styles.tiers):
            sel = ok & (tiers == tier)
            ax.scatter(meas[sel], sim[sel], s=9, alpha=0.5, color=PALETTE[i % len(PALETTE)],
                       marker=styles.marker(tier), lw=0, label=f"tier: {tier}")
        lo = float(min(meas[ok].min(), sim[ok].min())) / 1.5
        hi = float(max(meas[ok].max(), sim[ok].max())) * 1.5
        line = np.array([lo, hi])
        ax.plot(line, line, color="#333333", lw=1.0, label="simulated = measured")
        ax.fill_between(line, line / 2, line * 2, color="#999999", alpha=0.15, lw=0,
                        label="within a factor of 2")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        _log_seconds(ax.xaxis)
        _log_seconds(ax.yaxis)
        label = AXIS_LABELS.get(metric, metric)
        ax.set_xlabel(f"measured {label}")
        ax.set_ylabel(f"simulated {label}")
        ax.grid(True, which="major", alpha=0.3)
        ax.set_title(analysis.METRIC_LABELS.get(metric, metric))
    fig.suptitle(title or "Simulated against measured, request by request")
    handles = axes[0].get_legend_handles_labels()[0] if len(axes) else []
    _legend(fig, list(handles))
    return fig


# --- sweeps -------------------------------------------------------------------------------------


def pareto(
    table: pd.DataFrame,
    *,
    x: str,
    y: str,
    front: np.ndarray[Any, np.dtype[np.bool_]] | None = None,
    label: str | None = None,
    color_by: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    log_x: bool = False,
    title: str | None = None,
) -> Figure:
    """Configurations as points of two objectives with the Pareto front joined by a line;
    ``label`` names a column written beside each point, ``color_by`` one that picks colours."""
    fig = _figure(7.5, 5.0)
    ax = fig.add_subplot()
    xs = table[x].to_numpy(dtype=np.float64)
    ys = table[y].to_numpy(dtype=np.float64)
    groups = _labels(table, color_by) if color_by is not None else [""]
    styles = Styles(groups, [])
    for g in groups:
        sel = (table[color_by].astype(str) == g).to_numpy() if color_by is not None else (
            np.ones(len(table), dtype=bool))
        ax.scatter(xs[sel], ys[sel], color=styles.color(g), s=36, zorder=3,
                   label=g if color_by is not None else None)
    if front is not None and front.any():
        order = np.argsort(xs[front])
        ax.plot(xs[front][order], ys[front][order], color="#333333", lw=1.2, ls="--", zorder=2,
                label="Pareto front")
        ax.scatter(xs[front], ys[front], facecolors="none", edgecolors="#333333", s=110, zorder=4)
    if label is not None:
        for xi, yi, text in zip(xs, ys, table[label].astype(str), strict=True):
            if math.isfinite(xi) and math.isfinite(yi):
                ax.annotate(text, (xi, yi), textcoords="offset points", xytext=(5, 5), fontsize=7)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y)
    ax.grid(True, alpha=0.3)
    if color_by is not None or front is not None:
        ax.legend(fontsize=8)
    fig.suptitle(title or "Trade-off across configurations")
    return fig


# --- output -------------------------------------------------------------------------------------


def png_bytes(fig: Figure, *, dpi: int = 110) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()


def save_png(fig: Figure, path: Path, *, dpi: int = 110) -> Path:
    """Write the figure as a PNG file (directories created) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig, dpi=dpi))
    return path
