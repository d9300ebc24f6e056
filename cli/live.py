"""``kvbudget replay``, ``calibrate`` and ``validate``: the gateway against a live server."""

import asyncio
import json
import math
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import replace as _replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.analysis.validation import (
    KEY_METRICS,
    REL_ERROR_SAID,
    THROUGHPUT_SAID,
    table_cell,
)
from kvbudget.cli import recorded
from kvbudget.cli.errors import CliError, check_out_dir, check_out_file, fail, user_errors
from kvbudget.cli.fit_tables import class_error_table, coefficient_table
from kvbudget.cli.help_text import POLICY_NAMES
from kvbudget.cli.options import (
    ClientsOpt,
    ThinkTimeOpt,
    TraceArgs,
    UsersOpt,
    policy_from_flags,
    say_loaded,
    with_trace_options,
)
from kvbudget.cli.progress import Bar
from kvbudget.cli.tables import render, render_summaries
from kvbudget.live.calibrate import CalibrationFailed, CalibrationPlan, calibrate
from kvbudget.live.calibrate_partial import CalibrationProgress, partial_path
from kvbudget.live.openai_client import ServerTarget, redact_url
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay_async, scale_time
from kvbudget.live.server import BackendUnavailable
from kvbudget.live.validate import (
    NothingCompleted,
    discover_kv_server,
    load_live_cost_model,
    run_live_validation,
    simulated_engine_line,
)
from kvbudget.perf.fitted_on_write import fitted_on_extra, fitted_on_gpu_extra, target_or_why
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import KV_CACHE_DTYPES
from kvbudget.perf.vllm_defaults import BLOCK_SIZE, VLLM_VERSION, batch_defaults
from kvbudget.policies import DEFAULT_TIERS
from kvbudget.policies.clients import client_models, parse_clients
from kvbudget.results.recording import RECORDING_FORMATS
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_result import run_files
from kvbudget.results.said import fill, setting_lines
from kvbudget.simulator.scenario import load_scenario
from kvbudget.studies.recorded_replay import live_stage, pick_stage
from kvbudget.studies.validate import compare_live_validation
from kvbudget.workloads.closed_loop import ClosedLoop, TimeLimit
from kvbudget.workloads.counted import counted
from kvbudget.workloads.lengths import FixedCap
from kvbudget.workloads.traces import TraceOptions, load_trace
from kvbudget.workloads.traces.load import trace_seed

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.live.calibrate import Calibration
    from kvbudget.live.replay import ReplayOutcome
    from kvbudget.live.validate import LiveValidationRun
    from kvbudget.policies import BasePolicy, FrontDoor, TierConfig
    from kvbudget.policies.clients import ClientModel
    from kvbudget.studies.validate import LiveComparison
    from kvbudget.workloads import Workload

UrlOpt = Annotated[str, typer.Option(
    "--url", help="The server root, e.g. http://127.0.0.1:8000 (OpenAI-compatible).")]
ModelOpt = Annotated[str, typer.Option(
    "--model", help="Served model name (default: the server's first model).")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    "--api-key", envvar="KVBUDGET_API_KEY", help="Bearer token, if the server wants one.")]
TraceOpt = Annotated[Path, typer.Option("--trace", help="The trace file to replay.")]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="Trace format (auto-detected by default).")]
TierOpt = Annotated[str, typer.Option(
    "--tier", help="Tier of requests whose trace has no tier column.")]
AllowRefusalsOpt = Annotated[bool, typer.Option(
    "--allow-refusals", help="With --records: go on (with a warning) when the simulated replay "
    "refuses, expires or drops more than 2 % of the requests the recording shows completed.")]
SmallFitOpt = Annotated[bool, typer.Option(
    "--allow-small-fit", help="With --records: fit a recording with fewer than 10 measured "
    "requests per fitted parameter (refused otherwise: such a fit does not transfer).")]
MaxOutputOpt = Annotated[int | None, typer.Option(
    "--max-output", help="Declared max_tokens of requests whose trace has none (default "
    "2048; never below the true output); with --records, of requests whose file records none "
    "(default: each request's realised output).")]
_RECORDED_POLICY = ("the recorded run's (a kvbudget replay's), else unlimited (a load tool's "
                    "requests went straight to the server)")
PolicyOpt = Annotated[str | None, typer.Option(
    "--policy", help=f"Admission policy: {POLICY_NAMES}; default: the --scenario's, else "
    f"conservative; with --records, {_RECORDED_POLICY}.")]
ReplayPolicyOpt = Annotated[str | None, typer.Option(
    "--policy", help=f"Admission policy: {POLICY_NAMES}; default: the --scenario's, else "
    "conservative.")]
CalPolicyOpt = Annotated[str | None, typer.Option(
    "--policy", help=f"With --records: the admission policy simulated in front of the recorded "
    f"server: {POLICY_NAMES}; default: {_RECORDED_POLICY}.")]
ScenarioOpt = Annotated[Path | None, typer.Option(
    "--scenario", help="A scenario file (docs/scenarios.md) whose tiers, front door, policy and "
    "lease_ttl_s the gateway uses; its workload and engine are ignored (with --records: its "
    "GPU, model and engine are simulated where no flag or the recording says, its policy is "
    "not).")]
ReplayScenarioOpt = Annotated[Path | None, typer.Option(
    "--scenario", help="A scenario file (docs/scenarios.md) whose tiers, front door, policy, "
    "clients and lease_ttl_s the gateway uses; its workload and engine are ignored.")]
CalScenarioOpt = Annotated[Path | None, typer.Option(
    "--scenario", help="With --records: a scenario file (docs/scenarios.md) whose GPU, model "
    "and engine are simulated where no flag or the recording says (its policy is not).")]
ParamOpt = Annotated[list[str] | None, typer.Option(
    "--param", help="A policy parameter, key=value (value as JSON), repeatable.")]
TimeScaleOpt = Annotated[float, typer.Option(
    "--time-scale", help="Multiply trace timestamps (0.5 replays twice as fast).")]
CapacityOpt = Annotated[int | None, typer.Option(
    "--capacity-tokens", help="Gateway budget in tokens (default: the server's KV capacity).")]
InFlightOpt = Annotated[int, typer.Option(
    "--max-in-flight", help="Safety cap on requests streaming at once.")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="Seed of the prompts' token ids, "
                   "and of the draws a ServeGen or sampled trace makes (as simulate --seed).")]
TimeoutOpt = Annotated[float, typer.Option(
    "--read-timeout", help="Seconds of silence after which a stream counts as timed out.")]
LeaseOpt = Annotated[float | None, typer.Option(
    "--lease-ttl", help="Seconds after which a lease expires and its request is dropped "
    "(default: the --scenario's lease_ttl_s, else never).")]
PollOpt = Annotated[float, typer.Option(
    "--poll-period", help="Seconds between two scrapes of the server's /metrics.")]
_PLAN = CalibrationPlan()
_BATCH = {g: batch_defaults(get_gpu(g)) for g in ("B200", "H100-80GB", "A100-80GB")}


def _by_gpu(which: int) -> str:
    """``vLLM 0.32.0's for the GPU: 1,024 on one of 160 GiB or more ...``: what vLLM picks for
    ``max_num_batched_tokens`` (``which`` 0) or ``max_num_seqs`` (1) where nothing says the
    server's (:func:`~kvbudget.perf.vllm_defaults.batch_defaults`)."""
    big, hopper, other = (_BATCH[g][which] for g in ("B200", "H100-80GB", "A100-80GB"))
    top = (f"{hopper:,} on an H100, H200 or larger" if big == hopper else
           f"{big:,} on 160 GiB or more, {hopper:,} on an H100 or H200")
    return (f"vLLM {VLLM_VERSION}'s for the GPU ({top}, {other:,} on an A100, L40S, L4), said "
            "as assumed")


def _limit_help(flag: str, which: int, plan_value: int, *, validate: bool) -> str:
    """The help of ``--max-num-seqs`` or ``--max-num-batched-tokens``: where the value comes
    from when not given, with --url (calibrate's grid default, or the cost file's) and with
    --records (the recording's, else vLLM's for the GPU)."""
    url = (f"the cost file's (calibrate --url records the one it ran with), else {plan_value:,}"
           if validate else f"{plan_value:,} (kvbudget's; a server does not tell it): the grid "
           "keeps to it and the cost file records it")
    return (f"The server's {flag} ({'simulation' if validate else 'calibration grid, simulation'})"
            f". Default: with --url, {url}; with --records, the recording's where it says one, "
            f"else {_by_gpu(which)}.")


SeqsOpt = Annotated[int | None, typer.Option(
    "--max-num-seqs", min=1, help=_limit_help("--max-num-seqs", 1, _PLAN.max_num_seqs,
                                              validate=False))]
BatchedOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", min=1, help=_limit_help(
        "--max-num-batched-tokens", 0, _PLAN.max_num_batched_tokens, validate=False))]
ValSeqsOpt = Annotated[int | None, typer.Option(
    "--max-num-seqs", min=1, help=_limit_help("--max-num-seqs", 1, _PLAN.max_num_seqs,
                                              validate=True))]
ValBatchedOpt = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", min=1, help=_limit_help(
        "--max-num-batched-tokens", 0, _PLAN.max_num_batched_tokens, validate=True))]
OptUrlOpt = Annotated[str | None, typer.Option(
    "--url", help="The server root, e.g. http://127.0.0.1:8000 (OpenAI-compatible); or "
    "--records for a recorded run instead.")]
RecordsOpt = Annotated[Path | None, typer.Option(
    "--records", help="A recorded run instead of a live server: a records file (the generic "
    "trace format plus ttft_s, e2e_s), a kvbudget replay run directory, a vllm bench serve "
    "--save-detailed JSON, a GuideLLM JSON/YAML report, an AIPerf profile_export.jsonl, an "
    "inference-perf per_request_lifecycle_metrics.json, an llm-load-test output.json, a "
    "multi-round QA summary.csv (LMCache, production-stack, LMBench), an evalscope perf "
    "benchmark_data.db or its run (or sweep) directory, a genai-bench experiment folder, vLLM's llm_request spans as OTLP "
    "JSON (--otlp-traces-endpoint), or NVIDIA Dynamo's per-request trace (DYN_REQUEST_TRACE, "
    "jsonl sink; docs/recordings.md).")]
RecordsFormatOpt = Annotated[str | None, typer.Option(
    "--records-format", help=f"{', '.join(RECORDING_FORMATS[:-1])} or {RECORDING_FORMATS[-1]} "
    "(detected by default; docs/recordings.md).")]
ColumnOpt = Annotated[list[str] | None, typer.Option(
    "--column", help="NAME=COLUMN: the records file's column for a canonical name "
    "(arrival_s, prompt_tokens, ..., ttft_s, e2e_s, status, stage), repeatable.")]
GpuOpt = Annotated[str | None, typer.Option(
    "--gpu", help="With --records: the recorded server's GPU (kvbudget presets).")]
CalGpuOpt = Annotated[str | None, typer.Option(
    "--gpu", help="With --records: the recorded server's GPU (kvbudget presets); with --url, "
    "the server's, recorded in the cost file so that it is checked where it is used.")]
BlocksOpt = Annotated[int | None, typer.Option(
    "--num-gpu-blocks", help="With --records: the KV blocks the recorded server's engine could "
    "allocate: vLLM's num_gpu_blocks_override, or its log's 'KV cache size' over the block "
    "size, less the one block it keeps as its null block (default: what the recording says, "
    "else computed for --gpu and --model).")]
BlockSizeOpt = Annotated[int | None, typer.Option(
    "--block-size", help="With --records: tokens per KV block (default: the recording's "
    f"where it says one, else {BLOCK_SIZE}, vLLM's).")]
SetOpt = Annotated[list[str] | None, typer.Option(
    "--set", help="With --records: a scenario field, key=value (e.g. "
    "engine.enable_prefix_caching=true), repeatable.")]
FitOpt = Annotated[str, typer.Option(
    "--fit", help="With --records: fit the default step-time model's own parameters "
    "(default) or the linear model's (linear).")]
HoldoutOpt = Annotated[float | None, typer.Option(
    "--holdout", help="With --records: fit on the first part of the run and validate on "
    "this last fraction of it (e.g. 0.5).")]
EvalsOpt = Annotated[int, typer.Option(
    "--max-evals", min=1, max=100_000, help="With --records: the most simulations the fit's "
    "start and search may run; the fit runs more besides: two per parameter that moves the "
    "step time (which the recording identifies), two per fitted one (its 95 % intervals) and "
    "up to four to settle the front-end time (--fit-overhead).")]
OverheadFitOpt = Annotated[bool, typer.Option(
    "--fit-overhead/--no-fit-overhead", help="With --records: also fit the API server's "
    "fixed time per request (frontend_overhead_s, the first token's fixed part; the part "
    "that grows with the step is the simulated engine's); off for engine-side logs.")]
RecTierOpt = Annotated[str, typer.Option(
    "--tier", help="Tier of requests whose recording has none.")]
TpOpt = Annotated[int | None, typer.Option(
    "--tensor-parallel-size", "-tp", help="With --records: GPUs the recorded server sharded "
    "the model over (default: the recording's where it says one, else 1, said as assumed).")]
KvDtypeOpt = Annotated[str | None, typer.Option(
    "--kv-cache-dtype", help="With --records: auto, fp8 (= fp8_e4m3) or fp8_e5m2.")]
CalTpOpt = Annotated[int | None, typer.Option(
    "--tensor-parallel-size", "-tp", help="GPUs the server sharded the model over: with "
    "--records, the recorded server's, simulated (default: the recording's where it says one, "
    "else 1, said as assumed); with --url, recorded in the cost file with --gpu (default 1) so "
    "that it is checked where it is used.")]
CalKvDtypeOpt = Annotated[str | None, typer.Option(
    "--kv-cache-dtype", help="auto, fp8 (= fp8_e4m3) or fp8_e5m2: with --records, the "
    "recorded server's, simulated; with --url, the server's, recorded in the cost file with "
    "--gpu (default auto).")]
ServedModelOpt = Annotated[str, typer.Option(
    "--model", help="Served model name (default: the server's first model); with "
    "--records, the model preset or config.json of the recorded server.")]
ValidateTraceOpt = Annotated[Path | None, typer.Option(
    "--trace", help="The trace file to replay (with --url).")]
ValidateCostModelOpt = Annotated[Path | None, typer.Option(
    "--cost-model", help="The cost-model file written by kvbudget calibrate (with "
    "--records: default, the default step-time model; with --holdout, where the fit "
    "starts).")]
ValidateOutOpt = Annotated[Path, typer.Option("--out", help="Directory for the live run, the "
                                              "simulated run, the table and the plot.")]
MaxErrorOpt = Annotated[float | None, typer.Option(
    "--max-error", min=0, help="Exit 1 when p50 TTFT, p50 TPOT or throughput is off by more "
    "than this fraction.")]
SpeedCheckOpt = Annotated[bool, typer.Option(
    "--speed-check/--no-speed-check", help="Time a few decode steps before and after the "
    "replay and report how far the server's speed moved since the calibration.")]
AsyncSchedulingOpt = Annotated[bool, typer.Option(
    "--async-scheduling/--no-async-scheduling", help="Whether the server schedules a step while "
    "the last one runs (vLLM's default on GPUs; a CPU vLLM runs without it, "
    "vllm/platforms/cpu.py): the simulation follows, and the output says which it took.")]
CorrectDriftOpt = Annotated[bool, typer.Option(
    "--correct-drift", help="Also simulate with every step time scaled by the speed the "
    "checks measured (mean of before and after) and compare that too; --max-error then "
    "applies to it.")]
CalOutOpt = Annotated[Path, typer.Option("--out", help="Cost-model JSON file to write.")]
CalCostModelOpt = Annotated[Path | None, typer.Option(
    "--cost-model", help="With --records: the model to start the fit from (default: "
    "the default step-time model).")]
PrefillTokensOpt = Annotated[str, typer.Option(
    "--prefill-tokens", help="Prompt sizes to time (comma-separated).")]
DecodeBatchesOpt = Annotated[str, typer.Option(
    "--decode-batches", help="Concurrent decode streams to time.")]
ContextTokensOpt = Annotated[str, typer.Option(
    "--context-tokens", help="Context lengths of the decode streams.")]
RepeatsOpt = Annotated[int, typer.Option("--repeats", help="Repeats per grid point.")]
CalResumeOpt = Annotated[bool, typer.Option(
    "--resume", help="Go on from the measurements an interrupted calibrate --url kept beside "
    "--out (OUT.partial.json): measure only the rest, then fit and write --out.")]
RetriesOpt = Annotated[int, typer.Option(
    "--retries", help="More tries, within a repeat, for a grid point the streams could not "
    "time (its chunks late on a loaded machine).")]
IdleGapOpt = Annotated[float, typer.Option(
    "--idle-gap", help="Seconds of quiet before each idle time-to-first-token probe (the "
    "front-end overhead then includes the engine's wake-up).")]
EngineNameOpt = Annotated[str | None, typer.Option(
    "--engine", help="With --records: engine behaviour (vllm, vllm-swap, tgi, sglang, "
    "trtllm); default: the recording's server's where it tells one (SGLang), else vllm.")]


def _target(url: str, model: str, api_key: str | None, read_timeout: float) -> "ServerTarget":
    return ServerTarget(base_url=url, model=model, api_key=api_key, read_timeout_s=read_timeout)


def _tiers_for(workload: "Workload", tiers: "tuple[TierConfig, ...] | None" = None
               ) -> "tuple[TierConfig, ...]":
    tiers = DEFAULT_TIERS if tiers is None else tiers
    known = {t.name for t in tiers}
    missing = sorted(set(workload.tier_names) - known)
    if missing:
        raise CliError(f"tier {missing[0]!r} of the trace is not configured; "
                       f"known tiers: {', '.join(sorted(known))}")
    return tiers


@dataclass(frozen=True, slots=True)
class GatewaySetup:
    """What the live gateway takes from a scenario file (or the defaults without one).
    ``new_policy`` makes a fresh policy object (each run needs its own: policies keep state)."""

    new_policy: "Callable[[], BasePolicy]"
    tiers: "tuple[TierConfig, ...] | None"
    front_door: "FrontDoor | None"
    clients: "tuple[tuple[str, ClientModel], ...]" = ()
    lease_ttl_s: float | None = None
    """The scenario's ``lease_ttl_s`` (``--lease-ttl`` over it; None: a lease lasts until its
    request ends)."""

    def lease_ttl(self, given: float | None) -> float | None:
        """``--lease-ttl`` where given, else the scenario's."""
        return self.lease_ttl_s if given is None else given


def gateway_setup(scenario: Path | None, policy: str | None, params: list[str] | None
                  ) -> GatewaySetup:
    """The policy (``--policy``/``--param`` over the scenario's), the tiers and the front door;
    without a scenario: default tiers, no front door, ``conservative`` by default."""
    if scenario is None:
        name = policy or "conservative"
        policy_from_flags(name, params)  # a bad name or parameter fails here, before anything runs
        return GatewaySetup(lambda: policy_from_flags(name, params), None, None)
    try:
        scn = load_scenario(scenario)
    except (FileNotFoundError, ValueError) as exc:  # each names the file and the field
        raise CliError(str(exc)) from None
    if policy is None and params:
        raise CliError("--param needs --policy when the policy comes from --scenario")

    def new_policy() -> "BasePolicy":
        return scn.make_policy() if policy is None else policy_from_flags(policy, params)

    new_policy()  # a bad name or parameter fails here, before anything runs
    config = scn.sim_config()
    return GatewaySetup(new_policy, scn.tiers(), config.front_door, config.clients,
                        config.lease_ttl_s)


def with_clients(setup: GatewaySetup, clients: str | None) -> GatewaySetup:
    """The setup with ``--clients tier=preset,...`` over the scenario's ``[clients]``."""
    if clients is None:
        return setup
    tiers = setup.tiers if setup.tiers is not None else DEFAULT_TIERS
    try:
        chosen = dict(client_models(parse_clients(clients), {t.name: t for t in tiers}))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    merged = {**dict(setup.clients), **chosen}
    return replace(setup, clients=tuple(sorted(merged.items())))


def load_workload(trace: Path, trace_format: str | None, tier: str, time_scale: float,
                  max_output: int | None = None, seed: int = 0) -> "Workload":
    """The trace as a workload (the loaders of ``kvbudget simulate --trace``, drawn as
    ``simulate --seed`` draws it), time-scaled."""
    if not trace.exists():
        raise CliError(f"{trace}: no such trace file")
    options = TraceOptions(format=trace_format, default_tier=tier)
    if max_output is not None:
        options = TraceOptions(format=trace_format, default_tier=tier,
                               max_output=FixedCap(max_output))
    loaded = load_trace(trace, options, seed=partial(trace_seed, seed))
    return scale_time(loaded.workload, time_scale)


def load_trace_workload(trace: Path, trace_args: TraceArgs, tier: str, time_scale: float,
                        seed: int) -> "Workload":
    """The trace read with the shared trace options (``--default-tier`` over ``--tier``), drawn
    as ``simulate --seed`` draws it (a ServeGen or sampled trace: the same requests),
    time-scaled."""
    if not trace.exists():
        raise CliError(f"{trace}: no such trace file")
    options = trace_args.options()
    if trace_args.values.get("default_tier") is None:
        options = _replace(options, default_tier=tier)
    return scale_time(load_trace(trace, options, seed=partial(trace_seed, seed)).workload,
                      time_scale)


def _key_given(api_key: str | None) -> bool:
    """Whether the command line gave ``--api-key`` (not ``KVBUDGET_API_KEY``, which a shell
    may export for every command)."""
    return api_key is not None and api_key != os.environ.get("KVBUDGET_API_KEY")


def _resume_hint() -> str:
    """What to run to resume: this very command line with ``--resume``."""
    argv = sys.argv[1:]
    if argv[:1] != ["replay"]:  # called in-process (tests, notebooks): no command line to show
        return "; resume with the same command and --resume"
    # the command line as typed, less its secrets: an API key's value and a URL's password
    # are never printed (the key then comes from KVBUDGET_API_KEY or --api-key again)
    args: list[str] = []
    secret_next = False
    for a in argv:
        if a == "--resume":
            continue
        if secret_next:
            a, secret_next = "***", False
        elif a == "--api-key":
            secret_next = True
        elif a.startswith("--api-key="):
            a = "--api-key=***"
        elif "://" in a and "@" in a:
            a = redact_url(a)
        args.append(a)
    return "; resume with: kvbudget " + " ".join(shlex.quote(a) for a in args) + " --resume"


def run_replay(workload: "Workload", policy: "BasePolicy", *, target: "ServerTarget", out: Path,
               trace: Path, time_scale: float, capacity_tokens: int | None, max_in_flight: int,
               seed: int, resume: bool, tiers: "tuple[TierConfig, ...]",
               poll_period: float, lease_ttl: float | None = None,
               hint: str = "", front_door: "FrontDoor | None" = None,
               clients: "tuple[tuple[str, ClientModel], ...]" = (),
               closed_loop: "ClosedLoop | None" = None,
               time_limit: "TimeLimit | None" = None) -> "ReplayOutcome":
    """Replay with a progress bar; a server that dies or Ctrl-C exit with code 1 / 130 after
    the output is written, saying how to resume."""
    config = ReplayConfig(target=target, tiers=tiers, capacity_tokens=capacity_tokens,
                          max_in_flight=max_in_flight, seed=seed, poll_period_s=poll_period,
                          lease_ttl_s=lease_ttl, front_door=front_door, clients=clients,
                          closed_loop=closed_loop, time_limit=time_limit)
    meta = ReplayMeta(trace=str(trace.resolve()), policy=policy.name,
                      policy_params={k: v for k, v in policy.describe().items() if k != "name"},
                      time_scale=time_scale, seed=seed, url=target.base_url)
    bar: Any = None

    def on_start(num_done: int, num_todo: int) -> None:
        nonlocal bar
        if num_done:
            typer.echo(f"resuming: {counted(num_done, 'request')} already done, {num_todo} to replay",
                       err=True)
        bar = Bar(f"replay {policy.name}", num_todo, "req")

    def on_record(row: Any) -> None:
        if bar is not None:
            bar.update(1)

    try:
        outcome = asyncio.run(replay_async(workload, policy, config, out, meta=meta,
                                           resume=resume, on_record=on_record,
                                           on_start=on_start))
    except BackendUnavailable as exc:
        raise CliError(str(exc), 1) from None
    except KeyboardInterrupt:
        raise CliError(f"interrupted; the requests that finished are in {out}{hint}",
                       130) from None
    finally:
        if bar is not None:
            bar.close()
    if outcome.error:
        done = len(outcome.records)
        raise CliError(
            f"{outcome.error}; kept {done} of {counted(len(workload), 'request')} in {out} "
            f"(requests.parquet){hint}", 1)
    return outcome


def _closed_loop(users: int | None, think_time_s: float | None) -> "ClosedLoop | None":
    if users is None:
        if think_time_s is not None:
            raise CliError("--think-time-s needs --users (a closed loop)")
        return None
    return ClosedLoop(users, think_time_s or 0.0)


def _print_summary(summary: dict[str, Any]) -> None:
    typer.echo(render_summaries([summary]))


ReplayRecordsOpt = Annotated[Path | None, typer.Option(
    "--records", help="Replay a load tool's recording instead of a trace (the files --records "
    "of validate reads): its requests as its tool sent them, at their recorded sends or in the "
    "stage's closed loop, conversations' later turns after the turn before.")]
StageOpt = Annotated[str | None, typer.Option(
    "--stage", help="With --records: the stage to replay, by its label, its index (0 first) or "
    "its name (the label's part after the colon, its first word, or GuideLLM's "
    "constant@RATE / concurrent@N) where it names one stage; a recording of several stages "
    "needs one.")]


@with_trace_options
def replay_cmd(
    trace_args: TraceArgs,
    url: UrlOpt,
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")],
    trace: Annotated[Path | None, typer.Option("--trace", help="The trace file to replay.")
                     ] = None,
    records: ReplayRecordsOpt = None,
    records_format: RecordsFormatOpt = None,
    stage: StageOpt = None,
    policy: ReplayPolicyOpt = None,
    params: ParamOpt = None,
    scenario: ReplayScenarioOpt = None,
    tier: TierOpt = "interactive",
    time_scale: TimeScaleOpt = 1.0,
    capacity_tokens: CapacityOpt = None,
    max_in_flight: InFlightOpt = 256,
    poll_period: PollOpt = 1.0,
    lease_ttl: LeaseOpt = None,
    model: ModelOpt = "",
    api_key: ApiKeyOpt = None,
    seed: SeedOpt = 0,
    read_timeout: TimeoutOpt = 600.0,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue an interrupted replay in --out (skips finished requests).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    clients: ClientsOpt = None,
    users: UsersOpt = None,
    think_time_s: ThinkTimeOpt = None,
) -> None:
    """Replay a trace (or a load tool's recording, --records) through an admission policy
    against a live OpenAI-compatible server."""
    with user_errors():
        check_out_dir(out)
        target = _target(url, model, api_key, read_timeout)
        setup = with_clients(gateway_setup(scenario, policy, params), clients)
        if (trace is None) == (records is None):
            raise CliError("pass --trace FILE or --records FILE (one of them)")
        if trace is not None and (stage is not None or records_format is not None):
            raise CliError("--stage and --records-format go with --records, not --trace")
        loop = _closed_loop(users, think_time_s)
        limit = None
        if trace is not None:
            workload = load_trace_workload(trace, trace_args, tier, time_scale, seed)
            source = trace
        else:
            assert records is not None
            _records_alone(trace_args, time_scale, loop)
            workload, loop, limit = _recorded_stage(records, records_format, stage, tier)
            source = records
        outcome = run_replay(workload, setup.new_policy(), target=target, out=out, trace=source,
                             time_scale=time_scale, capacity_tokens=capacity_tokens,
                             max_in_flight=max_in_flight, seed=seed, resume=resume,
                             tiers=_tiers_for(workload, setup.tiers), poll_period=poll_period,
                             lease_ttl=setup.lease_ttl(lease_ttl), hint=_resume_hint(),
                             front_door=setup.front_door, clients=setup.clients,
                             closed_loop=loop, time_limit=limit)
    # what loading the trace warned of or assumed (the max_tokens it sent among it), with the
    # result: a bad option, a server down or a failed run stays the one error line
    if trace is not None:
        say_loaded(workload)
    if as_json:
        typer.echo(json.dumps(outcome.summary, indent=2))
    else:
        _print_summary(outcome.summary)
        typer.echo(f"wrote {out}/" + ", ".join(run_files(out)))


def _records_alone(trace_args: TraceArgs, time_scale: float, loop: "ClosedLoop | None") -> None:
    """A trace's options with ``--records`` would go unused (the recording's own sends and
    loop are replayed): refused, naming them."""
    given = [f"--{k.replace('_', '-')}" for k in trace_args.given()]
    given += ["--time-scale"] if time_scale != 1.0 else []
    given += ["--users/--think-time-s"] if loop is not None else []
    if given:
        raise CliError(f"{', '.join(given)}: with --records the recording's own load is "
                       "replayed (its stage's loop or its recorded sends), so these would go "
                       "unused; drop them")


def _recorded_stage(records: Path, records_format: str | None, stage: str | None, tier: str
                    ) -> "tuple[Workload, ClosedLoop | None, TimeLimit | None]":
    """The requests of a recording's stage and the loop to send them in, said on stderr
    (:func:`~kvbudget.studies.recorded_replay.live_stage`)."""
    recording = read_recording(records, format=records_format, default_tier=tier)
    label = None if stage is None else pick_stage(recording, stage).label
    workload, stage_loop, mode, limit = live_stage(recording, label)
    typer.echo(fill(f"replaying {counted(len(workload), 'request')} of {records}"
                    + (f", stage {label!r}" if label else "") + f" as recorded: {mode}"),
               err=True)
    return workload, stage_loop, limit


def _ints(text: str, name: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise CliError(f"{name}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise CliError(f"{name}: expected positive integers, got {text!r}")
    return values


def calibrate_cmd(
    url: OptUrlOpt = None,
    out: CalOutOpt = Path("cost_model.json"),
    model: ServedModelOpt = "",
    records: RecordsOpt = None,
    records_format: RecordsFormatOpt = None,
    columns: ColumnOpt = None,
    gpu: CalGpuOpt = None,
    num_gpu_blocks: BlocksOpt = None,
    block_size: BlockSizeOpt = None,
    tensor_parallel_size: CalTpOpt = None,
    kv_cache_dtype: CalKvDtypeOpt = None,
    engine: EngineNameOpt = None,
    overrides: SetOpt = None,
    scenario: CalScenarioOpt = None,
    cost_model: CalCostModelOpt = None,
    policy: CalPolicyOpt = None,
    params: ParamOpt = None,
    fit_kind: FitOpt = "default",
    holdout: HoldoutOpt = None,
    max_evals: EvalsOpt = 200,
    fit_overhead: OverheadFitOpt = True,
    tier: RecTierOpt = "interactive",
    max_output: MaxOutputOpt = None,
    allow_refusals: AllowRefusalsOpt = False,
    allow_small_fit: SmallFitOpt = False,
    seed: SeedOpt = 0,
    api_key: ApiKeyOpt = None,
    prefill_tokens: PrefillTokensOpt = "16,64,128,256,512,1024,2048",
    decode_batches: DecodeBatchesOpt = "1,2,4,8,16,32",
    context_tokens: ContextTokensOpt = "64,256,1024",
    repeats: RepeatsOpt = 3,
    retries: RetriesOpt = 2,
    idle_gap: IdleGapOpt = 0.5,
    max_num_seqs: SeqsOpt = None,
    max_num_batched_tokens: BatchedOpt = None,
    capacity_tokens: CapacityOpt = None,
    read_timeout: TimeoutOpt = 600.0,
    resume: CalResumeOpt = False,
) -> None:
    """Fit the cost model for simulate --cost-model: to a live server's step times (--url,
    --resume after an interrupt), or to a recorded run's latencies (--records, offline)."""
    setup, fit = _flag_groups(locals())
    if records is not None:
        with user_errors():
            _calibrate_recorded(records, out, url=url, live_given={
                "--api-key": _key_given(api_key), "--read-timeout": read_timeout != 600.0,
                "--repeats": repeats != 3, "--retries": retries != 2, "--idle-gap": idle_gap != 0.5,
                "--prefill-tokens": prefill_tokens != "16,64,128,256,512,1024,2048",
                "--decode-batches": decode_batches != "1,2,4,8,16,32",
                "--context-tokens": context_tokens != "64,256,1024", "--resume": resume,
                "--capacity-tokens": capacity_tokens is not None}, setup=setup, fit=fit)
        return
    with user_errors():
        if url is None:
            raise CliError("give --url (a live server) or --records (a recorded run)")
        # its cost file records the GPU, -tp and the KV dtype it was fitted on
        _refuse_records_only("a live calibration", {**setup.given(), **fit.given()},
                             used=("--gpu", "-tp/--tensor-parallel-size", "--kv-cache-dtype"))
        _check_kv_dtype(kv_cache_dtype)
        check_out_file(out)
        plan = _calibration_plan(prefill_tokens, decode_batches, context_tokens, repeats=repeats,
                                 retries=retries, idle_gap=idle_gap, max_num_seqs=max_num_seqs,
                                 max_num_batched_tokens=max_num_batched_tokens, seed=seed)
        target = _target(url, model, api_key, read_timeout)
        _say_batch_limits_assumed(plan, max_num_seqs, max_num_batched_tokens, out)
        cal = _calibrate_with_bar(target, plan, capacity_tokens, out,
                                  _kept_measurements(out, resume))
        _save_calibration(cal, out, gpu, tensor_parallel_size=tensor_parallel_size or 1,
                          kv_cache_dtype=kv_cache_dtype or "auto")
    _print_calibration(cal, target, out)


def _kept_measurements(out: Path, resume: bool) -> CalibrationProgress:
    """The measurements an interrupted ``calibrate --url`` kept beside ``out``, with
    ``--resume`` (said on stderr); refused without it, so that none is lost or reused unsaid."""
    partial = partial_path(out)
    check_out_file(partial, "--out")
    if not resume:
        if partial.exists():
            raise CliError(f"{partial} holds the measurements of an interrupted calibration: "
                           "give --resume to go on from them, or delete it to start over")
        return CalibrationProgress()
    if not partial.exists():
        raise CliError(f"--resume: no {partial} to go on from (an interrupted calibrate --url "
                       f"--out {out} keeps its measurements there)")
    kept = CalibrationProgress.load(partial)
    typer.echo(f"resuming: {kept.num_done} grid measurements kept in {partial} are not made "
               "again (the server and the plan are checked against theirs)", err=True)
    return kept


@dataclass(frozen=True, slots=True)
class _RecordedFlags:
    """The flags of ``calibrate``/``validate --records`` that describe the recorded server and
    how its run is read."""

    records_format: str | None
    columns: list[str] | None
    tier: str
    seed: int
    gpu: str | None
    model: str
    scenario: Path | None
    overrides: list[str] | None
    num_gpu_blocks: int | None
    block_size: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    cost_model: Path | None
    policy: str | None
    params: list[str] | None
    tensor_parallel_size: int | None
    kv_cache_dtype: str | None
    engine: str | None
    max_output: int | None

    def given(self) -> dict[str, bool]:
        """Which of these flags were given (by their names on the command line)."""
        return {"--records-format": self.records_format is not None,
                "--column": bool(self.columns), "--tier": self.tier != "interactive",
                "--gpu": self.gpu is not None, "--scenario": self.scenario is not None,
                "--set": bool(self.overrides), "--num-gpu-blocks": self.num_gpu_blocks is not None,
                "--block-size": self.block_size is not None,
                "--cost-model": self.cost_model is not None, "--policy": self.policy is not None,
                "--param": bool(self.params),
                "-tp/--tensor-parallel-size": self.tensor_parallel_size is not None,
                "--kv-cache-dtype": self.kv_cache_dtype is not None,
                "--engine": self.engine is not None, "--max-output": self.max_output is not None}

    def setup(self, records: Path) -> "recorded.RecordedSetup":
        """The recording read and its simulation configured (:func:`recorded.recorded_setup`)."""
        return recorded.recorded_setup(
            records, records_format=self.records_format, columns=self.columns, tier=self.tier,
            seed=self.seed, gpu=self.gpu, model=self.model or None, scenario=self.scenario,
            overrides=self.overrides, num_gpu_blocks=self.num_gpu_blocks,
            block_size=self.block_size, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens, cost_model=self.cost_model,
            policy=self.policy, params=self.params,
            engine={"tensor_parallel_size": self.tensor_parallel_size,
                    "kv_cache_dtype": self.kv_cache_dtype, "name": self.engine},
            max_output=self.max_output)


@dataclass(frozen=True, slots=True)
class _FitFlags:
    """The flags of a fit to a recorded run (``--fit``, ``--holdout``, ...)."""

    kind: str
    holdout: float | None
    max_evals: int
    fit_overhead: bool
    allow_refusals: bool
    allow_small: bool

    def given(self) -> dict[str, bool]:
        """Which of these flags were given (by their names on the command line)."""
        return {"--fit": self.kind != "default", "--holdout": self.holdout is not None,
                "--max-evals": self.max_evals != 200, "--no-fit-overhead": not self.fit_overhead,
                "--allow-refusals": self.allow_refusals, "--allow-small-fit": self.allow_small}


def _flag_groups(params: Mapping[str, Any]) -> tuple[_RecordedFlags, _FitFlags]:
    """The flag groups ``calibrate`` and ``validate`` both take, from the command's parameters
    by name (its ``locals()`` before anything else is bound): the recorded server's
    (:class:`_RecordedFlags`, whose fields are named as the parameters) and the fit's."""
    setup = _RecordedFlags(**{f.name: params[f.name] for f in fields(_RecordedFlags)})
    fit = _FitFlags(kind=params["fit_kind"], holdout=params["holdout"],
                    max_evals=params["max_evals"], fit_overhead=params["fit_overhead"],
                    allow_refusals=params["allow_refusals"],
                    allow_small=params["allow_small_fit"])
    return setup, fit


def _calibrate_recorded(records: Path, out: Path, *, url: str | None, live_given: dict[str, bool],
                        setup: _RecordedFlags, fit: _FitFlags) -> None:
    """``calibrate --records``: fit the cost model to a recorded run's latencies."""
    if url is not None:
        raise CliError("--url and --records exclude each other")
    check_out_file(out)
    _refuse_live_only("a live calibration", live_given)
    recorded.calibrate_records(setup.setup(records), out, kind=fit.kind, holdout=fit.holdout,
                               max_evals=fit.max_evals, fit_overhead=fit.fit_overhead,
                               allow_refusals=fit.allow_refusals, allow_small=fit.allow_small)


def _validate_recorded(records: Path, out: Path, *, url: str | None, trace: Path | None,
                       live_given: dict[str, bool], setup: _RecordedFlags, fit: _FitFlags,
                       max_error: float | None) -> None:
    """``validate --records``: simulate a recorded run with the fitted model and compare."""
    if url is not None or trace is not None:
        raise CliError("--records excludes --url and --trace")
    check_out_dir(out)
    _refuse_live_only("a live validation", live_given)
    if fit.kind not in ("default", "linear"):
        raise CliError(f"--fit: expected one of default, linear, got {fit.kind!r}")
    recorded.validate_records(setup.setup(records), out, holdout=fit.holdout, kind=fit.kind,
                              max_evals=fit.max_evals, fit_overhead=fit.fit_overhead,
                              max_error=max_error, cost_model=setup.cost_model,
                              allow_refusals=fit.allow_refusals, allow_small=fit.allow_small)


def _refuse_live_only(run: str, given: dict[str, bool]) -> None:
    """Refuse the first flag of ``given`` that was set (``run``'s flag, which would be ignored
    with ``--records``): say so rather than take any value silently."""
    flags = [flag for flag, set_ in given.items() if set_]
    if flags:
        raise CliError(f"{flags[0]} applies to {run} (--url), not to --records")


def _refuse_records_only(run: str, given: dict[str, bool], used: tuple[str, ...] = ()
                         ) -> None:
    """Refuse the first flag of ``given`` that was set (a flag of ``--records``, which ``run``
    would ignore), but those of ``used`` (which ``run`` takes too: ``validate --url`` takes the
    cost file, the gateway's flags and the trace's; the server tells its KV blocks)."""
    flags = [flag for flag, set_ in given.items() if set_ and flag not in used]
    if flags:
        raise CliError(f"{flags[0]} applies to --records, not to {run}")


def _check_kv_dtype(kv_cache_dtype: str | None) -> None:
    """A ``--kv-cache-dtype`` the cost file would record (``calibrate --url``) is one the
    simulator takes, refused before the server is timed (else after it, or written)."""
    if kv_cache_dtype is not None and kv_cache_dtype not in KV_CACHE_DTYPES:
        raise CliError(f"--kv-cache-dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                       f"got {kv_cache_dtype!r}")


def _say_batch_limits_assumed(plan: CalibrationPlan, max_num_seqs: int | None,
                              max_num_batched_tokens: int | None, out: Path) -> None:
    """On stderr, the server's batch limits ``calibrate --url`` takes without being given them
    (a vLLM server tells neither): the grid keeps to them and ``out`` records them, which
    ``validate --url`` then simulates."""
    assumed = [f"{flag} {value:,}" for flag, given, value in (
        ("--max-num-seqs", max_num_seqs, plan.max_num_seqs),
        ("--max-num-batched-tokens", max_num_batched_tokens, plan.max_num_batched_tokens))
        if given is None]
    if assumed:
        typer.echo(fill(f"assumed: the server runs with {' and '.join(assumed)} (kvbudget's "
                        "defaults; a server does not tell them): the grid keeps to them and "
                        f"{out} records them, which validate --url simulates; give the "
                        "server's own"), err=True)


def _calibration_plan(prefill_tokens: str, decode_batches: str, context_tokens: str, *,
                      repeats: int, retries: int, idle_gap: float, max_num_seqs: int | None,
                      max_num_batched_tokens: int | None, seed: int = 0) -> CalibrationPlan:
    """The grid ``calibrate --url`` times, from its flags (``--seed``: its prompts' token
    ids)."""
    return CalibrationPlan(
        prefill_tokens=_ints(prefill_tokens, "--prefill-tokens"),
        decode_batches=_ints(decode_batches, "--decode-batches"),
        context_tokens=_ints(context_tokens, "--context-tokens"),
        repeats=repeats,
        retries=retries,
        idle_gap_s=idle_gap,
        max_num_seqs=max_num_seqs or 256,
        max_num_batched_tokens=max_num_batched_tokens or 2048,
        seed=seed,
    )


def _save_calibration(cal: "Calibration", out: Path, gpu: str | None, *,
                      tensor_parallel_size: int, kv_cache_dtype: str) -> None:
    """Write a live calibration's cost-model file, with what it was fitted on; the
    measurements an interrupted run kept beside it are in it now: their file is removed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(out, _fitted_on(cal.model, gpu, cal.info.model, out,
                             tensor_parallel_size=tensor_parallel_size,
                             kv_cache_dtype=kv_cache_dtype))
    partial_path(out).unlink(missing_ok=True)


def _fitted_on(model: Any, gpu: str | None, served: str | None, out: Path, *,
               tensor_parallel_size: int, kv_cache_dtype: str) -> dict[str, Any] | None:
    """The ``fitted_on`` block of a live calibration's file (the served model resolved to a
    preset, ``--gpu``), or a note saying why the file cannot record it."""
    target = target_or_why(gpu, served, tensor_parallel_size=tensor_parallel_size,
                           kv_cache_dtype=kv_cache_dtype)
    if isinstance(target, str) and gpu is not None and served is not None \
            and target.startswith("the served model"):
        typer.echo(f"note: {out} records the GPU it was fitted on, not its model ({target}): "
                   "its GPU and parallelism are checked where it is used, its model is not",
                   err=True)
        return fitted_on_gpu_extra(gpu, served, tensor_parallel_size=tensor_parallel_size,
                                   kv_cache_dtype=kv_cache_dtype)
    if isinstance(target, str):
        typer.echo(f"note: {out} does not record the GPU and model it was fitted on ({target}"
                   "): it cannot be checked where it is used", err=True)
        return None
    return fitted_on_extra(model, target, {})


def _calibrate_with_bar(target: "ServerTarget", plan: "CalibrationPlan",
                        capacity_tokens: int | None, out: Path, kept: CalibrationProgress
                        ) -> "Calibration":
    """:func:`~kvbudget.live.calibrate.calibrate` with a progress bar, going on from ``kept``;
    a server that fails it exits with code 1, Ctrl-C with 130, each keeping the grid
    measurements made so far beside ``out`` for ``--resume``."""
    bar: Any = None
    progress = [kept.num_done, 0]  # grid measurements done, of
    resumed = str(partial_path(out)) if kept.done else None

    def on_point(point: Any, done: int, total: int) -> None:
        nonlocal bar
        if bar is None:  # a terminal's bar; elsewhere (CI) a line every LINE_EVERY_S
            bar = Bar("calibrate", total, "point", lines_from=1)
            bar.update(done - 1)
        bar.update(1)
        progress[:] = [done, total]

    try:
        return calibrate(target, plan, capacity_tokens=capacity_tokens, on_point=on_point,
                         progress=kept, resumed_from=resumed)
    except BackendUnavailable as exc:
        raise CliError(f"{exc}; {_keep_partial(kept, out)}", 1) from None
    except CalibrationFailed as exc:
        raise CliError(str(exc), 1) from None
    except KeyboardInterrupt:
        done, total = progress
        raise CliError(f"interrupted after {done} of {total or 'the'} grid measurements; "
                       f"{_keep_partial(kept, out)}", 130) from None
    finally:
        if bar is not None:
            bar.close()


def _keep_partial(kept: CalibrationProgress, out: Path) -> str:
    """Write the measurements made so far beside ``out``; what to say of them."""
    if not kept.done:
        return f"none was finished, so nothing was written ({out} neither)"
    partial = partial_path(out)
    kept.save(partial)
    return (f"the {kept.num_done} finished are kept in {partial}; {out} is fitted and written "
            "once the whole grid is measured: rerun the same command with --resume to measure "
            "only the rest")


def _print_calibration(cal: "Calibration", target: "ServerTarget", out: Path) -> None:
    """The coefficients and the per-class fit errors ``calibrate --url`` prints."""
    typer.echo(f"fitted on {cal.fit.num_samples} grid points of {cal.info.model} at "
               f"{target.base_url}")
    typer.echo(coefficient_table(cal.fit, (("frontend_overhead_s", cal.frontend_overhead_s),)))
    table, in_sample = class_error_table(cal.fit)
    typer.echo(table)
    for line in in_sample:
        typer.echo(fill(f"note: {line}"), err=True)
    for note in cal.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {out}")


def validate_cmd(
    url: OptUrlOpt = None,
    trace: ValidateTraceOpt = None,
    cost_model: ValidateCostModelOpt = None,
    records: RecordsOpt = None,
    records_format: RecordsFormatOpt = None,
    columns: ColumnOpt = None,
    gpu: GpuOpt = None,
    num_gpu_blocks: BlocksOpt = None,
    block_size: BlockSizeOpt = None,
    tensor_parallel_size: TpOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    engine: EngineNameOpt = None,
    overrides: SetOpt = None,
    holdout: HoldoutOpt = None,
    fit_kind: FitOpt = "default",
    max_evals: EvalsOpt = 200,
    fit_overhead: OverheadFitOpt = True,
    policy: PolicyOpt = None,
    params: ParamOpt = None,
    scenario: ScenarioOpt = None,
    out: ValidateOutOpt = Path("validation"),
    trace_format: FormatOpt = None,
    tier: TierOpt = "interactive",
    max_output: MaxOutputOpt = None,
    allow_refusals: AllowRefusalsOpt = False,
    allow_small_fit: SmallFitOpt = False,
    time_scale: TimeScaleOpt = 1.0,
    capacity_tokens: CapacityOpt = None,
    max_in_flight: InFlightOpt = 256,
    poll_period: PollOpt = 1.0,
    lease_ttl: LeaseOpt = None,
    max_num_seqs: ValSeqsOpt = None,
    max_num_batched_tokens: ValBatchedOpt = None,
    model: ServedModelOpt = "",
    api_key: ApiKeyOpt = None,
    seed: SeedOpt = 0,
    read_timeout: TimeoutOpt = 600.0,
    max_error: MaxErrorOpt = None,
    speed_check: SpeedCheckOpt = True,
    correct_drift: CorrectDriftOpt = False,
    async_scheduling: AsyncSchedulingOpt = True,
) -> None:
    """Simulate with the calibrated model and compare per metric: against a live replay of a
    trace (--url), or against a recorded run (--records, offline)."""
    setup, fit = _flag_groups(locals())
    if records is not None:
        with user_errors():
            _validate_recorded(records, out, url=url, trace=trace, live_given={
                "--format": trace_format is not None, "--api-key": _key_given(api_key),
                "--read-timeout": read_timeout != 600.0, "--time-scale": time_scale != 1.0,
                "--capacity-tokens": capacity_tokens is not None,
                "--max-in-flight": max_in_flight != 256, "--poll-period": poll_period != 1.0,
                "--lease-ttl": lease_ttl is not None, "--no-async-scheduling": not async_scheduling},
                setup=setup, fit=fit, max_error=max_error)
        return
    with user_errors():
        if url is None or trace is None or cost_model is None:
            raise CliError("give --url, --trace and --cost-model (a live validation) or "
                           "--records (a recorded run)")
        _refuse_records_only("a live validation", {**setup.given(), **fit.given()}, used=(
            "--cost-model", "--policy", "--param", "--scenario", "--tier", "--max-output"))
        outcome, run, overhead = _validate_live(
            url, trace, cost_model, out, speed_check=speed_check, correct_drift=correct_drift,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            server=(model, api_key, read_timeout), gateway=(scenario, policy, params),
            trace_format=trace_format, tier=tier, time_scale=time_scale, max_output=max_output,
            capacity_tokens=capacity_tokens, max_in_flight=max_in_flight, seed=seed,
            poll_period=poll_period, lease_ttl=lease_ttl, async_scheduling=async_scheduling)
    _print_live_validation(outcome, run, overhead=overhead, speed_check=speed_check,
                           out=out, max_error=max_error, async_scheduling=async_scheduling)


def _validate_live(url: str, trace: Path, cost_model: Path, out: Path, *, speed_check: bool,
                   correct_drift: bool, max_num_seqs: int | None,
                   max_num_batched_tokens: int | None, server: tuple[str, str | None, float],
                   gateway: tuple[Path | None, str | None, list[str] | None],
                   trace_format: str | None, tier: str, time_scale: float,
                   max_output: int | None, capacity_tokens: int | None, max_in_flight: int,
                   seed: int, poll_period: float, lease_ttl: float | None,
                   async_scheduling: bool = True
                   ) -> "tuple[LiveComparison, LiveValidationRun, float]":
    """``validate --url``: replay the trace on the server (with speed checks), simulate it with
    the calibrated model and compare; the comparison, the speed checks and the front-end
    overhead the simulation added. ``server``: the served model, the API key and the read
    timeout; ``gateway``: the scenario, the policy and its parameters."""
    check_out_dir(out)
    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out}: already exists and is not empty; choose another --out")
    if correct_drift and not speed_check:
        raise CliError("--correct-drift needs the speed checks (drop --no-speed-check)")
    cal = load_live_cost_model(cost_model, max_num_seqs=max_num_seqs,
                               max_num_batched_tokens=max_num_batched_tokens)
    for line in cal.warnings:  # a fit at a bound or outside its range: said as everywhere
        typer.echo(f"warning: {line}", err=True)
    overhead = cal.frontend_overhead_s
    target = _target(url, *server)
    setup = gateway_setup(*gateway)
    if setup.clients:  # docs/clients.md: replay and the simulating commands take them
        typer.echo("note: the scenario's [clients] (" + ", ".join(
            f"{t}={m.name}" for t, m in setup.clients) + ") are not used by validate --url: "
            "each request is sent once, no retry nor client timeout, in the live replay and "
            "in its simulation alike (kvbudget replay --scenario sends them as those clients "
            "would)", err=True)
    lease_ttl = setup.lease_ttl(lease_ttl)
    pol = setup.new_policy()
    workload = load_workload(trace, trace_format, tier, time_scale, max_output, seed)
    tiers = _tiers_for(workload, setup.tiers)
    out_live, trace_path = out / "live", trace
    try:
        info = discover_kv_server(target)
        run = run_live_validation(
            target, cal.model, info, lambda: run_replay(
                workload, pol, target=target, out=out_live, trace=trace_path,
                time_scale=time_scale, capacity_tokens=capacity_tokens,
                max_in_flight=max_in_flight, seed=seed, resume=False, tiers=tiers,
                poll_period=poll_period, lease_ttl=lease_ttl,
                hint="; validate needs a complete run: start it again with another --out",
                front_door=setup.front_door),
            num_seqs=cal.max_num_seqs, speed_check=speed_check)
    except NothingCompleted as exc:
        if exc.by_gateway:  # what the trace's load assumed (a max_tokens) may be why
            say_loaded(workload)
        raise CliError(str(exc), 1) from None
    except BackendUnavailable as exc:  # the server, or a speed check, failed
        raise CliError(str(exc), 1) from None
    outcome = compare_live_validation(
        workload, setup.new_policy, run.live, out, cost_model=cal.model,
        frontend_overhead_s=overhead, block_size=run.block_size,
        num_gpu_blocks=run.num_gpu_blocks, max_model_len=info.max_model_len,
        max_num_seqs=cal.max_num_seqs, max_num_batched_tokens=cal.max_num_batched_tokens,
        tiers=tiers, front_door=setup.front_door, capacity_tokens=capacity_tokens,
        lease_ttl_s=lease_ttl, seed=seed, async_scheduling=async_scheduling,
        enable_prefix_caching=info.enable_prefix_caching,
        drift_factor=run.drift_factor() if correct_drift else None,
        source={"trace": str(trace), "url": target.base_url},
        speed_check=run.speed_check_meta(),
        title=f"{pol.name} on {trace.name}: simulated vs measured")
    say_loaded(workload)  # what the trace's load warned of or assumed, with the result (replay's)
    typer.echo(fill(simulated_engine_line(info, cal)))
    for line in setting_lines([run.live.summary]):  # what the server did (said) or the replay
        typer.echo(line)  # assumed, as replay prints them: outputs cut at the context, ...
    return outcome, run, overhead


def _print_live_validation(outcome: "LiveComparison", run: "LiveValidationRun", *,
                           overhead: float, speed_check: bool, out: Path,
                           max_error: float | None, async_scheduling: bool) -> None:
    """The tables and lines ``validate --url`` prints, the scheduling it assumed first; exit 1
    past ``--max-error``."""
    typer.echo("simulated with async scheduling " + (
        "on (vLLM's default on GPUs; a CPU vLLM runs without it: --no-async-scheduling)"
        if async_scheduling else "off (--no-async-scheduling)"))
    result = outcome.validation
    corrected = (None if outcome.drift_corrected is None
                 else (outcome.drift_factor, outcome.drift_corrected))

    def pct(x: float, sign: str = "+") -> str:  # a MAPE (a mean of absolute errors): no sign
        return "-" if not math.isfinite(x) else f"{100 * x:{sign}.1f}%"

    typer.echo(render(("metric", "simulated", "measured", "rel. error"), [
        [r["metric"], table_cell(r["metric"], r["simulated"]),
         table_cell(r["metric"], r["measured"]), pct(r["rel_error"])]
        for r in result.metrics.to_dict(orient="records")
    ]))
    typer.echo(REL_ERROR_SAID)
    typer.echo(fill(THROUGHPUT_SAID))
    typer.echo(render(("per-request", "pairs", "MAPE"), [
        [r["metric"], r["num_pairs"], pct(r["mape"], sign="")]
        for r in result.per_request.to_dict(orient="records")
    ]))
    for line in result.said:  # what the comparison left out (requests read whole at once)
        typer.echo(fill(line))
    typer.echo(f"simulated times include the calibrated front-end overhead of "
               f"{1000 * overhead:.1f} ms per request")
    if outcome.sent_late is not None:
        typer.echo(fill(outcome.sent_late.said()))
    if speed_check:
        said = [f"not timed ({why})" if c is None else f"{pct(c.drift)} ({1000 * c.measured_s:.2f}"
                f" vs {1000 * c.predicted_s:.2f} ms)"
                for c, why in zip(run.checks, run.untimed_why, strict=True)]
        typer.echo(f"decode step now vs the calibration: before the replay {said[0]}, after "
                   f"{said[1]}; a drift beyond a few percent means the server's speed moved "
                   "since the calibration, and the comparison carries that")
    if corrected is not None:
        factor, res_c = corrected
        key = res_c.metrics[res_c.metrics["metric"].isin(KEY_METRICS)]
        typer.echo(f"with every step time x{factor:.3f} (the speed checks' mean), simulated "
                   "vs measured:")
        typer.echo(render(("metric", "simulated", "measured", "rel. error"), [
            [r["metric"], table_cell(r["metric"], r["simulated"]),
             table_cell(r["metric"], r["measured"]), pct(r["rel_error"])]
            for r in key.to_dict(orient="records")]))
    typer.echo(f"wrote {out}/validation.csv, validation.json, validate.png, live/, sim/")
    if max_error is not None:
        name, err = (result if corrected is None else corrected[1]).worst_key_error()
        if not math.isfinite(err):  # e.g. every answer read at once: no measured TTFT
            raise fail(f"{name} has no relative error (a side has no figure for it), so "
                       f"--max-error {100 * max_error:.1f}% cannot be met", 1)
        if not err <= max_error:
            raise fail(f"{name} is off by {100 * err:.1f}%, more than --max-error "
                       f"{100 * max_error:.1f}%", 1)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_cmd)
    app.command("calibrate")(calibrate_cmd)
    app.command("validate")(validate_cmd)
