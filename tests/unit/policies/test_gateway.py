"""The clock-free gateway state machine with the seed policies."""

from __future__ import annotations

import pytest

from kvbudget.policies import (
    Admit,
    Gateway,
    GatewayConfig,
    Overloaded,
    Reject,
    Request,
    RequestTooLarge,
    Revoke,
    TierConfig,
    make_policy,
)

TIERS = (
    TierConfig("interactive", max_sequence_tokens=1000, priority=0, queue_timeout_s=5.0),
    TierConfig(
        "batch",
        max_sequence_tokens=2000,
        priority=1,
        queue_timeout_s=60.0,
        retryable_on_overload=True,
    ),
)


def req(
    i: int, tier: str = "interactive", prompt: int = 100, max_out: int = 100, t: float = 0.0
) -> Request:
    return Request(i, tier, t, prompt, max_out)


def gw(policy: str, capacity: int = 1000, **params: object) -> Gateway:
    return Gateway(
        GatewayConfig(capacity_tokens=capacity, tiers=TIERS), make_policy(policy, params)
    )


def test_too_large_is_rejected_at_arrival_before_queueing() -> None:
    g = gw("conservative")
    actions = g.arrive(req(1, prompt=900, max_out=101), 0.0)
    assert len(actions) == 1 and isinstance(actions[0], Reject)
    err = actions[0].error
    assert isinstance(err, RequestTooLarge) and err.limit == 1000
    assert g.num_waiting() == 0 and g.budget.reserved_tokens == 0


@pytest.mark.parametrize("policy", ["unlimited", "conservative", "overcommit"])
def test_a_reservation_beyond_max_request_tokens_is_too_large(policy: str) -> None:
    """A budget over a fleet: 1,000 tokens in all, 400 on the largest replica."""
    g = Gateway(GatewayConfig(capacity_tokens=1000, tiers=TIERS, max_request_tokens=400),
                make_policy(policy))
    [too_large] = g.arrive(req(1, prompt=200, max_out=201), 0.0)
    assert isinstance(too_large, Reject) and isinstance(too_large.error, RequestTooLarge)
    assert too_large.error.limit == 400
    [admit] = g.arrive(req(2, prompt=200, max_out=200), 0.0)
    assert not isinstance(admit, Reject)
    with pytest.raises(ValueError, match="max_request_tokens"):
        GatewayConfig(capacity_tokens=1000, max_request_tokens=0)


def test_unknown_tier_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'gold'"):
        gw("conservative").arrive(req(1, tier="gold"), 0.0)


def test_conservative_reserves_worst_case_and_waits_until_deadline() -> None:
    g = gw("conservative", capacity=500)
    a = g.arrive(req(1, prompt=200, max_out=200), 0.0)
    assert isinstance(a[0], Admit) and a[0].lease.reserved_tokens == 400
    assert g.arrive(req(2, prompt=100, max_out=100, t=1.0), 1.0) == []
    assert g.num_waiting("interactive") == 1
    assert g.next_timer_s() == pytest.approx(6.0)
    expired = g.advance(6.0)
    assert len(expired) == 1 and isinstance(expired[0], Reject)
    assert isinstance(expired[0].error, Overloaded) and expired[0].error.reason == "deadline"
    assert not expired[0].error.retryable


def test_completion_releases_and_admits_the_next_in_fcfs_order() -> None:
    g = gw("conservative", capacity=500)
    g.arrive(req(1, prompt=200, max_out=200), 0.0)
    g.arrive(req(2, prompt=200, max_out=200, t=0.5), 0.5)
    g.arrive(req(3, prompt=10, max_out=10, t=0.6), 0.6)  # would fit, but FCFS keeps order
    acts = g.finish(1, 150, 2.0)
    assert [a.request.request_id for a in acts if isinstance(a, Admit)] == [2, 3]
    assert g.budget.reserved_tokens == 400 + 32 - 12  # 400 + 20


def test_batch_reject_mode_answers_retryable_overloaded() -> None:
    g = gw("conservative", capacity=300, batch_on_overload="reject")
    g.arrive(req(1, prompt=100, max_out=150), 0.0)
    acts = g.arrive(req(2, tier="batch", prompt=100, max_out=100, t=0.1), 0.1)
    assert len(acts) == 1 and isinstance(acts[0], Reject)
    assert isinstance(acts[0].error, Overloaded)
    assert acts[0].error.retryable and acts[0].error.reason == "no_capacity"


def test_batch_reject_mode_answers_at_once_while_interactive_waits() -> None:
    # an interactive request waits at its queue's head (strict priority: nothing below it is
    # admitted); a batch arrival under "reject" is answered then, not when the head leaves
    g = gw("conservative", capacity=300, batch_on_overload="reject")
    g.arrive(req(1, prompt=100, max_out=150), 0.0)
    assert not g.arrive(req(2, prompt=100, max_out=100, t=0.1), 0.1)  # waits
    acts = g.arrive(req(3, tier="batch", prompt=10, max_out=10, t=0.2), 0.2)
    assert len(acts) == 1 and isinstance(acts[0], Reject)
    assert acts[0].request.request_id == 3 and acts[0].error.retryable
    # "wait" keeps it queued behind the interactive head
    g = gw("conservative", capacity=300)
    g.arrive(req(1, prompt=100, max_out=150), 0.0)
    g.arrive(req(2, prompt=100, max_out=100, t=0.1), 0.1)
    assert not g.arrive(req(3, tier="batch", prompt=10, max_out=10, t=0.2), 0.2)


def test_overcommit_reserves_a_fraction_of_max_output() -> None:
    g = gw("overcommit", capacity=10_000, overcommit_ratio=0.25)
    acts = g.arrive(req(1, prompt=100, max_out=101), 0.0)
    assert isinstance(acts[0], Admit) and acts[0].lease.reserved_tokens == 100 + 26


def test_reservations_round_up_to_the_block_size() -> None:
    g = Gateway(
        GatewayConfig(capacity_tokens=1000, tiers=TIERS, reservation_granularity=16),
        make_policy("conservative"),
    )
    acts = g.arrive(req(1, prompt=100, max_out=101), 0.0)
    assert isinstance(acts[0], Admit) and acts[0].lease.reserved_tokens == 208


def test_unlimited_admits_everything_that_is_not_too_large() -> None:
    g = gw("unlimited", capacity=100)
    for i in range(50):
        acts = g.arrive(req(i, prompt=40, max_out=40, t=float(i)), float(i))
        assert isinstance(acts[0], Admit) and acts[0].lease.reserved_tokens == 0


def test_preemptive_revokes_newest_batch_leases_first() -> None:
    g = gw("preemptive", capacity=1000, overcommit_ratio=1.0)
    for i, t in enumerate([0.0, 1.0, 2.0]):
        acts = g.arrive(req(i, tier="batch", prompt=150, max_out=150, t=t), t)
        assert isinstance(acts[0], Admit)
    acts = g.arrive(req(9, prompt=300, max_out=300, t=3.0), 3.0)
    revoked = [a.request.request_id for a in acts if isinstance(a, Revoke)]
    admitted = [a.request.request_id for a in acts if isinstance(a, Admit)]
    assert revoked == [2, 1]  # newest first, only as many as needed
    assert admitted == [9]
    assert all(a.requeued for a in acts if isinstance(a, Revoke))
    assert g.num_waiting("batch") == 2
    # the re-queued batch requests keep arrival order and are re-admitted when room returns
    acts = g.finish(9, 300, 4.0)
    assert [a.request.request_id for a in acts if isinstance(a, Admit)] == [1, 2]


def test_preemptive_defer_pauses_batch_while_interactive_waits() -> None:
    g = gw("preemptive", capacity=600, mode="defer", overcommit_ratio=1.0)
    g.arrive(req(0, tier="batch", prompt=200, max_out=200), 0.0)
    assert g.arrive(req(1, prompt=200, max_out=200, t=1.0), 1.0) == []  # interactive waits
    assert g.arrive(req(2, tier="batch", prompt=50, max_out=50, t=2.0), 2.0) == []
    acts = g.finish(0, 100, 3.0)
    assert [a.request.request_id for a in acts if isinstance(a, Admit)] == [1, 2]


def test_revoked_request_that_never_returns_is_dropped_as_preempted() -> None:
    g = gw("preemptive", capacity=600, overcommit_ratio=1.0)
    g.arrive(req(0, tier="batch", prompt=250, max_out=250), 0.0)
    g.arrive(req(1, prompt=200, max_out=200, t=1.0), 1.0)
    g.arrive(req(2, prompt=200, max_out=200, t=1.5), 1.5)
    drop = g.advance(1.0 + 60.0)
    reasons = [
        a.error.reason for a in drop if isinstance(a, Reject) and isinstance(a.error, Overloaded)
    ]
    assert reasons == ["deadline", "preempted"]  # request 2 times out; 0 never returns


def test_lease_expiry_revokes_and_rejects() -> None:
    g = Gateway(
        GatewayConfig(capacity_tokens=1000, tiers=TIERS, lease_ttl_s=10.0),
        make_policy("conservative"),
    )
    g.arrive(req(1), 0.0)
    acts = g.advance(10.0)
    assert [type(a).__name__ for a in acts] == ["Revoke", "Reject"]
    assert g.budget.reserved_tokens == 0


def test_time_must_not_go_backwards() -> None:
    g = gw("conservative")
    g.arrive(req(1, t=5.0), 5.0)
    with pytest.raises(ValueError, match="backwards"):
        g.advance(4.0)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("nope", {}, "unknown policy 'nope'"),
        ("overcommit", {"overcommit_ratio": 0}, "(0, 1]"),
        ("overcommit", {"ratio": 0.5}, "no parameter 'ratio'"),
        # a policy without an __init__ of its own: no parameters (not object's *args, **kwargs)
        ("unlimited", {"args": 1}, "no parameter 'args'; its parameters: none"),
        ("preemptive", {"mode": "kill"}, "'kill'"),
    ],
)
def test_policy_validation_quotes_the_value(
    name: str, params: dict[str, object], match: str
) -> None:
    with pytest.raises(
        ValueError,
        match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        make_policy(name, params)


def test_policy_parameters_of_every_registered_policy_are_its_init_keywords() -> None:
    import inspect

    from kvbudget.policies import POLICIES, policy_parameters

    assert policy_parameters("unlimited") == {}
    for name, cls in POLICIES.items():
        if cls.__init__ is not object.__init__:
            own = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
            assert list(policy_parameters(name)) == own, name


@pytest.mark.parametrize("by", ["tier", "request"])
def test_a_wait_of_zero_admits_what_fits_now_and_refuses_what_would_wait(by: str) -> None:
    """A deadline that has come as the request arrives (a tier's ``queue_timeout_s = 0``, or a
    request's own ``deadline_s`` at its arrival: ``kvbudget serve``'s ``x-kvbudget-deadline-s:
    0``) means "admit now or refuse": into room that is free it is admitted; where it would
    have to wait it is refused (``deadline``) at once, and the requests behind it go on. It
    was refused before any admission, into an empty budget too."""
    tiers = (TierConfig("interactive", max_sequence_tokens=1000, priority=0,
                        queue_timeout_s=0.0 if by == "tier" else 5.0),)
    g = Gateway(GatewayConfig(capacity_tokens=1000, tiers=tiers), make_policy("conservative"))

    def arrive(i: int, size: int, t: float) -> list[object]:
        r = Request(i, "interactive", t, size // 2, size // 2,
                    deadline_s=t if by == "request" else None)
        return list(g.arrive(r, t))

    [first] = arrive(1, 600, 1.0)
    assert isinstance(first, Admit)
    [second] = arrive(2, 600, 2.0)  # 400 tokens free: it would wait
    assert isinstance(second, Reject) and isinstance(second.error, Overloaded)
    assert second.error.reason == "deadline"
    [third] = arrive(3, 400, 3.0)  # fits beside the first
    assert isinstance(third, Admit)
    assert g.num_waiting() == 0 and g.next_timer_s() is None
    assert g.budget.reserved_tokens == 1000
