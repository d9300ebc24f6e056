"""A ``kvbudget serve`` run whose budget moved while it ran (re-read from the upstreams'
``/metrics``) is simulated by ``validate --records`` with the budget moving at the times its
timeline recorded, not with the last budget throughout. Worked by hand: budgets 2,200 then
5,000 tokens from 5 s; A (0 s) and B (1 s) each reserve 100 + 2,000 = 2,112 tokens in 16-token
blocks; the live gateway admitted B at 5 s, when the budget grew. Simulated with the last
budget (5,000) throughout, B was admitted as it arrived (1 s); with the first, when A ended."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.live.gateway_server import ServeConfig
from kvbudget.live.serve_records import Outcome, ServeRecorder, request_row
from kvbudget.live.serve_run import ServeSettings, build_server
from kvbudget.live.serve_upstream import UpstreamOptions
from kvbudget.policies import make_policy
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.policies.tiers import TierConfig
from kvbudget.results.recorded_records import read_run_dir
from tests.unit.live.serve_harness import TIERS as HARNESS_TIERS
from tests.unit.live.serve_harness import WAIT_BOUND_S, FakeUpstream, stack, until

pytestmark = pytest.mark.timeout(180)
TIERS = (TierConfig("chat", max_sequence_tokens=8192, queue_timeout_s=None),)


def _row(t: float, capacity: int) -> dict[str, float | int]:
    return {
        "time_s": t,
        "kv_used_tokens": 0,
        "kv_reserved_tokens": 0,
        "kv_capacity_tokens": capacity,
        "num_running": 0,
        "num_waiting": 0,
        "num_preemptions": 0,
    }


def _run_dir(out: Path) -> Path:
    """The directory the live gateway wrote (its recorder, no server started): the budget
    2,200 at the start, 5,000 from the capacity read at 5 s."""
    settings = ServeSettings(
        tiers=TIERS,
        new_policy=lambda: make_policy("conservative", {}),
        upstream=UpstreamOptions(("http://127.0.0.1:9",)),
        out=out,
        config=ServeConfig(count_tokens="bytes", trust_tier_header=True, default_tier="chat"),
    )
    recorder = build_server(settings, settings.gateway(2200, block_tokens=16)).recorder
    assert recorder is not None
    recorder.sample(_row(0.0, 2200), 0.0)
    recorder.sample(_row(5.0, 5000), 5.0)
    for i, (arrival, admitted) in enumerate(((0.0, 0.0), (1.0, 5.0))):
        request = GatewayRequest(
            request_id=i, tier="chat", arrival_s=arrival, prompt_tokens=100, max_output_tokens=2000
        )
        recorder.write(
            request_row(
                request,
                Outcome("completed", "", 2000, admitted, admitted + 0.05, admitted + 20.0, 2112),
            ),
            30.0,
        )
    return recorder.close(30.0) or Path()


def _validate(run_dir: Path, out: Path, *extra: str) -> tuple[str, list[float]]:
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(run_dir),
            "--gpu",
            "H100-80GB",
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(out),
            *extra,
        ],
    )
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    sim = pd.read_parquet(out / "sim" / "requests.parquet").sort_values("request_id")
    assert list(sim["reserved_tokens"]) == [2112, 2112]
    return said, [float(t) for t in sim["admitted_s"]]


def test_a_budget_that_moved_mid_run_is_simulated_as_it_moved(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "runs")
    said, admitted = _validate(run_dir, tmp_path / "v")
    assert admitted == [0.0, 5.0], said
    assert (
        "budget 2,200 tokens at the start, then 5,000 at 5 s (from the recording's "
        "timeline)" in said
    ), said
    assert (
        "the simulated gateway starts with 2,200 and moves it at the 1 time the timeline "
        "recorded" in said
    ), said


def test_a_budget_given_holds_throughout_said(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "runs")
    said, admitted = _validate(run_dir, tmp_path / "v", "--set", "gateway_capacity_tokens=2200")
    assert admitted[0] == 0.0 and admitted[1] > 10.0, admitted  # B waits for A's end
    assert (
        "one budget throughout, 2,200 tokens (given), not the run's, which moved while "
        "it ran" in said
    ), said


def test_a_live_budget_moved_while_a_request_waited_is_kept(tmp_path: Path) -> None:
    """The live gateway: A holds 1,024 of 1,600 tokens, B (1,024) waits; the upstream's KV
    read again grows the budget to 3,200, which admits B. The directory opens only when A
    ends: it kept the last state alone (3,200 throughout) before, so its simulation had no
    move at all. Its timeline now starts with 1,600 and moves at the read, at B's admission."""

    async def go() -> float:
        fake = FakeUpstream(num_gpu_blocks=101)  # (101 - 1) blocks of 16: 1,600 tokens
        recorder = ServeRecorder(
            tmp_path,
            tiers=HARNESS_TIERS,
            policy={"name": "conservative"},
            rotate_requests=100,
            meta={"executor": "serve"},
        )
        body = {"model": "fake", "prompt": "hello", "max_tokens": 1000}  # 21 + 1,000: 1,024
        async with (
            stack(fake, recorder=recorder, capacity_tokens=1600, reservation_granularity=16) as (
                server,
                url,
            ),
            httpx.AsyncClient(timeout=WAIT_BOUND_S) as client,
        ):
            await server.read_and_sample(True)
            first = asyncio.create_task(client.post(url + "/v1/completions", json=body))
            await until(lambda: fake.held == 1, lambda: fake.changed)
            second = asyncio.create_task(client.post(url + "/v1/completions", json=body))
            await until(
                lambda: server.admission.gateway.num_waiting() == 1,
                lambda: server.admission.changed,
            )
            fake.num_gpu_blocks = 201  # 3,200 tokens
            await server.read_and_sample(True)
            assert server.admission.gateway.num_waiting() == 0
            fake.release.set()
            assert [(await r).status_code for r in (first, second)] == [200, 200]
            await until(lambda: server.num_in_flight == 0, lambda: server.flight_changed)
        recorder.close(server.admission.now())
        rows = pd.read_parquet(tmp_path / "run-0001" / "requests.parquet")
        return float(rows.sort_values("arrival_s")["admitted_s"].iloc[1])

    admitted = asyncio.run(go())
    recording = read_run_dir(tmp_path / "run-0001", "interactive")
    assert recording.config["kv_capacity_tokens"] == 1600
    [(moved_s, budget)] = recording.config["kv_capacity_schedule"]
    assert budget == 3200
    # the row is written just after the read that admitted B, on the same clock
    assert admitted <= moved_s < admitted + 1.0, (admitted, moved_s)
