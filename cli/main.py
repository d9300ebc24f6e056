"""The ``kvbudget`` application. Each command module registers itself with one line below."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="kvbudget",
    help="Capacity simulator and KV-cache admission-policy tuner for LLM inference gateways.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from cli import simulate

    simulate.register(app)
    from cli import profile

    profile.register(app)
    from cli import regress

    regress.register(app)
    from cli import trace

    trace.register(app)
    from cli import live

    live.register(app)
    from cli import sweep

    sweep.register(app)
    from cli import report

    report.register(app)


_register()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
