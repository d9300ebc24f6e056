"""Speculative decoding on the speed-up path (:class:`SpecSkipAheadEngine`), with stepping's
results: the running requests kept as a :class:`SpecGroup` while each verifies ``k`` drafts a
step, as ``fast_decode.DecodeGroup`` keeps decoding ones. A request's accepted drafts are draws
made as it came in (:meth:`SpecDecode.gains`' running sums), so as it joins, the step it finishes
in and its tokens and blocks at each step follow, added to the group's sums by step at once; a
run of the group's steps (:meth:`SpecGroup.plan`, cut as a decode run is) and its commit read
slices of those sums. The group forms at a step with every running request verifying its
drafts; a request that starts in one joins with its first token. Any other step (blocks that do
not fit, a prefill, drafts the model's length clips, an abort) ends it and steps as ``Engine``.
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
from kvbudget.simulator.running_loop import NO_ROWS
from kvbudget.simulator.small_arrays import imin
from kvbudget.simulator.spec_decode import SpecDecode
from kvbudget.simulator.step_commit import CommitTarget
from kvbudget.simulator.step_cost import tail_features

__all__ = ["SpecGroup", "SpecRun", "SpecSkipAheadEngine"]

_NEVER = 1 << 62
"""A step the group never reaches (no member's drafts are clipped)."""


SpecRun = tuple[IntArray, Floats, Floats, Floats]
"""A planned run of verify steps of the group from its step: the blocks steps 1..j take beyond
step 0's, each step's draft time (step 0's was counted as it was scheduled: not read), the
steps' ends and times."""


Member = tuple[int, IntArray, int, int, int, int, int, int]
"""A member of a :class:`SpecGroup`: ``(row, comp, sj, steps0, b0, fin, cfin, d)``."""


class SpecGroup:
    """The running requests of a :class:`SpecSkipAheadEngine` while each verifies ``k`` drafts a
    step: ``members`` (running order, :data:`Member`). A member joined at step ``sj`` with
    ``steps0`` steps with output; as step ``s`` is scheduled it has ``comp[s - sj]`` tokens
    computed, ``d`` fewer output tokens, ``steps0 + s - sj`` steps with output and the larger of
    ``b0`` blocks and those of its step's tokens and lookahead slots; after step ``fin - 1`` it
    has all its output, ``cfin`` tokens computed. Its arrays lag until it leaves (:meth:`write`).

    By step ``s``: ``ctx`` the members' computed tokens, ``newb`` the blocks it takes, ``finc``
    the computed tokens of those finishing in step ``s - 1``. ``clip``: the first step whose
    drafts the model's length clips for a member (the group ends there); ``fresh``: the blocks
    of the members that joined at the step not yet scheduled."""

    __slots__ = ("_rows", "clip", "ctx", "fin_min", "finc", "fresh", "members", "newb", "step")

    def __init__(self) -> None:
        self.members: list[Member] = []
        self.ctx, self.newb, self.finc = (np.zeros(1024, np.int64) for _ in range(3))
        self.step = 0
        self.fin_min = self.clip = _NEVER
        self.fresh: dict[int, int] = {}
        self._rows: tuple[IntArray, IntArray] | None = None

    def rows(self, q: int) -> tuple[IntArray, IntArray]:
        """The members' rows, and ``q`` tokens each (the same ``q`` every call), as arrays."""
        if self._rows is None:
            rows = np.array([m[0] for m in self.members], np.int64)
            self._rows = rows, np.full(len(rows), q, np.int64)
        return self._rows

    def join(self, e: CommitTarget, spec: SpecDecode, rows: list[int], taken: bool = True) -> None:
        """``rows`` (running order, after the members) join at the group's step; ``taken``: its
        blocks for the step are taken, else the step's ``newb`` counts them."""
        gains = spec.gains()
        k, mml = spec.k, e.max_model_len
        q = k + 1 + spec.lookahead
        bs = e.kv.block_size
        s = self.step
        self._rows = None
        for i in rows:
            a = spec.next_draw(i)
            g0 = gains.item(a)
            c0, o0 = e.num_computed_tokens.item(i), e.num_output_tokens.item(i)
            tgt, b0 = e.target_output.item(i), e.kv.num_blocks.item(i)
            left = tgt - o0
            # its steps to its output (a step gives a token or more; the gains rise)
            num = int(gains.searchsorted(g0 + left)) - a
            if s + num >= len(self.ctx):
                self._room(s + num + 1)
            comp = gains[a : a + num + 1] - (g0 - c0)  # its computed tokens at its steps
            self.ctx[s : s + num] += comp[:num]
            # the blocks its step's tokens and lookahead slots need, within the model's length
            last = comp.item(num - 1)
            if last + q > mml:
                need = np.minimum(comp[:num] + q, mml)
                need += bs - 1
            else:
                need = comp[:num] + (q + bs - 1)
            need //= bs
            if b0 > need.item(0):
                np.maximum(need, b0, out=need)
            self.newb[s + 1 : s + num] += need[1:] - need[:-1]
            b = b0
            if not taken:  # it holds the blocks of its first step from then on
                b = need.item(0)
                self.newb[s] += b - b0
                self.fresh[i] = b0
            if last > mml - 1 - k:  # its drafts clipped at a step (they only grow)
                self.clip = min(self.clip, s + int((comp[:num] > mml - 1 - k).argmax()))
            self.finc[s + num] += c0 + left
            self.members.append((i, comp, s, spec.num_output_steps.item(i), b, s + num,
                                 c0 + left, c0 - o0))
            self.fin_min = min(self.fin_min, s + num)

    def _room(self, top: int) -> None:
        """Room in the sums for steps up to ``top`` (twice as many at least)."""
        for name in ("ctx", "newb", "finc"):
            old = getattr(self, name)
            new = np.zeros(max(top, 2 * len(old)), np.int64)
            new[: len(old)] = old
            setattr(self, name, new)

    def write(self, e: CommitTarget, spec: SpecDecode, scheduled: bool,
              members: list[Member] | None = None) -> None:
        """Write the members' arrays (or ``members``') as the group's step is ``scheduled`` (its
        blocks taken) or before it (drafts as proposed after the last step; none once done)."""
        s = self.step
        k, mml = spec.k, e.max_model_len
        q = k + 1 + spec.lookahead
        bs = e.kv.block_size
        for i, comp, sj, steps0, b0, _, cfin, d in self.members if members is None else members:
            c = min(comp.item(s - sj), cfin)
            e.num_computed_tokens[i] = c
            e.num_output_tokens[i] = c - d
            spec.num_output_steps[i] = steps0 + s - sj
            drafts = 0 if c == cfin else max(0, min(k, mml - c - 1))
            spec.num_spec_tokens[i] = drafts
            e.num_tokens[i] = c + 1 + drafts
            j = s - sj - (not scheduled)
            e.kv.num_blocks[i] = (self.fresh[i] if j < 0
                                  else max(b0, (min(comp.item(j) + q, mml) + bs - 1) // bs))

    def plan(self, e: CommitTarget, spec: SpecDecode, planner: DecodeRunPlanner, k_max: int,
             dt0: float, free: int) -> SpecRun | None:
        """The run of at most ``k_max`` verify steps from ``e.t`` (the first scheduled, ``dt0``
        long, its blocks taken; ``free`` blocks left), None for one step; the caller cuts it at
        external events."""
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
        # the verify steps priced as _step_seconds prices their features, plus the draft's
        # seconds: a short run in Python numbers from the step models' tables, else as arrays
        n = len(self.members)
        q = spec.k + 1
        small = k_max <= GROUP_SMALL_K  # (in Python numbers, as the decode group's)
        prices = None if not small else spec.verify_prices(planner.cost, n, [
            c + n * q for c in self.ctx[s0 : s0 + k_max].tolist()])
        if prices is not None:
            times = [v + d for v, d in zip(*prices, strict=True)]
            draft_l = prices[1]
        else:
            context = self.ctx[s0 : s0 + k_max] + n * q
            cost: Any = planner.cost
            dts = cost.chunk_times_at(n, q, context) if isinstance(cost, VllmStepModel) else None
            if dts is None:
                dts = cost.step_time(float(n * q), 0.0, context.astype(np.float64),
                                     (q * context).astype(np.float64), float(n))
            draft = spec.draft_run_seconds(n, context)
            dts = dts + draft
            draft_s = np.zeros(k_max, np.float64) if isinstance(draft, float) else draft  # n-gram
            dts[0] = dt0
            if not small:
                ends = dts.copy()
                ends[0] += e.t
                np.add.accumulate(ends, out=ends)  # sequential sums from t, as stepping adds
                return alloc, draft_s, ends, dts
            times, draft_l = dts.tolist(), draft_s.tolist()
        times[0], t = dt0, e.t
        return alloc, draft_l, [t := t + dt for dt in times], times

    def output_at(self, s: int) -> list[int]:
        """The members' output tokens after the group's steps before ``s``."""
        return [min(m[1].item(s - m[2]), m[6]) - m[7] for m in self.members]

    def commit(self, e: CommitTarget, spec: SpecDecode, m: int, extra: int,
               draft_s: Floats | None) -> list[int]:
        """Commit the group's next ``m`` steps (``extra``: the blocks of steps 1..m-1;
        ``draft_s``: their draft times, the first counted already); returns the members done
        in the last (only a run's last finishes some), written and out, for ``StepCommit.finish``."""
        n = len(self.members)
        s0 = self.step
        s = self.step = s0 + m
        if extra:
            e.kv.take(extra)
        if m > 1 and draft_s is not None:
            for seconds in draft_s[1:m]:  # (one sum a step, in stepping's order)
                spec.draft_s += float(seconds)
        spec.num_verify += n * m
        spec.num_draft_tokens += n * m * spec.k
        spec.num_accepted_tokens += (self.ctx.item(s) + self.finc.item(s) - self.ctx.item(s0)
                                     - n * m)
        if self.fin_min != s:
            return []
        done = [mem for mem in self.members if mem[5] == s]
        self.write(e, spec, False, done)
        self.members = [mem for mem in self.members if mem[5] != s]
        self.fin_min = min((mem[5] for mem in self.members), default=_NEVER)
        self._rows = None
        return [mem[0] for mem in done]


class SpecSkipAheadEngine(SkipAheadEngine):
    """:class:`SkipAheadEngine` with speculative decoding (``spec``): a :class:`SpecGroup` and
    its runs of verify steps instead of the decode group; other steps step as ``Engine``. The
    members' arrays lag as a decode group's do (``Scheduler.decode_group``: hooks read
    :meth:`output_tokens_of`, :meth:`running_output_tokens`, ``kv.num_running_blocks``); a
    step that preempts or retracts runs after the group has ended (:meth:`_schedule_fit`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spec_group: SpecGroup | None = None
        self._before = 0  # (_schedule_fit)

    def _outputs(self) -> list[int]:
        """The members' output tokens as of the steps that have ended (a run's counted)."""
        g, spec = self._spec_group, self.spec
        if g is None or spec is None:
            return []
        return g.output_at(g.step + self._steps_done_now() - self.num_steps)

    def output_tokens_of(self, i: int) -> int:
        rows = self._rows_ahead()
        return self._outputs()[rows.index(i)] if i in rows else super().output_tokens_of(i)

    def running_output_tokens(self) -> IntArray:
        out = super().running_output_tokens()
        now = self._outputs()  # (the members are the first running requests)
        out[: len(now)] = now
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

    def _schedule_fit(self, budget: int) -> tuple[IntArray, IntArray, int] | None:
        """``Scheduler._schedule_fit`` of the group in O(1): each member's ``k`` drafts and
        bonus token, the step's blocks (``newb``); else the group ends and the loop is the
        rows'. ``_before``: the running requests, when each had a token last step (a group
        forms of them, :meth:`_run_scheduled`)."""
        commit = self.commit
        n = self._before = len(self.running) if commit.synced and commit.all_decode else 0
        g, spec = self._spec_group, self.spec
        if g is not None and spec is not None:
            extra = g.newb.item(g.step)
            if (n == len(g.members) and n and g.step < g.clip and n * (spec.k + 1) <= budget
                    and extra <= self.kv.num_available_blocks):
                if extra:
                    self.kv.take(extra)
                g.fresh.clear()
                return NO_ROWS, NO_ROWS, n * (spec.k + 1)
            self._end_group(False)
        return super()._schedule_fit(budget)

    def _run_step(self, rows: IntArray, new: IntArray, started: list[tuple[int, int]],
                  preempted: bool, reserved: int, gw_waiting: int
                  ) -> Generator[simpy.Event, Any, None]:
        """``Engine._run_step``; the group's step runs as :meth:`_group_steps` (returned: a
        generator fewer), its draft and verify priced from the step models' tables."""
        g, spec = self._spec_group, self.spec
        if g is None or spec is None:
            return super()._run_step(rows, new, started, preempted, reserved, gw_waiting)
        n = len(g.members)
        rows, new = g.rows(spec.k + 1)
        if started:
            rows = np.concatenate((rows, [i for i, _ in started]))
            new = np.concatenate((new, [n_new for _, n_new in started]))
        context = g.ctx.item(g.step) + n * (spec.k + 1)
        prices = spec.verify_prices(self.cost, n, [context])
        if prices is None:
            self._step_extra_s += spec.passes_seconds(n, spec.k, float(context))
        else:
            spec.draft_s += prices[1][0]
            self._step_extra_s += prices[1][0]
        counts = (len(self.running), self.num_waiting() + gw_waiting)
        if started and self.kv.prefix is not None:  # starts with prefix caching: a step
            self._end_group(True)
            return self._run_scheduled(rows, new, False, reserved, counts)
        return self._group_steps(g, rows, new, n, reserved, counts,
                                 None if prices is None else prices[0][0])

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
        g = self._spec_group = SpecGroup()  # every running request verifies its k drafts
        g.join(self, spec, rows[:m].tolist())
        yield from self._group_steps(g, rows, new, m, reserved, counts)

    def _group_steps(self, g: SpecGroup, rows: IntArray, new: IntArray, m: int, reserved: int,
                     counts: tuple[int, int], verify_s: float | None = None
                     ) -> Generator[simpy.Event, Any, None]:
        """The group's scheduled step (its ``m`` members, then ``rows[m:]`` that start in it;
        ``verify_s``: the members' verify time, if known) and the run it starts, if any: waited
        for and committed (a step with aborts during it as stepping commits it)."""
        spec = self.spec
        assert spec is not None
        n = len(g.members)
        q = spec.k + 1
        context = g.ctx.item(g.step) + n * q
        run: SpecRun | None = None
        draft_s: Floats = []
        k = 1
        tail = (list(zip(rows[m:].tolist(), new[m:].tolist(), strict=True)) if m < len(rows)
                else [])  # those that start in it
        if tail:  # the members' features (chunks of q tokens), then the tail's
            f = tail_features(0, 0, tail, self.num_computed_tokens, self.num_tokens,
                              self.num_output_tokens)
            dt = self._step_seconds(StepFeatures(
                f.num_prefill_tokens + n * q, f.num_decode_seqs, f.num_context_tokens + context,
                f.prefill_attention + q * context, f.num_prefill_seqs + n))
        else:
            # (a request not yet schedulable ends the run as it becomes schedulable, as the
            # decode group's does)
            k_max = self._pending_due() - self.num_steps if self._pending else MAX_JUMP_STEPS
            # the step's features: step_cost.rows_features of ``n`` chunks of ``q`` tokens
            dt = (self._step_seconds(StepFeatures(float(n * q), 0.0, float(context),
                                                  float(q * context), float(n)))
                  if verify_s is None else verify_s + self._step_extra_s)
            t_ext = self.hooks.next_external_s()
            until = self._plan_until(t_ext) if self.head_refusal else t_ext
            lag = self._async and until == t_ext and self.runs_past_external  # (as a decode run)
            k_max = self.planner.bound(k_max, self.t, until, dt, lag)
            run = None if k_max <= 1 else g.plan(self, spec, self.planner, k_max, dt,
                                                 self.kv.num_available_blocks)
        if run is not None:  # its steps that run (as a decode run's), while the waiting head is
            # refused up to where it may start
            alloc, draft_s, ends, dts = run
            k = self._jump_limit(len(ends), alloc) if self.head_refusal else len(ends)
            k = self.planner.keep(ends[:k], t_ext, until, lag)
        if k < 2:  # one step (nothing cuts it)
            self._span_head = None
            yield from self._wait(self._account_step(dt, reserved, counts))
        else:
            used = self.kv.num_used_blocks + alloc[:k]
            yield from self._wait_run(float(ends[k - 1]), (ends[:k], used.tolist(), dts[:k])
                                      if isinstance(ends, list) else (ends[:k], used, dts[:k]),
                                      reserved, counts, t_ext if lag else float("inf"))
            k = self._jump_keep
        self._steps_rows = rows
        j = k - 1 if self._aborts else k  # the group's steps (with aborts the last is stepping's)
        if j:
            self._on_steps(False, j)
            done = g.commit(self, spec, j, 0 if run is None else int(alloc[j - 1]), draft_s)
            if k == 1:  # those that start join as the decode group's tail (with a token)
                self.commit.decode_step(m, tail, done,
                                        lambda i, computed, output: g.join(self, spec, [i], False))
            elif done:  # (only a run's last step finishes some)
                self.commit.finish(done)
        if j < k:  # the last as stepping commits it, without the aborted requests
            if j:  # its blocks and draft, as scheduled
                self.kv.take(int(alloc[j] - alloc[j - 1]))
                spec.draft_s += float(draft_s[j])
            self._end_group(True)
            self._commit_step(rows, new)
