"""From Python, a recording that names its model is not simulated as the default model a
``SimConfig()`` leaves (the command line takes the recording's, or ``--model``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import kvbudget as kb
from kvbudget.studies.validate import check_recorded_model

FIXTURE = Path(__file__).parents[2] / "fixtures/recordings/guidellm-0.8.1/benchmarks.json"


def test_a_recording_naming_its_model_is_not_simulated_as_the_default() -> None:
    rec = kb.read_recording(FIXTURE)
    qwen = dataclasses.replace(rec, config={**rec.config, "model": "Qwen/Qwen3-32B"})
    with pytest.raises(ValueError, match=r"names model 'Qwen/Qwen3-32B' \(preset Qwen3-32B\), "
                       r"but the config simulates the default Llama-3.1-8B: pass "
                       r"SimConfig\(model='Qwen3-32B'"):
        kb.validate_recording(qwen, kb.SimConfig())
    with pytest.raises(ValueError, match="names model 'Qwen/Qwen3-32B'"):
        kb.calibrate_recording(qwen, kb.SimConfig(), kb.SimConfig().resolved_cost_model())
    # the model given, or the default's own recording, or one naming no preset: no refusal
    check_recorded_model(qwen, kb.SimConfig(model="Qwen3-32B"))
    llama = dataclasses.replace(rec, config={**rec.config,
                                             "model": "meta-llama/Llama-3.1-8B-Instruct"})
    check_recorded_model(llama, kb.SimConfig())
    check_recorded_model(rec, kb.SimConfig())  # 'tiny': no bundled preset, nothing to compare
    # the command line chose the model itself (the recording's, or --model) and says which
    kb.validate_recording(qwen, kb.SimConfig(), model_chosen=True)
