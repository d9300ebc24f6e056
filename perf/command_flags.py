"""The flags of the command this process runs, for the library's messages that name one.

A refusal deep in the library (a cost-model file fitted on another GPU, say) names the flags
that fix it; ``kvbudget validate --records`` takes neither ``--cost-model-transfer`` nor
``plan``'s ``--gpus``, so a message naming them sends its user to a flag the command refuses.
``kvbudget``'s command group records the running command's flags here (:func:`set_taken`)
before the command runs; library use outside a command (a notebook) records none, and every
flag is named as before."""

from __future__ import annotations

_taken: frozenset[str] | None = None


def set_taken(flags: frozenset[str] | None) -> None:
    """Record the running command's flags (``None``: no command, every flag named)."""
    global _taken
    _taken = flags


def takes(flag: str) -> bool:
    """Whether the running command takes ``flag`` (True outside a command)."""
    return _taken is None or flag in _taken


def in_command() -> bool:
    """Whether a command recorded its flags (:func:`set_taken`)."""
    return _taken is not None
