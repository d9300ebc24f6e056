"""When GuideLLM cancels the requests in flight at a benchmark's time limit (``max_duration``).

GuideLLM runs no timer for its limit: its main process evaluates the constraints when a
request's status update reaches it (``scheduler/worker_group.py``:
``WorkerGroupState.received_callback`` calls ``_locked_update`` / ``update_state`` with the
request's info; 0.5.0 to 0.7.3 do nothing else, their ``request_updates`` loop only waits for
the next update, ``except asyncio.TimeoutError`` doing no evaluation). The updates a worker
sends (``scheduler/worker.py``, ``_send_update``) are ``pending`` at dequeue and
``in_progress`` at the request's start, ``completed`` / ``errored`` / ``cancelled`` at its end,
and from 0.6.0 ``first_token`` at its first token (0.5.x send none for it); the main process
adds ``queued`` when it queues one. So in 0.5-0.7 the first status change at or after the limit
sets ``constraint_reached_event`` (``max_duration``: ``request_processing="stop_local"``,
``scheduler/constraints/request.py``) and the workers cancel what is still in flight; a
synchronous run's one request in flight at the limit, its first token already come, ends (its
end is that change) and completes. GuideLLM 0.8.0 and 0.8.1 also evaluate the constraints when no update has come for
``settings.mp_poll_interval`` (0.1 s: ``request_updates``'s ``TimeoutError`` branch calls
``update_state()``), so their cut is no status change but the report's own lag
(``end_requests_time``), the ``grace`` rule. Each worker sees the event by polling it every
0.1 s (``wait_for_sync_event``) before it cancels: that lag is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kvbudget.results.recorded_fields import dig
from kvbudget.results.recording import RecordedStage

POLL_S = 0.1
"""How often a GuideLLM worker looks for the constraint event (0.5.4 ``utils/messaging.py``:
``poll_interval`` 0.1; ``scheduler/worker.py`` polls ``constraint_reached_event`` with it)."""

_TIMES = {"sent": ("request_start_time",), "ended": ("request_end_time",),
          "first_token": ("info", "timings", "first_token_iteration")}

FIRST_TOKEN_UPDATES = (0, 6)
"""The first GuideLLM that sends a ``first_token`` status update (0.6.0 ``scheduler/worker.py``;
0.5.4 has none)."""
POLLED_LIMIT = (0, 8)
"""The first GuideLLM that also evaluates its constraints on a 0.1 s poll (0.8.0
``scheduler/worker_group.py``, ``request_updates``)."""
UPDATES_ONLY = (0, 5)
"""The first GuideLLM of the scheduler that evaluates constraints on status updates
(0.5.0 ``scheduler/worker_group.py``)."""


def cut_rule(version: tuple[int, ...]) -> tuple[str, tuple[str, ...]]:
    """``RecordedStage.cut`` and ``status_changes`` of a time-limited benchmark of GuideLLM
    ``version`` (``(0, 7, 3)``): ``next_status_change`` on sends and ends (and first tokens
    from 0.6) for 0.5-0.7, else ``grace`` (0.8, or a version not said)."""
    if not UPDATES_ONLY <= version[:2] < POLLED_LIMIT:
        return "grace", ()
    if version[:2] >= FIRST_TOKEN_UPDATES:
        return "next_status_change", ("sent", "first_token", "ended")
    return "next_status_change", ("sent", "ended")


def cut_words(stage: RecordedStage) -> str:
    """How a ``next_status_change`` stage's note says when its requests are cancelled;
    ``""`` for a ``grace`` one."""
    if stage.cut != "next_status_change":
        return ""
    changes = " or ".join({"sent": "a send", "first_token": "a first token",
                           "ended": "an end"}[c] for c in stage.status_changes)
    return (f"at the first status change of the stage's requests at or after the limit "
            f"({changes}), when GuideLLM checks its limit (so a request in flight alone at the "
            "limit, its first token come, runs to its end)")


def _time(req: Any, path: tuple[str, ...]) -> float:
    value = dig(req, *path)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else math.nan


def poll_lag_note(bench: Mapping[str, Any], stage: RecordedStage, stop: float) -> str | None:
    """A note for a ``next_status_change`` stage: GuideLLM's workers act on the limit only at
    their next poll of the event (up to :data:`POLL_S` later), which the replay does not
    model; with how many of the report's requests ended or were sent after the first status
    change at or after the limit (``stop``, epoch seconds), which a replay cancels or never
    sends. None for other stages."""
    if stage.cut != "next_status_change":
        return None
    requests = dig(bench, "requests")
    reqs = [r for k in ("successful", "errored", "incomplete")
            for r in ((requests.get(k) if isinstance(requests, dict) else None) or [])
            if isinstance(r, dict)]
    changes = [t for r in reqs for c in stage.status_changes
               if (t := _time(r, _TIMES[c])) >= stop]
    if not changes:
        return None
    cut = min(changes)
    ended = sum(1 for r in dig(requests, "successful") or []
                if isinstance(r, dict) and _time(r, _TIMES["ended"]) > cut)
    sent = sum(1 for r in reqs if _time(r, _TIMES["sent"]) > cut)
    seen = (f": here {ended} request(s) completed and {sent} were sent after it, which the "
            "replay cancels or does not send" if ended or sent else "")
    return (f"stage '{stage.label}': GuideLLM's workers act on the limit at their next poll "
            f"for it, up to {POLL_S:g} s after the status change that reached it, which the "
            f"replay does not model{seen}")
