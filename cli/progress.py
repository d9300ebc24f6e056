"""Progress bars with a total and an ETA on stderr (nothing when stderr is not a terminal).

A total that is an estimate (a capacity search's rounds depend on what it finds) grows when the
work passes it, so the bar never shows more than 100 %. Whether shown or not, a bar counts the
work done and says how fast it went (:meth:`Bar.rate_line`: runs per minute for a study).
"""

from __future__ import annotations

import sys
import time
from typing import Any


class Bar:
    """``update(n)``, ``set(done, total)`` and ``close()`` over tqdm (loaded only when shown)."""

    def __init__(self, desc: str, total: int | None, unit: str = "run") -> None:
        self._bar: Any = None
        self._unit = unit
        self._done = 0
        self._start = time.perf_counter()
        isatty = getattr(sys.stderr, "isatty", None)
        if isatty is not None and not isatty():
            return
        from tqdm import tqdm

        self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, disable=None,
                         file=sys.stderr)

    def update(self, n: int = 1) -> None:
        self._done += n
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

    def set_total(self, total: int) -> None:
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
        return (f"{self._done} {self._unit}s in {elapsed:.1f} s: {per_minute:.1f} "
                f"{self._unit}s per minute")
