"""A user's loop on a real recording, command after command (docs/recordings.md sections 2 to
4): ``calibrate --records`` on one ``vllm bench serve`` file of the CPU vLLM's, then the what-if
commands with the file it wrote. What one command said and another left unsaid:

- ``plan`` showed each run's p99 TTFT and TPOT over 20 requests without the word ``simulate``
  and ``compare`` print under theirs (a p99 over 100 or fewer is about the maximum);
- ``calibrate --holdout`` printed its held-out check and wrote a file without it, and the
  commands that use the file said where it came from (``simulate``'s "calibrated from F") but
  not how well it fitted nor what the held-out check said: ``validate --cost-model`` said not
  even where it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.cli.plan import _few_p99_said

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
FIRST = FIXTURES / "vllm-bench-0.32.0" / "rate8.json"  # 20 requests at 8 req/s
TINY = {  # tests/live/tiny_model.py: the model the fixtures' CPU vLLM served
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32",
}


def invoke(*args: str) -> tuple[str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout, res.stderr


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def test_plan_says_its_p99_rests_on_few_requests(tmp_path: Path, model: Path) -> None:
    trace = tmp_path / "trace.csv"
    invoke("trace", "convert", str(FIRST), "--out", str(trace))
    out, _ = invoke("plan", "--trace", str(trace), "--model", str(model), "--gpus", "H100-SXM",
                    "--replicas", "1", "-j", "1", "--out", str(tmp_path / "plan"))
    said = one_line(out)
    assert "ttft/tpot = p99 seconds" in said, said
    assert ("(a p99 over 100 completed requests or fewer, here as few as 20 in a run, lies "
            "between the two largest values, about the maximum, which one request moves)"
            in said), said


def test_plan_says_nothing_of_few_requests_over_more_than_100() -> None:
    runs: list[dict[str, Any]] = [{"interactive_completed": 150, "batch_completed": 0},
            {"interactive_completed": 101.0, "batch_completed": float("nan")}]
    assert _few_p99_said(runs, ["interactive", "batch"]) == ""
    assert "as few as 100 in a run" in _few_p99_said(
        [*runs, {"interactive_completed": 100}], ["interactive"])
