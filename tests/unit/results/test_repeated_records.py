"""A real tool's per-request file with a record written twice (a copy joined to the file, a
collector's retried export): each was read as one request more, its load simulated and its
times measured twice, without a word."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.excerpts import set_excerpt_counts

REC = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _copy(tmp_path: Path, rel: str) -> Path:
    source = REC / rel
    shutil.copytree(source.parent, tmp_path / source.parent.name)
    if rel.startswith("published/"):  # an excerpt: its counts set to its requests
        set_excerpt_counts(tmp_path / source.parent.name)
    return tmp_path / source.parent.name / source.name


@pytest.mark.parametrize(
    "rel",
    [
        "aiperf-0.13.0/rate8.jsonl",
        "aiperf-0.10.0/concurrency4.jsonl",
        "published/aiperf-qwen-concurrency1-excerpt/profile_export.jsonl",
    ],
)
def test_aiperf_record_written_twice_is_refused(tmp_path: Path, rel: str) -> None:
    """AIPerf draws each request's x_request_id (uuid4, aiperf/workers/worker.py): the
    middle line repeated at the end is refused naming both lines."""
    path = _copy(tmp_path, rel)
    lines = path.read_text().splitlines(keepends=True)
    n = len(read_recording(path).measured)
    middle = len(lines) // 2
    path.write_text("".join([*lines, lines[middle]]))
    with pytest.raises(TraceError) as refused:
        read_recording(path)
    assert str(refused.value).startswith(
        f"{path}: line {len(lines) + 1}: field 'metadata.x_request_id': repeats line "
        f"{middle + 1}'s request ("
    ), refused.value
    assert n >= 5


def test_otel_span_exported_twice_is_read_once_and_said(tmp_path: Path) -> None:
    """vLLM's llm_request spans: a line (an export batch) written again is read once, as an
    OTLP exporter's retry would leave it, and said."""
    path = _copy(tmp_path, "vllm-otel-0.32.0/rate8.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    once = read_recording(path)
    batch = sum(
        1
        for rs in json.loads(lines[0])["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
        if sp["name"] == "llm_request"
    )
    path.write_text("".join([*lines, lines[0]]))
    twice = read_recording(path)
    assert len(twice.measured) == len(once.measured)
    said = [n for n in twice.notes if "exported again" in n]
    assert said and said[0].startswith(
        f"{batch} llm_request span{'s' if batch != 1 else ''} exported again (the traceId and spanId of an earlier one; "
        f"the first at line {len(lines) + 1}, seen at line 1)"
    ), twice.notes
    assert not [n for n in once.notes if "exported again" in n]


@pytest.mark.parametrize(
    "rel",
    ["vllm-bench-0.32.0/append.jsonl", "sglang-0.5.9/rate8.jsonl", "sglang-0.5.9/append.jsonl"],
)
def test_a_run_appended_twice_is_refused(tmp_path: Path, rel: str) -> None:
    """vllm bench serve --append-result and SGLang's bench_serving write a run a line: the
    first line written again was read as another run of as many requests."""
    path = _copy(tmp_path, rel)
    lines = path.read_text().splitlines(keepends=True)
    read_recording(path)
    text = "".join(lines)
    path.write_text(text + ("" if text.endswith("\n") else "\n") + lines[0].rstrip("\n"))
    with pytest.raises(TraceError) as refused:
        read_recording(path)
    assert str(refused.value).startswith(
        f"{path}: line {len(lines) + 1}: repeats line 1 in every field"
    ), refused.value
