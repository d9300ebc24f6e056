"""A SimPy model of one vLLM (v1) serving engine: :class:`Engine` runs
:class:`~kvbudget.simulator.scheduler.Scheduler`'s steps in time (schedule, run, commit); aborts
wait for the step in flight to end, as vLLM processes them between steps. This is the reference;
``skip_ahead`` (:class:`kvbudget.simulator.fast_decode.SkipAheadEngine`) changes how steps run,
never what they schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import simpy
from simpy.events import Event, Timeout

from kvbudget.perf.cost_model import CostModel
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.queue_caps import QueueCaps
from kvbudget.simulator.scheduler import EngineHooks, RequestColumns, Scheduler
from kvbudget.simulator.serving import FloatArray, IntArray, RequestFigures
from kvbudget.simulator.step_cost import rows_features
from kvbudget.simulator.step_log import StepLog
from kvbudget.simulator.timeline import TimelineRow
from kvbudget.simulator.token_segments import TokenGaps

__all__ = ["SPEED_UP_INTERFACE", "Engine", "EngineHooks", "FloatArray", "IntArray", "RequestColumns",
           "TokenGaps"]

SPEED_UP_INTERFACE = frozenset({
    # overridden: how a step runs (a decode group's O(1) running loop, its runs; each engine
    # class its own _step: a call more a step costs ~0.4 % of the base engine's instructions)
    "_step", "_schedule_fit", "_abort_now", "_work_changed", "_run_scheduled",
    # reused: the step's parts (schedule, run, time, log, wait, commit) and state
    "_schedule", "_run_step", "_step_seconds", "_account_step", "_wait", "_commit_step",
    "_step_extra_s", "_hol_blocked", "_steps_rows", "_busy", "_aborts", "_pending",
    "_between_steps", "_async", "_steps_done_now",
})
"""What of :class:`Engine`'s and ``Scheduler``'s own a speed-up (``fast_decode``, ``spec_run``)
may use besides ``Scheduler``'s hooks (``tests/test_architecture.py`` checks)."""


class Engine(Scheduler):
    """One engine replica in time (:meth:`_step` takes a step): it logs the steps
    (:class:`~kvbudget.simulator.step_log.StepLog`) and answers the executor
    (:class:`kvbudget.simulator.serving.ServingEngine`)."""

    # called with the engine before every step when set (tests check invariants there)
    step_observer: ClassVar[Callable[[Engine], None] | None] = None
    # under async scheduling a decode run goes on a step past the next external event (a
    # request that comes then waits for that step); not where that event may be held work
    # becoming ready unannounced (kv_offload's loads, a disaggregated decode replica's reads)
    runs_past_external: bool = True

    def __init__(self, env: simpy.Environment, config: EngineConfig, cost_model: CostModel,
                 columns: RequestColumns, *, num_gpu_blocks: int, hooks: EngineHooks,
                 timeline_period_s: float = 1.0) -> None:
        if not 0 < timeline_period_s < float("inf"):
            raise ValueError(f"timeline_period_s must be > 0 and finite, got {timeline_period_s!r}")
        super().__init__(config, cost_model, columns, num_gpu_blocks=num_gpu_blocks, hooks=hooks)
        self.env = env
        # the steps' log: timeline samples, exact time integrals, step ends
        self.log = StepLog(timeline_period_s, self.capacity_tokens, self.block_size)
        self._aborts: list[int] = []  # aborts waiting for the step in flight to end
        self._deferred_adds: list[int] = []  # re-admissions waiting for those aborts
        # async scheduling (vLLM's default): requests not yet schedulable, [row, the step
        # count from which it is] (_add), in the order they came
        self._async = bool(config.async_scheduling)
        self._pending: list[list[int]] = []
        self._between_steps = False  # a step has ended and the next is not yet scheduled
        self._busy = False  # a step is in flight
        self._wake: simpy.Event | None = None
        self._idle_from = math.inf  # while it sleeps: since when its KV is logged (_held_to)
        self._caps = QueueCaps.of(config)
        self.process = env.process(self._run())

    # --- the executor interface (kvbudget.simulator.serving.ServingEngine) ------------------
    def add_request(self, i: int) -> str:  # (ServingEngine; the caps: simulator.queue_caps)
        if self._caps is not None and (why := self._caps.refusal(self)):
            return why
        self._add(i)
        return ""

    def _add(self, i: int, computed_tokens: int = 0) -> None:
        if self.in_engine.item(i):
            # re-admitted while its abort waits for the step boundary: add it after the abort
            self._deferred_adds.append(i)
            return
        self.num_tokens[i] = self.prompt_tokens.item(i)
        self.num_computed_tokens[i] = computed_tokens
        self.num_output_tokens[i] = 0
        self.kv.num_blocks[i] = 0
        self.segments.reset(i)
        if self.spec is not None:
            self.spec.reset(self, i)
        self.in_engine[i] = True
        if self._async and (self._busy or self._between_steps):
            # async scheduling (vllm/v1/engine/core.py, step_with_batch_queue): the step
            # after the one in flight is scheduled while it runs, so a request that comes
            # during step N, or as it ends, is schedulable once N + 1 has ended. An idle
            # engine (or one just woken) takes it at once.
            if self._busy:
                self._pending.append([i, self._steps_done_now() + 2])
                self._work_changed(lag=1)
            else:
                self._pending.append([i, self.num_steps + 1])
            return
        self.waiting.add_request(i)
        self._queued()

    def add_remote_request(self, i: int, computed_tokens: int) -> bool:
        """Queue row ``i`` whose first ``computed_tokens`` were computed on another replica
        (``remote_kv``). False when its earlier attempt's abort waits for the step boundary:
        it is then added after it as a fresh request."""
        fresh = bool(self.in_engine.item(i))
        self._add(i, 0 if fresh else computed_tokens)
        return not fresh

    def add_loaded(self, i: int) -> None:
        """Row ``i``, whose KV was loading (``remote_kv``), goes back to the front of the waiting
        queue (aborted: the abort finds it there)."""
        self.waiting.prepend_request(i)
        self._queued()

    def _queued(self) -> None:
        """A request joined ``waiting``: wake the idle engine, or tell the step in flight."""
        wake = self._wake  # (None once woken: _sleep)
        if wake is not None:
            self._wake = None
            wake.succeed()
        elif self._busy:
            self._work_changed(added=True)

    def abort_request(self, i: int) -> None:
        """Remove row ``i`` (a gateway revocation) at the next step boundary, as vLLM does; at
        once when idle. A row re-admitted while its abort waits and aborted again stays out."""
        if not self.in_engine.item(i):
            return
        if self._deferred_adds and i in self._deferred_adds:
            self._deferred_adds.remove(i)  # its first abort is pending still
            return
        if self._pending and (entry := next((p for p in self._pending if p[0] == i), None)):
            if self._busy and entry[1] <= (done := self._steps_done_now()):
                # schedulable already (a run went on past its step behind a refused head):
                # to the waiting queue, as stepping had it; its abort waits for the step's end
                self._release_pending(done)
            else:
                self._pending.remove(entry)  # never reached the scheduler: nothing to free
                self.in_engine[i] = False
                if self._busy:  # the steps scheduled from now on do not count it waiting
                    self._work_changed()
                return
        if self._busy:
            self._aborts.append(i)
            self._work_changed()
        else:
            self._held_to(self.env.now)  # (while idle: the blocks it frees were held till now)
            self._abort_now(i)

    def fits(self, i: int) -> bool:
        """Whether the request could ever run here: vLLM's max_model_len check, and a prompt
        whose blocks fit beside the watermark (vLLM v0's ``AllocStatus.NEVER``: such a request
        is refused, never scheduled)."""
        return self.fits_tokens(self.prompt_tokens.item(i), self.target_output.item(i))

    def fits_rows(self) -> npt.NDArray[np.bool_]:  # fits of every row at once
        prompt = self.prompt_tokens
        return ((prompt + self.target_output <= self.max_model_len)
                & (-(-prompt // self.block_size) <= self.num_gpu_blocks - self.watermark_blocks))

    def fits_tokens(self, prompt: int, output: int) -> bool:  # fits of such a request
        return (prompt + output <= self.max_model_len
                and -(-prompt // self.block_size) <= self.num_gpu_blocks - self.watermark_blocks)

    def forget_first_token(self, i: int) -> None:
        self.first_token_s[i] = math.nan

    def num_waiting(self) -> int:  # in the waiting queue, or not yet schedulable (async)
        return len(self.waiting) + len(self._pending)

    def unfinished_rows(self) -> list[int]:
        """The rows the API server holds (waiting or running, not aborted: queue caps')."""
        aborted = set(self._aborts) - set(self._deferred_adds)
        pending = [p[0] for p in self._pending]
        return [i for rows in (self.waiting, self.running, pending) for i in rows
                if i not in aborted]

    def num_unfinished(self) -> int:  # len(unfinished_rows())
        return (len(self.waiting) + len(self.running) - len(self._aborts)
                + len(self._deferred_adds) + len(self._pending))

    def output_tokens_of(self, i: int) -> int:  # (ServingEngine documents these)
        return self.num_output_tokens.item(i)

    def output_tokens(self) -> IntArray:  # every row's output_tokens_of
        return self.num_output_tokens.copy()

    @property
    def idle(self) -> bool:  # nothing running, waiting or in a step
        return not self.running and self.num_waiting() == 0 and not self._busy

    @property
    def timeline(self) -> list[TimelineRow]:
        return self.log.timeline.rows

    def head_of_line_blocked_s(self) -> float:
        """Exact total of the steps during which the waiting head could not start for lack of
        KV memory (free, reserved or estimated), blocking those behind it."""
        return self.log.integrals.hol.value()

    def kv_token_seconds(self) -> float:  # (ServingEngine's; rounded once: math.fsum)
        return self.log.integrals.kv.value()

    def kv_token_seconds_exact(self) -> int:
        """:meth:`kv_token_seconds` exactly, in units of ``2**-exact_sum.EXPONENT_BIAS``."""
        return self.log.integrals.kv.exact()

    def kv_used_blocks_now(self) -> int:
        """KV blocks in use (``kv_cache_usage_perc`` times the blocks) as the step in progress
        was scheduled (an autoscaler's metric)."""
        return self.kv.num_used_blocks

    def stats(self) -> dict[str, object]:
        return {
            "engine": self.config.name,
            "head_of_line_blocked_s": self.head_of_line_blocked_s(),
            **self.kv.stats(),
            **({"queue_caps": self._caps.settings()} if self._caps is not None else {}),
            **({"speculative": self.spec.stats(int(self.num_output_tokens.sum()), self.num_steps)}
               if self.spec is not None else {}),
        }

    # --- rows that come as they are routed (a fleet's replicas: kvbudget.simulator.fleet) ----
    def grow_rows(self, columns: Mapping[str, IntArray | FloatArray]) -> None:
        """Take longer per-request columns (``prompt_tokens``, ``output_tokens``,
        ``max_output_tokens``, ``arrival_s``, ``priority``, ``order``: ties in a priority
        queue) and grow the per-request state to them: a fleet's replica holds the rows routed
        to it. Not with prefix caching (its arrays are the workload's)."""
        assert self.kv.prefix is None and type(self).rows_grow
        cap = len(columns["prompt_tokens"])
        prompt, output, priority, most = (np.asarray(columns[k], np.int64) for k in (
            "prompt_tokens", "output_tokens", "priority", "max_output_tokens"))
        self._set_columns(RequestColumns(prompt, output, priority,
                                         np.asarray(columns["arrival_s"], np.float64), most))
        for name, array in self.rows.grow(cap).items():
            setattr(self, name, array)
        self.segments.grow(cap)
        self.kv.grow(cap)
        order = columns.get("order")
        self.waiting.columns_changed(
            self.priority, self.arrival_s, None if order is None else np.asarray(order, np.int64))

    # --- steps in time ---------------------------------------------------------------------
    def _run(self) -> Generator[simpy.Event, Any, None]:  # the engine loop
        env = self.env
        while True:
            if self._aborts:
                self._apply_aborts()
            if self._pending and not self.running and self.waiting.peek_request() is None:
                self._release_pending(everything=True)  # nothing else would be scheduled
            self._between_steps = False
            if not self.running and self.waiting.peek_request() is None:
                if (t_held := self._held_until_s()) <= self.t:
                    continue  # work held outside the queues (a KV load) waits now
                self._on_idle()
                yield from self._sleep(t_held)
                if self.log.timeline.next_s < env.now:  # samples are due while it was idle
                    reserved, gw_waiting = self.hooks.gateway_state()
                    self.log.timeline.sample_idle(env.now, reserved, gw_waiting,
                                                  self.num_preemptions_total)
                continue
            if Engine.step_observer is not None:
                Engine.step_observer(self)
            yield from self._step()
            if self._deferred_adds:  # re-admitted while their aborts waited (one whose abort
                # still waits, no step having run, waits again)
                adds, self._deferred_adds = self._deferred_adds, []
                for i in adds:
                    self._add(i)
            if self._pending and self._pending[0][1] <= self.num_steps:
                self._release_pending()

    def _step(self) -> Generator[simpy.Event, Any, None]:
        reserved, gw_waiting = self.hooks.gateway_state()
        rows, new, started, preempted = self._schedule()
        return self._run_step(rows, new, started, preempted, reserved, gw_waiting)

    def _run_step(self, rows: IntArray, new: IntArray, started: list[tuple[int, int]],
                  preempted: bool, reserved: int, gw_waiting: int
                  ) -> Generator[simpy.Event, Any, None]:
        """Run and commit the scheduled step (``reserved``, ``gw_waiting``: the gateway's
        figures as it was scheduled)."""
        if started:
            rows = np.concatenate((rows, [i for i, _ in started]))
            new = np.concatenate((new, [n for _, n in started]))
        if self.spec is not None:
            self._step_extra_s += self.spec.draft_seconds(self, rows, new)
        if len(rows) == 0:
            if preempted:  # its own victim (priority): vLLM v1 schedules nothing this step
                return
            if (t_held := self._held_until_s()) < math.inf:
                # nothing can start until held work (a KV load) is ready, or a request comes
                yield from self._sleep(t_held)
                return
            # nothing fits with every block free: not for requests that passed fits()
            raise RuntimeError("engine could not schedule any request")  # pragma: no cover
        counts = (len(self.running), self.num_waiting() + gw_waiting)
        yield from self._run_scheduled(rows, new, preempted, reserved, counts)

    def _run_scheduled(self, rows: IntArray, new: IntArray, preempted: bool, reserved: int,
                       counts: tuple[int, int]) -> Generator[simpy.Event, Any, None]:
        """(``counts``: running, waiting, as the step was scheduled)"""
        dt = self._step_seconds(rows_features(rows, new, self.num_computed_tokens,
                                              self.num_tokens, self.num_output_tokens))
        yield from self._wait(self._account_step(dt, reserved, counts))
        self._commit_step(rows, new, preempted)

    def _commit_step(self, rows: IntArray, new: IntArray, preempted: bool = False) -> None:
        """Commit the step that has ended (``new`` tokens for each of ``rows``): the aborts that
        came during it first, without them."""
        aborted = self._apply_aborts() if self._aborts else []
        self._steps_rows = rows
        self._on_steps(preempted, 1)
        self.commit.rows(rows, new, aborted)

    def _account_step(self, dt: float, reserved: int, counts: tuple[int, int]) -> float:
        """A single step of ``dt`` seconds from now, logged; returns its end."""
        t1 = self.t + dt
        self.log.scheduled(t1, dt, self.kv.num_used_blocks, self._hol_blocked, reserved, counts,
                           self.num_preemptions_total)
        return t1

    def _wait(self, t1: float) -> Generator[simpy.Event, Any, None]:  # for the step in flight
        self._busy = True
        # ``Timeout(env, d)`` is ``env.timeout(d)`` without the bound-class descriptor's call
        yield Timeout(self.env, max(0.0, t1 - self.env.now))
        self._busy = False
        self._between_steps = True
        self.t = t1
        self.num_steps += 1
        self.log.ended(t1)

    def token_gaps(self, keep: npt.NDArray[np.bool_], tier: IntArray) -> TokenGaps:
        """The inter-token gaps (engine times) of the rows ``keep`` selects that finished here."""
        rows = np.flatnonzero(keep & np.isfinite(self.finished_s))
        marks = self.num_output_tokens if self.spec is None else self.spec.num_output_steps
        return self.segments.gaps(self.log.ends(), rows, marks[rows], tier[rows])

    def request_figures(self, keep: npt.NDArray[np.bool_], tier: IntArray) -> RequestFigures:
        return RequestFigures(self.output_tokens(), self.first_token_s.copy(), self.finished_s,
                              self.num_preemptions, self.recomputed_tokens,
                              *self.token_gaps(keep, tier))

    def drop_request_state(self) -> None:
        """Let the per-request state and step ends go (a fleet's replica, its figures read); the
        engine cannot go on, its other figures (timeline, integrals, stats) stay."""
        for name, array in self.rows.drop().items():
            setattr(self, name, array)
        none = np.zeros(0, np.int64)
        self._set_columns(RequestColumns(none, none, none, np.zeros(0, np.float64)))
        self.log.drop_ends()
        self.segments.drop()
        self.kv.drop()

    def _release_pending(self, upto: int = -1, *, everything: bool = False) -> None:
        """The pending requests whose step has ended (by ``upto`` steps, else ``num_steps``;
        ``everything``: all, when nothing else would be scheduled) join ``waiting``, in order."""
        pending, n = self._pending, self.num_steps if upto < 0 else upto
        while pending and (everything or pending[0][1] <= n):
            self.waiting.add_request(pending.pop(0)[0])

    def _steps_done_now(self) -> int:  # during a step (a speed-up counts its run's ended steps)
        return self.num_steps

    def _held_until_s(self) -> float:
        """When work held outside the queues (KV being loaded: ``remote_kv``) is ready while no
        model runs; ``self.t`` or before once some of it waits again, ``inf`` with none."""
        if self.remote is None:
            return math.inf
        return self.remote.held_until_s(self.waiting, self.t, self.num_steps)

    def _sleep(self, t_held: float) -> Generator[simpy.Event, Any, None]:
        """Wait for a request (``_wake``) or held work ready at ``t_held``; then ``t`` is now."""
        env = self.env
        wake = self._wake = Event(env)  # (``env.event()`` without the descriptor's call)

        def ring(_: object) -> None:
            if self._wake is wake:  # not woken yet
                self._wake = None
                wake.succeed()
        if t_held < math.inf:  # (held work holds KV blocks meanwhile: none without it)
            Timeout(env, max(0.0, t_held - env.now)).callbacks.append(ring)
            self._idle_from = self.t
        yield wake
        if t_held < math.inf:
            self._held_to(env.now)
            self._idle_from = math.inf
        self.t = max(self.t, env.now)

    def _held_to(self, now: float) -> None:
        """While the engine sleeps (:meth:`_sleep`), log its KV blocks in use from ``_idle_from``
        (when it fell idle, or an idle abort since; ``inf`` while it steps) to ``now``."""
        t0 = self._idle_from
        if t0 < now:
            used = self.kv.num_used_blocks
            self.log.held(t0, now, used)
            if self.log.timeline.next_s < now:  # its samples show the blocks held, not none
                reserved, gw_waiting = self.hooks.gateway_state()
                self.log.timeline.sample_idle(now, reserved, gw_waiting,
                                              self.num_preemptions_total, used)
            self._idle_from = now

    # --- aborts --------------------------------------------------------------------------------
    def _work_changed(self, *, added: bool = False, lag: int = 0) -> None:
        """A request was ``added`` or aborted during a step (skip-ahead cuts its run, ``lag``
        steps later under async scheduling)."""

    def _apply_aborts(self) -> list[int]:  # those queued during the last step (there are some)
        aborted = list(self._aborts)
        for i in aborted:
            self._abort_now(i)
        self._aborts.clear()
        return aborted
