"""``kvbudget validate --url`` compares TTFT and TPOT over the live requests whose client did
not read the whole answer at once, on both sides, and says so under its table
(``analysis/whole_answer.py`` ``whole_answer_rows_of_run``, ``analysis/validation.py``
``validate_runs``, ``studies/validate.py`` ``compare_live_run``).

kvbudget's own client, on a busy machine (the CPU vLLM of tests/live shares two cores with it),
can read a stream only once the whole answer is there: its tokens then carry one time, so its
TTFT is about its E2E and its TPOT near 0, the client's read. Before, those entered the live
summary's percentiles and the per-request MAPEs unsaid. The fake live run here is the
simulation itself, so every figure the comparison keeps agrees exactly, and some of its
requests read whole at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer

from kvbudget.analysis.validation import summary_of, validate_runs
from kvbudget.analysis.whole_answer import whole_answer_rows_of_run
from kvbudget.cli.live import _print_live_validation
from kvbudget.live.replay import ReplayOutcome
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import DEFAULT_TIERS, make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.validate import LiveComparison, compare_live_run
from kvbudget.workloads import Workload

NUM = 12
OUTPUT = 16
BURST = [1, 2, 4, 6, 7, 9, 11]  # more than half: the TPOT p50 would be a client's read
READ_GAP_S = 2e-6  # the client's time between two chunks it read at once
CONFIG = SimConfig(engine=EngineConfig(block_size=16, num_gpu_blocks=2000, max_num_seqs=8,
                                       max_num_batched_tokens=2048),
                   tiers=DEFAULT_TIERS, cost_model=LinearCostModel(0.004, 1e-5, 1e-4, 0.0),
                   timeline_period_s=0.25)
CAPACITY = 16 * 2000
WORKLOAD = Workload(arrival_s=np.arange(NUM) * 0.5, prompt_tokens=np.full(NUM, 64),
                    output_tokens=np.full(NUM, OUTPUT), max_output_tokens=np.full(NUM, OUTPUT),
                    tier=np.zeros(NUM, np.int16), tier_names=("interactive",),
                    deadline_s=np.full(NUM, np.nan), request_id=np.arange(NUM))


@pytest.fixture(scope="module")
def simulated() -> RunResult:
    """The simulation ``validate --url`` makes of the workload (it is deterministic)."""
    return simulate(WORKLOAD, make_policy("conservative"), CONFIG)


def _live(sim: RunResult, burst: list[int]) -> ReplayOutcome:
    """The simulated run as a live replay's outcome, the requests ``burst`` read whole at once
    (every token at its last one's time), each request's mean time apart of its tokens after
    the first as its chunks' gaps give it; not each one's gaps (``token_gaps_s``), so the ITL
    rows pool every request's, said (tests/unit/studies/test_whole_answer_itl.py: with them)."""
    records = sim.records.sort_values("request_id").reset_index(drop=True).copy()
    itl = records["tpot_s"].to_numpy(dtype=np.float64).copy()
    for i in burst:
        read = float(records.at[i, "finished_s"]) - (OUTPUT - 1) * READ_GAP_S
        records.at[i, "first_token_s"] = read
        records.at[i, "ttft_s"] = read - float(records.at[i, "arrival_s"])
        records.at[i, "tpot_s"] = READ_GAP_S
        itl[i] = READ_GAP_S
    summary = summary_of(records, sim.timeline, DEFAULT_TIERS, CAPACITY, "conservative",
                         sim.token_gap_columns)
    summary["engine"] = sim.summary["engine"]
    return ReplayOutcome(records, sim.timeline, summary, complete=True, itl_mean_s=itl)


def _compare(live: ReplayOutcome, out: Path) -> LiveComparison:
    return compare_live_run(WORKLOAD, lambda: make_policy("conservative"), CONFIG, live, out,
                            capacity_tokens=CAPACITY)


def _unmasked(sim: RunResult, live: ReplayOutcome) -> pd.DataFrame:
    """The table as ``validate --url`` made it before: every request's TTFT and TPOT."""
    result, _ = validate_runs(sim.records, sim.timeline, sim.summary["engine"], live.records,
                              live.summary, tiers=DEFAULT_TIERS, capacity_tokens=CAPACITY,
                              policy="conservative", frontend_overhead_s=0.0,
                              sim_token_gaps=sim.token_gap_columns)
    return result.metrics.set_index("metric")


def test_ttft_and_tpot_are_compared_over_the_requests_not_read_at_once(
        simulated: RunResult, tmp_path: Path) -> None:
    live = _live(simulated, BURST)
    assert whole_answer_rows_of_run(live.records, live.itl_mean_s).nonzero()[0].tolist() == BURST
    outcome = _compare(live, tmp_path)
    table = outcome.validation.metrics.set_index("metric")
    csv = pd.read_csv(tmp_path / "validation.csv").set_index("metric")
    np.testing.assert_allclose(csv["measured"], table["measured"], rtol=1e-12)
    written = (tmp_path / "validation.csv").read_text()  # counts whole: not "completed,12.0"
    assert f"\ncompleted,{NUM},{NUM}," in written, written
    metrics = json.loads((tmp_path / "validation.json").read_text())["metrics"]
    assert [m["measured"] for m in metrics if m["metric"] == "completed"] == [NUM]
    # what the simulated times included, as the simulation's summary has it (validation.json
    # said frontend_overhead_s alone)
    written_json = json.loads((tmp_path / "validation.json").read_text())
    sim_summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert written_json["frontend"] == sim_summary["frontend"]
    assert written_json["simulated_times_include"].startswith("simulated times include ")
    assert all(type(m["measured"]) is int for m in metrics
               if m["metric"] in ("completed", "preemptions", "rejections"))
    # the fake live run is the simulation: over the other 5 requests, TTFT and TPOT agree
    for metric in ("ttft", "tpot"):
        others = np.delete(live.records[f"{metric}_s"].to_numpy(), BURST)
        for q in (50, 90, 99):
            row = table.loc[f"{metric}_p{q}_s"]
            assert row["measured"] == pytest.approx(np.percentile(others, q), rel=1e-12)
            assert row["rel_error"] == pytest.approx(0.0, abs=1e-9)
    before = _unmasked(simulated, live)
    assert before.loc["tpot_p50_s", "rel_error"] > 100  # the client's read, as it was
    # E2E, throughput and the counts: every request, as before
    for metric in ("e2e_p50_s", "e2e_p99_s", "output_tokens_per_s", "completed", "itl_p50_s"):
        assert table.loc[metric, "simulated"] == before.loc[metric, "simulated"]
        assert table.loc[metric, "measured"] == before.loc[metric, "measured"]
    pairs = outcome.validation.per_request.set_index("metric")
    assert pairs["num_pairs"].to_dict() == {"ttft_s": 5, "tpot_s": 5, "e2e_s": NUM}
    assert pairs.loc["tpot_s", "mape"] == pytest.approx(0.0, abs=1e-9)
    said = outcome.validation.said
    assert len(said) == 2
    # the p99s rest on these few requests, as validate --records says (TTFT and TPOT over the 5
    # not read whole)
    assert said[1].startswith("few requests: TTFT and TPOT over 5 requests, E2E over 12 "
                              "requests: a p99 over 100 or fewer lies between the two largest")
    assert said[0].startswith(
        f"TTFT and TPOT: 7 of the {NUM} compared requests got their whole answer in one read "
        "(tokens after the first under 100 us apart: found by the time between their first "
        "and last chunks, over the tokens after the first: kvbudget's client read each such "
        "stream at once")
    assert said[0].endswith(
        "the TTFT and TPOT rows and per-request MAPEs take the other 5 only, on both sides "
        f"(E2E and output tokens per second: all {NUM}; the ITL rows pool every completed "
        "request's gaps, theirs too)")
    assert json.loads((tmp_path / "validation.json").read_text())["said"] == list(said)


def test_a_run_read_all_at_once_has_no_measured_ttft_nor_tpot(simulated: RunResult,
                                                              tmp_path: Path) -> None:
    live = _live(simulated, list(range(NUM)))
    live.itl_mean_s = None  # a run without its gaps: found by (E2E - TTFT) instead
    outcome = _compare(live, tmp_path)
    table = outcome.validation.metrics.set_index("metric")
    assert np.isnan(table.loc["ttft_p50_s", "measured"])
    assert table.loc["ttft_p50_s", "simulated"] == pytest.approx(
        np.percentile(simulated.records["ttft_s"], 50))  # the simulated figure stays
    assert outcome.validation.worst_key_error()[1] == np.inf  # --max-error then fails
    assert ("found by the time between their first and last chunks where the run kept their "
            "gaps, else (E2E - TTFT)") in outcome.validation.said[0]
    assert (f"no compared request measured the server's TTFT nor TPOT, so the TTFT and TPOT "
            f"rows and per-request MAPEs have no measured figure (E2E and output tokens per "
            f"second: all {NUM};") in outcome.validation.said[0]


def test_a_run_with_no_request_read_at_once_gives_the_table_it_gave(simulated: RunResult,
                                                                    tmp_path: Path) -> None:
    live = _live(simulated, [])
    assert not whole_answer_rows_of_run(live.records, live.itl_mean_s).any()
    outcome = _compare(live, tmp_path)
    before = _unmasked(simulated, live).reset_index()
    pd.testing.assert_frame_equal(outcome.validation.metrics, before)
    few = ("few requests: TTFT, TPOT and E2E over 12 requests: a p99 over 100 or fewer lies "
           "between the two largest values (a p90 over 10 or fewer too), about the maximum, "
           "which one request moves")
    assert outcome.validation.said == (few,)
    assert json.loads((tmp_path / "validation.json").read_text())["said"] == [few]
    again, _ = validate_runs(
        simulated.records, simulated.timeline, simulated.summary["engine"], live.records,
        live.summary, tiers=DEFAULT_TIERS, capacity_tokens=CAPACITY, policy="conservative",
        frontend_overhead_s=0.0, sim_token_gaps=simulated.token_gap_columns,
        whole_answer=np.zeros(NUM, dtype=bool))
    pd.testing.assert_frame_equal(again.metrics, before)


def _printed(outcome: LiveComparison, out: Path, max_error: float | None) -> None:
    _print_live_validation(outcome, (None, None), overhead=0.0, speed_check=False, out=out,
                           max_error=max_error, async_scheduling=False)


def test_validate_says_it_under_the_table_and_max_error_judges_the_figures_compared(
        simulated: RunResult, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcome = _compare(_live(simulated, BURST), tmp_path)
    _printed(outcome, tmp_path, max_error=0.01)  # every compared figure agrees: no exit
    out = " ".join(capsys.readouterr().out.split())
    said = " ".join(outcome.validation.said[0].split())
    assert said in out
    assert out.index("per-request") < out.index(said) < out.index("wrote")
    # the same run compared over every request's TTFT and TPOT was off by far more
    assert abs(_unmasked(simulated, _live(simulated, BURST)).loc[
        "tpot_p50_s", "rel_error"]) > 0.01
    outcome = _compare(_live(simulated, list(range(NUM))), tmp_path / "all")
    with pytest.raises(typer.Exit) as exc:
        _printed(outcome, tmp_path / "all", max_error=0.01)
    assert exc.value.exit_code == 1
    assert ("error: ttft_p50_s has no relative error (a side has no figure for it), so "
            "--max-error 1.0% cannot be met") in capsys.readouterr().err
