"""A text file whose first line is a comment is said to be text of no tool, not a CSV.

github.com/SvangenStudios/dgx-spark-agent-serving-benchmarks db751d5 ``results/raw/
ab-256k-2026-08-02.log`` (a script's printed A/B report: ``#`` lines, then ``=== arm ...``
sections of ``key: value`` lines) was read as a CSV whose header is its first line, split at
the comma in ``# Raw output — 256K prefill/decode overlap A/B, 2026-08-02``: ``validate
--records`` told it "missing column 'prompt_tokens' ... (the header has: # Raw output — ...)"
and asked for a --column mapping; ``simulate --trace`` "cannot tell the trace format from the
header ...; pass a format". Its layout is reproduced below, not copied (lines made here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces import load_trace

LOG = (
    "# Raw output — 256K prefill/decode overlap A/B, 2026-08-02\n"
    "#\n"
    "# Command:      python3 prefill_decode_overlap.py 256000 <label>\n"
    "=== arm chunk2048, 3 repetitions, started 2026-08-02T03:33:48+02:00 ===\n"
    "\n"
    "CONFIG: chunk2048-r1   prefill=256K\n"
    "  prefill window:           179.4 s  (submit -> first output token)\n"
    "  TTFT new short request:   159.4 s\n"
)
SAID = (
    "begins with '#' (a comment, or a heading), not a header of comma-separated columns, "
    "and no header follows it"
)
TEXT = "a text file (a log, a report, what a script printed) of no tool kvbudget reads"


@pytest.mark.parametrize("name", ["ab-256k-2026-08-02.log", "ab-256k.csv"])
def test_a_log_is_said_to_be_text_of_no_tool(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_text(LOG)
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert (
        f"its first line ('# Raw output — 256K prefill/decode overlap A/B, 2026-08-02') {SAID}"
        in said
    )
    assert SAID in said and TEXT in said
    assert "missing column" not in said and "the header has" not in said
    with pytest.raises(TraceError) as err:
        load_trace(path)
    said = str(err.value)
    assert SAID in said and TEXT in said and "cannot tell the trace format" not in said


def test_simulate_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ab-256k-2026-08-02.log"
    path.write_text(LOG)
    result = CliRunner().invoke(app, ["simulate", "--trace", str(path)])
    assert result.exit_code == 2
    assert SAID in " ".join(result.output.split())


GENERIC = "arrival_s,prompt_tokens,output_tokens\n0.0,100,20\n0.5,120,30\n"


@pytest.mark.parametrize(
    "text",
    [
        GENERIC,  # a real CSV, no comment
        "# arrival_s,prompt_tokens,output_tokens\n0.0,100,20\n0.5,120,30\n",  # savetxt's header
    ],
)
def test_a_csv_still_reads(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    assert load_trace(path).report.rows_loaded == 2


def test_a_comment_above_a_header_keeps_its_refusal(tmp_path: Path) -> None:
    # a header below the comment: not said to be text (the loader reads no comment line)
    path = tmp_path / "trace.csv"
    path.write_text("# made by a script, 2026\n" + GENERIC)
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert "cannot tell the trace format from the header '# made by a script, 2026'" in str(
        err.value
    )
