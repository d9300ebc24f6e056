"""The engine knobs a cost-model file's fit ran with, as a scenario's defaults.

A calibrated file's parameters are what its server's steps took at the knobs it ran (a
``max_num_seqs`` of 64 batches otherwise than vLLM's default of 1,024 on an H100). A scenario
that takes the file (``cost_model``, ``--cost-model``) and does not set a knob the fit set
takes the fit's, said in a note; one that sets another value keeps its own, the difference
said. The order, first winning: the command line's flags and ``--set`` items, a scenario's
``[engine]`` table and what a recording says of its server (all of which set the table), then
the fit's knobs, then the engine's defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbudget.perf.fitted_on import fit_engine_knobs

__all__ = ["FittedKnobs", "with_fitted_knobs"]

NOT_CARRIED = ("name", "skip_ahead", "speculative_config")
"""Knobs of a fit's configuration a scenario does not take from it: the engine (a file fitted
with another engine's behaviour is noted as such: ``perf.fitted_on.fitted_engine_notes``),
the simulator's speed-up (no knob of a server) and the draft model's table."""


@dataclass(frozen=True)
class FittedKnobs:
    """What a scenario took from its cost file's fit (``taken``, ``{knob: value}``) and where it
    sets another value than the fit's (``differ``, ``{knob: (fit's, scenario's)}``)."""

    path: Path
    taken: dict[str, Any] = field(default_factory=dict)
    differ: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    def notes(self, taken: bool = True) -> tuple[str, ...]:
        """One line each: the knobs taken (unless not ``taken``: a caller that says them with
        its other settings, :meth:`taken_said`), the knobs set otherwise than the fit's."""
        out = []
        if self.taken and taken:
            out.append(f"{self.path}: engine knobs from the cost file's fit, which nothing here "
                       f"sets: {_said(self.taken)} (a flag, --set engine.KNOB=VALUE or a "
                       "scenario's [engine] table sets another)")
        if self.differ:
            out.append(f"{self.path}: fitted with {_said({k: f for k, (f, _) in self.differ.items()})}"
                       f"; simulated with {_said({k: s for k, (_, s) in self.differ.items()})}, "
                       "as set here (a flag, --set, the scenario or the recording): the "
                       "file's parameters are what its server's steps took at the fit's")
        return tuple(out)

    def taken_said(self) -> str:
        """Where the knobs taken came from, and how to set others: what the note of them says
        besides the knobs, for a caller's settings line (``validate``/``calibrate
        --records``)."""
        one = len(self.taken) == 1
        return (f"the fit's in the cost file {self.path}: nothing here sets "
                f"{'it' if one else 'them'}; a flag, --set engine.KNOB=VALUE or a scenario's "
                "[engine] table sets another")

    def named_in(self, error: str) -> str:
        """``error`` with the knobs it names that were taken from the fit said as the fit's
        (a user who set none of them would not know where they came from)."""
        named = {k: v for k, v in self.taken.items() if f"engine.{k}" in error}
        if not named:
            return error
        return (f"{error} ({_said(named)} from the cost file {self.path}'s fit: a flag or "
                "--set engine.KNOB=VALUE sets another)")


def _said(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"engine.{k} {str(v).lower() if isinstance(v, bool) else v}"
                     for k, v in knobs.items())


def with_fitted_knobs(data: dict[str, Any], base_dir: Path, defaults: Mapping[str, Any]
                      ) -> tuple[dict[str, Any], FittedKnobs | None]:
    """``data`` (a scenario's merged table) with the ``[engine]`` knobs its ``cost_model``'s
    fit set (those that differ from ``defaults``, the ``[engine]`` fields' defaults) where
    ``data`` leaves them unset (absent or ``None``), and what was taken and what differs;
    ``(data, None)`` without a file, or with a file fitted with another engine (its knobs are
    that engine's) or one setting none."""
    given = data.get("cost_model")
    if not isinstance(given, str) or not given:
        return data, None
    path = Path(given).expanduser()
    path = path if path.is_absolute() else base_dir / path
    name, knobs = fit_engine_knobs(path)
    engine = data.get("engine")
    table: dict[str, Any] = dict(engine) if isinstance(engine, dict) else {}
    simulated = str(table.get("name") or defaults.get("name") or "vllm")
    if name is not None and name.split("-")[0] != simulated.split("-")[0]:
        return data, None
    fitted = {k: v for k, v in knobs.items()
              if k in defaults and k not in NOT_CARRIED and v != defaults[k]}
    taken = {k: v for k, v in fitted.items() if table.get(k) is None}
    differ = {k: (v, table[k]) for k, v in fitted.items()
              if table.get(k) is not None and table[k] != v}
    if not taken and not differ:
        return data, None
    return {**data, "engine": {**table, **taken}}, FittedKnobs(path, taken, differ)
