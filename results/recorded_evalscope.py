"""evalscope perf's per-request database: ``benchmark_data.db`` and the run directory it is in.

What evalscope perf writes (modelscope/evalscope 1.14.1): each run of ``evalscope perf`` goes
to ``<outputs-dir>/[<timestamp>/]<name>/``, one subdirectory a run of its sweep,
``parallel_<P>_number_<N>/`` or, with ``--open-loop``, ``rate_<R>_number_<N>/``
(``perf/main.py`` ``run_multi_benchmark``: one run per ``--parallel``/``--rate`` and
``--number`` pair, ``--sleep-interval`` seconds apart, in one process). Each holds
``benchmark_data.db``, an SQLite database with one table, ``result``, a row a measured request
(``perf/utils/db_util.py`` ``create_result_table`` and ``insert_benchmark_data``):
``start_time`` (``time.perf_counter()`` when the request was sent, seconds on the process's
monotonic clock: a run's rows are rebased to its first), ``first_chunk_latency`` (seconds from
``start_time`` to the first streamed chunk with text), ``latency`` (to the last streamed
message, the usage chunk included), ``completed_time``, ``prompt_tokens`` and
``completion_tokens`` (the server's ``usage``), ``inter_token_latencies`` (JSON: the gaps
between chunks with text), ``success`` (1/0), ``is_stream`` (1/0), ``request`` (the JSON
body sent: ``model``, ``max_tokens``, ``min_tokens``, ``ignore_eos`` where ``--extra-args``
adds it) and ``response_messages`` (base64 of serialised Python objects: never read here,
loading them runs code). A failed request's row keeps its ``start_time``, ``completed_time`` and body, nothing
else: no tokens, no latency, no error text (``insert_benchmark_data``'s failure branch).
Warm-up requests (``--warmup-num``) are not written (``core/metrics_consumer.py``).
``benchmark_args.json`` beside it is the run's arguments (``db_util.summary_result``,
``Arguments.to_dict``), ``parallel``, ``number`` and ``rate`` set to the run's own values.

The load (``perf/core/strategies``): without ``--open-loop`` a closed loop of ``parallel``
users (a semaphore of that many slots, ``closed_loop.py``), or, with a ``rate`` (not -1),
requests due at Poisson times of that rate each waiting for one of the slots (capped); with
``--open-loop`` an open loop at the Poisson times of ``rate`` (``open_loop.py``; ``parallel``
is -1). Both rescale the exponential draws so that the ``N`` requests span exactly ``N /
rate`` seconds. ``--duration`` stops the sending that many seconds after the first measured
request and waits for those in flight (a soft exit).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_FILE_BYTES,
    MAX_MEASURED_S,
    FloatArray,
    fewer_rows,
    finish_columns,
    load_json,
    max_tokens_note,
    number,
    perf_counter_time,
    time_limit_note,
)
from kvbudget.results.recorded_idle import closed_loop_idle_note
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule

TOOL = "evalscope perf"
DB_NAME = "benchmark_data.db"
ARGS_NAME = "benchmark_args.json"
REQUIRED_COLUMNS = ("start_time", "success", "latency", "first_chunk_latency", "prompt_tokens",
                    "completion_tokens")
"""The ``result`` table's columns a recording needs (1.14.1 ``db_util.DatabaseColumns``)."""
RUN_DIR = re.compile(r"(parallel|rate)_(-?[0-9.]+)_number_([0-9]+)")
"""A run's directory in a sweep (``perf/main.py`` ``run_multi_benchmark``)."""
TRACE_DATASET = "workload_trace"
"""The dataset whose requests carry their own arrival times (``--open-loop`` only)."""
_INPUT_ONLY = ("embedding", "rerank")
"""``--api`` values whose requests generate nothing (``Metrics.is_input_only``)."""


def _connect(db: Path) -> sqlite3.Connection:
    """The database, read-only (a recording is never written)."""
    try:
        if db.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(db, f"is over {MAX_FILE_BYTES >> 30} GiB: too large for a recording")
        return sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    except (OSError, sqlite3.Error) as exc:
        raise TraceError(db, f"cannot be read as an SQLite database ({exc})") from None


def _columns(db: Path) -> list[str] | None:
    """The ``result`` table's columns; None when there is no such table."""
    con = _connect(db)
    try:
        rows = con.execute("PRAGMA table_info(result)").fetchall()
    except sqlite3.Error as exc:
        raise TraceError(db, f"cannot be read as an SQLite database ({exc})") from None
    finally:
        con.close()
    return [str(r[1]) for r in rows] or None


def is_evalscope_db(db: Path) -> bool:
    """An SQLite file with evalscope perf's ``result`` table (its ``start_time`` and
    ``first_chunk_latency``)."""
    cols = _columns(db)
    return cols is not None and {"start_time", "first_chunk_latency"} <= set(cols)


def evalscope_dbs(path: Path) -> list[Path]:
    """The databases a path names: itself, a run directory's ``benchmark_data.db``, or one in
    each subdirectory of a sweep's directory (none: not evalscope's)."""
    if path.is_file():
        return [path]
    if (path / DB_NAME).is_file():
        return [path / DB_NAME]
    if path.is_dir():
        return sorted(p for p in path.glob(f"*/{DB_NAME}") if p.is_file())
    return []


def holds_evalscope(path: Path) -> bool:
    """A directory of evalscope perf's: a run's, a sweep's, or one above a sweep's (its
    ``--outputs-dir`` or timestamp directory, refused naming the sweeps in it)."""
    return bool(evalscope_dbs(path)) or next(path.glob(f"*/*/{DB_NAME}"), None) is not None


@dataclass(frozen=True)
class _Run:
    """One run's requests (rows in ``rowid`` order) and what its arguments say."""

    db: Path
    label: str
    start: FloatArray
    ttft: FloatArray
    e2e: FloatArray
    prompt: FloatArray
    output: FloatArray
    max_tokens: FloatArray
    itl_mean: FloatArray
    failed: np.ndarray[Any, np.dtype[np.bool_]]
    streamed: np.ndarray[Any, np.dtype[np.bool_]]
    bodies: tuple[dict[str, Any], ...]
    args: dict[str, Any]


def _body(text: Any) -> dict[str, Any]:
    """The request body a row sent (``{}`` when it is not a JSON object)."""
    if not isinstance(text, str):
        return {}
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _itl_mean(text: Any) -> float:
    """The mean gap between chunks (``inter_token_latencies``), NaN without one."""
    try:
        gaps = json.loads(text) if isinstance(text, str) else None
    except (json.JSONDecodeError, RecursionError):
        return math.nan
    vals = [float(g) for g in gaps if isinstance(g, int | float) and math.isfinite(g)] \
        if isinstance(gaps, list) else []
    return float(np.mean(vals)) if vals else math.nan


def _select(db: Path) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The ``result`` table's rows, with the columns read."""
    cols = _columns(db)
    if cols is None:
        raise TraceError(db, "is an SQLite database with no result table (evalscope perf's "
                         "benchmark_data.db has one)")
    missing = [c for c in REQUIRED_COLUMNS if c not in cols]
    if missing:
        raise TraceError(db, "is not evalscope perf's benchmark_data.db as kvbudget reads it: "
                         f"its result table has no {', '.join(missing)}")
    wanted = [*REQUIRED_COLUMNS] + [c for c in ("is_stream", "request", "inter_token_latencies")
                                    if c in cols]
    con = _connect(db)
    try:
        rows = con.execute(f"SELECT {', '.join(wanted)} FROM result ORDER BY rowid").fetchall()
    except sqlite3.Error as exc:
        raise TraceError(db, f"cannot be read as an SQLite database ({exc})") from None
    finally:
        con.close()
    if not rows:
        raise TraceError(db, "its result table holds no request")
    _refuse_fewer_rows(db, len(rows))
    return wanted, rows


def _refuse_fewer_rows(db: Path, n: int) -> None:
    """Refuse a database holding fewer requests than the run's ``benchmark_summary.json``
    beside it counts (``Total Requests``). evalscope 1.14.1 writes each measured request to
    the database as it counts it (``perf/core/metrics_consumer.py:111-119``:
    ``accumulator.update`` then ``insert_benchmark_data``; ``utils/benchmark_util.py:258``
    ``n_total += 1``, summed as ``total_requests`` :436, ``Total Requests`` :553), a warm-up
    one in neither: a copy with rows lost otherwise reads as a smaller run."""
    summary = db.with_name("benchmark_summary.json")
    if not summary.is_file():
        return
    try:
        doc = json.loads(summary.read_text())
    except (OSError, ValueError):
        return  # not read for anything else: its count unknown
    total = doc.get("Total Requests") if isinstance(doc, dict) else None
    if isinstance(total, int) and not isinstance(total, bool) and total > n:
        raise TraceError(db, fewer_rows(f"its result table holds {n} requests, but "
                                        f"{summary.name} beside it counts {total} (Total "
                                        "Requests)", f"its Total Requests is set to {n}"))


def _row(db: Path, i: int, row: Mapping[str, Any]) -> tuple[float, ...]:
    """start, ttft, e2e, prompt, output, failed, streamed of one row, checked."""
    def num(name: str) -> float:
        return number(row.get(name), db, f"result.{name}", i)

    start = perf_counter_time(row.get("start_time"), db, "result.start_time", i, TOOL)
    if math.isnan(start):
        raise TraceError(db, "missing", row=i, field="result.start_time")
    ok = row.get("success")
    if ok not in (0, 1) or isinstance(ok, float):
        raise TraceError(db, f"must be 1 or 0, got {ok!r}"[:80], row=i, field="result.success")
    if not ok:  # evalscope keeps no tokens nor times of a failed request
        return start, math.nan, math.nan, 0.0, 0.0, 1.0, 0.0
    ttft, e2e = num("first_chunk_latency"), num("latency")
    for name, value in (("first_chunk_latency", ttft), ("latency", e2e)):
        if math.isnan(value):
            raise TraceError(db, "missing in a successful request", row=i, field=f"result.{name}")
        if not 0 <= value <= MAX_MEASURED_S:
            raise TraceError(db, f"{'negative' if value < 0 else 'implausible'} time from "
                             f"start_time: {value:g} s", row=i, field=f"result.{name}")
    if e2e < ttft - 1e-9:
        raise TraceError(db, f"the request ends ({e2e:g} s) before its first chunk ({ttft:g} "
                         "s)", row=i, field="result.latency")
    prompt, output = num("prompt_tokens"), num("completion_tokens")
    for name, value in (("prompt_tokens", prompt), ("completion_tokens", output)):
        if math.isnan(value):
            raise TraceError(db, "missing in a successful request (the server's usage)",
                             row=i, field=f"result.{name}")
    flag = row.get("is_stream")  # no such column before evalscope 1.x: NaN, decided by the run
    return start, ttft, e2e, prompt, output, 0.0, math.nan if flag is None else float(flag != 0)


def _read_run(db: Path, sweep: bool) -> _Run:
    """One database and the ``benchmark_args.json`` beside it; labelled by its directory's
    name in a sweep or where evalscope named it (``parallel_1_number_8``), else by the name
    evalscope gives a run of its arguments."""
    cols, rows = _select(db)
    dicts = [dict(zip(cols, r, strict=True)) for r in rows]
    vals = np.array([_row(db, i, d) for i, d in enumerate(dicts)], dtype=np.float64)
    bodies = tuple(_body(d.get("request")) for d in dicts)
    max_tokens = np.array([_max_tokens(db, i, b) for i, b in enumerate(bodies)])
    args_path = db.parent / ARGS_NAME
    args = load_json(args_path) if args_path.is_file() else {}
    if not isinstance(args, dict):
        raise TraceError(args_path, "must hold one JSON object (evalscope perf's arguments)")
    label = db.parent.name if sweep or RUN_DIR.fullmatch(db.parent.name) else _run_name(args)
    failed = vals[:, 5] > 0
    vals[:, 6] = np.where(np.isnan(vals[:, 6]), _streamed(args, vals), vals[:, 6])
    return _Run(db=db, label=label, start=vals[:, 0], ttft=vals[:, 1], e2e=vals[:, 2],
                prompt=vals[:, 3], output=vals[:, 4], max_tokens=max_tokens,
                itl_mean=np.array([math.nan if failed[i] else _itl_mean(
                    d.get("inter_token_latencies")) for i, d in enumerate(dicts)]),
                failed=failed, streamed=vals[:, 6] > 0, bodies=bodies, args=args)


def _run_name(args: Mapping[str, Any]) -> str:
    """The directory name evalscope gives a run of these arguments (``perf/main.py``
    ``run_multi_benchmark``), ``""`` without them."""
    if "number" not in args:
        return ""
    sweep = "rate" if args.get("open_loop") is True else "parallel"
    return f"{sweep}_{args.get(sweep)}_number_{args['number']}"


def _streamed(args: Mapping[str, Any], vals: FloatArray) -> float:
    """Whether a run without ``is_stream`` was streamed: its arguments' ``stream``, else
    whether any successful request's first chunk came before its end (a non-streamed one's
    ``first_chunk_latency`` is its ``latency``)."""
    if isinstance(args.get("stream"), bool):
        return float(args["stream"])
    ok = vals[:, 5] == 0
    return float(bool((vals[ok, 1] < vals[ok, 2]).any()))


def _max_tokens(db: Path, i: int, body: Mapping[str, Any]) -> float:
    """The ``max_tokens`` the request asked for (NaN: none in its body)."""
    for key in ("max_tokens", "max_completion_tokens"):
        if key in body and body[key] is not None:
            return number(body[key], db, f"result.request.{key}", i)
    return math.nan


def _refuse(run: _Run) -> None:
    """What cannot be replayed: a multi-turn run, an embedding or rerank API, a run that was
    not streamed, a run whose every request failed."""
    db, args = run.db, run.args
    if args.get("multi_turn") is True:
        raise TraceError(db, "is a multi-turn run (--multi-turn): its result table does not "
                         "say which conversation each turn belongs to, so its turns cannot be "
                         "replayed as conversations")
    api = str(args.get("api") or "")
    if any(word in api for word in _INPUT_ONLY):
        raise TraceError(db, f"is a run of --api {api}: its requests generate no tokens, "
                         "nothing kvbudget simulates")
    if run.failed.all():
        raise TraceError(db, f"every one of its {len(run.failed)} requests failed (success 0; "
                         "evalscope keeps no error text in the database, see its "
                         "benchmark.log): the server answered none, so there is nothing to "
                         "simulate or compare")
    if not run.streamed[~run.failed].any():
        raise TraceError(db, "was not streamed (--no-stream; is_stream 0): evalscope times a "
                         "non-streamed request's first chunk at its end (first_chunk_latency "
                         "= latency), so it measured no TTFT to replay or compare; rerun with "
                         "--stream, its default")


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stage(run: _Run, first_send_s: float, notes: list[str]) -> RecordedStage:
    """The run's load as ``benchmark_args.json`` says evalscope ran it."""
    args, n = run.args, len(run.start)
    where = f"{run.label or run.db.name}: "
    parallel, rate = _whole(args.get("parallel")), args.get("rate")
    rate = float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) and \
        math.isfinite(rate) and rate > 0 else None
    drawn = (f"Poisson arrivals at {rate:g} req/s, their draws rescaled so the "
             f"{counted(_whole(args.get('number')) or n, 'request')} span number / rate "
             "seconds (core/strategies)") if rate else ""
    if not args:
        notes.append(f"{where}no {ARGS_NAME} beside the database: load mode unknown, replayed "
                     "at the recorded sends")
        return RecordedStage(run.label, "unknown")
    if args.get("open_loop") is True and args.get("dataset") == TRACE_DATASET:
        stage = RecordedStage(run.label, "open", None, None)
        notes.append(f"{where}an open loop at the timestamps of its --dataset workload_trace "
                     "file (plugin/datasets/workload_trace.py: --rate not used), replayed at "
                     "the recorded sends")
    elif args.get("open_loop") is True and rate:
        stage = RecordedStage(run.label, "open", rate, None)
        notes.append(f"{where}an open loop (--open-loop): {drawn}, replayed at the recorded "
                     "sends")
    elif args.get("open_loop") is not True and parallel and parallel >= 1 and rate:
        stage = RecordedStage(run.label, "capped", rate, parallel)
        notes.append(f"{where}{drawn}, each waiting for one of {parallel} slots: offered at "
                     "its start_time, when it got one in the recorded run (evalscope keeps no "
                     "due time), so a faster simulated server cannot send sooner than the "
                     "recorded one did")
    elif args.get("open_loop") is not True and parallel and parallel >= 1:
        stage = RecordedStage(run.label, "closed", None, parallel)
    else:
        notes.append(f"{where}{ARGS_NAME} names no load evalscope runs (parallel "
                     f"{args.get('parallel')!r}, rate {args.get('rate')!r}, open_loop "
                     f"{args.get('open_loop')!r}): load mode unknown, replayed at the recorded "
                     "sends")
        return RecordedStage(run.label, "unknown")
    return _timed(run, stage, first_send_s, notes)


def _timed(run: _Run, stage: RecordedStage, first_send_s: float,
           notes: list[str]) -> RecordedStage:
    """A stage cut by ``--duration`` (sending stops that long after its first measured send,
    those in flight run to their end); the warm-up and request count said."""
    args, n = run.args, len(run.start)
    where = f"{run.label or run.db.name}: "
    warmup = args.get("warmup_num")
    notes.extend(_idle_note(run, stage, warmup))
    if isinstance(warmup, int | float) and not isinstance(warmup, bool) and warmup > 0:
        notes.append(f"{where}its warm-up requests (--warmup-num {warmup:g}) are not in the "
                     "database: the simulated server starts idle" + (
                         ", while the recorded one still served the warm-ups' last requests "
                         "beside the first measured ones (one dispatch loop, no barrier)"
                         if stage.load != "open" else ""))
    seconds = args.get("duration")
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise TraceError(run.db.with_name(ARGS_NAME), f"not finite: {seconds}",
                         field="duration")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        said = time_limit_note(stage.label, stage.load, float(seconds),
                               "evalscope perf --duration", n, grace_s=math.inf)
        if said:
            notes.append(said)
        if stage.load in ("closed", "capped"):
            return RecordedStage(stage.label, stage.load, stage.request_rate,
                                 stage.max_concurrency,
                                 time_limit_end_s=first_send_s + float(seconds))
        return stage
    asked = _whole(args.get("number"))
    if asked is not None and asked != n:
        notes.append(f"{where}the database holds {counted(n, 'request')} of the {asked} "
                     "--number asked for (a run cut short?): replayed with those")
    return stage


def _idle_note(run: _Run, stage: RecordedStage, warmup: Any) -> list[str]:
    """The note of a closed run's users idle between a request's end and their next send
    (``start_time``, stamped before the request is sent, and ``latency`` after it; NaN for
    a failed one). Not for a run with warm-ups (``--warmup-num``): they held the first slots
    and are not in the database, so the slots cannot be followed."""
    if (stage.load != "closed" or not stage.max_concurrency
            or (isinstance(warmup, int | float) and not isinstance(warmup, bool) and warmup > 0)):
        return []
    note = closed_loop_idle_note(stage.label, stage.max_concurrency, run.start,
                                 run.start + run.e2e)
    return [] if note is None else [note]


def _placed(runs: list[_Run]) -> list[_Run]:
    """The runs in the order they ran, on one clock (``perf_counter`` of one process: a
    sweep's runs one after another); refused when they overlap or lie a day apart."""
    runs = sorted(runs, key=lambda r: float(r.start.min()))
    for a, b in itertools.pairwise(runs):
        end = float(np.nanmax(a.start + np.where(np.isfinite(a.e2e), a.e2e, 0.0)))
        gap = float(b.start.min()) - end
        if gap < 0 or gap > MAX_MEASURED_S:
            raise TraceError(b.db, f"its requests start {gap:g} s after the last of "
                             f"{a.db.parent.name}'s ended: not one evalscope perf sweep run "
                             "after run on one clock; pass each run directory alone")
    return runs


def _config(runs: list[_Run], stages: list[RecordedStage]) -> dict[str, Any]:
    """What the arguments and request bodies say of the server and the client."""
    config: dict[str, Any] = {}
    args = runs[0].args
    models = {str(b.get("model")) for r in runs for b in r.bodies if b.get("model")}
    if isinstance(args.get("model"), str) and args["model"]:
        config["model"] = args["model"]
    elif len(models) == 1:
        config["model"] = models.pop()
    for key, name in (("url", "target"), ("api", "api"), ("dataset", "dataset")):
        if isinstance(args.get(key), str) and args[key]:
            config[name] = args[key]
    if len(stages) == 1 and stages[0].request_rate is not None:
        config["request_rate"] = stages[0].request_rate
    if len(stages) == 1 and stages[0].max_concurrency is not None:
        config["max_concurrency"] = stages[0].max_concurrency
    tokens = {float(x) for r in runs for x in r.max_tokens[~r.failed] if math.isfinite(x)}
    if len(tokens) == 1:
        config["max_tokens"] = int(tokens.pop())
    eos = {b.get("ignore_eos") for r in runs for b in r.bodies}
    if len(eos) == 1 and isinstance(next(iter(eos)), bool):
        config["ignore_eos"] = eos.pop()
    return config


def read_evalscope(path: Path, default_tier: str,
                   max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read evalscope perf's ``benchmark_data.db``, a run directory holding one, or a sweep's
    directory (a run a subdirectory: one stage each, in the order they ran)."""
    dbs = evalscope_dbs(path)
    if not dbs:
        sweeps = sorted({p.parent.parent.name for p in path.glob(f"*/*/{DB_NAME}")})
        raise TraceError(path, f"holds no {DB_NAME} (evalscope perf's run directory, or a "
                         "sweep's directory of them)" + (
                             f"; its sweeps are in {', '.join(sweeps[:5])}: pass one"
                             if sweeps else ""))
    runs = [_read_run(db, sweep=len(dbs) > 1) for db in dbs]
    for run in runs:
        _refuse(run)
    runs = _placed(runs)
    clock0 = float(runs[0].start.min())
    notes: list[str] = []
    stages = [_stage(r, float(r.start.min()) - clock0, notes) for r in runs]
    cat = np.concatenate
    sent = cat([r.start for r in runs]) - clock0
    failed = cat([r.failed for r in runs])
    streamed = cat([r.streamed for r in runs])
    recorded = cat([r.max_tokens for r in runs])
    try:
        workload, counts, warnings = finish_columns(
            path, "evalscope", prompt=cat([r.prompt for r in runs]),
            output=cat([r.output for r in runs]), arrival=sent,
            fields={"prompt_tokens": "result.prompt_tokens",
                    "output_tokens": "result.completion_tokens",
                    "arrival_s": "result.start_time",
                    "max_output_tokens": "result.request.max_tokens"},
            default_tier=default_tier,
            max_output=recorded if np.isfinite(recorded).any() else None,
            max_output_rule=max_output_rule, completion_order=True)
    except TraceError as exc:
        raise _in_database(exc, runs) from None
    order = workload.request_id
    labels = [r.label for r in runs for _ in r.start]
    notes += _notes(runs, failed, streamed, recorded, max_output_rule)
    ttft = np.where(streamed, cat([r.ttft for r in runs]), np.nan)
    return build_recording(path, "evalscope", workload, ttft=ttft[order],
                           e2e=cat([r.e2e for r in runs])[order],
                           status=["error" if failed[i] else "completed" for i in order.tolist()],
                           stage=[labels[i] for i in order.tolist()],
                           itl_mean=cat([r.itl_mean for r in runs])[order],
                           config=_config(runs, stages), counts={**counts, "num_failed": 0},
                           notes=[*notes, *warnings], stages=tuple(stages),
                           sent_s=sent[order], tool=TOOL)


def _in_database(exc: TraceError, runs: list[_Run]) -> TraceError:
    """``exc``, of a row of the runs' requests read together, as the database it is in and
    its row there (``rowid`` order, 0-based): a run directory's "row 3" named the directory,
    not its benchmark_data.db, and a sweep's the sweep (the second run's rows counted on)."""
    if exc.row is None:
        return exc
    i = exc.row
    for run in runs:
        if i < len(run.start):
            return TraceError(run.db, exc.problem, row=i, field=exc.field)
        i -= len(run.start)
    return exc


def _notes(runs: list[_Run], failed: np.ndarray[Any, np.dtype[np.bool_]],
           streamed: np.ndarray[Any, np.dtype[np.bool_]], recorded: FloatArray,
           rule: MaxOutputRule | None) -> list[str]:
    """What was assumed of the file as a whole."""
    notes = ["times: evalscope's, from each request's start_time (time.perf_counter() before "
             "the POST) to its first streamed chunk with text (TTFT: a chunk of empty text, as "
             "a partial multi-byte token's, does not count) and to its last streamed message "
             "(E2E); the files record no evalscope version"]
    if len(runs) > 1:
        notes.append(f"{len(runs)} runs of one sweep, one stage each, placed on their one "
                     "clock (the --sleep-interval between them kept)")
    if failed.any():
        notes.append(f"{counted(int(failed.sum()), 'request')} failed (success 0): evalscope "
                     "keeps no tokens, latency nor error text of a failed request, so they "
                     "are dropped, neither simulated nor measured (the server may have worked "
                     "on them)")
    gaps = ~streamed & ~failed
    if gaps.any():
        notes.append(f"{counted(int(gaps.sum()), 'request')} not streamed (is_stream 0): no "
                     "TTFT, not measured")
    notes.append(max_tokens_note(recorded[~failed] if np.isfinite(recorded).any() else None,
                                 rule))
    bodies = [b for r in runs for b in r.bodies]
    if bodies and all(b.get("ignore_eos") is True or (
            b.get("min_tokens") is not None and b.get("min_tokens") == b.get("max_tokens"))
            for b in bodies):
        notes.append("every request asked for ignore_eos or min_tokens = max_tokens: each "
                     "realised output is what was asked")
    return notes
