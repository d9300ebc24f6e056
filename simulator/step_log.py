"""What an engine records of its steps (issue 37: the engine's metrics apart from its
scheduling): each step's end (the inter-token gaps are read from them), the exact time
integrals (:mod:`kvbudget.simulator.time_integrals`) and the timeline's samples
(:mod:`kvbudget.simulator.timeline`). A step, or a decode run of steps, is logged as it is
scheduled (its integrals and samples) and as it ends (its end times).

The one speed trick: a step's end is appended to a list, the cheapest thing a step can do; the
list goes to an array chunk at each timeline sample (and when a run's array of ends is kept),
and every :data:`MERGE_CHUNKS` chunks are merged into one, so what a step leaves behind is
its 8 bytes.
"""

from __future__ import annotations

import numpy as np

from kvbudget.simulator.decode_plan import Floats, Ints
from kvbudget.simulator.serving import FloatArray
from kvbudget.simulator.time_integrals import TimeIntegrals
from kvbudget.simulator.timeline import Timeline

__all__ = ["MERGE_CHUNKS", "StepLog"]

MERGE_CHUNKS = 256
"""Chunks of step ends merged into one at a timeline sample once this many have come."""


class StepLog:
    """One engine's log of its steps: ``timeline`` (its samples), ``integrals`` (KV
    token-seconds, head-of-line blocked seconds) and the steps' end times (:meth:`ends`)."""

    __slots__ = ("_chunks", "_ends", "_merged", "integrals", "timeline")

    def __init__(self, period_s: float, capacity_tokens: int, block_size: int) -> None:
        self.timeline = Timeline(period_s, capacity_tokens, block_size)
        self.integrals = TimeIntegrals(block_size)
        self._ends: list[float] = []  # the step ends since the last flush
        self._chunks: list[FloatArray] = []  # the ones before, as arrays
        self._merged = 0  # the leading chunks that are merges of MERGE_CHUNKS chunks

    def scheduled(self, t1: float, dt: float, used_blocks: int, hol_blocked: bool,
                  reserved: int, counts: tuple[int, int], num_preemptions: int) -> None:
        """A step of ``dt`` seconds, ending at ``t1``, with ``used_blocks`` KV blocks in use
        (``hol_blocked``: the waiting head was refused for lack of KV); ``reserved``,
        ``counts`` (running, waiting) and ``num_preemptions``: the timeline's figures as it
        was scheduled."""
        self.integrals.add_step(dt, used_blocks, hol_blocked)
        if self.timeline.next_s < t1:  # a sample is due
            self.timeline.sample_step(t1, used_blocks, reserved, counts, num_preemptions)
            self._settle()

    def scheduled_run(self, step_end: Floats, used: Ints, dts: Floats, hol_blocked: bool,
                      reserved: int, counts: tuple[int, int], num_preemptions: int) -> None:
        """:meth:`scheduled` of the steps of a decode run, which end at ``step_end`` (``used``:
        the blocks in use during each, ``dts``: their durations)."""
        self.integrals.add_run(dts, used, hol_blocked)
        if self.timeline.next_s < step_end[-1]:  # a sample is due
            self.timeline.sample_steps(step_end, used, reserved, counts, num_preemptions)
            self._settle()

    def held(self, t0: float, t1: float, used_blocks: int) -> None:
        """No step ran from ``t0`` to ``t1`` (the engine idle, or waiting for held work: a KV
        load, ``remote_kv``, ``kv_offload``) while ``used_blocks`` KV blocks were in use: their
        token-seconds, a step's term (cached blocks no request holds are free, so an engine
        idle without held work adds none)."""
        if used_blocks:
            self.integrals.add_step(t1 - t0, used_blocks, False)

    def ended(self, t1: float) -> None:
        """A step ended at ``t1``."""
        self._ends.append(t1)

    def ended_run(self, step_end: Floats) -> None:
        """The steps of a decode run ended at ``step_end``."""
        if isinstance(step_end, list):
            self._ends.extend(step_end)
        else:
            self._flush()
            self._chunks.append(np.asarray(step_end, np.float64))

    def ends(self) -> FloatArray:
        """Every step's end time, in order (``ends[s - 1]``: step s)."""
        self._flush()
        chunks = self._chunks
        if not chunks:
            return np.zeros(0, np.float64)
        return chunks[0].copy() if len(chunks) == 1 else np.concatenate(chunks)

    def last_ends(self, n: int) -> list[float]:
        """The last ``n`` step ends (all of them when fewer), in order, read from the newest
        chunks only."""
        if n <= 0:
            return []
        out = self._ends[-n:]
        for chunk in reversed(self._chunks):
            need = n - len(out)
            if need <= 0:
                break
            out = chunk[-need:].tolist() + out
        return out

    def drop_ends(self) -> None:
        """Let the end times go (the engine's ``drop_request_state``)."""
        self._ends = []
        self._chunks = []

    def _flush(self) -> None:
        """Move the step ends listed since the last flush to an array chunk."""
        if self._ends:
            ends = self._ends
            self._chunks.append(np.fromiter(ends, np.float64, len(ends)))
            ends.clear()

    def _settle(self) -> None:
        """At a timeline sample: fold the integrals' waiting terms into their exact sums, and
        merge the chunks of step ends once there are many."""
        self._flush()
        self.integrals.fold()
        chunks = self._chunks
        if len(chunks) - self._merged >= MERGE_CHUNKS:
            # the step ends since the last merge as one array (a chunk holds a few steps'
            # ends, and an array's own ~100 bytes would double what they take)
            chunks[self._merged :] = [np.concatenate(chunks[self._merged :])]
            self._merged += 1
