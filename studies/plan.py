"""Plan: the cheapest deployment that meets the SLOs for a workload.

The search space is GPU type x tensor parallelism x number of replicas x admission policy (and
the policy's main parameter). For every configuration of GPU, tensor parallelism and policy
setting, the replica counts are tried in increasing order, each over ``replications`` seeds
(common random numbers, as in :mod:`kvbudget.studies.sweep`); the first count whose runs meet
every SLO is that configuration's answer, and larger counts are not run (more replicas of the
same engine behind one router are assumed not to make an SLO worse; a configuration whose
largest count still misses is reported as such). All configurations advance together, one
replica count per round, so the executor always has a round's runs to share out.

An SLO is a :class:`kvbudget.studies.tune.Constraint` on any summary metric
(``tiers.interactive.ttft_s.p99<=2``); it holds when the bound of its t interval over the
replications is on the right side (the upper bound for ``<=``), as in tuning; with one
replication the mean decides. Default: ``overall_slo_attainment>=0.9``.

Costs come from a price table in dollars per GPU-hour (:data:`DEFAULT_PRICES`, cited; a user's
table replaces or extends it): a configuration costs ``GPUs x price`` per hour, and per million
output tokens what its runs paid for over what they served: the GPU-hours each run needed, its
GPUs held from the first arrival to the last finish (the summary's ``duration_s``), times the
price, over the output tokens its requests completed (``overall_sustained_output_tokens_per_s``
times ``duration_s``), pooled over the replications (``usd_per_m_output_tokens``). Not over
the arrival window: a run past capacity finishes its work long after the last arrival, and the
arrival-window rate would price tokens the GPUs served later as if served then. A
configuration that misses the SLOs (``feasible`` false) has a figure too, the price of the
tokens it did serve, but it does not carry the load: the command's table shows none for it.
GPU types without a price are skipped with a note.

With an autoscaled fleet (the scenario's ``[fleet.autoscale]``), the replica counts are the
autoscaler's upper bound (``max_replicas``; ``min_replicas`` the scenario's, or the bound when
smaller), and a configuration is priced by the GPU-hours its replicas were held (booting, up or
draining: the summary's ``autoscale.gpu_hours``) over the run's span: ``usd_per_hour`` is the
mean GPUs held times the price, ``usd_run`` the run's GPU-hours times the price, and
``usd_per_m_output_tokens`` those GPU-hours' price over the tokens served.

Tensor parallelism is the engine's ``tensor_parallel_size`` (vLLM's ``--tensor-parallel-size``:
the model sharded over that many GPUs of one replica); degrees the model cannot be split by,
and model and GPU pairs whose weights do not fit, are reported and skipped. Replicas are a ``[fleet]`` of
that many engines (the scenario's router and budget, else ``least_tokens`` and per-replica
budgets; one replica is a single engine without a fleet).

With ``interval`` (a level such as 0.9), replication ``r`` also takes draw ``r`` of the step
model (:func:`kvbudget.studies.intervals.replication_draws`; one draw serves every GPU, each
around its own defaults, its structural error by its validation status), so the t intervals
over the replications, and the SLO checks on their bounds, carry the step model's uncertainty
as well as the seed's. Each configuration's replica count gets an interval too
(:func:`replicas_interval`): each replication (a world) needs the smallest count tried at which
it meets every SLO on its own; the interval is the ``(1 - level) / 2`` and ``(1 + level) / 2``
quantiles of those needs (``inf``: a world that missed at every count tried).
``model_draws=False`` keeps the seeds alone.

With an output directory, finished runs are kept as Parquet parts (``parts/``) as they finish;
``resume=True`` reuses every stored run whose key (a hash of everything it depends on) matches,
so an interrupted plan picks up where it stopped.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.perf.hardware import get_gpu
from kvbudget.results.said import as_given
from kvbudget.simulator.scenario import check_cost_model_at, scenario_from_dict
from kvbudget.studies import plan_disagg
from kvbudget.studies.executors import in_process
from kvbudget.studies.intervals import WorldDraws, check_level
from kvbudget.studies.setting import defaulted_of, once_where_fixed, study_repr, study_setting
from kvbudget.studies.sweep import (
    Axis,
    GridPoint,
    StoredRuns,
    check_study_args,
    execute_stored,
    expand_grid,
    metric_range,
    plan_runs,
    replication_seeds,
    rows_to_frame,
    scenario_data,
    t_interval,
)
from kvbudget.studies.tune import Constraint
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.executors import Executor

DEFAULT_PRICES: dict[str, float] = {
    "A100-80GB": 1.10,
    "H100-80GB": 2.50,
    "H200-141GB": 3.50,
}
"""On-demand dollars per GPU-hour, every GPU from one price list (:data:`PRICE_SOURCE`): the
specialty-cloud column of Mercatus-AI's "Cloud GPU pricing" table (May 2026), the low end of
each range: A100 80GB $1.10-$1.50, H100 SXM5 $2.50-$3.50, H200 SXM5 $3.50-$4.50
(https://www.mercatus-ai.com/blog/cloud-gpu-pricing). One list, so the GPUs are priced alike:
mixing providers' quotes made an H200 cheaper than an H100. The same table quotes hyperscalers
at $3.50-$5.00 per H100-hour, so replace it with your own (``--prices``, ``--price``) for a
decision. No L40S price is in it; give one to include it (``--price L40S=1.0``)."""

DEFAULT_GPUS: tuple[str, ...] = ("A100-80GB", "H100-80GB", "H200-141GB")
"""The GPUs ``plan`` tries unless told (``--gpus``): those :data:`DEFAULT_PRICES` prices."""

PRICE_SOURCE = ("Mercatus-AI cloud GPU pricing, May 2026, specialty clouds, on-demand, low end: "
                "www.mercatus-ai.com/blog/cloud-gpu-pricing")
"""Where :data:`DEFAULT_PRICES` come from, as the plan table's note says it."""

MAIN_PARAMETERS: dict[str, tuple[str, tuple[float, ...]]] = {
    "overcommit": ("overcommit_ratio", (0.5, 0.7, 0.9)),
    "preemptive": ("overcommit_ratio", (0.5, 0.7, 0.9)),
    "quantile": ("quantile", (0.9, 0.99)),
}
"""Each policy's main parameter and the values a plan tries by default."""

RESULT_FILE = "plan.json"
TABLE_FILE = "plan.csv"
RUNS_FILE = "runs.parquet"


MAX_PRICE = 1e6
"""The dearest GPU-hour a price table may name (dollars): far beyond any cloud's list price."""


def read_prices(path: Path) -> dict[str, float]:
    """A price table file: TOML or JSON, ``GPU = dollars per GPU-hour`` (a ``[prices]`` table
    or the top level)."""
    try:
        text = path.read_text()
        data: Any = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such price table") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the price table ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a price table (not UTF-8 text: byte {exc.start})") from None
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ValueError(f"{path}: not a valid price table ({exc})") from None
    data = data.get("prices", data) if isinstance(data, dict) else data
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected GPU = price entries")
    out: dict[str, float] = {}
    for gpu, price in data.items():
        if not (isinstance(price, int | float) and not isinstance(price, bool)
                and math.isfinite(price) and 0 < price <= MAX_PRICE):
            raise ValueError(f"{path}: {gpu}: price must be a number in (0, {MAX_PRICE:g}] "
                             f"dollars per GPU-hour, got {price!r}")
        out[str(gpu)] = float(price)
    return out


def same_gpu(name: str) -> str:
    """The preset a GPU name resolves to (``H100``, ``H100-80GB`` and ``H100-SXM`` are one
    GPU), or the name itself when it names none: how a price table's entries meet ``gpus``."""
    try:
        return get_gpu(name).name
    except (ValueError, OSError):
        return name


def priced_gpus(gpus: Sequence[str], prices: Mapping[str, float], sources: Mapping[str, str]
                ) -> tuple[dict[str, float], dict[str, str]]:
    """``prices`` and ``sources`` with each of ``gpus`` priced under its own name where the
    table prices it under another name of the same GPU; two names of one GPU at different
    prices are refused (which one meant the GPU?)."""
    prices, sources = dict(prices), dict(sources)
    by_gpu: dict[str, list[str]] = {}
    for key in prices:
        by_gpu.setdefault(same_gpu(key), []).append(key)
    for gpu in gpus:
        names = by_gpu.get(same_gpu(gpu), [])
        if len({prices[k] for k in names}) > 1:
            raise ValueError("prices: " + ", ".join(f"{k} ${prices[k]:.2f}" for k in names)
                             + f" name the same GPU ({same_gpu(gpu)}): give it one price")
        if gpu not in prices and names:
            prices[gpu] = prices[names[0]]
            sources[gpu] = sources.get(names[0], "given")
    return prices, sources


PLAN_KEYS = ("gpu", "engine.tensor_parallel_size", "fleet.num_replicas")
"""The scenario fields a plan sets in every run (``plan --gpus``, ``--tp``, ``--replicas``)."""


@dataclass
class PlanSpec(WorldDraws):
    """What to plan. ``policies``: names (default: the scenario's); ``param_values``: a
    policy parameter -> the values to try (default: :data:`MAIN_PARAMETERS`)."""

    scenario: Scenario
    gpus: tuple[str, ...] = DEFAULT_GPUS
    gpus_given: bool = True
    """Whether the user chose ``gpus`` (``plan --gpus``); False: the default list, whose GPUs
    the price note says as assumed, not as given (:func:`price_note`)."""
    tensor_parallel: tuple[int, ...] = (1,)
    replicas: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    disagg_replicas: tuple[int, ...] = ()
    """Totals of a disaggregated deployment to try beside the colocated fleets, every
    prefill:decode split of each (:mod:`kvbudget.studies.plan_disagg`); with none, none is
    tried unless the scenario is disaggregated (then ``replicas`` from 2 up)."""
    policies: tuple[str, ...] = ()
    param_values: Mapping[str, tuple[Any, ...]] | None = None
    slos: tuple[Constraint, ...] = ()
    prices: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    price_sources: Mapping[str, str] = field(
        default_factory=lambda: dict.fromkeys(DEFAULT_PRICES, PRICE_SOURCE))
    """Where each GPU's price comes from (said under the table); a GPU not named: 'given'."""
    replications: int = 3
    confidence: float = 0.95
    root_seed: int | None = None
    interval: float | None = None
    """A level (e.g. 0.9): a step-model draw per replication and each count's interval."""
    model_draws: bool = True
    """With ``interval``: whether replications draw the step model (False: seeds only)."""
    once: str | None = field(default=None, init=False)
    """Why the plan ran once where ``replications`` asked more (every replication the same
    run: :func:`~kvbudget.studies.setting.once_where_fixed`), else None."""

    def __post_init__(self) -> None:
        if not self.policies:
            self.policies = (self.scenario.spec.policy,)
        self.replications, self.once = once_where_fixed(
            self.scenario, self.replications, [*PLAN_KEYS, *(self.param_values or {})],
            self.interval)
        if not self.gpus:
            raise ValueError("plan: give at least one GPU type")
        seen: dict[str, str] = {}
        for g in self.gpus:
            name = get_gpu(g).name
            if name in seen:
                raise ValueError(f"plan: GPU types {seen[name]} and {g} are the same GPU "
                                 f"({name}): name it once")
            seen[name] = g
        self.prices, self.price_sources = priced_gpus(self.gpus, self.prices,
                                                      self.price_sources)
        if not self.tensor_parallel or min(self.tensor_parallel) < 1:
            raise ValueError(f"tensor parallel degrees must be >= 1, got {self.tensor_parallel}")
        if not self.replicas or min(self.replicas) < 1:
            raise ValueError(f"replica counts must be >= 1, got {self.replicas}")
        self.replicas = tuple(sorted(set(self.replicas)))
        if not self.disagg_replicas and self.scenario.spec.disaggregation is not None:
            self.disagg_replicas = tuple(n for n in self.replicas if n >= 2)
        if self.disagg_replicas and min(self.disagg_replicas) < 2:
            raise ValueError("disaggregated replica totals must be >= 2 (a prefill and a "
                             f"decode replica), got {self.disagg_replicas}")
        self.disagg_replicas = tuple(sorted(set(self.disagg_replicas)))
        check_study_args(self.replications, self.confidence)
        if not self.slos:
            self.slos = (Constraint.parse("overall_slo_attainment>=0.9"),)
        if self.root_seed is None:
            self.root_seed = self.scenario.seed
        if self.interval is not None:
            check_level(self.interval, self.replications)

    def seeds(self) -> list[int]:
        """The replications' seeds (:func:`~kvbudget.studies.sweep.replication_seeds`)."""
        assert self.root_seed is not None  # set in __post_init__
        return replication_seeds(self.root_seed, self.replications)

    def grid_axes(self) -> list[Axis]:
        values = self.param_values
        if values is None:
            values = {}
            for p in self.policies:
                if p in MAIN_PARAMETERS:
                    name, vals = MAIN_PARAMETERS[p]
                    values = {**values, name: tuple(sorted({*values.get(name, ()), *vals}))}
        return [Axis("policy", tuple(self.policies)),
                *(Axis(f"policy_params.{k}", tuple(v)) for k, v in values.items())]


@dataclass
class Candidate:
    """A configuration of GPU, tensor parallelism and policy setting, and what its search
    found: ``replicas`` (the smallest count that met the SLOs, or None), the evidence rows of
    that count (or of the largest tried), and a note."""

    index: int
    gpu: str
    tp: int
    policy: str
    params: dict[str, Any]
    overrides: tuple[str, ...]
    replicas: int | None = None
    tried: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    note: str = ""
    disaggregated: bool = False
    split: tuple[int, int] | None = None
    """A disaggregated configuration's (prefill, decode) replicas of ``rows``."""

    def counts(self, spec: PlanSpec) -> tuple[int, ...]:
        """The replica counts (totals) this configuration tries, a round each."""
        return spec.disagg_replicas if self.disaggregated else spec.replicas

    def splits(self, n: int) -> list[tuple[int, int] | None]:
        """The runs of one round: each split of ``n`` (disaggregated), else one."""
        return list(plan_disagg.splits(n)) if self.disaggregated else [None]
    by_count: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """The evidence rows of every replica count tried."""


@dataclass
class PlanResult:
    spec: PlanSpec
    candidates: list[Candidate]
    runs: list[dict[str, Any]]
    notes: list[str]
    setting: tuple[str, ...] = ()
    """What the runs took (:func:`~kvbudget.studies.setting.study_setting`; the GPU varies)."""

    def __repr__(self) -> str:
        """What a notebook shows: what was searched, over what, the cheapest configuration
        meeting the SLOs (or that none did) and the notes; not the spec and the runs."""
        s, best = self.spec, self.cheapest()
        head = (f"PlanResult: the cheapest of {len(self.candidates):,} configurations ("
                f"{', '.join(s.gpus)}; TP {', '.join(map(str, s.tensor_parallel))}; "
                f"{', '.join(s.policies)}) meeting "
                f"{', '.join(str(c) for c in s.slos)} ("
                f"{counted(s.replications, 'replication')} each)")
        found = ["cheapest: none; no configuration met the SLOs" if best is None else
                 f"cheapest: {best['gpu']} {best['replicas']}x{best['tp']} {best['policy']} "
                 f"${best['usd_per_hour']:.2f}/h ({best['gpus']} GPUs)",
                 *(f"note: {note}" for note in self.notes)]
        return study_repr(head, self.setting, found,
                          f".table(), .runs ({len(self.runs):,} runs), .describe()")

    def table(self) -> pd.DataFrame:
        """A row per configuration, cheapest feasible first (then the infeasible ones): GPUs,
        dollars per hour and per million output tokens, and for each SLO metric and each
        tier's attainment the mean with its t interval."""
        import pandas as pd

        s = self.spec
        tiers = [t.name for t in s.scenario.tiers()]
        metrics = list(dict.fromkeys([
            *(c.metric for c in s.slos), *(f"{t}_slo_attainment" for t in tiers),
            *(f"{t}_ttft_p99_s" for t in tiers), *(f"{t}_tpot_p99_s" for t in tiers)]))
        rows = []
        for c in self.candidates:
            if not c.rows:
                continue
            n = c.replicas if c.replicas is not None else c.tried[-1]
            gpus = n * c.tp
            price = s.prices[c.gpu]
            per_hour = gpus * price
            scaled = _scaled_cost(c.rows, price)
            tok = t_interval([_f(r.get(SUSTAINED)) for r in c.rows])[0]
            row: dict[str, Any] = {
                "gpu": c.gpu, "tp": c.tp, "replicas": n, "gpus": gpus, "policy": c.policy,
                **({"prefill_replicas": c.split[0] if c.split else None,
                    "decode_replicas": c.split[1] if c.split else None}
                   if s.disagg_replicas else {}),
                **{k.split(".", 1)[1]: v for k, v in c.params.items()},
                "feasible": c.replicas is not None,
                "usd_per_hour": per_hour if scaled is None else scaled[1],
                **({} if scaled is None else {"gpu_hours": scaled[0],
                                              "usd_run": scaled[0] * price}),
                "usd_per_m_output_tokens": usd_per_m_output_tokens(
                    c.rows, gpus, price, autoscaled=scaled is not None),
                "sustained_output_tokens_per_s": tok,
            }
            if s.interval is not None:
                row["replicas_low"], row["replicas_high"] = replicas_interval(c, s)
            for m in metrics:
                mean, low, high = t_interval([_f(r.get(m)) for r in c.rows], s.confidence,
                                             metric_range(m))
                row[m], row[f"{m}_low"], row[f"{m}_high"] = mean, low, high
            row["note"] = c.note
            rows.append(row)
        df = pd.DataFrame(rows)
        if df.empty:
            return df
        df = df.sort_values(["feasible", "usd_per_hour", "usd_per_m_output_tokens"],
                            ascending=[False, True, True], kind="stable")
        return df.reset_index(drop=True)

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {
            "gpus": list(s.gpus), "gpus_given": s.gpus_given,
            "model": s.scenario.spec.model, **defaulted_of(s.scenario, ["gpu"]),
            "tensor_parallel": list(s.tensor_parallel),
            "replicas": list(s.replicas), "disagg_replicas": list(s.disagg_replicas),
            "policies": list(s.policies),
            "slos": [str(c) for c in s.slos], "prices_usd_per_gpu_hour": dict(s.prices),
            "replications": s.replications, "confidence": s.confidence,
            "root_seed": s.root_seed, "notes": self.notes,
            "num_runs": len(self.runs),
            **({} if s.interval is None else {"interval": {
                "level": s.interval, "combines": s.combines(),
                "method": "each replication needs the smallest replica count tried at which it "
                          "meets every SLO on its own; the level's quantiles of those needs "
                          "(replicas_low, replicas_high in plan.csv; inf: missed at every "
                          "count tried)",
                "cheapest": self.cheapest()}}),
        }

    def cheapest(self) -> dict[str, Any] | None:
        """The cheapest feasible configuration (the table's first row), with its interval."""
        df = self.table()
        if df.empty or not bool(df.iloc[0]["feasible"]):
            return None
        row = df.iloc[0]
        keys = ("gpu", "tp", "replicas", "gpus", "policy", "usd_per_hour", "replicas_low",
                "replicas_high")
        return {k: _plain(row[k]) for k in keys if k in row}

    def write(self, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        table = out_dir / TABLE_FILE
        self.table().to_csv(table, index=False)
        runs = out_dir / RUNS_FILE
        rows_to_frame(self.runs).to_parquet(runs, index=False)
        res = out_dir / RESULT_FILE
        res.write_text(json.dumps(self.describe(), indent=2, default=str) + "\n")
        return [table, runs, res]


def _plain(x: Any) -> Any:
    """A table cell as JSON: numpy numbers as Python's, ``inf`` as None."""
    if isinstance(x, np.generic):
        x = x.item()
    return None if isinstance(x, float) and not math.isfinite(x) else x


def replicas_interval(c: Candidate, spec: PlanSpec) -> tuple[float, float]:
    """A configuration's replica count's ``spec.interval`` interval over the replications'
    worlds (module doc), each end at a count tried (never interpolated)."""
    assert spec.interval is not None
    needs: dict[int, float] = {}
    for count in sorted(c.by_count):
        for r in c.by_count[count]:
            rep = int(r["replication"])
            needs.setdefault(rep, math.inf)
            if math.isinf(needs[rep]) and all(
                    s.check([_metric(r, s.metric)], spec.confidence)[0] for s in spec.slos):
                needs[rep] = float(count)
    if not needs:
        return math.nan, math.nan
    v = np.array(list(needs.values()), np.float64)
    q = ((1 - spec.interval) / 2, (1 + spec.interval) / 2)
    return (float(np.quantile(v, q[0], method="lower")),
            float(np.quantile(v, q[1], method="higher")))


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


SUSTAINED = "overall_sustained_output_tokens_per_s"
"""The runs' column of the output tokens served per second of the time the work took."""


def usd_per_m_output_tokens(rows: Sequence[Mapping[str, Any]], gpus: int, price: float, *,
                            autoscaled: bool = False) -> float:
    """Dollars per million output tokens served, pooled over the runs ``rows``: each run pays
    ``gpus x price`` per hour over its ``duration_s`` (first arrival to last finish), or an
    autoscaled fleet's ``autoscale_gpu_hours x price``; it serves ``duration_s`` times its
    sustained output tokens per second (the tokens its requests completed). NaN when a run
    lacks a figure or nothing was served."""
    usd = tokens = 0.0
    for r in rows:
        duration_s, rate = _f(r.get("duration_s")), _f(r.get(SUSTAINED))
        hours = (_f(r.get("autoscale_gpu_hours")) if autoscaled
                 else gpus * duration_s / 3600)
        usd += hours * price
        tokens += rate * duration_s
    if not (math.isfinite(usd) and math.isfinite(tokens)) or tokens <= 0:
        return math.nan
    return usd / tokens * 1e6


def _scaled_cost(rows: list[dict[str, Any]], price: float) -> tuple[float, float] | None:
    """An autoscaled configuration's mean GPU-hours over its runs and its dollars per hour
    (the mean GPUs held times ``price``); None for a fixed fleet."""
    hours = [_f(r.get("autoscale_gpu_hours")) for r in rows]
    if not hours or any(math.isnan(h) for h in hours):
        return None
    spans = [_f(r.get("autoscale_end_s")) / 3600 for r in rows]
    per_hour = [h / t * price for h, t in zip(hours, spans, strict=True) if t > 0]
    return (float(np.mean(hours)), float(np.mean(per_hour)) if per_hour else math.nan)


def _fits(scenario: Scenario, gpu: str, tp: int) -> str | None:
    """Why the scenario's model cannot run on ``gpu`` at degree ``tp`` (None when it can)."""
    base = scenario.sim_config()
    try:
        config = replace(base, gpu=gpu, engine=replace(base.engine, tensor_parallel_size=tp))
        config.resolved_num_gpu_blocks()
    except ValueError as exc:
        return str(exc)
    return None


def _candidates(spec: PlanSpec, notes: list[str]) -> list[Candidate]:
    data = scenario_data(spec.scenario)
    points = expand_grid(data, spec.grid_axes())
    out: list[Candidate] = []
    for gpu in spec.gpus:
        if gpu not in spec.prices:
            notes.append(f"{gpu}: no price in the table; skipped (give --price {gpu}=USD)")
            continue
        for tp in spec.tensor_parallel:
            why = _fits(spec.scenario, gpu, tp)
            if why is not None:
                notes.append(f"{gpu} x TP{tp}: {why}; skipped")
                continue
            base = spec.scenario.sim_config()  # the cost file checked before any run
            check_cost_model_at(spec.scenario, replace(
                base, gpu=gpu, engine=replace(base.engine, tensor_parallel_size=tp)),
                f"plan --gpus {gpu}" + (f" at TP{tp}" if len(spec.tensor_parallel) > 1 else ""))
            for p in points:
                params = {k: v for k, v in p.values if k.startswith("policy_params.")
                          and v is not None}
                overrides = (*p.overrides, f"gpu={json.dumps(gpu)}",
                             f"engine.tensor_parallel_size={tp}")
                out.append(Candidate(len(out), gpu, tp, p.policy, params,
                                     (*overrides, *plan_disagg.colocated_overrides(spec.scenario))))
                if spec.disagg_replicas and _disagg_runs(spec, overrides, notes):
                    out.append(Candidate(len(out), gpu, tp, p.policy, params, overrides,
                                         disaggregated=True))
    if not out:
        raise ValueError("plan: no configuration to try (" + "; ".join(notes) + ")")
    return out


def _disagg_runs(spec: PlanSpec, overrides: tuple[str, ...], notes: list[str]) -> bool:
    """Whether the disaggregated runs of a configuration can be made (else a note says why)."""
    try:
        scenario_from_dict(scenario_data(spec.scenario), spec.scenario.base_dir,
                           (*overrides, *_run_overrides(spec, 2, (1, 1)))).sim_config()
    except ValueError as exc:
        gpu_tp = ", ".join(o for o in overrides if o.startswith(("gpu=", "engine.tensor")))
        note = f"disaggregated ({gpu_tp}): {exc}; skipped"
        if note not in notes:
            notes.append(note)
        return False
    return True


def _run_overrides(spec: PlanSpec, replicas: int, split: tuple[int, int] | None
                   ) -> tuple[str, ...]:
    """A round's overrides of a configuration: its fleet of ``replicas``, or its split."""
    if split is None:
        return _fleet_overrides(spec, replicas)
    table, _ = plan_disagg.disagg_table(spec.scenario)
    return plan_disagg.disagg_overrides(table, split,
                                        has_fleet=spec.scenario.spec.fleet is not None)


def _fleet_overrides(spec: PlanSpec, replicas: int) -> tuple[str, ...]:
    fleet = spec.scenario.spec.fleet
    if replicas == 1 and fleet is None:
        return ()
    table: dict[str, Any] = {"num_replicas": replicas, "router": "least_tokens",
                             "budget": "per_replica"}
    if fleet is not None:
        table = {"num_replicas": replicas, "router": fleet.router, "budget": fleet.budget}
    if fleet is not None and fleet.autoscale is not None:  # the count is the upper bound
        scale = asdict(fleet.autoscale)
        low = min(scale["min_replicas"], replicas)
        start = scale["initial_replicas"]
        scale.update(min_replicas=low, max_replicas=replicas,
                     initial_replicas=None if start is None else min(max(start, low), replicas))
        table = {"router": fleet.router, "budget": fleet.budget, "autoscale": scale}
    return (f"fleet={json.dumps(table)}",)


def _metric(row: Mapping[str, Any], metric: str) -> float:
    """A row's value of an SLO's metric; a count of a rejection reason the run never saw is 0
    (the runs table has a ``*_reason_*`` column only where the reason occurred)."""
    if "_reason_" in metric and row.get(metric) is None:
        return 0.0
    return _f(row.get(metric))


def _check_metrics(spec: PlanSpec, row: Mapping[str, Any]) -> None:
    """Every SLO names a column of the runs table (a count of a rejection reason appears only
    where the reason occurred, so ``*_reason_*`` is taken on trust)."""
    for c in spec.slos:
        if c.metric not in row and "_reason_" not in c.metric:
            raise ValueError(
                f"no metric {c.metric!r} in the runs table; e.g. overall_slo_attainment, "
                "interactive_slo_attainment, tiers.interactive.ttft_s.p99"
            )


def max_runs(spec: PlanSpec, candidates: Sequence[Candidate] | int) -> int:
    """Runs a plan makes at most (every configuration at every replica count; a
    disaggregated one every split of every total). An int: that many colocated ones."""
    if isinstance(candidates, int):
        return candidates * len(spec.replicas) * spec.replications
    return sum(_runs_left(spec, c, 0) for c in candidates)


def _runs_left(spec: PlanSpec, c: Candidate, round_no: int) -> int:
    """The runs configuration ``c`` makes from round ``round_no`` on if it never meets the
    SLOs."""
    return sum(len(c.splits(n)) for n in c.counts(spec)[round_no:]) * spec.replications


def _round_points(spec: PlanSpec, active: Sequence[Candidate], round_no: int
                  ) -> list[tuple[Candidate, int, tuple[int, int] | None, GridPoint]]:
    """Each active configuration's grid points of one round: its replica count (colocated)
    or every split of its total (disaggregated)."""
    out = []
    for c in active:
        n = c.counts(spec)[round_no]
        for split in c.splits(n):
            values = (("gpu", c.gpu), ("tp", c.tp), ("replicas", n),
                      *plan_disagg.split_values(split), ("policy", c.policy), *c.params.items())
            out.append((c, n, split, GridPoint(c.index, values,
                                                (*c.overrides, *_run_overrides(spec, n, split)),
                                                c.policy, 1.0)))
    return out


def _judge(spec: PlanSpec, c: Candidate, n: int,
           groups: dict[tuple[int, int] | None, list[dict[str, Any]]]) -> None:
    """Record configuration ``c``'s round at ``n`` replicas (its runs by split)."""
    c.tried.append(n)
    if c.disaggregated:
        split, ok = plan_disagg.best_split(
            {k: v for k, v in groups.items() if k is not None}, spec.slos, spec.confidence,
            _metric)
        c.split, c.rows = split, groups[split]
    else:
        c.rows = groups[None]
        ok = all(s.check([_metric(r, s.metric) for r in c.rows], spec.confidence)[0]
                 for s in spec.slos)
    c.by_count[n] = c.rows
    if ok:
        c.replicas, c.done = n, True


def plan(
    spec: PlanSpec,
    executor: Executor | None = None,
    out_dir: Path | None = None,
    *,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int, int], Sequence[str] | None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> PlanResult:
    """Search the space of the module docstring. ``on_start(max_runs, num_stored)`` is called
    before the first run (what it returns, the setting lines it said, is the result's
    ``setting``: the workload is loaded once); ``progress(n)`` as runs finish (stored runs reused count at once);
    ``on_total(n)`` after each replica count with the runs the plan now makes at most (the runs
    made, plus the configurations still missing times the replica counts left): a progress
    bar's total that ends equal to the runs made. ``executor``: where the runs go (default: this
    process, one at a time). The :class:`PlanResult` keeps what the runs took (``setting``)."""
    executor = in_process(executor)
    notes: list[str] = []
    candidates = _candidates(spec, notes)
    if any(c.disaggregated for c in candidates):
        notes.extend(plan_disagg.disagg_table(spec.scenario)[1])
    assert spec.root_seed is not None
    seeds = replication_seeds(spec.root_seed, spec.replications)
    draws = spec.step_draws()
    stored = None if out_dir is None else StoredRuns(out_dir, resume=resume, what="plan")
    setting = None
    if on_start is not None:  # what it returns: the setting lines it said (loaded once)
        setting = on_start(max_runs(spec, candidates), 0 if stored is None else len(stored.stored))
    all_rows: list[dict[str, Any]] = []
    for round_no in range(max(len(spec.replicas), len(spec.disagg_replicas))):
        active = [c for c in candidates if not c.done and round_no < len(c.counts(spec))]
        if not active:
            break
        points = _round_points(spec, active, round_no)
        runs = plan_runs(spec.scenario, [p[3] for p in points], seeds, step_draws=draws)
        rows = []
        if not all_rows and runs:  # one run first: an SLO on no metric fails before the grid
            rows = execute_stored(runs[:1], executor, stored, progress=progress)
            _check_metrics(spec, rows[0])
            runs = runs[1:]
        rows += execute_stored(runs, executor, stored, progress=progress)
        all_rows.extend(rows)
        by_point: dict[int, dict[tuple[int, int] | None, list[dict[str, Any]]]] = {}
        for k, row in enumerate(rows):  # plan_runs: each point's seeds in turn
            c, _, split, _ = points[k // len(seeds)]
            by_point.setdefault(c.index, {}).setdefault(split, []).append(row)
        for c in active:
            _judge(spec, c, c.counts(spec)[round_no], by_point[c.index])
        if on_total is not None:
            on_total(len(all_rows) + sum(_runs_left(spec, c, round_no + 1)
                                         for c in candidates if not c.done))
    for c in candidates:
        if not c.done:
            c.note = (f"misses the SLOs up to {c.tried[-1]} replicas"
                      + (" (every prefill:decode split)" if c.disaggregated else "")
                      if c.tried else "not run")
    return PlanResult(spec, candidates, all_rows, notes, tuple(setting) if setting is not None
                      else study_setting(spec.scenario, ["gpu"], spec.once, spec.seeds()))


def price_note(spec: PlanSpec) -> str:
    """``prices per GPU-hour: A100-80GB $1.10, H100-SXM (given as H100) $2.50 (source); L40S
    $1.00 (given)`` for the GPUs the plan tried, grouped by source, each by the preset it
    resolved to and the name it was given as where they differ (as ``simulate``'s line); the
    default list's (not ``gpus_given``) said as assumed, by the names the table uses."""
    groups: dict[str, list[str]] = {}
    for g in spec.gpus:
        if g in spec.prices:
            src = spec.price_sources.get(g, "given")
            preset = get_gpu(g).name
            name = as_given(g, preset) if spec.gpus_given else (
                f"{preset} ({g})" if preset != g else g)
            groups.setdefault(src, []).append(f"{name} ${spec.prices[g]:.2f}")
    head = ("prices per GPU-hour" if spec.gpus_given else "prices per GPU-hour of the GPUs "
            "tried (assumed: plan's default --gpus; --gpus to choose)")
    return f"{head}: " + "; ".join(f"{', '.join(items)} ({src})" for src, items in groups.items())


def summary_rows(result: PlanResult, top: int | None = None) -> pd.DataFrame:
    """The ranked table cut to ``top`` rows, plus the cheapest feasible row of every GPU type
    not among them (so that each GPU type shows its best)."""
    df = result.table()
    if df.empty or top is None or len(df) <= top:
        return df
    head = df.head(top)
    extra = [g.head(1) for gpu, g in df[df["feasible"]].groupby("gpu", sort=False)
             if gpu not in set(head["gpu"])]
    import pandas as pd

    return pd.concat([head, *extra]).reset_index(drop=True)


def policy_label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    """``overcommit (overcommit_ratio=0.7)`` from a table row."""
    params = [f"{k}={row[k]:g}" for k in keys
              if k in row and isinstance(row[k], int | float) and not np.isnan(row[k])]
    return str(row["policy"]) + (f" ({', '.join(params)})" if params else "")
