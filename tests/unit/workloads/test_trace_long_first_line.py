"""A load tool's result passed as a trace is not called invalid JSON because its one line is
longer than the bytes read to tell the format.

vLLM writes its ``--save-result`` JSON on one line: dstack's published results of
github.com/dstackai/benchmarks (excerpt in ``tests/fixtures/recordings/published/``) are 3 MB
lines. ``kvbudget simulate --trace`` on one said "line 1: not valid JSON (Expecting ','
delimiter)": it had parsed only the line's first 64 KiB. The file is valid JSON; the error
now says the line was too long to tell a format from, and still points to
``validate --records``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces.load import RECORDING_HINT, detect_format

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"


def _refusal(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        detect_format(path)
    return str(info.value)


def test_a_long_one_line_result_is_not_called_invalid_json(tmp_path: Path) -> None:
    doc = json.loads((PUBLISHED / "dstack-vllm-405b-fp8-16qps-excerpt.json").read_text())
    doc["generated_texts"] = ["x" * 8000] * len(doc["generated_texts"])  # past 64 KiB
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    assert path.stat().st_size > 1 << 16
    said = _refusal(path)
    assert "not valid JSON" not in said
    assert "its first line runs on past 64 KiB" in said and RECORDING_HINT in said


def test_a_short_broken_line_is_still_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"arrival_s": 0.0, "prompt_tokens" 5}\n')
    assert "not valid JSON" in _refusal(path)


@pytest.mark.parametrize("name", ["inference-perf-otel-simple-chain-excerpt.json",
                                  "inference-sim-jan20-codellama-prefill-1-excerpt.json"])
def test_an_indented_json_document_is_not_called_invalid_json(name: str) -> None:
    # an indented JSON document (inference-perf's OTel replay trace, a GuideLLM report) passed
    # as a trace: its first line, "{" or "[", was parsed alone and said to be
    # "not valid JSON (Expecting property name enclosed in double quotes)", though the file is
    path = PUBLISHED / name
    json.loads(path.read_text())  # valid JSON, over many lines
    said = _refusal(path)
    assert "not valid JSON" not in said
    assert "its first line opens a JSON value that goes on past it" in said
    assert RECORDING_HINT in said


def test_a_truncated_first_line_is_still_invalid_json(tmp_path: Path) -> None:
    # a line cut short opens a value it does not close, but the file is no JSON document
    path = tmp_path / "cut.jsonl"
    path.write_text('{"arrival_s": 0.0, "prompt_tokens": \n{"arrival_s": 1.0}\n')
    said = _refusal(path)
    assert "not valid JSON" in said and "goes on past it" not in said
