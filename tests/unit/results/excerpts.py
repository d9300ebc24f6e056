"""Copies of the published excerpts with the tool's own request counts set to the excerpt's.

Each excerpt under tests/fixtures/recordings/published/ keeps a few requests of a published run
and its top-level figures as published (README.md there says what was cut), so its own count
(vllm bench serve's ``completed``, AIPerf's ``request_count``...) says more requests than the
excerpt holds: read as it is, the readers refuse it as a cut file, which is what a user's cut
copy gets (test_recorded_counts.py). The tests that read an excerpt for what else it shows read
a copy made here, whose counts say the excerpt's requests, nothing else changed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints


def _vllm(doc: dict[str, Any]) -> None:
    n = len(doc["input_lens"])
    failed = sum(1 for e in doc.get("errors") or [] if e)
    doc["completed"] = n - failed
    if "failed" in doc:
        doc["failed"] = failed


def _aiperf(records: Path) -> None:
    beside = records.with_name(records.name.removesuffix(".jsonl") + "_aiperf.json")
    summary = beside if beside.is_file() else records.with_name("profile_export_aiperf.json")
    if not summary.is_file():
        return
    recs = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    measured = [r for r in recs if r["metadata"].get("benchmark_phase", "profiling") != "warmup"]
    errors = sum(1 for r in measured if r.get("error"))
    doc = json.loads(summary.read_text())
    at = doc if "request_count" in doc else doc.get("records", {})
    for tag, count in (("request_count", len(measured) - errors), ("error_request_count", errors)):
        if tag in at:
            at[tag]["avg"] = float(count)
    summary.write_text(json.dumps(doc))


def _genai_bench(doc: dict[str, Any]) -> None:
    reqs = doc["individual_request_metrics"]
    errors = sum(1 for r in reqs if r.get("error_code") not in (None, 200))
    doc["aggregated_metrics"].update(
        num_requests=len(reqs), num_completed_requests=len(reqs) - errors, num_error_requests=errors
    )


def _guidellm(doc: dict[str, Any]) -> None:
    for bench in doc["benchmarks"]:
        listed = {k: len(v) for k, v in bench["requests"].items() if isinstance(v, list)}
        for table in (
            bench.get("request_totals"),
            (bench.get("metrics") or {}).get("request_totals"),
            (bench.get("scheduler_metrics") or {}).get("requests_made"),
        ):
            if isinstance(table, dict):
                table.update(listed)
                table["total"] = sum(listed.values())


def excerpt_copy(src: Path, tmp: Path) -> Path:
    """``src`` (an excerpt's file or folder) copied under ``tmp``, its counts the excerpt's."""
    out = tmp / src.name
    if src.is_dir():
        shutil.copytree(src, out)
    else:
        shutil.copy(src, out)
    set_excerpt_counts(out)
    return out


def set_excerpt_counts(path: Path) -> None:
    """Set, in place, the counts of the copy ``path`` (a file or folder) to its requests."""
    if path.is_dir():
        for member in sorted(path.iterdir()):
            set_excerpt_counts(member)
        return
    if path.suffix == ".jsonl":
        _aiperf(path)
    if path.suffix in (".json", ".yaml") and path.is_file():
        text = path.read_text()
        doc = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if isinstance(doc, dict) and isinstance(doc.get("input_lens"), list):
            _vllm(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("individual_request_metrics"), list):
            _genai_bench(doc)
        elif isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list):
            _guidellm(doc)
        else:
            return
        path.write_text(json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc))
