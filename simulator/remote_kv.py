"""A disaggregated decode replica's KV loads (vLLM's ``WAITING_FOR_REMOTE_KVS``).

A request whose prompt was prefilled on another replica joins the decode replica's waiting
queue with every prompt token but the last counted as computed
(``Engine.add_remote_request``). When the waiting loop admits it, its blocks are allocated for
the whole prompt as for any request, and then, instead of running, it leaves the queue while its
KV is read over the link (:meth:`RemoteLoads.start_load`, called by
``Scheduler._schedule_waiting``; vLLM's ``start_load_kv`` issues the read as the step's forward
is launched, ``nixl/pull_worker.py:47-77``): it holds its blocks, takes no token budget and no
seat. When the engine has noticed that the read has ended (:class:`LoadNotices`: the next
step's poll, its output, the next schedule) it goes back to the front of the waiting queue
(:meth:`RemoteLoads.promote`) and is admitted again, ahead of every request that holds no
blocks (:meth:`RemoteLoads.to_front`), to compute the last prompt token, which samples its
first output token. This is vLLM 0.32.0's scheduler
(``vllm/v1/core/sched/scheduler.py``): lines 1109-1112 (a request loading async takes no new
tokens), 1320-1323 (its blocks allocated, status ``WAITING_FOR_REMOTE_KVS``), 3178-3186
(skipped until ``finished_recving``), 3170-3173 (``num_computed_tokens = num_tokens - 1`` when
the whole prompt arrived); the NIXL connector asks for every prompt block
(``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`` ``get_num_new_matched_tokens``,
lines 59-65). A request aborted while its KV loads frees its blocks at the engine's next step
boundary, as any abort (vLLM 0.32.0 keeps them until the read has ended: scheduler.py lines
2700-2710, ``delay_free_blocks``).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import simpy
from simpy.events import Timeout

from kvbudget.simulator.decode_plan import Floats
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.request_queue import RequestQueue

__all__ = ["IDLE_POLL_S", "LoadNotices", "RemoteLoads"]

IDLE_POLL_S = 1e-3
"""How often an engine that runs no model polls its KV loads: vLLM 0.32.0's engine core sleeps
1 ms after an iteration that executed no model while requests remain ("yield the GIL briefly to
allow background transfer threads to make progress": ``vllm/v1/engine/core.py:1616-1617``),
and each iteration's (empty) step polls the connector (``kv_connector_no_forward``,
``v1/worker/kv_connector_model_runner_mixin.py:25-37``). The iteration's own CPU time beside
the sleep is not counted."""


class LoadNotices:
    """When a request whose KV loads asynchronously (vLLM's ``WAITING_FOR_REMOTE_KVS``: a CPU
    tier's load, ``kv_offload``; a disaggregated decode replica's NIXL read,
    :class:`RemoteLoads`) may be scheduled again, from when its copy ends. vLLM 0.32.0 (paths
    under ``vllm/``):

    1. every step's model execution polls the connector after launching the forward
       (``v1/worker/kv_connector_model_runner_mixin.py:89-98``: ``get_finished``, which asks
       each copy's CUDA event without waiting, ``v1/kv_offload/cpu/gpu_worker.py:706-708``; NIXL
       asks each read's state, ``nixl/base_worker.py:3064-3083``): a copy that ends during a
       step is seen by the next step's poll, as it starts (a step boundary here);
    2. the poll's ``finished_recving`` comes back in that step's output; ``update_from_output``
       marks the request (``v1/core/sched/scheduler.py:2329-2330``, ``3222-3227``);
    3. the next ``schedule()`` promotes it to ``WAITING`` (``scheduler.py:3175-3190``,
       ``_update_waiting_for_remote_kv`` 3123-3173) and schedules its uncached tail in that
       same pass (the waiting loop asks at ``scheduler.py:929-932``, then 1086-1092 and 1129:
       the tokens beyond those loaded).

    Without async scheduling (``v1/engine/core.py:657-687``: schedule, execute, update) the
    schedule after the step whose poll saw the copy ended is the next one: a copy that ends in
    the step ending at boundary ``m`` (or at it) is seen by step ``m + 1``'s poll and the
    request is scheduled from boundary ``m + 1`` (``notice_steps`` 1). With async scheduling
    (``step_with_batch_queue``, core.py:698-810) step ``j`` is scheduled, and its poll made (one
    GPU's executor runs ``execute_model`` as it is called,
    ``v1/executor/uniproc_executor.py:108-117``), while step ``j - 1`` runs, and its output is taken in after step ``j + 1`` is scheduled:
    the copy is seen by step ``m + 2``'s poll (made at boundary ``m``), whose output comes at
    boundary ``m + 2``; the schedule then made is step ``m + 4``'s, which this model (whose
    step ``k`` is scheduled at boundary ``k - 1``, ``Engine._add``) makes at boundary ``m + 3``
    (``notice_steps`` 3). An engine that runs no model polls every :data:`IDLE_POLL_S`: the
    first poll at or after the copy's end sees it and the request is scheduled one iteration
    later (two with async scheduling, whose queue of two batches returns an iteration's output
    in the next iteration: ``idle_polls``).

    A skip-ahead decode run (a disaggregated decode replica's) goes on past a copy's end, which
    changes nothing the scheduler sees before the request is schedulable: :meth:`run_cut` ends
    it at that step count, and :meth:`steps_ran` marks the copies its boundaries saw, as
    :meth:`ready` at each would have. A CPU tier's engine (``kv_offload``) ends its run with
    the step in progress at the copy's end (:meth:`next_s`)."""

    def __init__(self, async_scheduling: bool) -> None:
        self.notice_steps = 3 if async_scheduling else 1
        self.idle_polls = 2 if async_scheduling else 1
        # row -> its copy's end, not yet seen by a poll (read by a decode run's end: steps_ran)
        self.unseen: dict[int, float] = {}
        self._due: dict[int, int] = {}  # row -> the step count from which it is schedulable
        self._due_s: dict[int, float] = {}  # row -> the time from which (seen while idle)
        # row -> its copy's end: the rows waiting here, in the order they go in (read, rather
        # than ``len``, by the scheduler's check for any: no call)
        self.order: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, i: int) -> bool:
        return i in self.order

    def rows(self) -> list[int]:
        """The rows waiting here, in the order they were added."""
        return list(self.order)

    def add(self, i: int, end_s: float) -> None:
        """Row ``i``'s copy is due to end at ``end_s``."""
        self.unseen[i] = end_s
        self.order[i] = end_s

    def cancel(self, i: int) -> None:
        """Row ``i`` leaves (an abort)."""
        if self.order.pop(i, None) is not None:
            self.unseen.pop(i, None)
            self._due.pop(i, None)
            self._due_s.pop(i, None)

    def ready(self, t: float, num_steps: int) -> list[int]:
        """At the step boundary ``t``, ``num_steps`` steps done (a schedule): the copies ended
        by ``t`` are seen (the step scheduled now polls them); the rows schedulable now leave,
        in the order their copies ended."""
        ends, due_n, due_s = self.unseen, self._due, self._due_s
        if ends and min(ends.values()) <= t:  # (min: no scan in Python while none has)
            due = num_steps + self.notice_steps
            for i in [i for i, end in ends.items() if end <= t]:
                del ends[i]
                due_n[i] = due
        out = ([i for i, n in due_n.items() if n <= num_steps]
               if due_n and min(due_n.values()) <= num_steps else [])
        if due_s and min(due_s.values()) <= t:
            out += [i for i, s in due_s.items() if s <= t]
        if not out:
            return out
        for i in out:
            due_n.pop(i, None)
            due_s.pop(i, None)
        order = self.order
        out.sort(key=order.__getitem__)
        for i in out:
            del order[i]
        return out

    def idle_until_s(self, t: float, num_steps: int) -> float:
        """The engine runs no model from ``t`` (``num_steps`` steps done) and polls every
        :data:`IDLE_POLL_S`: when the first row waiting here is schedulable (``inf``: none).
        A copy not yet seen is seen by the first poll at or after its end; a row seen by a
        step's poll waits out what it still had to, at most ``idle_polls`` idle iterations."""
        due_s = self._due_s
        polls = self.idle_polls
        for i, end in self.unseen.items():
            # (rounded: a copy ending on a poll, as worked in decimals, is seen by that poll)
            k = max(0, math.ceil(round((end - t) / IDLE_POLL_S, 9)))
            due_s[i] = t + (k + polls) * IDLE_POLL_S
        self.unseen.clear()
        for i, n in self._due.items():
            due_s[i] = t + min(n - num_steps, polls) * IDLE_POLL_S
        self._due.clear()
        return min(due_s.values()) if due_s else math.inf

    def run_end(self, to_end: int, num_steps: int) -> tuple[int, float]:
        """For a skip-ahead decode run planned now (``num_steps`` steps done) of at most
        ``to_end`` steps: those up to the first step count from which a row seen by a step's
        poll is schedulable, and :meth:`first_unseen_s` (the run's :meth:`run_cut`)."""
        if self._due:
            to_end = min(to_end, min(self._due.values()) - num_steps)
        unseen = self.unseen  # (first_unseen_s, without its call)
        return to_end, min(unseen.values()) if unseen else math.inf

    def first_unseen_s(self) -> float:
        """The first end of a copy no poll has seen yet (inf: none)."""
        return min(self.unseen.values()) if self.unseen else math.inf

    def run_cut(self, ends: Floats) -> int:
        """How many steps of a skip-ahead decode run planned at a step boundary, its steps
        ending at ``ends``, run while a copy is not yet seen: its end changes nothing the
        scheduler sees until its request is schedulable, so the run goes on to that step
        count, ``notice_steps`` after the step whose end is the first at or after the copy's
        (that boundary's schedule polls it, :meth:`steps_ran`)."""
        return bisect.bisect_left(ends, self.first_unseen_s()) + 1 + self.notice_steps

    def steps_ran(self, ends: Floats, num_steps: int) -> None:
        """A skip-ahead decode run's steps ended at ``ends``, ``num_steps`` steps done with
        the last: each boundary but the last was a schedule whose poll saw the copies ended
        by then, as :meth:`ready` at each of them would have (the last one's is
        :meth:`ready`'s). The run was cut by :meth:`run_cut`, so none is schedulable before
        its last boundary."""
        copies = self.unseen
        if not copies or len(ends) < 2:
            return
        last = ends[-2]
        seen = [(i, end) for i, end in copies.items() if end <= last]
        if seen:
            first = num_steps - len(ends) + 1 + self.notice_steps  # (step 0's end: count + 1)
            for i, end in seen:
                del copies[i]
                self._due[i] = first + bisect.bisect_left(ends, end)

    def next_due_s(self) -> float:
        """The first time a row seen while the engine was idle is schedulable at (inf:
        none): a disaggregated decode replica's ``next_external_s``, where its skip-ahead
        decode runs end with the step in progress (by the step count from which a row is
        schedulable: :meth:`run_end`, :meth:`run_cut`). A read's end is not one: it changes
        nothing the replica schedules until that step count (what ``RemoteLoads._ended``
        does, the gateway's first-stage part going, reaches the replica only through a
        request added or aborted, which cuts a run where stepping would)."""
        return min(self._due_s.values()) if self._due_s else math.inf

    def next_s(self, t: float) -> float:
        """Where a skip-ahead decode run planned at ``t`` ends (the step in progress then): at
        once (``t``: one step) while a row waits for a step count, else :meth:`next_time_s`."""
        return t if self._due else self.next_time_s()

    def next_time_s(self) -> float:
        """The first copy's end or time a row is schedulable at (inf: none); a run that ends
        with the step in progress then also keeps to :meth:`run_end`'s step count."""
        return min(min(self.unseen.values(), default=math.inf),
                   min(self._due_s.values(), default=math.inf))


class _Engine(Protocol):
    """What of its engine (``simulator.engine.Engine``) a replica's loads use."""

    t: float
    config: EngineConfig

    def add_loaded(self, i: int) -> None: ...

    def abort_request(self, i: int) -> None: ...


class RemoteLoads:
    """One decode replica's requests whose KV is remote: those not yet admitted
    (``pending``), those loading (``loading``: row -> end), those whose read the engine has
    not yet noticed (``notices``: from the read's start), and the loads' start and end."""

    def __init__(self, env: simpy.Environment, engine: _Engine,
                 transfer_s: Sequence[float],
                 starts: list[float], ends: list[float],
                 ends_heap: list[tuple[float, int]]) -> None:
        self.env = env
        self.engine = engine
        self._transfer_s = transfer_s  # each row's seconds its KV takes over the link
        # the fleet's records, written as a load starts: each row's load start and end, and
        # a heap of the loads' (end, row), some ended (every decode replica's)
        self._starts, self._ends, self._ends_heap = starts, ends, ends_heap
        # (row, now): its KV has moved (the driver's: the gateway's first-stage part goes)
        self.on_end: Callable[[int, float], None] | None = None
        self.pending: set[int] = set()  # the fleet adds a row joining with its KV remote
        self.loading: dict[int, float] = {}
        self.notices = LoadNotices(bool(engine.config.async_scheduling))
        self.loaded: dict[int, None] = {}  # in the queue with their blocks, by load end
        # the requests handed off during a decode run and admitted within it
        # (``SkipAheadEngine._admit_in_run``): (row, blocks) of those whose boundary is not
        # reached yet, and the run they are of; (step, blocks) of those admitted, which the
        # run's log adds to its steps' blocks
        self.wakes: list[tuple[int, int]] = []
        self.wake_run: Floats | None = None
        self.held: list[tuple[int, int]] = []

    def start_load(self, i: int) -> None:
        """Row ``i``, whose KV is remote (in ``pending``), was admitted by the waiting loop (its
        blocks allocated): its load starts."""
        # (the loop calls it only for such a row; one whose KV is here runs, out of ``loaded``)
        self.pending.remove(i)
        self.loaded.pop(i, None)
        start = self.engine.t
        end = start + self._transfer_s[i]
        self.loading[i] = end
        self._starts[i] = start
        self._ends[i] = end
        heapq.heappush(self._ends_heap, (end, i))
        self.notices.add(i, end)
        # (``Timeout(env, d)``: ``env.timeout(d)`` without the bound-class descriptor's call)
        done = Timeout(self.env, max(0.0, end - self.env.now))
        done.callbacks.append(partial(self._ended, i, end))

    def load_end_s(self, i: int, start: float) -> float:
        """The end of row ``i``'s load started at ``start`` (as :meth:`start_load`'s)."""
        return start + self._transfer_s[i]

    def _ended(self, i: int, end: float, _: Any) -> None:
        """Row ``i``'s load, due to end at ``end``, has ended (unless it was cancelled)."""
        if self.loading.get(i) != end:  # cancelled (an abort), or another attempt's load
            return
        del self.loading[i]  # (the engine notices it later: promote)
        if self.on_end is not None:
            self.on_end(i, self.env.now)

    def cancel(self, i: int) -> None:
        """Row ``i`` is aborted (a revocation): a load in progress stops (the row goes back to
        the queue, whence the engine's abort takes it and frees its blocks at its next step
        boundary, as any abort), then the engine aborts it."""
        self.pending.discard(i)
        self.loaded.pop(i, None)
        self.loading.pop(i, None)
        if i in self.notices:
            self.notices.cancel(i)
            self.engine.add_loaded(i)
        self.engine.abort_request(i)

    def promote(self, waiting: RequestQueue, t: float, num_steps: int) -> bool:
        """At the step boundary ``t`` (``num_steps`` steps done, a schedule): the requests whose
        reads the engine has noticed by now (:class:`LoadNotices`) join ``waiting``, and every
        request whose KV arrived goes to its front (:meth:`to_front`); whether any joined."""
        rows = self.notices.ready(t, num_steps)
        for i in rows:
            self.loaded[i] = None
            waiting.add_request(i)
        if self.loaded:
            self.to_front(waiting)
        return bool(rows)

    def held_until_s(self, waiting: RequestQueue, t: float, num_steps: int) -> float:
        """The engine runs no model from ``t``: ``t`` when a request joined ``waiting`` now
        (:meth:`promote`), else when the first read's request becomes schedulable while the
        engine polls (``LoadNotices.idle_until_s``; inf: none)."""
        if not self.notices:
            return math.inf
        if self.promote(waiting, t, num_steps):
            return t
        return self.notices.idle_until_s(t, num_steps)

    def to_front(self, waiting: RequestQueue) -> None:
        """Put the requests whose KV arrived at the front of ``waiting``, in the order their
        loads ended: vLLM 0.32.0 drains the waiting requests that hold KV blocks before the
        others ("a block-holder must never sit behind a request whose failed allocation would
        stop the scheduling scan": ``kv_holding_waiting``, scheduler.py lines 223-227 and
        913-916), so a request preempted since, which holds none, goes behind them."""
        loaded = self.loaded
        if len(loaded) == 1:
            (i,) = loaded
            if waiting.peek_request() == i:
                return  # at the front already (``Engine.add_loaded`` put it there)
        for i in reversed(loaded):
            waiting.remove_request(i)
            waiting.prepend_request(i)
