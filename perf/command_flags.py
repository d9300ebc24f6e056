"""The flags of the command this process runs, for the library's messages that name one.

A refusal deep in the library (a cost-model file fitted on another GPU, say) names the flags
that fix it; ``kvbudget validate --records`` takes neither ``--cost-model-transfer`` nor
``plan``'s ``--gpus``, so a message naming them sends its user to a flag the command refuses.
``kvbudget``'s command group records the running command's flags here (:func:`set_taken`)
before the command runs; library use outside a command (a notebook) records none, and every
flag is named as before."""

from __future__ import annotations

_TAKEN: list[frozenset[str]] = []


def set_taken(flags: frozenset[str] | None) -> None:
    """Record the running command's flags (``None``: no command, every flag named)."""
    _TAKEN.clear()
    if flags is not None:
        _TAKEN.append(flags)


def takes(flag: str) -> bool:
    """Whether the running command takes ``flag`` (True outside a command)."""
    return not _TAKEN or flag in _TAKEN[0]


def in_command() -> bool:
    """Whether a command recorded its flags (:func:`set_taken`)."""
    return bool(_TAKEN)
