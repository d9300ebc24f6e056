"""Named engine behaviours: what changes when the server is not vLLM v1 with recompute.

Each preset is a subclass of :class:`kvbudget.simulator.engine.Engine` overriding some of the
hooks :class:`kvbudget.simulator.scheduler.Scheduler` lists (and nothing else of it), so
continuous batching, chunked prefill, the step cost model and the timeline are shared. With
``skip_ahead`` :func:`make_engine` runs a preset on
:class:`kvbudget.simulator.fast_decode.SkipAheadEngine` (the preset's hooks first, then the
decode group and its decode runs, or with speculation ``spec_run.SpecGroup``'s runs of verify
steps; a preset whose ``decode_group`` is False keeps neither group, so steps), with the same
results as stepping (tests compare both for every preset, with and without prefix caching). The
hooks read running requests only through ``running_output_tokens`` and ``num_running_blocks``,
which count the group's steps. Pick one with ``EngineConfig(name=...)`` or ``kvbudget simulate
--engine``.

* ``vllm``: vLLM v1 (:mod:`kvbudget.simulator.engine`): blocks allocated as tokens are computed,
  preemption by recompute when they run out; victim is the lowest priority then latest arrival
  (``--scheduling-policy priority``) or the latest arrival (``fcfs``); ``watermark`` keeps a
  fraction of blocks free when admitting (vLLM v0's block manager, 0.01 there).
* ``vllm-swap``: vLLM v0 with ``--preemption-mode swap`` and ``--swap-space`` GiB of host memory
  per GPU (default 4): a preempted request's blocks are copied to host memory and back when it
  resumes, keeping its computed tokens; each copy adds ``bytes / pcie_bandwidth_bytes_s`` (the
  GPU preset's host link) to the step it happens in, as vLLM v0's cache engine runs
  ``swap_out``/``swap_in`` before the model step. When the swap space is full the request is
  recomputed instead (vLLM v0 raised an error there).
* ``tgi``: Text Generation Inference's block allocator (``backends/v3/src/queue.rs``,
  ``State::next_batch``): a request is given blocks for ``input_length + max_new_tokens`` when it
  is admitted, so a running request never runs out and TGI never preempts; the queue stops at
  the first request that does not fit (head-of-line blocking). TGI's own batching knobs
  (``max_batch_prefill_tokens``, ``waiting_served_ratio``, ``max_waiting_tokens``) are not
  modelled: steps are composed as in vLLM, with ``max_num_batched_tokens``.
* ``sglang``: SGLang's scheduler (``python/sglang/srt/managers/schedule_policy.py``,
  ``PrefillAdder``; ``scheduler.py``, ``update_running_batch``; ``schedule_batch.py``,
  ``retract_decode``): a waiting request starts only if ``extend_input_len +
  min(max_new_tokens - output, 4096)`` is below the free (and evictable) tokens minus
  ``new_token_ratio`` x the clipped remaining output of every running request (minus what the
  requests added in the same round still need); ``new_token_ratio`` starts at
  ``0.7 x schedule_conservativeness``, decays by ``(init - 0.14 init) / 600`` per decode step
  to ``0.14 init``, and returns to ``init`` when the engine is idle. When a decode step does not
  fit, ``retract_decode`` sends running requests back to the end of the waiting queue (their
  KV discarded), fewest output tokens first and then longest prompt, until the rest have room
  for ``20`` more steps each, and sets the ratio to ``min(1, (decoded + 20 n) / (sum
  max_new_tokens + 1))`` of the rest.
* ``trtllm``: TensorRT-LLM's capacity scheduler (``cpp/tensorrt_llm/batch_manager/
  capacityScheduler.cpp``; ``tensorrt_llm/_torch/pyexecutor/scheduler.py``),
  ``capacity_scheduler_policy``: ``GUARANTEED_NO_EVICT`` (default) starts a request only when
  the blocks it needs to finish (``prompt + max_tokens``), plus those every running request
  still needs to finish, are free, in order, stopping at the first that does not fit; nothing
  is ever evicted. ``MAX_UTILIZATION`` starts whatever fits the next step and, when running
  requests run out of blocks, pauses the most recently started one (its KV is discarded and
  recomputed).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cache
from typing import Any, cast

import numpy as np
import simpy

from kvbudget.simulator.engine import Engine, EngineHooks, IntArray, RequestColumns
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.fast_decode import SkipAheadEngine
from kvbudget.simulator.kv_offload import OffloadEngine, offload_arguments
from kvbudget.simulator.sim_config import ReplicaSetup
from kvbudget.simulator.small_arrays import isum
from kvbudget.simulator.spec_decode import make_spec_decode
from kvbudget.simulator.spec_run import SpecSkipAheadEngine

GIB = 1024**3

# SGLang's defaults (python/sglang/srt/environ.py and global_config.py)
SGLANG_INIT_NEW_TOKEN_RATIO = 0.7
SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS = 600
SGLANG_RETRACT_DECODE_STEPS = 20
SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION = 4096


class SwapEngine(Engine):
    """vLLM with ``--preemption-mode swap``."""

    def __init__(
        self, *args: Any, kv_bytes_per_token: int, pcie_bandwidth_bytes_s: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if kv_bytes_per_token < 1 or not pcie_bandwidth_bytes_s > 0:
            raise ValueError("swap needs kv_bytes_per_token >= 1 and a PCIe bandwidth > 0")
        self.block_bytes = kv_bytes_per_token * self.block_size
        self.pcie_bandwidth_bytes_s = float(pcie_bandwidth_bytes_s)
        self.num_cpu_blocks = int(self.config.swap_space_gib * GIB // self.block_bytes)
        self.num_free_cpu_blocks = self.num_cpu_blocks
        self.swapped_blocks = self.rows.add(
            "swapped_blocks", np.zeros(len(self.prompt_tokens), np.int64), 0)
        self.swap_out_bytes = 0
        self.swap_in_bytes = 0
        self.num_swap_outs = 0
        self.num_swap_ins = 0
        self.num_swap_fallbacks = 0
        self._swap_s: list[float] = []

    def _transfer(self, blocks: int) -> int:
        nbytes = blocks * self.block_bytes
        seconds = nbytes / self.pcie_bandwidth_bytes_s
        self.add_step_time(seconds)
        self._swap_s.append(seconds)
        return nbytes

    def _preempt(self, i: int) -> None:
        blocks = self.kv.num_blocks.item(i)
        if blocks == 0 or blocks > self.num_free_cpu_blocks:
            if blocks:
                self.num_swap_fallbacks += 1
            super()._preempt(i)
            return
        self.swapped_blocks[i] = blocks
        self.num_free_cpu_blocks -= blocks
        self.swap_out_bytes += self._transfer(blocks)
        self.num_swap_outs += 1
        self.evict_running(i, recompute=False)  # its computed tokens come back with its KV

    def _admit_waiting(self, i: int, n_new: int) -> str:
        refusal = super()._admit_waiting(i, n_new)
        blocks = self.swapped_blocks.item(i)
        if not refusal and blocks:
            self.num_free_cpu_blocks += blocks
            self.swapped_blocks[i] = 0
            self.swap_in_bytes += self._transfer(blocks)
            self.num_swap_ins += 1
        return refusal

    def _on_abort(self, i: int) -> None:
        if self.swapped_blocks[i]:
            self.num_free_cpu_blocks += self.swapped_blocks.item(i)
            self.swapped_blocks[i] = 0

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "swap_space_blocks": self.num_cpu_blocks,
            "num_swap_outs": self.num_swap_outs,
            "num_swap_ins": self.num_swap_ins,
            "num_swap_fallbacks": self.num_swap_fallbacks,
            "swap_out_bytes": self.swap_out_bytes,
            "swap_in_bytes": self.swap_in_bytes,
            "swap_time_s": math.fsum(self._swap_s),
        }


def _worst_case_tokens(engine: Engine, i: int) -> int:
    """KV tokens request ``i`` holds at most: its prompt and all but the last of its
    ``max_output_tokens`` (the last sampled token is never stored)."""
    return int(engine.prompt_tokens[i] + engine.max_output_tokens[i]) - 1


class TgiEngine(Engine):
    """Text Generation Inference: worst-case blocks at admission; never preempts."""

    def _admit_waiting(self, i: int, n_new: int) -> str:
        tokens = max(self.start_tokens(i) + n_new, _worst_case_tokens(self, i))
        return self.allocate_start(i, tokens, reserve=self.watermark_blocks)


class TrtllmEngine(Engine):
    """TensorRT-LLM's capacity scheduler: GUARANTEED_NO_EVICT or MAX_UTILIZATION."""

    rows_grow = False  # worst_case_blocks follows from each row's columns

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        bs = self.block_size
        # the blocks each request needs to finish (prompt and max_tokens)
        self.worst_case_blocks: IntArray = -(
            -(self.prompt_tokens + self.max_output_tokens - 1) // bs
        )
        self._running_worst = 0  # worst_case_blocks summed over the running requests

    def _start_running(self, i: int) -> None:
        super()._start_running(i)
        self._running_worst += self.worst_case_blocks.item(i)

    def _stop_running(self, rows: list[int]) -> None:
        super()._stop_running(rows)
        worst = self.worst_case_blocks
        self._running_worst -= (sum([int(worst[i]) for i in rows]) if len(rows) <= 4
                                else isum(worst[rows]))

    def _admit_waiting(self, i: int, n_new: int) -> str:
        if self.config.capacity_scheduler_policy == "GUARANTEED_NO_EVICT":
            # the blocks running requests still need to finish: a running request never holds
            # more than its worst case (it never outgrows its max_tokens), so this is
            # sum(max(worst - num_blocks, 0)) over them
            reserved = self._running_worst - self.kv.num_running_blocks
            shared, unused = self.kv.prefix_hit_blocks()
            need = self.worst_case_blocks.item(i) - shared
            available = self.kv.num_available_blocks - unused
            if reserved + need > available:
                return "kv"
        return super()._admit_waiting(i, n_new)

    def _victim(self) -> int:
        if self.config.capacity_scheduler_policy == "MAX_UTILIZATION":
            return self.running[-1]  # the most recently started is paused first
        return super()._victim()


class SglangEngine(Engine):
    """SGLang: ``new_token_ratio`` admission and ``retract_decode``."""

    rows_grow = False  # max_new_tokens follows from each row's columns

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # SGLang clips a request's max_new_tokens to what its context can hold (the scheduler:
        # min(max_new_tokens, max_req_len - input_len - 1), max_req_len the context length or
        # the KV pool, less one). Unclipped, a declared maximum beyond it would keep the
        # request from ever starting, even on an idle engine.
        room = np.maximum(self.max_model_len - 2 - self.prompt_tokens, 0)
        self.max_new_tokens: IntArray = np.minimum(self.max_output_tokens, room)
        init = min(SGLANG_INIT_NEW_TOKEN_RATIO * self.config.schedule_conservativeness, 1.0)
        self.init_new_token_ratio = init
        self.min_new_token_ratio = min(init * SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.new_token_ratio_decay = (
            init - self.min_new_token_ratio
        ) / SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
        self._ratio_start = init
        self._ratio_steps = 0
        self._offset: float | None = None  # this round's estimate for the running requests
        self._round_extra = 0
        self.num_retractions = 0
        self.num_retract_events = 0

    @property
    def new_token_ratio(self) -> float:
        return max(
            self._ratio_start - self._ratio_steps * self.new_token_ratio_decay,
            self.min_new_token_ratio,
        )

    def _remaining_of(self, i: int) -> int:
        """Request ``i``'s remaining output as SGLang estimates it: ``max_new_tokens`` less
        its output so far, clipped to ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``."""
        left = max(self.max_new_tokens.item(i) - self.num_output_tokens.item(i), 0)
        return min(left, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)

    def _on_schedule_waiting(self) -> None:
        self._offset = None  # computed when a request asks to start (the running set is
        self._round_extra = 0  # this round's until one starts)

    def _admit_waiting(self, i: int, n_new: int) -> str:
        if self._offset is None:
            left = np.maximum(self.max_new_tokens[self.running_rows()]
                              - self.running_output_tokens(), 0)
            remaining = isum(np.minimum(left, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION))
            self._offset = self.new_token_ratio * float(remaining)
        start = self.start_tokens(i)
        extend = self.num_tokens.item(i) - start
        max_new = self._remaining_of(i)
        available = self.kv.num_available_blocks - self.kv.prefix_hit_blocks()[1]
        rem_total = available * self.block_size - self._offset - self._round_extra
        if extend + max_new >= rem_total:
            return "policy"
        refusal = super()._admit_waiting(i, n_new)
        if not refusal:
            self._round_extra += extend - n_new + max_new
        return refusal

    def _jump_limit(self, k_max: int, alloc_cum: IntArray) -> int:
        if self.head_refusal != "policy" or k_max <= 1:
            return super()._jump_limit(k_max, alloc_cum)
        if self.kv.prefix is not None:
            return 1  # the head's hit could shrink as its prefix is evicted: step one by one
        head = self.waiting.peek_request()
        assert head is not None
        extend = int(self.num_tokens[head] - self.num_computed_tokens[head])
        need = extend + self._remaining_of(head)
        j = np.arange(1, k_max, dtype=np.int64)
        ratio = np.maximum(
            self._ratio_start - (self._ratio_steps + j) * self.new_token_ratio_decay,
            self.min_new_token_ratio,
        )
        left = np.maximum(self.max_new_tokens[self.running_rows()]
                          - self.running_output_tokens(), 0)
        rem = np.minimum(left[:, None] - j[None, :], SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION)
        rem_sum = np.maximum(rem, 0).sum(axis=0)
        available = self.kv.num_available_blocks - alloc_cum[1:]
        rem_total = available * self.block_size - ratio * rem_sum.astype(np.float64) - 0
        passes = np.flatnonzero(need < rem_total)
        return int(passes[0]) + 1 if passes.size else k_max

    def _retract_order_key(self, i: int) -> tuple[int, int]:
        return (self.num_output_tokens.item(i), -self.prompt_tokens.item(i))

    def _victim(self) -> int:
        return min(reversed(self.running), key=self._retract_order_key)

    def _schedule_running(self, budget: int) -> tuple[list[int], list[int], bool, int]:
        self._retract()  # a decode step does not fit: retract first, then schedule the rest
        sched, new, _, budget = super()._schedule_running(budget)
        return sched, new, True, budget

    def _retract(self) -> None:
        """``retract_decode``: free running requests until the rest have room for
        ``SGLANG_RETRACT_DECODE_STEPS`` more tokens each (at least one retracted, one kept)."""
        order = sorted(self.running, key=self._retract_order_key, reverse=True)
        first = True
        while first or (
            self.kv.num_available_blocks * self.block_size < SGLANG_RETRACT_DECODE_STEPS * len(order)
        ):
            if len(order) == 1:
                break
            first = False
            i = order.pop()
            self.num_retractions += 1
            # KV discarded; SGLang extends the waiting queue with retracted requests
            self.evict_running(i, front=False)
        self.num_retract_events += 1
        decoded = int(self.num_output_tokens[order].sum())
        total_max = int(self.max_new_tokens[order].sum())
        self._ratio_start = min(
            1.0, (decoded + SGLANG_RETRACT_DECODE_STEPS * len(order)) / (total_max + 1)
        )
        self._ratio_steps = 0

    def _on_steps(self, preempted: bool, k: int) -> None:
        if not preempted and self.scheduled_with_output():
            self._ratio_steps += k

    def _on_idle(self) -> None:
        self._ratio_start = self.init_new_token_ratio
        self._ratio_steps = 0

    def stats(self) -> dict[str, object]:
        return {
            **super().stats(),
            "num_retract_events": self.num_retract_events,
            "num_retractions": self.num_retractions,
            "new_token_ratio": self.new_token_ratio,
        }


# engine name -> the class that steps one step at a time (the reference): a new variant is
# one entry here
ENGINE_CLASSES: dict[str, type[Engine]] = {
    "vllm": Engine,
    "vllm-swap": SwapEngine,
    "tgi": TgiEngine,
    "sglang": SglangEngine,
    "trtllm": TrtllmEngine,
}


def _with_skip_ahead(cls: type[Engine], fast: type[SkipAheadEngine]) -> type[Engine]:
    """``cls``'s hooks over ``fast`` (``cls`` first in the method order, so its hooks run
    and their ``super()`` calls reach the skip-ahead engine)."""
    if cls is Engine:
        return fast
    doc = f"{cls.__name__} over {fast.__name__} (the same results, decode runs at once)."
    made = type(f"{cls.__name__}{fast.__name__}", (cls, fast), {"__doc__": doc})
    return cast("type[Engine]", made)


# ... the same engine with skip-ahead
SKIP_AHEAD_CLASSES: dict[str, type[Engine]] = {
    name: _with_skip_ahead(cls, SkipAheadEngine) for name, cls in ENGINE_CLASSES.items()
}


# vLLM with a CPU offload tier (kv_offloading_size: kvbudget.simulator.kv_offload)
OFFLOAD_CLASSES: tuple[type[Engine], type[Engine]] = (
    OffloadEngine, _with_skip_ahead(OffloadEngine, SkipAheadEngine))


def engine_class(config: EngineConfig) -> type[Engine]:
    """The class that runs ``config``: its preset, stepping or with skip-ahead."""
    if config.kv_offloading_size is not None:
        return OFFLOAD_CLASSES[config.skip_ahead]
    return (SKIP_AHEAD_CLASSES if config.skip_ahead else ENGINE_CLASSES)[config.name]


def spec_engine_class(config: EngineConfig) -> type[Engine]:
    """The class that runs ``config`` with speculative decoding: with skip-ahead, its preset
    over :class:`~kvbudget.simulator.spec_run.SpecSkipAheadEngine` (runs of verify steps at
    once); stepping otherwise, and with a CPU offload tier."""
    if not config.skip_ahead or config.kv_offloading_size is not None:
        return engine_class(replace(config, skip_ahead=False))
    return _spec_class(config.name)


@cache
def _spec_class(name: str) -> type[Engine]:
    """Preset ``name`` over :class:`~kvbudget.simulator.spec_run.SpecSkipAheadEngine`, made
    when first needed (not at import: most runs have no speculation)."""
    return _with_skip_ahead(ENGINE_CLASSES[name], SpecSkipAheadEngine)


def make_engine(env: simpy.Environment, setup: ReplicaSetup, columns: RequestColumns,
                hooks: EngineHooks, *, timeline_period_s: float = 1.0) -> Engine:
    """The engine ``setup.engine.name`` names (:func:`engine_class`) on ``setup``'s GPU, with
    its KV blocks and step-time model (the replica's configuration, resolved once), serving
    ``columns``; swap is given the KV bytes per token and the GPU's host link."""
    config = setup.engine
    blocks = setup.num_gpu_blocks
    assert blocks is not None, "the replica's KV blocks are resolved before its engine is made"
    spec = config.speculative_config
    cls = engine_class(config) if spec is None else spec_engine_class(config)
    swap: dict[str, Any] = {}
    if issubclass(cls, SwapEngine):
        swap["kv_bytes_per_token"] = setup.model.kv_bytes_per_token(
            config.tensor_parallel_size, config.kv_cache_dtype)
        swap["pcie_bandwidth_bytes_s"] = setup.gpu.pcie_bandwidth_bytes_s
    if issubclass(cls, OffloadEngine):
        swap.update(offload_arguments(setup))
    engine = cls(env, config, setup.cost_model, columns, num_gpu_blocks=blocks, hooks=hooks,
                 timeline_period_s=timeline_period_s, **swap)
    if spec is not None:
        engine.spec = make_spec_decode(spec, setup.gpu, setup.model, config.tensor_parallel_size,
                                       len(columns.prompt_tokens))
    return engine
