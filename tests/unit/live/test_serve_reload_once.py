"""One edit of ``kvbudget serve``'s scenario file gives one reload, whether the operator's
SIGHUP or the file watcher sees it first. Before, an edit followed by ``kill -HUP`` (as an
operator does) was reloaded by both: two ``reloaded`` lines for one change. Driven by the
calls the signal handler and the watcher make (:class:`ScenarioReloads`), no timer."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest

from kvbudget.cli.serve import settings_from_flags
from kvbudget.live.serve_records import Outcome, request_row
from kvbudget.live.serve_reload import ScenarioReloads
from kvbudget.live.serve_run import ServeSettings, build_server
from kvbudget.policies.request import Request as GatewayRequest

pytestmark = pytest.mark.timeout(120)
SAMPLE = {
    "time_s": 0.0,
    "kv_used_tokens": 0,
    "kv_reserved_tokens": 0,
    "kv_capacity_tokens": 20_000,
    "num_running": 0,
    "num_waiting": 0,
    "num_preemptions": 0,
}


def _settings(scenario: Path, out: Path) -> ServeSettings:
    """``kvbudget serve --scenario SCENARIO --out OUT --count-tokens bytes`` as the command
    reads it (its reload reads the file again)."""
    return settings_from_flags(
        ["http://127.0.0.1:9"],
        scenario,
        None,
        "127.0.0.1",
        0,
        None,
        False,
        None,
        5.0,
        "bytes",
        429,
        1.0,
        256,
        "round_robin",
        out,
        10_000,
        30.0,
        1 << 20,
        None,
    )


def _reloaded(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("reloaded:")]


@pytest.mark.parametrize("first", ["signal", "watcher"])
def test_an_edit_then_sighup_reloads_once(
    tmp_path: Path, first: str, caplog: pytest.LogCaptureFixture
) -> None:
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('policy = "conservative"\ngateway_capacity_tokens = 20000\n')
    settings = _settings(scenario, tmp_path / "runs")
    server = build_server(settings, settings.gateway(20_000))
    recorder = server.recorder
    assert recorder is not None and settings.watch == scenario
    reloads = ScenarioReloads(scenario, server.reload)
    recorder.sample(SAMPLE, 0.0)
    request = GatewayRequest(
        request_id=0, tier="interactive", arrival_s=0.0, prompt_tokens=100, max_output_tokens=50
    )
    recorder.write(request_row(request, Outcome("completed", "", 50, 0.0, 0.02, 0.3, 150)), 0.3)
    caplog.set_level(logging.WARNING, logger="kvbudget.serve")
    assert not reloads.poll()  # the file as the gateway started with it: nothing to do

    scenario.write_text('policy = "overcommit"\ngateway_capacity_tokens = 20000\n')
    if first == "signal":  # the operator's kill -HUP, then the watcher's next look
        reloads.signalled()
        assert not reloads.poll()
    else:  # the watcher looked first, then the signal came
        assert reloads.poll()
        reloads.signalled()
        assert any(
            "SIGHUP: " in r.getMessage()
            and "is as last read (applied): nothing to reload" in r.getMessage()
            for r in caplog.records
        ), caplog.records
    assert len(_reloaded(caplog)) == 1, _reloaded(caplog)
    assert server.admission.gateway.policy.name == "overcommit"
    assert recorder.closed == [tmp_path / "runs" / "run-0001"]  # one directory closed

    # the next edit is one more reload, seen by either
    scenario.write_text('policy = "conservative"\ngateway_capacity_tokens = 20000\n')
    reloads.signalled()
    assert not reloads.poll()
    assert len(_reloaded(caplog)) == 2 and server.admission.gateway.policy.name == "conservative"


def test_a_refused_file_is_refused_once_and_a_fixed_one_reloads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A bad edit is refused once (the watcher then the signal), a SIGHUP on it again says it
    was refused; the fixed file reloads; a file removed is passed on and refused in one line."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('policy = "conservative"\n')
    settings = _settings(scenario, tmp_path / "runs")
    server = build_server(settings, settings.gateway(20_000))
    reloads = ScenarioReloads(scenario, server.reload)
    caplog.set_level(logging.WARNING, logger="kvbudget.serve")
    scenario.write_text('policy = "nonesuch"\n')
    assert reloads.poll()
    reloads.signalled()
    said = [r.getMessage() for r in caplog.records]
    assert sum("reload refused" in s for s in said) == 1, said
    assert any("is as last read (refused then): nothing to reload" in s for s in said), said
    scenario.write_text('policy = "overcommit"\n')
    reloads.signalled()
    assert server.admission.gateway.policy.name == "overcommit"
    scenario.unlink()
    reloads.signalled()
    assert sum("reload refused" in r.getMessage() for r in caplog.records) == 2


def test_a_reload_that_moves_the_budget_is_a_timeline_row_then(tmp_path: Path) -> None:
    """A reload of ``gateway_capacity_tokens`` moves the budget at the reload: a timeline row
    is written then (the run directory's budget moves, simulated at their times), not at the
    next period's row."""
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('policy = "conservative"\ngateway_capacity_tokens = 20000\n')
    settings = _settings(scenario, tmp_path / "runs")
    server = build_server(settings, settings.gateway(20_000))
    recorder = server.recorder
    assert recorder is not None
    server.sample()
    reloads = ScenarioReloads(scenario, server.reload)
    scenario.write_text('policy = "conservative"\ngateway_capacity_tokens = 30000\n')
    reloaded_s = server.admission.now()
    reloads.signalled()
    request = GatewayRequest(
        request_id=0, tier="interactive", arrival_s=0.0, prompt_tokens=100, max_output_tokens=50
    )
    recorder.write(request_row(request, Outcome("completed", "", 50, 0.0, 0.02, 0.3, 160)), 0.3)
    recorder.close(server.admission.now())
    timeline = pd.read_parquet(tmp_path / "runs" / "run-0001" / "timeline.parquet")
    assert list(timeline["kv_capacity_tokens"]) == [20_000, 30_000]
    assert timeline["time_s"].iloc[1] >= reloaded_s
