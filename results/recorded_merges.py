"""Files merged from several runs' summaries by a script of a published repository, told apart
from the tool's own file by what the script writes.

anyscale/ray-serve-llm-perf-examples ``horizontal_scaling/aggregate_results.py`` (at bc119398,
``aggregate_files``) merges the ``vllm bench serve --save-result`` files of N clients run side
by side (``<exp>/part1/<name>``, ``<exp>/part2/<name>``, ...) into ``<exp>/all-parts/<name>``:
a new dict of ten keys taken from the first part (``date`` ... ``max_concurrency``), then its
counts and rates summed (``completed`` first), its latencies averaged (``duration`` first), then
``request_goodput`` from the first part; nothing else is kept. vLLM's own file puts
``duration`` before ``completed`` (``benchmark()``'s ``result`` begins ``{"duration":
benchmark_duration, "completed": ...``), so a file whose keys run in the script's order, with
``completed`` before ``duration``, is that script's merge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RAY_SERVE_MERGE_KEYS = (
    # the first part's (aggregate_files's `aggregated` dict, in its order)
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    # sum_fields (num_prompts among them, keeping its place above)
    "completed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    # avg_fields
    "duration",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
    # special_fields
    "request_goodput",
)
"""The keys ``aggregate_results.py`` writes, in the order it writes them."""


def is_ray_serve_merge(doc: Mapping[str, Any]) -> bool:
    """Whether ``doc``'s keys are exactly those the script writes, in its order, ``completed``
    and ``duration`` among them (the pair whose order tells it from vLLM's own)."""
    keys = list(doc)
    if "completed" not in doc or "duration" not in doc:
        return False
    return keys == [k for k in RAY_SERVE_MERGE_KEYS if k in doc]


def ray_serve_merge_refusal(doc: Mapping[str, Any], parts: list[str] | None = None) -> str | None:
    """The refusal of such a merge; ``parts`` the runs' files found beside its ``all-parts/``
    folder (:func:`merged_parts`), when the caller looked and found some."""
    if not is_ray_serve_merge(doc):
        return None
    if parts:
        runs = f"{len(parts)} runs"
        given = ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")
        given += " beside its all-parts/ folder"
    else:
        runs, given = "several runs", "<exp>/part1/<name>, <exp>/part2/<name>, ..."
    return (
        f"is a merge of {runs}' vllm bench serve summaries by anyscale/ray-serve-llm-perf-"
        "examples' horizontal_scaling/aggregate_results.py, not a file vllm bench serve "
        "wrote: their counts and rates summed, their latencies averaged (so its percentiles "
        "are no run's, and its max_concurrency is one client's), no request; pass the runs' "
        f"own files ({given}), each saved with vllm bench serve --save-result --save-detailed"
    )


_PART_DIR = re.compile(r"part(\d+)")
"""``detect_part_directories``'s ``^part(\\d+)$``: the runs' folders beside ``all-parts``."""


def merged_parts(path: Path) -> list[str]:
    """The runs' files a merge at ``<exp>/all-parts/<name>`` was made from, as the script
    finds them (``<exp>/part<k>/<name>``, by k), relative to ``<exp>``; none when the file is
    not in an ``all-parts`` folder."""
    if path.parent.name != "all-parts":
        return []
    found: list[tuple[int, str]] = []
    for item in path.parent.parent.iterdir():
        match = _PART_DIR.fullmatch(item.name)
        if match and (item / path.name).is_file():
            found.append((int(match.group(1)), f"{item.name}/{path.name}"))
    return [name for _, name in sorted(found)]


def merge_refusal_at(path: Path, doc: Any) -> str | None:
    """:func:`ray_serve_merge_refusal` of the file at ``path``, naming its runs' files."""
    if not isinstance(doc, Mapping) or not is_ray_serve_merge(doc):
        return None
    return ray_serve_merge_refusal(doc, merged_parts(path))
