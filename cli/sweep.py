"""``kvbudget sweep``, ``tune`` and ``capacity``: many simulations on local cores or on Ray."""

import json
import math
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.analysis.pareto import plot_attainment, plot_pareto
from kvbudget.cli.errors import CliError, check_out_dir, fail, user_errors
from kvbudget.cli.options import (
    MAX_REPLICATIONS,
    AddressOpt,
    ExecutorOpt,
    JobsOpt,
    ScenarioArgs,
    defaults_said,
    policy_names,
    refuse_searched,
    say_workload,
    with_scenario_options,
)
from kvbudget.cli.progress import Bar
from kvbudget.cli.study_intervals import (
    StudyDrawsOpt,
    StudyIntervalOpt,
    StudyReplicationsOpt,
    span,
    study_replications,
)
from kvbudget.cli.tables import QUANTILES_OVER, few_in_runs_said, render, short_metric
from kvbudget.results.said import WIDTH, figure, fill
from kvbudget.studies.capacity import (
    BURST,
    CapacitySpec,
    attainment_curve,
    capacity,
    curve_scales,
    first_miss_rps,
    order_consistent,
)
from kvbudget.studies.executors import make_executor
from kvbudget.studies.sweep import (
    Axis,
    RunError,
    StoredRuns,
    SweepPlan,
    parse_axis,
    run_sweep,
    summarize_points,
)
from kvbudget.studies.tune import (
    DEFAULT_OBJECTIVE,
    Constraint,
    Param,
    TuneSpec,
    check_param_keys,
    evaluations_frame,
    tune,
)
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.studies.capacity import CapacityResult
    from kvbudget.studies.executors import LocalExecutor, RayExecutor
    from kvbudget.studies.tune import Evaluation, TuneResult

THROUGHPUT = "batch_sustained_output_tokens_per_s"
"""The sweep's throughput column (table and Pareto plot): batch tokens over the run, first arrival
to last finish (the single-run tables' ``out tok/s``). Over the arrival window every
configuration that completes the same requests shows the same figure."""

ReplicationsOpt = Annotated[
    int, typer.Option("--replications", "-r", min=1, max=MAX_REPLICATIONS,
                      help="Seeds per configuration.")
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", min=0,
                 help="Root seed: replication r uses its r-th child (default: the scenario's)."),
]
PoliciesOpt = Annotated[
    str | None, typer.Option("--policies", help="Comma-separated policy names (default: the "
                             "scenario's policy, conservative in the default one).")
]
OBJECTIVE_HELP = ("Metric column to optimise (default: the batch tier's output tokens over "
                  f"first arrival to last finish, {DEFAULT_OBJECTIVE}, the tables' out tok/s).")

SloOpt = Annotated[
    list[str] | None,
    typer.Option("--slo", "--constraint", metavar="METRIC<=VALUE",
                 help="A limit on any summary metric, METRIC<=VALUE or METRIC>=VALUE, the metric "
                 "as a dotted summary path (tiers.interactive.ttft_s.p99<=2.0) or a runs-table "
                 "column (interactive_ttft_p99_s<=2.0); repeatable."),
]


def _executor(kind: str, jobs: int | None, address: str | None) -> "LocalExecutor | RayExecutor":
    return make_executor(kind, jobs=jobs, address=address)


@contextmanager
def _interrupts(message: str) -> Iterator[None]:
    """An interrupt or a run that failed inside the simulator: one line, no traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise fail(f"interrupted; {message}", 130) from None
    except RunError as exc:
        raise fail(f"{exc}; {message}", 1) from None


def _fmt(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


@with_scenario_options
def sweep_cmd(
    setup: ScenarioArgs,
    out: Annotated[Path, typer.Option("--out", help="Output directory (parts + sweep.parquet).")],
    grid: Annotated[
        list[str] | None,
        typer.Option("--grid", help="An axis: key=v1,v2,... or key=lo:hi:n (repeatable)."),
    ] = None,
    policies: PoliciesOpt = None,
    replications: ReplicationsOpt = 3,
    seed: SeedOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Keep the runs already in --out; run the rest.")
    ] = False,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Write the plots.")] = True,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column, full names.")] = False,
) -> None:
    """Simulate a grid of configurations x replications into one table (a row per run).

    Every configuration sees the same arrivals in a given replication (common random numbers).
    Finished runs are kept in --out as they complete; rerun with --resume after an interrupt.
    """
    with user_errors():
        check_out_dir(out)
        scales = setup.trace_args.rate_scales()
        rate_scale = None if scales is None else ",".join(f"{v:g}" for v in scales)
        axes = _sweep_axes(policies, grid, rate_scale)
        refuse_searched(setup, "sweep", {a.key: f"--grid {a.key}" for a in axes
                                         if a.key not in ("policy", "rate_scale")})
        # a grid over a disaggregated pool's field gives every run that pool: the scenario is
        # built with the axis's first value (without it a pool the grid alone gives was
        # refused as missing, and a --set of it as unused)
        pools = tuple(json_set(a.key, a.values[0]) for a in axes
                      if a.key.startswith("disaggregation."))
        scn = replace(setup, overrides=(*setup.overrides, *pools)).build(with_rate_scale=False)
        plan = SweepPlan(scn, tuple(axes), replications, seed)  # once where each is the same
        table = _sweep_with_bar(plan, _executor(executor, jobs, address), out, resume=resume,
                                defaults=defaults_said(setup, varies=[a.key for a in axes]))
        metrics = [m for m in ("interactive_ttft_p99_s", THROUGHPUT,
                               "overall_slo_attainment", "offered_rate_rps")
                   if m in table.columns]
        points = summarize_points(table, metrics)
        points.to_csv(out / "points.csv", index=False)
        axis_cols = [a.key for a in axes if a.key != "policy"]
        _print_points(points, axis_cols, metrics, wide=wide, few=few_in_runs_said(
            table.to_dict(orient="records"),
            [m.partition("_")[0] for m in metrics if "_p99_" in m]))
        written = [out / "sweep.parquet", out / "points.csv"]
        if plot:
            written += _sweep_plots(table, points, out, axis_cols=axis_cols, metrics=metrics,
                                    rate_scale=rate_scale)
    typer.echo("wrote " + ", ".join(str(p) for p in written))


def _short_axes(axis_cols: Sequence[str]) -> list[str]:
    """The axes' short names: each key's last part, or as many parts as tell it apart from
    another axis's (two pools' ``num_replicas`` read ``prefill.num_replicas`` and
    ``decode.num_replicas``, not twice ``num_replicas``)."""
    short = []
    for c in axis_cols:
        if c == "rate_scale":
            short.append("rate x")
            continue
        parts = c.split(".")
        n = 1
        while n < len(parts) and any(o != c and o.split(".")[-n:] == parts[-n:]
                                     for o in axis_cols):
            n += 1
        short.append(".".join(parts[-n:]))
    return short


def json_set(key: str, value: Any) -> str:
    """``KEY=VALUE`` for ``--set``, the value as TOML reads it back (a string quoted)."""
    return f"{key}={json.dumps(value)}"


def _sweep_axes(policies: str | None, grid: list[str] | None, rate_scale: str | None
                ) -> list[Axis]:
    """The sweep's axes: the policies, each ``--grid`` axis, then the rate scales."""
    axes: list[Axis] = []
    names = policy_names(policies)
    if names:
        axes.append(Axis("policy", tuple(names)))
    axes += [parse_axis(g) for g in grid or []]
    if rate_scale is not None:
        axes.append(parse_axis(f"rate_scale={rate_scale}"))
    return axes


def _sweep_with_bar(plan: SweepPlan, ex: "LocalExecutor | RayExecutor", out: Path, *,
                    resume: bool, defaults: str | None = None) -> "pd.DataFrame":
    """:func:`~kvbudget.studies.sweep.run_sweep` with a progress bar and its rate line;
    ``defaults``: what was left to the default scenario, said with the setting."""
    bar: Bar | None = None

    def on_start(todo: int, stored: int) -> None:
        nonlocal bar
        # once the options and the stored runs have been checked
        say_workload(plan.scenario, varies=[a.key for a in plan.axes], defaults=defaults,
                     once=plan.once, seeds=plan.seeds)
        typer.echo(fill(f"{counted(len(plan.points), 'configuration')} x "
                        f"{counted(plan.replications, 'replication')} = "
                        f"{counted(len(plan.runs), 'run')} ({stored} already in {out}, {todo} to "
                        f"run on {ex.name})"), err=True)
        bar = Bar("sweep", todo, lines_from=1)

    with _interrupts(f"finished runs are kept in {out}; rerun with --resume"), ex:
        try:
            table = run_sweep(plan, ex, out, resume=resume,
                              progress=lambda n: bar.update(n) if bar else None,
                              on_start=on_start)
        finally:
            if bar is not None:
                bar.close()
    if bar is not None:
        typer.echo(bar.rate_line(), err=True)
    return table


def _print_points(points: "pd.DataFrame", axis_cols: list[str], metrics: list[str], *,
                  wide: bool, few: str = "") -> None:
    """The table of the configurations' means (short names unless ``wide``); ``few``: the
    clause of :func:`~kvbudget.cli.tables.few_in_runs_said` where a run's p99 rests on few
    requests."""
    if wide:
        headers = ["policy", *axis_cols, *[f"{m} (mean)" for m in metrics]]
        rows = [[_fmt(r.get(c)) for c in ["policy", *axis_cols]]
                + [_fmt(r[f"{m}_mean"]) for m in metrics] for _, r in points.iterrows()]
        typer.echo(render(headers, rows))
    else:  # short names, one space apart, to fit WIDTH columns
        headers = ["policy", *_short_axes(axis_cols), *[short_metric(m) for m in metrics]]
        rows = [[_fmt(r.get(c)) for c in ["policy", *axis_cols]]
                + [_fmt(r[f"{m}_mean"]) for m in metrics] for _, r in points.iterrows()]
        typer.echo(render(headers, rows, gap=1))
    said = SWEEP_SAID.replace(f"each run's, {QUANTILES_OVER}", f"each run's, {QUANTILES_OVER}"
                              f"{few}", 1)
    typer.echo(textwrap.fill(said if wide else said[:-1] + "; --wide: full names)",
                             WIDTH, subsequent_indent="  "))


SWEEP_SAID = ("(means over the replications; times in seconds; ttft and tpot quantiles: each "
              f"run's, {QUANTILES_OVER}; out tok/s (sustained_output_"
              "tokens_per_s): over the run, first arrival to last finish; offered req/s "
              "(offered_rate_rps): requests over the arrival window, first to last arrival; "
              "points.csv: intervals)")
"""The line under the sweep's table: what its figures are and over what span."""


def _sweep_plots(table: "pd.DataFrame", points: "pd.DataFrame", out: Path, *,
                 axis_cols: list[str], metrics: list[str], rate_scale: str | None) -> list[Path]:
    """The Pareto fronts (one per load) and, over several loads, the attainment curves; the
    files written."""
    written: list[Path] = []
    if {"interactive_ttft_p99_s", THROUGHPUT} <= set(metrics):
        labels = [c for c in axis_cols if c != "rate_scale"]
        loads = sorted(points["rate_scale"].unique())
        if len(loads) == 1:
            written += plot_pareto(points, out / "pareto", x=THROUGHPUT, label_columns=labels)
        else:  # a front compares configurations at one load
            for load in loads:
                written += plot_pareto(
                    points[points["rate_scale"] == load], out / f"pareto-rate{load:g}",
                    x=THROUGHPUT, label_columns=labels,
                    title=f"Tail latency against batch throughput at rate x{load:g}")
    if (rate_scale is not None and "overall_slo_attainment" in metrics
            and "offered_rate_rps" in metrics):
        curve = summarize_points(table, ["overall_slo_attainment", "offered_rate_rps"],
                                 by=["policy", "rate_scale"])
        written += plot_attainment(curve, out / "attainment")
    return written


@with_scenario_options
def tune_cmd(
    setup: ScenarioArgs,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")],
    param: Annotated[
        list[str],
        typer.Option("--param", help="A tuned key and bounds: key=low:high[:int] (repeatable)."),
    ],
    policy: Annotated[
        str | None, typer.Option("--policy", help="Tune this policy (default: the scenario's).")
    ] = None,
    objective: Annotated[str | None, typer.Option("--objective", help=OBJECTIVE_HELP)] = None,
    minimize: Annotated[
        bool, typer.Option("--minimize", help="Minimise the objective instead.")
    ] = False,
    constraint: SloOpt = None,
    replications: ReplicationsOpt = 5,
    grid_points: Annotated[
        int, typer.Option("--grid-points", min=2, max=1000, help="Grid values per parameter.")
    ] = 9,
    refine_evals: Annotated[
        int, typer.Option("--refine-evals", min=0, max=100_000, help="Evaluations of the refinement.")
    ] = 8,
    validate: Annotated[
        int, typer.Option("--validate", min=0, max=MAX_REPLICATIONS, help="Fresh seeds to re-check the winner.")
    ] = 5,
    confidence: Annotated[
        float, typer.Option("--confidence", min=0.5, max=0.999, help="Level of the t intervals.")
    ] = 0.95,
    seed: SeedOpt = None,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Reuse the runs already in --out; run the rest.")
    ] = False,
) -> None:
    """Find the parameters that optimise an objective subject to constraints.

    Writes best.toml (a scenario for `kvbudget simulate --scenario`), evidence.parquet (every
    run) and tune.json. Exits 1 when no setting meets the constraints. Finished runs are kept
    in --out as they complete; rerun with --resume after an interrupt.
    """
    with user_errors():
        check_out_dir(out)
        scn = setup.build(policy=policy)  # an unknown --policy refused by its name
        spec = TuneSpec(  # once, with no validation seeds, where each would be the same run
            scenario=scn,
            params=tuple(Param.parse(p) for p in param),
            objective=DEFAULT_OBJECTIVE if objective is None else objective,
            maximize=not minimize,
            constraints=tuple(Constraint.parse(c) for c in constraint or []),
            replications=replications,
            grid_points=grid_points,
            refine_evals=refine_evals,
            validate=validate,
            confidence=confidence,
            root_seed=seed,
        )
        check_param_keys(scn, spec.params)  # before the header: one line, no run
        refuse_searched(setup, "tune", {p.key: f"--param {p.key}" for p in spec.params})
        ex = _executor(executor, jobs, address)
        setting = say_workload(scn, varies=[p.key for p in spec.params], once=spec.once,
                               defaults=defaults_said(setup, varies=[p.key for p in spec.params]),
                               seeds=spec.seeds())
        result = _tune_with_bar(spec, ex, out, resume=resume, setting=setting)
        written = result.write(out)
        frame = evaluations_frame(result)
        frame.to_csv(out / "evaluations.csv", index=False)
    _print_evaluations(frame, [p.key for p in spec.params], spec.objective, spec.constraints)
    typer.echo(tune_said(spec, objective_assumed=objective is None, few=few_in_runs_said(
        [r for e in result.evaluations for r in e.rows], _p99_tiers(spec))))
    if result.best is None:
        typer.echo("wrote " + ", ".join(str(p) for p in [*written, out / "evaluations.csv"]))
        raise fail("no setting met the constraints: " +
                   ", ".join(str(c) for c in spec.constraints), 1)
    _print_best(result, objective=spec.objective, confidence=confidence,
                replications=replications)
    if result.validation is not None:
        _print_validation(result.validation)
    typer.echo("wrote " + ", ".join(str(p) for p in [*written, out / "evaluations.csv"]))


def _p99_tiers(spec: TuneSpec) -> list[str]:
    """The tiers (``overall`` for every tier's) whose p99 the table shows: the objective's or
    a constraint's."""
    return [m.partition("_")[0] for m in (spec.objective, *(c.metric for c in spec.constraints))
            if "_p99_" in m]


def tune_said(spec: TuneSpec, *, objective_assumed: bool, few: str = "") -> str:
    """The line under the evaluations: the objective and its span, what was assumed (the
    default objective; no constraints, so every setting counts as feasible); ``few``: the
    clause of :func:`~kvbudget.cli.tables.few_in_runs_said` where a p99 the table shows (a
    constraint's bound, or the objective) rests on a run's few requests, as sweep's and
    plan's tables say it, beside the first p99 named."""
    what = ("batch output tokens per second over the time the work took, first arrival to last "
            "finish" if spec.objective == DEFAULT_OBJECTIVE else "")
    on_objective = few if "_p99_" in spec.objective else ""
    parts = [f"objective: {'minimise' if not spec.maximize else 'maximise'} {spec.objective}"
             + (f" ({what})" if what else "") + on_objective
             + ("; assumed: the default, --objective to set" if objective_assumed else "")]
    level = f"{spec.confidence:.0%} t interval over {counted(spec.replications, 'replication')}"
    parts.append("constraints: " + (", ".join(str(c) for c in spec.constraints)
                                    + f", each checked on the end of its {level} (the "
                                    + "column" + ("s " if len(spec.constraints) > 1 else " ")
                                    + ", ".join(f"'{_bound_header(c)}'" for c in spec.constraints)
                                    + "): 'feasible' where every one holds there"
                                    + ("" if on_objective else few)
                                    if spec.constraints else
                                    "none, so every setting is feasible (assumed: --slo to "
                                    "add one, e.g. tiers.interactive.ttft_s.p99<=2)"))
    return textwrap.fill("; ".join(parts), WIDTH, subsequent_indent="  ")


def _tune_with_bar(spec: TuneSpec, ex: "LocalExecutor | RayExecutor", out: Path, *,
                   resume: bool, setting: tuple[str, ...]) -> "TuneResult":
    """:func:`~kvbudget.studies.tune.tune` with a progress bar and its rate line."""
    bar = Bar("tune", spec.max_runs(), lines_from=1)
    with _interrupts(f"finished runs are kept in {out}; rerun with --resume"), ex:
        try:
            result = tune(spec, ex, out, resume=resume, progress=bar.update, setting=setting)
        finally:
            bar.close()
    typer.echo(bar.rate_line(), err=True)
    return result


def _print_evaluations(frame: "pd.DataFrame", keys: list[str], objective: str,
                       constraints: Sequence[Constraint] = ()) -> None:
    """The table of every evaluated setting: its stage, parameters, objective and interval,
    and each constraint's bound, the interval's end 'feasible' is judged on (a setting whose
    mean p99 TTFT was 1.95 s read as meeting <= 2 beside its 'no', the bound unshown)."""
    # the objective's short name (as sweep's tables give it): the line under the table names it
    bounds = list(dict.fromkeys(constraints))
    headers = ["stage", *keys, f"{short_metric(objective)} (mean)", "CI low", "CI high",
               *(_bound_header(c) for c in bounds), "feasible"]
    rows = [[r["stage"], *[r[k] for k in keys], _fmt(r["objective_mean"]),
             _fmt(r["objective_low"]), _fmt(r["objective_high"]),
             *(_fmt(r[f"{c.metric}_bound"]) for c in bounds),
             "yes" if r["feasible"] else "no"]
            for _, r in frame.iterrows()]
    typer.echo(render(headers, rows, gap=1 if bounds else 2))


def _bound_header(c: Constraint) -> str:
    """``inter. ttft p99 high``: a constraint's metric, shortened as the tables shorten a
    tier, and the end of its interval it is checked on."""
    first, _, rest = short_metric(c.metric).partition(" ")
    first = "all" if first == "overall" else first[:5] + "." if len(first) > 6 else first
    rest = rest.replace("slo att", "att")
    return f"{first} {rest} {'high' if c.op == '<=' else 'low'}".replace("  ", " ")


def _print_validation(v: "Evaluation") -> None:
    """Whether each constraint holds for the winner on the fresh seeds."""
    checks = "; ".join(f"{c} -> mean {cm:.4g} ({'holds' if cm == cm and ok else 'FAILS'})"
                       for (c, _, cm, _), ok in
                       zip(v.constraints, v.mean_checks(), strict=True))
    typer.echo(f"validation with {counted(len(v.rows), 'fresh seed')}: "
               f"{checks or 'no constraints'}")


def _print_best(result: "TuneResult", *, objective: str, confidence: float,
                replications: int) -> None:
    """The line on the best setting: its objective and interval, or, when the objective is
    flat over the feasible settings, that no setting is better than another."""
    assert result.best is not None
    mean, low, high = result.best.objective
    best = ", ".join(f"{k} = {v}" for k, v in result.best.params.items())
    flat = result.flatness()
    if flat.flat:
        why = (f"relative spread {flat.relative_spread:.2%} < {flat.epsilon:.0%}"
               if flat.relative_spread < flat.epsilon else
               f"every setting within noise of the top one, paired {confidence:.0%} intervals")
        typer.echo(textwrap.fill(
            f"flat: {objective} is {figure(flat.low)} .. {figure(flat.high)} over "
            f"{flat.num_settings} feasible settings ({why}); no setting is better than another. "
            f"best.toml keeps {best}, chosen by {result.tiebreak()}", WIDTH,
            subsequent_indent="  ", break_on_hyphens=False))
    else:
        interval = (f"{confidence:.0%} CI {figure(low)} .. {figure(high)}, "
                    if low == low and high == high else "no interval from ")  # NaN: one run
        typer.echo(textwrap.fill(f"best: {best}: {objective} = {figure(mean)} ({interval}"
                                 f"{counted(replications, 'replication')})", WIDTH,
                                 subsequent_indent="  ", break_on_hyphens=False))
        for said in result.at_bounds():
            typer.echo(textwrap.fill(f"note: {said}: the search did not look past it, where "
                                     "a better value may lie (widen --param where the key "
                                     "allows)", WIDTH,
                                     subsequent_indent="  "))
        undecided = result.undecided_said()
        if undecided is not None:
            typer.echo(textwrap.fill(f"note: {undecided}", WIDTH, subsequent_indent="  ",
                                     break_on_hyphens=False))


@with_scenario_options
def capacity_cmd(
    setup: ScenarioArgs,
    out: Annotated[Path, typer.Option("--out", help="Output directory.")],
    policies: PoliciesOpt = None,
    target: Annotated[
        float | None, typer.Option(
            "--target", help="SLO attainment to sustain (0-1; default 0.9 without --slo).")
    ] = None,
    slo: SloOpt = None,
    metric: Annotated[
        str, typer.Option("--metric", help="Attainment column (e.g. interactive_slo_attainment).")
    ] = "overall_slo_attainment",
    replications: StudyReplicationsOpt = None,
    rel_tol: Annotated[
        float, typer.Option("--rel-tol", help="Stop when the bracket is this tight (relative).")
    ] = 0.02,
    seed: SeedOpt = None,
    curve_points: Annotated[
        int,
        typer.Option("--curve-points", min=0, max=1000,
                     help="Also sweep N common loads around the capacities (attainment curves)."),
    ] = 0,
    plot: Annotated[bool, typer.Option("--plot/--no-plot", help="Write the plot.")] = True,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Reuse the runs already in --out; run the rest.")
    ] = False,
    interval: StudyIntervalOpt = None,
    interval_draws: StudyDrawsOpt = None,
) -> None:
    """The largest arrival rate each policy sustains at the SLO attainment target
    (DistServe's per-GPU goodput), by bisection on the load with replications. Finished runs
    are kept in --out as they complete; rerun with --resume after an interrupt."""
    with user_errors():
        check_out_dir(out)
        names = policy_names(policies)
        if setup.trace_args.rate_scales() is not None:
            raise CliError("--rate-scale: capacity searches the load itself")
        if target is not None and not 0 < target <= 1:  # it said "target must be ..."
            raise CliError(f"--target: must be in (0, 1], got {target:g}")
        if not 0 < rel_tol < 1:
            raise CliError(f"--rel-tol: must be in (0, 1), got {rel_tol:g}")
        replications = study_replications(interval, interval_draws, replications)
        scn = setup.build()
        slos = tuple(Constraint.parse(c) for c in slo or [])
        spec = CapacitySpec(scn, tuple(names), target=0.9 if target is None else target,
                            metric=metric, replications=replications, rel_tol=rel_tol,
                            root_seed=seed, slos=slos, use_target=target is not None or not slos,
                            interval=interval)  # once where each replication is the same run
        spec.step_draws()  # a step model without stated uncertainty fails here, before a run
        stored = StoredRuns(out, resume=resume, what="capacity search")
        ex = _executor(executor, jobs, address)
        setting = say_workload(scn, varies=["rate_scale"],  # the search scales the load
                               defaults=defaults_said(setup), once=spec.once, seeds=spec.seeds())
        result, curve, scales, consistent = _capacity_with_bar(
            spec, ex, out, stored=stored, curve_points=curve_points, setting=setting)
        written = result.write(out)
        if scales:
            curve.to_csv(out / "curve.csv", index=False)
            written.append(out / "curve.csv")
        if plot:
            written += plot_attainment(
                curve, out / "attainment", metric=metric, target=spec.target,
                capacities={c.policy: c.capacity_rps for c in result.capacities},
            )
    _print_capacities(result, spec, target_assumed=target is None and not slos)
    if consistent is not None:
        typer.echo(f"capacity order consistent with the attainment curves ({len(scales)} loads): "
                   f"{'yes' if consistent else 'NO'}")
    typer.echo("wrote " + ", ".join(str(p) for p in written))


def _capacity_with_bar(spec: CapacitySpec, ex: "LocalExecutor | RayExecutor", out: Path, *,
                       stored: StoredRuns, curve_points: int, setting: tuple[str, ...]
                       ) -> "tuple[CapacityResult, pd.DataFrame, list[float], bool | None]":
    """The capacity search (then, with ``curve_points``, the attainment curves over common
    loads) with a progress bar and its rate line: the result, the curve, the curve's loads and
    whether the capacities' order agrees with the curves (None without them)."""
    bar = Bar("capacity", spec.expected_runs(), lines_from=1)
    consistent: bool | None = None
    with _interrupts(f"finished runs are kept in {out}; rerun with --resume"), ex:
        try:
            result = capacity(spec, ex, progress=bar.update, stored=stored, setting=setting)
            curve = result.curve()
            scales = curve_scales(result, curve_points)
            if scales:
                bar.set_total(len(result.rows) + len(spec.policies) * len(scales)
                              * spec.replications)
                curve = attainment_curve(spec, ex, scales, progress=bar.update,
                                         stored=stored)
                consistent = order_consistent(result.capacities,
                                              first_miss_rps(curve, spec.metric, spec.target))
        finally:
            bar.close()
    typer.echo(bar.rate_line(), err=True)
    return result, curve, scales, consistent


def _print_capacities(result: "CapacityResult", spec: CapacitySpec, *,
                      target_assumed: bool = False) -> None:
    """The criteria and the table of each policy's capacity (with its SLO metrics there);
    ``target_assumed``: the user gave neither --target nor --slo (the line says so)."""
    def at_cap(policy: str, scale: float, column: str) -> Any:
        v = [float(r[column]) for r in result.rows
             if r.get("policy") == policy and r.get("rate_scale") == scale
             and r.get(column) is not None and r[column] == r[column]]
        return sum(v) / len(v) if v else None

    slo_cols = [c.metric for c in spec.slos]
    typer.echo(fill(f"criteria (mean over {counted(spec.replications, 'replication')}): "
                    + ", ".join(spec.criteria())
                    + (" (assumed: the default target, --target or --slo to set)"
                       if target_assumed else "")))
    band = [] if spec.interval is None else [f"{spec.interval:.0%} interval"]
    typer.echo(render(
        ["policy", "capacity req/s", *band, "per GPU", "bracket high", "attain. at cap",
         *slo_cols, "note"],
        [[c.policy, c.capacity_rps,
          *([] if c.interval_rps is None else [span(*c.interval_rps)]),
          c.capacity_rps_per_gpu, _fmt(c.bracket_rps[1]), _fmt(c.attainment[0]),
          *[at_cap(c.policy, c.scale, m) for m in slo_cols], c.note]
         for c in result.capacities],
    ))
    typer.echo(fill("capacity req/s: the largest offered rate found to meet the criteria (the "
                    "mean over the replications of each run's requests over its arrival window, "
                    "first to last arrival; per "
                    "GPU: over the deployment's GPUs, replicas x tensor-parallel degree); bracket "
                    "high: the smallest rate found to miss them; attain. at cap: the mean "
                    f"{spec.metric} at the capacity"))
    if any(BURST in c.note for c in result.capacities):
        typer.echo(textwrap.fill(
            f"note: {BURST}: at that load the workload's requests all came in (in) less time "
            "than the run went on after the last one (drain), so no steady queue built up: the "
            "capacity is what the engine absorbs in one burst, not a rate it sustains; give a "
            "longer workload (a longer trace --window, or duration_s)", WIDTH,
            subsequent_indent="  "))
    if spec.interval is not None:
        typer.echo(textwrap.fill(
            f"{spec.interval:.0%} interval of the capacity over {spec.combines()}; each "
            "world's own capacity searched to --rel-tol (open: a world that meets the target "
            "at the largest load searched)", WIDTH))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
    app.command("tune")(tune_cmd)
    app.command("capacity")(capacity_cmd)
