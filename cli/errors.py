"""One clear line and a non-zero exit for bad input, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from kvbudget.workloads.errors import TraceError, UnknownFileError


class CliError(Exception):
    """A user-facing error: the message names the file, line or field; ``code`` is the exit."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print ``error: message`` to stderr and return the Exit to raise."""
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the library's validation errors into one line on stderr and exit code 2."""
    try:
        yield
    except CliError as exc:
        raise fail(str(exc), exc.code) from None
    except TraceError as exc:
        raise fail(trace_refusal(exc), 2) from None
    except (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError,
            NotADirectoryError, PermissionError, KeyError) as exc:
        msg = str(exc)
        if isinstance(exc, KeyError):
            msg = f"missing key {msg}"
        elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            msg = f"{_short(str(exc.filename))}: {exc.strerror}"  # not "[Errno 17] ..."
        raise fail(msg, 2) from None
    except RecursionError:  # a reader without its own guard met a document nested too deep
        raise fail("an input file is nested too deeply to read (over a thousand levels of "
                   "lists or tables)", 2) from None
    except OSError as exc:  # a path no file system takes (too long, a device, read-only)
        if isinstance(exc, ConnectionError):
            raise
        if exc.filename is not None and exc.strerror:
            raise fail(f"{_short(str(exc.filename))}: {exc.strerror}", 2) from None
        raise fail(str(exc), 2) from None


def trace_refusal(exc: TraceError) -> str:
    """The trace loader's one line; for a file it cannot place that is a load tool's (a vllm
    bench serve result, a GuideLLM report, AIPerf's summary, llama-benchy's table ...), which
    tool's file it is and what to pass it to, as the recordings' readers name it.

    Those readers (~235 ms to import; every command imports this module) are imported here,
    on the refusal path only: a start-up exception listed with its reason in
    tests/test_function_imports.py's ``SLOW_MODULES``, so no start of a command pays for
    them."""
    if isinstance(exc, UnknownFileError) and exc.path is not None:
        from kvbudget.results.recording_named import recording_named  # SLOW_MODULES

        named = recording_named(exc.path)
        if named:
            return named
    return str(exc)


def _nearest_existing(path: Path) -> Path | None:
    for parent in path.parents:
        if parent.exists():
            return parent
    return None


def check_out_dir(path: Path | None, flag: str = "--out") -> None:
    """Before any work: ``path`` can be (or become) a directory. A file there, or a file
    where one of its folders would go, is one line naming the flag (the work would otherwise
    be done and then lost at the write)."""
    if path is None:
        return
    try:
        if path.exists() and not path.is_dir():
            raise CliError(f"{flag}: {path} is a file, not a directory")
        parent = _nearest_existing(path) if not path.exists() else None
    except OSError as exc:
        raise CliError(f"{flag}: {_short(str(path))}: {exc.strerror or exc}") from None
    if parent is not None and not parent.is_dir():
        raise CliError(f"{flag}: {parent} is a file, not a directory")


def check_out_file(path: Path | None, flag: str = "--out") -> None:
    """Before any work: ``path`` can be written as a file (its folders are created): not a
    directory, not under a file."""
    if path is None:
        return
    if str(path) in ("", "."):
        raise CliError(f"{flag}: give a file name")
    try:
        if path.is_dir():
            raise CliError(f"{flag}: {path} is a directory; give a file name")
        parent = _nearest_existing(path)
    except OSError as exc:
        raise CliError(f"{flag}: {_short(str(path))}: {exc.strerror or exc}") from None
    if parent is not None and not parent.is_dir():
        raise CliError(f"{flag}: {parent} is a file, not a directory")


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
