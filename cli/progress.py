"""Progress bars with a total and an ETA on stderr.

At a terminal a bar is tqdm's. Elsewhere (a log file, ``nohup``, a CI job) a bar is silent,
unless it is made with ``lines_from`` and its total reaches it: then it writes a plain line every
:data:`LINE_EVERY_S` seconds of wall time (``simulate: 1,200,000/10,000,000 reqs (12 %), 94 s,
about 690 s left``), so a run of millions of requests shows where it is in its log too, while a
short run, which ends before the first line is due, writes nothing.

A total that is an estimate (a capacity search's rounds depend on what it finds) grows when the
work passes it, so the bar never shows more than 100 %. Whether shown or not, a bar counts the
work done and says how fast it went (:meth:`Bar.rate_line`: runs per minute for a study).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from kvbudget.workloads.counted import counted

LINE_EVERY_S = 30.0
"""Wall seconds between two progress lines where stderr is not a terminal."""


class Bar:
    """``update(n)``, ``set(done, total)`` and ``close()`` over tqdm (loaded only when shown).

    ``lines_from``: where stderr is not a terminal, write a progress line every ``every_s``
    seconds of ``clock`` (:data:`LINE_EVERY_S` if None) once the total is at least this (None:
    never). ``stream`` is where the lines go (stderr by default). ``at_most``: the total is an
    upper bound (the work may stop before it), and the lines say "at most"."""

    def __init__(self, desc: str, total: int | None, unit: str = "run", *,
                 lines_from: int | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 every_s: float | None = None, at_most: bool = False) -> None:
        self._bar: Any = None
        self._at_most = at_most  # the total is a bound (a plan stops at the SLOs): lines say so
        self._desc = desc
        self._total = total
        self._unit = unit
        self._done = 0
        self._start = time.perf_counter()
        self._stream = stream
        self._clock = clock
        self._every_s = LINE_EVERY_S if every_s is None else every_s
        self._lines = False
        isatty = getattr(stream or sys.stderr, "isatty", None)
        if isatty is not None and not isatty():
            self._lines = lines_from is not None and total is not None and total >= lines_from
            self._line_start_s = clock()
            self._next_line_s = self._line_start_s + self._every_s
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None,
                         file=sys.stderr)

    def update(self, n: int = 1) -> None:
        self._done += n
        if self._lines:
            self._maybe_line()
        if self._bar is None:
            return
        if self._bar.total is not None and self._bar.n + n > self._bar.total:
            self._bar.total = self._bar.n + n
        self._bar.update(n)

    def set(self, done: int, total: int) -> None:
        self._done = done
        if self._bar is None:
            return
        self._bar.total = total
        self._bar.update(done - self._bar.n)

    def _maybe_line(self) -> None:
        now = self._clock()
        if now < self._next_line_s:
            return
        self._next_line_s = now + self._every_s
        total = max(self._total or 0, self._done)
        elapsed = now - self._line_start_s
        bound = "at most " if self._at_most and self._done < total else ""
        of = f" of {bound}" if bound else "/"
        line = (f"{self._desc}: {self._done:,}{of}{total:,} {self._unit}s "
                f"({100 * self._done / total if total else 100:.0f} %), {elapsed:.0f} s")
        if 0 < self._done < total:
            line += f", {bound}about {elapsed * (total - self._done) / self._done:.0f} s left"
        print(line, file=self._stream or sys.stderr, flush=True)

    def set_total(self, total: int) -> None:
        self._total = max(total, self._done)
        if self._bar is not None:
            self._bar.total = max(total, self._bar.n)
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def rate_line(self) -> str:
        """``"12 runs in 3.4 s: 211.8 runs per minute"``: the work done since the bar was made."""
        elapsed = time.perf_counter() - self._start
        per_minute = self._done / elapsed * 60 if elapsed > 0 else float("inf")
        return (f"{counted(self._done, self._unit)} in {elapsed:.1f} s: {per_minute:.1f} "
                f"{self._unit}s per minute")
