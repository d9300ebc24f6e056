"""A file shaped like a GuideLLM report that GuideLLM did not write.

openshift-psap/gemma4-multimodal-bench (commit 44e1168d0439d20eb23f1a55aad1c358bc565249)
publishes ``results/H100-attr/*/*/c*.json``, written by its own ``scripts/mm_bench.py`` ("a
JSON file shaped like GuideLLM's output"): ``benchmarks[].requests.successful`` whose requests
keep only ``prompt_tokens``, ``output_tokens``, ``ttft_ms`` and ``latency_ms``. It was refused
as a broken GuideLLM report ("a successful request without request_start_time"); the shape is
made here by hand (the repository states no licence), with its real keys and first values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

REQUESTS = [(3544, 228.7696769926697, 2662.9405280109495),
            (2748, 175.93884601956233, 2530.2100040134974)]


def _lookalike(tmp_path: Path) -> Path:
    bench = {"start_time": 266416.959794604, "end_time": 266479.177175561,
             "config": {"model": "/models/gemma-4-26B-A4B-it-FP8-Dynamic", "concurrency": 1,
                        "duration_s": 60.0, "max_tokens": 512},
             "requests": {"successful": [{"prompt_tokens": p, "output_tokens": 512,
                                          "ttft_ms": t, "latency_ms": e} for p, t, e in REQUESTS],
                          "errored": []},
             "metrics": {"requests_per_second": {"successful": {"mean": 0.3857442989535749}}}}
    path = tmp_path / "c1.json"
    path.write_text(json.dumps({"benchmarks": [bench]}))
    return path


def test_a_guidellm_lookalike_is_refused_as_not_guidellms(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        read_recording(_lookalike(tmp_path))
    message = str(err.value)
    # said of the file, as the other refusals are (file: what is wrong, what to do), not of
    # the first request's field
    path = tmp_path / "c1.json"
    assert message.startswith(f"{path}: is shaped like a GuideLLM report, but its requests keep")
    assert "field" not in message
    assert "\n" not in message
    assert "not one GuideLLM wrote" in message
    assert "latency_ms, output_tokens, prompt_tokens, ttft_ms" in message
    assert "records format" in message
