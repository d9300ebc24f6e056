"""Calibration and validation from a recorded run (``kvbudget.studies.calibrate`` / ``validate``,
``kvbudget calibrate --records`` / ``validate --records``).

The recording here is one the simulator itself made with known coefficients, with 2 % noise
on every measured time: the fit must find the coefficients again (those the run pins down) and
reproduce the recorded latencies.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, load_cost_model
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.policies import make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.calibrate import (
    calibrate_recording,
    fit_parameters,
    linear_start,
    recorded_loss,
)
from kvbudget.studies.validate import validate_recording
from tests.conftest import make_workload

TRUTH = LinearCostModel(intercept_s=0.012, per_prefill_token_s=4e-5, per_decode_seq_s=3e-4,
                        per_context_token_s=2e-7)
ENGINE = EngineConfig(num_gpu_blocks=4000, max_num_seqs=64, max_num_batched_tokens=1024)
ENGINE_FLAGS = ["--model", "Llama-3.1-8B", "--num-gpu-blocks", "4000", "--max-num-seqs", "64",
                "--max-num-batched-tokens", "1024"]


def recorded_run(path: Path, n: int = 160, seed: int = 1, noise: float = 0.02) -> Path:
    """A light phase then a heavy one, simulated with TRUTH; TTFT and E2E with noise."""
    rng = np.random.default_rng(seed)
    gaps = np.concatenate([rng.exponential(1 / 2.0, n // 2), rng.exponential(1 / 12.0, n // 2)])
    arrival = np.cumsum(gaps) - gaps[0]
    prompt = rng.integers(50, 1500, n)
    output = rng.integers(20, 300, n)
    workload = make_workload(arrival, prompt, output, max_output_tokens=output)
    sim = simulate(workload, make_policy("unlimited"),
                   SimConfig(engine=ENGINE, cost_model=TRUTH)).records
    ttft = sim["ttft_s"].to_numpy() * rng.lognormal(0, noise, n)
    e2e = np.maximum(sim["e2e_s"].to_numpy() * rng.lognormal(0, noise, n), ttft)
    pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
                  "ttft_s": ttft, "e2e_s": e2e}).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def recording_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("rec") / "records.csv")


def test_calibration_recovers_the_coefficients_of_a_simulated_recording(
        recording_csv: Path) -> None:
    rec = read_recording(recording_csv)
    start = LinearCostModel(0.02, 2e-5, 1e-4, 5e-7)  # 0.4x to 2.5x off
    config = SimConfig(engine=ENGINE)
    seen: list[int] = []
    cal = calibrate_recording(rec, config, start, fit_overhead=False, max_evals=150,
                              progress=lambda n, best: seen.append(n))
    # the search's 150 and two per parameter for the sensitivities before and after it
    assert seen == list(range(1, len(seen) + 1)) and cal.num_evals == len(seen) <= 150 + 16
    assert cal.loss < cal.start_loss / 100
    m = cal.model
    assert isinstance(m, LinearCostModel)
    # what the run pins down: the per-step intercept, the prefill rate, and a decode step of
    # the heavy phase's batch (16 sequences of ~800 context tokens)
    assert m.intercept_s == pytest.approx(TRUTH.intercept_s, rel=0.10)
    assert m.per_prefill_token_s == pytest.approx(TRUTH.per_prefill_token_s, rel=0.10)
    decode = (m.step_time(0.0, 16.0, 16 * 800.0, 0.0, 0.0),
              TRUTH.step_time(0.0, 16.0, 16 * 800.0, 0.0, 0.0))
    assert decode[0] == pytest.approx(decode[1], rel=0.10)
    errors = cal.in_sample_errors()
    for metric in ("ttft_mean_s", "ttft_p50_s", "tpot_mean_s", "tpot_p50_s", "e2e_mean_s",
                   "e2e_p50_s", "e2e_p99_s", "output_tokens_per_s"):
        assert abs(errors[metric] or 1.0) < 0.05, (metric, errors)
    # the same inputs give the same fit (the simulator is deterministic)
    again = calibrate_recording(rec, config, start, fit_overhead=False, max_evals=20)
    first = calibrate_recording(rec, config, start, fit_overhead=False, max_evals=20)
    assert again.fitted == first.fitted


def test_the_loss_is_zero_on_the_measurement_and_grows_with_the_error(
        recording_csv: Path) -> None:
    rec = read_recording(recording_csv)
    measured = rec.records()
    assert recorded_loss(measured, measured) == 0.0
    slower = measured.copy()
    for col in ("ttft_s", "e2e_s", "tpot_s"):
        slower[col] = slower[col] * 1.2
    slower["finished_s"] = slower["arrival_s"] + slower["e2e_s"]
    assert recorded_loss(slower, measured) == pytest.approx(12 * np.log(1.2) ** 2, rel=1e-9)


def test_fit_parameters_and_the_linear_start() -> None:
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model

    roof = RooflineCostModel(get_gpu("H100-80GB"), get_model("Llama-3.1-8B"))
    assert fit_parameters(roof) == ("mfu", "mbu", "overhead_s")
    assert fit_parameters(TRUTH) == ("intercept_s", "per_prefill_token_s", "per_decode_seq_s",
                                     "per_context_token_s")
    lin = linear_start(roof, max_num_batched_tokens=2048, max_num_seqs=256)
    for features in ((0.0, 32.0, 32 * 1024.0, 0.0, 0.0), (2048.0, 0.0, 2048.0, 2048.0**2, 1.0)):
        assert lin.step_time(*features) == pytest.approx(roof.step_time(*features), rel=0.35)
    with pytest.raises(ValueError, match="FIT_PARAMETERS"):
        fit_parameters(make_policy("unlimited"))  # type: ignore[arg-type]


def test_parameters_that_cannot_move_the_step_time_are_left_alone(recording_csv: Path) -> None:
    from kvbudget.studies.calibrate import effective_parameters

    start = LinearCostModel(0.02, 0.0, 1e-4, 5e-7)  # no prefill term to scale
    names, fixed = effective_parameters(start)
    assert names == ("intercept_s", "per_decode_seq_s", "per_context_token_s")
    assert fixed == {"per_prefill_token_s": "starts at 0.0"}
    cal = calibrate_recording(read_recording(recording_csv), SimConfig(engine=ENGINE), start,
                              fit_overhead=False, max_evals=5)
    assert set(cal.fitted) == set(names) and cal.fixed == fixed
    assert cal.model.per_prefill_token_s == 0.0  # type: ignore[attr-defined]


def test_a_roofline_fit_saves_and_loads_by_kind(recording_csv: Path, tmp_path: Path) -> None:
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model

    rec = read_recording(recording_csv)
    config = SimConfig(engine=ENGINE)
    start = RooflineCostModel(get_gpu("H100-80GB"), get_model("Llama-3.1-8B"))
    cal = calibrate_recording(rec, config, start, max_evals=12)
    path = tmp_path / "roof.json"
    cal.save(path, rec, config, policy="unlimited")
    loaded = load_cost_model(path)
    assert loaded == cal.model
    payload = json.loads(path.read_text())
    assert payload["kind"] == "roofline"
    section = payload["calibration"]
    assert section["rows"] == 160 and section["records"] == str(recording_csv.resolve())
    assert section["engine"]["max_num_seqs"] == 64 and "date" in section
    assert set(section["in_sample_error"]) >= {"ttft_p50_s", "tpot_p50_s", "e2e_p50_s"}
    assert payload["frontend_overhead_s"] == cal.frontend_overhead_s
    res = CliRunner().invoke(app, ["simulate", "--trace", str(recording_csv), "--policy",
                                   "unlimited", "--cost-model", str(path), "--json",
                                   *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["cost_model"]["kind"] == "roofline"


def test_a_cost_file_says_the_recordings_tool_stages_and_notes(tmp_path: Path) -> None:
    # the file kept the recording's counts but not what reading it assumed (realised output as
    # max_tokens, redrawn or placed send times) nor how its stages were replayed
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
    # everything at once (rate8.json relabelled inf is a timed trace's spread sends now)
    bench = fixture / "vllm-bench-0.32.0" / "inf.json"
    rec = read_recording(bench)
    config = SimConfig(engine=ENGINE)
    cal = calibrate_recording(rec, config, config.resolved_cost_model(), max_evals=3)
    path = tmp_path / "cost.json"
    cal.save(path, rec, config, policy="unlimited")

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} in a JSON file")

    section = json.loads(path.read_text(), parse_constant=no_constant)["calibration"]
    assert section["tool"] == "vllm bench serve"
    assert section["stages"] == [{"label": "inf req/s", "load": "open", "request_rate": "inf",
                                  "max_concurrency": None, "send_times": "recorded"}]
    assert section["notes"] == list(rec.notes) and any("realised output" in n
                                                       for n in section["notes"])
    assert load_cost_model(path) == cal.model


def test_a_default_model_fit_is_taken_by_simulate_and_sweep(recording_csv: Path,
                                                            tmp_path: Path) -> None:
    rec = read_recording(recording_csv)
    config = SimConfig(engine=ENGINE)
    start = config.resolved_cost_model()  # the default step-time model
    cal = calibrate_recording(rec, config, start, max_evals=8)
    path = tmp_path / "default.json"
    cal.save(path, rec, config, policy="unlimited")
    loaded = load_cost_model(path)
    assert type(loaded) is type(start) and loaded == cal.model
    assert json.loads(path.read_text())["calibration"]["not_fitted"] == cal.fixed
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "--trace", str(recording_csv), "--policy",
                              "unlimited", "--cost-model", str(path), "--json", *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["sweep", "--trace", str(recording_csv), "--cost-model", str(path),
                              "--policies", "unlimited,conservative", "--out",
                              str(tmp_path / "sweep"), "-j", "1", "-r", "1", *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    assert len(pd.read_parquet(tmp_path / "sweep" / "sweep.parquet")) == 2


def test_holdout_validation_compares_only_the_held_out_requests(recording_csv: Path) -> None:
    rec = read_recording(recording_csv)
    fit_rows = rec.fit_rows(0.25)
    assert fit_rows.sum() == 120 and not fit_rows[120:].any()
    result = validate_recording(rec, SimConfig(engine=ENGINE), cost_model=TRUTH,
                                rows=~fit_rows)
    assert result.num_compared == 40
    completed = result.table[(result.table["stage"] == "all")
                             & (result.table["metric"] == "completed")]
    assert completed["measured"].iloc[0] == 40
    # the true model reproduces the held-out part up to the noise
    errors = result.errors()
    assert abs(errors["e2e_p50_s"]) < 0.05 and abs(errors["tpot_p50_s"]) < 0.05


def test_calibrate_and_validate_records_from_the_command_line(recording_csv: Path,
                                                              tmp_path: Path) -> None:
    runner = CliRunner()
    cost = tmp_path / "cost.json"
    res = runner.invoke(app, ["calibrate", "--records", str(recording_csv), "--fit", "linear",
                              "--max-evals", "25", "--out", str(cost), *ENGINE_FLAGS,
                              "--set", "engine.enable_prefix_caching=false"])
    assert res.exit_code == 0, res.output
    assert "in sample (160 requests)" in res.stdout and f"wrote {cost}" in res.stdout
    payload = json.loads(cost.read_text())
    assert payload["kind"] == "linear"
    # the search's 25 and two per coordinate (4 coefficients, the overhead) before and after
    assert payload["calibration"]["num_simulations"] <= 25 + 4 * 5
    assert payload["calibration"]["engine"]["enable_prefix_caching"] is False
    out = tmp_path / "val"
    res = runner.invoke(app, ["validate", "--records", str(recording_csv), "--cost-model",
                              str(cost), "--out", str(out), *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    for name in ("validation.csv", "validation.json", "validate.png", "sim/requests.parquet"):
        assert (out / name).exists(), name
    table = pd.read_csv(out / "validation.csv")
    assert list(table.columns) == ["stage", "metric", "simulated", "measured", "rel_error",
                                   "sim_low_95", "sim_high_95"]  # the file's posterior
    assert set(table["stage"]) >= {"all"} and len(set(table["stage"])) >= 2  # two load phases
    report = json.loads((out / "validation.json").read_text())
    assert report["num_compared"] == 160 and report["counts"]["num_measured"] == 160
    overall = table[table["stage"] == "all"].set_index("metric")
    assert np.isfinite(overall["rel_error"]).all()
    spans = overall.drop(index="completed")
    assert ((spans["sim_low_95"] < spans["simulated"])
            & (spans["simulated"] < spans["sim_high_95"])).all()
    assert "95 % interval" in res.stdout
    held = tmp_path / "held"
    res = runner.invoke(app, ["validate", "--records", str(recording_csv), "--holdout", "0.5",
                              "--fit", "linear", "--max-evals", "15", "--out", str(held),
                              *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    assert "held out (the last 0.5, 80 requests)" in res.stdout
    # the table's throughput says its span (over the arrival window it could not disagree)
    assert ("output_tokens_per_s: completed output tokens over the time the work took, first "
            "arrival to last finish") in " ".join(res.stdout.split())
    assert (held / "cost.json").exists()
    assert json.loads((held / "validation.json").read_text())["num_compared"] == 80


def test_a_recording_whose_requests_all_failed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,status\n"
                    "0,10,5,,,error\n1,10,5,,,timeout\n")
    res = CliRunner().invoke(app, ["calibrate", "--records", str(path), "--out",
                                   str(tmp_path / "c.json")])
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "no request has a measured TTFT and E2E" in res.stderr


def test_engine_flags_win_over_the_recording_and_the_recording_over_defaults(
        recording_csv: Path, tmp_path: Path) -> None:
    from kvbudget.cli.recorded import recorded_setup

    rec = read_recording(recording_csv)
    sim = validate_recording(rec, SimConfig(engine=ENGINE), cost_model=TRUTH).simulated
    run = tmp_path / "run"
    sim.write(run)
    (run / "replay.json").write_text(json.dumps({"policy": "overcommit", "policy_params": {},
                                                  "kv_capacity_tokens": 4096}))
    kwargs = dict(records_format=None, columns=None, tier="interactive", seed=0, gpu=None,
                  model=None, scenario=None, overrides=None, block_size=None,
                  max_num_batched_tokens=None, cost_model=None, policy=None, params=None)
    setup = recorded_setup(run, num_gpu_blocks=None, max_num_seqs=None,
                           **kwargs)  # type: ignore[arg-type]
    assert setup.config.resolved_num_gpu_blocks() == 4000  # summary.json's num_gpu_blocks
    assert setup.config.gateway_capacity_tokens == 4096  # replay.json's kv_capacity_tokens
    assert setup.policy == "overcommit"
    # summary.json's engine_knobs: the run's own limits (a replay at the defaults' would be
    # another server)
    assert setup.config.engine.max_num_seqs == ENGINE.max_num_seqs
    assert setup.config.engine.max_num_batched_tokens == ENGINE.max_num_batched_tokens
    setup = recorded_setup(run, num_gpu_blocks=100, max_num_seqs=7,
                           **kwargs)  # type: ignore[arg-type]
    assert setup.config.resolved_num_gpu_blocks() == 100
    assert setup.config.engine.max_num_seqs == 7


def test_a_recorded_model_id_picks_the_bundled_model(tmp_path: Path) -> None:
    from kvbudget.cli.recorded import recorded_setup

    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"model_id": "Qwen/Qwen2.5-7B", "input_lens": [10, 20],
                                "output_lens": [3, 4], "ttfts": [0.1, 0.1],
                                "latencies": [0.5, 0.6], "start_times": [0.0, 1.0],
                                "errors": ["", ""]}))
    kwargs = dict(records_format=None, columns=None, tier="interactive", seed=0, gpu=None,
                  scenario=None, overrides=None, block_size=None, num_gpu_blocks=None,
                  max_num_seqs=None, max_num_batched_tokens=None, cost_model=None, policy=None,
                  params=None)
    from kvbudget.perf.models import get_model

    chosen = recorded_setup(path, model=None, **kwargs).config.model  # type: ignore[arg-type]
    assert get_model(chosen) == get_model("Qwen2.5-7B")
    assert recorded_setup(path, model="Llama-3.1-8B", **kwargs  # type: ignore[arg-type]
                          ).config.model == "Llama-3.1-8B"
