"""AIPerf's warm-up phase at a load of its own (``--warmup-concurrency``,
``--warmup-request-rate``).

AIPerf 0.13.0 runs the warm-up requests as a phase before the profiling one, at the warm-up's
own load where given, and the summary keeps both phases (``input_config.phases``). The warm-up
records were read into the profiling stage: a closed profiling loop of 4 users replayed a
warm-up of 1 user 4 at a time. The fixture is a real run (``scripts/make_recording_fixtures.sh
aiperf-warmup``: 4 warm-up requests from 1 user, then 10 from 4 users, against the CPU vLLM of
the live tests).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from kvbudget.cli.recorded import recording_headline
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import served_refusals, simulate_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
RUN = AIPERF / "concurrency4_warmup4c1.jsonl"
SUMMARY = AIPERF / "concurrency4_warmup4c1_aiperf.json"


def with_phases(tmp_path: Path, warmup: dict[str, object]) -> Path:
    """The run with its warm-up phase's settings replaced by ``warmup``."""
    shutil.copy(RUN, tmp_path / RUN.name)
    summary = json.loads(SUMMARY.read_text())
    phases = summary["input_config"]["phases"]
    phases[0] = {**phases[0], **warmup}
    (tmp_path / SUMMARY.name).write_text(json.dumps(summary))
    return tmp_path / RUN.name


def test_a_warmup_of_its_own_concurrency_is_a_stage_of_its_own() -> None:
    warm, profiling = json.loads(SUMMARY.read_text())["input_config"]["phases"]
    assert (warm["kind"], warm["concurrency"], profiling["concurrency"]) == ("warmup", 1, 4)
    rec = read_recording(RUN)
    assert rec.stages == (
        RecordedStage("warm-up, concurrency 1", "closed", None, 1),
        RecordedStage("concurrency 4", "closed", None, 4),
    )
    stage = rec.measured["stage"]
    assert (stage == "warm-up, concurrency 1").sum() == warm["requests"] == rec.counts["num_warmup"]
    assert (stage == "concurrency 4").sum() == profiling["requests"]
    warm_ids = rec.measured["request_id"][stage == "warm-up, concurrency 1"].to_numpy()
    assert any(
        n.startswith("AIPerf ran its 4 warm-up requests as a phase of their own") for n in rec.notes
    )
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert "the stage `warm-up, concurrency 1`" in " ".join(docs.read_text().split())
    # simulated: the warm-up one at a time, as its 1 user sent them
    slow = LinearCostModel(
        intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_context_token_s=0.0
    )
    config = SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048
        )
    )
    run = simulate_recording(rec, config, cost_model=slow, frontend_overhead_s=0.0)
    records = run.records.sort_values("arrival_s")
    warmup = records[records["request_id"].isin(warm_ids)]
    assert len(warmup) == 4
    sends, ends = warmup["arrival_s"].to_numpy(), warmup["finished_s"].to_numpy()
    assert (sends[1:] >= ends[:-1] - 1e-9).all()  # each after the one before it ended
    # the profiling phase, begun when the warm-up completed, simulated from an idle server
    # as each stage is (studies/recorded_replay.py, simulate_stages)
    profiled = records[~records["request_id"].isin(warmup["request_id"])]
    first = np.sort(profiled["arrival_s"].to_numpy())[:4]
    assert np.allclose(first, first[0])  # its 4 users at once


def test_a_warmup_at_a_rate_before_a_closed_loop_is_replayed_at_its_sends(tmp_path: Path) -> None:
    path = with_phases(tmp_path, {"type": "poisson", "rate": 2.0, "concurrency": None})
    rec = read_recording(path)
    assert rec.stages == (
        RecordedStage("warm-up, 2 req/s", "open", 2.0, None),
        RecordedStage("concurrency 4", "closed", None, 4),
    )


def test_a_warmup_at_the_profiling_load_stays_in_its_stage(tmp_path: Path) -> None:
    rec = read_recording(with_phases(tmp_path, {"concurrency": 4}))
    assert rec.stages == (RecordedStage("concurrency 4", "closed", None, 4),)
    assert not any("as a phase of their own" in n for n in rec.notes)


def with_failed_warmups(tmp_path: Path) -> Path:
    """The run with two of its warm-up records failed as AIPerf 0.13.0 writes a failed record
    in any phase (``metadata.benchmark_phase`` kept, ``error`` set:
    ``records/record_processor_service.py`` ``_create_metric_record_metadata``,
    ``post_processors/record_export_jsonl_writer.py`` ``process_record``, which writes every
    record with an error): the second answered with an HTTP 500 after its tokens, the third
    timed out with only ``error_isl`` (as ``TimeoutError`` records do: see
    test_recording_aiperf_failed.py). Hand-edited from the real run."""
    shutil.copy(SUMMARY, tmp_path / SUMMARY.name)
    records = [json.loads(line) for line in RUN.read_text().splitlines()]
    assert [r["metadata"]["benchmark_phase"] for r in records[:3]] == ["warmup"] * 3
    records[1]["error"] = {"code": 500, "type": "Internal Server Error", "message": "boom"}
    records[2]["metrics"] = {"error_isl": records[2]["metrics"]["input_sequence_length"]}
    records[2]["error"] = {"type": "TimeoutError", "message": "TimeoutError()"}
    (tmp_path / RUN.name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return tmp_path / RUN.name


def test_a_failed_warmup_request_is_told_apart_as_failed_in_the_warmup(tmp_path: Path) -> None:
    rec = read_recording(with_failed_warmups(tmp_path))
    warm = rec.measured[rec.measured["stage"] == "warm-up, concurrency 1"]
    # the 500 one simulated (it has tokens), in the warm-up stage, its failure kept; the
    # timed-out one not simulated (no output), counted all the same
    assert sorted(warm["status"]) == ["warmup", "warmup", "warmup error (Internal Server Error)"]
    assert rec.counts["num_warmup_failed"] == 2
    assert rec.counts["num_warmup"] == 3  # the warm-up stage's simulated requests
    assert rec.counts["num_failed"] == 0  # AIPerf's error_request_count: profiling only
    assert any(
        n.startswith(
            "2 of the warm-up requests did not complete (1 warmup error (Internal "
            "Server Error); 1 warmup error (TimeoutError))"
        )
        for n in rec.notes
    )
    # what validate prints: the simulation completed a request the recording shows failed
    config = SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048
        )
    )
    slow = LinearCostModel(
        intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_context_token_s=0.0
    )
    run = simulate_recording(rec, config, cost_model=slow, frontend_overhead_s=0.0)
    said = served_refusals(rec, run.records)
    assert said is not None
    assert "(1 warmup error (Internal Server Error))" in said


def test_a_failed_warmup_request_with_no_output_holds_its_user_until_it_failed(
    tmp_path: Path,
) -> None:
    # the timed-out warm-up request (no output) was dropped from the warm-up's closed loop of
    # 1 user, so the replay sent that user's next warm-up request at once, and the headline
    # said it as "1 dropped (0 output tokens)": it was sent and failed, holding its user until
    # then, as a profiling failure does (commit 964435de; _failed)
    rec = read_recording(with_failed_warmups(tmp_path))
    warm = rec.stages[0]
    assert (warm.label, warm.load, warm.max_concurrency) == ("warm-up, concurrency 1", "capped", 1)
    assert rec.stages[1] == RecordedStage("concurrency 4", "closed", None, 4)
    said = recording_headline(rec)
    assert "1 dropped (failed request)" in said and "0 output tokens" not in said, said
    note = next(n for n in rec.notes if "failed with no output, not simulated" in n)
    assert "held its user of the warm-up's closed loop of 1 until it failed" in note
    assert not any("replayed as a closed loop of 1" in n for n in rec.notes)
    # a fast simulated server: the next warm-up request still goes at its recorded send, not
    # as soon as the simulated one before it ended
    config = SimConfig(
        engine=EngineConfig(
            num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048
        )
    )
    fast = LinearCostModel(
        intercept_s=0.0005, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_context_token_s=0.0
    )
    run = simulate_recording(rec, config, cost_model=fast, frontend_overhead_s=0.0)
    ids = rec.measured["request_id"][rec.measured["stage"] == warm.label].to_numpy()
    sim = run.records.set_index("request_id").loc[ids, "arrival_s"].to_numpy()
    assert np.allclose(
        np.sort(sim),
        np.sort(rec.workload.arrival_s[np.isin(rec.workload.request_id, ids)]),
        atol=1e-9,
    )


def test_a_cancelled_profiling_request_is_said_cancelled_not_0_output_tokens() -> None:
    # the real --request-cancellation-rate 50 run: its 3 cancelled requests were said
    # "3 dropped (0 output tokens)"
    said = recording_headline(read_recording(AIPERF / "cancel50_concurrency2.jsonl"))
    assert said.endswith("7 measured, 3 dropped (cancelled)"), said
