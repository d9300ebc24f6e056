"""Calibration from the outside, against a fake engine whose step times are known.

The fake engine (a thread on 127.0.0.1) batches continuously like vLLM: each step admits every
waiting request (its prompt is prefilled in that step and its first token comes out at the
end), decodes one token for every running request, and lasts
``intercept + per_decode_seq * decodes + per_prefill_token * prefill_tokens`` seconds; its
"API server" spends a fixed time on each request before handing it to the engine. The
calibration sees it only through the OpenAI API and must recover the step times and that
front-end time.

Two copies of it: :class:`VirtualEngine` runs on a virtual clock inside the test's event loop
(served through an httpx transport, no socket, no thread): a step advances the clock by its
duration only once every stream has taken the chunks of the previous step, so what the
calibration measures is exactly the fake's step times on any machine, however loaded. The
threaded HTTP server (:class:`FakeEngine` behind :class:`_Server`) keeps ``validate``'s
command-line test honest about the real transport; it asserts what a run produced, never how
fast it was. (``calibrate``'s command, whose success depends on when chunks arrive, measures
the virtual engine.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import signal
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from kvbudget.live.calibrate import (
    CalibrationPlan,
    GridPoint,
    calibrate,
    frontend_overhead,
    left_out_points,
    median_samples,
    plan_points,
    speed_check_async,
)
from kvbudget.live.calibrate_partial import CalibrationProgress
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.validate import untimed_said
from kvbudget.perf.cost_model import (
    FEATURES,
    LinearCostModel,
    load_cost_model,
    read_frontend_overhead,
)
from kvbudget.perf.fit import in_sample_classes
from kvbudget.results.run_result import read_run
from kvbudget.results.said import WIDTH, context_cut
from tests.cli.test_hostile_inputs import signalled

MAX_MODEL_LEN = 2048  # the fake server's
INTERCEPT_S = 0.004
PER_DECODE_SEQ_S = 0.0006
PER_PREFILL_TOKEN_S = 0.00002
PER_PREFILL_SEQ_S = 0.003  # a step with a new request pays this once (input preparation)
FRONTEND_S = 0.015  # what the fake's "API server" spends on a request before the engine


def true_step(prefill: float, decodes: float, prefill_seqs: float) -> float:
    return (INTERCEPT_S + PER_DECODE_SEQ_S * decodes + PER_PREFILL_TOKEN_S * prefill
            + PER_PREFILL_SEQ_S * prefill_seqs)


@dataclass(eq=False)
class _Seq:
    prompt: int
    max_tokens: int
    out: queue.Queue[int | None] = field(default_factory=queue.Queue)
    generated: int = 0


class FakeEngine:
    def __init__(self) -> None:
        self.waiting: list[_Seq] = []
        self.running: list[_Seq] = []
        self.cond = threading.Condition()
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def add(self, seq: _Seq) -> None:
        with self.cond:
            self.waiting.append(seq)
            self.cond.notify()

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not (self.waiting or self.running or self.stop):
                    self.cond.wait()
                if self.stop:
                    return
                new, self.waiting = self.waiting, []
                decoding = list(self.running)
            step = true_step(sum(s.prompt for s in new), len(decoding), len(new))
            deadline = time.perf_counter() + step
            while time.perf_counter() < deadline:  # sleep is too coarse for 1 ms steps
                time.sleep(min(0.0005, max(0.0, deadline - time.perf_counter())))
            with self.cond:
                for seq in [*decoding, *new]:
                    seq.generated += 1
                    seq.out.put(seq.generated)
                    if seq.generated >= seq.max_tokens:
                        seq.out.put(None)
                    elif seq in new:
                        self.running.append(seq)
                self.running = [s for s in self.running if s.generated < s.max_tokens]

    def close(self) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify()
        self.thread.join(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, raw: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            raw = json.dumps({"data": [{"id": "fake", "max_model_len": MAX_MODEL_LEN}]}).encode()
            self._send(200, raw, "application/json")
        elif self.path == "/metrics":
            self._send(200, self.server.metrics, "text/plain")
        else:
            self._send(200, b"{}", "application/json")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        # vLLM lowers max_tokens to the context left (max_model_len - prompt)
        seq = _Seq(len(body["prompt"]), min(int(body["max_tokens"]),
                                            MAX_MODEL_LEN - len(body["prompt"])))
        per_chunk_usage = body.get("stream_options", {}).get("continuous_usage_stats", False)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(FRONTEND_S)
        self.server.engine.add(seq)
        while (tokens := seq.out.get()) is not None:
            usage = {"prompt_tokens": seq.prompt, "completion_tokens": tokens}
            chunk = {"choices": [{"index": 0, "text": "a", "finish_reason":
                                  "length" if tokens == seq.max_tokens else None}],
                     "usage": usage if per_chunk_usage else None}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        final = {"choices": [], "usage": {"prompt_tokens": seq.prompt,
                                          "completion_tokens": seq.max_tokens}}
        self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the default 5 drops concurrent connects (retried after 1 s)

    def __init__(self, cache_labels: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.engine = FakeEngine()
        self.bodies: list[dict[str, Any]] = []
        self.metrics = (f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="257"'
                        f'{cache_labels}}} 1.0\n'
                        'vllm:num_preemptions_total{engine="0"} 0.0\n').encode()


# --- the same engine on a virtual clock ---------------------------------------------------------
@dataclass(eq=False)
class _VSeq:
    prompt: int
    max_tokens: int
    out: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    generated: int = 0


class VirtualEngine:
    """:class:`FakeEngine`'s batching and step times on a virtual clock (``now``, seconds).

    The engine is a task of the calibration's own event loop. Before each step it lets every
    other task run until all open streams wait for their next chunk (and nothing has changed
    for a while: a client between two requests gets there too); only then does the clock move
    by the step's duration. Every chunk is thus read, and timed by :meth:`clock`, at the end of
    the step that produced it; a request reaches the engine ``FRONTEND_S`` after it was sent.
    """

    SETTLE_YIELDS = 20

    def __init__(self, *, burst: bool = False, burst_streams: frozenset[int] = frozenset()
                 ) -> None:
        """``burst``: every stream sends its tokens four at a time, as an API server that fell
        behind the engine does; ``burst_streams``: only the streams of these indices do (0 is
        the first request the engine is sent)."""
        self.now = 0.0
        self.burst = burst
        self.burst_streams = burst_streams
        self.num_streams = 0
        self.waiting: list[tuple[float, _VSeq]] = []
        self.running: list[_VSeq] = []
        self.open = 0  # streams whose response is being read
        self.blocked = 0  # of those, the ones waiting for the engine
        self.epoch = 0  # bumped by anything a client does
        self.bodies: list[dict[str, Any]] = []
        self.num_steps = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    def clock(self) -> float:
        self.epoch += 1
        return self.now

    async def _settle(self) -> None:
        quiet = 0
        while quiet < self.SETTLE_YIELDS:
            before = self.epoch
            await asyncio.sleep(0)
            quiet = quiet + 1 if self.epoch == before and self.blocked == self.open else 0

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            await self._settle()
            new = [seq for t, seq in self.waiting if t <= self.now]
            if not new and not self.running:
                if self.waiting:
                    self.now = min(t for t, _ in self.waiting)
                else:
                    self._wake.clear()
                    await self._wake.wait()
                continue
            self.waiting = [(t, seq) for t, seq in self.waiting if t > self.now]
            decoding = list(self.running)
            self.now += true_step(sum(q.prompt for q in new), len(decoding), len(new))
            self.num_steps += 1
            for seq in [*decoding, *new]:
                seq.generated += 1
                seq.out.put_nowait(seq.generated)
                if seq.generated >= seq.max_tokens:
                    seq.out.put_nowait(None)
                elif seq in new:
                    self.running.append(seq)
            self.running = [q for q in self.running if q.generated < q.max_tokens]

    async def _events(self, seq: _VSeq, per_chunk_usage: bool, burst: bool
                      ) -> AsyncIterator[bytes]:
        assert self._wake is not None
        self.open += 1
        self.epoch += 1
        self.waiting.append((self.now + FRONTEND_S, seq))
        self._wake.set()
        closed = False
        try:
            while True:
                self.blocked += 1
                tokens = await seq.out.get()
                self.blocked -= 1
                self.epoch += 1
                if tokens is None:
                    break
                if burst and tokens % 4 and tokens != seq.max_tokens:
                    continue  # an API server that fell behind: several tokens in one chunk
                usage = {"prompt_tokens": seq.prompt, "completion_tokens": tokens}
                chunk = {"choices": [{"index": 0, "text": "a", "finish_reason":
                                      "length" if tokens == seq.max_tokens else None}],
                         "usage": usage if per_chunk_usage else None}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            # nothing more comes from the engine: the stream no longer holds it back (a client
            # stops reading at [DONE], so the generator may never be resumed to its end)
            closed = True
            self.open -= 1
            final = {"choices": [], "usage": {"prompt_tokens": seq.prompt,
                                              "completion_tokens": seq.max_tokens}}
            yield f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode()
        finally:
            if not closed:
                self.open -= 1
            self.epoch += 1

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self._task is None:  # started in the calibration's event loop, on its first call
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop())
        path = request.url.path
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "fake", "max_model_len": 2048}]})
        if path == "/metrics":
            return httpx.Response(200, text=(
                'vllm:cache_config_info{block_size="16",num_gpu_blocks="257"} 1.0\n'
                'vllm:num_preemptions_total{engine="0"} 0.0\n'))
        if path != "/v1/completions":
            return httpx.Response(200, json={})
        body = json.loads(await request.aread())
        self.bodies.append(body)
        seq = _VSeq(len(body["prompt"]), int(body["max_tokens"]))
        per_chunk = bool(body.get("stream_options", {}).get("continuous_usage_stats", False))
        burst = self.burst or self.num_streams in self.burst_streams
        self.num_streams += 1
        return httpx.Response(200, headers={"Content-Type": "text/event-stream"},
                              content=self._events(seq, per_chunk, burst))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def calibrate(self, plan: CalibrationPlan, target: ServerTarget | None = None,
                  **kwargs: Any) -> Any:
        plan = replace(plan, idle_gap_s=0.0)  # the engine is idle between requests anyway
        try:
            return calibrate(target or ServerTarget("http://fake.invalid"), plan,
                             clock=self.clock, transport=self.transport(), **kwargs)
        finally:
            self._task = None  # the event loop it ran in is closed


@pytest.fixture
def fake_url() -> Iterator[str]:
    with _serving(_Server()) as url:
        yield url


@contextlib.contextmanager
def _serving(server: _Server) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        server.engine.close()
        thread.join(timeout=5)


PLAN = CalibrationPlan(prefill_tokens=(16, 128, 512, 1024), decode_batches=(1, 2, 4, 8),
                       context_tokens=(32, 256), decode_tokens=24, background_tokens=160,
                       repeats=2, warmup=1, max_num_seqs=8, max_num_batched_tokens=2048)


def test_calibration_recovers_known_step_times(tmp_path: Path) -> None:
    engine = VirtualEngine()
    seen: list[GridPoint] = []
    cal = engine.calibrate(PLAN, on_point=lambda p, d, t: seen.append(p))
    assert cal.info.model == "fake" and cal.info.kv_capacity_tokens == 256 * 16
    assert len(seen) == PLAN.repeats * len(plan_points(PLAN, 4096, 2048))
    # on the virtual clock every prefill stall is seen and every decode run overlaps
    assert cal.notes == []
    assert cal.fit.mape < 0.01, cal.fit.table
    m = cal.model
    for prefill, decodes in ((0, 1), (0, 4), (0, 8), (16, 1), (512, 1), (1024, 1)):
        seqs = 1 if prefill else 0
        truth = true_step(prefill, decodes, seqs)
        got = m.step_time(float(prefill), float(decodes), float(prefill + 64 * decodes),
                          float(prefill * prefill), float(seqs))
        assert got == pytest.approx(truth, rel=0.02), (prefill, decodes)
    # the per-request prefill cost is found as such, not folded into the per-token cost
    assert m.per_prefill_seq_s == pytest.approx(PER_PREFILL_SEQ_S, rel=0.1)
    # the fake's front end is what an idle request waits beyond its prefill step
    assert cal.frontend_overhead_s == pytest.approx(FRONTEND_S, rel=0.05)
    out = tmp_path / "cost.json"
    cal.save(out)
    assert load_cost_model(out) == m
    assert read_frontend_overhead(out) == cal.frontend_overhead_s
    payload = json.loads(out.read_text())
    assert payload["calibration"]["model"] == "fake"
    assert payload["fit"]["num_samples"] == cal.fit.num_samples


def test_virtual_calibration_is_the_same_every_time() -> None:
    """Nothing of the machine's speed reaches the measurement: two runs give the same bits."""
    plan = replace(PLAN, prefill_tokens=(64, 512), decode_batches=(1, 4), repeats=1)
    a, b = VirtualEngine().calibrate(plan), VirtualEngine().calibrate(plan)
    assert a.samples.equals(b.samples) and a.idle_ttft.equals(b.idle_ttft)
    assert a.model == b.model and a.frontend_overhead_s == b.frontend_overhead_s


def test_plan_points_respect_the_server() -> None:
    plan = CalibrationPlan(prefill_tokens=(16, 512, 4096), decode_batches=(1, 8, 64),
                           context_tokens=(64, 1024), decode_tokens=64, background_tokens=64,
                           max_num_seqs=8, max_num_batched_tokens=2048)
    pts = plan_points(plan, capacity_tokens=1152, max_model_len=1024)
    assert GridPoint("prefill", 1, 16) in pts and GridPoint("prefill", 1, 512) in pts
    assert all(p.seq_len < 1024 for p in pts if p.kind == "prefill")
    decode = [(p.num_seqs, p.seq_len, p.tokens) for p in pts if p.kind == "decode"]
    # 1 x 1024: no token left below max_model_len; 8 x 1024 does not fit; 64 > max_num_seqs
    assert decode == [(1, 64, 64), (8, 64, 64)]
    fewer = plan_points(replace(plan, decode_tokens=128), capacity_tokens=1152,
                        max_model_len=1024)
    # 8 streams of 64-token prompts have room for 1152 / 8 - 65 = 79 tokens each
    assert [(p.num_seqs, p.seq_len, p.tokens) for p in fewer if p.kind == "decode"] == [
        (1, 64, 128), (8, 64, 79)]
    # each point left out is said, with what of the server it does not fit (before: the
    # command said "fitted on N grid points" and nothing of the points it never measured)
    assert left_out_points(plan, capacity_tokens=1152, max_model_len=1024) == [
        "prefill 4096: left out, over max_model_len 1,024",
        "decode 1x1024: left out, fewer than 32 tokens each to decode within max_model_len 1,024",
        "decode 8x1024: left out, 8 x 1024 prompt tokens over one step of "
        "max_num_batched_tokens 2,048",
        "decode 64x64: left out, more streams than max_num_seqs 8",
        "decode 64x1024: left out, more streams than max_num_seqs 8"]
    assert ("decode 8x64: left out, 8 streams of 64 + 32 tokens over the KV capacity of 600 "
            "tokens") in left_out_points(plan, capacity_tokens=600, max_model_len=1024)
    # docs/live.md's example: the CPU vLLM of the live tests (1,152 usable KV tokens)
    assert ("decode 4x256: left out, 4 streams of 256 + 32 tokens over the KV capacity of "
            "1,152 tokens") in left_out_points(CalibrationPlan(decode_batches=(4,)),
                                               capacity_tokens=1152, max_model_len=1024)
    with pytest.raises(ValueError, match="repeats"):
        CalibrationPlan(repeats=0)
    with pytest.raises(ValueError, match="prefill_tokens"):
        CalibrationPlan(prefill_tokens=())


def test_median_samples_and_overhead() -> None:
    rows = []
    for rep, t in enumerate((0.010, 0.012, 0.011)):
        rows.append({"num_prefill_tokens": 0, "num_decode_seqs": 2, "num_context_tokens": 100,
                     "prefill_attention": 0, "num_prefill_seqs": 0, "step_time_s": t, "kind": "decode", "num_seqs": 2,
                     "seq_len": 40, "repeat": rep})
    med = median_samples(pd.DataFrame(rows))
    assert len(med) == 1 and med["step_time_s"].iloc[0] == pytest.approx(0.011)
    assert list(med.columns[: len(FEATURES)]) == list(FEATURES)
    model = LinearCostModel(0.004, 1e-5, 0.0, 0.0)
    idle = pd.DataFrame({"prompt_tokens": [100, 100, 200], "repeat": [0, 1, 0],
                         "ttft_s": [0.015, 0.016, 0.017]})
    # excess over the model: 0.010, 0.011, 0.011
    assert frontend_overhead(idle, model) == pytest.approx(0.011)
    assert frontend_overhead(idle.iloc[:0], model) == 0.0
    assert np.isfinite(frontend_overhead(idle, LinearCostModel(1.0, 0, 0, 0)))
    assert frontend_overhead(idle, LinearCostModel(1.0, 0, 0, 0)) == 0.0


def test_calibrate_and_validate_commands(fake_url: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole loop through the command line: calibrate writes a cost model that validate
    reads, replays the held-out trace through a real socket, simulates it and reports both.

    The calibration's streams go to the fake on the virtual clock: whether a prefill stall is
    seen depends on when chunks arrive (within 2 ms), which a threaded server on a loaded
    machine does not promise (CI once timed 1 of 3 prefill points). What the command does with
    the measurement (the plan from its options, the progress bar, the file, the table) is the
    same either way."""
    from typer.testing import CliRunner

    import kvbudget.cli.live as live_commands
    from kvbudget.cli.main import app

    engine = VirtualEngine()

    def on_the_virtual_clock(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any
                             ) -> Any:
        assert target.base_url == fake_url  # the command's --url, unchanged
        return engine.calibrate(plan, target, **kwargs)

    monkeypatch.setattr(live_commands, "calibrate", on_the_virtual_clock)  # as it calls it
    runner = CliRunner()
    cost = tmp_path / "cost.json"
    # two context lengths: with one, the decode points cannot tell the per-sequence cost from
    # the per-context-token cost (context = sequences x length)
    res = runner.invoke(app, ["calibrate", "--url", fake_url, "--out", str(cost),
                              "--prefill-tokens", "64,256,1024", "--decode-batches", "1,4,8",
                              "--context-tokens", "64,256", "--repeats", "2", "--max-num-seqs",
                              "64", "--seed", "7"])
    assert res.exit_code == 0, res.stderr
    assert "intercept_s" in res.stdout and "frontend_overhead_s" in res.stdout
    assert f"wrote {cost}" in res.stdout
    payload = json.loads(cost.read_text())
    assert payload["calibration"]["plan"]["prefill_tokens"] == [64, 256, 1024]
    assert payload["calibration"]["plan"]["retries"] == 2 and payload["fit"]["mape"] < 0.01
    # --seed draws the prompts' token ids (before: accepted with --url and unused, the plan's
    # seed 0 whatever was given)
    assert payload["calibration"]["plan"]["seed"] == 7
    assert engine.bodies  # the streams went to the virtual engine
    # no --gpu: the file cannot say what it was fitted on, and the command says so
    assert "fitted_on" not in payload
    assert (f"note: {cost} does not record the GPU and model it was fitted on (the GPU is not "
            "given (--gpu))") in res.stderr
    # the batch limit it was not given is said as assumed (a server does not tell it), before
    # the grid is timed: the file records it and validate simulates it
    assert ("assumed: the server runs with --max-num-batched-tokens 2,048 (kvbudget's "
            "defaults; a server does not tell them)") in " ".join(res.stderr.split())

    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / 10, 40))
    trace = tmp_path / "heldout.jsonl"
    trace.write_text("".join(
        json.dumps({"arrival_s": float(t), "prompt_tokens": int(p), "output_tokens": int(o),
                    "max_output_tokens": int(o), "tier": "batch"}) + "\n"
        for t, p, o in zip(arrivals, rng.integers(32, 512, 40), rng.integers(16, 64, 40),
                           strict=True))
        # one more, over the context: the server cuts its output at the context left
        + json.dumps({"arrival_s": float(arrivals[-1]) + 1.0, "prompt_tokens": MAX_MODEL_LEN - 8,
                      "output_tokens": 32, "max_output_tokens": 32, "tier": "batch"}) + "\n")
    out = tmp_path / "val"
    res = runner.invoke(app, ["validate", "--url", fake_url, "--trace", str(trace),
                              "--cost-model", str(cost), "--policy", "unlimited",
                              "--correct-drift", "--out", str(out), "--poll-period", "0.1"])
    assert res.exit_code == 0, res.stderr
    assert "ttft_p50_s" in res.stdout and "per-request" in res.stdout
    # which way its errors point is said, and the per-request MAPE (a mean of absolute errors)
    # has no sign (it printed "+57.9%", test_screens77)
    assert "rel. error: (simulated - measured) / measured, + where the simulation is higher" \
        in res.stdout
    lines = res.stdout.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("per-request")))
    mapes = [ln.split()[-1] for ln in lines[head + 2:head + 5]]
    assert all(re.fullmatch(r"\d+\.\d%|-", m) for m in mapes), lines[head:head + 5]
    # its p99s over 41 requests are about the maximum: said as validate --records says it
    # (the live validation said nothing of it before)
    assert ("few requests: TTFT, TPOT and E2E over 41 requests: a p99 over 100 or fewer lies "
            "between the two largest values") in " ".join(res.stdout.split())
    # what the server did that changes the answer, as replay's output says it (before: replay's
    # output only)
    live = read_run(out / "live").summary
    assert live["said"] and context_cut("max_model_len 2,048 (the server's)", 1) in live["said"]
    assert textwrap.fill(live["said"][0], WIDTH, subsequent_indent="  ",
                         break_on_hyphens=False) in res.stdout
    for name in ("validation.csv", "validation.json", "validate.png", "live/requests.parquet",
                 "sim/requests.parquet"):
        assert (out / name).is_file(), name
    report = json.loads((out / "validation.json").read_text())
    assert report["engine"]["max_num_seqs"] == 64  # from the calibration
    # what it simulated the server as, and where each figure came from, is said
    assert ("simulated the server as it tells itself: 256 usable KV blocks of 16 tokens "
            "(/metrics), prefix caching on (vLLM's default; /metrics does not say), "
            "max_model_len 2,048 (/v1/models); max_num_seqs 64 and max_num_batched_tokens "
            "2,048 from cost.json's calibration plan") in " ".join(res.stdout.split())
    # what it assumed of the server's scheduling, said and recorded (vLLM's GPU default)
    assert ("simulated with async scheduling on (vLLM's default on GPUs; a CPU vLLM runs "
            "without it: --no-async-scheduling)") in res.stdout
    assert report["engine"]["async_scheduling"] is True
    # the decode steps timed around the replay, against the calibrated model (their values are
    # wall-clock measurements of a threaded fake on a shared machine: how close they come is
    # the virtual-clock tests' business, not this one's)
    assert "decode step now vs the calibration" in res.stdout
    for when in ("before", "after"):
        check = report["speed_check"][when]
        assert check["num_seqs"] == 4 and np.isfinite(check["drift"]), check
    # --correct-drift: a second simulation with the steps scaled by the checks' mean speed
    fixed = report["drift_corrected"]
    assert fixed["factor"] == pytest.approx(1 + (report["speed_check"]["before"]["drift"]
                                                 + report["speed_check"]["after"]["drift"]) / 2)
    assert (out / "sim-drift-corrected" / "requests.parquet").is_file()
    assert "the speed checks' mean" in res.stdout
    metrics = {m["metric"]: m for m in report["metrics"]}
    assert metrics["completed"]["simulated"] == metrics["completed"]["measured"] == 41
    for key in ("ttft_p50_s", "tpot_p50_s", "output_tokens_per_s", "e2e_p50_s"):
        assert np.isfinite(metrics[key]["rel_error"]), (key, res.stdout)
    # the same directory again is refused; an impossible --max-error fails with code 1
    res = runner.invoke(app, ["validate", "--url", fake_url, "--trace", str(trace),
                              "--cost-model", str(cost), "--out", str(out)])
    assert res.exit_code == 2 and "not empty" in res.stderr
    # (a trace without tiers: what its load assumed is said, as simulate and replay say it)
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "tier"})
                            + "\n" for line in trace.read_text().splitlines()))
    res = runner.invoke(app, ["validate", "--url", fake_url, "--trace", str(bare),
                              "--cost-model", str(cost), "--policy", "unlimited", "--out",
                              str(tmp_path / "val2"), "--max-error", "0"])
    assert res.exit_code == 1 and "more than --max-error 0.0%" in res.stderr
    assert "assumed: bare: the file names no tier: every request is 'interactive'" in res.stderr
    # the flag is the live run's: a recorded run is refused it rather than ignoring it
    res = runner.invoke(app, ["validate", "--records", str(out / "live"), "--cost-model",
                              str(cost), "--no-async-scheduling", "--out", str(tmp_path / "v3")])
    assert res.exit_code == 2, res.stdout
    assert res.stderr.strip() == ("error: --no-async-scheduling applies to a live validation "
                                  "(--url), not to --records")


def test_mixed_step_ignores_late_chunks_inside_the_window() -> None:
    from kvbudget.live.calibrate import mixed_step_from
    from kvbudget.live.openai_client import StreamResult

    # background: a decode step every 4 ms; the prompt is sent at 30.5 ms, its step (10 ms)
    # runs after two more decode steps (ending 32, 36), from 36 to 46 ms
    times = [4.0 * i for i in range(1, 10)] + [46.0, 50.0, 54.0]
    background = StreamResult(sent_s=0.0, chunk_s=[t / 1000 for t in times],
                              chunk_tokens=list(range(1, 13)))
    probe = StreamResult(sent_s=0.0305, chunk_s=[0.0461])
    got = mixed_step_from(background, probe, tolerance_s=0.001)
    assert got is not None
    assert got[0] == pytest.approx(0.010) and got[1] == 16 + 10
    # the chunk of the step ending at 36 ms delivered late, with the next one
    late = list(background.chunk_s)
    late[8] = 0.0459
    got = mixed_step_from(StreamResult(sent_s=0.0, chunk_s=late,
                                       chunk_tokens=background.chunk_tokens), probe,
                          tolerance_s=0.001)
    assert got is not None and got[0] == pytest.approx(0.010)
    # a probe sent before the background has run a few steps tells nothing
    early = StreamResult(sent_s=0.005, chunk_s=[0.0461])
    assert mixed_step_from(background, early, tolerance_s=0.001) is None


def test_tokens_in_bursts_fail_the_calibration_clearly() -> None:
    from kvbudget.live.calibrate import CalibrationFailed, merged_fraction

    assert merged_fraction([1, 2, 3, 4]) == 0.0
    assert merged_fraction([1, 4, 8, 9]) == pytest.approx(2 / 3)
    plan = replace(PLAN, prefill_tokens=(64, 256), decode_batches=(1, 2), repeats=1)
    with pytest.raises(CalibrationFailed, match="in bursts"):
        VirtualEngine(burst=True).calibrate(plan)
    # the notes it quotes are the misses, not the points left out for the server (which came
    # first and crowded them out: 'notes: decode 16x32: left out, ...; decode 16x256: ...')
    wider = replace(plan, decode_batches=(1, 2, 16, 32, 64))
    with pytest.raises(CalibrationFailed) as failed:
        VirtualEngine(burst=True).calibrate(wider)
    assert "left out" not in str(failed.value)
    assert "notes: prefill 64: stall not seen (repeat 0, try 1)" in str(failed.value)


def test_a_point_the_streams_could_not_time_is_measured_again() -> None:
    """The first prefill point's background stream comes in bursts (its API server fell
    behind), so its stall is not seen; the point is measured again within the repeat, and the
    fit is the one a clean run gives. With no retries the point is missing from that repeat."""
    plan = replace(PLAN, prefill_tokens=(64, 256, 1024), decode_batches=(1, 4), repeats=1)
    clean = VirtualEngine().calibrate(plan)
    # request 0 is the warm-up stream; point "prefill 64" sends its idle probe (1), then the
    # background (2) and the probe beside it (3)
    retried = VirtualEngine(burst_streams=frozenset({2})).calibrate(plan)
    assert retried.notes == ["prefill 64: stall not seen (repeat 0, try 1)"]
    assert len(retried.samples) == len(clean.samples)
    pd.testing.assert_frame_equal(retried.samples, clean.samples, rtol=1e-9)
    once = VirtualEngine(burst_streams=frozenset({2})).calibrate(replace(plan, retries=0))
    assert once.notes == retried.notes
    assert sorted(once.samples.loc[once.samples["kind"] == "prefill", "seq_len"]) == [256, 1024]
    with pytest.raises(ValueError, match="retries"):
        replace(plan, retries=-1)


def _cost_file(path: Path) -> Path:
    """A linear cost file as calibrate --url writes one, its plan's batch limits included."""
    path.write_text(json.dumps({
        "kind": "linear", "coefficients": {
            "intercept_s": INTERCEPT_S, "per_prefill_token_s": PER_PREFILL_TOKEN_S,
            "per_decode_seq_s": PER_DECODE_SEQ_S, "per_context_token_s": 0.0,
            "per_prefill_seq_s": PER_PREFILL_SEQ_S},
        "frontend_overhead_s": FRONTEND_S,
        "calibration": {"plan": {"max_num_seqs": 8, "max_num_batched_tokens": 1024}}}))
    return path


def test_validate_simulates_the_servers_prefix_caching(tmp_path: Path) -> None:
    """A server run with --no-enable-prefix-caching (its /metrics says so) shares no KV
    between prompts; before, validate --url simulated vLLM's default (on) whatever the server
    said, so a trace with prefix hashes had prefix hits on the simulated side only (on the CPU
    vLLM: 75 % of the prompt tokens of a Mooncake trace)."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    trace = tmp_path / "mooncake.jsonl"  # 600-token prompts sharing their first 512 tokens
    trace.write_text("".join(json.dumps(
        {"timestamp": 40 * i, "input_length": 600, "output_length": 8, "hash_ids": [1, 10 + i]})
        + "\n" for i in range(6)))
    cost = _cost_file(tmp_path / "cost.json")
    with _serving(_Server(',enable_prefix_caching="False"')) as url:
        res = CliRunner().invoke(app, [
            "validate", "--url", url, "--trace", str(trace), "--cost-model", str(cost),
            "--max-output", "16", "--no-speed-check", "--max-num-seqs", "4",
            "--out", str(tmp_path / "val")])
    assert res.exit_code == 0, res.stderr
    sim = json.loads((tmp_path / "val" / "sim" / "summary.json").read_text())
    assert sim["engine"]["prefix_caching"] is False
    assert sim["engine"]["prefix_cache_hit_tokens"] == 0
    report = json.loads((tmp_path / "val" / "validation.json").read_text())
    assert report["engine"]["enable_prefix_caching"] is False
    said = " ".join(res.stdout.split())
    assert ("simulated the server as it tells itself: 256 usable KV blocks of 16 tokens "
            "(/metrics), prefix caching off (/metrics), max_model_len 2,048 (/v1/models); "
            "max_num_seqs 4 and max_num_batched_tokens 1,024 --max-num-seqs as given, the "
            "other from cost.json's calibration plan, what calibrate was given or else its "
            "defaults, which the server does not tell") in said


def test_validate_that_completes_nothing_says_why(tmp_path: Path) -> None:
    """Every request refused by the gateway (prompt + the max_tokens assumed for a file that
    has none, over its budget): before, the one line said only that none completed, and
    what the trace's load assumed (the max_tokens) was never printed."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    trace = tmp_path / "mooncake.jsonl"
    trace.write_text("".join(json.dumps(
        {"timestamp": 40 * i, "input_length": 1900, "output_length": 8}) + "\n"
        for i in range(3)))
    with _serving(_Server()) as url:
        res = CliRunner().invoke(app, [
            "validate", "--url", url, "--trace", str(trace), "--cost-model",
            str(_cost_file(tmp_path / "cost.json")), "--no-speed-check",
            "--capacity-tokens", "3000", "--out", str(tmp_path / "val")])
    assert res.exit_code == 1, res.stdout
    err = " ".join(res.stderr.split())
    assert ("error: the replay completed none of its 3 requests (3 rejected_too_large); "
            "nothing to validate against") in err
    assert "no max_tokens read from the file: max_output_tokens 2,048" in err


class _CtrlC:
    """``on_point`` that presses Ctrl-C once ``after`` grid measurements are finished."""

    def __init__(self, after: int) -> None:
        self.after = after

    def __call__(self, point: GridPoint, done: int, total: int) -> None:
        if done == self.after:
            raise KeyboardInterrupt


def test_an_interrupted_calibration_keeps_its_work_and_resumes() -> None:
    """Ctrl-C after 5 of the grid's measurements: before, all of them were lost. The progress
    object holds the 5 finished; a resume measures only the rest (requests counted at the
    engine) and fits exactly what an uninterrupted run fits (the virtual clock)."""
    plan = replace(PLAN, prefill_tokens=(64, 512), decode_batches=(1, 4), repeats=2)
    full_engine = VirtualEngine()
    full = full_engine.calibrate(plan)
    kept = CalibrationProgress()
    with pytest.raises(KeyboardInterrupt):
        VirtualEngine().calibrate(plan, on_point=_CtrlC(5), progress=kept)
    assert kept.num_done == 5
    assert kept.done[0] == ("prefill", 1, 64, 0)
    total = len(plan_points(plan, 4096, 2048)) * plan.repeats
    rest = VirtualEngine()
    seen: list[int] = []
    resumed = rest.calibrate(plan, on_point=lambda p, d, t: seen.append(d),
                             progress=CalibrationProgress.load(_saved(kept)))
    assert seen == list(range(6, total + 1))  # only the rest, counted on from the kept
    assert resumed.notes == [f"resumed: 5 of the {total} grid measurements were made by an "
                             "earlier, interrupted run (kept): a change of the server's speed "
                             "between the two runs is in the fit"]
    assert len(rest.bodies) < len(full_engine.bodies)
    keys = ["repeat", "kind", "num_seqs", "seq_len"]
    # the same steps timed at other virtual times: equal to float rounding
    pd.testing.assert_frame_equal(
        resumed.samples.sort_values(keys).reset_index(drop=True),
        full.samples.sort_values(keys).reset_index(drop=True), check_exact=False, rtol=1e-9)
    numbers = {k: v for k, v in asdict(full.model).items() if isinstance(v, float)}
    assert numbers and {k: getattr(resumed.model, k) for k in numbers} == pytest.approx(
        numbers, rel=1e-9, abs=1e-15)
    assert resumed.frontend_overhead_s == pytest.approx(full.frontend_overhead_s, rel=1e-9)


def _saved(kept: CalibrationProgress) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "cost.partial.json"
    kept.save(path)
    return path


def test_a_resume_refuses_measurements_of_another_plan() -> None:
    """Measurements kept with one plan are not mixed into another's fit: one line naming the
    file and the field."""
    plan = replace(PLAN, prefill_tokens=(64, 512), decode_batches=(1, 4), repeats=1)
    kept = CalibrationProgress()
    with pytest.raises(KeyboardInterrupt):
        VirtualEngine().calibrate(plan, on_point=_CtrlC(2), progress=kept)
    with pytest.raises(ValueError, match=r"^kept\.json: its measurements were made with plan "):
        VirtualEngine().calibrate(replace(plan, repeats=2), progress=kept,
                                  resumed_from="kept.json")


def test_calibrate_command_keeps_an_interrupted_grid_for_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate --url, Ctrl-C after 3 measurements: before, 'nothing was written' and every
    measurement lost. Now they are in cost.partial.json and said; a rerun without --resume is
    refused (nothing kept is dropped or reused unsaid); with --resume it measures the rest,
    writes cost.json and removes the partial file. The server is the virtual engine."""
    from typer.testing import CliRunner

    import kvbudget.cli.live as live_commands
    from kvbudget.cli.main import app
    from kvbudget.live.calibrate import calibrate as real_calibrate

    stop_after: list[int] = [3]

    def on_virtual(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any) -> Any:
        engine = VirtualEngine()
        shown = kwargs.pop("on_point")

        def on_point(point: GridPoint, done: int, total: int) -> None:
            shown(point, done, total)
            if stop_after and done == stop_after[0]:
                raise KeyboardInterrupt

        return real_calibrate(target, replace(plan, idle_gap_s=0.0), clock=engine.clock,
                              transport=engine.transport(), on_point=on_point, **kwargs)

    monkeypatch.setattr(live_commands, "calibrate", on_virtual)
    cost = tmp_path / "cost.json"
    partial = tmp_path / "cost.partial.json"
    args = ["calibrate", "--url", "http://fake.invalid", "--out", str(cost), "--max-num-seqs",
            "8", "--max-num-batched-tokens", "2048", "--prefill-tokens", "64,512",
            "--decode-batches", "1,4", "--context-tokens", "32,256", "--repeats", "2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 130
    assert " ".join(res.stderr.split()).endswith(
        f"error: interrupted after 3 of 12 grid measurements; the 3 finished are kept in "
        f"{partial}; {cost} is fitted and written once the whole grid is measured: rerun the "
        "same command with --resume to measure only the rest")
    assert not cost.exists() and len(json.loads(partial.read_text())["done"]) == 3
    stop_after.clear()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert " ".join(res.stderr.split()).endswith(
        f"error: {partial} holds the measurements of an interrupted calibration: give --resume "
        "to go on from them, or delete it to start over")
    res = CliRunner().invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.stderr
    assert (f"resuming: 3 grid measurements kept in {partial} are not made again"
            in " ".join(res.stderr.split()))
    assert cost.exists() and not partial.exists()
    assert json.loads(cost.read_text())["calibration"]["notes"] == [
        f"resumed: 3 of the 12 grid measurements were made by an earlier, interrupted run "
        f"({partial}): a change of the server's speed between the two runs is in the fit"]
    assert json.loads(cost.read_text())["fit"]["num_samples"] == 6  # every point's median
    # the cut grid's 2 mixed points are fitted exactly by the 6 coefficients: said, not 0.00 %
    assert "mixed 2 exact fit - -" in " ".join(res.stdout.split())
    assert ("note: mixed: 2 points, no more than the 6 coefficients that reach them: the fit "
            "passes through each exactly, so its error tests nothing") in " ".join(
                res.stderr.split())
    res = CliRunner().invoke(app, [*args, "--resume"])
    assert res.exit_code == 2
    assert f"error: --resume: no {partial} to go on from" in " ".join(res.stderr.split())
    res = CliRunner().invoke(app, ["calibrate", "--records", str(tmp_path / "r.jsonl"),
                                   "--out", str(tmp_path / "c2.json"), "--resume"])
    assert res.exit_code == 2
    assert res.stderr.strip().endswith("--resume applies to a live calibration (--url), not to "
                                       "--records")


# ``kvbudget calibrate --url ...`` in a process of its own, its server the virtual engine: after
# the 3rd grid measurement it says "measured 3" on stderr and the server stops answering (the
# next stream is held until the process is signalled), so the signal comes while the
# calibration awaits its server, at a known count, whatever the machine's speed
HELD_CALIBRATION = textwrap.dedent("""\
    import asyncio, signal, sys
    from dataclasses import replace
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import kvbudget.cli.live as live
    from kvbudget.live.calibrate import calibrate
    from tests.unit.live.test_backends_calibrate import VirtualEngine
    engine, held = VirtualEngine(), []
    answer = engine.handle
    async def handle(request):
        if held and request.url.path == "/v1/completions":
            await asyncio.Event().wait()
        return await answer(request)
    engine.handle = handle
    def virtual(target, plan, **kwargs):
        shown = kwargs.pop("on_point")
        def on_point(point, done, total):
            shown(point, done, total)
            if done == 3:
                held.append(done)
                print("measured 3", file=sys.stderr, flush=True)
        return calibrate(target, replace(plan, idle_gap_s=0.0), clock=engine.clock,
                         transport=engine.transport(), on_point=on_point, **kwargs)
    live.calibrate = virtual
    sys.argv[0] = "kvbudget"
    from kvbudget.cli.main import main
    main()
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_calibrate_process_keeps_its_grid_for_resume(
        tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM (a CI runner's timeout, ``kill``) to ``calibrate --url --out`` takes Ctrl-C's way
    out (``cli.main.terminate``): the grid measured so far is kept in OUT.partial.json and
    said, exit 130. Checked on a real process signalled while it awaits its server after 3
    measurements (the in-process test above raises KeyboardInterrupt from its callback)."""
    cost, partial = tmp_path / "cost.json", tmp_path / "cost.partial.json"
    code, _, stderr = signalled(
        [HELD_CALIBRATION, "calibrate", "--url", "http://fake.invalid", "--out", str(cost),
         "--max-num-seqs", "8", "--max-num-batched-tokens", "2048", "--prefill-tokens",
         "64,512", "--decode-batches", "1,4", "--context-tokens", "32,256", "--repeats", "2"],
        "measured 3", sig, first=False)
    said = " ".join(stderr.split())
    assert code == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert said.endswith(
        f"error: interrupted after 3 of 12 grid measurements; the 3 finished are kept in "
        f"{partial}; {cost} is fitted and written once the whole grid is measured: rerun the "
        "same command with --resume to measure only the rest"), stderr
    assert not cost.exists() and CalibrationProgress.load(partial).num_done == 3


def test_classes_with_no_more_points_than_coefficients_are_said() -> None:
    """Hand-made fit tables: 2 decode points reached by 2 coefficients (intercept, per decode
    sequence: the context column is 0) are in-sample, exact when their error is 0; 3 are not;
    a class whose in-sample error is not 0 is in-sample but not exact."""
    def table(cls: str, n: int, err: float) -> pd.DataFrame:
        rows = [{**dict.fromkeys(FEATURES, 0.0), "num_decode_seqs": 1.0 + i,
                 "point_class": cls, "measured_s": 0.01, "predicted_s": 0.01,
                 "rel_error": err} for i in range(n)]
        return pd.DataFrame(rows)

    assert in_sample_classes(table("decode", 2, 0.0)) == {"decode": (2, True), "all": (2, True)}
    assert in_sample_classes(table("decode", 2, 0.01)) == {"decode": (2, False),
                                                           "all": (2, False)}
    assert in_sample_classes(table("decode", 3, 0.0)) == {}


def test_a_server_that_stops_answering_keeps_the_grid_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server fails after 2 grid measurements: before, exit 1 and every measurement lost;
    now they are kept beside --out for --resume, and said."""
    from typer.testing import CliRunner

    import kvbudget.cli.live as live_commands
    from kvbudget.cli.main import app
    from kvbudget.live.server import BackendUnavailable

    def failing(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any) -> Any:
        kept = kwargs["progress"]
        for rep in (0, 1):
            kept.finish("prefill", 1, 16, rep)
        raise BackendUnavailable("calibration request failed: connection refused")

    monkeypatch.setattr(live_commands, "calibrate", failing)
    cost = tmp_path / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--url", "http://127.0.0.1:9", "--out",
                                   str(cost), "--max-num-seqs", "8",
                                   "--max-num-batched-tokens", "2048"])
    assert res.exit_code == 1
    assert " ".join(res.stderr.split()).endswith(
        "error: calibration request failed: connection refused; the 2 finished are kept in "
        f"{tmp_path / 'cost.partial.json'}; {cost} is fitted and written once the whole grid "
        "is measured: rerun the same command with --resume to measure only the rest")
    assert CalibrationProgress.load(tmp_path / "cost.partial.json").num_done == 2


def test_a_damaged_partial_file_is_one_line(tmp_path: Path) -> None:
    """--resume with a partial file that is not one (cut JSON, another version, a field of
    the wrong type): one line naming the file, exit 2, before the server is asked."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    cost, partial = tmp_path / "cost.json", tmp_path / "cost.partial.json"
    for text, said in (('{"version": 1, "done"', "not the measurements of a calibration ("),
                       ('{"version": 9}', "not the measurements of a calibration (version 1 "),
                       ('{"version": 1, "done": [[1]], "samples": [], "idle_ttft": [], '
                        '"notes": [], "server": {}}', "not the measurements of a calibration (")):
        partial.write_text(text)
        res = CliRunner().invoke(app, ["calibrate", "--url", "http://127.0.0.1:9", "--out",
                                       str(cost), "--resume"])
        assert res.exit_code == 2, res.output
        assert f"error: {partial}: {said}" in " ".join(res.stderr.split()), res.stderr


def test_an_interrupt_before_any_measurement_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C before the first grid measurement finished: nothing to keep, said so."""
    from typer.testing import CliRunner

    import kvbudget.cli.live as live_commands
    from kvbudget.cli.main import app

    def interrupted(target: ServerTarget, plan: CalibrationPlan, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(live_commands, "calibrate", interrupted)
    cost = tmp_path / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--url", "http://127.0.0.1:9", "--out",
                                   str(cost), "--max-num-seqs", "8",
                                   "--max-num-batched-tokens", "2048"])
    assert res.exit_code == 130
    assert " ".join(res.stderr.split()).endswith(
        "error: interrupted after 0 of the grid measurements; none was finished, so nothing "
        f"was written ({cost} neither)")
    assert list(tmp_path.iterdir()) == []


def test_a_speed_check_that_times_nothing_says_why(tmp_path: Path) -> None:
    """A speed check whose streams send their tokens in bursts times no step: before, validate
    printed 'not timed' and no reason. The reason comes from the streams (virtual engine)."""
    model = load_cost_model(_cost_file(tmp_path / "cost.json"))
    assert isinstance(model, LinearCostModel)
    for burst in (True, False):
        engine, misses = VirtualEngine(burst=burst), []
        got = asyncio.run(speed_check_async(ServerTarget("http://fake.invalid"), model,
                                            clock=engine.clock, transport=engine.transport(),
                                            misses=misses))
        if burst:
            assert got is None
            assert untimed_said(misses) == (
                "in none of its 3 tries: the tokens of 4 of its 4 streams came in bursts (over "
                "20% of chunks with several tokens: the API server fell behind the engine)")
        else:
            assert got is not None and misses == []
    assert untimed_said(["a", "b", "a"]) == "a (2 of 3 tries); b (1 of 3 tries)"


def test_validate_says_why_a_speed_check_was_not_timed_and_the_files_warnings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate --url printed 'after not timed' without the reason, and never the cost file's
    calibration warnings, which every other command that loads the file says."""
    from typer.testing import CliRunner

    import kvbudget.live.validate as live_validate
    from kvbudget.cli.main import app

    async def untimed(target: ServerTarget, model: Any, *, misses: list[str],
                      **kwargs: Any) -> None:
        misses.extend(["its 4 streams did not decode together for 4 tokens"] * 3)

    monkeypatch.setattr(live_validate, "speed_check_async", untimed)
    cost = _cost_file(tmp_path / "cost.json")
    payload = json.loads(cost.read_text())
    payload["calibration"]["warnings"] = [
        "per_prefill_seq_s = 0.004 is at the bound of its search (0 .. 0.004): it stands for "
        "something the step model lacks"]
    cost.write_text(json.dumps(payload))
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(
        {"arrival_s": 0.05 * i, "prompt_tokens": 32, "output_tokens": 4,
         "max_output_tokens": 4}) + "\n" for i in range(3)))
    with _serving(_Server()) as url:
        res = CliRunner().invoke(app, [
            "validate", "--url", url, "--trace", str(trace), "--cost-model", str(cost),
            "--max-num-seqs", "4", "--out", str(tmp_path / "val")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stdout.split())
    why = "in none of its 3 tries: its 4 streams did not decode together for 4 tokens"
    assert (f"before the replay not timed ({why}), after not timed ({why}); a drift") in said
    assert (f"warning: {cost}: its calibration warned: per_prefill_seq_s = 0.004 is at the "
            "bound of its search (the file's calibration.warnings say why); used as fitted: "
            "such a value stands for something the step model lacks") in " ".join(res.stderr.split()), res.stderr


def test_validate_simulates_the_requests_at_the_times_they_were_sent(tmp_path: Path) -> None:
    """validate --url simulated the trace's times while the live records' arrival_s is the
    actual send (86 ms late once on a loaded machine): the server saw the sends. Now the
    simulation takes the sent times, and how late they were is said and kept."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(
        {"arrival_s": 0.05 * i, "prompt_tokens": 32, "output_tokens": 4,
         "max_output_tokens": 4}) + "\n" for i in range(4)))
    cost = _cost_file(tmp_path / "cost.json")
    out = tmp_path / "val"
    with _serving(_Server()) as url:
        res = CliRunner().invoke(app, [
            "validate", "--url", url, "--trace", str(trace), "--cost-model", str(cost),
            "--max-num-seqs", "4", "--no-speed-check", "--out", str(out)])
    assert res.exit_code == 0, res.output
    live = read_run(out / "live").records.set_index("request_id")["arrival_s"]
    sim = read_run(out / "sim").records.set_index("request_id")["arrival_s"]
    assert (live.to_numpy() > np.array([0.0, 0.05, 0.1, 0.15])).all()  # every send is late
    assert sim.reindex(live.index).to_numpy() == pytest.approx(live.to_numpy(), abs=1e-9)
    late = json.loads((out / "validation.json").read_text())["sent_late"]
    assert late["num_sent"] == 4 and late["max_s"] == pytest.approx(
        float((live.to_numpy() - np.array([0.0, 0.05, 0.1, 0.15])).max()), abs=1e-9)
    assert late["step_s"] == pytest.approx(INTERCEPT_S + PER_DECODE_SEQ_S)
    said = " ".join(res.stdout.split())
    assert (f"the replay sent its 4 requests late after their trace times by p50 "
            f"{1000 * late['p50_s']:.1f} ms, max {1000 * late['max_s']:.1f} ms "
            f"({late['num_beyond_step']} later than one calibrated decode step of "
            f"{1000 * late['step_s']:.1f} ms): the simulation takes the times they were sent, "
            "what the server saw") in said


def test_sent_times_hand_made() -> None:
    """A send 86 ms late (the one seen on a loaded machine), one on time, one never sent (a
    record without arrival): the simulated times, and the lateness said."""
    from kvbudget.studies.sent_times import as_sent
    from kvbudget.workloads import Workload

    n = 3
    wl = Workload(arrival_s=np.array([0.0, 0.1, 0.2]), prompt_tokens=np.full(n, 8),
                  output_tokens=np.full(n, 4), max_output_tokens=np.full(n, 4),
                  tier=np.zeros(n, dtype=np.int16), tier_names=("interactive",),
                  deadline_s=np.full(n, np.nan), request_id=np.array([7, 8, 9]))
    records = pd.DataFrame({"request_id": [8, 7, 9], "arrival_s": [0.186, 0.0, np.nan]})
    timed, late = as_sent(wl, records, step_s=0.01)
    # request 9 was never sent: its trace time 0.2 falls after 8's late send, kept in order
    assert timed.arrival_s.tolist() == pytest.approx([0.0, 0.186, 0.2])
    assert (late.num_sent, late.num_beyond_step) == (2, 1)
    assert late.max_s == pytest.approx(0.086) and late.p50_s == pytest.approx(0.043)
    assert "max 86.0 ms (1 later than one calibrated decode step of 10.0 ms)" in late.said()


def test_a_replay_between_two_scrapes_shows_no_kv_figure(tmp_path: Path) -> None:
    """A replay whose work falls between the scrape before its first arrival and the one
    after its last finish (no --poll-period tick in between: on the CPU vLLM, a 0.6 s run at
    the default 1 s) printed KV used 0 and reserved 0, never measured. Now '-' and said why.
    The scrapes are ordered by events: the first is awaited before any request is sent, the
    last after every one finished, and the poller's first tick is 1000 s away."""
    from typer.testing import CliRunner

    from kvbudget.cli.main import app

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(
        {"arrival_s": 0.01 * i, "prompt_tokens": 32, "output_tokens": 4,
         "max_output_tokens": 4}) + "\n" for i in range(3)))
    out = tmp_path / "run"
    with _serving(_Server()) as url:
        res = CliRunner().invoke(app, ["replay", "--url", url, "--trace", str(trace), "--out",
                                       str(out), "--poll-period", "1000"])
    assert res.exit_code == 0, res.stderr
    summary = read_run(out).summary
    assert summary["overall"]["completed"] == 3
    assert set(summary["kv"].values()) == {None}
    said = " ".join(res.stdout.split())
    assert ("assumed: KV used and reserved: no scrape of the server's /metrics fell within the "
            "run's work (first arrival to last finish, ") in said
    assert "conservative - - - -" in " ".join(res.stdout.split()).replace("  ", " ")
