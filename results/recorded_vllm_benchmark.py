"""vllm_bench's files (PyPI ``vllm-benchmark``, github.com/viniciusCSreis/vllm_benchmark): named,
with what to pass instead.

vllm_bench is a harness: it starts the services (Docker Compose or Modal), or with ``run_only
--service-url`` takes a server already up, and runs the user's own benchmark script against it
(0.1.1 ``runner.py:84``: the script is a subprocess). It sends no request itself. Around the
script it samples the server's Prometheus ``/metrics`` (``metrics.py:92``
``metrics_samples.jsonl``; ``runner.py:125-126`` ``metrics_before.json`` and
``metrics_after.json``) and saves the script's run time with the counters' differences and
the histograms' means over it (``contracts.py:19`` ``TrialResult``, ``result.json``;
``metrics.py:62`` ``deltas``: requests, prompt and generation tokens, mean request latency,
queue time and TTFT), then one row a trial (``reports/generator.py:44-71`` ``summary.json``,
``runs.csv``, ``engines.csv``) and ``run.json``, the run's manifest (``artifacts.py:116``).
None lists a request: each was refused as "per-request results in a layout of no tool"
(``summary.json``, ``runs.csv``, ``engines.csv``: one row a trial, not a request), or "cannot
tell the recording format" (the samples), or, for a run folder, told to pass ``run.json``.
The requests are the script's: it can record them with a tool kvbudget reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvbudget.workloads.text_files import open_utf8

TRIAL_KEYS = frozenset(
    {"benchmark", "scenario", "repeat", "runtime_sec", "latency_sec", "output_rows", "engines"}
)
"""Keys of vllm_bench's ``TrialResult`` (0.1.1 ``contracts.py:19``), its ``result.json`` and
each row of its ``reports/summary.json``."""

RUNS_COLUMNS = [
    "benchmark",
    "scenario",
    "repeat",
    "status",
    "runtime_sec",
    "latency_sec",
    "output_rows",
    "error",
]
"""The header of its ``reports/runs.csv`` (``reports/generator.py:45-58``)."""

ENGINES_COLUMNS = ["benchmark", "scenario", "repeat", "status", "engine", "error"]
"""How its ``reports/engines.csv`` opens (a trial's keys, then ``metrics.py`` ``deltas``)."""

OWN_FILES = frozenset(
    {
        "result.json",
        "response.json",
        "metrics_samples.jsonl",
        "metrics_before.json",
        "metrics_after.json",
        "client.json",
        "endpoints.json",
        "startup.json",
        "dataset.json",
        "run.json",
        "config.yaml",
        "summary.json",
        "runs.csv",
        "engines.csv",
    }
)
"""What vllm_bench writes itself (0.1.1 ``runner.py``, ``external.py`` ``prepare_context``,
``bench_util.py``, ``artifacts.py``, ``reports/generator.py``); ``response.json`` is the
script's, whose meaning vllm_bench reads only as ``latency_sec`` and ``results``."""

_INSTEAD = (
    "vllm_bench sends no request itself (its benchmark script does), so none can be "
    "replayed: have the script record its requests with a load tool kvbudget reads "
    "(e.g. vllm bench serve --save-result --save-detailed into its output_dir) and "
    "pass that file, or have it write each request as the generic records format "
    "(arrival_s, prompt_tokens, output_tokens, ttft_s, e2e_s; docs/recordings.md)"
)

_TOOL = "vllm_bench's (PyPI vllm-benchmark)"


def _is_trial(doc: object) -> bool:
    return isinstance(doc, Mapping) and set(doc) >= TRIAL_KEYS


def _trial_said(doc: Mapping[str, Any]) -> str:
    return f"benchmark {doc.get('benchmark')!r}, scenario {doc.get('scenario')!r}"


def _is_samples(doc: Mapping[str, Any]) -> bool:
    """Whether ``doc`` maps engine names to ``{"values": {...}}`` (and an ``error`` where the
    scrape failed), vllm_bench's ``metrics.py`` ``snapshot``, with a ``vllm:`` metric among
    them."""
    engines = list(doc.values())
    if not engines or not all(
        isinstance(e, Mapping)
        and isinstance(e.get("values"), Mapping)
        and set(e) <= {"values", "error"}
        for e in engines
    ):
        return False
    return any(isinstance(k, str) and k.startswith("vllm:") for e in engines for k in e["values"])


def vllm_benchmark_refusal(doc: Any) -> str | None:
    """Why a JSON value of one of vllm_bench's files holds no request, naming the file, or
    None for any other file."""
    if _is_trial(doc):
        return (
            f"is {_TOOL} trial result (result.json, {_trial_said(doc)}): the benchmark "
            "script's run time and the server's Prometheus counters over it (requests, "
            "tokens, mean latency and TTFT), no request; " + _INSTEAD
        )
    if isinstance(doc, list) and doc and all(_is_trial(d) for d in doc):
        return (
            f"is {_TOOL} reports/summary.json: {len(doc)} trial result(s), each the "
            "benchmark script's run time and the server's Prometheus counters over it, "
            "one a trial, no request; " + _INSTEAD
        )
    if not isinstance(doc, Mapping):
        return None
    if "cli_version" in doc and isinstance(doc.get("trials"), list):
        return (
            f"is {_TOOL} run.json, the run's manifest (its trials' names), no "
            "measurement; " + _INSTEAD
        )
    if (
        "elapsed_sec" in doc
        and isinstance(doc.get("engines"), Mapping)
        and _is_samples(doc["engines"])
    ):
        return (
            f"is {_TOOL} metrics_samples.jsonl: the server's Prometheus metrics scraped "
            "every sample_interval during the benchmark script, no request; " + _INSTEAD
        )
    if _is_samples(doc):
        return (
            f"is {_TOOL} metrics_before.json or metrics_after.json: the server's "
            "Prometheus metrics before or after the benchmark script, no request; " + _INSTEAD
        )
    return None


def vllm_benchmark_csv_refusal(header: Iterable[str]) -> str | None:
    """Why vllm_bench's ``runs.csv`` or ``engines.csv`` (header lower-cased) holds no request,
    or None for another CSV."""
    columns = list(header)
    if columns == RUNS_COLUMNS:
        return (
            f"is {_TOOL} reports/runs.csv: one row a trial (the benchmark script's run "
            "time), no request; " + _INSTEAD
        )
    if columns[:6] == ENGINES_COLUMNS and "requests" in columns:
        return (
            f"is {_TOOL} reports/engines.csv: one row a trial and server (its Prometheus "
            "counters' differences and means over the benchmark script), no request; " + _INSTEAD
        )
    return None


def vllm_benchmark_dir_refusal(path: Path) -> str | None:
    """Why a vllm_bench run folder (``run.json`` beside ``data/``), trial folder
    (``result.json``, ``metrics_samples.jsonl``) or ``reports`` folder (whose ``summary.json``
    a kvbudget run directory's name shares) holds no recording, or None for another."""
    if (path / "run.json").is_file() and (path / "data").is_dir():
        what, mark = (
            "results folder (run.json, data/<benchmark>/<scenario>/run_N/, reports/)",
            (path / "run.json", b'"cli_version"'),
        )
    elif (path / "result.json").is_file() and (path / "metrics_samples.jsonl").is_file():
        what, mark = (
            "trial folder (result.json, metrics_*.json)",
            (path / "result.json", b'"runtime_sec"'),
        )
    elif (path / "runs.csv").is_file() and (path / "engines.csv").is_file():
        what, mark = (
            "reports folder (summary.json, runs.csv, engines.csv: one row a trial)",
            (path / "runs.csv", ",".join(RUNS_COLUMNS).encode()),
        )
    else:
        return None
    try:
        with open_utf8(mark[0]) as fh:
            head = fh.read(4096)
    except OSError:
        return None
    if mark[1] not in head:
        return None
    said = (
        f"is {_TOOL} {what}: the benchmark script's run time and the server's "
        "Prometheus counters over it, no request"
    )
    beside = sorted(
        p.name
        for p in path.iterdir()
        if p.is_file()
        and p.name not in OWN_FILES
        and p.suffix.lower() in (".json", ".jsonl", ".csv", ".yaml", ".yml", ".db")
    )
    if beside and what.startswith("trial"):  # the script's output_dir is the trial folder
        shown = ", ".join(beside[:3]) + (f" and {len(beside) - 3} more" if len(beside) > 3 else "")
        return (
            f"{said}; its benchmark script left {shown} beside them: pass the one that "
            "lists its requests (a load tool's per-request file, docs/recordings.md)"
        )
    return f"{said}; {_INSTEAD}"
