"""Whether a run's engine kept up with the load it was offered, from the run's own records.

``kvbudget simulate`` on a trace printed its figures without relating the load to what the
simulated GPU sustains: a reader could not tell whether 5.5 req/s overloads it. Finding the
largest rate that meets the SLO takes a search of many runs (``kvbudget capacity``); whether
this load is past what the engine absorbs shows in the one run already made: below capacity
the requests in the system (arrived, not yet finished) stay about level while requests arrive,
past it they pile up, the engine finishing fewer than arrive (Little's law: a stable queue's
backlog averages arrival rate x time in the system, whatever the time). :func:`load_said`
compares the backlog at the arrival window's midpoint with the backlog at the last arrival,
and counts the requests a gateway shed (refused as overloaded, expired waiting, dropped after
preemption) where it kept its backlog level by turning requests away. The backlog of a queue
that keeps up also rises while its arrival rate rises (a higher rate's queue settling) and
falls with it, so where the arrivals of the window's two halves differ by more than Poisson
noise the verdict says so rather than judge the load from the backlog alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.said import fill
from kvbudget.workloads.arrival_rate import mean_arrival_rate

__all__ = ["Backlog", "backlog", "load_said", "loads_said", "tiers_grown", "with_deadlines"]

FloatArray = npt.NDArray[np.float64]

SHED = ("rejected_overloaded", "expired", "preempted_dropped", "client_timeout")
"""Statuses of requests a run did not serve for want of capacity (a too-large request is
refused whatever the load, and is not counted)."""
NOISE_SIGMAS = 3.0
"""A backlog grew where it rose by more than this many standard deviations of a Poisson count
of its midpoint size (a stable queue's backlog varies about that much between two instants)."""


@dataclass(frozen=True)
class Backlog:
    """The requests in the system (arrived and not finished) at the arrival window's midpoint
    and at its last arrival, and the requests shed, of a run's records."""

    at_mid: int
    at_end: int
    num_shed: int
    num_offered: int
    halves: tuple[int, int] = (0, 0)
    """The arrivals in the first and second half of the arrival window."""
    num_completed: int = 0
    num_unplaced: int = 0
    """Requests that waited in the gateway's queue and expired whose leave the records cannot
    place (:func:`_left_s`): counted gone from their arrival, so the backlogs are at least
    what they say, by up to this many."""
    num_dropped: int = 0
    """Requests dropped after their lease was taken back (``preempted_dropped``: revoked and
    requeued, then past their new deadline, or their lease run out), whose leave the records
    do not keep (the revoke's time is not in them): counted gone at their last admission or
    first token, so the backlogs are at least what they say, by up to this many."""

    @property
    def grew(self) -> bool:
        """Whether the backlog rose by more than :data:`NOISE_SIGMAS` Poisson deviations."""
        return self.at_end - self.at_mid > NOISE_SIGMAS * math.sqrt(max(self.at_mid, 1))

    @property
    def rate_moved(self) -> int:
        """+1 where the second half's arrivals exceed the first's by more than
        :data:`NOISE_SIGMAS` Poisson deviations of their sum, -1 where they fall short so, else
        0."""
        first, second = self.halves
        if abs(second - first) <= NOISE_SIGMAS * math.sqrt(max(first + second, 1)):
            return 0
        return 1 if second > first else -1


def _left_s(record_columns: Mapping[str, Any], arrival: FloatArray) -> tuple[FloatArray, int]:
    """When each request left the system: its finish, else (refused, expired, dropped: no
    finish) the last time its record shows it there, its arrival, admission or first token
    (one refused on arrival, too large or overloaded, was never in it). One that waited in the
    gateway's queue until its admission deadline passed (``expired``, ``deadline``) left at
    that deadline (``deadline_s``: the gateway refuses a waiting request at it,
    ``policies/gateway.py`` ``_expire``), one still waiting when the run ended (``expired``,
    ``end_of_run``) never left; and the number of expired requests whose leave the columns
    cannot place (no ``deadline_s``, or a client's later attempt, whose own wait began at its
    sending: counted gone from their arrival)."""
    left = np.asarray(record_columns["finished_s"], dtype=float).copy()
    gone = np.isnan(left)
    if not gone.any():
        return left, 0
    seen = arrival[gone]
    for name in ("admitted_s", "first_token_s"):
        if name in record_columns:
            seen = np.fmax(seen, np.asarray(record_columns[name], dtype=float)[gone])
    status = np.asarray(record_columns["status"]).astype(str)[gone]
    reason = np.asarray(record_columns.get("reason", np.full(len(left), ""))).astype(str)[gone]
    expired = (status == "expired") & (reason == "deadline")
    deadline = np.full(len(seen), np.nan)
    if "deadline_s" in record_columns:
        deadline = np.asarray(record_columns["deadline_s"], dtype=float)[gone]
    if "num_attempts" in record_columns:  # a retry's deadline counts from its own sending
        deadline[np.asarray(record_columns["num_attempts"])[gone] > 1] = np.nan
    placed = expired & np.isfinite(deadline)
    seen[placed] = np.fmax(seen[placed], deadline[placed])
    seen[(status == "expired") & (reason == "end_of_run")] = np.inf
    left[gone] = seen
    return left, int(np.sum(expired & ~placed))


def with_deadlines(record_columns: Mapping[str, Any], deadline_s: FloatArray,
                   waits: Mapping[str, float | None]) -> Mapping[str, Any]:
    """A simulated run's record columns with each request's admission deadline, as the
    records schema's ``deadline_s`` holds it (a ``kvbudget serve`` run's records have it; a
    simulated run's do not): its own (``deadline_s``, the workload's, row for row with the
    records), else its tier's wait (``waits``: ``queue_timeout_s`` by tier) after its
    arrival, as the gateway gives it (``policies/gateway.py`` ``arrive``); NaN where it could
    wait without limit. The columns as they are where they hold it already, or where the
    workload's rows are not the records' (a closed loop's users)."""
    arrival = np.asarray(record_columns["arrival_s"], dtype=float)
    own = np.asarray(deadline_s, dtype=float)
    if "deadline_s" in record_columns or len(own) != len(arrival):
        return record_columns
    names, codes = np.unique(np.asarray(record_columns["tier"]).astype(str),
                             return_inverse=True)
    by_tier = [waits.get(str(t)) for t in names]  # one look-up a tier, not a row
    wait = np.array([math.nan if w is None else float(w) for w in by_tier])[codes]
    return {**record_columns, "deadline_s": np.where(np.isfinite(own), own, arrival + wait)}


def backlog(record_columns: Mapping[str, Any]) -> Backlog | None:
    """The :class:`Backlog` of a run's record columns (``arrival_s``, ``finished_s``,
    ``status``; ``admitted_s`` and ``first_token_s`` where present); None below two arrivals or
    where they all came at once."""
    arrival = np.asarray(record_columns["arrival_s"], dtype=float)
    if len(arrival) < 2 or not arrival.max() > arrival.min():
        return None
    left, num_unplaced = _left_s(record_columns, arrival)
    status = np.asarray(record_columns["status"]).astype(str)
    first, last = float(arrival.min()), float(arrival.max())

    def in_system(t: float) -> int:  # arrived by t and not gone by t
        return int(np.sum((arrival <= t) & (left > t)))

    mid = (first + last) / 2
    num_first = int(np.sum(arrival < mid))
    return Backlog(in_system(mid), in_system(last), int(np.isin(status, SHED).sum()),
                   len(arrival), (num_first, len(arrival) - num_first),
                   int(np.sum(status == "completed")), num_unplaced,
                   int(np.sum(status == "preempted_dropped")))


def tiers_grown(record_columns: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Of a run whose backlog grew, the tiers whose own backlog grew and those whose stayed
    level, each counted at the run's arrival window's midpoint and last arrival (a gateway
    that serves its interactive tier ahead keeps that tier level while batch work piles
    up: the run's verdict is its whole backlog's, and the table's conclusion the tiers'
    SLOs); ``((), ())`` without a ``tier`` column, below two tiers, or where every tier's
    backlog moved alike."""
    if "tier" not in record_columns:
        return (), ()
    arrival = np.asarray(record_columns["arrival_s"], dtype=float)
    tier = np.asarray(record_columns["tier"]).astype(str)
    names = list(dict.fromkeys(tier.tolist()))
    if len(names) < 2 or len(arrival) < 2:
        return (), ()
    left, _ = _left_s(record_columns, arrival)
    last = float(arrival.max())
    mid = (float(arrival.min()) + last) / 2
    grew: list[str] = []
    level: list[str] = []
    for name in names:
        mine = tier == name
        at_mid = int(np.sum(mine & (arrival <= mid) & (left > mid)))
        at_end = int(np.sum(mine & (arrival <= last) & (left > last)))
        (grew if Backlog(at_mid, at_end, 0, 0).grew else level).append(name)
    return (tuple(grew), tuple(level)) if grew and level else ((), ())


def _tiers_said(grown: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    """``only the batch tier's backlog grew (the interactive tier's stayed level)``."""
    def whose(names: tuple[str, ...]) -> str:
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        return f"the {listed} tier's" if len(names) == 1 else f"the {listed} tiers'"

    grew, level = grown
    return (f"only {whose(grew)} backlog{'s' if len(grew) > 1 else ''} grew ({whose(level)} "
            "stayed level)")


CAPACITY_ADVICE = ("how far from its capacity: kvbudget capacity, with the same options and "
                   "--out DIR, finds the largest rate that meets the SLO")
"""What ends a ``load:`` line (``compare`` says its own, once: :func:`loads_said`)."""

COMPARE_ADVICE = ("how far each policy is from its capacity: kvbudget capacity, with the same "
                  "options, --policies among them, and --out DIR, finds the largest rate at "
                  "which each meets the SLO")
"""What ends ``compare``'s ``load:`` line, once for every policy."""

_VERDICTS = {
    "none": ("no request completed{who} (the table's refused and expired columns say why): "
             "{runs} nothing of the load the simulated deployment sustains"),
    "grew": ("the backlog grew{who}: requests arrived faster than they finished, so this load "
             "is past what the simulated deployment sustains under {each}"),
    "shed": ("the backlog stayed level{who} by turning requests away: this load is past what "
             "the simulated deployment serves under {each} within the tiers' deadlines"),
    "level": ("the backlog stayed level{who}: the simulated deployment kept up with this load "
              "under {each}"),
}
"""What a run's backlog says (:func:`_verdict`), of one run (``who`` empty, ``each`` "this
policy", ``runs`` "this run says") or of several runs' policies (:func:`loads_said`)."""


def _verdict(b: Backlog) -> str:
    """The key of :data:`_VERDICTS` that ``b`` says."""
    if not b.num_completed:
        return "none"
    if b.grew:
        return "grew"
    return "shed" if b.num_shed else "level"


def _shed_said(b: Backlog, *, meaning: bool = True) -> str:
    """``N of M (P%) shed (...)`` with the leaves the records cannot place; ``""`` where
    none was shed. ``meaning``: say what shed means (``compare`` says it once)."""
    if not b.num_shed:
        return ""
    said = f"{b.num_shed:,} of {b.num_offered:,} ({b.num_shed / b.num_offered:.0%}) shed"
    if meaning:
        said += " (refused as overloaded, expired or dropped)"
    if b.num_unplaced:
        said += (f" ({b.num_unplaced:,} of them waited in the gateway's queue and expired at a "
                 "time the records do not keep: counted gone from their arrival, so the "
                 "backlogs may be that many higher)")
    if b.num_dropped:
        said += (f" ({b.num_dropped:,} of them dropped after their lease was taken back, "
                 "revoked or run out, at a time the records do not keep: counted gone at their "
                 "last admission or first token, so the backlogs may be that many higher)")
    return said


def _moved_said(b: Backlog, *, several: bool = False) -> str:
    """``; but the arrivals rose ...`` where the window's halves' arrivals differ beyond
    chance (a verdict on the window's rate would mislead), else ``""``. ``several``: said of
    several runs' verdicts."""
    moved = b.rate_moved
    if not moved:
        return ""
    n1, n2 = b.halves
    what = "none of these is a verdict on" if several else "this is no verdict on"
    return (f"; but the arrivals {'rose' if moved > 0 else 'fell'} over the window ({n1:,} in "
            f"its first half, {n2:,} in its second), and a queue's backlog follows its rate even "
            f"where it keeps up, so {what} "
            + ("the higher rate alone" if moved > 0 else "the first half's higher rate"))


def _measured(record_columns: Mapping[str, Any],
              summary: Mapping[str, Any]) -> tuple[Backlog, float] | None:
    """A run's :class:`Backlog` and offered rate; None for a closed loop (its users wait for
    their answers: the load follows the engine) or without a window."""
    if summary.get("closed_loop"):
        return None
    b = backlog(record_columns)
    rate = mean_arrival_rate(int(summary["overall"]["offered"]),
                             float(summary.get("offered_window_s") or 0.0))
    return None if b is None or rate is None else (b, rate)


def load_said(record_columns: Mapping[str, Any], summary: Mapping[str, Any],
              policy: str | None = None, *, advice: bool = True) -> str:
    """``load: R req/s offered; ...``: the offered rate (over the arrival window, first to
    last arrival), the backlog at the window's midpoint and at its last arrival, the drain
    after it, the requests shed, and what they say: the GPU kept up, or this load is past what
    it sustains (the largest rate that meets the SLO is ``kvbudget capacity``'s search). ``""``
    for a closed loop or without a window (:func:`_measured`). ``policy``: the run's, named at
    the head (``load under policy P:``). ``advice``: end with :data:`CAPACITY_ADVICE`."""
    measured = _measured(record_columns, summary)
    if measured is None:
        return ""
    b, rate = measured
    drain = summary.get("drain_s")
    drained = f", the last finish {drain:,.1f} s after it" if isinstance(drain, float) else ""
    under = "" if policy is None else f" under policy {policy}"
    head = (f"load{under}: {rate:.3g} req/s offered (over the arrival window, first to last arrival); "
            f"requests in the system (arrived, not finished): {b.at_mid:,} at the window's "
            f"midpoint, {b.at_end:,} at the last arrival{drained}")
    shed = _shed_said(b)
    verdict = _VERDICTS[_verdict(b)].format(who="", each="this policy", runs="this run says")
    grown = tiers_grown(record_columns) if _verdict(b) == "grew" else ((), ())
    if grown[0]:
        verdict += f"; {_tiers_said(grown)}"
    return fill(f"{head}{'; ' + shed if shed else ''}: {verdict}{_moved_said(b)}"
                + (f" ({CAPACITY_ADVICE})" if advice else ""))


def _names(names: Sequence[str], num_runs: int) -> tuple[str, str, str]:
    """The ``who``, ``each`` and ``runs`` of a verdict said of these policies' runs, of
    ``num_runs`` in all."""
    if len(names) == num_runs:
        return " under every policy", "each", "their runs say"
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    if len(names) == 1:
        return f" under {listed}", "it", "its run says"
    return f" under {listed}", "each", "their runs say"


def loads_said(runs: Sequence[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> str:
    """``compare``'s ``load:`` line: one for every policy's run (``(policy, record columns,
    summary)``) of one workload. Each policy's backlog follows its own refusals, so each is
    said, but the offered rate and the window's halves, the workload's, are said once, the
    runs' drains are the table's ``drain s``, and runs with one verdict share it; then the
    capacity advice, once. Where the runs' rates or halves differ (not one workload), a
    :func:`load_said` line for each. ``""`` where no run has a window (a closed loop)."""
    measured = [(name, m) for name, cols, summary in runs
                if (m := _measured(cols, summary)) is not None]
    if not measured:
        return ""
    if len({(m[1], m[0].halves) for _, m in measured}) > 1:
        return "\n".join([*filter(None, (load_said(c, s, name, advice=False)
                                         for name, c, s in runs)), fill(f"({COMPARE_ADVICE})")])
    b0, rate = measured[0][1]
    shed = any(b.num_shed for _, (b, _r) in measured)
    items = "; ".join(f"{name} {b.at_mid:,} and {b.at_end:,}"
                      + (f", {_shed_said(b, meaning=False)}" if b.num_shed else "")
                      for name, (b, _r) in measured)
    by_verdict: dict[str, list[str]] = {}
    for name, (b, _r) in measured:
        by_verdict.setdefault(_verdict(b), []).append(name)
    verdicts = "; ".join(_VERDICTS[key].format(**dict(zip(("who", "each", "runs"), _names(
        names, len(measured)), strict=True))) for key, names in by_verdict.items())
    by_split: dict[tuple[tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for name, cols, _summary in runs:
        if name in by_verdict.get("grew", ()) and (grown := tiers_grown(cols))[0]:
            by_split.setdefault(grown, []).append(name)
    for grown, names in by_split.items():
        who = _names(names, len(measured))[0]
        verdicts += f";{who}, {_tiers_said(grown)}"
    head = (f"load: {rate:.3g} req/s offered to each policy (over the arrival window, first to "
            "last arrival); requests in the system (arrived, not finished) at the window's "
            "midpoint and at its last arrival"
            + (", and those shed (refused as overloaded, expired or dropped)" if shed else ""))
    return fill(f"{head}: {items}: {verdicts}{_moved_said(b0, several=len(measured) > 1)} "
                f"({COMPARE_ADVICE})")
