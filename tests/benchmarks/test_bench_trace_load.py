"""benchmarks/bench_trace_load.py and the figures docs/workloads.md ("Performance") quotes from it.

The timings are the benchmark's to print (the docs say on what machine, at what load and on
which day); what does not follow the machine's speed is checked here: the child's report, and
the bytes a row of the loaded workload's columns the docs quote."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from kvbudget.workloads.traces import TraceOptions, load_trace
from tests.benchmarks.bench_module import BENCHMARKS, load_bench
from tests.benchmarks.doc_figures import section

DOC = BENCHMARKS.parent / "docs" / "workloads.md"
ROWS = 4_000
OPTIONS = {"burstgpt": {"tier_column": "Log Type", "tier_map": {
    "Conversation log": "interactive", "API log": "batch"}}, "azure": {}}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("bench_trace_load")


def generated(bench: ModuleType, kind: str, folder: Path) -> Path:
    path = folder / f"{kind}.csv"
    (bench.generate_burstgpt if kind == "burstgpt" else bench.generate_azure_2024)(path, ROWS)
    return path


def test_the_child_reports_the_load(bench: ModuleType, tmp_path: Path) -> None:
    path = generated(bench, "burstgpt", tmp_path)
    said, cpu_s, rss_mib = bench.run_child([str(path), json.dumps(OPTIONS["burstgpt"]),
                                            str(BENCHMARKS)])
    assert said["rows"] + said["dropped"] == ROWS and said["dropped"] > 0  # its failed rows
    assert said["format"] == "burstgpt_1"
    assert 0 < said["cpu_seconds"] <= cpu_s and said["seconds"] > 0 and rss_mib > 0
    assert said["workload_bytes_per_row"] == 50


@pytest.mark.parametrize("kind", ["burstgpt", "azure"])
def test_the_docs_bytes_a_row_of_the_workload(bench: ModuleType, tmp_path: Path,
                                              kind: str) -> None:
    """docs/workloads.md: "... a row at the peak, N in the workload": the loaded workload's
    columns (seven of them: 8 bytes each but the tier's 2), whatever the file's length."""
    loaded = load_trace(generated(bench, kind, tmp_path), TraceOptions(**OPTIONS[kind]))
    per_row = bench.workload_bytes_per_row(loaded.workload)
    text = " ".join(section(DOC, "## Performance").split())
    quoted = re.search(r"a row at the peak, (\d+) in the workload", text)
    assert quoted, "docs/workloads.md, Performance: the workload's bytes a row"
    assert int(quoted.group(1)) == per_row
