"""Vectorised CSV reading (pyarrow) that turns every failure into a TraceError with a line.

Columns are read by name and only those needed. Numbers are read as float64 (a NaN or an empty
cell shows as NaN and is reported by the validation step with its line); timestamps as
``timestamp[ns]``; labels as dictionary-encoded strings (no Python object per row). The fast
path never scans the file in Python; only when pyarrow refuses a value does a second, string
read locate the offending row.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces._files import FileFacts, last_line_offset, line_of_row, line_of_text

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd
    import pyarrow as pa

# pyarrow is imported by the functions that read CSV: a JSONL trace never pays for it

Kind = Literal["number", "timestamp", "label"]
NULL_VALUES = ["", "NaN", "nan", "NA", "N/A", "null", "NULL", "None", "#N/A"]
_OFFSET = re.compile(r"(?:Z|[+-]\d\d:?\d\d)$")



THREADED_WITH_HANDLER = False
"""``use_threads`` of every CSV read that passes a Python ``invalid_row_handler``: pyarrow's
threaded reader (``AsyncThreadedTableReader``) may drop its last reference to the handler on
one of its worker threads after the read returned; if the interpreter is finalizing by then,
that thread's ``PyGILState_Ensure`` exits the thread by a forced unwind through C++ frames and
``std::terminate`` aborts the process ("terminate called without an active exception", exit
134) after its work is done (seen under load on pyarrow 26.0.1; apache/arrow#34314). The serial
reader runs the handler and drops it on the calling thread."""

def split_header(line: str) -> list[str]:
    return [name.strip() for name in next(csv.reader([line]))] if line.strip() else []


@dataclass
class CsvColumns:
    """Columns read from a CSV file (``numbers`` float64; ``timestamps`` int64 ns or NaN-free
    float seconds; ``labels`` as codes into values, -1 for empty)."""

    numbers: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = field(default_factory=dict)
    timestamps_ns: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = field(default_factory=dict)
    labels: dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], tuple[str, ...]]] = field(
        default_factory=dict)
    num_rows: int = 0
    dropped_last: bool = False
    tz_note: str | None = None


def categorical(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray[Any, np.dtype[np.int64]],
                                                           tuple[str, ...]]:
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], pa.string())
    if not pa.types.is_dictionary(col.type):
        col = col.cast(pa.string()).dictionary_encode()
    values = tuple(str(v) for v in col.dictionary.to_pylist())
    idx = col.indices.fill_null(-1)
    codes = np.zeros(0, np.int64)
    if len(idx):  # straight from the buffer (no nulls left): Arrow's to_numpy imports pandas
        raw = np.frombuffer(idx.buffers()[1], dtype=idx.type.to_pandas_dtype())
        codes = raw[idx.offset: idx.offset + len(idx)].astype(np.int64)
    # Empty strings are labels too (quoted ""): treat them as missing.
    if "" in values:
        codes[codes == values.index("")] = -1
    return codes, values


def arrow_numbers(arr: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """A numeric Arrow array as float64; without nulls straight from its buffer (Arrow's own
    ``to_numpy`` conversion imports pandas, which costs a fifth of a second of start-up)."""
    import pyarrow as pa

    dtype = {pa.float64(): np.float64, pa.int64(): np.int64}.get(arr.type)
    if dtype is not None and arr.null_count == 0 and len(arr):
        raw = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset: arr.offset + len(arr)]
        return raw.astype(np.float64)
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)


def _ns(col: pa.ChunkedArray | pa.Array) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Timestamps as float nanoseconds relative to the earliest one, NaN for nulls (exact
    integer arithmetic, so the order of the rows does not change the values)."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks else pa.array([], pa.int64())
    if pa.types.is_timestamp(col.type) and col.type.unit == "ns" and col.null_count == 0 and len(col):
        # the int64 nanoseconds straight from the buffer: casting would import pyarrow.compute
        # (~25 ms, most of it wrapping its functions) for what numpy does here
        raw = np.frombuffer(col.buffers()[1], dtype=np.int64)[col.offset:col.offset + len(col)]
        rel: np.ndarray[Any, np.dtype[np.float64]] = (raw - raw.min()).astype(np.float64)
        return rel
    import pyarrow.compute as pc

    ints = col.cast(pa.int64())
    if ints.null_count == len(ints):
        return np.full(len(ints), np.nan)
    first = pc.min(ints).as_py()
    if ints.null_count == 0:  # straight from the buffer: Arrow's to_numpy imports pandas
        raw = np.frombuffer(ints.buffers()[1], dtype=np.int64)[ints.offset:ints.offset + len(ints)]
        return (raw - np.int64(first)).astype(np.float64)
    missing = ints.is_null().to_numpy(zero_copy_only=False)
    rel = ints.fill_null(first).to_numpy(zero_copy_only=False).astype(np.int64) - np.int64(first)
    out: np.ndarray[Any, np.dtype[np.float64]] = rel.astype(np.float64)
    out[missing] = np.nan
    return out


def _fast_types(kinds: Mapping[str, Kind], facts: FileFacts,
                names: Sequence[str]) -> dict[str, pa.DataType]:
    import pyarrow as pa

    types: dict[str, pa.DataType] = {}
    sample = split_header(facts.second_line) if facts.second_line else []
    for name, kind in kinds.items():
        if kind == "number":
            types[name] = pa.float64()
        elif kind == "label":
            types[name] = pa.dictionary(pa.int32(), pa.string())
        else:
            value = sample[names.index(name)] if len(sample) == len(names) else ""
            aware = bool(_OFFSET.search(value.strip()))
            types[name] = pa.timestamp("ns", tz="UTC") if aware else pa.timestamp("ns")
    return types


@contextmanager
def _undecodable_rows(found: list[str]) -> Iterator[None]:
    """pyarrow decodes a malformed row's text as UTF-8 before it calls the invalid-row handler;
    when it cannot, it prints "Exception ignored ... UnicodeDecodeError" and fails the read.
    Keep that print off the user's screen and note it, so the error says what was wrong."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, UnicodeDecodeError):
            found.append(str(unraisable.exc_value))
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _not_utf8(path: Path, found: list[str]) -> TraceError:
    return TraceError(path, f"has a malformed line that is not UTF-8 text ({found[0]}); "
                      "convert the file to UTF-8")


def read_csv_columns(
    facts: FileFacts,
    kinds: Mapping[str, Kind],
    *,
    fmt: str,
    names: Sequence[str] | None = None,
    header_lines: int = 1,
    tier_column: str | None = None,
) -> CsvColumns:
    """Read the named columns of a CSV file.

    ``names`` gives the column names when the file has no header (``header_lines=0``).
    A last line without a line end that cannot be parsed is dropped (``dropped_last``).
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = facts.path
    header = list(names) if names is not None else split_header(facts.first_line)
    _check_header(path, header, kinds, fmt=fmt, own_header=names is None,
                  tier_column=tier_column)
    skipped: list[str] = []
    last_text = facts.last_line

    def on_invalid(row: Any) -> str:
        text = str(row.text).rstrip("\r\n")
        if not text.strip():  # spaces an editor left on a line of their own: a blank line
            return "skip"
        if facts.unterminated and text == last_text and not skipped:
            skipped.append(text)
            return "skip"
        invalid.append((int(row.expected_columns), int(row.actual_columns), text))
        return "error"

    invalid: list[tuple[int, int, str]] = []
    read_opts = pacsv.ReadOptions(column_names=header, skip_rows=header_lines,
                                  block_size=1 << 22, use_threads=THREADED_WITH_HANDLER)
    parse_opts = pacsv.ParseOptions(invalid_row_handler=on_invalid, newlines_in_values=False)
    convert = pacsv.ConvertOptions(
        include_columns=list(kinds),
        column_types=_fast_types(kinds, facts, header),
        null_values=NULL_VALUES,
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )
    undecodable: list[str] = []
    try:
        with _undecodable_rows(undecodable):
            table = pacsv.read_csv(path, read_options=read_opts, parse_options=parse_opts,
                                   convert_options=convert)
    except pa.ArrowInvalid as exc:
        if undecodable:
            raise _not_utf8(path, undecodable) from None
        if invalid:
            raise _field_count_error(path, invalid[0], header_lines) from None
        if "conversion error" not in str(exc) and "CSV parse error" not in str(exc):
            raise TraceError(path, f"cannot be read as CSV: {exc}") from None
        return _slow_path(facts, kinds, header, header_lines=header_lines)
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(path, f"cannot be read as CSV: {exc}") from None
    out = CsvColumns(num_rows=table.num_rows, dropped_last=bool(skipped))
    for name, kind in kinds.items():
        col = table.column(name)
        if kind == "number":
            arr = col.combine_chunks() if col.num_chunks else pa.array([], pa.float64())
            out.numbers[name] = arrow_numbers(arr)
        elif kind == "label":
            out.labels[name] = categorical(col)
        else:
            out.timestamps_ns[name] = _ns(col)
    return out


def _check_header(path: Path, header: Sequence[str], kinds: Mapping[str, Kind], *, fmt: str,
                  own_header: bool, tier_column: str | None) -> None:
    """Refuse a file whose own header (``own_header``) is empty or repeats a column, or whose
    columns lack one of ``kinds``."""
    if own_header:
        if not header or all(not h for h in header):
            raise TraceError(path, "has no header line", line=1)
        dupes = sorted({h for h in header if header.count(h) > 1})
        if dupes:
            raise TraceError(path, f"header repeats column {dupes[0]!r}", line=1, field=dupes[0])
    for name in kinds:
        if name not in header:
            shown = ", ".join(header) or "nothing"
            if len(shown) > 120:
                shown = shown[:117] + "..."
            role = ("named as the tier column" if name == tier_column
                    else f"needed by the {fmt} format")
            raise TraceError(path, f"missing column {name!r} {role} (the header has: {shown})",
                             line=1, field=name)


def _field_count_error(path: Path, invalid: tuple[int, int, str], header_lines: int
                       ) -> TraceError:
    """The error of a line with the wrong number of fields (``invalid``: expected, actual,
    the line's text), naming its line."""
    expected, actual, text = invalid
    line = line_of_text(path, text, start_line=header_lines + 1)
    return TraceError(path, f"expected {expected} fields, got {actual}", line=line)


def _slow_path(facts: FileFacts, kinds: Mapping[str, Kind], header: Sequence[str], *,
               header_lines: int) -> CsvColumns:
    """Re-read as strings to find the first unparseable value; drop it if it is a truncated
    last line, else raise with its line."""
    path = facts.path
    table, dropped_last = _read_strings(facts, kinds, header, header_lines=header_lines)
    import pandas as pd  # only CSV conversion needs it: JSONL and Parquet start faster

    n = table.num_rows
    converted: dict[str, pd.Series[Any]] = {}
    first_bad: tuple[int, str, str] | None = None
    tz_note = None
    for name, kind in kinds.items():
        raw = table.column(name).to_pandas()
        if kind == "label":
            continue
        if kind == "number":
            conv = pd.to_numeric(raw, errors="coerce")
        else:
            conv = pd.to_datetime(raw, format="ISO8601", utc=True, errors="coerce")
            aware = raw.dropna().astype(str).str.contains(_OFFSET, regex=True)
            if aware.any() and not aware.all():
                tz_note = (f"column {name!r} mixes timestamps with and without a zone offset;"
                           " those without were taken as UTC")
        bad = conv.isna() & raw.notna()
        if bad.any():
            row = int(np.argmax(bad.to_numpy()))
            if first_bad is None or row < first_bad[0]:
                first_bad = (row, name, str(raw.iloc[row]))
        converted[name] = conv
    keep = n
    if first_bad is not None:
        row, name, value = first_bad
        if row == n - 1 and facts.unterminated and not dropped_last:
            keep, dropped_last = n - 1, True
        else:
            what = "a number" if kinds[name] == "number" else "a timestamp"
            raise TraceError(path, f"not {what}: {value!r}",
                             line=line_of_row(path, row, header_lines=header_lines), field=name)
    out = CsvColumns(num_rows=keep, dropped_last=dropped_last, tz_note=tz_note)
    _fill_converted(out, table, converted, kinds, keep)
    return out


def _read_strings(facts: FileFacts, kinds: Mapping[str, Kind], header: Sequence[str], *,
                  header_lines: int) -> tuple[pa.Table, bool]:
    """The columns ``kinds`` of the CSV file as strings, and whether a truncated last line
    was skipped; a line with the wrong number of fields, bytes that are not UTF-8 or a file
    pyarrow cannot read raise with the line."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    path = facts.path
    skipped: list[str] = []
    invalid: list[tuple[int, int, str]] = []

    def on_invalid(row: Any) -> str:
        text = str(row.text).rstrip("\r\n")
        if not text.strip():  # spaces on a line of their own: a blank line
            return "skip"
        if facts.unterminated and text == facts.last_line and not skipped:
            skipped.append(text)
            return "skip"
        invalid.append((int(row.expected_columns), int(row.actual_columns), text))
        return "error"

    undecodable: list[str] = []
    try:
        with _undecodable_rows(undecodable):
            table = pacsv.read_csv(
                path,
                read_options=pacsv.ReadOptions(column_names=list(header), skip_rows=header_lines,
                                               block_size=1 << 22,
                                               use_threads=THREADED_WITH_HANDLER),
                parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pacsv.ConvertOptions(
                    include_columns=list(kinds),
                    column_types={name: pa.string() for name in kinds},
                    null_values=NULL_VALUES,
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=True,
                ),
            )
    except (OSError, pa.ArrowException) as exc:
        if undecodable:
            raise _not_utf8(path, undecodable) from None
        if invalid:
            raise _field_count_error(path, invalid[0], header_lines) from None
        raise TraceError(path, f"cannot be read as CSV: {exc}") from None
    return table, bool(skipped)


def _fill_converted(out: CsvColumns, table: pa.Table, converted: Mapping[str, Any],
                    kinds: Mapping[str, Kind], keep: int) -> None:
    """Put the first ``keep`` rows of each converted column into ``out``: labels coded,
    numbers as float64 (NaN: missing), timestamps as ns since the earliest one."""
    for name, kind in kinds.items():
        if kind == "label":
            out.labels[name] = categorical(table.column(name).slice(0, keep))
        elif kind == "number":
            out.numbers[name] = converted[name].to_numpy(dtype=np.float64,
                                                         na_value=np.nan)[:keep]
        else:
            ts = converted[name].iloc[:keep]
            missing = ts.isna().to_numpy()
            ints = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
            ns = np.full(len(ints), np.nan)
            if (~missing).any():
                ns[~missing] = (ints[~missing] - ints[~missing].min()).astype(np.float64)
            out.timestamps_ns[name] = ns


def read_without_last_line(facts: FileFacts) -> io.BytesIO:
    """The file's bytes without its last line (for a truncated last line)."""
    cut = last_line_offset(facts.path, facts)
    with facts.path.open("rb") as fh:
        return io.BytesIO(fh.read(cut))
