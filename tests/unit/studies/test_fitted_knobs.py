"""A cost file's fit sets the engine knobs a command leaves unset (``simulator/fitted_knobs.py``).

A file calibrated with ``--set engine.max_num_seqs=64`` records it (``calibration.engine``;
``fitted_on.engine`` resolved), yet ``validate --records --cost-model`` without knobs said
"max_num_seqs, max_num_batched_tokens, ... (ASSUMED: vLLM's defaults for the GPU and model ...)"
and simulated 1,024 sequences on the H100, as ``simulate --cost-model`` did: the fitted
parameters used at a batch cap the server never ran. Now the order is the command line's (and
a scenario's) knobs, then the recording's, then the fit's, then the defaults; the fit's are
said, and a knob set otherwise than the fit's is noted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.simulator.fitted_knobs import with_fitted_knobs
from kvbudget.simulator.scenario import make_scenario
from tests.unit.studies.test_recorded_settings import _bench

RECORDING = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
             / "vllm-bench-0.32.0" / "concurrency4.json")
SETUP = ["--model", "Llama-3.1-8B", "--gpu", "H100-80GB"]


@pytest.fixture(scope="module")
def cost(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cost") / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(RECORDING), *SETUP,
                                   "--set", "engine.max_num_seqs=64", "--max-evals", "1",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    payload = json.loads(out.read_text())
    assert payload["fitted_on"]["engine"]["max_num_seqs"] == 64
    assert payload["calibration"]["engine"]["max_num_seqs"] == 64
    return out


def _own(cost: Path, tmp_path: Path) -> Path:
    """A copy of the file of this test's own: a note is said once a process, by its text."""
    path = tmp_path / "own.json"
    path.write_text(cost.read_text())
    return path


def _run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, " ".join(res.stderr.split())


def test_validate_takes_the_fits_knobs_where_nothing_sets_them(cost: Path,
                                                               tmp_path: Path) -> None:
    cost = _own(cost, tmp_path)
    code, out, err = _run("validate", "--records", RECORDING, *SETUP, "--cost-model", cost,
                          "--out", tmp_path / "v")
    assert code == 0, err
    assert "max_num_seqs=64 " in " ".join(out.split())
    # said once, in the settings line, with every fact the note said (which file, that nothing
    # here sets it, what sets another); the note said them again above it
    assert (f"max_num_seqs 64 (the fit's in the cost file {cost}: nothing here sets it; a "
            "flag, --set engine.KNOB=VALUE or a scenario's [engine] table sets another), "
            "max_num_batched_tokens, num_gpu_blocks, enable_prefix_caching, async_scheduling "
            "(ASSUMED: vLLM's "
            "defaults for the GPU and model") in err
    assert "engine knobs from the cost file's fit" not in err
    assert err.count("64 (the fit's") == 1 and err.count("nothing here sets") == 1, err
    # without the file: vLLM's default on an H100, said as assumed
    code, out, err = _run("validate", "--records", RECORDING, *SETUP, "--out", tmp_path / "d")
    assert code == 0, err
    assert "max_num_seqs=1024 " in " ".join(out.split())
    assert "max_num_seqs, max_num_batched_tokens, num_gpu_blocks" in err


def test_a_knob_given_wins_over_the_fits_and_the_difference_is_said(cost: Path,
                                                                    tmp_path: Path) -> None:
    code, out, err = _run("validate", "--records", RECORDING, *SETUP, "--cost-model", cost,
                          "--max-num-seqs", "128", "--out", tmp_path / "v")
    assert code == 0, err
    assert "max_num_seqs=128 " in " ".join(out.split())
    assert "the cost file's fit's" not in err
    assert (f"note: {cost}: fitted with engine.max_num_seqs 64; simulated with "
            "engine.max_num_seqs 128, as set here") in err


def test_simulate_takes_them_too_and_a_scenario_or_a_set_item_wins(cost: Path,
                                                                  tmp_path: Path) -> None:
    def seqs(*args: object) -> int:
        code, out, err = _run("simulate", "--cost-model", cost, "--set",
                              "workload.num_requests=20", "--json", *args)
        assert code == 0, err
        return int(json.loads(out)["engine_knobs"]["max_num_seqs"])

    assert seqs() == 64
    assert seqs("--set", "engine.max_num_seqs=32") == 32
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'cost_model = "{cost}"\n[engine]\nmax_num_seqs = 16\n')
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{i / 4},100,20\n" for i in range(20)))
    code, out, err = _run("simulate", "--scenario", scenario, "--trace", trace, "--json")
    assert code == 0, err
    assert json.loads(out)["engine_knobs"]["max_num_seqs"] == 16
    # the library's door: the same order
    scn = make_scenario(cost_model=cost)
    assert scn.spec.engine.max_num_seqs == 64
    assert scn.fitted is not None and scn.fitted.taken == {"max_num_seqs": 64}
    scn = make_scenario(cost_model=cost, engine={"max_num_seqs": 8})
    assert scn.spec.engine.max_num_seqs == 8
    assert scn.fitted is not None and scn.fitted.differ == {"max_num_seqs": (64, 8)}


def test_only_knobs_the_fit_set_and_only_for_its_own_engine(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    defaults = {"name": "vllm", "block_size": 16, "max_num_seqs": None, "skip_ahead": True}
    calibration = {"engine": {"name": "vllm", "block_size": 16, "max_num_seqs": 48,
                              "skip_ahead": False, "not_a_knob": 3}}
    path.write_text(json.dumps({"fitted_on": {"engine": {"name": "vllm"}},
                                "calibration": calibration}))
    data, fitted = with_fitted_knobs({"cost_model": str(path)}, tmp_path, defaults)
    # block_size at its default, skip_ahead (no server's knob) and unknown keys stay out
    assert data["engine"] == {"max_num_seqs": 48}
    assert fitted is not None and fitted.taken == {"max_num_seqs": 48}
    data, fitted = with_fitted_knobs({"cost_model": "c.json", "engine": {"max_num_seqs": 48}},
                                     tmp_path, defaults)
    assert fitted is None and data["engine"] == {"max_num_seqs": 48}
    # a fit of another engine: its knobs are that engine's
    path.write_text(json.dumps({"fitted_on": {"engine": {"name": "sglang"}},
                                "calibration": calibration}))
    assert with_fitted_knobs({"cost_model": str(path)}, tmp_path, defaults) == (
        {"cost_model": str(path)}, None)
    # a file fitted without them (a live calibration's), or none at all
    path.write_text(json.dumps({"fitted_on": {"engine": {}}}))
    assert with_fitted_knobs({"cost_model": str(path)}, tmp_path, defaults)[1] is None
    assert with_fitted_knobs({"engine": {}}, tmp_path, defaults)[1] is None


def test_no_model_anywhere_names_the_one_the_cost_file_was_fitted_on(cost: Path,
                                                                     tmp_path: Path) -> None:
    path = _bench(tmp_path / "b.json", None)
    code, _, err = _run("validate", "--records", path, "--gpu", "H100", "--cost-model", cost,
                        "--out", tmp_path / "v")
    assert code == 2
    assert (f"the recording names no model: pass --model PRESET or --model path/to/config.json "
            f"(kvbudget simulates no model it was not given; the cost file {cost} was fitted on "
            "--model Llama-3.1-8B)") in err


def test_an_error_over_a_knob_from_the_fit_says_whose_it_is(cost: Path, tmp_path: Path) -> None:
    """A knob taken from the fit that a given one contradicts (vLLM refuses fewer batched
    tokens than sequences) is named as the fit's: the user set only the other."""
    payload = json.loads(cost.read_text())
    payload["calibration"]["engine"].update(max_num_seqs=None, max_num_batched_tokens=128)
    path = tmp_path / "c128.json"
    path.write_text(json.dumps(payload))
    code, _, err = _run("simulate", "--cost-model", path, "--max-num-seqs", "256")
    assert code == 2
    assert err.endswith(
        "error: engine.max_num_batched_tokens (128) must be greater than or equal to "
        "engine.max_num_seqs (256), as vLLM requires (engine.max_num_batched_tokens 128 from "
        f"the cost file {path}'s fit: a flag or --set engine.KNOB=VALUE sets another)"), err


def test_a_study_takes_them_and_says_so(cost: Path, tmp_path: Path) -> None:
    """``sweep`` (as ``tune``, ``plan`` and ``capacity``: their scenarios are built alike)
    runs at the fit's knobs and says them; a grid varying one says where it differs."""
    cost = _own(cost, tmp_path)
    code, _, err = _run("sweep", "--cost-model", cost, "--set", "workload.duration_s=5",
                          "--grid", "engine.max_num_seqs=32,64", "-r", "1", "-j", "1",
                          "--out", tmp_path / "sweep")
    assert code == 0, err
    assert (f"note: {cost}: engine knobs from the cost file's fit, which nothing here sets: "
            "engine.max_num_seqs 64") in err
    assert (f"note: {cost}: fitted with engine.max_num_seqs 64; simulated with "
            "engine.max_num_seqs 32, as set here") in err
    assert "simulated with engine.max_num_seqs 64" not in err


def test_a_knob_the_recording_says_wins_over_the_fits(cost: Path, tmp_path: Path) -> None:
    """A recording that tells its server's knobs (a kvbudget run directory) is simulated at
    them, the fit's other value said."""
    run, cost = tmp_path / "run", _own(cost, tmp_path)
    code, _, err = _run("simulate", "--set", "workload.duration_s=10", "--max-num-seqs", "16",
                        "--policy", "unlimited", "--out", run)
    assert code == 0, err
    code, out, err = _run("validate", "--records", run, "--cost-model", cost,
                          "--out", tmp_path / "v")
    assert code == 0, err
    assert "max_num_seqs=16 " in " ".join(out.split())
    assert "from the recording: num_gpu_blocks=" in err and "max_num_seqs=16" in err
    assert (f"note: {cost}: fitted with engine.max_num_seqs 64; simulated with "
            "engine.max_num_seqs 16, as set here (a flag, --set, the scenario or the "
            "recording)") in err
