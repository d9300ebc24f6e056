"""The inter-token gaps' bookkeeping of one engine (issue 37: the engine's metrics apart from
its scheduling): each request's runs of tokens in consecutive steps, and the gaps they give.

While a request gets a token in consecutive steps (a *segment*, from step ``start[i]``), its
token number k (the engine's ``num_output_tokens``) came at step ``base[i] + k``, so decode
runs and the decode group keep it without a write; a token that does not continue the segment
closes it (``closed``: row -> (first step, last step) of each) and starts the next. Steps
count from 1 (the engine's ``num_steps`` after the step).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kvbudget.simulator.serving import FloatArray, IntArray

NO_SEGMENT = -(1 << 62)
"""``base`` of a request with no token yet: never continues."""
TokenGaps = tuple[IntArray, FloatArray, IntArray]
"""Inter-token gaps of an engine's finished requests: (tier code, gap in seconds, number of
gaps), one row per step and tier (and one per gap across a pause), unaggregated."""


class TokenSegments:
    """The segments of every row (see the module docstring). ``base`` is read by the engines'
    per-token loops (``base.item(i) + output != step``: :meth:`new_segment` then)."""

    __slots__ = ("base", "closed", "start")

    def __init__(self, n: int) -> None:
        self.base = np.full(n, NO_SEGMENT, np.int64)
        self.start = np.zeros(n, np.int64)
        self.closed: dict[int, list[tuple[int, int]]] = {}

    def reset(self, i: int) -> None:
        """Row ``i`` comes in afresh (no token yet)."""
        self.base[i] = NO_SEGMENT
        if self.closed:
            self.closed.pop(i, None)

    def grow(self, cap: int) -> None:
        """Grow to ``cap`` rows (the rows there keep theirs)."""
        base = np.full(cap, NO_SEGMENT, np.int64)
        base[: len(self.base)] = self.base
        start = np.zeros(cap, np.int64)
        start[: len(self.start)] = self.start
        self.base, self.start = base, start

    def drop(self) -> None:
        """Let the rows' state go (the engine's ``drop_request_state``)."""
        self.base = np.zeros(0, np.int64)
        self.start = np.zeros(0, np.int64)
        self.closed = {}

    def note(self, rows: IntArray, output: IntArray, step: int) -> None:
        """``rows`` sampled their token number ``output`` at ``step``: those whose previous
        token was not at ``step - 1`` start a segment."""
        off = np.flatnonzero(self.base[rows] + output != step)
        if off.size:
            for i, o in zip(rows[off].tolist(), output[off].tolist(), strict=True):
                self.new_segment(i, o, step)

    def new_segment(self, i: int, output: int, step: int) -> None:
        """Row ``i``'s token number ``output`` came at ``step``, not right after its previous
        one: close the segment that ended there (if any) and start one."""
        if output > 1:
            last = self.base.item(i) + output - 1
            self.closed.setdefault(i, []).append((self.start.item(i), last))
        self.base[i] = step - output
        self.start[i] = step

    def gaps(self, ends: FloatArray, rows: IntArray, num_output_tokens: IntArray,
             tiers: IntArray) -> TokenGaps:
        """The inter-token gaps of ``rows`` (finished, with ``num_output_tokens`` each and
        tier codes ``tiers``), given the end times of every step (``ends[s - 1]``: step s),
        as ``vllm bench serve`` counts them (each token's time minus the previous token's, the
        first token's excluded): a gap of step s's duration for each request whose tokens came
        at steps s - 1 and s, and one gap per pause (a request preempted, or not scheduled for
        some steps), from its last token before the pause to its first after it. Returns
        (tier code, gap_s, number of gaps) rows with a number > 0."""
        num = len(ends)
        first = self.start[rows]
        last = self.base[rows] + num_output_tokens
        pause_rows: list[int] = []
        pause_from: list[int] = []
        pause_to: list[int] = []
        seg_rows: list[int] = []
        seg_first: list[int] = []
        seg_last: list[int] = []
        if self.closed:
            for j, i in enumerate(rows.tolist()):
                closed = self.closed.get(i)
                if not closed:
                    continue
                for k, (a, b) in enumerate(closed):
                    seg_rows.append(j)
                    seg_first.append(a)
                    seg_last.append(b)
                    pause_rows.append(j)
                    pause_from.append(b)
                    pause_to.append(closed[k + 1][0] if k + 1 < len(closed) else int(first[j]))
        seg_j = np.concatenate((np.arange(len(rows)), np.asarray(seg_rows, np.int64)))
        seg_a = np.concatenate((first, np.asarray(seg_first, np.int64)))
        seg_b = np.concatenate((last, np.asarray(seg_last, np.int64)))
        # step s (2..num) gives a gap of ends[s-1] - ends[s-2] to every segment with a < s <= b
        step_gap = np.diff(ends)  # step_gap[s - 2]
        out_tier: list[IntArray] = []
        out_gap: list[FloatArray] = []
        out_num: list[IntArray] = []
        seg_tier = tiers[seg_j]
        for code in range(int(seg_tier.max()) + 1 if seg_tier.size else 0):
            mine: npt.NDArray[np.bool_] = seg_tier == code
            if not mine.any():
                continue
            counts = np.cumsum(
                np.bincount(seg_a[mine] + 1, minlength=num + 2)
                - np.bincount(seg_b[mine] + 1, minlength=num + 2)
            )[2 : num + 1]
            has = np.flatnonzero(counts)
            out_tier.append(np.full(has.size, code, np.int64))
            out_gap.append(step_gap[has])
            out_num.append(counts[has])
        if pause_rows:
            p_from = np.asarray(pause_from, np.int64)
            p_to = np.asarray(pause_to, np.int64)
            out_tier.append(tiers[np.asarray(pause_rows, np.int64)].astype(np.int64))
            out_gap.append(ends[p_to - 1] - ends[p_from - 1])
            out_num.append(np.ones(len(pause_rows), np.int64))
        if not out_tier:
            return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
        return np.concatenate(out_tier), np.concatenate(out_gap), np.concatenate(out_num)


class UnreadSegments(TokenSegments):
    """The segments of an engine whose gaps nobody reads (a disaggregated prefill replica: its
    one token per request is the client's first at most, ``disagg.DisaggFleet.token_gaps``):
    nothing is kept (``base`` stays :data:`NO_SEGMENT`, so every token calls
    :meth:`new_segment`, which does nothing)."""

    __slots__ = ()

    def reset(self, i: int) -> None:
        pass

    def new_segment(self, i: int, output: int, step: int) -> None:
        pass

    def note(self, rows: IntArray, output: IntArray, step: int) -> None:
        pass

    def gaps(self, ends: FloatArray, rows: IntArray, num_output_tokens: IntArray,
             tiers: IntArray) -> TokenGaps:
        raise AssertionError("an engine with UnreadSegments has no gaps to read")
