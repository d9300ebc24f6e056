"""A generic records file whose times are in another unit than its columns say, or whose rows
were copied twice: refused, or said. Real measured runs (shared/measured, vLLM 0.19.0 on real
GPUs) beside hand-made edge cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.results.recorded_records import MAX_TOKEN_TIME_S, SLOWEST_DECODE_S
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.conftest import SHARED

RUNS = SHARED / "measured" / "llmservingsim_vllm019"


def _light(n: int = 40) -> pd.DataFrame:
    """A lightly loaded run: 150 ms TTFT, 20-30 ms a token, in seconds."""
    rng = np.random.default_rng(0)
    out = rng.integers(50, 300, n)
    ttft = rng.uniform(0.04, 0.2, n)
    return pd.DataFrame(
        {
            "arrival_s": np.arange(n) * 0.5,
            "prompt_tokens": 500,
            "output_tokens": out,
            "ttft_s": ttft,
            "e2e_s": ttft + out * rng.uniform(0.015, 0.03, n),
        }
    )


def test_times_a_thousand_times_too_small_are_refused(tmp_path: Path) -> None:
    """Seconds divided by 1,000 twice (a 25 ms decode step read as 25 us) were read with a
    note that every request got its whole answer at once: validate compared a server a
    thousand times faster, E2E medians of 5 ms for 170 tokens."""
    df = _light()
    df[["ttft_s", "e2e_s"]] /= 1000
    path = tmp_path / "small.csv"
    df.to_csv(path, index=False)
    with pytest.raises(TraceError) as refused:
        read_recording(path)
    said = str(refused.value)
    assert said.startswith(f"{path}: field 'e2e_s': the completed requests took a median ")
    assert "no server generates tokens that fast" in said and "give seconds" in said


def test_the_same_times_in_seconds_read(tmp_path: Path) -> None:
    """And a run whose answers were each read whole (TTFT = E2E, TPOT 0), its E2E a real
    decode's, is read: only the E2E over the tokens is bounded."""
    df = _light()
    path = tmp_path / "s.csv"
    df.to_csv(path, index=False)
    assert len(read_recording(path).workload) == len(df)
    df["ttft_s"] = df["e2e_s"]
    df.to_csv(path, index=False)
    assert len(read_recording(path).workload) == len(df)


def test_a_real_run_in_the_wrong_unit_is_refused(tmp_path: Path) -> None:
    """vLLM 0.19.0 on an RTX PRO 6000 (Llama-3.1-8B, 300 requests): its times divided by 1,000
    (a median 46 us a token, send to end) were read; in milliseconds they are refused too."""
    source = RUNS / "RTXPRO6000_Llama-3.1-8B" / "requests.csv"
    if not source.exists():
        pytest.skip(f"{source} is not there")
    df = pd.read_csv(source)
    assert len(read_recording(source).workload) == 300
    path = tmp_path / "requests.csv"
    small = df.copy()
    small[["ttft_s", "e2e_s"]] /= 1000
    small.to_csv(path, index=False)
    with pytest.raises(TraceError, match="no server generates tokens that fast"):
        read_recording(path)
    large = df.copy()
    large[["ttft_s", "e2e_s"]] *= 1000
    large.to_csv(path, index=False)
    with pytest.raises(TraceError, match="look like milliseconds"):
        read_recording(path)


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_row_written_twice_is_said(tmp_path: Path, suffix: str) -> None:
    """A file without ids whose sixth row was written again at its end was read as one request
    more without a word; with ids the repeat is refused (the trace loader's rule)."""
    df = _light()
    twice = pd.concat([df, df.iloc[[5]]], ignore_index=True)
    path = tmp_path / f"twice{suffix}"
    if suffix == ".csv":
        twice.to_csv(path, index=False)
    else:
        twice.to_json(path, orient="records", lines=True)
    rec = read_recording(path)
    first = 7 if suffix == ".csv" else 6
    last = len(twice) + (1 if suffix == ".csv" else 0)
    said = [n for n in rec.notes if "repeats another in every column read" in n]
    assert said and f"the first, line {last}, repeats line {first}" in said[0], rec.notes
    assert not [n for n in read_recording(_write(tmp_path, df)).notes if "repeat" in n]
    ids = twice.assign(id=[*range(len(df)), 5])
    ids.to_csv(path.with_suffix(".csv"), index=False)
    with pytest.raises(TraceError, match="duplicate id 5"):
        read_recording(path.with_suffix(".csv"))


def _write(tmp_path: Path, df: pd.DataFrame) -> Path:
    path = tmp_path / "once.csv"
    df.to_csv(path, index=False)
    return path


def _per_token(tmp_path: Path, token_s: float) -> Path:
    """A run in seconds whose requests each took ``token_s`` a token after the first."""
    df = _light(20)
    df["e2e_s"] = df["ttft_s"] + (df["output_tokens"] - 1) * token_s
    return _write(tmp_path, df)


def test_a_gpu_servers_milliseconds_are_refused_and_its_seconds_read(tmp_path: Path) -> None:
    """A GPU server decoding 2 to 20 ms a token, its times in milliseconds in the seconds
    columns (2 to 20 s a token), is refused: a bound of the slowest server published (10 s a
    token, a Raspberry Pi) let it read as a server a thousand times slower. The same file in
    seconds reads, and so does the slowest GPU median measured here (84 ms) with room."""
    assert MAX_TOKEN_TIME_S == 2.0 < SLOWEST_DECODE_S
    for token_s in (0.084, 0.5, 0.95 * MAX_TOKEN_TIME_S):
        assert len(read_recording(_per_token(tmp_path, token_s)).workload) == 20
    for token_s in (1.05 * MAX_TOKEN_TIME_S, 7.0, 19.0, 2.65):
        with pytest.raises(TraceError) as refused:
            read_recording(_per_token(tmp_path, token_s))
    said = str(refused.value)
    assert "over 2 s, slower than any GPU server decodes" in said
    assert "'e2e_s' look like milliseconds" in said
    assert "llama.cpp on a Raspberry Pi at 10 s a token; kvbudget does not simulate one" in said
    doc = " ".join(
        (Path(__file__).resolve().parents[3] / "docs" / "recordings.md").read_text().split()
    )
    assert "over 2 s per output token after the first, slower than any GPU server decodes" in doc
    assert "a millisecond file of a GPU server decoding at 2 ms a token or slower is told" in doc


@pytest.mark.parametrize(("unit", "factor"), [("ms", 1e3), ("us", 1e6), ("ns", 1e9)])
def test_epoch_arrivals_in_a_finer_unit_name_a_way_a_records_file_has(
    tmp_path: Path, unit: str, factor: float
) -> None:
    """Send times in Unix milliseconds (or finer) beside latencies in seconds: the trace
    loader refuses them (no clock in seconds reads past the year 2100) but told a records
    file's user to pass --arrival-unit, which calibrate and validate do not take ("No such
    option") and the records reader would not read. Now it says to write seconds, and so
    written the file reads."""
    df = _light()
    df["arrival_s"] = (1_733_600_000 + df["arrival_s"]) * factor
    path = _write(tmp_path, df)
    with pytest.raises(TraceError) as refused:
        read_recording(path)
    said = str(refused.value)
    assert said.startswith(f"{path}: line 2: field 'arrival_s': the times read as s put the ")
    assert f"(as {unit} since 1970 they fall on 2024-12-07T19:33:20Z)" in said
    assert "--arrival-unit" not in said and "[workload.options]" not in said
    way = {"ms": "1,000", "us": "1,000,000", "ns": "1,000,000,000"}[unit]
    assert said.endswith(f"write them in seconds (divide by {way})")
    df["arrival_s"] /= factor
    assert len(read_recording(_write(tmp_path, df)).workload) == len(df)


def test_the_docs_say_the_records_times_unit() -> None:
    doc = " ".join(
        (Path(__file__).resolve().parents[3] / "docs" / "recordings.md").read_text().split()
    )
    assert "Seconds only: Unix milliseconds, microseconds or nanoseconds" in doc
    assert "milliseconds counted from the run's start cannot be told from seconds" in doc
