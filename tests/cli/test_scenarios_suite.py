"""The project's own regression suite (``scenarios/``) against its committed baselines.

This is the CI gate of kvbudget itself: a change that makes a policy's tail latency, goodput or
throughput worse on these scenarios fails here, naming the metric. After an intended change,
refresh the baselines with ``kvbudget regress scenarios --baseline scenarios/baselines --update``
and commit the reviewed diff (docs/regress.md).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.studies.regress import find_baseline, load_suite, read_baseline

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "scenarios"
BASELINES = SUITE / "baselines"
SHARED = REPO.parent / "shared"


def test_every_scenario_has_a_valid_baseline() -> None:
    suite = load_suite(SUITE)
    assert len(suite.scenarios) >= 6
    for scn in suite.scenarios:
        path = find_baseline(BASELINES, scn.name)
        assert path is not None, f"no baseline for {scn.name}"
        baseline = read_baseline(path)
        assert baseline.scenario == scn.name
        assert tuple(baseline.seeds) == scn.seeds
        assert any(m.startswith("tiers.interactive.ttft_s") for m in baseline.metrics)


def test_the_suite_passes_against_its_baselines(tmp_path: Path) -> None:
    if not (SHARED / "bench" / "conv_n2000_q6.jsonl").is_file():
        pytest.skip(f"shared data folder {SHARED} is missing")
    junit = tmp_path / "regress.xml"
    result = CliRunner().invoke(app, [
        "regress", str(SUITE), "--baseline", str(BASELINES), "--junit", str(junit),
        "--jobs", "2",
    ])
    assert result.exit_code == 0, result.output + result.stderr
    assert "regress ok: 0 regressed" in result.output
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "0"
    assert int(root.get("tests", "0")) >= 60


def test_an_unchanged_code_base_reproduces_its_baselines_exactly(tmp_path: Path) -> None:
    """docs/regress.md says so (the simulator is deterministic for a seed): the committed
    baselines are what ``--update`` writes now. A change that moves the results must refresh
    them (the module doc), or the gate's tolerance hides a drift it was never shown."""
    if not (SHARED / "bench" / "conv_n2000_q6.jsonl").is_file():
        pytest.skip(f"shared data folder {SHARED} is missing")
    fresh = tmp_path / "baselines"
    fresh.mkdir()
    for path in BASELINES.iterdir():
        (fresh / path.name).write_text(path.read_text())
    result = CliRunner().invoke(app, ["regress", str(SUITE), "--baseline", str(fresh),
                                      "--update", "--jobs", "2"])
    assert result.exit_code == 0, result.output + result.stderr
    for path in sorted(BASELINES.iterdir()):
        assert (fresh / path.name).read_text() == path.read_text(), path.name


def test_the_docs_regression_example_is_what_the_command_prints() -> None:
    """docs/regress.md's console block (every scenario's KV shrunk to 2,500 blocks): each row it
    shows is a row the command prints now."""
    if not (SHARED / "bench" / "conv_n2000_q6.jsonl").is_file():
        pytest.skip(f"shared data folder {SHARED} is missing")
    text = (REPO / "docs" / "regress.md").read_text()
    block = text.split("```console\n", 1)[1].split("```", 1)[0].splitlines()
    command = block[0].removeprefix("$ kvbudget ").split()
    result = CliRunner().invoke(app, [*command, "--jobs", "2"])
    assert result.exit_code == 1, result.output + result.stderr
    shown = [line for line in block[1:] if line != "..."]
    assert len(shown) >= 8
    for line in shown:
        assert line in result.output.splitlines(), line
