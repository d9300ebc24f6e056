"""What a recording's requests that got their whole answer in one read do to a comparison.

Such a request (:mod:`kvbudget.results.recorded_whole_answer`) has a measured TPOT near 0: the
client's, not the server's. The TPOT rows of the comparison table and the per-request TPOT MAPE
take every completed request's TPOT as measured; :func:`whole_answer_said` says how many of the
compared ones are such requests and gives the TPOT comparison over the others, so the table's
figures stay those of every request and the user sees both.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_whole_answer import BURST_ITL_S, whole_answer_rows_of

if TYPE_CHECKING:
    import pandas as pd


def whole_answer_said(measured: pd.DataFrame, simulated: pd.DataFrame,
                      rows: npt.NDArray[np.bool_] | None = None) -> str | None:
    """One line under a comparison whose compared requests (the completed ``rows`` of a
    recording's ``measured`` table) include some that got their whole answer in one read: how
    many of those with a TPOT, and the TPOT p50 (simulated, measured, relative error) and
    per-request TPOT MAPE over the others, from ``simulated``'s records (joined on
    ``request_id``); None when there are none."""
    usable = measured["usable"].to_numpy(dtype=bool)
    keep = usable if rows is None else usable & np.asarray(rows, dtype=bool)
    meas = measured["tpot_s"].to_numpy(dtype=np.float64)
    keep = keep & np.isfinite(meas)
    burst = keep & whole_answer_rows_of(measured)
    if not burst.any():
        return None
    sim = (simulated.set_index("request_id")["tpot_s"]
           .reindex(measured["request_id"].to_numpy()).to_numpy(dtype=np.float64))
    others = keep & ~burst & np.isfinite(sim)
    head = (f"TPOT: {int(burst.sum())} of the {int(keep.sum())} compared requests with a TPOT "
            f"got their whole answer in one read (tokens after the first under "
            f"{BURST_ITL_S * 1e6:.0f} us apart: see the note), so their measured TPOT is near 0, "
            "the client's: the TPOT rows and the per-request TPOT MAPE above count it as "
            "measured; ")
    if not others.any():
        return head + ("no other compared request has a TPOT both sides: this recording does "
                       "not measure the server's TPOT")
    s, m = float(np.median(sim[others])), float(np.median(meas[others]))
    rel = (s - m) / m if m > 0 else math.nan
    ok = others & (meas > 0)
    mape = float(np.mean(np.abs(sim[ok] - meas[ok]) / meas[ok])) if ok.any() else math.nan
    return head + (f"over the other {int(others.sum())}, TPOT p50 simulated {s * 1e3:.3g} ms, "
                   f"measured {m * 1e3:.3g} ms ({rel:+.1%}), per-request TPOT MAPE {mape:.1%}")
