"""The policy plug-in interface: pure decisions over a read-only view of the gateway.

A policy never reads a clock, does I/O or touches SimPy or asyncio. Everything it may know comes
through :class:`GatewayView`: the ledger, the waiting queues, the admitted requests, the time the
executor passes in, and (optionally) an :class:`EngineProbe` with what the engine reports. The
same policy object therefore drives the simulator and the live gateway.

To write a policy, subclass :class:`BasePolicy`, override what differs, and add the class to
``kvbudget.policies.registry.POLICIES`` (one line).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol, runtime_checkable

from kvbudget.policies.budget import Lease
from kvbudget.policies.errors import Overloaded
from kvbudget.policies.request import Request
from kvbudget.policies.tiers import TierConfig


@dataclass(frozen=True, slots=True)
class Admitted:
    """An admitted request as the gateway tracks it."""

    request: Request
    lease: Lease
    admitted_s: float
    num_revocations: int = 0


class EngineProbe(Protocol):
    """What the executor can tell a policy about the engine (simulated or live)."""

    def num_output_tokens(self, request_id: int) -> int:
        """Output tokens generated so far for an admitted request (0 if unknown)."""
        ...

    @property
    def num_preemptions_total(self) -> int: ...


class BudgetView(Protocol):
    @property
    def capacity_tokens(self) -> int: ...
    @property
    def reserved_tokens(self) -> int: ...
    @property
    def used_tokens(self) -> int: ...
    def available(self, tier: str) -> int: ...


@runtime_checkable
class GatewayView(Protocol):
    """Read-only state a policy decides on."""

    @property
    def now_s(self) -> float: ...
    @property
    def tiers(self) -> Mapping[str, TierConfig]: ...
    @property
    def budget(self) -> BudgetView: ...
    @property
    def admitted(self) -> Mapping[int, Admitted]: ...
    @property
    def engine(self) -> EngineProbe | None: ...
    def waiting(self, tier: str) -> Iterator[Request]: ...
    def num_waiting(self, tier: str | None = None) -> int: ...
    def waiting_prompt_tokens(self, tier: str | None = None) -> int: ...


@dataclass(frozen=True, slots=True)
class Wait:
    """Keep the request at the head of its queue; admit nothing of lower priority meanwhile."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Reject the request now with ``Overloaded(tier.retryable_on_overload, reason)``."""

    reason: Literal["no_capacity"] = "no_capacity"


@dataclass(frozen=True, slots=True)
class RevokeLeases:
    """Revoke these admitted requests' leases (the executor aborts their engine work and the
    gateway re-queues them), then try the request again."""

    request_ids: tuple[int, ...]


NoCapacityDecision = Wait | Refuse | RevokeLeases
WAIT = Wait()
REFUSE = Refuse()


@dataclass(frozen=True, slots=True)
class Completion:
    """Told to the policy when an admitted request finishes."""

    request: Request
    output_tokens: int
    reserved_tokens: int
    admitted_s: float = math.nan


class Policy(Protocol):
    """What the gateway asks of an admission policy."""

    @property
    def name(self) -> str: ...

    def precheck(self, request: Request, view: GatewayView) -> Overloaded | None: ...
    def reservation(self, request: Request, view: GatewayView) -> int: ...
    def may_admit(self, tier: str, view: GatewayView) -> bool: ...
    def on_no_capacity(self, request: Request, view: GatewayView) -> NoCapacityDecision: ...
    def observe_completion(self, completion: Completion, view: GatewayView) -> None: ...
    def observe_preemption(self, request_id: int, view: GatewayView) -> None: ...
    def retry_after_s(self, request: Request, view: GatewayView) -> float | None: ...
    def describe(self) -> dict[str, object]: ...


class BasePolicy:
    """Defaults every policy shares: worst-case reservation, FIFO admission by tier priority,
    interactive-style waiting (until the deadline) for tiers that do not retry, refusal for tiers
    marked ``retryable_on_overload``."""

    name: ClassVar[str] = "base"

    def precheck(self, request: Request, view: GatewayView) -> Overloaded | None:
        return None

    def reservation(self, request: Request, view: GatewayView) -> int:
        return request.prompt_tokens + request.max_output_tokens

    def may_admit(self, tier: str, view: GatewayView) -> bool:
        return True

    def on_no_capacity(self, request: Request, view: GatewayView) -> NoCapacityDecision:
        return WAIT

    def observe_completion(self, completion: Completion, view: GatewayView) -> None:
        return None

    def observe_preemption(self, request_id: int, view: GatewayView) -> None:
        return None

    def retry_after_s(self, request: Request, view: GatewayView) -> float | None:
        """When a request refused retryably now should come back (seconds; the Retry-After
        of the answer), or ``None`` to say nothing."""
        return None

    def describe(self) -> dict[str, object]:
        """The policy's name and parameters, for summaries and scenario files."""
        params = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"name": self.name, **params}


def lease_ends_retry_after(
    request: Request, tokens: int, view: GatewayView, s_per_token: float | None
) -> float | None:
    """The earliest time (seconds from now) at which ``tokens`` could be free for ``request``'s
    tier, from the leases the gateway holds and their expected ends: a lease ends when its
    request has generated the rest of its declared ``max_output_tokens`` at ``s_per_token``
    seconds per token (the tier's ``tpot_s`` when ``None``). ``None`` when even every lease's
    end would not free enough (the request then waits on arrivals of capacity, not on leases).
    """
    need = tokens - view.budget.available(request.tier)
    if need <= 0:
        return None
    engine = view.engine
    ends: list[tuple[float, int]] = []
    for rid, entry in view.admitted.items():
        done = engine.num_output_tokens(rid) if engine is not None else 0
        remaining = max(entry.request.max_output_tokens - done, 0)
        per_token = s_per_token if s_per_token is not None else view.tiers[entry.request.tier].tpot_s
        freed = entry.lease.from_shared
        if entry.lease.tier == request.tier:
            freed += entry.lease.from_guaranteed
        ends.append((remaining * per_token, freed))
    ends.sort()
    for end_s, freed in ends:
        need -= freed
        if need <= 0:
            return end_s
    return None
