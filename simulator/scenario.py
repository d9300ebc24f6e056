"""Scenario files: one TOML file names the workload, the policy, the engine and the tiers.

Validated at the file boundary with pydantic (well-typed data, such as a scenario built from
command-line flags, without it: see ``_plain_value``); an error names the field
(``engine.max_num_seqs: must be >= 1, got 0``). ``--set key=value`` overrides use the same
dotted names. Example::

    name = "chat-vs-batch"
    seed = 7
    policy = "overcommit"
    gpu = "H100-80GB"
    model = "Llama-3.1-8B"       # a preset (kvbudget presets) or a config.json path
    engine_defaults = "vllm"      # or "kvbudget-0.1" (docs/fidelity.md)
    frontend = "vllm-api-server"  # or "none" (engine-side recordings)

    [policy_params]
    overcommit_ratio = 0.6

    [engine]                    # knobs left out take vLLM's defaults for the GPU
    max_num_seqs = 256
    max_num_batched_tokens = 8192
    tensor_parallel_size = 1    # vLLM's --tensor-parallel-size

    [[tiers]]
    name = "interactive"
    priority = 0
    queue_timeout_s = 10
    ttft_s = 2.0
    tpot_s = 0.1

    [front_door]                # TGI / vLLM front-door caps (optional)
    max_concurrent_requests = 128

    [clients]                   # what each tier's clients do with answers (optional)
    batch = "batch-pipeline"    # a preset: no-retry, openai-sdk, batch-pipeline, impatient-user
    interactive = { preset = "impatient-user", timeout_s = 20 }

    [closed_loop]               # N users, each sending after its last ended (optional)
    num_users = 64
    think_time_s = 1.0

    [fleet]                     # N replicas behind one gateway (optional)
    num_replicas = 4
    router = "least_tokens"
    budget = "per_replica"

    [disaggregation]            # prefill and decode pools, the KV over a link (optional)
    link = "infiniband-ndr"     # nvlink, pcie, infiniband-ndr, infiniband-hdr, roce-200
    [disaggregation.prefill]
    num_replicas = 2
    router = "prefix_affinity"
    [disaggregation.decode]
    num_replicas = 6
    engine = { max_num_seqs = 512 }

    [workload]
    kind = "trace"
    path = "AzureLLMInferenceTrace_conv.csv"
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import operator
import re
import textwrap
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass, replace
from functools import cache, partial
from pathlib import Path
from types import NoneType, UnionType
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import numpy as np

from kvbudget.perf.fitted_on import (
    fitted_engine_notes,
    load_checked_cost_model,
    print_notes,
)
from kvbudget.perf.models import is_preset
from kvbudget.perf.speculative import SpeculativeConfig
from kvbudget.perf.vllm_defaults import BLOCK_SIZE_MULTIPLE, V0_BLOCK_SIZES
from kvbudget.policies import DEFAULT_TIERS, BasePolicy, TierConfig, make_policy
from kvbudget.policies.clients import client_models
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.registry import (
    POLICIES,
    parameter_hint,
    policy_parameters,
    unknown_policy,
)
from kvbudget.policies.tiers import MAX_LIMIT_TOKENS
from kvbudget.simulator.autoscale_config import AutoscaleConfig
from kvbudget.simulator.disagg_config import disagg_from_tables
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.fitted_knobs import FittedKnobs, with_fitted_knobs
from kvbudget.simulator.run import SimConfig
from kvbudget.simulator.sim_config import FleetConfig
from kvbudget.workloads import Workload
from kvbudget.workloads.closed_loop import ClosedLoop
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces import TraceOptions, load_trace
from kvbudget.workloads.traces.load import trace_seed
from kvbudget.workloads.traces.options import FORMATS

if TYPE_CHECKING:
    from annotated_types import Ge, Gt, Le, Lt
    from pydantic import TypeAdapter, ValidationError

    from kvbudget.policies.clients import ClientModel


def _bind_constraints() -> None:
    """Bind annotated_types' ``Ge``, ``Gt``, ``Le`` and ``Lt`` in this module, where the specs'
    annotations (strings until read) name them, for pydantic: done when it is first needed,
    since importing annotated_types costs ~10 ms of a start that may never need it."""
    if "Ge" not in globals():
        from annotated_types import Ge, Gt, Le, Lt

        globals().update(Ge=Ge, Gt=Gt, Le=Le, Lt=Lt)

# The tables of a scenario file: frozen dataclasses whose constraints pydantic reads from the
# annotations (``Annotated[int, Ge(1)]``), with unknown keys rejected. Pydantic validates them
# (and words the errors) whenever the plain check in ``_plain_value`` cannot vouch for the data.
_FORBID_EXTRA: dict[str, str] = {"extra": "forbid"}

# Bounds no real deployment comes near (a larger value is a typo, and would hang the run or
# overflow the engine's integer arrays): refused with the field's name.
MAX_REPLICAS = 10_000
MAX_USERS = 10_000_000
MAX_THINK_TIME_S = 86_400.0
MAX_PRIORITY = 2**31 - 1


@dataclass(frozen=True)
class SpeculativeSpec:
    """``[engine.speculative_config]``: vLLM's ``--speculative-config``
    (:class:`kvbudget.perf.speculative.SpeculativeConfig`, docs/speculative.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    method: str
    num_speculative_tokens: Annotated[int, Ge(1)]
    model: str | None = None
    acceptance_rate: Annotated[float, Ge(0), Le(1)] | None = None
    acceptance_length: Annotated[float, Ge(1)] | None = None
    acceptance_by_tier: dict[str, float] = field(default_factory=dict)
    speculative_token_tree: str | None = None
    draft_vocab_size: Annotated[int, Ge(1)] | None = None


@dataclass(frozen=True)
class EngineSpec:
    """``[engine]``: the engine's knobs, named as vLLM's flags (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    block_size: Annotated[int, Ge(1)] = 16
    num_gpu_blocks: Annotated[int, Ge(1)] | None = None
    max_num_seqs: Annotated[int, Ge(1)] | None = None
    max_num_batched_tokens: Annotated[int, Ge(1)] | None = None
    gpu_memory_utilization: Annotated[float, Gt(0), Le(1)] | None = None
    max_model_len: Annotated[int, Ge(2)] | None = None
    scheduling_policy: str = "fcfs"
    preemption_mode: str = "recompute"
    preemption_victim: str = "latest_arrival"
    watermark: Annotated[float, Ge(0), Lt(1)] = 0.0
    enable_chunked_prefill: bool = True
    skip_ahead: bool = True
    name: str = "vllm"
    swap_space_gib: Annotated[float, Ge(0)] = 4.0
    schedule_conservativeness: Annotated[float, Gt(0)] = 1.0
    capacity_scheduler_policy: str = "GUARANTEED_NO_EVICT"
    enable_prefix_caching: bool | None = None
    profile_cudagraph_memory: bool = True
    tensor_parallel_size: Annotated[int, Ge(1)] = 1
    enable_expert_parallel: bool = False
    kv_cache_dtype: str = "auto"
    max_num_queued_reqs: Annotated[int, Ge(1)] | None = None
    max_num_queued_tokens: Annotated[int, Ge(1)] | None = None
    max_queued_requests: Annotated[int, Ge(1)] | None = None
    max_concurrent_requests: Annotated[int, Ge(1)] | None = None
    async_scheduling: bool | None = None
    speculative_config: SpeculativeSpec | None = None
    kv_offloading_size: Annotated[float, Gt(0)] | None = None
    kv_offloading_backend: str = "native"


@dataclass(frozen=True)
class FrontDoorSpec:
    """``[front_door]``: the gateway's concurrency and queue limits (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    max_concurrent_requests: Annotated[int, Ge(1)] | None = 128
    max_num_queued_requests: Annotated[int, Ge(0)] | None = None
    max_num_queued_tokens: Annotated[int, Ge(0)] | None = None
    tier_max_queued: dict[str, int] = field(default_factory=dict)
    evict_lower_priority: bool = True


@dataclass(frozen=True)
class ClosedLoopSpec:
    """``[closed_loop]``: a fixed number of users, each sending its next request a think
    time after the last one ends (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    num_users: Annotated[int, Ge(1), Le(MAX_USERS)]
    think_time_s: Annotated[float, Ge(0), Le(MAX_THINK_TIME_S)] = 0.0
    think_distribution: str = "fixed"


@dataclass(frozen=True)
class AutoscaleSpec:
    """``[fleet.autoscale]``: the Kubernetes HPA over a vLLM metric (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    min_replicas: Annotated[int, Ge(1), Le(MAX_REPLICAS)] = 1
    max_replicas: Annotated[int, Ge(1), Le(MAX_REPLICAS)] = 4
    metric: str = "vllm:num_requests_running"
    target: Annotated[float, Gt(0)] = 64.0
    polling_interval_s: Annotated[float, Gt(0), Le(MAX_THINK_TIME_S)] = 30.0
    tolerance: Annotated[float, Ge(0)] = 0.1
    scale_down_stabilization_s: Annotated[float, Ge(0), Le(MAX_THINK_TIME_S)] = 300.0
    scale_up_stabilization_s: Annotated[float, Ge(0), Le(MAX_THINK_TIME_S)] = 0.0
    scale_up_delay_s: Annotated[float, Ge(0), Le(MAX_THINK_TIME_S)] | None = None
    engine_start_s: Annotated[float, Ge(0), Le(MAX_THINK_TIME_S)] = 14.18
    rate_window_s: Annotated[float, Gt(0), Le(MAX_THINK_TIME_S)] = 60.0
    initial_replicas: Annotated[int, Ge(1), Le(MAX_REPLICAS)] | None = None


@dataclass(frozen=True)
class FleetSpec:
    """``[fleet]``: replicas behind one router and one budget (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    num_replicas: Annotated[int, Ge(1), Le(MAX_REPLICAS)] = 2
    gpus: list[str] = field(default_factory=list)
    router: str = "round_robin"
    budget: str = "global"
    autoscale: AutoscaleSpec | None = None


@dataclass(frozen=True)
class DisaggPoolSpec:
    """``[disaggregation.prefill]`` or ``[disaggregation.decode]``: one pool's replicas, GPU,
    router and engine knobs (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    num_replicas: Annotated[int, Ge(1), Le(MAX_REPLICAS)] = 1
    gpu: str | None = None
    router: str = "least_tokens"
    engine: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DisaggSpec:
    """``[disaggregation]``: prefill and decode pools and the link between them
    (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    prefill: DisaggPoolSpec | None = None
    decode: DisaggPoolSpec | None = None
    link: str = "infiniband-ndr"
    link_bandwidth_gb_s: Annotated[float, Gt(0)] | None = None
    link_latency_s: Annotated[float, Ge(0)] | None = None  # None: the link preset's
    first_token: str = "decode"  # or "prefill" (DistServe's): DisaggConfig.first_token


@dataclass(frozen=True)
class TierSpec:
    """One ``[[tiers]]`` entry: a tier's limits, priority and latency targets
    (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    name: str
    max_sequence_tokens: Annotated[int, Ge(2)] = 32_768
    priority: Annotated[int, Ge(-MAX_PRIORITY), Le(MAX_PRIORITY)] = 0
    queue_timeout_s: Annotated[float, Ge(0)] | None = 10.0
    retryable_on_overload: bool = False
    ttft_s: Annotated[float, Gt(0)] = 2.0
    tpot_s: Annotated[float, Gt(0)] = 0.2
    guaranteed_tokens: Annotated[int, Ge(0)] = 0


@dataclass(frozen=True)
class ScenarioSpec:
    """A whole scenario file (or the flags that stand for one): its top-level keys and
    tables (docs/scenarios.md)."""

    __pydantic_config__: ClassVar[dict[str, str]] = _FORBID_EXTRA
    name: str = "scenario"
    seed: Annotated[int, Ge(0)] = 0
    policy: str = "conservative"
    policy_params: dict[str, Any] = field(default_factory=dict)
    gpu: str = "H100-80GB"
    model: str = "Llama-3.1-8B"
    cost_model: str | None = None
    cost_model_transfer: bool = False
    engine_defaults: str = "vllm"
    frontend: str | None = None
    gateway_capacity_tokens: Annotated[int, Ge(1), Le(MAX_LIMIT_TOKENS)] | None = None
    lease_ttl_s: Annotated[float, Gt(0)] | None = None
    timeline_period_s: Annotated[float, Gt(0)] = 1.0
    engine: EngineSpec = field(default_factory=EngineSpec)
    tiers: list[TierSpec] | None = None
    front_door: FrontDoorSpec | None = None
    fleet: FleetSpec | None = None
    closed_loop: ClosedLoopSpec | None = None
    clients: dict[str, Any] | None = None
    workload: dict[str, Any] = field(default_factory=dict)
    disaggregation: DisaggSpec | None = None


@cache
def _spec_adapter() -> TypeAdapter[ScenarioSpec]:
    from pydantic import TypeAdapter

    _bind_constraints()
    return TypeAdapter(ScenarioSpec)


def validate_spec(data: Mapping[str, Any]) -> ScenarioSpec:
    """The scenario spec of ``data``; ``ValueError`` naming the field when it is invalid."""
    spec = _plain_value(ScenarioSpec, data)
    if spec is not _UNSURE:
        return spec  # type: ignore[no-any-return]
    _refuse_loose_scalars(ScenarioSpec, data, "")
    from pydantic import ValidationError

    try:
        return _spec_adapter().validate_python(data)
    except ValidationError as exc:
        raise ValueError(_pydantic_message(exc)) from None


def dump_spec(spec: ScenarioSpec, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
    """The spec as the plain tables of a scenario file (unset optional fields left out)."""
    data: dict[str, Any] = _spec_adapter().dump_python(spec, mode=mode, exclude_none=True)
    return data


# What ``_plain_value`` returns for a value it cannot vouch for.
_UNSURE: Any = object()


def _plain_value(hint: Any, value: Any) -> Any:
    """``value`` validated as ``hint`` without pydantic (~80 ms to import and build its
    validators) when it already has the annotated type and meets its constraints, as scenarios
    built from command-line flags do; ``_UNSURE`` otherwise, for pydantic to coerce or reject.

    The result must be what pydantic itself returns, so only exact types pass (an int for a
    float field becomes the float pydantic makes of it); anything else is left to pydantic."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *constraints = get_args(hint)
        value = _plain_value(base, value)
        if value is _UNSURE or not all(_meets(c, value) for c in constraints):
            return _UNSURE
        return value
    if origin is UnionType or origin is Union:  # ``X | None`` (a Union when X is Annotated)
        if value is None:
            return None
        (other,) = (a for a in get_args(hint) if a is not NoneType)
        return _plain_value(other, value)
    if hint is Any:
        return value
    if hint in (int, str, bool):
        return value if type(value) is hint else _UNSURE
    if hint is float:
        if type(value) is int and abs(value) <= 2**53:  # exactly representable, as pydantic
            return float(value)
        return value if type(value) is float else _UNSURE
    if origin is dict:  # every dict of a spec has str keys
        value_hint = get_args(hint)[1]
        if type(value) is not dict or any(type(k) is not str for k in value):
            return _UNSURE
        out = {k: _plain_value(value_hint, v) for k, v in value.items()}
        return _UNSURE if any(v is _UNSURE for v in out.values()) else out
    if origin is list:
        (item_hint,) = get_args(hint)
        if type(value) is not list:
            return _UNSURE
        items = [_plain_value(item_hint, v) for v in value]
        return _UNSURE if any(v is _UNSURE for v in items) else items
    if isinstance(hint, type) and is_dataclass(hint):
        return _plain_dataclass(hint, value)
    return _UNSURE


def _refuse_loose_scalars(hint: Any, value: Any, where: str) -> None:
    """``true`` where a number is due, and anything but ``true``/``false`` where a switch is
    due, are refused (pydantic's lax mode would read ``seed = true`` as 1, ``block_size =
    true`` as one token, ``skip_ahead = "yes"`` or ``0`` as a switch)."""
    origin = get_origin(hint)
    if origin is Annotated:
        _refuse_loose_scalars(get_args(hint)[0], value, where)
    elif origin is UnionType or origin is Union:
        if value is not None:
            others = [a for a in get_args(hint) if a is not NoneType]
            if len(others) == 1:
                _refuse_loose_scalars(others[0], value, where)
    elif hint in (int, float) and isinstance(value, bool):
        raise ValueError(f"{where}: expected a number, got {str(value).lower()}")
    elif hint is bool and not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    elif origin is dict and isinstance(value, dict):
        for k, v in value.items():
            _refuse_loose_scalars(get_args(hint)[1], v, f"{where}.{k}" if where else str(k))
    elif origin is list and isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_loose_scalars(get_args(hint)[0], v, f"{where}.{i}")
    elif isinstance(hint, type) and is_dataclass(hint) and isinstance(value, dict):
        hints, _ = _spec_fields(hint)
        for k, v in value.items():
            if k in hints:
                _refuse_loose_scalars(hints[k], v, f"{where}.{k}" if where else k)


def _plain_dataclass(cls: type[Any], value: Any) -> Any:
    hints, required = _spec_fields(cls)
    if type(value) is not dict or not required <= value.keys() <= hints.keys():
        return _UNSURE
    kwargs = {name: _plain_value(hints[name], item) for name, item in value.items()}
    return _UNSURE if any(v is _UNSURE for v in kwargs.values()) else cls(**kwargs)


_SPEC_FIELDS: dict[type[Any], tuple[dict[str, Any], set[str]]] = {}


def _spec_fields(cls: type[Any]) -> tuple[dict[str, Any], set[str]]:
    """A spec dataclass's field annotations (constraints kept) and required fields."""
    if cls not in _SPEC_FIELDS:
        hints = get_type_hints(cls, localns=_PLAIN_CONSTRAINTS, include_extras=True)
        _SPEC_FIELDS[cls] = (
            {f.name: hints[f.name] for f in fields(cls)},
            {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING},
        )
    return _SPEC_FIELDS[cls]


def _constraint(compare: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    return lambda bound: (compare, bound)


# What the specs' constraint names read as for ``_plain_value``: (comparison, bound) pairs,
# not annotated_types' classes, whose import (~10 ms) a scenario from flags can do without.
_PLAIN_CONSTRAINTS: dict[str, Any] = {
    "Ge": _constraint(operator.ge),
    "Gt": _constraint(operator.gt),
    "Le": _constraint(operator.le),
    "Lt": _constraint(operator.lt),
}


def _meets(constraint: Any, value: Any) -> bool:
    compare, bound = constraint
    return bool(compare(value, bound))


@dataclass(frozen=True)
class Scenario:
    """A validated scenario; ``base_dir`` resolves relative paths in it; ``source`` is the file
    it was read from (``None`` for the embedded default), named by the workload's errors."""

    spec: ScenarioSpec
    base_dir: Path
    source: str | None = None
    fitted: FittedKnobs | None = None
    """The ``[engine]`` knobs taken from the cost file's fit, and those set otherwise than
    its (:mod:`kvbudget.simulator.fitted_knobs`): said with the file's other notes."""
    defaulted: frozenset[str] = frozenset()
    """``gpu``, ``model``: the fields the user left to the default scenario's values (no flag,
    ``--set`` or scenario file named them): their values are said as assumed, not as given."""

    def __repr__(self) -> str:
        """A notebook's view: what the scenario runs, not its every field (``.spec``)."""
        s, w, e = self.spec, self.spec.workload, self.spec.engine
        where = ("a fleet: .spec.fleet" if s.fleet else "disaggregated: .spec.disaggregation"
                 if s.disaggregation else f"engine {e.name}") + "".join(
            f", {k} {v:,}" for k in ("tensor_parallel_size", "num_gpu_blocks", "max_num_seqs",
                                     "max_num_batched_tokens")
            if (v := getattr(e, k)) is not None and (k != "tensor_parallel_size" or v > 1))
        return textwrap.fill(
            f"Scenario {s.name!r} ({self.source or 'the embedded default'}): policy {s.policy}, "
            f"model {s.model} on {s.gpu} ({where}); workload {w.get('path') or w.get('kind')}; "
            f"seed {s.seed}", 100, subsequent_indent="  ", break_on_hyphens=False,
        ) + "\n.spec (every field), .workload(), .sim_config(), .tiers()"

    @property
    def name(self) -> str:
        return self.spec.name

    def note_defaulted(self, summary: dict[str, Any]) -> dict[str, Any]:
        """``summary`` (a run's of this scenario) with ``defaulted``, the fields left to the
        default scenario's values (:attr:`defaulted`), where there are any: its ``simulated:``
        line (and ``kvbudget report``'s of it) says them as assumed."""
        if self.defaulted:
            summary["defaulted"] = sorted(self.defaulted)
        return summary

    @property
    def seed(self) -> int:
        return self.spec.seed

    def tiers(self) -> tuple[TierConfig, ...]:
        if self.spec.tiers is None:
            return DEFAULT_TIERS
        return tuple(TierConfig(**asdict(t)) for t in self.spec.tiers)

    def sim_config(self, *, say_fitted: bool = True) -> SimConfig:
        """The simulation's configuration; the cost file's notes said on stderr, the engine
        knobs taken from its fit among them unless not ``say_fitted`` (a caller that says them
        with its other settings: :meth:`~kvbudget.simulator.fitted_knobs.FittedKnobs.taken_said`)."""
        s = self.spec
        front_door = None
        if s.front_door is not None:
            fd = asdict(s.front_door)
            fd["tier_max_queued"] = tuple(sorted(fd["tier_max_queued"].items()))
            front_door = FrontDoor(**fd)
        fleet = None
        if s.fleet is not None:
            fl = asdict(s.fleet)
            fl["gpus"] = tuple(fl["gpus"])
            if fl["autoscale"] is not None:
                fl["autoscale"] = AutoscaleConfig(**fl["autoscale"])
            fleet = FleetConfig(**fl)
        clients: tuple[tuple[str, ClientModel], ...] = ()
        if s.clients:
            clients = client_models(s.clients, {t.name: t for t in self.tiers()})
        closed_loop = None
        if s.closed_loop is not None:
            closed_loop = ClosedLoop(**asdict(s.closed_loop))
        config = SimConfig(
            closed_loop=closed_loop,
            clients=clients,
            gpu=s.gpu,
            model=self._model(s.model),
            engine=_engine_config(s.engine),
            front_door=front_door,
            fleet=fleet,
            tiers=self.tiers(),
            gateway_capacity_tokens=s.gateway_capacity_tokens,
            lease_ttl_s=s.lease_ttl_s,
            timeline_period_s=s.timeline_period_s,
            seed=s.seed,
            engine_defaults=s.engine_defaults,  # type: ignore[arg-type]  # SimConfig checks it
            frontend=s.frontend,
            disaggregation=None if s.disaggregation is None else disagg_from_tables(
                asdict(s.disaggregation), asdict(s.engine)),
        )
        if s.cost_model is None:
            return config
        path = self._path(s.cost_model)
        checked = load_checked_cost_model(path, config.fit_target(),
                                          transfer=s.cost_model_transfer)
        print_notes(replace(checked, notes=checked.notes + fitted_engine_notes(
            path, config.engine.name) + (self.fitted.notes(taken=say_fitted)
                                         if self.fitted else ())))
        if checked.model is None:  # nothing carried over: the default step model
            return config
        # a calibrated file's frontend_overhead_s stands for the API server
        return replace(config, cost_model=checked.model,
                       frontend_overhead_s=checked.frontend_overhead_s or 0.0,
                       frontend=s.frontend if s.frontend is not None else "none")

    def make_policy(self, name: str | None = None) -> BasePolicy:
        """A fresh policy: the scenario's, or ``name`` (its parameters apply only to its own)."""
        if name is None or name == self.spec.policy:
            return make_policy(self.spec.policy, self.spec.policy_params)
        return make_policy(name)

    def workload(self) -> Workload:
        if self.source is None:
            return self._workload()
        try:
            return self._workload()
        except TraceError:
            raise  # names the trace file, its line and field
        except ValueError as exc:  # a field of [workload]: the file first, as every other
            raise ValueError(f"{self.source}: {exc}") from None

    def _workload(self) -> Workload:
        plain = _plain_trace(self.spec.workload)
        if plain is not None:
            # ``kind = "trace"`` with only ``path`` (and ``format``): the spec's defaults are
            # TraceOptions' own, so skip building the pydantic workload models
            path, fmt = plain
            # the trace's seed is drawn only if the load draws at all (see ``trace_seed``)
            return load_trace(self._trace_file(path), TraceOptions(format=fmt),
                              seed=partial(trace_seed, self.spec.seed)).workload
        # pydantic's models of the [workload] table: a trace's scenario never loads them
        from kvbudget.workloads.spec import build_workload, parse_workload_spec

        wspec = parse_workload_spec(self.spec.workload, prefix="workload")
        if self.spec.workload.get("kind") == "trace":
            self._trace_file(self.spec.workload["path"])
        rng = np.random.default_rng(np.random.SeedSequence(self.spec.seed))
        return build_workload(wspec, rng, base_dir=self.base_dir)

    def _model(self, value: str) -> str:
        """A preset name as it is; a config.json path relative to the scenario file's folder."""
        if is_preset(value) or not value.strip():
            return value  # an empty name is refused by name, not read as this folder
        try:
            path = self._path(str(Path(value).expanduser()))
            return str(path) if path.exists() else value
        except (OSError, ValueError):  # a name no file system takes (too long, a NUL byte)
            return value

    def _trace_file(self, path: str) -> Path:
        """The trace file ``[workload] path`` names; ``ValueError`` naming the field (the
        scenario file is put first by :meth:`workload`) when there is none."""
        file = self._path(str(Path(path).expanduser()))
        try:
            missing = not file.exists()
        except (OSError, ValueError):  # a name no file system takes: the loader says so
            missing = False
        if missing:
            raise ValueError(f"workload.path: {file} does not exist")
        return file

    def _path(self, value: str) -> Path:
        p = Path(value)
        return p if p.is_absolute() else self.base_dir / p

    def cost_model_path(self) -> Path | None:
        """The cost-model file the runs take (``cost_model``, relative to the scenario file),
        or None for the default step-time model."""
        return None if self.spec.cost_model is None else self._path(self.spec.cost_model)

    def to_toml_dict(self) -> dict[str, Any]:
        return dump_spec(self.spec)


def _plain_trace(workload: Mapping[str, Any]) -> tuple[str, str | None] | None:
    """(path, format) of a ``[workload]`` table that names a trace file and nothing else
    (valid as it stands); ``None`` for any other table, which the full spec validates."""
    if workload.get("kind") != "trace" or not set(workload) <= {"kind", "path", "format"}:
        return None
    path = workload.get("path")
    fmt = workload.get("format")
    if type(path) is not str or not path:
        return None
    if fmt is not None and (type(fmt) is not str or fmt not in FORMATS):
        return None
    return path, fmt


_UNKNOWN_KEY = ("unexpected_keyword_argument", "extra_forbidden")


def _pydantic_message(exc: ValidationError, prefix: str = "") -> str:
    errors = exc.errors()
    # a misspelt key is also a required one missing: the misspelling is the one to name
    err = next((e for e in errors if e["type"] in _UNKNOWN_KEY), errors[0])
    loc = ".".join(str(p) for p in err["loc"])
    if prefix:
        loc = f"{prefix}.{loc}" if loc else prefix
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f", got {value!r}"
    # pydantic words an unknown key of a dataclass as a keyword argument: say it of a table
    unknown = err["type"] in _UNKNOWN_KEY
    msg = "extra inputs are not permitted" if unknown else err["msg"].lower()
    hint = _closest_field(err["loc"]) if unknown and not prefix else ""
    return f"{loc}: {msg}{shown}{hint}"


def _closest_field(loc: Sequence[Any]) -> str:
    """``" (did you mean engine.max_num_seqs?)"`` for an unknown key at ``loc`` of the
    scenario spec (``engine.max_num_seq``), the table's known field closest to it; ``""``
    where none is close or the table is not a spec dataclass."""
    hint: Any = ScenarioSpec
    for part in loc[:-1]:
        hint = _spec_table(hint)
        if hint is None:
            return ""
        if isinstance(part, str):
            hint = _spec_fields(hint)[0].get(part)
    table = _spec_table(hint)
    if table is None or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(_spec_fields(table)[0]), n=1, cutoff=0.6)
    where = ".".join(str(p) for p in loc[:-1])
    if close:
        return f" (did you mean {where + '.' if where else ''}{close[0]}?)"
    if len(loc) == 1:  # a table's key given at the top: max_num_seqs for engine.max_num_seqs
        for name, field_hint in _spec_fields(ScenarioSpec)[0].items():
            sub = _spec_table(field_hint)
            lists = list in {get_origin(h) for h in (field_hint, *get_args(field_hint))}
            if sub is not None and not lists and (  # a list's tables need an index
                    loc[0] in _spec_fields(sub)[0]):
                return f" (did you mean {name}.{loc[0]}?)"
        takes = [name for name in POLICIES if loc[0] in policy_parameters(name)]
        if takes:  # a policy's parameter given at the top: overcommit_ratio
            return f" (did you mean policy_params.{loc[0]}? a parameter of {', '.join(takes)})"
    return ""


def field_names(policy: str) -> list[str]:
    """The dotted names a scenario takes a number or word at (``engine.max_num_seqs``,
    ``seed``): every field of the spec's tables, none of a list of tables (``tiers``) nor of
    the free-form ``workload`` and ``clients``; and ``policy_params.NAME`` for each parameter
    of ``policy`` (none for a policy not registered)."""

    def walk(cls: type[Any], prefix: str) -> list[str]:
        names = []
        for name, hint in _spec_fields(cls)[0].items():
            sub = _spec_table(hint)
            lists = list in {get_origin(h) for h in (hint, *get_args(hint))}
            if sub is not None and not lists:
                names += walk(sub, f"{prefix}{name}.")
            elif not lists and name not in ("policy_params", "workload", "clients"):
                names.append(f"{prefix}{name}")
        return names

    params = policy_parameters(policy) if policy in POLICIES else {}
    return [*walk(ScenarioSpec, ""), *(f"policy_params.{k}" for k in sorted(params))]


def nearest_field_names(key: str, names: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``names`` closest to ``key``: those whose last part is close to
    ``key``'s last part first (``overcommit_ratio`` -> ``policy_params.overcommit_ratio``),
    then those close as a whole."""
    last = key.rsplit(".", 1)[-1]
    tails = {name.rsplit(".", 1)[-1]: name for name in names}
    by_tail = [tails[t] for t in difflib.get_close_matches(last, list(tails), n=n, cutoff=0.75)]
    whole = difflib.get_close_matches(key, list(names), n=n, cutoff=0.6)
    return list(dict.fromkeys([*by_tail, *whole]))[:n]


def _spec_table(hint: Any) -> Any:
    """The spec dataclass a field's annotation holds (through ``Annotated``, ``| None`` and
    ``list[...]``), or None."""
    while hint is not None and not (isinstance(hint, type) and is_dataclass(hint)):
        args = [a for a in get_args(hint) if a is not NoneType]
        hint = args[0] if args else None
    return hint


_NOT_PLAIN = object()
# Literals that TOML and Python read alike (TOML's grammar, toml.io/en/v1.0.0): a decimal
# integer without sign, underscores or leading zeros; a decimal fraction; a boolean; a
# double-quoted string without escapes or control characters. Anything else goes to tomllib.
_PLAIN_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_PLAIN_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")
_PLAIN_STRING = re.compile(r'"[^"\\\x00-\x1f\x7f]*"')


def _plain_literal(raw: str) -> Any:
    """``raw`` read as ``tomllib.loads(f"v = {raw}")["v"]`` reads it, for the plain literals
    every command-line flag becomes (:func:`make_scenario` writes them with ``json.dumps``),
    without importing tomllib; ``_NOT_PLAIN`` for anything else."""
    if _PLAIN_INT.fullmatch(raw):
        return int(raw)
    if _PLAIN_FLOAT.fullmatch(raw):
        return float(raw)
    if raw == "true" or raw == "false":
        return raw == "true"
    if _PLAIN_STRING.fullmatch(raw):
        return raw[1:-1]
    return _NOT_PLAIN


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=3`` -> (["a", "b"], 3); values are read as TOML/JSON literals, else as strings."""
    if "=" not in item:
        raise ValueError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    parts = [p.strip() for p in key.strip().split(".")]
    path = [p for p in parts if p]
    if not path:
        raise ValueError(f"--set {item!r}: empty key")
    if len(path) != len(parts):  # engine..block_size, .seed, engine.: a typo, not a key
        raise ValueError(f"--set {item!r}: the key {key.strip()!r} has an empty part")
    raw = raw.strip()
    value: Any = _plain_literal(raw)
    if value is not _NOT_PLAIN:
        return path, value
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        try:
            value = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            value = raw
    return path, value


def _index(item: str, path: list[str], items: list[Any]) -> int:
    """The list index ``path``'s last part names, if ``items`` has it."""
    index = int(path[-1])
    if index >= len(items):
        raise ValueError(f"--set {item!r}: {'.'.join(path[:-1])} has {len(items)} entries "
                         f"(indices 0 to {len(items) - 1}): no index {index}")
    return index


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``data`` with each ``--set key=value`` applied; ``tiers.N.field`` on a scenario that
    gives no tiers changes the default tiers (interactive, batch), which it then gives."""
    out = copy.deepcopy(data)
    for item in overrides:
        path, value = parse_override(item)
        if path[0] == "tiers" and "tiers" not in out and len(path) > 1:
            out["tiers"] = [asdict(t) for t in DEFAULT_TIERS]
        node: Any = out
        for i, part in enumerate(path[:-1]):
            if part.isdigit() and isinstance(node, list):
                node = node[_index(item, path[:i + 1], node)]
                continue
            if not isinstance(node, dict):
                raise ValueError(f"--set {item!r}: {'.'.join(path[: i + 1])} is not a table")
            node = node.setdefault(part, {})
        last = path[-1]
        if isinstance(node, list) and last.isdigit():
            node[_index(item, path, node)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ValueError(f"--set {item!r}: {'.'.join(path[:-1])} is not a table")
    return out


def _check_no_double(overrides: Sequence[str], trace: Path | None, trace_format: str | None,
                     trace_options: Mapping[str, Any]) -> None:
    """Refuse a ``--set`` of what a keyword value (a flag) gives too: the trace, its format or
    one of its options (merged into the scenario before the ``--set`` items, the item would
    win over the flag, unsaid)."""
    flags = {"clients": "servegen-clients", "columns": "column"}
    given = {f"workload.options.{k}": f"the trace option {k} (--{flags.get(k, k.replace('_', '-'))})"
             for k in trace_options}
    if trace_options:
        given["workload.options"] = "the trace options " + ", ".join(sorted(trace_options))
        given["workload"] = given["workload.options"]
    if trace is not None:
        given["workload.path"] = given["workload.kind"] = given["workload"] = "the trace (--trace)"
    if trace_format is not None:
        given["workload.format"] = "the trace's format (--format)"
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in given:
            raise ValueError(f"--set {key}: {given[key]} gives it too: give it once")


def _check_policy_params(policy: str, params: Mapping[str, Any]) -> None:
    """``policy_params`` are the scenario's policy's: a key it does not take is named as the
    field, with the key meant or the policies that take it and how to choose one."""
    if policy not in POLICIES:
        raise ValueError(f"policy: {unknown_policy(policy)}")
    known = policy_parameters(policy)
    for key in sorted(params):
        if key not in known:
            raise ValueError(f"policy_params.{key}: the scenario's policy {policy!r} has no such "
                             "parameter"
                             + parameter_hint(policy, key, "policy_params.", _CHOOSE_POLICY))


_CHOOSE_POLICY = (": make one of them the scenario's policy (--set policy=NAME, simulate's "
                  "--policy NAME, or policy = \"NAME\" in the file; policy_params are that "
                  "policy's only)")


def scenario_from_dict(
    data: Mapping[str, Any], base_dir: Path, overrides: Sequence[str] = (), *,
    source: str | Path | None = None, say_fitted: bool = True, block_size_ran: int | None = None,
    embedded: bool = False,
) -> Scenario:
    """``embedded``: ``data`` is the embedded default scenario's, whose GPU and model the user
    did not give (:attr:`Scenario.defaulted`)."""
    merged, fitted = with_fitted_knobs(apply_overrides(dict(data), overrides), base_dir,
                                       _ENGINE_DEFAULTS)
    spec = validate_spec(merged)
    scenario = Scenario(spec, base_dir, None if source is None else str(source), fitted,
                        _defaulted(data, overrides, embedded=embedded))
    try:
        _check_scenario(scenario, say_fitted, block_size_ran)
    except ValueError as exc:  # a knob nobody here set is named as the cost file's fit's
        if fitted is None or fitted.named_in(str(exc)) == str(exc):
            raise
        raise ValueError(fitted.named_in(str(exc))) from None
    return scenario


def _defaulted(data: Mapping[str, Any], overrides: Sequence[str], *,
               embedded: bool) -> frozenset[str]:
    """``gpu``, ``model``: those neither ``data`` (a scenario file's table; not the embedded
    default's, ``embedded``) nor an override (``--set``, ``--gpu``, ``--model``) named, so
    that the run takes :class:`ScenarioSpec`'s (the default scenario's) values."""
    named = {item.partition("=")[0].strip() for item in overrides}
    return frozenset(key for key in ("gpu", "model")
                     if (embedded or key not in data) and key not in named)


def check_cost_model_at(scenario: Scenario, config: SimConfig, where: str) -> None:
    """Check the scenario's cost-model file against ``config``'s GPU, model and parallelism (a
    study's grid point that varies them: ``plan --gpus``, ``tune --param
    engine.tensor_parallel_size``), before any run: the one-line refusal of
    :func:`~kvbudget.perf.fitted_on.load_checked_cost_model` prefixed with ``where``, or, with
    ``cost_model_transfer``, its note of what carries over said now."""
    path = scenario.cost_model_path()
    if path is None:
        return
    try:
        checked = load_checked_cost_model(path, config.fit_target(),
                                          transfer=scenario.spec.cost_model_transfer)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    print_notes(checked)


def _check_scenario(scenario: Scenario, say_fitted: bool = True,
                    block_size_ran: int | None = None) -> None:
    """Fail early on bad names and values that only the library checks (``say_fitted``:
    :meth:`Scenario.sim_config`'s; ``block_size_ran``: a block size a recorded server ran
    with, SGLang's page of 1, taken as it is where ``--engine vllm`` simulates its pool)."""
    spec = scenario.spec
    try:
        config = scenario.sim_config(say_fitted=say_fitted)
        if config.engine.speculative_config is not None:  # its tiers are the run's
            config.engine.speculative_config.resolved(
                config.seed, {t.name: t.priority for t in config.tiers})
        _check_policy_params(spec.policy, spec.policy_params)
        scenario.make_policy()
    except ValueError as exc:
        raise ValueError(f"{exc}") from None
    _check_workload_tiers(spec.workload, {t.name for t in scenario.tiers()})
    eng = spec.engine
    if (eng.name.startswith("vllm") and eng.max_num_seqs is not None
            and eng.max_num_batched_tokens is not None
            and eng.max_num_batched_tokens < eng.max_num_seqs):
        # vLLM refuses both set so at start-up (SchedulerConfig, scheduler.py:330-335): a step
        # could not give every running sequence its decode token
        raise ValueError(
            f"engine.max_num_batched_tokens ({eng.max_num_batched_tokens}) must be greater "
            f"than or equal to engine.max_num_seqs ({eng.max_num_seqs}), as vLLM requires")
    if eng.block_size != block_size_ran:
        _check_block_size(eng.name, eng.block_size)


def _check_block_size(engine: str, block_size: int) -> None:
    """Refuse a block size the simulated engine's vLLM would not run on a CUDA GPU: vLLM
    0.32.0's (``vllm``) a multiple of :data:`BLOCK_SIZE_MULTIPLE`, vLLM v0's (``vllm-swap``)
    one of :data:`V0_BLOCK_SIZES` (8 too: v0 ran it on XFormers)."""
    if engine == "vllm" and block_size % BLOCK_SIZE_MULTIPLE:
        raise ValueError(
            f"engine.block_size {block_size} is not a multiple of {BLOCK_SIZE_MULTIPLE}: "
            f"vLLM 0.32.0 has no CUDA attention backend for it and stops at start-up ('No valid "
            f"attention backend found'; kvbudget.perf.vllm_defaults.BLOCK_SIZE_MULTIPLE)")
    if engine == "vllm-swap" and block_size not in V0_BLOCK_SIZES:
        raise ValueError(
            f"engine.block_size {block_size} is none of vLLM v0's "
            f"({', '.join(map(str, V0_BLOCK_SIZES))}): engine vllm-swap is vLLM v0 with swap "
            "preemption, whose --block-size takes no other size on a CUDA GPU "
            "(kvbudget.perf.vllm_defaults.V0_BLOCK_SIZES)")


_ENGINE_DEFAULTS = {f.name: f.default for f in fields(EngineSpec) if f.default is not MISSING}
"""``[engine]``'s defaults: a cost file's fit set the knobs it ran otherwise."""


def _engine_config(spec: EngineSpec) -> EngineConfig:
    """``[engine]`` as the engine's knobs (``speculative_config`` as its own config)."""
    knobs = asdict(spec)
    sc = knobs.pop("speculative_config")
    if sc is not None:
        sc["acceptance_by_tier"] = tuple(sc["acceptance_by_tier"].items())
    try:
        return EngineConfig(**knobs,
                            speculative_config=None if sc is None else SpeculativeConfig(**sc))
    except ValueError as exc:  # a knob's check names it as the user writes it: engine.NAME
        text = str(exc)
        named = text.split(" ")[0].removesuffix(":") in knobs  # "KEY ..." or "KEY: ..."
        raise ValueError(f"engine.{text}" if named else text) from None


def _check_workload_tiers(workload: Mapping[str, Any], known: set[str]) -> None:
    """The tiers a workload table names (a synthetic mix's ``tiers[].name``, a trace's
    ``options.default_tier``, ``tier_map`` values and ``tier_shares`` keys) are configured
    tiers: refused here, naming the field, rather than when a run (a sweep's first) starts."""
    named: list[tuple[str, object]] = []
    tiers = workload.get("tiers")
    if isinstance(tiers, list):
        named += [(f"workload.tiers.{i}.name", t.get("name")) for i, t in enumerate(tiers)
                  if isinstance(t, dict)]
    options = workload.get("options")
    if isinstance(options, dict):
        if "default_tier" in options:
            named.append(("workload.options.default_tier (--default-tier)",
                          options["default_tier"]))
        tier_map = options.get("tier_map")
        if isinstance(tier_map, dict):
            named += [(f"workload.options.tier_map[{k!r}] (--tier-map)", v)
                      for k, v in tier_map.items()]
        shares = options.get("tier_shares")
        if isinstance(shares, dict):
            named += [("workload.options.tier_shares (--tier-shares)", k) for k in shares]
    for where, name in named:
        if isinstance(name, str) and name not in known:
            raise ValueError(f"{where}: tier {name!r} is not configured; configured tiers: "
                             f"{', '.join(sorted(known))} (add a [[tiers]] table for it)")


MAX_SCENARIO_BYTES = 1 << 20
"""A scenario file is read up to 1 MiB (the shipped ones are under 10 KiB; a workload of many
requests belongs in a trace file): anything bigger (or a device that never ends) is refused."""


def _read_toml(path: Path) -> dict[str, Any]:
    """A scenario file's tables; each way it cannot be read is one line naming the file."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_SCENARIO_BYTES + 1)
        if len(data) > MAX_SCENARIO_BYTES:
            raise ValueError(f"{path}: a scenario file is at most 1 MiB ({MAX_SCENARIO_BYTES:,} "
                             "bytes); put many requests in a trace file (--trace)")
        return tomllib.loads(data.decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a directory, not a scenario file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the scenario file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a TOML scenario file (not UTF-8 text: byte "
                         f"{exc.start})") from None
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None


def load_scenario(path: Path | str, overrides: Sequence[str] = ()) -> Scenario:
    """Read and validate a TOML scenario file (a path or its name as a string; ``overrides``:
    ``--set`` items, ``key=value``); errors name the file and the field."""
    path = Path(path)
    data = _read_toml(path)
    try:
        return scenario_from_dict(data, path.resolve().parent, overrides, source=path)
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
        from kvbudget.workloads.spec import default_workload_spec  # pydantic: see workload()

        data["workload"] = default_workload_spec().model_dump(mode="json", exclude_none=True)
    return data


def default_scenario(overrides: Sequence[str] = ()) -> Scenario:
    """The embedded default scenario (what ``kvbudget simulate`` runs with no arguments), with
    ``key=value`` overrides applied as ``--set`` applies them."""
    return scenario_from_dict(default_scenario_dict(), Path.cwd(), overrides, embedded=True)


def _exists(text: str) -> bool:
    """Whether ``text`` names an existing path; false for a name no file system takes."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


ENGINE_FLAG_KEYS: tuple[str, ...] = (
    "num_gpu_blocks",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "name",
)
"""``[engine]`` keys that :func:`make_scenario` takes as keyword values (the command line's
engine flags; any other key goes through ``overrides``)."""


def synthetic_rate_hint(workload: Any, rate_scale: Any) -> str:
    """What to give instead of a trace's rate scale for a synthetic workload (``[workload]``
    as its table holds it): ``"; a synthetic workload's rate is its arrival's: --set
    workload.arrival.rate_rps=11 is 2x this scenario's 5.5 req/s"`` (the arrival's rate times the
    scale where both are numbers, else ``R``)."""
    arrival = workload.get("arrival") if isinstance(workload, Mapping) else None
    rate = arrival.get("rate_rps") if isinstance(arrival, Mapping) else None
    try:
        scale = float(rate_scale)
    except (TypeError, ValueError):
        scale = math.nan
    said = "; a synthetic workload's rate is its arrival's: --set workload.arrival.rate_rps="
    if isinstance(rate, int | float) and not isinstance(rate, bool) and scale > 0:
        return f"{said}{rate * scale:g} is {scale:g}x this scenario's {rate:g} req/s"
    return f"{said}R (requests a second)"


def _add_trace_options(workload: Any, trace_options: Mapping[str, Any]) -> None:
    """The trace options into a trace workload's ``[workload.options]`` table; a rate scale
    alone into a synthetic workload's ``rate_scale`` (sweep's meaning: the drawn requests
    offered that many times as fast, said with the run); refused for any other workload."""
    if (isinstance(workload, dict) and workload.get("kind", "synthetic") == "synthetic"
            and set(trace_options) == {"rate_scale"}):
        workload["rate_scale"] = float(workload.get("rate_scale", 1.0)) * float(
            trace_options["rate_scale"])
        return
    if not isinstance(workload, dict) or workload.get("kind") != "trace":
        names = ", ".join(sorted(trace_options))
        raise ValueError(f"trace options ({names}) need a trace: give --trace FILE, or a "
                         "scenario whose [workload] has kind = \"trace\""
                         + (synthetic_rate_hint(workload, trace_options["rate_scale"])
                            if "rate_scale" in trace_options else ""))
    workload["options"] = {**workload.get("options", {}), **trace_options}


def make_scenario(
    scenario: Path | None = None,
    overrides: Sequence[str] = (),
    *,
    policy: str | None = None,
    policy_params: Mapping[str, Any] | None = None,
    gpu: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    trace: Path | None = None,
    trace_format: str | None = None,
    trace_options: Mapping[str, Any] | None = None,
    cost_model: Path | None = None,
    cost_model_transfer: bool = False,
    engine: Mapping[str, Any] | None = None,
    clients: Mapping[str, Any] | None = None,
    engine_defaults: str | None = None,
    frontend: str | None = None,
    say_fitted: bool = True,
    block_size_ran: int | None = None,
) -> Scenario:
    """A scenario file (or the embedded default) with values applied on top, as the command
    line's flags do: a notebook's way to say ``kvbudget simulate --trace T --gpu G ...``
    (``say_fitted``: :meth:`Scenario.sim_config`'s, as the scenario is checked).

    ``trace`` replaces the workload by that trace file (``trace_format``, and
    ``trace_options``: a ``[workload.options]`` table as in a scenario file, e.g.
    ``{"sample_count": 500, "window": [0, 600]}``); ``trace_options`` without ``trace`` apply
    to the scenario's own trace workload. ``engine`` maps ``[engine]`` keys to values
    (``{"max_num_seqs": 128, "name": "sglang"}``). ``clients`` maps tiers to client presets
    or tables, over the scenario's ``[clients]`` (``{"batch": "batch-pipeline"}``). ``overrides`` are ``--set`` items
    (``key=value``), applied before the keyword values. Errors name the file and the field.
    ``block_size_ran``: a recorded server's block size, not refused as one vLLM would not run."""
    if scenario is not None:
        data: dict[str, Any] = _read_toml(Path(scenario))
        base = Path(scenario).resolve().parent
    else:
        data = default_scenario_dict(workload=trace is None)
        base = Path.cwd()
    if policy is not None and policy != data.get("policy"):
        data["policy"] = policy
        data["policy_params"] = {}
    if policy_params:
        data["policy_params"] = {**data.get("policy_params", {}), **policy_params}
    if clients:
        data["clients"] = {**(data.get("clients") or {}), **clients}
    flags: list[str] = []
    if model is not None and not is_preset(model) and model.strip() and _exists(model):
        model = str(Path(model).expanduser().resolve())  # a config.json, from here
    if gpu is not None and gpu.endswith((".json", ".toml")) and _exists(gpu):
        gpu = str(Path(gpu).resolve())  # a GPU file, from here
    for key, value in (("gpu", gpu), ("model", model), ("seed", seed),
                       ("engine_defaults", engine_defaults), ("frontend", frontend)):
        if value is not None:
            flags.append(f"{key}={json.dumps(value)}")
    flags += [f"engine.{k}={json.dumps(v)}" for k, v in (engine or {}).items() if v is not None]
    if cost_model is not None:
        flags.append(f"cost_model={json.dumps(str(Path(cost_model).resolve()))}")
    if cost_model_transfer:
        flags.append("cost_model_transfer=true")
    _check_no_double(overrides, trace, trace_format, trace_options or {})
    if trace is not None:
        if not Path(trace).exists():
            raise FileNotFoundError(f"{trace}: no such trace file")
        data["workload"] = {"kind": "trace", "path": str(Path(trace).resolve())}
        if trace_format is not None:
            data["workload"]["format"] = trace_format
    if trace_options:
        _add_trace_options(data.get("workload"), trace_options)
    try:
        return scenario_from_dict(data, base, [*overrides, *flags], source=scenario,
                                  say_fitted=say_fitted, block_size_ran=block_size_ran,
                                  embedded=scenario is None)
    except ValueError as exc:
        where = f"{scenario}: " if scenario is not None else ""
        raise ValueError(f"{where}{exc}") from None
