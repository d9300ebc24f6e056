"""Known answers for the learned and adaptive policies (quantile, adaptive, peak, early_reject)."""

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
from kvbudget.policies.learned import Adaptive, Peak, Quantile, predicted_peak_tokens
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from tests.conftest import make_workload

TIERS = (
    TierConfig("interactive", max_sequence_tokens=10_000, priority=0, queue_timeout_s=None),
    TierConfig(
        "batch",
        max_sequence_tokens=10_000,
        priority=1,
        queue_timeout_s=None,
        retryable_on_overload=True,
    ),
)


class Probe:
    """A stand-in for the engine: output tokens per admitted request, set by the test."""

    def __init__(self) -> None:
        self.outputs: dict[int, int] = {}
        self.num_preemptions_total = 0

    def num_output_tokens(self, request_id: int) -> int:
        return self.outputs.get(request_id, 0)


def gateway(policy: object, capacity: int = 100_000, probe: Probe | None = None) -> Gateway:
    return Gateway(GatewayConfig(capacity_tokens=capacity, tiers=TIERS), policy, probe)  # type: ignore[arg-type]


def req(i: int, prompt: int = 100, max_out: int = 1000, tier: str = "interactive") -> Request:
    return Request(i, tier, 0.0, prompt, max_out)


def admitted_lease(actions: Sequence[object], request_id: int) -> int:
    for a in actions:
        if isinstance(a, Admit) and a.request.request_id == request_id:
            return a.lease.reserved_tokens
    raise AssertionError(f"request {request_id} was not admitted: {actions}")


# --- quantile ---------------------------------------------------------------------------------


def complete(g: Gateway, rid: int, output: int, tier: str = "interactive") -> None:
    g.arrive(req(rid, tier=tier), 0.0)
    g.finish(rid, output, 0.0)


def test_quantile_reserves_the_worst_case_until_it_has_enough_samples() -> None:
    g = gateway(Quantile(quantile=0.9, min_samples=10, window=100))
    for k in range(9):
        complete(g, k, 50)
    assert admitted_lease(g.arrive(req(100), 0.0), 100) == 100 + 1000


def test_quantile_reserves_the_observed_quantile_of_output_lengths() -> None:
    policy = Quantile(quantile=0.9, min_samples=10, window=100)
    g = gateway(policy)
    for k in range(100):  # outputs 1..100 in shuffled order
        complete(g, k, (k * 37) % 100 + 1)
    # the 90th of 100 sorted samples 1..100 is 90
    assert policy.learned_output_tokens("interactive") == 90
    assert admitted_lease(g.arrive(req(500, prompt=200, max_out=1000), 0.0), 500) == 200 + 90
    # capped by the request's own max_output_tokens
    assert admitted_lease(g.arrive(req(501, prompt=200, max_out=40), 0.0), 501) == 200 + 40
    # tiers learn apart: batch is still in warm-up
    lease = admitted_lease(g.arrive(req(502, tier="batch", max_out=700), 0.0), 502)
    assert lease == 100 + 700


def test_quantile_forgets_samples_older_than_its_window() -> None:
    policy = Quantile(quantile=0.5, min_samples=10, window=20)
    g = gateway(policy)
    for k in range(20):
        complete(g, k, 900)
    assert policy.learned_output_tokens("interactive") == 900
    for k in range(20, 40):
        complete(g, k, 30)
    assert policy.learned_output_tokens("interactive") == 30


def test_quantile_in_the_simulator_reserves_the_true_output_length() -> None:
    # every request declares 1000 tokens and generates 100: after the warm-up the quantile
    # policy reserves prompt + 100 (rounded up to the 16-token block), conservative 1100
    n = 40
    w = make_workload(
        [0.5 * k for k in range(n)], [100] * n, [100] * n, max_output_tokens=[1000] * n
    )
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=2000),
        tiers=TIERS,
        cost_model=LinearCostModel(0.01, 0.0, 0.0, 0.0),
    )
    rec = simulate(w, make_policy("quantile", {"min_samples": 5}), cfg).records
    assert (rec.status == "completed").all()
    assert list(rec.reserved_tokens[:5]) == [1104] * 5  # warm-up: the worst case, in blocks
    assert list(rec.reserved_tokens[-10:]) == [208] * 10


# --- adaptive ---------------------------------------------------------------------------------


def test_adaptive_ratio_decays_linearly_to_its_floor_like_sglang() -> None:
    policy = Adaptive()
    assert policy.new_token_ratio == pytest.approx(0.7)
    probe = Probe()
    g = gateway(policy, probe=probe)
    g.arrive(req(0), 0.0)  # keeps one request admitted so completions do not reset the ratio
    for k in range(1, 301):
        g.arrive(req(k), 0.0)
        g.finish(k, 10, 0.0)
    decay = (0.7 - 0.7 * 0.14) / 600
    assert policy.new_token_ratio == pytest.approx(0.7 - 300 * decay)
    for k in range(301, 1001):
        g.arrive(req(k), 0.0)
        g.finish(k, 10, 0.0)
    assert policy.new_token_ratio == pytest.approx(0.7 * 0.14)
    assert Adaptive(schedule_conservativeness=0.5).new_token_ratio == pytest.approx(0.35)


@pytest.mark.parametrize(
    ("output_so_far", "max_out", "admitted"),
    [
        # charged 100 + 0.7 * 400 = 380: a candidate needs prompt + max_output < 620
        (0, 519, True),
        (0, 520, False),
        # after 300 tokens: 100 + 300 + 0.7 * 100 = 470, so below 530
        (300, 429, True),
        (300, 430, False),
    ],
)
def test_adaptive_charges_running_requests_ratio_times_remaining_output(
    output_so_far: int, max_out: int, admitted: bool
) -> None:
    probe = Probe()
    g = gateway(Adaptive(), capacity=1000, probe=probe)
    g.arrive(req(0, prompt=100, max_out=400), 0.0)
    probe.outputs[0] = output_so_far
    acts = g.arrive(req(1, prompt=100, max_out=max_out), 0.0)
    assert bool(acts) is admitted
    if admitted:
        assert admitted_lease(acts, 1) == 100  # the lease holds the prompt only


def test_adaptive_raises_the_ratio_after_a_preemption_and_resets_when_idle() -> None:
    probe = Probe()
    policy = Adaptive()
    g = gateway(policy, capacity=10_000, probe=probe)
    g.arrive(req(0, prompt=100, max_out=400), 0.0)
    probe.outputs[0] = 390
    g.engine_preempted(0, 0.0)
    # (390 decoded + 20 steps * 1 request) / (400 + 1) > 1 -> 1.0
    assert policy.new_token_ratio == 1.0
    g.finish(0, 400, 0.0)  # nothing admitted any more: back to the initial ratio
    assert policy.new_token_ratio == pytest.approx(0.7)


def test_adaptive_keeps_strict_tier_priority() -> None:
    g = gateway(Adaptive(), capacity=1000)
    g.arrive(req(0, prompt=100, max_out=400), 0.0)
    assert g.arrive(req(1, prompt=100, max_out=800), 0.0) == []  # interactive waits
    assert g.arrive(req(2, prompt=10, max_out=10, tier="batch"), 0.0) == []  # behind it


# --- peak ---------------------------------------------------------------------------------------


def test_predicted_peak_matches_lightllms_worked_example() -> None:
    # LightLLM's router README example: (tokens now, output to come) -> peak 31
    assert predicted_peak_tokens([(5, 4), (4, 3), (5, 3), (3, 2), (4, 2)]) == 31
    assert predicted_peak_tokens([]) == 0


def test_peak_admits_when_the_predicted_peak_fits_not_the_sum_of_worst_cases() -> None:
    probe = Probe()
    g = gateway(Peak(), capacity=1000, probe=probe)
    g.arrive(req(0, prompt=100, max_out=600), 0.0)
    probe.outputs[0] = 450  # holds 550 tokens, 149 more to come
    # candidate (101, 499): peaks 499 + 101 = 600 and 149 * 2 + 651 = 949 <= 1000, though the
    # two worst cases sum to 1300
    assert admitted_lease(g.arrive(req(1, prompt=100, max_out=500), 0.0), 1) == 100
    g.finish(1, 500, 0.0)
    # candidate (201, 699): 699 + 201 = 900, then 149 * 2 + 751 = 1049 > 1000
    assert g.arrive(req(2, prompt=200, max_out=700), 0.0) == []


def test_peak_uses_the_optimistic_estimate_only_when_not_busy() -> None:
    busy = Peak()  # router_token_ratio 0: always busy, worst case
    relaxed = Peak(router_max_new_token_len=100, router_token_ratio=0.9)
    for policy, expected in ((busy, False), (relaxed, True)):
        g = gateway(policy, capacity=1000)
        # worst cases: two of (100, 600) peak at 1399; estimated at 100 output tokens, 399
        g.arrive(req(0, prompt=100, max_out=600), 0.0)
        admitted = bool(g.arrive(req(1, prompt=100, max_out=600), 0.0))
        assert admitted is expected


def test_peak_admits_more_than_conservative_without_any_preemption() -> None:
    # 300 KV tokens (1-token blocks); worst cases 250 + 150 + 100: conservative admits one at a
    # time, peak all three at once, and the engine never runs out (its prediction is exact)
    w = make_workload([0.0, 0.0, 0.0], [50, 50, 50], [200, 100, 50])
    tiers = (TierConfig("interactive", queue_timeout_s=None),)
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=300, block_size=1),
        tiers=tiers,
        cost_model=LinearCostModel(0.01, 0.0, 0.0, 0.0),
    )
    peak = simulate(w, make_policy("peak"), cfg)
    assert list(peak.records.admitted_s) == [0.0, 0.0, 0.0]
    assert peak.summary["engine"]["num_engine_preemptions"] == 0
    cons = simulate(w, make_policy("conservative"), cfg)
    assert cons.records.admitted_s[1] > 0


# --- early_reject ------------------------------------------------------------------------------


def test_early_reject_refuses_when_queued_prefill_would_miss_the_ttft_slo() -> None:
    tiers = (
        TierConfig("interactive", priority=0, ttft_s=2.0, queue_timeout_s=None),
        TierConfig("batch", priority=1, ttft_s=10.0, queue_timeout_s=None),
    )
    probe = Probe()
    g = Gateway(
        GatewayConfig(capacity_tokens=6000, tiers=tiers),
        make_policy("early_reject", {"prefill_tokens_per_s": 1000.0}),
        probe,
    )
    g.arrive(Request(0, "interactive", 0.0, 1000, 5000), 0.0)  # admitted: fills the budget
    g.arrive(Request(1, "interactive", 0.0, 500, 100), 0.0)  # waits
    g.arrive(Request(2, "batch", 0.0, 5000, 100), 0.0)  # waits, behind interactive
    # queued ahead of an interactive arrival: 500 waiting + 1000 admitted with no token yet
    acts = g.arrive(Request(3, "interactive", 0.0, 501, 100), 0.0)
    assert len(acts) == 1 and isinstance(acts[0], Reject)
    assert isinstance(acts[0].error, Overloaded) and acts[0].error.reason == "slo"
    assert g.arrive(Request(4, "interactive", 0.0, 499, 100), 0.0) == []  # 1.999 s: queued
    # once the admitted request produced its first token its prompt is no longer queued work
    probe.outputs[0] = 1
    assert g.arrive(Request(5, "interactive", 0.0, 900, 100), 0.0) == []
    # batch sees the interactive queue ahead of it too (500 + 499 + 900 + its own 5000),
    # against its own 10 s SLO
    assert g.arrive(Request(6, "batch", 0.0, 10_000 - 6899, 100), 0.0) == []
    acts = g.arrive(Request(7, "batch", 0.0, 10_000 - 6899 - 3101 + 1, 100), 0.0)
    assert len(acts) == 1 and isinstance(acts[0], Reject)


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("quantile", {"quantile": 0}, "quantile must be in"),
        ("quantile", {"min_samples": 50, "window": 10}, "window"),
        ("adaptive", {"schedule_conservativeness": 0}, "schedule_conservativeness"),
        ("adaptive", {"min_new_token_ratio_factor": 2}, "min_new_token_ratio_factor"),
        ("peak", {"router_token_ratio": 1.5}, "router_token_ratio"),
        ("early_reject", {"prefill_tokens_per_s": -1}, "prefill_tokens_per_s"),
    ],
)
def test_parameters_are_validated_with_the_bad_value(
    name: str, params: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        make_policy(name, params)


def test_every_new_policy_is_registered_and_describes_itself() -> None:
    for name in ("quantile", "adaptive", "peak", "early_reject"):
        described = make_policy(name).describe()
        assert described["name"] == name
