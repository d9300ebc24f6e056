"""Results in vLLM's serving-benchmark layout written by a script that is not vLLM's nor SGLang's
client.

github.com/ovg-project/kvcached at b47f09ad, ``benchmarks/bench_dgx_spark/results/baseline/
c1.json`` (``workflow_benchmark.py``, its own script): a summary in vLLM's keys (``model_id``,
``max_concurrency``, ``completed``, ``duration``, ``mean_ttft_ms``) with ``backend``
``openai-chat-workflow``, each of its requests a guard model's call, a main model's and the
guard's again. kvbudget said "is a vllm bench serve result without per-request data ...; run
vllm bench serve with --save-result --save-detailed", which no vLLM wrote. The files here are
the real ``vllm bench serve`` 0.32.0 fixture with that one key changed (the published file
itself is not copied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURE = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
           / "concurrency4.json")
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
            "start_times", "latencies", "queue_times")


def written(tmp_path: Path, backend: str, detailed: bool) -> Path:
    doc = json.loads(FIXTURE.read_text())
    doc["backend"] = backend
    if not detailed:
        doc = {k: v for k, v in doc.items() if k not in DETAILED}
    path = tmp_path / "c1.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_summary_of_another_scripts_backend_is_not_called_vllm_bench_serve(
        tmp_path: Path) -> None:
    path = written(tmp_path, "openai-chat-workflow", detailed=False)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert "is a serving-benchmark summary in vllm bench serve's layout, but its backend " \
        "'openai-chat-workflow' is none of vLLM's or SGLang's benchmark clients'" in said
    assert "is a vllm bench serve result" not in said


@pytest.mark.parametrize("backend", ["vllm", "openai-chat", "sglang-oai"])
def test_a_summary_of_a_known_backend_is_said_as_before(tmp_path: Path, backend: str) -> None:
    with pytest.raises(TraceError) as info:
        read_recording(written(tmp_path, backend, detailed=False))
    assert "is a vllm bench serve result without per-request data" in str(info.value)


def test_a_detailed_file_of_another_backend_is_read_and_said(tmp_path: Path) -> None:
    rec = read_recording(written(tmp_path, "openai-chat-workflow", detailed=True))
    said = [n for n in rec.notes if "none of vLLM's or SGLang's benchmark clients'" in n]
    assert len(said) == 1 and "'openai-chat-workflow'" in said[0]
    plain = read_recording(written(tmp_path, "vllm", detailed=True))
    assert not any("benchmark clients'" in n for n in plain.notes)
    assert len(rec.workload.request_id) == len(plain.workload.request_id)
