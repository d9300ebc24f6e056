"""Speculative decoding on the speed-up path (:class:`SpecSkipAheadEngine`), with stepping's
results: the running requests kept as a :class:`SpecGroup` while each verifies ``k`` drafts a
step, as ``fast_decode.DecodeGroup`` keeps decoding ones. A request's accepted drafts are drawn
as it came in (:meth:`SpecDecode.steps_ahead`), so as it joins, its tokens and blocks at each
step follow, added to the group's sums by step at once; a run (planned and cut as a decode run
is) and its commit read slices of those sums. Any other step (blocks that do not fit, a
prefill, drafts the model's length clips, an abort) ends the group and steps as ``Engine``.
"""

from __future__ import annotations

from collections.abc import Generator
from functools import reduce
from operator import add
from typing import Any

import numpy as np
import simpy

from kvbudget.perf.cost_model import CostModel
from kvbudget.perf.step_features import StepFeatures
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.simulator.decode_plan import Floats, grown, run_ends
from kvbudget.simulator.engine import FloatArray, IntArray
from kvbudget.simulator.fast_decode import SkipAheadEngine
from kvbudget.simulator.running_loop import NO_ROWS
from kvbudget.simulator.small_arrays import imin
from kvbudget.simulator.spec_decode import SpecDecode
from kvbudget.simulator.step_commit import CommitTarget
from kvbudget.simulator.step_cost import tail_features

__all__ = ["SpecGroup", "SpecSkipAheadEngine"]

_NEVER = 1 << 62
"""A step the group never reaches (no member's drafts are clipped)."""


Terms = tuple[int, int, float, FloatArray, float, FloatArray, float, int]
"""The group's size, then ``SpecDecode.step_terms``."""

Member = tuple[int, IntArray, int, int, int, int, int, int]
"""A member of a :class:`SpecGroup`: ``(row, comp, sj, steps0, b0, fin, cfin, d)``."""


class SpecGroup:
    """The running requests of a :class:`SpecSkipAheadEngine` while each verifies ``k`` drafts
    a step, with ``fast_decode.DecodeGroup``'s interface; ``members`` by row, in running order
    (:data:`Member`). A member joined at step ``sj`` with ``steps0`` steps with output; as step
    ``s < fin`` is scheduled it has ``comp[s - sj]`` tokens computed plus ``k + 1`` (its
    verify rows' context), ``d`` more than its output tokens, ``steps0 + s - sj`` steps with
    output and the larger of ``b0`` blocks and its step's tokens' and lookahead slots'; after
    step ``fin - 1`` it has all its output, ``cfin`` (computed plus ``k + 1``). Its arrays lag
    until it leaves (:meth:`write`).

    By step ``s``: ``ctx[s]`` the members' ``comp``, ``take[s]`` the blocks the step takes,
    ``finc[s]`` the ``cfin`` of those finishing in step ``s - 1``. ``clip``: the first step
    whose drafts the model's length clips (the group ends there); ``fresh``: the blocks of
    members that joined at the step not yet scheduled; ``terms``: :meth:`price_terms`' last;
    ``draft_run_s``: the draft times of the planned run's steps 1.. (:meth:`run_times`)."""

    __slots__ = ("_cost", "_e", "_spec", "clip", "ctx", "draft_run_s", "fin_min", "finc",
                 "fresh", "members", "step", "take", "terms")

    def __init__(self, e: CommitTarget, spec: SpecDecode, cost: CostModel) -> None:
        self._e, self._spec, self._cost = e, spec, cost
        self.members: dict[int, Member] = {}
        self.ctx, self.take = np.zeros(1024, np.int64), np.zeros(1024, np.int64)
        self.finc: dict[int, int] = {}
        self.step = 0
        self.fin_min = self.clip = _NEVER
        self.fresh: dict[int, int] = {}
        self.terms: Terms | None = None
        self.draft_run_s: Floats | None = None

    def join(self, i: int, c0: int, o0: int, taken: bool = False) -> None:
        """Row ``i`` (``c0`` tokens computed, ``o0`` output) joins at the group's step, its
        blocks for it ``taken`` or not (a request started in the step before)."""
        e, spec = self._e, self._spec
        left = e.target_output.item(i) - o0
        q = spec.k + 1
        comp, steps0 = spec.steps_ahead(i, c0 + q, left)
        num = len(comp)
        s = self.step
        end = s + num
        if end >= len(self.ctx):
            self.ctx, self.take = grown(self.ctx, end), grown(self.take, end)
        self.ctx[s:end] += comp
        last = comp.item(num - 1)
        mml = e.max_model_len
        need = spec.blocks_table(e.kv.block_size, mml, last + 1)[comp]
        b0 = first = e.kv.num_blocks.item(i)
        if b0 > need.item(0):
            np.maximum(need, b0, out=need)
        else:
            first = need.item(0)
        if num > 1:
            self.take[s + 1 : end] += need[1:] - need[:-1]
        if not taken:  # it holds the blocks of its first step from then on
            self.take[s] += first - b0
            self.fresh[i], b0 = b0, first
        if last > mml:  # its drafts clipped at a step (they only grow)
            self.clip = min(self.clip, s + int((comp > mml).argmax()))
        cfin = c0 + left + q
        finc = self.finc
        finc[end] = finc.get(end, 0) + cfin
        self.members[i] = (i, comp, s, steps0, b0, end, cfin, c0 + q - o0)
        if end < self.fin_min:
            self.fin_min = end

    def write(self, scheduled: bool, members: list[Member] | None = None) -> None:
        """Write the members' (or ``members``') arrays as the group's step is ``scheduled``
        (its blocks taken) or before it (drafts as proposed; none once done)."""
        e, spec = self._e, self._spec
        s = self.step
        k, mml = spec.k, e.max_model_len
        bs = e.kv.block_size
        for i, comp, sj, steps0, b0, fin, cfin, d in (self.members.values() if members is None
                                                      else members):
            c1 = comp.item(s - sj) if s < fin else cfin
            c = c1 - k - 1
            e.num_computed_tokens[i] = c
            e.num_output_tokens[i] = c1 - d
            spec.num_output_steps[i] = steps0 + s - sj
            drafts = 0 if c1 == cfin else max(0, min(k, mml - c - 1))
            spec.num_spec_tokens[i] = drafts
            e.num_tokens[i] = c + 1 + drafts
            j = s - sj - (not scheduled)
            e.kv.num_blocks[i] = (self.fresh[i] if j < 0 else max(
                b0, (min(comp.item(j) + spec.lookahead, mml) + bs - 1) // bs))

    def price_terms(self, cost: object, top: int) -> Terms | None:
        """``SpecDecode.step_terms`` of the group's size for contexts up to ``top`` (kept)."""
        n = len(self.members)
        t = self.terms
        if t is None or t[0] != n or top >= t[1]:
            terms = self._spec.step_terms(cost, n, top + 1)
            t = self.terms = None if terms is None else (n, *terms)
        return t

    def steps_left(self) -> int:  # to the first finish or clipped drafts
        s0 = self.step
        return min(self.fin_min - s0, max(1, self.clip - s0))

    def run_times(self, k: int, small: bool, dt: float, t: float) -> tuple[Floats, Floats]:
        """Each step priced as ``_step_seconds`` prices it, plus its draft's (kept in
        :attr:`draft_run_s`); ``small``: from the tables (:meth:`price_terms`) as lists."""
        s0, n, cost = self.step, len(self.members), self._cost
        terms = self.price_terms(cost, self.ctx.item(s0 + k - 1)) if small else None
        if terms is not None:
            _, _, fixed, table, dfixed, dtable, gap, q = terms
            cs = self.ctx[s0 + 1 : s0 + k]
            drafts = [(dfixed + d - gap) * q for d in dtable[cs].tolist()]
            times = [fixed + v + d for v, d in zip(table[cs].tolist(), drafts, strict=True)]
            times.insert(0, dt)
            self.draft_run_s = drafts
            return run_ends(times, t), times
        context = self.ctx[s0 : s0 + k]
        q = self._spec.k + 1
        model: Any = cost
        dts = (cost.chunk_times_at(n, q, context) if isinstance(cost, VllmStepModel) else
               model.step_time(float(n * q), 0.0, context.astype(np.float64),
                               (q * context).astype(np.float64), float(n)))
        draft = self._spec.draft_run_seconds(n, context)
        dts = dts + draft
        self.draft_run_s = np.zeros(k - 1) if isinstance(draft, float) else draft[1:]  # (n-gram)
        dts[0] = dt
        return run_ends(dts, t), dts

    def output_of(self, i: int, ran: int) -> int:  # (DecodeGroup.output_of)
        _, comp, sj, _, _, fin, cfin, d = self.members[i]
        s = self.step + ran
        return (comp.item(s - sj) if s < fin else cfin) - d

    def outputs_into(self, out: IntArray) -> None:
        """Write in ``out`` (the running requests' output tokens) the members'."""
        out[: len(self.members)] = [self.output_of(i, 0) for i in self.members]

    def end(self, j: int) -> list[int]:
        """``DecodeGroup.end`` (a run's step ``j``'s draft counted)."""
        spec = self._spec
        if j:
            assert self.draft_run_s is not None
            spec.draft_s += float(self.draft_run_s[j - 1])
        new = [spec.k + 1] * len(self.members)
        self.write(True)
        return new

    def advance(self, m: int) -> list[int]:
        """Commit the next ``m`` steps (blocks taken; draft times :attr:`draft_run_s`); returns
        the members done in the last (only a run's last finishes some), written and out."""
        spec = self._spec
        n = len(self.members)
        s0 = self.step
        s = self.step = s0 + m
        if m > 1 and (draft_s := self.draft_run_s) is not None:  # (a sum a step, as stepping)
            if len(draft_s) != m - 1:
                draft_s = draft_s[: m - 1]
            spec.draft_s = reduce(add, draft_s if isinstance(draft_s, list)
                                  else draft_s.tolist(), spec.draft_s)
        nm = n * m
        spec.num_verify += nm
        spec.num_draft_tokens += nm * spec.k
        ctx = self.ctx
        finc = self.finc
        spec.num_accepted_tokens += ctx.item(s) + finc.get(s, 0) - ctx.item(s0) - nm
        if self.fin_min != s:
            return []
        del finc[s]  # (its keys: the members' steps to finish by)
        self.fin_min = min(finc, default=_NEVER)
        done = [mem for mem in self.members.values() if mem[5] == s]
        self.write(False, done)
        for mem in done:
            del self.members[mem[0]]
        return [mem[0] for mem in done]


class SpecSkipAheadEngine(SkipAheadEngine):
    """:class:`SkipAheadEngine` with speculative decoding: a :class:`SpecGroup` and its runs of
    verify steps instead of the decode group (its members' arrays lag alike)."""

    # the group's slot holds a SpecGroup (its interface is the DecodeGroup's)
    _group: SpecGroup | None  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._before = 0  # (_schedule_fit)

    def _schedule_fit(self, budget: int) -> tuple[IntArray, IntArray, int] | None:
        """``Scheduler._schedule_fit`` of the group in O(1): each member's ``k`` drafts and
        bonus token; else the group ends. ``_before``: the running requests, when each had a
        token last step (a group forms of them, :meth:`_run_scheduled`)."""
        commit = self.commit
        n = self._before = len(self.running) if commit.synced and commit.all_decode else 0
        g, spec = self._group, self.spec
        if g is not None and spec is not None:
            s = g.step
            extra = g.take.item(s)
            if (n == len(g.members) and n and g.step < g.clip and n * (spec.k + 1) <= budget
                    and extra <= self.kv.num_available_blocks):
                if extra:
                    self.kv.take(extra)
                if g.fresh:
                    g.fresh.clear()
                return NO_ROWS, NO_ROWS, n * (spec.k + 1)
            self._group_drop()
        return super()._schedule_fit(budget)

    def _step(self) -> Generator[simpy.Event, Any, None]:
        """``Engine._step``; the group's step as ``_group_iteration`` (returned), its draft and
        verify priced from the step models' tables."""
        reserved, gw_waiting = self.hooks.gateway_state()
        rows, new, started, preempted = self._schedule()
        g = self._group
        if g is None:
            return self._run_step(rows, new, started, preempted, reserved, gw_waiting)
        counts = (len(self.running), self.num_waiting() + gw_waiting)
        if started and self.kv.prefix is not None:  # starts with prefix caching: a step
            self._price(g)
            new = self._group_end(started, 0)
            return self._run_scheduled(self.running_rows(), new, False, reserved, counts)
        return self._group_iteration(len(g.members), started, reserved, counts, self._price(g))

    def _price(self, g: SpecGroup) -> float | None:
        """The verify seconds of the group's step from the tables (None where they do not
        serve); its draft's counted and added to the step."""
        spec = self.spec
        assert spec is not None
        context = g.ctx.item(g.step)
        t = g.price_terms(self.cost, context)
        if t is None:
            self._step_extra_s += spec.passes_seconds(len(g.members), spec.k, float(context))
            return None
        _, _, fixed, table, dfixed, dtable, gap, k = t
        draft = (dfixed + dtable.item(context) - gap) * k
        spec.draft_s += draft
        self._step_extra_s += draft
        return fixed + table.item(context)

    def _run_scheduled(self, rows: IntArray, new: IntArray, preempted: bool, reserved: int,
                       counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        spec = self.spec
        q = 0 if spec is None else spec.k + 1
        m = self._before
        if (spec is None or preempted or self._aborts or self.remote is not None or m < 1
                or not self.decode_group  # (its hooks read running arrays: no group)
                or len(rows) != len(self.running) or imin(new[:m]) != q
                or (m < len(rows) and self.kv.prefix is not None)):
            yield from super()._run_scheduled(rows, new, preempted, reserved, counts)
            return
        g = self._group = SpecGroup(self, spec, self.cost)  # every running request verifies k drafts
        for i in rows[:m].tolist():
            g.join(i, self.num_computed_tokens.item(i), self.num_output_tokens.item(i), True)
        tail = (list(zip(rows[m:].tolist(), new[m:].tolist(), strict=True)) if m < len(rows)
                else [])  # those that start in it
        yield from self._group_iteration(m, tail, reserved, counts)

    def _group_step_s(self, n: int, tail: list[tuple[int, int]],
                      priced_s: float | None) -> tuple[float, bool]:
        """``SkipAheadEngine._group_step_s``: the members' chunks of ``k + 1`` tokens, then
        the tail's features."""
        g, spec = self._group, self.spec
        assert g is not None and spec is not None
        q = spec.k + 1
        context = g.ctx.item(g.step)  # (n chunks of q tokens)
        if priced_s is not None and not tail:
            return priced_s + self._step_extra_s, True
        f = tail_features(0, 0, tail, self.num_computed_tokens, self.num_tokens,
                          self.num_output_tokens)  # (zeros without a tail)
        return self._step_seconds(StepFeatures(
            f.num_prefill_tokens + n * q, f.num_decode_seqs, f.num_context_tokens + context,
            f.prefill_attention + q * context, f.num_prefill_seqs + n)), not tail
