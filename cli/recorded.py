"""``kvbudget calibrate --records`` and ``kvbudget validate --records``: offline, from a
recorded run (thin wrappers over :mod:`kvbudget.studies.calibrate` and
:mod:`kvbudget.studies.validate`; the commands themselves are in :mod:`kvbudget.cli.live`)."""

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvbudget.cli.errors import CliError, fail

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel
    from kvbudget.results.recordings import Recording
    from kvbudget.simulator.run import SimConfig
    from kvbudget.studies.calibrate import RecordedCalibration
    from kvbudget.studies.validate import OfflineValidation

COST_KINDS = ("default", "linear")
"""``--fit``: the default step-time model's own parameters, or the linear model's."""

_ENGINE_KEYS = ("num_gpu_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens",
                "enable_prefix_caching")


@dataclass(frozen=True)
class RecordedSetup:
    """A recording and how it is simulated (the flags over what the recording says)."""

    recording: "Recording"
    config: "SimConfig"
    policy: str
    policy_params: dict[str, Any]


def _columns(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise CliError(f"--column: expected NAME=COLUMN, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _known(kind: str, name: Any) -> bool:
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model

    if not isinstance(name, str):
        return False
    try:
        (get_gpu if kind == "gpu" else get_model)(name)
    except ValueError:
        return False
    return True


def recorded_setup(records: Path, *, records_format: str | None, columns: list[str] | None,
                   tier: str, seed: int, gpu: str | None, model: str | None,
                   scenario: Path | None, overrides: list[str] | None,
                   num_gpu_blocks: int | None, block_size: int | None,
                   max_num_seqs: int | None, max_num_batched_tokens: int | None,
                   cost_model: Path | None, policy: str | None,
                   params: list[str] | None,
                   engine: dict[str, Any] | None = None) -> RecordedSetup:
    """Read the recording and build the simulation configuration: the command-line flags,
    then ``--set``, then what the recording says of the server, then the scenario/defaults."""
    from kvbudget.cli.live import _policy
    from kvbudget.cli.simulate import build_scenario
    from kvbudget.results.recordings import read_recording
    from kvbudget.studies.validate import recorded_policy
    from kvbudget.workloads.errors import TraceError

    if not tier or not tier.replace("_", "").replace("-", "").isalnum():
        raise CliError(f"--tier: a tier name is alphanumeric (with - or _), got {tier!r}")
    try:
        recording = read_recording(records, format=records_format, columns=_columns(columns),
                                   default_tier=tier, seed=seed)
    except TraceError as exc:
        raise CliError(str(exc)) from None
    cfg = recording.config
    recorded: list[str] = []
    given = {"num_gpu_blocks": num_gpu_blocks, "block_size": block_size,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens}
    for key in _ENGINE_KEYS:
        if given.get(key) is None and key in cfg and cfg[key] is not None:
            recorded.append(f"engine.{key}={json.dumps(cfg[key])}")
    if num_gpu_blocks is None and "num_gpu_blocks" not in cfg and "kv_capacity_tokens" in cfg:
        size = block_size or int(cfg.get("block_size") or 16)
        recorded.append(f"engine.num_gpu_blocks={int(cfg['kv_capacity_tokens']) // size}")
    if gpu is None and _known("gpu", cfg.get("gpu")):
        gpu = str(cfg["gpu"])
    if model is None and isinstance(cfg.get("model"), str):
        # a preset's name, or a Hugging Face id whose last part names a bundled model
        for name in (cfg["model"], cfg["model"].rsplit("/", 1)[-1]):
            if _known("model", name):
                model = name
                break
    flags = [f"engine.{k}={json.dumps(v)}" for k, v in (engine or {}).items() if v is not None]
    for flag, value in (("--gpu", gpu), ("--model", model)):
        if value is None and scenario is None:
            typer.echo(f"note: no {flag} and the recording does not name one: the default "
                       "scenario's is simulated", err=True)
    scn = build_scenario(scenario=scenario, overrides=[*recorded, *(overrides or []), *flags],
                         gpu=gpu, model=model, cost_model=cost_model,
                         num_gpu_blocks=num_gpu_blocks, block_size=block_size,
                         max_num_seqs=max_num_seqs,
                         max_num_batched_tokens=max_num_batched_tokens)
    config = scn.sim_config()
    if "kv_capacity_tokens" in cfg and config.gateway_capacity_tokens is None:
        from dataclasses import replace

        config = replace(config, gateway_capacity_tokens=int(cfg["kv_capacity_tokens"]))
    if policy is not None:
        _policy(policy, params)  # a bad name or parameter fails here
    elif params:
        raise CliError("--param needs --policy")
    name, values = recorded_policy(recording, policy, _param_values(params))
    return RecordedSetup(recording, config, name, values)


def _param_values(params: list[str] | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for item in params or []:
        key, _, raw = item.partition("=")
        try:
            values[key.strip()] = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            values[key.strip()] = raw
    return values


def _pct(x: Any) -> str:
    return "-" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):+.1f}%"


def _describe_recording(setup: RecordedSetup) -> None:
    rec = setup.recording
    c = rec.counts
    not_measured = c["num_simulated"] - c["num_measured"]
    typer.echo(f"{rec.path} ({rec.format}): {c['num_simulated']} requests simulated, "
               f"{c['num_measured']} measured"
               + (f", {not_measured} not measured (failed, timed out or without TTFT/E2E)"
                  if not_measured else "")
               + "".join(f", {k.removeprefix('num_dropped_').replace('_', ' ')} {v} dropped"
                         for k, v in c.items() if k.startswith("num_dropped_") and v))
    e = setup.config.engine_for()  # the knobs with vLLM's (or the chosen) defaults filled in
    typer.echo(f"simulated on {setup.config.gpu} / {setup.config.model}: "
               f"num_gpu_blocks={setup.config.resolved_num_gpu_blocks()} "
               f"block_size={e.block_size} max_num_seqs={e.max_num_seqs} "
               f"max_num_batched_tokens={e.max_num_batched_tokens} "
               f"prefix_caching={e.enable_prefix_caching}, policy {setup.policy}")
    for note in rec.notes:
        typer.echo(f"note: {note}", err=True)


def start_model(setup: RecordedSetup, kind: str) -> "CostModel":
    """The model the fit starts from: the configuration's (``--cost-model`` or the default
    step-time model) for ``default``; its linear fit for ``linear`` (a linear file as is)."""
    from kvbudget.perf.cost_model import LinearCostModel
    from kvbudget.studies.calibrate import linear_start

    if kind not in COST_KINDS:
        raise CliError(f"--fit: expected one of {', '.join(COST_KINDS)}, got {kind!r}")
    model = setup.config.resolved_cost_model()
    if kind == "linear" and not isinstance(model, LinearCostModel):
        e = setup.config.engine_for()
        model = linear_start(model, max_num_batched_tokens=e.batched_tokens_limit,
                             max_num_seqs=e.seqs_limit)
    return model


def fit(setup: RecordedSetup, kind: str, *, rows: Any, max_evals: int, fit_overhead: bool,
        desc: str) -> "RecordedCalibration":
    """Calibrate with a progress bar (simulations run)."""
    from tqdm import tqdm

    from kvbudget.studies.calibrate import calibrate_recording

    start = start_model(setup, kind)
    bar = tqdm(total=max_evals, desc=desc, unit="sim", leave=False, disable=None,
               file=sys.stderr)

    def progress(n: int, best: float) -> None:
        bar.update(n - bar.n)
        bar.set_postfix(loss=f"{best:.4g}", refresh=False)

    try:
        return calibrate_recording(setup.recording, setup.config, start, policy=setup.policy,
                                   policy_params=setup.policy_params, rows=rows,
                                   fit_overhead=fit_overhead,
                                   start_overhead_s=setup.config.frontend_overhead_s,
                                   max_evals=max_evals, progress=progress)
    finally:
        bar.close()


def _table_rows(table: Any, stage: str = "all") -> list[list[Any]]:
    sub = table[table["stage"] == stage]
    return [[r["metric"], r["simulated"], r["measured"], _pct(r["rel_error"])]
            for r in sub.to_dict(orient="records")]


def print_comparison(table: Any, title: str) -> None:
    from kvbudget.cli.tables import render

    typer.echo(title)
    typer.echo(render(("metric", "simulated", "measured", "rel. error"), _table_rows(table)))
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
    from kvbudget.cli.tables import render

    typer.echo(f"{cal.num_evals} simulations; loss {cal.start_loss:.4g} at the start, "
               f"{cal.loss:.4g} fitted")
    typer.echo(render(("parameter", "start", "fitted"), [
        [k, cal.start[k], v] for k, v in cal.fitted.items()]))
    for name, why in cal.fixed.items():
        typer.echo(f"not fitted: {name} ({why})")


def calibrate_records(setup: RecordedSetup, out: Path, *, kind: str, holdout: float | None,
                      max_evals: int, fit_overhead: bool) -> None:
    """Fit, save, print the in-sample (and, with ``holdout``, the held-out) errors."""
    from kvbudget.studies.validate import validate_recording

    if out.suffix != ".json":
        raise CliError(f"{out}: the cost-model file must end in .json")
    _describe_recording(setup)
    rows = None if holdout is None else setup.recording.fit_rows(holdout)
    cal = fit(setup, kind, rows=rows, max_evals=max_evals, fit_overhead=fit_overhead,
              desc="calibrate")
    out.parent.mkdir(parents=True, exist_ok=True)
    cal.save(out, setup.recording, setup.config, policy=setup.policy, holdout=holdout)
    _print_fit(cal)
    print_comparison(cal.table, f"in sample ({cal.num_rows} requests):")
    if rows is not None:
        held = validate_recording(setup.recording, setup.config, policy=setup.policy,
                                  policy_params=setup.policy_params, cost_model=cal.model,
                                  frontend_overhead_s=cal.frontend_overhead_s, rows=~rows)
        print_comparison(held.table, f"held out (the last {holdout:g}, {held.num_compared} "
                         "requests):")
    typer.echo(f"wrote {out}")


def validate_records(setup: RecordedSetup, out: Path, *, holdout: float | None, kind: str,
                     max_evals: int, fit_overhead: bool, max_error: float | None,
                     cost_model: Path | None) -> "OfflineValidation":
    """Simulate the recording with the cost model (``--holdout``: fit one on the first part
    first) and compare; write the files of the live validate."""
    from kvbudget.studies.validate import validate_recording

    if out.exists() and any(out.iterdir()):
        raise CliError(f"{out}: already exists and is not empty; choose another --out")
    _describe_recording(setup)
    rows = None
    meta: dict[str, Any] = {"cost_model": None if cost_model is None else str(cost_model),
                            "policy": setup.policy}
    cost = None
    overhead = None
    if holdout is not None:
        fit_rows = setup.recording.fit_rows(holdout)
        rows = ~fit_rows
        cal = fit(setup, kind, rows=fit_rows, max_evals=max_evals, fit_overhead=fit_overhead,
                  desc="calibrate (first part)")
        out.mkdir(parents=True, exist_ok=True)
        cal.save(out / "cost.json", setup.recording, setup.config, policy=setup.policy,
                 holdout=holdout)
        _print_fit(cal)
        print_comparison(cal.table, f"fitted on the first part ({cal.num_rows} requests):")
        cost, overhead = cal.model, cal.frontend_overhead_s
        meta.update({"holdout": holdout, "fitted_cost_model": str(out / "cost.json"),
                     "fit_in_sample_error": cal.in_sample_errors()})
    elif cost_model is None:
        typer.echo("note: no --cost-model: the default step-time model (uncalibrated)",
                   err=True)
    result = validate_recording(setup.recording, setup.config, policy=setup.policy,
                                policy_params=setup.policy_params, cost_model=cost,
                                frontend_overhead_s=overhead, rows=rows, out=out, meta=meta)
    title = ("simulated vs measured" if rows is None else
             f"held out (the last {holdout:g}, {result.num_compared} requests):")
    print_comparison(result.table, title)
    from kvbudget.cli.tables import render

    typer.echo(render(("per-request", "pairs", "MAPE"), [
        [r["metric"], r["num_pairs"], _pct(r["mape"])]
        for r in result.per_request.to_dict(orient="records")]))
    typer.echo(f"simulated times include a front-end overhead of "
               f"{1000 * result.frontend_overhead_s:.1f} ms per request")
    typer.echo(f"wrote {out}/validation.csv, validation.json, validate.png, sim/")
    if max_error is not None:
        from kvbudget.analysis.validation import KEY_METRICS

        errs = result.errors()
        worst = max(KEY_METRICS, key=lambda k: abs(errs.get(k, math.inf))
                    if math.isfinite(errs.get(k, math.inf)) else math.inf)
        err = abs(errs.get(worst, math.inf))
        if not err <= max_error:
            raise fail(f"{worst} is off by {100 * err:.1f}%, more than --max-error "
                       f"{100 * max_error:.1f}%", 1)
    return result
