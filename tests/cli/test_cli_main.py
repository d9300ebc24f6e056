"""The entry point's table of command modules: a command line imports only its own module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from kvbudget.cli import main

REPO = Path(__file__).resolve().parents[2]


def _names(app: typer.Typer) -> set[str]:
    return {c.name or "" for c in app.registered_commands} | {
        g.name or "" for g in app.registered_groups}


def test_the_table_names_every_command_its_module_registers() -> None:
    assert _names(main.app) == set(main._MODULE_OF)
    for module, commands in main.COMMAND_MODULES.items():
        one = typer.Typer()
        main.importlib.import_module(f"kvbudget.cli.{module}").register(one)
        assert _names(one) == set(commands), module


def test_a_command_line_imports_only_its_command_module() -> None:
    probe = ("import sys; sys.argv = ['kvbudget', 'regress', '--help']; "
             "import kvbudget.cli.main as m; "
             "print(sorted(k for k in sys.modules if k.startswith('kvbudget.cli.')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert "kvbudget.cli.regress" in out and "kvbudget.cli.sweep" not in out
    assert main._modules_for(["kvbudget", "tune"]) == ("sweep",)
    assert main._modules_for(["kvbudget", "--help"]) == tuple(main.COMMAND_MODULES)
    assert main._modules_for(["kvbudget", "simulat"]) == tuple(main.COMMAND_MODULES)


def test_a_command_line_registers_only_its_command() -> None:
    probe = ("import sys; sys.argv = ['kvbudget', 'simulate', '--help']; "
             "import kvbudget.cli.main as m; "
             "print(sorted(c.name for c in m.app.registered_commands), "
             "sorted(g.name for g in m.app.registered_groups))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["['simulate']", "[]"]
    assert main._command_for(["kvbudget", "trace", "stats"]) == "trace"
    assert main._command_for(["kvbudget", "--help"]) is None
    assert main._command_for(["kvbudget"]) is None
