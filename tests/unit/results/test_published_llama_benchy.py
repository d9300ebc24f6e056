"""llama-benchy's outputs, as people publish them, named as what they are.

llama-benchy (github.com/eugr/llama-benchy, MIT) benchmarks an OpenAI-compatible server the
way llama-bench does and reports each test's means and standard deviations; it writes no
request. Its JSON report (the tool's own ``schemas/sample.json``; llama-benchy 0.4.0's in
github.com/mozilla-ai/exp-llama-benchy 6d99ba71 ``data/20260912-l40s/results/``) was refused as
a GuideLLM report missing ``benchmarks[0].requests``; what 0.4.0 printed (github.com/
djangodevreng/dgx-spark-benchmarks 5636536, CC BY 4.0) was read as a CSV whose
``prompt_tokens`` column was to be mapped, its header ``llama-benchy (0.4.0)``; its ``--format
md`` table (github.com/Gabe298/vLLM-llama-benchy-testing-result 82f20558) was called a prose
document quoting a result "with its per-request data", which llama-benchy never writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_llama_benchy import (
    llama_benchy_report_refusal,
    llama_benchy_text_refusal,
)
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PUBLISHED = Path(__file__).parents[2] / "fixtures" / "recordings" / "published"
REPORT = PUBLISHED / "llama-benchy-sample-report-excerpt.json"
CONSOLE = PUBLISHED / "llama-benchy-0.4.0-dgx-spark-muse-glimmer-console-excerpt.log"


def _refusal(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        read_recording(path)
    return str(info.value)


def _table(tmp_path: Path) -> Path:
    """The console's table alone, as ``--save-result FILE --format md`` writes it."""
    lines = CONSOLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| model"))
    rows = [line for line in lines[start:] if line.startswith("|")]
    path = tmp_path / "benchy.md"
    path.write_text("\n".join(rows))
    return path


def test_its_json_report_is_named_not_read_as_a_broken_guidellm_report() -> None:
    said = _refusal(REPORT)
    assert "is a llama-benchy report (llama-benchy 0.2.2.dev7+gcd427054e, --format json" in said
    assert "2 test(s) (prompt size 2048, depth 0, concurrency 1, 2)" in said
    assert "each request's time to first response" in said and "no request's send time" in said
    assert "must hold a 'requests' object" not in said
    # the counts said are the file's: a ttfr value a request, 2 runs at each level
    runs = json.loads(REPORT.read_text())["benchmarks"]
    assert [len(run["ttfr"]["values"]) for run in runs] == [2, 4]


def test_what_it_printed_is_named_with_its_model_levels_and_tests() -> None:
    said = _refusal(CONSOLE)
    assert "is llama-benchy's console output (llama-benchy 0.4.0, as printed" in said
    # 3 tests run (its 'Running test:' lines), 6 table rows (a pp and a tg row a test)
    assert (
        "model muse-glimmer-30b-bf16-spec, concurrency levels [1, 5, 10], 3 test(s) run, "
        "6 table row(s))" in said
    )
    assert "--column" not in said and "prompt_tokens" not in said


def test_its_saved_table_is_named_and_a_readme_quoting_one_stays_prose(tmp_path: Path) -> None:
    said = _refusal(_table(tmp_path))
    assert (
        "is llama-benchy's table (--format md, as saved: model muse-glimmer-30b-bf16-spec, "
        "6 row(s) (each a test's pp or tg figures), concurrency 1, 5, 10)" in said
    )
    assert "prose document" not in said
    readme = tmp_path / "README.md"
    readme.write_text("# Results on a DGX Spark\n\n" + _table(tmp_path).read_text())
    assert "is a prose document" in _refusal(readme)


@pytest.mark.parametrize("command", ["validate", "calibrate", "convert", "report"])
@pytest.mark.parametrize("path", [REPORT, CONSOLE], ids=["report", "console"])
def test_every_command_names_it(tmp_path: Path, path: Path, command: str) -> None:
    args = {
        "validate": ["validate", "--records", str(path), "--out", str(tmp_path / "v")],
        "calibrate": ["calibrate", "--records", str(path)],
        "convert": ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")],
        "report": ["report", str(path)],
    }[command]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "llama-benchy" in said and "writes no per-request file" in said, said
    assert "Traceback" not in said and not (tmp_path / "t.jsonl").exists()


def test_other_files_are_left_to_their_readers() -> None:
    guidellm = {"benchmarks": [{"type_": "generative_benchmark", "requests": {}}]}
    assert llama_benchy_report_refusal(guidellm) is None
    assert llama_benchy_report_refusal({"benchmarks": []}) is None
    assert llama_benchy_text_refusal(b'{"version": "0.4.0"}') is None
    # its banner alone (a line someone quoted) is not its output; a table further down a
    # document is not its saved table
    assert llama_benchy_text_refusal(b"llama-benchy (0.4.0)\nsome notes\n") is None
    quoted = (
        b"notes\n| model | test | t/s | peak t/s | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms) |\n"
    )
    assert llama_benchy_text_refusal(quoted) is None
