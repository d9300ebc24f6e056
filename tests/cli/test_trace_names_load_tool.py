"""A load tool's file given where a trace is asked for is named as that tool's, by every command
that takes a trace (results/recording_named.py, reached from cli/errors.py on the refusal path).

Before: ``kvbudget simulate --trace bench.json`` (and ``compare``, ``sweep``, ``tune``,
``capacity``, ``plan``, ``replay --url``, ``validate --url``, ``trace stats``, a scenario's
``[workload]`` trace, ``regress``) told every load tool's file "cannot tell the trace format
...; a load tool's result (vllm bench serve, GuideLLM, AIPerf, inference-perf, llm-load-test)
is a recording, not a trace", whichever tool wrote it (Locust's CSVs, genai-bench's,
evalscope's, SGLang's: none of the five named), and a file of aggregates as if it could be
replayed; llama-benchy's alone were named (a special case in cli/errors.py). Now the
recordings' own detection names the tool, its version where the file says, what the file is
and how many requests it holds, and the command that reads it (``kvbudget validate --records
F``); a tool's file of aggregates gets its reader's refusal, which names the file to pass.

The files are the fixtures the tools wrote here (scripts/make_recording_fixtures.sh) and the
published excerpts (tests/fixtures/recordings/published/README.md); hand-made edge cases that
are no tool's file keep the trace loader's line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel, save_cost_model
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError, UnknownFileError
from kvbudget.workloads.traces import load_trace
from kvbudget.workloads.traces.load import RECORDING_HINT

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"
TOOL_FILES = sorted(
    p
    for p in RECORDINGS.rglob("*")
    if p.is_file() and "handmade" not in p.parts and p.name != "README.md"  # not a tool's
)
"""Every file a load tool wrote (or that a published run holds) among the fixtures."""

TOOL_WORDS: dict[str, tuple[str, ...]] = {
    "aiperf": ("aiperf",),
    "dynamo": ("nvidia dynamo's per-request trace",),  # words matched in lower case
    "evalscope": ("evalscope",),
    "genai-bench": ("genai-bench",),
    "guidellm": ("guidellm",),
    "inference-perf": ("inference-perf",),
    "llama-benchy": ("llama-benchy",),
    "locust": ("locust",),
    "sglang": ("sglang",),
    "vllm-bench": ("vllm",),
    "vllm-benchmark-serving": ("vllm bench serve",),  # benchmark_serving.py, its forerunner
    "vllm-benchmark": ("vllm_bench",),  # PyPI vllm-benchmark, a harness of its own
    "vllm-otel": ("vllm",),
    # published excerpts: what wrote each (tests/fixtures/recordings/published/README.md)
    "dstack-vllm": ("vllm bench serve",),
    "ds4-harness": ("vllm bench serve",),  # a harness's runs of it: its figures only
    "guidellm-bench-gpt-oss-20b-server-log": ("vllm server log",),
    "inference-perf-otel": ("inference-perf",),
    "inference-sim": ("guidellm",),  # inference-sim's GuideLLM reports
    "llm-k8s-benchmark": ("vllm",),
    "llm-load-test": ("llm-load-test",),
    "mist-llmservingsim": ("llmservingsim",),
    "mist-vidur": ("vidur",),
    "tpu-inference": ("tpu-inference",),  # its benchmark cases: settings, no result
}


def tool_words(path: Path) -> tuple[str, ...]:
    """The tool a fixture is from, by its folder (or a published file's name), longest first."""
    rel = path.relative_to(RECORDINGS)
    name = rel.parts[1] if rel.parts[0] == "published" else rel.parts[0]
    for key in sorted(TOOL_WORDS, key=len, reverse=True):
        if name.startswith(key):
            return TOOL_WORDS[key]
    raise AssertionError(f"no tool known for {rel}")


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def flat(text: str) -> str:
    return " ".join(text.split())


def assert_named(path: Path, code: int, stdout: str, stderr: str) -> str:
    """One line, exit 2, naming the file and its tool, not the generic hint; returns it."""
    assert code == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    said = lines[0]
    assert str(path) in said, said
    assert RECORDING_HINT not in said and "cannot tell the trace format" not in said, said
    assert any(word in said.lower() for word in tool_words(path)), said
    return said


@pytest.mark.parametrize("path", TOOL_FILES, ids=lambda p: str(p.relative_to(RECORDINGS)))
def test_simulate_names_each_tools_file(path: Path) -> None:
    said = assert_named(path, *run("simulate", "--trace", path))
    try:
        rec = read_recording(path)
    except TraceError:
        return  # no request to read: its reader's refusal names the file to pass instead
    # a file of requests: how many, and the command that reads it
    held = rec.counts.get("num_rows_read", len(rec))
    assert f"({held:,} request{'s' if held != 1 else ''}): a recording, not a trace" in said
    assert f"pass it to kvbudget validate --records {path} (or calibrate --records)" in said
    # a CSV keeps prefix blocks of Mooncake's 512 tokens only (trace convert refuses others)
    w = rec.workload
    out = "T.parquet" if w.prefix_hashes is not None and w.prefix_block_tokens != 512 else "T.csv"
    assert f"kvbudget trace convert {path} --out {out}" in said


def _scenario(tmp: Path, trace: Path) -> Path:
    scenario = tmp / "s.toml"
    scenario.write_text(f'[workload]\nkind = "trace"\npath = "{trace}"\n')
    return scenario


def _cost(tmp: Path) -> Path:
    cost = tmp / "cost.json"
    save_cost_model(LinearCostModel(0.01, 1e-5, 1e-4, 1e-7), cost)
    return cost


COMMANDS: dict[str, Callable[[Path, Path], list[object]]] = {
    "simulate": lambda f, t: ["simulate", "--trace", f],
    "compare": lambda f, t: ["compare", "--trace", f, "--policies", "unlimited"],
    "sweep": lambda f, t: ["sweep", "--trace", f, "--out", t / "out"],
    "tune": lambda f, t: [
        "tune",
        "--trace",
        f,
        "--param",
        "engine.max_num_seqs=64:512:int",
        "--out",
        t / "out",
    ],
    "capacity": lambda f, t: ["capacity", "--trace", f, "--out", t / "out"],
    "plan": lambda f, t: ["plan", "--trace", f, "--out", t / "out"],
    "replay": lambda f, t: [
        "replay",
        "--url",
        "http://127.0.0.1:9",
        "--trace",
        f,
        "--out",
        t / "out",
    ],
    "validate --url": lambda f, t: [
        "validate",
        "--url",
        "http://127.0.0.1:9",
        "--trace",
        f,
        "--cost-model",
        _cost(t),
        "--out",
        t / "out",
    ],
    "trace stats": lambda f, t: ["trace", "stats", f],
    "simulate --scenario": lambda f, t: ["simulate", "--scenario", _scenario(t, f)],
    "sweep --scenario": lambda f, t: ["sweep", "--scenario", _scenario(t, f), "--out", t / "out"],
    "regress": lambda f, t: [
        "regress",
        _scenario(t, f),
        "--baseline",
        t / "baselines",
        "--update",
        "-j",
        "1",
    ],
}
"""Every command that takes a trace (or a scenario whose [workload] is one). ``serve
--scenario`` reads a scenario's tiers and policy, never its workload."""

ONE_A_TOOL = sorted(
    {
        p.relative_to(RECORDINGS).parts[0]: p
        for p in reversed(TOOL_FILES)
        if p.relative_to(RECORDINGS).parts[0] != "published"
    }.values()
)
"""The first file of each tool's folder (per-request files and files of aggregates both)."""


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("path", ONE_A_TOOL, ids=lambda p: str(p.relative_to(RECORDINGS)))
def test_every_command_that_takes_a_trace_names_the_tool(
    tmp_path: Path, command: str, path: Path
) -> None:
    said = assert_named(path, *run(*COMMANDS[command](path, tmp_path)))
    if command == "regress":  # the scenario that named the file, first
        assert said.startswith(f"error: {tmp_path / 's.toml'}: "), said
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_five_tools_lines(tmp_path: Path) -> None:
    """What five tools' files are told, whole (the report's before/after)."""
    said = {}
    for rel in (
        "vllm-bench-0.32.0/rate8.json",
        "guidellm-0.8.1/constant.yaml",
        "aiperf-0.13.0/rate8.jsonl",
        "locust-2.47.0/tiny_stats.csv",
        "sglang-0.5.9/rate8.jsonl",
    ):
        code, _, stderr = run("simulate", "--trace", RECORDINGS / rel)
        assert code == 2
        said[rel] = flat(stderr).replace(str(RECORDINGS) + "/", "")
    ways = (
        "a recording, not a trace; pass it to kvbudget validate --records {f} (or "
        "calibrate --records), which simulates its requests and compares; kvbudget trace "
        "convert {f} --out T.csv writes them as a trace T.csv for a what-if (--trace T.csv "
        "--rate-scale 2: twice its rate)"
    )
    f = "vllm-bench-0.32.0/rate8.json"
    assert said[f] == f"error: {f} is vllm bench serve's result (20 requests): " + ways.format(f=f)
    f = "guidellm-0.8.1/constant.yaml"
    assert said[f] == f"error: {f} is guidellm 0.8.1's report (20 requests): " + ways.format(f=f)
    f = "aiperf-0.13.0/rate8.jsonl"
    assert said[f] == (
        f"error: {f} is aiperf 0.13.0's per-request records "
        f"(profile_export.jsonl) (22 requests): " + ways.format(f=f)
    )
    f = "sglang-0.5.9/rate8.jsonl"
    assert said[f] == (
        f"error: {f} is sglang.bench_serving's result (20 requests): " + ways.format(f=f)
    )
    f = "locust-2.47.0/tiny_stats.csv"
    assert said[f].startswith(
        f"error: {f}: not a trace: it is Locust's --csv *_stats.csv: "
        "one row an endpoint and their aggregate"
    ), said[f]


EDGE_CASES: dict[str, str | bytes] = {
    "unknown.json": '{"foo": 1, "bar": 2}\n',
    "unknown_indented.json": '{\n  "foo": 1,\n  "bar": [1, 2]\n}\n',
    "list.json": "[1, 2, 3]\n",
    "columns.csv": "a,b\n1,2\n",
    "words.txt": "hello world\n",
    "empty.json": "",
    "empty.csv": "",
    "image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00",  # a binary file
}
"""Hand-made files of no tool: what each holds."""


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_a_file_of_no_tool_keeps_the_trace_loaders_line(tmp_path: Path, name: str) -> None:
    """Hand-made: an unknown JSON (one line or indented), a JSON list, a table of other
    columns, words, empty files: what the trace loader says of each, as before (the
    recordings' reader names no tool in them either)."""
    path = tmp_path / name
    held = EDGE_CASES[name]
    path.write_bytes(held if isinstance(held, bytes) else held.encode())
    with pytest.raises(TraceError) as loader:
        load_trace(path)
    for args in (
        ["simulate", "--trace", path],
        ["trace", "stats", path],
        ["simulate", "--scenario", _scenario(tmp_path, path)],
    ):
        code, _, stderr = run(*args)
        assert code == 2
        assert stderr == f"error: {loader.value}\n", stderr


def test_figures_of_no_tool_are_said_to_hold_no_request(tmp_path: Path) -> None:
    """Hand-made figures of no tool named: the trace loader sent them on as "a load tool's
    result ... kvbudget validate --records FILE simulates its requests", which refuses them
    as aggregate figures; that refusal is said here at once."""
    path = tmp_path / "figures.json"
    path.write_text('{"name": "x", "results": {"mean_latency": 1.2, "throughput": 4}}\n')
    code, _, stderr = run("simulate", "--trace", path)
    assert code == 2
    assert flat(stderr).startswith(
        f"error: {path}: not a trace: it holds aggregate figures (results.mean_latency, "
        "results.throughput), not per-request records"
    ), stderr
    assert RECORDING_HINT not in flat(stderr)


TABLES_OF_RUNS: dict[str, str] = {
    # a harness's llama-bench runs, one row a model and depth, shaped as github.com/ryanilano/
    # localai-16gb-bench-results 7033c75 results/2026-07-01_202112-debian-llm/throughput.csv
    # (no licence found: its header reproduced, the figures made up here)
    "throughput.csv": (
        "label,quant,type,depth,pp_tok_s,tg_tok_s,vram_peak_mib,ram_used_peak_mib,status\n"
        "27B,IQ4_XS,dense,0,1400.5,36.2,15032,594,OK\n"
        "27B,IQ4_XS,dense,4096,1390.1,35.4,15172,903,OK\n"
    ),
    # a harness's runs one a line (github.com/LottoLottoLotto/4x3090-llm-benchmarks bd22281
    # data/benchmarks.jsonl's shape: a run's percentiles beside its configured prompt_tokens)
    "runs.jsonl": (
        '{"model": "m", "req_s": 1.2, "ttft_p50_ms": 100, "ttft_p99_ms": 200, '
        '"prompt_tokens": 512}\n'
        '{"model": "m", "req_s": 2.2, "ttft_p50_ms": 110, "ttft_p99_ms": 230, '
        '"prompt_tokens": 512}\n'
    ),
}


@pytest.mark.parametrize("name", sorted(TABLES_OF_RUNS))
def test_a_table_of_runs_is_said_to_hold_no_request(tmp_path: Path, name: str) -> None:
    """Hand-made tables of runs' figures, a row (or a line) a run: validate --records refused
    them as aggregate figures, but where a trace was asked for the trace loader said it could
    not "tell the trace format from the header" (CSV) and to "pass a format", or to map the
    missing output_tokens column (--column output_tokens=COLUMN, JSON lines) in a file of
    figures. Every command that takes a trace now says what validate --records says."""
    path = tmp_path / name
    path.write_text(TABLES_OF_RUNS[name])
    with pytest.raises(TraceError) as records:
        read_recording(path)
    assert records.value.problem.startswith("holds aggregate figures, one ")
    for stderr in _said_by_trace_commands(tmp_path, path, records.value.problem):
        assert "--column" not in stderr and "pass a format" not in stderr


def _said_by_trace_commands(tmp_path: Path, path: Path, problem: str) -> list[str]:
    """What simulate --trace, trace stats and a scenario's trace say of ``path``: each exits 2
    with validate --records' refusal (``problem``) as a trace's; their stderr."""
    said = []
    for args in (
        ["simulate", "--trace", path],
        ["trace", "stats", path],
        ["simulate", "--scenario", _scenario(tmp_path, path)],
    ):
        code, _, stderr = run(*args)
        assert code == 2, stderr
        assert flat(stderr) == f"error: {path}: not a trace: it {problem}", stderr
        said.append(stderr)
    return said


def test_requests_never_timed_from_a_send_are_said_to_be_so(tmp_path: Path) -> None:
    """Hand-made: a harness's answers, each its elapsed time and usage and no send time (the
    shape of github.com/jasl/vllm-ds4-sm120-harness f1d2b24 ``baselines/20260502_b200_tp4_main_
    5737770c6/generation/mtp.json``, its answers checked for quality). validate --records said they hold
    per-request results with no send time; where a trace was asked for, the trace loader said
    "is a JSON array, not a trace ... a dataset of conversations (ShareGPT's) holds text: count
    its tokens", which they are not. Every command that takes a trace now says what validate
    --records says."""
    path = tmp_path / "mtp.json"
    answers = [
        {
            "case": f"c{i}",
            "elapsed_seconds": 20.4 + i,
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 74, "completion_tokens": 5097, "total_tokens": 5171},
        }
        for i in range(3)
    ]
    path.write_text(json.dumps(answers, indent=2))
    with pytest.raises(TraceError) as records:
        read_recording(path)
    assert "with no send time among their keys" in records.value.problem
    for stderr in _said_by_trace_commands(tmp_path, path, records.value.problem):
        assert "dataset of conversations" not in stderr


def test_a_trace_that_is_also_a_recording_reads_as_a_trace(tmp_path: Path) -> None:
    """Hand-made: send times, token counts and measured times: the generic trace format reads
    it (its ttft_s and e2e_s unused), and validate --records reads it as records."""
    both = tmp_path / "both.csv"
    both.write_text(
        "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
        "0,100,10,0.05,0.2\n0.5,100,10,0.05,0.2\n"
    )
    code, stdout, stderr = run("simulate", "--trace", both, "--json")
    assert code == 0, stderr
    assert '"offered": 2' in stdout
    assert read_recording(both).format == "records"


def test_a_utf16_copy_of_a_tools_file_is_named_too(tmp_path: Path) -> None:
    """Windows PowerShell 5's ``>`` writes UTF-16: the copy the trace loader reads is named
    as the file given (the error kept its kind when it was renamed)."""
    src = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
    copy = tmp_path / "rate8.json"
    copy.write_bytes(src.read_text().encode("utf-16"))
    code, _, stderr = run("simulate", "--trace", copy)
    assert code == 2
    assert flat(stderr).startswith(f"error: {copy} is vllm bench serve's result (20 requests)")


def test_a_scenarios_trace_in_a_worker_process_is_named(tmp_path: Path) -> None:
    """``regress`` loads each scenario's trace in its worker processes: the trace loader's
    error comes back pickled by its parts (its kind, file and problem), so the tool is named
    there too."""
    suite = tmp_path / "suite"
    suite.mkdir()
    rec = RECORDINGS / "guidellm-0.8.1" / "constant.yaml"
    for name in ("a", "b"):
        (suite / f"{name}.toml").write_text(f'[workload]\nkind = "trace"\npath = "{rec}"\n')
    code, _, stderr = run("regress", suite, "--baseline", tmp_path / "bl", "--update", "-j", "2")
    assert code == 2
    said = flat(stderr)
    assert said.startswith(f"error: {suite}/") and f"{rec} is guidellm 0.8.1's report" in said


def test_the_error_pickles_by_its_parts() -> None:
    import pickle

    exc = UnknownFileError("f.json", "cannot tell", line=1, field="x")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is UnknownFileError and str(back) == str(exc)
    assert (back.path, back.problem, back.line, back.field) == ("f.json", "cannot tell", 1, "x")


def test_the_readers_are_loaded_on_the_refusal_path_only() -> None:
    """``kvbudget simulate``'s start loads none of the recordings' readers (~140 ms: yaml,
    sqlite3 and some 60 modules), nor llama-benchy's (loaded at every start before); a refusal
    loads them (through the front door's lazy ``kvbudget.recording_named``)."""
    rec = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
    readers = (
        "kvbudget.results.recordings",
        "kvbudget.results.recording_named",
        "kvbudget.results.recorded_llama_benchy",
        "yaml",
        "sqlite3",
    )
    probe = (
        "import sys; sys.argv = ['kvbudget', 'simulate']; import kvbudget.cli.main as m\n"
        f"readers = {readers!r}\n"
        "print(sorted(set(readers) & set(sys.modules)))\n"
        "from typer.testing import CliRunner\n"
        f"res = CliRunner().invoke(m.app, ['simulate', '--trace', {str(rec)!r}])\n"
        "print(res.exit_code, sorted(set(readers) & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "[]", out
    assert out[1].startswith("2 ") and "'kvbudget.results.recording_named'" in out[1], out


def test_genai_benchs_metadata_is_named_as_its_experiment() -> None:
    """Its experiment_metadata.json is read with the run results beside it (23 requests in
    two runs here), so it is said as the experiment, not as one run's result."""
    path = RECORDINGS / "genai-bench-0.0.5" / "closed" / "experiment_metadata.json"
    code, _, stderr = run("simulate", "--trace", path)
    assert code == 2
    assert flat(stderr).startswith(
        f"error: {path} is genai-bench 0.0.5's experiment (experiment_metadata.json and the "
        "run results beside it) (23 requests): a recording, not a trace"
    ), stderr


def test_every_recording_format_of_a_tool_has_its_files_kind_said() -> None:
    """A format added without its kind was said as "NVIDIA Dynamo request trace's file" (the
    reader's tool name and a bare "file"): each tool's format names what its file is."""
    from kvbudget.results.recording import RECORDING_FORMATS
    from kvbudget.results.recording_named import FILE_KINDS

    assert set(RECORDING_FORMATS) - {"records", "run"} <= set(FILE_KINDS)
