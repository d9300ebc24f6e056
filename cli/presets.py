"""``kvbudget presets``: the GPU and model presets, vLLM's engine defaults and KV capacity."""

import textwrap
from typing import Any

import typer

from kvbudget.cli.tables import render, render_fitting
from kvbudget.perf.hardware import GPU_ALIASES, GPUS
from kvbudget.perf.kv_capacity import (
    check_holds_max_model_len,
    num_gpu_blocks,
    sliding_model_short_of_max_model_len,
)
from kvbudget.perf.models import bundled_models
from kvbudget.perf.vllm_defaults import VLLM_VERSION
from kvbudget.results.said import WIDTH
from kvbudget.simulator.engine_config import EngineConfig


def presets_cmd() -> None:
    """List the GPU and model presets, vLLM's engine defaults per GPU and the KV capacity."""
    engines = {name: EngineConfig().resolved(g) for name, g in GPUS.items()}
    typer.echo(render(
        ("GPU", "memory GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "link", "link GB/s"),
        [[g.name, g.memory_bytes / 2**30, g.hbm_bandwidth_bytes_s / 1e12, g.bf16_flops / 1e12,
          None if g.fp8_flops is None else g.fp8_flops / 1e12, g.interconnect,
          g.link_bandwidth_bytes_s / 1e9] for g in GPUS.values()],
    ))
    _notes("FP8 -: no FP8 tensor cores; an FP8 model's matrix work is priced at the 16-bit rate "
           "there (vLLM runs its FP8 weights with a weight-only kernel)",
           "aliases: " + ", ".join(f"{a}\xa0=\xa0{n}" for a, n in GPU_ALIASES.items())
           + "; --gpu also takes a JSON/TOML file of these figures (docs/fidelity.md)")
    typer.echo("")
    typer.echo(f"Engine defaults per GPU (vLLM {VLLM_VERSION} `vllm serve`):")
    typer.echo(render(
        ("GPU", "max_num_seqs", "max_num_batched_tokens"),
        [[name, e.max_num_seqs, e.max_num_batched_tokens] for name, e in engines.items()],
    ))
    _notes(_defaults_note(engines))
    typer.echo("")
    models = bundled_models()
    typer.echo("Models (bundled Hugging Face configs; --model also takes a config.json path):")
    typer.echo(render(
        ("model", "type", "layers", "kv heads", "weights", "params B", "active B",
         "KV KiB/token", "context"),
        [[m.name, m.model_type, m.num_layers, m.num_kv_heads if m.mla is None else "MLA",
          m.weight_dtype, m.num_params / 1e9, m.num_active_params / 1e9,
          f"{m.kv_bytes_per_token() / 1024:,.1f}", m.max_position_embeddings]
         for m in models.values()],
    ))
    typer.echo(textwrap.fill(
        "active: the parameters a token computes with (the input embedding table and the "
        "experts it is not routed to left out); KV per GPU at TP 1, kv_cache_dtype auto; "
        "context: max_position_embeddings, vLLM's default max_model_len.", WIDTH))
    typer.echo("")
    rows = []
    for m in models.values():
        row: list[Any] = [m.name]
        for name, g in GPUS.items():
            e = engines[name]
            try:
                blocks = num_gpu_blocks(
                    g, m, gpu_memory_utilization=e.memory_utilization,
                    max_num_batched_tokens=e.batched_tokens_limit, max_num_seqs=e.seqs_limit)
            except ValueError:
                row.append(None)
                continue
            try:
                check_holds_max_model_len(m, g, blocks, 16, m.max_position_embeddings,
                                          given=False)
                short = sliding_model_short_of_max_model_len(
                    m, blocks, 16, m.max_position_embeddings, e.batched_tokens_limit)
                row.append(f"{blocks * 16:,}!" if short else blocks * 16)
            except ValueError:
                row.append(f"{blocks * 16:,}*")
        rows.append(row)
    typer.echo("KV capacity in tokens on one GPU (tensor_parallel_size 1) with vLLM's defaults "
               "(- = does not fit):")
    typer.echo(render_fitting(("model", *GPUS), rows))
    typer.echo(textwrap.fill(
        "*: less than one request at the model's context needs: vLLM refuses to start at its "
        "default max_model_len, and so does simulate; give your server's, --set "
        "engine.max_model_len=N. !: a model with sliding-window layers (its KV counted here "
        "for every layer) whose KV memory is short of one request at its context, its "
        "sliding-window layers holding only their window: vLLM refuses to start there too, "
        "but simulate does not check these models (docs/fidelity.md); give your server's "
        "max_model_len.", WIDTH))


def _notes(*lines: str) -> None:
    for line in lines:
        # an alias and its name on one line ("A100 = A100-80GB", not "A100 =\n  A100-80GB")
        typer.echo(textwrap.fill(line, WIDTH, subsequent_indent="  ",
                                 break_on_hyphens=False).replace("\xa0", " "))


def register(app: typer.Typer) -> None:
    app.command("presets")(presets_cmd)


def _defaults_note(engines: dict[str, EngineConfig]) -> str:
    """The knobs vLLM's defaults set alike on every GPU (``engines``, each GPU's resolved
    configuration), and kvbudget 0.1's, each knob by its name: the note said 'kvbudget-0.1 for
    256 / 8192 / 0.9 / off', four figures a reader had to match to knobs in another order."""
    def knobs(e: EngineConfig, *names: str) -> str:
        said = {"max_num_seqs": f"max_num_seqs {e.max_num_seqs:,}",
                "max_num_batched_tokens": f"max_num_batched_tokens {e.max_num_batched_tokens:,}",
                "gpu_memory_utilization": f"gpu_memory_utilization {e.memory_utilization:g}",
                "prefix": f"prefix caching {'on' if e.enable_prefix_caching else 'off'}",
                "block_size": f"block_size {e.block_size}"}
        return ", ".join(said[n] for n in names)

    shared = ("gpu_memory_utilization", "prefix", "block_size")
    alike = {knobs(e, *shared) for e in engines.values()}
    assert len(alike) == 1, alike  # the vLLM defaults that are no GPU's own
    old = {knobs(EngineConfig().resolved(g, "kvbudget-0.1"), "max_num_seqs",
                 "max_num_batched_tokens", *shared) for g in GPUS.values()}
    assert len(old) == 1, old  # kvbudget 0.1's are no GPU's
    return (f"and on every GPU {alike.pop()}; --engine-defaults kvbudget-0.1 for "
            f"{old.pop()} on every GPU")
