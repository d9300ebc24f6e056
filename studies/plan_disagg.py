"""Plan's disaggregated deployments: the prefill:decode split beside GPU and replica count.

``kvbudget plan --disagg-replicas 4,8`` (``PlanSpec.disagg_replicas``) tries, beside the
colocated fleets, disaggregated deployments (:mod:`kvbudget.simulator.disagg`) of that many
replicas in all: for a total of ``n``, every split into ``p`` prefill and ``n - p`` decode
replicas, ``p = 1 .. n - 1``, each over the plan's replications. Totals are tried smallest
first, as replica counts are; the first total at which some split meets every SLO is the
configuration's answer (every split of one total costs the same: ``n x TP`` GPUs), and of the
splits that meet them the one with the highest mean ``overall_slo_attainment`` is reported
(ties: fewer prefill replicas). Where none does, the split closest to the SLOs is shown (the
least summed relative violation of their bounds, :meth:`Constraint.violation
<kvbudget.studies.tune.Constraint.violation>`).

Both pools run on the candidate's GPU and tensor parallelism, so a configuration is priced as a
colocated one of ``n`` replicas. The scenario's own ``[disaggregation]`` table, when it has one,
gives the link, the routers and each pool's engine knobs (its pools' ``gpu`` and
``tensor_parallel_size`` are the plan's to choose, so they are dropped, with a note); without
one, the link is ``infiniband-ndr`` and both routers ``least_tokens`` (the scenario defaults).
The colocated candidates of such a scenario run without its ``[disaggregation]`` table.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kvbudget.simulator.scenario import dump_spec

if TYPE_CHECKING:
    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.tune import Constraint

__all__ = ["best_split", "colocated_overrides", "disagg_overrides", "disagg_table",
           "split_values", "splits"]

Split = tuple[int, int]
"""(prefill replicas, decode replicas)."""

PLAN_CHOSEN = ("gpu", "tensor_parallel_size")
"""A pool's settings that the plan chooses itself (dropped from the scenario's pools)."""


def splits(total: int) -> list[Split]:
    """Every split of ``total`` replicas into a prefill and a decode pool, fewest prefill
    replicas first."""
    if total < 2:
        raise ValueError(f"a disaggregated deployment needs at least 2 replicas (a prefill and "
                         f"a decode one), got {total}")
    return [(p, total - p) for p in range(1, total)]


def disagg_table(scenario: Scenario) -> tuple[dict[str, Any], list[str]]:
    """The ``[disaggregation]`` table the plan's disaggregated runs start from (the
    scenario's, less what the plan chooses itself, or the defaults) and notes on what was
    dropped."""
    spec = scenario.spec.disaggregation
    if spec is None:
        return {}, []
    table: dict[str, Any] = json.loads(json.dumps(dump_spec(scenario.spec, mode="json")
                                                  ["disaggregation"]))
    notes: list[str] = []
    for where in ("prefill", "decode"):
        pool = table.get(where) or {}
        if pool.get("gpu") is not None:
            notes.append(f"disaggregation.{where}.gpu ({pool['gpu']}) is not used: the plan "
                         "runs both pools on each GPU type it tries")
        pool["gpu"] = None
        engine = dict(pool.get("engine") or {})
        if "tensor_parallel_size" in engine:
            notes.append(f"disaggregation.{where}.engine.tensor_parallel_size is not used: the "
                         "plan runs both pools at each degree it tries")
            del engine["tensor_parallel_size"]
        pool["engine"] = engine
        table[where] = pool
    return table, notes


def disagg_overrides(base: Mapping[str, Any], split: Split, *, has_fleet: bool
                     ) -> tuple[str, ...]:
    """The ``--set`` overrides that make a run of ``split`` from the table ``base``
    (:func:`disagg_table`); a scenario's ``[fleet]`` goes (each pool is a fleet of its own)."""
    table = json.loads(json.dumps(dict(base)))
    for where, n in zip(("prefill", "decode"), split, strict=True):
        table[where] = {**(table.get(where) or {}), "num_replicas": n}
    return (*(("fleet=null",) if has_fleet else ()), f"disaggregation={json.dumps(table)}")


def colocated_overrides(scenario: Scenario) -> tuple[str, ...]:
    """A colocated candidate of a disaggregated scenario runs without its pools."""
    return ("disaggregation=null",) if scenario.spec.disaggregation is not None else ()


def split_values(split: Split | None) -> tuple[tuple[str, Any], ...]:
    """The runs table's columns of a split (none for a colocated run)."""
    if split is None:
        return ()
    return (("prefill_replicas", split[0]), ("decode_replicas", split[1]))


def _num(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def best_split(groups: Mapping[Split, Sequence[Mapping[str, Any]]],
               slos: Sequence[Constraint], confidence: float,
               metric: Any) -> tuple[Split, bool]:
    """The split to report of one total (see the module doc) and whether it meets every SLO;
    ``metric(row, name)`` reads a row's value of an SLO's metric."""
    def key(split: Split) -> tuple[int, float, float, int]:
        rows = groups[split]
        missed, violation = 0, 0.0
        for s in slos:
            ok, _, bound = s.check([metric(r, s.metric) for r in rows], confidence)
            if not ok:
                missed, violation = missed + 1, violation + s.violation(bound)
        att = [_num(r.get("overall_slo_attainment")) for r in rows]
        att = [a for a in att if math.isfinite(a)]
        return missed, violation, -(sum(att) / len(att)) if att else 0.0, split[0]

    best = min(groups, key=key)
    return best, key(best)[0] == 0
