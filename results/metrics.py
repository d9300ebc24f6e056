"""Summary metrics over the records and timeline tables (simulated or measured alike).

Pure functions over columns; no engine, no SimPy. ``summarize`` produces the ``summary.json``
shape: an overall block, one block per tier, and KV figures.

Rates (``output_tokens_per_s``, ``goodput_rps``) count what completed, divided by the offered
window: arrival of the first request to arrival of the last (``offered_window_s``; the whole
run when every request arrives at once). ``sustained_output_tokens_per_s`` divides the same
tokens by the time the work took, first arrival to last finish (``duration_s``): what the
engine sustained, the figure ``vllm bench serve`` reports as output token throughput (tokens
over the benchmark's duration). Beyond capacity the offered-window rate overstates it. ``drain_s`` is what the run took after the last
arrival, ``duration_s`` the two together.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.policies import TierConfig
from kvbudget.results.records import STATUSES

CLIENT_STATUSES = frozenset({"client_timeout"})
"""Statuses only a run with client models can have (shown only in such runs' summaries)."""
CLIENT_SUMMARY_KEYS: tuple[str, ...] = (
    "num_attempts",
    "retry_amplification",
    "eventual_completion",
    "first_attempt_completion",
    "time_to_eventual_completion_s",
    "retried_completion_s",
    "goodput_first_attempt_rps",
)
"""Keys added to every summary block (overall and per tier) of a run whose clients are
modelled: attempts sent in all; ``retry_amplification`` = attempts per offered request;
``eventual_completion`` = completed / offered, whatever the attempts it took;
``first_attempt_completion``: those completed on their first attempt / offered;
``time_to_eventual_completion_s``: quantiles of first arrival to last token over the completed
(the users' E2E); ``retried_completion_s``: the same over those that needed a retry;
``goodput_first_attempt_rps``: goodput counting only first-attempt completions (``goodput_rps``
counts the ones retries rescued too)."""

FloatArray = npt.NDArray[np.float64]
QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
_FACTORIZE_CHUNK = 1 << 16


def _float(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def quantiles(values: FloatArray) -> dict[str, float | None]:
    """Mean, p50, p90, p99 of the finite values (None where there are none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"mean": None, **dict.fromkeys(QUANTILES)}
    mean = float(v.mean())
    v.sort()
    return {"mean": mean, **{k: percentile_of_sorted(v, q) for k, q in QUANTILES.items()}}


def percentile_of_sorted(v: FloatArray, q: float) -> float:
    """``np.percentile(v, q)`` of a sorted, non-empty array of finite values, by the same float
    operations as numpy's default ("linear") method. np.percentile's first call in a process
    imports numpy.ma (~12 ms), and sorting once serves the three quantiles."""
    last = v.size - 1
    virtual = last * (q / 100)
    if virtual >= last:
        return float(v[last])
    lo = math.floor(virtual)
    return _lerp(float(v[lo]), float(v[lo + 1]), virtual - lo)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's linear interpolation between neighbours (``numpy._lerp``'s operations)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def weighted_quantiles(values: FloatArray, counts: npt.NDArray[np.int64]) -> dict[str, float | None]:
    """:func:`quantiles` of the multiset holding ``counts[j]`` copies of ``values[j]``, without
    expanding it: the percentiles are exactly ``np.percentile`` of the expanded values (the
    same neighbours, the same interpolation); the mean is their weighted sum over their
    number (to rounding)."""
    keep = (counts > 0) & np.isfinite(values)
    v, c = values[keep], counts[keep].astype(np.int64)
    if v.size == 0:
        return {"mean": None, **dict.fromkeys(QUANTILES)}
    if v.size > 1 and not bool((v[1:] >= v[:-1]).all()):
        # (timsort: a few sorted runs, as the tiers of a token-gaps table are, merge in O(n))
        order = np.argsort(v, kind="stable")
        v, c = v[order], c[order]
    cum = np.cumsum(c)  # values[j] fills the expanded positions cum[j - 1] .. cum[j] - 1
    total = int(cum[-1])
    mean = float(np.sum(v * c)) / total

    def at(position: int) -> float:
        return float(v[int(np.searchsorted(cum, position, side="right"))])

    out: dict[str, float | None] = {"mean": mean}
    last = total - 1
    for key, q in QUANTILES.items():
        virtual = last * (q / 100)
        if virtual >= last:
            out[key] = float(v[-1])
            continue
        lo = math.floor(virtual)
        out[key] = _lerp(at(lo), at(lo + 1), virtual - lo)
    return out


def aggregate_token_gaps(
    tier_code: npt.NDArray[np.integer[Any]], tier_names: Sequence[str], gap_s: FloatArray,
    num_gaps: npt.NDArray[np.int64],
) -> dict[str, Any]:
    """The token-gaps table (:data:`kvbudget.results.records.TOKEN_GAP_COLUMNS`) of gap rows
    (``num_gaps[j]`` gaps of ``gap_s[j]`` in tier ``tier_names[tier_code[j]]``): one row per
    distinct (tier, gap), sorted by tier name then gap, rows with no gap dropped."""
    names = sorted(set(tier_names))
    rank = np.array([names.index(t) for t in tier_names], dtype=np.int64)
    codes = (rank[np.asarray(tier_code, dtype=np.int64)] if len(gap_s)
             else np.zeros(0, np.int64))
    codes, gap, num = merge_gap_rows(codes, gap_s, num_gaps, len(names))
    return {
        # (sorted by tier: each name repeated, cheaper than gathering objects row by row)
        "tier": np.repeat(np.array(names, dtype=object),
                          np.bincount(codes, minlength=len(names))) if names else np.zeros(
            0, dtype=object),
        "gap_s": gap,
        "num_gaps": num,
    }


def merge_gap_rows(
    codes: npt.NDArray[np.int64], gap_s: FloatArray, num_gaps: npt.NDArray[np.int64],
    num_codes: int,
) -> tuple[npt.NDArray[np.int64], FloatArray, npt.NDArray[np.int64]]:
    """Gap rows (``num_gaps[j]`` gaps of ``gap_s[j]`` in group ``codes[j]``, ``0 <= codes <
    num_codes``) with the rows of equal (code, gap) merged into one (their numbers added) and
    rows with no gap dropped, sorted by code, then gap. Merging rows first, in any grouping,
    gives the same result in the end (a fleet merges each replica's before they are joined)."""
    gap = np.asarray(gap_s, dtype=np.float64)
    num = np.asarray(num_gaps, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int64)
    keep = num > 0
    if not keep.all():
        codes, gap, num = codes[keep], gap[keep], num[keep]
    # by code, then by gap within each (equal gaps merge, in any order)
    if num_codes > 1:
        parts = []
        for code in range(num_codes):
            rows = np.flatnonzero(codes == code)
            parts.append(rows[_argsort_gaps(gap[rows])])
        order = np.concatenate(parts)
    else:
        order = _argsort_gaps(gap)
    codes, gap, num = codes[order], gap[order], num[order]
    del order
    if gap.size:
        new = np.ones(gap.size, np.bool_)
        new[1:] = (codes[1:] != codes[:-1]) | (gap[1:] != gap[:-1])
        starts = np.flatnonzero(new)
        del new
        codes, gap, num = codes[starts], gap[starts], np.add.reduceat(num, starts)
    return codes, gap, num.astype(np.int64)


SORTED_RUNS_FROM = 64
"""Rows at least this many times as many as their descents are a few sorted runs."""


def _argsort_gaps(gap: FloatArray) -> npt.NDArray[np.intp]:
    """An order that sorts ``gap``. Rows that are a few sorted runs one after another (a
    fleet's replicas' merged rows, joined) take the stable sort, which merges the runs (~3.5x
    faster than quicksort on 8 runs of 12,000 gaps); others take the default quicksort, faster
    on unsorted rows (~2x on 30,000). Equal gaps merge, so either order gives the same rows."""
    if gap.size > 1 and SORTED_RUNS_FROM * np.count_nonzero(gap[1:] < gap[:-1]) < gap.size:
        return np.argsort(gap, kind="stable")
    return np.argsort(gap)


def _percentile(values: FloatArray, q: float) -> float:
    """``np.percentile(values, q)`` (NaN for no values)."""
    if values.size == 0:
        return math.nan
    if not np.isfinite(values).all():
        return float(np.percentile(values, q))
    return percentile_of_sorted(np.sort(values), q)


def meets_slo(
    ttft_s: FloatArray, tpot_s: FloatArray, ttft_slo: FloatArray, tpot_slo: FloatArray,
    e2e_s: FloatArray | None = None,
) -> npt.NDArray[np.bool_]:
    """A completed request meets its SLO when TTFT and TPOT are within target (a one-token
    output has no TPOT and is judged on TTFT alone). With ``e2e_s``, a request whose first
    token was not seen (no TTFT: a whole, non-streamed answer through ``kvbudget serve``) is
    judged on its E2E, which bounds its TTFT from above: met when that is within target,
    missed otherwise."""
    if e2e_s is not None:
        ttft_s = np.where(np.isnan(ttft_s), e2e_s, ttft_s)
    ok_ttft = ttft_s <= ttft_slo
    ok_tpot = np.where(np.isnan(tpot_s), True, tpot_s <= tpot_slo)
    return np.asarray(ok_ttft & ok_tpot, dtype=np.bool_)


def factorize(column: Any) -> tuple[npt.NDArray[np.intp], list[str]]:
    """Codes of a column of strings and its sorted distinct values: ``values[codes[i]]`` is
    row i. The strings are compared in C, a chunk of rows at a time (a million records'
    strings as one numpy str array, sorted, would take hundreds of MB); only small integers
    are kept."""
    arr = np.asarray(column)
    index: dict[str, int] = {}  # value -> code in order of first appearance
    parts: list[npt.NDArray[np.intp]] = [np.zeros(0, np.intp)]
    for lo in range(0, len(arr), _FACTORIZE_CHUNK):
        chunk = arr[lo : lo + _FACTORIZE_CHUNK].astype(str)
        values, inverse = np.unique(chunk, return_inverse=True)
        local = [index.setdefault(v, len(index)) for v in values.tolist()]
        parts.append(np.asarray(local, np.intp)[inverse.reshape(-1)])
    names = sorted(index)
    sorted_code = np.zeros(len(names), np.intp)
    for position, name in enumerate(names):
        sorted_code[index[name]] = position
    return sorted_code[np.concatenate(parts)], names


def block(
    cols: Mapping[str, Any],
    mask: npt.NDArray[np.bool_],
    duration_s: float,
    slo_ok: npt.NDArray[np.bool_],
    itl: dict[str, float | None] | None = None,
    busy_s: float | None = None,
) -> dict[str, Any]:
    """One summary block over the rows selected by ``mask``. ``cols["status"]`` and
    ``cols["reason"]`` are (codes, values) pairs from :func:`factorize`; rates are per second
    of ``duration_s`` (the offered window, see the module docstring). ``itl``: the block's
    inter-token latency quantiles (``itl_s``, after ``tpot_s``), when the run has gaps.
    ``busy_s``: first arrival to last finish; adds ``sustained_output_tokens_per_s``."""
    status_codes, status_values = cols["status"]
    status_counts = np.bincount(status_codes[mask], minlength=len(status_values)).tolist()
    by_status = dict(zip(status_values, status_counts, strict=True))
    completed_code = status_values.index("completed") if "completed" in by_status else -1
    completed = status_codes[mask] == completed_code
    out: dict[str, Any] = {"offered": int(mask.sum())}
    with_clients = "num_attempts" in cols
    for s in STATUSES:
        if s in CLIENT_STATUSES and not with_clients:
            continue  # a run without client models has none (and its summary stays as it was)
        out[s] = by_status.get(s, 0)
    reason_codes, reason_values = cols["reason"]
    reason_counts = np.bincount(reason_codes[mask], minlength=len(reason_values)).tolist()
    out["rejections_by_reason"] = {
        r: c for r, c in zip(reason_values, reason_counts, strict=True) if r != "" and c
    }
    out["num_preemptions"] = int(np.asarray(cols["num_preemptions"])[mask].sum())
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        out[metric] = quantiles(np.asarray(cols[metric], dtype=np.float64)[mask][completed])
        if metric == "tpot_s" and itl is not None:
            out["itl_s"] = itl
    out_tokens = np.asarray(cols["output_tokens"])[mask][completed]
    good = slo_ok[mask] & completed
    dur = duration_s if duration_s > 0 else math.nan
    out["output_tokens_per_s"] = _float(float(out_tokens.sum()) / dur)
    if busy_s is not None:
        busy = busy_s if busy_s > 0 else math.nan
        out["sustained_output_tokens_per_s"] = _float(float(out_tokens.sum()) / busy)
    out["goodput_rps"] = _float(float(good.sum()) / dur)
    out["slo_attainment"] = _float(float(good.sum()) / out["offered"]) if out["offered"] else None
    if with_clients:
        out.update(_client_block(cols, mask, completed, good, dur, out["offered"]))
    return out


def _client_block(
    cols: Mapping[str, Any],
    mask: npt.NDArray[np.bool_],
    completed: npt.NDArray[np.bool_],
    good: npt.NDArray[np.bool_],
    dur: float,
    offered: int,
) -> dict[str, Any]:
    """The figures of a run whose clients are modelled (retries, timeouts): see
    :data:`CLIENT_SUMMARY_KEYS`."""
    attempts = np.asarray(cols["num_attempts"], dtype=np.int64)[mask]
    first_try = attempts[completed] == 1
    e2e = np.asarray(cols["e2e_s"], dtype=np.float64)[mask][completed]
    total = int(attempts.sum())
    return {
        "num_attempts": total,
        "retry_amplification": _float(total / offered) if offered else None,
        "eventual_completion": _float(float(completed.sum()) / offered) if offered else None,
        "first_attempt_completion": (
            _float(float(first_try.sum()) / offered) if offered else None
        ),
        "time_to_eventual_completion_s": quantiles(e2e),
        "retried_completion_s": quantiles(e2e[~first_try]),
        "goodput_first_attempt_rps": _float(
            float(np.count_nonzero(good & (attempts == 1))) / dur
        ),
    }


def time_weighted_mean(times: FloatArray, values: FloatArray, end_s: float) -> float:
    """Mean of a step function sampled at ``times`` (each value holds until the next time)."""
    if times.size == 0:
        return math.nan
    edges = np.append(times, max(end_s, float(times[-1])))
    widths = np.diff(edges)
    total = widths.sum()
    if total <= 0:
        return float(values.mean())
    return float((values * widths).sum() / total)


def summarize(
    records: Mapping[str, Any],
    timeline: Mapping[str, Any],
    *,
    tiers: Sequence[TierConfig],
    kv_capacity_tokens: int,
    policy: str,
    seed: int,
    wall_time_s: float,
    kv_token_seconds: tuple[float, float, float] | None = None,
    kv_capacity_token_seconds: float | None = None,
    attempts: Mapping[str, Any] | None = None,
    token_gaps: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` dictionary.

    ``records`` and ``timeline`` are column mappings (a pandas DataFrame works). When the
    executor knows exact KV integrals (the simulator does), pass ``kv_token_seconds =
    (used_token_s, reserved_token_s, duration_s)``; otherwise they come from the timeline.
    The ``kv`` block's fractions are over ``kv_capacity_tokens``, an autoscaled fleet's over
    the capacity serving (``kv_capacity_token_seconds``, the same span's; :func:`_kv_block`).
    Records with a ``num_attempts`` column (clients modelled) add :data:`CLIENT_SUMMARY_KEYS`
    to every block; ``attempts`` (the attempts table) adds an ``attempts`` block: attempts by
    answer, and the Retry-After the refusals carried. ``token_gaps`` (the token-gaps table,
    :data:`kvbudget.results.records.TOKEN_GAP_COLUMNS`) adds ``itl_s`` (inter-token latency:
    mean, p50, p90, p99 of the pooled gaps, as ``vllm bench serve`` reports ITL) to every
    block; without it (a run directory written before it existed) there is none.
    """
    tier_codes, tier_values = factorize(records["tier"])
    arrival = np.asarray(records["arrival_s"], dtype=np.float64)
    finished = np.asarray(records["finished_s"], dtype=np.float64)
    n = arrival.size
    cols = _block_columns(records)
    names = list(dict.fromkeys([t.name for t in tiers] + tier_values))
    code_of = {name: code for code, name in enumerate(tier_values)}
    in_tier = {name: tier_codes == code_of.get(name, -1) for name in names}
    ttft_slo = np.full(n, math.inf)
    tpot_slo = np.full(n, math.inf)
    for t in tiers:
        ttft_slo[in_tier[t.name]] = t.ttft_s
        tpot_slo[in_tier[t.name]] = t.tpot_s
    slo_ok = meets_slo(cols["ttft_s"], cols["tpot_s"], ttft_slo, tpot_slo, cols["e2e_s"])
    if n:
        end = np.nanmax(np.append(finished, arrival.max()))
        duration = float(end - arrival.min())
        offered_window = float(arrival.max() - arrival.min())
    else:
        duration = offered_window = 0.0
    # rates over the offered window (first to last arrival), not the whole run: the time the
    # backlog takes to drain after the last arrival is its own figure (``drain_s``), so a tier
    # that completes the same tokens under two policies shows the same throughput under both
    rate_window = offered_window if offered_window > 0 else duration
    itl = {} if token_gaps is None else _itl_by_tier(token_gaps, names)
    overall = block(cols, np.ones(n, dtype=np.bool_), rate_window, slo_ok, itl.get(""),
                    busy_s=duration)
    per_tier = {name: block(cols, in_tier[name], rate_window, slo_ok, itl.get(name),
                            busy_s=duration)
                for name in names}
    t_end = float(arrival.min()) + duration if n else 0.0
    kv = _kv_block(timeline, t_end, kv_capacity_tokens, kv_token_seconds,
                   kv_capacity_token_seconds)
    summary: dict[str, Any] = {
        "policy": policy,
        "seed": int(seed),
        "kv_capacity_tokens": int(kv_capacity_tokens),
        "wall_time_s": float(wall_time_s),
        "duration_s": duration,
        "offered_window_s": offered_window,
        "drain_s": duration - offered_window,
        "overall": overall,
        "tiers": per_tier,
        "kv": kv,
    }
    if attempts is not None:
        summary["attempts"] = attempts_block(attempts)
    if extra:
        summary.update(extra)
    return summary


def _block_columns(records: Mapping[str, Any]) -> dict[str, Any]:
    """The columns :func:`block` reads, converted once (strings to small integer codes: a
    million records' strings as numpy str arrays would take hundreds of MB)."""
    cols: dict[str, Any] = {
        "status": factorize(records["status"]),
        "reason": factorize(records["reason"]),
        "num_preemptions": np.asarray(records["num_preemptions"]),
        "output_tokens": np.asarray(records["output_tokens"]),
        **{m: np.asarray(records[m], dtype=np.float64) for m in ("ttft_s", "tpot_s", "e2e_s")},
    }
    if "num_attempts" in records:
        cols["num_attempts"] = np.asarray(records["num_attempts"], dtype=np.int64)
    return cols


def _itl_by_tier(token_gaps: Mapping[str, Any], names: list[str]
                 ) -> dict[str, dict[str, float | None]]:
    """The pooled inter-token gaps' statistics, overall (key ``""``) and per tier."""
    gap_tier = np.asarray(token_gaps["tier"], dtype=object)
    gap_s = np.asarray(token_gaps["gap_s"], dtype=np.float64)
    num_gaps = np.asarray(token_gaps["num_gaps"], dtype=np.int64)
    itl = {"": weighted_quantiles(gap_s, num_gaps)}
    # the table's rows are grouped by tier: compare the strings once, at the boundaries
    cuts: list[int] = (
        (np.flatnonzero(gap_tier[1:] != gap_tier[:-1]) + 1).tolist() if gap_tier.size else [])
    bounds = [0, *cuts, int(gap_tier.size)]
    runs: dict[str, list[tuple[int, int]]] = {}
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            runs.setdefault(str(gap_tier[lo]), []).append((lo, hi))
    for name, parts in runs.items():
        if len(parts) == 1:
            lo, hi = parts[0]
            itl[name] = weighted_quantiles(gap_s[lo:hi], num_gaps[lo:hi])
        else:  # not grouped by tier (a table not made by aggregate_token_gaps)
            mine = gap_tier == name
            itl[name] = weighted_quantiles(gap_s[mine], num_gaps[mine])
    for name in names:
        itl.setdefault(name, weighted_quantiles(gap_s[:0], num_gaps[:0]))
    return itl


def _kv_block(timeline: Mapping[str, Any], t_end: float, kv_capacity_tokens: int,
              kv_token_seconds: tuple[float, float, float] | None,
              capacity_token_seconds: float | None = None) -> dict[str, Any]:
    """The summary's ``kv`` block: exact integrals when given, else the timeline's; its
    fractions over the capacity, except an autoscaled fleet's (a timeline with
    ``num_replicas_up``), whose capacity comes and goes: theirs are over the capacity serving
    (up or draining replicas), token-seconds used over token-seconds held, as
    ``capacity_token_seconds`` (over the same span) or the timeline's ``kv_capacity_tokens``
    gives it, and the block gains ``capacity_mean_tokens``."""
    t_times = np.asarray(timeline["time_s"], dtype=np.float64)
    used = np.asarray(timeline["kv_used_tokens"], dtype=np.float64)
    reserved = np.asarray(timeline["kv_reserved_tokens"], dtype=np.float64)
    autoscaled = "num_replicas_up" in timeline
    capacity_mean: float = kv_capacity_tokens
    if kv_token_seconds is not None:
        used_ts, reserved_ts, span = kv_token_seconds
        used_mean = used_ts / span if span > 0 else math.nan
        reserved_mean = reserved_ts / span if span > 0 else math.nan
        efficiency = used_ts / reserved_ts if reserved_ts > 0 else math.nan
        if autoscaled and capacity_token_seconds is not None:
            capacity_mean = capacity_token_seconds / span if span > 0 else math.nan
    else:
        used_mean = time_weighted_mean(t_times, used, t_end)
        reserved_mean = time_weighted_mean(t_times, reserved, t_end)
        efficiency = used_mean / reserved_mean if reserved_mean > 0 else math.nan
    if autoscaled and (kv_token_seconds is None or capacity_token_seconds is None):
        capacity = np.asarray(timeline["kv_capacity_tokens"], dtype=np.float64)
        capacity_mean = time_weighted_mean(t_times, capacity, t_end)
    return {
        "used_mean": _float(used_mean),
        "used_p99": _float(_percentile(used, 99.0)),
        "reserved_mean": _float(reserved_mean),
        "reservation_efficiency": _float(efficiency),
        "used_mean_fraction": _float(used_mean / capacity_mean),
        "reserved_mean_fraction": _float(reserved_mean / capacity_mean),
        **({"capacity_mean_tokens": _float(capacity_mean)} if autoscaled else {}),
    }


def attempts_block(attempts: Mapping[str, Any]) -> dict[str, Any]:
    """Attempts by answer, and the Retry-After figures of the refusals that carried one."""
    answer_codes, answer_values = factorize(attempts["answer"])
    counts = np.bincount(answer_codes, minlength=len(answer_values)).tolist()
    after = np.asarray(attempts["retry_after_s"], dtype=np.float64)
    return {
        "num_attempts": len(answer_codes),
        "by_answer": {a: c for a, c in zip(answer_values, counts, strict=True) if c},
        "num_retry_after": int(np.count_nonzero(~np.isnan(after))),
        "retry_after_s": quantiles(after),
    }
