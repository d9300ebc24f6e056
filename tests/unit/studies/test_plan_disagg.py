"""Plan's prefill:decode search (studies.plan_disagg): every split of each disaggregated total
beside the colocated replica counts, priced alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.simulator.scenario import scenario_from_dict
from kvbudget.studies.plan import PlanSpec, plan
from kvbudget.studies.plan_disagg import splits
from kvbudget.studies.sweep import RunSpec
from kvbudget.studies.tune import Constraint
from tests.conftest import small_scenario_dict
from tests.unit.studies.fake_executor import FakeExecutor

T = TypeVar("T")
R = TypeVar("R")


class _Fake(FakeExecutor):
    """A stand-in executor, worked by hand. Colocated, n replicas: p99 TTFT = p99 TPOT =
    3.5 / n (prefills interfere with decodes). Disaggregated, p prefill + d decode replicas:
    p99 TTFT = 1 / p, p99 TPOT = 2 / d. Output tokens 1,000/s."""

    name = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    @property
    def num_workers(self) -> int:
        return 1

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, task in enumerate(tasks):
            assert isinstance(task, RunSpec)
            s = task.scenario
            d = s.get("disaggregation")
            if d:
                assert not s.get("fleet")
                p, q = d["prefill"]["num_replicas"], d["decode"]["num_replicas"]
                self.calls.append((p, q))
                ttft, tpot = 1 / p, 2 / q
            else:
                n = int((s.get("fleet") or {}).get("num_replicas", 1))
                self.calls.append((n,))
                ttft = tpot = 3.5 / n
            row: Any = {"run_key": task.key, "point": task.point,
                        "replication": task.replication, "seed": task.seed,
                        "policy": s["policy"], **dict(task.values),
                        "interactive_ttft_p99_s": ttft, "interactive_tpot_p99_s": tpot,
                        "overall_output_tokens_per_s": 1000.0}
            yield i, row


SLOS = (Constraint.parse("tiers.interactive.ttft_s.p99<=1"),
        Constraint.parse("tiers.interactive.tpot_s.p99<=1"))


def _spec(tmp_path: Path, scenario: dict[str, Any] | None = None, **kw: Any) -> PlanSpec:
    scn = scenario_from_dict(scenario or small_scenario_dict(40, 4.0, policy="conservative"),
                             tmp_path)
    kw.setdefault("disagg_replicas", (2, 3, 4))
    return PlanSpec(scn, gpus=("A100-80GB",), replicas=(1, 2, 3, 4, 5), slos=SLOS,
                    prices={"A100-80GB": 1.0}, replications=2, **kw)


def test_splits_of_a_total() -> None:
    assert splits(4) == [(1, 3), (2, 2), (3, 1)]
    with pytest.raises(ValueError, match="at least 2 replicas"):
        splits(1)


def test_the_cheapest_split_is_found_beside_the_colocated_count(tmp_path: Path) -> None:
    ex = _Fake()
    totals: list[int] = []
    result = plan(_spec(tmp_path), ex, on_start=lambda n, _s: totals.append(n),
                  on_total=totals.append)
    colo, dis = result.candidates
    # colocated: 3.5/3 > 1, 3.5/4 <= 1 -> 4 replicas
    assert (colo.disaggregated, colo.replicas, colo.split) == (False, 4, None)
    # total 2: (1,1) misses TPOT 2/1; total 3: (1,2) meets 1/1 and 2/2, (2,1) misses TPOT
    assert (dis.disaggregated, dis.replicas, dis.split) == (True, 3, (1, 2))
    assert ex.calls == [(1,)] * 2 + [(1, 1)] * 2 + [(2,)] * 2 + [(1, 2)] * 2 + [(2, 1)] * 2 + [
        (3,)] * 2 + [(4,)] * 2  # total 4 never run; colocated 5 never run
    # at most: colocated 5 counts + disaggregated 1 + 2 + 3 splits, x 2 replications
    assert totals[0] == (5 + 6) * 2
    assert totals[-1] == len(ex.calls) == 14
    table = result.table()
    first = table.iloc[0]
    assert (first["prefill_replicas"], first["decode_replicas"], first["gpus"]) == (1, 2, 3)
    assert first["usd_per_hour"] == 3.0 and bool(first["feasible"])
    assert table.iloc[1]["usd_per_hour"] == 4.0 and table.iloc[1]["replicas"] == 4
    assert table.iloc[1]["prefill_replicas"] != table.iloc[1]["prefill_replicas"]  # NaN


def test_a_disaggregated_configuration_that_never_meets_shows_its_closest_split(
        tmp_path: Path) -> None:
    result = plan(_spec(tmp_path, disagg_replicas=(2,)), _Fake())
    dis = result.candidates[1]
    assert dis.replicas is None and dis.split == (1, 1)
    assert dis.note == "misses the SLOs up to 2 replicas (every prefill:decode split)"


def test_a_disaggregated_scenario_tries_its_pools_and_colocated_without_them(
        tmp_path: Path) -> None:
    data = small_scenario_dict(40, 4.0, policy="conservative")
    data["disaggregation"] = {"link": "pcie", "prefill": {"num_replicas": 1,
                                                          "router": "prefix_affinity",
                                                          "gpu": "H200-141GB"},
                              "decode": {"num_replicas": 5,
                                         "engine": {"tensor_parallel_size": 2}}}
    ex = _Fake()
    spec = _spec(tmp_path, data, disagg_replicas=())
    assert spec.disagg_replicas == (2, 3, 4, 5)  # --replicas from 2
    result = plan(spec, ex)
    assert result.candidates[1].split == (1, 2)
    runs = {json.dumps(r["disaggregation"], sort_keys=True) for r in
            (json.loads(json.dumps(x)) for x in _scenarios(spec)) if r.get("disaggregation")}
    assert runs  # the pools keep the scenario's link and routers, on the plan's GPU and TP
    table = json.loads(next(iter(runs)))
    assert table["link"] == "pcie" and table["prefill"]["router"] == "prefix_affinity"
    assert table["prefill"].get("gpu") is None and table["decode"].get("engine", {}) == {}
    assert any("disaggregation.prefill.gpu (H200-141GB) is not used" in n for n in result.notes)
    assert any("tensor_parallel_size is not used" in n for n in result.notes)


def _scenarios(spec: PlanSpec) -> list[dict[str, Any]]:
    from kvbudget.studies.plan import _candidates, _round_points
    from kvbudget.studies.sweep import plan_runs

    cands = _candidates(spec, [])
    return [r.scenario for r in plan_runs(spec.scenario, [p[3] for p in _round_points(
        spec, cands, 1)], (1,))]


def test_totals_below_two_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="totals must be >= 2"):
        _spec(tmp_path, disagg_replicas=(1, 4))


def _scenario_file(tmp_path: Path, **extra: Any) -> Path:
    import tomli_w

    scn = tmp_path / "s.toml"
    scn.write_bytes(tomli_w.dumps({**small_scenario_dict(30, 4.0, policy="conservative"),
                                   **extra}).encode())
    return scn


def test_plan_cli_searches_the_split(tmp_path: Path) -> None:
    out = tmp_path / "plan"
    res = CliRunner().invoke(app, [
        "plan", "--scenario", str(_scenario_file(tmp_path)), "--out", str(out),
        "--gpus", "H100-80GB", "--replicas", "1,2", "--disagg-replicas", "2,3", "-r", "1",
        "-j", "1", "--slo", "overall_slo_attainment>=0.5"])
    assert res.exit_code in (0, 1), res.output
    assert "P+D: prefill + decode replicas" in " ".join(res.stdout.split())
    described = json.loads((out / "plan.json").read_text())
    assert described["disagg_replicas"] == [2, 3]
    import pandas as pd

    runs = pd.read_parquet(out / "runs.parquet")
    disagg = runs[runs["prefill_replicas"].notna()]
    assert not disagg.empty and set(disagg["prefill_replicas"] + disagg["decode_replicas"]) <= {
        2, 3}
    assert "1P+1Dx1" in res.stdout or "1P+2Dx1" in res.stdout or "2P+1Dx1" in res.stdout


@pytest.mark.parametrize(("value", "message"), [
    ("1,4", "error: --disagg-replicas: each total must be >= 2 (a prefill and a decode "
            "replica), got '1,4'"),
    ("x", "error: --disagg-replicas: expected a comma-separated list, got 'x'"),
])
def test_plan_cli_refuses_bad_totals(tmp_path: Path, value: str, message: str) -> None:
    res = CliRunner().invoke(app, [
        "plan", "--scenario", str(_scenario_file(tmp_path)), "--out", str(tmp_path / "p"),
        "--disagg-replicas", value])
    assert res.exit_code == 2
    assert res.stderr.strip() == message


def test_the_docs_split_plan_prints_what_it_shows(tmp_path: Path, shared: Path) -> None:
    """docs/disaggregation.md's plan command, run whole (the docs test runs it reduced),
    prints the table the page shows."""
    import re
    import shlex

    from tests.conftest import REPO

    text = (REPO / "docs" / "disaggregation.md").read_text()
    block = re.search(r"```console\n\$ (kvbudget plan [^\n]*--disagg-replicas[^\n]*)\n"
                      r"(.*?)```", text, re.S)
    assert block is not None
    command, shown = block.group(1), block.group(2).strip().splitlines()
    args = shlex.split(command.replace("../shared", str(shared)))[1:]
    args[args.index("--out") + 1] = str(tmp_path / "split")
    res = CliRunner().invoke(app, [*args, "-j", "1"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[:len(shown)] == shown
    # the prose under the table: each split's attainment, as runs.parquet has it
    runs = pd.read_parquet(tmp_path / "split" / "runs.parquet")
    prose = text[block.end():text.index("## ", block.end())]
    quoted = re.findall(r"(\d) \+ (\d) \((\d+\.\d+) %", prose)
    assert len(quoted) == 4
    for p, d, pct in quoted:
        row = runs[(runs["prefill_replicas"] == int(p)) & (runs["decode_replicas"] == int(d))]
        digits = len(pct.split(".")[1])
        assert f"{100 * row['overall_slo_attainment'].item():.{digits}f}" == pct, (p, d)
