"""vLLM v1's scheduler as one engine replica runs it: paged KV blocks, continuous batching,
chunked prefill, ``max_num_seqs``, ``max_num_batched_tokens`` and preemption by recompute.

:class:`Scheduler` is one engine's state and what a step does to it, without the clock (its
subclass :class:`kvbudget.simulator.engine.Engine` runs steps in time), scheduled as vLLM v1's
``Scheduler.schedule()`` (``vllm/v1/core/sched/scheduler.py``):

1. **Running requests first**, in the order they started: each gets ``min(num_tokens -
   num_computed_tokens, token budget left)`` new tokens if :meth:`Scheduler.allocate_slots`
   finds their blocks (all at once when all do: :mod:`kvbudget.simulator.running_loop`); when
   it does not, the lowest-priority, latest-arriving running request is preempted (by
   recompute: blocks freed, ``num_computed_tokens`` reset, back to the front of ``waiting``)
   until the request fits or is itself the one preempted.
2. **Then waiting requests**, if nothing was preempted, while the token budget,
   ``max_num_seqs`` and the free blocks allow; the queue stops at the first that does not fit
   (:mod:`kvbudget.simulator.request_queue` orders it).
3. The step's **features** (:mod:`kvbudget.simulator.step_cost`) priced by the
   :class:`~kvbudget.perf.cost_model.CostModel` give its time; when it has run it is
   **committed** (:class:`~kvbudget.simulator.step_commit.StepCommit`, vLLM's
   ``update_from_output``).

Per-request state lives in numpy arrays indexed by the workload row, in vLLM's vocabulary
(``num_tokens``: prompt plus generated, ``num_computed_tokens``: those in the KV cache,
``num_output_tokens``, ``num_blocks``). Engine variants
(:mod:`kvbudget.simulator.engine_variants`) override the hooks :class:`Scheduler` lists.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from kvbudget.perf.cost_model import CostModel, StepFeatures
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.kv_blocks import KVBlocks
from kvbudget.simulator.prefix_cache import PrefixCaching
from kvbudget.simulator.request_queue import make_request_queue
from kvbudget.simulator.request_rows import RequestColumns, RowArrays
from kvbudget.simulator.running_loop import NO_ROWS, RunningArray, RunningPrefix, budget_prefix
from kvbudget.simulator.serving import FloatArray, IntArray
from kvbudget.simulator.spec_decode import SpecDecode
from kvbudget.simulator.step_commit import StepCommit
from kvbudget.simulator.token_segments import TokenSegments

if TYPE_CHECKING:
    from kvbudget.simulator.remote_kv import RemoteLoads

__all__ = ["EngineHooks", "FloatArray", "IntArray", "RequestColumns", "Scheduler"]


@dataclass(slots=True)
class EngineHooks:
    """How the engine tells its executor what happened, and what it reads of it."""

    on_finish: Callable[[int, float], None]
    on_preempt: Callable[[int, float], None]
    next_external_s: Callable[[], float]
    gateway_state: Callable[[], tuple[int, int]]


class Scheduler:
    """One engine replica's state and what a step does to it (schedule, features; its commit
    is ``commit``, a :class:`~kvbudget.simulator.step_commit.StepCommit`), without the clock.
    Requests are workload rows ``i``.

    **Hooks** an engine variant overrides (each calls ``super()`` or replaces the base whole):

    * :meth:`_admit_waiting` ``(i, n_new) -> str``: may waiting ``i`` start with ``n_new``
      tokens this step; allocate its blocks and return "", or return why not;
    * :meth:`_on_schedule_waiting` ``()``: before a step's waiting loop;
    * :meth:`_load_waiting` ``(i) -> bool``: whether waiting ``i`` loads its KV from another
      tier (a CPU offload tier) instead of starting this step;
    * :meth:`_schedule_running` ``(budget)``: the running loop when a request the token budget
      reaches does not get its blocks (SGLang retracts first);
    * :meth:`_victim` ``() -> int``, :meth:`_preempt` ``(i)``: who is preempted when blocks
      run out, and how (recompute here, swap in vllm-swap);
    * :meth:`_on_abort` ``(i)``: ``i`` leaves by an abort (before its blocks are freed);
    * :meth:`_on_steps` ``(preempted, k)``: before ``k`` scheduled steps commit;
    * :meth:`_on_idle` ``()``: nothing is running or waiting;
    * :meth:`_jump_limit` ``(k_max, alloc_cum) -> int``: with skip-ahead, how many steps of a
      planned decode run keep the waiting head refused;
    * :meth:`_start_running` ``(i)``, :meth:`_stop_running` ``(rows)``: rows join or leave
      ``running``; call ``super()`` (TensorRT-LLM keeps a sum over the running requests);
    * ``Engine.stats`` (the variant's figures, added to the base's), ``Engine._held_until_s``
      (when work the variant holds outside the queues, KV being loaded, is ready);
    * ``rows`` (:class:`~kvbudget.simulator.request_rows.RowArrays`): per-request arrays of a
      variant, registered (``rows.add``) so that ``Engine.grow_rows`` grows them, or
      ``rows_grow = False`` when they follow from the columns;
    * :attr:`decode_group`: False when a hook reads running requests' arrays between steps
      (skip-ahead then keeps no decode group, nor ``spec_run.SpecGroup``).

    A hook may use the request arrays (``num_tokens``, ``num_computed_tokens``,
    ``num_output_tokens``, ``num_blocks``, ``prompt_tokens``, ``max_output_tokens``,
    ``target_output``, ``num_preemptions``, ``recomputed_tokens``), ``running``, ``waiting``,
    ``config``, ``block_size``, ``watermark_blocks``, ``t``, ``num_steps``, ``hooks``, ``kv``
    (:class:`~kvbudget.simulator.kv_blocks.KVBlocks`) and the public methods; nothing
    underscored of the base. With a decode group, a hook that runs while requests run reads
    their output tokens and blocks through :meth:`running_output_tokens` and
    ``kv.num_running_blocks``, never their arrays; one that preempts or retracts runs after
    the group is dissolved, so the arrays are current there.
    """

    decode_group: ClassVar[bool] = True  # (see above)
    rows_grow: ClassVar[bool] = True  # (see above)
    # the waiting loop is vLLM's own: neither _admit_waiting nor _on_schedule_waiting
    # overridden (set per class; SkipAheadEngine._admit_in_run relies on it)
    vllm_waiting_loop: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.vllm_waiting_loop = (cls._admit_waiting, cls._on_schedule_waiting) == cls._vllm_waiting

    def __init__(self, config: EngineConfig, cost_model: CostModel, columns: RequestColumns, *,
                 num_gpu_blocks: int, hooks: EngineHooks) -> None:
        self.config = config
        self.cost = cost_model
        self.hooks = hooks
        # the engine's sizes and a step's limits, checked as vLLM checks them at start-up
        if num_gpu_blocks < 1:
            raise ValueError(f"num_gpu_blocks must be >= 1, got {num_gpu_blocks!r}")
        self.block_size = config.block_size
        self.num_gpu_blocks = num_gpu_blocks
        self.capacity_tokens = cap = num_gpu_blocks * config.block_size
        self.max_model_len = cap if config.max_model_len is None else min(cap, config.max_model_len)
        if (not config.enable_chunked_prefill and config.name in ("vllm", "vllm-swap")
                and config.batched_tokens_limit < self.max_model_len):
            # vLLM's SchedulerConfig refuses this at start-up: without chunking a prompt is
            # prefilled in one step, so one longer than a step's budget could never run
            raise ValueError(
                f"enable_chunked_prefill = false needs max_num_batched_tokens >= max_model_len, "
                f"got {config.batched_tokens_limit} < {self.max_model_len} (vLLM refuses to "
                "start: a longer prompt could never be scheduled); raise max_num_batched_tokens "
                "or set max_model_len")
        self.seqs_limit = config.seqs_limit
        self.tokens_limit = config.batched_tokens_limit
        self.watermark_blocks = int(config.watermark * num_gpu_blocks)
        self._set_columns(columns)
        n = len(columns.prompt_tokens)
        # per-request state (vLLM names), each with the value a new row starts with
        self.rows = rows = RowArrays()
        self.num_tokens = rows.add("num_tokens", np.zeros(n, np.int64), 0)
        self.num_computed_tokens = rows.add("num_computed_tokens", np.zeros(n, np.int64), 0)
        self.num_output_tokens = rows.add("num_output_tokens", np.zeros(n, np.int64), 0)
        self.first_token_s = rows.add("first_token_s", np.full(n, np.nan), math.nan)
        self.finished_s = rows.add("finished_s", np.full(n, np.nan), math.nan)
        self.num_preemptions = rows.add("num_preemptions", np.zeros(n, np.int64), 0)
        self.recomputed_tokens = rows.add("recomputed_tokens", np.zeros(n, np.int64), 0)
        self.num_recomputed_tokens = self.num_preemptions_total = 0
        # queues: ``running`` changes only through _start_running and _stop_running
        self.running: list[int] = []
        self._running_array = RunningArray()
        self.waiting = make_request_queue(config.scheduling_policy, self.priority, self.arrival_s)
        self.in_engine = rows.add("in_engine", np.zeros(n, np.bool_), 0)
        self._step_extra_s = 0.0  # seconds a hook adds to the current step (swap transfers)
        self._hol_blocked = False  # this step's waiting head was refused for lack of KV
        self.head_refusal = ""  # why the waiting loop stopped: "", seqs, budget, kv, policy
        self.remote: RemoteLoads | None = None  # a disaggregated decode replica's KV loads
        # the KV blocks, shared by prompt prefixes of equal hashes with prefix caching
        prefix = None
        if config.enable_prefix_caching and columns.prefix_hashes is not None:
            prefix = PrefixCaching(config.block_size, columns.prompt_tokens, columns.prefix_hashes,
                                   columns.prefix_offsets, columns.prefix_block_tokens)
        self.kv = KVBlocks(num_gpu_blocks, config.block_size, n, prefix)
        self._steps_rows: IntArray | None = None  # the rows of the steps being committed
        self.t = 0.0  # when the last step ended
        self.num_steps = 0  # the steps that have ended
        # inter-token gaps (ITL): each request's runs of tokens in consecutive steps
        self.segments = TokenSegments(n)
        self.spec: SpecDecode | None = None  # speculative decoding (make_engine sets it)
        self.commit = StepCommit(self, on_finish=hooks.on_finish, stop_running=self._stop_running)

    def _set_columns(self, columns: RequestColumns) -> None:  # the workload's, or a replica's
        self.prompt_tokens = columns.prompt_tokens
        self.target_output = out = columns.output_tokens
        self.priority = (columns.priority if self.config.scheduling_policy == "priority"
                         else np.zeros(len(out), np.int64))
        self.arrival_s = columns.arrival_s
        self.tier_priority = columns.priority  # each row's tier (speculative acceptance)
        most = columns.max_output_tokens
        self.max_output_tokens = out if most is None else most

    # --- what hooks may use ----------------------------------------------------------------
    def running_rows(self) -> IntArray:  # ``running`` as an array (read-only)
        return self._running_array.of(self.running)

    def running_output_tokens(self) -> IntArray:
        """The running requests' ``num_output_tokens``, in ``running`` order, as of the step
        being scheduled (a new array)."""
        return self.num_output_tokens[self.running_rows()]

    def scheduled_with_output(self) -> bool:
        """While :meth:`_on_steps` runs: whether a request of the steps being committed had
        output tokens before them (decoding, or computing its KV again after a preemption)."""
        rows = self._steps_rows
        assert rows is not None, "scheduled_with_output is for _on_steps"
        return bool(self.num_output_tokens[rows].any())

    def start_tokens(self, i: int) -> int:
        """Tokens of waiting request ``i`` already in KV if it starts now: its computed tokens
        (kept across a swap), or the prefix-cache hit found for it."""
        hit = self.kv.pending_hit
        if hit is not None:
            assert self.kv.prefix is not None
            return len(hit) * self.kv.prefix.hash_tokens
        return self.num_computed_tokens.item(i)

    def add_step_time(self, seconds: float) -> None:  # to the step being scheduled (a swap)
        self._step_extra_s += seconds

    def evict_running(self, i: int, *, recompute: bool = True, front: bool = True) -> None:
        """Take running request ``i`` out of the batch and back to ``waiting`` (to its front,
        or its back): its blocks are freed and, with ``recompute``, its computed tokens
        forgotten (they are computed again when it resumes); counted as a preemption."""
        self._stop_running([i])
        self.kv.free(i)
        if self.spec is not None:
            self.spec.drop(self, i)
        if recompute:
            self.num_recomputed_tokens += self.num_computed_tokens.item(i)
            self.recomputed_tokens[i] += self.num_computed_tokens.item(i)
            self.num_computed_tokens[i] = 0
        self.num_preemptions[i] += 1
        self.num_preemptions_total += 1
        (self.waiting.prepend_request if front else self.waiting.add_request)(i)
        self.hooks.on_preempt(i, self.t)

    # --- KV blocks (kvbudget.simulator.kv_blocks) --------------------------------------------
    def allocate_slots(self, i: int, num_new_tokens: int, *, reserve: int = 0) -> bool:
        """Blocks for ``num_computed_tokens + num_new_tokens`` tokens; False when they do not
        fit (keeping ``reserve`` blocks free). vLLM returns None there."""
        tokens = self.num_computed_tokens.item(i) + num_new_tokens
        if self.spec is not None:  # vLLM's num_lookahead_tokens (spec_decode)
            tokens = min(tokens + self.spec.lookahead, self.max_model_len)
        return self.kv.allocate(i, tokens, reserve)

    def allocate_start(self, i: int, tokens: int, *, reserve: int) -> str:
        """Blocks for the first ``tokens`` tokens of waiting request ``i`` (sharing its prefix
        hit, if any), keeping ``reserve`` blocks free: "" when allocated, else "kv"."""
        kv = self.kv
        if self.spec is not None:  # vLLM's num_lookahead_tokens (spec_decode)
            tokens = min(tokens + self.spec.lookahead, self.max_model_len)
        if kv.pending_hit is None:  # allocate_slots for the tokens beyond the computed ones
            return "" if kv.allocate(i, tokens, reserve) else "kv"
        hit_tokens = kv.allocate_hit(i, tokens, reserve, self.num_tokens.item(i))
        if hit_tokens < 0:
            return "kv"
        self.num_computed_tokens[i] = hit_tokens
        return ""

    # --- hooks (see the class docstring) ------------------------------------------------------
    def _admit_waiting(self, i: int, n_new: int) -> str:
        """Refusals: "kv" (no blocks), "policy" (an engine admission rule); changing nothing.
        vLLM: ``allocate_slots`` keeping the watermark."""
        return self.allocate_start(i, self.start_tokens(i) + n_new, reserve=self.watermark_blocks)

    def _on_schedule_waiting(self) -> None:
        pass

    _vllm_waiting = (_admit_waiting, _on_schedule_waiting)  # (vllm_waiting_loop)

    def _load_waiting(self, i: int) -> bool:
        """Never here; a hook returning True (``i``'s prefix-cache hit looked up) has allocated
        and taken ``i`` out of ``waiting``."""
        return False

    def _victim(self) -> int:
        """The running request preempted when blocks run out: of the lowest priority (highest
        value), the latest arrival (vLLM v1's ``running.pop()``), or with
        ``preemption_victim="most_blocks"`` the one holding the most KV blocks, then the
        latest arrival; ties go to the latest scheduled. The one place the rule is written:
        every engine class, the speed-ups included, preempts through it."""
        rows = self.running_rows()
        if self.config.scheduling_policy == "priority":
            prio = self.priority[rows]
            rows = rows[prio == prio.max()]
        if self.config.preemption_victim == "most_blocks":
            blocks = self.kv.num_blocks[rows]
            rows = rows[blocks == blocks.max()]
        # the last of the latest arrivals (argmax finds the first maximum: search in reverse)
        return int(rows[len(rows) - 1 - int(self.arrival_s[rows][::-1].argmax())])

    def _preempt(self, i: int) -> None:
        """By recompute (vLLM v1), to the front of ``waiting``."""
        self.evict_running(i)

    def _on_abort(self, i: int) -> None:  # (the hooks: the class docstring)
        pass

    def _on_steps(self, preempted: bool, k: int) -> None:
        pass

    def _on_idle(self) -> None:
        pass

    def _jump_limit(self, k_max: int, alloc_cum: IntArray) -> int:
        """How many steps of a planned decode run keep the waiting head refused (step ``j <
        k_max`` takes ``alloc_cum[j]`` more blocks than step 0). vLLM's refusals (seats, budget,
        blocks) cannot lift during a decode run but for one: with prefix caching, a step that
        evicts an unused cached prefix may evict part of the head's hit, whose blocks then
        count as free, so the head may fit: the run stops before the first step that evicts."""
        if self.remote is not None and self.remote.notices:
            return 1  # a request whose KV arrives joins the front (remote_kv.LoadNotices)
        kv = self.kv
        if kv.prefix is not None and self.head_refusal == "kv" and kv.prefix_hit_blocks()[1]:
            free = kv.num_free_blocks
            if int(alloc_cum[k_max - 1]) > free:
                return max(int(np.searchsorted(alloc_cum[:k_max], free, side="right")), 1)
        return k_max

    # --- the running set ------------------------------------------------------------------
    def _start_running(self, i: int) -> None:
        self.running.append(i)
        self.commit.all_decode = self.commit.synced = False
        self._running_array.started(i, len(self.running))

    def _stop_running(self, rows: list[int]) -> None:
        if len(rows) <= 4:  # a few at a time: removing them one by one is cheaper
            for i in rows:
                self.running.remove(i)
        else:
            done = set(rows)
            self.running = [i for i in self.running if i not in done]
        self._running_array.stopped()

    def _abort_now(self, i: int) -> None:  # (between steps)
        if not self.in_engine.item(i):
            return
        self._on_abort(i)
        if self.spec is not None:
            self.spec.drop(self, i)
        if i in self.running:
            self._stop_running([i])
        else:
            self.waiting.remove_request(i)
        self.kv.free(i)
        self.in_engine[i] = False

    def _budget_prefix(self, rows: IntArray, budget: int) -> RunningPrefix:
        """``budget_prefix`` of running ``rows`` (with speculation's lookahead slots)."""
        spec = self.spec
        return budget_prefix(rows, self.num_tokens, self.num_computed_tokens, self.kv.num_blocks,
                             budget, self.block_size, 0 if spec is None else spec.lookahead,
                             self.max_model_len)

    # --- one step: schedule ------------------------------------------------------------------
    def _schedule(self) -> tuple[IntArray, IntArray, list[tuple[int, int]], bool]:
        """vLLM v1 ``schedule()`` (the module docstring): the running rows, their new tokens,
        the waiting requests that start (row, new tokens: vLLM's ``scheduled_new_reqs``) and
        whether a request was preempted."""
        budget = self.tokens_limit
        self._step_extra_s = 0.0
        self._hol_blocked = False
        self.head_refusal = ""
        fit = self._schedule_fit(budget)
        if fit is not None:
            rows, new, num_new = fit
            budget -= num_new
            preempted = False
        else:
            sched, sched_new, preempted, budget = self._schedule_running(budget)
            rows = np.asarray(sched, dtype=np.int64)
            new = np.asarray(sched_new, dtype=np.int64)
        started, budget = ([], budget) if preempted else self._schedule_waiting(budget)
        # the invariants, on every path: the budget, the seats, every block free, held or
        # cached (not while a decode group's num_blocks lag; every row's only under a KV load)
        assert budget >= 0, "the token budget is overspent"
        assert len(self.running) <= self.seqs_limit, "max_num_seqs exceeded"
        free = self.kv.num_free_blocks
        assert free >= 0, "more blocks taken than the GPU holds"
        if fit is None or len(rows) > 0 or not self.running:
            held = self.kv.num_held_blocks
            assert (held(self.running_rows()) + free == self.num_gpu_blocks
                    or held() + free == self.num_gpu_blocks), "blocks lost"
        return rows, new, started, preempted

    def _schedule_fit(self, budget: int) -> tuple[IntArray, IntArray, int] | None:
        """The running loop when every request the budget reaches gets its blocks (the common
        case, :mod:`~kvbudget.simulator.running_loop`): rows, new tokens, their sum, the blocks
        taken; None, changing nothing, when one does not."""
        if not self.running:
            return NO_ROWS, NO_ROWS, 0
        prefix = self._budget_prefix(self.running_rows(), budget)
        if prefix.num_extra > self.kv.num_available_blocks:
            return None
        if prefix.num_extra:
            self.kv.num_blocks[prefix.rows] = prefix.want
            self.kv.take(prefix.num_extra)
        return prefix.rows, prefix.new, prefix.num_new

    def _schedule_running(self, budget: int) -> tuple[list[int], list[int], bool, int]:
        """The running loop with preemption (the module docstring's step 1): rows, new tokens,
        whether one was preempted, the budget left."""
        sched: list[int] = []
        new: list[int] = []
        preempted = False
        idx = 0
        while idx < len(self.running) and budget > 0:
            # the requests from ``idx`` on that get their blocks without preempting, in one go
            prefix = self._budget_prefix(self.running_rows()[idx:], budget)
            taken = np.add.accumulate(prefix.want - prefix.blocks)
            # taken never decreases: the first request whose blocks do not fit, if any
            ok = int(taken.searchsorted(self.kv.num_available_blocks, side="right"))
            if ok:
                self.kv.num_blocks[prefix.rows[:ok]] = prefix.want[:ok]
                self.kv.take(int(taken[ok - 1]))
                sched.extend(prefix.rows[:ok].tolist())
                ok_new = prefix.new[:ok].tolist()
                new.extend(ok_new)
                budget -= sum(ok_new)
                idx += ok
            if idx >= len(self.running) or budget <= 0:
                break
            # running[idx] does not fit: preempt until it does (or is preempted itself)
            i = self.running[idx]
            n_new = min(self.num_tokens.item(i) - self.num_computed_tokens.item(i), budget)
            while not self.allocate_slots(i, n_new):
                victim = self._victim()
                preempted = True
                if victim in sched:  # scheduled already: its tokens go back to the budget
                    k = sched.index(victim)
                    budget += new[k]
                    del sched[k], new[k]
                    idx -= 1
                self._preempt(victim)
                if victim == i:
                    return sched, new, preempted, budget
            sched.append(i)
            new.append(n_new)
            budget -= n_new
            idx += 1
        return sched, new, preempted, budget

    def _schedule_waiting(self, budget: int) -> tuple[list[tuple[int, int]], int]:
        """The waiting loop (step 2): the head starts while seats, budget and
        :meth:`_admit_waiting` allow; the first refusal stops it (``head_refusal`` says why).
        Returns those that start (row, new tokens) and the budget left."""
        self._on_schedule_waiting()
        remote = self.remote  # requests whose KV arrived (and was noticed) go first
        if remote is not None and (remote.loaded or remote.notices.order):
            remote.promote(self.waiting, self.t, self.num_steps)
        started: list[tuple[int, int]] = []
        waiting = self.waiting
        kv = self.kv
        while True:
            if len(self.running) >= self.seqs_limit or budget <= 0:
                self.head_refusal = "seqs" if len(self.running) >= self.seqs_limit else "budget"
                break
            i_w = waiting.peek_request()
            if i_w is None:
                break
            kv.pending_hit = None
            if kv.prefix is not None and self.num_computed_tokens.item(i_w) == 0:
                kv.look_up(i_w, self.num_tokens.item(i_w))
                if self._load_waiting(i_w):
                    continue  # its KV loads from elsewhere; the loop goes on (vLLM skips it)
            n_new = self.num_tokens.item(i_w) - self.start_tokens(i_w)
            if n_new > budget and not self.config.enable_chunked_prefill:
                self.head_refusal = "budget"
                break
            n_new = min(n_new, budget)
            refusal = self._admit_waiting(i_w, n_new)
            if refusal:
                self.head_refusal = refusal
                self._hol_blocked = True
                break
            waiting.pop_request()
            if remote is not None:
                if i_w in remote.pending:  # WAITING_FOR_REMOTE_KVS: its blocks held while
                    remote.start_load(i_w)  # its KV loads
                    continue
                if remote.loaded:  # its KV is here (loaded): it runs
                    remote.loaded.pop(i_w, None)
            self._start_running(i_w)
            started.append((i_w, n_new))
            budget -= n_new
        return started, budget

    def _step_seconds(self, features: StepFeatures) -> float:
        """Its features priced, plus what hooks added (:meth:`add_step_time`)."""
        return float(self.cost.step_time(*features)) + self._step_extra_s
