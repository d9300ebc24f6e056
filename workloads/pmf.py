"""Token counts drawn from a table of probabilities (:class:`Pmf`: ServeGen's length PMFs), and
the helpers the table-based length distributions of :mod:`kvbudget.workloads.lengths` share
(which re-exports :class:`Pmf`).

Kept apart from the other distributions: the ServeGen trace reader needs only this one, and
the lognormal's there need :mod:`statistics` (with :mod:`fractions` and :mod:`decimal`, ~10 M
instructions to import), which a command reading a trace does without.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvbudget.workloads.errors import SpecError
from kvbudget.workloads.max_output import MAX_TOKENS, check_q

__all__ = ["FloatArray", "IntArray", "Pmf", "as_token_array", "cdf_quantile", "cdf_sample",
           "require"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def require(ok: bool, name: str, problem: str, value: object) -> None:
    """A :class:`~kvbudget.workloads.errors.SpecError` naming ``name`` unless ``ok``."""
    if not ok:
        raise SpecError(name, problem, value)


def cdf_sample(rng: np.random.Generator, values: IntArray, cdf: FloatArray, n: int) -> IntArray:
    """``n`` draws of ``values`` by their cumulative weights ``cdf`` (not normalised)."""
    u = rng.random(n) * cdf[-1]
    idx = np.searchsorted(cdf, u, side="right")
    np.minimum(idx, len(values) - 1, out=idx)
    out: IntArray = values[idx]
    return out


def cdf_quantile(values: IntArray, cdf: FloatArray, q: float) -> int:
    """The ``q`` quantile of ``values`` by their cumulative weights ``cdf``."""
    check_q(q)
    idx = int(np.searchsorted(cdf, q * cdf[-1], side="left"))
    return int(values[min(idx, len(values) - 1)])


def as_token_array(values: Sequence[int] | IntArray, name: str) -> IntArray:
    """``values`` as a non-empty int64 array of token counts in [1, MAX_TOKENS], or a
    :class:`~kvbudget.workloads.errors.SpecError` naming ``name``."""
    arr = np.asarray(values)
    require(arr.ndim == 1 and arr.size > 0, name, "must be a non-empty list of token counts",
            f"{arr.size} values")
    require(np.issubdtype(arr.dtype, np.integer) or bool(np.all(np.mod(arr, 1) == 0)), name,
            "must hold whole token counts", arr[:5].tolist())
    out = arr.astype(np.int64)
    require(int(out.min()) >= 1 and int(out.max()) <= MAX_TOKENS, name,
            f"values must be in [1, {MAX_TOKENS}]", (int(out.min()), int(out.max())))
    return out


@dataclass(frozen=True, eq=False)
class Pmf:
    """A probability mass function over token counts (ServeGen style ``{tokens: prob}``).

    ``probs`` must be non-negative and sum to 1 within 1e-6 (no silent renormalisation).
    """

    values: IntArray
    probs: FloatArray
    _cdf: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        values = as_token_array(self.values, "values")
        probs = np.asarray(self.probs, dtype=np.float64)
        require(probs.shape == values.shape, "probs", f"must have {len(values)} entries",
                len(probs))
        require(bool(np.all(np.isfinite(probs)) and np.all(probs >= 0)), "probs",
                "must be finite and >= 0", probs[:5].tolist())
        total = float(probs.sum())
        require(abs(total - 1.0) <= 1e-6, "probs", "must sum to 1", total)
        order = np.argsort(values, kind="stable")
        object.__setattr__(self, "values", values[order])
        object.__setattr__(self, "probs", probs[order])
        object.__setattr__(self, "_cdf", np.cumsum(probs[order]))

    @classmethod
    def from_mapping(cls, pmf: dict[int, float]) -> Pmf:
        return cls(np.fromiter(pmf.keys(), np.int64, len(pmf)),
                   np.fromiter(pmf.values(), np.float64, len(pmf)))

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return cdf_sample(rng, self.values, self._cdf, n)

    def quantile(self, q: float) -> int:
        return cdf_quantile(self.values, self._cdf, q)
