"""The token-budget ledger: per-tier guaranteed pools, one shared pool, and leases.

A lease is a reservation of KV tokens held by one admitted request. The ledger has no clock: every
call that depends on time takes ``now_s`` from the caller (the simulator's clock or the event
loop's), so the same ledger serves the SimPy model and the live gateway.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Lease:
    """Tokens reserved for one request. Settle the actual use, then release (idempotently)."""

    lease_id: int
    tier: str
    holder: int
    reserved_tokens: int
    from_guaranteed: int
    from_shared: int
    expires_at: float | None
    used_tokens: int = 0
    released: bool = False
    _budget: TokenBudget | None = field(default=None, repr=False)

    def settle(self, actual_tokens: int) -> None:
        """Record the tokens the request actually occupies (may exceed the reservation under
        overcommit). Calling it again replaces the earlier figure; after release it does nothing."""
        if actual_tokens < 0:
            raise ValueError(f"actual_tokens must be >= 0, got {actual_tokens!r}")
        if self.released or self._budget is None:
            return
        self._budget._used += actual_tokens - self.used_tokens
        self.used_tokens = actual_tokens

    def release(self) -> bool:
        """Return the reservation to its pools. A second call changes nothing and returns False."""
        if self.released or self._budget is None:
            return False
        self._budget._return(self)
        return True

    def expired(self, now_s: float) -> bool:
        return self.expires_at is not None and now_s >= self.expires_at


class TokenBudget:
    """Capacity in tokens, split into per-tier guaranteed pools and a shared pool.

    A reservation draws on its tier's guaranteed pool first, then on the shared pool. Guaranteed
    tokens are never lent to other tiers, so a tier's guarantee is available to it at any time.
    """

    def __init__(self, capacity_tokens: int, guaranteed: Mapping[str, int] | None = None) -> None:
        if capacity_tokens < 0:
            raise ValueError(f"capacity_tokens must be >= 0, got {capacity_tokens!r}")
        guaranteed = dict(guaranteed or {})
        for tier, tokens in guaranteed.items():
            if tokens < 0:
                raise ValueError(
                    f"guaranteed tokens for tier {tier!r} must be >= 0, got {tokens!r}"
                )
        total_guaranteed = sum(guaranteed.values())
        if total_guaranteed > capacity_tokens:
            raise ValueError(
                f"guaranteed pools ({total_guaranteed} tokens) exceed capacity_tokens "
                f"({capacity_tokens})"
            )
        self.capacity_tokens = capacity_tokens
        self.guaranteed: dict[str, int] = guaranteed
        self.shared_capacity = capacity_tokens - total_guaranteed
        self._guaranteed_free: dict[str, int] = dict(guaranteed)
        self._shared_free = self.shared_capacity
        self._reserved = 0
        self._used = 0
        self._next_id = 0
        self._live: dict[int, Lease] = {}
        self._expiry: list[tuple[float, int]] = []

    # --- read-only view -------------------------------------------------------------------
    @property
    def reserved_tokens(self) -> int:
        """Tokens held by live leases."""
        return self._reserved

    @property
    def used_tokens(self) -> int:
        """Tokens the live leases reported as actually used (see :meth:`Lease.settle`)."""
        return self._used

    @property
    def num_leases(self) -> int:
        return len(self._live)

    def available(self, tier: str) -> int:
        """Tokens a reservation for ``tier`` could take now (a shared pool held beyond a
        capacity made smaller by :meth:`resize` gives none)."""
        return self._guaranteed_free.get(tier, 0) + max(self._shared_free, 0)

    def leases(self) -> Iterator[Lease]:
        return iter(self._live.values())

    def next_expiry_s(self) -> float | None:
        expiry = self._expiry
        if not expiry:
            return None
        while expiry and expiry[0][1] not in self._live:
            heapq.heappop(expiry)  # the lease was released
        return expiry[0][0] if expiry else None

    # --- changes --------------------------------------------------------------------------
    def try_reserve(
        self, tier: str, tokens: int, *, holder: int = -1, expires_at: float | None = None
    ) -> Lease | None:
        """Reserve ``tokens`` for ``tier``; ``None`` when they do not fit (nothing changes then)."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens!r}")
        if expires_at is not None and math.isnan(expires_at):
            raise ValueError("expires_at must be a time or None, got nan")
        g_free = self._guaranteed_free.get(tier, 0)
        shared = self._shared_free
        if tokens > g_free + (shared if shared > 0 else 0):  # < 0 only after a resize
            return None
        from_g = min(tokens, g_free)
        from_s = tokens - from_g
        if tier in self._guaranteed_free:
            self._guaranteed_free[tier] = g_free - from_g
        self._shared_free -= from_s
        self._reserved += tokens
        lease = Lease(self._next_id, tier, holder, tokens, from_g, from_s, expires_at, _budget=self)
        self._next_id += 1
        self._live[lease.lease_id] = lease
        if expires_at is not None:
            heapq.heappush(self._expiry, (expires_at, lease.lease_id))
        return lease

    def resize(self, capacity_tokens: int) -> None:
        """Change the capacity (a live engine's KV cache, read again); the shared pool takes
        the change. Live leases stay: while they hold more than the new shared pool, its free
        count is negative and only guaranteed pools admit until enough is released."""
        total_guaranteed = sum(self.guaranteed.values())
        if capacity_tokens < total_guaranteed:
            raise ValueError(
                f"capacity_tokens {capacity_tokens} is below the guaranteed pools "
                f"({total_guaranteed} tokens)"
            )
        delta = capacity_tokens - self.capacity_tokens
        self.capacity_tokens = capacity_tokens
        self.shared_capacity += delta
        self._shared_free += delta

    def expire(self, now_s: float) -> list[Lease]:
        """Release every live lease whose ``expires_at`` has passed; return them."""
        out: list[Lease] = []
        while True:
            nxt = self.next_expiry_s()
            if nxt is None or nxt > now_s:
                return out
            _, lease_id = heapq.heappop(self._expiry)
            lease = self._live[lease_id]
            lease.release()
            out.append(lease)

    def _return(self, lease: Lease) -> None:
        lease.released = True
        del self._live[lease.lease_id]
        if lease.tier in self._guaranteed_free:
            self._guaranteed_free[lease.tier] += lease.from_guaranteed
        self._shared_free += lease.from_shared
        self._reserved -= lease.reserved_tokens
        self._used -= lease.used_tokens
