"""``kvbudget trace``: statistics, conversion, synthesis and download of workload traces.

The trace options (``--format``, ``--window``, ``--rate-scale`` ...) are declared once, in
:mod:`kvbudget.cli.options` (``TRACE_OPTIONS``), and every command that takes ``--trace FILE``
accepts the same ones.
"""

import json
import math
import sys
import textwrap
import tomllib
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer

from kvbudget.cli.errors import CliError, check_out_file, user_errors
from kvbudget.cli.options import TraceArgs, with_trace_options
from kvbudget.cli.usage_errors import OneLineGroup
from kvbudget.results.recorded_fields import FloatArray, cap_reached
from kvbudget.results.recording import load_words
from kvbudget.results.recordings import (
    detect_recording_format,
    read_recording,
    refuse_unreadable_records,
)
from kvbudget.results.said import WIDTH, fill
from kvbudget.workloads.arrival_rate import span_said
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.fetch import SOURCES, fetch
from kvbudget.workloads.spec import build_workload, default_workload_spec, parse_workload_spec
from kvbudget.workloads.stats import tier_stats, workload_stats
from kvbudget.workloads.traces import load_trace, save_workload
from kvbudget.workloads.traces.load import detect_format, trace_seed
from kvbudget.workloads.traces.report import load_said
from kvbudget.workloads.traces.save import check_save_path

if TYPE_CHECKING:
    from kvbudget.results.recording import RecordedStage, Recording
    from kvbudget.workloads.traces import LoadedTrace, TraceOptions

trace_app = typer.Typer(
    cls=OneLineGroup,
    name="trace",
    help="Inspect, convert, generate and download workload traces.",
    no_args_is_help=True,
    # click's plain help: rich's panels cut option names and words at 80 columns and read
    # "[profile]" as markup; plain help wraps instead and shows every name whole
    rich_markup_mode=None,
)

SeedOpt = Annotated[int | None, typer.Option(
    "--seed", min=0, help="Seed of every random choice (sampling, tiers, synthetic arrivals): the "
    "workload `kvbudget simulate --trace FILE --seed N` simulates (default 0).",
    rich_help_panel="Trace options")]


def build_trace_options(trace_args: TraceArgs, seed: int | None = None) -> "TraceOptions":
    """TraceOptions from the command-line strings (errors name the option)."""
    return trace_args.options(seed)


def load_as_simulated(file: Path, options: "TraceOptions", seed: int | None) -> "LoadedTrace":
    """``file`` loaded with the draws a scenario of ``seed`` makes (its trace's seed derived
    by :func:`~kvbudget.simulator.scenario.trace_seed`), so that ``trace stats``/``convert``
    and ``replay --seed N`` show, write and send the workload ``simulate --seed N`` simulates."""
    return load_trace(file, options, seed=partial(trace_seed, 0 if seed is None else seed))


def _warn(loaded: "LoadedTrace") -> None:
    for warning in loaded.report.warnings:
        print(fill(f"warning: {loaded.report.path}: {warning}"), file=sys.stderr)
    for said in loaded.report.assumed:
        print(fill(f"assumed: {loaded.report.path}: {said}"), file=sys.stderr)


NBSP = "\xa0"


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _print_stats(file: str, stats: dict[str, Any], tiers: dict[str, dict[str, Any]]) -> None:
    # the format kept whole (no break inside its parentheses), after a long path on a line of
    # its own
    print(fill(f"{file}  ({stats['format'].replace(' ', NBSP)})").replace(NBSP, " "))
    span = stats["span_s"]
    # in the larger unit as a run's first line says it ("over 58.4 min"), not "2.0 s (0.00 h)"
    # the span to the decimals that give the rate over its rows' gaps, which it says
    rows = stats["rows"]
    span_text = ("lengths only" if span is None else f"{span_said(rows, span, rate_format=',.3f')} s" + (
        "" if span < 120 else f" ({span / 60:,.1f} min)" if span < 7200
        else f" ({span / 3600:,.1f} h)"))
    # "29 gaps", not gaps_said's "29 gaps between arrivals": the line fits 100 columns
    gaps = "" if stats["rate_rps"] is None else f" ({rows - 1:,} gap{'s' * (rows != 2)})"
    print(f"  rows {rows:,} (dropped {stats['dropped_rows']:,})   span {span_text}   "
          f"rate {_fmt(stats['rate_rps'], 3)} req/s{gaps}   inter-arrival CV "
          f"{_fmt(stats['interarrival_cv'], 2)}")
    print(f"  {'tokens':<8}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}")
    for key, label in (("prompt_tokens", "prompt"), ("output_tokens", "output")):
        s = stats[key]
        print(f"  {label:<8}{_fmt(s['mean'], 1):>10}{_fmt(s['p50']):>10}{_fmt(s['p90']):>10}"
              f"{_fmt(s['p99']):>10}")
    if len(tiers) > 1:
        for name, t in tiers.items():
            print(f"  tier {name}: {t['share']:.1%} of rows, rate {_fmt(t['rate_rps'], 3)} "
                  f"req/s")
            print(f"    prompt mean {_fmt(t['prompt_tokens']['mean'], 1)} p99 "
                  f"{_fmt(t['prompt_tokens']['p99'])}, output mean "
                  f"{_fmt(t['output_tokens']['mean'], 1)} p99 {_fmt(t['output_tokens']['p99'])}")


@trace_app.command("stats")
@with_trace_options
def stats_command(
    files: Annotated[list[Path], typer.Argument(help="Trace files (or ServeGen directories).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (a list for several "
                                          "files).")] = False,
    *,
    trace_args: TraceArgs,
    seed: SeedOpt = None,
) -> None:
    """Rows, span, rate, inter-arrival CV and token percentiles of each file, per tier."""
    with user_errors():
        options = build_trace_options(trace_args)
        results: list[dict[str, Any]] = []
        for file in files:
            loaded = load_as_simulated(file, options, seed)
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
                # the layout the loader read (azure2023, burstgpt_3) under the name --format
                # takes (azure, burstgpt), which the header line gives
                family = options.format or detect_format(file, options)
                _print_stats(str(file), {**stats, "format": f"format {family}" + (
                    f", its {report.format} layout" if report.format != family else "")},
                    tier_stats(loaded.workload, timed=report.timed))
        if as_json:
            out = _json_safe(results[0] if len(results) == 1 else results)
            print(json.dumps(out, indent=2, allow_nan=False))


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as null: JSON has no Infinity or NaN (a rate over a
    span of a few nanoseconds overflows to inf)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


@trace_app.command("convert")
@with_trace_options
def convert_command(
    file: Annotated[Path, typer.Argument(help="Trace file (or ServeGen directory).")],
    out: Annotated[Path, typer.Option("--out", help="Output: .parquet, .csv or .jsonl "
                                      "(generic format).")],
    *,
    trace_args: TraceArgs,
    seed: SeedOpt = None,
) -> None:
    """Load any supported trace, or the requests of a load tool's recording (vllm bench
    serve, GuideLLM, AIPerf, ...), and write it in the generic format."""
    with user_errors():
        check_out_file(out)
        check_save_path(out)
        tool = _tool_format(file, out)
        if tool is not None:
            _convert_recording(file, out, tool, trace_args, seed)
            return
        options = build_trace_options(trace_args)
        loaded = load_as_simulated(file, options, seed)
        _warn(loaded)
        save_workload(loaded.workload, out)
        report = loaded.report
        print(f"wrote {counted(len(loaded.workload), 'request')} ({report.format}, "
              f"{counted(report.dropped_rows, 'row')} dropped) to {out}")
        if report.assumed or not report.timed:  # the generic format has no place to say so
            print(f"warning: {out} holds what was assumed or drawn above (not read from {file}) "
                  "as if its file had said it: a run of it will not say so", file=sys.stderr)


RECORDING_OPTIONS = {"max_output", "default_tier"}
"""The trace options a recording's conversion takes (:func:`read_recording`'s own); the others
act on a trace's rows and apply when the converted file is simulated."""


def _tool_format(file: Path, out: Path) -> str | None:
    """A load tool's recording format when ``file`` is one (``vllm-bench``, ``guidellm``,
    ...); None for a trace, a records file, a run directory or anything the trace loader's
    own errors describe. A file the recordings' reader refuses by name (AIPerf's summary, a
    file of aggregates) and no trace format reads is refused with that reason; a load tool's
    folder, naming the file in it to convert in this command's form (not ``--records``)."""
    try:
        fmt = detect_recording_format(file, usage=f"kvbudget trace convert {{}} --out {out}")
        if fmt == "records":
            refuse_unreadable_records(file)  # aggregates, prompts, unsent results: if no trace
    except OSError:
        return None
    except TraceError as refusal:  # a load tool's file of aggregates, a server log, ...
        if refusal.problem.startswith("cannot tell the recording format"):
            return None
        if refusal.problem.startswith("holds aggregate figures"):  # a run's, never a trace's
            raise
        try:
            detect_format(file)
        except (TraceError, OSError):  # no trace either: the recording's reason says more
            raise refusal from None
        return None
    return None if fmt == "records" or (fmt == "run" and not _gateway_run(file)) else fmt


def _gateway_run(path: Path) -> bool:
    """A ``kvbudget serve`` run directory (its ``replay.json``'s executor): the requests its
    gateway saw, with no trace behind them, converted as a load tool's recording is."""
    try:
        meta = json.loads((path / "replay.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("executor") == "serve"


def _convert_recording(file: Path, out: Path, fmt: str, trace_args: TraceArgs,
                       seed: int | None) -> None:
    """Write the requests a load tool's recording sent as a trace: what ``simulate``,
    ``compare``, ``tune``, ``capacity`` and ``plan --trace`` take for a what-if on the recorded
    workload (``--rate-scale 2``: twice its rate). Says what the file cannot carry: a closed
    loop's users, conversations' turn order, and what the recording assumed."""
    given = trace_args.given()
    other = sorted(set(given) - RECORDING_OPTIONS)
    if other:
        flags = ", ".join("--" + k.replace("_", "-") for k in other)
        raise CliError(f"{flags}: {file} is a load tool's recording ({fmt}): its requests are "
                       "written as it sent them; give these options when you simulate the "
                       f"converted trace (kvbudget simulate --trace {out} {flags} ...)")
    options = trace_args.options()  # TraceOptions' defaults where not given: not passed on
    rec = read_recording(file, format=fmt, default_tier=options.default_tier,
                         seed=0 if seed is None else seed,
                         max_output=options.max_output if "max_output" in given else None)
    save_workload(rec.workload, out)
    due = any(_holds_due(rec, st) for st in rec.stages)
    sender = "its clients" if fmt == "run" else "the tool"  # a kvbudget serve directory's
    if any(_sends_drawn(rec, st) for st in rec.stages):
        held = ("the requests at send times rebuilt from each stage's rate, cap and latencies "
                "(the file records none: see the notes)"
                + ("; a capped stage's when each was due, below" if due else ""))
    else:
        held = (f"the requests as {sender} offered them (a capped stage's when each was due, "
                f"below)" if due else f"the requests as {sender} sent them") + ", on its clock"
    print(f"wrote {counted(len(rec.workload), 'request')} of {file} "
          f"({'kvbudget serve' if fmt == 'run' else rec.tool}) to {out}: {held}")
    for line in _recording_said(rec, out):
        print(fill(line), file=sys.stderr)


def _recording_said(rec: "Recording", out: Path) -> list[str]:
    """What the converted trace holds that the recording assumed, and what it cannot hold."""
    lines = [f"note: {rec.path}: {text}" for text in rec.notes]
    said = load_said(rec.workload.meta)
    # the trace loader's warnings the reader also gave as notes (validate prints those): once
    lines += [f"warning: {rec.path}: {text}" for text in said.get("warnings", ())
              if text not in rec.notes]
    assumed = [f"assumed: {rec.path}: {text}" for text in said.get("assumed", ())]
    lines += assumed
    if assumed:  # the generic format has no place to say so
        lines.append(f"warning: {out} holds what was assumed above as if its file had said it: "
                     "a run of it will not say so")
    for st in rec.stages:
        label = st.label or "(one)"
        if st.load == "closed":
            users = counted(st.max_concurrency or 1, "user")
            lines.append(
                f"warning: stage {label} was a {load_words(st)}: {out} holds its requests at "
                f"{_sends(rec, st)}, which a simulation of it replays open loop (a slower "
                "simulated server does not hold the next send back, and --rate-scale scales "
                f"those sends, not the users); --users {st.max_concurrency} simulates {users} "
                "sending its requests in turn")
        elif st.load == "capped":
            lines.append(f"warning: stage {label} was an {load_words(st)}: {out} holds its "
                         f"requests at {_capped_times(rec, st)}, which a simulation of it "
                         "replays open loop without that cap" + (
                             ": more in flight than the tool let be wherever its slots were "
                             "all busy" if _full(rec, st) else
                             " (a slower simulated server does not hold a send back)"))
    if len(rec.stages) > 1:
        lines.append(f"warning: {out} holds the recording's {len(rec.stages)} stages one after "
                     "another on its clock, with the pauses between them: --window START:END "
                     f"keeps one ({_stage_spans(rec)})")
    if rec.conversations is not None:
        lines.append(f"warning: {out} holds no conversation: a later turn is sent at its "
                     "recorded time, not after the turn before it ended")
    server = ", ".join(f"{k} {v}" for k, v in rec.config.items()
                       if k in ("model", "gpu", "tensor_parallel_size") and v is not None)
    lines.append(f"simulate it with the server's --gpu and --model ("
                 f"{'the recording says: ' + server if server else 'the recording names neither'}"
                 ") and the cost file calibrate --records wrote: "
                 f"kvbudget simulate --trace {out} --gpu GPU --model MODEL --cost-model "
                 "cost.json --rate-scale 2 (twice its rate)")
    return lines


def _lag_s(rec: "Recording", stage: "RecordedStage") -> FloatArray:
    """How long after the time the converted trace holds (the workload's ``arrival_s``) the
    tool sent each request of ``stage`` (the recording's ``arrival_s``): 0 where the trace holds
    the sends, a capped stage's wait and the tool's own scheduling where it holds due times
    (vllm bench serve's start_times less queue_times, AIPerf's issues, the times drawn again)."""
    rows = (rec.measured["stage"].astype(str) == stage.label).to_numpy()
    sent = rec.measured["arrival_s"].to_numpy(dtype=float)[rows]
    return np.asarray(sent - rec.workload.arrival_s[rows], dtype=np.float64)


def _holds_due(rec: "Recording", stage: "RecordedStage") -> bool:
    """Whether the converted trace holds ``stage``'s requests at other times than their sends."""
    return stage.load == "capped" and not np.allclose(_lag_s(rec, stage), 0.0, rtol=0.0,
                                                      atol=1e-9)


def _stage_rows(rec: "Recording", stage: "RecordedStage") -> tuple[FloatArray, FloatArray,
                                                                      FloatArray]:
    """``stage``'s requests' times in the converted trace, their sends and their ends."""
    rows = (rec.measured["stage"].astype(str) == stage.label).to_numpy()
    sent = rec.measured["arrival_s"].to_numpy(dtype=float)[rows]
    end = sent + rec.measured["e2e_s"].to_numpy(dtype=float)[rows]
    return rec.workload.arrival_s[rows], sent, end


def _held_back(rec: "Recording", stage: "RecordedStage") -> bool:
    """Whether a capped ``stage``'s trace holds due times and its requests in flight filled its
    slots at times (:func:`cap_reached`, the rule every reader applies), when a request due
    waited for one to free: where they never did, none waited, and a lag is the tool's own
    scheduling."""
    return _holds_due(rec, stage) and _full(rec, stage)


def _full(rec: "Recording", stage: "RecordedStage") -> bool:
    """Whether a capped ``stage``'s requests in flight ever filled its slots
    (:func:`cap_reached`): a replay without the cap may hold more in flight there."""
    _, sent, end = _stage_rows(rec, stage)
    return cap_reached(sent, end, stage.max_concurrency)


def _sends_drawn(rec: "Recording", stage: "RecordedStage") -> bool:
    """Whether ``stage``'s sends were drawn again, not read: a ``vllm bench serve`` result
    without ``start_times`` (vLLM before 0.15.0, :func:`kvbudget.results.recorded_vllm_bench.
    bench_arrivals`); inference-perf's ``redrawn`` stages draw only the due times again, their
    sends recorded."""
    return stage.send_times == "redrawn" and rec.format == "vllm-bench"


def _sends(rec: "Recording", stage: "RecordedStage") -> str:
    return "their rebuilt sends" if _sends_drawn(rec, stage) else "their recorded sends"


def _capped_times(rec: "Recording", stage: "RecordedStage") -> str:
    """Which times the converted trace holds for a capped ``stage``, exactly: its sends
    (recorded, or drawn again), or due times that far from them, and whether any request waited
    for a slot."""
    sends = _sends(rec, stage)
    if not _holds_due(rec, stage):
        return sends
    lag_ms = _lag_s(rec, stage) * 1e3
    median = float(np.median(lag_ms))
    side = "before" if median >= 0 else "after"
    far = (f"{abs(median):.3g} ms {side} {sends} (median; at most "
           f"{float(np.max(np.abs(lag_ms))):.3g} ms)")
    if _held_back(rec, stage):
        return (f"the times they were due, not {sends} (its "
                f"{stage.max_concurrency} slots were all busy at times, and a request due then "
                f"was sent when one freed): {far}")
    return (f"the times they were due, {far}: its {stage.max_concurrency} slots were never all "
            "busy, so no request waited for one, and the lag is the tool's own scheduling")


def _stage_spans(rec: "Recording") -> str:
    """Each stage's first and last send on the converted trace's clock, ``--window``'s
    terms (``0: synchronous 0.000 .. 1.234 s``)."""
    arrival = rec.workload.arrival_s
    labels = rec.measured["stage"].astype(str).to_numpy()
    spans = []
    for st in rec.stages:
        at = arrival[labels == st.label]
        if len(at):
            spans.append(f"{st.label} {float(at.min()):.3f} .. {float(at.max()):.3f} s")
    return "; ".join(spans)


def _synth_spec(spec_file: Path | None) -> dict[str, Any]:
    if spec_file is None:
        return default_workload_spec().model_dump(exclude_none=True)
    if not spec_file.is_file():
        raise CliError(f"{spec_file}: no such file")
    with spec_file.open("rb") as fh:
        try:
            doc = tomllib.load(fh)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise CliError(f"{spec_file}: not valid TOML ({exc})") from None
    table = doc.get("workload", doc)
    if not isinstance(table, dict):
        raise CliError(f"{spec_file}: [workload] must be a table")
    return table


def _synth_error(exc: ValueError, spec: Path | None,
                 flags: dict[str, tuple[str, Any]]) -> CliError:
    """``exc`` (the workload table's) under what the user typed: the flag that set the field
    (``--rate-rps: must be > 0, got -1``, where it said ``workload.arrival.rate_rps ...``),
    else the ``--spec`` file (it named no file)."""
    text = str(exc)
    for flag, (key, value) in flags.items():
        if value is not None and text.startswith(f"{key} "):
            return CliError(f"{flag}: {text[len(key) + 1:]}")
    return CliError(f"{spec}: {text}" if spec is not None else text)


@trace_app.command("synth")
def synth_command(
    out: Annotated[Path, typer.Option("--out", help="Output: .parquet, .csv or .jsonl.")],
    spec: Annotated[Path | None, typer.Option(
        "--spec", help="TOML file with a [workload] table (default: the default what-if "
        "mix).")] = None,
    rate_rps: Annotated[float | None, typer.Option(
        "--rate-rps", help="Override the arrival rate, requests a second (default: the spec's; "
        "the default mix's 5.5).")] = None,
    duration_s: Annotated[float | None, typer.Option(
        "--duration-s", help="Override the duration, seconds (drops num_requests; default: the "
        "spec's; the default mix's 300).")] = None,
    num_requests: Annotated[int | None, typer.Option(
        "--num-requests", help="Override the request count (drops duration_s; default: the "
        "spec's duration or count).")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of every draw.")] = 0,
) -> None:
    """Generate a synthetic workload (from --spec, or the default mix) and write it."""
    with user_errors():
        check_out_file(out)
        check_save_path(out)
        if duration_s is not None and num_requests is not None:
            raise CliError("--duration-s and --num-requests exclude each other (each replaces "
                           "the other): give one")
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
        try:
            parsed = parse_workload_spec(table)
        except ValueError as exc:
            raise _synth_error(exc, spec, {"--rate-rps": ("workload.arrival.rate_rps", rate_rps),
                                           "--duration-s": ("workload.duration_s", duration_s),
                                           "--num-requests": ("workload.num_requests",
                                                              num_requests)}) from None
        base_dir = spec.resolve().parent if spec is not None else None
        workload = build_workload(parsed, np.random.default_rng(seed), base_dir)
        if len(workload) == 0:  # no loader reads an empty trace back
            raise CliError("the workload has no requests (--num-requests 0, or a duration too "
                           f"short for its rate): {out} not written")
        save_workload(workload, out)
        print(f"wrote {counted(len(workload), 'request')} over {workload.span_s:,.1f} s to {out}")


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
        if list_sources:
            given = [flag for flag, on in (("NAME", name is not None),
                                           ("--dest", dest != Path(".")),
                                           ("--base-url", base_url is not None),
                                           ("--sha256", sha256 is not None),
                                           ("--force", force)) if on]
            if given:  # --list downloads nothing: they would be ignored
                raise CliError(f"--list lists the traces and downloads nothing: drop "
                               f"{', '.join(given)}")
        if list_sources or name is None:
            for source in SOURCES.values():
                pinned = ("sha256" if source.sha256 else "git blob" if source.git_blob_sha1
                          else "no pinned checksum")
                print(textwrap.fill(f"{source.name:<24}{source.description} [{pinned}]", WIDTH,
                                    subsequent_indent=" " * 24))
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
