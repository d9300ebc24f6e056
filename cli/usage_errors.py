"""The parser's refusals as one ``error:`` line: a group class every ``kvbudget`` group uses
(the application's and ``kvbudget trace``'s), so a mistyped flag or command, a value out of
range or a flag given no value says where its options are listed, the command's own help."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import typer

__all__ = ["OneLineGroup"]

# the exceptions of the click typer runs on: its own copy (typer._click) from typer 0.2x, click
# itself before; a group named without its subcommand raises NoArgsIsHelpError from click 8.2
_CLICK_ERRORS: Any = sys.modules[typer.BadParameter.__module__]
_NO_ARGS_IS_HELP: Any = getattr(_CLICK_ERRORS, "NoArgsIsHelpError", ())

_COMMAND_PATH = "kvbudget.command_path"
"""The ``ctx.meta`` key of the command last looked up (``kvbudget simulate``): where a
refusal the parser raises without its context sends the user (click's parser raises "Option
'--trace' requires an argument" with none, click/parser.py ``_get_value_from_state``)."""


@contextlib.contextmanager
def _one_line_usage_errors(ctx: Any = None) -> Iterator[None]:
    """The parser's refusals (a mistyped flag or command, a value out of range, a missing
    option) as every other bad input is said: one ``error:`` line, exit 2, here with where
    the options are listed (the command's help; for a refusal without its context, the
    command a group's ``ctx`` looked up last); click's own shows the usage line and a hint
    over three more. A group named without its subcommand still shows its help."""
    try:
        yield
    except _NO_ARGS_IS_HELP:
        raise
    except _CLICK_ERRORS.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else (
            ctx.meta.get(_COMMAND_PATH, ctx.command_path) if ctx is not None else "kvbudget")
        print(f"error: {exc.format_message().rstrip('.')} (see {where} --help)", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None


class OneLineGroup(typer.core.TyperGroup):
    """A group whose parser refusals are one line (:func:`_one_line_usage_errors`), each
    naming the help of the command it concerns."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None,
                     **extra: Any) -> Any:
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _one_line_usage_errors(ctx):
            return super().invoke(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            ctx.meta[_COMMAND_PATH] = f"{ctx.command_path} {cmd_name}"
        return command
