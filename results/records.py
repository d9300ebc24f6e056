"""The per-request records table and the timeline table: the public result of every executor.

The simulator and the live replay both emit exactly these columns, so every metric, plot and
notebook works on either, and "simulated vs measured" is a join on ``request_id``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
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
    # SGLang python/sglang/srt/managers/scheduler.py, Scheduler._abort_on_queued_limit (0.5.23:
    # :3562, an abort with status 503: HTTP 503 unstreamed, an error event in a stream)
    (503, "The request queue is full", "engine_max_queued_requests"),
    # text-generation-inference v3.3.7 router/src/infer/mod.rs:412 (InferError::Overloaded):
    # HTTP 429 {"error": "Model is overloaded", "error_type": "overloaded"} unstreamed
    # (server.rs:2408), an error event in a completions stream begun with 200
    # (infer/mod.rs:445-452)
    (429, "Model is overloaded", "engine_max_concurrent_requests"),
    # Ollama fb307609 server/sched.go:88 (ErrMaxQueue, OLLAMA_MAX_QUEUE pending requests),
    # HTTP 503 {"error": "server busy, please try again.  maximum pending requests
    # exceeded"} (server/routes.go:3113-3114); no simulated engine has this cap
    (503, "maximum pending requests exceeded", "engine_ollama_max_queue"),
)
"""The engines' own queue-cap refusals, ``(HTTP status, words of the error message, reason)``:
the ``reason`` a simulated engine's cap records (``kvbudget.simulator.queue_caps``) and the one
a replay records when a real server answers so, so that the two join; any other 429 or 503
is ``server_429`` / ``server_503``. vLLM 0.32.0 sends its refusal as an error event in a
stream already answered 200 when the request passed the check made before the response
starts (``entrypoints/openai/completion/serving.py:105``, ``_preflight``) and was refused by
the second one when it was added (``v1/engine/async_llm.py:566-569``): a burst's requests all
pass the first while none is registered yet."""


TIME_LIMIT_NOT_SENT: Final = "time_limit_not_sent"
"""The reason of a time-limited stage's request not sent by the load tool's time limit (status
``client_timeout``: the client, not the server): a simulation's users had not sent it
(``studies.recorded_replay``), or the live replay kept the limit (``live.replay_limit``)."""
TIME_LIMIT_CANCELLED: Final = "time_limit_cancelled"
"""The reason of a time-limited stage's request still running when the tool's grace period
after the limit ran out: the tool cancelled it (status ``client_timeout``), in a simulation or
a live replay."""

CUTTING: Final = "cut"
"""A :data:`CONTEXT_REFUSALS` engine rule: a prompt + ``max_tokens`` over the context is served
with its output cut at the context left (vLLM 0.32.0's front end), never refused for it."""
REFUSING: Final = "refuse"
"""The rule of SGLang, TGI and TensorRT-LLM: a prompt + ``max_tokens`` over the context is
refused (``workloads/context_limit.py``)."""


@dataclass(frozen=True, slots=True)
class ContextRefusal:
    """One engine's words for a request over the model's context (:data:`CONTEXT_REFUSALS`).

    ``pattern`` is a regular expression searched in the message; ``reason`` the simulator's
    (``prompt_too_long``: the prompt alone is over the context; ``context_length``: the
    ``max_tokens``, or the prompt + ``max_tokens``, is), or ``""`` when the message's own
    figures decide: its groups ``prompt`` and ``limit``, ``prompt_too_long`` where the prompt
    alone is over the limit, else ``context_length`` (``context_limit.context_refusals`` for an
    engine that refuses). ``rule`` is the engine's for a prompt + ``max_tokens`` over the
    context (:data:`CUTTING`, :data:`REFUSING`, or ``""``: not read from its source)."""

    engine: str
    pattern: str
    reason: str
    rule: str = ""

    def reason_of(self, message: str) -> str | None:
        """The simulator's reason for ``message``, or None when it is not these words."""
        found = re.search(self.pattern, message)
        if found is None:
            return None
        if self.reason:
            return self.reason
        prompt, limit = float(found.group("prompt")), float(found.group("limit"))
        return "prompt_too_long" if prompt > limit else "context_length"

def _words(text: str) -> str:
    return re.escape(text)


CONTEXT_REFUSALS: Final[tuple[ContextRefusal, ...]] = (
    # vLLM 0.32.0 (the local copy; each answered so by the live CPU vLLM, tests/live
    # test_vllms_context_refusals_are_recognised), HTTP 400. A prompt over max_model_len
    # (renderers/params.py _token_len_check): "This model's maximum context length is 1024
    # tokens. However, your prompt contains at least 1025 input tokens, which exceeds this
    # limit even without any output tokens. ..."
    ContextRefusal("vllm", _words("exceeds this limit even without any output tokens"),
                   "prompt_too_long", CUTTING),
    # a text prompt of more characters than the context can hold (params.py _text_len_check):
    # "... your prompt contains 30000 characters (more than 12288 characters, which is the
    # upper bound for 1024 input tokens). ..."
    ContextRefusal("vllm", _words("which is the upper bound for"), "prompt_too_long", CUTTING),
    # a prompt of exactly max_model_len: the max_tokens lowered to the context left, 0
    # (entrypoints/serve/utils/api_utils.py get_max_tokens), refused by SamplingParams
    # (sampling_params.py _verify_args); serve and replay never send a max_tokens under 1
    ContextRefusal("vllm", _words("max_tokens must be at least 1, got 0"), "prompt_too_long",
                   CUTTING),
    # get_max_tokens itself: "Input length (N) exceeds model's maximum context length (L)."
    ContextRefusal("vllm", _words("exceeds model's maximum context length"), "prompt_too_long",
                   CUTTING),
    # v1/engine/input_processor.py _validate_model_input: "The decoder prompt (length N) is
    # longer than the maximum model length of L" (and "... plus the number of requested output
    # tokens (at least 1) is longer than the maximum model length of L")
    ContextRefusal("vllm", _words("is longer than the maximum model length"), "prompt_too_long",
                   CUTTING),
    # a max_tokens (or max_completion_tokens) over the context (params.py TokenizeParams
    # __post_init__): "max_tokens=1025 cannot be greater than max_model_len=1024. ..."
    ContextRefusal("vllm", _words("cannot be greater than max_model_len="), "context_length",
                   CUTTING),
    # vLLM to about 0.20, vllm/entrypoints/openai/serving_engine.py OpenAIServing._validate_input
    # (it refused prompt + max_tokens over the context, as SGLang does)
    ContextRefusal("vllm<0.20", _words("However, you requested"), "context_length", REFUSING),
    # SGLang 0.5.23 (the PyPI wheel) python/sglang/srt/managers/tokenizer_manager.py, HTTP
    # 400 {"object": "error", "message": ..., "type": "BadRequest", "code": 400}
    # (entrypoints/openai/serving_base.py:123-128, handle_request's ValueError; a stream
    # too: serving_completions.py:208-212 starts its generator before the 200). :1349-1351,
    # a prompt of context_len tokens or
    # more: "The input (1025 tokens) is longer than the model's context length (1024
    # tokens)."; :1371-1377, prompt + max_new_tokens over it: "Requested token count exceeds
    # the model's maximum context length of 1024 tokens. You requested a total of 1100
    # tokens: 1000 tokens from the input messages and 100 tokens for the completion. ..."
    ContextRefusal("sglang", _words("is longer than the model's context length"),
                   "prompt_too_long", REFUSING),
    ContextRefusal("sglang", _words("Requested token count exceeds the model's maximum context"
                                    " length"), "context_length", REFUSING),
    # text-generation-inference v3.3.7-1-gdb931fcf router/src/validation.rs, "Input
    # validation error: " + the error: HTTP 422 {"error": ..., "error_type": "validation"}
    # (server.rs:2409, 2420-2423), and in a stream already answered 200 an event
    # {"error": {"message": ..., "http_status_code": 422}}
    # (infer/mod.rs:445-452; the completions stream validates after its head is sent,
    # server.rs:888-890). :173-178 and :999, prompt + max_new_tokens over max_total_tokens:
    # "`inputs` tokens + `max_new_tokens` must be <= 1024. Given: 1000 `inputs` tokens and 100
    # `max_new_tokens`" (checked first: a prompt alone over it says so too, and its figures
    # tell which); :182-186 and :1001, a prompt over max_input_tokens: "`inputs` must have
    # less than 1023 tokens. Given: 1030"
    ContextRefusal("tgi", r"`inputs` tokens \+ `max_new_tokens` must be <= (?P<limit>\d+)\. "
                   r"Given: (?P<prompt>\d+) `inputs` tokens", "", REFUSING),
    ContextRefusal("tgi", _words("`inputs` must have less than"), "prompt_too_long", REFUSING),
    # TensorRT-LLM 4c05a748 tensorrt_llm/llmapi/llm.py BaseLLM._check_arguments, HTTP 400
    # {"object": "error", ...} from trtllm-serve: the TensorRT engine backend without
    # chunked prefill refuses prompt + max_tokens over max_seq_len: "The sum of prompt
    # length (4000.0) and query length (0) max_tokens (2048)
    # should not exceed max_seq_len (4096)" (the prompt divided by the context-parallel size).
    # Its PyTorch backend's "... should not exceed max_num_tokens (N)" is a prompt over the
    # step's token budget, not the context: it stays server_400.
    ContextRefusal("trtllm", r"The sum of prompt length \((?P<prompt>[\d.]+)\) and query "
                   r"length \(\d+\) max_tokens \(\d+\) should not exceed max_seq_len "
                   r"\((?P<limit>\d+)\)", "", REFUSING),
    # LMDeploy v0.16.0-5-g1263d5cd lmdeploy/serve/core/async_engine.py:561-564, a prompt of
    # session_len tokens or more, HTTP 400 (serve/core/exceptions.py:30): "Input length (1025)
    # must be smaller than the model context length (1024)."
    ContextRefusal("lmdeploy", _words("must be smaller than the model context length"),
                   "prompt_too_long"),
    # Ollama fb307609 llm/llama_server.go:296-299, a prompt over num_ctx - 1 without context
    # shift, HTTP 400: "the prompt is longer than the context length currently available to
    # the model; ..."; server/routes.go:937-940: "the input length exceeds the context length"
    ContextRefusal("ollama", _words("the prompt is longer than the context length currently"),
                   "prompt_too_long"),
    ContextRefusal("ollama", _words("the input length exceeds the context length"),
                   "prompt_too_long"),
    # llama.cpp's server, fb402660 tools/server/server-context.cpp update_slots, HTTP 400
    # (ERROR_TYPE_EXCEED_CONTEXT_SIZE, "exceed_context_size_error", server-common.cpp
    # format_error_response): a prompt of n_ctx tokens or more, "the request exceeds the
    # available context size, try increasing it" (earlier tools/server/server.cpp: "... size.
    # try increasing the context size or enable context shift"; later: "request (1030 tokens)
    # exceeds the available context size (1024 tokens), try increasing it"); a prompt over
    # n_ctx that cannot be split (embeddings), "input is larger than the max context size.
    # skipping" (later "input (1030 tokens) is larger than the max context size (1024
    # tokens). skipping")
    ContextRefusal("llama.cpp", _words("exceeds the available context size"),
                   "prompt_too_long"),
    ContextRefusal("llama.cpp", _words("is larger than the max context size"),
                   "prompt_too_long"),
)
"""Each engine's words for a request over the model's context, and the reason the simulator
gives that refusal (``workloads.context_limit.context_refusals``): a request a server refused
so is recorded ``rejected_too_large`` with it, so that the two join. The first entry whose
pattern the message has decides. vLLM 0.32.0 also refuses, for the context, a ``min_tokens``
above the ``max_tokens`` it lowered to the context left ("min_tokens must be less than or
equal to max_tokens=24, got 30."): no simulated rule matches it (the simulator serves that
request cut), so it stays ``server_400``. SGLang's scheduler refuses a prompt of
``min(context, KV pool) - 6`` tokens or more (``managers/utils.py:259-286``, "Input length (N
tokens) exceeds the maximum allowed length (M tokens)"), which names neither limit: it stays
``server_400`` too."""

ENGINE_NAMES: Final[dict[str, str]] = {
    "vllm": "vLLM 0.32", "vllm<0.20": "vLLM before 0.20", "sglang": "SGLang", "tgi": "TGI",
    "trtllm": "TensorRT-LLM", "lmdeploy": "LMDeploy", "ollama": "Ollama",
    "llama.cpp": "llama.cpp",
}
"""How a line names the engine whose words an answer had."""


def context_refusal_of(message: str) -> tuple[ContextRefusal, str] | None:
    """The :data:`CONTEXT_REFUSALS` entry whose words ``message`` has and the simulator's
    reason for it, or None."""
    for entry in CONTEXT_REFUSALS:
        reason = entry.reason_of(message)
        if reason is not None:
            return entry, reason
    return None


def context_refusal(message: str) -> str | None:
    """The simulator's reason for an engine's refusal of a request over the model's context
    whose words ``message`` has (:data:`CONTEXT_REFUSALS`), or None."""
    found = context_refusal_of(message)
    return found[1] if found is not None else None


def server_refusal(status: int | None, message: str) -> tuple[str, str] | None:
    """The record's status and reason for a server's refusal of a request as it was sent, as
    ``kvbudget serve`` and ``kvbudget replay`` both record it, or None for any other answer.

    A refusal for the model's context (:func:`context_refusal`) is ``rejected_too_large`` with
    the simulator's reason whatever 4xx it came with (TGI answers 422) and also as an error
    event in a stream already answered 200 (``status`` None: TGI's completions stream, which
    validates after its head is sent); any other 400 or 413 is ``rejected_too_large``
    ``server_<status>``; any other 4xx but 408 and 429 (a 404 for a model the server does not
    serve, a 422) ``rejected_overloaded`` with ``server_<status>``, not a failure under load."""
    reason = context_refusal(message)
    if reason is not None and (status is None or (400 <= status < 500
                                                  and status not in (408, 429))):
        return "rejected_too_large", reason
    if status in (400, 413):
        return "rejected_too_large", f"server_{status}"
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        return "rejected_overloaded", f"server_{status}"
    return None


def error_text(payload: object) -> str:
    """The message of an engine's error answer (a parsed JSON body or stream event), or ''
    when it is none: OpenAI's and vLLM's ``{"error": {"message": ...}}``, SGLang's and
    TensorRT-LLM's ``{"object": "error", "message": ...}``, TGI's ``{"error": "...",
    "error_type": ...}`` (router/src/server.rs:2420-2423, v3.3.7) and its stream event
    ``{"error": {"message": ..., "http_status_code": 422}}``, Ollama's ``{"error": "..."}``."""
    if not isinstance(payload, dict):
        return ""
    err = payload.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err.get("type") or err)
    if err is not None and err is not False and err != "":  # a string, a number, a list
        return str(err)
    if payload.get("object") == "error":
        return str(payload.get("message") or payload)
    return ""


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
and decode replica of each request's last attempt (-1: not reached; a request the gateway
refused or let expire has -1 for both, one a prefill replica's queue cap refused has that
replica, whose server refused it, and decode -1) and when its prompt's KV started and ended
moving over the link (NaN: it did not move). A colocated run has none."""

OPTIONAL_RECORD_COLUMNS: Final[dict[str, str]] = {"num_attempts": "int64",
                                                  **DISAGG_RECORD_COLUMNS,
                                                  "deadline_s": "float64"}
"""Columns a run has when its clients are modelled (a ``[clients]`` table, ``--clients`` or a
per-request timeout): ``num_attempts`` counts the attempts the client sent (1: no retry). The
row stays one per request: ``arrival_s`` is its first attempt's, ``status`` its final answer,
and ``ttft_s``/``e2e_s`` count from the first attempt, as its user experienced them. And
:data:`DISAGG_RECORD_COLUMNS` in a disaggregated run. ``deadline_s`` (a ``kvbudget serve`` run's):
when the gateway would stop waiting to admit the request, on the run's clock (its tier's
``queue_timeout_s`` after its arrival, or the shorter ``x-kvbudget-deadline-s`` its client sent;
NaN: it could wait without limit), which a simulation of the run's requests gives them."""

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
``too_large``, ``backend_error``, ``timeout``, ``refused``); ``reason`` the overload reason (or
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
    "prefill_kv_used_tokens": "int64",
    "prefill_kv_capacity_tokens": "int64",
}
"""Timeline columns only some runs have (runs without them stay byte-identical):
``cpu_kv_used_tokens`` and ``cpu_kv_capacity_tokens``, a run with a CPU KV offload tier
(vLLM's ``kv_offloading_size``; a single engine's run): the tokens of the KV blocks the tier
holds, and its size in tokens; ``num_replicas_up``, ``num_replicas_booting`` and
``num_replicas_draining``, an autoscaled fleet (``simulator.autoscaler``): its replicas taking
requests, booting (counted, not yet taking any) and draining (finishing theirs, taking none)
at each sample; ``prefill_kv_used_tokens`` and ``prefill_kv_capacity_tokens``, a
disaggregated deployment (``simulator.disagg``): its prefill pool's tokens in allocated KV
blocks and its capacity, beside the KV columns, which are its decode pool's (the gateway's
budget)."""

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
