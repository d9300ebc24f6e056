"""A newcomer's walk through the first screens (README, --help, common mistakes): what each
said that was not so, or left out what to do next."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli.live import RecordsFormatOpt
from kvbudget.cli.main import app
from kvbudget.cli.options import SCENARIO_OPTIONS, TRACE_OPTIONS
from kvbudget.results.recording import RECORDING_FORMATS
from kvbudget.results.said import WIDTH
from kvbudget.workloads.fetch import SOURCES
from kvbudget.workloads.traces.options import FORMATS
from tests.conftest import REPO, unwrapped


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _names_listed(annotation: Any) -> list[str]:
    """The names an option's help lists before its parenthesis: ``a, b or c (...)``."""
    text = annotation.__metadata__[0].help
    head = text.split(" (", 1)[0]
    return [n.strip() for n in re.split(r",| or ", head) if n.strip()]


def test_the_records_format_help_lists_every_reader_and_only_those() -> None:
    """--records-format's help was a list written by hand (llmd-report was added at its end,
    out of the readers' order): it now is the reader registry's, so a new reader is listed."""
    assert _names_listed(RecordsFormatOpt) == list(RECORDING_FORMATS)


def test_the_trace_format_help_lists_every_format_the_loader_reads() -> None:
    """--format's help listed six formats: splitwise-sim's, which the loader reads and names
    in its refusals ("pass a format (..., splitwise, ...)"), was left out."""
    assert _names_listed(TRACE_OPTIONS["format"][0]) == list(FORMATS)


def test_a_format_the_loader_reads_is_taken_by_simulate(tmp_path: Path) -> None:
    """``simulate --trace FILE --format splitwise --window 0:10`` (any trace option beside
    the format) was refused: "workload.format must be 'azure', ..., 'servegen' or 'generic',
    got 'splitwise'" (the scenario's [workload] table had its own, older list of formats),
    while the detection error advises "pass a format (..., splitwise, ...)"."""
    trace = tmp_path / "s.csv"
    trace.write_text("request_id,request_type,application_id,arrival_timestamp,batch_size,"
                     "prompt_size,token_size\n0,2,0,0.5,1,100,10\n1,2,0,1.0,1,200,20\n")
    code, stdout, stderr = run("simulate", "--trace", trace, "--format", "splitwise",
                               "--window", "0:10")
    assert code == 0, stderr
    assert "workload s: 2 requests" in unwrapped(stdout)[0], stdout
    code, _, stderr = run("simulate", "--trace", trace, "--format", "splitwize",
                          "--window", "0:10")
    assert code == 2
    assert "splitwise" in stderr and "Traceback" not in stderr, stderr


def test_a_policy_parameter_of_another_policy_says_which_policy_takes_it() -> None:
    """``kvbudget compare --set policy_params.overcommit_ratio=0.7`` (the example --set's help
    gives) said only "policy 'conservative' has no parameter 'overcommit_ratio'", naming a
    policy the user never gave: policy_params are the scenario's policy's (conservative in
    the default one). It now names the field, the policies that take the parameter and how
    to make one of them the scenario's."""
    code, stdout, stderr = run("compare", "--policies", "overcommit,preemptive",
                               "--set", "policy_params.overcommit_ratio=0.7")
    assert code == 2, stdout
    said = stderr.strip()
    assert said.startswith("error: policy_params.overcommit_ratio: "), said
    assert "the scenario's policy 'conservative' has no such parameter" in said, said
    assert "a parameter of overcommit, preemptive" in said and "--set policy=NAME" in said, said
    assert len(stderr.splitlines()) == 1, stderr


def test_a_misspelt_policy_parameter_is_named_with_the_one_meant(tmp_path: Path) -> None:
    """A scenario's ``[policy_params] overcommit_ratoi = 0.5`` said "policy 'overcommit' has
    no parameter 'overcommit_ratoi'; its parameters: [...]": no field named, no suggestion,
    where a misspelt engine key gets "did you mean engine.max_num_seqs?"."""
    scenario = tmp_path / "s.toml"
    scenario.write_text('policy = "overcommit"\n[policy_params]\novercommit_ratoi = 0.5\n')
    code, stdout, stderr = run("simulate", "--scenario", scenario)
    assert code == 2, stdout
    assert stderr.strip().startswith(
        f"error: {scenario}: policy_params.overcommit_ratoi: the scenario's policy 'overcommit' "
        "has no such parameter (did you mean policy_params.overcommit_ratio?)"), stderr


def test_the_set_help_example_runs_under_every_command_that_shows_it() -> None:
    """--set's help gave ``policy_params.overcommit_ratio=0.7`` as its example, under
    simulate, compare, sweep, tune, capacity and plan alike; on the default scenario
    (conservative) ``simulate --set`` and ``compare --set`` with it were refused."""
    help_text = SCENARIO_OPTIONS["overrides"][0].__metadata__[0].help
    example = help_text.split("e.g. ", 1)[1].split()[0].rstrip(".,;")
    code, _, stderr = run("simulate", "--set", example, "--seed", "1",
                          "--set", "workload.duration_s=5")
    assert code == 0, stderr


def test_the_study_start_lines_fit_the_screen(tmp_path: Path) -> None:
    """plan's first line, "at most 4 runs (0 already in runs/h100); a configuration stops at
    its first replica count that meets the SLOs", ran to 109 columns with the README's own
    --out (more with a longer path), sweep's count line likewise, where every other line is
    wrapped to the screen's width."""
    out = tmp_path / "a-longer-folder-for-the-plan-runs"
    code, stdout, stderr = run("plan", "--gpus", "H100-80GB", "--replicas", "1", "-r", "1",
                               "-j", "1", "--set", "workload.duration_s=5", "--out", out)
    assert code == 0, stderr
    # the notes under the table broke words at their hyphens ("on-" / "demand", and the
    # prices' source address "www.mercatus-ai.com/blog/cloud-gpu-" / "pricing")
    assert not [ln for ln in stdout.splitlines() if ln.endswith("-") and set(ln) > {"-", " "}
                ], stdout
    start = unwrapped(stderr)
    assert any(ln.startswith("at most 1 run (0 already in ") for ln in start), stderr
    code, _, stderr2 = run("sweep", "--policies", "conservative,overcommit", "-r", "1",
                                "-j", "1", "--no-plot", "--set", "workload.duration_s=5",
                                "--out", out / "sweep")
    assert code == 0, stderr2
    assert any(ln.startswith("2 configurations x 1 replication = 2 runs")
               for ln in unwrapped(stderr2)), stderr2
    for line in (stdout + stderr + stderr2).splitlines():
        assert len(line) <= WIDTH or " " not in line.strip(), line


def test_an_empty_trace_says_what_a_trace_holds(tmp_path: Path) -> None:
    """An empty trace file was told "is empty", a header alone "has no data rows": the file
    named, but not what it should hold nor where the formats are."""
    empty, header = tmp_path / "empty.csv", tmp_path / "header.csv"
    empty.write_text("")
    header.write_text("arrival_s,prompt_tokens,output_tokens\n")
    for path, said in ((empty, "is empty: a trace holds one request a row"),
                       (header, "has no data rows, only its header: a trace holds one request "
                        "a row under it")):
        code, _, stderr = run("simulate", "--trace", path)
        assert code == 2
        assert stderr.startswith(f"error: {path}: {said}"), stderr
        assert "docs/workloads.md" in stderr and len(stderr.splitlines()) == 1, stderr


def test_python_dash_m_kvbudget_is_the_command(tmp_path: Path) -> None:
    """``python -m kvbudget`` (an environment whose scripts folder is not on PATH) said "No
    module named kvbudget.__main__; 'kvbudget' is a package and cannot be directly executed"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "kvbudget", "--version"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == f"kvbudget {kvbudget.__version__}\n", done
    done = subprocess.run([sys.executable, "-m", "kvbudget", "simulate", "--set",
                           "engine.max_num_seq=3"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done
    assert done.stderr.startswith("error: engine.max_num_seq: "), done.stderr


def test_sweep_and_capacity_say_which_policy_they_run_by_default(tmp_path: Path) -> None:
    """sweep's and capacity's --policies said only "Comma-separated policy names", where
    compare's lists its four and plan's says the scenario's: without it they run the
    scenario's policy (conservative in the default scenario), as the help now says."""
    for command in ("sweep", "capacity"):
        code, stdout, _ = run(command, "--help")
        assert code == 0
        assert "default: the scenario's policy, conservative in the default one" in " ".join(
            stdout.split()), stdout
    code, _, stderr = run("sweep", "-r", "1", "-j", "1", "--no-plot", "--set",
                          "workload.duration_s=5", "--out", tmp_path / "sw")
    assert code == 0, stderr
    assert set(pd.read_parquet(tmp_path / "sw" / "sweep.parquet")["policy"]) == {"conservative"}


@pytest.mark.parametrize(("args", "said"), [
    (("simulate", "--polcy", "overcommit"),
     "error: No such option: --polcy (Possible options: --policy) (see kvbudget simulate --help)"),
    (("simulat",), "error: No such command 'simulat'. Did you mean 'simulate'? (see kvbudget "
     "--help)"),
    (("simulate", "--users", "-1"), "error: Invalid value for '--users': -1 is not in the range "
     "x>=1 (see kvbudget simulate --help)"),
    (("tune", "--out", "x"), "error: Missing option '--param' (see kvbudget tune --help)"),
    (("trace", "stats", "--bogus", "f.csv"),
     "error: No such option: --bogus (see kvbudget trace stats --help)"),
    # a flag given no value: click raises it without its command (click/parser.py), and the
    # line sent the user to "kvbudget --help", which lists no flag of the command
    (("simulate", "--trace"),
     "error: Option '--trace' requires an argument (see kvbudget simulate --help)"),
    (("trace", "convert", "f.csv", "--out"),
     "error: Option '--out' requires an argument (see kvbudget trace convert --help)"),
])
def test_a_mistyped_flag_or_command_is_one_line(args: tuple[str, ...], said: str) -> None:
    """The README says bad input exits 2 with one line naming the field; a mistyped flag, an
    unknown command, a value out of range or a missing option printed click's four lines
    (the usage, a hint, a blank line, "Error: ...")."""
    code, stdout, stderr = run(*args)
    assert code == 2, stdout
    assert stderr == said + "\n", stderr


def test_a_group_named_alone_still_shows_its_help() -> None:
    code, stdout, stderr = run("trace")
    assert code == 2
    assert "Inspect, convert, generate and download workload traces." in stdout + stderr


def test_trace_stats_names_the_format_as_format_takes_it(tmp_path: Path) -> None:
    """``trace stats`` headed an Azure file "(azure2023)", the layout the loader read, which
    ``--format azure2023`` refuses ("format must be one of azure, ..."): the header now gives
    the name --format takes, and the layout beside it."""
    trace = tmp_path / "a.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,4808,10\n"
                     "2023-11-16 18:17:04.97,4808,10\n")
    code, stdout, stderr = run("trace", "stats", trace)
    assert code == 0, stderr
    # (on a second line after a path too long to share one)
    assert " ".join(stdout.split()).startswith(
        f"{trace} (format azure, its azure2023 layout) rows 2 "), stdout
    code, _, stderr = run("trace", "stats", "--format", "azure", trace)
    assert code == 0, stderr


def test_the_readme_says_where_to_get_each_trace_its_quick_start_reads() -> None:
    """The Quick start replays ../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv
    (the project's shared data folder) without a word on how a newcomer gets the file, which
    ``kvbudget trace fetch`` downloads: the README now names the fetch for each such trace."""
    text = (REPO / "README.md").read_text()
    start = text.index("## Quick start")
    quick = " ".join(text[start:text.index("\n## ", start + 1)].split())
    traces = {Path(t).name for t in re.findall(r"--trace (\S+\.(?:csv|jsonl|parquet))", quick)}
    fetched = {SOURCES[name].filename for name in
               re.findall(r"`kvbudget trace fetch ([\w-]+)", quick) if name in SOURCES}
    assert traces and traces <= fetched, (traces, fetched)


def test_a_recordings_header_lines_fit_the_screen(tmp_path: Path) -> None:
    """validate --records said what the file records, what is simulated on which knobs and each
    stage's load in lines of up to 160 columns, where its settings and notes above and below
    them are wrapped to the screen's width."""
    rec = REPO / "tests/fixtures/recordings/vllm-bench-0.32.0/rate8.json"
    code, stdout, stderr = run("validate", "--records", rec, "--model", "Llama-3.1-8B",
                               "--gpu", "H100-SXM", "--out", tmp_path / "v")
    assert code == 0, stderr
    text = unwrapped(stdout + stderr)
    assert any(ln.startswith("the file records: model=tiny, ") and ln.endswith(
        "request_rate=8.0") for ln in text), stdout
    assert any(ln.startswith("simulated on H100-SXM / Llama-3.1-8B: num_gpu_blocks=")
               for ln in text), stdout
    for line in (stdout + stderr).splitlines():  # (the written files' line: their paths)
        assert len(line) <= WIDTH or " " not in line.strip() or line.startswith("wrote "), line
