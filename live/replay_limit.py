"""A load tool's time limit, kept by the live replay as the tool kept it.

A stage its tool stopped at a time limit (``RecordedStage.time_limit_end_s``: AIPerf's
``--benchmark-duration``, GuideLLM 0.8's ``max_duration``, genai-bench's, evalscope's
``--duration``) is sent as the tool sent it: nothing after the limit, the requests still running
``grace_s`` after it cancelled (AIPerf's ``--benchmark-grace-period``; the stream closed, which
makes vLLM abort the request and free its KV). The limit is on the replay's clock, whose zero is
the stage's first send (``studies.recorded_replay.live_stage`` rebases the stage there, as
``StagePlan.limit_s`` does for the simulation). AIPerf stops issuing when no time is left
(ai-dynamo/aiperf ``src/aiperf/timing/phase/stop_conditions.py``, ``DurationStopCondition.
can_send_any_turn``: ``time_left > 0``, from ``lifecycle.py`` ``time_left_in_seconds``: the
duration, plus ``grace_period_sec`` for the wait on requests in flight, less the time since
the phase started), so a request sent at the limit's instant is a matter of nanoseconds; the
replay sends a request due at or before the limit, as the simulator does
(``simulator/users.py``: a send later than ``send_until_s`` is never made), so that
``validate --records`` of the replay's run directory simulates the same sends.

What each request then is, as the simulator's records say it (``studies.recorded_replay``):
sent and ended by ``send_until_s + grace_s``: as any replay's; sent and still running then:
``client_timeout`` with reason ``TIME_LIMIT_CANCELLED`` (``results.records``); never sent:
a row with ``client_timeout`` and ``TIME_LIMIT_NOT_SENT``, its
``arrival_s`` the limit (a closed loop's user would have sent it then at the earliest) or its
own recorded time where that is later, no latency; so a run directory's rows keep the stage's
order (``validate --records`` sends them in it).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from kvbudget.workloads.closed_loop import TimeLimit


async def keep_time_limit(
    limit: TimeLimit,
    *,
    clock: Callable[[], float],
    stop_sending: Callable[[], None],
    cancel_running: Callable[[], None],
) -> None:
    """At ``limit.send_until_s`` on ``clock`` call ``stop_sending``; at its grace period's
    end (if finite) ``cancel_running``."""
    for at, act in ((limit.send_until_s, stop_sending), (limit.cancel_at_s, cancel_running)):
        if at == math.inf:
            return
        delay = at - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        act()


def sent_by_limit(due_s: float, limit: TimeLimit | None) -> bool:
    """Whether a request due at ``due_s`` (the run's clock) is sent under ``limit``: due at or
    before it (the simulator's rule, ``simulator/users.py``); always without one."""
    return limit is None or due_s <= limit.send_until_s
