"""A replay's output directory, written as it goes so that an interrupted run keeps its work.

While a replay runs, every finished request is appended at once to ``requests.part.jsonl`` and
every scrape of the server to ``timeline.part.jsonl`` (one JSON object a line, flushed). At the
end, or when the run is interrupted, :func:`finalize` turns what is there into the same
``requests.parquet``, ``timeline.parquet`` and ``summary.json`` as ``kvbudget simulate``.
``replay.json`` keeps the run's settings, so that ``--resume`` can check it continues the same
replay and skip the requests already done.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from kvbudget.results.metrics import aggregate_token_gaps
from kvbudget.results.recordings import read_replay_meta
from kvbudget.results.records import (
    ATTEMPT_COLUMNS,
    OPTIONAL_RECORD_COLUMNS,
    RECORD_COLUMNS,
    TIMELINE_COLUMNS,
    TOKEN_GAP_COLUMNS,
)
from kvbudget.results.run_parts import REQUESTS_PART as REQUESTS_PART
from kvbudget.results.run_parts import TOKEN_GAPS_KEY as TOKEN_GAPS_KEY
from kvbudget.results.run_parts import read_jsonl as read_jsonl
from kvbudget.results.run_result import (
    ATTEMPTS_FILE,
    REQUESTS_FILE,
    SUMMARY_FILE,
    TIMELINE_FILE,
    TOKEN_GAPS_FILE,
)

if TYPE_CHECKING:
    import pandas as pd

TIMELINE_PART = "timeline.part.jsonl"
ATTEMPTS_PART = "attempts.part.jsonl"
META_FILE = "replay.json"
EXTRA_RECORD_COLUMNS: dict[str, str] = {"error": "str"}
"""Columns a live replay adds to :data:`RECORD_COLUMNS`: ``error`` holds a backend failure
(HTTP status, mid-stream error, reset, timeout) for rows with status ``rejected_overloaded``
and reason ``backend_error``; it is empty otherwise."""

LIVE_RECORD_COLUMNS: dict[str, str] = {**RECORD_COLUMNS, **EXTRA_RECORD_COLUMNS}


def _json_value(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


class RunDir:
    """Append-only part files of one replay (see the module doc)."""

    def __init__(self, out_dir: Path, meta: Mapping[str, Any], *, resume: bool) -> None:
        self.path = out_dir
        meta = json.loads(json.dumps(dict(meta), default=str))  # as it reads back
        out_dir.mkdir(parents=True, exist_ok=True)
        meta_path = out_dir / META_FILE
        parts_exist = (out_dir / REQUESTS_PART).exists() or meta_path.exists()
        if parts_exist and not resume:
            raise ValueError(
                f"{out_dir} already holds a replay; pass --resume to continue it, "
                "or choose another --out"
            )
        if resume and meta_path.exists():
            old = read_replay_meta(meta_path)
            for key in ("trace", "policy", "policy_params", "time_scale", "seed"):
                if key in meta and old.get(key) != meta[key]:
                    raise ValueError(
                        f"{meta_path}: cannot resume, field {key!r} was {old.get(key)!r} "
                        f"and is now {meta[key]!r}"
                    )
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        self._clean_tail(out_dir / REQUESTS_PART)
        self._clean_tail(out_dir / TIMELINE_PART)
        self.done: dict[int, dict[str, Any]] = {
            int(r["request_id"]): r for r in read_jsonl(out_dir / REQUESTS_PART)
        }
        sessions = [int(r.get("session", 0)) for r in read_jsonl(out_dir / TIMELINE_PART)]
        self.session = max(sessions, default=0) + 1
        self._requests: IO[str] = (out_dir / REQUESTS_PART).open("a")
        self._timeline: IO[str] = (out_dir / TIMELINE_PART).open("a")
        self._attempts: IO[str] | None = None  # opened by the first attempt row
        self._clean_tail(out_dir / ATTEMPTS_PART)

    @staticmethod
    def _clean_tail(path: Path) -> None:
        """Drop a last line cut short by a crash, so that appends start on a fresh line."""
        if not path.is_file():
            return
        text = path.read_text()
        if text and not text.endswith("\n"):
            path.write_text(text[: text.rfind("\n") + 1])

    def write_record(self, row: Mapping[str, Any]) -> None:
        self._requests.write(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n")
        self._requests.flush()

    def write_timeline(self, row: Mapping[str, Any]) -> None:
        """One scrape; ``session`` (1 for the first run, 2 after a resume, ...) is added."""
        out = {k: _json_value(v) for k, v in row.items()}
        out["session"] = self.session
        self._timeline.write(json.dumps(out) + "\n")
        self._timeline.flush()

    def write_attempt(self, row: Mapping[str, Any]) -> None:
        """One finished attempt (a replay with client models)."""
        if self._attempts is None:
            self._attempts = (self.path / ATTEMPTS_PART).open("a")
        self._attempts.write(json.dumps({k: _json_value(v) for k, v in row.items()}) + "\n")
        self._attempts.flush()

    def close(self) -> None:
        self._requests.close()
        self._timeline.close()
        if self._attempts is not None:
            self._attempts.close()


def _frame(rows: Iterable[Mapping[str, Any]], schema: Mapping[str, str]) -> pd.DataFrame:
    import pandas as pd

    rows = list(rows)
    cols: dict[str, Any] = {}
    for name, dtype in schema.items():
        values = [r.get(name) for r in rows]
        if dtype == "str":
            cols[name] = np.array(["" if v is None else str(v) for v in values], dtype=object)
        elif dtype == "float64":
            cols[name] = np.array([math.nan if v is None else float(v) for v in values],
                                  dtype=np.float64)
        else:
            cols[name] = np.array([0 if v is None else int(v) for v in values], dtype=dtype)
    return pd.DataFrame(cols)


def records_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Record rows as a DataFrame with the live columns (and ``num_attempts`` when the rows
    have it), sorted by ``request_id``."""
    rows = list(rows)
    df = _frame(rows, record_schema(rows))
    return df.sort_values("request_id", kind="stable").reset_index(drop=True)


def record_schema(rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    rows = list(rows)
    extra = {c: t for c, t in OPTIONAL_RECORD_COLUMNS.items() if any(c in r for r in rows)}
    return {**LIVE_RECORD_COLUMNS, **extra}


def attempts_frame(out_dir: Path) -> pd.DataFrame | None:
    """The attempts written so far, sorted by request and attempt; ``None`` when the replay had
    no client models (no attempts file)."""
    if not (out_dir / ATTEMPTS_PART).is_file():
        return None
    df = _frame(read_jsonl(out_dir / ATTEMPTS_PART), ATTEMPT_COLUMNS)
    return df.sort_values(["request_id", "attempt"], kind="stable").reset_index(drop=True)


def timeline_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    df = _frame(rows, TIMELINE_COLUMNS)
    return df.sort_values("time_s", kind="stable").reset_index(drop=True)


def read_parts(out_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The records and timeline written so far (deduplicated by request id, last row wins)."""
    by_id = {int(r["request_id"]): r for r in read_jsonl(out_dir / REQUESTS_PART)}
    return records_frame(by_id.values()), timeline_frame(read_jsonl(out_dir / TIMELINE_PART))


def token_gaps_of_parts(out_dir: Path) -> dict[str, Any] | None:
    """The token-gaps table (:data:`~kvbudget.results.records.TOKEN_GAP_COLUMNS`) of the
    completed rows written so far (one gap per pair of successive output chunks); ``None`` when
    a completed row lacks its gaps (written by a version before they were recorded)."""
    by_id = {int(r["request_id"]): r for r in read_jsonl(out_dir / REQUESTS_PART)}
    tiers: list[str] = []
    gaps: list[float] = []
    for row in by_id.values():
        if row.get("status") != "completed":
            continue
        mine = row.get(TOKEN_GAPS_KEY)
        if not isinstance(mine, list):
            return None
        tiers.extend([str(row.get("tier", ""))] * len(mine))
        gaps.extend(float(g) for g in mine)
    names = sorted(set(tiers))
    code = {name: j for j, name in enumerate(names)}
    return aggregate_token_gaps(np.array([code[t] for t in tiers], np.int64), names,
                                np.array(gaps, np.float64), np.ones(len(gaps), np.int64))


def engine_preemptions(out_dir: Path) -> int:
    """Engine preemptions over all sessions of a replay: each session's timeline counts from
    its own start, so their last values add up."""
    last: dict[int, int] = {}
    for row in read_jsonl(out_dir / TIMELINE_PART):
        session = int(row.get("session", 0))
        last[session] = max(last.get(session, 0), int(row.get("num_preemptions") or 0))
    return sum(last.values())


def write_outputs(
    out_dir: Path, records: pd.DataFrame, timeline: pd.DataFrame, summary: Mapping[str, Any],
    attempts: pd.DataFrame | None = None, token_gaps: Mapping[str, Any] | None = None,
) -> None:
    """Write ``requests.parquet`` (the records columns plus ``error``), ``timeline.parquet``,
    ``summary.json`` and ``token_gaps.parquet`` (when known): the files
    :func:`kvbudget.results.run_result.read_run` reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def table(df: pd.DataFrame, schema: Mapping[str, str]) -> Any:
        arrays = {}
        for name, dtype in schema.items():
            if dtype == "str":
                arrays[name] = pa.array([str(v) for v in df[name]], type=pa.string())
            else:
                arrays[name] = pa.array(df[name].to_numpy(dtype=dtype))
        return pa.table(arrays)

    out_dir.mkdir(parents=True, exist_ok=True)
    schema = {**LIVE_RECORD_COLUMNS,
              **{c: t for c, t in OPTIONAL_RECORD_COLUMNS.items() if c in records.columns}}
    pq.write_table(table(records, schema), out_dir / REQUESTS_FILE)
    if attempts is not None:
        pq.write_table(table(attempts, ATTEMPT_COLUMNS), out_dir / ATTEMPTS_FILE)
    pq.write_table(table(timeline, TIMELINE_COLUMNS), out_dir / TIMELINE_FILE)
    if token_gaps is not None:
        import pandas as pd

        pq.write_table(table(pd.DataFrame(dict(token_gaps)), TOKEN_GAP_COLUMNS),
                       out_dir / TOKEN_GAPS_FILE)
    else:
        (out_dir / TOKEN_GAPS_FILE).unlink(missing_ok=True)
    (out_dir / SUMMARY_FILE).write_text(json.dumps(dict(summary), indent=2) + "\n")
