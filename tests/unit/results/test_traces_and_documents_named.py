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


# github.com/llm-serving-lab/vllm-benchmark 86449c9 runs/concurrency10.csv and .jsonl: a home-made
# harness's per-request results (its header; two rows of its figures), no send time among them.
# kvbudget told them "missing column 'prompt_tokens' needed by the generic format", as if a
# --column prompt_tokens=input_tokens would read them, though no column gives the send time the
# replay needs next
HARNESS_CSV = (
    "request_id,prompt,ttft_ms,tpot_ms,total_ms,queue_wait_ms,connect_wait_ms,input_tokens,"
    "output_tokens,tokens_per_sec,num_requests_running,num_requests_waiting,kv_cache_usage_perc,"
    "error\n"
    "1,What is PagedAttention?,30951.5,194.17,41067.68,3.55,158.77,15,53,1.29,9.0,0.0,0.0134,\n"
    "s5-r2,Do you offer refunds?,31083.31,197.36,44902.23,4.76,160.6,15,71,1.58,9.0,0.0,0.0149,\n"
)
HARNESS_LINES = [
    {
        "request_id": "1",
        "prompt": "What is PagedAttention?",
        "ttft_ms": 30951.5,
        "tpot_ms": 194.17,
        "itl_ms_list": [133.06, 184.16],
        "total_ms": 41067.68,
        "input_tokens": 15,
        "output_tokens": 53,
        "error": None,
        "queue_wait_ms": 3.55,
    },
    {
        "request_id": "s5-r2",
        "prompt": "Do you offer refunds?",
        "ttft_ms": 31083.31,
        "tpot_ms": 197.36,
        "itl_ms_list": [184.16, 194.49],
        "total_ms": 44902.23,
        "input_tokens": 15,
        "output_tokens": 71,
        "error": None,
        "queue_wait_ms": 4.76,
    },
]


@pytest.mark.parametrize(
    ("name", "unit"), [("concurrency10.csv", "row"), ("concurrency10.jsonl", "line")]
)
def test_per_request_results_without_a_send_time_are_said_to_be_so(
    tmp_path: Path, name: str, unit: str
) -> None:
    path = tmp_path / name
    if unit == "row":
        path.write_text(HARNESS_CSV)
    else:
        path.write_text("".join(json.dumps(line) + "\n" for line in HARNESS_LINES))
    said = (
        f"holds per-request results, one a {unit}, in a layout of no tool kvbudget reads (ttft_ms"
    )
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert said in str(info.value) and "with no send time among their keys" in str(info.value)
    assert "missing column" not in str(info.value)
    res = CliRunner().invoke(app, ["report", str(path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and f"not a run directory: it {said}" in res.stderr, res.stderr


def test_results_with_a_send_time_on_some_lines_keep_the_generic_refusal(tmp_path: Path) -> None:
    # AIBrix's client writes start_time on its streamed requests' lines only: a send time is
    # among the first lines' keys, so a column is what is missing, as the generic format says
    path = tmp_path / "output.jsonl"
    lines = [
        {"prompt_tokens": 217, "output_tokens": 66, "latency": 2.47},
        {
            "prompt_tokens": 244,
            "output_tokens": 77,
            "latency": 3.01,
            "start_time": 10.5,
            "ttft": 0.13,
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert "missing column 'ttft_s'" in str(info.value)
