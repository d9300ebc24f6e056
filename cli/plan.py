"""``kvbudget plan``: the cheapest deployment that meets the SLOs for a workload."""

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from kvbudget.cli.errors import CliError, check_out_dir, fail, user_errors
from kvbudget.cli.options import (
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
from kvbudget.cli.tables import (
    QUANTILES_OVER,
    few_in_runs_said,
    plus_minus,
    render,
    short_metric,
)
from kvbudget.perf.hardware import get_gpu
from kvbudget.results.said import fill
from kvbudget.studies.executors import make_executor
from kvbudget.studies.plan import (
    DEFAULT_GPUS,
    DEFAULT_PRICES,
    MAX_PRICE,
    PLAN_KEYS,
    PRICE_SOURCE,
    PlanResult,
    PlanSpec,
    plan,
    policy_label,
    price_note,
    read_prices,
    same_gpu,
    summary_rows,
)
from kvbudget.studies.sweep import RunError, parse_axis
from kvbudget.studies.tune import Constraint
from kvbudget.workloads.counted import counted

MAX_REPLICAS = 10_000
"""The most replicas (or tensor-parallel GPUs) a plan may try: the scenario's fleet bound."""


def _list(text: str, option: str, kind: type) -> tuple[Any, ...]:
    try:
        values = tuple(kind(v.strip()) for v in text.split(",") if v.strip())
    except ValueError:
        raise CliError(f"{option}: expected a comma-separated list, got {text!r}") from None
    if not values:
        raise CliError(f"{option}: give at least one value")
    if kind is int and not all(1 <= v <= MAX_REPLICAS for v in values):
        raise CliError(f"{option}: each value must be in [1, {MAX_REPLICAS:,}], got {text!r}")
    return values


def _gpu_list(text: str) -> tuple[str, ...]:
    """``--gpus``: each a preset or GPU file, refused under the flag's name (``plan --gpus
    H10`` said ``unknown GPU preset 'H10'`` without naming the option)."""
    gpus: tuple[str, ...] = _list(text, "--gpus", str)
    for gpu in gpus:
        try:
            get_gpu(gpu)
        except (ValueError, OSError) as exc:
            raise CliError(f"--gpus: {exc}") from None
    return gpus


PLAN_AXES = dict(zip(PLAN_KEYS, ("--gpus", "--tp", "--replicas"), strict=True))
"""The scenario fields ``plan`` sets in every run, each with the option that gives its values
(a value typed for one is refused: :func:`~kvbudget.cli.options.refuse_searched`)."""


RootSeedOpt = Annotated[int | None, typer.Option(
    "--seed", min=0, help="Root seed: replication r uses its r-th child (default: the "
    "scenario's).")]


@with_scenario_options
def plan_cmd(
    setup: ScenarioArgs,
    out: Annotated[Path, typer.Option("--out", help="Output directory (runs kept as they "
                                      "finish; plan.csv, plan.json).")],
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU types to try (comma-separated "
        f"presets; default: {','.join(DEFAULT_GPUS)}, said as assumed under the table).")] = None,
    tp: Annotated[str, typer.Option(
        "--tp", help="Tensor-parallel degrees to try, comma-separated (the engine's "
        "tensor_parallel_size: GPUs a replica shards the model over).")] = "1",
    replicas: Annotated[str, typer.Option(
        "--replicas", help="Replica counts to try, smallest first.")] = "1,2,3,4,6,8",
    disagg_replicas: Annotated[str | None, typer.Option(
        "--disagg-replicas", help="Also try disaggregated prefill/decode deployments of these "
        "many replicas in all (each >= 2), every prefill:decode split of each, smallest total "
        "first (default: none, or --replicas from 2 for a disaggregated scenario).")] = None,
    policies: Annotated[str | None, typer.Option(
        "--policies", help="Admission policies (default: the scenario's).")] = None,
    grid: Annotated[list[str] | None, typer.Option(
        "--grid", metavar="KEY=V1,V2", help="Values of a policy parameter to try, e.g. "
        "policy_params.overcommit_ratio=0.6,0.8 (default: each policy's main parameter at a "
        "few values).")] = None,
    slo: Annotated[list[str] | None, typer.Option(
        "--slo", metavar="METRIC<=VALUE", help="An SLO on any summary metric (repeatable), "
        "e.g. tiers.interactive.ttft_s.p99<=2 (default overall_slo_attainment>=0.9).")] = None,
    prices: Annotated[Path | None, typer.Option(
        "--prices", help="A price table (TOML or JSON: GPU = dollars per GPU-hour) replacing "
        "the cited defaults.")] = None,
    price: Annotated[list[str] | None, typer.Option(
        "--price", metavar="GPU=USD", help="One GPU's price per GPU-hour (repeatable; over "
        "--prices).")] = None,
    replications: StudyReplicationsOpt = None,
    seed: RootSeedOpt = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows of the ranked table.")] = 10,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Reuse the runs already in --out; run the rest.")] = False,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column.")] = False,
    interval: StudyIntervalOpt = None,
    interval_draws: StudyDrawsOpt = None,
) -> None:
    """The cheapest deployment meeting the SLOs: GPU type x tensor parallelism x replicas x
    admission policy (and its main parameter), ranked by dollars per hour.

    For each GPU, degree and policy setting the replica counts are tried smallest first; the
    first that meets every SLO (upper bound of the t interval over the replications) is its
    answer. Prices default to cited on-demand figures (kvbudget.studies.plan.DEFAULT_PRICES).
    """
    with user_errors():
        check_out_dir(out)
        refuse_searched(setup, "plan", PLAN_AXES)
        if setup.trace_args.rate_scales() is not None and len(
                setup.trace_args.rate_scales() or ()) > 1:
            raise CliError("--rate-scale: plan takes one load")
        replications = study_replications(interval, interval_draws, replications)
        scn = setup.build()
        table, sources = _price_table(prices, price)
        names = () if policies is None else tuple(policy_names(policies))
        param_values = _param_values(grid)
        spec = PlanSpec(
            scn, gpus=DEFAULT_GPUS if gpus is None else _gpu_list(gpus),
            gpus_given=gpus is not None, tensor_parallel=_list(tp, "--tp", int),
            replicas=_list(replicas, "--replicas", int),
            disagg_replicas=_totals(disagg_replicas), policies=names,
            param_values=param_values, slos=tuple(Constraint.parse(s) for s in slo or []),
            prices=table, price_sources=sources, replications=replications, root_seed=seed,
            interval=interval)  # once where every replication would be the same run
        spec.step_draws()  # a step model without stated uncertainty fails here, before a run
        result = _run_plan(spec, out, executor=executor, jobs=jobs, address=address,
                           resume=resume, said=(defaults_said(setup, varies=PLAN_AXES), spec.once))
        written = result.write(out)
    typer.echo(render_plan(result, top=top, wide=wide, slo_assumed=not slo))
    for note in result.notes:
        typer.echo(fill(f"note: {note}"))
    typer.echo(fill("wrote " + ", ".join(str(p) for p in written)))
    if not any(c.replicas is not None for c in result.candidates):
        raise fail("no configuration met the SLOs: " + ", ".join(str(s) for s in spec.slos), 1)


def _totals(text: str | None) -> tuple[int, ...]:
    """``--disagg-replicas``: totals of at least a prefill and a decode replica."""
    if text is None:
        return ()
    values: tuple[int, ...] = _list(text, "--disagg-replicas", int)
    if min(values) < 2:
        raise CliError("--disagg-replicas: each total must be >= 2 (a prefill and a decode "
                       f"replica), got {text!r}")
    return values


def _price_table(prices: Path | None, price: list[str] | None
                 ) -> tuple[dict[str, float], dict[str, str]]:
    """The price per GPU-hour of each GPU (``--prices``, else the cited defaults, with each
    ``--price GPU=USD`` over them) and where each price comes from."""
    table = read_prices(prices) if prices is not None else dict(DEFAULT_PRICES)
    sources = (dict.fromkeys(table, str(prices)) if prices is not None
               else dict.fromkeys(table, PRICE_SOURCE))
    given: dict[str, tuple[str, float]] = {}  # the GPU each --price named -> (item, price)
    for item in price or []:
        gpu, sep, usd = item.partition("=")
        gpu = gpu.strip()
        try:
            value = float(usd)
        except ValueError:
            raise CliError(f"--price must be GPU=USD, got {item!r}") from None
        if not sep or not gpu or not 0 < value <= MAX_PRICE:
            raise CliError(f"--price must be GPU=USD with 0 < USD <= {MAX_PRICE:g}, got "
                           f"{item!r}")
        try:
            name = get_gpu(gpu).name  # a typo'd GPU is refused, never an unused price
        except (ValueError, OSError) as exc:
            raise CliError(f"--price {item}: {exc}") from None
        if name in given and given[name][1] != value:
            raise CliError(f"--price {given[name][0]} and --price {item} name the same GPU "
                           f"({name}): give it one price")
        given[name] = item, value
        for other in [k for k in table if same_gpu(k) == name]:  # the GPU's other names
            del table[other]
            sources.pop(other, None)
        table[gpu], sources[gpu] = value, "--price"
    return table, sources


def _param_values(grid: list[str] | None) -> dict[str, tuple[Any, ...]] | None:
    """The policy parameter values of the ``--grid`` axes (None without any); an axis that is
    not a policy parameter is refused."""
    if not grid:
        return None
    axes = [parse_axis(g) for g in grid]
    for a in axes:
        if not a.key.startswith("policy_params."):
            raise CliError(f"--grid {a.key}: plan takes policy parameters here "
                           "(--gpus, --tp and --replicas are its other axes)")
    return {a.key.split(".", 1)[1]: a.values for a in axes}


def _run_plan(spec: PlanSpec, out: Path, *, executor: str, jobs: int | None,
              address: str | None, resume: bool,
              said: tuple[str | None, str | None] = (None, None)) -> PlanResult:
    """:func:`~kvbudget.studies.plan.plan` with a progress bar; Ctrl-C (exit 130) and a run
    that fails (exit 1) say that the finished runs are kept; ``said``: what was left to
    the default scenario (:func:`~kvbudget.cli.options.defaults_said`), said with the
    setting, and why the plan runs once (``spec.once``), or None."""
    defaults, once = said
    bar: Bar | None = None

    def on_start(total: int, stored: int) -> tuple[str, ...]:
        nonlocal bar
        # once the options and the stored runs have been checked; the GPU is searched
        setting = say_workload(spec.scenario, varies=["gpu"], defaults=defaults, once=once,
                               seeds=spec.seeds())
        typer.echo(fill(f"at most {counted(total, 'run')} ({stored} already in {out}); a "
                        "configuration stops at its first replica count that meets the SLOs"),
                   err=True)
        bar = Bar("plan", total, lines_from=1, at_most=True)
        return setting

    try:
        with make_executor(executor, jobs=jobs, address=address) as ex:
            return plan(spec, ex, out, resume=resume,
                        progress=lambda n: bar.update(n) if bar else None,
                        on_start=on_start,
                        on_total=lambda n: bar.set_total(n) if bar else None)
    except KeyboardInterrupt:
        raise fail(f"interrupted; finished runs are kept in {out}; rerun with --resume",
                   130) from None
    except RunError as exc:
        raise fail(f"{exc}; finished runs are kept in {out}; rerun with --resume",
                   1) from None
    finally:
        if bar is not None:
            bar.close()


def render_plan(result: Any, *, top: int | None = 10, wide: bool = False,
                slo_assumed: bool = False) -> str:
    """The ranked table: GPUs, $/h, $/M output tokens, the bound each SLO is checked on where
    its metric is not shown otherwise, attainment per tier, p99 TTFT of the first tier (and its
    TPOT where no bound is shown; every SLO metric and tier with --wide), mean ± half its t
    interval.
    ``slo_assumed``: the user gave no SLO (the note says the default was assumed)."""
    df = summary_rows(result, top)
    num_all = len(summary_rows(result, None))
    if df.empty:
        return "(no runs)"
    spec = result.spec
    tiers = [t.name for t in spec.scenario.tiers()]
    offered, metrics, bounds = _plan_columns(spec, df, tiers, wide)
    keys = [a.key.split(".", 1)[1] for a in spec.grid_axes()
            if a.key.startswith("policy_params.")]
    def label(m: str) -> str:
        if wide:
            return short_metric(m)
        tier = next((t for t in tiers if m.startswith(f"{t}_")), None)
        if tier is None and m.startswith("overall_"):  # every tier's: simulate's 'all' row
            tier, m = "all", "all_" + m.removeprefix("overall_")
        if tier is None:
            return short_metric(m)
        rest = short_metric(m[len(tier) + 1:]).replace("slo att", "att").replace(" p99", "")
        prefix = "" if len(offered) == 1 and tier != "all" else (
            tier[:5] + "." if len(tier) > 6 else tier) + " "
        return prefix + rest

    band = [] if spec.interval is None else [f"replicas {spec.interval:.0%}"]
    headers = ["GPU", "GPUs", "policy", "$/h", "$/M tok",
               *(_bound_label(label(m), side) for m, side in bounds),
               *(label(m) for m in metrics),
               *band, "ok"]
    rows = []
    for r in df.to_dict(orient="records"):
        name = policy_label({str(k): v for k, v in r.items()}, keys)
        if not wide:
            name = name.replace("(", "").replace(")", "")
            for k in keys:
                name = name.replace(f"{k}=", "")
        rows.append([r["gpu"], _gpus_label(r), name,
                     ("" if r["feasible"] else ">") + f"{r['usd_per_hour']:.2f}", _per_m_label(r),
                     *(f"{r[f'{m}_{side}']:.3g}" for m, side in bounds),
                     *(plus_minus(r[m], r[f"{m}_low"], r[f"{m}_high"]) for m in metrics),
                     *([] if spec.interval is None
                       else [span(r["replicas_low"], r["replicas_high"])]),
                     "yes" if r["feasible"] else "no"])
    how = (f"the bound of the {spec.confidence:.0%} t interval over {spec.replications} "
           "replications" if spec.replications > 1 else "one replication")
    assumed = "assumed: the default, --slo to set; " if slo_assumed else ""
    note = (f"SLOs: {', '.join(str(s) for s in spec.slos)} ({assumed}{how}); "
            "$/h = GPUs x price per GPU-hour"
            + (" (an autoscaled fleet: the mean GPUs held)" if _autoscaled(df) else "")
            + "; GPUs: replicas x tensor-parallel degree"
            + ("; P+D: prefill + decode replicas of a disaggregated deployment (the best split "
               "of the first total that meets the SLOs)" if spec.disagg_replicas else "")
            + "; $/M tok: dollars per million output tokens served, the GPU-hours the runs "
            "needed (first arrival to last finish"
            + ("; an autoscaled fleet: the GPU-hours its replicas were held" if _autoscaled(df)
               else "")
            + ") x price over the tokens their requests completed"
            + "".join(f"; {_bound_label(label(m), side)}: {m}'s {side} end, the bound its "
                      "SLO is checked on" for m, side in bounds)
            + "; att = SLO attainment" + (" (all: every tier's requests)" if any(
                m.startswith("overall_") for m in [*metrics, *(b for b, _ in bounds)]) else "")
            + f", ttft/tpot = p99 seconds (each run's, {QUANTILES_OVER}), mean ± half the "
            "interval" + few_in_runs_said(result.runs, offered) + "; 'no' rows: the largest replica "
            "count tried still misses, so carrying the load costs more than the $/h shown ('>'), "
            "and no $/M tok is shown (plan.csv has what its tokens cost)."
            + ("" if wide or not keys else f" Policy values: {', '.join(keys)}."))
    shown = ([f"showing {len(rows)} of {num_all} configurations (the cheapest first, and each "
              f"GPU type's cheapest feasible one; --top N for more, all in plan.csv)"]
             if len(rows) < num_all else [])
    return "\n".join([render(headers, rows, gap=1 if not wide else 2),
                      *(fill(x) for x in [*shown, price_note(spec), note,
                                          *_interval_notes(result)])])


def _plan_columns(spec: Any, df: Any, tiers: list[str], wide: bool
                  ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The tiers offered, the metric columns and the SLO bounds (:func:`_slo_bounds`) of
    :func:`render_plan`'s table."""
    offered = [t for t in tiers if f"{t}_slo_attainment" in df.columns
               and df[f"{t}_slo_attainment"].notna().any()]
    metrics = [f"{t}_slo_attainment" for t in offered]
    first = offered[0] if offered else tiers[0]
    metrics += [f"{first}_ttft_p99_s", f"{first}_tpot_p99_s"]
    # one tier offered: its columns are every tier's (overall_*) too
    shown = [*metrics, *(m.replace(f"{first}_", "overall_", 1) for m in metrics
                         if len(offered) == 1)]
    bounds = _slo_bounds(spec.slos, df, [] if wide else shown)
    if bounds:  # the table's width: the SLO's bound in place of the first tier's p99 TPOT
        metrics.remove(f"{first}_tpot_p99_s")
    if wide:
        metrics = list(dict.fromkeys([*(c.metric for c in spec.slos), *metrics,
                                      *(f"{t}_ttft_p99_s" for t in offered),
                                      *(f"{t}_tpot_p99_s" for t in offered)]))
    return offered, metrics, bounds


def _slo_bounds(slos: Any, df: Any, shown: list[str]) -> list[tuple[str, str]]:
    """``(metric, 'low' or 'high')`` of each SLO whose metric the table does not show already:
    its interval's end that the SLO is checked on, what 'ok' says of it (the default's overall
    attainment was not shown, and an interactive 0.951 ± 0.051 read as a miss of >= 0.9
    beside its 'yes')."""
    return list(dict.fromkeys((c.metric, "low" if c.op == ">=" else "high") for c in slos
                              if c.metric in df.columns and c.metric not in shown))


def _bound_label(label: str, side: str) -> str:
    """``all low`` for ``all att``'s low end: a column narrow enough for the table's width."""
    return f"{label.removesuffix(' att')} {side}"


def _per_m_label(row: Mapping[Any, Any]) -> str:
    """A row's $/M tok: none on a configuration that misses the SLOs (it does not carry the
    load, so what the tokens it served cost is no price for the load)."""
    value = row["usd_per_m_output_tokens"]
    if not row["feasible"] or not math.isfinite(value):
        return "-"
    return f"{value:.3f}"


def _autoscaled(df: Any) -> bool:
    """Whether any shown row is an autoscaled fleet's (priced by the replicas held)."""
    return "gpu_hours" in df.columns and bool(df["gpu_hours"].notna().any())


def _interval_notes(result: Any) -> list[str]:
    """With --interval: the cheapest configuration with its interval, and what it combines."""
    spec = result.spec
    if spec.interval is None:
        return []
    best = result.cheapest()
    level = f"{spec.interval:.0%}"
    out = [f"{level} intervals over {spec.combines()}; replicas {level}: the replica counts "
           "the worlds need, each the smallest count tried at which it meets every SLO on its "
           "own (open: a world missed at every count tried)."]
    if best is not None:
        low, high = (math.inf if best.get(k) is None else float(best[k])
                     for k in ("replicas_low", "replicas_high"))
        out.insert(0, f"cheapest: {best['gpu']} {best['replicas']}x{best['tp']} "
                      f"{best['policy']} ${best['usd_per_hour']:.2f}/h; replicas needed "
                      f"({level}): {span(low, high)}")
    return out


def _gpus_label(row: Mapping[Any, Any]) -> str:
    """``4x1`` (colocated replicas x TP) or ``1P+3Dx1`` (a disaggregated split x TP)."""
    p, d = row.get("prefill_replicas"), row.get("decode_replicas")
    if isinstance(p, int | float) and isinstance(d, int | float) and p == p and d == d:
        return f"{int(p)}P+{int(d)}Dx{row['tp']}"
    return f"{row['replicas']}x{row['tp']}"


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
