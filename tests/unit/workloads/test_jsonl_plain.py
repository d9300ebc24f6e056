"""The small-file JSON-lines reader (Python's ``json``) against pyarrow's: same columns, or it
declines and pyarrow reads the file (same errors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces import _jsonl
from kvbudget.workloads.traces._files import file_facts
from kvbudget.workloads.traces._jsonl import JsonColumns, JsonKind, read_jsonl_columns

KINDS: dict[str, JsonKind] = {"t": "number", "n": "number", "tier": "label", "ids": "int_list"}

plain_number = st.one_of(st.integers(-(2**53), 2**53),
                         st.floats(allow_nan=False, allow_infinity=False, width=64))
odd_value = st.one_of(st.booleans(), st.text(max_size=3), st.integers(2**53 + 1, 2**70),
                      st.just([1, 2]), st.just({"a": 1}))
label = st.one_of(st.sampled_from(["", "interactive", "batch", "é"]), st.text(max_size=4))
ids = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)


@st.composite
def records(draw: Any, odd: bool) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(1, 12))):
        rec: dict[str, Any] = {"t": draw(plain_number)}
        if draw(st.booleans()):
            rec["n"] = draw(st.one_of(plain_number, st.none()))
        if draw(st.booleans()):
            rec["tier"] = draw(st.one_of(label, st.none()))
        if draw(st.booleans()):
            rec["ids"] = draw(st.one_of(ids, st.none()))
        if draw(st.booleans()):
            rec["extra"] = draw(st.one_of(label, plain_number))
        if odd and draw(st.integers(0, 4)) == 0:
            rec[draw(st.sampled_from(sorted(KINDS)))] = draw(odd_value)
        out.append(rec)
    return out


def _encode(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)


def _read(path: Path, small_bytes: int) -> JsonColumns | str:
    old = _jsonl.SMALL_JSONL_BYTES
    _jsonl.SMALL_JSONL_BYTES = small_bytes
    try:
        return read_jsonl_columns(file_facts(path), KINDS, fmt="generic", required=["t"])
    except TraceError as exc:
        return str(exc)
    finally:
        _jsonl.SMALL_JSONL_BYTES = old


def _same(a: JsonColumns | str, b: JsonColumns | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert (a.present, a.num_rows, a.dropped_last) == (b.present, b.num_rows, b.dropped_last)
    assert a.numbers.keys() == b.numbers.keys()
    for name in a.numbers:
        x, y = a.numbers[name], b.numbers[name]
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
        assert np.array_equal(np.signbit(x), np.signbit(y))
    assert a.labels.keys() == b.labels.keys()
    for name in a.labels:
        (ca, va), (cb, vb) = a.labels[name], b.labels[name]
        assert va == vb and ca.dtype == cb.dtype and np.array_equal(ca, cb)
    assert a.lists.keys() == b.lists.keys()
    for name in a.lists:
        (xa, oa), (xb, ob) = a.lists[name], b.lists[name]
        assert np.array_equal(xa, xb) and np.array_equal(oa, ob)
        assert xa.dtype == xb.dtype == oa.dtype == ob.dtype == np.int64


@settings(max_examples=150, deadline=None)
@given(rows=records(odd=False), terminated=st.booleans())
def test_plain_records_read_as_pyarrow_reads_them(tmp_path_factory: pytest.TempPathFactory,
                                                   rows: list[dict[str, Any]],
                                                   terminated: bool) -> None:
    path = tmp_path_factory.mktemp("plain") / "t.jsonl"
    path.write_text("\n".join(map(_encode, rows)) + ("\n" if terminated else ""),
                    encoding="utf-8")
    assert _jsonl._read_plain(path.read_bytes(), KINDS, frozenset(), False) is not None
    _same(_read(path, 1 << 30), _read(path, -1))


@settings(max_examples=150, deadline=None)
@given(rows=records(odd=True), blank=st.booleans(), cut=st.integers(0, 6))
def test_any_records_read_or_fail_as_pyarrow_does(tmp_path_factory: pytest.TempPathFactory,
                                                  rows: list[dict[str, Any]], blank: bool,
                                                  cut: int) -> None:
    text = "\n".join(map(_encode, rows)) + "\n"
    if blank:
        text = text.replace("\n", "\n\n", 1)
    if cut:
        text = text[:-cut]  # a last line cut off mid-record
    path = tmp_path_factory.mktemp("odd") / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    if not text.strip():
        return
    _same(_read(path, 1 << 30), _read(path, -1))


def test_values_pyarrow_would_refuse_are_left_to_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    for bad in ('{"t": NaN}', '{"t": true}', '{"t": "1"}', '{"t": 1, "tier": 3}',
                '{"t": 1, "ids": [1.5]}', '{"t": 1e400}', '[1]', '{"t": 1, "t": 2}',
                '{"t": 1, "x": {"a": 1, "a": 2}}', '{"t": 1}, {"t": 2}', '{"t": 1} {"t": 2}',
                ' ', '{"t": 1, "tier": "a\\ud800"}'):
        path.write_text('{"t": 0}\n' + bad + "\n", encoding="utf-8")
        assert _jsonl._read_plain(path.read_bytes(), KINDS, frozenset(), False) is None, bad
        _same(_read(path, 1 << 30), _read(path, -1))


@pytest.mark.parametrize("values", [[200, 503, None, 200], ["200", "timeout", "", "200"],
                                    [200, "timeout", None, "200"]],
                         ids=["integers", "strings", "mixed"])
def test_a_code_column_takes_strings_and_integers(tmp_path: Path, values: list[Any]) -> None:
    """A ``code`` (an HTTP status) may be an integer: 200 reads as "200", by either reader,
    and in a file that mixes integers and strings (pyarrow reads one type per column)."""
    kinds: dict[str, JsonKind] = {"t": "number", "status": "code"}
    path = tmp_path / "t.jsonl"
    path.write_text("".join(_encode({"t": i, "status": v}) + "\n"
                            for i, v in enumerate(values)), encoding="utf-8")
    cols = []
    for small in (1 << 30, -1):  # Python's json, then pyarrow
        old = _jsonl.SMALL_JSONL_BYTES
        _jsonl.SMALL_JSONL_BYTES = small
        try:
            cols.append(read_jsonl_columns(file_facts(path), kinds, fmt="records", required=[]))
        finally:
            _jsonl.SMALL_JSONL_BYTES = old
    _same(cols[0], cols[1])
    codes, names = cols[0].labels["status"]
    want = [None if v in (None, "") else str(v) for v in values]
    assert [None if c < 0 else names[c] for c in codes.tolist()] == want


@pytest.mark.parametrize("bad", ["true", "200.0", "[200]", '{"code": 200}'])
def test_a_code_that_is_no_string_nor_integer_is_refused(tmp_path: Path, bad: str) -> None:
    kinds: dict[str, JsonKind] = {"t": "number", "status": "code"}
    path = tmp_path / "t.jsonl"
    for first in ('"200"', "200"):
        path.write_text(f'{{"t": 0, "status": {first}}}\n{{"t": 1, "status": {bad}}}\n',
                        encoding="utf-8")
        for small in (1 << 30, -1):
            old = _jsonl.SMALL_JSONL_BYTES
            _jsonl.SMALL_JSONL_BYTES = small
            try:
                with pytest.raises(TraceError, match=r"line 2: field 'status': expected a "
                                   "string or an integer code, got "):
                    read_jsonl_columns(file_facts(path), kinds, fmt="records", required=[])
            finally:
                _jsonl.SMALL_JSONL_BYTES = old
