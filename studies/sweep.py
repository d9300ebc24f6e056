"""Sweeps: a grid over policies, policy parameters, engine knobs, presets and load, times
replications, run on an executor into one tidy table with a row per run.

Grid axes are scenario keys with the dotted names of ``--set`` (``policy_params.
overcommit_ratio``, ``engine.max_num_seqs``, ``gpu``), plus two special axes: ``policy`` and
``rate_scale`` (the load: every arrival time of the scenario's workload is divided by it, so 2
doubles the arrival rate and keeps the requests; deadlines keep their distance to the arrival).

Common random numbers: replication ``r`` of every grid point uses the same seed, the ``r``-th
child of ``SeedSequence(root_seed)``; a run's workload is built from that seed and the
scenario's workload section only (a grid over engine knobs or policies never changes the
arrivals; a ``rate_scale`` axis compresses the same arrivals). Differences between grid points
are then not blurred by different traffic.

A grid value of ``policy_params.X`` applies to the policies that have a parameter ``X``; for the
others the column is empty and the duplicate points collapse into one. A policy other than the
scenario's starts from its default parameters.

Results: one row per run (the grid values, ``replication``, ``seed``, ``run_key`` and the
summary flattened by :func:`flatten_summary`, e.g. ``interactive_ttft_p99_s``,
``batch_output_tokens_per_s``, ``overall_slo_attainment``). With an output directory, finished
runs are appended as Parquet part files while the sweep runs (an interrupted sweep keeps them);
``resume=True`` skips runs whose key is already stored. A run key is a hash of everything the
run depends on (the full scenario with its seed, the load scale), so a stored result is reused
only for the very same inputs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.policies.registry import policy_parameters
from kvbudget.simulator.run import simulate
from kvbudget.simulator.scenario import ScenarioSpec, dump_spec, parse_override, scenario_from_dict
from kvbudget.studies.executors import in_process
from kvbudget.studies.intervals import StepDraw
from kvbudget.studies.setting import defaulted_of, once_where_fixed
from kvbudget.workloads import Workload
from kvbudget.workloads.arrival_rate import mean_arrival_rate
from kvbudget.workloads.workload import scale_rate

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.simulator.scenario import Scenario
    from kvbudget.studies.executors import Executor

POLICY = "policy"
RATE_SCALE = "rate_scale"
PARTS_DIR = "parts"
TABLE_FILE = "sweep.parquet"
MANIFEST_FILE = "sweep.json"
ID_COLUMNS: tuple[str, ...] = ("run_key", "point", "replication", "seed")
"""Columns every run row has besides the grid values and the metrics."""


# --- seeds -----------------------------------------------------------------------------------


def replication_seeds(root_seed: int, count: int, start: int = 0) -> list[int]:
    """Seeds of replications ``start .. start + count - 1``: children of one
    ``SeedSequence(root_seed)`` (so replication ``r`` has the same seed in every sweep, tuning
    or capacity search with the same root; fresh seeds for validation are later children)."""
    if count < 0 or start < 0:
        raise ValueError(f"count and start must be >= 0, got {count!r}, {start!r}")
    children = np.random.SeedSequence(root_seed).spawn(start + count)[start:]
    return [int(c.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for c in children]


# --- load ------------------------------------------------------------------------------------


def offered_rate_rps(workload: Workload) -> float:
    """Requests per second over the arrival span (:func:`~kvbudget.workloads.arrival_rate.
    mean_arrival_rate`; NaN below two requests)."""
    rate = mean_arrival_rate(len(workload), workload.span_s)
    return math.nan if rate is None else rate


# --- summary -> columns ----------------------------------------------------------------------

_LATENCY_KEYS = ("ttft_s", "tpot_s", "itl_s", "e2e_s", "time_to_eventual_completion_s",
                 "retried_completion_s")


def _block_columns(prefix: str, block: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in block.items():
        if key in _LATENCY_KEYS and isinstance(value, Mapping):
            stem = key[: -len("_s")]
            for q, v in value.items():
                out[f"{prefix}_{stem}_{q}_s"] = v
        elif key == "rejections_by_reason" and isinstance(value, Mapping):
            for reason, count in value.items():
                out[f"{prefix}_reason_{reason}"] = count
        elif isinstance(value, int | float | bool) or value is None:
            out[f"{prefix}_{key}"] = value
    return out


AUTOSCALE_COLUMNS = ("gpu_hours", "replica_seconds", "peak_replicas", "end_s")
"""What a run's table takes of an autoscaled fleet's summary (``autoscale_<name>``)."""


def flatten_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The ``summary.json`` dictionary as flat columns.

    ``overall`` and each tier give ``{block}_{field}`` (``interactive_slo_attainment``,
    ``batch_output_tokens_per_s``, ``overall_completed``), latency quantiles give
    ``{block}_{ttft|tpot|itl|e2e}_{mean|p50|p90|p99}_s``, rejection reasons
    ``{block}_reason_{reason}``, the KV block ``kv_{field}``, the engine counters
    ``engine_{field}``, and the top-level scalars keep their names.
    """
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if key == "overall" and isinstance(value, Mapping):
            out.update(_block_columns("overall", value))
        elif key == "tiers" and isinstance(value, Mapping):
            for tier, block in value.items():
                out.update(_block_columns(str(tier), block))
        elif key in ("kv", "engine") and isinstance(value, Mapping):
            for k, v in value.items():
                if isinstance(v, int | float | bool) or v is None:
                    out[f"{key}_{k}"] = v
            scale = (value.get("fleet") or {}).get("autoscale") if key == "engine" else None
            if isinstance(scale, Mapping):  # an autoscaled fleet's use (simulator.autoscaler)
                out.update({f"autoscale_{k}": scale[k] for k in AUTOSCALE_COLUMNS})
        elif key in ("policy", "policy_params", "seed", "workload", "cost_model"):
            continue  # the run's own columns say these
        elif isinstance(value, int | float | str | bool) or value is None:
            out[key] = value
    return out


def metric_column(name: str) -> str:
    """The runs-table column of a metric named as in ``summary.json`` (dotted) or as the
    column itself: ``tiers.interactive.ttft_s.p99`` -> ``interactive_ttft_p99_s``,
    ``overall.slo_attainment`` -> ``overall_slo_attainment``, ``kv.used_mean_fraction`` ->
    ``kv_used_mean_fraction``, ``drain_s`` -> ``drain_s``. A name without dots is returned
    as it is."""
    parts = name.split(".")
    if len(parts) == 1:
        return name
    head, rest = parts[0], parts[1:]
    if head == "tiers" and len(rest) >= 2:
        head, rest = rest[0], rest[1:]
    elif head not in ("overall", "kv", "engine"):
        raise ValueError(f"metric {name!r}: expected tiers.TIER.FIELD[.QUANTILE], "
                         "overall.FIELD[.QUANTILE], kv.FIELD or engine.FIELD")
    if len(rest) == 2 and rest[0] in _LATENCY_KEYS:
        return f"{head}_{rest[0][: -len('_s')]}_{rest[1]}_s"
    if len(rest) == 1:
        return f"{head}_{rest[0]}"
    raise ValueError(f"metric {name!r}: expected tiers.TIER.FIELD[.QUANTILE], "
                     "overall.FIELD[.QUANTILE], kv.FIELD or engine.FIELD")


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One simulation: picklable, self-contained (no open files, no generators)."""

    key: str
    point: int
    replication: int
    seed: int
    rate_scale: float
    values: tuple[tuple[str, Any], ...]
    scenario: dict[str, Any] = field(repr=False)
    base_dir: str = "."
    step_draw: StepDraw | None = None
    """The replication's draw of the step model (``capacity``/``plan --interval``); None: the
    scenario's own."""


_WORKLOADS: OrderedDict[str, Workload] = OrderedDict()
_WORKLOAD_CACHE_SIZE = 8


def _workload_for(scn: Scenario, spec: RunSpec) -> Workload:
    """The run's workload, memoised per worker process: the grid points of one replication
    share one workload, so each process builds it once (a pure cache of a pure function)."""
    key = json.dumps(
        [spec.scenario.get("workload", {}), spec.seed, spec.base_dir], sort_keys=True, default=str
    )
    w = _WORKLOADS.get(key)
    if w is None:
        w = scn.workload()
        _WORKLOADS[key] = w
        while len(_WORKLOADS) > _WORKLOAD_CACHE_SIZE:
            _WORKLOADS.popitem(last=False)
    else:
        _WORKLOADS.move_to_end(key)
    return w


class RunError(RuntimeError):
    """A run that failed inside the simulator; the message names the run (its grid values,
    replication and seed) so that it can be reproduced with ``kvbudget simulate``."""


def describe_run(spec: RunSpec) -> str:
    values = ", ".join(f"{k}={v}" for k, v in spec.values
                       if v is not None and k not in (POLICY, RATE_SCALE))
    s = spec.scenario
    what = [f"policy={s.get('policy')}"]
    if values:
        what.append(values)
    if spec.rate_scale != 1:
        what.append(f"rate_scale={spec.rate_scale:g}")
    what.append(f"replication={spec.replication}, seed={spec.seed}")
    if spec.step_draw is not None:
        what.append("with the replication's step-model draw (--interval)")
    return ", ".join(what)


def run_one(spec: RunSpec) -> dict[str, Any]:
    """Simulate one run and return its table row (the task function of every executor)."""
    scn = scenario_from_dict(spec.scenario, Path(spec.base_dir))
    workload = scale_rate(_workload_for(scn, spec), spec.rate_scale)
    try:
        config = scn.sim_config()
        if spec.step_draw is not None:
            config = spec.step_draw.config(config)
        result = simulate(workload, scn.make_policy(), config)
    except Exception as exc:
        raise RunError(f"run failed ({describe_run(spec)}): {type(exc).__name__}: {exc}") from exc
    row: dict[str, Any] = {
        "run_key": spec.key,
        "point": spec.point,
        "replication": spec.replication,
        "seed": spec.seed,
    }
    row.update(dict(spec.values))
    row[POLICY] = scn.spec.policy
    row[RATE_SCALE] = spec.rate_scale
    row["num_requests"] = len(workload)
    window = result.summary.get("offered_window_s")
    # a closed loop's users sent the requests when they chose, not at the workload's times
    sent = mean_arrival_rate(len(workload), float(window or 0.0))
    row["offered_rate_rps"] = offered_rate_rps(workload) if scn.spec.closed_loop is None else (
        math.nan if sent is None else sent)
    row.update(flatten_summary(result.summary))
    return row


# --- grids -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Axis:
    """One grid dimension: a dotted scenario key (or ``policy`` / ``rate_scale``) and values."""

    key: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.key or self.key != self.key.strip():
            raise ValueError(f"grid axis name must be a non-empty key, got {self.key!r}")
        if self.key in ("seed", "name"):
            raise ValueError(f"{self.key!r} cannot be a grid axis (replications set the seeds)")
        if not self.values:
            raise ValueError(f"grid axis {self.key!r} has no values")
        if self.key == RATE_SCALE:
            for v in self.values:
                if not (isinstance(v, int | float) and not isinstance(v, bool)
                        and math.isfinite(v) and v > 0):
                    raise ValueError(f"rate_scale values must be numbers > 0, got {v!r}")


MAX_AXIS_VALUES = 100_000
"""The most values one --grid axis may take (each is at least one simulation)."""


def parse_axis(text: str) -> Axis:
    """``key=v1,v2,...`` or ``key=lo:hi:n`` (``n`` evenly spaced numbers, ends included).

    Values are read as TOML literals (numbers, booleans, quoted strings), else as bare strings.
    """
    if "=" not in text:
        raise ValueError(f"--grid {text!r}: expected key=v1,v2,... or key=lo:hi:n")
    key, raw = text.split("=", 1)
    key = key.strip()
    parts = raw.split(":")
    if len(parts) == 3:
        try:
            lo, hi, n = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            pass
        else:
            if not 1 <= n <= MAX_AXIS_VALUES:
                raise ValueError(f"--grid {text!r}: the number of values must be in [1, "
                                 f"{MAX_AXIS_VALUES:,}]")
            if not (np.isfinite(lo) and np.isfinite(hi)):
                raise ValueError(f"--grid {text!r}: the ends must be finite numbers")
            values_: tuple[Any, ...] = tuple(float(round(v, 12)) for v in np.linspace(lo, hi, n))
            if len(set(values_)) < len(values_):
                raise ValueError(f"--grid {text!r}: the values repeat (lo = hi with n > 1?)")
            return Axis(key, values_)
    values = []
    for item in raw.split(","):
        if not item.strip():
            raise ValueError(f"--grid {text!r}: empty value")
        values.append(parse_override(f"v={item}")[1])
    seen: list[Any] = []
    for v in values:
        if any(type(v) is type(s) and v == s for s in seen):
            raise ValueError(f"--grid {text!r}: the value {v!r} is given twice (each "
                             "configuration would run twice)")
        seen.append(v)
    if len(values) > MAX_AXIS_VALUES:
        raise ValueError(f"--grid {text!r}: at most {MAX_AXIS_VALUES:,} values")
    return Axis(key, tuple(values))


@dataclass(frozen=True)
class GridPoint:
    """One configuration: its column values, the overrides that make it, policy, load."""

    index: int
    values: tuple[tuple[str, Any], ...]
    overrides: tuple[str, ...]
    policy: str
    rate_scale: float


def expand_grid(base: Mapping[str, Any], axes: Sequence[Axis]) -> list[GridPoint]:
    """The cross product of ``axes`` (first axis slowest), deduplicated (see module doc)."""
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"grid axis {dup!r} is given twice")
    base_policy = str(base.get("policy", "conservative"))
    policy_values = next((a.values for a in axes if a.key == POLICY), (base_policy,))
    params_of = {str(p): set(policy_parameters(str(p))) for p in policy_values}
    for a in axes:
        if a.key.startswith("policy_params."):
            name = a.key.split(".", 2)[1]
            if not any(name in ps for ps in params_of.values()):
                raise ValueError(
                    f"grid axis {a.key!r}: no policy in the grid has a parameter {name!r} "
                    f"(policies: {', '.join(map(str, policy_values))})"
                )
    points: list[GridPoint] = []
    seen: set[tuple[Any, ...]] = set()
    for combo in itertools.product(*(a.values for a in axes)):
        chosen = dict(zip(keys, combo, strict=True))
        policy = str(chosen.get(POLICY, base_policy))
        rate = float(chosen.get(RATE_SCALE, 1.0))
        overrides: list[str] = []
        if policy != base_policy:
            overrides += [f"policy={json.dumps(policy)}", "policy_params={}"]
        values: dict[str, Any] = {}
        for key, value in chosen.items():
            if key in (POLICY, RATE_SCALE):
                values[key] = value
                continue
            if key.startswith("policy_params.") and key.split(".", 2)[1] not in params_of[policy]:
                values[key] = None
                continue
            overrides.append(f"{key}={_literal(value)}")
            values[key] = value
        ident = (policy, rate, tuple(overrides))
        if ident in seen:
            continue
        seen.add(ident)
        points.append(GridPoint(len(points), tuple(values.items()), tuple(overrides), policy,
                                rate))
    return points


def _literal(value: Any) -> str:
    """A value as a literal that :func:`kvbudget.simulator.scenario.parse_override` reads back."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"grid values must be finite, got {value!r}")
    return json.dumps(value)


# --- plans -----------------------------------------------------------------------------------


def run_key(scenario: Mapping[str, Any], base_dir: str, rate_scale: float,
            step_draw: StepDraw | None = None) -> str:
    """A content hash of everything a run depends on (a step model's draw only when there is
    one: the keys of runs without stay what they were)."""
    what: dict[str, Any] = {"scenario": scenario, "base_dir": base_dir, "rate_scale": rate_scale}
    if step_draw is not None:
        what["step_draw"] = step_draw.to_json()
    blob = json.dumps(what, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def scenario_data(scenario: Scenario) -> dict[str, Any]:
    """The scenario as plain, JSON-ready data (its spec dumped): what a study writes, expands
    into grid points and reads back."""
    return dump_spec(scenario.spec, mode="json")


def plan_runs(
    base: Scenario,
    points: Sequence[GridPoint],
    seeds: Sequence[int],
    *,
    first_replication: int = 0,
    step_draws: Sequence[StepDraw] | None = None,
) -> list[RunSpec]:
    """A run per grid point and seed (points validated here, so bad values fail before any
    simulation, with a message naming the grid point); with ``step_draws`` (one per seed),
    each replication's runs take its draw of the step model."""
    if step_draws is not None and len(step_draws) != len(seeds):
        raise ValueError(f"{len(step_draws)} step-model draws for {len(seeds)} seeds")
    data = scenario_data(base)
    base_dir = str(base.base_dir)
    runs: list[RunSpec] = []
    for p in points:
        try:
            point_scn = scenario_from_dict(data, base.base_dir, p.overrides)
        except ValueError as exc:
            where = ", ".join(f"{k}={v!r}" for k, v in p.values) or "base scenario"
            raise ValueError(f"grid point {where}: {exc}") from None
        if point_scn.spec.closed_loop is not None and p.rate_scale != 1:
            raise ValueError(
                f"rate_scale {p.rate_scale:g}: a closed loop of users sends each request when "
                "its last one ended, not at the workload's arrival times, so scaling them "
                "changes nothing: vary closed_loop.num_users (or think_time_s) instead")
        point_data = scenario_data(point_scn)
        for r, seed in enumerate(seeds, start=first_replication):
            scn = {**point_data, "seed": int(seed)}
            draw = None if step_draws is None else step_draws[r - first_replication]
            runs.append(RunSpec(
                key=run_key(scn, base_dir, p.rate_scale, draw),
                point=p.index,
                replication=r,
                seed=int(seed),
                rate_scale=p.rate_scale,
                values=p.values,
                scenario=scn,
                base_dir=base_dir,
                step_draw=draw,
            ))
    return runs


# --- storage ---------------------------------------------------------------------------------


class RunStore:
    """Finished runs as Parquet part files under ``out_dir/parts`` (written atomically:
    a temporary name, then a rename), flushed every ``flush_rows`` rows or ``flush_s``
    seconds, and at :meth:`close` (also on an interrupt)."""

    def __init__(self, out_dir: Path, *, flush_rows: int = 32, flush_s: float = 5.0) -> None:
        self.out_dir = out_dir
        self.parts = out_dir / PARTS_DIR
        self.flush_rows = flush_rows
        self.flush_s = flush_s
        self._buffer: list[dict[str, Any]] = []
        self._last_flush = time.monotonic()
        self._tag = uuid.uuid4().hex[:8]
        self._count = 0

    def part_files(self) -> list[Path]:
        return sorted(self.parts.glob("part-*.parquet")) if self.parts.is_dir() else []

    @staticmethod
    def _read_part(path: Path, columns: list[str] | None = None) -> Any:
        """One part file as an Arrow table, or ``ValueError`` naming it (a part is written under
        a temporary name and renamed, so a damaged one was damaged after the study wrote it)."""
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path, columns=columns)
        except (OSError, ValueError, KeyError) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ValueError(f"{path}: not a readable part file ({first}); move it out of "
                             "the way to run its runs again") from None
        if "run_key" not in table.column_names:
            raise ValueError(f"{path}: a part file without a run_key column; move it out of "
                             "the way to run its runs again")
        return table

    def read(self) -> pd.DataFrame:
        import pandas as pd

        files = self.part_files()
        if not files:
            return pd.DataFrame()
        frames: list[pd.DataFrame] = [self._read_part(f).to_pandas() for f in files]
        df = pd.concat(frames, ignore_index=True)
        for col in df.columns:
            if "_reason_" in col:  # a reason no run of one part saw is a count of 0
                df[col] = df[col].fillna(0).astype("int64")
        return df.drop_duplicates("run_key", keep="last").reset_index(drop=True)

    def keys(self) -> set[str]:
        out: set[str] = set()
        for f in self.part_files():
            out.update(str(k) for k in self._read_part(f)["run_key"].to_pylist())
        return out

    def add(self, row: dict[str, Any]) -> None:
        self._buffer.append(row)
        if (len(self._buffer) >= self.flush_rows
                or time.monotonic() - self._last_flush >= self.flush_s):
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._buffer:
            return
        self.parts.mkdir(parents=True, exist_ok=True)
        self._count += 1
        path = self.parts / f"part-{int(time.time() * 1e3):013d}-{self._tag}-{self._count:05d}.parquet"
        tmp = path.with_suffix(".tmp")
        rows_to_frame(self._buffer).to_parquet(tmp, index=False)
        os.replace(tmp, path)
        self._buffer = []

    def close(self) -> None:
        self.flush()


def rows_to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with Parquet-safe columns: counts of rejection reasons that a run
    did not see are 0, and a grid column holding several kinds of value is stored as text."""
    import pandas as pd

    df = pd.DataFrame(list(rows))
    for col in df.columns:
        if "_reason_" in col:
            df[col] = df[col].fillna(0).astype("int64")
        elif df[col].dtype == object:
            kinds = {type(v) for v in df[col] if v is not None and not _isnan(v)}
            if len(kinds) > 1 or (kinds and not kinds <= {str, int, float, bool}):
                df[col] = [None if v is None or _isnan(v) else str(v) for v in df[col]]
    return df


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


# --- running ---------------------------------------------------------------------------------


@dataclass
class SweepPlan:
    """A sweep: the base scenario, the grid, the replications and the root seed."""

    scenario: Scenario
    axes: tuple[Axis, ...] = ()
    replications: int = 3
    root_seed: int | None = None
    points: list[GridPoint] = field(init=False)
    seeds: list[int] = field(init=False)
    runs: list[RunSpec] = field(init=False)
    once: str | None = field(default=None, init=False)
    """Why the sweep runs once where ``replications`` asked more (every replication the same
    run: :func:`~kvbudget.studies.setting.once_where_fixed`), else None; the manifest keeps
    it."""

    def __post_init__(self) -> None:
        self.replications, self.once = once_where_fixed(
            self.scenario, self.replications, [a.key for a in self.axes])
        check_study_args(self.replications, 0.95)
        if self.root_seed is None:
            self.root_seed = self.scenario.seed
        self.points = expand_grid(scenario_data(self.scenario), self.axes)
        self.seeds = replication_seeds(self.root_seed, self.replications)
        self.runs = plan_runs(self.scenario, self.points, self.seeds)

    def manifest(self) -> dict[str, Any]:
        return {
            "scenario": scenario_data(self.scenario),
            "base_dir": str(self.scenario.base_dir),
            **defaulted_of(self.scenario, [a.key for a in self.axes]),
            "axes": {a.key: list(a.values) for a in self.axes},
            "replications": self.replications,
            **({} if self.once is None else {"once": self.once}),
            "root_seed": self.root_seed,
            "seeds": self.seeds,
            "num_points": len(self.points),
            "num_runs": len(self.runs),
        }


def execute(
    runs: Sequence[RunSpec],
    executor: Executor,
    *,
    store: RunStore | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Run ``runs`` on ``executor``; each finished row goes to ``store`` at once. Rows come
    back in the order of ``runs``."""
    rows: list[dict[str, Any] | None] = [None] * len(runs)
    try:
        for i, row in executor.map_unordered(run_one, runs):
            rows[i] = row
            if store is not None:
                store.add(row)
            if progress is not None:
                progress(1)
    finally:
        if store is not None:
            store.close()
    return [r for r in rows if r is not None]


class StoredRuns:
    """A study's finished runs kept in ``out_dir/parts`` as they finish (a :class:`RunStore`)
    and, on a resumed study, reused by run key: the same inputs give the same row, so a study
    that was interrupted and resumed reaches the same result as one that never stopped.

    Without ``resume``, an ``out_dir`` that already holds runs is an error (never mixed)."""

    def __init__(self, out_dir: Path, *, resume: bool, what: str) -> None:
        self.store = RunStore(out_dir)
        self.stored: dict[str, dict[str, Any]] = {}
        if self.store.part_files():
            if not resume:
                raise ValueError(f"{out_dir}: already holds runs of a {what}; pass --resume to "
                                 "continue it, or choose another --out")
            self.stored = {str(r["run_key"]): {str(k): v for k, v in r.items()}
                           for r in self.store.read().to_dict(orient="records")}
        out_dir.mkdir(parents=True, exist_ok=True)

    def execute(self, runs: Sequence[RunSpec], executor: Executor, *,
                progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
        """:func:`execute` for the runs not stored; stored ones come back as they were kept
        (read back from Parquet: a column another run had is NaN), in the order of ``runs``."""
        todo = [r for r in runs if r.key not in self.stored]
        reused = len(runs) - len(todo)
        if reused and progress is not None:
            progress(reused)
        made = iter(execute(todo, executor, store=self.store, progress=progress))
        rows: list[dict[str, Any]] = []
        for r in runs:
            kept = self.stored.get(r.key)
            if kept is None:
                rows.append(next(made))
            else:
                rows.append({**kept, "point": r.point, "replication": r.replication})
        return rows


def execute_stored(runs: Sequence[RunSpec], executor: Executor, stored: StoredRuns | None, *,
                   progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """:meth:`StoredRuns.execute` with ``stored``, plain :func:`execute` without."""
    if stored is None:
        return execute(runs, executor, progress=progress)
    return stored.execute(runs, executor, progress=progress)


def run_sweep(
    plan: SweepPlan,
    executor: Executor | None = None,
    out_dir: Path | None = None,
    *,
    resume: bool = False,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> pd.DataFrame:
    """Run every run of ``plan`` not already stored; return the plan's table (one row per run,
    ordered by point and replication) and, with ``out_dir``, write it to ``sweep.parquet``.

    ``on_start(num_to_run, num_stored)`` is called before the first run (for a progress bar).
    Without ``resume``, an ``out_dir`` that already holds runs is an error (never overwritten).
    ``executor``: where the runs go (default: this process, one at a time; ``LocalExecutor()``
    for every core).
    """
    executor = in_process(executor)
    store: RunStore | None = None
    done: set[str] = set()
    if out_dir is not None:
        store = RunStore(out_dir)
        done = store.keys()
        if done and not resume:
            raise ValueError(
                f"{out_dir}: already holds {len(done)} finished runs; pass --resume to continue "
                "that sweep, or choose another --out"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / MANIFEST_FILE).write_text(json.dumps(plan.manifest(), indent=2) + "\n")
    todo = [r for r in plan.runs if r.key not in done]
    if on_start is not None:
        on_start(len(todo), len(plan.runs) - len(todo))
    new_rows = execute(todo, executor, store=store, progress=progress)
    if store is not None:
        table = store.read()
        wanted = {r.key for r in plan.runs}
        table = table[table["run_key"].isin(wanted)]
    else:
        table = rows_to_frame(new_rows)
    table = _order(table)
    if out_dir is not None:
        table.to_parquet(out_dir / TABLE_FILE, index=False)
    return table


def _order(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return df
    front = [c for c in ID_COLUMNS if c in df.columns]
    cols = front + [c for c in df.columns if c not in front]
    return df[cols].sort_values(["point", "replication"], kind="stable").reset_index(drop=True)


# --- statistics over replications ------------------------------------------------------------


def check_study_args(replications: Any, confidence: Any) -> None:
    """A study's replications (an integer >= 1) and interval level (in (0, 1): 0.95, not 95):
    a ValueError naming the field; a level outside would make every interval NaN, unsaid."""
    if isinstance(replications, bool) or not isinstance(replications, int | np.integer) \
            or replications < 1:
        raise ValueError(f"replications must be an integer >= 1, got {replications!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) \
            or not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1) (0.95 for 95 %), got {confidence!r}")


def metric_range(column: str) -> tuple[float, float]:
    """The values a runs-table metric can take: every summary figure is a count, a time, a
    rate or a fraction, so none is below 0, and an attainment or a ``_fraction`` is at most 1.
    A t interval over few replications reaches past them (two runs of p99 TTFT 0.2 and 1.0 s:
    -4.9 to 6.1 s); :func:`t_interval` cuts it there."""
    last = column.rsplit("_", 1)[-1]
    return (0.0, 1.0) if last in ("attainment", "fraction") else (0.0, math.inf)


def t_interval(values: Sequence[float] | np.ndarray[Any, Any],
               confidence: float = 0.95,
               within: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student's t interval for the mean of independent replications
    (NaN bounds with fewer than two finite values), cut to ``within`` (the metric's range:
    :func:`metric_range`)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return mean, max(within[0], mean - half), min(within[1], mean + half)


def summarize_points(
    df: pd.DataFrame,
    metrics: Sequence[str],
    *,
    by: Sequence[str] = ("point",),
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Per grid point (``by``): the grid values and configuration figures (``policy``,
    ``rate_scale``, dotted keys, ``gpu``, ``kv_capacity_tokens``...) where they are constant
    within every point, the number of replications, and
    for each metric its mean and t interval (``{m}_mean``, ``{m}_low``, ``{m}_high``)."""
    import pandas as pd

    missing = [m for m in [*metrics, *by] if m not in df.columns]
    if missing:
        raise ValueError(f"no column {missing[0]!r} in the runs table")
    if df.empty:
        return pd.DataFrame()
    groups = df.groupby(list(by), sort=True, dropna=False)
    candidates = [c for c in df.columns if _is_config_column(c)
                  and c not in by and c not in metrics]
    varying = groups[candidates].nunique(dropna=False).max() if candidates else None
    keep = [c for c in candidates if varying is not None and varying[c] <= 1]
    rows = []
    for _, g in groups:
        first = g.iloc[0]
        row: dict[str, Any] = {c: first[c] for c in by}
        row.update({c: first[c] for c in keep})
        row["replications"] = len(g)
        for m in metrics:
            mean, low, high = t_interval(g[m].to_numpy(dtype=np.float64), confidence,
                                         metric_range(m))
            row[f"{m}_mean"], row[f"{m}_low"], row[f"{m}_high"] = mean, low, high
        rows.append(row)
    return pd.DataFrame(rows)


_CONFIG_COLUMNS = {POLICY, RATE_SCALE, "num_requests", "kv_capacity_tokens", "num_gpu_blocks",
                   "block_size"}


def _is_config_column(col: str) -> bool:
    """Grid values and configuration figures (kept per point), as opposed to metrics."""
    return col in _CONFIG_COLUMNS or "." in col or col in {f.name for f in fields(ScenarioSpec)}
