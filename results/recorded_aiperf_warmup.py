"""AIPerf's warm-up phase run at a load of its own.

AIPerf 0.13.0 runs ``--warmup-request-count`` (or ``--warmup-duration``) requests as a phase of
their own before the profiling phase, at ``--warmup-concurrency``, ``--warmup-request-rate`` and
``--warmup-arrival-pattern`` where given (else the profiling phase's ``--concurrency``,
``--request-rate`` and ``--arrival-pattern``), and starts the profiling phase when the warm-up
phase has completed (``timing/phase/runner.py``: one phase after another). The summary keeps
both phases (``input_config.phases``: the ``warmup`` one with its ``type``, ``concurrency`` and
``rate``). A closed or capped profiling stage replayed with its warm-up records in it sends
them at the profiling phase's load: a warm-up of 1 user beside a profiling phase of 64 would be
replayed 64 at a time. Where the warm-up's load differs, its records are a stage of their own,
before the profiling one: a closed loop of its users (``concurrency`` phases), else an open
loop at their recorded sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbudget.results.recorded_fields import dig
from kvbudget.results.recording import RecordedStage, is_warmup

WARMUP = "warm-up"
"""The label a warm-up stage begins with."""


def _phase(summary: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    phases = dig(summary, "input_config", "phases")
    if not isinstance(phases, list):
        return None
    return next(
        (p for p in phases if isinstance(p, dict) and p.get("kind", p.get("name")) == kind), None
    )


def _load(phase: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return phase.get("type"), phase.get("concurrency"), phase.get("rate", phase.get("request_rate"))


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _rate(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def warmup_stage(summary: Mapping[str, Any], stage: RecordedStage) -> RecordedStage | None:
    """The warm-up phase's stage where it ran another load than the profiling phase's and the
    profiling stage (``stage``) is closed or capped; None otherwise (an open stage replays
    every record at its send, the warm-up's among them)."""
    warm, profiling = _phase(summary, "warmup"), _phase(summary, "profiling")
    if warm is None or profiling is None or stage.load not in ("closed", "capped"):
        return None
    if _load(warm) == _load(profiling):
        return None
    kind, users, rate = warm.get("type"), _whole(warm.get("concurrency")), _rate(_load(warm)[2])
    if kind == "concurrency" and users is not None:
        return RecordedStage(f"{WARMUP}, concurrency {users}", "closed", None, users)
    said = f"{WARMUP}, {rate:g} req/s" if rate is not None else WARMUP
    return RecordedStage(said + (f", concurrency {users}" if users else ""), "open", rate, None)


def split_warmup(
    summary: Mapping[str, Any], stage: RecordedStage, status: list[str]
) -> tuple[list[str], tuple[RecordedStage, ...], list[str]]:
    """Each record's stage label (``status`` in workload order), the stages in run order and
    the note: the warm-up records a stage of their own where :func:`warmup_stage` finds one."""
    num_warmup = sum(is_warmup(s) for s in status)
    warm = warmup_stage(summary, stage) if num_warmup else None
    if warm is None:
        return [stage.label] * len(status), (stage,), []
    labels = [warm.label if is_warmup(s) else stage.label for s in status]
    how = (
        f"a closed loop of {warm.max_concurrency}"
        if warm.load == "closed"
        else "an open loop at their recorded sends"
    )
    return (
        labels,
        (warm, stage),
        [
            f"AIPerf ran its {num_warmup} warm-up requests as a phase of their own "
            f"at another load than the profiling phase's ('{warm.label}': --warmup-concurrency, "
            f"--warmup-request-rate), and began profiling when it completed: they are a stage of "
            f"their own, replayed as {how}, before the profiling stage '{stage.label}'"
        ],
    )


def unrecorded_warmup_note(summary: Mapping[str, Any], num_warmup_records: int) -> str | None:
    """A note where the summary ran a warm-up phase and the records hold none of it.

    AIPerf 0.10.0 hands its results processors the profiling phase's records only
    (``records/records_manager.py``, ``_on_metric_records``: "Skipping non-profiling record"),
    so its ``profile_export.jsonl`` has no warm-up line; 0.12.0 and 0.13.0 write them
    (``benchmark_phase`` ``warmup``). The next phase starts when the warm-up's requests have
    all returned unless it is ``seamless`` (0.10.0 ``config/phases.py``: default False;
    ``timing/phase_orchestrator.py``), so then the missing requests loaded no profiled one."""
    warm, profiling = _phase(summary, "warmup"), _phase(summary, "profiling")
    if warm is None or num_warmup_records:
        return None
    requests, seconds = _whole(warm.get("requests")), _rate(warm.get("duration"))
    size = f"{requests} requests" if requests else f"{seconds:g} s" if seconds else "its requests"
    before = (
        "the profiling phase started as it stopped sending (seamless): its last requests ran "
        "beside the first profiled ones, which the simulation does not show"
        if isinstance(profiling, dict) and profiling.get("seamless") is True
        else "the profiling phase started after they had all returned (not seamless), so the "
        "profiled requests ran without them"
    )
    return (
        f"the summary's warm-up phase ({size}, input_config.phases) is not in the "
        "records (AIPerf 0.10 exports the profiling phase's only): not simulated; "
        f"{before}"
    )
