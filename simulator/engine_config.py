"""Engine knobs under vLLM's own names."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, get_args

from kvbudget.perf.models import KV_CACHE_DTYPES
from kvbudget.perf.speculative import SpeculativeConfig
from kvbudget.perf.vllm_defaults import GPU_MEMORY_UTILIZATION, batch_defaults

if TYPE_CHECKING:
    from kvbudget.perf.hardware import GPUSpec

EngineName = Literal["vllm", "vllm-swap", "tgi", "sglang", "trtllm"]
ENGINE_NAMES: tuple[EngineName, ...] = ("vllm", "vllm-swap", "tgi", "sglang", "trtllm")
EngineDefaults = Literal["vllm", "kvbudget-0.1"]
ENGINE_DEFAULTS: tuple[EngineDefaults, ...] = ("vllm", "kvbudget-0.1")
# what an engine built straight from EngineConfig() (no GPU to pick for) uses, and the
# defaults of kvbudget 0.1: 256 sequences, 8,192 tokens a step, 0.9 of memory, no prefix cache
FALLBACK_MAX_NUM_SEQS = 256
FALLBACK_MAX_NUM_BATCHED_TOKENS = 8192


MAX_BLOCK_SIZE = 65_536
"""Beyond any engine's KV block (vLLM's ``--block-size`` choices stop at 128 tokens)."""
MAX_KV_TOKENS = 2**40
"""About 10^12 tokens of KV cache: more than a petabyte at any model's bytes per token."""
MAX_COUNT = 2**31 - 1
"""Bound of the scheduler's counts (``max_num_seqs``, ``max_num_batched_tokens``)."""
MAX_SWAP_SPACE_GIB = 65_536.0
"""64 TiB of host memory per GPU for swapped-out KV blocks: more than any server has."""
TGI_MAX_CONCURRENT_REQUESTS = 128
"""TGI's ``--max-concurrent-requests`` default (text-generation-inference v3.3.7,
``launcher/src/main.rs:648``, ``#[clap(default_value = "128")]``)."""
QUEUE_CAP_ENGINES: dict[str, tuple[str, ...]] = {
    "max_num_queued_reqs": ("vllm", "vllm-swap"),
    "max_num_queued_tokens": ("vllm", "vllm-swap"),
    "max_queued_requests": ("sglang",),
    "max_concurrent_requests": ("tgi",),
}
"""The engines' own queue caps (:mod:`kvbudget.simulator.queue_caps`) and the engines that
have each."""
ASYNC_SCHEDULING: dict[str, bool] = {
    # vLLM 0.32.0: on unless pooling, some speculative methods or PP on the V1 model runner
    # (vllm/config/vllm.py:1585-1644); two batches in flight (max_concurrent_batches,
    # config/vllm.py:577-587; v1/engine/core.py, step_with_batch_queue)
    "vllm": True,
    # vLLM v0's swap preemption predates it
    "vllm-swap": False,
    # SGLang's overlap scheduler (on unless --disable-overlap-schedule) runs one batch ahead
    "sglang": True,
    # TensorRT-LLM's overlap scheduler (PyTorch backend; disable_overlap_scheduler=False)
    "trtllm": True,
    # TGI's router awaits each prefill/decode call (backends/v3/src/backend.rs:129-295)
    "tgi": False,
}
"""Whether each engine schedules the next step while one runs (``async_scheduling``'s default
under ``defaults="vllm"``)."""
KV_OFFLOADING_BACKENDS: tuple[str, ...] = ("native", "lmcache")
"""vLLM 0.32.0's ``kv_offloading_backend`` choices (``vllm/config/cache.py:272``); kvbudget
models ``native`` (the ``OffloadingConnector``: :mod:`kvbudget.simulator.kv_offload`)."""
MAX_CONSERVATIVENESS = 100.0
"""SGLang's ``--schedule-conservativeness`` scales its new-token-ratio estimate (default 1.0);
a hundred times more conservative admits next to nothing."""

SchedulingPolicy = Literal["fcfs", "priority"]
PreemptionMode = Literal["recompute", "swap"]
PreemptionVictim = Literal["latest_arrival", "most_blocks"]
CapacitySchedulerPolicy = Literal["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"]
KNOB_CHOICES: dict[str, tuple[str, ...]] = {
    "scheduling_policy": get_args(SchedulingPolicy),
    "preemption_mode": get_args(PreemptionMode),
    "preemption_victim": get_args(PreemptionVictim),
    "capacity_scheduler_policy": get_args(CapacitySchedulerPolicy),
}
"""The knobs with a few choices: what their types say, checked (a scenario file or a Python
caller may pass any string)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One serving engine (a replica): its KV cache and scheduler limits.

    ``num_gpu_blocks`` overrides the capacity computed from the GPU and model presets (vLLM's
    ``--num-gpu-blocks-override``). ``scheduling_policy`` is vLLM's ``--scheduling-policy``:
    ``fcfs`` serves the waiting queue in arrival order (preempted requests go back to its front);
    ``priority`` orders it by (tier priority, arrival). In both, the preemption victim is the
    running request of lowest priority, then latest arrival (under ``fcfs`` every request has the
    same priority, so it is the latest arrival, as ``running.pop()`` in vLLM v1);
    ``preemption_victim="most_blocks"`` picks, among the lowest priority, the request holding
    the most KV blocks instead (then the latest arrival): not a vLLM knob, an engine option to
    study the rule (``vllm`` and ``vllm-swap`` only: the other engines pick their own victims,
    or never preempt).
    ``watermark`` keeps that fraction of blocks free when admitting waiting requests (vLLM v0's
    block-manager watermark, 0.01 there; v1 has none, hence the default 0).
    ``skip_ahead`` computes runs of pure-decode steps analytically instead of one by one; results
    are identical (tests compare both).

    ``name`` picks the engine's behaviour (``kvbudget.simulator.engine_variants``): ``vllm`` (the above),
    ``vllm-swap`` (vLLM v0's ``--preemption-mode swap``: preempted KV moves to
    ``swap_space_gib`` of host memory over PCIe and back; ``preemption_mode="swap"`` means the
    same), ``tgi`` (worst-case block reservation at admission, head-of-line blocking, never
    preempts), ``sglang`` (its ``new_token_ratio`` admission with ``schedule_conservativeness``,
    and ``retract_decode``), ``trtllm`` (``capacity_scheduler_policy`` ``GUARANTEED_NO_EVICT``
    or ``MAX_UTILIZATION``). ``enable_prefix_caching`` shares the KV of equal prompt prefixes
    where the workload has prefix hashes (vLLM's flag).

    ``None`` for ``max_num_seqs``, ``max_num_batched_tokens``, ``gpu_memory_utilization`` and
    ``enable_prefix_caching`` means the engine's own default, which :meth:`resolved` fills in
    for a GPU (the simulation does it): under ``defaults="vllm"`` what vLLM 0.32.0's ``vllm
    serve`` picks for that GPU (:func:`kvbudget.perf.vllm_defaults.batch_defaults`; 0.92 of
    memory; prefix caching on for ``vllm``, off for the other engines, whose presets model it
    off), under ``defaults="kvbudget-0.1"`` kvbudget 0.1's (256, 8,192, 0.9, off).
    ``profile_cudagraph_memory``: the KV cache is sized after CUDA-graph memory is taken off, as
    vLLM does since v0.21 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``); ``False`` for older
    versions, which captured the graphs in the ``1 - gpu_memory_utilization`` slack.
    ``tensor_parallel_size`` GPUs serve the replica, the model's weights and KV heads sharded
    over them (vLLM's ``--tensor-parallel-size``; the KV blocks counted are each GPU's, every
    block spanning all of them); ``enable_expert_parallel`` places an MoE model's routed
    experts whole on the GPUs instead of sharding each (vLLM's ``--enable-expert-parallel``).
    ``kv_cache_dtype`` is vLLM's ``--kv-cache-dtype``: ``auto`` (the model's 16-bit dtype),
    ``fp8`` (= ``fp8_e4m3``) or ``fp8_e5m2`` (1 byte per element: twice the tokens per block's
    memory).

    The engine's own queue caps, each under its engine's name and only for that engine
    (``None``: no cap; :mod:`kvbudget.simulator.queue_caps` says what each counts):
    ``max_num_queued_reqs`` and ``max_num_queued_tokens`` (vLLM's, 503),
    ``max_queued_requests`` (SGLang's, 503), ``max_concurrent_requests`` (TGI's router, 429;
    under ``defaults="vllm"`` :meth:`resolved` gives ``tgi`` TGI's own default, 128).

    ``async_scheduling`` (vLLM's ``--async-scheduling``): the engine schedules step N+1 while
    step N runs, so a request that comes during step N (or between N and N+1) is first
    scheduled in step N+2: one more step before its first token on a busy engine; on an idle
    one it starts at once. ``None``: the engine's default under ``defaults="vllm"``
    (:data:`ASYNC_SCHEDULING`: on for vLLM, SGLang's and TensorRT-LLM's overlap schedulers;
    off for TGI and vLLM with swap, and with ``ngram`` speculative decoding, which vLLM
    0.32.0 runs without it: ``vllm/config/vllm.py:1597-1610``), off under ``kvbudget-0.1``. What is not modelled: a
    request that finishes in step N still holds its slot and blocks in N+1's schedule (one
    step of each replacement at the caps), and a step N+1 scheduled for a request that ends
    by its stop token in N.
    ``speculative_config``: vLLM's speculative decoding (:mod:`kvbudget.simulator.spec_decode`).
    """

    block_size: int = 16
    num_gpu_blocks: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    scheduling_policy: SchedulingPolicy = "fcfs"
    preemption_mode: PreemptionMode = "recompute"
    preemption_victim: PreemptionVictim = "latest_arrival"
    watermark: float = 0.0
    enable_chunked_prefill: bool = True
    skip_ahead: bool = True
    name: EngineName = "vllm"
    swap_space_gib: float = 4.0
    schedule_conservativeness: float = 1.0
    capacity_scheduler_policy: CapacitySchedulerPolicy = "GUARANTEED_NO_EVICT"
    enable_prefix_caching: bool | None = None
    profile_cudagraph_memory: bool = True
    tensor_parallel_size: int = 1
    enable_expert_parallel: bool = False
    kv_cache_dtype: str = "auto"
    max_num_queued_reqs: int | None = None
    max_num_queued_tokens: int | None = None
    max_queued_requests: int | None = None
    max_concurrent_requests: int | None = None
    async_scheduling: bool | None = None
    speculative_config: SpeculativeConfig | None = None
    kv_offloading_size: float | None = None
    kv_offloading_backend: str = "native"

    def __post_init__(self) -> None:
        self._check_sizes()
        for name, choices in KNOB_CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(f"{name} must be {' or '.join(map(repr, choices))}, got {value!r}")
        if self.name not in ENGINE_NAMES:
            raise ValueError(f"name: unknown engine {self.name!r}; known engines: "
                             f"{', '.join(ENGINE_NAMES)}")
        if self.kv_cache_dtype != "auto" and self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                f"got {self.kv_cache_dtype!r}"
            )
        # vllm + swap and vllm-swap are one engine: normalise to both names agreeing
        if self.name == "vllm" and self.preemption_mode == "swap":
            object.__setattr__(self, "name", "vllm-swap")
        elif self.name == "vllm-swap":
            object.__setattr__(self, "preemption_mode", "swap")
        elif self.preemption_mode == "swap":
            raise ValueError(f"preemption_mode 'swap' is vLLM's; engine {self.name!r} recomputes")
        if self.preemption_victim != "latest_arrival" and self.name not in ("vllm", "vllm-swap"):
            raise ValueError(f"preemption_victim {self.preemption_victim!r} is for vllm and "
                             f"vllm-swap; engine {self.name!r} picks its own victims (or never "
                             "preempts)")
        for knob, engines in QUEUE_CAP_ENGINES.items():
            if getattr(self, knob) is not None and self.name not in engines:
                raise ValueError(f"{knob} is {' and '.join(engines)}'s queue cap; engine "
                                 f"{self.name!r} has none by that name")
        if self.async_scheduling and self.name == "tgi":
            raise ValueError("async_scheduling: TGI's router schedules each step after the "
                             "last one's output (it has no such option)")
        if self.speculative_config is not None and self.name not in ("vllm", "vllm-swap"):
            raise ValueError(f"engine.speculative_config is modelled as vLLM runs it (vllm, "
                             f"vllm-swap); engine {self.name!r} has none here")
        if self.name == "vllm-swap" and self.enable_prefix_caching:
            raise ValueError("enable_prefix_caching is not modelled with swap preemption")
        if self.speculative_config is not None and self.kv_offloading_size is not None:
            raise ValueError("engine.speculative_config with engine.kv_offloading_size is not "
                             "modelled together yet: give one of them")
        self._check_offloading()

    def _check_offloading(self) -> None:
        """vLLM's KV offloading knobs (``kv_offloading_size`` GiB, ``kv_offloading_backend``):
        the native CPU tier of vLLM v1 (:mod:`kvbudget.simulator.kv_offload`)."""
        if self.kv_offloading_backend not in KV_OFFLOADING_BACKENDS:
            raise ValueError(f"engine.kv_offloading_backend must be one of "
                             f"{', '.join(KV_OFFLOADING_BACKENDS)}, got "
                             f"{self.kv_offloading_backend!r}")
        size = self.kv_offloading_size
        if size is None:
            return
        if isinstance(size, bool) or not isinstance(size, int | float) or not 0 < size <= (
                MAX_SWAP_SPACE_GIB):
            raise ValueError(f"engine.kv_offloading_size must be in (0, "
                             f"{MAX_SWAP_SPACE_GIB:g}] GiB, got {size!r}")
        if self.kv_offloading_backend != "native":
            raise ValueError("engine.kv_offloading_backend 'lmcache' is not modelled (its store "
                             "is a separate LMCache server; vLLM does not pass it "
                             "kv_offloading_size): use 'native'")
        if self.name != "vllm":
            raise ValueError(f"engine.kv_offloading_size is vLLM v1's CPU offloading; engine "
                             f"{self.name!r} has none modelled")
        if self.enable_prefix_caching is False:
            raise ValueError("engine.kv_offloading_size needs engine.enable_prefix_caching: the "
                             "CPU tier is keyed by the prefix cache's block hashes")

    def check_offloading_fits(self, gpu: GPUSpec) -> None:
        """``kv_offloading_size`` (the total over the tensor-parallel ranks, as vLLM reads it)
        within the host memory of the replica's GPUs (``GPUSpec.host_memory_bytes``, where
        known)."""
        size, host = self.kv_offloading_size, gpu.host_memory_bytes
        tp = self.tensor_parallel_size
        if size is not None and host is not None and size * 1024**3 > host * tp:
            raise ValueError(
                f"kv_offloading_size {size:g} GiB is more than the host memory of the "
                f"replica's {tp} GPU(s) ({host * tp / 1024**3:g} GiB: {host / 1024**3:g} GiB per "
                f"{gpu.name}, GPUSpec.host_memory_bytes)")

    def _ngram(self) -> bool:
        """Speculative decoding by n-gram (vLLM 0.32.0 turns async scheduling off for it)."""
        spec = self.speculative_config
        return spec is not None and spec.method == "ngram"

    def _check_sizes(self) -> None:
        """Every count, size and fraction within what any deployment has."""
        for name, high in (("block_size", MAX_BLOCK_SIZE), ("num_gpu_blocks", MAX_KV_TOKENS),
                           ("max_num_seqs", MAX_COUNT), ("max_num_batched_tokens", MAX_COUNT),
                           ("max_model_len", MAX_KV_TOKENS), ("max_num_queued_reqs", MAX_COUNT),
                           ("max_num_queued_tokens", MAX_KV_TOKENS),
                           ("max_queued_requests", MAX_COUNT),
                           ("max_concurrent_requests", MAX_COUNT)):
            value, low = getattr(self, name), 2 if name == "max_model_len" else 1
            if value is not None and not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
        if (self.num_gpu_blocks is not None
                and self.num_gpu_blocks * self.block_size > MAX_KV_TOKENS):
            raise ValueError(
                f"num_gpu_blocks {self.num_gpu_blocks} x block_size {self.block_size} = "
                f"{self.num_gpu_blocks * self.block_size:.3g} tokens of KV cache, beyond any "
                f"deployment (at most {MAX_KV_TOKENS:.3g})")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}"
            )
        if not 0 <= self.swap_space_gib <= MAX_SWAP_SPACE_GIB:
            raise ValueError(f"swap_space_gib must be in [0, {MAX_SWAP_SPACE_GIB:g}] GiB (more "
                             f"host memory than any server has), got {self.swap_space_gib!r}")
        if not 0 < self.schedule_conservativeness <= MAX_CONSERVATIVENESS:
            raise ValueError(
                f"schedule_conservativeness must be in (0, {MAX_CONSERVATIVENESS:g}] (SGLang's "
                f"default is 1.0), got {self.schedule_conservativeness!r}"
            )
        if not (isinstance(self.tensor_parallel_size, int) and self.tensor_parallel_size >= 1):
            raise ValueError(
                f"tensor_parallel_size must be an integer >= 1, got {self.tensor_parallel_size!r}"
            )
        if not 0 <= self.watermark < 1:
            raise ValueError(f"watermark must be in [0, 1), got {self.watermark!r}")

    @property
    def seqs_limit(self) -> int:
        """``max_num_seqs``, or the fallback when it was left to a GPU that never came."""
        return FALLBACK_MAX_NUM_SEQS if self.max_num_seqs is None else self.max_num_seqs

    @property
    def batched_tokens_limit(self) -> int:
        """``max_num_batched_tokens``, or the fallback (see :attr:`seqs_limit`)."""
        if self.max_num_batched_tokens is None:
            return FALLBACK_MAX_NUM_BATCHED_TOKENS
        return self.max_num_batched_tokens

    @property
    def memory_utilization(self) -> float:
        """``gpu_memory_utilization``, or vLLM's default 0.92 when unresolved."""
        return 0.92 if self.gpu_memory_utilization is None else self.gpu_memory_utilization

    def resolved(self, gpu: GPUSpec, defaults: EngineDefaults = "vllm") -> EngineConfig:
        """This configuration with every ``None`` knob set to ``defaults``' choice for ``gpu``."""
        if defaults not in ENGINE_DEFAULTS:
            raise ValueError(
                f"engine defaults must be one of {', '.join(ENGINE_DEFAULTS)}, got {defaults!r}"
            )
        if defaults == "vllm":
            batched, seqs = batch_defaults(gpu)
            utilization = GPU_MEMORY_UTILIZATION
            caching = self.name == "vllm"
        else:
            batched, seqs = FALLBACK_MAX_NUM_BATCHED_TOKENS, FALLBACK_MAX_NUM_SEQS
            utilization, caching = 0.9, False
        if not self.enable_chunked_prefill and self.max_model_len is not None:
            # vLLM: without chunked prefill the default budget is max(max_model_len, default)
            # (arg_utils.py:3191-3199)
            batched = max(batched, self.max_model_len)
        if self.max_num_seqs is not None or self.max_num_batched_tokens is not None:
            # vLLM: max_num_batched_tokens >= max_num_seqs (scheduler.py:330-335); a default
            # gives way to the knob that was set
            if self.max_num_seqs is not None:
                batched = max(batched, self.max_num_seqs)
            if self.max_num_batched_tokens is not None:
                seqs = min(seqs, self.max_num_batched_tokens)
        return replace(
            self,
            max_num_seqs=seqs if self.max_num_seqs is None else self.max_num_seqs,
            max_num_batched_tokens=(
                batched if self.max_num_batched_tokens is None else self.max_num_batched_tokens
            ),
            gpu_memory_utilization=(
                utilization if self.gpu_memory_utilization is None
                else self.gpu_memory_utilization
            ),
            enable_prefix_caching=(
                caching if self.enable_prefix_caching is None else self.enable_prefix_caching
            ),
            async_scheduling=(
                (defaults == "vllm" and ASYNC_SCHEDULING[self.name] and not self._ngram())
                if self.async_scheduling is None else self.async_scheduling
            ),
            max_concurrent_requests=(
                TGI_MAX_CONCURRENT_REQUESTS
                if self.name == "tgi" and defaults == "vllm" and self.max_concurrent_requests is None
                else self.max_concurrent_requests
            ),
        )
