"""docs/offload.md, "What 64 GiB of CPU offload buys": the table of the Mooncake what-if at
four sizes and the prose under it, recomputed with the command the docs show (``--json``), at
the precision shown (four simulations of ~1.5 s of CPU each)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.doc_figures import rewrite, row_line, section, stale, table_rows
from tests.conftest import SHARED

REPO = Path(__file__).resolve().parents[2]
TRACE = SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl"
HEADING = "## What 64 GiB of CPU offload buys"
SIZES = {"none": None, "8 GiB": 8, "64 GiB": 64, "256 GiB": 256}


def summary(size: int | None) -> dict[str, Any]:
    argv = ["simulate", "--trace", str(TRACE), "--gpu", "H100-SXM", "--policy", "unlimited",
            "--json"]
    if size is not None:
        argv += ["--set", f"engine.kv_offloading_size={size}"]
    res = subprocess.run([sys.executable, "-c", "from kvbudget.cli.main import main; main()",
                          *argv], capture_output=True, text=True, check=True, cwd=REPO)
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def cells_of(data: dict[str, Any], shown: list[str]) -> list[list[float]]:
    """The values behind a row's cells, in the units the row shows them."""
    o, off = data["overall"], data["engine"].get("kv_offloading") or {}
    ttft = o["ttft_s"]
    values = [[ttft["mean"]], [ttft["p50"]], [ttft["p90"]], [ttft["p99"]],
              [float(o["num_preemptions"])]]
    if off:
        scale = 1e6 if " M" in shown[6] else 1e3
        values.append([off["cpu_hit_tokens"] / scale, float(off["num_loads"])])
        loaded = [off["load_bytes_per_gpu"] / 1e9]
        values.append(loaded + ([off["load_time_s"]] if " in " in shown[7] else []))
    else:
        values += [[], []]
    return [*values, [o["goodput_rps"]]]


@pytest.mark.skipif(not TRACE.is_file(), reason="needs ../shared/traces/mooncake")
def test_the_offload_sizes_table_and_its_prose() -> None:
    text = section(REPO / "docs" / "offload.md", HEADING)
    table = table_rows(text, "| `kv_offloading_size` |")
    assert [r[0] for r in table] == list(SIZES)
    runs = {label: summary(size) for label, size in SIZES.items()}
    problems = []
    for cells in table:
        values = cells_of(runs[cells[0]], cells)
        if any(stale(c, v) for c, v in zip(cells[1:], values, strict=True)):
            now = [rewrite(c, v) for c, v in zip(cells[1:], values, strict=True)]
            problems.append(f"was {row_line(cells)}\nnow {row_line([cells[0], *now])}")
    flat = " ".join(text.split())
    none, big = runs["none"]["overall"], runs["64 GiB"]["overall"]
    falls = none["ttft_s"]["p99"] / big["ttft_s"]["p99"]
    should = (f"TTFT p99 falls {falls:.1f}x, the engine preempts less "
              f"({none['num_preemptions']} to {big['num_preemptions']})")
    if should not in flat:
        problems.append(should)
    gain = big["goodput_rps"] / none["goodput_rps"] - 1
    assert "SLO goodput rises a third" in flat and abs(gain - 1 / 3) < 0.05, gain
    cache = runs["none"]["kv_capacity_tokens"]
    m = re.search(r"the GPU's prefix cache holds (\d+) k tokens", flat)
    assert m and abs(int(m.group(1)) - cache / 1e3) <= 0.5, cache
    assert not problems, f"docs/offload.md, '{HEADING[3:]}': stale\n" + "\n".join(problems)
