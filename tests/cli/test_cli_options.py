"""The shared option sets (cli/options.py): every study command takes what simulate takes;
``--slo`` on any summary metric; replicated comparisons; rates over the offered window."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.cli.options import ENGINE_OPTIONS, SCENARIO_OPTIONS, TRACE_OPTIONS
from kvbudget.simulator.scenario import scenario_from_dict
from kvbudget.studies.compare import compare, default_metrics, paired_test, verdict
from kvbudget.studies.sweep import metric_column
from tests.conftest import small_scenario_dict

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _trace(tmp_path: Path, n: int = 120) -> Path:
    rng = np.random.default_rng(5)
    t = np.cumsum(rng.exponential(0.25, n))
    path = tmp_path / "t.jsonl"
    path.write_text("".join(
        json.dumps({"timestamp": float(a), "input_length": int(p), "output_length": int(o)})
        + "\n" for a, p, o in zip(t, rng.integers(50, 800, n), rng.integers(5, 200, n),
                                  strict=True)))
    return path


def _scenario(tmp_path: Path) -> Path:
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_bytes(tomli_w.dumps(small_scenario_dict(60, 6.0, policy_params={"overcommit_ratio": 0.6})).encode())
    return path


@pytest.mark.parametrize("command", ["simulate", "compare", "sweep", "tune", "capacity", "plan"])
def test_every_study_command_takes_the_shared_options(command: str) -> None:
    import typer.main

    cmd = typer.main.get_command(app)
    sub = cmd.commands[command]  # type: ignore[attr-defined]
    names = {opt for p in sub.params for opt in p.opts}
    annotations = [a for table in (SCENARIO_OPTIONS, TRACE_OPTIONS) for a, _ in table.values()]
    annotations += [a for a, _, _ in ENGINE_OPTIONS.values()]
    for annotation in annotations:
        option = annotation.__metadata__[0]
        flag = next(d for d in (option.default, *option.param_decls) if str(d).startswith("--"))
        assert flag in names, (command, flag)


def test_trace_options_reach_the_runs_of_a_sweep(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    out = tmp_path / "sw"
    code, _stdout, stderr = run("sweep", "--out", out, "--trace", trace, "--sample-count", "40",
                               "--max-num-seqs", "8", "--gpu", "A100-80GB", "--replications",
                               "2", "--rate-scale", "1,2", "--no-plot", "-j", "1")
    assert code == 0, stderr
    import pandas as pd

    table = pd.read_parquet(out / "sweep.parquet")
    assert set(table["num_requests"]) == {40}
    assert set(table["rate_scale"]) == {1.0, 2.0}
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["scenario"]["gpu"] == "A100-80GB"
    assert manifest["scenario"]["engine"]["max_num_seqs"] == 8
    assert manifest["scenario"]["workload"]["options"]["sample_count"] == 40
    # two replications sample different requests (their seeds differ)
    r0 = table[(table["replication"] == 0) & (table["rate_scale"] == 1.0)]
    r1 = table[(table["replication"] == 1) & (table["rate_scale"] == 1.0)]
    assert float(r0["overall_e2e_mean_s"].iloc[0]) != float(r1["overall_e2e_mean_s"].iloc[0])


def test_trace_options_without_a_trace_are_refused(tmp_path: Path) -> None:
    code, _, stderr = run("simulate", "--sample-count", "10")
    assert code == 2 and "--sample-count" in stderr and "--trace" in stderr
    assert len(stderr.strip().splitlines()) == 1


def test_simulate_applies_the_trace_options(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    code, stdout, stderr = run("simulate", "--trace", trace, "--sample-count", "50", "--json")
    assert code == 0, stderr
    s = json.loads(stdout)
    assert s["overall"]["offered"] == 50
    code, stdout, _ = run("simulate", "--trace", trace, "--json")
    assert json.loads(stdout)["overall"]["offered"] == 120


def test_metric_column_reads_dotted_summary_paths() -> None:
    assert metric_column("tiers.interactive.ttft_s.p99") == "interactive_ttft_p99_s"
    assert metric_column("overall.slo_attainment") == "overall_slo_attainment"
    assert metric_column("tiers.batch.output_tokens_per_s") == "batch_output_tokens_per_s"
    assert metric_column("kv.used_mean_fraction") == "kv_used_mean_fraction"
    assert metric_column("interactive_ttft_p99_s") == "interactive_ttft_p99_s"
    with pytest.raises(ValueError, match="expected"):
        metric_column("nowhere.x")


def test_capacity_constrains_any_summary_metric(tmp_path: Path) -> None:
    scn = _scenario(tmp_path)
    out = tmp_path / "cap"
    code, stdout, stderr = run("capacity", "--scenario", scn, "--out", out, "--slo",
                               "tiers.interactive.ttft_s.p99<=1.0", "--replications", "2",
                               "--rel-tol", "0.2", "--no-plot", "-j", "1")
    assert code == 0, stderr
    assert "interactive_ttft_p99_s<=1" in stdout
    result = json.loads((out / "capacity.json").read_text())
    assert result["slos"] == ["interactive_ttft_p99_s<=1"] and result["target"] is None
    import pandas as pd

    ev = pd.read_parquet(out / "evidence.parquet")
    cap = result["policies"][0]
    at = ev[ev["rate_scale"] == cap["rate_scale"]]
    assert at["interactive_ttft_p99_s"].mean() <= 1.0
    above = ev[ev["rate_scale"] > cap["rate_scale"]]
    for _, g in above.groupby("rate_scale"):  # every load above it misses the SLO
        assert g["interactive_ttft_p99_s"].mean() > 1.0


def test_tune_takes_slo_on_a_dotted_metric(tmp_path: Path) -> None:
    scn = _scenario(tmp_path)
    out = tmp_path / "tune"
    code, _stdout, stderr = run(
        "tune", "--scenario", scn, "--out", out, "--param",
        "policy_params.overcommit_ratio=0.3:0.9", "--slo", "tiers.interactive.ttft_s.p99<=50",
        "--replications", "2", "--grid-points", "2", "--refine-evals", "0", "--validate", "0",
        "-j", "1")
    assert code == 0, stderr
    assert json.loads((out / "tune.json").read_text())["constraints"] == [
        "interactive_ttft_p99_s<=50"]
    tomllib.loads((out / "best.toml").read_text())


def test_paired_test_known_answers() -> None:
    diff, low, high, p = paired_test([1.0, 2.0, 3.0, 4.0], [1.5, 2.5, 3.4, 4.6])
    assert diff == pytest.approx(0.5)
    d = np.array([0.5, 0.5, 0.4, 0.6])
    from scipy import stats

    assert p == pytest.approx(stats.ttest_rel([1.5, 2.5, 3.4, 4.6], [1, 2, 3, 4]).pvalue)
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert verdict("interactive_ttft_p99_s", diff, low, high) == "worse"
    assert verdict("batch_output_tokens_per_s", diff, low, high) == "better"
    assert verdict("x", 0.1, -0.2, 0.4) == "within noise"
    assert paired_test([1, 2], [1, 2])[3] == 1.0
    assert verdict("x", 0.0, 0.0, 0.0) == "same"


def test_replicated_compare_has_intervals_and_equal_tier_throughput(tmp_path: Path) -> None:
    """Policies that complete the same tokens show the same throughput over the offered window;
    the default table's throughput is the one over the run (first arrival to last finish)."""
    scn = scenario_from_dict(small_scenario_dict(80, 5.0, policy_params={"overcommit_ratio": 0.6}), tmp_path)
    metrics = [*default_metrics(scn), "interactive_output_tokens_per_s",
               "batch_output_tokens_per_s"]
    assert "batch_sustained_output_tokens_per_s" in metrics
    c = compare(scn, ["conservative", "overcommit"], replications=3, metrics=metrics)
    t = c.table.set_index(["metric", "policy"])
    runs = c.runs
    for tier in ("interactive", "batch"):
        done = runs.groupby("policy")[f"{tier}_completed"].apply(list)
        if done["conservative"] == done["overcommit"]:
            assert (t.loc[(f"{tier}_output_tokens_per_s", "conservative"), "mean"]
                    == t.loc[(f"{tier}_output_tokens_per_s", "overcommit"), "mean"])
        for policy in ("conservative", "overcommit"):  # the same tokens over duration_s
            mine = runs[runs["policy"] == policy]
            over_run = (mine[f"{tier}_output_tokens_per_s"] * mine["offered_window_s"]
                        / mine["duration_s"])
            assert t.loc[(f"{tier}_sustained_output_tokens_per_s", policy), "mean"] \
                == pytest.approx(over_run.mean())
    row = t.loc[("interactive_ttft_p99_s", "overcommit")]
    assert math.isfinite(row["low"]) and row["low"] <= row["mean"] <= row["high"]
    assert row["verdict"] in ("better", "worse", "within noise", "same")
    assert c.params["overcommit"]["overcommit_ratio"] == 0.6  # the scenario's own


def test_compare_cli_replications_prints_verdicts_and_parameters(tmp_path: Path) -> None:
    scn = _scenario(tmp_path)
    code, stdout, stderr = run("compare", "--scenario", scn, "--policies",
                               "conservative,overcommit", "-r", "3", "-j", "1")
    assert code == 0, stderr
    assert "± 95% CI" in stdout and "vs conservative" in stdout
    assert "overcommit_ratio=0.6" in stdout
    assert any(v in stdout for v in ("within noise", "better", "worse", "same"))
    assert max(len(line) for line in stdout.splitlines()) <= 100
    assert "times (ttft, tpot, itl, e2e, drain) in seconds" in " ".join(stdout.split())


def test_rates_are_over_the_offered_window() -> None:
    from kvbudget.policies import DEFAULT_TIERS
    from kvbudget.results.metrics import summarize

    records = {
        "tier": ["interactive"] * 3, "arrival_s": np.array([0.0, 5.0, 10.0]),
        "finished_s": np.array([1.0, 6.0, 30.0]), "status": ["completed"] * 3,
        "reason": [""] * 3, "num_preemptions": np.zeros(3, np.int64),
        "output_tokens": np.array([10, 10, 10]), "ttft_s": np.ones(3), "tpot_s": np.ones(3),
        "e2e_s": np.ones(3),
    }
    timeline = {"time_s": np.zeros(1), "kv_used_tokens": np.zeros(1),
                "kv_reserved_tokens": np.zeros(1)}
    s = summarize(records, timeline, tiers=DEFAULT_TIERS, kv_capacity_tokens=100,
                  policy="p", seed=0, wall_time_s=0.0)
    assert s["offered_window_s"] == 10.0 and s["drain_s"] == 20.0 and s["duration_s"] == 30.0
    assert s["tiers"]["interactive"]["output_tokens_per_s"] == 3.0


def test_replay_takes_the_trace_options() -> None:
    import typer.main

    sub = typer.main.get_command(app).commands["replay"]  # type: ignore[attr-defined]
    names = {opt for p in sub.params for opt in p.opts}
    for annotation, _ in TRACE_OPTIONS.values():
        option = annotation.__metadata__[0]
        flag = next(d for d in (option.default, *option.param_decls) if str(d).startswith("--"))
        assert flag in names, flag
    assert {"--users", "--think-time-s", "--tier"} <= names


def test_a_bare_max_output_is_a_fixed_cap() -> None:
    from kvbudget.cli.options import TraceArgs
    from kvbudget.workloads.max_output import FixedCap

    assert TraceArgs({"max_output": "10"}).options().max_output == FixedCap(10)
