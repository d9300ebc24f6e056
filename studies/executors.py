"""Where many independent simulations run: local processes (the default) or a Ray cluster.

An executor maps a picklable, top-level task function over a list of task specs and yields
``(index, result)`` pairs as the tasks finish (not in submission order), so that a caller can
store each finished run at once and a progress bar can advance. Both executors run the same
function on the same specs, so their results are identical (the simulator is deterministic
given its inputs).

* :class:`LocalExecutor`: a process pool over the machine's cores (``max_workers=1`` runs the
  tasks in the calling process, which is what tests and debuggers want). Workers are started
  with the ``forkserver`` method where the platform has it (``spawn`` elsewhere), never by a
  bare ``fork`` of a process that may hold threads (a progress bar's monitor, a Ray client).
* :class:`RayExecutor`: Ray tasks on a local instance it starts (``address=None``) or on an
  existing cluster (``address="ray://head:10001"`` or ``"auto"``). Ray is an optional extra
  (``pip install 'kvbudget[ray]'``) imported only when a ``RayExecutor`` is first used; the
  cluster's workers must be able to import ``kvbudget`` (same install, or a ``runtime_env``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ProcessPoolExecutor, wait
from types import TracebackType
from typing import Any, Protocol, TypeVar

from kvbudget.perf.fitted_on import quiet_notes

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS: tuple[str, ...] = ("local", "ray")


def available_cores() -> int:
    """Cores this process may run on (the affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


class Executor(Protocol):
    """What sweeps, tuning and capacity search need from an executor."""

    name: str

    @property
    def num_workers(self) -> int: ...

    def map_unordered(
        self, fn: Callable[[T], R], tasks: Sequence[T]
    ) -> Iterator[tuple[int, R]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Executor: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class _ContextMixin:
    def close(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


PRELOAD: tuple[str, ...] = (
    "kvbudget.studies.sweep", "kvbudget.simulator.run", "kvbudget.simulator.scenario", "kvbudget.workloads.spec",
)
"""Modules the forkserver imports once, so that each worker starts with the simulator loaded."""
QUIET_WORKERS = "kvbudget.studies.quiet_workers"
"""The module the forkserver imports first, and no command imports: its workers then start with
Ctrl-C ignored (see its docstring)."""


def _ignore_sigint() -> None:
    """A worker's initializer: Ctrl-C reaches the whole process group, but only the parent acts
    on it (it ends the workers); a worker would print a ``KeyboardInterrupt`` traceback. Its
    cost-file notes are the command's, said once before the first run (:func:`quiet_notes`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_notes()


def _quiet_cancelled_futures(args: threading.ExceptHookArgs) -> None:
    """A thread excepthook that drops the ``InvalidStateError`` Python 3.11's pool manager
    thread raises when an aborted pool's workers die while futures it holds are cancelled
    (``terminate_broken`` sets an exception on each: CPython gh-107219, fixed in 3.12 by
    ignoring exactly this error); anything else goes to the previous hook."""
    if isinstance(args.exc_value, InvalidStateError) and type(args.thread).__name__ \
            == "_ExecutorManagerThread":
        return
    _PREVIOUS_HOOK(args)


_PREVIOUS_HOOK = threading.excepthook


def _submit(pool: ProcessPoolExecutor, fn: Callable[[T], R], task: T) -> Future[R]:
    """``pool.submit`` with Ctrl-C held back until it returns: a submit may start a worker, and
    an interrupt landing inside ``Process.start`` leaves a half-started worker the pool does not
    know (it printed a traceback once the parent had gone). Blocking the signal in this thread
    is not enough (the kernel hands it to another thread and Python still raises it here), so
    the handler itself defers it: it is acted on once the submit has returned."""
    if threading.current_thread() is not threading.main_thread():
        return pool.submit(fn, task)
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        return pool.submit(fn, task)
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)
            else:
                raise KeyboardInterrupt


def _start_method() -> str:
    methods = multiprocessing.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def in_process(executor: Executor | None) -> Executor:
    """``executor``, or without one this process, one run at a time (``LocalExecutor(1)``):
    what a study called from a notebook without an executor runs on."""
    return LocalExecutor(max_workers=1) if executor is None else executor


class LocalExecutor(_ContextMixin):
    """A process pool over local cores; the pool is started on first use and kept until
    :meth:`close` (so a search that calls :meth:`map_unordered` many times pays the worker
    start-up once).

    ``max_workers``: ``None`` = every core this process may use; ``1`` = run in this process.
    ``preload``: modules the worker server imports once before forking workers (forkserver).
    """

    name = "local"

    def __init__(
        self, max_workers: int | None = None, *, preload: Sequence[str] = PRELOAD
    ) -> None:
        if max_workers is not None and (not isinstance(max_workers, int) or max_workers < 1):
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        self._max_workers = max_workers or available_cores()
        self._preload = tuple(preload)
        self._pool: ProcessPoolExecutor | None = None
        self._before: set[int] = set()

    @property
    def num_workers(self) -> int:
        return self._max_workers

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            method = _start_method()
            ctx = multiprocessing.get_context(method)
            if method == "forkserver":  # workers start with Ctrl-C ignored (quiet_workers)
                ctx.set_forkserver_preload([QUIET_WORKERS, *self._preload])
            self._before = {p.pid or 0 for p in multiprocessing.active_children()}
            self._pool = ProcessPoolExecutor(max_workers=self._max_workers, mp_context=ctx,
                                             initializer=_ignore_sigint)
        return self._pool

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        """Run ``fn`` on every task; yield ``(index, result)`` as each finishes.

        A task that raises stops the map: the exception propagates and tasks not yet started
        are cancelled (so do results that were not consumed when the generator is closed).
        """
        tasks = list(tasks)
        if not tasks:
            return
        if self._max_workers == 1:
            for i, task in enumerate(tasks):
                yield i, fn(task)
            return
        pool = self._get_pool()
        # keep a bounded number in flight so that an interrupt cancels quickly
        limit = 2 * self._max_workers
        pending: dict[Future[R], int] = {}
        nxt = 0
        try:
            while nxt < len(tasks) or pending:
                while nxt < len(tasks) and len(pending) < limit:
                    pending[_submit(pool, fn, tasks[nxt])] = nxt
                    nxt += 1
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    yield i, fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def abort(self) -> None:
        """End the pool now: queued tasks cancelled, running workers terminated (SIGTERM), no
        waiting for their runs (an interrupted study must exit at once, and a second Ctrl-C
        must not land in a join that never returns)."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        threading.excepthook = _quiet_cancelled_futures
        # a further Ctrl-C (the second of two) must not cut the abort short: a worker left
        # unterminated outlives this process and, still starting, fails to read the pool's
        # semaphores once they are gone (a traceback after the command has exited)
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in multiprocessing.active_children():
                if (proc.pid or 0) not in self._before:
                    proc.terminate()
            for proc in multiprocessing.active_children():
                if (proc.pid or 0) not in self._before:
                    proc.join(timeout=5)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.abort()
        else:
            self.close()


class RayExecutor(_ContextMixin):
    """Ray tasks, one CPU each.

    ``address``: ``None`` starts a local Ray instance (stopped again by :meth:`close`);
    ``"auto"`` or ``"ray://host:10001"`` joins an existing cluster (left running).
    ``num_cpus``: CPUs of a local instance (default: all). ``runtime_env``: passed to
    ``ray.init`` (e.g. ``{"py_modules": [...]}`` when the cluster lacks kvbudget).
    ``max_in_flight``: tasks submitted at a time (default: four per cluster CPU).
    """

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        if num_cpus is not None and num_cpus < 1:
            raise ValueError(f"num_cpus must be >= 1, got {num_cpus!r}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        self.address = address
        self._num_cpus = num_cpus
        self._runtime_env = dict(runtime_env) if runtime_env else None
        self._max_in_flight = max_in_flight
        self._ray: Any = None
        self._owns = False

    def _init(self) -> Any:
        if self._ray is not None:
            return self._ray
        try:
            import ray
        except ImportError:
            raise ValueError(
                "the ray executor needs Ray: pip install 'kvbudget[ray]' (or 'ray>=2.9')"
            ) from None
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {
                "include_dashboard": False,
                "logging_level": "error",
                "log_to_driver": False,
            }
            if self._runtime_env:
                kwargs["runtime_env"] = self._runtime_env
            if self.address is None:
                kwargs["num_cpus"] = self._num_cpus or available_cores()
            else:
                kwargs["address"] = self.address
            try:
                ray.init(**kwargs)
            except ConnectionError as exc:
                raise ValueError(f"cannot reach the Ray cluster at {self.address!r}: {exc}") from None
            self._owns = True
        self._ray = ray
        return ray

    @property
    def num_workers(self) -> int:
        ray = self._init()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def map_unordered(self, fn: Callable[[T], R], tasks: Sequence[T]) -> Iterator[tuple[int, R]]:
        tasks = list(tasks)
        if not tasks:
            return
        ray = self._init()
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        limit = self._max_in_flight or 4 * self.num_workers
        pending: dict[Any, int] = {}
        nxt = 0
        try:
            while nxt < len(tasks) or pending:
                while nxt < len(tasks) and len(pending) < limit:
                    pending[remote.remote(tasks[nxt])] = nxt
                    nxt += 1
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    yield i, ray.get(ref)
        finally:
            for ref in pending:
                ray.cancel(ref)

    def close(self) -> None:
        if self._ray is not None and self._owns:
            self._ray.shutdown()
        self._ray = None
        self._owns = False


def make_executor(kind: str = "local", *, jobs: int | None = None,
                  address: str | None = None) -> LocalExecutor | RayExecutor:
    """``kind`` is ``"local"`` or ``"ray"``; ``jobs`` caps local workers (or a local Ray
    instance's CPUs); ``address`` joins an existing Ray cluster."""
    if kind == "local":
        if address is not None:
            raise ValueError("--address applies to the ray executor only")
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address, num_cpus=jobs if address is None else None)
    raise ValueError(f"unknown executor {kind!r}; choose one of: {', '.join(EXECUTORS)}")
