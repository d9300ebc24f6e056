"""``kvbudget simulate`` (and the options ``compare`` shares with it)."""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.analysis.backlog import load_said, with_deadlines
from kvbudget.cli.errors import CliError, check_out_dir, user_errors
from kvbudget.cli.help_text import POLICY_NAMES
from kvbudget.cli.options import (
    ScenarioArgs,
    defaults_said,
    flag_named,
    say_assumed,
    set_keys,
    with_scenario_options,
)
from kvbudget.cli.progress import Bar
from kvbudget.cli.tables import render_intervals, render_summaries
from kvbudget.results.said import WIDTH
from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import make_scenario
from kvbudget.simulator.spec_decode import draft_warning
from kvbudget.studies.intervals import check_level, headline, scenario_intervals

if TYPE_CHECKING:
    from kvbudget.results.run_result import RunResult
    from kvbudget.simulator.scenario import Scenario
    from kvbudget.workloads.workload import Workload


SEED_HELP = "Seed of every random draw (default: the scenario's, 0 in the default one)."
SeedOpt = Annotated[int | None, typer.Option("--seed", help=SEED_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help=f"Every column (tables fit {WIDTH} columns by default).")]
IntervalOpt = Annotated[float | None, typer.Option(
    "--interval", help="Give the headline figures an interval at this level (e.g. 0.9): the "
    "run again with the next seeds and the step model's constants drawn from their stated "
    "ranges, or from a calibrated cost file's posterior (docs/fidelity.md).")]
DEFAULT_DRAWS = 40
"""Runs behind ``simulate``'s and ``compare``'s ``--interval`` unless ``--interval-draws``
says."""
DrawsOpt = Annotated[int | None, typer.Option(
    "--interval-draws", help=f"Runs behind --interval (each one simulation; default "
    f"{DEFAULT_DRAWS}).")]


def interval_draws_of(level: float | None, draws: int | None) -> int:
    """The runs behind ``--interval``: ``--interval-draws``, else :data:`DEFAULT_DRAWS`; the
    count given without ``--interval`` is refused, not ignored."""
    if level is None and draws is not None:
        raise CliError("--interval-draws: applies with --interval only")
    return DEFAULT_DRAWS if draws is None else draws


def build_scenario(
    *,
    scenario: Path | None,
    overrides: list[str] | None,
    policy: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    trace: Path | None = None,
    trace_format: str | None = None,
    cost_model: Path | None = None,
    num_gpu_blocks: int | None = None,
    block_size: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    engine: str | None = None,
    typed: Sequence[tuple[str, str]] = (),
    say_fitted: bool = True,
    block_size_ran: int | None = None,
) -> "Scenario":
    """The scenario file (or the embedded default) with the command-line flags applied
    (:func:`kvbudget.simulator.scenario.make_scenario`; errors as :class:`CliError`, a field's
    led by what the user typed: ``typed``, the ``(flag, scenario key)`` of what the caller put
    in ``overrides`` from its own flags, and each ``--set`` named by its key, not the file's;
    ``say_fitted``: :meth:`~kvbudget.simulator.scenario.Scenario.sim_config`'s;
    ``block_size_ran``: a recording's block size, :func:`make_scenario`'s)."""
    knobs = {"num_gpu_blocks": num_gpu_blocks, "block_size": block_size,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
             "name": engine}
    try:
        return make_scenario(scenario, overrides or (), policy=policy, gpu=gpu, model=model,
                             seed=seed, trace=trace, trace_format=trace_format,
                             cost_model=cost_model, engine=knobs, say_fitted=say_fitted,
                             block_size_ran=block_size_ran)
    except ValueError as exc:  # a --gpu, --model or engine flag is named as typed
        flags = [(f"--{key}", key) for key, value in (("gpu", gpu), ("model", model))
                 if value is not None]
        flags += [("--engine" if key == "name" else "--" + key.replace("_", "-"),
                   f"engine.{key}") for key, value in knobs.items() if value is not None]
        named = flag_named(exc, scenario, [*typed, *flags, *set_keys(overrides or ())])
        raise named if isinstance(named, CliError) else CliError(str(exc)) from None
    except FileNotFoundError as exc:
        raise CliError(str(exc)) from None


SIMULATE_LINES_FROM = 100_000
"""Requests from which a ``simulate`` not at a terminal writes progress lines (cli.progress)."""


def run_one(scn: "Scenario", policy_name: str | None, label: str,
            workload: "Workload | None" = None) -> "RunResult":
    """One run of ``scn`` (``workload``: its workload, where the caller has it already)."""
    workload = scn.workload() if workload is None else workload
    policy = scn.make_policy(policy_name)
    config = scn.sim_config()
    # at a terminal tqdm's bar; elsewhere silent, except a run of at least SIMULATE_LINES_FROM
    # requests, which writes a line every half minute
    bar = Bar(label, len(workload), "req", lines_from=SIMULATE_LINES_FROM)
    try:
        result = simulate(workload, policy, config, progress=bar.update)
    finally:
        bar.close()
    scn.note_defaulted(result.summary)
    return result


@with_scenario_options
def simulate_cmd(
    setup: ScenarioArgs,
    policy: Annotated[str | None, typer.Option(
        "--policy", help=f"Admission policy: {POLICY_NAMES}; default: the scenario's "
        "(conservative in the default scenario).")] = None,
    seed: SeedOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write requests/timeline parquet + summary.json "
                                  "(and token_gaps.parquet; attempts.parquet with client models).")
    ] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    interval: IntervalOpt = None,
    interval_draws: DrawsOpt = None,
) -> None:
    """Simulate one policy on a scenario (the embedded default when none is given)."""
    with user_errors():
        num_draws = interval_draws_of(interval, interval_draws)
        check_out_dir(out)
        scn = setup.build(policy=policy, seed=seed)
        config = scn.sim_config()
        if as_json:  # the table says it above its figures, the JSON in its warnings
            warning = draft_warning(config.engine.speculative_config, config.model)
            if warning:
                typer.echo(f"warning: {warning}", err=True)
        workload = scn.workload()  # the nominal run's (intervals: theirs is the same)
        if interval is None:
            result = run_one(scn, None, f"simulate {scn.spec.policy}", workload)
        else:
            result = run_with_intervals(scn, interval, num_draws)
        defaults = defaults_said(setup)  # said once the trace has loaded
        written = result.write(out) if out is not None else []
    if as_json:
        say_assumed(defaults)  # on stderr, beside the JSON
        typer.echo(json.dumps(result.summary, indent=2))
    else:
        targets = {t.name: (t.ttft_s, t.tpot_s, t.queue_timeout_s) for t in scn.tiers()}
        typer.echo(render_summaries([result.summary], wide=wide, slo_targets=targets,
                                    defaults=defaults))
        load = load_said(records_for_load(scn, workload, result), result.summary)
        if load:
            typer.echo(load)
        if interval is not None:
            typer.echo("")
            typer.echo(render_intervals(headline(result.summary), result.summary["intervals"]))
        if out is not None:
            typer.echo(f"wrote {out}/{', '.join(written)}")


def records_for_load(scn: "Scenario", workload: "Workload", result: "RunResult"
                     ) -> Mapping[str, Any]:
    """``result``'s record columns with each request's admission deadline (the workload's, else
    its tier's wait after its arrival: :func:`~kvbudget.analysis.backlog.with_deadlines`), so
    that the load line places when a request that waited in the gateway's queue and expired
    left it."""
    return with_deadlines(result.record_columns, workload.deadline_s,
                          {t.name: t.queue_timeout_s for t in scn.tiers()})


def run_with_intervals(scn: "Scenario", level: float, num_draws: int) -> "RunResult":
    """The scenario's run with ``summary["intervals"]`` (:mod:`kvbudget.studies.intervals`)."""
    try:
        check_level(level, num_draws)
    except ValueError as exc:
        raise CliError(f"--interval: {exc}") from None
    bar = Bar(f"simulate {scn.spec.policy} with intervals", num_draws + 1, "run", lines_from=1)
    try:
        result, intervals = scenario_intervals(scn, None, level=level, num_draws=num_draws,
                                               progress=lambda _d: bar.update(1))
    finally:
        bar.close()
    result.summary["intervals"] = intervals.to_json()
    return result


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
