"""The streaming client and the live gateway against a fake OpenAI-compatible server.

The fake server runs in this process on 127.0.0.1 (a threaded ``http.server``): it streams
``/v1/completions`` as server-sent events with a fixed time per token, serves ``/metrics`` in
vLLM's names, and misbehaves on request: an error event mid-stream, a reset connection, HTTP
429/503, merged chunks, a stall, a stream cut short, no usage. It also plays a tiny engine:
it tracks the KV tokens of the streams it is serving, so the tests can check what the gateway
let through.
"""

from __future__ import annotations

import asyncio
import html
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.analysis.report import REPORT_FILE
from kvbudget.cli.main import app
from kvbudget.live.openai_client import (
    ServerTarget,
    StreamResult,
    completion_body,
    stream_completion,
)
from kvbudget.live.replay import (
    ReplayConfig,
    ReplayMeta,
    prompt_token_ids,
    replay,
    scale_time,
)
from kvbudget.live.run_dir import REQUESTS_PART, read_jsonl
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.records import RECORD_COLUMNS, STATUSES, TIMELINE_COLUMNS
from kvbudget.results.run_result import read_run
from kvbudget.results.said import setting_lines
from kvbudget.workloads import Workload, from_columns

GATE_WAIT_S = 60.0


@dataclass
class FakeState:
    token_s: float = 0.002
    blocks: int = 20
    block_size: int = 16
    max_model_len: int = 4096
    mode: str = "ok"
    preemptions: int = 0
    active: dict[int, int] = field(default_factory=dict)  # stream id -> KV tokens
    max_active: int = 0
    max_kv_tokens: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    disconnects: int = 0
    dead: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    next_id: int = 0
    completions: int = 0
    die_after_completions: int | None = None  # the server crashes after its N-th [DONE]
    on_die: Any = None  # what crashing does (set by the fixture: reset streams, close)
    # a stream sends its next token only once gate() holds (tests sequence the fake by events,
    # never by timers); the waits end at teardown (release) and, all together, after
    # GATE_WAIT_S: a gate that never opens (the behaviour under test broke) opens for good then,
    # so the test fails on its assertions instead of waiting GATE_WAIT_S for every token
    gate: Any = None
    release: threading.Event = field(default_factory=threading.Event)
    gate_expired: threading.Event = field(default_factory=threading.Event)
    # a stream that asks for at least this many tokens sends one, then only SSE comments
    # (which a client ignores) until the client leaves or the test ends: it never finishes
    endless_min_tokens: int | None = None

    def wait_for_gate(self) -> None:
        deadline = time.monotonic() + GATE_WAIT_S
        while (self.gate is not None and not self.gate() and not self.release.is_set()
               and not self.gate_expired.is_set()):
            if time.monotonic() >= deadline:
                self.gate_expired.set()
            self.release.wait(0.005)

    def kv_tokens(self) -> int:
        return sum(self.active.values())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _FakeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        st = self.server.state
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [
                {"id": "fake-model", "object": "model", "max_model_len": st.max_model_len}]})
        elif self.path == "/health":
            self._json(200, {})
        elif self.path == "/metrics" and st.mode != "no_metrics":
            with st.lock:
                used = st.kv_tokens()
                running = len(st.active)
            usable = (st.blocks - 1) * st.block_size
            text = "\n".join([
                "# HELP vllm:num_requests_running Number of requests in model execution.",
                "# TYPE vllm:num_requests_running gauge",
                f'vllm:num_requests_running{{engine="0",model_name="fake-model"}} {running}.0',
                'vllm:num_requests_waiting{engine="0",model_name="fake-model"} 0.0',
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="fake-model"}} '
                f"{min(used / usable, 1.0)}" if st.mode != "no_kv_usage" else "",
                f'vllm:num_preemptions_total{{engine="0",model_name="fake-model"}} '
                f"{float(st.preemptions)}",
                f'vllm:cache_config_info{{block_size="{st.block_size}",engine="0",'
                f'num_gpu_blocks="{st.blocks}",cache_dtype="auto"}} 1.0',
                "",
            ])
            raw = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        else:
            self._json(404, {"error": {"message": "not found"}})

    def _event(self, payload: Any) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()

    def do_POST(self) -> None:
        st = self.server.state
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        mode = st.mode
        with st.lock:
            st.bodies.append(body)
            sid = st.next_id
            st.next_id += 1
        if mode in ("429", "503"):
            self._json(int(mode), {"object": "error", "message": f"fake {mode}",
                                   "type": "Overloaded", "code": int(mode)})
            return
        if mode in ("400", "404"):  # vLLM 0.32.0's words for a prompt over its context; a model
            self._json(int(mode), {"object": "error", "type": "BadRequestError", "message": (
                "This model's maximum context length is 64 tokens. However, your prompt "
                "contains at least 65 input tokens, which exceeds this limit even without any "
                "output tokens." if mode == "400" else "The model `x` does not exist."),
                "code": int(mode)})
            return
        prompt = len(body["prompt"])
        n = int(body["max_tokens"])
        refusal, n = _vllm_front_end(prompt, n, int(body.get("min_tokens", 0)), st.max_model_len)
        if refusal:
            self._json(400, {"error": {"message": refusal, "type": "BadRequestError",
                                       "code": 400}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        per_chunk = 2 if mode == "merge" else 1
        sent = 0
        with st.lock:
            st.active[sid] = prompt
            st.max_active = max(st.max_active, len(st.active))
            st.max_kv_tokens = max(st.max_kv_tokens, st.kv_tokens())
        try:
            while sent < n:
                st.wait_for_gate()
                time.sleep(st.token_s * per_chunk)
                if st.dead:
                    self._reset()
                    return
                k = min(per_chunk, n - sent)
                sent += k
                with st.lock:
                    st.active[sid] = prompt + sent
                    st.max_kv_tokens = max(st.max_kv_tokens, st.kv_tokens())
                    if sent == n:  # done before the client can read it (and send again)
                        st.active.pop(sid)
                finish = "length" if sent == n else None
                self._event({"id": f"cmpl-{sid}", "object": "text_completion",
                             "choices": [{"index": 0, "text": "ab"[:k],
                                          "finish_reason": finish}], "usage": None})
                if sent == 3 and mode == "error_mid":
                    self._event({"error": {"message": "engine failed", "code": 500}})
                    return
                if sent == 3 and mode == "reset":
                    self._reset()
                    return
                if st.endless_min_tokens is not None and n >= st.endless_min_tokens:
                    while not st.release.wait(st.token_s):
                        self.wfile.write(b": still here\n\n")  # fails once the client left
                        self.wfile.flush()
                    return
                if sent == 2 and mode == "stall":
                    st.release.wait(GATE_WAIT_S)  # answers nothing more until the test ends
                    return
                if sent == 3 and mode == "truncated":
                    return
            if mode != "no_usage":
                self._event({"id": f"cmpl-{sid}", "object": "text_completion", "choices": [],
                             "usage": {"prompt_tokens": prompt, "completion_tokens": n,
                                       "total_tokens": prompt + n}})
            self._event("[DONE]")
            with st.lock:
                st.completions += 1
                die = st.completions == st.die_after_completions
            if die and st.on_die is not None:
                st.on_die()  # sequenced by completions, not by a timer
        except (BrokenPipeError, ConnectionResetError, OSError):
            with st.lock:
                st.disconnects += 1
        finally:
            with st.lock:
                st.active.pop(sid, None)


def _vllm_front_end(prompt: int, max_tokens: int, min_tokens: int, limit: int
                    ) -> tuple[str, int]:
    """vLLM 0.32.0's answer to a completion for its context ``limit``, as the live CPU vLLM
    gave it (tests/live: ``test_replay_over_the_context_as_vllm_answers``): its refusal's
    words, or '' and the ``max_tokens`` it serves (lowered to the context left)."""
    if prompt > limit:
        return (f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains at least {prompt} input tokens, which exceeds this limit even "
                "without any output tokens. Please reduce the length of the input prompt."), 0
    if max_tokens > limit:
        return (f"max_tokens={max_tokens} cannot be greater than max_model_len={limit}. "
                "Please request fewer output tokens."), 0
    max_tokens = min(max_tokens, limit - prompt)
    if max_tokens < 1:
        return f"max_tokens must be at least 1, got {max_tokens}.", 0
    if min_tokens > max_tokens:
        return (f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                f"got {min_tokens}."), 0
    return "", max_tokens


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops concurrent connects (retried after 1 s)

    def __init__(self, state: FakeState) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@dataclass
class Fake:
    state: FakeState
    url: str
    server: _FakeServer

    def kill(self) -> None:
        """Die like a crashed server: reset open streams, refuse new connections."""
        self.state.dead = True
        self.state.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[Fake]:
    state = FakeState()
    server = _FakeServer(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    fake = Fake(state, f"http://{host!s}:{port}", server)
    state.on_die = fake.kill
    yield fake
    state.release.set()
    if not state.dead:
        server.shutdown()
        server.server_close()
    thread.join(timeout=5)


def _stream(fake: Fake, prompt: int = 5, max_tokens: int = 8,
            read_timeout_s: float = 5.0) -> StreamResult:
    target = ServerTarget(fake.url, model="fake-model", read_timeout_s=read_timeout_s)

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as client:
            return await stream_completion(client, target, list(range(10, 10 + prompt)),
                                           max_tokens, clock=time.perf_counter)

    return asyncio.run(go())


# --- the client -------------------------------------------------------------------------------
def test_body_asks_for_exact_lengths_and_usage() -> None:
    body = completion_body(ServerTarget("http://127.0.0.1:1/v1/", model="m"), [1, 2, 3], 7)
    assert body["prompt"] == [1, 2, 3]
    assert body["max_tokens"] == 7 and body["min_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert ServerTarget("http://127.0.0.1:1/v1/").base_url == "http://127.0.0.1:1"
    with pytest.raises(ValueError, match="max_tokens"):
        completion_body(ServerTarget("http://x"), [1], 0)
    with pytest.raises(ValueError, match="http"):
        ServerTarget("ftp://x")


def test_stream_ok_times_every_token(fake: Fake) -> None:
    res = _stream(fake, prompt=5, max_tokens=8)
    assert res.ok, res.error
    assert res.output_tokens == 8 and res.usage_reported and res.prompt_tokens == 5
    assert len(res.chunk_s) == 8 and res.chunk_tokens == list(range(1, 9))
    assert res.sent_s < res.first_token_s <= res.chunk_s[-1] <= res.finished_s
    assert len(res.inter_chunk_gaps_s()) == 7
    assert all(g > 0 for g in res.inter_chunk_gaps_s())
    assert fake.state.bodies[0]["prompt"] == list(range(10, 15))


def test_merged_chunks_count_tokens_from_usage(fake: Fake) -> None:
    fake.state.mode = "merge"
    res = _stream(fake, max_tokens=9)
    assert res.ok
    assert len(res.chunk_s) == 5  # 2+2+2+2+1 tokens
    assert res.output_tokens == 9


def test_without_usage_chunks_are_counted(fake: Fake) -> None:
    fake.state.mode = "no_usage"
    res = _stream(fake, max_tokens=6)
    assert res.ok and not res.usage_reported and res.output_tokens == 6


@pytest.mark.parametrize("code", ["429", "503"])
def test_http_errors_are_data(fake: Fake, code: str) -> None:
    fake.state.mode = code
    res = _stream(fake)
    assert not res.ok
    assert res.http_status == int(code) and res.error_kind == "http"
    assert res.error == f"HTTP {code}: fake {code}"
    assert res.chunk_s == [] and res.output_tokens == 0


def test_error_event_mid_stream_is_data(fake: Fake) -> None:
    fake.state.mode = "error_mid"
    res = _stream(fake, max_tokens=10)
    assert res.error_kind == "stream_error" and "engine failed" in res.error
    assert res.output_tokens == 3 and len(res.chunk_s) == 3


def test_reset_connection_is_data(fake: Fake) -> None:
    fake.state.mode = "reset"
    res = _stream(fake, max_tokens=10)
    assert res.error_kind == "reset", res.error
    assert res.output_tokens == 3


def test_stream_cut_short_is_an_error(fake: Fake) -> None:
    fake.state.mode = "truncated"
    res = _stream(fake, max_tokens=10)
    assert res.error_kind == "reset" and "before its last event" in res.error
    assert res.output_tokens == 3


def test_stall_becomes_a_timeout(fake: Fake) -> None:
    fake.state.mode = "stall"
    res = _stream(fake, max_tokens=10, read_timeout_s=0.3)
    assert res.error_kind == "timeout" and res.output_tokens == 2


def test_connection_refused_is_data() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = ServerTarget(f"http://127.0.0.1:{port}", model="m", connect_timeout_s=1.0)

    async def go() -> StreamResult:
        async with httpx.AsyncClient() as client:
            return await stream_completion(client, target, [1, 2], 3, clock=time.perf_counter)

    res = asyncio.run(go())
    assert res.error_kind == "connect" and "cannot connect" in res.error


# --- the live gateway -------------------------------------------------------------------------
def _workload(n: int, prompt: int, output: int, gap_s: float = 0.0,
              tier: str = "batch", max_output: int | None = None) -> Workload:
    return from_columns([gap_s * i for i in range(n)], [prompt] * n, [output] * n,
                        max_output_tokens=[max_output or output] * n, tiers=[tier] * n)


def _replay(fake: Fake, workload: Workload, policy: str, out: Path, *, resume: bool = False,
            **params: Any) -> Any:
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02,
                          tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta(trace="test", policy=policy, policy_params=params, time_scale=1.0,
                      seed=0, url=fake.url)
    return replay(workload, make_policy(policy, params), config, out, meta=meta, resume=resume)


def test_conservative_keeps_kv_within_capacity(fake: Fake, tmp_path: Path) -> None:
    # usable capacity (20 - 1 null block) * 16 = 304 tokens; each request needs 40 + 60 = 100
    fake.state.token_s = 0.001
    w = _workload(8, 40, 60)
    out = _replay(fake, w, "conservative", tmp_path / "run")
    assert out.complete and not out.error
    rec = out.records
    assert list(rec["request_id"]) == list(range(8))
    assert (rec["status"] == "completed").all()
    assert (rec["output_tokens"] == 60).all()
    assert (rec["reserved_tokens"] == 112).all()  # 100 rounded up to blocks of 16
    assert fake.state.max_active == 2  # 3 * 112 > 304
    assert fake.state.max_kv_tokens <= 304
    assert (rec["ttft_s"] > 0).all() and (rec["e2e_s"] > rec["ttft_s"]).all()
    np.testing.assert_allclose(
        rec["tpot_s"], (rec["e2e_s"] - rec["ttft_s"]) / (rec["output_tokens"] - 1))
    # every request's prompt is the seeded one
    prompts = sorted(len(b["prompt"]) for b in fake.state.bodies)
    assert prompts == [40] * 8
    assert fake.state.bodies[0]["prompt"] in [prompt_token_ids(i, 40, 0, (10, 250))
                                              for i in range(8)]
    run = read_run(tmp_path / "run")
    assert set(RECORD_COLUMNS) <= set(run.records.columns)
    assert set(TIMELINE_COLUMNS) <= set(run.timeline.columns)
    assert run.summary["overall"]["completed"] == 8
    assert run.summary["kv_capacity_tokens"] == 304
    tl = out.timeline
    assert len(tl) >= 2 and (tl["kv_capacity_tokens"] == 304).all()
    assert tl["kv_reserved_tokens"].max() <= 224
    assert tl["kv_used_tokens"].max() > 0


def test_unlimited_lets_everything_through(fake: Fake, tmp_path: Path) -> None:
    fake.state.token_s = 0.001
    fake.state.gate = lambda: fake.state.max_active >= 8  # no token until all eight are in
    out = _replay(fake, _workload(8, 40, 30), "unlimited", tmp_path / "run")
    assert out.complete
    assert fake.state.max_active == 8


def test_every_request_gets_a_row_also_on_backend_errors(fake: Fake, tmp_path: Path) -> None:
    fake.state.mode = "503"
    out = _replay(fake, _workload(5, 10, 5), "conservative", tmp_path / "run")
    rec = out.records
    assert len(rec) == 5 and out.complete
    assert (rec["status"] == "rejected_overloaded").all()
    assert (rec["reason"] == "backend_error").all()
    assert rec["error"].str.startswith("HTTP 503").all()
    assert set(rec["status"]) <= set(STATUSES)


@pytest.mark.parametrize(("code", "status", "reason"), [
    ("400", "rejected_too_large", "prompt_too_long"),
    ("404", "rejected_overloaded", "server_404")])
def test_a_servers_refusal_is_recorded_as_serve_records_it(fake: Fake, tmp_path: Path,
                                                           code: str, status: str,
                                                           reason: str) -> None:
    # every refusal was rejected_overloaded / backend_error: a vLLM 400 for a prompt over its
    # context did not join the simulator's prompt_too_long, and kvbudget serve recorded the
    # same answers otherwise (live/gateway_server.py _failure)
    fake.state.mode = code
    rec = _replay(fake, _workload(3, 10, 5), "conservative", tmp_path / "run").records
    assert rec["status"].tolist() == [status] * 3
    assert rec["reason"].tolist() == [reason] * 3
    assert rec["error"].str.startswith(f"HTTP {code}").all()


def test_too_large_and_over_the_context_as_vllm_answers(fake: Fake, tmp_path: Path) -> None:
    # a prompt + output over max_model_len was refused by the replay itself (max_model_len),
    # never sent, though vLLM 0.32.0 serves it with its output cut at the context: it is sent
    # (min_tokens at the context left, which vLLM would refuse above its lowered max_tokens),
    # and the server answers each as workloads/context_limit.py says, as a simulation does
    fake.state.max_model_len = 64
    w = from_columns([0.0] * 5, [10, 1000, 40, 64, 10], [5, 5, 40, 5, 5],
                     max_output_tokens=[5, 5, 40, 5, 80], tiers=["batch"] * 5)
    out = _replay(fake, w, "conservative", tmp_path / "run")
    rec = out.records.set_index("request_id")
    assert rec["status"].tolist() == ["completed", "rejected_too_large", "completed",
                                      "rejected_too_large", "rejected_too_large"]
    assert rec.loc[1, "reason"] == ""  # larger than the KV capacity: the gateway's
    assert rec.loc[2, "output_tokens"] == 24  # 40 + 40 over 64: cut at the context left
    assert rec.loc[[3, 4], "reason"].tolist() == ["prompt_too_long", "context_length"]
    assert sorted((len(b["prompt"]), b["max_tokens"], b["min_tokens"])
                  for b in fake.state.bodies) == [(10, 5, 5), (10, 80, 5), (40, 40, 24),
                                                  (64, 5, 5)]
    assert out.summary["said"] == [
        "max_model_len 64 (the server's) cut the output of 1 request at the context left: "
        "their prompt + output is over it, and vLLM lowers max_tokens to max_model_len - "
        "prompt (served, not refused)"]
    # kvbudget report lists it with what the run assumed, as replay's output says it (before:
    # only replay's output did)
    res = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--out",
                                   str(tmp_path / "report")])
    assert res.exit_code == 0, res.output
    listed = (tmp_path / "report" / REPORT_FILE).read_text().split(
        "What the inputs did not say and the runs assumed:")[1].split("</ul>")[0]
    assert f"<li>{html.escape(out.summary['said'][0])} " in listed


def written_rows(part: Path) -> list[dict[str, Any]]:
    """The rows a running replay has written to a run directory's ``part`` so far (its complete
    lines only: the replay may be writing the next one); an event a fake's gate can wait on."""
    try:
        text = part.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.split("\n")[:-1] if line]  # last: '' or unended


def _row_written(run: Path, request_id: int) -> bool:
    return any(row["request_id"] == request_id for row in written_rows(run / REQUESTS_PART))


def test_interactive_deadline_expires_at_the_gateway(fake: Fake, tmp_path: Path) -> None:
    fake.state.token_s = 0.01
    # the two running streams send no token until request 2's row is written: it waits at the
    # gateway past its deadline on any machine (finishing them first would let it in)
    run = tmp_path / "run"
    fake.state.gate = lambda: _row_written(run, 2)
    w = from_columns([0.0, 0.0, 0.01], [100, 100, 100], [40, 40, 40], tiers=["batch"] * 3,
                     deadline_s=[np.nan, np.nan, 0.15])
    out = _replay(fake, w, "conservative", run)
    rec = out.records.set_index("request_id")
    assert rec.loc[0, "status"] == "completed" and rec.loc[1, "status"] == "completed"
    assert rec.loc[2, "status"] == "expired" and rec.loc[2, "reason"] == "deadline"


def test_lease_expiry_cancels_the_stream(fake: Fake, tmp_path: Path) -> None:
    """A stream that never ends is cut when its lease expires; one that ends (five tokens, two
    hundred times quicker than the lease) completes."""
    fake.state.token_s = 0.001
    fake.state.endless_min_tokens = 60  # request 1 never finishes: its lease must expire
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, lease_ttl_s=1.0,
                          tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta("t", "conservative", {}, 1.0, 0, fake.url)
    w = from_columns([0.0, 0.0], [10, 10], [5, 60], tiers=["batch"] * 2)
    out = replay(w, make_policy("conservative"), config, tmp_path / "run", meta=meta)
    rec = out.records.set_index("request_id")
    assert rec.loc[0, "status"] == "completed"
    assert rec.loc[1, "status"] == "preempted_dropped"
    assert rec.loc[1, "reason"] == "lease_expired"
    assert rec.loc[1, "num_preemptions"] == 1
    cut = out.records.loc[out.records["request_id"] == 1, "output_tokens"].to_numpy()
    assert int(cut[0]) == 1  # what it had generated when it was cut
    deadline = time.monotonic() + 5
    while fake.state.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # the server notices the closed connection at its next write
    assert fake.state.disconnects == 1


def test_preemptive_cancels_batch_streams(fake: Fake, tmp_path: Path) -> None:
    fake.state.token_s = 0.01
    # two long batch requests fill the budget; an interactive one arrives and revokes one. The
    # fake sends no token until the interactive request reaches it, which it can only do once
    # a batch lease is revoked (no batch can finish and free room first: its tokens are held):
    # the revocation happens on any machine, whatever the token times and the 0.1 s arrival
    fake.state.gate = lambda: any(b["max_tokens"] == 10 for b in fake.state.bodies)
    w = from_columns([0.0, 0.0, 0.1], [100, 100, 100], [40, 40, 10],
                     tiers=["batch", "batch", "interactive"])
    out = _replay(fake, w, "preemptive", tmp_path / "run", overcommit_ratio=1.0)
    rec = out.records.set_index("request_id")
    assert out.complete and (rec["status"] == "completed").all()
    assert rec["num_preemptions"].sum() >= 1
    assert out.summary["engine"]["num_gateway_revocations"] >= 1
    revoked = [int(r) for r in rec.index[rec["num_preemptions"] >= 1]]
    assert revoked and (rec.loc[revoked, "tier"] == "batch").all()
    prompts = [b["prompt"] for b in fake.state.bodies]
    let_in = next(i for i, b in enumerate(fake.state.bodies) if b["max_tokens"] == 10)
    for r in revoked:
        prompt = prompt_token_ids(r, 100, 0, (10, 250))
        # streamed again once the interactive request was in (whether its first attempt had
        # reached the server before the revocation is the machine's speed: on a loaded one it
        # had not, and the server saw no first attempt to cut)
        assert prompt in prompts[let_in + 1:]
        if prompt in prompts[:let_in]:  # that first attempt was cut: the server noticed
            deadline = time.monotonic() + 5
            while fake.state.disconnects < 1 and time.monotonic() < deadline:
                time.sleep(0.01)  # it notices the closed connection at its next write
            assert fake.state.disconnects >= 1


def test_server_dying_keeps_finished_rows_and_resumes(fake: Fake, tmp_path: Path) -> None:
    fake.state.token_s = 0.005
    fake.state.die_after_completions = 3  # an event, not a timer: the test holds on any machine
    w = _workload(12, 20, 20, gap_s=0.05)
    run = tmp_path / "run"
    out = _replay(fake, w, "conservative", run)
    assert fake.state.dead
    assert not out.complete and "stopped answering" in out.error
    done = len(out.records)
    # the three that finished before the crash; a stream past its last token when the server
    # died may still finish, one that was not cannot
    assert 3 <= done < 12
    assert (out.records["status"] == "completed").all()  # no row for the killed streams
    assert len(read_jsonl(run / REQUESTS_PART)) == done
    assert read_run(run).summary["complete"] is False

    # a new server; resume replays only what is missing
    state = FakeState(token_s=0.001)
    server = _FakeServer(state)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        fresh = Fake(state, f"http://127.0.0.1:{server.server_address[1]}", server)
        with pytest.raises(ValueError, match="--resume"):
            _replay(fresh, w, "conservative", run)
        with pytest.raises(ValueError, match="policy"):
            _replay(fresh, w, "overcommit", run, resume=True)
        again = _replay(fresh, w, "conservative", run, resume=True)
    finally:
        server.shutdown()
        server.server_close()
    assert again.complete and again.num_replayed == 12 - done
    assert len(state.bodies) == 12 - done
    assert sorted(again.records["request_id"]) == list(range(12))
    assert read_run(run).summary["complete"] is True


def test_unreachable_server_fails_before_writing(tmp_path: Path) -> None:
    from kvbudget.live.server import BackendUnavailable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = ReplayConfig(ServerTarget(f"http://127.0.0.1:{port}", connect_timeout_s=1.0))
    meta = ReplayMeta("t", "conservative", {}, 1.0, 0, "u")
    with pytest.raises(BackendUnavailable, match="cannot reach"):
        replay(_workload(2, 5, 5), make_policy("conservative"), config, tmp_path / "r",
               meta=meta)
    assert not (tmp_path / "r").exists()


def test_server_without_metrics_needs_a_capacity(fake: Fake, tmp_path: Path) -> None:
    fake.state.mode = "no_metrics"  # like llama.cpp started without --metrics
    with pytest.raises(ValueError, match="give the capacity in tokens explicitly"):
        _replay(fake, _workload(2, 10, 5), "conservative", tmp_path / "a")
    config = ReplayConfig(ServerTarget(fake.url), capacity_tokens=64, poll_period_s=0.02,
                          tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta("t", "conservative", {}, 1.0, 0, fake.url)
    out = replay(_workload(3, 10, 5), make_policy("conservative"), config, tmp_path / "b",
                 meta=meta)
    assert out.complete and len(out.timeline) == 0
    assert out.summary["kv_capacity_tokens"] == 64
    assert (out.records["reserved_tokens"] == 15).all()  # no block size known: exact tokens


def test_kv_used_the_server_does_not_tell_is_said_not_taken_as_zero(fake: Fake,
                                                                     tmp_path: Path) -> None:
    # a /metrics without vllm:kv_cache_usage_perc (TGI's, an older vLLM's) wrote 0 tokens of
    # KV in use on every timeline row, and the summary's KV used was 0 with no word; kvbudget
    # serve said it (live/serve_records.py): the replay now says it the same way
    fake.state.mode = "no_kv_usage"
    out = _replay(fake, _workload(3, 10, 5), "conservative", tmp_path / "run")
    assert out.complete and len(out.timeline) >= 2
    num = len(out.timeline)
    # whether a scrape fell within the run's short work follows the machine's timing: that
    # line (KV_UNSAMPLED, tested with its own workload) is left out of what is checked here
    assert _sampled(out.summary.get("assumed", [])) == [
        f"KV used: {num} of the timeline samples could not read it from the server's /metrics "
        "(no vllm:kv_cache_usage_perc, or no answer) and hold 0 tokens: the KV used figures "
        "(and the engines' preemptions) are not measured there"]
    assert any(line.startswith(f"assumed: KV used: {num} of the timeline")
               for line in setting_lines([out.summary]))
    fake.state.mode = "ok"
    told = _replay(fake, _workload(3, 10, 5), "conservative", tmp_path / "told")
    assert _sampled(told.summary.get("assumed", [])) == []
    assert _sampled(setting_lines([told.summary])) == []


def _sampled(lines: list[str]) -> list[str]:
    """``lines`` less the one saying no scrape fell within the run's work."""
    return [line for line in lines if "no scrape of the server's /metrics fell" not in line]


def test_scale_time() -> None:
    w = from_columns([0.0, 1.0, 3.0], [5, 5, 5], [5, 5, 5], deadline_s=[np.nan, 2.0, 3.5])
    s = scale_time(w, 0.5)
    np.testing.assert_allclose(s.arrival_s, [0.0, 0.5, 1.5])
    np.testing.assert_allclose(s.deadline_s, [np.nan, 1.5, 2.0])
    assert scale_time(w, 1.0) is w
    with pytest.raises(ValueError, match="time_scale"):
        scale_time(w, 0.0)


# --- the command line -------------------------------------------------------------------------
def _cli(*args: str) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    res = CliRunner().invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def _trace_file(path: Path, n: int, prompt: int = 20, output: int = 10) -> Path:
    path.write_text("".join(json.dumps({"arrival_s": 0.01 * i, "prompt_tokens": prompt,
                                        "output_tokens": output, "tier": "batch"}) + "\n"
                            for i in range(n)))
    return path


def test_replay_command_and_resume_message(fake: Fake, tmp_path: Path) -> None:
    trace = _trace_file(tmp_path / "t.jsonl", 6)
    out = tmp_path / "run"
    code, stdout, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--policy",
                                "overcommit", "--param", "overcommit_ratio=0.5", "--out",
                                str(out), "--poll-period", "0.05", "--max-output", "10")
    assert code == 0, stderr
    assert "overcommit" in stdout
    # what it wrote, each file named (token_gaps.parquet was left out of a fixed list)
    assert f"wrote {out}/requests.parquet, timeline.parquet, token_gaps.parquet, summary.json" \
        in stdout
    # the max_tokens it sent, which the trace did not give, said with the result
    assert " ".join(stderr.split()).startswith(
        "assumed: t: no max_tokens read from the file: max_output_tokens 10 (or the true output "
        "where longer)"), stderr
    # wrapped to the screen's width, as every other line
    assert max(len(line) for line in stderr.splitlines()) <= 100, stderr
    run = read_run(out)
    assert len(run.records) == 6 and (run.records["status"] == "completed").all()
    assert run.summary["policy_params"]["overcommit_ratio"] == 0.5
    code, _, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--out", str(out))
    assert code == 2 and "already holds a replay; pass --resume" in stderr
    code, stdout, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--policy",
                                "overcommit", "--param", "overcommit_ratio=0.5", "--out",
                                str(out), "--resume", "--json", "--max-output", "10")
    assert code == 0, stderr
    assert "resuming: 6 requests already done, 0 to replay" in stderr
    assert json.loads(stdout)["overall"]["completed"] == 6


def test_replay_takes_tiers_front_door_and_policy_from_a_scenario(fake: Fake,
                                                                  tmp_path: Path) -> None:
    """``--scenario``: the trace's tier ``gold`` exists only in the scenario's tiers; its front
    door lets two requests be in flight and refuses the rest (429, ``concurrency``); its policy
    is used unless ``--policy`` is given."""
    fake.state.token_s = 0.01
    out = tmp_path / "run"

    def four_turned_away() -> bool:  # the two admitted streams wait for the other four's rows
        part = out / REQUESTS_PART
        return part.exists() and part.read_text().count('"concurrency"') >= 4

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrival_s": 0.001 * i, "prompt_tokens": 20,
                                        "output_tokens": 10, "max_output_tokens": 10,
                                        "tier": "gold"}) + "\n"
                            for i in range(6)))
    scenario = tmp_path / "gw.toml"
    scenario.write_text(
        'policy = "overcommit"\npolicy_params = { overcommit_ratio = 0.5 }\n'
        "[front_door]\nmax_concurrent_requests = 2\n"
        '[[tiers]]\nname = "gold"\nmax_sequence_tokens = 512\npriority = 0\n')
    code, _, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--out",
                           str(tmp_path / "plain"), "--poll-period", "0.05")
    assert code == 2 and "tier 'gold' of the trace is not configured" in stderr
    fake.state.gate = four_turned_away
    code, stdout, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--scenario",
                                str(scenario), "--out", str(out), "--poll-period", "0.05")
    fake.state.gate = None
    assert code == 0, stderr
    assert "overcommit" in stdout
    run = read_run(out)
    assert run.summary["policy"] == "overcommit"
    assert run.summary["policy_params"]["overcommit_ratio"] == 0.5
    rec = run.records
    assert (rec["tier"] == "gold").all() and len(rec) == 6
    assert (rec["status"] == "completed").sum() == 2
    rejected = rec[rec["status"] != "completed"]
    assert set(rejected["reason"]) == {"concurrency"}, rec[["status", "reason"]]
    assert fake.state.max_active <= 2
    code, _, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--scenario",
                           str(scenario), "--policy", "conservative", "--out",
                           str(tmp_path / "run2"), "--poll-period", "0.05")
    assert code == 0, stderr
    assert read_run(tmp_path / "run2").summary["policy"] == "conservative"
    code, _, stderr = _cli("replay", "--url", fake.url, "--trace", str(trace), "--scenario",
                           str(tmp_path / "none.toml"), "--out", str(tmp_path / "run3"))
    assert code == 2 and "none.toml: no such scenario file" in stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--url", "ftp://x"], "server URL must start with http"),
    (["--policy", "nope"], "unknown policy 'nope'"),
    (["--param", "ratio"], "--param: expected key=value"),
    (["--param", "nope=1"], "has no parameter 'nope'"),
    (["--trace", "/nonexistent/t.jsonl"], "no such trace file"),
    (["--time-scale", "0"], "time_scale must be > 0"),
])
def test_replay_bad_input_is_one_line(fake: Fake, tmp_path: Path, args: list[str],
                                      message: str) -> None:
    base = {"--url": fake.url, "--trace": str(_trace_file(tmp_path / "t.jsonl", 2)),
            "--out": str(tmp_path / "run"), "--policy": "conservative"}
    for key, value in zip(args[::2], args[1::2], strict=True):
        base[key] = value
    code, _, stderr = _cli("replay", *[x for kv in base.items() for x in kv])
    assert code == 2, stderr
    assert stderr.startswith("error: ") and message in stderr and len(stderr.splitlines()) == 1


def test_replay_server_down_exits_1(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, stderr = _cli("replay", "--url", f"http://127.0.0.1:{port}", "--trace",
                           str(_trace_file(tmp_path / "t.jsonl", 2)), "--out",
                           str(tmp_path / "run"))
    assert code == 1 and stderr.startswith("error: cannot reach http://127.0.0.1")


def test_ctrl_c_keeps_what_finished(fake: Fake, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    fake.state.token_s = 0.01
    # after two completions the server holds every stream: the interrupt comes mid-run on any
    # machine, however slow the test is to send it
    fake.state.gate = lambda: fake.state.completions < 2
    trace = _trace_file(tmp_path / "t.jsonl", 30, prompt=20, output=20)
    out = tmp_path / "run"
    repo = Path(__file__).resolve().parents[3]
    # a shell starts background jobs with SIGINT ignored, and children inherit that: restore
    # Python's handler, as in an interactive terminal
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
            " sys.argv[0] = 'kvbudget'; runpy.run_module('kvbudget.cli.main', run_name='__main__')")
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, "replay", "--url", fake.url, "--trace", str(trace),
         "--out", str(out), "--max-output", "20", "--policy", "conservative"],
        cwd=repo, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        part = out / REQUESTS_PART
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if part.exists() and len(part.read_text().splitlines()) >= 2:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "error: interrupted; the requests that finished are in" in stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    run = read_run(out)
    assert 2 <= len(run.records) < 30 and run.summary["complete"] is False
