"""A study's header says what serves its runs before they run (``planned_summary``) from the
same functions the run's ``summary.json`` is written with (``simulator/served.py``): they
re-derived the model's, the GPU's, the knobs', a fleet's replicas' and the pools' entries apart,
and the planned one of a disaggregated deployment had no KV blocks, block size nor the prefill
pool's prefix sharing that the run's summary has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import default_scenario
from kvbudget.studies.planned import planned_summary


def _mooncake(path: Path) -> Path:
    """A hand-made Mooncake trace whose prompts share two 512-token blocks (an offload tier
    is keyed by the blocks' hashes)."""
    path.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": 200 * i,
                    "input_length": 1100 + 16 * i,
                    "output_length": 12,
                    "hash_ids": [0, 1, 10 + i],
                }
            )
            + "\n"
            for i in range(12)
        )
    )
    return path


CASES = {
    "colocated": ["workload.num_requests=20"],
    "disaggregated": [
        "workload.num_requests=20",
        "disaggregation.prefill.num_replicas=1",
        "disaggregation.decode.num_replicas=2",
        'disaggregation.decode.gpu="H200"',
    ],
    "offload": ["engine.kv_offloading_size=8"],
    "speculative": [
        "workload.num_requests=20",
        'engine.speculative_config={method="ngram", num_speculative_tokens=3, acceptance_rate=0.6}',
    ],
    "mixed fleet": [
        "workload.num_requests=20",
        'fleet.gpus=["H100", "A100-80GB"]',
        "fleet.num_replicas=2",
    ],
    "one-gpu fleet": [  # every replica on a GPU not the run's: its caps, not the run's GPU's
        "workload.num_requests=20",
        'fleet.gpus=["A100-80GB", "A100-80GB"]',
        "fleet.num_replicas=2",
    ],
    "autoscaled": [
        "workload.num_requests=20",
        "fleet.autoscale.min_replicas=1",
        "fleet.autoscale.max_replicas=2",
    ],
}
SAID = (
    "gpu",
    "model",
    "cost_model",
    "engine_defaults",
    "weight_dtype",
    "num_gpu_blocks",
    "block_size",
    "engine",
    "engine_knobs",
    "kv_capacity_tokens",
)
"""The summary's entries ``served_said`` reads (with ``defaulted`` and the gateway's budget
where a run has them)."""


def _differ(planned: Any, run: Any, path: str = "") -> list[str]:
    """Where ``planned`` (each of its entries, nested) is not the run's."""
    if isinstance(planned, dict):
        return [
            d
            for k, v in planned.items()
            for d in (
                _differ(v, run[k], f"{path}{k}.")
                if isinstance(run, dict) and k in run
                else [f"{path}{k}: not in the run's summary"]
            )
        ]
    if isinstance(planned, list) and isinstance(run, list) and len(planned) == len(run):
        return [
            d
            for i, (a, b) in enumerate(zip(planned, run, strict=True))
            for d in _differ(a, b, f"{path}{i}.")
        ]
    return [] if planned == run else [f"{path}: planned {planned!r}, ran {run!r}"]


@pytest.mark.parametrize("case", list(CASES))
def test_the_planned_summary_is_the_runs(case: str, tmp_path: Path) -> None:
    sets = CASES[case]
    if case == "offload":
        sets = [f'workload={{kind="trace", path="{_mooncake(tmp_path / "t.jsonl")}"}}', *sets]
    scn = default_scenario(sets)
    workload, config = scn.workload(), scn.sim_config()
    planned = planned_summary(config, workload)
    ran = simulate(workload, scn.make_policy(), config).summary
    assert not _differ(planned, ran), _differ(planned, ran)
    missing = [k for k in SAID if k in ran and k not in planned]
    missing += [
        f"engine.{k}"
        for k in ("engine", "prefix_caching", "fleet", "disaggregation")
        if k in ran["engine"] and k not in planned["engine"]
    ]
    assert not missing, missing
