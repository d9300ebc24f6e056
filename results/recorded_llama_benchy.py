"""llama-benchy's outputs, named: none of them holds a request kvbudget could replay.

llama-benchy (github.com/eugr/llama-benchy, MIT; on PyPI, 0.4.0 in July 2026) runs llama-bench's
prompt (``pp``) and generation (``tg``) tests against an OpenAI-compatible server, each test
``--runs`` times at each of its concurrency levels and context depths, and reports per test the
mean and standard deviation of its throughputs and of each request's time to first response
(its source at ae09cab5, ``src/llama_benchy/``):

- what it prints (``__main__.py``): ``llama-benchy (VERSION)``, ``Date: ...``, ``Benchmarking
  model: MODEL at URL`` and ``Concurrency levels: [...]`` first, ``Running test: pp=...,
  tg=..., depth=..., concurrency=...`` a test, the table below, then ``llama-benchy (VERSION)``
  and ``date: ... | latency mode: ...`` again;
- ``--format md`` (the default; ``results.py`` ``_generate_md_report``): a pipe table of one row
  a test, ``model | test | t/s | peak t/s | ttfr (ms) | est_ppt (ms) | e2e_ttft (ms)`` (with
  ``t/s (total)``, ``t/s (req)`` and ``peak t/s (req)`` when a level is above 1), each cell
  ``mean ± std``; ``--save-result FILE`` writes the table alone;
- ``--format json`` (``save_report``): ``BenchmarkReport``, the run's metadata (``version``,
  ``timestamp``, ``latency_mode``, ``latency_ms``, ``model``, ``prefix_caching_enabled``,
  ``max_concurrency``) and ``benchmarks``, one ``BenchmarkRun`` a test (``concurrency``,
  ``context_size``, ``prompt_size``, ``response_size``, ``is_context_prefill_phase``, then
  ``{mean, std, values}`` of ``pp_throughput`` ... ``ttfr``, ``est_ppt``, ``e2e_ttft``;
  ``_process_batch`` appends one ``ttfr`` value a request, ``first_response_ts - start_ts`` in
  ms, and keeps no send time, token count or end of any request);
- ``--format csv``: one row a test of ``*_mean`` and ``*_std`` columns (named as aggregates by
  :mod:`kvbudget.results.recorded_aggregates`).

Published files were misread: a JSON report (github.com/mozilla-ai/exp-llama-benchy 6d99ba71,
``data/20260912-l40s/results/*.json``, llama-benchy 0.4.0; the tool's own ``schemas/
sample.json``) was refused as a GuideLLM report missing ``benchmarks[0].requests``, and what
0.4.0 printed (github.com/djangodevreng/dgx-spark-benchmarks 5636536, ``results/*/
04-multi-turn.log``) as a CSV whose 'prompt_tokens' column was to be mapped (its header
``llama-benchy (0.4.0)``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import takewhile
from typing import Any

_RUN_KEYS = frozenset({"concurrency", "context_size", "prompt_size", "response_size"})
"""Fields every ``BenchmarkRun`` of a JSON report has (``results.py``)."""

_BANNER = re.compile(rb"^llama-benchy \(([^()\s]+)\)[ \t]*\r?$", re.MULTILINE)
"""The line llama-benchy prints first and last: ``llama-benchy (0.4.0)`` (``__main__.py``)."""

_CONSOLE_MARKS = (
    b"\nBenchmarking model: ",
    b"\nRunning test: pp=",
    b"\nPrinting results in ",
    b"\nSaving results to ",
)
"""Other lines only llama-benchy prints (``__main__.py``, ``runner.py``, ``results.py``)."""

_TABLE_HEADER = re.compile(
    r"^\|\s*model\s*\|\s*test\s*\|[^\n]*\|\s*ttfr \(ms\)\s*\|\s*est_ppt \(ms\)\s*\|"
    r"\s*e2e_ttft \(ms\)\s*\|[ \t]*\r?$",
    re.MULTILINE,
)
"""The header of llama-benchy's table (``_generate_md_report``), printed or saved."""

_RECORD_INSTEAD = (
    "llama-benchy writes no per-request file; record the load with a tool "
    "kvbudget reads (vllm bench serve --save-result --save-detailed, GuideLLM, "
    "AIPerf; docs/recordings.md)"
)


def _mentions(names: list[str]) -> str:
    return ", ".join(dict.fromkeys(names))


def llama_benchy_report_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why llama-benchy's ``--format json`` report is no recording; None for any other object
    (a GuideLLM report also keeps its runs under ``benchmarks``, but never these fields)."""
    runs = doc.get("benchmarks")
    if not (
        isinstance(runs, list)
        and runs
        and all(isinstance(run, Mapping) and set(run) >= _RUN_KEYS for run in runs)
    ):
        return None
    said = [
        f"llama-benchy {doc['version']}" if isinstance(doc.get("version"), str) else "",
        "--format json",
    ]
    if isinstance(doc.get("model"), str):
        said.append(f"model {doc['model'][:60]}")
    levels = sorted({run["concurrency"] for run in runs if isinstance(run["concurrency"], int)})
    return (
        f"is a llama-benchy report ({_mentions([s for s in said if s])}): {len(runs)} test(s) "
        f"(prompt size, depth, concurrency {', '.join(map(str, levels))}), each the mean, "
        "standard deviation and values of its throughputs and of each request's time to first "
        "response (ttfr, est_ppt, e2e_ttft in ms), no request's send time nor token counts: "
        + _RECORD_INSTEAD
    )


def llama_benchy_text_refusal(head: bytes) -> str | None:
    """Why what llama-benchy printed, or its ``--format md`` table saved to a file, is no
    recording; None for any other text (a JSON document is never one). ``head`` is the
    file's first 64 KiB; the table is told only where it opens the file (a README quoting
    one stays a prose document), the printed output by its banner and one other line of it."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return None
    banner = _BANNER.search(text)
    table = _TABLE_HEADER.search(text.decode("utf-8", "replace"))
    if banner and any(mark in b"\n" + text for mark in _CONSOLE_MARKS):
        what = f"llama-benchy's console output (llama-benchy {banner.group(1).decode()}, as printed"
    elif table and table.start() == 0:
        what = "llama-benchy's table (--format md, as saved"
    else:
        return None
    said = []
    model = re.search(rb"\nBenchmarking model: (\S+)", b"\n" + text)
    if model:
        said.append(f"model {model.group(1).decode('utf-8', 'replace')[:60]}")
    levels = re.search(rb"\nConcurrency levels: (\[[\d, ]*\])", b"\n" + text)
    if levels:
        said.append(f"concurrency levels {levels.group(1).decode()}")
    if table:
        below = text.decode("utf-8", "replace")[table.end() :].splitlines()[2:]  # past |:---|
        tests = sum(1 for _ in takewhile(lambda line: line.startswith("|"), below))
        said.append(f"{tests} test row(s)")
    return (
        f"is {what}{': ' + ', '.join(said) if said else ''}): per test the mean ± standard "
        "deviation of its throughputs and times to first response, no request: " + _RECORD_INSTEAD
    )
