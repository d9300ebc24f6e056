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
import numpy.typing as npt

from kvbudget.analysis.whole_answer import live_whole_answer_said
from kvbudget.policies import TierConfig
from kvbudget.results.metrics import quantiles, summarize, weighted_quantiles
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    import pandas as pd

KEY_METRICS = ("ttft_p50_s", "tpot_p50_s", "output_tokens_per_s")
"""The metrics ``kvbudget validate --max-error`` checks. ``output_tokens_per_s`` in every
comparison is the completed output tokens over the time the work took, first arrival to last
finish (the summary's ``sustained_output_tokens_per_s``; what ``vllm bench serve`` reports as
output token throughput), never over the arrival window: replaying the same arrivals, a run
where every request completes has the same arrival-window rate however fast its engine is."""

THROUGHPUT_SAID = ("output_tokens_per_s: completed output tokens over the time the work took, "
                   "first arrival to last finish (of each load stage, and overall over the "
                   "time any stage ran, so not the idle time between stages; not over the "
                   "arrival window, which is the same on both sides whenever every request "
                   "completes)")
"""The line under a comparison table that says what its throughput is over."""

REL_ERROR_SAID = "rel. error: (simulated - measured) / measured, + where the simulation is higher"
"""The line under a comparison table that says which way its signed errors point (a per-request
MAPE, the mean of the absolute errors, has no sign)."""

COMPARISON_COLUMNS = ("metric", "simulated", "measured", "rel_error")

COUNT_METRICS = frozenset({"completed", "preemptions", "rejections"})
"""The compared metrics that count requests or events: kept as floats in the table (a NaN
where one side has none) but shown whole."""


def shown_value(metric: str, value: Any) -> Any:
    """A comparison table's cell as the terminal shows it: a count (:data:`COUNT_METRICS`) as
    an int (``150``, not the ``150.0`` a float of 100 or more prints as), anything else as it
    is."""
    if metric in COUNT_METRICS and isinstance(value, float | np.floating) and \
            math.isfinite(float(value)) and float(value).is_integer():
        return int(value)
    return value


def table_cell(metric: str, value: Any) -> Any:
    """A comparison table's cell on the terminal: :func:`shown_value`, and ``-`` where a side
    has no figure (a NaN: every measured TTFT a client's read, no request of a kind), as the
    relative-error column shows it, not ``nan``."""
    if isinstance(value, float | np.floating) and not math.isfinite(float(value)):
        return "-"
    return shown_value(metric, value)


def counts_whole(table: pd.DataFrame) -> pd.DataFrame:
    """A comparison table (``metric``, ``simulated``, ``measured``, ...) as ``validation.csv``
    and ``validation.json`` write it: each count's figures (:data:`COUNT_METRICS`) whole
    (:func:`shown_value`: ``20``, not ``20.0``), latencies and rates as they are. The table
    itself keeps floats (a NaN where a side has none)."""
    import pandas as pd

    out = table.copy()
    for col in ("simulated", "measured"):
        out[col] = pd.Series([shown_value(m, v) for m, v in zip(out["metric"], out[col],
                                                                   strict=True)],
                             index=out.index, dtype=object)
    return out


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
               capacity_tokens: int, policy: str,
               token_gaps: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The summary of a records table (and its token gaps, for ITL: a constant front-end
    overhead moves every token alike, so leaves the gaps as they are)."""
    return summarize(
        {str(c): records[c].to_numpy() for c in records.columns},
        {str(c): timeline[c].to_numpy() for c in timeline.columns},
        tiers=tiers, kv_capacity_tokens=max(capacity_tokens, 1), policy=policy, seed=0,
        wall_time_s=0.0, token_gaps=token_gaps,
    )


def metric_values(summary: Mapping[str, Any]) -> dict[str, float]:
    """The compared metrics of one summary (``summary.json`` shape), NaN where undefined."""
    overall = summary["overall"]
    out: dict[str, float] = {}
    # ITL (inter-token latency) where the run has its gaps (runs written before it do not)
    metrics = ("ttft_s", "tpot_s", "itl_s", "e2e_s") if "itl_s" in overall else (
        "ttft_s", "tpot_s", "e2e_s")
    for metric in metrics:
        stem = metric[: -len("_s")]
        for q in ("p50", "p90", "p99"):
            value = overall[metric].get(q)
            out[f"{stem}_{q}_s"] = math.nan if value is None else float(value)
    tput = overall.get("sustained_output_tokens_per_s")  # not the arrival window's: KEY_METRICS
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
    """One row per metric both summaries have: simulated, measured, signed relative error."""
    import pandas as pd

    sim, meas = metric_values(simulated), metric_values(measured)
    rows = [(m, sim[m], meas[m], rel_error(sim[m], meas[m])) for m in sim if m in meas]
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
    """The outcome of ``kvbudget validate``. ``said``: the lines under its table (what it
    left out: :func:`~kvbudget.analysis.whole_answer.live_whole_answer_said`)."""

    metrics: pd.DataFrame
    per_request: pd.DataFrame
    frontend_overhead_s: float
    said: tuple[str, ...] = ()

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
                        for r in counts_whole(self.metrics).to_dict(orient="records")],
            "per_request": [{k: clean(v) for k, v in r.items()}
                            for r in self.per_request.to_dict(orient="records")],
            "said": list(self.said),
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
    sim_token_gaps: Mapping[str, Any] | None = None,
    whole_answer: npt.NDArray[np.bool_] | None = None,
    whole_answer_by_gaps: bool = False,
    itl_gaps: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None,
) -> tuple[Validation, pd.DataFrame]:
    """Compare a simulated run with a measured one; returns the validation and the simulated
    records as compared (with the front-end overhead added). With ``sim_token_gaps`` (the
    simulation's token-gaps table) and a measured summary with ``itl_s``, ITL is compared too.

    ``whole_answer``: the rows of ``live_records`` whose client got the whole answer in one
    read (:func:`~kvbudget.analysis.whole_answer.whole_answer_rows_of_run`; all of them found
    by their gaps: ``whole_answer_by_gaps``): their measured TTFT and TPOT are the client's
    read, so both summaries' TTFT and TPOT figures and the per-request MAPEs take the other
    requests only (:func:`client_reads_left_out`), E2E and throughput every one, and the
    validation's ``said`` says so, as it says p99s over so few requests that they are about
    the maximum (:func:`few_requests_said`). With ``itl_gaps`` (the token-gaps tables of the completed
    requests not in ``whole_answer``, simulated and measured), so do the ITL rows
    (:func:`itl_of_others`); without it they pool every completed request's gaps, said too.
    None of them (or None): the comparison of every request."""
    adjusted = add_frontend_overhead(sim_records, frontend_overhead_s)
    sim_summary = summary_of(adjusted, sim_timeline, tiers, capacity_tokens, policy,
                             sim_token_gaps)
    sim_summary["engine"] = dict(sim_engine)
    measured = _with_sustained(live_summary, live_records)
    burst = (np.zeros(len(live_records), dtype=bool) if whole_answer is None
             else np.asarray(whole_answer, dtype=bool))
    if burst.any():
        live_records, adjusted = client_reads_left_out(live_records, adjusted, burst)
        measured = _with_latencies(measured, live_records)
        sim_summary = _with_latencies(sim_summary, adjusted)
        if itl_gaps is not None:
            sim_summary, measured = itl_of_others(sim_summary, measured, *itl_gaps)
    metrics = compare_metrics(sim_summary, measured)
    said: tuple[str, ...] = ()
    if burst.any():
        num_completed = int((live_records["status"] == "completed").sum())
        with_itl = bool((metrics["metric"] == "itl_p50_s").any())
        said = (live_whole_answer_said(int(burst.sum()), num_completed,
                                       by_gaps=whole_answer_by_gaps, with_itl=with_itl,
                                       itl_of_others=with_itl and itl_gaps is not None),)
    # the p99s over few requests, as validate --records says it (the requests read whole left
    # out of TTFT and TPOT above, as the figures are)
    few = few_requests_said(live_records)
    said += (few,) if few else ()
    return Validation(metrics, per_request_errors(adjusted, live_records), frontend_overhead_s,
                      said), adjusted


CLIENT_READ_METRICS = ("ttft_s", "tpot_s")
"""The metrics of a request whose client got the whole answer in one read that are the
client's read, not the server's times (its E2E ends at its last token's read either way)."""


def without_client_reads(records: pd.DataFrame, rows: npt.NDArray[np.bool_]) -> pd.DataFrame:
    """``records`` with no TTFT nor TPOT (NaN) on ``rows``: the requests whose client got the
    whole answer in one read."""
    out = records.copy()
    for metric in CLIENT_READ_METRICS:
        out[metric] = np.where(rows, np.nan, out[metric].to_numpy(dtype=np.float64))
    return out


def client_reads_left_out(live: pd.DataFrame, simulated: pd.DataFrame,
                          rows: npt.NDArray[np.bool_]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A live run's records and a simulation's of the same requests (joined on
    ``request_id``), the TTFT and TPOT of the live ``rows`` (read whole at once) left out on
    both sides: each metric over the requests that measured it, as :func:`same_requests`
    compares a recording's; a metric no completed live request keeps keeps every simulated
    figure (the measured one has none)."""
    live = without_client_reads(live, rows)
    done = (live["status"] == "completed").to_numpy()
    ids = live["request_id"].to_numpy()[np.asarray(rows, dtype=bool)]
    theirs = np.isin(simulated["request_id"].to_numpy(), ids)
    simulated = simulated.copy()
    for metric in CLIENT_READ_METRICS:
        if np.isfinite(live[metric].to_numpy(dtype=np.float64)[done]).any():
            simulated[metric] = np.where(theirs, np.nan,
                                         simulated[metric].to_numpy(dtype=np.float64))
    return live, simulated


def _with_latencies(summary: Mapping[str, Any], records: pd.DataFrame) -> dict[str, Any]:
    """``summary`` with its overall TTFT and TPOT figures those of ``records``' completed rows,
    as :func:`~kvbudget.results.metrics.summarize` computes them (NaN ones left out)."""
    done = (records["status"] == "completed").to_numpy()
    overall = {**summary["overall"], **{
        metric: quantiles(records[metric].to_numpy(dtype=np.float64)[done])
        for metric in CLIENT_READ_METRICS}}
    return {**summary, "overall": overall}


def itl_of_others(simulated: Mapping[str, Any], measured: Mapping[str, Any],
                  sim_gaps: Mapping[str, Any], live_gaps: Mapping[str, Any]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both summaries with their overall ITL (``itl_s``, where they have it) that of the
    token-gaps tables ``sim_gaps`` and ``live_gaps``: the gaps of the completed requests whose
    client did not read the whole answer at once, pooled over the tiers as the summary's are.
    When no such live request kept a gap, the measured ITL has no figure and the simulated
    one stays that of every request (as :func:`client_reads_left_out` keeps TTFT)."""
    kept = int(np.asarray(live_gaps["num_gaps"], dtype=np.int64).sum()) > 0

    def with_itl(summary: Mapping[str, Any], gaps: Mapping[str, Any]) -> dict[str, Any]:
        overall = summary["overall"]
        if "itl_s" in overall:
            overall = {**overall, "itl_s": weighted_quantiles(
                np.asarray(gaps["gap_s"], dtype=np.float64),
                np.asarray(gaps["num_gaps"], dtype=np.int64))}
        return {**summary, "overall": overall}

    return (with_itl(simulated, sim_gaps) if kept else dict(simulated),
            with_itl(measured, live_gaps))


def _with_sustained(summary: Mapping[str, Any], records: pd.DataFrame) -> Mapping[str, Any]:
    """A measured summary with its overall ``sustained_output_tokens_per_s``: a run directory
    written before summaries had it gets it from its records, as :func:`summarize` computes it
    (completed output tokens over first arrival to the last finish or arrival)."""
    overall = summary["overall"]
    if "sustained_output_tokens_per_s" in overall:
        return summary
    arrival = records["arrival_s"].to_numpy(dtype=np.float64)
    finished = records["finished_s"].to_numpy(dtype=np.float64)
    done = (records["status"] == "completed").to_numpy()
    span = float(np.nanmax(np.append(finished, arrival)) - arrival.min()) if arrival.size else 0.0
    tokens = float(records["output_tokens"].to_numpy()[done].sum())
    rate = tokens / span if span > 0 else None
    return {**summary, "overall": {**overall, "sustained_output_tokens_per_s": rate}}


def _legend_or_none(ax: Any, empty: str) -> None:
    """A panel's grid and legend, or ``empty`` written across it where nothing was drawn (every
    request of one output token has no TPOT: matplotlib warns of a legend with no entries)."""
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)


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
        _legend_or_none(ax, f"no request has a {label.split()[0]}")
    ax = axes.flat[3]
    for tl, name, style in ((live_timeline, "measured", "-"), (sim_timeline, "simulated", "--")):
        if len(tl):
            ax.plot(tl["time_s"], tl["kv_used_tokens"], style, label=name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV tokens in use")
    _legend_or_none(ax, "no KV use recorded")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Offline validation: simulated records against a recording's, overall and per load stage

STATS = ("mean", "p50", "p90", "p99")
"""The statistics of every latency metric an offline comparison reports."""

LATENCY_METRICS = ("ttft_s", "tpot_s", "e2e_s")

STAGE_COLUMNS = ("stage", "metric", "simulated", "measured", "rel_error")
"""Columns of :func:`compare_recorded`'s table."""

OVERALL = "all"
"""The stage label of the whole run."""


def latency_stats(records: pd.DataFrame,
                  stages: npt.NDArray[np.object_] | None = None) -> dict[str, float]:
    """Mean, p50, p90 and p99 of TTFT, TPOT and E2E over the completed rows of a records
    table (``ttft_mean_s``, ``ttft_p50_s``, ...), output tokens per second (completed output
    over first arrival to last finish; with ``stages``, a label per row, over the time any
    stage ran: the union of each stage's first arrival to last finish, so the idle time
    between a load tool's stages, copied from the recording into the simulation, does not
    count) and ``completed``; NaN where undefined."""
    done = records[records["status"] == "completed"]
    out: dict[str, float] = {}
    for metric in LATENCY_METRICS:
        stem = metric[: -len("_s")]
        v = done[metric].to_numpy(dtype=np.float64)
        v = v[np.isfinite(v)]
        for stat in STATS:
            if not v.size:
                out[f"{stem}_{stat}_s"] = math.nan
            elif stat == "mean":
                out[f"{stem}_{stat}_s"] = float(v.mean())
            else:
                out[f"{stem}_{stat}_s"] = float(np.percentile(v, float(stat[1:])))
    span = _busy_span(records, stages)
    tokens = float(done["output_tokens"].sum())
    out["output_tokens_per_s"] = tokens / span if span > 0 else math.nan
    out["completed"] = float(len(done))
    return out


def _busy_span(records: pd.DataFrame, stages: npt.NDArray[np.object_] | None) -> float:
    """Seconds from the first arrival to the last completed finish, of each stage apart
    (``stages``) and their union."""
    labels = np.zeros(len(records), dtype=object) if stages is None else stages
    done = (records["status"] == "completed").to_numpy()
    arrival = records["arrival_s"].to_numpy(dtype=np.float64)
    finished = records["finished_s"].to_numpy(dtype=np.float64)
    spans = []
    for label in dict.fromkeys(labels.tolist()):
        sel = labels == label
        ends = finished[sel & done]
        ends = ends[np.isfinite(ends)]
        if ends.size:
            spans.append((float(arrival[sel].min()), float(ends.max())))
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        start = max(start, reach)
        if end > start:
            total += end - start
        reach = max(reach, end)
    return total


def offered_rate_stages(arrival_s: npt.NDArray[np.float64], *, min_requests: int = 30
                        ) -> list[str]:
    """Split a run into windows of constant offered rate; a label per request.

    The run is cut into about ``n / 10`` equal time bins (at most 100); a bin whose arrival
    count is more than three Poisson standard deviations from the current window's mean count
    per bin starts a new window, provided both sides keep ``min_requests`` requests. One
    window gives every request the label ``all``; several are labelled ``"k: R req/s"``.
    """
    n = len(arrival_s)
    if n < 2 * min_requests:
        return [OVERALL] * n
    t0, t1 = float(arrival_s[0]), float(arrival_s[-1])
    if not t1 > t0:
        return [OVERALL] * n
    num_bins = int(min(100, max(4, n // 10)))
    edges = np.linspace(t0, t1, num_bins + 1)
    bins = np.clip(np.searchsorted(edges, arrival_s, side="right") - 1, 0, num_bins - 1)
    counts = np.bincount(bins, minlength=num_bins)
    starts = [0]
    total = 0
    width = 0
    remaining = n
    for b in range(num_bins):
        c = int(counts[b])
        if width:
            mean = total / width
            if (abs(c - mean) > 3 * math.sqrt(max(mean, 1.0)) and total >= min_requests
                    and remaining >= min_requests):
                starts.append(b)
                total = width = 0
        total += c
        width += 1
        remaining -= c
    if len(starts) == 1:
        return [OVERALL] * n
    window_of_bin = np.searchsorted(np.array(starts), np.arange(num_bins), side="right") - 1
    window = window_of_bin[bins]
    labels = []
    bin_width = (t1 - t0) / num_bins
    for k, b0 in enumerate(starts):
        b1 = starts[k + 1] if k + 1 < len(starts) else num_bins
        rate = float(counts[b0:b1].sum()) / (bin_width * (b1 - b0))
        labels.append(f"{k}: {rate:.3g} req/s")
    return [labels[w] for w in window.tolist()]


def same_requests(simulated: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """The simulated records of ``measured``'s requests (joined on ``request_id``, in its
    order), each latency metric (:data:`LATENCY_METRICS`) NaN where the measured one is NaN
    and others of ``measured`` have it: so each metric is compared over the same requests on
    both sides (a recording's requests that got their whole answer in one read have no
    measured TTFT nor TPOT: :meth:`~kvbudget.results.recording.Recording.records`). A metric
    measured on none of them keeps every simulated figure."""
    sim = simulated.set_index("request_id").loc[measured["request_id"].to_numpy()].reset_index()
    for metric in LATENCY_METRICS:
        have = np.isfinite(measured[metric].to_numpy(dtype=np.float64))
        if have.any() and not have.all():
            sim[metric] = np.where(have, sim[metric].to_numpy(dtype=np.float64), np.nan)
    return sim


def compare_recorded(simulated: pd.DataFrame, measured: pd.DataFrame,
                     stages: Sequence[str] | None = None,
                     rows: npt.NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """Simulated against measured, overall (stage ``all``) and per stage: one row per stage
    and metric of :func:`latency_stats` with the signed relative error.

    ``measured`` is a recording's records table (:meth:`~kvbudget.results.recordings.
    Recording.records`), ``simulated`` the simulation's records of the same workload (joined
    on ``request_id``); ``stages`` labels each measured row, ``rows`` selects the compared ones
    (a hold-out part). Both sides are summarised over the same requests: those measured as
    completed (a simulated one that did not complete counts as not completed), each metric
    over those that measured it (:func:`same_requests`).
    """
    import pandas as pd

    mask = np.ones(len(measured), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    labels = np.array([OVERALL] * len(measured) if stages is None else list(stages),
                      dtype=object)
    keep = mask & (measured["status"] == "completed").to_numpy()
    groups: list[tuple[str, npt.NDArray[np.bool_]]] = [(OVERALL, keep)]
    for label in dict.fromkeys(labels[keep].tolist()):
        if label != OVERALL:
            groups.append((str(label), keep & (labels == label)))
    out = []
    for label, sel in groups:
        meas = measured[sel]
        s = same_requests(simulated, meas)
        parts = labels[sel] if label == OVERALL and stages is not None else None
        mv, sv = latency_stats(meas, parts), latency_stats(s, parts)
        for metric in mv:
            out.append((label, metric, sv[metric], mv[metric], rel_error(sv[metric], mv[metric])))
    return pd.DataFrame(out, columns=list(STAGE_COLUMNS))


FEW_FOR_P99 = 100
"""A p99 over this many values or fewer lies between the two largest (``np.percentile``'s
linear interpolation, as vLLM's and GuideLLM's summaries take it: position ``0.99 (n - 1)``
is past ``n - 2`` while ``n <= 100``); a p90 likewise over 10 or fewer."""

_METRIC_WORDS = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}


def _compared(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_]:
    """The requests a comparison is over: completed, and of ``rows`` where given."""
    keep = (measured["status"] == "completed").to_numpy()
    return keep if rows is None else keep & np.asarray(rows, dtype=bool)


def metric_counts(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None
                  ) -> dict[str, int]:
    """How many requests each of TTFT, TPOT and E2E is compared over (``compare_recorded``'s:
    completed, of ``rows``, the metric measured: a request whose answer the client read whole
    has no TTFT or TPOT), ``{"ttft_s": n, ...}``."""
    keep = _compared(measured, rows)
    return {metric: int((keep & np.isfinite(measured[metric].to_numpy(dtype=np.float64))).sum())
            for metric in _METRIC_WORDS}


def counts_said(counts: dict[str, int]) -> str:
    """``TTFT and TPOT over 5 requests, E2E over 20 requests``: :func:`metric_counts` in
    words, metrics over the same count said together."""
    by_count: dict[int, list[str]] = {}
    for metric, n in counts.items():
        by_count.setdefault(n, []).append(_METRIC_WORDS.get(metric, metric))
    return ", ".join(_and(words) + f" over {counted(n, 'request')}"
                     for n, words in by_count.items())


def few_requests_said(measured: pd.DataFrame, stages: Sequence[str] | None = None,
                      rows: npt.NDArray[np.bool_] | None = None) -> str | None:
    """The line under a comparison whose p99s (or p90s) rest on so few requests that they are
    about the maximum, which one request moves (:data:`FEW_FOR_P99`): how many each metric's
    figures are over (``compare_recorded``'s requests: completed, ``rows``, each metric's
    measured ones) and a load stage's fewest; None where every one has more."""
    keep = _compared(measured, rows)
    labels = np.array([OVERALL] * len(measured) if stages is None else list(stages), dtype=object)
    counts, fewest = {}, math.inf
    for metric in _METRIC_WORDS:
        have = keep & np.isfinite(measured[metric].to_numpy(dtype=np.float64))
        if have.any():
            counts[metric] = int(have.sum())
            fewest = min([fewest, *(int((have & (labels == s)).sum())
                                    for s in dict.fromkeys(labels[have].tolist()))])
    if not counts or fewest > FEW_FOR_P99:
        return None
    stage = (f", a load stage's over as few as {int(fewest):,}"
             if fewest < min(counts.values()) else "")
    return (f"few requests: {counts_said(counts)}{stage}: a p99 over {FEW_FOR_P99} or fewer lies between the "
            "two largest values (a p90 over 10 or fewer too), about the maximum, which one "
            "request moves")


def _and(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
