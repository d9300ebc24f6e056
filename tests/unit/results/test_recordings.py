"""Recorded runs as input (``kvbudget.results.recordings``): every format reads the same six
requests to the same rows; bad files give one line naming the file, row and field (exit 2 from
the command line); noisy recordings are counted, not fatal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import (
    MEASURED_COLUMNS,
    Recording,
    detect_recording_format,
    read_recording,
)
from kvbudget.results.records import RECORD_COLUMNS
from kvbudget.results.run_result import RunResult
from kvbudget.workloads.errors import TraceError
from tests.conftest import SHARED

# six requests: arrival, prompt, output, TTFT, E2E (seconds from arrival)
ARRIVAL = [0.0, 0.25, 0.5, 1.0, 1.5, 2.25]
PROMPT = [100, 2000, 30, 512, 64, 900]
OUTPUT = [10, 50, 1, 200, 33, 7]
TTFT = [0.05, 0.3, 0.02, 0.08, 0.04, 0.2]
E2E = [0.5, 2.5, 0.02, 6.0, 1.0, 0.45]


def check_rows(rec: Recording) -> None:
    m = rec.measured
    assert list(m.columns) == list(MEASURED_COLUMNS)
    assert len(rec) == 6 and rec.num_usable == 6
    np.testing.assert_allclose(m["arrival_s"], ARRIVAL, atol=1e-6)
    np.testing.assert_array_equal(m["prompt_tokens"], PROMPT)
    np.testing.assert_array_equal(m["output_tokens"], OUTPUT)
    np.testing.assert_allclose(m["ttft_s"], TTFT, atol=1e-6)
    np.testing.assert_allclose(m["e2e_s"], E2E, atol=1e-6)
    tpot = [(e - t) / (o - 1) if o > 1 else np.nan for e, t, o in zip(E2E, TTFT, OUTPUT, strict=True)]
    np.testing.assert_allclose(m["tpot_s"], tpot, atol=1e-6)
    np.testing.assert_array_equal(rec.workload.output_tokens, OUTPUT)
    records = rec.records()
    assert list(records.columns) == list(RECORD_COLUMNS)
    assert (records["status"] == "completed").all()


def generic_frame() -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": ARRIVAL, "prompt_tokens": PROMPT, "output_tokens": OUTPUT,
                         "ttft_s": TTFT, "e2e_s": E2E})


def test_generic_records_csv_jsonl_and_parquet(tmp_path: Path) -> None:
    df = generic_frame()
    csv = tmp_path / "r.csv"
    df.to_csv(csv, index=False)
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in df.to_dict(orient="records")))
    parquet = tmp_path / "r.parquet"
    df.to_parquet(parquet)
    for path in (csv, jsonl, parquet):
        assert detect_recording_format(path) == "records"
        rec = read_recording(path)
        assert rec.format == "records"
        check_rows(rec)


def test_generic_records_with_a_column_mapping_ids_out_of_order_and_trace_columns(
        tmp_path: Path) -> None:
    df = generic_frame().rename(columns={"ttft_s": "TTFT", "e2e_s": "latency"})
    df["id"] = [10, 11, 12, 13, 14, 15]
    df["tier"] = ["interactive", "batch"] * 3
    df["max_output_tokens"] = [o + 5 for o in OUTPUT]
    df["stage"] = ["low"] * 3 + ["high"] * 3
    path = tmp_path / "r.csv"
    df.iloc[::-1].to_csv(path, index=False)  # written newest first: read back in arrival order
    rec = read_recording(path, columns={"ttft_s": "TTFT", "e2e_s": "latency"})
    check_rows(rec)
    assert rec.measured["request_id"].tolist() == [10, 11, 12, 13, 14, 15]
    assert rec.measured["tier"].tolist() == ["interactive", "batch"] * 3
    assert rec.measured["stage"].tolist() == ["low"] * 3 + ["high"] * 3
    np.testing.assert_array_equal(rec.workload.max_output_tokens, [o + 5 for o in OUTPUT])


def test_the_unread_columns_note_does_not_name_the_measurements_read(tmp_path: Path) -> None:
    # the trace loader's note listed ttft_s and e2e_s (the columns validate compares) as not
    # read; only the columns nothing reads are named now
    df = generic_frame().rename(columns={"e2e_s": "latency"})
    df["queue_s"] = 0.0
    df["status"] = "ok"
    path = tmp_path / "r.csv"
    df.to_csv(path, index=False)
    rec = read_recording(path, columns={"e2e_s": "latency"})
    unread = [n for n in rec.notes if n.startswith("columns not read")]
    assert len(unread) == 1 and unread[0].startswith("columns not read: queue_s (the generic")
    wide = generic_frame().assign(**{f"x{i}": 0 for i in range(9)})
    wide.to_csv(path, index=False)
    unread = [n for n in read_recording(path).notes if n.startswith("columns not read")]
    assert unread[0].startswith("columns not read: x0, x1, x2, x3, x4, x5 (9 in all) (the")
    generic_frame().to_csv(path, index=False)
    assert not [n for n in read_recording(path).notes if n.startswith("columns not read")]


def test_an_http_status_written_as_a_float_is_that_status(tmp_path: Path) -> None:
    # pandas writes an integer column with a missing value as floats: 200.0 was "not
    # completed", and a file of them refused as having no measured request
    df = generic_frame()
    df["status"] = [200.0, 200.0, 503.0, 200.0, None, 200.0]
    path = tmp_path / "r.csv"
    df.to_csv(path, index=False)
    assert "200.0" in path.read_text()
    rec = read_recording(path)
    assert rec.measured["status"].tolist() == ["completed"] * 2 + ["503"] + ["completed"] * 3
    assert rec.counts["num_measured"] == 5


def test_an_http_status_given_as_a_json_integer_is_that_status(tmp_path: Path) -> None:
    # a records JSON line with "status": 200 (a number) was refused: "expected a string"
    df = generic_frame()
    statuses: list[Any] = [200, 200, 503, "timeout", None, "200"]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps({**r, "status": s}) + "\n"
                            for r, s in zip(df.to_dict(orient="records"), statuses, strict=True)))
    rec = read_recording(path, format="records")
    assert rec.measured["status"].tolist() == ["completed"] * 2 + ["503", "timeout"] + [
        "completed"] * 2
    assert rec.counts["num_measured"] == 4
    path.write_text(path.read_text().replace('"status": 503', '"status": 503.5'))
    with pytest.raises(TraceError, match=r"line 3: field 'status': expected a string or an "
                       r"integer code, got 503\.5$"):
        read_recording(path, format="records")


def test_a_kvbudget_run_directory(tmp_path: Path) -> None:
    run = _replay_dir(tmp_path, {"policy": "overcommit", "policy_params": {},
                                 "kv_capacity_tokens": 4096},
                      {"policy": "conservative", "policy_params": {}},
                      rows=(ARRIVAL, PROMPT, OUTPUT, TTFT, E2E))
    assert detect_recording_format(run) == "run"
    rec = read_recording(run)
    check_rows(rec)
    assert rec.config["policy"] == "overcommit" and rec.config["kv_capacity_tokens"] == 4096


def vllm_bench_doc(*, start_times: bool = True) -> dict[str, Any]:
    itls = [[(e - t) / (o - 1)] * (o - 1) if o > 1 else []
            for t, e, o in zip(TTFT, E2E, OUTPUT, strict=True)]
    doc: dict[str, Any] = {
        "date": "20260101-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B",
        "num_prompts": 6, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": 9.0, "completed": 6, "failed": 0,
        "input_lens": PROMPT, "output_lens": OUTPUT, "ttfts": TTFT, "itls": itls,
        "generated_texts": ["x"] * 6, "errors": [""] * 6,
    }
    if start_times:
        doc["latencies"] = E2E
        doc["start_times"] = [1000.0 + a for a in ARRIVAL]
    return doc


def test_vllm_bench_serve_json(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(vllm_bench_doc()))
    assert detect_recording_format(path) == "vllm-bench"
    rec = read_recording(path)
    check_rows(rec)
    assert rec.config["model"] == "meta-llama/Llama-3.1-8B" and rec.config["request_rate"] == 4.0
    np.testing.assert_allclose(rec.measured["itl_mean_s"].iloc[1], (E2E[1] - TTFT[1]) / 49)


def test_older_vllm_bench_json_without_latencies_and_start_times(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(vllm_bench_doc(start_times=False)))
    rec = read_recording(path, seed=3)
    np.testing.assert_allclose(rec.measured["e2e_s"], E2E, atol=1e-9)  # TTFT + sum of ITLs
    np.testing.assert_array_equal(rec.measured["prompt_tokens"], PROMPT)
    arrival = rec.workload.arrival_s
    assert arrival[0] == 0 and np.all(np.diff(arrival) > 0)  # redrawn at 4 req/s
    assert any("start_times" in note for note in rec.notes)
    assert read_recording(path, seed=3).workload.arrival_s.tolist() == arrival.tolist()
    # the stage line said "replayed as open loop at the recorded send times" of these draws
    from kvbudget.studies.recorded_replay import replay_mode
    assert rec.stages[0].send_times == "redrawn"
    assert replay_mode(rec.stages[0]) == "open loop at the send times redrawn (the file has none)"
    path.write_text(json.dumps(vllm_bench_doc()))
    assert replay_mode(read_recording(path).stages[0]) == "open loop at the recorded send times"


def test_vllm_bench_closed_loop_arrivals_follow_the_measured_latencies(tmp_path: Path) -> None:
    doc = vllm_bench_doc(start_times=False)
    doc.update(request_rate="inf", max_concurrency=2, latencies=E2E)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    # two at 0; then each starts when the earliest of the running ones finishes
    by_id = dict(zip(rec.measured["request_id"], rec.workload.arrival_s, strict=True))
    assert by_id[0] == by_id[1] == 0.0
    assert by_id[2] == pytest.approx(E2E[0])
    assert by_id[3] == pytest.approx(E2E[0] + E2E[2])


def guidellm_request(i: int, *, new_schema: bool) -> dict[str, Any]:
    t0 = 1.7e9 + ARRIVAL[i]
    if new_schema:  # GuideLLM >= 0.4: computed fields plus info.timings
        return {"request_id": str(i), "request_type": "text_completion",
                "info": {"timings": {"request_start": t0,
                                     "first_token_iteration": t0 + TTFT[i],
                                     "request_end": t0 + E2E[i]}},
                "input_metrics": {"text_tokens": PROMPT[i]},
                "output_metrics": {"text_tokens": OUTPUT[i]},
                "request_start_time": t0, "request_end_time": t0 + E2E[i],
                "request_latency": E2E[i], "prompt_tokens": PROMPT[i],
                "output_tokens": OUTPUT[i], "time_to_first_token_ms": 1000 * TTFT[i]}
    return {"request_id": str(i), "prompt_tokens": PROMPT[i], "output_tokens": OUTPUT[i],
            "start_time": t0, "first_token_time": t0 + TTFT[i], "end_time": t0 + E2E[i]}


def guidellm_doc(*, new_schema: bool) -> dict[str, Any]:
    benchmarks = []
    for b, (lo, hi, rate) in enumerate(((0, 3, 1.0), (3, 6, 4.0))):
        strategy = {"type_": "constant", "rate": rate}
        bench: dict[str, Any] = {
            "type_": "generative_benchmark",
            "requests": {"successful": [guidellm_request(i, new_schema=new_schema)
                                        for i in range(lo, hi)],
                         "errored": [], "incomplete": []}}
        bench["config" if new_schema else "args"] = {"strategy": strategy, "run_index": b}
        benchmarks.append(bench)
    return {"benchmarks": benchmarks}


@pytest.mark.parametrize("new_schema", [True, False], ids=["guidellm-0.4", "guidellm-0.2"])
def test_guidellm_report(tmp_path: Path, new_schema: bool) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(guidellm_doc(new_schema=new_schema), indent=2))
    assert detect_recording_format(path) == "guidellm"
    rec = read_recording(path)
    check_rows(rec)
    # no max_concurrency in the strategy: GuideLLM's default cap (512 before 0.7)
    assert rec.measured["stage"].tolist() == (["0: constant 1 req/s x512"] * 3
                                              + ["1: constant 4 req/s x512"] * 3)


def test_noisy_records_are_counted_not_fatal(tmp_path: Path) -> None:
    df = generic_frame()
    df["status"] = ["ok", "error", "", "timeout", "completed", "ok"]
    df.loc[4, "ttft_s"] = np.nan  # a completed request whose TTFT was not logged
    df.loc[5, "e2e_s"] = np.nan
    df.loc[6] = [3.0, 40, 0, np.nan, np.nan, "error"]  # failed before any token
    path = tmp_path / "r.csv"
    df.to_csv(path, index=False)
    rec = read_recording(path)
    c = rec.counts
    assert c["num_rows_read"] == 7 and c["num_simulated"] == 6 and c["num_measured"] == 2
    assert c["num_not_completed"] == 2 and c["num_missing_ttft"] == 1
    assert c["num_missing_e2e"] == 1 and c["num_dropped_0_output_tokens"] == 1
    assert rec.measured["status"].tolist() == ["completed", "error", "completed", "timeout",
                                               "completed", "completed"]
    assert rec.measured["usable"].tolist() == [True, False, True, False, False, False]
    records = rec.records()
    assert records["reason"].tolist() == ["", "error", "", "timeout", "not measured",
                                          "not measured"]


def test_the_shared_measured_runs_read_as_records() -> None:
    path = SHARED / "measured" / "llmservingsim_vllm019" / "RTX4090_Llama-3.1-8B" / "requests.csv"
    if not path.exists():
        pytest.skip(f"{path} is not there")
    rec = read_recording(path)
    assert rec.counts["num_measured"] == 300
    assert rec.measured["ttft_s"].mean() == pytest.approx(65.45657, rel=1e-5)


BAD_CASES = [
    ("negative-ttft.csv", "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
     "0,10,5,0.1,0.5\n1,10,5,-0.2,0.5\n", "line 3: field 'ttft_s': negative time: -0.2"),
    ("e2e-below-ttft.csv", "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
     "0,10,5,0.1,0.5\n1,10,5,0.6,0.5\n", "line 3: field 'e2e_s': 0.5 is below ttft_s 0.6"),
    ("not-a-number.csv", "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
     "0,10,5,abc,0.5\n", "line 2: field 'ttft_s': not a number: 'abc'"),
    ("no-ttft.csv", "arrival_s,prompt_tokens,output_tokens,e2e_s\n0,10,5,0.5\n",
     "field 'ttft_s': missing column 'ttft_s'"),
    ("bad-prompt.csv", "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
     "0,10.5,5,0.1,0.5\n", "line 2: field 'prompt_tokens': not a whole number: 10.5"),
    ("short.json", json.dumps({**vllm_bench_doc(), "ttfts": TTFT[:5]}),
     "field 'ttfts': has 5 entries, input_lens has 6"),
    ("bad-itl.json", json.dumps({**vllm_bench_doc(), "itls": [[0.1]] * 5 + [["x"]]}),
     "row 5: field 'itls': not a number: 'x'"),
    ("neg.json", json.dumps({**vllm_bench_doc(), "input_lens": [10, -1, 3, 4, 5, 6]}),
     "row 1: field 'input_lens': negative value: -1"),
    ("no-detail.json", json.dumps({"completed": 6, "duration": 3.0, "date": "x",
                                   "model_id": "m"}),
     "no-detail.json: is a vllm bench serve result without per-request data"),
    ("guidellm.json", json.dumps({"benchmarks": [{"requests": {"successful": [
        {"prompt_tokens": 3, "output_tokens": 2}]}}]}),
     "guidellm.json: is shaped like a GuideLLM report, but its requests keep output_tokens, "
     "prompt_tokens and none of GuideLLM's times"),
    ("broken.json", '{"benchmarks": [\n{"requests": ', "line 2: not valid JSON"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD_CASES,
                         ids=[c[0] for c in BAD_CASES])
def test_bad_files_name_the_file_row_and_field(tmp_path: Path, name: str, text: str,
                                               message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("command", ["calibrate", "validate"])
def test_a_bad_recording_exits_2_with_one_line(tmp_path: Path, command: str) -> None:
    name, text, message = BAD_CASES[0]
    path = tmp_path / name
    path.write_text(text)
    res = CliRunner().invoke(app, [command, "--records", str(path), "--out",
                                   str(tmp_path / ("c.json" if command == "calibrate" else "v"))])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in res.stderr


def test_no_recorded_max_tokens_means_the_realised_output_never_an_invented_cap(
        tmp_path: Path) -> None:
    """A records file without max_output_tokens declares each request's realised output (the
    old default, 2,048, made a small-KV server refuse what the real one served)."""
    from kvbudget.workloads.max_output import FixedCap

    path = tmp_path / "r.csv"
    generic_frame().to_csv(path, index=False)
    rec = read_recording(path)
    assert rec.workload.max_output_tokens.tolist() == OUTPUT
    assert any("realised output length" in n for n in rec.notes)
    # --max-output with --records: the rule for rows without a recorded setting
    capped = read_recording(path, max_output=FixedCap(64))
    assert capped.workload.max_output_tokens.tolist() == [max(64, o) for o in OUTPUT]
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(vllm_bench_doc()))
    assert read_recording(bench).workload.max_output_tokens.tolist() == OUTPUT


def test_a_vllm_bench_request_that_failed_mid_stream_is_simulated_with_what_it_streamed(
        tmp_path: Path) -> None:
    """vLLM's client keeps a failed request's ttft and itls (its except branch) and writes 0 in
    output_lens: a request cut off after 4 chunks was dropped as "0 output tokens"."""
    doc = vllm_bench_doc()
    # request 2: the first chunk, then 3 more, then the connection broke
    doc["errors"][2] = "aiohttp.client_exceptions.ClientPayloadError: ..."
    doc["output_lens"][2], doc["itls"][2], doc["latencies"][2] = 0, [0.02, 0.02, 0.02], 0.0
    # request 4: refused before any token (ttft stays 0.0)
    doc["errors"][4] = "Service Unavailable"
    doc["output_lens"][4], doc["itls"][4], doc["ttfts"][4], doc["latencies"][4] = 0, [], 0.0, 0.0
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    m = rec.measured.set_index("request_id")
    assert m.index.tolist() == [0, 1, 2, 3, 5]  # request 4 streamed nothing: dropped
    assert m.loc[2, "output_tokens"] == 4 and m.loc[2, "status"] == "error"
    assert np.isnan(m.loc[2, "ttft_s"]) and np.isnan(m.loc[2, "e2e_s"])  # not compared
    assert rec.counts["num_dropped_0_output_tokens"] == 1 and rec.counts["num_failed"] == 2
    assert [n for n in rec.notes if n.startswith("1 failed requests streamed part of their "
                                                 "answer before failing")]


def test_records_in_milliseconds_under_seconds_names_are_refused(tmp_path: Path) -> None:
    # ttft_s / e2e_s holding milliseconds (a 25 ms decode step read as 25 s) validated a
    # server a thousand times slower with exit 0
    rng = np.random.default_rng(0)
    n = 50
    out = rng.integers(50, 300, n)
    ttft_ms = rng.uniform(40, 200, n)
    e2e_ms = ttft_ms + out * rng.uniform(15, 30, n)
    head = "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
    rows = [f"{i * 0.5},{500},{out[i]}" for i in range(n)]
    path = tmp_path / "ms.csv"
    path.write_text(head + "".join(f"{r},{t:.1f},{e:.1f}\n"
                                   for r, t, e in zip(rows, ttft_ms, e2e_ms, strict=True)))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert err.value.field == "e2e_s"
    assert "'ttft_s' and 'e2e_s' look like milliseconds" in str(err.value)
    # only E2E in ms: that column is named alone
    path.write_text(head + "".join(f"{r},{t / 1e3:.4f},{e:.1f}\n"
                                   for r, t, e in zip(rows, ttft_ms, e2e_ms, strict=True)))
    with pytest.raises(TraceError, match="'e2e_s' look like milliseconds"):
        read_recording(path)
    # only TTFT in ms: E2E below it, the unit asked
    path.write_text(head + "".join(f"{r},{t:.1f},{e / 1e3:.4f}\n"
                                   for r, t, e in zip(rows, ttft_ms, e2e_ms, strict=True)))
    with pytest.raises(TraceError, match="in milliseconds"):
        read_recording(path)
    # the same times in seconds read
    path.write_text(head + "".join(f"{r},{t / 1e3:.4f},{e / 1e3:.4f}\n"
                                   for r, t, e in zip(rows, ttft_ms, e2e_ms, strict=True)))
    assert len(read_recording(path).workload) == n


def _replay_dir(tmp_path: Path, meta: dict[str, Any], summary: dict[str, Any] | None = None,
                rows: tuple[list[Any], ...] | None = None) -> Path:
    """A replay's run directory with ``meta`` as its ``replay.json``: ``rows`` (arrival,
    prompt, output, TTFT, E2E), three requests by default, all completed."""
    arrival_l, prompt, output, ttft_l, e2e_l = rows or (
        [0.0, 0.5, 1.0], [100] * 3, [20] * 3, [0.1, 0.2, 0.1], [1.0] * 3)
    arrival, ttft, e2e = np.array(arrival_l), np.array(ttft_l), np.array(e2e_l)
    n = len(arrival)
    cols: dict[str, Any] = {
        "request_id": np.arange(n), "tier": ["interactive"] * n, "arrival_s": arrival,
        "prompt_tokens": np.array(prompt), "max_output_tokens": np.array(output) + 1,
        "output_tokens": np.array(output), "status": ["completed"] * n, "reason": [""] * n,
        "admitted_s": arrival, "first_token_s": arrival + ttft, "finished_s": arrival + e2e,
        "ttft_s": ttft, "tpot_s": np.zeros(n), "e2e_s": e2e,
        "num_preemptions": np.zeros(n, dtype=np.int64),
        "reserved_tokens": np.zeros(n, dtype=np.int64),
    }
    timeline = {c: np.zeros(0) for c in ("time_s", "kv_used_tokens", "kv_reserved_tokens",
                                         "kv_capacity_tokens", "num_running", "num_waiting",
                                         "num_preemptions")}
    run = tmp_path / "run"
    RunResult(cols, timeline, summary or {}).write(run)
    (run / "replay.json").write_text(json.dumps(meta))
    return run


# what vLLM 0.32.0 told of itself (/v1/models, /metrics), as kvbudget replay and serve write it
SERVER = {"model": "llama", "model_root": "meta-llama/Llama-3.1-8B-Instruct",
          "max_model_len": 8192, "num_gpu_blocks": 2001, "block_size": 16,
          "enable_prefix_caching": False, "kv_cache_dtype": "auto", "num_engines": 1}


def test_what_the_replayed_server_said_is_the_recordings_setting(tmp_path: Path) -> None:
    """A replay's (or serve's) run directory keeps what the server said of itself; read back,
    it is the recording's settings: the model it loaded (its alias beside it), its blocks less
    vLLM's null block, its cache, context and KV dtype."""
    run = _replay_dir(tmp_path, {"policy": "conservative", "policy_params": {},
                                 "kv_capacity_tokens": 32000, "server": SERVER})
    config = read_recording(run).config
    assert config["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert config["served_model"] == "llama"
    assert (config["num_gpu_blocks"], config["block_size"]) == (2000, 16)
    assert config["enable_prefix_caching"] is False and config["max_model_len"] == 8192
    assert config["kv_cache_dtype"] == "auto"
    # a data-parallel server's engines hold their blocks apart, each a replica of its own
    # (vLLM 0.32.0 tells their sum on each engine's series: 4002 is 2001 each, 2000 usable)
    two = _replay_dir(tmp_path / "dp", {"kv_capacity_tokens": 64000,
                                        "server": {**SERVER, "num_gpu_blocks": 4002,
                                                   "num_engines": 2,
                                                   "num_gpu_blocks_by_engine": [4002, 4002]}})
    config = read_recording(two).config
    assert (config["num_gpu_blocks"], config["block_size"]) == (2000, 16)
    assert config["num_replicas"] == config["data_parallel_size"] == 2
    assert config["kv_capacity_tokens"] == 64000 and "router" not in config


@pytest.mark.parametrize("told,field", [
    ({"num_gpu_blocks": 4003}, "server.num_gpu_blocks"),
    ({"num_gpu_blocks_by_engine": [4002, 2002]}, "server.num_gpu_blocks_by_engine"),
    ({"num_gpu_blocks_by_engine": [4002]}, "server.num_gpu_blocks_by_engine"),
    ({"num_gpu_blocks_by_engine": [4002, 0]}, "server.num_gpu_blocks_by_engine"),
])
def test_data_parallel_engines_that_disagree_are_refused(tmp_path: Path, told: dict[str, Any],
                                                         field: str) -> None:
    """Engines of different blocks (figures that differ, or a sum no equal share makes) are
    refused, naming the file and field, not simulated at one engine's (or their mean)."""
    server = {**SERVER, "num_gpu_blocks": 4002, "num_engines": 2, **told}
    run = _replay_dir(tmp_path, {"server": server})
    with pytest.raises(TraceError, match=re.escape(f"field '{field}'")) as err:
        read_recording(run)
    assert str(err.value).startswith(str(run / "replay.json")) and "\n" not in str(err.value)


def test_a_serve_run_directory_keeps_its_policy_and_budget(tmp_path: Path) -> None:
    """kvbudget serve writes its policy as the policy describes itself and its budget in the
    summary: read back as the policy simulated in front of the server, not ``unlimited``."""
    run = _replay_dir(tmp_path, {"executor": "serve", "upstreams": ["http://127.0.0.1:1"],
                                 "policy": {"name": "overcommit", "overcommit_ratio": 1.5}},
                      summary={"kv_capacity_tokens": 4096})
    config = read_recording(run).config
    assert config["policy"] == "overcommit"
    assert config["policy_params"]["overcommit_ratio"] == 1.5
    assert config["kv_capacity_tokens"] == 4096


@pytest.mark.parametrize("key,value", [("num_gpu_blocks", 0), ("num_gpu_blocks", True),
                                       ("enable_prefix_caching", "no"), ("model", 3)])
def test_a_bad_server_fact_names_its_field(tmp_path: Path, key: str, value: Any) -> None:
    run = _replay_dir(tmp_path, {"server": {**SERVER, key: value}})
    with pytest.raises(TraceError, match=rf"server\.{key}"):
        read_recording(run)


def test_a_serve_directory_of_several_upstreams_is_a_fleet(tmp_path: Path) -> None:
    """Three upstreams behind serve's router: a fleet of three replicas behind that router,
    each the server all three said they were; upstreams that differ say no engine."""
    meta: dict[str, Any] = {"executor": "serve", "router": "least_tokens",
                            "upstreams": [f"http://127.0.0.1:{p}" for p in (1, 2, 3)],
                            "policy": {"name": "conservative"}, "servers": [SERVER] * 3}
    config = read_recording(_replay_dir(tmp_path / "a", meta)).config
    assert (config["num_replicas"], config["router"]) == (3, "least_tokens")
    assert config["num_gpu_blocks"] == 2000 and config["max_model_len"] == 8192
    differ = {**meta, "servers": [SERVER, SERVER, {**SERVER, "num_gpu_blocks": 999}]}
    config = read_recording(_replay_dir(tmp_path / "b", differ)).config
    assert config["num_replicas"] == 3 and "num_gpu_blocks" not in config
    with pytest.raises(TraceError, match=r"servers\[1\]\.block_size"):
        read_recording(_replay_dir(tmp_path / "c", {**meta, "servers": [
            SERVER, {**SERVER, "block_size": -16}, SERVER]}))
