"""Load-tool options the first fixtures leave out, on files the real tools wrote
(``scripts/make_recording_fixtures.sh vllm-options aiperf-options``, against the CPU vLLM of
the live tests): each reads to the tool's own summary of the same run, its load as the tool
offered it, and what the file cannot say is said.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kvbudget.results.recordings import RecordedStage, Recording, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM = FIXTURES / "vllm-bench-0.32.0" / "options"
AIPERF = FIXTURES / "aiperf-0.13.0"


def usable(rec: Recording) -> pd.DataFrame:
    return rec.measured[rec.measured["usable"]]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# --------------------------------------------------------------------------- vllm bench serve


@pytest.mark.parametrize(("name", "stage"), [
    ("probe4_rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
    # an exponential ramp capped at 3 in flight: due when the ramp meant to send each
    ("rampup_exp_c3.json", RecordedStage("ramp-up exponential 1 to 16 req/s, concurrency 3",
                                         "capped", None, 3)),
    # lengths drawn within +-50 % and no --ignore-eos: each realised length its own
    ("range05_rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
])
def test_vllm_bench_options_read_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    path = VLLM / name
    doc = json.loads(path.read_text())
    rec = read_recording(path)
    u = usable(rec)
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 10
    assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    assert rec.stages == (stage,)
    assert (rec.workload.max_output_tokens == rec.workload.output_tokens).all()
    assert any(n.startswith("ignore_eos: not recorded") for n in rec.notes)


def test_vllm_bench_range_ratio_lengths_are_the_files_own() -> None:
    doc = json.loads((VLLM / "range05_rate8.json").read_text())
    rec = read_recording(VLLM / "range05_rate8.json")
    order = np.argsort(rec.workload.request_id)
    assert sorted(rec.workload.prompt_tokens[order].tolist()) == sorted(doc["input_lens"])
    assert len(set(doc["input_lens"])) > 1  # drawn, not one length


def test_vllm_bench_probe_requests_are_said_not_silently_left_out() -> None:
    # --probe-request-rate 4 sent probe requests beside the run that the file counts but does
    # not list: the replay gave no sign the server carried more than the 10 requests read
    doc = json.loads((VLLM / "probe4_rate8.json").read_text())
    rec = read_recording(VLLM / "probe4_rate8.json")
    total = doc["probe_completed"] + doc["probe_failed"]
    assert total > 0 and len(rec.workload) == doc["completed"]
    said = [n for n in rec.notes if "--probe-request-rate" in n]
    assert len(said) == 1
    assert said[0].startswith(f"--probe-request-rate: {total} probe requests "
                              f"({doc['probe_completed']} completed, {doc['probe_failed']} "
                              "failed")
    assert f"median {doc['probe_median_e2el_ms']:.4g} ms" in said[0]
    assert not any("probe" in n for n in read_recording(VLLM / "range05_rate8.json").notes)


def test_vllm_bench_capped_ramp_is_offered_when_due() -> None:
    doc = json.loads((VLLM / "rampup_exp_c3.json").read_text())
    rec = read_recording(VLLM / "rampup_exp_c3.json")
    due = np.array(doc["start_times"]) - np.array(doc["queue_times"])
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(due - due.min()))


# --------------------------------------------------------------------------- AIPerf


def _aiperf(name: str) -> tuple[Recording, dict[str, Any]]:
    return (read_recording(AIPERF / f"{name}.jsonl"),
            json.loads((AIPERF / f"{name}_aiperf.json").read_text()))


def test_aiperf_without_streaming_is_refused_saying_so() -> None:
    # it was refused as "no request has a measured TTFT and E2E", naming no cause
    with pytest.raises(TraceError) as err:
        read_recording(AIPERF / "unstreamed_concurrency2.jsonl")
    assert "AIPerf ran without --streaming" in str(err.value)
    assert "record the run with --streaming" in str(err.value)


@pytest.mark.parametrize("name", ["cancel50_concurrency2", "concurrency4_ramp1", "rate8_ramp1"])
def test_aiperf_options_read_to_its_own_summary(name: str) -> None:
    rec, summary = _aiperf(name)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"]
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert int(u["output_tokens"].sum()) == summary["total_usage_completion_tokens"]["avg"]


def test_aiperf_cancellations_count_as_its_error_summary() -> None:
    rec, summary = _aiperf("cancel50_concurrency2")
    cancelled = sum(e["count"] for e in summary["error_summary"]
                    if e["error_details"]["type"] == "RequestCancellationError")
    assert cancelled > 0 and rec.counts["num_cancelled"] == cancelled
    assert rec.stages[0].label == f"concurrency 2, {cancelled} cancelled"


def test_aiperf_concurrency_ramp_is_not_a_closed_loop_from_the_start() -> None:
    # --concurrency 4 --concurrency-ramp-duration 1 was read as a closed loop of 4 users from
    # the first send: AIPerf started with 1 and added one at a time over the first second
    rec, _ = _aiperf("concurrency4_ramp1")
    label = "concurrency 4, ramped from 1 over 1 s"
    assert rec.stages == (RecordedStage(label, "capped", None, 4),)
    said = [n for n in rec.notes if n.startswith(f"stage '{label}'")]
    assert len(said) == 1 and "replayed as an open loop at the recorded sends" in said[0]
    sends = rec.measured["arrival_s"].to_numpy()
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(sends))


def test_aiperf_rate_ramp_is_said() -> None:
    rec, _ = _aiperf("rate8_ramp1")
    label = "8 req/s, ramped over 1 s"
    assert rec.stages == (RecordedStage(label, "open", 8.0, None),)
    assert any(n.startswith(f"stage '{label}': AIPerf raised its rate") for n in rec.notes)
    _, plain = _aiperf("rate8")
    assert read_recording(AIPERF / "rate8.jsonl").stages[0].label == "8 req/s"
    assert "rate_ramp" not in json.dumps(plain["input_config"])
