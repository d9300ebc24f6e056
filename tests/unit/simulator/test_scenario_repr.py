"""A scenario in a notebook (``kb.make_scenario``, ``kb.load_scenario``): what it runs (name,
file, policy, model, GPU, the engine's caps given, the workload, the seed), not a 3 KB dump of
every field of its spec."""

from __future__ import annotations

from pathlib import Path

import kvbudget as kb

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_a_scenarios_repr_says_what_it_runs() -> None:
    path = SCENARIOS / "synth_conservative.toml"
    text = " ".join(ln.strip() for ln in repr(kb.load_scenario(path)).splitlines())
    assert text == (f"Scenario 'synth_conservative' ({path}): policy conservative, model "
                    "Llama-3.1-8B on H100-80GB (engine vllm, num_gpu_blocks 4,000, max_num_seqs "
                    "256, max_num_batched_tokens 8,192); workload synthetic; seed 0 .spec (every "
                    "field), .workload(), .sim_config(), .tiers()")


def test_a_made_scenarios_repr_gives_what_was_set() -> None:
    scn = kb.make_scenario(policy="overcommit", gpu="H200", seed=3,
                           engine={"max_num_seqs": 4, "tensor_parallel_size": 2})
    text = " ".join(ln.strip() for ln in repr(scn).splitlines())
    assert text.startswith("Scenario 'default' (the embedded default): policy overcommit, model "
                           "Llama-3.1-8B on H200 (engine vllm, tensor_parallel_size 2, "
                           "max_num_seqs 4); workload synthetic; seed 3")
    assert "ScenarioSpec(" not in repr(scn)
