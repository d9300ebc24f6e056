"""A capped stage whose requests in flight never reached its cap had no request wait for a
slot: every reader offers it at its recorded sends (:func:`cap_reached`, one rule for all), and
the lag between a request's due time and its send is the tool's own scheduling.

vLLM 0.32.0's ``vllm bench serve --request-rate 8 --max-concurrency 2`` runs
(tests/fixtures/recordings/vllm-bench-0.32.0/files, written by the tool against the CPU vLLM)
held at most one request in flight; each ``queue_times`` entry is about 0.1 ms (the client's
``client_queue_time``, ``start_time`` less ``request_arrival_time``, taken before the task
that takes the semaphore runs: vllm/benchmarks/serve.py lines 974-984, 1073). The reader
offered each request 0.1 ms before its send as if it had waited for a slot, and ``trace
convert`` said "the tool sent some later, when one of its 2 slots freed". The ``--append-result``
file's first run did fill both slots, and two of its requests waited 61 and 65 ms: they stay
offered at their due times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvbudget.results.recorded_fields import cap_reached
from kvbudget.results.recordings import read_recording

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM = RECORDINGS / "vllm-bench-0.32.0"
AIPERF = RECORDINGS / "aiperf-0.13.0"


@pytest.mark.parametrize(
    "name",
    [
        "files/sharegpt_rate8_c2.json",
        "files/custom_chat_rate8_c2.json",
        "datasets/timed_trace_c2.json",
    ],
)
def test_vllm_bench_capped_run_that_never_filled_its_slots_is_offered_at_its_sends(
    name: str,
) -> None:
    rec = read_recording(VLLM / name)
    sent = rec.measured["arrival_s"].to_numpy(dtype=float)
    assert rec.stages[0].load == "capped"
    assert np.array_equal(rec.workload.arrival_s, sent)


def test_vllm_bench_capped_run_whose_requests_waited_is_offered_when_each_was_due() -> None:
    rec = read_recording(VLLM / "append.jsonl")
    rows = (rec.measured["stage"].astype(str) == rec.stages[0].label).to_numpy()
    lag_s = (rec.measured["arrival_s"].to_numpy(dtype=float) - rec.workload.arrival_s)[rows]
    assert rec.stages[0].load == "capped" and rec.stages[0].max_concurrency == 2
    assert sorted(lag_s)[-2:] == pytest.approx([60.66e-3, 64.57e-3], abs=1e-5)  # waited
    assert (lag_s > 0).all()  # every request offered at its due time


def _aiperf_at(tmp_path: Path, name: str, conc: int) -> Path:
    """A real AIPerf 0.13.0 run with its summary's --concurrency set to ``conc``."""
    text = (AIPERF / f"{name}_aiperf.json").read_text()
    assert text.count('"concurrency": 2') == 2
    (tmp_path / f"{name}_aiperf.json").write_text(
        text.replace('"concurrency": 2', f'"concurrency": {conc}')
    )
    (tmp_path / f"{name}.jsonl").write_text((AIPERF / f"{name}.jsonl").read_text())
    return tmp_path / f"{name}.jsonl"


def test_aiperf_capped_run_that_never_filled_its_slots_is_offered_at_its_sends(
    tmp_path: Path,
) -> None:
    # capped8c2 (--request-rate 8 --concurrency 2) filled its 2 slots (tested in
    # test_recording_aiperf_issued.py); the same records under a cap of 20 never did
    rec = read_recording(_aiperf_at(tmp_path, "capped8c2", 20))
    stage = rec.stages[-1]
    rows = (rec.measured["stage"].astype(str) == stage.label).to_numpy()
    sent = rec.measured["arrival_s"].to_numpy(dtype=float)
    assert stage.load == "capped" and stage.send_times == "recorded"
    assert np.array_equal(rec.workload.arrival_s[rows], sent[rows])
    note = next(n for n in rec.notes if "never all busy" in n)
    assert "offered at their recorded sends" in note and "slots freed" not in note


def test_cap_reached_counts_a_request_with_no_end_in_flight_to_the_last() -> None:
    sent = np.array([0.0, 1.0, 2.0])
    assert not cap_reached(sent, sent + 0.5, 2)
    assert cap_reached(sent, np.array([np.nan, 1.5, 2.5]), 2)  # the first never ended
    assert cap_reached(sent, np.array([1.0 + 1e-6, 1.5, 2.5]), 2)  # ends after the next send
    assert not cap_reached(sent, np.array([1.0, 2.0, 2.5]), 2)  # ends as the next is sent
    assert not cap_reached(sent, sent + 0.5, None)
    assert not cap_reached(np.array([]), np.array([]), 1)
