"""The engine simulated for a recording that does not say which server answered, said.

A load tool's file names the client's API (``backend`` ``openai-chat``), not the server behind
it: github.com/moguizhizi/learning_project ``benchmarks/output/qwen2_5_vl_72B/differ/*.json`` at
9239dfc6 (a ``benchmark_serving.py`` fork's results, reproduced here, not copied) ran against
MindIE (its ``--metadata kind=mindie``). Such a file was simulated with vLLM's scheduler and the
settings line said no engine at all, where it says ASSUMED for the TP, the servers, the weights
and the knobs it takes from nothing; nor did it name the file's own ``--metadata`` pairs that
recorded the server (``hardware`` 910B3, ``kind`` mindie, ``env`` TP4PP1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from tests.conftest import unwrapped

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
ASSUMED = (", engine vllm (ASSUMED: the recording does not say which server answered; pass "
           "--engine sglang, tgi or trtllm if it was another)")


def _settings(tmp_path: Path, *flags: str) -> str:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc.update(backend="openai-chat", kind="mindie")
    path = tmp_path / "openai-chat-infqps-Qwen3-8B.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--model", "Qwen3-8B", *flags, "--out",
                                      str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    return unwrapped(result.stderr)[0]


def test_the_default_engine_is_said_as_assumed(tmp_path: Path) -> None:
    assert "GPU H100-SXM (--gpu)" + ASSUMED + ", tensor_parallel_size 1" in _settings(tmp_path)


@pytest.mark.parametrize("flags", [("--engine", "vllm"), ("--set", "engine.name=vllm-swap")])
def test_an_engine_chosen_is_not_said_as_assumed(tmp_path: Path, flags: tuple[str, ...]) -> None:
    assert "ASSUMED: the recording does not say which server" not in _settings(tmp_path, *flags)


def test_metadata_of_the_server_is_named_as_unread(tmp_path: Path) -> None:
    """`--metadata` pairs the run recorded of its server (the published result's hardware,
    kind and env) are named beside the settings line's ASSUMED GPU and engine; the result's own
    text keys and the pairs kvbudget reads (max_tokens) are not."""
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc.update(backend="openai-chat", hardware="910B3", kind="mindie", env="TP4PP1",
               max_tokens="64")
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    notes = [n for n in read_recording(path).notes if "--metadata" in n]
    assert notes == ["the file's --metadata hardware=910B3, kind=mindie, env=TP4PP1: not read "
                     "(kvbudget takes only max_tokens and ignore_eos from it); where they "
                     "describe the server, pass them as --gpu, --tensor-parallel-size, --engine "
                     "or --set fleet.num_replicas=N"]


def test_a_result_without_metadata_has_no_such_note() -> None:
    rec = read_recording(FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json")
    assert not [n for n in rec.notes if "--metadata" in n]
