"""docs/fidelity.md's "The recorded runs" table recomputed: every figure it quotes is the
relative error benchmarks/bench_fidelity.py gives for that run, at the precision shown."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_fidelity.py"
DOC = REPO / "docs" / "fidelity.md"
# the docs' run label -> the recorded run's folder under ../shared/measured/*/
RUNS = {
    "RTX 4090, Llama-3.1-8B": "RTX4090_Llama-3.1-8B",
    "RTX PRO 6000, Llama-3.1-8B": "RTXPRO6000_Llama-3.1-8B",
    "2x RTX PRO 6000, Qwen3-32B TP2": "RTXPRO6000_Qwen3-32B",
}

pytestmark = pytest.mark.skipif(not (REPO.parent / "shared" / "measured").is_dir(),
                                reason="needs ../shared/measured")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fidelity", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def doc_table() -> dict[str, list[str]]:
    """The section's table: run label -> its four cells (TTFT, TPOT, E2E, tok/s)."""
    text = DOC.read_text()
    section = text.split("## The recorded runs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in RUNS:
            rows[cells[0]] = cells[1:]
    return rows


def shown(cell: str) -> list[tuple[float, float]]:
    """The figures of a cell (``-0.8 / -3.4 / +1.3 %``) with half a unit of their last digit."""
    out = []
    for number in re.findall(r"[+-]?\d+(?:\.\d+)?", cell):
        decimals = len(number.split(".")[1]) if "." in number else 0
        out.append((float(number), 0.5 * 10.0 ** -decimals + 1e-9))
    return out


def test_the_docs_recorded_runs_table_is_what_the_benchmark_gives(bench: ModuleType) -> None:
    table = doc_table()
    assert set(table) == set(RUNS), table
    runs = {r.name.split("/", 1)[1]: r for r in bench.find_runs()}
    for label, folder in RUNS.items():
        rows = bench.uncalibrated_rows([runs[folder]])
        errors = {r.metric: {s: 100 * (r.simulated[s] / r.measured[s] - 1) for s in r.simulated}
                  for r in rows}
        expected = [[errors[m][s] for s in ("mean", "p50", "p99")]
                    for m in bench.METRICS] + [[errors["output tok/s"]["mean"]]]
        for cell, values in zip(table[label], expected, strict=True):
            figures = shown(cell)
            assert len(figures) == len(values), (label, cell)
            for (figure, half), value in zip(figures, values, strict=True):
                assert abs(figure - value) <= half, (label, cell, [round(v, 2) for v in values])
