"""``kvbudget serve`` as a process on loopback, in front of a fake upstream of the test's: SIGHUP
with a bad scenario keeps the running policy (one line on stderr), SIGTERM drains (the stream in
flight finishes, new work is refused) and the process exits 0 with its run directory written.
The process is killed in the test's teardown whatever happens; every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from kvbudget.results.run_result import read_run
from tests.unit.live.serve_harness import FakeUpstream, serving, until

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 30.0


class _Lines:
    """The process's stderr lines as they come, with an event at each."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self.changed = asyncio.Event()
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while line := await stream.readline():
            self.lines.append(line.decode().rstrip())
            self.changed.set()
            self.changed = asyncio.Event()

    async def wait_for(self, pattern: str) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for line in self.lines if (m := re.search(pattern, line))]
            return bool(found) or self.task.done()

        await until(seen, lambda: self.changed)
        assert found, f"no line matching {pattern!r} in {self.lines}"
        return found[0]


async def _serve_process(tmp_path: Path, upstream: str,
                         *args: str) -> asyncio.subprocess.Process:
    """``kvbudget serve --upstream UPSTREAM --port 0 ARGS`` as a process in ``tmp_path``, its
    stderr piped (where it says its address and what it does)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "kvbudget.cli.main", "serve", "--upstream", upstream,
        "--port", "0", *args, cwd=tmp_path, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)


@pytest.mark.timeout(120)
def test_serve_reloads_on_sighup_and_drains_on_sigterm(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('policy = "conservative"\n')

    async def main() -> None:
        fake = FakeUpstream(hold="first_chunk")
        async with serving(fake.app()) as up:
            proc = await _serve_process(
                tmp_path, up, "--scenario", str(scenario), "--count-tokens", "bytes",
                "--capacity-tokens", "4000", "--out", str(tmp_path / "runs"),
                "--drain-timeout-s", "20")
            try:
                assert proc.stderr is not None
                err = _Lines(proc.stderr)
                listening = await err.wait_for(r"listening on (http://127\.0\.0\.1:\d+)")
                url = listening.group(1)
                assert "a bound of one token a UTF-8 byte" in listening.string
                # the tiers it admits by, and that nobody set them (the scenario gives none)
                said = (await err.wait_for(r"kvbudget serve: tiers .*")).group(0)
                assert said.startswith("kvbudget serve: tiers (the defaults: a --scenario's "
                                       "[[tiers]] sets them): interactive up to 32,768 tokens")
                # the max_tokens it writes into a request that gives none, which cuts it there
                await err.wait_for(r"a request without max_tokens is sent with max_tokens 256 "
                                   r"\(--default-max-tokens")
                body = {"model": "fake", "prompt": "hi", "max_tokens": 8, "stream": True}
                async with httpx.AsyncClient(timeout=BOUND_S) as client, \
                        client.stream("POST", url + "/v1/completions", json=body) as resp:
                        lines = resp.aiter_lines()
                        assert (await anext(lines)).startswith("data: {")
                        scenario.write_text('policy = "nonesuch"\n')
                        proc.send_signal(signal.SIGHUP)
                        await err.wait_for(r"reload refused, the running policy and budget stay: "
                                           r".*nonesuch")
                        proc.send_signal(signal.SIGTERM)
                        await err.wait_for(r"draining")
                        try:
                            late = await client.post(url + "/v1/completions", json={
                                "model": "fake", "prompt": "hi", "max_tokens": 8})
                            assert late.status_code == 503  # accepted before the close
                        except httpx.TransportError:
                            pass  # the listening socket was already closed
                        fake.release.set()
                        rest = [line async for line in lines if line]
                        assert rest[-1] == "data: [DONE]"
                async with asyncio.timeout(BOUND_S):
                    assert await proc.wait() == 0
                await err.task
                assert any("run directories:" in line for line in err.lines)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        run = read_run(tmp_path / "runs" / "run-0001")
        assert list(run.records["status"]) == ["completed"]
        assert len(fake.received) == 1

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_serve_refuses_bad_setups_in_one_line(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("sk-plain-key interactive\n")
    dead = "http://127.0.0.1:9"  # the discard port: nothing answers there
    cases = [
        (["--host", "0.0.0.0"], "is not a loopback address: give --keys"),
        (["--keys", str(keys)], "keys.txt: line 1: the key digest must be 64 hex"),
        ([], "give --capacity-tokens"),
        (["--router", "random"], "--router must be one of round_robin, least_tokens"),
        (["--count-tokens", "local"], "--count-tokens local needs --tokenizer"),
        (["--count-tokens", "bytes", "--tokenizer", "tiny"],
         "--tokenizer goes with --count-tokens local"),
        (["--count-tokens", "exact"], "--count-tokens must be one of upstream, bytes, local"),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for flags, message in cases:
        res = subprocess.run([sys.executable, "-m", "kvbudget.cli.main", "serve", "--upstream",
                              dead, "--port", "0", *flags], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=60, check=False)
        assert res.returncode == 2, (flags, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (flags, res.stderr)


@pytest.mark.timeout(120)
def test_sigterm_refuses_the_queue_at_once_and_aborts_what_outlasts_the_drain(
        tmp_path: Path) -> None:
    """The process's SIGTERM reaches the gateway's drain: a request waiting for capacity gets
    429 at once (its tier would let it wait 10 s), and a stream still held when the 1 s drain
    deadline passes ends with a ``draining`` error event, aborted upstream; exit 0."""
    async def main() -> None:
        fake = FakeUpstream(hold="first_chunk")
        async with serving(fake.app()) as up:
            # "hi" is bounded at 2 + 16 tokens, + max_tokens 8: 26, reserved as 32 (the fake's
            # KV blocks of 16): one stream fills 32 tokens
            proc = await _serve_process(
                tmp_path, up, "--count-tokens", "bytes", "--capacity-tokens", "32",
                "--out", str(tmp_path / "runs"), "--drain-timeout-s", "1")
            try:
                assert proc.stderr is not None
                err = _Lines(proc.stderr)
                url = (await err.wait_for(r"listening on (http://127\.0\.0\.1:\d+)")).group(1)
                body = {"model": "fake", "prompt": "hi", "max_tokens": 8, "stream": True}
                async with httpx.AsyncClient(timeout=BOUND_S) as client, \
                        client.stream("POST", url + "/v1/completions", json=body) as resp:
                    lines = resp.aiter_lines()
                    assert (await anext(lines)).startswith("data: {")
                    queued = asyncio.create_task(client.post(
                        url + "/v1/completions", json={**body, "stream": False}))
                    metrics = ""
                    async with asyncio.timeout(BOUND_S):  # the second waits for capacity
                        while 'kvbudget_queue_depth{tier="interactive"} 1' not in metrics:
                            metrics = (await client.get(url + "/metrics")).text
                    proc.send_signal(signal.SIGTERM)
                    refused = await queued
                    assert refused.status_code == 429
                    assert refused.json()["error"]["code"] == "no_capacity"
                    rest = [line async for line in lines if line]
                    assert '"code": "draining"' in rest[-1]
                async with asyncio.timeout(BOUND_S):
                    assert await proc.wait() == 0
                await err.task
                assert any("drain deadline passed: 1 request(s) in flight aborted" in line
                           for line in err.lines), err.lines
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        assert fake.aborted == 1 and len(fake.received) == 1
        run = read_run(tmp_path / "runs" / "run-0001")
        assert sorted(run.records["status"]) == ["preempted_dropped", "rejected_overloaded"]

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_sighup_reloads_the_scenarios_budget_and_refuses_a_tier_change(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('policy = "conservative"\ngateway_capacity_tokens = 1000\n')

    async def main() -> None:
        fake = FakeUpstream()
        async with serving(fake.app()) as up:
            proc = await _serve_process(tmp_path, up, "--scenario", str(scenario),
                                        "--count-tokens", "bytes")
            try:
                assert proc.stderr is not None
                err = _Lines(proc.stderr)
                url = (await err.wait_for(r"listening on (http://127\.0\.0\.1:\d+)")).group(1)
                async with httpx.AsyncClient(timeout=BOUND_S) as client:
                    async def capacity() -> str:
                        text = (await client.get(url + "/metrics")).text
                        return str(re.findall(r"^kvbudget_capacity_tokens (\d+)$", text, re.M)[0])

                    assert await capacity() == "1000"
                    scenario.write_text('policy = "overcommit"\ngateway_capacity_tokens = 3000'
                                        '\nlease_ttl_s = 120\n')
                    proc.send_signal(signal.SIGHUP)
                    await err.wait_for(r"reloaded: policy .*overcommit.*capacity 3000 tokens; "
                                       r"lease TTL 120")
                    assert await capacity() == "3000"
                    scenario.write_text('gateway_capacity_tokens = 5000\n[[tiers]]\n'
                                        'name = "only"\nmax_sequence_tokens = 4096\n')
                    proc.send_signal(signal.SIGHUP)
                    await err.wait_for(r"reload refused, the running policy and budget stay: "
                                       r"the tiers changed .* restart")
                    assert await capacity() == "3000"
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(BOUND_S):
                    assert await proc.wait() == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_serve_follows_an_upstream_restarted_with_a_larger_context(tmp_path: Path) -> None:
    """``kvbudget serve`` started against a context of 1024; the upstream then tells 2048 (a
    restart with another ``--max-model-len``). A prompt of 100 with ``max_tokens`` 1500 was
    reserved 1024 for the whole run (it uses up to 1600) and every run directory said 1024:
    the capacity read now reads the context again, says so in one line, and the next
    directory records it."""
    async def main() -> None:
        fake = FakeUpstream(max_model_len=1024)
        fake.release.set()
        async with serving(fake.app()) as up:
            proc = await _serve_process(tmp_path, up, "--count-tokens", "upstream",
                                        "--capacity-period-s", "0.1", "--out",
                                        str(tmp_path / "runs"))
            try:
                assert proc.stderr is not None
                err = _Lines(proc.stderr)
                url = (await err.wait_for(r"listening on (http://127\.0\.0\.1:\d+)")).group(1)
                await err.wait_for(r"max_model_len 1,024 .* read again at each capacity read")
                body = {"model": "fake", "prompt": " ".join(["word"] * 99), "max_tokens": 1500}
                async with httpx.AsyncClient(timeout=BOUND_S) as client:
                    assert (await client.post(url + "/v1/completions",
                                              json=body)).status_code == 200
                    fake.max_model_len = 2048
                    said = await err.wait_for(r"upstream settings changed \(.*max_model_len "
                                              r"1024 -> 2048\): .*the context 2,048")
                    assert "run-0001 closed" in said.string
                    assert (await client.post(url + "/v1/completions",
                                              json=body)).status_code == 200
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(BOUND_S):
                    assert await proc.wait() == 0
                await err.task
                assert sum("settings changed" in line for line in err.lines) == 1
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        runs = [read_run(tmp_path / "runs" / f"run-000{n}") for n in (1, 2)]
        assert [list(r.records["reserved_tokens"]) for r in runs] == [[1024], [1600]]
        told = [json.loads((tmp_path / "runs" / f"run-000{n}" / "replay.json").read_text())
                for n in (1, 2)]
        assert [t["server"]["max_model_len"] for t in told] == [1024, 2048]

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_serve_with_a_given_capacity_does_not_cut_reservations_at_the_context(
        tmp_path: Path) -> None:
    """With ``--capacity-tokens`` no read follows the upstreams, so a context cap could not
    follow one restarted with a larger context (it would use more than it reserved): the
    reservation stays prompt + max_tokens, and a line says why."""
    async def main() -> None:
        fake = FakeUpstream(max_model_len=1024)
        fake.release.set()
        async with serving(fake.app()) as up:
            proc = await _serve_process(tmp_path, up, "--count-tokens", "upstream",
                                        "--capacity-tokens", "100000", "--out",
                                        str(tmp_path / "runs"))
            try:
                assert proc.stderr is not None
                err = _Lines(proc.stderr)
                url = (await err.wait_for(r"listening on (http://127\.0\.0\.1:\d+)")).group(1)
                await err.wait_for(r"not cut at the upstreams' context \(1,024 tokens at the "
                                   r"start\): with --capacity-tokens no read follows")
                body = {"model": "fake", "prompt": " ".join(["word"] * 99), "max_tokens": 1500}
                async with httpx.AsyncClient(timeout=BOUND_S) as client:
                    assert (await client.post(url + "/v1/completions",
                                              json=body)).status_code == 200
                proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(BOUND_S):
                    assert await proc.wait() == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        run = read_run(tmp_path / "runs" / "run-0001")
        assert list(run.records["reserved_tokens"]) == [1600]

    asyncio.run(main())
