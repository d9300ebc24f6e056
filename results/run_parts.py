"""What a replay's (or ``kvbudget serve``'s) run directory keeps of each request beside its
records: ``requests.part.jsonl``, one JSON object a line, written as each request ends
(:class:`kvbudget.live.run_dir.RunDir`), its completed rows with the gaps between their output
chunks as the client read them (:data:`TOKEN_GAPS_KEY`). Read here, below both the live code
that writes it and the recording reader (:func:`~kvbudget.results.recorded_records.
read_run_dir`) that finds from it the requests whose answer the client read whole at once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

REQUESTS_PART = "requests.part.jsonl"
TOKEN_GAPS_KEY = "token_gaps_s"
"""Key of a completed row in ``requests.part.jsonl``: the gaps between its answer's output
chunks (seconds; not a records column: ``token_gaps.parquet`` is made from them)."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a part file. A last line cut short by a crash is ignored; any other bad line is
    an error naming the file and line."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            if number == len(lines):
                break  # the write in progress when the process died
            raise ValueError(f"{path}:{number}: not a JSON object") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        rows.append(row)
    return rows


def itl_means_of_parts(out_dir: Path, records: pd.DataFrame) -> npt.NDArray[np.float64]:
    """Per row of ``records`` (a run's, any order), the time between its first and last output
    chunks over its output tokens after the first, from its gaps in ``requests.part.jsonl``:
    the mean time apart of its tokens after the first as its client read them, never more than
    its TPOT, which counts the time after the last chunk too. NaN where the row is not
    completed, has fewer than two output tokens or two chunks, or was written without its gaps
    (a version before they were kept, a run directory without its part file: a simulated
    one). What :func:`~kvbudget.results.recorded_whole_answer.whole_answer_rows` reads.
    A part row without a request id, or gaps that are not numbers: a ValueError naming the
    file and request."""
    return itl_means_of(token_gaps_of_rows(out_dir, records), records)


def itl_means_of(gaps: Sequence[npt.NDArray[np.float64] | None],
                 records: pd.DataFrame) -> npt.NDArray[np.float64]:
    """:func:`itl_means_of_parts` of each row's ``gaps`` (:func:`token_gaps_of_rows`)."""
    out = np.full(len(records), np.nan)
    for i, (mine, num_tokens) in enumerate(zip(gaps, records["output_tokens"], strict=True)):
        if mine is not None and mine.size and int(num_tokens) >= 2:
            out[i] = float(sum(mine.tolist())) / (int(num_tokens) - 1)
    return out


def token_gaps_of_rows(out_dir: Path, records: pd.DataFrame
                       ) -> list[npt.NDArray[np.float64] | None]:
    """Per row of ``records`` (a run's, any order), the gaps between its answer's output
    chunks as its client read them (``requests.part.jsonl``, the last row of a request id);
    None where the row is not completed or was written without its gaps. A part row without a
    request id, or gaps that are not finite numbers of seconds, at least 0: a ValueError
    naming the file and request."""
    path = out_dir / REQUESTS_PART
    by_id: dict[int, dict[str, Any]] = {}
    for row in read_jsonl(path):
        try:
            by_id[int(row["request_id"])] = row
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: a row without an integer request_id "
                             f"({str(row.get('request_id'))[:40]!r})") from None
    out: list[npt.NDArray[np.float64] | None] = []
    for request_id in records["request_id"].tolist():
        row = by_id.get(int(request_id), {})
        gaps = row.get(TOKEN_GAPS_KEY)
        if row.get("status") == "completed" and isinstance(gaps, list):
            out.append(_gap_values(gaps, path, int(request_id)))
        else:
            out.append(None)
    return out


def _gap_values(gaps: list[Any], path: Path, request_id: int) -> npt.NDArray[np.float64]:
    """One row's gaps, each a finite number of seconds, at least 0."""
    try:
        values = [float(g) for g in gaps]
    except (TypeError, ValueError):
        values = [float("nan")]
    if not all(v >= 0 and np.isfinite(v) for v in values):
        raise ValueError(f"{path}: request {request_id}: {TOKEN_GAPS_KEY} must be finite "
                         "numbers of seconds, at least 0")
    return np.array(values, np.float64)
