"""The ``max_tokens`` GuideLLM 0.2-0.3 sent with its synthetic data, from the report's data
settings.

Those reports keep no request body, but each benchmark keeps its ``request_loader.data`` (the
``--data`` text: JSON or ``key=value,...``). For synthetic data GuideLLM draws each request's
output length from ``output_tokens`` (``output_tokens_stdev``, ``_min``, ``_max``: v0.3.1
``src/guidellm/dataset/synthetic.py`` and ``utils/random.py`` ``IntegerRangeSampler``, which
yields one value when its bounds meet) and sends it as ``max_tokens`` with ``ignore_eos``
(``backend/openai.py`` ``_completions_payload``: "only set stop and ignore_eos if
max_output_tokens set at request level"). Where the settings fix one length, every request
was sent that ``max_tokens``: a published report (github.com/jhurlocker/guidellm-pipeline,
``utils/guidellm-wb/results/llama-3-2-3b_20250721_003902/benchmark-results.yaml``, data
``{"type": "emulated", "prompt_tokens": 512, "output_tokens": 128}``) had its request cut by
the time limit after 75 tokens simulated as one of ``max_tokens`` 75, not 128.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def _settings(data: Any) -> Mapping[str, Any] | None:
    """One ``--data`` text as GuideLLM saved it: a JSON object or ``key=value,...``; None for
    anything else (a dataset's name or path)."""
    if isinstance(data, Mapping):
        return data
    if not isinstance(data, str):
        return None
    text = data.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    pairs = [item.partition("=") for item in text.split(",")]
    if not pairs or any(not sep for _, sep, _ in pairs):
        return None
    out: dict[str, Any] = {}
    for key, _, value in pairs:
        try:
            out[key.strip()] = int(value)
        except ValueError:
            out[key.strip()] = value.strip()
    return out


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fixed_output_tokens(data: Any) -> int | None:
    """The one output length a synthetic data setting gives every request (its bounds meet, as
    ``IntegerRangeSampler`` computes them), or None."""
    settings = _settings(data)
    if settings is None:
        return None
    average = _count(settings.get("output_tokens"))
    if average is None or average < 1:
        return None
    spread = _count(settings.get("output_tokens_stdev")) or 0
    low = _count(settings.get("output_tokens_min"))
    high = _count(settings.get("output_tokens_max"))
    low = max(1, average - 5 * spread) if low is None else low
    high = average + 5 * spread if high is None else high
    return low if low == high else None


def synthetic_max_tokens(benchmarks: Sequence[Any]) -> int | None:
    """The ``max_tokens`` every request of a GuideLLM 0.2-0.3 report was sent: the one fixed
    synthetic output length all its benchmarks' ``request_loader.data`` give, or None."""
    lengths = set()
    for bench in benchmarks:
        loader = bench.get("request_loader") if isinstance(bench, Mapping) else None
        if not isinstance(loader, Mapping):
            return None
        lengths.add(fixed_output_tokens(loader.get("data")))
    if len(lengths) != 1:
        return None
    return lengths.pop()


def synthetic_note(max_tokens: int) -> str:
    """What the settings line of such a report says of its ``max_tokens``."""
    return (f"max_tokens: {max_tokens} for every request, with ignore_eos, from the report's "
            f"synthetic data settings (output_tokens={max_tokens}: GuideLLM 0.2-0.3 sends the "
            "drawn output length as max_tokens with ignore_eos)")
