"""The entry point's table of command modules: a command line imports only its own module."""

from __future__ import annotations

import os
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


def _probe(code: str) -> str:
    """What ``python -c CODE`` prints, run from the checkout (it must exit 0)."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout


def test_a_command_line_imports_only_its_command_module() -> None:
    probe = ("import sys; sys.argv = ['kvbudget', 'regress', '--help']; "
             "import kvbudget.cli.main as m; "
             "print(sorted(k for k in sys.modules if k.startswith('kvbudget.cli.')))")
    out = _probe(probe)
    assert "kvbudget.cli.regress" in out and "kvbudget.cli.sweep" not in out
    assert main._modules_for(["kvbudget", "tune"]) == ("sweep",)
    assert main._modules_for(["kvbudget", "--help"]) == ()
    assert main._modules_for(["kvbudget"]) == ()
    assert main._modules_for(["kvbudget", "simulat"]) == tuple(main.COMMAND_MODULES)


def _command_line(*argv: str) -> subprocess.CompletedProcess[str]:
    """``kvbudget ARGV`` run as the command (``python -m kvbudget.cli.main``), 100 columns."""
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "kvbudget.cli.main", *argv], cwd=REPO,
                          capture_output=True, text=True, env=env, check=False)


def test_the_top_level_help_loads_no_command_module_and_lists_what_they_would() -> None:
    """``kvbudget --help`` lists every command from its summary (help_text.SUMMARIES) without
    importing a command module: the listing is the one the loaded commands give. (The one
    library module it loads is ``perf.command_flags``, stdlib only, where the command group
    records the running command's flags.)"""
    probe = ("import sys; sys.argv = ['kvbudget', '--help']; import kvbudget.cli.main as m; "
             "print(sorted(m.app.registered_commands), sorted(m.app.registered_groups), "
             "sorted(k for k in sys.modules if k.startswith('kvbudget.') and "
             "k.split('.')[1] not in ('cli',) and k not in ('kvbudget.perf', "
             "'kvbudget.perf.command_flags')))")
    out = _probe(probe)
    assert out.split() == ["[]", "[]", "[]"]
    env = {**os.environ, "COLUMNS": "100"}
    lazy, full = (subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                                 text=True, env=env, check=False) for probe in (
        # sys.argv set before the import: started as the command (no command module loaded)
        "import sys; sys.argv = ['kvbudget', '--help']; from kvbudget.cli.main import app; app()",
        # set after: an app with every command, as a test or a notebook imports it
        "import sys; from kvbudget.cli.main import app; sys.argv = ['kvbudget', '--help']; app()",
    ))
    assert lazy.returncode == full.returncode == 0, lazy.stderr + full.stderr
    assert "simulate" in lazy.stdout and lazy.stdout == full.stdout


def test_a_mistyped_command_is_answered_with_the_close_ones() -> None:
    done = _command_line("simulat")
    assert done.returncode == 2
    assert "No such command 'simulat'. Did you mean 'simulate'?" in done.stderr


def test_a_command_line_registers_only_its_command() -> None:
    probe = ("import sys; sys.argv = ['kvbudget', 'simulate', '--help']; "
             "import kvbudget.cli.main as m; "
             "print(sorted(c.name for c in m.app.registered_commands), "
             "sorted(g.name for g in m.app.registered_groups))")
    out = _probe(probe)
    assert out.split() == ["['simulate']", "[]"]
    assert main._command_for(["kvbudget", "trace", "stats"]) == "trace"
    assert main._command_for(["kvbudget", "--help"]) is None
    assert main._command_for(["kvbudget"]) is None


def test_a_pool_worker_loads_no_command_module() -> None:
    """multiprocessing runs the parent's main module again, as ``__mp_main__``, in each worker
    it starts (spawn and forkserver): a worker of ``python -m kvbudget.cli.main sweep`` loads
    no command module (each imports what its commands run: every one would cost a worker's
    start a second)."""
    probe = ("import runpy, sys; sys.argv = [sys.argv[0], 'sweep']; "
             "g = runpy.run_module('kvbudget.cli.main', run_name='__mp_main__'); "
             "print(len(g['app'].registered_commands), "
             "sorted(k for k in sys.modules if k.startswith('kvbudget.cli.')))")
    out = _probe(probe)
    assert out.split(" ", 1)[0] == "0"
    assert "kvbudget.cli.sweep" not in out and "kvbudget.cli.simulate" not in out


def test_simulate_loads_no_module_only_fitting_or_synthetic_draws_need() -> None:
    """``kvbudget simulate``'s modules leave out ``hashlib`` (OpenSSL's start-up: ~11 M
    instructions; only a fit's ``fitted_on`` block hashes, perf/fitted_on_write.py) and
    ``statistics`` (~10 M with fractions and decimal; the lognormal lengths of synthetic
    workloads, workloads/lengths.py, which a trace's reader does without: workloads/pmf.py)."""
    probe = ("import sys; import kvbudget.cli.simulate; "
             "print(sorted({'hashlib', 'statistics', 'kvbudget.workloads.lengths', "
             "'kvbudget.workloads.synthetic', 'kvbudget.perf.fitted_on_write'} "
             "& set(sys.modules)))")
    out = _probe(probe)
    assert out.split() == ["[]"]
