"""What a cost-model file was fitted on, and the one check every loader makes against it.

A fitted cost model holds for the GPU, model, parallelism and KV dtype it was fitted on. The file
records them in a ``fitted_on`` block (written by
:func:`kvbudget.perf.fitted_on_write.fitted_on_extra`)::

    "fitted_on": {
      "gpu": {"name": "H100-80GB", "figures": {...every GPUSpec field...}},
      "model": {"name": "tiny", "config": {...every ModelSpec field...},
                "config_path": "/abs/tiny/config.json", "config_sha256": "9f2c..."},
      "tensor_parallel_size": 1, "expert_parallel_size": 1,
      "kv_cache_dtype": "auto", "weight_dtype": "bfloat16",
      "engine": {"block_size": 16, "max_num_seqs": 256, "max_num_batched_tokens": 8192, ...}
    },
    "transferable": ["mem_efficiency", ..., "frontend_overhead_s"]

``config`` embeds the model's parsed shapes, so a file fitted on any ``config.json`` loads
anywhere (``config_path`` and ``config_sha256`` say which file it came from).
:func:`load_checked_cost_model` refuses a file fitted on another GPU, model, parallelism or
KV cache element size (the step model prices the KV reads at its own dtype: a 16-bit fit used
with an fp8 cache read twice the bytes that cache holds) with one line naming both, unless asked
to ``transfer``: then only the ``transferable`` parameters are carried, and only to the same
GPU and parallelism (to another KV dtype, priced at the target's).

**What transfers.** :class:`~kvbudget.perf.step_time.VllmStepModel` computes everything that
depends on the model (FLOPs, weight and KV bytes, layer counts) from the
:class:`~kvbudget.perf.models.ModelSpec`; its fitted parameters are what the GPU, its kernels
and the host achieve: fractions of the GPU's bandwidth and peak (``mem_efficiency``,
``kv_mem_efficiency``, ``gemm_efficiency``, ``attention_efficiency``, ``link_efficiency``),
the host's step gap and the per-layer launch costs (``step_overhead_s``, ``layer_overhead_s``,
``moe_layer_overhead_s``), the interconnect's all-reduce latency, and the API server's
per-request cost (``frontend_overhead_s``). All of them carry to another model on the same GPU
at the same tensor and expert parallelism; none carries to another GPU (each is a fraction or a
cost of *that* GPU: the other GPU's own defaults apply) nor to another parallelism (a fit takes
up in its efficiencies what the communication model misses: docs/fidelity.md, "Calibrated from
the recordings", where a TP2 fit's KV-read efficiency is 0.42 against TP1's 0.76). Even on the
same GPU a carried fit is approximate (the same section: moving the fitted parameters between two
models of one GPU took one's errors from -47/-34/-40 % to -31/-19/-24 %, the other's from
-46/-19/-26 % to +56/+23/+32 %), which is why the transfer is asked for, never assumed. A
linear model's coefficients are seconds per token or sequence of one model on one GPU: none
transfers.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from kvbudget.perf.command_flags import in_command, takes
from kvbudget.perf.cost_model import (
    CostFile,
    CostModel,
    model_from_config_block,
    read_cost_file,
)
from kvbudget.perf.fit_said import fit_said
from kvbudget.perf.hardware import GPUS, GPUSpec
from kvbudget.perf.models import PRESET_SOURCE, ModelSpec, is_preset, kv_element_bytes
from kvbudget.perf.step_time import VllmStepModel

TRANSFERABLE_VLLM = (*VllmStepModel.FIT_PARAMETERS, "frontend_overhead_s")
"""The parameters of a ``vllm-v1`` file that carry to another model on the same GPU."""


@dataclass(frozen=True)
class FitTarget:
    """The GPU, model and parallelism a cost model is fitted on or used for."""

    gpu: GPUSpec
    model: ModelSpec
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    kv_cache_dtype: str = "auto"

    def label(self, kv: bool = False) -> str:
        """``GPU / model TPn EPn`` (a preset by its name, a ``config.json`` by its path as
        given: :func:`model_said`); with ``kv``, the KV cache's dtype too."""
        return (f"{self.gpu.name} / {model_said(self.model)} TP{self.tensor_parallel_size} "
                f"EP{self.expert_parallel_size}"
                + (f", KV cache {self.kv_cache_dtype}" if kv else ""))

    def kv_element_bytes(self) -> int:
        """Bytes of one KV element, as the step model reads the cache (``auto``: the
        model's dtype; fp8 and its variants alike)."""
        return kv_element_bytes(self.kv_cache_dtype, self.model.dtype_bytes)


def model_said(model: ModelSpec) -> str:
    """A model as the user gave it: a bundled preset by its name; one read from a
    ``config.json`` by that file's path (its ``source``), not the name kvbudget gave it
    (the folder's: 'fitted on H100-SXM / model TP1 EP1' of ``--model path/model/config.json``)."""
    source = model.source
    if not source or source.startswith(PRESET_SOURCE):
        return model.name
    return source


@dataclass(frozen=True)
class FittedGpu:
    """What a file fitted to a served model kvbudget does not bundle records: the GPU,
    parallelism and KV dtype, and the model by the name it was served as (no shapes)."""

    gpu: GPUSpec
    served: str
    tensor_parallel_size: int = 1
    expert_parallel_size: int = 1
    kv_cache_dtype: str = "auto"

    def label(self) -> str:
        """``GPU / 'served' TPn EPn``."""
        return (f"{self.gpu.name} / {self.served!r} TP{self.tensor_parallel_size} "
                f"EP{self.expert_parallel_size}")


@dataclass(frozen=True)
class CheckedCostModel:
    """A loaded cost model checked against its use: ``model`` (``None``: nothing carried, the
    default step model applies), its ``frontend_overhead_s`` (``None``: the default front
    end), ``notes`` to print (one line each), and ``warnings``: what its calibration warned
    of, said again wherever it is used (one line)."""

    model: CostModel | None
    frontend_overhead_s: float | None
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def _shapes(model: ModelSpec) -> str:
    """The model's shapes as JSON text (its name and source file left out): two files of the
    same model read alike."""
    shapes = {k: v for k, v in asdict(model).items() if k not in ("name", "source")}
    return json.dumps(shapes, sort_keys=True)


def gpu_figures(gpu: GPUSpec) -> dict[str, Any]:
    """Every field of ``gpu`` by name (the ``figures`` of a ``fitted_on.gpu`` block)."""
    return {f.name: getattr(gpu, f.name) for f in fields(gpu)}


def _same_gpu(a: GPUSpec, b: GPUSpec) -> bool:
    """The same figures (the name aside: a GPU file may copy a preset under its own name; and
    the host memory, which no step time reads and older files do not record)."""
    fa, fb = gpu_figures(a), gpu_figures(b)
    aside = ("name", "host_memory_bytes")
    return {k: v for k, v in fa.items() if k not in aside} == \
        {k: v for k, v in fb.items() if k not in aside}


def read_fitted_on(path: Path, payload: dict[str, Any]) -> FitTarget | None:
    """The target a file records (``None`` for a file from before ``fitted_on``, and for one
    that records the GPU alone: :func:`read_fitted_gpu` reads that)."""
    block = payload.get("fitted_on")
    if block is None:
        return None
    if not isinstance(block, dict):
        raise ValueError(f"{path}: field 'fitted_on' must be an object")
    try:
        gpu, tp, ep, dtype = _deployment(block)
        model_block = block.get("model")
        if not isinstance(model_block, dict):
            raise ValueError("field 'fitted_on.model' must be an object")
        if "config" not in model_block and isinstance(model_block.get("served"), str):
            return None
        model = model_from_config_block(model_block.get("config"), "fitted_on.model.config")
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return FitTarget(gpu, model, tp, ep, dtype)


def read_fitted_gpu(path: Path, payload: dict[str, Any]) -> FittedGpu | None:
    """What a file fitted to a served model kvbudget does not bundle records (``calibrate
    --url --gpu G`` of such a model): its GPU, parallelism, KV dtype and the served model's
    name; ``None`` for any other file."""
    block = payload.get("fitted_on")
    model_block = block.get("model") if isinstance(block, dict) else None
    if not isinstance(model_block, dict) or "config" in model_block \
            or not isinstance(model_block.get("served"), str):
        return None
    try:
        gpu, tp, ep, dtype = _deployment(block)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return FittedGpu(gpu, model_block["served"], tp, ep, dtype)


def _deployment(block: dict[str, Any]) -> tuple[GPUSpec, int, int, str]:
    """The GPU, tensor and expert parallelism and KV dtype of a ``fitted_on`` block."""
    gpu_block = block.get("gpu")
    figures = gpu_block.get("figures") if isinstance(gpu_block, dict) else None
    if not isinstance(figures, dict):
        raise ValueError("field 'fitted_on.gpu.figures' must be an object")
    try:
        gpu = GPUSpec(**figures)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"field 'fitted_on.gpu.figures': {exc}") from None
    ints = []
    for key in ("tensor_parallel_size", "expert_parallel_size"):
        value = block.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"field 'fitted_on.{key}' must be an integer >= 1")
        ints.append(value)
    dtype = block.get("kv_cache_dtype", "auto")
    if not isinstance(dtype, str):
        raise ValueError("field 'fitted_on.kv_cache_dtype' must be a string")
    return gpu, ints[0], ints[1], dtype


def _transferable(path: Path, payload: dict[str, Any]) -> list[str]:
    names = payload.get("transferable", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{path}: field 'transferable' must be a list of parameter names")
    unknown = sorted(set(names) - set(TRANSFERABLE_VLLM))
    if unknown:
        raise ValueError(f"{path}: field 'transferable': unknown parameter {unknown[0]!r}")
    return list(names)


def fitted_for(path: Path, target: FitTarget) -> bool | None:
    """Whether ``path`` was fitted on ``target`` (its GPU, model, parallelism and KV element
    size), so that it is used as it was fitted, not carried (``--cost-model-transfer``); None
    for a file from before ``fitted_on`` (it cannot tell)."""
    fitted = read_fitted_on(path, json.loads(path.read_text()))
    return None if fitted is None else all(_sameness(fitted, target))


def _sameness(fitted: FitTarget, target: FitTarget) -> tuple[bool, bool, bool, bool]:
    """The same (model, GPU, parallelism, KV element size): a step model prices the KV reads
    at its own dtype, so a file fitted at 16-bit KV and used with an fp8 cache would read
    twice the bytes the capacity was sized for."""
    return (_shapes(fitted.model) == _shapes(target.model), _same_gpu(fitted.gpu, target.gpu),
            (fitted.tensor_parallel_size, fitted.expert_parallel_size)
            == (target.tensor_parallel_size, target.expert_parallel_size),
            fitted.kv_element_bytes() == target.kv_element_bytes())


def _own_flags(fitted: FitTarget, payload: dict[str, Any]) -> str:
    """``to use it as it was fitted, ...: --gpu G --model M ...; `` (the flags that
    name the file's own target, where a flag can name it: a preset, or the ``config.json``
    the file records), else ``""``: the user may have meant the file's deployment and left
    the GPU or model to a default (the default scenario's H100-80GB and Llama-3.1-8B)."""
    block = payload.get("fitted_on") or {}
    model_block = block.get("model") if isinstance(block, dict) else None
    config_path = model_block.get("config_path") if isinstance(model_block, dict) else None
    model = fitted.model.name if is_preset(fitted.model.name) else config_path
    if fitted.gpu.name not in GPUS or not isinstance(model, str):
        return ""
    if not in_command():  # a notebook: every command's flags
        flags = [f"--gpu {fitted.gpu.name}", f"--model {model}"]
        if fitted.tensor_parallel_size > 1:
            flags.append(f"--tensor-parallel-size {fitted.tensor_parallel_size}")
        if fitted.expert_parallel_size > 1:
            flags.append("--enable-expert-parallel")
        if fitted.kv_cache_dtype != "auto":
            flags.append(f"--kv-cache-dtype {fitted.kv_cache_dtype}")
        return (f"to use it as it was fitted, simulate its own deployment: {' '.join(flags)} "
                f"(plan: --gpus {fitted.gpu.name}); ")
    wanted: list[tuple[str, str, str | None]] = [
        ("--gpus" if takes("--gpus") else "--gpu", fitted.gpu.name, None), ("--model", model, None)]
    if fitted.tensor_parallel_size > 1:
        wanted.append(("--tensor-parallel-size", str(fitted.tensor_parallel_size),
                       f"engine.tensor_parallel_size={fitted.tensor_parallel_size}"))
    if fitted.expert_parallel_size > 1:
        wanted.append(("--enable-expert-parallel", "", "engine.enable_expert_parallel=true"))
    if fitted.kv_cache_dtype != "auto":
        wanted.append(("--kv-cache-dtype", fitted.kv_cache_dtype,
                       f"engine.kv_cache_dtype={fitted.kv_cache_dtype}"))
    said = []
    for flag, value, setting in wanted:
        if takes(flag):
            said.append(f"{flag} {value}".strip())
        elif setting is not None and takes("--set"):
            said.append(f"--set {setting}")
        else:  # the command cannot name it
            return ""
    return f"to use it as it was fitted, give its own deployment: {' '.join(said)}; "


def _transfer_said() -> str:
    """How the running command asks for the transfer: only what it takes (``validate
    --records`` takes ``--set`` and ``--scenario``, not ``--cost-model-transfer``)."""
    ways = [way for flag, way in (("--cost-model-transfer", "--cost-model-transfer"),
                                  ("--set", "--set cost_model_transfer=true"),
                                  ("--scenario", "a scenario's cost_model_transfer = true"))
            if takes(flag)]
    if not ways:
        return "the command cannot carry it over (simulate --cost-model-transfer can)"
    head, rest = ways[0], ways[1:]
    return (head + (f" (or {'; '.join(rest)})" if rest else "")
            + " carries over only the parameters that transfer")


def load_checked_cost_model(path: Path, target: FitTarget, *,
                            transfer: bool = False) -> CheckedCostModel:
    """Load ``path`` for use on ``target``: as it is when it was fitted on ``target``; a
    ``ValueError`` of one line naming both when not (unless ``transfer``: then the
    ``transferable`` parameters carry to ``target``'s step model on the same GPU and
    parallelism, the rest
    reset to its defaults, and a note says which); with a note when the file does not say what
    it was fitted on (it cannot be checked)."""
    read = read_cost_file(path)  # validates the file, with messages naming the field
    checked = _load_checked(read, target, transfer)
    return replace(checked, warnings=warned_said(path, read.warned),
                   notes=checked.notes + fit_said(path, read.payload))


def warned_said(path: Path, warned: tuple[str, ...]) -> tuple[str, ...]:
    """One line saying what ``path``'s calibration warned of (its ``calibration.warnings``:
    values at a bound of their search or outside their published ranges, which stand for
    something the step model lacks), for every command that uses it; none for a file without."""
    if not warned:
        return ()
    return (f"{path}: its calibration warned: {'; '.join(_head(w) for w in warned)} (the "
            "file's calibration.warnings say why); used as fitted: such a value stands for "
            "something the step model lacks, not for the constant",)


def _head(line: str) -> str:
    """A calibration warning's first clause, its parentheses left out (the value and what it
    passed: ``layer_overhead_s = 0.000198 is outside its published range 3.16e-05 ..
    5.04e-05``; the sources and reasons stay in the file)."""
    out, depth = [], 0
    for i, ch in enumerate(line):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if line.startswith(": ", i):
                break
            out.append(ch)
    return " ".join("".join(out).split())


def _load_checked(read: CostFile, target: FitTarget, transfer: bool) -> CheckedCostModel:
    path, loaded, overhead, payload = read.path, read.model, read.frontend_overhead_s, \
        read.payload
    fitted = read_fitted_on(path, payload)
    gpu_only = read_fitted_gpu(path, payload)
    if gpu_only is not None:
        return _checked_gpu_only(read, gpu_only, target, transfer)
    if fitted is None:
        return CheckedCostModel(loaded, overhead, (
            f"{path} does not record the GPU and model it was fitted on (a file from "
            "calibrate --url or profile without --gpu or of a model kvbudget does not bundle, "
            f"or an older one): cannot check it against {target.label()}",))
    same_model, same_gpu, same_parallel, same_kv = _sameness(fitted, target)
    if same_model and same_gpu and same_parallel and same_kv:
        return CheckedCostModel(loaded, overhead)
    if not transfer:
        raise ValueError(f"{path}: fitted on {fitted.label(not same_kv)}, not "
                         f"{target.label(not same_kv)}; {_own_flags(fitted, payload)}"
                         f"{_transfer_said()}")
    names = _transferable(path, payload) if same_gpu and same_parallel else []
    carried = {n: getattr(loaded, n) for n in names
               if n != "frontend_overhead_s" and isinstance(loaded, VllmStepModel)}
    fit_names = [*VllmStepModel.FIT_PARAMETERS, "frontend_overhead_s"] \
        if isinstance(loaded, VllmStepModel) else sorted(loaded.describe())
    reset = [n for n in fit_names if n not in names and n not in ("kind", "source")]
    why = ("" if names or not isinstance(loaded, VllmStepModel) else
           " (another GPU: none of its parameters transfers)" if not same_gpu else
           " (another parallelism: none of its parameters transfers)")
    if not same_kv and names:
        why = f" (another KV cache dtype: its step times priced at {target.kv_cache_dtype})"
    note = (f"{path}: fitted on {fitted.label(not same_kv)}, used for "
            f"{target.label(not same_kv)}{why}: carried "
            f"{', '.join(names) or 'nothing'}; reset to the defaults: {', '.join(reset) or 'none'}")
    if not names:
        return CheckedCostModel(None, None, (note,))
    base = VllmStepModel(target.gpu, target.model, target.tensor_parallel_size,
                         target.expert_parallel_size, kv_cache_dtype=target.kv_cache_dtype,
                         source=f"{path} carried to {target.label()}")
    return CheckedCostModel(replace(base, **carried),
                            overhead if "frontend_overhead_s" in names else None, (note,))


def _checked_gpu_only(read: CostFile, fitted: FittedGpu, target: FitTarget,
                      transfer: bool) -> CheckedCostModel:
    """A file that records its GPU but not its model's shapes (a served model kvbudget does
    not bundle), checked as far as it can be: another GPU, parallelism or KV dtype refused (or
    with ``transfer``, nothing carried: none of the parameters transfers to another GPU or
    parallelism); the model noted as unchecked."""
    path = read.path
    same_gpu = _same_gpu(fitted.gpu, target.gpu)
    same_parallel = (fitted.tensor_parallel_size, fitted.expert_parallel_size) == \
        (target.tensor_parallel_size, target.expert_parallel_size)
    same_kv = fitted.kv_cache_dtype == target.kv_cache_dtype
    if same_gpu and same_parallel and same_kv:
        return CheckedCostModel(read.model, read.frontend_overhead_s, (
            f"{path}: fitted on {fitted.label()}, a served model kvbudget does not bundle: "
            f"its GPU and parallelism match, its model cannot be checked against "
            f"{target.label()}",))
    if not transfer:
        raise ValueError(f"{path}: fitted on {fitted.label()}, KV cache "
                         f"{fitted.kv_cache_dtype}, not {target.label(True)}; "
                         f"{_transfer_said()}")
    return CheckedCostModel(None, None, (
        f"{path}: fitted on {fitted.label()}, used for {target.label(True)}: carried nothing "
        "(its model's shapes are not recorded, and another GPU, parallelism or KV dtype "
        "takes none of its parameters); the defaults apply",))


def fitted_engine_notes(path: Path, engine: str) -> tuple[str, ...]:
    """A note when ``path`` was fitted with another engine's behaviour than ``engine`` (its
    ``fitted_on.engine.name``; ``vllm`` and ``vllm-swap`` are one server): its fitted values
    are what that server's steps and API server took, and are used as they are."""
    block = json.loads(path.read_text()).get("fitted_on")
    knobs = block.get("engine") if isinstance(block, dict) else None
    name = knobs.get("name") if isinstance(knobs, dict) else None
    if not isinstance(name, str) or name.split("-")[0] == engine.split("-")[0]:
        return ()
    return (f"{path}: fitted with engine {name}, simulated with engine {engine}: its "
            f"parameters and front-end time are what {name}'s steps and API server took, used "
            "as they are",)


def fit_engine_knobs(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The engine a fit ran (``fitted_on.engine.name``) and the knobs its configuration set
    (``calibration.engine`` of a ``calibrate --records`` file: its flags', ``--set``'s, its
    scenario's and its recording's, ``None`` where unset; ``fitted_on.engine`` holds them
    resolved, defaults filled in, which cannot tell a knob set from a default), the scalar
    ones set; ``(None, {})`` for a file without them, or one that does not read (loading it
    says why)."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None, {}
    block = payload.get("fitted_on") if isinstance(payload, dict) else None
    engine = block.get("engine") if isinstance(block, dict) else None
    name = engine.get("name") if isinstance(engine, dict) else None
    section = payload.get("calibration") if isinstance(payload, dict) else None
    knobs = section.get("engine") if isinstance(section, dict) else None
    if not isinstance(knobs, dict):
        return (name if isinstance(name, str) else None), {}
    return (name if isinstance(name, str) else None), {
        k: v for k, v in knobs.items()
        if isinstance(k, str) and v is not None and isinstance(v, str | int | float | bool)}


def fitted_model_said(path: Path) -> str | None:
    """How to name on ``--model`` the model ``path`` was fitted on (``fitted_on.model``: its
    preset's name, else its ``config.json``'s path), for a command given none; None for a file
    that does not record it, or does not read (loading it says why)."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    block = payload.get("fitted_on") if isinstance(payload, dict) else None
    model = block.get("model") if isinstance(block, dict) else None
    if not isinstance(model, dict):
        return None
    name, config = model.get("name"), model.get("config_path")
    if model.get("preset") is False and isinstance(config, str) and config:
        return config
    return name if isinstance(name, str) and name else None


_PRINTED: set[str] = set()
"""Notes already printed: a scenario's configuration is built more than once per command (once
to check it, once per run), and each note is said once."""


def quiet_notes() -> None:
    """No notes printed by this process from now on: a study's worker builds the configuration
    of a run whose grid point the command already built, and said, before its first run
    (``sweep.plan_runs``), so its lines would repeat once per worker."""
    _QUIET.append(True)


_QUIET: list[bool] = []


def print_notes(checked: CheckedCostModel) -> None:
    """The notes (and warnings) of ``checked`` on stderr, one line each, each once per process
    (what was assumed is said); none in a study's worker (:func:`quiet_notes`)."""
    if _QUIET:
        return
    for kind, lines in (("warning", checked.warnings), ("note", checked.notes)):
        for line in lines:
            if line not in _PRINTED:
                _PRINTED.add(line)
                print(f"{kind}: {line}", file=sys.stderr)
