"""Inter-token gaps (ITL): the weighted quantiles are numpy's over the expanded gaps, the table
aggregates exactly, and run directories keep it (old ones load without it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.policies import TierConfig
from kvbudget.results.metrics import (
    QUANTILES,
    aggregate_token_gaps,
    merge_gap_rows,
    summarize,
    weighted_quantiles,
)
from kvbudget.results.run_result import TOKEN_GAPS_FILE, RunResult, read_run


def _agg(tiers: list[str], gaps: list[float], nums: list[int]) -> dict[str, Any]:
    """aggregate_token_gaps of rows named by tier (codes in order of first appearance, so
    not sorted by name)."""
    names = list(dict.fromkeys(tiers))
    return aggregate_token_gaps(np.array([names.index(t) for t in tiers], np.int64), names,
                                np.array(gaps, np.float64), np.array(nums, np.int64))


_values = st.one_of(
    st.floats(0.0, 10.0, allow_nan=False),
    st.sampled_from([0.001, 0.025, 0.025000000000000001, 0.1, 1e-9]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_values, st.integers(0, 40)), min_size=1, max_size=30))
def test_weighted_quantiles_are_numpys_percentiles_of_the_expanded_gaps(
    rows: list[tuple[float, int]],
) -> None:
    values = np.array([v for v, _ in rows], dtype=np.float64)
    counts = np.array([c for _, c in rows], dtype=np.int64)
    expanded = np.repeat(values, counts)
    got = weighted_quantiles(values, counts)
    if expanded.size == 0:
        assert got == dict.fromkeys(("mean", "p50", "p90", "p99"))
        return
    for key, q in QUANTILES.items():
        assert got[key] == float(np.percentile(expanded, q)), key
    mean = got["mean"]
    assert mean is not None and math.isclose(mean, float(expanded.mean()), rel_tol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["c", "a", "b"]), _values, st.integers(0, 5)),
                max_size=40))
def test_aggregated_table_holds_the_same_multiset_per_tier(
    rows: list[tuple[str, float, int]],
) -> None:
    tiers = np.array([t for t, _, _ in rows], dtype=object)
    gaps = np.array([g for _, g, _ in rows], dtype=np.float64)
    nums = np.array([n for _, _, n in rows], dtype=np.int64)
    table = _agg(tiers.tolist(), gaps.tolist(), nums.tolist())
    assert (table["num_gaps"] > 0).all()
    keys = list(zip(table["tier"].tolist(), table["gap_s"].tolist(), strict=True))
    assert keys == sorted(set(keys))  # distinct, sorted by tier then gap
    for tier in "abc":
        mine = tiers == tier
        want = np.sort(np.repeat(gaps[mine], nums[mine]))
        t = table["tier"] == tier
        got = np.repeat(table["gap_s"][t], table["num_gaps"][t])
        np.testing.assert_array_equal(got, want)


def _result(gaps: dict[str, object] | None) -> RunResult:
    records = {
        "request_id": np.array([0, 1], np.int64),
        "tier": np.array(["interactive", "batch"], dtype=object),
        "arrival_s": np.array([0.0, 0.5]),
        "prompt_tokens": np.array([10, 10], np.int64),
        "max_output_tokens": np.array([4, 4], np.int64),
        "output_tokens": np.array([3, 2], np.int64),
        "status": np.array(["completed", "completed"], dtype=object),
        "reason": np.array(["", ""], dtype=object),
        "admitted_s": np.array([0.0, 0.5]),
        "first_token_s": np.array([0.1, 0.7]),
        "finished_s": np.array([0.3, 0.9]),
        "ttft_s": np.array([0.1, 0.2]),
        "tpot_s": np.array([0.1, 0.2]),
        "e2e_s": np.array([0.3, 0.4]),
        "num_preemptions": np.array([0, 0], np.int64),
        "reserved_tokens": np.array([14, 14], np.int64),
    }
    timeline = {c: np.zeros(0) for c in ("time_s", "kv_used_tokens", "kv_reserved_tokens",
                                         "kv_capacity_tokens", "num_running", "num_waiting",
                                         "num_preemptions")}
    tiers = [TierConfig("interactive", ttft_s=1.0, tpot_s=1.0),
             TierConfig("batch", ttft_s=1.0, tpot_s=1.0)]
    summary = summarize(records, timeline, tiers=tiers, kv_capacity_tokens=100, policy="x",
                        seed=0, wall_time_s=0.0, token_gaps=gaps)
    return RunResult(records, timeline, summary, None, gaps)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.01, 0.02, 0.025, 0.1, 1e-9, 3.0]),
                       st.integers(0, 4)), max_size=60),
    st.integers(1, 5),
    st.floats(0.0, 1e-3),
)
def test_merging_in_parts_first_gives_the_same_table(
    rows: list[tuple[int, float, int]], num_parts: int, per_token_s: float
) -> None:
    """What a fleet does: each replica's rows merged first (equal gaps of a tier as one row),
    the parts joined, the front end's per-token cost added, the table aggregated: the same
    table, bit for bit, as aggregating every row with the cost added."""
    names = ["batch", "interactive", "batch"]  # codes 0 and 2 are one tier
    codes = np.array([r[0] for r in rows], np.int64)
    gaps = np.array([r[1] for r in rows], np.float64)
    nums = np.array([r[2] for r in rows], np.int64)
    whole = aggregate_token_gaps(codes, names, gaps + per_token_s, nums)
    parts = [merge_gap_rows(codes[k::num_parts], gaps[k::num_parts], nums[k::num_parts], 3)
             for k in range(num_parts)]
    joined = [np.concatenate([p[j] for p in parts]) for j in range(3)]
    merged = aggregate_token_gaps(joined[0], names, joined[1] + per_token_s, joined[2])
    assert list(merged["tier"]) == list(whole["tier"])
    assert merged["gap_s"].tobytes() == whole["gap_s"].tobytes()
    assert merged["num_gaps"].tobytes() == whole["num_gaps"].tobytes()
    assert merged["num_gaps"].dtype == np.int64


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.0, 0.01, 0.02, 0.025, 0.1, 3.0]),
                       st.integers(0, 4)), max_size=300),
    st.integers(1, 9),
    st.booleans(),
)
def test_either_sort_gives_the_same_rows(rows: list[tuple[int, float, int]], num_runs: int,
                                         runs: bool) -> None:
    """merge_gap_rows sorts rows that are a few sorted runs (a fleet's replicas' merged rows,
    joined) with the stable sort, others with quicksort: both give the same rows, bit for bit,
    on sorted runs and on unsorted rows."""
    from kvbudget.results import metrics

    codes = np.array([r[0] for r in rows], np.int64)
    gaps = np.array([r[1] for r in rows], np.float64)
    nums = np.array([r[2] for r in rows], np.int64)
    if runs:  # num_runs sorted runs one after another, as a fleet joins its replicas' rows
        parts = [merge_gap_rows(codes[k::num_runs], gaps[k::num_runs], nums[k::num_runs], 3)
                 for k in range(num_runs)]
        codes, gaps, nums = (np.concatenate([p[j] for p in parts]) for j in range(3))
    out = []
    for threshold in (0, 10**12):  # always the stable sort; never
        saved = metrics.SORTED_RUNS_FROM
        metrics.SORTED_RUNS_FROM = threshold
        try:
            out.append(merge_gap_rows(codes, gaps, nums, 3))
        finally:
            metrics.SORTED_RUNS_FROM = saved
    for a, b in zip(*out, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_summary_has_itl_beside_tpot_overall_and_per_tier(tmp_path: Path) -> None:
    gaps = _agg(["interactive", "interactive", "batch"], [0.15, 0.05, 0.2], [1, 1, 1])
    r = _result(gaps)
    assert list(r.summary["overall"]).index("itl_s") == list(r.summary["overall"]).index(
        "tpot_s") + 1
    assert r.summary["tiers"]["interactive"]["itl_s"]["p50"] == 0.1
    assert r.summary["tiers"]["batch"]["itl_s"]["p99"] == 0.2
    assert r.summary["overall"]["itl_s"]["p50"] == 0.15
    r.write(tmp_path)
    back = read_run(tmp_path)
    assert back.token_gaps is not None and r.token_gaps is not None
    assert back.token_gaps.equals(r.token_gaps)


def test_run_directory_without_gaps_loads_and_has_no_itl(tmp_path: Path) -> None:
    _result(_agg(["batch"], [0.2], [1])).write(tmp_path)
    plain = _result(None)
    assert "itl_s" not in plain.summary["overall"]
    plain.write(tmp_path)  # a run without gaps replaces one with them: no stale file is left
    assert not (tmp_path / TOKEN_GAPS_FILE).exists()
    back = read_run(tmp_path)
    assert back.token_gaps is None and "itl_s" not in back.summary["overall"]
