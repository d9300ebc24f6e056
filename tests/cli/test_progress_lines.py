"""Progress where stderr is not a terminal: plain lines, on a clock the test drives."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvbudget.cli.progress as progress
import kvbudget.cli.simulate as simulate_cli
from kvbudget.cli.main import app
from kvbudget.cli.progress import Bar


def clock(times: list[float]) -> Iterator[float]:
    yield from times


def test_a_long_run_writes_a_line_each_period_with_what_is_left() -> None:
    out = io.StringIO()  # not a terminal
    ticks = clock([0.0, 5.0, 31.0, 40.0, 62.0, 100.0])
    bar = Bar("simulate", 1_000, "req", lines_from=500, stream=out,
              clock=lambda: next(ticks), every_s=30.0)
    for _ in range(5):
        bar.update(200)
    bar.close()
    assert out.getvalue().splitlines() == [
        # at 31 s: 400 of 1,000 done, 600 left at 31 s per 400
        "simulate: 400/1,000 reqs (40 %), 31 s, about 46 s left",
        # the next is due 30 s after the last one (61 s): at 62 s
        "simulate: 800/1,000 reqs (80 %), 62 s, about 16 s left",
        "simulate: 1,000/1,000 reqs (100 %), 100 s",
    ]


def test_a_total_below_lines_from_writes_nothing_however_long_it_takes() -> None:
    out = io.StringIO()
    ticks = clock([0.0, *range(100, 10_000, 100)])
    bar = Bar("simulate", 499, "req", lines_from=500, stream=out,
              clock=lambda: next(ticks), every_s=1.0)
    for _ in range(20):
        bar.update(1)
    assert out.getvalue() == ""
    assert "20 reqs in" in bar.rate_line()


def test_without_lines_from_a_bar_not_at_a_terminal_is_silent() -> None:
    out = io.StringIO()
    ticks = clock([0.0, *range(100, 10_000, 100)])
    bar = Bar("sweep", 10, stream=out, clock=lambda: next(ticks), every_s=1.0)
    for _ in range(10):
        bar.update()
    assert out.getvalue() == ""


def test_work_past_an_estimated_total_never_shows_over_100_percent() -> None:
    out = io.StringIO()
    ticks = clock([0.0, 10.0, 20.0])
    bar = Bar("capacity", 2, lines_from=1, stream=out, clock=lambda: next(ticks), every_s=5.0)
    bar.update(3)
    bar.update(1)
    assert out.getvalue().splitlines() == ["capacity: 3/3 runs (100 %), 10 s",
                                           "capacity: 4/4 runs (100 %), 20 s"]


def test_simulate_not_at_a_terminal_writes_progress_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    # every run from one request on, and a line at every update (the clock is real, the
    # period zero): 2 updates (one per 1,000 arrivals) in a run of ~4,200 requests (the rate
    # set here, not the default scenario's)
    monkeypatch.setattr(simulate_cli, "SIMULATE_LINES_FROM", 1)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    res = CliRunner().invoke(app, ["simulate", "--set", "workload.duration_s=300",
                                   "--set", "workload.arrival.rate_rps=14", "--json"])
    assert res.exit_code == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("simulate ")]
    assert len(lines) >= 2, res.stderr
    done = [int(m.group(1).replace(",", "")) for ln in lines
            if (m := re.search(r": ([\d,]+)/[\d,]+ reqs", ln))]
    assert done[:2] == [1_000, 2_000]


def test_a_short_simulate_not_at_a_terminal_writes_no_progress() -> None:
    res = CliRunner().invoke(app, ["simulate", "--set", "workload.duration_s=20", "--json"])
    assert res.exit_code == 0, res.stderr
    assert "reqs (" not in res.stderr


STUDIES = {  # tiny studies, in-process: each line is due at once (period zero)
    "sweep": ["sweep", "--grid", "policy_params.overcommit_ratio=0.5,1.0", "--policies",
              "overcommit", "-r", "1", "--jobs", "1"],
    "tune": ["tune", "--policy", "overcommit", "--param", "policy_params.overcommit_ratio=0.2:1",
             "--grid-points", "2", "--refine-evals", "0", "--validate", "0", "-r", "1",
             "--jobs", "1"],
    "capacity": ["capacity", "--policies", "conservative", "-r", "1", "--rel-tol", "0.5",
                 "--curve-points", "2", "--no-plot", "--jobs", "1"],
    "plan": ["plan", "--gpus", "H100-80GB", "--replicas", "1", "-r", "1", "--slo",
             "overall_slo_attainment>=0.1", "--jobs", "1"],
    "compare": ["compare", "--policies", "conservative,overcommit", "-r", "2", "--jobs", "1"],
}


@pytest.mark.parametrize("command", sorted(STUDIES))
def test_every_study_not_at_a_terminal_writes_progress_lines(
        command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # issue 36: a CI log showed nothing until a study ended (their bars were silent off a tty)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    args = [*STUDIES[command], "--set", "workload.num_requests=12"]
    if command != "compare":
        args += ["--out", str(tmp_path / "out")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    assert re.search(rf"^{command}: \d+/\d+ runs \(\d+ %\), \d+ s", res.stderr, re.M), res.stderr


def test_a_bound_on_the_runs_is_said_as_one() -> None:
    """plan's progress read "plan: 30/216 runs (14 %), 103 s, about 641 s left" and then was
    done at 36 runs: 216 is at most what it runs (a configuration stops at its first replica
    count that meets the SLOs), and so is the time left."""
    out = io.StringIO()
    ticks = clock([0.0, 31.0, 62.0])
    bar = Bar("plan", 216, lines_from=1, stream=out, clock=lambda: next(ticks), every_s=30.0,
              at_most=True)
    bar.update(30)
    bar.set_total(36)
    bar.update(6)
    assert out.getvalue().splitlines() == [
        "plan: 30 of at most 216 runs (14 %), 31 s, at most about 192 s left",
        "plan: 36/36 runs (100 %), 62 s",
    ]
