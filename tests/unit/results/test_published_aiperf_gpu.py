"""The GPU an AIPerf run's GPU telemetry names (``telemetry_data.endpoints.<exporter>.gpus``,
DCGM's ``gpu_name``), read as the recording's GPU.

github.com/vinhngx/aiperf ``tests/unit/plot/fixtures/qwen_concurrency1/profile_export_aiperf.json``
at 4d4caa79 (AIPerf's plot fixture of a Qwen run at concurrency 1): two DCGM exporters
(``localhost:9400``, ``localhost:9402``) each report one ``NVIDIA RTX 6000 Ada Generation``.
kvbudget said "GPU H100-SXM (ASSUMED: the recording does not name its GPU; pass --gpu)" and
simulated an H100: the file named its GPU, and another was simulated.

The published run is kept as an excerpt (``published/aiperf-qwen-concurrency1-excerpt/``);
hand-made: AIPerf 0.13.0's concurrency-4 fixture (its CPU server had no exporter) under a
summary given that telemetry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from tests.conftest import unwrapped
from tests.unit.results.excerpts import excerpt_copy

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"


def run_with_gpus(tmp_path: Path, *names: str) -> Path:
    summary = json.loads((AIPERF / "concurrency4_aiperf.json").read_text())
    summary["telemetry_data"] = {"summary": {}, "endpoints": {
        f"localhost:{9400 + 2 * k}": {"gpus": {"gpu_0": {
            "gpu_index": 0, "gpu_name": name, "hostname": f"test-host-{k + 1}", "metrics": {}}}}
        for k, name in enumerate(names)}}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    path = tmp_path / "profile_export.jsonl"
    path.write_text((AIPERF / "concurrency4.jsonl").read_text())
    return path


def test_the_gpu_the_telemetry_names_is_the_recordings(tmp_path: Path) -> None:
    ada = "NVIDIA RTX 6000 Ada Generation"
    rec = read_recording(run_with_gpus(tmp_path, ada, ada))
    assert rec.config["gpu"] == ada
    assert any(n.startswith(f"GPU: {ada}, as AIPerf's GPU telemetry reported it "
                            "(telemetry_data: 2 GPU(s) at 2 DCGM exporter(s))")
               for n in rec.notes)


# github.com/wellflat/k8s-dev bench/aiperf/profile_export_aiperf.json at 7250dddc (no licence:
# its layout by hand): eight A100-SXM4-80GB at one exporter, gpu_0 alone holding 73.2 GB; the
# note said "8 GPU(s)" and nothing of which served, though the telemetry showed it
def test_the_gpus_that_held_memory_are_said(tmp_path: Path) -> None:
    a100 = "NVIDIA A100-SXM4-80GB"
    path = run_with_gpus(tmp_path, a100)
    summary_path = tmp_path / "profile_export_aiperf.json"
    summary = json.loads(summary_path.read_text())
    summary["telemetry_data"]["endpoints"] = {"dcgm-exporter:9400": {"gpus": {
        f"gpu_{k}": {"gpu_index": k, "gpu_name": a100, "hostname": "gpu-03", "metrics": {
            "gpu_memory_used": {"unit": "GB", "avg": 73.24617932800003 if k == 0 else 0.0}}}
        for k in range(8)}}}
    summary_path.write_text(json.dumps(summary))
    rec = read_recording(path)
    assert rec.config["gpu"] == a100
    assert any("(telemetry_data: 8 GPU(s) at 1 DCGM exporter(s); 1 of the 8 GPUs whose memory "
               "it reported held memory during the run (gpu_0 73.2 GB)), taken to be the "
               "server's; their count is not taken for tensor parallelism" in n
               for n in rec.notes)


def test_gpus_of_several_kinds_are_said_and_none_taken(tmp_path: Path) -> None:
    rec = read_recording(run_with_gpus(tmp_path, "NVIDIA L40S", "NVIDIA H200"))
    assert "gpu" not in rec.config
    assert any("GPUs of 2 kinds (NVIDIA H200, NVIDIA L40S" in n for n in rec.notes)


def test_a_run_without_telemetry_names_no_gpu() -> None:
    rec = read_recording(AIPERF / "concurrency4.jsonl")
    assert "gpu" not in rec.config and not any("telemetry" in n for n in rec.notes)


@pytest.mark.parametrize(("gpu", "args", "said"), [
    ("NVIDIA L40S", [], "GPU L40S (the recording's)"),
    # nvidia-smi's (DCGM's) name of an H100 SXM5 is the H100-SXM preset's card
    ("NVIDIA H100 80GB HBM3", [], "GPU H100-SXM (the recording's)"),
    ("NVIDIA H100 80GB HBM3", ["--gpu", "H100-PCIe"],
     "GPU H100-PCIe (--gpu; NOT the recording's 'NVIDIA H100 80GB HBM3', a H100-SXM"),
    # an H100 NVL (94 GB, its own bandwidth) is no preset's card: asked, not substituted
    ("NVIDIA H100 NVL", [],
     "the recording's GPU 'NVIDIA H100 NVL' is no preset (did you mean H100-SXM"),
    ("NVIDIA H100 NVL", ["--gpu", "H100-SXM"],
     "GPU H100-SXM (--gpu, for the recording's 'NVIDIA H100 NVL', which is no preset"),
    ("NVIDIA L40S", ["--gpu", "H100-SXM"],
     "GPU H100-SXM (--gpu; NOT the recording's 'NVIDIA L40S', a L40S: the server measured on "
     "another GPU than the one simulated)"),
    ("NVIDIA L40S", ["--gpu", "L40S"], "GPU L40S (--gpu)"),
])
def test_validate_simulates_the_telemetrys_gpu_or_asks(tmp_path: Path, gpu: str,
                                                        args: list[str], said: str) -> None:
    path = run_with_gpus(tmp_path, gpu)
    result = CliRunner().invoke(app, ["validate", "--records", str(path), "--model", "Qwen3-8B",
                                      *args, "--out", str(tmp_path / "v")])
    assert result.exit_code == (2 if said.startswith("the recording") else 0), result.output
    assert said in " ".join(unwrapped(result.stderr))


EXCERPT = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
           / "aiperf-qwen-concurrency1-excerpt" / "profile_export.jsonl")


def test_the_published_runs_gpu_and_idle_user_are_said(tmp_path: Path) -> None:
    # the published run itself (excerpt): its telemetry's GPU is the recording's, and its
    # one user's 3.07 s wait before its third send (8 % of the run) is said: the measured
    # throughput counts it, the closed-loop replay does not
    rec = read_recording(excerpt_copy(EXCERPT.parent, tmp_path) / EXCERPT.name)
    assert rec.config["gpu"] == "NVIDIA RTX 6000 Ada Generation"
    assert rec.stages[0].load == "closed" and rec.stages[0].max_concurrency == 1
    idle = [n for n in rec.notes if "sat idle" in n]
    assert len(idle) == 1 and idle[0].startswith(
        "stage 'concurrency 1': its 1 user(s) sat idle 3.09 s in all between a request's end "
        "and their next send (8 % of the stage's slot time; the longest 3.07 s, before send 3)")


def test_a_tight_closed_loop_is_not_said_idle() -> None:
    # AIPerf 0.13.0's own concurrency-4 run against the CPU vLLM: its users resent within ms
    assert not any("sat idle" in n for n in read_recording(AIPERF / "concurrency4.jsonl").notes)
