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


JSON_LINES: dict[str, list[dict[str, Any]]] = {
    # GuideLLM's --data of a .jsonl file (the published prompts, one a line)
    "guidellm --data .jsonl": DATASETS["guidellm --data"]["data"],
    # vllm bench serve --dataset-name custom: CustomDataset reads a "prompt" a line
    # (vllm/benchmarks/datasets.py CustomDataset, its docstring: a JSONL file, {"prompt": ...} a line)
    "vllm custom": [{"prompt": PROMPT}, {"prompt": PROMPT[:40]}],
    # ShareGPT's conversations, one a line; a file of one line among them
    "sharegpt .jsonl": DATASETS["sharegpt"],
}


@pytest.mark.parametrize("name", sorted(JSON_LINES))
def test_a_json_lines_dataset_is_named_by_validate_and_trace_convert(
    tmp_path: Path, name: str
) -> None:
    # validate --records and trace convert told it "cannot tell the recording format (a JSON
    # object of none of the known tools ...)" and "cannot tell the trace format from the first
    # record (keys: conversations); pass a format", none of which fits
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in JSON_LINES[name]))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert "is a load tool's input dataset, prompts to send, one a JSON object (" in str(info.value)
    res = CliRunner().invoke(app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 2, res.stderr
    assert "is a load tool's input dataset" in res.stderr and "cannot tell" not in res.stderr
    assert "pass the result file the tool wrote when it sent them" in res.stderr
    assert not (tmp_path / "t.csv").exists()


def test_a_json_lines_trace_with_prompts_still_converts(tmp_path: Path) -> None:
    # the generic format's records (arrival_s, token counts) beside a prompt: a trace, read
    path = tmp_path / "trace.jsonl"
    rows = [
        {"arrival_s": i, "prompt_tokens": 10, "output_tokens": 5, "prompt": "hi"} for i in range(2)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    res = CliRunner().invoke(app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.stderr


# GuideLLM's --data of a CSV file: the header of github.com/Dorsivan/guidellm-example c902efa
# datasets/prompts.csv (prompt,output_tokens_count), its rows written here; validate told it
# "missing column 'prompt_tokens' needed by the generic format", as if a --column would map one,
# trace convert "cannot tell the trace format from the header ...; pass a format", report "not a
# run directory (a file, not a directory)"
CSV_DATASET = (
    'prompt,output_tokens_count\n"Explain transfer learning.",256\n"Write a binary search.",128\n'
)


def test_a_csv_dataset_is_named_by_validate_trace_convert_and_report(tmp_path: Path) -> None:
    path = tmp_path / "prompts.csv"
    path.write_text(CSV_DATASET)
    said = (
        "is a load tool's input dataset, prompts to send, one a row (prompt, output_tokens_count;"
    )
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert said in str(info.value)
    runner = CliRunner()
    res = runner.invoke(app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 2 and said in res.stderr and "cannot tell" not in res.stderr
    res = runner.invoke(app, ["report", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and f"not a run directory: it {said}" in res.stderr, res.stderr


def test_a_csv_with_a_prompt_column_and_mapped_columns_is_read(tmp_path: Path) -> None:
    # a records CSV whose columns the user maps (--column) is read, its prompt text left aside
    # (its header alone, no time named, is a dataset's);
    # one holding the generic format's columns is a trace, converted
    path = tmp_path / "requests.csv"
    path.write_text("sent,prompt,in,out,t1,t2\n0.0,hi,10,5,0.1,0.5\n1.0,yo,12,6,0.1,0.6\n")
    columns = {
        "arrival_s": "sent",
        "prompt_tokens": "in",
        "output_tokens": "out",
        "ttft_s": "t1",
        "e2e_s": "t2",
    }
    assert len(read_recording(path, columns=columns).workload.prompt_tokens) == 2
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prompt\n0,10,5,hi\n1,12,6,yo\n")
    res = CliRunner().invoke(
        app, ["trace", "convert", str(trace), "--out", str(tmp_path / "t.csv")]
    )
    assert res.exit_code == 0, res.stderr
