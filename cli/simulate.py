"""``kvbudget simulate``, ``compare`` and ``presets``."""

import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvbudget.analysis.conclusion import conclude
from kvbudget.cli.errors import CliError, check_out_dir, user_errors
from kvbudget.cli.options import (
    MAX_REPLICATIONS,
    AddressOpt,
    ExecutorOpt,
    JobsOpt,
    ScenarioArgs,
    with_scenario_options,
)
from kvbudget.cli.progress import Bar
from kvbudget.cli.tables import WIDTH, render, render_comparison, render_summaries
from kvbudget.perf.hardware import GPU_ALIASES, GPUS
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import bundled_models
from kvbudget.policies import POLICIES
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import make_scenario
from kvbudget.studies.compare import compare
from kvbudget.studies.executors import EXECUTORS, make_executor

if TYPE_CHECKING:
    from kvbudget.results.run_result import RunResult
    from kvbudget.simulator.scenario import Scenario


SeedOpt = Annotated[int | None, typer.Option("--seed", help="Seed of every random draw.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
WideOpt = Annotated[bool, typer.Option(
    "--wide", help=f"Every column (tables fit {WIDTH} columns by default).")]


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
    """The scenario file (or the embedded default) with the command-line flags applied
    (:func:`kvbudget.simulator.scenario.make_scenario`; errors as :class:`CliError`)."""
    knobs = {"num_gpu_blocks": num_gpu_blocks, "block_size": block_size,
             "max_num_seqs": max_num_seqs, "max_num_batched_tokens": max_num_batched_tokens,
             "name": engine}
    try:
        return make_scenario(scenario, overrides or (), policy=policy, gpu=gpu, model=model,
                             seed=seed, trace=trace, trace_format=trace_format,
                             cost_model=cost_model, engine=knobs)
    except (ValueError, FileNotFoundError) as exc:
        raise CliError(str(exc)) from None


SIMULATE_LINES_FROM = 100_000
"""Requests from which a ``simulate`` not at a terminal writes progress lines (cli.progress)."""


def run_one(scn: "Scenario", policy_name: str | None, label: str) -> "RunResult":
    workload = scn.workload()
    policy = scn.make_policy(policy_name)
    config = scn.sim_config()
    # at a terminal tqdm's bar; elsewhere silent, except a run of at least SIMULATE_LINES_FROM
    # requests, which writes a line every half minute
    bar = Bar(label, len(workload), "req", lines_from=SIMULATE_LINES_FROM)
    try:
        return simulate(workload, policy, config, progress=bar.update)
    finally:
        bar.close()


@with_scenario_options
def simulate_cmd(
    setup: ScenarioArgs,
    policy: Annotated[str | None, typer.Option("--policy", help="Admission policy.")] = None,
    seed: SeedOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write requests/timeline parquet + summary.json.")
    ] = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Simulate one policy on a scenario (the embedded default when none is given)."""
    with user_errors():
        check_out_dir(out)
        scn = setup.build(policy=policy, seed=seed)
        result = run_one(scn, None, f"simulate {scn.spec.policy}")
        if out is not None:
            result.write(out)
    if as_json:
        typer.echo(json.dumps(result.summary, indent=2))
    else:
        targets = {t.name: (t.ttft_s, t.tpot_s) for t in scn.tiers()}
        typer.echo(render_summaries([result.summary], wide=wide, slo_targets=targets))
        if out is not None:
            typer.echo(f"wrote {out}/requests.parquet, timeline.parquet, summary.json")


def _check_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise CliError("--policies: give at least one policy name")
    for name in names:
        if name not in POLICIES:
            raise CliError(
                f"--policies: unknown policy {name!r}; known policies: {', '.join(POLICIES)}"
            )
    return names


def _check_executor(executor: str, address: str | None, jobs: int | None,
                    replications: int) -> None:
    """``--executor``, ``--address`` and ``--jobs`` checked whatever the replications; with
    one replication the runs go in this process, so any of them given is refused, not
    ignored."""
    if executor not in EXECUTORS:
        raise CliError(f"--executor: unknown executor {executor!r}; choose one of: "
                       f"{', '.join(EXECUTORS)}")
    if address is not None and executor != "ray":
        raise CliError("--address: applies to --executor ray only")
    if replications == 1:
        given = [flag for flag, on in (("--executor", executor != "local"),
                                       ("--address", address is not None),
                                       ("--jobs", jobs is not None)) if on]
        if given:
            raise CliError(f"{', '.join(given)}: one replication runs each policy once in "
                           "this process; give --replications N (N > 1) to run on an executor")


@with_scenario_options
def compare_cmd(
    setup: ScenarioArgs,
    policies: Annotated[
        str, typer.Option("--policies", help="Comma-separated policy names (the first is the "
                          "baseline of the paired tests).")
    ] = "unlimited,conservative,overcommit,preemptive",
    seed: SeedOpt = None,
    replications: Annotated[int, typer.Option(
        "--replications", "-r", min=1, max=MAX_REPLICATIONS,
        help="Seeds per policy (common random numbers); above "
        "1: means with intervals and paired tests against the first policy.")] = 1,
    confidence: Annotated[float, typer.Option(
        "--confidence", min=0.5, max=0.999, help="Level of the intervals.")] = 0.95,
    metric: Annotated[list[str] | None, typer.Option(
        "--metric", help="A metric of the replicated table (column or dotted summary path, "
        "e.g. tiers.interactive.ttft_s.p99; repeatable; default: per tier p99 TTFT/TPOT, "
        "tokens/s, SLO attainment, and the drain time).")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write one run directory per policy here "
                                  "(with --replications: runs.parquet and compare.csv).")
    ] = None,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    jobs: JobsOpt = None,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Run the same workload and seed under each policy and print them side by side."""
    with user_errors():
        names = _check_policies(policies)
        _check_executor(executor, address, jobs, replications)
        check_out_dir(out)
        scn = setup.build(seed=seed)
        if replications == 1:
            result = compare(scn, names, metrics=metric)
            if out is not None:
                for name, run in zip(names, result.results, strict=True):
                    run.write(out / name)
        else:
            bar = Bar("compare", len(names) * replications, "run", lines_from=1)
            try:
                with make_executor(executor, jobs=jobs, address=address) as ex:
                    result = compare(scn, names, replications=replications, root_seed=seed,
                                     metrics=metric, confidence=confidence, executor=ex,
                                     progress=bar.update)
            finally:
                bar.close()
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                result.runs.to_parquet(out / "runs.parquet", index=False)
                result.table.to_csv(out / "compare.csv", index=False)
    if as_json:
        if replications == 1:
            typer.echo(json.dumps(result.summaries(), indent=2))
        else:
            typer.echo(result.table.to_json(orient="records", indent=2))
    elif replications == 1:
        summaries = result.summaries()
        targets = {t.name: (t.ttft_s, t.tpot_s) for t in scn.tiers()}
        typer.echo(render_summaries(summaries, wide=wide, slo_targets=targets,
                                    conclusion=conclude(summaries)))
    else:
        typer.echo(render_comparison(result, wide=wide))
        if out is not None:
            typer.echo(f"wrote {out}/runs.parquet, compare.csv")


def presets_cmd() -> None:
    """List the GPU and model presets, vLLM's engine defaults per GPU and the KV capacity."""
    engines = {name: EngineConfig().resolved(g) for name, g in GPUS.items()}
    typer.echo(render(
        ("GPU", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "link", "link GB/s",
         "max_num_seqs", "max_num_batched_tokens"),
        [[g.name, g.memory_bytes / 2**30, g.hbm_bandwidth_bytes_s / 1e12, g.bf16_flops / 1e12,
          (g.fp8_flops or 0) / 1e12, g.interconnect, g.link_bandwidth_bytes_s / 1e9,
          engines[g.name].max_num_seqs, engines[g.name].max_num_batched_tokens]
         for g in GPUS.values()],
    ))
    typer.echo("aliases: " + ", ".join(f"{a} = {n}" for a, n in GPU_ALIASES.items())
               + "; --gpu also takes a JSON/TOML file of these figures (docs/fidelity.md)")
    typer.echo("engine defaults (vLLM 0.33 `vllm serve`): the two right-hand columns, "
               "gpu_memory_utilization 0.92, prefix caching on, block_size 16; "
               "--engine-defaults kvbudget-0.1 for 256 / 8192 / 0.9 / off")
    typer.echo("")
    models = bundled_models()
    typer.echo("Models (bundled Hugging Face configs; --model also takes a config.json path):")
    typer.echo(render(
        ("model", "type", "layers", "kv heads", "weights", "params B", "active B",
         "KV KiB/token"),
        [[m.name, m.model_type, m.num_layers, m.num_kv_heads if m.mla is None else "MLA",
          m.weight_dtype, m.num_params / 1e9, m.num_active_params / 1e9,
          m.kv_bytes_per_token() / 1024] for m in models.values()],
    ))
    typer.echo(textwrap.fill(
        "active: the parameters a token computes with (the input embedding table and the "
        "experts it is not routed to left out); KV per GPU at TP 1, kv_cache_dtype auto.", WIDTH))
    typer.echo("")
    rows = []
    for m in models.values():
        row: list[Any] = [m.name]
        for name, g in GPUS.items():
            e = engines[name]
            try:
                row.append(num_gpu_blocks(
                    g, m, gpu_memory_utilization=e.memory_utilization,
                    max_num_batched_tokens=e.batched_tokens_limit, max_num_seqs=e.seqs_limit,
                ) * 16)
            except ValueError:
                row.append(None)
        rows.append(row)
    typer.echo("KV capacity in tokens on one GPU (tensor_parallel_size 1) with vLLM's defaults "
               "(- = does not fit):")
    typer.echo(render(("model", *GPUS), rows))


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
    app.command("compare")(compare_cmd)
    app.command("presets")(presets_cmd)
