"""A vLLM server's own per-request queue time and TTFT beside its client's TTFT.

``vllm bench serve`` 0.33 and later saves them (``server_queue_times``, ``server_ttfts``,
seconds; 0.33.0 and 0.34.0 ``vllm/benchmarks/lib/endpoint_request_func.py``
``_update_server_metrics``: the ``metrics`` of the stream's final usage chunk, ``queue_time_ms``
and ``time_to_first_token_ms`` over 1000; ``vllm/benchmarks/serve.py``
``_get_server_metrics_results``) where the server sends them, which a vLLM server does when
started with ``--enable-per-request-metrics``. What each times is in :data:`SERVER_SOURCES`:
the server's TTFT runs from the step that first scheduled the request to the outputs of the
step that made its first token, its queue time from the scheduler's queueing of the request
to that scheduling; so the client's TTFT less both is the time outside the engine's steps
and queue: the client's HTTP, the API server's parsing, chat template and tokenisation, the
hop to the engine core and the wait there for the step in flight, then the hop back, the
first detokenisation and SSE event and the client's read.

A calibration takes that difference as its front-end term (:func:`measured_front_end`)
instead of fitting it; a validation compares the server's figures with the simulated TTFT
less that term (:func:`server_ttft_table`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.analysis.validation import STATS
from kvbudget.results.recording import SERVER_MEASURED_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.results.recordings import Recording

SERVER_SOURCES = (
    "vLLM 0.32.0-0.34.0: the server's figures are PerRequestMetrics (vllm/entrypoints/generate/"
    "base/serving.py, build_per_request_timing_metrics: time_to_first_token_ms = (first_token_ts"
    " - scheduled_ts) * 1000, queue_time_ms = (scheduled_ts - queued_ts) * 1000; lines 74 and 80"
    " of 0.32.0 and 0.33.0, 67 and 73 of 0.34.0); queued_ts is stamped when the engine core adds"
    " the request to its scheduler, which it does between steps (vllm/v1/engine/core.py"
    " run_busy_loop, _process_input_queue then _process_engine_step), scheduled_ts at the start of"
    " the schedule() that first took it, first_token_ts when that step's outputs were made"
    " (EngineCoreOutputs.timestamp, time.monotonic() in the engine core)"
)
"""Where a vLLM server's per-request queue time and TTFT start and stop, which
:func:`measured_front_end` rests on (docs/recordings.md, "The first token")."""


@dataclass(frozen=True)
class MeasuredFrontEnd:
    """The first token's time outside the server's own figures, per request: the client's TTFT
    less the server's queue time and TTFT (``vllm bench serve`` 0.33 and later against a vLLM
    server run with ``--enable-per-request-metrics``): the client's HTTP request, the API
    server's parsing, chat template and tokenisation, the hop to the engine core and the wait
    for the step in flight there (a request joins the scheduler only between steps), then the
    hop back, the first detokenisation and SSE event and the client's read (:data:`
    SERVER_SOURCES`). ``value_s`` (their mean) is the calibration's front-end term."""

    value_s: float
    p50_s: float
    min_s: float
    max_s: float
    num_requests: int
    queue_p50_s: float
    queue_max_s: float

    def said(self) -> str:
        def ms(v: float) -> str:
            return f"{1e3 * v:.2f}"

        return (
            f"from the recording's server-side figures: the client's TTFT less the "
            f"server's queue time and TTFT, mean over {self.num_requests} requests (p50 "
            f"{ms(self.p50_s)}, {ms(self.min_s)} .. {ms(self.max_s)} ms), not fitted; it "
            "holds the wait for the engine's step in flight (vLLM adds a request to its "
            "scheduler between steps), which the simulated engine gives too, so it is high "
            f"by up to a step; the server queued them {ms(self.queue_p50_s)} ms at the "
            f"median, {ms(self.queue_max_s)} ms at most"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "value_s": self.value_s,
            "p50_s": self.p50_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "num_requests": self.num_requests,
            "server_queue_p50_s": self.queue_p50_s,
            "server_queue_max_s": self.queue_max_s,
            "sources": SERVER_SOURCES,
        }


def measured_front_end(
    recording: Recording, rows: npt.NDArray[np.bool_] | None = None
) -> MeasuredFrontEnd | str | None:
    """The front end's time measured per request where the recording holds the server's own
    queue time and TTFT (:data:`~kvbudget.results.recording.SERVER_MEASURED_COLUMNS`), over
    ``rows``' completed requests whose client TTFT is the server's answer (not read whole:
    :meth:`~kvbudget.results.recording.Recording.records`); None where it holds none; a line
    saying why they are not used where one's server figures exceed its client's TTFT (the
    server's interval lies inside the client's: not one request's figures)."""
    m = recording.measured
    if not all(c in m for c in SERVER_MEASURED_COLUMNS):
        return None
    client = recording.records()["ttft_s"].to_numpy(dtype=np.float64)
    server = m["server_queue_s"].to_numpy(dtype=np.float64) + m["server_ttft_s"].to_numpy(
        dtype=np.float64
    )
    keep = np.isfinite(client) & np.isfinite(server) & (True if rows is None else rows)
    if not keep.any():
        return None
    gap = client[keep] - server[keep]
    if (gap < -1e-6).any():  # 1 us: the figures are rounded, not the clocks
        i = int(np.flatnonzero(keep)[int(np.argmin(gap))])
        return (
            f"the server's queue time and TTFT of request {int(m['request_id'].iloc[i])} "
            f"({1e3 * server[i]:.3f} ms) exceed its client's TTFT ({1e3 * client[i]:.3f} "
            "ms), which holds them: the server's figures are not the same requests' and "
            "are not used; the front-end term is fitted"
        )
    queue = m["server_queue_s"].to_numpy(dtype=np.float64)[keep]
    return MeasuredFrontEnd(
        float(gap.mean()),
        float(np.median(gap)),
        float(gap.min()),
        float(gap.max()),
        int(keep.sum()),
        float(np.median(queue)),
        float(queue.max()),
    )


def _stats(values: npt.NDArray[np.float64]) -> dict[str, float]:
    """Mean, p50, p90 and p99, as :func:`~kvbudget.analysis.validation.latency_stats` takes
    them (numpy's linear percentiles)."""
    return {
        stat: float(values.mean())
        if stat == "mean"
        else float(np.percentile(values, float(stat[1:])))
        for stat in STATS
    }


@dataclass(frozen=True)
class ServerTTFT:
    """The server's own TTFT (its queue time plus its TTFT) against the simulated TTFT less
    the front-end term, over the requests the server sent figures for: ``table`` has
    ``metric`` (``server_ttft_mean_s``, ``_p50_s``, ``_p90_s``, ``_p99_s``), ``simulated``,
    ``measured`` and ``rel_error``."""

    table: pd.DataFrame
    num_requests: int
    frontend_s: float
    """The simulated front end's time taken off each first token, its mean over the
    compared requests (the calibrated term plus the API server's modelled cost, if any)."""

    def said(self) -> str:
        return (
            f"server-side TTFT ({self.num_requests} requests): the server's own queue "
            "time plus TTFT (vLLM's per-request metrics, from its scheduler queueing the "
            "request to the step that made its first token) against the simulated TTFT "
            f"less the simulated front end's time ({1e3 * self.frontend_s:.2f} ms a "
            "request); the simulated part also holds the wait for the step in flight when "
            "the request reached the engine, which the server's figures leave out"
        )

    def errors(self) -> dict[str, float]:
        return {
            str(m): float(e)
            for m, e in zip(self.table["metric"], self.table["rel_error"], strict=True)
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "num_requests": self.num_requests,
            "frontend_s": self.frontend_s,
            "metrics": [
                {k: (v if isinstance(v, str) else float(v)) for k, v in r.items()}
                for r in self.table.to_dict(orient="records")
            ],
            "sources": SERVER_SOURCES,
        }


def simulated_front_s(
    summary: Mapping[str, Any], prompt_tokens: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """What a simulated run (its ``summary``) added to each first token outside the engine:
    its ``frontend_overhead_s`` and the API server's modelled cost (``frontend``: per request,
    per output token, per prompt token; :meth:`~kvbudget.perf.cost_model.FrontendCost.
    first_token_delay_s`)."""
    fe = summary.get("frontend") or {}
    fixed = sum(
        float(v or 0.0)
        for v in (
            summary.get("frontend_overhead_s"),
            fe.get("per_request_s"),
            fe.get("per_output_token_s"),
        )
    )
    return fixed + float(fe.get("per_prompt_token_s") or 0.0) * prompt_tokens.astype(np.float64)


def server_ttft_table(
    recording: Recording,
    simulated: pd.DataFrame,
    summary: Mapping[str, Any],
    rows: npt.NDArray[np.bool_] | None = None,
) -> ServerTTFT | None:
    """The server-side TTFT comparison (:class:`ServerTTFT`) over ``rows``' measured requests
    with server figures that the simulation (its records and ``summary``) completed; None
    where the recording holds no such figures. A request its client read whole keeps its
    server figures (they are the server's times, not the client's read)."""
    import pandas as pd

    m = recording.measured
    if not all(c in m for c in SERVER_MEASURED_COLUMNS):
        return None
    server = m["server_queue_s"].to_numpy(dtype=np.float64) + m["server_ttft_s"].to_numpy(
        dtype=np.float64
    )
    keep = m["usable"].to_numpy(dtype=bool) & np.isfinite(server)
    keep &= True if rows is None else np.asarray(rows, dtype=bool)
    sim = simulated.set_index("request_id").reindex(m["request_id"].to_numpy())
    front = simulated_front_s(summary, m["prompt_tokens"].to_numpy(dtype=np.int64))
    engine = (
        np.where(
            sim["status"].to_numpy() == "completed",
            sim["ttft_s"].to_numpy(dtype=np.float64),
            np.nan,
        )
        - front
    )
    keep &= np.isfinite(engine)
    if not keep.any():
        return None
    s, meas = _stats(engine[keep]), _stats(server[keep])
    table = pd.DataFrame(
        {
            "metric": [f"server_ttft_{k}_s" for k in STATS],
            "simulated": [s[k] for k in STATS],
            "measured": [meas[k] for k in STATS],
            "rel_error": [(s[k] - meas[k]) / meas[k] if meas[k] > 0 else np.nan for k in STATS],
        }
    )
    return ServerTTFT(table, int(keep.sum()), float(front[keep].mean()))
