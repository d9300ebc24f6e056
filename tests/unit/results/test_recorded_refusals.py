"""A load tool's file that keeps the server's error text per request (AIPerf, inference-perf):
its refusals for the model's context are read with the one table of every engine's words
(``results.records.CONTEXT_REFUSALS``) and said, never silently dropped. The files are the
real tools' fixtures with one request turned into the refusal its engine answers (the body
verbatim from the engine's source, cited in ``results/records.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbudget.results.recorded_refusals import context_refusal_note
from kvbudget.results.recordings import read_recording
from tests.unit.results.test_published_files import aiperf_first_layout, sglang_details

FIXTURES = Path(__file__).parents[2] / "fixtures" / "recordings"

# TGI v3.3.7's 422 body (router/src/server.rs:2409, 2420-2423; validation.rs:999)
TGI_BODY = json.dumps({"error": "Input validation error: `inputs` tokens + `max_new_tokens` "
                                "must be <= 1024. Given: 1000 `inputs` tokens and 100 "
                                "`max_new_tokens`", "error_type": "validation"})
# SGLang 0.5.23's 400 body (serving_base.py:123-128; tokenizer_manager.py:1349-1351)
SGLANG_BODY = json.dumps({"object": "error", "message": "The input (1025 tokens) is longer "
                          "than the model's context length (1024 tokens).",
                          "type": "BadRequest", "param": None, "code": 400})


def test_inference_perf_context_refusals_are_said(tmp_path: Path) -> None:
    # they were dropped as requests without output and counted with the server's other
    # failures: nothing said the server refused them for its context, nor that TGI refuses
    # what the default simulated engine (vLLM) serves cut
    for f in (FIXTURES / "inference-perf-0.7.0").glob("*.json"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "per_request_lifecycle_metrics.json"
    doc = json.loads(path.read_text())
    doc[-1]["error"] = {"error_type": "ClientResponseError", "error_msg": TGI_BODY}
    doc[-1]["info"]["response_metrics"].update(output_tokens=0, output_token_times=[],
                                               server_usage=None, response_chunks=[])
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts["num_refused_context"] == 1
    note = next(n for n in rec.notes if "refused by the server" in n)
    assert "1 context_length; in TGI's words" in note
    # the words tell the server: simulated by its rules, not by vLLM's unless --set says
    assert rec.config["server_engine"] == "tgi"
    assert "the command line simulates the recording's server by its rules (engine tgi)" in note


def test_aiperf_context_refusals_are_said(tmp_path: Path) -> None:
    path = aiperf_first_layout(tmp_path)
    lines = path.read_text().splitlines()
    refused = json.loads(lines[1])
    refused["error"] = {"code": 400, "type": "Bad Request", "message": SGLANG_BODY}
    refused["metrics"] = {"error_request_count": {"value": 1, "unit": "requests"}}
    path.write_text("\n".join([*lines, json.dumps(refused)]) + "\n")
    rec = read_recording(path)
    assert rec.counts["num_refused_context"] == 1
    note = next(n for n in rec.notes if "refused by the server" in n)
    assert "1 prompt_too_long; in SGLang's words" in note
    assert rec.config["server_engine"] == "sglang"


def test_sglang_bench_serving_context_refusals_are_said(tmp_path: Path) -> None:
    # SGLang's bench_serving keeps "Bad Request: " + the body (0.5.23
    # sglang/benchmark/serving.py:236-239): the refusal was a dropped error, unsaid
    total = json.dumps({"object": "error", "message": "Requested token count exceeds the "
                        "model's maximum context length of 36 tokens. You requested a total of "
                        "40 tokens: 32 tokens from the input messages and 8 tokens for the "
                        "completion. Please reduce the number of tokens in the input messages "
                        "or the completion to fit within the limit.", "type": "BadRequest",
                        "param": None, "code": 400})
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(sglang_details(
        output_lens=[4, 0, 4], ttfts=[0.02, 0.0, 0.02], itls=[[0.01] * 3, [], [0.01] * 3],
        errors=["", "Bad Request: " + total, ""], completed=2)) + "\n")
    rec = read_recording(path)
    assert rec.counts["num_refused_context"] == 1
    note = next(n for n in rec.notes if "refused by the server" in n)
    assert "1 context_length; in SGLang's words" in note
    assert rec.config["server_engine"] == "sglang"
    assert "(engine sglang) unless --engine or --set engine.name chooses another" in note


def test_other_errors_say_nothing() -> None:
    assert context_refusal_note(["", "Bad Request", "timeout", "Model is overloaded"]) == (0, None)
    # vLLM's own refusals: no other simulated engine's rules to point to
    count, note = context_refusal_note(["max_tokens=1025 cannot be greater than "
                                        "max_model_len=1024. Please request fewer output "
                                        "tokens."])
    assert count == 1 and note is not None and "engine.name" not in note
