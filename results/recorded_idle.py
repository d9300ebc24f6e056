"""How long a recorded closed loop's users sat idle between a request's end and their next
send, said where it is enough to matter.

A closed loop of C users is replayed with no think time: each simulated user sends its next
request the moment its last ends. A load tool's users do the same, give or take its own
overhead (AIPerf 0.13.0: a few ms). A published AIPerf run (github.com/vinhngx/aiperf
``tests/unit/plot/fixtures/qwen_concurrency1/profile_export.jsonl`` at dcf4335e, concurrency
1, ten requests) sent its third request 3.07 s after its second ended, 8 % of the run's 39 s:
the measured output tokens a second count that idle time and the simulated ones do not, so
the simulated throughput reads that much higher than the server's for the same step times
(there it hid a +8 % E2E error as a +0.2 % throughput one). Nothing said so.

The k-th send after the first C takes the slot the k-th end freed (ends in time order): its
gap is the idle time of that slot. Said where the slots idled 2 % of the stage's slot time or
more and the longest gap passed 100 ms (more than a tool's own overhead)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IDLE_SHARE = 0.02
"""The share of a stage's slot time its users idled, at or above which it is said."""
IDLE_FLOOR_S = 0.1
"""The longest gap below which nothing is said (a load tool's own overhead between a request's
end and the next send)."""


def closed_loop_idle_note(label: str, users: int, sent_s: npt.ArrayLike,
                          end_s: npt.ArrayLike) -> str | None:
    """The note for a closed stage of ``users`` whose requests were sent at ``sent_s`` and
    ended at ``end_s`` (seconds, one clock; NaN ends, requests that never ended, left out),
    or None where its users idled too little to matter."""
    sent = np.sort(np.asarray(sent_s, dtype=np.float64))
    end = np.asarray(end_s, dtype=np.float64)
    end = np.sort(end[np.isfinite(end)])
    if users < 1 or len(sent) <= users or len(end) == 0:
        return None
    later = sent[users:]
    n = min(len(later), len(end))
    gaps = np.clip(later[:n] - end[:n], 0.0, None)
    span = float(max(end.max(), sent.max()) - sent.min())
    idle = float(gaps.sum())
    if span <= 0 or gaps.max() <= IDLE_FLOOR_S or idle < IDLE_SHARE * users * span:
        return None
    worst = int(np.argmax(gaps))
    return (f"stage '{label}': its {users} user(s) sat idle {idle:.2f} s in all between a "
            f"request's end and their next send ({100 * idle / (users * span):.0f} % of the "
            f"stage's slot time; the longest {float(gaps[worst]):.2f} s, before send "
            f"{users + worst + 1}), which the replay's users, sending at once, do not: the "
            "measured output tokens a second count that idle time, so the simulated ones read "
            "higher for the same step times; compare TTFT, TPOT and E2E")
