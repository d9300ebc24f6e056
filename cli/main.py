"""The ``kvbudget`` application. Each command module registers itself: one entry below."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Annotated, Any

# started as the command (the ``kvbudget`` script, ``python -m kvbudget`` or ``python -m
# kvbudget.cli.main``)?
_AS_COMMAND = __name__ == "__main__" or os.path.basename(sys.argv[0]) == "kvbudget" \
    or sys.argv[0].endswith(os.path.join("kvbudget", "__main__.py"))


def _interrupted_at_start(signum: int, frame: Any) -> None:
    """Ctrl-C (or SIGTERM) while the command's modules load, before :func:`main` runs: nothing
    is done yet, so the usual one line and the shell's code for an interrupt, at once (a
    ``KeyboardInterrupt`` raised inside the imports would end in a traceback)."""
    with contextlib.suppress(OSError):  # to the descriptor: never a reentrant buffered write
        os.write(2, b"error: interrupted\n")
    os._exit(130)


# the handlers in force before the start's own (put back by _run, or for a pool worker below)
_START_HANDLERS: dict[int, Any] = {}
if _AS_COMMAND:
    for _sig, _usual in ((signal.SIGINT, signal.default_int_handler),
                         (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(_sig) is _usual:  # an ignored SIGINT (a background job) stays so
            _START_HANDLERS[_sig] = signal.signal(_sig, _interrupted_at_start)
if _AS_COMMAND:
    # Start-up allocates what lives as long as the process (modules, classes, functions: some
    # 50,000 objects): at the default threshold (700) the collector runs ~70 times over them
    # and finds next to nothing to free (~2 % of a start's CPU). A command's process collects
    # every 50,000 allocations instead; a notebook or a test that imports the app keeps
    # Python's default. Until the start is over (the command module loaded: see below) the
    # collector does not run at all: a pass over the start's objects (one, at ~50,000
    # allocations, in the middle of `kvbudget simulate`'s imports: ~9 ms) finds next to nothing
    # either, and gc.freeze() then keeps them out of every later pass.
    gc.set_threshold(50_000, *gc.get_threshold()[1:])
    gc.disable()
    # the compiled methods of kvbudget's dataclasses, kept between runs (~19 % of a short
    # command's CPU otherwise): see method_cache.py
    from kvbudget.cli.method_cache import MethodCache

    _methods = MethodCache()
    _methods.install()
    _METHODS: MethodCache | None = _methods
else:
    _METHODS = None

import typer  # noqa: E402

import kvbudget  # noqa: E402
from kvbudget.cli.help_text import PANELS, SUMMARIES, epilog  # noqa: E402
from kvbudget.cli.usage_errors import OneLineGroup  # noqa: E402
from kvbudget.perf.command_flags import set_taken  # noqa: E402


def _finite_and_present(ctx: object, param: object, value: object) -> object:
    """Every float flag takes a finite number (NaN passes click's ranges, and infinity is no
    deployment's figure: leave the flag out for "no limit"), and every path flag a non-empty
    path (typer reads '' as the current directory)."""
    kind = type(getattr(param, "type", None)).__name__
    for v in value if isinstance(value, (list, tuple)) else (value,):
        if kind in ("FloatParamType", "FloatRange") and isinstance(v, float) \
                and not math.isfinite(v):
            raise typer.BadParameter(f"expected a finite number, got {v}")
        if kind == "TyperPath" and v is not None and str(v) == "":
            raise typer.BadParameter("expected a path, got an empty string")
    return value


def _guard(command: object) -> None:
    """Put :func:`_finite_and_present` on each float and path parameter of ``command`` (and of
    a group's commands) that has no callback of its own."""
    if getattr(command, "_kvbudget_guarded", False):
        return
    for sub in getattr(command, "commands", {}).values():
        _guard(sub)
    for param in getattr(command, "params", ()):
        if type(param.type).__name__ in ("FloatParamType", "FloatRange", "TyperPath") \
                and param.callback is None:
            param.callback = _finite_and_present
    command._kvbudget_guarded = True  # type: ignore[attr-defined]


class _Group(OneLineGroup):
    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _guard(command)
            if getattr(command, "epilog", None) is None:
                command.epilog = epilog(cmd_name)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The commands in the panels of :data:`kvbudget.cli.help_text.PANELS` (click
        sections), then any other. A command whose module is not loaded (``kvbudget --help``
        loads none: see :func:`_modules_for`) is listed with its summary from
        :data:`~kvbudget.cli.help_text.SUMMARIES`, shortened as click shortens its help."""
        names = [*self.list_commands(ctx), *(n for n in _MODULE_OF if n not in self.commands)]
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        seen: set[str] = set()
        for title, members in PANELS.items():
            rows = []
            for name in members:
                command = self._listed(ctx, name) if name in names else None
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
                    seen.add(name)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [(n, c.get_short_help_str(limit)) for n in names if n not in seen
                and (c := self._listed(ctx, n)) is not None and not c.hidden]
        if rest:
            with formatter.section("Other commands"):
                formatter.write_dl(rest)

    def _listed(self, ctx: Any, name: str) -> Any:
        """The command ``name``; a stand-in carrying its summary when its module is not
        loaded (never run: only listed)."""
        command = self.get_command(ctx, name)
        if command is None and name in _MODULE_OF:
            return typer.core.TyperCommand(name, help=SUMMARIES[name])
        return command


app = typer.Typer(
    cls=_Group,
    name="kvbudget",
    help="Capacity simulator and KV-cache admission-policy tuner for LLM inference gateways.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # click's plain help: rich's panels cut option names and words at 80 columns and read
    # "[profile]" as markup; plain help wraps instead and shows every name whole
    rich_markup_mode=None,
)

# The command modules, in the order of ``kvbudget --help``, and the commands each registers.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "simulate": ("simulate",),
    "compare": ("compare",),
    "presets": ("presets",),
    "profile": ("profile", "profile-fit"),
    "regress": ("regress",),
    "trace": ("trace",),
    "live": ("replay", "calibrate", "validate"),
    "serve": ("serve",),
    "sweep": ("sweep", "tune", "capacity"),
    "report": ("report",),
    "plan": ("plan",),
}
_MODULE_OF = {command: module for module, cmds in COMMAND_MODULES.items() for command in cmds}


def _version(given: bool) -> None:
    """``kvbudget --version``: the installed package's version (what a bug report and a CI
    pin name), then exit."""
    if given:
        typer.echo(f"kvbudget {kvbudget.__version__}")
        raise typer.Exit()


@app.callback()
def _group(ctx: typer.Context, _: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version,
        help="Print the installed kvbudget's version and exit.")] = False) -> None:
    # A group even when one command module with one command is registered (typer would
    # otherwise run that command without its name). The command's flags are recorded for the
    # library's messages that name a flag (a cost file's mismatch: only flags it takes).
    get_command = getattr(ctx.command, "get_command", None)
    name = ctx.invoked_subcommand
    command = get_command(ctx, name) if get_command is not None and name else None
    set_taken(None if command is None else frozenset(
        opt for param in command.params for opt in param.opts))


def _modules_for(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules a command line needs, when the process was started as ``kvbudget
    ...``: only the one of the command it names (each command module imports what its
    commands run: building typer's parser for every command, and importing every module, would
    cost a second a start); none for ``kvbudget`` or ``kvbudget --help`` (the commands are
    listed from their summaries); every module for a word that names no command (click then
    says which commands come close). An ``app`` imported by a test or a notebook has every
    command (see ``_AS_COMMAND``)."""
    if len(argv) >= 2 and argv[1] in _MODULE_OF:
        return (_MODULE_OF[argv[1]],)
    if len(argv) >= 2 and not argv[1].startswith("-"):
        return tuple(COMMAND_MODULES)
    return ()


def _register(modules: Sequence[str], command: str | None = None) -> None:
    """Register ``modules``' commands; only ``command`` of them when one is named, so that the
    parser typer builds at each start leaves out the other commands of its module (for
    ``simulate``: ``compare``'s and ``presets``' options, ~2 ms)."""
    for name in modules:
        importlib.import_module(f"kvbudget.cli.{name}").register(app)
    if command is not None:
        app.registered_commands[:] = [c for c in app.registered_commands if c.name == command]
        app.registered_groups[:] = [g for g in app.registered_groups if g.name == command]


def _restore_start_handlers() -> None:
    """Put back the SIGINT and SIGTERM handlers the start replaced."""
    while _START_HANDLERS:
        signum, handler = _START_HANDLERS.popitem()
        signal.signal(signum, handler)


def _command_for(argv: Sequence[str]) -> str | None:
    """The command a command line names (as :func:`_modules_for` reads it), else ``None``."""
    return argv[1] if len(argv) >= 2 and argv[1] in _MODULE_OF else None


if __name__ == "__mp_main__":
    # a pool worker of a command (multiprocessing runs the parent's main module again in each
    # worker it starts): it runs library calls, never the app, so it loads no command module
    _restore_start_handlers()
elif _AS_COMMAND:
    _register(_modules_for(sys.argv), _command_for(sys.argv))
else:
    _register(tuple(COMMAND_MODULES))
if _AS_COMMAND:
    # the start is over (a pool worker's too): what it loaded lives as long as the process
    gc.freeze()
    gc.enable()


def terminate(signum: int, frame: Any) -> None:
    """The SIGTERM handler :func:`main` installs: SIGTERM (a CI runner's timeout, `kill`) takes
    the same way out as Ctrl-C, so the commands that keep finished work (sweep, tune, capacity
    and plan parts, replay rows) flush it and say where it is.

    It is Ctrl-C's own way: the SIGINT handler in force is called. Under ``asyncio.run`` (the
    live commands) that is asyncio's, which cancels the main task through the event loop, so
    the interruption cannot be lost; a ``KeyboardInterrupt`` raised by a signal handler can be,
    when the handler happens to run inside a weakref callback or a finalizer (asyncio's task
    WeakSet drops tasks in one), where Python prints the exception and goes on. Elsewhere
    (Python's default SIGINT handler, or SIGINT ignored) it raises ``KeyboardInterrupt``."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler not in (signal.default_int_handler, terminate):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def main() -> None:
    """The ``kvbudget`` command: run it, then :func:`_leave` with its exit code."""
    _leave(_run())


def _run() -> int:
    """The command's exit code (typer ends every command with ``SystemExit``)."""
    # kvbudget's numeric work is element-wise numpy and small solves, never large BLAS calls, so
    # one OpenBLAS thread loses nothing and saves starting its thread pool when numpy loads
    # (~50 ms of CPU in every command). setdefault: a user's own setting still wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # kvbudget uses no pydantic plugins (observability hooks found through package metadata):
    # skip scanning every installed distribution's entry points (~10 ms) when pydantic loads.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "1")
    # What is loaded so far (typer, the command modules) lives as long as the process: keep it
    # out of the collector's passes while each command imports the rest (as mypy does).
    gc.freeze()
    try:
        _START_HANDLERS.pop(signal.SIGTERM, None)
        signal.signal(signal.SIGTERM, terminate)
        _restore_start_handlers()  # Ctrl-C raises KeyboardInterrupt again from here on
        app()
    except KeyboardInterrupt:
        # Ctrl-C outside a command's own handling (commands that keep partial work say so
        # themselves): one line, and the shell's code for SIGINT
        print("error: interrupted", file=sys.stderr)
        return 130
    except SystemExit as done:
        if isinstance(getattr(done.__context__, "__cause__", None), KeyboardInterrupt):
            # typer turns Ctrl-C inside a command into a silent exit 130: say it, as above
            print("error: interrupted", file=sys.stderr)
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    return 0


def _leave(code: int) -> None:
    """End the process the way Python would, less its final teardown.

    Everything a command wrote is flushed, threads it left running are joined and the
    ``atexit`` hooks run (Ray's shutdown, logging's flush), then the process ends with
    ``os._exit``, skipping the interpreter's finalization and the C++ static destructors of the
    extension modules. Arrow's thread pools are torn down there, and that teardown now and then
    aborts a process whose work is done ("terminate called without an active exception",
    SIGABRT: apache/arrow#34314, #39862), which turned a finished run into a failed command
    (1 in some hundreds of runs here). Skipping it also saves the teardown's CPU (~10 ms).
    """
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    if _METHODS is not None:
        _METHODS.save()
    for stream in (sys.stdout, sys.stderr):
        # a reader that went away (`| head`), a closed stream
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
