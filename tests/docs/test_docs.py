"""Every example of README.md and docs/*.md runs, and what it shows is what it prints.

Blocks fenced ``console``, ``bash``, ``sh``, ``python`` or ``toml`` (parsed and validated: a
scenario or a fragment of one, a regression suite or baseline), and unlabelled blocks whose
first line is a ``kvbudget`` command, are collected from the files as they are (a new doc or block is
covered without touching this file); one test per block (``pytest -n`` spreads them).
tests/docs/placeholders.toml says what stands behind the names the docs use (traces, paths),
which blocks run smaller and why, and which cannot run here and why.

Checks: every command exits 0, but one whose shown output is an ``error: `` line (a refusal
the docs show), which exits 2 with those lines on stderr; a console block that shows output (lines after a ``$`` command
that are not commands) prints lines with the same leading label whose figures agree within
:data:`REL_TOL` (a reduced command's figures are not compared: its size differs by design); so does a python
block's printed output against the unlabelled block right after it (its output as shown).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SHARED

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDERS = Path(__file__).with_name("placeholders.toml")
LANGS = ("console", "bash", "sh", "python", "toml")
REL_TOL = 0.05
"""Shown figures against printed ones: within 5 % (or 0.01 absolute for figures below 0.2),
the rounding of a 3-significant-figure table plus seed-independent drift of a cost model."""
TIMEOUT_S = 600
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?")


@dataclass(frozen=True)
class Block:
    path: str
    line: int
    lang: str
    text: str
    output: str = ""
    """A python block's output as the docs show it: an unlabelled block right after it."""

    @property
    def key(self) -> str:
        return f"{self.path}:{self.line}"


def _blocks(path: Path, root: Path = REPO) -> list[Block]:
    lines = path.read_text().splitlines()
    out: list[Block] = []
    python_end = -1  # the line after the last python block's closing fence
    i = 0
    while i < len(lines):
        m = re.match(r"^\s*```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith("```"):
            j += 1
        body = "\n".join(lines[i + 1:j])
        lang = m.group(1)
        first = body.lstrip().split("\n", 1)[0] if body.strip() else ""
        if lang == "" and re.match(r"^(\$ )?kvbudget ", first):
            lang = "console"
        if lang in LANGS:
            out.append(Block(str(path.relative_to(root)), i + 1, lang, body))
        elif lang == "" and python_end >= 0 and not "".join(lines[python_end:i]).strip():
            out[-1] = replace(out[-1], output=body)
        python_end = j + 1 if lang == "python" else -1
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return [b for f in files for b in _blocks(f)]


def _config() -> dict[str, Any]:
    with PLACEHOLDERS.open("rb") as f:
        return tomllib.load(f)


def _shared() -> Path:
    return Path(os.environ.get("KVBUDGET_SHARED_DIR", str(SHARED)))


@dataclass(frozen=True)
class Prepared:
    text: str
    reduced: tuple[str, ...]
    skip: str | None


def prepare(block: Block, config: dict[str, Any]) -> Prepared:
    """The block as it runs: skipped (with the reason), lines dropped, reduced, replaced."""
    for s in config.get("skip", []):
        if s["match"] in block.text:
            return Prepared(block.text, (), s["reason"])
    text = block.text
    for d in config.get("drop_line", []):
        text = "\n".join(ln for ln in _join(text) if d["match"] not in ln)
    text, reduced = substitute(text, config)
    return Prepared(text, reduced, None)


def substitute(text: str, config: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """``text`` with the reductions (and their reasons) and the replacements applied."""
    reduced = []
    for r in config.get("reduce", []):
        if "unless" in r and r["unless"] in text:  # already as small as the entry makes it
            continue
        if r["match"] in text and r["text"] in text:
            text = text.replace(r["text"], r["by"])
            reduced.append(r["reason"])
    for r in config.get("replace", []):
        text = text.replace(r["text"], r["by"])
    text = text.replace("{shared}", str(_shared())).replace("{repo}", str(REPO))
    return text, tuple(reduced)


def _join(text: str) -> list[str]:
    """Lines with shell continuations (``\\`` at the end) joined."""
    out: list[str] = []
    carry = ""
    for ln in text.splitlines():
        if ln.rstrip().endswith("\\"):
            carry += ln.rstrip()[:-1] + " "
            continue
        out.append(carry + ln)
        carry = ""
    return out


@dataclass(frozen=True)
class Step:
    command: str
    shown: tuple[str, ...]


def console_steps(text: str, lang: str) -> list[Step]:
    """Commands (``$ `` lines, or every line of an unlabelled command block) and the output
    lines a console block shows under each."""
    steps: list[Step] = []
    dollar = any(ln.startswith("$ ") for ln in text.splitlines())
    for ln in _join(text):
        if not ln.strip() or (lang != "console" and ln.lstrip().startswith("#")):
            continue
        if dollar and ln.startswith("$ "):
            steps.append(Step(ln[2:], ()))
        elif dollar and steps:
            steps[-1] = Step(steps[-1].command, (*steps[-1].shown, ln))
        elif not dollar:
            steps.append(Step(ln, ()))
    return steps


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "100"
    return env


def _kvbudget(command: str) -> list[str]:
    """The command as argv: ``kvbudget`` becomes this interpreter running the CLI (the
    checkout under test, not whatever is installed), comments dropped."""
    argv = shlex.split(command, comments=True)
    if not argv or argv[0] != "kvbudget":
        raise AssertionError(f"not a kvbudget command: {command!r}")
    return [sys.executable, "-c", "from kvbudget.cli.main import main; main()", *argv[1:]]


def figures(line: str) -> list[float]:
    return [float(m.replace(",", "")) for m in NUMBER.findall(line)]


def agree(shown: float, real: float) -> bool:
    return abs(shown - real) <= max(REL_TOL * abs(real), 0.01 if abs(real) < 0.2 else 0.0)


def compare_shown(shown: tuple[str, ...], output: str) -> list[str]:
    """Mismatches between the shown output lines and the printed ones (matched by their first
    word; a shown line with no figure must appear as it is; ``...`` stands for lines left
    out)."""
    printed = output.splitlines()
    problems = []
    for ln in shown:
        if ln.strip() == "...":  # lines the docs leave out
            continue
        label = ln.split()[0] if ln.split() else ""
        want = figures(ln)
        candidates = [p for p in printed if p.split() and p.split()[0] == label]
        if not want:
            if not any(ln.strip() in p for p in printed):
                problems.append(f"shown line not printed: {ln!r}")
            continue
        if not any(len(figures(p)) == len(want)
                   and all(agree(a, b) for a, b in zip(want, figures(p), strict=True))
                   for p in candidates):
            problems.append(f"shown {ln!r}; printed {candidates or 'no such line'}")
    return problems


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the tables of ``extra`` merged in (a scenario file's fragment)."""
    out = dict(base)
    for key, value in extra.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else value
    return out


def check_toml(block: Block) -> None:
    """A TOML example parses and validates as what it is: a regression baseline (``format``),
    a regression suite's ``regress.toml`` (``alpha``/``replications`` without a scenario's
    ``gpu``), else a scenario file or a fragment of one (merged onto the default scenario)."""
    from kvbudget.simulator.scenario import default_scenario_dict, validate_spec
    from kvbudget.studies.regress import BaselineFile, SuiteConfig

    data = tomllib.loads(block.text)
    if "format" in data:
        BaselineFile.model_validate(data)
    elif {"alpha", "replications", "scenarios"} & set(data) and "gpu" not in data:
        SuiteConfig.model_validate(data)
    else:
        validate_spec(_merged(default_scenario_dict(), data))


def run_block(block: Block, cwd: Path, config: dict[str, Any]) -> None:
    prep = prepare(block, config)
    if prep.skip is not None:
        pytest.skip(prep.skip)
    if block.lang == "toml":
        check_toml(block)
        return
    if str(_shared()) in prep.text and not _shared().is_dir():
        pytest.skip(f"shared data folder {_shared()} is missing")
    if block.lang == "python":
        script = cwd / f"block_{block.line}.py"
        script.write_text(prep.text + "\n")
        res = subprocess.run([sys.executable, str(script)], cwd=cwd, env=_env(),
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        assert res.returncode == 0, f"{block.key}: {res.stderr[-3000:]}"
        if block.output and not prep.reduced:  # a reduced block's figures differ by design
            shown = tuple(ln for ln in block.output.splitlines() if ln.strip())
            problems = compare_shown(shown, res.stdout)
            assert not problems, f"{block.key}: " + "\n".join(problems)
        return
    text = block.text
    for d in config.get("drop_line", []):
        text = "\n".join(ln for ln in _join(text) if d["match"] not in ln)
    for step in console_steps(text, block.lang):
        command, reduced = substitute(step.command, config)
        res = subprocess.run(_kvbudget(command), cwd=cwd, env=_env(),
                             capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        expected = next((e["code"] for e in config.get("exit", []) if e["match"] in command), 0)
        if expected:  # a command whose documented exit status is not 0
            assert res.returncode == expected, f"{block.key}: {command}: exit {res.returncode}"
        elif step.shown and step.shown[0].startswith("error: "):  # a refusal the docs show
            assert res.returncode == 2, f"{block.key}: {command}: exit {res.returncode}"
            missing = [ln for ln in step.shown if ln not in res.stderr.splitlines()]
            assert not missing, f"{block.key}: {command}: printed {res.stderr!r}"
            continue
        else:
            assert res.returncode == 0, f"{block.key}: {command}\n{res.stderr[-3000:]}"
        if step.shown and not reduced:  # a reduced command's figures differ by design
            problems = compare_shown(step.shown, res.stdout)
            assert not problems, f"{block.key}: " + "\n".join(problems)


BLOCKS = all_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.key for b in BLOCKS])
def test_doc_block(block: Block, tmp_path: Path) -> None:
    config = _config()
    for need in config.get("needs", []):
        if need["match"] in block.text:
            before = [b for b in BLOCKS if need["after"] in b.text]
            assert before, f"placeholders.toml: no block has {need['after']!r}"
            run_block(before[0], tmp_path, config)
    run_block(block, tmp_path, config)


def test_every_placeholder_entry_matches_a_block() -> None:
    config = _config()
    text = "\n".join(b.text for b in BLOCKS)
    for table in ("skip", "drop_line", "reduce", "needs", "exit"):
        for entry in config.get(table, []):
            assert entry["match"] in text, f"placeholders.toml [[{table}]] matches no block: {entry}"


def test_the_collector_finds_labelled_and_command_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("```console\n$ kvbudget presets\nshown 1\n```\n\n```\nkvbudget compare\n```\n"
                   "\n```\nnot a command\n```\n\n```python\nprint(1)\n```\n")
    found = [(b.lang, b.text) for b in _blocks(doc, tmp_path)]
    assert found == [("console", "$ kvbudget presets\nshown 1"), ("console", "kvbudget compare"),
                     ("python", "print(1)")]
    doc.write_text("```python\nprint(1)\n```\n\n```\n1\n```\n\ntext\n\n```python\nprint(2)\n```\n"
                   "\nnot right after\n\n```\n2\n```\n")
    assert [(b.text, b.output) for b in _blocks(doc, tmp_path)] == [("print(1)", "1"),
                                                                    ("print(2)", "")]
    steps = console_steps("$ kvbudget a \\\n   --b 1\nout 2\n$ kvbudget c", "console")
    assert steps == [Step("kvbudget a     --b 1", ("out 2",)), Step("kvbudget c", ())]


def test_shown_figures_are_compared() -> None:
    printed = "policy  x\nconservative  1,000  0.50\n"
    assert compare_shown(("conservative  1,020  0.5",), printed) == []
    assert compare_shown(("conservative  1,200  0.5",), printed)  # 20 % off: reported
    assert compare_shown(("overcommit  1,000  0.5",), printed)  # no such line



def test_a_shown_refusal_must_be_the_printed_one(tmp_path: Path) -> None:
    """A console block whose output is an ``error:`` line passes only when the command exits 2
    and prints that line."""
    command = "$ kvbudget simulate --set disaggregation.prefill.num_replicas=2\n"
    right = ("error: disaggregation.decode: a disaggregated deployment needs a decode pool "
             "([disaggregation.decode] with num_replicas)")
    run_block(Block("x.md", 1, "console", command + right), tmp_path, {})
    with pytest.raises(AssertionError, match="printed"):
        run_block(Block("x.md", 1, "console", command + "error: something else"), tmp_path, {})


def test_a_python_blocks_shown_output_is_compared(tmp_path: Path) -> None:
    run_block(Block("x.md", 1, "python", "print('rate 1.00 s')", "rate 1.02 s"), tmp_path, {})
    with pytest.raises(AssertionError, match=re.escape("shown 'rate 1.50 s'")):
        run_block(Block("x.md", 1, "python", "print('rate 1.00 s')", "rate 1.50 s"), tmp_path, {})


def test_a_toml_example_must_validate() -> None:
    check_toml(Block("x.md", 1, "toml", "[engine]\nmax_num_seqs = 8"))
    with pytest.raises(ValueError, match="max_num_seqs"):
        check_toml(Block("x.md", 1, "toml", "[engine]\nmax_num_seqs = -8"))
    with pytest.raises(ValueError, match="alpha"):
        check_toml(Block("x.md", 1, "toml", "alpha = 2.0"))
