"""``validate --records --cost-model`` shows the file's 95 % intervals only where the file is
used as it was fitted (``cli/recorded.py`` ``_file_intervals``, ``perf/fitted_on.fitted_for``).

A file fitted on an H100, validated on an A100 recording with ``--set
cost_model_transfer=true`` (which carries none of its parameters to another GPU: the A100's
defaults ran) printed "fitted parameters of cost.json (95 % intervals from its fit):
layer_overhead_s 4.1e-05 9.017e-06 .. 0.0001855": the A100 default's value beside the H100
fit's interval, and a 95 % interval column "given the fitted parameters' uncertainty" around
a simulation that used no fitted parameter. Now a note says there are no intervals and why.
A file whose posterior names a parameter its model lacks stopped with an AttributeError
traceback; now one line names the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

RECORDING = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
             / "vllm-bench-0.32.0" / "concurrency4.json")
SETUP = ["--model", "Llama-3.1-8B"]


@pytest.fixture(scope="module")
def cost(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(RECORDING), *SETUP, "--gpu",
                                   "H100-80GB", "--max-evals", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["calibration"]["uncertainty"] is not None
    return out


def _validate(cost: Path, out: Path, *flags: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, ["validate", "--records", str(RECORDING), *SETUP,
                                   "--cost-model", str(cost), "--out", str(out), *flags])
    return res.exit_code, res.stdout, " ".join(res.stderr.split())


def test_a_file_carried_to_another_gpu_shows_no_intervals_of_its_fit(cost: Path,
                                                                     tmp_path: Path) -> None:
    code, stdout, stderr = _validate(cost, tmp_path / "own", "--gpu", "H100-80GB")
    assert code == 0, stderr
    assert "fitted parameters of cost.json" in stdout and "95 % interval" in stdout
    code, stdout, stderr = _validate(cost, tmp_path / "a100", "--gpu", "A100-80GB", "--set",
                                     "cost_model_transfer=true")
    assert code == 0, stderr
    assert ("note: no 95 % intervals: cost.json was fitted on another GPU, model, parallelism "
            "or KV cache than simulated here") in stderr
    assert "fitted parameters of" not in stdout and "95 % interval" not in stdout


def test_a_posterior_naming_no_parameter_of_the_model_is_one_line(cost: Path,
                                                                  tmp_path: Path) -> None:
    payload = json.loads(cost.read_text())
    payload["calibration"]["uncertainty"]["coordinates"] = ["nope"] * len(
        payload["calibration"]["uncertainty"]["coordinates"])
    damaged = tmp_path / "damaged.json"
    damaged.write_text(json.dumps(payload))
    code, _, stderr = _validate(damaged, tmp_path / "v", "--gpu", "H100-80GB")
    assert code == 2
    assert stderr.endswith(f"error: {damaged}: calibration.uncertainty.coordinates: 'nope' "
                           "is no parameter of its vllm-v1 model")
    assert "Traceback" not in stderr
