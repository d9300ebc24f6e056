"""A recording with requests cut is refused where the tool wrote its own count beside the rows.

Each case derives a damaged copy from a real fixture (tests/fixtures/recordings/, made by
running the tools) by cutting one request the way a partial copy or sync does (an element cut
from every per-request list, a JSON line dropped), and checks the reader refuses it in one line
naming the file and both figures, where it read it as a smaller run before. The untouched
fixtures read as before (their own tests: test_recordings.py, test_recording_tools.py...).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.test_published_files import llm_load_test_file

REC = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
Doc = dict[str, Any]


def _cut_lists(doc: Doc, i: int) -> None:
    """Cut request ``i`` from every per-request list (those as long as ``input_lens``)."""
    n = len(doc["input_lens"])
    for value in doc.values():
        if isinstance(value, list) and len(value) == n:
            value.pop(i)


def _vllm_copy(tmp: Path, name: str, i: int) -> Path:
    src = REC / name
    out = tmp / src.name
    if src.suffix == ".jsonl":
        docs = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
        _cut_lists(docs[0], i)
        out.write_text("".join(json.dumps(d) + "\n" for d in docs))
    else:
        doc = json.loads(src.read_text())
        _cut_lists(doc, i)
        out.write_text(json.dumps(doc))
    return out


VLLM = [
    # (fixture, request cut, the lists' count, the file's count): completed + failed where
    # the client writes failed (0.3x), else completed + the requests with an error
    ("vllm-bench-0.34.0/rate8.json", 0, 9, 10),
    ("vllm-bench-0.33.0/server_down.json", -1, 2, 3),
    ("vllm-bench-0.32.0/append.jsonl", 3, 19, 20),
    ("vllm-bench-0.10.2/concurrency4.json", -1, 19, 20),
    ("vllm-benchmark-serving-0.8.5/burst05_c2.json", 0, 19, 20),
    ("vllm-benchmark-serving-0.6.6.post1/rate8.json", 0, 19, 20),  # 19 completed, 1 error
    ("sglang-0.5.9/rate8.jsonl", 5, 19, 20),
    ("sglang-0.5.9/append.jsonl", -1, 9, 10),
]


@pytest.mark.parametrize(("name", "i", "rows", "count"), VLLM)
def test_vllm_and_sglang_lists_shorter_than_their_counts_are_refused(
    tmp_path: Path, name: str, i: int, rows: int, count: int
) -> None:
    path = _vllm_copy(tmp_path, name, i)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(str(path)) and "\n" not in said
    assert re.search(rf"the lists hold {rows} requests, .* say {count} were sent", said), said
    # the way on for a copy trimmed on purpose: its counts set to what it holds
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    doc = lines[0]  # the run cut (one a line with --append-result)
    errors = sum(1 for e in doc.get("errors") or [] if e)
    where = " on line 1" if len(lines) > 1 else ""  # a line named where the file has several
    way = f"completed{where} is set to {rows - errors}" + (
        f" and failed to {errors}" if "failed" in doc else ""
    )
    assert f"; trimmed on purpose, it reads as a run of the requests it holds once {way} " in said
    doc["completed"] = rows - errors
    if "failed" in doc:
        doc["failed"] = errors
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    if rows == errors:  # every request failed: refused as the whole file is (server_down)
        with pytest.raises(TraceError) as still:
            read_recording(path)
        assert "missing" not in str(still.value)
    else:
        num = sum(len(d["input_lens"]) for d in lines)
        assert read_recording(path).counts["num_rows_read"] == num


def _dropped_line(tmp: Path, rel: str, k: int) -> Path:
    """A copy of ``rel``'s folder with line ``k`` of ``rel`` dropped."""
    src = REC / rel
    shutil.copytree(src.parent, tmp / src.parent.name)
    path = tmp / src.parent.name / src.name
    lines = path.read_text().splitlines(keepends=True)
    del lines[k]
    path.write_text("".join(lines))
    return path


AIPERF = [
    # (records, line dropped (0-based), records left, the summary's count)
    ("aiperf-0.13.0/rate8.jsonl", -1, 19, 20),  # 2 warm-up records beside, not counted
    ("aiperf-0.13.0/cancel50_concurrency2.jsonl", 0, 9, 10),  # 7 answered + 3 cancelled
    ("aiperf-0.13.0/sweep_rate4_8/rate_8.0/profile_export.jsonl", 4, 9, 10),
    ("aiperf-0.12.0/concurrency4.jsonl", -1, 19, 20),
    ("aiperf-0.10.0/capped8c2.jsonl", 7, 19, 20),
]


@pytest.mark.parametrize(("rel", "k", "rows", "count"), AIPERF)
def test_aiperf_records_fewer_than_its_summary_counts_are_refused(
    tmp_path: Path, rel: str, k: int, rows: int, count: int
) -> None:
    path = _dropped_line(tmp_path, rel, k)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(f"{path}: holds {rows} profiling records, but the summary beside it ")
    assert f"counts {count} (request_count" in said and "\n" not in said
    # the way on for a copy trimmed on purpose: the summary's counts set as the message says
    way = re.search(
        r"\(([^()]+\.json)\) counts .* once its request_count avg is set to (\d+) and "
        r"error_request_count avg to (\d+) \(its records answered, and failed or cancelled\)$",
        said,
    )
    assert way, said
    summary = path.with_name(way.group(1))
    doc = json.loads(summary.read_text())
    at = doc if "request_count" in doc else doc["records"]
    at["request_count"]["avg"] = float(way.group(2))
    if "error_request_count" in at:
        at["error_request_count"]["avg"] = float(way.group(3))
    summary.write_text(json.dumps(doc))
    assert int(way.group(2)) + int(way.group(3)) == rows
    assert read_recording(path).counts["num_measured"] <= rows


def test_an_aiperf_warmup_record_dropped_is_no_request_missing(tmp_path: Path) -> None:
    # the warm-up records are counted apart (warmup_metrics), not in request_count
    path = _dropped_line(tmp_path, "aiperf-0.13.0/rate8.jsonl", 0)
    assert (
        '"benchmark_phase":"warmup"'
        in (REC / "aiperf-0.13.0/rate8.jsonl").read_text().splitlines()[0]
    )
    counts = read_recording(path).counts
    assert counts["num_measured"] == 20 and counts["num_warmup"] == 1


def _guidellm_cut(tmp: Path, rel: str, kind: str) -> Path:
    """A copy of GuideLLM's report ``rel`` with its first benchmark's last ``kind`` cut."""
    doc = json.loads((REC / rel).read_text())
    doc["benchmarks"][0]["requests"][kind].pop()
    path = tmp / Path(rel).name
    path.write_text(json.dumps(doc))
    return path


GUIDELLM = [
    # (report, status cut, listed left, the report's count, where it is)
    ("guidellm-0.2.1/benchmarks.json", "successful", 15, 16, "request_totals.successful"),
    ("guidellm-0.3.1/benchmarks.json", "successful", 15, 16, "request_totals.successful"),
    ("guidellm-0.4.0/benchmarks.json", "successful", 19, 20, "scheduler_metrics.requests_made"),
    ("guidellm-0.6.1/benchmarks.json", "successful", 19, 20, "scheduler_metrics.requests_made"),
    ("guidellm-0.7.4/duration2_concurrent4.json", "incomplete", 3, 4, "metrics.request_totals"),
    ("guidellm-0.8.1/cancelled.json", "successful", 4, 5, "scheduler_metrics.requests_made"),
    ("guidellm-0.8.1/sweep.json", "successful", 1, 2, "scheduler_metrics.requests_made"),
]


@pytest.mark.parametrize(("rel", "kind", "rows", "count", "where"), GUIDELLM)
def test_guidellm_lists_shorter_than_its_counts_are_refused(
    tmp_path: Path, rel: str, kind: str, rows: int, count: int, where: str
) -> None:
    path = _guidellm_cut(tmp_path, rel, kind)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(f"{path}: field 'benchmarks[0].requests.{kind}': lists {rows} ")
    assert f"the report's own count says {count} ({where}" in said and "\n" not in said
    # the way on for a copy trimmed on purpose: each count over the list set to it
    way = re.search(r"it holds once (.+) (?:is|are) set to (\d+)$", said)
    assert way and int(way.group(2)) == rows, said
    doc = json.loads(path.read_text())
    for field in way.group(1).split(" and "):
        keys = field.removeprefix("benchmarks[0].").split(".")
        node = doc["benchmarks"][0]
        for key in keys[:-1]:
            node = node[key]
        assert node[keys[-1]] > rows
        node[keys[-1]] = rows
    path.write_text(json.dumps(doc))
    read_recording(path)


def test_a_guidellm_incomplete_request_never_listed_is_no_request_missing(tmp_path: Path) -> None:
    # GuideLLM 0.8.1 lists 12 of the 15 incomplete requests its requests_made counts (those
    # cancelled before they started are in no list) and request_totals counts 11 of them:
    # one cut of the 12 is still as many as it measured
    path = _guidellm_cut(tmp_path, "guidellm-0.8.1/cancelled.json", "incomplete")
    assert read_recording(path).counts["num_incomplete"] == 11


INFERENCE_PERF = [
    # (per-request file, request cut, left, the stage files' count)
    ("inference-perf-0.7.0/per_request_lifecycle_metrics.json", 0, 23, 24),
    ("inference-perf-0.7.0/concurrent/per_request_lifecycle_metrics.json", -1, 18, 19),
    ("inference-perf-0.7.0/sweep/per_request_lifecycle_metrics.json", 3, 9, 10),
    ("inference-perf-0.7.0/trace_replay/per_request_lifecycle_metrics.json", -1, 11, 12),
]


@pytest.mark.parametrize(("rel", "i", "rows", "count"), INFERENCE_PERF)
def test_inference_perf_requests_fewer_than_its_stage_files_count_are_refused(
    tmp_path: Path, rel: str, i: int, rows: int, count: int
) -> None:
    src = REC / rel
    shutil.copytree(src.parent, tmp_path / "run")
    path = tmp_path / "run" / src.name
    doc = json.loads(path.read_text())
    del doc[i]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(
        f"{path}: holds {rows} requests, but the stage files beside it count {count} "
        "(load_summary.count): requests missing (a cut or partly copied file?); trimmed on "
        "purpose, it reads as a run of the requests it holds once their load_summary.count "
        "are set to what it holds of each stage (its first requests: "
    )
    # the way on: each stage file's count as the message gives it (its first requests)
    way = re.search(r"\(its first requests: (.+?); without a stage_id", said)
    assert way, said
    for pair in way.group(1).split(", "):
        name, num = pair.rsplit(" ", 1)
        stage = path.with_name(name)
        doc = json.loads(stage.read_text())
        doc["load_summary"]["count"] = int(num)
        stage.write_text(json.dumps(doc))
    assert read_recording(path).counts["num_rows_read"] == rows


def test_inference_perf_stage_short_of_its_count_is_refused_by_stage(tmp_path: Path) -> None:
    # a file that names each request's stage (stage_id, later versions) is checked stage by
    # stage: hand-made from the 0.7.0 run, its requests in start order, 16 then 8
    src = REC / "inference-perf-0.7.0"
    for name in ("stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json"):
        shutil.copy(src / name, tmp_path / name)
    doc = json.loads((src / "per_request_lifecycle_metrics.json").read_text())
    doc.sort(key=lambda r: r["start_time"])
    for k, req in enumerate(doc):
        req["stage_id"] = 0 if k < 16 else 1
    del doc[20]
    path = tmp_path / "per_request_lifecycle_metrics.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value) == (
        f"{path}: holds 7 requests of stage 1, but stage_1_lifecycle_metrics.json beside it "
        "counts 8 (load_summary.count): requests missing (a cut or partly copied file?); "
        "trimmed on purpose, it reads as a run of the requests it holds once that "
        "load_summary.count is set to 7"
    )
    stage = tmp_path / "stage_1_lifecycle_metrics.json"
    doc = json.loads(stage.read_text())
    doc["load_summary"]["count"] = 7
    stage.write_text(json.dumps(doc))
    assert read_recording(path).counts["num_rows_read"] == 23


@pytest.mark.parametrize(
    ("run", "name", "rows", "count"),
    [
        ("closed", "D32_128_text-to-text_num_concurrency_2_time_3s.json", 13, 14),
        ("two_scenarios", "D64_128_text-to-text_num_concurrency_1_time_2s.json", 7, 8),
    ],
)
def test_genai_bench_run_shorter_than_its_count_is_refused(
    tmp_path: Path, run: str, name: str, rows: int, count: int
) -> None:
    shutil.copytree(REC / "genai-bench-0.0.5" / run, tmp_path / run)
    path = tmp_path / run / name
    doc = json.loads(path.read_text())
    del doc["individual_request_metrics"][-1]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(tmp_path / run)
    assert str(info.value) == (
        f"{path}: field 'individual_request_metrics': lists {rows} requests, but its own count "
        f"says {count} (aggregated_metrics.num_requests): requests missing (a cut or partly "
        "copied file?); trimmed on purpose, it reads as a run of the requests it holds once "
        f"aggregated_metrics.num_requests is set to {rows}"
    )
    doc["aggregated_metrics"]["num_requests"] = rows
    path.write_text(json.dumps(doc))
    read_recording(tmp_path / run)


@pytest.mark.parametrize(
    ("run", "rows", "count"),
    [("capped/parallel_2_number_12", 11, 12), ("sweep/parallel_1_number_8", 7, 8)],
)
def test_evalscope_database_short_of_its_summary_is_refused(
    tmp_path: Path, run: str, rows: int, count: int
) -> None:
    shutil.copytree(REC / "evalscope-1.14.1" / run, tmp_path / "run")
    db = tmp_path / "run" / "benchmark_data.db"
    con = sqlite3.connect(db)
    con.execute("DELETE FROM result WHERE rowid = (SELECT MAX(rowid) FROM result)")
    con.commit()
    con.close()
    with pytest.raises(TraceError) as info:
        read_recording(tmp_path / "run")
    assert str(info.value) == (
        f"{db}: its result table holds {rows} requests, but benchmark_summary.json beside it "
        f"counts {count} (Total Requests): requests missing (a cut or partly copied file?); "
        f"trimmed on purpose, it reads as a run of the requests it holds once its Total "
        f"Requests is set to {rows}"
    )
    summary = db.with_name("benchmark_summary.json")
    doc = json.loads(summary.read_text())
    doc["Total Requests"] = rows
    summary.write_text(json.dumps(doc))
    read_recording(tmp_path / "run")


def test_llm_load_test_results_fewer_than_its_summary_counts_are_refused(tmp_path: Path) -> None:
    # llm-load-test is not on PyPI: its file is built from its source (test_published_files's
    # llm_load_test_file, utils.py write_output at b27aad1: summary.total_requests is
    # len(results) as written); a result cut from it read as a run of 7 requests
    path, _ = llm_load_test_file(tmp_path)
    doc = json.loads(path.read_text())
    del doc["results"][3]
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value) == (
        f"{path}: field 'summary.total_requests': results holds 7 requests, but the file's own "
        "summary.total_requests says 8 were sent: requests missing (a cut or partly copied "
        "file?); trimmed on purpose, it reads as a run of the requests it holds once "
        "summary.total_requests is set to 7"
    )
    doc["summary"]["total_requests"] = 7
    path.write_text(json.dumps(doc))
    assert read_recording(path).counts["num_rows_read"] == 7


def test_llm_load_test_files_before_its_summary_have_no_count_to_check() -> None:
    # its v2 draft (262e682, published) and first layout wrote no summary: nothing to compare
    draft = REC / "published" / "llm-load-test-v2-draft-caikit-excerpt.json"
    assert "summary" not in json.loads(draft.read_text())
    assert read_recording(draft).counts["num_measured"] == 4


def test_the_docs_quote_the_way_on_a_trimmed_copy_gets(tmp_path: Path) -> None:
    path = _vllm_copy(tmp_path, "vllm-bench-0.34.0/rate8.json", 0)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    quoted = (
        "trimmed on purpose, it reads as a run of the requests it holds once completed is set "
        "to 9 and failed to 0 (its requests without and with an error)"
    )
    assert str(info.value).endswith(quoted)
    doc = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert quoted in " ".join(doc.read_text().split())
