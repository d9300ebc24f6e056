"""How sure the default step-time model is of its constants: each one's stated range.

:class:`~kvbudget.perf.step_time.VllmStepModel`'s defaults come from single published figures
(docs/fidelity.md, "Step-time model"). Each constant here gets the range its sources leave
open, which predictions with intervals (:mod:`kvbudget.studies.intervals`) draw from:

- the achievable fractions of a GPU's peak (``mem_efficiency``, ``kv_mem_efficiency``,
  ``gemm_efficiency``, ``attention_efficiency``, ``link_efficiency``): the least and most the
  published measurements show across GPUs (a preset's own figure is one of them, or an
  assumption where none was published, so a GPU is known only to within that spread);
- the overheads derived from one published fit each (``layer_overhead_s``,
  ``moe_layer_overhead_s``): the default plus or minus what the same derivation misses on the
  other GPU the source measured (the B200 checks of docs/fidelity.md), spread over the layers;
- ``step_overhead_s``: vLLM PR #11133's own range with async scheduling (150-170 us);
- ``allreduce_latency_s``: NCCL's small-message floor to vLLM's custom all-reduce at 0.5 MB.

A range that leaves out a model's own value (a calibrated or given one) is widened to hold it.
An interconnect whose all-reduces the sources above do not cover has its own range
(:data:`INTERCONNECT_RANGES`: GPUs on PCIe, whose all-reduce depends on peer-to-peer access and
the slot, neither of which a run records).

Beyond the constants: the model's structural error wherever it extrapolates beyond the
configurations its constants were derived on (:func:`structural_status`: another GPU, another
model, tensor or expert parallelism; :data:`STRUCTURAL_SIGMA`, :class:`StructurallyScaled`),
its spread estimated by leave-one-GPU-out on the published step figures the model cites (vLLM
FP8-KV blog, blog.vllm.ai 2026-04-22, vLLM 0.19.1: :data:`PUBLISHED_STEPS`), drawn from the
predictive Student t that an estimate from so few figures leaves (:data:`STRUCTURAL_DOF`); the
comment above :data:`PUBLISHED_STEPS` and docs/fidelity.md ("The structural error") give the
method.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import VllmStepModel

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel

F = TypeVar("F", float, npt.NDArray[np.float64])

STATED_RANGES: Final[dict[str, tuple[float, float, str]]] = {
    "mem_efficiency": (0.79, 1.0, "gpu-stream across GPUs: MI300X 0.79 .. L40 0.98 (RRZE "
                       "gpu-benches); H100 0.90 (FP8-KV blog)"),
    "kv_mem_efficiency": (0.66, 1.0, "the same x 0.836 (FP8-KV blog, concurrency 8, derived)"),
    "gemm_efficiency": (0.45, 1.0, "MI300X reports 45-55 %; torch.mm on H100 PCIe 0.66 .. 1.0"),
    "attention_efficiency": (0.35, 0.75, "FlashAttention-2 50-73 % (A100), FlashAttention-3 up "
                             "to 75 % (H100); 0.7 x FA2's low end for vLLM's paged chunks"),
    "link_efficiency": (0.55, 0.83, "PCIe 35/64 .. 52.8/64 GB/s (nvbandwidth#24); NCCL busbw "
                        "230/300 A100 (nccl-tests#149), 358/450 H20 (Mooncake #3484)"),
    "step_overhead_s": (150e-6, 170e-6, "vLLM PR #11133: 150-170 us between steps with async "
                        "scheduling and CUDA graphs"),
    "layer_overhead_s": (31.6e-6, 50.4e-6, "41.0 us (FP8-KV blog's H100 intercept, derived) "
                         "+- 9.4 us: the same derivation misses the blog's B200 intercept by "
                         "0.30 ms (3.63 vs 3.93 ms) over 32 layers"),
    "moe_layer_overhead_s": (61.5e-6, 79.0e-6, "70.3 us (the blog's gpt-oss-20b H100 "
                             "intercept, derived) +- 8.8 us: the B200 check's 0.21 ms (3.36 vs "
                             "3.15 ms) over 24 MoE layers"),
    "allreduce_latency_s": (6e-6, 10e-6, "NCCL ~6 us with CUDA graphs (NVIDIA/nccl#1259); vLLM "
                            "custom all-reduce 7-10 us at 0.5 MB, TP 2-4 (vllm#24111, #24532)"),
}
"""``parameter: (least, most, source)`` for the default step model's constants."""

INTERCONNECT_RANGES: Final[dict[str, dict[str, tuple[float, float, str]]]] = {
    "pcie": {
        "link_efficiency": (0.25, 0.83, "NCCL all-reduce between PCIe GPUs: 3.9 of 15.75 GB/s "
                            "over shared memory, peer-to-peer off (NVIDIA/nccl#384, 2 GPUs, "
                            "Gen3 x16) .. busbw 24.7 of 31.5 GB/s with it (tinygrad/open-gpu-"
                            "kernel-modules#17, RTX 4090, Gen4 x16, 32 MB); host link 52.8/64 "
                            "(nvbandwidth#24)"),
    },
}
"""Ranges that replace :data:`STATED_RANGES`' on one interconnect: ``link_efficiency`` there
comes from NCCL's busbw on NVLink and from host-link copies, but an all-reduce between PCIe
GPUs goes peer to peer or, where peer access is off (consumer and workstation cards, some
topologies: local-inference-lab/rtx6kpro#15, two RTX PRO 6000 on Gen5 x8 slots), through host
memory; a run does not record which."""


def stated_ranges(interconnect: str) -> dict[str, tuple[float, float, str]]:
    """:data:`STATED_RANGES` with :data:`INTERCONNECT_RANGES`' for ``interconnect``."""
    return {**STATED_RANGES, **INTERCONNECT_RANGES.get(interconnect, {})}


# --- the model's structural error where its constants are extrapolated ------------------------
#
# The constants' stated ranges above are what their sources leave open; they do not hold what
# the model's form leaves out on a GPU its constants were not derived on (docs/fidelity.md,
# "Predictions with intervals": the RTX PRO 6000 steps are 19-35 % slower than simulated).
# Every GPU is one of three kinds (STEP_VALIDATION):
#
# - "derived": the blog-derived constants (layer_overhead_s, moe_layer_overhead_s, the KV-read
#   factor) were set from this GPU's published step figures: H100-SXM (vLLM FP8-KV blog,
#   blog.vllm.ai 2026-04-22, vLLM 0.19.1). The derivation's own models (DERIVED_MODELS) there,
#   on one GPU, get the constants' ranges alone; any other model, or tensor or expert
#   parallelism (none of the figures has it), is "extrapolated" (structural_status).
# - "checked": published step figures exist and the model was checked against them, out of
#   sample, without refitting: B200 (same blog). The check measured the extrapolation's error;
#   it did not remove it, so these GPUs carry the structural spread too.
# - "datasheet": the constants are only scaled by the GPU's datasheet peaks and its measured
#   streaming and GEMM fractions: every other preset, and every GPU file.
#
# Each way a configuration extrapolates (extrapolations(): another GPU, another model, a
# parallel configuration) adds an error of its own, independent of the others: the spread is
# STRUCTURAL_SIGMA times the square root of their number (structural_sigma). Only the GPU's is
# estimated here; the model's and the parallelism's are taken to be as large, there being no
# published step figures of one vLLM version to estimate them apart (docs/fidelity.md, "The
# structural error", gives what bounds them: the H100 figures no constant was derived from,
# and the published tensor-parallel curves).
#
# The structural spread is estimated out of sample, by leave-one-GPU-out on the published step
# figures the model already cites (PUBLISHED_STEPS, all from the one blog, the only source with
# step figures of one vLLM version on two GPUs): for each GPU, the blog-derived constants are
# derived again from that GPU's figures alone by the defaults' own rule (layer_overhead_s from
# the Llama-3.1-8B batch-1 intercept, moe_layer_overhead_s from the gpt-oss-20b one, the
# KV-read factor from the Llama-3.1-8B concurrency-8 step; B200 has no concurrency-8 run, so
# there its batch-1 time per context token stands in), moved to the other GPU as the model
# moves them
# (overheads in seconds, the KV-read factor relative to the GPU's streaming fraction) and used
# to predict the other GPU's figures. STRUCTURAL_SIGMA is the root mean square of those
# out-of-sample log errors (leave_one_gpu_out() recomputes it; a test keeps the two equal).
# Nothing of ../shared/measured/ enters it: the recorded runs are the check.

PUBLISHED_STEPS: Final[tuple[tuple[str, str, str, float], ...]] = (
    # (GPU, model, figure, seconds): vLLM FP8-KV blog, BF16 KV; "intercept" and "per context
    # token" are its decode fits ITL = a + b x context at concurrency 1, "batch 8 x 21k" its
    # concurrency-8 run's median ITL (~20,000 input + ~2,000 output tokens)
    ("H100-SXM", "Llama-3.1-8B", "intercept", 6.44e-3),
    ("H100-SXM", "Llama-3.1-8B", "per context token", 43.7e-9),
    ("H100-SXM", "gpt-oss-20b", "intercept", 4.05e-3),
    ("H100-SXM", "gpt-oss-20b", "per context token", 8.94e-9),
    ("H100-SXM", "Llama-3.1-8B", "batch 8 x 21k", 15.18e-3),
    ("B200", "Llama-3.1-8B", "intercept", 3.93e-3),
    ("B200", "Llama-3.1-8B", "per context token", 18.0e-9),
    ("B200", "gpt-oss-20b", "intercept", 3.15e-3),
    ("B200", "gpt-oss-20b", "per context token", 3.56e-9),
)
"""The published step figures the default model cites (docs/fidelity.md, "Checks")."""

STEP_VALIDATION: Final[dict[str, str]] = {"H100-SXM": "derived", "B200": "checked"}
"""A GPU preset's validation status (see above); any other GPU is ``datasheet``."""

DERIVED_MODELS: Final[frozenset[str]] = frozenset(m for _g, m, _f, _v in PUBLISHED_STEPS)
"""The models whose published steps the blog-derived constants were set from, on one GPU
each (no tensor or expert parallelism). Another model, or a parallel configuration, is an
extrapolation of the constants as another GPU is (:func:`extrapolations`)."""

STRUCTURAL_SIGMA: Final[float] = 0.1234
"""The default model's structural error where it extrapolates: the root mean square of
``log(simulated / measured step)``, leave-one-GPU-out on :data:`PUBLISHED_STEPS`
(:func:`leave_one_gpu_out`)."""

STRUCTURAL_DOF: Final[int] = len(PUBLISHED_STEPS)
"""The degrees of freedom of the structural error's predictive distribution: the number of
out-of-sample errors :data:`STRUCTURAL_SIGMA` is the root mean square of. With a zero-mean
normal error of unknown variance and the noninformative prior ``p(sigma^2) ~ 1/sigma^2``, the
posterior predictive of a new error, given ``n`` errors of root mean square ``s``, is Student's
t with ``n`` degrees of freedom scaled by ``s`` (Gelman et al., Bayesian Data Analysis, 3rd ed.,
sections 2.6 and 3.2: the normal model with known mean): a spread estimated from nine figures is
itself uncertain, and the t's heavier tails carry that (its 95th percentile is 1.83, the
normal's 1.64)."""


def validation_status(gpu: str) -> str:
    """``derived``, ``checked`` or ``datasheet`` for a GPU's name (see above)."""
    return STEP_VALIDATION.get(gpu, "datasheet")


def extrapolations(model: VllmStepModel) -> tuple[str, ...]:
    """How a default step model's configuration lies beyond the derivation's (see above): of
    ``gpu`` (any GPU but the derived one), ``model`` (any model but :data:`DERIVED_MODELS`) and
    ``parallelism`` (tensor or expert parallelism), the ones that apply."""
    out = []
    if validation_status(model.gpu.name) != "derived":
        out.append("gpu")
    if model.model.name not in DERIVED_MODELS:
        out.append("model")
    if model.tensor_parallel_size > 1 or model.expert_parallel_size > 1:
        out.append("parallelism")
    return tuple(out)


def structural_status(model: VllmStepModel) -> str:
    """The validation status of a default step model's configuration: its GPU's (``derived``,
    ``checked``, ``datasheet``), except that on the derived GPU another model or a parallel
    configuration is ``extrapolated``."""
    status = validation_status(model.gpu.name)
    return "extrapolated" if status == "derived" and extrapolations(model) else status


def structural_sigma(model: VllmStepModel) -> float:
    """The spread of the structural error, in log space, of the default step model ``model``:
    :data:`STRUCTURAL_SIGMA` for each way its configuration extrapolates
    (:func:`extrapolations`), independent ones added in quadrature; 0 where it does not."""
    return STRUCTURAL_SIGMA * math.sqrt(len(extrapolations(model)))


def _figure(model: VllmStepModel, figure: str) -> float:
    t0 = model.step_time(0.0, 1.0, 1.0, 0.0, 0.0)
    if figure == "intercept":
        return t0
    if figure == "per context token":
        return (model.step_time(0.0, 1.0, 100_001.0, 0.0, 0.0) - t0) / 1e5
    return model.step_time(0.0, 8.0, 8 * 21_000.0, 0.0, 0.0)  # batch 8 x 21k


def _solve(make: Callable[[float], VllmStepModel], figure: str, target: float, x0: float,
           scale: float) -> float:
    """The value of a constant at which ``make(value)`` meets ``target`` on ``figure``: a
    figure linear in an overhead (``scale`` 0: one secant step) or inversely proportional to
    an efficiency (``scale`` 1: fixed-point steps of ``x * simulated / measured``)."""
    if scale == 0.0:
        a, b = _figure(make(x0), figure), _figure(make(x0 + 1e-6), figure)
        return x0 + (target - a) / ((b - a) / 1e-6)
    x = x0
    for _ in range(8):
        x = min(1.0, x * _figure(make(x), figure) / target)
    return x


def derive_on(gpu: str) -> dict[str, float]:
    """The blog-derived constants derived again from ``gpu``'s figures alone (see above):
    ``layer_overhead_s``, ``moe_layer_overhead_s`` and ``kv_read_factor`` (the KV-read
    efficiency over the GPU's streaming fraction)."""
    figures = {(m, f): v for g, m, f, v in PUBLISHED_STEPS if g == gpu}
    spec = get_gpu(gpu)
    llama, gptoss = get_model("Llama-3.1-8B"), get_model("gpt-oss-20b")
    layer = _solve(lambda x: VllmStepModel(spec, llama, layer_overhead_s=x), "intercept",
                   figures["Llama-3.1-8B", "intercept"], 40e-6, 0.0)
    moe = _solve(lambda x: VllmStepModel(spec, gptoss, layer_overhead_s=layer,
                                         moe_layer_overhead_s=x), "intercept",
                 figures["gpt-oss-20b", "intercept"], 70e-6, 0.0)
    base = VllmStepModel(spec, llama, layer_overhead_s=layer)
    # the defaults' rule reads the KV at concurrency 8; a GPU without that run, its batch-1
    # time per context token
    kv_figure = "batch 8 x 21k" if ("Llama-3.1-8B", "batch 8 x 21k") in figures \
        else "per context token"
    kv = _solve(lambda x: replace(base, kv_mem_efficiency=x), kv_figure,
                figures["Llama-3.1-8B", kv_figure], base.kv_mem_efficiency, 1.0)
    return {"layer_overhead_s": layer, "moe_layer_overhead_s": moe,
            "kv_read_factor": kv / base.mem_efficiency}


def leave_one_gpu_out() -> list[tuple[str, str, str, float]]:
    """``(GPU, model, figure, log(simulated / measured))`` of every published figure of each
    GPU, simulated with the constants derived on the other GPU (see above)."""
    gpus = list(dict.fromkeys(g for g, *_ in PUBLISHED_STEPS))
    out = []
    for held_out in gpus:
        (other,) = (g for g in gpus if g != held_out)
        derived = derive_on(other)
        spec = get_gpu(held_out)
        for g, m, figure, measured in PUBLISHED_STEPS:
            if g != held_out:
                continue
            model = VllmStepModel(spec, get_model(m),
                                  layer_overhead_s=derived["layer_overhead_s"],
                                  moe_layer_overhead_s=derived["moe_layer_overhead_s"])
            model = replace(model, kv_mem_efficiency=min(
                1.0, model.mem_efficiency * derived["kv_read_factor"]))
            out.append((g, m, figure, math.log(_figure(model, figure) / measured)))
    return out


def loo_sigma() -> float:
    """The root mean square of :func:`leave_one_gpu_out`'s log errors."""
    errors = [e for *_, e in leave_one_gpu_out()]
    return math.sqrt(sum(e * e for e in errors) / len(errors))


@dataclass(frozen=True)
class StructurallyScaled:
    """A step model whose every step takes ``factor`` times as long: one draw of the
    structural error (:data:`STRUCTURAL_SIGMA`) on top of ``inner``'s constants."""

    inner: CostModel
    factor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise ValueError(f"structural factor must be > 0, got {self.factor!r}")

    def step_time(self, num_prefill_tokens: F, num_decode_seqs: F, num_context_tokens: F,
                  prefill_attention: F, num_prefill_seqs: F) -> F:
        t: F = self.inner.step_time(num_prefill_tokens, num_decode_seqs, num_context_tokens,
                                    prefill_attention, num_prefill_seqs) * self.factor
        return t

    def decode_step_times(self, num_decode_seqs: int, first_context: int, num_steps: int
                          ) -> npt.NDArray[np.float64]:
        return self.inner.decode_step_times(num_decode_seqs, first_context, num_steps) \
            * self.factor

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "structural_factor": self.factor}
