"""Every pyarrow CSV read that hands pyarrow a Python ``invalid_row_handler`` is serial.

pyarrow's threaded CSV reader may release its last reference to the Python handler on one of
its worker threads after ``read_csv`` returned. When that happens while the interpreter
finalizes, the worker's ``PyGILState_Ensure`` ends the thread by a forced unwind through C++
frames and ``std::terminate`` aborts the process: ``kvbudget simulate --trace t.csv`` did all its
work, then exited 134 with "terminate called without an active exception" (a core dump's
backtrace: ``AsyncThreadedTableReader`` disposed from a ``FutureImpl`` callback, through
``OwnedRefNoGIL::_M_dispose`` to ``take_gil`` -> ``PyThread_exit_thread``; pyarrow 26.0.1,
about one run in fifteen under load; apache/arrow#34314 reports the same abort). The timing
cannot be forced in a test, so this checks the condition that rules it out: each such read
asks for no threads, on both the fast path and the path that reads every column as text."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow.csv as pacsv
import pytest

from kvbudget.workloads.traces import TraceOptions, load_trace


@pytest.mark.parametrize(("body", "num_reads"), [
    # the fast path: typed columns
    ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,20,6\n", 1),
    # a value the typed read refuses sends the file down the text path too
    ("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,x,6\n", 2),
])
def test_csv_reads_with_a_python_row_handler_use_no_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, num_reads: int) -> None:
    seen: list[tuple[bool, bool]] = []
    real = pacsv.read_csv

    def spy(source: Any, **kwargs: Any) -> Any:
        handler = kwargs.get("parse_options") is not None and \
            kwargs["parse_options"].invalid_row_handler is not None
        seen.append((handler, kwargs["read_options"].use_threads))
        return real(source, **kwargs)

    monkeypatch.setattr(pacsv, "read_csv", spy)
    path = tmp_path / "t.csv"
    path.write_text(body)
    # the text path refuses the bad value by name, after the reads were made
    with contextlib.suppress(ValueError):
        load_trace(path, TraceOptions(format="generic"))
    with_handler = [threads for handler, threads in seen if handler]
    assert len(with_handler) == num_reads and not any(with_handler), seen
