"""benchmarks/bench_overload.py on the shared measured runs: its figures are those
docs/fidelity.md quotes ("The overloaded regime"), and its measured side reads the recordings as
they are."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_overload.py"
DOC = REPO / "docs" / "fidelity.md"
RUN_OF_ROW = {  # the doc table's first column -> the measured run's folder
    "RTX 4090, Llama-3.1-8B": "RTX4090_Llama-3.1-8B",
    "RTX PRO 6000, Llama-3.1-8B": "RTXPRO6000_Llama-3.1-8B",
    "2x RTX PRO 6000, Qwen3-32B TP2": "RTXPRO6000_Qwen3-32B",
}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_overload", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not module.find_runs():
        pytest.skip("no measured runs under ../shared/measured")
    return module


def doc_table() -> dict[str, list[tuple[float, float]]]:
    text = DOC.read_text()
    start = text.index("<!-- bench_overload table")
    rows = {}
    for line in text[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        pairs = [tuple(float(x) for x in c.split(" / ")) for c in cells[1:]]
        rows[cells[0]] = [(p[0], p[1]) for p in pairs]
    return rows


def test_the_docs_table_is_what_the_benchmark_computes(bench: ModuleType) -> None:
    runs = {r.folder.name: r for r in bench.find_runs()}
    table = doc_table()
    assert set(table) == set(RUN_OF_ROW)
    for row, quoted in table.items():
        run = runs[RUN_OF_ROW[row]]
        figures = bench.headline(run, bench.simulated_queue(run), bench.measured_queue(run))
        assert len(figures) == len(quoted)
        for (name, computed), shown in zip(figures.items(), quoted, strict=True):
            for c, s in zip(computed, shown, strict=True):
                assert s == pytest.approx(c, rel=0.01, abs=0.01), (row, name, computed, shown)


def test_the_measured_queue_is_the_recording(bench: ModuleType) -> None:
    """Every measured request ends by the run's end, and the gauges are vLLM's per-second
    samples: the RTX 4090 run's first rows of timeseries.csv."""
    run = next(r for r in bench.find_runs() if r.folder.name == "RTX4090_Llama-3.1-8B")
    meas = bench.measured_queue(run)
    end = float(np.nanmax(meas.end_s))
    done, waiting, running = bench.at(meas, end)
    k = int(np.flatnonzero(meas.time_s <= end)[-1])  # the last sample at or before the end
    assert (done, waiting, running) == (len(run.arrival_s), 0, meas.num_running[k])
    head = (run.folder / "timeseries.csv").read_text().splitlines()[1:3]
    for line, t in zip(head, meas.time_s[:2], strict=True):
        assert float(line.split(",")[0]) == t
    assert bench.growth(meas, 0.0, 0.5) != bench.growth(meas, 0.0, 0.5)  # NaN: under two samples
    assert np.isfinite(bench.growth(meas, 0.0, float(run.arrival_s.max())))
    assert re.search(r"\d", "\n".join(bench.report(run)))
