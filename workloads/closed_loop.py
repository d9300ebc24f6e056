"""Closed-loop load: a number of users, each waiting for its answer before sending again.

Open-loop traffic (a trace's or a synthetic workload's arrival times) keeps arriving whatever
the server does; a closed loop offers only as much as its users can send, as
``vllm bench serve --max-concurrency N`` and GuideLLM's ``concurrent`` profile benchmark a
server. Both executors take a :class:`ClosedLoop`: the simulator (``SimConfig.closed_loop``)
and the live replay (``ReplayConfig.closed_loop``) send the workload's requests in order, each
user its next one a think time after its last one ended (completed or refused), and record each
request's arrival as the time it was sent. With ``think_time_s = 0`` exactly ``num_users``
requests are in flight while requests remain, and the interactive response-time law holds:
throughput = ``num_users / (mean response time + mean think time)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

MAX_THINK_TIME_S = 86400.0
"""The longest think time a closed loop takes (a day)."""


@dataclass(frozen=True, slots=True)
class Conversations:
    """The turns of multi-turn conversations among a closed loop's requests: ``previous[i]``
    is the row of request ``i``'s turn before it in its conversation (-1: none, a first turn
    or a request of no conversation), ``delay_s[i]`` how long after that turn ended request
    ``i`` may be sent at the earliest (a load tool's think time between turns; 0: at once).
    A load tool sends a conversation's next turn only when the turn before it returned
    (GuideLLM 0.8.1 ``scheduler/worker.py`` ``_get_next_ready_node``, AIPerf), so the users
    of a closed loop with conversations send a later turn no sooner, and a user that is free
    takes a later turn ready to go before a new conversation (GuideLLM's worker prefers a
    node of a conversation in flight to a new one). A turn comes after the one before it in
    the workload's order (``previous[i] < i``) and has at most one next turn.

    ``held``: a user keeps its conversation from the first turn to the last, sending each
    later turn itself its delay after the turn before ended and no other request meanwhile,
    so ``num_users`` caps the conversations open at once, not the requests in flight: AIPerf
    0.13.0's ``--concurrency`` is a session slot taken at a conversation's first turn
    (``credit/issuer.py``) and released at its last (``credit/callback_handler.py``). Not
    held (GuideLLM's): a user is free when its request ends and takes whichever turn is
    ready."""

    previous: tuple[int, ...]
    delay_s: tuple[float, ...]
    held: bool = False

    def __post_init__(self) -> None:
        if len(self.previous) != len(self.delay_s):
            raise ValueError(f"conversations: {len(self.previous)} previous turns but "
                             f"{len(self.delay_s)} delays")
        seen: set[int] = set()
        for i, (p, d) in enumerate(zip(self.previous, self.delay_s, strict=True)):
            if not (-1 <= p < i) or p in seen:
                raise ValueError(f"conversations: request {i}'s previous turn must be an "
                                 f"earlier request that no other request follows, got {p!r}")
            if p >= 0:
                seen.add(p)
            if not (math.isfinite(d) and 0 <= d <= MAX_THINK_TIME_S):
                raise ValueError(f"conversations: request {i}'s delay must be within 0 and "
                                 f"{MAX_THINK_TIME_S:g} s, got {d!r}")

    @property
    def num_later_turns(self) -> int:
        return sum(p >= 0 for p in self.previous)


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """Closed-loop load: ``num_users`` users, each sending its next request ``think_time_s``
    after its last one ended (completed or refused), as ``vllm bench serve --max-concurrency``
    (with no think time) and GuideLLM's ``concurrent`` profile run a benchmark. The workload's
    requests are sent in their order; their own arrival times are not used (a request's
    deadline keeps its distance to the arrival). ``think_distribution``: ``fixed`` or
    ``exponential`` (mean ``think_time_s``, drawn from the run's seed)."""

    num_users: int
    think_time_s: float = 0.0
    think_distribution: Literal["fixed", "exponential"] = "fixed"
    not_before_arrival: bool = False
    """A capped open loop (``vllm bench serve --request-rate R --max-concurrency C``): a
    request is also not sent before its own ``arrival_s``, so the users are slots that the
    open loop's requests wait for."""
    tick_rate_per_s: float | None = None
    """A capped loop paced by ticks, as AIPerf's ``--request-rate R --concurrency C``
    (with ``not_before_arrival``): the workload's arrival times are the schedule's first ticks
    and it goes on at this rate; a request is sent only at a tick, the first one after its
    predecessor's tick that finds a slot free. A tick that finds every slot busy is skipped
    and never caught up, so a request waiting for a slot goes at the next tick after the slot
    frees, not when it frees (AIPerf 0.13.0 ``aiperf/timing/strategies/request_rate.py``,
    ``RequestRateStrategy.execute_phase``; ``aiperf/credit/issuer.py``, ``try_issue_credit``
    returns None without a slot)."""
    tick_pattern: Literal["constant", "poisson"] = "constant"
    """The ticks after the workload's arrivals: ``1 / tick_rate_per_s`` apart, or exponential
    gaps of that mean drawn from the run's seed."""
    send_until_s: float | None = None
    """A time-limited loop (a load tool's ``--benchmark-duration`` / ``max_duration``): no
    request is sent after this time of the run's clock; the requests not sent by then stay
    unsent (the run records them ``expired`` at its end, ``end_of_run``)."""
    conversations: Conversations | None = None
    """The requests' conversations (one entry per workload row): a later turn is sent only
    after the turn before it ended and its delay passed; None: every request in order."""

    def __post_init__(self) -> None:
        if not (isinstance(self.num_users, int) and self.num_users >= 1):
            raise ValueError(f"closed_loop.num_users must be an integer >= 1, got "
                             f"{self.num_users!r}")
        if not (math.isfinite(self.think_time_s) and 0 <= self.think_time_s <= MAX_THINK_TIME_S):
            # beyond a day between two requests a user is no closed loop: a live replay would
            # sleep that long, a simulation span centuries
            raise ValueError(f"closed_loop.think_time_s must be within 0 and {MAX_THINK_TIME_S:g} "
                             f"s, got {self.think_time_s!r}")
        if self.tick_rate_per_s is not None and not (
                self.not_before_arrival and self.think_time_s == 0
                and math.isfinite(self.tick_rate_per_s) and self.tick_rate_per_s > 0):
            raise ValueError("closed_loop.tick_rate_per_s must be a finite rate > 0 of a loop "
                             "with not_before_arrival and no think time, got "
                             f"{self.tick_rate_per_s!r}")
        if self.tick_pattern not in ("constant", "poisson"):
            raise ValueError("closed_loop.tick_pattern must be 'constant' or 'poisson', got "
                             f"{self.tick_pattern!r}")
        if self.send_until_s is not None and not (
                math.isfinite(self.send_until_s) and self.send_until_s >= 0):
            raise ValueError("closed_loop.send_until_s must be a finite time >= 0, got "
                             f"{self.send_until_s!r}")
        if self.conversations is not None and self.tick_rate_per_s is not None \
                and not self.conversations.held:
            raise ValueError("closed_loop.conversations paced by ticks (tick_rate_per_s) must "
                             "be held (AIPerf's session slots)")
        if self.think_distribution not in ("fixed", "exponential"):
            raise ValueError("closed_loop.think_distribution must be 'fixed' or 'exponential', "
                             f"got {self.think_distribution!r}")

    def think_s(self, rng: np.random.Generator) -> float:
        """One think time (a draw from ``rng`` only for ``exponential``)."""
        if self.think_time_s == 0:
            return 0.0
        if self.think_distribution == "fixed":
            return self.think_time_s
        return float(rng.exponential(self.think_time_s))

    def describe(self) -> dict[str, Any]:
        return {"num_users": self.num_users, "think_time_s": self.think_time_s,
                "think_distribution": self.think_distribution,
                **({"not_before_arrival": True} if self.not_before_arrival else {}),
                **({"tick_rate_per_s": self.tick_rate_per_s, "tick_pattern": self.tick_pattern}
                   if self.tick_rate_per_s is not None else {}),
                **({"send_until_s": self.send_until_s} if self.send_until_s is not None
                   else {}),
                **({"num_later_turns": self.conversations.num_later_turns}
                   if self.conversations is not None else {}),
                **({"conversations_held": True} if self.conversations is not None
                   and self.conversations.held else {})}


@dataclass(frozen=True, slots=True)
class TimeLimit:
    """A load tool's time limit as the live replay keeps it (``ReplayConfig.time_limit``,
    ``kvbudget.live.replay_limit``): send nothing due after ``send_until_s`` (the run's clock);
    cancel what still runs ``grace_s`` after it (inf: wait for every request, as evalscope
    does). The simulator keeps the same limit by ``ClosedLoop.send_until_s`` and
    ``studies.recorded_replay.cut_at_time_limit``."""

    send_until_s: float
    grace_s: float = math.inf
    awaited_rows: frozenset[int] = frozenset()
    """Workload rows waited for whatever the limit (AIPerf's warm-up requests: a phase of its
    own, which waits for each; ``cut_at_time_limit`` does not cut them either)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.send_until_s) and self.send_until_s >= 0):
            raise ValueError("time_limit.send_until_s must be a finite time >= 0, got "
                             f"{self.send_until_s!r}")
        if not self.grace_s >= 0:
            raise ValueError(f"time_limit.grace_s must be >= 0, got {self.grace_s!r}")

    @property
    def cancel_at_s(self) -> float:
        return self.send_until_s + self.grace_s

    def describe(self) -> dict[str, Any]:
        """As ``replay.json`` keeps it (JSON has no Infinity)."""
        return {"send_until_s": self.send_until_s,
                "grace_s": "inf" if self.grace_s == math.inf else self.grace_s,
                **({"num_awaited": len(self.awaited_rows)} if self.awaited_rows else {})}
