"""The library half of ``validate --url``: the cost-model file, the speed checks' figures."""

import json
from pathlib import Path

import pandas as pd
import pytest

from kvbudget.live.calibrate import SpeedCheck
from kvbudget.live.replay import ReplayOutcome
from kvbudget.live.server import ServerInfo
from kvbudget.live.validate import LiveValidationRun, load_live_cost_model

LINEAR = {"kind": "linear", "coefficients": {
    "intercept_s": 0.004, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4,
    "per_context_token_s": 0.0}}


def test_batch_limits_come_from_the_plan_unless_given(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps({**LINEAR, "calibration": {"plan": {
        "max_num_seqs": 8, "max_num_batched_tokens": 512}}}))
    cal = load_live_cost_model(path)
    assert (cal.max_num_seqs, cal.max_num_batched_tokens) == (8, 512)
    assert cal.model.intercept_s == 0.004
    cal = load_live_cost_model(path, max_num_seqs=3)
    assert (cal.max_num_seqs, cal.max_num_batched_tokens) == (3, 512)
    path.write_text(json.dumps(LINEAR))
    cal = load_live_cost_model(path)
    assert (cal.max_num_seqs, cal.max_num_batched_tokens) == (256, 2048)


def test_a_non_linear_model_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cost.json"
    from kvbudget.perf.cost_model import save_cost_model
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.models import get_model
    from kvbudget.perf.step_time import VllmStepModel

    save_cost_model(VllmStepModel(get_gpu("H100-SXM"), get_model("Llama-3.1-8B")), path)
    with pytest.raises(ValueError, match=r"cost\.json: a live validate needs a linear"):
        load_live_cost_model(path)


def _run(*checks: SpeedCheck | None) -> LiveValidationRun:
    live = ReplayOutcome(pd.DataFrame(), pd.DataFrame(), {}, complete=True)
    info = ServerInfo("m", 4096, 1600, 101, 100, 16, has_metrics=True)
    before, after = checks
    return LiveValidationRun(live=live, info=info, checks=(before, after), speed_checked=True)


def test_drift_factor_is_the_mean_of_the_timed_checks() -> None:
    slow = SpeedCheck(num_seqs=4, seq_len=64, measured_s=0.012, predicted_s=0.010)
    fast = SpeedCheck(num_seqs=4, seq_len=64, measured_s=0.009, predicted_s=0.010)
    assert _run(slow, fast).drift_factor() == pytest.approx((1.2 + 0.9) / 2)
    assert _run(None, slow).drift_factor() == pytest.approx(1.2)
    assert _run(None, None).drift_factor() is None
    meta = _run(slow, None).speed_check_meta()
    assert meta["after"] is None and meta["before"] is not None
    assert meta["before"]["drift"] == pytest.approx(0.2)
    assert (_run(None, None).block_size, _run(None, None).num_gpu_blocks) == (16, 100)
