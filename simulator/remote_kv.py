"""A disaggregated decode replica's KV loads (vLLM's ``WAITING_FOR_REMOTE_KVS``).

A request whose prompt was prefilled on another replica joins the decode replica's waiting
queue with every prompt token but the last counted as computed
(``Engine.add_remote_request``). When the waiting loop admits it, its blocks are allocated for
the whole prompt as for any request, and then, instead of running, it leaves the queue while its
KV is read over the link (:meth:`RemoteLoads.start_load`, called by
``Scheduler._schedule_waiting``): it holds its blocks, takes no token budget and no seat. When
the read has ended it goes back to the front of the waiting queue (``Engine.add_loaded``) and
is admitted again (its blocks are there: it fits) to compute the last prompt token, which
samples its first output token. This is vLLM 0.32.0's scheduler
(``vllm/v1/core/sched/scheduler.py``): lines 1109-1112 (a request loading async takes no new
tokens), 1320-1323 (its blocks allocated, status ``WAITING_FOR_REMOTE_KVS``), 3178-3186
(skipped until ``finished_recving``), 3170-3173 (``num_computed_tokens = num_tokens - 1`` when
the whole prompt arrived); the NIXL connector asks for every prompt block
(``distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`` ``get_num_new_matched_tokens``,
lines 59-65). A request aborted while its KV loads keeps its blocks until the load ends
(scheduler.py lines 2447-2454): here the abort is applied when it ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import simpy

if TYPE_CHECKING:
    from kvbudget.simulator.engine import Engine

__all__ = ["RemoteLoads"]


class RemoteLoads:
    """One decode replica's requests whose KV is remote: those not yet admitted
    (``pending``), those loading (``loading``: row -> end), and the loads' start and end."""

    def __init__(self, env: simpy.Environment, engine: Engine,
                 transfer_s: Callable[[int], float],
                 on_start: Callable[[int, float, float], None]) -> None:
        self.env = env
        self.engine = engine
        self._transfer_s = transfer_s  # row -> seconds its KV takes over the link
        self._on_start = on_start  # (row, start, end): the fleet's records
        self.pending: set[int] = set()
        self.loading: dict[int, float] = {}
        self.loaded: set[int] = set()  # back in the queue with their blocks, not yet running
        self.cancelled: set[int] = set()

    def expect(self, i: int) -> None:
        """Row ``i`` joins the decode replica with its KV remote."""
        self.pending.add(i)
        self.cancelled.discard(i)

    def start_load(self, i: int) -> bool:
        """Row ``i`` was admitted by the waiting loop (its blocks allocated): True, its load
        started, when its KV is remote; False when it is here (it runs)."""
        if i not in self.pending:
            self.loaded.discard(i)
            return False
        self.pending.discard(i)
        start = self.engine.t
        end = start + self._transfer_s(i)
        self.loading[i] = end
        self._on_start(i, start, end)
        done = self.env.timeout(max(0.0, end - self.env.now))
        done.callbacks.append(self._ended(i))
        return True

    def _ended(self, i: int) -> Callable[[Any], None]:
        def ended(_: Any) -> None:
            del self.loading[i]
            self.loaded.add(i)
            self.engine.add_loaded(i)
            if i in self.cancelled:  # aborted while loading: its blocks go now
                self.cancelled.discard(i)
                self.loaded.discard(i)
                self.engine.abort_request(i)
        return ended

    def cancel(self, i: int) -> bool:
        """Row ``i`` is aborted: True when its load is in progress (the abort then waits for
        its end); a pending row is forgotten (the engine aborts it from the queue)."""
        self.pending.discard(i)
        self.loaded.discard(i)
        if i in self.loading:
            self.cancelled.add(i)
            return True
        return False

    def next_end_s(self) -> float:
        """The earliest end of a load in progress (inf: none)."""
        return min(self.loading.values(), default=math.inf)

    def release_held(self) -> bool:
        """Nothing runs and nothing loads, and the waiting head cannot start: requests whose KV
        arrived and that wait behind it (a preempted request, or one of higher priority, went
        in front) hold blocks it needs. vLLM would schedule nothing, step after step; here they
        give their blocks back and will compute their prompts locally (counted as a preemption
        by recompute), so the head starts. True when any did."""
        engine = self.engine
        held = sorted(i for i in self.loaded if engine.kv.num_blocks.item(i) > 0)
        for i in held:
            computed = engine.num_computed_tokens.item(i)
            engine.kv.free(i)
            engine.num_computed_tokens[i] = 0
            engine.num_recomputed_tokens += computed
            engine.recomputed_tokens[i] += computed
            engine.num_preemptions[i] += 1
            engine.num_preemptions_total += 1
            engine.hooks.on_preempt(i, engine.t)
        self.loaded.clear()
        return bool(held)
