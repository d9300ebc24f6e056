"""What a simulation runs on besides the workload and the policy: :class:`SimConfig` (GPU,
model, engine knobs, tiers, cost model, fleet) and the gateway it implies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol

from kvbudget.perf.cost_model import CostModel, FrontendCost, get_frontend
from kvbudget.perf.fitted_on import FitTarget
from kvbudget.perf.hardware import GPUSpec, get_gpu
from kvbudget.perf.kv_capacity import (
    check_holds_max_model_len,
    legacy_num_gpu_blocks,
    num_gpu_blocks,
)
from kvbudget.perf.models import ModelConfigError, ModelSpec, get_model
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.perf.speculative import check_draft_vocab_size
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.policies import DEFAULT_TIERS, GatewayConfig, TierConfig
from kvbudget.policies.clients import ClientModel
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.tiers import tier_map
from kvbudget.simulator.autoscale_config import AutoscaleConfig
from kvbudget.simulator.budget_moves import check_schedule
from kvbudget.simulator.engine_config import ENGINE_DEFAULTS, EngineConfig, EngineDefaults

if TYPE_CHECKING:
    from kvbudget.workloads.closed_loop import ClosedLoop

RouterName = Literal["round_robin", "least_tokens", "prefix_affinity"]
ROUTERS: tuple[RouterName, ...] = ("round_robin", "least_tokens", "prefix_affinity")


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Replicas, their router and where the token budget lives (see :mod:`kvbudget.simulator.fleet`)."""

    num_replicas: int = 2
    gpus: tuple[str, ...] = ()
    router: RouterName = "round_robin"
    budget: Literal["global", "per_replica"] = "global"
    autoscale: AutoscaleConfig | None = None
    """``[fleet.autoscale]`` (:mod:`kvbudget.simulator.autoscaler`): the fleet then has
    ``autoscale.max_replicas`` replicas, ``initial_replicas`` of them up at the start."""

    def __post_init__(self) -> None:
        if not (isinstance(self.num_replicas, int) and self.num_replicas >= 1):
            raise ValueError(f"num_replicas must be an integer >= 1, got {self.num_replicas!r}")
        object.__setattr__(self, "gpus", tuple(self.gpus))
        a = self.autoscale
        if a is not None and self.num_replicas not in (2, a.max_replicas):  # 2: left out
            raise ValueError(
                f"fleet.num_replicas ({self.num_replicas}) differs from "
                f"fleet.autoscale.max_replicas ({a.max_replicas}): an autoscaled fleet has "
                "max_replicas replicas (leave num_replicas out)")
        if self.gpus and len(self.gpus) != self.num_slots:
            raise ValueError(
                f"gpus names {len(self.gpus)} GPU presets for {self.num_slots} replicas; "
                "give one per replica or none"
            )
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known routers: {', '.join(ROUTERS)}")
        if self.budget not in ("global", "per_replica"):
            raise ValueError(f"budget must be 'global' or 'per_replica', got {self.budget!r}")

    @property
    def num_slots(self) -> int:
        """The fleet's replicas (engines): ``num_replicas``, or the autoscaler's maximum."""
        return self.num_replicas if self.autoscale is None else self.autoscale.max_replicas

    @property
    def num_initial(self) -> int:
        """The replicas up at the start (all but an autoscaler's ``initial_replicas``)."""
        return self.num_slots if self.autoscale is None else self.autoscale.num_initial

    def gpu_of(self, replica: int, default: str) -> str:
        return self.gpus[replica] if self.gpus else default


class Disaggregation(Protocol):
    """A deployment with a prefill and a decode pool
    (:class:`kvbudget.simulator.disagg_config.DisaggConfig`)."""

    def check(self, config: SimConfig) -> None:
        """Refuse what the run's ``config`` cannot have beside it (``ValueError``)."""
        ...


@dataclass(frozen=True, slots=True)
class ReplicaSetup:
    """One replica's configuration, resolved once (:meth:`SimConfig.replica_setup`): what a
    run passes down instead of looking the GPU and the model up, and building the step-time
    model, again at each use."""

    gpu: GPUSpec
    model: ModelSpec
    engine: EngineConfig
    """The engine knobs with every default filled in (:meth:`SimConfig.engine_for`)."""
    num_gpu_blocks: int | None
    """KV blocks (:meth:`SimConfig.resolved_num_gpu_blocks`); ``None`` where not asked for (a
    fleet's run: each replica sizes its own, on its own GPU)."""
    cost_model: CostModel
    """The step-time model (:meth:`SimConfig.resolved_cost_model`)."""


class Assumed(str):
    """A :class:`SimConfig` field's own default, which the caller did not give (``SimConfig()``
    names no GPU or model): its value is the default's, and a run says it as assumed
    (:attr:`SimConfig.defaulted`), not as given. A ``str``, equal to the name it holds; kept
    through :func:`dataclasses.replace` (the field's value passes on as it is)."""

    __slots__ = ()


ASSUMED_GPU = Assumed("H100-80GB")
ASSUMED_MODEL = Assumed("Llama-3.1-8B")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything about a simulation besides the workload and the policy.

    ``frontend_overhead_s``: what the server's API front end adds to every request outside the
    engine's steps (HTTP, request set-up, detokenisation, streaming; ``kvbudget calibrate``
    measures it and writes it into the cost-model file). It delays each completed request's
    first token and finish as its client sees them; the engine and the gateway do not see it.

    ``engine_defaults``: whose defaults fill the engine knobs left ``None`` and pick the cost
    model, the KV sizing and the API-server cost (docs/fidelity.md): ``vllm`` (what ``vllm
    serve`` 0.32.0 does on the GPU, the ``vllm-v1`` step model, KV sized as vLLM v1 sizes it) or
    ``kvbudget-0.1`` (256 sequences, 8,192 tokens a step, 0.9 of memory, no prefix caching,
    the roofline, no API-server cost: this tool's behaviour before).
    ``frontend``: the API server between the clients and the engine (``vllm-api-server``, or
    ``none`` for engine-side recordings); ``None``: ``vllm-api-server`` with the default cost
    model, ``none`` with a given one (a calibration's ``frontend_overhead_s`` stands for it)
    or under ``kvbudget-0.1``.
    ``model`` is a bundled preset name or a ``config.json`` path (:func:`get_model`); the
    engine's ``tensor_parallel_size`` shards it over that many GPUs.

    ``clients``: ``(tier, ClientModel)`` pairs (:mod:`kvbudget.policies.clients`); a tier not
    named has the ``no-retry`` client. With none (and no per-request ``timeout_s`` in the
    workload) the run is exactly what it was before client models: no ``num_attempts``
    column, no attempts table, no client figures in the summary.
    """

    gpu: str = ASSUMED_GPU
    model: str = ASSUMED_MODEL
    engine: EngineConfig = field(default_factory=EngineConfig)
    tiers: tuple[TierConfig, ...] = DEFAULT_TIERS
    cost_model: CostModel | None = None
    gateway_capacity_tokens: int | None = None
    lease_ttl_s: float | None = None
    timeline_period_s: float = 1.0
    # (time_s, budget): the gateway's budget moves then (simulator.budget_moves)
    gateway_capacity_schedule: tuple[tuple[float, int], ...] = ()
    seed: int = 0
    front_door: FrontDoor | None = None
    fleet: FleetConfig | None = None
    frontend_overhead_s: float = 0.0
    clients: tuple[tuple[str, ClientModel], ...] = ()
    engine_defaults: EngineDefaults = "vllm"
    frontend: str | None = None
    closed_loop: ClosedLoop | None = None
    disaggregation: Disaggregation | None = None  # prefill and decode pools (simulator.disagg)

    @property
    def defaulted(self) -> tuple[str, ...]:
        """``gpu``, ``model``: those the caller left to this class's defaults
        (:class:`Assumed`), which the run's summary keeps (``defaulted``) so that its
        ``simulated:`` line says them as assumed."""
        return tuple(k for k in ("gpu", "model") if isinstance(getattr(self, k), Assumed))

    def __post_init__(self) -> None:
        if self.engine_defaults not in ENGINE_DEFAULTS:
            raise ValueError(
                f"engine_defaults must be one of {', '.join(ENGINE_DEFAULTS)}, "
                f"got {self.engine_defaults!r}"
            )
        if self.frontend is not None:
            get_frontend(self.frontend)
        if not (math.isfinite(self.frontend_overhead_s) and self.frontend_overhead_s >= 0):
            raise ValueError(
                f"frontend_overhead_s must be >= 0, got {self.frontend_overhead_s!r}"
            )
        try:  # the lookups name the preset or the file; a preset's field is named here, as
            spec = get_gpu(self.gpu)  # fleet.gpus.N and disaggregation.POOL.gpu are
        except ValueError as exc:  # a GPU file's errors lead with the file and its field
            if str(self.gpu).endswith((".json", ".toml")):
                raise
            raise ValueError(_in_field("gpu", exc)) from None
        try:
            self.engine.check_offloading_fits(spec)
        except ValueError as exc:
            raise ValueError(f"engine.{exc}") from None
        try:
            model = get_model(self.model)
        except ModelConfigError:
            raise  # a config.json's: it leads with the file and its field
        except ValueError as exc:
            raise ValueError(_in_field("model", exc)) from None
        try:
            model.check_tensor_parallel(self.engine.tensor_parallel_size)
        except ValueError as exc:
            raise ValueError(f"engine.{exc}") from None
        spec_config = self.engine.speculative_config
        if spec_config is not None and spec_config.draft_vocab_size is not None:
            check_draft_vocab_size(spec_config.method, spec_config.draft_vocab_size, model)
        tiers = tier_map(self.tiers)
        if self.closed_loop is not None and self.clients:
            raise ValueError("closed_loop and clients together are not supported: a closed "
                             "loop's user sends its next request when the last one ends")
        for tier, client in self.clients:
            if tier not in tiers:
                raise ValueError(f"clients.{tier}: no such tier; tiers: {sorted(tiers)}")
            if not isinstance(client, ClientModel):
                raise ValueError(f"clients.{tier}: expected a ClientModel, got {client!r}")
        if self.gateway_capacity_tokens is not None and self.gateway_capacity_tokens < 1:
            raise ValueError(
                f"gateway_capacity_tokens must be >= 1, got {self.gateway_capacity_tokens!r}"
            )
        check_schedule(self.gateway_capacity_schedule)
        autoscaled = self.fleet is not None and self.fleet.autoscale is not None
        if self.gateway_capacity_schedule and (autoscaled or self.disaggregation is not None):
            raise ValueError("gateway_capacity_schedule moves one gateway's budget: an "
                             "autoscaled fleet's budget follows its replicas, a disaggregated "
                             "one's is per pool")
        if not 0 < self.timeline_period_s < float("inf"):
            raise ValueError(
                f"timeline_period_s must be > 0 and finite, got {self.timeline_period_s!r}")
        if self.timeline_period_s > 86_400.0:
            raise ValueError(f"timeline_period_s must be <= 86,400 s (a sample a day at the "
                             f"most), got {self.timeline_period_s!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        if self.fleet is not None:
            for i, gpu in enumerate(self.fleet.gpus):
                try:
                    get_gpu(gpu)
                except ValueError as exc:  # which of the replicas' GPUs, as a pool's is named
                    raise ValueError(f"fleet.gpus.{i}: {exc}") from None
        if self.disaggregation is not None:
            self.disaggregation.check(self)

    def replica_setup(self, gpu: str | None = None, *, with_blocks: bool = True
                      ) -> ReplicaSetup:
        """A replica's configuration resolved once, on ``gpu`` (the config's own GPU when
        ``None``): the GPU and the model looked up once each, the engine knobs with every
        default filled in, the KV blocks (``with_blocks``) and the step-time model built once.
        A run resolves it at its start and passes it down
        (:func:`kvbudget.simulator.run.simulate`)."""
        spec, model = get_gpu(gpu or self.gpu), get_model(self.model)
        engine = self._engine(spec, model)
        given = self._given_cost_model(gpu)
        return ReplicaSetup(
            gpu=spec, model=model, engine=engine,
            num_gpu_blocks=self._num_gpu_blocks(engine, spec, model) if with_blocks else None,
            cost_model=given if given is not None else self._default_cost_model(spec, model),
        )

    def engine_for(self, gpu: str | None = None) -> EngineConfig:
        """The engine knobs with every default filled in for ``gpu`` (the config's own GPU
        when ``None``)."""
        return self._engine(get_gpu(gpu or self.gpu), get_model(self.model))

    def _engine(self, spec: GPUSpec, model: ModelSpec) -> EngineConfig:
        resolved = self.engine.resolved(spec, self.engine_defaults)
        if resolved.max_model_len is None:
            # vLLM's default max_model_len is the model's context length (its config's
            # max_position_embeddings: vllm/config/model.py, _get_and_verify_max_len); a longer
            # prompt, or prompt + output, is refused (400), never served
            resolved = replace(resolved, max_model_len=model.max_position_embeddings)
        speculative = resolved.speculative_config
        if speculative is not None:  # the run's seed, the tiers' acceptance by priority
            priorities = {t.name: t.priority for t in self.tiers}
            resolved = replace(resolved,
                               speculative_config=speculative.resolved(self.seed, priorities))
        return resolved

    def resolved_num_gpu_blocks(self, gpu: str | None = None) -> int:
        """KV blocks of one replica on ``gpu``: the engine's ``num_gpu_blocks``, else as vLLM v1
        sizes them (kvbudget 0.1's estimate under ``engine_defaults = "kvbudget-0.1"``)."""
        spec, model = get_gpu(gpu or self.gpu), get_model(self.model)
        return self._num_gpu_blocks(self._engine(spec, model), spec, model)

    def _num_gpu_blocks(self, engine: EngineConfig, spec: GPUSpec, model: ModelSpec) -> int:
        if engine.num_gpu_blocks is not None:
            return engine.num_gpu_blocks
        tp, ep = _parallelism(engine)
        if self.engine_defaults == "kvbudget-0.1":
            blocks = legacy_num_gpu_blocks(
                spec, model, block_size=engine.block_size,
                gpu_memory_utilization=engine.memory_utilization,
                max_num_batched_tokens=engine.batched_tokens_limit, tensor_parallel_size=tp,
                kv_cache_dtype=engine.kv_cache_dtype,
            )
        else:
            blocks = num_gpu_blocks(
                spec, model, block_size=engine.block_size,
                gpu_memory_utilization=engine.memory_utilization,
                max_num_batched_tokens=engine.batched_tokens_limit,
                max_num_seqs=engine.seqs_limit, tensor_parallel_size=tp, expert_parallel_size=ep,
                kv_cache_dtype=_kv_cache_dtype(engine),
                profile_cudagraph_memory=engine.profile_cudagraph_memory,
            )
        if engine.name in ("vllm", "vllm-swap") and engine.max_model_len is not None:
            # a KV cache sized from the presets that cannot hold one request of max_model_len:
            # vLLM does not start (a given num_gpu_blocks is a modelling choice, kept)
            check_holds_max_model_len(
                model, spec, blocks, engine.block_size, engine.max_model_len,
                given=self.engine.max_model_len is not None, tensor_parallel_size=tp)
        return blocks

    def resolved_cost_model(self, gpu: str | None = None) -> CostModel:
        """The step-time model of a replica on ``gpu``: the given ``cost_model`` (for the
        config's own GPU), else the defaults' (``vllm-v1``, or the roofline under
        ``kvbudget-0.1``)."""
        given = self._given_cost_model(gpu)
        if given is not None:
            return given
        return self._default_cost_model(get_gpu(gpu or self.gpu), get_model(self.model))

    def _given_cost_model(self, gpu: str | None) -> CostModel | None:
        return self.cost_model if gpu is None or gpu == self.gpu else None

    def _default_cost_model(self, spec: GPUSpec, model: ModelSpec) -> CostModel:
        tp, ep = _parallelism(self.engine)
        if self.engine_defaults == "kvbudget-0.1":
            return RooflineCostModel(spec, model, tensor_parallel_size=tp,
                                     kv_cache_dtype=self.engine.kv_cache_dtype)
        return VllmStepModel(spec, model, tensor_parallel_size=tp, expert_parallel_size=ep,
                             kv_cache_dtype=_kv_cache_dtype(self.engine))

    def fit_target(self) -> FitTarget:
        """The GPU, model and parallelism of this configuration's own replicas: what a
        cost-model file is checked against (:mod:`kvbudget.perf.fitted_on`)."""
        tp, ep = _parallelism(self.engine)
        return FitTarget(get_gpu(self.gpu), get_model(self.model), tp, ep,
                         _kv_cache_dtype(self.engine))

    def resolved_frontend(self) -> FrontendCost:
        """What the API server adds to each request as its client sees it."""
        name = self.frontend
        if name is None:
            # a given cost model (calibrated: its frontend_overhead_s stands for the API
            # server) or kvbudget 0.1's defaults: none; else vLLM's API server
            default = self.cost_model is None and self.engine_defaults == "vllm"
            name = "vllm-api-server" if default else "none"
        return get_frontend(name)


def _parallelism(engine: EngineConfig) -> tuple[int, int]:
    """(tensor, expert) parallel sizes: vLLM's expert parallelism spans the TP ranks."""
    tp = engine.tensor_parallel_size
    return tp, (tp if engine.enable_expert_parallel else 1)


def _kv_cache_dtype(engine: EngineConfig) -> str:
    return engine.kv_cache_dtype


def gateway_config(config: SimConfig, capacity_tokens: int,
                   max_request_tokens: int | None = None) -> GatewayConfig:
    """The gateway of ``config`` over ``capacity_tokens`` (a request's reservation at most
    ``max_request_tokens``, where given: one replica's capacity under a fleet's budget)."""
    return GatewayConfig(
        capacity_tokens=capacity_tokens,
        tiers=config.tiers,
        lease_ttl_s=config.lease_ttl_s,
        reservation_granularity=config.engine.block_size,
        front_door=config.front_door,
        max_request_tokens=max_request_tokens,
    )


def _in_field(field: str, exc: ValueError) -> str:
    """``exc``'s message led by the field it is about (``gpu: unknown GPU preset ...``), once:
    a message that already names it (``model: empty name``) is kept as it is."""
    text = str(exc)
    return text if text.startswith(f"{field}: ") else f"{field}: {text}"
