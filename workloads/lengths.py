"""Token-length distributions and deadline (delay) distributions. The ``max_output_tokens``
rules live in :mod:`kvbudget.workloads.max_output` and are re-exported here.

Every draw comes from the ``numpy.random.Generator`` passed in; nothing here keeps a random
state. Continuous distributions are turned into token counts with ``ceil`` (so every draw is at
least one token and ``P(N = k) = P(k - 1 < X <= k)``): nothing is clipped or rescaled. Bounds
(``max_tokens`` of the lognormal, the support of the Zipf) are part of a distribution's
definition: the lognormal is then *truncated* (draws above the bound are redrawn), never clipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Protocol, runtime_checkable

import numpy as np

from kvbudget.workloads.max_output import MAX_TOKENS as MAX_TOKENS
from kvbudget.workloads.max_output import FactorOfTrue as FactorOfTrue
from kvbudget.workloads.max_output import FixedCap as FixedCap
from kvbudget.workloads.max_output import MaxOutputRule as MaxOutputRule
from kvbudget.workloads.max_output import QuantileCap as QuantileCap
from kvbudget.workloads.max_output import check_q
from kvbudget.workloads.max_output import empirical_quantile as empirical_quantile
from kvbudget.workloads.pmf import FloatArray as FloatArray
from kvbudget.workloads.pmf import IntArray as IntArray
from kvbudget.workloads.pmf import Pmf as Pmf
from kvbudget.workloads.pmf import as_token_array as _as_token_array
from kvbudget.workloads.pmf import cdf_quantile as _cdf_quantile
from kvbudget.workloads.pmf import cdf_sample as _cdf_sample
from kvbudget.workloads.pmf import require as _require

_MAX_SUPPORT = 10_000_000


def _finite_positive(name: str, value: float) -> None:
    _require(isinstance(value, int | float) and math.isfinite(value) and value > 0, name,
             "must be > 0", value)


@runtime_checkable
class LengthDist(Protocol):
    """A distribution of token counts (integers >= 1)."""

    def sample(self, rng: np.random.Generator, n: int) -> IntArray: ...

    def quantile(self, q: float) -> int: ...


# ----------------------------------------------------------------------------------------------
# Length distributions


@dataclass(frozen=True)
class Fixed:
    """Always ``tokens``."""

    tokens: int

    def __post_init__(self) -> None:
        _require(isinstance(self.tokens, int) and 1 <= self.tokens <= MAX_TOKENS, "tokens",
                 f"must be an integer in [1, {MAX_TOKENS}]", self.tokens)

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return np.full(n, self.tokens, dtype=np.int64)

    def quantile(self, q: float) -> int:
        check_q(q)
        return self.tokens


@dataclass(frozen=True)
class Uniform:
    """Integers uniform on ``[low, high]`` (both included)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        _require(isinstance(self.low, int) and 1 <= self.low <= MAX_TOKENS, "low",
                 f"must be an integer in [1, {MAX_TOKENS}]", self.low)
        _require(isinstance(self.high, int) and self.low <= self.high <= MAX_TOKENS, "high",
                 f"must be an integer in [low={self.low}, {MAX_TOKENS}]", self.high)

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)

    def quantile(self, q: float) -> int:
        check_q(q)
        width = self.high - self.low + 1
        return self.low + max(0, math.ceil(q * width) - 1)


@dataclass(frozen=True)
class LogNormal:
    """Lognormal with the given ``mean`` (tokens, before discretisation) and shape ``sigma``.

    ``mu = ln(mean) - sigma**2 / 2``. The distribution is truncated to ``X <= max_tokens``
    (draws above are redrawn, so the mean is a little lower than ``mean``); without
    ``max_tokens`` the bound is :data:`MAX_TOKENS`, far in the tail for any sane parameters.
    """

    mean: float
    sigma: float
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _finite_positive("mean", self.mean)
        _require(self.mean <= MAX_TOKENS, "mean", f"must be <= {MAX_TOKENS}", self.mean)
        _require(isinstance(self.sigma, int | float) and math.isfinite(self.sigma)
                 and 0 < self.sigma <= 5, "sigma", "must be in (0, 5]", self.sigma)
        if self.max_tokens is not None:
            _require(isinstance(self.max_tokens, int) and 1 <= self.max_tokens <= MAX_TOKENS,
                     "max_tokens", f"must be an integer in [1, {MAX_TOKENS}]", self.max_tokens)
            _require(self._cdf(self.max_tokens) >= 1e-3, "max_tokens",
                     "keeps less than 0.1% of the distribution (raise it or lower mean)",
                     self.max_tokens)

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def _cdf(self, x: float) -> float:
        return NormalDist(self.mu, self.sigma).cdf(math.log(x))

    @property
    def bound(self) -> int:
        return MAX_TOKENS if self.max_tokens is None else self.max_tokens

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        x = rng.lognormal(self.mu, self.sigma, size=n)
        bad = np.flatnonzero(x > self.bound)
        while bad.size:
            x[bad] = rng.lognormal(self.mu, self.sigma, size=bad.size)
            bad = bad[x[bad] > self.bound]
        return np.ceil(x).astype(np.int64)

    def quantile(self, q: float) -> int:
        check_q(q)
        q = min(max(q * self._cdf(self.bound), 1e-12), 1 - 1e-12)
        value = math.exp(NormalDist(self.mu, self.sigma).inv_cdf(q))
        return int(min(max(1, math.ceil(value)), self.bound))


@dataclass(frozen=True)
class Zipf:
    """Bounded Zipf: ``P(k) ∝ k**-a`` for integers ``min_tokens <= k <= max_tokens`` (``a > 0``)."""

    a: float
    max_tokens: int
    min_tokens: int = 1
    _values: IntArray = field(init=False, repr=False, compare=False)
    _cdf: FloatArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _finite_positive("a", self.a)
        _require(isinstance(self.min_tokens, int) and self.min_tokens >= 1, "min_tokens",
                 "must be an integer >= 1", self.min_tokens)
        _require(isinstance(self.max_tokens, int) and self.min_tokens <= self.max_tokens
                 and self.max_tokens - self.min_tokens < _MAX_SUPPORT, "max_tokens",
                 f"must be an integer in [min_tokens, min_tokens + {_MAX_SUPPORT})",
                 self.max_tokens)
        values = np.arange(self.min_tokens, self.max_tokens + 1, dtype=np.int64)
        cdf = np.cumsum(values.astype(np.float64) ** -self.a)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_cdf", cdf)

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return _cdf_sample(rng, self._values, self._cdf, n)

    def quantile(self, q: float) -> int:
        return _cdf_quantile(self._values, self._cdf, q)


@dataclass(frozen=True, eq=False)
class Empirical:
    """Resampling (with replacement) of observed token counts, e.g. one column of a trace."""

    values: IntArray
    source: str = "values"

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", np.sort(_as_token_array(self.values, "values")))

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return self.values[rng.integers(0, len(self.values), size=n)]

    def quantile(self, q: float) -> int:
        check_q(q)
        return int(np.quantile(self.values, q, method="inverted_cdf"))


@dataclass(frozen=True, eq=False)
class JointEmpirical:
    """(prompt, output) pairs resampled together, keeping their correlation."""

    prompt: IntArray
    output: IntArray
    source: str = "pairs"

    def __post_init__(self) -> None:
        prompt = _as_token_array(self.prompt, "prompt")
        output = _as_token_array(self.output, "output")
        _require(len(prompt) == len(output), "output", f"must have {len(prompt)} entries "
                 "(one per prompt)", len(output))
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "output", output)

    def sample(self, rng: np.random.Generator, n: int) -> tuple[IntArray, IntArray]:
        idx = rng.integers(0, len(self.prompt), size=n)
        return self.prompt[idx], self.output[idx]

    def output_quantile(self, q: float) -> int:
        check_q(q)
        return int(np.quantile(self.output, q, method="inverted_cdf"))


# ----------------------------------------------------------------------------------------------
# Delay distributions (seconds), for deadlines relative to arrival


@runtime_checkable
class DelayDist(Protocol):
    """A distribution of non-negative durations in seconds."""

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray: ...


@dataclass(frozen=True)
class FixedDelay:
    seconds: float

    def __post_init__(self) -> None:
        _require(isinstance(self.seconds, int | float) and math.isfinite(self.seconds)
                 and self.seconds >= 0, "seconds", "must be >= 0", self.seconds)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return np.full(n, float(self.seconds))


@dataclass(frozen=True)
class UniformDelay:
    low_s: float
    high_s: float

    def __post_init__(self) -> None:
        _require(isinstance(self.low_s, int | float) and math.isfinite(self.low_s)
                 and self.low_s >= 0, "low_s", "must be >= 0", self.low_s)
        _require(isinstance(self.high_s, int | float) and math.isfinite(self.high_s)
                 and self.high_s >= self.low_s, "high_s", f"must be >= low_s={self.low_s:g}",
                 self.high_s)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.uniform(self.low_s, self.high_s, size=n)


@dataclass(frozen=True)
class ExponentialDelay:
    mean_s: float

    def __post_init__(self) -> None:
        _finite_positive("mean_s", self.mean_s)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.exponential(self.mean_s, size=n)


@dataclass(frozen=True)
class LogNormalDelay:
    mean_s: float
    sigma: float

    def __post_init__(self) -> None:
        _finite_positive("mean_s", self.mean_s)
        _require(isinstance(self.sigma, int | float) and math.isfinite(self.sigma)
                 and 0 < self.sigma <= 5, "sigma", "must be in (0, 5]", self.sigma)

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.lognormal(math.log(self.mean_s) - self.sigma**2 / 2, self.sigma, size=n)
