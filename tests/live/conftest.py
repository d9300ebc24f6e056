"""Session fixtures of the live tests (see ``livevllm.py``): the tiny model and the server.

Tests marked ``live`` are skipped, saying why, when ``KVBUDGET_VLLM_PYTHON`` is unset.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livevllm import HERE, VllmServer, running_vllm, vllm_python


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = vllm_python()
    out = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([python, str(HERE / "tiny_model.py"), str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    with running_vllm(vllm_python(), tiny_model, log) as (server, _):
        yield server
