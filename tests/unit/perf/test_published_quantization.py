"""The quantization configs of published FP8 and int checkpoints are read, not refused.

dstack's published vLLM results (github.com/dstackai/benchmarks, excerpt in
``tests/fixtures/recordings/published/``) served meta-llama/Llama-3.1-405B-FP8, whose
``config.json`` says ``"quant_method": "fbgemm_fp8"`` (FP8 weights, ``float8_e4m3fn``: vLLM
``FBGEMMFp8Config``); RedHatAI's (Neural Magic's) ``-FP8``, ``-quantized.w8a8`` and
``-quantized.w4a16`` checkpoints say ``"compressed-tensors"`` with the weights' bits and type
under ``config_groups``. Either config passed to ``--model`` was refused ("is not modelled"),
so the run could not be simulated with its model's own file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.models import ModelConfigError, model_from_config
from tests.unit.results.excerpts import excerpt_copy

CONFIGS = Path(__file__).resolve().parents[3] / "perf" / "model_configs"
PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
FBGEMM = {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
          "modules_to_not_convert": ["lm_head"]}


def _config(name: str, quant: dict[str, Any]) -> dict[str, Any]:
    data = json.loads((CONFIGS / f"{name}.json").read_text())
    del data["_kvbudget"]
    return {**data, "quantization_config": quant}


def _compressed(num_bits: int, kind: str, *more: tuple[int, str]) -> dict[str, Any]:
    groups = {f"group_{i}": {"targets": ["Linear"], "weights": {"num_bits": b, "type": t}}
              for i, (b, t) in enumerate(((num_bits, kind), *more))}
    return {"quant_method": "compressed-tensors", "config_groups": groups, "ignore": ["lm_head"]}


@pytest.mark.parametrize(("quant", "dtype"), [
    (FBGEMM, "fp8"), (_compressed(8, "float"), "fp8"), (_compressed(8, "int"), "int8"),
    (_compressed(4, "int"), "int4")])
def test_published_quantizations_are_read(quant: dict[str, Any], dtype: str) -> None:
    model = model_from_config(_config("Llama-3.1-8B", quant), name="m", source="m")
    same = model_from_config(_config("Llama-3.1-8B", {"quant_method": "fp8"} if dtype == "fp8"
                                     else {"quant_method": "gptq", "bits": int(dtype[-1])}),
                             name="m", source="m")
    assert model.weight_dtype == dtype
    assert model.weight_bytes() == same.weight_bytes()


@pytest.mark.parametrize(("quant", "needle"), [
    (_compressed(4, "float"), "config_groups.group_0.weights: 4-bit float weights are not "
                              "modelled"),
    (_compressed(8, "float", (4, "int")), "config_groups: groups of different weights "
                                          "(fp8, int4)"),
    ({"quant_method": "compressed-tensors"}, "config_groups: missing")])
def test_other_compressed_weights_are_refused_by_name(quant: dict[str, Any],
                                                      needle: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        model_from_config(_config("Llama-3.1-8B", quant), name="m", source="/x/config.json")
    assert str(info.value).startswith(f"/x/config.json: quantization_config.{needle}")


def test_the_published_run_validates_with_its_models_config(tmp_path: Path) -> None:
    model = tmp_path / "config.json"
    model.write_text(json.dumps(_config("Llama-3.1-405B", FBGEMM)))
    result = CliRunner().invoke(app, [
        "validate", "--records", str(excerpt_copy(
            PUBLISHED / "dstack-vllm-405b-fp8-16qps-excerpt.json", tmp_path)),
        "--model", str(model), "--gpu", "H100", "-tp", "8", "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    assert "weights bfloat16 (ASSUMED" not in result.stderr.replace("\n  ", " ")
