"""Resizing the budget while leases are held (``kvbudget serve`` reads a live engine's KV
capacity again): the shared pool takes the change, held leases stay, and nothing is admitted
beyond the new capacity until enough is released."""

from __future__ import annotations

import pytest

from kvbudget.policies import Admit, Gateway, GatewayConfig, Request, TierConfig, make_policy
from kvbudget.policies.budget import TokenBudget


def test_shrinking_below_what_is_held_admits_only_from_guarantees_until_released() -> None:
    budget = TokenBudget(100, {"interactive": 20})
    held = budget.try_reserve("batch", 70)
    assert held is not None
    budget.resize(50)  # shared: 30 tokens, 70 of them held
    assert budget.capacity_tokens == 50 and budget.available("batch") == 0
    assert budget.try_reserve("batch", 1) is None
    guaranteed = budget.try_reserve("interactive", 20)
    assert guaranteed is not None and guaranteed.from_guaranteed == 20
    held.release()
    assert budget.available("batch") == 30
    with pytest.raises(ValueError, match="below the guaranteed pools"):
        budget.resize(19)


def test_growing_the_gateway_admits_what_now_fits() -> None:
    tiers = (TierConfig("interactive", max_sequence_tokens=100, queue_timeout_s=None),)
    gw = Gateway(GatewayConfig(capacity_tokens=60, tiers=tiers), make_policy("conservative"))
    first = Request(0, "interactive", 0.0, 10, 40)
    second = Request(1, "interactive", 0.0, 10, 40)
    assert isinstance(gw.arrive(first, 0.0)[0], Admit)
    assert gw.arrive(second, 0.0) == [] and gw.num_waiting() == 1
    actions = gw.resize(100, 1.0)
    assert [type(a) for a in actions] == [Admit] and gw.config.capacity_tokens == 100
    assert gw.budget.reserved_tokens == 100
