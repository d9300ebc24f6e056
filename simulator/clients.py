"""The simulated clients: each request's attempts, its client's timeout and its retries.

One :class:`~kvbudget.policies.clients.ClientModel` per tier decides what happens after each
answer. A retry is a new attempt of the same request (the same workload row, the same gateway
request id) offered to the gateway at its own time; a client timeout disconnects: the gateway
forgets the request (:meth:`policies.Gateway.cancel`) and the engine aborts it
(``abort_request``, the same path as a revoked lease), freeing its KV blocks. Every jitter draw
comes from one generator seeded from the run's seed, in the order the events happen, so the
same seed gives the same attempts.

The records keep one row per request (its first arrival, its final status, ``num_attempts``,
and TTFT/E2E counted from the first arrival: what its user lived through); the attempts table
keeps one row per attempt.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from kvbudget.policies import Request
from kvbudget.policies.clients import CLIENT_SEED_TAG, NO_RETRY, Answer, ClientModel
from kvbudget.results.records import ATTEMPT_COLUMNS
from kvbudget.simulator.alarm import Alarm
from kvbudget.workloads import Workload

if TYPE_CHECKING:
    import simpy

    from kvbudget.policies import Action
    from kvbudget.simulator.serving import ServingEngine
    from kvbudget.simulator.sim_config import SimConfig


class _Gateway(Protocol):
    def arrive(self, request: Request, now_s: float) -> list[Action]: ...
    def cancel(self, request_id: int, now_s: float) -> list[Action]: ...


class _Driver(Protocol):
    """What the clients use of the run driver (:class:`kvbudget.simulator.run._Simulation`)."""

    env: simpy.Environment
    w: Workload

    @property
    def engine(self) -> ServingEngine: ...
    @property
    def gateway(self) -> _Gateway: ...
    def clock(self, t: float) -> float: ...
    def carry_out(self, actions: list[Action], now: float) -> None: ...
    def set_status(self, i: int, status: str, reason: str) -> None: ...
    def new_attempt(self, i: int) -> None: ...

_TIMEOUT, _RETRY = 0, 1


class Clients:
    """Attempt bookkeeping and the client events (timeouts, retries) of one simulation."""

    @staticmethod
    def wanted(workload: Workload, config: SimConfig) -> bool:
        return bool(config.clients) or workload.timeout_s is not None

    def __init__(self, sim: _Driver, config: SimConfig) -> None:
        self.sim = sim
        w = sim.w
        n = len(w)
        by_tier = dict(config.clients)
        self.models: list[ClientModel] = [by_tier.get(t, NO_RETRY) for t in w.tier_names]
        self.described = {t: by_tier.get(t, NO_RETRY).describe() for t in w.tier_names}
        self.tier = w.tier.tolist()
        tier_timeout = [m.timeout_s for m in self.models]
        own = None if w.timeout_s is None else w.timeout_s.tolist()
        self.timeout: list[float | None] = [
            (tier_timeout[c] if own is None or own[i] != own[i] else own[i])
            for i, c in enumerate(self.tier)
        ]
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, CLIENT_SEED_TAG]))
        self.attempt = np.zeros(n, np.int64)  # attempts sent so far
        self.in_flight = np.zeros(n, np.bool_)
        self.in_engine = np.zeros(n, np.bool_)  # this attempt's work is on the engine
        self.was_started = np.zeros(n, np.bool_)  # some attempt reached the engine
        self.reset_at = np.zeros(n, np.int64)  # the attempt whose first token was forgotten
        self.sent_at: list[float] = [math.nan] * n
        self.first_s: list[float] = w.arrival_s.tolist()
        self.events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, row, attempt)
        self.seq = 0
        self.alarm = Alarm(sim.env, self._fire, urgent=True)
        self.rows: dict[str, list[Any]] = {c: [] for c in ATTEMPT_COLUMNS}
        self.open_row: dict[int, int] = {}  # row -> its attempt's index in self.rows

    # --- events ----------------------------------------------------------------------------
    def next_s(self) -> float:
        """When the next client event is due (inf: none)."""
        return self.events[0][0] if self.events else math.inf

    def _push(self, t: float, kind: int, i: int, attempt: int) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, i, attempt))
        self.seq += 1
        self.alarm.arm(t)

    def _fire(self, _at: float) -> None:
        """The alarm rang: the events due by now happen, in time order."""
        now_env = self.sim.env.now
        while self.events and self.events[0][0] <= now_env:
            t, _, kind, i, attempt = heapq.heappop(self.events)
            if self.attempt[i] != attempt:
                continue
            if kind == _TIMEOUT:
                if self.in_flight[i]:
                    self._timed_out(i, t)
            else:
                self._retry(i, t)
        if self.events:
            self.alarm.arm(self.events[0][0])

    # --- an attempt's life -------------------------------------------------------------------
    def sent(self, i: int, now: float) -> None:
        """Attempt ``attempt[i] + 1`` of row ``i`` is offered to the gateway at ``now``."""
        self.attempt[i] += 1
        self.in_flight[i] = True
        self.in_engine[i] = False
        self.sent_at[i] = now
        rows = self.rows
        self.open_row[i] = len(rows["attempt"])
        rows["request_id"].append(i)
        rows["attempt"].append(int(self.attempt[i]))
        rows["sent_s"].append(now)
        rows["ended_s"].append(math.nan)
        rows["answer"].append("")
        rows["reason"].append("")
        rows["retry_after_s"].append(math.nan)
        rows["next_attempt_s"].append(math.nan)
        timeout = self.timeout[i]
        if timeout is not None:
            self._push(now + timeout, _TIMEOUT, i, int(self.attempt[i]))

    def admitted(self, i: int) -> None:
        self.in_engine[i] = True
        attempt = self.attempt[i]
        if self.was_started[i] and self.reset_at[i] != attempt:
            # a new attempt starts on the engine (not the same attempt re-admitted after a
            # revocation, whose first token stays the one its user saw)
            self.sim.engine.forget_first_token(i)
            self.reset_at[i] = attempt
        elif not self.was_started[i]:
            self.reset_at[i] = attempt
        self.was_started[i] = True

    def revoked(self, i: int) -> None:
        self.in_engine[i] = False  # aborted; waits again at the gateway (or is refused)

    def completed(self, i: int, t: float) -> bool:
        """The engine finished row ``i`` at ``t``; False when no attempt of it is live."""
        if not self.in_flight[i]:
            return False
        self._close(i, t, "completed", "", None, math.nan)
        return True

    def ended(
        self, i: int, now: float, answer: Answer, reason: str, retry_after_s: float | None
    ) -> bool:
        """Row ``i``'s attempt got ``answer``; True when its client tries again (the request
        stays pending), False when the answer is final."""
        if not self.in_flight[i]:
            return True  # a stale answer (the attempt already ended): nothing to record
        return self._answered(i, now, answer, reason, retry_after_s)

    def close_leftover(self, i: int, t: float) -> None:
        """The run ended with row ``i``'s attempt unanswered (still waiting at the gateway)."""
        if self.in_flight[i]:
            self._close(i, t, "none", "end_of_run", None, math.nan)

    def _answered(
        self, i: int, now: float, answer: Answer, reason: str, retry_after_s: float | None
    ) -> bool:
        model = self.models[self.tier[i]]
        attempt = int(self.attempt[i])
        at = model.next_attempt_s(
            answer,
            attempt=attempt,
            now_s=now,
            first_s=self.first_s[i],
            retry_after_s=retry_after_s,
            rng=self.rng,
        )
        if at is not None:
            d = float(self.sim.w.deadline_s[i])
            if d == d and at > d:
                at = None  # past the request's own admission deadline: the client stops
        self._close(i, now, answer, reason, retry_after_s, math.nan if at is None else at)
        if at is None:
            return False
        self._push(at, _RETRY, i, attempt)
        return True

    def _close(
        self,
        i: int,
        now: float,
        answer: str,
        reason: str,
        retry_after_s: float | None,
        next_s: float,
    ) -> None:
        self.in_flight[i] = False
        self.in_engine[i] = False
        k = self.open_row.pop(i)
        rows = self.rows
        rows["ended_s"][k] = now
        rows["answer"][k] = answer
        rows["reason"][k] = reason
        rows["retry_after_s"][k] = math.nan if retry_after_s is None else retry_after_s
        rows["next_attempt_s"][k] = next_s

    def _timed_out(self, i: int, t: float) -> None:
        """The client of row ``i`` gave up on its attempt at ``t`` and disconnected."""
        sim = self.sim
        now = sim.clock(t)
        if self.in_engine[i]:
            sim.engine.abort_request(i)
        actions = sim.gateway.cancel(i, now)
        if not self._answered(i, now, "timeout", "", None):
            sim.set_status(i, "client_timeout", "")
        sim.carry_out(actions, now)

    def _retry(self, i: int, t: float) -> None:
        sim = self.sim
        w = sim.w
        now = sim.clock(t)
        d = float(w.deadline_s[i])
        request = Request(
            i,
            w.tier_names[self.tier[i]],
            now,
            int(w.prompt_tokens[i]),
            int(w.max_output_tokens[i]),
            None if d != d else d,
            w.prefix_of(i),
        )
        self.sent(i, now)
        sim.new_attempt(i)
        sim.carry_out(sim.gateway.arrive(request, now), now)

    # --- results -------------------------------------------------------------------------------
    def table(self, request_id: np.ndarray[Any, Any]) -> dict[str, Any]:
        rows = self.rows
        out: dict[str, Any] = {
            "request_id": request_id[np.asarray(rows["request_id"], np.int64)],
            "attempt": np.asarray(rows["attempt"], np.int64),
            "answer": np.asarray(rows["answer"], dtype=object),
            "reason": np.asarray(rows["reason"], dtype=object),
        }
        for c in ("sent_s", "ended_s", "retry_after_s", "next_attempt_s"):
            out[c] = np.asarray(rows[c], np.float64)
        return {c: out[c] for c in ATTEMPT_COLUMNS}

    def describe(self) -> dict[str, Any]:
        return {
            "by_tier": self.described,
            "per_request_timeouts": self.sim.w.timeout_s is not None,
        }
