"""GPU presets and GPU files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.perf.hardware import GPU_ALIASES, GPU_SOURCES, GPUS, MIB, get_gpu

ISSUE_GPUS = ("A10G", "L4", "L40S", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200",
              "H20", "B200", "MI300X", "RTX-4090", "RTX-PRO-6000")


def test_every_gpu_users_have_is_a_cited_preset() -> None:
    for name in ISSUE_GPUS:
        gpu = get_gpu(name)
        assert gpu.name in GPU_SOURCES
        # CUDA's total is below nvidia-smi's by 0.4-0.8 GiB
        assert gpu.memory_mib_smi is not None
        gap = gpu.memory_mib_smi * MIB - gpu.memory_bytes
        assert 400 * MIB <= gap <= 800 * MIB, (name, gap / MIB)
        assert 0 < gpu.achievable_bandwidth_fraction <= 1
        assert 0 < gpu.achievable_gemm_fraction <= 1


def test_old_names_are_aliases_of_the_same_spec() -> None:
    assert get_gpu("H100-80GB") is get_gpu("H100-SXM")
    assert get_gpu("H200-141GB") is get_gpu("H200")
    for alias, name in GPU_ALIASES.items():
        assert get_gpu(alias) is GPUS[name]
    with pytest.raises(ValueError, match="unknown GPU preset 'H300'"):
        get_gpu("H300")


def test_peak_flops_per_dtype() -> None:
    h100, a100 = get_gpu("H100-SXM"), get_gpu("A100-80GB")
    assert h100.peak_flops("fp8") == pytest.approx(2 * h100.peak_flops("bf16"), rel=1e-3)
    assert a100.fp8_flops is None and a100.peak_flops("fp8") == a100.peak_flops("bf16")
    assert h100.link_bandwidth_bytes_s == 450e9 and get_gpu("L4").interconnect == "pcie"
    with pytest.raises(ValueError, match="unknown dtype"):
        h100.peak_flops("int3")


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_gpu_file_gives_its_figures(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"mygpu{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"name": "MyGPU", "memory_gib": 48,
                                    "hbm_bandwidth_bytes_s": 1.2e12, "bf16_flops": 400e12,
                                    "interconnect": "nvlink",
                                    "interconnect_bandwidth_bytes_s": 200e9}))
    else:
        path.write_text('name = "MyGPU"\nmemory_gib = 48\nhbm_bandwidth_bytes_s = 1.2e12\n'
                        'bf16_flops = 4e14\ninterconnect = "nvlink"\n'
                        'interconnect_bandwidth_bytes_s = 2e11\n')
    gpu = get_gpu(str(path))
    assert gpu.name == "MyGPU" and gpu.memory_bytes == 48 * 1024**3
    assert gpu.link_bandwidth_bytes_s == 200e9 and gpu.achievable_bandwidth_fraction == 0.90


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "X", "memory_gib": 8, "hbm_bandwidth_bytes_s": -1, "bf16_flops": 1e12},
     "hbm_bandwidth_bytes_s"),
    ({"name": "X", "memory_gib": 8, "hbm_bandwidth_bytes_s": 1e12}, "bf16_flops"),
    ({"name": "X", "hbm_bandwidth_bytes_s": 1e12, "bf16_flops": 1e12}, "memory_bytes"),
    ({"name": "X", "memory_gib": 8, "hbm_bandwidth_bytes_s": 1e12, "bf16_flops": 1e12,
      "interconnect": "carrier-pigeon"}, "interconnect"),
    ({"name": "X", "memory_gib": 8, "hbm_bandwidth_bytes_s": 1e12, "bf16_flops": 1e12,
      "clock": 3}, "clock"),
])
def test_a_bad_gpu_file_names_the_field(tmp_path: Path, body: dict[str, object],
                                        field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match=f"bad.json: field '{field}'"):
        get_gpu(str(path))


def test_an_unreadable_gpu_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read GPU file"):
        get_gpu(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.toml"
    bad.write_text("name = ")
    with pytest.raises(ValueError, match="not a valid TOML file"):
        get_gpu(str(bad))


@pytest.mark.parametrize(("smi", "preset"), [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA H200", "H200"), ("NVIDIA L40S", "L40S"),
])
def test_nvidia_smis_name_of_a_presets_card_is_that_preset(smi: str, preset: str) -> None:
    # the name nvidia-smi (and DCGM, and so AIPerf's GPU telemetry) gives the card
    assert get_gpu(smi).name == preset


@pytest.mark.parametrize("smi", ["NVIDIA H100 NVL", "NVIDIA A100 80GB PCIe",
                                 "NVIDIA A100-PCIE-40GB"])
def test_a_card_of_no_preset_is_refused_not_taken_for_a_near_one(smi: str) -> None:
    # other memory, bandwidth or links than the near preset: a suggestion, not a substitute
    with pytest.raises(ValueError, match=r"unknown GPU preset .*did you mean"):
        get_gpu(smi)
