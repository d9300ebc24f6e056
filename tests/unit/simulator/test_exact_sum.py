"""The engine's running exact sums (``simulator.exact_sum``): the value ``math.fsum`` gives for
the same terms, however they came (scalars, arrays, folded early or late), in memory that does
not grow with the number of terms."""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.simulator import exact_sum
from kvbudget.simulator.exact_sum import ExactSum, to_float

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
# overflow-free sums: terms below 2**1000 (a sum of a few hundred stays finite)
bounded = st.floats(min_value=-(2.0**1000), max_value=2.0**1000, allow_nan=False)


def _same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(bounded, max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_value_is_fsum_however_the_terms_come(terms: list[float], cuts: list[int]) -> None:
    s = ExactSum()
    bounds = sorted({0, len(terms), *(min(c, len(terms)) for c in cuts)})
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if k % 3 == 0:
            s.scalars.extend(terms[lo:hi])
        elif k % 3 == 1:
            s.arrays.append(np.array(terms[lo:hi], np.float64))
        else:
            s.scalars.extend(terms[lo:hi])
            s.fold()
    assert _same(s.value(), math.fsum(terms))
    assert _same(s.value(), math.fsum(terms))  # value() leaves the sum as it was


def test_cancellation_ties_and_subnormals() -> None:
    """Cases where adding in float64 order would lose everything: huge terms that cancel
    around tiny ones, a sum exactly halfway between two floats (ties to even), subnormals."""
    cases = [
        [1e308, 1.0, -1e308, 2.0**-1074],
        [1.0, 2.0**-53],  # halfway: rounds to 1.0 (even)
        [1.0, 2.0**-53, 2.0**-105],  # just above halfway: rounds up
        [1.0 + 2.0**-52, 2.0**-53],  # halfway from an odd mantissa: rounds up
        [2.0**-1074] * 7 + [-(2.0**-1073)],
        [0.1] * 10,
        [-0.0, 0.0, -0.0],
        [],
    ]
    for terms in cases:
        s = ExactSum()
        s.arrays.append(np.array(terms, np.float64))
        assert _same(s.value(), math.fsum(terms)), terms


def test_many_terms_fold_and_stay_exact() -> None:
    """Past FOLD_TERMS waiting floats, ``fold_if_many`` folds them (the lists empty, in place);
    the value is still fsum's, with the same step-like terms a long run has."""
    rng = np.random.default_rng(7)
    terms = (rng.random(3 * exact_sum.FOLD_TERMS + 5) * 0.05) * (
        rng.integers(0, 60_000, 3 * exact_sum.FOLD_TERMS + 5) * 16.0)
    s = ExactSum()
    scalars, arrays = s.scalars, s.arrays
    longest = 0
    for lo in range(0, len(terms), 1000):
        chunk = terms[lo : lo + 1000]
        if lo % 2000:
            s.scalars.extend(chunk.tolist())
        else:
            s.arrays.append(chunk)
        longest = max(longest, len(s.scalars))
        s.fold_if_many()
    assert s.scalars is scalars and s.arrays is arrays
    assert longest < exact_sum.FOLD_TERMS + 1000
    assert _same(s.value(), math.fsum(terms.tolist()))


@given(st.lists(finite, max_size=50))
def test_exact_integer_is_the_sum_in_fixed_units(terms: list[float]) -> None:
    """The integer is the exact sum: adding two sums' integers and rounding once is fsum of
    both sets of terms (what a fleet does with its replicas')."""
    a, b = ExactSum(), ExactSum()
    half = len(terms) // 2
    a.scalars.extend(terms[:half])
    b.arrays.append(np.array(terms[half:], np.float64))
    try:
        expected = math.fsum(terms)
    except OverflowError:
        return
    if math.isfinite(expected):
        assert _same(to_float(a.exact() + b.exact()), expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 10.0), st.integers(0, 2**40)), max_size=100),
    st.sampled_from([1, 16, 128]),
    st.lists(bounded, max_size=20),
    st.integers(0, 100),
)
def test_products_are_the_terms_python_forms(
    pairs: list[tuple[float, int]], scale: int, scalars: list[float], cut: int
) -> None:
    """Terms given as factor pairs (an engine step's seconds and its blocks in use) sum to
    ``math.fsum`` of the products Python forms one by one, ``d * (u * scale)``, beside scalar
    terms, folded early or late."""
    s = ExactSum(scale=scale)
    s.scalars.extend(scalars)
    cut = min(cut, len(pairs))
    for part in (pairs[:cut], pairs[cut:]):
        s.factors.extend([d for d, _ in part])
        s.counts.extend([u for _, u in part])
        if part is pairs[:cut] and cut % 2:
            s.fold()
    expected = math.fsum([d * (u * scale) for d, u in pairs] + scalars)
    assert _same(s.value(), expected)
    assert not s.factors and not s.counts  # folded
