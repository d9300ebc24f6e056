"""A gateway budget that moves at given times (``SimConfig.gateway_capacity_schedule``), worked
by hand: a live ``kvbudget serve`` budget re-read from its upstreams while it ran was simulated
as one budget throughout. Budgets in tokens; reservations rounded to vLLM's 16-token blocks.

Request A (0 s) and B (1 s) each reserve prompt 100 + max_tokens 2,000 = 2,100, 2,112 in
blocks; A's 2,000 tokens take far longer than 5 s on the default engine. With 2,200 tokens
B waits for A (88 left); a budget of 5,000 from 5 s admits B then, exactly; one of 4,300 from
0.5 s (before B arrives, nothing waiting) admits B as it arrives; one down to 1,000 at 2 s
admits nothing, and its 5,000 at 5 s admits B then."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.policies import make_policy
from kvbudget.policies.tiers import TierConfig
from kvbudget.simulator.budget_moves import BudgetMoves
from kvbudget.simulator.run import simulate
from kvbudget.simulator.sim_config import FleetConfig, SimConfig
from kvbudget.workloads import from_columns

TIERS = (TierConfig("chat", max_sequence_tokens=8192, queue_timeout_s=None),)


def _admitted(schedule: tuple[tuple[float, int], ...]) -> list[float]:
    w = from_columns([0.0, 1.0], [100, 100], [2000, 2000], tiers=["chat", "chat"])
    config = SimConfig(
        tiers=TIERS, gateway_capacity_tokens=2200, gateway_capacity_schedule=schedule
    )
    records = simulate(w, make_policy("conservative", {}), config).records
    assert list(records["reserved_tokens"]) == [2112, 2112]
    assert list(records["status"]) == ["completed", "completed"]
    return [float(t) for t in records["admitted_s"]]


def test_a_budget_moved_at_given_times_admits_then() -> None:
    first_end = _admitted(())[1]
    assert first_end > 10.0  # without a move, B waits for A's end
    assert _admitted(((5.0, 5000),)) == [0.0, 5.0]
    assert _admitted(((0.5, 4300),)) == [0.0, 1.0]
    assert _admitted(((2.0, 1000), (5.0, 5000))) == [0.0, 5.0]
    assert _admitted(((0.5, 4223),)) == [0.0, first_end]  # one token short of two leases


def test_moves_passed_without_a_gateway_call_take_the_last() -> None:
    moves = BudgetMoves(((1.0, 10), (2.0, 20), (3.0, 30)))
    assert moves.next_s == 1.0 and moves.due(0.5) is None
    assert moves.due(2.5) == 20 and moves.next_s == 3.0
    assert moves.due(9.0) == 30 and moves.next_s == math.inf and moves.due(10.0) is None


@pytest.mark.parametrize(
    ("schedule", "said"),
    [
        (((1.0, 10), (1.0, 20)), "gateway_capacity_schedule[1]: time_s must be finite"),
        (((-1.0, 10),), "gateway_capacity_schedule[0]: time_s"),
        (((1.0, 0),), "gateway_capacity_schedule[0]: budget must be a whole number >= 1"),
        (((1.0, 2.5),), "budget must be a whole number"),
        ((1.0,), "gateway_capacity_schedule[0] must be (time_s, budget)"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_entry(
    schedule: tuple[object, ...], said: str
) -> None:
    with pytest.raises(
        ValueError,
        match=said.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)"),
    ):
        SimConfig(tiers=TIERS, gateway_capacity_schedule=schedule)  # type: ignore[arg-type]


def test_a_fleet_of_gateways_a_replica_refuses_a_schedule() -> None:
    w = from_columns(np.array([0.0]), [100], [10])
    config = SimConfig(
        fleet=FleetConfig(num_replicas=2, budget="per_replica"),
        gateway_capacity_schedule=((1.0, 1000),),
    )
    with pytest.raises(ValueError, match="moves one gateway's budget"):
        simulate(w, make_policy("conservative", {}), config)
