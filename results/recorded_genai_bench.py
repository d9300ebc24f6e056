"""genai-bench's experiment folder: ``experiment_metadata.json`` and one JSON a run.

What genai-bench writes (sgl-project/genai-bench 0.0.5, ``genai_bench/cli/cli.py``
``benchmark``): each ``genai-bench benchmark`` is an *experiment*, one folder holding
``experiment_metadata.json`` (``protocol.py`` ``ExperimentMetadata``: ``cmd``, the command line
with every option's value; ``api_backend``, ``api_model_name``, ``task``, ``traffic_scenario``,
``num_concurrency``, ``max_time_per_run_s``, ``max_requests_per_run``, ``server_engine``...)
and one *run* a traffic scenario and concurrency, run one after another (scenarios outer,
concurrencies inner, a second's sleep between runs), each saved as
``<scenario>_<task>_num_concurrency_<N>_time_<T>s.json``
(``metrics/aggregated_metrics_collector.py`` ``save``): ``aggregated_metrics`` (the run's
``scenario``, ``num_concurrency``, ``run_duration``, statistics) and
``individual_request_metrics``, one ``RequestLevelMetrics`` a request in the order they
returned (each is sent to the collector as it ends), and ``_time_unit`` (``s`` or ``ms``, of
``ttft``, ``tpot``, ``e2e_latency``, ``output_latency``). A request keeps ``ttft`` and
``e2e_latency`` (from ``time.monotonic()`` before its POST to the first streamed chunk with
content and to the end of the stream), ``num_input_tokens`` and ``num_output_tokens`` (the
server's ``usage``, else genai-bench's tokenizer count), or ``error_code`` and
``error_message`` and nothing else; no send time. A run whose metrics cannot be aggregated
(every request failed) is saved as ``debug_for_run_<scenario>_<N>.json`` instead, and the
command fails.

The load (Locust 2.x): a run starts ``num_concurrency`` users at ``--spawn-rate`` (default: the
concurrency, so all at once: ``locust/dispatch.py`` dispatches ``floor(spawn_rate)`` users an
iteration), each sending its next request as soon as its last ended (``User.wait_time`` is
``constant(0)``): a closed loop. Each whole second it checks ``max_time_per_run_s`` and whether
``max_requests_per_run`` requests are done (``cli/utils.py`` ``manage_run_time``), then stops the
users: the requests in flight are abandoned and not recorded. A text scenario ``D(I,O)``
sends ``max_tokens`` O; ``N(...)`` and ``U(...)`` draw it per request (not recorded); with the
``vllm`` or ``sglang`` backend each request also asks ``ignore_eos`` (``user/openai_user.py``
``chat``); ``dataset`` sends no ``max_tokens`` and ``ignore_eos`` false
(``sampling/text.py``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    FloatArray,
    fewer_rows,
    finish_columns,
    load_json,
    max_tokens_note,
    number,
    time_limit_note,
    without_shared_times,
)
from kvbudget.results.recorded_genai_bench_server import (
    GENAI_BENCH_ENGINES,
    open_loop_refusal,
    server_config,
    unstreamed_note,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule

TOOL = "genai-bench"
METADATA = "experiment_metadata.json"
RUN_FILE = re.compile(r".+_.+_(?:concurrency|batch_size)_\d+_time_(\d+)s\.json")
"""A run's result file (0.0.5 ``analysis/experiment_loader.py`` ``load_one_experiment``)."""
TASK_IN_NAME = re.compile(r"_([a-z]+(?:-[a-z]+)*-to-[a-z]+)_(?:num_concurrency|batch_size)_")
"""A run file's task, in its name (``cli.py``: ``<scenario>_<task>_<iteration_type>_...``)."""
DEBUG_FILE = re.compile(r"debug_for_run_.+_\d+\.json")
"""A run saved when its metrics could not be aggregated (``cli.py``)."""
UNITS = {"s": 1.0, "ms": 1e-3}
"""``_time_unit``: seconds per unit (``time_units.py`` ``TimeUnitConverter``)."""
DETERMINISTIC = re.compile(r"D\((\d+),(\d+)\)")
"""A text scenario of fixed lengths (``scenarios/text.py`` ``DeterministicDistribution``)."""
IGNORE_EOS_BACKENDS = ("vllm", "sglang")
"""``--api-backend`` values whose requests carry ``ignore_eos`` (``openai_user.py`` ``chat``)."""
OPENAI_BACKEND = "openai"
"""The backend whose requests have ``ignore_eos`` removed."""
_REFUSED_FLAGS = {
    "--prefix-len": "shares one prompt prefix across every request",
    "--prefix-ratio": "shares a prefix of each prompt across requests",
}
"""Options whose requests share prompt prefixes the files do not describe."""


def is_genai_bench_result(doc: Mapping[str, Any]) -> bool:
    """A run's result (or debug) file: ``aggregated_metrics`` and ``individual_request_metrics``."""
    return isinstance(doc.get("aggregated_metrics"), Mapping) and \
        isinstance(doc.get("individual_request_metrics"), list)


def is_genai_bench_metadata(doc: Mapping[str, Any]) -> bool:
    """An experiment's ``experiment_metadata.json``."""
    return {"benchmark_version", "traffic_scenario", "api_backend"} <= set(doc)


def holds_genai_bench(path: Path) -> bool:
    """An experiment folder (one holding ``experiment_metadata.json``) or the folder above
    experiments (``--experiment-base-dir``: refused naming them)."""
    return path.is_dir() and ((path / METADATA).is_file()
                              or next(path.glob(f"*/{METADATA}"), None) is not None)


@dataclass(frozen=True)
class _Run:
    """One run's requests (in the file's order, the order they returned) and its settings."""

    path: Path
    scenario: str
    users: int
    run_s: float
    ttft: FloatArray
    e2e: FloatArray
    prompt: FloatArray
    output: FloatArray
    errors: tuple[str, ...]
    """``""`` for a request that returned, else ``error (<code>)``."""
    messages: tuple[str, ...]
    num_counted: int | None = None
    """``aggregated_metrics.num_requests``: the requests genai-bench counted in the run."""

    @property
    def failed(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        return np.array([bool(e) for e in self.errors], dtype=bool)

    @property
    def label(self) -> str:
        return f"{self.scenario} concurrency {self.users}"


def _request(path: Path, i: int, req: Any, scale: float) -> tuple[float, float, float, float,
                                                                  str, str]:
    """ttft, e2e, prompt, output, error, message of ``individual_request_metrics[i]``."""
    where = f"individual_request_metrics[{i}]"
    if not isinstance(req, dict):
        raise TraceError(path, "must be an object", field=where)
    code = req.get("error_code")
    if code is not None:
        if isinstance(code, bool) or not isinstance(code, int):
            raise TraceError(path, f"must be an HTTP status or null, got {code!r}"[:80],
                             field=f"{where}.error_code")
        text = req.get("error_message")
        return math.nan, math.nan, 0.0, 0.0, f"error ({code})", str(text or "")[:200]
    vals = []
    for name in ("ttft", "e2e_latency", "num_input_tokens", "num_output_tokens"):
        x = number(req.get(name), path, f"{where}.{name}")
        if math.isnan(x):
            raise TraceError(path, "missing in a request without error_code",
                             field=f"{where}.{name}")
        vals.append(x)
    ttft, e2e = vals[0] * scale, vals[1] * scale
    for name, value in (("ttft", ttft), ("e2e_latency", e2e)):
        if not 0 <= value <= MAX_MEASURED_S:
            raise TraceError(path, f"{'negative' if value < 0 else 'implausible'} time: "
                             f"{value:g} s", field=f"{where}.{name}")
    if e2e < ttft - 1e-9:
        raise TraceError(path, f"the request ends ({e2e:g} s) before its first token "
                         f"({ttft:g} s)", field=f"{where}.e2e_latency")
    return ttft, e2e, vals[2], vals[3], "", ""


def _scale(path: Path, doc: Mapping[str, Any], meta: Mapping[str, Any]) -> float:
    """Seconds per unit of the file's latencies: its ``_time_unit``, else the metadata's
    ``metrics_time_unit``, else seconds (genai-bench before 0.0.3 wrote seconds only)."""
    unit = doc.get("_time_unit", meta.get("metrics_time_unit", "s"))
    if not isinstance(unit, str) or unit not in UNITS:
        raise TraceError(path, f"must be s or ms, got {unit!r}"[:80], field="_time_unit")
    return UNITS[unit]


def _read_run(path: Path, meta: Mapping[str, Any]) -> _Run:
    doc = load_json(path)
    if not isinstance(doc, dict) or not is_genai_bench_result(doc):
        raise TraceError(path, "is not a genai-bench run result (aggregated_metrics and "
                         "individual_request_metrics)")
    agg = doc["aggregated_metrics"]
    users = agg.get("num_concurrency")
    if agg.get("iteration_type", "num_concurrency") != "num_concurrency":
        raise TraceError(path, f"is a run over {agg.get('iteration_type')} (an embeddings "
                         "or rerank task's batches): its requests generate no tokens, nothing "
                         "kvbudget simulates", field="aggregated_metrics.iteration_type")
    if isinstance(users, bool) or not isinstance(users, int) or users < 1:
        raise TraceError(path, f"must be a whole number >= 1, got {users!r}"[:80],
                         field="aggregated_metrics.num_concurrency")
    scenario = agg.get("scenario")
    if not isinstance(scenario, str) or not scenario:
        raise TraceError(path, "missing", field="aggregated_metrics.scenario")
    reqs = doc["individual_request_metrics"]
    if not reqs:
        raise TraceError(path, "holds no request", field="individual_request_metrics")
    scale = _scale(path, doc, meta)
    rows = [_request(path, i, r, scale) for i, r in enumerate(reqs)]
    run_s = number(agg.get("run_duration"), path, "aggregated_metrics.run_duration")
    cols = np.array([r[:4] for r in rows], dtype=np.float64)
    return _Run(path=path, scenario=scenario, users=users,
                run_s=0.0 if math.isnan(run_s) else run_s, ttft=cols[:, 0], e2e=cols[:, 1],
                prompt=cols[:, 2], output=cols[:, 3], errors=tuple(r[4] for r in rows),
                messages=tuple(r[5] for r in rows),
                num_counted=counted_n if isinstance(counted_n := agg.get("num_requests"), int)
                and not isinstance(counted_n, bool) else None)


def _metadata(path: Path) -> dict[str, Any]:
    doc = load_json(path)
    if not isinstance(doc, dict) or not is_genai_bench_metadata(doc):
        raise TraceError(path, "is not genai-bench's experiment_metadata.json (its "
                         "benchmark_version, traffic_scenario and api_backend)")
    params = doc.get("additional_request_params")
    if isinstance(params, dict) and params.get("max_tokens") is not None:
        tokens = number(params["max_tokens"], path, "additional_request_params.max_tokens")
        if tokens < 1 or tokens != int(tokens):
            raise TraceError(path, f"must be a whole number >= 1, got {params['max_tokens']!r}",
                             field="additional_request_params.max_tokens")
    unit = doc.get("metrics_time_unit", "s")  # the runs' files' unit where they say none
    if not isinstance(unit, str) or unit not in UNITS:
        raise TraceError(path, f"must be s or ms, got {unit!r}"[:80], field="metrics_time_unit")
    scenarios, levels = doc.get("traffic_scenario"), doc.get("num_concurrency")
    # genai-bench's ExperimentMetadata: list[str], list[int]
    if isinstance(scenarios, list) and not all(isinstance(s, str) for s in scenarios):
        raise TraceError(path, f"must be a list of scenario names, got {scenarios!r}"[:120],
                         field="traffic_scenario")
    if isinstance(levels, list) and not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in levels):
        raise TraceError(path, f"must be a list of whole numbers >= 1, got {levels!r}"[:120],
                         field="num_concurrency")
    return doc


def _files(path: Path) -> tuple[Path | None, list[Path]]:
    """The metadata file (None: none) and the run files a path names: an experiment folder,
    its ``experiment_metadata.json``, or one run's file (the metadata beside it when there)."""
    folder = path if path.is_dir() else path.parent
    meta = folder / METADATA
    if path.is_file() and path.name != METADATA:
        return (meta if meta.is_file() else None), [path]
    runs = sorted(p for p in folder.iterdir() if p.is_file() and (
        RUN_FILE.fullmatch(p.name) or DEBUG_FILE.fullmatch(p.name)))
    inside = sorted(p.parent.name for p in folder.glob(f"*/{METADATA}"))
    if not runs:
        raise TraceError(folder, "holds no genai-bench run result "
                         "(<scenario>_<task>_num_concurrency_<N>_time_<T>s.json)" + (
                             f"; its experiments are {', '.join(inside[:5])}: pass one"
                             if inside and not meta.is_file() else f" beside its {METADATA}"))
    return (meta if meta.is_file() else None), runs


def _in_run_order(runs: list[_Run], meta: Mapping[str, Any],
                  meta_path: Path | None) -> list[_Run]:
    """The runs in the order genai-bench ran them: the metadata's scenarios, each at its
    concurrencies in turn; one run a scenario and concurrency."""
    scenarios: list[Any] = list(meta.get("traffic_scenario") or []) \
        if isinstance(meta.get("traffic_scenario"), list) else []
    levels: list[Any] = list(meta.get("num_concurrency") or []) \
        if isinstance(meta.get("num_concurrency"), list) else []

    def key(run: _Run) -> tuple[int, int, str]:
        return (scenarios.index(run.scenario) if run.scenario in scenarios else len(scenarios),
                levels.index(run.users) if run.users in levels else len(levels), run.path.name)

    runs = sorted(runs, key=key)
    seen = Counter((r.scenario, r.users) for r in runs)
    twice = [k for k, n in seen.items() if n > 1]
    if twice:
        raise TraceError(meta_path or runs[0].path.parent, f"holds {seen[twice[0]]} results of "
                         f"scenario {twice[0][0]} at concurrency {twice[0][1]}: not one "
                         "experiment's runs; pass each file alone")
    return runs


def _cmd_options(meta: Mapping[str, Any]) -> dict[str, str]:
    """``--flag value`` pairs of the metadata's ``cmd`` (genai-bench writes every option)."""
    words = str(meta.get("cmd") or "").split()
    out: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            flag, eq, value = word.partition("=")
            out[flag] = value if eq else (words[i + 1] if i + 1 < len(words)
                                          and not words[i + 1].startswith("--") else "")
    return out


def _refuse(meta: Mapping[str, Any], meta_path: Path | None, runs: Sequence[_Run]) -> None:
    """What cannot be replayed faithfully, in one line naming the file and field."""
    where = meta_path or runs[0].path
    named = [TASK_IN_NAME.search(r.path.name) for r in runs]
    task = meta.get("task") if meta else next((m.group(1) for m in named if m), None)
    if task is not None and task != "text-to-text":
        what = ("its requests carry images, which kvbudget does not simulate"
                if task == "image-text-to-text" else
                "its requests generate no text tokens, nothing kvbudget simulates")
        raise TraceError(where, f"is an experiment of --task {task}{'' if meta else ' (its name)'}"
                         f": {what}", field="task" if meta else None)
    opts = _cmd_options(meta)
    if (refused := open_loop_refusal(opts)) is not None:
        raise TraceError(where, refused, field="cmd")
    for flag, what in _REFUSED_FLAGS.items():
        if opts.get(flag):
            raise TraceError(where, f"ran with {flag} {opts[flag]}: it {what}, and the files "
                             "do not say which prompt tokens were shared, so the prefix cache "
                             "cannot be replayed", field="cmd")
    spawn = _float_or_none(opts.get("--spawn-rate"))
    slow = [r for r in runs if spawn is not None and math.floor(spawn) < r.users]
    if slow and spawn is not None:  # floor(rate) users every floor(rate) / rate s (dispatch.py)
        per = max(1, math.floor(spawn))
        last_s = (math.ceil(slow[0].users / per) - 1) * per / spawn
        raise TraceError(where, f"ran with --spawn-rate {opts['--spawn-rate']}: Locust started "
                         f"the {slow[0].users} users of {slow[0].label} {per} at a time, the "
                         f"last {last_s:g} s after the first, a ramp whose start times the files "
                         "do not keep; rerun without it (all users start at once)", field="cmd")
    for run in runs:
        if run.failed.all():
            reasons = _reasons(run.errors, run.messages)
            raise TraceError(run.path, f"every one of its {len(run.errors)} requests failed "
                             f"({reasons}): the server answered none, so there is nothing to "
                             "simulate or compare", field="individual_request_metrics")


def _float_or_none(text: str | None) -> float | None:
    """A number the command line gave (None: not given, or not a finite number)."""
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def _reasons(errors: Sequence[str], messages: Sequence[str]) -> str:
    """The failures by status, each with its first message (cut short)."""
    first: dict[str, str] = {}
    for err, msg in zip(errors, messages, strict=True):
        if err:
            first.setdefault(err, msg)
    tally = Counter(e for e in errors if e)
    return "; ".join(f'{n} {err}: "{first[err][:120]}"' for err, n in tally.most_common(3))


def _schedule(run: _Run) -> FloatArray:
    """Each returned request's send, on the run's own clock, as a closed loop of the run's
    users sends the requests in the file's order: each when the first user is free (at the
    start, or when its last request ended). NaN for a failed request (no time kept)."""
    free = np.zeros(run.users)
    sent = np.full(len(run.errors), math.nan)
    for i in np.flatnonzero(~run.failed).tolist():
        u = int(np.argmin(free))
        sent[i] = free[u]
        free[u] += run.e2e[i]
    return sent


def _phases(run: _Run, opts: Mapping[str, str]) -> list[str]:
    """Each request's status: ``completed``, its error, or ``warmup`` / ``cooldown`` where
    ``--warmup-ratio`` / ``--cooldown-ratio`` left it out of genai-bench's aggregates (the
    first and last ``int(n * ratio)`` requests of the file, failed ones included:
    ``aggregate_metrics_data``)."""
    n = len(run.errors)
    status = [e or "completed" for e in run.errors]
    for flag, word, rows in (("--warmup-ratio", "warmup", range(n)),
                             ("--cooldown-ratio", "cooldown", range(n - 1, -1, -1))):
        ratio = _float_or_none(opts.get(flag))
        if ratio and 0 < ratio < 1:
            for i in list(rows)[:int(n * ratio)]:
                if not run.errors[i]:
                    status[i] = word
    return status


def _stage(run: _Run, meta: Mapping[str, Any], start_s: float,
           notes: list[str]) -> RecordedStage:
    """The run's closed loop, cut where genai-bench stopped it: at its ``T``-th whole-second
    check (the file's ``time_<T>s``: ``T`` sleeps of a second, each longer on a busy event
    loop), when ``max_time_per_run_s`` had passed or ``max_requests_per_run`` requests had
    returned, killing the requests then in flight (Locust's ``stop_timeout`` is unset:
    ``runners.py`` ``stop_users`` kills each user's greenlet), which it does not record. Its
    ``run_duration``, from before the users started to after they stopped, is when: the
    stage's time limit. A debug file has neither: replayed with the requests it recorded."""
    found = RUN_FILE.fullmatch(run.path.name)
    if found is None or run.run_s <= 0:
        notes.append(f"stage '{run.label}': its file ({run.path.name}) does not say when "
                     "genai-bench stopped it: replayed with the "
                     f"{counted(len(run.errors), 'request')} it recorded, not time-limited")
        return RecordedStage(run.label, "closed", None, run.users, send_times="rebuilt")
    took = int(found.group(1))
    limit_s, most = meta.get("max_time_per_run_s"), meta.get("max_requests_per_run")
    why = (f"max_time_per_run_s {limit_s} passed" if took == limit_s else
           f"max_requests_per_run {most} had returned" if most else "its limit was reached")
    said = time_limit_note(run.label, "closed", run.run_s, "genai-bench's run_duration, from "
                           "before its users started to after it stopped them at its check "
                           f"{took} (time_{took}s), when {why}, killing those in flight, which it does "
                           "not record", len(run.errors), grace_s=0.0)
    if said:
        notes.append(said)
    return RecordedStage(run.label, "closed", None, run.users, send_times="rebuilt",
                         time_limit_end_s=start_s + run.run_s, grace_s=0.0)


def _refuse_cut_runs(runs: Sequence[_Run]) -> None:
    """Refuse a run whose file lists fewer requests than genai-bench counted in it
    (``aggregated_metrics.num_requests``: genai-bench 0.0.5 ``metrics/
    aggregated_metrics_collector.py`` counts each request it appends to the list it saves as
    ``individual_request_metrics``, completed :41-56 or errored :251, their sum :277-280, the
    list saved whole :327-334): the file was cut after (it was read with a note, a smaller
    run than the server saw)."""
    for r in runs:
        if r.num_counted is not None and r.num_counted > len(r.errors):
            raise TraceError(r.path, fewer_rows(
                f"lists {len(r.errors)} requests, but its own count says {r.num_counted} "
                "(aggregated_metrics.num_requests)",
                f"aggregated_metrics.num_requests is set to {len(r.errors)}"),
                field="individual_request_metrics")


def _missing_runs(meta: Mapping[str, Any], runs: Sequence[_Run]) -> list[str]:
    """The runs the metadata plans (each scenario at each concurrency) with no file: not
    run, or the experiment was stopped before them (genai-bench's loader warns of them too)."""
    scenarios, levels = meta.get("traffic_scenario"), meta.get("num_concurrency")
    if not isinstance(scenarios, list) or not isinstance(levels, list):
        return []
    have = {(r.scenario, r.users) for r in runs}
    missing = [f"{s} concurrency {n}" for s in scenarios for n in levels if (s, n) not in have]
    if not missing:
        return []
    return [f"{METADATA} plans {counted(len(missing), 'run')} with no result file "
            f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): not run, or "
            "the experiment stopped before them; read without them"]


def _max_tokens(run: _Run, meta: Mapping[str, Any]) -> float:
    """The ``max_tokens`` every request of a run asked for: ``--additional-request-params``'
    own where it gives one (spread over the scenario's in the body, ``openai_user.py``
    ``chat``), else ``D(I,O)``'s O; NaN where it was drawn per request (``N``, ``U``) or not
    sent (``dataset``)."""
    params = meta.get("additional_request_params")
    given = params.get("max_tokens") if isinstance(params, dict) else None
    if given is not None:  # checked by _metadata
        return float(given)
    found = DETERMINISTIC.fullmatch(run.scenario)
    return float(found.group(2)) if found else math.nan


def _ignore_eos(meta: Mapping[str, Any], runs: Sequence[_Run]) -> bool | None:
    """What each request sent as ``ignore_eos``: true for a text scenario on the ``vllm`` or
    ``sglang`` backend, false for ``dataset`` there or on ``openai`` (not sent); None: unknown."""
    backend = meta.get("api_backend")
    if backend == OPENAI_BACKEND:
        return False
    if backend in IGNORE_EOS_BACKENDS:
        modes = {r.scenario == "dataset" for r in runs}
        return None if len(modes) > 1 else not modes.pop()
    return None


def _config(meta: Mapping[str, Any], runs: Sequence[_Run]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, name in (("api_model_name", "model"), ("api_backend", "api_backend"),
                      ("task", "task"), ("server_version", "server_version"),
                      ("server_gpu_type", "server_gpu_type"),
                      ("server_gpu_count", "server_gpu_count")):
        if isinstance(meta.get(key), str) and meta[key]:
            config[name] = meta[key]
    config.update(server_config(meta)[0])
    engine = GENAI_BENCH_ENGINES.get(str(meta.get("server_engine")))
    if engine:
        config["server_engine"] = engine
    if len(runs) == 1:
        config["max_concurrency"] = runs[0].users
    tokens = {_max_tokens(r, meta) for r in runs}
    if len(tokens) == 1 and math.isfinite(t := tokens.pop()):
        config["max_tokens"] = int(t)
    eos = _ignore_eos(meta, runs)
    if eos is not None:
        config["ignore_eos"] = eos
    return config


def _in_run_file(exc: TraceError, runs: Sequence[_Run], ok: npt.NDArray[np.bool_]) -> TraceError:
    """``exc``, of a row of the runs' returned requests read together, as the run's file and
    its request there: a folder's "row 9" named none of its files (the second run's first)."""
    if exc.row is None:
        return exc
    i = int(np.flatnonzero(ok)[exc.row])
    for run in runs:
        if i < len(run.errors):
            return TraceError(run.path, exc.problem,
                              field=f"individual_request_metrics[{i}].{exc.field or ''}")
        i -= len(run.errors)
    return exc


def read_genai_bench(path: Path, default_tier: str,
                     max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read a genai-bench experiment folder, its ``experiment_metadata.json`` (its folder
    is read) or one run's result file: one closed-loop stage a run, in the order they ran."""
    meta_path, files = _files(path)
    meta = _metadata(meta_path) if meta_path is not None else {}
    runs = _in_run_order([_read_run(f, meta) for f in files], meta, meta_path)
    _refuse(meta, meta_path, runs)
    opts = _cmd_options(meta)
    notes = _missing_runs(meta, runs) if path.is_dir() or path.name == METADATA else []
    _refuse_cut_runs(runs)
    stages, sent_parts, start = [], [], 0.0
    for run in runs:
        sent = _schedule(run)
        stages.append(_stage(run, meta, start, notes))
        sent_parts.append(start + sent)
        start += max(run.run_s, float(np.nanmax(sent + np.nan_to_num(run.e2e)))) + 1.0
    cat = np.concatenate
    ok = ~cat([r.failed for r in runs])
    sent_all = cat(sent_parts)
    status = [s for r in runs for s in _phases(r, opts)]
    labels = [r.label for r in runs for _ in r.errors]
    unstreamed = unstreamed_note(opts)
    e2e = cat([r.e2e for r in runs])
    ttft = e2e.copy() if unstreamed else cat([r.ttft for r in runs])  # its placeholder
    recorded = cat([np.full(len(r.errors), _max_tokens(r, meta)) for r in runs])
    try:
        workload, counts, warnings = finish_columns(
            path, "genai-bench", prompt=cat([r.prompt for r in runs])[ok],
            output=cat([r.output for r in runs])[ok], arrival=sent_all[ok],
            fields={"prompt_tokens": "num_input_tokens", "output_tokens": "num_output_tokens",
                    "arrival_s": "(no send time)", "max_output_tokens": "max_tokens"},
            default_tier=default_tier,
            max_output=recorded[ok] if np.isfinite(recorded).any() else None,
            max_output_rule=max_output_rule)
    except TraceError as exc:
        raise _in_run_file(exc, runs, ok) from None
    keep = np.flatnonzero(ok)[workload.request_id]
    counts = {**counts, "num_rows_read": len(ok), "num_failed": int((~ok).sum()),
              "num_warmup": status.count("warmup"), "num_cooldown": status.count("cooldown")}
    notes = [*_notes(runs, meta, recorded[ok], max_output_rule), *notes, *server_config(meta)[1],
             *([unstreamed] if unstreamed else [])]
    # the send times were rebuilt here (_schedule): a run's users all start at once, so its
    # first requests share their time on purpose; the file has no clock to be coarse
    workload, warnings = without_shared_times(workload, warnings)
    return build_recording(path, "genai-bench", workload,
                           ttft=ttft[keep], e2e=e2e[keep],
                           status=[status[i] for i in keep.tolist()],
                           stage=[labels[i] for i in keep.tolist()],
                           itl_mean=np.zeros(len(keep)) if unstreamed else None,
                           config=_config(meta, runs), counts=counts,
                           notes=[*notes, *warnings], stages=tuple(stages),
                           sent_s=sent_all[keep], tool=_tool(meta))


def _tool(meta: Mapping[str, Any]) -> str:
    version = meta.get("benchmark_version")
    return f"{TOOL} {version}" if isinstance(version, str) and version else TOOL


def _notes(runs: Sequence[_Run], meta: Mapping[str, Any], recorded: FloatArray,
           rule: MaxOutputRule | None) -> list[str]:
    """What was assumed of the experiment as a whole."""
    notes = [
        ("times: genai-bench's, from time.monotonic() before each POST to the end of the "
         "response (E2E)" if unstreamed_note(_cmd_options(meta)) else
         "times: genai-bench's, from time.monotonic() before each POST to the first streamed "
         "chunk with content (TTFT) and to the end of the stream (E2E)") + "; tokens: the server's "
        "usage (genai-bench's tokenizer count where the server sent none, which the file does "
        "not tell apart)",
        "no send time in the files: each run is a closed loop of its users ("
        + ("genai-bench's async runner, --execution-engine async: its tasks each sending the "
           "next request when their last returned" if _cmd_options(meta).get(
               "--execution-engine", "").lower() == "async" else "Locust, wait_time constant(0)")
        + ", all started at once), replayed by as many simulated users "
        "sending its requests in the file's order (the order they returned); their measured "
        "send times are rebuilt the same way (each sent when the first user was free, at the "
        "end of its last request), so the measured output tokens/s is over that schedule, "
        "not the run's clock"]
    if not meta:
        notes.append(f"no {METADATA} beside the file: the model, backend, ignore_eos and the "
                     "run's limits are unknown")
    if len(runs) > 1:
        notes.append(f"{len(runs)} runs of one experiment, one stage each, in the order "
                     "genai-bench ran them (its scenarios, each at its concurrencies), about a "
                     "second apart (their run_duration and genai-bench's sleep of 1 s)")
    errors = [e for r in runs for e in r.errors]
    if any(errors):
        said = _reasons(errors, [m for r in runs for m in r.messages])
        notes.append(f"{counted(sum(map(bool, errors)), 'request')} failed ({said}): "
                     "genai-bench keeps no tokens nor times of a failed request, so they are "
                     "dropped, neither simulated nor measured (each held its user a while)")
    notes.append(max_tokens_note(recorded if np.isfinite(recorded).any() else None, rule))
    if _ignore_eos(meta, runs) is True:
        notes.append(f"every request asked for ignore_eos (--api-backend "
                     f"{meta.get('api_backend')} with a text scenario): each realised output "
                     "is what was asked")
    return notes
