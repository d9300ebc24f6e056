"""The command lines the docs' prose quotes inline (in backticks, not in an example block that
tests/docs/test_docs.py runs) parse as they are: every option one the command has and every
required option and argument given. A newcomer copies ``kvbudget capacity --policies
conservative`` from the README as readily as a block; it failed with "Missing option '--out'".

Covered: every inline ``kvbudget ...`` of README.md, and those of docs/*.md that give two or
more options (a bare name such as ``kvbudget simulate --out`` there names a flag, not a command
line); synopses (``[--gpu GPU]``, ``...``, ``a|b``) are not command lines."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from kvbudget.cli.main import app

REPO = Path(__file__).resolve().parents[2]
INLINE = re.compile(r"`(kvbudget [^`]+)`")
SYNOPSIS = ("[", "...", "|", "{")


def inline_commands(path: Path, min_options: int) -> list[str]:
    text = path.read_text()
    found = [" ".join(m.split()) for m in INLINE.findall(text)]
    return [c for c in found if not any(s in c for s in SYNOPSIS)
            and len(re.findall(r"(?:^|\s)--?\w", c)) >= min_options]


def commands() -> list[tuple[str, str]]:
    out = [("README.md", c) for c in inline_commands(REPO / "README.md", 0)]
    for doc in sorted((REPO / "docs").glob("*.md")):
        out += [(f"docs/{doc.name}", c) for c in inline_commands(doc, 2)]
    return out


def parse_error(line: str) -> str | None:
    """Why ``line`` does not parse as a kvbudget command line, or None when it does (a group
    named without a subcommand, ``kvbudget trace``, names the group: it parses)."""
    words = shlex.split(line)
    group: Any = typer.main.get_command(app)
    ctx = group.make_context("kvbudget", [words[1], "--help"], resilient_parsing=True)
    command, rest = group.get_command(ctx, words[1]), words[2:]
    if command is None:
        return f"no command {words[1]!r}"
    if hasattr(command, "get_command"):
        if not rest:
            return None
        command, rest = command.get_command(ctx, rest[0]), rest[1:]
        if command is None:
            return f"no subcommand {words[2]!r}"
    try:
        command.make_context(words[1], list(rest))
    except Exception as e:  # typer's click's UsageError (typer may bring its own click)
        return str(getattr(e, "format_message", e.__str__)())
    return None


def test_the_readme_quotes_commands_inline() -> None:
    assert any(c.startswith("kvbudget capacity") for _, c in commands())


@pytest.mark.parametrize(("doc", "line"), commands(), ids=lambda v: str(v)[:60])
def test_an_inline_command_parses(doc: str, line: str) -> None:
    error = parse_error(line)
    assert error is None, f"{doc}: `{line}`: {error}"


def test_a_command_without_its_required_option_does_not_parse() -> None:
    assert parse_error("kvbudget capacity --policies conservative") == "Missing option '--out'."
    assert parse_error("kvbudget capacity --policies conservative --out runs/cap") is None


def test_the_project_tests_the_docs_name_are_where_they_say() -> None:
    """A test file the docs name by path (`tests/.../test_x.py`) is at that path when the project
    has a test of that name (docs/regress.md and docs/performance.md named tests/test_*.py files
    that had moved under tests/cli, tests/model and tests/unit/simulator); paths of other
    projects' tests (vLLM's, cited as sources) have no namesake here and are left alone."""
    ours = {p.name: p for p in (REPO / "tests").rglob("test_*.py")}
    wrong = []
    for doc in [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]:
        for path in set(re.findall(r"`(tests/[\w/]+\.py)", doc.read_text())):
            name = path.rsplit("/", 1)[-1]
            if name in ours and not (REPO / path).is_file():
                wrong.append(f"{doc.name}: {path} (is {ours[name].relative_to(REPO)})")
    assert not wrong, wrong


PACKAGES = "simulator|perf|policies|workloads|results|analysis|studies|live|cli"
DOTTED = re.compile(rf"`((?:kvbudget\.)?(?:{PACKAGES})\.[A-Za-z_][\w.]*?)\.?(?:\(\))?`")


def _resolves(name: str) -> bool:
    """Whether ``name`` (``analysis.tables.label_runs``, with or without ``kvbudget.``) is a
    module of the package or a name in one."""
    import importlib

    parts = name.split(".")
    parts = parts if parts[0] == "kvbudget" else ["kvbudget", *parts]
    for i in range(len(parts), 1, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_module_names_the_docs_and_notebooks_give_resolve() -> None:
    """`analysis.tables.bootstrap_quantiles`, not `simulator.analysis...`: the docs and notebook
    01 named modules by where they were before the package was split into its folders."""
    import json

    texts = {p.name: p.read_text()
             for p in [REPO / "README.md", REPO / "DEVELOPERS.md", *(REPO / "docs").glob("*.md")]}
    for nb in (REPO / "notebooks").glob("*.ipynb"):
        cells = json.loads(nb.read_text())["cells"]
        texts[nb.name] = "".join("".join(c["source"]) for c in cells
                                 if c["cell_type"] == "markdown")
    wrong = [f"{doc}: {name}" for doc, text in texts.items()
             for name in sorted(set(DOTTED.findall(text))) if not _resolves(name)]
    assert not wrong, wrong
    assert not _resolves("simulator.analysis.bootstrap_quantiles")
