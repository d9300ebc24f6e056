"""A text file passed as a table of the generic format: its first line one field.

Published reports and consoles were read as a CSV whose header is their first line and told to
map a column: github.com/deepaksatna/llm-serving-benchmark f733349e
``results/vllm/vllm-llama/latency.txt`` ("the header has: vLLM Llama-3-8B Latency Results"),
github.com/highopes/pd-disaggregation-demo 2dc2f876 ``.../near40-ab-2/summary.console.txt``
("# Near-40K Cold Prefill vs Warm GDS Reload"); neither has a licence, so their first lines are
written here in their shape. A line with no comma is one field: no column of it can be mapped,
and a table parted by tabs or semicolons is said to be one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "latency.txt",
            "vLLM Llama-3-8B Latency Results\n================================\n\n"
            "max_tokens=32: 1.143s, 32 tokens, 28.0 tok/s\n",
        ),
        (
            "summary.console.txt",
            "# Near-40K Cold Prefill vs Warm GDS Reload\n\n| Metric | Cold |\n",
        ),
    ],
    ids=["report", "markdown-console"],
)
def test_a_text_file_is_said_to_be_one_not_asked_for_a_column(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    res = CliRunner().invoke(app, ["validate", "--records", str(path)])
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert f"its first line ({text.splitlines()[0]!r}) is one field" in said
    assert "a text file (a log, a report, what a tool printed)" in said
    assert "--column" not in said and "Traceback" not in said


@pytest.mark.parametrize(("sep", "name"), [("\t", "tabs"), (";", "semicolons")])
def test_a_table_parted_by_another_character_is_said_to_be(
    tmp_path: Path, sep: str, name: str
) -> None:
    path = tmp_path / "records.txt"
    path.write_text(
        sep.join(["arrival_s", "prompt_tokens", "output_tokens"]) + "\n0" + sep + "8" + sep + "4\n"
    )
    with pytest.raises(TraceError, match=f"separated by {name}, not commas"):
        read_recording(path)


def test_a_lone_column_is_still_asked_for_the_others(tmp_path: Path) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens\n12\n")
    with pytest.raises(TraceError, match="missing column 'output_tokens'"):
        read_recording(path)


def test_two_columns_parted_by_a_tab_are_said_to_be_a_table(tmp_path: Path) -> None:
    """A tab parts no sentence: two columns so parted are a table, not a line of text."""
    path = tmp_path / "lengths.tsv"
    path.write_text("prompt_tokens\toutput_tokens\n12\t4\n")
    with pytest.raises(TraceError, match="separated by tabs, not commas"):
        read_recording(path)
