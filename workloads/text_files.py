"""A user's text file as it arrives: the one place that tells its encoding and hands on UTF-8.

Load tools write UTF-8 without a byte-order mark, but a user's copy has often been through other
hands: in Windows PowerShell 5.1 "Out-File and the redirection operators > and >> create
UTF-16LE" with a byte-order mark (learn.microsoft.com/powershell/module/microsoft.powershell.core/
about/about_character_encoding?view=powershell-5.1); ``Set-Content -Encoding utf8`` there,
Notepad's "UTF-8 with BOM" and Excel's "CSV UTF-8" put the UTF-8 mark ``EF BB BF`` in
front. The text is the same; only the bytes around it differ. The recordings' readers open a
user's text file here (:func:`open_utf8`, :func:`read_utf8`, :func:`head_utf8`; the generic
records format, read by pyarrow from the file's name, through :func:`utf8_file`) and see UTF-8
without a mark, so a byte-order mark never changes what a file is taken for (a vLLM bench result with the
UTF-8 mark was refused as "holds aggregate figures, one line a run": its first line was not
JSON). Text in UTF-16 or UTF-32 is transcoded, and :func:`encoding_said` gives the line that
says so; a UTF-8 mark changes nothing and is not said. A file cut in the middle of a UTF-16
character is refused naming the byte.
"""

from __future__ import annotations

import codecs
import io
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from kvbudget.workloads.errors import TraceError

BOMS: tuple[tuple[bytes, str, str], ...] = (
    (codecs.BOM_UTF8, "utf-8", "UTF-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le", "UTF-32 LE"),  # before UTF-16 LE: it starts the same
    (codecs.BOM_UTF32_BE, "utf-32-be", "UTF-32 BE"),
    (codecs.BOM_UTF16_LE, "utf-16-le", "UTF-16 LE"),
    (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16 BE"),
)
"""Byte-order marks (the Unicode standard, section 23.8), the codec of the text after each and
its name as said."""


def bom_of(head: bytes) -> tuple[bytes, str, str] | None:
    """The byte-order mark ``head`` starts with, its codec and name; None for none."""
    for mark, codec, name in BOMS:
        if head.startswith(mark):
            return mark, codec, name
    return None


def _mark(path: Path) -> tuple[bytes, str, str] | None:
    with path.open("rb") as fh:
        return bom_of(fh.read(4))


def encoding_of(path: Path) -> str | None:
    """The name of the encoding a file's byte-order mark says when it is not UTF-8 (``UTF-16
    LE``); None for UTF-8, with a mark or without (the same text), and for anything that is no
    file."""
    try:
        found = _mark(path) if path.is_file() else None
    except OSError:
        return None
    return None if found is None or found[1] == "utf-8" else found[2]


def encoding_said(paths: list[Path]) -> str | None:
    """The line that says which of ``paths`` were read as UTF-16 or UTF-32 text (their
    byte-order mark), or None when none was."""
    named: dict[str, list[str]] = {}
    for path in paths:
        name = encoding_of(path)
        if name:
            named.setdefault(name, []).append(path.name)
    if not named:
        return None
    return "; ".join(
        f"read {', '.join(files)} as {name} text (the byte-order mark "
        f"{'they start' if len(files) > 1 else 'it starts'} with)"
        for name, files in named.items()
    )


def _transcode(path: Path, raw: bytes, found: tuple[bytes, str, str], *, whole: bool) -> bytes:
    """UTF-8 of the text after the mark; ``whole``: a character cut at the end is refused
    (the file was cut short), else (a head) dropped."""
    mark, codec, name = found
    body = raw[len(mark) :]
    try:
        return body.decode(codec).encode("utf-8")
    except UnicodeDecodeError as exc:
        if not whole and exc.end >= len(body) and exc.reason == "truncated data":
            return body[: exc.start].decode(codec).encode("utf-8")
        at = len(mark) + exc.start
        what = (
            "ends in the middle of a character (cut short)"
            if exc.end >= len(body)
            else f"holds bytes that are no {name} text"
        )
        raise TraceError(
            path, f"is {name} text (its byte-order mark) but {what} at byte {at}"
        ) from None


def read_utf8(path: Path) -> bytes:
    """The whole file as UTF-8 bytes, without a byte-order mark."""
    raw = path.read_bytes()
    found = bom_of(raw[:4])
    if found is None:
        return raw
    if found[1] == "utf-8":
        return raw[len(found[0]) :]
    return _transcode(path, raw, found, whole=True)


def read_text(path: Path, *, errors: str = "strict") -> str:
    """The whole file as text (:func:`read_utf8` decoded; ``errors`` as ``bytes.decode``'s)."""
    return read_utf8(path).decode("utf-8", errors)


def head_utf8(path: Path, size: int) -> bytes:
    """About the first ``size`` bytes of the file's text, as UTF-8 without a mark."""
    with path.open("rb") as fh:
        raw = fh.read(size)
        found = bom_of(raw[:4])
        if found is None:
            return raw
        if found[1] == "utf-8":
            return raw[len(found[0]) :]
        raw += fh.read(size * 3)  # UTF-16 and UTF-32 take two and four bytes a character
    return _transcode(path, raw, found, whole=False)[:size]


def open_utf8(path: Path) -> BinaryIO:
    """The file opened for reading bytes, as UTF-8 without a byte-order mark: the file itself
    past a UTF-8 mark, else (UTF-16, UTF-32) its text transcoded in memory."""
    fh = path.open("rb")
    found = bom_of(fh.read(4))
    if found is None:
        fh.seek(0)
        return fh
    if found[1] == "utf-8":
        fh.seek(len(found[0]))
        return fh
    fh.close()
    return io.BytesIO(read_utf8(path))


@contextmanager
def utf8_file(path: Path) -> Iterator[Path]:
    """``path`` itself, or for UTF-16 or UTF-32 text a UTF-8 copy of it in a temporary folder
    (for readers that hand the file's name to a parser: pyarrow's CSV and JSON readers), removed
    after; an error naming the copy names ``path`` instead (the lines are the same)."""
    if encoding_of(path) is None:
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="kvbudget-utf8-") as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(read_utf8(path))
        try:
            yield copy
        except TraceError as exc:
            if exc.path != str(copy):
                raise
            raise type(exc)(  # its kind kept (a file no reader placed: UnknownFileError)
                path, exc.problem, line=exc.line, row=exc.row, field=exc.field
            ) from None


TEXT_OF_NO_TOOL = "a text file (a log, a report, what a script printed) of no tool kvbudget reads"
"""What a file of text lines, not a table nor JSON, is said to be."""

COMMENT_SAID = (
    "begins with '#' (a comment, or a heading), not a header of comma-separated columns, and "
    "no header follows it"
)
"""What is said of a first line :func:`comment_first_line` finds."""


def _names(line: str) -> bool:
    """Whether ``line`` is a header of two or more comma-separated column names."""
    fields = [f.strip() for f in line.split(",")]
    return len(fields) >= 2 and all(f.isidentifier() for f in fields)


def comment_first_line(head: bytes) -> str | None:
    """The first non-blank line of ``head`` where it is a comment (``#`` first, as in a log or
    a script's printed report: github.com/SvangenStudios/dgx-spark-agent-serving-benchmarks
    db751d5 ``results/raw/ab-256k-2026-08-02.log``, ``# Raw output — 256K prefill/decode
    overlap A/B, 2026-08-02``, whose comma made it read as a CSV header of two odd columns)
    and no header of column names is there: not a commented header (``numpy.savetxt``'s
    ``# a,b,c``), nor one on the first line that is no comment; else None."""
    lines = [line.strip() for line in head.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    if not lines or not lines[0].startswith("#") or _names(lines[0].lstrip("#")):
        return None
    below = next((line for line in lines if not line.startswith("#")), "")
    return None if _names(below) else lines[0]
