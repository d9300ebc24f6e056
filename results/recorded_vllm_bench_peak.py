"""``vllm bench serve``'s "Peak concurrent requests", beside the simulated one.

vLLM 0.32.0 ``vllm/benchmarks/serve.py`` (``calculate_metrics``, lines 672-724; the result's
``max_concurrent_requests``, line 1300; printed "Peak concurrent requests:", line 1224) and
vllm-project/vllm at 009e6d4a (the same count and key) count it in one-second buckets from the
first successful request's ``start_time``: each successful request adds one to every bucket
from its send's to its end's (``start_time + latency``), and the figure is the largest bucket.
So it is not the most requests in flight at one instant: two requests one after the other in
the same second both count. The same count of the simulated requests tells at a glance a
closed loop replayed open-loop or a cap the replay missed: a closed loop of 4 users read as an
open loop sends all its requests at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.results.recording import Recording

RESULT_KEY = "max_concurrent_requests"
"""The result's key (vLLM's own)."""
PEAK_KEY = "peak_concurrent_requests"
"""The recording's ``config`` key that keeps each stage's figure (stage label to count): not
vLLM's result key, which names TGI's ``--max-concurrent-requests`` engine knob in kvbudget's
settings."""


def recorded_peak(doc: Mapping[str, Any]) -> int | None:
    """The result's ``max_concurrent_requests``, a whole number >= 0, or None (a result from
    before vLLM wrote it, or another tool's)."""
    value = doc.get(RESULT_KEY)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return int(value) if value >= 0 and float(value).is_integer() else None


def peak_per_second(start_s: npt.ArrayLike, end_s: npt.ArrayLike) -> int:
    """vLLM's count (module docstring) of the requests sent at ``start_s`` and ended at
    ``end_s`` (seconds, one clock; the successful ones only): 0 for none."""
    start = np.asarray(start_s, dtype=np.float64)
    end = np.asarray(end_s, dtype=np.float64)
    keep = np.isfinite(start) & np.isfinite(end)
    start, end = start[keep], end[keep]
    if not len(start):
        return 0
    origin = float(start.min())
    first = (start - origin).astype(np.int64)  # int() truncates, as vLLM's does
    last = (end - origin).astype(np.int64)
    size = math.ceil(float(end.max()) - origin) + 2
    steps = np.zeros(size, dtype=np.int64)
    np.add.at(steps, first, 1)
    np.add.at(steps, last + 1, -1)
    return int(np.cumsum(steps).max())


def peak_said(recording: Recording, simulated: pd.DataFrame) -> str | None:
    """One line with each stage's recorded "Peak concurrent requests" beside the same count
    of the simulated requests of that stage that completed, or None where the recording keeps
    no such figure."""
    recorded = recording.config.get(PEAK_KEY)
    if not isinstance(recorded, Mapping) or not recorded:
        return None
    sim = simulated[simulated["status"] == "completed"]
    stages = recording.stages_of(sim["request_id"].to_numpy())
    parts = []
    for label, peak in recorded.items():
        mine = sim[stages == label]
        count = peak_per_second(mine["arrival_s"].to_numpy(), mine["finished_s"].to_numpy())
        parts.append(
            (f"stage '{label}' " if len(recorded) > 1 else "")
            + f"recorded {peak}, simulated {count}"
        )
    return (
        "peak concurrent requests (vllm bench serve's count: the most requests running in "
        "one second, from its first send, of those that completed): " + "; ".join(parts)
    )
