"""docs/fidelity.md, "Predictions with intervals": its stated-ranges and interconnect-ranges
tables are the code's, and its coverage table is what benchmarks/bench_intervals.py computes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kvbudget.perf.step_uncertainty import INTERCONNECT_RANGES, STATED_RANGES

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_intervals.py"
DOC = (REPO / "docs" / "fidelity.md").read_text()
RUN_OF_ROW = {  # the coverage table's first column -> the measured run's folder
    "RTX 4090, Llama-3.1-8B (recorded run)": "RTX4090_Llama-3.1-8B",
    "RTX PRO 6000, Llama-3.1-8B (recorded run)": "RTXPRO6000_Llama-3.1-8B",
    "2x RTX PRO 6000, Qwen3-32B TP2 (recorded run)": "RTXPRO6000_Qwen3-32B",
}
STEP_ROW = "published step figures (`bench_fidelity.py --only published`)"


def table(marker: str) -> list[list[str]]:
    lines = DOC[DOC.index(marker):].splitlines()[3:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_intervals", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_stated_ranges_table_is_the_codes() -> None:
    rows = table("<!-- stated ranges")
    assert [r[0].strip("`") for r in rows] == list(STATED_RANGES)
    for name, shown, _source in rows:
        lo, hi, _ = STATED_RANGES[name.strip("`")]
        unit = 1e-6 if shown.endswith("us") else 1.0
        a, b = (float(x) * unit for x in shown.removesuffix(" us").split(" - "))
        assert (a, b) == pytest.approx((lo, hi), rel=1e-9), name


def test_the_interconnect_ranges_table_is_the_codes() -> None:
    rows = table("<!-- interconnect ranges")
    assert [(r[0], r[1].strip("`")) for r in rows] == [
        (link, name) for link, ranges in INTERCONNECT_RANGES.items() for name in ranges]
    for link, name, shown, source in rows:
        lo, hi, cited = INTERCONNECT_RANGES[link][name.strip("`")]
        assert tuple(float(x) for x in shown.split(" - ")) == pytest.approx((lo, hi)), name
        assert source == cited, name


def _up(checks: list[tuple[Any, ...]]) -> str:
    """How far up their intervals the measured values lie, ``"lo-hi %"`` (0: the low end)."""
    at = [100 * (meas - low) / (high - low) for *_, low, high, meas in checks]
    return f"{min(at):.0f}-{max(at):.0f} %"


def test_the_coverage_table_is_what_the_benchmark_computes(bench: ModuleType) -> None:
    runs = {r.folder.name: r for r in bench.find_runs()}
    if not runs:
        pytest.skip("no measured runs under ../shared/measured")
    curves: dict[str, list[tuple[Any, ...]]] = {}
    for check in bench.curve_checks(0.9, 40):  # part (c), by setup
        curves.setdefault(f"published curve: `{check[0].split(' @ ')[0]}`", []).append(check)
    shown_curves, checked = [], {}
    for row, _figures, shown in table("<!-- bench_intervals coverage"):
        if row in curves:
            checks = curves[row]
            shown_curves.append(row)
        else:
            checks = (bench.step_checks(0.9, 40) if row == STEP_ROW
                      else bench.run_checks(runs[RUN_OF_ROW[row]], 0.9, 40))
        checked[row] = checks
        inside = sum(low <= meas <= high for *_, low, high, meas in checks)
        assert shown == f"{inside} of {len(checks)}", row
    assert shown_curves == list(curves)  # every published curve, in the benchmark's order
    # the prose's figures of where the measured values lie
    text = " ".join(DOC[DOC.index("<!-- bench_intervals coverage"):].split())
    recorded = [checked[r] for r in RUN_OF_ROW]
    should = (f"The Qwen3-32B run's measured values lie {_up(recorded[2])} of the way up their "
              f"intervals", f"the Llama runs' lie {_up(recorded[0])} (RTX 4090) and "
              f"{_up(recorded[1])} (RTX PRO 6000) of the way up",
              f"lies {_up(curves['published curve: `PR20759 Llama-3.1-70B 4xB200 TPOT`'])} of "
              "the way up")
    for phrase in should:
        assert phrase in text, phrase
    part_c = [c for row in curves.values() for c in row]
    inside_c = sum(low <= meas <= high for *_, low, high, meas in part_c)
    assert f"{inside_c} of {len(part_c)} points" in text
