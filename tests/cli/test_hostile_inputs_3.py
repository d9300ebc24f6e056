"""The bad-input campaign, third round (issue 20 item 3): what the first two left accepted.

Every case ends in one clean line on stderr (exit 2) naming the flag, field, file or row, or
in a valid result; nothing here runs more than a few dozen simulated requests, in-process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import small_scenario_dict

runner = CliRunner()
TINY = ("--set", "workload.num_requests=8")


def run(*args: object) -> tuple[int, str, str]:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.stdout, res.stderr


def assert_clean_error(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1, stderr
    for needle in needles:
        assert needle in stderr, stderr


def _toml(table: dict[str, object]) -> str:
    import tomli_w

    return tomli_w.dumps(table)


@pytest.fixture
def csv3(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,1\n0,10,1\n5,10,2\n")
    return path


# --- compare: executor flags that one replication would ignore ---------------------------------
@pytest.mark.parametrize(("args", "needle"), [
    (["--executor", "zzz"], "--executor"),
    (["--executor", "zzz", "-r", "2"], "--executor"),
    (["--address", "auto"], "--address"),
    (["--executor", "ray"], "--executor"),
    (["--executor", "ray", "--address", "auto"], "--address"),
    (["-j", "2"], "--jobs"),
])
def test_compare_refuses_executor_flags_it_would_not_use(args: list[str], needle: str) -> None:
    code, _, stderr = run("compare", *TINY, "--policies", "unlimited", *args)
    assert_clean_error(code, stderr, needle)


# --- trace synth ------------------------------------------------------------------------------
@pytest.mark.parametrize("duration", ["-1", "10"])
def test_synth_refuses_duration_beside_a_request_count(tmp_path: Path, duration: str) -> None:
    out = tmp_path / "s.jsonl"
    code, _, stderr = run("trace", "synth", "--duration-s", duration, "--num-requests", "5",
                          "--out", out)
    assert_clean_error(code, stderr, "--duration-s", "--num-requests")
    assert not out.exists()


# --- trace options ----------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "needle"), [
    (["--spread-s", "1e308"], "spread"),
    (["--spread-s", "3601"], "spread"),
    (["--rate-scale", "1e300"], "rate-scale"),
    (["--rate-scale", "1e-300"], "rate-scale"),
])
def test_trace_transformations_beyond_any_deployment_are_refused(csv3: Path, args: list[str],
                                                                 needle: str) -> None:
    code, _, stderr = run("trace", "stats", csv3, *args)
    assert_clean_error(code, stderr, needle)


def test_a_rate_scale_that_stretches_the_trace_over_decades_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,1\n1e6,10,1\n")
    code, _, stderr = run("trace", "stats", path, "--rate-scale", "1e-3")
    assert_clean_error(code, stderr, "long.csv", "rate_scale", "years")


def test_a_moderate_spread_still_spreads(csv3: Path) -> None:
    import json

    code, stdout, stderr = run("trace", "stats", csv3, "--spread-s", "3", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["span_s"] == 5.0


@pytest.mark.parametrize("args", [
    ["--default-tier", "nope"],
    ["--tier-shares", "nope=0.5,batch=0.5"],
])
@pytest.mark.parametrize("command", [
    ["simulate"],
    ["sweep", "--grid", "engine.num_gpu_blocks=1000,2000", "--no-plot", "-j", "1", "-r", "1"],
])
def test_a_tier_no_configuration_has_is_refused_before_any_run(
        tmp_path: Path, csv3: Path, command: list[str], args: list[str]) -> None:
    out = tmp_path / "out"
    extra = ["--out", out] if command[0] == "sweep" else []
    code, _, stderr = run(*command, "--trace", csv3, *args, *extra)
    assert_clean_error(code, stderr, "'nope'", "configured tiers")
    assert not out.exists()


def test_a_synthetic_tier_no_configuration_has_is_refused() -> None:
    code, _, stderr = run("simulate", *TINY, "--set", "workload.tiers.0.name=zz")
    assert_clean_error(code, stderr, "workload.tiers.0.name", "'zz'")


def test_a_configured_default_tier_runs(csv3: Path) -> None:
    code, _, stderr = run("simulate", "--trace", csv3, "--default-tier", "batch", "--json")
    assert code == 0, stderr


# --- limits beyond any deployment -------------------------------------------------------------
HUGE_INT = "9000000000000000000"
LIMITS = {
    "gateway_capacity_tokens": (f"gateway_capacity_tokens={HUGE_INT}",
                                "gateway_capacity_tokens"),
    "lease_ttl_s": ("lease_ttl_s=1e300", "lease_ttl_s"),
    "queue_timeout_s": ("tiers=[{name='interactive',queue_timeout_s=1e300},{name='batch'}]",
                        "queue_timeout_s"),
    "ttft_s": ("tiers=[{name='interactive',ttft_s=1e300},{name='batch'}]", "ttft_s"),
    "tpot_s": ("tiers=[{name='interactive'},{name='batch',tpot_s=1e300}]", "tpot_s"),
    "max_sequence_tokens": (f"tiers=[{{name='interactive',max_sequence_tokens={HUGE_INT}}},"
                            "{name='batch'}]", "max_sequence_tokens"),
    "max_num_queued_requests": (f"front_door.max_num_queued_requests={HUGE_INT}",
                                "max_num_queued_requests"),
    "max_num_queued_tokens": (f"front_door.max_num_queued_tokens={HUGE_INT}",
                              "max_num_queued_tokens"),
    "max_concurrent_requests": (f"front_door.max_concurrent_requests={HUGE_INT}",
                                "max_concurrent_requests"),
    "tier_max_queued": (f"front_door.tier_max_queued={{batch={HUGE_INT}}}", "tier_max_queued"),
}


@pytest.mark.parametrize("case", sorted(LIMITS))
def test_limits_no_deployment_has_are_refused_naming_the_field(case: str) -> None:
    expr, needle = LIMITS[case]
    code, _, stderr = run("simulate", *TINY, "--set", expr)
    assert_clean_error(code, stderr, needle)


def test_the_same_limits_in_a_scenario_file_name_the_file(tmp_path: Path) -> None:
    table = small_scenario_dict(n=8)
    table["tiers"] = [{"name": "interactive", "ttft_s": 1e300}, {"name": "batch"}]
    path = tmp_path / "s.toml"
    path.write_text(_toml(table))
    code, _, stderr = run("simulate", "--scenario", path)
    assert_clean_error(code, stderr, str(path), "ttft_s", "86,400")


def test_the_library_refuses_them_too() -> None:
    from kvbudget.policies import TierConfig
    from kvbudget.policies.gateway import FrontDoor, GatewayConfig

    with pytest.raises(ValueError, match="ttft_s must be <= 86,400"):
        TierConfig("interactive", ttft_s=1e300)
    with pytest.raises(ValueError, match="max_num_queued_tokens"):
        FrontDoor(max_num_queued_tokens=10**18)
    with pytest.raises(ValueError, match="lease_ttl_s"):
        GatewayConfig(capacity_tokens=100, lease_ttl_s=float("inf"))
    TierConfig("interactive", ttft_s=86_400.0, queue_timeout_s=None)  # a day is allowed


# --- trace and records files ------------------------------------------------------------------
def test_a_records_file_asking_for_no_tokens_is_refused(tmp_path: Path) -> None:
    rec = tmp_path / "rec.csv"
    rec.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens,ttft_s,e2e_s,status\n"
                   "0,100,0,0,0.1,0.5,error\n1,100,10,20,0.1,0.5,ok\n2,100,5,20,0.1,0.3,ok\n")
    code, _, stderr = run("validate", "--records", rec, "--out", tmp_path / "v")
    assert_clean_error(code, stderr, "rec.csv", "line 2", "max_output_tokens", ">= 1")
    assert not (tmp_path / "v").exists()


def test_a_trace_timeout_beyond_a_day_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "to.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,timeout_s\n0,100,10,1e300\n")
    code, _, stderr = run("simulate", "--trace", path)
    assert_clean_error(code, stderr, "to.csv", "line 2", "timeout_s")


# --- regress reports ----------------------------------------------------------------------------
def test_regress_reports_never_overwrite_a_file_they_did_not_write(tmp_path: Path) -> None:
    # the paths are checked before the suite is read: no suite is needed to be refused
    s, base = tmp_path / "no-suite", tmp_path / "no-base"
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    for flag in ("--markdown", "--junit"):
        code, _, stderr = run("regress", s, "--baseline", base, flag, notes)
        assert_clean_error(code, stderr, flag, str(notes), "not overwritten")
        assert notes.read_text() == "my notes\n"
    code, _, stderr = run("regress", s, "--baseline", base, "--junit", tmp_path)
    assert_clean_error(code, stderr, "--junit", "directory")
    code, _, stderr = run("regress", s, "--baseline", base, "--junit", notes / "r.xml")
    assert_clean_error(code, stderr, "--junit", "is a file")
    code, _, stderr = run("regress", s, "--baseline", base, "--junit", tmp_path / "r",
                          "--markdown", tmp_path / "r")
    assert_clean_error(code, stderr, "--junit and --markdown")
    # its own reports (and empty files) are replaced, as --out replaces a run directory
    from kvbudget.cli.regress import _check_report_paths
    from kvbudget.studies.regress import RegressReport, render_junit, render_markdown

    xml, md = tmp_path / "r.xml", tmp_path / "r.md"
    md.write_text("")
    empty = RegressReport(scenarios=[], alpha=0.05, wall_time_s=0.0)
    xml.write_text(render_junit(empty))
    _check_report_paths(xml, md)
    md.write_text(render_markdown(empty))
    _check_report_paths(xml, md)


# --- output paths: checked before any work, one line naming the flag --------------------------
@pytest.fixture(scope="module")
def fx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fx")
    (root / "a_file").write_text("x")
    (root / "garbage.bin").write_bytes(bytes(range(256)) * 4)
    (root / "scn.toml").write_text(_toml(small_scenario_dict(n=8, name="scn")))
    (root / "trace.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1,20,3\n")
    (root / "rec.csv").write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
                                  "0,100,10,0.05,0.3\n1,120,12,0.05,0.35\n")
    code, _, stderr = run("simulate", "--scenario", root / "scn.toml", "--out", root / "run")
    assert code == 0, stderr
    return {p.name: p for p in root.iterdir()}


DIR_COMMANDS = {
    "simulate": lambda f, o: ["simulate", "--scenario", f["scn.toml"], "--out", o],
    "compare": lambda f, o: ["compare", "--scenario", f["scn.toml"], "--policies", "unlimited",
                             "--out", o],
    "sweep": lambda f, o: ["sweep", "--scenario", f["scn.toml"], "--grid", "seed=1",
                           "--out", o, "--no-plot"],
    "report": lambda f, o: ["report", f["run"], "--out", o],
    "validate --records": lambda f, o: ["validate", "--records", f["rec.csv"], "--out", o,
                                        "--model", "Llama-3.1-8B"],
    "replay": lambda f, o: ["replay", "--url", "http://127.0.0.1:9", "--trace", f["trace.csv"],
                            "--out", o],
}
FILE_COMMANDS = {
    "calibrate --records": lambda f, o: ["calibrate", "--records", f["rec.csv"], "--out", o,
                                         "--max-evals", "1", "--model", "Llama-3.1-8B"],
    "trace convert": lambda f, o: ["trace", "convert", f["trace.csv"], "--out", o],
    "trace synth": lambda f, o: ["trace", "synth", "--num-requests", "3", "--out", o],
}


@pytest.mark.parametrize("command", sorted(DIR_COMMANDS))
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_output_directory_that_cannot_be_one_is_refused_first(
        fx: dict[str, Path], command: str, where: str) -> None:
    out = fx["a_file"] if where == "a file" else fx["a_file"] / "sub"
    code, _, stderr = run(*DIR_COMMANDS[command](fx, out))
    assert_clean_error(code, stderr, "--out", str(fx["a_file"]), "is a file, not a directory")
    assert fx["a_file"].read_text() == "x"


@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
def test_an_output_file_that_cannot_be_one_is_refused_first(fx: dict[str, Path],
                                                            command: str) -> None:
    code, _, stderr = run(*FILE_COMMANDS[command](fx, fx["run"]))
    assert_clean_error(code, stderr, "--out", "is a directory")
    code, _, stderr = run(*FILE_COMMANDS[command](fx, fx["a_file"] / "x.csv"))
    assert_clean_error(code, stderr, "--out", "is a file, not a directory")


def test_an_output_file_in_a_new_folder_is_written(fx: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "cost.json"  # the folders are made, not an Errno 2
    code, _, stderr = run(*FILE_COMMANDS["calibrate --records"](fx, out))
    assert code == 0, stderr
    assert out.is_file()


# --- files of the wrong kind where a scenario or cost model is due -----------------------------
@pytest.mark.parametrize("flag", ["--scenario", "--cost-model"])
@pytest.mark.parametrize("kind", ["garbage.bin", "run", "under a file"])
def test_unreadable_input_files_are_one_line_naming_them(fx: dict[str, Path], flag: str,
                                                         kind: str) -> None:
    path = fx["a_file"] / "x" if kind == "under a file" else fx[kind]
    code, _, stderr = run("simulate", flag, path)
    assert_clean_error(code, stderr, str(path))
    assert "codec" not in stderr and "Errno" not in stderr


def test_an_empty_scenario_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "empty.toml"
    path.write_text("")
    code, _, stderr = run("simulate", "--scenario", path)
    assert_clean_error(code, stderr, str(path), "workload.kind")


@pytest.mark.parametrize(("model", "needle"), [
    ("", "model: empty name"),
    ("zzz", "unknown model preset 'zzz'"),
    ("a" * 3000, "unknown model preset"),
])
def test_model_names_that_are_no_preset_or_file(model: str, needle: str) -> None:
    code, _, stderr = run("simulate", *TINY, "--model", model)
    assert_clean_error(code, stderr, needle)
    assert "engine." not in stderr and "Errno" not in stderr


# --- flags that would be ignored or that no study can use --------------------------------------
def test_validate_records_refuses_live_only_flags(fx: dict[str, Path], tmp_path: Path) -> None:
    for flag, value in (("--read-timeout", "-1"), ("--api-key", "sk-secret-1")):
        code, _, stderr = run("validate", "--records", fx["rec.csv"], "--out", tmp_path / "v",
                              flag, value)
        assert_clean_error(code, stderr, flag, "--records")
        assert "sk-secret-1" not in stderr
    code, _, stderr = run("calibrate", "--records", fx["rec.csv"], "--out", tmp_path / "c.json",
                          "--read-timeout", "0")
    assert_clean_error(code, stderr, "--read-timeout")


def test_tune_confidence_is_a_level(fx: dict[str, Path], tmp_path: Path) -> None:
    code, _, stderr = run("tune", "--scenario", fx["scn.toml"], "--param",
                          "policy_params.overcommit_ratio=0.5:1", "--out", tmp_path / "t",
                          "--confidence", "1e-300")
    assert code == 2 and "--confidence" in stderr


def test_fetch_list_refuses_what_it_would_ignore() -> None:
    code, _, stderr = run("trace", "fetch", "--list", "--sha256", "abc")
    assert_clean_error(code, stderr, "--list", "--sha256")


@pytest.mark.parametrize(("args", "needle"), [
    (["--rate-rps", "1e-300", "--num-requests", "5"], "rate_rps"),
    (["--duration-s", "1e12", "--rate-rps", "1e-9"], "duration_s"),
])
def test_synth_refuses_a_workload_spanning_centuries(tmp_path: Path, args: list[str],
                                                     needle: str) -> None:
    out = tmp_path / "s.jsonl"
    code, _, stderr = run("trace", "synth", *args, "--out", out)
    assert_clean_error(code, stderr, needle, "ten years")
    assert not out.exists()


# --- scenario fields beyond any deployment (the campaign's scenario round) ----------------------
@pytest.mark.parametrize(("expr", "needle"), [
    ("engine.swap_space_gib=1e300", "swap_space_gib"),
    ("engine.swap_space_gib=inf", "swap_space_gib"),
    ("engine.schedule_conservativeness=1e300", "schedule_conservativeness"),
    ("timeline_period_s=1e300", "timeline_period_s"),
    ("workload.arrival.rate_rps=1e300", "workload.arrival.rate_rps"),
    ("clients.interactive={preset='impatient-user',timeout_s=true}", "timeout_s"),
    ("clients.interactive={preset='impatient-user',timeout_s=1e300}", "timeout_s"),
    ("clients.batch={preset='openai-sdk',max_attempts=100000000}", "max_attempts"),
    ("clients.batch={preset='openai-sdk',honor_retry_after=1}", "honor_retry_after"),
])
def test_scenario_values_beyond_any_deployment_are_refused(expr: str, needle: str) -> None:
    code, _, stderr = run("simulate", *TINY, "--set", expr)
    assert_clean_error(code, stderr, needle)


def test_the_library_bounds_client_models_too() -> None:
    from kvbudget.policies.clients import ClientModel

    with pytest.raises(ValueError, match="max_backoff_s must be <= 86,400"):
        ClientModel(max_backoff_s=1e9)
    with pytest.raises(ValueError, match="max_attempts must be a number"):
        ClientModel(max_attempts=True)  # type: ignore[arg-type]
    ClientModel(timeout_s=86_400.0, max_attempts=10_000)


def test_a_deadline_centuries_after_its_arrival_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dl.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,deadline_s\n0,10,2,5\n1,10,2,1e300\n")
    code, _, stderr = run("trace", "stats", path)
    assert_clean_error(code, stderr, "dl.csv", "line 3", "deadline_s", "ten years")


def test_a_parquet_column_of_booleans_is_no_token_count(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "b.parquet"
    pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [True, True],
                  "output_tokens": [5, 5]}).to_parquet(path)
    code, _, stderr = run("trace", "stats", path)
    assert_clean_error(code, stderr, "b.parquet", "prompt_tokens", "true/false")


# --- files nested too deeply, cost models and GPUs beyond any engine (the run-dir round) -------
DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("where", ["summary.json", "records.json", "trace.jsonl", "gpu.json",
                                   "config.json", "scenario.toml"])
def test_a_document_nested_too_deeply_is_one_line_naming_it(fx: dict[str, Path], tmp_path: Path,
                                                            where: str) -> None:
    import shutil

    if where == "summary.json":
        run_dir = tmp_path / "run"
        shutil.copytree(fx["run"], run_dir)
        path = run_dir / "summary.json"
        path.write_text(DEEP)
        from kvbudget.results.run_result import read_run  # what report, validate ... read

        with pytest.raises(ValueError, match=r"summary\.json: not valid JSON") as err:
            read_run(run_dir)
        assert len(str(err.value).splitlines()) == 1
        return
    elif where == "records.json":
        path = tmp_path / where
        path.write_text(DEEP)
        args = ["validate", "--records", path, "--out", tmp_path / "v"]
    elif where == "trace.jsonl":
        path = tmp_path / where
        path.write_text('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1, "x": '
                        + DEEP + "}\n")
        args = ["trace", "stats", path]
    elif where == "gpu.json":
        path = tmp_path / where
        path.write_text(DEEP)
        args = ["simulate", *TINY, "--gpu", path]
    elif where == "config.json":
        path = tmp_path / "m" / where
        path.parent.mkdir()
        path.write_text(DEEP)
        args = ["simulate", *TINY, "--model", path]
    else:
        path = tmp_path / where
        path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
        args = ["simulate", "--scenario", path]
    code, _, stderr = run(*args)
    assert_clean_error(code, stderr, path.name)


def _cost_file(tmp_path: Path, fx: dict[str, Path], **params: float) -> Path:
    import json

    code, _, stderr = run("calibrate", "--records", fx["rec.csv"], "--out",
                          tmp_path / "cost.json", "--max-evals", "1", "--model", "Llama-3.1-8B")
    assert code == 0, stderr
    data = json.loads((tmp_path / "cost.json").read_text())
    for key, value in params.items():
        if key == "frontend_overhead_s":
            data[key] = value
        else:
            data["parameters"][key] = value
    out = tmp_path / "bad.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize(("param", "value", "needle"), [
    ("step_overhead_s", 1e300, "step_overhead_s must be <= 1 s"),
    ("layer_overhead_s", 1e300, "layer_overhead_s"),
    ("gemm_efficiency", float("nan"), "must be finite"),
    ("frontend_overhead_s", 1e300, "frontend_overhead_s"),
])
def test_a_cost_model_beyond_any_engine_is_refused_not_simulated_forever(
        fx: dict[str, Path], tmp_path: Path, param: str, value: float, needle: str) -> None:
    path = _cost_file(tmp_path, fx, **{param: value})
    code, _, stderr = run("simulate", "--scenario", fx["scn.toml"], "--cost-model", path)
    assert_clean_error(code, stderr, path.name, needle)


@pytest.mark.parametrize(("figures", "needle"), [
    ({"bf16_flops": 1e300}, "bf16_flops must be <="),
    ({"fp16_flops": True}, "'fp16_flops': expected a number"),
    ({"hbm_bandwidth_bytes_s": 1.0, "bf16_flops": 1.0}, "step-time model takes"),
])
def test_gpu_files_beyond_any_gpu_are_refused(tmp_path: Path, figures: dict[str, object],
                                              needle: str) -> None:
    import json

    gpu = {"name": "G", "memory_bytes": 80e9, "hbm_bandwidth_bytes_s": 3.35e12,
           "bf16_flops": 9.9e14, "pcie_bandwidth_bytes_s": 6.4e10, **figures}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(gpu))
    code, _, stderr = run("simulate", *TINY, "--num-gpu-blocks", "1000", "--gpu", path)
    assert_clean_error(code, stderr, needle)


@pytest.mark.parametrize(("args", "needle"), [
    (["--price", "=1"], "--price"),
    (["--price", "H100-80GB=1e300"], "--price"),
    (["--prices", "GARBAGE"], "not UTF-8"),
    (["--prices", "HUGE"], "price must be a number in"),
])
def test_plan_prices_beyond_any_cloud_are_refused(fx: dict[str, Path], tmp_path: Path,
                                                  args: list[str], needle: str) -> None:
    if args[1] == "GARBAGE":
        args = [args[0], str(fx["garbage.bin"])]
    elif args[1] == "HUGE":
        (tmp_path / "p.toml").write_text("H100-80GB = 1e300\n")
        args = [args[0], str(tmp_path / "p.toml")]
    code, _, stderr = run("plan", "--scenario", fx["scn.toml"], "--out", tmp_path / "plan",
                          "--gpus", "H100-80GB", "--replicas", "1", *args)
    assert_clean_error(code, stderr, needle)


def test_a_key_in_a_server_urls_query_is_never_printed(tmp_path: Path) -> None:
    from kvbudget.live.openai_client import redact_url

    code, stdout, stderr = run("replay", "--url", "http://127.0.0.1:9/?api_key=sk-SECRET-9",
                               "--trace", "x.csv", "--out", tmp_path / "r")
    assert code == 2 and "sk-SECRET-9" not in stdout + stderr, stderr
    assert redact_url("http://u:pw@h:1?key=S#f") == "http://h:1?***"
    assert redact_url("http://h:8000/v1") == "http://h:8000/v1"


@pytest.mark.parametrize("value", ["1e300", "1e12"])
def test_a_recording_with_latencies_beyond_a_day_is_refused(tmp_path: Path, value: str) -> None:
    rec = tmp_path / "rec.csv"
    rec.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,10,0.05,0.3\n"
                   f"1,120,12,0.05,{value}\n")
    code, _, stderr = run("validate", "--records", rec, "--out", tmp_path / "v")
    assert_clean_error(code, stderr, "rec.csv", "line 3", "e2e_s", "over a day")


# --- trace options, engine knobs and grids (the options round) ----------------------------------
@pytest.mark.parametrize(("args", "needle"), [
    (["--arrival", "constant:1"], "has arrival times"),
    (["--column", "arrival_s=nope"], "has no column 'nope'"),
    (["--servegen-clients", "1"], "ServeGen"),
    (["--servegen-arrivals", "fitted"], "ServeGen"),
])
def test_trace_options_that_would_be_ignored_are_refused(csv3: Path, args: list[str],
                                                         needle: str) -> None:
    code, _, stderr = run("trace", "stats", csv3, *args)
    assert_clean_error(code, stderr, "t.csv", needle)


def test_spread_s_on_a_length_only_table_is_refused(tmp_path: Path) -> None:
    """--spread-s spaces requests sharing a recorded timestamp: on a length-only table (its
    arrivals drawn) it did nothing, unsaid, as --arrival on a timed trace would."""
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens,output_tokens\n100,10\n120,12\n")
    code, _, stderr = run("trace", "stats", path, "--spread-s", "3")
    assert_clean_error(code, stderr, "lengths.csv", "spread_s", "has no arrival times",
                       "(--spread-s)")
    code, _, stderr = run("trace", "stats", path)
    assert code == 0, stderr


def test_generic_options_on_another_format_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    code, _, stderr = run("trace", "stats", path, "--column", "arrival_s=x")
    assert_clean_error(code, stderr, "az.csv", "generic format")
    code, _, stderr = run("trace", "stats", path, "--arrival-unit", "ms")
    assert_clean_error(code, stderr, "az.csv", "arrival_unit")


def test_fewer_batched_tokens_than_sequences_is_refused_as_vllm_does() -> None:
    code, _, stderr = run("simulate", *TINY, "--max-num-seqs", "64",
                          "--max-num-batched-tokens", "16")
    assert_clean_error(code, stderr, "--max-num-batched-tokens (16)", "max_num_seqs (64)")


@pytest.mark.parametrize(("grid", "needle"), [
    ("engine.num_gpu_blocks=1000,1000", "given twice"),
    ("policy_params.overcommit_ratio=0.5:0.5:3", "repeat"),
    ("policy_params.overcommit_ratio=0.5:1:1000000000", "number of values"),
    ("policy_params.overcommit_ratio=nan:1:3", "finite"),
])
def test_grids_that_repeat_or_explode_are_refused(fx: dict[str, Path], tmp_path: Path,
                                                  grid: str, needle: str) -> None:
    out = tmp_path / "sw"
    code, _, stderr = run("sweep", "--scenario", fx["scn.toml"], "--grid", grid, "--out", out,
                          "--no-plot")
    assert_clean_error(code, stderr, "--grid", needle)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("tier", ["", "<b>"])
def test_a_records_tier_that_is_no_name_is_refused_naming_the_flag(fx: dict[str, Path],
                                                                   tmp_path: Path,
                                                                   tier: str) -> None:
    code, _, stderr = run("validate", "--records", fx["rec.csv"], "--tier", tier, "--out",
                          tmp_path / "v")
    assert_clean_error(code, stderr, "--tier")


def test_flag_names_in_messages_are_the_flags_given(csv3: Path, fx: dict[str, Path],
                                                    tmp_path: Path) -> None:
    code, _, stderr = run("trace", "stats", csv3, "--servegen-clients", "")
    assert_clean_error(code, stderr, "--servegen-clients")
    code, _, stderr = run("report", fx["run"], "--seed", "-1", "--out", tmp_path / "r")
    assert code == 2 and "--seed" in stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["tune", "--param", "policy_params.overcommit_ratio=0.5:1",
      "--slo", "tiers.interactive.ttft_s.p99<=-1"], "never below 0"),
    (["capacity", "--slo", "overall_slo_attainment>=2"], "fraction"),
    (["plan", "--replicas", "100000"], "--replicas"),
    (["plan", "--tp", "0"], "--tp"),
])
def test_study_targets_no_run_can_meet_are_refused_before_any_run(
        fx: dict[str, Path], tmp_path: Path, args: list[str], needle: str) -> None:
    out = tmp_path / "study"
    code, _, stderr = run(args[0], "--scenario", fx["scn.toml"], "--out", out, *args[1:])
    assert_clean_error(code, stderr, needle)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("expr", ["engine..block_size=16", ".seed=1", "engine.=16"])
def test_a_set_key_with_an_empty_part_is_refused(expr: str) -> None:
    code, _, stderr = run("simulate", *TINY, "--set", expr)
    assert_clean_error(code, stderr, "empty part")
