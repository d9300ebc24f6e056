"""``kvbudget trace``: statistics, conversion, synthesis and download of workload traces.

The trace options (``--format``, ``--window``, ``--rate-scale`` ...) are declared once here as
``Annotated`` aliases and turned into :class:`kvbudget.workloads.traces.TraceOptions` by
:func:`build_trace_options`, so other commands that take ``--trace FILE`` accept the same ones.
"""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import CliError, user_errors

if TYPE_CHECKING:
    from kvbudget.workloads.arrivals import ArrivalProcess
    from kvbudget.workloads.lengths import MaxOutputRule
    from kvbudget.workloads.traces import LoadedTrace, TraceOptions

trace_app = typer.Typer(
    name="trace",
    help="Inspect, convert, generate and download workload traces.",
    no_args_is_help=True,
)

_P = "Trace options"
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="azure, burstgpt, mooncake, lengths, servegen or generic "
    "(default: detected from the header).", rich_help_panel=_P)]
WindowOpt = Annotated[str | None, typer.Option(
    "--window", metavar="START:END", help="Keep requests with START <= t < END seconds on the "
    "trace clock (END may be empty); t is then counted from START.", rich_help_panel=_P)]
RateScaleOpt = Annotated[float, typer.Option(
    "--rate-scale", help="Divide arrival times by this (2 = twice the rate).",
    rich_help_panel=_P)]
SampleFractionOpt = Annotated[float | None, typer.Option(
    "--sample-fraction", help="Keep this random fraction of the requests.", rich_help_panel=_P)]
SampleCountOpt = Annotated[int | None, typer.Option(
    "--sample-count", help="Keep this many random requests.", rich_help_panel=_P)]
SeedOpt = Annotated[int | None, typer.Option(
    "--seed", help="Seed of every random choice (sampling, tiers, synthetic arrivals).",
    rich_help_panel=_P)]
TierColumnOpt = Annotated[str | None, typer.Option(
    "--tier-column", help="Column whose value picks the tier (e.g. 'Log Type', 'Model').",
    rich_help_panel=_P)]
TierMapOpt = Annotated[list[str] | None, typer.Option(
    "--tier-map", metavar="VALUE=TIER", help="Map a --tier-column value to a tier "
    "(repeatable); others get --default-tier.", rich_help_panel=_P)]
TierSharesOpt = Annotated[str | None, typer.Option(
    "--tier-shares", metavar="TIER=SHARE,...", help="Assign tiers at random by share "
    "(e.g. interactive=0.7,batch=0.3).", rich_help_panel=_P)]
DefaultTierOpt = Annotated[str, typer.Option(
    "--default-tier", help="Tier of requests no rule assigns.", rich_help_panel=_P)]
MaxOutputOpt = Annotated[str | None, typer.Option(
    "--max-output", metavar="RULE", help="max_output_tokens where the file has none: "
    "fixed:N, factor:F or quantile:Q, optionally :truncate (default fixed:2048, never below "
    "the true output).", rich_help_panel=_P)]
SpreadOpt = Annotated[float | None, typer.Option(
    "--spread-s", help="Spread requests sharing a timestamp evenly over this many seconds "
    "(Kimi traces: 3).", rich_help_panel=_P)]
ArrivalOpt = Annotated[str | None, typer.Option(
    "--arrival", metavar="PROCESS", help="Arrivals for length-only tables: poisson:RATE, "
    "gamma:RATE:CV or constant:RATE (default poisson:1).", rich_help_panel=_P)]
ColumnOpt = Annotated[list[str] | None, typer.Option(
    "--column", metavar="NAME=COLUMN", help="Generic format: read NAME (arrival_s, "
    "prompt_tokens, output_tokens, max_output_tokens, tier, deadline_s, id, hash_ids) from "
    "COLUMN (repeatable).", rich_help_panel=_P)]
ArrivalUnitOpt = Annotated[str, typer.Option(
    "--arrival-unit", help="Generic format: unit of arrival_s and deadline_s (s, ms, us).",
    rich_help_panel=_P)]
ClientsOpt = Annotated[str | None, typer.Option(
    "--clients", metavar="ID,...", help="ServeGen: chunk ids to load.", rich_help_panel=_P)]
ServegenArrivalsOpt = Annotated[str, typer.Option(
    "--servegen-arrivals", help="ServeGen inter-arrivals: fitted_rate, fitted or rate_cv.",
    rich_help_panel=_P)]


def _split_pairs(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CliError(f"{option} must be KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _float(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CliError(f"{option}: not a number: {text!r}") from None


def parse_window(text: str) -> tuple[float, float | None]:
    start, sep, end = text.partition(":")
    if not start.strip():
        raise CliError(f"--window must be START:END in seconds, got {text!r}")
    return (_float(start, "--window"), _float(end, "--window") if sep and end.strip() else None)


def parse_max_output(text: str) -> "MaxOutputRule":
    from kvbudget.workloads.lengths import FactorOfTrue, FixedCap, QuantileCap

    parts = text.split(":")
    truncate = len(parts) == 3 and parts[2] == "truncate"
    if len(parts) not in (2, 3) or (len(parts) == 3 and not truncate):
        raise CliError(f"--max-output must be fixed:N, factor:F or quantile:Q (optionally "
                       f":truncate), got {text!r}")
    kind, value = parts[0], parts[1]
    if kind == "fixed":
        if not value.isdigit():
            raise CliError(f"--max-output fixed:N needs a whole number of tokens, got {value!r}")
        return FixedCap(int(value), truncate)
    if kind == "factor" and not truncate:
        return FactorOfTrue(_float(value, "--max-output"))
    if kind == "quantile":
        return QuantileCap(_float(value, "--max-output"), truncate)
    raise CliError(f"--max-output must be fixed:N, factor:F or quantile:Q, got {text!r}")


def parse_arrival(text: str) -> "ArrivalProcess":
    from kvbudget.workloads.arrivals import ConstantArrivals, GammaArrivals, PoissonArrivals

    parts = text.split(":")
    kind = parts[0]
    values = [_float(p, "--arrival") for p in parts[1:]]
    if kind == "poisson" and len(values) == 1:
        return PoissonArrivals(values[0])
    if kind == "constant" and len(values) == 1:
        return ConstantArrivals(values[0])
    if kind == "gamma" and len(values) == 2:
        return GammaArrivals(values[0], values[1])
    raise CliError("--arrival must be poisson:RATE, gamma:RATE:CV or constant:RATE, "
                   f"got {text!r}")


def build_trace_options(
    *,
    format: str | None = None,
    window: str | None = None,
    rate_scale: float = 1.0,
    sample_fraction: float | None = None,
    sample_count: int | None = None,
    seed: int | None = None,
    tier_column: str | None = None,
    tier_map: list[str] | None = None,
    tier_shares: str | None = None,
    default_tier: str = "interactive",
    max_output: str | None = None,
    spread_s: float | None = None,
    arrival: str | None = None,
    columns: list[str] | None = None,
    arrival_unit: str = "s",
    clients: str | None = None,
    servegen_arrivals: str = "fitted_rate",
) -> "TraceOptions":
    """TraceOptions from the command-line strings (errors name the option)."""
    from kvbudget.workloads.errors import SpecError
    from kvbudget.workloads.traces import TraceOptions

    kwargs: dict[str, Any] = {
        "format": format,
        "window": parse_window(window) if window else None,
        "rate_scale": rate_scale,
        "sample_fraction": sample_fraction,
        "sample_count": sample_count,
        "seed": seed,
        "tier_column": tier_column,
        "tier_map": _split_pairs(tier_map, "--tier-map") if tier_map else None,
        "default_tier": default_tier,
        "spread_s": spread_s,
        "arrival": parse_arrival(arrival) if arrival else None,
        "columns": _split_pairs(columns, "--column") if columns else None,
        "arrival_unit": arrival_unit,
        "servegen_arrivals": servegen_arrivals,
    }
    if tier_shares:
        shares = _split_pairs([s for s in tier_shares.split(",") if s], "--tier-shares")
        kwargs["tier_shares"] = {k: _float(v, "--tier-shares") for k, v in shares.items()}
    if max_output:
        kwargs["max_output"] = parse_max_output(max_output)
    if clients:
        try:
            kwargs["clients"] = tuple(int(c) for c in clients.split(",") if c.strip())
        except ValueError:
            raise CliError(f"--clients must be chunk ids like 34,143, got {clients!r}") from None
    try:
        return TraceOptions(**kwargs)
    except SpecError as exc:
        raise CliError(f"--{exc.field.split('[')[0].replace('_', '-')}: {exc}") from None


def _warn(loaded: "LoadedTrace") -> None:
    for warning in loaded.report.warnings:
        print(f"warning: {loaded.report.path}: {warning}", file=sys.stderr)


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _print_stats(file: str, stats: dict[str, Any], tiers: dict[str, dict[str, Any]]) -> None:
    print(f"{file}  ({stats['format']})")
    span = stats["span_s"]
    span_text = "lengths only" if span is None else f"{span:,.1f} s ({span / 3600:.2f} h)"
    print(f"  rows {stats['rows']:,} (dropped {stats['dropped_rows']:,})   span {span_text}   "
          f"rate {_fmt(stats['rate_rps'], 3)} req/s   inter-arrival CV "
          f"{_fmt(stats['interarrival_cv'], 2)}")
    print(f"  {'tokens':<8}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    for key, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        s = stats[key]
        print(f"  {label:<8}{_fmt(s['mean'], 1):>10}{_fmt(s['p50']):>10}{_fmt(s['p90']):>10}"
              f"{_fmt(s['p99']):>10}")
    if len(tiers) > 1:
        for name, t in tiers.items():
            print(f"  tier {name}: {t['share']:.1%} of rows, rate {_fmt(t['rate_rps'], 3)} "
                  f"req/s, prompt mean {_fmt(t['prompt_tokens']['mean'], 1)} p99 "
                  f"{_fmt(t['prompt_tokens']['p99'])}, output mean "
                  f"{_fmt(t['output_tokens']['mean'], 1)} p99 {_fmt(t['output_tokens']['p99'])}")


@trace_app.command("stats")
def stats_command(
    files: Annotated[list[Path], typer.Argument(help="Trace files (or ServeGen directories).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (a list for several "
                                          "files).")] = False,
    format: FormatOpt = None,
    window: WindowOpt = None,
    rate_scale: RateScaleOpt = 1.0,
    sample_fraction: SampleFractionOpt = None,
    sample_count: SampleCountOpt = None,
    seed: SeedOpt = None,
    tier_column: TierColumnOpt = None,
    tier_map: TierMapOpt = None,
    tier_shares: TierSharesOpt = None,
    default_tier: DefaultTierOpt = "interactive",
    max_output: MaxOutputOpt = None,
    spread_s: SpreadOpt = None,
    arrival: ArrivalOpt = None,
    column: ColumnOpt = None,
    arrival_unit: ArrivalUnitOpt = "s",
    clients: ClientsOpt = None,
    servegen_arrivals: ServegenArrivalsOpt = "fitted_rate",
) -> None:
    """Rows, span, rate, inter-arrival CV and token percentiles of each file, per tier."""
    with user_errors():
        from kvbudget.workloads.stats import tier_stats, workload_stats
        from kvbudget.workloads.traces import load_trace

        options = build_trace_options(
            format=format, window=window, rate_scale=rate_scale,
            sample_fraction=sample_fraction, sample_count=sample_count, seed=seed,
            tier_column=tier_column, tier_map=tier_map, tier_shares=tier_shares,
            default_tier=default_tier, max_output=max_output, spread_s=spread_s,
            arrival=arrival, columns=column, arrival_unit=arrival_unit, clients=clients,
            servegen_arrivals=servegen_arrivals)
        results: list[dict[str, Any]] = []
        for file in files:
            loaded = load_trace(file, options)
            _warn(loaded)
            report = loaded.report
            body = workload_stats(loaded.workload, timed=report.timed)
            stats = {
                "file": str(file),
                "format": report.format,
                "rows": body["rows"],
                "dropped_rows": report.dropped_rows,
                "span_s": body["span_s"],
                "rate_rps": body["rate_rps"],
                "interarrival_cv": body["interarrival_cv"],
                "prompt_tokens": body["prompt_tokens"],
                "output_tokens": body["output_tokens"],
            }
            if as_json:
                results.append(stats)
            else:
                _print_stats(str(file), stats, tier_stats(loaded.workload, timed=report.timed))
        if as_json:
            print(json.dumps(results[0] if len(results) == 1 else results, indent=2))


@trace_app.command("convert")
def convert_command(
    file: Annotated[Path, typer.Argument(help="Trace file (or ServeGen directory).")],
    out: Annotated[Path, typer.Option("--out", help="Output: .parquet, .csv or .jsonl "
                                      "(generic format).")],
    format: FormatOpt = None,
    window: WindowOpt = None,
    rate_scale: RateScaleOpt = 1.0,
    sample_fraction: SampleFractionOpt = None,
    sample_count: SampleCountOpt = None,
    seed: SeedOpt = None,
    tier_column: TierColumnOpt = None,
    tier_map: TierMapOpt = None,
    tier_shares: TierSharesOpt = None,
    default_tier: DefaultTierOpt = "interactive",
    max_output: MaxOutputOpt = None,
    spread_s: SpreadOpt = None,
    arrival: ArrivalOpt = None,
    column: ColumnOpt = None,
    arrival_unit: ArrivalUnitOpt = "s",
    clients: ClientsOpt = None,
    servegen_arrivals: ServegenArrivalsOpt = "fitted_rate",
) -> None:
    """Load any supported trace and write it in the generic format."""
    with user_errors():
        from kvbudget.workloads.traces import load_trace, save_workload

        options = build_trace_options(
            format=format, window=window, rate_scale=rate_scale,
            sample_fraction=sample_fraction, sample_count=sample_count, seed=seed,
            tier_column=tier_column, tier_map=tier_map, tier_shares=tier_shares,
            default_tier=default_tier, max_output=max_output, spread_s=spread_s,
            arrival=arrival, columns=column, arrival_unit=arrival_unit, clients=clients,
            servegen_arrivals=servegen_arrivals)
        loaded = load_trace(file, options)
        _warn(loaded)
        save_workload(loaded.workload, out)
        report = loaded.report
        print(f"wrote {len(loaded.workload):,} requests ({report.format}, "
              f"{report.dropped_rows:,} rows dropped) to {out}")


def _synth_spec(spec_file: Path | None) -> dict[str, Any]:
    import tomllib

    from kvbudget.workloads.spec import default_workload_spec

    if spec_file is None:
        return default_workload_spec().model_dump(exclude_none=True)
    if not spec_file.is_file():
        raise CliError(f"{spec_file}: no such file")
    with spec_file.open("rb") as fh:
        try:
            doc = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise CliError(f"{spec_file}: not valid TOML ({exc})") from None
    table = doc.get("workload", doc)
    if not isinstance(table, dict):
        raise CliError(f"{spec_file}: [workload] must be a table")
    return table


@trace_app.command("synth")
def synth_command(
    out: Annotated[Path, typer.Option("--out", help="Output: .parquet, .csv or .jsonl.")],
    spec: Annotated[Path | None, typer.Option(
        "--spec", help="TOML file with a [workload] table (default: the default what-if "
        "mix).")] = None,
    rate_rps: Annotated[float | None, typer.Option(
        "--rate-rps", help="Override the arrival rate.")] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration-s", help="Override the duration (drops num_requests).")] = None,
    num_requests: Annotated[int | None, typer.Option(
        "--num-requests", help="Override the request count (drops duration_s).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every draw.")] = 0,
) -> None:
    """Generate a synthetic workload (from --spec, or the default mix) and write it."""
    with user_errors():
        import numpy as np

        from kvbudget.workloads.spec import build_workload, parse_workload_spec
        from kvbudget.workloads.traces import save_workload

        table = _synth_spec(spec)
        if rate_rps is not None:
            arrival = table.get("arrival")
            if not isinstance(arrival, dict) or "rate_rps" not in arrival:
                raise CliError("--rate-rps: the workload's arrival process has no rate_rps "
                               "(edit the spec instead)")
            table = {**table, "arrival": {**arrival, "rate_rps": rate_rps}}
        if duration_s is not None:
            table = {k: v for k, v in table.items() if k != "num_requests"}
            table["duration_s"] = duration_s
        if num_requests is not None:
            table = {k: v for k, v in table.items() if k != "duration_s"}
            table["num_requests"] = num_requests
        parsed = parse_workload_spec(table)
        base_dir = spec.resolve().parent if spec is not None else None
        workload = build_workload(parsed, np.random.default_rng(seed), base_dir)
        save_workload(workload, out)
        print(f"wrote {len(workload):,} requests over {workload.span_s:,.1f} s to {out}")


@trace_app.command("fetch")
def fetch_command(
    name: Annotated[str | None, typer.Argument(help="Trace to download (see --list).")] = None,
    dest: Annotated[Path, typer.Option("--dest", help="Directory to write into.")] = Path("."),
    base_url: Annotated[str | None, typer.Option(
        "--base-url", help="Download from this directory URL instead (a mirror).")] = None,
    sha256: Annotated[str | None, typer.Option(
        "--sha256", help="Expected SHA-256 (required to verify traces without a pinned "
        "checksum).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Download again even if present.")
                     ] = False,
    list_sources: Annotated[bool, typer.Option("--list", help="List the known traces.")
                            ] = False,
) -> None:
    """Download a public trace from its published address and verify its checksum."""
    with user_errors():
        from kvbudget.workloads.fetch import SOURCES, fetch

        if list_sources or name is None:
            for source in SOURCES.values():
                pinned = ("sha256" if source.sha256 else "git blob" if source.git_blob_sha1
                          else "no pinned checksum")
                print(f"{source.name:<24}{source.description} [{pinned}]")
            if name is None and not list_sources:
                raise CliError("name a trace to fetch (listed above)")
            return
        result = fetch(name, dest, base_url=base_url, sha256=sha256, force=force,
                       progress=sys.stderr.isatty())
        if result.verified == "unverified":
            print(f"warning: {name} has no pinned checksum; its sha256 is {result.sha256} "
                  "(pass --sha256 to verify)", file=sys.stderr)
        action = "downloaded" if result.downloaded else "already present"
        print(f"{action}: {result.path} ({result.verified} verified)"
              if result.verified != "unverified" else f"{action}: {result.path}")
        print(f"cite: {SOURCES[name].citation}")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
