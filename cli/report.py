"""``kvbudget report``: an HTML report with embedded figures, and the figures as PNG files."""

from pathlib import Path
from typing import Annotated

import typer

from kvbudget.analysis.report import build_report
from kvbudget.cli.errors import check_out_dir, user_errors
from kvbudget.cli.progress import Bar


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
    seed: Annotated[int, typer.Option("--seed", min=0,
                                      help="Seed of the bootstrap intervals.")] = 0,
) -> None:
    """Write one self-contained HTML report (figures embedded) and PNGs for one or more runs."""
    with user_errors():
        check_out_dir(out)
        bar = Bar("report", None, unit="step")
        try:
            report = build_report(run_dirs, out, measured=measured, seed=seed,
                                  progress=bar.set)
        finally:
            bar.close()
    typer.echo(f"wrote {report.html_path} and {len(report.png_paths)} PNG files in {out}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
