"""A README or a how-to passed where a result file is meant.

Notes on running vLLM (a vllm-ascend how-to found in a public repository) quote the ``vllm
bench serve --save-result`` JSON they got in a ```json block of a ``.md`` file. ``validate
--records`` read such a file as a CSV and refused it for a missing ``prompt_tokens`` column of
"the header ``## vllm-ascend ...``", its first heading: the file misnamed, and the user sent to
map a column of a document. It is now named a prose document, with its fenced blocks counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

ROOT = Path(__file__).parents[3]
RESULT = {
    "date": "20260722-060114",
    "endpoint_type": "openai",
    "backend": "openai",
    "model_id": "./Qwen2.5-VL-3B-Instruct",
    "num_prompts": 200,
    "request_rate": 1.0,
    "completed": 199,
    "failed": 1,
    "request_throughput": 0.97,
    "mean_ttft_ms": 97.5,
}
"""The aggregate result the how-to quotes (some of its keys, its values as published)."""


def _howto(tmp_path: Path) -> Path:
    path = tmp_path / "vllm-ascend.md"
    path.write_text(
        "## vllm-ascend 拉起一个可用的大模型\n\n### 使用 vllm bench 来测试模型性能\n"
        "```\nvllm bench serve --save-result --result-dir ./perf_results/\n```\n\n"
        f"### 测试结果\n```json\n{json.dumps(RESULT)}\n```\n",
        encoding="utf-8",
    )
    return path


def test_a_how_to_quoting_a_result_is_named_a_document(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as info:
        read_recording(_howto(tmp_path))
    said = str(info.value)
    assert "is a prose document (2 fenced code block(s), 1 of them JSON), not a result file" in said
    assert "prompt_tokens" not in said and "--column" not in said


def test_this_projects_readme_is_named_a_document() -> None:
    with pytest.raises(TraceError) as info:
        read_recording(ROOT / "README.md")
    assert "is a prose document" in str(info.value)


@pytest.mark.parametrize("command", ["validate", "convert", "report"])
def test_every_command_names_it(tmp_path: Path, command: str) -> None:
    path = _howto(tmp_path)
    args = {
        "validate": ["validate", "--records", str(path), "--out", str(tmp_path / "v")],
        "convert": ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")],
        "report": ["report", str(path)],
    }[command]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "is a prose document" in said and "Traceback" not in said, said
