"""What a simulation runs on besides the workload and the policy: :class:`SimConfig` (GPU,
model, engine knobs, tiers, cost model, fleet) and the gateway it implies."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from kvbudget.perf.cost_model import CostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import get_model
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.policies import DEFAULT_TIERS, GatewayConfig, TierConfig
from kvbudget.policies.clients import ClientModel
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.tiers import tier_map
from kvbudget.simulator.engine_config import EngineConfig

RouterName = Literal["round_robin", "least_tokens", "prefix_affinity"]
ROUTERS: tuple[RouterName, ...] = ("round_robin", "least_tokens", "prefix_affinity")


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Replicas, their router and where the token budget lives (see :mod:`kvbudget.simulator.fleet`)."""

    num_replicas: int = 2
    gpus: tuple[str, ...] = ()
    router: RouterName = "round_robin"
    budget: Literal["global", "per_replica"] = "global"

    def __post_init__(self) -> None:
        if not (isinstance(self.num_replicas, int) and self.num_replicas >= 1):
            raise ValueError(f"num_replicas must be an integer >= 1, got {self.num_replicas!r}")
        object.__setattr__(self, "gpus", tuple(self.gpus))
        if self.gpus and len(self.gpus) != self.num_replicas:
            raise ValueError(
                f"gpus names {len(self.gpus)} GPU presets for {self.num_replicas} replicas; "
                "give one per replica or none"
            )
        if self.router not in ROUTERS:
            raise ValueError(f"unknown router {self.router!r}; known routers: {', '.join(ROUTERS)}")
        if self.budget not in ("global", "per_replica"):
            raise ValueError(f"budget must be 'global' or 'per_replica', got {self.budget!r}")

    def gpu_of(self, replica: int, default: str) -> str:
        return self.gpus[replica] if self.gpus else default


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything about a simulation besides the workload and the policy.

    ``frontend_overhead_s``: what the server's API front end adds to every request outside the
    engine's steps (HTTP, request set-up, detokenisation, streaming; ``kvbudget calibrate``
    measures it and writes it into the cost-model file). It delays each completed request's
    first token and finish as its client sees them; the engine and the gateway do not see it.

    ``model`` is a bundled preset name or a ``config.json`` path (:func:`get_model`); the
    engine's ``tensor_parallel_size`` shards it over that many GPUs.

    ``clients``: ``(tier, ClientModel)`` pairs (:mod:`kvbudget.policies.clients`); a tier not
    named has the ``no-retry`` client. With none (and no per-request ``timeout_s`` in the
    workload) the run is exactly what it was before client models: no ``num_attempts``
    column, no attempts table, no client figures in the summary.
    """

    gpu: str = "H100-80GB"
    model: str = "Llama-3.1-8B"
    engine: EngineConfig = field(default_factory=EngineConfig)
    tiers: tuple[TierConfig, ...] = DEFAULT_TIERS
    cost_model: CostModel | None = None
    gateway_capacity_tokens: int | None = None
    lease_ttl_s: float | None = None
    timeline_period_s: float = 1.0
    seed: int = 0
    front_door: FrontDoor | None = None
    fleet: FleetConfig | None = None
    frontend_overhead_s: float = 0.0
    clients: tuple[tuple[str, ClientModel], ...] = ()

    def __post_init__(self) -> None:
        if not (math.isfinite(self.frontend_overhead_s) and self.frontend_overhead_s >= 0):
            raise ValueError(
                f"frontend_overhead_s must be >= 0, got {self.frontend_overhead_s!r}"
            )
        get_gpu(self.gpu)
        try:
            get_model(self.model).check_tensor_parallel(self.engine.tensor_parallel_size)
        except ValueError as exc:
            raise ValueError(f"engine.{exc}") from None
        tiers = tier_map(self.tiers)
        for tier, client in self.clients:
            if tier not in tiers:
                raise ValueError(f"clients.{tier}: no such tier; tiers: {sorted(tiers)}")
            if not isinstance(client, ClientModel):
                raise ValueError(f"clients.{tier}: expected a ClientModel, got {client!r}")
        if self.gateway_capacity_tokens is not None and self.gateway_capacity_tokens < 1:
            raise ValueError(
                f"gateway_capacity_tokens must be >= 1, got {self.gateway_capacity_tokens!r}"
            )
        if not 0 < self.timeline_period_s < float("inf"):
            raise ValueError(
                f"timeline_period_s must be > 0 and finite, got {self.timeline_period_s!r}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed!r}")
        if self.fleet is not None:
            for gpu in self.fleet.gpus:
                get_gpu(gpu)

    def resolved_num_gpu_blocks(self) -> int:
        if self.engine.num_gpu_blocks is not None:
            return self.engine.num_gpu_blocks
        return num_gpu_blocks(
            get_gpu(self.gpu),
            get_model(self.model),
            block_size=self.engine.block_size,
            gpu_memory_utilization=self.engine.gpu_memory_utilization,
            max_num_batched_tokens=self.engine.max_num_batched_tokens,
            tensor_parallel_size=self.engine.tensor_parallel_size,
            kv_cache_dtype=self.engine.kv_cache_dtype,
        )

    def resolved_cost_model(self) -> CostModel:
        if self.cost_model is not None:
            return self.cost_model
        return RooflineCostModel(get_gpu(self.gpu), get_model(self.model),
                                 tensor_parallel_size=self.engine.tensor_parallel_size,
                                 kv_cache_dtype=self.engine.kv_cache_dtype)


def gateway_config(config: SimConfig, capacity_tokens: int) -> GatewayConfig:
    """The gateway of ``config`` over ``capacity_tokens``."""
    return GatewayConfig(
        capacity_tokens=capacity_tokens,
        tiers=config.tiers,
        lease_ttl_s=config.lease_ttl_s,
        reservation_granularity=config.engine.block_size,
        front_door=config.front_door,
    )
