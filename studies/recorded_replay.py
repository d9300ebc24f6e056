"""A recording's load replayed as its load tool offered it: stage by stage, each in its mode.

A load tool runs its stages one after another (GuideLLM's sweep, ``vllm bench serve
--append-result`` lines), each in one of :data:`~kvbudget.results.recordings.LOAD_MODES`:

``open`` / ``unknown``
    The requests are sent at their recorded send times whatever the server does (a rate, or a
    production log): the simulation offers them at the same times.
``closed``
    ``max_concurrency`` users each send the stage's next request when their last one ended
    (GuideLLM's ``synchronous``/``concurrent``/``throughput``, ``vllm bench serve
    --max-concurrency C`` at rate ``inf``): the simulation runs the same users
    (:class:`~kvbudget.workloads.closed_loop.ClosedLoop`), so a slower simulated server sends
    fewer requests a second, as the real one would have. Replaying the recorded send times
    instead would make the simulated throughput agree by construction.
``capped``
    An open loop whose requests also wait for one of ``max_concurrency`` slots (``--request-rate
    R --max-concurrency C``): the same users, none sending before the request's recorded time
    (``ClosedLoop.not_before_arrival``); AIPerf's (``RecordedStage.tick_pattern``) sends only at
    its rate's ticks, skipping those that find every slot busy (``ClosedLoop.tick_rate_per_s``).

A stage its load tool stopped by a time limit (``RecordedStage.time_limit_end_s``) is replayed
as the tool ran it whatever its mode: the tool sends nothing after the limit and cancels the
requests still running when its grace period after it ends (``RecordedStage.grace_s``; AIPerf's
``--benchmark-grace-period``), so a simulated request still running then is the client's
(:data:`CANCELLED`), neither completed nor the server's failure; a closed or capped stage's
users also send nothing after the limit (:data:`NOT_SENT`). A stage whose tool checks its
limit only on a request's status change (``RecordedStage.cut == "next_status_change"``:
GuideLLM 0.5-0.7) is cut at the first of its simulated requests' status changes at or after
the limit (:func:`status_change_cut_s`), not after a fixed grace period: the request in
flight alone at the limit, its first token come, runs to its end, as it did in the tool.

A recording whose requests are turns of conversations (``Recording.conversations``: a load
tool sends a conversation's next turn only when the turn before it returned) has each stage's
later turns wait for the turn before them and its delay (``ClosedLoop.conversations``), a free
user taking a ready later turn before a new conversation; an open stage with such turns is
replayed by as many users as it has requests, none sending before its recorded send.

A recording whose stages are all open (and no conversations) is simulated as one run (the whole load at once, as
before), its time-limited stages cut after it (:func:`cut_open_stages`), unless a later stage
follows one with a finite grace period (its cancelled requests would have gone on loading the
server in the simulation, not in the tool's run). Otherwise each stage is simulated on its own,
from an idle server, starting at the stage's first recorded send; the runs are joined into one
:class:`RunResult` (records, timeline and token gaps on the recording's clock; the summary
recomputed over them, with a ``stages`` list saying how each was replayed).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.policies import make_policy
from kvbudget.results.metrics import summarize
from kvbudget.results.recording import RecordedStage, Recording, is_warmup
from kvbudget.results.records import TIME_LIMIT_CANCELLED, TIME_LIMIT_NOT_SENT
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads.closed_loop import ClosedLoop, Conversations, TimeLimit

if TYPE_CHECKING:

    from kvbudget.workloads import Workload

_TIME_COLUMNS = ("arrival_s", "admitted_s", "first_token_s", "finished_s")
"""Record columns on the run's clock (shifted by a stage's start when runs are joined)."""


@dataclass(frozen=True)
class StagePlan:
    """How one stage is replayed: its rows of the workload, the loop (None: open), its start."""

    stage: RecordedStage
    rows: np.ndarray[Any, np.dtype[np.int64]]
    loop: ClosedLoop | None
    start_s: float

    @property
    def limit_s(self) -> float | None:
        """The tool's time limit on the stage's own clock (from :attr:`start_s`); None: none."""
        limit = self.stage.time_limit_end_s
        return None if limit is None else max(0.0, limit - self.start_s)

    def describe(self) -> dict[str, Any]:
        rate = self.stage.request_rate
        return {"label": self.stage.label, "load": self.stage.load,
                "request_rate": "inf" if rate == math.inf else rate,  # JSON has no Infinity
                "max_concurrency": self.stage.max_concurrency,
                "replayed_as": replay_mode(
                    self.stage, turns=self.loop is not None
                    and self.loop.conversations is not None,
                    held=self.loop is not None and self.loop.conversations is not None
                    and self.loop.conversations.held),
                "num_requests": len(self.rows),
                "start_s": self.start_s,
                **({"tick_pattern": self.stage.tick_pattern} if self.stage.tick_pattern else {}),
                **({"send_until_s": self.limit_s,  # JSON has no Infinity
                    "grace_s": "inf" if self.stage.grace_s == math.inf else self.stage.grace_s}
                   if _is_cut(self.stage) else {}),
                **({"cut": self.stage.cut, "status_changes": list(self.stage.status_changes)}
                   if self.stage.cut != "grace" else {})}


def _is_cut(stage: RecordedStage) -> bool:
    """Whether the tool's time limit changes how a stage is replayed: a closed or capped
    stage's users stop sending at it; an open stage's sends are the recorded ones, so only a
    finite grace period after it, or a cut at a status change (requests cancelled), does."""
    if stage.time_limit_end_s is None:
        return False
    return (stage.load in ("closed", "capped") or stage.grace_s != math.inf
            or stage.cut != "grace")


def replay_mode(stage: RecordedStage, *, turns: bool = False, held: bool = False) -> str:
    """What the validate table says of a stage: how its load was simulated; ``turns``: its
    requests hold later turns of conversations (:func:`stage_conversations`), which wait for
    the turn before them (not under a tick schedule, which sends at its ticks: said);
    ``held``: each user keeps its conversation (``Conversations.held``)."""
    mode = _replay_mode(stage)
    if not turns:
        return mode
    if stage.load == "capped" and stage.tick_pattern and held:
        return (mode + "; each user holds its conversation, sending a later turn at the first "
                "tick after the gap recorded after the turn before it ended (before a new "
                "conversation takes the tick; that gap holds the tool's wait for a tick too, so "
                "a turn may go up to one tick later than the tool's would), a new "
                "conversation after its last")
    if stage.load == "capped" and stage.tick_pattern:
        return (mode + "; a conversation's later turn sent at a tick in its recorded order, "
                "not held back until the turn before it ended (turns under a tick schedule "
                "are not simulated)")
    if held:
        return (mode + "; each user holds its conversation, sending a later turn the tool's "
                "delay after the turn before it ended, a new conversation after its last")
    return mode + ("; a conversation's later turn sent no sooner than the turn before it ended "
                   "(and the tool's delay after it)")


def _replay_mode(stage: RecordedStage) -> str:
    limited = "" if stage.time_limit_end_s is None else (
        ", time-limited (nothing sent after the tool's time limit)")
    if stage.cut == "next_status_change":
        limited = (", time-limited (requests still running at the first status change of "
                   "its requests at or after the tool's time limit cancelled)")
    elif stage.load in ("open", "unknown") and _is_cut(stage):
        limited = (", time-limited (requests still running the tool's grace period of "
                   f"{stage.grace_s:g} s after its time limit cancelled)")
    users = f"{stage.max_concurrency} user{'' if stage.max_concurrency == 1 else 's'}"
    if stage.load == "closed":
        return f"closed loop, {users}{limited}"
    if stage.load == "open" and stage.send_times != "recorded" and \
            stage.request_rate == math.inf:
        return f"every request at once (rate inf; the file has no send times){limited}"
    times = ("recorded send times" if stage.send_times == "recorded" else
             "times AIPerf issued them (its records' credit_issued_ns)"
             if stage.send_times == "issued" else
             f"send times {stage.send_times} (the file has none)")
    if stage.load == "capped" and stage.send_times == "ramped":
        return (f"closed loop, {users} started over the tool's ramp-up "
                f"(no request sent before its due time, clipped at the ramp's last){limited}")
    if stage.load == "capped" and stage.tick_pattern:
        return (f"open loop at the {times}, at most {stage.max_concurrency} in flight, each "
                f"sent at a tick of its {stage.tick_pattern} schedule (a tick that finds every "
                f"slot busy is skipped, as AIPerf does){limited}")
    if stage.load == "capped":
        return f"open loop at the {times}, at most {stage.max_concurrency} in flight{limited}"
    if stage.load == "unknown":
        return f"open loop at the {times} (load mode not recorded){limited}"
    return f"open loop at the {times}{limited}"


def stage_plans(recording: Recording) -> list[StagePlan] | None:
    """One plan per stage, in run order; None when every stage is open and no stage cut at
    its time limit has another after it (one run suffices, :func:`cut_open_stages` after)."""
    stages = recording.stages
    if not stages or (all(s.load in ("open", "unknown") for s in stages) and not any(
            _is_cut(s) for s in stages[:-1]) and recording.conversations is None):
        return None
    arrival = recording.workload.arrival_s
    plans = []
    for stage in stages:
        rows = stage_rows(recording, stage)
        if len(rows) == 0:
            continue
        loop = None
        turns = stage_conversations(recording.conversations, rows)
        if stage.load in ("open", "unknown") and turns is not None:
            # the recorded sends, a later turn no sooner than the turn before it ended: slots
            # enough for every request, none sent before its recorded send
            loop = ClosedLoop(num_users=len(rows), not_before_arrival=True,
                              conversations=turns)
        elif stage.load in ("closed", "capped"):
            assert stage.max_concurrency is not None  # RecordedStage checks it
            ticked = stage.load == "capped" and stage.tick_pattern in ("constant", "poisson")
            start = float(arrival[rows].min())
            limit = stage.time_limit_end_s
            loop = ClosedLoop(num_users=stage.max_concurrency,
                              not_before_arrival=stage.load == "capped",
                              tick_rate_per_s=stage.request_rate if ticked else None,
                              tick_pattern="poisson" if stage.tick_pattern == "poisson"
                              else "constant",
                              send_until_s=None if limit is None else max(0.0, limit - start),
                              conversations=turns if not ticked or (turns and turns.held)
                              else None)
        plans.append(StagePlan(stage, rows, loop, float(arrival[rows].min())))
    return plans


def stage_rows(recording: Recording, stage: RecordedStage) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The workload rows of ``stage`` (sorted)."""
    labels = recording.measured["stage"].astype(str).to_numpy()
    return np.flatnonzero(labels == stage.label).astype(np.int64)


def stage_conversations(conversations: Conversations | None,
                        rows: np.ndarray[Any, np.dtype[np.int64]]) -> Conversations | None:
    """The recording's conversations among a stage's ``rows`` (sorted), on the stage's own row
    numbers: a turn whose turn before it is in another stage waits for none; None when no row
    waits."""
    if conversations is None:
        return None
    local = {int(r): j for j, r in enumerate(rows.tolist())}
    previous = tuple(local.get(conversations.previous[r], -1) for r in rows.tolist())
    if all(p < 0 for p in previous):
        return None
    return Conversations(previous, tuple(conversations.delay_s[r] if p >= 0 else 0.0
                                         for r, p in zip(rows.tolist(), previous,
                                                         strict=True)), conversations.held)


def _stage_workload(workload: Workload, rows: np.ndarray[Any, np.dtype[np.int64]],
                    start_s: float) -> Workload:
    """``rows`` of ``workload`` on their stage's clock (from ``start_s``)."""
    sub = workload.take(rows)
    return replace(sub, arrival_s=sub.arrival_s - start_s, deadline_s=sub.deadline_s - start_s)


def stage_names(stage: RecordedStage, index: int) -> set[str]:
    """What ``--stage`` may call the recording's ``index``-th stage besides its label: its
    index, its label's part after the colon (``"0: synchronous"``: ``synchronous``) and that
    part's first word when it is a word (``constant``), and GuideLLM's own name of its
    strategy (``constant@12.97``, ``concurrent@4``, ``throughput@512``: GuideLLM
    ``scheduler/strategies.py`` ``__str__``, vllm-project/guidellm ee7a7745, lines 262-594)."""
    names = {str(index)}
    _, colon, name = stage.label.partition(": ")
    name = " ".join(name.split()) if colon else ""
    if name:
        names.add(name)
        word = name.split()[0]
        if word.isalpha():
            names.add(word)
            rate, conc = stage.request_rate, stage.max_concurrency
            if word in ("constant", "poisson") and rate is not None and math.isfinite(rate):
                names.add(f"{word}@{rate:.2f}")
            elif word in ("concurrent", "throughput") and conc is not None:
                names.add(f"{word}@{conc}")
    return names - {""}


def pick_stage(recording: Recording, given: str) -> RecordedStage:
    """The stage ``--stage given`` names: its label, else the one stage whose
    :func:`stage_names` hold it. ``ValueError`` for none or several, listing the labels."""
    stages = recording.stages
    exact = [s for s in stages if s.label == given]
    if exact:
        return exact[0]
    wanted = " ".join(given.split())
    named = [s for i, s in enumerate(stages) if wanted in stage_names(s, i)]
    if len(named) == 1:
        return named[0]
    listed = "; ".join(f"{i} = {s.label}" for i, s in enumerate(stages)) or "none"
    which = (f"names {len(named)} stages ({', '.join(s.label for s in named)}): pass one's "
             "label or index" if named else "names no stage")
    raise ValueError(f"{recording.path}: --stage {given!r} {which}; the recording's stages "
                     f"are {listed}")


def live_stage(recording: Recording, label: str | None = None
               ) -> tuple[Workload, ClosedLoop | None, str, TimeLimit | None]:
    """The requests of one recorded stage as the live replay sends them (``kvbudget replay
    --records``): its rows from its first send, the loop the stage ran (None: open, at the
    recorded send times), how it is sent (:func:`replay_mode`'s words) and the tool's time
    limit on the stage's clock (None: none; the same limit :class:`StagePlan` simulates).
    ``label`` picks a stage (:func:`pick_stage`: its label, index or name); a recording of
    several stages needs one, and ``ValueError`` names them."""
    stage = None if label is None else pick_stage(recording, label)
    plans = stage_plans(recording)
    if plans is None:  # every stage open: the recorded sends, as one run
        rows = (np.arange(len(recording.workload), dtype=np.int64) if stage is None
                else stage_rows(recording, stage))
        if len(rows) == 0:
            raise ValueError(f"{recording.path}: --stage {label!r}: that stage holds no "
                             "request to replay")
        cut = [s for s in recording.stages if stage in (None, s) and _is_cut(s)]
        if cut and stage is None and len(recording.stages) > 1:
            raise ValueError(f"{recording.path}: stage {cut[0].label!r} was cut at its tool's "
                             "time limit, the others not: pass --stage LABEL (or its index) to "
                             "replay one as its tool ran it")
        for one in cut:
            _refuse_live(recording, one)
        start = float(recording.workload.arrival_s[rows].min())
        limit = _time_limit(recording, cut[0], rows, start) if cut else None
        return (_stage_workload(recording.workload, rows, start), None,
                "open loop at the recorded sends" + (_limit_said(limit) if limit else ""), limit)
    labels = [p.stage.label for p in plans]
    if stage is None and len(plans) > 1:
        raise ValueError(f"{recording.path}: {len(plans)} stages ({', '.join(labels)}): pass "
                         "--stage LABEL (or its index, or its name) to replay one (each ran "
                         "its own load)")
    chosen = [p for p in plans if stage is None or p.stage.label == stage.label]
    if not chosen:
        raise ValueError(f"{recording.path}: --stage {label!r}: that stage holds no request "
                         f"to replay; the stages with requests are {', '.join(labels)}")
    plan = chosen[0]
    limit = None
    if _is_cut(plan.stage):
        _refuse_live(recording, plan.stage)
        limit = _time_limit(recording, plan.stage, plan.rows, plan.start_s)
    return (_stage_workload(recording.workload, plan.rows, plan.start_s), plan.loop,
            str(plan.describe()["replayed_as"]), limit)


def _time_limit(recording: Recording, stage: RecordedStage,
                rows: np.ndarray[Any, np.dtype[np.int64]], start_s: float) -> TimeLimit:
    """``stage``'s time limit on its own clock (from ``start_s``, its first send), its warm-up
    requests awaited (as :func:`cut_at_time_limit` leaves them)."""
    assert stage.time_limit_end_s is not None  # _is_cut checks it
    status = recording.measured["status"].astype(str).to_numpy()[rows]
    warmup = np.array([is_warmup(s) for s in status.tolist()], dtype=bool)
    return TimeLimit(max(0.0, stage.time_limit_end_s - start_s), stage.grace_s,
                     frozenset(np.flatnonzero(warmup).tolist()))


def _limit_said(limit: TimeLimit) -> str:
    grace = ("the requests in flight then awaited" if limit.grace_s == math.inf else
             f"the requests still running {limit.grace_s:g} s after it cancelled")
    return (f", time-limited (nothing sent after the tool's time limit {limit.send_until_s:g} s "
            f"after the first send, {grace})")


def not_replayed_live(stage: RecordedStage) -> str:
    """Why the live replay cannot send a time-limited ``stage`` as its tool did ("" when it
    can): a tool that cancels at the first status change after its limit (GuideLLM 0.5-0.7:
    ``RecordedStage.cut``), which the live replay does not follow."""
    if stage.cut == "next_status_change":
        return ("its tool (GuideLLM 0.5-0.7) cancelled the requests in flight at the first "
                "status change of its requests at or after its time limit, not after a fixed "
                "grace period, and the live replay keeps only a fixed grace period; record "
                "the load again with GuideLLM 0.8 or later (which cuts within its 0.1 s poll) "
                "to replay it")
    return ""


def _refuse_live(recording: Recording, stage: RecordedStage) -> None:
    """``ValueError`` when the live replay cannot keep ``stage``'s time limit as its tool
    did (:func:`not_replayed_live`), saying what to do."""
    why = not_replayed_live(stage)
    if why:
        raise ValueError(f"{recording.path}: stage {stage.label!r} was cut at its tool's time "
                         f"limit: {why}; `kvbudget validate --records` simulates it as the "
                         "tool ran it (or replay another stage)")


def simulate_stages(recording: Recording, config: SimConfig, plans: Sequence[StagePlan], *,
                    policy: str, policy_params: Mapping[str, Any] | None,
                    progress: Callable[[int], None] | None = None) -> RunResult:
    """Each stage simulated on its own, in its load mode, and the runs joined."""
    runs = []
    for plan in plans:
        cfg = replace(config, closed_loop=plan.loop)
        run = simulate(_stage_workload(recording.workload, plan.rows, plan.start_s),
                       make_policy(policy, dict(policy_params or {})), cfg, progress=progress)
        runs.append(cut_at_time_limit(run, plan, recording))
    return join_stage_runs(runs, plans, config, policy)


NOT_SENT = TIME_LIMIT_NOT_SENT
"""The reason of a time-limited stage's request its simulated users had not sent when the load
tool's time limit stopped the sending (status ``client_timeout``: the client, not the server)."""
CANCELLED = TIME_LIMIT_CANCELLED
"""The reason of a time-limited stage's request still running when the tool's grace period
after the limit ran out: the tool cancelled it (status ``client_timeout``)."""


def cut_at_time_limit(run: RunResult, plan: StagePlan, recording: Recording) -> RunResult:
    """A time-limited stage's run as the load tool saw it: the requests its users had not sent
    by the limit (sent after it; a closed or capped stage's) and those still running at the
    limit plus the tool's grace period are the client's (``client_timeout``, :data:`NOT_SENT` /
    :data:`CANCELLED`), neither completed nor the server's failures. Cancelling after the run
    is exact: nothing is sent after the limit, so a request running past the grace period
    slows only others running past it, all of them cancelled. Warm-up requests are not cut
    (AIPerf's warm-up is a phase of its own, which waits for every request)."""
    limit = plan.limit_s
    if limit is None or not _is_cut(plan.stage):
        return run
    _, warmup = _measured_rows(recording, run)
    users = plan.loop is not None
    return _cut(run, ~warmup, limit, _grace_s(run, ~warmup, limit, plan.stage, users=users),
                users=users)


def cut_open_stages(run: RunResult, recording: Recording) -> RunResult:
    """A one-run simulation of a recording's open stages with each time-limited stage's
    requests still running its tool's grace period after the limit cancelled (as
    :func:`cut_at_time_limit`; on the recording's clock, the run's)."""
    cut = [s for s in recording.stages if _is_cut(s)]
    if not cut:
        return run
    stage_of, warmup = _measured_rows(recording, run)
    for stage in cut:
        assert stage.time_limit_end_s is not None  # _is_cut checks it
        rows = (stage_of == stage.label) & ~warmup
        run = _cut(run, rows, stage.time_limit_end_s,
                   _grace_s(run, rows, stage.time_limit_end_s, stage, users=False), users=False)
    return run


def _measured_rows(recording: Recording, run: RunResult) -> tuple[
        np.ndarray[Any, np.dtype[np.object_]], np.ndarray[Any, np.dtype[np.bool_]]]:
    """Each of ``run``'s records' stage label and whether the recording measured it as a
    warm-up request (by request id: a stage's run holds the recording's ids)."""
    measured = recording.measured
    ids = measured["request_id"].to_numpy(dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    wanted = np.asarray(run.record_columns["request_id"], dtype=np.int64)
    rows = order[np.searchsorted(ids, wanted, sorter=order)]
    labels = measured["stage"].astype(str).to_numpy(dtype=object)[rows]
    warmup = np.array([is_warmup(s) for s in measured["status"].astype(str).tolist()],
                      dtype=bool)
    return labels, warmup[rows]


def status_change_cut_s(limit: float, changes: Sequence[np.ndarray[Any, Any]]) -> float:
    """When a tool that checks its time limit only on a status change cuts a stage: the first
    of the ``changes`` (times of the stage's requests' sends, first tokens, ends; NaN: none) at
    or after ``limit``; inf when none comes (nothing was in flight)."""
    later = [t[t >= limit] for t in (np.asarray(c, dtype=np.float64) for c in changes)]
    return min((float(t.min()) for t in later if t.size), default=math.inf)


def _grace_s(run: RunResult, rows: np.ndarray[Any, np.dtype[np.bool_]], limit: float,
             stage: RecordedStage, *, users: bool) -> float:
    """How long after ``limit`` the tool cancelled ``rows``' requests in flight: the stage's
    grace period, or for a ``next_status_change`` stage the time to the first status change of
    its simulated requests at or after the limit (those its users sent by then)."""
    if stage.cut != "next_status_change":
        return stage.grace_s
    cols = run.record_columns
    arrival = np.asarray(cols["arrival_s"], dtype=np.float64)
    sent = rows & ~(arrival > limit) if users else rows
    times = {"sent": arrival[sent],
             "first_token": np.asarray(cols["first_token_s"], dtype=np.float64)[sent],
             "ended": np.asarray(cols["finished_s"], dtype=np.float64)[sent]}
    return status_change_cut_s(limit, [times[c] for c in stage.status_changes]) - limit


def _cut(run: RunResult, rows: np.ndarray[Any, np.dtype[np.bool_]], limit: float,
         grace_s: float, *, users: bool) -> RunResult:
    """``run`` with ``rows``' requests the load tool would not have seen complete set to the
    client's: those sent after ``limit`` where simulated users sent them (``users``), and
    those still running ``grace_s`` after it."""
    cols = dict(run.record_columns)
    arrival = np.asarray(cols["arrival_s"], dtype=np.float64)
    finished = np.asarray(cols["finished_s"], dtype=np.float64)
    status = np.asarray(cols["status"], dtype=object).copy()
    reason = np.asarray(cols["reason"], dtype=object).copy()
    not_sent = rows & (arrival > limit) if users else np.zeros(len(rows), dtype=bool)
    cut = (rows & ~not_sent & (status == "completed") & ~(finished <= limit + grace_s))
    if not (not_sent.any() or cut.any()):
        return run
    status[not_sent | cut] = "client_timeout"
    reason[not_sent] = NOT_SENT
    reason[cut] = CANCELLED
    cols["status"], cols["reason"] = status, reason
    return RunResult(cols, run.timeline_columns, run.summary, run.attempt_columns,
                     run.token_gap_columns)


def join_stage_runs(runs: Sequence[RunResult], plans: Sequence[StagePlan], config: SimConfig,
                    policy: str) -> RunResult:
    """The stages' runs as one: records in the recording's request ids and clock, timelines
    and token gaps joined, the summary recomputed over them."""
    records: dict[str, Any] = {}
    for name in runs[0].record_columns:
        parts = []
        for run, plan in zip(runs, plans, strict=True):
            values = np.asarray(run.record_columns[name])
            if name in _TIME_COLUMNS:  # a stage's request ids are already the recording's
                values = values + plan.start_s
            parts.append(values)
        records[name] = np.concatenate(parts)
    order = np.argsort(records["request_id"], kind="stable")
    records = {k: v[order] for k, v in records.items()}
    timeline: dict[str, Any] = {}
    preempted = 0
    for run, plan in zip(runs, plans, strict=True):
        cols = run.timeline_columns
        for name in cols:
            values = np.asarray(cols[name])
            if name == "time_s":
                values = values + plan.start_s
            elif name == "num_preemptions":
                values = values + preempted
            timeline.setdefault(name, []).append(values)
        if len(cols["num_preemptions"]):
            preempted += int(np.asarray(cols["num_preemptions"])[-1])
    timeline = {k: np.concatenate(v) for k, v in timeline.items()}
    gaps = _joined_gaps(runs)
    first = runs[0].summary
    extra: dict[str, Any] = {k: first[k] for k in ("policy_params", "gpu", "model", "num_gpu_blocks",
                                   "block_size", "cost_model", "frontend_overhead_s",
                                   "frontend", "engine_defaults", "engine", "engine_knobs",
                                   "gateway_capacity_tokens", "weight_dtype") if k in first}
    if isinstance(first.get("workload"), dict):  # what the run's lines say: all the stages'
        extra["workload"] = {**first["workload"], "num_requests": len(records["request_id"])}
    # a stage's line counts that stage's requests: one said of several stages says so, not
    # their sum as one stage's (nor one stage's count as the run's)
    assumed = Counter(a for r in runs for a in r.summary.get("assumed", ()))
    if assumed:
        extra["assumed"] = [a if k == 1 else f"{a} (said of each of {k} stages)"
                            for a, k in assumed.items()]
    too_large: Counter[str] = Counter()
    for r in runs:  # each stage's refusals a default limit accounts for (limits_said)
        too_large.update(r.summary.get("gateway_too_large", {}))
    if too_large:
        extra["gateway_too_large"] = dict(too_large)
    extra["stages"] = [p.describe() for p in plans]
    summary = summarize(records, timeline, tiers=config.tiers,
                        kv_capacity_tokens=int(first["kv_capacity_tokens"]), policy=policy,
                        seed=config.seed,
                        wall_time_s=sum(float(r.summary.get("wall_time_s", 0.0)) for r in runs),
                        token_gaps=gaps, extra=extra)
    return RunResult(records, timeline, summary, None, gaps)


def _joined_gaps(runs: Sequence[RunResult]) -> dict[str, Any] | None:
    """The stages' inter-token gaps as one weighted multiset (rows of equal tier and gap
    summed)."""
    if any(r.token_gap_columns is None for r in runs):
        return None
    import pandas as pd

    frame = pd.concat([pd.DataFrame(r.token_gap_columns) for r in runs], ignore_index=True)
    if frame.empty:
        return {k: frame[k].to_numpy() for k in frame.columns}
    merged = frame.groupby(["tier", "gap_s"], as_index=False, sort=True)["num_gaps"].sum()
    return {"tier": merged["tier"].to_numpy(dtype=object),
            "gap_s": merged["gap_s"].to_numpy(dtype=np.float64),
            "num_gaps": merged["num_gaps"].to_numpy(dtype=np.int64)}
