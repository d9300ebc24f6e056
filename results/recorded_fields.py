"""What every recording reader shares: strict numbers, times, JSON and the workload's columns.

A load tool's file is untrusted input: a field that should hold a number and holds a list,
a string, ``Infinity`` or ``NaN`` is an error naming the file, the row and the field
(:class:`~kvbudget.workloads.errors.TraceError`), never a silent NaN; a missing value
(``null`` or no key) is a missing measurement. Measured times are checked by
:func:`check_times` (>= 0, at most a day). :func:`finish_columns` runs the trace loader's validation over a reader's columns
and declares each request's ``max_output_tokens``: the tool's recorded setting where the file
has one, else the request's realised output (it did generate that many, so the server
accepted at least that): never an invented cap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import CUT_SHORT, TraceError, json_refusal
from kvbudget.workloads.errors import json_problem as _json_problem
from kvbudget.workloads.max_output import FactorOfTrue, MaxOutputRule
from kvbudget.workloads.text_files import read_text
from kvbudget.workloads.traces._finish import RawTrace, Streams, finish
from kvbudget.workloads.traces.options import TraceOptions
from kvbudget.workloads.workload import Workload

FloatArray = npt.NDArray[np.float64]

MAX_MEASURED_S = 86_400.0
"""The longest time to first token or end to end a recording may hold (a day)."""

REALISED_OUTPUT = FactorOfTrue(1.0)
"""The ``max_output_tokens`` of a request whose file records none: its realised output."""

MAX_FILE_BYTES = 2 << 30
"""The largest recording read (2 GiB): a load test of a million requests is far below."""


def dig(obj: Any, *keys: str) -> Any:
    """``obj[k1][k2]...``, None where a level is missing or not an object."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def fewer_rows(said: str, trimmed: str, what: str = "requests") -> str:
    """The refusal of a file holding fewer requests than its tool's own count beside them:
    ``said`` (the rows and the count, each named), then the way on for a copy trimmed on
    purpose (its first requests taken to try kvbudget): ``trimmed``, the edit of the count(s)
    that makes them say what the file holds, after which it reads as a run of those requests
    (tests/unit/results/test_recorded_counts.py follows each way)."""
    return (f"{said}: {what} missing (a cut or partly copied file?); trimmed on purpose, "
            f"it reads as a run of the {what} it holds once {trimmed}")


def number(value: Any, path: Path, field: str, row: int | None = None) -> float:
    """A finite number, NaN for a missing one (None); anything else raises naming the field."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(path, f"not a number: {_short(value)}", row=row, field=field)
    x = float(value)
    if not math.isfinite(x):
        raise TraceError(path, f"not finite: {value}", row=row, field=field)
    return x


def perf_counter_time(value: Any, path: Path, field: str, row: int, tool: str) -> float:
    """A send time a tool stamped with Python's ``time.perf_counter()`` (evalscope perf's
    ``start_time``, inference-perf's): NaN for a missing one, a negative one refused. CPython
    reads it from the monotonic clock (``Python/pytime.c``: ``CLOCK_MONOTONIC`` on Linux, the
    boot-time counters on macOS and Windows), which Linux counts from boot (clock_gettime(2):
    "the number of seconds that the system has been running since it was booted"): no process
    reads a negative one, and a request stamped so would be read as sent hours before the
    others, its run that much longer."""
    x = number(value, path, field, row)
    if x < 0:
        raise TraceError(path, f"negative: {x:g} s; {tool} stamps it with time.perf_counter(), "
                         "the monotonic clock, counted from the machine's boot, which is never "
                         "negative", row=row, field=field)
    return x


def first_number(path: Path, row: int | None, *pairs: tuple[str, Any]) -> float:
    """The first present value of ``(field, value)`` pairs, checked by :func:`number`."""
    for name, value in pairs:
        x = number(value, path, name, row)
        if not math.isnan(x):
            return x
    return math.nan


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_json(path: Path) -> Any:
    """The JSON document in ``path`` (errors name the line)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(path, f"is over {MAX_FILE_BYTES >> 30} GiB: too large for a "
                             "recording")
        text = read_text(path)
        if not text.strip():
            raise TraceError(path, "is empty: no JSON document in it")
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TraceError(path, json_refusal(exc, text), line=getattr(exc, "lineno", 1)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None


def json_lines(path: Path) -> list[tuple[int, Any]]:
    """Every non-empty line of a JSON-lines file as ``(line number, document)``."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(path, f"is over {MAX_FILE_BYTES >> 30} GiB: too large for a "
                             "recording")
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None
    out: list[tuple[int, Any]] = []
    lines = text.splitlines()
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append((i, json.loads(line)))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise cut_record(path, text, lines, i, len(out)) or TraceError(
                path, f"not valid JSON ({_json_problem(exc)})", line=i) from None
    if not out:
        raise TraceError(path, "is empty")
    return out


def cut_record(path: Path, text: str, lines: list[str], i: int, whole: int) -> TraceError | None:
    """The refusal of a JSON-lines file whose line ``i`` (1-based), its last, is a record cut
    short (the file ends in it, with no line end after it), ``whole`` records before it; None
    when line ``i`` is not so. Read up to it, such a file would look like a whole run: the
    requests in flight when the tool was stopped have no record, and they are the slow ones."""
    if text.endswith(("\n", "\r")) or any(line.strip() for line in lines[i:]):
        return None
    if not whole:
        return TraceError(path, f"not valid JSON: the file ends inside the document, {CUT_SHORT}",
                          line=i)
    return TraceError(path, f"not valid JSON: the file ends inside this record, {CUT_SHORT}; the "
                      "requests in flight then have no record, so it is refused rather than "
                      f"read as a whole run: rerun it, or delete line {i} to read the "
                      f"{counted(whole, 'whole record')} before it as they are", line=i)


def check_times(path: Path, name: str, values: FloatArray, rows: npt.NDArray[np.int64],
                line_of: Callable[[int], int] | None = None) -> None:
    """Measured times must be >= 0 and at most a day where present (NaN is a missing
    measurement): no server keeps a request open for a day, so 1e12 s is a wrong unit."""
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(values) & ((values < 0) | (values > MAX_MEASURED_S)) | np.isinf(values)
    if bad.any():
        i = int(np.argmax(bad))
        row = int(rows[i])
        problem = (f"not finite: {values[i]}" if not np.isfinite(values[i])
                   else f"negative time: {values[i]:g}" if values[i] < 0
                   else f"implausibly long: {values[i]:g} s (over a day; are the times in "
                   "seconds?)")
        if line_of is not None:
            raise TraceError(path, problem, line=line_of(row), field=name)
        raise TraceError(path, problem, row=row, field=name)


def finish_columns(path: Path, fmt: str, *, prompt: FloatArray, output: FloatArray,
                   arrival: FloatArray, fields: dict[str, str], default_tier: str,
                   max_output: FloatArray | None = None,
                   max_output_rule: MaxOutputRule | None = None,
                   completion_order: bool = False,
                   prefix: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
                   prefix_block_tokens: int | None = None,
                   assumed: tuple[str, ...] = (),
                   line_of: Callable[[int], int] | None = None,
                   ) -> tuple[Workload, dict[str, int], list[str]]:
    """A workload from per-request columns, validated and transformed as a trace file's
    (errors name the row and the file's field); request ids are the 0-based rows.

    ``max_output`` holds the tool's recorded ``max_tokens`` per row (NaN: none recorded);
    rows without one declare ``max_output_rule`` (default: their realised output).
    ``completion_order``: the tool writes its requests as they complete, so they are sorted by
    send time without the trace loader's "timestamps are not in order" note (noise there).
    ``prefix``: per-row prefix hashes (flat hashes and row offsets, as a trace's ``hash_ids``),
    each naming ``prefix_block_tokens`` prompt tokens. ``assumed``: what the reader took that
    the file does not say, kept with the trace loader's own assumptions in the workload's
    ``meta`` (what ``trace convert`` says its output holds as if the file had said it).
    ``line_of``: the file's line of a row (JSON lines), which its refusals then name."""
    rule = REALISED_OUTPUT if max_output_rule is None else max_output_rule
    raw = RawTrace(path=path, format=fmt, prompt=prompt, output=output, arrival=arrival,
                   max_output=max_output, fields=fields, rows_read=len(prompt), labels={},
                   completion_order=completion_order, prefix=prefix,
                   prefix_block_tokens=prefix_block_tokens, assumed=list(assumed),
                   line_of=line_of)
    loaded = finish(raw, TraceOptions(default_tier=default_tier, max_output=rule),
                    Streams.from_seed(0))
    counts = {"num_rows_read": loaded.report.rows_read}
    for reason, count in loaded.report.dropped:
        counts["num_dropped_" + reason.split(" (")[0].replace(" ", "_")] = count
    return loaded.workload, counts, list(loaded.report.warnings)


SHARED_TIMES_SAID = "share their timestamp with another"
"""The words of the trace loader's warning of requests sharing a send time (a coarse clock)."""


def without_shared_times(workload: Workload, warnings: list[str]) -> tuple[Workload, list[str]]:
    """``workload`` and ``warnings`` less the trace loader's :data:`SHARED_TIMES_SAID`
    warning, for a reader whose send times were drawn or rebuilt (a closed loop's users all
    start at once, on purpose: there is no file clock to be coarse). The warning goes from the
    workload's ``meta`` too, which ``trace convert`` prints and a simulation of the workload
    writes in its summary: dropped from the notes alone, validate hid it while ``trace
    convert`` of SGLang 0.5.9's ``concurrency4.jsonl`` told the user to ``--spread-s`` times
    kvbudget had rebuilt itself."""
    kept = [w for w in warnings if SHARED_TIMES_SAID not in w]
    said = workload.meta.get("warnings")
    if isinstance(said, tuple):
        workload = replace(workload, meta={**workload.meta, "warnings": tuple(
            w for w in said if SHARED_TIMES_SAID not in str(w))})
    return workload, kept


def max_tokens_note(recorded: FloatArray | None, rule: MaxOutputRule | None) -> str:
    """What each request declared as ``max_tokens``, in one sentence."""
    n_rec = 0 if recorded is None else int(np.isfinite(recorded).sum())
    n = 0 if recorded is None else len(recorded)
    rest = ("the --max-output rule" if rule is not None else
            "its realised output length (the server generated that many, so it accepted at "
            "least that; the file records no max_tokens)")
    if n_rec and n_rec == n:
        return "max_tokens: the tool's recorded setting for every request"
    if n_rec:
        return f"max_tokens: the tool's recorded setting for {n_rec} of {n} requests, else {rest}"
    return f"max_tokens: {rest}"


def time_limit_note(label: str, load: str, limit_s: float, limit: str, num_sent: int, *,
                    grace_s: float | None = None, cancelled_when: str = "") -> str | None:
    """What a stage stopped by its load tool's time limit is replayed with. ``grace_s``: the
    stage is replayed time-limited (``RecordedStage.time_limit_end_s``), the requests still
    running that long after the limit cancelled (inf: none); None: the file does not say when
    the limit fell, and the stage is replayed with the requests it sent. An open stage offers
    the requests its rate sent in the time, at their recorded times: only a finite grace
    period is said (None otherwise). ``cancelled_when``: when the tool cancels what is in
    flight, if not at the grace period's end (GuideLLM 0.5-0.7's next status change)."""
    if load not in ("closed", "capped"):
        if not cancelled_when and (grace_s is None or grace_s == math.inf):
            return None
        after = (f"still running {cancelled_when}" if cancelled_when else
                 "still running at the limit" if grace_s == 0 else
                 f"still running {grace_s:g} s after it (its grace period)")
        return (f"stage '{label}' was stopped by its {limit_s:g} s time limit ({limit}): the "
                f"{counted(num_sent, 'request')} it sent {'is' if num_sent == 1 else 'are'} "
                f"offered at their recorded send times and those {after} are cancelled, as the tool cancels them: the client's, "
                "counted neither completed nor a failure of the server")
    if grace_s is None:
        return (f"stage '{label}' was stopped by its {limit_s:g} s time limit ({limit}): "
                f"replayed with the {num_sent} requests it sent, not as many as the simulated "
                f"server would send in {limit_s:g} s (the file does not say when the limit "
                "fell), so its simulated completed count equals the measured one by "
                "construction; compare its latencies and output tokens/s, not completed")
    waited = (f"those still running {cancelled_when} are cancelled, as the tool cancels them"
              if cancelled_when else
              "the requests in flight then run to their end, as the tool waits for them"
              if grace_s == math.inf else
              "those still running at the limit are cancelled, as the tool cancels them (no "
              "grace period)" if grace_s == 0 else
              f"those still running {grace_s:g} s after it (its grace period) are cancelled, "
              "as the tool cancels them")
    return (f"stage '{label}' was stopped by its {limit_s:g} s time limit ({limit}): replayed "
            f"time-limited: the simulated users send nothing after the limit and {waited}; "
            "a request not sent by then or cancelled is the client's, counted neither "
            f"completed nor a failure of the server. At most the {num_sent} requests it sent "
            "are offered: a simulated server that sends them all before the limit would have "
            "sent more, so its completed count is then a lower bound")


def in_flight_after(at: FloatArray, sent: FloatArray, end: FloatArray) -> npt.NDArray[np.int64]:
    """How many of the requests sent at ``sent`` and ended at ``end`` are in flight just after
    each time of ``at`` (sorted; a load tool's sends): those sent by then less those ended by
    then (a request ends after it is sent, and the count only rises at a send)."""
    return (np.searchsorted(np.sort(sent), at, side="right")
            - np.searchsorted(np.sort(end), at, side="right"))


def cap_reached(sent: FloatArray, end: FloatArray, cap: int | None) -> bool:
    """Whether a capped stage's requests (sent at ``sent``, ended at ``end``; NaN: a request
    cut or failed with no end, counted in flight to the last) were ever ``cap`` in flight at
    once. Only then can one have waited for a slot: where they never were, none did, and the
    lag between a request's due time and its send is the tool's own scheduling, load the
    server saw, not a wait. Every reader that offers a capped stage at its due times asks this
    first (and ``trace convert`` before it says the tool held requests back): GuideLLM 0.3 at a
    constant 10 req/s capped at its default 512 held at most 33 in flight, each started 0.1 to
    12 ms after its targeted time (github.com/rsevilla87/guidellm-results-parser 0e467bc
    ``example_output/benchmarks.json``); vLLM 0.32.0's ``vllm bench serve --request-rate 8
    --max-concurrency 2`` (tests/fixtures/recordings/vllm-bench-0.32.0/files) held at most 1,
    its ``queue_times`` 0.1 ms (``client_queue_time``: the send's ``start_time`` less
    ``request_arrival_time``, taken before the task that takes the semaphore is scheduled,
    vllm/benchmarks/serve.py lines 974-984 and 1073)."""
    if not cap or not len(sent):
        return False
    return peak_in_flight(sent, end) >= cap


def peak_in_flight(sent: FloatArray, end: FloatArray) -> int:
    """The most requests in flight at once (:func:`in_flight_after` at each send; NaN ends
    count in flight to the last), 0 for none."""
    return int(in_flight_after(sent, sent, end).max()) if len(sent) else 0
