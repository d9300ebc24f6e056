"""What a client does with each answer: retry, back off, give up (one model per tier).

Both executors use the same :class:`ClientModel`: the simulator's arrival process schedules a
retry as a new attempt of the same request, the live replay sleeps and sends it again. A client
model has no clock and no generator of its own: the executor passes the time and the run's
seeded ``numpy.random.Generator`` (a jitter draw is taken only when a delay is jittered).

The answers a client can get (:data:`ANSWERS`):

* ``overloaded_retryable``: the gateway's ``Overloaded(retryable=True)`` (HTTP 429), or a
  server's 429;
* ``overloaded``: ``Overloaded(retryable=False)`` (HTTP 503);
* ``too_large``: ``RequestTooLarge`` (HTTP 400/413), or a server's ``max_model_len`` refusal;
* ``backend_error``: the server failed the request (5xx, a stream cut short);
* ``refused``: a server's refusal of the request as sent, a 4xx other than 400, 408, 409, 413
  and 429 (a 404 for a model it does not serve, a 422): the same request gets the same answer,
  so no preset retries it (the OpenAI SDK retries only 408, 409, 429 and 5xx);
* ``timeout``: the client's own ``timeout_s`` ran out (it disconnects; the server aborts the
  request and frees its KV blocks).

Presets (:data:`CLIENT_PRESETS`), named after what users run:

* ``no-retry``: one attempt, no timeout: kvbudget's behaviour before client models (the
  default; runs without a ``[clients]`` table are unchanged).
* ``openai-sdk``: the defaults of the official OpenAI Python SDK (``openai/openai-python``,
  ``src/openai/_constants.py`` and ``_base_client.py`` at commit ``e43b422412a9``):
  ``DEFAULT_MAX_RETRIES = 2`` (three attempts), ``INITIAL_RETRY_DELAY = 0.5`` s doubled per
  retry up to ``MAX_RETRY_DELAY = 8.0`` s, times a jitter factor ``1 - 0.25 * random()``
  (``_calculate_retry_timeout``); a ``Retry-After`` (or ``retry-after-ms``) of more than 0 and
  at most ``MAX_RETRY_AFTER_DELAY = 120`` s is slept as it stands, one beyond it is not retried
  (``_should_retry``); 408, 409, 429, every 5xx, connection errors and timeouts are retried;
  ``DEFAULT_TIMEOUT`` is 600 s.
* ``batch-pipeline``: retries what the gateway calls retryable, backend errors and its own
  timeouts (300 s per attempt, as benchmark clients use) until a deadline of one hour from the
  first attempt, with exponential backoff from 1 s capped at 60 s and full jitter (AWS
  Architecture Blog, "Exponential Backoff And Jitter", 2015), honouring ``Retry-After``.
* ``impatient-user``: abandons after 30 s, never retries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Protocol

from kvbudget.policies.tiers import MAX_LIMIT_S, check_limit

MAX_ATTEMPTS = 10_000
"""No client retries a request more often (the SDKs' defaults are 2 or 3 retries)."""
MAX_MULTIPLIER = 100.0
"""No backoff grows faster per attempt (the SDKs double it)."""

Answer = Literal["overloaded_retryable", "overloaded", "too_large", "backend_error", "timeout",
                 "refused"]
ANSWERS: tuple[Answer, ...] = (
    "overloaded_retryable",
    "overloaded",
    "too_large",
    "backend_error",
    "timeout",
    "refused",
)
Backoff = Literal["constant", "exponential"]
Jitter = Literal["none", "full", "equal", "proportional"]
CLIENT_SEED_TAG = 0x636C69
"""Mixed into the run's seed for the clients' generator (``SeedSequence([seed, tag])``): the
simulator and the live replay draw jitter from the same stream."""
_BACKOFFS: tuple[str, ...] = ("constant", "exponential")
_JITTERS: tuple[str, ...] = ("none", "full", "equal", "proportional")


class UniformSource(Protocol):
    """What a client model draws jitter from (a ``numpy.random.Generator``)."""

    def random(self) -> float: ...


@dataclass(frozen=True, slots=True)
class ClientModel:
    """One tier's client.

    ``timeout_s``: the client's own limit on one attempt, from sending it to its last token
    (``None``: none); when it runs out the client disconnects and the answer is ``timeout``.
    ``max_attempts``: attempts in all, the first included (``None``: no limit but
    ``budget_s``). ``retry_on``: the answers that are retried; any other answer is final.
    ``backoff``: ``constant`` waits ``initial_backoff_s`` before every retry; ``exponential``
    waits ``initial_backoff_s * multiplier ** (r - 1)`` before retry ``r``; either is capped at
    ``max_backoff_s``. ``jitter``: ``none``; ``full`` draws the wait uniformly in ``[0, d]``;
    ``equal`` in ``[d / 2, d]``; ``proportional`` multiplies it by ``1 - jitter_fraction * u``
    (the OpenAI SDK's). ``honor_retry_after``: a Retry-After greater than 0 replaces the backoff
    (unjittered); one above ``max_retry_after_s`` is not retried. ``budget_s``: no attempt
    starts later than this after the first one (a deadline for the whole request).
    """

    name: str = "custom"
    timeout_s: float | None = None
    max_attempts: int | None = 1
    retry_on: tuple[Answer, ...] = ()
    backoff: Backoff = "exponential"
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    multiplier: float = 2.0
    jitter: Jitter = "none"
    jitter_fraction: float = 0.25
    honor_retry_after: bool = True
    max_retry_after_s: float | None = None
    budget_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("timeout_s", "budget_s", "max_retry_after_s", "initial_backoff_s",
                     "max_backoff_s", "multiplier", "jitter_fraction", "max_attempts"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, int | float)):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not isinstance(self.honor_retry_after, bool):
            raise ValueError(f"honor_retry_after must be true or false, got "
                             f"{self.honor_retry_after!r}")
        object.__setattr__(self, "retry_on", tuple(self.retry_on))
        for answer in self.retry_on:
            if answer not in ANSWERS:
                raise ValueError(f"retry_on: unknown answer {answer!r}; known: {list(ANSWERS)}")
        for name in ("timeout_s", "budget_s", "max_retry_after_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0 or None, got {value!r}")
        for name in ("initial_backoff_s", "max_backoff_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1):
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")
        if not 0 <= self.jitter_fraction <= 1:
            raise ValueError(f"jitter_fraction must be in [0, 1], got {self.jitter_fraction!r}")
        if self.max_attempts is not None and not (
            isinstance(self.max_attempts, int) and self.max_attempts >= 1
        ):
            raise ValueError(f"max_attempts must be an integer >= 1 or None, got "
                             f"{self.max_attempts!r}")
        if self.backoff not in _BACKOFFS:
            raise ValueError(f"backoff must be one of {list(_BACKOFFS)}, got {self.backoff!r}")
        if self.jitter not in _JITTERS:
            raise ValueError(f"jitter must be one of {list(_JITTERS)}, got {self.jitter!r}")
        for name in ("timeout_s", "budget_s", "max_retry_after_s", "initial_backoff_s",
                     "max_backoff_s"):
            check_limit(name, getattr(self, name), MAX_LIMIT_S, "s")
        check_limit("max_attempts", self.max_attempts, MAX_ATTEMPTS, "attempts")
        check_limit("multiplier", self.multiplier, MAX_MULTIPLIER, "")
        if self.retry_on and self.max_attempts is None and self.budget_s is None:
            raise ValueError("a client that retries needs max_attempts or budget_s (or both)")
        if self.retry_on and self.max_attempts is None and self.max_backoff_s == 0:
            raise ValueError("a client that retries without waiting needs max_attempts "
                             "(its retries would all fall at one instant)")

    @property
    def retries(self) -> bool:
        """Whether this client ever sends a second attempt."""
        return bool(self.retry_on) and self.max_attempts != 1

    def backoff_s(self, retry: int, rng: UniformSource) -> float:
        """The wait before retry number ``retry`` (1 for the second attempt), jittered."""
        if self.backoff == "constant":
            base = min(self.initial_backoff_s, self.max_backoff_s)
        else:
            exponent = min(retry - 1, 1000)  # as the OpenAI SDK caps pow's argument
            base = min(self.initial_backoff_s * self.multiplier**exponent, self.max_backoff_s)
        if self.jitter == "none" or base == 0:
            return base
        u = float(rng.random())
        if self.jitter == "full":
            return base * u
        if self.jitter == "equal":
            return base / 2 + base / 2 * u
        return base * (1 - self.jitter_fraction * u)

    def next_attempt_s(
        self,
        answer: Answer,
        *,
        attempt: int,
        now_s: float,
        first_s: float,
        retry_after_s: float | None,
        rng: UniformSource,
    ) -> float | None:
        """When the client sends its next attempt after ``answer`` to attempt number
        ``attempt`` (1-based) at ``now_s``; ``None`` when it gives up. ``first_s`` is when the
        first attempt was sent (for ``budget_s``)."""
        if answer not in self.retry_on:
            return None
        if self.max_attempts is not None and attempt >= self.max_attempts:
            return None
        delay: float | None = None
        if self.honor_retry_after and retry_after_s is not None and retry_after_s > 0:
            if self.max_retry_after_s is not None and retry_after_s > self.max_retry_after_s:
                return None
            delay = retry_after_s
        if delay is None:
            delay = self.backoff_s(attempt, rng)
        at = now_s + delay
        if self.budget_s is not None and at > first_s + self.budget_s:
            return None
        return at

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["retry_on"] = list(self.retry_on)
        return out


NO_RETRY = ClientModel(name="no-retry")
OPENAI_SDK = ClientModel(
    name="openai-sdk",
    timeout_s=600.0,
    max_attempts=3,
    retry_on=("overloaded_retryable", "overloaded", "backend_error", "timeout"),
    backoff="exponential",
    initial_backoff_s=0.5,
    max_backoff_s=8.0,
    jitter="proportional",
    jitter_fraction=0.25,
    honor_retry_after=True,
    max_retry_after_s=120.0,
)
BATCH_PIPELINE = ClientModel(
    name="batch-pipeline",
    timeout_s=300.0,
    max_attempts=None,
    retry_on=("overloaded_retryable", "backend_error", "timeout"),
    backoff="exponential",
    initial_backoff_s=1.0,
    max_backoff_s=60.0,
    jitter="full",
    honor_retry_after=True,
    budget_s=3600.0,
)
IMPATIENT_USER = ClientModel(name="impatient-user", timeout_s=30.0)
CLIENT_PRESETS: dict[str, ClientModel] = {
    c.name: c for c in (NO_RETRY, OPENAI_SDK, BATCH_PIPELINE, IMPATIENT_USER)
}


def client_model(value: str | Mapping[str, Any], *, where: str = "clients") -> ClientModel:
    """A client model from a preset name or a table (``preset = "..."`` plus any field to
    change); ``ValueError`` naming ``where`` and the field when it is wrong."""
    if isinstance(value, str):
        if value not in CLIENT_PRESETS:
            raise ValueError(f"{where}: unknown client preset {value!r}; known: "
                             f"{', '.join(CLIENT_PRESETS)}")
        return CLIENT_PRESETS[value]
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a preset name or a table, got {value!r}")
    table = dict(value)
    preset = table.pop("preset", "no-retry")
    base = client_model(preset, where=f"{where}.preset") if isinstance(preset, str) else None
    if base is None:
        raise ValueError(f"{where}.preset: expected a preset name, got {preset!r}")
    known = {f.name for f in fields(ClientModel)}
    for key in table:
        if key not in known:
            raise ValueError(f"{where}.{key}: unknown field; known: {sorted(known - {'name'})}")
    if "retry_on" in table and isinstance(table["retry_on"], list):
        table["retry_on"] = tuple(table["retry_on"])
    table.setdefault("name", base.name if not table else f"{base.name}*")
    try:
        return replace(base, **table)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_clients(text: str) -> dict[str, str]:
    """``batch=batch-pipeline,interactive=impatient-user`` -> ``{tier: preset}`` (the
    ``--clients`` flag); ``ValueError`` naming the bad item."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        tier, sep, preset = (s.strip() for s in item.partition("="))
        if not sep or not tier or not preset:
            raise ValueError(f"--clients: expected tier=preset, got {item!r}")
        if preset not in CLIENT_PRESETS:
            raise ValueError(f"--clients {item}: unknown client preset {preset!r}; known: "
                             f"{', '.join(CLIENT_PRESETS)}")
        if tier in out:
            raise ValueError(f"--clients: tier {tier!r} named twice")
        out[tier] = preset
    if not out:
        raise ValueError("--clients: give at least one tier=preset")
    return out


def client_models(
    table: Mapping[str, str | Mapping[str, Any]], tiers: Mapping[str, object] | None = None
) -> tuple[tuple[str, ClientModel], ...]:
    """The ``[clients]`` table as sorted ``(tier, model)`` pairs; names checked against
    ``tiers`` when given."""
    out: list[tuple[str, ClientModel]] = []
    for tier, value in table.items():
        if tiers is not None and tier not in tiers:
            raise ValueError(f"clients.{tier}: no such tier; tiers: {sorted(tiers)}")
        out.append((tier, client_model(value, where=f"clients.{tier}")))
    return tuple(sorted(out, key=lambda p: p[0]))
