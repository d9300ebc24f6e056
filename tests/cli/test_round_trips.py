"""Files kvbudget writes, read back by the commands that take a file of that kind (the guide's
"writes files it cannot load"): each written by the real writer and read by the real reader
through the CLI, paths with spaces included. A reader refuses only with a true reason."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import small_scenario_dict

runner = CliRunner()


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small scenario.toml"
    path.write_text(tomli_w.dumps(small_scenario_dict(n=30, rate=6.0)))
    return path


def _refused(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    err = " ".join(res.stderr.split())
    assert err.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return err


@pytest.mark.parametrize(
    "reader",
    [["simulate", "--trace"], ["compare", "--trace"], ["trace", "stats"], ["trace", "convert"]],
)
def test_a_run_directory_given_as_a_trace_is_named_for_what_it_is(
    tmp_path: Path, reader: list[str]
) -> None:
    """A run directory given as a trace was told it "holds no ServeGen chunk-N-trace.csv
    files", as if it were a ServeGen folder short of its files; so was compare's folder of
    runs. Both are now named as run directories, with the command that compares a simulation
    with the run, its path quoted so that it runs as printed."""
    scenario = _scenario(tmp_path)
    run = tmp_path / "sim run"
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--out", str(run)])
    assert res.exit_code == 0, res.stderr
    runs = tmp_path / "all policies"
    res = runner.invoke(app, ["compare", "--scenario", str(scenario), "--out", str(runs)])
    assert res.exit_code == 0, res.stderr
    extra = ["--scenario", str(scenario)] if reader[0] != "trace" else []
    if reader[-1] == "convert":
        extra = ["--out", str(tmp_path / "t.jsonl")]
    err = _refused([*reader, str(run), *extra])
    assert "is a kvbudget run directory (simulate, compare or replay --out), not a trace" in err
    assert "ServeGen" not in err, err
    said = err.split("kvbudget validate --records ", 1)[1].split(" --out DIR")[0]
    assert shlex.split(said) == [str(run)], err
    res = runner.invoke(app, ["validate", "--records", str(run), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr  # the command it names takes the run
    err = _refused([*reader, str(runs), *extra])
    assert "is a folder of 4 kvbudget run directories (compare --out), not a trace" in err
    assert "ServeGen" not in err, err
