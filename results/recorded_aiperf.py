"""AIPerf's per-request records: ``profile_export.jsonl``.

What the file holds (github.com/ai-dynamo/aiperf, ``docs/tutorials/working-with-profile-
exports.md`` and ``aiperf/common/models/record_models.py``, ``MetricRecordInfo``): one JSON
object a line, one per request sent, with ``metadata`` (``request_start_ns``,
``request_end_ns``: epoch nanoseconds; ``credit_issued_ns``, when AIPerf issued the request,
the due time of a capped phase's; ``benchmark_phase``: ``warmup`` or ``profiling``;
``was_cancelled``), ``metrics`` (each ``{"value": ..., "unit": ...}``:
``input_sequence_length``, ``output_sequence_length`` (AIPerf's tokenizer's count of the
text), ``usage_completion_tokens`` (the server's), ``time_to_first_token`` and
``request_latency`` in ms, ``inter_token_latency`` in ms) and ``error`` (null, or ``code``,
``type``, ``message``). Warm-up requests (``--warmup-request-count``) are simulated (they
loaded the server) and left out of every measured statistic, as AIPerf's summary does;
failed and cancelled requests are counted (a failed or cancelled one with no output is not
simulated, and a closed loop it held is replayed at the recorded sends: :func:`_failed`).

The load mode and the server configuration come from ``profile_export_aiperf.json`` beside it
when present (``input_config``: ``phases`` with ``type`` ``concurrency`` / ``request_rate``,
``concurrency``, ``rate`` (``request_rate`` in earlier versions); ``models``; ``endpoint.extra`` (``input.extra``, pairs, in AIPerf's first summaries) with
``ignore_eos`` and ``max_tokens``; ``endpoint.urls``, several a fleet behind round robin (:func:`_fleet`);
``aiperf_version``); without it the stage's load is ``unknown``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_aiperf_gpu import telemetry_gpu
from kvbudget.results.recorded_aiperf_prefix import (
    aiperf_conversations,
    aiperf_history,
    aiperf_max_tokens,
    aiperf_prefix,
)
from kvbudget.results.recorded_aiperf_warmup import WARMUP, split_warmup, unrecorded_warmup_note
from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    cap_reached,
    dig,
    fewer_rows,
    finish_columns,
    json_lines,
    load_json,
    max_tokens_note,
    number,
    time_limit_note,
)
from kvbudget.results.recorded_guidellm_prefix import SharedPrefix
from kvbudget.results.recorded_guidellm_turns import with_history
from kvbudget.results.recorded_idle import closed_loop_idle_note
from kvbudget.results.recorded_refusals import say_context_refusals
from kvbudget.results.recording import (
    WARMUP_FAILED_PREFIX,
    RecordedStage,
    Recording,
    build_recording,
    is_warmup,
)
from kvbudget.workloads.arrivals import MAX_SPAN_S
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.traces.report import DROP_FAILED, DROP_ZERO_OUTPUT
from kvbudget.workloads.workload import Workload

FloatArray = npt.NDArray[np.float64]

FIXED_SCHEDULE = "fixed schedule"
"""The stage label of a ``--fixed-schedule`` phase (a trace replayed at its timestamps)."""

AGENTIC_REPLAY = "agentic replay"
"""The stage label of a phase run by AIPerf's ``agentic_replay`` timing (trajectories of a
trace replayed turn by turn)."""

AGENTIC_SCENARIOS = frozenset({"inferencex-agentx-mvp"})
"""AIPerf 0.13.0's ``--scenario`` names that lock ``agentic_replay`` timing
(``aiperf/common/scenario/registry.py``, ``inferencex_agentx_mvp.py``: its one scenario)."""

USER_CENTRIC = "user-centric"
"""The stage label's start for a phase run by AIPerf's user-centric rate timing
(``--user-centric-rate``: a phase of ``type`` ``user_centric``)."""

SUMMARY_NAME = "profile_export_aiperf.json"
"""AIPerf's summary beside the records (``<prefix>_aiperf.json`` with ``--profile-export-
prefix``)."""


def _metric(path: Path, line: int, metrics: Mapping[str, Any], name: str,
            scale: float = 1.0) -> float:
    """A metric's value (``{"value": x, "unit": u}``), NaN when absent; ms to seconds via
    ``scale``."""
    entry = metrics.get(name)
    if entry is None:
        return math.nan
    if not isinstance(entry, dict):
        raise TraceError(path, "must be an object with a value", line=line,
                         field=f"metrics.{name}")
    unit = entry.get("unit")
    x = number(entry.get("value"), path, f"metrics.{name}.value")
    if scale != 1.0 and unit not in (None, "ms"):
        raise TraceError(path, f"unit {unit!r}, expected ms", line=line,
                         field=f"metrics.{name}.unit")
    return x * scale


def _summary_path(path: Path) -> Path:
    stem = path.name.removesuffix(".jsonl")
    beside = path.with_name(f"{stem}_aiperf.json")
    return beside if beside.is_file() else path.with_name(SUMMARY_NAME)


def _summary(path: Path) -> dict[str, Any]:
    summary = _summary_path(path)
    if not summary.is_file():
        return {}
    doc = load_json(summary)
    return doc if isinstance(doc, dict) else {}


def _stage(path: Path, summary: Mapping[str, Any]) -> RecordedStage:
    """The profiling phase's load (``path``: the summary file, named in errors)."""
    found = _profiling(summary)
    if found is None:
        loadgen = dig(summary, "input_config", "loadgen")  # AIPerf before its phases
        if not isinstance(loadgen, dict):
            return RecordedStage("", "unknown", None, None)
        found = (-1, {**loadgen, "type": "concurrency" if loadgen.get("request_rate") is None
                                 else "request_rate"})
    k, phase = found
    where = f"input_config.phases[{k}]" if k >= 0 else "input_config.loadgen"
    if _agentic_source(summary, phase, where):
        lanes = phase.get("concurrency", 1)  # ConcurrencyPhase's default: 1
        return RecordedStage(f"{AGENTIC_REPLAY}, {lanes} lane{'s' * (lanes != 1)}"
                             if isinstance(lanes, int) and not isinstance(lanes, bool)
                             else AGENTIC_REPLAY, "open")
    if phase.get("type") == "fixed_schedule":  # sent at the trace's timestamps
        conc_f = number(phase.get("concurrency"), path, f"{where}.concurrency")
        if math.isnan(conc_f):
            return RecordedStage(FIXED_SCHEDULE, "open", None, None)
        if conc_f < 1 or not conc_f.is_integer():
            raise TraceError(path, f"must be a whole number >= 1, got "
                             f"{phase.get('concurrency')!r}", field=f"{where}.concurrency")
        return RecordedStage(f"{FIXED_SCHEDULE}, concurrency {int(conc_f)}", "capped", None,
                             int(conc_f))
    rate_key = "rate" if "rate" in phase else "request_rate"
    rate = number(phase.get(rate_key), path, f"{where}.{rate_key}")
    conc_f = number(phase.get("concurrency"), path, f"{where}.concurrency")
    if not math.isnan(rate) and rate <= 0:
        raise TraceError(path, f"must be > 0, got {phase.get(rate_key)!r}",
                         field=f"{where}.{rate_key}")
    if not math.isnan(conc_f) and (conc_f < 1 or not conc_f.is_integer()):
        raise TraceError(path, f"must be a whole number >= 1, got {phase.get('concurrency')!r}",
                         field=f"{where}.concurrency")
    conc = None if math.isnan(conc_f) else int(conc_f)
    if phase.get("type") == "user_centric" and not math.isnan(rate):
        users = phase.get("users")
        label = f"{USER_CENTRIC}, {users} user{'s' * (users != 1)}, {rate:g} req/s" \
            if isinstance(users, int) and not isinstance(users, bool) else \
            f"{USER_CENTRIC}, {rate:g} req/s"
        return (RecordedStage(f"{label}, concurrency {conc}", "capped", rate, conc)
                if conc is not None else RecordedStage(label, "open", rate, None))
    if phase.get("type") == "concurrency" and conc is not None:
        return RecordedStage(f"concurrency {conc}", "closed", None, conc)
    if not math.isnan(rate) and conc is not None:
        return RecordedStage(f"{rate:g} req/s, concurrency {conc}", "capped", rate, conc)
    if not math.isnan(rate):
        return RecordedStage(f"{rate:g} req/s", "open", rate, None)
    return RecordedStage("", "unknown", None, None)


def _agentic_source(summary: Mapping[str, Any], phase: Mapping[str, Any],
                    where: str) -> str | None:
    """Where the summary says the profiling phase ran AIPerf's ``agentic_replay`` timing
    (None: it did not).

    AIPerf 0.13.0 picks a phase's timing strategy from its ``timing_mode`` when set, else from
    its ``type`` (``aiperf/timing/config.py``, ``_is_agentic_replay``, ``_phase_timing_mode``);
    a ``--scenario`` that locks ``agentic_replay`` stamps it onto every profiling phase of the
    default ``concurrency`` shape (``aiperf/common/scenario/validator.py``), and the summary
    keeps what was set (``metrics_json_exporter.py``: ``input_config`` dumped with
    ``exclude_unset``): the phase's ``timing_mode``, else the scenario's name."""
    if phase.get("timing_mode") == "agentic_replay":
        return f"{where}.timing_mode"
    scenario = dig(summary, "input_config", "scenario")
    if scenario in AGENTIC_SCENARIOS and phase.get("type", "concurrency") == "concurrency" \
            and not phase.get("adaptive_scale"):
        return f"input_config.scenario {scenario!r}"
    return None


LINKED_TURNS = ("its records link each later turn to the one before it (x_correlation_id, "
                "turn_index), so the replay sends a later turn no sooner than the turn before "
                "it ended plus the gap recorded between them: a slower simulated server delays "
                "it as AIPerf would have, a faster one cannot bring it sooner than recorded")
"""How a stage whose records link their turns is replayed (said in place of "does not
delay")."""


def _agentic_note(label: str, summary: Mapping[str, Any], linked: bool = False) -> str | None:
    """What an ``agentic_replay`` phase sent and how it is replayed (None for another phase).

    AIPerf 0.13.0's ``AgenticReplayStrategy`` (``aiperf/timing/strategies/agentic_replay.py``)
    runs ``--concurrency`` lanes, each replaying a trajectory of the trace from a sampled
    instant: a turn goes its recorded delay after the turn before it ended, a subagent's when
    its parent forks it, and a lane that drains starts the next trajectory. kvbudget simulates
    no such sessions, so the requests are offered at their recorded sends, and that is said."""
    if not label.startswith(AGENTIC_REPLAY):
        return None
    found = _profiling(summary)
    source = _agentic_source(summary, found[1], f"input_config.phases[{found[0]}]") \
        if found else None
    return (f"stage '{label}': AIPerf's agentic_replay timing ({source}): each lane replays "
            "a trajectory of the trace, a turn sent its recorded delay after the turn before "
            "it ended (a subagent's when its parent forked it), a drained lane starting the "
            "next trajectory; kvbudget simulates no such sessions: replayed as an open loop at "
            "AIPerf's recorded sends, "
            + (LINKED_TURNS if linked else "so a slower simulated server does not delay the "
               "later turns as it would have, nor a faster one bring them sooner"))


def _user_centric_note(label: str, summary: Mapping[str, Any],
                       linked: bool = False) -> str | None:
    """What a user-centric phase sent and how it is replayed (None for another phase).

    AIPerf 0.13.0's ``UserCentricStrategy`` (``aiperf/timing/strategies/user_centric_rate.py``)
    runs ``--num-users`` N users sharing ``--user-centric-rate`` R: each user's turns are
    ``N / R`` s apart, its next turn scheduled only when the answer to the one before it
    returned (``handle_credit_return``: at ``max(now, last due + gap)``), new users joining on a
    fixed schedule as others finish; ``--concurrency`` caps the users whose conversations are
    open at once (``credit/issuer.py``: a session slot taken at a first turn, released at the
    last, ``credit/callback_handler.py``). kvbudget simulates no such users, so the requests
    are offered at their recorded sends, and that is said."""
    if not label.startswith(USER_CENTRIC):
        return None
    phase = _profiling_phase(summary) or {}
    rate, users = phase.get("rate"), phase.get("users")
    conc = phase.get("concurrency")
    gap = (f" {users / rate:g} s apart (N / R)" if isinstance(users, int) and
           isinstance(rate, int | float) and rate > 0 else "")
    times = "recorded issues" if isinstance(conc, int) else "recorded sends"
    capped = (f"; at most {conc} users' conversations open at once (--concurrency: a session "
              "slot held from a user's first turn to its last), "
              + ("replayed so" if linked else f"replayed as at most {conc} requests in flight")
              ) if isinstance(conc, int) else ""
    flags = " ".join(f"{flag} {v:g}" for flag, v in (("--user-centric-rate", rate),
                                                      ("--num-users", users))
                     if isinstance(v, int | float) and not isinstance(v, bool))
    return (f"stage '{label}': AIPerf's user_centric timing ({flags}): each simulated user sends its conversation's turns{gap}, "
            "a turn scheduled when the answer to the one before it returned (at once if that "
            "answer came late), new users joining on a fixed schedule; kvbudget simulates no "
            f"such users: replayed as an open loop at AIPerf's {times}, "
            + (LINKED_TURNS if linked else "so a slower simulated server does not delay a "
               "user's later turns as it would have, nor a faster one bring a late turn "
               "sooner") + capped)


UNRECORDED_CANCELS = (
    "AIPerf writes no record of the requests it cancels when its grace period ends: any the "
    "server was still serving then are not in the files (its log counts them), so the replay "
    "offers only the requests that ended in time, less load than the server carried")
"""AIPerf 0.13.0 ``workers/worker.py`` (``_on_credit_drop_message_task``'s ``finally``): a
credit cancelled by ``cancel_all_credits`` is returned without a record ("Cancelled credits are
excluded from the barrier target, so they need no record")."""


def _grace_s(summary: Mapping[str, Any]) -> float:
    """The profiling phase's grace period: how long AIPerf waits for the requests in flight
    after its duration before cancelling them. AIPerf 0.13.0 waits the phase's time left plus
    ``grace_period_sec or 0`` (``timing/phase/lifecycle.py``, ``time_left_in_seconds``), the
    phase's ``grace_period`` (``timing/config.py``); the command line sets it to
    ``--benchmark-grace-period`` (30 s by default) with ``--benchmark-duration``; before its
    phases, ``input_config.loadgen.benchmark_grace_period``."""
    phase = _profiling_phase(summary)
    grace = (phase.get("grace_period") if phase is not None
             else dig(summary, "input_config", "loadgen", "benchmark_grace_period"))
    if isinstance(grace, int | float) and not isinstance(grace, bool) and grace >= 0:
        return float(grace)
    return 0.0


def _time_limit(summary: Mapping[str, Any], num_sent: int) -> tuple[float, str] | None:
    """The profiling phase's ``--benchmark-duration`` when it stopped the phase: set, and
    fewer requests sent than its ``--request-count`` (AIPerf 0.13.0 ``config/phases.py``:
    ``duration`` "Stop after this time elapsed", ``requests`` "Stop after this many requests
    sent"; ``input_config.loadgen.benchmark_duration`` before its phases)."""
    phase = _profiling_phase(summary)
    loadgen = dig(summary, "input_config", "loadgen")
    if phase is not None:
        seconds, requests = phase.get("duration"), phase.get("requests")
    elif isinstance(loadgen, dict):
        seconds, requests = loadgen.get("benchmark_duration"), loadgen.get("request_count")
    else:
        return None
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return None
    if isinstance(requests, int) and not isinstance(requests, bool) and num_sent >= requests:
        return None
    return float(seconds), "--benchmark-duration"


def _fixed_schedule_note(label: str, summary: Mapping[str, Any], num_sent: int) -> str | None:
    """What a ``--fixed-schedule`` phase sent and how it is replayed (None for another phase).

    AIPerf 0.13.0 sends each trace entry at its timestamp less the schedule's zero after the
    phase starts (``aiperf/timing/strategies/fixed_schedule.py``, ``setup_phase`` and
    ``_timestamp_to_perf_sec``): the zero is the first timestamp sent with ``auto_offset`` (the
    phase's default, ``config/phases.py`` ``FixedSchedulePhase``), else ``start_offset``, else
    0 ms; the dataset keeps only the entries stamped within ``start_offset`` .. ``end_offset``
    (``dataset/loader/base_trace_loader.py``, ``_timestamp_within_offsets``: both ends included). The records' ``request_start_ns`` are those sends,
    AIPerf's own lateness behind the timestamps included, and the zero only delays the first
    send on an idle server, so the requests are offered at their recorded sends."""
    phase = _profiling_phase(summary)
    if phase is None or phase.get("type") != "fixed_schedule":
        return None
    first, last = phase.get("start_offset"), phase.get("end_offset")
    window = ""
    if first is not None or last is not None:
        window = (f", only the entries stamped {first if first is not None else 'from the start'}"
                  f" .. {last if last is not None else 'the end'} ms "
                  "(--fixed-schedule-start-offset/--fixed-schedule-end-offset)")
    zero = ("its first timestamp (auto_offset)"
            if phase.get("auto_offset", first is None)
            else f"{first} ms (--fixed-schedule-start-offset)" if first is not None
            else "0 ms of the trace")
    conc = phase.get("concurrency")
    capped = (f"; at most {conc} in flight (--concurrency), as replayed: a request due while "
              "all were busy went when one freed, and is offered no sooner than that recorded "
              "send") if isinstance(conc, int) and not isinstance(conc, bool) else ""
    return (f"stage '{label}': AIPerf sent the {num_sent} requests at their trace "
            f"timestamps (--fixed-schedule{window}), the schedule's zero at {zero}: replayed as "
            "an open loop at AIPerf's recorded sends (its own delay behind each timestamp "
            "included), from the first send; the idle time before it is not simulated"
            f"{capped}")


def _ramp_s(phase: Mapping[str, Any], key: str) -> float | None:
    """A phase's ramp's seconds (``{"duration": D, ...}``, or the shorthand ``D``), or None."""
    ramp = phase.get(key)
    duration = ramp.get("duration") if isinstance(ramp, Mapping) else ramp
    return float(duration) if isinstance(duration, int | float) and \
        not isinstance(duration, bool) and duration > 0 else None


def _ramped(summary: Mapping[str, Any], stage: RecordedStage,
            said: list[str]) -> RecordedStage:
    """The stage as replayed (its notes appended to ``said``), for a profiling phase that
    ramped its load (AIPerf 0.13.0 ``timing/phase/runner.py`` ``_create_rampers``):
    ``--concurrency-ramp-duration D`` (``concurrency_ramp``) starts its closed loop at 1 user
    and adds one at a time, linearly, until its ``--concurrency`` C at D s, so a closed loop of
    C from the start would load the first D s more than AIPerf did: replayed as an open loop at the recorded sends, at most C in
    flight; ``--request-rate-ramp-duration D`` (``rate_ramp``) raises the rate linearly from
    ``rate x 0.1 s / D`` to its ``rate`` over D s: its sends are replayed as recorded (an open
    loop), the label says the ramp; ``--prefill-concurrency P`` (``prefill_concurrency``) held
    back every request while P were waiting for their first token, which is not simulated."""
    phase = _profiling_phase(summary)
    if phase is None or stage.load == "unknown":
        return stage
    users_s, rate_s = _ramp_s(phase, "concurrency_ramp"), _ramp_s(phase, "rate_ramp")
    if users_s is not None and stage.max_concurrency is not None:
        users = stage.max_concurrency
        label = f"{stage.label}, ramped from 1 over {users_s:g} s"
        said.append(
            f"stage '{label}': AIPerf started with 1 user and added one at a time up to {users} "
            f"over the first {users_s:g} s (--concurrency-ramp-duration): "
            + ("replayed as an open loop at the recorded sends, at most "
               f"{users} in flight (a closed loop of {users} from the start would load the "
               "ramp more than AIPerf did); a simulated server faster than the recorded one "
               "cannot send sooner than recorded, so compare its latencies"
               if stage.load == "closed" else
               f"the replay holds at most {users} in flight from the start"))
        stage = replace(stage, label=label,
                        load="capped" if stage.load == "closed" else stage.load)
    if rate_s is not None and stage.request_rate is not None:
        label = f"{stage.label}, ramped over {rate_s:g} s"
        said.append(f"stage '{label}': AIPerf raised its rate linearly to "
                     f"{stage.request_rate:g} req/s over the first {rate_s:g} s "
                     "(--request-rate-ramp-duration): the replay offers the requests at their "
                     "recorded sends, which followed the ramp")
        stage = replace(stage, label=label)
    prefill = phase.get("prefill_concurrency")
    if isinstance(prefill, int) and not isinstance(prefill, bool):
        said.append(f"--prefill-concurrency {prefill}: AIPerf held each request back while "
                     f"{prefill} were waiting for their first token, which the replay does "
                     "not: its requests go as the stage's load mode sends them")
    return stage


def _series(summary: Mapping[str, Any], stage: RecordedStage, said: list[str]) -> RecordedStage:
    """The stage as replayed (its note appended to ``said``) for a profiling phase whose rate
    followed ``--request-rate-series`` (``rate_series``: piecewise-linear ``qps`` points over
    ``time_s``, AIPerf 0.13.0 ``config/rate_series.py``; the phase has no ``rate``, so
    :func:`_stage` finds no load): an open loop at the recorded sends, which followed the
    series, at most its ``--concurrency`` in flight where it has one."""
    phase = _profiling_phase(summary)
    series = phase.get("rate_series") if phase is not None else None
    if stage.load != "unknown" or not isinstance(series, Mapping) or phase is None:
        return stage
    points = series.get("points")
    qps: list[float] = [float(p["qps"]) for p in (points if isinstance(points, list) else [])
                        if isinstance(p, Mapping) and isinstance(p.get("qps"), int | float)
                        and not isinstance(p.get("qps"), bool)]
    conc = phase.get("concurrency")
    conc = conc if isinstance(conc, int) and not isinstance(conc, bool) and conc > 0 else None
    label = ("rate series" + (f" {min(qps):g} to {max(qps):g} req/s" if qps else "")
             + (f", concurrency {conc}" if conc else ""))
    said.append(f"stage '{label}': AIPerf varied its rate along --request-rate-series"
                + (f" ({len(qps)} points)" if qps else "") + ": the replay offers the requests "
                "at their recorded sends, which followed the series"
                + (f", at most {conc} in flight" if conc else ""))
    return RecordedStage(label, "capped" if conc else "open", None, conc)


def _profiling(summary: Mapping[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The summary's first profiling phase with its index in ``input_config.phases``, or
    None."""
    phases = dig(summary, "input_config", "phases")
    return next(((k, p) for k, p in enumerate(phases) if isinstance(p, dict)
                 and p.get("kind", p.get("name")) == "profiling"), None) \
        if isinstance(phases, list) else None


def _profiling_phase(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The summary's first profiling phase (``input_config.phases``), or None."""
    found = _profiling(summary)
    return None if found is None else found[1]


def _turns_held(records: list[tuple[int, Any]], summary: Mapping[str, Any],
                stage: RecordedStage, said: list[str]) -> RecordedStage:
    """The stage as replayed (its note appended to ``said``) for a closed loop of multi-turn
    conversations (``--conversation-turn-mean``): AIPerf 0.13.0 holds a user's session slot
    for its whole conversation (``credit/issuer.py``, ``credit/callback_handler.py``) and
    sends each later turn its ``--conversation-turn-delay-mean`` after the turn before
    returned (the dataset's ``turn_delay``), so its users sat idle between turns where a
    closed loop's would send at once. Replayed so: the loop's users hold their conversations
    (``Conversations.held``), each later turn sent the gap recorded after the turn before it
    ended, a new conversation when a user's last turn ended; the label says multi-turn (a
    turn delay the summary gives as 0 keeps the label and says nothing)."""
    later = sum(isinstance(t := r.get("metadata", {}).get("turn_index"), int)
                and not isinstance(t, bool) and t > 0 for _, r in records
                if isinstance(r, dict) and isinstance(r.get("metadata"), dict))
    if stage.load != "closed" or not later:
        return stage
    datasets = dig(summary, "input_config", "datasets")
    delays = [d.get("turn_delay") for d in datasets if isinstance(d, dict)] \
        if isinstance(datasets, list) else []
    means = [d.get("mean") for d in delays if isinstance(d, dict)]
    if means and all(m == 0 for m in means):
        return stage
    told = (f" ({', '.join(f'{m:g}' for m in means)} ms on average)"
            if means and all(isinstance(m, int | float) for m in means) else "")
    label = f"{stage.label}, multi-turn"
    said.append(
        f"stage '{label}': {later} of the {len(records)} records are later turns of their "
        f"conversations, each sent its turn delay{told} after the turn before returned, its "
        f"user held meanwhile (AIPerf keeps a user's session slot for the whole "
        f"conversation): replayed so, {stage.max_concurrency} users each sending its "
        "conversation's turns in order, a later turn the gap recorded after the turn before "
        "it ended (AIPerf's delay and its own overhead), a new conversation when its last "
        "turn ended; so a faster simulated server sends sooner and a slower one later, as "
        "AIPerf would have")
    return replace(stage, label=label)


def _prompt_tokens(path: Path, line: int, metrics: Mapping[str, Any]) -> tuple[float, float]:
    """A record's prompt tokens: the server's count (``usage_prompt_tokens``: what it
    prefilled and held, a chat template's tokens included) where it reports one, else AIPerf's
    own count of the prompt's text (``input_sequence_length``, or ``error_isl`` for a failed
    request); and AIPerf's count."""
    own = _metric(path, line, metrics, "input_sequence_length")
    if math.isnan(own):
        own = _metric(path, line, metrics, "error_isl")
    server = _metric(path, line, metrics, "usage_prompt_tokens")
    return (own if math.isnan(server) else server), own


def _with_prompt_note(rec: Recording, prompt: FloatArray, own: FloatArray) -> Recording:
    """The recording with a note where the server's prompt counts (taken) differ from AIPerf's
    (``input_sequence_length``, which its summary's ISL averages): a chat endpoint's template
    adds tokens AIPerf does not count."""
    both = np.isfinite(prompt) & np.isfinite(own)
    more = float((prompt[both] - own[both]).sum())
    if not both.any() or more == 0:
        return rec
    return replace(rec, notes=(*rec.notes, (
        f"prompt tokens: the server's count (usage_prompt_tokens: what it prefilled, a chat "
        f"template's tokens included), {more / both.sum():+.1f} a request on average beside "
        "AIPerf's own count of the text (input_sequence_length, its summary's ISL)")))


def _warmup_notes(summary: Mapping[str, Any], num_warmup: int) -> list[str]:
    """How the warm-up records were read: simulated, not measured; or missing
    (:func:`unrecorded_warmup_note`)."""
    if num_warmup:
        return [f"{num_warmup} warm-up requests simulated (they loaded the server) and left "
                "out of the measured statistics, as AIPerf does"]
    said = unrecorded_warmup_note(summary, num_warmup)
    return [said] if said else []


def _asked_exact(summary: Mapping[str, Any]) -> bool:
    """Whether every request asked for exactly its ``max_tokens``: ``ignore_eos`` true and no
    ``stop`` / ``stop_token_ids`` among the extra inputs (``--extra-inputs``), so a completed
    one ended at ``max_tokens`` and at no end-of-sequence token or stop."""
    extra = _extra_inputs(summary)
    return extra.get("ignore_eos") is True and not any(
        k in extra for k in ("stop", "stop_token_ids"))


def _capped_tokenizer_counts(output: FloatArray, recorded: FloatArray | None,
                             from_server: npt.NDArray[np.bool_],
                             notes: list[str], exact: Any = False) -> FloatArray:
    """The output counts, AIPerf's own ones above the request's ``max_tokens`` read as it.

    AIPerf asks the server for its usage on every streaming run from 0.13.0
    (``endpoints/openai_completions.py``: ``stream_options.include_usage`` set by default);
    up to 0.12.0 only with ``--use-server-token-count`` (0.12.0 ``config/endpoint.py``,
    ``USE_SERVER_TOKEN_COUNT = False``), so a 0.12 run's ``output_sequence_length`` is its
    tokenizer's count of the answer's text, encoded again (``records/inference_result_parser.py``,
    ``_compute_client_side_token_counts``; ``add_special_tokens=False``). Text encoded again
    need not give back the tokens the server made, and can count more than the request's
    ``max_tokens``, which the server never exceeds: those are read as ``max_tokens`` and said.
    Where every request asked for exactly its ``max_tokens`` (``exact``, per request: ignore_eos,
    no stop, completed), a count below it is read as it too. The server's own counts
    (``usage_completion_tokens``) are kept as they are."""
    if recorded is None:
        return output
    limit = np.asarray(recorded, dtype=np.float64)
    own = ~from_server & np.isfinite(limit)
    over, under = own & (output > limit), own & (output < limit) & exact
    if not (over.any() or under.any()):
        return output
    said = []
    if over.any():
        said.append(f"above the request's max_tokens for {int(over.sum())} (by up to "
                    f"{float((output[over] - limit[over]).max()):g}): the server makes at most "
                    "max_tokens")
    if under.any():
        said.append(f"below it for {int(under.sum())} completed ones (by up to "
                    f"{float((limit[under] - output[under]).max()):g}), whose ignore_eos with "
                    "no stop made the server generate exactly max_tokens")
    notes.append(
        f"output tokens: of {len(output)} requests AIPerf's own count (output_sequence_length: "
        "its tokenizer's count of the answer's text, the server's usage not asked for: AIPerf "
        f"before 0.13 asks only with --use-server-token-count) is {'; '.join(said)}; they "
        "are read as max_tokens")
    return np.where(over | under, limit, output)


def _phase_type(summary: Mapping[str, Any]) -> str:
    """The profiling phase's arrival pattern (``constant``, ``poisson``, ...), or ``""``."""
    phase = _profiling_phase(summary)
    return "" if phase is None else str(phase.get("type") or "")


def _capped_due(stage: RecordedStage, pattern: str, sent: FloatArray, end: FloatArray,
                profiling: npt.NDArray[np.bool_], seed: int,
                notes: list[str]) -> tuple[FloatArray, RecordedStage]:
    """When each request of a capped stage (``--request-rate R --concurrency C``) was due,
    from its send times ``sent`` and ends ``end`` (seconds, one clock), and the stage paced by
    its ticks.

    AIPerf 0.13.0 paces a capped phase by its rate's ticks (absolute targets: each tick's time
    is set before its credit is tried) and, at a tick when all C slots are busy, skips it: the
    waiting request goes at the first later tick that finds a slot, with no catch-up
    (``aiperf/timing/strategies/request_rate.py``, ``RequestRateStrategy.execute_phase``,
    lines 233-310; ``aiperf/credit/issuer.py`` ``try_issue_credit``, lines 358-411, returns
    None without a slot). So the sends are the schedule's ticks until C were in flight, and
    after that follow the recorded server's finishes: replayed as sent, a faster simulated
    server could not send sooner. When C were in flight, the k-th request of the phase is
    offered at the schedule's k-th tick (the first send at the first): ``constant`` ticks are
    ``k / R`` apart, ``poisson`` ones are drawn again (AIPerf's draws are not in the file); the
    stage's ``tick_pattern`` has the simulation send only at ticks and skip the busy ones, as
    AIPerf does. Another pattern keeps the sends, said."""
    rows = np.flatnonzero(profiling)
    order = rows[np.argsort(sent[rows], kind="stable")]
    if pattern in ("constant", "poisson"):
        stage = replace(stage, tick_pattern=pattern)
    conc = stage.max_concurrency
    assert conc is not None and stage.request_rate is not None
    if not cap_reached(sent[order], end[order], conc):  # no request waited for a slot
        return sent, stage
    rate = stage.request_rate
    k = np.arange(len(order), dtype=np.float64)
    if pattern == "constant":
        ticks = k / rate
        said = f"constant, {1 / rate:g} s apart"
        how = "scheduled"
    elif pattern == "poisson":
        gaps = np.random.default_rng(np.random.SeedSequence(seed)).exponential(1 / rate,
                                                                                len(order))
        gaps[0] = 0.0
        ticks = np.cumsum(gaps)
        said = f"Poisson, drawn again with seed {seed}: AIPerf's draws are not in the file"
        how = "redrawn"
    else:
        notes.append(f"the {conc} concurrency slots were all busy and AIPerf skipped its "
                     f"{pattern or 'unknown'} schedule's ticks: each request is offered at its "
                     "recorded send time, after the recorded server freed a slot (a faster "
                     "simulated server cannot send sooner than the recorded one did)")
        return sent, stage
    due = sent.copy()
    due[order] = sent[order[0]] + ticks
    notes.append(f"all {conc} concurrency slots were busy at times, and AIPerf then skips its "
                 f"rate's ticks: the sends after that followed the recorded server, so the "
                 f"requests are offered at the ticks of the {rate:g} req/s schedule ({said}), "
                 "each at the first tick after its predecessor's that finds a slot free (a "
                 "tick that finds all busy is skipped, not caught up, as AIPerf does)")
    return due, replace(stage, send_times=how)


def _issued_due(stage: RecordedStage, pattern: str, issued: FloatArray, sent: FloatArray,
                end: FloatArray, measured: npt.NDArray[np.bool_],
                notes: list[str]) -> tuple[FloatArray, RecordedStage]:
    """When each request of a capped stage was due: when AIPerf issued it (its record's
    ``metadata.credit_issued_ns``; ``issued``, ``sent`` and ``end`` in seconds on one clock).

    AIPerf 0.13.0 stamps a credit's ``issued_at_ns`` as its issuer sends it
    (``aiperf/credit/issuer.py``, ``_issue_credit_internal``), which a capped phase does only at
    a tick of its rate that finds one of the C slots free (``try_issue_credit``;
    ``aiperf/timing/strategies/request_rate.py``, ``execute_phase``), and the worker writes it
    into the request's record (``aiperf/workers/worker.py``; ``RequestRecord.credit_issued_ns``,
    "when the credit was issued by the rate limiter"). So the issue times are the ticks AIPerf
    took, as it took them (its own lateness included): the requests are due then, and the
    stage's ``tick_pattern`` has the simulation send only at those ticks (past the last, at the
    schedule's next ones), skipping one that finds every slot busy. The ticks AIPerf skipped
    are not in the file, so where all C slots were busy a faster simulated server cannot send
    sooner than the recorded issues: said."""
    rows = np.flatnonzero(measured)
    conc, rate = stage.max_concurrency, stage.request_rate
    assert conc is not None and rate is not None
    ticked = pattern in ("constant", "poisson")
    stage = replace(stage, send_times="issued", tick_pattern=pattern if ticked else "")
    lag_ms = (sent[rows] - issued[rows]) * 1e3 if len(rows) else np.zeros(1)
    lag = f"{float(np.median(lag_ms)):.1f} ms (median; at most {float(lag_ms.max()):.0f} ms)"
    # a user_centric slot is a conversation's, held between its turns: requests say nothing
    if pattern != "user_centric" and not cap_reached(issued[rows], end[rows], conc):
        notes.append(f"the {conc} concurrency slots were never all busy (AIPerf issues a "
                     "request only to a free one): no request waited for a slot, and the "
                     f"requests are offered at their recorded sends, {lag} after AIPerf issued "
                     "them (metadata.credit_issued_ns): AIPerf's own delay, load the server "
                     "saw")
        return sent, replace(stage, send_times="recorded")
    when = (f"when a turn of its {rate:g} req/s user_centric schedule was due and found one "
            f"of the {conc} session slots free" if pattern == "user_centric" else
            f"the tick of its {pattern or 'unknown'} {rate:g} req/s schedule that found one of "
            f"the {conc} concurrency slots free")
    said = (f"AIPerf's records say when it issued each request (metadata.credit_issued_ns: "
            f"{when}): the requests are due at those times, as AIPerf "
            f"issued them, not at a schedule drawn again; its sends lagged them by {lag}, "
            "AIPerf's own delay, not simulated")
    if cap_reached(issued[rows], end[rows], conc):
        waited = ("a turn then waited for a session slot" if pattern == "user_centric" else
                  "the ticks AIPerf skipped then are not in the file")
        said += (f"; every one of the {conc} slots was busy at times, and {waited}: a request "
                 "is sent no sooner than its "
                 "recorded issue even "
                 "where the simulated server frees a slot sooner, so there the simulated "
                 "throughput cannot exceed the recorded one")
    if not ticked and pattern != "user_centric":  # its own note says how it is replayed
        said += (f"; the ticks of its {pattern or 'unknown'} schedule are not simulated: a "
                 "request waiting for a slot goes when one frees, no sooner than its issue")
    notes.append(said)
    return issued, stage


def _config(path: Path, summary: Mapping[str, Any]) -> dict[str, Any]:
    """What the summary (``path``) says of the run; a run of several models is refused: AIPerf
    sends each request to one of them (``--model a,b``, ``--model-selection-strategy``) and the
    records do not say which, so no one model can be simulated for them all."""
    config: dict[str, Any] = {}
    models = dig(summary, "input_config", "models", "items")
    if isinstance(models, list) and models and isinstance(models[0], dict):
        config["model"] = models[0].get("name")
        names = sorted({str(m.get("name"))[:60] for m in models if isinstance(m, dict)})
        if len(names) > 1:
            raise TraceError(path, f"the run sent its requests to {len(names)} models "
                             f"({', '.join(names[:4])}) and its records do not say which got "
                             "each: profile one model a run to validate or calibrate on it",
                             field="input_config.models.items")
    tokenizer = dig(summary, "input_config", "tokenizer", "name")  # --tokenizer
    if isinstance(tokenizer, str) and tokenizer.strip():
        config["tokenizer"] = tokenizer
    extra = _extra_inputs(summary)
    if isinstance(extra.get("ignore_eos"), bool):
        config["ignore_eos"] = extra["ignore_eos"]
    mt = extra.get("max_tokens")
    if isinstance(mt, int) and not isinstance(mt, bool) and mt >= 1:
        config["max_tokens"] = mt
    elif (osl := _fixed_osl(summary)) is not None:
        config["max_tokens"] = osl
    names = dig(summary, "input_config", "endpoint", "model_names")  # AIPerf before models
    if "model" not in config and isinstance(names, list) and names:
        if len(names) > 1:
            raise TraceError(path, f"the run sent its requests to {len(names)} models "
                             f"({', '.join(str(n)[:60] for n in names[:4])}) and its records do "
                             "not say which got each: profile one model a run to validate or "
                             "calibrate on it", field="input_config.endpoint.model_names")
        config["model"] = names[0]
    config["gpu"] = telemetry_gpu(summary)[0]
    config.update(_fleet(path, summary))
    return {k: v for k, v in config.items() if v is not None}


def _fixed_osl(summary: Mapping[str, Any]) -> int | None:
    """The ``max_tokens`` every request of synthetic data was sent with where its output length
    was fixed (stddev 0), else None. AIPerf sets each turn's ``max_tokens`` to a draw of the
    output length, ``ceil`` of a normal draw, the mean itself at stddev 0 (0.1.1
    ``aiperf/dataset/composer/base.py:59-70`` ``_set_max_tokens``, ``dataset/utils.py:113-124``;
    0.13.0 the same from the dataset's ``osl``): the summary keeps it as
    ``input_config.input.prompt.output_tokens`` (0.1.x, data from no ``--input-file``) or a
    synthetic dataset's ``prompts.osl`` (0.13, one dataset). The 0.1.x summary leaves out a
    stddev not given (``json_exporter.py`` ``model_dump_json(exclude_unset=True)``), which is
    then AIPerf's default, 0 (``config_defaults.py`` ``OutputTokensDefaults.STDDEV = 0``, from
    its first ``OutputTokensConfig``, 28b75bef, to 0.1.1 and on)."""
    dists: list[Mapping[str, Any]] = []
    old = dig(summary, "input_config", "input", "prompt", "output_tokens")
    if isinstance(old, Mapping) and dig(summary, "input_config", "input", "file") is None:
        dists.append({"stddev": 0, **old})
    datasets = dig(summary, "input_config", "datasets")
    if isinstance(datasets, list) and len(datasets) == 1 and isinstance(datasets[0], Mapping) \
            and datasets[0].get("type") == "synthetic":
        osl = dig(datasets[0], "prompts", "osl")
        dists += [osl] if isinstance(osl, Mapping) else []
    for dist in dists:
        mean, stddev = dist.get("mean"), dist.get("stddev")
        if isinstance(mean, int | float) and not isinstance(mean, bool) and mean >= 1 and \
                stddev in (0, 0.0):
            return math.ceil(mean)
    return None


def _extra_inputs(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--extra-inputs`` every request carried in its body: ``input_config.endpoint.extra``,
    a dict (AIPerf 0.13.0 ``config/endpoint.py``, ``extra: dict[str, Any]``), or in AIPerf's
    first summaries ``input_config.input.extra``, a list of ``[name, value]`` pairs (AIPerf
    0.1.1 ``aiperf/common/config/input_config.py:75-89``, ``extra`` parsed by
    ``parse_str_or_dict_as_tuple_list``, ``config_validators.py:113``). AIPerf merged either
    into each body with ``payload.update(extra)`` (0.1.1 ``clients/openai/openai_chat.py:37``,
    ``openai_completions.py:29``): a later pair of one name wins, as ``dict`` does."""
    extra = dig(summary, "input_config", "endpoint", "extra")
    if extra is None:
        extra = dig(summary, "input_config", "input", "extra")
    if isinstance(extra, dict):
        return dict(extra)
    if isinstance(extra, list):
        return {p[0]: p[1] for p in extra
                if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], str)}
    return {}


def _urls(summary: Mapping[str, Any]) -> list[str]:
    """The server URLs the run sent to (``input_config.endpoint.urls``, one per ``--url``;
    ``endpoint.url`` in AIPerf's first summaries)."""
    urls = dig(summary, "input_config", "endpoint", "urls")
    if not isinstance(urls, list) or not urls:
        urls = [dig(summary, "input_config", "endpoint", "url")]
    return [u for u in urls if isinstance(u, str)]


def _fleet(path: Path, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The server the run was sent to (``target``) and, for several ``--url``, the fleet they
    make: one replica each behind round robin (``num_replicas``, ``router``).

    AIPerf 0.13.0 sends a run of several ``--url`` to them in turn: one ``RoundRobinURLSampler``
    (``aiperf/timing/url_samplers.py``, ``url_strategy`` ``round_robin``, its one strategy)
    made by the phase orchestrator for the whole run (``timing/phase_orchestrator.py``, when
    ``len(config.urls) > 1``) gives each credit the next index as the issuer sends it, a new
    conversation's first turn only (``credit/issuer.py``: later turns keep their session's
    URL), not per worker. A strategy the summary names other than round robin is refused."""
    urls = _urls(summary)
    if not urls:
        return {}
    if len(set(urls)) == 1:  # one server, however often named
        return {"target": urls[0]}
    if len(set(urls)) < len(urls):  # round robin over them: some servers get more turns
        raise TraceError(path, f"the run sent its requests in turn to {len(urls)} URLs, some "
                         f"named twice ({', '.join(u[:60] for u in urls[:4])}): the servers "
                         "got unequal shares, which a fleet of equal replicas behind round "
                         "robin does not simulate", field="input_config.endpoint.urls")
    strategy = next((s for s in (dig(summary, "input_config", "endpoint", key) for key in
                                 ("url_strategy", "url_selection_strategy"))
                     if s is not None), "round_robin")
    if strategy != "round_robin":
        raise TraceError(path, f"the run sent its requests to {len(urls)} URLs by "
                         f"{str(strategy)[:40]!r}; kvbudget replays AIPerf's round_robin only",
                         field="input_config.endpoint.url_strategy")
    return {"target": ", ".join(urls), "num_replicas": len(urls), "router": "round_robin"}


def _held(held: npt.NDArray[np.bool_], start: FloatArray,
          end: FloatArray) -> tuple[FloatArray, float]:
    """How long each ``held`` record kept its user, in seconds (those with an end), and the
    span of the records from the first send to the last end, in seconds (NaN with no end)."""
    held_s = (end[held] - start[held]) * 1e-9
    ends = end[np.isfinite(end)]
    span_s = float(ends.max() - start.min()) * 1e-9 if len(ends) else math.nan
    return held_s[np.isfinite(held_s)], span_s


def _failed(stage: RecordedStage, summary: Mapping[str, Any], status: list[str],
            dropped: npt.NDArray[np.bool_], start: FloatArray,
            end: FloatArray) -> tuple[RecordedStage, list[str]]:
    """The stage as replayed and a note when records ended with no output: failed ones (an
    ``error``: AIPerf's ``ErrorDetails``, e.g. ``TimeoutError`` at
    ``--request-timeout-seconds``) and cancelled ones (AIPerf 0.13.0's
    ``--request-cancellation-rate P --request-cancellation-delay D`` cancels P % of the
    requests D s after each was sent and writes a new record with no responses,
    ``transports/aiohttp_client.py`` ``_request_with_cancellation``:
    ``RequestCancellationError``, code 499; ``was_cancelled``). They are counted failed or
    cancelled, as AIPerf's summary counts them (``error_request_count``, its
    ``error_summary``), and not simulated (the server sent none of their tokens). In a closed
    loop each held its user until it ended: a failed one until its error (the session's
    ``aiohttp.ClientTimeout(total=--request-timeout-seconds)`` raises ``TimeoutError``, kept
    as ``ErrorDetails.from_exception``, the record ending then), a cancelled one until its
    cancel (the credit returns and frees the user's slot, cancelled or not,
    ``credit/callback_handler.py``); a closed loop replayed with them dropped would send the
    next request at once and simulate a server that answers every request, so the stage is
    replayed as an open loop at the recorded sends, at most its users in flight
    (:func:`_held_note`)."""
    failed = dropped & np.array([s.startswith("error") for s in status], dtype=bool)
    cancelled = dropped & np.array([s == "cancelled" for s in status], dtype=bool)
    if not (failed.any() or cancelled.any()):
        return stage, []
    kinds: dict[str, int] = {}
    for i in np.flatnonzero(failed).tolist():
        kind = status[i].removeprefix("error").strip(" ()") or "error"
        kinds[kind] = kinds.get(kind, 0) + 1
    endpoint = dig(summary, "input_config", "endpoint") or {}
    limit = endpoint.get("timeout_seconds", endpoint.get("timeout")) \
        if isinstance(endpoint, dict) else None
    timeout = (f" (--request-timeout-seconds {limit:g})" if isinstance(limit, int | float)
               and not isinstance(limit, bool) and "TimeoutError" in kinds else "")
    what = [f"{c} {k}" for k, c in kinds.items()]
    num_failed, num_cancelled = int(failed.sum()), int(cancelled.sum())
    if not num_cancelled:
        return _held_note(stage, _Ended(
            failed, "failed", what, timeout, "failed (num_failed)", "error_request_count",
            [f"{num_failed} failed"], ""), start, end)
    return _held_note(stage, _Ended(
        failed | cancelled, "ended",
        [*what, f"{num_cancelled} cancelled by AIPerf{_cancellation_said(summary)}"], timeout,
        "failed (num_failed) or cancelled (num_cancelled)",
        "error_request_count; its error_summary's RequestCancellationError",
        [*([f"{num_failed} failed"] if num_failed else []), f"{num_cancelled} cancelled"],
        "; AIPerf frees a user's slot when its request returns, cancelled or not"), start, end)


def _cancellation_said(summary: Mapping[str, Any]) -> str:
    """The profiling phase's ``--request-cancellation-rate`` and ``-delay`` as a clause, or ''
    where the summary does not tell them."""
    phase = _profiling_phase(summary)
    told = phase.get("cancellation") if phase is not None else None
    rate, delay = (told.get("rate"), told.get("delay")) if isinstance(told, dict) \
        else (None, None)
    if not isinstance(rate, int | float) or isinstance(rate, bool):
        return ""
    return (f" (--request-cancellation-rate {rate:g} %, --request-cancellation-delay "
            f"{delay if isinstance(delay, int | float) else 0:g} s)")


@dataclass(frozen=True)
class _Ended:
    """Records that ended with no output, as :func:`_held_note` says them: which (``held``),
    how they ended (``verb``), their kinds (``what``) and the timeout that ended them, the
    counts they go to and AIPerf's figures that count them, the stage label's parts, and
    why a user's slot was held until then (``freed``)."""

    held: npt.NDArray[np.bool_]
    verb: str
    what: list[str]
    timeout: str
    counted: str
    source: str
    label: list[str]
    freed: str


def _seconds(x: float, whole_from_s: float = 10) -> str:
    """A wait with its unit: whole milliseconds under a second (in tenths of a second 63 and
    144 ms read alike), tenths of a second up to ``whole_from_s``, whole seconds above."""
    if x < 1:
        return f"{x * 1e3:.0f} ms"
    return f"{x:.0f} s" if x >= whole_from_s else f"{x:.1f} s"


def _held_note(stage: RecordedStage, ended: _Ended, start: FloatArray,
               end: FloatArray) -> tuple[RecordedStage, list[str]]:
    """The note of :func:`_failed`, and a closed loop's stage replayed as an open loop at the
    recorded sends, at most its users in flight, the time the records held them said."""
    held_s, span_s = _held(ended.held, start, end)
    said = (f"{int(ended.held.sum())} requests {ended.verb} with no output "
            f"({', '.join(ended.what)}"
            + (f", after {_seconds(float(held_s.mean()), math.inf)} on average{ended.timeout}"
               if len(held_s) else "")
            + f"): counted {ended.counted}, as AIPerf's summary counts them ({ended.source}), "
            "and not simulated: the server sent none of their tokens")
    if stage.load != "closed" or not len(held_s):
        return stage, [said]
    label = ", ".join([stage.label, *ended.label])
    users = stage.max_concurrency
    return replace(stage, label=label, load="capped"), [
        f"{said}. stage '{label}': each held its user of the closed loop of {users} until it "
        f"{ended.verb} ({_seconds(float(held_s.sum()))} held in all, of the stage's "
        f"{_seconds(span_s)}{ended.freed}): replayed as an open loop at the recorded "
        f"sends, at most {users} in flight, so that this time is kept and the output tokens/s "
        "compared spans it on both sides (as a closed loop with them dropped the simulated "
        "users would send the next request at once, a server that answers every request); a "
        "simulated server faster than the recorded one cannot send sooner than recorded, so "
        "its completed count and output tokens/s agree by construction: compare its "
        "latencies"]


def _warmup_split(summary: Mapping[str, Any], stage: RecordedStage, status: list[str],
                  rows: npt.NDArray[np.int64], start: FloatArray, end: FloatArray,
                  counts: dict[str, int], failed: npt.NDArray[np.bool_]) -> tuple[
                      list[str], tuple[RecordedStage, ...], list[str]]:
    """:func:`split_warmup` over the simulated records (``rows``, of every record's
    ``status``, ``start`` and ``end`` in ns). A failed or cancelled record with a prompt and no
    output (``failed``) dropped for want of tokens is counted a failed request
    (``num_dropped_failed_request``), not a row of 0 output tokens: it was sent and failed. A
    closed warm-up stage with such a record is replayed as :func:`_failed` replays a profiling
    one: each held its user until it ended, so the stage is an open loop at its recorded sends,
    at most its users in flight (a closed loop with it dropped would send that user's next
    warm-up request at once)."""
    dropped = failed.copy()
    dropped[rows] = False
    key, num = "num_dropped_" + DROP_ZERO_OUTPUT.replace(" ", "_"), int(dropped.sum())
    if num and counts.get(key, 0) >= num:  # each said as what it was: failed, or cancelled
        cancelled = sum(status[i].endswith("cancelled") for i in np.flatnonzero(dropped))
        counts[key] -= num
        for name, n in ((DROP_FAILED.split(" (")[0], num - cancelled), ("cancelled", cancelled)):
            name = "num_dropped_" + name.replace(" ", "_")
            counts[name] = counts.get(name, 0) + n
        for k in [k for k, v in counts.items() if k.startswith("num_dropped_") and not v]:
            del counts[k]
    labels, stages, said = split_warmup(summary, stage, [status[r] for r in rows.tolist()])
    warm = np.array([s.startswith(WARMUP_FAILED_PREFIX) for s in status], dtype=bool)
    if stages[0].load != "closed" or not stages[0].label.startswith(WARMUP) or \
            not (held := dropped & warm).any():
        return labels, stages, said
    held_s, span_s = _held(held[warm], start[warm], end[warm])
    users = stages[0].max_concurrency
    said = [n.replace(f"replayed as a closed loop of {users},", "replayed as the next note "
                      "says,") for n in said]
    said.append(f"{counted(int(held.sum()), 'warm-up request')} failed with no output, not "
                f"simulated (the server sent none of their tokens): each held its user of the "
                f"warm-up's closed loop of {users} until it failed ("
                f"{_seconds(float(held_s.sum()))} held in all, of the warm-up's "
                f"{_seconds(span_s)}), so stage '{stages[0].label}' is replayed as an open loop "
                f"at its recorded sends, at most {users} in flight (as a closed loop with them "
                "dropped the user would send its next warm-up request at once)")
    return labels, (replace(stages[0], load="capped"), *stages[1:]), said


def _url_note(urls: list[str], status: list[str], order: FloatArray,
              later_turns: bool) -> str:
    """How a run sent to several URLs is simulated, and which URL AIPerf's round robin gave
    each request (``order``: when each was issued, warm-up included: the run's one sampler
    turns over both phases) with how many of each failed. The records do not name the URL;
    with later turns of conversations (which keep their first turn's URL) it is not told."""
    n = len(urls)
    head = (f"the run was sent to {n} servers in turn ({n} --url, AIPerf's round robin: "
            "aiperf/timing/url_samplers.py): simulated as a fleet of "
            f"{n} replicas of the one server simulated, behind round_robin")
    if later_turns:
        return (head + "; the records do not say which URL served each request (later turns "
                "of a conversation keep their first turn's URL)")
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[np.argsort(order, kind="stable")] = np.arange(len(order))
    counted = []
    dead = []
    for k, url in enumerate(urls):
        mine = [status[i] for i in np.flatnonzero(ranks % n == k).tolist()]
        bad = sum(st.startswith(("error", "cancelled")) for st in mine)
        counted.append(f"{url[:60]} {len(mine)} sent, {bad} failed")
        dead += [url[:60]] if mine and bad == len(mine) else []
    said = (f"{head}. In the order AIPerf issued them (the k-th to URL k mod {n}; the records "
            f"do not name the URL, so this holds if none issued is missing): "
            + "; ".join(counted))
    if dead:
        said += (f". {', '.join(dead)} answered none of its requests: the simulated fleet "
                 f"serves the completed ones on its {n} replicas in turn, where they all went "
                 "to the other URLs")
    return said


def _refuse_far_sends(path: Path, records: list[tuple[int, Any]], start: FloatArray) -> None:
    """Refuse records whose sends span over :data:`~kvbudget.workloads.arrivals.MAX_SPAN_S`,
    naming the one farthest from the run's middle send: a damaged send time (0, negative) of a
    failed request, not simulated, put every measured send 55 years after it."""
    if len(start) < 2 or float(np.ptp(start)) * 1e-9 <= MAX_SPAN_S:
        return
    far = int(np.argmax(np.abs(start - np.median(start))))
    raise TraceError(path, f"sent {abs(start[far] - np.median(start)) * 1e-9:.3g} s from the "
                     "run's other requests (its records span over ten years): a damaged send "
                     "time?", line=records[far][0], field="metadata.request_start_ns")


def _refuse_repeated_requests(path: Path, records: list[tuple[int, Any]]) -> None:
    """Refuse a record whose ``metadata.x_request_id`` another has: AIPerf's worker draws one
    for each request it sends (``aiperf/workers/worker.py``: ``x_request_id =
    str(uuid.uuid4())``), so a repeat is a line written twice, or files joined, which was read
    as one request more, its load simulated and its times measured twice."""
    seen: dict[str, int] = {}
    for line, rec in records:
        rid = dig(rec, "metadata", "x_request_id")
        if not isinstance(rid, str) or not rid:
            continue
        first = seen.setdefault(rid, line)
        if first != line:
            raise TraceError(path, f"repeats line {first}'s request ({rid!r}): AIPerf gives "
                             "each request it sends its own id, so one record was written "
                             "twice (a copy joined to the file?); remove the repeat",
                             line=line, field="metadata.x_request_id")


def _issued_ns(path: Path, line: int, meta: Mapping[str, Any]) -> float:
    """When AIPerf issued the request (``metadata.credit_issued_ns``, epoch nanoseconds; NaN
    without one). A credit is issued before the worker that takes it sends the request
    (``aiperf/workers/worker.py``: ``credit_issued_ns`` is the credit's ``issued_at_ns``, the
    request's ``request_start_ns`` stamped after it): one at or below zero, or after the send,
    was read as no issue time, the request then offered at its send without a word."""
    credit = meta.get("credit_issued_ns")
    if credit is None:
        return math.nan
    number_like = isinstance(credit, int | float) and not isinstance(credit, bool)
    issued = float(credit) if number_like else math.nan
    if not issued > 0 or not math.isfinite(issued):
        raise TraceError(path, f"must be epoch nanoseconds (> 0), got {credit!r}"[:120],
                         line=line, field="metadata.credit_issued_ns")
    sent = meta.get("request_start_ns")
    if isinstance(sent, int | float) and not isinstance(sent, bool) and 0 < sent < issued:
        raise TraceError(path, f"{(issued - sent) / 1e9:.6g} s after the request was sent "
                         "(metadata.request_start_ns): AIPerf issues a request before a "
                         "worker sends it", line=line, field="metadata.credit_issued_ns")
    return issued


def _sent_to_end_s(path: Path, line: int, start_ns: float, end_ns: float) -> float:
    """Seconds from a record's ``request_start_ns`` to its ``request_end_ns`` (NaN without an
    end), refused where the request would end before it was sent or over a day after: a
    damaged send time, which would otherwise move the request that far on the run's clock
    (its send before the others', or a conversation's turn a day after the one before)."""
    span_s = (end_ns - start_ns) * 1e-9
    if not math.isnan(span_s) and not 0 <= span_s <= MAX_MEASURED_S:
        raise TraceError(path, f"the request ends {span_s:g} s after it was sent "
                         f"(metadata.request_end_ns): {'before' if span_s < 0 else 'over a day'}",
                         line=line, field="metadata.request_start_ns")
    return span_s


def read_aiperf(path: Path, default_tier: str,
                max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read an AIPerf ``profile_export.jsonl`` (and its summary beside it, when present)."""
    records = json_lines(path)
    n = len(records)
    prompt, output, start, ttft, e2e, itl, end, issued, isl = (np.full(n, np.nan)
                                                               for _ in range(9))
    status: list[str] = []
    num_later_turns = 0  # requests after the first of their conversation
    cached = np.zeros(n)  # prompt tokens the server read from its prefix cache
    from_server = np.zeros(n, dtype=bool)  # the output count is the server's usage
    for i, (line, rec) in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("metadata"), dict):
            raise TraceError(path, "not an AIPerf record (no metadata object)", line=line,
                             field="metadata")
        meta = rec["metadata"]
        issued[i] = _issued_ns(path, line, meta)
        turn = meta.get("turn_index")
        num_later_turns += isinstance(turn, int) and not isinstance(turn, bool) and turn > 0
        metrics = rec.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise TraceError(path, "must be an object", line=line, field="metrics")
        try:
            t0 = number(meta.get("request_start_ns", meta.get("timestamp_ns")), path,
                        "metadata.request_start_ns")
            t1 = number(meta.get("request_end_ns"), path, "metadata.request_end_ns")
            p, isl[i] = _prompt_tokens(path, line, metrics)
            o_server = _metric(path, line, metrics, "usage_completion_tokens")
            o = o_server if not math.isnan(o_server) else _metric(
                path, line, metrics, "output_sequence_length")
            from_server[i] = not math.isnan(o_server)
            first = _metric(path, line, metrics, "time_to_first_token"
                            if "time_to_first_token" in metrics else "ttft", 1e-3)
            lat = _metric(path, line, metrics, "request_latency", 1e-3)
            itl[i] = _metric(path, line, metrics, "inter_token_latency", 1e-3)
            cached[i] = np.nan_to_num(_metric(path, line, metrics,
                                              "usage_prompt_cache_read_tokens"))
        except TraceError as exc:
            raise TraceError(path, exc.problem, line=line, field=exc.field) from None
        if math.isnan(t0):
            raise TraceError(path, "missing", line=line, field="metadata.request_start_ns")
        span_s = _sent_to_end_s(path, line, t0, t1)
        if math.isnan(lat):
            lat = span_s
        for name, value in (("time_to_first_token", first), ("request_latency", lat),
                            ("inter_token_latency", itl[i])):
            if not math.isnan(value) and not 0 <= value <= MAX_MEASURED_S:
                raise TraceError(path, f"{'negative' if value < 0 else 'implausible'} time: "
                                 f"{value * 1e3:g} ms", line=line, field=f"metrics.{name}")
        if not math.isnan(first) and not math.isnan(lat) and lat < first - 1e-9:
            raise TraceError(path, f"the request ends ({lat * 1e3:g} ms) before its first "
                             f"token ({first * 1e3:g} ms)", line=line,
                             field="metrics.request_latency")
        prompt[i], output[i], start[i], ttft[i], e2e[i] = p, (0 if math.isnan(o) else o), t0, \
            first, lat
        end[i] = t1 if not math.isnan(t1) else t0 + lat * 1e9 if not math.isnan(lat) else math.inf
        status.append(_status(rec, meta))
    _refuse_far_sends(path, records, start)
    _refuse_repeated_requests(path, records)
    _refuse_fewer_records(path, status)
    _refuse_unstreamed(path, ttft, e2e)
    rec = _recording(path, records, prompt, output, start, ttft, e2e, itl, status,
                     from_server, default_tier, max_output_rule, end, issued)
    rec = _with_cache_note(rec, prompt, cached)
    rec = _with_prompt_note(rec, prompt, isl)
    urls = _urls(_summary(path))
    if len(urls) > 1 and rec.config.get("num_replicas") == len(urls):
        rec = replace(rec, notes=(*rec.notes, _url_note(
            urls, status, np.where(np.isfinite(issued), issued, start), num_later_turns > 0)))
    if num_later_turns and rec.stages[0].label.startswith(FIXED_SCHEDULE):
        rec = replace(rec, notes=(*rec.notes, (
            f"{num_later_turns} of the {n} records are later turns of their conversations "
            "(metadata.turn_index > 0), which AIPerf's fixed schedule sends when the turn before "
            "ended (after its delay), not at a trace timestamp: the replay offers them at "
            "their recorded sends, so a slower simulated server does not delay them as it "
            "would have")))
    return rec


def _refuse_unstreamed(path: Path, ttft: FloatArray, e2e: FloatArray) -> None:
    """A run without ``--streaming`` (its summary's ``input_config.endpoint.streaming`` unset):
    AIPerf times each request's end (``request_latency``) but no first token, so nothing of it
    can be compared as TTFT and TPOT; refused saying so, not as a file of no measured
    request."""
    if np.isfinite(ttft).any() or not np.isfinite(e2e).any():
        return
    endpoint = dig(_summary(path), "input_config", "endpoint")
    if isinstance(endpoint, Mapping) and not endpoint.get("streaming"):
        raise TraceError(path, "AIPerf ran without --streaming (input_config.endpoint in "
                         f"{SUMMARY_NAME} has no streaming): its records time each request's "
                         "end (request_latency) but no first token, and kvbudget compares "
                         "TTFT, TPOT and E2E; record the run with --streaming")


def _with_cache_note(rec: Recording, prompt: FloatArray, cached: FloatArray) -> Recording:
    """The recording with a note of the prompt tokens the server served from its prefix cache
    (``usage_prompt_cache_read_tokens``: the server's ``prompt_tokens_details.cached_tokens``,
    AIPerf 0.10+ with a server that reports it), which the simulation, holding no prompt
    contents, cannot reuse: said, with how many, so that a TTFT simulated too high is
    explained by the file itself."""
    served = rec.workload.request_id
    hits, total = float(cached[served].sum()), float(np.nansum(prompt[served]))
    if hits <= 0 or total <= 0:
        return rec
    note = (f"the server served {hits:,.0f} of the {total:,.0f} prompt tokens "
            f"({100 * hits / total:.0f} %) from its prefix cache "
            "(usage_prompt_cache_read_tokens); the simulation has no prompt contents and "
            "caches none of them, so its prefill work and TTFT are too high for those requests")
    return replace(rec, notes=(*rec.notes, note),
                   counts={**rec.counts, "num_prompt_tokens_cached": int(hits)})


def _warmup_failed_note(status: list[str], kept: npt.NDArray[np.bool_]) -> str:
    """The note of the warm-up requests that failed or were cancelled (``status`` each
    record's, ``kept`` those simulated), by kind: AIPerf's summary counts them nowhere."""
    kinds: dict[str, int] = {}
    for s in status:
        if s.startswith(WARMUP_FAILED_PREFIX):
            kinds[s] = kinds.get(s, 0) + 1
    bad = np.array([s.startswith(WARMUP_FAILED_PREFIX) for s in status], dtype=bool)
    num, num_kept = int(bad.sum()), int((bad & kept).sum())
    return (f"{num} of the warm-up requests did not complete ("
            + "; ".join(f"{n} {k}" for k, n in kinds.items())
            + "), which AIPerf's summary counts nowhere (its error_request_count is the "
            f"profiling phase's): kept apart as failed in the warm-up stage (status "
            f"'{WARMUP_FAILED_PREFIX}...', counted num_warmup_failed); {num_kept} of them "
            f"simulated (with output tokens), {num - num_kept} not (no output)")


def _summary_count(summary: Mapping[str, Any], tag: str) -> int | None:
    """A count metric of AIPerf's summary (``tag``'s ``avg``, at the top or, in the 0.1.x
    layout, under ``records``), or None where it has none."""
    found = summary.get(tag, dig(summary, "records", tag))
    value = found.get("avg") if isinstance(found, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value >= 0 and value == int(value)):
        return None
    return int(value)


def _refuse_fewer_records(path: Path, status: list[str]) -> None:
    """Refuse records fewer than the summary beside them counts. AIPerf counts the profiling
    phase's records: ``request_count`` the valid ones, ``error_request_count`` the failed and
    cancelled ones (0.13.0 aiperf/metrics/types/request_count_metric.py:8-19,
    error_request_count.py:8-19, completed_request_count_metric.py:12-22: "Successful plus
    failed requests"), and its JSONL writer writes each of them, an error one always
    (post_processors/record_export_jsonl_writer.py:66-75); a warm-up record is counted in
    ``warmup_metrics``, not here. A copy with records cut otherwise reads as a smaller run."""
    summary = _summary(path)
    valid = _summary_count(summary, "request_count")
    if valid is None:
        return
    errors = _summary_count(summary, "error_request_count") or 0
    measured = sum(1 for s in status if s in ("completed", "cancelled") or s.startswith("error"))
    if measured < valid + errors:
        done = sum(1 for s in status if s == "completed")
        raise TraceError(path, fewer_rows(
            f"holds {measured} profiling records, but the summary beside it "
            f"({_summary_path(path).name}) counts {valid + errors} (request_count {valid}, "
            f"error_request_count {errors})",
            f"its request_count avg is set to {done} and error_request_count avg to "
            f"{measured - done} (its records answered, and failed or cancelled)", "records"))


def _error_text(rec: Any) -> str:
    """A record's error message (``error.message``), or ''."""
    err = rec.get("error") if isinstance(rec, dict) else None
    return str(err.get("message") or "") if isinstance(err, dict) else ""


def _status(rec: Mapping[str, Any], meta: Mapping[str, Any]) -> str:
    """A record's status: ``cancelled``, ``error (type)`` or ``completed``, a warm-up one's
    ``warmup`` where it completed and ``warmup cancelled`` or ``warmup error (type)`` where
    not (AIPerf 0.13.0 writes a warm-up phase's failed record as a profiling one's, its
    ``metadata.benchmark_phase`` ``warmup`` and its ``error`` kept:
    ``records/record_processor_service.py`` ``_create_metric_record_metadata``,
    ``post_processors/record_export_jsonl_writer.py`` ``process_record``; its summary's
    ``error_request_count`` is the profiling phase's). Any other phase's name as is."""
    phase = meta.get("benchmark_phase", meta.get("phase_kind", meta.get("credit_phase",
                                                                         "profiling")))
    if phase not in (None, "profiling", "warmup"):
        return str(phase)
    said = "completed"
    if meta.get("was_cancelled"):
        said = "cancelled"
    elif rec.get("error"):
        err = rec["error"]
        kind = err.get("type") if isinstance(err, dict) else None
        said = f"error ({kind})" if kind else "error"
    if phase == "warmup":
        return "warmup" if said == "completed" else WARMUP_FAILED_PREFIX + said
    return said


def _due_times(summary: Mapping[str, Any], stage: RecordedStage, start: FloatArray,
               end: FloatArray, issued: FloatArray, status: list[str],
               notes: list[str]) -> tuple[FloatArray, FloatArray, RecordedStage]:
    """Each request's send and due (arrival) time in seconds on one clock, and the stage as
    replayed. A capped stage (not a fixed schedule) whose every record carries
    ``credit_issued_ns`` is due when AIPerf issued it (:func:`_issued_due`), the clock's zero
    the earliest issue or send (its earliest send where no request waited for a slot); without them its due times are reconstructed
    (:func:`_capped_due`); any other stage is due at its sends."""
    capped = stage.load == "capped" and not stage.label.startswith(FIXED_SCHEDULE)
    measured = np.array([s == "completed" or s.startswith(("error", "cancelled"))
                         for s in status])
    if capped and len(issued) and bool(np.isfinite(issued).all()):
        origin = min(float(np.min(start)), float(np.min(issued)))
        sent = (start - origin) * 1e-9
        due, stage = _issued_due(stage, _phase_type(summary), (issued - origin) * 1e-9, sent,
                                 (end - origin) * 1e-9, measured, notes)
        if stage.send_times != "issued":  # offered at its sends (no request waited): their clock
            sent = (start - np.min(start)) * 1e-9
            return sent, sent, stage
        return sent, due, stage
    sent = (start - np.min(start)) * 1e-9
    if not capped:
        return sent, sent, stage
    datasets = dig(summary, "input_config", "datasets")
    seed = (datasets[0].get("random_seed") if isinstance(datasets, list) and datasets
            and isinstance(datasets[0], dict) else None)
    due, stage = _capped_due(
        stage, _phase_type(summary), sent, (end - np.min(start)) * 1e-9, measured,
        seed if isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0 else 0,
        notes)
    return sent, due, stage


def _columns(path: Path, prompt: Any, output: Any, arrival: Any, recorded: Any,
             default_tier: str, max_output_rule: MaxOutputRule | None,
             prefix: SharedPrefix | None) -> tuple[Workload, dict[str, int], list[str]]:
    """The records' workload (:func:`finish_columns`), with their prefix hashes if any."""
    return finish_columns(
        path, "aiperf", prompt=prompt, output=output, arrival=arrival,
        fields={"prompt_tokens": "input_sequence_length",
                "output_tokens": "usage_completion_tokens", "arrival_s": "request_start_ns",
                "max_output_tokens": "max_tokens"},
        default_tier=default_tier, max_output=recorded, max_output_rule=max_output_rule,
        # written as each record arrives, so in completion order (AIPerf 0.13.0
        # aiperf/post_processors/record_export_jsonl_writer.py, RecordExportJSONLWriter)
        completion_order=True, prefix=None if prefix is None else prefix.hashes,
        prefix_block_tokens=None if prefix is None else prefix.block_tokens)


def _run_notes(stage: RecordedStage, summary: Mapping[str, Any], num_measured: int,
               linked: bool, start: Any, end: Any) -> list[str]:
    """The notes of how the run was timed (a schedule, idle users of a closed loop: ``start``
    and ``end`` its profiling records'), of its GPU telemetry and of a missing summary."""
    notes = [n for n in (
        _fixed_schedule_note(stage.label, summary, num_measured)
        or _agentic_note(stage.label, summary, linked)
        or _user_centric_note(stage.label, summary, linked),
        closed_loop_idle_note(stage.label, stage.max_concurrency, start, end)
        if stage.load == "closed" and stage.max_concurrency and not linked else None,
        telemetry_gpu(summary)[1]) if n]
    if not summary:
        notes.append(f"no {SUMMARY_NAME} beside the records: load mode and server settings "
                     "unknown")
    return notes


def _recording(path: Path, records: list[tuple[int, Any]], prompt: Any, output: Any,
               start: Any, ttft: Any, e2e: Any, itl: Any, status: list[str],
               from_server: npt.NDArray[np.bool_], default_tier: str,
               max_output_rule: MaxOutputRule | None, end: Any, issued: Any) -> Recording:
    summary = _summary(path)
    stage = _stage(_summary_path(path), summary)
    config = _config(_summary_path(path), summary)
    notes: list[str] = []
    sent, arrival, stage = _due_times(summary, stage, start, end, issued, status, notes)
    stage = _turns_held(records, summary,
                        _ramped(summary, _series(summary, stage, notes), notes), notes)
    sent_bodies = aiperf_max_tokens(path, records)  # inputs.json: each body as sent
    recorded = (np.array(sent_bodies) if sent_bodies is not None else
                np.full(len(prompt), float(config["max_tokens"])) if "max_tokens" in config
                else None)
    failed = np.array([st.removeprefix(WARMUP_FAILED_PREFIX).startswith(("error", "cancelled"))
                       for st in status], dtype=bool)
    prompt = np.where(np.isnan(prompt) & failed & (output == 0), 0.0, prompt)  # dropped below
    missing_prompt = np.isnan(prompt)
    if missing_prompt.any():
        i = int(np.argmax(missing_prompt))
        raise TraceError(path, "missing", line=records[i][0],
                         field="metrics.input_sequence_length")
    output = _capped_tokenizer_counts(output, recorded, from_server, notes, exact=_asked_exact(
        summary) & np.isin(status, ["completed", "warmup"]))  # the completed, warm-up or not
    prefix, prefix_said = with_history(aiperf_prefix(path, summary, records, prompt.tolist()),
                                       aiperf_history(records, prompt.tolist()))
    workload, counts, warnings = _columns(path, prompt, output, arrival, recorded, default_tier,
                                          max_output_rule, prefix)
    rows = workload.request_id
    st = [status[r] for r in rows.tolist()]
    counts["num_warmup"] = sum(is_warmup(s) for s in st)
    # every failed record, those dropped for want of output too, as AIPerf's summary counts
    # them (error_request_count) and the vllm bench reader its num_failed
    counts["num_failed"] = sum(s.startswith("error") for s in status)
    counts["num_cancelled"] = status.count("cancelled")  # dropped ones too: see _failed
    # the warm-up's, which AIPerf counts nowhere: told apart by their status (warmup error ...)
    counts["num_warmup_failed"] = sum(s.startswith(WARMUP_FAILED_PREFIX) for s in status)
    version = summary.get("aiperf_version")
    kept = np.zeros(len(status), dtype=bool)
    kept[rows] = True
    stage, said_failed = _failed(stage, summary, status, ~kept, start, end)
    notes = [max_tokens_note(recorded, max_output_rule), *notes, *said_failed, *prefix_said]
    notes.extend(_warmup_notes(summary, counts["num_warmup"]))
    if counts["num_warmup_failed"]:
        notes.append(_warmup_failed_note(status, kept))
    server_counts = int(from_server[rows].sum())  # of the requests served, not those dropped
    if server_counts < len(rows):
        notes.append(f"output tokens: the server's usage count for {server_counts} of "
                     f"{len(rows)} requests, AIPerf's tokenizer count for the others")
    num_measured = len(rows) - counts["num_warmup"]
    limit = _time_limit(summary, num_measured)
    profiling = np.array([not is_warmup(s) for s in status])
    if limit and profiling.any():  # whatever the load: its sending stops, its grace ends
        # the phase's clock starts at its first send (the warm-up phase's sends before it)
        stage = replace(stage, time_limit_end_s=float(sent[profiling].min()) + limit[0],
                        grace_s=_grace_s(summary))
    said = limit and time_limit_note(
        stage.label, stage.load, *limit, num_measured,
        grace_s=stage.grace_s if stage.time_limit_end_s is not None else None)
    notes.extend([said] if said else [])
    if stage.time_limit_end_s is not None and stage.grace_s != math.inf:
        notes.append(UNRECORDED_CANCELS)
    conversations = aiperf_conversations(records, sent.tolist(),
                                         np.asarray(e2e, dtype=np.float64).tolist(),
                                         rows.tolist())
    notes.extend(_run_notes(stage, summary, num_measured, conversations is not None,
                            np.asarray(start)[profiling] * 1e-9,
                            np.asarray(end)[profiling] * 1e-9))  # epoch ns
    # the server's own error text (AIPerf 0.13.0 transports/aiohttp_client.py:165-171: a
    # non-2xx answer's body as ErrorDetails.message): its refusals for the model's context
    say_context_refusals((_error_text(rec) for _, rec in records), counts, notes, config)
    labels, stages, warm_said = _warmup_split(summary, stage, status, rows, np.asarray(start),
                                              np.asarray(end), counts, failed & (prompt > 0))
    return build_recording(path, "aiperf", workload, ttft=ttft[rows], e2e=e2e[rows], status=st,
                           stage=labels, itl_mean=itl[rows], config=config, counts=counts,
                           notes=[*notes, *warm_said, *warnings], stages=stages,
                           sent_s=sent[rows] - float(arrival.min()),
                           tool=f"aiperf {version}" if isinstance(version, str) else "aiperf",
                           conversations=conversations)
