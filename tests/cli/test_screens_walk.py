"""A newcomer's walk through the first screens (README, --help, common mistakes): what each
said that was not so, or left out what to do next."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kvbudget.cli.live import RecordsFormatOpt
from kvbudget.cli.main import app
from kvbudget.cli.options import TRACE_OPTIONS
from kvbudget.results.recording import RECORDING_FORMATS
from kvbudget.workloads.traces.options import FORMATS
from tests.conftest import unwrapped


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _names_listed(annotation: Any) -> list[str]:
    """The names an option's help lists before its parenthesis: ``a, b or c (...)``."""
    text = annotation.__metadata__[0].help
    head = text.split(" (", 1)[0]
    return [n.strip() for n in re.split(r",| or ", head) if n.strip()]


def test_the_records_format_help_lists_every_reader_and_only_those() -> None:
    """--records-format's help was a list written by hand (llmd-report was added at its end,
    out of the readers' order): it now is the reader registry's, so a new reader is listed."""
    assert _names_listed(RecordsFormatOpt) == list(RECORDING_FORMATS)


def test_the_trace_format_help_lists_every_format_the_loader_reads() -> None:
    """--format's help listed six formats: splitwise-sim's, which the loader reads and names
    in its refusals ("pass a format (..., splitwise, ...)"), was left out."""
    assert _names_listed(TRACE_OPTIONS["format"][0]) == list(FORMATS)


def test_a_format_the_loader_reads_is_taken_by_simulate(tmp_path: Path) -> None:
    """``simulate --trace FILE --format splitwise --window 0:10`` (any trace option beside
    the format) was refused: "workload.format must be 'azure', ..., 'servegen' or 'generic',
    got 'splitwise'" (the scenario's [workload] table had its own, older list of formats),
    while the detection error advises "pass a format (..., splitwise, ...)"."""
    trace = tmp_path / "s.csv"
    trace.write_text("request_id,request_type,application_id,arrival_timestamp,batch_size,"
                     "prompt_size,token_size\n0,2,0,0.5,1,100,10\n1,2,0,1.0,1,200,20\n")
    code, stdout, stderr = run("simulate", "--trace", trace, "--format", "splitwise",
                               "--window", "0:10")
    assert code == 0, stderr
    assert "workload s: 2 requests" in unwrapped(stdout)[0], stdout
    code, _, stderr = run("simulate", "--trace", trace, "--format", "splitwize",
                          "--window", "0:10")
    assert code == 2
    assert "splitwise" in stderr and "Traceback" not in stderr, stderr
