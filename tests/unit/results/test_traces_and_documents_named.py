"""Files that are no recording, given to validate --records (and report), said for what they are.

A trace one of kvbudget's trace formats reads holds requests to send, none measured: Mooncake's
(github.com/kvcache-ai/Mooncake a2a4b18 ``FAST25-release/traces/conversation_trace.jsonl``) was
told "cannot tell the recording format ...; pass a format (records, run, ...)", an Azure trace
to map its TIMESTAMP column as arrival_s. A run's JSON document whose totals share a generic
column's name (github.com/sgl-project/sglang ec0eaf2 ``benchmark/kernels/moe_tp_ep/results/
a3-2026-09-16/e2e/deepep_r1_in1024.json``: ``output_tokens`` beside a ``per_request`` list of
``ttft_ms, total_ms, tpot_ms, output_tokens``, indented over many lines) was read as generic
records and told "line 1: not valid JSON", though it is valid JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

# the published trace's layout (its first two lines' figures, hash_ids cut)
MOONCAKE = (
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}\n'
    '{"timestamp": 3000, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14]}\n'
)
# the Azure LLM inference trace's header (AzurePublicDataset), one row written here
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [("conversation_trace.jsonl", MOONCAKE, "mooncake"), ("azure.csv", AZURE, "azure")],
)
def test_a_trace_given_as_a_recording_is_said_to_be_one(
    tmp_path: Path, name: str, text: str, fmt: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    said = f"is a trace of the {fmt} format (requests to send, none with a measured TTFT or E2E)"
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert said in str(info.value) and "kvbudget simulate --trace" in str(info.value)
    runner = CliRunner()
    res = runner.invoke(app, ["report", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and f"not a run directory: it {said}" in res.stderr, res.stderr
    # trace convert still reads it as the trace it is
    res = runner.invoke(app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.csv")])
    assert res.exit_code == 0, res.stderr


def test_a_run_document_over_many_lines_is_not_read_as_generic_records(
    tmp_path: Path,
) -> None:
    doc = {
        "input_len": 1024,
        "output_len": 64,
        "requests": 16,
        "concurrency": 4,
        "wall_seconds": 29.93,
        "output_tokens": 1024,
        "throughput": 34.2,
        "per_request": [
            {"ttft_ms": 430.8, "total_ms": 7570.6, "tpot_ms": 113.3, "output_tokens": 64},
            {"ttft_ms": 539.8, "total_ms": 7570.7, "tpot_ms": 111.6, "output_tokens": 64},
        ],
        "ttft_ms_median": 422.0,
        "ttft_ms_p95": 555.2,
    }
    path = tmp_path / "deepep_r1_in1024.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert "not valid JSON" not in said
    assert "holds 2 per-request result(s) in a layout of no tool kvbudget reads (under " in said
    assert "with no send time among their keys" in said


def test_a_generic_record_with_hash_ids_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    rows = [
        {
            "arrival_s": i,
            "prompt_tokens": 600,
            "output_tokens": 5,
            "ttft_s": 0.1,
            "e2e_s": 0.5,
            "hash_ids": [1, 2 + i],
        }
        for i in range(2)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(read_recording(path).workload.prompt_tokens) == 2
