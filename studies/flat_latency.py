"""A recording whose latencies do not move as any GPU's do: a server simulator's or a mock's.

llm-d's inference-sim (github.com/llm-d/llm-d-inference-sim, its ``--time-to-first-token`` and
``--inter-token-latency`` options) answers every request after a fixed time to first token and
a fixed time between tokens, whatever the prompt's length and however many requests run at
once; a fixed-latency mock does the same. ``calibrate --records`` of such a recording fits
those times as a GPU's costs and says nothing of it. A GPU's prefill grows with the prompt's
tokens and its decode step with the batch, as the fitted step model itself says: where the
recording's times are flat against both, with the fit's own uncertainty (an ordinary least
squares slope's 95 % interval) holding zero and ruling out the fitted GPU's own growth across
the range the recording spans, one warning line names what is flat. The fit is kept.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import stats

from kvbudget.perf.cost_model import CostModel
from kvbudget.results.recorded_fields import in_flight_after

FloatArray = npt.NDArray[np.float64]


def _slope_interval(x: FloatArray, y: FloatArray) -> tuple[float, float] | None:
    """The 95 % interval of the least-squares slope of ``y`` on ``x`` (Student's t on n - 2
    degrees of freedom), or None where ``x`` does not vary or there are under 3 points."""
    n = len(x)
    sxx = float(np.sum((x - x.mean()) ** 2))
    if n < 3 or sxx <= 0:
        return None
    slope = float(np.sum((x - x.mean()) * (y - y.mean()))) / sxx
    resid = y - y.mean() - slope * (x - x.mean())
    se = float(np.sqrt(np.sum(resid**2) / (n - 2) / sxx))
    half = float(stats.t.ppf(0.975, n - 2)) * se
    return slope - half, slope + half


def _flat(x: FloatArray, y: FloatArray, gpu_slope: float) -> tuple[float, float] | None:
    """The slope's interval where it holds zero (no growth, nor a fall that another cause
    drives, such as a load rising while shorter prompts came) and lies below ``gpu_slope``
    (the fitted model's growth of the same time per unit of ``x``), else None."""
    ci = _slope_interval(x, y)
    if ci is None or not (ci[0] <= 0.0 <= ci[1] < gpu_slope):
        return None
    return ci


def _prefill_flat(model: CostModel, prompt: FloatArray, ttft: FloatArray) -> str | None:
    """The clause of a TTFT flat against the prompt's tokens, or None."""
    lo, hi = (float(prompt.min()), float(prompt.max())) if len(prompt) else (0.0, 0.0)
    if hi <= lo:
        return None
    per_token = (
        model.step_time(hi, 0.0, hi, hi * hi, 1.0) - model.step_time(lo, 0.0, lo, lo * lo, 1.0)
    ) / (hi - lo)
    ci = _flat(prompt, ttft, per_token)
    return (
        None
        if ci is None
        else (
            f"the TTFT does not grow with the prompt ({lo:.0f} to {hi:.0f} tokens: "
            f"{ci[0] * 1e6:+.3g} to {ci[1] * 1e6:+.3g} us a token, 95 %, where the fitted GPU's "
            f"prefill takes {per_token * 1e6:.3g} us more a token)"
        )
    )


def _decode_flat(
    model: CostModel, batch: FloatArray, tpot: FloatArray, context: float
) -> str | None:
    """The clause of a TPOT flat against the requests decoding beside it, or None."""
    lo, hi = (float(batch.min()), float(batch.max())) if len(batch) else (0.0, 0.0)
    if hi <= lo:
        return None
    per_seq = (
        model.step_time(0.0, hi, hi * context, 0.0, 0.0)
        - model.step_time(0.0, lo, lo * context, 0.0, 0.0)
    ) / (hi - lo)
    ci = _flat(batch, tpot, per_seq)
    return (
        None
        if ci is None
        else (
            f"the TPOT does not grow with the batch ({lo:.0f} to {hi:.0f} requests in flight: "
            f"{ci[0] * 1e6:+.3g} to {ci[1] * 1e6:+.3g} us a request, 95 %, where the fitted GPU's "
            f"decode step takes {per_seq * 1e6:.3g} us more a request)"
        )
    )


def flat_latency_said(
    model: CostModel, measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None
) -> str | None:
    """One warning line where the measured TTFT does not grow with the prompt's tokens, or
    the TPOT with the requests decoding beside it (each request's batch: those in flight at
    the middle of its decode), as the fitted ``model``'s prefill and decode step do across the
    same ranges; None otherwise (both grow, or the recording cannot tell)."""
    ok = (measured["status"] == "completed").to_numpy() & (True if rows is None else rows)
    if "usable" in measured:
        ok &= measured["usable"].to_numpy(dtype=bool)
    col = {
        k: measured[k].to_numpy(dtype=float)
        for k in ("ttft_s", "tpot_s", "e2e_s", "arrival_s", "prompt_tokens", "output_tokens")
    }
    first = ok & np.isfinite(col["ttft_s"])
    prefill = _prefill_flat(model, col["prompt_tokens"][first], col["ttft_s"][first])
    sent, end = col["arrival_s"], col["arrival_s"] + col["e2e_s"]
    decoding = first & np.isfinite(col["tpot_s"]) & np.isfinite(end)
    middle = (sent + (col["ttft_s"] + col["e2e_s"]) / 2)[decoding]
    batch = in_flight_after(middle, sent, np.where(np.isfinite(end), end, np.inf))
    context = (
        float(np.median(col["prompt_tokens"][decoding] + col["output_tokens"][decoding] / 2))
        if decoding.any()
        else 0.0
    )
    decode = _decode_flat(model, batch.astype(np.float64), col["tpot_s"][decoding], context)
    flat = [c for c in (prefill, decode) if c is not None]
    if not flat:
        return None
    return (
        " and ".join(flat)
        + ": as no GPU's do; the server may be a simulator (llm-d's inference-sim, its "
        "fixed --time-to-first-token and --inter-token-latency) or a fixed-latency mock, "
        "and the fit stands for its fixed times, not a GPU's costs"
    )
