"""What serves a run, as its ``summary.json`` says it: the entries that name the model, the GPU,
the step model, the engine's resolved knobs, a fleet's replicas and a disaggregated
deployment's pools. One derivation for the run (:mod:`kvbudget.simulator.run`, the fleet's and
the pools' ``stats``) and for what a study says before its runs
(:func:`kvbudget.studies.planned.planned_summary`), so the two cannot disagree."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbudget.simulator.disagg_config import DisaggConfig, PoolConfig
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.sim_config import ReplicaSetup, SimConfig

__all__ = [
    "engine_knobs",
    "fleet_knobs",
    "jsonable",
    "pool_entry",
    "pools_knobs",
    "replica_entry",
    "served_entries",
]

POOLS = ("prefill", "decode")
REPLICA_KNOBS = ("max_num_seqs", "max_num_batched_tokens")
"""The knobs a fleet replica's entry (:func:`replica_entry`) keeps: the scheduler caps, the only
knobs whose defaults are each GPU's (``EngineConfig.resolved``: vLLM's ``batch_defaults``)."""


def served_entries(config: SimConfig, setup: ReplicaSetup) -> dict[str, Any]:
    """The entries every run's summary has beside its deployment's: the model and GPU as
    given (with the fields the default scenario filled, ``defaulted``), the step model, whose
    defaults filled the knobs, the weights, the gateway's budget where given."""
    return {
        "gpu": str(config.gpu),
        "model": str(config.model),
        **({"defaulted": list(config.defaulted)} if config.defaulted else {}),
        "cost_model": jsonable(setup.cost_model.describe()),
        "engine_defaults": config.engine_defaults,
        "weight_dtype": setup.model.weight_dtype,
        **(
            {}
            if config.gateway_capacity_tokens is None
            else {"gateway_capacity_tokens": config.gateway_capacity_tokens}
        ),
    }


def replica_entry(gpu: str, setup: ReplicaSetup, given: bool) -> dict[str, Any]:
    """A fleet replica's entry: its GPU as the fleet names it (``fleet.gpus``, else the run's),
    whether ``fleet.gpus`` gave it (``gpu_given``: None where the replica runs on the run's
    GPU, which the default scenario may have filled), the preset that resolved
    (``gpu_preset``: ``H100-SXM`` for ``H100``) and its scheduler caps as resolved (vLLM's
    defaults are each GPU's)."""
    return {
        "gpu": gpu,
        "gpu_given": gpu if given else None,
        "gpu_preset": setup.gpu.name,
        **{k: getattr(setup.engine, k) for k in REPLICA_KNOBS},
    }


def pool_entry(pool: PoolConfig, setup: ReplicaSetup) -> dict[str, Any]:
    """A disaggregated pool's entry: its replicas, its GPU preset as resolved and as the pool
    gave it (``gpu_given``: None where the pool takes the run's, which the default scenario
    may have filled), its router, tensor parallelism, scheduler caps and one replica's KV
    blocks."""
    assert setup.num_gpu_blocks is not None  # a pool's setup is resolved with its blocks
    return {
        "num_replicas": pool.num_replicas,
        "gpu": setup.gpu.name,
        "gpu_given": pool.gpu,
        "router": pool.router,
        "tensor_parallel_size": setup.engine.tensor_parallel_size,
        "max_num_seqs": setup.engine.max_num_seqs,  # a pool's own engine table's
        "max_num_batched_tokens": setup.engine.max_num_batched_tokens,
        "num_gpu_blocks": setup.num_gpu_blocks,
    }


def pools_knobs(config: SimConfig, setups: Sequence[ReplicaSetup]) -> dict[str, Any]:
    """A disaggregated run's ``engine_knobs``: each pool's, not ``[engine]``'s (with the
    ``gpu_memory_utilization`` given beside a pool's ``num_gpu_blocks``, as one engine's)."""
    assert isinstance(config.disaggregation, DisaggConfig)
    return {
        name: engine_knobs(s.engine, (pool.engine or config.engine).gpu_memory_utilization)
        for name, s, pool in zip(POOLS, setups, config.disaggregation.pools, strict=True)
    }


def fleet_knobs(
    setups: Sequence[ReplicaSetup], given_utilization: float | None = None
) -> dict[str, Any]:
    """A fleet's ``engine_knobs``: those its replicas ran, each replica on its own GPU
    (``setups``: each replica's, ``fleet.gpus``'s GPU where it names one, not the run's),
    said once where they ran them alike; a knob they ran differently (the scheduler caps of
    replicas on GPUs whose defaults differ) is left out, said in each replica's entry
    (:func:`replica_entry`, :data:`REPLICA_KNOBS`), never the run's GPU's figure for all."""
    each = [engine_knobs(s.engine, given_utilization) for s in setups]
    keys = {k for knobs in each for k in knobs}
    differ = {k for k in keys if len({repr(knobs.get(k)) for knobs in each}) > 1}
    assert differ <= set(REPLICA_KNOBS), differ  # a knob no replica's entry says
    return {k: v for k, v in each[0].items() if k not in differ}


def engine_knobs(e: EngineConfig, given_utilization: float | None = None) -> dict[str, Any]:
    """The engine knobs a run resolved (vLLM's defaults for the GPU where none was given):
    what a user checks against their own server's flags; ``num_gpu_blocks`` where it was
    given (the KV cache set, not sized from the GPU's memory), with the
    ``gpu_memory_utilization`` given beside it (``given_utilization``: unused, as the summary
    says), else the ``gpu_memory_utilization`` the KV cache was sized at."""
    knobs: dict[str, Any] = {
        "max_num_seqs": e.max_num_seqs,
        "max_num_batched_tokens": e.max_num_batched_tokens,
        "max_model_len": e.max_model_len,
        "tensor_parallel_size": e.tensor_parallel_size,
        "enable_chunked_prefill": e.enable_chunked_prefill,
        "enable_prefix_caching": e.enable_prefix_caching,
        "async_scheduling": e.async_scheduling,
        "kv_cache_dtype": e.kv_cache_dtype,
    }
    if e.num_gpu_blocks is not None:
        knobs["num_gpu_blocks"] = e.num_gpu_blocks
    utilization = e.memory_utilization if e.num_gpu_blocks is None else given_utilization
    if utilization is not None:
        knobs["gpu_memory_utilization"] = utilization
    return knobs


def jsonable(obj: Any) -> Any:
    """``obj`` as JSON holds it: tuples as lists, keys as strings, anything else not a JSON
    scalar by its ``str``."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float | int | str | bool) or obj is None:
        return obj
    return str(obj)
