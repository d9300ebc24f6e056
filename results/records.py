"""The per-request records table and the timeline table: the public result of every executor.

The simulator and the live replay both emit exactly these columns, so every metric, plot and
notebook works on either, and "simulated vs measured" is a join on ``request_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np
import numpy.typing as npt

STATUSES: Final[tuple[str, ...]] = (
    "completed",
    "rejected_too_large",
    "rejected_overloaded",
    "expired",
    "preempted_dropped",
    "client_timeout",
)
"""Terminal states. ``expired``: waited at the gateway until its admission deadline.
``preempted_dropped``: admitted, then its lease was revoked (or expired) and it never finished.
``rejected_overloaded``: refused without waiting (no capacity for a retryable tier, a queue cap,
an SLO prediction). A live replay also records backend failures as ``rejected_overloaded`` with
the failure in ``error``. ``client_timeout``: the client's own timeout ran out and it gave up
(it disconnected: the engine aborted the request and freed its KV)."""

ENGINE_REFUSALS: Final[tuple[tuple[int, str, str], ...]] = (
    # vLLM 0.32.0 vllm/exceptions.py:156-182 (QueueOverflowError, MaxQueuedTokensError)
    (503, "cannot accept new requests", "engine_max_num_queued_reqs"),
    (503, "prefill token backlog limit", "engine_max_num_queued_tokens"),
    # SGLang python/sglang/srt/managers/scheduler.py, Scheduler._abort_on_queued_limit
    (503, "The request queue is full", "engine_max_queued_requests"),
    # text-generation-inference v3.3.7 router/src/infer/mod.rs:412 (InferError::Overloaded)
    (429, "Model is overloaded", "engine_max_concurrent_requests"),
)
"""The engines' own queue-cap refusals, ``(HTTP status, words of the error message, reason)``:
the ``reason`` a simulated engine's cap records (``kvbudget.simulator.queue_caps``) and the one
a replay records when a real server answers so, so that the two join; any other 429 or 503
is ``server_429`` / ``server_503``. vLLM 0.32.0 sends its refusal as an error event in a
stream already answered 200 when the request passed the check made before the response
starts (``entrypoints/openai/completion/serving.py:105``, ``_preflight``) and was refused by
the second one when it was added (``v1/engine/async_llm.py:566-569``): a burst's requests all
pass the first while none is registered yet."""


CONTEXT_REFUSALS: Final[tuple[tuple[str, str], ...]] = (
    # vLLM 0.32.0 (the local copy; each answered so by the live CPU vLLM, tests/live
    # test_vllms_context_refusals_are_recognised), HTTP 400. A prompt over max_model_len
    # (renderers/params.py _token_len_check): "This model's maximum context length is 1024
    # tokens. However, your prompt contains at least 1025 input tokens, which exceeds this
    # limit even without any output tokens. ..."
    ("exceeds this limit even without any output tokens", "prompt_too_long"),
    # a text prompt of more characters than the context can hold (params.py _text_len_check):
    # "... your prompt contains 30000 characters (more than 12288 characters, which is the
    # upper bound for 1024 input tokens). ..."
    ("which is the upper bound for", "prompt_too_long"),
    # a prompt of exactly max_model_len: the max_tokens lowered to the context left, 0
    # (entrypoints/serve/utils/api_utils.py get_max_tokens), refused by SamplingParams
    # (sampling_params.py _verify_args); serve and replay never send a max_tokens under 1
    ("max_tokens must be at least 1, got 0", "prompt_too_long"),
    # get_max_tokens itself: "Input length (N) exceeds model's maximum context length (L)."
    ("exceeds model's maximum context length", "prompt_too_long"),
    # v1/engine/input_processor.py _validate_model_input: "The decoder prompt (length N) is
    # longer than the maximum model length of L" (and "... plus the number of requested output
    # tokens (at least 1) is longer than the maximum model length of L")
    ("is longer than the maximum model length", "prompt_too_long"),
    # a max_tokens (or max_completion_tokens) over the context (params.py TokenizeParams
    # __post_init__): "max_tokens=1025 cannot be greater than max_model_len=1024. ..."
    ("cannot be greater than max_model_len=", "context_length"),
    # vLLM to about 0.20, vllm/entrypoints/openai/serving_engine.py OpenAIServing._validate_input
    ("However, you requested", "context_length"),
)
"""Words of an engine's HTTP 400 for a request over the model's context, and the reason the
simulator gives that refusal (``workloads.context_limit.context_refusals``): a request a server
refused so is recorded ``rejected_too_large`` with it, so that the two join. vLLM 0.32.0 also
refuses, for the context, a ``min_tokens`` above the ``max_tokens`` it lowered to the context
left ("min_tokens must be less than or equal to max_tokens=24, got 30."): no simulated rule
matches it (the simulator serves that request cut), so it stays ``server_400``."""


def context_refusal(message: str) -> str | None:
    """The simulator's reason for an engine's refusal of a request over the model's context
    whose words ``message`` has (:data:`CONTEXT_REFUSALS`), or None."""
    for words, reason in CONTEXT_REFUSALS:
        if words in message:
            return reason
    return None


def server_refusal(status: int, message: str) -> tuple[str, str] | None:
    """The record's status and reason for a server's refusal of a request as it was sent, as
    ``kvbudget serve`` and ``kvbudget replay`` both record it, or None for any other answer: a
    400 or 413 is ``rejected_too_large``, its reason the simulator's where ``message`` names
    the model's context (:func:`context_refusal`), else ``server_<status>``; any other 4xx but
    408 and 429 (a 404 for a model the server does not serve, a 422) ``rejected_overloaded``
    with ``server_<status>``, not a failure under load."""
    if status in (400, 413):
        return "rejected_too_large", context_refusal(message) or f"server_{status}"
    if 400 <= status < 500 and status not in (408, 429):
        return "rejected_overloaded", f"server_{status}"
    return None


def engine_refusal(message: str, status: int | None = None) -> tuple[int, str] | None:
    """``(status, reason)`` of the engine queue-cap refusal whose words ``message`` has (and
    whose status is ``status``, when given: an HTTP answer's; ``None`` for an error event
    inside a stream that had begun with 200), or None."""
    for code, words, reason in ENGINE_REFUSALS:
        if words in message and status in (None, code):
            return code, reason
    return None


STATUS_CODES: Final[dict[str, int]] = {s: i for i, s in enumerate(STATUSES)}
PENDING: Final[int] = -1

RECORD_COLUMNS: Final[dict[str, str]] = {
    "request_id": "int64",
    "tier": "str",
    "arrival_s": "float64",
    "prompt_tokens": "int64",
    "max_output_tokens": "int64",
    "output_tokens": "int64",
    "status": "str",
    "reason": "str",
    "admitted_s": "float64",
    "first_token_s": "float64",
    "finished_s": "float64",
    "ttft_s": "float64",
    "tpot_s": "float64",
    "e2e_s": "float64",
    "num_preemptions": "int64",
    "reserved_tokens": "int64",
}
"""Column -> dtype. Times are seconds on the run's clock (NaN where not reached); ``ttft_s`` and
``e2e_s`` count from ``arrival_s``; ``tpot_s = (e2e_s - ttft_s) / (output_tokens - 1)`` as vLLM
defines it (NaN for one-token outputs). ``num_preemptions`` counts engine preemptions plus
gateway revocations of this request. ``output_tokens`` is what was generated (the true length for
a completed request). ``reason`` is the overload reason for refusals, else empty."""

DISAGG_RECORD_COLUMNS: Final[dict[str, str]] = {
    "prefill_replica": "int64",
    "decode_replica": "int64",
    "transfer_start_s": "float64",
    "transfer_end_s": "float64",
}
"""Columns a disaggregated run has (``[disaggregation]``, docs/disaggregation.md): the prefill
and decode replica of each request's last attempt (-1: not reached) and when its prompt's KV
started and ended moving over the link (NaN: it did not move). A colocated run has none."""

OPTIONAL_RECORD_COLUMNS: Final[dict[str, str]] = {"num_attempts": "int64",
                                                  **DISAGG_RECORD_COLUMNS}
"""Columns a run has when its clients are modelled (a ``[clients]`` table, ``--clients`` or a
per-request timeout): ``num_attempts`` counts the attempts the client sent (1: no retry). The
row stays one per request: ``arrival_s`` is its first attempt's, ``status`` its final answer,
and ``ttft_s``/``e2e_s`` count from the first attempt, as its user experienced them. And
:data:`DISAGG_RECORD_COLUMNS` in a disaggregated run."""

ATTEMPT_COLUMNS: Final[dict[str, str]] = {
    "request_id": "int64",
    "attempt": "int64",
    "sent_s": "float64",
    "ended_s": "float64",
    "answer": "str",
    "reason": "str",
    "retry_after_s": "float64",
    "next_attempt_s": "float64",
}
"""``attempts.parquet``: one row per attempt of a run whose clients are modelled. ``answer``
is ``completed`` or a client-model answer (``overloaded_retryable``, ``overloaded``,
``too_large``, ``backend_error``, ``timeout``); ``reason`` the overload reason (or
``max_model_len``, or the backend's error); ``retry_after_s`` what the refusal said (NaN:
nothing); ``next_attempt_s`` when the client sent its next attempt (NaN: it stopped)."""

TIMELINE_COLUMNS: Final[dict[str, str]] = {
    "time_s": "float64",
    "kv_used_tokens": "int64",
    "kv_reserved_tokens": "int64",
    "kv_capacity_tokens": "int64",
    "num_running": "int64",
    "num_waiting": "int64",
    "num_preemptions": "int64",
}
"""``kv_used_tokens``: tokens in allocated KV blocks (blocks x block_size, as vLLM's
``kv_cache_usage_perc``); ``kv_reserved_tokens``: tokens held by gateway leases;
``num_waiting``: engine waiting queue plus gateway queues; ``num_preemptions``: cumulative."""

OPTIONAL_TIMELINE_COLUMNS: Final[dict[str, str]] = {
    "cpu_kv_used_tokens": "int64",
    "cpu_kv_capacity_tokens": "int64",
    "num_replicas_up": "int64",
    "num_replicas_booting": "int64",
    "num_replicas_draining": "int64",
}
"""Timeline columns only some runs have (runs without them stay byte-identical):
``cpu_kv_used_tokens`` and ``cpu_kv_capacity_tokens``, a run with a CPU KV offload tier
(vLLM's ``kv_offloading_size``; a single engine's run): the tokens of the KV blocks the tier
holds, and its size in tokens; ``num_replicas_up``, ``num_replicas_booting`` and
``num_replicas_draining``, an autoscaled fleet (``simulator.autoscaler``): its replicas taking
requests, booting (counted, not yet taking any) and draining (finishing theirs, taking none)
at each sample."""

TOKEN_GAP_COLUMNS: Final[dict[str, str]] = {
    "tier": "str",
    "gap_s": "float64",
    "num_gaps": "int64",
}
"""``token_gaps.parquet``: the inter-token gaps (ITL) of the completed requests, as a weighted
multiset: ``num_gaps`` gaps of ``gap_s`` seconds in ``tier``, one row per distinct (tier, gap),
sorted. A gap is the time between two successive streamed tokens (chunks, live) of a request,
its first token excluded, as ``vllm bench serve`` counts them
(``vllm/benchmarks/lib/endpoint_request_func.py``: ``output.itl.append(timestamp -
most_recent_timestamp)`` for every chunk after the first), pooled over the requests.
In a simulation the gaps of a request add up to its last token's time less its first's (its
``finished_s - first_token_s`` less the front end's ``post_decode_s``) and it has
``output_tokens - 1`` of them; live, a chunk that carries several tokens is one gap."""

Columns = Mapping[str, npt.NDArray[np.generic] | list[str]]


def derive_latencies(
    arrival_s: npt.NDArray[np.float64],
    first_token_s: npt.NDArray[np.float64],
    finished_s: npt.NDArray[np.float64],
    output_tokens: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """TTFT, TPOT and E2E from the event times (vLLM's definitions)."""
    ttft = first_token_s - arrival_s
    e2e = finished_s - arrival_s
    denom = (output_tokens - 1).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(denom > 0, (e2e - ttft) / np.where(denom > 0, denom, 1.0), np.nan)
    return ttft, tpot, e2e


def check_columns(names: list[str], expected: Mapping[str, str], what: str) -> None:
    """Raise ``ValueError`` naming the first missing column."""
    missing = [c for c in expected if c not in names]
    if missing:
        raise ValueError(f"{what} table lacks column {missing[0]!r} (has {sorted(names)})")
