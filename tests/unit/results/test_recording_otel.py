"""vLLM's per-request OpenTelemetry spans as an OTLP JSON export
(``tests/fixtures/recordings/vllm-otel-0.32.0/``, made by ``scripts/make_recording_fixtures.sh
vllm-otel``: the CPU vLLM 0.32.0 of the live tests started with ``--otlp-traces-endpoint``,
its spans received by ``scripts/otlp_receiver.py`` and written one export a line, as a
collector's file exporter does). Read to the ``vllm bench serve`` results of the same runs
(its request ids are in the spans); what cannot be used refused in one line. The hand-made
cases change a copy of a real export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-otel-0.32.0"
CLOSED = FIXTURES / "closed2.jsonl"
RATE = FIXTURES / "rate8.jsonl"
CURL = FIXTURES / "curl_n2_abandoned.jsonl"


def exports(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spans_of(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [sp for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"]
            for sp in ss["spans"] if sp["name"] == "llm_request"]


def attr(span: dict[str, Any], key: str) -> Any:
    value = next(a["value"] for a in span["attributes"] if a["key"] == key)
    return next(iter(value.values()))


def start_up(path: Path) -> list[dict[str, Any]]:
    """The exports of ``path`` that hold no llm_request span: the server's start-up spans."""
    return [d for d in exports(path) if not spans_of([d])]


def write_lines(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.mark.parametrize(("path", "bench"), [(CLOSED, "bench_closed2.json"),
                                             (RATE, "bench_rate8.json")])
def test_spans_read_to_the_bench_results_of_the_same_run(path: Path, bench: str) -> None:
    result = json.loads((FIXTURES / bench).read_text())
    assert detect_recording_format(path) == "otel"
    rec = read_recording(path)
    m = rec.measured
    assert rec.format == "otel" and rec.tool == "vLLM llm_request spans (OTLP JSON)"
    assert rec.stages == (RecordedStage("", "unknown"),)
    assert rec.num_usable == len(m) == result["completed"] == 8
    assert rec.counts["num_failed"] == 0
    # vllm bench serve names its requests bench-<id>-<i>: the i-th of its lists
    ids = [str(attr(sp, "gen_ai.request.id")) for sp in spans_of(exports(path))]
    index = [int(i.split("-")[-2]) for i in ids]
    spans = {i: sp for i, sp in zip(index, spans_of(exports(path)), strict=True)}
    assert sorted(index) == list(range(8))
    for i in range(8):
        assert int(attr(spans[i], "gen_ai.usage.prompt_tokens")) == result["input_lens"][i]
        assert int(attr(spans[i], "gen_ai.usage.completion_tokens")) == result["output_lens"][i]
        # the server's TTFT and E2E begin after the client sent and end before it heard
        assert attr(spans[i], "gen_ai.latency.time_to_first_token") < result["ttfts"][i]
        assert attr(spans[i], "gen_ai.latency.e2e") < result["latencies"][i]
    assert sorted(m["prompt_tokens"].tolist()) == sorted(result["input_lens"])
    assert m["arrival_s"].min() == 0.0 and m["arrival_s"].is_monotonic_increasing
    # the span's max_tokens: 16, sent with --ignore-eos
    assert rec.workload.max_output_tokens.tolist() == [16] * 8
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
    assert any(n.startswith("TTFT and E2E are vLLM's own") for n in rec.notes)
    assert "model" not in rec.config  # vLLM 0.32.0's spans do not name it


def test_the_arrivals_are_the_spans_starts_rebased_and_the_times_vllms() -> None:
    rec = read_recording(RATE)
    spans = sorted(spans_of(exports(RATE)), key=lambda sp: int(sp["startTimeUnixNano"]))
    t0 = int(spans[0]["startTimeUnixNano"])
    m = rec.measured
    assert m["arrival_s"].tolist() == [(int(sp["startTimeUnixNano"]) - t0) / 1e9
                                       for sp in spans]
    assert m["ttft_s"].tolist() == [attr(sp, "gen_ai.latency.time_to_first_token")
                                    for sp in spans]
    assert m["e2e_s"].tolist() == [attr(sp, "gen_ai.latency.e2e") for sp in spans]


def test_start_up_spans_are_skipped_and_said() -> None:
    rec = read_recording(CLOSED)  # the server's first export holds its start-up spans
    said = [n for n in rec.notes if "other spans skipped" in n]
    assert len(said) == 1 and said[0].startswith("12 other spans skipped (")


def test_a_request_with_n_2_is_two_sequences_and_an_abandoned_one_left_no_span() -> None:
    spans = spans_of(exports(CURL))
    # the client that gave up after 0.5 s asked max_tokens 1000: vLLM aborted it, no span
    assert len(spans) == 4 and all(int(attr(sp, "gen_ai.request.max_tokens")) < 1000
                                   for sp in spans)
    rec = read_recording(CURL)
    assert len(rec) == 4 and rec.counts["num_failed"] == 0
    assert any(n.startswith("1 request id with several spans (2 spans: n > 1") for n in rec.notes)
    assert any("a request its client abandoned or the server refused left none" in n
               for n in rec.notes)
    # the two sequences arrived together: no "spread them" advice
    assert not any("share their timestamp" in n for n in rec.notes)
    assert rec.workload.max_output_tokens.tolist() == [8, 16, 16, 24]


def test_one_export_object_reads_as_its_lines(tmp_path: Path) -> None:
    docs = exports(RATE)
    one = {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(one, indent=2))
    assert detect_recording_format(path) == "otel"
    a, b = read_recording(path).measured, read_recording(RATE).measured
    assert a.drop(columns="request_id").equals(b.drop(columns="request_id"))


def test_a_collectors_export_with_a_service_name_reads(tmp_path: Path) -> None:
    # github.com/inference-sim/inference-sim eval/ground_truth/jan20-prefill-llama7b-tp1-1/
    # traces.json at e7a4aa3: a collector's file exporter's lines of vLLM's llm_request spans,
    # the resource only the SDK's names and service.name "vllm-exp1" (it was refused: "kvbudget
    # does not read spans")
    docs = exports(RATE)
    for d in docs:
        for rs in d["resourceSpans"]:
            rs["resource"]["attributes"] = [
                {"key": "telemetry.sdk.version", "value": {"stringValue": "1.26.0"}},
                {"key": "service.name", "value": {"stringValue": "vllm-exp1"}}]
    rec = read_recording(write_lines(tmp_path / "traces.json", docs))
    assert len(rec) == 8 and "model" not in rec.config


def test_the_model_is_read_where_a_span_or_its_resource_names_it(tmp_path: Path) -> None:
    docs = exports(RATE)
    docs[0]["resourceSpans"][0]["resource"]["attributes"].append(
        {"key": "gen_ai.response.model", "value": {"stringValue": "meta-llama/Llama-3.1-8B"}})
    assert read_recording(write_lines(tmp_path / "a.jsonl", docs)).config["model"] == \
        "meta-llama/Llama-3.1-8B"
    spans_of(docs)[-1]["attributes"].append(
        {"key": "gen_ai.response.model", "value": {"stringValue": "other-model"}})
    with pytest.raises(TraceError, match=r"2 models \(meta-llama/Llama-3.1-8B, other-model\)"):
        read_recording(write_lines(tmp_path / "b.jsonl", docs))


def test_a_span_marked_as_an_error_is_counted_failed(tmp_path: Path) -> None:
    docs = exports(RATE)
    spans_of(docs)[2]["status"] = {"code": 2, "message": "boom"}
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert rec.counts["num_failed"] == 1 and rec.num_usable == 7 and len(rec) == 8


def _without(docs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    span = spans_of(docs)[0]
    span["attributes"] = [a for a in span["attributes"] if a["key"] != key]
    return docs


def _emptied(docs: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    for a in spans_of(docs)[0]["attributes"]:
        if a["key"] == key:
            a["value"] = {}
    return docs


@pytest.mark.parametrize(("make", "message"), [
    (lambda: start_up(CLOSED),
     "holds no llm_request span (vLLM's per-request span, written with --otlp-traces-endpoint; "
     "spans here: Worker init 2, "),
    (lambda: _without(exports(RATE), "gen_ai.usage.completion_tokens"),
     "line 1: field 'resourceSpans[0].scopeSpans[0].spans[0].attributes': an llm_request span "
     "without gen_ai.usage.completion_tokens"),
    (lambda: _emptied(exports(RATE), "gen_ai.usage.prompt_tokens"),
     "line 1: field 'resourceSpans[0].scopeSpans[0].spans[0].attributes': an llm_request span "
     "without gen_ai.usage.prompt_tokens"),
    (lambda: [*exports(RATE), {"resource_spans": []}],
     "line 6: must be an OTLP trace export"),
])
def test_what_cannot_be_used_is_refused_in_one_line(tmp_path: Path, make: Any,
                                                    message: str) -> None:
    path = write_lines(tmp_path / "t.jsonl", make())
    with pytest.raises(TraceError) as info:
        read_recording(path, format="otel")
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)
    assert "\n" not in str(info.value)


def test_summed_sequences_and_bad_values_are_refused(tmp_path: Path) -> None:
    docs = exports(RATE)
    spans_of(docs)[0]["attributes"].append(
        {"key": "gen_ai.usage.num_sequences", "value": {"intValue": "2"}})
    with pytest.raises(TraceError, match="sum several sequences"):
        read_recording(write_lines(tmp_path / "a.jsonl", docs))
    docs = exports(RATE)
    for a in spans_of(docs)[1]["attributes"]:
        if a["key"] == "gen_ai.latency.e2e":
            a["value"] = {"doubleValue": -1.0}
    with pytest.raises(TraceError, match=r"attributes\[gen_ai.latency.e2e\]'?: must be a "
                       "finite number >= 0"):
        read_recording(write_lines(tmp_path / "b.jsonl", docs))


def test_validate_reads_the_spans_end_to_end(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(CLOSED), "--model",
                                   "Llama-3.1-8B", "--gpu", "H100", "--out",
                                   str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    table = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert table["counts"]["num_measured"] == 8
    assert "TTFT and E2E are vLLM's own" in " ".join(res.stderr.split()) + " ".join(
        res.stdout.split())
    res = CliRunner().invoke(app, ["validate", "--records", str(CURL), "--records-format",
                                   "otel", "--model", "Llama-3.1-8B", "--gpu", "H100",
                                   "--out", str(tmp_path / "w")])
    assert res.exit_code == 0, res.stderr
    assert np.isfinite(json.loads((tmp_path / "w" / "validation.json").read_text())[
        "counts"]["num_measured"])


def test_spans_are_simulated_without_an_api_server_in_front_and_it_is_said(
        tmp_path: Path) -> None:
    # the spans time the server from its prompt rendering: validate added the modelled API
    # server's HTTP and streaming cost they do not hold (TTFT +122 % on rate8), unless the user
    # knew to pass --set frontend=none
    base = ["validate", "--records", str(CLOSED), "--model", "Llama-3.1-8B", "--gpu", "H100"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    assert "frontend none (the recording's times are vLLM's own" in " ".join(
        res.stderr.split())
    summary = json.loads((tmp_path / "v" / "sim" / "summary.json").read_text())
    assert summary["frontend"]["name"] == "none"
    res = CliRunner().invoke(app, [*base, "--set", "frontend=vllm-api-server", "--out",
                                   str(tmp_path / "w")])
    assert res.exit_code == 0, res.stderr
    assert "frontend none (the recording" not in " ".join(res.stderr.split())
    summary = json.loads((tmp_path / "w" / "sim" / "summary.json").read_text())
    assert summary["frontend"]["name"] == "vllm-api-server"


def test_validate_refuses_an_export_without_request_spans_in_one_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "startup.jsonl", start_up(CLOSED))
    res = CliRunner().invoke(app, ["validate", "--records", str(path), "--model",
                                   "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "holds no llm_request span" in res.stderr and not (tmp_path / "v").exists()
