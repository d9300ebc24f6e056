"""vLLM's per-request OpenTelemetry spans, as an OTLP JSON trace export (``--records-format otel``).

What vLLM writes (vLLM 0.32.0, started with ``--otlp-traces-endpoint``): one ``llm_request``
span (kind SERVER) a request that finished in its engine, made by
``vllm/v1/engine/output_processor.py`` ``OutputProcessor.do_tracing`` when
``process_outputs`` sees the request's finish reason. Its start is the request's
``arrival_time`` (``RequestStateStats.arrival_time``, wall clock), which the API server takes
when it begins rendering the prompt (``vllm/renderers/base.py`` ``render_cmpl`` /
``render_chat``, ``time.time()``, before tokenization; after the HTTP request was received and
parsed); it ends when the span is made. Its attributes (``vllm/tracing/utils.py``
``SpanAttributes``), times in seconds:

- ``gen_ai.usage.prompt_tokens``, ``gen_ai.usage.completion_tokens`` (the tokens the engine
  generated for this sequence);
- ``gen_ai.latency.time_to_first_token`` and ``gen_ai.latency.e2e``: from ``arrival_time``
  to when the output processor (in the API server's process) handled the first and the last
  token (``vllm/v1/metrics/stats.py`` ``IterationStats.update_from_output``: ``time.time()``
  of the iteration less ``arrival_time``): tokenization, queueing, prefill and the engine's
  reply to the API server included; the HTTP request's parsing, detokenizing the response,
  sending it and the network are not: a client measures more;
- ``gen_ai.latency.time_in_queue``, ``time_in_model_prefill`` / ``_decode`` /
  ``_inference`` (engine-core timestamps; not read);
- ``gen_ai.request.id``, and only when set: ``gen_ai.request.max_tokens``, ``top_p``,
  ``temperature``, ``n``.

What it lacks: the model's name (``gen_ai.response.model`` is declared but not set in 0.32.0;
the resource holds ``service.name``, ``vllm.process_id`` and the SDK's names), whether the
client streamed, the finish reason, any status, and the client's view. A request with
``n`` > 1 is one span a sequence, each with the whole prompt, the same ``gen_ai.request.id``
and ``gen_ai.request.n`` 1 (the children's parameters). A request its client abandoned is
aborted through ``OutputProcessor.abort_requests``, which writes no span; one the API server
refused (a prompt over the context, a bad parameter) never reached the engine: neither is
in the file, so failures are not counted (the fixture ``tests/fixtures/recordings/
vllm-otel-0.32.0/curl_n2_abandoned.jsonl`` shows both). vLLM also traces its own start-up
(``Overall Loading``, ``Worker init``...: other span names, skipped).

The file: what an OpenTelemetry Collector's file exporter writes (one
``ExportTraceServiceRequest`` a line, OTLP's JSON encoding), or one such object.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    finish_columns,
    json_lines,
    load_json,
    max_tokens_note,
    without_shared_times,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule

FORMAT = "otel"
TOOL = "vLLM llm_request spans (OTLP JSON)"
SPAN_NAME = "llm_request"
PROMPT = "gen_ai.usage.prompt_tokens"
OUTPUT = "gen_ai.usage.completion_tokens"
TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
MAX_TOKENS = "gen_ai.request.max_tokens"
NUM_SEQUENCES = "gen_ai.usage.num_sequences"
REQUEST_ID = "gen_ai.request.id"
MODEL_KEYS = ("gen_ai.response.model", "gen_ai.request.model")
STATUS_ERROR = 2
"""``Status.code`` STATUS_CODE_ERROR (opentelemetry-proto ``trace/v1/trace.proto``)."""


def is_otlp_traces(doc: Mapping[str, Any]) -> bool:
    """An OTLP trace export: an ``ExportTraceServiceRequest`` as JSON."""
    return isinstance(doc.get("resourceSpans"), list)


def flat_spans_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a trace of LLM calls as flat spans is not read: a JSON object whose ``spans`` list
    holds spans with ``gen_ai.*`` attributes (not OTLP's ``resourceSpans``), the layout
    inference-perf's ``otel_trace_replay`` data source replays (kubernetes-sigs/inference-perf
    ``examples/otel/README.md``, "Trace file format": ``start_time``, ``end_time``,
    ``gen_ai.input.messages``, ``gen_ai.request.max_tokens``, and only where the system
    recorded them ``gen_ai.usage.*`` token counts). Such a file is a load to replay, collected
    from an agent system: its calls' start and end, no first token and, in inference-perf's own
    examples, no token count. It was told "cannot tell the recording format ...; pass a
    format", which none fits. None for anything else."""
    spans = doc.get("spans")
    if not isinstance(spans, list) or not spans or not all(
            isinstance(s, Mapping) for s in spans[:8]):
        return None
    attributes = [s.get("attributes") for s in spans]
    if not any(isinstance(a, Mapping) and any(str(k).startswith("gen_ai.") for k in a)
               for a in attributes[:8]):
        return None
    counted = sum(isinstance(a, Mapping) and PROMPT in a and OUTPUT in a for a in attributes)
    return (f"is a trace of LLM calls as flat OpenTelemetry spans ({len(spans)} under 'spans', "
            "with gen_ai.* attributes: the layout inference-perf's otel_trace_replay data "
            "source replays), each call's start and end"
            + (f", {counted} with token counts" if counted else ", no token counts")
            + ", no first token: a load to replay, not a recording kvbudget reads; replay it "
            "with inference-perf (data.type otel_trace_replay) and pass the "
            "per_request_lifecycle_metrics.json it writes, or pass an OTLP JSON export of "
            "vLLM's own llm_request spans (--otlp-traces-endpoint; docs/recordings.md)")


@dataclass(frozen=True)
class Span:
    """One ``llm_request`` span's figures (NaN where absent)."""

    start_ns: int
    prompt: float
    output: float
    ttft: float
    e2e: float
    max_tokens: float
    status: str
    request_id: str
    model: str
    process: str


def _value(any_value: Any) -> Any:
    """An OTLP ``AnyValue``'s scalar (``intValue`` a decimal string in OTLP JSON), or None."""
    if not isinstance(any_value, dict):
        return None
    if "intValue" in any_value:
        raw = any_value["intValue"]
        try:
            return int(raw) if not isinstance(raw, bool) else raw
        except (TypeError, ValueError, OverflowError):  # Infinity, NaN: checked where read
            return raw
    for key in ("doubleValue", "stringValue", "boolValue"):
        if key in any_value:
            return any_value[key]
    return None


def _attributes(obj: Any) -> dict[str, Any]:
    attrs = obj.get("attributes") if isinstance(obj, dict) else None
    if not isinstance(attrs, list):
        return {}
    return {kv["key"]: _value(kv.get("value")) for kv in attrs
            if isinstance(kv, dict) and isinstance(kv.get("key"), str)}


def _exports(path: Path) -> list[tuple[int, Any]]:
    """The file's exports with their line: one JSON object, or JSON lines of them."""
    try:
        return [(1, load_json(path))]
    except TraceError:
        return json_lines(path)


def _number(path: Path, line: int, where: str, attrs: Mapping[str, Any], key: str, *,
            whole: bool = False) -> float:
    value = attrs.get(key)
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or value < 0 or (whole and value != int(value)):
        kind = "a whole number >= 0" if whole else "a finite number >= 0"
        raise TraceError(path, f"must be {kind}, got {value!r}"[:120], line=line,
                         field=f"{where}.attributes[{key}]")
    return float(value)


def _span(path: Path, line: int, where: str, span: Mapping[str, Any],
          resource: Mapping[str, Any]) -> Span:
    attrs = _attributes(span)
    for key in (PROMPT, OUTPUT):
        if attrs.get(key) is None:  # absent, or a value of no kind
            raise TraceError(path, f"an {SPAN_NAME} span without {key}: kvbudget needs each "
                             "request's prompt and output tokens (vLLM's own spans have "
                             "both)", line=line, field=f"{where}.attributes")
    try:
        start_ns = int(span["startTimeUnixNano"])
    except (KeyError, TypeError, ValueError):
        raise TraceError(path, "must be the span's start in nanoseconds", line=line,
                         field=f"{where}.startTimeUnixNano") from None
    sequences = _number(path, line, where, attrs, NUM_SEQUENCES, whole=True)
    if sequences > 1:
        raise TraceError(path, f"{NUM_SEQUENCES} {sequences:g}: the span's token counts sum "
                         "several sequences, which cannot be told apart", line=line,
                         field=f"{where}.attributes")
    ttft = _number(path, line, where, attrs, TTFT)
    e2e = _number(path, line, where, attrs, E2E)
    for key, value in ((TTFT, ttft), (E2E, e2e)):
        if value > MAX_MEASURED_S:
            raise TraceError(path, f"implausible time: {value:g} s", line=line,
                             field=f"{where}.attributes[{key}]")
    if e2e < ttft - 1e-9:
        raise TraceError(path, f"the request ends ({e2e:g} s) before its first token "
                         f"({ttft:g} s)", line=line, field=f"{where}.attributes[{E2E}]")
    status = span.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    failed = code in (STATUS_ERROR, "STATUS_CODE_ERROR")
    res = _attributes(resource)
    model = next((str(m) for m in [*(attrs.get(k) for k in MODEL_KEYS),
                                   *(res.get(k) for k in MODEL_KEYS)] if m), "")
    return Span(start_ns=start_ns, prompt=_number(path, line, where, attrs, PROMPT, whole=True),
                output=_number(path, line, where, attrs, OUTPUT, whole=True), ttft=ttft,
                e2e=e2e, max_tokens=_number(path, line, where, attrs, MAX_TOKENS, whole=True),
                status="error" if failed else "completed",
                request_id=str(attrs.get(REQUEST_ID) or ""), model=model,
                process=str(res.get("vllm.process_id") or res.get("service.instance.id") or ""))


def read_spans(path: Path) -> tuple[list[Span], Counter[str], list[tuple[int, int]]]:
    """Every ``llm_request`` span of the file once, how many spans of each other name, and
    the (line, line first seen) of each span exported again (its ``traceId`` and ``spanId``
    an earlier one's: OTLP's exporters retry a batch that was not acknowledged, so a
    collector may write it twice, and a file joined to a copy repeats every span). Each
    repeat was read as one request more."""
    spans: list[Span] = []
    others: Counter[str] = Counter()
    first_seen: dict[tuple[str, str], int] = {}
    repeats: list[tuple[int, int]] = []
    for line, doc in _exports(path):
        if not isinstance(doc, dict) or not is_otlp_traces(doc):
            raise TraceError(path, "must be an OTLP trace export (an object with "
                             "resourceSpans: one a line, as a collector's file exporter "
                             "writes)", line=line)
        for i, rs in enumerate(doc["resourceSpans"]):
            resource = rs.get("resource", {}) if isinstance(rs, dict) else {}
            scopes = rs.get("scopeSpans") if isinstance(rs, dict) else None
            for j, ss in enumerate(scopes if isinstance(scopes, list) else []):
                items = ss.get("spans") if isinstance(ss, dict) else None
                for k, span in enumerate(items if isinstance(items, list) else []):
                    name = span.get("name") if isinstance(span, dict) else None
                    if name != SPAN_NAME:
                        others[str(name)] += 1
                        continue
                    where = f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                    ids = (str(span.get("traceId") or ""), str(span.get("spanId") or ""))
                    if all(ids) and ids in first_seen:
                        repeats.append((line, first_seen[ids]))
                        continue
                    first_seen[ids] = line
                    spans.append(_span(path, line, where, span, resource))
    if not spans:
        seen = ", ".join(f"{n} {c}" for n, c in others.most_common(5)) or "none"
        raise TraceError(path, f"holds no {SPAN_NAME} span (vLLM's per-request span, written "
                         f"with --otlp-traces-endpoint; spans here: {seen})")
    return spans, others, repeats


def _repeats_said(repeats: list[tuple[int, int]]) -> list[str]:
    if not repeats:
        return []
    line, first = repeats[0]
    return [f"{counted(len(repeats), SPAN_NAME + ' span')} exported again (the traceId and "
            f"spanId of an earlier one; the first at line {line}, seen at line {first}): an "
            "OTLP exporter's retry of a batch the collector had written, or a file joined to "
            "a copy; each read once"]


def _notes(spans: list[Span], others: Counter[str]) -> list[str]:
    notes = [
        "TTFT and E2E are vLLM's own (gen_ai.latency.*): server-side, from when its API "
        "server began rendering the prompt (the span's start) to when it handled the first "
        "and last token; tokenization, queueing and prefill included, the network, HTTP "
        "parsing and sending the response not: a client measures more (simulated with no "
        "API server in front, frontend none, unless --set frontend says; calibrate's "
        "--fit-overhead fits the part of the API server they hold)",
        "the spans say when requests reached the server, not how its clients sent them (a "
        "production log): replayed open loop at the recorded arrivals",
        "vLLM writes a span only for a request that finished in its engine: a request its "
        "client abandoned or the server refused left none, and is neither counted nor "
        "simulated",
    ]
    ids = Counter(s.request_id for s in spans if s.request_id)
    shared = {r: c for r, c in ids.items() if c > 1}
    if shared:
        notes.append(f"{len(shared)} request id{'s' if len(shared) > 1 else ''} with several "
                     f"spans ({sum(shared.values())} spans: n > 1, one span a sequence): each "
                     "sequence simulated as a request with the whole prompt")
    processes = sorted({s.process for s in spans if s.process})
    if len(processes) > 1:
        notes.append(f"spans from {len(processes)} processes (vllm.process_id): several API "
                     "servers or several servers, simulated as one engine")
    if others:
        notes.append(f"{sum(others.values())} other spans skipped (" + ", ".join(
            f"{n} {c}" for n, c in others.most_common(4)) + (", ..." if len(others) > 4
                                                              else "") + ")")
    return notes


def read_otel(path: Path, default_tier: str,
              max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read an OTLP JSON export of vLLM's ``llm_request`` spans."""
    spans, others, repeats = read_spans(path)
    models = sorted({s.model for s in spans if s.model})
    if len(models) > 1:
        raise TraceError(path, f"holds spans of {len(models)} models ({', '.join(models)}): "
                         "pass one model's spans")
    t0 = min(s.start_ns for s in spans)
    arrival = np.array([(s.start_ns - t0) / 1e9 for s in spans], dtype=np.float64)
    max_tokens = np.array([s.max_tokens for s in spans])
    workload, counts, warnings = finish_columns(
        path, FORMAT, prompt=np.array([s.prompt for s in spans]),
        output=np.array([s.output for s in spans]), arrival=arrival,
        fields={"prompt_tokens": PROMPT, "output_tokens": OUTPUT,
                "arrival_s": "startTimeUnixNano", "max_output_tokens": MAX_TOKENS},
        max_output=max_tokens, default_tier=default_tier, max_output_rule=max_output_rule,
        completion_order=True)  # exported as they finish
    order = workload.request_id
    kept = [spans[r] for r in order.tolist()]
    if len({s.start_ns for s in spans}) == len({(s.start_ns, s.request_id) for s in spans}):
        # every tie is one request's sequences (n > 1): they did arrive together
        workload, warnings = without_shared_times(workload, warnings)
    counts["num_failed"] = sum(s.status != "completed" for s in kept)
    notes = [*_notes(spans, others), *_repeats_said(repeats),
             max_tokens_note(max_tokens, max_output_rule)]
    config: dict[str, Any] = {"model": models[0]} if models else {}
    return build_recording(path, FORMAT, workload, ttft=np.array([s.ttft for s in kept]),
                           e2e=np.array([s.e2e for s in kept]),
                           status=[s.status for s in kept], stage=[""] * len(kept),
                           itl_mean=None, config=config, counts=counts,
                           notes=[*notes, *warnings],
                           stages=(RecordedStage("", "unknown"),), tool=TOOL,
                           sent_s=arrival[order])
