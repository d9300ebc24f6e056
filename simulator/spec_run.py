"""Speculative decoding on the speed-up path: runs of verify steps with the batch unchanged,
computed at once (:class:`SpecSkipAheadEngine`), with the results of stepping.

While every running request verifies ``k`` drafts a step (:mod:`kvbudget.simulator.spec_decode`)
and nothing else can start, the next steps are arithmetic: a request's accepted drafts at a step
are a draw keyed by the request and its steps with output (stepping's draws, with running sums:
:meth:`SpecDecode.run_gains`), so its tokens after ``j`` steps, the blocks each step takes and
the steps' times (the verify step priced, plus the draft's passes: ``VllmStepModel``'s tables,
or one array call each for other cost models) follow. :func:`plan_spec_run` plans a run up to
the first step that finishes a request, before the first whose blocks do not fit or whose drafts
the model's length clips, and cut as a plain decode run is (``DecodeRunPlanner.keep``).

The run's first step is scheduled by the engine's one scheduler; a run is planned only when it
scheduled every running request with its ``k`` drafts, started and preempted nothing
(:meth:`SpecSkipAheadEngine._run_scheduled`), so the steps after it schedule the same.
:func:`commit_spec_run` writes what ``StepCommit.rows`` would have after them and hands the
finished requests to ``StepCommit.finish``; the run waits as a decode run does
(``SkipAheadEngine._wait_run``). A step that is no run commits as a run of one step
(:func:`spec_step`) and its starts as the decode group's tail.
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
from kvbudget.simulator.small_arrays import imax, imin, isum
from kvbudget.simulator.spec_decode import SpecDecode
from kvbudget.simulator.step_commit import CommitTarget

__all__ = ["SpecRun", "SpecSkipAheadEngine", "commit_spec_run", "plan_spec_run"]

MAX_SPEC_STEPS = 512
"""The longest speculative run planned at once (its arrays are requests x steps)."""


class SpecRun:
    """A planned run of ``len(ends)`` verify steps of ``rows`` (running order): ``gained`` is the
    output tokens each row has gained before each step and after the last (requests x steps +
    1, uncapped: a row's are ``min(gained, left)``, ``left`` the output it had to go; only the
    last step may finish some), ``held`` the blocks each row holds as each step is scheduled,
    ``alloc`` the blocks steps 1..j take beyond step 0's, ``draft_s`` each step's draft time
    (step 0's was counted as it was scheduled: not read), ``ends``/``dts`` the steps' ends and
    times. (A plain class: a dataclass's creation costs the engine's import ~0.7 ms.)"""

    __slots__ = ("alloc", "c0", "draft_s", "dts", "ends", "gained", "held", "left", "out0",
                 "rows", "steps0")

    def __init__(self, rows: IntArray, out0: IntArray, c0: IntArray, steps0: IntArray,
                 left: IntArray, gained: IntArray, held: IntArray, alloc: IntArray,
                 draft_s: FloatArray, ends: Floats, dts: Floats) -> None:
        self.rows, self.out0, self.c0, self.steps0, self.left = rows, out0, c0, steps0, left
        self.gained, self.held, self.alloc, self.draft_s = gained, held, alloc, draft_s
        self.ends, self.dts = ends, dts


def plan_spec_run(e: CommitTarget, spec: SpecDecode, planner: DecodeRunPlanner,
                  rows: IntArray, k_max: int, dt0: float, free: int) -> SpecRun | None:
    """The run of at most ``k_max`` verify steps of ``rows`` from ``e.t``, whose first step
    (scheduled, ``dt0`` long) took its blocks already and ``free`` blocks are left (see the
    module docstring); None when it would be one step. Not cut at external events: the
    caller cuts ``ends``."""
    k, look, mml = spec.k, spec.lookahead, e.max_model_len
    q = k + 1
    n = len(rows)
    out0 = e.num_output_tokens[rows]
    left = e.target_output[rows] - out0
    steps0 = spec.num_output_steps[rows]
    # the tokens each row has gained before each step (column 0: none) and after the last:
    # its accepted drafts (drawn as stepping draws them) and the step's own token, summed; the
    # run ends with its first step that finishes a request
    gained, k_max = spec.run_gains(rows, steps0, left, min(k_max, MAX_SPEC_STEPS))
    if k_max <= 1:
        return None
    c0 = e.num_computed_tokens[rows]
    # computed tokens as each step is scheduled (step j sees j steps' tokens): c0 + gained
    computed = gained[:, :k_max] + c0[:, None]
    top = imax(computed[:, -1])  # (computed tokens only grow along the run)
    if top + 1 + k > mml:  # drafts clipped by the model's length
        clip = np.logical_or.reduce(computed > mml - (1 + k), axis=0)
        k_max = max(1, int(clip.argmax()))
        if k_max <= 1:
            return None
        computed = computed[:, :k_max]
    bs = planner.block_size
    # the blocks of the step's tokens and lookahead slots, within the model's length
    if top + q + look > mml:
        need = np.minimum(computed + (q + look), mml)
        need += bs - 1
    else:
        need = computed + (q + look + bs - 1)
    need //= bs
    b0 = e.kv.num_blocks[rows]
    held = np.maximum(need, b0[:, None], out=need)
    alloc = np.add.reduce(held, axis=0)
    alloc -= isum(b0)
    alloc = planner.cut_to_free(alloc, free)
    k_max = len(alloc)
    if k_max <= 1:
        return None
    # the verify steps' num_context_tokens (step 0's too: its time is dt0, as scheduled),
    # priced as _step_seconds prices a step's features, plus the draft's seconds: the cost
    # model's table when it has one, else its step_time on arrays
    context = np.add.reduce(computed[:, :k_max], axis=0)
    context += n * q
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
        return SpecRun(rows, out0, c0, steps0, left, gained[:, : k_max + 1], held[:, :k_max],
                       alloc, draft_s, [t := t + dt for dt in times], times)  # (t += dt in turn)
    ends = dts.copy()
    ends[0] += e.t
    np.add.accumulate(ends, out=ends)  # sequential sums from t, as stepping adds them
    return SpecRun(rows, out0, c0, steps0, left, gained[:, : k_max + 1], held[:, :k_max], alloc,
                   draft_s, ends, dts)


def spec_step(e: CommitTarget, spec: SpecDecode, rows: IntArray) -> SpecRun:
    """A run of one verify step of ``rows`` (scheduled, its blocks taken): what
    :func:`commit_spec_run` reads of it."""
    out0 = e.num_output_tokens[rows]
    steps0 = spec.num_output_steps[rows]
    none = np.zeros((1, 1), np.int64)
    return SpecRun(rows, out0, e.num_computed_tokens[rows], steps0, e.target_output[rows] - out0,
                   spec.step_gains(rows, steps0), none, none[0], np.zeros(1), [], [])


def commit_spec_run(e: CommitTarget, spec: SpecDecode, run: SpecRun, m: int) -> list[int]:
    """Commit the first ``m`` steps of ``run`` (step 0's blocks were taken as it was
    scheduled; the caller has ended them in time): what ``StepCommit.rows`` would have
    written after each; returns the requests that finished in the last (only a run's last step
    finishes some), for the caller to hand to ``StepCommit.finish``."""
    rows = run.rows
    n = len(rows)
    extra = int(run.alloc[m - 1])
    if extra:
        e.kv.num_blocks[rows] = run.held[:, m - 1]
        e.kv.take(extra)
    if m > 1:
        for seconds in run.draft_s[1:m].tolist():  # (one sum a step, in stepping's order)
            spec.draft_s += seconds
    left = run.left
    grown = np.minimum(run.gained[:, m], left)
    computed = run.c0 + grown
    e.num_computed_tokens[rows] = computed
    e.num_output_tokens[rows] = run.out0 + grown
    spec.num_output_steps[rows] = run.steps0 + m
    spec.num_verify += n * m
    spec.num_draft_tokens += n * m * spec.k
    spec.num_accepted_tokens += isum(grown) - n * m
    tokens = computed + 1
    k = spec.k
    done = None if imax(grown - left) < 0 else grown >= left  # those that finished, if any
    if done is None and imax(tokens) + k <= e.max_model_len:  # (the common case)
        spec.num_spec_tokens[rows] = k
        tokens += k
        e.num_tokens[rows] = tokens
        return []
    drafts = e.max_model_len - tokens  # the next step's drafts: k, clipped to the length
    np.minimum(drafts, k, out=drafts)
    np.maximum(drafts, 0, out=drafts)
    if done is not None:
        drafts[done] = 0
    spec.num_spec_tokens[rows] = drafts
    drafts += tokens
    e.num_tokens[rows] = drafts
    return [] if done is None else rows[done].tolist()


class SpecSkipAheadEngine(SkipAheadEngine):
    """:class:`SkipAheadEngine` for an engine with speculative decoding (``spec``, set by
    ``engine_variants.make_engine``): no decode group (its steps give one token each), runs of
    verify steps instead (:func:`plan_spec_run`); a step that is not one steps as
    :class:`~kvbudget.simulator.engine.Engine` does."""

    decode_group = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spec_run: SpecRun | None = None  # the run in flight
        self._before = 0  # (_step)

    def output_tokens_of(self, i: int) -> int:
        run = self._spec_run
        rows = [] if run is None or self._run_ends is None else run.rows.tolist()
        if i not in rows:
            return super().output_tokens_of(i)
        assert run is not None
        r = rows.index(i)  # its output after the steps that have ended
        steps = self._steps_done_now() - self.num_steps
        return run.out0.item(r) + min(run.gained.item(r, steps), run.left.item(r))

    def _one_step(self, rows: IntArray, new: IntArray, m: int, dt: float, reserved: int,
                  counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        """A step of ``dt`` in which the running requests ``rows[:m]`` verify their drafts and
        ``rows[m:]`` start, waited for as ``Engine._run_scheduled`` waits for it and committed,
        unless aborts came during it, as a run of one step and the decode group's tail."""
        self._span_head = None
        yield from self._wait(self._account_step(dt, reserved, counts))
        if self._aborts:
            self._commit_step(rows, new)
            return
        self._steps_rows = rows
        self._on_steps(False, 1)
        assert self.spec is not None
        done = commit_spec_run(self, self.spec, spec_step(self, self.spec, rows[:m]), 1)
        self.commit.decode_step(m, list(zip(rows[m:].tolist(), new[m:].tolist(), strict=True)),
                                done, lambda i, computed, output: None)

    def _rows_ahead(self) -> list[int]:
        run = self._spec_run
        return super()._rows_ahead() if run is None else run.rows.tolist()

    def _step(self) -> Generator[simpy.Event, Any, None]:
        # the running requests before the step's starts when each had its token last step
        commit = self.commit
        self._before = len(self.running) if commit.synced and commit.all_decode else 0
        return super()._step()

    def _run_scheduled(self, rows: IntArray, new: IntArray, preempted: bool, reserved: int,
                       counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        spec = self.spec
        commit = self.commit
        q = 0 if spec is None else spec.k + 1
        # (a request not yet schedulable ends the run as it becomes schedulable, as the decode
        # group's does)
        k_max = self._pending_due() - self.num_steps if self._pending else MAX_JUMP_STEPS
        m = self._before
        if (spec is None or preempted or self._aborts or self.remote is not None or m < 1
                or len(rows) != len(self.running) or imin(new[:m]) != q
                or (m < len(rows) and self.kv.prefix is not None)):
            yield from super()._run_scheduled(rows, new, preempted, reserved, counts)
            return
        if m < len(rows):  # requests start in it (rows[m:]): one step
            dt = self._step_seconds(self._features(rows, new))
            yield from self._one_step(rows, new, m, dt, reserved, counts)
            return
        # the step's features: step_cost.rows_features of ``len(rows)`` chunks of ``q`` tokens
        n = len(rows)
        context = isum(self.num_computed_tokens[rows]) + n * q
        dt0 = self._step_seconds(StepFeatures(float(n * q), 0.0, float(context),
                                              float(q * context), float(n)))
        t_ext = self.hooks.next_external_s()
        until = self._plan_until(t_ext) if self.head_refusal else t_ext
        # async scheduling: the run goes on a step past t_ext's (DecodeRunPlanner.keep)
        lag = self._async and until == t_ext and self.runs_past_external
        k_max = self.planner.bound(k_max, self.t, until, dt0, lag)
        run = None if k_max <= 1 else plan_spec_run(self, spec, self.planner, rows, k_max, dt0,
                                                    self.kv.num_available_blocks)
        k = 0
        if run is not None:  # its steps that run (as a decode run's), while the waiting head is
            # refused up to where it may start
            k = self._jump_limit(len(run.ends), run.alloc) if self.head_refusal else len(run.ends)
            k = self.planner.keep(run.ends[:k], t_ext, until, lag)
        if run is None or k < 2:
            yield from self._one_step(rows, new, m, dt0, reserved, counts)
            return
        used = self.kv.num_used_blocks + run.alloc[:k]
        cut = ((run.ends[:k], used.tolist(), run.dts[:k]) if isinstance(run.ends, list)
               else (run.ends[:k], used, run.dts[:k]))
        self._spec_run = run
        yield from self._wait_run(float(cut[0][-1]), cut, reserved, counts,
                                  t_ext if lag else float("inf"))
        k = self._jump_keep
        self._spec_run = None
        self._steps_rows = rows
        if self._aborts:  # the last step commits as stepping commits it, without them
            if k > 1:
                self._on_steps(False, k - 1)
                commit_spec_run(self, spec, run, k - 1)  # (none finishes: not the last)
                self.kv.num_blocks[rows] = run.held[:, k - 1]
                self.kv.take(int(run.alloc[k - 1] - run.alloc[k - 2]))
                spec.draft_s += float(run.draft_s[k - 1])
            self._commit_step(rows, new)
            return
        self._on_steps(False, k)
        if done := commit_spec_run(self, spec, run, k):
            commit.finish(done)
