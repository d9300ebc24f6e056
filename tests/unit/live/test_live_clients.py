"""The live replay's clients against a fake server on 127.0.0.1 that answers 429 with
Retry-After: the replay waits at least that long (shown by the attempt times it recorded on
its own clock, not by timing the test) and records every attempt."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvbudget.live.openai_client import ServerTarget, retry_after_header
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.policies import INTERACTIVE, TierConfig, make_policy
from kvbudget.policies.clients import OPENAI_SDK, client_model
from kvbudget.results.run_result import read_run
from kvbudget.workloads import from_columns
from tests.unit.live.test_backends_live_gateway import GATE_WAIT_S

BATCH = TierConfig("batch", priority=1, queue_timeout_s=600.0, retryable_on_overload=True,
                   ttft_s=60.0, tpot_s=1.0)


@dataclass
class _State:
    refusals: int = 2  # the first requests answered 429
    refusal_status: int = 429  # or another status, its body the message below
    refusal_message: str = "slow down"
    retry_after: str = "1"
    token_s: float = 0.001
    # no first token until the test ends (release): a client timeout or a lease fires first
    # on any machine, where a first token some seconds late raced their timers
    stall: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    posts: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "fake", "max_model_len": 4096}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        st = self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        with st.lock:
            st.posts.append(time.perf_counter())
            refuse = st.refusals > 0
            st.refusals -= 1
        if refuse:
            self._json(st.refusal_status, {"error": {"message": st.refusal_message}},
                       {"Retry-After": st.retry_after})
            return
        n = int(body["max_tokens"])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            if st.stall:
                st.release.wait(GATE_WAIT_S)
            for k in range(1, n + 1):
                time.sleep(st.token_s)
                chunk = {"choices": [{"index": 0, "text": "a",
                                      "finish_reason": "length" if k == n else None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
            usage = {"choices": [], "usage": {"prompt_tokens": len(body["prompt"]),
                                              "completion_tokens": n}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


@pytest.fixture
def server() -> Iterator[tuple[_State, str]]:
    state = _State()
    srv = _Server(state)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    host, port = srv.server_address[:2]
    yield state, f"http://{host!s}:{port}"
    state.release.set()
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


def _replay(url: str, out: Path, clients: Any, n: int = 1, timeout_s: list[float] | None = None
            ) -> Any:
    w = from_columns([0.0] * n, [8] * n, [4] * n, tiers=["batch"] * n, timeout_s=timeout_s)
    config = ReplayConfig(target=ServerTarget(url, model="fake", read_timeout_s=10.0),
                          tiers=(INTERACTIVE, BATCH), capacity_tokens=10_000, block_size=16,
                          clients=clients, poll_period_s=0.05)
    meta = ReplayMeta(trace="t", policy="unlimited", policy_params={}, time_scale=1.0, seed=0,
                      url=url)
    return replay(w, make_policy("unlimited"), config, out, meta=meta)


def test_replay_honours_retry_after_and_records_every_attempt(
    server: tuple[_State, str], tmp_path: Path
) -> None:
    state, url = server
    outcome = _replay(url, tmp_path / "run", (("batch", OPENAI_SDK),))
    assert outcome.complete, outcome.error
    run = read_run(tmp_path / "run")
    rec = run.records
    assert rec.status.tolist() == ["completed"] and rec.num_attempts.tolist() == [3]
    att = run.attempts
    assert att is not None
    assert att.attempt.tolist() == [1, 2, 3]
    assert att.answer.tolist() == ["overloaded_retryable"] * 2 + ["completed"]
    assert att.retry_after_s.tolist()[:2] == [1.0, 1.0]
    # on the replay's own clock: each retry was sent no earlier than Retry-After after the
    # refusal it answered, and at the time the client model planned
    waits = (att.sent_s.to_numpy()[1:] - att.ended_s.to_numpy()[:-1]).tolist()
    assert all(w >= 1.0 for w in waits), waits
    assert att.next_attempt_s.tolist()[:2] == pytest.approx(
        (att.ended_s.to_numpy()[:2] + 1.0).tolist())
    assert len(state.posts) == 3  # the server saw every attempt
    # TTFT and E2E count from the first attempt, as the user lived them
    assert rec.e2e_s[0] >= 2.0 and rec.arrival_s[0] == att.sent_s[0]
    assert run.summary["tiers"]["batch"]["retry_amplification"] == 3.0
    assert run.summary["attempts"]["by_answer"] == {"completed": 1, "overloaded_retryable": 2}


def test_no_retry_client_gives_up_on_the_first_429(
    server: tuple[_State, str], tmp_path: Path
) -> None:
    _state, url = server
    _replay(url, tmp_path / "run", (("batch", client_model("no-retry")),))
    run = read_run(tmp_path / "run")
    assert run.records.status.tolist() == ["rejected_overloaded"]
    assert run.records.num_attempts.tolist() == [1]
    assert run.attempts is not None and run.attempts.reason.tolist() == ["server_429"]


@pytest.mark.parametrize(("status", "message", "attempts", "answer"), [
    (404, "The model `fake` does not exist.", 1, "refused"),
    (422, "Input validation error: `temperature` must be strictly positive", 1, "refused"),
    # TGI v3.3.7's 422 for a request over its context (validation.rs:999): too large
    (422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8. Given: 8 "
          "`inputs` tokens and 4 `max_new_tokens`", 1, "too_large"),
    (409, "conflict", 3, "backend_error"),  # the OpenAI SDK retries 408 and 409
])
def test_a_refusal_of_the_request_as_sent_is_not_retried(
    server: tuple[_State, str], tmp_path: Path, status: int, message: str, attempts: int,
    answer: str,
) -> None:
    # a 404 or 422 was a backend_error, which openai-sdk retried twice more (and
    # batch-pipeline for an hour): the OpenAI SDK retries only 408, 409, 429 and 5xx
    state, url = server
    state.refusals, state.refusal_status, state.refusal_message = 5, status, message
    state.retry_after = "0"
    _replay(url, tmp_path / "run", (("batch", OPENAI_SDK),))
    run = read_run(tmp_path / "run")
    assert run.records.num_attempts.tolist() == [attempts]
    assert run.attempts is not None and set(run.attempts.answer) == {answer}
    assert len(state.posts) == attempts


def test_client_timeout_cancels_the_stream(server: tuple[_State, str], tmp_path: Path) -> None:
    state, url = server
    state.refusals = 0
    state.stall = True
    _replay(url, tmp_path / "run", (), timeout_s=[0.3])
    run = read_run(tmp_path / "run")
    assert run.records.status.tolist() == ["client_timeout"]
    att = run.attempts
    assert att is not None and att.answer.tolist() == ["timeout"]
    assert att.ended_s[0] - att.sent_s[0] >= 0.3


def test_retry_after_header_forms() -> None:
    assert retry_after_header({"retry-after": "3"}) == 3.0
    assert retry_after_header({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    assert retry_after_header({"retry-after": "soon"}) is None
    assert retry_after_header({}) is None
    assert retry_after_header({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0


def test_replay_command_takes_clients(server: tuple[_State, str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    _state, url = server
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 8, "output_tokens": 4,
                                 "max_output_tokens": 4}) + "\n")
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["replay", "--url", url, "--trace", str(trace), "--tier",
                                   "batch", "--capacity-tokens", "10000", "--out", str(out),
                                   "--clients", "batch=openai-sdk", "--json"])
    assert res.exit_code == 0, res.output
    run = read_run(out)
    assert run.records.num_attempts.tolist() == [3]
    bad = CliRunner().invoke(app, ["replay", "--url", url, "--trace", str(trace), "--out",
                                   str(tmp_path / "bad"), "--clients", "bulk=openai-sdk"])
    assert bad.exit_code == 2 and "bulk" in bad.output


def test_live_gateway_answers_with_its_policys_retry_after(
    server: tuple[_State, str], tmp_path: Path
) -> None:
    # a budget for one request: the second is refused at the gateway (batch, retryably) with
    # the end of the first one's lease (4 output tokens at the tier's 0.1 s) as Retry-After;
    # its client (batch-pipeline) comes back no sooner than that
    state, url = server
    state.refusals = 0
    fast = TierConfig("batch", priority=1, queue_timeout_s=600.0, retryable_on_overload=True,
                      ttft_s=60.0, tpot_s=0.1)
    w = from_columns([0.0, 0.0], [8, 8], [4, 4], tiers=["batch", "batch"])
    config = ReplayConfig(target=ServerTarget(url, model="fake", read_timeout_s=10.0),
                          tiers=(INTERACTIVE, fast), capacity_tokens=16, block_size=16,
                          clients=(("batch", client_model("batch-pipeline")),),
                          poll_period_s=0.05)
    meta = ReplayMeta(trace="t", policy="conservative", policy_params={}, time_scale=1.0,
                      seed=0, url=url)
    policy = make_policy("conservative", {"batch_on_overload": "reject",
                                          "retry_after": "lease_ends"})
    outcome = replay(w, policy, config, tmp_path / "run", meta=meta)
    assert outcome.complete, outcome.error
    att = read_run(tmp_path / "run").attempts
    assert att is not None
    refused = att[att.answer == "overloaded_retryable"]
    assert len(refused) >= 1
    first = refused.iloc[0]
    assert first.retry_after_s == pytest.approx(0.4)
    again = att[(att.request_id == first.request_id) & (att.attempt == first.attempt + 1)]
    assert float(again.sent_s.iloc[0]) - float(first.ended_s) >= 0.4
    assert sorted(read_run(tmp_path / "run").records.status) == ["completed", "completed"]


def test_replay_takes_the_scenarios_lease_ttl(server: tuple[_State, str], tmp_path: Path) -> None:
    """``replay --scenario S`` used S's tiers, front door and policy but not its
    ``lease_ttl_s``: a lease lasted until its request ended, where the simulation of S drops the
    request at the TTL. The scenario's TTL applies now (``--lease-ttl`` over it)."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    state, url = server
    state.refusals = 0
    state.stall = True  # no first token before the lease's 0.3 s are up
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"arrival_s": 0, "prompt_tokens": 8, "output_tokens": 4,
                                 "max_output_tokens": 4}) + "\n")
    scenario = tmp_path / "s.toml"
    scenario.write_text('policy = "conservative"\nlease_ttl_s = 0.3\n')
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["replay", "--url", url, "--trace", str(trace), "--scenario",
                                   str(scenario), "--capacity-tokens", "10000", "--out", str(out),
                                   "--json"])
    assert res.exit_code == 0, res.output
    records = read_run(out).records
    assert records.status.tolist() == ["preempted_dropped"], records.T
