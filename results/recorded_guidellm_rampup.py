"""GuideLLM's ramp-up of a closed loop: a ``concurrent`` or ``throughput`` benchmark run with
``rampup_duration`` > 0 (0.8: ``--profile kind=concurrent,streams=N,rampup_duration=R``; from
0.4 the strategies' ``rampup_duration``).

GuideLLM does not start such a loop's users at once. ``ConcurrentStrategy.next_request_time``
(0.8.1 ``guidellm/scheduler/strategies.py``) gives the ``i``-th of its first ``streams``
requests the start ``start + R * i / streams`` and every later one the last completion of its
process; ``ThroughputStrategy.next_request_time`` (with a ``max_concurrency``) gives the
``i``-th of the first ``max_concurrency`` requests ``start + R * i / max_concurrency`` and every
later one ``start + R``. A closed loop of N users sending at once would offer the server a
burst that the recorded run never had, so such a stage is replayed as N slots that no request
takes before its due time (``info.timings.targeted_start``): the ramp's times for the first
N; for the later ones that time clipped at the ramp's last due time (``start + R (N - 1) / N``
for ``concurrent``, ``start + R`` for ``throughput``), after which only a free slot holds them,
as a closed loop's users. A ``concurrent`` request due during the ramp at a recorded
completion keeps it (the simulated server's own completion would set it; the ramp's length
bounds the difference).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recording import RecordedStage

FloatArray = npt.NDArray[np.float64]


def rampup_s(strategy: Mapping[str, Any]) -> float:
    """The strategy's ``rampup_duration`` in seconds (0.0 when absent, not a finite number
    or not positive)."""
    value = strategy.get("rampup_duration")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


def ramp_hold_s(kind: str, users: int, ramp_s: float) -> float:
    """How long after the stage's first due time a request can still be held by the ramp:
    the last of the first ``users`` requests' due times (``concurrent``), or the ramp's end,
    every later request's (``throughput``)."""
    return ramp_s if kind == "throughput" else ramp_s * (users - 1) / users


def ramped_stage(label: str, kind: str, users: int, ramp_s: float) -> tuple[RecordedStage, str]:
    """The stage of a ramped closed loop and the note that says how it is replayed."""
    later = ("every later one no sooner than the ramp's end" if kind == "throughput" else
             "every later one when a user's request before it ended")
    note = (f"{label}: GuideLLM ramped its {users} users up over {ramp_s:g} s "
            f"(rampup_duration): the i-th of their first requests was due {ramp_s:g} x i / "
            f"{users} s after the start, {later}; replayed as {users} slots, each request "
            "offered no sooner than its due time (info.timings.targeted_start) clipped at the "
            "ramp's last, not as all users at once (during the ramp a request due at a recorded "
            "completion keeps it: a faster simulated server sends it no sooner)")
    return RecordedStage(label, "capped", None, users, send_times="ramped"), note


def clip_to_ramps(offered: FloatArray, due: FloatArray, labels: npt.NDArray[Any],
                  holds: Mapping[str, float]) -> FloatArray:
    """Each ramped stage's offered times, clipped at its first due time plus its
    :func:`ramp_hold_s` (the stage's first due time is GuideLLM's start of the ramp)."""
    out = offered.copy()
    for label, hold in holds.items():
        rows = labels == label
        starts = due[rows & np.isfinite(due)]
        if len(starts) == 0:
            continue
        out[rows] = np.minimum(out[rows], float(starts.min()) + hold)
    return out
