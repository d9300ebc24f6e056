"""What a workload holds, tier by tier, for the line a run and a study say it in
(:func:`kvbudget.results.said.mix_said`): where it came from (a trace's file and format, or a
synthetic spec's arrivals and length distributions, ``meta["generator"]``) and, per tier, the
requests drawn or read, their mean prompt and output lengths and their ``max_tokens``. A
capacity answer depends on all of it, and ``workload default: 1,617 requests`` said none."""

from __future__ import annotations

from typing import Any

import numpy as np

from kvbudget.workloads.workload import Workload

__all__ = ["mix_of"]


def mix_of(w: Workload) -> dict[str, Any]:
    """``{"source", "format", "generator", "tiers": [...]}`` (JSON-ready): ``source`` and
    ``format`` a trace's (its ``meta``), ``generator`` a synthetic workload's spec as said
    (:func:`kvbudget.workloads.spec.generator_said`), and per tier with requests its name,
    ``num_requests``, ``prompt_mean`` / ``output_mean`` (tokens: the true output, not the cap)
    and ``max_tokens`` (the least and the most a request of it declares)."""
    meta = w.meta
    out: dict[str, Any] = {
        k: meta[k]
        for k in ("source", "format", "generator")
        if meta.get(k) is not None and meta.get(k) != "synthetic"
    }
    counts = np.bincount(np.asarray(w.tier, np.int64), minlength=len(w.tier_names))
    tiers = []
    for code, name in enumerate(w.tier_names):
        if not counts[code]:
            continue
        rows = w.tier == code
        caps = w.max_output_tokens[rows]
        tiers.append(
            {
                "name": name,
                "num_requests": int(counts[code]),
                "prompt_mean": float(w.prompt_tokens[rows].mean()),
                "output_mean": float(w.output_tokens[rows].mean()),
                "max_tokens": [int(caps.min()), int(caps.max())],
            }
        )
    out["tiers"] = tiers
    return out
