"""Each metric is compared over the same requests on both sides (``analysis/validation.py``
``same_requests``): where the measured side has no figure for a request (a whole answer read at
once, ``Recording.records``), its simulated figure is left out too, in the comparison table,
the calibration's loss and the fit's statistics."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from kvbudget.analysis.validation import compare_recorded, same_requests
from kvbudget.results.recorded_whole_answer import whole_answer_rows_of
from kvbudget.results.recordings import read_recording
from kvbudget.studies.first_token import paired_stats
from kvbudget.studies.fit_uncertainty import compared_stats

RATE8 = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
         / "rate8.json")


def _records(ttft: list[float], tpot: list[float], e2e: list[float]) -> pd.DataFrame:
    n = len(ttft)
    arrival = np.arange(n, dtype=float)
    return pd.DataFrame({"request_id": np.arange(n), "status": ["completed"] * n,
                         "arrival_s": arrival, "output_tokens": [4] * n,
                         "finished_s": arrival + np.array(e2e),
                         "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e})


def test_a_metric_the_measured_side_lacks_for_a_request_is_left_out_of_the_simulated_side(
        ) -> None:
    measured = _records([0.1, math.nan, 0.3], [0.01, math.nan, 0.03], [1.0, 2.0, 3.0])
    # the simulation in another order: joined on request_id
    simulated = _records([0.2, 9.0, 0.4], [0.02, 9.0, 0.04], [1.5, 2.5, 3.5]).iloc[::-1]
    sim = same_requests(simulated, measured)
    assert sim["request_id"].tolist() == [0, 1, 2]
    assert np.isnan(sim["ttft_s"][1]) and np.isnan(sim["tpot_s"][1])
    assert sim["e2e_s"].tolist() == [1.5, 2.5, 3.5]
    table = compare_recorded(simulated, measured)
    row = table[table["metric"] == "ttft_mean_s"].iloc[0]
    assert math.isclose(row["simulated"], 0.3) and math.isclose(row["measured"], 0.2)
    assert math.isclose(table[table["metric"] == "e2e_mean_s"].iloc[0]["simulated"], 2.5)
    stats = paired_stats(simulated, measured)
    assert math.isclose(stats.simulated["tpot_mean_s"], 0.03)
    log_ttft = compared_stats(simulated, measured, None, ("ttft_mean_s",), stages=None)
    assert math.isclose(float(log_ttft[0]), math.log(0.3))


def test_a_metric_measured_on_no_request_keeps_the_simulated_figures() -> None:
    measured = _records([math.nan] * 2, [math.nan] * 2, [1.0, 2.0])
    simulated = _records([0.2, 0.4], [0.02, 0.04], [1.5, 2.5])
    table = compare_recorded(simulated, measured)
    row = table[table["metric"] == "ttft_mean_s"].iloc[0]
    assert math.isclose(row["simulated"], 0.3) and math.isnan(row["measured"])


def test_the_measured_records_have_no_ttft_nor_tpot_for_a_whole_answer_read_at_once() -> None:
    recording = read_recording(RATE8)
    burst = whole_answer_rows_of(recording.measured)
    records = recording.records()
    assert int(burst.sum()) == 15
    assert records["ttft_s"][burst].isna().all() and records["tpot_s"][burst].isna().all()
    assert records["ttft_s"][~burst].notna().all() and records["tpot_s"][~burst].notna().all()
    # the E2E is the server's too (the last token's read), kept; the raw table keeps every time
    assert records["e2e_s"].notna().all()
    assert recording.measured["ttft_s"].notna().all()
