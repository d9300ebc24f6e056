"""The engine with ``skip_ahead``: stepping's results, runs of pure-decode steps computed at
once. While every running request decodes, :class:`SkipAheadEngine` keeps them as a
:class:`DecodeGroup`, so the one ``Scheduler._schedule`` schedules a step's running part in O(1)
(``_schedule_fit``); when such a step starts nothing, the decode run that follows is planned
(:mod:`~kvbudget.simulator.decode_plan`), waited for and committed in one go (cut at the step in
progress when work is added or aborted). The property tests compare every result with stepping's.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Generator
from functools import partial
from typing import Any

import numpy as np
import simpy
from simpy.events import Timeout

from kvbudget.simulator.decode_plan import (
    GROUP_SMALL_K,
    DecodeRunPlanner,
    Floats,
    Ints,
    block_takes,
    grown,
    run_used,
)
from kvbudget.simulator.engine import Engine, IntArray
from kvbudget.simulator.fleet_ties import TiedSteps
from kvbudget.simulator.running_loop import NO_ROWS
from kvbudget.simulator.small_arrays import isum
from kvbudget.simulator.step_cost import tail_features

__all__ = ["DecodeGroup", "SkipAheadEngine"]

Run = tuple[Floats, Ints, Floats]
"""A planned decode run: its steps' ends, the blocks in use during each, their durations."""
_ONE = np.int64(1)


class DecodeGroup:
    """The running requests of a :class:`SkipAheadEngine` while all decode, in O(1) a step: a
    member's ``num_computed_tokens``, ``num_output_tokens`` and ``num_tokens`` are its arrays'
    plus ``step - members[row]`` (steps since it joined), its ``num_blocks`` the larger of its
    array's and ``ceil(num_computed_tokens / block_size)``; the arrays are written when it
    leaves or the group is dissolved.

    ``context``: the members' ``num_computed_tokens`` in all; ``take[s]``: the blocks step
    ``s`` takes (a member one every ``block_size`` steps from the step that fills those it
    joined with, to its last; ``over``: one joined with more, as TGI reserves); ``finish``: a
    heap of ``(step it has its output, join order, row)`` (join order is running order).

    The group interface (``spec_run.SpecGroup`` has it too): ``members`` (by row, in running
    order), :meth:`join`, :meth:`advance`, :meth:`end`, :meth:`write`, :meth:`output_of`,
    :meth:`outputs_into`, and for ``SkipAheadEngine._plan_group``: ``step``, ``take``,
    :meth:`steps_left` and :meth:`run_times`."""

    __slots__ = ("context", "e", "finish", "members", "num_joined", "over", "size", "step",
                 "take")

    def __init__(self, e: SkipAheadEngine) -> None:  # of e's running requests, all decoding
        self.e = e
        rows = e.running_rows()
        computed = e.num_computed_tokens[rows]
        left_a = e.target_output[rows] - e.num_output_tokens[rows]
        left = left_a.tolist()
        running = e.running
        finish = list(zip(left, range(len(running)), running, strict=True))
        heapq.heapify(finish)
        room = e.kv.num_blocks[rows] * e.block_size - computed  # steps until their blocks fill
        self.finish: list[tuple[int, int, int]] = finish
        self.members: dict[int, int] = dict.fromkeys(running, 0)  # row -> step it joined at
        self.step = 0
        self.context = isum(computed)
        self.size = self.num_joined = len(running)
        self.over = bool((room >= e.block_size).any())
        self.take = block_takes(room, left_a, e.block_size)
        e.joined_at[rows] = 0

    def join(self, i: int, computed: int, output: int) -> None:
        """Row ``i``, started in the group's step, joins with its first token (``computed``,
        ``output``: its arrays now)."""
        e = self.e
        step = self.step
        self.members[i] = step
        e.joined_at[i] = step
        self.context += computed
        self.size += 1
        end = e.target_output.item(i) - output + step
        heapq.heappush(self.finish, (end, self.num_joined, i))
        self.num_joined += 1
        bs = e.block_size
        first = step + e.kv.num_blocks.item(i) * bs - computed  # (its blocks full)
        if first >= step + bs:  # blocks beyond its computed tokens
            self.over = True
        if end >= len(self.take):  # (take reaches its last step, as far as a run may read)
            self.take = grown(self.take, end)
        if first < end:  # a block in steps first, first + bs, .. before its last
            steps = self.take[first:end:bs]  # (in place, an int64 one: about half the
            np.add(steps, _ONE, steps)  # instructions of ``+= 1``, which converts and copies back)

    def write(self, scheduled: bool) -> None:
        """Write the members' arrays (``scheduled``: the step's blocks taken, not committed)."""
        m = len(self.members)
        if not m:
            return
        e = self.e
        rows = np.fromiter(self.members.keys(), np.int64, m)
        d = self.step - np.fromiter(self.members.values(), np.int64, m)
        computed = e.num_computed_tokens[rows] + d
        e.num_computed_tokens[rows] = computed
        e.num_output_tokens[rows] += d
        e.num_tokens[rows] = computed + 1
        bs = e.block_size
        blocks = (computed + (bs - 1 + int(scheduled))) // bs
        num_blocks = e.kv.num_blocks
        num_blocks[rows] = np.maximum(blocks, num_blocks[rows]) if self.over else blocks

    def end(self, j: int) -> list[int]:
        """Write the members' arrays as the group's step (a run's ``j``) is scheduled; returns
        each member's new tokens."""
        new = [1] * self.size
        self.write(True)
        return new

    def advance(self, k: int) -> list[int]:
        """Commit ``k`` steps (blocks taken); returns those done, written and out, in order."""
        e = self.e
        self.step += k
        step = self.step
        self.context += self.size * k
        finish = self.finish
        done: list[int] = []
        while finish and finish[0][0] <= step:
            i = heapq.heappop(finish)[2]
            done.append(i)
            joined = self.members.pop(i)
            c = e.num_computed_tokens.item(i) + step - joined
            e.num_computed_tokens[i] = c
            e.num_output_tokens[i] = e.num_output_tokens.item(i) + step - joined
            e.num_tokens[i] = c + 1
            e.kv.num_blocks[i] = max(e.kv.num_blocks.item(i), -(-c // e.block_size))
            self.context -= c
            self.size -= 1
        return done

    def steps_left(self) -> int:  # to the first finish
        return self.finish[0][0] - self.step

    def run_times(self, k: int, small: bool, dt: float, t: float) -> tuple[Floats, Floats]:
        return self.e.planner.steps(self.size, self.context, k, t, dt, small)

    def output_of(self, i: int, ran: int) -> int:
        """Member ``i``'s output tokens, ``ran`` steps of a run after the group's step."""
        return self.e.num_output_tokens.item(i) + self.step - self.members[i] + ran

    def outputs_into(self, out: IntArray) -> None:
        """Add to ``out`` (the running requests' output tokens by their arrays) the members'
        steps since they joined (the members are the first running requests)."""
        m = self.size
        if m:
            e = self.e
            out[:m] += self.step - e.joined_at[e.running_rows()[:m]]


class SkipAheadEngine(TiedSteps, Engine):
    """:class:`Engine` with a :class:`DecodeGroup` and its decode runs (the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.planner = DecodeRunPlanner(self.cost, self.block_size)
        self.planner.sample_in = self.log.timeline.sample_in
        # only while its steps run: any other step dissolves it first (_schedule_fit)
        self._group: DecodeGroup | None = None
        joined_at = np.zeros(len(self.prompt_tokens), np.int64)  # a member's join step
        self.joined_at = self.rows.add("joined_at", joined_at, 0)
        # the group's step being committed: its members, the requests that start in it
        self._steps_group: tuple[int, list[tuple[int, int]]] = (0, [])
        self._jump_ends: Floats | None = None  # step ends of the decode run in progress
        self._run_ends: Floats | None = None  # its step ends, kept when it is cut short
        self._run_used: Ints | None = None  # its steps' blocks in use (with _run_ends)
        self._jump_keep = 0
        # the refused waiting head the run in progress was planned past (_plan_until), or None
        self._span_head: int | None = None
        self._lag_run = False  # on a step past the next external event's (_work_changed)

    # --- what the executor and hooks read mid-run ------------------------------------------
    def output_tokens_of(self, i: int) -> int:
        g = self._group
        if g is None or i not in g.members:
            return self.num_output_tokens.item(i)
        # (a group run's rows are the group's)
        return g.output_of(i, self._steps_done_now() - self.num_steps)

    def kv_used_blocks_now(self) -> int:
        ends, used = self._run_ends, self._run_used  # mid-run: as planned for the step
        if ends is None or used is None:
            return self.kv.num_used_blocks
        k = min(bisect.bisect_left(ends, self.env.now), len(ends) - 1)
        return self.kv.num_used_blocks + int(used[k]) - int(used[0])

    def run_in_flight(self) -> Floats | None:  # its step ends (two or more), else None
        return self._run_ends

    def output_tokens(self) -> IntArray:
        out = self.num_output_tokens.copy()
        g = self._group  # (its members' arrays lag)
        if g is not None:
            ran = self._steps_done_now() - self.num_steps
            for i in g.members:
                out[i] = g.output_of(i, ran)
        return out

    def running_output_tokens(self) -> IntArray:
        out = super().running_output_tokens()
        if self._group is not None:
            self._group.outputs_into(out)
        return out

    def scheduled_with_output(self) -> bool:
        if self._steps_rows is not None:
            return super().scheduled_with_output()
        n, tail = self._steps_group  # members have output; of the tail, those resuming
        return n > 0 or any(self.num_output_tokens.item(i) > 0 for i, _ in tail)

    def _abort_now(self, i: int) -> None:
        if self._group is not None and i in self._group.members:
            self._group_drop()  # between steps (aborts wait for their end)
        super()._abort_now(i)

    # --- the group's members ------------------------------------------------------------------
    def _group_form(self) -> None:  # of the running requests, all decoding
        self._group = DecodeGroup(self)

    def _group_drop(self) -> None:  # write the members' arrays and end it, between steps
        g = self._group
        assert g is not None
        self._group = None
        g.write(False)

    # --- the group's steps ----------------------------------------------------------------------
    def _step(self) -> Generator[simpy.Event, Any, None]:
        """``Engine._step``; the group's runs as :meth:`_group_iteration` (returned)."""
        reserved, gw_waiting = self.hooks.gateway_state()
        rows, new, started, preempted = self._schedule()
        g = self._group
        if g is not None:
            if started or g.size:
                counts = (len(self.running), self.num_waiting() + gw_waiting)
                return self._group_iteration(g.size, started, reserved, counts)
            self._group_drop()  # a KV load holds all there is
        return self._run_step(rows, new, started, preempted, reserved, gw_waiting)

    def _schedule_fit(self, budget: int) -> tuple[IntArray, IntArray, int] | None:
        """``Scheduler._schedule_fit`` of the decode group (formed when every running request
        had a token last step) in O(1): a token each, a block where full (``take``)."""
        g = self._group
        if (g is None and self.commit.all_decode and self.commit.synced and self.decode_group
                and self.spec is None):  # (speculation's steps: spec_run.SpecGroup's)
            self._group_form()
            g = self._group
        if g is not None:
            n = g.size
            if self.commit.all_decode and n == len(self.running) and n <= budget:
                total = g.take.item(g.step) if n else 0  # those whose blocks are full
                if total <= self.kv.num_available_blocks:
                    if total:
                        self.kv.take(total)
                    return NO_ROWS, NO_ROWS, n
            self._group_drop()
        return super()._schedule_fit(budget)

    def _group_iteration(
        self, n: int, tail: list[tuple[int, int]], reserved: int, counts: tuple[int, int],
        priced_s: float | None = None
    ) -> Generator[simpy.Event, Any, None]:
        """``Engine._run_scheduled`` of the group's step (``n`` members, then ``tail``, those
        starting) and of the run it starts (:meth:`_plan_group`; ``priced_s``: its time, if
        known), committed as stepping does (the last step with aborts during it, without
        them): the one path of both groups' steps."""
        dt, run, t_lag = self._plan_group(n, tail, priced_s)
        if run is None:  # one step (nothing cuts it: _work_changed)
            yield from self._wait(self._account_step(dt, reserved, counts))
            self._span_head, k, blocks = None, 1, None
        else:
            yield from self._wait_run(float(run[0][-1]), run, reserved, counts, t_lag)
            k, blocks = self._jump_keep, run[1]
        self._steps_rows, self._steps_group = None, (n, tail)  # (for scheduled_with_output)
        j = k - 1 if self._aborts else k  # the group's steps (with aborts the last is stepping's)
        if j:
            self._on_steps(False, j)
            if j > 1 and blocks is not None and (extra := int(blocks[j - 1] - blocks[0])):
                self.kv.take(extra)  # steps 1..'s blocks, as planned (step 0's were taken)
            g = self._group
            assert g is not None
            done = g.advance(j)
            if tail:
                self.commit.decode_step(n, tail, done, g.join)
            elif done:  # (decode_step's updates without a tail)
                self.commit.finish(done)
        if j < k:  # the last as stepping commits it, without the aborted requests
            if j and blocks is not None:  # its blocks, as scheduled (a run: no tail)
                self.kv.take(int(blocks[j] - blocks[j - 1]))
            self._commit_step(self.running_rows(), self._group_end(tail, j))  # (members first)

    def _group_step_s(self, n: int, tail: list[tuple[int, int]],
                      priced_s: float | None) -> tuple[float, bool]:
        """The group's step's time (``priced_s``: speculation's, if known) and whether a run may
        follow it."""
        g = self._group
        assert g is not None
        if tail or self._step_extra_s:
            return self._step_seconds(tail_features(
                n, n + g.context, tail, self.num_computed_tokens, self.num_tokens,
                self.num_output_tokens)), False
        return self.planner.decode_step(n, n + g.context), True

    def _plan_group(self, n: int, tail: list[tuple[int, int]],
                    priced_s: float | None) -> tuple[float, Run | None, float]:
        """The group's step's time, the run it starts (None: none) and the event that run may
        go a step past (inf: none). The run goes to the group's first finish, to a request
        becoming schedulable (not behind a refused FCFS head, :meth:`_plan_until`) and to the
        step in progress at the next external event (or past it: ``DecodeRunPlanner.keep``);
        it is cut where the blocks run out (``run_used``) or the refused head may start
        (``_jump_limit``)."""
        g = self._group
        assert g is not None
        dt, runs = self._group_step_s(n, tail, priced_s)
        if not runs:
            return dt, None, math.inf
        t_ext = self.hooks.next_external_s()
        until = self._plan_until(t_ext) if self.head_refusal else t_ext
        lag = self._async and until == t_ext and self.runs_past_external
        to_end = g.steps_left()
        if self._pending and not (self._span_head is not None and self.runs_past_external
                                  and self.config.scheduling_policy == "fcfs"):
            to_end = min(to_end, self._pending[0][1] - self.num_steps)
        # a disaggregated decode replica's KV reads end the run (LoadNotices.run_cut)
        notices = None if self.remote is None else self.remote.notices
        read_s = math.inf
        if notices is not None:
            to_end, read_s = notices.run_end(to_end, self.num_steps)
        planner = self.planner
        k_max = planner.bound(to_end, self.t, until, dt, lag)
        if notices is not None and read_s != math.inf:
            k_max = planner.bound(k_max, self.t, read_s, dt, notices.notice_steps)
        if k_max <= 1:
            return dt, None, math.inf
        small = k_max <= GROUP_SMALL_K
        free = self.kv.num_available_blocks
        used = run_used(g.take, g.step, k_max, free, self.num_gpu_blocks - free, small)
        if self.head_refusal:
            used = used[: self._jump_limit(len(used), np.asarray(used) - used[0])]
        step_end, dts = g.run_times(len(used), small, dt, self.t)
        k = planner.keep(step_end, t_ext, until, lag)
        if notices is not None and read_s != math.inf:
            k = min(k, notices.run_cut(step_end))
        run = (step_end, used, dts) if k == len(used) else (step_end[:k], used[:k], dts[:k])
        return dt, run, t_ext if lag else math.inf

    def _group_end(self, tail: list[tuple[int, int]], j: int) -> IntArray:
        """End the group as (a run's) step ``j`` is scheduled; returns its new tokens."""
        g = self._group
        assert g is not None
        self._group = None
        return np.array(g.end(j) + [n_new for _, n_new in tail], np.int64)

    # --- decode runs ----------------------------------------------------------------------------
    def _plan_until(self, t_ext: float) -> float:
        """How far a decode run planned now may go: to the step in progress at ``t_ext``, the
        next external event; while the waiting head is refused an arrival joins behind it and
        changes only the timeline's figures, so to the first sample at or after ``t_ext``. An
        arrival at the head or an abort still ends it (:meth:`_work_changed`)."""
        if not self.head_refusal or t_ext == math.inf:
            return t_ext
        self._span_head = self.waiting.peek_request()
        return self.log.timeline.first_at_or_after(t_ext)

    def _wait_run(self, t1: float, run: Run | None = None, reserved: int = 0,
                  counts: tuple[int, int] = (0, 0), t_lag: float = math.inf
                  ) -> Generator[simpy.Event, Any, None]:
        """Run the planned ``run`` (step ends, blocks in use, step times; ending at ``t1``),
        logged; ``_jump_keep``: the steps that ran (fewer when work is added or aborted).
        Without ``run``: a fleet's replica's ``Engine._wait``."""
        env = self.env
        self._busy = True
        k = 1
        if run is not None:
            step_end, used, dts = run
            k = len(step_end)
            # one event for the run's end: the run driver's (URGENT) come first (alarm.py)
            if k > 1:
                self._jump_ends = self._run_ends = step_end
                self._run_used = used
                self._lag_run = float(step_end[k - 2]) > t_lag
                self._jump_keep = k  # (_work_changed cuts it)
        ties = self.ties
        if ties is not None:  # a fleet's replica: its event is due at t1
            self._due[self.tie_index] = t1
            if not self._chained:  # it starts from idle
                self._chained = True
                ties.root(self.tie_index, self.num_steps)
        while True:
            try:
                delay = max(0.0, t1 - env.now)
                if k > 1 and env.now + delay != t1 and step_end[k - 2] > env.now:
                    # now + delay rounds an ulp away from t1: wait from the last step's start,
                    # as stepping does (the difference of close floats is exact)
                    yield Timeout(env, max(0.0, float(step_end[k - 2]) - env.now))
                    delay = max(0.0, t1 - env.now)
                yield Timeout(env, delay)
                break
            except simpy.Interrupt:
                # work added or aborted mid-run: stop with the step in progress (_work_changed)
                k = self._jump_keep
                t1 = float(step_end[k - 1])
                if ties is not None:
                    self._due[self.tie_index] = t1
        if ties is not None:
            if self._due.count(t1) > 1:  # another's is due now too: stepping's order (in
                # flight until its turn: an abort meanwhile waits for it)
                yield from ties.turn(self.tie_index, t1)
            self._due[self.tie_index] = math.inf
        self._busy = False
        self._between_steps = True
        self.t = t1
        self.num_steps += k
        if run is None:  # a fleet's replica's step
            self.log.ended(t1)
            return
        self._jump_ends = self._run_ends = self._span_head = None
        self._jump_keep = k
        remote = self.remote
        if remote is not None and remote.held:  # rows admitted within the run (_admit_at)
            used = np.array(used, np.int64)  # hold their blocks from that step on
            for s, blocks in remote.held:
                used[s:] += blocks
            remote.held.clear()
        if k < len(step_end):  # cut short
            step_end, used, dts = step_end[:k], used[:k], dts[:k]
        # the reads its steps' polls saw (remote_kv.LoadNotices)
        if remote is not None and remote.notices.unseen:
            remote.notices.steps_ran(step_end, self.num_steps)
        self.log.ended_run(step_end)
        self.log.scheduled_run(step_end, used, dts, self._hol_blocked, reserved, counts,
                               self.num_preemptions_total)

    def _steps_done_now(self) -> int:
        """``Engine._steps_done_now`` with a run's ended steps (``fleet_ties``' at a tie)."""
        ends = self._run_ends
        if ends is None:
            return self.num_steps
        now = self.env.now
        return self.num_steps + (bisect.bisect_left(ends, now) if self.ties is None
                                 else self._steps_done(ends, now))

    def _work_changed(self, *, added: bool = False, lag: int = 0) -> None:
        """Work was added or aborted during a run: end it with the step in progress (``lag``
        steps after, unless a timeline sample reads them). A request ``added`` behind the
        refused head the run was planned past (:meth:`_plan_until`), or coming then to an FCFS
        queue, changes only later figures: the run goes on to the first sample from now."""
        ends = self._jump_ends
        now = self.env.now
        # nothing to cut unless a step after the one in progress is planned (no search)
        if ends is None or len(ends) < 2 or ends[-2] < now:
            return
        if lag and self._lag_run and (len(ends) < 3 or ends[-3] < now):
            return  # the step after this one is the run's last, planned so (decode_plan)
        keep = self._steps_done(ends, now) + 1  # (and the step ending now, if it ended first)
        lagged = lag > 0 and keep < len(ends) and not self.log.timeline.sample_in(
            float(ends[keep - 1]), float(ends[keep]))
        keep += lagged
        if lagged and self.remote is not None and self._admit_in_run(ends, keep - 1):
            return  # a hand-off (the request just added), admitted within the run
        span = self._span_head is not None and (
            self.waiting.peek_request() == self._span_head if added
            else lag > 0 and self.config.scheduling_policy == "fcfs")
        if span:
            keep = max(keep, bisect.bisect_right(ends, self.log.timeline.first_at_or_after(now)))
        if keep >= len(ends):  # (the step ending now ended first: the next is the last)
            return
        # later work may cut a span or a kept step; else the step in progress is the last
        self._jump_ends = ends[:keep] if span or lagged else None
        self._jump_keep = keep
        self.process.interrupt()

    def _admit_in_run(self, ends: Floats, j: int) -> bool:
        """Take a hand-off (the request just added) to a disaggregated decode replica into the
        run at its boundary ``j``, as stepping's waiting loop would (blocks allocated, KV read
        started); False: the run ends at ``j``. Only where the scheduler sees what stepping's
        would (docs/performance.md, "Runs through a hand-off's admission"): no head refused,
        nothing else coming, ``vllm_waiting_loop``, blocks beside the watermark and the
        members' steps; cut where its read's request becomes schedulable."""
        remote, pending, env, used = self.remote, self._pending, self.env, self._run_used
        if remote is None or not pending or pending[-1][0] not in remote.pending:
            return False  # not a hand-off whose KV is remote
        i, wakes, t_j = pending[-1][0], remote.wakes, float(ends[j])
        if (j + 1 >= len(ends) or used is None or self.head_refusal
                or (wakes and remote.wake_run is not self._run_ends)
                or len(pending) != len(wakes) + 1
                or pending[-1][1] != self.num_steps + j + 1 or self._span_head is not None
                or self.spec is not None or remote.loaded
                or self.waiting.peek_request() is not None or not self.vllm_waiting_loop
                or env.now + (t_j - env.now) != t_j):  # (the wake's time)
            return False
        end = remote.load_end_s(i, t_j)
        k = min(len(ends), bisect.bisect_left(ends, end) + 1 + remote.notices.notice_steps)
        need = -(-self.num_tokens.item(i) // self.block_size)
        kv = self.kv
        # (the pool as the run started, less the blocks of those admitted before it)
        free = kv.num_free_blocks + kv.num_evictable_blocks - sum(n for _, n in wakes)
        if (need > free - self.watermark_blocks - int(used[j + 1] - used[0])
                or need > free - int(used[k - 1] - used[0])):
            return False
        wakes.append((i, need))
        remote.wake_run = self._run_ends
        Timeout(env, t_j - env.now).callbacks.append(partial(self._admit_at, i, self._run_ends, j))
        if k < len(ends):
            self._jump_ends = ends[:k]
            self._jump_keep = k
            self.process.interrupt()
        return True

    def _admit_at(self, i: int, run: Floats | None, j: int, _: object) -> None:
        """At boundary ``j`` of ``run``: admit row ``i`` as stepping does, unless the run ended
        by then (the engine's loop admits it) or it left."""
        pending, remote = self._pending, self.remote
        assert remote is not None
        del remote.wakes[0]  # (its own: they come in the order they were made)
        if (self._run_ends is not run or self._jump_keep < j + 2 or not pending
                or pending[0][0] != i):
            return
        del pending[0]  # (Engine._release_pending, then the waiting loop's admission)
        used = self._run_used
        assert used is not None and run is not None
        kv = self.kv
        num_free = kv.num_free_blocks
        taken = self.allocate_start(i, self.num_tokens.item(i),
                                    reserve=self.watermark_blocks + int(used[j + 1] - used[0]))
        assert taken == ""
        remote.held.append((j + 1, num_free - kv.num_free_blocks))
        t, self.t = self.t, float(run[j])
        remote.start_load(i)  # (its start: the boundary's time)
        self.t = t
