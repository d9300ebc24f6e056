"""A newcomer's path with their own load tool's file: recording -> calibrated cost file -> what
the admission policy does at twice the load (docs/recordings.md, "Ask the what-if"). The files
are the fixtures the real tools wrote here (scripts/make_recording_fixtures.sh).

Before: ``simulate --trace bench.json`` refused a load tool's result ("is a recording, not a
trace: kvbudget validate --records FILE simulates its requests and compares"), which compares
at the recorded load and no other, and nothing read such a file as a workload: the what-if the
docs promise "on the recorded workload" had no path from it. A trace with no ``--gpu`` or
``--model`` was simulated on the default scenario's H100-80GB and Llama-3.1-8B, which the
``simulated:`` line named like the user's own; a cost file fitted on the user's GPU then told
only of ``--cost-model-transfer`` (which resets every parameter on another GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.fitted_on import FitTarget
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.results.recordings import read_recording
from tests.unit.perf.test_fitted_on import fitted_file

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "recordings"
RATE8 = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
SWEEP = RECORDINGS / "guidellm-0.8.1" / "sweep.json"
TURNS = RECORDINGS / "aiperf-0.13.0" / "multiturn3_delay300_rate4c2.jsonl"


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def flat(text: str) -> str:
    return " ".join(text.split())


def test_simulate_trace_of_a_load_tools_result_names_the_conversion(tmp_path: Path) -> None:
    code, _, stderr = run("simulate", "--trace", RATE8)
    assert code == 2
    assert f"kvbudget trace convert {RATE8} --out T.csv" in flat(stderr), stderr
    assert "--rate-scale 2" in stderr, stderr


def test_a_load_tools_result_converts_to_the_trace_it_sent(tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    code, stdout, stderr = run("trace", "convert", RATE8, "--out", out)
    assert code == 0, stderr
    rec = read_recording(RATE8)
    trace = pd.read_csv(out)
    assert len(trace) == len(rec.workload) == 20
    assert trace["arrival_s"].tolist() == pytest.approx(rec.workload.arrival_s.tolist())
    assert trace["prompt_tokens"].tolist() == rec.workload.prompt_tokens.tolist()
    assert trace["output_tokens"].tolist() == rec.workload.output_tokens.tolist()
    # vllm bench serve keeps no max_tokens: the realised output, said, and the file says so
    assert trace["max_output_tokens"].tolist() == trace["output_tokens"].tolist()
    said = flat(stderr)
    assert "max_tokens: its realised output length" in said, stderr
    assert f"{out} holds what was assumed above as if its file had said it" in said
    assert "20 requests" in stdout and "(vllm bench serve)" in stdout
    # the what-if: twice its rate, on the deployment given
    code, stdout, stderr = run("simulate", "--trace", out, "--rate-scale", "2", "--gpu",
                               "H100-80GB", "--model", "Llama-3.1-8B", "--json")
    assert code == 0, stderr
    summary = json.loads(stdout)
    assert summary["overall"]["offered"] == 20
    span = float(rec.workload.arrival_s[-1] - rec.workload.arrival_s[0])
    assert summary["offered_window_s"] == pytest.approx(span / 2)


def test_a_max_output_rule_applies_when_converting_a_recording(tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    code, _, stderr = run("trace", "convert", RATE8, "--out", out, "--max-output", "512")
    assert code == 0, stderr
    assert set(pd.read_csv(out)["max_output_tokens"]) == {512}


def test_a_trace_option_on_a_recording_is_refused_naming_where_it_applies(
        tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    code, _, stderr = run("trace", "convert", RATE8, "--out", out, "--rate-scale", "2")
    assert code == 2
    said = flat(stderr)
    assert said.startswith("error: --rate-scale: ") and "a load tool's recording" in said
    assert f"kvbudget simulate --trace {out} --rate-scale" in said, stderr
    assert not out.exists()


def test_a_summary_of_aggregates_is_refused_naming_the_file_to_convert(tmp_path: Path) -> None:
    """AIPerf's summary beside its per-request file: the recordings' reader names the file to
    pass, where the trace loader could only say it is not JSON lines."""
    summary = RECORDINGS / "aiperf-0.13.0" / "rate8_aiperf.json"
    code, _, stderr = run("trace", "convert", summary, "--out", tmp_path / "t.csv")
    assert code == 2
    assert stderr.strip() == (f"error: {summary}: is AIPerf's summary (profile_export_aiperf.json): "
                              "aggregates only; pass the per-request profile_export.jsonl beside it")


def test_converting_a_closed_loop_sweep_says_what_the_trace_cannot_hold(tmp_path: Path) -> None:
    """GuideLLM's sweep: a synchronous stage (1 user), a throughput stage (512 users) and a
    constant-rate stage capped at 512 in flight, one after another."""
    out = tmp_path / "sweep.csv"
    code, _, stderr = run("trace", "convert", SWEEP, "--out", out)
    assert code == 0, stderr
    said = flat(stderr)
    assert "stage 0: synchronous was a closed loop of 1 user" in said, stderr
    assert "--users 1 simulates 1 user sending its requests in turn" in said
    assert "--users 512 simulates 512 users" in said
    assert "at most 512 in flight" in said and "replays open loop without that cap" in said
    assert f"{out} holds the recording's 3 stages one after another" in said
    trace = pd.read_csv(out)
    first, last = trace["arrival_s"].iloc[0], trace["arrival_s"].iloc[-1]
    assert f"keeps one (0: synchronous {first:.3f} .. " in said, stderr
    assert f"x512 63.372 .. {last:.3f} s)" in said


def test_converting_conversations_says_their_turn_order_is_not_kept(tmp_path: Path) -> None:
    # .parquet: its 16-token prefix hashes are refused in a .csv, which cannot say their size
    # (test_round_trips)
    out = tmp_path / "turns.parquet"
    code, _, stderr = run("trace", "convert", TURNS, "--out", out)
    assert code == 0, stderr
    assert f"{out} holds no conversation" in flat(stderr), stderr


def test_a_trace_on_the_default_gpu_and_model_says_so(tmp_path: Path) -> None:
    """Under the simulated: line it qualifies (stderr beside --json)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    code, stdout, stderr = run("simulate", "--trace", trace)
    assert code == 0, stderr
    lines = stdout.replace("\n  ", " ").splitlines()
    assert lines[0].startswith("simulated: Llama-3.1-8B (assumed: the default scenario's) on "
                               "H100-SXM (assumed: the default scenario's H100-80GB)")
    assert lines[1].startswith("assumed: GPU H100-80GB and model Llama-3.1-8B, the default "
                               "scenario's: no --gpu or --model given"), stdout
    code, stdout, stderr = run("simulate", "--trace", trace, "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["overall"]["offered"] == 2
    assert "the default scenario's: no --gpu or --model given" in flat(stderr), stderr
    code, stdout, stderr = run("compare", "--trace", trace, "--gpu", "A100-80GB",
                               "--policies", "unlimited")
    assert code == 0, stderr
    assert stdout.replace("\n  ", " ").splitlines()[1].startswith(
        "assumed: model Llama-3.1-8B, the default scenario's: no --model given"), stdout
    assert "GPU H100-80GB" not in stdout
    code, stdout, stderr = run("simulate", "--trace", trace, "--gpu", "A100-80GB", "--set",
                               "model=Qwen2.5-7B")
    assert code == 0, stderr
    assert "the default scenario's" not in stdout + stderr


def test_a_scenario_file_without_gpu_says_whose_it_took(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text(f'model = "Qwen2.5-7B"\n[workload]\nkind = "trace"\npath = "{trace}"\n')
    code, stdout, stderr = run("simulate", "--scenario", scenario)
    assert code == 0, stderr
    assert (f"assumed: GPU H100-80GB, the default scenario's: no --gpu given ({scenario} does "
            "not name it)") in flat(stdout), stdout


def test_plan_says_the_default_model_but_not_the_gpus_it_searches(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    code, _, stderr = run("plan", "--trace", trace, "--gpus", "A100-80GB", "--replicas", "1",
                          "-r", "1", "--policies", "unlimited", "--out", tmp_path / "plan")
    assert code == 0, stderr
    said = flat(stderr)
    assert "assumed: model Llama-3.1-8B, the default scenario's" in said, stderr
    assert "GPU H100-80GB" not in said


def test_a_cost_file_fitted_on_another_gpu_names_the_flags_of_its_own(tmp_path: Path) -> None:
    """A user who calibrated on their A100 and left out --gpu: the refusal names the flags that
    simulate the file's own deployment, not only the transfer (which on another GPU carries
    nothing)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    a100 = FitTarget(get_gpu("A100-80GB"), get_model("Qwen2.5-7B"), tensor_parallel_size=2)
    cost = fitted_file(tmp_path / "cost.json", a100, mem_efficiency=0.6)
    code, _, stderr = run("simulate", "--trace", trace, "--cost-model", cost)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert ("to use it as it was fitted, give its own deployment: --gpu A100-80GB --model "
            "Qwen2.5-7B --tensor-parallel-size 2; --cost-model-transfer") in lines[0]
    assert "plan:" not in lines[0]  # simulate's own flags only
    code, _, stderr = run("simulate", "--trace", trace, "--cost-model", cost, "--gpu",
                          "A100-80GB", "--model", "Qwen2.5-7B", "--tensor-parallel-size", "2")
    assert code == 0, stderr


SGLANG_RATE8 = RECORDINGS / "sglang-0.5.9" / "rate8.jsonl"


@pytest.mark.parametrize(("args", "tool"), [
    ([RATE8], "vllm bench serve"), (["RUN", "--measured", RATE8], "vllm bench serve"),
    # SGLang's bench_serving writes vLLM's layout: report named its file "(vllm-bench)", the
    # format's name, where validate --records says "(sglang.bench_serving)"
    ([SGLANG_RATE8], "sglang.bench_serving")])
def test_report_of_a_load_tools_result_names_the_command_that_reads_it(
        tmp_path: Path, args: list[object], tool: str) -> None:
    """``kvbudget report bench.json`` said "not a run directory (a file, not a directory)"."""
    run_dir = tmp_path / "run"
    code, _, stderr = run("simulate", "--set", "workload.duration_s=5", "--out", run_dir)
    assert code == 0, stderr
    args = [run_dir if a == "RUN" else a for a in args]
    code, _, stderr = run("report", *args, "--out", tmp_path / "report")
    assert code == 2
    said = flat(stderr)
    where = "--measured: " if "--measured" in args else ""
    file = args[-1]
    assert said.startswith(f"error: {where}{file}: a load tool's recording ({tool}), not "
                           "a run directory"), stderr
    assert f"kvbudget validate --records {file} --out DIR" in said
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize(("name", "text", "what"), [
    # genai-perf's summary, in the layout github.com/wellflat/k8s-dev bench/etl/ publishes
    ("profile_export_genai_perf.json",
     json.dumps({"request_latency": {"unit": "ms", "avg": 2083.0},
                 "input_config": {"perf_analyzer": {"stimulus": {"concurrency": 1}}}}),
     "it is genai-perf's summary (profile_export_genai_perf.json): aggregates only"),
    # k6's --out csv (grafana/k6 internal/output/csv/output.go MakeHeader)
    ("k6.csv", "metric_name,timestamp,metric_value,extra_tags,metadata\n"
     "http_req_duration,1736503200,2100.512000,,\n",
     "it is k6's --out csv output (one row a metric sample)"),
    # Locust's --csv PREFIX_stats.csv: the header of locustio/locust 0070e8b locust/stats.py
    # StatsCSV.requests_csv_columns (its default PERCENTILES_TO_REPORT), one row a request
    # name and the Aggregated row; report said "not a directory", then named it aggregates of
    # no tool; now Locust's, as validate --records says it
    ("run_stats.csv", "Type,Name,Request Count,Failure Count,Median Response Time,Average "
     "Response Time,Min Response Time,Max Response Time,Average Content Size,Requests/s,"
     "Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%\n"
     "POST,/v1/completions,120,0,1500,1523.4,800,3100,512.0,2.0,0.0,1500,1600,1700,1800,"
     "2000,2400,2800,3000,3100,3100,3100\n"
     ",Aggregated,120,0,1500,1523.4,800,3100,512.0,2.0,0.0,1500,1600,1700,1800,2000,2400,"
     "2800,3000,3100,3100,3100\n",
     "it is Locust's --csv *_stats.csv: one row an endpoint and their aggregate (request "
     "count, mean and percentile response times), no request"),
    # a home-made benchmark's JSON of aggregates (recorded_aggregates), as validate says it
    ("bench.json", json.dumps({"mean_ttft_ms": 12.0, "p99_ttft_ms": 30.1, "throughput": 5.2}),
     "it holds aggregate figures (mean_ttft_ms, p99_ttft_ms, throughput), not per-request"),
    # per-request results of no tool kvbudget reads (a home-made harness's list: a refusal
    # that says what the file "holds"), which report told "not a run directory (a file, not a
    # directory)"
    ("results.json", json.dumps([{"request_id": "a", "ttft_ms": 12.0, "latency_ms": 100.0,
                                  "prompt_tokens": 10, "completion_tokens": 5}]),
     "it holds 1 per-request result(s) in a layout of no tool kvbudget reads (ttft_ms, "
     "latency_ms, request_id, ...), with no send time among their keys"),
])
def test_report_of_a_file_kvbudget_cannot_read_says_what_it_is(
        tmp_path: Path, name: str, text: str, what: str) -> None:
    """``kvbudget report`` of a tool's aggregates said only "not a run directory (a file, not a
    directory)", though --records names the file and what to pass instead."""
    path = tmp_path / name
    path.write_text(text)
    code, _, stderr = run("report", path, "--out", tmp_path / "report")
    assert code == 2
    assert flat(stderr).startswith(f"error: {path}: not a run directory: {what}"), stderr
    assert not (tmp_path / "report").exists()
    code, _, stderr = run("validate", "--records", path, "--out", tmp_path / "val")
    assert code == 2 and what.removeprefix("it ") in flat(stderr), stderr  # the same words


def test_a_fleet_of_named_gpus_is_not_said_to_take_the_default_gpu(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.5,100,10\n")
    code, stdout, stderr = run("simulate", "--trace", trace, "--model", "Llama-3.1-8B", "--set",
                               "fleet.num_replicas=2", "--set", 'fleet.gpus=["A100-80GB","L40S"]')
    assert code == 0, stderr
    assert "the default scenario's" not in stdout + stderr, stdout


def test_a_study_of_a_trace_says_its_replications_run_the_same_requests(tmp_path: Path) -> None:
    """``plan --trace T -r 3`` answered "1 ± 0", "the bound of the 95% t interval over 3
    replications", where the replications were three runs of the same requests (a timed
    trace's seed draws nothing): a 0-wide interval read as a margin. The study says so where
    the load drew nothing, not where --tier-shares draws anew in each."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{i / 8},{100 + 37 * i},{10 + i}\n" for i in range(20)))
    out = tmp_path / "cmp"
    code, _, stderr = run("compare", "--trace", trace, "-r", "2", "--policies",
                          "unlimited,conservative", "--model", "Llama-3.1-8B", "--gpu",
                          "H100-80GB", "--out", out, "-j", "1")
    assert code == 0, stderr
    # every replication would be the same run: it runs once and says so in the replications
    # line's place (tests/cli/test_study_one_run.py), no 0-wide interval shown
    assert "one run: the trace's every draw is fixed" in flat(stderr), stderr
    assert "same requests" not in stderr, stderr
    runs = pd.read_parquet(out / "runs.parquet")
    assert runs["replication"].tolist() == [0, 0]
    code, _, stderr = run("compare", "--trace", trace, "-r", "2", "--policies",
                          "unlimited,conservative", "--model", "Llama-3.1-8B", "--gpu",
                          "H100-80GB", "--tier-shares", "interactive=0.5,batch=0.5", "-j", "1")
    assert code == 0, stderr
    assert "same requests" not in stderr and "one run" not in stderr, stderr


def test_converting_a_capped_stage_says_it_holds_the_due_times_not_the_sends(
        tmp_path: Path) -> None:
    """A capped stage whose slots were all busy at times is offered when each request was due
    (vllm bench serve's start_times less queue_times, AIPerf's issues, inference-perf's due times
    drawn again): the converted trace holds those, but `trace convert` said it held "the
    requests as the tool sent them ... at their recorded sends"."""
    path = RECORDINGS / "inference-perf-0.7.0" / "worker_capped" / "per_request_lifecycle_metrics.json"
    out = tmp_path / "capped.csv"
    code, stdout, stderr = run("trace", "convert", path, "--out", out)
    assert code == 0, stderr
    rec = read_recording(path)
    trace = pd.read_csv(out)
    sent = rec.measured["arrival_s"].to_numpy()
    assert trace["arrival_s"].to_numpy() == pytest.approx(rec.workload.arrival_s)
    assert trace["arrival_s"].to_numpy() != pytest.approx(sent)  # due, not sent
    assert "the requests as the tool offered them (a capped stage's when each was due" in \
        flat(stdout)
    said = flat(stderr)
    assert ("holds its requests at the times they were due, not their recorded sends (its 2 "
            "slots were all busy at times, and a request due then was sent when one freed): "
            "72.2 ms before their recorded sends (median; at most") in said, stderr
    assert "at their recorded sends, which a simulation of it replays open loop without" \
        not in said


@pytest.mark.parametrize(("name", "said"), [
    ("rate8.json", None),
    ("concurrency4.json", "holds its requests at their rebuilt sends, which a simulation"),
    ("burst05_c2.json", "holds its requests at the times they were due, not their rebuilt "
                        "sends (its 2 slots were all busy at times"),
])
def test_converting_a_file_without_send_times_says_they_were_rebuilt(
        tmp_path: Path, name: str, said: str | None) -> None:
    """vLLM 0.10.2's client saves no start_times: kvbudget draws the sends again from the rate
    and rebuilds a capped or closed run's from its latencies, but `trace convert` said it wrote
    "the requests as the tool sent them, on its clock" and held them "at their recorded
    sends"."""
    path = RECORDINGS / "vllm-bench-0.10.2" / name
    code, stdout, stderr = run("trace", "convert", path, "--out", tmp_path / "t.csv")
    assert code == 0, stderr
    assert "the requests at send times rebuilt from each stage's rate, cap and latencies (the " \
        "file records none: see the notes)" in flat(stdout)
    assert "as the tool sent them" not in stdout and "on its clock" not in stdout
    assert "recorded sends" not in flat(stderr)
    if said:
        assert said in flat(stderr), stderr


def test_converting_a_capped_stage_says_exactly_which_times_it_holds(tmp_path: Path) -> None:
    """vllm bench serve 0.32.0 at --request-rate 8 --max-concurrency 2: the ShareGPT run never
    filled its two slots and is held at its sends; the BurstGPT run filled them at moments, and
    its trace holds the due times (start_times less queue_times), 0.1 ms before the sends, which
    the line said nowhere ("the tool sent some later")."""
    files = RECORDINGS / "vllm-bench-0.32.0" / "files"
    code, stdout, stderr = run("trace", "convert", files / "sharegpt_rate8_c2.json", "--out",
                               tmp_path / "a.csv")
    assert code == 0, stderr
    assert "the requests as the tool sent them, on its clock" in flat(stdout)
    assert ("at most 2 in flight: " + str(tmp_path / "a.csv") + " holds its requests at their "
            "recorded sends, which a simulation of it replays open loop without that cap (a "
            "slower simulated server does not hold a send back)") in flat(stderr), stderr
    code, stdout, stderr = run("trace", "convert", files / "burstgpt_rate8_c2.json", "--out",
                               tmp_path / "b.csv")
    assert code == 0, stderr
    assert "the requests as the tool offered them (a capped stage's when each was due" in \
        flat(stdout)
    assert ("holds its requests at the times they were due, not their recorded sends (its 2 "
            "slots were all busy at times, and a request due then was sent when one freed): "
            "0.108 ms before their recorded sends (median; at most 0.312 ms)") in flat(stderr)


@pytest.mark.parametrize("name", [
    "sglang-0.5.9/concurrency4.jsonl",  # a closed loop's users start at once: times rebuilt
    "guidellm-0.8.1/rampup2_concurrent4.json",  # a ramp's later requests offered at its end
    "vllm-otel-0.32.0/curl_n2_abandoned.jsonl",  # one request's two sequences
    # genai-bench's users all start at once (its sends rebuilt)
    "genai-bench-0.0.5/two_scenarios/D64_128_text-to-text_num_concurrency_2_time_2s.json"])
def test_trace_convert_does_not_warn_of_shared_times_validate_hid(
        tmp_path: Path, name: str) -> None:
    """The readers drop the trace loader's "share their timestamp ... --spread-s" warning where
    the ties are theirs (rebuilt sends, a ramp's hold, one request's sequences), so validate
    does not print it; it stayed in the workload's meta, which trace convert prints (and a
    simulation of the recording writes in its summary): trace convert of SGLang 0.5.9's
    concurrency4.jsonl told the user to spread times kvbudget had rebuilt itself."""
    rec = read_recording(RECORDINGS / name)
    assert not any("share their timestamp" in n for n in rec.notes)
    said = rec.workload.meta.get("warnings", ())
    assert isinstance(said, tuple)
    assert not any("share their timestamp" in str(w) for w in said)
    code, _, stderr = run("trace", "convert", RECORDINGS / name, "--out", tmp_path / "t.jsonl")
    assert code == 0, stderr
    assert "share their timestamp" not in stderr
    assert "--spread-s" not in stderr


def test_trace_convert_says_a_loader_warning_once(tmp_path: Path) -> None:
    """A warning of the trace loader that the reader also gives as a note ("dropped 3 of the
    file's 10 rows": AIPerf's cancelled requests) was printed twice by trace convert, as a note
    and as a warning; validate prints it once."""
    path = RECORDINGS / "aiperf-0.13.0" / "cancel50_concurrency2.jsonl"
    code, _, stderr = run("trace", "convert", path, "--out", tmp_path / "t.jsonl")
    assert code == 0, stderr
    assert flat(stderr).count("dropped 3 of the file's 10 rows") == 1, stderr
