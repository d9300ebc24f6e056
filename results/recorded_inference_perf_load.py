"""How many requests inference-perf's workers hold at once, and the due times it draws.

inference-perf 0.7.0 queues every request of a ``constant`` or ``poisson`` stage at once, each
with its due time (``loadgen/load_generator.py`` ``run_stage``: ``request_queue.put(...,
next(time_generator))``), and ``load.num_workers`` worker processes (default: the CPU count)
take them from one shared queue (``mp_run``: one channel unless the data pins sessions to
workers). A worker takes a request only when one of its ``load.worker_max_concurrency`` slots
(default 100) is free, and holds the slot from taking it until it ends, sleeping until its
due time first (``Worker.loop``: ``semaphore.acquire()`` before ``request_queue.get_nowait``;
``schedule_client`` sleeps to ``request_time``, sends, releases in ``finally``). As requests
leave the queue in due order, each is sent at its due time or, when
``num_workers x worker_max_concurrency`` were in flight then, when one of them ended: an open
loop capped at that many, which binds when the server falls behind (a few CPUs and long
answers, or a small ``worker_max_concurrency``). The per-request report keeps the sends, not
the due times (its entries carry no ``scheduled_time``: ``reportgen/base.py``
``build_per_request_lifecycle_entry``); the run's ``config.yaml`` beside it
(``generate_config_report``) keeps the two settings.

The due times, where they must be drawn again: ``ConstantLoadTimer`` (the ``constant`` and
``concurrent`` types) draws ``rate x duration`` exponential gaps and scales them to sum to the
duration; ``PoissonLoadTimer`` draws each second's count from a Poisson of the rate (none: the
second passes empty) and spreads that many over the second as ``ConstantLoadTimer(count, 1)``
does (``loadgen/load_timer.py``). Both are unseeded there (``np.random.default_rng()``), so
kvbudget's seed draws its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints

from kvbudget.results.recorded_fields import dig, peak_in_flight
from kvbudget.workloads.counted import counted
from kvbudget.workloads.text_files import read_text

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.results.recording import Recording

FloatArray = npt.NDArray[np.float64]

MAX_EMPTY_SECONDS = 1e6
"""How many seconds a Poisson draw may run before the rest are drawn at once (a damaged
file's rate near 0 would draw empty seconds for ever)."""

CAPPED_TYPES = ("constant", "poisson")
"""The load types whose stages run at a rate under the workers' cap (``concurrent`` has its own
``concurrency_level``; the trace types send at a trace's times)."""


@dataclass(frozen=True)
class WorkerCap:
    """``load.num_workers x load.worker_max_concurrency`` of a run's ``config.yaml``."""

    load_type: str
    num_workers: int
    worker_max_concurrency: int
    pinned: bool
    """The data pins each session to a worker (multi-turn chat): one queue a worker, so a
    worker's slots serve only its own sessions, not the pool the replay assumes."""

    @property
    def cap(self) -> int:
        return self.num_workers * self.worker_max_concurrency

    def said(self, label: str) -> str:
        """The note of a stage replayed under the cap."""
        workers = counted(self.num_workers, "worker process", "worker processes")
        return (
            f"{label}: inference-perf's workers ({workers}, load.num_workers) each take a "
            "request from its queue only into one of their own "
            f"load.worker_max_concurrency={self.worker_max_concurrency} slots (the run's "
            f"config.yaml), so at most {self.cap} were in flight, each sent at its due time "
            "or, with every slot busy, when one freed: "
            f"replayed as its {self.load_type} rate capped at {self.cap} in flight"
            + (
                " (its sessions are pinned to workers, each with its own slots: the replay "
                "pools them)"
                if self.pinned
                else ""
            )
        )


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def run_config(path: Path) -> Any:
    """The run's ``config.yaml`` beside ``path`` (inference-perf writes it beside its reports,
    ``generate_config_report``), or None where there is none or it is not YAML."""
    config_path = path.parent / "config.yaml"
    if not config_path.is_file():
        return None
    try:
        return yaml.safe_load(read_text(config_path, errors="replace"))
    except yaml.YAMLError:
        return None


def trace_file(config: Any) -> str | None:
    """The trace a ``trace_replay`` run sent its requests at (``load.trace.file``; ``""`` where
    its config names none), or None for another load type."""
    if dig(config, "load", "type") != "trace_replay":
        return None
    file = dig(config, "load", "trace", "file")
    return file if isinstance(file, str) else ""


TRACE_CAP_KEY = "trace_replay_worker_cap"
"""The recording's ``config`` key of a ``trace_replay`` run's workers' cap (stage label to
``load.num_workers x load.worker_max_concurrency``)."""


def trace_cap(config: Any) -> int | None:
    """The workers' cap of a ``trace_replay`` run (:func:`run_config`), where both settings are
    whole numbers: inference-perf 0.7.0 queues a trace's requests as it queues a rate's, each
    due at its trace timestamp (``run_stage``'s ``request_queue.put(..., next(time_generator))``
    with ``TraceReplayLoadTimer``), and its workers take them into the same slots, so at most
    that many were in flight; None otherwise."""
    if dig(config, "load", "type") != "trace_replay":
        return None
    workers = _whole(dig(config, "load", "num_workers"))
    per_worker = _whole(dig(config, "load", "worker_max_concurrency"))
    return None if workers is None or per_worker is None else workers * per_worker


def trace_cap_said(recording: Recording, simulated: pd.DataFrame) -> str | None:
    """One line for each ``trace_replay`` stage whose replay had more requests in flight than
    inference-perf's workers held at most (:func:`trace_cap`), or None. The replay sends them
    at their recorded sends with no cap: the report keeps no due times (no ``scheduled_time``)
    and the trace's timestamps cannot be matched to its requests, so where the cap bound the
    sends already follow the real server, and a slower simulated server holds more in flight
    than the tool would have sent."""
    caps = recording.config.get(TRACE_CAP_KEY)
    if not isinstance(caps, Mapping) or not caps:
        return None
    stages = recording.stages_of(simulated["request_id"].to_numpy())
    sent = simulated["arrival_s"].to_numpy(dtype=np.float64)
    end = simulated["finished_s"].to_numpy(dtype=np.float64)
    over = []
    for label, cap in caps.items():
        mine = (stages == label) & np.isfinite(sent) & np.isfinite(end)
        peak = peak_in_flight(sent[mine], end[mine])
        if peak > cap:
            over.append(f"stage '{label}': up to {peak} in flight, its workers' cap {cap}")
    if not over:
        return None
    return (
        "inference-perf's workers held at most load.num_workers x "
        "load.worker_max_concurrency requests in flight (the run's config.yaml), and the "
        "replay of its trace at the recorded sends, which cannot apply that cap (the "
        "report keeps no due times), exceeded it: "
        + "; ".join(over)
        + ": a load the tool would not have sent; its latencies there are not the run's"
    )


SWEEP_PROBE_S = 5.0
"""How long inference-perf's sweep sends its saturation probe over (0.7.0
``loadgen/load_generator.py``, ``preprocess``: ``duration = 5``, at ``num_requests / duration``
req/s, stage -1)."""


def sweep_note(config: Any) -> str | None:
    """What a ``load.sweep`` run (:func:`run_config`) sent that its reports leave out: the
    saturation probe before its stages (stage -1, not in ``per_request_lifecycle_metrics.json``),
    which ran until its requests finished or its ``timeout``; None for a run without one."""
    sweep = dig(config, "load", "sweep")
    if not isinstance(sweep, dict):
        return None
    num, timeout = sweep.get("num_requests"), sweep.get("timeout")
    sent = f"{num} requests over {SWEEP_PROBE_S:g} s" if _whole(num) else "its probe requests"
    cut = (
        f", its requests cancelled at its timeout {timeout:g} s if still running"
        if isinstance(timeout, int | float) and not isinstance(timeout, bool)
        else ""
    )
    return (
        f"load.sweep (the run's config.yaml): inference-perf first sent a saturation probe "
        f"of {sent} (stage -1{cut}; loadgen/load_generator.py, preprocess), which its "
        "reports leave out, and set its stages' rates from 1 req/s up to the saturation it "
        "measured: the probe is not simulated (it ended before the first stage began), so "
        "what it left on the server, a prefix cache's entries, is not either"
    )


def worker_cap(config: Any) -> WorkerCap | None:
    """The workers' cap of the run of ``config`` (:func:`run_config`), where its load type
    runs at a rate (:data:`CAPPED_TYPES`) and both settings are whole numbers; None otherwise
    (no config beside the report: the cap, the CPU count of the machine that ran it times 100
    by default, is not known)."""
    load_type = dig(config, "load", "type")
    workers = _whole(dig(config, "load", "num_workers"))
    per_worker = _whole(dig(config, "load", "worker_max_concurrency"))
    if load_type not in CAPPED_TYPES or workers is None or per_worker is None:
        return None
    pinned = dig(config, "data", "shared_prefix", "enable_multi_turn_chat") is True
    return WorkerCap(str(load_type), workers, per_worker, pinned)


def _constant(rng: np.random.Generator, count: int, span_s: float) -> FloatArray:
    """``ConstantLoadTimer(count / span_s, span_s)``: ``count`` due times after the start."""
    gaps = rng.exponential(1.0, count)
    return np.asarray(np.cumsum(gaps * span_s / gaps.sum()), dtype=np.float64)


def due_ticks(load_type: str, rng: np.random.Generator, count: int, rate: float) -> FloatArray:
    """``count`` due times from the stage's start, drawn as inference-perf's timer of
    ``load_type`` draws them at ``rate`` requests a second."""
    if load_type != "poisson":
        return _constant(rng, count, count / rate)
    ticks: list[FloatArray] = []
    second = 0.0
    left = count
    while left > 0 and second < MAX_EMPTY_SECONDS:
        n = int(rng.poisson(rate))
        if n > 0:
            ticks.append(second + _constant(rng, n, 1.0)[:left])
            left -= n
        second += 1.0
    if left > 0:  # a rate far too low to have kept slots busy: the rest spread as constant
        ticks.append(second + _constant(rng, left, left / rate))
    return np.concatenate(ticks)
