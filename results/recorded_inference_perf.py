"""inference-perf's per-request report: ``per_request_lifecycle_metrics.json``.

What the file holds (github.com/kubernetes-sigs/inference-perf, ``inference_perf/apis/
base.py``, ``RequestLifecycleMetric``; written by ``reportgen/base.py`` when
``report.request_lifecycle.per_request`` is true): a JSON list, one object per request, with
``start_time`` and ``end_time`` (the client's monotonic clock, seconds), ``request`` (the
request body as JSON text: ``model``, ``max_tokens``, ``ignore_eos``), ``info``
(``input_tokens`` or ``request_metrics.text.input_tokens``; ``response_metrics`` (0.6+;
``response_info`` in 0.5, ``info`` itself up to 0.4: :func:`_response`) with
``output_tokens`` (inference-perf's tokenizer's count), ``server_usage.completion_tokens``
(the server's) and ``output_token_times``, the arrival of each output token), ``error`` (null
or ``error_type``, ``error_msg``) and, in later versions, ``stage_id`` and ``scheduled_time``.
TTFT is the first output token's time less ``start_time``, as inference-perf computes it.

Stages: ``stage_id`` where the file has it; otherwise the ``stage_N_lifecycle_metrics.json``
files beside it give each stage's request count (``load_summary.count``) and rate
(``load_summary.requested_rate``), and requests are assigned in start order (inference-perf
runs its stages one after another). Each stage is an open loop at its requested rate, or, of
the ``concurrent`` load type (``load_summary.concurrency``), a capped one: inference-perf
0.7.0 runs a ``concurrent`` stage of ``num_requests`` N as a rate of N requests a second for
one second (``inference_perf/main.py``: ``stage.duration = 1``, ``stage.rate =
stage.num_requests``), its due times drawn by ``ConstantLoadTimer`` (``loadgen/load_timer.py``:
N exponential gaps, unseeded, scaled to sum to the duration), each sent when one of the
``concurrency_level`` slots is free: not every request at once.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    cap_reached,
    dig,
    fewer_rows,
    finish_columns,
    load_json,
    max_tokens_note,
    number,
    perf_counter_time,
)
from kvbudget.results.recorded_guidellm_prefix import SharedPrefix, body_key
from kvbudget.results.recorded_guidellm_turns import (
    Turn,
    conversation_prefix,
    turn_links,
    turn_of,
    with_history,
    workload_conversations,
)
from kvbudget.results.recorded_idle import closed_loop_idle_note
from kvbudget.results.recorded_inference_perf_load import (
    TRACE_CAP_KEY,
    WorkerCap,
    due_ticks,
    run_config,
    sweep_note,
    trace_cap,
    trace_file,
    worker_cap,
)
from kvbudget.results.recorded_inference_perf_prefix import (
    inference_perf_prefix,
    shared_prefix_settings,
)
from kvbudget.results.recorded_refusals import say_context_refusals
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MAX_TOKENS, MaxOutputRule

FloatArray = npt.NDArray[np.float64]


def session_report_refusal(doc: Any) -> str | None:
    """Why an inference-perf session report is not a recording (None: ``doc`` is none).

    A trace session replay (inference-perf 0.7.0, ``data.type`` ``otel_trace_replay`` or
    ``weka_trace_replay``) writes session reports beside the request ones
    (``inference_perf/reportgen/base.py``, ``generate_session_reports``):
    ``per_session_lifecycle_metrics.json`` (``report.session_lifecycle.per_session``), one
    ``SessionLifecycleMetric`` a session (``inference_perf/apis/base.py``: ``session_id``,
    ``stage_id``, ``start_time``, ``end_time``, ``duration_sec``, ``num_events``,
    ``num_events_completed``, the session's token totals), and ``summary_`` /
    ``stage_N_session_lifecycle_metrics.json`` (``summarize_sessions``: ``num_sessions``,
    ``sessions_per_second``, distributions). None holds a request's send time, token counts
    or latency, so there is nothing to simulate or compare; the requests are in the run's
    ``per_request_lifecycle_metrics.json``."""
    row = doc[0] if isinstance(doc, list) and doc and isinstance(doc[0], dict) else None
    if row is not None and "info" not in row and \
            {"session_id", "num_events", "start_time", "end_time"} <= set(row):
        return ("is inference-perf's per_session_lifecycle_metrics.json "
                "(report.session_lifecycle.per_session): one row per session of its trace "
                "session replay (start, end, event counts, token totals), no request's send "
                "time, token counts or latency; pass per_request_lifecycle_metrics.json from the "
                "same run (report.request_lifecycle.per_request: true in its config)")
    if isinstance(doc, dict) and "num_sessions" in doc and "sessions_per_second" in doc:
        return ("is an inference-perf session summary (summary_ or "
                "stage_N_session_lifecycle_metrics.json): aggregates over sessions only; pass "
                "per_request_lifecycle_metrics.json from the same run "
                "(report.request_lifecycle.per_request: true in its config)")
    return None


def _body(req: Mapping[str, Any]) -> dict[str, Any]:
    text = req.get("request")
    if isinstance(text, str):
        try:
            body = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return {}
        return body if isinstance(body, dict) else {}
    return {}


SESSION_REPORTS = ("per_session_lifecycle_metrics.json", "summary_session_lifecycle_metrics.json",
                   "stage_*_session_lifecycle_metrics.json")
"""The session reports a trace session replay writes beside the request ones (inference-perf
0.7.0 ``reportgen/base.py``, ``generate_session_reports``: the summary and per-stage ones by
default)."""


def _session_replay(path: Path) -> str | None:
    """The first session report beside the file (None: none, the run replayed no sessions)."""
    for pattern in SESSION_REPORTS:
        found = sorted(path.parent.glob(pattern))
        if found:
            return found[0].name
    return None


def _stage_files(path: Path, sessions: bool = False) -> list[tuple[int, float | None,
                                                                    int | None]]:
    """``(count, requested rate, concurrency)`` of each ``stage_N_lifecycle_metrics.json``
    beside the file (``load_summary.concurrency``: the ``concurrent`` load type's
    ``concurrency_level``, whose ``requested_rate`` is its ``num_requests``,
    inference_perf/main.py ``stage.rate = stage.num_requests``). Of a trace session replay
    (``sessions``) they are its ``session_rate``, 0 when unset, and ``concurrent_sessions``
    (``loadgen/load_generator.py``: ``rate=session_rate if session_rate else 0.0``)."""
    found = []
    for p in path.parent.glob("stage_*_lifecycle_metrics.json"):
        m = re.fullmatch(r"stage_(\d+)_lifecycle_metrics\.json", p.name)
        if m:
            found.append((int(m.group(1)), p))
    out: list[tuple[int, float | None, int | None]] = []
    for _, p in sorted(found):
        doc = load_json(p)
        count = dig(doc, "load_summary", "count")
        rate = dig(doc, "load_summary", "requested_rate")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise TraceError(p, f"not a count: {count!r}", field="load_summary.count")
        rate_f = number(rate, p, "load_summary.requested_rate")
        if sessions and rate_f == 0:
            rate_f = math.nan
        if not math.isnan(rate_f) and rate_f <= 0:
            raise TraceError(p, f"must be > 0, got {rate!r}", field="load_summary.requested_rate")
        conc = dig(doc, "load_summary", "concurrency")
        if conc is not None and (not isinstance(conc, int) or isinstance(conc, bool)
                                 or conc < 1):
            raise TraceError(p, f"must be a whole number >= 1, got {conc!r}"[:200],
                             field="load_summary.concurrency")
        out.append((count, None if math.isnan(rate_f) else rate_f, conc))
    return out


def _response(info: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """Where a request's response figures are (``output_tokens``, ``output_token_times``,
    ``server_usage``), by inference-perf's layout of ``InferenceInfo``
    (``inference_perf/apis/base.py``): ``info.response_metrics`` from 0.6.0, ``info.response_info``
    in 0.5.0 (``StreamedInferenceResponseInfo``; ``UnaryInferenceResponseInfo`` of a request not
    streamed, its ``output_tokens`` only), and ``info`` itself up to 0.4.0 (``output_tokens``,
    ``output_token_times``). Read from the one the request has: a 0.4 or 0.5 file was read as
    generating nothing ("every row was dropped (0 output tokens)")."""
    for key in ("response_metrics", "response_info"):
        found = info.get(key)
        if isinstance(found, Mapping):
            return f"info.{key}", found
    if "output_tokens" in info or "output_token_times" in info:
        return "info", info
    return "info.response_metrics", {}


def _not_streamed(req: Mapping[str, Any]) -> bool:
    """A request inference-perf sent with ``"stream": false`` (``api.streaming``, false by
    default: 0.7.0 ``config/apis/config.py`` ``APIConfig.streaming``; the body's ``stream``,
    ``apis/completion.py``, ``apis/chat.py``) that returned tokens: its response has no
    ``output_token_times`` (0.7.0 ``UnaryResponseMetrics``; an empty list in 0.4's flat
    ``InferenceInfo``), so the time of its first token is not known; its client got the whole
    answer at its end."""
    if req.get("error") or _body(req).get("stream") is not False:
        return False
    info = req.get("info")
    resp = _response(info)[1] if isinstance(info, Mapping) else {}
    if resp.get("output_token_times"):
        return False
    out = dig(resp, "server_usage", "completion_tokens")
    out = out if out is not None else resp.get("output_tokens")
    return isinstance(out, int | float) and not isinstance(out, bool) and out > 0


def _one(path: Path, i: int, req: Any) -> tuple[float, float, float, float, float, str, float,
                                                 int | None, bool | None, float]:
    """prompt, output, start, ttft, e2e, status, max_tokens, stage_id, ignore_eos and the mean
    gap between the output tokens after the first (``output_token_times``, one a token; NaN
    with fewer than two)."""
    if not isinstance(req, dict):
        raise TraceError(path, "must be an object", row=i)
    t0 = perf_counter_time(req.get("start_time"), path, "start_time", i, "inference-perf")
    t1 = number(req.get("end_time"), path, "end_time", i)
    if math.isnan(t0):
        raise TraceError(path, "missing", row=i, field="start_time")
    info = req.get("info") or {}
    if not isinstance(info, Mapping):
        raise TraceError(path, f"must be an object, got {info!r}"[:80], row=i, field="info")
    p = number(dig(info, "request_metrics", "text", "input_tokens"), path,
               "info.request_metrics.text.input_tokens", i)
    if math.isnan(p):
        p = number(dig(info, "input_tokens"), path, "info.input_tokens", i)
    where, resp = _response(info)
    o = number(dig(resp, "server_usage", "completion_tokens"), path,
               f"{where}.server_usage.completion_tokens", i)
    if math.isnan(o):
        o = number(dig(resp, "output_tokens"), path, f"{where}.output_tokens", i)
    times = dig(resp, "output_token_times")
    first = gap = math.nan
    if times is not None:
        if not isinstance(times, list):
            raise TraceError(path, "must be a list of times", row=i,
                             field=f"{where}.output_token_times")
        if times:
            first = number(times[0], path, f"{where}.output_token_times", i) - t0
            if len(times) >= 2:
                last = number(times[-1], path, f"{where}.output_token_times", i)
                gap = (last - t0 - first) / (len(times) - 1)
        elif not req.get("error") and not math.isnan(o) and o > 0 and not _not_streamed(req):
            raise TraceError(path, f"empty, but the request generated {o:g} tokens", row=i,
                             field=f"{where}.output_token_times")
    e2e = t1 - t0
    if _not_streamed(req):  # the whole answer in one read, as its client saw it
        first, gap = e2e, 0.0
    status = "completed"
    if req.get("error"):
        kind = dig(req, "error", "error_type")
        status = f"error ({kind})" if isinstance(kind, str) else "error"
    for name, value in (("output_token_times", first), ("end_time", e2e)):
        if not math.isnan(value) and not 0 <= value <= MAX_MEASURED_S:
            raise TraceError(path, f"{'negative' if value < 0 else 'implausible'} time from "
                             f"start_time: {value:g} s", row=i, field=name)
    if not math.isnan(first) and not math.isnan(e2e) and e2e < first - 1e-9:
        raise TraceError(path, f"the request ends ({e2e:g} s) before its first token "
                         f"({first:g} s)", row=i, field="end_time")
    body = _body(req)
    mt = body.get("max_tokens")
    max_tokens = number(mt, path, "request.max_tokens", i) if mt is not None else math.nan
    sid = req.get("stage_id")
    eos = body.get("ignore_eos")
    return (p, 0.0 if math.isnan(o) else o, t0, first, e2e, status, max_tokens,
            sid if isinstance(sid, int) and not isinstance(sid, bool) else None,
            eos if isinstance(eos, bool) else None, gap)


def _prompt_tokens(path: Path, values: list[float]) -> FloatArray:
    """The requests' prompt tokens, each present and at most :data:`MAX_TOKENS` (checked
    before the conversations' prefix blocks are counted from them; the trace loader checks
    the rest)."""
    prompt = np.array(values, dtype=np.float64)
    for bad, problem in ((np.isnan(prompt), "missing"), (prompt > MAX_TOKENS, "implausibly large")):
        if bad.any():
            i = int(np.argmax(bad))
            said = problem if problem == "missing" else (
                f"{problem}: {prompt[i]:g} (the limit is {MAX_TOKENS:,})")
            raise TraceError(path, said, row=i, field="info.input_tokens")
    return prompt


def read_inference_perf(path: Path, default_tier: str,
                        max_output_rule: MaxOutputRule | None = None, seed: int = 0) -> Recording:
    """Read inference-perf's ``per_request_lifecycle_metrics.json``."""
    doc = load_json(path)
    if not isinstance(doc, list) or not doc:
        raise TraceError(path, "must be a non-empty JSON list of requests (inference-perf's "
                         "per_request_lifecycle_metrics.json)")
    rows = [_one(path, i, req) for i, req in enumerate(doc)]
    _refuse_all_failed(path, doc, [r[5] for r in rows])
    prompt = _prompt_tokens(path, [r[0] for r in rows])
    start = np.array([r[2] for r in rows])
    labels, stages, notes = _stages(path, start, [r[7] for r in rows])
    run = run_config(path)
    traced = _trace_replayed(run, labels, stages, notes)  # its workers' cap, for validate
    notes.extend(said for said in (sweep_note(run),) if said)
    cap = worker_cap(run)
    capped = _worker_capped(cap, labels, stages, notes)
    sent = start - float(start.min())
    due = sent.copy()
    for k, stage in enumerate(stages):
        if stage.load == "capped":
            members = np.array([lab == stage.label for lab in labels])
            stages[k] = _concurrent_due(
                stage, members, sent, sent + np.array([r[4] for r in rows]), seed, due, notes,
                cap.load_type if cap is not None and stage.label in capped else "concurrent")
        elif stage.load == "closed" and stage.max_concurrency:
            members = np.array([lab == stage.label for lab in labels])
            idle = closed_loop_idle_note(stage.label, stage.max_concurrency, sent[members],
                                         (sent + np.array([r[4] for r in rows]))[members])
            notes.extend([idle] if idle else [])
    recorded = np.array([r[6] for r in rows])
    recorded_or_none = recorded if np.isfinite(recorded).any() else None
    if unstreamed := sum(map(_not_streamed, doc)):
        notes.append(f"{counted(unstreamed, 'request')} not streamed (\"stream\": false in the "
                     "body; inference-perf's api.streaming, false by default): the file has no "
                     "time of a first token, so each is read as its client saw it, the whole "
                     "answer at its end: TTFT and TPOT are left out of every comparison and fit, "
                     "E2E kept (stream the run, api.streaming: true, for TTFT)")
    turns = [_turn(req) for req in doc]
    prefix = _prefix(path, doc, prompt, notes, turns)
    workload, counts, warnings = finish_columns(
        path, "inference-perf", prompt=prompt, output=np.array([r[1] for r in rows]),
        arrival=due,
        fields={"prompt_tokens": "info.input_tokens",
                "output_tokens": "info.response_metrics.server_usage.completion_tokens",
                "arrival_s": "start_time", "max_output_tokens": "request.max_tokens"},
        default_tier=default_tier, max_output=recorded_or_none, max_output_rule=max_output_rule,
        # recorded when each response ends (inference-perf 0.7.0
        # inference_perf/client/modelserver/openai_client.py -> request_collector record_metric)
        completion_order=True, prefix=None if prefix is None else prefix.hashes,
        prefix_block_tokens=None if prefix is None else prefix.block_tokens)
    order = workload.request_id
    status = [rows[r][5] for r in order.tolist()]
    counts["num_failed"] = sum(s.startswith("error") for s in status)
    config: dict[str, Any] = dict(traced)
    body = _body(doc[0]) if isinstance(doc[0], dict) else {}
    if isinstance(body.get("model"), str):
        config["model"] = body["model"]
    finite = recorded[np.isfinite(recorded)]
    if len(finite) and finite.min() == finite.max():
        config["max_tokens"] = int(finite[0])
    eos = {r[8] for r in rows if r[8] is not None}
    if len(eos) == 1:
        config["ignore_eos"] = eos.pop()
    notes.append(max_tokens_note(recorded_or_none, max_output_rule))
    # the server's own error text (inference-perf 0.7.0 keeps the response body's in
    # error_msg): its refusals for the model's context, said
    say_context_refusals((str(dig(req, "error", "error_msg") or "")
                          for req in doc if isinstance(req, dict)), counts, notes, config)
    ttft, e2e = (np.array([r[k] for r in rows]) for k in (3, 4))
    return build_recording(path, "inference-perf", workload, ttft=ttft[order], e2e=e2e[order],
                           status=status, stage=[labels[r] for r in order.tolist()],
                           itl_mean=np.array([r[9] for r in rows])[order], config=config,
                           counts=counts, notes=[*notes, *warnings], stages=tuple(stages),
                           sent_s=sent[order] - float(due.min()), tool="inference-perf",
                           conversations=workload_conversations(
                               turn_links(turns), [0.0] * len(turns), order.tolist()))


def _turn(req: Any) -> Turn:
    """A request's user session and chat round (a multi-turn chat run, ``shared_prefix`` data
    with ``enable_multi_turn_chat``: inference-perf 0.7.0 ``apis/user_session.py``
    ``update_inference_info`` writes ``info.extra_info.user_session`` and ``chat_round``);
    None for any other."""
    return turn_of(dig(req, "info", "extra_info", "user_session"),
                   dig(req, "info", "extra_info", "chat_round"))


def _refuse_all_failed(path: Path, doc: list[Any], status: list[str]) -> None:
    """A run whose every request failed (a server that was down, a wrong URL or model) has
    nothing to simulate or compare: refused naming the errors inference-perf recorded
    (``error.error_type``, the first ``error_msg``), not as rows dropped for want of tokens."""
    if not status or not all(s.startswith("error") for s in status):
        return
    kinds: dict[str, int] = {}
    for s in status:
        kind = s.removeprefix("error").strip(" ()") or "error"
        kinds[kind] = kinds.get(kind, 0) + 1
    first = next((str(dig(r, "error", "error_msg")) for r in doc if isinstance(r, dict)
                  and dig(r, "error", "error_msg")), "")
    said = ", ".join(f"{c} {k}" for k, c in kinds.items())
    raise TraceError(path, f"every one of its {len(status)} requests failed ({said}"
                     + (f"; the first: {first[:200]}" if first else "") + "): the server "
                     "answered none, so there is nothing to simulate or compare")


def _prefix(path: Path, doc: list[Any], prompt: FloatArray, notes: list[str],
            turns: list[Turn]) -> SharedPrefix | None:
    """The shared system prompts of a ``shared_prefix`` run (its ``config.yaml`` beside the
    report says so), read from the request bodies, else a multi-turn chat's history (each
    round carries its session's before it); the notes appended to ``notes``."""
    settings = shared_prefix_settings(path)
    keys = [body_key(_body(req)) if isinstance(req, dict) else None for req in doc]
    synthetic = None if settings is None else inference_perf_prefix(settings, keys,
                                                                   prompt.tolist())
    prefix, said = with_history(synthetic, conversation_prefix(turns, prompt.tolist(),
                                                               INFERENCE_PERF_TURNS))
    notes.extend(said)
    return prefix


INFERENCE_PERF_TURNS = ("info.extra_info.user_session, chat_round",
                        "a later round is sent no sooner than its recorded send nor than the "
                        "session's round before it ended, as inference-perf waits for it "
                        "(LocalUserSession.get_context)")
"""How inference-perf's report names a request's turn, and how its turns are replayed."""


def _refuse_fewer_rows(path: Path, ids: list[int | None], n: int) -> None:
    """Refuse a per-request file holding fewer requests than the stage files beside it count.
    inference-perf writes each stage's ``load_summary.count`` as the number of its requests
    (0.7.0 inference_perf/reportgen/base.py:694-697, ``len(metrics)``; the requests bucketed
    by ``stage_id``, :984-1008) and every request in ``per_request_lifecycle_metrics.json``
    (:1020-1028), failed or not: a copy with requests cut otherwise reads as a smaller run."""
    counted: list[tuple[int, int, Path]] = []
    for p in path.parent.glob("stage_*_lifecycle_metrics.json"):
        m = re.fullmatch(r"stage_(\d+)_lifecycle_metrics\.json", p.name)
        count = dig(load_json(p), "load_summary", "count") if m else None
        if m and isinstance(count, int) and not isinstance(count, bool):
            counted.append((int(m.group(1)), count, p))
    if all(s is not None for s in ids):
        for k, count, p in sorted(counted):
            rows = sum(1 for s in ids if s == k)
            if rows < count:
                raise TraceError(path, fewer_rows(
                    f"holds {rows} requests of stage {k}, but {p.name} beside it counts "
                    f"{count} (load_summary.count)",
                    f"that load_summary.count is set to {rows}"))
    elif counted and n < sum(c for _, c, _ in counted):
        left, filled = n, []
        for _, count, p in sorted(counted):  # its requests go to the stages in start order
            filled.append(f"{p.name} {min(count, left)}")
            left -= min(count, left)
        raise TraceError(path, fewer_rows(
            f"holds {n} requests, but the stage files beside it count "
            f"{sum(c for _, c, _ in counted)} (load_summary.count)",
            "their load_summary.count are set to what it holds of each stage (its first "
            f"requests: {', '.join(filled)}; without a stage_id its requests are given to the "
            "stages in start order)"))


def _stages(path: Path, start: Any, ids: list[int | None]) -> tuple[list[str],
                                                                     list[RecordedStage],
                                                                     list[str]]:
    """Each request's stage label, the stages and a note on how they were found."""
    sessions = _session_replay(path)
    files = _stage_files(path, sessions is not None)
    n = len(start)
    _refuse_fewer_rows(path, ids, n)
    if sessions:
        counted = files and sum(f[0] for f in files) == n
        labels, stages, notes = _session_stages(start, files if counted else [(n, None, None)],
                                                sessions)
        return labels, stages, notes + ([] if counted else [
            f"the stage_N_lifecycle_metrics.json files beside it do not count its {n} "
            "requests: one stage"])
    if all(s is not None for s in ids):
        sid = [int(s) for s in ids if s is not None]
        stages = [_stage(k, *(files[k][1:] if k < len(files) else (None, None)))
                  for k in sorted(set(sid))]
        by_id = {k: st.label for k, st in zip(sorted(set(sid)), stages, strict=True)}
        return [by_id[k] for k in sid], stages, []
    if files and sum(f[0] for f in files) == n:
        stages = [_stage(k, rate, conc) for k, (_, rate, conc) in enumerate(files)]
        order = np.argsort(start, kind="stable")
        labels = [""] * n
        pos = 0
        for st, (count, _, _) in zip(stages, files, strict=True):
            for r in order[pos:pos + count].tolist():
                labels[r] = st.label
            pos += count
        return labels, stages, ["stages: the requests in start order, as many to each stage as "
                                "its stage_N_lifecycle_metrics.json counts (the file has no "
                                "stage_id)"]
    stage = RecordedStage("", "unknown", None, None)
    return [""] * n, [stage], ["no stage_id in the file and no matching stage files beside "
                               "it: one stage, load mode unknown"]


def _session_stages(start: Any, files: list[tuple[int, float | None, int | None]],
                    beside: str) -> tuple[list[str], list[RecordedStage], list[str]]:
    """The stages of a trace session replay (``beside``: a session report next to the file):
    the requests in start order, as many to each stage as its file counts, each stage an open
    loop at the recorded sends. inference-perf 0.7.0's ``trace_session_replay`` load type runs
    ``concurrent_sessions`` sessions of an OTel or Weka trace at a time (at ``session_rate``
    sessions a second when set), each sending its events as the ones they depend on finish
    (``loadgen/load_generator.py``); its stage files' ``requested_rate`` and ``concurrency``
    count sessions, not requests, and its per-request entries carry no session
    (``reportgen/base.py``, ``build_per_request_lifecycle_entry``): kvbudget simulates no
    sessions, so the requests are offered when they were sent, and that is said."""
    n = len(start)
    labels = [""] * n
    order = np.argsort(start, kind="stable")
    stages: list[RecordedStage] = []
    notes: list[str] = []
    pos = 0
    for k, (count, rate, conc) in enumerate(files):
        said = (f"{conc} concurrent sessions" if conc is not None else "sessions") + (
            f" at {rate:g} sessions/s" if rate is not None else "")
        stage = RecordedStage(f"stage {k}: session replay, {said}", "open")
        for r in order[pos:pos + count].tolist():
            labels[r] = stage.label
        pos += count
        stages.append(stage)
    notes.append(f"a trace session replay ({beside} beside the file): each stage ran sessions "
                 "of a trace, each request sent when the ones it depends on finished; the "
                 "stage files' rate and concurrency count sessions, and the requests carry no "
                 "session: kvbudget simulates no sessions, so they are replayed as an open "
                 "loop at their recorded sends (a slower simulated server does not delay the "
                 "later requests of a session as it would have); the requests are assigned to "
                 "stages in start order, as many as each stage_N_lifecycle_metrics.json counts")
    return labels, stages, notes


def _stage(k: int, rate: float | None, concurrency: int | None) -> RecordedStage:
    """A stage: the ``concurrent`` load type's rate (its ``num_requests`` a second) capped at
    ``concurrency`` in flight (a closed loop where the file has no rate), else an open loop at
    ``rate``."""
    if concurrency is not None:
        return RecordedStage(f"stage {k}: concurrency {concurrency}",
                             "closed" if rate is None else "capped", rate, concurrency)
    if rate is None:
        return RecordedStage(f"stage {k}", "unknown", None, None)
    return RecordedStage(f"stage {k}: {rate:g} req/s", "open", rate, None)


def _trace_replayed(run: Any, labels: list[str], stages: list[RecordedStage],
                    notes: list[str]) -> dict[str, Any]:
    """The open stages of a ``trace_replay`` run (``run``: its ``config.yaml``), in place:
    inference-perf 0.7.0 sends such a stage's requests at its trace's timestamps
    (``loadgen/load_timer.py`` ``TraceReplayLoadTimer``, from the stage's start), not at the
    stage's ``rate``, which its stage file still reports as ``requested_rate``: open loops at
    their recorded sends, with no rate. Returned: the recording's ``config`` entry of their
    workers' cap (:data:`TRACE_CAP_KEY`, where ``config.yaml`` tells it), which the replay
    cannot apply (:func:`trace_cap_said`)."""
    trace = trace_file(run)
    if trace is None:
        return {}
    cap = trace_cap(run)
    caps: dict[str, int] = {}
    for k, stage in enumerate(stages):
        if stage.load != "open":
            continue
        label = f"stage {k}: trace replay"
        stages[k] = RecordedStage(label, "open", None, None)
        labels[:] = [label if lab == stage.label else lab for lab in labels]
        rate = "" if stage.request_rate is None else f" ({stage.request_rate:g} req/s)"
        notes.append(f"{label}: load.type trace_replay (the run's config.yaml): inference-perf "
                     f"sent its requests at the timestamps of its trace ({trace or 'load.trace'}"
                     f"), not at the stage's rate{rate}, which its stage file reports as "
                     "requested_rate: replayed at their recorded sends")
        caps.update({label: cap} if cap is not None else {})
    return {TRACE_CAP_KEY: caps} if caps else {}


def _worker_capped(cap: WorkerCap | None, labels: list[str], stages: list[RecordedStage],
                   notes: list[str]) -> set[str]:
    """The open stages whose requests outnumber the workers' cap (``config.yaml``'s
    ``load.num_workers x load.worker_max_concurrency``: :mod:`recorded_inference_perf_load`),
    made capped at it in place (``labels`` and ``stages``), their new labels returned: the cap
    could bind there. Stages of no more requests than the cap stay open loops."""
    if cap is None:
        return set()
    out: set[str] = set()
    for k, stage in enumerate(stages):
        count = labels.count(stage.label)
        if stage.load != "open" or stage.request_rate is None or count <= cap.cap:
            continue
        label = f"{stage.label}, at most {cap.cap} in flight"
        stages[k] = RecordedStage(label, "capped", stage.request_rate, cap.cap)
        labels[:] = [label if lab == stage.label else lab for lab in labels]
        notes.append(cap.said(label))
        out.add(label)
    return out


def _concurrent_due(stage: RecordedStage, members: npt.NDArray[np.bool_], sent: FloatArray,
                    end: FloatArray, seed: int, due: FloatArray, notes: list[str],
                    load_type: str = "concurrent") -> RecordedStage:
    """When the requests of a capped stage were due (written into ``due``), and the stage as
    replayed: a ``concurrent`` stage, or a ``constant`` or ``poisson`` one under its workers'
    cap (``load_type``). While a slot was always free each was sent when due (the recorded
    sends are kept); once all ``max_concurrency`` were in flight the sends followed the
    recorded server, so the due times are drawn again as inference-perf draws them
    (:func:`due_ticks`: ``ConstantLoadTimer``'s exponential gaps scaled to span
    ``num_requests / requested_rate`` seconds, or ``PoissonLoadTimer``'s count a second, from
    the stage's first send; its own draws are unseeded and not in the file)."""
    assert stage.max_concurrency is not None and stage.request_rate is not None
    rows = np.flatnonzero(members)
    order = rows[np.argsort(sent[rows], kind="stable")]
    at = sent[order]
    if not cap_reached(sent[rows], end[rows], stage.max_concurrency):
        return stage
    ticks = due_ticks(load_type, np.random.default_rng(np.random.SeedSequence(seed)),
                      len(order), stage.request_rate)
    due[order] = at[0] + ticks - ticks[0]
    over = ("a Poisson count of them each second" if load_type == "poisson" else
            f"due over {len(order) / stage.request_rate:g} s")
    notes.append(f"{stage.label}: inference-perf's {load_type} load type sends its "
                 f"{len(order)} requests at {stage.request_rate:g} req/s ({over}), each when "
                 f"one of {stage.max_concurrency} slots is free; all were busy at times, so "
                 "the sends after that followed the recorded server: the due times are drawn "
                 f"again as inference-perf draws them (seed {seed}; its own draws are not in "
                 "the file)")
    return replace(stage, send_times="redrawn")
