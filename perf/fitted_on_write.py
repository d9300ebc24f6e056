"""The ``fitted_on`` block a fit writes into its cost-model file, and the target a command that
measured a server can name (:mod:`kvbudget.perf.fitted_on` reads the block back and checks a
file against its use).

Kept apart from the reading side: the block records the SHA-256 of the model's ``config.json``
(``hashlib``, whose OpenSSL start-up is ~11 M instructions), which only the fitting commands
(``calibrate``, ``profile --fit-out``, the live calibration) need; ``kvbudget simulate`` loads
and checks files without it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kvbudget.perf.cost_model import CostModel, model_config
from kvbudget.perf.fitted_on import TRANSFERABLE_VLLM, FitTarget, gpu_figures
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import ModelSpec, get_model, is_preset, resolve_model_name
from kvbudget.perf.step_time import VllmStepModel

__all__ = ["fitted_on_extra", "fitted_on_gpu_extra", "target_or_why"]


def _model_block(model: ModelSpec) -> dict[str, Any]:
    block: dict[str, Any] = {"name": model.name, "config": model_config(model),
                             "preset": is_preset(model.name)}
    source = Path(model.source) if model.source else None
    if not block["preset"] and source is not None and source.is_file():
        block["config_path"] = str(source.resolve())
        block["config_sha256"] = hashlib.sha256(source.read_bytes()).hexdigest()
    return block


def fitted_on_extra(model: CostModel, target: FitTarget,
                    engine: dict[str, Any]) -> dict[str, Any]:
    """The ``fitted_on`` and ``transferable`` entries of a file of ``model`` fitted on
    ``target`` with the engine knobs ``engine``."""
    return {
        "fitted_on": {
            "gpu": {"name": target.gpu.name, "figures": gpu_figures(target.gpu)},
            "model": _model_block(target.model),
            "tensor_parallel_size": target.tensor_parallel_size,
            "expert_parallel_size": target.expert_parallel_size,
            "kv_cache_dtype": target.kv_cache_dtype,
            "weight_dtype": target.model.weight_dtype,
            "engine": {k: v for k, v in engine.items()
                       if v is None or isinstance(v, str | int | float | bool)},
        },
        "transferable": list(TRANSFERABLE_VLLM) if isinstance(model, VllmStepModel) else [],
    }


def fitted_on_gpu_extra(gpu: str, served: str, *, tensor_parallel_size: int = 1,
                        kv_cache_dtype: str = "auto") -> dict[str, Any]:
    """The ``fitted_on`` entry of a file fitted to a served model kvbudget does not bundle:
    the GPU (``gpu`` a preset name or a GPU file), the parallelism and the KV dtype, which
    every loader checks (:func:`kvbudget.perf.fitted_on.read_fitted_gpu`), and the model by
    the name it was served as (its shapes are not known: it cannot be checked)."""
    spec = get_gpu(gpu)
    return {
        "fitted_on": {
            "gpu": {"name": spec.name, "figures": gpu_figures(spec)},
            "model": {"served": served, "preset": False},
            "tensor_parallel_size": tensor_parallel_size,
            "expert_parallel_size": 1,
            "kv_cache_dtype": kv_cache_dtype,
            "engine": {},
        },
        "transferable": [],
    }


def target_or_why(gpu: str | None, model: ModelSpec | str | None, *,
                  tensor_parallel_size: int = 1, kv_cache_dtype: str = "auto",
                  flags: str = "--gpu") -> FitTarget | str:
    """The fit target a command that measured a server can name (``gpu`` a preset name,
    ``model`` a spec or a name as a server serves it), or why it cannot (one line, for a
    note): the file it writes then does not record what it was fitted on."""
    if gpu is None:
        return f"the GPU is not given ({flags})"
    if isinstance(model, str):
        name = resolve_model_name(model)
        if name is None:
            return f"the served model {model!r} is not a bundled preset"
        model = get_model(name)
    if model is None:
        return "the model is not known"
    return FitTarget(get_gpu(gpu), model, tensor_parallel_size, 1, kv_cache_dtype)
