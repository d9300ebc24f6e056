"""A scheduled step's features (:class:`~kvbudget.perf.step_features.StepFeatures`) from the
engine's per-request arrays: :func:`rows_features`, and :func:`tail_features`, the same sums in
Python integers (a decode group's step, and a step of :data:`FEW_ROWS` rows or fewer).
"""

from __future__ import annotations

import numpy as np

from kvbudget.perf.step_features import StepFeatures
from kvbudget.simulator.serving import IntArray
from kvbudget.simulator.small_arrays import isum

__all__ = ["rows_features", "tail_features"]

FEW_ROWS = 16
"""Up to this many rows :func:`rows_features` sums in Python integers: cheaper than numpy
below ~20 rows (``timeit``, docs/performance.md)."""


def rows_features(rows: IntArray, new: IntArray, num_computed_tokens: IntArray,
                  num_tokens: IntArray, num_output_tokens: IntArray) -> StepFeatures:
    """The features of a step of ``new`` tokens for each of ``rows``: a row decodes when it gets
    one token, has output and has computed all its tokens after the step; others prefill."""
    if len(rows) <= FEW_ROWS:
        return tail_features(0, 0, list(zip(rows.tolist(), new.tolist(), strict=True)),
                             num_computed_tokens, num_tokens, num_output_tokens)
    after = num_computed_tokens[rows] + new
    decode = (new == 1) & (num_output_tokens[rows] > 0) & (after == num_tokens[rows])
    num_decode = int(np.count_nonzero(decode))
    prefill_new = new * ~decode  # new tokens of the prefill chunks, 0 for decode rows
    return StepFeatures(
        float(isum(prefill_new)),
        float(num_decode),
        float(isum(after)),
        float(isum(prefill_new * after)),
        float(len(rows) - num_decode),
    )


def tail_features(m: int, context: int, tail: list[tuple[int, int]],
                  num_computed_tokens: IntArray, num_tokens: IntArray,
                  num_output_tokens: IntArray) -> StepFeatures:
    """:func:`rows_features` of ``m`` decoding requests attending to ``context`` tokens, then
    ``tail`` (row, new tokens)."""
    num_decode = m
    prefill = attention = 0
    for i, n_new in tail:
        after_i = num_computed_tokens.item(i) + n_new
        context += after_i
        if n_new == 1 and after_i == num_tokens.item(i) and num_output_tokens.item(i):
            num_decode += 1
        else:
            prefill += n_new
            attention += n_new * after_i
    return StepFeatures(
        float(prefill),
        float(num_decode),
        float(context),
        float(attention),
        float(m + len(tail) - num_decode),
    )
