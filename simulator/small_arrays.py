"""Reductions of the engine's small integer arrays in Python numbers.

The engine loop's cost is the number of small numpy calls it makes, not their size: a
reduction (sum, min) over a few running requests costs ~1 us in numpy's reduction machinery but
a few hundred ns as a Python reduction over ``tolist()``, which is exact for int64 (the same
value). Arrays longer than :data:`SMALL_N` go through numpy.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

SMALL_N = 48

IntArray = npt.NDArray[np.int64]


def isum(a: IntArray) -> int:
    """``int(a.sum())``, cheaper for small ``a``."""
    return sum(a.tolist()) if len(a) <= SMALL_N else int(np.add.reduce(a))


def imin(a: IntArray) -> int:
    """``int(a.min())``, cheaper for small ``a``."""
    return min(a.tolist()) if len(a) <= SMALL_N else int(np.minimum.reduce(a))


def imax(a: IntArray) -> int:
    """``int(a.max())``, cheaper for small ``a``."""
    return max(a.tolist()) if len(a) <= SMALL_N else int(np.maximum.reduce(a))

