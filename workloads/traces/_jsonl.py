"""Vectorised JSON-lines reading (pyarrow) with TraceErrors that name the line and field."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.json as pajson

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces._csv import _categorical, _numbers
from kvbudget.workloads.traces._files import FileFacts, last_line_offset

JsonKind = Literal["number", "label", "int_list"]
_TYPES: dict[str, pa.DataType] = {
    "number": pa.float64(),
    "label": pa.string(),
    "int_list": pa.list_(pa.int64()),
}


@dataclass
class JsonColumns:
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
    schema = pa.schema([(name, _TYPES[kind]) for name, kind in kinds.items()])
    try:
        table = pajson.read_json(
            source,
            read_options=pajson.ReadOptions(block_size=1 << 22),
            parse_options=pajson.ParseOptions(explicit_schema=schema,
                                              unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowException, OSError):
        raise _locate(facts, kinds, required, fmt) from None
    out = JsonColumns(present=present, num_rows=table.num_rows, dropped_last=dropped_last)
    for name, kind in kinds.items():
        col = table.column(name)
        arr = col.combine_chunks() if col.num_chunks else pa.array([], _TYPES[kind])
        if kind == "number":
            out.numbers[name] = _numbers(arr)
        elif kind == "label":
            out.labels[name] = _categorical(arr)
        else:
            lengths = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
            offsets = np.zeros(len(arr) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            values = arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
            if len(values) != offsets[-1]:  # sliced input: recompute from the pieces
                values = np.asarray(
                    [v for lst in arr.to_pylist() for v in (lst or [])], dtype=np.int64)
            out.lists[name] = (values, offsets)
    del table, col, arr
    # the columns are numpy copies now: hand Arrow's freed parse buffers back to the system
    # (its allocator keeps them otherwise: ~100 MB for a million-row file, for the whole run)
    pa.default_memory_pool().release_unused()
    return out
