"""The largest classes and functions of the project, in lines (``def``/``class`` line to the
last line of the body, docstrings and comments included), from the source's syntax tree.

Then the two totals issue 37 ("One engine", item 6) sets limits on, in lines of source files:
the engine family (the reference scheduler and engine, its commit path and step features, the
speed-up and its planner, the fleet's tie order: :data:`ENGINE_FAMILY`; an entry
``path:name`` is one function or class of a module kept with a feature's code, with the comments
right above it) and ``simulator/`` with ``perf/step_time.py``.

Usage: python scripts/code_sizes.py [ROOT] [--top N] [--under DIR]...
(default: the checkout holding this script, the ten largest, every package folder)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ENGINE_FAMILY = (
    "simulator/scheduler.py", "simulator/engine.py", "simulator/step_commit.py",
    "simulator/step_cost.py", "simulator/running_loop.py", "simulator/fast_decode.py",
    "simulator/decode_plan.py", "simulator/fleet_ties.py", "simulator/spec_run.py",
)
PACKAGES = ("policies", "workloads", "results", "perf", "analysis", "simulator", "live",
            "studies", "cli")


def sizes(root: Path, folders: tuple[str, ...]) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(lines, name) of every class and every function (methods included) under ``folders``."""
    classes: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            tree = ast.parse(path.read_text(), filename=str(path))
            todo: list[tuple[ast.AST, str]] = [(tree, "")]
            while todo:
                node, prefix = todo.pop()
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                        name = f"{prefix}{child.name}"
                        lines = (child.end_lineno or child.lineno) - child.lineno + 1
                        out = classes if isinstance(child, ast.ClassDef) else functions
                        out.append((lines, f"{rel}:{name}"))
                        todo.append((child, f"{name}."))
    return sorted(classes, reverse=True), sorted(functions, reverse=True)


def part_lines(path: Path, name: str) -> int:
    """Lines of the function or class ``name`` of ``path`` (at any depth: one under ``if
    TYPE_CHECKING`` too), with the comment lines right above it."""
    text = path.read_text().splitlines()
    for node in ast.walk(ast.parse("\n".join(text), filename=str(path))):
        if isinstance(node, ast.ClassDef | ast.FunctionDef) and node.name == name:
            first = node.lineno - 1  # (0-based index of its def/class line)
            while first > 0 and text[first - 1].lstrip().startswith("#"):
                first -= 1
            return (node.end_lineno or node.lineno) - first
    raise SystemExit(f"{path}: no function or class {name!r} (ENGINE_FAMILY)")


def totals(root: Path) -> list[tuple[int, str]]:
    """(lines, name) of the engine family and of ``simulator/`` with ``perf/step_time.py``."""
    def lines(paths: list[Path]) -> int:
        return sum(len(p.read_text().splitlines()) for p in paths)

    family = sum(len((root / f).read_text().splitlines()) if ":" not in f
                 else part_lines(root / f.split(":")[0], f.split(":")[1]) for f in ENGINE_FAMILY)
    simulator = [*sorted((root / "simulator").rglob("*.py")), root / "perf" / "step_time.py"]
    return [(family, "engine family (ENGINE_FAMILY)"),
            (lines(simulator), "simulator/ and perf/step_time.py")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--under", action="append", help="a folder (default: every package)")
    args = parser.parse_args()
    classes, functions = sizes(Path(args.root), tuple(args.under or PACKAGES))
    for title, rows in (("classes", classes), ("functions", functions)):
        print(f"{'lines':>6}  largest {title}")
        for lines, name in rows[: args.top]:
            print(f"{lines:>6}  {name}")
        print()
    print(f"{'lines':>6}  totals")
    for lines, name in totals(Path(args.root)):
        print(f"{lines:>6}  {name}")


if __name__ == "__main__":
    main()
