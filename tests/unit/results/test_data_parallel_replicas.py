"""A recorded server of several data-parallel engines is simulated as that many replicas, one
engine each (a fleet's replica is one engine: kvbudget has no replica of several engines), or
said loudly where the user chose otherwise.

``vllm bench sweep serve`` writes each ``--serve-params`` override into the run's result
(vLLM ``vllm/benchmarks/sweep/serve.py``, ``_update_run_data``): a run at
``data_parallel_size`` 2 was simulated as one engine carrying both engines' load, on one
engine's blocks (its ``num_gpu_blocks_override``, each engine's), the setting only listed as
one "kvbudget does not take from the file"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.recorded import recorded_setup
from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _sweep_run(tmp_path: Path, **server: Any) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc.update({"run_number": 0, **server})
    path = tmp_path / "run=0.json"
    path.write_text(json.dumps(doc))
    return path


def _setup(path: Path, overrides: list[str] | None = None) -> Any:
    return recorded_setup(path, records_format=None, columns=None, tier="default", seed=0,
                          gpu="H100", model="Llama-3.1-8B", scenario=None, overrides=overrides,
                          num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                          max_num_batched_tokens=None, cost_model=None, policy=None,
                          params=None)


def test_a_sweeps_data_parallel_engines_are_replicas(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sweep_run(tmp_path, **{"data-parallel-size": 2, "num_gpu_blocks_override": 4000})
    rec = read_recording(path)
    assert rec.config["num_replicas"] == rec.config["data_parallel_size"] == 2
    note = next(n for n in rec.notes if "vllm bench sweep serve run" in n)
    assert "does not take" not in note
    setup = _setup(path)
    fleet = setup.config.fleet
    assert fleet is not None and fleet.num_replicas == 2 and fleet.router == "least_tokens"
    # each engine's override, less the block vLLM v1 keeps as its null block
    assert setup.config.resolved_num_gpu_blocks() == 3999
    err = " ".join(capsys.readouterr().err.split())
    assert "2 data-parallel engines (vllm --data-parallel-size 2) simulated as 2 replicas each " \
        "with the num_gpu_blocks the sweep overrode (vLLM's --num-gpu-blocks-override is each " \
        "engine's)" in err
    assert "equal share" not in err


def test_one_data_parallel_engine_is_one_engine(tmp_path: Path) -> None:
    rec = read_recording(_sweep_run(tmp_path, data_parallel_size=1))
    assert "num_replicas" not in rec.config
    assert _setup(_sweep_run(tmp_path, data_parallel_size=1)).config.fleet is None


def test_replicas_chosen_against_the_recordings_engines_are_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _sweep_run(tmp_path, data_parallel_size=2)
    setup = _setup(path, overrides=["fleet.num_replicas=1"])
    fleet = setup.config.fleet
    assert fleet is not None and fleet.num_replicas == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "fleet.num_replicas=1 (--set), NOT the recording's 2 replicas of its 2 " \
        "data-parallel engines" in err
    _setup(path, overrides=["fleet.num_replicas=2"])  # the recording's own: nothing to say
    assert "NOT the recording's" not in capsys.readouterr().err
