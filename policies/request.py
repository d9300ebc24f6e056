"""The request as the gateway sees it: what a caller declares, never what it will turn out to be."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Request:
    """One offered request.

    The true output length is deliberately absent: a gateway only knows what the caller declared
    (``prompt_tokens + max_output_tokens``). The workload keeps the true length apart and only the
    engine model (or the live server) reveals it, at completion.
    """

    request_id: int
    tier: str
    arrival_s: float
    prompt_tokens: int
    max_output_tokens: int
    deadline_s: float | None = None
    prefix_hashes: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.request_id < 0:
            raise ValueError(f"request_id must be >= 0, got {self.request_id!r}")
        if not self.tier:
            raise ValueError(f"tier must be a non-empty name, got {self.tier!r}")
        if not math.isfinite(self.arrival_s) or self.arrival_s < 0:
            raise ValueError(f"arrival_s must be finite and >= 0, got {self.arrival_s!r}")
        if self.prompt_tokens < 1:
            raise ValueError(f"prompt_tokens must be >= 1, got {self.prompt_tokens!r}")
        if self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens!r}")
        if self.deadline_s is not None and not self.deadline_s >= self.arrival_s:
            raise ValueError(
                f"deadline_s must be >= arrival_s ({self.arrival_s!r}), got {self.deadline_s!r}"
            )

    @property
    def max_sequence_tokens(self) -> int:
        """The worst-case KV footprint the caller declared."""
        return self.prompt_tokens + self.max_output_tokens
