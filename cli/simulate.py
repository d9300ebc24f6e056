"""``kvbudget simulate``, ``compare`` and ``presets``."""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.cli.errors import CliError, user_errors

if TYPE_CHECKING:
    from kvbudget.results.run_result import RunResult
    from kvbudget.simulator.scenario import Scenario


ScenarioOpt = Annotated[
    Path | None, typer.Option("--scenario", help="A TOML scenario file (see docs/scenarios.md).")
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a scenario field: key=value (dotted, repeatable)."),
]
GpuOpt = Annotated[str | None, typer.Option("--gpu", help="GPU preset (kvbudget presets).")]
ModelOpt = Annotated[str | None, typer.Option("--model", help="Model preset.")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed of every random draw.")]
TraceOpt = Annotated[
    Path | None, typer.Option("--trace", help="Replay a trace file instead of the scenario's.")
]
FormatOpt = Annotated[
    str | None, typer.Option("--format", help="Trace format (auto-detected by default).")
]
CostOpt = Annotated[
    Path | None,
    typer.Option("--cost-model", help="A cost-model JSON file (kvbudget calibrate/profile)."),
]
BlocksOpt = Annotated[
    int | None, typer.Option("--num-gpu-blocks", help="KV blocks (overrides the presets).")
]
BlockSizeOpt = Annotated[int | None, typer.Option("--block-size", help="Tokens per KV block.")]
SeqsOpt = Annotated[int | None, typer.Option("--max-num-seqs", help="Running requests cap.")]
BatchedOpt = Annotated[
    int | None, typer.Option("--max-num-batched-tokens", help="Tokens per engine step cap.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
EngineOpt = Annotated[
    str | None,
    typer.Option("--engine", help="Engine behaviour: vllm, vllm-swap, tgi, sglang or trtllm."),
]


def build_scenario(
    *,
    scenario: Path | None,
    overrides: list[str] | None,
    policy: str | None = None,
    gpu: str | None = None,
    model: str | None = None,
    seed: int | None = None,
    trace: Path | None = None,
    trace_format: str | None = None,
    cost_model: Path | None = None,
    num_gpu_blocks: int | None = None,
    block_size: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    engine: str | None = None,
) -> "Scenario":
    """The scenario file (or the embedded default) with the command-line flags applied."""
    import tomllib

    from kvbudget.simulator.scenario import default_scenario_dict, scenario_from_dict

    if scenario is not None:
        try:
            data: dict[str, Any] = tomllib.loads(scenario.read_text())
        except FileNotFoundError:
            raise CliError(f"{scenario}: no such scenario file") from None
        except tomllib.TOMLDecodeError as exc:
            raise CliError(f"{scenario}: not valid TOML ({exc})") from None
        base = scenario.resolve().parent
    else:
        data = default_scenario_dict(workload=trace is None)
        base = Path.cwd()
    if policy is not None and policy != data.get("policy"):
        data["policy"] = policy
        data["policy_params"] = {}
    flags: list[str] = []
    for key, value in (("gpu", gpu), ("model", model), ("seed", seed)):
        if value is not None:
            flags.append(f"{key}={json.dumps(value)}")
    for key, ivalue in (
        ("num_gpu_blocks", num_gpu_blocks),
        ("block_size", block_size),
        ("max_num_seqs", max_num_seqs),
        ("max_num_batched_tokens", max_num_batched_tokens),
    ):
        if ivalue is not None:
            flags.append(f"engine.{key}={ivalue}")
    if engine is not None:
        flags.append(f"engine.name={json.dumps(engine)}")
    if cost_model is not None:
        flags.append(f"cost_model={json.dumps(str(cost_model.resolve()))}")
    if trace is not None:
        if not trace.exists():
            raise CliError(f"{trace}: no such trace file")
        data["workload"] = {"kind": "trace", "path": str(trace.resolve())}
        if trace_format is not None:
            data["workload"]["format"] = trace_format
    try:
        return scenario_from_dict(data, base, [*(overrides or []), *flags])
    except ValueError as exc:
        where = f"{scenario}: " if scenario is not None else ""
        raise CliError(f"{where}{exc}") from None


class _NoBar:
    """A progress bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, desc: str) -> Any:
    # tqdm's disable=None hides the bar when stderr is not a terminal: decide that here and
    # skip importing tqdm (and its multiprocessing lock) for piped and scripted runs
    isatty = getattr(sys.stderr, "isatty", None)
    if isatty is not None and not isatty():
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="req", leave=False, disable=None)


def _check_engine(engine: str | None) -> None:
    from kvbudget.simulator.engine_config import ENGINE_NAMES

    if engine is not None and engine not in ENGINE_NAMES:
        raise CliError(f"--engine: unknown engine {engine!r}; known: {', '.join(ENGINE_NAMES)}")


def run_one(scn: "Scenario", policy_name: str | None, label: str) -> "RunResult":
    from kvbudget.simulator.run import simulate

    workload = scn.workload()
    policy = scn.make_policy(policy_name)
    config = scn.sim_config()
    bar = _progress(len(workload), label)
    try:
        return simulate(workload, policy, config, progress=bar.update)
    finally:
        bar.close()


def simulate_cmd(
    policy: Annotated[str | None, typer.Option("--policy", help="Admission policy.")] = None,
    gpu: GpuOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write requests/timeline parquet + summary.json.")
    ] = None,
    scenario: ScenarioOpt = None,
    overrides: SetOpt = None,
    trace: TraceOpt = None,
    trace_format: FormatOpt = None,
    cost_model: CostOpt = None,
    num_gpu_blocks: BlocksOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: SeqsOpt = None,
    max_num_batched_tokens: BatchedOpt = None,
    engine: EngineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate one policy on a scenario (the embedded default when none is given)."""
    from kvbudget.cli.tables import render_summaries

    with user_errors():
        _check_engine(engine)
        scn = build_scenario(
            scenario=scenario, overrides=overrides, policy=policy, gpu=gpu, model=model,
            seed=seed, trace=trace, trace_format=trace_format, cost_model=cost_model,
            num_gpu_blocks=num_gpu_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            engine=engine,
        )
        result = run_one(scn, None, scn.spec.policy)
        if out is not None:
            result.write(out)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
    else:
        typer.echo(render_summaries([result.summary]))
        if out is not None:
            typer.echo(f"wrote {out}/requests.parquet, timeline.parquet, summary.json")


def compare_cmd(
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policy names.")
    ] = "unlimited,conservative,overcommit,preemptive",
    gpu: GpuOpt = None,
    model: ModelOpt = None,
    seed: SeedOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write one run directory per policy here.")
    ] = None,
    scenario: ScenarioOpt = None,
    overrides: SetOpt = None,
    trace: TraceOpt = None,
    trace_format: FormatOpt = None,
    cost_model: CostOpt = None,
    num_gpu_blocks: BlocksOpt = None,
    block_size: BlockSizeOpt = None,
    max_num_seqs: SeqsOpt = None,
    max_num_batched_tokens: BatchedOpt = None,
    engine: EngineOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the same workload and seed under each policy and print them side by side."""
    from kvbudget.cli.tables import render_summaries
    from kvbudget.policies import POLICIES

    names = [p.strip() for p in policies.split(",") if p.strip()]
    with user_errors():
        _check_engine(engine)
        if not names:
            raise CliError("--policies: give at least one policy name")
        for name in names:
            if name not in POLICIES:
                raise CliError(
                    f"--policies: unknown policy {name!r}; known policies: {', '.join(POLICIES)}"
                )
        scn = build_scenario(
            scenario=scenario, overrides=overrides, gpu=gpu, model=model, seed=seed,
            trace=trace, trace_format=trace_format, cost_model=cost_model,
            num_gpu_blocks=num_gpu_blocks, block_size=block_size, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            engine=engine,
        )
        summaries = []
        for name in names:
            result = run_one(scn, name, name)
            summaries.append(result.summary)
            if out is not None:
                result.write(out / name)
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
    else:
        typer.echo(render_summaries(summaries))


def presets_cmd() -> None:
    """List the GPU and model presets with their KV capacity."""
    from kvbudget.cli.tables import render
    from kvbudget.perf.hardware import GPUS
    from kvbudget.perf.kv_capacity import num_gpu_blocks
    from kvbudget.perf.models import MODELS

    typer.echo(render(
        ("GPU", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "PCIe GB/s"),
        [[g.name, g.memory_bytes / 2**30, g.hbm_bandwidth_bytes_s / 1e12, g.bf16_flops / 1e12,
          g.pcie_bandwidth_bytes_s / 1e9] for g in GPUS.values()],
    ))
    typer.echo("")
    typer.echo(render(
        ("model", "layers", "hidden", "heads", "kv heads", "TP", "params B", "KV KiB/token"),
        [[m.name, m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.tensor_parallel,
          m.num_params / 1e9, m.kv_bytes_per_token / 1024] for m in MODELS.values()],
    ))
    typer.echo("")
    rows = []
    for m in MODELS.values():
        row: list[Any] = [m.name]
        for g in GPUS.values():
            try:
                row.append(num_gpu_blocks(g, m) * 16)
            except ValueError:
                row.append(None)
        rows.append(row)
    typer.echo("KV capacity in tokens (gpu_memory_utilization 0.9, block_size 16; - = does not fit):")
    typer.echo(render(("model", *GPUS), rows))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
    app.command("compare")(compare_cmd)
    app.command("presets")(presets_cmd)
