"""What will serve a run of a configuration, said before it runs: the summary's entries that
``simulate``'s ``simulated:`` line reads (:func:`kvbudget.results.said.served_said`: the model,
the GPU and parallelism, the engine's knobs, the KV capacity), from the configuration alone.
A study says them before its many runs in the words ``simulate`` says them after its one."""

from __future__ import annotations

from typing import Any

from kvbudget.simulator.run import engine_knobs
from kvbudget.simulator.sim_config import SimConfig
from kvbudget.workloads import Workload

__all__ = ["planned_summary"]


def planned_summary(config: SimConfig, workload: Workload) -> dict[str, Any] | None:
    """The entries of a run's ``summary.json`` that say what served it, as
    :func:`~kvbudget.simulator.run.simulate` writes them, for one engine or a fleet of
    replicas of one GPU (their KV capacity the replicas' together, as the run's gateway has
    it); None where the run resolves them itself: a disaggregated deployment's pools, an
    autoscaled fleet, a fleet over several GPUs."""
    fleet = config.fleet
    if config.disaggregation is not None or (
        fleet is not None and (fleet.autoscale is not None or fleet.gpus)
    ):
        return None
    setup = config.replica_setup()
    e, blocks = setup.engine, setup.num_gpu_blocks
    assert blocks is not None  # asked for (with_blocks)
    capacity = blocks * e.block_size
    figures: dict[str, Any] = {
        "engine": e.name,
        # the run's engine shares prefixes only where the workload has their hashes
        "prefix_caching": bool(e.enable_prefix_caching) and workload.prefix_hashes is not None,
    }
    if fleet is not None:
        figures["fleet"] = {
            "num_replicas": fleet.num_replicas,
            "router": fleet.router,
            "budget": fleet.budget,
            "replicas": [
                {
                    "gpu": str(config.gpu),
                    "max_num_seqs": e.max_num_seqs,
                    "max_num_batched_tokens": e.max_num_batched_tokens,
                }
            ]
            * fleet.num_replicas,
        }
        capacity *= fleet.num_replicas
    return {
        "gpu": str(config.gpu),
        "model": str(config.model),
        **({"defaulted": list(config.defaulted)} if config.defaulted else {}),
        "num_gpu_blocks": blocks,
        "block_size": e.block_size,
        "cost_model": setup.cost_model.describe(),
        "engine_defaults": config.engine_defaults,
        "engine": figures,
        "engine_knobs": engine_knobs(e, config.engine.gpu_memory_utilization),
        "weight_dtype": setup.model.weight_dtype,
        "kv_capacity_tokens": capacity,
        **(
            {}
            if config.gateway_capacity_tokens is None
            else {"gateway_capacity_tokens": config.gateway_capacity_tokens}
        ),
    }
