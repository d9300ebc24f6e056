"""A merge of several vllm bench serve summaries by a published script is named as one.

github.com/anyscale/ray-serve-llm-perf-examples horizontal_scaling/bm_results/rayoss251-x2/
all-parts/conc16.json (as stored at da40398; the audit read it at 04ba8ab): two clients' vllm
bench serve files (part1/, part2/ beside it) merged by the repo's horizontal_scaling/
aggregate_results.py (bc11939: counts and rates summed, latencies averaged, its
max_concurrency 16 though two clients each ran 16) was told "is a vllm bench serve result
without per-request data", as if vLLM had written it. The files below are reproduced, not
copied: the merge's keys in the script's order and the part's in vLLM's, with figures of the
published files' size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recorded_merges import is_ray_serve_merge
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "recordings"

HEAD: dict[str, Any] = {
    "date": "20251102-114456",
    "endpoint_type": "vllm",
    "backend": "vllm",
    "label": None,
    "model_id": "openai/gpt-oss-120b",
    "tokenizer_id": "openai/gpt-oss-120b",
    "num_prompts": 160,
    "request_rate": 1e9,
    "burstiness": 1.0,
    "max_concurrency": 16,
}
COUNTS: dict[str, Any] = {
    "completed": 125,
    "total_input_tokens": 624745,
    "total_output_tokens": 31250,
    "request_throughput": 4.78,
    "output_throughput": 1195.8,
    "total_token_throughput": 25102.0,
    "max_output_tokens_per_s": 1736.0,
    "max_concurrent_requests": 32,
}
LATENCIES = {f"{s}_{m}_ms": 10.0 for m in ("ttft", "tpot", "itl") for s in ("mean", "p99")}


def _vllm_own() -> dict[str, Any]:
    # vllm bench serve's order: benchmark()'s result begins {"duration": ..., "completed": ...}
    return {**HEAD, "duration": 26.1, **COUNTS, "request_goodput": None, **LATENCIES}


def _merged() -> dict[str, Any]:
    # aggregate_files's order: the first part's ten keys, the sums, the averages, the goodput
    return {**HEAD, **COUNTS, "duration": 25.6, **LATENCIES, "request_goodput": None}


def _said(path: Path) -> str:
    with pytest.raises(TraceError) as err:
        read_recording(path)
    return str(err.value)


def test_a_merge_is_named_with_its_runs_files(tmp_path: Path) -> None:
    for part in ("part1", "part2"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "conc16.json").write_text(json.dumps(_vllm_own()))
    (tmp_path / "all-parts").mkdir()
    merged = tmp_path / "all-parts" / "conc16.json"
    merged.write_text(json.dumps(_merged(), indent=2))
    said = _said(merged)
    assert (
        "is a merge of 2 runs' vllm bench serve summaries by anyscale/ray-serve-llm-perf-"
        "examples' horizontal_scaling/aggregate_results.py, not a file vllm bench serve wrote"
    ) in said
    assert "pass the runs' own files (part1/conc16.json, part2/conc16.json beside" in said
    assert "is a vllm bench serve result" not in said
    # each part is vLLM's own file, named as before
    part = _said(tmp_path / "part1" / "conc16.json")
    assert "is a vllm bench serve result without per-request data" in part
    assert "is a merge" not in part


def test_a_merge_alone_is_named_without_a_count(tmp_path: Path) -> None:
    path = tmp_path / "conc16.json"
    path.write_text(json.dumps(_merged()))
    said = _said(path)
    assert "is a merge of several runs' vllm bench serve summaries" in said
    assert "<exp>/part1/<name>" in said


@pytest.mark.parametrize(
    "doc",
    [
        # sorted keys (json.dump(sort_keys=True)): completed before duration, but not the
        # script's order
        dict(sorted(_merged().items())),
        # a key the script never writes (vLLM's `failed`)
        {**_merged(), "failed": 0},
    ],
)
def test_other_orders_are_vllms_own(tmp_path: Path, doc: dict[str, Any]) -> None:
    path = tmp_path / "conc16.json"
    path.write_text(json.dumps(doc))
    said = _said(path)
    assert "is a merge" not in said and "is a vllm bench serve result without" in said


def test_no_tools_own_file_among_the_fixtures_is_taken_for_a_merge() -> None:
    # every JSON file a tool wrote here (vllm bench serve's among them) or a published run holds
    checked = 0
    for path in sorted(FIXTURES.rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict):
            checked += 1
            assert not is_ray_serve_merge(doc), path
    assert checked > 50
