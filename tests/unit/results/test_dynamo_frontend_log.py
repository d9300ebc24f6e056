"""NVIDIA Dynamo's logs passed where a recording is meant.

Dynamo's HTTP frontend logs one ``request completed`` line a request as it ends, with
``elapsed_ms`` since it was received and its span's ``input_tokens``, ``output_tokens`` and
``ttft_ms`` (github.com/ai-dynamo/dynamo 0014908a ``lib/llm/src/http/service/metrics.rs``,
``impl Drop for InflightGuard`` and ``ResponseMetricCollector``). A published log of a
prefill/decode-disaggregated deployment (github.com/highopes/pd-disaggregation-demo 2dc2f876,
``pd-disaggregation/evidence/runs/20260724-095037/09-post-request-dynamo-logs.txt``; no licence,
so not kept here) interleaves those lines, in terminal colours, with its vLLM workers' and was
called "a vLLM server log: the engine's throughput and queue every 10 s". The lines below are
written by hand in that log's shape (its frontend's and a worker's lines, colours and all),
and in that of Dynamo 1.6.1's frontend run here against its mocker (``python -m
dynamo.frontend`` and ``python -m dynamo.mocker``, file discovery): a unary /v1/completions
request logged with no tokens nor ttft_ms, a streamed one with ``input_tokens=0`` and no
ttft_ms, a chat request with both (not kept as a fixture: the mocker's ZMQ event plane binds
0.0.0.0, so the run is not one the fixture script may make).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_dynamo import dynamo_log_refusal

DIM, OFF, GREEN = "\x1b[2m", "\x1b[0m", "\x1b[32m"
FRONTEND = (
    f"{DIM}2026-07-24T02:09:00.860252Z{OFF} {GREEN} INFO{OFF} http-request: "
    "dynamo_llm::http::service::metrics: request completed request_id=be2b4a7f "
    "model=Qwen/Qwen3-14B-FP8 endpoint=chat_completions request_type=unary status=success "
    'elapsed_ms=1497 method=POST uri=/v1/chat/completions version=HTTP/1.1 model="Qwen/Qwen3-14B-'
    'FP8" input_tokens=13 output_tokens=7 ttft_ms="1094.97" avg_itl_ms="67.06"'
)
RECEIVED = (
    "2026-07-24T02:08:59.362681Z  INFO http-request: dynamo_llm::http::service::metrics: "
    "request received request_id=be2b4a7f model=Qwen/Qwen3-14B-FP8 endpoint=chat_completions"
)
CANCELLED = (
    "2026-07-24T02:10:01.000000Z  INFO http-request: dynamo_llm::http::service::metrics: "
    "request completed request_id=c0ffee model=Qwen/Qwen3-14B-FP8 endpoint=chat_completions "
    "request_type=stream status=error error_type=cancelled elapsed_ms=12"
)
WORKER = (
    "2026-07-24T02:22:20.121740Z  INFO handle_payload: dynamo_runtime::pipeline::network::"
    'ingress::push_handler: request received request_id=b0a2b5ae component="prefill"'
)
UNARY_COMPLETION = (
    "2026-12-07T19:08:34.444880Z  INFO http-request:completions:completions_single: "
    "dynamo_llm::http::service::metrics: request completed request_id=48965220 model=tiny "
    "endpoint=completions request_type=unary status=success elapsed_ms=62 method=POST "
    "uri=/v1/completions version=HTTP/1.1 request_id=a06c1751"
)
STREAMED_COMPLETION = (
    "2026-12-07T19:08:34.504400Z  INFO http-request:completions:completions_single: "
    "dynamo_llm::http::service::metrics: request completed request_id=bdc30b03 model=tiny "
    "endpoint=completions request_type=stream status=success elapsed_ms=51 method=POST "
    "uri=/v1/completions version=HTTP/1.1 request_id=a9cf77ab input_tokens=0 output_tokens=6 "
    "image_count=0 video_count=0 audio_count=0"
)
VLLM = "(EngineCore_DP0 pid=212) INFO 07-24 02:16:32 [loggers.py:123] Engine 000: throughput"


def test_a_deployments_log_names_its_frontends_requests_not_a_vllm_log(tmp_path: Path) -> None:
    log = tmp_path / "09-post-request-dynamo-logs.txt"
    lines = ["NAME  READY  STATUS", VLLM, RECEIVED, FRONTEND, WORKER, CANCELLED]
    log.write_text("\n".join([*lines, UNARY_COMPLETION, STREAMED_COMPLETION]))
    res = CliRunner().invoke(app, ["validate", "--records", str(log)])
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "is an NVIDIA Dynamo log: its frontend's 'request completed' lines, 4, logged" in said
    # the cancelled one and both completions (no ttft_ms; a prompt of 0 tokens) cannot be written
    assert "1 of them with input_tokens (a prompt), output_tokens and ttft_ms" in said
    assert "arrival_s: the line's time less elapsed_ms / 1000" in said
    assert "ttft_s: ttft_ms / 1000" in said and "vLLM server log" not in said
    assert "in its first 64 KiB" not in said  # the whole file was looked at
    # the trace Dynamo's frontend can write instead, which kvbudget reads
    assert "or start the frontend with its per-request trace (DYN_REQUEST_TRACE=1" in said


def test_a_workers_log_alone_is_named_too_and_vllms_stays_vllms() -> None:
    said = dynamo_log_refusal(f"{WORKER}\n{WORKER}\n".encode())
    assert said is not None and "NVIDIA Dynamo log (its workers' or runtime's messages)" in said
    assert "or the frontend's per-request trace (DYN_REQUEST_TRACE=1" in said
    assert dynamo_log_refusal(f"{VLLM}\n".encode()) is None
    assert dynamo_log_refusal(b'{"dynamo_llm::x": 1}') is None
    long = ("\n".join([FRONTEND] * 200) + "\n").encode()
    said = dynamo_log_refusal(long[: 1 << 16])
    assert said is not None and "in its first 64 KiB" in said
