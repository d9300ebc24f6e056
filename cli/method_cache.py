"""Dataclass methods compiled once and kept between runs, as ``.pyc`` files keep modules.

Python writes the methods of a dataclass (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
a frozen class's ``__setattr__`` and ``__delattr__``) as source text and compiles it when the
class is made, each time the module is imported: ``.pyc`` files keep the module's own code, not
these. A ``kvbudget`` command makes some 50 dataclasses before it starts its work, and their
compilation was ~19 % of the CPU of ``kvbudget simulate`` on a 5-request trace (160 M of 827 M
instructions counted by valgrind; ~30 ms of user time).

:class:`MethodCache` keeps the compiled code of each such source text in one file under
``kvbudget/__pycache__/``, named with the interpreter's cache tag and checked against its
bytecode magic number, so a file written by another Python is never used. The command line
installs it as the ``exec`` that :mod:`dataclasses` calls (its module global, which shadows the
builtin for that module alone): a source text seen before is run from its kept code object,
one not seen is compiled as :mod:`dataclasses` itself would compile it (``compile(source,
"<string>", "exec")`` with no ``__future__`` flags: those of this module are not inherited), so
every class, method and annotation is what it would be without the cache. It is the command
line's one start-up trick; a notebook or a test that imports kvbudget keeps Python's own path.

The file is written where ``.pyc`` files are: by ``make bytecode`` (``python -m
kvbudget.cli.method_cache``, which imports every kvbudget module), and at the end of a command
that compiled a source text not in the file, unless ``sys.dont_write_bytecode``
(``PYTHONDONTWRITEBYTECODE``) is set. A file that cannot be read or written is no error: the
methods are then compiled as usual.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import importlib.util
import marshal
import os
import pkgutil
import sys
from pathlib import Path
from types import CodeType
from typing import Any

import kvbudget

MAX_ENTRIES = 4_000
"""A file that has grown past this (old versions of edited classes add up) starts afresh."""


def default_path() -> Path:
    """``__pycache__/dataclass_methods.<cache tag>.marshal`` in the folder of the kvbudget
    package's ``__init__.py`` (``kvbudget/`` in a checkout, as installed)."""
    package = Path(str(kvbudget.__file__)).parent
    tag = sys.implementation.cache_tag or "python"
    return package / "__pycache__" / f"dataclass_methods.{tag}.marshal"


class MethodCache:
    """Marshalled code objects by source text (of the methods of kvbudget's dataclasses), read
    from and written to ``path``.

    ``exec(source, globals, locals)`` runs ``source`` as the builtin would; :meth:`install`
    makes it the ``exec`` of :mod:`dataclasses`; :meth:`save` writes the file when something
    was compiled that it did not hold. ``num_hits`` and ``num_compiled`` count the calls."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else default_path()
        # each code object marshalled on its own: a process unmarshals only those it runs
        self.codes: dict[str, bytes] = self._read()
        self.num_hits = 0
        self.num_compiled = 0

    def _read(self) -> dict[str, bytes]:
        try:
            with self.path.open("rb") as fh:
                magic, codes = marshal.load(fh)
        except (OSError, EOFError, ValueError, TypeError):
            return {}
        if magic != importlib.util.MAGIC_NUMBER or not isinstance(codes, dict):
            return {}
        return codes

    def exec(self, source: Any, globals: Any = None, locals: Any = None) -> None:
        """``builtins.exec(source, globals, locals)``; the compiled code of a string ``source``
        run in a kvbudget module's globals (those of the module whose class is being made) is
        taken from the cache or added to it. Other packages' classes are left to Python."""
        if isinstance(source, str) and isinstance(globals, dict) \
                and str(globals.get("__name__", "")).startswith("kvbudget."):
            code = self._kept(source)
            if code is None:
                # what ``exec(source)`` in dataclasses.py compiles: that module has no
                # ``__future__`` imports, and this one's are not passed on (dont_inherit)
                code = compile(source, "<string>", "exec", dont_inherit=True)
                self.codes[source] = marshal.dumps(code)
                self.num_compiled += 1
            else:
                self.num_hits += 1
            source = code
        builtins.exec(source, globals, locals)

    def _kept(self, source: str) -> CodeType | None:
        """The kept code of ``source``; None if there is none or it cannot be read back."""
        kept = self.codes.get(source)
        if kept is None:
            return None
        try:
            code = marshal.loads(kept)
        except (EOFError, ValueError, TypeError):
            return None
        return code if isinstance(code, CodeType) else None

    def install(self) -> None:
        """Make :meth:`exec` the ``exec`` that :mod:`dataclasses` calls."""
        dataclasses.exec = self.exec  # type: ignore[attr-defined]

    @staticmethod
    def uninstall() -> None:
        """Give :mod:`dataclasses` the builtin ``exec`` back."""
        vars(dataclasses).pop("exec", None)

    def save(self, *, force: bool = False) -> bool:
        """Write the file if this process compiled something it did not hold (always with
        ``force``), unless ``sys.dont_write_bytecode`` is set and not ``force``; whether it was
        written. The write goes to a temporary file renamed over the old one, so a process
        reading the file at the same time sees the old or the new one, whole."""
        if not force and (self.num_compiled == 0 or sys.dont_write_bytecode):
            return False
        codes = self.codes
        if len(codes) > MAX_ENTRIES and self.num_compiled:
            # those compiled now come last (dicts keep their insertion order)
            codes = dict(list(codes.items())[-self.num_compiled:])
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with temporary.open("wb") as fh:
                marshal.dump((importlib.util.MAGIC_NUMBER, codes), fh)
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink()
            return False
        return True


def _import_every_module() -> int:
    """Import every module of the kvbudget package (those whose optional dependencies are
    missing are left out): the number imported."""
    num_imported = 0
    for info in pkgutil.walk_packages(kvbudget.__path__, "kvbudget."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:
            continue
        num_imported += 1
    return num_imported


def main() -> None:
    """``python -m kvbudget.cli.method_cache``: write the file afresh with the methods of
    every dataclass the kvbudget package makes when its modules are imported."""
    cache = MethodCache()
    cache.codes = {}
    cache.install()
    num_modules = _import_every_module()
    written = cache.save(force=True)
    where = cache.path if written else f"{cache.path} (could not be written)"
    print(f"kvbudget: {len(cache.codes)} compiled dataclass methods of {num_modules} modules "
          f"in {where}")


if __name__ == "__main__":
    main()
