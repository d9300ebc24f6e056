"""Policies side by side on one scenario, with replications, intervals and paired tests.

``compare(scenario, ["conservative", "overcommit"], replications=10)`` runs every policy on the
same workloads (common random numbers: replication ``r`` of every policy uses the same seed, the
``r``-th child of ``SeedSequence(root_seed)``, see :mod:`kvbudget.studies.sweep`) and returns a
:class:`Comparison`: the runs table (a row per run) and, per metric and policy, the mean over
the replications with its Student-t interval, and against the first policy a paired test: the
per-replication differences' mean, their t interval and the two-sided p value. A difference
whose interval holds 0 is *within noise*: the replications cannot tell the two policies apart
on that metric. Pairing removes the workload's own variation (each replication's difference is
taken on the very same requests), so it separates policies that unpaired intervals cannot.

With one replication there is no interval: ``compare`` then runs each policy once on the
scenario's own seed (what ``kvbudget compare`` prints without ``--replications``) and keeps the
run results (``Comparison.results``) for writing run directories.

The default throughput per tier is the summary's ``sustained_output_tokens_per_s`` (completed
tokens over the time the work took, first arrival to last finish: the single-run tables' ``out
tok/s``, see :mod:`kvbudget.results.metrics`), which tells apart policies that complete the same
tokens at different speeds; ``output_tokens_per_s`` (over the offered window) is the same for
all of them. ``drain_s`` is the time after the last arrival.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.policies import POLICIES
from kvbudget.policies.registry import unknown_policy
from kvbudget.results.said import setting_lines
from kvbudget.simulator.run import simulate
from kvbudget.studies.executors import LocalExecutor
from kvbudget.studies.setting import once_where_fixed, study_repr, study_setting
from kvbudget.studies.sweep import (
    Axis,
    SweepPlan,
    check_study_args,
    flatten_summary,
    metric_column,
    run_sweep,
    t_interval,
)

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.results.run_result import RunResult
    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.executors import Executor

HIGHER_IS_BETTER = ("output_tokens_per_s", "goodput_rps", "slo_attainment", "completed",
                    "reservation_efficiency")
"""Metric name endings where more is better (latencies, drain, rejections: less is better)."""


def default_metrics(scenario: Scenario) -> list[str]:
    """Per tier: p99 TTFT, p99 TPOT, p99 ITL, output tokens/s over the run (first arrival to
    last finish), SLO attainment; then the drain time."""
    out: list[str] = []
    for tier in [t.name for t in scenario.tiers()]:
        out += [f"{tier}_ttft_p99_s", f"{tier}_tpot_p99_s", f"{tier}_itl_p99_s",
                f"{tier}_sustained_output_tokens_per_s", f"{tier}_slo_attainment"]
    return [*out, "overall_slo_attainment", "drain_s"]


def higher_is_better(metric: str) -> bool:
    return metric.endswith(HIGHER_IS_BETTER)


def paired_test(base: Sequence[float] | np.ndarray[Any, Any],
                other: Sequence[float] | np.ndarray[Any, Any], confidence: float = 0.95
                ) -> tuple[float, float, float, float]:
    """``(mean difference, low, high, p)``: the paired t test of ``other - base`` over
    replications (NaN interval and p below two pairs; p = 1 when every difference is 0, NaN
    when all are equal but not 0)."""
    from scipy import stats

    a = np.asarray(base, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    ok = np.isfinite(a) & np.isfinite(b)
    d = b[ok] - a[ok]
    if d.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean, low, high = t_interval(d, confidence)
    if d.size < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(d.std(ddof=1))
    if sd == 0:
        return mean, mean, mean, 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(d.size))
    p = float(2 * stats.t.sf(abs(t), d.size - 1))
    return mean, low, high, p


def verdict(metric: str, diff: float, low: float, high: float) -> str:
    """``same``, ``within noise``, ``better`` or ``worse`` (``-`` for no interval)."""
    if not math.isfinite(diff):
        return "-"
    if diff == 0 and low == 0 and high == 0:
        return "same"
    if not (math.isfinite(low) and math.isfinite(high)):
        return "-"
    if low <= 0 <= high:
        return "within noise"
    up = diff > 0
    return "better" if up == higher_is_better(metric) else "worse"


@dataclass
class Comparison:
    """What :func:`compare` returns. ``runs``: a row per run (``policy``, ``replication``,
    ``seed`` and the flattened summary); ``table``: a row per metric and policy (``mean``,
    ``low``, ``high``; against the first policy ``diff``, ``diff_low``, ``diff_high``, ``p``,
    ``verdict``); ``params``: each policy's parameters in force; ``results``: the run results
    of a one-replication comparison (empty otherwise); ``setting``: what the runs took (a
    one-replication comparison's ``simulated:`` lines, else the model, GPU and workload, and
    what loading the workload warned of or assumed: ``kvbudget compare -r``'s stderr lines)."""

    policies: list[str]
    metrics: list[str]
    replications: int
    confidence: float
    runs: pd.DataFrame
    table: pd.DataFrame
    params: dict[str, dict[str, Any]]
    results: list[RunResult] = field(default_factory=list)
    setting: tuple[str, ...] = ()

    def summaries(self) -> list[dict[str, Any]]:
        return [r.summary for r in self.results]

    def __repr__(self) -> str:
        """What a notebook shows: the policies, over what (``setting``), what each did against
        the first, and where the tables are; not the frames."""
        base, n = self.policies[0], self.replications
        head = f"Comparison: {', '.join(self.policies)}; " + (
            "one run each on the scenario's seed" if n == 1 else
            f"{n} replications each on common random numbers, {self.confidence:.0%} intervals")
        found = []
        for name in self.policies[1:]:
            rows = self.table[self.table["policy"] == name]
            said = rows["verdict"].value_counts()
            found.append(f"{name} against {base} on {len(rows)} metrics: " + ", ".join(
                f"{said[v]} {v}" for v in ("better", "worse", "within noise", "same")
                if said.get(v)))
        if n == 1:  # no interval: each run's outcome
            found = [f"{r['policy']}: {r.get('overall_completed', 0):,} of "
                     f"{r.get('overall_offered', 0):,} completed, SLO attainment "
                     f"{r.get('overall_slo_attainment', math.nan):.3g}"
                     for r in self.runs.to_dict(orient="records")]
        return study_repr(head, self.setting, found,
                          f".table ({len(self.table):,} rows: metric x policy), .runs "
                          f"({len(self.runs):,} rows)" + (", .results" if self.results else "")
                          + ", .params")


def _params(scenario: Scenario, name: str) -> dict[str, Any]:
    return {k: v for k, v in scenario.make_policy(name).describe().items() if k != "name"}


def compare(
    scenario: Scenario,
    policies: Sequence[str],
    *,
    replications: int = 1,
    root_seed: int | None = None,
    metrics: Sequence[str] | None = None,
    confidence: float = 0.95,
    executor: Executor | None = None,
    progress: Callable[[int], None] | None = None,
    setting: Sequence[str] | None = None,
) -> Comparison:
    """Every policy of ``policies`` on ``scenario`` (see the module docstring). ``metrics``:
    runs-table columns or dotted summary paths (``tiers.interactive.ttft_s.p99``); default
    :func:`default_metrics`. ``executor``: where replicated runs go (default: this process).
    ``progress(n)`` is called as runs finish. ``root_seed`` seeds the replications (default:
    the scenario's seed); one replication runs the scenario's own seed, and a ``root_seed``
    given with it is refused. Where every replication would be the same run (a trace whose
    every draw is fixed: :func:`~kvbudget.studies.setting.once_where_fixed`) it runs once, as
    one replication does, and its ``setting`` says why. Returns a :class:`Comparison`, which keeps what the runs took
    (``setting``: the runs' own lines, else the given ones, else
    :func:`~kvbudget.studies.setting.study_setting`'s)."""
    import pandas as pd

    if isinstance(policies, str):  # its letters are no policies
        raise ValueError(f"compare: policies is a list of names, got the string {policies!r} "
                         f"(one policy: [{policies!r}])")
    names = list(dict.fromkeys(policies))
    if not names:
        raise ValueError("compare: give at least one policy")
    for name in names:
        if name not in POLICIES:
            raise ValueError(unknown_policy(name))
    check_study_args(replications, confidence)
    replications, once = once_where_fixed(scenario, replications, ["policy"])
    if replications == 1 and root_seed is not None and once is None:  # it seeds replications: none here
        raise ValueError(f"root_seed={root_seed!r} seeds the replications; one replication runs "
                         f"the scenario's own seed ({scenario.seed}): set that "
                         "(kb.make_scenario(seed=...)) or ask for replications >= 2")
    wanted = [metric_column(m) for m in metrics] if metrics is not None else \
        default_metrics(scenario)
    params = {n: _params(scenario, n) for n in names}
    results: list[RunResult] = []
    if replications == 1:
        rows = []
        for name in names:
            workload = scenario.workload()
            result = simulate(workload, scenario.make_policy(name), scenario.sim_config())
            scenario.note_defaulted(result.summary)
            results.append(result)
            rows.append({"policy": name, "replication": 0, "seed": scenario.seed,
                         **flatten_summary(result.summary)})
            if progress is not None:
                progress(1)
        runs = pd.DataFrame(rows)
    else:
        plan = SweepPlan(scenario, (Axis("policy", tuple(names)),), replications, root_seed)
        ex = executor if executor is not None else LocalExecutor(max_workers=1)
        runs = run_sweep(plan, ex, progress=progress)
    missing = [m for m in wanted if m not in runs.columns]
    if missing:
        raise ValueError(f"no metric {missing[0]!r} in the runs (e.g. "
                         f"{', '.join(default_metrics(scenario)[:3])})")
    table = _table(runs, names, wanted, confidence)
    said = tuple(setting_lines([r.summary for r in results])) if results else \
        tuple(setting) if setting is not None else study_setting(scenario, seeds=plan.seeds)
    if once is not None and once not in said:
        said = (*said, once)
    return Comparison(names, wanted, replications, confidence, runs, table, params, results,
                      said)


def _table(runs: pd.DataFrame, names: list[str], metrics: list[str], confidence: float
           ) -> pd.DataFrame:
    import pandas as pd

    by_policy = {n: runs[runs["policy"] == n].sort_values("replication") for n in names}
    rows = []
    for m in metrics:
        base = by_policy[names[0]][m].to_numpy(dtype=np.float64)
        for n in names:
            values = by_policy[n][m].to_numpy(dtype=np.float64)
            mean, low, high = t_interval(values, confidence)
            if n == names[0]:
                diff = d_low = d_high = p = math.nan
                said = ""
            else:
                diff, d_low, d_high, p = paired_test(base, values, confidence)
                said = verdict(m, diff, d_low, d_high)
            rows.append({"metric": m, "policy": n, "mean": mean, "low": low, "high": high,
                         "diff": diff, "diff_low": d_low, "diff_high": d_high, "p": p,
                         "verdict": said})
    return pd.DataFrame(rows)
