"""Recorded runs as input: one reader for what a real server did, request by request.

A *recording* is a run of a real server that someone measured: a production request log, a
``vllm bench serve`` result, a GuideLLM report, a ``kvbudget replay`` run directory. Calibrating
and validating the simulator offline (``kvbudget calibrate --records``, ``kvbudget validate
--records``) needs, per request, when it arrived, its prompt and output tokens, and the TTFT and
E2E its client measured (optionally its status, tier, load stage and inter-token times), plus
whatever the file says of the server's configuration. :func:`read_recording` reads any of the
formats below into one :class:`Recording`:

``records``
    The generic trace format (``docs/workloads.md``: CSV, JSON lines or Parquet, so
    ``hash_ids``, ``tier``, ``max_output_tokens`` and ``deadline_s`` work as there) plus the
    measurement columns of :data:`MEASUREMENT_COLUMNS`: ``ttft_s`` and ``e2e_s`` (seconds from
    ``arrival_s``; empty where not measured), optional ``status`` (``completed``, ``ok``,
    ``success`` or empty for a request that finished; anything else, such as ``error`` or
    ``timeout``, is a request that did not) and ``stage`` (a load phase's label).
    ``columns`` maps any of these names to the file's own, as the trace loader's ``columns``.
``run``
    A ``kvbudget replay`` (or ``kvbudget simulate --out``) run directory: ``requests.parquet``,
    ``summary.json`` and, for a replay, ``replay.json`` (the policy, its parameters and the
    gateway's KV capacity).
``vllm-bench``
    ``vllm bench serve --save-result --save-detailed`` JSON, one run or ``--append-result``
    runs one a line (:mod:`kvbudget.results.recorded_vllm_bench`).
``guidellm``
    A GuideLLM report, 0.1 to 0.8, JSON or YAML; the CSV report is refused (aggregates only)
    (:mod:`kvbudget.results.recorded_guidellm`).
``aiperf``
    AIPerf's ``profile_export.jsonl`` (:mod:`kvbudget.results.recorded_aiperf`).
``inference-perf``
    inference-perf's ``per_request_lifecycle_metrics.json``
    (:mod:`kvbudget.results.recorded_inference_perf`).
``llm-load-test``
    openshift-psap/llm-load-test's ``output.json``
    (:mod:`kvbudget.results.recorded_llm_load_test`).
``multi-round-qa``
    The ``summary.csv`` of LMCache's (and vLLM production-stack's) multi-round QA benchmark, or
    of an LMBench workload (:mod:`kvbudget.results.recorded_multi_round_qa`).
``evalscope``
    evalscope perf's ``benchmark_data.db`` (SQLite), its run directory, or a sweep's directory
    of them (:mod:`kvbudget.results.recorded_evalscope`).
``genai-bench``
    A genai-bench experiment folder (``experiment_metadata.json`` and a result JSON a run),
    its metadata file, or one run's result (:mod:`kvbudget.results.recorded_genai_bench`).
``otel``
    vLLM's per-request ``llm_request`` spans (``--otlp-traces-endpoint``) as an OTLP JSON
    trace export, a collector's file exporter's lines (:mod:`kvbudget.results.recorded_otel`).
``dynamo-trace``
    NVIDIA Dynamo's per-request trace (``DYN_REQUEST_TRACE``, its ``jsonl`` sink): one
    ``dynamo.request.trace.v1`` record a line (:mod:`kvbudget.results.recorded_dynamo_trace`).
``llmd-report``
    An llm-d-benchmark report: aggregates only, refused with one line naming the load tool's
    file to pass instead (:mod:`kvbudget.results.recorded_llmd`).

Each reader fills :attr:`Recording.tool` (the tool and its version when the file says),
:attr:`Recording.stages` (one :class:`RecordedStage` per load stage: its load mode, rate and
concurrency as the tool ran it), :attr:`Recording.counts` and :attr:`Recording.config` (the
server and client settings the file records). A request's ``max_output_tokens`` is the tool's
recorded ``max_tokens`` where the file has one, else its realised output length (never an
invented cap; ``read_recording``'s ``max_output`` overrides that), and a note says which.
Warm-up and cool-down requests are simulated but not measured (status ``warmup`` /
``cooldown``).

Requests that failed (a status other than completed, an error, no TTFT or no E2E) are kept in
the workload when they generated at least one token (the server did that work) and left out
of every measured statistic; each kind is counted in :attr:`Recording.counts`. Bad files raise
:class:`~kvbudget.workloads.errors.TraceError`: one line naming the file, the line or row and
the field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvbudget.results.recorded_aggregates import (
    DOCUMENT_SUFFIXES,
    aggregate_line_refusal,
    aggregate_table_refusal,
    dataset_header_refusal,
    dataset_refusal,
    document_refusal,
    no_request_refusal,
    one_field_refusal,
    unknown_requests_refusal,
    unsent_records_refusal,
)
from kvbudget.results.recorded_aiperf import read_aiperf
from kvbudget.results.recorded_consoles import (
    guidellm_console_refusal,
    server_log_refusal,
    sglang_server_log_refusal,
)
from kvbudget.results.recorded_dirs import (
    RECORDS_USAGE,
    inference_perf_prometheus_refusal,
    no_data_refusal,
    tool_dir_refusal,
)
from kvbudget.results.recorded_dynamo import dynamo_log_refusal
from kvbudget.results.recorded_dynamo_trace import is_dynamo_trace, read_dynamo_trace
from kvbudget.results.recorded_evalscope import holds_evalscope, is_evalscope_db, read_evalscope
from kvbudget.results.recorded_fields import load_json
from kvbudget.results.recorded_genai_bench import (
    holds_genai_bench,
    is_genai_bench_metadata,
    is_genai_bench_result,
    read_genai_bench,
)
from kvbudget.results.recorded_guidellm import load_report, read_guidellm
from kvbudget.results.recorded_inference_perf import read_inference_perf, session_report_refusal
from kvbudget.results.recorded_llama_benchy import (
    llama_benchy_report_refusal,
    llama_benchy_text_refusal,
)
from kvbudget.results.recorded_llm_load_test import is_llm_load_test, read_llm_load_test
from kvbudget.results.recorded_llmd import is_llmd_report, refuse_llmd_report
from kvbudget.results.recorded_merges import merge_refusal_at
from kvbudget.results.recorded_multi_round_qa import is_multi_round_qa, read_multi_round_qa
from kvbudget.results.recorded_otel import flat_spans_refusal, is_otlp_traces, read_otel
from kvbudget.results.recorded_plans import benchmark_plan_refusal
from kvbudget.results.recorded_records import read_records, read_run_dir
from kvbudget.results.recorded_sglang_server import server_info_refusal
from kvbudget.results.recorded_simulators import simulated_output_refusal
from kvbudget.results.recorded_summaries import (
    SQLITE_HEADER,
    SQLITE_REFUSAL,
    bench_console_refusal,
    csv_summary_refusal,
    html_refusal,
    is_aiperf_summary,
    latency_summary,
    llmperf_console_refusal,
    mlperf_log_refusal,
    summary_refusal,
)
from kvbudget.results.recorded_trtllm_bench import trtllm_bench_console_refusal
from kvbudget.results.recorded_vllm_bench import bench_tool, flat_details, read_vllm_bench
from kvbudget.results.recording import (
    COMPLETED_WORDS,
    LOAD_MODES,
    MEASURED_COLUMNS,
    MEASUREMENT_COLUMNS,
    RECORDING_FORMATS,
    RecordedStage,
    Recording,
    build_recording,
    read_replay_meta,
)
from kvbudget.workloads.errors import CUT_SHORT, TraceError, UnknownFileError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.text_files import (
    encoding_said,
    head_utf8,
    open_utf8,
    read_text,
    read_utf8,
    utf8_file,
)
from kvbudget.workloads.traces.load import detect_format

TEXT_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".csv")
"""The files of a directory whose encoding is said (:func:`encodings_said`)."""

__all__ = [  # the recording's types, read here with the readers (kvbudget.results.recording)
    "COMPLETED_WORDS",
    "LOAD_MODES",
    "MEASURED_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "RECORDING_FORMATS",
    "RecordedStage",
    "Recording",
    "build_recording",
    "detect_recording_format",
    "read_recording",
    "read_replay_meta",
]


# ---------------------------------------------------------------------------------------------
# detection


def _first_json(path: Path, head: bytes) -> Any:
    """The first JSON value of a file: its first line (JSON lines: an ``--append-result`` file,
    AIPerf's records; a line may be far longer than ``head``), else the whole file."""

    line = head.split(b"\n", 1)[0]
    if b"\n" not in head:
        with open_utf8(path) as fh:
            line = fh.readline().strip()
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return load_json(path)


def _json_lines(path: Path) -> bool:
    """Whether the file's second line is a JSON object too (one object a line)."""
    with open_utf8(path) as fh:
        fh.readline()
        second = fh.readline().strip()
    try:
        return isinstance(json.loads(second), dict)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False


def _said_of_every_line(path: Path, doc: dict[str, Any], summary: str) -> str:
    """The refusal (``summary``) of a file's first JSON object (``doc``), a serving benchmark's
    result (:func:`~kvbudget.results.recorded_summaries.latency_summary`), said of the whole
    file where it holds one a line: how many lines it holds, counted to its end, and which of
    them (if any) hold per-request data. Runs appended to one file (``vllm bench serve --append-result``, a
    script's loop, SGLang's ``--output-file``) were refused as if the first were the file:
    github.com/nerdalert/vllm-bench-automation ``vllm-benchmark-graphs/results.json`` at
    13ee6ea5 holds 9 runs' aggregates (3 deployments at 10, 30 and inf req/s), said as one."""
    if not latency_summary(doc) or not _json_lines(path):
        return summary
    num_lines, detailed = 0, []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                return summary  # not one JSON value a line throughout: its first said only
            num_lines += 1
            if isinstance(value, dict) and flat_details(value).get("input_lens") is not None:
                detailed.append(number)
    where = (
        "none with per-request data"
        if not detailed
        else f"line{'s' if len(detailed) > 1 else ''} {', '.join(map(str, detailed[:5]))}"
        f"{' ...' if len(detailed) > 5 else ''} with per-request data: give "
        f"{'them' if len(detailed) > 1 else 'it'} as a file of its own"
    )
    return f"holds {num_lines} JSON lines ({where}); the first line {summary}"


def _detect_object(path: Path, doc: dict[str, Any]) -> str:
    """The format of a file whose first JSON value is ``doc``."""
    if "benchmarks" in doc and not llama_benchy_report_refusal(doc):  # its keys named below
        return "guidellm"
    details = doc.get("details")
    if (
        "input_lens" in doc
        or "ttfts" in doc
        or (isinstance(details, dict) and "input_lens" in details)
    ):  # SGLang's, nested
        return "vllm-bench"
    meta = doc.get("metadata")
    if isinstance(meta, dict) and (
        "request_start_ns" in meta
        or (  # AIPerf; its first layout:
            "timestamp_ns" in meta and "credit_phase" in meta
        )
    ):
        return "aiperf"
    if is_llmd_report(doc):
        return "llmd-report"
    if is_llm_load_test(doc):
        return "llm-load-test"
    if is_otlp_traces(doc):
        return "otel"
    if is_dynamo_trace(doc):
        return "dynamo-trace"
    if is_genai_bench_result(doc) or is_genai_bench_metadata(doc):
        return "genai-bench"
    summary = merge_refusal_at(path, doc) or summary_refusal(doc) or benchmark_plan_refusal(doc)
    if summary:
        raise TraceError(path, _said_of_every_line(path, doc, summary))
    sessions = (
        session_report_refusal(doc)
        or inference_perf_prometheus_refusal(doc)
        or flat_spans_refusal(doc)
        or server_info_refusal(doc)
    )
    if sessions:
        raise TraceError(path, sessions)
    refusals = (
        (
            is_aiperf_summary(doc),  # its version or its fields genai-perf's never has
            "is AIPerf's summary (profile_export_aiperf.json): aggregates only; pass the "
            "per-request profile_export.jsonl beside it",
        ),
        (
            "input_config" in doc,  # neither's fields tell: AIPerf's or genai-perf's
            "is a profile summary (AIPerf's profile_export_aiperf.json or genai-perf's "
            "profile_export_genai_perf.json): aggregates only; pass AIPerf's per-request "
            "profile_export.jsonl",
        ),
        (
            "load_summary" in doc and "successes" in doc,
            "is an inference-perf summary: aggregates only; pass per_request_lifecycle_metrics.json "
            "(report.request_lifecycle.per_request: true in its config)",
        ),
    )
    for hit, problem in refusals:
        if hit:
            raise TraceError(path, problem)
    if not {"arrival_s", "prompt_tokens", "output_tokens"} & set(doc) or _spans_lines(path):
        aggregates = (
            no_request_refusal(doc)
            or unknown_requests_refusal(doc, one_a_line=_json_lines(path))
            or dataset_refusal(doc)
        )
        if aggregates:  # figures, requests or prompts of no tool named
            raise UnknownFileError(path, aggregates)
        trace = trace_refusal(path)
        if trace:
            raise UnknownFileError(path, trace)
        kind = "a YAML mapping" if path.suffix.lower() in (".yaml", ".yml") else "a JSON object"
        raise UnknownFileError(
            path,
            f"cannot tell the recording format ({kind} of none of the "
            "known tools nor a record of the generic format); pass a format "
            f"({', '.join(RECORDING_FORMATS)})",
        )
    return "records"


def _spans_lines(path: Path) -> bool:
    """Whether the file's first JSON value goes on past its first line (a document indented
    over many lines), which no file of generic records is (one record a line): a run's
    document whose totals share a generic column's name (a home-made harness's
    ``output_tokens`` beside its ``per_request`` list, github.com/sgl-project/sglang ec0eaf2
    ``benchmark/kernels/moe_tp_ep/results/a3-2026-09-16/e2e/deepep_r1_in1024.json``) was read
    as generic records and told "line 1: not valid JSON", though it is valid JSON."""
    with open_utf8(path) as fh:
        first = fh.readline(1 << 16).strip()
    try:
        json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return True
    return False


def _detect_list(path: Path) -> str:
    """The format of a file whose JSON document is a list: inference-perf's per-request
    report, else the refusal of what the list holds."""
    doc = load_json(path)
    if (
        isinstance(doc, list)
        and doc
        and isinstance(doc[0], dict)
        and "start_time" in doc[0]
        and "info" in doc[0]
    ):
        return "inference-perf"
    sessions = session_report_refusal(doc)
    if sessions:
        raise TraceError(path, sessions)
    summary = summary_refusal(doc) or benchmark_plan_refusal(doc)
    if summary:
        raise TraceError(path, summary)
    unknown = unknown_requests_refusal(doc) or dataset_refusal(doc)
    if unknown:  # requests or prompts of no tool named
        raise UnknownFileError(path, unknown)
    raise UnknownFileError(
        path,
        "cannot tell the recording format (a JSON list that is not "
        "inference-perf's per_request_lifecycle_metrics.json)",
    )


def detect_recording_format(path: Path, *, usage: str = RECORDS_USAGE) -> str:
    """The format of a recording, from its content: ``evalscope`` for evalscope perf's
    database or a directory holding them, ``genai-bench`` for an experiment folder, ``run`` for
    another directory; a load tool's
    format for its files (GuideLLM JSON, YAML or CSV, vLLM's bench JSON, AIPerf JSON lines,
    inference-perf's JSON list, an llm-d-benchmark report, an OTLP JSON trace export); else
    ``records``. A load tool's output folder is refused naming the file in it to pass, in the
    command's form ``usage`` (``--records {}``; ``trace convert`` and ``report`` give theirs)."""
    if path.is_dir():  # evalscope perf's run (or sweep) directory, else a kvbudget run
        if holds_evalscope(path):
            return "evalscope"
        if holds_genai_bench(path):
            return "genai-bench"
        other = tool_dir_refusal(path, usage)  # another tool's output folder: its file named
        if other:
            raise TraceError(path, other)
        return "run"
    if not path.exists():
        raise UnknownFileError(path, "no such file or run directory")
    head = head_utf8(path, 1 << 16)
    if not head.strip():
        raise UnknownFileError(
            path,
            "is empty"
            + (" (only blank space)" if head else " (0 bytes)")
            + ": no recording in it; was the tool stopped before it wrote it?",
        )
    if head.startswith(SQLITE_HEADER):
        if is_evalscope_db(path):
            return "evalscope"
        raise TraceError(path, SQLITE_REFUSAL)
    server_log = (
        bench_console_refusal(head, path)
        or guidellm_console_refusal(head, path)
        or mlperf_log_refusal(head)
        or html_refusal(head)
        or trtllm_bench_console_refusal(head)
        or llmperf_console_refusal(head)
        or llama_benchy_text_refusal(head)
        or dynamo_log_refusal(head)  # before vLLM's: a deployment's logs interleave both
        or sglang_server_log_refusal(head)
        or server_log_refusal(head)  # last: another tool's console may print the server's lines
    )
    if server_log:
        raise TraceError(path, server_log)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        first = head.split(b"\n", 1)[0]
        if first.startswith(b"Run Info") or (b"Run Id" in first and b"Request Loader" in head):
            return "guidellm"
        aggregates = csv_summary_refusal(first, path.name)
        if aggregates:
            raise TraceError(path, aggregates)
        header = first.decode("utf-8", "replace").strip().split(",")
        return "multi-round-qa" if is_multi_round_qa([h.strip() for h in header]) else "records"
    if suffix in (".yaml", ".yml"):
        doc = load_report(path)
        if isinstance(doc, dict):
            return _detect_object(path, doc)
        raise UnknownFileError(
            path,
            "cannot tell the recording format (a YAML file that is neither a "
            "GuideLLM report nor an llm-d-benchmark report)",
        )
    text = head.lstrip()
    if text[:1] == b"[":
        return _detect_list(path)
    if text[:1] == b"{":
        doc = _first_json(path, text)
        if isinstance(doc, dict):
            return _detect_object(path, doc)
    return "records"


def read_recording(
    path: str | Path,
    *,
    format: str | None = None,
    columns: Mapping[str, str] | None = None,
    default_tier: str = "interactive",
    seed: int = 0,
    max_output: MaxOutputRule | None = None,
) -> Recording:
    """Read a recorded run (see the module docstring for the formats).

    ``columns`` maps canonical names (the trace format's and :data:`MEASUREMENT_COLUMNS`) to a
    records file's own; ``default_tier`` is the tier of requests whose file has none; ``seed``
    feeds the arrival reconstruction of a ``vllm bench`` result without ``start_times``;
    ``max_output`` declares ``max_output_tokens`` for requests whose file records no
    ``max_tokens`` (default: each request's realised output, never an invented cap).
    """
    path = Path(path)
    empty = no_data_refusal(path) if path.is_dir() else None
    if empty:
        raise TraceError(path, empty)
    try:
        fmt = format or detect_recording_format(path)
    except TraceError as exc:
        raise _unterminated_yaml(path, exc) from None
    if fmt not in RECORDING_FORMATS:
        raise TraceError(
            path,
            f"unknown recording format {fmt!r}; known: {', '.join(RECORDING_FORMATS)}",
            field="format",
        )
    if fmt == "run":
        rec = read_run_dir(path, default_tier)
    elif fmt == "records":
        if not columns:
            refuse_unreadable_records(path)
        with utf8_file(path) as readable:  # pyarrow's readers are handed the file's name
            rec = dataclasses.replace(
                read_records(readable, columns or {}, default_tier, max_output), path=str(path)
            )
    else:
        try:
            rec = _read_tool_file(path, fmt, default_tier, seed, max_output)
        except TraceError as exc:
            raise _unterminated_yaml(path, exc) from None
    said = encodings_said(path)
    return dataclasses.replace(rec, notes=(*rec.notes, said)) if said else rec


def _unterminated_yaml(path: Path, exc: TraceError) -> TraceError:
    """``exc``, and for a YAML file that does not end with a line end the likelier reason: a
    YAML writer ends its document with one (PyYAML's ``dump``, GuideLLM's), and a report cut
    short at a line's end is still YAML, only with its last requests' fields missing (it was
    told "a successful request without request_start_time" alone)."""
    if path.suffix.lower() not in (".yaml", ".yml") or exc.path != str(path) or not path.is_file():
        return exc
    if read_utf8(path)[-1:] in (b"\n", b"\r", b""):  # on the error path only
        return exc
    return TraceError(
        path,
        f"{exc.problem}; the file does not end with a line end, as a YAML report does: {CUT_SHORT}",
        line=exc.line,
        row=exc.row,
        field=exc.field,
    )


def encodings_said(path: Path) -> str | None:
    """The line that says which of the files read were UTF-16 or UTF-32 text (their byte-order
    mark; :mod:`kvbudget.workloads.text_files`): ``path``, or the text files in a directory and
    its folders one level down (a tool's run folder). None when every one was UTF-8."""
    if not path.is_dir():
        return encoding_said([path])
    return encoding_said(
        sorted(p for p in (*path.iterdir(), *path.glob("*/*")) if p.suffix.lower() in TEXT_SUFFIXES)
    )


def refuse_aggregate_table(path: Path) -> None:
    """Refuse a CSV of aggregate figures (its header's columns statistics, none a request's:
    Locust's ``*_stats.csv``), or a CSV input dataset (prompts to send, no times), in one line,
    before the generic format misses its first column (``kvbudget report`` asks it too of a
    file given for a run directory, ``trace convert`` of a CSV no trace format reads); a CSV
    given with ``--column`` mappings is not asked."""
    with open_utf8(path) as fh:
        first = fh.readline(1 << 16).decode("utf-8", "replace")
    header = first.strip().split(",")
    aggregates = (
        simulated_output_refusal(header)
        or aggregate_table_refusal(header)
        or dataset_header_refusal(header)
        or trace_refusal(path)
        or unsent_records_refusal(header, "row")
    )
    if aggregates:
        raise TraceError(path, aggregates, line=1)


def refuse_unreadable_records(path: Path) -> None:
    """Refuse, in one line, a file the generic records format would be asked to read (none
    given ``--column`` mappings) whose header or first record says it holds no records: a CSV
    of aggregates, an input dataset, a trace, per-request results with no send time
    (``kvbudget report`` and ``trace convert`` ask it too)."""
    if not path.is_file():
        return
    if path.suffix.lower() in DOCUMENT_SUFFIXES:
        raise TraceError(path, document_refusal(read_text(path, errors="replace")), line=1)
    one_field = one_field_refusal(head_utf8(path, 1 << 12))
    if one_field:
        raise TraceError(path, one_field, line=1)
    if path.suffix.lower() == ".csv":
        refuse_aggregate_table(path)
    else:
        _refuse_unsent_lines(path)


def _refuse_unsent_lines(path: Path) -> None:
    """Refuse JSON lines of per-request results with no send time (:func:`unsent_records_
    refusal`, the keys of their first 8 records: AIBrix's client writes ``start_time`` on its
    streamed requests' lines only) in one line, before the generic format misses a field."""
    keys: dict[str, None] = {}
    aggregates = None
    with open_utf8(path) as fh:
        for _ in range(8):
            line = fh.readline(1 << 16).strip()
            if not line:
                break
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                return
            if not isinstance(record, dict):
                return
            if not keys:
                aggregates = aggregate_line_refusal(record)
            keys.update(dict.fromkeys(str(k) for k in record))
    said = aggregates or (unsent_records_refusal(list(keys), "line") if keys else None)
    if said:
        raise TraceError(path, said, line=1)


def trace_refusal(path: Path) -> str | None:
    """Why a trace one of kvbudget's trace formats reads (not the generic one, whose records
    may carry measured times) is not a recording: requests to send, none measured. Mooncake's
    (github.com/kvcache-ai/Mooncake a2a4b18 ``FAST25-release/traces/conversation_trace.jsonl``:
    ``timestamp``, ``input_length``, ``output_length``, ``hash_ids``) was told "cannot tell the
    recording format ...; pass a format", an Azure trace to map its ``TIMESTAMP`` as
    ``arrival_s``, though neither holds a time to validate against. None for anything else."""
    try:
        fmt = detect_format(path)
    except (TraceError, OSError, ValueError):
        return None
    if fmt == "generic":
        return None
    return (
        f"is a trace of the {fmt} format (requests to send, none with a measured TTFT or E2E), "
        "not a recording: simulate it (kvbudget simulate --trace FILE), or replay it against "
        "the server with a load tool and pass the result the tool wrote (docs/recordings.md)"
    )


def recording_tool(path: Path, fmt: str) -> str:
    """The load tool a recording of format ``fmt`` (:func:`detect_recording_format`) came
    from, as its reader names it: the ``vllm-bench`` layout is also SGLang's and TensorRT-LLM's
    clients' (:func:`~kvbudget.results.recorded_vllm_bench.bench_tool`); the format's name for
    every other."""
    return bench_tool(path) if fmt == "vllm-bench" else fmt


def _read_tool_file(
    path: Path, fmt: str, default_tier: str, seed: int, max_output: MaxOutputRule | None
) -> Recording:
    if fmt == "vllm-bench":
        return read_vllm_bench(path, default_tier, seed, max_output)
    if fmt == "guidellm":
        return read_guidellm(path, default_tier, max_output)
    if fmt == "aiperf":
        return read_aiperf(path, default_tier, max_output)
    if fmt == "inference-perf":
        return read_inference_perf(path, default_tier, max_output, seed)
    if fmt == "llm-load-test":
        return read_llm_load_test(path, default_tier, max_output)
    if fmt == "multi-round-qa":
        return read_multi_round_qa(path, default_tier, max_output)
    if fmt == "evalscope":
        return read_evalscope(path, default_tier, max_output)
    if fmt == "otel":
        return read_otel(path, default_tier, max_output)
    if fmt == "dynamo-trace":
        return read_dynamo_trace(path, default_tier, max_output)
    if fmt == "genai-bench":
        return read_genai_bench(path, default_tier, max_output)
    doc = load_report(path) if path.suffix.lower() in (".yaml", ".yml") else load_json(path)
    if not isinstance(doc, dict):
        raise TraceError(path, "is not an llm-d-benchmark report (not a mapping)")
    refuse_llmd_report(path, doc)
    raise AssertionError("unreachable")
