"""A load tool's file that keeps the server's own refusal text tells which server it was:
each engine's words for a refusal of the model's context are its own
(``results.records.CONTEXT_REFUSALS``). Such a recording was simulated by vLLM's rules, the
note asking for ``--set engine.name=tgi`` to undo the substitution; now it is simulated with
the engine of the server its words name, said on the settings line, unless one is chosen."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.recorded import recorded_setup
from kvbudget.results.recorded_refusals import context_refusals
from tests.unit.results.test_recorded_refusals import FIXTURES, SGLANG_BODY, TGI_BODY

VLLM_WORDS = "max_tokens=1025 cannot be greater than max_model_len=1024. Please request fewer " \
    "output tokens."


def _inference_perf(tmp_path: Path, body: str) -> Path:
    for f in (FIXTURES / "inference-perf-0.7.0").glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "per_request_lifecycle_metrics.json"
    doc = json.loads(path.read_text())
    doc[-1]["error"] = {"error_type": "ClientResponseError", "error_msg": body}
    doc[-1]["info"]["response_metrics"].update(output_tokens=0, output_token_times=[],
                                               server_usage=None, response_chunks=[])
    path.write_text(json.dumps(doc))
    return path


def _setup(path: Path, engine: str | None = None) -> Any:
    return recorded_setup(path, records_format=None, columns=None, tier="default", seed=0,
                          gpu="H100", model="Llama-3.1-8B", scenario=None, overrides=None,
                          num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                          max_num_batched_tokens=None, cost_model=None, policy=None,
                          params=None, engine={"name": engine})


def test_the_servers_words_pick_its_engine(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    setup = _setup(_inference_perf(tmp_path, TGI_BODY))
    assert setup.config.engine_for().name == "tgi"
    assert ", engine tgi (the recording's server, TGI)" in \
        " ".join(capsys.readouterr().err.split())
    assert _setup(_inference_perf(tmp_path, TGI_BODY), engine="vllm").config \
        .engine_for().name == "vllm"
    assert "engine vllm (--engine; NOT the recording's server, TGI" in \
        " ".join(capsys.readouterr().err.split())


def test_vllms_words_and_mixed_words_pick_nothing(tmp_path: Path) -> None:
    assert context_refusals([VLLM_WORDS])[2] is None
    assert context_refusals([TGI_BODY, SGLANG_BODY])[2] is None  # no one server's
    assert context_refusals([TGI_BODY, "timeout", ""])[2] == "tgi"
    assert _setup(_inference_perf(tmp_path, VLLM_WORDS)).config.engine_for().name == "vllm"
