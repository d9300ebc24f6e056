"""Speculative decoding in the engine (vLLM v1's, ``vllm/v1/core/sched/scheduler.py`` of
0.32.0): :class:`SpecDecode`, which the scheduler and the commit call when an engine has a
``speculative_config`` (:class:`kvbudget.perf.speculative.SpeculativeConfig`).

* **Drafts** (:meth:`SpecDecode.propose`, as a step commits, when vLLM's drafter proposes
  them): every request that sampled a token and goes on gets ``k`` draft tokens
  (``num_speculative_tokens``, clipped to ``max_model_len``), added to its ``num_tokens``: vLLM's
  ``num_tokens_with_spec`` (``scheduler.py:597``), so the running loop schedules ``1 + k`` new
  tokens for it, counted in the token budget, with KV blocks for them plus
  ``num_lookahead_tokens`` more (:attr:`SpecDecode.lookahead`: ``k`` for EAGLE, MTP and draft
  models, 0 for n-gram: ``vllm/config/vllm.py:615-641``; ``allocate_slots(...,
  num_lookahead_tokens=...)``, ``scheduler.py:781``). A request preempted or aborted drops its
  drafts (``scheduler.py:1594``).
* **The step's cost**: its features price the verify rows as chunks of ``1 + k`` query tokens
  (``step_cost.rows_features``), plus the draft's ``k`` forward passes over the requests that
  verify (:meth:`SpecDecode.draft_seconds`; none for n-gram).
* **Verify** (:meth:`SpecDecode.verify`, as the step commits): drafts the token budget cut are
  dropped (``scheduler.py:861-876``); of the rest ``A`` are accepted, drawn per request and per
  step (keyed by the request's row and its output count: the same draws however steps are
  run), never past the request's target output; the rejected ones roll ``num_computed_tokens``
  back (``scheduler.py:2117-2127``: their slots are reused by the next step's tokens; vLLM keeps
  the blocks with the request until it finishes or is preempted); the step emits ``A + 1``
  tokens.
* **Trees** (``speculative_token_tree``, vLLM 0.11.0): the ``k`` drafts are the tree's nodes,
  all verified; one path is accepted, at most the tree's depth (of the nodes the budget
  reached); the draft's passes are the tree's levels, wider than one token a request
  (:func:`kvbudget.perf.speculative.vllm_tree_shape`).
* Inter-token gaps: a step's tokens reach the client together, so the gaps are counted per
  step with output, as ``vllm bench serve`` counts them per streamed chunk
  (:meth:`SpecDecode.output_steps`).
"""

from __future__ import annotations

import math
import struct
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import GPUSpec
from kvbudget.perf.models import ModelSpec, get_model
from kvbudget.perf.speculative import (
    SpeculativeConfig,
    draft_pass_model,
    mean_acceptance_length,
    parse_token_tree,
)
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.simulator.serving import FloatArray, IntArray
from kvbudget.simulator.small_arrays import isum

__all__ = ["SPEC_STREAM", "SpecDecode", "SpecEngine", "SpecRows", "draft_warning", "fleet_stats",
           "make_spec_decode"]



class SpecRows(Protocol):
    """The per-request arrays speculative decoding reads and writes (vLLM's names)."""

    num_tokens: IntArray
    num_computed_tokens: IntArray
    num_output_tokens: IntArray
    target_output: IntArray
    arrival_s: FloatArray
    tier_priority: IntArray
    in_engine: npt.NDArray[np.bool_]


class SpecEngine(SpecRows, Protocol):
    """What of the engine drafting reads besides the arrays: the model's length."""

    max_model_len: int


StepTerms = tuple[int, float, FloatArray, float, FloatArray, float, int]
""":meth:`SpecDecode.step_terms`' answer."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LOOKAHEAD_METHODS = ("eagle", "eagle3", "mtp", "draft_model")


_MASK64 = (1 << 64) - 1
_GOLDEN_INT, _M1_INT, _M2_INT = int(_GOLDEN), int(_M1), int(_M2)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)
_UNIT = 1.0 / 2**53
_AHEAD = np.arange(4096, dtype=np.uint64) * _GOLDEN
"""``s * _GOLDEN`` for a request's steps with output ``s`` (:meth:`SpecDecode.reset`)."""
AHEAD_ROWS = 64
"""Rows whose acceptance draws are made at once (:meth:`SpecDecode._draw_ahead`): one pass of
array operations costs ~4,000 instructions whatever its length, a row's draws a few hundred
elements of it (measured on ``benchmarks/bench_specdec.py``'s part 3)."""


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser (Steele, Lea and Flood 2014), element-wise on uint64 arrays, in
    place (``x`` is returned)."""
    t = x >> _S30
    x ^= t
    x *= _M1
    np.right_shift(x, _S27, out=t)
    x ^= t
    x *= _M2
    np.right_shift(x, _S31, out=t)
    x ^= t
    return x


def _bands(log_rate: float, depth: int) -> list[tuple[int, int]]:
    """:meth:`SpecDecode._accepted_of` by comparisons: a draw of ``x`` (53 bits, ``u = (x + 1)
    / 2**53``) counts ``j = 1..depth`` where ``log(u) / log_rate >= j``: where ``x <= lo``, not
    where ``x > hi`` (a billionth and two either side of ``rate**j * 2**53 - 1``, far beyond the
    logarithm's rounding). None for more than 8 (the logarithms are cheaper) or below 0."""
    if not log_rate or depth > 8:
        return []
    bands = []
    for j in range(1, depth + 1):
        x = math.exp(j * log_rate) * 2.0**53 - 1.0
        lo, hi = math.floor(x * (1.0 - 1e-9)) - 2, math.ceil(x * (1.0 + 1e-9)) + 2
        if lo < 0:
            return []
        bands.append((lo, hi))
    return bands


class SpecDecode:
    """One engine's speculative decoding (see the module docstring): the drafts each request
    holds (``num_spec_tokens``), its steps with output (``num_output_steps``) and the run's
    counts. ``rng`` (the run's seeded Generator) draws the key of the acceptance stream; each
    request's draw at a step is a counter-based uniform of (key, row, arrival, its steps with
    output so far), drawn for all its steps as it comes in (:meth:`reset`)."""

    __slots__ = (
        "_ahead_bits",
        "_ahead_n",
        "_bands",
        "_blocks",
        "_by_priority",
        "_depth_at",
        "_draft",
        "_draws",
        "_draws_at",
        "_gains",
        "_gap_s",
        "_key",
        "_num_draws",
        "_terms",
        "_widths",
        "config",
        "depth",
        "draft_s",
        "k",
        "log_rate",
        "lookahead",
        "num_accepted_tokens",
        "num_draft_tokens",
        "num_output_steps",
        "num_spec_tokens",
        "num_verify",
        "rate",
    )

    def __init__(self, config: SpeculativeConfig, draft: VllmStepModel | None,
                 rng: np.random.Generator, num_rows: int) -> None:
        self.config = config
        self.k = config.num_speculative_tokens
        # a tree (speculative_token_tree): k drafts verified, one path of them accepted, at
        # most as deep as the drafts the budget reached allow (vLLM sorts the tree breadth
        # first); the draft's passes as wide as the shape's (perf.speculative.vllm_tree_shape)
        shape = config.shape
        self.depth = shape.max_accepted
        self._widths = None if shape.is_chain else shape.pass_widths
        tree = config.speculative_token_tree
        self._depth_at = None if self._widths is None or tree is None else np.array(
            [0] + [len(node) for node in parse_token_tree(tree, "speculative_token_tree")],
            np.int64)
        self.rate = config.rate
        self.log_rate = float(np.log(self.rate)) if 0.0 < self.rate < 1.0 else 0.0
        self._bands = _bands(self.log_rate, self.depth)
        # each tier's rate by its priority, when they differ
        self._by_priority = config.rate_by_priority
        self.lookahead = self.k if config.method in _LOOKAHEAD_METHODS else 0
        self._draft = draft
        # one draft pass runs inside the engine's step: the host's gap between steps is not
        # paid again
        self._gap_s = 0.0 if draft is None else draft.step_overhead_s
        self._key = int(rng.integers(0, 2**63, dtype=np.int64))
        self.num_spec_tokens = np.zeros(num_rows, np.int64)
        self.num_output_steps = np.zeros(num_rows, np.int64)
        # each request's accepted drafts (k drafts, before the cap of its target output) at
        # its steps with output 0, 1, ...: _draws[_draws_at[row] + steps] (reset; int8: k is
        # at most MAX_SPECULATIVE_TOKENS, 64)
        self._draws = np.zeros(0, np.int8)
        # the tokens the draws before each give, running: _gains[x + 1] - _gains[x] is
        # _draws[x] + 1 (a step's accepted drafts and its own token), rising along the store
        self._gains = np.zeros(1, np.int64)
        self._num_draws = 0
        self._draws_at = np.zeros(num_rows, np.int64)
        # rows drawn ahead, before they come (_draw_ahead): their draws' count (0: none) and
        # the arrival's bits they were drawn with (their key's part that may change)
        self._ahead_n = np.zeros(num_rows, np.int64)
        self._ahead_bits = np.zeros(num_rows, np.uint64)
        self.num_verify = self.num_draft_tokens = self.num_accepted_tokens = 0
        self.draft_s = 0.0
        self._terms: dict[int, tuple[object, StepTerms]] = {}  # step_terms', by size
        self._blocks = np.zeros(0, np.int64)  # (blocks_table)

    def _rows(self, n: int) -> None:
        """Grow the per-row arrays to ``n`` rows (a fleet's replica grows its rows)."""
        if len(self.num_spec_tokens) < n:
            for name in ("num_spec_tokens", "num_output_steps", "_draws_at", "_ahead_n",
                         "_ahead_bits"):
                old = getattr(self, name)
                new = np.zeros(n, old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)

    def reset(self, e: SpecRows, i: int) -> None:
        """Row ``i`` comes in afresh (no output, no drafts): its stream's key, from the run's
        key, the row and its arrival, and its accepted drafts at each of the steps with output
        it may take (one token a step at least: as many as its target output), unless they
        were drawn ahead with the arrival, so the key, it has now (:meth:`_draw_ahead`)."""
        if i >= len(self.num_spec_tokens):
            self._rows(i + 1)
        self.num_spec_tokens[i] = 0
        self.num_output_steps[i] = 0
        # the arrival's float64 bits (the key is the run's, the row's and theirs)
        (arrival,) = struct.unpack("<Q", struct.pack("<d", e.arrival_s.item(i)))
        n = e.target_output.item(i)
        ahead = self._ahead_n.item(i)
        self._ahead_n[i] = 0
        if ahead and ahead == n and self._ahead_bits.item(i) == arrival:
            return  # (drawn with the key it has now: its draws are at _draws_at[i])
        if self._by_priority or not 0.0 < self.rate < 1.0:
            # _mix's operations on Python ints, wrapped to 64 bits (the same bits as on uint64
            # arrays: one request's few operations are cheaper so)
            x = self._key ^ ((i * _GOLDEN_INT) & _MASK64) ^ arrival
            x ^= x >> 30
            x = (x * _M1_INT) & _MASK64
            x ^= x >> 27
            x = (x * _M2_INT) & _MASK64
            start = self._room(e, n)
            self._draws_at[i] = start
            self._store(start, self._drawn(x ^ (x >> 31), e.tier_priority.item(i), n))
        else:
            self._draw_ahead(e, i)

    def _draw_ahead(self, e: SpecRows, i: int) -> None:
        """Row ``i``'s draws and those of the :data:`AHEAD_ROWS` rows after it not in the
        engine nor drawn already, which an open-loop workload's rows come in the order of: the
        operations of :meth:`reset` and :meth:`_drawn` element by element (a single rate), on
        all of them at once. A row's key is checked as it comes (a closed loop's users set a
        row's arrival as they send it)."""
        hi = min(i + AHEAD_ROWS, len(e.target_output))
        self._rows(hi)
        later = np.arange(i + 1, hi, dtype=np.int64)
        later = later[~e.in_engine[later] & (self._ahead_n[later] == 0)]
        rows = np.concatenate((np.array([i], np.int64), later))
        lengths = e.target_output[rows]
        firsts = np.add.accumulate(lengths)
        total = int(firsts[-1])
        firsts -= lengths  # each row's first draw, from the first's
        start = self._room(e, total)
        self._draws_at[rows] = firsts + start
        self._ahead_n[later] = lengths[1:]
        keys = rows.astype(np.uint64)
        keys *= _GOLDEN
        keys ^= np.uint64(self._key)
        bits = e.arrival_s[rows].view(np.uint64)
        self._ahead_bits[later] = bits[1:]
        keys ^= bits
        keys = _mix(keys)
        # each draw's step with output: 0, 1, ... along each row's
        hashed = np.arange(total, dtype=np.uint64)
        hashed -= np.repeat(firsts, lengths).astype(np.uint64)
        hashed *= _GOLDEN
        hashed ^= np.repeat(keys, lengths)
        self._store(start, self._accepted_of(hashed))

    def _room(self, e: SpecRows, n: int) -> int:
        """Where ``n`` more draws go in the store (made room for)."""
        if self._num_draws + n > len(self._draws):
            self._compact(e, n)
        return self._num_draws

    def _store(self, start: int, drawn: IntArray) -> None:
        """Write ``drawn`` (changed) into the store from ``start``, with their running gains."""
        n = len(drawn)
        self._num_draws = start + n
        self._draws[start : start + n] = drawn
        gains = self._gains[start + 1 : start + n + 1]
        drawn += 1
        np.add.accumulate(drawn, out=gains)
        gains += self._gains.item(start)

    def _compact(self, e: SpecRows, n: int) -> None:
        """Room for ``n`` more draws: the store holds those of the requests in the engine
        and those drawn ahead only (a finished request's are read no more), in a new array no
        smaller than before and at least twice their size and ``n``'s, so that it is copied
        once per as many draws as it holds at least."""
        m = min(len(self._draws_at), len(e.in_engine))
        inside = e.in_engine[:m]
        live = np.flatnonzero(inside | (self._ahead_n[:m] > 0))
        lengths = np.where(inside[live], e.target_output[live], self._ahead_n[live])
        ends = np.add.accumulate(lengths)
        total = int(ends[-1]) if len(ends) else 0
        starts = ends - lengths
        draws = np.zeros(max(len(self._draws), 2 * (total + n), 1 << 16), np.int8)
        draws[:total] = self._draws[np.arange(total) + np.repeat(self._draws_at[live] - starts,
                                                                 lengths)]
        self._draws_at[live] = starts
        self._draws, self._num_draws = draws, total
        self._gains = np.zeros(len(draws) + 1, np.int64)
        np.add.accumulate(draws[:total] + 1, dtype=np.int64, out=self._gains[1 : total + 1])

    def _drawn(self, key: int, priority: int, n: int) -> IntArray:
        """The accepted drafts (``k`` drafts; a tree's ``depth``) of the stream ``key`` (of a
        request of tier ``priority``) at its steps with output ``0 .. n - 1``: ``P(A >= j) =
        rate**j`` by inversion of the counter-based uniform of (key, step) in ``(0, 1]``."""
        k = self.depth
        rate = self.rate
        if self._by_priority:
            rate = next((r for p, r in self._by_priority if p == priority), 0.0)
        if rate >= 1.0:
            return np.full(n, k, np.int64)
        if rate <= 0.0:
            return np.zeros(n, np.int64)
        if n <= len(_AHEAD):
            hashed = _AHEAD[:n] ^ np.uint64(key)
        else:
            hashed = np.arange(n, dtype=np.uint64)
            hashed *= _GOLDEN
            hashed ^= np.uint64(key)
        return self._accepted_of(hashed, rate)

    def _accepted_of(self, hashed: npt.NDArray[np.uint64], rate: float = 0.0) -> IntArray:
        """The accepted drafts of the counters ``hashed`` (:meth:`_drawn`), at ``rate`` when
        tiers' differ (else the engine's)."""
        k = self.depth
        x = _mix(hashed)
        x >>= _S11
        if self._bands and not self._by_priority:  # (_bands: the same answer, by comparisons)
            counted = np.zeros(len(x), np.int64)
            for lo, hi in self._bands:
                below = x <= lo
                if np.count_nonzero(below) != np.count_nonzero(x <= hi):
                    break  # an x at a band's edge: the logarithms
                counted += below
            else:
                return counted
        u: FloatArray = x.astype(np.float64)
        u += 1.0
        u *= _UNIT
        if self._by_priority:
            a: IntArray = np.floor(np.log(u) / np.log(rate)).astype(np.int64)
        else:
            np.log(u, out=u)
            u /= self.log_rate
            # (u is now 0 or more, or -0.0: truncation is floor)
            a = u.astype(np.int64)
        np.minimum(a, k, out=a)
        return a

    def drop(self, e: SpecRows, i: int) -> None:
        """Row ``i`` is preempted or aborted: its drafts go (``scheduler.py:1594``)."""
        d = self.num_spec_tokens.item(i)
        if d:
            e.num_tokens[i] -= d
            self.num_spec_tokens[i] = 0

    def propose(self, e: SpecEngine, sampled: IntArray, output: IntArray) -> None:
        """Drafts for the requests that ``sampled`` a token (``output`` tokens now) and go on,
        as vLLM's drafter proposes them after each step: ``k``, clipped to the model's
        length."""
        live = output < e.target_output[sampled]
        r = sampled if live.all() else sampled[live]
        tokens = e.num_tokens[r]
        d = np.minimum(self.k, e.max_model_len - tokens)
        np.maximum(d, 0, out=d)
        self.num_spec_tokens[r] = d
        e.num_tokens[r] = tokens + d

    def sampled_row(self, e: SpecEngine, i: int, output: int) -> int:
        """Row ``i`` sampled its token number ``output`` (counted in its ``num_tokens``):
        :meth:`output_steps` and :meth:`propose` of one row; returns its steps with output."""
        steps = self.num_output_steps.item(i) + 1
        self.num_output_steps[i] = steps
        if output < e.target_output.item(i):
            tokens = e.num_tokens.item(i)
            d = max(0, min(self.k, e.max_model_len - tokens))
            self.num_spec_tokens[i] = d
            e.num_tokens[i] = tokens + d
        return steps

    def draft_seconds(self, e: SpecRows, rows: IntArray, new: IntArray) -> float:
        """The draft's time in the step scheduling ``new`` tokens for ``rows``: ``k`` forward
        passes over the requests that verify drafts, each a decode step of the draft's step
        model less the host's gap; 0 for n-gram."""
        if self._draft is None or not len(rows):
            return 0.0
        held = self.num_spec_tokens[rows]
        counts = held.tolist()  # (a step's few rows: Python's max and count)
        passes: int = max(counts)
        if not passes:
            return 0.0
        n = len(counts) - counts.count(0)  # those drafting (drafts are never negative)
        if n == len(counts):
            context = float(isum(e.num_computed_tokens[rows]) + isum(new))
        else:
            after = e.num_computed_tokens[rows] + new
            context = float(isum(after[held > 0]))
        return self.passes_seconds(n, passes, context)

    def passes_seconds(self, n: int, passes: int, context: float) -> float:
        """:meth:`draft_seconds` of ``n`` requests drafting, ``passes`` passes the most,
        attending to ``context`` tokens in all (counted in ``draft_s``)."""
        if self._draft is None:
            return 0.0
        if self._widths is not None:  # a tree: every pass runs (vLLM masks what is too long)
            seconds = self._tree_seconds(n, context)
        else:
            seconds = passes * (float(self._draft.step_time(0.0, float(n), context, 0.0, 0.0))
                                - self._gap_s)
        self.draft_s += seconds
        return seconds

    def _tree_seconds(self, n: int, context: float) -> float:
        """A tree's draft passes over ``n`` requests attending to ``context`` tokens in all: a
        pass ``w`` tokens a request wide priced as ``w`` decode rows a request, each reading its
        request's context (as :meth:`draft_run_seconds` prices them, in the same order)."""
        assert self._draft is not None and self._widths is not None
        seconds = 0.0
        for w in self._widths:
            seconds += float(self._draft.step_time(0.0, float(n * w), context * w, 0.0,
                                                   0.0)) - self._gap_s
        return seconds

    def verify(self, e: SpecRows, rows: IntArray, new: IntArray, computed: IntArray) -> IntArray:
        """The step scheduling ``new`` tokens for ``rows`` (now ``computed`` each) has run:
        the drafts it verified are accepted or rejected (see the module docstring). Returns
        ``computed`` after the rejected tokens are rolled back."""
        held = self.num_spec_tokens[rows]
        num = int(np.count_nonzero(held))  # (drafts are never negative)
        if not num:
            return computed
        # the drafts the token budget reached (scheduler.py:861): the others are dropped; a
        # row without drafts (a prefill) has none, so its values below stay as they are
        d: IntArray = np.minimum(held, new - 1)
        out = e.num_output_tokens[rows]
        accepted = self._accepted(e, rows, out, d)
        after: IntArray = computed - (d - accepted)
        e.num_computed_tokens[rows] = after
        e.num_tokens[rows] -= held - accepted  # the dropped and the rejected drafts
        e.num_output_tokens[rows] = out + accepted
        self.num_spec_tokens[rows] = 0
        self.num_verify += num
        self.num_draft_tokens += isum(d)
        self.num_accepted_tokens += isum(accepted)
        return after

    def _accepted(self, e: SpecRows, r: IntArray, out: IntArray, d: IntArray) -> IntArray:
        """Accepted drafts of ``d`` for rows ``r`` with ``out`` output tokens: their draws at
        their counts of steps with output so far (:meth:`reset`; not the order of calls: the
        same draws however steps run, and a request's draws do not depend on the others'), at
        most ``d`` and ``target - out - 1`` (the step's own token is the last)."""
        room = e.target_output[r] - out - 1
        if self._depth_at is not None:  # a tree: one path, as deep as the drafts reached
            d = self._depth_at[d]
        capped: IntArray = np.minimum(self._draws[self._draws_at[r] + self.num_output_steps[r]], d)
        np.minimum(capped, room, out=capped)
        np.maximum(capped, 0, out=capped)
        return capped

    def geometric(self, e: SpecRows, rows: IntArray, steps: IntArray,
                  num: int) -> npt.NDArray[np.int8]:
        """The accepted drafts of ``rows`` (``k`` drafts each) at their next ``num`` steps with
        output, before the cap of their target output (requests x steps): the draws
        :meth:`_accepted` reads at those steps (``steps`` now)."""
        drawn: npt.NDArray[np.int8] = self._draws[(self._draws_at[rows] + steps)[:, None]
                                                   + np.arange(num)]
        return drawn

    def steps_ahead(self, i: int, computed: int, left: int) -> tuple[IntArray, int]:
        """Row ``i``'s computed tokens as each of its next steps verifying ``k`` drafts is
        scheduled, from now (``computed``; ``left`` >= 1 output tokens to go) to the one it has
        its output in (a step gives its draw plus one, before the cap of the target output:
        :meth:`reset`'s running sums), and its steps with output so far."""
        steps = self.num_output_steps.item(i)
        a = self._draws_at.item(i) + steps
        gains = self._gains[a : a + left + 1]  # (a step gives a token or more)
        g0 = gains.item(0)
        return gains[: int(gains.searchsorted(g0 + left))] - (g0 - computed), steps

    def draft_run_seconds(self, num_rows: int, context: IntArray) -> FloatArray | float:
        """:meth:`draft_seconds` of steps of ``num_rows`` requests, each verifying ``k`` drafts,
        attending to ``context`` tokens in all (one a step; not added to ``draft_s``)."""
        draft = self._draft
        if draft is None:
            return 0.0
        if self._widths is not None:
            return self._tree_run_seconds(draft, num_rows, context)
        one = draft.decode_times_at(num_rows, context)  # (its table: the same bits)
        one -= self._gap_s
        one *= self.k
        return one

    def blocks_table(self, block_size: int, max_model_len: int, top: int) -> IntArray:
        """By a request's computed tokens plus ``k + 1`` (below ``top`` at least), the blocks
        of its step's tokens and lookahead slots within the model's length (the engine's
        ``block_size`` and ``max_model_len``)."""
        if len(self._blocks) < top:
            x = np.arange(max(1 << 12, 1 << (top - 1).bit_length()), dtype=np.int64)
            x += self.lookahead
            np.minimum(x, max_model_len, out=x)
            x += block_size - 1
            x //= block_size
            self._blocks = x
        return self._blocks

    def step_terms(self, cost: object, n: int, stop: int) -> StepTerms | None:
        """For verify steps of ``n`` requests (cost model ``cost``) attending to ``c < limit``
        tokens, ``limit >= stop``: ``(limit, fixed, table, dfixed, dtable, gap, k)``, a step
        verifying in ``fixed + table[c]`` and drafting in ``((dfixed + dtable[c]) - gap) * k``
        (a table of zeros without a draft), the bits of the features' price and of
        :meth:`passes_seconds` (``VllmStepModel.chunk_terms`` and ``decode_terms``; kept by
        ``n``); None for a tree or where a table does not serve."""
        kept = self._terms.get(n)
        if kept is not None and kept[0] is cost and stop <= kept[1][0]:
            return kept[1]
        draft = self._draft
        if not isinstance(cost, VllmStepModel) or self._widths is not None:
            return None
        verify = cost.chunk_terms(n, self.k + 1, stop)
        if verify is None:
            return None
        fixed, table = verify
        limit = len(table)
        if draft is None:  # (n-gram: no time)
            terms: StepTerms = (limit, fixed, table, 0.0, np.zeros(limit), 0.0, 0)
        else:
            dterms = draft.decode_terms(n, stop)
            if dterms is None:
                return None
            terms = (min(limit, len(dterms[1])), fixed, table, *dterms, self._gap_s, self.k)
        self._terms[n] = cost, terms
        return terms

    def _tree_run_seconds(self, draft: VllmStepModel, num_rows: int,
                          context: IntArray) -> FloatArray:
        """:meth:`_tree_seconds` of steps attending to ``context`` tokens (one a step)."""
        assert self._widths is not None
        total = np.zeros(len(context), np.float64)
        for w in self._widths:
            one = draft.decode_times_at(num_rows * w, context * w)
            one -= self._gap_s
            total += one
        return total

    def output_steps(self, rows: IntArray) -> IntArray:
        """``rows`` had output in the step being committed: their counts of steps with output
        (what the inter-token gaps count: one gap a step, however many tokens it carried)."""
        steps = self.num_output_steps[rows] + 1
        self.num_output_steps[rows] = steps
        return steps

    def stats(self, num_output_tokens: int, num_steps: int) -> dict[str, object]:
        """The summary's ``engine.speculative``: what was assumed, what happened."""
        c = self.config
        v = self.num_verify
        return {
            "method": c.method,
            "num_speculative_tokens": self.k,
            **({"model": c.model} if c.model is not None else {}),
            **({"speculative_token_tree": c.speculative_token_tree}
               if c.speculative_token_tree is not None else {}),
            "assumed": c.assumed(),
            "acceptance_rate": self.rate,
            "expected_acceptance_length": mean_acceptance_length(self.rate, self.depth),
            "num_verify_steps": v,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "mean_acceptance_length": (1.0 + self.num_accepted_tokens / v) if v else 0.0,
            "num_output_tokens": num_output_tokens,
            "num_engine_steps": num_steps,
            "output_tokens_per_step": num_output_tokens / num_steps if num_steps else 0.0,
            "draft_s": self.draft_s,
            "num_lookahead_tokens": self.lookahead,
        }


SPEC_STREAM = 0x5BEC
"""The acceptance draws' stream of the run's seed (``SeedSequence(seed, spawn_key=(SPEC_STREAM,))``:
apart from every other draw of the run)."""


def make_spec_decode(config: SpeculativeConfig, gpu: GPUSpec, target: ModelSpec,
                     tensor_parallel_size: int, num_rows: int) -> SpecDecode:
    """An engine's :class:`SpecDecode` on ``gpu`` serving ``target``: the draft's step model
    (:func:`kvbudget.perf.speculative.draft_pass_model`) and the seeded acceptance stream."""
    draft = get_model(config.model) if config.model is not None else None
    model = draft_pass_model(config.method, target, draft, gpu, tensor_parallel_size,
                             config.draft_vocab_size)
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(SPEC_STREAM,)))
    return SpecDecode(config, model, rng, num_rows)


def draft_warning(config: SpeculativeConfig | None, target_model: str) -> str:
    """A warning when the draft model is larger than the target ``target_model`` (legal in
    vLLM, but it cannot pay), "" otherwise."""
    if config is None or config.model is None:
        return ""
    draft, target = get_model(config.model), get_model(target_model)
    d, t = draft.num_params, target.num_params
    if d <= t:
        return ""
    return (f"engine.speculative_config.model: draft model {draft.name} ({d / 1e9:.1f}B parameters) is "
            f"larger than the target {target.name} ({t / 1e9:.1f}B): its passes cost more than "
            "the steps they save")


def fleet_stats(per: list[dict[str, object]]) -> dict[str, object]:
    """A fleet's ``engine.speculative`` from its replicas' (one engine configuration): the
    counts summed, the measured means over all of them (output tokens a step: over the
    replicas' steps in all)."""
    def total(key: str) -> float:
        return math.fsum(float(str(p[key])) for p in per)

    out = dict(per[0])
    for key in ("num_verify_steps", "num_draft_tokens", "num_accepted_tokens",
                "num_output_tokens", "num_engine_steps"):
        out[key] = int(total(key))
    steps = total("num_engine_steps")
    out["output_tokens_per_step"] = total("num_output_tokens") / steps if steps else 0.0
    out["draft_s"] = total("draft_s")
    v = total("num_verify_steps")
    out["mean_acceptance_length"] = 1.0 + total("num_accepted_tokens") / v if v else 0.0
    return out
