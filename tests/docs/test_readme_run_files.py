"""README.md, "What a run produces": the files it counts and lists are the ones `kvbudget simulate
--out` writes (it said three and listed three; a run directory also held token_gaps.parquet)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app

README = Path(__file__).resolve().parents[2] / "README.md"
NUMBERS = {"three": 3, "four": 4, "five": 5, "six": 6}


def section() -> str:
    text = README.read_text()
    start = text.index("## What a run produces")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_lists_the_files_a_run_directory_holds(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["simulate", "--set", "workload.duration_s=5", "--out",
                                      str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "run").iterdir())
    text = section()
    listed = sorted(re.findall(r"^\* `([\w.]+)`:", text, flags=re.M))
    assert listed == written
    count = re.search(r"`--out DIR` writes (\w+) files", text)
    assert count and NUMBERS[count.group(1)] == len(written), (count, written)
