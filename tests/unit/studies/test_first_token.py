"""The first token's fixed front-end term in a calibration (``kvbudget.studies.first_token``).

Known answers: recordings the simulator made itself, with async scheduling on and a known fixed
term ``B`` added to every request (as a front end adds it), at a light and a heavy load. The
engine's part of the first token (the queue, async scheduling's extra step, the prefill) is
simulated, so the fit must find ``B`` again at both loads; fitted with an engine that lacks the
extra step (async scheduling off) the term takes up that step instead and grows with the load,
which is what calibration did before the engine modelled it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.policies import make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.calibrate import RecordedCalibration, calibrate_recording
from kvbudget.studies.first_token import (
    PUBLISHED_FIXED_TERM_S,
    FixedTermBounds,
    PairedStats,
    best_fixed_term,
    fit_fixed_term,
    fixed_term_bounds,
    fixed_term_warnings,
    parameter_warnings,
)
from tests.conftest import make_workload

B = 0.008
"""The known fixed term: 8 ms, inside the published 1.3-15.6 ms."""
ENGINE = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048, async_scheduling=True)
CONFIG = SimConfig(gpu="H100-SXM", model="Llama-3.1-8B", engine=ENGINE, frontend="none")
LIGHT, HEAVY = 1.0, 30.0  # req/s: the engine mostly idle at arrivals / always busy


def synthetic(path: Path, rate: float, *, term_s: float = B, n: int = 120, seed: int = 3,
              noise: float = 0.0, slow: float = 1.0) -> Path:
    """A recording of the default step model on an H100 at ``rate`` (Poisson), every request's
    TTFT and E2E with ``term_s`` added (the simulator's own front-end term), times ``slow``,
    with lognormal ``noise``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, n)
    arrival = np.cumsum(gaps) - gaps[0]
    prompt = rng.integers(200, 1200, n)
    output = rng.integers(40, 160, n)
    workload = make_workload(arrival, prompt, output, max_output_tokens=output)
    sim = simulate(workload, make_policy("unlimited"),
                   dataclasses.replace(CONFIG, frontend_overhead_s=term_s)).records
    ttft = sim["ttft_s"].to_numpy() * slow * rng.lognormal(0, noise, n)
    e2e = np.maximum(sim["e2e_s"].to_numpy() * slow * rng.lognormal(0, noise, n), ttft)
    pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": output,
                  "max_output_tokens": output, "ttft_s": ttft, "e2e_s": e2e}
                 ).to_csv(path, index=False)
    return path


def _with_async(on: bool) -> SimConfig:
    return dataclasses.replace(CONFIG, engine=dataclasses.replace(ENGINE, async_scheduling=on))


def test_the_best_term_of_a_shifted_simulation_is_the_shift_worked_by_hand() -> None:
    """Measured TTFT statistics 20/25/40/60 ms and E2E 1.0/1.1/1.5/2.0 s; the simulation's are
    each 6 ms less: adding 6 ms makes every log ratio 0, so the loss is 0 there and the best
    term is 6 ms. With a simulation run with 2 ms already, the best is still 6 ms (the shift
    is 4 ms). A simulation longer than measured wants a negative term: 0, the lower bound."""
    ttft = {"mean": 0.020, "p50": 0.025, "p90": 0.040, "p99": 0.060}
    e2e = {"mean": 1.0, "p50": 1.1, "p90": 1.5, "p99": 2.0}
    meas = {f"ttft_{k}_s": v for k, v in ttft.items()} | {f"e2e_{k}_s": v for k, v in e2e.items()}
    sim = {k: v - 0.006 for k, v in meas.items()}
    bounds = FixedTermBounds(0.0, 0.020, "the shortest TTFT")
    term, loss = best_fixed_term(PairedStats(meas, sim, 0.0), ("ttft", "e2e"),
                                 simulated_term_s=0.0, bounds=bounds)
    assert term == pytest.approx(0.006, abs=2e-6) and loss == pytest.approx(0.0, abs=1e-9)
    ran_with_2ms = {k: v + 0.002 for k, v in sim.items()}
    term, _ = best_fixed_term(PairedStats(meas, ran_with_2ms, 0.0), ("ttft", "e2e"),
                              simulated_term_s=0.002, bounds=bounds)
    assert term == pytest.approx(0.006, abs=2e-6)
    slower = {k: v + 0.010 for k, v in meas.items()}
    term, loss = best_fixed_term(PairedStats(meas, slower, 0.0), ("ttft", "e2e"),
                                 simulated_term_s=0.0, bounds=bounds)
    assert term == 0.0 and loss > 0
    assert "lower bound" in fixed_term_warnings(term, bounds)[0]


@settings(max_examples=40, deadline=None)
@given(ttft=st.lists(st.floats(0.005, 5.0), min_size=4, max_size=4),
       e2e=st.lists(st.floats(0.05, 60.0), min_size=4, max_size=4),
       shift_ms=st.floats(0.0, 4.0), ran_with_ms=st.floats(0.0, 3.0))
def test_any_shift_inside_the_bounds_is_found_again(ttft: list[float], e2e: list[float],
                                                    shift_ms: float, ran_with_ms: float) -> None:
    """Whatever the statistics, a simulation that is the measurement less a term inside the
    bounds (run with another term) gets that term back, to 10 us, and a loss of 0 there."""
    stats = ("mean", "p50", "p90", "p99")
    meas = ({f"ttft_{k}_s": v for k, v in zip(stats, sorted(ttft), strict=True)}
            | {f"e2e_{k}_s": v for k, v in zip(stats, sorted(e2e), strict=True)})
    shift, ran = shift_ms / 1e3, ran_with_ms / 1e3
    sim = {k: v - shift + ran for k, v in meas.items()}
    bounds = FixedTermBounds(0.0, min(ttft), "the shortest TTFT")
    term, loss = best_fixed_term(PairedStats(meas, sim, 0.0), ("ttft", "e2e"),
                                 simulated_term_s=ran, bounds=bounds)
    assert term == pytest.approx(shift, abs=1e-5)
    assert loss < 1e-6


def test_the_bounds_are_zero_and_the_shortest_measured_ttft(tmp_path: Path) -> None:
    rec = read_recording(synthetic(tmp_path / "r.csv", LIGHT, n=40))
    measured = rec.records()
    bounds = fixed_term_bounds(measured)
    assert bounds.lower_s == 0.0
    assert bounds.upper_s == pytest.approx(float(measured["ttft_s"].min()))
    rows = np.arange(len(measured)) >= 20
    assert fixed_term_bounds(measured, rows).upper_s == pytest.approx(
        float(measured["ttft_s"][rows].min()))


def test_a_known_term_is_recovered_at_two_loads_with_async_scheduling(tmp_path: Path) -> None:
    """The simulator's own recording, the true step model: the term comes back to 10 us at
    both loads (the simulation at the true term reproduces the recording exactly)."""
    truth = CONFIG.resolved_cost_model()
    found = {}
    for rate in (LIGHT, HEAVY):
        rec = read_recording(synthetic(tmp_path / f"r{rate}.csv", rate))
        fit = fit_fixed_term(rec, _with_async(True), truth)
        found[rate] = fit.value_s
        assert fit.value_s == pytest.approx(B, abs=1e-5), rate
        assert fit.loss < 1e-8 and fixed_term_warnings(fit.value_s, fit.bounds) == []
    assert abs(found[LIGHT] - found[HEAVY]) < 1e-5


def test_without_the_extra_step_the_term_drifts_with_the_load(tmp_path: Path) -> None:
    """The same recordings fitted by an engine without async scheduling's extra step (the
    engine before it was modelled): the term takes up the step the engine leaves out, more of
    it the busier the engine is at arrivals (at 1 req/s it is often idle and schedules at
    once). The drift is at least half a decode step of Llama-3.1-8B on an H100 (6.5-8 ms,
    docs/fidelity.md) between the two loads."""
    truth = CONFIG.resolved_cost_model()
    light = fit_fixed_term(read_recording(synthetic(tmp_path / "l.csv", LIGHT)),
                           _with_async(False), truth).value_s
    heavy = fit_fixed_term(read_recording(synthetic(tmp_path / "h.csv", HEAVY)),
                           _with_async(False), truth).value_s
    assert light > B + 1e-3 and heavy - light > 3e-3
    # docs/fidelity.md ("The first token's fixed term across loads") quotes them
    assert (round(1e3 * light, 1), round(1e3 * heavy, 1)) == (11.8, 17.8)


def test_a_joint_fit_finds_the_term_and_holds_it_across_loads(tmp_path: Path) -> None:
    """The step model and the term fitted together (``calibrate_recording``) on the heavy
    load, from a start with ``layer_overhead_s`` 30 % high, on recordings with 1 % noise: the
    term within 1.5 ms of 8 ms; the fitted step model kept and the term fitted again on the
    light load: within 1.5 ms of the heavy load's (and of 8 ms). (The other way round depends
    on how well a light load pins the step model's batch terms, not on the term.)"""
    truth = CONFIG.resolved_cost_model()
    start = dataclasses.replace(truth, layer_overhead_s=1.3 * truth.layer_overhead_s)
    heavy = read_recording(synthetic(tmp_path / "heavy.csv", HEAVY, noise=0.01))
    light = read_recording(synthetic(tmp_path / "light.csv", LIGHT, noise=0.01))
    cal = calibrate_recording(heavy, CONFIG, start, max_evals=40)
    assert cal.frontend_overhead_s == pytest.approx(B, abs=1.5e-3)
    assert cal.fitted["frontend_overhead_s"] == cal.frontend_overhead_s
    assert cal.term is not None and cal.term.bounds.upper_s < 0.05
    check = fit_fixed_term(light, CONFIG, cal.model)
    assert check.value_s == pytest.approx(cal.frontend_overhead_s, abs=1.5e-3)
    assert check.value_s == pytest.approx(B, abs=1.5e-3)


def test_parameters_at_a_bound_or_outside_their_published_range_are_said() -> None:
    bounds = {"mem_efficiency": (0.79, 1.0), "layer_overhead_s": (4.1e-7, 4.1e-3)}
    lines = parameter_warnings({"mem_efficiency": 0.79, "layer_overhead_s": 41e-6}, bounds)
    assert len(lines) == 1 and lines[0].startswith("mem_efficiency came out at the lower bound")
    lines = parameter_warnings({"layer_overhead_s": 236e-6}, bounds)
    assert len(lines) == 1 and "outside its published range" in lines[0]
    assert parameter_warnings({"layer_overhead_s": 41e-6, "mem_efficiency": 0.9}, bounds) == []
    # an H20's attention fraction (0.83, flash-attention#1310) is its GPU's own cited default:
    # a fit near it is physical there, though above the stated range's 0.75
    wide = {"attention_efficiency": (0.01, 1.0)}
    assert "published range" in parameter_warnings({"attention_efficiency": 0.82}, wide)[0]
    assert parameter_warnings({"attention_efficiency": 0.82}, wide,
                              {"attention_efficiency": 0.829}) == []
    assert parameter_warnings({"attention_efficiency": 0.95}, wide,
                              {"attention_efficiency": 0.829}) != []
    ok = FixedTermBounds(0.0, 0.02, "x")
    assert fixed_term_warnings(0.008, ok) == []
    assert "upper bound" in fixed_term_warnings(0.02, ok)[0]
    high = fixed_term_warnings(0.018, FixedTermBounds(0.0, 0.05, "x"))
    assert len(high) == 1 and f"{1e3 * PUBLISHED_FIXED_TERM_S[1]:.1f} ms" in high[0]


def test_calibrate_says_a_fit_at_a_bound_loudly_and_writes_it(tmp_path: Path) -> None:
    """A recording of a server twice as slow as the H100 preset: the fitted efficiencies
    leave their published ranges; the command says so on stderr, line by line, and the file
    keeps the lines and how the first token was split."""
    path = synthetic(tmp_path / "slow.csv", 8.0, n=80, slow=2.0)
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(app, [
        "calibrate", "--records", str(path), "--gpu", "H100-SXM", "--model", "Llama-3.1-8B",
        "--max-num-seqs", "64", "--max-num-batched-tokens", "2048", "--fit", "default",
        "--max-evals", "30", "--out", str(out)])
    assert res.exit_code == 0, res.output
    section = json.loads(out.read_text())["calibration"]
    assert section["warnings"], section["fitted"]
    for line in section["warnings"]:
        assert f"warning: {line}" in res.stderr
    split = section["first_token"]
    assert split["async_scheduling"] is True and split["fixed_part_fitted"] is True
    low, high = split["fixed_part_bounds_s"]
    assert low == 0.0 and high == pytest.approx(float(pd.read_csv(path)["ttft_s"].min()))
    assert math.isclose(split["fixed_part_s"], section["fitted"]["frontend_overhead_s"])
    assert "first token: engine part simulated" in res.stdout
    # docs/recordings.md ("The first token") shows this run's output
    doc = (Path(__file__).resolve().parents[3] / "docs" / "recordings.md").read_text()
    shown = doc[doc.index("**The first token**"):doc.index("A recording with fewer than 10")]
    blocks = [b.strip() for b in shown.split("```")[1::2]]
    assert blocks[0] in res.stdout.splitlines()
    for line in blocks[1].splitlines():
        assert any(out.startswith(line.split("(...)")[0]) for out in res.stderr.splitlines()), line


def test_every_command_that_uses_a_file_that_warned_says_so_once(tmp_path: Path) -> None:
    """The file of a fit that warned (a server twice as slow as the preset: values at their
    bounds and outside their published ranges) keeps the warnings; simulate, validate and plan
    (two workers) with it each say them in one line naming the file and the values, once."""
    path = synthetic(tmp_path / "slow.csv", 8.0, n=80, slow=2.0)
    out = tmp_path / "cost.json"
    engine = ["--max-num-seqs", "64", "--max-num-batched-tokens", "2048"]
    target = ["--gpu", "H100-SXM", "--model", "Llama-3.1-8B"]
    res = CliRunner().invoke(app, ["calibrate", "--records", str(path), *target, *engine,
                                   "--fit", "default", "--max-evals", "30", "--out", str(out)])
    assert res.exit_code == 0, res.output
    warned = json.loads(out.read_text())["calibration"]["warnings"]
    assert any(w.startswith("frontend_overhead_s") for w in warned), warned
    # a copy each (a line is said once per process, and these run in this one)
    used = {name: tmp_path / f"{name}.json" for name in ("simulate", "validate", "plan")}
    for copy in used.values():
        copy.write_text(out.read_text())
    runs = {
        "simulate": ["simulate", *target, "--cost-model", str(used["simulate"]),
                     "--set", "workload.num_requests=20"],
        "validate": ["validate", "--records", str(path), *target, *engine, "--cost-model",
                     str(used["validate"]), "--out", str(tmp_path / "v")],
        "plan": ["plan", "--gpus", "H100-SXM", "--model", "Llama-3.1-8B", "--cost-model",
                 str(used["plan"]), "--replicas", "1,2", "--replications", "2", "-j", "2",
                 "--set", "workload.num_requests=20", "--out", str(tmp_path / "p")],
    }
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo),
                                                        os.environ.get("PYTHONPATH", "")])}
    for name, args in runs.items():
        if name == "plan":  # its own process: the workers' stderr is its (not CliRunner's)
            done = subprocess.run([sys.executable, "-m", "kvbudget", *args], env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            stderr = done.stderr
        else:
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, (name, res.output)
            stderr = res.stderr
        said = [ln for ln in stderr.splitlines() if "its calibration warned" in ln]
        assert len(said) == 1, (name, said)
        assert said[0].startswith(f"warning: {used[name]}: its calibration warned: "), said
        for w in warned:  # each warning's value, as the file has it
            head = w.split(" (")[0].split(": ")[0]
            assert head in said[0], (name, head)


def test_a_calibration_on_an_h20_takes_its_own_attention_figure_as_physical() -> None:
    def warned(gpu: str, value: float) -> list[str]:
        model = VllmStepModel(get_gpu(gpu), get_model("llama-3.1-8b"))
        cal = RecordedCalibration(model, 0.0, pd.DataFrame(), 0.0, 0.0, 1,
                                  {"attention_efficiency": 0.5},
                                  {"attention_efficiency": value}, 1,
                                  search_bounds={"attention_efficiency": (0.01, 1.0)})
        return cal.warnings()
    assert warned("h20", 0.82) == []  # flash-attention#1310: 122.7 of 148 TFLOPS
    assert "published range" in warned("h100-sxm", 0.82)[0]
    assert "published range" in warned("h20", 0.95)[0]
