"""A recording's model named by the folder its server loaded, as published files name it.

github.com/bowenwan6/sglang-vllm-profiler ``experiments/phase1/raw/*_sglang-oai_rep*.json`` at
454fdb0a (SGLang ``bench_serving`` lines, reproduced here, not copied): ``server_info.model_path``
is the Hugging Face hub cache's ``/root/.cache/huggingface/hub/models--Qwen--Qwen3-VL-8B-Instruct
/snapshots/0c351dd0...``. Such a folder of a model kvbudget bundles (``models--Qwen--Qwen3-8B``)
was refused as "the recording's model ... is not a bundled preset: pass --model", and so was a
folder given with a trailing ``/`` (``/models/Qwen3-8B/``), whose last part read as empty."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.models import resolve_model_name
from tests.conftest import unwrapped

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SNAPSHOT = ("/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/"
            "0c351dd01ed87e9c1b53cbc748cba10e6187ff3b")


@pytest.mark.parametrize(("name", "preset"), [
    (SNAPSHOT, "Qwen3-8B"),
    (SNAPSHOT + "/", "Qwen3-8B"),
    ("/root/.cache/huggingface/hub/models--meta-llama--Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("/models/Qwen3-8B/", "Qwen3-8B"),
    ("Qwen3-8B/", "Qwen3-8B"),
])
def test_a_served_folder_resolves_to_the_model_it_holds(name: str, preset: str) -> None:
    assert resolve_model_name(name) == preset


@pytest.mark.parametrize("name", [
    "/root/.cache/huggingface/hub/models--Qwen--Qwen3-VL-8B-Instruct/snapshots/0c351dd0",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B-FP8/snapshots/0c351dd0", "/",
])
def test_a_folder_of_another_model_resolves_to_none(name: str) -> None:
    assert resolve_model_name(name) is None


def test_the_settings_line_says_the_folder_it_resolved(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    doc["model_id"] = doc["tokenizer_id"] = SNAPSHOT
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    assert f"model Qwen3-8B (the recording's '{SNAPSHOT}')" in unwrapped(result.stderr)[0]


# github.com/anud18/qwen36-vllm-aiperf-benchmark results/nvfp4/cf_llama31_agent/agent_flat/c1/
# profile_export_aiperf.json at f5ecc84c (AIPerf 0.10.0): the run's --model is the served name
# 'Llama-3.1-8B-Instruct-optimumxt', no preset, and its --tokenizer is
# 'NousResearch/Meta-Llama-3.1-8B-Instruct'. The refusal said only "is not a bundled preset:
# pass --model ..." (no near name either), though the file's tokenizer names the preset; it
# now says so, as a hint: a tokenizer is not the model, so nothing is simulated in its place.
@pytest.mark.parametrize(("tokenizer", "said"), [
    ("NousResearch/Meta-Llama-3.1-8B-Instruct",
     " (its tokenizer, 'NousResearch/Meta-Llama-3.1-8B-Instruct', is the Llama-3.1-8B "
     "preset's): pass --model"),
    ("/tmp/tokenizer-dir", " is not a bundled preset: pass --model"),
])
def test_an_unknown_served_name_is_told_the_files_tokenizer(tmp_path: Path, tokenizer: str,
                                                            said: str) -> None:
    src = FIXTURES / "aiperf-0.13.0"
    summary = json.loads((src / "concurrency4_aiperf.json").read_text())
    summary["input_config"]["models"]["items"] = [{"name": "Llama-3.1-8B-Instruct-optimumxt"}]
    summary["input_config"]["tokenizer"] = {"name": tokenizer}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    path = tmp_path / "profile_export.jsonl"
    path.write_text((src / "concurrency4.jsonl").read_text())
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--gpu", "H100",
                                      "--out", str(tmp_path / "v")])
    assert result.exit_code == 2, result.output
    line = " ".join(unwrapped(result.stderr))
    assert "the recording's model 'Llama-3.1-8B-Instruct-optimumxt'" in line
    assert said in line
