"""Speculative decoding on the speed-up path: the running requests kept as a group while each
verifies ``k`` drafts a step, and runs of such steps computed at once
(:class:`SpecSkipAheadEngine`), with the results of stepping.

A request's accepted drafts at each of its steps are draws made as it came in, keyed by the
request and its steps with output (stepping's draws, with running sums:
:meth:`SpecDecode.gains`), so as it joins the :class:`SpecGroup`, the step it finishes in, its
computed tokens and the blocks it holds at each of its steps follow: it adds them to the
group's sums by the group's step (the context each step attends to, the blocks each takes), a
few array operations once. While the group runs, its members' arrays lag (written as one
finishes or the group ends, as ``fast_decode.DecodeGroup``'s): the group schedules its step
(its members' tokens and blocks, then the waiting loop), and a run's plan
(:meth:`SpecGroup.plan`: up to the first step that finishes a member, before the first whose
blocks do not fit or whose drafts the model's length clips, and cut as a plain decode run is,
``DecodeRunPlanner.keep``; its steps' times the verify step priced, plus the draft's passes:
``VllmStepModel``'s tables, or one array call each for other cost models) and its commit
(:meth:`SpecGroup.commit`) read slices of those sums.

The group forms at a step the one scheduler scheduled with every running request verifying its
``k`` drafts, nothing preempted; a request that starts in a step of the group joins as it has
its first token. Any other step (blocks that do not fit, a request still prefilling, drafts the
model's length clips, an abort) ends the group, its members' arrays written, and steps as
:class:`~kvbudget.simulator.engine.Engine` does.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from kvbudget.perf.step_features import StepFeatures
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.simulator.decode_plan import GROUP_SMALL_K, MAX_JUMP_STEPS, DecodeRunPlanner, Floats
from kvbudget.simulator.engine import IntArray
from kvbudget.simulator.fast_decode import SkipAheadEngine
from kvbudget.simulator.serving import FloatArray
from kvbudget.simulator.small_arrays import imin
from kvbudget.simulator.spec_decode import SpecDecode
from kvbudget.simulator.step_commit import CommitTarget
from kvbudget.simulator.step_cost import tail_features

__all__ = ["SpecGroup", "SpecRun", "SpecSkipAheadEngine"]

_NEVER = 1 << 62
"""A step the group never reaches (no member's drafts are clipped)."""


SpecRun = tuple[IntArray, FloatArray, Floats, Floats]
"""A planned run of verify steps of the group from its step: the blocks steps 1..j take beyond
step 0's, each step's draft time (step 0's was counted as it was scheduled: not read), the
steps' ends and times."""


class SpecGroup:
    """The running requests of a :class:`SpecSkipAheadEngine` while each verifies ``k`` drafts a
    step, by the group's ``step``: ``members`` (running order) of ``(row, at, c, o, steps, b0,
    fin, cfin, tgt)``: with ``gains`` the draws' running sums (:meth:`SpecDecode.gains`), a
    member's ``num_computed_tokens`` as step ``s`` is scheduled is ``c + gains[at + s]``, its
    ``num_output_tokens`` ``o + gains[at + s]``, its steps with output ``steps + s``; it holds
    the larger of ``b0`` blocks and those of its step's tokens and lookahead slots
    (:meth:`held`), and has its output (``tgt``, ``cfin`` tokens computed) after step ``fin -
    1``. Its arrays are those as it joined until it leaves or the group ends (:meth:`write`).

    ``ctx[s]`` is the members' computed tokens as step ``s`` is scheduled, ``newb[s]`` the
    blocks step ``s`` takes, ``finc[s]`` the computed tokens of those that finish in step
    ``s - 1``: each member adds its own as it joins, for the steps it takes. ``clip`` is the
    first step whose drafts the model's length clips for a member (it never finishes before:
    the group ends there); ``fresh`` the members that joined at the step not yet scheduled,
    with the blocks they held."""

    __slots__ = ("_rows", "clip", "ctx", "fin_min", "finc", "fresh", "gains", "members", "newb",
                 "step")

    def __init__(self) -> None:
        self.members: list[tuple[int, int, int, int, int, int, int, int, int]] = []
        self.gains = np.zeros(0, np.int64)
        self.ctx, self.newb, self.finc = (np.zeros(1024, np.int64) for _ in range(3))
        self.step = 0
        self.fin_min = self.clip = _NEVER
        self.fresh: list[tuple[int, int]] = []
        self._rows: tuple[IntArray, IntArray] | None = None

    def rows(self, q: int) -> tuple[IntArray, IntArray]:
        """The members' rows, and ``q`` tokens each (the same ``q`` every call), as arrays."""
        if self._rows is None:
            rows = np.array([m[0] for m in self.members], np.int64)
            self._rows = rows, np.full(len(rows), q, np.int64)
        return self._rows

    def sync(self, spec: SpecDecode) -> IntArray:
        """The draws' running sums; the members' indices in them taken again when the store
        was compacted (its sums start afresh: each member's ``c`` and ``o`` move by as much)."""
        gains = spec.gains()
        old = self.gains.base  # (views of the store: its draws so far)
        if gains.base is not old and old is not None and self.members:
            s = self.step
            rows = np.array([m[0] for m in self.members], np.int64)
            at = spec.next_draws(rows, np.array([m[4] for m in self.members], np.int64)).tolist()
            self.members = [
                (i, a, c + shift, o + shift, *rest)
                for (i, _, c, o, *rest), a, shift in zip(
                    self.members, at, (old.item(m[1] + s) - gains.item(a + s)
                                       for m, a in zip(self.members, at, strict=True)),
                    strict=True)]
        self.gains = gains
        return gains

    def join(self, e: CommitTarget, spec: SpecDecode, rows: list[int], taken: bool = True) -> None:
        """``rows`` (running order, after the members; their arrays current) join at the
        group's step with ``k`` drafts each; ``taken``: the step is scheduled (their blocks for
        it taken), else the step's blocks count theirs."""
        gains = self.sync(spec)
        k, mml = spec.k, e.max_model_len
        q = k + 1 + spec.lookahead
        bs = e.kv.block_size
        s = self.step
        self._rows = None
        for i in rows:
            a = spec.next_draws(i)
            g0 = gains.item(a)
            c0, o0 = e.num_computed_tokens.item(i), e.num_output_tokens.item(i)
            tgt, b0 = e.target_output.item(i), e.kv.num_blocks.item(i)
            left = tgt - o0
            # its steps to its output (a step gives a token or more): by the running gains,
            # which rise
            num = int(gains.searchsorted(g0 + left)) - a
            if s + num >= len(self.ctx):
                self._room(s + num + 1)
            comp = gains[a : a + num] - (g0 - c0)  # its computed tokens at its steps
            self.ctx[s : s + num] += comp
            # the blocks its step's tokens and lookahead slots need, within the model's length
            last = c0 + gains.item(a + num - 1) - g0
            if last + q > mml:
                need = np.minimum(comp + q, mml)
                need += bs - 1
            else:
                need = comp + (q + bs - 1)
            need //= bs
            if b0 > need.item(0):
                np.maximum(need, b0, out=need)
            self.newb[s + 1 : s + num] += need[1:] - need[:-1]
            b = b0
            if not taken:  # it holds the blocks of its first step from then on
                b = need.item(0)
                self.newb[s] += b - b0
                self.fresh.append((i, b0))
            if last > mml - 1 - k:  # its drafts clipped at a step (they only grow)
                self.clip = min(self.clip, s + int((comp > mml - 1 - k).argmax()))
            self.finc[s + num] += c0 + left
            self.members.append((i, a - s, c0 - g0, o0 - g0, spec.num_output_steps.item(i) - s,
                                 b, s + num, c0 + left, tgt))
            self.fin_min = min(self.fin_min, s + num)

    def _room(self, top: int) -> None:
        """Room in the sums for steps up to ``top`` (twice as many as before at least)."""
        for name in ("ctx", "newb", "finc"):
            old = getattr(self, name)
            new = np.zeros(max(top, 2 * len(old)), np.int64)
            new[: len(old)] = old
            setattr(self, name, new)

    def write(self, e: CommitTarget, spec: SpecDecode, scheduled: bool) -> None:
        """Write the members' arrays as of the group's step: as it is scheduled (its blocks
        taken) or, not ``scheduled``, before (their drafts as proposed after the last)."""
        if not self.members:
            return
        gains = self.sync(spec)
        s = self.step
        rows, at, c, o, steps, b0 = np.array(self.members, np.int64).T[:6]
        g = gains[at + s]
        computed = c + g
        e.num_computed_tokens[rows] = computed
        e.num_output_tokens[rows] = o + g
        spec.num_output_steps[rows] = steps + s
        # the blocks of the step's tokens and lookahead slots (as it was scheduled)
        if not scheduled:
            g = gains[at + (s - 1)]
        need = np.minimum(c + g + (spec.k + 1 + spec.lookahead), e.max_model_len)
        need += e.kv.block_size - 1
        need //= e.kv.block_size
        e.kv.num_blocks[rows] = np.maximum(need, b0, out=need)
        computed += 1
        drafts = e.max_model_len - computed  # k, clipped to the model's length
        np.minimum(drafts, spec.k, out=drafts)
        np.maximum(drafts, 0, out=drafts)
        spec.num_spec_tokens[rows] = drafts
        e.num_tokens[rows] = computed + drafts
        if not scheduled:
            for i, b in self.fresh:
                e.kv.num_blocks[i] = b

    def plan(self, e: CommitTarget, spec: SpecDecode, planner: DecodeRunPlanner, k_max: int,
             dt0: float, free: int) -> SpecRun | None:
        """The run of at most ``k_max`` verify steps of the members from ``e.t``, whose first
        step (scheduled, ``dt0`` long) took its blocks already and ``free`` blocks are left
        (see the module docstring); None when it would be one step. Not cut at external
        events: the caller cuts ``ends``."""
        s0 = self.step
        k_max = min(k_max, self.fin_min - s0, max(1, self.clip - s0))
        if k_max <= 1:
            return None
        per = self.newb[s0 : s0 + k_max].copy()
        per[0] = 0
        alloc = planner.cut_to_free(np.add.accumulate(per, out=per), free)
        k_max = len(alloc)
        if k_max <= 1:
            return None
        # the verify steps' num_context_tokens (step 0's too: its time is dt0, as scheduled),
        # priced as _step_seconds prices a step's features, plus the draft's seconds: the cost
        # model's table when it has one, else its step_time on arrays
        n = len(self.members)
        q = spec.k + 1
        context = self.ctx[s0 : s0 + k_max] + n * q
        cost: Any = planner.cost
        dts = cost.chunk_times_at(n, q, context) if isinstance(cost, VllmStepModel) else None
        if dts is None:
            dts = cost.step_time(float(n * q), 0.0, context.astype(np.float64),
                                 (q * context).astype(np.float64), float(n))
        draft = spec.draft_run_seconds(n, context)
        dts = dts + draft
        draft_s = np.zeros(k_max, np.float64) if isinstance(draft, float) else draft  # (n-gram)
        dts[0] = dt0
        if k_max <= GROUP_SMALL_K:  # a short run's in Python numbers, as the decode group's
            times, t = dts.tolist(), e.t
            return alloc, draft_s, [t := t + dt for dt in times], times
        ends = dts.copy()
        ends[0] += e.t
        np.add.accumulate(ends, out=ends)  # sequential sums from t, as stepping adds them
        return alloc, draft_s, ends, dts

    def output_at(self, spec: SpecDecode, s: int) -> list[int]:
        """The members' output tokens after the group's steps before ``s``."""
        gains = self.sync(spec)
        return [min(m[3] + gains.item(m[1] + s), m[8]) for m in self.members]

    def commit(self, e: CommitTarget, spec: SpecDecode, m: int, extra: int,
               draft_s: FloatArray | None) -> list[int]:
        """Commit the group's next ``m`` steps (step 0's blocks were taken as it was
        scheduled, ``extra`` those of steps 1..m-1; ``draft_s``: each step's draft time, the
        first not counted; the caller has ended them in time): the counts of each; returns
        the members that finished in the last (only a run's last step finishes some), their
        arrays written, out of the group, for the caller to hand to ``StepCommit.finish``."""
        n = len(self.members)
        s0 = self.step
        s = self.step = s0 + m
        if extra:
            e.kv.take(extra)
        if m > 1 and draft_s is not None:
            for seconds in draft_s[1:m].tolist():  # (one sum a step, in stepping's order)
                spec.draft_s += seconds
        spec.num_verify += n * m
        spec.num_draft_tokens += n * m * spec.k
        spec.num_accepted_tokens += (self.ctx.item(s) + self.finc.item(s) - self.ctx.item(s0)
                                     - n * m)
        if self.fin_min != s:
            return []
        gains = self.sync(spec)
        q = spec.k + 1 + spec.lookahead
        mml, bs = e.max_model_len, e.kv.block_size
        done = []
        for i, a, c, _, steps, b0, fin, cfin, tgt in self.members:
            if fin == s:  # its arrays, and the blocks it held as the last step was scheduled
                done.append(i)
                e.num_computed_tokens[i] = cfin
                e.num_output_tokens[i] = tgt
                spec.num_output_steps[i] = steps + s
                e.num_tokens[i] = cfin + 1
                spec.num_spec_tokens[i] = 0
                e.kv.num_blocks[i] = max(b0, (min(c + gains.item(a + s - 1) + q, mml) + bs - 1)
                                         // bs)
        self.members = [mem for mem in self.members if mem[6] != s]
        self.fin_min = min((mem[6] for mem in self.members), default=_NEVER)
        self._rows = None
        return done


class SpecSkipAheadEngine(SkipAheadEngine):
    """:class:`SkipAheadEngine` for an engine with speculative decoding (``spec``, set by
    ``engine_variants.make_engine``): no decode group (its steps give one token each), a
    :class:`SpecGroup` and its runs of verify steps instead; a step that is neither steps as
    :class:`~kvbudget.simulator.engine.Engine` does. The members' arrays lag: hooks read their
    output through :meth:`output_tokens_of` and :meth:`running_output_tokens`."""

    decode_group = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spec_group: SpecGroup | None = None
        self._before = 0  # (_step)

    def _group_now(self) -> tuple[SpecGroup | None, int]:
        """The group and its step as of the steps that have ended (a run's counted)."""
        g = self._spec_group
        if g is None:
            return None, 0
        return g, g.step + self._steps_done_now() - self.num_steps

    def output_tokens_of(self, i: int) -> int:
        g, s = self._group_now()
        rows = [] if g is None else [mem[0] for mem in g.members]
        if i not in rows:
            return super().output_tokens_of(i)
        assert g is not None and self.spec is not None
        return int(g.output_at(self.spec, s)[rows.index(i)])

    def running_output_tokens(self) -> IntArray:
        out = super().running_output_tokens()
        g, s = self._group_now()
        if g is not None and g.members:  # the members are the first running requests
            assert self.spec is not None
            out[: len(g.members)] = g.output_at(self.spec, s)
        return out

    def _rows_ahead(self) -> list[int]:
        g = self._spec_group
        return super()._rows_ahead() if g is None else [mem[0] for mem in g.members]

    def _end_group(self, scheduled: bool) -> None:
        """Write the members' arrays and end the group (``scheduled``: its step is)."""
        g = self._spec_group
        if g is not None:
            assert self.spec is not None
            g.write(self, self.spec, scheduled)
            self._spec_group = None

    def _abort_now(self, i: int) -> None:
        self._end_group(False)
        super()._abort_now(i)

    def _step(self) -> Generator[simpy.Event, Any, None]:
        # the running requests before the step's starts when each had its token last step
        commit = self.commit
        n = self._before = len(self.running) if commit.synced and commit.all_decode else 0
        g, spec = self._spec_group, self.spec
        if g is None or spec is None:
            return super()._step()
        q = spec.k + 1
        budget = self.tokens_limit
        extra = g.newb.item(g.step)
        if (n != len(g.members) or not n or g.step >= g.clip or n * q > budget
                or extra > self.kv.num_available_blocks):
            self._end_group(False)
            return super()._step()
        # the group's step: the running loop's (every member its k drafts and its blocks), then
        # the waiting loop, as Engine._schedule schedules it
        reserved, gw_waiting = self.hooks.gateway_state()
        self._step_extra_s = 0.0
        self._hol_blocked = False
        self.head_refusal = ""
        if extra:
            self.kv.take(extra)
        g.fresh.clear()
        rows, new = g.rows(q)
        w_rows, w_new = self._schedule_waiting(budget - n * q)
        if w_rows:
            rows = np.concatenate((rows, w_rows))
            new = np.concatenate((new, w_new))
        self._check_schedule(budget - n * q - sum(w_new), False)  # the members' num_blocks lag
        context = g.ctx.item(g.step) + n * q
        self._step_extra_s += spec.passes_seconds(n, spec.k, float(context))
        counts = (len(self.running), self.num_waiting() + gw_waiting)
        if w_rows and self.kv.prefix is not None:  # starts with prefix caching: a step
            self._end_group(True)
            return self._run_scheduled(rows, new, False, reserved, counts)
        return self._group_steps(g, rows, new, n, reserved, counts)

    def _run_scheduled(self, rows: IntArray, new: IntArray, preempted: bool, reserved: int,
                       counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        spec = self.spec
        q = 0 if spec is None else spec.k + 1
        m = self._before
        if (spec is None or preempted or self._aborts or self.remote is not None or m < 1
                or len(rows) != len(self.running) or imin(new[:m]) != q
                or (m < len(rows) and self.kv.prefix is not None)):
            yield from super()._run_scheduled(rows, new, preempted, reserved, counts)
            return
        g = self._spec_group = SpecGroup()  # every running request verifies its k drafts
        g.join(self, spec, rows[:m].tolist())
        yield from self._group_steps(g, rows, new, m, reserved, counts)

    def _group_steps(self, g: SpecGroup, rows: IntArray, new: IntArray, m: int, reserved: int,
                     counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        """The group's scheduled step (its ``m`` members, then the requests that start in it,
        ``rows[m:]``: one step) and the run of verify steps it starts, if any: waited for and
        committed."""
        spec = self.spec
        assert spec is not None
        n = len(g.members)
        q = spec.k + 1
        context = g.ctx.item(g.step) + n * q
        if m < len(rows):  # requests start in it: one step
            # the members' features (chunks of q tokens), then the tail's
            tail = list(zip(rows[m:].tolist(), new[m:].tolist(), strict=True))
            f = tail_features(0, 0, tail, self.num_computed_tokens, self.num_tokens,
                              self.num_output_tokens)
            dt = self._step_seconds(StepFeatures(
                f.num_prefill_tokens + n * q, f.num_decode_seqs, f.num_context_tokens + context,
                f.prefill_attention + q * context, f.num_prefill_seqs + n))
            yield from self._one_step(g, rows, new, m, dt, reserved, counts)
            return
        # (a request not yet schedulable ends the run as it becomes schedulable, as the decode
        # group's does)
        k_max = self._pending_due() - self.num_steps if self._pending else MAX_JUMP_STEPS
        # the step's features: step_cost.rows_features of ``n`` chunks of ``q`` tokens
        dt0 = self._step_seconds(StepFeatures(float(n * q), 0.0, float(context),
                                              float(q * context), float(n)))
        t_ext = self.hooks.next_external_s()
        until = self._plan_until(t_ext) if self.head_refusal else t_ext
        # async scheduling: the run goes on a step past t_ext's (DecodeRunPlanner.keep)
        lag = self._async and until == t_ext and self.runs_past_external
        k_max = self.planner.bound(k_max, self.t, until, dt0, lag)
        run = None if k_max <= 1 else g.plan(self, spec, self.planner, k_max, dt0,
                                             self.kv.num_available_blocks)
        k = 0
        if run is not None:  # its steps that run (as a decode run's), while the waiting head is
            # refused up to where it may start
            alloc, draft_s, ends, dts = run
            k = self._jump_limit(len(ends), alloc) if self.head_refusal else len(ends)
            k = self.planner.keep(ends[:k], t_ext, until, lag)
        if run is None or k < 2:
            yield from self._one_step(g, rows, new, m, dt0, reserved, counts)
            return
        used = self.kv.num_used_blocks + alloc[:k]
        yield from self._wait_run(float(ends[k - 1]), (ends[:k], used.tolist(), dts[:k])
                                  if isinstance(ends, list) else (ends[:k], used, dts[:k]),
                                  reserved, counts, t_ext if lag else float("inf"))
        k = self._jump_keep
        self._steps_rows = rows
        if self._aborts:  # the last step commits as stepping commits it, without them
            if k > 1:
                self._on_steps(False, k - 1)
                g.commit(self, spec, k - 1, int(alloc[k - 2]), draft_s)  # (none finishes)
                self.kv.take(int(alloc[k - 1] - alloc[k - 2]))
                spec.draft_s += float(draft_s[k - 1])
            self._end_group(True)
            self._commit_step(rows, new)
            return
        self._on_steps(False, k)
        if done := g.commit(self, spec, k, int(alloc[k - 1]), draft_s):
            self.commit.finish(done)

    def _one_step(self, g: SpecGroup, rows: IntArray, new: IntArray, m: int, dt: float,
                  reserved: int, counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        """A step of ``dt`` in which the group ``rows[:m]`` verifies its drafts and ``rows[m:]``
        start, waited for as ``Engine._run_scheduled`` waits for it and committed, unless
        aborts came during it, as a run of one step and the decode group's tail (those that
        have their first token join)."""
        self._span_head = None
        yield from self._wait(self._account_step(dt, reserved, counts))
        if self._aborts:
            self._end_group(True)
            self._commit_step(rows, new)
            return
        self._steps_rows = rows
        self._on_steps(False, 1)
        spec = self.spec
        assert spec is not None
        self.commit.decode_step(m, list(zip(rows[m:].tolist(), new[m:].tolist(), strict=True)),
                                g.commit(self, spec, 1, 0, None),
                                lambda i, computed, output: g.join(self, spec, [i], False))
