"""kvbudget's own recordings: the generic records format and run directories.

See :mod:`kvbudget.results.recordings` for the formats. A records file without a
``max_output_tokens`` column declares each request's realised output (never an invented cap).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.engine_share import REFUSE, UnequalEngines, engine_blocks
from kvbudget.results.recorded_fields import (
    REALISED_OUTPUT,
    FloatArray,
    check_times,
    max_tokens_note,
)
from kvbudget.results.recorded_refusals import engine_rules_said
from kvbudget.results.recorded_run_loop import replayed_loop
from kvbudget.results.recorded_whole_answer import BURST_ITL_S
from kvbudget.results.recording import (
    COMPLETED_WORDS,
    MEASUREMENT_COLUMNS,
    Recording,
    build_recording,
    read_replay_meta,
)
from kvbudget.results.records import TIME_LIMIT_CANCELLED, TIME_LIMIT_NOT_SENT
from kvbudget.results.run_parts import REQUESTS_PART, itl_means_of_parts
from kvbudget.results.run_result import read_run
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import CUT_SHORT, TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.text_files import read_text
from kvbudget.workloads.traces import load_trace
from kvbudget.workloads.traces._csv import read_csv_columns, split_header
from kvbudget.workloads.traces._files import file_facts, line_of_row
from kvbudget.workloads.traces._finish import DROP_TRUNCATED
from kvbudget.workloads.traces._jsonl import read_jsonl_columns
from kvbudget.workloads.traces._tabular import generic_kind
from kvbudget.workloads.traces.options import CANONICAL_COLUMNS, TraceOptions
from kvbudget.workloads.traces.report import DRAWN_ARRIVALS, LoadedTrace
from kvbudget.workloads.workload import Workload


def _normalise_status(values: list[str]) -> list[str]:
    """``completed`` for the words that mean it; an HTTP code written as a float (``200.0``:
    pandas writes an integer column with a missing value so) is the code."""
    out = []
    for v in values:
        text = str(v).strip()
        if text.endswith(".0") and text[:-2].isdigit():
            text = text[:-2]
        out.append("completed" if text.lower() in COMPLETED_WORDS else text)
    return out


# ---------------------------------------------------------------------------------------------
# the generic records format


_WANTED = {"ttft_s": "number", "e2e_s": "number", "status": "code", "stage": "label",
           "id": "number"}
"""The measurement columns a records file may hold, each a number or a label column."""


@dataclass(frozen=True)
class _Measured:
    """The measurement columns read from a records file (canonical names)."""

    numbers: dict[str, FloatArray]
    labels: dict[str, list[str]]
    num_rows: int
    file_columns: set[str]
    """Every column the file has (its own names)."""
    line_of: Any
    """Row -> 1-based line (text files); None for Parquet."""


def read_records(path: Path, columns: Mapping[str, str], default_tier: str,
                 max_output: MaxOutputRule | None = None) -> Recording:
    """Read the generic records format."""
    for key in columns:
        if key not in CANONICAL_COLUMNS and key not in MEASUREMENT_COLUMNS:
            raise TraceError(path, f"unknown column name {key!r} in the column mapping (known: "
                             f"{', '.join((*CANONICAL_COLUMNS, *MEASUREMENT_COLUMNS))})",
                             field="columns")
    trace_cols = {k: v for k, v in columns.items() if k in CANONICAL_COLUMNS}
    names = {c: columns.get(c, c) for c in (*MEASUREMENT_COLUMNS, "id")}
    rule = REALISED_OUTPUT if max_output is None else max_output
    loaded = _load_in_seconds(path, TraceOptions(format="generic", columns=trace_cols or None,
                                                 default_tier=default_tier, max_output=rule))
    if DROP_TRUNCATED in dict(loaded.report.dropped):  # a trace's rule, not a measurement's
        raise cut_last_line(path)
    workload, rebased = _rebased(loaded.workload, trace_cols.get("arrival_s", "arrival_s"))
    measured = _read_measurements(path, names)
    numbers, line_of = measured.numbers, measured.line_of
    if measured.file_columns <= {trace_cols.get(c, c) for c in CANONICAL_COLUMNS}:
        # the trace format's columns alone (another tool's results name their times otherwise)
        raise TraceError(path, "is a trace of kvbudget's own format (requests to send: no "
                         f"column of a measured time, {names['ttft_s']!r} or "
                         f"{names['e2e_s']!r}), not a recording: nothing in it was measured; "
                         f"simulate it (kvbudget simulate --trace {shlex.quote(str(path))}), "
                         "or replay it against the server (kvbudget replay --url URL --trace "
                         "FILE) and give the run directory it writes")
    for canon in ("ttft_s", "e2e_s"):
        if canon not in numbers:
            raise TraceError(path, f"missing column {names[canon]!r} needed by the records "
                             "format (the measured time from arrival to the first token / to "
                             "the last token, in seconds)", line=1 if line_of else None,
                             field=names[canon])
    if DRAWN_ARRIVALS in loaded.report.warnings:
        raise TraceError(path, no_send_times(trace_cols.get("arrival_s", "arrival_s")),
                         field=trace_cols.get("arrival_s", "arrival_s"))
    rows = _file_rows(path, workload, numbers.get("id"), measured.num_rows)
    ttft = numbers["ttft_s"][rows]
    e2e = numbers["e2e_s"][rows]
    _check_latencies(path, names, ttft, e2e, rows, line_of)
    status_all = measured.labels.get("status")
    status = (_normalise_status([status_all[r] for r in rows.tolist()]) if status_all is not None
              else ["completed"] * len(rows))
    done = np.array([st == "completed" for st in status], dtype=bool)
    _check_units(path, names, ttft, e2e, workload.output_tokens, done)
    _check_too_fast(path, names, e2e, workload.output_tokens, done)
    stage_all = measured.labels.get("stage")
    stage = ([stage_all[r] for r in rows.tolist()] if stage_all is not None
             else [""] * len(rows))
    counts = {"num_rows_read": loaded.report.rows_read}
    for reason, count in loaded.report.dropped:
        counts["num_dropped_" + reason.split(" (")[0].replace(" ", "_")] = count
    read = ({names[c] for c in MEASUREMENT_COLUMNS if names[c] in measured.file_columns}
            - {trace_cols.get(c, c) for c in CANONICAL_COLUMNS})
    notes = [n for n in (_less_read(w, read) for w in loaded.report.warnings) if n]
    said = workload.meta.get("warnings")
    if isinstance(said, tuple):  # what a run of the workload says: not the measured columns
        workload = replace(workload, meta={**workload.meta, "warnings": tuple(
            n for n in (_less_read(str(w), read) for w in said) if n)})
    if trace_cols.get("max_output_tokens", "max_output_tokens") not in measured.file_columns:
        notes.append(max_tokens_note(None, max_output))
    notes.extend([rebased] if rebased else [])
    if "id" not in numbers:  # with ids the trace loader refuses a repeated one
        notes.extend(_repeated_rows_said(workload, ttft, e2e, rows, line_of))
    notes.append(OPEN_REPLAY_NOTE)
    return build_recording(path, "records", workload, ttft=ttft, e2e=e2e, status=status, stage=stage,
                  itl_mean=None, config={}, counts=counts, notes=notes)


_UNIT_WAY = re.compile(r": --arrival-unit (ms|us|ns); in a scenario, \[workload\.options\] "
                       r"arrival_unit$")
"""The way on the trace loader names for arrivals in a finer unit than seconds
(``workloads/traces/_finish.py`` ``_past_any_date``): options of a trace, not of a records
file."""


def _load_in_seconds(path: Path, options: TraceOptions) -> LoadedTrace:
    """``load_trace`` of a records file, its refusal of arrivals past the year 2100 read as
    seconds (epoch milliseconds, microseconds or nanoseconds: no clock in seconds reads that)
    naming the way a records file has: its times are seconds, and ``calibrate``, ``validate``
    and ``replay --records`` take no ``--arrival-unit`` (the loader's own words named it, and
    a scenario's ``[workload.options]``, neither of which reads a recording). Arrivals in
    milliseconds from the run's start (0 to 60,000 for a minute) are not told: any rate may
    be a run's, so they read as a run a thousand times slower (docs/recordings.md)."""
    try:
        return load_trace(path, options)
    except TraceError as err:
        way = _UNIT_WAY.search(err.problem)
        if way is None:
            raise
        factor = {"ms": "1,000", "us": "1,000,000", "ns": "1,000,000,000"}[way.group(1)]
        raise TraceError(err.path, f"{err.problem[: way.start()]}: the records format's times "
                         "are seconds, and no option of calibrate, validate or replay sets "
                         f"another unit: write them in seconds (divide by {factor})",
                         line=err.line, row=err.row, field=err.field) from None


def cut_last_line(path: Path) -> TraceError:
    """The refusal of a records file whose last line, with no line end after it, does not read
    as a row: the file was cut while it was written. The trace loader drops such a line and
    says so (a trace only sends one request fewer), but a records file is a measurement: a
    script or a k6 test that writes a line a request as each finishes (as AIPerf writes
    ``profile_export.jsonl``) has none for the requests in flight when it was stopped, the
    slow ones, and an export cut short (``to_csv`` killed, a copy interrupted) has lost an
    unknown number of rows after it; read up to it, the run would look whole and lighter than
    the server's. Refused as the load tools' JSON-lines files cut short are
    (:func:`~kvbudget.results.recorded_fields.cut_record`), naming the line and the whole
    records a user keeps by deleting it. On the error path only: the file is read again."""
    header = 0 if generic_kind(path) == "jsonl" else 1
    lines = read_text(path, errors="replace").splitlines()
    last = max(i for i, line in enumerate(lines, start=1) if line.strip())
    whole = sum(1 for line in lines[header : last - 1] if line.strip())
    return TraceError(path, f"the file ends inside this {'record' if header == 0 else 'row'} "
                      f"(no line end after it, and it does not read as one), {CUT_SHORT}; the "
                      "requests after it have no record (those in flight when a run writing a "
                      "line a request was stopped, or the rest of an export), so it is refused "
                      f"rather than read as a whole run: rerun it, or delete line {last} to "
                      f"read the {counted(whole, 'whole record')} before it as they are",
                      line=last)


def no_send_times(column: str) -> str:
    """Why a records file without its send times is refused: its TTFT and E2E were measured
    under the load its requests met, which only their send times give. The trace loader draws
    Poisson arrivals at 1 req/s for a table of lengths alone (``DRAWN_ARRIVALS``), which a
    trace may use but a measurement may not: a script's per-request latencies without a send
    time (github.com/liqcui/sglang-benchmark-tools ``examples/logs/*.requests.jsonl``: ``ttft_ms``,
    ``e2e_ms``, ``input_len``, ``output_len``, mapped with ``--column``) were validated against a
    load kvbudget made up, exit 0, and its "measured" output tokens/s spanned the made-up
    arrivals."""
    return (f"has no {column!r} column (when each request was sent, seconds): the measured "
            "TTFT and E2E depend on the load the requests met, which only their send times "
            "give, so kvbudget does not compare them with arrivals it would draw; map the "
            "file's send-time column with --column arrival_s=COLUMN (epoch seconds are fine), "
            "or, where the file keeps none, simulate its lengths at a load you choose: "
            "kvbudget simulate --trace FILE --arrival poisson:RATE")


OPEN_REPLAY_NOTE = (
    "load mode: the records format keeps none, so every request is sent at its recorded "
    "arrival_s (an open loop), however long the simulated server takes; a closed loop's (N "
    "users, each sending when its last answer came) would send sooner or later than recorded "
    "as the simulated latencies differ: a load tool's own file (docs/recordings.md) keeps its "
    "load mode")
"""A records file says nothing of how its load was offered (``load_words``: "load mode not
recorded"), and printed no stage line to say so: a closed loop's requests (the per-request
``metrics.parquet`` of github.com/AdithyaSrivastava01/llm-serving-bench, concurrency 1) were
replayed at their recorded sends, unsaid."""
CLOCK_READING_S = 86400.0
"""A recording whose first arrival is a day or more in reads a clock that did not start with
the run (``time.perf_counter`` or ``time.monotonic``: seconds since the machine booted), which
the trace loader keeps below its wall-clock bound (``workloads/traces/_finish.py``
``ABSOLUTE_CLOCK_S``): replayed as written, the simulation idled that long before the first
request and refused its timeline (the per-request ``metrics.parquet`` of
github.com/AdithyaSrivastava01/llm-serving-bench, ``start_time`` from 10,434,806 s)."""


def _rebased(workload: Workload, column: str) -> tuple[Workload, str]:
    """The workload with its arrivals (and deadlines, on the same clock) moved so the first
    request arrives at 0 where they read a clock's uptime (:data:`CLOCK_READING_S`), and the
    note saying so; else as it was and ''."""
    arrival = workload.arrival_s
    if not len(arrival) or float(arrival.min()) < CLOCK_READING_S:
        return workload, ""
    first = float(arrival.min())
    note = (f"{column} starts at {first:,.0f} s ({first / 86400:.3g} days in): a clock's "
            "reading that did not start with the run (seconds since the machine booted, as "
            "time.perf_counter and time.monotonic give), not when the server last sat idle: "
            "the arrivals (and deadlines) are rebased so the first request arrives at 0")
    return replace(workload, arrival_s=arrival - first,
                   deadline_s=workload.deadline_s - first), note


_UNREAD = re.compile(r"columns not read: (.*?)(?: \((\d+) in all\))?( \(the generic format .*)",
                     re.DOTALL)
"""The trace loader's note of the columns it left unread (``workloads/traces/_tabular.py``,
``_note_unread``): the names (eight at most), their count when more, the explanation."""


def _less_read(warning: str, read: set[str]) -> str:
    """The trace loader's warning, less the measurement columns this reader reads (its note
    listed ``ttft_s`` and ``e2e_s`` as not read); "" when none is left."""
    m = _UNREAD.fullmatch(warning)
    if m is None:
        return warning
    names = m.group(1).split(", ")
    left = [n for n in names if n not in read]
    total = (int(m.group(2)) if m.group(2) else len(names)) - len(read)
    if total <= 0:
        return ""
    return (f"columns not read: {', '.join(left)}"
            + (f" ({total} in all)" if total > len(left) else "") + m.group(3))


def _read_measurements(path: Path, names: Mapping[str, str]) -> _Measured:
    """The measurement columns of a records file (``names``: canonical -> the file's name),
    in whichever of Parquet, JSONL or CSV it is."""
    kind = generic_kind(path)
    if kind == "parquet":
        return _parquet_measurements(path, names)
    facts = file_facts(path)
    if kind == "jsonl":
        try:
            first = json.loads(facts.first_line)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{path}: line 1: not a JSON object ({exc})") from None
        if not isinstance(first, dict):
            raise ValueError(f"{path}: line 1: not a JSON object")
        present = [c for c in _WANTED if names[c] in first]
        file_columns = set(first)
        jcols = read_jsonl_columns(facts, {names[c]: _WANTED[c] for c in present},  # type: ignore[misc]
                                   fmt="records", required=[])
        numbers = {c: jcols.numbers[names[c]] for c in present if _WANTED[c] == "number"
                   and names[c] in jcols.numbers}
        lab = {c: jcols.labels[names[c]] for c in present if _WANTED[c] in ("label", "code")
               and names[c] in jcols.labels}
        num_rows = jcols.num_rows
        line_of = lambda row: line_of_row(path, row, header_lines=0)  # noqa: E731
    else:
        header = split_header(facts.first_line)
        file_columns = set(header)
        present = [c for c in _WANTED if names[c] in header]
        ccols = read_csv_columns(facts, {names[c]: "label" if _WANTED[c] == "code"  # type: ignore[misc]
                                         else _WANTED[c] for c in present},
                                 fmt="records")
        numbers = {c: ccols.numbers[names[c]] for c in present if _WANTED[c] == "number"}
        lab = {c: ccols.labels[names[c]] for c in present if _WANTED[c] in ("label", "code")}
        num_rows = ccols.num_rows
        line_of = lambda row: line_of_row(path, row, header_lines=1)  # noqa: E731
    labels: dict[str, list[str]] = {}
    for canon, (codes, values) in lab.items():
        table_values = [*values, ""]
        labels[canon] = [table_values[c] for c in codes.tolist()]
    return _Measured(numbers, labels, num_rows, file_columns, line_of)


def _parquet_measurements(path: Path, names: Mapping[str, str]) -> _Measured:
    """The measurement columns of a Parquet records file."""
    import pyarrow.parquet as pq

    numbers: dict[str, FloatArray] = {}
    labels: dict[str, list[str]] = {}
    schema_names = pq.read_schema(path).names
    present = [c for c in _WANTED if names[c] in schema_names]
    table = pq.read_table(path, columns=[names[c] for c in present])
    for canon in present:
        col = table.column(names[canon])
        if _WANTED[canon] == "number":
            try:
                numbers[canon] = np.asarray(col.to_numpy(zero_copy_only=False),
                                            dtype=np.float64)
            except (ValueError, TypeError):
                raise TraceError(path, "must be a number column", field=names[canon]) from None
        else:
            labels[canon] = ["" if v is None else str(v) for v in col.to_pylist()]
    return _Measured(numbers, labels, table.num_rows, set(schema_names), None)


def _file_rows(path: Path, workload: Workload, ids: FloatArray | None, num_rows: int
               ) -> npt.NDArray[np.int64]:
    """The file row of each workload row: by the ``id`` column when the file has one, else
    the workload's request ids (row numbers)."""
    if ids is not None:
        order = np.argsort(ids, kind="stable")
        pos = np.searchsorted(ids[order], workload.request_id.astype(np.float64))
        rows = order[np.clip(pos, 0, len(order) - 1)].astype(np.int64)
    else:
        rows = workload.request_id.astype(np.int64)
    if len(rows) and int(rows.max()) >= num_rows:
        raise TraceError(path, "the measurement columns have fewer rows than the trace columns")
    return rows


def _check_latencies(path: Path, names: Mapping[str, str], ttft: FloatArray, e2e: FloatArray,
                     file_rows: npt.NDArray[np.int64], line_of: Any) -> None:
    """Refuse a bad measured time, or an end-to-end latency below the TTFT, naming its line
    (its row in Parquet)."""
    for canon, times in (("ttft_s", ttft), ("e2e_s", e2e)):
        check_times(path, names[canon], times, file_rows, line_of)
    bad = np.isfinite(ttft) & np.isfinite(e2e) & (e2e < ttft)
    if bad.any():
        i = int(np.argmax(bad))
        problem = f"{e2e[i]:g} is below ttft_s {ttft[i]:g}" + (
            f" (is {names['ttft_s']!r} in milliseconds?)" if ttft[i] > 10 * e2e[i] else "")
        if line_of is not None:
            raise TraceError(path, problem, line=line_of(int(file_rows[i])), field=names["e2e_s"])
        raise TraceError(path, problem, row=int(file_rows[i]), field=names["e2e_s"])


SLOWEST_DECODE_S = 10.0
"""The slowest decode published: about 10 s a token, LLaMA 7B (4-bit) under llama.cpp on a
4 GB Raspberry Pi 4, swapping (github.com/ggml-org/llama.cpp issue 58, 2023-03-12; its
command-line program, whose decode its server runs alike); 2.65 s a token through
llama-cpp-python's OpenAI-compatible server on a Mac Studio (github.com/abetlen/
llama-cpp-python issue 1354, ``eval time ... 2649.06 ms per token``). Such CPU and laptop
servers are slower than :data:`MAX_TOKEN_TIME_S`: none of kvbudget's engines and GPUs models
them, and their files are refused, the message saying so."""

MAX_TOKEN_TIME_S = 2.0
"""The slowest median time per output token (E2E less TTFT over the tokens after the first) a
records file's seconds are believed at. kvbudget simulates GPU servers (vLLM, SGLang, TGI,
TensorRT-LLM on the GPUs of its catalog), which decode a token in milliseconds to a few
hundred: the shared measured runs' medians are 31, 33 and 84 ms (vLLM 0.19.0 on an RTX 4090
and an RTX PRO 6000, ../shared/measured/llmservingsim_vllm019), 24 times under the bound at
the slowest. Above it the column holds milliseconds: any GPU server decoding at 2 ms a token
or slower reads as 2 s or more. A bound of the slowest server published
(:data:`SLOWEST_DECODE_S`) would let a millisecond file of a GPU server decoding faster than
it, the common case, read as a server a thousand times slower."""


def _check_units(path: Path, names: Mapping[str, str], ttft: FloatArray, e2e: FloatArray,
                 output: npt.NDArray[np.int64], completed: npt.NDArray[np.bool_]) -> None:
    """Refuse ``ttft_s``/``e2e_s`` columns that hold milliseconds: the median time per output
    token of the completed requests over :data:`MAX_TOKEN_TIME_S` (a 25 ms decode step read
    as 25 s), naming the column (``e2e_s``, and ``ttft_s`` when its median is over a
    minute too). Read as seconds, such a file validates a server a thousand times slower."""
    ok = completed & np.isfinite(ttft) & np.isfinite(e2e) & (output >= 2)
    if not ok.any():
        return
    per_token = (e2e[ok] - ttft[ok]) / (output[ok] - 1)
    median = float(np.median(per_token))
    if median <= MAX_TOKEN_TIME_S:
        return
    slow_ttft = float(np.median(ttft[ok])) > 60.0
    cols = (f"{names['ttft_s']!r} and {names['e2e_s']!r}" if slow_ttft
            else repr(names["e2e_s"]))
    raise TraceError(path, f"the completed requests took a median {median:.3g} s per output "
                     f"token after the first ({int(ok.sum()):,} requests, E2E less TTFT over "
                     f"output_tokens - 1; median E2E {float(np.median(e2e[ok])):.4g} s): over "
                     f"{MAX_TOKEN_TIME_S:g} s, slower than any GPU server decodes; {cols} look "
                     "like milliseconds in a seconds column: give seconds (divide by 1,000). "
                     "(A CPU or laptop server can be that slow, e.g. llama.cpp on a Raspberry "
                     f"Pi at {SLOWEST_DECODE_S:g} s a token; kvbudget does not simulate one.)",
                     field=names["e2e_s"])


def _repeated_rows_said(workload: Workload, ttft: FloatArray, e2e: FloatArray,
                        file_rows: npt.NDArray[np.int64], line_of: Any) -> list[str]:
    """The note of rows that repeat another in every column read (send time, tokens, TTFT and
    E2E): a copy of the file joined to itself, or a row written twice, whose requests were read
    as that many more, the load they add simulated and measured without a word. Two real
    requests may share all five on a coarse clock (a burst of equal lengths served in one
    batch), so said, not refused; a file with an ``id`` column is refused on a repeated id."""
    table = np.column_stack([workload.arrival_s, workload.prompt_tokens,
                             workload.output_tokens, ttft, e2e]).astype(np.float64)
    seen: dict[bytes, int] = {}
    repeats: list[tuple[int, int]] = []
    for i, row in enumerate(np.nan_to_num(table, nan=-1.0)):
        first = seen.setdefault(row.tobytes(), i)
        if first != i:
            repeats.append((int(file_rows[first]), int(file_rows[i])))
    if not repeats:
        return []
    where = "line" if line_of is not None else "row"
    first, again = (line_of(r) if line_of is not None else r for r in repeats[0])
    verb = "repeats" if len(repeats) == 1 else "repeat"
    return [f"{counted(len(repeats), 'row')} {verb} another in every column read (arrival_s, "
            f"prompt_tokens, output_tokens, ttft_s, e2e_s; the first, {where} {again}, repeats "
            f"{where} {first}): a file joined to a copy of itself, or a request written twice? "
            "read as separate requests; give the file an id column, or remove the repeats, if "
            "they are one request"]


def _check_too_fast(path: Path, names: Mapping[str, str], e2e: FloatArray,
                    output: npt.NDArray[np.int64], completed: npt.NDArray[np.bool_]) -> None:
    """Refuse an ``e2e_s`` column whose completed requests took a median under
    :data:`BURST_ITL_S` a token after the first from send to end: the server generated every
    one of those tokens within the E2E, streamed or not, and none decodes one stream faster
    than about 3,000 tokens a second (the constant's sources). Such a file's times are in a
    unit 1,000 times too large for the column (seconds divided by 1,000 twice, or hours): read
    as seconds it validated a server a thousand times faster, its requests said to be whole
    answers read at once."""
    ok = completed & np.isfinite(e2e) & (output >= 2)
    if not ok.any():
        return
    per_token = e2e[ok] / (output[ok] - 1)
    median = float(np.median(per_token))
    if median >= BURST_ITL_S:
        return
    raise TraceError(path, f"the completed requests took a median {median * 1e6:.3g} us per "
                     f"output token after the first, send to end ({int(ok.sum()):,} requests, "
                     f"E2E over output_tokens - 1; median E2E {float(np.median(e2e[ok])):.4g} "
                     f"s): no server generates tokens that fast (under {BURST_ITL_S * 1e6:.0f} "
                     "us apiece, 10,000 a second; the fastest published decode is about 3,000); "
                     f"{names['e2e_s']!r} (and {names['ttft_s']!r}) look like they hold another "
                     "unit than seconds: give seconds (times 1,000 if they were divided by "
                     "1,000 twice)", field=names["e2e_s"])


# ---------------------------------------------------------------------------------------------
# kvbudget run directories


RUN_ENGINE_KNOBS = ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens",
                    "enable_prefix_caching", "async_scheduling")
"""What a simulated run's ``summary.json`` ``engine_knobs`` say of its engine that a replay
of it must keep (its KV blocks are ``num_gpu_blocks``): a TP4 run replayed at TP1 is another
server."""


def _engine_blocks(server: dict[str, Any], where: tuple[Path, str]) -> int | None:
    """Each engine's KV blocks (vLLM v1's null block included) from what a server told of
    itself (``replay.json``'s ``server``); None where it did not tell them: an equal share of
    a data-parallel server's sum (:func:`kvbudget.results.engine_share.engine_blocks`).
    Engines whose figures differ (``num_gpu_blocks_by_engine``), or a sum no equal share
    makes, held different blocks: a :class:`TraceError` naming the field (``where``: the file
    and the server's key), never one engine's figure for all (:data:`~kvbudget.results.
    engine_share.REFUSE`: the simulation's replicas are equal)."""
    blocks, engines = server.get("num_gpu_blocks"), int(server.get("num_engines", 1))
    if blocks is None or "block_size" not in server:
        return None
    path, key = where
    try:
        return engine_blocks(int(blocks), engines, server.get("num_gpu_blocks_by_engine") or (),
                             unequal=REFUSE)
    except UnequalEngines as exc:
        field = "num_gpu_blocks_by_engine" if exc.kind == "figures" else "num_gpu_blocks"
        why = (": each would be a replica of its own size, and kvbudget does not pick one "
               "engine's for all" if exc.kind == "figures" else
               ": its engines held different blocks, and kvbudget does not pick one "
               "engine's for all")
        raise TraceError(path, f"{exc}{why}", field=f"{key}.{field}") from None


def server_config(server: dict[str, Any], config: dict[str, Any],
                  where: tuple[Path, str]) -> dict[str, Any]:
    """What a replay's server told of itself (``replay.json``'s ``server``, checked by
    :func:`~kvbudget.results.recording.read_replay_meta`; ``where``: that file and key) as the
    recording's settings, where ``config`` (the run's own) does not already say them:

    * ``model``: what the server loaded (``model_root``), else the name it served
      (``served_model`` too when the two differ: an alias may be the one a preset matches);
    * ``num_gpu_blocks``: the blocks an engine can allocate, its blocks (:func:`_engine_blocks`)
      less vLLM v1's one null block (``vllm/v1/core/block_pool.py``: never allocated; the
      simulator has none), and ``block_size``;
    * a data-parallel server (``--data-parallel-size N``: ``num_engines`` N) as a fleet of N
      replicas of that engine (``num_replicas``; ``data_parallel_size`` N): each engine
      schedules its own batch over its own blocks, which one engine with N times the blocks
      does not; the router is the reader's to choose (the recording does not tell it);
    * ``enable_prefix_caching``, ``max_model_len``, ``kv_cache_dtype`` as it ran;
    * ``server_engine``: the kvbudget engine of a server that named itself (SGLang's
      ``/v1/models`` ``owned_by``: :func:`kvbudget.live.server.engine_of`), which the command
      line simulates it with."""
    out: dict[str, Any] = {}
    root, served = server.get("model_root"), server.get("model")
    if "model" not in config and (root or served):
        out["model"] = root or served
        if root and served and served != root:
            out["served_model"] = served
    blocks = _engine_blocks(server, where)
    if blocks is not None and blocks > 1 and "num_gpu_blocks" not in config:
        out["num_gpu_blocks"] = blocks - 1
        out["block_size"] = server["block_size"]
    engines = int(server.get("num_engines", 1))
    if engines > 1 and "num_replicas" not in config:
        out["num_replicas"] = out["data_parallel_size"] = engines
    for key in ("enable_prefix_caching", "max_model_len", "kv_cache_dtype", "server_engine"):
        if key in server and key not in config:
            out[key] = server[key]
    return out


def serve_fleet(meta: dict[str, Any], config: dict[str, Any], path: Path) -> dict[str, Any]:
    """A ``kvbudget serve`` directory of several upstreams as the recording's settings: a fleet
    of that many replicas behind the gateway's router (``num_replicas``, ``router``), each
    the server its upstreams said they were where they all said the same (else none of it:
    the settings line then says the engine as assumed). Upstreams of N data-parallel engines
    each make N replicas each, all behind the gateway's router (``data_parallel_size`` N)."""
    upstreams = meta.get("upstreams")
    if meta.get("executor") != "serve" or not isinstance(upstreams, list) or len(upstreams) < 2:
        return {}
    out: dict[str, Any] = {"num_replicas": len(upstreams),
                           "router": str(meta.get("router") or "round_robin")}
    servers = meta.get("servers") or []
    if len(servers) == len(upstreams) and servers[0] and all(s == servers[0] for s in servers):
        told = server_config(servers[0], config, (path, "servers[0]"))
        out["num_replicas"] = len(upstreams) * told.pop("num_replicas", 1)
        out.update(told)
    return out


def _run_config(meta: dict[str, Any], summary: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run directory's settings: its ``replay.json`` (``meta``) over its ``summary.json``,
    what its server said of itself (:func:`server_config`) and, for serve, its fleet."""
    config: dict[str, Any] = {}
    for key in ("policy", "policy_params"):
        if key in meta:
            config[key] = meta[key]
        elif key in summary:
            config[key] = summary[key]
    described = config.get("policy")
    if isinstance(described, dict) and isinstance(described.get("name"), str):
        # kvbudget serve keeps its policy as the policy describes itself, name and parameters
        config["policy"], config["policy_params"] = described["name"], described
    if meta.get("executor") == "serve" or meta.get("kv_capacity_given") is True:
        # its budget is the gateway's (--capacity-tokens, or all the upstreams' KV summed),
        # never one engine's KV: the reader of the settings takes no blocks from it
        config["executor"] = str(meta.get("executor") or "replay")
        config["kv_capacity_given"] = meta.get("kv_capacity_given") is True
        if "kv_capacity_tokens" not in meta and isinstance(summary.get("kv_capacity_tokens"),
                                                           int):
            config["kv_capacity_tokens"] = summary["kv_capacity_tokens"]  # at the end
    for key in ("gpu", "model", "num_gpu_blocks", "block_size"):
        if key in summary:
            config[key] = summary[key]
    knobs = summary.get("engine_knobs")  # the simulated run's engine, as it ran
    for key in RUN_ENGINE_KNOBS:
        if isinstance(knobs, dict) and knobs.get(key) is not None:
            config[key] = knobs[key]
    if meta.get("kv_capacity_tokens") is not None:  # a whole number (read_replay_meta)
        config["kv_capacity_tokens"] = meta["kv_capacity_tokens"]
    if isinstance(meta.get("tiers"), list):  # kvbudget serve's: what it admitted by
        config["tiers"] = meta["tiers"]
    for key in ("front_door", "lease_ttl_s"):  # kvbudget serve's caps (None: it had none)
        if key in meta:
            config[key] = meta[key]
    config.update(server_config(meta.get("server") or {}, config, (path, "server")))
    config.update(serve_fleet(meta, config, path))
    return config


def _itl_means(path: Path, rec: Any) -> FloatArray | None:
    """Per row of a run directory's records (``rec``), the mean time apart of its tokens after
    the first as the client read them, from the gaps between its chunks that a replay's or
    ``kvbudget serve``'s ``requests.part.jsonl`` keeps
    (:func:`~kvbudget.results.run_parts.itl_means_of_parts`; NaN where not kept): what finds
    the requests whose answer the client read whole at once, as ``validate --url`` finds them
    in its own run, where the TPOT (which counts the time after the last chunk too) misses
    some. None for a directory without that file (a simulated run's)."""
    if not (path / REQUESTS_PART).is_file():
        return None
    try:
        return itl_means_of_parts(path, rec)
    except ValueError as exc:
        raise TraceError(None, str(exc)) from None


def _deadlines(rec: Any, path: Path) -> FloatArray:
    """Each request's admission deadline as the gateway that ran it gave it (``kvbudget
    serve``'s ``deadline_s``: its tier's wait or its client's shorter
    ``x-kvbudget-deadline-s``), NaN where the run has none (its tier's ``queue_timeout_s``
    then applies in the simulation)."""
    if "deadline_s" not in rec.columns:
        return np.full(len(rec), np.nan)
    deadline: FloatArray = rec["deadline_s"].to_numpy(dtype=np.float64)
    early = deadline < rec["arrival_s"].to_numpy(dtype=np.float64)
    if early.any():
        row = int(np.flatnonzero(early)[0])
        raise TraceError(path / "requests.parquet", f"request {rec['request_id'].iat[row]}: "
                         f"{deadline[row]!r} is before its arrival_s", field="deadline_s")
    return deadline


COUNTING_SAID = {"upstream": "the upstream's /tokenize round trip",
                 "local": "the gateway's own tokenizer", "bytes": ""}
"""What a serve run's prompt count (``replay.json``'s ``count_tokens``) put in its times."""


def _gateway_times_said(meta: dict[str, Any], rec: Any) -> list[str]:
    """For a ``kvbudget serve`` run: whose times its TTFT and E2E are (the gateway's, from each
    body read, its admission wait in them) and how long the admitted requests waited."""
    if meta.get("executor") != "serve":
        return []
    admitted = rec["admitted_s"].to_numpy(dtype=np.float64)
    wait = (admitted - rec["arrival_s"].to_numpy(dtype=np.float64))[np.isfinite(admitted)]
    waited = (f"the {counted(wait.size, 'admitted request')} waited {float(wait.mean()):.3g} s "
              f"on average, {float(np.percentile(wait, 99)):.3g} s at p99"
              if wait.size else "no request was admitted")
    counting = COUNTING_SAID.get(str(meta.get("count_tokens")),
                                 "the upstream's /tokenize round trip, where it counted so")
    return [f"its times are kvbudget serve's, as the gateway saw them: from when it read each "
            f"request's body to its first token and to its end (its clients saw them plus "
            f"their own connection's time), so they hold the gateway's admission wait ({waited}"
            "), which the simulation plays with the recorded policy, tiers and deadlines"
            + ("" if not counting else f", and its prompt count ({counting}), which the "
               "simulated front end's fixed time stands for")]


def _unstreamed_read_whole(meta: dict[str, Any], rec: Any, completed: npt.NDArray[np.bool_]
                           ) -> tuple[npt.NDArray[np.float64], list[str]]:
    """A ``kvbudget serve`` run's TTFTs, and a note of how many were not streamed: a
    non-streamed answer comes whole, so the gateway sees no first token and its row has its E2E
    but no TTFT (docs/serve.md: its SLO is judged on its E2E). Such a request is read as the
    gateway got it, the whole answer at its end (TTFT = E2E, as inference-perf's unstreamed
    requests are), so :func:`~kvbudget.results.recorded_whole_answer.whole_answer_rows` keeps
    its E2E in the comparison and leaves its TTFT and TPOT out; it was left out of all."""
    ttft = rec["ttft_s"].to_numpy(dtype=np.float64)
    e2e = rec["e2e_s"].to_numpy(dtype=np.float64)
    whole = completed & ~np.isfinite(ttft) & np.isfinite(e2e)
    if meta.get("executor") != "serve" or not whole.any():
        return ttft, []
    num = int(whole.sum())
    return np.where(whole, e2e, ttft), [
        f"{num} of the {counted(int(completed.sum()), 'completed request')} "
        f"{'were' if num > 1 else 'was'} not streamed (no TTFT: kvbudget serve sees no first "
        "token of a whole answer): read as the gateway got each, the whole answer at its end, "
        "their E2E is compared, not their TTFT nor TPOT (stream, as load tools do, to record "
        "TTFT)"]


def _budget_moved_said(meta: dict[str, Any], timeline: Any, config: dict[str, Any],
                       shift: float = 0.0) -> list[str]:
    """For a ``kvbudget serve`` run whose budget changed while it ran (re-read from the
    upstreams' ``/metrics``, or reloaded: its timeline's ``kv_capacity_tokens``, a row written
    at each change): ``config`` gains the budget at its start (``kv_capacity_tokens``) and its
    moves, ``kv_capacity_schedule`` (``(time_s, budget)`` on the workload's clock, ``shift``
    taken off), which the simulated gateway makes at those times
    (``SimConfig.gateway_capacity_schedule``); said with the range the run had. Before, the
    simulation held the last budget throughout."""
    if meta.get("executor") != "serve" or not {"kv_capacity_tokens", "time_s"} <= set(
            timeline.columns):
        return []
    rows = timeline[["time_s", "kv_capacity_tokens"]].dropna()
    caps = rows["kv_capacity_tokens"].astype(np.int64).tolist()
    times = (rows["time_s"].astype(np.float64) - shift).tolist()
    if len(set(caps)) < 2:
        return []
    moves: dict[float, int] = {}
    for k in range(1, len(caps)):
        if caps[k] != caps[k - 1]:
            moves[max(float(times[k]), 0.0)] = int(caps[k])
    config["kv_capacity_tokens"] = int(caps[0])
    config["kv_capacity_schedule"] = sorted(moves.items())
    return [f"the gateway's budget changed while this run ran ({min(caps):,} to "
            f"{max(caps):,} tokens, re-read from the upstreams' /metrics or reloaded; "
            f"{caps[0]:,} at its start, {caps[-1]:,} at its end): the simulated gateway "
            f"starts with {caps[0]:,} and moves it at the {counted(len(moves), 'time')} the "
            "timeline recorded (--set gateway_capacity_tokens=N holds one budget throughout)"]


SIMULATED_RUN = (
    "{path} is a simulated run (simulate or compare --out: its summary names no executor; a "
    "live replay's and serve's do): its times are the simulator's, not measurements, so a fit "
    "to it recovers the simulator's own parameters and a validation compares the simulator "
    "with itself")
"""Said of a simulation read as a recording (``calibrate`` / ``validate --records``): it was
read as measured ("60 measured") and a cost file fitted to it looked like one fitted to a
server; the note is kept in the cost file's and validation.json's ``notes``."""


def _simulated_said(path: Path, summary: dict[str, Any]) -> list[str]:
    return [SIMULATED_RUN.format(path=path)] if summary.get("executor") is None else []


def read_run_dir(path: Path, default_tier: str) -> Recording:
    """Read a ``kvbudget replay`` (or ``simulate --out``) run directory."""
    try:
        run = read_run(path)
    except FileNotFoundError as exc:
        raise TraceError(path, str(exc).removeprefix(f"{path}: ")) from None
    except ValueError as exc:
        raise TraceError(None, str(exc)) from None
    rec = run.records.reset_index(drop=True).sort_values(["arrival_s", "request_id"],
                                                         kind="stable")
    file_rows = rec.index.to_numpy(dtype=np.int64)  # the file's rows, 0-based
    rec = rec.reset_index(drop=True)
    meta_path = path / "replay.json"
    meta: dict[str, Any] = {}
    if meta_path.is_file():
        meta = read_replay_meta(meta_path)
    n = len(rec)
    if n == 0:
        raise TraceError(path / "requests.parquet", "has no rows")
    completed = (rec["status"] == "completed").to_numpy()
    output = rec["output_tokens"].to_numpy(dtype=np.int64)
    max_output = rec["max_output_tokens"].to_numpy(dtype=np.int64)
    # a request that never ran has no generated tokens: offer it with its declared maximum;
    # so is one a time limit cancelled (its tokens so far are not its output) or never sent
    limited = rec["reason"].astype(str).isin([TIME_LIMIT_CANCELLED, TIME_LIMIT_NOT_SENT])
    offered = np.where((completed | (output > 0)) & ~limited.to_numpy(), np.maximum(output, 1),
                       np.maximum(max_output, 1))
    tier_names = tuple(dict.fromkeys(rec["tier"].astype(str).tolist())) or (default_tier,)
    codes = np.array([tier_names.index(t) for t in rec["tier"].astype(str)], dtype=np.int16)
    arrival = rec["arrival_s"].to_numpy(dtype=np.float64)
    shift = float(arrival.min()) if float(arrival.min()) < 0 else 0.0
    workload = Workload(
        arrival_s=arrival - shift,
        prompt_tokens=rec["prompt_tokens"].to_numpy(dtype=np.int64),
        output_tokens=offered,
        max_output_tokens=np.maximum(max_output, offered),
        tier=codes, tier_names=tier_names,
        deadline_s=_deadlines(rec, path) - shift,
        request_id=rec["request_id"].to_numpy(dtype=np.int64),
        name=path.name, meta={"source": str(path), "format": "run"},
    )
    status = ["completed" if c else (str(s) + (f" ({r})" if r else ""))
              for c, s, r in zip(completed, rec["status"].astype(str), rec["reason"].astype(str),
                                 strict=True)]
    config = _run_config(meta, run.summary, meta_path)
    loop, loop_said = replayed_loop(meta, meta_path)
    counts = {"num_rows_read": n}
    # a replay against an engine that refuses a prompt + max_tokens over the context: those
    # rows are offered again (with their declared maximum), and vLLM's rules would serve them
    # (the live run's extra error column, live/run_dir.py EXTRA_RECORD_COLUMNS)
    columns = run.record_columns
    rules = engine_rules_said(str(e) for st, e in zip(
        columns["status"], columns.get("error", ()), strict=False)
        if st == "rejected_too_large")
    ttft, unstreamed = _unstreamed_read_whole(meta, rec, completed)
    if run.summary.get("executor") is not None:  # measured: no server holds a request a day
        for name, times in (("ttft_s", ttft), ("e2e_s", rec["e2e_s"].to_numpy(np.float64))):
            check_times(path / "requests.parquet", name, times, file_rows)
    recording = build_recording(path, "run", workload, ttft=ttft,
                       e2e=rec["e2e_s"].to_numpy(dtype=np.float64), status=status,
                       stage=[loop.label if loop else ""] * n, itl_mean=_itl_means(path, rec),
                       config=config, counts=counts,
                       notes=_simulated_said(path, run.summary) + ([rules] if rules else [])
                       + _gateway_times_said(meta, rec) + unstreamed
                       + _budget_moved_said(meta, run.timeline, config, shift)
                       + ([loop_said] if loop_said else []),
                       output_measured=output, stages=(loop,) if loop else ())
    return replace(recording, workload=workload)
