"""``simulate(..., token_gaps_of=rows)``: the result also has the inter-token gaps of the
completed requests ``rows`` flags (``RunResult.chosen_token_gap_columns``: what ``validate
--url`` compares ITL over, the requests its client did not read whole at once), and every
other figure, its token-gaps table too, is the same as without it.

Each completed request of n output tokens has n - 1 gaps (each token's time minus the
previous one's; with speculative decoding, one a step that gave it tokens): the chosen table
holds exactly those of the flagged requests, on one engine (stepping and with the speed-up,
with preemptions' pauses), a fleet, a disaggregated deployment and speculative decoding, and
the two tables of a split add up to the whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from kvbudget.perf.speculative import SpeculativeConfig
from kvbudget.policies import DEFAULT_TIERS, make_policy
from kvbudget.results.metrics import aggregate_token_gaps
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.disagg_config import DisaggConfig, PoolConfig
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import FleetConfig, SimConfig, simulate
from kvbudget.workloads import Workload, from_columns

N = 160


def _workload() -> Workload:
    rng = np.random.default_rng(7)
    return from_columns(np.sort(rng.uniform(0.0, 4.0, N)), rng.integers(16, 600, N),
                        rng.integers(1, 120, N),
                        tiers=rng.choice(["interactive", "batch"], N).tolist())


ENGINE: dict[str, Any] = {"block_size": 16, "max_num_seqs": 32,
                          "max_num_batched_tokens": 1024}
CASES: dict[str, dict[str, Any]] = {
    "vllm stepping, few blocks": {"engine": {"num_gpu_blocks": 120, "skip_ahead": False}},
    "vllm skip-ahead, few blocks": {"engine": {"num_gpu_blocks": 120}},
    "vllm-swap": {"engine": {"num_gpu_blocks": 120, "name": "vllm-swap"}},
    "fleet of 3, least_tokens": {"engine": {"num_gpu_blocks": 200},
                                 "fleet": FleetConfig(num_replicas=3, router="least_tokens")},
    "disaggregated 1P+2D": {"engine": {"num_gpu_blocks": 400},
                            "disaggregation": DisaggConfig(PoolConfig(1), PoolConfig(2))},
    "eagle k3": {"engine": {"num_gpu_blocks": 400, "speculative_config": SpeculativeConfig(
        "eagle", 3, acceptance_rate=0.7)}},
}


def _config(case: dict[str, Any]) -> SimConfig:
    return SimConfig(gpu="A100-80GB", model="Llama-2-7B",
                     engine=EngineConfig(**ENGINE, **case["engine"]), tiers=DEFAULT_TIERS,
                     fleet=case.get("fleet"), disaggregation=case.get("disaggregation"))


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> None:
    assert a is not None and b is not None and a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), strict=True)


def _num_gaps(result: RunResult, rows: npt.NDArray[np.bool_]) -> int:
    """The gaps the completed ``rows`` have: n - 1 each of n output tokens."""
    rec = result.records
    done = (rec["status"] == "completed").to_numpy() & rows
    return int(np.maximum(rec["output_tokens"].to_numpy()[done] - 1, 0).sum())


@pytest.mark.parametrize("label", list(CASES))
def test_the_chosen_requests_gaps_and_every_figure_as_without(label: str) -> None:
    workload, config = _workload(), _config(CASES[label])
    base = simulate(workload, make_policy("unlimited"), config)
    assert base.chosen_token_gap_columns is None
    chosen = np.random.default_rng(3).random(N) < 0.4
    run = simulate(workload, make_policy("unlimited"), config, token_gaps_of=chosen)
    other = simulate(workload, make_policy("unlimited"), config, token_gaps_of=~chosen)
    for result in (run, other):
        _same(result.record_columns, base.record_columns)
        _same(result.timeline_columns, base.timeline_columns)
        _same(result.token_gap_columns, base.token_gap_columns)
        assert ({k: v for k, v in result.summary.items() if k != "wall_time_s"}
                == {k: v for k, v in base.summary.items() if k != "wall_time_s"})
    mine, theirs = run.chosen_token_gap_columns, other.chosen_token_gap_columns
    assert mine is not None and theirs is not None and base.token_gap_columns is not None
    counts = [int(np.sum(t["num_gaps"])) for t in (mine, theirs, base.token_gap_columns)]
    if "speculative_config" in CASES[label]["engine"]:  # a gap per step that gave tokens
        assert 0 < counts[0] < counts[2] and counts[0] + counts[1] == counts[2]
    else:
        assert counts == [_num_gaps(base, chosen), _num_gaps(base, ~chosen),
                          _num_gaps(base, np.ones(N, bool))] and min(counts) > 0
    # the two halves pooled are the whole table
    names = sorted({*mine["tier"], *theirs["tier"]})
    tier = np.concatenate([mine["tier"], theirs["tier"]])
    _same(aggregate_token_gaps(np.array([names.index(t) for t in tier], np.int64), names,
                               np.concatenate([mine["gap_s"], theirs["gap_s"]]),
                               np.concatenate([mine["num_gaps"], theirs["num_gaps"]])),
          base.token_gap_columns)


def test_every_request_chosen_is_the_whole_table_and_none_an_empty_one() -> None:
    workload, config = _workload(), _config(CASES["vllm skip-ahead, few blocks"])
    base = simulate(workload, make_policy("unlimited"), config)
    every = simulate(workload, make_policy("unlimited"), config,
                     token_gaps_of=np.ones(N, bool))
    _same(every.chosen_token_gap_columns, base.token_gap_columns)
    none = simulate(workload, make_policy("unlimited"), config,
                    token_gaps_of=np.zeros(N, bool))
    assert none.chosen_token_gap_columns is not None
    assert len(none.chosen_token_gap_columns["gap_s"]) == 0


@pytest.mark.parametrize("flags", [np.ones(N - 1, bool), np.ones(N, np.int64)])
def test_flags_that_are_not_one_per_row_are_refused(flags: npt.NDArray[Any]) -> None:
    with pytest.raises(ValueError, match=f"token_gaps_of must be a flag per workload row "
                                         f"\\({N}\\)"):
        simulate(_workload(), make_policy("unlimited"), token_gaps_of=flags)
