"""``simulate --cost-model`` says when the file adds no front-end time (``results/said.py``).

A file fitted on engine-side times (``calibrate --records ... --no-fit-overhead``, as the
measured vLLM runs of ``../shared/measured/`` ask) writes ``frontend_overhead_s`` 0; simulating
with it dropped the API server's modelled cost too (11.3 ms a request and more per token, what
the default model adds), so every TTFT and E2E was the engine's alone, and the output said
only "step times: the cost-model file's vllm-v1 model (calibrated from requests.csv)". Now the
line says there is no front-end time and how to add vLLM's.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, save_cost_model

SHORT = ["--set", "workload.duration_s=20", "--policy", "unlimited"]
NONE = "no front-end time (the file's frontend_overhead_s is 0"


def _said(*args: str) -> str:
    res = CliRunner().invoke(app, ["simulate", *SHORT, *args])
    assert res.exit_code == 0, res.output
    return " ".join((res.stdout + res.stderr).split())


def test_a_file_without_a_front_end_time_says_the_times_are_the_engines(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    save_cost_model(LinearCostModel(0.01, 2e-5, 1e-4, 1e-8), path,
                    extra={"frontend_overhead_s": 0.0})
    said = _said("--cost-model", str(path))
    assert NONE in said and "--set frontend=vllm-api-server adds vLLM's" in said
    # asked for, the API server's cost is simulated and the line does not say there is none
    said = _said("--cost-model", str(path), "--set", "frontend=vllm-api-server")
    assert "step times: the cost-model file's linear model" in said and NONE not in said
