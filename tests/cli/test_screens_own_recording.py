"""A newcomer's path with their own load tool's file: recording -> calibrated cost file -> what
the admission policy does at twice the load (docs/recordings.md, "Ask the what-if"). The files
are the fixtures the real tools wrote here (scripts/make_recording_fixtures.sh).

Before: ``simulate --trace bench.json`` refused a load tool's result ("is a recording, not a
trace: kvbudget validate --records FILE simulates its requests and compares"), which compares
at the recorded load and no other, and nothing read such a file as a workload: the what-if the
docs promise "on the recorded workload" had no path from it. A trace with no ``--gpu`` or
``--model`` was simulated on the default scenario's H100-80GB and Llama-3.1-8B, which the
``simulated:`` line named like the user's own; a cost file fitted on the user's GPU then told
only of ``--cost-model-transfer`` (which resets every parameter on another GPU)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.fitted_on import FitTarget
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from tests.unit.perf.test_fitted_on import fitted_file

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "recordings"
RATE8 = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
SWEEP = RECORDINGS / "guidellm-0.8.1" / "sweep.json"
TURNS = RECORDINGS / "aiperf-0.13.0" / "multiturn3_delay300_rate4c2.jsonl"


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def flat(text: str) -> str:
    return " ".join(text.split())


def test_a_trace_on_the_default_gpu_and_model_says_so(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    code, _, stderr = run("simulate", "--trace", trace)
    assert code == 0, stderr
    said = flat(stderr)
    assert ("assumed: GPU H100-80GB and model Llama-3.1-8B, the default scenario's: no --gpu or "
            "--model given") in said, stderr
    code, _, stderr = run("compare", "--trace", trace, "--gpu", "A100-80GB",
                          "--policies", "unlimited")
    assert code == 0, stderr
    assert "assumed: model Llama-3.1-8B, the default scenario's: no --model given" in flat(
        stderr) and "GPU H100-80GB" not in stderr
    code, _, stderr = run("simulate", "--trace", trace, "--gpu", "A100-80GB", "--set",
                          "model=Qwen2.5-7B")
    assert code == 0, stderr
    assert "the default scenario's" not in stderr, stderr


def test_a_scenario_file_without_gpu_says_whose_it_took(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'model = "Qwen2.5-7B"\n[workload]\nkind = "trace"\npath = "{trace}"\n')
    code, _, stderr = run("simulate", "--scenario", scenario)
    assert code == 0, stderr
    assert (f"assumed: GPU H100-80GB, the default scenario's: no --gpu given ({scenario} does "
            "not name it)") in flat(stderr), stderr


def test_plan_says_the_default_model_but_not_the_gpus_it_searches(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    code, _, stderr = run("plan", "--trace", trace, "--gpus", "A100-80GB", "--replicas", "1",
                          "-r", "1", "--policies", "unlimited", "--out", tmp_path / "plan")
    assert code == 0, stderr
    said = flat(stderr)
    assert "assumed: model Llama-3.1-8B, the default scenario's" in said, stderr
    assert "GPU H100-80GB" not in said


def test_a_cost_file_fitted_on_another_gpu_names_the_flags_of_its_own(tmp_path: Path) -> None:
    """A user who calibrated on their A100 and left out --gpu: the refusal names the flags that
    simulate the file's own deployment, not only the transfer (which on another GPU carries
    nothing)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    a100 = FitTarget(get_gpu("A100-80GB"), get_model("Qwen2.5-7B"), tensor_parallel_size=2)
    cost = fitted_file(tmp_path / "cost.json", a100, mem_efficiency=0.6)
    code, _, stderr = run("simulate", "--trace", trace, "--cost-model", cost)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert ("to use it as it was fitted, simulate its own deployment: --gpu A100-80GB --model "
            "Qwen2.5-7B --tensor-parallel-size 2 (plan: --gpus A100-80GB)") in lines[0]
    code, _, stderr = run("simulate", "--trace", trace, "--cost-model", cost, "--gpu",
                          "A100-80GB", "--model", "Qwen2.5-7B", "--tensor-parallel-size", "2")
    assert code == 0, stderr
