"""Plain-text tables for the terminal (no dependency, fast to import)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                       enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                               enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


SUMMARY_HEADERS = (
    "policy", "tier", "offered", "done", "rej", "expired", "dropped", "preempt",
    "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99", "out tok/s", "goodput/s", "SLO att",
)


def summary_rows(summary: dict[str, Any]) -> list[list[Any]]:
    rows = []
    blocks = [("all", summary["overall"]), *summary["tiers"].items()]
    for tier, b in blocks:
        if not b["offered"]:
            continue
        rows.append([
            summary["policy"], tier, b["offered"], b["completed"],
            b["rejected_too_large"] + b["rejected_overloaded"], b["expired"],
            b["preempted_dropped"], b["num_preemptions"],
            b["ttft_s"]["p50"], b["ttft_s"]["p99"], b["tpot_s"]["p50"], b["tpot_s"]["p99"],
            b["e2e_s"]["p99"], b["output_tokens_per_s"], b["goodput_rps"], b["slo_attainment"],
        ])
    return rows


def kv_rows(summary: dict[str, Any]) -> list[Any]:
    kv = summary["kv"]
    return [summary["policy"], kv["used_mean_fraction"], kv["reserved_mean_fraction"],
            kv["reservation_efficiency"], kv["used_p99"], summary["kv_capacity_tokens"],
            summary["engine"]["num_engine_preemptions"],
            summary["engine"]["num_gateway_revocations"], summary["wall_time_s"]]


KV_HEADERS = ("policy", "KV used", "KV reserved", "res. eff.", "KV used p99", "KV capacity",
              "engine preempt", "gw revoke", "wall s")


def render_summaries(summaries: Sequence[dict[str, Any]]) -> str:
    rows: list[list[Any]] = []
    for s in summaries:
        rows.extend(summary_rows(s))
    kv = [kv_rows(s) for s in summaries]
    return (render(SUMMARY_HEADERS, rows) + "\n\n" + render(KV_HEADERS, kv) +
            "\n(times in seconds; KV used/reserved are time-weighted fractions of capacity)")
