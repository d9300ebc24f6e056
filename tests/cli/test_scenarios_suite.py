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
