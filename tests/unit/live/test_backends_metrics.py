"""Parsing Prometheus ``/metrics`` pages of vLLM, llama.cpp and SGLang."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.live.server import server_info
from kvbudget.live.server_metrics import EngineSnapshot, parse_prometheus, snapshot

# trimmed from a vLLM 0.32.0 CPU server started with --num-gpu-blocks-override 10
VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny",reason="capacity"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.8888888888888888
vllm:num_preemptions_total{engine="0",model_name="tiny"} 5.0
vllm:num_preemptions_created{engine="0",model_name="tiny"} 1.7959474933250604e+09
vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",\
engine="0",gpu_memory_utilization="0.92",kv_cache_size_tokens="1280",num_cpu_blocks="None",\
num_gpu_blocks="10",num_gpu_blocks_override="10",sliding_window="None"} 1.0
"""


def test_vllm_page() -> None:
    snap = snapshot(VLLM)
    assert snap.num_running == 3 and snap.num_waiting == 2
    assert snap.num_preemptions_total == 5
    assert snap.num_gpu_blocks == 10 and snap.block_size == 128
    # one null block is never allocated: 9 usable blocks of 128 tokens
    assert snap.usable_blocks == 9 and snap.kv_capacity_tokens == 1152
    assert snap.kv_used_tokens() == 1024
    assert snap.enable_prefix_caching is None and snap.kv_cache_dtype == "auto"
    caching = snapshot(VLLM.replace('cache_dtype="auto"', 'cache_dtype="fp8",'
                                    'enable_prefix_caching="False"'))
    assert caching.enable_prefix_caching is False and caching.kv_cache_dtype == "fp8"


def test_two_engines_add_up() -> None:
    """Two data-parallel engines of 101 blocks each, as vLLM 0.32.0's /metrics shows them:
    each engine's ``cache_config_info`` carries the front end's one CacheConfig, whose
    ``num_gpu_blocks`` is the sum over the engines (v1/engine/core_client.py
    ``_apply_ready_response``), 202 on both series: 200 usable blocks (one null block each),
    not 402."""
    text = "\n".join([
        'vllm:num_requests_running{engine="0"} 2',
        'vllm:num_requests_running{engine="1"} 3',
        'vllm:kv_cache_usage_perc{engine="0"} 0.5',
        'vllm:kv_cache_usage_perc{engine="1"} 1.0',
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="202"} 1',
        'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="202"} 1',
    ])
    snap = snapshot(text)
    assert snap.num_running == 5 and snap.num_engines == 2
    assert snap.num_gpu_blocks == 202 and snap.kv_capacity_tokens == 200 * 16
    assert snap.kv_used_tokens() == round(0.75 * 3200)
    # figures that differ are each engine's own (no vLLM 0.32.0 page): added up
    differ = snapshot(text.replace('engine="1",num_gpu_blocks="202"',
                                   'engine="1",num_gpu_blocks="102"'))
    assert differ.num_gpu_blocks == 304 and differ.kv_capacity_tokens == 302 * 16
    # each engine's figure is kept, for a reader to see that they differ
    assert snap.num_gpu_blocks_by_engine == (202, 202)
    assert differ.num_gpu_blocks_by_engine == (202, 102)
    assert snapshot(VLLM).num_gpu_blocks_by_engine == ()


DP2 = Path(__file__).parents[2] / "fixtures" / "metrics" / "vllm-0.32.0-cpu-dp2.prom"


def test_a_real_data_parallel_page_tells_the_sum_on_each_engine() -> None:
    """A vLLM 0.32.0 of 2 data-parallel engines of 4096 blocks each (its log: "CPU KV cache
    size: 524,288 tokens" per engine) tells 8192, their sum, on each engine's series: read as
    8192 blocks over 2 engines, each engine's figure kept for a run directory's ``server``."""
    snap = snapshot(DP2.read_text())
    assert (snap.num_engines, snap.num_gpu_blocks, snap.block_size) == (2, 8192, 128)
    assert snap.num_gpu_blocks_by_engine == (8192, 8192)
    assert snap.kv_capacity_tokens == (8192 - 2) * 128
    assert snap.num_running == 3 and snap.num_waiting == 0
    facts = server_info("tiny", 1024, None, snap).facts()
    assert facts["num_engines"] == 2 and facts["num_gpu_blocks_by_engine"] == [8192, 8192]
    assert "num_gpu_blocks_by_engine" not in server_info("tiny", 1024, None,
                                                         snapshot(VLLM)).facts()


def test_older_vllm_and_other_servers() -> None:
    old = snapshot('vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
                   'vllm:num_preemptions_total{model_name="m"} 7\n')
    assert old.kv_usage == 0.25 and old.num_preemptions_total == 7
    assert old.kv_capacity_tokens is None and old.kv_used_tokens() is None
    assert old.kv_used_tokens(1000) == 250
    llama = snapshot("# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent\n"
                     "llamacpp:kv_cache_usage_ratio 0.5\nllamacpp:requests_processing 2\n"
                     "llamacpp:requests_deferred 1\n")
    assert (llama.kv_usage, llama.num_running, llama.num_waiting) == (0.5, 2, 1)
    sglang = snapshot('sglang:max_total_num_tokens{model_name="m"} 5000\n'
                      'sglang:token_usage{model_name="m"} 0.1\n'
                      'sglang:num_running_reqs{model_name="m"} 4\n')
    assert sglang.kv_capacity_tokens == 5000 and sglang.kv_used_tokens() == 500


def test_parser_details() -> None:
    text = ('m{a="x\\"y",b="1,2"} 1.5 1700000000\n'
            "plain 2\n# comment\n\ngarbage line here\nbad{} notanumber\n"
            'n{le="+Inf"} +Inf\n')
    parsed = parse_prometheus(text)
    assert parsed["m"] == [({"a": 'x"y', "b": "1,2"}, 1.5)]
    assert parsed["plain"] == [({}, 2.0)]
    assert "bad" not in parsed and "garbage" not in parsed
    assert parsed["n"][0][1] == float("inf")
    empty = snapshot("")
    assert empty == EngineSnapshot(None, None, None, None, None, None)


@pytest.mark.parametrize("blocks", ["None", "0", "x"])
def test_unknown_block_count(blocks: str) -> None:
    snap = snapshot(f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="{blocks}"}} 1\n')
    assert snap.kv_capacity_tokens is None
