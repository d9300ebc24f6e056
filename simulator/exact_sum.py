"""An exact running sum of floats whose memory does not grow with the number of terms.

The engine's time integrals (KV tokens in use times seconds, head-of-line blocked seconds)
have one term per step: tens of millions in a long fleet run. Keeping every term until a final
``math.fsum`` takes 8 bytes a term in arrays and 32 in lists (a Python float and its slot).
:class:`ExactSum` folds them, a batch at a time, into one Python integer in units of
``2**-EXPONENT_BIAS`` (every finite float64 is an integer multiple of it), so the running sum is
exact, whatever the order of the terms; :meth:`ExactSum.value` rounds it once to the nearest
float (Python's ``int / int`` is correctly rounded, ties to even), which is what ``math.fsum``
returns for the same terms: the correctly rounded exact sum (CPython's ``math.fsum`` docs;
Shewchuk, "Adaptive Precision Floating-Point Arithmetic and Fast Robust Geometric Predicates",
1997, on which it rests). Finite terms only (an engine's times and token counts are).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["ExactSum"]

FloatArray = npt.NDArray[np.float64]

MANTISSA_BITS = 53
EXPONENT_BIAS = 1074 + MANTISSA_BITS
"""``np.frexp`` gives ``x = m * 2**e`` with ``0.5 <= |m| < 1`` and ``e >= -1073``; ``m * 2**53``
is an integer, so ``x`` is an integer times ``2**(e - 53)``, and ``e - 53 >= -EXPONENT_BIAS``."""
_HALF_BITS = 26  # a 53-bit integer as two halves whose sums stay exact in float64 bincounts
FOLD_TERMS = 1 << 16
"""Scalar terms, or arrays of terms, kept as they came before :meth:`ExactSum.fold_if_many`
folds them in."""
FOLD_ARRAYS = 1 << 10


class ExactSum:
    """Append floats to :attr:`scalars` and arrays of them to :attr:`arrays` (appending to a
    list is the cheapest thing the engine loop can do per step), or terms as products: a float
    to :attr:`factors` and an integer below 2**53 / ``scale`` to :attr:`counts` for each term
    ``factor * (count * scale)`` (extending two lists is cheaper than forming the products one
    by one; numpy forms them at the fold, with the same bits: the integer product is exact and
    so is its conversion to a float). Call :meth:`fold_if_many` now and then (the engine: at
    each timeline sample), which folds them into the exact integer with a few numpy calls once
    :data:`FOLD_TERMS` floats or :data:`FOLD_ARRAYS` arrays wait. :meth:`value` is
    ``math.fsum`` of everything appended. The lists stay the same objects (emptied in place),
    so a caller may hold them."""

    __slots__ = ("_total", "arrays", "counts", "factors", "scalars", "scale")

    def __init__(self, scale: int = 1) -> None:
        self._total = 0  # the sum of the folded terms, in units of 2**-EXPONENT_BIAS
        self.scalars: list[float] = []
        self.arrays: list[FloatArray] = []
        self.factors: list[float] = []
        self.counts: list[int] = []
        self.scale = scale

    def fold_if_many(self) -> None:
        if (len(self.scalars) >= FOLD_TERMS or len(self.factors) >= FOLD_TERMS
                or len(self.arrays) >= FOLD_ARRAYS):
            self.fold()

    def exact(self) -> int:
        """The sum so far, exactly, in units of ``2**-EXPONENT_BIAS``."""
        self.fold()
        return self._total

    def value(self) -> float:
        """The sum so far, rounded once to the nearest float (``math.fsum``'s value)."""
        return to_float(self.exact())

    def fold(self) -> None:
        """Fold the waiting terms into the exact sum."""
        assert len(self.factors) == len(self.counts), "a product's factors come in pairs"
        parts = list(self.arrays)
        # np.fromiter with the length: a list of Python numbers read as they are, without
        # np.array's look at each item's type first (~30 against ~45 ns an item)
        if self.scalars:
            parts.append(np.fromiter(self.scalars, np.float64, len(self.scalars)))
        if self.factors:
            counts = np.fromiter(self.counts, np.int64, len(self.counts)) * self.scale
            parts.append(np.fromiter(self.factors, np.float64, len(self.factors)) * counts)
        if not parts:
            return
        terms = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._total += exact_sum(np.asarray(terms, np.float64))
        self.scalars.clear()
        self.arrays.clear()
        self.factors.clear()
        self.counts.clear()


def exact_sum(terms: FloatArray) -> int:
    """The exact sum of finite ``terms`` in units of ``2**-EXPONENT_BIAS``."""
    if terms.size == 0:
        return 0
    mantissa, exponent = np.frexp(terms)
    ints = np.ldexp(mantissa, MANTISSA_BITS).astype(np.int64)  # exact: |m| * 2**53 < 2**53
    shift = exponent.astype(np.int64) - MANTISSA_BITS + EXPONENT_BIAS  # >= 0
    low = int(shift.min())
    bins = shift - low
    # each term is hi * 2**26 + lo with |hi| < 2**27 and 0 <= lo < 2**26: a bin's sums of up to
    # 2**26 terms stay below 2**53, so float64 bincounts add them exactly
    total = 0
    for lo in range(0, terms.size, 1 << _HALF_BITS):
        part = slice(lo, lo + (1 << _HALF_BITS))
        hi = np.right_shift(ints[part], _HALF_BITS)
        rest = np.bitwise_and(ints[part], (1 << _HALF_BITS) - 1)
        hi_sums = np.bincount(bins[part], weights=hi.astype(np.float64))
        rest_sums = np.bincount(bins[part], weights=rest.astype(np.float64))
        for b in np.flatnonzero((hi_sums != 0) | (rest_sums != 0)).tolist():
            total += ((int(hi_sums[b]) << _HALF_BITS) + int(rest_sums[b])) << (b + low)
    return total


def to_float(total: int) -> float:
    """``total * 2**-EXPONENT_BIAS`` rounded to the nearest float, ties to even."""
    return total / (1 << EXPONENT_BIAS)
