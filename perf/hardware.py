"""GPU specifications: memory, HBM bandwidth, peak FLOPs, host link.

Figures come from public specifications:

GPUs (dense BF16 tensor throughput, without sparsity; HBM capacity and bandwidth):
* A100-80GB SXM: 312 TFLOP/s, 80 GB HBM2e, 2,039 GB/s; PCIe Gen4 x16 (64 GB/s) to the host.
  NVIDIA A100 datasheet (nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/
  nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf).
* H100-80GB SXM5: 989 TFLOP/s, 80 GB HBM3, 3.35 TB/s; PCIe Gen5 x16 (128 GB/s).
  NVIDIA H100 datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet).
* H200-141GB SXM: 989 TFLOP/s, 141 GB HBM3e, 4.8 TB/s; PCIe Gen5 x16 (128 GB/s).
  NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/).
* L40S: 362 TFLOP/s, 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16 (64 GB/s).
  NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s/).
Memory sizes are what the driver reports as total (nvidia-smi MiB), since vLLM multiplies that by
``gpu_memory_utilization``: A100 81,920 MiB; H100 81,559 MiB; H200 143,771 MiB; L40S 46,068 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024**2


@dataclass(frozen=True, slots=True)
class GPUSpec:
    name: str
    memory_bytes: int
    hbm_bandwidth_bytes_s: float
    bf16_flops: float
    pcie_bandwidth_bytes_s: float

    def __post_init__(self) -> None:
        for field_name in (
            "memory_bytes",
            "hbm_bandwidth_bytes_s",
            "bf16_flops",
            "pcie_bandwidth_bytes_s",
        ):
            if not getattr(self, field_name) > 0:
                raise ValueError(f"GPU {self.name!r}: {field_name} must be > 0")


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("A100-80GB", 81_920 * MIB, 2.039e12, 312e12, 64e9),
        GPUSpec("H100-80GB", 81_559 * MIB, 3.35e12, 989e12, 128e9),
        GPUSpec("H200-141GB", 143_771 * MIB, 4.8e12, 989e12, 128e9),
        GPUSpec("L40S", 46_068 * MIB, 0.864e12, 362e12, 64e9),
    )
}



def get_gpu(name: str) -> GPUSpec:
    """The GPU preset of that name; an unknown name is a ValueError listing the known ones."""
    try:
        return GPUS[name]
    except KeyError:
        raise ValueError(f"unknown GPU preset {name!r}; known: {', '.join(GPUS)}") from None


