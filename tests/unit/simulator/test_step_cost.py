"""A step's features (simulator/step_cost.py) on hand-worked steps: the few-rows path (Python
integers) and the array path give the same sums."""

from __future__ import annotations

import numpy as np

from kvbudget.perf.step_features import StepFeatures
from kvbudget.simulator.step_cost import FEW_ROWS, rows_features, tail_features

# row 0 decodes (one token, its last, output already); row 1 prefills a chunk of 4 after 5
# computed; row 2 prefills its whole prompt of 8
COMPUTED = np.array([10, 5, 0], np.int64)
TOKENS = np.array([11, 20, 8], np.int64)
OUTPUT = np.array([3, 0, 0], np.int64)
NEW = np.array([1, 4, 8], np.int64)
# prefill tokens 4 + 8, one decoding, context 11 + 9 + 8, attention 4 * 9 + 8 * 8, two chunks
ONE = StepFeatures(12.0, 1.0, 28.0, 100.0, 2.0)


def test_a_few_rows_are_summed_by_hand() -> None:
    rows = np.arange(3, dtype=np.int64)
    assert FEW_ROWS >= 3  # the path in Python integers
    assert rows_features(rows, NEW, COMPUTED, TOKENS, OUTPUT) == ONE
    tail = list(zip(rows.tolist(), NEW.tolist(), strict=True))
    assert tail_features(0, 0, tail, COMPUTED, TOKENS, OUTPUT) == ONE
    # the decoding row as a decode group of one (context 11 known), the others its tail
    assert tail_features(1, 11, tail[1:], COMPUTED, TOKENS, OUTPUT) == ONE


def test_many_rows_take_the_array_path_to_the_same_sums() -> None:
    copies = FEW_ROWS + 1  # more rows than FEW_ROWS (every third too): numpy's sums
    rows = np.arange(3 * copies, dtype=np.int64)
    got = rows_features(rows, np.tile(NEW, copies), np.tile(COMPUTED, copies),
                        np.tile(TOKENS, copies), np.tile(OUTPUT, copies))
    assert got == StepFeatures(*(copies * x for x in ONE))
    decoding = rows_features(rows[::3], np.ones(copies, np.int64), np.tile(COMPUTED, copies),
                             np.tile(TOKENS, copies), np.tile(OUTPUT, copies))
    assert decoding == StepFeatures(0.0, float(copies), 11.0 * copies, 0.0, 0.0)
