"""Every file under ../shared/traces/ loads and matches the statistics in its SOURCES.md table.

The expected numbers are read from the table in ``shared/traces/SOURCES.md`` itself; a value
printed with d decimals is compared with a tolerance of half a unit in its last digit.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pytest

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.stats import time_summary, token_summary
from kvbudget.workloads.traces import TraceOptions, load_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
TRACES = SHARED / "traces"
SOURCES = TRACES / "SOURCES.md"

pytestmark = pytest.mark.skipif(not SOURCES.exists(), reason="shared trace data not present")


def _number(text: str) -> tuple[float, float]:
    """A printed number and half a unit of its last digit."""
    text = text.strip().replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return float(text), 0.5 * 10**-decimals + 1e-12


def _table() -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    header: list[str] | None = None
    for line in SOURCES.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if set(cells[0]) <= {"-", ":"}:
            continue
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


TABLE = _table() if SOURCES.exists() else {}
PER_REQUEST = [name for name in TABLE if not name.startswith("servegen")]


def test_table_lists_the_shared_files() -> None:
    assert len(PER_REQUEST) == 6
    for name in PER_REQUEST:
        assert (TRACES / name).is_file(), name


def _tokens_with_failures(values: np.ndarray, failed: int) -> np.ndarray:
    # The SOURCES table counts BurstGPT's failed requests (0 request and 0 response tokens) in
    # its statistics; the loader drops them, so add them back as zeros to compare.
    return np.concatenate([values, np.zeros(failed, dtype=np.int64)])


@pytest.mark.parametrize("name", PER_REQUEST)
def test_shared_trace_matches_sources_table(name: str) -> None:
    row = TABLE[name]
    loaded = load_trace(TRACES / name)
    w, report = loaded.workload, loaded.report
    expected_rows, _ = _number(row["rows"])
    assert report.rows_read == expected_rows
    assert report.rows_loaded + report.dropped_rows == report.rows_read == expected_rows
    failed = report.dropped_rows if name.startswith("burstgpt") else 0

    if row["span"] == "lengths only":
        assert not report.timed
        assert row["rate (req/s)"] == "-"
    else:
        assert report.timed
        span_h, tol = _number(row["span"].removesuffix(" h"))
        assert abs(w.span_s / 3600 - span_h) <= tol
        rate, rate_tol = _number(row["rate (req/s)"])
        # The table's rate counts every row of the file (failed ones too) over the span.
        assert abs((report.rows_read - 1) / w.span_s - rate) <= rate_tol
        if not failed:
            summary = time_summary(w.arrival_s)
            assert summary["rate_rps"] is not None
            assert abs(summary["rate_rps"] - rate) <= rate_tol

    for column, label in (("prompt_tokens", "input mean / p50 / p99"),
                          ("output_tokens", "output mean / p50 / p99")):
        values = _tokens_with_failures(getattr(w, column), failed)
        stats = token_summary(values)
        for key, text in zip(("mean", "p50", "p99"), row[label].split("/"), strict=True):
            expected, tol = _number(text)
            got = stats[key]
            assert got is not None
            assert abs(got - expected) <= tol, (column, key, got, expected)


def test_burstgpt_failed_rows_are_dropped_and_counted() -> None:
    # SOURCES.md: "Rows with 0 request and 0 response tokens are failed requests (17 in `_1`,
    # 1 in `_3`)".
    for name, failed, layout in (("burstgpt_slice.csv", 17, "burstgpt_1"),
                                 ("burstgpt3_slice.csv", 1, "burstgpt_3")):
        loaded = load_trace(TRACES / "burstgpt" / name)
        assert loaded.report.format == layout
        assert loaded.report.dropped == (("failed request (0 prompt and 0 output tokens)",
                                          failed),)
        assert loaded.workload.prompt_tokens.min() >= 1
        assert loaded.workload.output_tokens.min() >= 1
        # BurstGPT's README (HPMLL/BurstGPT e92f533b): the failures are the rows whose
        # `Response tokens` are 0; every such row of the real file is dropped as one
        with (TRACES / "burstgpt" / name).open(newline="") as fh:
            marked = sum(row["Response tokens"].strip() in ("0", "0.0")
                         for row in csv.DictReader(fh))
        assert loaded.report.dropped_rows == marked == failed


def test_a_file_of_dropped_rows_says_each_reason_with_its_count(tmp_path: Path) -> None:
    # a recording whose every request timed out said "every row was dropped (3 0 output
    # tokens)": the count ran into the reason
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,0\n1,12,0\n2,9,0\n")
    with pytest.raises(TraceError) as err:
        load_trace(path)
    assert "every row was dropped (0 output tokens: 3 rows)" in str(err.value), err.value


def test_burstgpt_tiers_by_log_type_and_model() -> None:
    path = TRACES / "burstgpt" / "burstgpt_slice.csv"
    loaded = load_trace(path, TraceOptions(
        tier_column="Log Type",
        tier_map={"Conversation log": "interactive", "API log": "batch"}))
    w = loaded.workload
    counts = {name: int((w.tier == i).sum()) for i, name in enumerate(w.tier_names)}
    # The slice has 398 conversation and 2 API rows; all 17 failures are conversation rows.
    assert counts == {"interactive": 398 - 17, "batch": 2}
    by_model = load_trace(path, TraceOptions(
        tier_column="Model", tier_map={"GPT-4": "batch"}, default_tier="interactive"))
    wm = by_model.workload
    assert set(wm.tier_names) == {"interactive", "batch"}
    assert int((wm.tier == wm.tier_names.index("batch")).sum()) <= 80


def test_azure_interarrival_cv_as_documented() -> None:
    # SOURCES.md: code "inter-arrival CV about 13, gaps up to 217 s"; conv "CV about 1.1".
    code = load_trace(TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv").workload
    conv = load_trace(TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv").workload
    code_cv = time_summary(code.arrival_s)["interarrival_cv"]
    conv_cv = time_summary(conv.arrival_s)["interarrival_cv"]
    assert code_cv is not None and conv_cv is not None
    assert 12.5 <= code_cv <= 13.5
    assert 1.05 <= conv_cv <= 1.15
    assert 216.5 <= float(np.diff(code.arrival_s).max()) <= 217.5
    assert code.arrival_s[0] == 0.0
    assert code.meta["format"] == "azure2023"


def test_mooncake_prefix_hashes() -> None:
    loaded = load_trace(TRACES / "mooncake" / "synthetic_trace.jsonl")
    w = loaded.workload
    assert w.prefix_hashes is not None and w.prefix_offsets is not None
    assert w.prefix_block_tokens == 512
    blocks = np.diff(w.prefix_offsets)
    # SOURCES.md: len(hash_ids) == ceil(input_length / 512).
    assert np.array_equal(blocks, np.ceil(w.prompt_tokens / 512).astype(np.int64))
    # "64% of blocks repeat an earlier block here".
    hashes = w.prefix_hashes
    _, first = np.unique(hashes, return_index=True)
    repeated = 1 - len(first) / len(hashes)
    assert abs(repeated - 0.64) < 0.005
    assert w.prefix_of(0)[:3] == (0, 1, 2)


def test_mooncake_equal_timestamps_spread() -> None:
    path = TRACES / "mooncake" / "synthetic_trace.jsonl"
    plain = load_trace(path).workload
    spread = load_trace(path, TraceOptions(spread_s=0.5)).workload
    assert len(np.unique(plain.arrival_s)) < len(plain)
    assert len(np.unique(spread.arrival_s)) == len(spread)
    assert np.all(np.diff(spread.arrival_s) >= 0)
    # File order within a bucket is kept, and nothing moves past the next timestamp.
    assert np.array_equal(spread.request_id, plain.request_id)
    assert np.all(spread.arrival_s - plain.arrival_s < 0.5)


SERVEGEN = TRACES / "servegen" / "language" / "m-large"


@pytest.mark.parametrize("chunk", [34, 143])
def test_servegen_chunk_window_matches_recorded_rates(chunk: int) -> None:
    trace = SERVEGEN / f"chunk-{chunk}-trace.csv"
    windows = np.loadtxt(trace, delimiter=",", usecols=(0, 1))
    # 14 days of 600 s windows (SOURCES.md: "per 600 s window over 14 days").
    assert len(windows) == 14 * 24 * 6
    start, end = 6 * 3600.0, 8 * 3600.0
    inside = (windows[:, 0] >= start) & (windows[:, 0] < end)
    expected = float((windows[inside, 1] * 600).sum())
    for mode in ("fitted_rate", "rate_cv"):
        loaded = load_trace(trace, TraceOptions(window=(start, end), servegen_arrivals=mode,
                                                seed=chunk))
        w = loaded.workload
        assert loaded.report.rows_read == len(windows)
        assert w.tier_names == (f"client-{chunk}",)
        assert w.arrival_s.min() >= 0 and w.arrival_s.max() < end - start
        # Bursty windows (CV up to ~17) make counts noisy: allow 10%.
        assert abs(len(w) - expected) <= 0.10 * expected, (mode, len(w), expected)
        assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1


def test_servegen_directory_maps_clients_to_tiers() -> None:
    loaded = load_trace(SERVEGEN, TraceOptions(window=(0, 600), tier_map={
        "34": "interactive", "143": "batch"}))
    w = loaded.workload
    assert set(w.tier_names) == {"interactive", "batch"}
    assert loaded.report.rows_read == 2 * 2016
    same = load_trace(SERVEGEN / "chunk-34-dataset.json", TraceOptions(window=(0, 600)))
    assert same.workload.tier_names == ("client-34",)


def test_servegen_lengths_follow_the_pmf() -> None:
    import ast
    import json

    dataset = json.loads((SERVEGEN / "chunk-34-dataset.json").read_text())
    pmf = ast.literal_eval(dataset["0"]["input_tokens"])
    mean = sum(k * p for k, p in pmf.items())
    w = load_trace(SERVEGEN / "chunk-34-trace.csv", TraceOptions(window=(0, 3600))).workload
    # ~23k draws: the sample mean is within a few percent of the PMF's mean.
    assert abs(w.prompt_tokens.mean() - mean) / mean < 0.05


def test_bench_workloads_load_as_generic() -> None:
    for path in sorted((SHARED / "bench").glob("*.jsonl")):
        loaded = load_trace(path)
        w = loaded.workload
        n = int(re.search(r"_n(\d+)_", path.name).group(1))  # type: ignore[union-attr]
        rate = int(re.search(r"_q(\d+)", path.name).group(1))  # type: ignore[union-attr]
        assert loaded.report.format == "generic-jsonl"
        assert len(w) == n
        assert np.array_equal(w.request_id, np.arange(n))
        est = (n - 1) / w.span_s
        assert abs(est - rate) < 5 * rate / math.sqrt(n)


def test_azure_2023_clock_as_vidur_processed_it() -> None:
    """microsoft/vidur's ``data/processed_traces/splitwise_{conv,code}.csv`` (commit 7d47513)
    are the Azure 2023 traces with ``arrived_at`` in seconds from the first request: its first
    rows, ``0.0,374,44 / 4.314579,396,109 / 4.541877,879,55 / 4.710427,91,16 /
    5.8926549999999995,91,16`` (conv) and ``0.0,4808,10 / 0.052,3180,8 / 0.098189,110,27``
    (code), and 19,366 conv rows. The shared Azure files, read as the azure format (their
    wall-clock TIMESTAMP rebased to the first request), give the same seconds and tokens."""
    vidur = {
        "AzureLLMInferenceTrace_conv.csv": [(0.0, 374, 44), (4.314579, 396, 109),
                                            (4.541877, 879, 55), (4.710427, 91, 16),
                                            (5.8926549999999995, 91, 16)],
        "AzureLLMInferenceTrace_code.csv": [(0.0, 4808, 10), (0.052, 3180, 8),
                                            (0.098189, 110, 27)],
    }
    for name, rows in vidur.items():
        w = load_trace(TRACES / "azure_llm_2023" / name).workload
        k = len(rows)
        assert np.allclose(w.arrival_s[:k], [r[0] for r in rows], rtol=0, atol=1e-9), name
        assert w.prompt_tokens[:k].tolist() == [r[1] for r in rows]
        assert w.output_tokens[:k].tolist() == [r[2] for r in rows]
    assert len(load_trace(TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv")
               .workload) == 19_366


def test_a_burstgpt_window_is_the_traces_own_hours() -> None:
    """The shared BurstGPT_3 slice starts 19,440,110 s after its first day's midnight (day
    225, 0:01:50): the window of its day's first hour, 19,440,000 to 19,443,600, holds its
    requests before 1:00; before, it counted from the first request and held none of them
    (the trace 'spans 0 to 41,453 s'), while the window 0 to 3600 was taken as the slice's
    first hour."""
    path = TRACES / "burstgpt" / "burstgpt3_slice.csv"
    with path.open(newline="") as fh:
        stamps = np.array([float(r["Timestamp"]) for r in csv.DictReader(fh)])
    day = 225 * 86_400.0
    windowed = load_trace(path, TraceOptions(window=(day, day + 3600.0)))
    inside = np.sort(stamps[(stamps >= day) & (stamps < day + 3600.0)])
    # the failed rows (0 response tokens) are dropped, as without a window
    whole = load_trace(path).workload.arrival_s + stamps.min()
    kept = np.sort(whole[(whole >= day) & (whole < day + 3600.0)])
    assert 0 < len(kept) <= len(inside) and len(windowed.workload) == len(kept)
    assert np.allclose(windowed.workload.arrival_s, kept - day)
    with pytest.raises(TraceError, match=r"field 'window': the window \[0, 3,600\) s holds no "
                       r"requests \(the trace spans 19,440,110 to 19,481,563 s on the file's "
                       r"own clock"):
        load_trace(path, TraceOptions(window=(0.0, 3600.0)))
