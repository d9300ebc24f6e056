"""``max_output_tokens`` rules: what a client declares, given the true output length.

Kept apart from the length distributions (:mod:`kvbudget.workloads.lengths`, which re-exports these
names) so that loading a trace does not build every distribution class.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kvbudget.workloads.errors import SpecError

IntArray = npt.NDArray[np.int64]

MAX_TOKENS = 10_000_000
"""Largest token count a distribution may produce or a rule declare (a sanity bound)."""


def _require(ok: bool, name: str, problem: str, value: object) -> None:
    if not ok:
        raise SpecError(name, problem, value)


def check_q(q: float, name: str = "q") -> None:
    """A quantile level: in [0, 1]."""
    _require(isinstance(q, int | float) and 0.0 <= q <= 1.0, name, "must be in [0, 1]", q)




@runtime_checkable
class MaxOutputRule(Protocol):
    """Turns true output lengths into declared ``max_output_tokens``.

    ``apply`` returns ``(max_output_tokens, output_tokens)``; the output is unchanged unless the
    rule truncates. ``quantile`` gives the output distribution's quantiles (for
    :class:`QuantileCap`).
    """

    def apply(self, output: IntArray, quantile: Callable[[float], int]) -> tuple[IntArray,
                                                                                 IntArray]: ...

    @property
    def said(self) -> str:
        """The rule in words, for the line that says what a run assumed."""
        ...


def _above(truncate: bool) -> str:
    return ("longer outputs cut to it" if truncate
            else "or the true output where longer")


def _cap(output: IntArray, cap: int, truncate: bool) -> tuple[IntArray, IntArray]:
    if truncate:
        out = np.minimum(output, cap)
        return np.full(len(output), cap, dtype=np.int64), out
    return np.maximum(output, cap).astype(np.int64), output


@dataclass(frozen=True)
class FixedCap:
    """Every request declares ``tokens``.

    A true output above the cap either raises that request's declaration to its true length
    (default: the recorded output proves the client allowed it) or, with ``truncate``, is cut
    to the cap (the server stops at ``max_tokens``).
    """

    tokens: int
    truncate: bool = False

    def __post_init__(self) -> None:
        _require(isinstance(self.tokens, int) and 1 <= self.tokens <= MAX_TOKENS, "tokens",
                 f"must be an integer in [1, {MAX_TOKENS}]", self.tokens)

    def apply(self, output: IntArray, quantile: Callable[[float], int]) -> tuple[IntArray,
                                                                                 IntArray]:
        return _cap(output, self.tokens, self.truncate)

    @property
    def said(self) -> str:
        return f"{self.tokens:,} ({_above(self.truncate)})"


@dataclass(frozen=True)
class FactorOfTrue:
    """``max_output_tokens = ceil(factor * true output)`` (``factor >= 1``; 1 = an oracle)."""

    factor: float

    def __post_init__(self) -> None:
        _require(isinstance(self.factor, int | float) and math.isfinite(self.factor)
                 and 1 <= self.factor <= 1000, "factor", "must be in [1, 1000]", self.factor)

    def apply(self, output: IntArray, quantile: Callable[[float], int]) -> tuple[IntArray,
                                                                                 IntArray]:
        mx = np.ceil(output * float(self.factor) - 1e-9).astype(np.int64)
        return np.maximum(mx, output), output

    @property
    def said(self) -> str:
        return f"{self.factor:g}x the true output"


@dataclass(frozen=True)
class QuantileCap:
    """Every request declares the ``q`` quantile of its output distribution (its tier's, or
    the trace's), with the same above-the-cap handling as :class:`FixedCap`."""

    q: float
    truncate: bool = False

    def __post_init__(self) -> None:
        check_q(self.q)

    def apply(self, output: IntArray, quantile: Callable[[float], int]) -> tuple[IntArray,
                                                                                 IntArray]:
        return _cap(output, max(1, int(quantile(self.q))), self.truncate)

    @property
    def said(self) -> str:
        return f"the outputs' {self.q:g} quantile ({_above(self.truncate)})"


def empirical_quantile(values: IntArray) -> Callable[[float], int]:
    """Quantiles of observed values (an actual observed value: ``inverted_cdf``)."""
    sorted_values = np.sort(values)

    def quantile(q: float) -> int:
        check_q(q)
        if not len(sorted_values):
            return 1
        return int(np.quantile(sorted_values, q, method="inverted_cdf"))

    return quantile
