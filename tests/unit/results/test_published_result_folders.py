"""A folder of serving-benchmark results passed to ``--records`` where none of its files lists a
request.

github.com/tsho/vllm-benchmark-scripts at ba8d92a committed ``vllm-bench-tpu/bench-results/
20260426-222601-gemma4-tpu/``: 21 ``result-<profile>-rate<R>.json`` of ``vllm bench serve
--save-result`` (Gemma-4-31B on a TPU v6e-4, no ``--save-detailed``) beside their console logs.
The folder was told "it holds 21 data file(s) (...): pass one of them", and each of them is then
refused as aggregates only. The files here are the real ``vllm bench serve`` 0.32.0 fixtures,
cut to their aggregates where the published ones were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbudget.results import recorded_dirs
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
LISTS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
         "queue_times", "generated_texts", "errors")


def aggregates(source: Path, target: Path) -> None:
    doc = json.loads(source.read_text())
    target.write_text(json.dumps({k: v for k, v in doc.items() if k not in LISTS}))


def refused(path: Path) -> str:
    """The one line ``path`` is refused with (its path first)."""
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert "\n" not in said
    return said


def test_a_folder_of_results_without_requests_says_so_at_once(tmp_path: Path) -> None:
    for name in ("rate8", "concurrency4"):
        aggregates(FIXTURES / f"{name}.json", tmp_path / f"result-short-{name}.json")
    (tmp_path / "bench-short-rate8.log").write_text("Traffic request rate: 8.0\n")
    said = refused(tmp_path)
    assert said.startswith(f"{tmp_path}: is not a kvbudget run directory (no requests.parquet) "
                           "but a folder of 2 result file(s), none of which lists a request; the "
                           "first, result-short-concurrency4.json, is a vllm bench serve result "
                           "without per-request data")
    assert "pass one of them" not in said


def test_a_folder_with_a_result_that_lists_requests_is_told_to_pass_one(tmp_path: Path) -> None:
    aggregates(FIXTURES / "rate8.json", tmp_path / "result-a.json")
    shutil.copy(FIXTURES / "concurrency4.json", tmp_path / "result-b.json")
    assert "pass one of them" in refused(tmp_path)
    (tmp_path / "result-a.json").unlink()
    shutil.copy(FIXTURES / "rate8.json", tmp_path / "result-a.json")
    said = refused(tmp_path)  # both list their requests: neither is said to hold none
    assert "pass one of them" in said and "none of which" not in said


def test_a_sweep_of_a_hundred_summaries_is_said_as_one(tmp_path: Path) -> None:
    """A sweep of 100 results saved without --save-detailed: every file is read (a count of
    64 sent the user to pass them one by one, each then refused as aggregates only)."""
    for k in range(100):
        aggregates(FIXTURES / "rate8.json", tmp_path / f"result-{k:03d}.json")
    said = refused(tmp_path)
    assert "a folder of 100 result file(s), none of which lists a request; the first, " \
        "result-000.json, is a vllm bench serve result without per-request data" in said
    assert "pass one of them" not in said
    # one that lists its requests, last of them all, is still found
    shutil.copy(FIXTURES / "rate8.json", tmp_path / "result-100.json")
    assert "pass one of them" in refused(tmp_path)


def test_a_folder_past_the_bytes_read_says_what_it_did_not_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k in range(5):
        aggregates(FIXTURES / "rate8.json", tmp_path / f"result-{k}.json")
    size = (tmp_path / "result-0.json").stat().st_size
    monkeypatch.setattr(recorded_dirs, "SCANNED_TOTAL_BYTES", 3 * size)
    said = refused(tmp_path)
    assert "a folder of 5 result files: the first 3 " in said
    assert "list no request and the other 2 were not read" in said
    assert "none of which" not in said
