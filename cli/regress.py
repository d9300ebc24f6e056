"""``kvbudget regress``: a CI gate that fails when policy metrics get worse (docs/regress.md)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import CliError, trace_refusal, user_errors
from kvbudget.studies.regress import (
    RegressInputError,
    load_suite,
    regress,
    render_junit,
    render_markdown,
    render_text,
)

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
    with user_errors():
        _check_report_paths(junit, markdown)
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
        except RegressInputError as exc:  # a scenario's trace: a load tool's file named so
            if exc.trace is None:
                raise
            raise CliError(f"{exc.scenario}: {trace_refusal(exc.trace)}") from None
        finally:
            if bar is not None:
                bar.close()
        _write_reports(report, junit, markdown)
    typer.echo(render_text(report))
    if report.regressed and not update:
        raise typer.Exit(1)


# How a report this command wrote begins: such a file (or an empty one) is replaced, as --out
# replaces a run directory; any other existing file is refused, not overwritten.
_REPORT_STARTS = {"--junit": ('<?xml version="1.0" encoding="utf-8"?>\n'
                              '<testsuites name="kvbudget regress"'),
                  "--markdown": "## kvbudget regress: "}


def _check_report_paths(junit: Path | None, markdown: Path | None) -> None:
    """Before any run: each report path is a new file, an empty one or a report of this
    command's (replaced); a directory, a path under a file or any other file is refused."""
    if junit is not None and markdown is not None and junit.resolve() == markdown.resolve():
        raise CliError(f"--junit and --markdown both name {junit}: give two files")
    for flag, path in (("--junit", junit), ("--markdown", markdown)):
        if path is None:
            continue
        if str(path) in ("", "."):
            raise CliError(f"{flag}: give a file name")
        if path.is_dir():
            raise CliError(f"{flag}: {path} is a directory; give a file name")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise CliError(f"{flag}: {parent} is a file, not a directory")
                break
        if path.exists():
            try:
                with path.open("rb") as fh:
                    head = fh.read(len(_REPORT_STARTS[flag]))
            except OSError as exc:
                raise CliError(f"{flag}: {path}: cannot read ({exc.strerror})") from None
            if head and head != _REPORT_STARTS[flag].encode():
                raise CliError(f"{flag}: {path} exists and is not a report of kvbudget regress; "
                               "not overwritten (remove it or choose another file)")


def _write_reports(report: "RegressReport", junit: Path | None, markdown: Path | None) -> None:
    for path, text in ((junit, render_junit), (markdown, render_markdown)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text(report))


def register(app: typer.Typer) -> None:
    app.command("regress")(regress_cmd)
