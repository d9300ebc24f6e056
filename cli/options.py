"""The option sets the commands share, each declared once.

* :data:`TRACE_OPTIONS`: how a trace file is read and transformed (``--format``, ``--window``,
  ``--sample-count``, ``--tier-map`` ...), parsed into :class:`TraceArgs` (``.options()`` gives
  :class:`kvbudget.workloads.traces.TraceOptions`, ``.table()`` the ``[workload.options]`` table
  of a scenario file);
* :data:`ENGINE_OPTIONS`: the engine knobs under vLLM's names (``--max-num-seqs`` ...), each
  an ``[engine]`` key of the scenario;
* :data:`SCENARIO_OPTIONS`: ``--scenario``, ``--set``, ``--gpu``, ``--model``,
  ``--cost-model`` and ``--trace`` (with the trace and engine options), parsed into
  :class:`ScenarioArgs`, whose ``.build()`` is :func:`kvbudget.simulator.scenario.make_scenario`.

A command takes a set by decorating itself (:func:`with_trace_options`,
:func:`with_scenario_options`) and declaring one parameter (``trace_args: TraceArgs`` or
``setup: ScenarioArgs``): the decorator adds the set's options to the command's signature, so
typer shows them under their own help panels, and hands the command the parsed object.
A new shared option is one entry in a table below (its name, its ``Annotated`` type with the
``typer.Option``, its default); every command that takes the set then has it.
"""

import dataclasses
import inspect
import json
import tomllib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import CliError
from kvbudget.perf.vllm_defaults import VLLM_VERSION
from kvbudget.policies import POLICIES, make_policy
from kvbudget.policies.clients import parse_clients
from kvbudget.policies.registry import unknown_policy
from kvbudget.results.said import fill
from kvbudget.simulator.engine_config import ENGINE_NAMES
from kvbudget.simulator.scenario import (
    ScenarioSpec,
    default_scenario_dict,
    make_scenario,
    synthetic_rate_hint,
)
from kvbudget.studies.setting import study_setting
from kvbudget.workloads.arrivals import ConstantArrivals, GammaArrivals, PoissonArrivals
from kvbudget.workloads.errors import SpecError
from kvbudget.workloads.max_output import FactorOfTrue, FixedCap, QuantileCap
from kvbudget.workloads.traces.options import FORMATS, TraceOptions
from kvbudget.workloads.traces.report import load_said

if TYPE_CHECKING:
    from kvbudget.policies import BasePolicy
    from kvbudget.simulator.scenario import Scenario
    from kvbudget.workloads.arrivals import ArrivalProcess
    from kvbudget.workloads.max_output import MaxOutputRule
    from kvbudget.workloads.workload import Workload

_T = "Trace options"
_E = "Engine options"
_S = "Scenario options"

# name -> (annotation, default); the name is the command function's parameter
TRACE_OPTIONS: dict[str, tuple[Any, Any]] = {
    "format": (Annotated[str | None, typer.Option(
        "--format", help=f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]} (default: detected "
        "from the header).", rich_help_panel=_T)], None),
    "window": (Annotated[str | None, typer.Option(
        "--window", metavar="START:END", help="Keep requests with START <= t < END seconds on "
        "the trace clock (END may be empty); t is then counted from START.",
        rich_help_panel=_T)], None),
    "rate_scale": (Annotated[str | None, typer.Option(
        "--rate-scale", metavar="F", help="Divide arrival times by F (2 = twice the rate; "
        "a synthetic workload's drawn requests likewise, the same requests faster; "
        "sweep: a list, e.g. 0.5,1,1.5, is a load axis).", rich_help_panel=_T)], None),
    "sample_fraction": (Annotated[float | None, typer.Option(
        "--sample-fraction", help="Keep this random fraction of the requests.",
        rich_help_panel=_T)], None),
    "sample_count": (Annotated[int | None, typer.Option(
        "--sample-count", help="Keep this many random requests.", rich_help_panel=_T)], None),
    "tier_column": (Annotated[str | None, typer.Option(
        "--tier-column", help="Column whose value picks the tier (e.g. 'Log Type', 'Model').",
        rich_help_panel=_T)], None),
    "tier_map": (Annotated[list[str] | None, typer.Option(
        "--tier-map", metavar="VALUE=TIER", help="Map a --tier-column value to a tier "
        "(repeatable); others get --default-tier.", rich_help_panel=_T)], None),
    "tier_shares": (Annotated[str | None, typer.Option(
        "--tier-shares", metavar="TIER=SHARE,...", help="Assign tiers at random by share "
        "(e.g. interactive=0.7,batch=0.3).", rich_help_panel=_T)], None),
    "default_tier": (Annotated[str | None, typer.Option(
        "--default-tier", help="Tier of requests no rule assigns (default interactive).",
        rich_help_panel=_T)], None),
    "max_output": (Annotated[str | None, typer.Option(
        "--max-output", metavar="RULE", help="max_output_tokens where the file has none: "
        "N (= fixed:N), fixed:N, factor:F or quantile:Q, optionally :truncate (default fixed:2048, never "
        "below the true output).", rich_help_panel=_T)], None),
    "spread_s": (Annotated[float | None, typer.Option(
        "--spread-s", help="Spread requests sharing a timestamp evenly over this many seconds "
        "(Kimi traces: 3).", rich_help_panel=_T)], None),
    "arrival": (Annotated[str | None, typer.Option(
        "--arrival", metavar="PROCESS", help="Arrivals for length-only tables: poisson:RATE, "
        "gamma:RATE:CV or constant:RATE (default poisson:1).", rich_help_panel=_T)], None),
    "column": (Annotated[list[str] | None, typer.Option(
        "--column", metavar="NAME=COLUMN", help="Generic format: read NAME (arrival_s, "
        "prompt_tokens, output_tokens, max_output_tokens, tier, deadline_s, id, hash_ids) from "
        "COLUMN (repeatable).", rich_help_panel=_T)], None),
    "arrival_unit": (Annotated[str | None, typer.Option(
        "--arrival-unit", help="Generic format: unit of arrival_s and deadline_s (s, ms, us, ns; "
        "default s).", rich_help_panel=_T)], None),
    "servegen_clients": (Annotated[str | None, typer.Option(
        "--servegen-clients", metavar="ID,...", help="ServeGen: chunk ids to load.",
        rich_help_panel=_T)], None),
    "servegen_arrivals": (Annotated[str | None, typer.Option(
        "--servegen-arrivals", help="ServeGen inter-arrivals: fitted_rate (default), fitted "
        "or rate_cv.", rich_help_panel=_T)], None),
}

# name -> (annotation, default, [engine] key of the scenario)
ENGINE_OPTIONS: dict[str, tuple[Any, Any, str]] = {
    "num_gpu_blocks": (Annotated[int | None, typer.Option(
        "--num-gpu-blocks", help="KV blocks the engine can allocate (a vLLM server's "
        "num_gpu_blocks_override, or its log's 'KV cache size' over the block size, less the "
        "one block it keeps as its null block; default: the scenario's, else sized from the "
        "GPU's memory as the --engine-defaults size it).",
        rich_help_panel=_E)], None, "num_gpu_blocks"),
    "block_size": (Annotated[int | None, typer.Option(
        "--block-size", help="Tokens per KV block (default: the scenario's, else 16, vLLM's); "
        "for engine vllm a multiple of 16, as its CUDA attention backends take.",
        rich_help_panel=_E)], None,
        "block_size"),
    "max_num_seqs": (Annotated[int | None, typer.Option(
        "--max-num-seqs", help="Running requests cap (default: the scenario's, else the "
        "--engine-defaults' for the GPU: kvbudget presets).", rich_help_panel=_E)], None,
        "max_num_seqs"),
    "max_num_batched_tokens": (Annotated[int | None, typer.Option(
        "--max-num-batched-tokens", help="Tokens per engine step cap (default: the "
        "scenario's, else the --engine-defaults' for the GPU: kvbudget presets).",
        rich_help_panel=_E)], None, "max_num_batched_tokens"),
    "engine": (Annotated[str | None, typer.Option(
        "--engine", help="Engine behaviour: vllm, vllm-swap, tgi, sglang or trtllm (default: "
        "the scenario's, else vllm).",
        rich_help_panel=_E)], None, "name"),
    "gpu_memory_utilization": (Annotated[float | None, typer.Option(
        "--gpu-memory-utilization", help="Fraction of GPU memory vLLM may use, the KV cache "
        "sized in what the weights and activations leave of it (default: the scenario's, else "
        "the --engine-defaults': vLLM's 0.92, kvbudget-0.1's 0.9).", rich_help_panel=_E)], None,
        "gpu_memory_utilization"),
    "tensor_parallel_size": (Annotated[int | None, typer.Option(
        "--tensor-parallel-size", "-tp", help="GPUs each replica shards the model over "
        "(default: the scenario's, else 1).",
        rich_help_panel=_E)], None, "tensor_parallel_size"),
    "enable_expert_parallel": (Annotated[bool | None, typer.Option(
        "--enable-expert-parallel", help="MoE models: whole "
        "experts spread over the GPUs instead of every expert sharded.",
        rich_help_panel=_E)], None, "enable_expert_parallel"),
    "kv_cache_dtype": (Annotated[str | None, typer.Option(
        "--kv-cache-dtype", help="auto (the model's 16-bit dtype), fp8 (= fp8_e4m3) or "
        "fp8_e5m2 (default: the scenario's, else auto, vLLM's).", rich_help_panel=_E)], None,
        "kv_cache_dtype"),
}

CLIENTS_HELP = ("What each tier's clients do with answers (no-retry, openai-sdk, batch-pipeline, "
                "impatient-user), over the scenario's [clients], e.g. "
                "batch=batch-pipeline,interactive=impatient-user.")
ClientsOpt = Annotated[str | None, typer.Option("--clients", metavar="TIER=PRESET,...",
                                                help=CLIENTS_HELP)]
_L = "Load options"
# name -> (annotation, default, scenario key)
UsersOpt = Annotated[int | None, typer.Option(
    "--users", min=1, help="Closed-loop load: this many users, each sending its next "
    "request a think time after its last one ended (vllm bench serve --max-concurrency).",
    rich_help_panel=_L)]
ThinkTimeOpt = Annotated[float | None, typer.Option(
    "--think-time-s", min=0.0, help="Closed loop: seconds a user waits after an answer "
    "(default 0).", rich_help_panel=_L)]
LOAD_OPTIONS: dict[str, tuple[Any, Any, str]] = {
    "users": (UsersOpt, None, "closed_loop.num_users"),
    "think_time_s": (ThinkTimeOpt, None, "closed_loop.think_time_s"),
}

SCENARIO_OPTIONS: dict[str, tuple[Any, Any]] = {
    "scenario": (Annotated[Path | None, typer.Option(
        "--scenario", help="A TOML scenario file (see docs/scenarios.md).",
        rich_help_panel=_S)], None),
    "overrides": (Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=VALUE", help="Override a scenario field (dotted, repeatable), "
        "e.g. engine.max_num_seqs=128, or policy=overcommit with "
        "policy_params.overcommit_ratio=0.7 (policy_params are the scenario's policy's).",
        rich_help_panel=_S)], None),
    "gpu": (Annotated[str | None, typer.Option(
        "--gpu", help="GPU preset (kvbudget presets) or a JSON/TOML file of its figures "
        "(docs/fidelity.md); default: the scenario's, H100-80GB in the default one.",
        rich_help_panel=_S)], None),
    "engine_defaults": (Annotated[str | None, typer.Option(
        "--engine-defaults", help="Whose defaults fill the engine knobs and pick the step "
        f"model: vllm (vLLM {VLLM_VERSION}'s, the default) or kvbudget-0.1 (this tool's before).",
        rich_help_panel=_S)], None),
    "frontend": (Annotated[str | None, typer.Option(
        "--frontend", help="API-server cost clients see: vllm-api-server (default with the "
        "default step model) or none (engine-side recordings).", rich_help_panel=_S)], None),
    "model": (Annotated[str | None, typer.Option(
        "--model", help="Model preset (kvbudget presets) or a Hugging Face config.json (or its "
        "folder); default: the scenario's, Llama-3.1-8B in the default one.",
        rich_help_panel=_S)], None),
    "cost_model": (Annotated[Path | None, typer.Option(
        "--cost-model", help="A cost-model JSON file (kvbudget calibrate/profile).",
        rich_help_panel=_S)], None),
    "cost_model_transfer": (Annotated[bool, typer.Option(
        "--cost-model-transfer", help="Use a --cost-model fitted on another model or GPU: "
        "carry over only the parameters it names as transferable (same GPU), reset the rest.",
        rich_help_panel=_S)], False),
    "trace": (Annotated[Path | None, typer.Option(
        "--trace", help="Replay a trace file instead of the scenario's workload (with the "
        "trace options).", rich_help_panel=_S)], None),
    "clients": (Annotated[str | None, typer.Option(
        "--clients", metavar="TIER=PRESET,...", help=CLIENTS_HELP, rich_help_panel=_S)], None),
}


# --- parsing of the trace options -------------------------------------------------------------


def _split_pairs(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CliError(f"{option} must be KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _float(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise CliError(f"{option}: not a number: {text!r}") from None


def parse_window(text: str) -> tuple[float, float | None]:
    start, sep, end = text.partition(":")
    if not start.strip():
        raise CliError(f"--window must be START:END in seconds, got {text!r}")
    return (_float(start, "--window"), _float(end, "--window") if sep and end.strip() else None)


def parse_rate_scales(text: str) -> tuple[float, ...]:
    values = tuple(_float(v, "--rate-scale") for v in text.split(",") if v.strip())
    if not values or not all(v > 0 for v in values):
        raise CliError(f"--rate-scale: must be > 0 (a number, or a list for a sweep), got {text!r}")
    for v in values:  # each value as loading a trace checks it (bounds, finiteness)
        try:
            TraceOptions(rate_scale=v)
        except SpecError as exc:
            raise CliError(f"--rate-scale: {exc}") from None
    return values


def _max_output_table(text: str) -> dict[str, Any]:
    if text.strip().isdigit():  # N: fixed:N
        return {"kind": "fixed", "tokens": int(text), "truncate": False}
    parts = text.split(":")
    truncate = len(parts) == 3 and parts[2] == "truncate"
    if len(parts) not in (2, 3) or (len(parts) == 3 and not truncate):
        raise CliError(f"--max-output must be fixed:N, factor:F or quantile:Q (optionally "
                       f":truncate), got {text!r}")
    kind, value = parts[0], parts[1]
    if kind == "fixed":
        if not value.isdigit():
            raise CliError(f"--max-output fixed:N needs a whole number of tokens, got {value!r}")
        return {"kind": "fixed", "tokens": int(value), "truncate": truncate}
    if kind == "factor" and not truncate:
        return {"kind": "factor", "factor": _float(value, "--max-output")}
    if kind == "quantile":
        return {"kind": "quantile", "q": _float(value, "--max-output"), "truncate": truncate}
    raise CliError(f"--max-output must be fixed:N, factor:F or quantile:Q, got {text!r}")


def parse_max_output(text: str) -> "MaxOutputRule":
    t = _max_output_table(text)
    if t["kind"] == "fixed":
        return FixedCap(t["tokens"], t["truncate"])
    if t["kind"] == "factor":
        return FactorOfTrue(t["factor"])
    return QuantileCap(t["q"], t["truncate"])


def _arrival_table(text: str) -> dict[str, Any]:
    parts = text.split(":")
    kind = parts[0]
    values = [_float(p, "--arrival") for p in parts[1:]]
    if kind in ("poisson", "constant") and len(values) == 1:
        return {"kind": kind, "rate_rps": values[0]}
    if kind == "gamma" and len(values) == 2:
        return {"kind": "gamma", "rate_rps": values[0], "cv": values[1]}
    raise CliError("--arrival must be poisson:RATE, gamma:RATE:CV or constant:RATE, "
                   f"got {text!r}")


def parse_arrival(text: str) -> "ArrivalProcess":
    t = _arrival_table(text)
    if t["kind"] == "poisson":
        return PoissonArrivals(t["rate_rps"])
    if t["kind"] == "constant":
        return ConstantArrivals(t["rate_rps"])
    return GammaArrivals(t["rate_rps"], t["cv"])


@dataclass(frozen=True)
class TraceArgs:
    """The trace options as given on the command line (``None``: not given)."""

    values: dict[str, Any] = field(default_factory=dict)

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v is not None}

    def rate_scales(self) -> tuple[float, ...] | None:
        text = self.values.get("rate_scale")
        return None if text is None else parse_rate_scales(text)

    def _common(self) -> dict[str, Any]:
        """The options as plain values (``TraceOptions`` field -> value), ``format`` and the
        rate scale aside; each error names its option."""
        v = self.given()
        out: dict[str, Any] = {}
        for key in ("sample_fraction", "sample_count", "tier_column", "default_tier",
                    "spread_s", "arrival_unit", "servegen_arrivals"):
            if key in v:
                out[key] = v[key]
        if "window" in v:
            out["window"] = parse_window(v["window"])
        if "tier_map" in v:
            out["tier_map"] = _split_pairs(v["tier_map"], "--tier-map")
        if "tier_shares" in v:
            shares = _split_pairs([s for s in v["tier_shares"].split(",") if s], "--tier-shares")
            out["tier_shares"] = {k: _float(s, "--tier-shares") for k, s in shares.items()}
        if "column" in v:
            out["columns"] = _split_pairs(v["column"], "--column")
        if "servegen_clients" in v:
            text = v["servegen_clients"]
            try:
                out["clients"] = [int(c) for c in text.split(",") if c.strip()]
            except ValueError:
                raise CliError(f"--servegen-clients must be chunk ids like 34,143, got "
                               f"{text!r}") from None
        return out

    def options(self, seed: int | None = None, *, with_rate_scale: bool = True
                ) -> "TraceOptions":
        """:class:`TraceOptions` for loading a trace directly (``kvbudget trace stats``)."""
        kwargs = self._common()
        v = self.given()
        if "window" in kwargs:
            kwargs["window"] = tuple(kwargs["window"])
        if "clients" in kwargs:
            kwargs["clients"] = tuple(kwargs["clients"])
        for key, parse in (("max_output", parse_max_output), ("arrival", parse_arrival)):
            if key in v:  # a rule's or process's bad value, under the option that gave it
                try:
                    kwargs[key] = parse(v[key])
                except ValueError as exc:  # "q must be in [0, 1], got 2" named no option
                    raise CliError(f"--{key.replace('_', '-')}: {exc}") from None
        scales = self.rate_scales()
        if with_rate_scale and scales is not None:
            if len(scales) != 1:
                raise CliError(f"--rate-scale: give one number here, got {v['rate_scale']!r}")
            kwargs["rate_scale"] = scales[0]
        try:
            return TraceOptions(format=v.get("format"), seed=seed, **kwargs)
        except SpecError as exc:
            field = exc.field.split("[")[0]
            flag = {"clients": "servegen-clients", "columns": "column"}.get(
                field, field.replace("_", "-"))
            raise CliError(f"--{flag}: {exc}") from None

    def table(self, *, with_rate_scale: bool = True) -> dict[str, Any]:
        """The ``[workload.options]`` table of a scenario file (what a sweep's runs carry).
        ``with_rate_scale=False`` leaves ``--rate-scale`` out (a sweep's load axis)."""
        out = self._common()
        v = self.given()
        if "window" in out:
            start, end = out["window"]
            out["window"] = [start] if end is None else [start, end]
        if "max_output" in v:
            out["max_output"] = _max_output_table(v["max_output"])
        if "arrival" in v:
            out["arrival"] = _arrival_table(v["arrival"])
        scales = self.rate_scales()
        if with_rate_scale and scales is not None:
            if len(scales) != 1:
                raise CliError(f"--rate-scale: give one number here, got {v['rate_scale']!r}")
            out["rate_scale"] = scales[0]
        self.options(with_rate_scale=with_rate_scale)  # the same checks as loading a trace directly, naming the option
        return out


@dataclass(frozen=True)
class ScenarioArgs:
    """What a command that builds a scenario takes: ``--scenario``, ``--set``, ``--gpu``,
    ``--model``, ``--cost-model``, ``--trace`` with its trace options, the engine knobs."""

    scenario: Path | None = None
    overrides: tuple[str, ...] = ()
    gpu: str | None = None
    model: str | None = None
    cost_model: Path | None = None
    cost_model_transfer: bool = False
    trace: Path | None = None
    trace_args: TraceArgs = field(default_factory=TraceArgs)
    engine_defaults: str | None = None
    frontend: str | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    clients: str | None = None

    def build(self, *, policy: str | None = None, seed: int | None = None,
              with_rate_scale: bool = True) -> "Scenario":
        """The scenario: :func:`kvbudget.simulator.scenario.make_scenario` of these values."""
        name = self.engine.get("name")
        if name is not None and name not in ENGINE_NAMES:
            raise CliError(f"--engine: unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
        given = self.trace_args.given()
        fmt = given.get("format")
        table = self.trace_args.table(with_rate_scale=with_rate_scale)
        if (self.trace is None and self.scenario is None
                and (set(table) - {"rate_scale"} or fmt is not None)):
            opts = ", ".join("--" + k.replace("_", "-") for k in given
                             if with_rate_scale or k != "rate_scale")
            raise CliError(f"{opts}: trace options need --trace FILE" + (synthetic_rate_hint(
                default_scenario_dict()["workload"], given["rate_scale"])
                if with_rate_scale and "rate_scale" in given else ""))
        if self.trace is None and fmt is not None:
            raise CliError("--format: needs --trace FILE")
        clients = None
        if self.clients is not None:
            try:
                clients = parse_clients(self.clients)
            except ValueError as exc:
                raise CliError(str(exc)) from None
        load = [f"{key}={value}" for key, value in self.load.items()]
        try:
            return make_scenario(
                self.scenario, (*self.overrides, *load), policy=policy, gpu=self.gpu,
                model=self.model, seed=seed, trace=self.trace, trace_format=fmt,
                trace_options=table or None, cost_model=self.cost_model,
                cost_model_transfer=self.cost_model_transfer, engine=self.engine,
                clients=clients, engine_defaults=self.engine_defaults, frontend=self.frontend)
        except ValueError as exc:
            typed = [(key if flag.startswith("--set ") else flag, key)
                     for flag, key, _ in typed_fields(self)]
            raise flag_named(exc, self.scenario, [*typed, *(
                [("--seed", "seed")] if seed is not None else []), *(
                [("--policy", "policy")] if policy is not None else [])]) from None


def typed_fields(setup: ScenarioArgs) -> list[tuple[str, str, str]]:
    """``(flag, scenario key, value)`` of each scenario field the command line set: ``--gpu``,
    ``--model``, the engine and load flags, each ``--set``."""
    typed = [(f"--{key}", key, str(value)) for key, value in (("gpu", setup.gpu),
                                                              ("model", setup.model))
             if value is not None]
    for name, (_, _, key) in ENGINE_OPTIONS.items():
        if key in setup.engine:
            flag = ("-tp/--tensor-parallel-size" if name == "tensor_parallel_size"
                    else "--" + name.replace("_", "-"))
            typed.append((flag, f"engine.{key}", str(setup.engine[key])))
    for name, (_, _, key) in LOAD_OPTIONS.items():
        if key in setup.load:
            typed.append(("--" + name.replace("_", "-"), key, str(setup.load[key])))
    for item in setup.overrides:
        key, _, value = (part.strip() for part in item.partition("="))
        typed.append((f"--set {key}", key, value.strip("\"'")))
    return typed


DEFAULTED = (("gpu", "GPU"), ("model", "model"))
"""The scenario fields a trace or a scenario file may leave to the default scenario's values
(:class:`~kvbudget.simulator.scenario.ScenarioSpec`: H100-80GB, Llama-3.1-8B)."""


def defaults_said(setup: ScenarioArgs, varies: Collection[str] = ()) -> str | None:
    """``assumed: GPU H100-80GB and model Llama-3.1-8B, the default scenario's ...`` where a
    trace (or a scenario file) is simulated and neither a flag, a ``--set`` nor the scenario
    file named them: the answer is then for that deployment, which the ``simulated:`` line
    names as if it were the user's; None where nothing was left to the default, for the
    embedded default scenario (its help and ``make demo`` say it) and for a field the command
    varies (``varies``: ``plan``'s ``--gpus``). Said on stderr once the workload has loaded
    (:func:`say_assumed`, :func:`say_workload`): a bad trace's error stays its one line."""
    if setup.scenario is None and setup.trace is None:
        return None
    typed = {key for _, key, _ in typed_fields(setup)}
    named: set[str] = set()
    if setup.scenario is not None:
        try:
            table = tomllib.loads(Path(setup.scenario).read_text())
        except (OSError, ValueError):  # the scenario's own load says why
            return None
        named = set(table)
        if "gpus" in (table.get("fleet") or {}) or "disaggregation" in table:
            named.add("gpu")  # a mixed fleet's or the pools' GPUs (or theirs, said)
    if any(key.startswith(("fleet.gpus", "disaggregation")) for key in typed):
        named.add("gpu")
    fields_ = {f.name: f.default for f in dataclasses.fields(ScenarioSpec)}
    left = [(key, word) for key, word in DEFAULTED
            if key not in typed and key not in named and key not in varies]
    if not left:
        return None
    what = " and ".join(f"{word} {fields_[key]}" for key, word in left)
    flags = " or ".join(f"--{key}" for key, _ in left)
    source = (f"{setup.scenario} {'does not name it' if len(left) == 1 else 'names neither'}"
              if setup.scenario is not None else "no scenario file, and a trace names neither")
    return (f"assumed: {what}, the default scenario's: no {flags} given ({source}): the "
            "answer is for that deployment; pass yours")


def say_assumed(line: str | None, *, err: bool = True) -> None:
    """``line`` (:func:`defaults_said`) where there is one: on stderr, or (``err=False``) on
    stdout above a table's own ``simulated:`` and ``assumed:`` lines."""
    if line is not None:
        typer.echo(fill(line), err=err)


def refuse_searched(setup: ScenarioArgs, command: str, searched: Mapping[str, str]) -> None:
    """A value typed for a scenario field that ``command`` sets itself in every run
    (``searched``: its key -> the option that gives its values) would go unused, the runs
    taking the option's values in its place, silently (``plan --gpu L40S`` ran the default
    ``--gpus`` and no L40S): refused, naming that option."""
    for flag, key, value in typed_fields(setup):
        if key in searched:
            raise CliError(f"{flag}: {command} sets {key} from {searched[key]} in every run, "
                           f"so {value} given here would go unused: give it in "
                           f"{searched[key]}")


def set_keys(overrides: Iterable[str]) -> list[tuple[str, str]]:
    """``(key, key)`` of each ``--set KEY=VALUE``, for :func:`flag_named`: an error about a
    field a ``--set`` gave names the field as typed (``engine.kv_cache_dtype ...``), not the
    ``--scenario`` file, which did not hold the value."""
    return [(key, key) for key in (item.partition("=")[0].strip() for item in overrides)]


def flag_named(exc: ValueError, scenario: Path | None,
               typed: Sequence[tuple[str, str]]) -> Exception:
    """``exc`` (a scenario's error) led by the flag the user typed where it is about a field
    one of ``typed`` (``(flag, scenario key)``: the flags given on the command line) set:
    ``--gpu: unknown GPU preset 'H10' ...`` where it said ``gpu: ...`` (the scenario field's
    name), ``--max-num-seqs: ...`` for ``engine.max_num_seqs: ...``, or, with
    ``--scenario``, ``FILE: gpu: ...`` of a value the file did not hold. Any other error is
    ``exc`` as it is."""
    text = str(exc)
    where = f"{scenario}: " if scenario is not None else ""
    rest = text[len(where):] if text.startswith(where) else text
    for flag, key in typed:
        if rest.startswith(f"{key}: "):
            return CliError(f"{flag}: {rest[len(key) + 2:]}")
        if rest.startswith(f"{key} "):  # "engine.tensor_parallel_size 3 does not divide ..."
            return CliError(f"{flag} {rest[len(key) + 1:]}")
    return exc


def say_workload(scn: "Scenario", varies: Collection[str] = (),
                 defaults: str | None = None, once: str | None = None,
                 seeds: Sequence[int] = ()) -> tuple[str, ...]:
    """On stderr, before a study's many runs, the model, the GPU and the workload they take
    and what loading the workload warned of or assumed (a trace's missing tiers and
    ``max_tokens``, drawn arrivals): their tables have no room for it, and ``simulate``'s and
    ``compare``'s print it with theirs (:func:`kvbudget.studies.setting.study_setting`).
    Returns the lines, for the study's result (``setting=``): the workload is loaded once.
    ``defaults``: the GPU or model left to the default scenario's (:func:`defaults_said`),
    said after them. ``once``: why the study runs once (a spec's ``once``), said in place
    of the line on its replications (``SAME_REQUESTS``). ``seeds``: the replications', whose
    draws the load said is the mean of (as the tables' offered rates are)."""
    lines = study_setting(scn, varies, once, seeds)
    for line in lines:  # wrapped as simulate's lines are (a study's first line ran to 130)
        typer.echo(fill(line), err=True)
    say_assumed(defaults)
    return lines


def say_loaded(workload: "Workload", *, closed_loop: bool = False) -> None:
    """On stderr, what loading ``workload``'s trace warned of or assumed (its ``meta``), less
    the drawn arrivals a closed loop of users does not use."""
    said = load_said(workload.meta, closed_loop=closed_loop)
    for key, label in (("warnings", "warning"), ("assumed", "assumed")):
        for text in said.get(key, ()):
            typer.echo(fill(f"{label}: {workload.name}: {text}"), err=True)


# --- decorators --------------------------------------------------------------------------------


def _extend(func: Callable[..., Any], slot: str, extra: dict[str, tuple[Any, Any]],
            make: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    """``func`` with parameter ``slot`` replaced by the keyword options ``extra``; the wrapper
    builds ``slot``'s value from them with ``make``."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != slot]
    if len(own) == len(sig.parameters):
        raise TypeError(f"{func.__name__} has no parameter {slot!r}")
    clash = {p.name for p in own} & set(extra)
    if clash:
        raise TypeError(f"{func.__name__}: parameters {sorted(clash)} are in the shared set")
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                               annotation=annotation)
             for name, (annotation, default) in extra.items()]

    def wrapper(**kwargs: Any) -> Any:
        shared = {name: kwargs.pop(name, default) for name, (_, default) in extra.items()}
        kwargs[slot] = make(shared)
        return func(**kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__qualname__ = func.__qualname__
    wrapper.__doc__ = func.__doc__
    wrapper.__module__ = func.__module__
    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[*[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own], *added])
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in own if p.annotation is not inspect.Parameter.empty},
        **{name: annotation for name, (annotation, _) in extra.items()},
    }
    return wrapper


def with_trace_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the trace options; it receives them as ``trace_args: TraceArgs``."""
    return _extend(func, "trace_args", TRACE_OPTIONS, lambda values: TraceArgs(values))


def _scenario_args(values: dict[str, Any]) -> ScenarioArgs:
    trace_values = {k: values.pop(k) for k in TRACE_OPTIONS}
    engine = {key: values.pop(name) for name, (_, _, key) in ENGINE_OPTIONS.items()}
    load = {key: values.pop(name) for name, (_, _, key) in LOAD_OPTIONS.items()}
    return ScenarioArgs(
        load={k: v for k, v in load.items() if v is not None},
        scenario=values["scenario"], overrides=tuple(values["overrides"] or ()),
        gpu=values["gpu"], model=values["model"], cost_model=values["cost_model"],
        cost_model_transfer=values["cost_model_transfer"],
        trace=values["trace"], trace_args=TraceArgs(trace_values),
        engine={k: v for k, v in engine.items() if v is not None}, clients=values["clients"],
        engine_defaults=values["engine_defaults"], frontend=values["frontend"])


def with_scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the scenario options (with the trace and engine options); it receives
    them as ``setup: ScenarioArgs``."""
    extra: dict[str, tuple[Any, Any]] = {
        **SCENARIO_OPTIONS, **TRACE_OPTIONS,
        **{name: (annotation, default) for name, (annotation, default, _) in
           ENGINE_OPTIONS.items()},
        **{name: (annotation, default) for name, (annotation, default, _) in
           LOAD_OPTIONS.items()},
    }
    return _extend(func, "setup", extra, _scenario_args)


# --- where many runs execute (sweep, tune, capacity, plan, compare --replications) ------------

ExecutorOpt = Annotated[
    str, typer.Option("--executor", help="Where runs execute: local (all cores) or ray.")
]
AddressOpt = Annotated[
    str | None,
    typer.Option("--address", help="Join an existing Ray cluster (e.g. auto, ray://head:10001)."),
]
MAX_JOBS = 4096
"""More parallel processes than any machine has cores is a typo (``-j 1000000``)."""
MAX_REPLICATIONS = 10_000
"""Seeds per configuration: beyond this a study would run for days (a typo, not a plan)."""

JobsOpt = Annotated[
    int | None,
    typer.Option("--jobs", "-j", min=1, max=MAX_JOBS,
                 help="Parallel runs (default: every core)."),
]


# --- a policy named on the command line (replay, calibrate, validate) -------------------------


def policy_from_flags(name: str, params: list[str] | None) -> "BasePolicy":
    """The policy ``name`` with the ``--param key=value`` settings (a value is read as JSON
    when it parses, else kept as text); an unknown name refused naming ``--policy``."""
    if name not in POLICIES:
        raise CliError(f"--policy: {unknown_policy(name)}")
    values: dict[str, Any] = {}
    for item in params or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--param: expected key=value, got {item!r}")
        try:
            values[key.strip()] = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            values[key.strip()] = raw
    return make_policy(name, values)


def policy_names(text: str | None) -> list[str]:
    """``--policies A,B``: the names, each a known policy (``None``: none given)."""
    if text is None:
        return []
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise CliError("--policies: give at least one policy name")
    for name in names:
        if name not in POLICIES:
            raise CliError(f"--policies: {unknown_policy(name)}")
    return names
