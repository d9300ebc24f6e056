"""Service tiers: each names its size limit, priority, admission deadline, overload behaviour and SLO."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

# Bounds beyond any real deployment: a larger limit is a typo (or 1e300 meant as "no limit",
# which is None, or the field left out) and is refused naming the field, rather than simulated
# as if there were no limit.
MAX_LIMIT_S = 86_400.0
"""A day: no queue timeout, SLO target or lease of an LLM server is set beyond it."""
MAX_LIMIT_TOKENS = 2**40
"""About 10^12 tokens: more KV than any fleet holds (the engine's own bound on KV tokens)."""
MAX_LIMIT_COUNT = 2**31 - 1
"""Requests in flight or queued: beyond any server's queue (the engine's bound on counts)."""


def check_limit(field: str, value: object, bound: float, unit: str) -> None:
    """``ValueError`` naming ``field`` when ``value`` exceeds ``bound`` (finite values only:
    the caller checks the sign and finiteness)."""
    if isinstance(value, int | float) and value > bound:
        raise ValueError(
            f"{field} must be <= {bound:,.0f}{' ' + unit if unit else ''} (beyond any real "
            f"deployment), got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class TierConfig:
    """One service tier.

    ``priority`` follows vLLM's convention: a *lower* value is served first.
    ``queue_timeout_s`` is the caller's deadline to be admitted (time waiting at the gateway);
    ``None`` waits forever. ``guaranteed_tokens`` is this tier's private pool in the
    :class:`~kvbudget.policies.budget.TokenBudget`; the rest of the capacity is shared.
    """

    name: str
    max_sequence_tokens: int = 32_768
    priority: int = 0
    queue_timeout_s: float | None = 10.0
    retryable_on_overload: bool = False
    ttft_s: float = 2.0
    tpot_s: float = 0.2
    guaranteed_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tier name must be alphanumeric (with - or _), got {self.name!r}")
        if self.max_sequence_tokens < 2:
            raise ValueError(
                f"tier {self.name!r}: max_sequence_tokens must be >= 2, "
                f"got {self.max_sequence_tokens!r}"
            )
        if self.queue_timeout_s is not None and not (
            math.isfinite(self.queue_timeout_s) and self.queue_timeout_s >= 0
        ):
            raise ValueError(
                f"tier {self.name!r}: queue_timeout_s must be >= 0 or None, "
                f"got {self.queue_timeout_s!r}"
            )
        for field_name in ("ttft_s", "tpot_s"):
            value = getattr(self, field_name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"tier {self.name!r}: {field_name} must be > 0, got {value!r}")
        if self.guaranteed_tokens < 0:
            raise ValueError(
                f"tier {self.name!r}: guaranteed_tokens must be >= 0, got {self.guaranteed_tokens!r}"
            )
        where = f"tier {self.name!r}: "
        check_limit(where + "max_sequence_tokens", self.max_sequence_tokens, MAX_LIMIT_TOKENS,
                    "tokens")
        check_limit(where + "guaranteed_tokens", self.guaranteed_tokens, MAX_LIMIT_TOKENS,
                    "tokens")
        for field_name in ("queue_timeout_s", "ttft_s", "tpot_s"):
            check_limit(where + field_name, getattr(self, field_name), MAX_LIMIT_S, "s")


INTERACTIVE = TierConfig(
    name="interactive",
    max_sequence_tokens=32_768,
    priority=0,
    queue_timeout_s=10.0,
    retryable_on_overload=False,
    ttft_s=2.0,
    tpot_s=0.1,
)
BATCH = TierConfig(
    name="batch",
    max_sequence_tokens=32_768,
    priority=1,
    queue_timeout_s=600.0,
    retryable_on_overload=True,
    ttft_s=60.0,
    tpot_s=0.5,
)
DEFAULT_TIERS: tuple[TierConfig, ...] = (INTERACTIVE, BATCH)


def tier_map(tiers: Iterable[TierConfig]) -> dict[str, TierConfig]:
    """Index tiers by name, refusing duplicates."""
    out: dict[str, TierConfig] = {}
    for tier in tiers:
        if tier.name in out:
            raise ValueError(f"duplicate tier name {tier.name!r}")
        out[tier.name] = tier
    if not out:
        raise ValueError("at least one tier is required")
    return out


def by_priority(tiers: Mapping[str, TierConfig]) -> list[str]:
    """Tier names, highest priority (lowest value) first, ties by name."""
    return sorted(tiers, key=lambda name: (tiers[name].priority, name))
