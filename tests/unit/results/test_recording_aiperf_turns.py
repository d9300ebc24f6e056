"""AIPerf multi-turn conversations: each later turn carries the conversation so far, which the
server's prefix cache serves (``results/recorded_aiperf_prefix.py`` ``aiperf_history``).

AIPerf 0.13.0's own run (``multiturn3_delay300_concurrency2``, ``make_recording_fixtures.sh
aiperf-chat``: 4 conversations of 3 chat turns, 32-token user messages) has prompts of 48,
127 and 197 tokens in a conversation (the server's count): each holds the one before and its
answer. kvbudget prefilled each as its own prompt (522 tokens for one conversation where the
server computed 197 and what its prefix cache did not hold), with no word of it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import simulate_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
RUN = AIPERF / "multiturn3_delay300_concurrency2.jsonl"


def _metadata(path: Path) -> list[dict[str, object]]:
    return [json.loads(line)["metadata"] for line in path.read_text().splitlines()]


def _hashes(path: Path) -> tuple[list[list[int]], list[int]]:
    """Each request's prefix hashes and prompt tokens, in the file's order."""
    w = read_recording(path).workload
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    assert w.prefix_block_tokens == 16
    by_row = [w.prefix_hashes[lo:hi].tolist()
              for lo, hi in zip(w.prefix_offsets[:-1], w.prefix_offsets[1:], strict=True)]
    row = {int(r): k for k, r in enumerate(w.request_id)}  # a record's row in the workload
    return ([by_row[row[i]] for i in range(len(row))],
            [int(w.prompt_tokens[row[i]]) for i in range(len(row))])


def test_later_turns_share_the_prompt_of_the_turn_before() -> None:
    hashes, prompts = _hashes(RUN)
    meta = _metadata(RUN)
    assert [len(h) for h in hashes] == [p // 16 for p in prompts]
    sessions = sorted({str(m["x_correlation_id"]) for m in meta})
    assert len(sessions) == 4
    for session in sessions:
        turns = sorted((int(str(m["turn_index"])), i) for i, m in enumerate(meta)
                       if m["x_correlation_id"] == session)
        assert [t for t, _ in turns] == [0, 1, 2]
        for (_, a), (_, b) in pairwise(turns):
            assert prompts[b] > prompts[a] and hashes[b][:len(hashes[a])] == hashes[a]
    firsts = [i for i, m in enumerate(meta) if m["turn_index"] == 0]
    assert not set(hashes[firsts[0]]) & set(hashes[firsts[1]])  # conversations share nothing
    note = next(n for n in read_recording(RUN).notes if "multi-turn conversations" in n)
    assert note.startswith("8 requests are later turns of 4 multi-turn conversations "
                           "(metadata.x_correlation_id, turn_index), each sent with the "
                           "conversation so far")


def test_a_later_turn_prefills_only_what_is_new() -> None:
    rec = read_recording(RUN)
    # its requests sent 10 s apart in their recorded order (its closed loop capped by those
    # sends), prefill at 1 ms a token and nothing else: a request's TTFT is its uncached prompt
    w = rec.workload
    (stage,) = rec.stages
    rec = replace(rec, workload=replace(w, arrival_s=np.arange(len(w.arrival_s), dtype=np.float64) * 10.0),
                  stages=(replace(stage, load="capped"),))
    cost = LinearCostModel(intercept_s=1e-6, per_prefill_token_s=1e-3, per_decode_seq_s=1e-6,
                           per_context_token_s=0.0)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=8000, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=32768,
                                           enable_prefix_caching=True))
    run = simulate_recording(rec, config, cost_model=cost, frontend_overhead_s=0.0)
    ttft = run.records.set_index("request_id")["ttft_s"]
    meta = _metadata(RUN)
    _, prompts = _hashes(RUN)
    new = []
    for m, tokens in zip(meta, prompts, strict=True):
        before = [p for n, p in zip(meta, prompts, strict=True)
                  if n["x_correlation_id"] == m["x_correlation_id"]
                  and n["turn_index"] == int(str(m["turn_index"])) - 1]
        new.append(tokens - (before[0] // 16 * 16 if before else 0))
    assert sum(new) == 801 and sum(prompts) == 1425  # was each whole prompt
    simulated = np.array([ttft[i] for i in range(len(meta))])
    assert np.allclose(simulated, np.array(new) * 1e-3, rtol=0.05), simulated


def test_single_turn_runs_get_no_history() -> None:
    # a run whose dataset conversation ids recur (warm-up then profiling) is no conversation
    for name in ("capped8c2.jsonl", "concurrency4.jsonl"):
        rec = read_recording(AIPERF / name)
        assert rec.workload.prefix_hashes is None
        assert not any("multi-turn conversations" in n for n in rec.notes)


def test_a_conversation_sent_again_is_its_own_session(tmp_path: Path) -> None:
    # hand-made from the real run: AIPerf names a dataset conversation again when it sends it
    # again (warm-up, then profiling; capped8c2's 22 records have 20 conversation_id), so the
    # sessions are told apart by x_correlation_id: here all four carry one conversation_id
    lines = RUN.read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    for rec in recs:
        rec["metadata"]["conversation_id"] = "session_000000"
    path = tmp_path / RUN.name
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / RUN.name.replace(".jsonl", "_aiperf.json")).write_text(
        (AIPERF / RUN.name.replace(".jsonl", "_aiperf.json")).read_text())
    assert _hashes(path) == _hashes(RUN)
