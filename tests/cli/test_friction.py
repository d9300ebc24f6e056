"""A newcomer's friction list (issue 23), one test per item."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import REPO

runner = CliRunner()
WIDTH = 100


def run(*args: Any, env: dict[str, str] | None = None) -> Any:
    return runner.invoke(app, [str(a) for a in args], env=env)


def widest(text: str) -> int:
    return max((len(line) for line in text.splitlines() if not line.startswith("wrote ")),
               default=0)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_says_what_it_is_doing(tmp_path: Path) -> None:
    out = subprocess.run(["make", "-n", "-B", "demo", f"VENV={tmp_path / 'venv'}"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    for needle in ("kvbudget: creating the virtual environment", "kvbudget: installing",
                   "kvbudget: simulating the default scenario"):
        assert needle in out


def _commands(markdown: str, heading: str) -> list[list[str]]:
    section = markdown.split(heading, 1)[1]
    block = section.split("```", 2)[1]
    text = block.replace("\\\n", " ")
    return [shlex.split(line)[1:] for line in text.splitlines()
            if line.strip().startswith("kvbudget ")]


@pytest.mark.slow
def test_the_first_tuning_example_of_the_docs_succeeds(tmp_path: Path) -> None:
    commands = _commands((REPO / "docs" / "tuning.md").read_text(), "## `kvbudget tune`")
    assert [c[0] for c in commands] == ["tune", "simulate"]
    for args in commands:
        args = [a.replace("runs/tuned", str(tmp_path / "tuned")) for a in args]
        res = run(*args)
        assert res.exit_code == 0, (args, res.stdout, res.stderr)


def test_compare_and_sweep_tables_fit_100_columns(tmp_path: Path) -> None:
    res = run("compare", "--set", "workload.duration_s=10")
    assert res.exit_code == 0, res.stderr
    assert widest(res.stdout) <= WIDTH, res.stdout
    wide = run("compare", "--set", "workload.duration_s=10", "--wide")
    assert "TTFT p50" in wide.stdout and "E2E p99" in wide.stdout
    res = run("sweep", "--out", tmp_path / "sw", "--set", "workload.duration_s=10",
              "--policies", "conservative,overcommit",
              "--grid", "policy_params.overcommit_ratio=0.5,0.9", "--rate-scale", "1,1.5",
              "-r", "1", "--no-plot", "-j", "1")
    assert res.exit_code == 0, res.stderr
    assert widest(res.stdout) <= WIDTH, res.stdout


def test_trace_tables_fit_100_columns(tmp_path: Path) -> None:
    res = run("trace", "fetch", "--list")
    assert res.exit_code == 0 and widest(res.stdout) <= WIDTH, res.stdout
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,tier\n" + "".join(
        f"{i},{100 + i},{10 + i},{'interactive' if i % 3 else 'batch'}\n" for i in range(30)))
    res = run("trace", "stats", path)
    assert res.exit_code == 0, res.stderr
    assert "tier batch" in res.stdout and widest(res.stdout) <= WIDTH, res.stdout


def test_capacity_help_shows_every_option_whole_at_80_columns() -> None:
    res = run("capacity", "--help", env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert res.exit_code == 0
    assert "…" not in res.stdout
    for name in ("--constraint", "--curve-points", "--max-num-batched-tokens",
                 "--servegen-arrivals", "tiers.interactive.ttft_s.p99<=2.0",
                 "interactive_slo_attainment"):
        assert name in res.stdout, name


def test_profile_help_names_the_extra() -> None:
    res = run("profile", "--help")
    assert res.exit_code == 0
    assert "kvbudget[profile]" in " ".join(res.stdout.split())


def test_tune_and_capacity_progress_totals_bound_their_runs(tmp_path: Path) -> None:
    from kvbudget.simulator.scenario import scenario_from_dict
    from kvbudget.studies.capacity import CapacitySpec, capacity
    from kvbudget.studies.executors import LocalExecutor
    from kvbudget.studies.tune import Param, TuneSpec, tune
    from tests.conftest import small_scenario_dict

    scn = scenario_from_dict(small_scenario_dict(40, 4.0), tmp_path)
    spec = TuneSpec(scn, (Param.parse("policy_params.overcommit_ratio=0.3:0.9"),),
                    replications=2, grid_points=3, refine_evals=2, validate=2)
    counted: list[int] = []
    tune(spec, LocalExecutor(max_workers=1), progress=counted.append)
    assert 0 < sum(counted) <= spec.max_runs() == (3 + 2) * 2 + 2
    cspec = CapacitySpec(scn, ("conservative",), replications=1, rel_tol=0.2)
    counted = []
    capacity(cspec, LocalExecutor(max_workers=1), progress=counted.append)
    assert 0.5 * cspec.expected_runs() <= sum(counted) <= 2 * cspec.expected_runs()


def test_report_progress_has_a_total(tmp_path: Path) -> None:
    from kvbudget.analysis.report import build_report

    out = tmp_path / "run"
    assert run("simulate", "--set", "workload.duration_s=10", "--out", out).exit_code == 0
    seen: list[tuple[int, int]] = []
    build_report([out], tmp_path / "rep", progress=lambda d, t: seen.append((d, t)),
                 num_resamples=50)
    totals = {t for _, t in seen}
    assert len(totals) == 1 and seen[-1][0] == seen[-1][1] > 1


def test_the_notebook_extra_and_the_test_install_provide_jinja2() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = meta["project"]["optional-dependencies"]
    for extra in ("dev", "notebooks"):
        assert any(re.match(r"jinja2\b", d) for d in extras[extra]), extra
    notebook = json.loads((REPO / "notebooks" / "03_sim_vs_real.ipynb").read_text())
    source = "".join("".join(c["source"]) for c in notebook["cells"])
    assert ".style" in source  # the reason: pandas Styler needs jinja2


def test_docs_scenarios_describe_every_table_and_their_set_examples_work() -> None:
    from kvbudget.simulator.scenario import ScenarioSpec, make_scenario

    doc = (REPO / "docs" / "scenarios.md").read_text()
    for f in dataclasses.fields(ScenarioSpec):
        assert f"`{f.name}`" in doc or f"`[{f.name}]`" in doc or f"`[[{f.name}]]`" in doc, f.name
    examples = [e for e in re.findall(r"`(--set [^`]+)`", doc.replace("\n", " "))
                if "key=value" not in e]
    assert len(examples) >= 4
    for example in examples:
        items = shlex.split(example)
        overrides = [items[i + 1] for i, a in enumerate(items) if a == "--set"]
        make_scenario(None, overrides)  # raises on a bad example


def test_tier_map_without_tier_column_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    res = run("trace", "stats", path, "--tier-map", "x=batch")
    assert res.exit_code == 2
    assert "tier_column" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_pyproject_license_is_an_spdx_expression() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(meta["project"]["license"], str)
    (setuptools,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    assert int(setuptools.split(">=")[1].split(".")[0]) >= 77  # PEP 639 license strings


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_install_prints_no_setuptools_banner(tmp_path: Path) -> None:
    # issue 36: `make demo` printed two setuptools warnings: model_configs (package data that was
    # not a listed package) and the editable-install notice, which the Makefile filters alone
    import zipfile

    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                          "--no-build-isolation", "-w", str(tmp_path), str(REPO)],
                         cwd=tmp_path, capture_output=True, text=True, check=False)
    if res.returncode != 0 and "No module named" in res.stderr:
        pytest.skip("pip or setuptools unavailable here")
    assert res.returncode == 0, res.stderr
    assert "Warning" not in res.stderr and "absent from the `packages`" not in res.stderr, res.stderr
    wheel = next(tmp_path.glob("kvbudget-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "kvbudget/perf/model_configs/Llama-2-7B.json" in names
    out = subprocess.run(["make", "-n", "-B", "install", f"VENV={tmp_path / 'venv'}"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    install = [ln for ln in out.splitlines() if "pip install -q -e ." in ln]
    assert install and all(
        "PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel" in ln
        for ln in install), out
