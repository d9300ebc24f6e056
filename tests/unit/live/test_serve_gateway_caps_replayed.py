"""A ``kvbudget serve`` run directory keeps the gateway's own caps, its front door and lease
TTL (``replay.json``'s ``front_door``, ``lease_ttl_s``), and ``validate --records`` simulates
the gateway with them. Before, the directory kept the policy and tiers only: a run whose
gateway refused at its front door (``max_concurrent_requests`` 1) was simulated as a gateway
without one, which served the request the live one refused, unsaid. A directory written
before they were kept says they are unknown; a budget re-read mid-run says the one simulated."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.live.gateway_server import ServeConfig
from kvbudget.live.serve_records import Outcome, ServeRecorder, request_row
from kvbudget.live.serve_reload import Reloaded, apply_reload
from kvbudget.live.serve_run import ServeSettings, build_server
from kvbudget.live.serve_upstream import UpstreamOptions
from kvbudget.policies import make_policy
from kvbudget.policies.gateway import FrontDoor
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.policies.tiers import TierConfig

pytestmark = pytest.mark.timeout(120)
TIERS = (TierConfig("chat", max_sequence_tokens=4096, queue_timeout_s=5.0),)
SAMPLE = {"time_s": 0.0, "kv_used_tokens": 0, "kv_reserved_tokens": 0,
          "kv_capacity_tokens": 20_000, "num_running": 0, "num_waiting": 0,
          "num_preemptions": 0}


def _recorder(out: Path, door: FrontDoor | None, ttl: float | None) -> ServeRecorder:
    """The recorder ``kvbudget serve`` builds (:func:`build_server`, no server started): its
    ``replay.json`` as the gateway writes it."""
    settings = ServeSettings(
        tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
        upstream=UpstreamOptions(("http://127.0.0.1:9",)), out=out, capacity_tokens=20_000,
        config=ServeConfig(count_tokens="bytes", trust_tier_header=True, default_tier="chat"),
        front_door=door,
        lease_ttl_s=ttl)
    recorder = build_server(settings, settings.gateway(20_000)).recorder
    assert recorder is not None
    return recorder


def _two_at_once(recorder: ServeRecorder, later: int | None = None) -> Path:
    """Two requests 1 ms apart: the first served, the second refused by the front door's cap
    of one request in flight (429 ``concurrency``), as the live gateway wrote them; ``later``:
    a budget read from the upstreams after the first ended."""
    recorder.sample(SAMPLE, 0.0)
    first = GatewayRequest(request_id=0, tier="chat", arrival_s=0.0, prompt_tokens=100,
                           max_output_tokens=50)
    recorder.write(request_row(first, Outcome(
        "completed", "", 50, 0.0, 0.02, 0.3, 150, token_gaps_s=(6e-3,) * 49)), 0.3)
    if later is not None:
        recorder.sample({**SAMPLE, "time_s": 0.3, "kv_capacity_tokens": later}, 0.3)
    second = GatewayRequest(request_id=1, tier="chat", arrival_s=0.001, prompt_tokens=100,
                            max_output_tokens=50)
    recorder.write(request_row(second, Outcome("rejected_overloaded", "concurrency",
                                               finished_s=0.001)), 0.3)
    return recorder.close(0.3) or Path()


def _validate(run_dir: Path, out: Path) -> tuple[str, pd.DataFrame]:
    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(out)])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    sim = pd.read_parquet(out / "sim" / "requests.parquet").sort_values("request_id")
    return said, sim


def test_a_serve_runs_front_door_and_lease_ttl_are_simulated(tmp_path: Path) -> None:
    run_dir = _two_at_once(_recorder(tmp_path / "runs", FrontDoor(max_concurrent_requests=1),
                                     30.0))
    meta = json.loads((run_dir / "replay.json").read_text())
    assert meta["front_door"]["max_concurrent_requests"] == 1
    assert meta["front_door"]["tier_max_queued"] == {}
    assert meta["lease_ttl_s"] == 30.0
    said, sim = _validate(run_dir, tmp_path / "v")
    assert "front door max_concurrent_requests 1, evicting lower priorities from the " \
        "recording; lease TTL 30 s from the recording" in said, said
    # the simulated gateway refuses the second at its front door, as the live one did
    assert list(sim["status"]) == ["completed", "rejected_overloaded"], sim
    assert sim["reason"].iloc[1] == "concurrency"


def test_a_serve_run_without_caps_says_so(tmp_path: Path) -> None:
    """A gateway without a front door nor a lease TTL is recorded as such (``null``), and
    simulated without them, said."""
    run_dir = _two_at_once(_recorder(tmp_path / "runs", None, None))
    meta = json.loads((run_dir / "replay.json").read_text())
    assert meta["front_door"] is None and meta["lease_ttl_s"] is None
    said, sim = _validate(run_dir, tmp_path / "v")
    assert "no front-door caps from the recording; lease TTL none from the recording" in said
    assert list(sim["status"]) == ["completed", "completed"]


def test_a_directory_written_before_says_its_caps_are_unknown(tmp_path: Path) -> None:
    recorder = ServeRecorder(tmp_path / "runs", tiers=TIERS,
                             policy={"name": "conservative"}, rotate_requests=100,
                             meta={"executor": "serve", "tiers": [
                                 {"name": "chat", "max_sequence_tokens": 4096,
                                  "queue_timeout_s": 5.0}]})
    said, _ = _validate(_two_at_once(recorder), tmp_path / "v")
    assert "the gateway's front-door caps and lease TTL are unknown (the directory was " \
        "written before kvbudget serve kept them): simulated without them" in said, said


def test_a_budget_that_changed_mid_run_is_said(tmp_path: Path) -> None:
    """The upstreams' /metrics re-read mid-run moved the budget: said, and simulated as it
    moved (tests/unit/live/test_serve_budget_moves_replayed.py)."""
    run_dir = _two_at_once(_recorder(tmp_path / "runs", None, None),
                           later=12_000)
    said, _ = _validate(run_dir, tmp_path / "v")
    assert "the gateway's budget changed while this run ran (12,000 to 20,000 tokens, " \
        "re-read from the upstreams' /metrics or reloaded; 20,000 at its start, 12,000 at " \
        "its end): the simulated gateway starts with 20,000 and moves it at the 1 time the " \
        "timeline recorded" in said, said
    assert "budget 20,000 tokens at the start, then 12,000 at 0.3 s (from the recording's " \
        "timeline)" in said, said


def test_a_reload_of_the_caps_starts_a_directory_that_records_them(tmp_path: Path) -> None:
    """A reload (SIGHUP) that changed the front door or lease TTL but not the policy kept the
    open directory, whose ``replay.json`` then said the caps before for rows run after: the
    directory is closed and the next records the new caps, as a policy reload does."""
    settings = ServeSettings(
        tiers=TIERS, new_policy=lambda: make_policy("conservative", {}),
        upstream=UpstreamOptions(("http://127.0.0.1:9",)), out=tmp_path / "runs",
        capacity_tokens=20_000,
        config=ServeConfig(count_tokens="bytes", trust_tier_header=True, default_tier="chat"),
        front_door=FrontDoor(max_concurrent_requests=1), lease_ttl_s=30.0)
    server = build_server(settings, settings.gateway(20_000))
    recorder = server.recorder
    assert recorder is not None
    recorder.sample(SAMPLE, 0.0)
    request = GatewayRequest(request_id=0, tier="chat", arrival_s=0.0, prompt_tokens=100,
                             max_output_tokens=50)
    recorder.write(request_row(request, Outcome("completed", "", 50, 0.0, 0.02, 0.3, 150)), 0.3)
    same = Reloaded(make_policy("conservative", {}), TIERS,
                    front_door=FrontDoor(max_concurrent_requests=1), lease_ttl_s=30.0)
    assert apply_reload(server.admission, lambda: same, recorder.new_policy)
    assert recorder.closed == []  # nothing changed: the directory stays open
    wider = Reloaded(make_policy("conservative", {}), TIERS,
                     front_door=FrontDoor(max_concurrent_requests=8), lease_ttl_s=None)
    assert apply_reload(server.admission, lambda: wider, recorder.new_policy)
    assert recorder.closed == [tmp_path / "runs" / "run-0001"]
    recorder.write(request_row(replace(request, request_id=1), Outcome(
        "completed", "", 50, 0.4, 0.42, 0.7, 150)), 0.7)
    recorder.close(0.7)
    before = json.loads((tmp_path / "runs" / "run-0001" / "replay.json").read_text())
    after = json.loads((tmp_path / "runs" / "run-0002" / "replay.json").read_text())
    assert (before["front_door"]["max_concurrent_requests"], before["lease_ttl_s"]) == (1, 30.0)
    assert (after["front_door"]["max_concurrent_requests"], after["lease_ttl_s"]) == (8, None)


def test_a_damaged_front_door_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A hand-edited ``front_door`` of an unknown cap: one line naming the file and the
    fields, exit 2, no traceback, and no simulation without it."""
    run_dir = _two_at_once(_recorder(tmp_path / "runs", FrontDoor(max_concurrent_requests=1),
                                     None))
    meta = json.loads((run_dir / "replay.json").read_text())
    meta["front_door"]["max_concurrent"] = 4
    (run_dir / "replay.json").write_text(json.dumps(meta))
    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    said = " ".join(res.output.split())
    assert res.exit_code == 2, said
    assert f"error: {run_dir}: replay.json: front_door/lease_ttl_s:" in said, said
    assert "max_concurrent" in said and "Traceback" not in said
