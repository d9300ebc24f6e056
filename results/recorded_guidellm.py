"""GuideLLM benchmark reports, 0.1 to 0.8: JSON and YAML (the same document), CSV refused.

0.1 (``GuidanceReport``, one level deeper) is read as 0.2 (:func:`_from_v0_1`). Two schemas
(github.com/vllm-project/guidellm):

0.2-0.3 (``src/guidellm/benchmark/benchmark.py``, ``aggregator.py``)
    ``{"benchmarks": [...]}``; a benchmark's ``args.strategy`` (``type_`` and ``streams`` /
    ``rate`` / ``max_concurrency``), ``worker.backend_model``, ``request_totals`` (what its
    metrics counted), ``request_samples`` (null unless ``--output-sampling`` kept a sample),
    ``run_stats.requests_made`` (everything sent, warm-up and cool-down included) and
    ``requests.successful / errored / incomplete`` with ``prompt_tokens``,
    ``output_tokens``, ``start_time``, ``first_token_time``, ``end_time``. The aggregator drops
    the warm-up and cool-down requests (``warmup_number`` / ``cooldown_number``...) from the
    lists altogether (``aggregator.py``, ``add_result``): they cannot be simulated, and the
    notes say how many are missing.
0.4 and later (``src/guidellm/benchmark/schemas/``)
    ``{"metadata": {"guidellm_version": ...}, "benchmarks": [...]}`` (``metadata`` from 0.5);
    a benchmark's ``config.strategy``, ``config.sample_size`` (null: every request kept),
    ``scheduler_metrics.measure_start_time`` / ``measure_end_time`` and
    ``requests.successful / errored / incomplete`` with every request sent, warm-up and
    cool-down included: GuideLLM's metrics count only those with ``request_end_time >=
    measure_start`` and ``request_start_time <= measure_end``
    (``GenerativeRequestsAccumulator.get_within_range``); the other successful ones are read
    here with the status ``warmup`` or ``cooldown``: simulated (they loaded the server), left
    out of every measured statistic; an errored or incomplete one keeps its status, a note
    saying it was outside the window. Times: ``request_start_time``, ``info.timings.first_token_iteration``,
    ``request_end_time``; tokens ``input_metrics.text_tokens`` /
    ``output_metrics.text_tokens`` (``prompt_tokens`` / ``output_tokens`` in 0.4); an
    incomplete (cancelled) request may have null tokens: counted, never fatal. The request
    body (``request_args``, a JSON string, unless GuideLLM cleared it) holds ``max_tokens``
    and ``ignore_eos``.

Load mode per benchmark from its strategy: ``synchronous`` is a closed loop of 1,
``concurrent`` of ``streams``, ``throughput`` of its ``max_concurrency`` (where the report
records none, GuideLLM's default cap: :data:`DEFAULT_MAX_CONCURRENCY`); ``constant`` and
``poisson`` are open loops at ``rate`` capped at their ``max_concurrency`` (the same default
where none is recorded: a capped stage's requests are offered at their targeted start, see
:func:`_offered`).

The CSV report (``outputs/csv.py``) holds one row of aggregates per benchmark and no request:
it is refused with one line saying so.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints

from kvbudget.results.recorded_fields import (
    MAX_FILE_BYTES,
    MAX_MEASURED_S,
    FloatArray,
    cap_reached,
    dig,
    fewer_rows,
    finish_columns,
    first_number,
    load_json,
    max_tokens_note,
    number,
    peak_in_flight,
    time_limit_note,
    without_shared_times,
)
from kvbudget.results.recorded_guidellm_cut import cut_rule, cut_words, poll_lag_note
from kvbudget.results.recorded_guidellm_prefix import (
    SharedPrefix,
    body_key,
    cache_note,
    shared_prefix,
)
from kvbudget.results.recorded_guidellm_rampup import (
    clip_to_ramps,
    ramp_hold_s,
    ramped_stage,
    rampup_s,
)
from kvbudget.results.recorded_guidellm_synthetic import synthetic_max_tokens, synthetic_note
from kvbudget.results.recorded_guidellm_turns import (
    Turn,
    conversation_prefix,
    conversation_turn,
    requeue_delay_s,
    turn_links,
    with_history,
    workload_conversations,
)
from kvbudget.results.recorded_idle import closed_loop_idle_note
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.closed_loop import Conversations
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import CUT_SHORT, TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.text_files import read_text

KINDS = ("successful", "errored", "incomplete")
"""GuideLLM's request lists (``StatusBreakdown``), in the report's order."""


@dataclass
class _Columns:
    prompt: list[float] = field(default_factory=list)
    output: list[float] = field(default_factory=list)
    start: list[float] = field(default_factory=list)
    due: list[float] = field(default_factory=list)
    cap: list[int] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    end: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    max_tokens: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    side: list[str] = field(default_factory=list)
    """Where a request fell of its benchmark's measurement window: ``""`` inside, else the
    status a successful one takes (:func:`_add_request`)."""
    stage: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    prefix_key: list[str | None] = field(default_factory=list)
    turn: list[Turn] = field(default_factory=list)
    turn_delay: list[float] = field(default_factory=list)
    cached: list[float] = field(default_factory=list)
    ignore_eos: set[bool] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    num_counted_by_chunks: int = 0
    ramp_holds: dict[str, float] = field(default_factory=dict)


def load_report(path: Path) -> Any:
    """The report's document: JSON, or YAML for ``.yaml`` / ``.yml``; a CSV is refused."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        raise TraceError(path, csv_refusal(path))
    if suffix not in (".yaml", ".yml"):
        return load_json(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(path, "too large for a recording")
        text = read_text(path)
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else int(mark.line) + 1
        raise TraceError(path, f"not valid YAML ({getattr(exc, 'problem', exc)})",
                         line=line) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None
    _refuse_cut_yaml(path, doc, text)
    return doc


def _refuse_cut_yaml(path: Path, doc: Any, text: str) -> None:
    """Refuse a YAML report cut short at a line's end: still YAML, it read as a whole run with
    its last requests gone (the 0.8.1 fixture cut at 90% of its lines read 16 of its 20
    requests, and said nothing). GuideLLM writes its YAML with ``yaml.dump(model_dict)``, which
    sorts keys (guidellm 0.8.1 ``benchmark/schemas/report.py`` line 113; 0.2.1 and 0.3.1
    ``benchmark/output.py`` lines 161 and 171, 0.4.0 ``schemas/generative/report.py`` line
    76, 0.5.0-0.6.1 line 109), so a cut loses the keys last in that order; what each version
    writes last says whether it is there:

    - a benchmark's ``type_`` (0.2 to 0.8) comes after its ``requests``;
    - after it, 0.2-0.3's ``worker`` (``Benchmark.worker``, required), whose own last key is
      its ``type_`` (``GenerativeRequestsWorkerDescription``, 0.2.1 ``scheduler/worker.py``
      line 267), and 0.4+'s ``warmup_duration`` (a ``computed_field`` of every benchmark,
      0.4.0 ``schemas/generative/benchmark.py`` line 98);
    - 0.5-0.6 write ``metadata`` after ``args`` and the benchmarks, its ``version`` (always
      written: ``Literal[1]``, 0.5.0 ``schemas/generative/report.py`` line 37) last of it;
      their ``args`` hold ``over_saturation`` (0.5.0 ``schemas/generative/entrypoints.py`` line
      286), which 0.4's do not; 0.7+ write ``metadata`` (version 2) and no ``args``."""
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks or not isinstance(benchmarks[-1], dict):
        return
    last, at = benchmarks[-1], f"benchmarks[{len(benchmarks) - 1}]"
    worker = last.get("worker")
    args = doc.get("args")
    metadata = doc.get("metadata")
    if "type_" not in last:
        cut = (f"{at} ends before its 'type_', which GuideLLM's YAML (its keys in alphabetical "
               "order) writes after its requests")
    elif "run_stats" in last and not (isinstance(worker, dict) and "type_" in worker):
        cut = (f"{at} ends before its worker's 'type_', which GuideLLM 0.2-0.3 write last of a "
               "benchmark")
    elif "scheduler_metrics" in last and "warmup_duration" not in last:
        cut = (f"{at} ends before its 'warmup_duration', which GuideLLM 0.4 and later write "
               "after its 'type_'")
    elif "scheduler_metrics" in last and not {"args", "metadata"} & set(doc):
        # 0.4+ (the layout with scheduler_metrics) writes 'args' before its benchmarks
        # (0.4-0.6) or 'metadata' after them (0.5+): one with neither was cut after them
        cut = ("ends after its benchmarks, without the 'metadata' GuideLLM writes after them "
               "(its version)")
    elif isinstance(args, dict) and "over_saturation" in args and metadata is None:
        cut = ("ends after its benchmarks, without the 'metadata' GuideLLM 0.5-0.6 write after "
               "them (their args hold over_saturation)")
    elif isinstance(metadata, dict) and "version" not in metadata:
        cut = "its 'metadata' ends before its 'version', which GuideLLM writes last of it"
    else:
        return
    raise TraceError(path, f"{cut}: {CUT_SHORT}", line=len(text.splitlines()))


def csv_refusal(path: Path) -> str:
    """Why a GuideLLM CSV report cannot be read: it has aggregates, no requests (the CSV
    names no GuideLLM version: the version is in the JSON report's ``metadata``)."""
    return ("is a GuideLLM CSV report (its version is not in the CSV): one row of aggregates "
            "per benchmark and no per-request rows (start, first-token and end times, token "
            "counts); pass the JSON or YAML report of the same run (--output kind=json or "
            "kind=yaml; before 0.7: --outputs benchmarks.json or --output-path benchmarks.json)")


def _version(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata")
    version = dig(meta, "guidellm_version") if isinstance(meta, dict) else None
    return str(version) if isinstance(version, str | int | float) else ""


def _strategy(bench: Mapping[str, Any]) -> dict[str, Any]:
    strategy = dig(bench, "config", "strategy") or dig(bench, "args", "strategy") or {}
    return strategy if isinstance(strategy, dict) else {}


def _positive(path: Path, value: Any, where: str) -> float | None:
    x = number(value, path, where)
    if math.isnan(x):
        return None
    if x <= 0:
        raise TraceError(path, f"must be > 0, got {value!r}", field=where)
    return x


DEFAULT_MAX_CONCURRENCY = {"0.7": 10240, "": 512}
"""GuideLLM's ``settings.max_concurrency``: how many requests a stage whose strategy names no
``max_concurrency`` keeps in flight (512 in 0.2-0.6: ``config.py`` / ``settings.py``; ``1024 *
10`` from 0.7; ``GUIDELLM__MAX_CONCURRENCY`` overrides it). A ``throughput`` benchmark sends
every request at once up to that many in flight (0.2-0.3 ``ThroughputStrategy.
processing_requests_limit``, 0.4+ ``WorkerProcessGroup``): a closed loop of that many users.
``constant`` and ``poisson`` inherit the same limit (0.2-0.3 ``AsyncConstantStrategy`` /
``AsyncPoissonStrategy`` subclass ``ThroughputStrategy``). Unlike 0.1 (its scheduler waits
while the cap less one are in flight: :data:`V0_1_CAP`), 0.2-0.3's worker processes each hold
an ``asyncio.Semaphore`` of their share and the shares sum to the cap: exactly that many in
flight at most (v0.2.1 / v0.3.1 ``scheduler/scheduler.py`` ``_start_processes``,
``worker.py`` ``process_loop_asynchronous``; :func:`_split_note` says what pooling them
assumes)."""


def _version_tuple(version: str) -> tuple[int, ...]:
    """``0.5.4`` as ``(0, 5, 4)``, up to the first part that is not a number (``0.8.0.dev18``:
    ``(0, 8, 0)``); ``()`` for an unknown version."""
    parts: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def sample_size(bench: Mapping[str, Any], version: str) -> int | None:
    """How many requests of each status a 0.4+ report kept (``--sample-size``, 0.7+
    ``config.sample_size``; ``--sample-requests``, 0.4-0.6 ``config.sample_requests``), None
    when it kept every one. 0.4.0 to 0.5.3 record ``sample_requests`` but never hand it to the
    accumulators that sample (their ``GenerativeRequestsAccumulator`` default, None: every
    request kept); 0.5.4 wires it (vllm-project/guidellm d6fb4b0f "Fix the guidellm benchmark
    --sample-requests command line option": benchmark/schemas/generative/accumulator.py sets
    ``completed``, ``errored`` and ``incomplete``'s ``sample_requests``)."""
    size = dig(bench, "config", "sample_size")
    if size is None and _version_tuple(version) >= (0, 5, 4):
        size = dig(bench, "config", "sample_requests")
    return size if isinstance(size, int) and not isinstance(size, bool) else None


def default_max_concurrency(version: str) -> int:
    """GuideLLM's default cap on requests in flight for its ``version`` (unknown: 0.2-0.3,
    which record no version)."""
    parts = version.split(".")
    newer = len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() and \
        (int(parts[0]), int(parts[1])) >= (0, 7)
    return DEFAULT_MAX_CONCURRENCY["0.7" if newer else ""]


def _peak_concurrency(bench: Mapping[str, Any]) -> int | None:
    """The most requests the report measured in flight at once (``metrics.request_concurrency``),
    None when it does not say."""
    peak = dig(bench, "metrics", "request_concurrency", "total", "max")
    if peak is None:
        peak = dig(bench, "metrics", "request_concurrency", "successful", "max")
    if isinstance(peak, int | float) and not isinstance(peak, bool) and math.isfinite(peak) \
            and peak >= 1:
        return int(peak)
    return None


def _unrecorded_cap(bench: Mapping[str, Any], version: str) -> tuple[int, str]:
    """The cap GuideLLM held a stage to when its report does not record one: its default
    (:data:`DEFAULT_MAX_CONCURRENCY`), or more where the report measured more in flight (the
    default was overridden); and why, for a note."""
    default = default_max_concurrency(version)
    peak = _peak_concurrency(bench)
    if peak is not None and peak > default:
        return peak, (f"the report records no max_concurrency; it measured {peak} requests in "
                      f"flight, more than GuideLLM's default {default} "
                      "(GUIDELLM__MAX_CONCURRENCY was set)")
    return default, (f"the report records no max_concurrency: GuideLLM {version or '0.2-0.3'} "
                     f"holds a benchmark to its setting max_concurrency, {default} unless "
                     "GUIDELLM__MAX_CONCURRENCY was set"
                     + (f" (the report measured at most {peak} in flight)" if peak else ""))


def _worker_processes(bench: Mapping[str, Any]) -> int:
    """How many GuideLLM worker processes sent a benchmark's requests: the distinct process
    ids its requests name (0.2-0.3 ``scheduler_info.process_id``, 0.4+
    ``info.scheduler_process_id``; 0 where none does: 0.1)."""
    requests = bench.get("requests")
    ids = [dig(r, "scheduler_info", "process_id") if "scheduler_info" in r
           else dig(r, "info", "scheduler_process_id")
           for k, v in (requests.items() if isinstance(requests, dict) else ())
           if k in KINDS and isinstance(v, list) for r in v if isinstance(r, dict)]
    return len({i for i in ids if isinstance(i, int) and not isinstance(i, bool)})


def _split_note(bench: Mapping[str, Any], index: int, cap: int) -> str | None:
    """Where a benchmark's cap could bind and several processes sent it: GuideLLM (0.2 on)
    splits the cap among its worker processes, each with its own semaphore of ``cap //
    processes`` (one more for the first ``cap % processes``), the shares summing to the cap
    (v0.2.1 and v0.3.1 ``scheduler/scheduler.py`` ``_start_processes``, ``worker.py``
    ``process_loop_asynchronous``; 0.3 also deals each process every n-th start time; v0.4.0
    to v0.7.3 ``scheduler/worker_group.py`` ``per_proc_max_conc``, ``worker.py``
    ``_process_requests_loop``): no
    more than ``cap`` in flight, but a request waited for its own process's share even where
    another had room. The simulation pools the cap: said only where a process's requests in
    flight reached its share (:func:`_process_peaks`): where none did, none waited for it
    (GuideLLM 0.3 at a constant 10 req/s, at most 33 in flight against about 34 a process)."""
    num = _worker_processes(bench)
    if num < 2 or _listed(bench) <= cap:
        return None
    peaks = _process_peaks(bench)
    full = [pid for k, pid in enumerate(sorted(peaks))
            if peaks[pid] >= cap // num + (1 if k < cap % num else 0)]
    if not full:  # no process ever held its share in flight: none waited for it
        return None
    return (f"{index}: GuideLLM split its cap of {cap} in flight among the {num} worker "
            f"processes the requests name, about {cap // num} each, and "
            f"{len(full)} of them held their share in flight at times (up to "
            f"{max(peaks[p] for p in full)}), when a request waited for its own process's "
            f"share; replayed as one pool of {cap} (assumed: requests may start sooner than "
            "they did where the load was uneven across processes)")


def _process_peaks(bench: Mapping[str, Any]) -> dict[int, int]:
    """Each worker process's most requests in flight at once, by the process id
    :func:`_worker_processes` reads (GuideLLM deals the first ``cap % processes`` of them, in
    order, one slot more: v0.8.1 ``scheduler/worker_group.py``, lines 241-245), from its
    requests' starts and ends (0.2-0.3 ``scheduler_info.request_start`` / ``request_end``, 0.4+
    ``info.timings``; a request with no end in flight to the last)."""
    requests = bench.get("requests")
    times: dict[int, list[tuple[float, float]]] = {}
    for key, rows in (requests.items() if isinstance(requests, dict) else ()):
        for r in rows if key in KINDS and isinstance(rows, list) else ():
            old = isinstance(r, dict) and "scheduler_info" in r
            info = dig(r, "scheduler_info") if old else dig(r, "info", "timings")
            pid = dig(r, "scheduler_info", "process_id") if old else \
                dig(r, "info", "scheduler_process_id")
            start, end = (info.get("request_start"), info.get("request_end")) \
                if isinstance(info, dict) else (None, None)
            if isinstance(pid, int) and not isinstance(pid, bool) and \
                    isinstance(start, int | float) and not isinstance(start, bool):
                stop = float(end) if isinstance(end, int | float) and \
                    not isinstance(end, bool) else math.inf
                times.setdefault(pid, []).append((float(start), stop))
    peaks = {}
    for pid, spans in times.items():
        sent = np.array([a for a, _ in spans])
        peaks[pid] = peak_in_flight(sent, np.array([b for _, b in spans]))
    return peaks


def _listed(bench: Mapping[str, Any]) -> int:
    requests = bench.get("requests")
    if not isinstance(requests, dict):
        return 0
    return sum(len(v) for k, v in requests.items() if k in KINDS and isinstance(v, list))


def stage_of(path: Path, bench: Mapping[str, Any], index: int, version: str = "",
             notes: list[str] | None = None) -> RecordedStage:
    """A benchmark's load stage, from its strategy (``notes`` gets what was assumed)."""
    strategy = _strategy(bench)
    where = f"benchmarks[{index}].strategy"
    kind = str(strategy.get("type_") or strategy.get("type") or "")
    rate = _positive(path, strategy.get("rate"), f"{where}.rate")
    conc_f = _positive(path, strategy.get("streams") if kind == "concurrent"
                       else strategy.get("max_concurrency"), f"{where}.max_concurrency")
    conc = None if conc_f is None else int(conc_f)
    if kind == "synchronous":
        return RecordedStage(f"{index}: synchronous", "closed", None, 1)
    said = [] if notes is None else notes
    if kind == "trace":
        said.append(_trace_said(index, strategy))
        return RecordedStage(f"{index}: trace replay", "open", None, None)
    if kind in ("throughput", "constant", "poisson"):
        split = _split_note(bench, index, conc or _unrecorded_cap(bench, version)[0])
        said.extend([split] if split else [])
    if kind in ("concurrent", "throughput") and conc is not None:
        if rampup_s(strategy) > 0:
            stage, note = ramped_stage(f"{index}: {kind} x{conc}", kind, conc,
                                       rampup_s(strategy))
            said.append(note)
            return stage
        return RecordedStage(f"{index}: {kind} x{conc}", "closed", None, conc)
    if kind == "throughput":
        cap, why = _unrecorded_cap(bench, version)
        said.append(f"{index}: throughput: {why}: replayed as a closed loop of {cap} users "
                    "(assumed)")
        return RecordedStage(f"{index}: throughput x{cap}", "closed", None, cap)
    if kind in ("constant", "poisson") and rate is not None:
        if conc is None:
            conc, why = _unrecorded_cap(bench, version)
            if _listed(bench) > conc:  # the cap could bind: say it
                said.append(f"{index}: {kind}: {why}: replayed at most {conc} in flight "
                            "(assumed)")
        return RecordedStage(f"{index}: {kind} {rate:g} req/s x{conc}", "capped", rate, conc)
    return RecordedStage(f"{index}: {kind or 'benchmark'}", "unknown", None, None)


def _trace_said(index: int, strategy: Mapping[str, Any]) -> str:
    """The note of a benchmark of GuideLLM 0.8's ``replay`` profile (its strategy ``trace``:
    ``scheduler/strategies.py`` ``TraceReplayStrategy``), which sends each request at its
    trace's ``relative_timestamp`` times ``time_scale`` from the start; with ``schedule_turn``
    ``idle_gap`` (its default) a conversation's later request keeps its trace's idle gap after
    the one before it actually ended."""
    scale = strategy.get("time_scale")
    scaled = (f" times its time_scale {scale:g}" if isinstance(scale, int | float)
              and not isinstance(scale, bool) and scale != 1 else "")
    turn = strategy.get("schedule_turn")
    return (f"{index}: trace: GuideLLM's replay profile sent each request at its trace's "
            f"timestamp{scaled} (schedule_turn {turn or 'not recorded'}), not at a rate: "
            "replayed as an open loop at the recorded sends")


def _window(path: Path, bench: Mapping[str, Any], b: int) -> tuple[float, float] | None:
    """GuideLLM 0.4+'s measurement window (``scheduler_metrics``), None for 0.2-0.3."""
    metrics = bench.get("scheduler_metrics")
    if not isinstance(metrics, dict):
        return None
    start = number(metrics.get("measure_start_time"), path,
                   f"benchmarks[{b}].scheduler_metrics.measure_start_time")
    end = number(metrics.get("measure_end_time"), path,
                 f"benchmarks[{b}].scheduler_metrics.measure_end_time")
    if math.isnan(start) or math.isnan(end):
        return None
    return start, end


def _refuse_before_start(path: Path, bench: Mapping[str, Any], b: int) -> None:
    """Refuse a request sent, or due, before its benchmark began: GuideLLM 0.4+ records the
    run's start (``scheduler_metrics.start_time``, "Unix timestamp when the benchmark run
    started", ``benchmark/schemas/metrics.py``; the scheduler's ``start_time``, from which its
    strategies count every targeted start, ``scheduler/strategies.py``
    ``get_processes_start_time``), on the clock its ``request_start_time`` and
    ``info.timings.targeted_start`` are on (``time.time()``). One before it was read as sent
    before the run, its arrival moved ahead of every other request's."""
    begun = dig(bench, "scheduler_metrics", "start_time")
    if not isinstance(begun, int | float) or isinstance(begun, bool) or not math.isfinite(begun):
        return  # 0.2-0.3: no run start recorded (run_stats.start_time is the first send's)
    for kind in KINDS:
        rows = dig(bench, "requests", kind)
        for r, req in enumerate(rows if isinstance(rows, list) else []):
            for name, value in (("request_start_time", dig(req, "request_start_time")),
                                ("info.timings.targeted_start",
                                 dig(req, "info", "timings", "targeted_start"))):
                if (isinstance(value, int | float) and not isinstance(value, bool)
                        and value < begun):
                    raise TraceError(path, f"{value:.10g} is {begun - value:.3g} s before the "
                                     "benchmark began (scheduler_metrics.start_time "
                                     f"{begun:.10g}): GuideLLM sends no request before its "
                                     "run starts", field=f"benchmarks[{b}].requests.{kind}[{r}]"
                                     f".{name}")


def _request_body(req: Mapping[str, Any]) -> dict[str, Any]:
    """The request body GuideLLM sent: ``request_args`` is JSON text in 0.5+ and a Python
    ``repr`` of a dict in 0.4 (``{'method': None, ..., 'body': {...}}``)."""
    args = req.get("request_args")
    if isinstance(args, str) and len(args) < (1 << 20):
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            try:
                args = ast.literal_eval(args)
            except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
                return {}
    body = dig(args, "body")
    return body if isinstance(body, dict) else {}


TIMING_KEYS = ("request_start_time", "start_time", "request_end_time", "end_time",
               "first_token_time", "info", "scheduler_info")
"""Where GuideLLM (0.1 to 0.8) keeps a request's times: a request with none of them was not
written by GuideLLM."""


def _look_alike(req: Mapping[str, Any]) -> str | None:
    """Why a report shaped like GuideLLM's (``benchmarks[].requests.successful``) is refused
    when its requests keep none of GuideLLM's times: another client wrote it (e.g. a load
    script that writes "a JSON file shaped like GuideLLM's output", its requests only
    ``prompt_tokens``, ``output_tokens``, ``ttft_ms``, ``latency_ms``), and no request says
    when it was sent. None for a request that has one of them."""
    if any(key in req for key in TIMING_KEYS):
        return None
    keys = ", ".join(sorted(str(k) for k in req)[:8]) or "nothing"
    return ("is shaped like a GuideLLM report, but its requests keep "
            f"{keys} and none of GuideLLM's times (request_start_time, info.timings): not one "
            "GuideLLM wrote (or cut down without them); no request says when it was sent, so "
            "its load cannot be replayed; write each "
            "request's send time, prompt and output tokens, TTFT and E2E as the generic "
            "records format (arrival_s, prompt_tokens, output_tokens, ttft_s, e2e_s; "
            "docs/recordings.md)")


def _no_cooldown(bench: Mapping[str, Any]) -> bool:
    """A GuideLLM 0.7+ benchmark run with no cool-down: ``config.cooldown`` with neither a
    ``percent`` nor a ``value``, and no ``cooldown_duration``."""
    cooldown = dig(bench, "config", "cooldown")
    return ("cooldown_duration" in bench and not bench.get("cooldown_duration")
            and isinstance(cooldown, dict) and cooldown.get("percent") is None
            and cooldown.get("value") is None)


def _after_window_said(num: int) -> str:
    """The note of ``num`` requests sent after the measurement window of a benchmark that set
    no cool-down."""
    return (f"{counted(num, 'request')} sent after GuideLLM's measurement window closed though "
            "their benchmark set no cool-down: GuideLLM 0.8 closes the window of such a "
            "benchmark where its scheduler reported it stopped (scheduler_metrics."
            "measure_end_time; benchmark/schemas/accumulator.py, update_estimate: measure_end "
            "is request_end, progress.stop_time), which came before they were sent: simulated "
            "(they loaded the server) and left out of the measured statistics, as GuideLLM's "
            "own metrics leave them out (its metrics.request_totals count only the others), "
            "not cool-down requests")


def _failed_outside_said(status: list[str], side: list[str], counts: dict[str, int]) -> str:
    """The note of the errored and incomplete requests outside their measurement windows
    (``side``: each request's, :attr:`_Columns.side`), counted into ``counts``
    (``num_errored_outside_window``...); ``""`` where there are none."""
    sides = {"warmup": "warm-up", "cooldown": "cool-down", "after_window": "after the window",
             "after_limit": "after the time limit"}
    words = []
    for kind in ("errored", "incomplete"):
        found = [sides[w] for s, w in zip(status, side, strict=True) if s == kind and w]
        if found:
            counts[f"num_{kind}_outside_window"] = len(found)
            where = ", ".join(f"{found.count(w)} {w}" for w in dict.fromkeys(found))
            words.append(f"{len(found)} {kind} ({where})")
    if not words:
        return ""
    return (f"requests sent outside GuideLLM's measurement window that did not succeed keep "
            f"their status: {' and '.join(words)}; they are counted among the requests the "
            "recording shows not completed (as GuideLLM's scheduler_metrics.requests_made "
            "counts them; its metrics.request_totals leave them out), not among the warm-up "
            "or cool-down requests")


def _window_notes(status: list[str], side: list[str], counts: dict[str, int]) -> list[str]:
    """Count (into ``counts``) and say the requests outside GuideLLM's measurement windows
    (``status`` and ``side`` in workload order): warm-up, cool-down, those sent after the
    window of a benchmark that set no cool-down (``after_window``) and those sent after a time
    limit, the successful ones by their status, the errored and incomplete ones by ``side``."""
    notes = []
    counts["num_warmup"] = status.count("warmup")
    outside = counts["num_after_window"] = status.count("after_window")
    counts["num_cooldown"] = status.count("cooldown")
    if counts["num_warmup"] or counts["num_cooldown"]:
        notes.append(f"{counts['num_warmup']} warm-up and {counts['num_cooldown']} cool-down "
                     "requests simulated (they loaded the server) and left out of the measured "
                     "statistics, as GuideLLM does")
    if outside:
        notes.append(_after_window_said(outside))
    num_after = counts["num_after_limit"] = status.count("after_limit")
    if num_after:
        notes.append(f"{num_after} requests GuideLLM's workers sent after its time limit (each "
                     "queued before it): left out of the measured statistics, as GuideLLM "
                     "leaves them out; the time-limited replay sends nothing after the limit, "
                     "so the load they added to the requests still running then is not "
                     "simulated")
    failed = _failed_outside_said(status, side, counts)
    return [*notes, failed] if failed else notes


def _add_request(path: Path, cols: _Columns, req: Any, where: str, kind: str,
                 stage: RecordedStage, window: tuple[float, float] | None,
                 after: str = "cooldown") -> bool:
    """Append one request; False when it cannot be simulated (no prompt length). ``after``:
    the status of a request started after the measurement window (``after_limit`` where the
    window's end is a time limit's, ``after_window`` where the benchmark set no cool-down, else
    ``cooldown``)."""
    if not isinstance(req, dict):
        raise TraceError(path, "must be an object", field=where)
    timings = dig(req, "info", "timings") or dig(req, "scheduler_info") or {}
    if not isinstance(timings, dict):
        raise TraceError(path, "must be an object", field=f"{where}.info.timings")
    t0 = first_number(path, None, (f"{where}.request_start_time", req.get("request_start_time")),
                      (f"{where}.start_time", req.get("start_time")),
                      (f"{where}.info.timings.request_start", timings.get("request_start")))
    t_end = first_number(path, None, (f"{where}.request_end_time", req.get("request_end_time")),
                         (f"{where}.end_time", req.get("end_time")),
                         (f"{where}.info.timings.request_end", timings.get("request_end")))
    t_first = first_number(path, None,
                           (f"{where}.first_token_time", req.get("first_token_time")),
                           (f"{where}.info.timings.first_token_iteration",
                            timings.get("first_token_iteration")))
    p = first_number(path, None, (f"{where}.prompt_tokens", req.get("prompt_tokens")),
                     (f"{where}.input_metrics.text_tokens",
                      dig(req, "input_metrics", "text_tokens")),
                     (f"{where}.input_metrics.total_tokens",
                      dig(req, "input_metrics", "total_tokens")))
    o = first_number(path, None, (f"{where}.output_tokens", req.get("output_tokens")),
                     (f"{where}.output_metrics.text_tokens",
                      dig(req, "output_metrics", "text_tokens")),
                     (f"{where}.output_metrics.total_tokens",
                      dig(req, "output_metrics", "total_tokens")))
    if kind == "successful" and (math.isnan(t0) or math.isnan(p)):
        field_ = "request_start_time" if math.isnan(t0) else "prompt_tokens"
        said = _look_alike(req)  # the whole file's, so said of the file, as other refusals
        if said:
            raise TraceError(path, said)
        raise TraceError(path, f"a successful request without {field_}",
                         field=f"{where}.{field_}")
    if math.isnan(t0) or math.isnan(p):
        return False  # a cancelled request GuideLLM knows nothing of: counted by the caller
    side = ""
    if window is not None and not math.isnan(t_end):
        w0, w1 = window
        side = "warmup" if t_end < w0 else after if t0 > w1 else ""
    # an errored (or incomplete) request outside the window keeps its status, as genai-bench's
    # reader keeps a failed one (recorded_genai_bench._phases): the window is said in a note
    status = kind if kind != "successful" else side or "completed"
    body = _request_body(req)
    mt = body.get("max_tokens") or body.get("max_completion_tokens")
    eos = body.get("ignore_eos")
    if isinstance(eos, bool):
        cols.ignore_eos.add(eos)
    if isinstance(body.get("model"), str) and body["model"]:
        cols.models.add(body["model"])
    if math.isnan(o) and kind != "successful":
        o = _streamed_chunks(path, timings, where)
        if o > 0:
            cols.num_counted_by_chunks += 1
    cols.prompt.append(p)
    cols.output.append(o if not math.isnan(o) else 0.0)
    cols.start.append(t0)
    cols.due.append(first_number(
        path, None, (f"{where}.info.timings.targeted_start", timings.get("targeted_start")),
        (f"{where}.scheduler_info.targeted_start_time", timings.get("targeted_start_time"))))
    cols.cap.append((stage.max_concurrency or 0) if stage.load == "capped" else 0)
    cols.first.append(t_first)
    cols.end.append(t_end)
    cols.itl.append(number(req.get("inter_token_latency_ms"), path,
                           f"{where}.inter_token_latency_ms") / 1000.0)
    cols.max_tokens.append(number(mt, path, f"{where}.request_args.body.max_tokens"))
    cols.status.append(status)
    cols.side.append(side)
    cols.stage.append(stage.label)
    cols.where.append(where)
    cols.prefix_key.append(body_key(body))
    cols.turn.append(conversation_turn(req))
    cols.turn_delay.append(requeue_delay_s(path, req, where))
    cols.cached.append(number(req.get("cached_tokens"), path, f"{where}.cached_tokens"))
    return True


def _streamed_chunks(path: Path, timings: Mapping[str, Any], where: str) -> float:
    """The output chunks a cut request streamed (``info.timings.token_iterations``), NaN when
    the report has none. GuideLLM takes a request's output count from the server's final
    ``usage``, which a stream cut short never sends (0.5.0 backends/openai.py: a cancelled
    request yields ``compile_streaming`` with no usage), but counts the chunks that carried
    text as they come; vLLM streams one token a chunk, so the count is a lower bound."""
    chunks = number(timings.get("token_iterations"), path,
                     f"{where}.info.timings.token_iterations")
    return chunks if chunks > 0 else math.nan


def _counts_table(value: Any) -> Mapping[str, Any]:
    """A benchmark's request counts by kind (``request_totals``, ``requests_made``); empty
    where the report has none or something else there (its counts then unknown, as a count
    that is not a whole number is)."""
    return value if isinstance(value, dict) else {}


def _sample_note(bench: Mapping[str, Any], label: str, listed: Mapping[str, int],
                 version: str) -> str | None:
    """A note when the report kept a sample of its requests (and only then)."""
    samples = bench.get("request_samples")
    if isinstance(samples, dict):  # 0.2-0.3: --output-sampling
        totals = _counts_table(bench.get("request_totals"))
        kept = sum(listed.values())
        total = sum(int(v) for k, v in totals.items() if k in KINDS and isinstance(v, int))
    elif sample_size(bench, version) is not None:  # 0.4+: --sample-size, --sample-requests
        made = _counts_table(dig(bench, "scheduler_metrics", "requests_made"))
        kept = sum(listed.values())
        total = sum(int(v) for k, v in made.items() if k in KINDS and isinstance(v, int))
    else:  # every request kept: a report listing fewer is refused (_refuse_cut)
        return None
    if total <= kept:
        return None
    return (f"{label}: the report kept a sample of {kept} of its {total} requests: the "
            "simulation offers only those, a lighter load than the server saw; run GuideLLM "
            "without sampling so that it keeps every request")


def _refuse_cut(path: Path, benchmarks: list[Any], b: int, version: str,
                listed: Mapping[str, int]) -> None:
    """Refuse a benchmark listing fewer requests of a status than its report counts, where the
    report kept every request (no sample: 0.2-0.3 ``request_samples`` null, 0.4+ no
    :func:`sample_size`). 0.2-0.3 list what ``request_totals`` counts (warm-up and cool-down
    left out of both, ``run_stats.requests_made`` counting them: :func:`_unlisted_note`); 0.4+
    list every successful and errored request ``scheduler_metrics.requests_made`` counts and at
    least the ones ``metrics.request_totals`` counts (the measured window's); an incomplete
    one cancelled before it started is in ``requests_made`` and no list (real runs here:
    0.7.4 and 0.8.1 ``cancelled.json``), so only ``request_totals`` bounds those. A report cut
    down after GuideLLM wrote it (GuideLLM's own test asset benchmarks_stripped.json counts 47
    and lists 1) otherwise reads as a smaller run."""
    bench = benchmarks[b]
    old = "args" in bench
    lists = [v for x in benchmarks if isinstance(x, dict) and isinstance(x.get("requests"), dict)
             for v in x["requests"].values() if isinstance(v, list)]
    if version == "0.1" or not any(lists) or (
            bench.get("request_samples") is not None if old
            else sample_size(bench, version) is not None):
        return  # a sample, or no request listed at all (refused so, its counts said)
    totals = _counts_table(bench.get("request_totals") if old
                           else dig(bench, "metrics", "request_totals"))
    made = {} if old else _counts_table(dig(bench, "scheduler_metrics", "requests_made"))
    for kind in KINDS:
        said = [(v, f"{where}.{kind}") for v, where in (
            (totals.get(kind), "request_totals" if old else "metrics.request_totals"),
            (made.get(kind) if kind != "incomplete" else None,
             "scheduler_metrics.requests_made"))
            if isinstance(v, int) and not isinstance(v, bool)]
        count, where = max(said, default=(0, ""))
        if listed.get(kind, 0) < count:
            over = [f"benchmarks[{b}].{w}" for v, w in said if v > listed.get(kind, 0)]
            raise TraceError(path, fewer_rows(
                f"lists {listed.get(kind, 0)} {kind} requests, but the report's own count "
                f"says {count} ({where})", f"{' and '.join(over)} "
                f"{'is' if len(over) == 1 else 'are'} set to {listed.get(kind, 0)}"),
                field=f"benchmarks[{b}].requests.{kind}")


def _time_limit(bench: Mapping[str, Any], num_sent: int) -> tuple[float, str] | None:
    """The duration limit that stopped a benchmark's sending, if one did: 0.4+ keep the
    constraints whose action stopped queuing in ``scheduler_state.end_queuing_constraints``
    (0.8.1 ``scheduler/worker_group.py``; ``scheduler/constraints/request.py``'s
    ``max_duration`` says its seconds as ``progress.total_duration``, a request count none);
    0.2-0.3 record ``args.max_duration``, binding when fewer than ``args.max_number`` were
    sent."""
    ended = dig(bench, "scheduler_state", "end_queuing_constraints")
    for name, said in (ended.items() if isinstance(ended, dict) else ()):
        seconds = dig(said, "progress", "total_duration") if isinstance(said, dict) else None
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
            return float(seconds), f"GuideLLM {name}"
    seconds, most = dig(bench, "args", "max_duration"), dig(bench, "args", "max_number")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return None
    made = dig(bench, "run_stats", "requests_made", "total")
    sent = made if isinstance(made, int) and made > num_sent else num_sent
    if isinstance(most, int) and not isinstance(most, bool) and sent >= most:
        return None
    return float(seconds), "GuideLLM max_duration"


def _stop_time(bench: Mapping[str, Any]) -> float | None:
    """When the duration limit that stopped a benchmark's sending fell (epoch seconds, the
    requests' clock): 0.8's ``max_duration`` constraint says its ``stop_time``
    (``scheduler/constraints/request.py``: the benchmark's start plus its seconds); None where
    the report does not say (0.2-0.3's ``args.max_duration``)."""
    ended = dig(bench, "scheduler_state", "end_queuing_constraints")
    for said in (ended.values() if isinstance(ended, dict) else ()):
        stop = (dig(said, "progress", "stop_time") or dig(said, "metadata", "stop_time")
                if isinstance(said, dict) else None)
        if isinstance(stop, int | float) and not isinstance(stop, bool) and math.isfinite(stop):
            return float(stop)
    return None


def _cancelled_after_s(bench: Mapping[str, Any], stop: float) -> float:
    """How long after its time limit GuideLLM 0.8 cancelled what was still running: the
    ``max_duration`` constraint stops processing with queuing (0.8.1
    ``scheduler/constraints/request.py``: ``request_processing="stop_local"``). No timer
    fires at the limit: the main process evaluates the constraints when a request's status
    update reaches it (``scheduler/worker_group.py``: ``WorkerGroupState.received_callback``
    calls ``update_state`` with the request's info) and, from 0.8.0, also when no update has
    come for ``settings.mp_poll_interval`` (0.1 s: ``request_updates``, its
    ``asyncio.TimeoutError`` branch calls ``update_state()`` with none; 0.7.3 evaluated them
    on status updates only). It then sets ``constraint_reached_event``, which each worker
    polls every ``messaging.poll_interval`` (0.1 s: ``scheduler/worker.py``,
    ``_process_requests``, ``wait_for_sync_event``) before it cancels its requests in
    flight. So the lag is no fixed figure: the report's ``scheduler_state.end_requests_time``,
    when its last request ended or was cancelled, bounds it: nothing of the stage ran past
    it. inf where the report does not say."""
    end = dig(bench, "scheduler_state", "end_requests_time")
    if isinstance(end, int | float) and not isinstance(end, bool) and math.isfinite(end):
        return max(0.0, float(end) - stop)
    return math.inf


def _idle_note(bench: Mapping[str, Any], stage: RecordedStage, listed: Mapping[str, int],
               version: str, cols: _Columns, first: int) -> list[str]:
    """The note of a closed stage's users idle between a request's end and their next send
    (its rows from ``first`` on: ``request_start_time``, stamped as the backend sends it, and
    ``request_end_time``). Not for a stage whose report leaves requests out (a sample, a cut,
    0.2-0.3's warm-up and cool-down: the slots cannot be followed) or of conversations (a
    later turn, ``turn_index`` above 0, waits its ``requeue_delay``, which the replay holds)."""
    if (stage.load != "closed" or not stage.max_concurrency
            or any(t is not None and t[1] > 0 for t in cols.turn[first:])
            or _sample_note(bench, stage.label, listed, version)
            or _unlisted_note(bench, stage.label, sum(listed.values()))):
        return []
    note = closed_loop_idle_note(stage.label, stage.max_concurrency, cols.start[first:],
                                 cols.end[first:])
    return [] if note is None else [note]


def _unlisted_note(bench: Mapping[str, Any], label: str, listed: int) -> str | None:
    """0.2-0.3 leave warm-up and cool-down requests out of the lists: say how many. 0.4+ say
    how many were still in flight when the report's benchmark was compiled (:func:`_in_flight_note`)."""
    if "args" not in bench:
        return _in_flight_note(bench, label, listed)
    if bench.get("request_samples") is not None:
        return None
    made = dig(bench, "run_stats", "requests_made", "total")
    if isinstance(made, int) and made > listed:
        return (f"{label}: {made - listed} of the {made} requests sent (warm-up and cool-down: "
                "GuideLLM 0.2-0.3 leave them out of the report) are not in the file: the "
                "simulation does not offer them")
    return None


def _in_flight_note(bench: Mapping[str, Any], label: str, listed: int) -> str | None:
    """GuideLLM 0.4+ compile a benchmark from the status updates its scheduler yielded
    (0.5.4 ``benchmark/benchmarker.py``: ``accumulator.update_estimate`` for each, then
    ``compile`` with the last ``scheduler_state``); a request whose end was never yielded is in
    no list, and that state counts it as still being processed (``processing_requests``: the
    requests whose ``in_progress`` update, sent as a request starts, came and whose end did not,
    0.5.4 ``scheduler/worker_group.py``, ``WorkerGroupState._update_state_request_counts``). Real runs here
    (0.5.4 concurrent x4, 0.8.1 replay and sweep) wrote 19 of 20, 9 of 10 and 2 of 3 so: the
    request loaded the server, and its prompt, send and end are not in the file."""
    state = bench.get("scheduler_state")
    in_flight = dig(state, "processing_requests") if isinstance(state, dict) else None
    if not isinstance(in_flight, int) or isinstance(in_flight, bool) or in_flight <= 0:
        return None
    created = dig(state, "created_requests")
    made = (f" of the {created} it created" if isinstance(created, int)
            and not isinstance(created, bool) and created > listed else "")
    return (f"{label}: GuideLLM wrote the report with {in_flight} request(s){made} still in "
            f"flight (scheduler_state.processing_requests {in_flight}; {listed} listed): they "
            "loaded the server but are in no list, so the simulation does not offer them (a "
            "lighter load at the stage's end)")


V0_1_MODES = {"synchronous": "synchronous", "throughput": "throughput"}
"""GuideLLM 0.1's benchmark ``mode`` (``TextGenerationBenchmark``) as the 0.2 strategy it ran:
its ``asynchronous`` benchmarks are its ``constant`` or ``poisson`` load generator at ``rate``
(the report's ``args.mode`` says which; a ``sweep`` runs ``constant`` ones)."""


V0_1_CAP = 511
"""GuideLLM 0.1's scheduler waits while ``index + 1 - completed >= settings.max_concurrency``
(512) before sending the next request (v0.1.0 ``scheduler/base.py`` ``_run_async``): at most 511
in flight."""


def _v0_1_cap(bench: Mapping[str, Any]) -> int:
    """The requests a GuideLLM 0.1 benchmark held in flight at most: :data:`V0_1_CAP`, or more
    where its ``concurrencies`` measured more processing (the setting was raised)."""
    seen = [c.get("processing") for c in bench.get("concurrencies") or []
            if isinstance(c, dict)]
    peak = max((int(x) for x in seen if isinstance(x, int) and not isinstance(x, bool)),
               default=0)
    return max(V0_1_CAP, peak)


def _is_v0_1(benchmarks: list[Any]) -> bool:
    """GuideLLM 0.1's ``GuidanceReport``: a list of reports, each with its own ``benchmarks``
    (vllm-project/guidellm v0.1.0 ``src/guidellm/core/report.py``, ``result.py``)."""
    first = benchmarks[0]
    return isinstance(first, dict) and "requests" not in first and \
        isinstance(first.get("benchmarks"), list)


def _from_v0_1(path: Path, reports: list[Any]) -> tuple[list[Any], list[str], int]:
    """GuideLLM 0.1's benchmarks in the 0.2 layout this reader takes, the notes, and the
    errored requests (0.1 keeps no time of them: counted, not simulated). A 0.1 result
    (``TextGenerationResult``) has ``prompt_token_count``, ``output_token_count``,
    ``start_time``, ``first_token_time`` and ``end_time``; its scheduler sends a
    ``synchronous`` benchmark's requests one at a time, and the others below
    ``settings.max_concurrency`` (:data:`V0_1_CAP`; v0.1.0 ``scheduler/base.py`` ``_run_sync``,
    ``_run_async``; ``config.py``)."""
    out: list[Any] = []
    errored = 0
    for k, report in enumerate(reports):
        args = report.get("args") if isinstance(report, dict) else None
        args = args if isinstance(args, dict) else {}
        for b, bench in enumerate(report.get("benchmarks") or [] if isinstance(report, dict)
                                  else []):
            where = f"benchmarks[{k}].benchmarks[{b}]"
            if not isinstance(bench, dict) or not isinstance(bench.get("results"), list):
                raise TraceError(path, "must hold a 'results' list (a GuideLLM 0.1 benchmark)",
                                 field=f"{where}.results")
            mode = V0_1_MODES.get(str(bench.get("mode")),
                                  "poisson" if args.get("mode") == "poisson" else "constant")
            errors = bench.get("errors")
            errored += len(errors) if isinstance(errors, list) else 0
            out.append({
                "args": {"strategy": {"type_": mode, "rate": bench.get("rate"),
                                      "max_concurrency": _v0_1_cap(bench)}},
                "worker": {"backend_model": args.get("model"),
                           "backend_target": args.get("target")},
                "requests": {"successful": [
                    {"prompt_tokens": r.get("prompt_token_count"),
                     "output_tokens": r.get("output_token_count"),
                     **{t: r.get(t) for t in ("start_time", "first_token_time", "end_time")}}
                    if isinstance(r, dict) else r for r in bench["results"]]}})
    notes = ["GuideLLM 0.1 report: its benchmarks read as 0.2's (synchronous: one at a time; "
             f"throughput and the rate benchmarks: at most {V0_1_CAP} in flight, as its "
             "scheduler holds them under settings.max_concurrency, 512 unless "
             "GUIDELLM__MAX_CONCURRENCY was set (assumed; more where the report measured "
             "more))"]
    if errored:
        notes.append(f"{errored} errored requests: GuideLLM 0.1 keeps no time of them: counted, "
                     "not simulated")
    return out, notes, errored


def read_guidellm(path: Path, default_tier: str,
                  max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read a GuideLLM report (JSON or YAML)."""
    doc = load_report(path)
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise TraceError(path, "must be a non-empty list of benchmarks (a GuideLLM report)",
                         field="benchmarks")
    version = _version(doc)
    cols = _Columns()
    notes: list[str] = []
    counts: dict[str, int] = {}
    if _is_v0_1(benchmarks):
        benchmarks, notes, counts["num_errored"] = _from_v0_1(path, benchmarks)
        version = "0.1"
    stages = []
    for b, bench in enumerate(benchmarks):
        if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
            raise TraceError(path, "must hold a 'requests' object (successful, errored, "
                             "incomplete)", field=f"benchmarks[{b}].requests")
        stage = stage_of(path, bench, b, version, notes)
        if stage.send_times == "ramped" and stage.max_concurrency is not None:
            strategy = _strategy(bench)
            cols.ramp_holds[stage.label] = ramp_hold_s(
                str(strategy.get("type_") or strategy.get("type")), stage.max_concurrency,
                rampup_s(strategy))
        limit = _time_limit(bench, _listed(bench))
        stop = _stop_time(bench) if limit else None
        if stop is not None:  # on the epoch clock until _recording rebases it
            cut, changes = cut_rule(_version_tuple(version))
            stage = replace(stage, time_limit_end_s=stop, grace_s=_cancelled_after_s(bench, stop),
                            cut=cut, status_changes=changes)
        stages.append(stage)
        window = _window(path, bench, b)
        _refuse_before_start(path, bench, b)
        # with no cool-down GuideLLM 0.8.1's window ends at the time limit (benchmark/schemas/
        # accumulator.py: measure_end is request_end, the scheduler's progress.stop_time);
        # what its workers had queued goes out after it
        after = ("after_limit" if stop is not None and not bench.get("cooldown_duration")
                 else "after_window" if _no_cooldown(bench) else "cooldown")
        listed: dict[str, int] = {}
        first = len(cols.start)
        for kind in KINDS:
            rows = bench["requests"].get(kind) or []
            if not isinstance(rows, list):
                raise TraceError(path, "must be a list", field=f"benchmarks[{b}].requests.{kind}")
            listed[kind] = len(rows)
            counts[f"num_{kind}"] = counts.get(f"num_{kind}", 0) + len(rows)
            for r, req in enumerate(rows):
                where = f"benchmarks[{b}].requests.{kind}[{r}]"
                if not _add_request(path, cols, req, where, kind, stage, window, after):
                    counts["num_incomplete_not_simulated"] = counts.get(
                        "num_incomplete_not_simulated", 0) + 1
        _refuse_cut(path, benchmarks, b, version, listed)
        for note in (_sample_note(bench, stage.label, listed, version),
                     _unlisted_note(bench, stage.label, sum(listed.values())),
                     limit and time_limit_note(
                         stage.label, stage.load, *limit, sum(listed.values()),
                         grace_s=stage.grace_s if stop is not None else None,
                         cancelled_when=cut_words(stage)),
                     stop is not None and poll_lag_note(bench, stage, stop)):
            if note:
                notes.append(note)
        notes.extend(_idle_note(bench, stage, listed, version, cols, first))
    return _recording(path, doc, benchmarks, version, cols, stages, counts, notes,
                      default_tier, max_output_rule)


def _recording(path: Path, doc: Mapping[str, Any], benchmarks: list[Any], version: str,
               cols: _Columns, stages: list[RecordedStage], counts: dict[str, int],
               notes: list[str], default_tier: str,
               max_output_rule: MaxOutputRule | None) -> Recording:
    if counts.get("num_incomplete_not_simulated"):
        notes.append(f"{counts['num_incomplete_not_simulated']} cancelled requests have no "
                     "prompt length or no start time in the report (prompt_tokens null): "
                     "counted, not simulated")
    if cols.num_counted_by_chunks:
        counts["num_output_from_chunks"] = cols.num_counted_by_chunks
        notes.append(f"{cols.num_counted_by_chunks} cancelled or errored requests streamed "
                     "output but the report counts none of it (GuideLLM counts a request's "
                     "output from the server's final usage, which a cut stream never sends): "
                     "simulated with the chunks they streamed (info.timings.token_iterations), "
                     "one token a chunk, a lower bound")
    if not cols.prompt:
        raise TraceError(path, "lists no request with a start time and a prompt length"
                         + _unlisted(benchmarks), field="benchmarks")
    start = np.array(cols.start)
    offered = _offered(cols, notes)
    origin = float(offered.min())
    stages = [replace(st, time_limit_end_s=st.time_limit_end_s - origin)
              if st.time_limit_end_s is not None else st for st in stages]
    synthetic = _synthetic_fill(benchmarks, cols)
    recorded: FloatArray | None = np.array(cols.max_tokens)
    if recorded is not None and not np.isfinite(recorded).any():
        recorded = None
    prefix = _prefix(doc, cols, notes)
    workload, c2, warnings = finish_columns(
        path, "guidellm", prompt=np.array(cols.prompt), output=np.array(cols.output),
        arrival=offered - origin,
        fields={"prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens",
                "arrival_s": "request_start_time", "max_output_tokens": "max_tokens"},
        default_tier=default_tier, max_output=recorded, max_output_rule=max_output_rule,
        # each status's list in completion order (GuideLLM 0.8.1
        # guidellm/benchmark/schemas/accumulator.py: update_estimate appends each finished one)
        completion_order=True, prefix=None if prefix is None else prefix.hashes,
        prefix_block_tokens=None if prefix is None else prefix.block_tokens)
    counts.update(c2)
    if cols.ramp_holds:  # a ramped stage's later requests are offered at one time, the
        # ramp's last, on purpose (a closed loop's users held only by a free slot), not because
        # the report's clock is coarse (GuideLLM times each request to the microsecond)
        workload, warnings = without_shared_times(workload, warnings)
    rows = workload.request_id
    ttft = np.array(cols.first) - start
    e2e = np.array(cols.end) - start
    label_of = {i: w for i, w in enumerate(cols.where)}
    for name, values in (("time_to_first_token", ttft), ("request_latency", e2e)):
        _check(path, name, values, rows, label_of)
    bad = np.isfinite(ttft) & np.isfinite(e2e) & (e2e < ttft - 1e-9)
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(path, f"the request ends ({e2e[i]:g} s after its start) before its "
                         f"first token ({ttft[i]:g} s)", field=f"{cols.where[i]}.request_end_time")
    status = [cols.status[r] for r in rows.tolist()]
    notes.extend(_window_notes(status, [cols.side[r] for r in rows.tolist()], counts))
    config = _config(path, benchmarks, doc, cols)
    notes.append(synthetic or max_tokens_note(recorded, max_output_rule))
    cache = cache_note(cols.cached, cols.prompt, rows, prefix)
    if cache is not None:
        notes.append(cache[0])
        counts["num_prompt_tokens_cached"] = cache[1]
    return build_recording(path, "guidellm", workload, ttft=ttft[rows], e2e=e2e[rows],
                           sent_s=(start - origin)[rows],
                           status=status, stage=[cols.stage[r] for r in rows.tolist()],
                           itl_mean=np.array(cols.itl)[rows], config=config, counts=counts,
                           notes=[*notes, *warnings],
                           stages=tuple(stages), tool=f"guidellm {version}".strip(),
                           conversations=_conversations(cols, rows.tolist()))


def _conversations(cols: _Columns, rows: list[int]) -> Conversations | None:
    """The workload's turns of conversations (``rows``: each row's request in ``cols``): a
    turn waits for the turn before it and that turn's ``requeue_delay``."""
    previous = turn_links(cols.turn)
    delay = [cols.turn_delay[p] if p >= 0 else 0.0 for p in previous]
    return workload_conversations(previous, delay, rows)


def _prefix(doc: Mapping[str, Any], cols: _Columns, notes: list[str]) -> SharedPrefix | None:
    """The prompt prefixes the server could cache: the synthetic data's shared prefix, else a
    multi-turn conversation's history (both said in ``notes``; a report with both keeps the
    synthetic prefix's, its hashes naming whole prefixes, and says the history is not
    shared)."""
    prefix, said = with_history(shared_prefix(doc, cols.prefix_key, cols.prompt),
                                conversation_prefix(cols.turn, cols.prompt))
    notes.extend(said)
    return prefix


def _synthetic_fill(benchmarks: list[Any], cols: _Columns) -> str | None:
    """A GuideLLM 0.2-0.3 report keeps no request body: where its synthetic data fixed one
    output length (:func:`synthetic_max_tokens`), every request was sent it as ``max_tokens``
    with ``ignore_eos``, and ``cols`` takes them; the note saying so, or None (a body said
    them, the data did not fix one, or a completed request generated another length: then
    the data was not what the settings say)."""
    if any(math.isfinite(x) for x in cols.max_tokens):
        return None
    fixed = synthetic_max_tokens(benchmarks)
    if fixed is None or any(o != fixed for o, st in zip(cols.output, cols.status, strict=True)
                            if st == "completed"):
        return None
    cols.max_tokens[:] = [float(fixed)] * len(cols.max_tokens)
    cols.ignore_eos.clear()
    cols.ignore_eos.add(True)
    return synthetic_note(fixed)


def _unlisted(benchmarks: list[Any]) -> str:
    """What a report that lists no request counted (``metrics.request_totals``): its lists
    were emptied (a sample of 0, or a file cut down after GuideLLM wrote it)."""
    counted = 0
    for bench in benchmarks:
        total = dig(bench, "metrics", "request_totals", "total") if isinstance(bench, dict) \
            else None
        if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
            counted += int(total)
    if not counted:
        return ""
    return (f" (its metrics count {counted} requests, but its request lists are empty: the "
            "report was saved or cut down without them; pass the report GuideLLM wrote with "
            "every request)")


def _offered(cols: _Columns, notes: list[str]) -> FloatArray:
    """When each request is offered to a replay: its ``request_start_time``, or for a capped
    stage (a rate and a ``max_concurrency``) when the schedule meant it to start
    (``info.timings.targeted_start``; 0.2-0.3: ``scheduler_info.targeted_start_time``): its start came after a wait for one of the slots, and
    replaying that would hold it to the recorded server's slots (a faster simulated server
    could not send sooner). Its TTFT and E2E keep the start as origin. A stage of no more
    requests than slots (GuideLLM 0.7+ records its default cap, 10240) never waited for one, nor
    did one whose requests in flight never reached its cap (:func:`_reached_cap`): its
    requests are offered at their start (a lag of the client's own is load the server saw)."""
    start = np.array(cols.start)
    due = np.array(cols.due)
    labels = np.array(cols.stage, dtype=object)
    size = {label: int((labels == label).sum()) for label in set(cols.stage)}
    full = _reached_cap(start, np.array(cols.end, dtype=float), labels, cols.cap)
    capped = np.array([0 < cap < size[label] and full[label]
                       for cap, label in zip(cols.cap, cols.stage, strict=True)], dtype=bool)
    known = capped & np.isfinite(due) & (due <= start)
    if (capped & ~known).any():
        notes.append(f"{int((capped & ~known).sum())} requests of a stage capped at a "
                     "max_concurrency have no targeted start time: each is "
                     "offered at its start, when it got a slot of the recorded run: a faster "
                     "simulated server cannot send sooner than the recorded one did")
    return clip_to_ramps(np.where(known, due, start), due, labels, cols.ramp_holds)


def _reached_cap(start: FloatArray, end: FloatArray, labels: Any,
                 caps: list[int]) -> dict[str, bool]:
    """Whether each stage's requests in flight (started, not ended: a request with no end, cut
    or failed, counted to the last) ever reached its cap (:func:`cap_reached`, every reader's
    rule): where they never did, no request waited for a slot, and a start after its targeted
    time is GuideLLM's own scheduling delay."""
    full: dict[str, bool] = {}
    for label in set(labels.tolist()):
        rows = labels == label
        cap = max((c for c, r in zip(caps, rows, strict=True) if r), default=0)
        full[label] = cap_reached(start[rows], end[rows], cap)
    return full


def _check(path: Path, name: str, values: FloatArray, rows: Any,
           where: Mapping[int, str]) -> None:
    """Measured times >= 0 and at most a day; the error names the request's place."""
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(values) & ((values < 0) | (values > MAX_MEASURED_S))
    if bad.any():
        i = int(np.argmax(bad))
        problem = (f"negative time: {values[i]:g}" if values[i] < 0 else
                   f"implausibly long: {values[i]:g} s (over a day)")
        raise TraceError(path, problem, field=f"{where[i]}.{name}")


def _body_model(path: Path, cols: _Columns) -> str | None:
    """The model every request body named (GuideLLM asks the server's ``/v1/models`` when
    ``--model`` is not given, and its report's settings then say ``model: null``); a report whose
    bodies name several models is refused: no one model can be simulated for them all."""
    if len(cols.models) > 1:
        names = sorted(m[:60] for m in cols.models)
        raise TraceError(path, f"its requests were sent to {len(names)} models "
                         f"({', '.join(names[:4])}): validate or calibrate on a run of one model",
                         field="requests[].request_args.body.model")
    return next(iter(cols.models), None)


def _config(path: Path, benchmarks: list[Any], doc: Mapping[str, Any],
            cols: _Columns) -> dict[str, Any]:
    config: dict[str, Any] = {}
    bench = benchmarks[0]
    model = (dig(bench, "config", "requests", "model") or dig(bench, "config", "backend", "model")
             or dig(bench, "worker", "backend_model")
             or dig(doc, "config", "spec", "backend", "model")
             or dig(doc, "args", "model") or _body_model(path, cols))
    if isinstance(model, str):
        config["model"] = model
    finite = [x for x in cols.max_tokens if math.isfinite(x)]
    if finite and min(finite) == max(finite):
        config["max_tokens"] = int(finite[0])
    if len(cols.ignore_eos) == 1:
        config["ignore_eos"] = next(iter(cols.ignore_eos))
    target = (dig(bench, "worker", "backend_target") or dig(bench, "config", "backend", "target")
              or dig(doc, "config", "spec", "backend", "target"))
    if isinstance(target, str):
        config["target"] = target
    return config
