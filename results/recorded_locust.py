"""Locust's files (``locust --csv``, ``--json-file``): named, with what to do instead.

Locust is the general load tool people point at LLM servers with a locustfile of their own
(genai-bench drives it; bentoml/llm-bench's rows are its history). It times each request but
writes only aggregates (locust 2.47.0 ``stats.py``): ``--csv PREFIX`` writes
``PREFIX_stats.csv`` (one row an endpoint and the aggregate, ``StatsCSV.requests_csv_columns``,
line 1002), ``PREFIX_failures.csv`` and ``PREFIX_exceptions.csv`` (lines 1017 and 1026), and
with ``--csv-full-history`` ``PREFIX_stats_history.csv`` (line 1129, a row a write as the run
goes); ``--json-file PREFIX`` writes ``PREFIX.json``, its stats serialized (line 867
``save_stats_json``: one object an endpoint, a histogram of response times). Passed to
``--records``, ``_failures.csv`` and ``_exceptions.csv`` were asked for a ``prompt_tokens``
column, the JSON was "cannot tell the recording format", and the folder was told to pass one of
them; the stats tables were refused as anonymous aggregates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvbudget.workloads.text_files import open_utf8

STATS_COLUMNS = [
    "type",
    "name",
    "request count",
    "failure count",
    "median response time",
    "average response time",
]
"""How ``_stats.csv`` opens (lower-cased), its percentiles after ``Failures/s``."""

HISTORY_COLUMNS = ["timestamp", "user count", "type", "name", "requests/s", "failures/s"]
"""How ``_stats_history.csv`` opens (lower-cased)."""

FAILURES_COLUMNS = ["method", "name", "error", "occurrences", "first seen", "last seen"]
EXCEPTIONS_COLUMNS = ["count", "message", "traceback", "nodes"]

ENTRY_KEYS = frozenset(
    {"name", "method", "num_requests", "num_failures", "total_response_time", "response_times"}
)
"""Keys of one serialized ``StatsEntry`` (``StatsEntryDict``), an item of ``--json-file``'s list."""

_INSTEAD = (
    "Locust keeps no request's own send time, tokens or first token, so its load cannot be "
    "replayed: have the locustfile write each request as the generic records format "
    "(arrival_s, prompt_tokens, output_tokens, ttft_s, e2e_s; docs/recordings.md), or record "
    "the load with a tool kvbudget reads (genai-bench, which drives Locust, lists each request)"
)


def locust_csv_refusal(header: Iterable[str]) -> str | None:
    """Why one of Locust's CSV files (its header, lower-cased and stripped) holds no request,
    or None for another CSV."""
    columns = list(header)
    if columns[:6] == STATS_COLUMNS:
        what = "--csv *_stats.csv: one row an endpoint and their aggregate (request count, mean and percentile response times)"
    elif columns[:6] == HISTORY_COLUMNS:
        what = "--csv-full-history *_stats_history.csv: the same aggregates so far, a row a write"
    elif columns == FAILURES_COLUMNS:
        what = "--csv *_failures.csv: one row an error and how often it occurred"
    elif columns == EXCEPTIONS_COLUMNS:
        what = "--csv *_exceptions.csv: the locustfile's exceptions and their counts"
    else:
        return None
    return f"is Locust's {what}, no request; {_INSTEAD}"


def locust_refusal(doc: Any) -> str | None:
    """Why Locust's ``--json-file`` stats (a list of serialized entries) hold no request, or
    None for another JSON value."""
    if not isinstance(doc, list) or not doc:
        return None
    if not all(isinstance(d, Mapping) and set(d) >= ENTRY_KEYS for d in doc):
        return None
    return (
        f"is Locust's --json-file stats: {len(doc)} endpoint(s), each its request count and a "
        f"histogram of response times, no request; {_INSTEAD}"
    )


def locust_dir_refusal(path: Path) -> str | None:
    """Why a folder holding Locust's ``--csv`` files (a ``*_stats.csv`` with its header) is no
    recording, or None."""
    for stats in sorted(path.glob("*_stats.csv")):
        with open_utf8(stats) as fh:
            first = fh.readline(4096).decode("utf-8", "replace")
        if [h.strip().lower() for h in first.split(",")][:6] == STATS_COLUMNS:
            prefix = stats.name.removesuffix("_stats.csv")
            return (
                f"is Locust's output folder (--csv {prefix}: {stats.name} and its history, "
                f"failures and exceptions): aggregates only, no request; {_INSTEAD}"
            )
    return None
