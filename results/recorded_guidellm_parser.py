"""rsevilla87/guidellm-results-parser's output: named, with the GuideLLM report to pass instead.

That parser (github.com/rsevilla87/guidellm-results-parser, Apache-2.0) reads a GuideLLM report
(``guidellm_parser.py --results benchmarks.json``, its default) and writes the first benchmark's
figures for OpenSearch (``--output parsed_results.json``, its README's "Typical Workflow"):
means and percentiles of TTFT, ITL, request latency and throughput. kvbudget refused such a
file as "aggregate figures" of no tool, or, with the per-request entries of later versions, as
requests "in a layout of no tool kvbudget reads" to rewrite by hand, though the report it was
parsed from, which kvbudget reads, holds each request whole. Its layouts:

* the object committed as ``parsed_results.json`` (commit d6d69459: ``benchmark_id``,
  ``run_id``, ``successful_requests``, ``incomplete_requests``, ``ttft_mean_ms``,
  ``throughput_mean_rps``, ``time_per_output_token_mean_ms``, ...);
* from d6d69459 a JSON list, its first item those figures (``uuid``, ``job_name``) and one
  item a request after it (``ttft_ms``, ``itl_ms``, ``request_latency_seconds``, no token
  counts; README.md at 54a97206);
* later, each item a ``metricName`` (``guidellmBenchmarkSummary`` alone, or with ``--verbose``
  one ``guidellmRequestResult`` or ``guidellmRequestError`` a request, again without token
  counts; guidellm_parser.py ``parse_benchmarks``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUMMARY_NAME = "guidellmBenchmarkSummary"
"""The ``metricName`` of the parser's summary, its output's first item (guidellm_parser.py
``parse_benchmarks``; its requests' ``guidellmRequestResult`` and ``guidellmRequestError``
follow it)."""

SUMMARY_KEYS = frozenset(
    {
        "successful_requests",
        "errored_requests",
        "incomplete_requests",
        "ttft_mean_ms",
        "itl_mean_ms",
        "throughput_mean_rps",
        "time_per_output_token_mean_ms",
    }
)
"""Keys every version of the parser's summary holds (its flat copy of a GuideLLM benchmark's
``request_totals`` and ``metrics``), where GuideLLM's own report nests them."""


def _is_summary(item: object) -> bool:
    return isinstance(item, Mapping) and (
        item.get("metricName") == SUMMARY_NAME or set(item) >= SUMMARY_KEYS
    )


def guidellm_parser_refusal(doc: Any) -> str | None:
    """Why ``doc`` (a file's first JSON value) is no recording: the parser's output, an object
    or a list whose first item is its summary (:data:`SUMMARY_KEYS`, or :data:`SUMMARY_NAME` as
    its ``metricName``); None for anything else."""
    first = doc[0] if isinstance(doc, list) and doc else doc
    if not _is_summary(first):
        return None
    num_requests = len(doc) - 1 if isinstance(doc, list) else 0
    held = (
        f", then {num_requests} request(s) with their start and latencies but no token counts"
        if num_requests
        else ""
    )
    return (
        "is rsevilla87/guidellm-results-parser's output (guidellm_parser.py --output: the "
        f"aggregate figures of a GuideLLM report's first benchmark{held}): pass that report "
        "instead (the file its --results read, benchmarks.json by default), which lists the "
        "run's requests with their send times, tokens, TTFT and E2E (docs/recordings.md)"
    )
