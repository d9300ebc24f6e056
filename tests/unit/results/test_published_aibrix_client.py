"""A JSON-lines file with the generic format's workload columns but none of its measurement
columns, passed to ``--records``.

github.com/vllm-project/aibrix at 9f60e632 committed ``benchmarks/client/output.jsonl``, what its
``benchmarks/client/client.py`` writes: per request ``prompt_tokens``, ``output_tokens``,
``latency`` and, for streamed requests only, ``start_time``, ``ttft`` and ``tpot`` (its first 2
lines are a non-streamed run's, without them). ``kvbudget validate --records`` on it ended in a
traceback (``UnboundLocalError: cannot access local variable 'col'`` in
``workloads/traces/_jsonl.py``): the records reader asked the JSON-lines reader for no column,
since the file has none of ``ttft_s``, ``e2e_s``, ``status``, ``stage``, ``id``, on the path a
file takes when its texts hold an emoji (``json.dumps`` writes it as a surrogate pair,
``\\ud83d\\ude00``, which the plain reader leaves to Arrow) or when it is over
``SMALL_JSONL_BYTES``. The lines here are of the same shape, texts cut, one with an emoji."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces._files import file_facts
from kvbudget.workloads.traces._jsonl import SMALL_JSONL_BYTES, read_jsonl_columns

LINES = [
    {"input": [{"role": "user", "content": "x"}], "output": "y", "prompt_tokens": 217,
     "output_tokens": 66, "total_tokens": 283, "latency": 2.47, "throughput": 26.7},
    {"input": [{"role": "user", "content": "x"}], "output": "y", "prompt_tokens": 244,
     "output_tokens": 77, "total_tokens": 321, "latency": 3.01, "throughput": 25.6,
     "start_time": 10199141.59, "ttft": 0.13, "tpot": 0.037},
]


def test_a_records_file_without_measurements_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "output.jsonl"
    lines = [LINES[0], {**LINES[1], "output": "sure \N{GRINNING FACE}"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "\\ud83d" in path.read_text()
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(f"{path}: line 1: field 'ttft_s': missing column 'ttft_s' needed by "
                           "the records format")
    assert "\n" not in said


def test_the_json_lines_reader_reads_no_column_when_asked_none(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    row = json.dumps({"a": 1, "text": "z" * 1000}) + "\n"
    rows = SMALL_JSONL_BYTES // len(row) + 1
    path.write_text(row * rows)
    columns = read_jsonl_columns(file_facts(path), {}, fmt="records", required=[])
    assert columns.num_rows == rows and not columns.numbers and not columns.labels
