"""The GPU an AIPerf run's own telemetry names.

AIPerf collects GPU telemetry from DCGM exporters (``--gpu-telemetry``; on by default where an
exporter answers at ``localhost:9400``) and writes it into the run's summary,
``profile_export_aiperf.json``: ``telemetry_data.endpoints.<host:port>.gpus.<gpu_k>`` with
``gpu_name`` as DCGM gives it (``"NVIDIA RTX 6000 Ada Generation"``, ``"NVIDIA H100 80GB
HBM3"``). A published run, github.com/vinhngx/aiperf ``tests/unit/plot/fixtures/
qwen_concurrency1/profile_export_aiperf.json`` at 4d4caa79 (AIPerf's own plot fixture, a
Qwen run), names two RTX 6000 Ada GPUs at two exporters, and kvbudget said "GPU H100-SXM
(ASSUMED: the recording does not name its GPU)": the file named one, and another was
simulated. The GPUs an exporter reports are its node's, taken to be the server's (a note says
so); their count is not taken for tensor parallelism or replicas. Where the telemetry has each
GPU's ``gpu_memory_used``, the note says how many of them held memory during the run and which
(github.com/wellflat/k8s-dev ``bench/aiperf/profile_export_aiperf.json`` at 7250dddc: eight
A100-SXM4-80GB at one exporter, gpu_0 alone holding 73.2 GB, the others 0: a server on one GPU,
which the bare count of 8 did not tell)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbudget.results.recorded_fields import dig


def _names(summary: Mapping[str, Any]) -> list[str]:
    """Each GPU's ``gpu_name`` in the summary's telemetry, one an exporter's GPU."""
    endpoints = dig(summary, "telemetry_data", "endpoints")
    names: list[str] = []
    for endpoint in endpoints.values() if isinstance(endpoints, Mapping) else ():
        gpus = endpoint.get("gpus") if isinstance(endpoint, Mapping) else None
        for gpu in gpus.values() if isinstance(gpus, Mapping) else ():
            name = gpu.get("gpu_name") if isinstance(gpu, Mapping) else None
            if isinstance(name, str) and name.strip():
                names.append(name.strip())
    return names


def _memory_held(summary: Mapping[str, Any]) -> tuple[int, list[str]]:
    """How many GPUs report a ``gpu_memory_used`` average, and each of those above 0 as
    ``<gpu key> <GB> GB``."""
    endpoints = dig(summary, "telemetry_data", "endpoints")
    num_reported, held = 0, []
    for endpoint in endpoints.values() if isinstance(endpoints, Mapping) else ():
        gpus = endpoint.get("gpus") if isinstance(endpoint, Mapping) else None
        for key, gpu in gpus.items() if isinstance(gpus, Mapping) else ():
            used = dig(gpu, "metrics", "gpu_memory_used", "avg")
            if not isinstance(used, int | float) or isinstance(used, bool):
                continue
            num_reported += 1
            if used > 0:
                held.append(f"{key} {used:.1f} GB")
    return num_reported, held


def _memory_note(summary: Mapping[str, Any]) -> str:
    """``; K of the N held memory ...`` where the telemetry reports GPU memory, else ``""``."""
    num_reported, held = _memory_held(summary)
    if not num_reported:
        return ""
    listed = ", ".join(held[:8]) + (", ..." if len(held) > 8 else "")
    return (f"; {len(held)} of the {num_reported} GPUs whose memory it reported held memory "
            f"during the run{f' ({listed})' if held else ''}")


def telemetry_gpu(summary: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The GPU the run's telemetry names (None where it names none or several kinds) and the
    note that says where it came from (None where the telemetry names no GPU)."""
    names = _names(summary)
    if not names:
        return None, None
    kinds = sorted(set(names))
    endpoints = dig(summary, "telemetry_data", "endpoints")
    where = (f"{len(names)} GPU(s) at {len(endpoints)} DCGM exporter(s)"
             if isinstance(endpoints, Mapping) else f"{len(names)} GPU(s)")
    if len(kinds) > 1:
        return None, (f"AIPerf's GPU telemetry reported GPUs of {len(kinds)} kinds "
                      f"({', '.join(kinds[:4])}; {where}): none taken for the simulated GPU, "
                      "pass --gpu")
    return kinds[0], (f"GPU: {kinds[0]}, as AIPerf's GPU telemetry reported it "
                      f"(telemetry_data: {where}{_memory_note(summary)}), taken to be the "
                      "server's; their count is "
                      "not taken for tensor parallelism or replicas (pass "
                      "--tensor-parallel-size or --set fleet.num_replicas=N)")
