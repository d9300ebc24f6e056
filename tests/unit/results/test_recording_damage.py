"""Damaged files of every load tool's format: each real fixture, broken one way at a time
(truncated, mismatched list lengths, negative / NaN / infinite / huge times, a request that
ends before its first token, a negative request rate, a NaN start time, empty inter-token
lists, a list where a number belongs) raises TraceError with one line naming the file, the
row or line and the field, and ``kvbudget validate --records`` exits 2 with that line."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
NAN = float("nan")
INF = float("inf")
Doc = Any


def vllm(mutate: Callable[[Doc], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "rate8.json").read_text())
        mutate(doc)
        out = tmp / "vllm.json"
        out.write_text(json.dumps(doc))
        return out
    return make


def guidellm(mutate: Callable[[Doc], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        doc = json.loads((FIXTURES / "guidellm-0.8.1" / "benchmarks.json").read_text())
        mutate(doc)
        out = tmp / "guidellm.json"
        out.write_text(json.dumps(doc))
        return out
    return make


def aiperf(mutate: Callable[[list[Doc]], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        src = FIXTURES / "aiperf-0.13.0"
        recs = [json.loads(line) for line in (src / "concurrency4.jsonl").read_text().splitlines()]
        shutil.copy(src / "concurrency4_aiperf.json", tmp / "run_aiperf.json")
        mutate(recs)
        out = tmp / "run.jsonl"
        out.write_text("".join(json.dumps(r) + "\n" for r in recs))
        return out
    return make


def inference_perf(mutate: Callable[[list[Doc]], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        src = FIXTURES / "inference-perf-0.7.0"
        for p in src.glob("stage_*_lifecycle_metrics.json"):
            shutil.copy(p, tmp / p.name)
        doc = json.loads((src / "per_request_lifecycle_metrics.json").read_text())
        mutate(doc)
        out = tmp / "per_request_lifecycle_metrics.json"
        out.write_text(json.dumps(doc))
        return out
    return make


def truncated(make: Callable[[Path], Path]) -> Callable[[Path], Path]:
    def cut(tmp: Path) -> Path:
        path = make(tmp)
        text = path.read_text()
        path.write_text(text[: len(text) // 2])
        return path
    return cut


def setitem(obj: Any, key: Any, value: Any) -> None:
    obj[key] = value


def g_req(doc: Doc) -> Doc:
    return doc["benchmarks"][0]["requests"]["successful"][3]


def a_metric(recs: list[Doc], name: str, value: Any) -> None:
    recs[3]["metrics"][name]["value"] = value


def i_first(doc: list[Doc]) -> float:
    return float(doc[3]["info"]["response_metrics"]["output_token_times"][0])


def stage_rate(tmp: Path) -> Path:
    path = inference_perf(lambda d: None)(tmp)
    stage = tmp / "stage_0_lifecycle_metrics.json"
    doc = json.loads(stage.read_text())
    doc["load_summary"]["requested_rate"] = -8
    stage.write_text(json.dumps(doc))
    return path


def aiperf_rate(tmp: Path) -> Path:
    src = FIXTURES / "aiperf-0.13.0"
    shutil.copy(src / "rate8.jsonl", tmp / "run.jsonl")
    summary = json.loads((src / "rate8_aiperf.json").read_text())
    for phase in summary["input_config"]["phases"]:
        phase["rate"] = -8.0
    (tmp / "run_aiperf.json").write_text(json.dumps(summary))
    return tmp / "run.jsonl"


CASES: list[tuple[str, Callable[[Path], Path], str]] = [
    # vllm bench serve: parallel per-request lists
    ("vllm-truncated", truncated(vllm(lambda d: None)), "not valid JSON"),
    ("vllm-mismatched", vllm(lambda d: d["ttfts"].pop()), "field 'ttfts': has 19 entries"),
    ("vllm-negative", vllm(lambda d: setitem(d["ttfts"], 3, -0.1)), "row 3: field 'ttfts'"),
    ("vllm-nan", vllm(lambda d: setitem(d["ttfts"], 3, NAN)), "row 3: field 'ttfts': not finite"),
    ("vllm-ends-early", vllm(lambda d: setitem(d["latencies"], 3, d["ttfts"][3] / 2)),
     "row 3: field 'latencies': the request ends"),
    ("vllm-negative-rate", vllm(lambda d: setitem(d, "request_rate", -1)),
     "field 'request_rate': must be a positive rate"),
    ("vllm-nan-start", vllm(lambda d: setitem(d["start_times"], 3, NAN)),
     "row 3: field 'start_times': not finite"),
    # one request's itls emptied is a whole answer in one chunk, which real runs have
    # (test_sglang_bench_serving.py); every request's emptied is a run that did not stream
    ("vllm-empty-itls", vllm(lambda d: d.update(itls=[[] for _ in d["itls"]])),
     "row 0: field 'itls': no inter-token times"),
    ("vllm-infinity", vllm(lambda d: setitem(d["latencies"], 3, INF)),
     "row 3: field 'latencies': not finite"),
    ("vllm-list", vllm(lambda d: setitem(d["ttfts"], 3, [0.1])),
     "row 3: field 'ttfts': not a number"),
    ("vllm-huge", vllm(lambda d: setitem(d["latencies"], 3, 1e12)),
     "row 3: field 'latencies': implausibly long"),
    # GuideLLM 0.8.1
    ("guidellm-truncated", truncated(guidellm(lambda d: None)), "not valid JSON"),
    ("guidellm-negative", guidellm(lambda d: setitem(g_req(d), "request_end_time",
                                                     g_req(d)["request_start_time"] - 1)),
     "successful[3].request_latency': negative time"),
    ("guidellm-nan", guidellm(lambda d: setitem(g_req(d)["info"]["timings"],
                                                "first_token_iteration", NAN)),
     "successful[3].info.timings.first_token_iteration': not finite"),
    ("guidellm-ends-early", guidellm(lambda d: setitem(
        g_req(d), "request_end_time", g_req(d)["request_start_time"] + 1e-4)),
     "successful[3].request_end_time': the request ends"),
    ("guidellm-negative-rate", guidellm(lambda d: setitem(
        d["benchmarks"][0]["config"], "strategy", {"type_": "constant", "rate": -1})),
     "field 'benchmarks[0].strategy.rate': must be > 0"),
    ("guidellm-nan-start", guidellm(lambda d: setitem(g_req(d), "request_start_time", NAN)),
     "successful[3].request_start_time': not finite"),
    ("guidellm-infinity", guidellm(lambda d: setitem(g_req(d), "request_end_time", INF)),
     "successful[3].request_end_time': not finite"),
    ("guidellm-list", guidellm(lambda d: setitem(g_req(d), "prompt_tokens", [32])),
     "successful[3].prompt_tokens': not a number"),
    ("guidellm-huge", guidellm(lambda d: setitem(g_req(d), "request_end_time",
                                                 g_req(d)["request_start_time"] + 1e12)),
     "successful[3].request_latency': implausibly long"),
    # AIPerf: one record a line (line 4 is records[3])
    ("aiperf-truncated", truncated(aiperf(lambda r: None)), "not valid JSON"),
    ("aiperf-negative", aiperf(lambda r: a_metric(r, "request_latency", -5.0)),
     "line 4: field 'metrics.request_latency': negative time"),
    ("aiperf-nan", aiperf(lambda r: a_metric(r, "time_to_first_token", NAN)),
     "line 4: field 'metrics.time_to_first_token.value': not finite"),
    ("aiperf-ends-early", aiperf(lambda r: a_metric(
        r, "request_latency", r[3]["metrics"]["time_to_first_token"]["value"] / 2)),
     "line 4: field 'metrics.request_latency': the request ends"),
    ("aiperf-negative-rate", aiperf_rate, "field 'input_config.phases[1].rate': must be > 0"),
    ("aiperf-nan-start", aiperf(lambda r: setitem(r[3]["metadata"], "request_start_ns", NAN)),
     "line 4: field 'metadata.request_start_ns': not finite"),
    ("aiperf-infinity", aiperf(lambda r: a_metric(r, "request_latency", INF)),
     "line 4: field 'metrics.request_latency.value': not finite"),
    ("aiperf-list", aiperf(lambda r: a_metric(r, "input_sequence_length", [32])),
     "line 4: field 'metrics.input_sequence_length.value': not a number"),
    ("aiperf-huge", aiperf(lambda r: a_metric(r, "request_latency", 1e15)),
     "line 4: field 'metrics.request_latency': implausible time"),
    # inference-perf: a JSON list of requests
    ("inference-perf-truncated", truncated(inference_perf(lambda d: None)), "not valid JSON"),
    ("inference-perf-negative", inference_perf(lambda d: setitem(d[3], "end_time",
                                                                 d[3]["start_time"] - 1)),
     "row 3: field 'end_time': negative time"),
    ("inference-perf-nan", inference_perf(lambda d: setitem(
        d[3]["info"]["response_metrics"]["output_token_times"], 0, NAN)),
     "row 3: field 'info.response_metrics.output_token_times': not finite"),
    ("inference-perf-ends-early", inference_perf(lambda d: setitem(
        d[3], "end_time", (d[3]["start_time"] + i_first(d)) / 2)),
     "row 3: field 'end_time': the request ends"),
    ("inference-perf-negative-rate", stage_rate,
     "field 'load_summary.requested_rate': must be > 0"),
    ("inference-perf-nan-start", inference_perf(lambda d: setitem(d[3], "start_time", NAN)),
     "row 3: field 'start_time': not finite"),
    ("inference-perf-empty-times", inference_perf(lambda d: setitem(
        d[3]["info"]["response_metrics"], "output_token_times", [])),
     "row 3: field 'info.response_metrics.output_token_times': empty"),
    ("inference-perf-infinity", inference_perf(lambda d: setitem(d[3], "end_time", INF)),
     "row 3: field 'end_time': not finite"),
    ("inference-perf-list", inference_perf(lambda d: setitem(d[3], "start_time", [1.0])),
     "row 3: field 'start_time': not a number"),
    ("inference-perf-huge", inference_perf(lambda d: setitem(d[3], "end_time",
                                                             d[3]["start_time"] + 1e12)),
     "row 3: field 'end_time': implausible time"),
]


@pytest.mark.parametrize(("name", "make", "message"), CASES, ids=[c[0] for c in CASES])
def test_a_damaged_file_names_the_file_row_and_field(tmp_path: Path, name: str,
                                                     make: Callable[[Path], Path],
                                                     message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(tmp_path)), text
    assert message in text, text
    if "truncated" in name:
        assert "line " in text


@pytest.mark.parametrize(("name", "make", "message"),
                         [c for c in CASES if c[0].endswith(("-nan-start", "-ends-early"))],
                         ids=[c[0] for c in CASES if c[0].endswith(("-nan-start",
                                                                     "-ends-early"))])
def test_validate_exits_2_with_one_line(tmp_path: Path, name: str,
                                        make: Callable[[Path], Path], message: str) -> None:
    path = make(tmp_path)
    res = CliRunner().invoke(app, ["validate", "--records", str(path), "--out",
                                   str(tmp_path / "v")])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert "Traceback" not in res.stderr
