"""``kvbudget --help`` groups the commands into panels, and every command's ``--help`` ends with
two examples whose every flag its parser takes (issue: the first screens tell the truth)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvbudget.cli.help_text import EXAMPLES, PANELS
from kvbudget.cli.main import COMMAND_MODULES, app

COMMANDS = sorted({c for cmds in COMMAND_MODULES.values() for c in cmds})


def test_every_command_is_in_one_panel_and_has_two_examples() -> None:
    paneled = [c for members in PANELS.values() for c in members]
    assert sorted(paneled) == COMMANDS and len(set(paneled)) == len(paneled)
    assert sorted(EXAMPLES) == COMMANDS
    assert all(len(set(pair)) == 2 for pair in EXAMPLES.values())


def test_the_top_level_help_shows_the_panels_in_order() -> None:
    out = CliRunner().invoke(app, ["--help"]).stdout
    positions = [out.index(f"\n{title}:\n") for title in PANELS]
    assert positions == sorted(positions)
    assert "Other commands" not in out and "Commands:" not in out


@pytest.mark.parametrize("command", COMMANDS)
def test_a_commands_help_ends_with_its_examples(command: str) -> None:
    out = CliRunner().invoke(app, [command, "--help"]).stdout
    tail = out.rstrip().splitlines()[-3:]
    assert [line.strip() for line in tail] == ["Examples:", *EXAMPLES[command]]
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize("line", [line for pair in EXAMPLES.values() for line in pair])
def test_every_example_parses(line: str) -> None:
    words = shlex.split(line.split(" > ")[0])
    assert words[0] == "kvbudget"
    group: Any = typer.main.get_command(app)  # typer's click (it may bring its own)
    ctx = group.make_context("kvbudget", [words[1], "--help"], resilient_parsing=True)
    command, rest = group.get_command(ctx, words[1]), words[2:]
    assert command is not None, words[1]
    if hasattr(command, "get_command"):  # a group: trace
        command, rest = command.get_command(ctx, rest[0]), rest[1:]
        assert command is not None
    # every option the example gives is one the command has
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    flags = [w.split("=")[0] for w in rest if w.startswith("-")]
    unknown = [f for f in flags if f not in known]
    assert not unknown, f"{line}: {unknown} not options of the command"
    # and the line as a whole parses: every required option and argument given (a `tune`
    # example without `--param`, a `regress` one without its SUITE, failed when copied)
    try:
        command.make_context(words[1], list(rest))
    except Exception as e:  # typer's click's UsageError (typer may bring its own click)
        raise AssertionError(f"{line}: {getattr(e, 'format_message', e.__str__)()}") from e


def test_a_mistyped_flag_in_an_example_would_fail() -> None:
    with pytest.raises(AssertionError, match="no-such-flag"):
        test_every_example_parses("kvbudget simulate --no-such-flag 1")


def test_an_example_without_a_required_option_would_fail() -> None:
    with pytest.raises(AssertionError, match="Missing option '--param'"):
        test_every_example_parses("kvbudget tune --policy overcommit --out runs/tuned")


def test_a_throughput_label_names_one_rate() -> None:
    """``out tok/s`` is the single-run tables' tokens over the run (first arrival to last
    finish); the replicated compare, sweep and plan tables used it for the rate over the
    arrival window, so one run showed two different ``out tok/s``."""
    from kvbudget.cli.tables import INTERVAL_FIGURES, short_metric

    assert short_metric("batch_sustained_output_tokens_per_s") == "batch out tok/s"
    assert short_metric("batch_output_tokens_per_s") == "batch tok/s arr. win"
    assert dict(INTERVAL_FIGURES).get("out tok/s") in (None, "sustained_output_tokens_per_s")


RUNNABLE = ("sweep", "tune", "capacity", "compare")
"""Commands whose examples run on the default scenario alone (no file, server or GPU)."""


@pytest.mark.parametrize("line", [line for c in RUNNABLE for line in EXAMPLES[c]])
def test_a_study_example_runs_on_the_default_scenario(line: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing is not enough: sweep's example once gridded overcommit_ratio over the default
    scenario's conservative policy, which has no such parameter, and exited 2. Each runs as
    written on a 10-second default workload, one process."""
    monkeypatch.chdir(tmp_path)
    words = [*shlex.split(line)[1:], "--set", "workload.duration_s=10"]
    if not (words[0] == "compare" and "-r" not in words):  # one replication runs in-process
        words += ["-j", "1"]
    result = CliRunner().invoke(app, words)
    assert result.exit_code == 0, (line, result.output)


@pytest.mark.parametrize("command", ["simulate", "serve", "replay"])
def test_the_policy_option_names_every_policy(command: str) -> None:
    """simulate's --policy said only "Admission policy."; serve's sent the reader to `kvbudget
    presets`, which lists no policies."""
    from kvbudget.cli.help_text import POLICY_NAMES
    from kvbudget.policies import POLICIES

    assert sorted(re.findall(r"\w+", POLICY_NAMES.split("(")[0].replace(" or ", ", "))) \
        == sorted(POLICIES)
    out = " ".join(CliRunner().invoke(app, [command, "--help"]).stdout.split())
    assert all(name in out for name in POLICIES), out
    assert "kvbudget presets lists them" not in out
    if command == "simulate":
        from kvbudget.simulator.scenario import default_scenario

        assert "(conservative in the default scenario)" in out
        assert default_scenario().spec.policy == "conservative"


def test_an_out_that_is_a_folder_is_not_named_like_a_file() -> None:
    """report's --out is a folder (report.html and the PNGs go in it): its examples' `--out
    report.html` made a folder named report.html holding report.html."""
    folders = {"report", "sweep", "tune", "capacity", "plan", "simulate", "compare", "replay"}
    for command in folders:
        for line in EXAMPLES[command]:
            words = shlex.split(line)
            outs = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--out"]
            assert not [o for o in outs if re.search(r"\.(html|json|csv|parquet)$", o)], line
