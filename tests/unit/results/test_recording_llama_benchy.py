"""llama-benchy's own files, made by running it here, named as what they are.

llama-benchy 0.4.0 (github.com/eugr/llama-benchy, MIT; PyPI), run by
``scripts/make_recording_fixtures.sh llama-benchy`` against the CPU vLLM serving the tiny model
(a 32-token prompt, 8 output tokens, depth 0 and 32, concurrency 1 and 2, 2 runs a test):
``console.log`` is what it printed with its table (``--format md``), ``results.{md,json,csv}``
each ``--format``'s ``--save-result`` file and ``console-save-*.log`` what those runs printed.
Before: its CSV was called a file of aggregates with no tool named; the console of a
``--save-result`` run was named with no test counted and the saved table's rows were called
tests (8 "test row(s)" for the 4 tests run: a pp and a tg row each, llama-benchy 0.4.0
``results.py:366-432``); ``simulate --trace`` named none of the files ("cannot tell the trace
format from the header 'llama-benchy (0.4.0)'"). The figures checked here are read from the
files.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_llama_benchy import llama_benchy_text_refusal

RUN = Path(__file__).parents[2] / "fixtures" / "recordings" / "llama-benchy-0.4.0"
FILES = sorted(p.name for p in RUN.iterdir())


def _said(*args: str) -> str:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 2, res.output
    said = " ".join(res.stderr.split())
    assert said.count("error:") == 1 and "Traceback" not in said
    return said


def test_the_run_kept_each_format_and_its_console() -> None:
    assert FILES == [
        "console-save-csv.log",
        "console-save-json.log",
        "console-save-md.log",
        "console.log",
        "results.csv",
        "results.json",
        "results.md",
    ]


@pytest.mark.parametrize("name", FILES)
@pytest.mark.parametrize("command", ["validate", "simulate", "report"])
def test_every_file_is_named_as_llama_benchys_by_every_command(name: str, command: str) -> None:
    path = str(RUN / name)
    args = {
        "validate": ["validate", "--records", path],
        "simulate": ["simulate", "--trace", path],
        "report": ["report", path],
    }[command]
    said = _said(*args)
    assert "llama-benchy" in said and "writes no per-request file" in said, said
    assert "record the load with a tool kvbudget reads" in said
    assert "cannot tell the trace format" not in said and "aggregate figures" not in said
    if command == "simulate":
        assert f"{path}: not a trace: it is " in said


def _levels(tests: list[str]) -> str:
    return ", ".join(sorted({m.group(1) for t in tests if (m := re.search(r"\(c(\d+)\)$", t))}))


def test_its_json_report_is_said_with_its_version_model_tests_and_levels() -> None:
    doc = json.loads((RUN / "results.json").read_text())
    runs = doc["benchmarks"]
    said = _said("validate", "--records", str(RUN / "results.json"))
    assert f"is a llama-benchy report (llama-benchy {doc['version']}, --format json, " in said
    depths = ", ".join(str(d) for d in sorted({r["context_size"] for r in runs}))
    levels = ", ".join(str(c) for c in sorted({r["concurrency"] for r in runs}))
    assert f"model {doc['model']}): {len(runs)} test(s) (prompt size 32, depth {depths}, " in said
    assert f"concurrency {levels})" in said
    assert (doc["version"], doc["model"], len(runs), levels) == ("0.4.0", "tiny", 4, "1, 2")


def test_what_it_printed_counts_the_tests_it_ran_and_its_table_rows() -> None:
    text = (RUN / "console.log").read_text()
    tests = len(re.findall(r"^Running test: ", text, re.MULTILINE))
    rows = [line for line in text.splitlines() if re.match(r"\| tiny ", line)]
    said = _said("validate", "--records", str(RUN / "console.log"))
    assert (
        "is llama-benchy's console output (llama-benchy 0.4.0, as printed: model tiny, "
        f"concurrency levels [1, 2], {tests} test(s) run, {len(rows)} table row(s))" in said
    )
    assert (tests, len(rows)) == (4, 8)  # a pp and a tg row a test


@pytest.mark.parametrize("fmt", ["md", "json", "csv"])
def test_what_a_saving_run_printed_says_where_its_results_went(fmt: str) -> None:
    path = RUN / f"console-save-{fmt}.log"
    assert f"Saving results to results.{fmt} in {fmt.upper()} format..." in path.read_text()
    said = _said("validate", "--records", str(path))
    assert "model tiny, concurrency levels [1, 2], 4 test(s) run, its results saved to " in said
    assert f"results.{fmt} (--format {fmt}), not in this file)" in said


@pytest.mark.parametrize("name", ["results.md", "results.csv"])
def test_its_saved_tables_are_said_with_their_model_rows_and_levels(name: str) -> None:
    if name.endswith(".csv"):
        rows = list(csv.DictReader((RUN / name).read_text().splitlines()))
        models, tests = {r["model"] for r in rows}, [r["test_name"] for r in rows]
    else:
        cells = [line.split("|") for line in (RUN / name).read_text().splitlines()[2:]]
        models, tests = {c[1].strip() for c in cells}, [c[2].strip() for c in cells]
    said = _said("validate", "--records", str(RUN / name))
    fmt = name.rsplit(".", 1)[1]
    assert (
        f"is llama-benchy's table (--format {fmt}, as saved: model {', '.join(models)}, "
        f"{len(tests)} row(s) (each a test's pp or tg figures), concurrency {_levels(tests)})"
        in said
    )
    assert (models, len(tests), _levels(tests)) == ({"tiny"}, 8, "1, 2")


def test_a_table_of_one_level_has_no_concurrency_suffix_and_ran_at_1() -> None:
    """Hand-made: llama-benchy writes ``(cN)`` only when the run's top level is above 1
    (0.4.0 ``results.py:369-371``)."""
    header = (RUN / "results.csv").read_text().splitlines()[0]
    one = f"{header}\ntiny,pp32,700.0,6.0,700.0,6.0,,,,,23.0,0.2,21.0,0.2,23.0,0.3\n"
    said = llama_benchy_text_refusal(one.encode())
    assert said is not None and "1 row(s) (each a test's pp or tg figures), concurrency 1)" in said


def test_other_files_keep_their_readers_words(tmp_path: Path) -> None:
    """Hand-made: a CSV of other aggregates, a JSON document of another tool."""
    other = tmp_path / "other.csv"
    other.write_text("model,test_name,t_s_mean\ntiny,pp32,700.0\n")
    assert llama_benchy_text_refusal(other.read_bytes()) is None
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"benchmarks": [{"requests": {}}]}, indent=2))
    said = _said("simulate", "--trace", str(doc))
    # GuideLLM's layout (its benchmarks list), named by GuideLLM's reader, not llama-benchy's
    assert "is guidellm's report" in said and "llama-benchy" not in said, said
