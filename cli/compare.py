"""``kvbudget compare``: policies side by side on one workload and seed."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kvbudget.analysis.backlog import loads_said
from kvbudget.analysis.conclusion import conclude
from kvbudget.cli.errors import CliError, check_out_dir, user_errors
from kvbudget.cli.options import (
    MAX_REPLICATIONS,
    AddressOpt,
    ExecutorOpt,
    JobsOpt,
    ScenarioArgs,
    defaults_said,
    policy_names,
    say_assumed,
    say_workload,
    with_scenario_options,
)
from kvbudget.cli.progress import Bar
from kvbudget.cli.simulate import (
    SEED_HELP,
    DrawsOpt,
    IntervalOpt,
    JsonOpt,
    WideOpt,
    interval_draws_of,
    records_for_load,
)
from kvbudget.cli.tables import render_comparison, render_intervals, render_summaries
from kvbudget.studies.compare import Comparison, compare
from kvbudget.studies.executors import EXECUTORS, make_executor
from kvbudget.studies.intervals import check_level, draw_intervals, headline
from kvbudget.studies.setting import once_where_fixed
from kvbudget.studies.sweep import replication_seeds

if TYPE_CHECKING:
    from kvbudget.simulator.scenario import Scenario


def _check_executor(executor: str, address: str | None, jobs: int | None,
                    replications: int) -> None:
    """``--executor``, ``--address`` and ``--jobs`` checked whatever the replications; with
    one replication the runs go in this process, so any of them given is refused, not
    ignored."""
    if executor not in EXECUTORS:
        raise CliError(f"--executor: unknown executor {executor!r}; choose one of: "
                       f"{', '.join(EXECUTORS)}")
    if address is not None and executor != "ray":
        raise CliError("--address: applies to --executor ray only")
    if replications == 1:
        given = [flag for flag, on in (("--executor", executor != "local"),
                                       ("--address", address is not None),
                                       ("--jobs", jobs is not None)) if on]
        if given:
            raise CliError(f"{', '.join(given)}: one replication runs each policy once in "
                           "this process; give --replications N (N > 1) to run on an executor")


DEFAULT_CONFIDENCE = 0.95
"""``--confidence``'s default: the level of the replicated table's intervals."""


def _check_one_run(metric: list[str] | None, confidence: float, replications: int) -> None:
    """``--metric`` and ``--confidence`` shape the replicated table (``-r`` above 1): with one
    replication there is none (each policy's tables print instead), so either given is
    refused, not ignored."""
    if replications > 1:
        return
    given = [flag for flag, on in (("--metric", metric is not None),
                                   ("--confidence", confidence != DEFAULT_CONFIDENCE)) if on]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise CliError(f"{', '.join(given)}: {verb} only to the replicated table (--replications "
                       "N, N > 1: intervals and paired tests); one replication prints each "
                       "policy's own tables (every column: --wide; every figure: --json; "
                       "intervals: --interval LEVEL)")


def _check_interval(level: float | None, num_draws: int, replications: int) -> None:
    if level is None:
        return
    if replications > 1:
        raise CliError("--interval: with --replications the table already gives intervals over "
                       "the seeds; give one of them")
    try:
        check_level(level, num_draws)
    except ValueError as exc:
        raise CliError(f"--interval: {exc}") from None


def _add_intervals(result: Comparison, scn: "Scenario", names: list[str], level: float,
                   num_draws: int) -> None:
    """Each policy's run gets ``summary["intervals"]``: the same draws for every policy."""
    bar = Bar("compare intervals", len(names) * num_draws, "run", lines_from=1)
    try:
        for name, run in zip(names, result.results, strict=True):
            run.summary["intervals"] = draw_intervals(
                scn, name, level=level, num_draws=num_draws,
                progress=lambda _d: bar.update(1)).to_json()
    finally:
        bar.close()


def _say_load(scn: "Scenario", names: list[str], result: Comparison) -> None:
    """``compare``'s ``load:`` line (:func:`loads_said`): the offered load is the same, but
    each policy's backlog follows its own refusals and expiries, so whether the deployment
    kept up is said per policy, runs with one verdict sharing it."""
    workload = scn.workload()  # the one every policy ran (its deadlines place the expired)
    said = loads_said([(name, records_for_load(scn, workload, run), run.summary)
                       for name, run in zip(names, result.results, strict=True)])
    if said:
        typer.echo(said)


@with_scenario_options
def compare_cmd(
    setup: ScenarioArgs,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policy names (the first is the "
                          "baseline of the paired tests).")
    ] = "unlimited,conservative,overcommit,preemptive",
    seed: Annotated[int | None, typer.Option("--seed", help=SEED_HELP + (
        " With -r above 1, the root of the replications' seeds: replication r takes its r-th "
        "child."))] = None,
    replications: Annotated[int, typer.Option(
        "--replications", "-r", min=1, max=MAX_REPLICATIONS,
        help="Seeds per policy (common random numbers); above "
        "1: means with intervals and paired tests against the first policy.")] = 1,
    confidence: Annotated[float, typer.Option(
        "--confidence", min=0.5, max=0.999, help="Level of the intervals (with -r above "
        "1).")] = DEFAULT_CONFIDENCE,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", help="A metric of the replicated table (column or dotted summary path, "
        "e.g. tiers.interactive.ttft_s.p99; repeatable; default: per tier p99 TTFT/TPOT/ITL, "
        "output tokens/s over the run and SLO attainment, then the overall SLO attainment and "
        "the drain time).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write one run directory per policy here "
                                  "(with --replications: runs.parquet and compare.csv).")
    ] = None,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    interval: IntervalOpt = None,
    interval_draws: DrawsOpt = None,
) -> None:
    """Run the same workload and seed under each policy and print them side by side."""
    with user_errors():
        names = policy_names(policies)
        _check_executor(executor, address, jobs, replications)
        _check_one_run(metric, confidence, replications)
        num_draws = interval_draws_of(interval, interval_draws)
        _check_interval(interval, num_draws, replications)
        check_out_dir(out)
        scn = setup.build(seed=seed)
        defaults: str | None = None
        wrote: Path | None = None  # the replicated runs' table, said after the screen
        if replications == 1:
            result = compare(scn, names, metrics=metric)
            defaults = defaults_said(setup)  # said once the trace has loaded
            if interval is not None:
                _add_intervals(result, scn, names, interval, num_draws)
            if out is not None:
                for name, run in zip(names, result.results, strict=True):
                    run.write(out / name)
        else:  # the runs' table names neither the model nor the workload: say them first
            runs, once = once_where_fixed(scn, replications, ["policy"])  # compare's own
            setting = say_workload(scn, defaults=defaults_said(setup), once=once,
                                   seeds=replication_seeds(scn.seed, runs))
            result = _replicated(scn, names, (replications, runs), seed, metric, confidence,
                                 setting, (executor, jobs, address), out)
            replications = result.replications  # 1 where it ran once: its one-run table
            wrote = out
    if as_json:
        if replications == 1:
            say_assumed(defaults)  # on stderr, beside the JSON
            typer.echo(json.dumps(result.summaries(), indent=2))
        else:
            typer.echo(result.table.to_json(orient="records", indent=2))
    elif replications == 1:
        summaries = result.summaries()
        targets = {t.name: (t.ttft_s, t.tpot_s, t.queue_timeout_s) for t in scn.tiers()}
        typer.echo(render_summaries(summaries, wide=wide, slo_targets=targets,
                                    conclusion=conclude(summaries), defaults=defaults))
        _say_load(scn, names, result)
        for s in summaries if interval is not None else ():
            typer.echo(f"\npolicy {s['policy']}:")
            typer.echo(render_intervals(headline(s), s["intervals"]))
    else:
        typer.echo(render_comparison(result, wide=wide))
    if wrote is not None and not as_json:
        typer.echo(f"wrote {wrote}/runs.parquet, compare.csv")


def _replicated(scn: "Scenario", names: list[str], replications: tuple[int, int],
                seed: int | None,
                metric: list[str] | None, confidence: float, setting: tuple[str, ...],
                where: tuple[str, int | None, str | None], out: Path | None) -> Comparison:
    """``compare -r N`` above 1: the replicated runs with a progress bar (``where``: the
    executor, its jobs and its address), their table written into ``out``. ``replications``:
    those asked and those that run (1 where :func:`~kvbudget.studies.compare.compare` runs
    once: every replication the same run)."""
    executor, jobs, address = where
    asked, runs = replications  # runs: 1 where every replication would be the same run
    bar = Bar("compare", len(names) * runs, "run", lines_from=1)
    try:
        with make_executor(executor, jobs=jobs, address=address) as ex:
            result = compare(scn, names, replications=asked, root_seed=seed,
                             metrics=metric, confidence=confidence, executor=ex,
                             progress=bar.update, setting=setting)
    finally:
        bar.close()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        result.runs.to_parquet(out / "runs.parquet", index=False)
        result.table.to_csv(out / "compare.csv", index=False)
    return result


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
