"""kvbudget: a capacity simulator and KV-cache admission-policy tuner for LLM inference gateways.

``import kvbudget as kb`` gives what a notebook needs; every name below is loaded on first use,
so importing the package costs next to nothing (the command line starts from it too).

Workloads and traces
--------------------
- :class:`Workload`, :func:`from_columns`: requests as columns
- :func:`load_trace`, :class:`TraceOptions`, :func:`save_workload`: real trace formats
- :func:`generate_workload`, :class:`TierTraffic`: synthetic traffic
- :class:`PoissonArrivals`, :class:`GammaArrivals`: arrival processes
- :func:`mean_arrival_rate`: the offered rate of arrivals, ``(n - 1) / span`` first to last
- :class:`Fixed`, :class:`Uniform`, :class:`LogNormal`, :class:`Empirical`: length distributions
- :class:`FixedCap`, :class:`FactorOfTrue`, :class:`QuantileCap`: declared ``max_output_tokens``

Policies and tiers
------------------
- :func:`make_policy`, :func:`policy_names`, :data:`POLICIES`: the admission policies
- :class:`BasePolicy`: the base class of a new policy
- :class:`TierConfig`, :data:`DEFAULT_TIERS`: service tiers and their SLOs
- :class:`Request`, :class:`TokenBudget`: a request and the token-budget ledger
- :class:`ClientModel`, :func:`client_model`, :data:`CLIENT_PRESETS`: what clients do with
  answers (retries, backoff, Retry-After, timeouts)

Configs and presets
-------------------
- :class:`EngineConfig`: the engine's knobs, under vLLM's names
- :class:`SpeculativeConfig`: speculative decoding, vLLM's ``speculative_config``
- :class:`GPUSpec`, :func:`get_gpu`: GPU specifications
- :class:`ModelSpec`, :func:`get_model`, :func:`model_from_config`: model specifications
  (bundled presets or any Hugging Face ``config.json``; :class:`MoESpec`, :class:`MLASpec`,
  :class:`ModelConfigError`)
- :func:`num_gpu_blocks`, :func:`kv_budget`: KV-cache capacity as vLLM v1 computes it
- :class:`VllmStepModel`: the default step-time model (vLLM v1, constants in docs/fidelity.md)
- :class:`RooflineCostModel`, :class:`LinearCostModel`, :func:`load_cost_model`,
  :func:`save_cost_model`: other step-time models and cost-model files
- :class:`FrontendCost`: what an API server adds to each request
- :class:`Scenario`, :func:`load_scenario`, :func:`default_scenario`: scenario files
- :func:`make_scenario`: a scenario from values, as the command line's flags make it

Simulation
----------
- :func:`simulate`, :class:`SimConfig`: one policy on one workload
- :class:`FleetConfig`: several engine replicas behind a router
- :class:`AutoscaleConfig`: a fleet's autoscaler (the HPA rule on a vLLM metric)
- :class:`ClosedLoop`: closed-loop load (N users, a think time), for simulate and replay

Run results
-----------
- :class:`RunResult`, :func:`read_run`: a run's records, timeline and summary, on disk or not
- :func:`summarize`: the summary metrics of a records table
- :func:`weighted_quantiles`: numpy's percentiles of a weighted multiset (the token gaps: ITL)
- :func:`read_recording`, :class:`Recording`: a real server's recorded run (request logs,
  ``vllm bench serve`` results, GuideLLM reports, replay run directories)
- :func:`recording_named`: which load tool's file a file no trace format reads is, in one line
  (what ``kvbudget simulate --trace`` says of a load tool's result)

Analysis and plots
------------------
- :mod:`tables`: percentile tables, CDFs, breakdowns, simulated-vs-measured joins
- :mod:`plots`: latency CDFs, KV timelines, SLO attainment, Pareto plots
- :func:`pareto_mask`: which points of a sweep are Pareto-optimal
- :func:`build_report`: one self-contained HTML report of runs
- :func:`validate_runs`: simulated against measured, metric by metric

Studies
-------
- :func:`compare`, :class:`Comparison`: policies side by side, with intervals and paired tests
- :func:`run_sweep`, :class:`SweepPlan`, :class:`Axis`: grids of runs with common random numbers
- :func:`tune`, :class:`TuneSpec`, :class:`Param`, :class:`Constraint`: parameter tuning under
  constraints (``Constraint.parse("interactive_ttft_p99_s<=1")`` also gives capacity's and
  plan's SLOs)
- :class:`LocalExecutor`: where a study's runs go (default: this process, one at a time;
  ``LocalExecutor()`` for every core)
- :func:`capacity`, :class:`CapacitySpec`: the largest sustainable rate per policy
- :func:`plan`, :class:`PlanSpec`: the cheapest deployment (GPU, TP, replicas, policy) meeting SLOs
- :func:`regress`, :func:`load_suite`: the CI gate on policy metrics
- :func:`calibrate_recording`: fit a step-time model to a recorded run (simulator in the loop)
- :func:`validate_recording`: a recorded run simulated against its measurements, per stage
- :func:`compare_live_validation`: a live validation run simulated on the server's figures
  and compared, metric by metric

Live servers
------------
- :func:`replay`, :class:`ReplayConfig`: the gateway in front of an OpenAI-compatible server
- :func:`calibrate`: fit a step-time model against a live server
- :func:`load_live_cost_model`, :class:`LiveCostModel`, :func:`discover_kv_server`,
  :func:`run_live_validation`, :class:`LiveValidationRun`: ``validate --url``'s live half
  (the calibrated model, the server's KV blocks, a replay between two speed checks)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> module that defines it (relative to this package)
_EXPORTS: dict[str, str] = {
    # Workloads and traces
    "Workload": "workloads",
    "from_columns": "workloads",
    "load_trace": "workloads.traces",
    "TraceOptions": "workloads.traces",
    "save_workload": "workloads.traces",
    "generate_workload": "workloads.synthetic",
    "TierTraffic": "workloads.synthetic",
    "PoissonArrivals": "workloads.arrivals",
    "GammaArrivals": "workloads.arrivals",
    "mean_arrival_rate": "workloads.arrival_rate",
    "Fixed": "workloads.lengths",
    "Uniform": "workloads.lengths",
    "LogNormal": "workloads.lengths",
    "Empirical": "workloads.lengths",
    "FixedCap": "workloads.max_output",
    "FactorOfTrue": "workloads.max_output",
    "QuantileCap": "workloads.max_output",
    # Policies and tiers
    "make_policy": "policies",
    "policy_names": "policies",
    "POLICIES": "policies",
    "BasePolicy": "policies",
    "TierConfig": "policies",
    "DEFAULT_TIERS": "policies",
    "Request": "policies",
    "TokenBudget": "policies",
    "ClientModel": "policies.clients",
    "client_model": "policies.clients",
    "CLIENT_PRESETS": "policies.clients",
    # Configs and presets
    "EngineConfig": "simulator.engine_config",
    "SpeculativeConfig": "perf.speculative",
    "GPUSpec": "perf.hardware",
    "get_gpu": "perf.hardware",
    "ModelSpec": "perf.models",
    "get_model": "perf.models",
    "model_from_config": "perf.models",
    "ModelConfigError": "perf.models",
    "MoESpec": "perf.models",
    "MLASpec": "perf.models",
    "num_gpu_blocks": "perf.kv_capacity",
    "kv_budget": "perf.kv_capacity",
    "VllmStepModel": "perf.step_time",
    "save_cost_model": "perf.cost_model",
    "FrontendCost": "perf.cost_model",
    "RooflineCostModel": "perf.roofline",
    "LinearCostModel": "perf.cost_model",
    "load_cost_model": "perf.cost_model",
    "Scenario": "simulator.scenario",
    "load_scenario": "simulator.scenario",
    "default_scenario": "simulator.scenario",
    "make_scenario": "simulator.scenario",
    # Simulation
    "simulate": "simulator.run",
    "SimConfig": "simulator.run",
    "FleetConfig": "simulator.fleet",
    "AutoscaleConfig": "simulator.autoscale_config",
    "ClosedLoop": "workloads.closed_loop",
    # Run results
    "RunResult": "results.run_result",
    "read_run": "results.run_result",
    "summarize": "results.metrics",
    "weighted_quantiles": "results.metrics",
    "read_recording": "results.recordings",
    "Recording": "results.recordings",
    "recording_named": "results.recording_named",
    # Analysis and plots
    "tables": "analysis",
    "plots": "analysis",
    "pareto_mask": "analysis.pareto",
    "build_report": "analysis.report",
    "validate_runs": "analysis.validation",
    # Studies
    "compare": "studies.compare",
    "Comparison": "studies.compare",
    "run_sweep": "studies.sweep",
    "SweepPlan": "studies.sweep",
    "Axis": "studies.sweep",
    "tune": "studies.tune",
    "TuneSpec": "studies.tune",
    "Param": "studies.tune",
    "Constraint": "studies.tune",
    "LocalExecutor": "studies.executors",
    "capacity": "studies.capacity",
    "CapacitySpec": "studies.capacity",
    "plan": "studies.plan",
    "PlanSpec": "studies.plan",
    "regress": "studies.regress",
    "load_suite": "studies.regress",
    "calibrate_recording": "studies.calibrate",
    "validate_recording": "studies.validate",
    "compare_live_validation": "studies.validate",
    # Live servers
    "replay": "live.replay",
    "ReplayConfig": "live.replay",
    "calibrate": "live.calibrate",
    "load_live_cost_model": "live.validate",
    "LiveCostModel": "live.validate",
    "discover_kv_server": "live.validate",
    "run_live_validation": "live.validate",
    "LiveValidationRun": "live.validate",
}

__all__ = sorted(_EXPORTS)


def _installed_version() -> str:
    """The installed distribution's version (``kvbudget --version``, ``kb.__version__``), or
    ``"unknown (not installed)"`` for a source tree on the path without an installation."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvbudget")
    except PackageNotFoundError:
        return "unknown (not installed)"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _installed_version()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvbudget' has no attribute {name!r}")
    mod = importlib.import_module(f"{__name__}.{module}")
    value = getattr(mod, name) if hasattr(mod, name) else importlib.import_module(
        f"{__name__}.{module}.{name}"
    )
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what a type checker and an IDE see
    from kvbudget.analysis import plots, tables
    from kvbudget.analysis.pareto import pareto_mask
    from kvbudget.analysis.report import build_report
    from kvbudget.analysis.validation import validate_runs
    from kvbudget.live.calibrate import calibrate
    from kvbudget.live.replay import ReplayConfig, replay
    from kvbudget.live.validate import (
        LiveCostModel,
        LiveValidationRun,
        discover_kv_server,
        load_live_cost_model,
        run_live_validation,
    )
    from kvbudget.perf.cost_model import (
        FrontendCost,
        LinearCostModel,
        load_cost_model,
        save_cost_model,
    )
    from kvbudget.perf.hardware import GPUSpec, get_gpu
    from kvbudget.perf.kv_capacity import kv_budget, num_gpu_blocks
    from kvbudget.perf.models import (
        MLASpec,
        ModelConfigError,
        ModelSpec,
        MoESpec,
        get_model,
        model_from_config,
    )
    from kvbudget.perf.roofline import RooflineCostModel
    from kvbudget.perf.speculative import SpeculativeConfig
    from kvbudget.perf.step_time import VllmStepModel
    from kvbudget.policies import (
        DEFAULT_TIERS,
        POLICIES,
        BasePolicy,
        Request,
        TierConfig,
        TokenBudget,
        make_policy,
        policy_names,
    )
    from kvbudget.policies.clients import CLIENT_PRESETS, ClientModel, client_model
    from kvbudget.results.metrics import summarize, weighted_quantiles
    from kvbudget.results.recording_named import recording_named as recording_named
    from kvbudget.results.recordings import Recording, read_recording
    from kvbudget.results.run_result import RunResult, read_run
    from kvbudget.simulator.autoscale_config import AutoscaleConfig
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.fleet import FleetConfig
    from kvbudget.simulator.run import SimConfig, simulate
    from kvbudget.simulator.scenario import (
        Scenario,
        default_scenario,
        load_scenario,
        make_scenario,
    )
    from kvbudget.studies.calibrate import calibrate_recording
    from kvbudget.studies.capacity import CapacitySpec, capacity
    from kvbudget.studies.compare import Comparison, compare
    from kvbudget.studies.executors import LocalExecutor
    from kvbudget.studies.plan import PlanSpec, plan
    from kvbudget.studies.regress import load_suite, regress
    from kvbudget.studies.sweep import Axis, SweepPlan, run_sweep
    from kvbudget.studies.tune import Constraint, Param, TuneSpec, tune
    from kvbudget.studies.validate import compare_live_validation, validate_recording
    from kvbudget.workloads import Workload, from_columns
    from kvbudget.workloads.arrival_rate import mean_arrival_rate
    from kvbudget.workloads.arrivals import GammaArrivals, PoissonArrivals
    from kvbudget.workloads.closed_loop import ClosedLoop
    from kvbudget.workloads.lengths import Empirical, Fixed, LogNormal, Uniform
    from kvbudget.workloads.max_output import FactorOfTrue, FixedCap, QuantileCap
    from kvbudget.workloads.synthetic import TierTraffic, generate_workload
    from kvbudget.workloads.traces import TraceOptions, load_trace, save_workload
