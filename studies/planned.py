"""What will serve a run of a configuration, said before it runs: the summary's entries that
``simulate``'s ``simulated:`` line reads (:func:`kvbudget.results.said.served_said`: the model,
the GPU and parallelism, the engine's knobs, the KV capacity), from the configuration alone.
A study says them before its many runs in the words ``simulate`` says them after its one."""

from __future__ import annotations

from typing import Any

from kvbudget.simulator.disagg import pool_setup
from kvbudget.simulator.disagg_config import DisaggConfig
from kvbudget.simulator.run import engine_knobs
from kvbudget.simulator.sim_config import ReplicaSetup, SimConfig
from kvbudget.workloads import Workload

__all__ = ["planned_summary"]


def planned_summary(config: SimConfig, workload: Workload) -> dict[str, Any]:
    """The entries of a run's ``summary.json`` that say what served it, as
    :func:`~kvbudget.simulator.run.simulate` writes them: one engine; a fleet's replicas, each
    on its GPU (``fleet.gpus``) with that GPU's resolved knobs, their KV capacity together (an
    autoscaled fleet's at its most replicas, as its run says it); a disaggregated deployment's
    pools, each resolved as its run resolves it (:func:`~kvbudget.simulator.disagg.
    pool_setup`), the capacity the decode pool's. Resolving them sizes the KV caches, runs
    nothing."""
    if config.disaggregation is not None:
        return _planned_pools(config)
    fleet = config.fleet
    setup = config.replica_setup()
    e = setup.engine
    figures: dict[str, Any] = {
        "engine": e.name,
        # the run's engine shares prefixes only where the workload has their hashes
        "prefix_caching": bool(e.enable_prefix_caching) and workload.prefix_hashes is not None,
    }
    blocks = setup.num_gpu_blocks
    assert blocks is not None  # asked for (with_blocks)
    capacity = blocks * e.block_size
    if fleet is not None:  # each replica as the fleet resolves it (Fleet._setups): per GPU
        gpus = [fleet.gpu_of(r, str(config.gpu)) for r in range(fleet.num_slots)]
        setups = {g: setup if g == config.gpu else config.replica_setup(g)
                  for g in dict.fromkeys(gpus)}
        figures["fleet"] = {
            "num_replicas": len(gpus),
            "router": fleet.router,
            "budget": fleet.budget,
            **({} if fleet.autoscale is None else {"autoscale": {
                "min_replicas": fleet.autoscale.min_replicas,
                "max_replicas": fleet.autoscale.max_replicas}}),
            "replicas": [{"gpu": g, "max_num_seqs": setups[g].engine.max_num_seqs,
                          "max_num_batched_tokens": setups[g].engine.max_num_batched_tokens}
                         for g in gpus],
        }
        blocks = sum(_blocks(setups[g]) for g in gpus)
        capacity = sum(_blocks(setups[g]) * setups[g].engine.block_size for g in gpus)
    return {
        **_common(config, setup),
        "num_gpu_blocks": blocks,
        "block_size": e.block_size,
        "engine": figures,
        "engine_knobs": engine_knobs(e, config.engine.gpu_memory_utilization),
        "kv_capacity_tokens": capacity,
    }


def _blocks(setup: ReplicaSetup) -> int:
    assert setup.num_gpu_blocks is not None  # resolved with its blocks
    return setup.num_gpu_blocks


def _common(config: SimConfig, setup: ReplicaSetup) -> dict[str, Any]:
    """The entries every run's summary has beside its deployment's: the model and GPU as
    given, the step model, whose defaults, the weights, the gateway's budget where given."""
    return {
        "gpu": str(config.gpu),
        "model": str(config.model),
        **({"defaulted": list(config.defaulted)} if config.defaulted else {}),
        "cost_model": setup.cost_model.describe(),
        "engine_defaults": config.engine_defaults,
        "weight_dtype": setup.model.weight_dtype,
        **(
            {}
            if config.gateway_capacity_tokens is None
            else {"gateway_capacity_tokens": config.gateway_capacity_tokens}
        ),
    }


def _planned_pools(config: SimConfig) -> dict[str, Any]:
    """:func:`planned_summary` of a disaggregated deployment: each pool's replicas, GPU,
    tensor parallelism, scheduler caps and KV blocks as :class:`~kvbudget.simulator.disagg.
    DisaggFleet` resolves and says them, its knobs each pool's, and the gateway's capacity the
    decode pool's KV."""
    d = config.disaggregation
    assert isinstance(d, DisaggConfig)
    prefill, decode = d.pools
    setups = (pool_setup(config, prefill, decode=False), pool_setup(config, decode, decode=True))
    pools = {
        name: {
            "num_replicas": pool.num_replicas,
            "gpu": s.gpu.name,
            "router": pool.router,
            "tensor_parallel_size": s.engine.tensor_parallel_size,
            "max_num_seqs": s.engine.max_num_seqs,
            "max_num_batched_tokens": s.engine.max_num_batched_tokens,
            "num_gpu_blocks": _blocks(s),
        }
        for name, pool, s in zip(("prefill", "decode"), (prefill, decode), setups, strict=True)
    }
    return {
        **_common(config, config.replica_setup(with_blocks=False)),
        "engine": {"engine": config.engine.name, "disaggregation": pools},
        "engine_knobs": {
            name: engine_knobs(s.engine) for name, s in zip(("prefill", "decode"), setups,
                                                            strict=True)},
        "kv_capacity_tokens": decode.num_replicas * _blocks(setups[1])
        * setups[1].engine.block_size,
    }
