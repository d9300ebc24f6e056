"""GPU specifications: memory, HBM bandwidth, dense peak FLOPs per dtype, interconnect.

Every figure of :data:`GPUS` names its source in ``docs/fidelity.md`` (section "GPUs"); the short
form is in :data:`GPU_SOURCES`. Conventions:

* ``memory_bytes`` is the total that CUDA reports (``cudaMemGetInfo``, which vLLM multiplies by
  ``gpu_memory_utilization``). It is 0.5-0.7 GiB below nvidia-smi's ``memory.total``: measured
  A100-40GB 40,441 vs 40,960 MiB (deviceQuery), A100-80GB 81,251 vs 81,920 MiB, B200 182,630 vs
  183,359 MiB (pytorch/ao#4002), RTX 4090 25,250,627,584 B vs 24,564 MiB (LLMServingSim's
  recorded ``device_total_memory_bytes``); those four gaps average 600 MiB, which is taken off
  the nvidia-smi total of every GPU without a measured CUDA total (``memory_mib_smi``).
* FLOPs are dense (datasheets mark the sparse figures); GeForce cards at their FP32-accumulate
  tensor rate (what cuBLAS BF16 uses).
* Bandwidths are per direction (NVLink's marketed figures are the sum of both).
* ``mem_efficiency`` / ``gemm_efficiency``: the fraction of peak HBM bandwidth that streaming
  reads reach and the fraction of dense BF16 peak that large cuBLAS GEMMs reach, measured per GPU
  where a public measurement exists, else the generation's value (see docs/fidelity.md).
* ``attention_efficiency``: the fraction of dense BF16 peak that prefill attention
  (FlashAttention's forward) reaches, where a public measurement on that GPU exists; ``None``
  leaves the step model's default (``kvbudget.perf.step_time.ATTENTION_EFFICIENCY``).
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

MIB = 1024**2
GIB = 1024**3
CUDA_VS_SMI_MIB = 600  # mean of the four measured gaps above

Interconnect = Literal["nvlink", "pcie", "xgmi"]
MemoryKind = Literal["hbm", "gddr"]
DTYPES = ("bf16", "fp16", "fp8")
WEIGHT_ONLY_DTYPES = ("int4", "int8", "mxfp4", "nvfp4", "awq", "gptq")


# A thousand times the largest GPU of the table (B200: 192 GB, 8 TB/s, 2.25 PFLOP/s dense
# BF16): a figure beyond these is a unit slip (bytes for gigabytes), refused naming the field.
MAX_MEMORY_BYTES = 2.0**48
MAX_BANDWIDTH_BYTES_S = 1e16
MAX_FLOPS = 1e19

@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU as the step-time model and the KV sizing see it.

    ``interconnect_bandwidth_bytes_s`` is the GPU-to-GPU bandwidth per direction that tensor
    parallelism uses (NVLink or xGMI; the PCIe link when ``interconnect`` is ``pcie``).
    ``mem_efficiency`` and ``gemm_efficiency`` default by memory kind and vendor when ``None``.
    """

    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_s: float
    bf16_flops: float
    pcie_bandwidth_bytes_s: float
    fp16_flops: float | None = None
    fp8_flops: float | None = None
    interconnect: Interconnect = "pcie"
    interconnect_bandwidth_bytes_s: float | None = None
    generation: str = ""
    vendor: Literal["nvidia", "amd"] = "nvidia"
    memory_kind: MemoryKind = "hbm"
    memory_mib_smi: int | None = None
    mem_efficiency: float | None = None
    gemm_efficiency: float | None = None
    host_memory_bytes: int | None = None
    """Host (CPU) memory per GPU of the server it sits in: the system memory of the vendor's
    8-GPU server divided by its GPUs (:data:`HOST_MEMORY_SOURCES`); ``None`` where no vendor
    figure was found (a GPU file may give it). Bounds vLLM's ``kv_offloading_size``."""
    attention_efficiency: float | None = None
    """The fraction of dense BF16 peak FlashAttention's prefill forward reaches on this GPU,
    where it was measured (:data:`H20_FA3_VARLEN_FRACTION`); ``None``: the step model's
    default."""

    def __post_init__(self) -> None:
        for field_name in (
            "memory_bytes",
            "hbm_bandwidth_bytes_s",
            "bf16_flops",
            "pcie_bandwidth_bytes_s",
        ):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"GPU {self.name!r}: {field_name} must be > 0, got {value!r}")
        for field_name in ("fp16_flops", "fp8_flops", "interconnect_bandwidth_bytes_s",
                           "host_memory_bytes"):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, int | float) or not value > 0):
                raise ValueError(f"GPU {self.name!r}: {field_name} must be > 0, got {value!r}")
        for field_name, bound in (("memory_bytes", MAX_MEMORY_BYTES),
                                  ("hbm_bandwidth_bytes_s", MAX_BANDWIDTH_BYTES_S),
                                  ("pcie_bandwidth_bytes_s", MAX_BANDWIDTH_BYTES_S),
                                  ("interconnect_bandwidth_bytes_s", MAX_BANDWIDTH_BYTES_S),
                                  ("host_memory_bytes", MAX_MEMORY_BYTES),
                                  ("bf16_flops", MAX_FLOPS), ("fp16_flops", MAX_FLOPS),
                                  ("fp8_flops", MAX_FLOPS)):
            value = getattr(self, field_name)
            if value is not None and not value <= bound:
                raise ValueError(f"GPU {self.name!r}: {field_name} must be <= {bound:.3g} "
                                 f"(a thousand times any GPU's), got {value!r}")
        for field_name in ("mem_efficiency", "gemm_efficiency", "attention_efficiency"):
            value = getattr(self, field_name)
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, int | float)):
                raise ValueError(f"GPU {self.name!r}: {field_name} must be a number in (0, 1], "
                                 f"got {value!r}")
            if value is not None and not 0 < value <= 1:
                raise ValueError(
                    f"GPU {self.name!r}: {field_name} must be in (0, 1], got {value!r}"
                )
        if self.interconnect not in ("nvlink", "pcie", "xgmi"):
            raise ValueError(
                f"GPU {self.name!r}: interconnect must be nvlink, pcie or xgmi, "
                f"got {self.interconnect!r}"
            )
        if self.memory_kind not in ("hbm", "gddr"):
            raise ValueError(
                f"GPU {self.name!r}: memory_kind must be hbm or gddr, got {self.memory_kind!r}"
            )

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for ``dtype`` (bf16, fp16, fp8); fp8 without FP8 tensor cores
        runs at the 16-bit rate (vLLM's FP8 weights then go through a weight-only kernel)."""
        if dtype in ("bf16", "bfloat16", "auto"):
            return self.bf16_flops
        if dtype in ("fp16", "float16", "half"):
            return self.fp16_flops or self.bf16_flops
        if dtype.startswith("fp8"):
            return self.fp8_flops or self.fp16_flops or self.bf16_flops
        if dtype in ("fp32", "float32"):
            return self.bf16_flops  # TF32/BF16 tensor path (vLLM computes in the model dtype)
        if dtype in WEIGHT_ONLY_DTYPES:
            return self.bf16_flops  # weight-only kernels (Marlin, MXFP4 on Hopper) compute in 16 bits
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")

    @property
    def link_bandwidth_bytes_s(self) -> float:
        """Per-direction GPU-to-GPU bandwidth used by TP/EP collectives."""
        return self.interconnect_bandwidth_bytes_s or self.pcie_bandwidth_bytes_s

    @property
    def achievable_bandwidth_fraction(self) -> float:
        if self.mem_efficiency is not None:
            return self.mem_efficiency
        if self.vendor == "amd":
            return GENERATION_MEM_EFFICIENCY["amd"]
        return GENERATION_MEM_EFFICIENCY[self.memory_kind]

    @property
    def achievable_gemm_fraction(self) -> float:
        if self.gemm_efficiency is not None:
            return self.gemm_efficiency
        return GENERATION_GEMM_EFFICIENCY[self.vendor]


# Fraction of peak bandwidth streaming reads reach, when the GPU has no measurement of its own:
# NVIDIA HBM 0.90 (decode KV reads of vLLM on H100: 131,072 B/token at 4.37e-5 ms/token =
# 3.0 TB/s of 3.35, vLLM FP8-KV blog 2026-04-22; torchao uses 0.92 for H100); GDDR 0.95 (L40
# read 845 of 864 GB/s, RRZE-HPC gpu-benches); AMD 0.79 (MI300X read 4,199 of 5,300 GB/s, RRZE;
# AMD's roofline tool 4.2 TB/s, ROCm/legacy-rocm-build#5070).
GENERATION_MEM_EFFICIENCY: dict[str, float] = {"hbm": 0.90, "gddr": 0.95, "amd": 0.79}
# Fraction of dense BF16 peak that large GEMMs reach, when the GPU has no measurement: NVIDIA
# 0.78 (torchao's pct_achievable_gemm_tops for H100), AMD 0.50 (MI300X reports of 45-55 %).
GENERATION_GEMM_EFFICIENCY: dict[str, float] = {"nvidia": 0.78, "amd": 0.50}
# FlashAttention-3's BF16 forward on an H20 (Dao-AILab/flash-attention#1310, 2024-11-01,
# hopper/benchmark_attn.py: head_dim 128, batch 2, seqlen 2048, non-causal): 126.2 TFLOPS,
# 122.7 with varlen (the entry point vLLM calls), of 148: the H20's tensor cores are cut to
# 15 % of an H100's, so the softmax that holds FA3 to 50-75 % of an H100 hides under its matmuls
H20_BF16_TFLOPS = 148.0  # dense (zangshuxian: "FP16 dense 148 TFLOPS"; GPU_SOURCES)
H20_FA3_VARLEN_TFLOPS = 122.7
H20_FA3_VARLEN_FRACTION = H20_FA3_VARLEN_TFLOPS / H20_BF16_TFLOPS


def _smi(mib: int) -> int:
    return (mib - CUDA_VS_SMI_MIB) * MIB


_T = 1e12
_G = 1e9
# DGX H100 and DGX H200: "2 TB of DDR5 system memory" for eight GPUs (NVIDIA DGX BasePOD
# reference architecture, "Core Components", docs.nvidia.com/dgx-basepod): 256 GiB per GPU
DGX_HOPPER_HOST_BYTES_PER_GPU = 2 * 1024 * GIB // 8

# where each GPU's host_memory_bytes comes from (the others have none: give it in a GPU file)
HOST_MEMORY_SOURCES: dict[str, str] = {
    "H100-SXM": "DGX H100: 2 TB DDR5 system memory / 8 GPUs (NVIDIA DGX BasePOD RA)",
    "H200": "DGX H200: 2 TB DDR5 system memory / 8 GPUs (NVIDIA DGX BasePOD RA)",
}

GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("A10G", _smi(23_028), 600 * _G, 125 * _T, 32 * _G, 125 * _T, None, "pcie",
                None, "ampere", memory_kind="gddr", memory_mib_smi=23_028),
        GPUSpec("L4", _smi(23_034), 300 * _G, 121 * _T, 32 * _G, 121 * _T, 242.5 * _T, "pcie",
                None, "ada", memory_kind="gddr", memory_mib_smi=23_034, gemm_efficiency=0.74),
        GPUSpec("L40S", _smi(46_068), 864 * _G, 362.05 * _T, 32 * _G, 362.05 * _T, 733 * _T,
                "pcie", None, "ada", memory_kind="gddr", memory_mib_smi=46_068,
                mem_efficiency=0.98, gemm_efficiency=0.74),
        GPUSpec("A100-40GB", 42_405_855_232, 1555 * _G, 312 * _T, 32 * _G, 312 * _T, None,
                "nvlink", 300 * _G, "ampere", memory_mib_smi=40_960, mem_efficiency=0.96,
                gemm_efficiency=0.79),
        GPUSpec("A100-80GB", 81_251 * MIB, 2039 * _G, 312 * _T, 32 * _G, 312 * _T, None,
                "nvlink", 300 * _G, "ampere", memory_mib_smi=81_920, mem_efficiency=0.87,
                gemm_efficiency=0.85),
        GPUSpec("H100-SXM", _smi(81_559), 3350 * _G, 989.4 * _T, 64 * _G, 989.4 * _T,
                1978.9 * _T, "nvlink", 450 * _G, "hopper", memory_mib_smi=81_559,
                gemm_efficiency=0.80, host_memory_bytes=DGX_HOPPER_HOST_BYTES_PER_GPU),
        GPUSpec("H100-PCIe", _smi(81_559), 2000 * _G, 756.5 * _T, 64 * _G, 756.5 * _T,
                1513 * _T, "pcie", 64 * _G, "hopper", memory_mib_smi=81_559,
                mem_efficiency=0.97, gemm_efficiency=0.66),
        GPUSpec("H200", _smi(143_771), 4800 * _G, 989.4 * _T, 64 * _G, 989.4 * _T, 1978.9 * _T,
                "nvlink", 450 * _G, "hopper", memory_mib_smi=143_771, gemm_efficiency=0.80,
                host_memory_bytes=DGX_HOPPER_HOST_BYTES_PER_GPU),
        GPUSpec("H20", _smi(97_871), 4000 * _G, H20_BF16_TFLOPS * _T, 64 * _G,
                H20_BF16_TFLOPS * _T, 2 * H20_BF16_TFLOPS * _T,
                "nvlink", 450 * _G, "hopper", memory_mib_smi=97_871, gemm_efficiency=0.96,
                attention_efficiency=H20_FA3_VARLEN_FRACTION),
        GPUSpec("B200", 182_630 * MIB, 7672 * _G, 2250 * _T, 64 * _G, 2250 * _T, 4500 * _T,
                "nvlink", 900 * _G, "blackwell", memory_mib_smi=183_359,
                gemm_efficiency=0.75),
        GPUSpec("MI300X", _smi(196_592), 5300 * _G, 1307.4 * _T, 64 * _G, 1307.4 * _T,
                2614.9 * _T, "xgmi", 448 * _G, "cdna3", vendor="amd",
                memory_mib_smi=196_592, mem_efficiency=0.79, gemm_efficiency=0.50),
        GPUSpec("RTX-4090", 25_250_627_584, 1008 * _G, 165.2 * _T, 32 * _G, 165.2 * _T,
                330.3 * _T, "pcie", None, "ada", memory_kind="gddr", memory_mib_smi=24_564,
                gemm_efficiency=1.0),
        GPUSpec("RTX-PRO-6000", _smi(97_887), 1792 * _G, 503.8 * _T, 64 * _G, 503.8 * _T,
                1007.6 * _T, "pcie", None, "blackwell", memory_kind="gddr",
                memory_mib_smi=97_887, gemm_efficiency=0.82),
    )
}

# today's preset names and common spellings -> the table's names
GPU_ALIASES: dict[str, str] = {
    "H100-80GB": "H100-SXM",
    "H100": "H100-SXM",
    "H100-SXM5": "H100-SXM",
    "H200-141GB": "H200",
    "A100": "A100-80GB",
    "A100-SXM-80GB": "A100-80GB",
    "H20-96GB": "H20",
    "RTX4090": "RTX-4090",
    "RTXPRO6000": "RTX-PRO-6000",
    "RTX-PRO-6000-Blackwell": "RTX-PRO-6000",
    "MI300X-192GB": "MI300X",
    "B200-180GB": "B200",
}

# nvidia-smi's product names (what DCGM's exporter reports as a GPU's name, and so what AIPerf's
# GPU telemetry writes) where they are not a preset's name with "NVIDIA " before it: the H100
# SXM5's "NVIDIA H100 80GB HBM3" (its PCIe card is "NVIDIA H100 PCIe", the preset's name), the
# A100 SXM4s' "NVIDIA A100-SXM4-80GB" / "-40GB" and "NVIDIA GeForce RTX 4090", as RunPod's GPU
# type ids (its public gpuTypes API) and nvidia-smi outputs quoted in issues spell them. Only
# names of one preset's card: "NVIDIA H100 NVL", "NVIDIA A100 80GB PCIe" and "NVIDIA
# A100-PCIE-40GB" (other memory, bandwidth or links than any preset) are not read as one.
SMI_NAMES: dict[str, str] = {
    "H100 80GB HBM3": "H100-SXM",
    "A100-SXM4-80GB": "A100-80GB",
    "A100-SXM4-40GB": "A100-40GB",
    "GeForce RTX 4090": "RTX-4090",
}

# short citations per GPU (the full table with quotes is docs/fidelity.md, "GPUs")
GPU_SOURCES: dict[str, str] = {
    "A10G": "Baseten A10 vs A10G blog (memory, bandwidth); FLOPs are the A10 datasheet's "
    "125 TF dense (the A10G's own are not published); nvidia-smi 23,028 MiB (NVIDIA/DCGM#232)",
    "L4": "NVIDIA L4 datasheet figures halved for sparsity (242 -> 121 TF bf16); nvidia-smi "
    "23,034 MiB (modal-labs/modal-client#2797)",
    "L40S": "NVIDIA L40S datasheet (reprint mullet.se): 362.05 TF bf16 dense, 864 GB/s; "
    "read 845/864 GB/s (RRZE gpu-benches, L40); torch.mm 269 TF (zzc0721)",
    "A100-40GB": "NVIDIA A100 datasheet 312 TF, 1,555 GB/s; deviceQuery 42,405,855,232 B; "
    "torch.mm 246 TF (zzc0721)",
    "A100-80GB": "NVIDIA A100 datasheet 312 TF, 2,039 GB/s; NVLink 600 GB/s total; CUDA "
    "81,251 MiB; read 1,776 GB/s (RRZE); torch.mm 264.5 TF (zzc0721)",
    "H100-SXM": "NVIDIA H100 datasheet (hpctech reprint): 1,979 TF bf16 sparse -> 989.4 dense, "
    "3.35 TB/s, NVLink 900 GB/s total; torch.mm 789 TF (zzc0721)",
    "H100-PCIe": "NVIDIA H100 datasheet: 1,513 TF sparse -> 756.5 dense, 2.0 TB/s; "
    "torch.mm 496 TF (zzc0721#95)",
    "H200": "NVIDIA H200: 4.8 TB/s, H100 compute; nvidia-smi 143,771 MiB; torch.mm 790 TF",
    "H20": "148 TF fp16 dense (zangshuxian), 4.0 TB/s (willitrunai); nvidia-smi 97,871 MiB; "
    "torch.mm 142 TF (zzc0721#77); FA3 fwd 122.7 TF (flash-attention#1310)",
    "B200": "torchao roofline_utils: 2.25 PF bf16 dense; bandwidth 7.67 TB/s from the memory "
    "bus (pytorch/ao#4002); CUDA 178.35 GiB; torch.mm 1,696 TF (zzc0721)",
    "MI300X": "AMD MI300X datasheet via torchao: 1,307 TF bf16 dense, 5.3 TB/s; rocminfo "
    "196,592 MiB; read 4,199 GB/s (RRZE)",
    "RTX-4090": "waredb: 165.15 TF bf16 (FP32 accumulate), 1,008 GB/s; CUDA total from "
    "LLMServingSim's recorded device_total_memory_bytes; torch.mm 163-173 TF (zzc0721)",
    "RTX-PRO-6000": "gpu.name: 96 GB GDDR7, 1,792 GB/s, PCIe Gen5; hmc-tech clock-derived "
    "503.8 TF bf16 dense; nvidia-smi 97,887 MiB; torch.mm 409-418 TF (zzc0721#160-162)",
}


def get_gpu(name: str | Path) -> GPUSpec:
    """A preset by name (or alias), or a JSON/TOML file of :class:`GPUSpec` fields."""
    key = str(name)
    if key in GPUS:
        return GPUS[key]
    if key in GPU_ALIASES:
        return GPUS[GPU_ALIASES[key]]
    if key.endswith((".json", ".toml")):
        return load_gpu_file(Path(key))
    folded = {k.lower(): GPU_ALIASES.get(k, k) for k in (*GPUS, *GPU_ALIASES)}
    spelt = key.strip().lower().removeprefix("nvidia ").removeprefix("nvidia-")
    smi = {k.lower(): v for k, v in SMI_NAMES.items()}
    for candidate in (spelt, spelt.replace(" ", "-")):
        if candidate in folded:
            return GPUS[folded[candidate]]
        if candidate in smi:
            return GPUS[smi[candidate]]
    close = difflib.get_close_matches(spelt, list(folded), n=2, cutoff=0.6)
    hint = (f" (did you mean {' or '.join(dict.fromkeys(folded[c] for c in close))}?)"
            if close else "")
    known = ", ".join([*GPUS, *GPU_ALIASES])
    raise ValueError(
        f"unknown GPU preset {key!r}{hint}; known: {known} (or a .json/.toml file of GPU "
        "figures)"
    )


def gpu_label(name: str | Path) -> str:
    """The canonical name of a preset or the ``name`` a GPU file gives."""
    return get_gpu(name).name


def load_gpu_file(path: Path) -> GPUSpec:
    """A GPU described by a JSON or TOML file of :class:`GPUSpec` fields, validated by pydantic.

    Required: ``name``, ``memory_bytes`` (or ``memory_gib``), ``hbm_bandwidth_bytes_s``,
    ``bf16_flops``; optional the rest (``pcie_bandwidth_bytes_s`` defaults to PCIe Gen4's
    32 GB/s per direction). Errors name the file and the field.
    """
    from pydantic import BaseModel, ConfigDict, Field, ValidationError

    class _GPUFile(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=False, allow_inf_nan=False)
        name: str = Field(min_length=1)
        memory_bytes: int | None = Field(default=None, gt=0)
        memory_gib: float | None = Field(default=None, gt=0)
        hbm_bandwidth_bytes_s: float = Field(gt=0)
        bf16_flops: float = Field(gt=0)
        pcie_bandwidth_bytes_s: float = Field(default=32e9, gt=0)
        fp16_flops: float | None = Field(default=None, gt=0)
        fp8_flops: float | None = Field(default=None, gt=0)
        interconnect: Interconnect = "pcie"
        interconnect_bandwidth_bytes_s: float | None = Field(default=None, gt=0)
        generation: str = ""
        vendor: Literal["nvidia", "amd"] = "nvidia"
        memory_kind: MemoryKind = "hbm"
        memory_mib_smi: int | None = Field(default=None, gt=0)
        mem_efficiency: float | None = Field(default=None, gt=0, le=1)
        gemm_efficiency: float | None = Field(default=None, gt=0, le=1)
        attention_efficiency: float | None = Field(default=None, gt=0, le=1)
        host_memory_bytes: int | None = Field(default=None, gt=0)

    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read GPU file ({exc.strerror or exc})") from None
    try:
        raw: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: not a valid {path.suffix[1:].upper()} file ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a GPU file holds one table of fields")
    for key, value in raw.items():  # pydantic's lax mode would read true as 1 FLOP/s
        if isinstance(value, bool):
            raise ValueError(f"{path}: field {key!r}: expected a number or a name, got "
                             f"{str(value).lower()}")
    try:
        spec = _GPUFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(file)"
        raise ValueError(f"{path}: field {loc!r}: {err['msg']}") from None
    values = spec.model_dump()
    gib = values.pop("memory_gib")
    if values["memory_bytes"] is None:
        if gib is None:
            raise ValueError(f"{path}: field 'memory_bytes' (or 'memory_gib') is required")
        values["memory_bytes"] = int(gib * GIB)
    known = {f.name for f in fields(GPUSpec)}
    return GPUSpec(**{k: v for k, v in values.items() if k in known})
