"""The arithmetic of a run of a group's steps, done at once (skip-ahead's planner): the blocks
each step takes (the group's ``take``) give those in use during each step of a run
(:func:`run_used`), cut where they run out; a decode run (step ``j`` from 0 attends to ``c0 +
n (j + 1)`` tokens) is priced at once (:meth:`DecodeRunPlanner.steps`) and cut at the step in
progress at the next external event (:meth:`DecodeRunPlanner.keep`). A short run
(:data:`GROUP_SMALL_K`) in Python numbers, a longer one with arrays: the same bits.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from itertools import accumulate

import numpy as np

from kvbudget.perf.cost_model import CostModel
from kvbudget.simulator.serving import FloatArray, IntArray

# a decode run's per-step values: arrays, or lists for a short run
Floats = FloatArray | list[float]
Ints = IntArray | list[int]

MAX_JUMP_STEPS = 4096  # the longest run planned at once
# runs up to this many steps in Python numbers (~0.7 us a step), longer with arrays (~20 us
# however long): measured crossover
GROUP_SMALL_K = 48
_TIE = """A run's last step may end exactly at ``t_ext``, the next external event: the run driver's
events are URGENT (``simulator/alarm.py``), so it runs before the run's end, as before stepping's
step ending then, and the next step sees what it did.

A fleet's replica plans its runs past fleet events that need not end them (arrivals routed
elsewhere, gateway timers and samples: ``fleet.Fleet._next_touch_s``); one at the end of a
step of the run would run in another order than stepping's. Its planner's ``tie`` gives the
first step ending where such an event may be due, and the run ends with the step before it
(or with it when it is the first), so that step is scheduled when it starts, as stepping does.
(Steps and arrivals on grids tie; continuous times do not.)"""


def run_ends(dts: Floats, t: float) -> Floats:
    """The ends of steps ``dts`` long from ``t``, summed in stepping's order (the same bits)."""
    if isinstance(dts, list):
        ends = list(accumulate(dts, initial=t))
        del ends[0]
        return ends
    ends_a = dts.copy()
    ends_a[0] += t
    return np.add.accumulate(ends_a, out=ends_a)


def grown(arr: IntArray, top: int) -> IntArray:
    """``arr`` with room for index ``top`` (twice as long at least), zeros beyond it."""
    new = np.zeros(max(top + 1, 2 * len(arr)), np.int64)
    new[: len(arr)] = arr
    return new


def block_takes(first: IntArray, end: IntArray, block_size: int) -> IntArray:
    """``take[s]`` (``s`` to ``max(end)``): how many members take a block in step ``s``, member
    ``k`` in steps ``first[k]``, ``first[k] + block_size``, .. before ``end[k]``; counted by
    phase ``p = s % block_size``, summed along ``t`` (``s = p + block_size * t``)."""
    bs = block_size
    top = int(end.max(initial=0)) + 1
    width = -(-top // bs) + 1  # the t of each phase, its end's included
    keep = first < end
    first, end = first[keep], end[keep]
    phase = first % bs
    size = bs * width
    diff = (np.bincount(phase * width + first // bs, minlength=size)
            - np.bincount(phase * width + (end - phase + bs - 1) // bs, minlength=size))
    counts = np.add.accumulate(diff.reshape(bs, width), axis=1)  # [p, t]: at p + bs * t
    return np.ascontiguousarray(counts.T).reshape(-1)[:top].copy()


def run_used(take: IntArray, s0: int, k_max: int, free: int, used_now: int, small: bool
             ) -> Ints:
    """The blocks in use during each of at most ``k_max`` steps of a run from step ``s0`` (its
    blocks taken, ``used_now`` in use), up to the first that runs out of the ``free`` ones."""
    if small:
        used = list(accumulate(take[s0 + 1 : s0 + k_max].tolist(), initial=used_now))
        if used[-1] - used_now > free:  # the first step that runs out of blocks ends the run
            del used[max(1, bisect.bisect_right(used, used_now + free)):]
        return used
    alloc = take[s0 : s0 + k_max].copy()  # the blocks steps 1..j take, summed
    alloc[0] = 0
    np.add.accumulate(alloc, out=alloc)
    if int(alloc[-1]) > free:  # (it only rises) the first step that runs out of blocks
        alloc = alloc[: max(int(alloc.searchsorted(free, side="right")), 1)]
    return used_now + alloc


class DecodeRunPlanner:
    """Plans decode runs for one engine (its cost model and block size)."""

    def __init__(self, cost: CostModel, block_size: int) -> None:
        self.cost = cost
        self.block_size = block_size
        self.tie: Callable[[Floats], int] | None = None
        # whether a timeline sample falls in [t0, t1) (keep's ``lag``)
        self.sample_in: Callable[[float, float], bool] = lambda t0, t1: True
        self._decode_array = cost.decode_step_times
        self._step_time = cost.step_time

    def decode_step(self, n: int, context: int) -> float:
        """``StepFeatures(0, n, context, 0, 0)`` priced: ``n`` requests decoding."""
        return float(self._step_time(0.0, float(n), float(context), 0.0, 0.0))

    @staticmethod
    def bound(k_max: int, t: float, t_ext: float, dt0: float, lag: int = 0) -> int:
        """A bound on a run of at most ``k_max`` steps from ``t`` (the first ``dt0`` long): to the
        step in progress at ``t_ext``, ``lag`` steps more."""
        k_max = min(k_max, MAX_JUMP_STEPS)
        if t_ext != math.inf and k_max > 1 and dt0 > 0:
            # step times never shrink (the context grows): t_ext within (t_ext - t) / dt0 + 1
            k_max = max(1, min(k_max, int((t_ext - t) / dt0) + 2 + lag))
        return k_max

    def keep(self, ends: Floats, t_ext: float, until: float, lag: int = 0) -> int:
        """How many steps of a planned run (ending at ``ends``) run: up to the step in progress
        at ``until`` (or ending then, :data:`_TIE`), before the first that ties with another
        event (``tie``); planned past ``t_ext`` (``_plan_until``), to the one in progress at
        ``t_ext`` or those ending by ``until``. ``lag`` (async scheduling: ``Engine._add``):
        one step more unless a timeline sample falls in it."""
        k = len(ends)
        if until < ends[-1]:  # the run ends with the first step ending at until or later
            k = bisect.bisect_left(ends, until) + 1
            if lag and k < len(ends):
                k += not self.sample_in(float(ends[k - 1]), float(ends[k]))
        if self.tie is not None and k > 1:
            j = self.tie(ends[:k] if k < len(ends) else ends)
            if j >= 0:
                k = max(1, j)
        if until != t_ext:
            k = min(k, max(bisect.bisect_left(ends, t_ext) + 1, bisect.bisect_right(ends, until)))
        return k

    def steps(self, n: int, c0: int, k_max: int, t: float, dt0: float,
              small: bool) -> tuple[Floats, Floats]:
        """Ends (:func:`run_ends`) and durations of the ``k_max`` steps of a decode run of ``n``
        requests from ``c0`` context tokens (the first ``dt0`` long)."""
        if not small:
            dts = self._decode_array(n, c0 + n, k_max)
            return run_ends(dts, t), dts
        dts_l = [dt0]
        if k_max > 1:
            dts_l += self._decode_array(n, c0 + 2 * n, k_max - 1).tolist()
        ends_l = list(accumulate(dts_l, initial=t))  # (run_ends', without its call)
        del ends_l[0]
        return ends_l, dts_l
