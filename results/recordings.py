"""Recorded runs as input: one reader for what a real server did, request by request.

A *recording* is a run of a real server that someone measured: a production request log, a
``vllm bench serve`` result, a GuideLLM report, a ``kvbudget replay`` run directory. Calibrating
and validating the simulator offline (``kvbudget calibrate --records``, ``kvbudget validate
--records``) needs, per request, when it arrived, its prompt and output tokens, and the TTFT and
E2E its client measured (optionally its status, tier, load stage and inter-token times), plus
whatever the file says of the server's configuration. :func:`read_recording` reads any of the
formats below into one :class:`Recording`:

``records``
    The generic trace format (``docs/workloads.md``: CSV, JSON lines or Parquet, so
    ``hash_ids``, ``tier``, ``max_output_tokens`` and ``deadline_s`` work as there) plus the
    measurement columns of :data:`MEASUREMENT_COLUMNS`: ``ttft_s`` and ``e2e_s`` (seconds from
    ``arrival_s``; empty where not measured), optional ``status`` (``completed``, ``ok``,
    ``success`` or empty for a request that finished; anything else, such as ``error`` or
    ``timeout``, is a request that did not) and ``stage`` (a load phase's label).
    ``columns`` maps any of these names to the file's own, as the trace loader's ``columns``.
``run``
    A ``kvbudget replay`` (or ``kvbudget simulate --out``) run directory: ``requests.parquet``,
    ``summary.json`` and, for a replay, ``replay.json`` (the policy, its parameters and the
    gateway's KV capacity).
``vllm-bench``
    ``vllm bench serve --save-result --save-detailed`` JSON (vLLM's
    ``vllm/benchmarks/serve.py``): ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
    ``errors`` per request, with ``latencies`` and ``start_times`` in current vLLM (older
    versions have neither: E2E is then ``ttft + sum(itl)``). Arrival times come from
    ``start_times`` when present; otherwise they are reconstructed from ``request_rate``,
    ``burstiness`` and ``max_concurrency`` (see :func:`_bench_arrivals`), and the report says so.
``guidellm``
    A GuideLLM benchmarks report (JSON, ``{"benchmarks": [...]}``): every benchmark is one load
    stage; its ``requests.successful``, ``errored`` and ``incomplete`` lists give each request's
    ``prompt_tokens``, ``output_tokens`` and its start, first-token and end times (GuideLLM 0.4
    and later: ``request_start_time``, ``info.timings.first_token_iteration``,
    ``request_end_time``; 0.2-0.3: ``start_time``, ``first_token_time``, ``end_time``).

Requests that failed (a status other than completed, an error, no TTFT or no E2E) are kept in
the workload when they generated at least one token (the server did that work) and left out
of every measured statistic; each kind is counted in :attr:`Recording.counts`. Bad files raise
:class:`~kvbudget.workloads.errors.TraceError`: one line naming the file, the line or row and
the field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.records import RECORD_COLUMNS
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.errors import json_problem as _json_problem
from kvbudget.workloads.traces.options import CANONICAL_COLUMNS, TraceOptions
from kvbudget.workloads.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

RECORDING_FORMATS: tuple[str, ...] = ("records", "run", "vllm-bench", "guidellm")
"""Names accepted by :func:`read_recording`'s ``format`` (``--records-format``)."""

MEASUREMENT_COLUMNS: tuple[str, ...] = ("ttft_s", "e2e_s", "status", "stage")
"""The generic records format's columns besides the trace format's."""

COMPLETED_WORDS = frozenset({"", "completed", "complete", "ok", "success", "successful",
                             "succeeded", "finished", "200"})
"""``status`` values that mean the request finished (compared lower-case)."""

MEASURED_COLUMNS: tuple[str, ...] = ("request_id", "tier", "arrival_s", "prompt_tokens",
                                     "output_tokens", "status", "stage", "ttft_s", "tpot_s",
                                     "e2e_s", "itl_mean_s", "usable")
"""Columns of :attr:`Recording.measured` (one row per workload request, in the same order).
``status`` is ``completed`` or what the file said (``error``, ``timeout``, ``incomplete``...);
``usable`` is True for a completed request with a finite TTFT and E2E: the rows every measured
statistic uses."""

FloatArray = npt.NDArray[np.float64]

LOAD_MODES: tuple[str, ...] = ("open", "closed", "capped", "unknown")
"""How a load tool offered a stage's requests: ``open`` (sent at their send times whatever the
server did: a request rate, a Poisson or constant schedule, or all at once), ``closed`` (a fixed
number of users, each sending its next request when its last one ended: GuideLLM's
``synchronous``, ``concurrent`` and ``throughput`` profiles, ``vllm bench serve
--max-concurrency C`` with ``--request-rate inf``), ``capped`` (an open loop whose requests also
wait for one of ``max_concurrency`` slots: ``--request-rate R --max-concurrency C``) or
``unknown`` (a production log: replayed open loop from its send times, and said so)."""


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

    def __post_init__(self) -> None:
        if self.load not in LOAD_MODES:
            raise ValueError(f"RecordedStage.load must be one of {', '.join(LOAD_MODES)}, got "
                             f"{self.load!r}")
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

    def __len__(self) -> int:
        return len(self.workload)

    @property
    def num_usable(self) -> int:
        return int(self.measured["usable"].sum())

    def records(self) -> pd.DataFrame:
        """The measurements as a records table (:data:`~kvbudget.results.records.RECORD_COLUMNS`)
        so that every metric function reads them; a request that did not complete is
        ``rejected_overloaded`` with what the file said in ``reason``."""
        import pandas as pd

        m = self.measured
        usable = m["usable"].to_numpy(dtype=bool)
        arrival = m["arrival_s"].to_numpy(dtype=np.float64)
        ttft = np.where(usable, m["ttft_s"].to_numpy(dtype=np.float64), np.nan)
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
            "tpot_s": np.where(usable, m["tpot_s"].to_numpy(dtype=np.float64), np.nan),
            "e2e_s": e2e,
            "num_preemptions": np.zeros(n, dtype=np.int64),
            "reserved_tokens": np.zeros(n, dtype=np.int64),
        }, columns=list(RECORD_COLUMNS))

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


def _status_is_completed(values: Sequence[str]) -> npt.NDArray[np.bool_]:
    return np.array([str(v).strip().lower() in COMPLETED_WORDS for v in values], dtype=bool)


def _normalise_status(values: Sequence[str]) -> list[str]:
    out = []
    for v in values:
        text = str(v).strip()
        out.append("completed" if text.lower() in COMPLETED_WORDS else text)
    return out


def _build(path: Path, fmt: str, workload: Workload, *, ttft: FloatArray, e2e: FloatArray,
           status: list[str], stage: list[str], itl_mean: FloatArray | None,
           config: dict[str, Any], counts: dict[str, int], notes: list[str],
           output_measured: npt.NDArray[np.int64] | None = None) -> Recording:
    """The recording of ``workload`` with its measurement columns (in workload order)."""
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
    measured = pd.DataFrame({
        "request_id": workload.request_id,
        "tier": tiers,
        "arrival_s": workload.arrival_s,
        "prompt_tokens": workload.prompt_tokens,
        "output_tokens": output,
        "status": status,
        "stage": stage,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
        "itl_mean_s": np.full(n, np.nan) if itl_mean is None else itl_mean,
        "usable": usable,
    }, columns=list(MEASURED_COLUMNS))
    counts = dict(counts)
    counts["num_simulated"] = n
    counts["num_measured"] = int(usable.sum())
    counts["num_not_completed"] = int((~completed).sum())
    counts["num_missing_ttft"] = int((completed & ~has_ttft).sum())
    counts["num_missing_e2e"] = int((completed & has_ttft & ~has_e2e).sum())
    if counts["num_measured"] == 0:
        raise TraceError(path, "no request has a measured TTFT and E2E with a completed status "
                         f"({_count_text(counts)})")
    return Recording(path=str(path), format=fmt, workload=workload, measured=measured,
                     config=config, counts=counts, notes=tuple(notes))


def _count_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.removeprefix('num_').replace('_', ' ')} {v}" for k, v in counts.items()
                     if v)


MAX_MEASURED_S = 86_400.0
"""The longest time to first token or end to end a recording may hold (a day)."""


def _check_times(path: Path, name: str, values: FloatArray, rows: npt.NDArray[np.int64],
                 line_of: Any) -> None:
    """Measured times must be >= 0 and at most a day where present (NaN is a missing
    measurement): no server keeps a request open for a day, so 1e12 s is a wrong unit."""
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(values) & ((values < 0) | (values > MAX_MEASURED_S)) | np.isinf(values)
    if bad.any():
        i = int(np.argmax(bad))
        row = int(rows[i])
        problem = (f"not finite: {values[i]}" if not np.isfinite(values[i])
                   else f"negative time: {values[i]:g}" if values[i] < 0
                   else f"implausibly long: {values[i]:g} s (over a day; are the times in "
                   "seconds?)")
        if line_of is not None:
            raise TraceError(path, problem, line=line_of(row), field=name)
        raise TraceError(path, problem, row=row, field=name)


# ---------------------------------------------------------------------------------------------
# detection


def detect_recording_format(path: Path) -> str:
    """``run`` for a directory, ``vllm-bench`` or ``guidellm`` for a JSON document with their
    keys, else ``records`` (the generic trace format with measurements)."""
    if path.is_dir():
        return "run"
    if not path.exists():
        raise TraceError(path, "no such file or run directory")
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    text = head.lstrip()
    if text[:1] == b"{":
        # a JSON document, or JSON lines (each line a request)
        try:
            doc = json.loads(text.split(b"\n", 1)[0])
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            doc = _load_json(path)
        if isinstance(doc, dict):
            if "benchmarks" in doc:
                return "guidellm"
            if "input_lens" in doc or "ttfts" in doc:
                return "vllm-bench"
            if "completed" in doc and "duration" in doc:
                raise TraceError(path, "is a vllm bench serve result without per-request data; "
                                 "run vllm bench serve with --save-detailed",
                                 field="input_lens")
            if not {"arrival_s", "prompt_tokens", "output_tokens"} & set(doc):
                raise TraceError(path, "cannot tell the recording format (a JSON object that is "
                                 "neither a vllm bench serve result, a GuideLLM report nor a "
                                 "record of the generic format); pass a format "
                                 f"({', '.join(RECORDING_FORMATS)})")
    return "records"


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, RecursionError) as exc:
        raise TraceError(path, f"not valid JSON ({_json_problem(exc)})",
                         line=getattr(exc, "lineno", 1)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None


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
    meta = _load_json(path)
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
    return meta


def read_recording(path: str | Path, *, format: str | None = None,
                   columns: Mapping[str, str] | None = None, default_tier: str = "interactive",
                   seed: int = 0) -> Recording:
    """Read a recorded run (see the module docstring for the formats).

    ``columns`` maps canonical names (the trace format's and :data:`MEASUREMENT_COLUMNS`) to a
    records file's own; ``default_tier`` is the tier of requests whose file has none; ``seed``
    feeds the arrival reconstruction of a ``vllm bench`` result without ``start_times``.
    """
    path = Path(path)
    fmt = format or detect_recording_format(path)
    if fmt not in RECORDING_FORMATS:
        raise TraceError(path, f"unknown recording format {fmt!r}; known: "
                         f"{', '.join(RECORDING_FORMATS)}", field="format")
    if fmt == "run":
        return _read_run_dir(path, default_tier)
    if fmt == "vllm-bench":
        return _read_vllm_bench(path, default_tier, seed)
    if fmt == "guidellm":
        return _read_guidellm(path, default_tier)
    return _read_records(path, columns or {}, default_tier)


# ---------------------------------------------------------------------------------------------
# the generic records format


def _read_records(path: Path, columns: Mapping[str, str], default_tier: str) -> Recording:
    from kvbudget.workloads.traces import load_trace
    from kvbudget.workloads.traces._csv import read_csv_columns, split_header
    from kvbudget.workloads.traces._files import file_facts, line_of_row
    from kvbudget.workloads.traces._tabular import generic_kind

    for key in columns:
        if key not in CANONICAL_COLUMNS and key not in MEASUREMENT_COLUMNS:
            raise TraceError(path, f"unknown column name {key!r} in the column mapping (known: "
                             f"{', '.join((*CANONICAL_COLUMNS, *MEASUREMENT_COLUMNS))})",
                             field="columns")
    trace_cols = {k: v for k, v in columns.items() if k in CANONICAL_COLUMNS}
    names = {c: columns.get(c, c) for c in (*MEASUREMENT_COLUMNS, "id")}
    loaded = load_trace(path, TraceOptions(format="generic", columns=trace_cols or None,
                                           default_tier=default_tier))
    workload = loaded.workload
    kind = generic_kind(path)
    numbers: dict[str, FloatArray] = {}
    labels: dict[str, list[str]] = {}
    wanted = {"ttft_s": "number", "e2e_s": "number", "status": "label", "stage": "label",
              "id": "number"}
    line_of: Any = None
    if kind == "parquet":
        import pyarrow.parquet as pq

        schema_names = pq.read_schema(path).names
        present = [c for c in wanted if names[c] in schema_names]
        table = pq.read_table(path, columns=[names[c] for c in present])
        for canon in present:
            col = table.column(names[canon])
            if wanted[canon] == "number":
                try:
                    numbers[canon] = np.asarray(col.to_numpy(zero_copy_only=False),
                                                dtype=np.float64)
                except (ValueError, TypeError):
                    raise TraceError(path, "must be a number column", field=names[canon]) from None
            else:
                labels[canon] = ["" if v is None else str(v) for v in col.to_pylist()]
        num_rows = table.num_rows
    else:
        facts = file_facts(path)
        if kind == "jsonl":
            from kvbudget.workloads.traces._jsonl import read_jsonl_columns

            try:
                first = json.loads(facts.first_line)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"{path}: line 1: not a JSON object ({exc})") from None
            if not isinstance(first, dict):
                raise ValueError(f"{path}: line 1: not a JSON object")
            present = [c for c in wanted if names[c] in first]
            jcols = read_jsonl_columns(facts, {names[c]: wanted[c] for c in present},  # type: ignore[misc]
                                       fmt="records", required=[])
            numbers = {c: jcols.numbers[names[c]] for c in present if wanted[c] == "number"
                       and names[c] in jcols.numbers}
            lab = {c: jcols.labels[names[c]] for c in present if wanted[c] == "label"
                   and names[c] in jcols.labels}
            num_rows = jcols.num_rows
            line_of = lambda row: line_of_row(path, row, header_lines=0)  # noqa: E731
        else:
            header = split_header(facts.first_line)
            present = [c for c in wanted if names[c] in header]
            ccols = read_csv_columns(facts, {names[c]: wanted[c] for c in present},  # type: ignore[misc]
                                     fmt="records")
            numbers = {c: ccols.numbers[names[c]] for c in present if wanted[c] == "number"}
            lab = {c: ccols.labels[names[c]] for c in present if wanted[c] == "label"}
            num_rows = ccols.num_rows
            line_of = lambda row: line_of_row(path, row, header_lines=1)  # noqa: E731
        for canon, (codes, values) in lab.items():
            table_values = [*values, ""]
            labels[canon] = [table_values[c] for c in codes.tolist()]
    for canon in ("ttft_s", "e2e_s"):
        if canon not in numbers:
            raise TraceError(path, f"missing column {names[canon]!r} needed by the records "
                             "format (the measured time from arrival to the first token / to "
                             "the last token, in seconds)", line=1 if line_of else None,
                             field=names[canon])
    # workload row -> file row
    if "id" in numbers:
        ids = numbers["id"]
        order = np.argsort(ids, kind="stable")
        pos = np.searchsorted(ids[order], workload.request_id.astype(np.float64))
        rows = order[np.clip(pos, 0, len(order) - 1)].astype(np.int64)
    else:
        rows = workload.request_id.astype(np.int64)
    if len(rows) and int(rows.max()) >= num_rows:
        raise TraceError(path, "the measurement columns have fewer rows than the trace columns")
    ttft = numbers["ttft_s"][rows]
    e2e = numbers["e2e_s"][rows]
    file_rows = rows
    for canon, times in (("ttft_s", ttft), ("e2e_s", e2e)):
        _check_times(path, names[canon], times, file_rows, line_of)
    bad = np.isfinite(ttft) & np.isfinite(e2e) & (e2e < ttft)
    if bad.any():
        i = int(np.argmax(bad))
        problem = f"{e2e[i]:g} is below ttft_s {ttft[i]:g}"
        if line_of is not None:
            raise TraceError(path, problem, line=line_of(int(file_rows[i])), field=names["e2e_s"])
        raise TraceError(path, problem, row=int(file_rows[i]), field=names["e2e_s"])
    status_all = labels.get("status")
    status = (_normalise_status([status_all[r] for r in rows.tolist()]) if status_all is not None
              else ["completed"] * len(rows))
    stage_all = labels.get("stage")
    stage = ([stage_all[r] for r in rows.tolist()] if stage_all is not None
             else [""] * len(rows))
    counts = {"num_rows_read": loaded.report.rows_read}
    for reason, count in loaded.report.dropped:
        counts["num_dropped_" + reason.split(" (")[0].replace(" ", "_")] = count
    notes = list(loaded.report.warnings)
    return _build(path, "records", workload, ttft=ttft, e2e=e2e, status=status, stage=stage,
                  itl_mean=None, config={}, counts=counts, notes=notes)


# ---------------------------------------------------------------------------------------------
# JSON formats: columns -> the trace loader's validation (RawTrace, finish)


def _finish_columns(path: Path, fmt: str, *, prompt: FloatArray, output: FloatArray,
                    arrival: FloatArray, fields: dict[str, str], default_tier: str,
                    tier_labels: tuple[npt.NDArray[np.int64], tuple[str, ...]] | None = None,
                    max_output: FloatArray | None = None) -> tuple[Workload, dict[str, int],
                                                                    list[str]]:
    """A workload from per-request columns, validated and transformed as a trace file's
    (errors name the row and the file's field); request ids are the 0-based rows."""
    from kvbudget.workloads.traces._finish import RawTrace, Streams, finish

    raw = RawTrace(path=path, format=fmt, prompt=prompt, output=output, arrival=arrival,
                   max_output=max_output, fields=fields, rows_read=len(prompt),
                   labels={} if tier_labels is None else {"tier": tier_labels})
    loaded = finish(raw, TraceOptions(default_tier=default_tier), Streams.from_seed(0))
    counts = {"num_rows_read": loaded.report.rows_read}
    for reason, count in loaded.report.dropped:
        counts["num_dropped_" + reason.split(" (")[0].replace(" ", "_")] = count
    return loaded.workload, counts, list(loaded.report.warnings)


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    return math.nan


def _numbers_of(path: Path, doc: Mapping[str, Any], key: str, n: int | None,
                *, required: bool = True) -> FloatArray | None:
    values = doc.get(key)
    if values is None:
        if required:
            raise TraceError(path, "missing (run vllm bench serve with --save-detailed)",
                             field=key)
        return None
    if not isinstance(values, list):
        raise TraceError(path, f"must be a list, got {type(values).__name__}", field=key)
    if n is not None and len(values) != n:
        raise TraceError(path, f"has {len(values)} entries, input_lens has {n}", field=key)
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise TraceError(path, f"not a number: {v!r}", row=i, field=key)
        out[i] = float(v)
    return out


def _bench_arrivals(doc: Mapping[str, Any], latencies: FloatArray, n: int, seed: int,
                    notes: list[str]) -> FloatArray:
    """When each request was sent, for a ``vllm bench serve`` result without ``start_times``.

    vLLM's client draws the gaps between requests from a gamma distribution of mean
    ``1 / request_rate`` and shape ``burstiness`` (Poisson at 1), and sends everything at once
    for ``request_rate = inf``; with ``max_concurrency`` a request also waits until one of the
    ``max_concurrency`` requests before it finishes (its latency, known here, tells when). The
    draws themselves are not in the file: they are drawn again from ``seed``.
    """
    rate = doc.get("request_rate", "inf")
    rate_f = math.inf if rate in ("inf", None) else float(rate)
    burst = float(doc.get("burstiness") or 1.0)
    conc = doc.get("max_concurrency")
    intended = np.zeros(n)
    if math.isfinite(rate_f) and rate_f > 0:
        rng = np.random.default_rng(np.random.SeedSequence(seed))
        gaps = rng.gamma(shape=burst, scale=1.0 / (rate_f * burst), size=n)
        gaps[0] = 0.0
        intended = np.cumsum(gaps)
        notes.append(f"no start_times in the file: arrivals redrawn at {rate_f:g} req/s "
                     f"(gamma gaps, burstiness {burst:g}, seed {seed}); the real draws differ")
    if isinstance(conc, int) and conc > 0 and n > conc:
        import heapq

        lat = np.where(np.isfinite(latencies), latencies, 0.0)
        start = np.zeros(n)
        free: list[float] = []
        for i in range(n):
            t = float(intended[i])
            if len(free) >= conc:
                t = max(t, heapq.heappop(free))
            start[i] = t
            heapq.heappush(free, t + float(lat[i]))
        notes.append(f"no start_times in the file: a request starts when one of the "
                     f"max_concurrency={conc} before it finishes (from the measured latencies)")
        return start
    if not math.isfinite(rate_f):
        notes.append("no start_times in the file and request_rate inf: every request arrives "
                     "at 0")
    return intended


def _read_vllm_bench(path: Path, default_tier: str, seed: int) -> Recording:
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise TraceError(path, "is not a JSON object (a vllm bench serve result)")
    prompt = _numbers_of(path, doc, "input_lens", None)
    assert prompt is not None
    n = len(prompt)
    output = _numbers_of(path, doc, "output_lens", n)
    ttft = _numbers_of(path, doc, "ttfts", n)
    assert output is not None and ttft is not None
    latencies = _numbers_of(path, doc, "latencies", n, required=False)
    starts = _numbers_of(path, doc, "start_times", n, required=False)
    itls = doc.get("itls")
    if itls is not None and (not isinstance(itls, list) or len(itls) != n):
        raise TraceError(path, f"must be a list of {n} lists", field="itls")
    errors = doc.get("errors") or [""] * n
    if not isinstance(errors, list) or len(errors) != n:
        raise TraceError(path, f"must be a list of {n} strings", field="errors")
    itl_sum = np.full(n, np.nan)
    itl_mean = np.full(n, np.nan)
    if itls is not None:
        for i, row in enumerate(itls):
            if not isinstance(row, list) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in row):
                raise TraceError(path, "must be a list of numbers", row=i, field="itls")
            if row:
                itl_sum[i] = float(sum(row))
                itl_mean[i] = itl_sum[i] / len(row)
            else:
                itl_sum[i] = 0.0
    failed = np.array([bool(e) for e in errors], dtype=bool)
    # vLLM writes ttft 0.0 and no output for a request that failed
    e2e = latencies if latencies is not None else ttft + itl_sum
    notes: list[str] = []
    if latencies is None:
        notes.append("no latencies in the file: E2E = TTFT + the sum of the inter-token times")
    if starts is not None and np.isfinite(starts).all():
        arrival = starts - float(starts.min())
    else:
        arrival = _bench_arrivals(doc, e2e, n, seed, notes)
    for name, values in (("ttfts", ttft), ("latencies", e2e)):
        _check_times(path, name, np.where(failed, np.nan, values), np.arange(n), None)
    workload, counts, warnings = _finish_columns(
        path, "vllm-bench", prompt=prompt, output=np.where(failed & ~np.isfinite(output), 0,
                                                           output),
        arrival=arrival, fields={"prompt_tokens": "input_lens", "output_tokens": "output_lens",
                                 "arrival_s": "start_times"}, default_tier=default_tier)
    rows = workload.request_id
    status = ["error" if failed[r] else "completed" for r in rows.tolist()]
    counts["num_failed"] = int(failed.sum())
    config: dict[str, Any] = {}
    for key, name in (("model_id", "model"), ("request_rate", "request_rate"),
                      ("max_concurrency", "max_concurrency"), ("date", "date"),
                      ("burstiness", "burstiness")):
        if doc.get(key) is not None:
            config[name] = doc[key]
    rate = doc.get("request_rate")
    stage = f"{rate} req/s" if rate is not None else ""
    return _build(path, "vllm-bench", workload, ttft=np.where(failed, np.nan, ttft)[rows],
                  e2e=np.where(failed, np.nan, e2e)[rows], status=status,
                  stage=[stage] * len(rows), itl_mean=itl_mean[rows], config=config,
                  counts=counts, notes=[*notes, *warnings])


# ---------------------------------------------------------------------------------------------
# GuideLLM


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _first_number(*values: Any) -> float:
    for v in values:
        x = _number(v)
        if math.isfinite(x):
            return x
    return math.nan


def _guidellm_stage(bench: Mapping[str, Any], index: int) -> str:
    strategy = _dig(bench, "config", "strategy") or _dig(bench, "args", "strategy") or {}
    if not isinstance(strategy, dict):
        return f"benchmark {index}"
    kind = str(strategy.get("type_") or strategy.get("type") or "benchmark")
    rate = strategy.get("rate")
    streams = strategy.get("streams") or strategy.get("max_concurrency")
    if rate is not None:
        return f"{index}: {kind} {rate} req/s"
    if streams is not None:
        return f"{index}: {kind} x{streams}"
    return f"{index}: {kind}"


def _read_guidellm(path: Path, default_tier: str) -> Recording:
    doc = _load_json(path)
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise TraceError(path, "must be a non-empty list of benchmarks (a GuideLLM report)",
                         field="benchmarks")
    prompt: list[float] = []
    output: list[float] = []
    start: list[float] = []
    first: list[float] = []
    end: list[float] = []
    status: list[str] = []
    stage: list[str] = []
    itl: list[float] = []
    notes: list[str] = []
    counts: dict[str, int] = {}
    for b, bench in enumerate(benchmarks):
        if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
            raise TraceError(path, "must hold a 'requests' object (successful, errored, "
                             "incomplete)", field=f"benchmarks[{b}].requests")
        label = _guidellm_stage(bench, b)
        listed = 0
        for kind in ("successful", "errored", "incomplete"):
            rows = bench["requests"].get(kind) or []
            if not isinstance(rows, list):
                raise TraceError(path, "must be a list", field=f"benchmarks[{b}].requests.{kind}")
            listed += len(rows)
            counts[f"num_{kind}"] = counts.get(f"num_{kind}", 0) + len(rows)
            for r, req in enumerate(rows):
                where = f"benchmarks[{b}].requests.{kind}[{r}]"
                if not isinstance(req, dict):
                    raise TraceError(path, "must be an object", field=where)
                timings = _dig(req, "info", "timings") or {}
                t0 = _first_number(req.get("request_start_time"), req.get("start_time"),
                                   timings.get("request_start"), timings.get("resolve_start"))
                if not math.isfinite(t0):
                    raise TraceError(path, "has no start time (request_start_time or "
                                     "start_time)", field=where)
                ttft_ms = _number(req.get("time_to_first_token_ms"))
                t_first = _first_number(req.get("first_token_time"),
                                        timings.get("first_token_iteration"),
                                        timings.get("first_iteration"),
                                        t0 + ttft_ms / 1000.0 if math.isfinite(ttft_ms) else None)
                latency = _number(req.get("request_latency"))
                t_end = _first_number(req.get("request_end_time"), req.get("end_time"),
                                      timings.get("request_end"),
                                      t0 + latency if math.isfinite(latency) else None)
                p = _first_number(req.get("prompt_tokens"),
                                  _dig(req, "input_metrics", "text_tokens"),
                                  _dig(req, "input_metrics", "total_tokens"))
                o = _first_number(req.get("output_tokens"),
                                  _dig(req, "output_metrics", "text_tokens"),
                                  _dig(req, "output_metrics", "total_tokens"))
                if not math.isfinite(p):
                    raise TraceError(path, "has no prompt_tokens", field=where)
                prompt.append(p)
                output.append(o if math.isfinite(o) else 0.0)
                start.append(t0)
                first.append(t_first)
                end.append(t_end)
                status.append("completed" if kind == "successful" else kind)
                stage.append(label)
                itl.append(_number(req.get("inter_token_latency_ms")) / 1000.0)
        total = _first_number(_dig(bench, "request_totals", "total"),
                              _dig(bench, "scheduler_metrics", "requests_made", "total"))
        if math.isfinite(total) and total > listed:
            notes.append(f"{label}: the report lists {listed} of its {int(total)} requests (a "
                         "sample): the simulation offers only those, a lighter load than the "
                         "server saw; run GuideLLM so that it keeps every request")
    n = len(prompt)
    arr_start = np.array(start)
    workload, c2, warnings = _finish_columns(
        path, "guidellm", prompt=np.array(prompt), output=np.array(output),
        arrival=arr_start - float(arr_start.min()) if n else arr_start,
        fields={"prompt_tokens": "prompt_tokens", "output_tokens": "output_tokens",
                "arrival_s": "request_start_time"}, default_tier=default_tier)
    counts.update(c2)
    rows = workload.request_id
    ttft = np.array(first) - arr_start
    e2e = np.array(end) - arr_start
    _check_times(path, "time_to_first_token_ms", ttft[rows], rows, None)
    _check_times(path, "request_latency", e2e[rows], rows, None)
    config: dict[str, Any] = {}
    model = (_dig(benchmarks[0], "config", "requests", "model")
             or _dig(benchmarks[0], "config", "backend", "model")
             or _dig(benchmarks[0], "worker", "backend_model"))
    if isinstance(model, str):
        config["model"] = model
    return _build(path, "guidellm", workload, ttft=ttft[rows], e2e=e2e[rows],
                  status=[status[r] for r in rows.tolist()],
                  stage=[stage[r] for r in rows.tolist()], itl_mean=np.array(itl)[rows],
                  config=config, counts=counts, notes=[*notes, *warnings])


# ---------------------------------------------------------------------------------------------
# kvbudget run directories


def _read_run_dir(path: Path, default_tier: str) -> Recording:
    from kvbudget.results.run_result import read_run

    try:
        run = read_run(path)
    except FileNotFoundError as exc:
        raise TraceError(path, str(exc).removeprefix(f"{path}: ")) from None
    except ValueError as exc:
        raise TraceError(None, str(exc)) from None
    rec = run.records.sort_values(["arrival_s", "request_id"], kind="stable")
    rec = rec.reset_index(drop=True)
    meta_path = path / "replay.json"
    meta = read_replay_meta(meta_path) if meta_path.is_file() else {}
    n = len(rec)
    if n == 0:
        raise TraceError(path / "requests.parquet", "has no rows")
    completed = (rec["status"] == "completed").to_numpy()
    output = rec["output_tokens"].to_numpy(dtype=np.int64)
    max_output = rec["max_output_tokens"].to_numpy(dtype=np.int64)
    # a request that never ran has no generated tokens: offer it with its declared maximum
    offered = np.where(completed | (output > 0), np.maximum(output, 1), np.maximum(max_output, 1))
    tier_names = tuple(dict.fromkeys(rec["tier"].astype(str).tolist())) or (default_tier,)
    codes = np.array([tier_names.index(t) for t in rec["tier"].astype(str)], dtype=np.int16)
    arrival = rec["arrival_s"].to_numpy(dtype=np.float64)
    workload = Workload(
        arrival_s=arrival - float(arrival.min()) if float(arrival.min()) < 0 else arrival,
        prompt_tokens=rec["prompt_tokens"].to_numpy(dtype=np.int64),
        output_tokens=offered,
        max_output_tokens=np.maximum(max_output, offered),
        tier=codes, tier_names=tier_names,
        deadline_s=np.full(n, np.nan),
        request_id=rec["request_id"].to_numpy(dtype=np.int64),
        name=path.name, meta={"source": str(path), "format": "run"},
    )
    status = ["completed" if c else (str(s) + (f" ({r})" if r else ""))
              for c, s, r in zip(completed, rec["status"].astype(str), rec["reason"].astype(str),
                                 strict=True)]
    summary = run.summary
    config: dict[str, Any] = {}
    for key in ("policy", "policy_params"):
        if key in meta:
            config[key] = meta[key]
        elif key in summary:
            config[key] = summary[key]
    for key in ("gpu", "model", "num_gpu_blocks", "block_size"):
        if key in summary:
            config[key] = summary[key]
    if "kv_capacity_tokens" in meta:
        config["kv_capacity_tokens"] = meta["kv_capacity_tokens"]
    counts = {"num_rows_read": n}
    recording = _build(path, "run", workload,
                       ttft=rec["ttft_s"].to_numpy(dtype=np.float64),
                       e2e=rec["e2e_s"].to_numpy(dtype=np.float64), status=status,
                       stage=[""] * n, itl_mean=None, config=config, counts=counts,
                       notes=[], output_measured=output)
    return replace(recording, workload=workload)
