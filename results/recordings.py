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
    ``vllm bench serve --save-result --save-detailed`` JSON, one run or ``--append-result``
    runs one a line (:mod:`kvbudget.results.recorded_vllm_bench`).
``guidellm``
    A GuideLLM report, 0.2 to 0.8, JSON or YAML; the CSV report is refused (aggregates only)
    (:mod:`kvbudget.results.recorded_guidellm`).
``aiperf``
    AIPerf's ``profile_export.jsonl`` (:mod:`kvbudget.results.recorded_aiperf`).
``inference-perf``
    inference-perf's ``per_request_lifecycle_metrics.json``
    (:mod:`kvbudget.results.recorded_inference_perf`).
``llmd-report``
    An llm-d-benchmark report: aggregates only, refused with one line naming the load tool's
    file to pass instead (:mod:`kvbudget.results.recorded_llmd`).

Each reader fills :attr:`Recording.tool` (the tool and its version when the file says),
:attr:`Recording.stages` (one :class:`RecordedStage` per load stage: its load mode, rate and
concurrency as the tool ran it), :attr:`Recording.counts` and :attr:`Recording.config` (the
server and client settings the file records). A request's ``max_output_tokens`` is the tool's
recorded ``max_tokens`` where the file has one, else its realised output length (never an
invented cap; ``read_recording``'s ``max_output`` overrides that), and a note says which.
Warm-up and cool-down requests are simulated but not measured (status ``warmup`` /
``cooldown``).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.records import RECORD_COLUMNS
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.workload import Workload

if TYPE_CHECKING:
    import pandas as pd

RECORDING_FORMATS: tuple[str, ...] = ("records", "run", "vllm-bench", "guidellm", "aiperf",
                                     "inference-perf", "llmd-report")
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


def build_recording(path: Path, fmt: str, workload: Workload, *, ttft: FloatArray,
                    e2e: FloatArray, status: list[str], stage: list[str],
                    itl_mean: FloatArray | None, config: dict[str, Any], counts: dict[str, int],
                    notes: list[str], output_measured: npt.NDArray[np.int64] | None = None,
                    stages: tuple[RecordedStage, ...] = (), tool: str = "") -> Recording:
    """The recording of ``workload`` with its measurement columns (in workload order).

    ``stages`` must name every label of ``stage`` (when given); ``tool`` defaults to the
    format's name."""
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
    known = {st.label for st in stages}
    if stages and not set(stage) <= known:
        raise AssertionError(f"stage labels {sorted(set(stage) - known)} have no RecordedStage")
    counts["num_stages"] = max(len(stages), 1)
    return Recording(path=str(path), format=fmt, workload=workload, measured=measured,
                     config=config, counts=counts, notes=tuple(notes), stages=stages,
                     tool=tool or fmt)



def _count_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k.removeprefix('num_').replace('_', ' ')} {v}" for k, v in counts.items()
                     if v)


# ---------------------------------------------------------------------------------------------
# detection


def _first_json(path: Path, head: bytes) -> Any:
    """The first JSON value of a file: its first line (JSON lines: an ``--append-result`` file,
    AIPerf's records; a line may be far longer than ``head``), else the whole file."""
    from kvbudget.results.recorded_fields import load_json

    line = head.split(b"\n", 1)[0]
    if b"\n" not in head:
        with path.open("rb") as fh:
            line = fh.readline().strip()
    try:
        return json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return load_json(path)


def _detect_object(path: Path, doc: dict[str, Any]) -> str:
    """The format of a file whose first JSON value is ``doc``."""
    from kvbudget.results.recorded_llmd import is_llmd_report

    if "benchmarks" in doc:
        return "guidellm"
    if "input_lens" in doc or "ttfts" in doc:
        return "vllm-bench"
    if isinstance(doc.get("metadata"), dict) and "request_start_ns" in doc["metadata"]:
        return "aiperf"
    if is_llmd_report(doc):
        return "llmd-report"
    if "completed" in doc and "duration" in doc:
        raise TraceError(path, "is a vllm bench serve result without per-request data; run "
                         "vllm bench serve with --save-result --save-detailed",
                         field="input_lens")
    refusals = (
        ("aiperf_version" in doc or "input_config" in doc,
         "is AIPerf's summary (profile_export_aiperf.json): aggregates only; pass the "
         "per-request profile_export.jsonl beside it"),
        ("load_summary" in doc and "successes" in doc,
         "is an inference-perf summary: aggregates only; pass per_request_lifecycle_metrics.json "
         "(report.request_lifecycle.per_request: true in its config)"),
    )
    for hit, problem in refusals:
        if hit:
            raise TraceError(path, problem)
    if not {"arrival_s", "prompt_tokens", "output_tokens"} & set(doc):
        raise TraceError(path, "cannot tell the recording format (a JSON object of none of the "
                         "known tools nor a record of the generic format); pass a format "
                         f"({', '.join(RECORDING_FORMATS)})")
    return "records"


def detect_recording_format(path: Path) -> str:
    """The format of a recording, from its content: ``run`` for a directory; a load tool's
    format for its files (GuideLLM JSON, YAML or CSV, vLLM's bench JSON, AIPerf JSON lines,
    inference-perf's JSON list, an llm-d-benchmark report); else ``records``."""
    if path.is_dir():
        return "run"
    if not path.exists():
        raise TraceError(path, "no such file or run directory")
    with path.open("rb") as fh:
        head = fh.read(1 << 16)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        first = head.split(b"\n", 1)[0]
        if first.startswith(b"Run Info") or (b"Run Id" in first and b"Request Loader" in head):
            return "guidellm"
        return "records"
    if suffix in (".yaml", ".yml"):
        from kvbudget.results.recorded_guidellm import load_report

        doc = load_report(path)
        if isinstance(doc, dict):
            return _detect_object(path, doc)
        raise TraceError(path, "cannot tell the recording format (a YAML file that is neither a "
                         "GuideLLM report nor an llm-d-benchmark report)")
    text = head.lstrip()
    if text[:1] == b"[":
        from kvbudget.results.recorded_fields import load_json

        doc = load_json(path)
        if isinstance(doc, list) and doc and isinstance(doc[0], dict) and \
                "start_time" in doc[0] and "info" in doc[0]:
            return "inference-perf"
        raise TraceError(path, "cannot tell the recording format (a JSON list that is not "
                         "inference-perf's per_request_lifecycle_metrics.json)")
    if text[:1] == b"{":
        doc = _first_json(path, text)
        if isinstance(doc, dict):
            return _detect_object(path, doc)
    return "records"


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
    from kvbudget.results.recorded_fields import load_json

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
    return meta


def read_recording(path: str | Path, *, format: str | None = None,
                   columns: Mapping[str, str] | None = None, default_tier: str = "interactive",
                   seed: int = 0, max_output: MaxOutputRule | None = None) -> Recording:
    """Read a recorded run (see the module docstring for the formats).

    ``columns`` maps canonical names (the trace format's and :data:`MEASUREMENT_COLUMNS`) to a
    records file's own; ``default_tier`` is the tier of requests whose file has none; ``seed``
    feeds the arrival reconstruction of a ``vllm bench`` result without ``start_times``;
    ``max_output`` declares ``max_output_tokens`` for requests whose file records no
    ``max_tokens`` (default: each request's realised output, never an invented cap).
    """
    path = Path(path)
    fmt = format or detect_recording_format(path)
    if fmt not in RECORDING_FORMATS:
        raise TraceError(path, f"unknown recording format {fmt!r}; known: "
                         f"{', '.join(RECORDING_FORMATS)}", field="format")
    if fmt == "run":
        from kvbudget.results.recorded_records import read_run_dir

        return read_run_dir(path, default_tier)
    if fmt == "records":
        from kvbudget.results.recorded_records import read_records

        return read_records(path, columns or {}, default_tier, max_output)
    return _read_tool_file(path, fmt, default_tier, seed, max_output)


def _read_tool_file(path: Path, fmt: str, default_tier: str, seed: int,
                    max_output: MaxOutputRule | None) -> Recording:
    if fmt == "vllm-bench":
        from kvbudget.results.recorded_vllm_bench import read_vllm_bench

        return read_vllm_bench(path, default_tier, seed, max_output)
    if fmt == "guidellm":
        from kvbudget.results.recorded_guidellm import read_guidellm

        return read_guidellm(path, default_tier, max_output)
    if fmt == "aiperf":
        from kvbudget.results.recorded_aiperf import read_aiperf

        return read_aiperf(path, default_tier, max_output)
    if fmt == "inference-perf":
        from kvbudget.results.recorded_inference_perf import read_inference_perf

        return read_inference_perf(path, default_tier, max_output)
    from kvbudget.results.recorded_fields import load_json
    from kvbudget.results.recorded_guidellm import load_report
    from kvbudget.results.recorded_llmd import refuse_llmd_report

    doc = load_report(path) if path.suffix.lower() in (".yaml", ".yml") else load_json(path)
    if not isinstance(doc, dict):
        raise TraceError(path, "is not an llm-d-benchmark report (not a mapping)")
    refuse_llmd_report(path, doc)
    raise AssertionError("unreachable")
