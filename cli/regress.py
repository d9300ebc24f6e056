"""``kvbudget regress``: a CI gate that fails when policy metrics get worse (docs/regress.md)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import user_errors

if TYPE_CHECKING:
    from kvbudget.studies.regress import RegressReport


def regress_cmd(
    suite: Annotated[
        Path, typer.Argument(help="A folder of scenario files (with an optional suite.toml), "
                                  "or one scenario file.")
    ],
    baseline: Annotated[
        Path, typer.Option("--baseline", help="The folder of baseline files (NAME.toml/.json).")
    ],
    update: Annotated[
        bool, typer.Option("--update", help="Rewrite the baselines from this run's results.")
    ] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write a JUnit XML report here.")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", min=1, max=4096,
                     help="Parallel processes (default: all cores)."),
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option("--alpha", help="Significance level of the Welch test (default: the "
                                     "suite's, else 0.05)."),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field of every scenario: key=value "
                                   "(dotted, repeatable)."),
    ] = None,
) -> None:
    """Run a suite of scenarios and compare their metrics with the baselines.

    Exit 0 when nothing regressed, 1 when a metric regressed, 2 on bad input.
    """
    from kvbudget.studies.regress import load_suite, regress, render_text

    with user_errors():
        s = load_suite(suite, overrides or [])
        bar: Any = None

        def start(total: int) -> None:
            nonlocal bar
            from tqdm import tqdm

            bar = tqdm(total=total, desc="regress", unit="run", leave=False, disable=None)

        def done(_task: tuple[str, int]) -> None:
            if bar is not None:
                bar.update(1)

        try:
            report = regress(s, baseline, update=update, jobs=jobs, overrides=overrides or [],
                             alpha=alpha, on_start=start, on_done=done)
        finally:
            if bar is not None:
                bar.close()
        _write_reports(report, junit, markdown)
    typer.echo(render_text(report))
    if report.regressed and not update:
        raise typer.Exit(1)


def _write_reports(report: "RegressReport", junit: Path | None, markdown: Path | None) -> None:
    from kvbudget.studies.regress import render_junit, render_markdown

    for path, text in ((junit, render_junit), (markdown, render_markdown)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(report))


def register(app: typer.Typer) -> None:
    app.command("regress")(regress_cmd)
