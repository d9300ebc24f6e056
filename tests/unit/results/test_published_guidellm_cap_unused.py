"""A capped stage whose cap was never reached: its starts lag their targeted times by the load
tool's own scheduling delay, not by a wait for a free slot.

github.com/rsevilla87/guidellm-results-parser 0e467bc ``example_output/benchmarks.json``
(Apache-2.0, excerpt in tests/fixtures/recordings/published/): GuideLLM 0.3 at a constant 10
req/s for 60 s against Qwen/Qwen3-0.6B behind llm-d, 609 requests capped at GuideLLM's default
512 in flight, at most 33 in flight; each request started 0.1 to 12 ms after its targeted time.
kvbudget took every targeted time as the end of a wait for a slot: it offered the requests at
those times, and ``trace convert`` said "the tool sent some later, when one of its 512 slots
freed", a wait that never happened. The excerpt keeps 32 of the 609 requests: the tests cap its
stage below them in memory, above and below the excerpt's own peak in flight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from tests.unit.results.excerpts import excerpt_copy

EXCERPT = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "published"
    / "guidellm-results-parser-qwen3-0.6b-constant10-excerpt.json"
)


def _capped(tmp_path: Path, cap: int) -> Path:
    """The excerpt with its constant stage held to ``cap`` in flight."""
    doc: dict[str, Any] = json.loads(excerpt_copy(EXCERPT, tmp_path).read_text())
    doc["benchmarks"][0]["args"]["strategy"]["max_concurrency"] = cap
    path = tmp_path / f"benchmarks-cap{cap}.json"
    path.write_text(json.dumps(doc))
    return path


def _peak(path: Path) -> int:
    rec = read_recording(path)
    sent = rec.measured["arrival_s"].to_numpy()
    ends = np.nan_to_num(sent + rec.measured["e2e_s"].to_numpy(), nan=np.inf)
    return max(int(((sent <= t) & (ends > t)).sum()) for t in sent)


def test_the_excerpt_keeps_the_published_lags_and_load(tmp_path: Path) -> None:
    doc = json.loads(EXCERPT.read_text())
    requests = doc["benchmarks"][0]["requests"]
    info = [r["scheduler_info"] for r in requests["successful"] + requests["incomplete"]]
    lag = np.array([i["request_start"] - i["targeted_start_time"] for i in info])
    assert (lag > 0).all() and lag.max() < 0.015
    assert 20 <= _peak(excerpt_copy(EXCERPT, tmp_path)) <= 30


def test_a_cap_never_reached_offers_each_request_at_its_start(tmp_path: Path) -> None:
    path = _capped(tmp_path, 31)  # 32 requests, at most 30 ever in flight
    rec = read_recording(path)
    (stage,) = rec.stages
    assert stage.load == "capped" and stage.max_concurrency == 31
    assert rec.workload.arrival_s == pytest.approx(rec.measured["arrival_s"].to_numpy(), abs=1e-9)
    result = CliRunner().invoke(
        app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "slots freed" not in said and "the times they were due, not their" not in said
    assert "at most 31 in flight: " in said and "without that cap" in said


def test_a_cap_reached_offers_each_request_when_it_was_due(tmp_path: Path) -> None:
    path = _capped(tmp_path, 10)  # the excerpt's peak is over 10 in flight
    rec = read_recording(path)
    lag = rec.measured["arrival_s"].to_numpy() - rec.workload.arrival_s
    assert (lag > 0).any()
    result = CliRunner().invoke(
        app, ["trace", "convert", str(path), "--out", str(tmp_path / "t.jsonl")]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert ("(its 10 slots were all busy at times, and a request due then was sent when one "
            "freed)") in said
