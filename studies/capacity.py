"""Capacity: the largest arrival rate a configuration sustains while meeting an SLO attainment
target, per policy (DistServe's per-GPU goodput, Zhong et al., OSDI 2024: the maximum request
rate at which the SLO attainment stays at or above a target such as 90%, divided by the GPUs).

The load is the scenario's workload with every arrival time divided by a rate scale ``s`` (the
same requests, offered ``s`` times as fast; see :func:`kvbudget.workloads.workload.scale_rate`), so the
arrival rate is ``s`` times the workload's own. For each policy the search keeps ``lo`` (the
largest scale seen to meet the target) and ``hi`` (the smallest seen to miss it): it starts at
``s = 1``, doubles or halves until the target is bracketed, then bisects geometrically
(``sqrt(lo * hi)``) until ``hi / lo - 1 <= rel_tol``. A scale meets the target when the mean
attainment over the replications (common random numbers: the same seeds at every scale and for
every policy) is at least the target, and, with ``slos`` (constraints on any metric, e.g.
``tiers.interactive.ttft_s.p99<=2``, see :class:`kvbudget.studies.tune.Constraint`), when the
mean of each constrained metric meets its limit (``use_target=False``: the SLOs alone). All
policies advance together, one round at a time, so
the executor always has ``policies x replications`` runs to share out.

The reported capacity is the offered rate at ``lo`` (requests per second), and per GPU that
figure divided by the configuration's GPUs (fleet replicas times the model preset's
tensor-parallel degree).

With ``interval`` (a level such as 0.9), replication ``r`` also takes draw ``r`` of the step
model (:func:`kvbudget.studies.intervals.replication_draws`: the default model's constants
from their stated ranges and its structural error, or a calibration's posterior), so the
replications are plausible worlds that differ in their seed and in the step model; the
search still decides on their mean, and the t interval of the attainment at capacity carries
both. The capacity gets an interval too (:func:`world_interval`): after the search, each
replication's own capacity is searched on (:func:`refine_worlds`: one run of that world per
step, doubling, halving or bisecting its bracket from the loads already visited, down to
``rel_tol``); its bracket is the largest load it met below the smallest it missed, and the
interval runs from the ``(1 - level) / 2`` quantile of the lower brackets to the
``(1 + level) / 2`` quantile of the upper ones (a world that meets the target at
``max_scale`` is open above: ``inf``; one that misses at ``min_scale`` has 0 below).
``model_draws=False`` keeps the seeds alone (the seed-only interval).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.studies.executors import in_process
from kvbudget.studies.intervals import StepDraw, WorldDraws, check_level
from kvbudget.studies.setting import defaulted_of, once_where_fixed, study_repr, study_setting
from kvbudget.studies.sweep import (
    Axis,
    GridPoint,
    StoredRuns,
    SweepPlan,
    check_study_args,
    execute_stored,
    metric_range,
    plan_runs,
    replication_seeds,
    rows_to_frame,
    summarize_points,
    t_interval,
)
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.executors import Executor
    from kvbudget.studies.tune import Constraint

EVIDENCE_FILE = "evidence.parquet"
RESULT_FILE = "capacity.json"


def num_gpus(scenario: Scenario) -> int:
    """GPUs of the simulated configuration: replicas (a ``[fleet]``, else one engine) times the
    engine's ``tensor_parallel_size``; a disaggregated one's, each pool's replicas times its
    own degree (its ``engine`` table over ``[engine]``)."""
    tp = int(scenario.spec.engine.tensor_parallel_size)
    disagg = scenario.spec.disaggregation
    if disagg is not None:
        return sum(p.num_replicas * int(p.engine.get("tensor_parallel_size", tp))
                   for p in (disagg.prefill, disagg.decode) if p is not None)
    replicas = scenario.spec.fleet.num_replicas if scenario.spec.fleet is not None else 1
    return max(1, replicas * tp)


@dataclass
class CapacitySpec(WorldDraws):
    scenario: Scenario
    policies: tuple[str, ...] = ()
    target: float = 0.9
    metric: str = "overall_slo_attainment"
    replications: int = 3
    rel_tol: float = 0.02
    min_scale: float = 1 / 64
    max_scale: float = 64.0
    max_rounds: int = 30
    confidence: float = 0.95
    root_seed: int | None = None
    slos: tuple[Constraint, ...] = ()
    use_target: bool = True
    interval: float | None = None
    """A level (e.g. 0.9): a step-model draw per replication and the capacity's interval."""
    model_draws: bool = True
    """With ``interval``: whether replications draw the step model (False: seeds only)."""
    once: str | None = field(default=None, init=False)
    """Why the search ran once where ``replications`` asked more (every replication the same
    run: :func:`~kvbudget.studies.setting.once_where_fixed`), else None."""

    def __post_init__(self) -> None:
        if not self.policies:
            self.policies = (self.scenario.spec.policy,)
        self.replications, self.once = once_where_fixed(
            self.scenario, self.replications, ["rate_scale"], self.interval)
        if len(set(self.policies)) != len(self.policies):
            raise ValueError(f"policies must be distinct, got {list(self.policies)}")
        if not 0 < self.target <= 1:
            raise ValueError(f"target must be in (0, 1], got {self.target!r}")
        check_study_args(self.replications, self.confidence)
        if not 0 < self.rel_tol < 1:
            raise ValueError(f"rel_tol must be in (0, 1), got {self.rel_tol!r}")
        if self.scenario.spec.closed_loop is not None:
            raise ValueError("capacity searches the arrival rate, and a closed loop of users "
                             "sends each request when its last one ended, not at the "
                             "workload's times: sweep --grid closed_loop.num_users=... instead")
        if not 0 < self.min_scale < 1 < self.max_scale:
            raise ValueError("need 0 < min_scale < 1 < max_scale")
        if self.root_seed is None:
            self.root_seed = self.scenario.seed
        if not self.use_target and not self.slos:
            raise ValueError("capacity needs an attainment target or at least one SLO")
        if self.interval is not None:
            check_level(self.interval, self.replications)

    def seeds(self) -> list[int]:
        """The replications' seeds (:func:`~kvbudget.studies.sweep.replication_seeds`)."""
        assert self.root_seed is not None  # set in __post_init__
        return replication_seeds(self.root_seed, self.replications)

    def criteria(self) -> list[str]:
        """What a load must meet, in words (``overall_slo_attainment>=0.9``, SLOs)."""
        out = [f"{self.metric}>={self.target:g}"] if self.use_target else []
        return [*out, *(str(c) for c in self.slos)]

    def expected_runs(self) -> int:
        """About how many runs the search makes (a progress bar's total): per policy, the
        first load, a doubling or halving or two to bracket, then the bisection down to
        ``rel_tol``, each times the replications (and, with ``interval``, the worlds' own)."""
        bisect = math.ceil(math.log2(math.log(2) / math.log1p(self.rel_tol)))
        # with an interval, each world's own search: about three more runs of each world
        worlds = 3 if self.interval is not None else 0
        return len(self.policies) * self.replications * (3 + max(bisect, 0) + worlds)


@dataclass
class _Search:
    policy: str
    lo: float | None = None
    hi: float | None = None
    done: bool = False
    note: str = ""
    seen: dict[float, list[dict[str, Any]]] = field(default_factory=dict)
    worlds: dict[int, dict[float, dict[str, Any]]] = field(default_factory=dict)
    """With ``interval``: each replication's rows by load (the search's and its own)."""

    def next_scale(self, spec: CapacitySpec) -> float | None:
        if self.done:
            return None
        if self.lo is None and self.hi is None:
            return 1.0
        if self.lo is None:
            assert self.hi is not None
            nxt = self.hi / 2
            if nxt < spec.min_scale:
                self.done, self.note = True, f"misses the target even at scale {self.hi:g}"
                return None
            return nxt
        if self.hi is None:
            nxt = self.lo * 2
            if nxt > spec.max_scale:
                self.done, self.note = True, f"meets the target up to scale {self.lo:g} (censored)"
                return None
            return nxt
        if self.hi / self.lo - 1 <= spec.rel_tol:
            self.done = True
            return None
        return math.sqrt(self.lo * self.hi)


@dataclass
class PolicyCapacity:
    policy: str
    capacity_rps: float
    capacity_rps_per_gpu: float
    scale: float
    bracket_rps: tuple[float, float]
    attainment: tuple[float, float, float]
    evaluations: int
    note: str
    interval_rps: tuple[float, float] | None = None
    """With ``interval``: the capacity's interval over the replications' worlds."""

    def describe(self) -> dict[str, Any]:
        def n(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        extra = {} if self.interval_rps is None else {
            "capacity_interval_rps": [n(self.interval_rps[0]), n(self.interval_rps[1])]}
        return {**extra,
            "policy": self.policy,
            "capacity_rps": n(self.capacity_rps),
            "capacity_rps_per_gpu": n(self.capacity_rps_per_gpu),
            "rate_scale": n(self.scale),
            "bracket_rps": [n(self.bracket_rps[0]), n(self.bracket_rps[1])],
            "attainment_at_capacity": {"mean": n(self.attainment[0]),
                                       "ci_low": n(self.attainment[1]),
                                       "ci_high": n(self.attainment[2])},
            "evaluations": self.evaluations,
            "note": self.note,
        }


@dataclass
class CapacityResult:
    spec: CapacitySpec
    capacities: list[PolicyCapacity]
    rows: list[dict[str, Any]]
    world_rows: list[dict[str, Any]] = field(default_factory=list)
    """With ``interval``: the runs of each replication's own search (:func:`refine_worlds`)."""
    setting: tuple[str, ...] = ()
    """What the runs took (:func:`~kvbudget.studies.setting.study_setting`)."""

    def __repr__(self) -> str:
        """What a notebook shows: what a load must meet, over what, and each policy's
        capacity with its bracket (and interval), not the spec and the runs."""
        s = self.spec
        found = [f"{c.policy}: {c.capacity_rps:.4g} req/s ({c.capacity_rps_per_gpu:.4g} per GPU)"
                 f", bracket {c.bracket_rps[0]:.4g} .. {c.bracket_rps[1]:.4g} req/s"
                 + ("" if c.interval_rps is None else f", {s.interval:.0%} interval "
                    f"{c.interval_rps[0]:.4g} .. {c.interval_rps[1]:.4g}")
                 + (f"; {c.note}" if c.note else "") for c in self.capacities]
        return study_repr(
            f"CapacityResult: the largest arrival rate meeting {' and '.join(s.criteria())} "
            f"(mean over {counted(s.replications, 'replication')})", self.setting, found,
            f".table() ({len(self.rows) + len(self.world_rows):,} runs), .curve(), .describe()")

    def table(self) -> pd.DataFrame:
        """Every run: the search's, then each world's own (``search`` = ``world``)."""
        return rows_to_frame([*self.rows, *({**r, "search": "world"} for r in self.world_rows)])

    def curve(self) -> pd.DataFrame:
        """Attainment against offered rate for each policy over the loads the search visited
        (mean and t interval over the replications); see :func:`attainment_curve` for a
        common grid of loads."""
        df = rows_to_frame(self.rows)
        return summarize_points(df, [self.spec.metric, "offered_rate_rps"],
                                by=["policy", "rate_scale"], confidence=self.spec.confidence)

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {
            "metric": s.metric,
            "target": s.target if s.use_target else None,
            "slos": [str(c) for c in s.slos],
            "replications": s.replications,
            "rel_tol": s.rel_tol,
            "root_seed": s.root_seed,
            "num_gpus": num_gpus(s.scenario),
            "gpu": s.scenario.spec.gpu,
            "model": s.scenario.spec.model,
            **defaulted_of(s.scenario),
            "policies": [c.describe() for c in self.capacities],
            **({} if s.interval is None else {"interval": {
                "level": s.interval, "combines": s.combines(),
                "method": "each replication's own capacity searched to rel_tol from the "
                          "loads visited; the level's quantiles of the worlds' lower and upper "
                          "brackets (null: open above)"}}),
        }

    def write(self, out_dir: Path) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        ev = out_dir / EVIDENCE_FILE
        self.table().to_parquet(ev, index=False)
        res = out_dir / RESULT_FILE
        res.write_text(json.dumps(self.describe(), indent=2) + "\n")
        return [ev, res]


def _meets(rows: Sequence[dict[str, Any]], spec: CapacitySpec) -> tuple[bool, float]:
    """Whether a load meets the criteria on the mean over its replications (the attainment
    target and every SLO), and the mean attainment."""
    v = np.array([_f(r.get(spec.metric)) for r in rows])
    if v.size == 0 or not np.all(np.isfinite(v)):
        return False, math.nan
    mean = float(v.mean())
    ok = mean >= spec.target if spec.use_target else True
    for c in spec.slos:
        w = np.array([_f(r.get(c.metric)) for r in rows])
        if w.size == 0 or not np.all(np.isfinite(w)):
            return False, mean
        m = float(w.mean())
        ok = ok and (m <= c.limit if c.op == "<=" else m >= c.limit)
    return ok, mean


def _f(x: Any) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def capacity(spec: CapacitySpec, executor: Executor | None = None, *,
             progress: Callable[[int], None] | None = None,
             stored: StoredRuns | None = None,
             setting: Sequence[str] | None = None) -> CapacityResult:
    """Bisect every policy's capacity (see module doc). With ``stored``, runs are kept as they
    finish and kept runs are reused (the bisection is deterministic: a resumed search takes
    the same steps). ``executor``: where the runs go (default: this process, one at a time).
    The :class:`CapacityResult` keeps what the runs took (``setting``: given, the lines
    :func:`~kvbudget.studies.setting.study_setting` already made, else made here)."""
    executor = in_process(executor)
    assert spec.root_seed is not None
    seeds = replication_seeds(spec.root_seed, spec.replications)
    draws = spec.step_draws()
    searches = {p: _Search(p) for p in spec.policies}
    base_policy = spec.scenario.spec.policy
    all_rows: list[dict[str, Any]] = []
    index = 0
    for round_no in range(spec.max_rounds):
        points: list[GridPoint] = []
        owner: dict[int, tuple[_Search, float]] = {}
        for s in searches.values():
            scale = s.next_scale(spec)
            if scale is None:
                continue
            overrides = () if s.policy == base_policy else (
                f"policy={json.dumps(s.policy)}", "policy_params={}")
            points.append(GridPoint(index, (("policy", s.policy),), overrides, s.policy, scale))
            owner[index] = (s, scale)
            index += 1
        if not points:
            break
        rows = execute_stored(plan_runs(spec.scenario, points, seeds, step_draws=draws),
                              executor, stored, progress=progress)
        for name in [spec.metric, *(c.metric for c in spec.slos)]:
            if rows and name not in rows[0]:
                raise ValueError(
                    f"no metric {name!r} in the runs table; e.g. overall_slo_attainment, "
                    "interactive_slo_attainment, tiers.interactive.ttft_s.p99"
                )
        for r in rows:
            r["round"] = round_no
        all_rows.extend(rows)
        for i, (s, scale) in owner.items():
            mine = [r for r in rows if int(r["point"]) == i]
            s.seen[scale] = mine
            ok, _ = _meets(mine, spec)
            if ok:
                s.lo = scale if s.lo is None else max(s.lo, scale)
            else:
                s.hi = scale if s.hi is None else min(s.hi, scale)
    else:
        for s in searches.values():
            if not s.done:
                s.note = s.note or f"stopped after {spec.max_rounds} rounds"
    world_rows = [] if spec.interval is None else refine_worlds(
        spec, executor, list(searches.values()), seeds, draws, stored, progress,
        first_index=index)
    gpus = num_gpus(spec.scenario)
    results = [_result(s, spec, gpus) for s in searches.values()]
    return CapacityResult(spec, results, all_rows, world_rows, tuple(setting) if setting
                          is not None else study_setting(spec.scenario, ["rate_scale"], spec.once,
                                                         seeds))


def _rate_at(rows: Sequence[dict[str, Any]]) -> float:
    v = np.array([_f(r.get("offered_rate_rps")) for r in rows])
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def _result(s: _Search, spec: CapacitySpec, gpus: int) -> PolicyCapacity:
    if s.lo is None:
        hi_rate = _rate_at(s.seen[s.hi]) if s.hi is not None else math.nan
        return PolicyCapacity(s.policy, 0.0, 0.0, 0.0, (0.0, hi_rate),
                              (math.nan, math.nan, math.nan), len(s.seen),
                              s.note or "misses the target at every load tried")
    rows = s.seen[s.lo]
    rate = _rate_at(rows)
    hi_rate = _rate_at(s.seen[s.hi]) if s.hi is not None else math.inf
    att = t_interval([_f(r.get(spec.metric)) for r in rows], spec.confidence,
                     metric_range(spec.metric))
    band = None if spec.interval is None else world_interval(s, spec)
    note = "; ".join(n for n in (s.note, burst_note(rows)) if n)
    return PolicyCapacity(s.policy, rate, rate / gpus, s.lo, (rate, hi_rate), att,
                          len(s.seen), note, band)


BURST = "burst"
"""How a capacity's note begins when its load's requests all came in less time than the run
went on after the last of them (:func:`burst_note`)."""


def burst_note(rows: Sequence[dict[str, Any]]) -> str:
    """The note of a capacity whose runs (``rows``, its load's replications) drained longer
    after the last arrival than the arrivals took (means of ``drain_s`` and
    ``offered_window_s``): a workload that short, offered ``s`` times as fast, is over before
    a queue can build, so the figure is a burst the engine absorbed, not a rate it sustains.
    ``""`` otherwise."""
    def mean(column: str) -> float:
        v = [x for x in (_f(r.get(column)) for r in rows) if math.isfinite(x)]
        return sum(v) / len(v) if v else math.nan

    window, drain = mean("offered_window_s"), mean("drain_s")
    if not drain > window:  # NaN (figures not there) too
        return ""
    return f"{BURST}: {window:.2g} s in, {drain:.2g} s drain"


def world_bracket(loads: dict[float, dict[str, Any]], spec: CapacitySpec
                  ) -> tuple[float | None, float | None]:
    """One replication's capacity bracket in rate scales from its rows by load: ``(low,
    high)``, ``high`` the smallest load it missed (None: met all), ``low`` the largest load
    below that it met (None: none)."""
    missed = [sc for sc, r in loads.items() if not _meets([r], spec)[0]]
    high = min(missed) if missed else None
    met = [sc for sc, r in loads.items() if (high is None or sc < high) and _meets([r], spec)[0]]
    return (max(met) if met else None), high


def _world_next(loads: dict[float, dict[str, Any]], spec: CapacitySpec) -> float | None:
    """The next load of one replication's own search (None: bracketed to ``rel_tol``, or
    beyond the scales searched)."""
    low, high = world_bracket(loads, spec)
    if low is None:
        nxt = (high or 1.0) / 2
        return nxt if nxt >= spec.min_scale else None
    if high is None:
        nxt = low * 2
        return nxt if nxt <= spec.max_scale else None
    return None if high / low - 1 <= spec.rel_tol else math.sqrt(low * high)


def refine_worlds(spec: CapacitySpec, executor: Executor, searches: list[_Search],
                  seeds: list[int], draws: list[StepDraw] | None, stored: StoredRuns | None,
                  progress: Callable[[int], None] | None, *, first_index: int
                  ) -> list[dict[str, Any]]:
    """Each replication's own capacity search (module doc), all policies and replications a
    round at a time; returns the rows it ran (a load the search visited is not run again)."""
    base_policy = spec.scenario.spec.policy
    for s in searches:
        for scale, rows in s.seen.items():
            for r in rows:
                s.worlds.setdefault(int(r["replication"]), {})[scale] = r
    out: list[dict[str, Any]] = []
    index = first_index
    for round_no in range(spec.max_rounds):
        runs = []
        owner: dict[int, _Search] = {}
        for s in searches:
            overrides = () if s.policy == base_policy else (
                f"policy={json.dumps(s.policy)}", "policy_params={}")
            for rep, loads in s.worlds.items():
                load = _world_next(loads, spec)
                if load is None:
                    continue
                point = GridPoint(index, (("policy", s.policy),), overrides, s.policy, load)
                runs += plan_runs(spec.scenario, [point], [seeds[rep]], first_replication=rep,
                                  step_draws=None if draws is None else [draws[rep]])
                owner[index] = s
                index += 1
        if not runs:
            break
        rows = execute_stored(runs, executor, stored, progress=progress)
        for r in rows:
            r["round"] = round_no
            owner[int(r["point"])].worlds[int(r["replication"])][float(r["rate_scale"])] = r
        out += rows
    return out


def world_interval(s: _Search, spec: CapacitySpec) -> tuple[float, float]:
    """The capacity's ``spec.interval`` interval over the replications' worlds (module doc):
    the lower quantile of the lower brackets, the upper quantile of the upper ones (taken at
    an observed value, never interpolated: a bracket's end may be ``inf``), in requests per
    second at each world's own offered rate."""
    assert spec.interval is not None
    lows, highs = [], []
    for loads in s.worlds.values():
        low, high = world_bracket(loads, spec)
        lows.append(0.0 if low is None else _rate_at([loads[low]]))
        highs.append(math.inf if high is None else _rate_at([loads[high]]))
    if not lows:
        return math.nan, math.nan
    q = ((1 - spec.interval) / 2, (1 + spec.interval) / 2)
    return (float(np.quantile(np.array(lows), q[0], method="lower")),
            float(np.quantile(np.array(highs), q[1], method="higher")))


# --- attainment curves -----------------------------------------------------------------------


def curve_scales(result: CapacityResult, num_points: int) -> list[float]:
    """``num_points`` loads (rate scales), evenly spaced from half the smallest capacity found
    to one and a half times the largest, for an attainment-curve sweep around the capacities."""
    found = [c.scale for c in result.capacities if c.scale > 0]
    if num_points < 2 or not found:
        return []
    lo, hi = 0.5 * min(found), 1.5 * max(found)
    return [float(round(s, 6)) for s in np.linspace(lo, hi, num_points)]


def attainment_curve(spec: CapacitySpec, executor: Executor, scales: Sequence[float], *,
                     progress: Callable[[int], None] | None = None,
                     stored: StoredRuns | None = None) -> pd.DataFrame:
    """Attainment against load for every policy of ``spec`` on a common grid of rate scales:
    a sweep with the search's seeds (so its runs at a scale the search visited are the very
    same runs). One row per (policy, rate_scale) with mean and t interval of the metric and
    of ``offered_rate_rps``."""
    plan = SweepPlan(spec.scenario, (Axis("policy", spec.policies),
                                     Axis("rate_scale", tuple(scales))),
                     replications=spec.replications, root_seed=spec.root_seed)
    draws = spec.step_draws()
    runs = plan.runs if draws is None else plan_runs(spec.scenario, plan.points, plan.seeds,
                                                     step_draws=draws)
    rows = execute_stored(runs, executor, stored, progress=progress)
    return summarize_points(rows_to_frame(rows), [spec.metric, "offered_rate_rps"],
                            by=["policy", "rate_scale"], confidence=spec.confidence)


def first_miss_rps(curve: pd.DataFrame, metric: str, target: float) -> dict[str, float]:
    """Per policy: the lowest offered load on the curve whose mean attainment misses the
    target (``inf`` when none does)."""
    out: dict[str, float] = {}
    for policy, g in curve.groupby("policy", sort=False):
        miss = g[g[f"{metric}_mean"] < target]
        out[str(policy)] = (float(miss["offered_rate_rps_mean"].min()) if len(miss)
                            else math.inf)
    return out


def order_consistent(capacities: Sequence[PolicyCapacity], first_miss: dict[str, float]) -> bool:
    """Whether the capacities rank the policies as their attainment curves do: for any two
    policies whose curves first miss the target at different loads, the one that misses later
    has the larger capacity."""
    caps = {c.policy: c.capacity_rps for c in capacities}
    names = [p for p in caps if p in first_miss]
    for a in names:
        for b in names:
            if first_miss[a] > first_miss[b] and not caps[a] > caps[b]:
                return False
    return True
