"""``kvbudget profile`` (time a model's steps on this machine) and ``kvbudget profile-fit``
(turn a profile table into a cost-model file for ``simulate --cost-model``)."""

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import CliError, check_out_file, fail, user_errors
from kvbudget.cli.fit_tables import class_error_table, coefficient_table
from kvbudget.live.profiler import (
    ProfileGrid,
    ProfileRun,
    measure_to_file,
    model_spec_from_meta,
    read_profile,
    rows_to_profile,
    sidecar_path,
    start_profile,
    table_format,
)
from kvbudget.perf.cost_model import save_cost_model
from kvbudget.perf.fit import (
    compare_cost_model,
    errors_as_dict,
    fit_linear_cost_model,
    summarize_errors,
)
from kvbudget.perf.fitted_on_write import fitted_on_extra, target_or_why
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel
from kvbudget.results.said import fill

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.live.profiler import Profile
    from kvbudget.perf.fit import FitResult


def _int_list(option: str, text: str | None) -> tuple[int, ...] | None:
    """``"16,64, 128"`` -> ``(16, 64, 128)``; errors name the option and the bad item."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",") if item.strip()]
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            raise CliError(f"{option}: {item!r} is not an integer") from None
        if value < 1:
            raise CliError(f"{option}: every value must be >= 1, got {value}")
        values.append(value)
    if not values:
        raise CliError(f"{option}: give at least one integer, got {text!r}")
    return tuple(values)


def _roofline(gpu: str | None, model: str | None, meta: dict[str, Any]) -> Any:
    """The default step-time model (``vllm-v1``, docs/fidelity.md) for ``gpu`` and ``model``
    (default: the profiled model's shape), to compare with the measured steps."""
    if gpu is None:
        if model is not None:
            raise CliError("--model (a model preset for the roofline) needs --gpu as well")
        return None
    spec = get_model(model) if model is not None else model_spec_from_meta(meta)
    return VllmStepModel(get_gpu(gpu), spec)


def _source(meta: dict[str, Any]) -> str:
    shape = meta.get("model", {})
    hw = meta.get("hardware", {})
    where = hw.get("gpu_name") or hw.get("cpu_model") or "unknown hardware"
    arch = shape.get("architecture", "model") if isinstance(shape, dict) else "model"
    return (f"kvbudget profile: {arch} ({meta.get('dtype', '?')}) on {where}, "
            f"{meta.get('created_utc', 'undated')}")


def _fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f}"


def _print_report(profile: "Profile", fit: "FitResult", roofline: Any,
                  roofline_points: "pd.DataFrame | None") -> None:
    tab = profile.table.reset_index(drop=True)
    header = (f"{'class':<8} {'batch':>6} {'seq_len':>8} {'measured_ms':>12} {'p10-p90_%':>9} "
              f"{'fitted_ms':>10} {'fit_err_%':>9}")
    if roofline_points is not None:
        header += f" {'roofline_ms':>11} {'roof_err_%':>10}"
    typer.echo(header)
    for i in range(len(tab)):
        row = tab.iloc[i]
        fitted = fit.table.iloc[i]
        measured = float(row["step_time_s"])
        spread = ""
        if "step_time_p10_s" in tab.columns and "step_time_p90_s" in tab.columns:
            spread = f"{(row['step_time_p90_s'] - row['step_time_p10_s']) / measured * 100:9.1f}"
        line = (f"{fitted['point_class']!s:<8} {int(row.get('batch_size', 0)):>6} "
                f"{int(row.get('seq_len', 0)):>8} {_fmt_ms(measured):>12} {spread:>9} "
                f"{_fmt_ms(float(fitted['predicted_s']))} {fitted['rel_error'] * 100:9.1f}")
        if roofline_points is not None:
            roof = roofline_points.iloc[i]
            line += f" {_fmt_ms(float(roof['predicted_s'])):>11} {roof['rel_error'] * 100:10.1f}"
        typer.echo(line)
    typer.echo("")
    typer.echo(f"fit error: MAPE {fit.mape * 100:.2f}%, max |error| "
               f"{fit.max_abs_rel_error * 100:.2f}% over {fit.num_samples} grid points; the fit:")
    table, in_sample = class_error_table(fit)
    for block in (coefficient_table(fit), table):  # indented: not read as the points' rows
        typer.echo(textwrap.indent(block, "  "))
    for line in in_sample:
        typer.echo(fill(f"note: {line}"), err=True)
    if roofline_points is not None:
        typer.echo(f"default step model ({roofline.describe()['kind']}) {roofline.gpu.name} + "
                   f"{roofline.model.name} against the same points:")
        _print_summary("roofline", summarize_errors(roofline_points))


def _print_summary(label: str, summary: "pd.DataFrame") -> None:
    for rec in summary.to_dict(orient="records"):
        typer.echo(f"  {label} {rec['point_class']:<8} n={int(rec['num_points']):<4} "
                   f"MAPE {rec['mape'] * 100:7.2f}%  max {rec['max_abs_rel_error'] * 100:7.2f}%  "
                   f"bias {rec['mean_rel_error'] * 100:+7.2f}%")


def fit_profile_to_file(profile: "Profile", out: Path, *, gpu: str | None = None,
                        model: str | None = None, profile_path: Path | None = None) -> "FitResult":
    """Fit ``profile``, write the cost-model file ``out`` and print the per-point report."""
    if out.suffix.lower() != ".json":
        raise CliError(f"{out}: the cost-model file must end in .json")
    if not out.parent.is_dir():
        raise CliError(f"{out}: directory {out.parent} does not exist")
    roofline = _roofline(gpu, model, profile.meta)
    if profile.meta.get("complete") is False:
        typer.echo(f"note: the profile is incomplete ({profile.meta.get('stopped', 'interrupted')});"
                   " fitting the points it has", err=True)
    fit = fit_linear_cost_model(profile.table, source=_source(profile.meta))
    roofline_points = None if roofline is None else compare_cost_model(profile.table, roofline)
    extra = fit.to_json_extra()
    extra["profile"] = {**({"path": str(profile_path)} if profile_path else {}), **profile.meta}
    if roofline_points is not None:
        extra["roofline_comparison"] = {
            "roofline": roofline.describe(),
            "per_class": errors_as_dict(summarize_errors(roofline_points)),
        }
    target = target_or_why(gpu, None if roofline is None else roofline.model)
    if isinstance(target, str):
        typer.echo(f"note: {out} does not record the GPU and model it was fitted on ({target}"
                   "): it cannot be checked where it is used", err=True)
    else:
        extra.update(fitted_on_extra(fit.model, target, {}))
    save_cost_model(fit.model, out, extra=extra)
    _print_report(profile, fit, roofline, roofline_points)
    typer.echo(f"wrote {out}")
    return fit


ModelConfigOpt = Annotated[Path, typer.Option(
    "--model", help="Hugging Face style config.json, or a directory holding one (random "
    "weights are used)")]
ProfileOutOpt = Annotated[Path, typer.Option("--out", help="profile table: FILE.csv or "
                                             "FILE.parquet (plus FILE.meta.json)")]
DtypeOpt = Annotated[str, typer.Option(help="bf16, fp16 or fp32")]
DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA if available), cpu or cuda")]
PrefillTokensOpt = Annotated[str | None, typer.Option(
    "--prefill-tokens", help="comma-separated prompt lengths of the prefill points "
    "[default: 64,128,256,512,1024,2048,4096]")]
BatchSizesOpt = Annotated[str | None, typer.Option(
    "--batch-sizes", help="comma-separated decode batch sizes [default: 1,4,16,64]")]
ContextLengthsOpt = Annotated[str | None, typer.Option(
    "--context-lengths", help="comma-separated decode context lengths "
    "[default: 128,512,2048]")]
RepeatsOpt = Annotated[int, typer.Option(help="timed runs per grid point")]
WarmupOpt = Annotated[int, typer.Option(help="untimed runs before them")]
ThreadsOpt = Annotated[int | None, typer.Option(
    help="torch CPU threads (default: torch's choice)")]
AttnOpt = Annotated[str, typer.Option(
    "--attn-implementation", help="transformers attention kernel")]
SeedOpt = Annotated[int, typer.Option(help="seed of the random weights and tokens")]
FitOutOpt = Annotated[Path | None, typer.Option(
    "--fit-out", help="also fit and write a cost-model JSON for simulate --cost-model")]
RooflineGpuOpt = Annotated[str | None, typer.Option(
    help="with --fit-out: compare a roofline preset for this GPU")]
ModelPresetOpt = Annotated[str | None, typer.Option(
    "--model-preset", help="with --gpu: the roofline's model preset "
    "[default: the profiled model's shape]")]
TimeLimitOpt = Annotated[float | None, typer.Option(
    "--time-limit-s", help="stop after the grid point that passes this many seconds "
    "(the table keeps the points measured)")]
ProgressOpt = Annotated[bool, typer.Option(help="show a progress bar")]


def profile_cmd(
    model: ModelConfigOpt,
    out: ProfileOutOpt,
    dtype: DtypeOpt = "bf16",
    device: DeviceOpt = "auto",
    prefill_tokens: PrefillTokensOpt = None,
    batch_sizes: BatchSizesOpt = None,
    context_lengths: ContextLengthsOpt = None,
    repeats: RepeatsOpt = 5,
    warmup: WarmupOpt = 2,
    threads: ThreadsOpt = None,
    attn_implementation: AttnOpt = "sdpa",
    seed: SeedOpt = 0,
    fit_out: FitOutOpt = None,
    gpu: RooflineGpuOpt = None,
    model_preset: ModelPresetOpt = None,
    time_limit_s: TimeLimitOpt = None,
    progress: ProgressOpt = True,
) -> None:
    """Time prefill and decode steps of a model on this machine (needs kvbudget[profile])."""
    with user_errors():
        check_out_file(out)
        check_out_file(fit_out, "--fit-out")
        grid = _profile_grid(prefill_tokens, batch_sizes, context_lengths, repeats=repeats,
                             warmup=warmup)
        table_format(out)
        if not out.parent.is_dir():
            raise CliError(f"{out}: directory {out.parent} does not exist")
        if fit_out is not None and fit_out.suffix.lower() != ".json":
            raise CliError(f"{fit_out}: the cost-model file must end in .json")
        if gpu is None and model_preset is not None:
            raise CliError("--model-preset needs --gpu as well")
        run = start_profile(model, grid, dtype=dtype, device=device,
                            attn_implementation=attn_implementation, num_threads=threads,
                            seed=seed)
    hw = run.meta["hardware"]
    typer.echo(f"profiling {run.meta['model']['architecture']} "
               f"({run.meta['model']['num_params']:,} parameters, {dtype}) on "
               f"{hw.get('gpu_name') or hw['cpu_model']}: {run.num_points} grid points",
               err=True)
    rows = _measure_with_bar(run, out, progress=progress, time_limit_s=time_limit_s)
    _print_measured(run, rows, out)
    if not rows:
        raise fail("no grid point could be measured", 1)
    profile = rows_to_profile(rows, run.meta)
    if fit_out is not None:
        with user_errors():
            fit_profile_to_file(profile, fit_out, gpu=gpu, model=model_preset,
                                profile_path=out)


def _profile_grid(prefill_tokens: str | None, batch_sizes: str | None,
                  context_lengths: str | None, *, repeats: int, warmup: int) -> ProfileGrid:
    """The grid of ``kvbudget profile``: the lists given, else the defaults."""
    defaults = ProfileGrid()
    return ProfileGrid(
        prefill_tokens=_int_list("--prefill-tokens", prefill_tokens)
        or defaults.prefill_tokens,
        batch_sizes=_int_list("--batch-sizes", batch_sizes) or defaults.batch_sizes,
        context_lengths=_int_list("--context-lengths", context_lengths)
        or defaults.context_lengths,
        repeats=repeats, warmup=warmup,
    )


def _measure_with_bar(run: ProfileRun, out: Path, *, progress: bool,
                      time_limit_s: float | None) -> list[dict[str, Any]]:
    """:func:`~kvbudget.live.profiler.measure_to_file` with a progress bar; an interruption
    says how many points the table kept."""
    from tqdm import tqdm

    bar = tqdm(total=run.num_points, desc="profile", unit="point", disable=not progress,
               file=sys.stderr)
    measured: list[dict[str, Any]] = []

    def on_row(row: dict[str, Any]) -> None:
        measured.append(row)
        bar.update()

    try:
        rows = measure_to_file(run, out, on_row=on_row, time_limit_s=time_limit_s)
    except BaseException:
        bar.close()
        if measured:
            print(f"profile interrupted: wrote the {len(measured)} points measured so far "
                  f"to {out}", file=sys.stderr)
        raise
    bar.close()
    return rows


def _print_measured(run: ProfileRun, rows: list[dict[str, Any]], out: Path) -> None:
    """The points skipped, why the profile stopped (when it did) and what was written."""
    for skipped in run.meta["skipped"]:
        typer.echo(f"skipped {skipped['point_class']} batch={skipped['batch_size']} "
                   f"seq_len={skipped['seq_len']}: {skipped['reason']}", err=True)
    if "stopped" in run.meta:
        typer.echo(f"stopped: {run.meta['stopped']}", err=True)
    typer.echo(f"wrote {out} ({len(rows)} points) and {sidecar_path(out)}")


def profile_fit_cmd(
    profile_path: Annotated[Path, typer.Argument(
        metavar="PROFILE", help="profile table written by kvbudget profile")],
    out: Annotated[Path, typer.Option("--out", help="cost-model JSON to write")],
    gpu: Annotated[str | None, typer.Option(
        help="compare the roofline preset of this GPU against the measured points")] = None,
    model: Annotated[str | None, typer.Option(
        help="with --gpu: the roofline's model preset "
        "[default: the profiled model's shape from the sidecar]")] = None,
) -> None:
    """Fit the linear cost model to a profile; write a file for simulate --cost-model."""
    with user_errors():
        check_out_file(out)
        profile = read_profile(profile_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fit_profile_to_file(profile, out, gpu=gpu, model=model, profile_path=profile_path)


def register(app: typer.Typer) -> None:
    app.command("profile")(profile_cmd)
    app.command("profile-fit")(profile_fit_cmd)
