"""What a recorded run's validation and calibration show in a notebook (``repr``): what was
simulated, the errors against the measurements, what was fitted and the warnings a calibration
prints (a value at a bound of its search); not a dump of the step model and the frames."""

from __future__ import annotations

from pathlib import Path

import pytest

import kvbudget as kb
from tests.unit.studies.test_calibrate_records import ENGINE, TRUTH, recorded_run


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> kb.Recording:
    return kb.read_recording(recorded_run(tmp_path_factory.mktemp("rec") / "r.csv", n=40))


def _unwrapped(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines())


def test_an_offline_validations_repr(recording: kb.Recording) -> None:
    v = kb.validate_recording(recording, kb.SimConfig(engine=ENGINE), cost_model=TRUTH)
    lines = repr(v).splitlines()
    assert _unwrapped(repr(v)).startswith(
        # what the simulated times include, as validate says it (it said 'a fixed front-end
        # time of 0.00 ms each' whatever the API server's modelled cost)
        "OfflineValidation: 40 measured requests simulated under policy unlimited; simulated "
        "times include no front-end cost (the engine's steps alone) simulated: Llama-3.1-8B "
        "(assumed: the default "
        "scenario's) on H100-80GB (assumed: the default scenario's), engine vllm")
    e = v.errors()
    assert (f"simulated against measured (all): TTFT p50 {e['ttft_p50_s']:+.1%}, p99 "
            f"{e['ttft_p99_s']:+.1%}; TPOT p50 {e['tpot_p50_s']:+.1%}") in _unwrapped(repr(v))
    assert lines[-1] == (".table (14 rows: stage x metric), .overall, .errors(stage), "
                         ".per_request, .simulated")
    assert "DataFrame" not in repr(v) and "rel_error" not in repr(v)


def test_a_calibrations_repr_shows_its_warnings(shared: Path) -> None:
    # a real vLLM run the roofline fits only with values at the ends of their searches
    rec = kb.read_recording(shared / "measured" / "llmservingsim_vllm019" /
                            "RTX4090_Llama-3.1-8B" / "requests.csv")
    start = kb.VllmStepModel(kb.get_gpu("RTX-4090"), kb.get_model("Llama-3.1-8B"))
    # max_model_len: the server's (its meta.json): vLLM does not start on 24 GB at the model's
    # 131,072-token context, nor does the simulation
    config = kb.SimConfig(gpu="RTX-4090", engine=kb.EngineConfig(
        max_num_seqs=256, max_num_batched_tokens=2048, max_model_len=32768))
    cal = kb.calibrate_recording(rec, config, start, max_evals=12, uncertainty=False)
    text = _unwrapped(repr(cal))
    assert text.startswith(
        "RecordedCalibration: VllmStepModel of Llama-3.1-8B on RTX-4090 fitted to 300 "
        f"measured requests in {cal.num_evals} simulations; loss {cal.start_loss:.4g} -> "
        f"{cal.loss:.4g} fitted: ")
    # what `kvbudget calibrate --records` prints on stderr: three values at a bound and the
    # search stopped by its 12 simulations
    assert len(cal.warnings()) == 4 and cal.search_stopped == 12
    for said in cal.warnings():
        assert f"warning: {said}" in text
    assert repr(cal).splitlines()[-1] == (
        ".model, .table (14 rows: stage x metric), .start, .fitted, .warnings(), .simulated")
    assert "GPUSpec(" not in repr(cal)
