"""Logs that are no recording, named: GuideLLM's console output (what ``guidellm benchmark ...
| tee run.log`` printed), a vLLM server's log and an SGLang server's.

GuideLLM prints each benchmark's aggregates as tables and writes its requests to a report file
it names at the end; the printed text holds no request. Its lines, by version (the tool's
source, github.com/vllm-project/guidellm):

- 0.2 and 0.3 (``src/guidellm/benchmark/output.py`` ``GenerativeBenchmarksConsole``, v0.2.1
  and v0.3.1): section headers ``Benchmarks Metadata:``, ``Benchmarks Info:`` and ``Benchmarks
  Stats:`` (``print_section_header`` appends the colon), then ``Benchmarks report saved to
  PATH`` and ``Benchmarking complete.`` (``benchmark/entrypoints.py``);
- 0.4 to 0.8 (``benchmark/outputs/console.py`` ``GenerativeBenchmarkerConsole``, v0.4.0 to
  0.8.1): tables titled ``Run Summary Info`` and ``Request Latency Statistics (Completed
  Requests)``, then ``Benchmarking complete, generated N benchmark(s)`` and, for each output it
  wrote, ``  KIND    : PATH`` after the debug icon ``…`` (``benchmark/entrypoints.py``,
  ``console.print_update(title=f"  {kind:<8}: {value}", status="debug")``).

A published log (github.com/danielkorat/guidellm-bench 8f24116d,
``guidellm_results/20260302_1917/logs/openai_gpt-oss-20b_tp4_quant-none_bench.log``, GuideLLM
0.5.0.dev0 behind Intel's oneAPI setup lines) was told "line 1: field 'prompt_tokens': missing
column 'prompt_tokens' needed by the generic format (the header has: :: initializing oneAPI
environment ...): if a column holds it, map it": read as a CSV of generic records.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

_NEW_MARKS = (
    b"Benchmarking complete, generated ",
    b"Run Summary Info",
    b"Request Latency Statistics (Completed Requests)",
)
"""What GuideLLM 0.4 to 0.8 prints at a run's end (see the module docstring)."""

_OLD_MARKS = (b"Benchmarks Info:", b"Benchmarks Stats:")
"""The section headers GuideLLM 0.2 and 0.3 print at a run's end, both."""

_GENERATED = re.compile(rb"Benchmarking complete, generated (\d+) benchmark")
_OLD_DONE = b"Benchmarking complete."
_NEW_SAVED = re.compile(rb"\xe2\x80\xa6 +(json|yaml|yml)\s*: *(\S+)")
"""An output line of 0.4 to 0.8 naming a report kvbudget reads: ``…   json    : PATH``."""
_OLD_SAVED = re.compile(rb"Benchmarks report saved to (\S+\.(?:json|ya?ml))\b")

CHUNK = 1 << 20
"""How much of a long log is read at once to count its runs (never the file whole)."""

_OVERLAP = 512
"""Bytes each chunk repeats of the one before, so that no line GuideLLM prints is split."""


def _chunks(path: Path | None, head: bytes) -> list[bytes] | Iterator[bytes]:
    """``head`` alone when it is the whole file (or no path is given); else the file from its
    start in :data:`CHUNK` pieces, each after the first opening with the last
    :data:`_OVERLAP` bytes of the one before: a line cut between two pieces is whole in the
    second (a match inside the overlap alone was the piece before's: :func:`_scan`)."""
    if path is None or len(head) < 1 << 16:
        return [head]
    return _read_chunks(path)


def _tail(path: Path | None, head: bytes) -> bytes:
    """The last 64 KiB of ``path`` when ``head`` (its first 64 KiB) is not the whole file, where
    GuideLLM prints its summary; else b""."""
    if path is None or len(head) < 1 << 16:
        return b""
    with path.open("rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(fh.tell() - (1 << 16), len(head)))
        return fh.read()


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        carry = b""
        while piece := fh.read(CHUNK):
            yield carry + piece
            carry = piece[-_OVERLAP:]


def _scan(chunks: Iterable[bytes]) -> tuple[bool, int, int, list[bytes]]:
    """Whether the text is GuideLLM 0.4-0.8's (else 0.2-0.3's), its runs, its benchmarks and
    the report paths it names, over ``chunks`` (:func:`_chunks`)."""
    new = old_info = old_stats = False
    runs = benchmarks = 0
    saved: list[bytes] = []
    for index, chunk in enumerate(chunks):
        skip = _OVERLAP if index else 0  # a match inside the overlap was the piece before's
        new = new or any(mark in chunk for mark in _NEW_MARKS)
        old_info = old_info or _OLD_MARKS[0] in chunk
        old_stats = old_stats or _OLD_MARKS[1] in chunk
        for match in _GENERATED.finditer(chunk):
            if match.end() > skip:
                runs, benchmarks = runs + 1, benchmarks + int(match[1])
        runs_old = [m for m in re.finditer(re.escape(_OLD_DONE), chunk) if m.end() > skip]
        if not new:
            runs += len(runs_old)
        for pattern, group in ((_NEW_SAVED, 2), (_OLD_SAVED, 1)):
            saved += [m[group] for m in pattern.finditer(chunk) if m.end() > skip]
    if not new:
        benchmarks = 0  # 0.2 and 0.3 print no count
    return new or (old_info and old_stats), runs, benchmarks, saved


def guidellm_console_refusal(head: bytes, path: Path | None = None) -> str | None:
    """Why GuideLLM's console output is no recording, naming the report files it says it wrote
    (they list each request); None for any other file (a JSON or YAML document is never one).
    ``head`` is the file's first 64 KiB; a longer file's last 64 KiB are looked at too (GuideLLM
    prints its summary last) and, where either holds its lines, the whole file is read (in
    pieces) for the runs it printed and the reports it names."""
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] in (b"{", b"["):
        return None
    ends = head + b"\n" + _tail(path, head)
    if not any(mark in ends for mark in (*_NEW_MARKS, *_OLD_MARKS)):
        return None
    is_guidellm, runs, benchmarks, saved = _scan(_chunks(path, head))
    if not is_guidellm:
        return None
    paths = list(dict.fromkeys(p.decode("utf-8", "replace") for p in saved))
    said = [f"{runs} runs" if runs > 1 else ""]
    said.append(f"{benchmarks} benchmark{'s' if benchmarks != 1 else ''}" if benchmarks else "")
    said.append(f"its report written to {', '.join(paths)}" if paths else "")
    printed = ", ".join(part for part in said if part)
    return (
        "is GuideLLM's console output (guidellm benchmark, as printed"
        + (f": {printed}" if printed else "")
        + "): each benchmark's aggregates as tables, "
        "no request; pass the JSON or YAML report it wrote, which lists each request "
        + (
            "(the log names it above)"
            if paths
            else "(--output-path FILE.json in GuideLLM 0.2 and 0.3, --outputs json in 0.4 and "
            "later)"
        )
    )


_VLLM_LOG_LINE = re.compile(
    rb"^(\([\w-]+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
    rb"|^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) vllm",
    re.MULTILINE,
)
"""A line of a vLLM server log: its default format (vllm/logger.py of vLLM 0.32.0,
``(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [...]``, the date
``%m-%d %H:%M:%S``; without the process in earlier versions) or a logging config's
``%(asctime)s %(levelname)s %(name)s`` (the server logs published with
inference-sim/inference-sim's eval/ground_truth runs)."""

_ANSI_COLOUR = re.compile(rb"\x1b\[[0-9;]*m")
"""A terminal colour code: vLLM 0.32.0's ``ColoredFormatter`` (vllm/logging_utils/formatter.py)
wraps a line's process prefix in ``\\033[0;36m`` ... ``\\033[0;0m`` and its level and time in
colours of their own, which a log tee'd from a terminal keeps."""


def server_log_refusal(head: bytes) -> str | None:
    """Why a vLLM server log is no recording: it logs the engine's periodic throughput and
    queue summaries, not each request's send, first token and end. ``head`` is the file's first
    64 KiB: a line of vLLM's log at the start of any of its lines, its colours taken off, tells
    one, as a log's first lines may be another program's (a published log opens with Intel
    oneAPI's ``setvars.sh`` lines and a PyTorch warning, github.com/danielkorat/guidellm-bench
    8f24116d ``guidellm_results/20260302_1917/logs/openai_gpt-oss-20b_tp4_quant-none_server
    .log``, and was told to map its 'prompt_tokens' column); a JSON document never is."""
    text = _ANSI_COLOUR.sub(b"", head.lstrip(b"\xef\xbb\xbf"))
    if text.lstrip()[:1] in (b"{", b"[") or not _VLLM_LOG_LINE.search(text):
        return None
    return (
        "is a vLLM server log: the engine's throughput and queue every 10 s, not each "
        "request's send, first token and end; pass the load tool's result from the same "
        "run, or the server's per-request spans (--otlp-traces-endpoint, a collector's "
        "OTLP JSON file: --records-format otel, docs/recordings.md)"
    )


_SGLANG_LOG_LINE = re.compile(
    rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?(?: [A-Z_]+\d+)*\] "
    rb"(?:Prefill batch|Decode batch|server_args=ServerArgs\()",
    re.MULTILINE,
)
"""A line of an SGLang server's log (sglang 0.5.9 ``srt/utils/common.py`` ``configure_logger``:
``[%(asctime)s{prefix}] %(message)s``, the date ``%Y-%m-%d %H:%M:%S``, milliseconds with
``SGLANG_LOG_MS``, the scheduler's prefix `` DP0 TP0``... from ``managers/scheduler.py``) that
only SGLang writes: the server's arguments at start-up, or its scheduler's ``Prefill batch, ...``
and ``Decode batch, ...`` (``managers/scheduler_metrics_mixin.py``)."""

_SGLANG_TIME = re.compile(rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
"""How each of SGLang's log lines opens (a JSON array never does)."""

_SGLANG_VERSION = re.compile(rb"^SGLang Version (\S+)", re.MULTILINE)
"""What NVIDIA's SGLang container prints first (``== SGLang ==``, then its version)."""


def sglang_server_log_refusal(head: bytes) -> str | None:
    """Why an SGLang server's log is no recording: its scheduler logs each step's batch (new
    sequences and tokens, running and queued requests, throughput), not each request's send,
    first token and end; None for any other file (a JSON document is never one). A published
    log (github.com/jethac/dgx-spark-hijinks 29166059, ``results/sglang_bench_20260607T120315Z
    _server.log``: SGLang 0.5.11 in NVIDIA's container, whose banner opens it) was read as a CSV
    whose 'prompt_tokens' column was to be mapped, "the header has: ============"."""
    text = _ANSI_COLOUR.sub(b"", head.lstrip(b"\xef\xbb\xbf"))
    start = text.lstrip()
    if start[:1] == b"{" or (start[:1] == b"[" and not _SGLANG_TIME.match(start)):
        return None
    if not _SGLANG_LOG_LINE.search(text):
        return None
    version = _SGLANG_VERSION.search(text)
    said = f" (SGLang {version.group(1).decode('utf-8', 'replace')})" if version else ""
    return (
        f"is an SGLang server log{said}: its scheduler's batch of each logged step (Prefill "
        "batch, Decode batch: new and running requests, tokens, throughput), not each request's "
        "send, first token and end; pass the load tool's result from the same run (SGLang's "
        "bench_serving --output-file F --output-details, or another tool docs/recordings.md "
        "lists)"
    )
