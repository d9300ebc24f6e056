"""The seed's four policies: the baseline and the three classic reservation rules.

* ``unlimited``: no gateway limit; the engine queues and preempts on its own (how most
  deployments run today: vLLM's OpenAI server admits everything into its ``waiting`` queue).
* ``conservative``: worst-case reservation ``prompt_tokens + max_output_tokens`` (what TGI's
  block allocator and TensorRT-LLM's ``GUARANTEED_NO_EVICT`` do inside the engine, done at the
  gateway instead). Never lets the engine preempt when the budget equals the KV capacity.
* ``overcommit``: ``prompt_tokens + ceil(overcommit_ratio * max_output_tokens)``.
* ``preemptive``: worst case for interactive, overcommit for batch, and batch leases revoked
  (newest first) when an interactive request cannot fit (``mode="preempt"``), or batch admission
  paused while interactive work waits (``mode="defer"``).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from kvbudget.policies.base import (
    REFUSE,
    WAIT,
    BasePolicy,
    Completion,
    GatewayView,
    NoCapacityDecision,
    RevokeLeases,
    lease_ends_retry_after,
)
from kvbudget.policies.request import Request


def _check_ratio(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0 < value <= 1):
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return float(value)


class Unlimited(BasePolicy):
    """No gateway limit: a zero-token lease for every request that is not too large."""

    name: ClassVar[str] = "unlimited"

    def reservation(self, request: Request, view: GatewayView) -> int:
        return 0


class Conservative(BasePolicy):
    """Reserve the worst case; FCFS per tier by priority.

    ``batch_on_overload``: ``"wait"`` queues retryable tiers like interactive ones (until their
    ``queue_timeout_s``); ``"reject"`` answers them at once with ``Overloaded(retryable=True)``.
    Tiers that are not retryable always wait until their deadline.

    ``retry_after``: ``"none"`` says nothing in a retryable refusal; ``"lease_ends"`` answers
    with the earliest time a lease of the needed size could be free, from the leases held and
    their expected ends (:func:`~kvbudget.policies.base.lease_ends_retry_after`, at the seconds
    per output token learned from completions).
    """

    name: ClassVar[str] = "conservative"

    def __init__(
        self,
        batch_on_overload: Literal["wait", "reject"] = "wait",
        retry_after: Literal["none", "lease_ends"] = "none",
    ) -> None:
        if batch_on_overload not in ("wait", "reject"):
            raise ValueError(
                f"batch_on_overload must be 'wait' or 'reject', got {batch_on_overload!r}"
            )
        if retry_after not in ("none", "lease_ends"):
            raise ValueError(f"retry_after must be 'none' or 'lease_ends', got {retry_after!r}")
        self.batch_on_overload = batch_on_overload
        self.retry_after = retry_after
        self._s_per_token: float | None = None

    def retry_after_s(self, request: Request, view: GatewayView) -> float | None:
        if self.retry_after == "none":
            return None
        return lease_ends_retry_after(
            request, self.reservation(request, view), view, self._s_per_token
        )

    def observe_completion(self, completion: Completion, view: GatewayView) -> None:
        if self.retry_after == "none" or not math.isfinite(completion.admitted_s):
            return
        sample = (view.now_s - completion.admitted_s) / max(completion.output_tokens, 1)
        old = self._s_per_token
        self._s_per_token = sample if old is None else 0.9 * old + 0.1 * sample

    def describe(self) -> dict[str, object]:
        out = super().describe()
        if out.get("retry_after") == "none":  # the default, left out of summaries
            del out["retry_after"]
        return out

    def on_no_capacity(self, request: Request, view: GatewayView) -> NoCapacityDecision:
        tier = view.tiers[request.tier]
        if tier.retryable_on_overload and self.batch_on_overload == "reject":
            return REFUSE
        return WAIT


class Overcommit(Conservative):
    """Reserve ``prompt_tokens + ceil(overcommit_ratio * max_output_tokens)``: more requests fit,
    and the engine preempts when their outputs turn out long."""

    name: ClassVar[str] = "overcommit"

    def __init__(
        self,
        overcommit_ratio: float = 0.5,
        batch_on_overload: Literal["wait", "reject"] = "wait",
        retry_after: Literal["none", "lease_ends"] = "none",
    ) -> None:
        super().__init__(batch_on_overload, retry_after)
        self.overcommit_ratio = _check_ratio("overcommit_ratio", overcommit_ratio)

    def reservation(self, request: Request, view: GatewayView) -> int:
        return request.prompt_tokens + math.ceil(self.overcommit_ratio * request.max_output_tokens)


class Preemptive(Conservative):
    """Interactive first: worst-case leases for ``protected_tiers``, overcommitted ones for the
    rest; when a protected request cannot fit, revoke unprotected leases newest first
    (``mode="preempt"``: their work is aborted and recomputed later) or stop admitting
    unprotected work while protected work waits (``mode="defer"``)."""

    name: ClassVar[str] = "preemptive"

    def __init__(
        self,
        overcommit_ratio: float = 0.5,
        mode: Literal["preempt", "defer"] = "preempt",
        protected_tiers: tuple[str, ...] = ("interactive",),
        batch_on_overload: Literal["wait", "reject"] = "wait",
        retry_after: Literal["none", "lease_ends"] = "none",
    ) -> None:
        super().__init__(batch_on_overload, retry_after)
        if mode not in ("preempt", "defer"):
            raise ValueError(f"mode must be 'preempt' or 'defer', got {mode!r}")
        self.overcommit_ratio = _check_ratio("overcommit_ratio", overcommit_ratio)
        self.mode = mode
        self.protected_tiers = tuple(protected_tiers)

    def reservation(self, request: Request, view: GatewayView) -> int:
        if request.tier in self.protected_tiers:
            return request.prompt_tokens + request.max_output_tokens
        return request.prompt_tokens + math.ceil(self.overcommit_ratio * request.max_output_tokens)

    def may_admit(self, tier: str, view: GatewayView) -> bool:
        if tier in self.protected_tiers:
            return True
        return not any(view.num_waiting(t) for t in self.protected_tiers)

    def on_no_capacity(self, request: Request, view: GatewayView) -> NoCapacityDecision:
        if request.tier not in self.protected_tiers:
            return super().on_no_capacity(request, view)
        if self.mode == "defer":
            return WAIT
        need = self.reservation(request, view) - view.budget.available(request.tier)
        victims = sorted(
            (a for a in view.admitted.values() if a.request.tier not in self.protected_tiers),
            key=lambda a: (a.admitted_s, a.request.request_id),
            reverse=True,
        )
        chosen: list[int] = []
        for entry in victims:
            if need <= 0:
                break
            chosen.append(entry.request.request_id)
            need -= entry.lease.from_shared
        if need > 0 or not chosen:
            return WAIT  # revoking every batch lease would not make room: do not waste work
        return RevokeLeases(tuple(chosen))
