"""``vllm bench serve --dataset-name timed_trace``: each request at its trace's timestamp.

vLLM 0.32.0 sends a timed trace's requests at their timestamps (``--self-timed``, its default
for that dataset: ``vllm/benchmarks/serve.py`` ``get_request``'s ``self_timed`` branch) and
saves the unused ``--request-rate`` as ``"inf"``; the result names neither the dataset nor
``self_timed``. Without ``--max-concurrency`` the run was read as "inf req/s, all at once"
though its requests went out over the trace's span. The fixtures are real runs
(``scripts/make_recording_fixtures.sh vllm-timed``: 10 requests from 0 to 1.9 s, alone and
capped at 2 in flight).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from kvbudget.results.recordings import RecordedStage, read_recording

DATASETS = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "vllm-bench-0.32.0"
    / "datasets"
)


def test_a_timed_trace_alone_is_its_timestamps_not_everything_at_once() -> None:
    path = DATASETS / "timed_trace.json"
    doc = json.loads(path.read_text())
    assert (doc["request_rate"], doc["max_concurrency"]) == ("inf", None)
    due = np.array(doc["start_times"]) - np.array(doc["queue_times"])
    assert due.max() - due.min() > 1.8  # the trace's 0 to 1.9 s
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("timed trace", "open", None, None),)
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert "the stage `timed trace`, an open loop" in " ".join(docs.read_text().split())
    assert any(
        n.startswith("request_rate inf, but the requests were due over 1.9")
        and "a timed trace's timestamps (--dataset-name timed_trace, self-timed), replayed as "
        "an open loop at them"
        in n
        for n in rec.notes
    )
    sent = np.array(doc["start_times"])  # replayed at its recorded sends
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(sent - sent.min()))
    # a run at rate inf sent everything at once: still that
    inf = read_recording(DATASETS.parent / "inf.json")
    assert inf.stages == (RecordedStage("inf req/s", "open", float("inf"), None),)


def test_a_timed_trace_capped_is_its_timestamps_capped() -> None:
    rec = read_recording(DATASETS / "timed_trace_c2.json")
    assert rec.stages == (RecordedStage("timed trace, concurrency 2", "capped", None, 2),)
