"""A load tool that writes its requests as they complete (AIPerf, GuideLLM, inference-perf) has
its requests sorted by send time without the trace loader's "timestamps are not in order" note:
on every such file that note was noise. A file whose order is the send order (``vllm bench
serve``, a generic records table) still says when it is not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.results.recordings import read_recording
from tests.unit.studies.test_calibrate_records import recorded_run

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
NOTE = "timestamps are not in order"
COMPLETION_ORDER = ["aiperf-0.13.0/concurrency4.jsonl", "aiperf-0.13.0/capped6c3_constant.jsonl",
                    "guidellm-0.2.1/benchmarks.json", "guidellm-0.4.0/constant.yaml",
                    "guidellm-0.8.1/benchmarks.json", "guidellm-0.8.1/sweep.json",
                    "inference-perf-0.7.0/per_request_lifecycle_metrics.json"]


def sent_in_file_order(path: Path) -> np.ndarray:
    """The send times of a fixture's requests in the order the file lists them."""
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return np.array([r["metadata"]["request_start_ns"] for r in rows], dtype=np.float64)
    if path.name.startswith("per_request"):
        return np.array([r["start_time"] for r in json.loads(path.read_text())])
    import yaml

    doc = yaml.safe_load(path.read_text())
    times = []
    for bench in doc["benchmarks"]:
        for status in ("successful", "errored", "incomplete"):
            for r in bench["requests"][status] or []:
                info = r.get("info") or r.get("request_info") or r
                timings = info.get("timings") or info
                times.append(timings.get("request_start") or r.get("start_time")
                             or r.get("request_start_time"))
    return np.array([t for t in times if t is not None], dtype=np.float64)


@pytest.mark.parametrize("name", COMPLETION_ORDER)
def test_a_load_tools_completion_order_is_sorted_without_a_note(name: str) -> None:
    path = FIXTURES / name
    assert (np.diff(sent_in_file_order(path)) < 0).any()  # the file is out of send order
    rec = read_recording(path)
    assert not any(NOTE in line for line in repr(rec).splitlines())
    assert not any(NOTE in w for w in rec.workload.meta["warnings"])
    assert (np.diff(rec.workload.arrival_s) >= 0).all()


def test_a_vllm_bench_file_out_of_send_order_still_says_so(tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0/rate8.json").read_text())
    n = len(doc["start_times"])
    for value in doc.values():  # rows 2 and 3 swapped: vllm bench writes in send order
        if isinstance(value, list) and len(value) == n:
            value[2], value[3] = value[3], value[2]
    path = tmp_path / "swapped.json"
    path.write_text(json.dumps(doc))
    assert any(NOTE in line for line in repr(read_recording(path)).splitlines())


def test_a_generic_records_file_out_of_order_still_says_so(tmp_path: Path) -> None:
    path = recorded_run(tmp_path / "r.csv", n=20)
    frame = pd.read_csv(path)
    frame.iloc[::-1].to_csv(path, index=False)
    assert any(NOTE in line for line in repr(read_recording(path)).splitlines())
