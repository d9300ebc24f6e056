"""AIPerf runs whose requests failed (an ``error``: ``TimeoutError`` at
``--request-timeout-seconds``) and runs sent to several ``--url`` servers in turn.

github.com/databloom/aiperf-lab-tests artifacts/llama-3.2-3b-instruct-gguf:q4_k_m-openai-chat-
concurrency1/ at 04456446 (profile_export.jsonl, profile_export_aiperf.json; no licence: not
copied): AIPerf 0.8.0, a closed loop of 1 user (``--request-count 20``, ``--request-timeout-
seconds 20``) sent to ``--url http://192.168.19.150:8080 --url http://192.168.19.9:8080``; every
other request (the second server's) ended in ``TimeoutError`` after 20.4 s with
``error_isl`` only, AIPerf's summary counting ``request_count`` 10, ``error_request_count`` 10.
It was read as 10 requests "dropped (0 output tokens)", ``num_failed`` 0, a closed loop of 1
user on one server (the first URL): the simulated user sent at once what the real one sent
after 20 s, 219 simulated output tokens/s against 0.58 measured. Reproduced below in a minimal
file of the same shape (the records' fields as AIPerf 0.8.0 wrote them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.recorded import recorded_setup
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
URLS = ["http://192.168.19.150:8080", "http://192.168.19.9:8080"]
# (prompt, output tokens, TTFT ms, latency ms) of the first server's answers, in turn
ANSWERED = [(9, 6, 1701.7, 1806.9), (10, 16, 236.5, 585.7), (9, 6, 263.9, 371.7),
            (10, 16, 237.8, 587.3), (9, 6, 231.1, 333.1), (10, 16, 264.4, 622.3),
            (9, 6, 230.6, 332.6), (10, 16, 233.4, 582.8), (9, 6, 255.1, 358.7),
            (10, 16, 241.2, 592.7)]
TIMEOUT_NS = 20_380_000_000  # the second server's: each ended 20.4 s after it was sent


def _record(k: int, issued: int) -> tuple[dict[str, Any], int]:
    """The k-th record (issued at ``issued`` ns) and when it ended."""
    start = issued + 2_000_000
    meta: dict[str, Any] = {"session_num": k, "turn_index": 0, "credit_issued_ns": issued,
                            "request_start_ns": start, "worker_id": "worker_1927ea80",
                            "benchmark_phase": "profiling", "was_cancelled": False}
    if k % 2:
        end = meta["request_end_ns"] = start + TIMEOUT_NS
        return {"metadata": meta, "metrics": {"error_isl": {"value": 12, "unit": "tokens"}},
                "error": {"type": "TimeoutError", "message": "TimeoutError()",
                          "cause": "CancelledError()",
                          "cause_chain": ["TimeoutError", "CancelledError"]}}, end
    isl, osl, ttft, lat = ANSWERED[k // 2]
    end = meta["request_end_ns"] = start + int(lat * 1e6)
    return {"metadata": meta, "metrics": {
        "input_sequence_length": {"value": isl, "unit": "tokens"},
        "output_sequence_length": {"value": osl, "unit": "tokens"},
        "time_to_first_token": {"value": ttft, "unit": "ms"},
        "request_latency": {"value": lat, "unit": "ms"},
        "inter_token_latency": {"value": 21.0, "unit": "ms"}}}, end


def two_urls_with_timeouts(tmp_path: Path, **endpoint: Any) -> Path:
    """The published run's shape: 20 requests, a closed loop of 1, two URLs in turn, the
    second's every request timed out."""
    lines, issued = [], 1_777_310_411_637_921_696
    for k in range(20):
        rec, end = _record(k, issued)
        lines.append(json.dumps(rec))
        issued = end + 2_000_000
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps({
        "schema_version": "1.0", "aiperf_version": "0.8.0",
        "request_count": {"unit": "requests", "avg": 10.0},
        "error_request_count": {"unit": "requests", "avg": 10.0},
        "input_config": {
            "endpoint": {"model_names": ["llama-3.2-3b-instruct-gguf:q4_k_m"],
                         "custom_endpoint": "/v1/chat/completions", "type": "chat",
                         "streaming": True, "urls": URLS, "timeout_seconds": 20.0,
                         **endpoint},
            "loadgen": {"concurrency": 1, "arrival_pattern": "concurrency_burst",
                        "request_count": 20}}}))
    return path


def test_timed_out_requests_are_counted_failed_as_aiperf_does(tmp_path: Path) -> None:
    rec = read_recording(two_urls_with_timeouts(tmp_path))
    assert rec.counts["num_failed"] == 10  # AIPerf's error_request_count
    assert rec.counts["num_measured"] == 10  # its request_count
    note = next(n for n in rec.notes if "failed with no output" in n)
    assert "10 TimeoutError, after 20.4 s on average (--request-timeout-seconds 20)" in note
    assert "error_request_count" in note


def test_a_closed_loop_held_by_timeouts_keeps_their_time(tmp_path: Path) -> None:
    rec = read_recording(two_urls_with_timeouts(tmp_path))
    assert rec.stages[0] == RecordedStage("concurrency 1, 10 failed", "capped", None, 1)
    note = next(n for n in rec.notes if "held its user" in n)
    assert "204 s held in all, of the stage's 210 s)" in note
    assert "open loop at the recorded sends, at most 1 in flight" in note
    # a server far faster than the recorded one: the measured and simulated output tokens/s
    # span the same time (the users' waits on the timeouts), not a server answering all
    cost = LinearCostModel(intercept_s=1e-4, per_prefill_token_s=1e-5, per_decode_seq_s=1e-4,
                           per_context_token_s=0.0)
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=4000, block_size=16, max_num_seqs=8,
                                           max_num_batched_tokens=8192))
    run = simulate_recording(rec, config, cost_model=cost, frontend_overhead_s=0.0)
    done = run.records[run.records["status"] == "completed"]
    assert len(done) == 10
    span = float(done["finished_s"].max() - done["arrival_s"].min())
    m = rec.measured
    measured_span = float((m["arrival_s"] + m["e2e_s"]).max() - m["arrival_s"].min())
    assert span == pytest.approx(measured_span, rel=0.02)
    rate = done["output_tokens"].sum() / span
    assert rate == pytest.approx(m["output_tokens"].sum() / measured_span, rel=0.02)


def test_failures_in_an_open_stage_are_counted_and_its_sends_kept(tmp_path: Path) -> None:
    path = two_urls_with_timeouts(tmp_path)
    summary = json.loads((tmp_path / "profile_export_aiperf.json").read_text())
    summary["input_config"]["loadgen"] = {"request_rate": 0.1, "request_count": 20}
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    rec = read_recording(path)
    assert rec.counts["num_failed"] == 10
    assert rec.stages[0].load == "open" and rec.stages[0].label == "0.1 req/s"
    assert not any("held its user" in n for n in rec.notes)


def test_several_urls_are_a_fleet_behind_round_robin(tmp_path: Path) -> None:
    rec = read_recording(two_urls_with_timeouts(tmp_path))
    assert rec.config["num_replicas"] == 2
    assert rec.config["router"] == "round_robin"
    assert rec.config["target"] == ", ".join(URLS)
    note = next(n for n in rec.notes if "servers in turn" in n)
    assert "simulated as a fleet of 2 replicas" in note
    # the k-th issued went to URL k mod 2: the second server's every request timed out
    assert f"{URLS[0]} 10 sent, 0 failed; {URLS[1]} 10 sent, 10 failed" in note
    assert f"{URLS[1]} answered none of its requests" in note


def test_a_fleet_of_urls_is_simulated_as_replicas(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    setup = recorded_setup(two_urls_with_timeouts(tmp_path), records_format=None, columns=None,
                           tier="default", seed=0, gpu="H100", model="Llama-3.2-3B",
                           scenario=None, overrides=None, num_gpu_blocks=None, block_size=None,
                           max_num_seqs=None, max_num_batched_tokens=None, cost_model=None,
                           policy=None, params=None)
    fleet = setup.config.fleet
    assert fleet is not None and (fleet.num_replicas, fleet.router) == (2, "round_robin")
    settings = " ".join(capsys.readouterr().err.split())  # as wrapped
    assert 'from the recording: fleet.num_replicas=2, fleet.router="round_robin"' in settings


def test_another_url_strategy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"input_config\.endpoint\.url_strategy"):
        read_recording(two_urls_with_timeouts(tmp_path, url_strategy="random"))


def test_one_url_is_one_server() -> None:
    rec = read_recording(FIXTURES / "aiperf-0.13.0" / "concurrency4.jsonl")
    assert "num_replicas" not in rec.config and "router" not in rec.config
    assert rec.config["target"].startswith("http://127.0.0.1:")
    assert not any("servers in turn" in n for n in rec.notes)
    assert rec.counts["num_failed"] == 0


def test_one_url_named_twice_is_one_server_and_unequal_shares_are_refused(
        tmp_path: Path) -> None:
    rec = read_recording(two_urls_with_timeouts(tmp_path, urls=[URLS[0], URLS[0]]))
    assert rec.config["target"] == URLS[0] and "num_replicas" not in rec.config
    assert not any("servers in turn" in n for n in rec.notes)
    with pytest.raises(TraceError, match="some named twice"):
        read_recording(two_urls_with_timeouts(tmp_path, urls=[*URLS, URLS[0]]))


def test_a_failed_warm_up_request_is_not_counted_failed(tmp_path: Path) -> None:
    # AIPerf's summary (error_request_count included) leaves the warm-up phase out
    path = two_urls_with_timeouts(tmp_path)
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for rec in recs[:2]:
        rec["metadata"]["benchmark_phase"] = "warmup"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary_path = path.with_name("profile_export_aiperf.json")
    summary = json.loads(summary_path.read_text())
    for tag, warm in (("request_count", 1), ("error_request_count", 1)):  # one of each
        summary[tag]["avg"] -= warm
    summary_path.write_text(json.dumps(summary))
    rec = read_recording(path)
    assert rec.counts["num_failed"] == 9
    assert rec.counts["num_warmup"] == 1
    assert any(n.startswith("9 requests failed with no output (9 TimeoutError")
               for n in rec.notes)
