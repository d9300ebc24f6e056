"""The largest classes and functions of the project, in lines (``def``/``class`` line to the
last line of the body, docstrings and comments included), from the source's syntax tree.

Usage: python scripts/code_sizes.py [ROOT] [--top N] [--under DIR]...
(default: the checkout holding this script, the ten largest, every package folder)
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

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


if __name__ == "__main__":
    main()
