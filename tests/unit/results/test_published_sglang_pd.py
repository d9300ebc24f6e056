"""An SGLang bench_serving result of a prefill/decode-disaggregated server: its ``server_info``
is the load balancer's, every worker's answer listed under ``prefill`` and ``decode``
(sgl-project/sglang python/sglang/srt/disaggregation/mini_lb.py ``get_server_info``).

Seen in a published sweep with no licence (reproduced in shape here, not copied):
github.com/TonyLi15/sglang-benchmark benchmarks/results/pd_1p1d_n100_in2048_out512_c128.jsonl at
8864250 (SGLang 0.5.6, Qwen2.5-3B-Instruct, one prefill and one decode worker, 128 users). Given
--output-details, kvbudget read it as one aggregated engine: "the recording names no model"
though every worker names it, and, with a --model, the decode worker's KV pool for the whole
server with no word of the split.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def _worker(mode: str) -> dict[str, Any]:
    return {"model_path": "Qwen/Qwen2.5-3B-Instruct", "tp_size": 1, "dp_size": 1,
            "disaggregation_mode": mode, "chunked_prefill_size": 8192,
            "disable_radix_cache": True, "quantization": None, "version": "0.5.6",
            "internal_states": [{"memory_usage": {"token_capacity": 1893103}}]}


def _pd_run(tmp_path: Path, decode: int = 1) -> Path:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    for key in ("model_id", "tokenizer_id", "start_times", "latencies", "date"):
        doc.pop(key, None)
    workers = [_worker("decode")] * decode
    doc.update(backend="sglang", dataset_name="random", total_output_tokens_retokenized=320,
               server_info={"internal_states": [s for w in workers
                                                for s in w["internal_states"]],
                            "prefill": [_worker("prefill")], "decode": workers})
    path = tmp_path / "pd_1p1d_n100_in2048_out512_c128.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    return path


def test_the_workers_model_and_the_split_are_read(tmp_path: Path) -> None:
    rec = read_recording(_pd_run(tmp_path, decode=2), seed=0)
    assert rec.config["model"] == "Qwen/Qwen2.5-3B-Instruct"
    assert rec.config["tensor_parallel_size"] == 1
    assert rec.config["enable_prefix_caching"] is False
    note = next(n for n in rec.notes if "disaggregation" in n)
    assert "1 prefill and 2 decode workers" in note
    assert "not simulated" in note
