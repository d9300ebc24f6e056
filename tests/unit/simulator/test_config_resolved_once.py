"""A run resolves its configuration once (issue 37, item 5): the GPU and the model are looked up
once, the step-time model built once (:meth:`SimConfig.replica_setup`), and the resolved
object is what the run passes down."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from kvbudget.perf import hardware, models
from kvbudget.perf.roofline import RooflineCostModel
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.policies import make_policy
from kvbudget.simulator.engine_config import ENGINE_DEFAULTS, EngineConfig, EngineDefaults
from kvbudget.simulator.run import simulate
from kvbudget.simulator.sim_config import FleetConfig, SimConfig
from kvbudget.workloads import Workload, from_columns


def _workload() -> Workload:
    rng = np.random.default_rng(0)
    n = 40
    return from_columns(np.sort(rng.uniform(0.0, 4.0, n)), rng.integers(50, 400, n),
                        rng.integers(5, 60, n))


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of ``get_gpu`` and ``get_model`` calls (wherever a kvbudget module imported
    them) and of step-time models built."""
    counts: Counter[str] = Counter()

    def counting(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return func(*args, **kwargs)
        return wrapper

    for name, func in (("get_gpu", hardware.get_gpu), ("get_model", models.get_model)):
        wrapped = counting(name, func)
        for module in [m for k, m in sys.modules.items() if k.startswith("kvbudget.")]:
            if getattr(module, name, None) is func:
                monkeypatch.setattr(module, name, wrapped)
    for cls in (VllmStepModel, RooflineCostModel):
        monkeypatch.setattr(cls, "__init__", counting("step model", cls.__init__))
    yield counts


def test_the_counters_see_a_lookup_and_a_build(calls: Counter[str]) -> None:
    SimConfig().resolved_cost_model()
    assert calls == {"get_gpu": 2, "get_model": 2, "step model": 1}  # __post_init__'s too


@pytest.mark.parametrize("defaults", ENGINE_DEFAULTS)
def test_a_run_builds_its_step_model_once(calls: Counter[str], defaults: EngineDefaults) -> None:
    config = SimConfig(gpu="A100-80GB", model="Llama-2-7B", engine_defaults=defaults)
    calls.clear()
    simulate(_workload(), make_policy("unlimited"), config)
    assert calls["step model"] == 1


def test_a_run_looks_its_gpu_and_model_up_once(calls: Counter[str]) -> None:
    config = SimConfig(gpu="A100-80GB", model="Llama-2-7B", engine=EngineConfig(
        num_gpu_blocks=2000))
    calls.clear()
    simulate(_workload(), make_policy("unlimited"), config)
    assert calls["get_gpu"] == 1 and calls["get_model"] == 1


def test_a_fleet_run_resolves_each_gpu_once(calls: Counter[str]) -> None:
    config = SimConfig(gpu="A100-80GB", model="Llama-2-7B", fleet=FleetConfig(num_replicas=2))
    calls.clear()
    simulate(_workload(), make_policy("unlimited"), config)
    # its KV blocks sized with the run's own setup, not by looking the GPU up again
    assert calls == {"step model": 1, "get_gpu": 1, "get_model": 1}


def test_a_fleet_on_two_gpus_resolves_each_once(calls: Counter[str]) -> None:
    fleet = FleetConfig(num_replicas=3, gpus=("A100-80GB", "H100-80GB", "A100-80GB"))
    config = SimConfig(gpu="A100-80GB", model="Llama-2-7B", fleet=fleet)
    calls.clear()
    simulate(_workload(), make_policy("unlimited"), config)
    assert calls == {"step model": 2, "get_gpu": 2, "get_model": 2}
