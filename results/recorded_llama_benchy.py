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
- ``--format csv`` (0.4.0 ``results.py:507-541``): the table's rows, ``model, test_name``, then
  ``*_mean`` and ``*_std`` of each column (``t_s_mean`` ... ``e2e_ttft_std``).

Run here (llama-benchy 0.4.0 against the CPU vLLM, scripts/make_recording_fixtures.sh
llama-benchy; tests/fixtures/recordings/llama-benchy-0.4.0/), its files differed from what was
assumed: the CSV was called a file of aggregates with no tool named; what a ``--save-result``
run prints holds no table, so no test was counted (a test is a ``Running test:`` line,
``runner.py:96``; a table row is a test's pp or tg figures, ``results.py:366-432``, two a test
here); a row's ``(cN)`` concurrency is written only when the run's top level is above 1
(``results.py:369-371``); and ``simulate --trace`` named none of them
(the recordings' reader names them; where a trace was asked for, :mod:`kvbudget.results.
recording_named` says so).

Published files were misread: a JSON report (github.com/mozilla-ai/exp-llama-benchy 6d99ba71,
``data/20260912-l40s/results/*.json``, llama-benchy 0.4.0; the tool's own ``schemas/
sample.json``) was refused as a GuideLLM report missing ``benchmarks[0].requests``, and what
0.4.0 printed (github.com/djangodevreng/dgx-spark-benchmarks 5636536, ``results/*/
04-multi-turn.log``) as a CSV whose 'prompt_tokens' column was to be mapped (its header
``llama-benchy (0.4.0)``).

No request count is compared with rows here (as the other readers compare theirs, e.g.
``recorded_vllm_bench._refuse_fewer_rows``): no file of llama-benchy's is read as requests, each
is refused above whole, so none can be read as a smaller run. Its JSON report's per-test
``values`` (one ``ttfr`` a request, ``_process_batch``) are not read as requests either.
"""

from __future__ import annotations

import csv
import io
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

_CSV_HEADER = (
    "model,test_name,t_s_mean,t_s_std,t_s_req_mean,t_s_req_std,peak_ts_mean,peak_ts_std,"
    "peak_ts_req_mean,peak_ts_req_std,ttfr_mean,ttfr_std,est_ppt_mean,est_ppt_std,"
    "e2e_ttft_mean,e2e_ttft_std"
)
"""The header of ``--format csv`` (llama-benchy 0.4.0 ``results.py:510``), one row a table row."""

_LEVEL = re.compile(r"\(c(\d+)\)\s*$")
"""A row's concurrency, ``pp32 (c2)``: written only when the run's top level is above 1
(0.4.0 ``results.py:369-371``), so a file whose rows have none ran at concurrency 1."""

_RUNNING = re.compile(rb"^Running test: pp=", re.MULTILINE)
"""A test starting, one line each (0.4.0 ``runner.py:96``)."""

_SAVED = re.compile(rb"^Saving results to (.+) in (\w+) format\.\.\.", re.MULTILINE)
"""What a ``--save-result`` run prints instead of its table (0.4.0 ``results.py:476``)."""

_RECORD_INSTEAD = (
    "llama-benchy writes no per-request file; record the load with a tool "
    "kvbudget reads (vllm bench serve --save-result --save-detailed, GuideLLM, "
    "AIPerf; docs/recordings.md)"
)


def _mentions(names: list[str]) -> str:
    return ", ".join(dict.fromkeys(names))


def _rows_said(models: list[str], tests: list[str]) -> list[str]:
    """Model(s), row count and concurrency of a table's rows (each a test's prompt or
    generation figures: ``pp32 (c1)``, ``tg8 @ d32 (c2)``; 0.4.0 ``results.py:366-432``)."""
    levels = sorted({int(m.group(1)) for t in tests if (m := _LEVEL.search(t))}) or [1]
    said = [f"model {_mentions([m[:60] for m in models])}"] if models else []
    said.append(f"{len(tests)} row(s) (each a test's pp or tg figures)")
    said.append(f"concurrency {', '.join(map(str, levels))}")
    return said


def _table_rows(text: str) -> tuple[list[str], list[str]]:
    """The models and tests of a Markdown table's rows (``text`` from past its separator)."""
    rows = [
        line.strip().strip("|").split("|")
        for line in takewhile(lambda line: line.startswith("|"), text.splitlines())
    ]
    cells = [[c.strip() for c in row] for row in rows if len(row) >= 2]
    return [c[0] for c in cells], [c[1] for c in cells]


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
    sizes = {
        key: ", ".join(map(str, sorted({r[key] for r in runs if isinstance(r[key], int)})))
        for key in ("prompt_size", "context_size", "concurrency")
    }
    return (
        f"is a llama-benchy report ({_mentions([s for s in said if s])}): {len(runs)} test(s) "
        f"(prompt size {sizes['prompt_size']}, depth {sizes['context_size']}, concurrency "
        f"{sizes['concurrency']}), each the mean, "
        "standard deviation and values of its throughputs and of each request's time to first "
        "response (ttfr, est_ppt, e2e_ttft in ms), no request's send time nor token counts: "
        + _RECORD_INSTEAD
    )


def llama_benchy_text_refusal(head: bytes) -> str | None:
    """Why what llama-benchy printed, or its ``--format md`` or ``--format csv`` table saved to a
    file, is no recording; None for any other text (a JSON document is never one). ``head`` is
    the file's first 64 KiB; the table is told only where it opens the file (a README quoting
    one stays a prose document), the printed output by its banner and one other line of it."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return None
    decoded = text.decode("utf-8", "replace")
    if decoded.split("\n", 1)[0].rstrip("\r") == _CSV_HEADER:
        rows = list(csv.reader(io.StringIO(decoded)))[1:]
        said = _rows_said([r[0] for r in rows if r], [r[1] for r in rows if len(r) > 1])
        return (
            f"is llama-benchy's table (--format csv, as saved: {', '.join(said)}): per row the "
            "mean and standard deviation of a test's throughputs and times to first response, "
            "no request: " + _RECORD_INSTEAD
        )
    banner = _BANNER.search(text)
    table = _TABLE_HEADER.search(decoded)
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
    if banner:
        said.append(f"{len(_RUNNING.findall(text))} test(s) run")
    if table:
        below = decoded[table.end() :].split("\n", 2)[2:]  # past |:---|
        models, tests = _table_rows(below[0] if below else "")
        if banner:  # its model and levels said above
            said.append(f"{len(tests)} table row(s)")
        else:
            said.extend(_rows_said(models, tests))
    saved = _SAVED.search(text)
    if saved:
        said.append(
            f"its results saved to {saved.group(1).decode('utf-8', 'replace')[:80]} "
            f"(--format {saved.group(2).decode().lower()}), not in this file"
        )
    return (
        f"is {what}{': ' + ', '.join(said) if said else ''}): per test the mean ± standard "
        "deviation of its throughputs and times to first response, no request: " + _RECORD_INSTEAD
    )
