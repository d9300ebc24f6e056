"""Prometheus text exposition (format 0.0.4) of ``kvbudget serve``'s counters, written by hand
(no client library): admitted and refused requests, queue depth per tier, leases, reserved
tokens, TTFT and E2E histograms per tier."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter
from collections.abc import Mapping

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Histogram bounds in seconds: Prometheus client libraries' default buckets
(``.005 .. 10``) extended to a minute for long generations."""


class _Histogram:
    __slots__ = ("counts", "num", "total")

    def __init__(self) -> None:
        self.counts = [0] * len(BUCKETS_S)
        self.num = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in its own bucket (the first bound it is not over; none past the
        last): one search a request, the cumulative counts summed when the page is read."""
        self.num += 1
        self.total += value
        i = bisect.bisect_left(BUCKETS_S, value)
        if i < len(BUCKETS_S):
            self.counts[i] += 1

    def lines(self, name: str, tier: str) -> list[str]:
        out = [f'{name}_bucket{{tier="{tier}",le="{b}"}} {c}'
               for b, c in zip(BUCKETS_S, itertools.accumulate(self.counts), strict=True)]
        out.append(f'{name}_bucket{{tier="{tier}",le="+Inf"}} {self.num}')
        out.append(f'{name}_sum{{tier="{tier}"}} {self.total}')
        out.append(f'{name}_count{{tier="{tier}"}} {self.num}')
        return out


class ServeMetrics:
    """The counters and histograms of one server (its gauges are read from the gateway when
    the page is rendered)."""

    def __init__(self, tiers: tuple[str, ...]) -> None:
        self.tiers = tiers
        self.num_admitted: Counter[str] = Counter()
        self.num_refused: Counter[tuple[str, str]] = Counter()
        self.ttft = {t: _Histogram() for t in tiers}
        self.e2e = {t: _Histogram() for t in tiers}

    def admitted(self, tier: str) -> None:
        self.num_admitted[tier] += 1

    def refused(self, tier: str, reason: str) -> None:
        self.num_refused[(tier, reason)] += 1

    def observe(self, tier: str, ttft_s: float, e2e_s: float) -> None:
        if math.isfinite(ttft_s):
            self.ttft[tier].observe(ttft_s)
        if math.isfinite(e2e_s):
            self.e2e[tier].observe(e2e_s)

    def render(self, reserved_tokens: int, capacity_tokens: int, num_leases: int,
               waiting: Mapping[str, int], num_in_flight: int) -> str:
        lines = ["# TYPE kvbudget_admitted_total counter"]
        lines += [f'kvbudget_admitted_total{{tier="{t}"}} {self.num_admitted[t]}'
                  for t in self.tiers]
        lines.append("# TYPE kvbudget_refused_total counter")
        lines += [f'kvbudget_refused_total{{tier="{t}",reason="{r}"}} {n}'
                  for (t, r), n in sorted(self.num_refused.items())]
        lines.append("# TYPE kvbudget_queue_depth gauge")
        lines += [f'kvbudget_queue_depth{{tier="{t}"}} {waiting.get(t, 0)}' for t in self.tiers]
        lines += ["# TYPE kvbudget_leases gauge", f"kvbudget_leases {num_leases}",
                  "# TYPE kvbudget_reserved_tokens gauge",
                  f"kvbudget_reserved_tokens {reserved_tokens}",
                  "# TYPE kvbudget_capacity_tokens gauge",
                  f"kvbudget_capacity_tokens {capacity_tokens}",
                  "# TYPE kvbudget_requests_in_flight gauge",
                  f"kvbudget_requests_in_flight {num_in_flight}"]
        for name, hists in (("kvbudget_ttft_seconds", self.ttft),
                            ("kvbudget_e2e_seconds", self.e2e)):
            lines.append(f"# TYPE {name} histogram")
            for tier in self.tiers:
                lines += hists[tier].lines(name, tier)
        return "\n".join(lines) + "\n"
