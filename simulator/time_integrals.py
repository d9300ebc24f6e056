"""An engine's exact time integrals (issue 37: the engine's metrics apart from its
scheduling): KV tokens in use times seconds, and the seconds during which the waiting head
could not start for lack of KV memory. Running exact sums (:class:`ExactSum`, ``math.fsum``'s
value) whose terms wait in lists a step, a decode run or a span without steps while blocks are
held (``StepLog.held``: a KV load on an idle engine) appends to, folded at each timeline
sample."""

from __future__ import annotations

import numpy as np

from kvbudget.simulator.decode_plan import Floats, Ints
from kvbudget.simulator.exact_sum import ExactSum


class TimeIntegrals:
    """``kv``: seconds x (blocks x block_size); ``hol``: head-of-line blocked seconds."""

    __slots__ = ("block_size", "hol", "kv")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.kv = ExactSum(scale=block_size)
        self.hol = ExactSum()

    def add_step(self, dt: float, used_blocks: int, hol_blocked: bool) -> None:
        """A step of ``dt`` seconds with ``used_blocks`` blocks in use."""
        self.kv.scalars.append(float(used_blocks) * self.block_size * dt)
        if hol_blocked:
            self.hol.scalars.append(dt)

    def add_run(self, dts: Floats, used: Ints, hol_blocked: bool) -> None:
        """Steps of ``dts`` seconds with ``used`` blocks in use, the same terms as
        :meth:`add_step` of each: ``float(used * bs) * dt`` is ``float(used) * bs * dt``
        (exact integers), as products the sum forms when it folds them."""
        if isinstance(dts, list):
            assert len(dts) == len(used), "a step's duration and blocks come in pairs"
            self.kv.factors.extend(dts)
            self.kv.counts.extend(used)
            if hol_blocked:
                self.hol.scalars.extend(dts)
        else:
            # (as floats: used * bs is exact in float64, so float(used) * bs is float(used * bs),
            # with one cast instead of an integer product and a mixed-type one; ~2 us a run)
            self.kv.arrays.append(np.multiply(used, float(self.block_size)) * dts)
            if hol_blocked:
                self.hol.arrays.append(np.asarray(dts, np.float64))

    def fold(self) -> None:
        """Fold the waiting terms into the exact sums once there are many."""
        self.kv.fold_if_many()
        self.hol.fold_if_many()
