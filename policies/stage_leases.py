"""A lease's part on a first stage with KV of its own (a disaggregated deployment's prefill
pool): :class:`StageLeases`, which a :class:`~kvbudget.policies.gateway.Gateway` keeps when its
config has ``first_stage_capacity_tokens``.

A request then runs in two stages, each on its own KV: the first computes its prompt and
samples one token (vLLM's disaggregated prefill runs with ``max_tokens = 1``), then its KV moves
to the second, which holds the prompt and the output. Its lease has a part on each: on the
second, the policy's reservation for the request, as for any deployment; on the first, the
policy's reservation for the request as the first stage runs it (``max_output_tokens = 1``),
held until the executor says the first stage is done with it (its KV has moved:
:meth:`Gateway.first_stage_done <kvbudget.policies.gateway.Gateway.first_stage_done>`), or the
request leaves. A request is admitted only when both parts fit. Clock-free, as the gateway.
"""

from __future__ import annotations

from kvbudget.policies.request import Request

__all__ = ["StageLeases"]

_set = object.__setattr__  # (a frozen dataclass's fields are set so)


class StageLeases:
    """The first stage's budget and each admitted request's part of it: a shared pool of
    ``capacity_tokens`` (no tier's guarantee, no expiry: a part goes when the first stage is
    done with its request or the request leaves), kept as Python numbers (one part taken and
    given back per admission; a ``TokenBudget`` lease costs several times that)."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self._reserved = 0
        self._parts: dict[int, int] = {}  # request_id -> its part's tokens

    @staticmethod
    def first_stage_request(request: Request) -> Request:
        """``request`` as the first stage runs it: one output token (``replace``'s result,
        built directly, as the frozen dataclass's ``__init__`` sets its fields, without its
        checks, which ``request`` passed: it runs for every admission)."""
        first = object.__new__(Request)
        _set(first, "request_id", request.request_id)
        _set(first, "tier", request.tier)
        _set(first, "arrival_s", request.arrival_s)
        _set(first, "prompt_tokens", request.prompt_tokens)
        _set(first, "max_output_tokens", 1)
        _set(first, "deadline_s", request.deadline_s)
        _set(first, "prefix_hashes", request.prefix_hashes)
        return first

    def reserve(self, request: Request, tokens: int) -> bool:
        """Reserve ``tokens`` for ``request``'s first stage; False (nothing changed) when they
        do not fit."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens!r}")
        if tokens > self.capacity_tokens - self._reserved:
            return False
        self._parts[request.request_id] = tokens
        self._reserved += tokens
        return True

    def release(self, request_id: int) -> None:
        """Give back ``request_id``'s part, if it holds one (idempotent)."""
        tokens = self._parts.pop(request_id, None)
        if tokens is not None:
            self._reserved -= tokens

    @property
    def reserved_tokens(self) -> int:
        return self._reserved
