"""What :func:`kvbudget.results.recordings.read_recording` gives: :class:`Recording` (the
workload a recorded run offered, what it measured per request, the server's settings it
records) and its :class:`RecordedStage` load stages, built by :func:`build_recording`, the one
constructor every format reader (``recorded_*.py``) calls; and :func:`read_replay_meta`, a
``kvbudget replay`` run directory's ``replay.json``.

The readers import these from here and :mod:`~kvbudget.results.recordings` imports the
readers, so the imports run one way.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_fields import load_json
from kvbudget.results.recorded_whole_answer import (
    CLIENT_READ,
    GATEWAY_READ,
    reader_of,
    whole_answer_note,
    whole_answer_rows,
    whole_answer_rows_of,
)
from kvbudget.results.records import RECORD_COLUMNS
from kvbudget.results.vllm_releases import server_release_note
from kvbudget.workloads.closed_loop import Conversations
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

RECORDING_FORMATS: tuple[str, ...] = ("records", "run", "vllm-bench", "guidellm", "aiperf",
                                     "inference-perf", "llm-load-test", "multi-round-qa",
                                     "llmd-report", "evalscope", "otel", "genai-bench",
                                     "dynamo-trace")
"""Names accepted by :func:`read_recording`'s ``format`` (``--records-format``)."""

MEASUREMENT_COLUMNS: tuple[str, ...] = ("ttft_s", "e2e_s", "status", "stage")
"""The generic records format's columns besides the trace format's."""

COMPLETED_WORDS = frozenset({"", "completed", "complete", "ok", "success", "successful",
                             "succeeded", "finished", "200"})
"""``status`` values that mean the request finished (compared lower-case)."""

OUTSIDE_WINDOW_STATUSES = frozenset({"warmup", "cooldown", "after_window", "after_limit"})
"""``status`` values of requests a load tool sent and the server answered but the tool left
out of its measured statistics: its warm-up and cool-down, those GuideLLM sent after the
window of a benchmark with no cool-down had closed (``after_window``) and those its workers
sent after a time limit (``after_limit``)."""

WARMUP_FAILED_PREFIX = "warmup "
"""What a warm-up request's ``status`` begins with where it failed or was cancelled (``warmup
error (TimeoutError)``, ``warmup cancelled``: AIPerf's warm-up phase writes its failed records
as the profiling phase's, their error kept): not in :data:`OUTSIDE_WINDOW_STATUSES`, so a
comparison counts it among the requests the recording shows not completed."""


def is_warmup(status: str) -> bool:
    """Whether ``status`` is a warm-up request's, completed (``warmup``) or failed
    (:data:`WARMUP_FAILED_PREFIX`)."""
    return status == "warmup" or status.startswith(WARMUP_FAILED_PREFIX)

MEASURED_COLUMNS: tuple[str, ...] = ("request_id", "tier", "arrival_s", "prompt_tokens",
                                     "output_tokens", "status", "stage", "ttft_s", "tpot_s",
                                     "e2e_s", "itl_mean_s", "usable")
"""Columns of :attr:`Recording.measured` (one row per workload request, in the same order).
``arrival_s`` is when the request was sent (the workload's ``arrival_s``, unless a capped
run's request waited for a slot); ``status`` is ``completed``, what the file said (``error``, ``timeout``, ``incomplete``...)
or one of :data:`OUTSIDE_WINDOW_STATUSES`;
``usable`` is True for a completed request with a finite TTFT and E2E: the rows every measured
statistic uses."""

SERVER_MEASURED_COLUMNS: tuple[str, ...] = ("server_queue_s", "server_ttft_s")
"""Columns :attr:`Recording.measured` has besides :data:`MEASURED_COLUMNS` where the file
saved the server's own per-request figures (``vllm bench serve`` 0.33 and later:
``server_queue_times``, ``server_ttfts``), NaN where the server sent none or the request is not
usable: a vLLM server's time from its scheduler queueing the request to scheduling it, and
from scheduling it to its first token (:func:`~kvbudget.studies.first_token.
measured_front_end` says what the client's TTFT holds besides)."""

FloatArray = npt.NDArray[np.float64]

LOAD_MODES: tuple[str, ...] = ("open", "closed", "capped", "unknown")
"""How a load tool offered a stage's requests: ``open`` (sent at their send times whatever the
server did: a request rate, a Poisson or constant schedule, or all at once), ``closed`` (a fixed
number of users, each sending its next request when its last one ended: GuideLLM's
``synchronous``, ``concurrent`` and ``throughput`` profiles, ``vllm bench serve
--max-concurrency C`` with ``--request-rate inf``), ``capped`` (an open loop whose requests also
wait for one of ``max_concurrency`` slots: ``--request-rate R --max-concurrency C``) or
``unknown`` (a production log: replayed open loop from its send times, and said so)."""
CUT_RULES: tuple[str, ...] = ("grace", "next_status_change")
"""How a time-limited stage's requests in flight are cancelled (:attr:`RecordedStage.cut`)."""
STATUS_CHANGES: tuple[str, ...] = ("sent", "first_token", "ended")
"""A request's events a load tool may act on (:attr:`RecordedStage.status_changes`)."""


@dataclass(frozen=True)
class RecordedStage:
    """One load stage of a recording, as the load tool ran it.

    ``label`` is the stage's value in :attr:`Recording.measured`'s ``stage`` column (``""`` for
    a recording with one unlabelled stage); ``load`` one of :data:`LOAD_MODES`;
    ``request_rate`` the offered rate in requests per second of an ``open`` or ``capped`` stage
    (``math.inf``: everything at once; None when not known or closed); ``max_concurrency`` the
    users of a ``closed`` stage or the cap of a ``capped`` one.
    """

    label: str
    load: str
    request_rate: float | None = None
    max_concurrency: int | None = None
    send_times: str = "recorded"
    """``redrawn`` when the file has none and they were drawn again from the stage's rate (a
    ``vllm bench serve`` result without ``start_times``); ``issued`` when the requests are due
    at the times the load tool issued them (AIPerf's ``credit_issued_ns``), sent later;
    ``ramped`` for a closed loop whose users the tool started over a ramp-up (GuideLLM's
    ``rampup_duration``): a ``capped`` stage whose requests are due at the ramp's times, the
    later ones at its last (``results/recorded_guidellm_rampup.py``)."""
    tick_pattern: str = ""
    """A capped stage paced by its rate's ticks (AIPerf: ``constant`` or ``poisson``): a
    request is sent only at a tick, and a tick that finds every slot busy is skipped, not
    caught up (``ClosedLoop.tick_rate_per_s``); ``""``: a request waiting for a slot is sent
    when one frees (``vllm bench serve``, GuideLLM)."""
    time_limit_end_s: float | None = None
    """When the load tool's time limit stopped the stage's sending, on the recording's clock
    (the workload's ``arrival_s``): a closed or capped stage is replayed time-limited, its
    users sending nothing after it (``ClosedLoop.send_until_s``); any stage's requests still
    running :attr:`grace_s` after it are cancelled, as the tool cancels them (an open stage's
    sends are the recorded ones); None: stopped by its request count, or not known."""
    grace_s: float = math.inf
    """How long after :attr:`time_limit_end_s` the tool waited for the requests in flight
    before cancelling them (AIPerf's ``--benchmark-grace-period``; inf: it waited for all)."""
    cut: str = "grace"
    """When the tool cancels what runs past :attr:`time_limit_end_s`: ``grace`` at
    :attr:`grace_s` after it (AIPerf; GuideLLM 0.8, which also checks its limit every 0.1 s
    without a status change); ``next_status_change`` at the first of the stage's
    :attr:`status_changes` at or after it, none while nothing changes (GuideLLM 0.5-0.7, which
    check their limit only on a request's status change: the request in flight alone at the
    limit, its first token come, runs to its end; ``results/recorded_guidellm_cut.py``)."""
    status_changes: tuple[str, ...] = ()
    """The events of a ``next_status_change`` stage's requests that are status changes, of
    :data:`STATUS_CHANGES`."""

    def __post_init__(self) -> None:
        if self.load not in LOAD_MODES:
            raise ValueError(f"RecordedStage.load must be one of {', '.join(LOAD_MODES)}, got "
                             f"{self.load!r}")
        if self.time_limit_end_s is not None and not (
                math.isfinite(self.time_limit_end_s) and self.grace_s >= 0):
            raise ValueError("RecordedStage.time_limit_end_s must be finite and grace_s >= 0, "
                             f"got {self.time_limit_end_s!r}, {self.grace_s!r}")
        if self.cut not in CUT_RULES or (self.cut == "next_status_change") != bool(
                self.status_changes) or not set(self.status_changes) <= set(STATUS_CHANGES):
            raise ValueError(f"RecordedStage.cut must be one of {', '.join(CUT_RULES)}, with "
                             f"status_changes of {', '.join(STATUS_CHANGES)} only for "
                             f"next_status_change, got {self.cut!r}, {self.status_changes!r}")
        if self.load in ("closed", "capped") and not (
                isinstance(self.max_concurrency, int) and self.max_concurrency >= 1):
            raise ValueError(f"a {self.load} stage needs max_concurrency >= 1, got "
                             f"{self.max_concurrency!r}")


@dataclass(frozen=True, eq=False)
class Recording:
    """A recorded run: the workload the server saw and what was measured of each request.

    ``workload`` is what a simulation replays (arrival order). ``measured`` has the
    :data:`MEASURED_COLUMNS`, row ``i`` for workload row ``i``. ``config`` holds what the file
    says of the server and the client, under vLLM's names where they exist: ``model``, ``gpu``,
    ``num_gpu_blocks``, ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_prefix_caching``, ``tensor_parallel_size``, ``kv_capacity_tokens``, ``policy``,
    ``policy_params``, ``request_rate``, ``max_concurrency``, ``date`` (absent when unknown).
    ``counts`` says how many rows were read, simulated, measured and why the others are not.
    """

    path: str
    format: str
    workload: Workload
    measured: pd.DataFrame
    config: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    stages: tuple[RecordedStage, ...] = ()
    """The load stages in the order they ran (empty: one stage, replayed open loop)."""
    tool: str = ""
    """The load tool that wrote the file and its version when the file says (``"vllm bench
    serve 0.32.0"``, ``"guidellm 0.8.1"``), else the format's name."""
    conversations: Conversations | None = None
    """The workload rows' turns of multi-turn conversations (row ``i``'s turn before it, and
    the tool's delay after it), where the file links them: a closed or capped stage's
    simulated users send a later turn only after the turn before it ended
    (:class:`~kvbudget.workloads.closed_loop.Conversations`); None: no conversation."""

    def __len__(self) -> int:
        return len(self.workload)

    def __repr__(self) -> str:
        """What a notebook shows of a recording: the file and the tool, the requests measured,
        each load stage as the tool ran it, what the file says of the server and the client,
        the notes of reading it, then the workload's own lines; not its tables."""
        lines = [f"Recording {self.path} ({self.tool or self.format}): {counted(len(self), 'request')}, "
                 f"{self.num_usable:,} measured (completed with TTFT and E2E)"]
        lines += [f"stage {st.label or '(one)'}: {load_words(st)}" for st in self.stages]
        if self.config:
            lines.append("the file says: " + ", ".join(
                f"{k} {v}" for k, v in self.config.items() if not isinstance(v, dict)))
        lines += [f"note: {text}" for text in self.notes]
        lines += [line for line in repr(self.workload).splitlines()  # a note once
                  if line.partition(": ")[2] not in self.notes]
        return "\n".join([*lines, f".measured ({len(self.measured):,} rows), .records(), .config"])

    @property
    def num_usable(self) -> int:
        return int(self.measured["usable"].sum())

    def records(self) -> pd.DataFrame:
        """The measurements as a records table (:data:`~kvbudget.results.records.RECORD_COLUMNS`)
        so that every metric function reads them, as the server's times: a request that did not
        complete is ``rejected_overloaded`` with what the file said in ``reason``; one that got
        its whole answer in one read (:func:`~kvbudget.results.recorded_whole_answer.
        whole_answer_rows_of`) has no TTFT nor TPOT (NaN), as they are the client's read of
        it, and keeps its E2E. :attr:`measured` keeps every time as the file gave it."""
        import pandas as pd

        m = self.measured
        usable = m["usable"].to_numpy(dtype=bool)
        arrival = m["arrival_s"].to_numpy(dtype=np.float64)
        server = usable & ~whole_answer_rows_of(m)
        ttft = np.where(server, m["ttft_s"].to_numpy(dtype=np.float64), np.nan)
        e2e = np.where(usable, m["e2e_s"].to_numpy(dtype=np.float64), np.nan)
        status = np.where(usable, "completed", "rejected_overloaded").astype(object)
        reason = np.where(usable, "", m["status"].astype(str).to_numpy()).astype(object)
        missing = (~usable) & (m["status"].to_numpy() == "completed")
        reason[missing] = "not measured"
        n = len(m)
        return pd.DataFrame({
            "request_id": m["request_id"].to_numpy(dtype=np.int64),
            "tier": m["tier"].astype(str).to_numpy(),
            "arrival_s": arrival,
            "prompt_tokens": m["prompt_tokens"].to_numpy(dtype=np.int64),
            "max_output_tokens": self.workload.max_output_tokens,
            "output_tokens": m["output_tokens"].to_numpy(dtype=np.int64),
            "status": status,
            "reason": reason,
            "admitted_s": arrival,
            "first_token_s": arrival + ttft,
            "finished_s": arrival + e2e,
            "ttft_s": ttft,
            "tpot_s": np.where(server, m["tpot_s"].to_numpy(dtype=np.float64), np.nan),
            "e2e_s": e2e,
            "num_preemptions": np.zeros(n, dtype=np.int64),
            "reserved_tokens": np.zeros(n, dtype=np.int64),
        }, columns=list(RECORD_COLUMNS))

    def stages_of(self, request_ids: npt.ArrayLike) -> npt.NDArray[np.object_]:
        """The stage label (``measured``'s ``stage``, as text) of each of ``request_ids``: a
        simulation's rows of this recording, in the simulation's order."""
        labels = self.measured.set_index("request_id")["stage"].astype(str)
        return labels.reindex(np.asarray(request_ids)).to_numpy()

    def fit_rows(self, holdout: float) -> npt.NDArray[np.bool_]:
        """A mask of the requests before the last ``holdout`` fraction (by arrival): what
        ``--holdout`` fits on; ``~mask`` is the held-out part it validates on."""
        fraction = holdout
        if not 0 < fraction < 1:
            raise ValueError(f"--holdout must be a fraction in (0, 1), got {fraction!r}")
        n = len(self.workload)
        cut = round(n * (1 - fraction))
        cut = min(max(cut, 1), n - 1) if n > 1 else n
        mask = np.zeros(n, dtype=bool)
        mask[:cut] = True
        return mask


def load_words(stage: RecordedStage) -> str:
    """How the load tool offered a stage's requests, in words."""
    rate = ("all at once" if stage.request_rate == math.inf else f"{stage.request_rate:g} req/s"
            ) if stage.request_rate is not None else "no single rate recorded"  # a ramp's
    limit = "" if stage.time_limit_end_s is None else (
        f", sending until its time limit at {stage.time_limit_end_s:.3f} s")
    users = f"{stage.max_concurrency} user{'' if stage.max_concurrency == 1 else 's'}"
    if stage.load == "capped" and stage.send_times == "ramped":
        return f"closed loop of {users} ramped up{limit}"
    return {"open": f"open loop, {rate}",
            "closed": f"closed loop of {users}{limit}",
            "capped": f"open loop, {rate}, at most {stage.max_concurrency} in flight{limit}",
            }.get(stage.load, "load mode not recorded (replayed open loop from its send times)")


def build_recording(path: Path, fmt: str, workload: Workload, *, ttft: FloatArray,
                    e2e: FloatArray, status: list[str], stage: list[str],
                    itl_mean: FloatArray | None, config: dict[str, Any], counts: dict[str, int],
                    notes: list[str], output_measured: npt.NDArray[np.int64] | None = None,
                    stages: tuple[RecordedStage, ...] = (), tool: str = "",
                    sent_s: FloatArray | None = None,
                    conversations: Conversations | None = None,
                    server: tuple[FloatArray, FloatArray] | None = None) -> Recording:
    """The recording of ``workload`` with its measurement columns (in workload order).

    ``stages`` must name every label of ``stage`` (when given); ``tool`` defaults to the
    format's name; ``sent_s`` when each request was sent, the origin of its TTFT and E2E
    (default: its ``arrival_s``; later when a capped run's request waited for a slot);
    ``conversations`` the rows' turns (:attr:`Recording.conversations`); ``server`` each
    request's server-side queue time and TTFT (seconds, NaN where not sent), where the file
    has them: :data:`SERVER_MEASURED_COLUMNS`."""
    import pandas as pd

    n = len(workload)
    output = workload.output_tokens if output_measured is None else output_measured
    completed = np.array([s == "completed" for s in status], dtype=bool)
    has_ttft = np.isfinite(ttft)
    has_e2e = np.isfinite(e2e)
    usable = completed & has_ttft & has_e2e
    denom = (output - 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(usable & (denom > 0), (e2e - ttft) / np.where(denom > 0, denom, 1.0),
                        np.nan)
    tiers = np.array(workload.tier_names, dtype=object)[workload.tier]
    itl = np.full(n, np.nan) if itl_mean is None else itl_mean
    said = whole_answer_note(whole_answer_rows(usable, output, tpot, itl), usable, itl,
                             GATEWAY_READ if reader_of(config) == "the gateway" else CLIENT_READ)
    measured = pd.DataFrame({
        "request_id": workload.request_id,
        "tier": tiers,
        "arrival_s": workload.arrival_s if sent_s is None else sent_s,
        "prompt_tokens": workload.prompt_tokens,
        "output_tokens": output,
        "status": status,
        "stage": stage,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
        "itl_mean_s": itl,
        "usable": usable,
    }, columns=list(MEASURED_COLUMNS))
    if server is not None:
        for name, values in zip(SERVER_MEASURED_COLUMNS, server, strict=True):
            measured[name] = np.where(usable, values, np.nan)
    counts = dict(counts)
    counts["num_simulated"] = n
    counts["num_measured"] = int(usable.sum())
    counts["num_not_completed"] = int((~completed).sum())
    counts["num_missing_ttft"] = int((completed & ~has_ttft).sum())
    counts["num_missing_e2e"] = int((completed & has_ttft & ~has_e2e).sum())
    if counts["num_measured"] == 0:
        raise TraceError(path, "no request has a measured TTFT and E2E with a completed status "
                         f"({_count_text(counts)})" + _unstreamed_said(config, counts))
    known = {st.label for st in stages}
    if stages and not set(stage) <= known:
        raise AssertionError(f"stage labels {sorted(set(stage) - known)} have no RecordedStage")
    counts["num_stages"] = max(len(stages), 1)
    release = server_release_note(config)
    return Recording(path=str(path), format=fmt, workload=workload, measured=measured,
                     config=config, counts=counts,
                     notes=(*notes, *(n for n in (said, release) if n)),
                     stages=stages,
                     tool=tool or fmt, conversations=conversations)



def _unstreamed_said(config: Mapping[str, Any], counts: Mapping[str, int]) -> str:
    """Why a ``kvbudget serve`` directory's completed requests lack their TTFT, and what to
    do: the gateway sees no first token of an answer not streamed."""
    missing = counts.get("num_missing_ttft", 0)
    if config.get("executor") != "serve" or not missing:
        return ""
    return (f": the {counted(missing, 'completed request')} without a TTFT "
            f"{'were' if missing > 1 else 'was'} not streamed, and kvbudget serve sees no "
            "first token of a whole answer; stream (as load tools do) to record TTFT")


def _count_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.removeprefix('num_').replace('_', ' ')} {v}" for k, v in counts.items()
                     if v)


def _non_finite(value: Any, where: str) -> str | None:
    """The dotted field of the first Infinity or NaN in a JSON value, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(file)"
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def read_replay_meta(path: Path) -> dict[str, Any]:
    """A run directory's ``replay.json``: one object, no Infinity or NaN anywhere (Python's json
    reads them, JSON does not have them), ``kv_capacity_tokens`` a positive whole number and
    ``policy_params`` a table. Errors are one :class:`TraceError` naming the file and field."""
    meta = load_json(path)
    if not isinstance(meta, dict):
        raise TraceError(path, "must hold one JSON object of the replay's settings")
    bad = _non_finite(meta, "")
    if bad is not None:
        raise TraceError(path, "must be a finite number (JSON has no Infinity or NaN)",
                         field=bad)
    cap = meta.get("kv_capacity_tokens")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
        raise TraceError(path, f"must be a positive whole number of tokens, got {cap!r}"[:200],
                         field="kv_capacity_tokens")
    params = meta.get("policy_params")
    if params is not None and not isinstance(params, dict):
        raise TraceError(path, "must be a table of parameter values", field="policy_params")
    server = meta.get("server")
    if server is not None:
        _check_server(path, server, "server")
    servers = meta.get("servers")
    if servers is not None and not isinstance(servers, list):
        raise TraceError(path, "must be a list of what each upstream told", field="servers")
    for i, told in enumerate(servers or []):
        _check_server(path, told, f"servers[{i}]")
    return meta


SERVER_FACTS: dict[str, type] = {
    "model": str, "model_root": str, "max_model_len": int, "num_gpu_blocks": int,
    "block_size": int, "enable_prefix_caching": bool, "kv_cache_dtype": str, "num_engines": int,
    "num_gpu_blocks_by_engine": list, "server_engine": str}
"""What a replay's ``replay.json`` ``server`` may say of the server it ran against (its
``/v1/models`` and ``/metrics``: :meth:`kvbudget.live.server.ServerInfo.facts`), and each
one's type; counts are whole numbers of at least 1 (a list: of such counts)."""


def _check_server(path: Path, server: Any, where: str) -> None:
    """A :class:`TraceError` naming the field unless ``server`` is a table of
    :data:`SERVER_FACTS` of their types."""
    if not isinstance(server, dict):
        raise TraceError(path, "must be a table of what the server told", field=where)
    for key, value in server.items():
        kind = SERVER_FACTS.get(key)
        if kind is None:
            continue  # a later kvbudget's fact: not read here
        counts = value if kind is list and isinstance(value, list) else [value]
        bad = not isinstance(value, kind) or (kind in (int, list) and not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in counts))
        if bad:
            want = {int: "a whole number >= 1", bool: "true or false", str: "a string",
                    list: "a list of whole numbers >= 1"}[kind]
            raise TraceError(path, f"must be {want}, got {value!r}"[:200], field=f"{where}.{key}")
