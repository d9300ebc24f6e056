"""What will serve a run of a configuration, said before it runs: the summary's entries that
``simulate``'s ``simulated:`` line reads (:func:`kvbudget.results.said.served_said`: the model,
the GPU and parallelism, the engine's knobs, the KV capacity), from the configuration alone.
A study says them before its many runs in the words ``simulate`` says them after its one."""

from __future__ import annotations

from typing import Any

from kvbudget.simulator.disagg import pool_setup
from kvbudget.simulator.disagg_config import DisaggConfig
from kvbudget.simulator.served import (
    engine_knobs,
    fleet_knobs,
    pool_entry,
    pools_knobs,
    replica_entry,
    served_entries,
)
from kvbudget.simulator.sim_config import ReplicaSetup, SimConfig
from kvbudget.workloads import Workload

__all__ = ["planned_summary"]


def planned_summary(config: SimConfig, workload: Workload) -> dict[str, Any]:
    """The entries of a run's ``summary.json`` that say what served it, as
    :func:`~kvbudget.simulator.run.simulate` writes them (each from the same function,
    :mod:`kvbudget.simulator.served`): one engine; a fleet's replicas, each on its GPU
    (``fleet.gpus``) with that GPU's resolved knobs, their KV capacity together (an
    autoscaled fleet's at its most replicas, as its run says it); a disaggregated deployment's
    pools, each resolved as its run resolves it (:func:`~kvbudget.simulator.disagg.
    pool_setup`), the capacity the decode pool's. Resolving them sizes the KV caches, runs
    nothing."""
    if config.disaggregation is not None:
        return _planned_pools(config, workload)
    fleet = config.fleet
    setup = config.replica_setup()
    e = setup.engine
    figures: dict[str, Any] = {
        "engine": e.name,
        # the run's engine shares prefixes only where the workload has their hashes
        "prefix_caching": _shares(e.enable_prefix_caching, workload),
    }
    blocks = _blocks(setup)
    capacity = blocks * e.block_size
    knobs = engine_knobs(e, config.engine.gpu_memory_utilization)
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
            "replicas": [replica_entry(g, setups[g], bool(fleet.gpus)) for g in gpus],
        }
        blocks = sum(_blocks(setups[g]) for g in gpus)
        capacity = sum(_blocks(setups[g]) * setups[g].engine.block_size for g in gpus)
        knobs = fleet_knobs([setups[g] for g in gpus], config.engine.gpu_memory_utilization)
    return {
        **served_entries(config, setup),
        "num_gpu_blocks": blocks,
        "block_size": e.block_size,
        "engine": figures,
        "engine_knobs": knobs,
        "kv_capacity_tokens": capacity,
    }


def _shares(caching: bool | None, workload: Workload) -> bool:
    """Whether an engine with prefix caching ``caching`` shares prefixes: only where the
    workload has their hashes."""
    return bool(caching) and workload.prefix_hashes is not None


def _blocks(setup: ReplicaSetup) -> int:
    assert setup.num_gpu_blocks is not None  # resolved with its blocks
    return setup.num_gpu_blocks


def _planned_pools(config: SimConfig, workload: Workload) -> dict[str, Any]:
    """:func:`planned_summary` of a disaggregated deployment: each pool's replicas, GPU,
    tensor parallelism, scheduler caps and KV blocks as :class:`~kvbudget.simulator.disagg.
    DisaggFleet` resolves and says them, its knobs each pool's, and the gateway's capacity the
    decode pool's KV."""
    d = config.disaggregation
    assert isinstance(d, DisaggConfig)
    prefill, decode = d.pools
    setups = (pool_setup(config, prefill, decode=False), pool_setup(config, decode, decode=True))
    pools = {name: pool_entry(pool, s) for name, pool, s in
             zip(("prefill", "decode"), (prefill, decode), setups, strict=True)}
    return {
        **served_entries(config, config.replica_setup(with_blocks=False)),
        "num_gpu_blocks": decode.num_replicas * _blocks(setups[1]),
        "block_size": setups[1].engine.block_size,
        "engine": {"engine": config.engine.name,
                   "prefix_caching": _shares(setups[0].engine.enable_prefix_caching, workload),
                   "disaggregation": pools},
        "engine_knobs": pools_knobs(config, setups),
        "kv_capacity_tokens": decode.num_replicas * _blocks(setups[1])
        * setups[1].engine.block_size,
    }
