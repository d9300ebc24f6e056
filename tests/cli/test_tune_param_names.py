"""``kvbudget tune --param overcommit_ratio=0:1`` failed at the first grid point with pydantic's
"extra inputs are not permitted", after the study's header, not naming
``policy_params.overcommit_ratio``: a key that is neither a field of the scenario nor a parameter
of its policy is refused before any run, in one line with the nearest names it takes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kvbudget.cli.main import app

runner = CliRunner()


def run(*args: Any) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def test_tune_param_misspelt_names_the_nearest_field(tmp_path: Path) -> None:
    cases = [
        (
            ["--param", "overcommit_ratio=0:1", "--policy", "overcommit"],
            "nearest: policy_params.overcommit_ratio",
        ),
        (["--param", "engine.max_num_seq=8:64:int"], "nearest: engine.max_num_seqs"),
        (["--param", "max_num_seqs=8:64:int"], "nearest: engine.max_num_seqs"),
        # not the default policy's: the policies that take it
        (
            ["--param", "overcommit_ratio=0:1"],
            "nearest: policy_params.overcommit_ratio (a parameter of overcommit",
        ),
    ]
    for args, nearest in cases:
        r = run("tune", "--out", tmp_path / "t", *args)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1, r.output  # one line, before any header or run
        assert lines[0].startswith(f"error: --param {args[1].split('=')[0]}: "), lines[0]
        assert nearest in lines[0], lines[0]
        assert "extra inputs" not in lines[0]
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
