"""A cost-model file knows what it was fitted on (``kvbudget.perf.fitted_on``): files written by
``calibrate --model config.json`` load anywhere; ``--cost-model`` with another GPU, model or
parallelism refuses in one line unless ``--cost-model-transfer`` carries the transferable
parameters; an older file loads with a note that it cannot be checked."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, load_cost_model, save_cost_model
from kvbudget.perf.fitted_on import (
    TRANSFERABLE_VLLM,
    FitTarget,
    load_checked_cost_model,
)
from kvbudget.perf.fitted_on_write import fitted_on_extra
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model, load_model_config
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.simulator.scenario import make_scenario
from tests.unit.studies.test_calibrate_records import recorded_run

BUNDLED = Path(__file__).parents[3] / "perf" / "model_configs" / "Llama-3.2-1B.json"
H100 = FitTarget(get_gpu("H100-80GB"), get_model("Llama-3.1-8B"))
ENGINE = ["--num-gpu-blocks", "4000", "--max-num-seqs", "64"]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("rec") / "rec.csv", n=40)


def fitted_file(path: Path, target: FitTarget = H100, **params: Any) -> Path:
    """A vllm-v1 file fitted on ``target`` with ``params`` moved off their defaults."""
    model = dataclasses.replace(VllmStepModel(target.gpu, target.model), **params)
    save_cost_model(model, path, extra={"frontend_overhead_s": 0.004,
                                        **fitted_on_extra(model, target, {"block_size": 16})})
    return path


def simulate(records: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["simulate", "--trace", str(records), "--policy",
                                    "unlimited", "--json", *ENGINE, *args])


def test_calibrate_with_a_config_json_model_writes_a_file_that_loads_anywhere(
        records: Path, tmp_path: Path) -> None:
    config = tmp_path / "tiny" / "config.json"
    config.parent.mkdir()
    shutil.copy(BUNDLED, config)
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(records), "--model",
                                   str(config), "--out", str(out), "--max-evals", "4", *ENGINE])
    assert res.exit_code == 0, res.output
    fitted_on = json.loads(out.read_text())["fitted_on"]
    assert fitted_on["model"]["config_path"] == str(config.resolve())
    assert fitted_on["model"]["config_sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
    assert fitted_on["gpu"]["name"] == get_gpu("H100-80GB").name
    assert fitted_on["engine"]["max_num_seqs"] == 64
    shapes = load_model_config(config)
    # the same model from another folder (the file the calibration read is gone)
    moved = tmp_path / "elsewhere" / "config.json"
    moved.parent.mkdir()
    shutil.move(config, moved)
    loaded = load_cost_model(out)
    assert isinstance(loaded, VllmStepModel) and loaded.model.num_layers == shapes.num_layers
    res = simulate(records, "--model", str(moved), "--cost-model", str(out))
    assert res.exit_code == 0, res.output
    described = json.loads(res.stdout)["cost_model"]
    assert described["mem_efficiency"] == loaded.mem_efficiency


@pytest.mark.parametrize("flags", [["--model", "Qwen3-8B"], ["--gpu", "A100-80GB"],
                                   ["--tensor-parallel-size", "2"]])
def test_another_gpu_model_or_parallelism_is_refused_in_one_line(
        records: Path, tmp_path: Path, flags: list[str]) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    assert simulate(records, "--cost-model", str(path)).exit_code == 0  # its own setting
    res = simulate(records, "--cost-model", str(path), *flags)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "fitted on H100-SXM / Llama-3.1-8B TP1" in lines[0]
    assert flags[1].replace("A100-80GB", "A100") in lines[0]
    assert "--cost-model-transfer" in lines[0]


def test_transfer_carries_the_gpu_parameters_to_another_model(records: Path,
                                                               tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6, layer_overhead_s=3e-5)
    res = simulate(records, "--cost-model", str(path), "--model", "Qwen3-8B",
                   "--cost-model-transfer")
    assert res.exit_code == 0, res.output
    described = json.loads(res.stdout)["cost_model"]
    assert described["model"] == "Qwen3-8B"
    assert described["mem_efficiency"] == 0.6 and described["layer_overhead_s"] == 3e-5
    notes = [line for line in res.stderr.splitlines() if "carried" in line]
    assert len(notes) == 1 and "carried mem_efficiency" in notes[0]
    assert json.loads(path.read_text())["transferable"] == list(TRANSFERABLE_VLLM)


@pytest.mark.parametrize(("change", "why"), [
    ({"gpu": get_gpu("A100-80GB")}, "another GPU"),
    ({"tensor_parallel_size": 2}, "another parallelism"),
])
def test_transfer_to_another_gpu_or_parallelism_carries_nothing(
        tmp_path: Path, change: dict[str, Any], why: str) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    target = dataclasses.replace(H100, **change)
    checked = load_checked_cost_model(path, target, transfer=True)
    assert checked.model is None and checked.frontend_overhead_s is None
    assert why in checked.notes[0] and "carried nothing" in checked.notes[0]
    with pytest.raises(ValueError, match=re.escape(f"not {target.label()}")):
        load_checked_cost_model(path, target)


def test_a_linear_file_transfers_nothing_and_its_own_setting_loads_as_is(tmp_path: Path) -> None:
    linear = LinearCostModel(0.01, 1e-5, 1e-4, 1e-7)
    path = tmp_path / "linear.json"
    save_cost_model(linear, path, extra=fitted_on_extra(linear, H100, {}))
    assert json.loads(path.read_text())["transferable"] == []
    assert load_checked_cost_model(path, H100).model == linear
    other = dataclasses.replace(H100, model=get_model("Qwen3-8B"))
    checked = load_checked_cost_model(path, other, transfer=True)
    assert checked.model is None and "carried nothing" in checked.notes[0]


def test_an_older_file_loads_with_a_note_that_it_cannot_be_checked(records: Path,
                                                                   tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "old.json")
    payload = json.loads(path.read_text())
    del payload["fitted_on"], payload["transferable"]
    path.write_text(json.dumps(payload))
    res = simulate(records, "--cost-model", str(path), "--model", "Qwen3-8B")
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if "cannot check" in line]
    assert len(notes) == 1 and str(path) in notes[0] and "Qwen3-8B" in notes[0]
    # not only an older file: calibrate --url without --gpu writes one too (it was said older)
    assert "calibrate --url or profile without --gpu" in " ".join(res.stderr.split())


def test_the_scenario_field_asks_for_the_transfer(tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    with pytest.raises(ValueError, match=re.escape("fitted on H100-SXM / Llama-3.1-8B")):
        make_scenario(None, (), model="Qwen3-8B", cost_model=path)
    scn = make_scenario(None, ("cost_model_transfer=true",), model="Qwen3-8B", cost_model=path)
    cost = scn.sim_config().cost_model
    assert isinstance(cost, VllmStepModel) and cost.model.name == "Qwen3-8B"
    assert cost.mem_efficiency == 0.6
    assert scn.sim_config().frontend_overhead_s == 0.004


def test_a_files_calibration_warnings_are_read_and_a_damaged_list_named(records: Path,
                                                                        tmp_path: Path) -> None:
    """``calibration.warnings`` (validated at the boundary): a file without them (from before,
    or from profile) says nothing more; one with them says them in one line; a damaged list is
    one line naming the field, exit 2."""
    plain = fitted_file(tmp_path / "plain.json")
    res = simulate(records, "--cost-model", str(plain))
    assert res.exit_code == 0 and "warned" not in res.stderr, res.output
    payload = json.loads(plain.read_text())
    for name, warnings in (("said.json", ["layer_overhead_s = 0.000198 is outside its "
                                          "published range 3.16e-05 .. 5.04e-05 (a source: "
                                          "x): not a physical value of that constant"]),
                           ("bad.json", "a line"), ("bad2.json", [1])):
        path = tmp_path / name
        path.write_text(json.dumps({**payload, "calibration": {"warnings": warnings}}))
        res = simulate(records, "--cost-model", str(path))
        if name == "said.json":
            assert res.exit_code == 0, res.output
            assert (f"warning: {path}: its calibration warned: layer_overhead_s = 0.000198 is "
                    "outside its published range 3.16e-05 .. 5.04e-05 (the file's") \
                in res.stderr, res.stderr
        else:
            assert res.exit_code == 2, res.output
            assert f"{path}: field 'calibration.warnings' must be a list of strings" \
                in res.output


def test_plan_and_tune_check_every_grid_points_target_before_the_first_run(
        tmp_path: Path) -> None:
    """A plan over two GPUs with a file fitted on one refused at the first run of the other,
    after "at most N runs": it is now refused before anything runs, naming the grid point;
    with the transfer the note of what carries says so up front. Tune's parallelism alike."""
    path = fitted_file(tmp_path / "h100.json")
    small = ["--set", "workload.num_requests=10", "--replications", "2", "-j", "1"]
    res = CliRunner().invoke(app, ["plan", "--gpus", "A100-80GB,H100-80GB", "--cost-model",
                                   str(path), "--replicas", "1", *small,
                                   "--out", str(tmp_path / "p")])
    assert res.exit_code == 2, res.output
    assert "at most" not in res.output and not (tmp_path / "p" / "parts").exists()
    assert res.stderr.splitlines()[-1].startswith(
        f"error: plan --gpus A100-80GB: {path}: fitted on H100-SXM / Llama-3.1-8B TP1 EP1, "
        "not A100-80GB"), res.stderr
    res = CliRunner().invoke(app, ["plan", "--gpus", "A100-80GB,H100-80GB", "--cost-model",
                                   str(path), "--cost-model-transfer", "--replicas", "1",
                                   *small, "--out", str(tmp_path / "q")])
    assert res.exit_code == 0, res.output
    note = res.stderr.index(f"note: {path}: fitted on H100-SXM / Llama-3.1-8B TP1 EP1, used "
                            "for A100-80GB")
    assert note < res.stderr.index("at most"), res.stderr
    res = CliRunner().invoke(app, ["tune", "--cost-model", str(path), "--param",
                                   "engine.tensor_parallel_size=1:2:int", *small,
                                   "--out", str(tmp_path / "t")])
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "t" / "parts").exists()
    assert res.stderr.splitlines()[-1].startswith(
        "error: tune --param engine.tensor_parallel_size=2: "), res.stderr


def _flags_of(command: str) -> set[str]:
    commands: dict[str, Any] = getattr(typer.main.get_command(app), "commands")  # noqa: B009
    return {opt for param in commands[command].params for opt in param.opts}


@pytest.mark.parametrize("command", ["validate", "calibrate", "simulate", "plan"])
def test_a_mismatched_file_is_refused_naming_only_the_commands_own_flags(
        records: Path, tmp_path: Path, command: str) -> None:
    """validate --records and calibrate --records reused the refusal that names
    --cost-model-transfer and plan's --gpus, which neither takes: every flag a refusal names is
    the refusing command's, and the transfer it names works there."""
    a100 = FitTarget(get_gpu("A100-80GB"), get_model("Llama-3.1-8B"), tensor_parallel_size=2)
    cost = fitted_file(tmp_path / "a100.json", a100)
    target = ["--gpu", "H100-80GB", "--model", "Llama-3.1-8B"]
    args = {"validate": ["validate", "--records", str(records), *ENGINE, *target,
                         "--out", str(tmp_path / "v")],
            "calibrate": ["calibrate", "--records", str(records), *ENGINE, *target,
                          "--max-evals", "2", "--allow-small-fit",
                          "--out", str(tmp_path / "c.json")],
            "simulate": ["simulate", "--trace", str(records), *ENGINE],
            "plan": ["plan", "--trace", str(records), "--gpus", "H100-80GB", "--replicas", "1",
                     "-r", "2", "-j", "1", "--out", str(tmp_path / "p")]}[command]
    res = CliRunner().invoke(app, [*args, "--cost-model", str(cost)])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip().splitlines()[-1]
    assert f"{cost}: fitted on A100-80GB / Llama-3.1-8B TP2 EP1" in line, line
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
    assert named and named <= _flags_of(command), (named - _flags_of(command), line)
    gpu = "--gpus" if command == "plan" else "--gpu"
    assert (f"give its own deployment: {gpu} A100-80GB --model Llama-3.1-8B "
            "--tensor-parallel-size 2; ") in line, line
    taken = "--cost-model-transfer" in _flags_of(command)
    assert (("--cost-model-transfer (or --set cost_model_transfer=true; " if taken else
             "--set cost_model_transfer=true (or a scenario's") in line), line
    if not taken:  # what it names works there
        res = CliRunner().invoke(app, [*args, "--cost-model", str(cost), "--set",
                                       "cost_model_transfer=true"])
        assert res.exit_code == 0, res.output
        assert f"note: {cost}: fitted on A100-80GB / Llama-3.1-8B TP2 EP1, used for" \
            in res.stderr


def test_a_damaged_fitted_on_block_names_the_field(tmp_path: Path) -> None:
    path = fitted_file(tmp_path / "cost.json")
    payload = json.loads(path.read_text())
    payload["fitted_on"]["tensor_parallel_size"] = 0
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=re.escape("fitted_on.tensor_parallel_size")):
        load_checked_cost_model(path, H100)
    payload["fitted_on"]["model"]["config"] = {"name": "x"}
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=re.escape("fitted_on.model.config")):
        load_cost_model(path)


def test_the_documented_example_has_the_written_fields(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[3] / "docs" / "recordings.md").read_text()
    block = doc.split("### Cost files: what they fit", 1)[1].split("```json\n", 1)[1]
    example = json.loads("{" + block.split("```", 1)[0] + "}")
    written = json.loads(fitted_file(tmp_path / "cost.json").read_text())
    assert set(example["fitted_on"]) == set(written["fitted_on"])
    assert set(example["fitted_on"]["model"]) - {"config_path", "config_sha256"} \
        == set(written["fitted_on"]["model"])
    assert example["transferable"] == written["transferable"]


def test_a_measured_servers_target_is_named_or_the_reason_said(tmp_path: Path) -> None:
    """`calibrate --url` and `profile --fit-out` record what they fitted when they can name
    it (--gpu, the served model resolved to a preset), else say why not."""
    from kvbudget.perf.cost_model import LinearCostModel, save_cost_model
    from kvbudget.perf.fitted_on import FitTarget, load_checked_cost_model
    from kvbudget.perf.fitted_on_write import fitted_on_extra, target_or_why
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model

    target = target_or_why("H100-80GB", "meta-llama/Llama-3.1-8B-Instruct")
    assert isinstance(target, FitTarget) and target.model.name == get_model("Llama-3.1-8B").name
    assert target_or_why(None, "Llama-3.1-8B") == "the GPU is not given (--gpu)"
    assert "'my-finetune' is not a bundled preset" in str(target_or_why("H100-80GB",
                                                                       "my-finetune"))
    model = LinearCostModel(0.01, 1e-5, 1e-4, 1e-7)
    path = tmp_path / "live-cost.json"
    save_cost_model(model, path, extra=fitted_on_extra(model, target, {}))
    assert load_checked_cost_model(path, target).model == model
    other = FitTarget(get_gpu("A100-80GB"), target.model)
    with pytest.raises(ValueError, match="fitted on H100"):
        load_checked_cost_model(path, other)


def test_another_kv_cache_dtype_is_refused_or_carried_and_priced_at_the_target(
        records: Path, tmp_path: Path) -> None:
    """A file fitted with a 16-bit KV cache, simulated with --kv-cache-dtype fp8, priced every
    step's KV reads at 16 bits while the capacity was sized for fp8 (a decode step of 128
    requests over 8,000 tokens each: 59.8 ms where the fp8 model says 33.1 ms), and the file
    loaded without a word."""
    path = fitted_file(tmp_path / "cost.json", mem_efficiency=0.6)
    fp8 = dataclasses.replace(H100, kv_cache_dtype="fp8")
    with pytest.raises(ValueError, match=re.escape("KV cache auto, not H100-SXM / "
                                                   "Llama-3.1-8B TP1 EP1, KV cache fp8")):
        load_checked_cost_model(path, fp8)
    res = simulate(records, "--cost-model", str(path), "--kv-cache-dtype", "fp8")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "--set cost_model_transfer=true" in res.stderr
    checked = load_checked_cost_model(path, fp8, transfer=True)
    assert isinstance(checked.model, VllmStepModel)
    assert checked.model.kv_cache_dtype == "fp8" and checked.model.mem_efficiency == 0.6
    assert checked.frontend_overhead_s == 0.004
    assert "step times priced at fp8" in checked.notes[0]
    loaded = load_cost_model(path)
    decode = (0.0, 128.0, 128 * 8000.0, 0.0, 0.0)
    assert checked.model.step_time(*decode) < 0.6 * loaded.step_time(*decode)
    # the same element size under another name is the same cache
    e4m3 = fitted_file(tmp_path / "e4m3.json", dataclasses.replace(H100, kv_cache_dtype="fp8_e4m3"))
    assert load_checked_cost_model(e4m3, fp8).notes == ()


def test_a_bad_figure_of_the_fitted_on_gpu_names_the_field(tmp_path: Path) -> None:
    """It read "GPU 'H100-SXM': hbm_bandwidth_bytes_s must be > 0, got 'x'", as if the
    --gpu given were wrong, not the file's ``fitted_on`` block."""
    path = fitted_file(tmp_path / "cost.json")
    payload = json.loads(path.read_text())
    payload["fitted_on"]["gpu"]["figures"]["hbm_bandwidth_bytes_s"] = "x"
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=re.escape(
            f"{path}: field 'fitted_on.gpu.figures': GPU 'H100-SXM': hbm_bandwidth_bytes_s")):
        load_checked_cost_model(path, H100)


def test_a_file_fitted_with_another_engine_says_so(records: Path, tmp_path: Path) -> None:
    """A file fitted on a vLLM recording, simulated with --engine sglang (or validating an
    SGLang recording, which chooses it), used vLLM's fitted step parameters and front-end
    time without a word."""
    path = tmp_path / "cost.json"
    model = VllmStepModel(H100.gpu, H100.model)
    save_cost_model(model, path, extra={"frontend_overhead_s": 0.004, **fitted_on_extra(
        model, H100, {"name": "vllm", "block_size": 16})})
    res = simulate(records, "--cost-model", str(path), "--engine", "sglang")
    assert res.exit_code == 0, res.output
    assert (f"note: {path}: fitted with engine vllm, simulated with engine sglang"
            in res.stderr)
    for same in ("vllm", "vllm-swap"):
        res = simulate(records, "--cost-model", str(path), "--engine", same)
        assert res.exit_code == 0 and "fitted with engine" not in res.stderr, res.output
