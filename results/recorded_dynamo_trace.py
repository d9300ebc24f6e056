"""NVIDIA Dynamo's per-request trace (``--records-format dynamo-trace``): one record a request
that its HTTP frontend finished, as JSON lines.

What Dynamo writes (ai-dynamo 1.6.1; the variables are named in the install's
``dynamo/thunderagent_router/README.md`` lines 99-104 and in ``_core.abi3.so``'s strings):
``DYN_REQUEST_TRACE=1`` turns the trace on (default sink ``jsonl_gz``, to
``/tmp/dynamo-request-trace.000000.jsonl.gz``, as 1.6.1 wrote it here; gzip is refused by the
file checks, naming ``gunzip``); ``DYN_REQUEST_TRACE_SINKS=jsonl`` and
``DYN_REQUEST_TRACE_OUTPUT_PATH=FILE`` write plain JSON lines to ``FILE`` (the frontend logs
``Request trace initialized ... sinks=["file"] file_format="jsonl" records=["request_end",
"tool"]``). Each line is ``{"timestamp": ..., "event": RECORD}`` (``timestamp``: the sink's own
milliseconds, not read), ``RECORD`` of ``schema`` ``dynamo.request.trace.v1``; a request's is
``event_type`` ``request_end`` with ``event_time_unix_ms`` and ``request``:

- ``request_received_ms``: when the frontend received the request (Unix ms): its arrival;
- ``input_tokens``, ``output_tokens`` (``replay.input_length`` where ``input_tokens`` is absent:
  github.com/ai-dynamo/dynamo ``lib/llm/src/request_trace/record.rs`` at 0366e63a,
  ``emit_request_end`` lines 52-80, sets ``output_tokens`` and ``replay`` only);
- ``ttft_ms``, ``total_time_ms``, ``avg_itl_ms``: from ``request_received_ms`` to the first
  token, to the end, and the mean gap between tokens, ``(end - first token) / (output_tokens -
  1)``, as the frontend's ``RequestTracker`` timed them (``lib/llm/src/protocols/common/
  timing.rs``: its ``new`` takes ``request_received``; ``ttft_ms``, ``total_time_ms``,
  ``avg_itl_ms``, ``prefill_wait_time_ms`` + ``prefill_time_ms`` = ``ttft_ms``; every line of
  the 1.6.1 fixture holds these identities); ``event_time_unix_ms`` is ``request_received_ms``
  plus ``total_time_ms`` rounded (``record.rs`` ``event_time_unix_ms_from_request``, lines
  41-50);
- ``prefill_wait_time_ms``, ``prefill_time_ms``, ``cached_tokens``, ``worker``,
  ``replay.input_sequence_hashes`` (not read), and, when set, ``model``.

What it lacks: ``max_tokens``, whether the client streamed, the endpoint, any status or finish
reason, each token's time (only ``avg_itl_ms``), and the client's view (the network and the
client's own parsing). 1.6.1 against its mocker traced a stream whose client closed it after 3
chunks as if it had run to the end (``output_tokens`` 2000, the ``max_tokens`` asked, 11.7 s),
and wrote no record for a request the frontend refused (an unknown model, a negative
``max_tokens``): ``trace_abandoned_refused.jsonl``. Other event types (``tool_*`` events from an agent harness,
``request_payload``) are skipped and counted. Dynamo 1.6.1 run here against its mocker
(``scripts/make_recording_fixtures.sh dynamo``) traced every request, chat and completions,
streamed and not, with all of the fields above but ``model``.
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
    max_tokens_note,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule

FORMAT = "dynamo-trace"
TOOL = "NVIDIA Dynamo request trace"
SCHEMA = "dynamo.request.trace.v1"
REQUEST_END = "request_end"


def trace_event(doc: Any) -> Mapping[str, Any] | None:
    """The ``dynamo.request.trace.v1`` record of a line (the file sink's ``event``, or the
    record itself as other sinks write it), None for anything else."""
    if not isinstance(doc, Mapping):
        return None
    event = doc.get("event", doc)
    if isinstance(event, Mapping) and event.get("schema") == SCHEMA:
        return event
    return None


def is_dynamo_trace(doc: Any) -> bool:
    """A line of Dynamo's per-request trace."""
    return trace_event(doc) is not None


@dataclass(frozen=True)
class Ended:
    """One ``request_end`` record's figures (NaN where absent)."""

    received_ms: float
    prompt: float
    output: float
    ttft_s: float
    e2e_s: float
    itl_s: float
    model: str
    prompt_from_replay: bool
    line: int


def _number(
    path: Path, line: int, request: Mapping[str, Any], key: str, *, whole: bool = False
) -> float:
    value = request.get(key)
    if value is None:
        return math.nan
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (whole and value != int(value))
    ):
        kind = "a whole number >= 0" if whole else "a finite number >= 0"
        raise TraceError(
            path, f"must be {kind}, got {value!r}"[:120], line=line, field=f"event.request.{key}"
        )
    return float(value)


def _ended(path: Path, line: int, event: Mapping[str, Any]) -> Ended:
    request = event.get("request")
    if not isinstance(request, Mapping):
        raise TraceError(
            path,
            "a request_end record without its request object",
            line=line,
            field="event.request",
        )
    replay = request.get("replay")
    prompt = _number(path, line, request, "input_tokens", whole=True)
    from_replay = math.isnan(prompt) and isinstance(replay, Mapping)
    if from_replay:
        prompt = _number(path, line, replay, "input_length", whole=True)  # type: ignore[arg-type]
    output = _number(path, line, request, "output_tokens", whole=True)
    received = _number(path, line, request, "request_received_ms")
    for key, value in (
        ("input_tokens", prompt),
        ("output_tokens", output),
        ("request_received_ms", received),
    ):
        if math.isnan(value):
            raise TraceError(
                path,
                f"a request_end record without {key}: kvbudget needs each "
                "request's arrival, prompt and output tokens",
                line=line,
                field=f"event.request.{key}",
            )
    ttft, e2e = (_number(path, line, request, k) / 1000 for k in ("ttft_ms", "total_time_ms"))
    for key, value in (("ttft_ms", ttft), ("total_time_ms", e2e)):
        if value > MAX_MEASURED_S:
            raise TraceError(
                path,
                f"implausible time: {value * 1000:g} ms",
                line=line,
                field=f"event.request.{key}",
            )
    if e2e < ttft - 1e-9:
        raise TraceError(
            path,
            f"the request ends ({e2e * 1000:g} ms) before its first token ({ttft * 1000:g} ms)",
            line=line,
            field="event.request.total_time_ms",
        )
    model = request.get("model")
    return Ended(
        received_ms=received,
        prompt=prompt,
        output=output,
        ttft_s=ttft,
        e2e_s=e2e,
        itl_s=_number(path, line, request, "avg_itl_ms") / 1000,
        model=model if isinstance(model, str) else "",
        prompt_from_replay=from_replay,
        line=line,
    )


def read_ended(path: Path) -> tuple[list[Ended], Counter[str]]:
    """Every ``request_end`` record of the file, and how many records of each other type."""
    ended: list[Ended] = []
    others: Counter[str] = Counter()
    for line, doc in json_lines(path):
        event = trace_event(doc)
        if event is None:
            raise TraceError(
                path,
                f"not a record of Dynamo's request trace (schema {SCHEMA}, "
                "as its file sink writes one a line)",
                line=line,
            )
        kind = event.get("event_type")
        if kind != REQUEST_END:
            others[str(kind)] += 1
            continue
        ended.append(_ended(path, line, event))
    if not ended:
        seen = ", ".join(f"{n} {c}" for n, c in others.most_common(5))
        raise TraceError(path, f"holds no request_end record (records here: {seen})")
    return ended, others


def _notes(ended: list[Ended], others: Counter[str]) -> list[str]:
    notes = [
        "holds, per request, the frontend's arrival (request_received_ms), prompt and output "
        "tokens, TTFT, E2E and mean inter-token time (ttft_ms, total_time_ms, avg_itl_ms); "
        "lacks max_tokens, a status, streaming, each token's time and the client's view",
        "TTFT and E2E are Dynamo's frontend's own, from when it received the HTTP request: its "
        "preprocessing, routing, the worker's queue and prefill included, the network to the "
        "client not (simulated with kvbudget's API-server front end)",
        "the trace says when requests reached the frontend, not how its clients sent them (a "
        "production log): replayed open loop at the recorded arrivals",
        "no status: every traced request is taken as finished (Dynamo 1.6.1 traced a stream "
        "its client closed after 3 chunks as finished, with all 2000 tokens asked; requests "
        "the frontend refused left no record); one without ttft_ms or total_time_ms is "
        "counted as failed",
    ]
    replayed = sum(e.prompt_from_replay for e in ended)
    if replayed:
        notes.append(
            f"{replayed} request{'s' if replayed > 1 else ''} without input_tokens: "
            "the prompt is replay.input_length"
        )
    if others:
        notes.append(
            f"{sum(others.values())} other records skipped ("
            + ", ".join(f"{n} {c}" for n, c in others.most_common(4))
            + ")"
        )
    return notes


def read_dynamo_trace(
    path: Path, default_tier: str, max_output_rule: MaxOutputRule | None = None
) -> Recording:
    """Read Dynamo's per-request trace (plain JSON lines; gunzip a ``jsonl_gz`` file first)."""
    ended, others = read_ended(path)
    models = sorted({e.model for e in ended if e.model})
    if len(models) > 1:
        raise TraceError(
            path,
            f"holds requests of {len(models)} models ({', '.join(models)}): "
            "pass one model's requests",
        )
    t0 = min(e.received_ms for e in ended)
    arrival = np.array([(e.received_ms - t0) / 1000 for e in ended], dtype=np.float64)
    no_max = np.full(len(ended), math.nan)
    workload, counts, warnings = finish_columns(
        path,
        FORMAT,
        prompt=np.array([e.prompt for e in ended]),
        output=np.array([e.output for e in ended]),
        arrival=arrival,
        fields={
            "prompt_tokens": "event.request.input_tokens",
            "output_tokens": "event.request.output_tokens",
            "arrival_s": "event.request.request_received_ms",
        },
        max_output=no_max,
        default_tier=default_tier,
        max_output_rule=max_output_rule,
        completion_order=True,  # written as they end
        line_of=lambda row: ended[row].line,
    )
    kept = [ended[r] for r in workload.request_id.tolist()]
    ttft = np.array([e.ttft_s for e in kept])
    e2e = np.array([e.e2e_s for e in kept])
    status = [
        "completed" if math.isfinite(t) and math.isfinite(d) else "error"
        for t, d in zip(ttft, e2e, strict=True)
    ]
    counts["num_failed"] = status.count("error")
    notes = [*_notes(ended, others), max_tokens_note(no_max, max_output_rule)]
    config: dict[str, Any] = {"model": models[0]} if models else {}
    return build_recording(
        path,
        FORMAT,
        workload,
        ttft=ttft,
        e2e=e2e,
        status=status,
        stage=[""] * len(kept),
        itl_mean=np.array([e.itl_s for e in kept]),
        config=config,
        counts=counts,
        notes=[*notes, *warnings],
        stages=(RecordedStage("", "unknown"),),
        tool=TOOL,
        sent_s=arrival[workload.request_id],
    )
