from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.policies import TokenBudget


def test_reserve_settle_release_counters() -> None:
    b = TokenBudget(1000)
    lease = b.try_reserve("interactive", 400, holder=1)
    assert lease is not None
    assert b.reserved_tokens == 400 and b.available("interactive") == 600
    lease.settle(250)
    assert b.used_tokens == 250
    lease.settle(300)  # a later settle replaces the earlier figure
    assert b.used_tokens == 300
    assert lease.release() is True
    assert b.reserved_tokens == 0 and b.used_tokens == 0 and b.available("batch") == 1000
    assert lease.release() is False  # idempotent
    assert b.reserved_tokens == 0 and b.num_leases == 0


def test_no_room_returns_none_and_changes_nothing() -> None:
    b = TokenBudget(100)
    assert b.try_reserve("batch", 101) is None
    assert b.reserved_tokens == 0 and b.num_leases == 0


def test_guaranteed_pools_are_private() -> None:
    b = TokenBudget(1000, {"interactive": 300})
    assert b.shared_capacity == 700
    big = b.try_reserve("batch", 700)
    assert big is not None
    assert b.try_reserve("batch", 1) is None  # the interactive pool is not lent
    small = b.try_reserve("interactive", 300)
    assert small is not None and small.from_guaranteed == 300 and small.from_shared == 0
    big.release()
    mixed = b.try_reserve("interactive", 100)
    assert mixed is not None and mixed.from_shared == 100
    small.release()
    assert b.available("interactive") == 300 + 600


def test_expiry_releases_due_leases_only() -> None:
    b = TokenBudget(100)
    a = b.try_reserve("batch", 10, expires_at=5.0)
    c = b.try_reserve("batch", 20, expires_at=9.0)
    assert a is not None and c is not None
    assert b.next_expiry_s() == 5.0
    assert b.expire(4.9) == []
    assert b.expire(5.0) == [a]
    assert a.released and not c.released
    assert b.reserved_tokens == 20 and b.next_expiry_s() == 9.0
    a.release()
    assert b.reserved_tokens == 20


@pytest.mark.parametrize(
    ("capacity", "guaranteed", "match"),
    [(-1, None, "capacity_tokens"), (10, {"a": 11}, "exceed"), (10, {"a": -1}, "'a'")],
)
def test_validation_quotes_the_value(
    capacity: int, guaranteed: dict[str, int] | None, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        TokenBudget(capacity, guaranteed)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["reserve", "release", "settle"]), st.integers(0, 400)),
        max_size=60,
    )
)
def test_ledger_never_oversubscribes_and_double_release_is_a_no_op(
    ops: list[tuple[str, int]],
) -> None:
    b = TokenBudget(1000, {"interactive": 200})
    leases = []
    for op, x in ops:
        if op == "reserve":
            lease = b.try_reserve("interactive" if x % 2 else "batch", x)
            if lease is not None:
                leases.append(lease)
        elif leases:
            lease = leases[x % len(leases)]
            if op == "release":
                before = (b.reserved_tokens, b.used_tokens, b.available("batch"))
                released = lease.release()
                if not released:
                    assert (b.reserved_tokens, b.used_tokens, b.available("batch")) == before
            else:
                lease.settle(x)
        assert 0 <= b.reserved_tokens <= 1000
        live = [lease for lease in leases if not lease.released]
        assert b.reserved_tokens == sum(lease.reserved_tokens for lease in live)
        assert b.used_tokens == sum(lease.used_tokens for lease in live)
