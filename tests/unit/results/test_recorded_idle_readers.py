"""A closed loop whose users sat idle between a request's end and their next send is said by
every reader whose stages are closed loops and whose files keep per-request send and end times
(the AIPerf reader's own case: tests/unit/results/test_published_aiperf_gpu.py).

Real runs (the tools' own, against the CPU vLLM, their users resending at once) get no note;
a copy of each with one request's send delayed (its user idle that long) gets it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbudget.results.recordings import read_recording

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM_BENCH = RECORDINGS / "vllm-bench-0.32.0" / "concurrency4.json"


def idle_notes(path: Path) -> list[str]:
    return [n for n in read_recording(path).notes if "sat idle" in n]


def test_vllm_bench_closed_loop_that_resent_at_once_is_not_said_idle() -> None:
    # vllm bench serve --max-concurrency 4 (request_rate inf): its users resent within ms
    rec = read_recording(VLLM_BENCH)
    assert rec.stages[0].load == "closed" and rec.stages[0].max_concurrency == 4
    assert idle_notes(VLLM_BENCH) == []


def test_vllm_bench_user_idle_before_a_send_is_said(tmp_path: Path) -> None:
    # the 11th request sent (and so ended) 0.5 s later than recorded: its user sat idle 0.5 s
    # (all due at the start, request_rate inf: its queue time, send less due, 0.5 s longer)
    doc = json.loads(VLLM_BENCH.read_text())
    doc["start_times"][10] += 0.5
    doc["queue_times"][10] += 0.5
    edited = tmp_path / "concurrency4.json"
    edited.write_text(json.dumps(doc))
    notes = idle_notes(edited)
    assert len(notes) == 1 and notes[0].startswith(
        "stage 'concurrency 4': its 4 user(s) sat idle ")


GUIDELLM = RECORDINGS / "guidellm-0.6.1" / "benchmarks.json"
QUEUED = {"targeted_start", "queued", "dequeued", "scheduled_at"}
"""GuideLLM's timings before its worker took the request (left as recorded: the user idled
after it was due)."""


def test_guidellm_concurrent_stage_that_resent_at_once_is_not_said_idle() -> None:
    # GuideLLM 0.6.1's --profile concurrent --rate 4 run: its users resent within 0.1 s
    rec = read_recording(GUIDELLM)
    assert [(s.label, s.load) for s in rec.stages] == [("0: concurrent x4", "closed")]
    assert idle_notes(GUIDELLM) == []


def test_guidellm_user_idle_before_a_send_is_said(tmp_path: Path) -> None:
    # one request (the 9th sent) sent, and so ended, 0.5 s later than recorded
    doc = json.loads(GUIDELLM.read_text())
    rows = doc["benchmarks"][0]["requests"]["successful"]
    req = sorted(rows, key=lambda r: r["request_start_time"])[8]
    req["request_start_time"] += 0.5
    req["request_end_time"] += 0.5
    timings = req["info"]["timings"]
    for key, value in timings.items():
        if key not in QUEUED and isinstance(value, float):
            timings[key] = value + 0.5
    edited = tmp_path / "benchmarks.json"
    edited.write_text(json.dumps(doc))
    notes = idle_notes(edited)
    assert len(notes) == 1 and notes[0].startswith(
        "stage '0: concurrent x4': its 4 user(s) sat idle ")


def test_guidellm_0_8_1_workers_slow_to_resend_are_said() -> None:
    # GuideLLM 0.8.1's own concurrent x4 run on the shared CPU box: its 20th request was due
    # (info.timings.targeted_start) as the 16th end freed its slot, but its worker took it
    # 0.10 s later (request_dispatch_delay 0.109 s): the server held 3 where the replay holds 4
    rec = read_recording(RECORDINGS / "guidellm-0.8.1" / "benchmarks.json")
    notes = [n for n in rec.notes if "sat idle" in n]
    assert len(notes) == 1 and notes[0].startswith(
        "stage '0: concurrent x4': its 4 user(s) sat idle 0.69 s in all between a request's "
        "end and their next send (13 % of the stage's slot time; the longest 0.11 s, before "
        "send 20)")


EVALSCOPE = RECORDINGS / "evalscope-1.14.1" / "sweep"


def test_evalscope_closed_runs_idle_users_are_said() -> None:
    # evalscope perf 1.14.1's own sweep (--parallel 1 2 --number 8 12): the parallel-1 run's
    # user resent at once; in the parallel-2 run the first request ended at 0.100 s and the
    # third went at 0.205 s (completed_time agrees), one of two slots idle 0.105 s
    assert idle_notes(EVALSCOPE / "parallel_1_number_8") == []
    notes = idle_notes(EVALSCOPE)
    assert len(notes) == 1 and notes[0].startswith(
        "stage 'parallel_2_number_12': its 2 user(s) sat idle 0.11 s in all between a "
        "request's end and their next send (6 % of the stage's slot time; the longest 0.11 s, "
        "before send 3)")


INFERENCE_PERF = RECORDINGS / "inference-perf-0.7.0" / "concurrent"


def test_inference_perf_closed_stage_idle_users_are_said(tmp_path: Path) -> None:
    # inference-perf 0.7.0's concurrent stages (concurrency 2 and 4) send at num_requests a
    # second, capped: their users waited for their due times, offered at them, nothing said.
    # The stage files without requested_rate make them closed loops, where that wait is idle
    assert [s.load for s in read_recording(
        INFERENCE_PERF / "per_request_lifecycle_metrics.json").stages] == ["capped", "capped"]
    assert idle_notes(INFERENCE_PERF / "per_request_lifecycle_metrics.json") == []
    shutil.copytree(INFERENCE_PERF, tmp_path / "concurrent")
    for stage_file in (tmp_path / "concurrent").glob("stage_*_lifecycle_metrics.json"):
        doc = json.loads(stage_file.read_text())
        del doc["load_summary"]["requested_rate"]
        stage_file.write_text(json.dumps(doc))
    notes = idle_notes(tmp_path / "concurrent" / "per_request_lifecycle_metrics.json")
    assert [n.split(":")[0] for n in notes] == ["stage 'stage 0", "stage 'stage 1"]
    assert notes[0].startswith("stage 'stage 0: concurrency 2': its 2 user(s) sat idle 0.85 s")
