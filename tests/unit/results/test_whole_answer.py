"""Requests a recording shows getting their whole answer in one read are said, whatever tool
wrote it (``results/recorded_whole_answer.py``).

The CPU server and its load tools' clients read many streams in one go: the fixtures made by
AIPerf, inference-perf, GuideLLM, evalscope and vllm bench serve hold requests whose 15 tokens
after the first came within a millisecond or two in all. Each count is computed here from the
tool's own file, not from the reader.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SAID = "less than 100 us apart on average"


def _said(path: Path) -> list[str]:
    return [n for n in read_recording(path).notes if SAID in n]


def test_aiperf_says_its_requests_of_one_read_by_their_inter_token_latency() -> None:
    path = FIXTURES / "aiperf-0.13.0" / "rate8.jsonl"
    measured = fast = 0
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["metadata"]["benchmark_phase"] != "profiling":  # the warm-up is not measured
            continue
        measured += 1
        itl = rec["metrics"].get("inter_token_latency")
        fast += bool(itl and itl["value"] < 0.1)  # ms
    said = _said(path)
    assert 0 < fast < measured
    assert len(said) == 1 and said[0].startswith(f"{fast} of {measured} completed requests")
    assert "(their inter-token times;" in said[0]


def test_inference_perf_says_them_by_its_output_token_times() -> None:
    # TTFT to end_time counts the time after the last token too: by it 10 of these requests
    # were fast; by the per-token times, 11
    path = FIXTURES / "inference-perf-0.7.0" / "concurrent" / "per_request_lifecycle_metrics.json"
    doc = json.loads(path.read_text())
    fast = 0
    for req in doc:
        times = req["info"]["response_metrics"]["output_token_times"]
        fast += (not req["error"] and len(times) >= 2
                 and (times[-1] - times[0]) / (len(times) - 1) < 1e-4)
    said = _said(path)
    assert fast == 11
    assert len(said) == 1 and said[0].startswith(f"{fast} of {len(doc)} completed requests")


@pytest.mark.parametrize("name", ["guidellm-0.2.1/benchmarks.json",
                                  "guidellm-0.8.1/benchmarks.json",
                                  "evalscope-1.14.1/sweep/parallel_2_number_12",
                                  "vllm-bench-0.32.0/rate8.json"])
def test_the_other_tools_say_them_too(name: str) -> None:
    said = _said(FIXTURES / name)
    assert len(said) == 1
    fast, done = (int(x) for x in re.findall(r"^(\d+) of (\d+) completed", said[0])[0])
    assert 0 < fast < done
    assert "their TTFT is about their E2E and their TPOT near 0" in said[0]


@pytest.mark.parametrize("name", ["guidellm-0.8.1/rampup2_concurrent4.json",
                                  "aiperf-0.13.0/concurrency4_ramp1.jsonl",
                                  "vllm-bench-0.32.0/concurrency4.json"])
def test_steady_streams_are_not_said(name: str) -> None:
    assert _said(FIXTURES / name) == []


def test_a_file_without_inter_token_times_is_read_by_ttft_and_e2e(tmp_path: Path) -> None:
    # the generic records format (and llm-load-test, multi-round QA, kvbudget run directories)
    # hold TTFT, E2E and output tokens only: row 2 spent 0.5 ms on its 15 tokens after the
    # first, row 1 streamed them 10 ms apart, row 3 has one token (no TPOT)
    path = tmp_path / "rec.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
                    "0.0,100,16,0.05,0.20\n"
                    "0.1,100,16,0.30,0.3005\n"
                    "0.2,100,1,0.05,0.05\n")
    said = _said(path)
    assert len(said) == 1 and said[0].startswith("1 of 3 completed requests")
    assert "else (E2E - TTFT) over the tokens after the first" in said[0]
