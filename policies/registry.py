"""One registry of admission policies: name -> class. Registering a plug-in is one line here."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any

from kvbudget.policies.base import BasePolicy
from kvbudget.policies.learned import Adaptive, EarlyReject, Peak, Quantile
from kvbudget.policies.seed_policies import Conservative, Overcommit, Preemptive, Unlimited

POLICIES: dict[str, type[BasePolicy]] = {
    "unlimited": Unlimited,
    "conservative": Conservative,
    "overcommit": Overcommit,
    "preemptive": Preemptive,
    "quantile": Quantile,
    "adaptive": Adaptive,
    "peak": Peak,
    "early_reject": EarlyReject,
}


def policy_names() -> list[str]:
    """The registered policy names, in registration order."""
    return list(POLICIES)


def policy_parameters(name: str) -> dict[str, Any]:
    """The parameters of a registered policy with their defaults."""
    cls = _lookup(name)
    if cls.__init__ is object.__init__:
        # A policy without an ``__init__`` of its own takes no parameters. (``object.__init__``
        # is a builtin: ``inspect.signature`` would read its text signature, ``(self, /, *args,
        # **kwargs)``, by tokenizing it, compiling tokenize's patterns (~5 ms of a start), and
        # list ``args`` and ``kwargs`` as parameters, which the class refuses.)
        return {}
    sig = inspect.signature(cls.__init__)
    return {
        p.name: (None if p.default is inspect.Parameter.empty else p.default)
        for p in sig.parameters.values()
        if p.name != "self"
    }


def parameter_hint(name: str, key: str, prefix: str = "", choose: str = "") -> str:
    """What to do about the parameter ``key`` that policy ``name`` does not take: its own
    parameter closest to it (``prefix`` before the name: ``policy_params.``), else the
    policies that take it (and ``choose``, how to choose one of them); with its parameters."""
    known = sorted(policy_parameters(name))
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    owners = [n for n in POLICIES if key in policy_parameters(n)]
    mine = f"its parameters: {', '.join(known) or 'none'}"
    if close:
        return f" (did you mean {prefix}{close[0]}?); {mine}"
    if owners:
        listed = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
        return f" ({mine}); {key} is a parameter of {listed}{choose}"
    return f"; {mine}"


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> BasePolicy:
    """A fresh policy instance (learning policies keep state, so never share one across runs)."""
    cls = _lookup(name)
    params = dict(params or {})
    known = policy_parameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"policy {name!r} has no parameter {unknown[0]!r}"
                         f"{parameter_hint(name, unknown[0])}")
    for key, value in params.items():  # ``true`` for a number: isinstance(True, int) holds
        default = known[key]
        if isinstance(value, bool) and isinstance(default, int | float) \
                and not isinstance(default, bool):
            raise ValueError(f"policy {name!r} parameter {key!r}: expected a number, "
                             f"got {str(value).lower()}")
    return cls(**params)


def unknown_policy(name: str) -> str:
    """``unknown policy 'overcomit' (did you mean overcommit?); known policies: ...``: what
    every refusal of a policy name says."""
    close = difflib.get_close_matches(name, list(POLICIES), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown policy {name!r}{hint}; known policies: {', '.join(POLICIES)}"


def _lookup(name: str) -> type[BasePolicy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(unknown_policy(name)) from None
