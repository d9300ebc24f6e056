"""A disaggregated decode replica's KV loads (vLLM's ``WAITING_FOR_REMOTE_KVS``).

A request whose prompt was prefilled on another replica joins the decode replica's waiting
queue with every prompt token but the last counted as computed
(``Engine.add_remote_request``). When the waiting loop admits it, its blocks are allocated for
the whole prompt as for any request, and then, instead of running, it leaves the queue while its
KV is read over the link (:meth:`RemoteLoads.start_load`, called by
``Scheduler._schedule_waiting``): it holds its blocks, takes no token budget and no seat. When
the read has ended it goes back to the front of the waiting queue (``Engine.add_loaded``) and
is admitted again, ahead of every request that holds no blocks (:meth:`RemoteLoads.to_front`),
to compute the last prompt token, which
samples its first output token. This is vLLM 0.32.0's scheduler
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

import heapq
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import simpy
from simpy.events import Timeout

from kvbudget.simulator.request_queue import RequestQueue

__all__ = ["RemoteLoads"]


class _Engine(Protocol):
    """What of its engine (``simulator.engine.Engine``) a replica's loads use."""

    t: float

    def add_loaded(self, i: int) -> None: ...

    def abort_request(self, i: int) -> None: ...


class RemoteLoads:
    """One decode replica's requests whose KV is remote: those not yet admitted
    (``pending``), those loading (``loading``: row -> end), and the loads' start and end."""

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
        self.loaded: dict[int, None] = {}  # in the queue with their blocks, by load end

    def start_load(self, i: int) -> bool:
        """Row ``i`` was admitted by the waiting loop (its blocks allocated): True, its load
        started, when its KV is remote; False when it is here (it runs)."""
        pending = self.pending
        if i not in pending:
            if self.loaded:
                self.loaded.pop(i, None)
            return False
        pending.remove(i)
        self.loaded.pop(i, None)
        start = self.engine.t
        end = start + self._transfer_s[i]
        self.loading[i] = end
        self._starts[i] = start
        self._ends[i] = end
        heapq.heappush(self._ends_heap, (end, i))
        # (``Timeout(env, d)``: ``env.timeout(d)`` without the bound-class descriptor's call)
        done = Timeout(self.env, max(0.0, end - self.env.now))
        done.callbacks.append(partial(self._ended, i, end))
        return True

    def _ended(self, i: int, end: float, _: Any) -> None:
        """Row ``i``'s load, due to end at ``end``, has ended (unless it was cancelled)."""
        if self.loading.get(i) != end:  # cancelled (an abort), or another attempt's load
            return
        del self.loading[i]
        self.loaded[i] = None
        self.engine.add_loaded(i)
        if self.on_end is not None:
            self.on_end(i, self.env.now)

    def cancel(self, i: int) -> None:
        """Row ``i`` is aborted (a revocation): a load in progress stops (the row goes back to
        the queue, whence the engine's abort takes it and frees its blocks at its next step
        boundary, as any abort), then the engine aborts it."""
        self.pending.discard(i)
        self.loaded.pop(i, None)
        if self.loading.pop(i, None) is not None:
            self.engine.add_loaded(i)
        self.engine.abort_request(i)

    def next_end_s(self) -> float:
        """The earliest end of a load in progress (inf: none)."""
        loading = self.loading
        return min(loading.values()) if loading else math.inf

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
