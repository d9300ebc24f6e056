"""Tuning: the policy (or engine) parameters that maximise an objective subject to constraints.

The search (documented in docs/tuning.md):

1. **Grid**: ``grid_points`` evenly spaced values per parameter over its bounds (the cross
   product for several parameters), each simulated with ``replications`` seeds. Common random
   numbers: replication ``r`` has the same seed, hence the same arrivals, at every point.
2. **Refine** around the best feasible grid point: for one parameter, ``scipy.optimize.
   minimize_scalar(method="bounded")`` on the interval between its grid neighbours; for several,
   Nelder-Mead with bounds from that point with a one-grid-step simplex. Each evaluation is the
   mean over the same replications; an infeasible point scores worse than any feasible one.
   ``refine_evals`` caps the evaluations.
3. **Winner**: among the feasible evaluations, those statistically indistinguishable from the
   one with the best mean (the paired t interval of their per-replication differences, which
   common random numbers make tight, includes 0); of these the one with the most slack in its
   tightest constraint wins (then the :func:`tiebreak_metric`, then the best mean). It is reported with a Student t confidence interval over its replications. Taking
   the slack into account keeps the search from picking the setting that merely had the
   luckiest seeds at the edge of the feasible region.
4. **Validation**: the winner simulated again with ``validate`` fresh seeds (replications that
   the search never saw), reporting whether each constraint still holds.

Feasibility is judged conservatively: a constraint ``m <= x`` holds at a point when the upper
bound of the t interval of ``m``'s mean is at most ``x`` (``>=``: the lower bound at least
``x``); a run whose metric is missing (no request of that tier completed) violates it. With a
single replication the mean itself is used.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import tomli_w

from kvbudget.policies.registry import POLICIES, policy_parameters
from kvbudget.results.said import figure
from kvbudget.simulator.scenario import (
    check_cost_model_at,
    field_names,
    nearest_field_names,
    scenario_from_dict,
)
from kvbudget.studies.compare import paired_test
from kvbudget.studies.executors import in_process
from kvbudget.studies.setting import defaulted_of, once_where_fixed, study_repr, study_setting
from kvbudget.studies.sweep import (
    GridPoint,
    StoredRuns,
    check_study_args,
    execute_stored,
    metric_column,
    plan_runs,
    replication_seeds,
    rows_to_frame,
    scenario_data,
    t_interval,
)
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.executors import Executor

BEST_FILE = "best.toml"
EVIDENCE_FILE = "evidence.parquet"
RESULT_FILE = "tune.json"

_CONSTRAINT = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*(<=|>=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Constraint:
    """``metric <= limit`` or ``metric >= limit`` on a column of the runs table; ``parse``
    also takes the metric as a dotted ``summary.json`` path (``tiers.interactive.ttft_s.p99``,
    see :func:`kvbudget.studies.sweep.metric_column`)."""

    metric: str
    op: Literal["<=", ">="]
    limit: float

    @classmethod
    def parse(cls, text: str) -> Constraint:
        m = _CONSTRAINT.match(text)
        if not m:
            raise ValueError(
                f"--constraint {text!r}: expected METRIC<=VALUE or METRIC>=VALUE, "
                "e.g. interactive_ttft_p99_s<=2"
            )
        try:
            limit = float(m.group(3))
        except ValueError:
            raise ValueError(f"--constraint {text!r}: {m.group(3)!r} is not a number") from None
        if not math.isfinite(limit):
            raise ValueError(f"--constraint {text!r}: the limit must be finite")
        op: Literal["<=", ">="] = "<=" if m.group(2) == "<=" else ">="
        try:
            metric = metric_column(m.group(1))
        except ValueError as exc:
            raise ValueError(f"--constraint {text!r}: {exc}") from None
        # a limit no run can meet (or every run meets) is a typo, not a constraint
        if metric.endswith("_s") and op == "<=" and limit < 0:
            raise ValueError(f"--constraint {text!r}: a time is never below 0 s")
        if "attainment" in metric and not 0 <= limit <= 1:
            raise ValueError(f"--constraint {text!r}: an attainment is a fraction in [0, 1]")
        return cls(metric, op, limit)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"

    def check(self, values: Sequence[float] | np.ndarray[Any, Any],
              confidence: float) -> tuple[bool, float, float]:
        """``(holds, mean, bound)`` over one point's replications (see module doc)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0 or not np.all(np.isfinite(v)):
            return False, math.nan, math.nan
        mean, low, high = t_interval(v, confidence)
        bound = (high if self.op == "<=" else low) if v.size > 1 else mean
        ok = bound <= self.limit if self.op == "<=" else bound >= self.limit
        return bool(ok), mean, bound

    def violation(self, bound: float) -> float:
        """How far ``bound`` is on the wrong side, relative to the limit (0 when it holds)."""
        if not math.isfinite(bound):
            return math.inf
        scale = max(abs(self.limit), 1e-9)
        over = bound - self.limit if self.op == "<=" else self.limit - bound
        return max(0.0, over / scale)


@dataclass(frozen=True)
class Param:
    """A tuned scenario key (dotted, as ``--set``) with its bounds; ``integer`` rounds values."""

    key: str
    low: float
    high: float
    integer: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(
                f"--param {self.key}: bounds must be finite with low < high, got "
                f"{self.low!r}:{self.high!r}"
            )
        if self.key in ("policy", "seed", "name", "rate_scale"):
            raise ValueError(f"--param {self.key!r}: not a tunable numeric scenario key")

    @classmethod
    def parse(cls, text: str) -> Param:
        """``key=low:high`` or ``key=low:high:int``."""
        if "=" not in text:
            raise ValueError(f"--param {text!r}: expected key=low:high (or key=low:high:int)")
        key, raw = (s.strip() for s in text.split("=", 1))
        parts = raw.split(":")
        integer = len(parts) == 3 and parts[2].strip() == "int"
        if len(parts) != 2 and not integer:
            raise ValueError(f"--param {text!r}: expected key=low:high (or key=low:high:int)")
        try:
            low, high = float(parts[0]), float(parts[1])
        except ValueError:
            raise ValueError(f"--param {text!r}: bounds must be numbers") from None
        return cls(key, low, high, integer)

    def value(self, x: float) -> float | int:
        """``x`` clamped to the bounds and rounded: integers, or decimals with a resolution of
        about 1/1000 of the range (the power of ten below it), so that a search does not
        simulate settings that differ in the tenth digit."""
        x = min(max(float(x), self.low), self.high)
        if self.integer:
            return round(x)
        digits = -math.floor(math.log10((self.high - self.low) / 1000))
        return float(min(max(round(x, digits), self.low), self.high))

    def grid(self, n: int) -> list[float | int]:
        vals = [self.value(v) for v in np.linspace(self.low, self.high, n)]
        return list(dict.fromkeys(vals))


@dataclass
class Evaluation:
    """One parameter setting evaluated over a set of replications."""

    index: int
    stage: str
    params: dict[str, float | int]
    objective: tuple[float, float, float]
    constraints: list[tuple[Constraint, bool, float, float]]
    rows: list[dict[str, Any]] = field(repr=False)

    @property
    def feasible(self) -> bool:
        return all(ok for _, ok, _, _ in self.constraints)

    def mean_checks(self) -> list[bool]:
        """Each constraint judged on the plain mean of the replications."""
        return [math.isfinite(mean) and (mean <= c.limit if c.op == "<=" else mean >= c.limit)
                for c, _, mean, _ in self.constraints]

    @property
    def feasible_on_mean(self) -> bool:
        """Constraints judged on the plain mean (how validation with fresh seeds is read)."""
        return all(self.mean_checks())

    @property
    def slack(self) -> float:
        """The tightest constraint's relative room: ``(limit - bound) / |limit|`` for ``<=``
        (``(bound - limit) / |limit|`` for ``>=``); ``inf`` without constraints."""
        out = math.inf
        for c, _, _, bound in self.constraints:
            if not math.isfinite(bound):
                return -math.inf
            scale = max(abs(c.limit), 1e-9)
            room = (c.limit - bound if c.op == "<=" else bound - c.limit) / scale
            out = min(out, room)
        return out

    @property
    def total_violation(self) -> float:
        return sum(c.violation(bound) for c, _, _, bound in self.constraints)

    def describe(self) -> dict[str, Any]:
        mean, low, high = self.objective
        return {
            "stage": self.stage,
            "params": self.params,
            "objective": {"mean": _num(mean), "ci_low": _num(low), "ci_high": _num(high)},
            "replications": len(self.rows),
            "feasible": self.feasible,
            "constraints": [
                {"constraint": str(c), "holds": ok, "mean": _num(mean_c), "bound": _num(bound)}
                for c, ok, mean_c, bound in self.constraints
            ],
        }


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


DEFAULT_OBJECTIVE = "batch_sustained_output_tokens_per_s"
"""What ``tune`` maximises unless told: the batch tier's output tokens over the time the work
took, first arrival to last finish (the tables' ``out tok/s``). Over the arrival window
(``batch_output_tokens_per_s``, the default before) every setting that completes the same
requests has the same throughput: the default ``tune`` of the default scenario found 17
settings "flat" at 3,010 tokens/s while they finished the work 5 % apart."""


@dataclass
class TuneSpec:
    """What to tune and how hard to look."""

    scenario: Scenario
    params: tuple[Param, ...]
    objective: str = DEFAULT_OBJECTIVE
    maximize: bool = True
    constraints: tuple[Constraint, ...] = ()
    replications: int = 5
    grid_points: int = 9
    refine_evals: int = 8
    validate: int = 5
    confidence: float = 0.95
    root_seed: int | None = None
    once: str | None = field(default=None, init=False)
    """Why the search ran once, with no validation seeds, where ``replications`` asked more
    (every replication, and every fresh seed, the same run:
    :func:`~kvbudget.studies.setting.once_where_fixed`), else None."""

    def __post_init__(self) -> None:
        if not self.params:
            raise ValueError("give at least one parameter to tune (--param key=low:high)")
        self.replications, self.once = once_where_fixed(
            self.scenario, self.replications, [p.key for p in self.params])
        if self.once is not None:
            self.validate = 0  # fresh seeds would re-run the same runs
        if len({p.key for p in self.params}) != len(self.params):
            raise ValueError("each --param key may be given once")
        if len(self.params) > 3:
            raise ValueError(f"tune searches at most 3 parameters at once, got {len(self.params)}")
        check_study_args(self.replications, self.confidence)
        if self.grid_points < 2:
            raise ValueError(f"grid_points must be >= 2, got {self.grid_points!r}")
        if self.refine_evals < 0 or self.validate < 0:
            raise ValueError("refine_evals and validate must be >= 0")
        if self.root_seed is None:
            self.root_seed = self.scenario.seed

    def seeds(self) -> list[int]:
        """The replications' seeds (:func:`~kvbudget.studies.sweep.replication_seeds`)."""
        assert self.root_seed is not None  # set in __post_init__
        return replication_seeds(self.root_seed, self.replications)

    def max_runs(self) -> int:
        """Runs the search makes at most: the grid, the refinement and the validation (a
        progress bar's total; a refinement that converges early makes fewer)."""
        grid = 1
        for p in self.params:
            grid *= len(p.grid(self.grid_points))
        return (grid + self.refine_evals) * self.replications + self.validate


_FREE_FORM = ("workload", "clients", "tiers")
"""The scenario's tables whose keys :func:`field_names` does not list: their own loaders
name a key they do not take."""


def check_param_keys(scenario: Scenario, params: Sequence[Param]) -> None:
    """Refuse, before any run, a ``--param`` key that is neither a field of the scenario nor a
    parameter of its policy (``overcommit_ratio`` for ``policy_params.overcommit_ratio``),
    with the nearest names it takes; pydantic's "extra inputs are not permitted" at the first
    grid point said neither."""
    policy = scenario.spec.policy
    names = field_names(policy)
    for p in params:
        if p.key in names or p.key.split(".")[0] in _FREE_FORM:
            continue
        try:  # a table this list does not walk takes it: the grid's runs check its values
            scenario_from_dict(scenario_data(scenario), scenario.base_dir,
                               _overrides({p.key: p.value(p.low)}))
            continue
        except ValueError as exc:
            if p.key.startswith("policy_params."):  # named with the policies that take it
                raise ValueError(f"--param {exc}") from None
        near = nearest_field_names(p.key, names)
        last = p.key.rsplit(".", 1)[-1]
        owners = [n for n in POLICIES if last in policy_parameters(n)]
        if f"policy_params.{last}" not in near and owners:
            them = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} or {owners[-1]}"
            near.insert(0, f"policy_params.{last} (a parameter of {them}, not of {policy!r}: "
                        "--policy NAME)")
        mine = [n for n in names if n.startswith("policy_params.")]
        raise ValueError(
            f"--param {p.key}: not a field of the scenario nor a parameter of its policy "
            f"{policy!r}; " + (f"nearest: {', '.join(near)}" if near else
                               f"its parameters: {', '.join(mine) or 'none'}; the scenario's "
                               "fields: docs/scenarios.md"))


MAX_SEPARATING_REPLICATIONS = 10_000
"""The most replications :meth:`Undecided.replications_to_separate` names (``-r``'s own
limit)."""

FLAT_REL_SPREAD = 0.01
"""The objective is *flat* when the feasible settings' means differ by less than this share of
their largest magnitude ((max - min) / max |mean| < 1 %): a stated tolerance (half the 2 %
bracket ``kvbudget capacity`` stops at), below which no setting is worth naming as best."""


@dataclass(frozen=True)
class Flatness:
    """How much the objective moved over the feasible settings: ``flat`` when the relative
    spread is below ``epsilon`` or every setting's paired interval against the top one holds 0
    (``within_noise``, with at least two replications)."""

    num_settings: int
    low: float
    high: float
    relative_spread: float
    epsilon: float
    within_noise: bool

    @property
    def flat(self) -> bool:
        return self.num_settings > 1 and (self.relative_spread < self.epsilon
                                          or self.within_noise)

    def describe(self) -> dict[str, Any]:
        return {"flat": self.flat, "num_settings": self.num_settings, "low": _num(self.low),
                "high": _num(self.high), "relative_spread": _num(self.relative_spread),
                "epsilon": self.epsilon, "within_noise": self.within_noise}


def flatness(evaluations: Sequence[Evaluation], objective: str, maximize: bool,
             confidence: float, epsilon: float = FLAT_REL_SPREAD) -> Flatness:
    """The objective's spread over the feasible evaluations (see :class:`Flatness`)."""
    feasible = [e for e in evaluations if e.feasible and math.isfinite(e.objective[0])]
    means = [e.objective[0] for e in feasible]
    if not means:
        return Flatness(0, math.nan, math.nan, math.nan, epsilon, False)
    low, high = min(means), max(means)
    scale = max(abs(low), abs(high))
    spread = (high - low) / scale if scale > 0 else 0.0
    tied = _tied(feasible, maximize, objective, confidence)
    noise = len(tied) == len(feasible) and all(len(e.rows) >= 2 for e in feasible)
    return Flatness(len(feasible), low, high, spread, epsilon, noise)


@dataclass
class TuneResult:
    spec: TuneSpec
    evaluations: list[Evaluation]
    best: Evaluation | None
    validation: Evaluation | None
    setting: tuple[str, ...] = ()
    """What the runs took (:func:`~kvbudget.studies.setting.study_setting`): the model, the
    GPU unless tuned, the workload and what loading it warned of or assumed."""

    def __repr__(self) -> str:
        """What a notebook shows: the search, over what, the best setting (or that the
        objective is flat, or that none met the constraints), its validation; not the spec."""
        s = self.spec
        head = (f"TuneResult: {'maximize' if s.maximize else 'minimize'} {s.objective} over "
                + ", ".join(f"{p.key} {p.low:g}..{p.high:g}" for p in s.params)
                + "".join(f", subject to {', '.join(str(c) for c in s.constraints)}"
                          for _ in s.constraints[:1])
                + f"; {counted(len(self.evaluations), 'setting')}, "
                f"{counted(s.replications, 'replication')} each")
        found = ["best: none; no setting met the constraints"]
        if self.best is not None:
            mean, low, high = self.best.objective
            best = ", ".join(f"{k} = {v}" for k, v in self.best.params.items())
            flat = self.flatness()
            found = [f"flat: {s.objective} is {figure(flat.low)} .. {figure(flat.high)} over "
                     f"{flat.num_settings} feasible settings; no setting is better than "
                     f"another (kept: {best}, by {self.tiebreak()})" if flat.flat else
                     f"best: {best}: {s.objective} = {figure(mean)} ({s.confidence:.0%} CI "
                     f"{figure(low)} .. {figure(high)})",
                     *(f"note: {said}: the search did not look past it" for said in
                       self.at_bounds()),
                     *(f"note: {said}" for said in filter(None, [self.undecided_said()]))]
        if self.validation is not None:
            found.append(f"validation with {len(self.validation.rows)} fresh seeds: the "
                         f"constraints {'hold' if self.validated else 'FAIL'} on the mean")
        runs = sum(len(e.rows) for e in [*self.evaluations, *filter(None, [self.validation])])
        return study_repr(head, self.setting, found, f".table() ({runs:,} runs), "
                          ".best_scenario(), .describe(), .write(DIR)")

    def flatness(self, epsilon: float = FLAT_REL_SPREAD) -> Flatness:
        s = self.spec
        return flatness(self.evaluations, s.objective, s.maximize, s.confidence, epsilon)

    def tiebreak(self) -> str:
        """What chose :attr:`best` when the objective does not (see :func:`tiebreak`)."""
        assert self.best is not None
        return tiebreak(self.evaluations, self.best, self.spec.objective, self.spec.maximize)

    def undecided(self) -> list[Undecided]:
        """The feasible settings :attr:`best` cannot be told from at this number of
        replications (see :class:`Undecided`); none when the objective is flat (then no
        setting is named best) or no setting was feasible."""
        if self.best is None or self.flatness().flat:
            return []
        return undecided(self.evaluations, self.best, self.spec.objective,
                         self.spec.confidence)

    def undecided_said(self) -> str | None:
        """``the best cannot be told from ...``: the :meth:`undecided` settings and what would
        separate them; None when there are none."""
        found = self.undecided()
        if not found:
            return None
        r = self.spec.replications
        if r < 2:
            return (f"the best cannot be told from {counted(len(found), 'other feasible setting')}"
                    f" ({_settings_said(found)}): one replication gives no interval; -r 2 or "
                    "more would separate them")
        c = self.spec.confidence
        needs = [n for u in found if (n := u.replications_to_separate(r, c)) is not None]
        same = [u for u in found if u.low == u.high == 0]
        more = (f"more replications would separate them (-r {max(needs):,} if the "
                "differences and their spread held)" if needs else
                "" if len(same) == len(found) else "more replications might separate them")
        equal = (f"{_settings_said(same)} gave the same {self.spec.objective} in every "
                 "replication (no number of replications separates them)" if same else "")
        return (f"the best cannot be told from {_settings_said(found)}: the paired "
                f"{self.spec.confidence:.0%} interval of the difference over the "
                f"{counted(r, 'replication')} (common random numbers) holds 0; "
                + "; ".join(x for x in (more, equal) if x))

    @property
    def validated(self) -> bool | None:
        return None if self.validation is None else self.validation.feasible_on_mean

    def at_bounds(self) -> list[str]:
        """The best setting's values on a bound of their range (``"engine.max_num_seqs = 8,
        the upper bound of 2..8"``), unless the objective is flat: the search did not look
        beyond them, and a value there may be better."""
        if self.best is None or self.flatness().flat:
            return []
        return [f"{p.key} = {v}, the {'lower' if v == p.value(p.low) else 'upper'} bound of "
                f"{p.low:g}..{p.high:g}"
                for p in self.spec.params
                for v in [self.best.params.get(p.key)]
                if v is not None and v in (p.value(p.low), p.value(p.high))]

    def best_scenario(self) -> dict[str, Any]:
        """The scenario (as TOML-ready data) with the winning parameters."""
        if self.best is None:
            raise ValueError("no parameter setting met the constraints")
        scn = scenario_from_dict(
            scenario_data(self.spec.scenario), self.spec.scenario.base_dir,
            _overrides(self.best.params),
        )
        data = scenario_data(scn)
        data["name"] = f"{self.spec.scenario.name}-tuned"
        data["seed"] = int(self.spec.scenario.seed)
        return _absolute_paths(data, self.spec.scenario.base_dir)

    def table(self) -> pd.DataFrame:
        """The evidence: every run, with its evaluation index and stage."""
        rows = []
        for ev in [*self.evaluations, *([self.validation] if self.validation else [])]:
            for r in ev.rows:
                rows.append({"evaluation": ev.index, "stage": ev.stage, **r})
        return rows_to_frame(rows)

    def describe(self) -> dict[str, Any]:
        s = self.spec
        return {
            "gpu": s.scenario.spec.gpu,
            "model": s.scenario.spec.model,
            **defaulted_of(s.scenario, [p.key for p in s.params]),
            "objective": s.objective,
            "maximize": s.maximize,
            "constraints": [str(c) for c in s.constraints],
            "params": [{"key": p.key, "low": p.low, "high": p.high, "integer": p.integer}
                       for p in s.params],
            "replications": s.replications,
            "confidence": s.confidence,
            "root_seed": s.root_seed,
            "num_evaluations": len(self.evaluations),
            "best": None if self.best is None else self.best.describe(),
            "objective_flatness": {**(flat := self.flatness()).describe(),
                                   "kept_by": self.tiebreak() if self.best is not None
                                   and flat.flat else None},
            "best_at_bounds": self.at_bounds(),
            "best_undecided": [u.describe(s.replications, s.confidence) for u in self.undecided()],
            "validation": None if self.validation is None else {
                **self.validation.describe(),
                "constraints_hold_on_mean": self.validation.feasible_on_mean,
            },
        }

    def write(self, out_dir: Path) -> list[Path]:
        """``best.toml`` (when a setting was feasible), ``evidence.parquet``, ``tune.json``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        if self.best is not None:
            path = out_dir / BEST_FILE
            header = _toml_header(self)
            path.write_text(header + dumps_toml(self.best_scenario()))
            written.append(path)
        ev = out_dir / EVIDENCE_FILE
        self.table().to_parquet(ev, index=False)
        res = out_dir / RESULT_FILE
        res.write_text(json.dumps(self.describe(), indent=2) + "\n")
        return [*written, ev, res]


def _toml_header(result: TuneResult) -> str:
    assert result.best is not None
    mean, low, high = result.best.objective
    lines = [
        "# written by `kvbudget tune`",
        f"# objective: {'maximise' if result.spec.maximize else 'minimise'} "
        f"{result.spec.objective} = {mean:.6g} "
        f"({result.spec.confidence:.0%} CI {low:.6g} .. {high:.6g}, "
        f"{len(result.best.rows)} replications)",
    ]
    for c in result.spec.constraints:
        lines.append(f"# constraint: {c}")
    lines.append("# tuned: " + ", ".join(f"{k} = {v}" for k, v in result.best.params.items()))
    said = result.undecided_said()
    if said is not None:
        lines += textwrap.wrap(said, 98, initial_indent="# ", subsequent_indent="#   ")
    return "\n".join(lines) + "\n\n"


def _overrides(params: Mapping[str, float | int]) -> tuple[str, ...]:
    return tuple(f"{k}={json.dumps(v)}" for k, v in params.items())


def _absolute_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """Relative file paths (``cost_model`` and any ``path``/``*_path``/``*_file`` key) made
    absolute, so the written scenario works from any directory."""

    def fix(node: Any, key: str = "") -> Any:
        if isinstance(node, dict):
            return {k: fix(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v, key) for v in node]
        if (isinstance(node, str) and node
                and (key in ("path", "cost_model") or key.endswith(("_path", "_file")))):
            p = Path(node)
            if not p.is_absolute() and (base_dir / p).exists():
                return str((base_dir / p).resolve())
        return node

    out: dict[str, Any] = fix(data)
    return out


def _drop_none(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_none(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_none(v) for v in node if v is not None]
    return node


def dumps_toml(data: Mapping[str, Any]) -> str:
    """A scenario as TOML (``None`` values are left out: they mean "the default")."""
    text: str = tomli_w.dumps(_drop_none(dict(data)))
    return text


# --- the search ------------------------------------------------------------------------------


class _Evaluator:
    def __init__(self, spec: TuneSpec, executor: Executor,
                 progress: Callable[[int], None] | None,
                 stored: StoredRuns | None = None) -> None:
        self.spec = spec
        self.executor = executor
        self.progress = progress
        self.stored = stored
        assert spec.root_seed is not None
        self.seeds = replication_seeds(spec.root_seed, spec.replications)
        self.evaluations: list[Evaluation] = []
        self._cache: dict[tuple[float | int, ...], Evaluation] = {}

    def _point(self, params: Mapping[str, float | int], index: int) -> GridPoint:
        return GridPoint(index, tuple(params.items()), _overrides(params),
                         self.spec.scenario.spec.policy, 1.0)

    @staticmethod
    def _key(setting: Mapping[str, float | int]) -> tuple[float | int, ...]:
        return tuple(setting.values())

    def evaluate_many(self, settings: Sequence[Mapping[str, float | int]],
                      stage: str) -> list[Evaluation]:
        """Evaluate each setting on the search's replications (each setting once: a repeat
        returns the stored evaluation)."""
        new: list[dict[str, float | int]] = []
        for s in settings:
            k = self._key(s)
            if k not in self._cache and all(self._key(t) != k for t in new):
                new.append(dict(s))
        made = self._run(new, stage, self.seeds, 0)
        for s, e in zip(new, made, strict=True):
            self.evaluations.append(e)
            self._cache[self._key(s)] = e
        return [self._cache[self._key(s)] for s in settings]

    def validate(self, setting: Mapping[str, float | int], seeds: Sequence[int],
                 first_replication: int) -> Evaluation:
        return self._run([dict(setting)], "validate", seeds, first_replication)[0]

    def _run(self, settings: Sequence[dict[str, float | int]], stage: str,
             seeds: Sequence[int], first_replication: int) -> list[Evaluation]:
        if not settings:
            return []
        base = len(self.evaluations)
        points = [self._point(s, base + i) for i, s in enumerate(settings)]
        runs = plan_runs(self.spec.scenario, points, seeds, first_replication=first_replication)
        rows = execute_stored(runs, self.executor, self.stored, progress=self.progress)
        by_point: dict[int, list[dict[str, Any]]] = {p.index: [] for p in points}
        for r in rows:
            by_point[int(r["point"])].append(r)
        return [self._make(p.index, stage, s, by_point[p.index])
                for p, s in zip(points, settings, strict=True)]

    def _make(self, index: int, stage: str, params: dict[str, float | int],
              rows: list[dict[str, Any]]) -> Evaluation:
        spec = self.spec
        for r in rows:
            for m in [spec.objective, *(c.metric for c in spec.constraints)]:
                if m not in r:
                    raise ValueError(
                        f"no metric {m!r} in the runs table; e.g. "
                        "batch_sustained_output_tokens_per_s, interactive_ttft_p99_s, "
                        "overall_slo_attainment, overall_goodput_rps"
                    )
        rows.sort(key=lambda r: int(r["replication"]))
        obj = np.array([_f(r[spec.objective]) for r in rows])
        objective = t_interval(obj, spec.confidence) if np.all(np.isfinite(obj)) else (
            math.nan, math.nan, math.nan)
        checks = []
        for c in spec.constraints:
            ok, mean, bound = c.check([_f(r[c.metric]) for r in rows], spec.confidence)
            checks.append((c, ok, mean, bound))
        return Evaluation(index, stage, params, objective, checks, rows)

    def score(self, ev: Evaluation) -> float:
        """Lower is better: the negated objective when feasible, else a penalty above every
        feasible score that grows with the violation."""
        mean = ev.objective[0]
        if ev.feasible and math.isfinite(mean):
            return -mean if self.spec.maximize else mean
        return 1e30 * (1.0 + min(ev.total_violation, 1e6))


def _f(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _check_cost_model(spec: TuneSpec) -> None:
    """The scenario's cost file checked against every tensor parallel size a ``--param
    engine.tensor_parallel_size=LOW:HIGH:int`` may reach (the refinement's too), before any
    run (the GPU and the model are no numeric parameter)."""
    base = spec.scenario.sim_config()
    for p in spec.params:
        if p.key != "engine.tensor_parallel_size" or not p.integer:
            continue
        for tp in range(max(math.ceil(p.low), 1), math.floor(p.high) + 1):
            check_cost_model_at(spec.scenario, replace(
                base, engine=replace(base.engine, tensor_parallel_size=tp)),
                f"tune --param {p.key}={tp}")


def tune(spec: TuneSpec, executor: Executor | None = None, out_dir: Path | None = None, *,
         resume: bool = False, progress: Callable[[int], None] | None = None,
         setting: Sequence[str] | None = None) -> TuneResult:
    """Run the search of the module doc and return its result. With ``out_dir``, every run is
    kept there as it finishes (``parts/``), and ``resume=True`` reuses the kept runs: the search
    is deterministic, so a resumed search makes the same decisions and reaches the same result
    as one never interrupted. ``executor``: where the runs go (default: this process, one at a
    time). The :class:`TuneResult` keeps what the runs took (``setting``: given, the lines
    :func:`~kvbudget.studies.setting.study_setting` already made, else made here)."""
    executor = in_process(executor)
    from scipy import optimize

    check_param_keys(spec.scenario, spec.params)
    _check_cost_model(spec)
    stored = None if out_dir is None else StoredRuns(out_dir, resume=resume, what="tune")
    ev = _Evaluator(spec, executor, progress, stored)
    params = spec.params
    grids = [p.grid(spec.grid_points) for p in params]
    settings = [dict(zip([p.key for p in params], combo, strict=True))
                for combo in itertools.product(*grids)]
    ev.evaluate_many(settings, "grid")
    _check_objective_offered(spec, ev.evaluations)

    def best_of(evals: Sequence[Evaluation]) -> Evaluation:
        return min(evals, key=lambda e: (ev.score(e), e.index))

    start = best_of(ev.evaluations)
    budget = spec.refine_evals
    if budget > 0 and start.feasible:
        def f(x: Any) -> float:
            xs = [float(v) for v in np.atleast_1d(np.asarray(x, dtype=np.float64))]
            s = {p.key: p.value(v) for p, v in zip(params, xs, strict=True)}
            return ev.score(ev.evaluate_many([s], "refine")[0])

        if len(params) == 1:
            p = params[0]
            g = grids[0]
            i = g.index(start.params[p.key])
            lo, hi = g[max(i - 1, 0)], g[min(i + 1, len(g) - 1)]
            if hi > lo:
                optimize.minimize_scalar(
                    f, bounds=(float(lo), float(hi)), method="bounded",
                    options={"maxiter": budget,
                             "xatol": 1e-3 * (p.high - p.low) if not p.integer else 0.5},
                )
        else:
            x0 = np.array([float(start.params[p.key]) for p in params])
            steps = np.array([(p.high - p.low) / (spec.grid_points - 1) for p in params])
            simplex = np.vstack([x0] + [x0 + np.eye(len(params))[k] * steps[k]
                                        * (1 if x0[k] + steps[k] <= params[k].high else -1)
                                        for k in range(len(params))])
            optimize.minimize(
                f, x0, method="Nelder-Mead",
                bounds=[(p.low, p.high) for p in params],
                options={"maxfev": budget, "initial_simplex": simplex, "xatol": 1e-6,
                         "fatol": 1e-9},
            )
    feasible = [e for e in ev.evaluations if e.feasible and math.isfinite(e.objective[0])]
    best = (_winner(feasible, spec.maximize, spec.objective, spec.confidence)
            if feasible else None)
    validation = None
    if best is not None and spec.validate > 0:
        assert spec.root_seed is not None
        fresh = replication_seeds(spec.root_seed, spec.validate, start=spec.replications)
        validation = ev.validate(best.params, fresh, spec.replications)
    return TuneResult(spec, ev.evaluations, best, validation,
                      tuple(setting) if setting is not None else
                      study_setting(spec.scenario, [p.key for p in spec.params],
                                    spec.once, spec.seeds()))


_ARRIVAL_WINDOW_RATE = re.compile(r"^(.*)_output_tokens_per_s$")


def _check_objective_offered(spec: TuneSpec, evaluations: Sequence[Evaluation]) -> None:
    """Refuse an objective on a tier the workload never offers (the default, the batch tier's
    output tokens a second, on a trace whose every request is 'interactive'): it is 0 in every
    run, and the search would report a flat objective and keep a setting for its slack."""
    tier = next((t.name for t in spec.scenario.tiers()
                 if spec.objective.startswith(f"{t.name}_")), None)
    if tier is None:
        return
    offered = [r.get(f"{tier}_offered") for e in evaluations for r in e.rows]
    if any(isinstance(x, int | float) and x > 0 for x in offered):
        return
    raise ValueError(
        f"objective {spec.objective}: the workload offers no {tier} requests (none in any of "
        f"the {counted(len(offered), 'grid run')}), so it is 0 in every run and ranks no "
        "setting: choose another (--objective), e.g. overall_sustained_output_tokens_per_s")


def tiebreak_metric(objective: str) -> str | None:
    """The runs-table column that tells apart settings tied on ``objective``: for a tier's
    output tokens over the arrival window (``batch_output_tokens_per_s``), which is the same at
    every setting that completes the same requests, the same tokens over first arrival to last
    finish (``batch_sustained_output_tokens_per_s``: the setting that finished them sooner);
    ``None`` for any other objective."""
    m = _ARRIVAL_WINDOW_RATE.match(objective)
    if m is None or m.group(1).endswith("_sustained"):
        return None
    return f"{m.group(1)}_sustained_output_tokens_per_s"


def _metric_mean(e: Evaluation, metric: str | None) -> float:
    """The mean of ``metric`` over ``e``'s replications (NaN when absent or not finite)."""
    if metric is None:
        return math.nan
    values = [_f(r.get(metric)) for r in e.rows]
    return float(np.mean(values)) if values and all(map(math.isfinite, values)) else math.nan


def _winner(feasible: Sequence[Evaluation], maximize: bool, objective: str,
            confidence: float) -> Evaluation:
    """The module doc's rule: the most slack among those indistinguishable from the best; then
    the best :func:`tiebreak_metric` (in the objective's direction), the best mean, the first
    evaluated."""
    sign = 1.0 if maximize else -1.0
    tied = _tied(feasible, maximize, objective, confidence)
    second = tiebreak_metric(objective)

    def key(e: Evaluation) -> tuple[float, float, float, int]:
        t = _metric_mean(e, second)
        return (e.slack, sign * t if math.isfinite(t) else -math.inf, sign * e.objective[0],
                -e.index)

    return max(tied, key=key)


def tiebreak(evaluations: Sequence[Evaluation], best: Evaluation, objective: str,
             maximize: bool) -> str:
    """What chose ``best`` among feasible settings that the objective does not tell apart
    (a flat objective): the most constraint slack when the slacks differ, else the
    :func:`tiebreak_metric` when it differs, else the grid order."""
    feasible = [e for e in evaluations if e.feasible and math.isfinite(e.objective[0])]
    slacks = {e.slack for e in feasible}
    if len(slacks) > 1:
        return (f"the most constraint slack ({best.slack:.0%} of the limit to spare on its "
                "tightest constraint)")
    second = tiebreak_metric(objective)
    values = [_metric_mean(e, second) for e in feasible]
    mine = _metric_mean(best, second)
    if second is not None and math.isfinite(mine) and len(set(values)) > 1:
        finite = [v for v in values if math.isfinite(v)]
        word = "highest" if maximize else "lowest"
        return (f"the {word} {second} (output tokens over first arrival to last finish: "
                f"{figure(mine)}; {figure(min(finite))} .. {figure(max(finite))} over the "
                "settings)")
    why = ("no constraint and nothing else tells them apart" if second is None
           else f"{second} does not tell them apart either")
    return f"the first setting evaluated ({why})"


def _tied(feasible: Sequence[Evaluation], maximize: bool, objective: str,
          confidence: float) -> list[Evaluation]:
    """The top evaluation and those its paired interval cannot tell from it."""
    sign = 1.0 if maximize else -1.0
    top = max(feasible, key=lambda e: (sign * e.objective[0], -e.index))
    best = _values(top, objective)
    tied = []
    for e in feasible:
        mine = _values(e, objective)
        if e is top or len(mine) != len(best) or len(best) < 2:
            if e is top:
                tied.append(e)
            continue
        # common random numbers: compare replication by replication (paired t interval)
        _, low, high, _ = paired_test(mine, best, confidence)  # best - mine
        if (low if sign > 0 else -high) <= 0:
            tied.append(e)
    return tied


def _values(e: Evaluation, objective: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``objective`` in each of ``e``'s replications, in replication order."""
    return np.array([_f(r[objective]) for r in e.rows])


@dataclass(frozen=True)
class Undecided:
    """A feasible setting the best cannot be told from at the search's replications:
    ``compare -r``'s paired t test (:func:`~kvbudget.studies.compare.paired_test`) of the
    best's objective minus this one's, replication by replication over the common random
    numbers, has an interval holding 0 (none at all with one replication)."""

    params: dict[str, float | int]
    difference: float
    low: float
    high: float
    p: float

    def replications_to_separate(self, replications: int, confidence: float) -> int | None:
        """The fewest replications, more than ``replications``, whose paired interval would
        leave out 0 if the mean difference and the differences' spread held (the half-width
        is t(n-1) * sd / sqrt(n)); None with no interval, a difference of 0 (then no number
        of replications separates them) or past :data:`MAX_SEPARATING_REPLICATIONS`."""
        from scipy import stats

        half = (self.high - self.low) / 2
        d = abs(self.difference)
        if not (math.isfinite(half) and math.isfinite(d)) or d == 0 or replications < 2:
            return None
        level = 0.5 + confidence / 2
        sd = half * math.sqrt(replications) / float(stats.t.ppf(level, replications - 1))
        for n in range(replications + 1, MAX_SEPARATING_REPLICATIONS + 1):
            if float(stats.t.ppf(level, n - 1)) * sd / math.sqrt(n) < d:
                return n
        return None

    def describe(self, replications: int, confidence: float) -> dict[str, Any]:
        return {"params": self.params, "difference": _num(self.difference),
                "low": _num(self.low), "high": _num(self.high), "p": _num(self.p),
                "replications_to_separate": self.replications_to_separate(replications,
                                                                          confidence)}


def _settings_said(found: Sequence[Undecided]) -> str:
    """``engine.max_num_seqs = 11`` (settings joined by ``; ``)."""
    return "; ".join(", ".join(f"{k} = {v}" for k, v in u.params.items()) for u in found)


def undecided(evaluations: Sequence[Evaluation], best: Evaluation, objective: str,
              confidence: float) -> list[Undecided]:
    """The feasible settings :attr:`TuneResult.best` cannot be told from on ``objective``
    (see :class:`Undecided`), in the order they were evaluated."""
    mine = _values(best, objective)
    found = []
    for e in evaluations:
        other = _values(e, objective)
        if e is best or not e.feasible or not np.all(np.isfinite(other)) \
                or len(other) != len(mine):
            continue
        diff, low, high, p = paired_test(other, mine, confidence)
        if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 <= high:
            found.append(Undecided(dict(e.params), diff, low, high, p))
    return found


def evaluations_frame(result: TuneResult) -> pd.DataFrame:
    """One row per evaluation: parameters, objective mean and interval, feasibility."""
    import pandas as pd

    rows = []
    for e in result.evaluations:
        mean, low, high = e.objective
        row: dict[str, Any] = {"evaluation": e.index, "stage": e.stage, **e.params,
                               "objective_mean": mean, "objective_low": low,
                               "objective_high": high, "feasible": e.feasible}
        for c, _ok, cmean, bound in e.constraints:
            row[f"{c.metric}_mean"] = cmean
            row[f"{c.metric}_bound"] = bound
        rows.append(row)
    return pd.DataFrame(rows)
