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
"""

from __future__ import annotations

from typing import Final

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
