"""A run's result (simulated or measured): records, timeline, summary; written to and read from
a run directory (``requests.parquet``, ``timeline.parquet``, ``summary.json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.results.records import (
    ATTEMPT_COLUMNS,
    OPTIONAL_RECORD_COLUMNS,
    RECORD_COLUMNS,
    TIMELINE_COLUMNS,
    check_columns,
)

if TYPE_CHECKING:
    import pandas as pd

REQUESTS_FILE = "requests.parquet"
TIMELINE_FILE = "timeline.parquet"
SUMMARY_FILE = "summary.json"
ATTEMPTS_FILE = "attempts.parquet"


@dataclass(eq=False)
class RunResult:
    """Columns are kept as numpy arrays; ``records``/``timeline`` build DataFrames on demand.
    ``attempt_columns``: one row per attempt (``attempts.parquet``), when the run modelled its
    clients; ``None`` otherwise."""

    record_columns: dict[str, Any]
    timeline_columns: dict[str, Any]
    summary: dict[str, Any]
    attempt_columns: dict[str, Any] | None = None
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
    def timeline(self) -> pd.DataFrame:
        if self._timeline_df is None:
            import pandas as pd

            self._timeline_df = pd.DataFrame(
                {c: self.timeline_columns[c] for c in TIMELINE_COLUMNS}
            )
        df: pd.DataFrame = self._timeline_df
        return df

    def write(self, out_dir: Path) -> None:
        """Write the three files (the directory is created), so that an interrupted write
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
        _write_parquet(self.timeline_columns, TIMELINE_COLUMNS, tmp[TIMELINE_FILE], pa, pq)
        names = [REQUESTS_FILE, TIMELINE_FILE, SUMMARY_FILE]
        if self.attempt_columns is not None:
            tmp[ATTEMPTS_FILE] = out_dir / f".{ATTEMPTS_FILE}.partial"
            pq.write_table(
                _arrow_table(self.attempt_columns, ATTEMPT_COLUMNS, pa), tmp[ATTEMPTS_FILE]
            )
            names.insert(2, ATTEMPTS_FILE)
        tmp[SUMMARY_FILE].write_text(json.dumps(self.summary, indent=2) + "\n")
        (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
        if self.attempt_columns is None:
            (out_dir / ATTEMPTS_FILE).unlink(missing_ok=True)  # not a previous run's attempts
        for name in names:
            tmp[name].replace(out_dir / name)


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


def _arrow_table(cols: dict[str, Any], schema: dict[str, str], pa: Any) -> Any:
    arrays = {}
    for name, dtype in schema.items():
        values = cols[name]
        if dtype == "str":
            arrays[name] = pa.array([str(v) for v in values], type=pa.string())
        else:
            arrays[name] = pa.array(np.asarray(values, dtype=dtype))
    return pa.table(arrays)


def read_run(run_dir: Path) -> RunResult:
    """Read a run directory written by :meth:`RunResult.write` (simulated or replayed)."""
    import pyarrow.parquet as pq

    paths = [run_dir / REQUESTS_FILE, run_dir / TIMELINE_FILE, run_dir / SUMMARY_FILE]
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"{run_dir}: not a run directory ({p.name} is missing)")
    req = pq.read_table(paths[0])
    tl = pq.read_table(paths[1])
    check_columns(req.column_names, RECORD_COLUMNS, f"{paths[0]}: records")
    check_columns(tl.column_names, TIMELINE_COLUMNS, f"{paths[1]}: timeline")
    try:
        summary = json.loads(paths[2].read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{paths[2]}: not valid JSON ({exc})") from None
    rec = {c: req.column(c).to_numpy(zero_copy_only=False) for c in req.column_names}
    tim = {c: tl.column(c).to_numpy(zero_copy_only=False) for c in tl.column_names}
    attempts = None
    if (run_dir / ATTEMPTS_FILE).is_file():
        at = pq.read_table(run_dir / ATTEMPTS_FILE)
        check_columns(at.column_names, ATTEMPT_COLUMNS, f"{run_dir / ATTEMPTS_FILE}: attempts")
        attempts = {c: at.column(c).to_numpy(zero_copy_only=False) for c in at.column_names}
    return RunResult(rec, tim, summary, attempts)
