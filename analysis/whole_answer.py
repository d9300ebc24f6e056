"""What a recording's requests that got their whole answer in one read do to a comparison.

Such a request (:mod:`kvbudget.results.recorded_whole_answer`) has a measured TTFT about its
E2E and a TPOT near 0: the client's read of it, not the server's times. The measured records
(:meth:`~kvbudget.results.recording.Recording.records`) leave them out of TTFT and TPOT, and
every comparison takes each metric over the requests that measured it, on both sides
(:func:`~kvbudget.analysis.validation.same_requests`): the comparison table, the per-request
MAPEs and calibration's fit. :func:`whole_answer_said` says so under a table.

``validate --url``'s own client can read a stream whole too (on a machine too busy to read it
as it came): :func:`whole_answer_rows_of_run` finds those requests in a live run's records,
:func:`~kvbudget.analysis.validation.validate_runs` compares TTFT and TPOT over the others on
both sides, and ITL over the gaps between the others' tokens (:func:`gaps_of_rows` of the
live run's, the simulation's of the same requests), and :func:`live_whole_answer_said` says
so under its table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.metrics import aggregate_token_gaps
from kvbudget.results.recorded_whole_answer import (
    BURST_ITL_S,
    whole_answer_rows,
    whole_answer_rows_of,
)

if TYPE_CHECKING:
    import pandas as pd


def whole_answer_said(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None,
                      what: str = "the TTFT and TPOT rows and per-request MAPEs",
                      reader: str = "the client") -> str | None:
    """One line under a comparison whose compared requests (the completed ``rows`` of a
    recording's ``measured`` table) include some that got their whole answer in one read: how
    many, that their times are ``reader``'s read (``"the gateway"`` for a ``kvbudget serve``
    directory: :func:`~kvbudget.results.recorded_whole_answer.reader_of`), and that ``what``
    (compared or fitted on their TTFT and TPOT) take the others only, on both sides; None when
    there are none."""
    usable = measured["usable"].to_numpy(dtype=bool)
    keep = usable if rows is None else usable & np.asarray(rows, dtype=bool)
    burst = keep & whole_answer_rows_of(measured)
    if not burst.any():
        return None
    num_kept = int(keep.sum())
    return whole_answer_line(int(burst.sum()), num_kept, what=what, how="see the note",
                             kept=f"E2E: all {num_kept}", reader=reader)


def whole_answer_line(num_burst: int, num_compared: int, *, what: str, how: str,
                      kept: str, metrics: tuple[str, ...] = ("TTFT", "TPOT"),
                      reader: str = "the client") -> str:
    """The line under a comparison of ``num_compared`` requests of which ``num_burst`` got
    their whole answer in one read: ``how`` they were found (in the parenthesis after the
    threshold), that their ``metrics`` are the client's read and ``what`` take the others
    only, on both sides, and what ``kept`` every request (the closing parenthesis)."""
    named = _listed(metrics, "and")
    head = (f"{named}: {num_burst} of the {num_compared} compared requests got their "
            f"whole answer in one read (tokens after the first under {BURST_ITL_S * 1e6:.0f} "
            f"us apart: {how}), so their measured {named} are {reader}'s read, not "
            "the server's times: ")
    others = num_compared - num_burst
    if not others:
        return head + (f"no compared request measured the server's {_listed(metrics, 'nor')}, "
                       f"so {what} have no measured figure ({kept})")
    return head + f"{what} take the other {others} only, on both sides ({kept})"


def _listed(names: tuple[str, ...], last: str) -> str:
    """``names`` as a list in words: "TTFT and TPOT", "TTFT, TPOT nor ITL"."""
    return ", ".join(names[:-1]) + f" {last} {names[-1]}" if len(names) > 1 else names[0]


def whole_answer_rows_of_run(records: pd.DataFrame,
                             itl_mean_s: npt.NDArray[np.float64] | None = None
                             ) -> npt.NDArray[np.bool_]:
    """The completed rows of a run's ``records`` (a live replay's: ``kvbudget validate --url``)
    whose client got the whole answer in one read (:func:`~kvbudget.results.\
recorded_whole_answer.whole_answer_rows`): by ``itl_mean_s`` (per row, the mean time apart
    of its tokens after the first, from its chunks' gaps: :attr:`kvbudget.live.replay.\
ReplayOutcome.itl_mean_s`; NaN or None: not known) where known, else by its TPOT."""
    n = len(records)
    itl = np.full(n, np.nan) if itl_mean_s is None else np.asarray(itl_mean_s, np.float64)
    if itl.shape != (n,):
        raise ValueError(f"itl_mean_s has {itl.size} values for {n} records")
    return whole_answer_rows((records["status"] == "completed").to_numpy(),
                             records["output_tokens"].to_numpy(),
                             records["tpot_s"].to_numpy(dtype=np.float64), itl)


def gaps_of_rows(records: pd.DataFrame,
                 gaps: Sequence[npt.NDArray[np.float64] | None],
                 rows: npt.NDArray[np.bool_]) -> dict[str, Any]:
    """The token-gaps table (:data:`~kvbudget.results.records.TOKEN_GAP_COLUMNS`) of the
    completed ``rows`` of a live run's ``records``, from each row's ``gaps`` between its
    answer's chunks (:attr:`kvbudget.live.replay.ReplayOutcome.token_gaps_s`; None: not kept,
    no gap)."""
    if len(gaps) != len(records):
        raise ValueError(f"{len(gaps)} rows of gaps for {len(records)} records")
    keep = np.asarray(rows, dtype=bool) & (records["status"] == "completed").to_numpy()
    tiers = records["tier"].astype(str).to_numpy()
    names = sorted(set(tiers[keep].tolist()))
    code = {name: j for j, name in enumerate(names)}
    mine = [(code[str(tiers[i])], g) for i in np.flatnonzero(keep).tolist()
            if (g := gaps[i]) is not None and g.size]
    gap_s = np.concatenate([g for _, g in mine]) if mine else np.zeros(0, np.float64)
    codes = np.concatenate([np.full(g.size, c, np.int64) for c, g in mine]) if mine else (
        np.zeros(0, np.int64))
    return aggregate_token_gaps(codes, names, gap_s, np.ones(gap_s.size, np.int64))


def live_whole_answer_said(num_burst: int, num_compared: int, *, by_gaps: bool,
                           with_itl: bool, itl_of_others: bool = False) -> str:
    """The line under ``validate --url``'s table when ``num_burst`` of its ``num_compared``
    completed live requests got their whole answer in one read (:func:`whole_answer_rows_of_run`;
    ``by_gaps``: all of them found by their chunks' gaps). ``with_itl``: the table has ITL
    rows; ``itl_of_others``: they pool the gaps of the other requests' tokens on each side,
    the simulation's of the same requests (``simulate``'s ``token_gaps_of``), said so; else
    they pool every completed request's gaps (a live run without each request's gaps), said
    too."""
    how = ("found by the time between their first and last chunks" if by_gaps else
           "found by the time between their first and last chunks where the run kept their "
           "gaps, else (E2E - TTFT)")
    how += (", over the tokens after the first: kvbudget's client read each such stream at "
            "once, on a machine too busy to read it as it came or behind a proxy buffering it")
    kept = f"E2E and output tokens per second: all {num_compared}"
    if itl_of_others:
        others = num_compared - num_burst
        return whole_answer_line(
            num_burst, num_compared, what="the TTFT, TPOT and ITL rows and per-request MAPEs",
            how=how, metrics=("TTFT", "TPOT", "ITL"),
            kept=(f"ITL: the gaps between the tokens of those {others}, pooled; " if others
                  else "") + kept)
    if with_itl:
        kept += "; the ITL rows pool every completed request's gaps, theirs too"
    return whole_answer_line(num_burst, num_compared,
                             what="the TTFT and TPOT rows and per-request MAPEs", how=how,
                             kept=kept)
