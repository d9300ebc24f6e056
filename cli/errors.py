"""One clear line and a non-zero exit for bad input, never a traceback."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import typer


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
    except (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError,
            NotADirectoryError, PermissionError, KeyError) as exc:
        msg = str(exc)
        if isinstance(exc, KeyError):
            msg = f"missing key {msg}"
        raise fail(msg, 2) from None
    except OSError as exc:  # a path no file system takes (too long, a device, read-only)
        if isinstance(exc, ConnectionError):
            raise
        raise fail(str(exc), 2) from None
