"""AIPerf's capped runs (``--request-rate R --concurrency C``) are due when AIPerf issued each
request: its records' ``metadata.credit_issued_ns`` (AIPerf 0.13.0 ``RequestRecord``, "when the
credit was issued by the rate limiter"), not a schedule drawn again (the fixtures were written
by AIPerf 0.13.0 against the CPU vLLM, ``scripts/make_recording_fixtures.sh``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import replay_mode
from kvbudget.studies.validate import simulate_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"


def _metadata(name: str) -> list[dict[str, int]]:
    return [json.loads(line)["metadata"] for line in
            (AIPERF / name).read_text().splitlines() if line.strip()]


def test_aiperf_capped_poisson_run_is_due_when_aiperf_issued_each_request() -> None:
    # --request-rate 8 --concurrency 2 (Poisson): the reader drew the ticks again from the
    # dataset's seed ("AIPerf's draws are not in the file") though every record says when
    # AIPerf issued it; the replay offered each request at a tick AIPerf never had
    meta = _metadata("capped8c2.jsonl")
    issued = np.array([m["credit_issued_ns"] for m in meta], dtype=np.float64)
    start = np.array([m["request_start_ns"] for m in meta], dtype=np.float64)
    origin = min(issued.min(), start.min())
    rec = read_recording(AIPERF / "capped8c2.jsonl")
    assert rec.stages[0].send_times == "issued"
    assert np.allclose(rec.workload.arrival_s, np.sort(issued - origin) * 1e-9, atol=1e-6)
    # the send stays each request's TTFT and E2E origin, on the same clock, after its issue
    sent = rec.measured["arrival_s"].to_numpy()
    assert np.allclose(np.sort(sent), np.sort(start - origin) * 1e-9, atol=1e-6)
    order = np.argsort(sent)
    assert (sent[order] >= rec.workload.arrival_s - 1e-9).all()
    said = replay_mode(rec.stages[0])
    assert "open loop at the times AIPerf issued them (its records' credit_issued_ns)" in said
    note = next(n for n in rec.notes if "credit_issued_ns" in n)
    assert "not at a schedule drawn again" in note and "drawn again with seed" not in note
    assert "the ticks AIPerf skipped then are not in the file" in note


def test_aiperf_capped_run_on_a_fast_server_is_sent_at_aiperfs_own_ticks() -> None:
    # on a server whose requests end well before the next tick, every slot is free at every
    # tick: the simulation sends each request exactly when AIPerf issued it
    rec = read_recording(AIPERF / "capped8c2.jsonl")
    fast = LinearCostModel(intercept_s=0.0005, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                           per_context_token_s=0.0)  # 16 steps of 0.5 ms
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=2048))
    run = simulate_recording(rec, config, cost_model=fast, frontend_overhead_s=0.0)
    sends = np.sort(run.records["arrival_s"].to_numpy())
    assert np.allclose(sends, rec.workload.arrival_s, atol=1e-9)


def test_aiperf_capped_constant_run_is_due_at_its_issues_not_an_ideal_grid() -> None:
    # --request-rate 6 (constant) --concurrency 3 on a loaded client: AIPerf issued its second
    # and third requests 0.505 s after the first (its loop ran late), not at 1/6 and 2/6 s as
    # the grid drawn from the rate said
    meta = _metadata("capped6c3_constant.jsonl")
    issued = np.sort(np.array([m["credit_issued_ns"] for m in meta], dtype=np.float64))
    rec = read_recording(AIPERF / "capped6c3_constant.jsonl")
    due = rec.workload.arrival_s
    assert np.allclose(due - due[0], (issued - issued[0]) * 1e-9, atol=1e-6)
    assert not np.allclose(due - due[0], np.arange(len(due)) / 6.0, atol=1e-3)
    assert rec.stages[0].send_times == "issued"


def test_aiperf_capped_run_without_issue_times_says_its_ticks_are_drawn(tmp_path: Path) -> None:
    # AIPerf before credit_issued_ns: the due times are reconstructed, and the note says so
    lines = (AIPERF / "capped8c2.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines if line.strip()]
    for r in recs:
        del r["metadata"]["credit_issued_ns"]
    (tmp_path / "capped8c2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (tmp_path / "capped8c2_aiperf.json").write_text(
        (AIPERF / "capped8c2_aiperf.json").read_text())
    rec = read_recording(tmp_path / "capped8c2.jsonl")
    assert rec.stages[0].send_times == "redrawn"
    assert any("drawn again with seed 0" in n for n in rec.notes)
