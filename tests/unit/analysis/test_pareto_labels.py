"""Pareto plots: file names that keep a load's decimals, labels that do not overlap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import pandas as pd

from kvbudget.analysis import pareto


def _points(n: int) -> pd.DataFrame:
    # a front of n points packed close together (labels placed at the same offset overlap)
    # (one far point squeezes the others into a corner of the axes)
    xs = [1000.0 + 2.0 * i for i in range(n - 1)] + [3000.0]
    ys = [5.0 + 0.01 * i for i in range(n - 1)] + [20.0]
    rows: list[dict[str, Any]] = []
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        rows.append({"policy": "overcommit", "policy_params.overcommit_ratio": 0.1 * i,
                     "batch_sustained_output_tokens_per_s_mean": x,
                     "batch_sustained_output_tokens_per_s_low": x,
                     "batch_sustained_output_tokens_per_s_high": x,
                     # over the arrival window: more, past capacity (not the default axis)
                     "batch_output_tokens_per_s_mean": 2 * x,
                     "interactive_ttft_p99_s_mean": y,
                     "interactive_ttft_p99_s_low": y, "interactive_ttft_p99_s_high": y})
    return pd.DataFrame(rows)


def test_a_load_with_decimals_keeps_its_own_file(tmp_path: Path) -> None:
    a = pareto.plot_pareto(_points(3), tmp_path / "pareto-rate1")
    b = pareto.plot_pareto(_points(3), tmp_path / "pareto-rate1.5")
    assert {p.name for p in a} == {"pareto-rate1.png", "pareto-rate1.svg"}
    assert {p.name for p in b} == {"pareto-rate1.5.png", "pareto-rate1.5.svg"}


def test_point_labels_do_not_overlap(monkeypatch: Any, tmp_path: Path) -> None:
    figures: list[Any] = []
    real_save = pareto._save

    def keep(fig: Any, stem: Path) -> list[Path]:
        figures.append(fig)
        return real_save(fig, stem)

    monkeypatch.setattr(pareto, "_save", keep)
    pareto.plot_pareto(_points(6), tmp_path / "p",
                       label_columns=["policy_params.overcommit_ratio"])
    fig = figures[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    texts = [t for t in fig.axes[0].texts]
    assert len(texts) == 6
    boxes = [t.get_window_extent(renderer) for t in texts]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)


def test_the_default_x_is_the_throughput_over_the_time_the_work_took(
        monkeypatch: Any, tmp_path: Path) -> None:
    """A notebook calling plot_pareto with no x plots what the sweep command plots: batch
    tokens over first arrival to last finish, not over the arrival window, and says so."""
    figures: list[Any] = []
    real_save = pareto._save

    def keep(fig: Any, stem: Path) -> list[Path]:
        figures.append(fig)
        return real_save(fig, stem)

    monkeypatch.setattr(pareto, "_save", keep)
    points = _points(3)
    pareto.plot_pareto(points, tmp_path / "p")
    ax = figures[0].axes[0]
    from matplotlib.collections import PathCollection

    plotted = sorted(float(v) for c in ax.collections if isinstance(c, PathCollection)
                     for v in c.get_offsets()[:, 0])
    assert plotted == sorted(points["batch_sustained_output_tokens_per_s_mean"])
    assert ax.get_xlabel() == ("batch_sustained_output_tokens_per_s (first arrival to last "
                               "finish; mean over replications)")
    pareto.plot_pareto(points, tmp_path / "q", x="batch_output_tokens_per_s")
    assert "over the arrival window" in figures[1].axes[0].get_xlabel()
