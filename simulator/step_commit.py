"""What a step does to an engine's requests when it ends, as vLLM v1's
``Scheduler.update_from_output`` (``vllm/v1/core/sched/scheduler.py``): :meth:`StepCommit.rows`
(a decode group's step: :meth:`~StepCommit.decode_step`, the same updates).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kvbudget.simulator.kv_blocks import KVBlocks
from kvbudget.simulator.serving import FloatArray, IntArray
from kvbudget.simulator.spec_decode import SpecDecode, SpecRows
from kvbudget.simulator.token_segments import TokenSegments

__all__ = ["CommitTarget", "StepCommit"]


class CommitTarget(SpecRows, Protocol):
    """What of the engine a commit reads and writes (``t``: when the step ended; ``num_steps``:
    those ended, this one included)."""

    first_token_s: FloatArray
    finished_s: FloatArray
    in_engine: npt.NDArray[np.bool_]
    running: list[int]
    kv: KVBlocks
    segments: TokenSegments
    t: float
    num_steps: int
    max_model_len: int
    spec: SpecDecode | None


class StepCommit:
    """Commits an engine's steps and keeps two facts of its running set."""

    __slots__ = ("_e", "_on_finish", "_stop_running", "all_decode", "synced")

    def __init__(
        self,
        engine: CommitTarget,
        *,
        on_finish: Callable[[int, float], None],
        stop_running: Callable[[list[int]], None],
    ) -> None:
        self._e = engine
        self._on_finish = on_finish
        self._stop_running = stop_running
        # True only while every running request decodes (one token to compute, output > 0):
        # a start clears it, removals keep it, a commit sampling every running request sets it
        self.all_decode = False
        # every running request got a token in the last committed step (a start clears it)
        self.synced = False

    def rows(self, rows: IntArray, new: IntArray, aborted: list[int]) -> None:
        """Commit a step of ``new`` tokens for each of ``rows``, less those ``aborted``."""
        e = self._e
        if aborted:
            keep = ~np.isin(rows, aborted)
            rows, new = rows[keep], new[keep]
        # every running request had its last token in the last step, and none started since
        continued = self.synced
        computed = e.num_computed_tokens[rows] + new
        e.num_computed_tokens[rows] = computed
        if e.kv.prefix is not None:
            e.kv.prefix.register(rows, computed)
        spec = e.spec
        if spec is not None:  # drafts accepted or rejected (spec_decode)
            computed = spec.verify(e, rows, new, computed)
        sampled = rows[computed >= e.num_tokens[rows]]
        self.synced = sampled.size == len(e.running)
        if sampled.size == 0:
            return
        if self.synced:
            self.all_decode = True
        output = e.num_output_tokens[sampled] + 1
        e.num_output_tokens[sampled] = output
        e.num_tokens[sampled] += 1
        # (with spec_decode: a gap a step with output, however many tokens it carried)
        marks = output if spec is None else spec.output_steps(sampled)
        if not continued:  # else every sampled request continues its segment
            e.segments.note(sampled, marks, e.num_steps)
        first = sampled[np.isnan(e.first_token_s[sampled])]
        if first.size:
            e.first_token_s[first] = e.t
        if spec is not None:  # the next step's drafts (spec_decode)
            spec.propose(e, sampled, output)
        done = sampled[output >= e.target_output[sampled]]
        if done.size:
            self.finish(done.tolist())

    def decode_step(self, m: int, tail: list[tuple[int, int]], done: list[int],
                    join: Callable[[int, int, int], None]) -> None:
        """:meth:`rows` of a step of ``m`` running requests all decoding (or verifying), committed
        by the caller (``done``: those finished), then of the few that started (``tail``: row,
        new tokens), in Python numbers; a tail row with its first token joins (``join``: row,
        computed, output) while those before it did. (Decoders cached their prompt blocks.)"""
        e = self._e
        if tail and e.kv.prefix is not None:
            rows = np.array([i for i, _ in tail], np.int64)
            new = np.array([n for _, n in tail], np.int64)
            e.kv.prefix.register(rows, e.num_computed_tokens[rows] + new)
        sampled = m
        joining = True  # running order stays join order (the group's members come first)
        num_computed, num_tokens, num_output = e.num_computed_tokens, e.num_tokens, e.num_output_tokens
        step, segments, spec = e.num_steps, e.segments, e.spec
        for i, n_new in tail:
            computed_i = num_computed.item(i) + n_new
            num_computed[i] = computed_i
            tokens_i = num_tokens.item(i)
            if computed_i >= tokens_i:
                sampled += 1
                output_i = num_output.item(i) + 1
                num_output[i] = output_i
                num_tokens[i] = tokens_i + 1
                mark = output_i if spec is None else spec.sampled_row(e, i, output_i)
                if segments.base.item(i) + mark != step:
                    segments.new_segment(i, mark, step)
                if math.isnan(e.first_token_s.item(i)):
                    e.first_token_s[i] = e.t
                if output_i >= e.target_output.item(i):
                    done.append(i)
                elif joining:
                    join(i, computed_i, output_i)
            else:  # still prefilling: the group dissolves next step
                joining = False
        self.synced = synced = sampled == len(e.running)
        if synced:
            self.all_decode = True  # as in rows
        if done:
            self.finish(done)

    def finish(self, finished: list[int]) -> None:  # they have all their output
        e = self._e
        t = e.t
        self._stop_running(finished)
        for i in finished:
            e.kv.free(i)
            e.in_engine[i] = False
            e.finished_s[i] = t
        for i in finished:
            self._on_finish(i, t)
