"""benchmarks/bench_fidelity_calibrated.py ``--fixed-term``: the first token's fixed term at two
load levels of the real load tools' fixtures is what docs/fidelity.md quotes ("The first
token's fixed term across loads", the "now" columns and the shortest TTFTs)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_fidelity_calibrated.py"
DOC = REPO / "docs" / "fidelity.md"
ROW_OF_RECORDING = {"vllm-bench-0.32.0/append.jsonl": "`vllm bench serve`",
                    "inference-perf-0.7.0/per_request_lifecycle_metrics.json": "inference-perf"}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_fidelity_calibrated", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def doc_rows() -> dict[str, list[tuple[float, float]]]:
    text = DOC.read_text()
    start = text.index("<!-- fixed-term table")
    rows: dict[str, list[tuple[float, float]]] = {}
    for line in text[start:].splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        pairs = [tuple(float(v) for v in re.findall(r"[\d.]+", c)) for c in cells[1:]]
        rows[cells[0]] = [(p[0], p[1]) for p in pairs]
    return rows


@pytest.mark.slow  # four simulator-in-the-loop fits, 300-400 simulations: about 30-50 s
def test_the_documented_fixed_terms_are_what_the_benchmark_fits(bench: ModuleType) -> None:
    doc = doc_rows()
    results: list[dict[str, Any]] = bench.fixed_term_results()
    assert len(results) == len(doc) == 2
    for r in results:
        key = next(k for k in doc if k.startswith(ROW_OF_RECORDING[r["recording"]]))
        shortest, _before, now, moved = doc[key]
        a, b = r["levels"]
        ms = lambda v: round(1e3 * v, 2)  # noqa: E731
        assert (ms(r["shortest_ttft_s"][a]), ms(r["shortest_ttft_s"][b])) == shortest
        assert (ms(r["joint_s"][a]), ms(r["joint_s"][b])) == now
        assert (ms(r["moved_s"][(a, b)]), ms(r["moved_s"][(b, a)])) == moved
        for level, term in r["joint_s"].items():  # bounded by the shortest TTFT, and said
            assert term <= r["shortest_ttft_s"][level] + 1e-9
            at_bound = term >= r["shortest_ttft_s"][level] - 1e-6
            assert at_bound == any("upper bound" in w for w in r["warnings"][level])
