"""A replay's outcome carries, per request, the mean time apart of its tokens after the first
as its client read them (``live/run_dir.py`` ``itl_means_of_parts``): what ``validate --url``
finds the answers read whole at once by (tests/unit/studies/test_whole_answer_live.py)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.live.replay import finalize
from kvbudget.live.run_dir import TOKEN_GAPS_KEY, RunDir, read_parts
from kvbudget.policies import DEFAULT_TIERS, make_policy
from kvbudget.results.run_parts import itl_means_of_parts


def _row(request_id: int, *, output: int, gaps: list[float] | None,
         status: str = "completed") -> dict[str, Any]:
    ok = status == "completed"
    arrival, first, end = float(request_id), float(request_id) + 0.1, float(request_id) + 0.5
    row: dict[str, Any] = {
        "request_id": request_id, "tier": "interactive", "arrival_s": arrival,
        "prompt_tokens": 8, "max_output_tokens": output, "output_tokens": output if ok else 0,
        "status": status, "reason": "" if ok else "deadline", "admitted_s": arrival,
        "first_token_s": first if ok else math.nan, "finished_s": end if ok else math.nan,
        "ttft_s": first - arrival if ok else math.nan,
        "tpot_s": (end - first) / (output - 1) if ok and output > 1 else math.nan,
        "e2e_s": end - arrival if ok else math.nan, "num_preemptions": 0,
        "reserved_tokens": 0, "error": ""}
    if gaps is not None:
        row[TOKEN_GAPS_KEY] = gaps
    return row


def test_the_outcome_has_each_requests_time_between_its_first_and_last_chunks_per_token(
        tmp_path: Path) -> None:
    run = RunDir(tmp_path, {"policy": "conservative"}, resume=False)
    rows = [
        _row(0, output=5, gaps=[0.01, 0.02, 0.03, 0.04]),  # a chunk a token
        _row(1, output=5, gaps=[1e-5, 2e-5]),  # 4 tokens after the first in 3 chunks
        _row(2, output=5, gaps=[]),  # the whole answer in one chunk: no gap measured
        _row(3, output=1, gaps=[]),  # one token: none after the first
        _row(4, output=4, gaps=None),  # a row written before the gaps were kept
        _row(5, output=4, gaps=None, status="expired"),
        _row(6, output=3, gaps=[5.0, 5.0]),
    ]
    for row in rows:
        run.write_record(row)
    run.write_record(_row(6, output=3, gaps=[0.5, 0.5]))  # resumed: the last row wins
    run.close()
    records, _ = read_parts(tmp_path)
    means = itl_means_of_parts(tmp_path, records)
    assert records["request_id"].tolist() == list(range(7))
    assert means[0] == pytest.approx(0.1 / 4) and means[1] == pytest.approx(3e-5 / 4)
    assert np.isnan(means[2:6]).all()
    assert means[6] == pytest.approx(0.5)
    # at most the TPOT, which counts the time after the last chunk too
    assert means[0] <= records["tpot_s"][0]
    outcome = finalize(tmp_path, make_policy("conservative"), DEFAULT_TIERS,
                       capacity_tokens=1000, seed=0, wall_time_s=1.0, num_requests=7)
    assert outcome.itl_mean_s is not None
    np.testing.assert_array_equal(outcome.itl_mean_s, means)
