"""Serving-benchmark results appended one a line, each without its requests, refused as a whole.

github.com/nerdalert/vllm-bench-automation ``vllm-benchmark-graphs/results.json`` at 13ee6ea5
(no licence found: the layout only; the lines here are the real vllm bench 0.32.0 fixture's,
saved without ``--save-detailed``) holds 9 ``vllm bench serve`` results of Llama-3.2-3B behind
kgateway, 3 deployments at 10, 30 and inf req/s, one JSON object a line. ``kvbudget validate
--records`` refused it rightly but read only its first line: "is a vllm bench serve result
without per-request data", as if the file were one run. The refusal now counts the lines to the
file's end and names any that do hold per-request data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURE = Path(__file__).parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0" / "append.jsonl"

DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
            "start_times", "latencies", "queue_times")
"""The per-request lists ``vllm bench serve`` keeps only with ``--save-detailed`` (vLLM 0.32.0
``vllm/benchmarks/serve.py``: without it, each is deleted from the result before it is saved)."""


def _runs() -> list[dict[str, object]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def _aggregates(doc: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in doc.items() if k not in DETAILED}


def _refusal(path: Path) -> str:
    with pytest.raises(TraceError) as err:
        read_recording(path)
    return str(err.value)


def test_every_appended_run_is_counted_in_the_refusal(tmp_path: Path) -> None:
    runs = [_aggregates(d) for d in _runs()] * 4 + [_aggregates(_runs()[0])]
    path = tmp_path / "results.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert _refusal(path) == (
        f"{path}: holds 9 JSON lines (none with per-request data); the first line "
        "is a vllm bench serve result without per-request data (aggregates only); run vllm "
        "bench serve with --save-result --save-detailed")


def test_a_line_that_holds_its_requests_is_named(tmp_path: Path) -> None:
    first, second = _runs()
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in (_aggregates(first), second,
                                                       _aggregates(second))))
    assert (f"{path}: holds 3 JSON lines (line 2 with per-request data: give it "
            "as a file of its own); the first line is a vllm bench serve result") in _refusal(path)


def test_one_result_alone_is_refused_as_before(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(_aggregates(_runs()[0]), indent=2))
    assert _refusal(path) == (f"{path}: is a vllm bench serve result without per-request data "
                              "(aggregates only); run vllm bench serve with --save-result "
                              "--save-detailed")
