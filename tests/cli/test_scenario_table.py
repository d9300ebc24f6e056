"""Scenario fields of every section with values of the wrong kind or of absurd size (issue 20's
campaign, the cases it found accepted or crashing): each is refused in one line naming the
field, exit 2, before anything runs. Written as ``--set`` expressions (the same validation as a
scenario file's tables).
"""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from kvbudget.cli.main import app

runner = CliRunner()
ROOT = typer.main.get_command(app)


@pytest.fixture(autouse=True)
def _built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer.testing

    real = typer.testing._get_command
    monkeypatch.setattr(typer.testing, "_get_command", lambda a: ROOT if a is app else real(a))


HUGE = "1" + "0" * 30
# a switch where a number is due, in every section that has numbers
SWITCH_AS_NUMBER = [
    "seed", "gateway_capacity_tokens", "lease_ttl_s", "timeline_period_s",
    "engine.block_size", "engine.num_gpu_blocks", "engine.max_num_seqs",
    "engine.max_num_batched_tokens", "engine.tensor_parallel_size",
    "engine.gpu_memory_utilization", "engine.swap_space_gib", "engine.schedule_conservativeness",
    "front_door.max_concurrent_requests", "front_door.max_num_queued_requests",
    "front_door.max_num_queued_tokens", "front_door.tier_max_queued.interactive",
    "fleet.num_replicas", "closed_loop.num_users", "workload.num_requests",
    "workload.arrival.rate_rps",
]
# a number or text where a switch is due
NOT_A_SWITCH = ["engine.skip_ahead=0", 'engine.enable_prefix_caching="yes"',
                "engine.enable_expert_parallel=1", 'front_door.evict_lower_priority="no"',
                "engine.profile_cudagraph_memory=2"]
# beyond any deployment: the run would hang or overflow
ABSURD = [f"fleet.num_replicas={HUGE}", "fleet.num_replicas=1000000000000",
          "closed_loop.think_time_s=1e300", "closed_loop.think_time_s=1e12",
          f"closed_loop.num_users={HUGE}"]


def _refused(args: list[str], field: str) -> None:
    res = runner.invoke(app, ["simulate", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    err = res.stderr.strip()
    assert res.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert field in err.replace(" ", "."), err


@pytest.mark.parametrize("field", SWITCH_AS_NUMBER)
def test_a_switch_is_not_a_number(field: str) -> None:
    extra = ["--set", "closed_loop.num_users=2"] if field.startswith("closed_loop.think") else []
    _refused([*extra, "--set", f"{field}=true"], field.rsplit(".", 1)[-1])


@pytest.mark.parametrize("expr", NOT_A_SWITCH)
def test_a_number_or_text_is_not_a_switch(expr: str) -> None:
    _refused(["--set", expr], expr.split("=")[0])


def test_a_switch_is_not_a_policy_parameter() -> None:
    _refused(["--set", "policy=overcommit", "--set", "policy_params.overcommit_ratio=true"],
             "overcommit_ratio")


@pytest.mark.parametrize("expr", ABSURD)
def test_sizes_beyond_any_deployment_are_refused(expr: str) -> None:
    extra = ["--set", "closed_loop.num_users=2"] if "think_time" in expr else []
    _refused([*extra, "--set", expr], expr.split("=")[0])


def test_a_tier_priority_beyond_the_engine_integers_is_refused() -> None:
    _refused(["--set", f'tiers=[{{name="interactive", priority={HUGE}}}]'], "tiers.0.priority")


def test_a_model_name_no_file_system_takes_is_one_line() -> None:
    res = runner.invoke(app, ["simulate", "--model", "x" * 5000])
    assert res.exit_code == 2 and res.stderr.startswith("error: "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr


def test_the_bounds_leave_real_values_alone() -> None:
    res = runner.invoke(app, ["simulate", "--set", "workload.num_requests=5", "--set",
                              "closed_loop.num_users=3", "--set",
                              "closed_loop.think_time_s=2.5", "--set", "engine.skip_ahead=false",
                              "--json"])
    assert res.exit_code == 0, res.stderr
