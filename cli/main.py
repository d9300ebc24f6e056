"""The ``kvbudget`` application. Each command module registers itself with one line below."""

from __future__ import annotations

import gc
import os

import typer

app = typer.Typer(
    name="kvbudget",
    help="Capacity simulator and KV-cache admission-policy tuner for LLM inference gateways.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from kvbudget.cli import simulate

    simulate.register(app)
    from kvbudget.cli import profile

    profile.register(app)
    from kvbudget.cli import regress

    regress.register(app)
    from kvbudget.cli import trace

    trace.register(app)
    from kvbudget.cli import live

    live.register(app)
    from kvbudget.cli import sweep

    sweep.register(app)
    from kvbudget.cli import report

    report.register(app)
    from kvbudget.cli import plan

    plan.register(app)


_register()


def main() -> None:
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
        app()
    except KeyboardInterrupt:
        # Ctrl-C outside a command's own handling (commands that keep partial work say so
        # themselves): one line, and the shell's code for SIGINT
        import sys

        print("error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":  # pragma: no cover
    main()
