"""Admission failures as types. They are values a gateway returns, and exceptions a caller may raise."""

from __future__ import annotations

from typing import Literal

OverloadReason = Literal[
    "no_capacity",  # no budget now and the tier does not wait
    "deadline",  # waited for budget until the caller's deadline
    "preempted",  # a lease revoked by the gateway and not re-admitted
    "queue_full",  # a front-door queue cap (count or tokens) was reached
    "concurrency",  # a front-door cap on concurrent requests (TGI's max_concurrent_requests)
    "slo",  # predicted to miss its SLO (early rejection)
    "evicted",  # pushed out of a full queue by a higher-priority arrival
    "lease_expired",  # the lease ran past its expiry and was reclaimed
]
OVERLOAD_REASONS: tuple[OverloadReason, ...] = (
    "no_capacity",
    "deadline",
    "preempted",
    "queue_full",
    "concurrency",
    "slo",
    "evicted",
    "lease_expired",
)


class AdmissionError(Exception):
    """Base class of the gateway's refusals."""


class RequestTooLarge(AdmissionError):
    """The declared ``prompt_tokens + max_output_tokens`` exceeds the tier's ``max_sequence_tokens``.

    Raised (or returned) before any tokenization or prefill: it costs the engine nothing.
    """

    def __init__(self, limit: int, requested: int | None = None) -> None:
        self.limit = limit
        self.requested = requested
        detail = f"{requested} tokens requested, " if requested is not None else ""
        super().__init__(f"request too large: {detail}tier limit is {limit} tokens")


class Overloaded(AdmissionError):
    """No capacity for the request. ``retryable`` tells the caller whether to try again (HTTP 429
    with Retry-After) or give up (HTTP 503). ``retry_after_s``: when the policy expects
    capacity for it (seconds from the refusal; ``None``: it does not say), the Retry-After of
    the answer."""

    def __init__(
        self, retryable: bool, reason: OverloadReason, retry_after_s: float | None = None
    ) -> None:
        if reason not in OVERLOAD_REASONS:
            raise ValueError(f"unknown overload reason {reason!r}; known: {OVERLOAD_REASONS}")
        if retry_after_s is not None and not retry_after_s >= 0:
            raise ValueError(f"retry_after_s must be >= 0 or None, got {retry_after_s!r}")
        self.retryable = retryable
        self.reason: OverloadReason = reason
        self.retry_after_s = retry_after_s
        super().__init__(f"overloaded ({reason}), retryable={retryable}")
