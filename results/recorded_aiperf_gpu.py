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
so); their count is not taken for tensor parallelism or replicas."""

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
                      f"(telemetry_data: {where}), taken to be the server's; their count is "
                      "not taken for tensor parallelism or replicas (pass "
                      "--tensor-parallel-size or --set fleet.num_replicas=N)")
