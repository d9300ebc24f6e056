"""docs/fidelity.md's tables of benchmarks/bench_fidelity.py recomputed at the precision shown:
"The recorded runs" (every figure is the relative error the benchmark gives for that run), the
step model's "Checks against published figures" and the KV capacity check."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.doc_figures import (
    numbers,
    rewrite,
    row_line,
    section,
    stale,
    table_rows,
    value_of,
)

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


# "Checks against published figures": each row of the table -> published_rows' (run, metric)
STEP_ROWS = (
    ("Llama-3.1-8B H100 bf16 KV, batch 1", "decode step ms at context 0"),
    ("Llama-3.1-8B H100 bf16 KV, batch 1", "ns per context token"),
    ("Llama-3.1-8B B200 bf16 KV, batch 1", "decode step ms at context 0"),
    ("Llama-3.1-8B B200 bf16 KV, batch 1", "ns per context token"),
    ("Llama-3.1-8B H100 bf16 KV, batch 8 x 21k", "decode step ms"),
    ("gpt-oss-20b H100 bf16 KV, batch 1", "decode step ms at context 0"),
    ("gpt-oss-20b H100 bf16 KV, batch 1", "ns per context token"),
    ("gpt-oss-20b B200 bf16 KV, batch 1", "decode step ms at context 0"),
    ("gpt-oss-20b B200 bf16 KV, batch 1", "ns per context token"),
)


def test_the_docs_published_step_figures_are_what_the_step_model_gives(bench: ModuleType) -> None:
    """The "Checks against published figures" table (``bench_fidelity.py --only published``):
    each published figure, and kvbudget's with its error where one is shown (the figures
    before any ``:``), at the precision shown."""
    doc = section(DOC, "## Step-time model")
    start = doc.index("Checks against published figures")
    table = table_rows(doc[start:], "| figure | published | kvbudget |")
    assert len(table) == len(STEP_ROWS), [r[0] for r in table]
    rows = {(r.run, r.metric): r for r in bench.published_rows([])}
    problems = []
    for cells, key in zip(table, STEP_ROWS, strict=True):
        sim, pub = rows[key].simulated["mean"], rows[key].measured["mean"]
        assert [value_of(n) for n in numbers(cells[1])] == [pub], (cells, pub)
        shown_part = cells[2].split(":")[0]
        values = [sim, 100.0 * (sim / pub - 1.0)][:len(numbers(shown_part))]
        if stale(shown_part, values):
            new = rewrite(shown_part, values) + cells[2][len(shown_part):]
            problems.append(f"was {row_line(cells)}\nnow {row_line([*cells[:2], new])}")
    assert not problems, ("docs/fidelity.md, 'Checks against published figures' (`python "
                          "benchmarks/bench_fidelity.py --only published`): stale rows\n"
                          + "\n".join(problems))


def test_the_docs_kv_capacity_check_is_what_kvbudget_computes(bench: ModuleType) -> None:
    """"KV capacity", its "Checks" table: vLLM's reported blocks (read from the recording),
    kvbudget's and the error (``bench_fidelity.py --only capacity``)."""
    table = table_rows(section(DOC, "## KV capacity"), "| pair | vLLM reported |")
    rows = bench.capacity_rows(bench.find_runs())
    assert len(table) == len(rows) == 1, (table, rows)
    cells, row = table[0], rows[0]
    assert "RTX 4090, Llama-3.1-8B" in cells[0] and row.run.endswith("RTX4090_Llama-3.1-8B")
    sim, reported = row.simulated["mean"], row.measured["mean"]
    values = [reported, sim, 100.0 * (sim / reported - 1.0)]
    if any(stale(c, [v]) for c, v in zip(cells[1:], values, strict=True)):
        now = [rewrite(c, [v]) for c, v in zip(cells[1:], values, strict=True)]
        raise AssertionError(f"docs/fidelity.md, KV capacity check: was {row_line(cells)}\n"
                             f"now {row_line([cells[0], *now])}")
