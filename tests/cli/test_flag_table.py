"""Every flag of every command with values of the wrong kind (issue 20's campaign, generated
from the commands themselves, so a new flag is covered the day it is added).

Listed from typer's own command tree (what ``kvbudget CMD --help`` shows): each option that
takes a number gets text, a fraction where an integer is due, NaN and the infinities; each path
option the empty string (which typer would read as the current directory). Every case is refused
while the command line is parsed, before anything runs: exit 2, a message naming the flag, no
traceback. The magnitudes no deployment has are refused by the options' own bounds (below).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvbudget.cli.main import app

runner = CliRunner()
ROOT = typer.main.get_command(app)


@pytest.fixture(autouse=True)
def _built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command tree built once (typer's runner builds it again at every call, ~0.1 s)."""
    import typer.testing

    real = typer.testing._get_command
    monkeypatch.setattr(typer.testing, "_get_command", lambda a: ROOT if a is app else real(a))

FLOATS = ("FloatParamType", "FloatRange")
INTS = ("IntParamType", "IntRange")
BAD: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(FLOATS, ("nan", "inf", "-inf", "abc", "")),
    **dict.fromkeys(INTS, ("abc", "1.5", "", "1e3")),
    "TyperPath": ("",),
}


def _commands() -> Iterator[tuple[list[str], Any]]:
    for name, command in ROOT.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None)
        if subs:
            for sub, c in subs.items():
                yield [name, sub], c
        else:
            yield [name], command


def _cases() -> list[tuple[str, str, str]]:
    cases = []
    for path, command in _commands():
        for p in command.params:
            if p.param_type_name != "option" or p.is_flag:
                continue
            flag = next(o for o in [*p.opts, *p.secondary_opts] if o.startswith("--"))
            for value in BAD.get(type(p.type).__name__, ()):
                cases.append((" ".join(path), flag, value))
    return cases


CASES = _cases()


def test_the_table_covers_every_command_and_kind() -> None:
    commands = {c for c, _, _ in CASES}
    assert {"simulate", "sweep", "tune", "capacity", "plan", "compare", "validate", "calibrate",
            "replay", "report", "regress", "profile", "trace synth", "trace stats"} <= commands
    flags = {(c, f) for c, f, _ in CASES}
    assert ("simulate", "--gpu-memory-utilization") in flags and ("tune", "--out") in flags
    assert len(CASES) > 500


@pytest.mark.parametrize(("command", "flag", "value"), CASES,
                         ids=[f"{c}-{f}-{v or 'empty'}" for c, f, v in CASES])
def test_a_flag_of_the_wrong_kind_is_refused_naming_it(command: str, flag: str,
                                                       value: str) -> None:
    res = runner.invoke(app, [*command.split(), flag, value])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert flag in res.stderr and "Traceback" not in res.stderr, res.stderr


# magnitudes beyond any machine or any study: the options' bounds refuse them
HUGE = "1" + "0" * 30


@pytest.mark.parametrize("args", [
    ["compare", "-r", HUGE], ["sweep", "-r", HUGE], ["tune", "-r", HUGE], ["plan", "-r", HUGE],
    ["capacity", "-r", HUGE], ["compare", "-j", HUGE], ["regress", "-j", HUGE],
    ["sweep", "-j", "100000"], ["calibrate", "--max-evals", HUGE],
    ["calibrate", "--max-evals", "0"], ["validate", "--max-evals", "-1"],
    ["tune", "--validate", HUGE], ["tune", "--grid-points", HUGE], ["tune", "--refine-evals", HUGE],
    ["capacity", "--curve-points", HUGE], ["validate", "--max-error", "-1"],
])
def test_magnitudes_beyond_any_study_are_refused(args: list[str]) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and args[1] in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(("flag", "value"), [
    ("--time-scale", "-1"), ("--max-in-flight", "0"), ("--poll-period", "0"),
    ("--capacity-tokens", "-1"), ("--lease-ttl", "-1"), ("--max-output", "0"),
    ("--format", "zzz"), ("--fit", "zzz"),
])
def test_validate_records_refuses_what_it_would_ignore(tmp_path: Any, flag: str,
                                                       value: str) -> None:
    """Live-only flags given with --records were ignored whatever their value (a negative
    --time-scale was "valid"); an unknown --fit passed when no fit ran."""
    res = runner.invoke(app, ["validate", "--records", str(tmp_path), flag, value])
    assert res.exit_code == 2 and flag in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
