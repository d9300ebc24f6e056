"""Learned and adaptive admission policies, after what real serving systems do inside.

Each is pure decision logic over the :class:`~kvbudget.policies.base.GatewayView`: what it learns comes only
from :meth:`observe_completion`, :meth:`observe_preemption` and the view (the ledger, the queues,
the admitted requests, and the engine probe's output-token counts). No clock, no I/O.

* ``quantile`` reserves ``prompt_tokens + q-quantile of the tier's observed output lengths``
  (capped by ``max_output_tokens``), learned online from completions; worst case until
  ``min_samples`` completions were seen. The seed's rule "overcommit only with measured workload
  distributions".
* ``adaptive`` is SGLang's ``new_token_ratio`` admission moved to the gateway: running requests
  are charged their current tokens plus ``new_token_ratio`` x their remaining declared output;
  the ratio decays from ``init_new_token_ratio x schedule_conservativeness`` to
  ``min_new_token_ratio_factor`` of that over ``new_token_ratio_decay_steps`` steps and is raised
  after a preemption (SGLang: ``python/sglang/srt/managers/schedule_policy.py``, ``PrefillAdder``;
  ``scheduler.py`` / ``schedule_batch.py``, ``retract_decode``; defaults from
  ``python/sglang/global_config.py`` / ``srt/environ.py``: ``SGLANG_INIT_NEW_TOKEN_RATIO=0.7``,
  ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR=0.14``, ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS=600``,
  ``SGLANG_RETRACT_DECODE_STEPS=20``, ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION=4096``;
  ``--schedule-conservativeness`` default 1.0).
* ``peak`` is LightLLM's router estimator: sort the running requests (and the candidate) by
  remaining output, longest first; the KV use when the k-th of them finishes is
  ``remaining_k * k + sum(current tokens of the first k)``; admit only if the largest of those
  stays within capacity (ModelTC/lightllm ``lightllm/server/router/req_queue/base_queue.py``,
  ``_can_add_new_req``; ``Req.get_tuple_tokens`` in ``lightllm/server/core/objs/req.py``;
  ``--router_max_new_token_len`` default 1024, ``--router_token_ratio`` default 0.0).
* ``early_reject`` is Mooncake's early rejection (Qin et al., "Mooncake: Trading More Storage for
  Less Computation", FAST 2025, section 7 "Overload-oriented Scheduling"): at arrival, predict
  the TTFT as (prefill work queued ahead + this prompt) / prefill rate and reject at once when it
  exceeds the tier's TTFT SLO, instead of letting the request wait and miss it anyway.

``adaptive`` and ``peak`` decide on their own estimate of future KV use, recomputed at every
decision from the admitted set; their ledger lease holds only the prompt (the part of the
footprint certain at admission), so their ``reserved_tokens`` and reservation efficiency measure
that part alone.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable
from typing import ClassVar, Literal

from kvbudget.policies.base import (
    Admitted,
    BasePolicy,
    Completion,
    GatewayView,
)
from kvbudget.policies.errors import Overloaded
from kvbudget.policies.request import Request
from kvbudget.policies.seed_policies import Conservative


def _positive_int(name: str, value: int) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return float(value)


def _output_so_far(view: GatewayView, request_id: int) -> int:
    engine = view.engine
    return 0 if engine is None else engine.num_output_tokens(request_id)


def _blocked_by_higher_tier(tier: str, view: GatewayView) -> bool:
    """Whether a tier served before ``tier`` has work waiting (its head was refused: the gateway
    tries tiers in priority order), so that admitting ``tier`` now would jump the queue."""
    prio = view.tiers[tier].priority
    return any(
        view.num_waiting(name)
        for name, cfg in view.tiers.items()
        if (cfg.priority, name) < (prio, tier)
    )


def _head(tier: str, view: GatewayView) -> Request | None:
    return next(iter(view.waiting(tier)), None)


class Quantile(Conservative):
    """Reserve ``prompt_tokens + min(max_output_tokens, Q)`` where ``Q`` is the ``quantile`` of
    the output lengths of the tier's last ``window`` completed requests.

    Until ``min_samples`` completions of the tier were seen, reserve the worst case. ``Q`` is the
    order statistic ``sorted(samples)[ceil(quantile * n) - 1]`` (the smallest observed length
    with at least ``quantile`` of the samples at or below it). Only completions are observed, so
    early estimates lean short (long requests finish later); the worst-case warm-up covers that.
    """

    name: ClassVar[str] = "quantile"

    def __init__(
        self,
        quantile: float = 0.9,
        min_samples: int = 50,
        window: int = 1000,
        batch_on_overload: Literal["wait", "reject"] = "wait",
    ) -> None:
        super().__init__(batch_on_overload)
        if not (isinstance(quantile, int | float) and 0 < quantile <= 1):
            raise ValueError(f"quantile must be in (0, 1], got {quantile!r}")
        self.quantile = float(quantile)
        self.min_samples = _positive_int("min_samples", min_samples)
        self.window = _positive_int("window", window)
        if self.window < self.min_samples:
            raise ValueError(
                f"window ({window!r}) must be >= min_samples ({min_samples!r})"
            )
        self._recent: dict[str, deque[int]] = {}
        self._sorted: dict[str, list[int]] = {}

    def learned_output_tokens(self, tier: str) -> int | None:
        """The tier's current output-length quantile, or None during warm-up."""
        ordered = self._sorted.get(tier)
        if ordered is None or len(ordered) < self.min_samples:
            return None
        k = max(1, math.ceil(self.quantile * len(ordered) - 1e-9))
        return ordered[k - 1]

    def reservation(self, request: Request, view: GatewayView) -> int:
        learned = self.learned_output_tokens(request.tier)
        if learned is None:
            return request.prompt_tokens + request.max_output_tokens
        return request.prompt_tokens + min(request.max_output_tokens, learned)

    def observe_completion(self, completion: Completion, view: GatewayView) -> None:
        tier = completion.request.tier
        recent = self._recent.setdefault(tier, deque())
        ordered = self._sorted.setdefault(tier, [])
        value = int(completion.output_tokens)
        recent.append(value)
        bisect.insort(ordered, value)
        if len(recent) > self.window:
            old = recent.popleft()
            del ordered[bisect.bisect_left(ordered, old)]


class Adaptive(BasePolicy):
    """SGLang's ``new_token_ratio`` admission at the gateway.

    The head of a tier's queue is admitted when
    ``prompt + min(max_output, clip_max_new_tokens) < capacity - sum(running charge)``, where a
    running (admitted) request is charged ``prompt + output_so_far +
    new_token_ratio * min(max_output - output_so_far, clip_max_new_tokens)`` (SGLang's
    ``PrefillAdder.rem_total_tokens`` and ``add_one_req``). ``output_so_far`` comes from the
    engine probe (0 without one).

    ``new_token_ratio`` starts at ``init = min(init_new_token_ratio * schedule_conservativeness,
    1)`` and decays linearly by ``(init - min) / new_token_ratio_decay_steps`` per step to
    ``min = init * min_new_token_ratio_factor``. SGLang steps once per decode batch; the gateway
    sees no engine steps, so one step here is one completed request. After an engine preemption
    the ratio becomes ``max(ratio, (sum output_so_far + retract_decode_steps * n) /
    (sum max_output + 1))`` over the admitted requests (SGLang's
    ``estimate_new_token_ratio_after_retract``; SGLang assigns it, the gateway never lowers the
    ratio on a preemption) and decays from there. When nothing is admitted it returns to
    ``init`` (SGLang resets it when the scheduler is idle).
    """

    name: ClassVar[str] = "adaptive"

    def __init__(
        self,
        schedule_conservativeness: float = 1.0,
        init_new_token_ratio: float = 0.7,
        min_new_token_ratio_factor: float = 0.14,
        new_token_ratio_decay_steps: int = 600,
        retract_decode_steps: int = 20,
        clip_max_new_tokens: int = 4096,
    ) -> None:
        self.schedule_conservativeness = _positive(
            "schedule_conservativeness", schedule_conservativeness
        )
        self.init_new_token_ratio = _positive("init_new_token_ratio", init_new_token_ratio)
        if not (
            isinstance(min_new_token_ratio_factor, int | float)
            and 0 <= min_new_token_ratio_factor <= 1
        ):
            raise ValueError(
                f"min_new_token_ratio_factor must be in [0, 1], got {min_new_token_ratio_factor!r}"
            )
        self.min_new_token_ratio_factor = float(min_new_token_ratio_factor)
        self.new_token_ratio_decay_steps = _positive_int(
            "new_token_ratio_decay_steps", new_token_ratio_decay_steps
        )
        self.retract_decode_steps = _positive_int("retract_decode_steps", retract_decode_steps)
        self.clip_max_new_tokens = _positive_int("clip_max_new_tokens", clip_max_new_tokens)
        init = min(self.init_new_token_ratio * self.schedule_conservativeness, 1.0)
        self._init = init
        self._min = min(init * self.min_new_token_ratio_factor, 1.0)
        self._decay = (init - self._min) / self.new_token_ratio_decay_steps
        self._start = init  # the ratio at the last reset
        self._steps = 0  # steps since the last reset

    @property
    def new_token_ratio(self) -> float:
        return max(self._start - self._steps * self._decay, self._min)

    def charge(self, view: GatewayView) -> float:
        """Tokens charged to the admitted requests (SGLang's ``rem_total_token_offset`` plus
        the tokens they hold)."""
        ratio = self.new_token_ratio
        clip = self.clip_max_new_tokens
        held = 0
        remaining = 0.0
        for entry in view.admitted.values():
            req = entry.request
            out = _output_so_far(view, req.request_id)
            held += req.prompt_tokens + out
            remaining += min(max(req.max_output_tokens - out, 0), clip) * ratio
        return held + remaining

    def reservation(self, request: Request, view: GatewayView) -> int:
        return request.prompt_tokens

    def may_admit(self, tier: str, view: GatewayView) -> bool:
        if _blocked_by_higher_tier(tier, view):
            return False
        head = _head(tier, view)
        if head is None:
            return True
        need = head.prompt_tokens + min(head.max_output_tokens, self.clip_max_new_tokens)
        return need < view.budget.capacity_tokens - self.charge(view)

    def observe_completion(self, completion: Completion, view: GatewayView) -> None:
        if not view.admitted:
            self._start, self._steps = self._init, 0
        else:
            self._steps += 1

    def observe_preemption(self, request_id: int, view: GatewayView) -> None:
        admitted = view.admitted.values()
        decoded = sum(_output_so_far(view, a.request.request_id) for a in admitted)
        total_max = sum(a.request.max_output_tokens for a in admitted)
        estimate = min(
            1.0, (decoded + self.retract_decode_steps * len(view.admitted)) / (total_max + 1)
        )
        self._start, self._steps = max(self.new_token_ratio, estimate), 0


def predicted_peak_tokens(requests: Iterable[tuple[int, int]]) -> int:
    """LightLLM's peak of future KV use: ``requests`` are ``(tokens held now, output tokens
    still to come)``; all grow by one token per step and each leaves when its output is done."""
    items = sorted(requests, key=lambda r: -r[1])
    peak = 0
    held = 0
    for k, (now, left) in enumerate(items, start=1):
        held += now
        peak = max(peak, left * k + held)
    return peak


class Peak(BasePolicy):
    """LightLLM's peak-memory admission at the gateway.

    The head of a tier's queue is admitted when :func:`predicted_peak_tokens` of the admitted
    requests plus the candidate is ``<= capacity``. A running request counts as ``(prompt +
    output_so_far, max(0, est - output_so_far - 1))`` and the candidate as ``(prompt + 1,
    est - 1)``, where ``est`` is ``max_output_tokens`` when the gateway is busy and otherwise
    ``min(max_output_tokens, max(int(1.1 * output_so_far), router_max_new_token_len))``
    (LightLLM's ``get_tuple_tokens``). Busy means the admitted requests hold at least
    ``router_token_ratio`` of the capacity; with LightLLM's default ratio 0.0 the gateway is
    always busy and the estimate is the declared worst case, which is exact: the policy then
    never lets the engine run out of KV while admitting more than the sum of worst cases.
    """

    name: ClassVar[str] = "peak"

    def __init__(self, router_max_new_token_len: int = 1024, router_token_ratio: float = 0.0) -> None:
        self.router_max_new_token_len = _positive_int(
            "router_max_new_token_len", router_max_new_token_len
        )
        if not (isinstance(router_token_ratio, int | float) and 0 <= router_token_ratio <= 1):
            raise ValueError(f"router_token_ratio must be in [0, 1], got {router_token_ratio!r}")
        self.router_token_ratio = float(router_token_ratio)

    def _estimate(self, max_output: int, out: int, busy: bool) -> int:
        if busy:
            return max_output
        return min(max_output, max(int(1.1 * out), self.router_max_new_token_len))

    def running_tuples(self, view: GatewayView, busy: bool) -> list[tuple[int, int]]:
        out_of: list[tuple[Admitted, int]] = [
            (a, _output_so_far(view, a.request.request_id)) for a in view.admitted.values()
        ]
        return [
            (
                a.request.prompt_tokens + out,
                max(0, self._estimate(a.request.max_output_tokens, out, busy) - out - 1),
            )
            for a, out in out_of
        ]

    def is_busy(self, view: GatewayView) -> bool:
        held = sum(
            a.request.prompt_tokens + _output_so_far(view, a.request.request_id)
            for a in view.admitted.values()
        )
        return held >= self.router_token_ratio * view.budget.capacity_tokens

    def reservation(self, request: Request, view: GatewayView) -> int:
        return request.prompt_tokens

    def may_admit(self, tier: str, view: GatewayView) -> bool:
        if _blocked_by_higher_tier(tier, view):
            return False
        head = _head(tier, view)
        if head is None:
            return True
        busy = self.is_busy(view)
        est = self._estimate(head.max_output_tokens, 0, busy)
        tuples = self.running_tuples(view, busy)
        tuples.append((head.prompt_tokens + 1, max(0, est - 1)))
        return predicted_peak_tokens(tuples) <= view.budget.capacity_tokens


class EarlyReject(Conservative):
    """Mooncake's early rejection: refuse at arrival when the predicted TTFT misses the SLO.

    ``predicted_ttft_s = (queued + prompt_tokens) / prefill_tokens_per_s`` where ``queued`` is
    the prompt tokens waiting at the gateway in tiers served no later than the request's (equal
    or higher priority) plus the prompts of admitted requests that have no output token yet (the
    engine's prefill backlog, from the probe). The request is refused with
    ``Overloaded(reason="slo")`` when ``predicted_ttft_s > slo_margin * tier.ttft_s``; otherwise
    it is reserved ``prompt_tokens + ceil(overcommit_ratio * max_output_tokens)`` (1.0: the
    worst case) and queued as under ``conservative``.

    ``prefill_tokens_per_s`` defaults to the roofline of Llama-3.1-8B on one H100-80GB
    (2 x 8.03e9 FLOP per token at 55 % of 989 TFLOP/s: about 34,000 tokens/s), rounded down
    for the decode work sharing each step; measure it for your server (``kvbudget profile``).
    """

    name: ClassVar[str] = "early_reject"

    def __init__(
        self,
        prefill_tokens_per_s: float = 30_000.0,
        slo_margin: float = 1.0,
        overcommit_ratio: float = 1.0,
        batch_on_overload: Literal["wait", "reject"] = "wait",
    ) -> None:
        super().__init__(batch_on_overload)
        self.prefill_tokens_per_s = _positive("prefill_tokens_per_s", prefill_tokens_per_s)
        self.slo_margin = _positive("slo_margin", slo_margin)
        if not (isinstance(overcommit_ratio, int | float) and 0 < overcommit_ratio <= 1):
            raise ValueError(f"overcommit_ratio must be in (0, 1], got {overcommit_ratio!r}")
        self.overcommit_ratio = float(overcommit_ratio)

    def queued_prefill_tokens(self, request: Request, view: GatewayView) -> int:
        prio = view.tiers[request.tier].priority
        queued = sum(
            view.waiting_prompt_tokens(name)
            for name, cfg in view.tiers.items()
            if cfg.priority <= prio
        )
        engine = view.engine
        if engine is not None:
            queued += sum(
                a.request.prompt_tokens
                for a in view.admitted.values()
                if engine.num_output_tokens(a.request.request_id) == 0
            )
        return queued

    def predicted_ttft_s(self, request: Request, view: GatewayView) -> float:
        queued = self.queued_prefill_tokens(request, view)
        return (queued + request.prompt_tokens) / self.prefill_tokens_per_s

    def precheck(self, request: Request, view: GatewayView) -> Overloaded | None:
        tier = view.tiers[request.tier]
        if self.predicted_ttft_s(request, view) > self.slo_margin * tier.ttft_s:
            return Overloaded(tier.retryable_on_overload, "slo")
        return None

    def reservation(self, request: Request, view: GatewayView) -> int:
        return request.prompt_tokens + math.ceil(self.overcommit_ratio * request.max_output_tokens)
