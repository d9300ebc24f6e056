"""A replay (or serve) against an SGLang server: SGLang names itself in its model list
(``sglang/srt/entrypoints/openai/protocol.py`` ``ModelCard``: ``owned_by: str = "sglang"``),
which kvbudget did not keep, so its run directory, read back, was simulated by vLLM's rules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from kvbudget.cli.recorded import recorded_setup
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.server import discover, engine_of
from kvbudget.results.recordings import read_recording
from tests.unit.results.test_recordings import _replay_dir

SGLANG_MODELS = {"object": "list", "data": [
    {"id": "meta-llama/Llama-3.1-8B-Instruct", "object": "model", "created": 1,
     "owned_by": "sglang", "root": "meta-llama/Llama-3.1-8B-Instruct",
     "max_model_len": 8192}]}


def _discover(models: dict[str, Any]) -> Any:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json=models)
        return httpx.Response(404)

    async def go() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            return await discover(client, ServerTarget("http://127.0.0.1:30000"))

    return asyncio.run(go())


def test_an_sglang_server_names_its_engine() -> None:
    info = _discover(SGLANG_MODELS)
    assert info.server_engine == "sglang"
    assert info.facts()["server_engine"] == "sglang"


@pytest.mark.parametrize("owned", ["vllm", "system", None, 3])
def test_other_servers_record_nothing(owned: Any) -> None:
    # vLLM's own (kvbudget's default engine) is not written: its run files stay as they were
    models = {"data": [{**SGLANG_MODELS["data"][0], "owned_by": owned}]}
    info = _discover(models)
    assert info.server_engine is None and "server_engine" not in info.facts()
    assert engine_of(models["data"][0]) is None


def test_a_replay_of_an_sglang_server_is_simulated_with_its_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192,
              "server_engine": "sglang"}
    run = _replay_dir(tmp_path, {"policy": "unlimited", "policy_params": {},
                                 "kv_capacity_tokens": 32000, "server": server})
    assert read_recording(run).config["server_engine"] == "sglang"
    setup = recorded_setup(run, records_format=None, columns=None, tier="default", seed=0,
                           gpu="H100", model=None, scenario=None, overrides=None,
                           num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                           max_num_batched_tokens=None, cost_model=None, policy=None,
                           params=None)
    assert setup.config.engine_for().name == "sglang"
    assert ", engine sglang (the recording's server, SGLang)" in \
        " ".join(capsys.readouterr().err.split())
