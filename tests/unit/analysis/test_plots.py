"""Plots (kvbudget.analysis.plots): every figure has labelled axes with units, the right scales, and
tells policies apart by colour and tiers by line style; figures render to PNG."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

from kvbudget.analysis import plots as P
from kvbudget.analysis import tables as A
from tests.unit.analysis.test_analysis import done, random_records, records, timeline

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    a = random_records(300, seed=1)
    b = random_records(300, seed=2)
    for m in A.METRICS:
        b[m] = b[m] * 2
    b.loc[:20, "status"] = "rejected_overloaded"
    b.loc[:20, "reason"] = "queue_full"
    b.loc[21:25, "status"] = "expired"
    b.loc[21:25, "reason"] = "deadline"
    return A.label_runs({"conservative": a, "overcommit": b})


def axes_texts(fig: Figure) -> list[str]:
    return [t for ax in fig.axes for t in (ax.get_xlabel(), ax.get_ylabel())]


def legend_texts(fig: Figure) -> list[str]:
    legends = list(fig.legends)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            legends.append(legend)
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def test_latency_cdfs_colour_per_policy_style_per_tier(runs: pd.DataFrame) -> None:
    fig = P.latency_cdfs(runs)
    assert len(fig.axes) == 3
    assert [ax.get_xlabel() for ax in fig.axes] == ["TTFT (s)", "TPOT (s per output token)",
                                                   "E2E latency (s)"]
    for ax in fig.axes:
        assert ax.get_xscale() == "log"
        assert "fraction of completed requests" in ax.get_ylabel()
        lines = [ln for ln in ax.get_lines() if np.asarray(ln.get_xdata()).size > 2]
        assert len(lines) == 4  # 2 policies x 2 tiers
        styles = {(ln.get_color(), ln.get_linestyle()) for ln in lines}
        assert len(styles) == 4
        assert len({ln.get_color() for ln in lines}) == 2
        assert len({ln.get_linestyle() for ln in lines}) == 2
    assert set(legend_texts(fig)) >= {"conservative", "overcommit", "tier: interactive",
                                      "tier: batch"}
    tail = P.latency_cdfs(runs, complementary=True)
    assert all(ax.get_yscale() == "log" for ax in tail.axes)
    assert "≥" in tail.axes[0].get_ylabel()


def test_latency_cdfs_without_a_policy_column_colour_tiers() -> None:
    fig = P.latency_cdfs(random_records(100), run_column=None, metrics=["ttft_s"])
    lines = [ln for ln in fig.axes[0].get_lines() if np.asarray(ln.get_xdata()).size > 2]
    assert len(lines) == 2 and len({ln.get_linestyle() for ln in lines}) == 2


def test_percentile_intervals_draw_error_bars(runs: pd.DataFrame) -> None:
    table = A.percentile_table(runs, by=("policy", "tier"), rng=np.random.default_rng(0),
                               num_resamples=200)
    fig = P.percentile_intervals(table)
    assert [ax.get_ylabel() for ax in fig.axes] == ["p99 TTFT (s)", "p99 TPOT (s per output token)",
                                                   "p99 E2E latency (s)"]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["conservative", "overcommit"]
    assert len(ax.containers) == 4  # one error bar per (policy, tier)


def test_kv_timeline_marks_preemptions() -> None:
    tl = timeline([(0, 0, 0, 0, 0, 0), (1, 400, 800, 4, 2, 0), (2, 800, 600, 8, 5, 3),
                   (3, 200, 200, 2, 0, 3)])
    fig = P.kv_timeline({"overcommit": tl, "conservative": tl.assign(num_preemptions=0)},
                        notes={"overcommit": "7 gateway revocations"})
    assert len(fig.axes) == 2
    assert fig.axes[-1].get_xlabel() == "time since start (s)"
    assert all("% of capacity" in ax.get_ylabel() for ax in fig.axes)
    assert "3 engine preemptions, 7 gateway revocations" in fig.axes[0].get_title(loc="left")
    assert len(fig.axes[0].collections) >= 2  # used fill + preemption marks
    marks = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    assert len(marks) == 1 and np.asarray(marks[0].get_offsets())[:, 0].tolist() == [2.0]
    assert not [c for c in fig.axes[1].collections if isinstance(c, PathCollection)]
    assert "engine preemption" in legend_texts(fig)
    with pytest.raises(ValueError):
        P.kv_timeline({})


def test_empty_panels_say_so_and_keep_the_shared_axis() -> None:
    tl = timeline([(0, 0, 0, 0, 0, 0), (1, 400, 800, 4, 2, 0), (2, 800, 600, 8, 5, 3)])
    fig = P.kv_timeline({"replay": tl.iloc[:0], "sim": tl})
    assert "replay: empty timeline" in fig.axes[0].texts[0].get_text()
    P.png_bytes(fig, dpi=30)  # draw, so that tick labels exist
    assert [t.get_text() for t in fig.axes[1].get_xticklabels() if t.get_text()]
    expired = records([{"status": "expired", "reason": "deadline"}]).assign(policy="x")
    cdf = P.latency_cdfs(expired, metrics=["ttft_s"])
    assert "no completed requests" in cdf.axes[0].texts[0].get_text()


def test_queue_depth_and_rejections(runs: pd.DataFrame) -> None:
    tl = timeline([(0, 0, 0, 0, 0, 0), (1, 400, 800, 4, 2, 0)])
    fig = P.queue_depth({"a": tl, "b": tl})
    assert [ax.get_ylabel() for ax in fig.axes] == ["waiting requests", "running requests"]
    rej = P.rejections(runs)
    ax = rej.axes[0]
    assert ax.get_xlabel() == "requests"
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["rejected_overloaded: queue_full", "expired: deadline"]
    hatches = {p.get_hatch() for p in ax.patches}
    assert len(hatches) == 2  # tiers told apart by hatch
    none = P.rejections(records([done(0, 0, 1, 2)]).assign(policy="x"))
    assert "every request completed" in none.axes[0].texts[0].get_text()


def test_windowed_attainment_tail_and_sim_vs_measured(runs: pd.DataFrame) -> None:
    w = A.windowed_percentiles(runs, window_s=20, by=("policy", "tier"))
    fig = P.windowed_quantile(w)
    assert fig.axes[0].get_ylabel() == "p99 TTFT (s)" and fig.axes[0].get_yscale() == "log"
    curve = A.slo_attainment_curve(runs, by=("policy", "tier"))
    fig = P.slo_attainment(curve)
    assert fig.axes[0].get_xlabel() == "TTFT (s) target"
    att = A.tail_attribution(runs, by=("policy", "tier"))
    fig = P.tail_attribution(att)
    assert len(fig.axes[0].get_yticklabels()) == len(att)
    assert "mean TTFT (s)" in fig.axes[0].get_xlabel()
    meas = runs[runs["policy"] == "conservative"].drop(columns="policy")
    sim = meas.copy()
    sim["ttft_s"] = sim["ttft_s"] * 1.5
    err = A.quantile_errors(sim, meas)
    fig = P.sim_vs_measured(err)
    assert [ax.get_ylabel() for ax in fig.axes] == ["TTFT (s)", "TPOT (s per output token)",
                                                   "E2E latency (s)"]
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert notes.count("+50%") == 6  # 3 quantiles x 2 tiers
    assert {"measured", "simulated"} <= set(legend_texts(fig))


def test_pareto_plot_draws_the_front() -> None:
    table = pd.DataFrame({"x": [1.0, 2.0, 3.0, 2.5], "y": [1.0, 2.0, 3.0, 3.5],
                          "policy": ["a", "a", "b", "b"], "name": ["p", "q", "r", "s"]})
    front = np.array([True, True, True, False])
    fig = P.pareto(table, x="x", y="y", front=front, label="name", color_by="policy",
                   xlabel="batch output (tokens/s)", ylabel="interactive p99 TTFT (s)")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "batch output (tokens/s)"
    assert [t.get_text() for t in ax.texts] == ["p", "q", "r", "s"]
    assert "Pareto front" in legend_texts(fig)


def test_png_bytes_and_save(tmp_path: Path, runs: pd.DataFrame) -> None:
    fig = P.latency_cdfs(runs, metrics=["ttft_s"])
    data = P.png_bytes(fig, dpi=50)
    w, h = png_size(data)
    assert w > 100 and h > 100
    path = P.save_png(fig, tmp_path / "sub" / "a.png")
    assert png_size(path.read_bytes())[0] > 100


def test_analysis_plots_and_report_never_load_the_engine_or_pyplot() -> None:
    code = (
        "import sys, kvbudget.analysis.tables, kvbudget.analysis.plots, kvbudget.analysis.report\n"
        "bad = [m for m in ('simpy', 'kvbudget.simulator.engine', 'kvbudget.simulator.run', 'matplotlib.pyplot')"
        " if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.strip() == ""


def test_percentile_intervals_of_zeros_say_so(runs: pd.DataFrame) -> None:
    """A run whose every TPOT is 0 (a server that streamed each answer's tokens in one chunk):
    the p99 panel set a log axis over no positive value, and matplotlib warned on stderr ("Data
    has no positive values, and therefore cannot be log-scaled") under ``kvbudget report``. The
    panel now says what its figures are instead."""
    zero = runs.assign(tpot_s=np.where(runs["status"] == "completed", 0.0, np.nan))
    table = A.percentile_table(zero, by=("policy", "tier"), rng=np.random.default_rng(0),
                               num_resamples=50)
    fig = P.percentile_intervals(table)  # warnings are errors in the tests
    assert fig.axes[1].texts[0].get_text() == "p99 0 s in every group (tokens that came together)"
    assert fig.axes[0].get_yscale() == "log" and len(fig.axes[0].containers) == 4
    P.png_bytes(fig, dpi=30)
    cdf = P.latency_cdfs(zero)  # it said "no completed requests with a TPOT"
    assert cdf.axes[1].texts[0].get_text() == "every TPOT is 0 s: nothing to show on a log axis"
