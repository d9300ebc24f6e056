"""``vllm bench serve`` files written by the clients of vLLM 0.33.0 and 0.34.0, read as they were.

The files under ``vllm-bench-0.33.0/`` and ``vllm-bench-0.34.0/`` were written here by those
releases' clients (PyPI's CUDA wheels, installed client-only) against the CPU vLLM 0.32.0 server
(``scripts/make_recording_fixtures.sh vllm-0.33.0 vllm-0.34.0``). They save 0.32.0's keys; what
changed is how the figures were measured (wheels' vllm/benchmarks/serve.py and
vllm/benchmarks/lib/endpoint_request_func.py): from 0.33.0 a chat stream's opening role chunk is
no longer its first token (``_choice_has_streamed_output``), the server's own queue time and TTFT
are saved where it sends them (``server_queue_times``, ``server_ttfts``), probes have a
connection of their own; from 0.34.0 the chat backends leave the chat template to the server
(``CHAT_TEMPLATE_BACKENDS``) and a stream's error event fails its request. Neither sends
anything before the run unless asked (``--ready-check-timeout-sec`` 0 since 0.14.0).
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
NEW = {v: FIXTURES / f"vllm-bench-{v}" for v in ("0.33.0", "0.34.0")}
V0_32 = FIXTURES / "vllm-bench-0.32.0"
VERSIONS = tuple(NEW)
CHAT = ("chat_rate8.json", "custom_chat_rate8_c2.json", "metrics_chat_c4.json")


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def by_row(rec: Any, column: str) -> np.ndarray[Any, Any]:
    order = np.argsort(rec.workload.request_id)
    return np.asarray(rec.measured[column])[order]


def notes(path: Path, start: str) -> list[str]:
    return [n for n in read_recording(path).notes if n.startswith(start)]


STAGES = {
    "rate8.json": RecordedStage("8 req/s", "open", 8.0, None),
    "concurrency4.json": RecordedStage("concurrency 4", "closed", None, 4),
    "burst05_c2.json": RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2),
    "rampup.json": RecordedStage("ramp-up linear 2 to 12 req/s", "open", None, None),
    "chat_rate8.json": RecordedStage("8 req/s", "open", 8.0, None),
    "probe4_rate8_c2.json": RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2),
    "custom_chat_rate8_c2.json": RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2),
    "metrics_rate8.json": RecordedStage("8 req/s", "open", 8.0, None),
    "metrics_chat_c4.json": RecordedStage("concurrency 4", "closed", None, 4),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(STAGES))
def test_each_new_file_reads_to_its_own_summary(version: str, name: str) -> None:
    path = NEW[version] / name
    doc = json.loads(path.read_text())
    assert doc["backend"] == doc["endpoint_type"] and "start_times" in doc
    rec = read_recording(path)
    assert rec.tool == "vllm bench serve" and rec.stages == (STAGES[name],)
    u = rec.measured[rec.measured["usable"]]
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 10
    assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    counts = np.array([len(x) for x in doc["itls"]])[u["request_id"].to_numpy()]
    assert close(float((u["itl_mean_s"] * counts).sum() / counts.sum()) * 1e3, doc["mean_itl_ms"])
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert by_row(rec, "prompt_tokens").tolist() == doc["input_lens"]
    assert np.allclose(by_row(rec, "e2e_s"), doc["latencies"], rtol=1e-12)
    if STAGES[name].load == "open":
        sends = np.array(doc["start_times"])
        assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(sends - sends.min()))


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", CHAT)
def test_a_new_chat_run_keeps_its_ttft_at_the_first_text(version: str, name: str) -> None:
    # 0.33.0's chat client skips the server's opening role chunk: a request holds at most
    # output - 1 inter-token times, so its TTFT is read as saved and no role chunk is said;
    # 0.32.0's held one per output token (the role chunk its TTFT)
    doc = json.loads((NEW[version] / name).read_text())
    assert all(len(i) < n for i, n in zip(doc["itls"], doc["output_lens"], strict=True))
    old = json.loads((V0_32 / "datasets" / "chat_rate8.json").read_text())
    assert [len(i) for i in old["itls"]] == old["output_lens"]
    rec = read_recording(NEW[version] / name)
    assert np.allclose(by_row(rec, "ttft_s"), doc["ttfts"], rtol=1e-12)
    assert not any("opening role chunk" in n for n in rec.notes)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_new_file_is_not_said_to_have_sent_its_first_prompt_before_the_run(
    version: str,
    name: str,
) -> None:
    # from vLLM 0.14.0 the readiness check is off unless --ready-check-timeout-sec > 0 and
    # --num-warmups is 0: these runs sent none (the server logged 10 requests a run), yet the
    # note said each run's first prompt had been sent before it and cached
    said = notes(NEW[version] / name, "vllm bench serve sent each run's first prompt")
    assert len(said) == 1
    assert said[0].startswith(
        "vllm bench serve sent each run's first prompt before the run only if told to"
    )
    assert "assumed it was not" in said[0]


def test_0_34_leaves_the_chat_template_to_the_server_without_being_told() -> None:
    # the custom dataset on openai-chat: 0.33.0 renders the tokenizer's template in the client
    # unless --skip-chat-template (the tiny model has none: run with the flag); 0.34.0 skips it
    # for the chat backends itself (run without the flag). Both prompts are the server's count
    # of what it prefilled, its own template applied once
    args = {v: json.loads((NEW[v] / "custom_chat_rate8_c2.json").read_text()) for v in NEW}
    assert args["0.33.0"]["input_lens"] == args["0.34.0"]["input_lens"]
    for version in VERSIONS:
        said = notes(NEW[version] / "custom_chat_rate8_c2.json", "backend openai-chat: each")
        assert len(said) == 1 and "Before vLLM 0.34 the custom, hf and speed_bench" in said[0]
        # spec_bench rendered it whatever the flag (0.33.0 get_samples passes it no flag)
        assert "and spec_bench always (the flag was not passed to it)" in said[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_probes_of_a_new_client_are_said_with_their_own_connection(version: str) -> None:
    doc = json.loads((NEW[version] / "probe4_rate8_c2.json").read_text())
    said = notes(NEW[version] / "probe4_rate8_c2.json", "--probe-request-rate")
    assert len(said) == 1
    assert f"{doc['probe_completed']} completed" in said[0]
    assert "0.33 and later over one of their own" in said[0]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["metrics_rate8.json", "metrics_chat_c4.json"])
def test_the_servers_own_ttft_is_said_to_start_at_its_scheduling(version: str, name: str) -> None:
    # a server run with --enable-per-request-metrics sends each request's queue time and TTFT
    # from its scheduling (0.32.0 vllm/entrypoints/generate/base/serving.py: first_token_ts -
    # scheduled_ts); the client's TTFT holds both. The note said the client's TTFT added only
    # "the HTTP and streaming path" to the server's
    doc = json.loads((NEW[version] / name).read_text())
    server = np.array(doc["server_ttfts"], dtype=float) + np.array(
        doc["server_queue_times"], dtype=float
    )
    assert np.isfinite(server).all() and (server <= np.array(doc["ttfts"])).all()
    said = notes(NEW[version] / name, "the file also holds the server's own queue time")
    assert len(said) == 1 and "of 10 requests" in said[0]
    assert "hold the server's queue time (a vLLM server's TTFT starts at its scheduling)" in said[0]
    # the lists tell a 0.33 or later client, not the server's release: said conditionally
    release = notes(NEW[version] / name, "the file was written by vllm bench serve 0.33 or later")
    assert len(release) == 1 and "if that server ran vLLM 0.34" in release[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_run_against_a_stopped_server_is_refused_naming_its_error(version: str) -> None:
    # every request refused at connect (the client saves each traceback and exits 0): it was
    # refused as "every row was dropped (0 output tokens: 3 rows)", as if the server had
    # answered each with nothing
    path = NEW[version] / "server_down.json"
    doc = json.loads(path.read_text())
    assert doc["completed"] == 0 and doc["failed"] == 3
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert err.value.field == "errors"
    assert "every one of its 3 requests failed before its first token" in str(err.value)
    assert "ClientConnectorError: Cannot connect to host 127.0.0.1" in str(err.value)


def test_a_0_34_stream_error_event_is_read_as_a_failure_with_what_it_streamed(
    tmp_path: Path,
) -> None:
    # 0.34.0's client fails a request whose stream carries the server's error event, its
    # errors entry that error's JSON (endpoint_request_func.py lines 279-280 and 301-303), the
    # ttft and itls it streamed kept; output_lens holds 0 for a failed request. The 0.32.0
    # server sent none here: hand-made from the real file, one failing after 16 chunks, one
    # before its first
    doc = json.loads((NEW["0.34.0"] / "rate8.json").read_text())
    error = json.dumps({"message": "boom", "type": "InternalServerError", "code": 500})
    for i in (0, 1):
        doc["errors"][i], doc["output_lens"][i] = error, 0
    doc["ttfts"][1], doc["itls"][1], doc["latencies"][1] = 0.0, [], 0.0
    doc["completed"], doc["failed"] = 8, 2
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    rec = read_recording(path)
    assert rec.counts["num_failed"] == 2 and rec.counts["num_measured"] == 8
    assert rec.counts["num_simulated"] == 9  # the one that streamed, as many tokens as chunks
    assert int(rec.workload.output_tokens.sum()) == 16 * 8 + len(doc["itls"][0]) + 1
    said = [n for n in rec.notes if "streamed part of their answer" in n]
    assert len(said) == 1 and said[0].startswith("1 failed requests")


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["metrics_rate8.json", "metrics_chat_c4.json"])
def test_the_servers_own_figures_are_kept_beside_each_request(version: str, name: str) -> None:
    # read for calibrate's front-end term and validate's server-side TTFT (studies/server_ttft.py):
    # they were read for a note and dropped
    doc = json.loads((NEW[version] / name).read_text())
    rec = read_recording(NEW[version] / name)
    assert np.allclose(by_row(rec, "server_queue_s"), doc["server_queue_times"], rtol=0)
    assert np.allclose(by_row(rec, "server_ttft_s"), doc["server_ttfts"], rtol=0)
    assert "server_queue_s" not in read_recording(NEW[version] / "rate8.json").measured


def test_damaged_server_lists_are_said_and_left_out_and_nulls_and_failures_are_nan(
    tmp_path: Path,
) -> None:
    doc = json.loads((NEW["0.34.0"] / "metrics_rate8.json").read_text())
    n = len(doc["input_lens"])
    kept = dict(doc, server_ttfts=[None, *doc["server_ttfts"][1:]])
    kept["errors"] = ["", "boom", *[""] * (n - 2)]
    path = tmp_path / "kept.json"
    path.write_text(json.dumps(kept))
    rec = read_recording(path)
    assert np.isnan(by_row(rec, "server_ttft_s")[:2]).all()  # null; a failed request
    assert np.isnan(by_row(rec, "server_queue_s")[1]) and np.isfinite(
        by_row(rec, "server_queue_s")[0]
    )
    for bad in ([-0.001] * n, ["0.001"] * n, [0.001] * (n - 1)):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(dict(doc, server_queue_times=bad)))
        rec = read_recording(path)  # the run is still read, without the server's figures
        assert "server_queue_s" not in rec.measured
        assert any("the server's own figures are not used" in x for x in rec.notes)
