"""Fixed-rate sends redrawn as each copy of vLLM's client drew them, whatever its version.

Neither SGLang's ``bench_serving`` nor TensorRT-LLM's ``benchmark_serving.py`` took vLLM PR
#21108's ``get_request`` (every gap drawn ahead, a fixed rate's scaled to end at n / rate):

* SGLang yields the first request, then sleeps ``np.random.exponential(1.0 / request_rate)``
  after each (python/sglang/bench_serving.py ``get_request`` in the 0.5.9 wheel the fixtures
  were made with, lines 2046-2083; python/sglang/benchmark/serving.py at 00f9ec47 and the
  refactored ``BenchmarkRunner`` request generator of python/sglang/benchmark/runner.py at
  4bae336a and cb283045: the same loop); it saves no burstiness;
* TensorRT-LLM's copy (tensorrt_llm/serve/scripts/benchmark_serving.py at 0228a712 and
  f61d71d9, adopted from vLLM's script at 200bbf92) yields the first request, then sleeps
  ``np.random.gamma(shape=burstiness, scale=theta)`` after each.

``burstiness`` inf: vLLM 0.11.1 and later make every gap ``1 / rate`` (vllm/benchmarks/serve.py
``get_request``, ``elif burstiness == float("inf")``: not in 0.11.0's sdist); before, the gamma
draw with an infinite shape is NaN, and neither ``asyncio.sleep(nan)`` nor 0.10's ``if
delay_ts[request_index] > 0`` waits: every request is sent at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recordings import Recording, read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SGLANG = FIXTURES / "sglang-0.5.9"
SCRIPT_0_10 = FIXTURES / "vllm-benchmark-serving-0.10.1.1"
REDRAWN = "no start_times in the file: arrivals redrawn at 8 req/s"


def said(rec: Recording) -> str:
    lines = [n for n in rec.notes if n.startswith(REDRAWN)]
    assert len(lines) == 1
    return lines[0]


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


def test_sglangs_rate_run_is_redrawn_unscaled_the_first_at_once() -> None:
    # SGLang 0.5.9 here: 20 requests at 8 req/s in 2.99 s. Its sends were never scaled, so the
    # redraw's span is its own draw's (seed 0: 3.36 s, the measured tokens/s 11.1 % under the
    # file's, said as the draws'), not pinned to n / rate as a vLLM 0.10 file's is
    doc = json.loads((SGLANG / "rate8.jsonl").read_text())
    assert doc["backend"] == "vllm" and "burstiness" not in doc and "date" not in doc
    rec = read_recording(SGLANG / "rate8.jsonl")
    note = said(rec)
    assert "SGLang's bench_serving sends the first request at once" in note
    assert "never scaled to n / rate" in note and "scaled so the last" not in note
    arrival = np.sort(rec.workload.arrival_s)
    assert arrival[0] == 0.0 and not np.isclose(arrival[-1], len(arrival) / 8.0)
    assert any("-11.1% off the file's (the sends' draws" in n for n in rec.notes)


def test_tensorrt_llms_copy_is_redrawn_unscaled_whatever_its_date(tmp_path: Path) -> None:
    # the 0.10.1.1 script's rate file, which is redrawn scaled as vLLM's, with the key
    # TensorRT-LLM's copy adds (user_throughput): its gaps were drawn after each send
    doc = json.loads((SCRIPT_0_10 / "rate8.json").read_text())
    e2e = [t + sum(i) for t, i in zip(doc["ttfts"], doc["itls"], strict=True)]
    rec = read_recording(write(tmp_path, doc | {"user_throughput": 100.0, "e2els": e2e}))
    assert rec.tool == "tensorrt_llm benchmark_serving"
    note = said(rec)
    assert "TensorRT-LLM's copy sends the first request at once" in note
    assert "scaled so the last" not in note
    assert np.sort(rec.workload.arrival_s)[0] == 0.0


def test_burstiness_inf_from_0_11_1_is_sent_at_constant_gaps(tmp_path: Path) -> None:
    # it was refused as "field 'start_times': missing value", a field the file does not have
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
    for key in ("start_times", "latencies"):
        doc.pop(key)
    assert "failed" in doc and "backend" in doc and "endpoint_type" in doc  # 0.11.1 or later
    rec = read_recording(write(tmp_path, doc | {"burstiness": float("inf")}))
    n = len(doc["ttfts"])
    assert np.allclose(np.sort(rec.workload.arrival_s), np.arange(1, n + 1) / 8.0, rtol=1e-12)
    assert "burstiness inf: constant gaps of 1 / rate" in said(rec)


def test_burstiness_inf_before_0_11_1_sent_everything_at_once(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.10.2" / "rate8.json").read_text())
    rec = read_recording(write(tmp_path, doc | {"burstiness": float("inf")}))
    assert (rec.workload.arrival_s == 0.0).all()
    assert "slept none of: every request at once" in said(rec)
