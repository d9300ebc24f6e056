"""GuideLLM multi-turn reports: each later turn carries the conversation so far, which the
server's prefix cache serves.

Seen in a published report with no licence, reproduced here in shape (not copied):
github.com/big-yellow-duck/vllm-bench-collection
results/gfx1201/gemma4-26b-a4b-it/tp2-rdna4-fp8blockscalemm-candidate/
agent-multiturn-benchmarks.c1-retry.json at db61386 (GuideLLM 0.7.3, chat completions,
synthetic data ``turns: 8``, 2,048 prompt and 512 output tokens, one stream): its eight
requests are one conversation (``info.conversation_id``, ``info.turn_index`` 0-7) whose prompts
grow 2,061, 4,615, 7,184 ... 20,032 tokens, each holding the turn before. kvbudget simulated
each prompt as its own, prefilling 20,032 tokens for the last turn where the server computed
about 2,600, with no word but the generic one on prompts without contents.
"""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import simulate_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
# the published conversation's prompt tokens (its seventh, not read, between its neighbours)
PROMPTS = [2061, 4615, 7184, 9753, 12323, 14892, 17462, 20032]
TTFT_MS = [588.7, 529.4, 701.0, 856.7, 1039.1, 2128.6, 1363.1, 1400.0]


def _multi_turn_report(tmp_path: Path, conversations: int = 1,
                       prompts: list[int] | None = None) -> Path:
    """GuideLLM 0.6.1's real fixture made a one-stream run of ``conversations`` conversations
    of the published shape: each turn sent when the one before ended, 512 tokens out."""
    doc = json.loads((FIXTURES / "guidellm-0.6.1" / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["config"]["strategy"].update(worker_count=1, max_concurrency=1, streams=1)
    template = bench["requests"]["successful"][0]
    t = float(template["request_start_time"])
    requests = []
    for c in range(conversations):
        for k, (tokens, ttft) in enumerate(zip(prompts or PROMPTS, TTFT_MS, strict=False)):
            req = copy.deepcopy(template)
            req["info"].update(conversation_id=f"conv-{c}", turn_index=k)
            end = t + 55.0
            req["info"]["timings"].update(targeted_start=t, request_start=t,
                                          first_token_iteration=t + ttft / 1e3,
                                          request_end=end)
            req.update(request_start_time=t, request_end_time=end, request_latency=55.0,
                       prompt_tokens=tokens, output_tokens=512,
                       time_to_first_token_ms=ttft)
            req["request_args"] = None  # as published: no request body kept
            req["input_metrics"]["text_tokens"] = tokens
            req["output_metrics"]["text_tokens"] = 512
            requests.append(req)
            t = end
    bench["requests"]["successful"] = requests
    bench["metrics"]["request_totals"]["successful"] = len(requests)
    bench["scheduler_metrics"]["requests_made"].update(successful=len(requests),
                                                       total=len(requests))
    bench["scheduler_metrics"].update(measure_start_time=0.0, measure_end_time=t + 1)
    path = tmp_path / "agent-multiturn-benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


def test_later_turns_share_the_prompt_of_the_turn_before(tmp_path: Path) -> None:
    rec = read_recording(_multi_turn_report(tmp_path, conversations=2))
    w = rec.workload
    assert w.prefix_block_tokens == 16
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    hashes = [w.prefix_hashes[lo:hi].tolist()
              for lo, hi in zip(w.prefix_offsets[:-1], w.prefix_offsets[1:], strict=True)]
    assert [len(h) for h in hashes] == [p // 16 for p in PROMPTS] * 2
    for before, after in pairwise(hashes[:8]):
        assert after[:len(before)] == before  # a turn holds the whole prompt before it
    assert not set(hashes[0]) & set(hashes[8])  # two conversations share nothing
    note = next(n for n in rec.notes if "multi-turn conversations" in n)
    assert note.startswith("14 requests are later turns of 2 multi-turn conversations")


def test_a_later_turn_prefills_only_what_is_new(tmp_path: Path) -> None:
    rec = read_recording(_multi_turn_report(tmp_path))
    # prefill at 1 ms a token, nothing else: a request's TTFT is its uncached prompt
    cost = LinearCostModel(intercept_s=1e-6, per_prefill_token_s=1e-3, per_decode_seq_s=1e-4,
                           per_context_token_s=0.0)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=8000, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=32768,
                                           enable_prefix_caching=True))
    run = simulate_recording(rec, config, cost_model=cost, frontend_overhead_s=0.0)
    ttft = run.records.sort_values("arrival_s")["ttft_s"].to_numpy()
    new = np.array(PROMPTS) - np.array([0] + [p // 16 * 16 for p in PROMPTS[:-1]])
    assert np.allclose(ttft, new * 1e-3, rtol=0.02)  # was each whole prompt: 20 s for the last


@pytest.mark.parametrize("prompts", [[2061, 2061, 2070, 2055], [2061, 4615]])
def test_turns_whose_prompts_do_not_grow_are_not_shared(tmp_path: Path,
                                                        prompts: list[int]) -> None:
    rec = read_recording(_multi_turn_report(tmp_path, prompts=prompts))
    if prompts[-1] < prompts[-2]:  # no history sent: nothing to share, and it is said
        assert rec.workload.prefix_hashes is None
        assert any("do not grow turn by turn" in n for n in rec.notes)
    else:
        assert rec.workload.prefix_hashes is not None


def test_single_turn_reports_get_no_history() -> None:
    rec = read_recording(FIXTURES / "guidellm-0.6.1" / "benchmarks.json")
    assert rec.workload.prefix_hashes is None
    assert not any("multi-turn" in n for n in rec.notes)
