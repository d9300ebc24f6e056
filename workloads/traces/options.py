"""How a trace file is read and transformed into a workload."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kvbudget.workloads.errors import SpecError
from kvbudget.workloads.max_output import FixedCap, MaxOutputRule

if TYPE_CHECKING:
    from kvbudget.workloads.arrivals import ArrivalProcess

FORMATS: tuple[str, ...] = ("azure", "burstgpt", "mooncake", "lengths", "splitwise", "servegen",
                            "generic")
"""Names accepted by ``TraceOptions.format`` (``--format``)."""

CANONICAL_COLUMNS: tuple[str, ...] = (
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "max_output_tokens",
    "tier",
    "deadline_s",
    "id",
    "hash_ids",
    "timeout_s",
)
"""Columns of the generic format (the keys of ``TraceOptions.columns``)."""

DEFAULT_MAX_OUTPUT_TOKENS = 2048
"""The ``max_tokens`` a client is assumed to send when a trace records only the true output."""

ARRIVAL_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}

MAX_RATE_SCALE = 1e6
"""The largest factor ``rate_scale`` may speed a trace up (or, inverted, slow it down)."""

MAX_SPREAD_S = 3600.0
"""The widest ``spread_s``: an hour, beyond any trace's timestamp quantisation (Kimi's is about
3 s); a wider spread would smear the last timestamp's requests over days."""


def _valid_tier_name(name: object) -> bool:
    return isinstance(name, str) and bool(name) and name.replace("_", "").replace(
        "-", "").isalnum()


DEFAULT_PREFIX_BLOCK_TOKENS = 512
"""Tokens a prefix hash names where neither the options nor the file say (Mooncake's
``hash_ids``: one a 512-token block)."""


@dataclass(frozen=True)
class TraceOptions:
    """Options of :func:`kvbudget.workloads.traces.load_trace` (all optional).

    Reading:
        ``format``: one of :data:`FORMATS`; ``None`` detects it from the header or extension.
        ``columns``: generic format only: canonical column -> the file's column name.
        ``arrival_unit``: generic format only: unit of the arrival (and deadline) column.
        ``prefix_block_tokens``: tokens per prefix hash (default: a kvbudget Parquet trace's
        own, from its metadata; else Mooncake's 512); one that differs from the file's own is
        refused.
        ``clients``, ``servegen_arrivals``: ServeGen only: which chunk ids to load (default all
        in the directory, or the one named), and how inter-arrivals are drawn in each window:
        the fitted family and shape at the measured rate (``"fitted_rate"``, default), the
        fitted distribution as published (``"fitted"``), or a Gamma with the measured rate and
        CV (``"rate_cv"``). See :mod:`kvbudget.workloads.traces._servegen`.

    Transformations, applied in this order after loading and sorting:
        ``spread_s``: requests sharing one timestamp are spaced evenly over ``spread_s`` seconds
        (in file order, never past the next distinct timestamp); for quantised traces such as
        the Kimi conversation trace (about 3 s buckets).
        ``window``: ``(start_s, end_s)`` on the trace clock (seconds from the first request for
        wall-clock formats); keeps ``start_s <= t < end_s`` and shifts the clock so ``start_s``
        becomes 0. ``end_s`` may be ``None`` (open).
        ``rate_scale``: divides every arrival time (2 doubles the rate); deadlines keep their
        distance to the arrival.
        ``sample_fraction`` / ``sample_count``: keep a uniform random subset of the requests.
        Tier assignment: ``tier_shares`` (random by share), else ``tier_column`` (a column of
        the file, e.g. BurstGPT ``"Log Type"`` or ``"Model"``) mapped through ``tier_map``
        (unmapped and empty values get ``default_tier``; without ``tier_map`` the values
        themselves are the tier names), else the generic format's ``tier`` column, else
        ``default_tier`` for every request.
        ``max_output`` (or ``max_output_by_tier``): the declared ``max_output_tokens`` for rows
        whose file has none. Default: :class:`~kvbudget.workloads.max_output.FixedCap` of 2,048 (a client
        that sends ``max_tokens=2048``), never below the recorded true output.
        ``arrival``: an arrival process for length-only tables (default: Poisson at 1 req/s,
        with a warning in the report).

    ``seed`` feeds every random choice (sampling, tier shares, synthetic arrivals, ServeGen
    draws); ``None`` means 0 when loading directly (a scenario passes its own generator).
    """

    format: str | None = None
    window: tuple[float, float | None] | None = None
    rate_scale: float = 1.0
    sample_fraction: float | None = None
    sample_count: int | None = None
    seed: int | None = None
    tier_column: str | None = None
    tier_map: Mapping[str, str] | None = None
    tier_shares: Mapping[str, float] | None = None
    default_tier: str = "interactive"
    max_output: MaxOutputRule = field(default_factory=lambda: FixedCap(DEFAULT_MAX_OUTPUT_TOKENS))
    max_output_by_tier: Mapping[str, MaxOutputRule] | None = None
    spread_s: float | None = None
    arrival: ArrivalProcess | None = None
    columns: Mapping[str, str] | None = None
    arrival_unit: Literal["s", "ms", "us", "ns"] = "s"
    prefix_block_tokens: int | None = None
    """Tokens per prefix hash; ``None``: what a kvbudget Parquet trace's metadata says, else
    :data:`DEFAULT_PREFIX_BLOCK_TOKENS` (Mooncake's)."""
    clients: tuple[int, ...] | None = None
    servegen_arrivals: Literal["fitted_rate", "fitted", "rate_cv"] = "fitted_rate"

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in FORMATS:
            raise SpecError("format", f"must be one of {', '.join(FORMATS)}", self.format)
        if self.window is not None:
            if not (isinstance(self.window, tuple | list) and len(self.window) == 2):
                raise SpecError("window", "must be (start_s, end_s)", self.window)
            start, end = self.window
            if not (isinstance(start, int | float) and math.isfinite(start) and start >= 0):
                raise SpecError("window", "start_s must be finite and >= 0", start)
            if end is not None and not (isinstance(end, int | float) and end > start):
                raise SpecError("window", f"end_s must be > start_s={start:g}", end)
            object.__setattr__(self, "window", (float(start), None if end is None
                                                else float(end)))
        if not (isinstance(self.rate_scale, int | float) and math.isfinite(self.rate_scale)
                and self.rate_scale > 0):
            raise SpecError("rate_scale", "must be > 0", self.rate_scale)
        if not 1 / MAX_RATE_SCALE <= self.rate_scale <= MAX_RATE_SCALE:
            raise SpecError("rate_scale", f"must be within [{1 / MAX_RATE_SCALE:g}, "
                            f"{MAX_RATE_SCALE:g}] (a million times faster or slower than "
                            "recorded is beyond any deployment)", self.rate_scale)
        if self.sample_fraction is not None and self.sample_count is not None:
            raise SpecError("sample_fraction", "and sample_count exclude each other", None,
                            show_value=False)
        if self.sample_fraction is not None and not (
            isinstance(self.sample_fraction, int | float) and 0 < self.sample_fraction <= 1
        ):
            raise SpecError("sample_fraction", "must be in (0, 1]", self.sample_fraction)
        if self.sample_count is not None and not (
            isinstance(self.sample_count, int) and self.sample_count >= 1
        ):
            raise SpecError("sample_count", "must be an integer >= 1", self.sample_count)
        if self.seed is not None and not (isinstance(self.seed, int) and self.seed >= 0):
            raise SpecError("seed", "must be an integer >= 0", self.seed)
        if not _valid_tier_name(self.default_tier):
            raise SpecError("default_tier", "must be alphanumeric (with - or _)",
                            self.default_tier)
        if self.tier_map is not None:
            for key, tier in self.tier_map.items():
                if not _valid_tier_name(tier):
                    raise SpecError(f"tier_map[{key!r}]", "must be a tier name (alphanumeric, "
                                    "- or _)", tier)
        if self.tier_shares is not None:
            if not self.tier_shares:
                raise SpecError("tier_shares", "must name at least one tier", {})
            for tier, share in self.tier_shares.items():
                if not _valid_tier_name(tier):
                    raise SpecError("tier_shares", "keys must be tier names", tier)
                if not (isinstance(share, int | float) and math.isfinite(share) and share > 0):
                    raise SpecError(f"tier_shares[{tier!r}]", "must be > 0", share)
            total = float(sum(self.tier_shares.values()))
            if abs(total - 1) > 1e-6:
                raise SpecError("tier_shares", "must sum to 1", round(total, 9))
        if self.spread_s is not None and not (
            isinstance(self.spread_s, int | float) and math.isfinite(self.spread_s)
            and self.spread_s > 0
        ):
            raise SpecError("spread_s", "must be > 0", self.spread_s)
        if self.spread_s is not None and self.spread_s > MAX_SPREAD_S:
            raise SpecError("spread_s", f"must be <= {MAX_SPREAD_S:g} s (an hour: traces "
                            "quantise arrivals to seconds or minutes)", self.spread_s)
        if self.columns is not None:
            for key in self.columns:
                if key not in CANONICAL_COLUMNS:
                    raise SpecError("columns", f"keys must be among {', '.join(CANONICAL_COLUMNS)}",
                                    key)
        if self.arrival_unit not in ARRIVAL_UNITS:
            raise SpecError("arrival_unit", "must be 's', 'ms' or 'us'", self.arrival_unit)
        if self.prefix_block_tokens is not None and not (
                isinstance(self.prefix_block_tokens, int) and self.prefix_block_tokens >= 1):
            raise SpecError("prefix_block_tokens", "must be an integer >= 1",
                            self.prefix_block_tokens)
        if self.clients is not None:
            if not self.clients or not all(isinstance(c, int) and c >= 0 for c in self.clients):
                raise SpecError("clients", "must list chunk ids (integers >= 0)", self.clients)
            object.__setattr__(self, "clients", tuple(self.clients))
        if self.servegen_arrivals not in ("fitted_rate", "fitted", "rate_cv"):
            raise SpecError("servegen_arrivals", "must be 'fitted_rate', 'fitted' or 'rate_cv'",
                            self.servegen_arrivals)

    def rule_for(self, tier: str) -> MaxOutputRule:
        if self.max_output_by_tier is not None and tier in self.max_output_by_tier:
            return self.max_output_by_tier[tier]
        return self.max_output
