"""The import rules of DEVELOPERS.md, checked on the source (not on what happens to load)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("policies", "workloads", "simulator", "backends", "cli")
# simulator modules that backends may import (never the SimPy engine or the run driver)
BACKEND_SIMULATOR_OK = {
    "simulator",
    "simulator.records",
    "simulator.metrics",
    "simulator.results",
    "simulator.cost_model",
    "simulator.fit",
    "simulator.presets",
    "simulator.analysis",
    "simulator.plots",
    "simulator.report",
}
ENGINE_MODULES = {"simulator.engine", "simulator.run"}


def project_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out.update(n for n in names if n.split(".")[0] in PACKAGES)
    return out


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("path", modules("policies"), ids=lambda p: p.name)
def test_policies_import_nothing_else_of_the_project(path: Path) -> None:
    bad = {m for m in project_imports(path) if m.split(".")[0] != "policies"}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules("workloads"), ids=lambda p: p.name)
def test_workloads_import_only_policies(path: Path) -> None:
    bad = {m for m in project_imports(path) if m.split(".")[0] not in ("workloads", "policies")}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules("simulator"), ids=lambda p: p.name)
def test_simulator_never_imports_backends_or_cli(path: Path) -> None:
    bad = {m for m in project_imports(path) if m.split(".")[0] in ("backends", "cli")}
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize("path", modules("backends"), ids=lambda p: p.name)
def test_backends_never_import_the_simpy_engine(path: Path) -> None:
    imports = project_imports(path)
    bad = {m for m in imports if m.split(".")[0] == "cli"}
    bad |= {
        m
        for m in imports
        if m.startswith("simulator")
        and not any(
            m == ok or m.startswith(ok + ".") for ok in BACKEND_SIMULATOR_OK - {"simulator"}
        )
        and m != "simulator"
    }
    assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize(
    "module",
    ["simulator.records", "simulator.metrics", "simulator.results", "simulator.cost_model"],
)
def test_shared_simulator_modules_stay_free_of_simpy(module: str) -> None:
    path = REPO / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "simpy" not in names and not (names & ENGINE_MODULES)
