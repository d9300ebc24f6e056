"""A study's result file (``capacity.json``, ``plan.json``, ``tune.json``, ``sweep.json``)
listed the GPU and model its runs took without saying that nobody gave them: the default
scenario's, as a run's ``summary.json`` keeps them (``defaulted``). Each file now keeps them
the same way; a GPU or model typed (even the default's name) is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import small_scenario_dict

runner = CliRunner()

STUDIES = {  # command -> (its flags, its result file)
    "sweep": (["--policies", "conservative,overcommit", "-r", "1", "--no-plot"], "sweep.json"),
    "tune": (["--param", "policy_params.overcommit_ratio=0.3:0.9", "--constraint",
              "overall_slo_attainment>=0.1", "-r", "1", "--grid-points", "2", "--refine-evals",
              "0", "--validate", "0"], "tune.json"),
    "capacity": (["-r", "1", "--rel-tol", "0.5", "--no-plot"], "capacity.json"),
    "plan": (["--gpus", "A100-80GB,H100-80GB", "--replicas", "1", "-r", "1", "--slo",
              "overall_slo_attainment>=0.1"], "plan.json"),
}
"""Each study at its smallest: what is checked is the file's keys, not its figures."""


@pytest.mark.parametrize("study", sorted(STUDIES))
@pytest.mark.parametrize("typed", [False, True], ids=["left-to-default", "typed"])
def test_a_study_file_says_the_gpu_and_model_left_to_the_default(
        tmp_path: Path, study: str, typed: bool) -> None:
    scn = tmp_path / "s.toml"  # names neither a GPU nor a model
    scn.write_text(tomli_w.dumps(small_scenario_dict(n=40, rate=4.0)))
    flags, name = STUDIES[study]
    named = ((["--gpu", "H100-80GB"] if study != "plan" else [])  # plan's are its --gpus
             + ["--model", "Llama-3.1-8B"] if typed else [])
    out = tmp_path / study
    res = runner.invoke(app, [study, "--scenario", str(scn), "--out", str(out), "-j", "1",
                              *named, *flags])
    assert res.exit_code == 0, res.output
    said = json.loads((out / name).read_text())
    if study == "plan":  # plan varies the GPU (--gpus): only the model is the scenario's
        assert said["model"] == "Llama-3.1-8B" and said["gpus_given"] is True
        assert said.get("defaulted") == (None if typed else ["model"])
        return
    gpu, model = ((said["scenario"]["gpu"], said["scenario"]["model"]) if study == "sweep"
                  else (said["gpu"], said["model"]))
    assert (gpu, model) == ("H100-80GB", "Llama-3.1-8B")
    assert said.get("defaulted") == (None if typed else ["gpu", "model"])


def test_a_study_that_varies_the_gpu_does_not_say_it_assumed_one(tmp_path: Path) -> None:
    scn = tmp_path / "s.toml"
    scn.write_text(tomli_w.dumps(small_scenario_dict(n=40, rate=4.0)))
    out = tmp_path / "sweep"
    res = runner.invoke(app, ["sweep", "--scenario", str(scn), "--out", str(out), "-j", "1",
                              "--grid", "gpu=A100-80GB,H100-80GB", "-r", "1", "--no-plot"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "sweep.json").read_text())["defaulted"] == ["model"]
