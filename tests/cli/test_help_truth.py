"""What a command's ``--help`` says of its options holds for that command: every option a help
text names is one the command has, and each default it states is the one the command uses."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, save_cost_model

FOREIGN = ("serve", "simulate")
"""The words after which a help names another program's option (``vllm bench serve
--max-concurrency``, ``kvbudget simulate --cost-model``), not the command's own."""


def _commands() -> Iterator[tuple[str, Any]]:
    group: Any = typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group: trace
            for sub, leaf in command.commands.items():
                yield f"{name} {sub}", leaf
        else:
            yield name, command


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


COMMANDS = dict(_commands())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_help_names_only_the_commands_own_options(name: str) -> None:
    """``kvbudget replay --help`` said "--policy ...; with --records, the recorded run's" and
    "--scenario ... (with --records: ...)", where replay has no --records (the wording was
    shared with validate and calibrate)."""
    command = COMMANDS[name]
    known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    texts = [(p.opts[0], getattr(p, "help", None) or "") for p in command.params]
    texts.append(("(the command's text)", command.help or ""))
    strays = [(where, m.group(2)) for where, text in texts
              for m in re.finditer(r"(\S+)?\s+(--[a-z][a-z0-9-]*)", " " + text)
              if m.group(2) not in known and (m.group(1) or "").strip("`") not in FOREIGN]
    assert not strays, f"kvbudget {name}: {strays}"


def test_replay_help_says_its_own_policy_default() -> None:
    code, stdout, _ = run("replay", "--help")
    assert code == 0
    said = " ".join(stdout.split())
    assert "default: the --scenario's, else conservative." in said, said
    # (validate's --policy speaks of its --records; replay's own --records replays a recording)
    assert "With --records: the admission policy" not in said, said


def test_calibrate_says_its_policy_and_scenario_are_for_a_recording(tmp_path: Any) -> None:
    """``calibrate --help`` gave --policy "default: the --scenario's, else conservative" as for
    a live replay, while ``calibrate --url`` times steps with no gateway: the policy, its
    parameters and the scenario were ignored without a word. They are said to be for --records
    and refused with --url (before any server is asked)."""
    code, stdout, _ = run("calibrate", "--help")
    assert code == 0
    said = " ".join(stdout.split())
    assert ("--policy <str> With --records: the admission policy simulated in front of the "
            "recorded server") in said, said
    assert "else conservative" not in said, said
    assert "--scenario <path> With --records: a scenario file" in said, said
    for flag, value in (("--policy", "overcommit"), ("--param", "overcommit_ratio=0.5"),
                        ("--scenario", str(tmp_path / "s.toml"))):
        code, _, stderr = run("calibrate", "--url", "http://127.0.0.1:9", "--out",
                              tmp_path / "c.json", flag, value)
        assert code == 2, stderr
        assert stderr.strip() == f"error: {flag} applies to --records, not to a live calibration"


def _help(command: str, option: str) -> str:
    (param,) = [p for p in COMMANDS[command].params if option in p.opts]
    return " ".join((param.help or "").split())


def test_the_defaults_the_helps_state_are_the_runs(tmp_path: Any) -> None:
    """``simulate --help`` said "--seed: Seed of every random draw", "--gpu: GPU preset",
    "--block-size: Tokens per KV block", "-tp: GPUs each replica shards the model over" and
    "plan --seed: Root seed." without the default each run took; each help now says it, and
    a run without the flag takes it."""
    import json

    from kvbudget.perf.vllm_defaults import BLOCK_SIZE
    from kvbudget.simulator.scenario import EngineSpec

    assert "(default: the scenario's, 0 in the default one)" in _help("simulate", "--seed")
    assert "default: the scenario's, H100-80GB in the default one" in _help("simulate", "--gpu")
    assert ("default: the scenario's, Llama-3.1-8B in the default one"
            in _help("simulate", "--model"))
    assert "(default: the scenario's, else 16, vLLM's)" in _help("simulate", "--block-size")
    assert "(default: the scenario's, else vllm)" in _help("simulate", "--engine")
    assert "(default: the scenario's, else 1)" in _help("simulate", "-tp")
    for knob in ("--max-num-seqs", "--max-num-batched-tokens"):
        assert ("(default: the scenario's, else the --engine-defaults' for the GPU: kvbudget "
                "presets)") in _help("simulate", knob)
    assert EngineSpec().block_size == BLOCK_SIZE == 16
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--json")
    assert code == 0, stderr
    s = json.loads(stdout)
    assert (s["seed"], s["gpu"], s["model"], s["block_size"]) == (
        0, "H100-80GB", "Llama-3.1-8B", 16), s
    assert s["engine_knobs"]["tensor_parallel_size"] == 1 and s["engine"]["engine"] == "vllm"
    # the study's root seed: the scenario's where --seed is not given
    assert "(default: the scenario's)" in _help("plan", "--seed")
    code, _, stderr = run("plan", "--set", "workload.num_requests=20", "--set", "seed=7",
                          "--gpus", "H100-80GB", "--replicas", "1", "-r", "1", "-j", "1",
                          "--out", tmp_path / "plan")
    assert code == 0, stderr
    assert json.loads((tmp_path / "plan" / "plan.json").read_text())["root_seed"] == 7


def test_compare_help_names_every_default_metric() -> None:
    """``compare --help`` gave the default metrics as "per tier p99 TTFT/TPOT/ITL, output
    tokens/s over the run, SLO attainment, and the drain time"; the table also shows the overall
    SLO attainment (``default_metrics``)."""
    from kvbudget.simulator.scenario import default_scenario
    from kvbudget.studies.compare import default_metrics

    metrics = default_metrics(default_scenario())
    per_tier = {m.split("_", 1)[1] for m in metrics if m.startswith("interactive_")}
    assert per_tier == {"ttft_p99_s", "tpot_p99_s", "itl_p99_s",
                        "sustained_output_tokens_per_s", "slo_attainment"}
    assert metrics[-2:] == ["overall_slo_attainment", "drain_s"]
    assert ("default: per tier p99 TTFT/TPOT/ITL, output tokens/s over the run and SLO "
            "attainment, then the overall SLO attainment and the drain time") in _help(
                "compare", "--metric")


def test_serve_help_says_the_tier_of_a_request_without_the_header(tmp_path: Any) -> None:
    """``serve --help`` said the tier is taken from the x-kvbudget-tier header, not what a
    request without one gets: the first tier (a batch client that forgets it is served as
    interactive). The help says it; the settings give that tier."""
    from kvbudget.cli.serve import settings_from_flags

    assert ("a request without one in the first tier (interactive with the default tiers)"
            in _help("serve", "--trust-tier-header"))
    settings = settings_from_flags(
        ["http://127.0.0.1:9"], None, None, "127.0.0.1", 0, None, False, 1000, 10.0, "bytes",
        429, 1.0, 256, "round_robin", None, 10_000, 30.0, 1 << 20, None)
    assert settings.config.trust_tier_header
    assert settings.config.default_tier == settings.tiers[0].name == "interactive"


def test_validate_url_says_it_does_not_use_the_scenarios_clients(tmp_path: Path) -> None:
    # its --scenario help names the gateway's tiers, front door, policy and lease_ttl_s; a
    # scenario's [clients] (retrying batch pipelines, impatient users) were dropped unsaid
    scenario = tmp_path / "s.toml"
    scenario.write_text('[clients]\nbatch = "batch-pipeline"\n')
    cost = tmp_path / "cost.json"
    save_cost_model(LinearCostModel(0.01, 1e-5, 1e-4, 1e-7), cost)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    res = CliRunner().invoke(app, ["validate", "--url", "http://127.0.0.1:9", "--trace",
                                   str(trace), "--cost-model", str(cost), "--scenario",
                                   str(scenario), "--out", str(tmp_path / "v")])
    assert res.exit_code != 0 and "Traceback" not in res.stderr  # nothing listens there
    said = " ".join(res.stderr.split())
    assert "the scenario's [clients] (batch=batch-pipeline) are not used by validate --url" \
        in said


SAMPLE = {"--records-format": "vllm-bench", "--gpu": "L4", "--num-gpu-blocks": "10",
          "--block-size": "32", "--set": "engine.max_num_seqs=3", "--fit": "linear",
          "--holdout": "0.5", "--max-evals": "5", "--fit-overhead": None,
          "--tensor-parallel-size": "2", "--kv-cache-dtype": "fp8", "--cost-model": "c.json",
          "--engine": "tgi", "--allow-refusals": None, "--allow-small-fit": None,
          "--policy": "overcommit", "--scenario": "s.toml"}
"""A value to give each option a help says is for ``--records`` (``None``: a flag)."""


@pytest.mark.parametrize(("command", "run_name"), [("calibrate", "a live calibration"),
                                                   ("validate", "a live validation")])
def test_an_option_said_to_be_for_records_is_refused_with_url(
        command: str, run_name: str, tmp_path: Path) -> None:
    """Each option whose help says "With --records:" (and nothing of --url) is one --url does
    not use: refused before any server is asked (port 9 has none), never silently dropped.
    ``calibrate --url`` writes -tp and --kv-cache-dtype into its cost file, so its help says
    so (it said "With --records" only)."""
    said = {p.opts[0]: p for p in COMMANDS[command].params
            if (p.help or "").startswith("With --records") and "--url" not in (p.help or "")}
    assert said and set(said) <= set(SAMPLE), set(said) - set(SAMPLE)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    live = (["--trace", str(trace), "--cost-model", str(tmp_path / "none.json")]
            if command == "validate" else [])
    for flag, param in said.items():
        value = SAMPLE[flag]
        given = ([param.secondary_opts[0] if param.secondary_opts else flag] if value is None
                 else [flag, str(tmp_path / value) if value.endswith((".json", ".toml"))
                       else value])
        code, _, stderr = run(command, "--url", "http://127.0.0.1:9", *live, *given,
                              "--out", tmp_path / "o.json")
        assert code == 2, (flag, stderr)
        assert f"applies to --records, not to {run_name}" in stderr, (flag, stderr)
    for option in ("-tp", "--kv-cache-dtype"):  # calibrate --url writes them in its file
        assert "recorded in the cost file with --gpu" in _help("calibrate", option)
        assert _help("validate", option).startswith("With --records:")  # refused with --url


def test_compare_refuses_the_replicated_tables_options_with_one_replication() -> None:
    """``compare --metric tiers.interactive.ttft_s.p99`` (or ``--confidence 0.9``) without
    ``-r`` printed the full one-run tables and exited 0: the option, which shapes the
    replicated table ("A metric of the replicated table", "Level of the intervals"), was
    dropped unsaid. One replication refuses it, saying what to give; with ``-r 2`` the table
    holds the metric asked for, at the level asked for."""
    short = ["--set", "workload.duration_s=20", "--policies", "unlimited,conservative"]
    for flags in (["--metric", "tiers.interactive.ttft_s.p99"], ["--confidence", "0.9"]):
        code, stdout, stderr = run("compare", *short, *flags)
        assert code == 2 and not stdout and stderr.count("\n") == 1, (flags, stdout, stderr)
        assert stderr.startswith(f"error: {flags[0]}: applies only to the replicated table "
                                 "(--replications N, N > 1"), stderr
    code, stdout, stderr = run("compare", *short, "--metric", "tiers.interactive.ttft_s.p99",
                               "--confidence", "0.9", "-r", "2", "-j", "1", "--json")
    assert code == 0, stderr
    rows = json.loads(stdout)
    assert {r["metric"] for r in rows} == {"interactive_ttft_p99_s"}, rows
    assert ("Level of the intervals (with -r above 1)." in _help("compare", "--confidence"))


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_interval_draws_without_an_interval_is_refused(command: str) -> None:
    """``simulate --interval-draws 10`` (and ``compare``'s) without ``--interval`` ran the one
    run and exited 0, the count dropped unsaid, where ``capacity``, ``sweep`` and ``plan``
    refuse it. It is refused alike; with ``--interval`` it is the runs' count, 40 by default
    as the help says."""
    code, stdout, stderr = run(command, "--interval-draws", "10")
    assert code == 2 and not stdout, (stdout, stderr)
    assert stderr == "error: --interval-draws: applies with --interval only\n", stderr
    assert "(each one simulation; default 40)" in _help(command, "--interval-draws")
    code, stdout, stderr = run(command, "--set", "workload.duration_s=10", "--interval", "0.9",
                               "--interval-draws", "2", "--policies" if command == "compare"
                               else "--policy", "unlimited", "--json")
    assert code == 0, stderr
    said = json.loads(stdout)
    said = said[0] if command == "compare" else said
    assert said["intervals"]["num_draws"] == 2, said["intervals"]


def test_the_last_helps_without_a_default_say_it_and_runs_take_it(tmp_path: Path) -> None:
    """``--kv-cache-dtype`` was the one engine knob whose help gave no default, and ``trace
    synth --rate-rps`` / ``--duration-s`` said "Override the arrival rate" / "the duration"
    with neither the unit nor the value left in force. Each help says them; a run without the
    flag takes them (the default mix's 5.5 req/s over 300 s; a 16-bit KV cache)."""
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.workloads.spec import DEFAULT_RATE_RPS, default_workload_spec

    assert "(default: the scenario's, else auto, vLLM's)" in _help("simulate", "--kv-cache-dtype")
    assert EngineConfig().kv_cache_dtype == "auto"
    assert "requests a second (default: the spec's; the default mix's 5.5)" in _help(
        "trace synth", "--rate-rps")
    assert "seconds (drops num_requests; default: the spec's; the default mix's 300)" in _help(
        "trace synth", "--duration-s")
    assert DEFAULT_RATE_RPS == 5.5 and default_workload_spec().duration_s == 300.0
    code, _, stderr = run("trace", "synth", "--out", tmp_path / "w.csv")
    assert code == 0, stderr
    import pandas as pd

    arrivals = pd.read_csv(tmp_path / "w.csv")["arrival_s"]
    span = arrivals.max() - arrivals.min()
    assert 290 < span <= 300 and 5.0 < (len(arrivals) - 1) / span < 6.0, (span, len(arrivals))
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["engine_knobs"]["kv_cache_dtype"] == "auto"


@pytest.mark.parametrize("command", ["calibrate", "validate"])
def test_calibrate_and_validate_server_limits_say_their_default(command: str,
                                                                tmp_path: Path) -> None:
    """``calibrate``/``validate`` ``--max-num-seqs``, ``--max-num-batched-tokens``,
    ``--block-size`` and ``-tp`` said "The server's --max-num-seqs" and no more: nothing said
    what runs without them. Each help says it (with --url kvbudget's grid default, or the cost
    file's; with --records the recording's, else vLLM's for the GPU, with the number), the
    numbers are the code's, and a recording that says none runs an H100's (1,024 and 8,192)."""
    from kvbudget.live.calibrate import CalibrationPlan
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.vllm_defaults import BLOCK_SIZE, batch_defaults

    plan = CalibrationPlan()
    hopper, ampere = batch_defaults(get_gpu("H100-80GB")), batch_defaults(get_gpu("A100-80GB"))
    seqs, batched = _help(command, "--max-num-seqs"), _help(command, "--max-num-batched-tokens")
    url = ("with --url, the cost file's (calibrate --url records the one it ran with), else "
           if command == "validate" else "with --url, ")
    assert f"Default: {url}{plan.max_num_seqs:,}" in seqs, seqs
    assert f"Default: {url}{plan.max_num_batched_tokens:,}" in batched, batched
    for text, which in ((seqs, 1), (batched, 0)):
        assert ("with --records, the recording's where it says one, else vLLM 0.32.0's for the "
                "GPU (") in text, text
        assert f"{hopper[which]:,} on an H100" in text and f"{ampere[which]:,} on an A100" in text
    assert f"(default: the recording's where it says one, else {BLOCK_SIZE}, vLLM's)" in _help(
        command, "--block-size")
    assert "(default: the recording's where it says one, else 1, said as assumed)" in _help(
        command, "-tp")
    if command == "calibrate":
        return
    # a vllm bench serve file says none of them: the run takes an H100's, and says so
    fixture = (Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
               / "vllm-bench-0.32.0" / "rate8.json")
    out = tmp_path / "v"
    code, stdout, stderr = run("validate", "--records", fixture, "--model", "Llama-3.1-8B",
                               "--gpu", "H100-80GB", "--out", out)
    assert code == 0, stderr
    summary = json.loads((out / "sim" / "summary.json").read_text())
    knobs = summary["engine_knobs"]
    assert (knobs["max_num_seqs"], knobs["max_num_batched_tokens"]) == (hopper[1], hopper[0])
    assert (summary["block_size"], knobs["tensor_parallel_size"]) == (BLOCK_SIZE, 1)
    said = " ".join((stdout + stderr).split())
    assert "max_num_seqs, max_num_batched_tokens, num_gpu_blocks, enable_prefix_caching, " \
        "async_scheduling (ASSUMED: vLLM's defaults for the GPU and model" in said, said
