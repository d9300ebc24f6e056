"""The installed package: one name, ``kvbudget``, with a front door (``import kvbudget as kb``)
whose table of contents is its ``__all__``; a wheel built from the checkout works in a clean
virtual environment where the old top-level names do not exist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import kvbudget

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def toc_names() -> list[str]:
    """The names the docstring's sections list (``:func:`name```, ``:class:``, ``:data:``, ``:mod:``)."""
    doc = kvbudget.__doc__ or ""
    return re.findall(r":(?:func|class|data|mod):`~?([\w.]+)`", doc)


def test_the_table_of_contents_is_all_and_lists_each_name_once() -> None:
    names = toc_names()
    assert len(names) == len(set(names)), "a name is listed twice"
    assert sorted(names) == sorted(kvbudget.__all__)


@pytest.mark.parametrize("name", kvbudget.__all__)
def test_every_public_name_resolves_and_has_a_docstring(name: str) -> None:
    value = getattr(kvbudget, name)
    assert value is not None
    if callable(value) or isinstance(value, type(kvbudget)):
        assert (getattr(value, "__doc__", None) or "").strip(), f"kvbudget.{name} has no docstring"


def test_the_version_is_the_installed_distributions() -> None:
    from importlib.metadata import version

    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    assert kvbudget.__version__ == version("kvbudget")
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout == f"kvbudget {version('kvbudget')}\n"


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kvbudget.nope  # noqa: B018


def test_importing_the_front_door_loads_no_heavy_module() -> None:
    code = ("import sys, kvbudget; heavy = {'simpy', 'pandas', 'matplotlib', 'scipy', 'pyarrow', "
            "'httpx', 'typer'} & set(sys.modules); print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_import_only_kvbudget_and_touch_no_path(path: Path) -> None:
    nb = json.loads(path.read_text())
    source = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "sys.path" not in source and "find_repo" not in source
    project = {"policies", "workloads", "simulator", "backends", "cli", "results", "perf",
               "analysis", "studies", "live"}
    for line in source.splitlines():
        m = re.match(r"\s*(?:from|import)\s+([\w.]+)", line)
        if m:
            top = m.group(1).split(".")[0]
            assert top not in project, f"{path.name}: {line.strip()}"
            if top == "kvbudget":
                assert m.group(1) == "kvbudget", f"{path.name} reaches past the front door: {line}"


@pytest.mark.slow
def test_a_wheel_installs_into_a_clean_environment_and_works(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(wheels), str(REPO)], check=True, capture_output=True)
    (wheel,) = wheels.glob("kvbudget-*.whl")
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the wheel itself, unpacked as pip would; its dependencies from this environment's
    # site-packages as a plain path entry (its .pth files, the editable checkout's among them,
    # are not read from there)
    import zipfile
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
        names = zf.namelist()
    assert all(n.split("/")[0] == "kvbudget" or ".dist-info/" in n for n in names), (
        sorted({n.split('/')[0] for n in names}))
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and p.is_dir())
    (Path(site) / "zz_deps.pth").write_text(str(deps) + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=600)

    found = run("-c", "import kvbudget, sys; print(kvbudget.__file__)")
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip().startswith(site)
    for old in ("simulator", "cli", "policies", "workloads", "backends"):
        assert run("-c", f"import {old}").returncode != 0, f"`import {old}` works"
    told = run("-m", "kvbudget.cli.main", "--version")  # the wheel's own version
    assert told.returncode == 0 and told.stdout == "kvbudget 0.1.0\n", told
    helped = run("-m", "kvbudget.cli.main", "--help")
    assert helped.returncode == 0 and "simulate" in helped.stdout, helped.stderr
    trace = work / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n")
    simulated = run("-m", "kvbudget.cli.main", "simulate", "--trace", str(trace), "--json")
    assert simulated.returncode == 0, simulated.stderr
    assert json.loads(simulated.stdout)["overall"]["completed"] == 2
    nb = REPO / "notebooks" / "02_kv_timeline.ipynb"
    if SHARED.is_dir():
        code = ("import nbformat, sys; from nbclient import NotebookClient; "
                f"nb = nbformat.read({str(nb)!r}, as_version=4); "
                "NotebookClient(nb, timeout=600, kernel_name='python3', "
                "resources={'metadata': {'path': '.'}}).execute()")
        env["KVBUDGET_SHARED"] = str(SHARED)
        ran = run("-c", code)
        assert ran.returncode == 0, ran.stderr[-2000:]


@pytest.mark.slow
def test_the_api_reference_builds_without_a_warning(tmp_path: Path) -> None:
    """What ``make api-docs`` runs: pdoc over every package, warnings as errors."""
    pytest.importorskip("pdoc")
    make = (REPO / "Makefile").read_text()
    modules = ["kvbudget"] + [f"kvbudget.{p}" for p in re.search(
        r"API_MODULES := kvbudget \$\(addprefix kvbudget\.,([\w ]+)\)", make).group(1).split()]  # type: ignore[union-attr]
    built = subprocess.run([sys.executable, "-W", "error", "-m", "pdoc", "-d", "restructuredtext",
                            "--no-show-source", "-o", str(tmp_path), *modules], cwd=REPO,
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "kvbudget.html").is_file()
    assert (tmp_path / "kvbudget" / "simulator" / "engine.html").is_file()
