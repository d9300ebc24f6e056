"""A study's setting lines name the cost-model file its runs take their step times from
(``studies/setting.py`` ``cost_model_said``).

``kvbudget capacity --cost-model cost.json`` (and ``sweep``, ``tune``, ``plan``) printed
"model Llama-3.1-8B on H100-SXM; workload synthetic: 132 requests" and its table, the same
lines as without the file, though every rate it found came from the calibrated step times and
their 14.6 ms front-end time per request; ``simulate`` and ``compare`` said it, the studies
did not. Now a ``step times:`` line names the file, its model, what it was fitted on and its
front-end time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.said import setting_lines
from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import make_scenario
from kvbudget.studies.setting import cost_model_said, study_setting
from tests.unit.perf.test_fitted_on import fitted_file

SCENARIO = Path(__file__).resolve().parents[3] / "scenarios" / "synth_conservative.toml"
SMALL = ("workload.duration_s=5",)


def test_the_setting_names_the_file_and_what_it_was_fitted_on(tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    lines = study_setting(make_scenario(SCENARIO, SMALL, cost_model=path))
    step = [line for line in lines if line.startswith("step times:")]
    assert step == [f"step times: the cost-model file {path}: its vllm-v1 model (defaults), "
                    "fitted on H100-SXM / Llama-3.1-8B TP1 EP1, KV cache auto; a fixed "
                    "front-end time of 4.00 ms per request (its frontend_overhead_s) added to "
                    "every first token and finish"]
    assert not any(line.startswith("step times:")
                   for line in study_setting(make_scenario(SCENARIO, SMALL)))


def test_a_sweep_says_it(tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    res = CliRunner().invoke(app, ["sweep", "--scenario", str(SCENARIO), "--set", SMALL[0],
                                   "--cost-model", str(path), "--grid",
                                   "policy_params.batch_on_overload=wait", "-r", "1", "-j", "1",
                                   "--out", str(tmp_path / "sweep")])
    assert res.exit_code == 0, res.output
    assert f"step times: the cost-model file {path}" in " ".join(res.stderr.split())


def test_a_file_without_a_front_end_time_says_so(tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json")
    payload = path.read_text().replace('"frontend_overhead_s": 0.004', '"frontend_overhead_s": 0.0')
    path.write_text(payload)
    lines = study_setting(make_scenario(SCENARIO, SMALL, cost_model=path))
    assert any("no front-end time (its frontend_overhead_s is 0, as a fit of engine-side "
               "times writes it): TTFT and E2E are the engine's alone, without an API server's "
               "(--set frontend=vllm-api-server adds vLLM's)" in line for line in lines)
    lines = study_setting(make_scenario(SCENARIO, (*SMALL, "frontend=vllm-api-server"),
                                        cost_model=path))
    assert not any("no front-end time" in line for line in lines)


def test_a_study_and_a_run_say_the_file_in_one_sentence_from_one_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``cost_model_said`` near-copied ``simulate``'s ``step times:`` line in other words ("its
    frontend_overhead_s is 0)" where a run said "(the file's frontend_overhead_s is 0, as a fit
    of engine-side times writes it)") and read the file three times; both lines are
    :func:`~kvbudget.results.said.cost_said`'s now, and the file is read once."""
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    scn = make_scenario(SCENARIO, SMALL, cost_model=path)
    reads: list[Path] = []
    text = Path.read_text

    def counted(self: Path, *args: Any, **kwargs: Any) -> str:
        reads.append(self)
        return text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    (line,) = cost_model_said(path, frontend=scn.spec.frontend)
    assert reads == [path]
    monkeypatch.undo()
    run = simulate(scn.workload(), scn.make_policy(), scn.sim_config())
    (said,) = [x for x in setting_lines([run.summary]) if x.startswith("step times:")]
    # the same sentence, but for the file's name, which a run's summary does not keep
    assert " ".join(said.split()).replace("the cost-model file's", "its").replace(
        "the file's", "its") == line.replace(f"the cost-model file {path}: ", "").replace(
        ", fitted on H100-SXM / Llama-3.1-8B TP1 EP1, KV cache auto", "")
