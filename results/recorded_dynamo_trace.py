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
- ``replay.trace_block_size`` and ``replay.input_sequence_hashes``: the prompt's prefix, one
  hash a block of that many tokens, the last block partial where the prompt ends inside one,
  each hash chained over the blocks before it (``lib/llm/src/request_trace/replay.rs``
  ``input_sequence_hashes``, lines 33-52 at 0366e63a: the router's ``compute_seq_hash_for_block``
  over its local block hashes, "identical to the router/mocker sequence-aware hashing path so
  replay preserves shared-prefix identity"), so two requests with the same first ``k`` hashes
  began with the same ``k`` blocks: simulated as shared prefix blocks, as a Mooncake trace's
  ``hash_ids`` (Dynamo's own converter maps them to Mooncake-style ids, one block size a file);
- ``cached_tokens``: the prompt tokens the worker served from its prefix cache (said beside the
  simulated sharing);
- ``worker``: the ``prefill_worker_id`` and ``decode_worker_id`` (with ``*_dp_rank`` where a
  worker runs data-parallel engines) that served the request: the engines seen make the
  simulated fleet (one replica each, behind round robin, the frontend's default
  ``--router-mode``: ``dynamo/frontend/frontend_args.py`` line 397 of the 1.6.1 install, said
  as assumed: the trace does not name the mode); a request prefilled on one worker and decoded
  on another was served disaggregated, which a recording's simulation does not model (said);
- ``prefill_wait_time_ms``, ``prefill_time_ms`` (not read), and, when set, ``model``.

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
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    finish_columns,
    json_lines,
    max_tokens_note,
)
from kvbudget.results.recorded_guidellm_prefix import SharedPrefix, cache_note
from kvbudget.results.recorded_guidellm_turns import workload_conversations
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.closed_loop import MAX_THINK_TIME_S
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


EngineId = tuple[int, int | None]
"""An engine a record names: its worker id and data-parallel rank (None where not given)."""


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
    cached: float = math.nan
    block_tokens: int = 0
    hashes: tuple[int, ...] = ()
    prefill_on: EngineId | None = None
    decode_on: EngineId | None = None
    session: str = ""
    parent_session: str = ""


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
    block, hashes = _replay_hashes(path, line, replay)
    prefill_on, decode_on = _workers(path, line, request.get("worker"))
    session, parent_session = _agent(path, line, event.get("agent_context"))
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
        cached=_number(path, line, request, "cached_tokens", whole=True),
        block_tokens=block,
        hashes=hashes,
        prefill_on=prefill_on,
        decode_on=decode_on,
        session=session,
        parent_session=parent_session,
    )


def _agent(path: Path, line: int, context: Any) -> tuple[str, str]:
    """A record's agent session (``agent_context.session_id``) and its parent's (a sub-agent's
    ``parent_session_id``; "" where none): the client's ``x-dynamo-session-id`` and
    ``x-dynamo-parent-session-id`` headers (the 1.6.1 install's
    ``dynamo/thunderagent_router/README.md`` lines 76-78)."""
    if context is None:
        return "", ""
    out: list[str] = []
    for key in ("session_id", "parent_session_id"):
        value = context.get(key) if isinstance(context, Mapping) else context
        if value is not None and (not isinstance(value, str) or not value):
            raise TraceError(
                path,
                f"must be a non-empty string, got {value!r}"[:120],
                line=line,
                field=f"event.agent_context.{key}",
            )
        out.append(value or "")
    return out[0], out[1]


def agent_turns(ended: list[Ended]) -> tuple[list[int], list[float], str | None]:
    """Each record's turn before it in its agent session (an index into ``ended``, -1: none)
    and its delay after that turn ended, and the note saying so; ``([], [], None)`` where no
    record names a session. An agent sends its next turn when the one before it answered and
    its tool ran: the later turn is replayed no sooner than its recorded arrival and than the
    turn before it ended plus the gap the trace shows after that end (its tool or think time),
    as Dynamo's own replay keeps a turn after "both its target timestamp and its predecessor's
    completion" and keeps the tool time (its agent-tracing replay guide, step 4). A turn the
    client sent before the one before it ended (the trace's end: arrival plus total_time_ms,
    whole ms) did not wait for it and waits for none; a sub-agent's session
    (``parent_session_id``) starts at its recorded arrivals."""
    sessions: dict[str, list[int]] = {}
    for i, e in enumerate(ended):
        if e.session:
            sessions.setdefault(e.session, []).append(i)
    if not sessions:
        return [], [], None
    previous, delay = [-1] * len(ended), [0.0] * len(ended)
    overlapped = 0
    for rows in sessions.values():
        rows.sort(key=lambda i: ended[i].received_ms)
        for before, after in pairwise(rows):
            end_ms = ended[before].received_ms + ended[before].e2e_s * 1000
            gap_s = (ended[after].received_ms - end_ms) / 1000
            if not math.isfinite(gap_s) or gap_s < -0.001:
                overlapped += 1
                continue
            if gap_s <= MAX_THINK_TIME_S:
                previous[after], delay[after] = before, max(0.0, gap_s)
    subs = len({e.session for e in ended if e.session and e.parent_session})
    linked = sum(p >= 0 for p in previous)
    note = (
        f"{sum(map(len, sessions.values()))} requests of {len(sessions)} agent sessions "
        f"(agent_context.session_id: the x-dynamo-session-id header): {linked} later turns "
        "each sent no sooner than its recorded arrival and than the turn before it ended "
        "plus the gap the trace shows after that end (its tool time), as the agent waited"
    )
    if overlapped:
        note += (
            f"; {overlapped} sent before the turn before them ended wait for none (they "
            "did not wait)"
        )
    if subs:
        note += f"; {subs} sub-agent sessions (parent_session_id) start at their recorded arrivals"
    return previous, delay, note


def _workers(path: Path, line: int, worker: Any) -> tuple[EngineId | None, EngineId | None]:
    """The engines a record's ``worker`` names: that of its prefill and that of its decode
    (None where it names none). Ids and ranks are whole numbers (Dynamo's ``WorkerInfo``:
    ``u64`` ids, ``u32`` ranks); anything else is refused naming the field."""
    if worker is None:
        return None, None
    if not isinstance(worker, Mapping):
        raise TraceError(
            path, "must be an object of worker ids", line=line, field="event.request.worker"
        )
    out: list[EngineId | None] = []
    for role in ("prefill", "decode"):
        ids = []
        for key in (f"{role}_worker_id", f"{role}_dp_rank"):
            value = worker.get(key)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise TraceError(
                    path,
                    f"must be a whole number >= 0, got {value!r}"[:120],
                    line=line,
                    field=f"event.request.worker.{key}",
                )
            ids.append(value)
        out.append(None if ids[0] is None else (ids[0], ids[1]))
    return out[0], out[1]


ROUTER_MODES = {
    "round-robin": "round_robin",
    "kv": "prefix_affinity",
    "least-loaded": "least_tokens",
}
"""Dynamo's ``--router-mode`` choices (1.6.1's ``dynamo/common/configuration/groups/
router_args.py``: round-robin, random, power-of-two, kv, direct, least-loaded,
device-aware-weighted) that have a kvbudget fleet router, and the nearest: ``kv`` scores the
workers by the prompt's cached blocks (prefix affinity), ``least-loaded`` by active requests
(kvbudget's routers count tokens)."""


def fleet_of(ended: list[Ended]) -> tuple[dict[str, Any], str | None]:
    """The fleet the records' ``worker`` fields name, as the recording's settings
    (``num_replicas``, where more than one engine served: behind kvbudget's default fleet
    router, round robin, as Dynamo's frontend's default; the trace does not record the mode,
    so it is said as assumed), and the note saying it; ``num_servers`` 1 where every record
    names one engine (one server, known), and ``({}, None)`` where none names one."""
    prefill = {e.prefill_on for e in ended if e.prefill_on is not None}
    decode = {e.decode_on for e in ended if e.decode_on is not None}
    split = sum(
        1
        for e in ended
        if e.prefill_on is not None and e.decode_on is not None and e.prefill_on != e.decode_on
    )
    if split:
        return {}, (
            f"{split} of the {len(ended)} requests were prefilled on one worker and decoded on "
            f"another (worker.prefill_worker_id, decode_worker_id: {len(prefill)} prefill and "
            f"{len(decode)} decode engines seen): the deployment was disaggregated, and "
            "kvbudget simulates a recording on aggregated engines, so the KV transfer and the "
            "pools' separate queues are not simulated: the simulated TTFT and TPOT are those "
            "of an aggregated server, not of this one"
        )
    engines = prefill | decode
    if len(engines) == 1:
        return {"num_servers": 1}, None  # every record names the one engine: not assumed
    if not engines:
        return {}, None
    modes = ", ".join(
        f"--router-mode {m}: --set fleet.router={r}"
        for m, r in ROUTER_MODES.items()
        if m != "round-robin"
    )
    return {"num_replicas": len(engines)}, (
        f"the records name {len(engines)} engines (worker.decode_worker_id and its dp_rank), "
        f"simulated as {len(engines)} replicas behind round_robin (ASSUMED: Dynamo's frontend's "
        f"default --router-mode round-robin; the trace does not say the mode; {modes})"
    )


def _replay_hashes(path: Path, line: int, replay: Any) -> tuple[int, tuple[int, ...]]:
    """A record's ``replay.trace_block_size`` and ``input_sequence_hashes`` (u64 each), or
    ``(0, ())`` where it has none."""
    if not isinstance(replay, Mapping) or replay.get("input_sequence_hashes") is None:
        return 0, ()
    hashes = replay["input_sequence_hashes"]
    if not isinstance(hashes, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 2**64 for h in hashes
    ):
        raise TraceError(
            path,
            "must be a list of unsigned 64-bit hashes",
            line=line,
            field="event.request.replay.input_sequence_hashes",
        )
    block = replay.get("trace_block_size")
    if not isinstance(block, int) or isinstance(block, bool) or block <= 0:
        raise TraceError(
            path,
            f"must be a whole number > 0 beside the hashes, got {block!r}"[:120],
            line=line,
            field="event.request.replay.trace_block_size",
        )
    return block, tuple(hashes)


def _prefix(path: Path, ended: list[Ended]) -> SharedPrefix | None:
    """The records' prefix hashes as shared prefix blocks (each distinct hash a small id, in
    order of first use, as Dynamo's converter numbers them); None where no record has any. One
    block size a trace, as Dynamo's converter requires (``bail!``: "one trace block size per
    artifact"): blocks of two sizes cannot be told apart as prefixes."""
    with_hashes = [e for e in ended if e.hashes]
    if not with_hashes:
        return None
    first = with_hashes[0]
    other = next((e for e in with_hashes if e.block_tokens != first.block_tokens), None)
    if other is not None:
        raise TraceError(
            path,
            f"its records hash prompts in blocks of {first.block_tokens} "
            f"tokens (line {first.line}) and of {other.block_tokens} (here): one "
            "block size a trace (Dynamo's own converter refuses two); pass the "
            "records of one capture",
            line=other.line,
            field="event.request.replay.trace_block_size",
        )
    ids: dict[int, int] = {}
    flat: list[int] = []
    offsets = [0]
    shared = 0
    for e in ended:
        shared += bool(e.hashes) and e.hashes[0] in ids
        flat.extend(ids.setdefault(h, len(ids)) for h in e.hashes)
        offsets.append(len(flat))
    note = (
        f"prompt prefixes: replay.input_sequence_hashes, Dynamo's chained hash of each "
        f"{first.block_tokens}-token block, simulated as shared prefix blocks ({len(ids)} "
        f"distinct blocks in {len(flat)}; {shared} of {len(ended)} requests begin with a "
        "block an earlier one began with)"
    )
    if len(with_hashes) < len(ended):
        note += (
            f"; {len(ended) - len(with_hashes)} records without hashes get none (each "
            "prefilled whole)"
        )
    return SharedPrefix(
        (np.array(flat, dtype=np.int64), np.array(offsets, dtype=np.int64)),
        first.block_tokens,
        note,
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
    prefix = _prefix(path, ended)
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
            "hash_ids": "event.request.replay.input_sequence_hashes",
        },
        max_output=no_max,
        default_tier=default_tier,
        max_output_rule=max_output_rule,
        completion_order=True,  # written as they end
        prefix=None if prefix is None else prefix.hashes,
        prefix_block_tokens=None if prefix is None else prefix.block_tokens,
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
    fleet, fleet_said = fleet_of(ended)
    if fleet_said is not None:
        notes.append(fleet_said)
    previous, delay, turns_said = agent_turns(ended)
    if turns_said is not None:
        notes.append(turns_said)
    if prefix is not None:
        notes.append(prefix.note)
    cache = cache_note(
        [e.cached for e in ended], [e.prompt for e in ended], workload.request_id, prefix
    )
    if cache is not None:
        notes.append(cache[0])
        counts["num_prompt_tokens_cached"] = cache[1]
    config: dict[str, Any] = {"model": models[0], **fleet} if models else dict(fleet)
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
        conversations=workload_conversations(previous, delay, workload.request_id.tolist())
        if turns_said is not None
        else None,
    )
