"""The lines that say what a run's engine features assumed and did (the engine's own queue
caps, speculative decoding, a CPU KV offload tier, an autoscaled fleet, a disaggregated
deployment), from its summary: ``kvbudget simulate``'s screen (``cli.tables``) and
``kvbudget report`` (``analysis.report``) say the same lines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "autoscale_line",
    "disagg_line",
    "feature_lines",
    "offload_line",
    "queue_caps_line",
    "speculative_line",
]


def feature_lines(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The runs' feature lines that say something, in the screen's order."""
    lines = (
        queue_caps_line(summaries),
        speculative_line(summaries),
        offload_line(summaries),
        autoscale_line(summaries),
        disagg_line(summaries),
    )
    return [line for line in lines if line]


def queue_caps_line(summaries: Sequence[dict[str, Any]]) -> str:
    """The engine's own queue caps the runs assumed (``engine.queue_caps``; TGI's 128 permits
    by default) and what each refused (the one place those refusals are counted), or ``""``
    when no run had any."""
    parts = []
    for s in summaries:
        engine = s.get("engine") or {}
        caps = engine.get("queue_caps")
        if caps:
            reasons = (s.get("overall") or {}).get("rejections_by_reason") or {}
            knobs = ", ".join(
                f"{k}={v} (refused {int(reasons.get(f'engine_{k}', 0)):,})" for k, v in caps.items()
            )
            pool = " prefill pool" if engine.get("disaggregation") else ""
            parts.append(f"{s.get('policy', '')}: {engine.get('engine', '')}{pool} {knobs}")
    return "engine queue caps: " + "; ".join(parts) if parts else ""


def speculative_line(summaries: Sequence[dict[str, Any]]) -> str:
    """What the runs with speculative decoding assumed and got (``engine.speculative``), or
    ``""`` when none had it."""
    parts = []
    for s in summaries:
        spec = (s.get("engine") or {}).get("speculative")
        if spec:
            parts.append(
                f"{s.get('policy', '')}: {spec['assumed']}; measured mean acceptance "
                f"length {spec['mean_acceptance_length']:.3f}, "
                f"{spec['output_tokens_per_step']:.2f} output tokens an engine step (all requests)"
            )
    return "speculative decoding: " + "; ".join(parts) if parts else ""


def offload_line(summaries: Sequence[dict[str, Any]]) -> str:
    """The CPU KV offload tier each run had (``engine.kv_offloading``; a fleet's replicas'
    each, ``engine.fleet.replicas[i].kv_offloading``, summed over them): its size, its hits
    and the bytes moved, and what was assumed; ``""`` when no run had one."""
    parts, assumed = [], ""
    for s in summaries:
        engine = s.get("engine") or {}
        own = engine.get("kv_offloading")
        tiers = (
            [own]
            if own
            else [
                r["kv_offloading"]
                for r in (engine.get("fleet") or {}).get("replicas", ())
                if r.get("kv_offloading")
            ]
        )
        if not tiers:
            continue
        off = tiers[0]
        assumed = off["assumed"]
        loads, tokens, moved, seconds, stored = (
            sum(t[k] for t in tiers)
            for k in (
                "num_loads",
                "cpu_hit_tokens",
                "load_bytes_per_gpu",
                "load_time_s",
                "stored_bytes_per_gpu",
            )
        )
        fleet = not own
        gpu = "" if fleet else " a GPU"
        parts.append(
            f"{s.get('policy', '')}: {off['kv_offloading_size_gib']:g} GiB"
            + (" a replica" if fleet else "")
            + f" ({off['cpu_blocks']:,} blocks)"
            + (f" on {len(tiers):,} replicas, together " if fleet else ", ")
            + f"{loads:,} load{'' if loads == 1 else 's'} of {tokens:,} tokens "
            f"({_gb(moved)} GB{gpu} in {seconds:.3g} s), {_gb(stored)} GB{gpu} stored"
            + (" (GB: each replica's a GPU, added)" if fleet else "")
        )
    return f"CPU KV offload: {'; '.join(parts)} (assumed: {assumed})" if parts else ""


def _gb(num_bytes: float) -> str:
    """Bytes in GB, three figures below 1,000 GB and grouped whole ones from there (not
    '2.95e+03')."""
    gb = num_bytes / 1e9
    return f"{gb:.3g}" if gb < 1000 else f"{gb:,.0f}"


def autoscale_line(summaries: Sequence[dict[str, Any]]) -> str:
    """What an autoscaled fleet assumed and used (docs/autoscaling.md), per run: ``""`` when
    no run autoscaled."""
    parts = []
    for s in summaries:
        a = ((s.get("engine") or {}).get("fleet") or {}).get("autoscale")
        if a:
            parts.append(
                f"{s.get('policy', '')}: {a['min_replicas']}-{a['max_replicas']} replicas on "
                f"{a['metric']} (target {a['target']:g} a replica, every "
                f"{a['polling_interval_s']:g} s, up after {a['scale_up_delay_s']:.1f} s "
                f"{_delay_from(a)}, down "
                f"after a {a['scale_down_stabilization_s']:g} s window): {a['gpu_hours']:.3g} "
                f"GPU-h, peak {a['peak_replicas']}, {a['num_scale_ups']} up / "
                f"{a['num_scale_downs']} down, {_kv_over(s.get('kv') or {})}"
            )
    return "autoscaled fleet: " + "; ".join(parts) if parts else ""


def _kv_over(kv: dict[str, Any]) -> str:
    """What an autoscaled run's KV used and reserved are over: the capacity serving (a
    summary written before: the capacity at the most replicas, the KV capacity column's)."""
    held = kv.get("capacity_mean_tokens")
    if held is None:
        return "KV used/reserved over the KV capacity at its most replicas"
    return (f"KV used/reserved over the capacity serving (up or draining replicas: "
            f"{held:,.0f} tokens on average; the KV capacity column is at the most replicas)")


def _delay_from(a: dict[str, Any]) -> str:
    """Where an autoscaled run's scale-up delay came from: given, or its cold start worked
    out with ``engine_start_s`` (a summary written before said "given" alone)."""
    if str(a.get("scale_up_delay", "")).startswith("given"):
        return "(given)"
    return f"(cold start: weights + engine_start_s {a['engine_start_s']:g} s)"


def disagg_line(summaries: Sequence[dict[str, Any]]) -> str:
    """Each disaggregated run's KV transfers (count, mean time) over its link and its pools'
    KV use (docs/disaggregation.md), or ``""`` when no run was disaggregated: the KV table's
    figures are the decode pool's, the gateway's budget. A link the runs share is said once."""
    runs = [(s, d) for s in summaries if (d := (s.get("engine") or {}).get("disaggregation"))]
    links = {_link(d) for _, d in runs}
    parts = []
    for s, d in runs:
        # (a run written before the pools' KV was in its summary says its transfers alone)
        pools = (
            "; KV used (mean) "
            + ", ".join(
                f"{name} pool {_g3(d[name].get('kv_used_mean_fraction'))} of "
                f"{d[name]['kv_capacity_tokens']:,} tokens"
                for name in ("prefill", "decode")
            )
            + " (the decode pool's is the KV table's)"
            if all("kv_capacity_tokens" in d[name] for name in ("prefill", "decode"))
            else ""
        )
        mean_s = d["transfer_s_mean"]
        first = FIRST_TOKEN_SAID.get(d.get("first_token", ""), "")
        parts.append(
            f"{s.get('policy', '')}: {first}{d['num_transfers']:,} KV transfers"
            + ("" if len(links) == 1 else f" over {_link(d)}")
            + ", "
            + ("none" if mean_s is None else f"{mean_s * 1e3:.3g} ms")
            + " mean"
            + pools
        )
    if not parts:
        return ""
    return (
        "disaggregated"
        + (f", over {links.pop()}" if len(links) == 1 else "")
        + ": "
        + "; ".join(parts)
    )


FIRST_TOKEN_SAID = {
    "decode": "first tokens from the decode replicas (vLLM's P/D: TTFT counts the transfer), ",
    "prefill": "first tokens from the prefill replicas (DistServe's), ",
}
"""``disaggregation.first_token`` as the line says it (docs/disaggregation.md)."""


def _link(d: Mapping[str, Any]) -> str:
    return (
        f"{d['link']} ({d['link_bandwidth_bytes_s'] / 1e9:.3g} GB/s a GPU + "
        f"{d['link_latency_s'] * 1e3:.3g} ms a transfer, {d['kv_bytes_per_token_per_gpu']:,} "
        "bytes a token a GPU)"
    )


def _g3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"
