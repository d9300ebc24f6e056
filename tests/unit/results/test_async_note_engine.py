"""The note on a ``vllm bench serve`` result dated before vLLM 0.14.0 (async scheduling off by
default then) is said only where the simulated engine is vLLM's and schedules asynchronously.

The note tells the user the simulated vllm engine overlaps its steps "unless --set
engine.async_scheduling=false"; simulating the same file with ``--engine sglang`` or
``trtllm`` (whose overlap schedulers are their own, with no vLLM flag) still printed it, about
an engine not simulated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_vllm_bench_client import ASYNC_NOTE_SAID

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"


def _validate(tmp_path: Path, *flags: str) -> str:
    doc = json.loads((VLLM / "rate8.json").read_text())
    doc["date"] = "20250418-224253"  # simon-mo/R1-Benchmark's vLLM 0.8.4 results' day
    path = tmp_path / "vllm-10qps.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "v"
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100-80GB",
                                      "--model", "Llama-3.1-8B", *flags, "--out", str(out)])
    assert result.exit_code == 0, result.output
    notes = json.loads((out / "validation.json").read_text())["notes"]
    return result.stderr + "\n".join(notes)


@pytest.mark.parametrize("flags", [(), ("--engine", "vllm")])
def test_said_where_vllm_is_simulated_with_async_scheduling(tmp_path: Path,
                                                           flags: tuple[str, ...]) -> None:
    said = _validate(tmp_path, *flags).replace("\n  ", " ")
    assert ASYNC_NOTE_SAID in said and "engine.async_scheduling=false" in said


@pytest.mark.parametrize("flags", [("--engine", "sglang"), ("--engine", "trtllm"),
                                   ("--set", "engine.async_scheduling=false")])
def test_not_said_of_an_engine_it_does_not_describe(tmp_path: Path,
                                                    flags: tuple[str, ...]) -> None:
    said = _validate(tmp_path, *flags).replace("\n  ", " ")
    assert "async scheduling on by default" not in said
