"""Queueing theory: the engine under a test cost model is an M/M/c queue.

Each step takes a constant ``delta`` seconds and a request needs a geometric number of steps
(its output tokens, prompt of one token), so its service time is close to exponential with
rate ``mu`` and independent of the batch; ``max_num_seqs = c`` makes ``c`` servers, and the KV
cache is large enough never to bind. The mean wait in the engine's ``waiting`` queue must match
Erlang C. Discretisation adds at most one step (``delta``) per request: 0.2% of the mean
service time here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns

DELTA_S = 0.002
MU = 1.0  # service rate per server (1/s)


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    """Mean time in queue of M/M/c (Erlang C)."""
    a = lam / mu
    rho = a / c
    tail = a**c / math.factorial(c) / (1 - rho)
    p_wait = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return p_wait / (c * mu - lam)


def mean_wait(c: int, rho: float, n: int, seed: int) -> float:
    rng = np.random.default_rng(np.random.SeedSequence([seed, c]))
    lam = rho * c * MU
    arrival = np.cumsum(rng.exponential(1 / lam, n))
    steps = rng.geometric(MU * DELTA_S, n)  # service = steps * delta ~ Exp(mu)
    w = from_columns(arrival, np.ones(n, np.int64), steps)
    cfg = SimConfig(
        engine=EngineConfig(num_gpu_blocks=10**9 // 16, max_num_seqs=c),
        tiers=(TierConfig("interactive", queue_timeout_s=None, max_sequence_tokens=10**9),),
        cost_model=LinearCostModel(DELTA_S, 0.0, 0.0, 0.0),
    )
    rec = simulate(w, make_policy("unlimited"), cfg).records
    # the first token comes at the end of the request's first step
    wait = rec.first_token_s - rec.arrival_s - DELTA_S
    warm = n // 10  # drop the start-up transient
    return float(wait.iloc[warm:].mean())


T_975 = {5: 2.571, 7: 2.365}  # Student t quantiles for 5 and 7 degrees of freedom


@pytest.mark.parametrize(("c", "rho", "reps"), [(1, 0.7, 6), (4, 0.7, 8)])
def test_mean_wait_matches_erlang_c(c: int, rho: float, reps: int) -> None:
    """Tolerance: the 95% t-interval over independent replications covers Erlang C's mean
    wait, and the estimate is within 15% of it."""
    expected = erlang_c_wait(rho * c * MU, MU, c)
    waits = [mean_wait(c, rho, 3000, seed) for seed in range(reps)]
    est = float(np.mean(waits))
    half_width = T_975[reps - 1] * float(np.std(waits, ddof=1)) / math.sqrt(reps)
    assert abs(est - expected) <= half_width, (est, expected, half_width)
    assert abs(est - expected) <= 0.15 * expected, (est, expected)


def test_erlang_c_reduces_to_mm1() -> None:
    lam, mu = 0.7, 1.0
    assert erlang_c_wait(lam, mu, 1) == pytest.approx(lam / (mu * (mu - lam)))
