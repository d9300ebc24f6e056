"""What a recording's requests that got their whole answer in one read do to a comparison.

Such a request (:mod:`kvbudget.results.recorded_whole_answer`) has a measured TTFT about its
E2E and a TPOT near 0: the client's read of it, not the server's times. The measured records
(:meth:`~kvbudget.results.recording.Recording.records`) leave them out of TTFT and TPOT, and
every comparison takes each metric over the requests that measured it, on both sides
(:func:`~kvbudget.analysis.validation.same_requests`): the comparison table, the per-request
MAPEs and calibration's fit. :func:`whole_answer_said` says so under a table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_whole_answer import BURST_ITL_S, whole_answer_rows_of

if TYPE_CHECKING:
    import pandas as pd


def whole_answer_said(measured: pd.DataFrame, rows: npt.NDArray[np.bool_] | None = None,
                      what: str = "the TTFT and TPOT rows and per-request MAPEs") -> str | None:
    """One line under a comparison whose compared requests (the completed ``rows`` of a
    recording's ``measured`` table) include some that got their whole answer in one read: how
    many, and that ``what`` (compared or fitted on their TTFT and TPOT) take the others only,
    on both sides; None when there are none."""
    usable = measured["usable"].to_numpy(dtype=bool)
    keep = usable if rows is None else usable & np.asarray(rows, dtype=bool)
    burst = keep & whole_answer_rows_of(measured)
    if not burst.any():
        return None
    num_kept, num_burst = int(keep.sum()), int(burst.sum())
    head = (f"TTFT and TPOT: {num_burst} of the {num_kept} compared requests got their whole "
            f"answer in one read (tokens after the first under {BURST_ITL_S * 1e6:.0f} us "
            "apart: see the note), so their measured TTFT and TPOT are the client's read, not "
            "the server's times: ")
    others = num_kept - num_burst
    if not others:
        return head + (f"no compared request measured the server's TTFT nor TPOT, so {what} "
                       f"have no measured figure (E2E: all {num_kept})")
    return head + (f"{what} take the other {others} only, on both sides (E2E: all {num_kept})")
