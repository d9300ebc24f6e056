"""TensorRT-LLM's ``trtllm-bench`` files: named, with what to do with them.

``trtllm-bench throughput`` (and ``latency``) drive the engine inside the benchmark's own
process through the LLM API, no server in between, and print a report (NVIDIA/TensorRT-LLM
``tensorrt_llm/bench/dataclasses/reporting.py``, ``ReportUtility.report_statistics``: banners
``= ENGINE DETAILS`` or ``= PYTORCH BACKEND``, ``= WORLD + RUNTIME INFORMATION``, ``= REQUEST
DETAILS``, ``= PERFORMANCE OVERVIEW``, after ``[TRT-LLM] [I] Preparing to run throughput
benchmark...``); ``--report_json`` saves the same aggregates (``get_statistics_dict``:
``engine``, ``world_info``, ``request_info``, ``performance``) and ``--request_json`` each
request (``get_request_info``: a list of ``RequestRecord`` dumps, ``statistics.py``: ``id``,
``num_input_tokens``, ``start_timestamp``, ``first_token_timestamp``, ``end_timestamp`` in
nanoseconds, the computed ``time_to_first_token`` and ``end_to_end_latency``, and
``output_tokens``; ``bench/benchmark/utils/asynchronous.py`` takes ``start_timestamp`` with
``time.perf_counter_ns()`` once the request holds one of ``--concurrency``'s slots, and the
first token's only when ``--streaming``, else ``time_to_first_token`` is 0). kvbudget has no
reader for any of them: the request file is named with the generic records columns to write it
as (its send times replayed as they were); the report and the printed output are aggregates.

A published example of the printed report: github.com/shaamil101-etched/trtllm-benchmarks,
``results/result_1024_128_7500.txt`` at fd58c28a (TensorRT-LLM 0.16.0, Llama-3.1-70B, TP 8).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

REPORT_KEYS = frozenset({"engine", "world_info", "request_info", "performance"})
"""The sections ``trtllm-bench --report_json`` always writes (``get_statistics_dict``)."""

REQUEST_KEYS = frozenset({"num_input_tokens", "start_timestamp", "end_timestamp"})
"""Fields of one ``trtllm-bench --request_json`` entry (``RequestRecord``)."""

_CONSOLE_MARKS = (b"= PERFORMANCE OVERVIEW", b"[TRT-LLM] [I] Preparing to run throughput",
                  b"[TRT-LLM] [I] Preparing to run latency")
_LOG_OPENINGS = (b"[TensorRT-LLM]", b"[TRT-LLM]")
_DATED_LOG_LINE = re.compile(rb"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\]")
"""TensorRT-LLM's logger's lines (``tensorrt_llm/logger.py``: ``[%m/%d/%Y-%H:%M:%S] [TRT-LLM]
[I] ...``), as in the published report's second line."""

_AS_RECORDS = ("which kvbudget has no reader for: write it as the generic records format "
               "(start_timestamp / 1e9 as arrival_s, num_input_tokens as prompt_tokens, "
               "output_tokens as output_tokens, time_to_first_token / 1e9 as ttft_s (left "
               "empty for a run without --streaming, which times no first token), "
               "end_to_end_latency / 1e9 as e2e_s: docs/recordings.md) and pass --engine "
               "trtllm, as no server in the file says what it was")

_IN_PROCESS = ("a run of the engine inside the benchmark's own process (it drives the LLM API "
               "directly, no server)")


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The report's section ``key``; empty where it is not a mapping."""
    section = doc.get(key)
    return section if isinstance(section, Mapping) else {}


def _said(doc: Mapping[str, Any]) -> str:
    """What a ``--report_json`` says of its run: version, model, parallelism, requests."""
    engine, world, info = (_section(doc, key) for key in ("engine", "world_info", "request_info"))
    said = []
    if engine.get("version"):
        said.append(f"TensorRT-LLM {engine['version']}")
    if engine.get("model"):
        said.append(str(engine["model"]))
    if world.get("tp_size") is not None:
        said.append(f"TP {world['tp_size']}")
    if info.get("num_requests") is not None:
        said.append(f"{info['num_requests']} requests")
    return f": {', '.join(said)}" if said else ""


def trtllm_bench_refusal(doc: Any) -> str | None:
    """Why a ``trtllm-bench`` JSON file (``doc``, its first value) is no recording kvbudget
    reads; None for any other file."""
    if isinstance(doc, Mapping) and set(doc) >= REPORT_KEYS:
        return (f"is trtllm-bench's report (--report_json{_said(doc)}): aggregates of "
                f"{_IN_PROCESS}, no request; the same run's --request_json lists each one, "
                + _AS_RECORDS)
    if isinstance(doc, list) and doc and isinstance(doc[0], Mapping) and \
            set(doc[0]) >= REQUEST_KEYS:
        return (f"is trtllm-bench's per-request file (--request_json, {len(doc)} requests of "
                f"{_IN_PROCESS}), " + _AS_RECORDS)
    return None


def trtllm_bench_console_refusal(head: bytes) -> str | None:
    """Why what ``trtllm-bench`` printed (``trtllm-bench ... throughput | tee result.txt``), or
    any other TensorRT-LLM log (``trtllm-serve``'s), is no recording; None for any other file
    (a JSON document is never one; the logs' own lines open with ``[TensorRT-LLM]`` or a dated
    ``[TRT-LLM]``, not JSON's ``[``)."""
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    logged = start.startswith(_LOG_OPENINGS) or bool(_DATED_LOG_LINE.match(start))
    if start[:1] == b"{" or (start[:1] == b"[" and not logged):
        return None
    said = []
    version = re.search(rb"TensorRT-LLM version: (\S+)", head)
    if version:
        said.append(f"TensorRT-LLM {version.group(1).decode('utf-8', 'replace')}")
    if not any(mark in head for mark in _CONSOLE_MARKS):
        return None if not logged else (
            "is a " + (said[0] if said else "TensorRT-LLM") + " log (trtllm-serve's, "
            "or a run's): the server's or engine's messages, not each request's send, first "
            "token and end; pass the load tool's result from the same run (TensorRT-LLM's "
            "benchmark_serving.py --save-result --save-detailed, or another tool "
            "docs/recordings.md lists)")
    for name, pattern in (("TP", rb"\nTP Size:\s+(\d+)"),
                          ("requests", rb"\nNumber of requests:\s+(\d+)")):
        found = re.search(pattern, head)
        if found:
            value = found.group(1).decode()
            said.append(f"TP {value}" if name == "TP" else f"{value} requests")
    return ("is trtllm-bench's printed report" + (f" ({', '.join(said)})" if said else "") +
            f": the settings and aggregates of {_IN_PROCESS}, no request; rerun it with "
            "--request_json FILE, " + _AS_RECORDS)
