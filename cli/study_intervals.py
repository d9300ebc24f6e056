"""``--interval`` for the studies that search (``capacity``, ``plan``): the options, their
checks and how an interval is shown. With it, every replication is a world with its own seed
and its own draw of the step model (docs/fidelity.md, "Predictions with intervals")."""

import math
from typing import Annotated

import typer

from kvbudget.cli.errors import CliError
from kvbudget.cli.options import MAX_REPLICATIONS
from kvbudget.studies.intervals import check_level

DEFAULT_STUDY_DRAWS = 10
"""Replications (worlds) behind a study's ``--interval`` unless ``--interval-draws`` says."""
DEFAULT_REPLICATIONS = 3

StudyIntervalOpt = Annotated[float | None, typer.Option(
    "--interval", help="Give the answer an interval at this level (e.g. 0.9): each "
    "replication also draws the step model (its constants' stated ranges and its structural "
    "error, or a calibrated cost file's posterior), so the intervals over the replications "
    "carry both (docs/fidelity.md).")]
StudyDrawsOpt = Annotated[int | None, typer.Option(
    "--interval-draws", help=f"Replications behind --interval, each a seed and a step-model "
    f"draw (default {DEFAULT_STUDY_DRAWS}).")]
StudyReplicationsOpt = Annotated[int | None, typer.Option(
    "--replications", "-r", min=1, max=MAX_REPLICATIONS,
    help=f"Seeds per configuration (default {DEFAULT_REPLICATIONS}; with --interval, "
    "--interval-draws).")]


def study_replications(interval: float | None, draws: int | None,
                       replications: int | None) -> int:
    """The replications a study runs: ``--replications`` (default 3), or with ``--interval``
    the ``--interval-draws``; a bad level or count, or both counts given, is refused naming
    the flag."""
    if interval is None:
        if draws is not None:
            raise CliError("--interval-draws: applies with --interval only")
        return DEFAULT_REPLICATIONS if replications is None else replications
    if replications is not None:
        raise CliError("--replications: with --interval the replications are the draws; give "
                       "--interval-draws instead")
    n = DEFAULT_STUDY_DRAWS if draws is None else draws
    if not (math.isfinite(interval) and 0 < interval < 1):
        raise CliError(f"--interval: the level must be between 0 and 1 (e.g. 0.9), got "
                       f"{interval!r}")
    if not 2 <= n <= MAX_REPLICATIONS:
        raise CliError(f"--interval-draws: must be in [2, {MAX_REPLICATIONS:,}], got {n!r}")
    check_level(interval, n)
    return n


def span(low: float, high: float, *, unit: str = "") -> str:
    """``low-high`` of an interval (an end at ``inf``: ``open``), ``-`` without one."""
    if math.isnan(low) or math.isnan(high):
        return "-"
    hi = "open" if math.isinf(high) else f"{high:.3g}"
    return f"{low:.3g}-{hi}{unit}"
