"""``validate --records`` / ``calibrate --records`` of a replay's (or ``kvbudget serve``'s) run
directory find the requests whose client read the whole answer at once by the gaps between
their chunks that ``requests.part.jsonl`` keeps (``results/run_parts.py``
``itl_means_of_parts``), as ``validate --url`` finds them in its own run: before, the reader
had only their TPOT, which counts the time after the last chunk too, so an answer read in one
go whose stream ended a few milliseconds later was compared as the server's times. A run
directory without the gaps (a simulated one, one written before they were kept) reads as
before."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.live.replay import finalize
from kvbudget.live.run_dir import TOKEN_GAPS_KEY, RunDir
from kvbudget.policies import DEFAULT_TIERS, make_policy
from kvbudget.results.recorded_whole_answer import whole_answer_rows_of
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_parts import REQUESTS_PART
from kvbudget.workloads.errors import TraceError

OUTPUT = 9
READ_GAP_S = 2e-6  # the client's time between two chunks it read at once


def _row(request_id: int, gaps: list[float], end_after_s: float) -> dict[str, Any]:
    """A completed row: its first chunk 0.1 s after arrival, then chunks ``gaps`` apart, the
    stream's end ``end_after_s`` after the first chunk."""
    arrival = float(request_id)
    first, end = arrival + 0.1, arrival + 0.1 + end_after_s
    return {"request_id": request_id, "tier": "interactive", "arrival_s": arrival,
            "prompt_tokens": 8, "max_output_tokens": OUTPUT, "output_tokens": OUTPUT,
            "status": "completed", "reason": "", "admitted_s": arrival,
            "first_token_s": first, "finished_s": end, "ttft_s": first - arrival,
            "tpot_s": (end - first) / (OUTPUT - 1), "e2e_s": end - arrival,
            "num_preemptions": 0, "reserved_tokens": 0, "error": "", TOKEN_GAPS_KEY: gaps}


ROWS = [
    _row(0, [0.01] * (OUTPUT - 1), 0.08),  # a chunk a token, as the server made them
    # read at once, the stream's end 4 ms later: TPOT 500 us, its gaps 2 us apart
    _row(1, [READ_GAP_S] * (OUTPUT - 1), 0.004),
    _row(2, [READ_GAP_S] * (OUTPUT - 1), (OUTPUT - 1) * READ_GAP_S),  # its TPOT tells too
    _row(3, [0.02] * (OUTPUT - 1), 0.16),
]


def _run_dir(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A run directory as a replay writes it (its part file, then finalize)."""
    run = RunDir(path, {"policy": "conservative"}, resume=False)
    for row in rows:
        run.write_record(row)
    run.close()
    finalize(path, make_policy("conservative"), DEFAULT_TIERS, capacity_tokens=1000, seed=0,
             wall_time_s=4.0, num_requests=len(rows))
    return path


def test_a_run_directory_finds_answers_read_at_once_by_their_chunks_gaps(
        tmp_path: Path) -> None:
    recording = read_recording(_run_dir(tmp_path / "run", ROWS))
    assert recording.format == "run"
    m = recording.measured
    assert m["tpot_s"][1] == pytest.approx(5e-4)  # its TPOT misses it
    assert m["itl_mean_s"][1] == pytest.approx(READ_GAP_S)
    assert whole_answer_rows_of(m).tolist() == [False, True, True, False]
    records = recording.records()
    assert np.isnan(records["ttft_s"][[1, 2]]).all() and np.isnan(records["tpot_s"][[1, 2]]).all()
    assert np.isfinite(records["e2e_s"]).all()
    said = [n for n in recording.notes if "in one read" in n or "at once" in n]
    assert len(said) == 1 and said[0].startswith(
        "2 of 4 completed requests got the tokens after their first less than 100 us apart on "
        "average (their inter-token times; ")


def test_a_run_directory_without_the_gaps_reads_as_before(tmp_path: Path) -> None:
    """No part file (a simulated run's directory, or one copied without it), or part rows
    written before the gaps were kept: TPOT only, as the reader did."""
    with_gaps = _run_dir(tmp_path / "run", ROWS)
    no_file = tmp_path / "no_file"
    shutil.copytree(with_gaps, no_file)
    (no_file / REQUESTS_PART).unlink()
    old = _run_dir(tmp_path / "old", [{k: v for k, v in r.items() if k != TOKEN_GAPS_KEY}
                                      for r in ROWS])
    expected = None
    for path in (no_file, old):
        recording = read_recording(path)
        m = recording.measured
        assert np.isnan(m["itl_mean_s"]).all()
        assert whole_answer_rows_of(m).tolist() == [False, False, True, False]
        said = [n for n in recording.notes if n.startswith("1 of 4 completed requests")]
        assert len(said) == 1 and "(their inter-token times where the file has them, else " \
            "(E2E - TTFT)" in said[0]
        expected = expected or recording.notes
        assert recording.notes == expected


@pytest.mark.parametrize(("change", "said"), [
    ({TOKEN_GAPS_KEY: ["x", 1e-6]}, "request 1: token_gaps_s must be finite numbers"),
    ({TOKEN_GAPS_KEY: [-1.0, 1e-6]}, "request 1: token_gaps_s must be finite numbers"),
])
def test_damaged_gaps_are_refused_naming_the_file_and_request(
        tmp_path: Path, change: dict[str, Any], said: str) -> None:
    path = _run_dir(tmp_path / "run", ROWS)
    part = path / REQUESTS_PART
    lines = part.read_text().splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), **change})
    part.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=f"{REQUESTS_PART}: {said}"):
        read_recording(path)


def test_a_part_row_without_a_request_id_is_refused(tmp_path: Path) -> None:
    path = _run_dir(tmp_path / "run", ROWS)
    with (path / REQUESTS_PART).open("a") as f:
        f.write(json.dumps({"status": "completed", "ttft_s": math.pi}) + "\n")
    with pytest.raises(TraceError, match="a row without an integer request_id"):
        read_recording(path)
