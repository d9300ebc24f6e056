"""The mean arrival rate of a run's requests: one function, one meaning, wherever it is said
(and the words that say it beside the count and the span it is over)."""

from __future__ import annotations

__all__ = ["gaps_said", "mean_arrival_rate", "span_said"]


def mean_arrival_rate(num_requests: int, span_s: float) -> float | None:
    """Requests per second of ``num_requests`` arrivals spread over ``span_s`` seconds, first
    arrival to last: ``(n - 1) / span``, the reciprocal of the mean gap between consecutive
    arrivals (``n`` arrivals make ``n - 1`` gaps; ``n / span`` counts one request more than
    the window holds gaps for, 4 requests over 0.9 s read as 4.4 req/s where the gaps say
    3.3). ``None`` below two requests or for a span that is not positive."""
    if num_requests < 2 or not span_s > 0:
        return None
    return (num_requests - 1) / span_s


def span_said(
    num_requests: int, span_s: float, unit_s: float = 1.0, rate_format: str = ".3g"
) -> str:
    """``span_s / unit_s`` to one decimal, or more where one would not give the rate said
    beside it: :func:`mean_arrival_rate` to 3 significant figures is what the gaps and the
    span as printed give (80 arrivals over 9.925 s at 7.96 req/s printed "9.9 s" gave a reader
    79 / 9.9 = 7.98: "9.93 s"; ``rate_format``: how the rate is printed). A span with no rate
    (below two arrivals): one decimal."""
    rate = mean_arrival_rate(num_requests, span_s)
    digits = 1
    while rate is not None and digits < 4:
        shown = round(span_s / unit_s, digits) * unit_s
        if shown > 0 and format((num_requests - 1) / shown, rate_format) == format(
            rate, rate_format
        ):
            break
        digits += 1
    return f"{span_s / unit_s:,.{digits}f}"


def gaps_said(num_requests: int) -> str:
    """``N gaps between arrivals``: what :func:`mean_arrival_rate` is over (``n - 1``), said
    beside a rate and a count of ``n`` requests, which a reader would otherwise divide by."""
    gaps = num_requests - 1
    return f"{gaps:,} gap{'s' * (gaps != 1)} between arrivals"
