"""What a genai-bench experiment says of its server: ``server_gpu_type`` / ``server_gpu_count``
(``--server-gpu-type`` / ``--server-gpu-count``) and ``server_model_tokenizer``.

github.com/basetenlabs/genai-bench ``benchmark_training_job/checkpoint_results_nwxky73/
baseten_training_benchmark/`` at 65ddc5d (Qwen3-30B-A3B-Instruct-2507-FP8 on Baseten, ``--server-gpu-
type H100 --server-gpu-count 1``, ``N(2000,200)/(200,20)`` at concurrency 2 to 64; excerpt: its
metadata and the concurrency-16 run): kvbudget said "GPU H100-SXM (ASSUMED: the recording does not
name its GPU; pass --gpu)" and "tensor_parallel_size 1 (ASSUMED: the recording does not say how
many GPUs served the model ...)" while printing "the file records: ... server_gpu_type=H100,
server_gpu_count=1", and told the run's 16 users, all started at once by genai-bench and so
rebuilt by kvbudget, "share their timestamp ... if the file's clock is that coarse, spread them
(--spread-s 0.101)", advice that would have changed the replayed load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from tests.conftest import unwrapped

EXCERPT = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
           / "genai-bench-baseten-qwen3-30b-excerpt")


def test_the_published_runs_gpu_and_gpu_count_are_read() -> None:
    rec = read_recording(EXCERPT / "experiment_metadata.json")
    assert rec.config["gpu"] == "H100-SXM" and rec.config["tensor_parallel_size"] == 1
    assert rec.config["tokenizer"] == "Qwen/Qwen3-30B-A3B-Instruct-2507"
    assert any(n.startswith("GPU: H100-SXM, for genai-bench's --server-gpu-type H100")
               for n in rec.notes)


def test_rebuilt_sends_are_not_called_a_coarse_clock() -> None:
    rec = read_recording(EXCERPT)
    assert not any("share their timestamp" in n for n in rec.notes)


def _with(tmp_path: Path, **meta: str) -> Path:
    shutil.copytree(EXCERPT, tmp_path / "run")
    path = tmp_path / "run" / "experiment_metadata.json"
    doc = json.loads(path.read_text())
    doc.update(meta)
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("label", "gpu"), [
    ("A100-80G", "A100-80GB"), ("H200", "H200"),
    # an MI300X or MI300A, and the A10 (no preset; the A10G is another card): kept as written,
    # so that the command asks for --gpu
    ("MI300", "MI300"), ("A10", "A10")])
def test_each_gpu_label_is_its_preset_or_kept(tmp_path: Path, label: str, gpu: str) -> None:
    assert read_recording(_with(tmp_path, server_gpu_type=label)).config["gpu"] == gpu


def test_several_gpus_are_said_not_split(tmp_path: Path) -> None:
    rec = read_recording(_with(tmp_path, server_gpu_count="4"))
    assert "tensor_parallel_size" not in rec.config
    assert any(n.startswith("4 GPUs served the model (genai-bench's --server-gpu-count)")
               for n in rec.notes)


@pytest.mark.parametrize(("meta", "code", "said"), [
    ({}, 0, "GPU H100-SXM (the recording's)"),
    ({"server_gpu_type": "MI300"}, 2, "the recording's GPU 'MI300' is no preset"),
])
def test_validate_simulates_the_files_gpu_or_asks(tmp_path: Path, meta: dict[str, str],
                                                  code: int, said: str) -> None:
    path = _with(tmp_path, **meta)
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--model",
                                      "Qwen3-30B-A3B", "--out", str(tmp_path / "v")])
    out = " ".join(unwrapped(result.stderr + result.stdout))
    assert result.exit_code == code, result.output
    assert said in out
    assert "ASSUMED: the recording does not name its GPU" not in out
    assert "ASSUMED: the recording does not say how many GPUs" not in out


@pytest.mark.parametrize(("engine", "said"), [
    # the upstream README's own example: --server-engine "SGLang" --server-version "v0.6.0"
    ("SGLang", "engine sglang (the recording's server, SGLang v0.6.0)"),
    ("vLLM", "engine vllm (the recording's server, vLLM v0.6.0)"),
    ("TRT-LLM", "engine trtllm (the recording's server, TensorRT-LLM v0.6.0)"),
])
def test_validate_simulates_the_files_server_engine(tmp_path: Path, engine: str,
                                                    said: str) -> None:
    path = _with(tmp_path, server_engine=engine, server_version="v0.6.0")
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--model",
                                      "Qwen3-30B-A3B", "--out", str(tmp_path / "v")])
    out = " ".join(unwrapped(result.stderr + result.stdout))
    assert result.exit_code == 0, result.output
    assert said in out and "does not say which server answered" not in out


def test_a_server_kvbudget_does_not_model_is_said(tmp_path: Path) -> None:
    rec = read_recording(_with(tmp_path, server_engine="LlamaCPP"))
    assert "server_engine" not in rec.config
    assert any(n.startswith("the recording's server is LlamaCPP (genai-bench's "
                            "--server-engine), which kvbudget has no model of") for n in rec.notes)
