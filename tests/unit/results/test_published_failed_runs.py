"""A ``vllm bench serve`` summary whose every request failed. Seen in a published run with no
licence (reproduced here, not copied): github.com/Scicom-AI-Enterprise-Organization/
llm-benchmaq at 123eefe1, ``benchmarks/vllm/runpod_b200/GLM-4.7-FP8/
run_1_TP4_DP2_CTX2048_C100_P100_O128.json``: ``completed`` 0, ``failed`` 100, aggregates
only. kvbudget's refusal said only to run it again with ``--save-detailed``, which would save
100 failures: nothing to validate against."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
               "generated_texts", "errors")


def _summary(tmp_path: Path, completed: int, failed: int) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    for key in PER_REQUEST:
        doc.pop(key, None)
    doc.update(completed=completed, failed=failed)
    path = tmp_path / "run_1_TP4_DP2_CTX2048_C100_P100_O128.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_summary_of_only_failures_says_so(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"--save-detailed; besides, every one of its 100 "
                       r"requests failed \(completed 0\)"):
        read_recording(_summary(tmp_path, 0, 100))


def test_a_summary_with_completed_requests_asks_only_for_them(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as raised:
        read_recording(_summary(tmp_path, 100, 0))
    assert "--save-detailed" in str(raised.value) and "besides" not in str(raised.value)
