"""The default step model's structural error (kvbudget.perf.step_uncertainty): each GPU's
validation status, the leave-one-GPU-out spread, and the scaled model a draw makes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbudget.perf import step_uncertainty as su
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.step_time import (
    KV_READ_FACTOR,
    LAYER_OVERHEAD_S,
    MOE_LAYER_OVERHEAD_S,
    VllmStepModel,
)
from kvbudget.studies import intervals as iv


def test_validation_status_by_gpu() -> None:
    assert su.validation_status("H100-SXM") == "derived"
    assert su.validation_status(get_gpu("H100-80GB").name) == "derived"  # the alias
    assert su.validation_status("B200") == "checked"
    for gpu in ("RTX-PRO-6000", "RTX-4090", "A100-80GB", "H200", "MI300X", "my-gpu.toml"):
        assert su.validation_status(gpu) == "datasheet", gpu
    assert su.structural_sigma("H100-SXM") == 0.0
    assert su.structural_sigma("B200") == su.structural_sigma("L4") == su.STRUCTURAL_SIGMA


def test_deriving_on_h100_gives_back_the_defaults() -> None:
    """The leave-one-GPU-out fold that holds H100 in is the shipped model: the same rule on
    the same figures gives the default constants."""
    derived = su.derive_on("H100-SXM")
    assert derived["layer_overhead_s"] == pytest.approx(LAYER_OVERHEAD_S, rel=1e-3)
    assert derived["moe_layer_overhead_s"] == pytest.approx(MOE_LAYER_OVERHEAD_S, rel=1e-3)
    assert derived["kv_read_factor"] == pytest.approx(KV_READ_FACTOR, rel=1e-3)


def test_the_stated_spread_is_the_leave_one_gpu_out_estimate() -> None:
    errors = su.leave_one_gpu_out()
    assert len(errors) == len(su.PUBLISHED_STEPS)  # every figure once, out of sample
    # the held-out B200 figures under the shipped defaults: docs/fidelity.md's B200 checks
    b200 = {(m, f): e for g, m, f, e in errors if g == "B200"}
    assert math.exp(b200["Llama-3.1-8B", "intercept"]) == pytest.approx(3.635 / 3.93, rel=2e-3)
    assert su.loo_sigma() == pytest.approx(su.STRUCTURAL_SIGMA, abs=5e-5)


def test_a_scaled_model_makes_every_step_factor_times_as_long() -> None:
    inner = LinearCostModel(0.01, 1e-5, 1e-4, 1e-7)
    scaled = su.StructurallyScaled(inner, 1.25)
    assert scaled.step_time(100.0, 4.0, 1000.0, 0.0, 1.0) == pytest.approx(
        1.25 * (0.01 + 1e-3 + 4e-4 + 1e-4))
    np.testing.assert_allclose(scaled.decode_step_times(3, 10, 5),
                               1.25 * inner.decode_step_times(3, 10, 5), rtol=1e-15)
    assert scaled.describe()["structural_factor"] == 1.25
    with pytest.raises(ValueError, match="structural factor must be > 0"):
        su.StructurallyScaled(inner, 0.0)


def test_a_draw_scales_a_datasheet_gpu_and_leaves_h100_alone() -> None:
    llama = get_model("Llama-3.1-8B")
    h100 = VllmStepModel(get_gpu("H100-SXM"), llama)
    pro = VllmStepModel(get_gpu("RTX-PRO-6000"), llama)
    draw = iv.StepDraw(z=1.0)
    assert draw.cost_model(h100)[0] is h100
    drawn = draw.cost_model(pro)[0]
    t = pro.step_time(0.0, 8.0, 8000.0, 0.0, 0.0)
    assert drawn.step_time(0.0, 8.0, 8000.0, 0.0, 0.0) == pytest.approx(
        t * math.exp(su.STRUCTURAL_SIGMA), rel=1e-12)
    # a calibration's draw carries its own posterior, no structural error
    fitted = iv.StepDraw(values=(("step_overhead_s", 2e-4),), z=1.0).cost_model(pro)[0]
    assert isinstance(fitted, VllmStepModel) and fitted.step_overhead_s == 2e-4


def test_the_structural_draws_leave_the_constants_draws_as_they_were() -> None:
    draws = iv.stated_draws(VllmStepModel(get_gpu("RTX-PRO-6000"), get_model("Llama-3.1-8B")))
    assert draws.structural and "'datasheet'" in draws.method
    with_z = iv.step_draws(draws, 2000, seed=5)
    without = iv.step_draws(iv.ParameterDraws(draws.method, draws.ranges, draws.draw), 2000, 5)
    assert [d.factors for d in with_z] == [d.factors for d in without]
    assert all(d.z == 0.0 for d in without)
    z = np.array([d.z for d in with_z])
    assert abs(float(z.mean())) < 0.08 and float(z.std()) == pytest.approx(1.0, rel=0.06)
