"""Predictions with intervals: a run's headline figures with the spread that the seed and the
step model's stated uncertainty leave open.

A simulation answers with one number per figure ("p99 TTFT 1.8 s"); how far to trust it
depends on two things the user cannot see in that number:

- **the seed**: a synthetic workload, and any random draw of the run, come from the seed;
- **the step model**: its constants come from published figures, each with the range its
  sources leave open (:data:`kvbudget.perf.step_uncertainty.STATED_RANGES`, the default
  ``vllm-v1`` model), or from a calibration, whose cost file carries the fit's posterior
  (:class:`kvbudget.studies.fit_uncertainty.FitUncertainty`); and, for the default model
  wherever it extrapolates beyond the configurations its constants were derived on (another
  GPU, another model, tensor or expert parallelism), its **structural error**: every step
  ``exp(sigma z)`` times as long, ``z`` Student's t with
  :data:`~kvbudget.perf.step_uncertainty.STRUCTURAL_DOF` degrees of freedom (the predictive of a
  spread estimated from that many figures), ``sigma`` the leave-one-GPU-out spread of
  :func:`kvbudget.perf.step_uncertainty.structural_sigma` (0 for the derivation's own models on
  one H100).

:func:`scenario_intervals` runs the scenario once as it is (the figures reported) and
``num_draws`` times more, each with the next seed and the step model's constants drawn from
their uncertainty (a :class:`StepDraw`): independently and uniformly in log space over each
stated range (the prior of :mod:`~kvbudget.studies.fit_uncertainty` is that uniform's
moments) with the structural factor, or jointly normal in a fit's coordinates with its
posterior covariance, cut to its search bounds. A
figure's interval at ``level`` is the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles
of its ``num_draws`` values, taken at the positions that make it cover a further draw with
probability ``level`` (:func:`intervals_of`). How often such an interval holds the measured value is
``benchmarks/bench_intervals.py``'s question (docs/fidelity.md reports it).

What is not in the interval: the engine's own modelling choices (what the scheduler does),
the workload's own uncertainty beyond the seed (a trace is taken as it is), any constant
without a stated range (the GPU's peak figures, the model's shape), and a structural error
larger than the published step figures show (tensor parallelism, MoE at batch: none of them has
it; their configurations get the same spread as another GPU, and their communication the
stated ranges of its link, a PCIe one's as wide as peer-to-peer access or its absence makes
it). ``capacity`` and ``plan`` take one :class:`StepDraw` per replication
(:func:`replication_draws`), so their intervals over the replications carry the step model's
uncertainty as well as the seed's.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.perf.step_time import VllmStepModel
from kvbudget.perf.step_uncertainty import (
    INTERCONNECT_RANGES,
    STATED_RANGES,
    STRUCTURAL_DOF,
    StructurallyScaled,
    structural_sigma,
    structural_status,
)
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.fit_uncertainty import FitUncertainty

if TYPE_CHECKING:
    from kvbudget.perf.cost_model import CostModel
    from kvbudget.results.run_result import RunResult
    from kvbudget.simulator.scenario import Scenario

HEADLINE: tuple[tuple[str, str | None], ...] = (
    ("ttft_s", "p50"), ("ttft_s", "p99"), ("tpot_s", "p50"), ("tpot_s", "p99"),
    ("e2e_s", "p50"), ("e2e_s", "p99"), ("sustained_output_tokens_per_s", None),
    ("output_tokens_per_s", None), ("goodput_rps", None), ("slo_attainment", None),
    ("completed", None),
)
"""The summary figures given an interval, per tier and overall: ``(key, statistic)``. The
throughput to read is ``sustained_output_tokens_per_s`` (first arrival to last finish): over
the arrival window (``output_tokens_per_s``) a slower or faster step model that completes the
same requests gives the same figure, so its interval is narrow whatever the uncertainty."""
DEFAULT_NUM_DRAWS = 40
FRONTEND_OVERHEAD = "frontend_overhead_s"


FRACTIONS = ("mem_efficiency", "kv_mem_efficiency", "gemm_efficiency", "attention_efficiency",
             "link_efficiency")
"""Constants that are fractions of a peak: a draw is cut at 1 (no GPU beats its peak)."""


@dataclass(frozen=True)
class StepDraw:
    """One draw of the step model: ``factors`` on the default model's own constants (the
    spread of their stated ranges: one draw then serves every GPU of a plan, each around its
    own defaults), or ``values`` of a calibration's constants (its posterior); and ``z``, the
    Student t draw of the structural error, scaled by the configuration's spread
    (:func:`~kvbudget.perf.step_uncertainty.structural_sigma`; none for a calibration)."""

    factors: tuple[tuple[str, float], ...] = ()
    values: tuple[tuple[str, float], ...] = ()
    z: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"factors": dict(self.factors), "values": dict(self.values), "z": self.z}

    def cost_model(self, nominal: CostModel) -> tuple[CostModel, float | None]:
        """``nominal`` with this draw's constants (the structural error by its
        configuration's validation status), and the drawn front-end overhead (None: the
        nominal one)."""
        params = dict(self.values)
        overhead = params.pop(FRONTEND_OVERHEAD, None)
        for name, factor in self.factors:
            top = 1.0 if name in FRACTIONS else math.inf
            params[name] = min(top, float(getattr(nominal, name)) * factor)
        model = with_params(nominal, params) if params else nominal
        sigma = (structural_sigma(nominal)
                 if isinstance(nominal, VllmStepModel) and not self.values else 0.0)
        if sigma and self.z:
            model = StructurallyScaled(model, math.exp(sigma * self.z))
        return model, overhead

    def config(self, config: SimConfig) -> SimConfig:
        """``config`` with this draw's step model (the front end the nominal run assumed)."""
        nominal = config.resolved_cost_model()
        model, overhead = self.cost_model(nominal)
        return dataclasses.replace(
            config, cost_model=model, frontend=nominal_frontend(config),
            frontend_overhead_s=config.frontend_overhead_s if overhead is None else overhead)


def nominal_frontend(config: SimConfig) -> str:
    """The front end a run with ``config`` assumes (a given cost model would otherwise switch
    the default one off)."""
    return config.frontend or ("vllm-api-server" if config.cost_model is None
                               and config.engine_defaults == "vllm" else "none")


@dataclass(frozen=True)
class ParameterDraws:
    """How one draw of the step model is made: ``ranges`` (each parameter's range, or a
    posterior's 95 % interval, for the record), ``draw``, which returns one :class:`StepDraw`
    from the generator it is given, and ``structural``: whether each draw also gets a
    structural error (its ``z``, from a generator of its own)."""

    method: str
    ranges: dict[str, tuple[float, float]]
    draw: Callable[[np.random.Generator], StepDraw]
    structural: bool = False


def stated_draws(model: CostModel) -> ParameterDraws:
    """The default step model's constants, each drawn around its own value, uniformly in log
    space over a span as wide as its stated range (the default is the best estimate; the
    range's width is how far its sources leave it open: the prior of
    :mod:`~kvbudget.studies.fit_uncertainty` has the same spread; the model's interconnect's own
    ranges where it has them), a fraction of a peak cut at 1. ValueError for a model without
    stated ranges."""
    if not isinstance(model, VllmStepModel):
        raise ValueError(f"the {getattr(model, 'KIND', type(model).__name__)} step model has no "
                         "stated uncertainty: intervals need the default vllm-v1 model or a "
                         "calibrated cost file with calibration.uncertainty")
    bases = {name: float(getattr(model, name)) for name in model.FIT_PARAMETERS}
    stated = {**STATED_RANGES, **INTERCONNECT_RANGES.get(model.gpu.interconnect, {})}
    half = {name: math.log(hi / lo) / 2 for name, (lo, hi, _source) in stated.items()
            if name in bases}
    top = {name: 1.0 if name in FRACTIONS else math.inf for name in half}
    ranges = {name: (bases[name] * math.exp(-h), min(top[name], bases[name] * math.exp(h)))
              for name, h in half.items()}

    def draw(rng: np.random.Generator) -> StepDraw:
        return StepDraw(factors=tuple((name, math.exp(float(rng.uniform(-h, h))))
                                      for name, h in half.items()))

    where = f"{model.model.name} on {model.gpu.name}" + (
        f" TP {model.tensor_parallel_size}" if model.tensor_parallel_size > 1 else "") + (
        f" EP {model.expert_parallel_size}" if model.expert_parallel_size > 1 else "")
    sigma = structural_sigma(model)
    return ParameterDraws(
        "their stated ranges' spread around the defaults (kvbudget.perf.step_uncertainty), "
        "independent, uniform in log space; and the structural error of the default model, "
        f"{where} (validation status {structural_status(model)!r}): every step exp(sigma z) "
        f"times as long, z Student's t with {STRUCTURAL_DOF} degrees of freedom, sigma "
        f"{sigma:g} (leave-one-GPU-out on the published step figures; 0 where the constants "
        "were derived)", ranges, draw, structural=True)


def posterior_draws(posterior: FitUncertainty) -> ParameterDraws:
    """A calibration's constants, jointly normal in its search coordinates with its posterior
    covariance, cut to its search bounds."""
    mean = np.asarray(posterior.x, np.float64)
    cov = np.asarray(posterior.covariance, np.float64)
    bounds = posterior.bounds or tuple((-math.inf, math.inf) for _ in posterior.names)

    def draw(rng: np.random.Generator) -> StepDraw:
        x = rng.multivariate_normal(mean, cov, method="eigh")
        out = []
        for j, name in enumerate(posterior.names):
            v = min(max(float(x[j]), bounds[j][0]), bounds[j][1])
            scale = posterior.scales[j]
            out.append((name, scale * math.exp(v) if posterior.log[j] else max(0.0, scale * v)))
        return StepDraw(values=tuple(out))

    return ParameterDraws("the calibration's posterior (calibration.uncertainty), jointly "
                          "normal, cut to the search bounds", posterior.intervals(), draw)


def file_posterior(path: Path) -> FitUncertainty:
    """The ``calibration.uncertainty`` block of a cost file; ValueError naming the file when it
    has none."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the cost file: {exc}") from None
    block = (payload.get("calibration") or {}).get("uncertainty") if isinstance(payload, dict) \
        else None
    if block is None:
        raise ValueError(f"{path}: no calibration.uncertainty in this cost file: intervals need "
                         "a fit's posterior (kvbudget calibrate --records writes one)")
    try:
        return FitUncertainty.from_json(block)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


@dataclass(frozen=True)
class Intervals:
    """The ``level`` intervals of the headline figures: ``figures[scope][figure] = (low,
    high)``, scope ``overall`` or a tier, figure ``ttft_s.p99`` and the like."""

    level: float
    num_draws: int
    method: str
    parameters: dict[str, tuple[float, float]]
    figures: dict[str, dict[str, tuple[float, float]]]

    def to_json(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {
            "level": self.level,
            "num_draws": self.num_draws,
            "method": f"each draw: the next seed, and the step model's constants from {self.method}",
            "parameters": {k: [num(a), num(b)] for k, (a, b) in self.parameters.items()},
            "figures": {scope: {k: [num(a), num(b)] for k, (a, b) in figs.items()}
                        for scope, figs in self.figures.items()},
        }


def headline(summary: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``{scope: {figure: value}}`` of a run summary's :data:`HEADLINE` figures."""
    scopes = {"overall": summary["overall"], **summary.get("tiers", {})}
    out: dict[str, dict[str, float]] = {}
    for scope, block in scopes.items():
        figs = {}
        for key, stat in HEADLINE:
            value = block.get(key)
            if stat is not None:
                value = value.get(stat) if isinstance(value, dict) else None
            figs[key if stat is None else f"{key}.{stat}"] = (
                float(value) if isinstance(value, int | float) else math.nan)
        out[scope] = figs
    return out


def intervals_of(values: list[dict[str, dict[str, float]]], level: float
                 ) -> dict[str, dict[str, tuple[float, float]]]:
    """Each figure's ``level`` interval over the draws' headline figures: the order statistics
    at positions ``(1 -+ level) / 2 * (n + 1)`` of the ``n`` finite values (numpy's
    ``weibull`` quantiles, Hyndman and Fan 1996, definition 6), interpolated. A new draw falls
    between the ``r``-th and ``s``-th of ``n`` draws with probability ``(s - r) / (n + 1)``
    (the coverage of order statistics: David and Nagaraja, Order Statistics, 3rd ed., 2.5), so
    these cover a further draw (the measured value, if the uncertainty drawn is the real one)
    with probability ``level``; numpy's default positions ``(1 -+ level) / 2 * (n - 1) + 1``
    cover it with ``(n - 1) / (n + 1) * level``, 0.86 for 40 draws at 0.9."""
    q = ((1 - level) / 2, (1 + level) / 2)
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for scope, figs in values[0].items():
        out[scope] = {}
        for name in figs:
            v = np.array([d.get(scope, {}).get(name, math.nan) for d in values], np.float64)
            v = v[np.isfinite(v)]
            lo, hi = (np.quantile(v, q, method="weibull") if len(v) else (math.nan, math.nan))
            out[scope][name] = (float(lo), float(hi))
    return out


def with_params(model: CostModel, params: Mapping[str, float]) -> CostModel:
    """``model`` with the drawn constants ``params`` (a dataclass cost model's fields)."""
    if not dataclasses.is_dataclass(model) or isinstance(model, type):
        raise ValueError(f"{type(model).__name__}: its constants cannot be drawn")
    drawn: CostModel = dataclasses.replace(model, **params)
    return drawn


def step_draws(draws: ParameterDraws, num_draws: int, seed: int) -> list[StepDraw]:
    """``num_draws`` draws, the constants by a generator seeded from ``seed`` and the
    structural errors by one of their own (so the same seed gives the same draws, and the
    constants' draws are the same with or without a structural error)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1A7E]))
    struct = np.random.default_rng(np.random.SeedSequence([seed, 0x57C7]))
    out = []
    for _ in range(num_draws):
        d = draws.draw(rng)
        if draws.structural:
            d = dataclasses.replace(d, z=float(struct.standard_t(STRUCTURAL_DOF)))
        out.append(d)
    return out


def over_draws(run: Callable[[int, StepDraw], dict[str, dict[str, float]]],
               draws: ParameterDraws, *, num_draws: int, seed: int,
               progress: Callable[[int], None] | None = None
               ) -> list[dict[str, dict[str, float]]]:
    """``run(d, draw)`` for draws ``d = 1 .. num_draws`` of :func:`step_draws`."""
    out = []
    for d, draw in enumerate(step_draws(draws, num_draws, seed), start=1):
        out.append(run(d, draw))
        if progress is not None:
            progress(d)
    return out


def replication_draws(scn: Scenario, num_replications: int, seed: int) -> list[StepDraw]:
    """One draw of the scenario's step model per replication (``capacity --interval``,
    ``plan --interval``): replication ``r`` gets draw ``r`` of a generator seeded from
    ``seed``. ValueError where :func:`scenario_draws` refuses."""
    return step_draws(scenario_draws(scn, scn.sim_config()), num_replications, seed)


class WorldDraws:
    """A study whose replications are worlds (``capacity``'s and ``plan``'s specs): with
    ``interval`` and ``model_draws`` each replication has its seed and its step-model draw."""

    scenario: Scenario
    replications: int
    root_seed: int | None
    interval: float | None
    model_draws: bool

    def step_draws(self) -> list[StepDraw] | None:
        """One step-model draw per replication (with ``interval`` and ``model_draws``)."""
        if self.interval is None or not self.model_draws:
            return None
        assert self.root_seed is not None
        return replication_draws(self.scenario, self.replications, self.root_seed)

    def combines(self) -> str:
        """What the intervals combine, in words."""
        what = ("the seed and the step model's draw (its constants' stated ranges and its "
                "structural error by configuration, or a calibration's posterior)"
                if self.model_draws else "the seed only")
        return f"{self.replications} replications, each a world: {what}"


def check_level(level: float, num_draws: int) -> None:
    if not (math.isfinite(level) and 0 < level < 1):
        raise ValueError(f"interval level must be between 0 and 1 (e.g. 0.9), got {level!r}")
    if num_draws < 2:
        raise ValueError(f"interval draws must be at least 2, got {num_draws!r}")


def scenario_draws(scn: Scenario, config: SimConfig) -> ParameterDraws:
    """The step model's uncertainty for a scenario: a calibrated file's posterior, else the
    default model's stated ranges. ValueError for a fleet of several GPUs (their replicas
    would keep their own default models)."""
    if config.fleet is not None and any(g != config.gpu for g in config.fleet.gpus):
        raise ValueError("intervals are not supported for a fleet of several GPU kinds: the "
                         "drawn step model applies to the scenario's own GPU")
    if scn.spec.cost_model is not None and config.cost_model is not None:
        path = Path(scn.spec.cost_model)
        return posterior_draws(file_posterior(path if path.is_absolute() else scn.base_dir / path))
    return stated_draws(config.resolved_cost_model())


def draw_intervals(scn: Scenario, policy_name: str | None, *, level: float = 0.9,
                   num_draws: int = DEFAULT_NUM_DRAWS,
                   progress: Callable[[int], None] | None = None) -> Intervals:
    """The intervals of the scenario's figures under ``policy_name`` over ``num_draws`` runs
    (seeds ``seed + 1 ..``; constants from :func:`scenario_draws`, drawn by a generator seeded
    from the scenario's seed, so every policy gets the same draws: common random numbers)."""
    check_level(level, num_draws)
    base = scn.sim_config()
    draws = scenario_draws(scn, base)

    def run(d: int, draw: StepDraw) -> dict[str, dict[str, float]]:
        seeded = dataclasses.replace(scn, spec=dataclasses.replace(scn.spec, seed=scn.seed + d))
        config = draw.config(dataclasses.replace(base, seed=scn.seed + d))
        return headline(simulate(seeded.workload(), scn.make_policy(policy_name), config).summary)

    values = over_draws(run, draws, num_draws=num_draws, seed=scn.seed, progress=progress)
    return Intervals(level, num_draws, draws.method, draws.ranges, intervals_of(values, level))


def scenario_intervals(scn: Scenario, policy_name: str | None, *, level: float = 0.9,
                       num_draws: int = DEFAULT_NUM_DRAWS,
                       progress: Callable[[int], None] | None = None
                       ) -> tuple[RunResult, Intervals]:
    """The scenario's run as ``simulate`` gives it, and :func:`draw_intervals` of it
    (``progress(d)`` after the run, ``d = 0``, and after each draw)."""
    check_level(level, num_draws)
    nominal_run = simulate(scn.workload(), scn.make_policy(policy_name), scn.sim_config())
    scn.note_defaulted(nominal_run.summary)
    if progress is not None:
        progress(0)
    return nominal_run, draw_intervals(scn, policy_name, level=level, num_draws=num_draws,
                                       progress=progress)
