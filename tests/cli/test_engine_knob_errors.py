"""An ``[engine]`` knob's bad value is named as the user writes it (``engine.NAME`` of ``--set``
and of a scenario's ``[engine]`` table, or the flag typed), as the knobs pydantic checks are.

``--set engine.kv_cache_dtype=int3`` said "kv_cache_dtype must be one of ...", and a scenario
file's "FILE: kv_cache_dtype must be ...", while ``engine.block_size=0`` said
"engine.block_size: ...": the knobs :class:`~kvbudget.simulator.engine_config.EngineConfig`
checks itself (the KV cache's dtype, the knobs of a few choices) lost their table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

DTYPES = "auto, bfloat16, float16, bf16, fp16, half, fp8, fp8_e4m3, fp8_e5m2, got 'int3'"


def _error(*args: str) -> str:
    res = CliRunner().invoke(app, ["simulate", *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # one line, never a traceback
    return lines[0]


@pytest.mark.parametrize(("args", "said"), [
    (["--set", "engine.kv_cache_dtype=int3"],
     f"error: engine.kv_cache_dtype must be one of {DTYPES}"),
    (["--kv-cache-dtype", "int3"], f"error: --kv-cache-dtype must be one of {DTYPES}"),
    (["--set", "engine.preemption_mode=foo"],
     "error: engine.preemption_mode must be 'recompute' or 'swap', got 'foo'"),
])
def test_a_knob_the_engine_checks_is_named_with_its_table(args: list[str], said: str) -> None:
    assert _error(*args) == said


def test_a_scenario_files_knob_is_named_with_its_table(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[engine]\nkv_cache_dtype = "int3"\n')
    assert _error("--scenario", str(scenario)) == (
        f"error: {scenario}: engine.kv_cache_dtype must be one of {DTYPES}")
