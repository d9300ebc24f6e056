"""Hostile and damaged inputs (issue 24, and the file and flag part of the bad-input campaign).

Every case ends in one clean line on stderr with exit 2 (bad input), or in a valid result;
never a traceback, a hang, or nonsense taken as data. Long-running cases are bounded by
refusing them, so no test here waits on the machine's speed.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.run_result import RunResult, read_run
from kvbudget.workloads.traces import load_trace
from tests.conftest import REPO, small_scenario_dict

runner = CliRunner()


def run(*args: object) -> tuple[int, str, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def assert_clean_error(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    assert stderr.startswith("error: ") and len(stderr.strip().splitlines()) == 1, stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in stderr, stderr


def _toml(table: dict[str, object]) -> str:
    import tomli_w

    return tomli_w.dumps(table)


# --- issue 24 item 1: a gate that cannot compare fails -----------------------------------------
def test_regress_refuses_a_wiped_baseline(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "tiny.toml").write_text(_toml(small_scenario_dict(n=20, name="tiny")))
    base = tmp_path / "base"
    code, _, stderr = run("regress", suite, "--baseline", base, "--update")
    assert code == 0, stderr
    path = base / "tiny.toml"
    text = path.read_text()
    wiped = re.sub(r"values = \[.*\]", "values = [nan, nan, nan]", text)
    assert wiped != text
    path.write_text(wiped)
    code, _, stderr = run("regress", suite, "--baseline", base)
    assert_clean_error(code, stderr, str(path), "has no baseline value")
    first = next(iter(tomllib.loads(text)["metrics"]))
    assert repr(first) in stderr
    # --update rewrites it; then the gate compares again
    code, _, stderr = run("regress", suite, "--baseline", base, "--update")
    assert code == 0, stderr
    code, stdout, stderr = run("regress", suite, "--baseline", base)
    assert code == 0 and "regress ok" in stdout, stderr
    # a baseline with every metric deleted cannot pass either
    path.write_text(text[:text.index("[metrics.")] + "[metrics]\n")
    code, _, stderr = run("regress", suite, "--baseline", base)
    assert_clean_error(code, stderr, "no metrics to compare")


# --- issue 24 item 2: absolute timestamps -----------------------------------------------------
def test_epoch_seconds_are_rebased_with_a_note(tmp_path: Path) -> None:
    csv = tmp_path / "e.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n1700000000.0,100,10\n"
                   "1700000001.5,200,20\n")
    loaded = load_trace(csv)
    np.testing.assert_allclose(loaded.workload.arrival_s, [0.0, 1.5])
    assert any("absolute timestamps" in w for w in loaded.report.warnings)
    code, _, stderr = run("simulate", "--trace", csv, "--out", tmp_path / "run")
    assert code == 0, stderr
    tl = read_run(tmp_path / "run").timeline
    assert len(tl) < 10  # a few seconds of timeline, not fifty years of it


def test_parquet_timestamps_are_rebased(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "t.parquet"
    pd.DataFrame({"arrival_s": pd.to_datetime(["2024-05-01T12:00:00", "2024-05-01T12:00:02"]),
                  "prompt_tokens": [10, 20], "output_tokens": [5, 5]}).to_parquet(path)
    try:
        loaded = load_trace(path)
    except ValueError as exc:  # refused with a message is fine too
        assert str(path) in str(exc)
    else:
        np.testing.assert_allclose(loaded.workload.arrival_s, [0.0, 2.0])


def test_a_trace_spanning_centuries_is_refused(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n1e300,200,20\n")
    code, _, stderr = run("simulate", "--trace", csv)
    assert_clean_error(code, stderr, "c.csv", "line 3", "arrival_s", "spans")


@pytest.mark.parametrize("value", ["1e-7", "inf"])
def test_a_timeline_without_bounds_is_refused(value: str) -> None:
    code, _, stderr = run("simulate", "--set", f"timeline_period_s={value}")
    assert_clean_error(code, stderr, "timeline_period_s")


# --- issue 24 item 3: a run directory never mixes two runs -------------------------------------
def test_an_interrupted_write_never_mixes_two_runs(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow.parquet as pq

    from kvbudget.policies import make_policy
    from kvbudget.simulator.run import SimConfig, simulate
    from tests.conftest import make_workload

    def result(n: int) -> RunResult:
        w = make_workload(np.arange(n) * 0.5, [100] * n, [10] * n)
        return simulate(w, make_policy("unlimited"), SimConfig())

    out = tmp_path / "run"
    old, new = result(8), result(5)
    old.write(out)
    # the second Parquet file begun (the timeline), however the tables are written
    calls = 0

    def counted(real: Any) -> Any:
        def wrapper(*args: object, **kwargs: object) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:  # Ctrl-C while the timeline is written
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(pq, "write_table", counted(pq.write_table))
    monkeypatch.setattr(pq, "ParquetWriter", counted(pq.ParquetWriter))
    with pytest.raises(KeyboardInterrupt):
        new.write(out)
    monkeypatch.undo()
    try:
        back = read_run(out)
    except FileNotFoundError:
        return  # not a run directory: fine, nothing mixed
    assert len(back.records) == 8 and back.summary == json.loads(json.dumps(old.summary))
    assert back.timeline.equals(old.timeline)
    # a later complete write replaces it whole
    new.write(out)
    assert len(read_run(out).records) == 5


# --- issue 24 item 5: magnitudes that overflow -------------------------------------------------
@pytest.mark.parametrize("args", [
    ["--num-gpu-blocks", "100000000000000000000"],
    ["--set", "engine.block_size=1e18"],
    ["--set", "engine.max_num_seqs=1000000000000"],
    ["--set", "engine.max_num_batched_tokens=1e15"],
])
def test_absurd_engine_sizes_are_refused(args: list[str]) -> None:
    code, _, stderr = run("simulate", *args)
    if (code == 2 and "must be an integer" in stderr) or "not a valid integer" in stderr:
        return  # typer's own refusal of an integer it cannot hold is also clean
    assert_clean_error(code, stderr)


def test_chunked_prefill_off_is_refused_as_vllm_does() -> None:
    code, _, stderr = run("simulate", "--set", "engine.enable_chunked_prefill=false")
    assert_clean_error(code, stderr, "max_num_batched_tokens", "max_model_len")
    code, _, stderr = run("simulate", "--set", "engine.enable_chunked_prefill=false",
                          "--set", "engine.max_model_len=8192")
    assert code == 0, stderr


def test_a_watermark_no_prompt_fits_beside_refuses_requests_not_the_run() -> None:
    code, stdout, stderr = run("simulate", "--set", "engine.watermark=0.999", "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["completed"] < summary["overall"]["offered"]


# --- issue 24 item 6: output that is what it claims --------------------------------------------
def test_trace_stats_json_is_json(tmp_path: Path) -> None:
    csv = tmp_path / "two.csv"
    csv.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n5e-324,100,10\n")
    code, stdout, stderr = run("trace", "stats", csv, "--json")
    assert code == 0, stderr

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    stats = json.loads(stdout, parse_constant=no_constants)
    assert stats["rows"] == 2


def test_trace_synth_of_nothing_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    code, _, stderr = run("trace", "synth", "--num-requests", "0", "--out", out)
    assert_clean_error(code, stderr)
    assert not out.exists()


def test_validate_refuses_zero_seqs(tmp_path: Path) -> None:
    code, _, stderr = run("validate", "--url", "http://127.0.0.1:9", "--trace", "x.csv",
                          "--cost-model", "x.json", "--max-num-seqs", "0", "--out",
                          tmp_path / "v")
    assert code == 2 and "--max-num-seqs" in stderr and "Traceback" not in stderr


def test_out_naming_a_file_is_a_clean_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    code, _, stderr = run("simulate", "--out", f, "--set", "workload.num_requests=5")
    assert_clean_error(code, stderr, str(f))


# the entry point, saying "ready" on stderr once it has installed its SIGTERM handler (so the
# test signals a process that is inside main(), whatever the machine's speed)
BOOT = ("import signal, sys; import kvbudget.cli.main as m; sys.argv[0] = 'kvbudget'\n"
        "install = signal.signal\n"
        "def hooked(sig, handler):\n"
        "    old = install(sig, handler)\n"
        "    if sig == signal.SIGTERM:\n"
        "        print('ready', file=sys.stderr, flush=True)\n"
        "    return old\n"
        "signal.signal = hooked\n"
        "m.main()")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_simulate_interrupted_says_so(sig: signal.Signals) -> None:
    # the signal is sent once the process is inside the command (it says "ready" first) and the
    # run is far longer than a signal takes to arrive (10^7 requests)
    code, _, stderr = signalled(
        ["import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n" + BOOT,
         "simulate", "--set", "workload.num_requests=10000000"], "ready", sig)
    assert "Traceback" not in stderr, stderr
    # SIGTERM takes Ctrl-C's way out: one line, the shell's code for an interrupt
    assert code == 130 and stderr.strip() == "error: interrupted", stderr


def signalled(args: list[str], ready: str, sig: signal.Signals, *, first: bool = True
              ) -> tuple[int, str, str]:
    """``python -c ARGS...`` sent ``sig`` once a line of its stderr is ``ready`` (its first
    line, with ``first``): its exit status, stdout and the stderr after that line."""
    proc = subprocess.Popen([sys.executable, "-c", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert proc.stderr is not None
        before: list[str] = []
        while (line := proc.stderr.readline()) and line.strip() != ready and not first:
            before.append(line)
        assert line.strip() == ready, "".join([*before, line])  # not the event, or EOF
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stdout, stderr


# the ``kvbudget`` script's start, held inside the import of the command's module (where
# ``kvbudget.cli.main`` loads it at import time) until the test has signalled it: "loading" on
# stderr says the process is there
HELD_START = ("import signal, sys, threading\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "sys.argv[0] = 'kvbudget'\n"
              "class Hold:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'kvbudget.cli.simulate':\n"
              "            print('loading', file=sys.stderr, flush=True)\n"
              "            threading.Event().wait(120)\n"
              "        return None\n"
              "sys.meta_path.insert(0, Hold())\n"
              "from kvbudget.cli.main import main\n"
              "main()")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_while_the_command_loads_says_so(sig: signal.Signals) -> None:
    """Ctrl-C in a command's first moments (its modules loading) printed a traceback; SIGTERM
    there ended the process silently with -15."""
    code, stdout, stderr = signalled([HELD_START, "simulate"], "loading", sig)
    assert "Traceback" not in stderr, stderr
    assert code == 130 and stderr.strip() == "error: interrupted", stderr
    assert stdout == ""


def test_a_pool_worker_keeps_the_usual_ctrl_c() -> None:
    """A pool worker runs the command's main module again (as ``__mp_main__``): it gets Python's
    own SIGINT handler back, not the start's. The worker starts with Python's own (a suite run
    as a background job inherits SIGINT ignored, which the start leaves as it is)."""
    code = ("import runpy, signal, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "sys.argv[0] = 'kvbudget'\n"
            "runpy.run_module('kvbudget.cli.main', run_name='__mp_main__')\n"
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
            " signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, text=True,
                          capture_output=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stdout.split() == ["True", "True"], proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sweep_interrupted_keeps_its_runs_and_resumes(tmp_path: Path,
                                                      sig: signal.Signals) -> None:
    import time

    from kvbudget.studies.sweep import PARTS_DIR

    scn = tmp_path / "s.toml"
    scn.write_text(_toml(small_scenario_dict(n=40)))
    out = tmp_path / "sw"
    blocks = ",".join(str(1000 + 10 * i) for i in range(48))  # a part file at 32 runs
    args = ["sweep", "--scenario", str(scn), "--grid", f"engine.num_gpu_blocks={blocks}",
            "--policies", "conservative", "--out", str(out), "-j", "1", "-r", "1", "--no-plot"]
    proc = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, "
         "signal.default_int_handler)\n" + BOOT, *args],
        cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        # the signal comes once the first part file (32 runs) is on disk: an event, not a delay
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if any((out / PARTS_DIR).glob("part-*.parquet")):
                break
            time.sleep(0.02)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in stderr, stderr
    if proc.returncode == 0:
        pytest.skip("the sweep finished before the signal came")  # 16 runs after 32: unlikely
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("error: interrupted"), stderr
    code, _, stderr = run(*args, "--resume")
    assert code == 0, stderr
    import pandas as pd

    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 48 and df["run_key"].is_unique


# --- the campaign: scenario files and --set -----------------------------------------------------
BAD_SETS = [
    "engine.block_size=abc", "engine.block_size=-1", "engine.block_size=0",
    "engine.num_gpu_blocks=0", "engine.max_num_seqs=0", "engine.watermark=1.5",
    "engine.watermark=-0.1", "engine.gpu_memory_utilization=0", "engine.nope=1",
    "nope=1", "seed=-1", "seed=abc", "timeline_period_s=0", "timeline_period_s=-1",
    "timeline_period_s=nan", "workload.num_requests=-5", "workload.kind=nope",
    "engine.scheduling_policy=random", "engine.name=nope", "engine.max_model_len=1",
    "engine", "=1", "engine.block_size", "policy=nope", "policy_params.overcommit_ratio=true",
    "engine.swap_space_gib=-1", "engine.schedule_conservativeness=0",
]


@pytest.mark.parametrize("expr", BAD_SETS)
def test_bad_set_expressions_are_one_line(expr: str) -> None:
    code, _, stderr = run("simulate", "--set", expr)
    assert_clean_error(code, stderr)


scalar = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=8), st.booleans(), st.lists(st.integers(), max_size=2))
FIELDS = ["engine.block_size", "engine.num_gpu_blocks", "engine.max_num_seqs",
          "engine.max_num_batched_tokens", "engine.watermark", "engine.max_model_len",
          "engine.gpu_memory_utilization", "timeline_period_s", "seed",
          "workload.num_requests", "workload.arrival.rate_rps", "engine.swap_space_gib"]


def _set(table: dict[str, object], dotted: str, value: object) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        table = table.setdefault(k, {})  # type: ignore[assignment]
    table[keys[-1]] = value


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=scalar)
def test_scenario_files_with_any_value_end_cleanly(tmp_path_factory: pytest.TempPathFactory,
                                                   field: str, value: object) -> None:
    """A scenario field of any type and magnitude: a clean error or a valid, bounded run."""
    if isinstance(value, float) and not math.isfinite(value):
        return  # TOML writes nan/inf; covered by the explicit cases (tomli_w refuses some)
    table = small_scenario_dict(n=20)
    _set(table, field, value)
    path = tmp_path_factory.mktemp("scn") / "s.toml"
    try:
        path.write_text(_toml(table))
    except (TypeError, ValueError):
        return
    code, stdout, stderr = run("simulate", "--scenario", path, "--json")
    assert "Traceback" not in stderr
    if code == 0:
        summary = json.loads(stdout)
        assert summary["overall"]["offered"] >= 0
    else:
        assert_clean_error(code, stderr)


# --- the campaign: trace files ------------------------------------------------------------------
TRACE_CASES: dict[str, bytes] = {
    "empty": b"",
    "header only": b"arrival_s,prompt_tokens,output_tokens\n",
    "binary garbage": bytes(range(256)) * 4,
    "latin-1": "arrival_s,prompt_tokens,output_tokens,tier\n0,1,1,caf\xe9\n".encode("latin-1"),
    "utf-16": "arrival_s,prompt_tokens,output_tokens\n0,1,1\n".encode("utf-16"),
    "nan": b"arrival_s,prompt_tokens,output_tokens\n0,nan,1\n",
    "inf": b"arrival_s,prompt_tokens,output_tokens\ninf,1,1\n",
    "negative": b"arrival_s,prompt_tokens,output_tokens\n0,-5,1\n",
    "huge prompt": b"arrival_s,prompt_tokens,output_tokens\n0,1000000000000,1\n",
    "mixed types": b"arrival_s,prompt_tokens,output_tokens\n0,abc,1\n",
    "truncated row": b"arrival_s,prompt_tokens,output_tokens\n0,10,1\n1,2",
    "jsonl truncated": b'{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n{"arr',
    "jsonl list": b"[1, 2, 3]\n",
    "jsonl mixed": b'{"arrival_s": 0, "prompt_tokens": "5", "output_tokens": 1}\n',
    "jsonl null": b'{"arrival_s": null, "prompt_tokens": 5, "output_tokens": 1}\n',
    "jsonl huge": b'{"arrival_s": 1e300, "prompt_tokens": 5, "output_tokens": 1}\n'
                  b'{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1}\n',
    "unsorted": b"arrival_s,prompt_tokens,output_tokens\n5,10,1\n1,10,1\n",
    "duplicate ids": b"id,arrival_s,prompt_tokens,output_tokens\n1,0,10,1\n1,1,10,1\n",
    "epoch": b"arrival_s,prompt_tokens,output_tokens\n1700000000,10,1\n1700000005,10,1\n",
}


@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_damaged_traces_end_cleanly(tmp_path: Path, case: str) -> None:
    suffix = ".jsonl" if case.startswith("jsonl") else ".csv"
    path = tmp_path / f"t{suffix}"
    path.write_bytes(TRACE_CASES[case])
    for args in (("trace", "stats", path, "--json"), ("simulate", "--trace", path, "--json")):
        code, stdout, stderr = run(*args)
        assert "Traceback" not in stderr
        if code == 0:
            json.loads(stdout, parse_constant=lambda c: pytest.fail(f"{c} in {case}"))
        else:
            assert_clean_error(code, stderr, path.name)


def test_a_very_long_line_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0," + b"9" * 5_000_000 + b",1\n")
    code, _, stderr = run("trace", "stats", path)
    assert "Traceback" not in stderr
    assert code == 0 or (code == 2 and "long.csv" in stderr), stderr


def test_ctrl_c_inside_a_command_says_so(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C once a command runs (a simulation under way) reaches typer, which turned it into
    a silent exit 130; the test above signals before typer's handling starts."""
    import typer

    import kvbudget.cli.main as m

    toy = typer.Typer()

    @toy.command()
    def run() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "app", toy)
    monkeypatch.setattr(m.signal, "signal", lambda *args: None)  # leave pytest's handlers
    monkeypatch.setattr(sys, "argv", ["kvbudget"])
    assert m._run() == 130
    assert capsys.readouterr().err.strip() == "error: interrupted"
