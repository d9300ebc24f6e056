"""A notebook says what it assumed where its input is silent, as the command line does."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.notebooks.test_notebooks import INPUT_VARIABLES, REPO, SHARED, execute


@pytest.mark.slow
def test_sim_vs_real_says_the_gpu_and_model_it_assumed(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """03_sim_vs_real rebuilt a measured run's simulation on ``summary.get("gpu",
    "H100-80GB")`` and ``summary.get("model", "Llama-3.1-8B")``: a replay's summary.json names
    neither (it does not know the server's GPU), so every real replay was simulated on an H100
    with Llama-3.1-8B without a word. The cell says what it assumed."""
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder {SHARED} is missing")
    run_dir = tmp_path / "measured"
    res = CliRunner().invoke(app, ["simulate", "--set", "workload.duration_s=20", "--out",
                                   str(run_dir)])
    assert res.exit_code == 0, res.stderr
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text())
    for key in ("gpu", "model", "block_size"):  # as a replay's: the server did not say
        del summary[key]
    summary_path.write_text(json.dumps(summary))
    for name in INPUT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KVBUDGET_SHARED", str(SHARED))
    monkeypatch.setenv("KVBUDGET_MEASURED_RUN", str(run_dir))
    path = REPO / "notebooks" / "03_sim_vs_real.ipynb"
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    execute(nb, path.parent)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.outputs)
    assert ("assumed (the measured run's summary.json does not say): GPU H100-80GB, model "
            "Llama-3.1-8B, block_size 16") in printed, printed
    # no cost model given: the presets' default step model, as the introduction says
    assert "requests with the vllm-v1 cost model" in printed, printed
