"""What a study ran over, in lines: the model, the GPU and the workload its runs take, and what
loading the workload's file warned of or assumed. ``kvbudget``'s studies print them on stderr
before their runs (their tables name none of it); a study's result keeps them
(``setting``) and shows them in a notebook, with what the study found, not its frames."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbudget.perf.cost_model import read_cost_file
from kvbudget.perf.fitted_on import read_fitted_on
from kvbudget.perf.models import get_model
from kvbudget.results.said import (
    arrivals_said,
    as_given,
    cost_said,
    fill,
    mix_said,
    rate_said,
    served_said,
    shared_knobs,
)
from kvbudget.studies.planned import planned_summary
from kvbudget.workloads.arrival_rate import mean_arrival_rate
from kvbudget.workloads.counted import counted
from kvbudget.workloads.mix import mix_of
from kvbudget.workloads.traces.report import load_said

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.simulator.scenario import Scenario
    from kvbudget.workloads import Workload

__all__ = ["defaulted_of", "errors_line", "once_where_fixed", "one_run_said", "study_repr",
           "study_setting"]


SAME_REQUESTS = (
    "replications: each runs the trace's same requests (its seed draws none of them), so they "
    "differ only where a run draws (speculative decoding's accepted tokens, clients' retries, "
    "--interval's step model): without those they agree exactly, and an interval over them is "
    "0 wide, no margin for other traffic (--sample-fraction or --tier-shares draw anew in each)")
"""Said by a study of a trace whose load drew nothing: its replications' intervals (plan's
and tune's "95 % t interval", compare -r's) would read as a margin they are not."""


DRAWING_KEYS = ("workload", "closed_loop", "clients", "seed", "engine.speculative_config")
"""Scenario keys a study may vary whose values can make a run draw from its seed (a workload's
sampling, a closed loop's think times, clients' jittered retries, speculative acceptance)."""


def one_run_said(scn: Scenario, varies: Collection[str] = (), *,
                 interval: float | None = None) -> str | None:
    """The line a study says where every replication of ``scn`` would be the same run, so one
    run is the answer (None where any draw remains): a trace whose loading drew nothing
    (arrivals, lengths, tiers and max_tokens all the file's: ``workload.meta["drawn"]``), run
    with no engine or client feature that draws from the run's seed (speculative decoding's
    accepted tokens, a closed loop's think times, clients' jittered retries: the seed's only
    other uses, in :mod:`kvbudget.simulator`), no ``--interval`` (each replication draws the
    step model) and nothing in ``varies`` (the study's dotted keys) that could add a draw."""
    if interval is not None or any(
            k == d or k.startswith(d + ".") for k in varies for d in DRAWING_KEYS):
        return None
    if scn.workload().meta.get("drawn") is not False:
        return None
    spec, config = scn.spec, scn.sim_config()
    if (config.engine.speculative_config is not None or config.closed_loop is not None
            or spec.closed_loop is not None
            or any(c.retries and c.jitter != "none" for _, c in config.clients)):
        return None
    return ("one run: the trace's every draw is fixed (arrivals, lengths, tiers and max_tokens "
            "from the file; no speculative decoding, closed loop, jittered client retries or "
            "--interval draws from the seed), so every replication would be this run "
            "exactly: ran once, and no interval over replications is given")


def once_where_fixed(scn: Scenario, replications: int, varies: Collection[str] = (),
                     interval: float | None = None) -> tuple[int, str | None]:
    """``replications`` and None, or 1 and the line that says why where every replication
    would be the same run (:func:`one_run_said`): the first replication's run is the answer,
    and an interval over copies of it would be none. Every study's spec decides with it
    (``CapacitySpec``, ``PlanSpec``, ``TuneSpec``, ``SweepPlan``, ``compare``), keeps the line
    (``once``) and its result's setting says it in place of :data:`SAME_REQUESTS`."""
    said = one_run_said(scn, varies, interval=interval) if replications > 1 else None
    return (replications, None) if said is None else (1, said)


def defaulted_of(scn: Scenario, varies: Collection[str] = ()) -> dict[str, list[str]]:
    """``{"defaulted": ["gpu", "model"]}``: the fields of ``scn`` its runs take from the default
    scenario, which nobody gave (:attr:`~kvbudget.simulator.scenario.Scenario.defaulted`; not
    one the study varies, ``varies``' dotted keys), as a run's ``summary.json`` keeps them; for
    a study's result file beside its ``gpu`` and ``model``. Empty where there are none."""
    left = sorted(k for k in scn.defaulted if all(v.split(".")[0] != k for v in varies))
    return {"defaulted": left} if left else {}


def study_setting(scn: Scenario, varies: Collection[str] = (),
                  once: str | None = None, seeds: Sequence[int] = ()) -> tuple[str, ...]:
    """``model M on G; workload W: N requests over SPAN (RATE req/s)`` (an open loop's
    arrivals, as ``simulate``'s line says them; ``at rate scale 1`` where the study scales
    them, ``rate_scale`` in ``varies``; ``models as the study varies them`` where it does; the
    workload's figures said as the scenario's where the study varies it), then ``warning: W:
    ...`` and ``assumed: W: ...`` for what loading the workload said; the deployment (the GPU; a fleet's
    replicas; a disaggregated deployment's pools) where every run takes the scenario's (not
    one the study varies: ``varies``, the keys it varies): what a study's per-GPU figures are
    per. ``once``: why the study ran once
    (:func:`once_where_fixed`), said in place of :data:`SAME_REQUESTS`. ``seeds``: the
    replications' (:func:`~kvbudget.studies.sweep.replication_seeds`): where the seed draws
    the requests, the load said is the mean of theirs (:func:`_drawn_load`), which the
    tables' offered rates are means of, not the scenario seed's, which no replication runs."""
    workload = scn.workload()
    spec = scn.spec
    loop = spec.closed_loop
    said = load_said(workload.meta, closed_loop=loop is not None)
    # a workload the study varies: the scenario's, as each point changes it
    varied = sorted(k for k in varies if k.split(".")[0] == "workload")
    # a count the seed draws: the scenario's seed's, which no replication runs
    notes = [f"the study varies {', '.join(varied)}"] if varied else []
    drawn = _drawn(spec.workload)
    if drawn:
        notes.append(f"each replication draws its own {drawn}")
    at = " and ".join(w for w, on in (("values", varied), ("seed", drawn)) if on)
    # the load, as simulate's line says it; a study that scales it says whose rate it is
    scale = " at rate scale 1" if "rate_scale" in varies else ""
    load = "" if loop is not None else arrivals_said(len(workload), workload.span_s, scale)
    head, tail = counted(len(workload), "request") + load, ""
    if drawn and loop is None and seeds:  # what the runs draw, as their tables' means are
        head = _drawn_load(scn, seeds, scale)
        tail = (f", each replication drawing its own {drawn}; the scenario's seed {spec.seed}, "
                f"which no replication runs, draws the mix below: "
                f"{counted(len(workload), 'request')}{load}")
        notes.pop()
        at = "values"
    return (f"{_served(scn, workload, varies)}; workload {workload.name}: {head}"
            + (f" at the scenario's {at} ({'; '.join(notes)})" if notes else "") + tail
            + (f", sent in closed loop by {counted(loop.num_users, 'user')}" if loop else ""),
            mix_said(workload.name, mix_of(workload), spec.seed),
            *cost_model_said(scn.cost_model_path(), transfer=spec.cost_model_transfer,
                             frontend=spec.frontend),
            *([SAME_REQUESTS if once is None else once]
              if workload.meta.get("drawn") is False else []),
            *(f"{label}: {workload.name}: {text}"
              for key, label in (("warnings", "warning"), ("assumed", "assumed"))
              for text in said.get(key, ())))


def _drawn_load(scn: Scenario, seeds: Sequence[int], scale: str) -> str:
    """``N requests over SPAN (RATE req/s) on average over the R replications' draws``: the
    means of the requests, the arrival span and the offered rate (``offered_rate_rps``, as
    their runs' rows have it; ``scale``: the rate's note) of the workloads ``seeds`` draw from
    ``scn``. A study's offered rates (sweep's ``offered req/s``, capacity's ``capacity req/s``
    over its rate scale) are means over the same draws: the two agree."""
    drawn = [replace(scn, spec=replace(scn.spec, seed=int(s))).workload() for s in seeds]
    num = sum(len(w) for w in drawn) / len(drawn)
    said = (f"{num:,.0f}" if num == int(num) else f"{num:,.1f}") + " requests"
    rates = [mean_arrival_rate(len(w), w.span_s) for w in drawn]
    if len(drawn) == 1:  # one draw's rate: over its gaps, as simulate says it
        said += arrivals_said(len(drawn[0]), drawn[0].span_s, scale)
    elif all(r is not None for r in rates):
        said += rate_said(sum(r or 0.0 for r in rates) / len(rates),
                          sum(w.span_s for w in drawn) / len(drawn), scale)
    return said + (f" on average over the {len(seeds)} replications' draws"
                   if len(seeds) > 1 else " in the replication's draw")


_DEPLOYMENT = ("gpu", "fleet", "disaggregation", "engine.tensor_parallel_size")
"""Keys a study varies that change what serves its runs (:func:`_served` names it for none)."""
_BY_GPU = ("max_num_seqs", "max_num_batched_tokens")
"""Knobs whose defaults are each GPU's (``perf/vllm_defaults.py``'s ``batch_defaults``)."""


def _served(scn: Scenario, workload: Workload, varies: Collection[str]) -> str:
    """``model M on G, engine E (its knobs), KV capacity N tokens``, as ``simulate``'s
    ``simulated:`` line says them (:func:`~kvbudget.results.said.served_said` of the runs'
    planned summary), less what the study varies (``varies``' keys): the deployment where it
    varies the GPU, the replicas or the tensor parallelism (and then the knobs whose defaults
    are each GPU's), an engine knob it varies, the model's context and weights where it varies
    the model, and the KV capacity where any of these changes it. A deployment whose runs
    resolve it (a disaggregated one's pools, an autoscaled or mixed fleet): the model and
    where, without the engine."""
    tops = {k.split(".")[0] for k in varies}
    model = ("models as the study varies them" if "model" in tops else "model " + as_given(
        scn.spec.model, get_model(scn.spec.model).name, "model" in scn.defaulted))
    moved = any(k in _DEPLOYMENT or k.split(".")[0] in _DEPLOYMENT for k in varies)
    s = planned_summary(scn.sim_config(), workload)
    s.update(defaulted_of(scn, varies))  # the scenario's, as its runs' summaries keep them
    given = scn.spec.engine
    gone = {k.split(".", 1)[1] for k in varies if k.startswith("engine.")}
    by_gpu = [k for k in _BY_GPU if moved and getattr(given, k) is None and k not in gone]
    gone |= set(by_gpu)
    if "model" in tops:
        s.pop("weight_dtype")
        gone |= set() if given.max_model_len is not None else {"max_model_len"}
    # the scenario's pools each say their knobs; a study that tries its own deployments says
    # those the pools share (shared_knobs), as one engine's
    pools = "disaggregation" in s["engine"] and not moved
    s["engine_knobs"] = ({name: {k: v for k, v in knobs.items() if k not in gone}
                          for name, knobs in s["engine_knobs"].items()} if pools else
                         {k: v for k, v in shared_knobs(s).items() if k not in gone})
    if moved or gone or "model" in tops:  # each run's own
        s.pop("kv_capacity_tokens")
    if moved:  # the scenario's fleet or pools are not the deployments tried: whose capacity
        s["engine"] = {k: v for k, v in s["engine"].items()  # is none of theirs
                       if k not in ("fleet", "disaggregation")}
    where = None if not moved else "the deployments the study tries (each with its own KV capacity" + (
        f" and its GPU's default {' and '.join(by_gpu)})" if by_gpu else ")")
    return served_said(s, model, where)


def cost_model_said(path: Path | None, *, transfer: bool = False,
                    frontend: str | None = None) -> tuple[str, ...]:
    """``step times: the cost-model file ...``: the file a study's runs take their step times
    from, what it holds and what it was fitted on (``simulate`` says it under its
    ``simulated:`` line; a study's tables name none of it), and that no front-end time is added
    where the file has none and the scenario's ``frontend`` adds none; nothing for the default
    model (:func:`~kvbudget.results.said.cost_said`, the file read once)."""
    if path is None:
        return ()
    read = read_cost_file(path)  # validates the file, naming the field
    described = read.model.describe()
    fitted = read_fitted_on(path, read.payload)
    return (cost_said(described.get("kind"), described.get("source"), read.frontend_overhead_s,
                      no_frontend=frontend in (None, "none"), path=path,
                      fitted_on=None if fitted is None else fitted.label(True),
                      transfer=transfer),)


def _drawn(workload: Mapping[str, Any]) -> str:
    """What of a synthetic ``[workload]`` table the seed draws, which each of a study's
    replications draws anew (its seed a child of the scenario's): its requests, and their
    number where random arrivals run for a ``duration_s`` alone; ``""`` for a trace (its
    requests are the file's; a ``sample_fraction`` keeps the same count)."""
    if workload.get("kind") == "trace":
        return ""
    arrival = workload.get("arrival") or {}
    count = ("duration_s" in workload and "num_requests" not in workload
             and arrival.get("kind", "poisson") != "constant")
    return "requests and count" if count else "requests"


def study_repr(head: str, setting: Sequence[str], found: Sequence[str], tables: str) -> str:
    """A study result as a notebook shows it: what it was, over what (:func:`study_setting`,
    or a run's ``simulated:`` lines), what it found, and where its tables are; the lines
    wrapped as the terminal tables' are (``setting``'s as given)."""
    return "\n".join([fill(head), *setting, *map(fill, found), fill(tables)])


_ERRORS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("E2E", "e2e"))


def errors_line(table: pd.DataFrame, stage: str = "all") -> str:
    """The signed relative errors, simulated against measured, of one stage of a validation
    table (:data:`~kvbudget.analysis.validation.STAGE_COLUMNS`): TTFT, TPOT and E2E p50 / p99
    and the output tokens per second, those the table has."""
    rows = table[table["stage"] == stage]
    err = {str(m): float(e) for m, e in zip(rows["metric"], rows["rel_error"], strict=True)}
    parts = [f"{label} " + ", ".join(f"{q} {err[f'{key}_{q}_s']:+.1%}" for q in ("p50", "p99")
                                     if f"{key}_{q}_s" in err)
             for label, key in _ERRORS if f"{key}_p50_s" in err or f"{key}_p99_s" in err]
    if "output_tokens_per_s" in err:
        parts.append(f"output tok/s {err['output_tokens_per_s']:+.1%}")
    return f"simulated against measured ({stage}): " + "; ".join(parts)
