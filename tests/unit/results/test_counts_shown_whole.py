"""Counts in a recording's comparison table print whole, whatever their size or the engine.

The comparison keeps every figure a float (a NaN where a side has none), and the terminal's
figure format gives a float of 100 or more one decimal: a run of 150 requests printed
``completed  150.0  150.0`` where one of 50 printed ``completed  50  50`` (an audit of published
results first saw it as "500.0 with --engine trtllm, 50 with vllm": two files of different
sizes)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.analysis.validation import shown_value
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


def test_only_whole_counts_are_shown_as_ints() -> None:
    assert shown_value("completed", 500.0) == 500 and isinstance(
        shown_value("completed", 500.0), int)
    assert shown_value("rejections", 0.0) == 0
    assert math.isnan(shown_value("completed", math.nan))
    assert shown_value("output_tokens_per_s", 500.0) == 500.0
    assert isinstance(shown_value("output_tokens_per_s", 500.0), float)
