"""The analysis library (kvbudget.analysis.tables): known answers on hand-made tables, statistical
checks of the bootstrap, properties, and agreement with the simulator's own summary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from kvbudget.analysis import tables as A
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import DEFAULT_TIERS, TierConfig
from kvbudget.results.records import RECORD_COLUMNS, TIMELINE_COLUMNS, derive_latencies

NAN = math.nan


def records(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """A records table from partial rows: event times given, latencies derived as the
    executors do."""
    defaults: dict[str, Any] = {
        "tier": "interactive",
        "arrival_s": 0.0,
        "prompt_tokens": 100,
        "max_output_tokens": 64,
        "output_tokens": 11,
        "status": "completed",
        "reason": "",
        "admitted_s": NAN,
        "first_token_s": NAN,
        "finished_s": NAN,
        "num_preemptions": 0,
        "reserved_tokens": 0,
    }
    full = [{"request_id": i, **defaults, **r} for i, r in enumerate(rows)]
    df = pd.DataFrame(full)
    ttft, tpot, e2e = derive_latencies(
        df["arrival_s"].to_numpy(np.float64),
        df["first_token_s"].to_numpy(np.float64),
        df["finished_s"].to_numpy(np.float64),
        df["output_tokens"].to_numpy(np.int64),
    )
    df["ttft_s"], df["tpot_s"], df["e2e_s"] = ttft, tpot, e2e
    return df[list(RECORD_COLUMNS)]


def done(arrival: float, admitted: float, first: float, finished: float, **kw: Any) -> dict[str, Any]:
    return {"arrival_s": arrival, "admitted_s": admitted, "first_token_s": first,
            "finished_s": finished, **kw}


def random_records(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 100, n))
    wait = rng.exponential(0.5, n)
    engine = rng.exponential(0.2, n)
    decode = rng.exponential(5.0, n)
    rows = [
        done(a, a + w, a + w + e, a + w + e + d,
             tier="interactive" if rng.random() < 0.7 else "batch",
             output_tokens=int(rng.integers(2, 200)))
        for a, w, e, d in zip(arrival, wait, engine, decode, strict=True)
    ]
    return records(rows)


# --- bootstrap ----------------------------------------------------------------------------------


def test_bootstrap_point_estimate_is_numpy_quantile() -> None:
    v = np.random.default_rng(1).exponential(1.0, 301)
    est, low, high = A.bootstrap_quantiles(v, [0.1, 0.5, 0.99], rng=np.random.default_rng(0))
    np.testing.assert_array_equal(est, np.quantile(v, [0.1, 0.5, 0.99]))
    assert np.all(low <= est) and np.all(est <= high)


def test_bootstrap_median_interval_matches_the_exact_bootstrap_distribution() -> None:
    """For an odd n, the bootstrap median is an order statistic and its distribution is known
    exactly: P(median* <= x_(j)) = P(Binomial(n, j/n) >= (n + 1) / 2)."""
    n = 41
    v = np.sort(np.random.default_rng(3).lognormal(0, 1, n))
    _, low, high = A.bootstrap_quantiles(
        v, [0.5], rng=np.random.default_rng(7), num_resamples=40_000
    )
    j = np.arange(1, n + 1)
    cdf = stats.binom.sf((n + 1) // 2 - 1, n, j / n)  # P(Bin >= (n+1)/2)
    lo_idx = int(np.searchsorted(cdf, 0.025))  # first j with cdf >= 2.5%
    hi_idx = int(np.searchsorted(cdf, 0.975))
    assert np.argmin(np.abs(v - low[0])) in (lo_idx - 1, lo_idx, lo_idx + 1)
    assert np.argmin(np.abs(v - high[0])) in (hi_idx - 1, hi_idx, hi_idx + 1)


def test_bootstrap_agrees_with_brute_force_resampling() -> None:
    """The order-statistic shortcut and plain resampling give the same interval (up to Monte
    Carlo noise) for an interpolated quantile."""
    v = np.random.default_rng(5).exponential(2.0, 200)
    rng = np.random.default_rng(11)
    reps = np.quantile(v[rng.integers(0, v.size, size=(8000, v.size))], 0.9, axis=1)
    brute = np.quantile(reps, [0.025, 0.975])
    _, low, high = A.bootstrap_quantiles(v, [0.9], rng=np.random.default_rng(12),
                                         num_resamples=8000)
    scale = brute[1] - brute[0]
    assert abs(low[0] - brute[0]) < 0.08 * scale
    assert abs(high[0] - brute[1]) < 0.08 * scale


def test_bootstrap_interval_covers_the_true_quantile_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(2024)
    true_p90 = stats.expon.ppf(0.9)
    hits = 0
    trials = 300
    for _ in range(trials):
        v = rng.exponential(1.0, 400)
        _, low, high = A.bootstrap_quantiles(v, [0.9], rng=rng, num_resamples=1000)
        hits += int(low[0] <= true_p90 <= high[0])
    assert 0.89 <= hits / trials <= 0.99


def test_bootstrap_edge_cases() -> None:
    rng = np.random.default_rng(0)
    est, low, high = A.bootstrap_quantiles([NAN, math.inf], [0.5], rng=rng)
    assert np.isnan(est).all() and np.isnan(low).all() and np.isnan(high).all()
    est, low, high = A.bootstrap_quantiles([4.0], [0.0, 0.5, 1.0], rng=rng)
    np.testing.assert_array_equal(est, [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(low, [4.0, 4.0, 4.0])
    with pytest.raises(ValueError, match="quantiles must be in"):
        A.bootstrap_quantiles([1.0], [99], rng=rng)
    with pytest.raises(ValueError, match="confidence"):
        A.bootstrap_quantiles([1.0], [0.5], rng=rng, confidence=1.0)
    with pytest.raises(ValueError, match="num_resamples"):
        A.bootstrap_quantiles([1.0], [0.5], rng=rng, num_resamples=0)


def test_percentile_table_is_seeded_and_grouped() -> None:
    rec = random_records(500)
    t1 = A.percentile_table(rec, rng=np.random.default_rng(42))
    t2 = A.percentile_table(rec, rng=np.random.default_rng(42))
    t3 = A.percentile_table(rec, rng=np.random.default_rng(43))
    pd.testing.assert_frame_equal(t1, t2)
    assert not np.array_equal(t1["ci_low"], t3["ci_low"])
    np.testing.assert_array_equal(t1["value"], t3["value"])
    assert list(t1.columns) == ["tier", "metric", "quantile", "name", "n", "value", "ci_low",
                                "ci_high"]
    assert set(t1["tier"]) == {"interactive", "batch"}
    assert len(t1) == 2 * 3 * 3
    sel = t1[(t1["tier"] == "batch") & (t1["metric"] == "e2e_s") & (t1["name"] == "p99")]
    batch = rec[rec["tier"] == "batch"]["e2e_s"].to_numpy()
    assert sel["value"].iloc[0] == pytest.approx(np.quantile(batch, 0.99))
    assert sel["n"].iloc[0] == len(batch)
    no_ci = A.percentile_table(rec, by=())
    assert no_ci["ci_low"].isna().all() and len(no_ci) == 9


def test_quantile_names() -> None:
    assert [A.quantile_name(q) for q in (0.5, 0.9, 0.99, 0.999, 1.0)] == [
        "p50", "p90", "p99", "p99.9", "p100"]


# --- distributions and breakdowns ---------------------------------------------------------------


def test_cdf_data_known_answer() -> None:
    d = A.cdf_data([3.0, 1.0, NAN, 2.0])
    np.testing.assert_array_equal(d["value"], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(d["cdf"], [1 / 3, 2 / 3, 1.0])
    np.testing.assert_allclose(d["ccdf"], [1.0, 2 / 3, 1 / 3])
    assert A.cdf_data([]).empty


def test_cdf_by_groups_completed_requests_only() -> None:
    rec = records([
        done(0, 0, 1, 2, tier="interactive"),
        done(0, 0, 3, 4, tier="interactive"),
        done(0, 0, 5, 6, tier="batch"),
        {"status": "expired", "reason": "deadline", "tier": "batch"},
    ])
    d = A.cdf_by(rec, "ttft_s")
    assert d.groupby("tier").size().to_dict() == {"batch": 1, "interactive": 2}
    assert d[d["tier"] == "interactive"]["value"].tolist() == [1.0, 3.0]


def test_breakdown_counts_outcomes_preemptions_and_slo() -> None:
    tiers = (TierConfig("interactive", ttft_s=1.0, tpot_s=1.0),
             TierConfig("batch", ttft_s=10.0, tpot_s=1.0))
    rec = records([
        done(0, 0, 0.5, 1.5, tier="interactive"),
        done(0, 0, 2.0, 3.0, tier="interactive", num_preemptions=2),
        {"status": "rejected_overloaded", "reason": "queue_full", "tier": "interactive"},
        done(0, 1, 5.0, 9.0, tier="batch"),
        {"status": "expired", "reason": "deadline", "tier": "batch", "num_preemptions": 1},
    ])
    b = A.breakdown(rec, tiers=tiers).set_index("tier")
    assert b.loc["interactive", "offered"] == 3
    assert b.loc["interactive", "completed"] == 2
    assert b.loc["interactive", "rejected_overloaded"] == 1
    assert b.loc["interactive", "num_preemptions"] == 2
    assert b.loc["interactive", "num_preempted_requests"] == 1
    assert b.loc["interactive", "slo_attainment"] == pytest.approx(1 / 3)
    assert b.loc["interactive", "ttft_s_p50"] == pytest.approx(1.25)
    assert b.loc["batch", "expired"] == 1
    assert b.loc["batch", "slo_attainment"] == pytest.approx(0.5)
    assert b.loc["batch", "output_tokens"] == 11


def test_slo_met_scale_and_unknown_tiers() -> None:
    tiers = (TierConfig("interactive", ttft_s=1.0, tpot_s=0.1),)
    rec = records([
        done(0, 0, 0.9, 0.9 + 10 * 0.05, output_tokens=11),  # meets
        done(0, 0, 1.5, 1.5 + 10 * 0.05, output_tokens=11),  # TTFT miss, meets at 2x
        done(0, 0, 0.5, 0.5 + 10 * 0.15, output_tokens=11),  # TPOT miss, meets at 2x
        done(0, 0, 0.5, 1.0, tier="other"),  # no configuration: never
        done(0, 0, 0.5, 0.5, output_tokens=1),  # one token: TTFT alone
    ])
    np.testing.assert_array_equal(A.slo_met(rec, tiers), [True, False, False, False, True])
    np.testing.assert_array_equal(A.slo_met(rec, tiers, scale=2.0), [True, True, True, False, True])
    curve = A.slo_scale_curve(rec, tiers, scales=[0.1, 1.0, 2.0], by=())
    np.testing.assert_allclose(curve["attainment"], [0.0, 0.4, 0.8])
    with pytest.raises(ValueError, match="scale"):
        A.slo_met(rec, tiers, scale=0.0)


def test_outcome_counts_labels_reasons() -> None:
    rec = records([
        {"status": "rejected_overloaded", "reason": "queue_full"},
        {"status": "rejected_overloaded", "reason": "queue_full"},
        {"status": "rejected_too_large"},
        {"status": "expired", "reason": "deadline", "tier": "batch"},
        done(0, 0, 1, 2),
    ])
    c = A.outcome_counts(rec)
    assert c.to_dict("records") == [
        {"tier": "interactive", "outcome": "rejected_overloaded: queue_full", "count": 2},
        {"tier": "interactive", "outcome": "rejected_too_large", "count": 1},
        {"tier": "batch", "outcome": "expired: deadline", "count": 1},
    ]
    assert A.outcome_counts(records([done(0, 0, 1, 2)])).empty


def test_windowed_percentiles_known_answer() -> None:
    rec = records([done(t, t, t + d, t + d + 1) for t, d in
                   [(0.5, 1.0), (3.0, 3.0), (10.0, 2.0), (11.0, 4.0), (25.0, 7.0)]])
    w = A.windowed_percentiles(rec, window_s=10.0, quantiles=[0.5, 1.0], by=())
    assert w["window_start_s"].tolist() == [0.0, 10.0, 20.0]
    assert w["n"].tolist() == [2, 2, 1]
    np.testing.assert_allclose(w["p50"], [2.0, 3.0, 7.0])
    np.testing.assert_allclose(w["p100"], [3.0, 4.0, 7.0])
    with pytest.raises(ValueError, match="window_s"):
        A.windowed_percentiles(rec, window_s=0)


def test_slo_attainment_curve_counts_unfinished_as_misses() -> None:
    rec = records([done(0, 0, 1, 2), done(0, 0, 2, 3), done(0, 0, 4, 5),
                   {"status": "expired", "reason": "deadline"}])
    off = A.slo_attainment_curve(rec, thresholds_s=[0.5, 1.0, 3.0, 10.0], by=())
    np.testing.assert_allclose(off["attainment"], [0.0, 0.25, 0.5, 0.75])
    comp = A.slo_attainment_curve(rec, thresholds_s=[0.5, 1.0, 3.0, 10.0], by=(),
                                  denominator="completed")
    np.testing.assert_allclose(comp["attainment"], [0.0, 1 / 3, 2 / 3, 1.0])
    auto = A.slo_attainment_curve(rec, by=())
    assert len(auto) == 60 and auto["attainment"].iloc[-1] == pytest.approx(0.75)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.001, 100.0), min_size=1, max_size=40),
       st.lists(st.floats(0.001, 100.0), min_size=2, max_size=10))
def test_attainment_is_monotone_in_the_threshold(values: list[float], thr: list[float]) -> None:
    rec = records([done(0, 0, v, v + 1) for v in values])
    curve = A.slo_attainment_curve(rec, thresholds_s=thr, by=())
    assert np.all(np.diff(curve["attainment"].to_numpy()) >= 0)
    assert curve["attainment"].between(0, 1).all()


# --- latency parts ------------------------------------------------------------------------------


def test_isolated_prefill_chunks_like_the_engine() -> None:
    cm = LinearCostModel(intercept_s=0.01, per_prefill_token_s=1e-4, per_decode_seq_s=0.0,
                         per_context_token_s=1e-6, per_prefill_attention_s=1e-9)
    got = A.isolated_prefill_s([100, 250], cm, max_num_batched_tokens=200)
    one = 0.01 + 1e-4 * 100 + 1e-6 * 100 + 1e-9 * 100 * 100
    two = (0.01 + 1e-4 * 200 + 1e-6 * 200 + 1e-9 * 200 * 200) + (
        0.01 + 1e-4 * 50 + 1e-6 * 250 + 1e-9 * 50 * 250)
    np.testing.assert_allclose(got, [one, two])


def test_latency_components_add_up() -> None:
    rec = random_records(200, seed=4)
    pf = np.full(len(rec), 0.05)
    c = A.latency_components(rec, prefill_s=pf)
    np.testing.assert_allclose(c["gateway_wait_s"] + c["engine_queue_s"] + c["prefill_s"],
                               c["ttft_s"], atol=1e-9)
    np.testing.assert_allclose(c["ttft_s"] + c["decode_s"], c["e2e_s"], atol=1e-9)
    assert (c["prefill_s"] <= c["engine_ttft_s"] + 1e-12).all()
    c0 = A.latency_components(rec)
    assert c0["prefill_s"].isna().all()
    np.testing.assert_allclose(c0["engine_queue_s"], c0["engine_ttft_s"])
    with pytest.raises(ValueError, match="one value per record"):
        A.latency_components(rec, prefill_s=pf[:-1])


def test_revoked_and_readmitted_request_counts_its_ttft_as_gateway_wait() -> None:
    """The records keep the last admission; one after the first token must not give a
    negative engine part."""
    rec = records([done(0.0, 5.0, 1.0, 9.0, num_preemptions=1)])
    c = A.latency_components(rec)
    assert c["gateway_wait_s"].iloc[0] == pytest.approx(1.0)
    assert c["engine_ttft_s"].iloc[0] == 0.0
    assert bool(c["preempted"].iloc[0])


def test_tail_attribution_separates_gateway_and_engine_tails() -> None:
    rows = [done(0, 0.0, 0.1, 1.0) for _ in range(95)]
    rows += [done(0, 3.0, 3.1, 4.0) for _ in range(5)]  # slow at the gateway
    rec = records(rows)
    t = A.tail_attribution(rec, quantile=0.95, by=()).set_index("segment")
    assert t.loc["tail", "n"] == 5 and t.loc["body", "n"] == 95
    assert t.loc["tail", "gateway_wait_s"] == pytest.approx(3.0)
    assert t.loc["tail", "engine_queue_s"] == pytest.approx(0.1)
    assert t.loc["body", "gateway_wait_s"] == pytest.approx(0.0)
    assert t.loc["tail", "ttft_s"] == pytest.approx(3.1)


# --- timeline -----------------------------------------------------------------------------------


def timeline(rows: list[tuple[float, int, int, int, int, int]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["time_s", "kv_used_tokens", "kv_reserved_tokens",
                                     "num_running", "num_waiting", "num_preemptions"])
    df["kv_capacity_tokens"] = 1000
    return df[list(TIMELINE_COLUMNS)]


def test_kv_timeline_summary_and_preemption_events() -> None:
    tl = timeline([(0, 0, 0, 0, 0, 0), (1, 400, 800, 4, 2, 0), (2, 800, 600, 8, 5, 3),
                   (3, 200, 200, 2, 0, 3), (4, 0, 0, 0, 0, 4)])
    kv = A.kv_timeline(tl)
    np.testing.assert_allclose(kv["idle_reserved_fraction"], [0, 0.4, 0, 0, 0])
    assert kv["new_preemptions"].tolist() == [0, 0, 3, 0, 1]
    ev = A.preemption_events(tl)
    assert ev.to_dict("records") == [{"time_s": 2.0, "new_preemptions": 3},
                                     {"time_s": 4.0, "new_preemptions": 1}]
    s = A.kv_summary(tl)
    assert s["used_mean_fraction"] == pytest.approx((0 + 0.4 + 0.8 + 0.2) / 4)
    assert s["reserved_mean_fraction"] == pytest.approx((0 + 0.8 + 0.6 + 0.2) / 4)
    assert s["idle_reserved_mean_fraction"] == pytest.approx(0.4 / 4)
    assert s["num_preemptions"] == 4 and s["preemptions_per_s"] == pytest.approx(1.0)
    assert s["max_waiting"] == 5


# --- simulated against measured -----------------------------------------------------------------


def test_quantile_errors_zero_for_identical_and_exact_for_scaled_runs() -> None:
    meas = random_records(300, seed=9)
    err = A.quantile_errors(meas, meas)
    assert (err["error"] == 0).all() and (err["relative_error"] == 0).all()
    sim = meas.copy()
    for m in A.METRICS:
        sim[m] = 2 * sim[m]
    err = A.quantile_errors(sim, meas)
    np.testing.assert_allclose(err["relative_error"], 1.0)
    assert set(err["tier"]) == {"interactive", "batch"}
    assert (err["n_sim"] == err["n_meas"]).all()


def test_join_pairs_on_request_id_and_unpaired_quantiles_use_all_rows() -> None:
    meas = records([done(0, 0, 1, 2), done(0, 0, 2, 4), done(0, 0, 3, 6),
                    {"status": "expired", "reason": "deadline"}])
    sim = records([done(0, 0, 1.5, 2.5), done(0, 0, 2, 4)])  # request ids 0 and 1 only
    j = A.join_measured(sim, meas)
    assert j["request_id"].tolist() == [0, 1]
    np.testing.assert_allclose(j["ttft_s_error"], [0.5, 0.0])
    np.testing.assert_allclose(j["ttft_s_ape"], [0.5, 0.0])
    paired = A.quantile_errors(sim, meas, quantiles=[1.0], by=(), metrics=["ttft_s"])
    assert paired["measured"].iloc[0] == 2.0 and paired["n_meas"].iloc[0] == 2
    unpaired = A.quantile_errors(sim, meas, quantiles=[1.0], by=(), metrics=["ttft_s"],
                                 paired=False)
    assert unpaired["measured"].iloc[0] == 3.0 and unpaired["n_meas"].iloc[0] == 3
    per = A.per_request_errors(j, metrics=["ttft_s"], by=())
    assert per["mape"].iloc[0] == pytest.approx(0.25)
    assert per["mean_error_s"].iloc[0] == pytest.approx(0.25)


def test_join_refuses_duplicate_ids_and_tier_mismatch() -> None:
    a = records([done(0, 0, 1, 2), done(0, 0, 1, 2)])
    b = a.copy()
    b["request_id"] = [0, 0]
    with pytest.raises(ValueError, match="repeat request_id 0"):
        A.join_measured(b, a)
    c = a.copy()
    c.loc[1, "tier"] = "batch"
    with pytest.raises(ValueError, match="request 1 has tier 'batch'"):
        A.join_measured(c, a)


def test_missing_columns_are_named() -> None:
    with pytest.raises(ValueError, match="lacks column 'ttft_s'"):
        A.percentile_table(pd.DataFrame({"status": ["completed"]}))


# --- against the simulator ----------------------------------------------------------------------


def test_analysis_agrees_with_the_simulators_summary() -> None:
    from kvbudget.policies.registry import make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig, simulate
    from tests.conftest import mixed_workload

    w = mixed_workload(400, rate_rps=12.0, seed=1)
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=3000), seed=1)
    run = simulate(w, make_policy("overcommit", {"overcommit_ratio": 0.3}), cfg)
    rec, s = run.records, run.summary
    b = A.breakdown(rec, tiers=DEFAULT_TIERS, quantiles=[0.5, 0.99]).set_index("tier")
    for tier, block in s["tiers"].items():
        if block["offered"] == 0:
            continue
        for status in ("offered", "completed", "expired", "rejected_overloaded",
                       "num_preemptions"):
            assert b.loc[tier, status] == block[status], (tier, status)
        assert b.loc[tier, "slo_attainment"] == pytest.approx(block["slo_attainment"])
        for m in A.METRICS:
            if block[m]["p99"] is not None:
                assert b.loc[tier, f"{m}_p99"] == pytest.approx(block[m]["p99"])
    assert s["overall"]["num_preemptions"] > 0  # the scenario exercises preemption
    comp = A.latency_components(rec)
    assert (comp["gateway_wait_s"] >= 0).all() and (comp["engine_ttft_s"] >= 0).all()
    np.testing.assert_allclose(comp["gateway_wait_s"] + comp["engine_queue_s"], comp["ttft_s"],
                               atol=1e-9)
