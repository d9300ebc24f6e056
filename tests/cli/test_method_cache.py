"""The compiled dataclass methods the command line keeps between runs (cli/method_cache.py):
a class made through the cache is the class Python makes, whether its methods were compiled
now or read back from the file, and a file that cannot be used is no error."""

from __future__ import annotations

import dataclasses
import importlib.util
import marshal
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.method_cache import MethodCache

# a module with ``from __future__ import annotations`` (as kvbudget's are), whose dataclasses
# have defaults, a default factory, a frozen and slotted variant and a field out of eq and repr
SOURCE = '''
from __future__ import annotations
from dataclasses import dataclass, field

@dataclass(frozen=True, slots=True)
class Spec:
    """A frozen, slotted config."""
    name: str
    num_blocks: int = 16
    share: float = 0.5
    tags: tuple[str, ...] = ()

@dataclass
class Row:
    rid: int
    values: list[int] = field(default_factory=list)
    note: str = field(default="", compare=False, repr=False)

@dataclass(frozen=True, eq=False)
class Handle:
    key: str
'''


def make_module(name: str, source: str = SOURCE) -> types.ModuleType:
    """``source`` run as module ``name`` (registered, as dataclasses looks its globals up)."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec", dont_inherit=True), module.__dict__)
    return module


@pytest.fixture
def modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the modules a test made; removed, and dataclasses' own exec back, after it.
    Bytecode may be written (whatever PYTHONDONTWRITEBYTECODE says where the tests run)."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    names: list[str] = []
    yield names
    MethodCache.uninstall()
    for name in names:
        sys.modules.pop(name, None)


def build(names: list[str], name: str, cache: MethodCache | None,
          source: str = SOURCE) -> types.ModuleType:
    """:func:`make_module` with ``cache`` installed meanwhile (Python's own exec if None);
    ``name`` noted in ``names`` for the fixture to remove."""
    if cache is not None:
        cache.install()
    try:
        names.append(name)
        return make_module(name, source)
    finally:
        MethodCache.uninstall()


def methods(module: types.ModuleType) -> dict[str, Any]:
    """What each generated method of the module's classes is: its code and annotations."""
    out: dict[str, Any] = {}
    for cls_name in ("Spec", "Row", "Handle"):
        cls = getattr(module, cls_name)
        for attr in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__",
                     "__delattr__"):
            fn = vars(cls).get(attr)
            code = getattr(fn, "__code__", None)
            if code is None and hasattr(fn, "__wrapped__"):  # __repr__ under recursive_repr
                code = fn.__wrapped__.__code__
            if code is not None:
                out[f"{cls_name}.{attr}"] = (code.co_code, code.co_consts, code.co_names,
                                             code.co_varnames, code.co_filename,
                                             getattr(fn, "__annotations__", None))
    return out


def behaviour(module: types.ModuleType) -> list[Any]:
    spec = module.Spec("a", tags=("x",))
    row = module.Row(3)
    out: list[Any] = [repr(spec), spec == module.Spec("a", tags=("x",)), hash(spec),
                      repr(row), row == module.Row(3, note="other"), module.Row(1).values,
                      module.Handle("k") == module.Handle("k"),
                      [f.name for f in dataclasses.fields(module.Spec)],
                      module.Spec.__doc__, module.Row.__doc__, module.Spec.__slots__]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.num_blocks = 3
    return out


def test_a_class_made_through_the_cache_is_the_class_python_makes(
        tmp_path: Path, modules: list[str]) -> None:
    plain = build(modules, "kvbudget._cache_test_plain", None)
    cache = MethodCache(tmp_path / "methods.marshal")
    compiled = build(modules, "kvbudget._cache_test_compiled", cache)
    assert cache.num_compiled > 0 and cache.num_hits == 0
    assert cache.save()

    again = MethodCache(tmp_path / "methods.marshal")
    assert len(again.codes) == cache.num_compiled
    kept = build(modules, "kvbudget._cache_test_kept", again)
    assert again.num_compiled == 0 and again.num_hits == cache.num_compiled
    assert not again.save()  # nothing new: the file is left as it is

    want = methods(plain)
    assert want and methods(compiled) == want and methods(kept) == want
    # annotations stay what dataclasses makes them, not strings: this test module's
    # ``from __future__ import annotations`` is not passed on to the compiled methods
    init_annotations = kept.Spec.__init__.__annotations__
    assert init_annotations == plain.Spec.__init__.__annotations__
    assert not all(isinstance(v, str) for v in init_annotations.values())
    assert behaviour(compiled) == behaviour(plain) == behaviour(kept)


def test_other_packages_classes_are_left_to_python(tmp_path: Path, modules: list[str]) -> None:
    cache = MethodCache(tmp_path / "methods.marshal")
    module = build(modules, "elsewhere._cache_test", cache)
    assert cache.num_compiled == 0 and cache.num_hits == 0 and not cache.codes
    assert behaviour(module)[0] == "Spec(name='a', num_blocks=16, share=0.5, tags=('x',))"


def _entries_spoiled(spoil: Any) -> bytes:
    """A file of this Python whose entries hold every source text of SOURCE's classes, each
    with ``spoil(code)`` in place of its marshalled code."""
    recorder = MethodCache(Path("/nonexistent/methods.marshal"))
    names: list[str] = []
    build(names, "kvbudget._cache_test_recorded", recorder)
    sys.modules.pop(names[0], None)
    return marshal.dumps((importlib.util.MAGIC_NUMBER,
                          {source: spoil(code) for source, code in recorder.codes.items()}))


@pytest.mark.parametrize("content", [b"", b"not marshal at all",
                                     marshal.dumps((b"\x00\x00\r\n", {})),
                                     marshal.dumps(["a", "list"])],
                         ids=["empty", "garbage", "another-python", "wrong-shape"])
def test_a_file_that_cannot_be_used_is_no_error(tmp_path: Path, modules: list[str],
                                                content: bytes) -> None:
    path = tmp_path / "methods.marshal"
    path.write_bytes(content)
    cache = MethodCache(path)
    assert cache.codes == {}
    module = build(modules, "kvbudget._cache_test_bad_file", cache)
    assert cache.num_compiled > 0 and behaviour(module)
    assert cache.save()
    magic, codes = marshal.loads(path.read_bytes())
    assert magic == importlib.util.MAGIC_NUMBER and len(codes) == cache.num_compiled


def test_save_writes_only_what_is_new_and_not_where_bytecode_is_not_written(
        tmp_path: Path, modules: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / "methods.marshal"
    cache = MethodCache(path)
    assert not cache.save()  # nothing compiled
    build(modules, "kvbudget._cache_test_save", cache)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert not cache.save() and not path.exists()
    assert cache.save(force=True) and path.exists()
    assert not list(path.parent.glob("*.tmp"))
    blocked = MethodCache(tmp_path / "a-file" / "methods.marshal")
    (tmp_path / "a-file").write_text("a file where the folder would be")
    build(modules, "kvbudget._cache_test_blocked", blocked)
    assert not blocked.save(force=True)  # could not be written: no error


def test_the_command_line_installs_the_cache_and_keeps_python_s_exec_elsewhere() -> None:
    # imported by a test, the app leaves dataclasses alone
    import kvbudget.cli.main as cli_main

    assert cli_main._METHODS is None
    assert "exec" not in vars(dataclasses)



def test_a_file_grown_too_large_starts_afresh_with_what_this_process_compiled(
        tmp_path: Path, modules: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbudget.cli import method_cache

    path = tmp_path / "methods.marshal"
    first = MethodCache(path)
    build(modules, "kvbudget._cache_test_old", first)
    assert first.save()
    monkeypatch.setattr(method_cache, "MAX_ENTRIES", first.num_compiled)
    # one class changed (a field added): its methods' sources are new
    edited = SOURCE.replace("    key: str\n", "    key: str\n    num_uses: int = 0\n")
    second = MethodCache(path)
    build(modules, "kvbudget._cache_test_edited", second, edited)
    assert second.num_hits > 0 and second.num_compiled > 0
    assert len(second.codes) > method_cache.MAX_ENTRIES
    assert second.save()
    kept = MethodCache(path).codes
    assert set(kept) == set(second.codes) - set(first.codes)


@pytest.mark.parametrize("spoil", [lambda code: code[:-7], lambda code: 42,
                                   lambda code: marshal.dumps("not code")],
                         ids=["cut-short", "not-bytes", "not-a-code-object"])
def test_an_entry_that_cannot_be_read_back_is_compiled_again(
        tmp_path: Path, modules: list[str], spoil: Any) -> None:
    path = tmp_path / "methods.marshal"
    path.write_bytes(_entries_spoiled(spoil))
    cache = MethodCache(path)
    assert cache.codes
    module = build(modules, "kvbudget._cache_test_spoiled", cache)
    assert cache.num_hits == 0 and cache.num_compiled == len(cache.codes)
    assert behaviour(module) == behaviour(build(modules, "kvbudget._cache_test_fine", None))
