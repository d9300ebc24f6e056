"""Imports at the top of their modules (issue 37, item 5), checked on the source.

A module's dependencies are what its top says: an import inside a function hides one (and hid an
import cycle in ``cli/`` from tests/test_architecture.py). A function may import only

* a heavy dependency (:data:`HEAVY`): the optional ones (torch, transformers, ray, jinja2),
  plotting, and the few required ones whose import costs more than a short command's whole run,
  loaded by the code paths that use them;
* the command line's loading of the one command module a command line names: the call
  ``importlib.import_module(f"kvbudget.cli.{name}")`` in ``cli/main.py``'s ``_register``
  (:data:`DYNAMIC`, with the front door's lazy names and ``make bytecode``'s walk);
* an entry of :data:`CYCLES`, where a top-level import would make an import cycle, of
  :data:`HEAVY_MODULES`, a project module whose import loads a heavy dependency, or of
  :data:`SLOW_MODULES`, a project module whose own import costs more than a start, each with
  its reason.

A function's use of one of the front door's lazy names (``kvbudget.recording_named``) is an
import of the module behind it that no import statement shows: never allowed in the project's
own modules (a notebook's door, not theirs); an allowed import is written as one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("policies", "workloads", "results", "perf", "analysis", "simulator", "live",
            "studies", "cli")

HEAVY: dict[str, str] = {
    # optional dependencies (pyproject's extras): absent from a plain install
    "torch": "optional (profile extra): kvbudget profile only",
    "transformers": "optional (profile extra): kvbudget profile only",
    "ray": "optional (ray extra): --executor ray only",
    "jinja2": "optional (notebooks extra): pandas Styler tables only",
    "starlette": "optional (serve extra): kvbudget serve only",
    "uvicorn": "optional (serve extra): kvbudget serve only",
    "aiohttp": "optional (serve extra): kvbudget serve's upstream client only",
    "uvloop": "optional (serve extra): kvbudget serve's event loop where installed (asyncio's "
              "otherwise)",
    # plotting, in modules whose commands mostly do not plot
    "matplotlib": "plotting; ~350 ms to import",
    # required, but each costs more than `kvbudget simulate` on the default scenario (~0.6 s
    # today, loading neither); measured with python -X importtime on the 2-core dev machine
    "pandas": "~640 ms; loaded by the paths that build or read tables (--out, reports)",
    "pyarrow": "~160 ms; loaded by the paths that read or write Parquet/CSV/JSONL files",
    "scipy": "~510 ms (scipy.optimize); loaded by fits, tests and intervals only",
    "httpx": "~230 ms; loaded by the live commands and trace downloads only",
    "tqdm": "~85 ms; loaded when a progress bar is drawn",
    "pydantic": "~80 ms with its models: a scenario built from flags is checked without it "
                "(simulator.scenario._plain_value; DEVELOPERS.md)",
    "annotated_types": "pydantic's constraint types, read with it (see pydantic)",
    # a standard-library module, named whole (not all of importlib)
    "importlib.metadata": "~23 ms with what it loads: kvbudget --version and kb.__version__ "
                          "only (import kvbudget, the notebooks' front door, stays light)",
}
"""Top-level names of the third-party packages a function may import (or a module named whole),
with why."""


def test_a_heavy_module_of_the_project_loads_a_heavy_dependency() -> None:
    """Each :data:`HEAVY_MODULES` entry imports one of :data:`HEAVY` at its top."""
    for _, module in HEAVY_MODULES:
        path = REPO / Path(*module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text())
        names = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module or "" for n in tree.body if isinstance(n, ast.ImportFrom)}
        assert {n.split(".")[0] for n in names} & set(HEAVY), module

DYNAMIC: dict[tuple[str, str], str] = {
    ("cli/main.py", "_register"):
        "the command line loads the one command module a command line names (start-up: "
        "`kvbudget simulate` does not import the live, sweep or plan commands' modules)",
    ("kvbudget/__init__.py", "__getattr__"):
        "the front door's names load on first use (PEP 562): every `import kvbudget.x` runs "
        "kvbudget/__init__.py first, the command line's included",
    ("cli/method_cache.py", "_import_every_module"):
        "`make bytecode` imports every kvbudget module by name to compile their dataclasses",
}
"""The calls of ``importlib.import_module`` a function may make: (module, function) -> why."""

CYCLES: dict[tuple[str, str], str] = {}
"""(module, imported module) -> why a top-level import there would make a cycle."""

HEAVY_MODULES: dict[tuple[str, str], str] = {
    ("simulator/scenario.py", "kvbudget.workloads.spec"):
        "the pydantic models of the [workload] table (pydantic and their classes: ~170 ms); "
        "a scenario of a trace, or built from flags, never loads them",
    ("cli/serve.py", "kvbudget.live.gateway_server"):
        "starlette (the serve extra): a plain install registers the serve command without it",
    ("cli/serve.py", "kvbudget.live.serve_run"):
        "uvicorn (the serve extra): a plain install registers the serve command without it",
    ("cli/serve.py", "kvbudget.live.serve_upstream"):
        "aiohttp (the serve extra), loaded when the gateway runs",
}
"""(module, imported kvbudget module) -> why: a module of the project that is a heavy
dependency's (its import loads one of :data:`HEAVY`), imported where it is used."""

SLOW_MODULES: dict[tuple[str, str], str] = {
    ("cli/errors.py", "kvbudget.results.recording_named"):
        "every load tool's reader (~235 ms with python -X importtime, more than `kvbudget "
        "simulate`'s start): trace_refusal names a file no trace format reads by the tool "
        "that wrote it, on that refusal path only; every command imports cli/errors.py",
}
"""(module, imported kvbudget module) -> why: a module of the project that loads no heavy
dependency but whose own import costs more than a command's start, imported on the one path
that uses it (the permitted start-up exceptions; ``benchmarks/bench_startup.py`` times
starts)."""


def module_files() -> list[Path]:
    files = [REPO / "kvbudget" / "__init__.py"]
    for package in PACKAGES:
        files += sorted((REPO / package).rglob("*.py"))
    return files


def _front_door() -> dict[str, str]:
    """The front door's lazy names (PEP 562, ``kvbudget/__init__.py``'s ``_EXPORTS``) and
    the module each one's first use imports."""
    text = (REPO / "kvbudget" / "__init__.py").read_text()
    exports = next(n.value for n in ast.parse(text).body if isinstance(n, ast.AnnAssign)
                   and ast.unparse(n.target) == "_EXPORTS" and n.value is not None)
    assert exports is not None
    return {k: f"kvbudget.{v}" for k, v in ast.literal_eval(exports).items()}


FRONT_DOOR = _front_door()


def function_level_imports(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(function, imported module, line) for every import statement inside a function or
    method, every ``importlib.import_module``/``__import__`` call there (the module is
    the call's first argument as source text), and every use there of one of the front
    door's lazy names (``kvbudget.recording_named``: its first use imports the module
    :data:`FRONT_DOOR` names, an import the module's top does not show)."""
    out: list[tuple[str, str, int]] = []
    doors = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names if a.name == "kvbudget"}

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = child.name
            if function is not None:
                if isinstance(child, ast.Import):
                    out.extend((function, a.name, child.lineno) for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    out.append((function, "." * child.level + (child.module or ""),
                                child.lineno))
                elif isinstance(child, ast.Call) and _is_dynamic_import(child):
                    arg = ast.unparse(child.args[0]) if child.args else ""
                    out.append((function, f"importlib.import_module({arg})", child.lineno))
                elif (isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name)
                      and child.value.id in doors and child.attr in FRONT_DOOR):
                    out.append((function, f"{FRONT_DOOR[child.attr]} (through the front "
                                    f"door's lazy name {child.attr})", child.lineno))
            visit(child, inner)

    visit(tree, None)
    return out


def _is_dynamic_import(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in ("__import__", "import_module")
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def disallowed(path: Path) -> list[str]:
    rel = path.relative_to(REPO).as_posix()
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = []
    for function, module, line in function_level_imports(tree):
        if module.startswith("importlib.import_module("):
            if (rel, function) in DYNAMIC:
                continue
        elif module in HEAVY or module.split(".")[0] in HEAVY or (
                rel, module) in CYCLES | HEAVY_MODULES | SLOW_MODULES:
            continue
        bad.append(f"{rel}:{line} {function}() imports {module}")
    return bad


FILES = module_files()


@pytest.mark.parametrize("path", FILES, ids=[p.relative_to(REPO).as_posix() for p in FILES])
def test_a_function_imports_only_a_heavy_dependency(path: Path) -> None:
    bad = disallowed(path)
    assert not bad, "import at the top of the module: " + "; ".join(bad)


def test_the_finder_sees_each_kind_of_function_level_import() -> None:
    source = (
        "import json\n"
        "def f():\n"
        "    import math\n"
        "    from kvbudget.perf import models\n"
        "    import pandas as pd\n"
        "    class C:\n"
        "        def g(self):\n"
        "            from . import sibling\n"
        "    return importlib.import_module('x')\n"
        "import kvbudget as kb\n"
        "def h():\n"
        "    return kb.recording_named, kb.__version__\n"
    )
    found = function_level_imports(ast.parse(source))
    assert [(f, m) for f, m, _ in found] == [
        ("f", "math"), ("f", "kvbudget.perf"), ("f", "pandas"), ("g", "."),
        ("f", "importlib.import_module('x')"),
        ("h", "kvbudget.results.recording_named (through the front door's lazy name "
              "recording_named)")]


def test_the_command_line_loads_one_command_module_by_name() -> None:
    """The lazy loading :data:`DYNAMIC` allows is what ``cli/main.py`` does: ``_register``
    imports ``kvbudget.cli.<name>`` for the names of ``COMMAND_MODULES``, and ``cli/main.py``
    imports no command module otherwise."""
    tree = ast.parse((REPO / "cli" / "main.py").read_text())
    calls = [(f, m) for f, m, _ in function_level_imports(tree) if m.startswith("importlib")]
    assert calls == [("_register", "importlib.import_module(f'kvbudget.cli.{name}')")]
    from kvbudget.cli.main import COMMAND_MODULES

    commands = {f"kvbudget.cli.{name}" for name in COMMAND_MODULES}
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                 for a in n.names}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & commands


def test_every_allowance_is_still_used() -> None:
    """An entry of :data:`DYNAMIC` or :data:`CYCLES` that no longer matches goes."""
    seen: set[tuple[str, str]] = set()
    for path in FILES:
        rel = path.relative_to(REPO).as_posix()
        for function, module, _ in function_level_imports(ast.parse(path.read_text())):
            seen.add((rel, function) if module.startswith("importlib") else (rel, module))
    assert set(DYNAMIC) <= seen
    assert set(CYCLES) | set(HEAVY_MODULES) | set(SLOW_MODULES) <= seen
