"""Simulated against measured: the metric table, per-request errors and the plot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.analysis.validation import (
    add_frontend_overhead,
    compare_metrics,
    per_request_errors,
    plot_validation,
    rel_error,
    summary_of,
    validate_runs,
)
from kvbudget.live.run_dir import records_frame, timeline_frame
from kvbudget.policies import DEFAULT_TIERS


def _records(ttft: list[float], tpot: list[float], out: int = 11,
             status: list[str] | None = None) -> pd.DataFrame:
    n = len(ttft)
    rows = []
    for i in range(n):
        arrival = float(i)
        e2e = ttft[i] + tpot[i] * (out - 1)
        ok = status is None or status[i] == "completed"
        rows.append({
            "request_id": i, "tier": "interactive", "arrival_s": arrival, "prompt_tokens": 10,
            "max_output_tokens": out, "output_tokens": out if ok else 0,
            "status": "completed" if ok else (status or [""])[i],
            "reason": "" if ok else "deadline", "admitted_s": arrival,
            "first_token_s": arrival + ttft[i] if ok else math.nan,
            "finished_s": arrival + e2e if ok else math.nan,
            "ttft_s": ttft[i] if ok else math.nan, "tpot_s": tpot[i] if ok else math.nan,
            "e2e_s": e2e if ok else math.nan, "num_preemptions": 0, "reserved_tokens": 21,
        })
    return records_frame(rows)


def _timeline() -> pd.DataFrame:
    return timeline_frame([{"time_s": float(t), "kv_used_tokens": 10 * t,
                            "kv_reserved_tokens": 20, "kv_capacity_tokens": 100,
                            "num_running": 1, "num_waiting": 0, "num_preemptions": 0}
                           for t in range(5)])


def test_rel_error() -> None:
    assert rel_error(1.1, 1.0) == pytest.approx(0.1)
    assert rel_error(0.0, 0.0) == 0.0
    assert math.isnan(rel_error(1.0, 0.0)) and math.isnan(rel_error(math.nan, 1.0))


def test_overhead_shifts_first_token_and_finish_not_tpot() -> None:
    rec = _records([0.1, 0.2], [0.01, 0.02])
    adj = add_frontend_overhead(rec, 0.05)
    np.testing.assert_allclose(adj["ttft_s"], rec["ttft_s"] + 0.05)
    np.testing.assert_allclose(adj["e2e_s"], rec["e2e_s"] + 0.05)
    np.testing.assert_allclose(adj["tpot_s"], rec["tpot_s"])
    with pytest.raises(ValueError, match="overhead"):
        add_frontend_overhead(rec, -1.0)


def test_identical_runs_have_zero_error() -> None:
    rec = _records([0.1, 0.2, 0.3, 0.4], [0.01, 0.02, 0.03, 0.04])
    s = summary_of(rec, _timeline(), DEFAULT_TIERS, 100, "conservative")
    table = compare_metrics(s, s)
    assert set(table["metric"]) >= {"ttft_p50_s", "tpot_p50_s", "output_tokens_per_s",
                                    "e2e_p99_s", "preemptions", "rejections", "completed"}
    assert (table["rel_error"].fillna(0) == 0).all()
    per_req = per_request_errors(rec, rec)
    assert (per_req["mape"] == 0).all() and (per_req["num_pairs"] == 4).all()


def test_known_errors() -> None:
    meas = _records([0.1, 0.1, 0.1], [0.010, 0.010, 0.010])
    sim = _records([0.09, 0.09, 0.09], [0.012, 0.012, 0.012])
    live_summary = summary_of(meas, _timeline(), DEFAULT_TIERS, 100, "x")
    live_summary["engine"] = {"num_engine_preemptions": 4, "num_gateway_revocations": 0}
    val, adjusted = validate_runs(
        sim, _timeline(), {"num_engine_preemptions": 2, "num_gateway_revocations": 1},
        meas, live_summary, tiers=DEFAULT_TIERS, capacity_tokens=100, policy="x",
        frontend_overhead_s=0.01)
    m = val.metrics.set_index("metric")
    assert m.loc["ttft_p50_s", "simulated"] == pytest.approx(0.1)
    assert m.loc["ttft_p50_s", "rel_error"] == pytest.approx(0.0, abs=1e-9)
    assert m.loc["tpot_p50_s", "rel_error"] == pytest.approx(0.2)
    assert m.loc["preemptions", "simulated"] == 3 and m.loc["preemptions", "measured"] == 4
    assert m.loc["preemptions", "rel_error"] == pytest.approx(-0.25)
    assert val.worst_key_error()[0] == "tpot_p50_s"
    per = val.per_request.set_index("metric")
    assert per.loc["tpot_s", "mape"] == pytest.approx(0.2)
    assert per.loc["ttft_s", "mape"] == pytest.approx(0.0, abs=1e-9)
    assert adjusted["ttft_s"].iloc[0] == pytest.approx(0.1)
    d = val.to_dict()
    assert d["frontend_overhead_s"] == 0.01 and len(d["metrics"]) == len(val.metrics)


def test_a_slower_simulation_shows_in_the_throughput_it_is_checked_on() -> None:
    """The throughput validate compares (and --max-error checks) is the output tokens over
    first arrival to last finish: a simulated engine ten times slower at decoding finishes
    later and shows it. Over the arrival window, when every request completes on both sides,
    the two figures are equal whatever the engine's speed (the check could not fail)."""
    meas = _records([0.1, 0.1, 0.1], [0.010] * 3)  # last finish 2 + 0.1 + 10 x 0.01 = 2.2 s
    sim = _records([0.09, 0.09, 0.09], [0.1] * 3)  # 2 + 0.09 + 10 x 0.1 (+ 0.01) = 3.1 s
    live_summary = summary_of(meas, _timeline(), DEFAULT_TIERS, 100, "x")
    live_summary["engine"] = {"num_engine_preemptions": 0, "num_gateway_revocations": 0}
    val, _ = validate_runs(
        sim, _timeline(), {"num_engine_preemptions": 0, "num_gateway_revocations": 0},
        meas, live_summary, tiers=DEFAULT_TIERS, capacity_tokens=100, policy="x",
        frontend_overhead_s=0.01)
    m = val.metrics.set_index("metric")
    assert m.loc["output_tokens_per_s", "measured"] == pytest.approx(33 / 2.2)
    assert m.loc["output_tokens_per_s", "simulated"] == pytest.approx(33 / 3.1)
    assert m.loc["output_tokens_per_s", "rel_error"] == pytest.approx(2.2 / 3.1 - 1)
    # a measured run directory written before summaries had the sustained rate: the same
    # figure from its records, not the arrival window's
    del live_summary["overall"]["sustained_output_tokens_per_s"]
    val, _ = validate_runs(
        sim, _timeline(), {"num_engine_preemptions": 0, "num_gateway_revocations": 0},
        meas, live_summary, tiers=DEFAULT_TIERS, capacity_tokens=100, policy="x",
        frontend_overhead_s=0.01)
    m = val.metrics.set_index("metric")
    assert m.loc["output_tokens_per_s", "measured"] == pytest.approx(33 / 2.2)


def test_pairs_only_where_both_completed(tmp_path: Path) -> None:
    meas = _records([0.1, 0.1, 0.1], [0.01] * 3, status=["completed", "expired", "completed"])
    sim = _records([0.2, 0.2, 0.2], [0.01] * 3)
    per = per_request_errors(sim, meas).set_index("metric")
    assert per.loc["ttft_s", "num_pairs"] == 2
    assert per.loc["ttft_s", "mape"] == pytest.approx(1.0)
    png = tmp_path / "v.png"
    plot_validation(sim, meas, _timeline(), _timeline(), png, "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_plot_of_one_token_outputs_has_no_empty_legend(tmp_path: Path) -> None:
    # muma378/vllm-benchmark benchmark_result_0910/*.json: 51 vllm bench serve runs of 1 output
    # token each (no request has a TPOT); validate printed matplotlib's "UserWarning: No artists
    # with labels found to put in legend" with its source line (an error under the tests)
    meas = _records([0.1, 0.2], [math.nan, math.nan], out=1)
    sim = _records([0.1, 0.3], [math.nan, math.nan], out=1)
    png = tmp_path / "v.png"
    plot_validation(sim, meas, _timeline(), _timeline(), png, "one token")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
