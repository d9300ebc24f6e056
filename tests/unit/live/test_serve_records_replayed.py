"""A ``kvbudget serve`` run directory simulated again (``validate --records`` / ``calibrate
--records``) is given what the gateway admitted by: the tiers it ran with (``replay.json``) and
each request's admission deadline (``deadline_s``: its tier's wait, or the shorter
``x-kvbudget-deadline-s`` its client sent). Without them a request the gateway refused at its
client's deadline was simulated as waiting its tier's default 10 s, and served."""

from __future__ import annotations

import asyncio
import re
import signal
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.live.gateway_server import ServeConfig
from kvbudget.live.serve_records import Outcome, ServeRecorder, request_row
from kvbudget.live.serve_run import ServeSettings, serve
from kvbudget.live.serve_upstream import UpstreamOptions
from kvbudget.policies import make_policy
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.policies.tiers import TierConfig
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_result import read_run
from kvbudget.studies.validate import served_refusals
from tests.unit.live.serve_harness import FakeUpstream, serving, until

pytestmark = pytest.mark.timeout(120)
TIERS = (TierConfig("chat", max_sequence_tokens=2048, queue_timeout_s=5.0),
         TierConfig("bulk", max_sequence_tokens=4096, priority=1, queue_timeout_s=None,
                    retryable_on_overload=True))


def _serve_two(out: Path) -> None:
    """Two requests through ``serve`` (capacity 2,100 tokens, prompts counted as bytes + 16):
    the first holds 2,018 tokens at the fake; the second, sent with a deadline of 0, finds no
    room and is refused at once; then the first ends (2,000 tokens) and the gateway is stopped
    (SIGTERM). The first's 2,000 tokens take the simulated H100 about 13 s, so it still holds
    its reservation at the second's recorded arrival however slowly this machine sent it (with
    3 tokens, ~30 ms: a loaded machine sent the second later and the simulation admitted it)."""
    async def main() -> None:
        fake = FakeUpstream(hold="headers", num_tokens=2000)
        async with serving(fake.app()) as up:
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def announce(line: str) -> None:
                if "listening on " in line:
                    ready.set_result(line.split("listening on ")[1].split()[0])

            settings = ServeSettings(
                tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
                upstream=UpstreamOptions((up,)), capacity_tokens=2100, out=out,
                config=ServeConfig(count_tokens="bytes", trust_tier_header=True,
                                   default_tier="chat"), port=0, drain_timeout_s=5.0)
            served = asyncio.create_task(serve(settings, announce))
            url = await asyncio.wait_for(ready, 30)
            body = {"model": "fake", "prompt": "hi", "max_tokens": 2000, "stream": True}
            async with httpx.AsyncClient(timeout=30) as client:
                first = asyncio.create_task(client.post(url + "/v1/completions", json=body))
                await until(lambda: len(fake.received) == 1, lambda: fake.changed)
                late = await client.post(url + "/v1/completions", json=body,
                                         headers={"x-kvbudget-deadline-s": "0"})
                assert late.status_code == 429 and late.json()["error"]["code"] == "deadline"
                fake.release.set()
                assert (await first).status_code == 200
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
            await asyncio.wait_for(served, 30)

    asyncio.run(main())


def test_a_serve_run_is_simulated_with_its_tiers_and_deadlines(tmp_path: Path) -> None:
    _serve_two(tmp_path / "runs")
    run_dir = tmp_path / "runs" / "run-0001"
    rows = read_run(run_dir).records.sort_values("arrival_s")
    assert list(rows["status"]) == ["completed", "expired"]
    assert rows["deadline_s"].iloc[0] == pytest.approx(rows["arrival_s"].iloc[0] + 5.0)
    assert rows["deadline_s"].iloc[1] == rows["arrival_s"].iloc[1]  # its client's 0 s
    recording = read_recording(run_dir)
    w = recording.workload
    assert np.allclose(w.deadline_s - w.arrival_s, [5.0, 0.0])
    assert [t["name"] for t in recording.config["tiers"]] == ["chat", "bulk"]

    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    assert "tiers from the recording: chat up to 2,048 tokens, waits up to 5 s; bulk up to " \
        "4,096 tokens, waits without limit" in " ".join(res.output.split())
    # whose times the measured side holds, and the gateway's own wait in them
    assert "its times are kvbudget serve's, as the gateway saw them: from when it read each " \
        "request's body" in " ".join(res.output.split())
    assert "(the 1 admitted request waited " in " ".join(res.output.split())
    # counted by the bytes bound: no count's time in them to say
    assert "prompt count" not in " ".join(res.output.split())
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet").sort_values("arrival_s")
    # the simulated gateway refused the second at its deadline too, as the live one did
    assert list(sim["status"]) == ["completed", "expired"], sim[["status", "reason"]]


def test_a_run_directory_serve_still_writes_is_said_open(tmp_path: Path) -> None:
    """While ``kvbudget serve`` runs, its directory holds rows but no parquet files yet:
    ``validate``/``calibrate``/``report`` said 'not a run directory (requests.parquet is
    missing)', which it is; now they say it is open, how many rows it has, and when it closes."""
    recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    request = GatewayRequest(request_id=0, tier="chat", arrival_s=1.0, prompt_tokens=5,
                             max_output_tokens=8)
    recorder.write(request_row(request, Outcome("completed", "", 8, 1.0, 1.1, 1.5, 13)), 1.5)
    run_dir = tmp_path / "run-0001"
    for args in (["validate", "--records", str(run_dir), "--out", str(tmp_path / "v")],
                 ["report", str(run_dir), "--out", str(tmp_path / "r")]):
        res = CliRunner().invoke(app, args)
        said = " ".join(res.output.split())
        assert res.exit_code == 2 and said.startswith(
            f"error: {run_dir}: is open: 1 request so far in requests.part.jsonl"), said
        assert "--rotate-requests" in said and "Traceback" not in said
    recorder.close(2.0)
    assert read_recording(run_dir).counts["num_rows_read"] == 1


def _slow_run(root: Path, num: int = 4) -> Path:
    """A serve run by hand: requests of 1,000 + 1,000 tokens in a 2,500-token budget, each
    sent 1 ms after the last with a deadline of 30 ms and admitted when the one before it
    ended, 100 tokens at 5,000 a second: the server was quick. A step model slower than that
    server passes their deadlines."""
    recorder = ServeRecorder(root, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    recorder.sample({"time_s": 0.0, "kv_used_tokens": 0, "kv_reserved_tokens": 0,
                     "kv_capacity_tokens": 2500, "num_running": 0, "num_waiting": 0,
                     "num_preemptions": 0}, 0.0)
    free = 0.0
    for rid in range(num):
        arrival = rid * 0.001
        request = GatewayRequest(request_id=rid, tier="chat", arrival_s=arrival,
                                 prompt_tokens=1000, max_output_tokens=1000,
                                 deadline_s=arrival + 0.03)
        admitted = max(arrival, free)
        first = admitted + 0.002
        free = first + 99 * 2e-4
        recorder.write(request_row(request, Outcome(
            "completed", "", 100, admitted, first, free, 2000, token_gaps_s=(2e-4,) * 99)),
            free)
    recorder.close(free)
    return root / "run-0001"


def test_calibrate_fits_the_engine_not_the_gateways_deadlines(tmp_path: Path) -> None:
    """``calibrate --records`` of a serve run simulated each request with its recorded
    admission deadline, so a start model slower than the server expired requests the server
    served and the calibration was refused for the gateway's queue; the requests that
    completed now wait as long as it takes in the fit (said), those refused keep theirs."""
    run_dir = _slow_run(tmp_path / "runs")
    res = CliRunner().invoke(app, [
        "calibrate", "--records", str(run_dir), "--gpu", "H100-80GB", "--model",
        "Llama-3.1-8B", "--max-evals", "1", "--allow-small-fit", "--out",
        str(tmp_path / "cost.json")])
    said = " ".join(res.output.split())
    assert "did not complete" not in said, said
    assert "note: the 4 completed requests with a recorded admission deadline wait for " \
        "admission in the fit's simulations as long as it takes" in said, said
    assert res.exit_code == 0, said


def test_validate_says_the_requests_it_served_that_the_recording_refused(
        tmp_path: Path) -> None:
    """A run whose refusals the simulation does not make (here a serve run written before its
    deadlines were kept: a request refused at its client's deadline of 0 s is simulated with
    its tier's wait) exited 0 with 'completed 1 1 +0%': the comparison takes the requests the
    recording completed, and the one the simulation served besides was seen nowhere. Said now."""
    recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    recorder.sample({"time_s": 0.0, "kv_used_tokens": 0, "kv_reserved_tokens": 0,
                     "kv_capacity_tokens": 2500, "num_running": 0, "num_waiting": 0,
                     "num_preemptions": 0}, 0.0)
    for rid, outcome in enumerate((
            Outcome("completed", "", 100, 0.0, 0.05, 0.6, 1100, token_gaps_s=(5e-3,) * 99),
            Outcome("expired", "deadline", 0, finished_s=0.001))):
        request = GatewayRequest(request_id=rid, tier="chat", arrival_s=rid * 0.001,
                                 prompt_tokens=1000, max_output_tokens=1000)
        row = request_row(request, outcome)
        del row["deadline_s"]  # as written before they were kept
        recorder.write(row, 0.6)
    recorder.close(0.6)
    res = CliRunner().invoke(app, [
        "validate", "--records", str(tmp_path / "run-0001"), "--gpu", "H100-80GB", "--model",
        "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert "note: the simulation completed 1 of the 1 requests the recording shows not " \
        "completed (1 expired (deadline)): they loaded the simulated server" in said, said
    # and of a hold-out part (rows): its mask taken, not written into the recording's column
    recording = read_recording(tmp_path / "run-0001")
    simulated = pd.DataFrame({"request_id": [0, 1], "status": ["completed"] * 2})
    assert served_refusals(recording, simulated, np.array([False, True])) is not None
    assert served_refusals(recording, simulated, np.array([True, False])) is None


def test_a_max_tokens_over_the_tier_is_recorded_as_the_gateway_refused_it(
        tmp_path: Path) -> None:
    """A request whose ``max_tokens`` alone is over its tier's ``max_sequence_tokens`` was
    answered 400 before admission and written nowhere, while one whose prompt + ``max_tokens``
    is over it was recorded ``rejected_too_large``: the run's directory and its simulation
    (which counts such a request too large) then disagreed on the requests and the refusals.
    It is now refused by the admission, as too large, and recorded with its tier, arrival and
    counts; a body that is no request (not JSON, a ``max_tokens`` under 1, over
    ``--max-body-bytes``, an unknown tier) is refused before admission and not recorded."""
    out = tmp_path / "runs"

    async def main() -> None:
        fake = FakeUpstream(hold="none")
        async with serving(fake.app()) as up:
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def announce(line: str) -> None:
                if "listening on " in line:
                    ready.set_result(line.split("listening on ")[1].split()[0])

            settings = ServeSettings(
                tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
                upstream=UpstreamOptions((up,)), capacity_tokens=100_000, out=out,
                config=ServeConfig(count_tokens="bytes", trust_tier_header=True,
                                   default_tier="chat", max_body_bytes=4096),
                port=0, drain_timeout_s=5.0)
            served = asyncio.create_task(serve(settings, announce))
            url = await asyncio.wait_for(ready, 30) + "/v1/completions"
            body = {"model": "fake", "prompt": "hi", "stream": True}
            async with httpx.AsyncClient(timeout=30) as client:
                assert (await client.post(url, json={**body, "max_tokens": 60})
                        ).status_code == 200
                big = await client.post(url, json={**body, "max_tokens": 3000})
                assert big.status_code == 400
                assert big.json()["error"]["code"] == "context_length_exceeded"
                assert "3018 tokens (prompt + max_tokens)" in big.json()["error"]["message"]
                for refused, status in (
                        (client.post(url, content=b"{not json"), 400),
                        (client.post(url, json={**body, "max_tokens": -1}), 400),
                        (client.post(url, json={**body, "prompt": "x" * 5000}), 413),
                        (client.post(url, json=body, headers={"x-kvbudget-tier": "gold"}),
                         401)):
                    assert (await refused).status_code == status
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
            await asyncio.wait_for(served, 30)

    asyncio.run(main())
    run_dir = out / "run-0001"
    rows = read_run(run_dir).records.sort_values("arrival_s")
    assert list(rows["status"]) == ["completed", "rejected_too_large"]
    big = rows.iloc[1]
    assert (big["tier"], big["prompt_tokens"], big["max_output_tokens"]) == ("chat", 18, 3000)
    assert big["arrival_s"] > rows["arrival_s"].iloc[0]
    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "2 requests simulated, 1 measured, 1 not measured" in said, said
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet").sort_values("arrival_s")
    assert list(sim["status"]) == list(rows["status"])  # the simulation refused it too


def test_an_absurd_max_tokens_leaves_a_run_directory_the_loop_reads(tmp_path: Path) -> None:
    """A ``max_tokens`` of 10^8 was taken as a count (up to 2^40), refused as too large and
    recorded with it, so the run directory's ``requests.parquet`` held a row that every reader
    of the loop refused ("row 4, column 'max_output_tokens': tokens outside 0..10,000,000"):
    one client's typo made ``validate --records``, ``report`` and ``calibrate --records``
    refuse the whole directory. A ``max_tokens`` over the records' bound is now no count (400,
    ``param`` max_tokens, not recorded, as one under 1); one at the bound is still recorded as
    too large."""
    out = tmp_path / "runs"

    async def main() -> None:
        fake = FakeUpstream(hold="none")
        async with serving(fake.app()) as up:
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def announce(line: str) -> None:
                if "listening on " in line:
                    ready.set_result(line.split("listening on ")[1].split()[0])

            settings = ServeSettings(
                tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
                upstream=UpstreamOptions((up,)), capacity_tokens=100_000, out=out,
                config=ServeConfig(count_tokens="bytes", trust_tier_header=True,
                                   default_tier="chat"), port=0, drain_timeout_s=5.0)
            served = asyncio.create_task(serve(settings, announce))
            url = await asyncio.wait_for(ready, 30) + "/v1/completions"
            body = {"model": "fake", "prompt": "hi"}
            async with httpx.AsyncClient(timeout=30) as client:
                at_bound = await client.post(url, json={**body, "max_tokens": 10_000_000})
                assert at_bound.json()["error"]["code"] == "context_length_exceeded"
                absurd = await client.post(url, json={**body, "max_tokens": 10**8})
                assert absurd.status_code == 400
                assert absurd.json()["error"]["param"] == "max_tokens"
                assert "from 1 to 10,000,000" in absurd.json()["error"]["message"]
            handler = signal.getsignal(signal.SIGTERM)
            assert callable(handler)
            handler(signal.SIGTERM, None)
            await asyncio.wait_for(served, 30)

    asyncio.run(main())
    rows = read_run(out / "run-0001").records
    assert list(rows["status"]) == ["rejected_too_large"]
    assert list(rows["max_output_tokens"]) == [10_000_000]


def test_trace_convert_takes_a_serve_run_directory(tmp_path: Path) -> None:
    """``trace convert`` refused a ``kvbudget serve`` run directory as a simulation's ("is a
    kvbudget run directory ... give the trace the run read"), though a gateway's directory has
    no trace behind it: its rows are the production requests, the what-if input the loop
    promises (the same requests' ``vllm bench serve`` file converted). It is converted as a
    load tool's recording is: every request the gateway saw, refused ones too, with its tier
    and admission deadline; a simulation's directory is still refused."""
    recorder = ServeRecorder(tmp_path / "runs", tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    for rid, outcome in enumerate((
            Outcome("completed", "", 100, 1.0, 1.05, 1.6, 1100, token_gaps_s=(5e-3,) * 99),
            Outcome("expired", "deadline", 0, finished_s=1.2))):
        request = GatewayRequest(request_id=rid, tier=("chat", "bulk")[rid],
                                 arrival_s=1.0 + rid * 0.2, prompt_tokens=1000,
                                 max_output_tokens=1000, deadline_s=6.0 + rid)
        recorder.write(request_row(request, outcome), 1.6)
    run_dir = recorder.close(1.6)
    assert run_dir is not None
    out = tmp_path / "trace.jsonl"
    res = CliRunner().invoke(app, ["trace", "convert", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "wrote 2 requests of" in res.output and "(kvbudget serve)" in res.output
    rows = pd.read_json(out, lines=True)
    assert list(rows["tier"]) == ["chat", "bulk"]
    assert list(rows["prompt_tokens"]) == [1000, 1000]
    assert list(rows["output_tokens"]) == [100, 1000]  # the refused one: its max_tokens
    assert list(rows["deadline_s"]) == [6.0, 7.0]


def test_a_serve_directory_of_whole_answers_compares_their_e2e(tmp_path: Path) -> None:
    """A gateway whose clients did not stream (the openai SDK's default) wrote rows with no
    TTFT (it sees no first token of a whole answer), and ``validate --records`` refused the
    directory with 'no request has a measured TTFT and E2E ... missing ttft 1', then said they
    were not streamed; but their E2E is measured, and judges their SLO (docs/serve.md). It is
    now compared, and the note says how many were not streamed and what to do for TTFT."""
    recorder = ServeRecorder(tmp_path, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    recorder.sample({"time_s": 0.0, "kv_used_tokens": 0, "kv_reserved_tokens": 0,
                     "kv_capacity_tokens": 100_000, "num_running": 0, "num_waiting": 0,
                     "num_preemptions": 0}, 0.0)
    request = GatewayRequest(request_id=0, tier="chat", arrival_s=1.0, prompt_tokens=5,
                             max_output_tokens=8)
    recorder.write(request_row(request, Outcome("completed", "", 8, 1.0, float("nan"), 1.5,
                                                 13)), 1.5)
    run_dir = recorder.close(1.5)
    assert run_dir is not None
    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert "1 of the 1 completed request was not streamed (no TTFT: kvbudget serve sees no " \
        "first token of a whole answer): read as the gateway got each, the whole answer at its " \
        "end, their E2E is compared, not their TTFT nor TPOT (stream, as load tools do, to " \
        "record TTFT)" in said, said
    assert re.search(r"e2e_s 1 \d", said) and "ttft_s 0 -" in said, said  # the MAPE unsigned
