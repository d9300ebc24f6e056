"""Errors for bad workload input: one line that names the file, the line or row, and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

NO_REQUESTS = ("is empty: a trace holds one request a row (after a header line where its "
               "format has one; the formats: docs/workloads.md)")
"""What an empty trace file is told, with what it should hold."""
NO_DATA_ROWS = ("has no data rows, only its header: a trace holds one request a row under it "
                "(docs/workloads.md)")
"""What a trace file with a header and nothing under it is told."""


class TraceError(ValueError):
    """A trace file (or trace option) that cannot be loaded.

    The message is one line: ``FILE: line N: field 'F': what is wrong``. The parts are also kept
    as attributes so callers can act on them. ``line`` is the 1-based physical line in the file
    (a CSV header is line 1); ``row`` is the 0-based data row when the line is not meaningful
    (Parquet).
    """

    def __init__(
        self,
        path: str | Path | None,
        problem: str,
        *,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.problem = problem
        self.line = line
        self.row = row
        self.field = field
        parts: list[str] = []
        if self.path is not None:
            parts.append(self.path)
        if line is not None:
            parts.append(f"line {line}")
        elif row is not None:
            parts.append(f"row {row}")
        if field is not None:
            parts.append(f"field {field!r}")
        parts.append(" ".join(problem.split()))
        super().__init__(": ".join(parts))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its parts (a worker process's error comes back whole: its class, file,
        problem, line, row and field), not by its one-line message."""
        return (_rebuilt, (type(self), self.path, self.problem, self.line, self.row, self.field))


def _rebuilt(cls: type[TraceError], path: str | None, problem: str, line: int | None,
             row: int | None, field: str | None) -> TraceError:
    return cls(path, problem, line=line, row=row, field=field)


class UnknownFileError(TraceError):
    """A file no reader could place: the trace loader tells none of its formats in it ("cannot
    tell the trace format", a JSON document or array where a trace has one request a line), or
    the recordings' reader tells no load tool's file in it ("cannot tell the recording format",
    figures of no tool it knows). Where a trace was asked for, the command line asks the
    recordings' reader what such a file is (a load tool's file is named as that tool's:
    cli/errors.py); a file that reader cannot place either keeps this error's line."""


class SpecError(ValueError):
    """An invalid parameter of a generator or distribution.

    ``field`` names the parameter so a file-level validator can point at it
    (``workload.tiers[1].prompt.sigma must be > 0, got -1``); the message alone reads
    ``sigma must be > 0, got -1``.
    """

    def __init__(self, field: str, problem: str, value: object = None, *, show_value: bool = True):
        self.field = field
        self.problem = problem
        self.value = value
        self.show_value = show_value
        text = f"{field} {problem}"
        if show_value:
            text += f", got {show(value)}"
        super().__init__(text)


def show(value: object) -> str:
    """``repr`` of a value, with whole floats written as integers (5.0 -> 5)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


CUT_SHORT = "cut short (was the tool stopped while it wrote the file?)"
"""Why a JSON document or record that ends before it is complete does: load tools write their
result when the run ends (vLLM bench's ``json.dump``, GuideLLM's report) or a record a line as
requests finish (AIPerf's ``profile_export.jsonl``); a run killed mid-write leaves it cut."""


def json_problem(exc: BaseException) -> str:
    """What is wrong with a JSON document, from ``json``'s error (``msg``) or a
    ``RecursionError`` (a document nested deeper than the parser goes)."""
    msg = getattr(exc, "msg", None)
    return str(msg) if msg else "nested too deeply"


def json_refusal(exc: BaseException, text: str) -> str:
    """Why ``text`` is no JSON document: ``not valid JSON (what json said)``, or, for a document
    the text ends inside of (an unterminated string runs to the end: JSON strings hold no raw
    line end), that it was cut short; it was told "Expecting ',' delimiter" or "Unterminated
    string", as if a character were wrong."""
    msg = getattr(exc, "msg", None)
    pos = getattr(exc, "pos", None)
    if not text.strip():
        return "not valid JSON: the file is empty"
    if msg and pos is not None and (pos >= len(text.rstrip())
                                    or str(msg).startswith("Unterminated string")):
        return f"not valid JSON: the file ends inside the document, {CUT_SHORT}"
    return f"not valid JSON ({json_problem(exc)})"
