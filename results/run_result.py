"""A run's result (simulated or measured): records, timeline, summary; written to and read from
a run directory (``requests.parquet``, ``timeline.parquet``, ``summary.json``, and
``token_gaps.parquet``, the inter-token gaps, in runs written since ITL was measured)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.results.records import (
    ATTEMPT_COLUMNS,
    DISAGG_RECORD_COLUMNS,
    OPTIONAL_RECORD_COLUMNS,
    OPTIONAL_TIMELINE_COLUMNS,
    RECORD_COLUMNS,
    STATUSES,
    TIMELINE_COLUMNS,
    TOKEN_GAP_COLUMNS,
    check_columns,
)
from kvbudget.results.run_parts import REQUESTS_PART
from kvbudget.results.said import setting_lines
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError, json_refusal
from kvbudget.workloads.max_output import MAX_TOKENS
from kvbudget.workloads.text_files import read_text

if TYPE_CHECKING:
    import pandas as pd

REQUESTS_FILE = "requests.parquet"
TIMELINE_FILE = "timeline.parquet"
SUMMARY_FILE = "summary.json"
ATTEMPTS_FILE = "attempts.parquet"
TOKEN_GAPS_FILE = "token_gaps.parquet"


@dataclass(eq=False)
class RunResult:
    """Columns are kept as numpy arrays; ``records``/``timeline`` build DataFrames on demand.
    ``attempt_columns``: one row per attempt (``attempts.parquet``), when the run modelled its
    clients; ``None`` otherwise. ``token_gap_columns``: the inter-token gaps of the completed
    requests (:data:`~kvbudget.results.records.TOKEN_GAP_COLUMNS`, ``token_gaps.parquet``);
    ``None`` for a run directory written before they were recorded.
    ``chosen_token_gap_columns``: the same table of the completed requests ``simulate``'s
    ``token_gaps_of`` chose (``kvbudget validate --url``'s: those its client did not read whole
    at once); not written to a run directory; ``None`` without it."""

    record_columns: dict[str, Any]
    timeline_columns: dict[str, Any]
    summary: dict[str, Any]
    attempt_columns: dict[str, Any] | None = None
    token_gap_columns: dict[str, Any] | None = None
    chosen_token_gap_columns: dict[str, Any] | None = field(default=None, repr=False)
    _records_df: Any = field(default=None, repr=False)
    _timeline_df: Any = field(default=None, repr=False)

    @property
    def records(self) -> pd.DataFrame:
        if self._records_df is None:
            import pandas as pd

            self._records_df = pd.DataFrame(
                {c: self.record_columns[c] for c in _record_schema(self.record_columns)}
            )
        df: pd.DataFrame = self._records_df
        return df

    @property
    def attempts(self) -> pd.DataFrame | None:
        """One row per attempt, or ``None`` for a run without client models."""
        if self.attempt_columns is None:
            return None
        import pandas as pd

        return pd.DataFrame({c: self.attempt_columns[c] for c in ATTEMPT_COLUMNS})

    @property
    def token_gaps(self) -> pd.DataFrame | None:
        """The inter-token gaps as a weighted multiset (``tier``, ``gap_s``, ``num_gaps``), or
        ``None`` when the run directory has none."""
        if self.token_gap_columns is None:
            return None
        import pandas as pd

        return pd.DataFrame({c: self.token_gap_columns[c] for c in TOKEN_GAP_COLUMNS})

    @property
    def timeline(self) -> pd.DataFrame:
        if self._timeline_df is None:
            import pandas as pd

            self._timeline_df = pd.DataFrame(
                {c: self.timeline_columns[c] for c in _timeline_schema(self.timeline_columns)}
            )
        df: pd.DataFrame = self._timeline_df
        return df

    def __repr__(self) -> str:
        """What a notebook shows of a run: its outcome, what it simulated and assumed (the
        lines ``simulate`` prints above its table) and where its tables are, not its arrays."""
        s = self.summary
        overall = s.get("overall") or {}
        counts = ", ".join(f"{overall.get(k, 0):,} {k.replace('_', ' ')}" for k in STATUSES
                           if k == "completed" or overall.get(k))
        lines = [f"RunResult: {s.get('policy', '?')}, "
                 f"{counted(overall.get('offered', 0), 'request')} offered: {counts}", *setting_lines([s])]
        figures = [f"{name} p50 / p99 {_s(block.get('p50'))} / {_s(block.get('p99'))}"
                   for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))
                   if isinstance(block := overall.get(key), dict)]
        if figures:
            lines.append("overall: " + "; ".join(figures))
        n = len(next(iter(self.record_columns.values()), ()))
        m = len(next(iter(self.timeline_columns.values()), ()))
        lines.append(f".records ({n:,} rows), .timeline ({m:,} rows), "
                     + ("" if self.token_gap_columns is None else ".token_gaps, ")
                     + ("" if self.attempt_columns is None else ".attempts, ")
                     + ".summary (every figure)")
        return "\n".join(lines)

    def write(self, out_dir: Path) -> list[str]:
        """Write the run's files (the directory is created) and return their names, so that an interrupted write
        never leaves a directory that reads as one run: each file is written under a temporary
        name first; then ``summary.json`` (what :func:`read_run` needs last) is removed, the
        two tables are renamed into place and the summary is renamed last. A directory
        interrupted at any point holds either the previous run whole or no summary (not a run
        directory), never this run's requests beside the previous run's timeline."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = {name: out_dir / f".{name}.partial" for name in
               (REQUESTS_FILE, TIMELINE_FILE, SUMMARY_FILE)}
        _write_parquet(self.record_columns, _record_schema(self.record_columns),
                       tmp[REQUESTS_FILE], pa, pq)
        _write_parquet(self.timeline_columns, _timeline_schema(self.timeline_columns),
                       tmp[TIMELINE_FILE], pa, pq)
        names = [REQUESTS_FILE, TIMELINE_FILE, SUMMARY_FILE]
        if self.attempt_columns is not None:
            tmp[ATTEMPTS_FILE] = out_dir / f".{ATTEMPTS_FILE}.partial"
            _write_parquet(self.attempt_columns, ATTEMPT_COLUMNS, tmp[ATTEMPTS_FILE], pa, pq)
            names.insert(2, ATTEMPTS_FILE)
        if self.token_gap_columns is not None:
            tmp[TOKEN_GAPS_FILE] = out_dir / f".{TOKEN_GAPS_FILE}.partial"
            _write_parquet(self.token_gap_columns, TOKEN_GAP_COLUMNS, tmp[TOKEN_GAPS_FILE], pa,
                           pq)
            names.insert(2, TOKEN_GAPS_FILE)
        tmp[SUMMARY_FILE].write_text(json.dumps(self.summary, indent=2) + "\n")
        (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
        if self.attempt_columns is None:
            (out_dir / ATTEMPTS_FILE).unlink(missing_ok=True)  # not a previous run's attempts
        if self.token_gap_columns is None:
            (out_dir / TOKEN_GAPS_FILE).unlink(missing_ok=True)
        for name in names:
            tmp[name].replace(out_dir / name)
        return names


ROW_GROUP_ROWS = 1 << 20
"""Rows converted to Arrow and written at a time: Parquet's default row group, so the file is
the one ``pyarrow.parquet.write_table`` makes of the whole table, without holding an Arrow copy
of every column (10 million records: ~1.5 GB) beside the run's own."""


def _write_parquet(cols: dict[str, Any], schema: dict[str, str], path: Path, pa: Any,
                   pq: Any) -> None:
    """``cols`` as a Parquet file, a row group (``ROW_GROUP_ROWS``) at a time."""
    num_rows = len(cols[next(iter(schema))]) if schema else 0
    writer = None
    try:
        for lo in range(0, max(num_rows, 1), ROW_GROUP_ROWS):
            part = {name: cols[name][lo:lo + ROW_GROUP_ROWS] for name in schema}
            table = _arrow_table(part, schema, pa)
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            del table, part
    finally:
        if writer is not None:
            writer.close()


def _record_schema(cols: dict[str, Any]) -> dict[str, str]:
    """The records' columns: the fixed ones, then the optional ones the run has."""
    return {**RECORD_COLUMNS, **{c: t for c, t in OPTIONAL_RECORD_COLUMNS.items() if c in cols}}


def _timeline_schema(cols: dict[str, Any]) -> dict[str, str]:
    """The timeline's columns: the fixed ones, then the optional ones the run has."""
    return {**TIMELINE_COLUMNS,
            **{c: t for c, t in OPTIONAL_TIMELINE_COLUMNS.items() if c in cols}}


def _arrow_table(cols: dict[str, Any], schema: dict[str, str], pa: Any) -> Any:
    arrays = {}
    for name, dtype in schema.items():
        values = cols[name]
        if dtype == "str":
            arrays[name] = pa.array([str(v) for v in values], type=pa.string())
        else:
            arrays[name] = pa.array(np.asarray(values, dtype=dtype))
    return pa.table(arrays)


def _read_table(path: Path, pq: Any) -> Any:
    """A Parquet file, or ``ValueError`` naming it (truncated, empty, not Parquet)."""
    try:
        return pq.read_table(path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable Parquet file ({detail}); "
                         "the run directory is damaged") from None


def _check_types(table: Any, schema: dict[str, str], path: Path, pa: Any) -> None:
    """Each expected column has its kind (integers, numbers, text) and no nulls where a value
    is required (a float column's null is a missing measurement)."""
    kinds = {"int64": (pa.types.is_integer, "integers"),
             "float64": (lambda t: pa.types.is_floating(t) or pa.types.is_integer(t), "numbers"),
             "str": (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "text")}
    for name, dtype in schema.items():
        if name not in table.column_names:
            continue
        col = table.column(name)
        ok, what = kinds[dtype]
        if not ok(col.type) and not (pa.types.is_null(col.type) and dtype == "float64"):
            raise ValueError(f"{path}: column {name!r} holds {col.type}, expected {what}")
        if dtype != "float64" and col.null_count:
            raise ValueError(f"{path}: column {name!r} has {col.null_count} empty values")


def _first_bad(path: Path, name: str, values: Any, bad: Any, problem: str) -> None:
    if bad.any():
        i = int(np.argmax(bad))
        value = values[i].item() if isinstance(values[i], np.generic) else values[i]
        raise ValueError(f"{path}: row {i}, column {name!r}: {problem} ({value!r})")


MAX_RUN_SPAN_S = 10 * 365.25 * 86400.0
"""A run longer than ten years is not a run (the trace loader's bound)."""


def _check_records(rec: dict[str, Any], path: Path) -> None:
    n = len(rec["request_id"])
    ids = np.asarray(rec["request_id"])
    if n and np.unique(ids).size != n:
        _, first = np.unique(ids, return_index=True)
        dup = np.ones(n, dtype=bool)
        dup[first] = False
        _first_bad(path, "request_id", ids, dup, "duplicated request id")
    for name in ("prompt_tokens", "max_output_tokens", "output_tokens"):
        v = np.asarray(rec[name])
        _first_bad(path, name, v, (v < 0) | (v > MAX_TOKENS),
                   f"tokens outside 0..{MAX_TOKENS:,}")
    for name in ("num_preemptions", "reserved_tokens", *[c for c in OPTIONAL_RECORD_COLUMNS
                                                         if c in rec]):
        v = np.asarray(rec[name])
        if name in DISAGG_RECORD_COLUMNS:  # -1 / NaN: not reached
            _first_bad(path, name, v, (v < -1) | np.isinf(v), "below -1 or infinite")
            continue
        _first_bad(path, name, v, v < 0, "negative")
    arrival = np.asarray(rec["arrival_s"], dtype=np.float64)
    _first_bad(path, "arrival_s", arrival, ~np.isfinite(arrival), "not a finite time")
    if n and float(arrival.max() - arrival.min()) > MAX_RUN_SPAN_S:
        _first_bad(path, "arrival_s", arrival, arrival == arrival.max(),
                   "the run would span over ten years")
    for name in ("admitted_s", "first_token_s", "finished_s"):
        v = np.asarray(rec[name], dtype=np.float64)
        _first_bad(path, name, v, np.isinf(v), "not a finite time")
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        v = np.asarray(rec[name], dtype=np.float64)
        _first_bad(path, name, v, np.isinf(v) | (v < 0), "not a duration >= 0")
    status = np.asarray(rec["status"], dtype=object)
    _first_bad(path, "status", status, ~np.isin(status, np.array(STATUSES, dtype=object)),
               f"not one of {', '.join(STATUSES)}")
    tiers = np.asarray(rec["tier"], dtype=object)
    _first_bad(path, "tier", tiers, tiers == "", "empty tier name")
    done = status == "completed"
    # a completed request has its E2E; its TTFT may be unknown (a whole, non-streamed answer
    # through ``kvbudget serve``: its first token was not seen)
    v = np.asarray(rec["e2e_s"], dtype=np.float64)
    _first_bad(path, "e2e_s", v, done & np.isnan(v), "a completed request without it")
    ttft = np.asarray(rec["ttft_s"], dtype=np.float64)
    e2e = np.asarray(rec["e2e_s"], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        _first_bad(path, "e2e_s", e2e, e2e < ttft, "below ttft_s")


def _check_timeline(tim: dict[str, Any], path: Path) -> None:
    t = np.asarray(tim["time_s"], dtype=np.float64)
    _first_bad(path, "time_s", t, ~np.isfinite(t), "not a finite time")
    if t.size > 1:
        _first_bad(path, "time_s", t[1:], np.diff(t) < 0, "earlier than the sample before it")
    for name in TIMELINE_COLUMNS:
        if name != "time_s":
            v = np.asarray(tim[name])
            _first_bad(path, name, v, v < 0, "negative")


_SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "policy": (str,), "policy_params": (dict,), "gpu": (str, type(None)),
    "model": (str, type(None)), "num_gpu_blocks": (int, type(None)),
    "block_size": (int, type(None)), "kv_capacity_tokens": (int, float, type(None)),
    "overall": (dict,), "tiers": (dict,), "clients": (dict,), "engine": (dict,), "kv": (dict,),
    "workload": (dict, type(None)), "seed": (int, type(None)),
    "duration_s": (int, float, type(None)),
}


def _check_summary(summary: Any, num_records: int, path: Path) -> None:
    """A JSON object whose keys that kvbudget reads back have their types, and whose request
    count is the records' (a summary beside other records, or none, is a damaged run)."""
    if not isinstance(summary, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(summary).__name__}")
    for key, types in _SUMMARY_TYPES.items():
        if key in summary and (not isinstance(summary[key], types)
                               or isinstance(summary[key], bool)):
            raise ValueError(f"{path}: {key!r} holds {summary[key]!r}, expected "
                             + " or ".join(t.__name__ for t in types if t is not type(None)))
    for key in ("duration_s", "kv_capacity_tokens", "num_gpu_blocks", "block_size"):
        value = summary.get(key)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{path}: {key!r} holds {value!r}, expected a number >= 0")
    for tier, block in (summary.get("tiers") or {}).items():
        if not isinstance(block, dict):
            raise ValueError(f"{path}: tiers.{tier} holds {block!r}, expected an object")
    offered = (summary.get("overall") or {}).get("offered")
    if offered is not None and offered != num_records:
        raise ValueError(f"{path}: says {offered!r} requests were offered but "
                         f"{REQUESTS_FILE} has {num_records} rows; the run directory is damaged "
                         "(an interrupted or mixed write)")


def _s(value: Any) -> str:
    """A latency in seconds as the tables print it (``-`` where none was measured)."""
    return "-" if value is None else f"{float(value):.3g} s"


def run_files(run_dir: Path) -> list[str]:
    """The run-directory files ``run_dir`` holds (requests, timeline, token gaps, attempts,
    summary, those present): what a command that wrote one says it wrote."""
    return [name for name in (REQUESTS_FILE, TIMELINE_FILE, TOKEN_GAPS_FILE, ATTEMPTS_FILE,
                              SUMMARY_FILE) if (run_dir / name).is_file()]


def _open_said(run_dir: Path) -> str | None:
    """What a run directory still open says (``requests.part.jsonl`` written as requests end,
    its parquet files and summary not yet), or ``None``: it is no run directory at all."""
    part = run_dir / REQUESTS_PART
    if not part.is_file() or (run_dir / REQUESTS_FILE).exists():
        return None
    with part.open("rb") as rows:
        num_rows = sum(1 for line in rows if line.strip())
    return (f"is open: {counted(num_rows, 'request')} so far in {REQUESTS_PART}, its "
            f"{REQUESTS_FILE} and {SUMMARY_FILE} not yet written. The kvbudget serve (or "
            "replay) writing it is still running, or stopped without closing it: serve closes "
            "a directory at --rotate-requests requests and when it stops (SIGTERM), and one it "
            "left open (killed) when it next starts with the same --out; a replay closes its "
            "own with --resume")


def _holds_runs_said(folder: Path) -> str:
    """``", but it holds 4 run directories: ...; give one ..."`` for a folder of run
    directories (``compare --out``'s, one a policy; ``serve``'s, one per ``--rotate-requests``
    requests), else ``""``."""
    runs = sorted(c.name for c in folder.iterdir() if c.is_dir() and (
        c / REQUESTS_FILE).is_file() and (c / SUMMARY_FILE).is_file())
    if not runs:
        return ""
    listed = ", ".join(runs[:6]) + (f" and {len(runs) - 6} more" if len(runs) > 6 else "")
    return (f", but it holds {counted(len(runs), 'run directory', 'run directories')}: "
            f"{listed}; give one ({folder / runs[0]}), or all where several are taken "
            f"({folder / '*'})")


def read_run(run_dir: Path) -> RunResult:
    """Read a run directory written by :meth:`RunResult.write` (simulated or replayed).

    A damaged directory (a file missing, truncated or not Parquet, a column missing or of the
    wrong kind, values no run has: negative or non-finite times, token counts beyond
    ``MAX_TOKENS``, unknown statuses, duplicated ids; a summary that is not a JSON object, or
    whose request count is not the records') raises ``ValueError`` or ``FileNotFoundError``
    naming the file, row and column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = [run_dir / REQUESTS_FILE, run_dir / TIMELINE_FILE, run_dir / SUMMARY_FILE]
    if not run_dir.is_dir():  # a mistyped path is not a damaged run
        raise FileNotFoundError(f"{run_dir}: not a run directory (" + (
            "a file, not a directory" if run_dir.exists() else "no such directory") + ")")
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"{run_dir}: " + (_open_said(run_dir) or (
                f"not a run directory ({p.name} is missing)" + _holds_runs_said(run_dir))))
    req = _read_table(paths[0], pq)
    tl = _read_table(paths[1], pq)
    check_columns(req.column_names, RECORD_COLUMNS, f"{paths[0]}: records")
    check_columns(tl.column_names, TIMELINE_COLUMNS, f"{paths[1]}: timeline")
    _check_types(req, {**RECORD_COLUMNS, **OPTIONAL_RECORD_COLUMNS}, paths[0], pa)
    _check_types(tl, {**TIMELINE_COLUMNS, **OPTIONAL_TIMELINE_COLUMNS}, paths[1], pa)
    try:
        text = read_text(paths[2])
        summary = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        said = json_refusal(exc, text)
        if said.startswith("not valid JSON ("):  # json's own words, with the line and column
            raise ValueError(f"{paths[2]}: not valid JSON ({exc})") from None
        raise ValueError(f"{paths[2]}: line {getattr(exc, 'lineno', 1)}: {said}") from None
    except TraceError:  # cut in a UTF-16 character: it names the file
        raise
    except ValueError as exc:  # not UTF-8 text
        raise ValueError(f"{paths[2]}: not valid JSON ({exc})") from None
    rec = {c: req.column(c).to_numpy(zero_copy_only=False) for c in req.column_names}
    tim = {c: tl.column(c).to_numpy(zero_copy_only=False) for c in tl.column_names}
    _check_records(rec, paths[0])
    _check_timeline(tim, paths[1])
    _check_summary(summary, req.num_rows, paths[2])
    attempts = None
    if (run_dir / ATTEMPTS_FILE).is_file():
        at = _read_table(run_dir / ATTEMPTS_FILE, pq)
        check_columns(at.column_names, ATTEMPT_COLUMNS, f"{run_dir / ATTEMPTS_FILE}: attempts")
        _check_types(at, ATTEMPT_COLUMNS, run_dir / ATTEMPTS_FILE, pa)
        attempts = {c: at.column(c).to_numpy(zero_copy_only=False) for c in at.column_names}
    gaps = None
    if (run_dir / TOKEN_GAPS_FILE).is_file():
        tg = pq.read_table(run_dir / TOKEN_GAPS_FILE)
        check_columns(tg.column_names, TOKEN_GAP_COLUMNS, f"{run_dir / TOKEN_GAPS_FILE}: token gaps")
        gaps = {c: tg.column(c).to_numpy(zero_copy_only=False) for c in tg.column_names}
    return RunResult(rec, tim, summary, attempts, gaps)
