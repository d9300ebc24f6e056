"""A generic records file whose times are in another unit than its columns say, or whose rows
were copied twice: refused, or said. Real measured runs (shared/measured, vLLM 0.19.0 on real
GPUs) beside hand-made edge cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

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
