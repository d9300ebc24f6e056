"""What a run says it simulated and assumed, in the lines a user reads before its figures:
the model and GPU as resolved (with the names given), the engine and its caps, the KV capacity,
the workload, and what loading the workload's file warned of or assumed. ``simulate`` and
``compare`` open their tables with them; a :class:`~kvbudget.results.run_result.RunResult`
shows them in a notebook."""

from __future__ import annotations

import os
import textwrap
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvbudget.results.records import TIME_LIMIT_CANCELLED, TIME_LIMIT_NOT_SENT
from kvbudget.results.vllm_releases import SIMULATED_VLLM
from kvbudget.workloads.arrival_rate import gaps_said, mean_arrival_rate, span_said
from kvbudget.workloads.counted import counted

__all__ = ["CONTEXT_DEFAULT", "CONTEXT_DEFAULT_REFUSED", "WIDTH", "as_given", "context_cut",
           "cost_said", "figure", "fill", "frontend_said", "mix_said", "rate_said",
           "served_said", "setting_lines", "shared_knobs"]

WIDTH = 100
"""The width the lines are wrapped to (the terminal tables')."""

CONTEXT_DEFAULT_REFUSED = "(the model's context, vLLM's default) refused"
"""The words of the ``assumed`` line on requests vLLM's default ``max_model_len`` refused
(``simulator/limits_said.py``): the table's ``refused:`` line, which finds them by it, does
not count those refusals again."""
CONTEXT_DEFAULT = "(the model's context, vLLM's default)"
"""Whose ``max_model_len`` a simulated run's ``assumed`` line on its cut outputs names
(``simulator/limits_said.py``) where none was given."""


def figure(value: Any, digits: int = 3) -> str:
    """A figure as the terminal tables print it: ``-`` for none, thousands with separators and
    no decimals (``1,792``), hundreds with one (``813.9``), else ``digits`` significant ones."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.{digits}g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def context_cut(limit: str, num_cut: int) -> str:
    """The line on the requests whose output a vLLM front end cut at the model's context
    (``workloads/context_limit.py``), as a simulated run (``simulator/limits_said.py``) and a
    live replay (``live/replay.py``) both say it; ``limit``: the ``max_model_len`` and
    whose it is."""
    return (f"{limit} cut the output of {counted(num_cut, 'request')} at the context left: "
            "their prompt + output is over it, and vLLM lowers max_tokens to max_model_len - "
            "prompt (served, not refused)")


TIME_LIMIT_REASONS = (TIME_LIMIT_NOT_SENT, TIME_LIMIT_CANCELLED)
"""The reasons :func:`time_limit_said` counts: the client's, not the server's refusals (the
table's ``refused:`` line leaves them to it)."""


def time_limit_said(reasons: Iterable[Any], sender: str = "the simulated users") -> str | None:
    """One line on what a time-limited run (a simulated or a live replay of a load tool's
    stage) left to the client, from its records' ``reason`` column (None when nothing): how
    many requests ``sender`` had not sent by the tool's limit and how many were cancelled
    after its grace period."""
    counts = Counter(str(r) for r in reasons)
    not_sent, cancelled = counts[TIME_LIMIT_NOT_SENT], counts[TIME_LIMIT_CANCELLED]
    if not (not_sent or cancelled):
        return None
    running = (f"{cancelled} were still running after its grace period" if not_sent else
               f"{cancelled} of the recorded requests were still running when the tool's grace "
               "period after its time limit ended")
    unsent = (f"{sender} had not sent {not_sent} of the recorded requests by the tool's time "
              "limit and " if not_sent else "")
    return (f"time limit: {unsent}{running} (cancelled, as the tool does): the client's, "
            "neither completed nor failures of the server")


def as_given(given: Any, preset: Any, assumed: bool = False) -> str:
    """A model or GPU as the run resolved it, with the name it was given where that differs
    (a Hugging Face name, an alias); one the user did not give (``assumed``: the default
    scenario's, :attr:`~kvbudget.simulator.scenario.Scenario.defaulted`) said as assumed, not
    given: ``H100-SXM (assumed: the default scenario's H100-80GB)``."""
    differs = isinstance(preset, str) and bool(preset) and preset != given
    if assumed:
        return (f"{preset if differs else given} (assumed: the default scenario's"
                + (f" {given})" if differs else ")"))
    if differs:
        return f"{preset} (given as {given})"
    return str(given)


def _on(tp: Any, gpu: Any) -> str:
    return f"{int(tp)} x {gpu}" if tp and int(tp) > 1 else str(gpu)


def _count(num: int) -> str:
    return counted(num, "replica")


def _caps(knobs: Mapping[str, Any]) -> str:
    return "".join(f", {k} {v:,}" for k, v in knobs.items()
                   if k in ("max_num_seqs", "max_num_batched_tokens") and v is not None)


def _deployment(s: Mapping[str, Any], gpu: str, tp: int) -> tuple[str, Mapping[str, Any]]:
    """Where the model ran and the knobs to name beside it: one engine; a fleet's replicas (by
    GPU where they differ, each as ``gpu`` is said: the preset and the name given; an
    autoscaled fleet's bounds), or a disaggregated deployment's pools, each with its own GPU
    (the run's, ``gpu``, said as it is, assumed where it was, unless the pool gives one), TP,
    caps and the knobs that differ between them (the ones they share said once, as one
    engine's): the KV capacity said beside it is theirs, not one GPU's."""
    figures = s.get("engine") or {}
    pools = figures.get("disaggregation")
    if isinstance(pools, dict):
        return _pools(s, pools, gpu)
    fleet, knobs = figures.get("fleet"), s.get("engine_knobs") or {}
    if not isinstance(fleet, dict):
        return _on(tp, gpu), knobs
    auto = fleet.get("autoscale")
    count = (f"{auto.get('min_replicas')} to {auto.get('max_replicas')} replicas (autoscaled)"
             if isinstance(auto, dict) else _count(fleet.get("num_replicas", 0)))
    replicas = [r for r in fleet.get("replicas", ()) if isinstance(r, dict)]
    kinds = Counter((_replica_gpu(s, r, gpu), _caps(r)) for r in replicas)
    if len(kinds) == 1:  # the replicas' GPU (the run's, or one fleet.gpus names for each)
        # and caps: vLLM's defaults are that GPU's, not the run's
        one = replicas[0]
        return f"{count} of {_on(tp, next(iter(kinds))[0])}{_routing(fleet)}", {
            **knobs, **{k: one[k] for k in _CAPS[:2] if one.get(k) is not None}}
    # the replicas' GPUs as given (fleet.gpus), each one's caps where a GPU's defaults differ;
    # the knobs no GPU's defaults set, once
    caps = {c for _, c in kinds}
    return count + " (" + "; ".join(f"{n:,} of {_on(tp, g)}" + (c if len(caps) > 1 else "")
                                    for (g, c), n in kinds.items()) + ")" + _routing(fleet), (
        knobs if len(caps) == 1 else {k: v for k, v in knobs.items() if k not in _CAPS})


def _replica_gpu(s: Mapping[str, Any], r: Mapping[str, Any], gpu: str) -> str:
    """A fleet replica's GPU as the line says it: the run's (``gpu``, as said, assumed where it
    was) where ``fleet.gpus`` names none (``gpu_given`` null), else the preset with the name
    ``fleet.gpus`` gave it (a summary written before ``gpu_given`` was kept: the run's where
    the names agree)."""
    if ("gpu_given" in r and r["gpu_given"] is None) or (
            "gpu_given" not in r and r.get("gpu") == s.get("gpu")):
        return gpu
    return as_given(r.get("gpu"), r.get("gpu_preset"))


_CAPS = ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size")
"""Knobs a pool's or a fleet replica's words say with its GPU (:func:`_caps`, :func:`_on`)."""


def shared_knobs(s: Mapping[str, Any]) -> dict[str, Any]:
    """A summary's ``engine_knobs``; a disaggregated run's (each pool's) those both pools
    have alike, less what each pool's words say with its GPU (:data:`_CAPS`)."""
    knobs = s.get("engine_knobs") or {}
    if not isinstance((s.get("engine") or {}).get("disaggregation"), dict):
        return dict(knobs)
    prefill, decode = (knobs.get(name) or {} for name in ("prefill", "decode"))
    return {k: v for k, v in prefill.items()
            if k not in _CAPS and k in decode and decode[k] == v}


def _pools(s: Mapping[str, Any], pools: Mapping[str, Any], gpu: str
           ) -> tuple[str, Mapping[str, Any]]:
    """:func:`_deployment` of a disaggregated deployment: ``disaggregated pools (prefill: N
    replicas of G, routed R, CAPS, KNOBS; decode: ...)``, each pool on its own GPU (as it gave
    it, ``gpu_given``) or the run's (``gpu``, as the run's line says it), its knobs where the
    pools' differ; the knobs they share, to say once as one engine's. A summary without
    ``gpu_given`` (written before it was kept) names the pool's preset alone."""
    knobs = s.get("engine_knobs") or {}
    each = {name: knobs.get(name) or {} for name in ("prefill", "decode")}
    shared = shared_knobs(s)

    def pool(name: str, p: Mapping[str, Any]) -> str:
        given = p.get("gpu_given")
        on = (p["gpu"] if "gpu_given" not in p else gpu if given is None
              else as_given(given, p["gpu"]))
        own = {k: v for k, v in each[name].items() if k not in _CAPS and k not in shared}
        return (f"{name}: {_count(p['num_replicas'])} of {_on(p.get('tensor_parallel_size'), on)}"
                + (f", routed {p['router']}" if p.get("router") else "") + _caps(p)
                + "".join(f", {x}" for x in _knobs_said(s, own, whole=False)))

    return "disaggregated pools (" + "; ".join(
        pool(name, p) for name in ("prefill", "decode")
        if isinstance(p := pools.get(name), dict)) + ")", shared


def _routing(fleet: Mapping[str, Any]) -> str:
    """How a fleet's requests reach its replicas: its router and its token budget (one over
    the fleet, or one per replica: ``simulator.fleet``), each the scenario's default unless
    given; ``""`` for a summary that names neither."""
    router, budget = fleet.get("router"), fleet.get("budget")
    said = [f"routed {router}"] if router else []
    if budget in BUDGETS_SAID:
        said.append(BUDGETS_SAID[budget])
    return "".join(f", {x}" for x in said)


BUDGETS_SAID = {"global": "one token budget over them", "per_replica": "a token budget each"}
"""A fleet's ``budget`` as the ``simulated:`` line says it."""


def _assumed_knobs(s: Mapping[str, Any], knobs: Mapping[str, Any]) -> str:
    """What else the engine assumed that moves the figures, from the summary: the context
    (``max_model_len``: vLLM's default is the model's), prefix caching (on, and whether the
    workload had prefix hashes to share), the weights' and the KV cache's dtypes (``auto``:
    the model's 16-bit activation dtype), the block size and the ``gpu_memory_utilization``
    the KV capacity was sized at (none where ``num_gpu_blocks`` was given); ``""`` for what
    ``knobs`` does not have (a disaggregated deployment's pools say those that differ)."""
    return "".join(f", {x}" for x in _knobs_said(s, knobs))


def _knobs_said(s: Mapping[str, Any], knobs: Mapping[str, Any], whole: bool = True
                ) -> list[str]:
    """The words of each of ``knobs`` a run's line says: ``max_model_len``, chunked prefill,
    prefix caching (whether the workload had prefixes to share: the summary's
    ``engine.prefix_caching``), the KV cache's dtype, ``gpu_memory_utilization`` (none where
    ``num_gpu_blocks`` was given); ``whole``: with the summary's weights and block size (one
    engine's words, not a pool's own)."""
    said = []
    if knobs.get("max_model_len") is not None:
        said.append(f"max_model_len {int(knobs['max_model_len']):,}")
    chunked = knobs.get("enable_chunked_prefill")
    if chunked is not None:
        said.append(f"chunked prefill {'on' if chunked else 'off'}")
    caching = knobs.get("enable_prefix_caching")
    if caching is not None:
        shared = bool((s.get("engine") or {}).get("prefix_caching"))
        said.append("prefix caching " + ("off" if not caching else "on" if shared else
                                         "on (no prefixes to share)"))
    dtype, kv = s.get("weight_dtype"), knobs.get("kv_cache_dtype")
    if dtype and whole:
        said.append(f"{dtype} weights")
    if kv:  # auto: the model's 16-bit activation dtype (perf/models.py)
        said.append(f"{'16-bit' if kv == 'auto' else kv} KV")
    if knobs and whole and isinstance(s.get("block_size"), int):
        said.append(f"block_size {s['block_size']}")
    if knobs.get("gpu_memory_utilization") is not None and knobs.get("num_gpu_blocks") is None:
        said.append(f"gpu_memory_utilization {float(knobs['gpu_memory_utilization']):g}")
    return said


def _capacity_whose(s: Mapping[str, Any], where: str) -> str:
    """Whose KV capacity the summary's ``kv_capacity_tokens`` is where not one engine's or a
    fixed fleet's: a disaggregated deployment's decode pool, an autoscaled fleet at its most;
    one set by ``engine.num_gpu_blocks`` (``engine_knobs`` has it then: not what the GPU
    holds);
    and the gateway's token budget: the one given (``gateway_capacity_tokens``), else that
    capacity (one gateway's over it all: not a fleet's per replica nor an autoscaled one's)."""
    knobs = s.get("engine_knobs") or {}
    budget = s.get("gateway_capacity_tokens")
    given = "" if budget is None else f", the gateway's budget {int(budget):,} (given)"
    if where.startswith("disaggregated"):
        given = _pools_blocks_given(knobs) + given
    elif knobs.get("num_gpu_blocks") is not None:
        given = f" ({_blocks_given(knobs, 'engine.')})" + given
    fleet = (s.get("engine") or {}).get("fleet") or {}
    auto = fleet.get("autoscale")
    # none given: the capacity said is the gateway's budget, but a fleet's per replica or one
    # that follows an autoscaler's replicas
    if (budget is None and s.get("kv_capacity_tokens") is not None and not isinstance(auto, dict)
            and fleet.get("budget", "global") == "global"):
        given += ", the gateway's budget"
    if where.startswith("disaggregated"):
        return given
    return (f" (at {auto.get('max_replicas')} replicas)" if isinstance(auto, dict) else "") + given


def _blocks_given(knobs: Mapping[str, Any], field: str) -> str:
    """``engine.num_gpu_blocks N given, not sized from the GPU's memory``: a KV cache set
    (``knobs``' ``num_gpu_blocks``), not the GPU's memory (the preset's is other), with the
    ``gpu_memory_utilization`` given beside it, which sizes nothing then; ``field``: the
    knobs' table (``engine.``, or a pool's ``""``, whose table the summary does not keep)."""
    unused = knobs.get("gpu_memory_utilization")
    return (f"{field}num_gpu_blocks {int(knobs['num_gpu_blocks']):,} given, not sized from the "
            "GPU's memory" + ("" if unused is None else
                              f"; {field}gpu_memory_utilization {float(unused):g}, also given, "
                              "unused"))


def _pools_blocks_given(knobs: Mapping[str, Any]) -> str:
    """`` (the decode pool's)`` with, per pool whose ``num_gpu_blocks`` was given (its
    ``engine_knobs``, under ``prefill`` and ``decode``), :func:`_blocks_given` (once where both
    pools were given the same)."""
    each = {name: k for name in ("prefill", "decode")
            if isinstance(k := knobs.get(name), dict) and k.get("num_gpu_blocks") is not None}
    said = {name: _blocks_given(k, "") for name, k in each.items()}
    if len(set(said.values())) == 1 and len(said) == 2:
        return f" (the decode pool's; each pool's {said['decode']})"
    return (" (the decode pool's" + (f": {said['decode']}" if "decode" in said else "")
            + (f"; the prefill pool's {said['prefill']}" if "prefill" in said else "") + ")")


def _arrivals(s: Mapping[str, Any], num: int) -> str:
    """:func:`arrivals_said` of the summary's ``offered_window_s``."""
    return arrivals_said(num, s.get("offered_window_s"))


def arrivals_said(num: int, window: Any, note: str = "") -> str:
    """`` over SPAN (RATE req/s: N - 1 gaps between arrivals)``: ``num`` arrivals' span, first
    to last (a summary's ``offered_window_s``, a workload's ``span_s``), and their mean rate
    (:func:`~kvbudget.workloads.arrival_rate.mean_arrival_rate`, as ``trace stats`` has it)
    with the gaps it is over, the span printed to the decimals that give it (``span_said``:
    "80 requests over 9.9 s (7.96 req/s)" had a reader divide 80 / 9.9 = 8.08); ``note``
    after the rate: a trace's times read in the wrong unit show here (a day where a minute was
    meant). ``""`` below two arrivals or without a span."""
    if not isinstance(window, int | float) or not window > 0 or num < 2:
        return ""
    unit_s, unit = _span_unit(window)
    return (f" over {span_said(num, window, unit_s)} {unit} "
            f"({mean_arrival_rate(num, window) or 0:.3g} req/s{note}: {gaps_said(num)})")


def rate_said(rate: float, window: float, note: str = "") -> str:
    """`` over SPAN (RATE req/s NOTE, the mean of the draws' rates ...)``: :func:`arrivals_said`'s
    words for a mean span and a mean rate given (a study's over its replications' draws, each
    draw's rate over its own gaps between arrivals: not the mean count over the mean span)."""
    unit_s, unit = _span_unit(window)
    return (f" over {window / unit_s:,.1f} {unit} ({rate:.3g} req/s{note}, the mean of the "
            "draws' rates, each over its gaps between arrivals)")


def _span_unit(window: float) -> tuple[float, str]:
    """The unit a span of ``window`` seconds is said in: seconds, minutes or hours."""
    return (1.0, "s") if window < 120 else (60.0, "min") if window < 7200 else (3600.0, "h")


def _closed_loop(users: Any) -> str:
    """The closed loop that sent the workload in place of its arrival times."""
    if not isinstance(users, dict):
        return ""
    return (f", sent in closed loop by {counted(users.get('num_users') or 0, 'user')} (think time "
            f"{users.get('think_time_s', 0):g} s, {users.get('think_distribution')})")


def _cost_line(s: dict[str, Any]) -> list[str]:
    """The step times a run took from a cost-model file (``--cost-model``, a scenario's
    ``cost_model``) and the fixed front-end time per request it added; none for the default
    step model."""
    cost = s.get("cost_model") or {}
    overhead = float(s.get("frontend_overhead_s") or 0.0)
    if cost.get("source", "defaults") == "defaults" and overhead == 0:
        return []
    fe = s.get("frontend") or {}
    return [cost_said(cost.get("kind"), cost.get("source"), overhead,
                      no_frontend=not any(fe.get(k) for k in FRONTEND_COSTS))]


def cost_said(kind: Any, source: Any, overhead_s: float, *, no_frontend: bool,
              path: Any = None, fitted_on: str | None = None, transfer: bool = False) -> str:
    """``step times: ...``: the cost-model file's step-time model (its ``kind`` and
    ``source``), named by ``path`` with what it was ``fitted_on`` where given (a study's
    line: a run's summary keeps neither), the fixed front-end time it adds to every request
    (``overhead_s``) or, where it adds none and nothing else does (``no_frontend``), that TTFT
    and E2E are the engine's alone; with ``transfer``, that runs on another target carry what
    the notes say. ``simulate``'s and the studies' line alike."""
    whose = "the file's" if path is None else "its"
    text = (f"step times: the cost-model file's {kind} model ({source})" if path is None else
            f"step times: the cost-model file {path}: its {kind} model ({source})"
            + (f", fitted on {fitted_on}" if fitted_on else ""))
    if overhead_s > 0:
        text += (f"; a fixed front-end time of {overhead_s * 1e3:.2f} ms per request ({whose} "
                 "frontend_overhead_s) added to every first token and finish")
    elif no_frontend:
        # a file fitted on engine-side times (--no-fit-overhead) stands for no API server
        text += (f"; no front-end time ({whose} frontend_overhead_s is 0, as a fit of "
                 "engine-side times writes it): TTFT and E2E are the engine's alone, without "
                 "an API server's (--set frontend=vllm-api-server adds vLLM's)")
    if transfer:
        text += ("; runs on another GPU, model, parallelism or KV cache carry what the notes "
                 "say (--cost-model-transfer)")
    return text


FRONTEND_COSTS = ("per_request_s", "per_prompt_token_s", "per_output_token_s", "post_decode_s")
"""The costs a run's ``frontend`` block adds to each request (:func:`frontend_said`)."""


def frontend_said(s: Mapping[str, Any]) -> str:
    """What a run's simulated times include beyond the engine's steps, from its summary: the
    API server's modelled cost (``frontend``: per request, per prompt and output token, at the
    end of the stream) and a calibrated ``frontend_overhead_s``. ``validate --records`` said
    "a front-end overhead of 0.0 ms per request" of a run whose first tokens carried the API
    server's 11.3 ms."""
    fe, overhead = s.get("frontend") or {}, float(s.get("frontend_overhead_s") or 0.0)
    said = []
    if any(fe.get(k) for k in FRONTEND_COSTS):
        said.append(
            f"the API server's modelled cost ({fe.get('name') or 'vllm-api-server'}: "
            f"{1e3 * float(fe.get('per_request_s') or 0):.2f} ms a request, "
            f"{1e6 * float(fe.get('per_prompt_token_s') or 0):.2f} us a prompt token and "
            f"{1e6 * float(fe.get('per_output_token_s') or 0):.1f} us an output token to each "
            f"first token and finish, {1e3 * float(fe.get('post_decode_s') or 0):.2f} ms more "
            "at the end of the stream)")
    if overhead > 0:
        said.append(f"a calibrated front-end overhead of {1e3 * overhead:.1f} ms a request")
    return ("simulated times include " + " and ".join(said) if said else
            "simulated times include no front-end cost (the engine's steps alone)")


def fill(text: str) -> str:
    """``text`` wrapped to :data:`WIDTH`, never inside a flag (``--no-fit-overhead``) nor a
    word longer than the width (a path, a URL)."""
    return textwrap.fill(text, WIDTH, subsequent_indent="  ", break_on_hyphens=False,
                         break_long_words=False)


def served_said(s: Mapping[str, Any], model: str | None = None, where: str | None = None
                ) -> str:
    """``MODEL on WHERE, engine E (whose defaults, its knobs), KV capacity N tokens (B
    blocks)``: what served a run, from its summary (or a study's planned one,
    :func:`kvbudget.studies.planned.planned_summary`), as ``simulate``'s ``simulated:`` line
    and the studies' first line both say it. ``model``, ``where``: said in place of the
    summary's (a study that varies them)."""
    cost = s.get("cost_model") or {}
    tp = int((s.get("engine_knobs") or cost).get("tensor_parallel_size") or 1)
    engine = (s.get("engine") or {}).get("engine", "")
    kv = s.get("kv_capacity_tokens")
    defaulted = s.get("defaulted") or ()
    if model is None:
        model = as_given(s.get("model"), cost.get("model"), "model" in defaulted)
    gpu = as_given(s.get("gpu"), cost.get("gpu"), "gpu" in defaulted)
    if where is None:
        where, knobs = _deployment(s, gpu, tp)
    else:
        knobs = s.get("engine_knobs") or {}
    blocks, size = s.get("num_gpu_blocks"), s.get("block_size")
    # one engine's blocks (a fleet's or pools' capacity is more than one cache's), where the
    # line does not say them as given (_capacity_whose)
    figures = s.get("engine") or {}
    one = figures.get("fleet") is None and figures.get("disaggregation") is None
    of_blocks = (f" ({int(blocks):,} blocks)" if one and isinstance(blocks, int)
                 and isinstance(size, int) and kv is not None and blocks * size == int(kv)
                 and knobs.get("num_gpu_blocks") is None else "")
    return (f"{model} on {where}, engine {engine} ({_defaults(s.get('engine_defaults'))} "
            f"for unset knobs{_caps(knobs)}{_assumed_knobs(s, knobs)})"
            + (f", KV capacity {int(kv):,} tokens{of_blocks}" if kv is not None else "")
            + _capacity_whose(s, where))


def _defaults(name: Any) -> str:
    """Whose defaults filled the knobs left unset: ``vllm``'s are vLLM's release
    :data:`~kvbudget.results.vllm_releases.SIMULATED_VLLM` (``perf/vllm_defaults.py``)."""
    return f"vLLM {SIMULATED_VLLM}'s defaults" if name == "vllm" else f"{name}'s defaults"


def _shown_path(source: Any) -> str:
    """A trace's file by its name: a scenario resolves the path to an absolute one, which is
    this machine's and not what the user typed (``summary.json``'s ``workload.mix.source``
    keeps it whole)."""
    return os.path.basename(str(source)) or str(source)


def mix_said(name: Any, mix: Mapping[str, Any], seed: Any = None) -> str:
    """``workload W: FROM; TIER N (S%): prompt ..., output ..., max_tokens ...; ...``: what a
    run's or a study's workload holds (:func:`kvbudget.workloads.mix.mix_of`): a synthetic
    one's arrivals and length distributions as its spec gives them, drawn at ``seed``; a
    trace's file and format and its tiers' mean lengths read; each tier's requests, their share
    and the ``max_tokens`` they declare."""
    gen, tiers = mix.get("generator"), mix.get("tiers") or ()
    total = sum(int(t["num_requests"]) for t in tiers) or 1
    if isinstance(gen, Mapping):
        head = f"synthetic, seed {seed}: arrival {gen.get('arrival')}"
        shapes = gen.get("tiers") or {}
    else:
        head = ", ".join(f"{k} {_shown_path(mix[k]) if k == 'source' else mix[k]}"
                         for k in ("source", "format") if mix.get(k))
        shapes = {}

    def tier(t: Mapping[str, Any]) -> str:
        shape = shapes.get(t["name"]) or {}
        lengths = [f"{k} {shape[k]}" for k in ("prompt", "output", "pairs") if k in shape] or [
            f"prompt mean {float(t['prompt_mean']):,.0f} tokens",
            f"output mean {float(t['output_mean']):,.0f}"]
        low, high = t["max_tokens"]
        return (f"{t['name']} {int(t['num_requests']):,} "
                f"({100 * int(t['num_requests']) / total:.0f}%): " + ", ".join(lengths)
                + f", max_tokens {low:,}" + (f" to {high:,}" if high != low else ""))

    return f"workload {name}: " + "; ".join(([head] if head else []) + [tier(t) for t in tiers])


def setting_lines(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """What the runs simulated (model, GPU, engine, KV capacity, workload), what loading the
    workload's file warned of or assumed (``workload.warnings`` / ``.assumed``), what the run
    warned of (``warnings``: a draft model larger than its target), each line once
    however many runs share it, and what each run assumed that changed its answer
    (``assumed``: the default tiers' limit where it refused requests), once with the policies
    of the runs that assumed it. A live replay's or
    ``serve``'s summary (``executor``) simulated nothing: no line for it but what the server
    did that changes its answer (``said``: outputs cut at the context) and what it assumed
    (``assumed``: KV in use it could not read, held as 0)."""
    lines: list[str] = []
    assumed: dict[str, list[str]] = {}  # a run's assumption, once, with the runs that made it
    slots: dict[str, int] = {}
    for s in summaries:
        if s.get("executor") is not None:
            lines += [line for line in (*map(fill, s.get("said", ())), *(
                fill(f"assumed: {t}") for t in s.get("assumed", ()))) if line not in lines]
            continue
        w = s.get("workload") or {}
        said = [fill(
            f"simulated: {served_said(s)}"
            + (f"; workload {w.get('name')}: {counted(int(w.get('num_requests', 0)), 'request')}"
               + ("" if s.get("closed_loop") else _arrivals(s, int(w.get("num_requests", 0))))
               if w else "")  # a summary written before a staged replay's said it
            + _closed_loop(s.get("closed_loop")))]
        if isinstance(w.get("mix"), Mapping):
            said.append(fill(mix_said(w.get("name"), w["mix"], s.get("seed"))))
        said += [fill(line) for line in _cost_line(s)]
        said += [fill(f"{label}: {text}")
                 for key, label in (("warnings", "warning"), ("assumed", "assumed"))
                 for text in w.get(key, ())]
        said += [fill(f"warning: {text}") for text in s.get("warnings", ())]
        lines += [line for line in said if line not in lines]
        for text in s.get("assumed", ()):
            if text not in assumed:
                assumed[text], slots[text] = [], len(lines)
                lines.append("")
            assumed[text].append(str(s.get("policy", "")))
    for text, policies in assumed.items():
        lines[slots[text]] = fill(f"assumed: {', '.join(dict.fromkeys(policies))}: {text}")
    return lines
