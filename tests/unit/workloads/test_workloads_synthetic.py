"""Properties of the synthetic generators (hypothesis) and seeded known answers.

Tolerances are stated per test: each is at least 5 standard errors of the estimate, so a
correct generator fails with probability well below 1e-6 per example; hypothesis runs
derandomized so the suite is reproducible.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.workloads.errors import SpecError
from kvbudget.workloads.synthetic import (
    ConstantArrivals,
    DiurnalArrivals,
    Empirical,
    ExponentialDelay,
    FactorOfTrue,
    Fixed,
    FixedCap,
    GammaArrivals,
    JointEmpirical,
    LogNormal,
    OnOffArrivals,
    Pmf,
    PoissonArrivals,
    QuantileCap,
    RateTableArrivals,
    TierTraffic,
    Uniform,
    Zipf,
    generate_workload,
)

PROPS = settings(max_examples=25, deadline=None, derandomize=True)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
rates = st.floats(min_value=0.05, max_value=500.0)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# Arrivals


@PROPS
@given(seed=seeds, rate=rates, n=st.integers(0, 3000))
def test_poisson_sorted_positive_and_exact_count(seed: int, rate: float, n: int) -> None:
    t = PoissonArrivals(rate).sample(_rng(seed), num_requests=n)
    assert len(t) == n
    assert np.all(np.diff(t) >= 0) and (n == 0 or t[0] > 0)


@PROPS
@given(seed=seeds, rate=rates, units=st.floats(min_value=1.0, max_value=3000.0))
def test_duration_limit_and_poisson_count(seed: int, rate: float, units: float) -> None:
    # units = expected arrivals; count is Poisson(units): |N - units| <= 6 sqrt(units) + 3.
    duration = units / rate
    t = PoissonArrivals(rate).sample(_rng(seed), duration_s=duration)
    assert np.all(t < duration) and np.all(np.diff(t) >= 0)
    assert abs(len(t) - units) <= 6 * math.sqrt(units) + 3


@PROPS
@given(seed=seeds, rate=rates, cv=st.floats(min_value=0.25, max_value=3.0))
def test_gamma_rate_and_cv_near_target(seed: int, rate: float, cv: float) -> None:
    n = 20_000
    t = GammaArrivals(rate, cv).sample(_rng(seed), num_requests=n)
    gaps = np.diff(np.concatenate([[0.0], t]))
    # Mean gap: standard error cv / sqrt(n) <= 2.1%; tolerance 12%.
    assert abs(n / t[-1] / rate - 1) < 0.12
    # Sample CV: excess kurtosis of a Gamma is 6 cv^2, so the CV's standard error is about
    # sqrt((6 cv^2 + 2) / n) / 2 <= 2.7%; tolerance 15%.
    assert abs(gaps.std() / gaps.mean() / cv - 1) < 0.15


@PROPS
@given(seed=seeds, rate=rates, n=st.integers(1, 1000))
def test_constant_is_evenly_spaced(seed: int, rate: float, n: int) -> None:
    t = ConstantArrivals(rate).sample(_rng(seed), num_requests=n)
    assert np.allclose(t, np.arange(1, n + 1) / rate)


@PROPS
@given(seed=seeds, on=st.floats(1.0, 50.0), off=st.floats(0.0, 1.0),
       mean_on=st.floats(0.5, 5.0), mean_off=st.floats(0.5, 5.0))
def test_onoff_long_run_rate(seed: int, on: float, off: float, mean_on: float,
                             mean_off: float) -> None:
    process = OnOffArrivals(on, mean_on, mean_off, off_rate_rps=off)
    cycles = 3000
    duration = cycles * (mean_on + mean_off)
    t = process.sample(_rng(seed), duration_s=duration)
    assert np.all(np.diff(t) >= 0) and np.all(t < duration)
    # Count over 3,000 on/off cycles: the modulation dominates the variance (at most about
    # on^2 * mean_on^2 per cycle); relative standard error <= 1/sqrt(3000) * ~1.5 = 2.7%;
    # tolerance 15%.
    assert abs(len(t) / duration / process.mean_rate_rps - 1) < 0.15


def test_onoff_is_bursty() -> None:
    t = OnOffArrivals(50.0, 2.0, 8.0).sample(_rng(1), duration_s=20_000)
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() > 2.0


@PROPS
@given(seed=seeds, mean=st.floats(0.5, 20.0), amplitude=st.floats(0.0, 1.0),
       start=st.floats(0.0, 86_400.0))
def test_diurnal_count_matches_integral(seed: int, mean: float, amplitude: float,
                                        start: float) -> None:
    process = DiurnalArrivals(mean, amplitude, period_s=3600.0, peak_s=1800.0, start_s=start)
    duration = 5400.0
    t = process.sample(_rng(seed), duration_s=duration)
    w = 2 * math.pi / 3600.0
    integral = mean * duration + mean * amplitude / w * (
        math.sin(w * (duration + start - 1800.0)) - math.sin(w * (start - 1800.0)))
    # A non-homogeneous Poisson count: within 6 standard deviations.
    assert abs(len(t) - integral) <= 6 * math.sqrt(integral) + 3
    assert np.all(process.rate_at(t) >= 0)


def test_diurnal_follows_the_curve() -> None:
    process = DiurnalArrivals(10.0, 0.8, period_s=1000.0, peak_s=250.0)
    t = process.sample(_rng(3), duration_s=100_000)
    phase = np.mod(t, 1000.0)
    near_peak = ((phase > 200) & (phase < 300)).sum()
    near_trough = ((phase > 700) & (phase < 800)).sum()
    # Expected ratio of the rates there: (1 + 0.8 cos(±18°)) / (1 - 0.8 cos(±18°)), about 8.
    assert 6 < near_peak / near_trough < 11


@PROPS
@given(seed=seeds, r1=st.floats(0.0, 20.0), r2=st.floats(0.1, 20.0),
       interpolation=st.sampled_from(["step", "linear"]))
def test_rate_table_count_matches_integral(seed: int, r1: float, r2: float,
                                           interpolation: str) -> None:
    process = RateTableArrivals([0.0, 100.0], [r1, r2], interpolation)  # type: ignore[arg-type]
    t = process.sample(_rng(seed), duration_s=300.0)
    integral = (100 * r1 + 200 * r2) if interpolation == "step" else (50 * (r1 + r2) + 200 * r2)
    assert abs(len(t) - integral) <= 6 * math.sqrt(integral) + 3


def test_rate_table_periodic_and_num_requests() -> None:
    process = RateTableArrivals([0.0, 10.0], [5.0, 0.0], period_s=20.0)
    t = process.sample(_rng(0), num_requests=500)
    assert len(t) == 500
    assert np.all(np.mod(t, 20.0) < 10.0)  # nothing arrives in the zero-rate half
    assert process.mean_rate_rps == 2.5
    with pytest.raises(SpecError, match="duration_s is needed"):
        RateTableArrivals([0.0, 10.0], [5.0, 0.0]).sample(_rng(0), num_requests=5)


@pytest.mark.parametrize("process", [
    PoissonArrivals(3.0), GammaArrivals(3.0, 4.0), ConstantArrivals(3.0),
    OnOffArrivals(10.0, 1.0, 3.0), DiurnalArrivals(3.0, 0.5),
    RateTableArrivals([0.0, 60.0], [1.0, 5.0], "linear"),
])
def test_same_seed_same_bytes(process: object) -> None:
    a = process.sample(_rng(42), duration_s=500.0)  # type: ignore[attr-defined]
    b = process.sample(_rng(42), duration_s=500.0)  # type: ignore[attr-defined]
    c = process.sample(_rng(42), num_requests=300)  # type: ignore[attr-defined]
    d = process.sample(_rng(42), num_requests=300)  # type: ignore[attr-defined]
    assert a.tobytes() == b.tobytes() and c.tobytes() == d.tobytes()
    assert len(c) == 300


@pytest.mark.parametrize(("make", "message"), [
    (lambda: PoissonArrivals(0.0), "rate_rps must be > 0, got 0$"),
    (lambda: GammaArrivals(1.0, 0.0), "cv must be in"),
    (lambda: OnOffArrivals(1.0, -1.0, 1.0), "mean_on_s must be > 0"),
    (lambda: DiurnalArrivals(1.0, 1.5), "amplitude must be in"),
    (lambda: RateTableArrivals([1.0], [1.0]), "times_s must start at 0"),
    (lambda: PoissonArrivals(1.0).sample(_rng(0)), "num_requests or duration_s"),
    (lambda: PoissonArrivals(1e6).sample(_rng(0), duration_s=1e6), "would draw about"),
])
def test_arrival_errors_name_the_parameter(make: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        make()  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------
# Lengths


@PROPS
@given(seed=seeds, mean=st.floats(20.0, 20_000.0), sigma=st.floats(0.1, 1.0))
def test_lognormal_mean_near_target(seed: int, mean: float, sigma: float) -> None:
    x = LogNormal(mean, sigma).sample(_rng(seed), 20_000)
    assert x.min() >= 1
    # Relative standard error sqrt(exp(sigma^2) - 1) / sqrt(n) <= 0.9%; ceil adds < 1 token.
    assert abs((x.mean() - 0.5) / mean - 1) < 0.05


@PROPS
@given(seed=seeds, low=st.integers(1, 5000), width=st.integers(0, 5000),
       q=st.floats(0.0, 1.0))
def test_uniform_bounds_and_quantile(seed: int, low: int, width: int, q: float) -> None:
    dist = Uniform(low, low + width)
    x = dist.sample(_rng(seed), 5000)
    assert x.min() >= low and x.max() <= low + width
    qv = dist.quantile(q)
    assert low <= qv <= low + width
    # P(X <= quantile(q)) >= q exactly for the discrete uniform.
    assert (qv - low + 1) / (width + 1) >= q - 1e-12


@PROPS
@given(seed=seeds, a=st.floats(0.3, 3.0), top=st.integers(1, 50_000))
def test_zipf_support_and_quantiles(seed: int, a: float, top: int) -> None:
    dist = Zipf(a, top)
    x = dist.sample(_rng(seed), 5000)
    assert x.min() >= 1 and x.max() <= top
    q50 = dist.quantile(0.5)
    # Empirical CDF at the median: binomial standard error 0.5/sqrt(5000) = 0.7%; tolerance 5%.
    assert (x <= q50).mean() >= 0.45


@PROPS
@given(seed=seeds, values=st.lists(st.integers(1, 10_000), min_size=1, max_size=50))
def test_empirical_and_pmf_draw_only_observed_values(seed: int, values: list[int]) -> None:
    emp = Empirical(np.array(values))
    x = emp.sample(_rng(seed), 1000)
    assert set(x.tolist()) <= set(values)
    assert emp.quantile(1.0) == max(values) and emp.quantile(0.0) == min(values)
    uniq = sorted(set(values))
    pmf = Pmf(np.array(uniq), np.full(len(uniq), 1 / len(uniq)))
    assert set(pmf.sample(_rng(seed), 1000).tolist()) <= set(uniq)


def test_pmf_frequencies_and_errors() -> None:
    pmf = Pmf.from_mapping({10: 0.2, 20: 0.5, 30: 0.3})
    x = pmf.sample(_rng(0), 100_000)
    freq = [(x == v).mean() for v in (10, 20, 30)]
    # Binomial standard error <= 0.16%; tolerance 1%.
    assert np.allclose(freq, [0.2, 0.5, 0.3], atol=0.01)
    assert pmf.quantile(0.2) == 10 and pmf.quantile(0.21) == 20 and pmf.quantile(0.71) == 30
    with pytest.raises(SpecError, match=r"probs must sum to 1, got 0\.9"):
        Pmf(np.array([1, 2]), np.array([0.5, 0.4]))


def test_joint_pairs_keep_correlation() -> None:
    prompt = np.arange(1, 1001)
    pairs = JointEmpirical(prompt, prompt * 2)
    p, o = pairs.sample(_rng(0), 5000)
    assert np.array_equal(o, 2 * p)


def test_lognormal_truncation_and_quantile() -> None:
    dist = LogNormal(1000.0, 1.0, max_tokens=2000)
    x = dist.sample(_rng(0), 50_000)
    assert x.max() <= 2000
    assert dist.quantile(1.0) == 2000
    q90 = dist.quantile(0.9)
    # Binomial standard error of the empirical CDF at q90: 0.13%; tolerance 1%.
    assert abs((x <= q90).mean() - 0.9) < 0.01


# ---------------------------------------------------------------------------------------------
# Tier mixes


def _tiers(output_b: object = None) -> list[TierTraffic]:
    return [
        TierTraffic("interactive", 0.7, LogNormal(1500, 0.8), LogNormal(250, 0.9),
                    max_output=FixedCap(1024), deadline=ExponentialDelay(5.0)),
        TierTraffic("batch", 0.3, LogNormal(4000, 0.6),
                    output_b or Uniform(256, 2048), max_output=FixedCap(2048)),  # type: ignore[arg-type]
    ]


def test_generate_workload_same_seed_same_bytes() -> None:
    a = generate_workload(PoissonArrivals(5.0), _tiers(), _rng(7), duration_s=200.0)
    b = generate_workload(PoissonArrivals(5.0), _tiers(), _rng(7), duration_s=200.0)
    for col in ("arrival_s", "prompt_tokens", "output_tokens", "max_output_tokens", "tier",
                "deadline_s", "request_id"):
        assert getattr(a, col).tobytes() == getattr(b, col).tobytes(), col
    c = generate_workload(PoissonArrivals(5.0), _tiers(), _rng(8), duration_s=200.0)
    assert a.arrival_s.tobytes() != c.arrival_s.tobytes()


def test_changing_one_tier_leaves_the_rest_unchanged() -> None:
    a = generate_workload(PoissonArrivals(5.0), _tiers(), _rng(7), num_requests=2000)
    b = generate_workload(PoissonArrivals(5.0), _tiers(Fixed(9)), _rng(7), num_requests=2000)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.tier, b.tier)
    inter = a.tier == 0
    assert np.array_equal(a.prompt_tokens[inter], b.prompt_tokens[inter])
    assert np.array_equal(a.output_tokens[inter], b.output_tokens[inter])
    assert np.all(b.output_tokens[~inter] == 9)


@PROPS
@given(seed=seeds, share=st.floats(0.05, 0.95))
def test_tier_shares_and_max_output_rules(seed: int, share: float) -> None:
    tiers = [
        TierTraffic("a", share, Uniform(1, 100), LogNormal(300, 1.0), max_output=FixedCap(256)),
        TierTraffic("b", 1 - share, Fixed(5), Uniform(1, 100), max_output=FactorOfTrue(1.5)),
    ]
    w = generate_workload(PoissonArrivals(10.0), tiers, _rng(seed), num_requests=4000)
    frac = float((w.tier == 0).mean())
    # Binomial standard error <= 0.8%; tolerance 5%.
    assert abs(frac - share) < 0.05
    a, b = w.tier == 0, w.tier == 1
    assert np.all(w.max_output_tokens[a] == np.maximum(256, w.output_tokens[a]))
    assert np.all(w.max_output_tokens[b] == np.ceil(1.5 * w.output_tokens[b] - 1e-9))
    assert np.all(w.max_output_tokens >= w.output_tokens)
    assert np.all(np.isnan(w.deadline_s))


def test_quantile_cap_and_truncation() -> None:
    tier = TierTraffic("t", 1.0, Fixed(10), Uniform(1, 100), max_output=QuantileCap(0.9))
    w = generate_workload(ConstantArrivals(1.0), [tier], _rng(0), num_requests=1000)
    assert np.all(w.max_output_tokens == np.maximum(90, w.output_tokens))
    cut = TierTraffic("t", 1.0, Fixed(10), Uniform(1, 100),
                      max_output=QuantileCap(0.9, truncate=True))
    w2 = generate_workload(ConstantArrivals(1.0), [cut], _rng(0), num_requests=1000)
    assert w2.output_tokens.max() == 90 and np.all(w2.max_output_tokens == 90)


def test_deadlines_follow_arrivals() -> None:
    w = generate_workload(PoissonArrivals(5.0), _tiers(), _rng(1), num_requests=3000)
    inter = w.tier == 0
    delay = w.deadline_s[inter] - w.arrival_s[inter]
    assert np.all(delay >= 0)
    # Exponential mean 5 s: standard error 5/sqrt(2100) = 0.11 s; tolerance 0.6 s.
    assert abs(delay.mean() - 5.0) < 0.6
    assert np.all(np.isnan(w.deadline_s[~inter]))
    assert w.request(int(np.flatnonzero(inter)[0])).deadline_s is not None


def test_tier_errors() -> None:
    with pytest.raises(SpecError, match="shares must sum to 1"):
        generate_workload(PoissonArrivals(1.0), [TierTraffic("a", 0.5, Fixed(1), Fixed(1))],
                          _rng(0), num_requests=5)
    with pytest.raises(SpecError, match="output is required"):
        TierTraffic("a", 1.0, Fixed(1))
    with pytest.raises(SpecError, match="name must be alphanumeric"):
        TierTraffic("a b", 1.0, Fixed(1), Fixed(1))
    with pytest.raises(SpecError, match="distinct names"):
        generate_workload(PoissonArrivals(1.0), [TierTraffic("a", 0.5, Fixed(1), Fixed(1))] * 2,
                          _rng(0), num_requests=5)


@PROPS
@given(seed=seeds, rate=st.floats(0.5, 50.0), cv=st.floats(0.3, 4.0),
       share=st.floats(0.1, 0.9), n=st.integers(1, 2000))
def test_any_mix_same_seed_same_bytes(seed: int, rate: float, cv: float, share: float,
                                      n: int) -> None:
    def draw() -> bytes:
        tiers = [
            TierTraffic("a", share, LogNormal(800, 0.7), Zipf(1.1, 3000),
                        max_output=QuantileCap(0.95), deadline=ExponentialDelay(2.0)),
            TierTraffic("b", 1 - share, Uniform(10, 5000), LogNormal(200, 1.0, max_tokens=4000),
                        max_output=FixedCap(512, truncate=True)),
        ]
        w = generate_workload(GammaArrivals(rate, cv), tiers, _rng(seed), num_requests=n)
        assert np.all(np.diff(w.arrival_s) >= 0) and len(w) == n
        return b"".join(getattr(w, c).tobytes() for c in (
            "arrival_s", "prompt_tokens", "output_tokens", "max_output_tokens", "tier",
            "deadline_s", "request_id"))

    assert draw() == draw()
