"""The gateway's admission state machine: queues, leases and the policy, without a clock.

Executors (the SimPy model and the live asyncio gateway) call :meth:`Gateway.arrive`,
:meth:`Gateway.finish`, :meth:`Gateway.advance` with the current time and carry out the actions
returned: start the request on the engine (:class:`Admit`), answer the caller with an error
(:class:`Reject`), or abort engine work whose lease was taken back (:class:`Revoke`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

from kvbudget.policies.base import (
    Admitted,
    Completion,
    EngineProbe,
    Policy,
    Refuse,
    RevokeLeases,
)
from kvbudget.policies.budget import Lease, TokenBudget
from kvbudget.policies.errors import Overloaded, OverloadReason, RequestTooLarge
from kvbudget.policies.request import Request
from kvbudget.policies.stage_leases import StageLeases
from kvbudget.policies.tiers import (
    DEFAULT_TIERS,
    MAX_LIMIT_COUNT,
    MAX_LIMIT_S,
    MAX_LIMIT_TOKENS,
    TierConfig,
    by_priority,
    check_limit,
    tier_map,
)


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """Caps checked when a request arrives, before it may queue (``None``: no cap).

    * ``max_concurrent_requests``: requests in flight (waiting at the gateway plus admitted);
      one more is refused with ``Overloaded(retryable=True, "concurrency")``, HTTP 429. TGI's
      router flag of the same name (``text-generation-launcher --max-concurrent-requests``,
      default 128: ``FrontDoor()`` is TGI's default).
    * ``max_num_queued_requests``: the same in-flight count, refused with
      ``Overloaded(retryable=False, "queue_full")``, HTTP 503: vLLM's ``--max-num-queued-reqs``
      (waiting + running requests, checked in ``AsyncLLM.add_request``; vllm-project/vllm#49445).
    * ``max_num_queued_tokens``: prompt tokens of in-flight requests not yet past prefill
      (waiting at the gateway, or admitted with no output token yet per the engine probe),
      including the arrival's; 503 ``queue_full``. vLLM's ``--max-num-queued-tokens`` (the same
      PR), meant as ``target TTFT x prefill throughput``.
    * ``tier_max_queued``: ``(tier, n)`` pairs capping the requests waiting at the gateway in
      that tier; 503 ``queue_full``.
    * ``evict_lower_priority``: when a global cap (the first three) would refuse an arrival and
      requests of a strictly lower-priority tier are waiting, the lowest-priority, latest-arriving
      of them are evicted (``Overloaded(tier.retryable_on_overload, "evicted")``) until the
      arrival fits; if evicting every such request would not be enough, nothing is evicted and
      the arrival is refused. Tier caps never evict (a tier's queue holds one priority).
    """

    max_concurrent_requests: int | None = 128
    max_num_queued_requests: int | None = None
    max_num_queued_tokens: int | None = None
    tier_max_queued: tuple[tuple[str, int], ...] = ()
    evict_lower_priority: bool = True

    def __post_init__(self) -> None:
        for name in ("max_concurrent_requests", "max_num_queued_requests", "max_num_queued_tokens"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int) and not isinstance(value, bool) and value >= 1
            ):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
            if name == "max_num_queued_tokens":
                check_limit(f"front_door.{name}", value, MAX_LIMIT_TOKENS, "tokens")
            else:
                check_limit(f"front_door.{name}", value, MAX_LIMIT_COUNT, "requests")
        object.__setattr__(self, "tier_max_queued", tuple(tuple(p) for p in self.tier_max_queued))
        seen: set[str] = set()
        for pair in self.tier_max_queued:
            if len(pair) != 2 or not isinstance(pair[0], str) or not isinstance(pair[1], int):
                raise ValueError(f"tier_max_queued entries must be (tier, n) pairs, got {pair!r}")
            tier, cap = pair
            if cap < 0:
                raise ValueError(f"tier_max_queued[{tier!r}] must be >= 0, got {cap!r}")
            check_limit(f"front_door.tier_max_queued[{tier!r}]", cap, MAX_LIMIT_COUNT,
                        "requests")
            if tier in seen:
                raise ValueError(f"tier_max_queued names tier {tier!r} twice")
            seen.add(tier)


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    """Everything the gateway needs besides the policy.

    ``reservation_granularity`` rounds every reservation up to a multiple (the engine's
    ``block_size``), so that reserved tokens bound the KV blocks the engine can allocate.
    ``front_door``: caps on concurrency and queues checked at arrival (:class:`FrontDoor`);
    ``None`` has none. ``max_request_tokens``: the largest reservation one request may hold,
    when less than ``capacity_tokens`` (a budget over a fleet, where a request runs on one
    replica: that replica's capacity); a larger one is :class:`RequestTooLarge`.
    """

    capacity_tokens: int
    tiers: tuple[TierConfig, ...] = DEFAULT_TIERS
    lease_ttl_s: float | None = None
    reservation_granularity: int = 1
    front_door: FrontDoor | None = None
    max_request_tokens: int | None = None
    first_stage_capacity_tokens: int | None = None  # a two-stage lease (policies.stage_leases)

    def __post_init__(self) -> None:
        if self.capacity_tokens < 1:
            raise ValueError(f"capacity_tokens must be >= 1, got {self.capacity_tokens!r}")
        if self.reservation_granularity < 1:
            raise ValueError(
                f"reservation_granularity must be >= 1, got {self.reservation_granularity!r}"
            )
        if self.max_request_tokens is not None and self.max_request_tokens < 1:
            raise ValueError(
                f"max_request_tokens must be >= 1 or None, got {self.max_request_tokens!r}"
            )
        stage = self.first_stage_capacity_tokens
        if stage is not None and stage < 1:
            raise ValueError(f"first_stage_capacity_tokens must be >= 1 or None, got {stage!r}")
        if self.lease_ttl_s is not None and not self.lease_ttl_s > 0:
            raise ValueError(f"lease_ttl_s must be > 0 or None, got {self.lease_ttl_s!r}")
        check_limit("lease_ttl_s", self.lease_ttl_s, MAX_LIMIT_S, "s")
        check_limit("capacity_tokens", self.capacity_tokens, MAX_LIMIT_TOKENS, "tokens")
        tiers = tier_map(self.tiers)
        if self.front_door is not None:
            for tier, _ in self.front_door.tier_max_queued:
                if tier not in tiers:
                    raise ValueError(
                        f"front_door.tier_max_queued names unknown tier {tier!r}; "
                        f"known tiers: {sorted(tiers)}"
                    )


@dataclass(frozen=True, slots=True)
class Admit:
    """The gateway admitted ``request`` under ``lease``."""

    request: Request
    lease: Lease


@dataclass(frozen=True, slots=True)
class Reject:
    """The gateway refused ``request`` with ``error`` (``was_admitted``: it had been admitted
    and its lease expired)."""

    request: Request
    error: RequestTooLarge | Overloaded
    was_admitted: bool = False


@dataclass(frozen=True, slots=True)
class Revoke:
    """The gateway took back an admitted request's lease: abort its engine work.
    ``requeued`` says whether it waits again at the gateway (its work will be recomputed)."""

    request: Request
    lease: Lease
    requeued: bool


Action = Admit | Reject | Revoke


class _Queue:
    """FCFS queue of one tier with lazy deletion (expired requests leave a tombstone)."""

    __slots__ = ("items", "live", "prompt_tokens")

    def __init__(self) -> None:
        self.items: deque[Request] = deque()
        self.live = 0
        self.prompt_tokens = 0


class Gateway:
    """Admission control over a :class:`TokenBudget` driven by a :class:`Policy`."""

    def __init__(
        self, config: GatewayConfig, policy: Policy, engine: EngineProbe | None = None
    ) -> None:
        self.config = config
        self.policy = policy
        self._tiers = tier_map(config.tiers)
        self._order = by_priority(self._tiers)
        self._budget = TokenBudget(
            config.capacity_tokens,
            {t.name: t.guaranteed_tokens for t in config.tiers if t.guaranteed_tokens},
        )
        self._engine = engine
        self._now = 0.0
        self._queues: dict[str, _Queue] = {name: _Queue() for name in self._tiers}
        self._queues_by_priority = [(name, self._queues[name]) for name in self._order]
        self._waiting: dict[int, float] = {}  # request_id -> admission deadline (inf: none)
        self._waiting_requests: dict[int, Request] = {}
        self._deadlines: list[tuple[float, int]] = []
        self._admitted: dict[int, Admitted] = {}
        self._revocations: dict[int, int] = {}
        stage = config.first_stage_capacity_tokens
        self.stage = None if stage is None else StageLeases(stage)

    # --- GatewayView -----------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        return self._now

    @property
    def tiers(self) -> Mapping[str, TierConfig]:
        return self._tiers

    @property
    def budget(self) -> TokenBudget:
        return self._budget

    @property
    def admitted(self) -> Mapping[int, Admitted]:
        return self._admitted

    @property
    def engine(self) -> EngineProbe | None:
        return self._engine

    def attach_engine(self, engine: EngineProbe) -> None:
        self._engine = engine

    def waiting(self, tier: str) -> Iterator[Request]:
        return (r for r in self._queues[tier].items if r.request_id in self._waiting)

    def num_waiting(self, tier: str | None = None) -> int:
        if tier is None:
            return len(self._waiting)
        return self._queues[tier].live

    def waiting_prompt_tokens(self, tier: str | None = None) -> int:
        if tier is None:
            return sum(q.prompt_tokens for q in self._queues.values())
        return self._queues[tier].prompt_tokens

    # --- executor calls --------------------------------------------------------------------
    def arrive(self, request: Request, now_s: float) -> list[Action]:
        """A request arrives. Too-large requests are refused before anything else."""
        self._tick(now_s)
        tier = self._tiers.get(request.tier)
        if tier is None:
            raise ValueError(
                f"request {request.request_id}: unknown tier {request.tier!r}; "
                f"known tiers: {sorted(self._tiers)}"
            )
        size = request.prompt_tokens + request.max_output_tokens  # max_sequence_tokens
        if size > tier.max_sequence_tokens:
            return [Reject(request, RequestTooLarge(tier.max_sequence_tokens, size))]
        config = self.config
        capacity = config.capacity_tokens
        if config.max_request_tokens is not None:
            capacity = min(capacity, config.max_request_tokens)
        if size > capacity:
            # could never be admitted, even into an empty budget (or onto an empty replica)
            return [Reject(request, RequestTooLarge(capacity, size))]
        refusal = self.policy.precheck(request, self)
        if refusal is not None:
            return [Reject(request, refusal)]
        actions: list[Action] = []
        if config.front_door is not None:
            door = self._front_door(request, config.front_door)
            if isinstance(door, Reject):
                return [door]
            actions.extend(door)
        deadline = request.deadline_s
        if deadline is None and tier.queue_timeout_s is not None:
            deadline = now_s + tier.queue_timeout_s
        if deadline is None or deadline > now_s:
            self._enqueue(request, math.inf if deadline is None else deadline)
            self._expire(now_s, actions)
            return self._dispatch(actions)
        return self._admit_or_refuse_now(request, now_s, actions)

    def _admit_or_refuse_now(self, request: Request, now_s: float,
                             actions: list[Action]) -> list[Action]:
        """A request whose deadline has come as it arrives (a wait of 0: admitted now or
        refused): the deadline bounds its wait, not its admission, so it takes room that is
        free now and is refused (``deadline``) only if it would have to wait. (It was refused
        before any dispatch, into an empty budget too: a tier with ``queue_timeout_s = 0``
        admitted nothing.)"""
        self._expire(now_s, actions)  # the others due by now go first
        self._enqueue(request, math.inf)
        self._dispatch(actions)
        rid = request.request_id
        if rid in self._waiting:  # it would wait: refused now, and those behind it go on
            self._waiting[rid] = now_s
            heapq.heappush(self._deadlines, (now_s, rid))
            self._expire(now_s, actions)
            self._dispatch(actions)
        return actions

    def finish(self, request_id: int, output_tokens: int, now_s: float) -> list[Action]:
        """An admitted request completed with ``output_tokens`` generated."""
        self._tick(now_s)
        entry = self._admitted.pop(request_id, None)
        if entry is not None:
            lease = entry.lease
            lease.settle(entry.request.prompt_tokens + output_tokens)
            lease.release()
            if self.stage is not None:
                self.stage.release(request_id)
            self._revocations.pop(request_id, None)
            self.policy.observe_completion(
                Completion(entry.request, output_tokens, lease.reserved_tokens, entry.admitted_s),
                self,
            )
        return self._dispatch(self._expire(now_s, []))

    def fail(self, request_id: int, now_s: float) -> list[Action]:
        """An admitted request ended without completing (a backend error): free its lease."""
        self._tick(now_s)
        entry = self._admitted.pop(request_id, None)
        if entry is not None:
            entry.lease.release()
            if self.stage is not None:
                self.stage.release(request_id)
        return self._dispatch(self._expire(now_s, []))

    def cancel(self, request_id: int, now_s: float) -> list[Action]:
        """The caller went away (its client timed out): forget the request, waiting or
        admitted, and free its lease. The executor aborts its engine work itself; the actions
        returned are what the freed capacity admits."""
        self._tick(now_s)
        request = self._waiting_requests.get(request_id)
        if request is not None:
            self._dequeue(request)
        entry = self._admitted.pop(request_id, None)
        if entry is not None:
            entry.lease.release()
            if self.stage is not None:
                self.stage.release(request_id)
        self._revocations.pop(request_id, None)
        return self._dispatch(self._expire(now_s, []))

    def progress(self, request_id: int, output_tokens: int) -> None:
        """Optional: report the tokens an admitted request holds so far (settles its lease)."""
        entry = self._admitted.get(request_id)
        if entry is not None:
            entry.lease.settle(entry.request.prompt_tokens + output_tokens)

    def first_stage_done(self, request_id: int, now_s: float) -> list[Action]:
        """The first stage is done with an admitted request (its KV has moved on): its part
        of the first stage's budget goes back; the actions are what that admits."""
        self._tick(now_s)
        if self.stage is not None:
            self.stage.release(request_id)
        actions = self._expire(now_s, [])
        # (with nothing waiting, and nothing expired, there is nothing to admit: every queue
        # is empty, _dequeue keeping none with a head that waits no more)
        return self._dispatch(actions) if self._waiting or actions else actions

    def engine_preempted(self, request_id: int, now_s: float) -> None:
        """The engine preempted an admitted request (told to learning policies)."""
        self._tick(now_s)
        self.policy.observe_preemption(request_id, self)

    def resize(self, capacity_tokens: int, now_s: float,
               max_request_tokens: int | None = None) -> list[Action]:
        """The capacity changed (a live server's KV cache, read again): admit what now fits.
        ``max_request_tokens``: one replica's capacity, for a budget over several (``None``:
        no such cap). Admitted requests keep their leases (see :meth:`TokenBudget.resize`)."""
        self._tick(now_s)
        self.config = replace(self.config, capacity_tokens=capacity_tokens,
                              max_request_tokens=max_request_tokens)
        self._budget.resize(capacity_tokens)
        return self._dispatch(self._expire(now_s, []))

    def advance(self, now_s: float) -> list[Action]:
        """Apply deadlines and lease expiry due by ``now_s``."""
        self._tick(now_s)
        actions = self._expire(now_s, [])
        return self._dispatch(actions) if actions else actions

    def next_timer_s(self) -> float | None:
        """When :meth:`advance` next has something to do (a deadline or a lease expiry)."""
        deadlines = self._deadlines
        lease_nxt = self._budget.next_expiry_s()
        if not deadlines:
            return lease_nxt
        waiting = self._waiting
        while deadlines and waiting.get(deadlines[0][1]) != deadlines[0][0]:
            heapq.heappop(deadlines)  # a stale entry (the request left the queue)
        if not deadlines:
            return lease_nxt
        nxt = deadlines[0][0]
        return lease_nxt if lease_nxt is not None and lease_nxt < nxt else nxt

    # --- internals --------------------------------------------------------------------------
    def _tick(self, now_s: float) -> None:
        if now_s < self._now:
            raise ValueError(f"time went backwards: {now_s!r} < {self._now!r}")
        self._now = now_s

    def _enqueue(self, request: Request, deadline: float, *, by_arrival: bool = False) -> None:
        queue = self._queues[request.tier]
        if by_arrival and queue.items and queue.items[-1].arrival_s > request.arrival_s:
            keys = [r.arrival_s for r in queue.items]
            queue.items.insert(bisect.bisect_right(keys, request.arrival_s), request)
        else:
            queue.items.append(request)
        queue.live += 1
        queue.prompt_tokens += request.prompt_tokens
        self._waiting[request.request_id] = deadline
        self._waiting_requests[request.request_id] = request
        if deadline != math.inf:
            heapq.heappush(self._deadlines, (deadline, request.request_id))

    def _dequeue(self, request: Request) -> None:
        queue = self._queues[request.tier]
        del self._waiting[request.request_id]
        del self._waiting_requests[request.request_id]
        queue.live -= 1
        queue.prompt_tokens -= request.prompt_tokens
        # every removal from a queue passes here: a queue's head is therefore always waiting
        items = queue.items
        while items and items[0].request_id not in self._waiting:
            items.popleft()

    def _expire(self, now_s: float, actions: list[Action]) -> list[Action]:
        """Append the rejections and revocations due by ``now_s`` to ``actions``."""
        while True:
            nxt = self.next_timer_s()
            if nxt is None or nxt > now_s:
                return actions
            if self._deadlines and self._deadlines[0][0] == nxt:
                _, rid = heapq.heappop(self._deadlines)
                request = self._waiting_requests[rid]
                self._dequeue(request)
                tier = self._tiers[request.tier]
                was_revoked = self._revocations.pop(rid, 0) > 0
                reason: OverloadReason = "preempted" if was_revoked else "deadline"
                actions.append(
                    Reject(request, self._overloaded(request, tier.retryable_on_overload, reason))
                )
            else:
                for lease in self._budget.expire(now_s):
                    entry = self._admitted.pop(lease.holder, None)
                    if self.stage is not None:
                        self.stage.release(lease.holder)
                    if entry is not None:
                        actions.append(Revoke(entry.request, lease, requeued=False))
                        tier = self._tiers[entry.request.tier]
                        actions.append(
                            Reject(
                                entry.request,
                                Overloaded(tier.retryable_on_overload, "lease_expired"),
                                was_admitted=True,
                            )
                        )

    def _dispatch(self, actions: list[Action]) -> list[Action]:
        """Admit (or refuse, or make room for) queue heads by tier priority; append the actions
        to ``actions``. After each step the scan restarts from the highest-priority tier."""
        policy = self.policy
        gran = self.config.reservation_granularity
        while True:
            for tier_name, queue in self._queues_by_priority:
                if not queue.items or not policy.may_admit(tier_name, self):
                    continue
                request = queue.items[0]
                tokens = policy.reservation(request, self)
                tokens = -(-tokens // gran) * gran
                lease = self._try_reserve(request, tokens)
                if lease is not None:
                    rid = request.request_id
                    self._dequeue(request)
                    self._admitted[rid] = Admitted(
                        request, lease, self._now, self._revocations.get(rid, 0)
                    )
                    actions.append(Admit(request, lease))
                    break
                decision = policy.on_no_capacity(request, self)
                if isinstance(decision, Refuse):
                    self._refuse(request, decision, actions)
                    break
                if isinstance(decision, RevokeLeases) and decision.request_ids:
                    actions.extend(self._revoke(decision.request_ids))
                    break
                # Wait: strict priority, nothing below this tier is admitted
                return self._refuse_below(tier_name, actions)
            else:
                return actions  # a whole scan without progress

    def _refuse_below(self, waiting_tier: str, actions: list[Action]) -> list[Action]:
        """Refuse now, with the policy's refusal, the heads of the tiers below ``waiting_tier``
        (whose head waits) that the policy refuses when they find no room: strict priority
        leaves them none, so a tier answered at once (``batch_on_overload="reject"``) is not
        held until the waiting head is admitted. Refusals free no room: nothing else moves."""
        policy = self.policy
        below = False
        for tier_name, queue in self._queues_by_priority:
            if not below:
                below = tier_name == waiting_tier
                continue
            while queue.items:
                request = queue.items[0]
                decision = policy.on_no_capacity(request, self)
                if not isinstance(decision, Refuse):
                    break
                self._refuse(request, decision, actions)
        return actions

    def _refuse(self, request: Request, decision: Refuse, actions: list[Action]) -> None:
        """Take the queue head ``request`` out and append the policy's refusal of it."""
        self._dequeue(request)
        retryable = self._tiers[request.tier].retryable_on_overload
        actions.append(Reject(request, self._overloaded(request, retryable, decision.reason)))

    def _overloaded(self, request: Request, retryable: bool, reason: OverloadReason) -> Overloaded:
        """The refusal, with the policy's Retry-After when the caller may retry."""
        after = self.policy.retry_after_s(request, self) if retryable else None
        return Overloaded(retryable, reason, after)

    # --- front door ---------------------------------------------------------------------------
    def _in_prefill_tokens(self) -> int:
        """Prompt tokens of in-flight requests with no output yet (waiting or admitted)."""
        tokens = sum(q.prompt_tokens for q in self._queues.values())
        engine = self._engine
        if engine is not None:
            tokens += sum(
                a.request.prompt_tokens
                for a in self._admitted.values()
                if engine.num_output_tokens(a.request.request_id) == 0
            )
        return tokens

    def _front_door(self, request: Request, door: FrontDoor) -> Reject | list[Action]:
        """Check the caps for an arrival: a refusal, or the evictions that make room."""
        tier = self._tiers[request.tier]
        for name, cap in door.tier_max_queued:
            if name == request.tier and self._queues[name].live >= cap:
                return Reject(request, Overloaded(False, "queue_full"))
        in_flight = len(self._waiting) + len(self._admitted) + 1
        queued_tokens = (
            self._in_prefill_tokens() + request.prompt_tokens
            if door.max_num_queued_tokens is not None
            else 0
        )

        def violation(n: int, tokens: int) -> Overloaded | None:
            if door.max_concurrent_requests is not None and n > door.max_concurrent_requests:
                return self._overloaded(request, True, "concurrency")
            if door.max_num_queued_requests is not None and n > door.max_num_queued_requests:
                return Overloaded(False, "queue_full")
            if door.max_num_queued_tokens is not None and tokens > door.max_num_queued_tokens:
                return Overloaded(False, "queue_full")
            return None

        first = violation(in_flight, queued_tokens)
        if first is None:
            return []
        if not door.evict_lower_priority:
            return Reject(request, first)
        victims: list[Request] = []
        for name in reversed(self._order):  # lowest priority first
            if self._tiers[name].priority <= tier.priority:
                break
            queue = self._queues[name]
            for cand in reversed(queue.items):  # latest arrival first
                if cand.request_id not in self._waiting:
                    continue
                victims.append(cand)
                in_flight -= 1
                queued_tokens -= cand.prompt_tokens
                if violation(in_flight, queued_tokens) is None:
                    return self._evict(victims)
        return Reject(request, first)

    def _evict(self, victims: Sequence[Request]) -> list[Action]:
        actions: list[Action] = []
        for victim in victims:
            self._dequeue(victim)
            self._revocations.pop(victim.request_id, None)
            retryable = self._tiers[victim.tier].retryable_on_overload
            actions.append(Reject(victim, Overloaded(retryable, "evicted")))
        return actions

    def _try_reserve(self, request: Request, tokens: int) -> Lease | None:
        ttl = self.config.lease_ttl_s
        expires = None if ttl is None else self._now + ttl
        lease = self._budget.try_reserve(
            request.tier, tokens, holder=request.request_id, expires_at=expires
        )
        if lease is not None and self.stage is not None:  # both parts fit, or neither is held
            first = self.stage.first_stage_request(request)
            gran = self.config.reservation_granularity
            part = -(-self.policy.reservation(first, self) // gran) * gran
            if not self.stage.reserve(request, part):
                lease.release()
                return None
        return lease

    def _revoke(self, request_ids: Sequence[int]) -> list[Action]:
        actions: list[Action] = []
        for rid in request_ids:
            entry = self._admitted.pop(rid, None)
            if entry is None:
                continue
            entry.lease.release()
            if self.stage is not None:
                self.stage.release(rid)
            self._revocations[rid] = self._revocations.get(rid, 0) + 1
            request = entry.request
            tier = self._tiers[request.tier]
            deadline = request.deadline_s
            if deadline is None and tier.queue_timeout_s is not None:
                deadline = self._now + tier.queue_timeout_s
            self._enqueue(request, math.inf if deadline is None else deadline, by_arrival=True)
            actions.append(Revoke(request, entry.lease, requeued=True))
        return actions
