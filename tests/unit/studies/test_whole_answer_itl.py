"""``kvbudget validate --url``'s ITL rows compare the same requests on both sides: the gaps
between the tokens of the live requests whose client did not read the whole answer at once,
and the simulation's gaps of those requests (``simulate``'s ``token_gaps_of``), as its TTFT
and TPOT rows do (``analysis/validation.py`` ``itl_of_others``, ``studies/validate.py``
``compare_live_run``).

A real replay against a fake server (a threaded ``http.server`` on 127.0.0.1): requests 1 and
3 get their whole answer in one write (four chunks, microseconds apart as the client reads
them); requests 0 and 2 get their first token, then the rest only once the next request has
reached the server (sequenced by that event, never by a timer), half a second later on the
replay's clock. Before, the live ITL rows pooled the whole answers' microsecond gaps too
(the p50 fell from about half a second to microseconds) and the simulated ones every
request's gaps.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from kvbudget.analysis.validation import summary_of, validate_runs
from kvbudget.analysis.whole_answer import whole_answer_rows_of_run
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, ReplayOutcome, replay
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.run_parts import REQUESTS_PART, TOKEN_GAPS_KEY
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.validate import compare_live_run
from kvbudget.workloads import Workload, from_columns
from tests.unit.live.fake_models import ModelsHandler, serving

WAIT_S = 60.0  # a bound on a held stream's wait; it ends at once at teardown
# max_tokens: requests 0 and 2 held until 1 and 3 come; 1 and 3 whole in one write
HELD_UNTIL = {8: 40, 9: 41}
TIERS = (INTERACTIVE, BATCH)
CAPACITY = 4096
# the whole answers' long prompts make the simulation's steps of them longer: its gaps of
# them differ from those of the requests compared
WORKLOAD = from_columns([0.0, 0.5, 1.0, 1.5], [5, 500, 5, 500], [8, 40, 9, 41],
                        tiers=["batch"] * 4)
CONFIG = SimConfig(engine=EngineConfig(block_size=16, num_gpu_blocks=2000, max_num_seqs=8,
                                       max_num_batched_tokens=2048),
                   tiers=TIERS, cost_model=LinearCostModel(0.004, 1e-5, 1e-4, 1e-6),
                   timeline_period_s=0.25)


def _event(text: str, finish: str | None) -> str:
    return "data: " + json.dumps({"id": "c", "object": "text_completion", "choices": [
        {"index": 0, "text": text, "finish_reason": finish}], "usage": None}) + "\n\n"


class _Handler(ModelsHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        n = int(body["max_tokens"])
        self.server.arrived[n].set()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        end = ("data: " + json.dumps({"id": "c", "object": "text_completion", "choices": [],
                                      "usage": {"prompt_tokens": len(body["prompt"]),
                                                "completion_tokens": n,
                                                "total_tokens": len(body["prompt"]) + n}})
               + "\n\ndata: [DONE]\n\n")
        if n in HELD_UNTIL:  # the first token, then the rest once the next request came
            self.wfile.write(_event("a", None).encode())
            self.wfile.flush()
            self.server.arrived[HELD_UNTIL[n]].wait(WAIT_S)
            self.wfile.write((_event("a" * (n - 1), "length") + end).encode())
        else:  # the whole answer in one write, in four chunks
            sizes = [n // 4] * 3 + [n - 3 * (n // 4)]
            self.wfile.write(("".join(_event("a" * k, "length" if i == 3 else None)
                                      for i, k in enumerate(sizes)) + end).encode())
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.arrived = {n: threading.Event() for n in (8, 9, 40, 41)}


@pytest.fixture
def url() -> Iterator[str]:
    server = _Server()
    with serving(server, lambda: [event.set() for event in server.arrived.values()]) as at:
        yield at


def _part_gaps(out: Path) -> dict[int, list[float]]:
    """Each completed request's gaps between its chunks, as the replay wrote them."""
    rows = [json.loads(line) for line in (out / REQUESTS_PART).read_text().splitlines()]
    return {int(r["request_id"]): [float(g) for g in r[TOKEN_GAPS_KEY]] for r in rows
            if r["status"] == "completed"}


def _alone_gaps(workload: Workload, rows: list[int]) -> npt.NDArray[np.float64]:
    """The simulation's gaps of each of ``rows`` simulated alone (the requests never overlap
    in the simulation: each one's steps are those it takes alone), pooled."""
    out = []
    for i in rows:
        one = from_columns(workload.arrival_s[i:i + 1], workload.prompt_tokens[i:i + 1],
                           workload.output_tokens[i:i + 1], tiers=["batch"])
        gaps = simulate(one, make_policy("unlimited"), CONFIG).token_gap_columns
        assert gaps is not None
        out.append(np.repeat(np.asarray(gaps["gap_s"]), np.asarray(gaps["num_gaps"])))
    return np.concatenate(out)


def _before(sim: RunResult, live: ReplayOutcome, burst: npt.NDArray[np.bool_]
            ) -> pd.DataFrame:
    """The table as ``validate --url`` made it before: the ITL rows of every request."""
    result, _ = validate_runs(sim.records, sim.timeline, sim.summary["engine"], live.records,
                              live.summary, tiers=TIERS, capacity_tokens=CAPACITY,
                              policy="unlimited", frontend_overhead_s=0.0,
                              sim_token_gaps=sim.token_gap_columns, whole_answer=burst,
                              whole_answer_by_gaps=True)
    return result.metrics.set_index("metric")


def test_the_itl_rows_leave_out_the_answers_read_whole_on_both_sides(url: str,
                                                                     tmp_path: Path) -> None:
    config = ReplayConfig(ServerTarget(url), tiers=TIERS, capacity_tokens=CAPACITY,
                          poll_period_s=0.05)
    live = replay(WORKLOAD, make_policy("unlimited"), config, tmp_path / "live",
                  meta=ReplayMeta("t", "unlimited", {}, 1.0, 0, url))
    assert live.complete and (live.records["status"] == "completed").all()
    burst = whole_answer_rows_of_run(live.records, live.itl_mean_s)
    assert burst.tolist() == [False, True, False, True], live.itl_mean_s
    outcome = compare_live_run(WORKLOAD, lambda: make_policy("unlimited"), CONFIG, live,
                               tmp_path / "v", capacity_tokens=CAPACITY)
    table = outcome.validation.metrics.set_index("metric")
    gaps = _part_gaps(tmp_path / "live")
    kept = np.array(gaps[0] + gaps[2])  # one gap each: the wait for the next request
    simulated = _alone_gaps(WORKLOAD, [0, 2])
    for q in (50, 90, 99):
        row = table.loc[f"itl_p{q}_s"]
        assert row["measured"] == pytest.approx(np.percentile(kept, q), rel=1e-12)
        assert row["simulated"] == pytest.approx(np.percentile(simulated, q), rel=1e-9)
    # before: every request's gaps on both sides, the whole answers' microseconds too
    before = _before(simulate(WORKLOAD, make_policy("unlimited"), CONFIG), live, burst)
    every = np.array([g for i in range(4) for g in gaps[i]])
    was = {side: float(before.at["itl_p50_s", side]) for side in ("measured", "simulated")}
    now = {side: float(table.at["itl_p50_s", side]) for side in ("measured", "simulated")}
    assert was["measured"] == pytest.approx(np.percentile(every, 50))
    assert was["measured"] < 1e-3 < now["measured"]
    assert was["simulated"] == pytest.approx(
        np.percentile(_alone_gaps(WORKLOAD, [0, 1, 2, 3]), 50), rel=1e-9)
    assert was["simulated"] > 1.05 * now["simulated"]
    # the other rows as before; the simulation's own files every request's gaps
    for metric in ("ttft_p50_s", "tpot_p50_s", "e2e_p50_s", "output_tokens_per_s"):
        assert table.loc[metric].tolist() == before.loc[metric].tolist()
    written = pd.read_parquet(tmp_path / "v" / "sim" / "token_gaps.parquet")
    assert int(written["num_gaps"].sum()) == 7 + 39 + 8 + 40
    said = outcome.validation.said
    assert len(said) == 2 and said[1].startswith("few requests: ")  # 4 requests
    assert said[0].startswith(
        "TTFT, TPOT and ITL: 2 of the 4 compared requests got their whole answer in one read "
        "(tokens after the first under 100 us apart: found by the time between their first "
        "and last chunks, over the tokens after the first:")
    assert "so their measured TTFT, TPOT and ITL are the client's read" in said[0]
    assert said[0].endswith(
        "the TTFT, TPOT and ITL rows and per-request MAPEs take the other 2 only, on both "
        "sides (ITL: the gaps between the tokens of those 2, pooled; E2E and output tokens "
        "per second: all 4)")
    assert json.loads((tmp_path / "v" / "validation.json").read_text())["said"] == list(said)


def test_a_run_with_no_answer_read_whole_gives_the_table_it_gave(tmp_path: Path) -> None:
    """The simulation as a live replay's outcome, each request's gaps kept: the same table as
    the comparison without any request left out, and the simulation run as before."""
    sim = simulate(WORKLOAD, make_policy("unlimited"), CONFIG)
    records = sim.records
    summary = summary_of(records, sim.timeline, TIERS, CAPACITY, "unlimited",
                         sim.token_gap_columns)
    summary["engine"] = sim.summary["engine"]
    tpot = records["tpot_s"].to_numpy(dtype=np.float64)
    gaps = [np.full(int(n) - 1, t) for n, t in zip(records["output_tokens"], tpot, strict=True)]
    live = ReplayOutcome(records, sim.timeline, summary, complete=True, itl_mean_s=tpot,
                         token_gaps_s=list(gaps))
    assert not whole_answer_rows_of_run(live.records, live.itl_mean_s).any()
    outcome = compare_live_run(WORKLOAD, lambda: make_policy("unlimited"), CONFIG, live,
                               tmp_path, capacity_tokens=CAPACITY)
    result, _ = validate_runs(sim.records, sim.timeline, sim.summary["engine"], records,
                              summary, tiers=TIERS, capacity_tokens=CAPACITY,
                              policy="unlimited", frontend_overhead_s=0.0,
                              sim_token_gaps=sim.token_gap_columns)
    pd.testing.assert_frame_equal(outcome.validation.metrics, result.metrics)
    assert "itl_p50_s" in set(result.metrics["metric"])
    assert [s.split(":")[0] for s in outcome.validation.said] == ["few requests"]
