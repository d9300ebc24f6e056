"""What ``validate --records`` assumed is kept in the simulated run it writes (``sim/``).

``kvbudget validate --records FILE`` prints its ``settings:`` line with each ASSUMED part (a
GPU the recording does not name, vLLM's defaults for its knobs, one server...), then writes
the simulated run to ``OUT/sim``. ``kvbudget report OUT/sim`` showed that run's GPU, model
and KV capacity, and under "What the inputs did not say and the runs assumed" only the
workload's tier: a GuideLLM 0.5.0.dev0 report of Qwen3-30B-A3B served on Intel GPUs
(github.com/danielkorat/guidellm-bench 8f24116d, ``guidellm_results/20260302_1917/``; no
licence, so a fixture made here stands in) read as simulated on an H100, said nowhere in the
report. The sim's summary now keeps the settings line where it assumed anything, and the
report shows it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app

RECORDING = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "recordings"
    / "vllm-bench-0.32.0"
    / "rate8.json"
)


def _validate(tmp_path: Path, *flags: str) -> Path:
    out = tmp_path / "v"
    result = CliRunner().invoke(
        app,
        ["validate", "--records", str(RECORDING), "--model", "Qwen3-8B", *flags, "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    return out


def test_the_sim_run_keeps_what_validate_assumed_and_report_shows_it(tmp_path: Path) -> None:
    out = _validate(tmp_path)
    summary = json.loads((out / "sim" / "summary.json").read_text())
    settings = [a for a in summary["assumed"] if a.startswith("settings: ")]
    assert len(settings) == 1
    assert "GPU H100-SXM (ASSUMED: the recording does not name its GPU; pass --gpu)" in settings[0]
    report = tmp_path / "r"
    result = CliRunner().invoke(app, ["report", str(out / "sim"), "--out", str(report)])
    assert result.exit_code == 0, result.output
    said = (
        (report / "report.html")
        .read_text()
        .split("What the inputs did not say and the runs assumed:")[1]
        .split("</ul>")[0]
    )
    assert "GPU H100-SXM (ASSUMED: the recording does not name its GPU" in said


def test_a_gpu_given_is_kept_as_given(tmp_path: Path) -> None:
    out = _validate(tmp_path, "--gpu", "H100")
    summary = json.loads((out / "sim" / "summary.json").read_text())
    settings = next(a for a in summary["assumed"] if a.startswith("settings: "))
    assert "GPU H100-SXM (--gpu)" in settings and "its GPU; pass --gpu" not in settings
