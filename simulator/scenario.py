"""Scenario files: one TOML file names the workload, the policy, the engine and the tiers.

Validated at the file boundary with pydantic; an error names the field
(``engine.max_num_seqs: must be >= 1, got 0``). ``--set key=value`` overrides use the same
dotted names. Example::

    name = "chat-vs-batch"
    seed = 7
    policy = "overcommit"
    gpu = "H100-80GB"
    model = "Llama-3.1-8B"

    [policy_params]
    overcommit_ratio = 0.6

    [engine]
    max_num_seqs = 256
    max_num_batched_tokens = 8192

    [[tiers]]
    name = "interactive"
    priority = 0
    queue_timeout_s = 10
    ttft_s = 2.0
    tpot_s = 0.1

    [front_door]                # TGI / vLLM front-door caps (optional)
    max_concurrent_requests = 128

    [fleet]                     # N replicas behind one gateway (optional)
    num_replicas = 4
    router = "least_tokens"
    budget = "per_replica"

    [workload]
    kind = "trace"
    path = "AzureLLMInferenceTrace_conv.csv"
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies import DEFAULT_TIERS, BasePolicy, TierConfig, make_policy
from policies.gateway import FrontDoor
from simulator.cost_model import load_cost_model, read_frontend_overhead
from simulator.engine_config import EngineConfig
from simulator.fleet import FleetConfig
from simulator.run import SimConfig
from workloads import Workload


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineModel(_Strict):
    block_size: int = Field(16, ge=1)
    num_gpu_blocks: int | None = Field(None, ge=1)
    max_num_seqs: int = Field(256, ge=1)
    max_num_batched_tokens: int = Field(8192, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=2)
    scheduling_policy: str = "fcfs"
    preemption_mode: str = "recompute"
    watermark: float = Field(0.0, ge=0, lt=1)
    enable_chunked_prefill: bool = True
    skip_ahead: bool = True
    name: str = "vllm"
    swap_space_gib: float = Field(4.0, ge=0)
    schedule_conservativeness: float = Field(1.0, gt=0)
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"
    enable_prefix_caching: bool = False


class FrontDoorModel(_Strict):
    max_concurrent_requests: int | None = Field(128, ge=1)
    max_num_queued_requests: int | None = Field(None, ge=0)
    max_num_queued_tokens: int | None = Field(None, ge=0)
    tier_max_queued: dict[str, int] = Field(default_factory=dict)
    evict_lower_priority: bool = True


class FleetModel(_Strict):
    num_replicas: int = Field(2, ge=1)
    gpus: list[str] = Field(default_factory=list)
    router: str = "round_robin"
    budget: str = "global"


class TierModel(_Strict):
    name: str
    max_sequence_tokens: int = Field(32_768, ge=2)
    priority: int = 0
    queue_timeout_s: float | None = Field(10.0, ge=0)
    retryable_on_overload: bool = False
    ttft_s: float = Field(2.0, gt=0)
    tpot_s: float = Field(0.2, gt=0)
    guaranteed_tokens: int = Field(0, ge=0)


class ScenarioModel(_Strict):
    name: str = "scenario"
    seed: int = Field(0, ge=0)
    policy: str = "conservative"
    policy_params: dict[str, Any] = Field(default_factory=dict)
    gpu: str = "H100-80GB"
    model: str = "Llama-3.1-8B"
    cost_model: str | None = None
    gateway_capacity_tokens: int | None = Field(None, ge=1)
    lease_ttl_s: float | None = Field(None, gt=0)
    timeline_period_s: float = Field(1.0, gt=0)
    engine: EngineModel = Field(default_factory=lambda: EngineModel())
    tiers: list[TierModel] | None = None
    front_door: FrontDoorModel | None = None
    fleet: FleetModel | None = None
    workload: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario; ``base_dir`` resolves relative paths in it."""

    spec: ScenarioModel
    base_dir: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def seed(self) -> int:
        return self.spec.seed

    def tiers(self) -> tuple[TierConfig, ...]:
        if self.spec.tiers is None:
            return DEFAULT_TIERS
        return tuple(TierConfig(**t.model_dump()) for t in self.spec.tiers)

    def sim_config(self) -> SimConfig:
        s = self.spec
        cost = None
        overhead = 0.0
        if s.cost_model is not None:
            cost = load_cost_model(self._path(s.cost_model))
            overhead = read_frontend_overhead(self._path(s.cost_model))
        front_door = None
        if s.front_door is not None:
            fd = s.front_door.model_dump()
            fd["tier_max_queued"] = tuple(sorted(fd["tier_max_queued"].items()))
            front_door = FrontDoor(**fd)
        fleet = None
        if s.fleet is not None:
            fl = s.fleet.model_dump()
            fl["gpus"] = tuple(fl["gpus"])
            fleet = FleetConfig(**fl)
        return SimConfig(
            gpu=s.gpu,
            model=s.model,
            engine=EngineConfig(**s.engine.model_dump()),
            front_door=front_door,
            fleet=fleet,
            tiers=self.tiers(),
            cost_model=cost,
            gateway_capacity_tokens=s.gateway_capacity_tokens,
            lease_ttl_s=s.lease_ttl_s,
            timeline_period_s=s.timeline_period_s,
            seed=s.seed,
            frontend_overhead_s=overhead,
        )

    def make_policy(self, name: str | None = None) -> BasePolicy:
        """A fresh policy: the scenario's, or ``name`` (its parameters apply only to its own)."""
        if name is None or name == self.spec.policy:
            return make_policy(self.spec.policy, self.spec.policy_params)
        return make_policy(name)

    def workload(self) -> Workload:
        plain = _plain_trace(self.spec.workload)
        if plain is not None:
            # ``kind = "trace"`` with only ``path`` (and ``format``): the spec's defaults are
            # TraceOptions' own, so skip building the pydantic workload models
            from workloads.traces import TraceOptions, load_trace

            path, fmt = plain
            rng = np.random.default_rng(np.random.SeedSequence(self.spec.seed))
            options = TraceOptions(format=fmt, seed=int(rng.integers(0, 2**31 - 1)))
            file = Path(path).expanduser()
            return load_trace(file if file.is_absolute() else self.base_dir / file,
                              options).workload
        from workloads.spec import build_workload, parse_workload_spec

        wspec = parse_workload_spec(self.spec.workload, prefix="workload")
        rng = np.random.default_rng(np.random.SeedSequence(self.spec.seed))
        return build_workload(wspec, rng, base_dir=self.base_dir)

    def _path(self, value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else self.base_dir / p

    def to_toml_dict(self) -> dict[str, Any]:
        return self.spec.model_dump(exclude_none=True)


def _plain_trace(workload: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """(path, format) of a ``[workload]`` table that names a trace file and nothing else
    (valid as it stands); ``None`` for any other table, which the full spec validates."""
    from workloads.traces.options import FORMATS

    if workload.get("kind") != "trace" or not set(workload) <= {"kind", "path", "format"}:
        return None
    path = workload.get("path")
    fmt = workload.get("format")
    if type(path) is not str or not path:
        return None
    if fmt is not None and (type(fmt) is not str or fmt not in FORMATS):
        return None
    return path, fmt


def _pydantic_message(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    if prefix:
        loc = f"{prefix}.{loc}" if loc else prefix
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f", got {value!r}"
    return f"{loc}: {err['msg'].lower()}{shown}"


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=3`` -> (["a", "b"], 3); values are read as TOML/JSON literals, else as strings."""
    if "=" not in item:
        raise ValueError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ValueError(f"--set {item!r}: empty key")
    raw = raw.strip()
    value: Any
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
    return path, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    out = copy.deepcopy(data)
    for item in overrides:
        path, value = parse_override(item)
        node: Any = out
        for i, part in enumerate(path[:-1]):
            if part.isdigit() and isinstance(node, list):
                node = node[int(part)]
                continue
            if not isinstance(node, dict):
                raise ValueError(f"--set {item!r}: {'.'.join(path[: i + 1])} is not a table")
            node = node.setdefault(part, {})
        last = path[-1]
        if isinstance(node, list) and last.isdigit():
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ValueError(f"--set {item!r}: {'.'.join(path[:-1])} is not a table")
    return out


def scenario_from_dict(
    data: Mapping[str, Any], base_dir: Path, overrides: Sequence[str] = ()
) -> Scenario:
    merged = apply_overrides(dict(data), overrides)
    try:
        spec = ScenarioModel.model_validate(merged)
    except ValidationError as exc:
        raise ValueError(_pydantic_message(exc)) from None
    scenario = Scenario(spec, base_dir)
    # fail early on bad names and values that only the library checks
    try:
        scenario.sim_config()
        scenario.make_policy()
    except ValueError as exc:
        raise ValueError(f"{exc}") from None
    return scenario


def load_scenario(path: Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a TOML scenario file; errors name the file and the field."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such scenario file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    try:
        return scenario_from_dict(data, path.resolve().parent, overrides)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def default_scenario_dict(*, workload: bool = True) -> dict[str, Any]:
    """The embedded default: Llama-3.1-8B on one H100-80GB, mixed interactive and batch
    synthetic traffic near saturation for several minutes (without its ``workload`` table
    when ``workload`` is false: for a caller that replaces it)."""
    data: dict[str, Any] = {
        "name": "default",
        "seed": 0,
        "policy": "conservative",
        "gpu": "H100-80GB",
        "model": "Llama-3.1-8B",
    }
    if workload:
        from workloads.spec import default_workload_spec

        data["workload"] = default_workload_spec().model_dump(mode="json", exclude_none=True)
    return data


def default_scenario(overrides: Sequence[str] = ()) -> Scenario:
    return scenario_from_dict(default_scenario_dict(), Path.cwd(), overrides)
