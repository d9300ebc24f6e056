"""Validate the simulator against a recorded run, offline (``kvbudget validate --records``).

The recorded workload (:class:`~kvbudget.results.recordings.Recording`) is simulated on the
recorded configuration with a cost model, and the simulated TTFT, TPOT, E2E (mean, p50, p90,
p99) and throughput are set beside the measured ones, overall and per load stage (the
recording's ``stage`` column, else windows of constant offered rate:
:func:`~kvbudget.analysis.validation.offered_rate_stages`). The files are those of the live
``kvbudget validate``: ``validation.csv``, ``validation.json``, ``validate.png`` and the
simulated run in ``sim/``.

A hold-out comparison (``rows``) still simulates the whole recorded workload (what arrived
before and beside the held-out requests shapes their latencies) and compares only the held-out
requests: the model's coefficients, not the workload, are what must come from the other part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.analysis.validation import (
    OVERALL,
    Validation,
    compare_recorded,
    counts_whole,
    few_requests_said,
    offered_rate_stages,
    per_request_errors,
    plot_validation,
    same_requests,
    validate_runs,
    without_client_reads,
)
from kvbudget.analysis.whole_answer import (
    gaps_of_rows,
    whole_answer_rows_of_run,
    whole_answer_said,
)
from kvbudget.perf.cost_model import CostModel, LinearCostModel
from kvbudget.perf.models import resolve_model_name
from kvbudget.policies import DEFAULT_TIERS, BasePolicy, FrontDoor, TierConfig, make_policy
from kvbudget.results.recorded_inference_perf_load import trace_cap_said
from kvbudget.results.recorded_vllm_bench_peak import peak_said
from kvbudget.results.recorded_vllm_metadata import GATEWAY_KEY
from kvbudget.results.recorded_whole_answer import reader_of
from kvbudget.results.recording import OUTSIDE_WINDOW_STATUSES
from kvbudget.results.recordings import Recording
from kvbudget.results.run_result import RunResult
from kvbudget.results.said import frontend_said, setting_lines
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.recorded_replay import (
    CANCELLED,
    NOT_SENT,
    cut_open_stages,
    simulate_stages,
    stage_plans,
)
from kvbudget.studies.sent_times import SentLate, as_sent
from kvbudget.studies.server_ttft import ServerTTFT, server_ttft_table
from kvbudget.studies.setting import errors_line, study_repr
from kvbudget.workloads import Workload

if TYPE_CHECKING:
    import pandas as pd

OPEN_TIER_TOKENS = 1 << 40
"""``max_sequence_tokens`` of a tier that a recording names but the configuration does not:
a recorded server took whatever it got, so the gateway refuses nothing."""


def recording_tiers(recording: Recording, tiers: tuple[TierConfig, ...]
                    ) -> tuple[TierConfig, ...]:
    """``tiers`` plus an open tier (no size limit, no queue timeout) for every tier name of the
    recording that they lack."""
    known = {t.name for t in tiers}
    extra = tuple(TierConfig(name, max_sequence_tokens=OPEN_TIER_TOKENS, queue_timeout_s=None)
                  for name in recording.workload.tier_names if name not in known)
    return tiers + extra


NO_GATEWAY_SAID = ("no gateway size limit (the recording's requests went straight to the "
                   "server: the default tiers' max_sequence_tokens not applied)")
"""Said where a recording is simulated as it ran with no gateway (:func:`straight_to_server`)."""


def no_gateway_said(recording: Recording) -> str:
    """What the settings line says of the gateway where none is simulated
    (:func:`straight_to_server`): :data:`NO_GATEWAY_SAID`, unless the file's ``--metadata``
    says its requests went through one (:func:`~kvbudget.results.recorded_vllm_metadata.
    gateway_pairs`), whose limits and time no file of a load tool records: then that none is
    simulated is said as assumed, never that the requests went straight to the server."""
    via = recording.config.get(GATEWAY_KEY)
    if not via:
        return NO_GATEWAY_SAID
    return ("no gateway (ASSUMED: the file's --metadata says its requests went through one ("
            + ", ".join(via) + "), which the recording does not describe: the default tiers' "
            "max_sequence_tokens not applied, and its time on each request, in the measured "
            "TTFT and E2E, not simulated; pass --policy or --scenario to simulate a gateway)")


def straight_to_server(recording: Recording, config: SimConfig, policy: str | None) -> bool:
    """Whether the recording is simulated as it ran, with no gateway: no ``policy`` given,
    none recorded (a load tool's client or a log sent each request straight to the server),
    and ``config``'s tiers the defaults nobody set (:data:`~kvbudget.policies.DEFAULT_TIERS`;
    a scenario's or ``--set``'s tiers are chosen). Its tiers then have no size limit: a gateway
    limit the recorded deployment never had refuses none of its requests (the server's own,
    vLLM's ``max_model_len``, still does)."""
    return (policy is None and recording.config.get("policy") is None
            and config.tiers is DEFAULT_TIERS)


def simulated_tiers(recording: Recording, config: SimConfig, policy: str | None
                    ) -> tuple[TierConfig, ...]:
    """The tiers a recording is simulated with: ``config``'s completed for the recording's
    (:func:`recording_tiers`), every one open where the recording went straight to the
    server (:func:`straight_to_server`)."""
    tiers = config.tiers
    if straight_to_server(recording, config, policy):
        tiers = tuple(replace(t, max_sequence_tokens=OPEN_TIER_TOKENS) for t in tiers)
    return recording_tiers(recording, tiers)


def recorded_policy(recording: Recording, policy: str | None = None,
                    policy_params: Mapping[str, Any] | None = None
                    ) -> tuple[str, dict[str, Any]]:
    """The gateway policy a recording is simulated with: ``policy`` when given, else the one a
    ``kvbudget replay`` run recorded, else ``unlimited`` (a benchmark client or a production
    log sends every request straight to the server)."""
    if policy is not None:
        return policy, dict(policy_params or {})
    name = recording.config.get("policy")
    if isinstance(name, str):
        params = recording.config.get("policy_params") or {}
        params = {k: v for k, v in dict(params).items() if k != "name"}
        return name, params
    return "unlimited", {}


DEFAULT_MODEL = next(f.default for f in fields(SimConfig) if f.name == "model")
"""The model a :class:`SimConfig` simulates when none is given."""


def check_recorded_model(recording: Recording, config: SimConfig) -> None:
    """``ValueError`` when the recording names a model (a bundled preset) and ``config``
    simulates the default model in its place: a ``SimConfig()`` left at its default would
    compare another model's step times with the recording's, unsaid (the command line takes
    the recording's model, or ``--model``). A model given in ``config`` is taken as chosen."""
    named = recording.config.get("model")
    preset = resolve_model_name(str(named)) if named else None
    if preset is None or config.model != DEFAULT_MODEL or preset == DEFAULT_MODEL:
        return
    raise ValueError(f"{recording.path}: the recording names model {named!r} (preset "
                     f"{preset}), but the config simulates the default {DEFAULT_MODEL}: pass "
                     f"SimConfig(model={preset!r}, ...) (or the model's config.json)")


def simulate_recording(recording: Recording, config: SimConfig, *, policy: str | None = None,
                       policy_params: Mapping[str, Any] | None = None,
                       cost_model: CostModel | None = None,
                       frontend_overhead_s: float | None = None,
                       progress: Callable[[int], None] | None = None) -> RunResult:
    """Simulate the recorded workload on ``config`` (its tiers completed for the recording's,
    open where it went straight to the server: :func:`simulated_tiers`; its cost model and
    front-end overhead replaced when given) under ``policy`` (``None``: the one it had,
    :func:`recorded_policy`)."""
    changes: dict[str, Any] = {"tiers": simulated_tiers(recording, config, policy)}
    policy, policy_params = recorded_policy(recording, policy, policy_params)
    if cost_model is not None:
        changes["cost_model"] = cost_model
    if frontend_overhead_s is not None:
        changes["frontend_overhead_s"] = frontend_overhead_s
    cfg = replace(config, **changes)
    plans = stage_plans(recording)
    if plans is not None:  # a closed or capped stage: each stage in its own load mode
        return simulate_stages(recording, cfg, plans, policy=policy,
                               policy_params=policy_params, progress=progress)
    run = simulate(recording.workload, make_policy(policy, dict(policy_params or {})), cfg,
                   progress=progress)
    return cut_open_stages(run, recording)  # an open stage's tool cancelled after its grace


def recording_stages(recording: Recording) -> list[str]:
    """Each request's load stage: the recording's own labels when it has any, else windows of
    constant offered rate."""
    labels = recording.measured["stage"].astype(str).tolist()
    if any(labels):
        return [label or OVERALL for label in labels]
    return offered_rate_stages(recording.workload.arrival_s)


@dataclass(eq=False)
class OfflineValidation:
    """The outcome of an offline validation.

    ``table``: :data:`~kvbudget.analysis.validation.STAGE_COLUMNS`, stage ``all`` first;
    ``per_request``: the per-request MAPE of TTFT, TPOT and E2E over the compared requests;
    ``simulated``: the simulated run; ``num_compared``: the measured requests compared;
    ``said``: the lines under the table (what its figures count that they should not:
    :func:`~kvbudget.analysis.whole_answer.whole_answer_said`).
    """

    table: pd.DataFrame
    per_request: pd.DataFrame
    simulated: RunResult
    num_compared: int
    frontend_overhead_s: float
    said: tuple[str, ...] = ()
    server_ttft: ServerTTFT | None = None
    """The server's own TTFT against the simulated engine's part, where the recording holds
    the server's per-request figures (:func:`~kvbudget.studies.server_ttft.
    server_ttft_table`)."""

    def __repr__(self) -> str:
        """What a notebook shows: what was simulated (the run's ``simulated:`` lines), the
        errors against the measurements and where the tables are, not the frames."""
        mape = ", ".join(f"{str(r['metric']).removesuffix('_s').upper()} {r['mape']:.1%}"
                         for r in self.per_request.to_dict(orient="records"))
        return study_repr(
            f"OfflineValidation: {self.num_compared:,} measured requests simulated under policy "
            f"{self.simulated.summary.get('policy')}; "
            f"{frontend_said(self.simulated.summary)}",
            setting_lines([self.simulated.summary]),
            [errors_line(self.table, OVERALL), *([f"per-request MAPE: {mape}"] if mape else []),
             *self.said],
            f".table ({len(self.table):,} rows: stage x metric), .overall, .errors(stage), "
            ".per_request, .simulated")

    @property
    def overall(self) -> pd.DataFrame:
        return self.table[self.table["stage"] == OVERALL].reset_index(drop=True)

    def errors(self, stage: str = OVERALL) -> dict[str, float]:
        """``{metric: rel_error}`` of one stage."""
        sub = self.table[self.table["stage"] == stage]
        return {str(m): float(e) for m, e in zip(sub["metric"], sub["rel_error"], strict=True)}

    def to_dict(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float | np.floating):
                return None if not math.isfinite(float(v)) else float(v)
            if isinstance(v, np.integer):
                return int(v)
            return v

        return {
            "frontend_overhead_s": self.frontend_overhead_s,
            "num_compared": self.num_compared,
            "metrics": [{k: clean(v) for k, v in r.items()}
                        for r in counts_whole(self.table).to_dict(orient="records")],
            "per_request": [{k: clean(v) for k, v in r.items()}
                            for r in self.per_request.to_dict(orient="records")],
            "said": list(self.said),
            **({} if self.server_ttft is None else {"server_ttft": self.server_ttft.to_dict()}),
        }


MAX_REPLAY_LOSS = 0.02
"""The largest fraction of the requests a recording shows completed that its simulated replay
may refuse, expire or drop before ``calibrate`` and ``validate`` refuse to answer: a replay
that loses more is simulating another server (a token limit, a KV size or a model the real
one did not have), and its latencies would be compared over other requests."""


def replay_problems(recording: Recording, simulated: pd.DataFrame,
                    rows: npt.NDArray[np.bool_] | None = None,
                    max_loss: float = MAX_REPLAY_LOSS) -> str | None:
    """One line saying how many of the requests the recording shows completed (of ``rows``)
    the simulation did not complete and why (each status and reason with its count), or None
    when they are at most ``max_loss`` of them."""
    import pandas as pd

    completed = recording.measured["usable"].to_numpy(dtype=bool)
    if rows is not None:
        completed = completed & np.asarray(rows, dtype=bool)
    ids = recording.measured["request_id"].to_numpy()[completed]
    sim = simulated.set_index("request_id").reindex(ids)
    # a time-limited stage's requests the load tool would not have sent, or cancelled, at its
    # limit are the client's (recorded_replay.cut_at_time_limit), not the server's losses
    clients = (sim["reason"].isin([NOT_SENT, CANCELLED]) if "reason" in sim
               else np.zeros(len(sim), dtype=bool))
    lost = sim[(sim["status"] != "completed") & ~clients]
    num_completed = len(ids)
    if num_completed == 0 or len(lost) <= max_loss * num_completed:
        return None
    status = lost["status"].fillna("never simulated").astype(str)
    reason = lost["reason"].fillna("").astype(str) if "reason" in lost else ""
    labels: list[str] = (status + np.where(reason != "", " (" + reason + ")", "")).tolist()
    why = pd.Series(labels, dtype=object).value_counts()
    said = "; ".join(f"{n} {w}" for w, n in why.items())
    return (f"the simulated replay did not complete {len(lost)} of the {num_completed} requests "
            f"the recording shows completed ({100 * len(lost) / num_completed:.0f} %, more than "
            f"{100 * max_loss:g} %): {said}")


def served_refusals(recording: Recording, simulated: pd.DataFrame,
                    rows: npt.NDArray[np.bool_] | None = None) -> str | None:
    """One line saying how many of the requests the recording shows not completed (refused by
    a gateway or the server, failed; of ``rows``) the simulation completed, by the recorded
    status, or None when it completed none: the comparison takes only the requests the
    recording completed, so these are seen nowhere else, though they loaded the simulated
    server and not the real one. Requests the tool left out of its measurements though the
    server answered them (:data:`OUTSIDE_WINDOW_STATUSES`: warm-up, cool-down...) loaded both
    servers and are said by the recording's notes, not here."""
    measured = recording.measured
    status = measured["status"].astype(str)
    refused = ((status != "completed") & ~status.isin(OUTSIDE_WINDOW_STATUSES)).to_numpy(
        dtype=bool)
    if rows is not None:
        refused = refused & np.asarray(rows, dtype=bool)
    ids = measured["request_id"].to_numpy()[refused]
    sim = simulated.set_index("request_id").reindex(ids)
    served = (sim["status"] == "completed").to_numpy(dtype=bool)
    if not served.any():
        return None
    why = measured["status"].to_numpy()[refused][served]
    counts = {str(w): int((why == w).sum()) for w in dict.fromkeys(why.tolist())}
    return (f"the simulation completed {int(served.sum())} of the {ids.size} requests the "
            "recording shows not completed (" + "; ".join(f"{n} {w}" for w, n in counts.items())
            + "): they loaded the simulated server and not the real one, and no row of the "
            "comparison, which takes the requests the recording completed, shows them")


def validate_recording(recording: Recording, config: SimConfig, *, policy: str | None = None,
                       policy_params: Mapping[str, Any] | None = None,
                       cost_model: CostModel | None = None,
                       frontend_overhead_s: float | None = None,
                       rows: npt.NDArray[np.bool_] | None = None,
                       out: Path | None = None, meta: Mapping[str, Any] | None = None,
                       progress: Callable[[int], None] | None = None,
                       model_chosen: bool = False) -> OfflineValidation:
    """Simulate the recording and compare it with what was measured (``rows``: only these
    requests, e.g. a hold-out part). With ``out``, write the live ``validate``'s files there
    (``meta`` goes into ``validation.json``). A recording naming a model ``config`` leaves at
    the default is refused (:func:`check_recorded_model`) unless ``model_chosen`` (the command
    line, which takes the recording's model or ``--model`` and says which)."""
    if not model_chosen:
        check_recorded_model(recording, config)
    sim = simulate_recording(recording, config, policy=policy, policy_params=policy_params,
                             cost_model=cost_model, frontend_overhead_s=frontend_overhead_s,
                             progress=progress)
    measured = recording.records()
    stages = recording_stages(recording)
    table = compare_recorded(sim.records, measured, stages, rows)
    mask = (measured["status"] == "completed").to_numpy()
    if rows is not None:
        mask = mask & rows
    per_request = per_request_errors(sim.records[mask], measured[mask])
    overhead = float(sim.summary.get("frontend_overhead_s", 0.0))
    compared = sim.records if rows is None else sim.records[rows]
    said = (whole_answer_said(recording.measured, rows, reader=reader_of(recording.config)),
            few_requests_said(measured, stages, rows),
            peak_said(recording, compared),
            trace_cap_said(recording, compared))
    result = OfflineValidation(table, per_request, sim, int(mask.sum()), overhead,
                               said=tuple(s for s in said if s),
                               server_ttft=server_ttft_table(recording, sim.records,
                                                            sim.summary, rows))
    if out is not None:
        write_validation(result, recording, out, meta=meta, rows=rows)
    return result


def simulated_included(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What ``validation.json`` says the simulated times included beside its
    ``frontend_overhead_s`` (the calibrated fixed time a request, 0.0 where none was): the API
    server's modelled cost (the run summary's ``frontend``: 11.31 ms a request, kept in
    ``sim/summary.json`` alone before) and the words the screen says them in."""
    return {"frontend": summary.get("frontend"),
            "simulated_times_include": frontend_said(summary)}


def write_validation(result: OfflineValidation, recording: Recording, out: Path, *,
                     meta: Mapping[str, Any] | None = None,
                     rows: npt.NDArray[np.bool_] | None = None,
                     assumed: Sequence[str] = ()) -> None:
    """``validation.csv`` (the table), ``validation.json`` (table, per-request errors, what
    was compared), ``validate.png`` (CDFs, simulated against measured) and ``sim/``, whose
    summary keeps ``assumed`` (the settings the command line took unsaid by the recording: the
    GPU, the engine, its knobs) beside what the run itself assumed: ``kvbudget report`` of
    ``sim/`` showed the GPU and model simulated with none of the ASSUMED the command printed,
    as if the recording had named them."""
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    counts_whole(result.table).to_csv(out / "validation.csv", index=False)
    payload = {**result.to_dict(), **simulated_included(result.simulated.summary),
               "records": recording.path, "format": recording.format,
               "counts": recording.counts, "notes": list(recording.notes),
               "holdout_rows": None if rows is None else int(np.asarray(rows).sum()),
               **dict(meta or {})}
    (out / "validation.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    simulated = result.simulated
    if assumed:
        simulated = replace(simulated, summary={**simulated.summary, "assumed": [
            *simulated.summary.get("assumed", ()), *assumed]})
    simulated.write(out / "sim")
    measured = recording.records()
    sim = result.simulated.records
    if rows is not None:
        measured, sim = measured[rows], sim[rows]
    sim = same_requests(sim, measured)
    empty = pd.DataFrame({"time_s": [], "kv_used_tokens": []})
    plot_validation(sim, measured, result.simulated.timeline, empty, out / "validate.png",
                    f"{Path(recording.path).name}: simulated vs measured")


# ---------------------------------------------------------------------------------------------
# Live validation: the simulated side of ``kvbudget validate --url``


@dataclass(eq=False)
class LiveComparison:
    """A simulated run against a live replay: the validation, and the same with every step
    time scaled by the speed checks' drift (``drift_factor``, when asked for)."""

    validation: Validation
    drift_factor: float | None = None
    drift_corrected: Validation | None = None
    sent_late: SentLate | None = None
    """How late the replay sent its requests (the simulation took the times sent), when it did."""

    def checked(self) -> Validation:
        """What ``--max-error`` applies to: the drift-corrected comparison when there is one."""
        return self.validation if self.drift_corrected is None else self.drift_corrected


def compare_live_run(workload: Workload, new_policy: Callable[[], BasePolicy],
                     config: SimConfig, live: RunResult | Any, out: Path, *,
                     capacity_tokens: int, drift_factor: float | None = None,
                     meta: Mapping[str, Any] | None = None, title: str = "") -> LiveComparison:
    """Simulate the replayed workload on the server's configuration (``config``: its blocks,
    batch limits, the calibrated cost model and front-end overhead) and compare it with the
    live run (``records``, ``timeline``, ``summary`` and, a replay's, ``itl_mean_s`` and
    ``token_gaps_s``); with ``drift_factor``, also with every step time scaled by it (a linear
    cost model's ``scaled``). The live requests whose client got the whole answer in one read
    (:func:`~kvbudget.analysis.whole_answer.whole_answer_rows_of_run`) are left out of TTFT
    and TPOT on both sides, and of ITL where the live run has each request's gaps (the
    simulation's gaps of the other requests: ``simulate``'s ``token_gaps_of``), and said
    (``validate_runs``). Writes ``validation.csv``,
    ``validation.json`` (with ``meta``), ``validate.png``, ``sim/`` (and
    ``sim-drift-corrected/``) under ``out``."""
    overhead = config.frontend_overhead_s
    policy_name = new_policy().name
    itl_mean = getattr(live, "itl_mean_s", None)
    burst = whole_answer_rows_of_run(live.records, itl_mean)
    by_gaps = itl_mean is not None and bool(np.isfinite(np.asarray(itl_mean)[burst]).all())
    # ITL over the same requests on both sides: the live ones not read whole, their chunks'
    # gaps, and the simulation's gaps of those requests (where the replay kept each one's)
    live_gaps = getattr(live, "token_gaps_s", None)
    others, live_itl = None, None
    if live_gaps is not None and burst.any():
        others = ~np.isin(workload.request_id, live.records["request_id"].to_numpy()[burst])
        live_itl = gaps_of_rows(live.records, live_gaps, ~burst)
    sim = simulate(workload, new_policy(), config, token_gaps_of=others)
    sim.write(out / "sim")

    def compare(run: RunResult) -> tuple[Validation, pd.DataFrame]:
        sim_itl = run.chosen_token_gap_columns
        result, adjusted = validate_runs(
            run.records, run.timeline, run.summary.get("engine", {}), live.records,
            live.summary, tiers=config.tiers, capacity_tokens=capacity_tokens,
            policy=policy_name, frontend_overhead_s=0.0,  # the simulation added it already
            sim_token_gaps=run.token_gap_columns, whole_answer=burst,
            whole_answer_by_gaps=by_gaps,
            itl_gaps=None if live_itl is None or sim_itl is None else (sim_itl, live_itl))
        return replace(result, frontend_overhead_s=overhead), adjusted

    result, adjusted = compare(sim)
    outcome = LiveComparison(result)
    if drift_factor is not None:
        cost = config.cost_model
        if not isinstance(cost, LinearCostModel):
            raise ValueError("drift correction needs a linear cost model")
        scaled = cost.scaled(drift_factor,
                             f"{cost.source}, x{drift_factor:.4f} (validate speed checks)")
        sim_c = simulate(workload, new_policy(), replace(config, cost_model=scaled),
                         token_gaps_of=others)
        sim_c.write(out / "sim-drift-corrected")
        outcome = LiveComparison(result, drift_factor, compare(sim_c)[0])
    counts_whole(result.metrics).to_csv(out / "validation.csv", index=False)
    corrected = outcome.drift_corrected
    (out / "validation.json").write_text(json.dumps(
        {**result.to_dict(), **simulated_included(sim.summary), "policy": policy_name,
         **dict(meta or {}),
         "drift_corrected": None if corrected is None else {
             "factor": drift_factor, **corrected.to_dict()}},
        indent=2) + "\n")
    measured = without_client_reads(live.records, burst) if burst.any() else live.records
    plot_validation(adjusted, measured, sim.timeline, live.timeline, out / "validate.png",
                    title or f"{policy_name}: simulated vs measured")
    return outcome


def compare_live_validation(workload: Workload, new_policy: Callable[[], BasePolicy],
                            live: RunResult | Any, out: Path, *, cost_model: LinearCostModel,
                            frontend_overhead_s: float, block_size: int, num_gpu_blocks: int,
                            max_model_len: int | None, max_num_seqs: int,
                            max_num_batched_tokens: int, tiers: tuple[TierConfig, ...],
                            front_door: FrontDoor | None = None,
                            capacity_tokens: int | None = None,
                            lease_ttl_s: float | None = None, seed: int = 0,
                            async_scheduling: bool = True,
                            enable_prefix_caching: bool | None = None,
                            drift_factor: float | None = None,
                            source: Mapping[str, Any] | None = None,
                            speed_check: Mapping[str, Any] | None = None,
                            title: str = "", at_sent_times: bool = True) -> LiveComparison:
    """:func:`compare_live_run` on the configuration a live server reported: its KV blocks
    (``num_gpu_blocks`` of ``block_size`` tokens, as :func:`kvbudget.live.validate.\
discover_kv_server` finds them), the calibrated batch limits, ``cost_model`` and front-end
    overhead. ``capacity_tokens``: the gateway's budget (default: the server's KV capacity).
    ``async_scheduling``: whether the server schedules a step while the last one runs (vLLM's
    default on GPUs; a CPU vLLM runs without it). ``enable_prefix_caching``: the server's, as its
    ``/metrics`` tells it (None: vLLM's default, on); a server run with
    ``--no-enable-prefix-caching`` shares no KV between prompts, and neither does the simulation.
    ``validation.json`` records ``source`` (e.g. trace, url), the engine and ``speed_check``.
    ``at_sent_times``: simulate each request at the time the replay sent it (the live records'
    ``arrival_s``: what the server saw; :func:`~kvbudget.studies.sent_times.as_sent`) rather
    than at its trace time; ``validation.json``'s ``sent_late`` says how late the sends were."""
    config = SimConfig(
        engine=EngineConfig(block_size=block_size, num_gpu_blocks=num_gpu_blocks,
                            max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens,
                            max_model_len=max_model_len, async_scheduling=async_scheduling,
                            enable_prefix_caching=enable_prefix_caching),
        tiers=tiers, front_door=front_door, cost_model=cost_model,
        gateway_capacity_tokens=capacity_tokens, lease_ttl_s=lease_ttl_s,
        timeline_period_s=0.25, seed=seed, frontend_overhead_s=frontend_overhead_s,
    )
    meta = {**dict(source or {}),
            "engine": {"block_size": block_size, "num_gpu_blocks": num_gpu_blocks,
                       "max_num_seqs": max_num_seqs,
                       "max_num_batched_tokens": max_num_batched_tokens,
                       "async_scheduling": async_scheduling,
                       "enable_prefix_caching": enable_prefix_caching},
            "speed_check": dict(speed_check or {})}
    late = None
    if at_sent_times:
        step_s = float(cost_model.step_time(0.0, 1.0, 0.0, 0.0, 0.0))
        workload, late = as_sent(workload, live.records, step_s)
        meta["sent_late"] = late.to_dict()
    outcome = compare_live_run(workload, new_policy, config, live, out,
                               capacity_tokens=capacity_tokens or num_gpu_blocks * block_size,
                               drift_factor=drift_factor, meta=meta, title=title)
    return replace(outcome, sent_late=late)
