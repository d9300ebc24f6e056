"""A closed-loop replay against the session's CPU vLLM: the mechanics only (every request has a
row, no user has two requests in flight, the concurrency never exceeds the users, the ITL table
is there and agrees with the rows). Never accuracy or wall time."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from livevllm import VllmServer

from kvbudget.results.run_result import read_run

pytestmark = pytest.mark.live
REPO = Path(__file__).resolve().parents[2]
NUM_USERS = 64
NUM_REQUESTS = 96  # 64 users: the first 64 sent at once, then 32 of them send a second
THINK_S = 0.05


def test_closed_loop_replay_of_64_users(vllm_server: VllmServer, tmp_path: Path) -> None:
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
    assert (np.sort(arrival)[:NUM_USERS] <= answers[0]).all()
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
