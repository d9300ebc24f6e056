"""A serving benchmark's result saved with a JSON object kvbudget does not read beside it.

github.com/maty0609/vllm-benchmarks (``vllm_benchmark.py`` at 2513d5b9, results under
``result/`` at c2714666: no licence, so the layout only, figures made here) runs
``vllm.benchmarks.serve.benchmark`` itself and saves its result with a ``server_config``
object: ``gpu_type`` 'RTX 3090 24GB', ``model_root`` 'QuantTrio/Qwen3.5-27B-AWQ' (the
checkpoint the server loaded: AWQ weights), ``vllm_params`` (``gpu_memory_utilization`` 0.95,
``enforce_eager``, ``max_model_len`` 32768). ``kvbudget validate --records`` passed over it
unsaid, its settings line saying "GPU H100-SXM (ASSUMED: the recording does not name its
GPU; pass --gpu)" and nothing naming what the file held; such an object is now named in a
note with its pairs, as the ``--metadata`` pairs kvbudget does not read are."""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.results.recordings import read_recording

SERVER_CONFIG = {
    "vllm_version": "0.18.0",
    "model_id": "Qwen3.5-27B",
    "model_root": "QuantTrio/Qwen3.5-27B-AWQ",
    "model_object": "model",
    "metrics": {"running_requests": 0, "waiting_requests": 0},
    "gpu_type": "RTX 3090 24GB",
    "vllm_params": {
        "gpu_memory_utilization": "0.95",
        "enable_prefix_caching": "true",
        "enforce_eager": "true",
        "max_model_len": 32768,
    },
}


def _result(tmp_path: Path, **extra: object) -> Path:
    out = [683, 297, 668]
    doc = {
        "backend": "openai",
        "model_id": "Qwen/Qwen3-8B",
        "num_prompts": 3,
        "request_rate": "inf",
        "duration": 60.0,
        "completed": 3,
        "failed": 0,
        "input_lens": [603, 1305, 1182],
        "output_lens": out,
        "ttfts": [1.2, 3.5, 4.9],
        "itls": [[0.058] * (n - 1) for n in out],
        "generated_texts": ["x"] * 3,
        "errors": [""] * 3,
        "max_output_tokens_per_s": 180.0,
        "max_concurrent_requests": 3,
        **extra,
    }
    path = tmp_path / "benchmark_Qwen3_5-27B.json"
    path.write_text(json.dumps(doc))
    return path


def test_an_object_beside_the_result_is_named_with_its_pairs(tmp_path: Path) -> None:
    notes = read_recording(_result(tmp_path, server_config=SERVER_CONFIG)).notes
    said = [n for n in notes if n.startswith("the file's server_config (")]
    assert len(said) == 1
    assert "server_config.gpu_type=RTX 3090 24GB" in said[0]
    assert "server_config.model_root=QuantTrio/Qwen3.5-27B-AWQ" in said[0]
    assert "server_config.vllm_params.gpu_memory_utilization=0.95" in said[0]
    assert "not read" in said[0] and "--gpu" in said[0]


def test_a_result_without_one_says_nothing_of_it(tmp_path: Path) -> None:
    notes = read_recording(_result(tmp_path)).notes
    assert not any("server_config" in n for n in notes)
