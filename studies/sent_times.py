"""``validate --url`` simulates each request at the time the replay sent it.

The replay sends each request at its trace time, as the event loop allows: on a loaded machine
a send comes late (86 ms after its trace time was seen on the CPU vLLM's machine), and the
record's ``arrival_s`` is the actual send. The server saw the requests at those times, so the
simulation of a "simulated vs measured" comparison takes them too (the trace's times would
compare the simulated server under another load than the measured one had); how late the sends
were is said, with how many came later than one step of the calibrated engine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.workloads import Workload


@dataclass(frozen=True, slots=True)
class SentLate:
    """How late the replay sent its requests after their trace times (seconds, sent minus
    trace time, over the requests it sent): the median, the largest, and how many came later
    than ``step_s`` (one decode step of one sequence on the calibrated engine)."""

    num_sent: int
    p50_s: float
    max_s: float
    num_beyond_step: int
    step_s: float

    def said(self) -> str:
        """One line for the screen."""
        if self.num_sent == 0:
            return "the replay sent no request; nothing was simulated at a send time"
        return (
            f"the replay sent its {self.num_sent:,} requests late after their trace times by "
            f"p50 {1000 * self.p50_s:.1f} ms, max {1000 * self.max_s:.1f} ms "
            f"({self.num_beyond_step:,} later than one calibrated decode step of "
            f"{1000 * self.step_s:.1f} ms): the simulation takes the times they were sent, "
            "what the server saw"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_sent": self.num_sent,
            "p50_s": self.p50_s,
            "max_s": self.max_s,
            "num_beyond_step": self.num_beyond_step,
            "step_s": self.step_s,
        }


def as_sent(workload: Workload, records: pd.DataFrame, step_s: float) -> tuple[Workload, SentLate]:
    """``workload`` at the times the replay's ``records`` say each request was sent
    (``arrival_s`` by ``request_id``; a request without one keeps its trace time), and how late
    those were. The deadlines stay the trace's, as the live gateway took them."""
    sent = (
        records.set_index("request_id")["arrival_s"]
        .astype(float)
        .reindex(workload.request_id)
        .to_numpy(dtype=np.float64)
    )
    known = np.isfinite(sent)
    late = (sent - workload.arrival_s)[known]
    # the replay sends in trace order, so the sends are in order too; a request it never sent
    # keeps its trace time, which may then fall before an earlier one's late send
    arrival = np.maximum.accumulate(np.where(known, sent, workload.arrival_s))
    timed = replace(workload, arrival_s=np.maximum(arrival, 0.0))
    if not len(late):
        return timed, SentLate(0, 0.0, 0.0, 0, step_s)
    return timed, SentLate(
        len(late), float(np.median(late)), float(late.max()), int((late > step_s).sum()), step_s
    )
