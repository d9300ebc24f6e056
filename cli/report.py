"""``kvbudget report``: an HTML report with embedded figures, and the figures as PNG files."""

from pathlib import Path
from typing import Annotated

import typer

from kvbudget.analysis.report import build_report
from kvbudget.cli.errors import CliError, check_out_dir, user_errors
from kvbudget.cli.progress import Bar
from kvbudget.results.recordings import (
    detect_recording_format,
    read_recording,
    recording_tool,
    refuse_unreadable_records,
)
from kvbudget.results.run_result import REQUESTS_FILE
from kvbudget.workloads.errors import TraceError

REPORT_USAGE = "kvbudget validate --records {} --out DIR"
"""How a load tool's folder names the file in it to report on: report takes no recording, the
simulated run validate writes to DIR/sim (said after)."""


def _refuse_recording(path: Path, flag: str = "") -> None:
    """A load tool's result file given where a run directory is meant was told only "not a
    run directory (a file, not a directory)": refused naming the tool and the command that
    reads it (``validate --records``, whose ``--out`` holds a simulated run ``report`` takes).
    A file kvbudget names but cannot read (a tool's aggregates: genai-perf's summary, k6's
    output) was told the same bare line; it is now told what the file is and what to pass,
    as ``validate --records`` tells it, the CSV and JSON files of aggregate figures (Locust's
    ``*_stats.csv``: ``results.recorded_aggregates``) among them. A load tool's output folder
    (AIPerf's artifact directory, its ``--num-profile-runs`` folder, inference-perf's reports)
    was told "not a run directory (requests.parquet is missing)": it is named with the file in
    it to pass to ``validate --records``."""
    folder = path.is_dir()
    if (folder and (path / REQUESTS_FILE).exists()) or not (folder or path.is_file()):
        return
    try:
        fmt = detect_recording_format(path, usage=REPORT_USAGE)
        if fmt == "records":
            refuse_unreadable_records(path)
    except TraceError as exc:
        said = exc.problem
        if folder and said.startswith("is not a kvbudget run directory"):
            return  # a folder of other files (a study's): the run reader names the runs in it
        if said.startswith(("is ", "holds ")):  # the refusal says what the file or folder is
            raise CliError(
                f"{flag}{path}: "
                + (
                    f"{said}; report takes the simulated run that validate --records FILE --out "
                    "DIR writes to DIR/sim"
                    if folder
                    else f"not a run directory: it {said}"
                )
            ) from None
        return
    except OSError:
        return
    if fmt in ("records", "run"):
        return
    _refuse_unread(path, fmt, flag)
    raise CliError(
        f"{flag}{path}: a load tool's recording ({recording_tool(path, fmt)}), not a run "
        "directory: "
        f"kvbudget validate --records {path} --out DIR compares a simulation of it "
        "with it (DIR/validate.png, validation.csv) and writes the simulated run to "
        "DIR/sim, which report takes"
    )


def _refuse_unread(path: Path, fmt: str, flag: str) -> None:
    """A tool's file of requests that ``validate --records`` refuses by name (a vllm bench serve
    run of a pooling or audio backend: its requests generated no text) was sent on to
    ``validate --records``, which refused it: it is told what the file is, as ``simulate
    --trace`` tells it (results/recording_named.py)."""
    try:
        read_recording(path, format=fmt)
    except TraceError as exc:
        if exc.problem.startswith(("is ", "holds ")):
            raise CliError(f"{flag}{path}: not a run directory: it {exc.problem}") from None
    except (OSError, ValueError, LookupError, RecursionError):
        return


def report_cmd(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories (kvbudget simulate --out, or a replay's --out).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Directory for report.html and the PNG files.")
    ] = Path("kvbudget-report"),
    measured: Annotated[
        Path | None,
        typer.Option("--measured", help="A measured run (live replay) to compare each run with."),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seed of the bootstrap intervals.")
    ] = 0,
) -> None:
    """Write one self-contained HTML report (figures embedded) and PNGs for one or more runs."""
    with user_errors():
        check_out_dir(out)
        for path in run_dirs:
            _refuse_recording(path)
        if measured is not None:
            _refuse_recording(measured, "--measured: ")
        bar = Bar("report", None, unit="step")
        try:
            report = build_report(run_dirs, out, measured=measured, seed=seed, progress=bar.set)
        finally:
            bar.close()
    typer.echo(f"wrote {report.html_path} and {len(report.png_paths)} PNG files in {out}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
