"""``vllm bench serve`` (``benchmarks/benchmark_serving.py``) results of vLLM releases that saved
no ``start_times``: the sends are redrawn, and what that changes is said.

The source: github.com/simon-mo/R1-Benchmark at commit d538cdc9366989e6b356514ff5d5d7ff6be6903e,
``saved-results/v0.8.4/deepseek-r1/h200/2025-04-18/deepseek-r1-h200-04182025/`` (DeepSeek-R1 on
8 H200s: vLLM 0.8.4 at TP8, SGLang 0.4.5.post1 with DP attention, TensorRT-LLM; every file
written by vLLM's client at 10 req/s, ``backend: vllm``, dated April 2025). Those files are not
copied in: each feature is reproduced in the CPU vLLM 0.32.0 fixture with its ``start_times``
and ``latencies`` removed, as vLLM 0.8.4 saved it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recordings import Recording, read_recording

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"


def as_vllm_0_8(tmp_path: Path, **changes: Any) -> Path:
    """The rate-8 fixture as vLLM 0.8.4's benchmark_serving.py saved it: no start_times, no
    latencies (E2E is TTFT + the inter-token times), no endpoint_type nor failed (its
    ``result_json`` keys, 0.8.5 sdist: ``backend`` only; a file with both is 0.11's ``vllm
    bench serve``, whose sends were scaled to end at n / rate), its goodput saved as
    ``"request_goodput:"`` (the R1 files' key, written to 0.8.5: unscaled sends)."""
    doc = json.loads((VLLM / "rate8.json").read_text())
    for key in ("start_times", "latencies", "endpoint_type", "failed"):
        doc.pop(key, None)
    doc["request_goodput:"] = doc.pop("request_goodput")
    doc.update(changes)
    path = tmp_path / "vllm-sharegpt-.json"
    path.write_text(json.dumps(doc))
    return path


def span(rec: Recording) -> float:
    m = rec.measured
    ends = (m["arrival_s"] + m["e2e_s"]).to_numpy(dtype=np.float64)
    return float(np.nanmax(ends) - m["arrival_s"].min())


def test_a_redrawn_span_off_the_files_duration_is_said(tmp_path: Path) -> None:
    # the R1 files span 1 to 7 % longer over the seed-0 draws than their recorded duration
    # (vllm-sharegpt-.json: 82.4 s against 78.0 s), so every measured output tokens/s the
    # comparison showed was that much below the file's own output_throughput, and nothing said
    # the figure came from the redrawn sends
    rec = read_recording(as_vllm_0_8(tmp_path))
    drawn = span(rec)
    rec = read_recording(as_vllm_0_8(tmp_path, duration=drawn * 0.95))
    said = [n for n in rec.notes if "the file's duration is" in n]
    assert len(said) == 1 and "redrawn sends" in said[0] and "-5.0% off the file's" in said[0]
    # a span within 1 % of the duration says nothing
    rec = read_recording(as_vllm_0_8(tmp_path, duration=drawn * 1.005))
    assert not any("the file's duration is" in n for n in rec.notes)


def test_a_capped_runs_span_counts_from_its_sends(tmp_path: Path) -> None:
    # github.com/aurotripathy/vllm-bench FP8-1xL40s--8B-llama-qps-16.0-2025-04-20/ at f504e17:
    # 16 req/s at most 16 in flight, its duration 68.4 s; a request's E2E counts from its send
    # (when a slot freed), not from when it was due, so the span is the sends' (the measured
    # output tokens/s matched the file's; the span from the due times was 16.6 s)
    rec = read_recording(as_vllm_0_8(tmp_path, max_concurrency=1))
    assert rec.stages[0].load == "capped" and rec.stages[0].max_concurrency == 1
    rec = read_recording(as_vllm_0_8(tmp_path, max_concurrency=1, duration=span(rec)))
    assert not any("the file's duration is" in n for n in rec.notes)


def test_recorded_sends_say_nothing_of_the_duration() -> None:
    rec = read_recording(VLLM / "rate8.json")
    assert not any("the file's duration is" in n for n in rec.notes)


def test_a_run_dated_before_vllm_scheduled_asynchronously_says_so(tmp_path: Path) -> None:
    # the R1 files are dated April 2025 (vLLM 0.8.4): their vLLM server scheduled each step
    # after the last, where the simulated vllm engine overlapped them (vLLM 0.32's default),
    # its TTFT a step longer, and nothing said so
    def said(date: str) -> list[str]:
        rec = read_recording(as_vllm_0_8(tmp_path, date=date))
        return [n for n in rec.notes if "async scheduling" in n]

    before = said("20250418-224253")
    assert len(before) == 1 and "dated 2025-04-18" in before[0]
    assert "vLLM had no async scheduling then" in before[0]
    assert "--set engine.async_scheduling=false" in before[0]
    opt_in = said("20251015-101010")
    assert len(opt_in) == 1 and "off unless it ran with --async-scheduling" in opt_in[0]
    assert said("20260120-101010") == []  # vLLM 0.14.0 and later: on by default, as simulated
    assert not any("async scheduling" in n for n in read_recording(VLLM / "rate8.json").notes)
