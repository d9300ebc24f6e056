"""Low-level file facts: header, last line, and row -> line numbers for error messages."""

from __future__ import annotations

import os
import re
import shlex
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import NO_REQUESTS, TraceError, UnknownFileError
from kvbudget.workloads.text_files import bom_of

_PEEK = 1 << 16
SERVEGEN_CHUNK = re.compile(r"chunk-(\d+)-(trace\.csv|dataset\.json)$")


def is_servegen_path(path: Path) -> bool:
    """A ServeGen chunk file or a directory of them (named here so that telling the format
    does not load the ServeGen reader)."""
    return path.is_dir() or SERVEGEN_CHUNK.search(path.name) is not None


def refuse_run_directory(path: Path) -> None:
    """A kvbudget run directory (``simulate``, ``compare`` or ``replay --out``) given as a
    trace was told it "holds no ServeGen chunk-N-trace.csv files", as if it were a ServeGen
    folder short of its files: refused naming what it is and what reads it. Its
    ``requests.parquet`` holds what the run generated (0 output tokens for a refused request,
    part of the answer for a dropped one), not what the requests asked for."""
    runs = [path] if (path / "requests.parquet").is_file() else sorted(
        p for p in path.iterdir() if (p / "requests.parquet").is_file())
    if not runs:
        return
    what = "a kvbudget run directory (simulate, compare or replay --out)" if runs[0] == path \
        else f"a folder of {len(runs)} kvbudget run directories (compare --out)"
    raise TraceError(path, f"is {what}, not a trace: a run's requests.parquet holds what the "
                     "run generated, not what the requests ask for; give the trace the run "
                     "read, or compare a simulation with the run: kvbudget validate --records "
                     f"{shlex.quote(str(runs[0]))} --out DIR")


@dataclass(frozen=True)
class FileFacts:
    """What the loaders need to know before reading a text file."""

    path: Path
    size: int
    first_line: str
    """The first non-empty line (a CSV header), decoded, without the line end or a BOM."""
    second_line: str | None
    """The next non-empty line, when it is within the first 64 KiB."""
    last_line: str
    """The last non-empty line, without its line end."""
    unterminated: bool
    """The file does not end with a newline: its last line may have been cut off."""
    single_line: bool
    """The file has only one non-empty line."""
    first_line_cut: bool = False
    """The first line runs on past the first 64 KiB: :attr:`first_line` is only its beginning
    (a load tool's result written as one JSON document on one line, as vLLM's is)."""


_COMPRESSED = ((b"\x1f\x8b", "gzip", "gunzip -k"), (b"PK\x03\x04", "zip", "unzip"),
               (b"\x28\xb5\x2f\xfd", "zstd", "zstd -d"), (b"\xfd7zXZ\x00", "xz", "unxz -k"))
"""Compressed files' first bytes: published traces come so (Azure's multimodal 2025 trace is
``AzureLMMInferenceTrace_multimodal.csv.gz``)."""


def _is_workbook(path: Path, head: bytes) -> bool:
    """An Excel workbook: a zip whose first entries are an Office package's
    (``[Content_Types].xml``, ``xl/``; .xlsx, as vLLM's multi-turn benchmark's --excel-output
    writes its per-request 'Raw data' sheet) or an old binary .xls (OLE2 compound file)."""
    if head.startswith(b"PK\x03\x04"):
        return path.suffix.lower() in (".xlsx", ".xlsm") or b"[Content_Types].xml" in head \
            or b"xl/" in head[:4096]
    return head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1")


ARCHIVE_LISTED = 10
"""The most members of an archive its refusal names (a tar.gz is read up to the next one only:
its list is not indexed, and reading all of it decompresses all of it)."""


def archive_listing(path: Path, kind: str) -> str:
    """What a zip or gzip-compressed tar archive holds, read without extracting (zip's central
    directory; a tar's headers up to :data:`ARCHIVE_LISTED` files), so that its refusal names
    the file or folder to give once unpacked: "it holds run/replay.json, run/requests.parquet
    (2 files)". A damaged or cut archive says that its list cannot be read."""
    names: list[str] = []
    more = False
    try:
        if kind == "zip":
            with zipfile.ZipFile(path) as z:
                files = [i.filename for i in z.infolist() if not i.is_dir()]
            names, more = files[:ARCHIVE_LISTED], len(files) > ARCHIVE_LISTED
            count = counted(len(files), "file")
        else:
            with tarfile.open(path, "r:gz") as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    if len(names) == ARCHIVE_LISTED:
                        more = True
                        break
                    names.append(member.name)
            count = ("more than " if more else "") + counted(len(names), "file")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, ValueError) as exc:
        return f"its list of files cannot be read ({type(exc).__name__}: damaged or cut short?)"
    if not names:
        return "it holds no file"
    listed = ", ".join(names) + (", ..." if more else "")
    top = {n.split("/", 1)[0] for n in names}
    if len(top) == 1 and all("/" in n for n in names):  # one folder: a run's, a tool's
        folder = top.pop()
        listed = ", ".join(n.split("/", 1)[1] for n in names) + (", ..." if more else "")
        return f"it holds the folder {folder}/ ({listed}; {count}): give {folder} once unpacked"
    return f"it holds {listed} ({count})"


def check_readable(path: Path) -> None:
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a directory, not a trace file")
    if not os.access(path, os.R_OK):
        raise TraceError(path, "cannot be read (permission denied)")


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8-sig") if raw.startswith(b"\xef\xbb\xbf") else raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnknownFileError(path, f"is not UTF-8 text (byte {exc.start}); is it a binary "
                               "file?", line=1) from None


def file_facts(path: Path) -> FileFacts:
    check_readable(path)
    size = path.stat().st_size
    if size == 0:
        raise TraceError(path, NO_REQUESTS)
    with path.open("rb") as fh:
        head = fh.read(_PEEK)
        fh.seek(max(0, size - _PEEK))
        tail = fh.read()
    if _is_workbook(path, head):
        raise TraceError(path, "is a spreadsheet workbook, not a text trace or recording: "
                         "save the sheet that lists one request a row as CSV and give that "
                         "(--column maps its column names)", line=1)
    if head.startswith(b"\x1f\x8b") and path.name.lower().endswith((".tar.gz", ".tgz")):
        raise TraceError(path, "is a gzip-compressed tar archive: unpack it first (tar -xzf "
                         f"{shlex.quote(path.name)}) and give the file or folder it holds; "
                         f"{archive_listing(path, 'tar')}", line=1)
    for magic, kind, undo in _COMPRESSED:
        if head.startswith(magic):
            listing = f"; {archive_listing(path, kind)}" if kind == "zip" else ""
            raise TraceError(path, f"is {kind}-compressed: decompress it first ({undo} "
                             f"{shlex.quote(path.name)}) and give the file or folder it "
                             f"writes{listing}", line=1)
    mark = bom_of(head[:4])
    if mark is not None and mark[1] != "utf-8":  # its NULs are no binary file's
        raise TraceError(path, f"is {mark[2]} text (its byte-order mark; Windows PowerShell 5's "
                         "> and Out-File write so): the trace formats read UTF-8; convert it "
                         f"(iconv -f {mark[1]} -t utf-8 {shlex.quote(path.name)} > "
                         f"{shlex.quote(path.stem + '-utf8' + path.suffix)}) and give that",
                         line=1)
    if b"\x00" in head[:4096]:
        raise UnknownFileError(path, "is a binary file, not a text trace", line=1)
    head_lines = [ln for ln in head.splitlines() if ln.strip()]
    if not head_lines:
        raise TraceError(path, "is empty (only blank lines)")
    # A first line cut by the peek is fine for the header check (it is the only use).
    first = _decode(head_lines[0], path).strip("\r\n")
    second = None
    if len(head_lines) > 1 and (len(head) < _PEEK or len(head_lines) > 2):
        second = head_lines[1].decode("utf-8", errors="replace").strip("\r\n")
    tail_lines = [ln for ln in tail.splitlines() if ln.strip()]
    last = tail_lines[-1].decode("utf-8", errors="replace").strip("\r\n") if tail_lines else ""
    single = len(head) == size and len(head_lines) == 1
    cut = size > len(head) and len(head_lines) == 1 and not head.endswith((b"\n", b"\r"))
    return FileFacts(
        path=path,
        size=size,
        first_line=first,
        second_line=second,
        last_line=last,
        unterminated=not tail.endswith((b"\n", b"\r")),
        single_line=single,
        first_line_cut=cut,
    )


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as fh:
        yield from enumerate(fh, start=1)


def line_of_row(path: Path, row: int, *, header_lines: int = 1) -> int:
    """The 1-based line of data row ``row`` (0-based), skipping the header and blank lines.

    Only used on the error path: it reads the file up to that row.
    """
    seen = -1
    last = header_lines
    for number, line in _lines(path):
        if number <= header_lines:
            continue
        last = number
        if line.strip():
            seen += 1
            if seen == row:
                return number
    return last


def line_of_text(path: Path, text: str, *, start_line: int = 2) -> int | None:
    """The first line (from ``start_line``) whose content is ``text``, if any."""
    target = text.strip("\r\n").encode("utf-8", errors="replace")
    for number, line in _lines(path):
        if number >= start_line and line.rstrip(b"\r\n") == target:
            return number
    return None


def count_data_lines(path: Path, *, header_lines: int = 1) -> int:
    return sum(1 for number, line in _lines(path) if number > header_lines and line.strip())


def last_line_offset(path: Path, facts: FileFacts) -> int:
    """Byte offset where the last non-empty line starts (to read the file without it)."""
    with path.open("rb") as fh:
        fh.seek(max(0, facts.size - _PEEK))
        start = fh.tell()
        tail = fh.read()
    end = len(tail.rstrip(b"\r\n \t"))
    cut = max(tail.rfind(b"\n", 0, end), tail.rfind(b"\r", 0, end))
    if cut < 0:
        return start if start > 0 else 0
    return start + cut + 1
