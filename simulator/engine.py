"""A SimPy model of one vLLM (v1) serving engine: paged KV blocks, continuous batching, chunked
prefill, ``max_num_seqs``, ``max_num_batched_tokens`` and preemption by recompute.

Per-request state lives in numpy arrays indexed by the workload row, in vLLM's vocabulary:
``num_tokens`` (prompt plus generated tokens), ``num_computed_tokens`` (tokens whose KV is in the
cache), ``num_output_tokens``, ``num_blocks``. Each step mirrors ``Scheduler.schedule()`` of vLLM
v1: first the ``running`` requests in order, each getting ``min(num_tokens -
num_computed_tokens, token budget)`` new tokens if :meth:`Engine.allocate_slots` finds blocks
(otherwise the lowest-priority, latest-arriving running request is preempted: its blocks are
freed, its ``num_computed_tokens`` reset to 0 and it returns to the front of ``waiting``, so its
prompt and generated tokens are computed again); then, if nothing was preempted, ``waiting``
requests while the budget, ``max_num_seqs`` and the free blocks allow.

A step's duration comes from the :class:`~kvbudget.perf.cost_model.CostModel`. When every running
request is decoding and nothing else can change until a request finishes, a block allocation
could fail, or something arrives from outside, the engine computes that whole run of steps at
once (``skip_ahead``): the arithmetic is the same as stepping, so the results are identical.
Meanwhile the base engine keeps the decoding requests as a :class:`DecodeGroup` (base values
plus the group's step count, their context in all, when their blocks fill, when they finish),
so such a run costs the same however many requests decode.

Other engines (TGI, SGLang, TensorRT-LLM, vLLM with swap; ``kvbudget.simulator.engine_variants``) are
subclasses that override a few small hooks: :meth:`Engine._admit_waiting` (may a waiting request
start, and which blocks does it take), :meth:`Engine._preempt` and :meth:`Engine._victim` (what
preemption does and to whom), :meth:`Engine._schedule_running_slow` (what happens when running
requests run out of blocks), :meth:`Engine._jump_limit` (how long a decode run keeps a refused
waiting request refused), :meth:`Engine._on_steps` and :meth:`Engine._on_idle`. Automatic
prefix caching (``enable_prefix_caching``) shares the KV blocks of prompt prefixes with equal
hashes (Mooncake ``hash_ids``) and evicts unreferenced ones least recently used first.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from kvbudget.perf.cost_model import CostModel
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.prefix_cache import PrefixCache
from kvbudget.simulator.request_queue import make_request_queue

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
# a decode run's per-step values: arrays, or lists for a short run of the decode group
Floats = FloatArray | list[float]
Ints = IntArray | list[int]
MAX_JUMP_STEPS = 4096
# The loop's cost is the number of small numpy calls it makes, not their size: a reduction
# (sum, min) over a few running requests costs ~1 us in numpy's reduction machinery but a few
# hundred ns as a Python sum over ``tolist()``, which is exact for int64 (same value). Arrays
# longer than this go through numpy.
SMALL_N = 48
# Decode runs of at most this many steps get their step times from one scalar step_time call
# per step (~0.4 us each) rather than array arithmetic (~8 us whatever the length).
SMALL_K = 20
# The decode group plans runs of up to this many steps in Python numbers (blocks and KV terms
# too, ~0.7 us a step), longer ones with arrays (~20 us however long): measured crossover.
GROUP_SMALL_K = 48


def _isum(a: IntArray) -> int:
    """``int(a.sum())``, cheaper for small ``a``."""
    return sum(a.tolist()) if len(a) <= SMALL_N else int(np.add.reduce(a))


def _imin(a: IntArray) -> int:
    """``int(a.min())``, cheaper for small ``a``."""
    return min(a.tolist()) if len(a) <= SMALL_N else int(np.minimum.reduce(a))


def _imax(a: IntArray) -> int:
    """``int(a.max())``, cheaper for small ``a``."""
    return max(a.tolist()) if len(a) <= SMALL_N else int(np.maximum.reduce(a))


def _concat(arrays: list[FloatArray]) -> list[float]:
    """The elements of ``arrays``, in order, as one list (one ``tolist`` for them all)."""
    return np.concatenate(arrays).tolist() if arrays else []


@dataclass(slots=True)
class RunningPrefix:
    """The requests the running loop reaches, in order, with the token budget it hands out:
    ``rows``, their ``new`` tokens, ``computed`` (``num_computed_tokens`` before the step),
    ``blocks`` (``num_blocks`` now), ``want`` (the blocks they need for the step),
    ``num_new`` (the new tokens in all), ``num_need`` (the tokens they have left to
    compute, in all), ``decoding`` (whether every one of them is
    decoding, so gets one token: see ``Engine._all_decode``) and ``num_extra`` (the new
    blocks in all, ``sum(want - blocks)``, when counted already)."""

    rows: IntArray
    new: IntArray
    computed: IntArray
    blocks: IntArray
    want: IntArray
    num_new: int
    num_need: int
    decoding: bool = False
    num_extra: int | None = None  # sum(want - blocks), when counted already


@dataclass(slots=True)
class DecodeRows:
    """A pure-decode step of every running request, gathered once for the decode run planned
    from it: ``computed`` and ``output`` are the requests' ``num_computed_tokens`` and
    ``num_output_tokens`` before the step, ``blocks`` their ``num_blocks`` after the step's
    allocation."""

    computed: IntArray
    blocks: IntArray
    output: IntArray


@dataclass(slots=True)
class DecodeGroup:
    """The running requests of a base :class:`Engine` while every one of them is decoding,
    kept in O(1) per step: a member's ``num_computed_tokens``, ``num_output_tokens`` and
    ``num_tokens`` are its arrays' values plus ``step - members[row]`` (the decode steps the
    group took since the row joined), and its ``num_blocks`` is ``ceil(num_computed_tokens /
    block_size)``; the arrays are written when it leaves (:meth:`Engine._group_leave`) or the
    group is dissolved.

    ``context`` is the members' ``num_computed_tokens`` in all; ``hist[x]`` counts the members
    whose ``(num_computed_tokens - step) % block_size`` is ``x`` (they take a new block in a
    step scheduled when ``step % block_size == -x % block_size``: their blocks are full);
    ``finish`` is a heap of ``(step at which the member has its output, join order, row)``
    (join order is running order: see :meth:`Engine._group_join`)."""

    hist: list[int]
    finish: list[tuple[int, int, int]]
    members: dict[int, int]  # row -> step at which it joined
    step: int = 0
    context: int = 0
    size: int = 0
    num_joined: int = 0


@dataclass(slots=True)
class EngineHooks:
    """How the engine tells its executor what happened (all optional)."""

    on_finish: Callable[[int, float], None]
    on_preempt: Callable[[int, float], None]
    next_external_s: Callable[[], float]
    gateway_state: Callable[[], tuple[int, int]]


class Engine:
    """One engine replica. Requests are workload row indices ``i``."""

    def __init__(
        self,
        env: simpy.Environment,
        config: EngineConfig,
        cost_model: CostModel,
        *,
        num_gpu_blocks: int,
        prompt_tokens: IntArray,
        output_tokens: IntArray,
        priority: IntArray,
        arrival_s: FloatArray,
        hooks: EngineHooks,
        timeline_period_s: float = 1.0,
        max_output_tokens: IntArray | None = None,
        prefix_hashes: IntArray | None = None,
        prefix_offsets: IntArray | None = None,
        prefix_block_tokens: int = 512,
    ) -> None:
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_gpu_blocks!r}")
        if not 0 < timeline_period_s < float("inf"):
            raise ValueError(f"timeline_period_s must be > 0 and finite, got {timeline_period_s!r}")
        self.env = env
        self.config = config
        self.cost = cost_model
        self.hooks = hooks
        self.block_size = config.block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.capacity_tokens = num_gpu_blocks * config.block_size
        cap = self.capacity_tokens
        self.max_model_len = cap if config.max_model_len is None else min(cap, config.max_model_len)
        if (not config.enable_chunked_prefill and config.name in ("vllm", "vllm-swap")
                and config.max_num_batched_tokens < self.max_model_len):
            # vLLM's SchedulerConfig refuses this at start-up: without chunking a prompt is
            # prefilled in one step, so one longer than a step's budget could never run
            raise ValueError(
                f"enable_chunked_prefill = false needs max_num_batched_tokens >= max_model_len, "
                f"got {config.max_num_batched_tokens} < {self.max_model_len} (vLLM refuses to "
                "start: a longer prompt could never be scheduled); raise max_num_batched_tokens "
                "or set max_model_len")
        self.watermark_blocks = int(config.watermark * num_gpu_blocks)
        self._admit_blocks = num_gpu_blocks - self.watermark_blocks
        n = len(prompt_tokens)
        self.prompt_tokens = prompt_tokens
        self.target_output = output_tokens
        self.priority = (
            priority if config.scheduling_policy == "priority" else np.zeros(n, np.int64)
        )
        self.arrival_s = arrival_s
        self.max_output_tokens = output_tokens if max_output_tokens is None else max_output_tokens
        # per-request state (vLLM names)
        self.num_tokens = np.zeros(n, np.int64)
        self.num_computed_tokens = np.zeros(n, np.int64)
        self.num_output_tokens = np.zeros(n, np.int64)
        self.num_blocks = np.zeros(n, np.int64)
        self.first_token_s = np.full(n, np.nan)
        self.finished_s = np.full(n, np.nan)
        self.num_preemptions = np.zeros(n, np.int64)
        self.num_recomputed_tokens = 0
        self.recomputed_tokens = np.zeros(n, np.int64)  # per request: KV computed then discarded
        self.num_preemptions_total = 0
        # queues
        # ``running`` changes only through _start_running and _stop_running, which keep the
        # two facts derived from it below true (see there)
        self.running: list[int] = []
        self._running_arr: IntArray | None = None  # running as an array (a _running_buf view)
        self._running_buf: IntArray = np.zeros(0, np.int64)
        self._all_decode = False  # True only while every running request is decoding
        # one new token each, for a running loop of decoding requests (read-only: it is shared)
        self._ones = np.ones(min(config.max_num_seqs, config.max_num_batched_tokens), np.int64)
        self._ones.flags.writeable = False
        self.waiting = make_request_queue(config.scheduling_policy, self.priority, arrival_s)
        self._in_engine = np.zeros(n, np.bool_)
        self.num_free_blocks = num_gpu_blocks
        self._step_extra_s = 0.0  # seconds a hook adds to the current step (swap transfers)
        self._fast: RunningPrefix | None = None  # this step's running loop, when vectorised
        # this step's waiting requests (row, new tokens), when the rows before them are every
        # running request, all decoding (or none): see _features
        self._tail: list[tuple[int, int]] | None = None
        self._hol_blocked = False  # this step's waiting head was refused for lack of KV
        self._head_refusal = ""  # why the waiting loop stopped: "", seqs, budget, kv, policy
        self._hol_terms: list[FloatArray] = []
        self._hol_scalar_terms: list[float] = []
        # automatic prefix caching (vLLM --enable-prefix-caching) over the workload's hashes
        self._cache: PrefixCache | None = None
        self._evictable = 0  # blocks of cached prefixes no request uses (free, but cached)
        self._pending_hit: list[int] | None = None  # the prefix hit of the waiting head
        if config.enable_prefix_caching and prefix_hashes is not None:
            if prefix_offsets is None or prefix_block_tokens % config.block_size:
                raise ValueError(
                    f"prefix caching needs prefix_offsets and prefix_block_tokens "
                    f"({prefix_block_tokens}) a multiple of block_size ({config.block_size})"
                )
            self._cache = PrefixCache(prefix_block_tokens // config.block_size)
            self._hash_tokens = prefix_block_tokens
            self._hashes = prefix_hashes
            self._hash_lo = prefix_offsets[:-1]
            # full blocks only: a trailing partial block is never cached (as vLLM)
            self._num_full_hashes = np.minimum(
                prefix_offsets[1:] - prefix_offsets[:-1], prompt_tokens // prefix_block_tokens
            )
            self._held: dict[int, list[int]] = {}
            self._next_hash = np.zeros(n, np.int64)
            self.num_shared_blocks = np.zeros(n, np.int64)
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0
        # the decode group (see DecodeGroup): the base engine only (presets read running
        # requests' arrays in their hooks), without prefix caching (shared blocks), and with
        # skip_ahead, so that stepping one by one (skip_ahead=false) stays the reference
        self._lazy = type(self) is Engine and self._cache is None and config.skip_ahead
        # exists only while its steps run: any other step dissolves it first (see _schedule)
        self._group: DecodeGroup | None = None
        self._aborts: list[int] = []
        self._deferred_adds: list[int] = []
        self._busy = False
        self._jump_ends: Floats | None = None  # step ends of the decode run in progress
        self._run_rows: IntArray | None = None  # its rows (the run is committed at its end)
        self._run_ends: Floats | None = None  # its step ends, kept when it is cut short
        self._jump_keep = 0
        self._step_index = np.arange(MAX_JUMP_STEPS + config.block_size, dtype=np.int64)  # j
        self._wake: simpy.Event | None = None
        self.t = 0.0
        self.num_steps = 0
        # timeline and exact time integrals
        self.timeline_period_s = timeline_period_s
        self._next_sample_idx = 0
        self.timeline: list[tuple[float, int, int, int, int, int, int]] = []
        self._kv_terms: list[FloatArray] = []
        self._kv_scalar_terms: list[float] = []
        self.process = env.process(self._run())

    # --- executor interface -----------------------------------------------------------------
    def add_request(self, i: int) -> None:
        """Queue row ``i`` as a fresh request (its prompt only; nothing computed)."""
        if self._in_engine[i]:
            # re-admitted while its abort waits for the step boundary: add it after the abort
            self._deferred_adds.append(i)
            return
        self.num_tokens[i] = self.prompt_tokens[i]
        self.num_computed_tokens[i] = 0
        self.num_output_tokens[i] = 0
        self.num_blocks[i] = 0
        self._in_engine[i] = True
        self.waiting.add_request(i)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        elif self._busy:
            self._interrupt_jump()

    def abort_request(self, i: int) -> None:
        """Remove row ``i`` (a gateway revocation). Applied at the next step boundary, as vLLM
        processes aborts between steps; at once when the engine is idle."""
        if not self._in_engine[i]:
            return
        if self._busy:
            self._aborts.append(i)
            self._interrupt_jump()
        else:
            self._abort_now(i)

    def fits(self, i: int) -> bool:
        """Whether the request could ever run here: vLLM's max_model_len check, and a prompt
        whose blocks fit beside the watermark (vLLM v0's ``AllocStatus.NEVER``: such a request
        is refused, never scheduled)."""
        prompt = int(self.prompt_tokens[i])
        return (prompt + int(self.target_output[i]) <= self.max_model_len
                and -(-prompt // self.block_size) <= self._admit_blocks)

    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_used_blocks(self) -> int:
        """Blocks some request references (cached prefixes nobody uses count as free)."""
        return self.num_gpu_blocks - self.num_free_blocks - self._evictable

    @property
    def kv_used_tokens(self) -> int:
        return self.num_used_blocks * self.block_size

    def output_tokens_of(self, i: int) -> int:
        """Row ``i``'s output tokens as of the last step that has ended: a decode run in
        progress is committed at its end, so the steps of it already run are added."""
        out = int(self.num_output_tokens[i])
        g = self._group
        if g is not None and i in g.members:
            out += g.step - g.members[i]
            in_run = True  # a group run's rows are the group's
        else:
            rows = self._run_rows
            in_run = rows is not None and bool(np.count_nonzero(rows == i))
        ends = self._run_ends
        if ends is not None and in_run:
            out += bisect.bisect_left(ends, self.env.now)
        return out

    def output_tokens(self) -> IntArray:
        """Every row's output tokens as of the last step that has ended (the arrays, with
        the steps of the decode group or decode run in progress added: see
        :meth:`output_tokens_of`)."""
        out = self.num_output_tokens.copy()
        g = self._group
        rows = [] if g is None else list(g.members)
        if self._run_rows is not None:
            rows += self._run_rows.tolist()
        for i in rows:
            out[i] = self.output_tokens_of(i)
        return out

    @property
    def idle(self) -> bool:
        """Nothing running, waiting or in a step."""
        return not self.running and self.num_waiting() == 0 and not self._busy

    @property
    def prefix_caching(self) -> bool:
        """Whether automatic prefix caching is on (and the workload has prefix hashes)."""
        return self._cache is not None

    def head_of_line_blocked_s(self) -> float:
        """Exact total of the steps during which the waiting head could not start for lack of
        KV memory, free or (TGI, TensorRT-LLM, SGLang) reserved or estimated: every engine here
        stops at the first waiting request that does not fit, so it blocks those behind it."""
        return math.fsum(self._hol_scalar_terms + _concat(self._hol_terms))

    def stats(self) -> dict[str, object]:
        """Engine figures for the summary's ``engine`` block."""
        queries = self.prefix_query_tokens
        return {
            "engine": self.config.name,
            "head_of_line_blocked_s": self.head_of_line_blocked_s(),
            "prefix_caching": self.prefix_caching,
            "prefix_cache_query_tokens": queries,
            "prefix_cache_hit_tokens": self.prefix_hit_tokens,
            "prefix_cache_hit_rate": self.prefix_hit_tokens / queries if queries else None,
        }

    def kv_token_seconds(self) -> float:
        """Exact integral of KV tokens in use over time (blocks x block_size x seconds)."""
        return math.fsum(self.kv_token_second_terms())

    def kv_token_second_terms(self) -> list[float]:
        """The terms of :meth:`kv_token_seconds`: KV tokens in use times seconds, per step."""
        return self._kv_scalar_terms + _concat(self._kv_terms)

    def _abort_now(self, i: int) -> None:
        if not self._in_engine[i]:
            return
        if self._group is not None and i in self._group.members:
            self._group_dissolve(scheduled=False)  # between steps (aborts wait for their end)
        if i in self.running:
            self._stop_running([i])
        else:
            self.waiting.remove_request(i)
        self._free(i)
        self._in_engine[i] = False

    # --- KV blocks ------------------------------------------------------------------------
    def allocate_slots(self, i: int, num_new_tokens: int, *, reserve: int = 0) -> bool:
        """Blocks for ``num_computed_tokens + num_new_tokens`` tokens; False when they do not
        fit (keeping ``reserve`` blocks free). vLLM returns None there."""
        need = -(-(int(self.num_computed_tokens[i]) + num_new_tokens) // self.block_size)
        extra = need - int(self.num_blocks[i])
        if extra <= 0:
            return True
        if extra > self.num_free_blocks + self._evictable - reserve:
            return False
        self.num_blocks[i] = need
        self._take(extra)
        return True

    def _free(self, i: int) -> None:
        if self._cache is not None:
            shared = int(self.num_shared_blocks[i])
            self.num_free_blocks += int(self.num_blocks[i]) - shared
            self.num_blocks[i] = 0
            held = self._held.pop(i, None)
            if held:
                self._evictable += self._cache.release(held)
            self.num_shared_blocks[i] = 0
            self._next_hash[i] = 0
            return
        self.num_free_blocks += int(self.num_blocks[i])
        self.num_blocks[i] = 0

    def _take(self, blocks: int) -> None:
        """Take ``blocks`` free blocks, evicting cached prefixes (LRU) when needed; the caller
        has checked ``blocks <= num_free_blocks + _evictable``."""
        if blocks > self.num_free_blocks:
            assert self._cache is not None
            freed = self._cache.evict(blocks - self.num_free_blocks)
            self._evictable -= freed
            self.num_free_blocks += freed
        self.num_free_blocks -= blocks

    def _preempt(self, i: int) -> None:
        """Preempt running request ``i`` by recompute (vLLM v1): free its blocks, forget its
        computed tokens and put it back at the front of ``waiting``."""
        self._stop_running([i])
        self._free(i)
        self.num_recomputed_tokens += int(self.num_computed_tokens[i])
        self.recomputed_tokens[i] += int(self.num_computed_tokens[i])
        self.num_computed_tokens[i] = 0
        self.num_preemptions[i] += 1
        self.num_preemptions_total += 1
        self.waiting.prepend_request(i)
        self.hooks.on_preempt(i, self.t)

    def _victim(self) -> int:
        """Lowest priority (highest value), then latest arrival, then latest scheduled."""
        rows = self._running_rows()
        if self.config.scheduling_policy != "priority":
            # every priority is 0: the last of the latest arrivals (argmax finds the first
            # maximum, so it searches the rows in reverse)
            return int(rows[len(rows) - 1 - int(self.arrival_s[rows][::-1].argmax())])
        prio = self.priority[rows]
        cand = np.flatnonzero(prio == prio.max())
        arrival = self.arrival_s[rows[cand]]
        return int(rows[cand[np.flatnonzero(arrival == arrival.max())[-1]]])

    # --- hooks for other engines (no-ops here) -----------------------------------------------
    def _jump_limit(self, rows: IntArray, k_max: int, alloc_cum: IntArray) -> int:
        """How many steps of a planned decode run keep the waiting head refused. Step ``j``
        of the run (``0 <= j < k_max``) sees ``alloc_cum[j]`` more blocks taken than step 0 and
        every row ``j`` more tokens. vLLM's refusals (seats, token budget, blocks) cannot lift
        during a decode run, so the whole run stands."""
        return k_max

    def _on_steps(self, rows: IntArray, new: IntArray, preempted: bool, k: int) -> None:
        """Called before ``k`` scheduled steps of ``rows`` are committed."""

    def _on_idle(self) -> None:
        """Called when the engine has nothing running or waiting."""

    # --- one step -------------------------------------------------------------------------
    def _schedule(self) -> tuple[IntArray, IntArray, bool] | None:
        """vLLM v1 ``schedule()``: returns the scheduled rows, their new-token counts and
        whether any request was preempted; None when the running loop was the decode group's
        (:meth:`_schedule_group`: every running request, one token each, then ``_tail``)."""
        budget = self.config.max_num_batched_tokens
        self._step_extra_s = 0.0
        self._hol_blocked = False
        self._head_refusal = ""
        self._fast = None
        self._tail = None
        if self._group is None and self._lazy and self._all_decode and self.running:
            self._group_form()
        if self._group is not None:
            if self._schedule_group(budget):
                w_rows, w_new = self._schedule_waiting(budget - self._group.size)
                self._tail = list(zip(w_rows, w_new, strict=True)) if w_rows else []
                return None
            self._group_dissolve(scheduled=False)
        decoding = False
        fast = self._schedule_running_fast(budget)
        if fast is not None:
            sched, new = fast
            if self._fast is not None:
                budget -= self._fast.num_new
                decoding = self._fast.decoding
            else:
                decoding = True  # nothing running
            preempted = False
        else:
            sched_l, new_l, preempted, budget = self._schedule_running_slow(budget)
            sched = np.asarray(sched_l, dtype=np.int64)
            new = np.asarray(new_l, dtype=np.int64)
        if not preempted:
            w_rows, w_new = self._schedule_waiting(budget)
            if decoding:
                self._tail = list(zip(w_rows, w_new, strict=True)) if w_rows else []
            if w_rows:
                sched = np.concatenate((sched, w_rows))
                new = np.concatenate((new, w_new))
        return sched, new, preempted

    # --- the running set -----------------------------------------------------------------
    # ``running`` changes only here, so two facts derived from it stay true:
    # * ``_running_arr`` (when not None) is ``running`` as an array: a prefix view of
    #   ``_running_buf``. A request that starts is written just past that view, so views handed
    #   out before (a step's rows) never change; a removal drops the array (rebuilt, into a new
    #   buffer, on demand).
    # * ``_all_decode`` is True only while every running request is decoding: one token to
    #   compute (``num_tokens - num_computed_tokens == 1``) and ``num_output_tokens > 0``. A
    #   request that starts clears it; removals keep it; only :meth:`_commit_step` sets it,
    #   when it has sampled a token of every running request (so each has exactly one token to
    #   compute). Decode steps (:meth:`_commit_jump`) keep it: each adds one token to
    #   ``num_tokens`` and computes one. Nothing else changes a running request's tokens.
    def _start_running(self, i: int) -> None:
        self.running.append(i)
        self._all_decode = False
        arr = self._running_arr
        if arr is not None:
            n = len(arr)
            if n < len(self._running_buf) and n + 1 == len(self.running):
                self._running_buf[n] = i
                self._running_arr = self._running_buf[: n + 1]
            else:
                self._running_arr = None

    def _stop_running(self, rows: list[int]) -> None:
        if len(rows) <= 4:  # a few at a time: removing them one by one is cheaper
            for i in rows:
                self.running.remove(i)
        else:
            done = set(rows)
            self.running = [i for i in self.running if i not in done]
        self._running_arr = None

    def _running_rows(self) -> IntArray:
        arr = self._running_arr
        if arr is None or len(arr) != len(self.running):
            n = len(self.running)
            self._running_buf = np.empty(n + 16, np.int64)
            arr = self._running_arr = self._running_buf[:n]
            arr[:] = self.running
        return arr

    # --- the decode group (base engine: see DecodeGroup) -------------------------------------
    def _group_form(self) -> None:
        """Make the running requests, all decoding, the decode group."""
        rows = self._running_rows()
        bs = self.block_size
        computed = self.num_computed_tokens[rows]
        left = (self.target_output[rows] - self.num_output_tokens[rows]).tolist()
        running = self.running
        finish = list(zip(left, range(len(running)), running, strict=True))
        heapq.heapify(finish)
        self._group = DecodeGroup(
            hist=np.bincount(computed % bs, minlength=bs).tolist(),
            finish=finish,
            members=dict.fromkeys(running, 0),
            context=_isum(computed),
            size=len(running),
            num_joined=len(running),
        )

    def _group_join(self, g: DecodeGroup, i: int, computed: int, output: int) -> None:
        """Add row ``i``, sampled this step (decoding now), whose arrays hold ``computed`` and
        ``output``. Rows join in the order they started running (all at once when the group
        forms, or at the step that started them), so join order is running order."""
        step = g.step
        g.members[i] = step
        g.hist[(computed - step) % self.block_size] += 1
        g.context += computed
        g.size += 1
        heapq.heappush(g.finish, (int(self.target_output[i]) - output + step, g.num_joined, i))
        g.num_joined += 1

    def _group_leave(self, g: DecodeGroup, i: int) -> None:
        """Write member ``i``'s arrays and take it out of the group (the caller has taken its
        heap entry)."""
        joined = g.members.pop(i)
        d = g.step - joined
        c0 = int(self.num_computed_tokens[i])
        c = c0 + d
        self.num_computed_tokens[i] = c
        self.num_output_tokens[i] += d
        self.num_tokens[i] = c + 1
        self.num_blocks[i] = -(-c // self.block_size)
        g.hist[(c0 - joined) % self.block_size] -= 1
        g.context -= c
        g.size -= 1

    def _group_done(self, g: DecodeGroup) -> list[int]:
        """The members that have all their output now, out of the group, in running order."""
        finish = g.finish
        done: list[int] = []
        while finish and finish[0][0] <= g.step:
            i = heapq.heappop(finish)[2]
            self._group_leave(g, i)
            done.append(i)
        return done

    def _group_dissolve(self, *, scheduled: bool) -> None:
        """Write every member's arrays and end the group. ``scheduled``: the group's step is
        scheduled (its blocks taken), not committed."""
        g = self._group
        assert g is not None
        self._group = None
        m = len(g.members)
        if not m:
            return
        rows = np.fromiter(g.members.keys(), np.int64, m)
        d = g.step - np.fromiter(g.members.values(), np.int64, m)
        computed = self.num_computed_tokens[rows] + d
        self.num_computed_tokens[rows] = computed
        self.num_output_tokens[rows] += d
        self.num_tokens[rows] = computed + 1
        bs = self.block_size
        self.num_blocks[rows] = (computed + (bs - 1 + int(scheduled))) // bs

    def _schedule_group(self, budget: int) -> bool:
        """The running loop when the running requests are the decode group and every one gets
        its token and block (no preemption): one new token each. False, changing nothing,
        otherwise."""
        g = self._group
        assert g is not None
        n = len(self.running)
        if not (self._all_decode and n == g.size and n <= budget):
            return False
        total = g.hist[-g.step % self.block_size]  # the members whose blocks are full
        if total > self.num_free_blocks + self._evictable:
            return False
        if total:
            self._take(total)
        return True

    def _budget_prefix(self, rows: IntArray, budget: int) -> RunningPrefix:
        """The token budget handed out in ``rows``' order, as the running loop does: each gets
        ``min(num_tokens - num_computed_tokens, budget left)`` until the budget is spent."""
        n = len(rows)
        if self._all_decode and n <= budget and n <= len(self._ones):
            # every row is decoding (``rows`` are running): one new token each, so the
            # general case below with ``new == 1``, ``total == n``
            computed = self.num_computed_tokens[rows]
            blocks = self.num_blocks[rows]
            # a running request's blocks hold its computed tokens, so one more token takes a
            # new block only when they are full: ``max(ceil((computed + 1) / bs), blocks)``
            full = computed == blocks * self.block_size
            num_full = int(np.count_nonzero(full))
            want = blocks + full if num_full else blocks
            return RunningPrefix(
                rows, self._ones[:n], computed, blocks, want, n, n, True, num_full
            )
        computed = self.num_computed_tokens[rows]
        need = self.num_tokens[rows] - computed
        cum = np.add.accumulate(need)
        total = num_need = int(cum[-1])
        if total < budget:
            new = need  # every request gets all it needs, with budget to spare
        else:
            before = budget - (cum - need)  # budget left when each is reached
            m = int(np.count_nonzero(before > 0))  # budget only shrinks: a prefix is scheduled
            num_need = int(cum[m - 1]) if m else 0
            rows, computed, need, before = rows[:m], computed[:m], need[:m], before[:m]
            new = np.minimum(need, before)
            total = budget  # the last request reached takes what is left
        bs = self.block_size
        blocks = self.num_blocks[rows]
        want = np.maximum((computed + new + (bs - 1)) // bs, blocks)
        return RunningPrefix(rows, new, computed, blocks, want, total, num_need)

    def _schedule_running_fast(self, budget: int) -> tuple[IntArray, IntArray] | None:
        """The running loop when every allocation succeeds (no preemption), vectorised.
        Returns None, changing nothing, when some allocation would fail."""
        if not self.running:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        prefix = self._budget_prefix(self._running_rows(), budget)
        total = prefix.num_extra
        if total is None:
            total = _isum(prefix.want - prefix.blocks)
        if total > self.num_free_blocks + self._evictable:
            return None
        if total:
            self.num_blocks[prefix.rows] = prefix.want
            self._take(total)
        self._fast = prefix
        return prefix.rows, prefix.new

    def _schedule_running_slow(self, budget: int) -> tuple[list[int], list[int], bool, int]:
        """The running loop request by request, preempting when allocation fails."""
        sched: list[int] = []
        new: list[int] = []
        preempted = False
        idx = 0
        while idx < len(self.running) and budget > 0:
            ok_rows, ok_new = self._allocate_running_prefix(idx, budget)
            sched.extend(ok_rows)
            new.extend(ok_new)
            budget -= sum(ok_new)
            idx += len(ok_rows)
            if idx >= len(self.running) or budget <= 0:
                break
            # running[idx] does not fit: preempt until it does (or is preempted itself)
            i = self.running[idx]
            n_new = min(int(self.num_tokens[i] - self.num_computed_tokens[i]), budget)
            can = True
            while not self.allocate_slots(i, n_new):
                victim = self._victim()
                preempted = True
                if victim in sched:
                    k = sched.index(victim)
                    budget += new[k]
                    del sched[k], new[k]
                    idx -= 1
                self._preempt(victim)
                if victim == i:
                    can = False
                    break
            if not can:
                break
            sched.append(i)
            new.append(n_new)
            budget -= n_new
            idx += 1
        return sched, new, preempted, budget

    def _allocate_running_prefix(self, start: int, budget: int) -> tuple[list[int], list[int]]:
        """Allocate, in order, the running requests from index ``start`` on until one does
        not fit or the token budget is spent, as :meth:`allocate_slots` one by one would;
        returns the allocated rows and their new-token counts."""
        prefix = self._budget_prefix(self._running_rows()[start:], budget)
        rows, new, want = prefix.rows, prefix.new, prefix.want
        taken = np.add.accumulate(want - prefix.blocks)
        # taken never decreases: the first request whose blocks do not fit, if any
        ok = int(taken.searchsorted(self.num_free_blocks + self._evictable, side="right"))
        if ok:
            self.num_blocks[rows[:ok]] = want[:ok]
            self._take(int(taken[ok - 1]))
        return rows[:ok].tolist(), new[:ok].tolist()

    def _schedule_waiting(self, budget: int) -> tuple[list[int], list[int]]:
        sched: list[int] = []
        new: list[int] = []
        chunked = self.config.enable_chunked_prefill
        self._hol_blocked = False
        self._head_refusal = ""
        while True:
            if len(self.running) >= self.config.max_num_seqs:
                self._head_refusal = "seqs"
                break
            if budget <= 0:
                self._head_refusal = "budget"
                break
            i_w = self.waiting.peek_request()
            if i_w is None:
                break
            self._pending_hit = None
            if self._cache is not None and self.num_computed_tokens[i_w] == 0:
                self._pending_hit = self._prefix_lookup(i_w)
            n_new = int(self.num_tokens[i_w]) - self._start_tokens(i_w)
            if not chunked and n_new > budget:
                self._head_refusal = "budget"
                break
            n_new = min(n_new, budget)
            refusal = self._admit_waiting(i_w, n_new)
            if refusal:
                self._head_refusal = refusal
                self._hol_blocked = True
                break
            self.waiting.pop_request()
            self._start_running(i_w)
            sched.append(i_w)
            new.append(n_new)
            budget -= n_new
        return sched, new

    def _admit_waiting(self, i: int, n_new: int) -> str:
        """Whether waiting request ``i`` may start with ``n_new`` tokens this step: allocate its
        blocks and return "", or change nothing and return why not ("kv": no blocks;
        "policy": an engine admission rule). vLLM: ``allocate_slots`` keeping the watermark."""
        return self._allocate_start(i, self._start_tokens(i) + n_new, reserve=self.watermark_blocks)

    def _start_tokens(self, i: int) -> int:
        """Tokens of waiting request ``i`` already in KV if it starts now: its computed tokens
        (kept across a swap), or the prefix-cache hit found for it."""
        if self._pending_hit is not None:
            return len(self._pending_hit) * self._hash_tokens
        return int(self.num_computed_tokens[i])

    def _allocate_start(self, i: int, tokens: int, *, reserve: int) -> str:
        """Blocks for the first ``tokens`` tokens of waiting request ``i`` (sharing its prefix
        hit, if any), keeping ``reserve`` blocks free: "" when allocated, else "kv"."""
        hit = self._pending_hit
        if hit is None:
            computed = int(self.num_computed_tokens[i])
            return "" if self.allocate_slots(i, tokens - computed, reserve=reserve) else "kv"
        assert self._cache is not None
        b = self._cache.blocks_per_hash
        need = -(-tokens // self.block_size) - len(hit) * b
        unused = self._cache.num_unreferenced(hit) * b  # hit blocks leave the evictable pool
        if need > self.num_free_blocks + self._evictable - unused - reserve:
            return "kv"
        hit_tokens = len(hit) * self._hash_tokens
        self._evictable -= self._cache.acquire(hit)
        if hit:
            self._held[i] = list(hit)
        self._next_hash[i] = len(hit)
        self.num_shared_blocks[i] = len(hit) * b
        self.num_blocks[i] = len(hit) * b + need
        self._take(need)
        self.num_computed_tokens[i] = hit_tokens
        self.prefix_hit_tokens += hit_tokens
        self.prefix_query_tokens += int(self.num_tokens[i])
        self._pending_hit = None
        return ""

    # --- prefix caching -----------------------------------------------------------------------
    def _prefix_lookup(self, i: int) -> list[int]:
        """The cached leading hashes of waiting request ``i`` (nothing changes yet)."""
        assert self._cache is not None
        full = int(self._num_full_hashes[i])
        # at least the last token is computed again (vLLM: the hit stops short of num_tokens)
        full = min(full, (int(self.num_tokens[i]) - 1) // self._hash_tokens)
        lo = int(self._hash_lo[i])
        hashes: list[int] = self._hashes[lo : lo + full].tolist()
        return hashes[: self._cache.match(hashes)]

    def _register_prefixes(self, rows: IntArray) -> None:
        """Cache the full prompt blocks the step completed (one hash each), first come first
        cached; a block whose hash is cached already stays private (vLLM does not dedupe)."""
        assert self._cache is not None
        done = np.minimum(
            self.num_computed_tokens[rows] // self._hash_tokens, self._num_full_hashes[rows]
        )
        todo = np.flatnonzero(self._next_hash[rows] < done)
        if todo.size == 0:
            return
        b = self._cache.blocks_per_hash
        for k in todo.tolist():
            i = int(rows[k])
            lo = int(self._hash_lo[i])
            for h in self._hashes[lo + int(self._next_hash[i]) : lo + int(done[k])].tolist():
                if self._cache.insert(h):
                    self._held.setdefault(i, []).append(h)
                    self.num_shared_blocks[i] += b
            self._next_hash[i] = int(done[k])

    def _features(
        self, rows: IntArray, new: IntArray
    ) -> tuple[float, float, float, float, float]:
        """The step's cost-model features (:data:`kvbudget.perf.cost_model.FEATURES`)."""
        tail = self._tail
        if tail is not None:
            # ``rows`` are the running requests, all decoding (one new token each), then the
            # waiting requests that start (``tail``, a few): the same sums, in integers
            m = len(rows) - len(tail)
            fast = self._fast
            context = m + _isum(fast.computed) if fast is not None else 0
            return self._tail_features(m, context, tail)
        after = self.num_computed_tokens[rows] + new
        decode = (new == 1) & (self.num_output_tokens[rows] > 0) & (after == self.num_tokens[rows])
        prefill_new = new * ~decode  # new tokens of the prefill chunks, 0 for decode rows
        num_decode = int(np.count_nonzero(decode))
        return (
            float(_isum(prefill_new)),
            float(num_decode),
            float(_isum(after)),
            float(_isum(prefill_new * after)),
            float(len(rows) - num_decode),
        )

    def _tail_features(
        self, m: int, context: int, tail: list[tuple[int, int]]
    ) -> tuple[float, float, float, float, float]:
        """:meth:`_features` of a step of ``m`` decoding requests attending to ``context``
        tokens, then the waiting requests that start (``tail``): the same sums, in integers."""
        num_decode = m
        prefill = attention = 0
        for i, n_new in tail:
            after_i = int(self.num_computed_tokens[i]) + n_new
            context += after_i
            if n_new == 1 and after_i == int(self.num_tokens[i]) and self.num_output_tokens[i]:
                num_decode += 1
            else:
                prefill += n_new
                attention += n_new * after_i
        return (
            float(prefill),
            float(num_decode),
            float(context),
            float(attention),
            float(m + len(tail) - num_decode),
        )

    def _steady(self, rows: IntArray, new: IntArray, preempted: bool) -> DecodeRows | None:
        """The rows' state when the step is pure decode of every running request and no
        waiting request can start until something changes (a finish, an allocation failure,
        an arrival); None otherwise."""
        n = len(rows)
        if preempted or n != len(self.running) or n == 0 or self._step_extra_s:
            return None
        if n > self.config.max_num_batched_tokens:
            return None
        for _, n_new in self._tail or ():
            if n_new != 1:
                return None  # a request starting with more than one token: a prefill
        # A waiting head (if any) was refused this step by max_num_seqs, the token budget or
        # allocate_slots; during a decode run the first two stay and free blocks only shrink,
        # so it stays refused until a request finishes (which ends the run).
        fast = self._fast
        if fast is not None and fast.rows is rows:
            # the running loop alone, vectorised: a running request always has at least one
            # token to compute, so ``n`` tokens left in all is one each, all scheduled (one
            # token scheduled each is not enough: the budget may cut a prefill to one token)
            if fast.num_need != n:
                return None
            computed, blocks = fast.computed, fast.want
        else:
            computed = self.num_computed_tokens[rows]
            if _imax(self.num_tokens[rows] - computed) != 1:  # then one new token each too
                return None
            blocks = self.num_blocks[rows]
        output = self.num_output_tokens[rows]
        if not self._all_decode and not _imin(output) > 0:
            return None
        return DecodeRows(computed, blocks, output)

    def _run(self) -> Generator[simpy.Event, Any, None]:
        env = self.env
        skip_ahead = self.config.skip_ahead
        while True:
            if self._aborts:
                self._apply_aborts()
            if not self.running and self.waiting.peek_request() is None:
                self._on_idle()
                self._wake = env.event()
                yield self._wake
                self._wake = None
                self._sample_idle_until(env.now)
                self.t = max(self.t, env.now)
                continue
            reserved, gw_waiting = self.hooks.gateway_state()
            scheduled = self._schedule()
            if scheduled is None:  # the decode group's step
                yield from self._group_iteration(reserved, gw_waiting)
                self._add_deferred()
                continue
            rows, new, preempted = scheduled
            if len(rows) == 0:
                if preempted:
                    # the request being scheduled was its own victim (priority scheduling):
                    # vLLM v1 stops the running loop there and schedules nothing this step
                    continue
                # nothing fits even with every block free: cannot happen for requests that
                # passed fits(); guard against a livelock all the same
                raise RuntimeError("engine could not schedule any request")  # pragma: no cover
            counts = (len(self.running), self.num_waiting() + gw_waiting)
            step_end: Floats | None = None
            used: Ints
            dts: Floats
            k = 1
            decode = self._steady(rows, new, preempted) if skip_ahead else None
            if decode is not None:
                c0 = _isum(decode.computed)
                to_finish = _imin(self.target_output[rows] - decode.output)
                k_max, dt, t_ext = self._decode_run_bound(len(rows), c0, to_finish)
                if k_max > 1:
                    alloc_cum = self._cut_to_free(self._alloc_plan(decode, k_max))
                    k_limit = self._jump_limit(rows, len(alloc_cum), alloc_cum)
                    alloc_cum = alloc_cum[:k_limit]
                    k, step_end, used, dts = self._plan_jump(len(rows), alloc_cum, c0, t_ext, dt)
                    if k > 1:
                        self._run_rows = rows
            else:
                p, d, c, a, s = self._features(rows, new)
                dt = float(self.cost.step_time(p, d, c, a, s)) + self._step_extra_s
            t1 = self._account_step(dt, reserved, counts) if step_end is None else float(step_end[-1])
            k = yield from self._wait(t1, step_end)
            if step_end is not None:
                self._account_run(step_end, used, dts, k, reserved, counts)
            aborted = self._apply_aborts() if self._aborts else []
            if decode is None:
                self._on_steps(rows, new, preempted, 1)
                self._commit_step(rows, new, aborted)
            else:
                self._on_steps(rows, new, preempted, k)
                # the blocks steps 1..k-1 take, as planned (step 0 takes none: see _plan_jump)
                extra: int | None = int(used[k - 1] - used[0]) if step_end is not None else 0
                self._commit_run(rows, k, decode, k >= to_finish, extra, aborted)
            self._add_deferred()

    def _group_iteration(self, reserved: int, gw_waiting: int) -> Generator[simpy.Event, Any, None]:
        """The rest of an engine loop iteration whose running loop was the decode group's
        (:meth:`_schedule_group`): the same arithmetic as the iteration of :meth:`_run`, on the
        group's numbers instead of the rows' arrays."""
        g = self._group
        tail = self._tail
        assert g is not None and tail is not None
        counts = (len(self.running), self.num_waiting() + gw_waiting)
        n = g.size
        step_end: Floats | None = None
        used: Ints
        dts: Floats
        run = not tail and not self._step_extra_s  # a decode run of the group
        if run:
            c0 = g.context
            to_finish = g.finish[0][0] - g.step
            k_max, dt, t_ext = self._decode_run_bound(n, c0, to_finish)
            if k_max > GROUP_SMALL_K:
                alloc_cum = self._cut_to_free(self._group_alloc_plan(g, k_max))
                _, step_end, used, dts = self._plan_jump(n, alloc_cum, c0, t_ext, dt)
            elif k_max > 1:
                _, step_end, used, dts = self._group_plan_small(g, k_max, c0, t_ext, dt)
        else:
            p, d, c, a, s = self._tail_features(n, n + g.context, tail)
            dt = float(self.cost.step_time(p, d, c, a, s)) + self._step_extra_s
        t1 = self._account_step(dt, reserved, counts) if step_end is None else float(step_end[-1])
        k = yield from self._wait(t1, step_end)
        if step_end is not None:
            self._account_run(step_end, used, dts, k, reserved, counts)
        if self._aborts:
            # back to the arrays, as they were when the step was scheduled, and on as _run
            self._group_dissolve(scheduled=True)
            rows = self._running_rows()  # the group's rows, then the tail's
            if run:  # read before the aborts change the arrays
                decode = DecodeRows(
                    self.num_computed_tokens[rows],
                    self.num_blocks[rows],
                    self.num_output_tokens[rows],
                )
                self._commit_run(rows, k, decode, k >= to_finish, None, self._apply_aborts())
            else:
                aborted = self._apply_aborts()
                new = np.array([1] * n + [n_new for _, n_new in tail], np.int64)
                self._commit_step(rows, new, aborted)
        elif run:
            # the blocks steps 1..k-1 take, as planned (step 0's were taken already)
            taken = int(used[k - 1] - used[0]) if step_end is not None else 0
            self._group_commit_run(g, k, taken, k >= to_finish)
        else:
            self._commit_decode_step(n + len(tail))

    def _account_step(self, dt: float, reserved: int, counts: tuple[int, int]) -> float:
        """A single step of ``dt`` seconds from now: its KV and head-of-line terms and timeline
        samples; returns its end."""
        t1 = self.t + dt
        used_now = self.num_used_blocks
        self._kv_scalar_terms.append(float(used_now) * self.block_size * dt)
        if self._hol_blocked:
            self._hol_scalar_terms.append(dt)
        if self._next_sample_idx * self.timeline_period_s < t1:  # a sample is due
            self._sample_step(t1, used_now, reserved, counts)
        return t1

    def _wait(self, t1: float, step_end: Floats | None) -> Generator[simpy.Event, Any, int]:
        """Wait for the step (or the planned decode run, ``step_end``) to end at ``t1``;
        returns the steps that ran (a run ends early when work is added or aborted)."""
        env = self.env
        self._busy = True
        k = 1
        if step_end is not None:
            k = len(step_end)
            if k > 1:
                self._jump_ends = self._run_ends = step_end
        try:
            yield env.timeout(max(0.0, t1 - env.now))
        except simpy.Interrupt:
            # work was added or aborted mid-run: stop at the end of the step in progress,
            # as stepping one by one would have
            assert step_end is not None
            k = self._jump_keep
            t1 = float(step_end[k - 1])
            yield env.timeout(max(0.0, t1 - env.now))
        self._jump_ends = self._run_ends = self._run_rows = None
        self._busy = False
        self.t = t1
        self.num_steps += k
        return k

    def _account_run(
        self,
        step_end: Floats,
        used: Ints,
        dts: Floats,
        k: int,
        reserved: int,
        counts: tuple[int, int],
    ) -> None:
        """The KV and head-of-line terms and timeline samples of the first ``k`` steps of a
        decode run."""
        if k < len(step_end):  # cut short
            step_end, used, dts = step_end[:k], used[:k], dts[:k]
        # float(used * bs) * dt: the same bits as float(used) * bs * dt (exact integers)
        if isinstance(dts, list):
            bs = self.block_size
            self._kv_scalar_terms.extend([d * (u * bs) for d, u in zip(dts, used, strict=True)])
            if self._hol_blocked:
                self._hol_scalar_terms.extend(dts)
        else:
            self._kv_terms.append(dts * (np.asarray(used) * self.block_size))
            if self._hol_blocked:
                self._hol_terms.append(dts)
        if self._next_sample_idx * self.timeline_period_s < self.t:  # a sample is due
            self._sample_steps(step_end, used, reserved, counts)

    def _commit_run(
        self,
        rows: IntArray,
        k: int,
        decode: DecodeRows,
        finishes: bool,
        extra: int | None,
        aborted: list[int],
    ) -> None:
        """Commit a decode run of ``k`` steps (see :meth:`_commit_jump`), dropping the requests
        ``aborted`` during its last step."""
        if aborted:
            extra = None  # fewer rows than planned: count them again
            keep = ~np.isin(rows, aborted)
            if k > 1:
                # an aborted request keeps the tokens of the steps that ended before
                # its abort (which came during the last step: it ended the run)
                gone = rows[~keep]
                self.num_output_tokens[gone] = decode.output[~keep] + (k - 1)
                self.num_computed_tokens[gone] = decode.computed[~keep] + (k - 1)
                self.num_tokens[gone] += k - 1
            rows = rows[keep]
            decode = DecodeRows(decode.computed[keep], decode.blocks[keep], decode.output[keep])
        self._commit_jump(rows, k, decode, finishes, extra)

    def _add_deferred(self) -> None:
        """Add the requests re-admitted while their aborts waited for the step's end."""
        if self._deferred_adds:
            for i in self._deferred_adds:
                self.add_request(i)
            self._deferred_adds.clear()

    def _interrupt_jump(self) -> None:
        """Something changed this engine's work during a planned decode run (another replica's
        completion admitted or revoked a request here): end the run with the step in progress."""
        ends = self._jump_ends
        # nothing to cut unless a step after the one in progress is planned (the run's next
        # to last step ends now or later): the common case, checked without a search
        if ends is None or len(ends) < 2 or ends[-2] < self.env.now:
            return
        self._jump_keep = bisect.bisect_left(ends, self.env.now) + 1
        self._jump_ends = None
        self.process.interrupt()

    def _apply_aborts(self) -> list[int]:
        """Apply the aborts queued during the last step (the caller checks there are some)."""
        aborted = list(self._aborts)
        for i in aborted:
            self._abort_now(i)
        self._aborts.clear()
        return aborted

    # --- committing -------------------------------------------------------------------------
    def _commit_step(self, rows: IntArray, new: IntArray, aborted: list[int]) -> None:
        if self._tail is not None and not aborted and self._cache is None:
            self._commit_decode_step(len(rows))
            return
        if aborted:
            keep = ~np.isin(rows, aborted)
            rows, new = rows[keep], new[keep]
        computed = self.num_computed_tokens[rows] + new
        self.num_computed_tokens[rows] = computed
        if self._cache is not None:
            self._register_prefixes(rows)
        sampled = rows[computed >= self.num_tokens[rows]]
        if sampled.size == 0:
            return
        if sampled.size == len(self.running):
            # ``rows`` are distinct running requests (aborted ones dropped above), so every
            # running request was sampled: each now has one token to compute, and an output
            self._all_decode = True
        output = self.num_output_tokens[sampled] + 1
        self.num_output_tokens[sampled] = output
        self.num_tokens[sampled] += 1
        first = sampled[np.isnan(self.first_token_s[sampled])]
        if first.size:
            self.first_token_s[first] = self.t
        done = sampled[output >= self.target_output[sampled]]
        if done.size:
            self._finish(done.tolist())

    def _commit_decode_step(self, n: int) -> None:
        """:meth:`_commit_step` of ``n`` rows when they are the running requests, all
        decoding (``_fast``, each sampled; their first tokens are out already, as they have
        output), then the starting ones (``_tail``, a few), with fewer array operations."""
        tail = self._tail
        assert tail is not None
        done: list[int] = []
        fast = self._fast
        g = self._group  # a step of the group's (any other step dissolves it first)
        if g is not None:
            g.step += 1
            g.context += g.size
            if g.finish and g.finish[0][0] <= g.step:
                done = self._group_done(g)
        elif fast is not None:
            prefix = fast.rows
            computed = fast.computed + 1
            self.num_computed_tokens[prefix] = computed
            self.num_tokens[prefix] = computed + 1  # one token to compute, as before
            output = self.num_output_tokens[prefix] + 1
            self.num_output_tokens[prefix] = output
            done = prefix[output >= self.target_output[prefix]].tolist()
        sampled = n - len(tail)
        for i, n_new in tail:
            computed_i = int(self.num_computed_tokens[i]) + n_new
            self.num_computed_tokens[i] = computed_i
            if computed_i >= self.num_tokens[i]:
                sampled += 1
                output_i = int(self.num_output_tokens[i]) + 1
                self.num_output_tokens[i] = output_i
                self.num_tokens[i] += 1
                if math.isnan(self.first_token_s[i]):
                    self.first_token_s[i] = self.t
                if output_i >= self.target_output[i]:
                    done.append(i)
                elif g is not None:
                    self._group_join(g, i, computed_i, output_i)
        if sampled == len(self.running):
            self._all_decode = True  # as in _commit_step
        if done:
            self._finish(done)

    def _decode_run_bound(self, n: int, c0: int, to_finish: int) -> tuple[int, float, float]:
        """For a decode run of ``n`` requests starting now from ``c0`` context tokens, the first
        of them finishing in ``to_finish`` steps: an upper bound on its length (the first
        finish, :data:`MAX_JUMP_STEPS`, the next external event), the duration of its first
        step and the time of the next external event."""
        dt0 = float(self.cost.step_time(0.0, float(n), float(c0 + n), 0.0, 0.0))
        k_max = min(to_finish, MAX_JUMP_STEPS)
        t_ext = self.hooks.next_external_s()
        if t_ext != math.inf and k_max > 1 and dt0 > 0:
            # step times never shrink during a decode run (the context only grows), so the run
            # reaches t_ext within (t_ext - t) / dt0 + 1 steps
            k_max = max(1, min(k_max, int((t_ext - self.t) / dt0) + 2))
        return k_max, dt0, t_ext

    def _group_plan_small(
        self, g: DecodeGroup, k_max: int, c0: int, t_ext: float, dt0: float
    ) -> tuple[int, list[float], list[int], list[float]]:
        """:meth:`_plan_jump` of a short decode run (at most ``GROUP_SMALL_K`` steps) of the decode
        group, in Python numbers: the same steps, in the same order, as the array path."""
        bs = self.block_size
        hist = g.hist
        step = g.step
        free = self.num_free_blocks + self._evictable
        used0 = self.num_used_blocks
        used = [used0]
        taken = 0  # blocks taken in steps 1..j
        for j in range(1, k_max):
            taken += hist[(-step - j) % bs]
            if taken > free:  # step j runs out of blocks: the run is steps 0..j-1
                k_max = j
                break
            used.append(used0 + taken)
        ends, dts = self._decode_steps_small(g.size, c0, k_max, t_ext, dt0)
        k = len(ends)
        return k, ends, used[:k], dts

    def _group_alloc_plan(self, g: DecodeGroup, k_max: int) -> IntArray:
        """:meth:`_alloc_plan` for the decode group: a member's blocks are full every
        ``block_size`` steps, at steps its ``hist`` bucket says."""
        bs = self.block_size
        step = g.step
        per = np.array(g.hist, np.int64)[(-step - self._step_index[:k_max]) % bs]
        per[0] = 0
        return np.add.accumulate(per, out=per)

    def _alloc_plan(self, decode: DecodeRows, k_max: int) -> IntArray:
        """Blocks a decode run of ``decode``'s rows takes in its steps 1..j, for ``j <
        k_max`` (step 0's blocks were taken by _schedule)."""
        bs = self.block_size
        # block allocation pattern: request r (c_r tokens computed before the run, b_r blocks
        # after step 0's allocation by _schedule) needs its next block at step
        # f_r = b_r * bs - c_r >= 1 and then every bs steps
        first = decode.blocks * bs - decode.computed
        first.sort()  # in place: a new array (np.sort would copy it once more)
        # reached[j]: the requests with f_r <= j, each taking a block in steps 1..j
        if k_max <= bs:  # no request takes a second new block within the run
            alloc_cum = first.searchsorted(self._step_index[:k_max], side="right")
        else:  # plus one block for every bs steps since f_r: sum reached[j - m * bs] over m
            period = -(-k_max // bs) * bs
            reached = first.searchsorted(self._step_index[:period], side="right")
            alloc_cum = np.add.accumulate(reached.reshape(-1, bs), axis=0).ravel()[:k_max]
        return alloc_cum

    def _cut_to_free(self, alloc_cum: IntArray) -> IntArray:
        """``alloc_cum`` (blocks taken in steps 1..j of a planned decode run) up to the first
        step that runs out of blocks."""
        free = self.num_free_blocks + self._evictable
        if int(alloc_cum[-1]) > free:
            # alloc_cum never decreases: the first step that runs out of blocks
            fail = int(alloc_cum.searchsorted(free, side="right"))
            return alloc_cum[: max(fail, 1)]
        return alloc_cum

    def _plan_jump(
        self, n: int, alloc_cum: IntArray, c0: int, t_ext: float, dt0: float
    ) -> tuple[int, FloatArray, IntArray, FloatArray]:
        """Plan a run of at most ``len(alloc_cum)`` pure-decode steps of ``n`` requests from ``c0``
        context tokens (the first one ``dt0`` long), ending with the step in progress at
        ``t_ext`` or when blocks run out (``alloc_cum[j]``: blocks taken in steps 1..j); returns
        its length, step end times, blocks in use during each step and step durations. The
        first step's blocks were already allocated by _schedule."""
        k_max = len(alloc_cum)
        if k_max <= SMALL_K:
            ends_l, dts_l = self._decode_steps_small(n, c0, k_max, t_ext, dt0)
            ends, dts = np.array(ends_l), np.array(dts_l)
        else:
            # c0 + n * (j + 1) for step j, exact (integers below 2**53, as arange computes them)
            context = np.arange(c0 + n, c0 + n * (k_max + 1), n, dtype=np.float64)
            dts = self._decode_step_times(n, context)
            ends = dts.copy()
            ends[0] += self.t
            np.add.accumulate(ends, out=ends)  # sequential sums from t, as stepping adds them
            if t_ext < ends[-1]:  # the run ends with the first step ending at t_ext or later
                cut = int(ends.searchsorted(t_ext, side="left")) + 1
                ends, dts = ends[:cut], dts[:cut]
        k = len(ends)
        used = self.num_used_blocks + alloc_cum[:k]  # step 0's blocks were taken by _schedule
        return k, ends, used, dts

    def _decode_steps_small(
        self, n: int, c0: int, k_max: int, t_ext: float, dt0: float
    ) -> tuple[list[float], list[float]]:
        """End times and durations of the steps of a short decode run (at most ``k_max``
        steps, the first ``dt0`` long, ending with the step in progress at ``t_ext``), one
        ``step_time`` call per step as stepping makes them: for a few steps, cheaper than the
        array arithmetic of :meth:`_decode_step_times`, and the same bits (sums from ``t`` in
        the same order)."""
        step_time = self.cost.step_time
        num = float(n)
        t = self.t
        ends: list[float] = []
        dts: list[float] = []
        first_at = 0  # steps up to the first one that ends at t_ext or later
        for j in range(1, k_max + 1):
            dt = dt0 if j == 1 else float(step_time(0.0, num, float(c0 + n * j), 0.0, 0.0))
            t += dt
            ends.append(t)
            dts.append(dt)
            if t >= t_ext:
                first_at = first_at or j
                if t > t_ext:  # the run ends with the first step ending at t_ext or later
                    return ends[:first_at], dts[:first_at]
        return ends, dts  # no step ends after t_ext: the whole run, as the array path does

    def _decode_step_times(self, n: int, context: FloatArray) -> FloatArray:
        """Durations of decode steps of ``n`` requests attending to ``context`` tokens (one
        step per element). The features that stay the same along a decode run go in as floats:
        a cost model's step_time is element-wise arithmetic, so they broadcast against the
        context to the bits arrays of equal values would give, with fewer array operations."""
        step_time: Callable[..., FloatArray] = self.cost.step_time
        return np.asarray(step_time(0.0, float(n), context, 0.0, 0.0), dtype=np.float64)

    def _commit_jump(
        self, rows: IntArray, k: int, decode: DecodeRows, finishes: bool, extra: int | None = None
    ) -> None:
        """Commit ``k`` decode steps of ``rows`` (whose state before them is ``decode``);
        ``finishes``: whether some request may reach its output length; ``extra``: the blocks
        steps 1..k-1 take, if the plan counted them (None: count them here)."""
        new_total = decode.computed + k
        if k > 1 and extra != 0:  # step 0's blocks were allocated by _schedule; the later steps'
            bs = self.block_size  # are taken now
            blocks = decode.blocks
            need = np.maximum((new_total + (bs - 1)) // bs, blocks)
            if extra is None:
                extra = _isum(need - blocks)
            if extra:
                self._take(extra)
                self.num_blocks[rows] = need
        self.num_computed_tokens[rows] = new_total
        output = decode.output + k
        self.num_output_tokens[rows] = output
        self.num_tokens[rows] = new_total + 1  # decoding: one token to compute, as before
        if not finishes:
            return
        done = rows[output >= self.target_output[rows]]
        if done.size:
            self._finish(done.tolist())

    def _group_commit_run(self, g: DecodeGroup, k: int, extra: int, finishes: bool) -> None:
        """:meth:`_commit_jump` for the decode group: ``k`` steps, ``extra`` blocks taken by
        steps 1..k-1; ``finishes``: whether some member may have all its output."""
        if extra:
            self._take(extra)
        g.step += k
        g.context += g.size * k
        if finishes:
            done = self._group_done(g)
            if done:
                self._finish(done)

    def _finish(self, finished: list[int]) -> None:
        if not finished:
            return
        t = self.t
        self._stop_running(finished)
        for i in finished:
            self._free(i)
            self._in_engine[i] = False
            self.finished_s[i] = t
        for i in finished:
            self.hooks.on_finish(i, t)

    # --- timeline -----------------------------------------------------------------------------
    def _grid(self, until: float) -> list[float]:
        """Sample times ``m * period`` in [next sample, until), advancing the next sample."""
        period = self.timeline_period_s
        out: list[float] = []
        m = self._next_sample_idx
        while m * period < until:
            out.append(m * period)
            m += 1
        self._next_sample_idx = m
        return out

    def _sample_steps(
        self, ends: Floats, used_blocks: Ints, reserved: int, counts: tuple[int, int]
    ) -> None:
        """Timeline samples up to ``ends[-1]``; ``counts`` are the running and waiting (engine
        plus gateway) requests when the steps were scheduled."""
        grid = self._grid(float(ends[-1]))
        if not grid:
            return
        last = len(ends) - 1
        if isinstance(ends, list):
            idx = [min(bisect.bisect_right(ends, g), last) for g in grid]
        else:
            idx = np.minimum(np.searchsorted(ends, grid, side="right"), last).tolist()
        running, waiting = counts
        for g, s in zip(grid, idx, strict=True):
            self.timeline.append(
                (
                    g,
                    int(used_blocks[s]) * self.block_size,
                    reserved,
                    self.capacity_tokens,
                    running,
                    waiting,
                    self.num_preemptions_total,
                )
            )

    def _sample_step(
        self, end: float, used_blocks: int, reserved: int, counts: tuple[int, int]
    ) -> None:
        """Timeline samples up to the end of one step (see :meth:`_sample_steps`)."""
        running, waiting = counts
        for g in self._grid(end):
            self.timeline.append(
                (
                    g,
                    used_blocks * self.block_size,
                    reserved,
                    self.capacity_tokens,
                    running,
                    waiting,
                    self.num_preemptions_total,
                )
            )

    def _sample_idle_until(self, until: float) -> None:
        reserved, gw_waiting = self.hooks.gateway_state()
        for g in self._grid(until):
            self.timeline.append(
                (g, 0, reserved, self.capacity_tokens, 0, gw_waiting, self.num_preemptions_total)
            )
