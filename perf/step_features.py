"""What a cost model prices: a step's five features, by name (:class:`StepFeatures`), and the
one way a run of pure-decode steps is priced as an array (:func:`decode_step_times`).

A pure-decode step of ``n`` requests attending to ``c`` tokens in all is
``StepFeatures(0, n, c, 0, 0)``; in a run of them every step attends to ``n`` more tokens than
the one before, so a run of ``k`` steps from ``c`` is the cost model's ``step_time`` on the
contexts ``c, c + n, ..., c + n (k - 1)``. Cost models whose ``step_time`` is element-wise
arithmetic give the same bits for an array as for one call per step (the engine's speed-up
relies on it, and ``tests/model/test_properties.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["FEATURES", "StepFeatures", "decode_step_times"]


class StepFeatures(NamedTuple):
    """One engine step's features (vLLM's scheduler output, summed)."""

    num_prefill_tokens: float
    """New tokens of the prefill chunks scheduled (not of decoding requests)."""
    num_decode_seqs: float
    """Requests decoding one token."""
    num_context_tokens: float
    """Tokens every scheduled request attends to, in all (its KV after the step)."""
    prefill_attention: float
    """Sum over prefill chunks of new tokens times the tokens they attend to."""
    num_prefill_seqs: float
    """Requests prefilling (a chunk each)."""


FEATURES: tuple[str, ...] = StepFeatures._fields
"""The features' names, in :class:`StepFeatures`' order (the columns of profiles and fits)."""


def decode_step_times(
    step_time: Callable[..., npt.NDArray[np.float64]], num_decode_seqs: int, first_context: int,
    num_steps: int,
) -> npt.NDArray[np.float64]:
    """``step_time`` of ``num_steps`` pure-decode steps of ``num_decode_seqs`` requests, the
    first attending to ``first_context`` tokens: one call on an array of the contexts (exact:
    integers below 2**53, as arange gives them). The features that stay the same along the run
    go in as floats and broadcast against the contexts."""
    n = num_decode_seqs
    context = np.arange(first_context, first_context + n * num_steps, n, dtype=np.float64)
    return np.asarray(step_time(0.0, float(n), context, 0.0, 0.0), dtype=np.float64)
