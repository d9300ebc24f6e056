"""The engine's own queue caps: what a serving engine's API server refuses by itself, behind
any gateway, before the request reaches its scheduler. Each engine counts differently, so each
cap is checked as its engine's source does it:

* vLLM ``--max-num-queued-reqs`` (``max_num_queued_reqs``): the API server's unfinished
  requests (waiting plus running, ``OutputProcessor.request_states``); a request is refused when
  that count + 1 would exceed the cap. ``--max-num-queued-tokens``
  (``max_num_queued_tokens``): the prompt tokens of unfinished requests still in prefill (no
  output token yet: ``RequestState.is_prefilling``, whole prompts, prefix hits and chunked
  progress not subtracted); refused when that sum is already at or above the cap (the
  arrival's own prompt not counted). Both HTTP 503 (``QueueOverflowError``,
  ``MaxQueuedTokensError``). vLLM 0.32.0: ``vllm/v1/engine/async_llm.py:316-375``
  (``AsyncLLM.check_admission``, called from ``_add_request`` before the request is registered),
  ``vllm/v1/engine/output_processor.py:526-541``, ``vllm/config/scheduler.py:92-125``,
  ``vllm/exceptions.py:156-182``. A request the gateway aborts leaves the count at once (the
  API server drops it when the abort arrives, not at the engine's next step).
* SGLang ``--max-queued-requests`` (``max_queued_requests``): the scheduler's waiting queue only;
  a new request is refused when ``len(waiting_queue) + 1`` would exceed the cap, HTTP 503 ("The
  request queue is full."). sgl-project/sglang ``python/sglang/srt/managers/scheduler.py``,
  ``Scheduler._abort_on_queued_limit`` (called from ``_add_request_to_queue``). Not modelled:
  with ``--enable-priority-scheduling`` SGLang may abort a queued lower-priority request instead,
  and a retracted request re-queued through the same check.
* TGI ``--max-concurrent-requests`` (``max_concurrent_requests``): the router's semaphore, one
  permit per request from its arrival to the end of its stream (waiting plus running), taken
  with ``try_acquire_owned``: refused at once when none is left, HTTP 429 (``Overloaded``).
  text-generation-inference v3.3.7 ``router/src/infer/mod.rs:111-120``,
  ``router/src/server.rs:2408``; default 128 (``launcher/src/main.rs:648``).

A refused request never reaches the scheduler; the run driver records it as
``rejected_overloaded`` with the reason ``engine_<knob>`` (a gateway's own refusals have their
own reasons), releases its lease, and its client answers it as the live replay answers a
server's status (:func:`answer`): 429 is ``overloaded_retryable``, 503 ``overloaded``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from kvbudget.results.records import ENGINE_REFUSALS
from kvbudget.simulator.engine_config import QUEUE_CAP_ENGINES

if TYPE_CHECKING:
    from collections.abc import Iterable, Sized

    from kvbudget.policies.clients import Answer
    from kvbudget.simulator.engine_config import EngineConfig
    from kvbudget.simulator.serving import FloatArray, IntArray


def answer(reason: str) -> Answer:
    """What a client is told of the refusal ``reason`` (:meth:`QueueCaps.refusal`): a 429
    (TGI's) is ``overloaded_retryable``, a 503 (vLLM's, SGLang's) ``overloaded``, as the live
    replay reads a server's status (``results.records.ENGINE_REFUSALS``)."""
    status = next(code for code, _, name in ENGINE_REFUSALS if name == reason)
    return "overloaded_retryable" if status == 429 else "overloaded"


class QueuedView(Protocol):
    """What the caps read of an engine (:class:`kvbudget.simulator.engine.Engine`)."""

    def num_waiting(self) -> int:
        """The requests waiting to start (the waiting queue, and those not yet schedulable)."""
        ...
    @property
    def running(self) -> Sized: ...
    @property
    def prompt_tokens(self) -> IntArray: ...
    @property
    def first_token_s(self) -> FloatArray: ...
    def unfinished_rows(self) -> Iterable[int]:
        """The rows the engine's API server holds: queued or running, not aborted."""
        ...
    def num_unfinished(self) -> int:
        """How many :meth:`unfinished_rows` there are."""
        ...


class QueueCaps:
    """One engine's queue caps (only those set, by knob), checked when a request reaches the
    engine."""

    __slots__ = ("_count", "_tokens", "_waiting", "caps")

    def __init__(self, caps: dict[str, int]) -> None:
        self.caps = caps
        # vLLM's and TGI's caps both count the unfinished requests (an engine has one of them)
        self._count = next(((f"engine_{knob}", caps[knob]) for knob in
                            ("max_num_queued_reqs", "max_concurrent_requests") if knob in caps),
                           None)
        self._tokens = caps.get("max_num_queued_tokens")
        self._waiting = caps.get("max_queued_requests")

    @staticmethod
    def of(config: EngineConfig) -> QueueCaps | None:
        """``config``'s caps, or None when it sets none (nothing to check, nothing to pay)."""
        caps = {knob: value for knob in QUEUE_CAP_ENGINES
                if (value := getattr(config, knob)) is not None}
        return QueueCaps(caps) if caps else None

    def settings(self) -> dict[str, int]:
        """The caps set, by knob (the summary's ``engine.queue_caps``: what the run assumed)."""
        return dict(self.caps)

    def refusal(self, engine: QueuedView) -> str:
        """The reason the engine refuses one more request now (``engine_<knob>``), or ``""``.
        ``max_num_queued_tokens`` sums over the unfinished rows as arrays: the cap itself
        bounds how many are still prefilling (about the cap over the shortest prompt), so the
        sum stays short; a cap far above any backlog costs one pass over the queue a request
        (20,000 queued requests and a cap of 10^12 tokens: 26 s against 3.6 s without)."""
        count = self._count
        if count is not None and engine.num_unfinished() >= count[1]:  # count + 1 > cap
            return count[0]
        if self._tokens is not None:
            rows = np.fromiter(engine.unfinished_rows(), dtype=np.int64)
            prefilling = engine.prompt_tokens[rows][np.isnan(engine.first_token_s[rows])]
            if int(prefilling.sum()) >= self._tokens:
                return "engine_max_num_queued_tokens"
        if self._waiting is not None and engine.num_waiting() >= self._waiting:  # + 1 > cap
            return "engine_max_queued_requests"
        return ""
