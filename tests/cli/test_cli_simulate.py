"""``kvbudget simulate``, ``compare`` and ``presets`` through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import tomli_w
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.records import RECORD_COLUMNS, TIMELINE_COLUMNS
from kvbudget.results.run_result import read_run
from tests.conftest import REPO, small_scenario_dict

runner = CliRunner()
SHORT = ["--set", "workload.duration_s=20"]


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def _lines(said: str) -> list[str]:
    """The lines of ``said`` with their wrapped continuations ("\\n  ") joined."""
    return said.replace("\n  ", " ").splitlines()


def test_simulate_writes_the_three_files_with_the_documented_schema(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stdout, _ = run("simulate", *SHORT, "--policy", "overcommit", "--out", str(out))
    assert code == 0, stdout
    assert "overcommit" in stdout and "TTFT p99" in stdout
    req = pq.read_table(out / "requests.parquet")
    assert req.column_names == list(RECORD_COLUMNS)
    tl = pq.read_table(out / "timeline.parquet")
    assert tl.column_names == list(TIMELINE_COLUMNS)
    summary = json.loads((out / "summary.json").read_text())
    for key in ("policy", "seed", "kv_capacity_tokens", "wall_time_s", "overall", "tiers", "kv"):
        assert key in summary
    assert set(summary["tiers"]) >= {"interactive", "batch"}
    block_keys = {"offered", "completed", "rejected_too_large", "rejected_overloaded", "expired",
                  "num_preemptions", "ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s",
                  "goodput_rps", "slo_attainment"}
    for block in [summary["overall"], *summary["tiers"].values()]:
        assert block_keys <= set(block)
        assert set(block["ttft_s"]) == {"mean", "p50", "p90", "p99"}
    assert set(summary["kv"]) >= {"used_mean", "used_p99", "reserved_mean",
                                  "reservation_efficiency"}
    assert summary["policy"] == "overcommit" and summary["overall"]["offered"] == req.num_rows


def test_simulate_json_and_engine_knobs() -> None:
    code, stdout, _ = run("simulate", *SHORT, "--json", "--num-gpu-blocks", "2000",
                          "--block-size", "32", "--max-num-seqs", "64",
                          "--max-num-batched-tokens", "4096", "--seed", "3")
    assert code == 0
    summary = json.loads(stdout)
    assert summary["kv_capacity_tokens"] == 64_000 and summary["seed"] == 3


def test_same_seed_same_records(tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert run("simulate", *SHORT, "--seed", "11", "--out", str(tmp_path / name))[0] == 0
    a = pq.read_table(tmp_path / "a" / "requests.parquet")
    b = pq.read_table(tmp_path / "b" / "requests.parquet")
    assert a.equals(b)


def test_compare_prints_each_policy_side_by_side(tmp_path: Path) -> None:
    code, stdout, _ = run("compare", *SHORT, "--policies", "conservative,preemptive",
                          "--out", str(tmp_path))
    assert code == 0
    assert "conservative" in stdout and "preemptive" in stdout
    assert (tmp_path / "preemptive" / "summary.json").is_file()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--policy", "greedy"], "unknown policy 'greedy'"),
        (["compare", "--policies", "conservative,nope"], "unknown policy 'nope'"),
        # the flag typed, not the scenario field it sets: "error: gpu: unknown GPU preset"
        (["simulate", "--gpu", "B300"], "error: --gpu: unknown GPU preset 'B300'"),
        (["simulate", "--model", "gpt-9"], "error: --model: unknown model preset 'gpt-9'"),
        (["capacity", "--gpu", "H10", "--out", "unused"],
         "error: --gpu: unknown GPU preset 'H10'"),
        (["plan", "--gpus", "H100,H10", "--replicas", "1", "--out", "unused"],
         "error: --gpus: unknown GPU preset 'H10'"),  # it named no option at all
        # the field was not named (fleet.gpus.1 and disaggregation.decode.gpu were)
        (["simulate", "--set", "gpu=H10"], "error: gpu: unknown GPU preset 'H10' (did you"),
        (["simulate", "--set", "model=Llama-3.1-8X"],
         "error: model: unknown model preset 'Llama-3.1-8X' (did you"),
        # the engine flags typed, not the engine.* fields they set
        (["simulate", "--num-gpu-blocks", "-5"], "error: --num-gpu-blocks: input should be"),
        (["simulate", "--max-num-seqs", "0"], "error: --max-num-seqs: input should be"),
        (["simulate", "-tp", "3"], "error: -tp/--tensor-parallel-size 3 does not divide"),
        (["simulate", "--seed", "-1"], "error: --seed: input should be greater than or equal"),
        (["simulate", "--set", "workload.arrival.rate_rps=-1"], "rate_rps"),
        (["simulate", "--set", "engine.bogus=1"], "engine.bogus"),
        (["simulate", "--set", "policy_params.overcommit_ratio=2", "--policy", "overcommit"],
         "overcommit_ratio"),
        (["simulate", "--trace", "/nonexistent/trace.csv"], "no such trace file"),
        (["simulate", "--set", "workload.tiers.5.share=1"],
         "workload.tiers has 2 entries (indices 0 to 1): no index 5"),
        (["simulate", "--set", "tiers.2.name=x"], "tiers has 2 entries"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    code, stdout, stderr = run(*args)
    assert code == 2, (stdout, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert needle in lines[0]
    assert "Traceback" not in stderr + stdout


def test_scenario_file_with_a_wrong_field_names_the_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('policy = "conservative"\n[engine]\nmax_num_seqs = "many"\n')
    code, _, stderr = run("simulate", "--scenario", str(bad))
    assert code == 2
    assert str(bad) in stderr and "engine.max_num_seqs" in stderr
    missing = tmp_path / "missing.toml"
    code, _, stderr = run("simulate", "--scenario", str(missing))
    assert code == 2 and "no such scenario file" in stderr


@pytest.mark.parametrize(("key", "value"), [("gpu", "H10"), ("model", "Llama-3.1-8X")])
def test_a_scenario_files_unknown_preset_names_the_file_and_key(
        tmp_path: Path, key: str, value: str) -> None:
    # it named the file and the preset, not the key: "bad.toml: unknown GPU preset 'H10'"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'policy = "conservative"\n{key} = "{value}"\n'
                   '[workload]\nkind = "synthetic"\n')
    code, _, stderr = run("simulate", "--scenario", str(bad))
    assert code == 2 and "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: {key}: unknown "), stderr


@pytest.mark.parametrize(("flag", "value"), [("--gpu", "H10"), ("--model", "Llama-3.1-8X")])
def test_a_flag_over_a_scenario_file_is_named_not_the_file(
        tmp_path: Path, flag: str, value: str) -> None:
    # it blamed the file for the flag's value: "good.toml: gpu: unknown GPU preset 'H10'"
    good = tmp_path / "good.toml"
    good.write_text('policy = "conservative"\n[workload]\nkind = "synthetic"\n')
    code, _, stderr = run("simulate", "--scenario", str(good), flag, value)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {flag}: unknown ") and str(good) not in stderr, stderr
    # validate --records takes them too (cli/simulate.build_scenario)
    rec = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-bench-0.32.0/rate8.json"
    flags = {"--gpu": "H100-80GB", "--model": "Llama-3.1-8B", flag: value}
    code, _, stderr = run("validate", "--records", str(rec), *(x for kv in flags.items()
                                                               for x in kv),
                          "--out", str(tmp_path / "v"))
    assert code == 2 and stderr.splitlines()[-1].startswith(f"error: {flag}: unknown "), stderr


def test_scenario_file_runs_a_trace(tmp_path: Path, shared: Path) -> None:
    scn = tmp_path / "s.toml"
    scn.write_text(
        'name = "bench"\npolicy = "conservative"\ngpu = "A100-80GB"\nmodel = "Llama-2-7B"\n'
        "[engine]\nnum_gpu_blocks = 7672\nmax_num_batched_tokens = 4096\n"
        f'[workload]\nkind = "trace"\npath = "{shared / "bench" / "conv_n2000_q6.jsonl"}"\n'
    )
    code, stdout, stderr = run("simulate", "--scenario", str(scn), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["offered"] == 2000


def test_presets_lists_gpus_models_and_capacity() -> None:
    code, stdout, _ = run("presets")
    assert code == 0
    for name in ("A100-80GB", "H100-80GB", "H200-141GB", "L40S", "Llama-3.1-8B",
                 "Llama-3.1-70B", "Qwen2.5-7B", "Mistral-7B-v0.3", "Mixtral-8x7B",
                 "Qwen3-30B-A3B", "DeepSeek-V2-Lite", "gpt-oss-20b", "Gemma-3-27B"):
        assert name in stdout


@pytest.mark.slow
def test_default_scenario_shows_the_trade_off() -> None:
    """The foundation issue's acceptance check on the embedded default scenario, one seed."""
    code, stdout, stderr = run("compare", "--json")
    assert code == 0, stderr
    s = {x["policy"]: x for x in json.loads(stdout)}
    cons, over = s["conservative"], s["overcommit"]
    # rates are over the offered window, so finishing the same work sooner shows as the drain
    assert (over["overall"]["completed"] > cons["overall"]["completed"]
            or over["drain_s"] < cons["drain_s"])
    assert over["engine"]["num_engine_preemptions"] > 0
    assert cons["engine"]["num_engine_preemptions"] == 0
    p99 = {k: v["tiers"]["interactive"]["ttft_s"]["p99"] for k, v in s.items()}
    assert p99["preemptive"] <= p99["conservative"]
    assert p99["unlimited"] == max(p99.values())


def test_calibrated_frontend_overhead_delays_first_token_and_finish(tmp_path: Path) -> None:
    """A cost-model file's ``frontend_overhead_s`` (``kvbudget calibrate``) is added to every
    completed request's first token and finish, as its client sees them; TPOT, the engine and
    the gateway are unchanged."""
    from kvbudget.perf.cost_model import LinearCostModel, save_cost_model

    model = LinearCostModel(0.01, 2e-5, 1e-4, 1e-8, per_prefill_seq_s=0.002)
    plain, with_overhead = tmp_path / "plain.json", tmp_path / "overhead.json"
    save_cost_model(model, plain)
    save_cost_model(model, with_overhead, extra={"frontend_overhead_s": 0.025})
    runs = {}
    for name, path in (("plain", plain), ("overhead", with_overhead)):
        out = tmp_path / name
        code, _, stderr = run("simulate", *SHORT, "--cost-model", str(path), "--out",
                                   str(out))
        assert code == 0, stderr
        runs[name] = (pq.read_table(out / "requests.parquet").to_pandas(),
                      json.loads((out / "summary.json").read_text()))
    (a, sa), (b, sb) = runs["plain"], runs["overhead"]
    assert sa["frontend_overhead_s"] == 0.0 and sb["frontend_overhead_s"] == 0.025
    assert list(a["status"]) == list(b["status"]) and list(a["admitted_s"]) == list(b["admitted_s"])
    done = a["status"] == "completed"
    assert done.sum() > 10
    for col in ("ttft_s", "e2e_s", "first_token_s", "finished_s"):
        assert (b.loc[done, col] - a.loc[done, col]).round(12).eq(0.025).all(), col
    assert (b.loc[done, "tpot_s"] - a.loc[done, "tpot_s"]).abs().max() < 1e-12
    assert sb["engine"]["num_steps"] == sa["engine"]["num_steps"]
    bad = tmp_path / "bad.json"
    save_cost_model(model, bad, extra={"frontend_overhead_s": -1})
    code, _, stderr = run("simulate", *SHORT, "--cost-model", str(bad))
    assert code == 2 and "frontend_overhead_s" in stderr and len(stderr.splitlines()) == 1


def test_the_table_says_the_step_times_and_front_end_a_cost_file_gave(tmp_path: Path) -> None:
    """A cost-model file's step times and its fixed front-end time per request (added to every
    first token and finish) changed the answer and went unsaid; the default model says
    nothing more."""
    from kvbudget.perf.cost_model import LinearCostModel, save_cost_model

    path = tmp_path / "cost.json"
    save_cost_model(LinearCostModel(0.01, 2e-5, 1e-4, 1e-8), path,
                    extra={"frontend_overhead_s": 0.025})
    code, stdout, stderr = run("simulate", *SHORT, "--cost-model", str(path))
    assert code == 0, stderr
    said = " ".join((stdout + stderr).split())
    assert "step times: the cost-model file's linear model" in said
    assert "a fixed front-end time of 25.00 ms per request (the file's frontend_overhead_s)" in said
    code, stdout, stderr = run("simulate", *SHORT)
    assert code == 0 and "step times:" not in stdout + stderr


def test_presets_show_vllms_defaults_per_gpu() -> None:
    code, stdout, _ = run("presets")
    assert code == 0
    lines = {line.split()[0]: line.split() for line in stdout.splitlines() if line.strip()}
    # vLLM 0.32.0's `vllm serve` defaults: 1024 / 8192 on H100, 1024 / 16384 on B200, 256 / 2048
    # on A100 (arg_utils.py:2973-3006)
    assert lines["H100-SXM"][-2:] == ["1,024", "8,192"]
    assert lines["B200"][-2:] == ["1,024", "16,384"]
    assert lines["A100-80GB"][-2:] == ["256", "2,048"]
    for name in ("A10G", "L4", "H100-PCIe", "H20", "MI300X", "RTX-4090", "RTX-PRO-6000"):
        assert name in lines


def test_a_gpu_file_runs_and_a_bad_one_exits_2_naming_the_field(tmp_path: Path) -> None:
    good = tmp_path / "gpu.toml"
    good.write_text('name = "MyGPU"\nmemory_gib = 80\nhbm_bandwidth_bytes_s = 2.0e12\n'
                    'bf16_flops = 5.0e14\n')
    code, stdout, stderr = run("simulate", *SHORT, "--gpu", str(good), "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["cost_model"]["gpu"] == "MyGPU"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "X", "memory_gib": 80, "hbm_bandwidth_bytes_s": 2e12,
                               "bf16_flops": -1}))
    code, _, stderr = run("simulate", *SHORT, "--gpu", str(bad))
    assert code == 2 and "field 'bf16_flops'" in stderr and len(stderr.strip().splitlines()) == 1


def test_engine_defaults_and_frontend_flags() -> None:
    """--engine-defaults kvbudget-0.1 brings back the roofline, 256 / 8192, no prefix caching
    and no API-server cost; --frontend none removes the API server from the default."""
    code, stdout, stderr = run("simulate", *SHORT, "--json")
    assert code == 0, stderr
    new = json.loads(stdout)
    assert new["cost_model"]["kind"] == "vllm-v1" and new["frontend"]["per_request_s"] > 0
    code, stdout, stderr = run("simulate", *SHORT, "--json", "--engine-defaults", "kvbudget-0.1")
    assert code == 0, stderr
    old = json.loads(stdout)
    assert old["cost_model"]["kind"] == "roofline" and old["frontend"]["per_request_s"] == 0
    code, stdout, stderr = run("simulate", *SHORT, "--json", "--frontend", "none")
    assert code == 0, stderr
    engine_side = json.loads(stdout)
    assert engine_side["frontend"]["per_request_s"] == 0
    ttft = (new["overall"]["ttft_s"]["p50"], engine_side["overall"]["ttft_s"]["p50"])
    assert ttft[0] > ttft[1]
    code, _, stderr = run("simulate", *SHORT, "--engine-defaults", "kvbudget-9")
    assert code == 2 and "engine_defaults" in stderr


def test_the_simulated_line_gives_the_arrivals_span_and_rate(tmp_path: Path) -> None:
    """Times in milliseconds under a seconds column show as a span a thousand times too long
    (the run exits 0: nothing else can tell); a closed loop's users send, so no span."""
    trace = tmp_path / "ms.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 250},100,20\n" for i in range(41)))  # 4 req/s, written in ms
    code, stdout, stderr = run("simulate", "--trace", str(trace))
    assert code == 0, stderr
    assert ("workload ms: 41 requests over 2.78 h (0.004 req/s: 40 gaps between arrivals)"
            in stdout.replace("\n  ", " "))
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--rate-scale", "1000")
    assert ("workload ms: 41 requests over 10.0 s (4 req/s: 40 gaps between arrivals)"
            in stdout.replace("\n  ", " "))
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--users", "2")
    assert "workload ms: 41 requests, sent in closed loop by 2 users" in stdout.replace(
        "\n  ", " ")


H100 = ("engine vllm (vLLM 0.32.0's defaults for unset knobs, max_num_seqs 1,024, "
        "max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on, prefix caching "
        "on (no prefixes to share), bfloat16 weights, 16-bit KV, block_size 16, "
        "gpu_memory_utilization 0.92), KV capacity 438,192 tokens (27,387 blocks), the gateway's "
        "budget")
"""What serves Llama-3.1-8B on one H100-80GB with vLLM's defaults, as ``simulate``'s line and a
study's first line say it."""


def test_what_a_trace_leaves_unsaid_is_said_with_the_answer(tmp_path: Path) -> None:
    """A length-only table without tiers or max_tokens: the drawn arrivals (a warning), the
    tier and the declared max_tokens it assumed are printed with the table and kept in the
    summary; the table names the model, the GPU and the KV capacity it simulated."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("prompt_tokens,output_tokens\n" + "100,20\n" * 30)
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--max-num-seqs", "8")
    assert code == 0, stderr
    lines = stdout.replace("\n  ", " ").splitlines()
    assert lines[0].startswith("simulated: Llama-3.1-8B (assumed: the default scenario's) on "
                               "H100-SXM (assumed: the default scenario's H100-80GB), engine vllm")
    assert "workload lengths: 30 requests" in lines[0] and "KV capacity " in lines[0]
    assert lines[1].startswith("assumed: GPU H100-80GB and model Llama-3.1-8B, the default "
                               "scenario's")  # neither flag given, nor a scenario file
    # what the file held, tier by tier (a run said its request count alone before)
    assert lines[2] == ("workload lengths: source lengths.csv, format generic-csv; interactive 30 "
                        "(100%): prompt mean 100 tokens, output mean 20, max_tokens 2,048")
    assert lines[3].startswith("warning: the file has no arrival times: Poisson arrivals at 1")
    assert lines[4].startswith("assumed: the file names no tier: every request is 'interactive'")
    assert lines[5].startswith("assumed: no max_tokens read from the file: max_output_tokens 2,048 "
                               "(or the true output where longer)")
    assert lines[6].startswith("policy ")
    code, stdout, _ = run("simulate", "--trace", str(trace), "--json", "--max-output", "factor:2",
                          "--default-tier", "batch")
    workload = json.loads(stdout)["workload"]
    assert workload["assumed"] == [
        "the file names no tier: every request is 'batch' (--tier-column, --tier-shares or "
        "--default-tier choose; in a scenario, [workload.options] tier_column, tier_shares or "
        "default_tier)",
        "no max_tokens read from the file: max_output_tokens 2x the true output, which a reserving "
        "policy holds beside the prompt (--max-output chooses; in a scenario, [workload.options] "
        "max_output or max_output_by_tier)"]
    assert len(workload["warnings"]) == 1
    # a closed loop of users sends the requests: the drawn arrivals go unused and unsaid
    code, stdout, _ = run("simulate", "--trace", str(trace), "--json", "--users", "2",
                          "--think-time-s", "1")
    assert code == 0 and "warnings" not in json.loads(stdout)["workload"]
    # a study's table has no room for them: sweep says them on stderr before its runs
    code, _, stderr = run("sweep", "--trace", str(trace), "--policies", "unlimited",
                          "--replications", "1", "--out", str(tmp_path / "sweep"))
    assert code == 0, stderr
    # what serves the runs and what the file holds, as simulate says them
    assert _lines(stderr)[0] == ("model Llama-3.1-8B (assumed: the default scenario's) on "
                                 f"H100-SXM (assumed: the default scenario's H100-80GB), {H100}; "
                                 "workload lengths: 30 requests over 30.1 s (0.963 req/s: 29 gaps "
                                 "between arrivals)")
    assert _lines(stderr)[1] == ("workload lengths: source lengths.csv, format generic-csv; "
                                 "interactive 30 (100%): prompt mean 100 tokens, output mean 20, "
                                 "max_tokens 2,048")
    assert [ln.split(":")[0] for ln in _lines(stderr)[2:5]] == ["warning", "assumed",
                                                                "assumed"]
    assert _lines(stderr)[4].startswith("assumed: lengths: no max_tokens read from the file")
    code, _, stderr = run("sweep", "--trace", str(trace), "--policies", "unlimited",
                          "--replications", "1", "--out", str(tmp_path / "sweep2"),
                          "--users", "2", "--think-time-s", "1",
                          "--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert code == 0, stderr
    # the model as the runs resolved it, with the name it was given
    assert _lines(stderr)[0] == (
        "model Llama-3.1-8B (given as meta-llama/Llama-3.1-8B-Instruct) on H100-SXM (assumed: the "
        f"default scenario's H100-80GB), {H100}; workload lengths: 30 requests, sent in closed "
        "loop by 2 users")
    assert not any(ln.startswith("warning:") for ln in _lines(stderr))
    # a study that varies the GPU names none
    code, _, stderr = run("sweep", "--trace", str(trace), "--policies", "unlimited",
                          "--replications", "1", "--out", str(tmp_path / "sweep3"),
                          "--grid", "gpu=A100-80GB,L40S")
    assert code == 0, stderr
    # (nor the knobs whose defaults are each GPU's, nor a KV capacity: each run's own)
    assert _lines(stderr)[0] == ("model Llama-3.1-8B (assumed: the default scenario's) on the "
                                 "deployments the study tries (each with its own KV capacity and "
                                 "its GPU's default max_num_seqs and max_num_batched_tokens), "
                                 "engine vllm (vLLM 0.32.0's "
                                 "defaults for unset knobs, max_model_len 131,072, chunked "
                                 "prefill on, prefix caching on (no prefixes to share), bfloat16 "
                                 "weights, 16-bit KV, block_size 16, gpu_memory_utilization "
                                 "0.92); workload lengths: 30 requests over 30.1 s "
                                 "(0.963 req/s: 29 gaps between arrivals)")
    # nor the model where it varies the model (it named the scenario's, Llama-3.1-8B)
    code, _, stderr = run("sweep", "--trace", str(trace), "--policies", "unlimited",
                          "--replications", "1", "--out", str(tmp_path / "sweep4"),
                          "--grid", "model=Llama-3.1-8B,Qwen2.5-7B")
    assert code == 0, stderr
    # (nor the model's context and weights, nor a KV capacity)
    assert _lines(stderr)[0] == ("models as the study varies them on H100-SXM (assumed: the "
                                 "default scenario's H100-80GB), engine vllm (vLLM 0.32.0's "
                                 "defaults for unset knobs, max_num_seqs 1,024, "
                                 "max_num_batched_tokens 8,192, chunked prefill on, prefix "
                                 "caching on (no prefixes to share), 16-bit KV, block_size 16, "
                                 "gpu_memory_utilization 0.92); workload lengths: 30 requests "
                                 "over 30.1 s (0.963 req/s: 29 gaps between arrivals)")
    # a workload the study varies is said as the scenario's
    code, _, stderr = run("sweep", "--policies", "unlimited", "--replications", "1",
                          "--out", str(tmp_path / "sweep5"),
                          "--grid", "workload.duration_s=5,10")
    assert code == 0, stderr
    assert _lines(stderr)[0].endswith(
        "; workload default: 1,668 requests over 5.0 min (5.56 req/s: 1,667 gaps between "
        "arrivals) in the replication's draw at the scenario's values (the study varies "
        "workload.duration_s), each replication drawing its own requests and count; the "
        "scenario's seed 0, which no replication runs, draws the mix below: 1,617 requests over "
        "4.99 min (5.4 req/s: 1,616 gaps between arrivals)")


def test_compare_with_replications_says_the_model_and_what_it_assumed(tmp_path: Path) -> None:
    """Before, ``compare -r N`` printed its table alone: no model, no workload, none of the
    trace's assumptions (which ``compare`` without ``-r`` and every study say)."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("prompt_tokens,output_tokens\n" + "100,20\n" * 30)
    code, stdout, stderr = run("compare", "--trace", str(trace), "--policies",
                               "unlimited,conservative", "-r", "2", "-j", "1", "--model",
                               "Qwen2.5-7B", "--json")
    assert code == 0, stderr
    json.loads(stdout)  # stdout stays the JSON alone
    lines = _lines(stderr)
    assert lines[0] == ("model Qwen2.5-7B on H100-SXM (assumed: the default scenario's "
                        "H100-80GB), engine vllm (vLLM 0.32.0's defaults for unset knobs, "
                        "max_num_seqs 1,024, max_num_batched_tokens 8,192, max_model_len 131,072, "
                        "chunked prefill on, prefix caching on (no prefixes to share), bfloat16 "
                        "weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV "
                        "capacity 1,004,016 tokens (62,751 blocks), the gateway's budget; "
                        "workload lengths: "
                        "30 requests over 30.1 s (0.963 req/s: 29 gaps "
                                 "between arrivals)")
    assert [ln.split(":")[0] for ln in lines[1:5]] == ["workload lengths", "warning", "assumed",
                                                       "assumed"]


def test_a_trace_that_says_everything_assumes_nothing(tmp_path: Path) -> None:
    """Tiers and max_tokens in the file, arrivals in order: no warning, nothing assumed; with
    max_tokens on some rows only, the rest are counted. compare says each line once."""
    trace = tmp_path / "full.csv"
    rows = [f"{i * 0.5},100,20,{'' if i % 3 else 64},interactive" for i in range(30)]
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,tier\n"
                     + "\n".join(r.replace(",,", ",64,") for r in rows) + "\n")
    code, stdout, _ = run("simulate", "--trace", str(trace), "--json")
    assert code == 0
    workload = json.loads(stdout)["workload"]
    assert set(workload) == {"name", "num_requests", "mix"}
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,tier\n"
                     + "\n".join(rows) + "\n")
    code, stdout, stderr = run("compare", "--trace", str(trace), "--policies",
                               "unlimited,conservative", "--gpu", "H100-80GB", "--model",
                               "Llama-3.1-8B")  # a trace names neither: given, not assumed
    assert code == 0, stderr
    said = [ln for ln in stdout.replace("\n  ", " ").splitlines()
            if ln.startswith(("simulated:", "assumed:", "warning:"))]
    assert len(said) == 2 and said[0].startswith("simulated: ")
    assert said[1].startswith("assumed: 20 of 30 requests have no max_tokens read from the file: "
                              "max_output_tokens 2,048")


def test_an_engine_preset_without_prefix_caching_says_the_hashes_went_unused(
        tmp_path: Path) -> None:
    """Mooncake's conversation trace (kvcache-ai/Mooncake FAST25-release/traces, commit
    a2a4b18a) shares a first 512-token block in every request: on --engine sglang (its preset
    models prefix caching off) the hashes shared no KV, unsaid; with the flag set they do."""
    trace = tmp_path / "conversation.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 1100,
                                         "output_length": 20, "hash_ids": [0, 2 * i + 1,
                                                                          2 * i + 2]}) + "\n"
                             for i in range(6)))
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--engine", "sglang",
                               "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["assumed"] == [
        "prefix caching off (vllm's default for engine sglang): the workload's 18 prefix "
        "block hashes (512 tokens each) shared no KV (--set engine.enable_prefix_caching=true "
        "models it on)"]
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--engine", "sglang",
                               "--json", "--set", "engine.enable_prefix_caching=true")
    summary = json.loads(stdout)
    assert "assumed" not in summary and summary["engine"]["prefix_cache_hit_tokens"] > 0
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json")
    assert "assumed" not in json.loads(stdout)


def test_the_default_tiers_limit_is_said_where_it_refuses(tmp_path: Path) -> None:
    """Prompts over the default tiers' 32,768 tokens (the model takes 131,072): the refusals
    are said as the default's, with the way to change it; --set tiers.0.max_sequence_tokens
    changes the default tiers (admitting them), and then nothing is said."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n"
                     + "".join(f"{i},{40_000 if i % 2 else 500},10,16\n" for i in range(6)))
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 3
    assert summary["assumed"] == [
        "the default tiers' max_sequence_tokens (32,768) refused 3 requests as too large "
        "(prompt + max_output_tokens above it) before any prefill; the model's context is "
        "131,072 tokens: give the tiers' limits (--set tiers.0.max_sequence_tokens=N, or "
        "[[tiers]] in a scenario)"]
    code, stdout, _ = run("simulate", "--trace", str(trace))
    assert "assumed: conservative: the default tiers' max_sequence_tokens (32,768) refused 3" \
        in stdout.replace("\n  ", " ")
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json",
                               "--set", "tiers.0.max_sequence_tokens=131072")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 0 and "assumed" not in summary
    assert summary["tiers"]["interactive"]["completed"] == 6
    # refused for the capacity (20 blocks of 16 tokens), not the tiers' limit: nothing said
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json",
                               "--set", "tiers.0.max_sequence_tokens=131072",
                               "--num-gpu-blocks", "20")
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 6 and "assumed" not in summary
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json",
                               "--num-gpu-blocks", "20")
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 6
    assert summary["assumed"][0].startswith("the default tiers' max_sequence_tokens (32,768) "
                                            "refused 3 requests")
    # one tier's limit set, the other's still the default's: that one's refusals are said
    two = tmp_path / "two.csv"
    two.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,tier\n" + "".join(
        f"{i},40000,10,16,{'batch' if i % 2 else 'interactive'}\n" for i in range(6)))
    code, stdout, stderr = run("simulate", "--trace", str(two), "--json",
                               "--set", "tiers.0.max_sequence_tokens=131072")
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 3, stderr
    assert summary["assumed"][0].startswith(
        "the default max_sequence_tokens (32,768) of tier batch refused 3 requests")
    assert "(--set tiers.1.max_sequence_tokens=N," in summary["assumed"][0]
    # and the table says why each refused request was refused
    mid = tmp_path / "mid.csv"  # over a 4,096-token model's context, under the tiers' limit
    mid.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n0,5000,10,16\n"
                   "1,100,10,5000\n2,100,10,16\n")
    code, stdout, _ = run("simulate", "--trace", str(mid), "--model", "Llama-2-7B")
    # said once: the assumed line counts them (with the limit and whose it is), the refused
    # line does not count them again
    assert ("assumed: conservative: max_model_len 4,096 (the model's context, vLLM's default) "
            "refused 2 requests before any prefill: 1 prompt as long as it or longer, 1 whose "
            "max_output_tokens is over it") in stdout.replace("\n  ", " ")
    assert "\nrefused: " not in stdout and "prompt_too_long" not in stdout
    code, stdout, _ = run("simulate", "--trace", str(mid), "--model", "Llama-2-7B", "--set",
                          "engine.max_model_len=4096")
    assert ("refused: conservative: 1 context_length (max_tokens over it), 1 "
            "prompt_too_long (prompt over the model's context, 4,096 tokens)"
            ) in stdout.replace("\n  ", " ")
    assert "assumed: conservative" not in stdout
    code, stdout, _ = run("compare", "--trace", str(mid), "--model", "Llama-2-7B",
                          "--policies", "unlimited,conservative")
    assert stdout.replace("\n  ", " ").count("max_model_len 4,096 (the model's context") == 1, \
        stdout
    assert "assumed: unlimited, conservative: max_model_len 4,096" in stdout.replace("\n  ", " ")
    code, stdout, _ = run("simulate", "--trace", str(two), "--num-gpu-blocks", "20")
    # said once, as the context's are: the assumed line counts them, the refused line does
    # not count them again (it said "6 too large for the gateway" beside the assumed line's 6)
    assert ("assumed: conservative: the default tiers' max_sequence_tokens (32,768) refused 6 "
            "requests") in stdout.replace("\n  ", " ")
    assert "\nrefused: " not in stdout
    code, stdout, _ = run("simulate", "--trace", str(two), "--num-gpu-blocks", "20", "--set",
                          "tiers.0.max_sequence_tokens=131072", "--set",
                          "tiers.1.max_sequence_tokens=131072")
    assert ("refused: conservative: 6 too large for the gateway (a tier's max_sequence_tokens "
            "or the KV capacity)") in stdout.replace("\n  ", " ")


def test_the_refused_line_counts_each_refusal_once_and_no_expired_one(tmp_path: Path) -> None:
    """The engine's own too-large refusals (reason ``max_model_len``: a prompt whose blocks
    exceed the whole KV cache, admitted under a larger gateway budget) are not also counted as
    the gateway's (1 refused request was said as 2); requests that expired at the run's end
    (``end_of_run``) are the table's expired column, not refusals."""
    from kvbudget.cli.tables import render_summaries

    small = tmp_path / "small.csv"
    small.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n0,5000,10,16\n"
                     "1,100,10,16\n2,100,10,16\n")
    code, stdout, stderr = run("simulate", "--trace", str(small), "--policy", "unlimited",
                               "--num-gpu-blocks", "40", "--set",
                               "gateway_capacity_tokens=100000", "--json")
    summary = json.loads(stdout)
    assert code == 0 and summary["overall"]["rejected_too_large"] == 1, stderr
    assert summary["overall"]["rejections_by_reason"] == {"max_model_len": 1}
    line = next(ln for ln in render_summaries([summary]).replace("\n  ", " ").splitlines()
                if ln.startswith("refused:"))
    assert line == ("refused: unlimited: 1 max_model_len (the engine's: it could never run them, "
                    "prompt + output over its max_model_len or the prompt's blocks over its "
                    "whole KV cache)")
    expired = {**summary, "overall": {**summary["overall"], "rejected_too_large": 0, "expired": 2,
                                      "rejections_by_reason": {"end_of_run": 2}}}
    assert not any(ln.startswith("refused:") for ln in render_summaries([expired]).splitlines())


def test_the_default_tiers_note_names_the_tiers_that_refused_and_not_the_contexts(
        tmp_path: Path) -> None:
    """The batch tier's refusals name tiers.1; on Llama-2-7B (a 4,096-token context) the same
    requests are beyond the model itself, which no tier limit changes: the default tiers'
    line says nothing, and the model's context (vLLM's default) refused them, as it says
    where no tier limit refuses them first."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,tier\n"
                     + "".join(f"{i},{40_000 if i % 2 else 500},10,16,"
                               f"{'batch' if i % 2 else 'interactive'}\n" for i in range(6)))
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["tiers"]["batch"]["rejected_too_large"] == 3
    assert summary["assumed"][0].endswith(
        "(--set tiers.1.max_sequence_tokens=N, or [[tiers]] in a scenario)")
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json",
                               "--model", "Llama-2-7B")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["rejected_too_large"] == 3
    context = ("max_model_len 4,096 (the model's context, vLLM's default) refused 3 requests "
               "before any prefill: 3 prompts as long as it or longer, 0 whose "
               "max_output_tokens is over it (--set engine.max_model_len=N gives your server's)")
    assert summary["assumed"] == [context]
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json", "--model",
                               "Llama-2-7B", "--set", "tiers.1.max_sequence_tokens=131072")
    assert json.loads(stdout)["assumed"] == [context], stderr


def test_refusals_beyond_the_context_are_the_contexts_in_every_line(tmp_path: Path) -> None:
    """A Mooncake trace on the default tiers: the default tiers' assumed line counted 711
    refusals, leaving out the 10 prompts beyond the model's 131,072-token context, while the
    refused line counted all 721 as "too large for the gateway (a tier's max_sequence_tokens
    or the KV capacity)": the two lines grouped the 10 differently and the 711 were counted
    twice. Now the prompts beyond the context are the context's refusals in every line, whoever
    refused them first, and each refusal is counted once: tiers' + context's = the refused
    column, with no refused line; the context's count is the same with the tiers' limit raised."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i},{p},10,16\n" for i, p in enumerate([500, 40_000, 140_000, 40_000, 135_000, 600])))
    code, stdout, stderr = run("simulate", "--trace", str(trace))
    assert code == 0, stderr
    flat = stdout.replace("\n  ", " ")
    assert ("assumed: conservative: the default tiers' max_sequence_tokens (32,768) refused 2 "
            "requests") in flat
    context = ("max_model_len 131,072 (the model's context, vLLM's default) refused 2 requests "
               "before any prefill: 2 prompts as long as it or longer")
    assert f"assumed: conservative: {context}" in flat
    assert "\nrefused: " not in stdout
    row = next(ln for ln in stdout.splitlines() if ln.startswith("conservative          all"))
    assert row.split()[4] == "4", row  # the refused column: 2 + 2
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json")
    assert json.loads(stdout)["gateway_too_large"] == {"default_tiers": 2, "prompt_too_long": 2}
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--set",
                               "tiers.0.max_sequence_tokens=200000")
    assert f"assumed: conservative: {context}" in stdout.replace("\n  ", " "), stdout
    assert "max_sequence_tokens (32,768)" not in stdout
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--set",
                               "engine.max_model_len=131072")
    assert ("refused: conservative: 2 prompt_too_long (prompt over the model's context, 131,072 "
            "tokens)") in stdout.replace("\n  ", " "), stdout


@pytest.mark.parametrize(("sets", "where"), [
    # the router and the budget, the defaults' where not given (were unsaid)
    (["fleet.num_replicas=2"], "on 2 replicas of H100-SXM (assumed: the default scenario's "
     "H100-80GB), routed round_robin, one token budget over them, engine vllm "
     "(vLLM 0.32.0's defaults for unset knobs, max_num_seqs 1,024, max_num_batched_tokens 8,192, "
     "max_model_len 131,072, chunked prefill on, prefix caching on (no prefixes to share), "
     "bfloat16 weights, 16-bit "
     "KV, block_size 16, gpu_memory_utilization 0.92)"),
    (["fleet.num_replicas=3", 'fleet.gpus=["H100-80GB","H200","H100-80GB"]'],
     # each GPU as one engine's line says it: the preset, and the name given
     "on 3 replicas (2 of H100-SXM (given as H100-80GB); 1 of H200), routed round_robin, one "
     "token budget over "
     "them, engine vllm (vLLM 0.32.0's defaults for unset knobs, "
     "max_num_seqs 1,024"),
    (["fleet.num_replicas=2", 'fleet.gpus=["L40S","H100-80GB"]'],
     # the caps each GPU's; the knobs no GPU's defaults set, once
     "on 2 replicas (1 of L40S, max_num_seqs 256, max_num_batched_tokens 2,048; 1 of H100-SXM "
     "(given as H100-80GB), max_num_seqs 1,024, max_num_batched_tokens 8,192), routed "
     "round_robin, one token budget over them, engine vllm (vLLM 0.32.0's defaults for unset "
     "knobs, max_model_len 131,072, chunked prefill on, prefix caching on (no prefixes to "
     "share), bfloat16 weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV "
     "capacity "),
    # a fleet whose gpus name one GPU for all: that GPU and its caps, not the run's (it said
    # '2 replicas of H100-SXM (assumed: ...), max_num_seqs 1,024' of two A100s running 256)
    (["fleet.num_replicas=2", 'fleet.gpus=["A100-80GB","A100-80GB"]'],
     "on 2 replicas of A100-80GB, routed round_robin, one token budget over them, engine vllm "
     "(vLLM 0.32.0's defaults for unset knobs, max_num_seqs 256, max_num_batched_tokens 2,048, "
     "max_model_len 131,072"),
    # 4 replicas x 438,192 tokens (the single-engine line's figure)
    (["fleet.autoscale.max_replicas=4"], "on 1 to 4 replicas (autoscaled) of H100-SXM (assumed: "
     "the default scenario's H100-80GB), routed round_robin, one token budget over them, engine vllm (vLLM 0.32.0's defaults for unset knobs, max_num_seqs 1,024, "
     "max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on, prefix caching on (no prefixes to "
     "share), bfloat16 weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV "
     "capacity 1,752,768 tokens (at 4 replicas); "
     "workload"),
    (["disaggregation.prefill.num_replicas=1", "disaggregation.decode.num_replicas=2",
      "disaggregation.decode.gpu=H200", "disaggregation.decode.engine={tensor_parallel_size=2}",
      "disaggregation.prefill.engine={max_num_batched_tokens=16384}"],
     # the prefill pool on the run's GPU, which nobody gave; the knobs each pool's where they
     # differ (a decode replica caches no prefixes: its prompts' KV comes over the link)
     "on disaggregated pools (prefill: 1 replica of H100-SXM (assumed: the default scenario's "
     "H100-80GB), routed least_tokens, max_num_seqs 1,024, max_num_batched_tokens 16,384, "
     "prefix caching on (no prefixes to share); decode: 2 replicas of 2 x H200, routed "
     "least_tokens, max_num_seqs 1,024, max_num_batched_tokens 8,192, prefix caching off), "
     "engine vllm (vLLM 0.32.0's defaults for unset knobs, max_model_len 131,072, chunked "
     "prefill on, bfloat16 weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV "
     # the gateway's budget: the decode pool's 2 replicas x 120,003 blocks x 16 tokens
     "capacity 3,840,096 tokens (the decode pool's), the gateway's budget; workload default"),
], ids=["fleet", "mixed-fleet", "mixed-caps", "one-gpu-fleet", "autoscaled", "disaggregated"])
def test_the_simulated_line_names_the_deployment(sets: list[str], where: str) -> None:
    """A fleet's replicas (their GPUs where they differ, an autoscaled one's bounds) and a
    disaggregated deployment's pools, each with its GPU, TP and scheduler caps: the KV
    capacity beside them is the deployment's, not one GPU's (it said 'on H100-SXM' of all)."""
    args = [a for kv in sets for a in ("--set", kv)]
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", *args)
    assert code == 0, stderr
    first = stdout.replace("\n  ", " ").splitlines()[0]
    assert first.startswith("simulated: Llama-3.1-8B (assumed: the default scenario's) " + where), \
        first


@pytest.mark.parametrize(("gpus", "caps"), [
    # two A100s on a run whose GPU (the default scenario's H100) none of them is: summary.json
    # said max_num_seqs 1,024 and max_num_batched_tokens 8,192, the H100's, beside a header
    # saying the A100s' 256 and 2,048
    ('["A100-80GB","A100-80GB"]', {"max_num_seqs": 256, "max_num_batched_tokens": 2048}),
    # an L40S beside an H100: each replica's own caps, none for the fleet
    ('["L40S","H100-80GB"]', None),
], ids=["one-gpu-fleet", "mixed-caps"])
def test_a_fleets_summary_says_the_knobs_its_replicas_ran(
        gpus: str, caps: dict[str, int] | None, tmp_path: Path) -> None:
    """summary.json's ``engine_knobs`` are the knobs the replicas ran on the GPUs ``fleet.gpus``
    names, as the ``simulated:`` line says them; caps that differ between replicas are each
    replica's (``engine.fleet.replicas``), not one GPU's for all."""
    out = tmp_path / "run"
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--set",
                               "fleet.num_replicas=2", "--set", f"fleet.gpus={gpus}",
                               "--out", str(out))
    assert code == 0, stderr
    first = _lines(stdout)[0]
    summary = json.loads((out / "summary.json").read_text())
    knobs, replicas = summary["engine_knobs"], summary["engine"]["fleet"]["replicas"]
    for r in replicas:  # each replica's, said with its GPU
        assert f"max_num_seqs {r['max_num_seqs']:,}, max_num_batched_tokens " \
            f"{r['max_num_batched_tokens']:,}" in first, first
    if caps is None:
        assert not {"max_num_seqs", "max_num_batched_tokens"} & set(knobs), knobs
        assert len({(r["max_num_seqs"], r["max_num_batched_tokens"]) for r in replicas}) == 2
    else:
        assert {k: knobs[k] for k in caps} == caps, knobs
        assert all({k: r[k] for k in caps} == caps for r in replicas), replicas
        assert first.count("max_num_seqs") == 1, first  # said once, as the summary has it
    for k in ("max_model_len", "gpu_memory_utilization"):  # what every replica ran alike
        assert f"{k} {knobs[k]:,}" in first or f"{k} {knobs[k]:g}" in first, (k, first)


def test_a_pool_the_model_does_not_fit_is_named_with_its_own_tensor_parallelism() -> None:
    """Qwen2.5-32B's 61 GiB on the decode pool's L4s: the error names the pool and the pool's
    own engine field (engine.tensor_parallel_size would change the prefill pool's too)."""
    pools = ["--set", "disaggregation.prefill.num_replicas=1", "--set",
             "disaggregation.decode.num_replicas=1", "--set", "disaggregation.decode.gpu=L4"]
    code, _, stderr = run("simulate", "--model", "Qwen2.5-32B", "--gpu", "H200", *pools)
    assert code == 2
    assert stderr.startswith("error: disaggregation.decode: Qwen2.5-32B does not fit on L4 ")
    assert stderr.rstrip().endswith("it fits at disaggregation.decode.engine.tensor_parallel_size=4")


def test_the_simulated_line_says_a_closed_loop_sent_the_workload() -> None:
    """--users replaces the workload's arrival times: the line says so (it said nothing)."""
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--users", "4",
                               "--think-time-s", "2")
    assert code == 0, stderr
    first = stdout.replace("\n  ", " ").splitlines()[0]
    assert first.endswith("; workload default: 20 requests, sent in closed loop by 4 users "
                          "(think time 2 s, fixed)"), first
    code, stdout, _ = run("simulate", "--set", "workload.num_requests=20")
    assert stdout.replace("\n  ", " ").splitlines()[0].endswith(
        "; workload default: 20 requests over 4.53 s (4.19 req/s: 19 gaps between "
        "arrivals)")  # open loop: its arrivals


def test_an_unread_max_tokens_column_is_not_called_absent(tmp_path: Path) -> None:
    """A generic file's max_tokens column the format does not read: the warning names it and
    the assumed line says none was read (it said the file gives none)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_tokens\n0,10,5,20\n1,10,5,20\n")
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--json")
    assert code == 0, stderr
    workload = json.loads(stdout)["workload"]
    assert workload["warnings"][0].startswith("columns not read: max_tokens ")
    assert workload["assumed"][1].startswith("no max_tokens read from the file: ")


def test_a_measured_runs_table_does_not_say_simulated() -> None:
    """kvbudget replay prints a live run's summary with the same tables: it simulated nothing
    (the line read 'simulated: None on None, engine  (None's defaults ...)')."""
    from kvbudget.cli.tables import render_summaries, setting_lines

    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--json")
    assert code == 0, stderr
    simulated = json.loads(stdout)
    assert setting_lines([simulated])[0].startswith(
        "simulated: Llama-3.1-8B (assumed: the default scenario's) on H100-SXM")
    # the keys live/replay.py's summary has beyond summarize()'s own
    live = {k: v for k, v in simulated.items() if k not in (
        "gpu", "model", "cost_model", "engine_knobs", "engine_defaults", "frontend",
        "frontend_overhead_s", "num_gpu_blocks", "block_size")}
    live |= {"executor": "live", "engine": {"num_engine_preemptions": 0,
                                            "num_gateway_revocations": 0},
             "workload": {"num_requests": 20, "num_recorded": 20}}
    assert setting_lines([live]) == []
    assert "simulated:" not in render_summaries([live])


def test_a_given_gateway_budget_is_said() -> None:
    # before: neither the table nor the summary named the gateway's 100,000-token budget; the
    # line said 'KV capacity 438,192 tokens' and the run queued for a limit it never showed
    code, stdout, stderr = run("simulate", "--set", "gateway_capacity_tokens=100000", "--set",
                               "workload.num_requests=6")
    assert code == 0, stderr
    assert ("KV capacity 438,192 tokens (27,387 blocks), the gateway's budget 100,000 (given);"
            in stdout.replace("\n  ", " "))
    code, stdout, _ = run("simulate", "--set", "gateway_capacity_tokens=100000", "--set",
                          "workload.num_requests=6", "--json")
    assert json.loads(stdout)["gateway_capacity_tokens"] == 100_000
    code, stdout, _ = run("simulate", "--set", "workload.num_requests=6", "--json")
    assert "gateway_capacity_tokens" not in json.loads(stdout)


def test_simulate_out_lists_every_file_it_wrote(tmp_path: Path) -> None:
    """``--out`` said "wrote DIR/requests.parquet, timeline.parquet, summary.json" while it also
    wrote token_gaps.parquet (and attempts.parquet when client models ran)."""
    out = tmp_path / "run"
    code, stdout, stderr = run("simulate", *SHORT, "--out", str(out))
    assert code == 0, stderr
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("wrote ")]
    listed = line.removeprefix(f"wrote {out}/").split(", ")
    assert sorted(listed) == sorted(p.name for p in out.iterdir())
    assert "token_gaps.parquet" in listed
    out2 = tmp_path / "clients"
    code, stdout, stderr = run("simulate", *SHORT, "--clients", "interactive=impatient-user",
                               "--out", str(out2))
    assert code == 0, stderr
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith("wrote ")]
    listed = line.removeprefix(f"wrote {out2}/").split(", ")
    assert "attempts.parquet" in listed
    assert sorted(listed) == sorted(p.name for p in out2.iterdir())


def test_simulate_on_a_trace_says_whether_the_gpu_kept_up(tmp_path: Path) -> None:
    """``simulate --trace FILE`` printed its figures without relating the load to what the
    simulated GPU sustains (the demo says its load against the conservative policy's capacity):
    a reader could not tell whether the trace overloads it. The run's own backlog says it,
    without another simulation."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{i * 0.5},500,50\n" for i in range(121)))  # 2 req/s for a minute
    code, stdout, stderr = run("simulate", "--trace", str(trace))
    assert code == 0, stderr
    load = [line for line in _lines(stdout) if line.startswith("load: ")]
    assert len(load) == 1 and load[0].startswith("load: 2 req/s offered"), stdout
    assert "the backlog stayed level: the simulated deployment kept up with this load" in load[0]
    # longer answers (500 tokens, max_tokens 500) on a KV cache that holds one at a time: they
    # pile up (the test once gave these requests the default max_tokens, too large for the
    # cache: every one refused, which the backlog counted in the system for ever)
    slow = tmp_path / "slow.csv"
    slow.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i * 0.5},500,500,500\n" for i in range(121)))
    code, stdout, stderr = run("simulate", "--trace", str(slow), "--num-gpu-blocks", "70",
                               "--policy", "unlimited")
    assert code == 0, stderr
    assert "too large" not in stdout, stdout
    load = [line for line in _lines(stdout) if line.startswith("load: ")]
    assert len(load) == 1 and "the backlog grew" in load[0] and "kept up" not in load[0], stdout
    # the first trace's requests on that cache: all refused as too large, nothing to judge
    code, stdout, stderr = run("simulate", "--trace", str(trace), "--num-gpu-blocks", "70",
                               "--policy", "unlimited")
    assert code == 0, stderr
    load = [line for line in _lines(stdout) if line.startswith("load: ")]
    assert len(load) == 1 and "no request completed" in load[0], stdout
    assert "grew" not in load[0] and "kept up" not in load[0], stdout


def test_simulate_counts_a_request_that_waited_and_expired_until_its_deadline(
        tmp_path: Path) -> None:
    """A request that waited in the gateway's queue and expired was counted gone from its
    arrival ('4 at the window's midpoint'): the load line's backlogs left out every request
    the gateway held waiting. Now each leaves at its admission deadline (the interactive
    tier's 10 s after its arrival, the default scenario's): at 2 req/s on a cache that holds
    one at a time, the 20 that arrived in the last 10 s wait (or run) and one more runs."""
    slow = tmp_path / "slow.csv"
    slow.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i * 0.5},500,500,500\n" for i in range(121)))
    code, stdout, stderr = run("simulate", "--trace", str(slow), "--num-gpu-blocks", "70",
                               "--out", str(tmp_path / "run"))
    assert code == 0, stderr
    records = pq.read_table(tmp_path / "run" / "requests.parquet").to_pydict()
    assert set(records["status"]) == {"completed", "expired"}
    assert {r for s, r in zip(records["status"], records["reason"], strict=True)
            if s == "expired"} == {"deadline"}
    said = " ".join(stdout.split())
    assert "21 at the window's midpoint, 21 at the last arrival" in said, said
    assert "do not keep" not in said


def test_compare_says_the_load_of_each_policys_run(tmp_path: Path) -> None:
    """``compare`` printed no ``load:`` line where ``simulate`` did: a comparison of policies at
    a load past what the deployment sustains did not say so. Each policy's run has its figures
    (its backlog follows its refusals): on a cache that holds one request at a time, unlimited
    admits every request and its backlog grows; conservative keeps its backlog level by letting
    requests expire, as ``simulate`` says of it, its figures the same as simulate's."""
    slow = tmp_path / "slow.csv"
    slow.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i * 0.5},500,500,500\n" for i in range(121)))
    code, stdout, stderr = run("compare", "--trace", str(slow), "--num-gpu-blocks", "70",
                               "--policies", "unlimited,conservative")
    assert code == 0, stderr
    said = " ".join(stdout.split())
    load = said[said.index("load: "):]
    assert load.startswith("load: 2 req/s offered to each policy")
    assert "unlimited 52 and 102; conservative 21 and 21, 99 of 121 (82%) shed:" in load, load
    assert ("the backlog grew under unlimited: requests arrived faster than they finished, so "
            "this load is past what the simulated deployment sustains under it; the backlog "
            "stayed level under conservative by turning requests away") in load, load
    code, simulated, stderr = run("simulate", "--trace", str(slow), "--num-gpu-blocks", "70")
    assert code == 0, stderr
    alone = " ".join(simulated.split())
    assert ("21 at the window's midpoint, 21 at the last arrival, the last finish 11.4 s after "
            "it; 99 of 121 (82%) shed (refused as overloaded, expired or dropped): the backlog "
            "stayed level by turning requests away") in alone, alone


def test_compare_says_the_load_once_for_every_policy(tmp_path: Path) -> None:
    """``make demo`` ended with four ``load under policy NAME:`` lines of four to five lines
    each, each saying the same offered rate, window and verdict again (19 lines). The ending
    is one line: the rate once, each policy's backlogs (checked here against its records:
    arrived and not finished at the arrival window's midpoint and at its last arrival), the
    verdict once where the policies share it, the capacity advice once; the drains, which
    the old lines repeated, are the table's ``drain s``. Where one tier's backlog alone grew,
    the line says so: the conclusion's "interactive SLO met" beside "past what the deployment
    sustains" read as a contradiction."""
    out = tmp_path / "runs"
    code, stdout, stderr = run("compare", "--out", str(out))
    assert code == 0, stderr
    said = " ".join(stdout.split())
    load = said[said.index("load: "):]
    assert "load under policy" not in said and load.count("req/s offered") == 1
    assert load.startswith("load: 5.4 req/s offered to each policy (over the arrival window, "
                           "first to last arrival)"), load
    for name in ("unlimited", "conservative", "overcommit", "preemptive"):
        records = pq.read_table(out / name / "requests.parquet").to_pandas()
        assert set(records["status"]) == {"completed"}
        arrival, finished = records["arrival_s"], records["finished_s"]
        mid, last = (arrival.min() + arrival.max()) / 2, arrival.max()
        at_mid = int(((arrival <= mid) & (finished > mid)).sum())
        at_end = int(((arrival <= last) & (finished > last)).sum())
        assert f"{name} {at_mid:,} and {at_end:,}" in load, (name, at_mid, at_end, load)
        drain = json.loads((out / name / "summary.json").read_text())["drain_s"]
        assert any(line.split()[::len(line.split()) - 1] == [name, f"{drain:.1f}"]
                   for line in stdout.splitlines() if line.strip()), (name, drain)  # drain s
    assert load.count("the backlog grew") == 1 and load.count("kvbudget capacity") == 1
    assert ("the backlog grew under every policy: requests arrived faster than they finished, so "
            "this load is past what the simulated deployment sustains under each") in load, load
    assert load.endswith("(how far each policy is from its capacity: kvbudget capacity, with the "
                         "same options, --policies among them, and --out DIR, finds the largest "
                         "rate at which each meets the SLO)"), load
    assert len(stdout[stdout.index("load: "):].splitlines()) <= 8, stdout
    # the table's conclusion says the interactive SLO was met under three of the policies
    # that the verdict says are past what the deployment sustains: the line says which tier's
    # backlog grew (counted by hand, per tier, at the same two instants)
    grew_alone = []
    for name in ("unlimited", "conservative", "overcommit", "preemptive"):
        records = pq.read_table(out / name / "requests.parquet").to_pandas()
        arrival, finished = records["arrival_s"], records["finished_s"]
        mid, last = (arrival.min() + arrival.max()) / 2, arrival.max()
        moved = {}
        for tier in ("interactive", "batch"):
            mine = records["tier"] == tier
            at_mid = int((mine & (arrival <= mid) & (finished > mid)).sum())
            at_end = int((mine & (arrival <= last) & (finished > last)).sum())
            moved[tier] = at_end - at_mid > 3 * at_mid ** 0.5
        assert moved["batch"], (name, moved)
        if not moved["interactive"]:
            grew_alone.append(name)
    assert grew_alone == ["conservative", "overcommit", "preemptive"], grew_alone
    assert ("under conservative, overcommit and preemptive, only the batch tier's backlog grew "
            "(the interactive tier's stayed level)") in load, load
    code, simulated, stderr = run("simulate", "--policy", "unlimited")
    assert code == 0, stderr  # simulate's one line keeps its drain and its advice
    alone = " ".join(simulated.split())
    assert "the last finish" in alone and "(how far from its capacity: kvbudget capacity" in alone


def test_simulate_says_the_requests_dropped_after_a_revoke(tmp_path: Path) -> None:
    """Under ``preemptive`` an interactive arrival takes a batch request's lease back; the batch
    request waits again and, past its tier's 5 s, is dropped (``preempted_dropped``): its leave
    (the revoke plus 5 s) is not in its record, and the load line counted it gone at its first
    token without a word. It now says so."""
    mix = tmp_path / "mix.csv"
    mix.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,tier\n" + "".join(
        f"{i * 0.5},500,500,500,{'interactive' if i % 2 else 'batch'}\n" for i in range(121)))
    out = tmp_path / "run"
    code, stdout, stderr = run("simulate", "--trace", str(mix), "--num-gpu-blocks", "140",
                               "--policy", "preemptive", "--set", "tiers.1.queue_timeout_s=5",
                               "--out", str(out))
    assert code == 0, stderr
    records = pq.read_table(out / "requests.parquet").to_pandas()
    dropped = records[records["status"] == "preempted_dropped"]
    assert len(dropped) == 1 and set(dropped["reason"]) == {"preempted"}, dropped
    said = " ".join(stdout.split())
    assert ("(1 of them dropped after their lease was taken back, revoked or run out, at a time "
            "the records do not keep") in said, said


@pytest.mark.parametrize(("args", "model", "gpu"), [
    # the embedded default scenario: the user gave neither
    ([], "Llama-3.1-8B (assumed: the default scenario's)",
     "H100-SXM (assumed: the default scenario's H100-80GB)"),
    # the same name typed: given, the model still the default's
    (["--gpu", "H100-80GB"], "Llama-3.1-8B (assumed: the default scenario's)",
     "H100-SXM (given as H100-80GB)"),
    (["--set", "gpu=H200", "--model", "Qwen2.5-7B"], "Qwen2.5-7B", "H200"),
    # a scenario file that names both gives them; one that names neither leaves them
    (["--scenario", str(REPO / "scenarios" / "synth_conservative.toml")], "Llama-3.1-8B",
     "H100-SXM (given as H100-80GB)"),
    (["--scenario", "{bare}"], "Llama-3.1-8B (assumed: the default scenario's)",
     "H100-SXM (assumed: the default scenario's H100-80GB)"),
], ids=["default", "gpu-typed", "both-typed", "file-names-both", "file-names-neither"])
def test_given_as_says_only_what_the_user_gave(tmp_path: Path, args: list[str], model: str,
                                               gpu: str) -> None:
    """The simulated: line said 'H100-SXM (given as H100-80GB)' of the default scenario's GPU,
    which nobody gave: a value the user left to the default scenario is said as assumed, and
    so is it in kvbudget report of the run's directory (its summary keeps which)."""
    bare = tmp_path / "bare.toml"
    data = small_scenario_dict(20, 4.0)
    assert "gpu" not in data and "model" not in data
    bare.write_text(tomli_w.dumps(data))
    args = [str(bare) if a == "{bare}" else a for a in args]
    code, stdout, stderr = run("simulate", *args, "--set", "workload.num_requests=20",
                               "--out", str(tmp_path / "run"))
    assert code == 0, stderr
    expected = f"simulated: {model} on {gpu}, engine vllm"
    assert stdout.replace("\n  ", " ").splitlines()[0].startswith(expected), stdout
    said = repr(read_run(tmp_path / "run")).replace("\n  ", " ").splitlines()
    assert said[1].startswith(expected), said
