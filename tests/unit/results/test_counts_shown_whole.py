"""Counts in a recording's comparison table print whole, whatever their size or the engine.

The comparison keeps every figure a float (a NaN where a side has none), and the terminal's
figure format gives a float of 100 or more one decimal: a run of 150 requests printed
``completed  150.0  150.0`` where one of 50 printed ``completed  50  50`` (an audit of published
results first saw it as "500.0 with --engine trtllm, 50 with vllm": two files of different
sizes)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.analysis.validation import counts_whole, shown_value, table_cell
from kvbudget.cli.main import app


def _records(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "records.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n" + "".join(
        f"{0.1 * i:.3f},200,30,0.03,0.25\n" for i in range(n)))
    return path


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_completed_prints_as_a_whole_number(tmp_path: Path, engine: str) -> None:
    result = CliRunner().invoke(app, [
        "validate", "--records", str(_records(tmp_path, 150)), "--model", "Llama-3.1-8B",
        "--gpu", "H100-80GB", "--engine", engine, "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("completed "))
    assert row.split()[:3] == ["completed", "150", "150"], row
    # and so in the files: validation.csv wrote "all,completed,150.0,150.0,0.0" in a column
    # of latencies, validation.json "simulated": 150.0
    lines = (tmp_path / "v" / "validation.csv").read_text().splitlines()
    assert "all,completed,150,150,0.0" in lines, lines
    ttft = next(line for line in lines if line.startswith("all,ttft_p50_s,"))
    assert all("." in x for x in ttft.split(",")[2:]), ttft  # latencies as before
    metrics = json.loads((tmp_path / "v" / "validation.json").read_text())["metrics"]
    done = [m for m in metrics if m["metric"] == "completed"]
    assert done and all(type(m["simulated"]) is int and type(m["measured"]) is int
                        for m in done), done
    assert all(type(m["measured"]) is float for m in metrics
               if m["metric"].endswith("_s") and m["measured"] is not None)


def test_the_files_write_counts_whole_and_the_rest_as_it_is() -> None:
    table = pd.DataFrame({"metric": ["ttft_p50_s", "completed", "preemptions", "rejections"],
                          "simulated": [0.25, 150.0, 3.0, math.nan],
                          "measured": [2.0, 149.0, 0.0, 1.0],
                          "rel_error": [-0.875, 1 / 149, math.nan, math.nan]})
    out = counts_whole(table)
    assert out["simulated"].tolist()[:3] == [0.25, 150, 3]
    assert [type(v) for v in out["measured"]] == [float, int, int, int]
    assert math.isnan(out["simulated"].iloc[3])
    assert out.to_csv(index=False).splitlines()[1:] == [
        "ttft_p50_s,0.25,2.0,-0.875", f"completed,150,149,{1 / 149!r}", "preemptions,3,0,",
        "rejections,,1,"]
    assert table["simulated"].dtype == np.float64  # the table itself keeps floats


def test_only_whole_counts_are_shown_as_ints() -> None:
    assert shown_value("completed", 500.0) == 500 and isinstance(
        shown_value("completed", 500.0), int)
    assert shown_value("rejections", 0.0) == 0
    assert math.isnan(shown_value("completed", math.nan))
    assert shown_value("output_tokens_per_s", 500.0) == 500.0
    assert isinstance(shown_value("output_tokens_per_s", 500.0), float)


def test_a_side_with_no_figure_shows_a_dash_in_the_terminals_table() -> None:
    """validate --url against the CPU vLLM on a loaded machine, every answer read at once: the
    measured TTFT, TPOT and ITL rows printed 'nan' beside a relative error of '-'."""
    assert table_cell("ttft_p50_s", math.nan) == "-"
    assert table_cell("completed", np.float64(math.nan)) == "-"
    assert table_cell("completed", 150.0) == 150 and table_cell("ttft_p50_s", 0.25) == 0.25
