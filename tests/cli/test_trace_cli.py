"""``kvbudget trace`` through typer's CliRunner: outputs, one-line errors, fetch over loopback."""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from kvbudget.cli import trace
from kvbudget.workloads.traces import load_trace

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TRACES = SHARED / "traces"
AZURE_CODE = TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
SHAREGPT = TRACES / "sharegpt_lengths" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
STATS_KEYS = {"file", "format", "rows", "dropped_rows", "span_s", "rate_rps", "interarrival_cv",
              "prompt_tokens", "output_tokens"}

needs_shared = pytest.mark.skipif(not TRACES.exists(), reason="shared trace data not present")


def _app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """kvbudget (test harness with only the trace commands)."""

    trace.register(app)
    return app


APP = _app()
runner = CliRunner()


def run(*args: str | Path) -> Any:
    return runner.invoke(APP, ["trace", *map(str, args)])


def assert_one_line_error(result: Any, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@needs_shared
def test_stats_json_has_exactly_the_keys() -> None:
    result = run("stats", AZURE_CODE, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == STATS_KEYS
    assert set(data["prompt_tokens"]) == set(data["output_tokens"]) == {"mean", "p50", "p90",
                                                                        "p99"}
    assert data["format"] == "azure2023" and data["rows"] == 8819 and data["dropped_rows"] == 0
    assert abs(data["span_s"] / 3600 - 0.95) < 0.01 and abs(data["rate_rps"] - 2.57) < 0.01
    assert abs(data["interarrival_cv"] - 13.15) < 0.05
    assert data["prompt_tokens"]["p50"] == 1469


@needs_shared
def test_stats_json_list_and_null_time_fields_for_lengths() -> None:
    burst = TRACES / "burstgpt" / "burstgpt_slice.csv"
    result = run("stats", burst, SHAREGPT, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert isinstance(data, list) and len(data) == 2
    assert data[0]["rows"] == 383 and data[0]["dropped_rows"] == 17
    lengths = data[1]
    assert set(lengths) == STATS_KEYS
    assert lengths["span_s"] is None and lengths["rate_rps"] is None
    assert lengths["interarrival_cv"] is None and lengths["rows"] == 30731
    assert "no arrival times" in result.stderr


@needs_shared
def test_stats_text_with_tiers() -> None:
    result = run("stats", TRACES / "burstgpt" / "burstgpt_slice.csv", "--tier-column",
                 "Log Type", "--tier-map", "Conversation log=interactive", "--tier-map",
                 "API log=batch")
    assert result.exit_code == 0, result.stderr
    assert "rows 383 (dropped 17)" in result.stdout
    assert "tier interactive" in result.stdout and "tier batch" in result.stdout


def test_convert_all_extensions(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("arrival_s,prompt_tokens,output_tokens,tier\n0,5,3,batch\n2,6,4,\n1,7,5,"
                   "interactive\n")
    for suffix in (".parquet", ".csv", ".jsonl"):
        out = tmp_path / f"out{suffix}"
        result = run("convert", src, "--out", out, "--max-output", "factor:2")
        assert result.exit_code == 0, result.stderr
        assert "wrote 3 requests" in result.stdout
        # the warning is wrapped to the screen, where the temporary path's length moves the break
        assert "not in order" in " ".join(result.stderr.split())
        w = load_trace(out).workload
        assert w.arrival_s.tolist() == [0.0, 1.0, 2.0]
        assert w.max_output_tokens.tolist() == [6, 10, 8]
        assert [w.tier_of(i) for i in range(3)] == ["batch", "interactive", "interactive"]


def test_convert_says_the_file_holds_what_was_assumed(tmp_path: Path) -> None:
    # before: the converted file held the assumed max_output_tokens (and drawn arrivals) as
    # values, and nothing said that a run of it would no longer say they were assumed
    src = tmp_path / "in.csv"
    src.write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\n1,6,4\n")
    result = run("convert", src, "--out", tmp_path / "o.parquet")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"warning: {tmp_path / 'o.parquet'} holds what was assumed or drawn above (not read "
        f"from {src}) as if its file had said it: a run of it will not say so")
    again = run("convert", tmp_path / "o.parquet", "--out", tmp_path / "o2.csv")
    assert again.exit_code == 0 and again.stderr == ""  # it says everything now


def test_synth_default_and_overrides(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    result = run("synth", "--out", out, "--rate-rps", "4", "--duration-s", "50", "--seed", "3")
    assert result.exit_code == 0, result.stderr
    w = load_trace(out).workload
    assert set(w.tier_names) == {"interactive", "batch"} and w.arrival_s.max() < 50
    assert abs(len(w) - 200) < 6 * np.sqrt(200)
    again = tmp_path / "again.jsonl"
    run("synth", "--out", again, "--rate-rps", "4", "--duration-s", "50", "--seed", "3")
    assert out.read_bytes() == again.read_bytes()


def test_synth_from_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "w.toml"
    spec.write_text("""
[workload]
kind = "synthetic"
num_requests = 100
arrival = { kind = "gamma", rate_rps = 2.0, cv = 3.0 }
[[workload.tiers]]
name = "only"
prompt = { kind = "zipf", a = 1.2, max_tokens = 4000 }
output = { kind = "uniform", low = 1, high = 10 }
""")
    out = tmp_path / "s.csv"
    result = run("synth", "--spec", spec, "--out", out)
    assert result.exit_code == 0, result.stderr
    w = load_trace(out).workload
    assert len(w) == 100 and w.tier_names == ("only",)
    spec.write_text(spec.read_text().replace("cv = 3.0", "cv = -3.0"))
    assert_one_line_error(run("synth", "--spec", spec, "--out", out),
                          "workload.arrival.cv must be >= 0.01, got -3")
    # the output's extension is checked first, before the spec is read or anything drawn
    assert_one_line_error(run("synth", "--spec", spec, "--out", tmp_path / "s.txt",
                              "--rate-rps", "1"), "unknown output extension '.txt'")


@pytest.mark.parametrize(("content", "args", "needles"), [
    ("arrival_s,prompt_tokens\n0,1\n", (), ("line 1", "'output_tokens'", "missing column")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,x,1\n2,1,1\n", (),
     ("line 3", "'prompt_tokens'", "not a number")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,-1,1\n2,1,1\n", (),
     ("line 3", "'prompt_tokens'", "negative")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n1,NaN,1\n2,1,1\n", (),
     ("line 3", "'prompt_tokens'", "missing value")),
    ("", (), ("is empty",)),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--format", "burstgpt"),
     ("line 1", "'Timestamp'", "looks like generic")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--format", "nope"),
     ("--format", "must be one of")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--window", "x:1"), ("--window",)),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--max-output", "fixed:abc"),
     ("--max-output",)),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--rate-scale", "0"),
     ("--rate-scale", "must be > 0")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--tier-shares", "a=0.5"),
     ("--tier-shares", "sum to 1")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--tier-map", "novalue"),
     ("--tier-map", "KEY=VALUE")),
    ("arrival_s,prompt_tokens,output_tokens\n0,1,1\n", ("--window", "10:20"), ("window",)),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, content: str, args: tuple[str, ...],
                                      needles: tuple[str, ...]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    for command in (("stats", path), ("convert", path, "--out", tmp_path / "o.csv")):
        assert_one_line_error(run(*command, *args), *needles)


# Each publisher's layout, as its own documentation gives it (Azure: AzurePublicDataset
# AzureLLMInferenceDataset2023.md; BurstGPT: HPMLL/BurstGPT README "Schema", e92f533b; Mooncake:
# kvcache-ai/Mooncake FAST25-release/README.md, 3b5a5941; splitwise-sim: Mutinifni/splitwise-sim
# traces/*.csv, 37808801), with one field broken: a missing column, a negative time, tokens that
# are no number, and an empty file.
_SPLITWISE = "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,"
_BURST = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(("name", "content", "needles"), [
    ("a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,4808\n",
     ("line 1", "'GeneratedTokens'", "missing column")),
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,4808,ten\n"
     "2023-11-16 18:17:04.97,4808,10\n", ("line 2", "'GeneratedTokens'", "not a number")),
    ("b.csv", "Timestamp,Model,Request tokens,Total tokens,Log Type\n5,ChatGPT,472,490,API log\n",
     ("line 1", "'Response tokens'", "missing column")),
    ("b.csv", _BURST + "5,ChatGPT,472,18,490,Conversation log\n-45,GPT-4,10,2,12,API log\n",
     ("line 3", "'Timestamp'", "negative value: -45", "0:00:00 on its first day")),
    ("b.csv", _BURST + "5,ChatGPT,abc,18,490,Conversation log\n45,GPT-4,10,2,12,API log\n",
     ("line 2", "'Request tokens'", "not a number: 'abc'")),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10}\n',
     ("line 1", "'output_length'", "missing field")),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 3}\n'
     '{"timestamp": -5, "input_length": 10, "output_length": 3}\n',
     ("line 2", "'timestamp'", "-5 ms as written")),
    ("m.jsonl", '{"timestamp": 0, "input_length": "ten", "output_length": 3}\n',
     ("line 1", "'input_length'", "not a number")),
    ("s.csv", _SPLITWISE + "token_size\n0,2,0,0.5,1,100,10\n1,2,0,-1.0,1,100,10\n",
     ("line 3", "'arrival_timestamp'", "negative value")),
    ("s.csv", _SPLITWISE + "token_size\n0,2,0,0.5,1,x,10\n",
     ("line 2", "'prompt_size'", "not a number")),
    ("e.csv", "", ("is empty",)),
    ("e.jsonl", "", ("is empty",)),
])
def test_each_publishers_layout_refuses_bad_input_in_one_line(
        tmp_path: Path, name: str, content: str, needles: tuple[str, ...]) -> None:
    path = tmp_path / name
    path.write_text(content)
    for command in (("stats", path), ("convert", path, "--out", tmp_path / "o.csv")):
        assert_one_line_error(run(*command), str(path), *needles)


def test_missing_file_and_bad_output_extension(tmp_path: Path) -> None:
    assert_one_line_error(run("stats", tmp_path / "none.csv"), "no such file")
    src = tmp_path / "in.csv"
    src.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n")
    assert_one_line_error(run("convert", src, "--out", tmp_path / "o.xlsx"), ".xlsx")
    assert_one_line_error(run("convert", src, "--out", tmp_path / "no" / "o.csv"),
                          "does not exist")


# ---------------------------------------------------------------------------------------------
# fetch, against a loopback HTTP server started and stopped here


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    def start(directory: Path) -> str:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@needs_shared
def test_fetch_verifies_pinned_sha256(tmp_path: Path, serve: Any) -> None:
    base = serve(AZURE_CODE.parent)
    dest = tmp_path / "dl"
    result = run("fetch", "azure-code-2023", "--dest", dest, "--base-url", base)
    assert result.exit_code == 0, result.stderr
    assert "downloaded" in result.stdout and "sha256 verified" in result.stdout
    assert "Splitwise" in result.stdout
    assert (dest / AZURE_CODE.name).read_bytes() == AZURE_CODE.read_bytes()
    again = run("fetch", "azure-code-2023", "--dest", dest, "--base-url", base)
    assert again.exit_code == 0 and "already present" in again.stdout
    moon = run("fetch", "mooncake-synthetic", "--dest", dest, "--base-url",
               serve(TRACES / "mooncake"))
    assert moon.exit_code == 0, moon.stderr
    assert sorted(p.name for p in dest.iterdir()) == [AZURE_CODE.name, "synthetic_trace.jsonl"]


def test_fetch_rejects_a_corrupted_download(tmp_path: Path, serve: Any) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "AzureLLMInferenceTrace_code.csv").write_text("TIMESTAMP,ContextTokens\n")
    dest = tmp_path / "dl"
    result = run("fetch", "azure-code-2023", "--dest", dest, "--base-url", serve(site))
    assert_one_line_error(result, "does not verify", "deleted")
    assert list(dest.iterdir()) == []


def test_fetch_git_blob_and_user_sha256(tmp_path: Path, serve: Any) -> None:
    site = tmp_path / "site"
    site.mkdir()
    body = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,1,1\n"
    (site / "AzureLLMInferenceTrace_code_1week.csv").write_bytes(body)
    base = serve(site)
    digest = hashlib.sha256(body).hexdigest()
    ok = run("fetch", "azure-code-2024", "--dest", tmp_path / "a", "--base-url", base,
             "--sha256", digest)
    assert ok.exit_code == 0 and "sha256 verified" in ok.stdout
    unverified = run("fetch", "azure-code-2024", "--dest", tmp_path / "b", "--base-url", base)
    assert unverified.exit_code == 0 and digest in unverified.stderr
    wrong = run("fetch", "azure-code-2024", "--dest", tmp_path / "c", "--base-url", base,
                "--sha256", "0" * 64)
    assert_one_line_error(wrong, "does not verify")
    # A source pinned by git blob id: the served bytes are not the real BurstGPT_1.csv.
    (site / "BurstGPT_1.csv").write_bytes(body)
    blob = run("fetch", "burstgpt-1", "--dest", tmp_path / "d", "--base-url", base)
    assert_one_line_error(blob, "git blob")


def test_fetch_errors(tmp_path: Path, serve: Any) -> None:
    base = serve(tmp_path)
    assert_one_line_error(run("fetch", "nope", "--dest", tmp_path), "unknown trace 'nope'")
    assert_one_line_error(run("fetch", "azure-conv-2023", "--dest", tmp_path / "x",
                              "--base-url", base), "HTTP 404")
    assert_one_line_error(run("fetch", "azure-conv-2023", "--dest", tmp_path,
                              "--base-url", "ftp://x"), "base URL")
    assert_one_line_error(run("fetch", "azure-conv-2023", "--dest", tmp_path, "--sha256", "12"),
                          "64 hex digits")
    listing = run("fetch", "--list")
    assert listing.exit_code == 0 and "mooncake-conversation" in listing.stdout


def test_fetch_refuses_pages_that_are_no_trace(tmp_path: Path) -> None:
    """An error or log-in page served with 200, an endless body, a redirect: only the bytes
    that verify are kept, and nothing is left behind otherwise."""
    from tests.unit.live.test_hostile_servers import Hostile
    from tests.unit.live.test_live_campaign import _serving, raw

    body = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+00:00,1,1\n"
    digest = hashlib.sha256(body).hexdigest()
    page = b"<!DOCTYPE html><html><body>Sign in</body></html>"

    def answer(kind: str, data: bytes, code: str = "200 OK", extra: str = "") -> Any:
        return raw(f"HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n"
                   f"{extra}Connection: close\r\n\r\n".encode() + data)

    site, mirror = Hostile(), Hostile()
    with _serving(site), _serving(mirror):
        name = "/AzureLLMInferenceTrace_code_1week.csv"
        cases = [
            (answer("text/html; charset=utf-8", page), "answered an HTML page"),
            (answer("text/csv", page), "answered an HTML or XML page"),
            (answer("text/csv", body, "302 Found", f"Location: {mirror.url}{name}\r\n"), None),
        ]
        mirror.paths[name] = answer("text/csv", body)
        for i, (script, said) in enumerate(cases):
            site.paths[name] = script
            dest = tmp_path / f"d{i}"
            res = run("fetch", "azure-code-2024", "--dest", dest, "--base-url", site.url + "/")
            if said is None:  # followed to the mirror: the bytes are the trace's
                assert res.exit_code == 0, res.stderr
                assert (dest / name[1:]).read_bytes() == body and digest in res.stderr
            else:
                assert_one_line_error(res, said)
                assert list(dest.iterdir()) == []
        # a pinned source: a body longer than the source is cut off, not downloaded forever
        big = b"TIMESTAMP,ContextTokens\n" + b"x" * 400_000
        site.paths["/AzureLLMInferenceTrace_code.csv"] = answer("text/csv", big)
        dest = tmp_path / "pinned"
        res = run("fetch", "azure-code-2023", "--dest", dest, "--base-url", site.url + "/")
        assert_one_line_error(res, "more than the 320,117 bytes")
        assert list(dest.iterdir()) == []


def _drawn_servegen(folder: Path) -> Path:
    """A ServeGen chunk: its arrivals and lengths are drawn, so they depend on the seed."""
    (folder / "chunk-5-trace.csv").write_text("0,2,1.0,Gamma,1.0,0.5\n")
    (folder / "chunk-5-dataset.json").write_text(json.dumps(
        {"0": {"input_tokens": "{10: 0.25, 20: 0.25, 30: 0.5}", "output_tokens": "{4: 0.5, 8: 0.5}"}}))
    return folder / "chunk-5-trace.csv"


@pytest.mark.parametrize("seed", [None, 3])
def test_convert_draws_the_workload_simulate_draws_with_the_same_seed(tmp_path: Path,
                                                                       seed: int | None) -> None:
    """``trace convert --seed N`` wrote another draw than the one ``simulate --seed N``
    simulates (the scenario derives its trace's seed; the trace commands used N itself), so a
    user who froze a ServeGen or sampled workload and simulated the original compared two
    different workloads. Both draw the same one, with or without ``--seed``."""
    from kvbudget.simulator.scenario import make_scenario

    chunk = _drawn_servegen(tmp_path)
    out = tmp_path / "w.csv"
    flag = () if seed is None else ("--seed", str(seed))
    result = run("convert", chunk, "--out", out, "--window", "0:120", *flag)
    assert result.exit_code == 0, result.stderr
    frozen = load_trace(out).workload
    simulated = make_scenario(trace=str(chunk), seed=seed,
                              trace_options={"window": [0, 120]}).workload()
    assert frozen.arrival_s.tolist() == pytest.approx(simulated.arrival_s.tolist())
    assert frozen.prompt_tokens.tolist() == simulated.prompt_tokens.tolist()
    assert frozen.output_tokens.tolist() == simulated.output_tokens.tolist()


def test_replay_sends_the_workload_simulate_draws_with_the_same_seed(tmp_path: Path) -> None:
    """``replay --trace`` drew a ServeGen or sampled trace with seed 0 whatever its ``--seed``,
    and another draw than ``simulate --seed`` simulates: a replay and its simulation compared
    different requests. Both draw the same ones."""
    from kvbudget.cli.live import load_trace_workload
    from kvbudget.cli.options import TraceArgs
    from kvbudget.simulator.scenario import make_scenario

    chunk = _drawn_servegen(tmp_path)
    sent = load_trace_workload(chunk, TraceArgs(), "interactive", 1.0, seed=4)
    simulated = make_scenario(trace=str(chunk), seed=4).workload()
    assert sent.prompt_tokens.tolist() == simulated.prompt_tokens.tolist()
    assert sent.arrival_s.tolist() == simulated.arrival_s.tolist()


def test_an_unmapped_servegen_client_is_refused_with_the_flag_that_maps_it(tmp_path: Path) -> None:
    """A ServeGen directory simulated as it comes named client tiers the default scenario has
    not, and the refusal only listed the configured tiers; it names the flag that maps them,
    and the mapping it names works."""
    from kvbudget.cli.main import app

    chunk = _drawn_servegen(tmp_path)
    base = ["simulate", "--trace", str(chunk), "--window", "0:60", "--gpu", "A100-80GB",
            "--model", "Llama-2-7B"]
    refused = runner.invoke(app, base)
    assert refused.exit_code == 2 and "--tier-map VALUE=TIER" in refused.stderr
    assert "N=TIER" in refused.stderr and "Traceback" not in refused.stderr
    mapped = runner.invoke(app, [*base, "--tier-map", "5=interactive"])
    assert mapped.exit_code == 0, mapped.stderr
