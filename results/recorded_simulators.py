"""Other simulators' per-request outputs: said as such, in one line, never read as measured.

A simulator's request table looks like a load tool's: one row a request, its tokens, its
latencies. github.com/MIST-Simulator/SC_Paper_Charts (commit 907fd62e, ``data/validation/T1/``)
publishes Vidur's ``request_metrics.csv`` and LLMServingSim2.0's result CSV beside the real vLLM
runs they were set against. ``validate --records`` told each to map a column it lacks
(``--column prompt_tokens=...``, ``--column arrival_s=arrival --arrival-unit ns``) and ``trace
convert`` that such a file "is a recording: kvbudget validate --records FILE simulates its
requests and compares": followed, kvbudget's simulation would be compared with another
simulator's and the table called measured. :func:`simulated_output_refusal` names the
simulator and sends the user to the measured run instead.
"""

from __future__ import annotations

from collections.abc import Iterable

VIDUR_REQUEST_METRICS = frozenset(
    {
        "request_e2e_time",
        "request_execution_time",
        "request_scheduling_delay",
        "prefill_e2e_time",
        "request_num_prefill_tokens",
        "request_num_decode_tokens",
        "request_inter_arrival_delay",
    }
)
"""Columns of Vidur's ``request_metrics.csv`` (github.com/microsoft/vidur 158eee64
``vidur/metrics/constants.py``: ``RequestMetricsTimeDistributions`` and
``RequestMetricsHistogram``), one row a simulated request under ``Request Id``
(``vidur/metrics/metrics_store.py``'s ``REQUEST_ID_STR``)."""

LLMSERVINGSIM_COLUMNS = (
    "instance id",
    "request id",
    "model",
    "input",
    "output",
    "arrival",
    "end_time",
    "latency",
    "queuing_delay",
    "TTFT",
    "TPOT",
    "ITL",
)
"""The header LLMServingSim writes with ``--output`` (github.com/casys-kaist/LLMServingSim
09ef9d7a ``serving/core/scheduler.py``, ``Scheduler.save_output``; times in simulated
nanoseconds); its forks append columns after these."""


def simulated_output_refusal(header: Iterable[str]) -> str | None:
    """Why a CSV with ``header`` is no recording: another simulator's per-request output
    (Vidur's or LLMServingSim's), none of its times measured; None for anything else."""
    names = [h.strip().strip('"') for h in header]
    if len(VIDUR_REQUEST_METRICS & set(names)) >= 3:
        sim = "Vidur's simulated request metrics (request_metrics.csv: request_e2e_time, ...)"
    elif tuple(names[: len(LLMSERVINGSIM_COLUMNS)]) == LLMSERVINGSIM_COLUMNS:
        sim = "LLMServingSim's simulated requests (its --output CSV: TTFT, TPOT, ITL in ns)"
    else:
        return None
    return (
        f"is {sim}, another simulator's output, not a measured run: kvbudget validates and "
        "calibrates against what a real server measured, so pass the load tool's result of "
        "the run it was set against (docs/recordings.md), and simulate that run's requests "
        "from its trace (kvbudget simulate --trace FILE)"
    )
