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

from kvbudget.results.recording import RecordedStage

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
            f"({changes}), when GuideLLM checks its limit: a request in flight alone at the "
            "limit, its first token come, runs to its end")
