"""``--model`` with a Hugging Face ``config.json`` and ``--tensor-parallel-size`` on the
command line; ``kvbudget presets`` lists the bundled models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kvbudget.perf.models as models_module
from kvbudget.cli.main import app
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import ModelConfigError, bundled_models, get_model, load_model_config

CONFIGS = Path(models_module.__file__).resolve().parent / "model_configs"
runner = CliRunner()


def _llama(**changes: Any) -> dict[str, Any]:
    data = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
    del data["_kvbudget"]
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_cli_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(_llama(model_type="rwkv")))
    for args in (["simulate", "--model", str(bad)], ["compare", "--model", str(tmp_path)]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and str(bad) in lines[0] and "model_type" in lines[0]
    bad.write_text("{not json")
    res = runner.invoke(app, ["simulate", "--model", str(bad)])
    assert res.exit_code == 2 and "not valid JSON" in res.stderr
    with pytest.raises(ModelConfigError, match="no such model config file"):
        load_model_config(tmp_path / "missing.json")


def _trace(tmp_path: Path, n: int = 40) -> Path:
    path = tmp_path / "trace.jsonl"
    rows = [{"id": i, "arrival_s": 0.1 * i, "prompt_tokens": 200 + 10 * i,
             "output_tokens": 20 + i} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(("name", "gpu", "tp"), [
    ("Mixtral-8x7B", "H100-80GB", 2), ("Qwen3-32B", "H100-80GB", 2),
    ("Llama-3.1-70B", "H100-80GB", 4), ("DeepSeek-V2-Lite", "H100-80GB", 1),
])
def test_simulate_a_config_json_with_tensor_parallelism(
    tmp_path: Path, name: str, gpu: str, tp: int
) -> None:
    config = tmp_path / "config.json"
    config.write_text((CONFIGS / f"{name}.json").read_text())
    res = runner.invoke(app, ["simulate", "--model", str(config), "--gpu", gpu, "-tp", str(tp),
                              "--trace", str(_trace(tmp_path)), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["overall"]["completed"] == 40
    model = get_model(str(config))
    blocks = num_gpu_blocks(get_gpu(gpu), model, tensor_parallel_size=tp)
    assert summary["num_gpu_blocks"] == blocks
    assert summary["cost_model"].get("tensor_parallel_size", 1) == tp


def test_presets_lists_bundled_models_with_params_and_kv() -> None:
    res = runner.invoke(app, ["presets"])
    assert res.exit_code == 0
    for name, m in bundled_models().items():
        line = next(line for line in res.stdout.splitlines() if line.startswith(name + " "))
        assert f"{m.kv_bytes_per_token() / 1024:g}"[:4] in line or "MLA" in line


def test_presets_kv_per_token_column_has_one_format() -> None:
    """The models' ``KV KiB/token`` column printed ``72`` and ``48`` (gpt-oss) beside ``128.0``
    and ``30.4``: the tables' figure format drops a float's decimals below 100 where they are
    zero and keeps one above. Every cell has one decimal now, the model's figure."""
    res = runner.invoke(app, ["presets"])
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if "KV KiB/token" in line)
    models = bundled_models()
    # the column before the last (the context): headers of two words do not split as cells
    cells = {line.split()[0]: line.split()[-2] for line in lines[head + 2:head + 2 + len(models)]}
    assert cells.keys() == models.keys()
    for name, m in models.items():
        assert cells[name] == f"{m.kv_bytes_per_token() / 1024:,.1f}", (name, cells[name])
    assert {cells["gpt-oss-20b"], cells["Llama-3.1-8B"]} == {"48.0", "128.0"}




def test_kv_cache_dtype_fp8_halves_the_bytes_of_a_block(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path))
    runs = {}
    for dtype in ("auto", "fp8"):
        res = runner.invoke(app, ["simulate", "--model", "Qwen3-8B", "--kv-cache-dtype", dtype,
                                  "--trace", trace, "--json"])
        assert res.exit_code == 0, res.output
        runs[dtype] = json.loads(res.stdout)
    model, gpu = get_model("Qwen3-8B"), get_gpu("H100-80GB")
    for dtype, summary in runs.items():
        assert summary["num_gpu_blocks"] == num_gpu_blocks(gpu, model, kv_cache_dtype=dtype)
    # the same free memory over blocks of half the bytes
    assert runs["fp8"]["num_gpu_blocks"] in (2 * runs["auto"]["num_gpu_blocks"],
                                             2 * runs["auto"]["num_gpu_blocks"] + 1)
    assert runs["fp8"]["cost_model"]["kv_cache_dtype"] == "fp8"
    res = runner.invoke(app, ["simulate", "--kv-cache-dtype", "fp4", "--trace", trace])
    assert res.exit_code == 2 and "--kv-cache-dtype must be one of" in res.stderr
