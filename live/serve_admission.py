"""The project's clock-free :class:`~kvbudget.policies.gateway.Gateway` on the wall clock, for
``kvbudget serve``.

:class:`Admission` owns one gateway and calls it from one asyncio loop only (no lock needed):
an arriving request gets a :class:`Ticket` whose ``decided`` future the gateway's actions
resolve (an Admit at once or when capacity frees, a Reject at once or when its deadline
passes); a Revoke (or an admitted request's lease expiring) sets the ticket's ``revoked`` event,
which the forwarding code turns into an aborted upstream request. Deadlines and lease expiry
are applied by :meth:`Admission.run_timers` as they fall due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvbudget.policies.base import Policy
from kvbudget.policies.errors import Overloaded
from kvbudget.policies.gateway import Action, Admit, Gateway, GatewayConfig, Reject, Revoke
from kvbudget.policies.request import Request


@dataclass(slots=True)
class Ticket:
    """One request's place at the gateway."""

    request: Request
    decided: asyncio.Future[Admit | Reject]
    revoked: asyncio.Event = field(default_factory=asyncio.Event)
    revoke_reason: str = ""
    admitted_s: float = float("nan")
    reserved_tokens: int = 0
    max_tokens: int | None = None
    """The request's ``max_tokens`` as sent upstream, where its reservation counts fewer (it
    ends at the upstreams' context): the row records what the request declared."""
    _revoked_future: asyncio.Future[None] | None = None

    def revoked_future(self) -> asyncio.Future[None]:
        """A future done when ``revoked`` is set (made at the first call, in the running loop:
        one future, where awaiting the event would take a task a request)."""
        if self._revoked_future is None:
            self._revoked_future = asyncio.get_running_loop().create_future()
            if self.revoked.is_set():
                self._revoked_future.set_result(None)
        return self._revoked_future

    def revoke(self, reason: str) -> None:
        """Take the lease back: ``revoked`` set, with ``reason``."""
        self.revoke_reason = reason
        self.revoked.set()
        if self._revoked_future is not None and not self._revoked_future.done():
            self._revoked_future.set_result(None)


class Admission:
    """The gateway driven on ``clock`` (seconds; ``time.monotonic`` by default), times counted
    from the admission's start. ``on_action`` sees every action the gateway returns."""

    def __init__(self, gateway: Gateway, *, clock: Callable[[], float] = time.monotonic,
                 on_action: Callable[[Action], None] | None = None) -> None:
        self.gateway = gateway
        self._clock = clock
        self._t0 = clock()
        self._tickets: dict[int, Ticket] = {}
        self._next_id = 0
        self._changed: asyncio.Event | None = None  # made when asked for (few ever are)
        self._timing = False  # run_timers is running: _timer is kept armed
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due: float | None = None
        self._on_action = on_action
        self.num_revocations = 0

    def now(self) -> float:
        return self._clock() - self._t0

    @property
    def num_tickets(self) -> int:
        """Requests the admission still tracks (waiting or holding a lease)."""
        return len(self._tickets)

    @property
    def changed(self) -> asyncio.Event:
        """An event set at the next change of the gateway's state (an arrival, an action, a
        finish); a fresh one after each change, so take it before awaiting it. (Made when asked
        for: a change nobody waits on makes none.)"""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def arrive(self, tier: str, prompt_tokens: int, max_output_tokens: int,
               wait_s: float | None, arrival_s: float | None = None,
               max_tokens: int | None = None) -> Ticket:
        """A request arrives; ``wait_s``: the longest it may wait for admission (``None``: its
        tier's ``queue_timeout_s``), counted from ``arrival_s`` (when it reached the gateway,
        before its prompt was counted; default now); ``max_tokens``: what it declared, where
        ``max_output_tokens``, its reservation's, is less (:attr:`Ticket.max_tokens`)."""
        now = self.now()
        arrived = now if arrival_s is None else min(arrival_s, now)
        rid = self._next_id
        self._next_id += 1
        request = Request(request_id=rid, tier=tier, arrival_s=arrived,
                          prompt_tokens=prompt_tokens, max_output_tokens=max_output_tokens,
                          deadline_s=None if wait_s is None else arrived + max(wait_s, 0.0))
        ticket = Ticket(request, asyncio.get_running_loop().create_future(),
                        max_tokens=max_tokens if max_tokens != max_output_tokens else None)
        self._tickets[rid] = ticket
        self._apply(self.gateway.arrive(request, now))
        return ticket

    def finish(self, ticket: Ticket, output_tokens: int) -> None:
        """The request completed with ``output_tokens``: settle and release its lease."""
        if self._tickets.pop(ticket.request.request_id, None) is not None:
            self._apply(self.gateway.finish(ticket.request.request_id, output_tokens,
                                            self.now()))

    def cancel(self, ticket: Ticket) -> None:
        """The caller left or the upstream failed: forget the request, release its lease now.
        Idempotent."""
        if self._tickets.pop(ticket.request.request_id, None) is not None:
            self._apply(self.gateway.cancel(ticket.request.request_id, self.now()))
        if not ticket.decided.done():
            ticket.decided.cancel()

    def resize(self, capacity_tokens: int, max_request_tokens: int | None = None) -> None:
        """The upstreams' KV capacity, read again (``max_request_tokens``: the smallest
        one's, with several): admit what now fits."""
        config = self.gateway.config
        if (capacity_tokens, max_request_tokens) != (config.capacity_tokens,
                                                     config.max_request_tokens):
            self._apply(self.gateway.resize(capacity_tokens, self.now(), max_request_tokens))

    def reconfigure(self, policy: Policy, config: GatewayConfig) -> None:
        """A reloaded scenario: ``policy`` decides from now on, under ``config``'s front door
        and lease TTL (new leases take it; leases held stay as they are). Its capacity is not
        taken from ``config``: :meth:`resize` changes it."""
        running = self.gateway.config
        self.gateway.config = replace(config, capacity_tokens=running.capacity_tokens,
                                      max_request_tokens=running.max_request_tokens)
        self.replace_policy(policy)

    def round_to(self, block_tokens: int) -> None:
        """The upstreams' KV block size, read again (one restarted with another
        ``block_size``): new reservations are rounded up to it; leases held keep theirs."""
        config = self.gateway.config
        if block_tokens != config.reservation_granularity:
            self.gateway.config = replace(config, reservation_granularity=block_tokens)
            self._apply(self.gateway.advance(self.now()))

    def replace_policy(self, policy: Policy) -> None:
        """A reloaded policy decides from now on; leases held stay as they are."""
        self.gateway.policy = policy
        self._apply(self.gateway.advance(self.now()))

    def refuse_waiting(self) -> int:
        """Refuse every request still waiting for admission, now (the server drains: no
        capacity will come from it). Each gets the answer its tier gets when there is none:
        ``Overloaded(no_capacity)``, retryable as its tier is, with the policy's Retry-After.
        Returns how many were refused."""
        gw = self.gateway
        waiting = [r for tier in gw.tiers for r in gw.waiting(tier)]
        refusals: list[Action] = []
        now = self.now()
        for request in waiting:
            tier = gw.tiers[request.tier]
            after = gw.policy.retry_after_s(request, gw) if tier.retryable_on_overload else None
            refusals.append(Reject(request, Overloaded(tier.retryable_on_overload,
                                                       "no_capacity", after)))
        freed: list[Action] = []
        for request in waiting:  # whatever a refusal lets in is refused next (it waited too)
            freed += gw.cancel(request.request_id, now)
        self._apply(refusals + [a for a in freed if not isinstance(a, Admit)])
        return len(waiting)

    def revoke_admitted(self, reason: str) -> int:
        """Take back every lease still held (the drain's deadline passed): each request's
        ``revoked`` is set with ``reason``, which ends its forwarding (the upstream request
        closed) and releases its lease through :meth:`cancel`. Returns how many."""
        held = [t for t in self._tickets.values()
                if t.decided.done() and not t.decided.cancelled() and not t.revoked.is_set()]
        for ticket in held:
            ticket.revoke(reason)
        return len(held)

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if self._on_action is not None:
                self._on_action(action)
            ticket = self._tickets.get(action.request.request_id)
            if ticket is None:
                continue
            if isinstance(action, Admit):
                ticket.admitted_s = self.now()
                ticket.reserved_tokens = action.lease.reserved_tokens
                if not ticket.decided.done():
                    ticket.decided.set_result(action)
            elif isinstance(action, Revoke):
                # the stream is aborted; a requeued request is not run again by this server:
                # its client gets the retryable ``preempted`` answer and may send it again
                self.num_revocations += 1
                self._revoke(ticket, "preempted")
                if action.requeued:
                    self._apply(self.gateway.cancel(action.request.request_id, self.now()))
            elif not ticket.decided.done():
                self._tickets.pop(action.request.request_id, None)
                ticket.decided.set_result(action)
            else:  # an admitted request refused afterwards: its lease expired
                error = action.error
                self._revoke(ticket, error.reason if isinstance(error, Overloaded) else "")
        if self._timing:
            self._arm()
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _revoke(self, ticket: Ticket, reason: str) -> None:
        self._tickets.pop(ticket.request.request_id, None)
        ticket.revoke(reason or "preempted")

    async def run_timers(self) -> None:
        """Apply deadlines and lease expiry as they fall due (runs until cancelled): one timer
        on the loop, set for the gateway's next one and moved only when that changes (an
        arrival or a finish that leaves it where it was costs no turn of the loop)."""
        self._timing = True
        try:
            self._arm()
            await asyncio.get_running_loop().create_future()  # until cancelled
        finally:
            self._timing = False
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_due = None, None

    def _arm(self) -> None:
        """Set the loop's timer for the gateway's next one (none when it has none)."""
        due = self.gateway.next_timer_s()
        if due == self._timer_due and (due is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = None if due is None else asyncio.get_running_loop().call_later(
            max(due - self.now(), 0.0), self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_due = None, None
        self._apply(self.gateway.advance(self.now()))  # which sets the timer again
