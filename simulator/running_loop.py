"""The running loop of a step in arrays: vLLM's gives each running request, in order,
``min(num_tokens - num_computed_tokens, budget left)`` new tokens and their blocks; when every
allocation succeeds (the common case) that is a prefix sum (:func:`budget_prefix`). Only when
one fails does the scheduler walk them one by one, preempting. :class:`RunningArray` keeps
``running`` as an array between steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvbudget.simulator.serving import IntArray
from kvbudget.simulator.small_arrays import isum

__all__ = ["NO_ROWS", "RunningArray", "RunningPrefix", "budget_prefix"]

NO_ROWS: IntArray = np.zeros(0, np.int64)  # a running loop of no rows (read-only: shared)
NO_ROWS.flags.writeable = False


@dataclass(slots=True)
class RunningPrefix:
    """The requests the running loop reaches: ``rows``, their ``new`` tokens, ``blocks`` (now),
    ``want`` (for the step), ``num_new`` (in all), ``num_extra`` (``sum(want - blocks)``)."""

    rows: IntArray
    new: IntArray
    blocks: IntArray
    want: IntArray
    num_new: int
    num_extra: int


def budget_prefix(
    rows: IntArray, num_tokens: IntArray, num_computed_tokens: IntArray, num_blocks: IntArray,
    budget: int, block_size: int, lookahead: int = 0, max_model_len: int = 0,
) -> RunningPrefix:
    """The token budget handed out in ``rows``' order; blocks for ``lookahead`` tokens beyond
    (``num_lookahead_tokens``), never beyond ``max_model_len`` (vLLM 0.32.0's
    ``kv_cache_manager.py:543``)."""
    computed = num_computed_tokens[rows]
    need = num_tokens[rows] - computed
    cum = np.add.accumulate(need)
    total = int(cum[-1])
    if total < budget:
        new = need  # every request gets all it needs, with budget to spare
    else:
        before = budget - (cum - need)  # budget left when each is reached
        m = int(np.count_nonzero(before > 0))  # budget only shrinks: a prefix is scheduled
        rows, computed, need, before = rows[:m], computed[:m], need[:m], before[:m]
        new = np.minimum(need, before)
        total = budget  # the last request reached takes what is left
    bs = block_size
    blocks = num_blocks[rows]
    end = computed + new  # the tokens (and lookahead slots) the blocks hold after the step
    if lookahead:
        end = np.minimum(end + lookahead, max_model_len)
    want = np.maximum((end + (bs - 1)) // bs, blocks)
    return RunningPrefix(rows, new, blocks, want, total, isum(want - blocks))


class RunningArray:
    """``running`` as an array, kept between steps: a prefix view of a buffer; a start is
    written past it (views handed out never change), a removal drops it (rebuilt on demand)."""

    __slots__ = ("_arr", "_buf")

    def __init__(self) -> None:
        self._arr: IntArray | None = None
        self._buf: IntArray = np.zeros(0, np.int64)

    def started(self, i: int, num_running: int) -> None:  # i joined: num_running rows
        arr = self._arr
        if arr is not None:
            n = len(arr)
            if n < len(self._buf) and n + 1 == num_running:
                self._buf[n] = i
                self._arr = self._buf[: n + 1]
            else:
                self._arr = None

    def stopped(self) -> None:  # rows left running
        self._arr = None

    def of(self, running: list[int]) -> IntArray:  # (read-only: views are shared)
        arr = self._arr
        if arr is None or len(arr) != len(running):
            n = len(running)
            self._buf = np.empty(n + 16, np.int64)
            arr = self._arr = self._buf[:n]
            arr[:] = running
        return arr
