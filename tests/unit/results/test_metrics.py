"""kvbudget.results.metrics: the quantiles of the summary are numpy's; string columns factorised."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.results import metrics
from kvbudget.results.metrics import _percentile, percentile_of_sorted, quantiles


@pytest.mark.parametrize("seed", range(4))
def test_percentile_of_sorted_is_numpys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(500):
        n = int(rng.integers(1, 200))
        v = [rng.random(n), rng.integers(0, 4, n).astype(float), rng.lognormal(0, 3, n)][seed % 3]
        s = np.sort(v)
        for q in (0.0, 37.5, 50.0, 90.0, 99.0, 100.0):
            assert percentile_of_sorted(s, q) == float(np.percentile(v, q))


def test_quantiles_ignore_non_finite_values() -> None:
    v = np.array([3.0, math.nan, 1.0, math.inf, 2.0])
    got = quantiles(v)
    want = np.percentile([1.0, 2.0, 3.0], [50, 90, 99])
    assert got == {"mean": 2.0, "p50": want[0], "p90": want[1], "p99": want[2]}
    assert quantiles(np.array([math.nan])) == dict.fromkeys(("mean", "p50", "p90", "p99"))


def test_percentile_falls_back_for_non_finite_values() -> None:
    assert math.isnan(_percentile(np.array([]), 99.0))
    assert math.isnan(_percentile(np.array([1.0, math.nan]), 99.0))
    assert _percentile(np.array([4.0, 1.0, 2.0]), 99.0) == float(np.percentile([4.0, 1, 2], 99))


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_factorize_round_trips_across_chunks(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "_FACTORIZE_CHUNK", chunk)
    rng = np.random.default_rng(0)
    words = np.array(["completed", "expired", "", "batch", "interactive", "é-tier"], dtype=object)
    column = words[rng.integers(0, len(words), 50)]
    codes, values = metrics.factorize(column)
    assert values == sorted(set(column.tolist()))
    assert [values[c] for c in codes.tolist()] == column.tolist()
    empty_codes, empty_values = metrics.factorize(np.array([], dtype=object))
    assert empty_codes.size == 0 and empty_values == []
