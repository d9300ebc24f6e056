"""A ``vllm bench serve`` result dated before vLLM's V1 engine was its default says that its
server, if vLLM, ran V0's defaults, not the vLLM 0.32 ones the simulation takes.

dstack's published results of Llama-3.1-405B-FP8 on 8 H100s (``benchmark_serving.py`` of
November 2024, github.com/dstackai/benchmarks; excerpt in
``tests/fixtures/recordings/published/``) were simulated with prefix caching on and 1024
sequences a step, said only as "vLLM's defaults for the GPU and model": the V0 engine that
served them defaulted to prefix caching off and ``max_num_seqs`` 256 (vLLM ``EngineArgs`` of
November 2024; V1 became the default with vLLM 0.8.0, March 2025)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli.main import app
from kvbudget.results.recorded_vllm_bench_client import V0_NOTE_SAID
from kvbudget.results.recordings import read_recording
from tests.unit.results.excerpts import excerpt_copy

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
DSTACK = PUBLISHED / "dstack-vllm-405b-fp8-16qps-excerpt.json"


def _v0_notes(path: Path) -> list[str]:
    return [n for n in read_recording(path).notes if V0_NOTE_SAID in n]


def test_a_v0_era_run_says_the_v0_defaults(tmp_path: Path) -> None:
    (note,) = _v0_notes(excerpt_copy(DSTACK, tmp_path))
    assert note.startswith("the run is dated 2024-11-09, ")
    assert "prefix caching off, max_num_seqs 256" in note
    assert "--set engine.enable_prefix_caching=false, --max-num-seqs 256" in note


def test_a_v1_era_run_has_no_such_note(tmp_path: Path) -> None:
    doc = json.loads(excerpt_copy(DSTACK, tmp_path).read_text())
    doc["date"] = "20250315-000000"  # the day PR #13726 made V1 vLLM's default
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(doc))
    assert _v0_notes(path) == []


def _said(tmp_path: Path, *flags: str) -> str:
    preset = Path(kvbudget.__file__).parent / "perf" / "model_configs" / "Llama-3.1-405B.json"
    config = json.loads(preset.read_text())
    config["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    model = tmp_path / "config.json"
    model.write_text(json.dumps(config))
    out = tmp_path / "v"
    result = CliRunner().invoke(app, ["validate", "--records", str(excerpt_copy(DSTACK, tmp_path)), "--gpu", "H100",
                                      "-tp", "8", "--model", str(model), *flags,
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    notes = json.loads((out / "validation.json").read_text())["notes"]
    return (result.stderr + "\n".join(notes)).replace("\n  ", " ")


@pytest.mark.parametrize(("flags", "said"), [((), True), (("--engine", "sglang"), False),
                                             (("--engine", "trtllm"), False)])
def test_said_only_where_vllm_is_simulated(tmp_path: Path, flags: tuple[str, ...],
                                           said: bool) -> None:
    assert (V0_NOTE_SAID in _said(tmp_path, *flags)) is said
