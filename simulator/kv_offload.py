"""vLLM v1's native CPU KV offloading (``--kv-offloading-size`` GiB, ``--kv-offloading-backend
native``): a tier of KV blocks in host memory behind the GPU's prefix cache.

What vLLM 0.32.0 does, and what is modelled (source paths under ``vllm/``):

* ``kv_offloading_size`` GiB (the total over the tensor-parallel ranks, ``config/cache.py:266``)
  becomes the ``OffloadingConnector``'s ``cpu_bytes_to_use`` (``config/vllm.py:1115-1123``);
  the tier holds ``cpu_bytes_to_use // round_up(block bytes x world size, page size)`` blocks
  (``v1/kv_offload/cpu/spec.py:107-119``; ``blocks_per_chunk`` is 1 by default,
  ``distributed/kv_transfer/kv_connector/v1/offloading/config.py:98``). Here one prefix hash
  (``prefix_block_tokens``) is ``blocks_per_hash`` blocks, stored and evicted together.
* **Stores**: every full prompt block a step computes is stored to CPU as it is computed
  (``_build_store_jobs``, ``offloading/scheduler.py:1570``: up to the tokens computed after the
  batch), prompt blocks only (``offload_prompt_only`` defaults to True,
  ``v1/kv_offload/base.py:620``). The copies run on their own CUDA streams
  (``v1/kv_offload/cpu/gpu_worker.py:355``) and device-to-host, the other direction of the
  link from loads: they add nothing to a step's time. A block already in CPU is not stored
  again. A store that needs more room than the tier can evict is dropped
  (``v1/kv_offload/cpu/manager.py:311-317``).
* **Eviction**: least recently used first (``v1/kv_offload/cpu/policies/lru.py``, the default
  ``eviction_policy``). vLLM ranks a block by when it was stored and refreshes a request's
  blocks, its first block most recent, when the request finishes (``on_request_finished``);
  here a request's blocks are refreshed, first block most recent, when it stores or loads them.
* **Loads**: a waiting request whose prefix continues in CPU beyond its GPU prefix-cache hit
  (``get_num_new_matched_tokens``, ``offloading/scheduler.py:1039``; asynchronous whenever
  there is a hit, ``:1097``) is given the blocks of both hits and waits, out of the queue,
  while the CPU part is copied in (``WAITING_FOR_REMOTE_KVS``,
  ``v1/core/sched/scheduler.py:1320-1335``); the scheduler goes on with the requests behind
  it. The copy starts as the step that admitted it ends (the worker submits it after launching
  that step's forward, ``v1/worker/kv_connector_model_runner_mixin.py:81-90``, on a stream
  that waits for the compute stream and the previous copy,
  ``v1/kv_offload/cpu/gpu_worker.py:665-670``), at once when that step runs no model. A copy
  takes ``bytes / bandwidth + latency``: the bytes of the CPU hit on one GPU (each
  tensor-parallel rank copies its shard over its own link), at the GPU's host-link bandwidth
  times :data:`H2D_EFFICIENCY`, one copy after another on the link, plus
  :data:`TRANSFER_LATENCY_S`. When the engine has noticed the copy's end
  (:class:`kvbudget.simulator.remote_kv.LoadNotices`: the next step's poll, its output, the
  next schedule; every 1 ms while no model runs) the request goes back to the front of the
  queue (vLLM drains the requests holding KV blocks first) with those tokens computed, and
  prefills only the rest. The loaded blocks join the GPU prefix cache with the request's first
  prefill step.
* **Preempted requests**: vLLM v1 preempts by recompute; a preempted request's prompt blocks
  were stored as they were computed, so on resume its lookup finds them in CPU (those not
  evicted meanwhile) like any other request's. Its output blocks are not stored
  (``offload_prompt_only``) and are computed again.

Not modelled: the connector's ``store_threshold`` and ARC policy (both off by default), pinning
of blocks in flight (copies are short beside a block's time in the tier), the LMCache backend.
"""

from __future__ import annotations

import math
import mmap
from collections import OrderedDict
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.simulator.engine import Engine, EngineHooks
from kvbudget.simulator.remote_kv import LoadNotices
from kvbudget.simulator.sim_config import ReplicaSetup

GIB = 1024**3

H2D_EFFICIENCY = 0.70
"""Fraction of the host link's per-direction bandwidth (``GPUSpec.pcie_bandwidth_bytes_s``) a
CPU-to-GPU KV copy reaches: the project's PCIe ``link_efficiency`` (docs/fidelity.md), between
the measured host-to-device 35 GB/s of 64 on H100 (NVIDIA/nvbandwidth#24) and 54 GB/s of 64 on
H20 with vLLM 0.18.1's offloading (gahow/agentic-kvc, commit 837df6bc, ``pcie_transfer.py``)."""

TRANSFER_LATENCY_S = 6e-6
"""Fixed cost of one host-to-device copy: 6 us for a small pinned copy (rocm-bandwidth-test,
ROCm/hip#3809); PCIe round trips are single microseconds."""


def round_up(n: int, k: int) -> int:
    return -(-n // k) * k


class CpuKVTier:
    """The CPU tier's blocks, as prefix hashes in least-recently-used order, and its figures."""

    def __init__(self, num_hashes: int, hash_bytes: int) -> None:
        if num_hashes < 0:
            raise ValueError(f"num_hashes must be >= 0, got {num_hashes!r}")
        self.num_hashes = num_hashes
        self.hash_bytes = hash_bytes  # bytes of one hash's blocks on one GPU
        self._lru: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.num_stored = 0  # hashes stored (copied to CPU)
        self.num_evicted = 0
        self.num_dropped = 0  # hashes of stores dropped for lack of room

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, h: int) -> bool:
        return h in self._lru

    def match(self, hashes: list[int]) -> int:
        """How many leading ``hashes`` are in the tier."""
        lru = self._lru
        for k, h in enumerate(hashes):
            if h not in lru:
                return k
        return len(hashes)

    def touch(self, hashes: list[int]) -> None:
        """Make ``hashes`` (in the tier) the most recently used, the first one most."""
        lru = self._lru
        for h in reversed(hashes):
            lru.move_to_end(h)

    def store(self, hashes: list[int]) -> None:
        """Store the computed blocks of ``hashes`` (a request's, in prompt order): those in the
        tier are refreshed; the others are copied in, the first most recent, evicting the
        least recently used blocks of other prompts, or dropped all together when there is
        no room for them."""
        lru = self._lru
        new: list[int] = []  # (last first)
        for h in reversed(hashes):
            if h in lru:
                lru.move_to_end(h)
            else:
                new.append(h)
        if not new:
            return
        need = len(new) - (self.num_hashes - len(lru))
        if need > len(lru) - (len(hashes) - len(new)):  # the offer's own are not evicted
            self.num_dropped += len(new)
            return
        for _ in range(need):
            lru.popitem(last=False)
        self.num_evicted += max(need, 0)
        for h in new:
            lru[h] = None
        self.num_stored += len(new)


class OffloadEngine(Engine):
    """vLLM v1 with the native CPU offloading tier (see the module docstring)."""

    runs_past_external = False  # a load ends unannounced: a decode run ends at its step

    def __init__(self, *args: Any, kv_bytes_per_token: int, load_bandwidth_bytes_s: float,
                 tensor_parallel_size: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        prefix = self.kv.prefix
        if prefix is None:
            raise ValueError("kv_offloading_size needs prefix caching over a workload with "
                             "prompt-block hashes (Mooncake hash_ids): the CPU tier is keyed by "
                             "them")
        if kv_bytes_per_token < 1 or not load_bandwidth_bytes_s > 0:
            raise ValueError("offloading needs kv_bytes_per_token >= 1 and a host link > 0")
        size = self.config.kv_offloading_size
        assert size is not None
        block_bytes = kv_bytes_per_token * self.block_size  # one GPU's share of a block
        # vLLM: cpu_bytes_to_use // round_up(block bytes x world size, page size)
        num_blocks = int(size * GIB) // round_up(block_bytes * tensor_parallel_size, mmap.PAGESIZE)
        self.num_cpu_blocks = num_blocks
        self.tier = CpuKVTier(num_blocks // prefix.blocks_per_hash,
                              block_bytes * prefix.blocks_per_hash)
        prefix.on_computed = self._store
        # the tier's hashes after each change, and when (a step's end): the timeline's samples
        self._cpu_change_s: list[float] = []
        self._cpu_change_n: list[int] = []
        self.load_bandwidth_bytes_s = float(load_bandwidth_bytes_s)
        # loads admitted by the step being scheduled, whose copies start as its forward ends:
        # (row, bytes, admitted at)
        self._unstarted: list[tuple[int, int, float]] = []
        # loads copying or copied, until their requests are schedulable (remote_kv.LoadNotices)
        self._notices = LoadNotices(bool(self.config.async_scheduling))
        self._link_free_s = 0.0  # when the host-to-device link has finished its copies
        # blocks the requests loading (or loaded, not started) still need for their prompts
        self._reserved: dict[int, int] = {}
        self._reserved_total = 0
        self._refuse_head = False  # the waiting head's load did not fit: refuse it
        self._promoted: list[int] = []  # loaded, back in waiting, not started: in that order
        self.num_loads = 0
        self.cpu_hit_tokens = 0
        self.load_bytes = 0
        self._load_s: list[float] = []
        outer = self.hooks
        # a skip-ahead decode run ends with the step in progress when a load ends
        self.hooks = EngineHooks(outer.on_finish, outer.on_preempt,
                                 lambda: min(outer.next_external_s(), self._next_ready_s()),
                                 outer.gateway_state)

    def _store(self, hashes: list[int]) -> None:
        tier = self.tier
        before = len(tier)
        tier.store(hashes)
        if len(tier) != before:
            self._cpu_change_s.append(self.t)
            self._cpu_change_n.append(len(tier))

    def cpu_timeline(self, times: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.int64]]:
        """The timeline's CPU columns at the sample ``times`` (``OPTIONAL_TIMELINE_COLUMNS``):
        the tier's tokens as the step in progress then was scheduled (stores happen as steps
        end, so a change at a sample's time is in it), and its size in tokens."""
        idx = np.searchsorted(np.asarray(self._cpu_change_s, np.float64), times, side="right")
        counts = np.concatenate(([0], np.asarray(self._cpu_change_n, np.int64)))[idx]
        tokens_per_hash = self._blocks_per_hash() * self.block_size
        return {"cpu_kv_used_tokens": counts * tokens_per_hash,
                "cpu_kv_capacity_tokens": np.full(len(times), self.num_cpu_blocks * self.block_size,
                                                  np.int64)}

    def _next_ready_s(self) -> float:
        """Where a skip-ahead decode run ends: with the step in progress as a copy ends or a
        loaded request becomes schedulable; at once (one step) while a copy waits to start or
        a request for a step count (``LoadNotices.next_s``)."""
        if self._unstarted:
            return self.t
        return self._notices.next_s(self.t)

    def _start_copies(self) -> None:
        """The step that admitted the loads in ``_unstarted`` has ended at ``t`` (or ran no
        model): their copies start, one after another on the host link. vLLM starts an
        asynchronous load after the step's forward is launched
        (``v1/worker/kv_connector_model_runner_mixin.py:81-90``) on a stream that first waits
        for the compute stream and for the previous copy
        (``v1/kv_offload/cpu/gpu_worker.py:665-670``): the copy begins as that step's forward
        ends, or at once when it has none."""
        for i, nbytes, admitted in self._unstarted:
            start = max(self.t, self._link_free_s)
            self._link_free_s = start + nbytes / self.load_bandwidth_bytes_s
            end = self._link_free_s + TRANSFER_LATENCY_S
            self._notices.add(i, end)
            self._load_s.append(end - admitted)
        self._unstarted.clear()

    # --- hooks ------------------------------------------------------------------------------
    def _load_waiting(self, i: int) -> bool:
        kv = self.kv
        prefix, hit = kv.prefix, kv.pending_hit
        assert prefix is not None and hit is not None
        candidates = prefix.candidates(i, self.num_tokens.item(i))
        on_gpu = len(hit)
        on_cpu = self.tier.match(candidates[on_gpu:])
        if not on_cpu:
            return False
        tokens = (on_gpu + on_cpu) * prefix.hash_tokens
        # vLLM admits a load only beside the blocks the in-flight prefills still need to
        # finish their prompts (reserved_blocks, v1/core/sched/scheduler.py:1242-1251): here
        # the requests loading or loaded and not started
        if self.allocate_start(i, tokens, reserve=self.watermark_blocks + self._reserved_total):
            self._refuse_head = True  # no room: vLLM stops the waiting loop there
            return False
        self.num_computed_tokens[i] = tokens
        remaining = -(-self.num_tokens.item(i) // self.block_size) - self.kv.num_blocks.item(i)
        self._reserved[i] = remaining
        self._reserved_total += remaining
        self.waiting.pop_request()
        loaded = candidates[on_gpu:on_gpu + on_cpu]
        self.tier.touch(loaded)
        nbytes = on_cpu * self.tier.hash_bytes
        self._unstarted.append((i, nbytes, self.t))  # (_start_copies)
        self.num_loads += 1
        self.cpu_hit_tokens += on_cpu * prefix.hash_tokens
        self.load_bytes += nbytes
        return True

    def _admit_waiting(self, i: int, n_new: int) -> str:
        if self._refuse_head:
            self._refuse_head = False
            return "kv"
        return super()._admit_waiting(i, n_new)

    def _start_running(self, i: int) -> None:
        super()._start_running(i)
        if self._reserved and i in self._reserved:
            self._reserved_total -= self._reserved.pop(i)
            self._promoted.remove(i)

    def _promote_loads(self) -> bool:
        """Put the requests schedulable at this step boundary (``LoadNotices.ready``) back at
        the front of ``waiting`` (the earliest copy first); whether there were any."""
        rows = self._notices.ready(self.t, self.num_steps)
        if not rows:
            return False
        for i in reversed(rows):
            self.waiting.prepend_request(i)
        self._promoted.extend(rows)
        return True

    def _on_steps(self, preempted: bool, k: int) -> None:
        super()._on_steps(preempted, k)
        if self._unstarted:
            self._start_copies()  # the step that admitted them has ended

    def _on_schedule_waiting(self) -> None:
        super()._on_schedule_waiting()
        if self._notices:
            self._promote_loads()
        if self._promoted:
            # vLLM drains the waiting requests holding KV blocks first (kv_holding_waiting,
            # v1/core/sched/scheduler.py:914-917): ahead of those preempted since
            waiting = self.waiting
            for i in reversed(self._promoted):
                waiting.remove_request(i)
                waiting.prepend_request(i)

    def _held_until_s(self) -> float:
        held = super()._held_until_s()
        if self._unstarted:
            self._start_copies()  # no model ran: the copies start now
        if not self._notices:
            return held
        if self._promote_loads():
            return self.t
        # no model runs: the engine polls its loads every IDLE_POLL_S
        return min(held, self._notices.idle_until_s(self.t, self.num_steps))

    def _jump_limit(self, k_max: int, alloc_cum: Any) -> int:
        if self._notices or self._unstarted:
            return 1  # a load that ends may let a request start beside a refused head
        limit: int = super()._jump_limit(k_max, alloc_cum)
        return limit

    def _on_abort(self, i: int) -> None:
        super()._on_abort(i)
        if i in self._reserved:
            self._reserved_total -= self._reserved.pop(i)
            if i in self._promoted:
                self._promoted.remove(i)
        # aborted while its KV loads: back in waiting, where the abort finds it
        if i in self._notices:
            self._notices.cancel(i)
            self.waiting.prepend_request(i)
        for k, (row, _, _) in enumerate(self._unstarted):
            if row == i:
                del self._unstarted[k]
                self.waiting.prepend_request(i)
                break

    # --- the executor's figures: a request loading its KV waits -----------------------------
    def num_waiting(self) -> int:
        return super().num_waiting() + len(self._notices) + len(self._unstarted)

    def unfinished_rows(self) -> list[int]:
        return [*super().unfinished_rows(), *self._notices.rows(),
                *(i for i, _, _ in self._unstarted)]

    def num_unfinished(self) -> int:
        return super().num_unfinished() + len(self._notices) + len(self._unstarted)

    def stats(self) -> dict[str, object]:
        tier = self.tier
        return {
            **super().stats(),
            "kv_offloading": {
                "kv_offloading_size_gib": self.config.kv_offloading_size,
                "backend": self.config.kv_offloading_backend,
                "cpu_blocks": self.num_cpu_blocks,
                "cpu_blocks_used": len(tier) * self._blocks_per_hash(),
                "stored_blocks": tier.num_stored * self._blocks_per_hash(),
                "stored_bytes_per_gpu": tier.num_stored * tier.hash_bytes,
                "evicted_blocks": tier.num_evicted * self._blocks_per_hash(),
                "dropped_store_blocks": tier.num_dropped * self._blocks_per_hash(),
                "num_loads": self.num_loads,
                "cpu_hit_tokens": self.cpu_hit_tokens,
                "load_bytes_per_gpu": self.load_bytes,
                "load_time_s": math.fsum(self._load_s),
                "h2d_bandwidth_bytes_s": self.load_bandwidth_bytes_s,
                "assumed": (f"loads at {H2D_EFFICIENCY:g} of the GPU's host link plus "
                            f"{TRANSFER_LATENCY_S * 1e6:g} us each, one at a time; stores free "
                            "(their own stream, the other direction); prompt blocks only"),
            },
        }

    def _blocks_per_hash(self) -> int:
        prefix = self.kv.prefix
        assert prefix is not None
        return prefix.blocks_per_hash


def offload_arguments(setup: ReplicaSetup) -> dict[str, Any]:
    """:class:`OffloadEngine`'s arguments from a replica's setup: its KV bytes per token on one
    GPU and the GPU's host link; ``kv_offloading_size`` checked against the host memory of the
    replica's GPUs (``GPUSpec.host_memory_bytes``, where known)."""
    config = setup.engine
    tp = config.tensor_parallel_size
    config.check_offloading_fits(setup.gpu)  # (a fleet's replica: its own GPU)
    return {
        "kv_bytes_per_token": setup.model.kv_bytes_per_token(tp, config.kv_cache_dtype),
        "load_bandwidth_bytes_s": setup.gpu.pcie_bandwidth_bytes_s * H2D_EFFICIENCY,
        "tensor_parallel_size": tp,
    }
