"""Regression gate for policy metrics: run a suite of scenarios, compare with baselines.

A **suite** is a folder of scenario files (``*.toml``, each one a plain scenario that
``kvbudget simulate --scenario`` also runs) and an optional ``suite.toml`` in the same folder::

    replications = 3          # seeds per scenario: its seed, seed + 1, seed + 2
    alpha = 0.05              # significance level of the Welch test
    metrics = ["tiers.interactive.ttft_s.p99", "overall.goodput_rps"]  # default: see below

    [scenarios.trace_overcommit]   # per scenario (file stem): replications, seeds, metrics
    replications = 1

A **baseline** is one file per scenario in the baseline folder, ``NAME.toml`` or ``NAME.json``
(the scenario file's stem), written by ``--update`` from the code's own results::

    format = 1
    scenario = "synth_overcommit"
    seeds = [0, 1, 2]

    [metrics."tiers.interactive.ttft_s.p99"]
    worse = "higher"      # which way is worse: "higher" (latency) or "lower" (throughput)
    rel_tol = 0.1         # allowed worsening, relative to the baseline mean ...
    abs_tol = 0.001       # ... or absolute, whichever is larger
    values = [0.41, 0.43, 0.40]   # one per seed; nan (TOML) or null (JSON): no value

Metric paths are dotted paths into ``summary.json`` (``tiers.interactive.ttft_s.p99``,
``overall.output_tokens_per_s``, ``kv.reservation_efficiency``). Humans edit ``worse``,
``rel_tol`` and ``abs_tol`` (and may delete metrics); ``--update`` keeps those and rewrites
``values`` and ``seeds``.

**Verdict of one metric.** Let ``B`` be the baseline values and ``N`` the values now (the same
seeds, one run each), ``delta`` the difference of their means in the worse direction and
``allowed = max(abs_tol, rel_tol * |mean(B)|)``. The metric *regressed* when

1. ``delta > allowed`` (the change matters), and
2. the change is not noise: with at least two values on each side and some spread, a one-sided
   Welch's t-test (``scipy.stats.ttest_ind(equal_var=False)``, H1: now is worse) rejects at
   ``alpha`` (default 0.05). With one run per side, or no spread on either side (the simulator
   is deterministic for a seed, so an unchanged code base reproduces its baseline exactly),
   the difference is exact and rule 1 alone decides.

*Improved* is the mirror image (better by more than ``allowed``, significant); anything else is
*ok*. A metric that had values in the baseline and has none now (for example no interactive
request completed) is *missing* and counts as a regression.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
import tomllib
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import load_scenario
from kvbudget.studies.executors import LocalExecutor
from kvbudget.workloads.errors import TraceError

Worse = Literal["higher", "lower"]
Verdict = Literal["ok", "improved", "regressed", "missing", "new"]
FAILING: frozenset[str] = frozenset({"regressed", "missing"})

SUITE_FILE = "suite.toml"
BASELINE_FORMAT: Literal[1] = 1
DEFAULT_ALPHA = 0.05
DEFAULT_REPLICATIONS = 3

_LATENCIES = frozenset({"ttft_s", "tpot_s", "itl_s", "e2e_s", "time_to_eventual_completion_s",
                        "retried_completion_s"})
_HIGHER_IS_WORSE = frozenset({
    "num_preemptions", "rejected_too_large", "rejected_overloaded", "expired",
    "preempted_dropped", "num_engine_preemptions", "num_gateway_revocations",
    "num_recomputed_tokens", "client_timeout", "num_attempts", "retry_amplification",
})
_LOWER_IS_WORSE = frozenset({
    "output_tokens_per_s", "sustained_output_tokens_per_s", "goodput_rps", "slo_attainment", "completed",
    "reservation_efficiency", "eventual_completion", "first_attempt_completion",
    "goodput_first_attempt_rps",
})
_FRACTIONS = frozenset({"slo_attainment", "reservation_efficiency", "eventual_completion",
                        "first_attempt_completion"})

#: metrics a new baseline records for every tier that was offered requests
DEFAULT_TIER_METRICS = (
    "ttft_s.p50", "ttft_s.p99", "tpot_s.p99", "e2e_s.p99", "goodput_rps", "slo_attainment",
)
#: and for the whole run: the output tokens over the time the work took (first arrival to last
#: finish), not over the arrival window, where a change that slows the engine but completes the
#: same requests shows the same figure
DEFAULT_OVERALL_METRICS = ("sustained_output_tokens_per_s", "goodput_rps", "num_preemptions")
#: and, for a run whose clients are modelled (retries, timeouts), per offered tier
DEFAULT_CLIENT_METRICS = ("eventual_completion", "retry_amplification", "client_timeout")


class RegressInputError(ValueError):
    """Bad input: a suite, scenario or baseline file; the message names the file and field.
    ``trace``: the trace loader's error where a scenario's trace could not be loaded (the
    command line names a load tool's file given as one: cli/errors.py), and ``scenario`` the
    file that named it; both kept when the error comes back from a worker process."""

    def __init__(self, message: str, *, trace: TraceError | None = None,
                 scenario: str | None = None) -> None:
        super().__init__(message)
        self.trace = trace
        self.scenario = scenario


# --- metrics ------------------------------------------------------------------------------------
def infer_worse(metric: str) -> Worse | None:
    """The direction of "worse" for a metric path, or None when the name does not say."""
    parts = metric.split(".")
    if any(p in _LATENCIES for p in parts):
        return "higher"
    last = parts[-1]
    if last in _HIGHER_IS_WORSE:
        return "higher"
    if last in _LOWER_IS_WORSE:
        return "lower"
    return None


def default_tolerance(metric: str) -> tuple[float, float]:
    """``(rel_tol, abs_tol)`` for a new baseline entry.

    Latencies 10 % (or 1 ms), throughput and goodput 5 %, fractions (SLO attainment,
    reservation efficiency) 0.02 absolute, counts 10 % (or 2).
    """
    parts = metric.split(".")
    last = parts[-1]
    if any(p in _LATENCIES for p in parts):
        return 0.10, 0.001
    if last == "retry_amplification":
        return 0.10, 0.0
    if last in ("output_tokens_per_s", "sustained_output_tokens_per_s", "goodput_rps",
                "goodput_first_attempt_rps"):
        return 0.05, 0.0
    if last in _FRACTIONS:
        return 0.0, 0.02
    if last in _HIGHER_IS_WORSE or last == "completed":
        return 0.10, 2.0
    return 0.10, 0.0


def get_metric(summary: Mapping[str, Any], metric: str) -> float | None:
    """The value at a dotted path of a summary; None where the summary has no value (null).

    Raises ``KeyError`` naming the first path element that does not exist.
    """
    node: Any = summary
    walked: list[str] = []
    for part in metric.split("."):
        if not isinstance(node, Mapping) or part not in node:
            where = ".".join(walked) or "the summary"
            known = sorted(str(k) for k in node) if isinstance(node, Mapping) else []
            hint = f"; {where} has: {', '.join(known)}" if known else ""
            raise KeyError(f"{metric!r}: no {part!r} in {where}{hint}")
        node = node[part]
        walked.append(part)
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise KeyError(f"{metric!r}: not a number in the summary (it is {type(node).__name__})")
    value = float(node) if isinstance(node, float) else int(node)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def default_metrics(summary: Mapping[str, Any]) -> list[str]:
    """The metrics a new baseline records: per offered tier, then overall."""
    out: list[str] = []
    for tier, block in summary.get("tiers", {}).items():
        if block.get("offered"):
            out.extend(f"tiers.{tier}.{m}" for m in DEFAULT_TIER_METRICS)
            if "eventual_completion" in block:
                out.extend(f"tiers.{tier}.{m}" for m in DEFAULT_CLIENT_METRICS)
    out.extend(f"overall.{m}" for m in DEFAULT_OVERALL_METRICS)
    return out


# --- files --------------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricBaseline(_Strict):
    worse: Worse
    rel_tol: float = Field(ge=0, allow_inf_nan=False)
    abs_tol: float = Field(ge=0, allow_inf_nan=False)
    values: list[float | None] = Field(min_length=1)

    @field_validator("values")
    @classmethod
    def _nan_is_none(cls, values: list[float | None]) -> list[float | None]:
        # TOML has no null: a baseline writes nan for "no value"; both read back as None
        out: list[float | None] = []
        for v in values:
            if v is not None and not math.isfinite(v):
                if not math.isnan(v):
                    raise ValueError(f"must be finite numbers or nan, got {v!r}")
                v = None
            out.append(v)
        return out

    def finite(self) -> list[float]:
        return [v for v in self.values if v is not None and math.isfinite(v)]


class BaselineFile(_Strict):
    format: Literal[1] = BASELINE_FORMAT
    scenario: str
    seeds: list[int] = Field(min_length=1)
    metrics: dict[str, MetricBaseline]

    @model_validator(mode="after")
    def _check(self) -> BaselineFile:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        if any(s < 0 for s in self.seeds):
            raise ValueError(f"seeds must be >= 0, got {self.seeds}")
        for name, m in self.metrics.items():
            if len(m.values) != len(self.seeds):
                raise ValueError(
                    f"metrics.{_key(name)}.values: has {len(m.values)} values for "
                    f"{len(self.seeds)} seeds"
                )
        return self


class ScenarioRegressConfig(_Strict):
    replications: int | None = Field(default=None, ge=1, le=100)
    seeds: list[int] | None = Field(default=None, min_length=1)
    metrics: list[str] | None = None


class SuiteConfig(_Strict):
    replications: int = Field(default=DEFAULT_REPLICATIONS, ge=1, le=100)
    alpha: float = Field(default=DEFAULT_ALPHA, gt=0, lt=1)
    metrics: list[str] | None = None
    scenarios: dict[str, ScenarioRegressConfig] = Field(default_factory=dict)


def _key(name: str) -> str:
    return f'"{name}"' if "." in name else name


def _pydantic_message(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(_key(str(p)) for p in err["loc"])
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or not loc else f", got {value!r}"
    return f"{loc}: {msg}{shown}" if loc else msg


def _read_data(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RegressInputError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise RegressInputError(f"{path}: cannot read ({exc})") from None
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise RegressInputError(f"{path}: not valid JSON ({exc})") from None
    else:
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise RegressInputError(f"{path}: not valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise RegressInputError(f"{path}: expected a table/object at the top level")
    return data


def _check_comparable(path: Path, baseline: BaselineFile) -> None:
    """A gate that cannot compare must not pass: a baseline without metrics, or a metric whose
    every value is nan (a wiped or hand-damaged file), is bad input unless ``--update``
    rewrites it."""
    if not baseline.metrics:
        raise RegressInputError(f"{path}: no metrics to compare; write the baseline with --update")
    for name, entry in baseline.metrics.items():
        if not entry.finite():
            raise RegressInputError(
                f"{path}: metric {name!r} has no baseline value (every value is nan), so the "
                "gate cannot compare it; rewrite the baseline with --update or delete the metric")


def read_baseline(path: Path) -> BaselineFile:
    """Read and validate a baseline file (TOML or JSON); errors name the file and the field."""
    data = _read_data(path)
    try:
        return BaselineFile.model_validate(data)
    except ValidationError as exc:
        raise RegressInputError(f"{path}: {_pydantic_message(exc)}") from None


def _toml_value(v: Any) -> str:
    if v is None:
        return "nan"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


_BASELINE_HEADER = (
    "# kvbudget regress baseline, written by `kvbudget regress --update` from the code's own\n"
    "# results: do not type values by hand. Edit worse / rel_tol / abs_tol (or delete a\n"
    "# metric) freely; --update keeps them. nan = no value (e.g. nothing of the tier completed).\n"
)


def dump_baseline(baseline: BaselineFile, suffix: str) -> str:
    """The text of a baseline file in the format of ``suffix`` (``.toml`` or ``.json``)."""
    data = baseline.model_dump()
    if suffix == ".json":
        return json.dumps(data, indent=2, allow_nan=False) + "\n"
    lines = [_BASELINE_HEADER.rstrip("\n")]
    for key in ("format", "scenario", "seeds"):
        lines.append(f"{key} = {_toml_value(data[key])}")
    for name, m in data["metrics"].items():
        lines.append("")
        lines.append(f"[metrics.{json.dumps(name)}]")
        for key in ("worse", "rel_tol", "abs_tol", "values"):
            lines.append(f"{key} = {_toml_value(m[key])}")
    return "\n".join(lines) + "\n"


def write_baseline(path: Path, baseline: BaselineFile) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dump_baseline(baseline, path.suffix))
    tmp.replace(path)


def find_baseline(baseline_dir: Path, name: str) -> Path | None:
    """``DIR/NAME.toml`` or ``DIR/NAME.json``; both at once is an error."""
    found = [p for p in (baseline_dir / f"{name}.toml", baseline_dir / f"{name}.json")
             if p.is_file()]
    if len(found) > 1:
        raise RegressInputError(
            f"{baseline_dir}: two baselines for scenario {name!r} ({found[0].name} and "
            f"{found[1].name}); keep one"
        )
    return found[0] if found else None


# --- suites -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SuiteScenario:
    """One scenario of a suite: its file, its seeds and the metrics a new baseline records."""

    name: str
    path: Path
    seeds: tuple[int, ...]
    metrics: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Suite:
    root: Path
    scenarios: tuple[SuiteScenario, ...]
    alpha: float = DEFAULT_ALPHA


def load_suite(path: Path, overrides: Sequence[str] = ()) -> Suite:
    """A folder of scenario files (plus ``suite.toml``), or a single scenario file.

    Every scenario is loaded and validated here (with ``overrides``, ``--set key=value``
    applied to each), so bad input is reported before anything runs.
    """
    if path.is_dir():
        files = sorted(p for p in path.glob("*.toml") if p.name != SUITE_FILE)
        config_path = path / SUITE_FILE
        root = path
    elif path.is_file():
        files = [path]
        config_path = path.parent / SUITE_FILE
        root = path.parent
    else:
        raise RegressInputError(f"{path}: no such suite folder or scenario file")
    if not files:
        raise RegressInputError(f"{path}: no scenario files (*.toml) in the suite")
    config = SuiteConfig()
    if config_path.is_file():
        try:
            config = SuiteConfig.model_validate(_read_data(config_path))
        except ValidationError as exc:
            raise RegressInputError(f"{config_path}: {_pydantic_message(exc)}") from None
        names = {p.stem for p in path.glob("*.toml")} if path.is_dir() else {path.stem}
        unknown = sorted(set(config.scenarios) - names) if path.is_dir() else []
        if unknown:
            raise RegressInputError(
                f"{config_path}: scenarios.{unknown[0]}: no scenario file {unknown[0]}.toml "
                f"in {root}"
            )
    for metric in config.metrics or []:
        _check_metric_name(config_path, "metrics", metric)
    scenarios = []
    for file in files:
        scn = load_scenario(file, overrides)
        own = config.scenarios.get(file.stem, ScenarioRegressConfig())
        if own.seeds is not None:
            if len(set(own.seeds)) != len(own.seeds) or min(own.seeds) < 0:
                raise RegressInputError(
                    f"{config_path}: scenarios.{file.stem}.seeds: must be distinct and >= 0, "
                    f"got {own.seeds}"
                )
            seeds = tuple(own.seeds)
        else:
            k = own.replications or config.replications
            seeds = tuple(scn.seed + i for i in range(k))
        metrics = own.metrics if own.metrics is not None else config.metrics
        for metric in own.metrics or []:
            _check_metric_name(config_path, f"scenarios.{file.stem}.metrics", metric)
        scenarios.append(SuiteScenario(
            name=file.stem, path=file, seeds=seeds,
            metrics=tuple(metrics) if metrics is not None else None,
        ))
    return Suite(root=root, scenarios=tuple(scenarios), alpha=config.alpha)


_METRIC_RE = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


def _check_metric_name(where: Path, field_name: str, metric: str) -> None:
    if not _METRIC_RE.match(metric):
        raise RegressInputError(f"{where}: {field_name}: not a dotted metric path: {metric!r}")
    if infer_worse(metric) is None:
        raise RegressInputError(
            f"{where}: {field_name}: cannot tell which way {metric!r} gets worse; add it to a "
            "baseline file with worse = \"higher\" or \"lower\""
        )


# --- running ------------------------------------------------------------------------------------
def run_replication(path: str, overrides: tuple[str, ...], seed: int) -> dict[str, Any]:
    """Simulate one scenario file with one seed and return its summary."""
    scn = load_scenario(Path(path), [*overrides, f"seed={seed}"])
    try:
        workload = scn.workload()
        result = simulate(workload, scn.make_policy(), scn.sim_config())
    except TraceError as exc:
        raise RegressInputError(f"{path}: {exc}", trace=exc, scenario=path) from None
    except (ValueError, FileNotFoundError, KeyError) as exc:
        raise RegressInputError(f"{path}: {exc}") from None
    return result.summary


def _run_task(task: tuple[str, tuple[str, ...], int]) -> dict[str, Any]:
    """One replication as an executor task (top level, so worker processes can import it)."""
    return run_replication(*task)


Task = tuple[str, int]  # (scenario name, seed)
_WORKER_PRELOAD = ("kvbudget.studies.regress", "kvbudget.simulator.run", "kvbudget.simulator.scenario", "kvbudget.workloads.spec")


def run_suite(
    suite: Suite,
    seeds: Mapping[str, Sequence[int]],
    *,
    jobs: int | None = None,
    overrides: Sequence[str] = (),
    on_done: Callable[[Task], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run every scenario once per seed on the local executor: ``jobs`` processes (default:
    every core; 1 runs here, in this process). Returns the summaries per scenario, in the
    order of ``seeds``."""
    paths = {s.name: str(s.path) for s in suite.scenarios}
    tasks: list[Task] = [(name, seed) for name in paths for seed in seeds[name]]
    ov = tuple(overrides)
    specs = [(paths[name], ov, seed) for name, seed in tasks]
    results: dict[Task, dict[str, Any]] = {}
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with LocalExecutor(workers, preload=_WORKER_PRELOAD) as executor:
        for i, summary in executor.map_unordered(_run_task, specs):
            results[tasks[i]] = summary
            if on_done is not None:
                on_done(tasks[i])
    return {name: [results[(name, s)] for s in seeds[name]] for name in paths}


# --- comparison ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricComparison:
    """One metric of one scenario: baseline against now, and the verdict."""

    scenario: str
    metric: str
    worse: Worse
    rel_tol: float
    abs_tol: float
    baseline: tuple[float | None, ...]
    now: tuple[float | None, ...]
    baseline_mean: float | None
    now_mean: float | None
    allowed: float
    test: Literal["welch", "exact", "none"]
    p_value: float | None
    verdict: Verdict

    @property
    def change(self) -> float | None:
        """now - baseline (means), in the metric's units."""
        if self.baseline_mean is None or self.now_mean is None:
            return None
        return self.now_mean - self.baseline_mean

    @property
    def change_rel(self) -> float | None:
        c = self.change
        if c is None or self.baseline_mean in (None, 0):
            return None
        assert self.baseline_mean is not None
        return c / abs(self.baseline_mean)

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING

    def describe(self, with_scenario: bool = True) -> str:
        """One line for a failure message, e.g. ``s: m regressed: 1.8 -> 3.1 (change +1.3
        (+72%), allowed +0.18; welch p=0.02)``."""
        text = f"{self.metric} {self.verdict}: {_num(self.baseline_mean)} -> {_num(self.now_mean)}"
        if with_scenario:
            text = f"{self.scenario}: {text}"
        if self.change is not None:
            sign = "+" if self.worse == "higher" else "-"
            test = self.test if self.p_value is None else f"{self.test} p={self.p_value:.3g}"
            text += (f" (change {format_change(self)}, allowed {sign}{_num(self.allowed)}; "
                     f"{test})")
        return text


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _is_constant(values: Sequence[float]) -> bool:
    lo, hi = min(values), max(values)
    return hi - lo <= 1e-12 * max(1.0, abs(hi), abs(lo))


def one_sided_welch(now: Sequence[float], base: Sequence[float], worse: Worse) -> float | None:
    """p-value of Welch's t-test, H1: ``now`` is worse than ``base`` in the ``worse`` direction.

    None where the test does not apply (fewer than two values on a side, or no spread on
    either side: the difference is then exact).
    """
    if len(now) < 2 or len(base) < 2:
        return None
    if _is_constant(now) and _is_constant(base):
        return None
    from scipy import stats

    alternative = "greater" if worse == "higher" else "less"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_ind(list(now), list(base), equal_var=False, alternative=alternative)
    p = float(res.pvalue)
    return p if math.isfinite(p) else None


def compare_metric(
    scenario: str, metric: str, entry: MetricBaseline, now: Sequence[float | None], alpha: float
) -> MetricComparison:
    """The verdict of one metric (the rule is in this module's docstring)."""
    base_vals = entry.finite()
    now_vals = [v for v in now if v is not None and math.isfinite(v)]
    bm, nm = _mean(base_vals), _mean(now_vals)
    allowed = max(entry.abs_tol, entry.rel_tol * abs(bm)) if bm is not None else entry.abs_tol
    def verdict_of(
        test: Literal["welch", "exact", "none"], p: float | None, verdict: Verdict
    ) -> MetricComparison:
        return MetricComparison(
            scenario=scenario, metric=metric, worse=entry.worse, rel_tol=entry.rel_tol,
            abs_tol=entry.abs_tol, baseline=tuple(entry.values), now=tuple(now),
            baseline_mean=bm, now_mean=nm, allowed=allowed, test=test, p_value=p,
            verdict=verdict,
        )

    if bm is None or nm is None:
        if nm is None and bm is not None:
            return verdict_of("none", None, "missing")
        return verdict_of("none", None, "new" if nm is not None else "ok")
    sign = 1.0 if entry.worse == "higher" else -1.0
    delta = sign * (nm - bm)  # > 0: worse
    p_worse = one_sided_welch(now_vals, base_vals, entry.worse)
    test: Literal["welch", "exact"] = "exact" if p_worse is None else "welch"
    verdict: Verdict = "ok"
    p_value: float | None = None
    if delta > allowed:
        p_value = p_worse
        if p_value is None or p_value < alpha:
            verdict = "regressed"
    elif -delta > allowed:
        better: Worse = "lower" if entry.worse == "higher" else "higher"
        p_value = one_sided_welch(now_vals, base_vals, better)
        if p_value is None or p_value < alpha:
            verdict = "improved"
    else:
        p_value = p_worse
    return verdict_of(test, p_value, verdict)


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    baseline_path: Path | None
    seeds: tuple[int, ...]
    comparisons: tuple[MetricComparison, ...]
    notes: tuple[str, ...] = ()


@dataclass
class RegressReport:
    """Everything one ``regress`` run found."""

    scenarios: list[ScenarioResult]
    alpha: float
    updated: list[Path] = field(default_factory=list)
    wall_time_s: float = 0.0

    @property
    def comparisons(self) -> list[MetricComparison]:
        return [c for s in self.scenarios for c in s.comparisons]

    @property
    def failures(self) -> list[MetricComparison]:
        return [c for c in self.comparisons if c.failed]

    @property
    def regressed(self) -> bool:
        return bool(self.failures)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(("regressed", "missing", "improved", "ok", "new"), 0)
        for c in self.comparisons:
            out[c.verdict] += 1
        return out

    def __repr__(self) -> str:
        """What a notebook shows: the headline, each failure and each scenario's notes, not
        every metric's comparison (``.comparisons``)."""
        return "\n".join([
            f"RegressReport: {self.headline()}", *(c.describe() for c in self.failures),
            *(f"note: {s.name}: {note}" for s in self.scenarios for note in s.notes),
            ".comparisons, .failures, .counts(), .regressed; render_text(report): the table"])

    def headline(self) -> str:
        c = self.counts()
        n = len(self.comparisons)
        runs = sum(len(s.seeds) for s in self.scenarios)
        bad = c["regressed"] + c["missing"]
        status = "REGRESSED" if bad else "ok"
        parts = [f"{c['regressed']} regressed"]
        if c["missing"]:
            parts.append(f"{c['missing']} missing")
        parts += [f"{c['improved']} improved", f"{c['ok']} ok"]
        if c["new"]:
            parts.append(f"{c['new']} new")
        text = (f"regress {status}: {', '.join(parts)} of {n} metrics in "
                f"{len(self.scenarios)} scenarios ({runs} runs, {self.wall_time_s:.1f} s)")
        if self.updated:
            text += f"; wrote {len(self.updated)} baselines"
        return text


def compare_scenario(
    scenario: SuiteScenario,
    baseline: BaselineFile,
    baseline_path: Path,
    summaries: Sequence[Mapping[str, Any]],
    alpha: float,
) -> ScenarioResult:
    """Compare every metric of ``baseline`` with the runs' summaries (one per seed)."""
    comps = []
    for metric, entry in baseline.metrics.items():
        try:
            now = [get_metric(s, metric) for s in summaries]
        except KeyError as exc:
            raise RegressInputError(
                f"{baseline_path}: metrics.{_key(metric)}: {exc.args[0]}"
            ) from None
        comps.append(compare_metric(scenario.name, metric, entry, now, alpha))
    notes = []
    ran = tuple(baseline.seeds)
    if ran != scenario.seeds:
        notes.append(f"compared with the baseline's seeds {list(ran)}; the suite asks for "
                     f"{list(scenario.seeds)} (run --update to adopt them)")
    return ScenarioResult(scenario.name, baseline_path, ran, tuple(comps), tuple(notes))


def new_baseline(
    scenario: SuiteScenario,
    seeds: Sequence[int],
    summaries: Sequence[Mapping[str, Any]],
    previous: BaselineFile | None,
) -> BaselineFile:
    """A baseline from the runs: the previous file's metrics and tolerances are kept, metrics
    the suite names that it lacks are added with default tolerances."""
    metrics: dict[str, MetricBaseline] = {}
    wanted: list[str] = list(previous.metrics) if previous is not None else []
    requested = (list(scenario.metrics) if scenario.metrics is not None
                 else (default_metrics(summaries[0]) if previous is None else []))
    wanted += [m for m in requested if m not in wanted]
    for metric in wanted:
        values = [get_metric(s, metric) for s in summaries]
        if previous is not None and metric in previous.metrics:
            old = previous.metrics[metric]
            worse, rel, abs_ = old.worse, old.rel_tol, old.abs_tol
        else:
            direction = infer_worse(metric)
            assert direction is not None  # checked when the suite was loaded
            worse = direction
            rel, abs_ = default_tolerance(metric)
        metrics[metric] = MetricBaseline(
            worse=worse, rel_tol=rel, abs_tol=abs_, values=[_clean(v) for v in values]
        )
    return BaselineFile(scenario=scenario.name, seeds=list(seeds), metrics=metrics)


def _clean(v: float | None) -> float | None:
    if v is None:
        return None
    return float(v) if isinstance(v, float) else v


def regress(
    suite: Suite,
    baseline_dir: Path,
    *,
    update: bool = False,
    jobs: int | None = None,
    overrides: Sequence[str] = (),
    alpha: float | None = None,
    on_start: Callable[[int], None] | None = None,
    on_done: Callable[[Task], None] | None = None,
) -> RegressReport:
    """Run ``suite`` and compare it with the baselines in ``baseline_dir``.

    Every baseline is read and validated before anything runs. Without ``update`` a scenario
    without a baseline is bad input; with ``update`` the baselines are (re)written from the
    runs, with the suite's seeds, after the comparison with the old ones where they exist.
    """
    start = time.perf_counter()
    a = suite.alpha if alpha is None else alpha
    if not 0 < a < 1:
        raise RegressInputError(f"alpha: must be > 0 and < 1, got {a!r}")
    if baseline_dir.exists() and not baseline_dir.is_dir():
        raise RegressInputError(f"{baseline_dir}: not a folder")
    baselines: dict[str, tuple[Path, BaselineFile] | None] = {}
    for scn in suite.scenarios:
        path = find_baseline(baseline_dir, scn.name) if baseline_dir.is_dir() else None
        if path is None and not update:
            raise RegressInputError(
                f"{baseline_dir}: no baseline for scenario {scn.name!r} ({scn.path}); "
                f"write one with --update"
            )
        found = None if path is None else (path, read_baseline(path))
        if found is not None and not update:
            _check_comparable(*found)
        baselines[scn.name] = found
    seeds: dict[str, tuple[int, ...]] = {}
    for scn in suite.scenarios:
        found = baselines[scn.name]
        if update or found is None:
            seeds[scn.name] = scn.seeds
        else:
            seeds[scn.name] = tuple(found[1].seeds)
    if update:
        # the old baseline is compared on its own seeds: run those too where they differ
        for scn in suite.scenarios:
            found = baselines[scn.name]
            if found is not None:
                extra = [s for s in found[1].seeds if s not in seeds[scn.name]]
                seeds[scn.name] = seeds[scn.name] + tuple(extra)
    if on_start is not None:
        on_start(sum(len(v) for v in seeds.values()))
    summaries = run_suite(suite, seeds, jobs=jobs, overrides=overrides, on_done=on_done)
    by_seed = {name: dict(zip(seeds[name], runs, strict=True)) for name, runs in
               summaries.items()}
    report = RegressReport(scenarios=[], alpha=a)
    for scn in suite.scenarios:
        found = baselines[scn.name]
        if found is not None:
            path, baseline = found
            runs = [by_seed[scn.name][s] for s in baseline.seeds]
            report.scenarios.append(compare_scenario(scn, baseline, path, runs, a))
        else:
            report.scenarios.append(ScenarioResult(
                scn.name, None, scn.seeds, (), ("no baseline yet: written now",)))
    if update:
        for scn in suite.scenarios:
            found = baselines[scn.name]
            path = found[0] if found is not None else baseline_dir / f"{scn.name}.toml"
            runs = [by_seed[scn.name][s] for s in scn.seeds]
            try:
                fresh = new_baseline(scn, scn.seeds, runs,
                                     found[1] if found is not None else None)
            except KeyError as exc:
                raise RegressInputError(f"{path}: {exc.args[0]}") from None
            write_baseline(path, fresh)
            report.updated.append(path)
    report.wall_time_s = time.perf_counter() - start
    return report


# --- reports ------------------------------------------------------------------------------------
def _num(v: float | None) -> str:
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 0.001:
        return f"{v:.4g}"
    return f"{v:.3g}"


def format_change(c: MetricComparison) -> str:
    """``+0.012 (+5.1%)``: now minus baseline, in the metric's units and relative."""
    if c.change is None:
        return "-"
    text = "0" if c.change == 0 else f"{'+' if c.change > 0 else '-'}{_num(abs(c.change))}"
    if c.change_rel is not None and c.change != 0:
        text += f" ({c.change_rel:+.1%})"
    return text


TABLE_HEADERS = ("metric", "worse", "baseline", "now", "change", "allowed", "test", "p",
                 "verdict")


def table_rows(result: ScenarioResult) -> list[list[str]]:
    rows = []
    for c in result.comparisons:
        rows.append([
            c.metric, c.worse, _num(c.baseline_mean), _num(c.now_mean), format_change(c),
            _num(c.allowed), c.test, "-" if c.p_value is None else f"{c.p_value:.3g}",
            c.verdict.upper() if c.failed else c.verdict,
        ])
    return rows


def scenario_heading(result: ScenarioResult, alpha: float) -> str:
    seeds = ",".join(str(s) for s in result.seeds)
    text = f"{result.name}  (seeds {seeds}; Welch one-sided, alpha {alpha:g})"
    if result.baseline_path is not None:
        text += f"  baseline {result.baseline_path}"
    return text


def render_text(report: RegressReport) -> str:
    """The terminal report: a table per scenario, then the headline."""
    out: list[str] = []
    for result in report.scenarios:
        out.append(scenario_heading(result, report.alpha))
        for note in result.notes:
            out.append(f"  note: {note}")
        if result.comparisons:
            out.append(_text_table(TABLE_HEADERS, table_rows(result)))
        out.append("")
    for c in report.failures:
        out.append(f"FAIL {c.describe()}")
    for path in report.updated:
        out.append(f"wrote {path}")
    out.append(report.headline())
    return "\n".join(out)


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: Iterable[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join([line(headers), line("-" * w for w in widths), *(line(r) for r in rows)])


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(report: RegressReport) -> str:
    """A Markdown summary for a CI job summary page (GitHub's ``$GITHUB_STEP_SUMMARY``)."""
    bad = len(report.failures)
    title = "regressions found" if bad else "no regressions"
    out = [f"## kvbudget regress: {title}", "", report.headline(), ""]
    if bad:
        out += ["### Regressions", ""]
        out += [f"- `{c.scenario}`: {_md_escape(c.describe(with_scenario=False))}"
                for c in report.failures]
        out.append("")
    out += [f"Welch's t-test, one-sided, alpha {report.alpha:g}; a metric regresses when it is "
            "worse by more than its tolerance and the difference is significant (or exact).", ""]
    for result in report.scenarios:
        out.append(f"### {_md_escape(result.name)}")
        out.append("")
        seeds = ", ".join(str(s) for s in result.seeds)
        out.append(f"seeds: {seeds}" + (f"; baseline `{result.baseline_path}`"
                                        if result.baseline_path else ""))
        for note in result.notes:
            out.append(f"\nnote: {_md_escape(note)}")
        out.append("")
        if result.comparisons:
            out.append("| " + " | ".join(TABLE_HEADERS) + " |")
            out.append("|" + "|".join(["---"] + ["---:"] * (len(TABLE_HEADERS) - 1)) + "|")
            for row in table_rows(result):
                cells = [f"`{row[0]}`", *row[1:]]
                if row[-1] in ("REGRESSED", "MISSING"):
                    cells[-1] = f"**{row[-1]}**"
                out.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_junit(report: RegressReport) -> str:
    """JUnit XML: a test suite per scenario, a test case per metric, a failure per regression."""
    failures = len(report.failures)
    root = ET.Element("testsuites", {
        "name": "kvbudget regress", "tests": str(len(report.comparisons)),
        "failures": str(failures), "errors": "0", "time": f"{report.wall_time_s:.3f}",
    })
    for result in report.scenarios:
        fails = sum(1 for c in result.comparisons if c.failed)
        suite = ET.SubElement(root, "testsuite", {
            "name": result.name, "tests": str(len(result.comparisons)),
            "failures": str(fails), "errors": "0", "skipped": "0", "time": "0",
        })
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", {"name": "seeds",
                                          "value": ",".join(str(s) for s in result.seeds)})
        ET.SubElement(props, "property", {"name": "alpha", "value": f"{report.alpha:g}"})
        ET.SubElement(props, "property", {"name": "test", "value": "welch-one-sided"})
        if result.baseline_path is not None:
            ET.SubElement(props, "property", {"name": "baseline",
                                              "value": str(result.baseline_path)})
        for c in result.comparisons:
            case = ET.SubElement(suite, "testcase", {
                "classname": f"kvbudget.regress.{result.name}", "name": c.metric, "time": "0",
            })
            detail = (f"baseline values {list(c.baseline)}\nnow values {list(c.now)}\n"
                      f"worse={c.worse} rel_tol={c.rel_tol:g} abs_tol={c.abs_tol:g} "
                      f"test={c.test} p={c.p_value}")
            if c.failed:
                fail = ET.SubElement(case, "failure", {"message": c.describe(),
                                                       "type": c.verdict})
                fail.text = detail
            else:
                out = ET.SubElement(case, "system-out")
                out.text = f"{c.verdict}: {c.describe()}\n{detail}"
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, "unicode") + "\n"
