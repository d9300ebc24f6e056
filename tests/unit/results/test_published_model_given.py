"""``--model`` beside a recording that names its model: the settings line says how the two
stand. Seen in published ``vllm bench serve`` results with no licence (reproduced here, not
copied): github.com/Scicom-AI-Enterprise-Organization/llm-benchmaq at 123eefe1,
``benchmarks/vllm/runpod_h100sxm/Qwen3-8B/*.json`` (``model_id`` "/workspace/models/Qwen3-8B")
and ``benchmarks/vllm/tm-l40s/Qwen3.6-27B/*.json`` (``model_id`` "Qwen/Qwen3.6-27B", no
preset): ``--model Llama-3.1-8B`` on the first was simulated as "model Llama-3.1-8B
(--model)", the recording's Qwen3-8B said nowhere on the settings line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import unwrapped

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _result(tmp_path: Path, model_id: str) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc["model_id"] = doc["tokenizer_id"] = model_id
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("model_id", "model", "said"), [
    ("/workspace/models/Qwen3-8B", "Llama-3.1-8B",
     "(--model; NOT the recording's '/workspace/models/Qwen3-8B', a Qwen3-8B: the server "
     "measured another model than the one simulated)"),
    ("Qwen/Qwen3.6-27B", "Qwen3-32B",
     "(--model, for the recording's 'Qwen/Qwen3.6-27B', which is no preset kvbudget knows)"),
    ("/workspace/models/Qwen3-8B", "Qwen/Qwen3-8B", "(--model), GPU"),
])
def test_a_given_model_is_said_beside_the_recordings(tmp_path: Path, model_id: str, model: str,
                                                      said: str) -> None:
    # Qwen3-32B's KV on one H100 holds less than its 40,960-token context: vLLM (and the
    # simulation) start only with a --max-model-len that fits
    fits = ["--set", "engine.max_model_len=16384"] if model == "Qwen3-32B" else []
    result = CliRunner().invoke(app, ["validate", "--records", str(_result(tmp_path, model_id)),
                                      "--gpu", "H100", "--model", model, *fits, "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    assert said in unwrapped(result.stderr)[0]
