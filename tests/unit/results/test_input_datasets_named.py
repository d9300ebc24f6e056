"""A load tool's input dataset (prompts to send, no times) passed where a recording is meant:
github.com/rh-aiservices-bu/llm-d-playbook 7a43b29 publishes ``guidellm/shared-prefix-data.json``
(GuideLLM's ``--data``: ``{"data": [{"prompt": ..., "output_tokens_count": 256}, ...]}``) beside
its benchmark job; validate --records told it "cannot tell the recording format (a JSON object of
none of the known tools ...); pass a format (records, run, vllm-bench, guidellm, ...)", none of
which fits, and report "not a run directory (a file, not a directory)"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PROMPT = "You are an advanced AI assistant ... What are the key benefits of containerization?"

DATASETS: dict[str, Any] = {
    # the published file's layout (its prompts cut here)
    "guidellm --data": {
        "data": [
            {"prompt": PROMPT, "output_tokens_count": 256},
            {"prompt": PROMPT[:40], "output_tokens_count": 256},
        ]
    },
    # ShareGPT's (vllm bench serve --dataset-name sharegpt --dataset-path)
    "sharegpt": [
        {
            "id": "a",
            "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}],
        }
    ],
    # a chat dataset of messages
    "messages": [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}],
}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_an_input_dataset_is_named_with_what_to_pass(tmp_path: Path, name: str) -> None:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(DATASETS[name]))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert "is a load tool's input dataset" in said and "not a recording" in said
    assert "pass the result file the tool wrote when it sent them" in said
    assert "cannot tell" not in said


def test_report_names_the_dataset_too(tmp_path: Path) -> None:
    path = tmp_path / "shared-prefix-data.json"
    path.write_text(json.dumps(DATASETS["guidellm --data"]))
    res = CliRunner().invoke(app, ["report", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.stderr
    assert (
        "not a run directory: it is a load tool's input dataset, 2 prompt(s) to send "
        "(under 'data': prompt, output_tokens_count;" in res.stderr
    )


def test_per_request_results_with_a_prompt_are_not_called_a_dataset(tmp_path: Path) -> None:
    # a measured time among the keys: results of an unknown tool, refused as before
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"prompt": PROMPT, "ttft_ms": 120.0, "e2e_ms": 900.0}]))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert "per-request result(s) in a layout of no tool kvbudget reads" in str(info.value)
