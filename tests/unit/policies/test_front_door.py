"""Front-door caps at the gateway: concurrency (TGI, 429), queued requests and tokens (vLLM, 503),
per-tier queue caps, and eviction of lower-priority waiting requests."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import (
    Admit,
    Gateway,
    GatewayConfig,
    Overloaded,
    Reject,
    Request,
    TierConfig,
    make_policy,
)
from kvbudget.policies.gateway import FrontDoor
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from tests.conftest import make_workload

TIERS = (
    TierConfig("interactive", max_sequence_tokens=1000, priority=0, queue_timeout_s=None),
    TierConfig("batch", max_sequence_tokens=1000, priority=1, queue_timeout_s=None,
               retryable_on_overload=True),
    TierConfig("bulk", max_sequence_tokens=1000, priority=2, queue_timeout_s=None),
)


class Probe:
    def __init__(self) -> None:
        self.outputs: dict[int, int] = {}
        self.num_preemptions_total = 0

    def num_output_tokens(self, request_id: int) -> int:
        return self.outputs.get(request_id, 0)


def gw(door: FrontDoor, capacity: int = 1000, probe: Probe | None = None) -> Gateway:
    return Gateway(
        GatewayConfig(capacity_tokens=capacity, tiers=TIERS, front_door=door),
        make_policy("conservative"),
        probe,
    )


def req(i: int, tier: str = "interactive", prompt: int = 100, max_out: int = 100) -> Request:
    return Request(i, tier, float(i), prompt, max_out)


def refusal(actions: Sequence[object]) -> Overloaded:
    assert len(actions) == 1 and isinstance(actions[0], Reject), actions
    err = actions[0].error
    assert isinstance(err, Overloaded)
    return err


def test_default_front_door_is_tgis_128_concurrent_requests() -> None:
    door = FrontDoor()
    assert door.max_concurrent_requests == 128
    assert door.max_num_queued_requests is None and door.max_num_queued_tokens is None


def test_max_concurrent_requests_counts_waiting_and_admitted_and_answers_429() -> None:
    g = gw(FrontDoor(max_concurrent_requests=3), capacity=400)
    assert isinstance(g.arrive(req(0), 0.0)[0], Admit)
    assert isinstance(g.arrive(req(1), 1.0)[0], Admit)
    assert g.arrive(req(2), 2.0) == []  # waits: 3 in flight
    err = refusal(g.arrive(req(3), 3.0))
    assert err.reason == "concurrency" and err.retryable  # HTTP 429
    g.finish(0, 10, 4.0)  # request 2 is admitted; 2 in flight
    assert g.arrive(req(4), 5.0) == []


def test_max_num_queued_requests_answers_503() -> None:
    g = gw(FrontDoor(max_concurrent_requests=None, max_num_queued_requests=2), capacity=200)
    g.arrive(req(0), 0.0)
    g.arrive(req(1), 1.0)
    err = refusal(g.arrive(req(2), 2.0))
    assert err.reason == "queue_full" and not err.retryable  # HTTP 503


def test_max_num_queued_tokens_counts_prompts_not_yet_past_prefill() -> None:
    probe = Probe()
    door = FrontDoor(max_concurrent_requests=None, max_num_queued_tokens=450)
    g = gw(door, capacity=300, probe=probe)
    g.arrive(req(0, prompt=150), 0.0)  # admitted, no output yet: 150 queued tokens
    g.arrive(req(1, prompt=150), 1.0)  # waits: 300
    assert g.arrive(req(2, prompt=150), 2.0) == []  # exactly 450: accepted
    assert refusal(g.arrive(req(3, prompt=1), 3.0)).reason == "queue_full"
    probe.outputs[0] = 1  # request 0 is decoding: its prompt no longer counts
    assert g.arrive(req(4, prompt=150), 4.0) == []


def test_tier_queue_caps_refuse_only_their_tier() -> None:
    door = FrontDoor(max_concurrent_requests=None, tier_max_queued=(("batch", 1),))
    g = gw(door, capacity=200)
    g.arrive(req(0), 0.0)  # fills the budget
    assert g.arrive(req(1, tier="batch"), 1.0) == []
    assert refusal(g.arrive(req(2, tier="batch"), 2.0)).reason == "queue_full"
    assert g.arrive(req(3), 3.0) == []
    assert g.arrive(req(4), 4.0) == []


def test_a_higher_priority_arrival_evicts_the_lowest_priority_latest_waiting_request() -> None:
    g = gw(FrontDoor(max_concurrent_requests=4), capacity=200)
    g.arrive(req(0), 0.0)  # admitted
    g.arrive(req(1, tier="bulk"), 1.0)
    g.arrive(req(2, tier="batch"), 2.0)
    g.arrive(req(3, tier="bulk"), 3.0)  # 4 in flight
    acts = g.arrive(req(4, tier="batch"), 4.0)
    assert len(acts) == 1 and isinstance(acts[0], Reject)
    assert acts[0].request.request_id == 3  # lowest priority, latest arrival
    err = acts[0].error
    assert isinstance(err, Overloaded) and err.reason == "evicted"
    assert g.num_waiting("batch") == 2 and g.num_waiting("bulk") == 1
    # an arrival of the lowest tier evicts nobody
    assert refusal(g.arrive(req(5, tier="bulk"), 5.0)).reason == "concurrency"
    # request 1 (bulk) goes next, then the batch requests for an interactive arrival
    acts = g.arrive(req(6), 6.0)
    assert [a.request.request_id for a in acts] == [1]


def test_eviction_takes_as_many_as_the_token_cap_needs_or_none() -> None:
    door = FrontDoor(max_concurrent_requests=None, max_num_queued_tokens=600)
    g = gw(door, capacity=450, probe=Probe())
    g.arrive(req(0, prompt=100, max_out=350), 0.0)  # admitted, no output yet: 100 queued
    g.arrive(req(1, tier="batch", prompt=200), 1.0)
    g.arrive(req(2, tier="batch", prompt=200), 2.0)  # 500
    acts = g.arrive(req(3, prompt=350), 3.0)  # 850: both batch requests must go
    assert sorted(a.request.request_id for a in acts if isinstance(a, Reject)) == [1, 2]
    assert g.num_waiting("interactive") == 1
    # when evicting every lower-priority request would not make room: refused, none evicted
    g2 = gw(door, capacity=600, probe=Probe())
    g2.arrive(req(0, prompt=100, max_out=500), 0.0)
    g2.arrive(req(1, tier="batch", prompt=100), 1.0)
    assert refusal(g2.arrive(req(2, prompt=501, max_out=99), 2.0)).reason == "queue_full"
    assert g2.num_waiting("batch") == 1


def test_without_eviction_the_arrival_is_refused() -> None:
    door = FrontDoor(max_concurrent_requests=2, evict_lower_priority=False)
    g = gw(door, capacity=200)
    g.arrive(req(0), 0.0)
    g.arrive(req(1, tier="bulk"), 1.0)
    assert refusal(g.arrive(req(2), 2.0)).reason == "concurrency"
    assert g.num_waiting("bulk") == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_concurrent_requests": 0}, "max_concurrent_requests"),
        ({"max_num_queued_tokens": 1.5}, "max_num_queued_tokens"),
        ({"tier_max_queued": (("batch", -1),)}, "tier_max_queued"),
        ({"tier_max_queued": (("batch", 1), ("batch", 2))}, "twice"),
    ],
)
def test_front_door_validation_quotes_the_value(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FrontDoor(**kwargs)  # type: ignore[arg-type]


def test_unknown_tier_in_a_tier_cap_is_named() -> None:
    with pytest.raises(ValueError, match="'gold'"):
        GatewayConfig(
            capacity_tokens=10, tiers=TIERS, front_door=FrontDoor(tier_max_queued=(("gold", 1),))
        )


def test_front_door_rejections_show_in_the_simulated_records_and_summary() -> None:
    # 10 requests at once against 3 concurrent slots: 3 run, 7 are refused with 429
    w = make_workload([0.0] * 10, [50] * 10, [20] * 10)
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=1000),
        tiers=(TierConfig("interactive", queue_timeout_s=None),),
        cost_model=LinearCostModel(0.01, 0.0, 0.0, 0.0),
        front_door=FrontDoor(max_concurrent_requests=3),
    )
    res = simulate(w, make_policy("unlimited"), cfg)
    assert list(res.records.status).count("completed") == 3
    refused = res.records[res.records.status == "rejected_overloaded"]
    assert len(refused) == 7 and set(refused.reason) == {"concurrency"}
    assert res.summary["overall"]["rejections_by_reason"] == {"concurrency": 7}
