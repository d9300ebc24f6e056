"""The arithmetic of a run of a group's steps, done at once (skip-ahead's planner): the blocks
each step of the group takes, by step (``take``, kept by the group as its members join), give
the blocks in use during each step of a run (:func:`run_used`), cut at the first step that runs
out of them; a run of decode steps (every running request gets one token a step, so step ``j``
from 0 attends to ``c0 + n (j + 1)`` tokens) is priced at once (:meth:`DecodeRunPlanner.steps`)
and cut at the step in progress at the next external event (:meth:`DecodeRunPlanner.keep`). A
short run (:data:`GROUP_SMALL_K`) in Python numbers, a longer one with arrays: the same bits
(``tests/model/test_properties.py`` compares them).
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
# The decode group plans runs of up to this many steps in Python numbers (blocks and KV terms
# too, ~0.7 us a step), longer ones with arrays (~20 us however long): measured crossover.
GROUP_SMALL_K = 48
_TIE = """A run's last step may end exactly at ``t_ext``, the next external event: the run driver's
events (a gateway timer, an arrival, a client's retry or timeout, a closed loop's send) are
URGENT (``simulator/alarm.py``), so the event runs before the run's end, whenever either was
made, as it runs before stepping's step ending then, and the step that follows sees what it did
(a request the gateway admitted at that instant is in it).

A fleet's replica plans its runs past events of the fleet that need not end them (arrivals
routed elsewhere, gateway timers and samples, see ``fleet.Fleet._next_touch_s``); one of them
at the end of a step of the run would run in another order than stepping's: a request finishing
then is seen before the event (a gateway sample, an admission into the freed room), a request
routed to the replica then (mispredicted) joins a step earlier or later. Its planner's ``tie``
gives the first step ending at an instant where such an event may be due, and the run ends
with the step before it (or with that step when it is the first), so that step is scheduled
when it starts, as stepping does. (Steps and arrivals on grids tie; continuous times do not,
and the run is as long as before.)"""


def run_ends(dts: Floats, t: float) -> Floats:
    """The ends of steps ``dts`` long from ``t``: sums in stepping's order (``t += dt``, step by
    step: the same bits), a list of a list."""
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
    ``k`` in steps ``first[k]``, ``first[k] + block_size``, .. before ``end[k]``. Counted by
    phase (``s % block_size``): at ``s = p + block_size * t`` a member of phase ``p`` adds 1
    from its first ``t`` and 1 less from its end's, summed along ``t``."""
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
    """The blocks in use during each of at most ``k_max`` steps of a run from a group's step
    ``s0`` (its blocks taken, ``used_now`` in use), steps ``s0 + 1``.. taking ``take[s]``
    more, up to the first that runs out of the ``free`` ones; ``small``: in Python numbers."""
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
        # the first of a run's step ends where another event may be due, -1 for none (_TIE)
        self.tie: Callable[[Floats], int] | None = None
        # whether a timeline sample falls in [t0, t1) (keep's ``lag``; by default, always)
        self.sample_in: Callable[[float, float], bool] = lambda t0, t1: True
        # a run's step times as an array (the bits of one step_time call per step)
        self._decode_array = cost.decode_step_times
        self._step_time = cost.step_time

    def decode_step(self, n: int, context: int) -> float:
        """``StepFeatures(0, n, context, 0, 0)`` priced: ``n`` requests decoding."""
        return float(self._step_time(0.0, float(n), float(context), 0.0, 0.0))

    @staticmethod
    def bound(k_max: int, t: float, t_ext: float, dt0: float, lag: int = 0) -> int:
        """A bound on a run of at most ``k_max`` steps from ``t`` (the first ``dt0`` long): to the
        step in progress at ``t_ext`` and ``lag`` steps more (:meth:`keep`)."""
        k_max = min(k_max, MAX_JUMP_STEPS)
        if t_ext != math.inf and k_max > 1 and dt0 > 0:
            # step times never shrink during a run (the context only grows), so the run
            # reaches t_ext within (t_ext - t) / dt0 + 1 steps
            k_max = max(1, min(k_max, int((t_ext - t) / dt0) + 2 + lag))
        return k_max

    def keep(self, ends: Floats, t_ext: float, until: float, lag: int = 0) -> int:
        """How many steps of a planned run (ending at ``ends``) run: up to the step in progress
        at ``until`` (or ending then, :data:`_TIE`), before the first that ties with another
        event (``tie``); planned to ``until`` past ``t_ext`` (``fast_decode``'s ``_plan_until``),
        those up to the one in progress at ``t_ext`` and those ending by ``until`` (whose
        figures no sample reads). ``lag``: under async scheduling a request that comes during a
        step is schedulable once the next has ended (``engine.Engine._add``), so the step after
        the one in progress at ``until`` is kept unless a timeline sample (reading its figures,
        the request counted) falls in it."""
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
        """Ends (sums from ``t`` in stepping's order: the same bits) and durations of the
        ``k_max`` steps of a decode run of ``n`` requests from ``c0`` context tokens (the first
        ``dt0`` long); ``small``: in Python numbers, else arrays."""
        if not small:
            dts = self._decode_array(n, c0 + n, k_max)
            return run_ends(dts, t), dts
        dts_l = [dt0]
        if k_max > 1:
            dts_l += self._decode_array(n, c0 + 2 * n, k_max - 1).tolist()
        ends_l = list(accumulate(dts_l, initial=t))  # (run_ends', without its call)
        del ends_l[0]
        return ends_l, dts_l
