"""A lease with a part on a first stage's KV (disaggregated prefill): both parts or neither."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvbudget.policies import Admit, Gateway, GatewayConfig, Request, Revoke, make_policy
from tests.unit.policies.test_gateway import TIERS, req


def two_stage(policy: str = "conservative", first: int = 300, **params: object) -> Gateway:
    config = GatewayConfig(capacity_tokens=1000, tiers=TIERS, first_stage_capacity_tokens=first)
    return Gateway(config, make_policy(policy, params))


def admitted(actions: Sequence[object]) -> list[int]:
    return [a.request.request_id for a in actions if isinstance(a, Admit)]


def test_admitted_only_when_the_first_stage_part_fits_too() -> None:
    """Conservative: 200 tokens on the second stage (prompt 100 + 100), 101 on the first
    (prompt 100 + max_tokens 1). Two fit the first stage's 300, a third waits though the
    second stage has room for it (600 of 1000 would be held)."""
    g = two_stage()
    assert admitted(g.arrive(req(0), 0.0)) == [0]
    assert admitted(g.arrive(req(1), 0.0)) == [1]
    assert admitted(g.arrive(req(2), 0.0)) == []
    assert g.budget.reserved_tokens == 400  # the waiting request holds neither part
    assert g.stage is not None and g.stage.reserved_tokens == 202
    # the first request's KV has moved on: its first-stage part goes, the third is admitted
    assert admitted(g.first_stage_done(0, 1.0)) == [2]
    assert g.stage.reserved_tokens == 202 and g.budget.reserved_tokens == 600
    g.finish(0, 100, 2.0)
    assert g.budget.reserved_tokens == 400
    g.finish(1, 100, 2.0)  # its first-stage part had not gone: the finish gives both back
    assert g.stage.reserved_tokens == 101 and g.budget.reserved_tokens == 200


def test_the_first_stage_part_follows_the_policys_rule() -> None:
    """Overcommit 0.5: prompt + half the output on each part: 150 second, 101 first."""
    g = two_stage("overcommit", first=1000, overcommit_ratio=0.5)
    g.arrive(req(0), 0.0)
    assert g.budget.reserved_tokens == 150
    assert g.stage is not None and g.stage.reserved_tokens == 101


def test_a_revocation_gives_both_parts_back() -> None:
    g = two_stage("preemptive", first=1000, overcommit_ratio=1.0, mode="preempt")
    g.arrive(req(0, "batch", prompt=100, max_out=700), 0.0)
    assert g.stage is not None and g.stage.reserved_tokens == 101
    actions = g.arrive(req(1, prompt=100, max_out=300), 1.0)  # interactive: batch revoked
    assert any(isinstance(a, Revoke) for a in actions)
    assert admitted(actions) == [1]
    assert g.stage.reserved_tokens == 101  # the interactive request's part alone


def test_first_stage_capacity_is_checked() -> None:
    with pytest.raises(ValueError, match="first_stage_capacity_tokens must be >= 1"):
        GatewayConfig(capacity_tokens=10, first_stage_capacity_tokens=0)


def test_without_a_first_stage_nothing_changes() -> None:
    g = Gateway(GatewayConfig(capacity_tokens=1000, tiers=TIERS), make_policy("conservative"))
    assert g.stage is None
    assert admitted(g.arrive(Request(0, "interactive", 0.0, 100, 100), 0.0)) == [0]
    assert g.first_stage_done(0, 1.0) == []


def test_the_first_stage_request_is_the_request_with_one_output_token() -> None:
    import dataclasses

    from kvbudget.policies.stage_leases import StageLeases

    r = Request(7, "batch", 1.5, 300, 200, deadline_s=9.0, prefix_hashes=(4, 5))
    first = StageLeases.first_stage_request(r)
    # built field by field (it runs for every admission): every field but one carried over
    expected = dataclasses.replace(r, max_output_tokens=1)
    assert [getattr(first, f.name) for f in dataclasses.fields(Request)] == [
        getattr(expected, f.name) for f in dataclasses.fields(Request)]
