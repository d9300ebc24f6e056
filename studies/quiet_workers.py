"""Imported by the process pool's worker server only (``executors.LocalExecutor`` lists it first
in the forkserver's preload), never by a command: Ctrl-C is ignored from the server's start, so
every worker it forks starts with it ignored. CPython's ``multiprocessing.forkserver.main``
hands each forked worker the SIGINT disposition the server had once its preload was done;
without this module that was Python's default, and a Ctrl-C landing between a worker's fork and
its initializer (``executors._ignore_sigint``) raised KeyboardInterrupt there: the pool broke
and the interrupted command printed a traceback instead of ending quietly."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
