"""Files kvbudget writes, read back by the commands that take a file of that kind (the guide's
"writes files it cannot load"): each written by the real writer and read by the real reader
through the CLI, paths with spaces included. A reader refuses only with a true reason."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
from typer.testing import CliRunner

import kvbudget.cli.live as live_commands
from kvbudget.cli.main import app
from kvbudget.live.calibrate import CalibrationPlan, GridPoint
from kvbudget.live.calibrate import calibrate as real_calibrate
from kvbudget.live.openai_client import ServerTarget
from kvbudget.workloads.traces.load import load_trace
from tests.conftest import small_scenario_dict
from tests.unit.live.test_backends_calibrate import VirtualEngine
from tests.unit.live.test_backends_live_gateway import Fake, _trace_file, fake  # noqa: F401

runner = CliRunner()


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small scenario.toml"
    path.write_text(tomli_w.dumps(small_scenario_dict(n=30, rate=6.0)))
    return path


def _refused(args: list[str]) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    err = " ".join(res.stderr.split())
    assert err.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return err


@pytest.mark.parametrize(
    "reader",
    [["simulate", "--trace"], ["compare", "--trace"], ["trace", "stats"], ["trace", "convert"]],
)
def test_a_run_directory_given_as_a_trace_is_named_for_what_it_is(
    tmp_path: Path, reader: list[str]
) -> None:
    """A run directory given as a trace was told it "holds no ServeGen chunk-N-trace.csv
    files", as if it were a ServeGen folder short of its files; so was compare's folder of
    runs. Both are now named as run directories, with the command that compares a simulation
    with the run, its path quoted so that it runs as printed."""
    scenario = _scenario(tmp_path)
    run = tmp_path / "sim run"
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--out", str(run)])
    assert res.exit_code == 0, res.stderr
    runs = tmp_path / "all policies"
    res = runner.invoke(app, ["compare", "--scenario", str(scenario), "--out", str(runs)])
    assert res.exit_code == 0, res.stderr
    extra = ["--scenario", str(scenario)] if reader[0] != "trace" else []
    if reader[-1] == "convert":
        extra = ["--out", str(tmp_path / "t.jsonl")]
    err = _refused([*reader, str(run), *extra])
    assert "is a kvbudget run directory (simulate, compare or replay --out), not a trace" in err
    assert "ServeGen" not in err, err
    said = err.split("kvbudget validate --records ", 1)[1].split(" --out DIR")[0]
    assert shlex.split(said) == [str(run)], err
    res = runner.invoke(app, ["validate", "--records", str(run), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr  # the command it names takes the run
    err = _refused([*reader, str(runs), *extra])
    assert "is a folder of 4 kvbudget run directories (compare --out), not a trace" in err
    assert "ServeGen" not in err, err


def test_report_measured_takes_a_live_run_not_a_simulation(
    tmp_path: Path,
    fake: Fake,  # noqa: F811
) -> None:
    """report --measured SIM_RUN, a simulate run: reported as 'simulated against measured',
    the simulation headed as 'the measured run', exit 0. A simulation is now refused there,
    naming what it is; replay's run directory (written by the real replay against a fake
    server, a path with spaces and unicode) is read as the measured run."""
    scenario = _scenario(tmp_path)
    run = tmp_path / "sim run"
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--out", str(run)])
    assert res.exit_code == 0, res.stderr
    err = _refused(["report", str(run), "--measured", str(run), "--out", str(tmp_path / "r")])
    assert f"--measured: {run}: a simulated run (simulate or compare --out" in err, err
    assert not (tmp_path / "r" / "report.html").exists()
    fake.state.token_s = 0.001
    fake.state.blocks = 200
    trace = _trace_file(tmp_path / "t.jsonl", 6)
    live = tmp_path / "replay run ü"
    res = runner.invoke(
        app,
        [
            "replay",
            "--url",
            fake.url,
            "--trace",
            str(trace),
            "--out",
            str(live),
            "--poll-period",
            "0.05",
        ],
    )
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--out",
            str(tmp_path / "sim of trace"),
            "--model",
            "Llama-3.1-8B",
        ],
    )
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(
        app,
        [
            "report",
            str(tmp_path / "sim of trace"),
            "--measured",
            str(live),
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.stderr
    html = (tmp_path / "r" / "report.html").read_text()
    assert f"against the measured run {live}" in html
    # a simulation of another workload (the scenario's 30 requests, not the trace's 6) was
    # refused "request 0 has tier ..." naming no file: now both runs and what differs
    err = _refused(["report", str(run), "--measured", str(live), "--out", str(tmp_path / "r2")])
    assert f"{run}: another workload than --measured {live}: of the 6 requests both hold " in err
    assert "(30 in the run, 6 measured)" in err and "in prompt tokens differ" in err, err


def _interrupted_calibration(out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """calibrate --url against the virtual engine, interrupted after 2 grid measurements:
    the measurements it keeps beside ``out`` (OUT.partial.json)."""

    def on_virtual(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any) -> Any:
        engine = VirtualEngine()
        shown = kwargs.pop("on_point")

        def on_point(point: GridPoint, done: int, total: int) -> None:
            shown(point, done, total)
            if done == 2:
                raise KeyboardInterrupt

        return real_calibrate(
            target,
            replace(plan, idle_gap_s=0.0),
            clock=engine.clock,
            transport=engine.transport(),
            on_point=on_point,
            **kwargs,
        )

    monkeypatch.setattr(live_commands, "calibrate", on_virtual)
    res = runner.invoke(
        app,
        [
            "calibrate",
            "--url",
            "http://fake.invalid",
            "--out",
            str(out),
            "--max-num-seqs",
            "8",
            "--max-num-batched-tokens",
            "2048",
            "--prefill-tokens",
            "64,512",
            "--decode-batches",
            "1,4",
            "--context-tokens",
            "32,256",
            "--repeats",
            "2",
        ],
    )
    assert res.exit_code == 130, res.stderr
    return out.with_name(f"{out.stem}.partial.json")


def test_kvbudgets_other_json_files_given_as_a_cost_model_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurements an interrupted calibrate --url keeps (OUT.partial.json), a run's
    summary.json, validate's validation.json and a sweep's sweep.json, each given to
    --cost-model, were told "field 'kind' must be 'linear', 'vllm-v1' or 'roofline'", as if a
    cost model lacked a field. Each is now named for what it is; the partial file with the
    calibrate command (its quoted --out) that finishes it."""
    scenario = _scenario(tmp_path)
    out = tmp_path / "cal dir" / "cost ü.json"
    partial = _interrupted_calibration(out, monkeypatch)
    run = tmp_path / "sim run"
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--out", str(run)])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(app, ["validate", "--records", str(run), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(
        app,
        [
            "sweep",
            "--scenario",
            str(scenario),
            "--grid",
            "engine.num_gpu_blocks=1500,2500",
            "--out",
            str(tmp_path / "sw"),
        ],
    )
    assert res.exit_code == 0, res.stderr
    readers = (
        ["simulate", "--scenario", str(scenario)],
        ["compare", "--scenario", str(scenario)],
        ["plan", "--gpus", "H100-80GB", "--out", str(tmp_path / "plan")],
        ["validate", "--records", str(run), "--out", str(tmp_path / "v2")],
    )
    for reader in readers:
        err = _refused([*reader, "--cost-model", str(partial)])
        assert (
            f"{partial}: the grid measurements an interrupted calibrate --url kept, not a "
            f"cost model: {out} is fitted and written once the whole grid is measured; "
            "rerun the same calibrate command (--url http://fake.invalid --out "
            f"{shlex.quote(str(out))} ...) with --resume"
        ) in err, err
    for file, what in (
        (run / "summary.json", "a run's summary (simulate, replay or serve"),
        (tmp_path / "v" / "validation.json", "validate's comparison"),
        (tmp_path / "sw" / "sweep.json", "a study's description (sweep.json)"),
    ):
        err = _refused(["simulate", "--scenario", str(scenario), "--cost-model", str(file)])
        assert f"{file}: {what}" in err and "field 'kind'" not in err, err


RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"


@pytest.mark.parametrize(
    ("recording", "block_tokens"),
    [
        ("guidellm-0.8.1/turns3_concurrent2.json", 16),
        ("published/inference-sim-jan20-codellama-prefill-1-excerpt.json", 1024),
    ],
)
def test_a_converted_traces_prefix_hashes_keep_their_block_size(
    tmp_path: Path, recording: str, block_tokens: int
) -> None:
    """trace convert of a recording whose prefix hashes name 16-token blocks (GuideLLM's
    conversations) wrote .jsonl and .csv files that say nothing of the size: simulate --trace
    of them refused the file kvbudget wrote ("2 hashes for 47 prompt tokens: a hash names a
    block of 512 tokens"), and 1,024-token hashes were read as 512-token ones, half the shared
    prefix, exit 0. Those encodings are now refused naming the .parquet that keeps the size;
    the .parquet is read back with it."""
    source = RECORDINGS / recording
    for suffix in (".jsonl", ".csv"):
        out = tmp_path / f"converted trace{suffix}"
        err = _refused(["trace", "convert", str(source), "--out", str(out)])
        assert (
            f"the requests' prefix hashes (hash_ids) name blocks of {block_tokens} tokens, "
            f"which a {suffix} file cannot record" in err
        ), err
        assert "write converted trace.parquet, which keeps the size" in err and not out.exists()
    out = tmp_path / "converted trace.parquet"
    res = runner.invoke(app, ["trace", "convert", str(source), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    assert load_trace(out).workload.prefix_block_tokens == block_tokens
    res = runner.invoke(app, ["simulate", "--trace", str(out), "--model", "Llama-3.1-8B"])
    assert res.exit_code == 0, res.stderr


def _bare(text: str) -> str:
    return "".join(text.split())


def test_a_simulated_run_read_as_a_recording_is_said_to_be_one(tmp_path: Path) -> None:
    """calibrate --records SIM_RUN and validate --records SIM_RUN, a simulate run directory,
    read it as measured ("60 measured"): the cost file fitted to it looked like one fitted to
    a server, the validation like a check against one. Both now say it is a simulation, and
    the cost file's and validation.json's notes keep it."""
    run = tmp_path / "sim run"
    res = runner.invoke(
        app, ["simulate", "--scenario", str(_scenario(tmp_path)), "--out", str(run)]
    )
    assert res.exit_code == 0, res.stderr
    said = f"{run} is a simulated run (simulate or compare --out: its summary names no executor"
    cost = tmp_path / "cost.json"
    res = runner.invoke(
        app, ["calibrate", "--records", str(run), "--out", str(cost), "--allow-small-fit"]
    )
    assert res.exit_code == 0, res.stderr
    assert _bare(said) in _bare(res.stderr), res.stderr  # the note's lines break in the path
    assert any(n.startswith(said) for n in json.loads(cost.read_text())["calibration"]["notes"])
    res = runner.invoke(app, ["validate", "--records", str(run), "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    assert _bare(said) in _bare(res.stderr), res.stderr  # the note's lines break in the path
    notes = json.loads((tmp_path / "v" / "validation.json").read_text())["notes"]
    assert any(n.startswith(said) for n in notes), notes


def test_a_json_lines_key_first_given_after_line_1_is_read(tmp_path: Path) -> None:
    """A user's JSON lines trace whose deadline_s first appears on line 2 had it dropped
    silently (the fields read were those of the first record): convert wrote every deadline
    as null. Every record's keys are read now; a later key of the wrong type is refused
    naming its line and field."""
    trace = tmp_path / "own trace.jsonl"
    records = [
        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10},
        {"arrival_s": 0.5, "prompt_tokens": 120, "output_tokens": 12, "deadline_s": 3.0},
        {"arrival_s": 1.0, "prompt_tokens": 90, "output_tokens": 9, "max_output_tokens": 64},
    ]
    trace.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "converted.jsonl"
    res = runner.invoke(app, ["trace", "convert", str(trace), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["deadline_s"] for r in rows] == [None, 3.0, None]
    assert rows[2]["max_output_tokens"] == 64
    deadlines = load_trace(out).workload.deadline_s  # the converted file reads it back
    assert deadlines[1] == 3.0 and np.isnan(deadlines[[0, 2]]).all()
    trace.write_text(trace.read_text() + json.dumps({**records[0], "id": "r-4"}) + "\n")
    err = _refused(["trace", "convert", str(trace), "--out", str(tmp_path / "again.jsonl")])
    assert "line 4: field 'id': not a number: 'r-4'" in err, err


def test_a_live_calibration_of_an_unbundled_model_keeps_its_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """calibrate --url --gpu H100 of a served model kvbudget does not bundle ('fake') wrote no
    fitted_on at all: the GPU given was dropped, and simulate on an A100 used the file with a
    note that it could not be checked. The file keeps the GPU (and -tp, the KV dtype) now, and
    is checked as a calibrate --records file is: another GPU refused naming both, the same
    GPU used with a note that its model is not checked."""

    def on_virtual(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any) -> Any:
        engine = VirtualEngine()
        return real_calibrate(
            target,
            replace(plan, idle_gap_s=0.0),
            clock=engine.clock,
            transport=engine.transport(),
            **kwargs,
        )

    monkeypatch.setattr(live_commands, "calibrate", on_virtual)
    cost = tmp_path / "cost of fake.json"
    flags = ["--prefill-tokens", "64,512", "--decode-batches", "1,4", "--context-tokens"]
    res = runner.invoke(
        app,
        ["calibrate", "--url", "http://fake.invalid", "--out", str(cost), "--gpu", "H100",
         *flags, "32,256", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048"],
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    said = " ".join(res.stderr.split())
    assert f"note: {cost} records the GPU it was fitted on, not its model" in said, said
    fitted_on = json.loads(cost.read_text())["fitted_on"]
    assert fitted_on["gpu"]["name"] == "H100-SXM" and fitted_on["model"]["served"] == "fake"
    scenario = _scenario(tmp_path)
    run = ["simulate", "--scenario", str(scenario), "--cost-model", str(cost)]
    err = _refused([*run, "--gpu", "A100-80GB", "--out", str(tmp_path / "a100")])
    assert f"{cost}: fitted on H100-SXM / 'fake' TP1 EP1, KV cache auto, not A100-80GB" in err
    res = runner.invoke(app, [*run, "--gpu", "H100", "--out", str(tmp_path / "h100")])
    assert res.exit_code == 0, res.stderr
    assert "its GPU and parallelism match, its model cannot be checked" in " ".join(
        res.stderr.split()
    )


def test_a_plan_or_capacity_result_given_as_a_cost_model_is_named(tmp_path: Path) -> None:
    """plan.json and capacity.json given to --cost-model were told "field 'kind' must be
    'linear', 'vllm-v1' or 'roofline'", as if a cost model lacked a field (round 72 named a
    run's summary, validation.json and sweep.json). Each is now named for what it is; files
    written by the real plan and capacity commands."""
    scenario = _scenario(tmp_path)
    plan, capacity = tmp_path / "plan out", tmp_path / "capacity out"
    res = runner.invoke(
        app,
        ["plan", "--scenario", str(scenario), "--gpus", "H100-80GB", "--replicas", "1",
         "--replications", "1", "--out", str(plan)],
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(
        app,
        ["capacity", "--scenario", str(scenario), "--replications", "1", "--rel-tol", "0.5",
         "--out", str(capacity)],
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    for file, what in (
        (plan / "plan.json", "a plan's result (plan --out: plan.json), not a cost model"),
        (capacity / "capacity.json", "a capacity search's result (capacity --out: "
         "capacity.json), not a cost model"),
    ):  # fmt: skip
        err = _refused(["simulate", "--scenario", str(scenario), "--cost-model", str(file)])
        assert f"{file}: {what}" in err and "field 'kind'" not in err, err


@pytest.mark.parametrize("reader", [["trace", "convert"], ["validate", "--records"]])
def test_a_study_table_given_as_a_trace_or_recording_is_named(
    tmp_path: Path, reader: list[str]
) -> None:
    """sweep.parquet given to trace convert or validate --records was told to map
    --column prompt_tokens=COLUMN, though no column of it holds that: it is named as a study's
    table now (written by the real sweep)."""
    scenario = _scenario(tmp_path)
    study = tmp_path / "sweep out"
    grid = ["--grid", "engine.num_gpu_blocks=1500,2500"]
    res = runner.invoke(app, ["sweep", "--scenario", str(scenario), *grid, "--out", str(study)])
    assert res.exit_code == 0, res.stderr
    table = study / "sweep.parquet"
    err = _refused([*reader, str(table), "--out", str(tmp_path / "out.jsonl")])
    assert f"{table}: a kvbudget study's table (one row a run: sweep's sweep.parquet" in err
    assert "--column" not in err, err


def test_every_study_table_given_as_a_trace_is_named_as_its_own(tmp_path: Path) -> None:
    """compare's runs.parquet and capacity's evidence.parquet were named "a kvbudget study's
    table (sweep --out: sweep.parquet ...)", another command's file: each is named among the
    study tables now (written by the real compare and capacity)."""
    scenario = _scenario(tmp_path)
    cmp, cap = tmp_path / "cmp", tmp_path / "cap"
    res = runner.invoke(app, ["compare", "--scenario", str(scenario), "--policies",
                              "unlimited,conservative", "-r", "2", "--out", str(cmp)])
    assert res.exit_code == 0, res.stderr
    res = runner.invoke(app, ["capacity", "--scenario", str(scenario), "--replications", "1",
                              "--rel-tol", "0.5", "--out", str(cap)])
    assert res.exit_code == 0, res.stderr
    for table, named in ((cmp / "runs.parquet", "compare's and plan's runs.parquet"),
                         (cap / "evidence.parquet", "capacity's and tune's evidence.parquet")):
        err = _refused(["trace", "convert", str(table), "--out", str(tmp_path / "o.jsonl")])
        assert f"{table}: a kvbudget study's table" in err and named in err, err
        assert "sweep --out" not in err, err


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_kvbudget_trace_given_as_a_recording_is_named(tmp_path: Path, suffix: str) -> None:
    """validate --records of a trace in kvbudget's own format (trace synth's) was told
    "missing column 'ttft_s' needed by the records format", as if a recording lacked a column.
    It is named as a trace with nothing measured now, with the simulate command that takes
    it (as round 72 named Mooncake's and Azure's traces); that command runs as printed."""
    trace = tmp_path / f"synth trace{suffix}"
    res = runner.invoke(app, ["trace", "synth", "--out", str(trace), "--num-requests", "20"])
    assert res.exit_code == 0, res.stderr
    err = _refused(["validate", "--records", str(trace), "--out", str(tmp_path / "v")])
    assert f"{trace}: is a trace of kvbudget's own format" in err, err
    assert "nothing in it was measured" in err and "missing column" not in err, err
    said = err.split("(kvbudget ", 1)[1].split("), or replay", 1)[0]
    res = runner.invoke(app, [*shlex.split(said), "--out", str(tmp_path / "sim")])
    assert res.exit_code == 0, res.stderr
