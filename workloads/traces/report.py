"""What loading a trace did: rows read, rows dropped (with reasons), repairs and warnings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvbudget.workloads.counted import counted
from kvbudget.workloads.workload import Workload

DRAWN_ARRIVALS = ("the file has no arrival times: Poisson arrivals at 1 req/s were drawn "
                  "(choose another process with the arrival option)")
"""The warning of a length-only table loaded without an arrival process: a run whose arrivals
come from a closed loop of users does not use them, and does not say it."""

DROP_FAILED = "failed request (0 prompt and 0 output tokens)"
DROP_FAILED_OUTPUT = "failed request (0 output tokens, marked so by the publisher)"
"""Rows with prompt tokens and 0 output tokens where the file's publisher marks failures so
(BurstGPT's README: the failures are the rows whose ``Response tokens`` are 0)."""
DROP_ZERO_OUTPUT = "0 output tokens"
DROP_ZERO_PROMPT = "0 prompt tokens"
NO_TOKENS_DROPS = frozenset({DROP_FAILED, DROP_FAILED_OUTPUT, DROP_ZERO_OUTPUT,
                             DROP_ZERO_PROMPT})
"""The drops of rows with no tokens to serve, which loading says in a warning of the workload
(every run of it repeats it) besides the report's ``dropped``."""


def load_said(meta: Mapping[str, object], *, closed_loop: bool = False) -> dict[str, list[str]]:
    """What loading a workload's file warned of and assumed (its ``meta``'s ``warnings`` and
    ``assumed``, each key only when not empty), less the drawn arrivals a closed loop of users
    does not use: what a run's summary and a study's announcement say of it."""
    said: dict[str, list[str]] = {}
    for key in ("warnings", "assumed"):
        lines = meta.get(key)
        kept = [str(x) for x in lines if not (closed_loop and x == DRAWN_ARRIVALS)] \
            if isinstance(lines, tuple) else []
        if kept:
            said[key] = kept
    return said


@dataclass(frozen=True)
class LoadReport:
    """The load report of one file.

    ``rows_read`` counts data rows in the file (ServeGen: rate windows read); ``rows_loaded``
    the requests in the workload (after drops, window and sampling). ``dropped`` lists
    ``(reason, count)`` for rows removed as invalid-but-expected (failed requests, a truncated
    last line), not those a window or sample left out. ``timed`` is False when the file has no
    arrival times (length-only tables): the workload's arrivals are then synthetic.
    ``assumed`` says what the workload takes that the file does not (its tier, its
    ``max_tokens``).
    """

    path: str
    format: str
    rows_read: int
    rows_loaded: int
    dropped: tuple[tuple[str, int], ...] = ()
    warnings: tuple[str, ...] = ()
    timed: bool = True
    assumed: tuple[str, ...] = ()

    @property
    def dropped_rows(self) -> int:
        return sum(count for _, count in self.dropped)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "rows_read": self.rows_read,
            "rows_loaded": self.rows_loaded,
            "dropped_rows": self.dropped_rows,
            "dropped": {reason: count for reason, count in self.dropped},
            "warnings": list(self.warnings),
            "timed": self.timed,
            "assumed": list(self.assumed),
        }


@dataclass(frozen=True)
class LoadedTrace:
    """A loaded trace: the workload and how it was obtained."""

    workload: Workload
    report: LoadReport

    def __repr__(self) -> str:
        """What a notebook shows of a loaded trace: the file, its rows (read, loaded,
        dropped and why), then the workload's own lines (rows with no tokens to serve are
        said there, in its warning, not twice)."""
        r = self.report
        dropped = "".join(f", {count:,} dropped ({reason})" for reason, count in r.dropped
                          if reason not in NO_TOKENS_DROPS)
        return (f"{r.path} ({r.format}): {counted(r.rows_read, 'row')} read, {r.rows_loaded:,} loaded"
                f"{dropped}\n{self.workload!r}")
