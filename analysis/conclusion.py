"""One line of what to conclude from runs side by side (the last line of ``kvbudget compare``).

:func:`conclude` reads the summaries (``summary.json`` dictionaries, one per policy, same
workload) and says which policies meet the first tier's SLO (the tier the gateway protects, the
``interactive`` tier of the default scenario) at the attainment target, and what each of those
costs the other tiers (their SLO attainment, lowest first). It is computed from the figures,
never written by hand: change the load and the line changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvbudget.workloads.arrival_rate import mean_arrival_rate

DEFAULT_TARGET = 0.9
"""SLO attainment a tier must reach to count as met: 90 %, the default target of
``kvbudget capacity`` (DistServe's goodput definition uses 90 % attainment, Zhong et al. 2024,
section 2)."""


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _attainment(summary: Mapping[str, Any], tier: str) -> float:
    value = summary["tiers"].get(tier, {}).get("slo_attainment")
    return float(value) if value is not None else 0.0


def offered_rate_rps(summary: Mapping[str, Any]) -> float | None:
    """The offered requests' mean arrival rate over the arrival window (first to last
    arrival: :func:`~kvbudget.workloads.arrival_rate.mean_arrival_rate`), or None."""
    return mean_arrival_rate(int(summary["overall"]["offered"]),
                             float(summary.get("offered_window_s") or 0.0))


def conclude(summaries: Sequence[Mapping[str, Any]], target: float = DEFAULT_TARGET) -> str:
    """``conclusion at R req/s: ...``: which policies meet the first tier's SLO (attainment >=
    ``target``) and the other tiers' attainment under each; when none does, the closest."""
    if not summaries:
        return ""
    tiers = [t for t, b in summaries[0]["tiers"].items() if b.get("offered")]
    if not tiers:
        return "conclusion: no request was offered"
    first, others = tiers[0], tiers[1:]
    rate = offered_rate_rps(summaries[0])
    head = f"conclusion at {rate:.3g} req/s offered: " if rate is not None else "conclusion: "
    meet = [s for s in summaries if _attainment(s, first) >= target]
    miss = [s for s in summaries if _attainment(s, first) < target]
    if not meet:
        top = max(_attainment(s, first) for s in summaries)
        best = [str(s["policy"]) for s in summaries if _attainment(s, first) == top]
        if len(best) == len(summaries) > 1:  # naming one would rank policies that tie
            return (head + f"no policy meets {first}'s SLO at {_pct(target)}; every policy "
                    f"at {_pct(top)}")
        return (head + f"no policy meets {first}'s SLO at {_pct(target)}; closest "
                f"{_names(best)} ({_pct(top)})")

    def cost(s: Mapping[str, Any]) -> str:
        if not others:
            return str(s["policy"])
        figures = ", ".join(f"{t} {_pct(_attainment(s, t))}" for t in others)
        return f"{s['policy']} ({figures})"

    def spared(s: Mapping[str, Any]) -> float:  # the other tiers' lowest attainment
        return min((_attainment(s, t) for t in others), default=1.0)

    ranked = sorted(meet, key=lambda s: -spared(s))  # the one that costs them least first
    least = [str(s["policy"]) for s in ranked if spared(s) == spared(ranked[0])]
    line = (head + f"{first} SLO met (attainment >= {_pct(target)}) by "
            + "; ".join(cost(s) for s in ranked))
    if miss:  # the first tier's own attainment, named: "(17 %)" read as missed by 17 points
        line += "; missed by " + ", ".join(
            f"{s['policy']} ({first} {_pct(_attainment(s, first))})" for s in miss)
    if others and len(least) == len(ranked) > 1:
        line += "; they cost the other tiers alike"
    elif others and len(least) > 1:
        line += f"; {_names(least)} cost the other tiers least, alike"
    elif others and len(ranked) > 1:
        line += f"; {ranked[0]['policy']} costs the other tiers least"
    elif others:
        line += f"; the other tiers' attainment under {ranked[0]['policy']} in brackets"
    return line
