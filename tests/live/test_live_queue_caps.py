"""The engine's own queue cap against the real thing: a CPU vLLM started with
``--max-num-queued-reqs 3`` refuses a burst beyond three unfinished requests with 503; the
replay names each refusal as the simulator names it, and ``kvbudget simulate`` of the same
trace with ``engine.max_num_queued_reqs = 3`` refuses the same requests (a join of simulated
and measured, row by row). Its own server (the flag binds at start-up), stopped at the end."""

from __future__ import annotations

from pathlib import Path

import pytest
from livevllm import burst_trace, kvbudget, running_vllm, vllm_python

from kvbudget.results.run_result import read_run

pytestmark = pytest.mark.live
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
