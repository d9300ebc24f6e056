"""Files written by the real load tools (``tests/fixtures/recordings/<tool>-<version>/``, made
by ``scripts/make_recording_fixtures.sh`` against the CPU vLLM of the live tests) read to the
same figures as the tool's own summary in the same run: requests measured, mean TTFT, mean
ITL, output tokens; each stage's load mode as the tool ran it; no invented ``max_tokens``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import (
    RECORDING_FORMATS,
    RecordedStage,
    Recording,
    detect_recording_format,
    read_recording,
)
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import replay_mode, stage_plans
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM = FIXTURES / "vllm-bench-0.32.0"
GUIDELLM = {v: FIXTURES / f"guidellm-{v}"
            for v in ("0.2.1", "0.3.1", "0.4.0", "0.5.4", "0.6.1", "0.7.4", "0.8.1")}
AIPERF = FIXTURES / "aiperf-0.13.0"
INFERENCE_PERF = FIXTURES / "inference-perf-0.7.0"
HANDMADE = FIXTURES / "handmade"


def usable(rec: Recording) -> pd.DataFrame:
    return rec.measured[rec.measured["usable"]]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# --------------------------------------------------------------------------- vllm bench serve


@pytest.mark.parametrize(("name", "stage"), [
    ("rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
    ("concurrency4.json", RecordedStage("concurrency 4", "closed", None, 4)),
    ("burst05.json", RecordedStage("8 req/s", "open", 8.0, None)),
    ("rampup.json", RecordedStage("ramp-up linear 2 to 12 req/s", "open", None, None)),
    ("inf.json", RecordedStage("inf req/s", "open", math.inf, None)),
    ("prefix16.json", RecordedStage("8 req/s", "open", 8.0, None)),
])
def test_vllm_bench_reads_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    path = VLLM / name
    doc = json.loads(path.read_text())
    rec = read_recording(path)
    assert detect_recording_format(path) == "vllm-bench" and rec.tool == "vllm bench serve"
    u = usable(rec)
    assert rec.counts["num_measured"] == doc["completed"] == len(u)
    assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    # vLLM's mean ITL is over every inter-token time: the per-request means weighted by count
    counts = np.array([len(x) for x in doc["itls"]])[u["request_id"].to_numpy()]
    assert close(float((u["itl_mean_s"] * counts).sum() / counts.sum()) * 1e3,
                 doc["mean_itl_ms"])
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert close(u["output_tokens"].sum() / doc["duration"], doc["output_throughput"])
    assert rec.stages == (stage,)
    assert set(rec.measured["stage"]) == {stage.label}
    if stage.load == "open":  # offered at the client's own send times (a ramp's, gamma gaps')
        sends = np.array(doc["start_times"])
        assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(sends - sends.min()))
    # no max_tokens in the file: each request declares what it generated, and the notes say so
    assert (rec.workload.max_output_tokens == rec.workload.output_tokens).all()
    assert any("realised output length" in n for n in rec.notes)
    assert rec.config["model"] == "tiny" and "max_tokens" not in rec.config


def test_vllm_bench_append_result_reads_every_line_as_a_stage() -> None:
    path = VLLM / "append.jsonl"
    docs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(docs) == 2
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("line 1: 8 req/s, concurrency 2", "capped", 8.0, 2),
                          RecordedStage("line 2: concurrency 4", "closed", None, 4))
    assert rec.counts["num_stages"] == 2
    for stage, doc in zip(rec.stages, docs, strict=True):
        rows = rec.measured[rec.measured["stage"] == stage.label]
        assert len(rows) == doc["completed"]
        assert close(rows["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    # the second run starts after the first one's last request ended
    first = rec.measured[rec.measured["stage"] == rec.stages[0].label]
    second = rec.measured[rec.measured["stage"] == rec.stages[1].label]
    assert second["arrival_s"].min() >= (first["arrival_s"] + first["e2e_s"]).max() - 1e-9


def test_vllm_bench_append_result_runs_are_placed_where_their_start_times_put_them(
        tmp_path: Path) -> None:
    # a rate sweep (--request-rate 8, then 8 again, --append-result): the runs were placed back
    # to back, so a simulated backlog of one ran into the next, whose real server was idle
    # for the seconds between them (start_times: one perf_counter clock for the machine)
    doc = json.loads((VLLM / "rate8.json").read_text())
    end = max(s + lat for s, lat in zip(doc["start_times"], doc["latencies"], strict=True))
    second = {**doc, "start_times": [t - doc["start_times"][0] + end + 30.0
                                     for t in doc["start_times"]]}
    path = tmp_path / "sweep.jsonl"
    path.write_text(json.dumps(doc) + "\n" + json.dumps(second) + "\n")
    rec = read_recording(path)
    m = rec.measured
    lines = [m[m["stage"].str.startswith(f"line {k}:")] for k in (1, 2)]
    first_end = float((lines[0]["arrival_s"] + lines[0]["e2e_s"]).max())
    assert float(lines[1]["arrival_s"].min()) == pytest.approx(first_end + 30.0)
    assert any("placed where their start_times put them (one clock; 30 s between" in n
               for n in rec.notes)
    # a clock that does not run on (a reboot, another machine): back to back, said
    second["start_times"] = [t - 1e4 for t in doc["start_times"]]
    path.write_text(json.dumps(doc) + "\n" + json.dumps(second) + "\n")
    rec = read_recording(path)
    m = rec.measured
    lines = [m[m["stage"].str.startswith(f"line {k}:")] for k in (1, 2)]
    assert float(lines[1]["arrival_s"].min()) == pytest.approx(
        float((lines[0]["arrival_s"] + lines[0]["e2e_s"]).max()))
    assert any("each starting when the one before it ended" in n for n in rec.notes)


def test_vllm_bench_append_result_of_two_models_is_refused(tmp_path: Path) -> None:
    # the lines were simulated as one server of the first line's model, the second line's
    # model said nowhere
    docs = [json.loads(line) for line in (VLLM / "append.jsonl").read_text().splitlines()
            if line.strip()]
    docs[1]["model_id"] = "meta-llama/Llama-3.1-70B-Instruct"
    path = tmp_path / "two.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert (err.value.line, err.value.field) == (2, "model_id")
    assert "'meta-llama/Llama-3.1-70B-Instruct' differs from line 1's 'tiny'" in str(err.value)


def test_vllm_bench_capped_run_is_offered_when_due_not_when_a_slot_freed(tmp_path: Path) -> None:
    # --request-rate R --max-concurrency C: start_times are taken after the wait for a slot,
    # so replaying them held each request to the recorded server's slots (a faster simulated
    # server could not send sooner: its throughput agreed with the measured one by
    # construction); the request was due queue_times earlier
    doc = json.loads((VLLM / "concurrency4.json").read_text())
    doc["request_rate"] = 100.0
    start, queue = np.array(doc["start_times"]), np.array(doc["queue_times"])
    assert queue.max() > 0.4  # the fixture's requests waited for a slot
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.stages[0].load == "capped"
    due = start - queue
    order = rec.workload.request_id
    assert np.allclose(rec.workload.arrival_s, (due - due.min())[order], atol=1e-9)
    # the measurements keep their origin: the send
    assert np.allclose(rec.measured["arrival_s"], (start - due.min())[order], atol=1e-9)
    assert np.allclose(rec.records()["finished_s"],
                       (start - due.min() + np.array(doc["latencies"]))[order], atol=1e-9)
    # a file without queue_times says the replay is held to the recorded slots
    del doc["queue_times"]
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert np.allclose(rec.workload.arrival_s, rec.measured["arrival_s"])
    assert any("no queue_times" in n for n in rec.notes)
    # without start_times either: the redrawn due times, the sends emulated from the latencies
    del doc["start_times"]
    path.write_text(json.dumps(doc))
    rec = read_recording(path, seed=1)
    assert rec.stages[0].send_times == "redrawn"
    sent = rec.measured["arrival_s"].to_numpy()
    assert (sent >= rec.workload.arrival_s - 1e-12).all()
    assert (sent > rec.workload.arrival_s + 1e-6).any()  # some waited for a slot
    # an open or closed run is offered at its send times, as before
    closed = read_recording(VLLM / "concurrency4.json")
    assert np.allclose(closed.workload.arrival_s, closed.measured["arrival_s"])


def test_sglang_bench_serving_output_is_named_as_sglangs(tmp_path: Path) -> None:
    # python/sglang/bench_serving.py --output-file --output-details writes vLLM's lists and its
    # server_info; it was read as "vllm bench serve" (so named in every line) and its model,
    # server_info.model_path, not read
    doc = json.loads((VLLM / "rate8.json").read_text())
    line = {"backend": "sglang", "dataset_name": "random", "request_rate": 8.0,
            "max_concurrency": None, "server_info": {"model_path": "Qwen/Qwen2.5-7B-Instruct"},
            "total_output_tokens_retokenized": 320,
            **{k: doc[k] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors")}}
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(line) + "\n")
    rec = read_recording(path)
    assert rec.tool == "sglang.bench_serving"
    assert rec.config["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert any("(sglang.bench_serving saves neither it nor --disable-ignore-eos)" in n
               for n in rec.notes)
    assert read_recording(VLLM / "rate8.json").tool == "vllm bench serve"
    other = {**line, "server_info": {"model_path": "Qwen/Qwen2.5-72B-Instruct"}}
    path.write_text(json.dumps(line) + "\n" + json.dumps(other) + "\n")
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert (err.value.line, err.value.field) == (2, "server_info.model_path")


def test_vllm_bench_metadata_max_tokens_and_ignore_eos_are_the_recorded_setting(
        tmp_path: Path) -> None:
    doc = json.loads((VLLM / "rate8.json").read_text())
    doc.update(max_tokens="16", ignore_eos="true")  # vllm bench serve --metadata KEY=VALUE
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert (rec.workload.max_output_tokens == 16).all()
    assert rec.config["ignore_eos"] is True
    assert any("recorded setting" in n for n in rec.notes)


def test_vllm_bench_load_modes(tmp_path: Path) -> None:
    doc = json.loads((VLLM / "rate8.json").read_text())
    cases = [("inf", None, RecordedStage("inf req/s", "open", math.inf, None)),
             ("inf", 3, RecordedStage("concurrency 3", "closed", None, 3)),
             (2.5, 3, RecordedStage("2.5 req/s, concurrency 3", "capped", 2.5, 3)),
             (2.5, None, RecordedStage("2.5 req/s", "open", 2.5, None))]
    # every request due at 0 (rate8.json's spread sends at rate inf are a timed trace's)
    closed = json.loads((VLLM / "concurrency4.json").read_text())
    for rate, conc, stage in cases:
        path = tmp_path / "r.json"
        path.write_text(json.dumps({**(closed if rate == "inf" else doc),
                                    "request_rate": rate, "max_concurrency": conc}))
        assert read_recording(path).stages == (stage,)


def test_vllm_bench_timed_trace_with_max_concurrency_is_capped_not_closed(
        tmp_path: Path) -> None:
    # vllm bench serve --dataset-name timed_trace --max-concurrency 3 sends each request at
    # its trace timestamp (the rate is ignored, saved as "inf") and caps it at 3 in flight;
    # read as a closed loop of 3 users, the trace's gaps were dropped and the requests sent
    # back to back
    doc = json.loads((VLLM / "rate8.json").read_text())  # sent at spread times, none waited
    path = tmp_path / "timed.json"
    path.write_text(json.dumps({**doc, "request_rate": "inf", "max_concurrency": 3}))
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("timed trace, concurrency 3", "capped", None, 3),)
    due = np.array(doc["start_times"]) - np.array(doc["queue_times"])
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(due - due.min()))
    assert any("a timed trace's timestamps" in n for n in rec.notes)


def test_vllm_bench_ramp_up_is_an_open_loop_not_a_closed_one(tmp_path: Path) -> None:
    # --ramp-up-strategy writes request_rate "inf" (vLLM refuses a rate beside a ramp): with
    # --max-concurrency C it read as a closed loop of C users, replayed as fast as they go
    doc = json.loads((VLLM / "rate8.json").read_text())
    ramp = {"request_rate": "inf", "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
            "ramp_up_end_rps": 20}
    path = tmp_path / "r.json"
    for conc, stage in ((4, RecordedStage("ramp-up linear 1 to 20 req/s, concurrency 4",
                                          "capped", None, 4)),
                        (None, RecordedStage("ramp-up linear 1 to 20 req/s", "open", None,
                                             None))):
        path.write_text(json.dumps({**doc, **ramp, "max_concurrency": conc}))
        rec = read_recording(path)
        assert rec.stages == (stage,)
        assert rec.config["ramp_up_strategy"] == "linear"
        # its repr's stage line: the ramp's rates were recorded (it said 'rate not recorded')
        assert repr(rec).splitlines()[1] == (f"stage {stage.label}: open loop, no single rate "
                                             "recorded" + (", at most 4 in flight" if conc else ""))
    # without start_times (vLLM before 0.15) the sends are drawn again along the ramp, not
    # sent at 0 (it was refused: tests/unit/results/test_vllm_bench_0_10.py)
    del doc["start_times"]
    path.write_text(json.dumps({**doc, **ramp}))
    rec = read_recording(path)
    assert (np.diff(np.sort(rec.workload.arrival_s)) > 0).all()
    assert any("arrivals redrawn along its ramp-up linear from 1 to 20 req/s" in n
               for n in rec.notes)
    path.write_text(json.dumps({**doc, **ramp, "ramp_up_strategy": "cosine"}))
    with pytest.raises(TraceError, match="'cosine'"):
        read_recording(path)


# --------------------------------------------------------------------------- GuideLLM


def guidellm_metrics(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    bench = json.loads(path.read_text())["benchmarks"][0]
    return bench, bench["metrics"]


@pytest.mark.parametrize("version", list(GUIDELLM))
def test_guidellm_reads_to_its_own_summary(version: str) -> None:
    path = GUIDELLM[version] / "benchmarks.json"
    bench, metrics = guidellm_metrics(path)
    rec = read_recording(path)
    u = usable(rec)
    totals = metrics.get("request_totals") or bench["request_totals"]
    assert len(u) == totals["successful"]
    ttft_rows = u
    if version == "0.8.1":
        # GuideLLM 0.8 measures TTFT over the requests whose start-to-first-token span meets
        # the measurement window (benchmark/schemas/metrics.py, first_token_requests), not
        # the start-to-end span its request counts use: select them from the rows read
        t0 = min(r["request_start_time"] for k in ("successful", "errored", "incomplete")
                 for r in bench["requests"][k])
        w0 = bench["scheduler_metrics"]["measure_start_time"] - t0
        w1 = bench["scheduler_metrics"]["measure_end_time"] - t0
        m = rec.measured[rec.measured["status"] != "error"]
        ttft_rows = m[(m["arrival_s"] + m["ttft_s"] >= w0) & (m["arrival_s"] <= w1)]
    assert len(ttft_rows) == metrics["time_to_first_token_ms"]["successful"]["count"]
    assert close(ttft_rows["ttft_s"].mean() * 1e3,
                 metrics["time_to_first_token_ms"]["successful"]["mean"])
    assert int(u["output_tokens"].sum()) == metrics["output_token_count"]["successful"]["total_sum"]
    if version != "0.8.1":
        # 0.8.1's ITL distribution is over streaming iterations (count 120 for 9 requests),
        # not the per-request values the file lists
        assert close(u["itl_mean_s"].mean() * 1e3,
                     metrics["inter_token_latency_ms"]["successful"]["mean"])
    assert rec.stages == (RecordedStage("0: concurrent x4", "closed", None, 4),)
    named = (json.loads(path.read_text()).get("metadata") or {}).get("guidellm_version")
    assert rec.tool == (f"guidellm {named}" if named else "guidellm")


@pytest.mark.parametrize("version", ["0.4.0", "0.5.4", "0.6.1", "0.7.4", "0.8.1"])
def test_guidellm_warmup_and_cooldown_are_simulated_not_measured(version: str) -> None:
    path = GUIDELLM[version] / "benchmarks.json"
    bench, metrics = guidellm_metrics(path)
    listed = sum(len(bench["requests"][k]) for k in ("successful", "errored", "incomplete"))
    rec = read_recording(path)
    assert len(rec.workload) == listed  # every request sent loaded the server
    excluded = rec.counts["num_warmup"] + rec.counts["num_cooldown"]
    assert rec.counts["num_measured"] + excluded == listed
    # 0.5.4's and 0.7.4's runs here started their window before the first request ended and
    # ended it after the last one started (scheduler_metrics): GuideLLM measured every request
    assert (excluded > 0) == (version not in ("0.5.4", "0.7.4"))
    assert rec.counts["num_measured"] == metrics["request_totals"]["total"]
    statuses = set(rec.measured.loc[~rec.measured["usable"], "status"])
    assert statuses <= {"warmup", "cooldown"}
    assert not any("sample" in n for n in rec.notes)


@pytest.mark.parametrize("version", ["0.2.1", "0.3.1"])
def test_guidellm_0_2_and_0_3_say_their_warmup_requests_are_missing(version: str) -> None:
    rec = read_recording(GUIDELLM[version] / "benchmarks.json")
    assert any("4 of the 20 requests sent" in n for n in rec.notes)
    assert not any("a sample" in n for n in rec.notes)


@pytest.mark.parametrize("version", list(GUIDELLM))
def test_guidellm_yaml_reports_read_as_guidellm(version: str) -> None:
    path = GUIDELLM[version] / "constant.yaml"
    assert detect_recording_format(path) == "guidellm"
    rec = read_recording(path)
    assert rec.format == "guidellm"
    (stage,) = rec.stages
    assert stage.request_rate == 8.0 and stage.load in ("open", "capped")
    assert rec.counts["num_measured"] == 20


def test_guidellm_yaml_and_json_of_one_run_read_the_same() -> None:
    a = read_recording(GUIDELLM["0.8.1"] / "benchmarks.json")
    b = read_recording(GUIDELLM["0.8.1"] / "benchmarks.yaml")
    pd.testing.assert_frame_equal(a.measured, b.measured)
    assert a.stages == b.stages and a.config == b.config and a.counts == b.counts


def test_guidellm_records_max_tokens_from_the_request_body() -> None:
    rec = read_recording(GUIDELLM["0.8.1"] / "benchmarks.json")
    assert rec.config["max_tokens"] == 16 and rec.config["ignore_eos"] is True
    assert (rec.workload.max_output_tokens == 16).all()


@pytest.mark.parametrize("version", ["0.4.0", "0.5.4", "0.6.1", "0.7.4", "0.8.1"])
def test_guidellm_csv_is_refused_in_one_line(version: str) -> None:
    path = GUIDELLM[version] / "benchmarks.csv"
    assert detect_recording_format(path) == "guidellm"
    with pytest.raises(TraceError) as info:
        read_recording(path)
    text = str(info.value)
    assert "GuideLLM CSV report" in text and "no per-request rows" in text and "\n" not in text


def test_guidellm_cancelled_request_without_tokens_is_counted_not_fatal(tmp_path: Path) -> None:
    doc = json.loads((GUIDELLM["0.8.1"] / "benchmarks.json").read_text())
    reqs = doc["benchmarks"][0]["requests"]
    cancelled = reqs["successful"].pop()
    # GuideLLM 0.4+: a request cancelled before its response has null token counts
    cancelled.update(input_metrics=None, output_metrics=None, prompt_tokens=None,
                     output_tokens=None)
    cancelled["info"]["status"] = "cancelled"
    reqs["incomplete"] = [cancelled]
    partial = json.loads(json.dumps(reqs["successful"][-1]))
    reqs["successful"].pop()
    partial["output_metrics"]["text_tokens"] = 3
    partial["output_tokens"] = 3
    reqs["incomplete"].append(partial)
    made = doc["benchmarks"][0]["scheduler_metrics"]["requests_made"]  # as GuideLLM counts
    made.update(successful=made["successful"] - 2, incomplete=made["incomplete"] + 2)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts["num_incomplete"] == 2
    assert rec.counts["num_incomplete_not_simulated"] == 1
    assert len(rec.workload) == 19
    assert any("cancelled requests have no prompt length" in n for n in rec.notes)


def test_guidellm_sample_note_only_when_sampled(tmp_path: Path) -> None:
    doc = json.loads((GUIDELLM["0.8.1"] / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["requests"]["successful"] = bench["requests"]["successful"][:12]
    bench["config"]["sample_size"] = 12
    path = tmp_path / "sampled.json"
    path.write_text(json.dumps(doc))
    assert any("a sample of 12 of its 20" in n for n in read_recording(path).notes)


def test_guidellm_no_sample_note_when_requests_were_cancelled_before_starting(
        tmp_path: Path) -> None:
    """GuideLLM 0.4+'s requests_made counts requests cancelled before they started, which no
    list holds (accumulator.py: "cancelled before starting ... do not include"): that is no
    sample."""
    doc = json.loads((GUIDELLM["0.8.1"] / "benchmarks.json").read_text())
    made = doc["benchmarks"][0]["scheduler_metrics"]["requests_made"]
    made["incomplete"] = made.get("incomplete", 0) + 5
    made["total"] += 5
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert not any("sample" in n for n in read_recording(path).notes)


def test_guidellm_capped_stage_is_offered_when_due_not_when_a_slot_freed(
        tmp_path: Path) -> None:
    # a constant rate with a max_concurrency: a request's start came after its wait for a slot;
    # replaying the starts held each request to the recorded server's slots. Offered at its
    # targeted start now; its TTFT and E2E keep the start as origin
    doc = json.loads((GUIDELLM["0.8.1"] / "benchmarks.json").read_text())
    bench = doc["benchmarks"][0]
    bench["config"]["strategy"] = {"type_": "constant", "rate": 100.0, "max_concurrency": 4}
    reqs = [r for kind in ("successful", "errored", "incomplete")
            for r in bench["requests"].get(kind) or []]
    starts = np.array([r["info"]["timings"]["request_start"] for r in reqs])
    due = starts.min() + np.arange(len(reqs)) / 100.0
    due = np.minimum(due, starts)
    for r, t in zip(reqs, due, strict=True):
        r["info"]["timings"]["targeted_start"] = t
    path = tmp_path / "capped.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.stages[0].load == "capped"
    order = rec.workload.request_id
    assert np.allclose(rec.workload.arrival_s, (due - due.min())[order], atol=1e-9)
    assert np.allclose(rec.measured["arrival_s"], (starts - due.min())[order], atol=1e-9)
    # GuideLLM 0.2-0.3 name it scheduler_info.targeted_start_time
    old = json.loads((GUIDELLM["0.3.1"] / "benchmarks.json").read_text())
    old["benchmarks"][0]["args"]["strategy"] = {"type_": "constant", "rate": 100.0,
                                                "max_concurrency": 4}
    for r in old["benchmarks"][0]["requests"]["successful"]:
        r["scheduler_info"]["targeted_start_time"] = r["start_time"] - 0.5
    path.write_text(json.dumps(old))
    rec = read_recording(path)
    assert np.allclose(rec.measured["arrival_s"] - rec.workload.arrival_s, 0.5)
    # without it, each request is offered at its start, and a note says so
    for r in old["benchmarks"][0]["requests"]["successful"]:
        del r["scheduler_info"]["targeted_start_time"]
    path.write_text(json.dumps(old))
    rec = read_recording(path)
    assert np.allclose(rec.measured["arrival_s"], rec.workload.arrival_s)
    assert any("have no targeted start time" in n for n in rec.notes)
    # a cap no stage reaches (GuideLLM 0.8's default 10240 over 12 requests) made no request
    # wait: the start is when the server got it (the client's own lag included)
    rec = read_recording(GUIDELLM["0.8.1"] / "cancelled.json")
    assert rec.stages[0].max_concurrency == 10240
    assert np.allclose(rec.measured["arrival_s"], rec.workload.arrival_s)


@pytest.mark.parametrize(("strategy", "stage"), [
    ({"type_": "synchronous"}, RecordedStage("0: synchronous", "closed", None, 1)),
    ({"type_": "throughput", "max_concurrency": 16},
     RecordedStage("0: throughput x16", "closed", None, 16)),
    # a rate with no max_concurrency recorded: GuideLLM (0.8 here) held it to its default cap
    ({"type_": "poisson", "rate": 2.5},
     RecordedStage("0: poisson 2.5 req/s x10240", "capped", 2.5, 10240)),
    ({"type_": "constant", "rate": 3},
     RecordedStage("0: constant 3 req/s x10240", "capped", 3.0, 10240)),
])
def test_guidellm_load_mode_per_strategy(tmp_path: Path, strategy: dict[str, Any],
                                         stage: RecordedStage) -> None:
    doc = json.loads((GUIDELLM["0.8.1"] / "benchmarks.json").read_text())
    doc["benchmarks"][0]["config"]["strategy"] = strategy
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert read_recording(path).stages == (stage,)


# --------------------------------------------------------------------------- AIPerf


@pytest.mark.parametrize(("name", "stage"), [
    ("concurrency4", RecordedStage("concurrency 4", "closed", None, 4)),
    ("rate8", RecordedStage("8 req/s", "open", 8.0, None)),
    # --request-rate 8 --concurrency 2 (Poisson): due when AIPerf issued each request (its
    # records' credit_issued_ns), each sent at a tick that finds a slot free
    ("capped8c2", RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2,
                                send_times="issued", tick_pattern="poisson")),
])
def test_aiperf_reads_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    path = AIPERF / f"{name}.jsonl"
    summary = json.loads((AIPERF / f"{name}_aiperf.json").read_text())
    assert detect_recording_format(path) == "aiperf"
    rec = read_recording(path)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"]
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert close(u["itl_mean_s"].mean() * 1e3, summary["inter_token_latency"]["avg"])
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert int(u["output_tokens"].sum()) == summary["total_usage_completion_tokens"]["avg"]
    assert rec.stages == (stage,)
    assert rec.counts["num_warmup"] == 2 and len(rec.workload) == 22
    assert rec.tool == f"aiperf {summary['aiperf_version']}"
    assert rec.config["ignore_eos"] is True and rec.config["model"] == "tiny"


AIPERF_0_12 = FIXTURES / "aiperf-0.12.0"
AIPERF_0_10 = FIXTURES / "aiperf-0.10.0"


@pytest.mark.parametrize(("name", "stage"), [
    ("concurrency4", RecordedStage("concurrency 4", "closed", None, 4)),
    ("rate8", RecordedStage("8 req/s", "open", 8.0, None)),
    ("capped8c2", RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2,
                                send_times="issued", tick_pattern="poisson")),
])
def test_aiperf_0_12_reads_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    """AIPerf 0.12.0's real run: no usage asked of the server (0.12.0 asks only with
    --use-server-token-count), so output_sequence_length is its tokenizer's count of the text,
    here above the max_tokens 16 the server stopped at (ignore_eos): read as 16, and said.
    It was refused before ("field 'max_tokens': 16 is below output_tokens 22")."""
    path = AIPERF_0_12 / f"{name}.jsonl"
    summary = json.loads((AIPERF_0_12 / f"{name}_aiperf.json").read_text())
    assert summary["aiperf_version"] == "0.12.0" and "usage_completion_tokens" not in summary
    rec = read_recording(path)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"]
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert rec.stages == (stage,)
    assert rec.counts["num_warmup"] == 2 and len(rec.workload) == 22
    assert rec.tool == "aiperf 0.12.0"
    own = [json.loads(line)["metrics"]["output_sequence_length"]["value"]
           for line in path.read_text().splitlines()]
    assert sum(own[2:]) == summary["output_sequence_length"]["sum"]  # its warm-up left out
    # rows in send order; each AIPerf count capped at the 16 the server made at most
    assert sorted(rec.workload.output_tokens.tolist()) == sorted(min(o, 16) for o in own)
    over = sum(o > 16 for o in own)
    assert over > 0 and any(n.startswith("output tokens: of 22 requests AIPerf's own count")
                            and f"above the request's max_tokens for {over} (" in n
                            for n in rec.notes)


@pytest.mark.parametrize(("name", "stage", "warmup"), [
    ("concurrency4", RecordedStage("concurrency 4", "closed", None, 4), True),
    ("rate8", RecordedStage("8 req/s", "open", 8.0, None), True),
    ("capped8c2", RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2,
                                send_times="issued", tick_pattern="poisson"), True),
    ("capped6c3_constant", RecordedStage("6 req/s, concurrency 3", "capped", 6.0, 3,
                                         tick_pattern="constant"), False),
])
def test_aiperf_0_10_reads_to_its_own_summary_and_says_its_warmup_is_missing(
        name: str, stage: RecordedStage, warmup: bool) -> None:
    """AIPerf 0.10.0's real runs: its records hold the profiling phase only (the summary's
    2-request warm-up phase is in no line), said; the rest as 0.12's."""
    path = AIPERF_0_10 / f"{name}.jsonl"
    summary = json.loads((AIPERF_0_10 / f"{name}_aiperf.json").read_text())
    rec = read_recording(path)
    u = usable(rec)
    assert len(u) == len(rec.workload) == summary["request_count"]["avg"] == 20
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert rec.stages == (stage,) and rec.tool == "aiperf 0.10.0"
    assert rec.counts["num_warmup"] == 0
    said = [n for n in rec.notes if n.startswith("the summary's warm-up phase")]
    assert said == ([
        "the summary's warm-up phase (2 requests, input_config.phases) is not in the records "
        "(AIPerf 0.10 exports the profiling phase's only): not simulated; the profiling phase "
        "started after they had all returned (not seamless), so the profiled requests ran "
        "without them"] if warmup else [])


def test_aiperf_0_10_own_counts_below_max_tokens_under_ignore_eos_read_as_it(
        tmp_path: Path) -> None:
    """AIPerf 0.10.0's rate8 run (ignore_eos, max_tokens 16 in every body): its tokenizer
    counted 15 for one answer the server made 16 tokens of: read as 16, said. Without
    ignore_eos a count below max_tokens is the answer's own length and is kept."""
    path = AIPERF_0_10 / "rate8.jsonl"
    own = [json.loads(line)["metrics"]["output_sequence_length"]["value"]
           for line in path.read_text().splitlines()]
    assert min(own) == 15
    rec = read_recording(path)
    assert (rec.workload.output_tokens == 16).all()
    (said,) = [n for n in rec.notes if "AIPerf's own count" in n]
    assert "below it for 1 completed ones (by up to 1), whose ignore_eos" in said
    records = tmp_path / "rate8.jsonl"
    records.write_text(path.read_text())
    summary = json.loads((AIPERF_0_10 / "rate8_aiperf.json").read_text())
    summary["input_config"]["endpoint"]["extra"]["ignore_eos"] = False
    (tmp_path / "rate8_aiperf.json").write_text(json.dumps(summary))
    kept = read_recording(records)
    assert sorted(kept.workload.output_tokens.tolist()) == sorted(min(o, 16) for o in own)


def test_aiperf_missing_seamless_warmup_says_it_overlapped(tmp_path: Path) -> None:
    records = tmp_path / "c4.jsonl"
    records.write_text((AIPERF_0_10 / "concurrency4.jsonl").read_text())
    summary = json.loads((AIPERF_0_10 / "concurrency4_aiperf.json").read_text())
    summary["input_config"]["phases"][1]["seamless"] = True
    (tmp_path / "c4_aiperf.json").write_text(json.dumps(summary))
    (said,) = [n for n in read_recording(records).notes if "warm-up phase" in n]
    assert said.endswith("the profiling phase started as it stopped sending (seamless): its "
                         "last requests ran beside the first profiled ones, which the "
                         "simulation does not show")


def test_aiperf_server_counts_above_max_tokens_are_still_refused(tmp_path: Path) -> None:
    """Only AIPerf's own (tokenizer) counts are capped: a server's usage count above the
    request's max_tokens is a file that contradicts itself, refused naming the row."""
    lines = (AIPERF / "capped6c3_constant.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["metrics"]["usage_completion_tokens"]["value"] = 17
    records = tmp_path / "capped.jsonl"
    records.write_text("\n".join([json.dumps(rec), *lines[1:]]) + "\n")
    (tmp_path / "capped_aiperf.json").write_text(
        (AIPERF / "capped6c3_constant_aiperf.json").read_text())
    with pytest.raises(TraceError, match="16 is below output_tokens 17"):
        read_recording(records)


def test_aiperf_run_of_several_models_is_refused(tmp_path: Path) -> None:
    # --model a,b: each request went to one of them, the records do not say which; the run was
    # simulated whole as the first model, the second said nowhere
    records = tmp_path / "rate8.jsonl"
    records.write_text((AIPERF / "rate8.jsonl").read_text())
    summary = json.loads((AIPERF / "rate8_aiperf.json").read_text())
    summary["input_config"]["models"]["items"].append({"name": "other"})
    (tmp_path / "rate8_aiperf.json").write_text(json.dumps(summary))
    with pytest.raises(TraceError) as err:
        read_recording(records)
    assert err.value.field == "input_config.models.items"
    assert "2 models (other, tiny)" in str(err.value)
    assert err.value.path == str(tmp_path / "rate8_aiperf.json")


# --------------------------------------------------------------------------- inference-perf


def test_inference_perf_reads_to_its_own_summary() -> None:
    path = INFERENCE_PERF / "per_request_lifecycle_metrics.json"
    summary = json.loads((INFERENCE_PERF / "summary_lifecycle_metrics.json").read_text())
    assert detect_recording_format(path) == "inference-perf"
    rec = read_recording(path)
    u = usable(rec)
    ok = summary["successes"]
    assert len(u) == ok["count"]
    assert close(u["ttft_s"].mean(), ok["latency"]["time_to_first_token"]["mean"])
    assert close(u["e2e_s"].mean(), ok["latency"]["request_latency"]["mean"])
    assert int(u["output_tokens"].sum()) == ok["output_tokens"]["total"]
    assert rec.config == {"model": "tiny", "max_tokens": 16, "ignore_eos": True}
    for k, stage in enumerate(rec.stages):
        own = json.loads((INFERENCE_PERF / f"stage_{k}_lifecycle_metrics.json").read_text())
        assert stage == RecordedStage(f"stage {k}: {own['load_summary']['requested_rate']:g} "
                                      "req/s", "open", own["load_summary"]["requested_rate"])
        rows = rec.measured[rec.measured["stage"] == stage.label]
        assert len(rows) == own["successes"]["count"]
        assert close(rows["ttft_s"].mean(), own["successes"]["latency"]["time_to_first_token"]
                     ["mean"])


def test_inference_perf_concurrent_load_type_is_a_capped_rate_not_a_closed_loop() -> None:
    # a real run of load.type concurrent (stages of 10 requests at concurrency 2, then 4):
    # inference-perf 0.7.0 sends a stage's num_requests over one second (requested_rate =
    # num_requests), each when a slot is free; it was replayed as a closed loop, every request
    # at once, so a faster simulated server sent them as fast as it answered (the stages'
    # simulated throughput 13-19 times the measured on the H100 preset)
    path = INFERENCE_PERF / "concurrent" / "per_request_lifecycle_metrics.json"
    rec = read_recording(path)
    own = [json.loads((path.parent / f"stage_{k}_lifecycle_metrics.json").read_text())
           ["load_summary"] for k in (0, 1)]
    assert [(s.label, s.load, s.request_rate, s.max_concurrency) for s in rec.stages] == [
        (f"stage {k}: concurrency {o['concurrency']}", "capped", o["requested_rate"],
         o["concurrency"]) for k, o in enumerate(own)]
    # the measured TTFT's origin stays each request's send
    starts = np.array([r["start_time"] for r in json.loads(path.read_text())])
    assert np.allclose(np.sort(rec.measured["arrival_s"].to_numpy()),
                       np.sort(starts - starts.min()))
    for stage in rec.stages:
        rows = rec.measured["stage"] == stage.label
        due = rec.workload.arrival_s[rows.to_numpy()]
        sent = rec.measured.loc[rows, "arrival_s"].to_numpy()
        # due over num_requests / requested_rate seconds from the stage's first send, never
        # after the request was sent
        assert due.min() == pytest.approx(sent.min())
        assert due.max() - due.min() <= rows.sum() / (stage.request_rate or 1) + 1e-9
        if stage.send_times == "redrawn":  # the slots bound: drawn as inference-perf draws
            assert any(n.startswith(f"{stage.label}: inference-perf's concurrent load type")
                       for n in rec.notes)
    plans = stage_plans(rec) or []
    assert [(p.loop.num_users, p.loop.not_before_arrival) for p in plans if p.loop] == [
        (2, True), (4, True)]


def test_inference_perf_concurrent_stage_without_a_rate_is_a_closed_loop(
        tmp_path: Path) -> None:
    for f in INFERENCE_PERF.glob("*.json"):
        (tmp_path / f.name).write_text(f.read_text())
    stage0 = tmp_path / "stage_0_lifecycle_metrics.json"
    doc = json.loads(stage0.read_text())
    doc["load_summary"].update(concurrency=2)
    del doc["load_summary"]["requested_rate"]
    stage0.write_text(json.dumps(doc))
    rec = read_recording(tmp_path / "per_request_lifecycle_metrics.json")
    assert rec.stages == (RecordedStage("stage 0: concurrency 2", "closed", None, 2),
                          RecordedStage("stage 1: 4 req/s", "open", 4.0, None))
    doc["load_summary"]["concurrency"] = 0
    stage0.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(tmp_path / "per_request_lifecycle_metrics.json")
    assert err.value.field == "load_summary.concurrency"


# --------------------------------------------------------------------------- llm-d-benchmark


def test_llmd_benchmark_report_is_named_and_refused_in_one_line() -> None:
    path = HANDMADE / "llm-d-benchmark-report-v0.2-handmade.yaml"
    assert detect_recording_format(path) == "llmd-report"
    assert "llmd-report" in RECORDING_FORMATS
    with pytest.raises(TraceError) as info:
        read_recording(path)
    text = str(info.value)
    assert "llm-d-benchmark report (schema 0.2)" in text
    assert "inference-perf 0.3.0" in text and "per_request_lifecycle_metrics.json" in text
    assert "\n" not in text


# --------------------------------------------------------------------------- docs


def test_the_documented_load_tool_commands_are_the_ones_the_fixture_script_ran() -> None:
    """docs/recordings.md section 1a shows each tool's command line: every flag it uses is one
    scripts/make_recording_fixtures.sh passes to that tool (which made the fixtures above)."""
    import re

    root = FIXTURES.parents[2]
    doc = (root / "docs" / "recordings.md").read_text()
    script = (root / "scripts" / "make_recording_fixtures.sh").read_text()
    section = doc[doc.index("## 1a."):doc.index("## 2. Calibrate")]
    # unlabelled blocks only: a ```console block (a kvbudget command, run by tests/docs) paired
    # its closing fence with the next block's opening, reading the prose between as a block
    blocks = [b for lang, b in re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
              if not lang]
    tools = {"vllm": "run_vllm()", "guidellm": "run_guidellm()", "aiperf": "run_aiperf()",
             "load:": "run_inference_perf()", "evalscope": "run_evalscope()",
             "genai-bench": "run_genai_bench()", "python": "run_sglang()",
             "DYN_REQUEST_TRACE=1": "run_dynamo()"}
    seen = set()
    for block in blocks:
        tool = block.split()[0]
        assert tool in tools, block
        seen.add(tool)
        body = script[script.index(tools[tool]):]
        body = body[:body.index("\n}\n")]
        if tool == "load:":
            # ip_config writes the config (its api, server, data... sections, and the run's load
            # section from printf'd lines: "load:" "  type: constant")
            shared = script[script.index("IP_RANDOM_DATA='"):]
            body += shared[:shared.index("\n}\n")]
            for key in re.findall(r"^(\w+):", block, flags=re.M):
                assert re.search(rf"(\n|\"|')\s*{key}:", body), key
            continue
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]*", block):
            assert flag in body, (tool, flag)
    assert seen == set(tools)


def test_an_append_result_file_with_long_lines_is_detected(tmp_path: Path) -> None:
    """A real run's line is far longer than the 64 KiB detection reads (1,000 prompts and their
    generated texts): the first line is read whole."""
    lines = (VLLM / "append.jsonl").read_text().splitlines()
    docs = [json.loads(line) for line in lines if line.strip()]
    for doc in docs:
        doc["generated_texts"] = ["x" * 8000] * len(doc["generated_texts"])
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs))
    assert len(path.read_text().splitlines()[0]) > 1 << 17
    assert detect_recording_format(path) == "vllm-bench"
    assert read_recording(path).counts["num_stages"] == 2


@pytest.mark.parametrize(("name", "in_flight", "created"), [
    ("guidellm-0.5.4/benchmarks.json", 1, 20),
    ("guidellm-0.8.1/replay_trace.json", 1, 10),
    ("guidellm-0.8.1/benchmarks.json", 0, 20),
])
def test_guidellm_requests_in_flight_when_the_report_was_written_are_said(
        name: str, in_flight: int, created: int) -> None:
    """GuideLLM 0.5.4 and 0.8.1 wrote these real reports with a request still in flight
    (``scheduler_state.processing_requests``): it loaded the server and is in no list, so it
    is not simulated, and said."""
    path = FIXTURES / name
    bench = json.loads(path.read_text())["benchmarks"][0]
    assert bench["scheduler_state"]["processing_requests"] == in_flight
    rec = read_recording(path)
    assert len(rec.workload) == created - in_flight
    said = [n for n in rec.notes if "still in flight" in n]
    assert len(said) == (1 if in_flight else 0)
    if in_flight:
        assert (f"{in_flight} request(s) of the {created} it created still in flight "
                f"(scheduler_state.processing_requests {in_flight}; {created - in_flight} "
                "listed)") in said[0]


def test_guidellm_no_in_flight_note_when_nothing_was_in_flight(tmp_path: Path) -> None:
    doc = json.loads((GUIDELLM["0.5.4"] / "benchmarks.json").read_text())
    doc["benchmarks"][0]["scheduler_state"]["processing_requests"] = 0
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    assert not any("still in flight" in n for n in read_recording(path).notes)


def test_guidellm_requests_cancelled_at_the_end_of_a_run_are_counted() -> None:
    """A real run cut short by ``max_duration``: the requests in flight were cancelled
    (``incomplete``, some with no output tokens): counted, not measured, never fatal."""
    path = GUIDELLM["0.8.1"] / "cancelled.json"
    bench, metrics = guidellm_metrics(path)
    incomplete = len(bench["requests"]["incomplete"])
    assert incomplete > 0
    rec = read_recording(path)
    assert rec.counts["num_incomplete"] == incomplete
    assert rec.counts["num_measured"] == metrics["request_totals"]["successful"]
    no_output = sum(1 for r in bench["requests"]["incomplete"] if not r["output_tokens"])
    assert rec.counts.get("num_dropped_0_output_tokens", 0) == no_output
    assert set(rec.measured.loc[~rec.measured["usable"], "status"]) <= {"incomplete"}


def test_aiperf_cancelled_and_failed_records_are_counted_not_measured(tmp_path: Path) -> None:
    src = AIPERF / "concurrency4.jsonl"
    recs = [json.loads(line) for line in src.read_text().splitlines()]
    recs[5]["metadata"]["was_cancelled"] = True
    recs[5]["error"] = {"code": 499, "type": "RequestCancellationError", "message": "cancelled"}
    recs[6]["error"] = {"code": 500, "type": "HTTPError", "message": "boom"}
    recs[6]["metrics"] = {"error_isl": {"value": 32, "unit": "tokens"}}
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rec = read_recording(path)
    assert rec.counts["num_cancelled"] == 1
    assert rec.counts["num_measured"] == 18
    # the failed request generated nothing: dropped as the trace loader drops it, and counted
    # a failed request (it was sent and failed), not a row of 0 output tokens
    assert rec.counts["num_dropped_failed_request"] == 1
    assert "num_dropped_0_output_tokens" not in rec.counts
    # counted failed though not simulated, as AIPerf's error_request_count counts it
    assert rec.counts["num_failed"] == 1
    assert len(rec.workload) == 21
    assert any("no profile_export_aiperf.json" in n for n in rec.notes)


def _aiperf_capped(tmp_path: Path, pattern: str, concurrency: int) -> Any:
    """The rate8 fixture's records under a summary whose profiling phase had ``--concurrency``
    (and the arrival ``pattern``), without ``credit_issued_ns`` (as AIPerf wrote them before
    its records carried it: the due times are then reconstructed)."""
    recs = [json.loads(line) for line in (AIPERF / "rate8.jsonl").read_text().splitlines()
            if line.strip()]
    for r in recs:
        del r["metadata"]["credit_issued_ns"]
    (tmp_path / "capped.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = json.loads((AIPERF / "rate8_aiperf.json").read_text())
    for phase in summary["input_config"]["phases"]:  # the warm-up at the same load, as AIPerf
        phase.update(concurrency=concurrency, type=pattern)  # builds it given no load of its own
    (tmp_path / "capped_aiperf.json").write_text(json.dumps(summary))
    return read_recording(tmp_path / "capped.jsonl")


def test_aiperf_capped_run_is_offered_at_its_schedule_not_its_delayed_sends(
        tmp_path: Path) -> None:
    # a capped run whose slots were all busy: AIPerf skipped the schedule's ticks and sent
    # after the recorded server freed a slot; offered at those sends, a faster simulated server
    # could not send sooner (the recorded throughput leaked into the simulated one)
    rec = _aiperf_capped(tmp_path, "constant", 1)
    sent = rec.measured["arrival_s"].to_numpy()
    profiling = (rec.measured["status"] == "completed").to_numpy()
    due = rec.workload.arrival_s[profiling]
    first = sent[profiling].min()
    assert np.allclose(np.sort(due), first + np.arange(profiling.sum()) / 8.0)
    assert not np.allclose(np.sort(due), np.sort(sent[profiling]))
    assert rec.stages[0].send_times == "scheduled"
    assert any("offered at the ticks of the 8 req/s schedule (constant" in n for n in rec.notes)
    # the measured TTFT's origin stays the send
    starts = np.array([json.loads(line)["metadata"]["request_start_ns"] for line in
                       (AIPERF / "rate8.jsonl").read_text().splitlines() if line.strip()])
    assert np.allclose(np.sort(sent), np.sort(starts - starts.min()) * 1e-9)
    poisson = _aiperf_capped(tmp_path, "poisson", 1)
    assert poisson.stages[0].send_times == "redrawn"
    assert any("drawn again with seed 0" in n for n in poisson.notes)


def test_aiperf_capped_run_that_never_filled_its_slots_keeps_its_sends(tmp_path: Path) -> None:
    # with a slot always free AIPerf skipped no tick: the sends are the schedule
    rec = _aiperf_capped(tmp_path, "poisson", 50)
    assert rec.stages[0].send_times == "recorded"
    assert np.allclose(rec.workload.arrival_s, np.sort(rec.measured["arrival_s"].to_numpy()))


def test_vllm_bench_append_result_runs_that_overlap_are_said_to_overlap(tmp_path: Path) -> None:
    # two clients appending to one file, the second started 1 s into the first: the note said
    # 'their start_times do not say how far apart they ran' and put them back to back
    doc = json.loads((VLLM / "rate8.json").read_text())
    second = {**doc, "start_times": [t + 1.0 for t in doc["start_times"]]}
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps(doc) + "\n" + json.dumps(second) + "\n")
    rec = read_recording(path)
    m = rec.measured
    lines = [m[m["stage"].str.startswith(f"line {k}:")] for k in (1, 2)]
    assert float(lines[1]["arrival_s"].min()) == pytest.approx(
        float(lines[0]["arrival_s"].min()) + 1.0)
    note = next(n for n in rec.notes if "runs appended" in n)
    assert "they overlapped: run 2's first request" in note
    assert "do not say how far apart" not in note
    assert "they share the simulated server as they shared the real one" in note


def test_aiperf_capped_run_is_replayed_at_its_ticks_as_aiperf_sends() -> None:
    # a real capped AIPerf run (--request-rate 8 --concurrency 2): AIPerf sends only at its
    # rate's ticks and skips a tick that finds both slots busy; the replay sent a waiting
    # request the instant a slot freed and then its backlog at once (a FIFO wait), offering
    # more than AIPerf would have to a server as slow as the recorded one
    rec = read_recording(AIPERF / "capped8c2.jsonl")
    (plan,) = stage_plans(rec) or []
    assert plan.loop is not None
    assert (plan.loop.num_users, plan.loop.not_before_arrival) == (2, True)
    assert (plan.loop.tick_rate_per_s, plan.loop.tick_pattern) == (8.0, "poisson")
    assert "each sent at a tick of its poisson schedule (a tick that finds every slot busy is " \
        "skipped, as AIPerf does)" in replay_mode(rec.stages[0])
    assert any("when it issued each request (metadata.credit_issued_ns" in n
               for n in rec.notes)


def test_aiperf_capped_constant_run_simulated_sends_only_at_its_ticks() -> None:
    # a real --request-rate 6 --request-rate-mode constant --concurrency 3 run, simulated on a
    # server far slower than the recorded one: AIPerf sends each request at a tick, one a
    # tick; the FIFO wait sent them whenever a slot freed, off its ticks. The ticks are the
    # ones AIPerf took (its records' credit_issued_ns), then its 1 / 6 s grid past the last
    rec = read_recording(AIPERF / "capped6c3_constant.jsonl")
    assert rec.stages == (RecordedStage("6 req/s, concurrency 3", "capped", 6.0, 3,
                                        send_times="issued", tick_pattern="constant"),)
    assert rec.config["max_tokens"] == 16
    issued = np.sort(rec.workload.arrival_s)
    slow = LinearCostModel(intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                           per_context_token_s=0.0)  # 16 steps of 50 ms: 0.8 s a request
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=100, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=2048))
    run = simulate_recording(rec, config, cost_model=slow, frontend_overhead_s=0.0)
    records = run.records.sort_values("arrival_s")
    sends = records["arrival_s"].to_numpy()
    later = (sends - issued[-1]) * 6.0
    at_issue = np.isclose(sends[:, None], issued[None, :], atol=1e-9).any(axis=1)
    on_grid = (later > 0.5) & np.isclose(later, np.round(later), atol=1e-6)
    assert (at_issue | on_grid).all()  # every send at a tick AIPerf took, or on its grid after
    # one send a tick: no recorded tick taken twice, no grid tick taken twice
    taken = np.searchsorted(issued, sends[at_issue] - 1e-9)
    assert np.all(np.bincount(taken, minlength=len(issued))
                  <= np.bincount(np.searchsorted(issued, issued - 1e-9), minlength=len(issued)))
    assert len(np.unique(np.round(later[on_grid]))) == on_grid.sum()
    # the slots bound: the slow server needed ticks past the recorded ones, and no send came
    # before a slot was free
    assert on_grid.any()
    ends = np.sort(records["finished_s"].to_numpy())
    in_flight = np.searchsorted(sends, sends, side="right") - np.searchsorted(ends, sends,
                                                                               side="right")
    assert in_flight.max() <= 3
