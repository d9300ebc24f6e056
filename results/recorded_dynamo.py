"""NVIDIA Dynamo's logs, named: its frontend logs one line a finished request, which kvbudget
does not read, with the columns to write those lines as.

Dynamo's HTTP frontend (github.com/ai-dynamo/dynamo, ``lib/llm/src/http/service/metrics.rs`` at
0014908a) logs, through ``tracing`` under the target ``dynamo_llm::http::service::metrics``,
``request received`` when ``InflightGuard::new`` starts its timer and ``request completed``
when the guard is dropped (``impl Drop for InflightGuard``: ``status``, and ``elapsed_ms`` =
that timer in ms, so the line's time is the request's end). Its ``http-request`` span's fields
follow on the line: ``input_tokens``, ``output_tokens``, ``ttft_ms`` and ``avg_itl_ms``, which
``ResponseMetricCollector`` records (``ttft_ms`` from its ``start_time`` to the first token,
``observe_response``). The workers log ``request received`` / ``request completed`` too
(target ``dynamo_runtime::pipeline::network::ingress::push_handler``), with no tokens or times.

A published log (github.com/highopes/pd-disaggregation-demo 2dc2f876,
``pd-disaggregation/evidence/runs/20260724-095037/09-post-request-dynamo-logs.txt``: a
prefill/decode-disaggregated Qwen3-14B-FP8 behind Dynamo's frontend, its lines in terminal
colours, among the vLLM workers' and ``kubectl``'s) was said to be "a vLLM server log: the
engine's throughput and queue every 10 s", though five of its lines are requests with their
tokens and times.
"""

from __future__ import annotations

import re

_ANSI_COLOUR = re.compile(rb"\x1b\[[0-9;]*m")

_DYNAMO_LINE = re.compile(
    rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z? +(?:TRACE|DEBUG|INFO|WARN|ERROR) "
    rb"[^\n]*?\bdynamo_(?:llm|runtime)::",
    re.MULTILINE,
)
"""A line of Dynamo's ``tracing`` log: an RFC 3339 time, the level, the spans, the target."""

_FRONTEND_DONE = re.compile(rb"dynamo_llm::http::service::metrics: request completed\b[^\n]*")
_TIMED = (
    re.compile(rb"\binput_tokens=\"?[1-9]"),
    re.compile(rb"\boutput_tokens=\"?\d"),
    re.compile(rb"\bttft_ms=\"?\d"),
)
"""What a line needs to be written as a record: a prompt (Dynamo 1.6.1's frontend, run here
against its mocker, logs a streamed /v1/completions request with ``input_tokens=0`` and no
``ttft_ms``, a unary one with neither; a chat request with both), its output and first token."""


def _lines(text: bytes) -> tuple[int, int]:
    """The frontend's ``request completed`` lines in ``text``, and how many carry the span's
    tokens (a prompt of one or more) and first-token time."""
    done = [m.group(0) for m in _FRONTEND_DONE.finditer(text)]
    timed = sum(1 for line in done if all(field.search(line) for field in _TIMED))
    return len(done), timed


def dynamo_log_refusal(head: bytes) -> str | None:
    """Why a Dynamo log is no recording, saying how many requests its frontend logged (in the
    file's first 64 KiB, ``head``) and how to write them out; None for any other file (a JSON
    document is never one). It is looked for before vLLM's server log: a deployment's log
    collection interleaves the vLLM workers' lines with the frontend's."""
    text = _ANSI_COLOUR.sub(b"", head.lstrip(b"\xef\xbb\xbf"))
    if text.lstrip()[:1] in (b"{", b"[") or not _DYNAMO_LINE.search(text):
        return None
    done, timed = _lines(text)
    where = " in its first 64 KiB" if len(head) >= 1 << 16 else ""
    if not done:
        return (
            "is an NVIDIA Dynamo log (its workers' or runtime's messages), not each request's "
            "send, first token and end; pass the load tool's result from the same run, or the "
            "frontend's per-request trace (DYN_REQUEST_TRACE=1 DYN_REQUEST_TRACE_SINKS=jsonl "
            "DYN_REQUEST_TRACE_OUTPUT_PATH=FILE), which kvbudget reads (docs/recordings.md)"
        )
    return (
        f"is an NVIDIA Dynamo log: its frontend's 'request completed' lines, {done}{where}, "
        "logged as each request ends, elapsed_ms after it was received, "
        f"{timed} of them with input_tokens (a prompt), output_tokens and ttft_ms; kvbudget "
        "does not read logs: write those as the generic records format (arrival_s: the line's "
        "time less elapsed_ms / 1000; prompt_tokens: input_tokens; output_tokens; ttft_s: "
        "ttft_ms / 1000; e2e_s: elapsed_ms / 1000; times the frontend measured, not a client), "
        "pass the load tool's result from the same run, or start the frontend with its "
        "per-request trace (DYN_REQUEST_TRACE=1 DYN_REQUEST_TRACE_SINKS=jsonl "
        "DYN_REQUEST_TRACE_OUTPUT_PATH=FILE), which kvbudget reads (docs/recordings.md)"
    )
