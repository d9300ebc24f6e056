"""Vectorised JSON-lines reading (pyarrow) with TraceErrors that name the line and field.

A small file (up to ``SMALL_JSONL_BYTES``) whose every record is plain is read by Python's own
``json`` instead, as one array: importing pyarrow costs more (~30 ms) than parsing some ten
thousand lines. It gives the same columns pyarrow would (numbers as float64, labels as codes in
the order they first appear, lists as values and offsets); a file it cannot vouch for (a value
of another type, a blank line, NaN, a key given twice, a surrogate escape, a line holding more or less than one
value, an integer beyond 2**53) goes to pyarrow, whose errors
the messages are worded from.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces._csv import arrow_numbers, categorical
from kvbudget.workloads.traces._files import FileFacts, last_line_offset

JsonKind = Literal["number", "label", "code", "int_list"]
"""A ``code`` is a label that may also be given as an integer (an HTTP status: 200 reads as
"200")."""
SMALL_JSONL_BYTES = 1 << 20
_EXACT = 2.0**53  # integers up to this convert to float64 exactly, whoever parses them
_INT64 = 2**63
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _arrow_type(kind: JsonKind) -> Any:
    import pyarrow as pa

    if kind == "number":
        return pa.float64()
    if kind in ("label", "code"):
        return pa.string()
    return pa.list_(pa.int64())


@dataclass
class JsonColumns:
    """The columns read from a JSONL trace: numbers, labels (codes and names), lists (flat
    values and offsets), the fields present, the row count, and whether the last line (cut short) was dropped."""

    numbers: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = field(default_factory=dict)
    labels: dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]], tuple[str, ...]]] = field(
        default_factory=dict)
    lists: dict[str, tuple[np.ndarray[Any, np.dtype[np.int64]],
                           np.ndarray[Any, np.dtype[np.int64]]]] = field(default_factory=dict)
    present: frozenset[str] = frozenset()
    num_rows: int = 0
    dropped_last: bool = False


def _record_problem(obj: Any, kinds: Mapping[str, JsonKind],
                    required: Sequence[str]) -> tuple[str | None, str] | None:
    if not isinstance(obj, dict):
        return None, f"not a JSON object: {str(obj)[:40]!r}"
    for name in required:
        if name not in obj:
            return name, "missing"
    for name, kind in kinds.items():
        value = obj.get(name)
        if value is None:
            continue
        if kind == "number" and (isinstance(value, bool) or not isinstance(value, int | float)):
            return name, f"not a number: {value!r}"
        if kind == "label" and not isinstance(value, str):
            return name, f"expected a string, got {value!r}"
        if kind == "code" and (isinstance(value, bool) or not isinstance(value, str | int)):
            return name, f"expected a string or an integer code, got {value!r}"
        if kind == "int_list" and not (
            isinstance(value, list)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            return name, f"expected a list of integers, got {str(value)[:40]}"
    return None


def _parse_line(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        return None, msg


def _locate(facts: FileFacts, kinds: Mapping[str, JsonKind], required: Sequence[str],
            fmt: str) -> TraceError:
    """Scan line by line (error path only) for the first record pyarrow refused."""
    with facts.path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            text = raw.decode("utf-8", errors="replace")
            obj, err = _parse_line(text)
            if err is not None:
                return TraceError(facts.path, f"not valid JSON ({err})", line=number)
            problem = _record_problem(obj, kinds, required)
            if problem is not None:
                return TraceError(facts.path, problem[1], line=number, field=problem[0])
    return TraceError(facts.path, f"cannot be read as {fmt} JSON lines")


def read_jsonl_columns(
    facts: FileFacts,
    kinds: Mapping[str, JsonKind],
    *,
    fmt: str,
    required: Sequence[str],
) -> JsonColumns:
    path = facts.path
    first, err = _parse_line(facts.first_line)
    if err is not None:
        if facts.single_line and facts.unterminated:
            raise TraceError(path, f"has a single, truncated line ({err}): no data rows",
                             line=1)
        raise TraceError(path, f"not valid JSON ({err})", line=1)
    if not isinstance(first, dict):
        raise TraceError(path, f"not a JSON object: {facts.first_line[:40]!r}", line=1)
    for name in required:
        if name not in first:
            shown = ", ".join(map(str, first)) or "nothing"
            raise TraceError(path, f"missing field {name!r} needed by the {fmt} format (the "
                             f"first record has: {shown[:120]})", line=1, field=name)
    present = frozenset(k for k in kinds if k in first)
    source: Any = path
    dropped_last = False
    if facts.unterminated and not facts.single_line:
        last, err = _parse_line(facts.last_line)
        if err is not None or _record_problem(last, kinds, required) is not None:
            with path.open("rb") as fh:
                source = io.BytesIO(fh.read(last_line_offset(path, facts)))
            dropped_last = True
    if facts.size <= SMALL_JSONL_BYTES:
        data = source.getvalue() if isinstance(source, io.BytesIO) else path.read_bytes()
        plain = _read_plain(data, kinds, present, dropped_last)
        if plain is not None:
            return plain
    return _read_arrow(facts, source, kinds, present, dropped_last, fmt=fmt, required=required)


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are all different (pyarrow refuses a key given twice)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("a key given twice")
    return obj


def _read_plain(data: bytes, kinds: Mapping[str, JsonKind], present: frozenset[str],
                dropped_last: bool) -> JsonColumns | None:
    """The columns of ``data`` read with Python's ``json``; ``None`` when any record is not
    plain (then pyarrow reads the file and words the error, if there is one)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        return None  # pyarrow refuses a lone surrogate, json takes it: let pyarrow judge a pair
    lines = text.split("\n")
    if lines and not lines[-1].strip():
        lines.pop()  # the file's last line end
    if not all(lines):
        return None
    try:
        records = json.loads("[" + ",".join(lines) + "]", parse_constant=_reject_constant,
                             object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):
        return None
    if len(records) != len(lines) or not all(type(r) is dict for r in records):
        return None
    out = JsonColumns(present=present, num_rows=len(records), dropped_last=dropped_last)
    for name, kind in kinds.items():
        values = [r.get(name) for r in records]
        types = set(map(type, values))
        if kind == "number":
            if not types <= {int, float, type(None)}:
                return None
            numbers = np.array(values, dtype=np.float64)
            big = np.flatnonzero(np.abs(numbers) > _EXACT)
            if len(big) and (not np.isfinite(numbers[big]).all() or (
                    int in types and any(type(values[i]) is int for i in big.tolist()))):
                return None  # a literal beyond float64 (1e400), an integer beyond 2**53
            out.numbers[name] = numbers
        elif kind in ("label", "code"):
            if not types <= ({str, int, type(None)} if kind == "code" else {str, type(None)}):
                return None
            index: dict[str, int] = {}
            codes = np.array([-1 if v is None else index.setdefault(str(v), len(index))
                              for v in values], dtype=np.int64)
            if "" in index:  # empty strings are missing labels (as categorical reads them)
                codes[codes == index[""]] = -1
            out.labels[name] = (codes, tuple(index))
        else:
            if not types <= {list, type(None)}:
                return None
            lists = [v or [] for v in values]
            flat = [x for v in lists for x in v]
            if not set(map(type, flat)) <= {int} or any(not -_INT64 <= x < _INT64 for x in flat):
                return None
            offsets = np.zeros(len(lists) + 1, dtype=np.int64)
            np.cumsum([len(v) for v in lists], out=offsets[1:])
            out.lists[name] = (np.array(flat, dtype=np.int64), offsets)
    return out


def _add_mixed_codes(facts: FileFacts, source: Any, table: Any, names: list[str],
                     kinds: Mapping[str, JsonKind], required: Sequence[str], fmt: str) -> Any:
    """``table`` with the code columns ``names`` (strings and integers mixed) read line by
    line; the error of the first record that is not plain otherwise."""
    import pyarrow as pa

    if isinstance(source, io.BytesIO):
        source.seek(0)
        lines = source.read().split(b"\n")
    else:
        lines = facts.path.read_bytes().split(b"\n")
    columns: dict[str, list[str | None]] = {name: [] for name in names}
    for raw in lines:
        if not raw.strip():
            continue
        obj, err = _parse_line(raw.decode("utf-8", errors="replace"))
        if err is not None or _record_problem(obj, kinds, required) is not None:
            raise _locate(facts, kinds, required, fmt)
        for name in names:
            value = obj.get(name)
            columns[name].append(None if value is None else str(value))
    if any(len(column) != table.num_rows for column in columns.values()):
        raise TraceError(facts.path, f"cannot be read as {fmt} JSON lines")
    for name in names:
        table = table.append_column(name, pa.array(columns[name], pa.string()))
    return table


def _read_arrow(facts: FileFacts, source: Any, kinds: Mapping[str, JsonKind],
                present: frozenset[str], dropped_last: bool, *, fmt: str,
                required: Sequence[str]) -> JsonColumns:
    import pyarrow as pa
    import pyarrow.json as pajson

    # the Arrow columns are converted as the CSV reader converts them. A code column is read as
    # strings, else as integers; one that mixes both (pyarrow reads one type) is left out and
    # read line by line (``mixed``)
    mixed: list[str] = []
    for codes_as in ("string", "int", "left out") if "code" in kinds.values() else ("string",):
        if codes_as == "left out":
            mixed = [name for name, kind in kinds.items() if kind == "code"]
        schema = pa.schema([(name, pa.int64() if codes_as == "int" and kind == "code" else
                             _arrow_type(kind)) for name, kind in kinds.items()
                            if name not in mixed])
        if isinstance(source, io.BytesIO):
            source.seek(0)
        try:
            table = pajson.read_json(
                source,
                read_options=pajson.ReadOptions(block_size=1 << 22),
                parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                  unexpected_field_behavior="ignore"),
            )
            break
        except (pa.ArrowException, OSError):
            pass
    else:
        raise _locate(facts, kinds, required, fmt) from None
    if mixed:
        table = _add_mixed_codes(facts, source, table, mixed, kinds, required, fmt)
    out = JsonColumns(present=present, num_rows=table.num_rows, dropped_last=dropped_last)
    for name, kind in kinds.items():
        col = table.column(name)
        arr = col.combine_chunks() if col.num_chunks else pa.array([], _arrow_type(kind))
        if kind == "number":
            out.numbers[name] = arrow_numbers(arr)
        elif kind in ("label", "code"):
            out.labels[name] = categorical(arr)
        else:
            lengths = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
            offsets = np.zeros(len(arr) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            if len(values) != offsets[-1]:  # sliced input: recompute from the pieces
                values = np.asarray(
                    [v for lst in arr.to_pylist() for v in (lst or [])], dtype=np.int64)
            out.lists[name] = (values, offsets)
        del col, arr
    del table
    # the columns are numpy copies now: hand Arrow's freed parse buffers back to the system
    # (its allocator keeps them otherwise: ~100 MB for a million-row file, for the whole run)
    pa.default_memory_pool().release_unused()
    return out
