"""Analysis of run results: pure functions over the records and timeline tables.

Everything here takes pandas DataFrames with the columns of :mod:`kvbudget.results.records` (a
simulated run and a live replay alike) and returns DataFrames or plain numbers; nothing reads
files, draws plots or runs the engine. Random draws (the bootstrap) come from a
``numpy.random.Generator`` the caller passes in, so the same seed gives the same table.

Conventions:

* Latency metrics are ``ttft_s``, ``tpot_s`` and ``e2e_s`` (seconds); latency statistics are
  over *completed* requests, and attainment is over *offered* requests unless stated otherwise
  (a refused or expired request never meets its SLO).
* Quantiles are fractions in ``[0, 1]`` (``0.99`` is p99) and are computed like
  ``numpy.quantile``'s default (linear interpolation between order statistics).
* ``by`` names grouping columns (``"tier"``, and ``"policy"`` or ``"run"`` once several runs are
  stacked with :func:`label_runs`); an empty ``by`` means one group.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import numpy.typing as npt

from kvbudget.results.metrics import meets_slo, time_weighted_mean

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.perf.cost_model import CostModel
    from kvbudget.policies import TierConfig

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

METRICS: Final[tuple[str, ...]] = ("ttft_s", "tpot_s", "e2e_s")
METRIC_LABELS: Final[dict[str, str]] = {
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "e2e_s": "E2E latency",
    "gateway_wait_s": "gateway queueing",
    "engine_queue_s": "engine queueing + batching",
    "prefill_s": "prefill (isolated)",
    "decode_s": "decode",
}
DEFAULT_QUANTILES: Final[tuple[float, ...]] = (0.5, 0.9, 0.99)
COMPONENTS: Final[tuple[str, ...]] = ("gateway_wait_s", "engine_queue_s", "prefill_s", "decode_s")


def quantile_name(q: float) -> str:
    """``0.99 -> "p99"``, ``0.5 -> "p50"``, ``0.999 -> "p99.9"``."""
    _check_quantiles([q])
    text = f"{q * 100:.6f}".rstrip("0").rstrip(".")
    return f"p{text}"


def _check_quantiles(quantiles: Iterable[float]) -> list[float]:
    qs = [float(q) for q in quantiles]
    if not qs:
        raise ValueError("at least one quantile is required")
    for q in qs:
        if not (math.isfinite(q) and 0.0 <= q <= 1.0):
            raise ValueError(f"quantiles must be in [0, 1], got {q!r}")
    return qs


def _check_columns(df: pd.DataFrame, columns: Iterable[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what} lacks column {missing[0]!r} (has {sorted(map(str, df.columns))})")


def _groups(df: pd.DataFrame, by: Sequence[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """``(key, rows)`` per group, in order of first appearance (one group when ``by`` is empty)."""
    by = list(by)
    _check_columns(df, by, "table")
    if not by:
        return [((), df)]
    out: list[tuple[tuple[Any, ...], pd.DataFrame]] = []
    for key, rows in df.groupby(by, sort=False, dropna=False):
        out.append((key if isinstance(key, tuple) else (key,), rows))
    return out


def label_runs(runs: Mapping[str, pd.DataFrame], column: str = "policy") -> pd.DataFrame:
    """Stack the tables of several runs into one, with the run's label in ``column``.

    The label column comes first and keeps the mapping's order as a categorical, so that
    groupings and legends list the runs in the order given.
    """
    import pandas as pd

    if not runs:
        raise ValueError("no runs to label")
    parts = []
    for label, df in runs.items():
        if column in df.columns:
            raise ValueError(f"run {label!r} already has a column {column!r}")
        part = df.copy()
        part.insert(0, column, label)
        parts.append(part)
    out = pd.concat(parts, ignore_index=True)
    out[column] = pd.Categorical(out[column], categories=list(runs), ordered=True)
    return out


def completed(records: pd.DataFrame) -> pd.DataFrame:
    """The rows of completed requests."""
    _check_columns(records, ["status"], "records")
    return records[records["status"] == "completed"]


# --- bootstrap percentiles ----------------------------------------------------------------------


def bootstrap_quantiles(
    values: npt.ArrayLike,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    *,
    rng: np.random.Generator,
    num_resamples: int = 2000,
    confidence: float = 0.95,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Point estimates and percentile-bootstrap confidence intervals of sample quantiles.

    Returns ``(estimate, low, high)``, one entry per quantile (NaN where there are no finite
    values). The bootstrap is exact in distribution but costs O(num_resamples) per quantile
    rather than O(num_resamples * n): with sorted data ``x_(1) <= ... <= x_(n)``, a resample is
    ``x_(ceil(n U_i))`` for uniforms ``U_i``, and that map is monotone, so the resample's ``k``-th
    order statistic is ``x_(ceil(n U_(k)))`` with ``U_(k) ~ Beta(k, n - k + 1)``; the next one
    is ``U_(k+1) = U_(k) + (1 - U_(k)) Beta(1, n - k)``. Those two order statistics are all the
    interpolated quantile needs.
    """
    qs = _check_quantiles(quantiles)
    if num_resamples < 1:
        raise ValueError(f"num_resamples must be >= 1, got {num_resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    v = np.asarray(values, dtype=np.float64)
    v = np.sort(v[np.isfinite(v)])
    n = v.size
    nan = np.full(len(qs), np.nan)
    if n == 0:
        return nan, nan.copy(), nan.copy()
    estimate = np.quantile(v, qs)
    low = np.empty(len(qs))
    high = np.empty(len(qs))
    alpha = (1.0 - confidence) / 2.0
    for j, q in enumerate(qs):
        h = (n - 1) * q
        k = math.floor(h)  # 0-based index of the lower order statistic
        frac = h - k
        u1 = rng.beta(k + 1, n - k, size=num_resamples)
        x1 = v[np.clip(np.ceil(n * u1).astype(np.int64) - 1, 0, n - 1)]
        if k + 1 < n and frac > 0:
            u2 = u1 + (1.0 - u1) * rng.beta(1, n - k - 1, size=num_resamples)
            x2 = v[np.clip(np.ceil(n * u2).astype(np.int64) - 1, 0, n - 1)]
            reps = x1 + frac * (x2 - x1)
        else:
            reps = x1
        low[j], high[j] = np.quantile(reps, [alpha, 1.0 - alpha])
    return estimate, low, high


def percentile_table(
    records: pd.DataFrame,
    *,
    metrics: Sequence[str] = METRICS,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    by: Sequence[str] = ("tier",),
    rng: np.random.Generator | None = None,
    num_resamples: int = 2000,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Latency quantiles of completed requests, per group and metric, with bootstrap CIs.

    Columns: ``*by, metric, quantile, name, n, value, ci_low, ci_high`` (``name`` is ``"p99"``
    and so on). Without ``rng`` the interval columns are NaN.
    """
    import pandas as pd

    qs = _check_quantiles(quantiles)
    _check_columns(records, ["status", *metrics], "records")
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(completed(records), by):
        for metric in metrics:
            values = grp[metric].to_numpy(dtype=np.float64)
            finite = int(np.isfinite(values).sum())
            if rng is not None:
                est, low, high = bootstrap_quantiles(
                    values, qs, rng=rng, num_resamples=num_resamples, confidence=confidence
                )
            else:
                v = values[np.isfinite(values)]
                est = np.quantile(v, qs) if v.size else np.full(len(qs), np.nan)
                low = high = np.full(len(qs), np.nan)
            for j, q in enumerate(qs):
                rows.append(
                    {
                        **dict(zip(by, key, strict=True)),
                        "metric": metric,
                        "quantile": q,
                        "name": quantile_name(q),
                        "n": finite,
                        "value": float(est[j]),
                        "ci_low": float(low[j]),
                        "ci_high": float(high[j]),
                    }
                )
    columns = [*by, "metric", "quantile", "name", "n", "value", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=columns)


# --- distributions ------------------------------------------------------------------------------


def cdf_data(values: npt.ArrayLike) -> pd.DataFrame:
    """The empirical distribution of the finite values: columns ``value, cdf, ccdf``.

    ``cdf`` is ``P(X <= value)``; ``ccdf`` is ``P(X >= value)`` (so it never reaches 0 and a log
    axis shows the largest value at ``1/n``). Sorted by value.
    """
    import pandas as pd

    v = np.asarray(values, dtype=np.float64)
    v = np.sort(v[np.isfinite(v)])
    n = v.size
    ranks = np.arange(1, n + 1, dtype=np.float64)
    return pd.DataFrame(
        {"value": v, "cdf": ranks / max(n, 1), "ccdf": (n - ranks + 1) / max(n, 1)}
    )


def cdf_by(records: pd.DataFrame, metric: str, *, by: Sequence[str] = ("tier",)) -> pd.DataFrame:
    """:func:`cdf_data` of ``metric`` over completed requests, per group: ``*by, value, cdf,
    ccdf``."""
    import pandas as pd

    _check_columns(records, ["status", metric], "records")
    parts = []
    for key, grp in _groups(completed(records), by):
        part = cdf_data(grp[metric].to_numpy(dtype=np.float64))
        for col, k in zip(by, key, strict=True):
            part[col] = k
        parts.append(part[[*by, "value", "cdf", "ccdf"]])
    if not parts:
        return pd.DataFrame(columns=[*by, "value", "cdf", "ccdf"])
    return pd.concat(parts, ignore_index=True)


# --- breakdowns ---------------------------------------------------------------------------------

_STATUSES = ("completed", "rejected_too_large", "rejected_overloaded", "expired", "preempted_dropped")


def breakdown(
    records: pd.DataFrame,
    *,
    by: Sequence[str] = ("tier",),
    quantiles: Sequence[float] = (0.5, 0.99),
    tiers: Sequence[TierConfig] | None = None,
) -> pd.DataFrame:
    """One row per group: request counts by outcome, preemptions, latency quantiles, and SLO
    attainment when the tier configurations are given.

    Columns: ``*by, offered, <one per status>, completion_rate, num_preemptions,
    num_preempted_requests, <metric>_<pNN> for each metric and quantile, output_tokens,
    slo_attainment`` (the last only with ``tiers``; over offered requests, as in summary.json).
    """
    import pandas as pd

    qs = _check_quantiles(quantiles)
    _check_columns(records, ["status", "num_preemptions", "output_tokens", *METRICS], "records")
    if tiers is not None:
        _check_columns(records, ["tier"], "records")
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(records, by):
        status = grp["status"].to_numpy().astype(str)
        done = status == "completed"
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["offered"] = len(grp)
        for s in _STATUSES:
            row[s] = int((status == s).sum())
        row["completion_rate"] = float(done.mean()) if len(grp) else math.nan
        npre = grp["num_preemptions"].to_numpy(dtype=np.int64)
        row["num_preemptions"] = int(npre.sum())
        row["num_preempted_requests"] = int((npre > 0).sum())
        if "num_attempts" in grp.columns:  # clients modelled: attempts and retries
            attempts = grp["num_attempts"].to_numpy(dtype=np.int64)
            row["num_attempts"] = int(attempts.sum())
            row["retry_amplification"] = float(attempts.mean()) if len(grp) else math.nan
        for metric in METRICS:
            v = grp[metric].to_numpy(dtype=np.float64)[done]
            v = v[np.isfinite(v)]
            est = np.quantile(v, qs) if v.size else np.full(len(qs), np.nan)
            for q, e in zip(qs, est, strict=True):
                row[f"{metric}_{quantile_name(q)}"] = float(e)
        row["output_tokens"] = int(grp["output_tokens"].to_numpy(dtype=np.int64)[done].sum())
        if tiers is not None:
            ok = slo_met(grp, tiers)
            row["slo_attainment"] = float(ok.mean()) if len(grp) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def slo_met(
    records: pd.DataFrame, tiers: Sequence[TierConfig], *, scale: float = 1.0
) -> npt.NDArray[np.bool_]:
    """Per row: completed and within its tier's TTFT and TPOT targets times ``scale`` (rows of
    an unconfigured tier never meet an SLO)."""
    _check_columns(records, ["tier", "status", "ttft_s", "tpot_s"], "records")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be > 0, got {scale!r}")
    cfg = {t.name: t for t in tiers}
    tier = records["tier"].to_numpy().astype(str)
    ttft_slo = np.array([cfg[t].ttft_s * scale if t in cfg else -math.inf for t in tier])
    tpot_slo = np.array([cfg[t].tpot_s * scale if t in cfg else -math.inf for t in tier])
    ok = meets_slo(
        records["ttft_s"].to_numpy(dtype=np.float64),
        records["tpot_s"].to_numpy(dtype=np.float64),
        ttft_slo,
        tpot_slo,
        records["e2e_s"].to_numpy(dtype=np.float64) if "e2e_s" in records else None,
    )
    done = records["status"].to_numpy().astype(str) == "completed"
    return np.asarray(ok & done & np.isfinite(ttft_slo), dtype=np.bool_)


def outcome_counts(records: pd.DataFrame, *, by: Sequence[str] = ("tier",)) -> pd.DataFrame:
    """Requests that did not complete, counted by outcome: ``*by, outcome, count``.

    ``outcome`` is the status, followed by the reason where there is one
    (``"rejected_overloaded: queue_full"``). Sorted by group, then count (largest first).
    """
    import pandas as pd

    _check_columns(records, ["status", "reason"], "records")
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(records, by):
        status = grp["status"].to_numpy().astype(str)
        reason = grp["reason"].fillna("").to_numpy().astype(str)
        keep = status != "completed"
        label = np.where(reason != "", np.char.add(np.char.add(status, ": "), reason), status)
        names, counts = np.unique(label[keep], return_counts=True)
        order = np.lexsort((names, -counts))
        for i in order:
            rows.append(
                {**dict(zip(by, key, strict=True)), "outcome": str(names[i]), "count": int(counts[i])}
            )
    return pd.DataFrame(rows, columns=[*by, "outcome", "count"])


# --- time windows and SLO curves ----------------------------------------------------------------


def windowed_percentiles(
    records: pd.DataFrame,
    metric: str = "ttft_s",
    *,
    window_s: float,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    by: Sequence[str] = ("tier",),
    time_column: str = "arrival_s",
) -> pd.DataFrame:
    """Quantiles of ``metric`` over completed requests in fixed time windows of ``time_column``.

    Windows are ``[k * window_s, (k + 1) * window_s)``; only windows with at least one value are
    listed. Columns: ``*by, window_start_s, window_end_s, n, <pNN>...``.
    """
    import pandas as pd

    qs = _check_quantiles(quantiles)
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    _check_columns(records, ["status", metric, time_column], "records")
    names = [quantile_name(q) for q in qs]
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(completed(records), by):
        t = grp[time_column].to_numpy(dtype=np.float64)
        v = grp[metric].to_numpy(dtype=np.float64)
        ok = np.isfinite(t) & np.isfinite(v)
        t, v = t[ok], v[ok]
        window = np.floor(t / window_s).astype(np.int64)
        order = np.argsort(window, kind="stable")
        window, v = window[order], v[order]
        uniq, start = np.unique(window, return_index=True)
        bounds = [*start.tolist(), len(v)]
        for i, w in enumerate(uniq.tolist()):
            chunk = v[bounds[i] : bounds[i + 1]]
            est = np.quantile(chunk, qs)
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    "window_start_s": w * window_s,
                    "window_end_s": (w + 1) * window_s,
                    "n": int(chunk.size),
                    **{name: float(e) for name, e in zip(names, est, strict=True)},
                }
            )
    return pd.DataFrame(rows, columns=[*by, "window_start_s", "window_end_s", "n", *names])


def slo_attainment_curve(
    records: pd.DataFrame,
    metric: str = "ttft_s",
    *,
    thresholds_s: npt.ArrayLike | None = None,
    by: Sequence[str] = ("tier",),
    denominator: Literal["offered", "completed"] = "offered",
) -> pd.DataFrame:
    """The fraction of requests whose ``metric`` is within each threshold: ``*by, threshold_s,
    attainment, n``.

    Over offered requests (``denominator="offered"``), a request that did not complete counts as
    a miss; over completed ones, this is the CDF at the thresholds. The default thresholds are
    60 points spaced logarithmically over the observed range.
    """
    import pandas as pd

    if denominator not in ("offered", "completed"):
        raise ValueError(f"denominator must be 'offered' or 'completed', got {denominator!r}")
    _check_columns(records, ["status", metric], "records")
    if thresholds_s is None:
        v = completed(records)[metric].to_numpy(dtype=np.float64)
        v = v[np.isfinite(v) & (v > 0)]
        if v.size:
            lo, hi = float(v.min()), float(v.max())
            thr = np.geomspace(lo, hi, 60) if hi > lo else np.array([lo])
        else:
            thr = np.array([1.0])
    else:
        thr = np.sort(np.asarray(thresholds_s, dtype=np.float64))
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(records, by):
        done = grp["status"].to_numpy().astype(str) == "completed"
        v = grp[metric].to_numpy(dtype=np.float64)
        # a completed request without a value (TPOT of a one-token output) meets any threshold
        v = np.where(done & np.isnan(v), -math.inf, v)
        v = np.where(done, v, math.inf)
        if denominator == "completed":
            v = v[done]
        n = v.size
        s = np.sort(v)
        hits = np.searchsorted(s, thr, side="right")
        for t, h in zip(thr.tolist(), hits.tolist(), strict=True):
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    "threshold_s": t,
                    "attainment": h / n if n else math.nan,
                    "n": n,
                }
            )
    return pd.DataFrame(rows, columns=[*by, "threshold_s", "attainment", "n"])


def slo_scale_curve(
    records: pd.DataFrame,
    tiers: Sequence[TierConfig],
    *,
    scales: npt.ArrayLike = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0),
    by: Sequence[str] = ("tier",),
) -> pd.DataFrame:
    """SLO attainment (TTFT and TPOT together, over offered requests) with every tier's targets
    multiplied by each scale: ``*by, scale, attainment``. The curve DistServe plots to show how
    much slack a configuration has."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for key, grp in _groups(records, by):
        for scale in np.asarray(scales, dtype=np.float64).tolist():
            ok = slo_met(grp, tiers, scale=scale)
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    "scale": scale,
                    "attainment": float(ok.mean()) if ok.size else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=[*by, "scale", "attainment"])


# --- where the latency comes from ---------------------------------------------------------------


def isolated_prefill_s(
    prompt_tokens: npt.ArrayLike, cost_model: CostModel, *, max_num_batched_tokens: int = 8192
) -> FloatArray:
    """Seconds to prefill each prompt alone on an idle engine (chunks of at most
    ``max_num_batched_tokens``, one engine step each), by the cost model: a lower bound on the
    prefill part of TTFT."""
    if max_num_batched_tokens < 1:
        raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens!r}")
    p = np.asarray(prompt_tokens, dtype=np.float64)
    total = np.zeros_like(p)
    done = np.zeros_like(p)
    while np.any(done < p):
        chunk = np.minimum(p - done, float(max_num_batched_tokens))
        active = chunk > 0
        ctx = done + chunk
        step = cost_model.step_time(
            chunk, np.zeros_like(p), ctx, chunk * ctx, active.astype(np.float64)
        )
        total += np.where(active, step, 0.0)
        done = ctx
    return total


def latency_components(
    records: pd.DataFrame, *, prefill_s: npt.ArrayLike | None = None
) -> pd.DataFrame:
    """The records of completed requests with their latency split into parts (seconds):

    * ``gateway_wait_s = admitted_s - arrival_s``: queueing at the gateway for a lease (the
      records keep a request's last admission, so for a request revoked after its first token
      and admitted again, all of its TTFT counts here and the rest of its wait in ``decode_s``);
    * ``engine_ttft_s = first_token_s - admitted_s``: the engine's part of TTFT: its waiting
      queue, batching with other work, and the prefill itself;
    * with ``prefill_s`` (one value per row of ``records``, e.g. :func:`isolated_prefill_s`),
      ``engine_ttft_s`` is split into ``prefill_s`` (at most the isolated prefill time) and
      ``engine_queue_s`` (the rest); without it, ``prefill_s`` is NaN and ``engine_queue_s``
      is all of ``engine_ttft_s``;
    * ``decode_s = finished_s - first_token_s``: generation, including stalls after engine
      preemptions (recompute) or gateway revocations;
    * ``preempted``: the request was preempted or revoked at least once.
    """
    _check_columns(
        records,
        ["status", "arrival_s", "admitted_s", "first_token_s", "finished_s", "num_preemptions"],
        "records",
    )
    mask = (records["status"] == "completed").to_numpy()
    out = records[mask].copy()
    arrival = out["arrival_s"].to_numpy(dtype=np.float64)
    admitted = out["admitted_s"].to_numpy(dtype=np.float64)
    first = out["first_token_s"].to_numpy(dtype=np.float64)
    finished = out["finished_s"].to_numpy(dtype=np.float64)
    # records keep the last admission: a request revoked after its first token and admitted
    # again has admitted_s > first_token_s; its TTFT then counts as gateway wait
    admitted = np.minimum(admitted, first)
    engine = first - admitted
    out["gateway_wait_s"] = admitted - arrival
    out["engine_ttft_s"] = engine
    if prefill_s is not None:
        pf = np.asarray(prefill_s, dtype=np.float64)
        if pf.shape != (len(records),):
            raise ValueError(
                f"prefill_s must have one value per record ({len(records)}), got shape {pf.shape}"
            )
        part = np.minimum(pf[mask], engine)
        out["prefill_s"] = part
        out["engine_queue_s"] = engine - part
    else:
        out["prefill_s"] = np.nan
        out["engine_queue_s"] = engine
    out["decode_s"] = finished - first
    out["preempted"] = out["num_preemptions"].to_numpy(dtype=np.int64) > 0
    return out


def tail_attribution(
    records: pd.DataFrame,
    metric: str = "ttft_s",
    *,
    quantile: float = 0.99,
    by: Sequence[str] = ("tier",),
    prefill_s: npt.ArrayLike | None = None,
) -> pd.DataFrame:
    """Where the tail comes from: mean latency parts of the requests at or above the group's
    ``quantile`` of ``metric`` (``segment="tail"``) against those below (``"body"``).

    Columns: ``*by, segment, n, threshold_s, <metric>, gateway_wait_s, engine_queue_s,
    prefill_s, decode_s, preempted_fraction, mean_preemptions``. Parts are means in seconds;
    for TTFT, gateway wait + engine queue + prefill add up to the TTFT mean.
    """
    import pandas as pd

    (q,) = _check_quantiles([quantile])
    comp = latency_components(records, prefill_s=prefill_s)
    _check_columns(comp, [metric], "records")
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(comp, by):
        v = grp[metric].to_numpy(dtype=np.float64)
        finite = np.isfinite(v)
        if not finite.any():
            continue
        thr = float(np.quantile(v[finite], q))
        for segment, sel in (("body", finite & (v < thr)), ("tail", finite & (v >= thr))):
            part = grp[sel]
            row: dict[str, Any] = {
                **dict(zip(by, key, strict=True)),
                "segment": segment,
                "n": int(sel.sum()),
                "threshold_s": thr,
                metric: float(np.mean(v[sel])) if sel.any() else math.nan,
            }
            for c in COMPONENTS:
                x = part[c].to_numpy(dtype=np.float64)
                row[c] = float(np.mean(x)) if x.size and not np.all(np.isnan(x)) else math.nan
            pre = part["num_preemptions"].to_numpy(dtype=np.float64)
            row["preempted_fraction"] = float(np.mean(pre > 0)) if pre.size else math.nan
            row["mean_preemptions"] = float(np.mean(pre)) if pre.size else math.nan
            rows.append(row)
    columns = [*by, "segment", "n", "threshold_s", metric, *COMPONENTS]
    return pd.DataFrame(rows, columns=[*columns, "preempted_fraction", "mean_preemptions"])


# --- the timeline -------------------------------------------------------------------------------


def kv_timeline(timeline: pd.DataFrame) -> pd.DataFrame:
    """The timeline with derived columns: ``used_fraction``, ``reserved_fraction`` (of the KV
    capacity), ``idle_reserved_tokens`` (reserved by leases but not holding KV: the capacity a
    worst-case reservation idles), ``idle_reserved_fraction`` and ``new_preemptions`` (since the
    previous sample)."""
    cols = ["time_s", "kv_used_tokens", "kv_reserved_tokens", "kv_capacity_tokens", "num_preemptions"]
    _check_columns(timeline, cols, "timeline")
    out = timeline.sort_values("time_s", kind="stable").reset_index(drop=True)
    cap = out["kv_capacity_tokens"].to_numpy(dtype=np.float64)
    cap = np.where(cap > 0, cap, np.nan)
    used = out["kv_used_tokens"].to_numpy(dtype=np.float64)
    reserved = out["kv_reserved_tokens"].to_numpy(dtype=np.float64)
    idle = np.maximum(reserved - used, 0.0)
    out["used_fraction"] = used / cap
    out["reserved_fraction"] = reserved / cap
    out["idle_reserved_tokens"] = idle.astype(np.int64)
    out["idle_reserved_fraction"] = idle / cap
    cum = out["num_preemptions"].to_numpy(dtype=np.int64)
    out["new_preemptions"] = np.diff(cum, prepend=0) if cum.size else cum
    return out


def preemption_events(timeline: pd.DataFrame) -> pd.DataFrame:
    """Samples at which preemptions happened: ``time_s, new_preemptions`` (count since the
    previous sample, from the cumulative ``num_preemptions`` column)."""
    kv = kv_timeline(timeline)
    ev = kv[kv["new_preemptions"] > 0]
    return ev[["time_s", "new_preemptions"]].reset_index(drop=True)


def kv_summary(timeline: pd.DataFrame) -> dict[str, float]:
    """Time-weighted means of the KV fractions (each sample holds until the next), the p99 of
    used KV, preemptions and peak queue depth over the timeline."""
    kv = kv_timeline(timeline)
    t = kv["time_s"].to_numpy(dtype=np.float64)
    end = float(t[-1]) if t.size else 0.0
    span = float(t[-1] - t[0]) if t.size > 1 else 0.0

    def twm(col: str) -> float:
        return time_weighted_mean(t, kv[col].to_numpy(dtype=np.float64), end) if t.size else math.nan

    def mean_fraction(tokens: str, fraction: str) -> float:
        """The time-weighted share of the capacity: an autoscaled fleet's (its capacity comes
        and goes) token-seconds over the token-seconds of the capacity serving, as the
        summary's ``kv`` block has it (``results.metrics.summarize``); else the mean share."""
        if "num_replicas_up" not in timeline:
            return twm(fraction)
        held = twm("kv_capacity_tokens")
        return twm(tokens) / held if held > 0 else math.nan

    total = float(kv["num_preemptions"].iloc[-1]) if t.size else 0.0
    used = kv["used_fraction"].to_numpy(dtype=np.float64)
    _check_columns(timeline, ["num_waiting", "num_running"], "timeline")
    return {
        "used_mean_fraction": mean_fraction("kv_used_tokens", "used_fraction"),
        "used_p99_fraction": float(np.nanquantile(used, 0.99)) if used.size else math.nan,
        "reserved_mean_fraction": mean_fraction("kv_reserved_tokens", "reserved_fraction"),
        "idle_reserved_mean_fraction": mean_fraction("idle_reserved_tokens", "idle_reserved_fraction"),
        "num_preemptions": total,
        "preemptions_per_s": total / span if span > 0 else math.nan,
        "max_waiting": float(kv["num_waiting"].max()) if t.size else math.nan,
        "mean_running": twm("num_running"),
    }


# --- simulated against measured -----------------------------------------------------------------


def join_measured(
    simulated: pd.DataFrame,
    measured: pd.DataFrame,
    *,
    metrics: Sequence[str] = METRICS,
) -> pd.DataFrame:
    """Pair simulated and measured records on ``request_id`` (inner join).

    Columns: ``request_id, tier, status_sim, status_meas``, then per metric ``<m>_sim, <m>_meas,
    <m>_error`` (simulated minus measured, seconds) and ``<m>_ape`` (absolute percentage error,
    a fraction; NaN unless both values are finite and the measured one is positive).
    ``tier`` is the measured tier; a request whose tiers differ is an error.
    """
    need = ["request_id", "tier", "status", *metrics]
    _check_columns(simulated, need, "simulated records")
    _check_columns(measured, need, "measured records")
    for name, df in (("simulated", simulated), ("measured", measured)):
        dup = df["request_id"].duplicated()
        if dup.any():
            rid = int(df["request_id"][dup].iloc[0])
            raise ValueError(f"{name} records repeat request_id {rid}")
    sim = simulated[need].rename(columns={c: f"{c}_sim" for c in need[1:]})
    meas = measured[need].rename(columns={c: f"{c}_meas" for c in need[1:]})
    j = meas.merge(sim, on="request_id", how="inner", sort=True)
    t_sim = j["tier_sim"].astype(str).to_numpy()
    t_meas = j["tier_meas"].astype(str).to_numpy()
    if np.any(t_sim != t_meas):
        i = int(np.argmax(t_sim != t_meas))
        raise ValueError(
            f"request {int(j['request_id'].iloc[i])} has tier {t_sim[i]!r} in the simulation "
            f"but {t_meas[i]!r} in the measurement"
        )
    j = j.drop(columns=["tier_sim"]).rename(columns={"tier_meas": "tier"})
    for m in metrics:
        s = j[f"{m}_sim"].to_numpy(dtype=np.float64)
        r = j[f"{m}_meas"].to_numpy(dtype=np.float64)
        j[f"{m}_error"] = s - r
        with np.errstate(divide="ignore", invalid="ignore"):
            j[f"{m}_ape"] = np.where(np.isfinite(s) & (r > 0), np.abs(s - r) / r, np.nan)
    front = ["request_id", "tier", "status_sim", "status_meas"]
    rest = [c for c in j.columns if c not in front]
    return j[front + rest].reset_index(drop=True)


def quantile_errors(
    simulated: pd.DataFrame,
    measured: pd.DataFrame,
    *,
    metrics: Sequence[str] = METRICS,
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    by: Sequence[str] = ("tier",),
    paired: bool = True,
) -> pd.DataFrame:
    """Per-quantile error of the simulation: ``*by, metric, quantile, name, n_sim, n_meas,
    simulated, measured, error, relative_error``.

    ``error`` is simulated minus measured (seconds), ``relative_error`` that over measured.
    ``paired=True`` compares the requests that completed in both (on ``request_id``); with
    ``paired=False`` each side uses all of its completed requests.
    """
    import pandas as pd

    qs = _check_quantiles(quantiles)
    if paired:
        j = join_measured(simulated, measured, metrics=metrics)
        both = (j["status_sim"] == "completed") & (j["status_meas"] == "completed")
        j = j[both]
        sim_side = j[[*by, *(f"{m}_sim" for m in metrics)]].rename(
            columns={f"{m}_sim": m for m in metrics}
        )
        meas_side = j[[*by, *(f"{m}_meas" for m in metrics)]].rename(
            columns={f"{m}_meas": m for m in metrics}
        )
    else:
        sim_side, meas_side = completed(simulated), completed(measured)
    sim_groups = dict(_groups(sim_side, by))
    rows: list[dict[str, Any]] = []
    for key, mgrp in _groups(meas_side, by):
        sgrp = sim_groups.get(key)
        for m in metrics:
            mv = mgrp[m].to_numpy(dtype=np.float64)
            mv = mv[np.isfinite(mv)]
            sv = sgrp[m].to_numpy(dtype=np.float64) if sgrp is not None else np.zeros(0)
            sv = sv[np.isfinite(sv)]
            mq = np.quantile(mv, qs) if mv.size else np.full(len(qs), np.nan)
            sq = np.quantile(sv, qs) if sv.size else np.full(len(qs), np.nan)
            for q, s, r in zip(qs, sq, mq, strict=True):
                rows.append(
                    {
                        **dict(zip(by, key, strict=True)),
                        "metric": m,
                        "quantile": q,
                        "name": quantile_name(q),
                        "n_sim": int(sv.size),
                        "n_meas": int(mv.size),
                        "simulated": float(s),
                        "measured": float(r),
                        "error": float(s - r),
                        "relative_error": float((s - r) / r) if r > 0 else math.nan,
                    }
                )
    columns = [*by, "metric", "quantile", "name", "n_sim", "n_meas", "simulated", "measured"]
    return pd.DataFrame(rows, columns=[*columns, "error", "relative_error"])


def per_request_errors(
    joined: pd.DataFrame, *, metrics: Sequence[str] = METRICS, by: Sequence[str] = ("tier",)
) -> pd.DataFrame:
    """From :func:`join_measured`: per group and metric, over requests completed in both, the
    mean and median absolute percentage error and the mean signed error (seconds):
    ``*by, metric, n, mape, median_ape, mean_error_s``."""
    import pandas as pd

    _check_columns(joined, ["status_sim", "status_meas"], "joined records")
    both = joined[(joined["status_sim"] == "completed") & (joined["status_meas"] == "completed")]
    rows: list[dict[str, Any]] = []
    for key, grp in _groups(both, by):
        for m in metrics:
            ape = grp[f"{m}_ape"].to_numpy(dtype=np.float64)
            err = grp[f"{m}_error"].to_numpy(dtype=np.float64)
            ape, err = ape[np.isfinite(ape)], err[np.isfinite(err)]
            rows.append(
                {
                    **dict(zip(by, key, strict=True)),
                    "metric": m,
                    "n": int(ape.size),
                    "mape": float(ape.mean()) if ape.size else math.nan,
                    "median_ape": float(np.median(ape)) if ape.size else math.nan,
                    "mean_error_s": float(err.mean()) if err.size else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=[*by, "metric", "n", "mape", "median_ape", "mean_error_s"])
