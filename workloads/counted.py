"""A count and its noun, singular for one: ``counted(1, "request")`` is ``"1 request"``,
``counted(1617, "request")`` ``"1,617 requests"``. Every line that says how many of something
(requests, prompts, rows, replicas) goes through it: "refused 1 requests" and "1 prompts"
were written case by case before. It lives in the lowest package that speaks of requests, so
every package that says a count can import it."""

from __future__ import annotations

__all__ = ["counted"]


def counted(num: int | float, noun: str, plural: str | None = None) -> str:
    """``num`` with thousands separators and ``noun``, plural (``plural``, else ``noun + "s"``)
    unless ``num`` is one; a float ``num`` must be whole (a count)."""
    if num != int(num):
        raise ValueError(f"counted: {num!r} {noun} is not a whole count")
    num = int(num)
    return f"{num:,} {noun if num == 1 else plural or noun + 's'}"
