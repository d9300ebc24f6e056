"""``capacity --interval`` and ``plan --interval``: a step-model draw per replication, so the
intervals over the replications carry the step model's uncertainty as well as the seed's."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.step_uncertainty import STATED_RANGES
from kvbudget.simulator.scenario import make_scenario, scenario_from_dict
from kvbudget.studies import intervals as iv
from kvbudget.studies.capacity import CapacitySpec, capacity
from kvbudget.studies.executors import LocalExecutor
from kvbudget.studies.plan import PlanSpec, plan
from kvbudget.studies.sweep import RunSpec, plan_runs, replication_seeds, run_key
from kvbudget.studies.tune import Constraint
from tests.conftest import small_scenario_dict
from tests.unit.studies.fake_executor import FakeExecutor

T = TypeVar("T")
R = TypeVar("R")
runner = CliRunner()


class _Worlds(FakeExecutor):
    """A stand-in executor whose worlds differ by their draw's ``z`` alone: a capacity
    executor meets the target up to rate scale ``2 exp(z / 4)`` (offered rate 10 req/s x the
    scale); a plan executor's p99 TTFT is ``base[gpu] exp(z / 4) / replicas``."""

    name = "worlds"

    def __init__(self, base: dict[str, float] | None = None) -> None:
        self.base = base
        self.tasks: list[RunSpec] = []

    @property
    def num_workers(self) -> int:
        return 1

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, task in enumerate(tasks):
            assert isinstance(task, RunSpec)
            self.tasks.append(task)
            z = 0.0 if task.step_draw is None else task.step_draw.z
            s = task.scenario
            row: Any = {"run_key": task.key, "point": task.point,
                        "replication": task.replication, "seed": task.seed,
                        "policy": s["policy"], "rate_scale": task.rate_scale,
                        **dict(task.values), "offered_rate_rps": 10.0 * task.rate_scale,
                        "overall_output_tokens_per_s": 1000.0}
            if self.base is None:
                ok = task.rate_scale <= 2.0 * math.exp(z / 4)
                row["overall_slo_attainment"] = 1.0 if ok else 0.5
            else:
                replicas = int((s.get("fleet") or {}).get("num_replicas", 1))
                row["interactive_ttft_p99_s"] = self.base[str(s["gpu"])] * math.exp(z / 4) \
                    / replicas
            yield i, row


def _scenario(n: int = 120, rate: float = 8.0, **extra: Any) -> Any:
    return scenario_from_dict({**small_scenario_dict(n, rate, seed=21, policy="conservative"),
                               **extra}, Path("."))


def test_each_replication_takes_its_own_draw_and_a_run_key_says_so() -> None:
    scn = _scenario()
    seeds = replication_seeds(3, 4)
    draws = iv.replication_draws(scn, 4, 3)
    assert draws == iv.replication_draws(scn, 4, 3)  # the same seed, the same worlds
    assert len({d.factors for d in draws}) == 4 and all(d.z != 0 for d in draws)
    plain = plan_runs(scn, [_point()], seeds)
    drawn = plan_runs(scn, [_point()], seeds, step_draws=draws)
    assert [r.step_draw for r in drawn] == draws
    # a run without a draw keeps the key it had; a run with one is another run
    assert plain[0].key == run_key({**plain[0].scenario}, plain[0].base_dir, 1.0)
    assert {r.key for r in plain}.isdisjoint(r.key for r in drawn)
    with pytest.raises(ValueError, match="2 step-model draws for 4 seeds"):
        plan_runs(scn, [_point()], seeds, step_draws=draws[:2])


def _point() -> Any:
    from kvbudget.studies.sweep import GridPoint

    return GridPoint(0, (("policy", "conservative"),), (), "conservative", 1.0)


def test_capacity_interval_brackets_every_worlds_own_capacity() -> None:
    """Known answer: world r meets the target up to scale 2 exp(z_r / 4), so its capacity is
    20 exp(z_r / 4) req/s; each world's own search brackets it to rel_tol, and with 4 worlds
    the 90 % interval runs from the least world's lower bracket to the greatest's upper one."""
    scn = _scenario()
    spec = CapacitySpec(scn, ("conservative",), replications=4, rel_tol=0.01, interval=0.9)
    result = capacity(spec, _Worlds())
    caps = [20 * math.exp(d.z / 4) for d in iv.replication_draws(scn, 4, scn.seed)]
    low, high = result.capacities[0].interval_rps or (0.0, 0.0)
    assert low <= min(caps) <= low * 1.01 and high / 1.01 <= max(caps) <= high
    described = result.describe()
    assert described["policies"][0]["capacity_interval_rps"] == [low, high]
    assert "the seed and the step model's draw" in described["interval"]["combines"]
    assert set(result.table()["search"].dropna()) == {"world"}


def test_seed_only_worlds_that_agree_give_the_searchs_own_bracket() -> None:
    """Without model draws the stand-in's worlds are one world: the interval is the bracket
    the search found, and nothing is run beyond the search."""
    scn = _scenario()
    spec = CapacitySpec(scn, ("conservative",), replications=3, rel_tol=0.01, interval=0.9,
                        model_draws=False)
    ex = _Worlds()
    c = capacity(spec, ex).capacities[0]
    assert c.interval_rps == c.bracket_rps
    assert all(t.step_draw is None for t in ex.tasks)
    plain = capacity(CapacitySpec(scn, ("conservative",), replications=3, rel_tol=0.01),
                     _Worlds()).capacities[0]
    assert plain.interval_rps is None and plain.capacity_rps == c.capacity_rps


def _trace(tmp_path: Path) -> Path:
    """200 requests at 20 req/s: a trace, so every replication serves the same requests and
    the seed changes nothing (the worlds differ by their step model alone)."""
    path = tmp_path / "trace.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"{0.05 * i:.2f},{300 + 37 * (i % 20)},{60 + 7 * (i % 13)}" for i in range(200)]
    path.write_text("\n".join(rows) + "\n")
    return path


def _wider(factor: float) -> dict[str, tuple[float, float, str]]:
    """The stated ranges, each ``factor`` times as wide in log space about its centre."""
    out = {}
    for k, (lo, hi, _) in STATED_RANGES.items():
        c = math.sqrt(lo * hi)
        out[k] = (c * (lo / c) ** factor, c * (hi / c) ** factor, "")
    return out


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One trace's capacity on an A100 (a datasheet GPU: the structural error applies),
    simulated: plain, seed-only, with a zero-width step model, with the stated ranges (and the
    structural error), and, without the structural error, with the stated ranges and with
    ranges four times as wide."""
    scn = make_scenario(None, (), trace=_trace(tmp_path_factory.mktemp("t")), gpu="A100-80GB")
    cases: list[tuple[str, dict[str, Any] | None, bool, dict[str, Any]]] = [
        ("plain", None, False, {}),
        ("seed", None, False, {"interval": 0.9, "model_draws": False}),
        ("zero", _wider(0.0), True, {"interval": 0.9}),
        ("stated", None, False, {"interval": 0.9}),
        ("constants", None, True, {"interval": 0.9}),
        ("wide", _wider(4.0), True, {"interval": 0.9}),
    ]
    out: dict[str, Any] = {}
    mp = pytest.MonkeyPatch()
    try:
        for name, ranges, no_structure, kw in cases:
            if ranges is not None:
                mp.setattr(iv, "STATED_RANGES", ranges)
            if no_structure:
                mp.setattr(iv, "structural_sigma", lambda _gpu: 0.0)
            spec = CapacitySpec(scn, (scn.spec.policy,), replications=4, rel_tol=0.03, **kw)
            with LocalExecutor(1) as ex:
                out[name] = capacity(spec, ex).capacities[0]
            mp.undo()
    finally:
        mp.undo()
    return out


def test_a_zero_width_model_gives_the_seed_only_interval(simulated: dict[str, Any]) -> None:
    """With every world's step model the nominal one, the interval is the seed-only one (on a
    trace: the search's own bracket), and the search's answer is today's."""
    seed, zero, plain = simulated["seed"], simulated["zero"], simulated["plain"]
    assert zero.interval_rps == seed.interval_rps == plain.bracket_rps
    assert zero.attainment == seed.attainment
    # plain ran once (a fixed trace: its four replications the same run), so it has no
    # interval over replications; its mean is theirs
    assert plain.attainment[0] == seed.attainment[0] and math.isnan(plain.attainment[1])
    assert zero.capacity_rps == seed.capacity_rps == plain.capacity_rps


def test_a_wider_stated_range_widens_the_interval(simulated: dict[str, Any]) -> None:
    def width(c: Any) -> float:
        return float(c.interval_rps[1] / c.interval_rps[0])

    # the constants' ranges alone (the same draws, each four times as far out in log space in
    # the wide case; the structural error, the same in both, would blur the comparison: a
    # world's heavy-tailed structural factor and its constants can pull opposite ways)
    seed, stated, wide = simulated["seed"], simulated["constants"], simulated["wide"]
    assert width(seed) < width(stated) <= width(wide)
    assert width(seed) < 1.04  # one bracket at rel_tol 3 %
    assert wide.interval_rps[0] <= stated.interval_rps[0]
    assert wide.interval_rps[1] >= stated.interval_rps[1]
    assert width(simulated["stated"]) > width(seed)  # with the structural error too


def _plan_spec(**kw: Any) -> PlanSpec:
    scn = scenario_from_dict(small_scenario_dict(40, 4.0, policy="conservative"), Path("."))
    return PlanSpec(scn, gpus=("A100-80GB",), replicas=(1, 2, 3, 4, 6),
                    prices={"A100-80GB": 1.0}, replications=4,
                    slos=(Constraint.parse("tiers.interactive.ttft_s.p99<=2"),), **kw)


def test_plan_interval_is_the_replica_counts_the_worlds_need() -> None:
    """Known answer: world r's p99 TTFT is 5 exp(z_r / 4) / replicas, so it needs the least
    count n tried with 5 exp(z_r / 4) / n <= 2; the plan tries counts up to the first whose
    t bound meets the SLO, and a world not met by then is open above."""
    spec = _plan_spec(interval=0.9)
    result = plan(spec, _Worlds({"A100-80GB": 5.0}))
    (c,) = result.candidates
    needs = []
    for d in iv.replication_draws(spec.scenario, 4, spec.root_seed or 0):
        need = next((n for n in c.tried if 5 * math.exp(d.z / 4) / n <= 2), math.inf)
        needs.append(need)
    row = result.table().iloc[0]
    assert (row["replicas_low"], row["replicas_high"]) == (min(needs), max(needs))
    best = result.describe()["interval"]["cheapest"]
    assert best["replicas"] == c.replicas and best["replicas_low"] == min(needs)
    # seed only: every world is the one the stand-in's seeds cannot tell apart
    seed_only = plan(_plan_spec(interval=0.9, model_draws=False), _Worlds({"A100-80GB": 5.0}))
    row = seed_only.table().iloc[0]
    assert row["replicas_low"] == row["replicas_high"] == row["replicas"] == 3


def _toml(tmp_path: Path, n: int = 40) -> str:
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(small_scenario_dict(n, 4.0, policy="conservative")))
    return str(path)


def test_cli_capacity_and_plan_report_their_interval(tmp_path: Path) -> None:
    scn = _toml(tmp_path)
    res = runner.invoke(app, ["capacity", "--scenario", scn, "--out", str(tmp_path / "c"),
                              "--rel-tol", "0.3", "--interval", "0.8", "--interval-draws", "2",
                              "--no-plot"])
    assert res.exit_code == 0, res.output
    assert "80% interval" in res.stdout and "each a world: the seed and the step" in res.stdout
    described = json.loads((tmp_path / "c" / "capacity.json").read_text())
    assert described["replications"] == 2 and described["interval"]["level"] == 0.8
    low, _high = described["policies"][0]["capacity_interval_rps"]
    assert low <= described["policies"][0]["capacity_rps"]
    res = runner.invoke(app, ["plan", "--scenario", scn, "--out", str(tmp_path / "p"),
                              "--gpus", "H100-80GB", "--replicas", "1,2", "--interval", "0.8",
                              "--interval-draws", "2", "--slo", "overall_slo_attainment>=0.1"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "replicas 80%" in text and "cheapest: H100-80GB 1x1 conservative" in text
    plan_json = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert plan_json["interval"]["cheapest"]["replicas_high"] == 1


@pytest.mark.parametrize("command", ["capacity", "plan"])
@pytest.mark.parametrize(("args", "needle"), [
    (["--interval", "1.5"], "--interval: the level must be between 0 and 1"),
    (["--interval", "0"], "--interval: the level must be between 0 and 1"),
    (["--interval", "0.9", "--interval-draws", "1"], "--interval-draws: must be in [2,"),
    (["--interval", "0.9", "-r", "3"], "--replications: with --interval the replications"),
    (["--interval-draws", "5"], "--interval-draws: applies with --interval only"),
])
def test_cli_bad_interval_is_one_line_naming_the_flag(tmp_path: Path, command: str,
                                                      args: list[str], needle: str) -> None:
    res = runner.invoke(app, [command, "--scenario", _toml(tmp_path), "--out",
                              str(tmp_path / "o"), *args])
    assert res.exit_code == 2, res.output
    assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "parts").exists()


def test_cli_a_model_without_stated_uncertainty_is_refused_before_a_run(tmp_path: Path) -> None:
    res = runner.invoke(app, ["capacity", "--scenario", _toml(tmp_path), "--out",
                              str(tmp_path / "o"), "--engine-defaults", "kvbudget-0.1",
                              "--interval", "0.9"])
    assert res.exit_code == 2, res.output
    assert "no stated uncertainty" in res.stderr


def test_cli_a_cost_file_without_a_posterior_is_refused_by_name(tmp_path: Path) -> None:
    from kvbudget.perf.cost_model import LinearCostModel, save_cost_model

    cost = tmp_path / "linear.json"
    save_cost_model(LinearCostModel(0.01, 1e-5, 1e-4, 1e-7), cost)
    res = runner.invoke(app, ["plan", "--scenario", _toml(tmp_path), "--out",
                              str(tmp_path / "o"), "--gpus", "H100-80GB", "--cost-model",
                              str(cost), "--interval", "0.9"])
    assert res.exit_code == 2, res.output
    assert str(cost) in res.stderr and "no calibration.uncertainty" in res.stderr


def test_simulate_intervals_carry_the_structural_error_off_h100(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On an A100 (a datasheet GPU) the same draws with the structural error give a wider TPOT
    interval than without it; on H100 (derived) the structural error is none."""
    scn = make_scenario(None, (), trace=_trace(tmp_path), gpu="A100-80GB")
    with_error = iv.draw_intervals(scn, None, level=0.9, num_draws=8)
    assert "'datasheet'" in with_error.method and "sigma 0.1234" in with_error.method
    monkeypatch.setattr(iv, "structural_sigma", lambda _gpu: 0.0)
    without = iv.draw_intervals(scn, None, level=0.9, num_draws=8)
    lo1, hi1 = with_error.figures["overall"]["tpot_s.p50"]
    lo0, hi0 = without.figures["overall"]["tpot_s.p50"]
    assert hi1 / lo1 > hi0 / lo0
    h100 = iv.stated_draws(make_scenario(None, ()).sim_config().resolved_cost_model())
    assert "'derived'" in h100.method and "sigma 0 " in h100.method
