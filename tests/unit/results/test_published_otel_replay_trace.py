"""A trace of LLM calls as flat OpenTelemetry spans, the layout inference-perf's
``otel_trace_replay`` data source replays, passed to ``--records``.

github.com/kubernetes-sigs/inference-perf at 7de5ef2e, ``examples/otel/test_traces/simple/
simple_chain.json`` (excerpt in ``tests/fixtures/recordings/published/``; the same layout in
the fork github.com/moreh-dev/inference-perf ``examples/otel/test_traces/advanced/``): a JSON
object whose ``spans`` each hold a call's ``start_time`` and ``end_time`` and ``gen_ai.*``
attributes (messages, ``max_tokens``; no token count, no first token). It is a load to
replay, collected from an agent system, not a recording of a run kvbudget could compare with;
``kvbudget validate --records`` said "cannot tell the recording format (a JSON object of none
of the known tools ...); pass a format (...)", which none fits, and ``simulate --trace`` said
"line 1: not valid JSON", though the file is valid JSON. Each now says what the file is and
what to pass instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

EXCERPT = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "published"
    / "inference-perf-otel-simple-chain-excerpt.json"
)


def test_the_replay_trace_is_named_with_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as err:
        read_recording(EXCERPT)
    said = str(err.value)
    assert (
        "is a trace of LLM calls as flat OpenTelemetry spans (2 under 'spans', with "
        "gen_ai.* attributes: the layout inference-perf's otel_trace_replay data source "
        "replays), each call's start and end, no token counts, no first token"
    ) in said
    assert "per_request_lifecycle_metrics.json" in said and "llm_request spans" in said
    assert "pass a format" not in said


def test_token_counts_where_the_spans_hold_them_are_said(tmp_path: Path) -> None:
    # inference-perf's README lists gen_ai.usage.* among a span's attributes where recorded
    doc = json.loads(EXCERPT.read_text())
    doc["spans"][0]["attributes"].update(
        {"gen_ai.usage.prompt_tokens": 10, "gen_ai.usage.completion_tokens": 5}
    )
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "each call's start and end, 1 with token counts, no first token" in str(err.value)


def test_validate_refuses_it_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["validate", "--records", str(EXCERPT), "--out", str(tmp_path / "v")]
    )
    assert result.exit_code == 2, result.output
    assert "flat OpenTelemetry spans" in result.output and "Traceback" not in result.output
