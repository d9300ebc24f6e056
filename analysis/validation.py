"""Simulated against measured: per-metric relative errors, per-request errors, and a plot.

Both sides are records tables with the same columns (:mod:`kvbudget.results.records`), so the
comparison is a join on ``request_id``. The simulator models engine steps only; what the API
server adds to every request outside them (``frontend_overhead_s``, measured by
``kvbudget calibrate``) is added to the simulated first-token and finish times before comparing,
and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.policies import TierConfig
from kvbudget.results.metrics import summarize

if TYPE_CHECKING:
    import pandas as pd

KEY_METRICS = ("ttft_p50_s", "tpot_p50_s", "output_tokens_per_s")
"""The metrics ``kvbudget validate --max-error`` checks."""

COMPARISON_COLUMNS = ("metric", "simulated", "measured", "rel_error")


def add_frontend_overhead(records: pd.DataFrame, overhead_s: float) -> pd.DataFrame:
    """Simulated records as a client would see them: first token and finish later by the API
    server's own time (TPOT is unchanged: it is paid once per request, not per token)."""
    if overhead_s < 0 or not math.isfinite(overhead_s):
        raise ValueError(f"frontend overhead must be >= 0, got {overhead_s!r}")
    out = records.copy()
    for col in ("first_token_s", "finished_s", "ttft_s", "e2e_s"):
        out[col] = out[col] + overhead_s
    return out


def summary_of(records: pd.DataFrame, timeline: pd.DataFrame, tiers: Sequence[TierConfig],
               capacity_tokens: int, policy: str) -> dict[str, Any]:
    return summarize(
        {str(c): records[c].to_numpy() for c in records.columns},
        {str(c): timeline[c].to_numpy() for c in timeline.columns},
        tiers=tiers, kv_capacity_tokens=max(capacity_tokens, 1), policy=policy, seed=0,
        wall_time_s=0.0,
    )


def metric_values(summary: Mapping[str, Any]) -> dict[str, float]:
    """The compared metrics of one summary (``summary.json`` shape), NaN where undefined."""
    overall = summary["overall"]
    out: dict[str, float] = {}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        stem = metric[: -len("_s")]
        for q in ("p50", "p90", "p99"):
            value = overall[metric].get(q)
            out[f"{stem}_{q}_s"] = math.nan if value is None else float(value)
    tput = overall.get("output_tokens_per_s")
    out["output_tokens_per_s"] = math.nan if tput is None else float(tput)
    out["completed"] = float(overall["completed"])
    engine = summary.get("engine") or {}
    out["preemptions"] = float(engine.get("num_engine_preemptions", 0)
                               + engine.get("num_gateway_revocations", 0))
    out["rejections"] = float(sum(overall[s] for s in ("rejected_too_large",
                                                        "rejected_overloaded", "expired",
                                                        "preempted_dropped")))
    return out


def rel_error(simulated: float, measured: float) -> float:
    """``(simulated - measured) / measured``; 0 when both are 0, NaN when only measured is."""
    if math.isnan(simulated) or math.isnan(measured):
        return math.nan
    if measured == 0:
        return 0.0 if simulated == 0 else math.nan
    return (simulated - measured) / measured


def compare_metrics(simulated: Mapping[str, Any], measured: Mapping[str, Any]) -> pd.DataFrame:
    """One row per metric: simulated, measured, signed relative error."""
    import pandas as pd

    sim, meas = metric_values(simulated), metric_values(measured)
    rows = [(m, sim[m], meas[m], rel_error(sim[m], meas[m])) for m in sim]
    return pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))


def per_request_errors(simulated: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Mean absolute percentage error per latency metric over requests completed on both sides
    (joined on ``request_id``): columns ``metric``, ``num_pairs``, ``mape``."""
    import pandas as pd

    cols = ["request_id", "ttft_s", "tpot_s", "e2e_s"]
    s = simulated.loc[simulated["status"] == "completed", cols]
    m = measured.loc[measured["status"] == "completed", cols]
    joined = s.merge(m, on="request_id", suffixes=("_sim", "_meas"))
    rows = []
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        a = joined[f"{metric}_sim"].to_numpy(dtype=np.float64)
        b = joined[f"{metric}_meas"].to_numpy(dtype=np.float64)
        ok = np.isfinite(a) & np.isfinite(b) & (b > 0)
        mape = float(np.mean(np.abs(a[ok] - b[ok]) / b[ok])) if ok.any() else math.nan
        rows.append((metric, int(ok.sum()), mape))
    return pd.DataFrame(rows, columns=["metric", "num_pairs", "mape"])


@dataclass(eq=False)
class Validation:
    """The outcome of ``kvbudget validate``."""

    metrics: pd.DataFrame
    per_request: pd.DataFrame
    frontend_overhead_s: float

    def worst_key_error(self) -> tuple[str, float]:
        """The key metric (:data:`KEY_METRICS`) with the largest absolute relative error."""
        sub = self.metrics[self.metrics["metric"].isin(KEY_METRICS)]
        errs = sub["rel_error"].abs().fillna(math.inf).to_numpy()
        i = int(np.argmax(errs))
        return str(sub["metric"].iloc[i]), float(errs[i])

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            return None if isinstance(v, float) and not math.isfinite(v) else v

        return {
            "frontend_overhead_s": self.frontend_overhead_s,
            "metrics": [{k: clean(v) for k, v in r.items()}
                        for r in self.metrics.to_dict(orient="records")],
            "per_request": [{k: clean(v) for k, v in r.items()}
                            for r in self.per_request.to_dict(orient="records")],
        }


def validate_runs(
    sim_records: pd.DataFrame,
    sim_timeline: pd.DataFrame,
    sim_engine: Mapping[str, Any],
    live_records: pd.DataFrame,
    live_summary: Mapping[str, Any],
    *,
    tiers: Sequence[TierConfig],
    capacity_tokens: int,
    policy: str,
    frontend_overhead_s: float,
) -> tuple[Validation, pd.DataFrame]:
    """Compare a simulated run with a measured one; returns the validation and the simulated
    records as compared (with the front-end overhead added)."""
    adjusted = add_frontend_overhead(sim_records, frontend_overhead_s)
    sim_summary = summary_of(adjusted, sim_timeline, tiers, capacity_tokens, policy)
    sim_summary["engine"] = dict(sim_engine)
    metrics = compare_metrics(sim_summary, live_summary)
    return Validation(metrics, per_request_errors(adjusted, live_records),
                      frontend_overhead_s), adjusted


def plot_validation(sim_records: pd.DataFrame, live_records: pd.DataFrame,
                    sim_timeline: pd.DataFrame, live_timeline: pd.DataFrame, path: Path,
                    title: str) -> None:
    """CDFs of TTFT, TPOT and E2E, and KV use over time, simulated against measured (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, metric, label in zip(axes.flat[:3], ("ttft_s", "tpot_s", "e2e_s"),
                                 ("TTFT (s)", "TPOT (s)", "E2E (s)"), strict=True):
        for df, name, style in ((live_records, "measured", "-"), (sim_records, "simulated",
                                                                  "--")):
            v = df.loc[df["status"] == "completed", metric].to_numpy(dtype=np.float64)
            v = np.sort(v[np.isfinite(v)])
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, style, where="post", label=name)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests")
        ax.grid(alpha=0.3)
        ax.legend()
    ax = axes.flat[3]
    for tl, name, style in ((live_timeline, "measured", "-"), (sim_timeline, "simulated", "--")):
        if len(tl):
            ax.plot(tl["time_s"], tl["kv_used_tokens"], style, label=name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV tokens in use")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
