"""The load a ``kvbudget replay`` run directory was sent in, read back from its
``replay.json`` (``closed_loop``: :meth:`kvbudget.workloads.closed_loop.ClosedLoop.describe`,
written by the live replay) so that a simulation of the run (``validate --records RUNDIR``)
sends its requests as the replay did: a closed loop's users, a capped loop's slots. A run
directory without it (an open replay, a ``simulate --out``, an older replay) is replayed at its
recorded send times, as before. A replay that kept a load tool's time limit
(``replay.json``'s ``time_limit``: ``live/replay_limit.py``) is simulated with the same limit:
its stage is time-limited (``RecordedStage.time_limit_end_s`` at the limit on the run's clock,
``grace_s`` its grace period), so the simulated users send nothing after it and what still runs
at its grace period's end is cancelled, as the replay did."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvbudget.results.recording import RecordedStage
from kvbudget.workloads.errors import TraceError


def replayed_loop(meta: dict[str, Any], meta_path: Path) -> tuple[RecordedStage | None, str]:
    """The stage a run directory's requests were sent in (None: at their times, or a loop the
    directory does not hold whole) and a note saying which, from ``replay.json``'s
    ``closed_loop``. ``TraceError`` names the field of a malformed one."""
    limit = _time_limit(meta, meta_path)
    loop = meta.get("closed_loop")
    if loop is None:
        if limit is None:
            return None, ""
        return (RecordedStage("replayed open loop", "open", time_limit_end_s=limit[0],
                              grace_s=limit[1]),
                f"the replay kept a load tool's time limit ({meta_path.name} time_limit): "
                f"{_limit_words(limit)}; simulated so")
    if not isinstance(loop, dict):
        raise TraceError(meta_path, "must be a table of the replay's closed loop",
                         field="closed_loop")
    users = loop.get("num_users")
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise TraceError(meta_path, f"must be a whole number >= 1, got {users!r}"[:200],
                         field="closed_loop.num_users")
    think = _seconds(loop.get("think_time_s", 0.0), meta_path, "closed_loop.think_time_s")
    capped = loop.get("not_before_arrival") is True
    kind = "capped loop" if capped else "closed loop"
    said = f"{kind} of {users} user{'' if users == 1 else 's'}"
    left = [what for what, there in (
        (f"a think time of {think:g} s", think > 0),
        ("conversations' turns", bool(loop.get("num_later_turns"))),
        ("a rate's ticks", loop.get("tick_rate_per_s") is not None),
        ("a time limit not kept whole", loop.get("send_until_s") is not None
         and limit is None)) if there]
    if left:
        return None, (f"the replay sent its requests by a {said} with {' and '.join(left)} "
                      f"({meta_path.name} closed_loop), which the run directory does not hold "
                      "whole (the think times drawn, the turns' links): simulated at its "
                      "recorded send times instead, so the simulated throughput follows the "
                      "measured one by construction")
    stage = RecordedStage(f"replayed {said}", "capped" if capped else "closed", None, users)
    how = ("each request at the later of its recorded send and a free slot (the recording "
           "holds when the replay sent, not when it was due)" if capped else
           "each user sending its next request when its last one ended")
    if limit is not None:
        stage = replace(stage, time_limit_end_s=limit[0], grace_s=limit[1])
        how += f"; {_limit_words(limit)}"
    return stage, (f"the replay sent its requests by a {said} ({meta_path.name} closed_loop): "
                   f"simulated so, {how}")


def _time_limit(meta: dict[str, Any], meta_path: Path) -> tuple[float, float] | None:
    """``replay.json``'s ``time_limit`` as (the limit on the run's clock, the grace period;
    inf: none); None when the replay kept none. ``TraceError`` names a malformed field."""
    limit = meta.get("time_limit")
    if limit is None:
        return None
    if not isinstance(limit, dict):
        raise TraceError(meta_path, "must be a table of the replay's time limit",
                         field="time_limit")
    return (_seconds(limit.get("send_until_s"), meta_path, "time_limit.send_until_s"),
            _seconds(limit.get("grace_s", "inf"), meta_path, "time_limit.grace_s",
                     inf_ok=True))


def _seconds(value: Any, meta_path: Path, field: str, *, inf_ok: bool = False) -> float:
    """``value`` as a time >= 0 (finite unless ``inf_ok``, which also takes ``"inf"``, as
    JSON spells no limit); ``TraceError`` naming ``field`` otherwise."""
    if inf_ok and value == "inf":
        return math.inf
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            value >= 0 and (inf_ok or math.isfinite(value))):
        also = ' or "inf"' if inf_ok else ""
        raise TraceError(meta_path, f"must be a time >= 0{also}, got {value!r}"[:200],
                         field=field)
    return float(value)


def _limit_words(limit: tuple[float, float]) -> str:
    until, grace = limit
    then = ("the requests in flight then awaited" if grace == math.inf else
            f"those still running {grace:g} s after it cancelled")
    return f"nothing sent after {until:g} s, {then}"
