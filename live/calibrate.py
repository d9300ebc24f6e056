"""Calibrate the linear step-time model against a live server, from the outside.

A profiling run measures engine steps through the OpenAI API only, so it works unchanged on any
vLLM (CPU or GPU) and on other servers that stream one chunk per step:

* **decode**: ``N`` streams of ``C``-token prompts started together. Once all of them have their
  first token and until the first one ends, every engine step is a decode step of ``N``
  sequences, and each stream receives one token per step: the step time is the time between
  two chunks divided by the tokens between them (exact token counts from
  ``continuous_usage_stats``, which vLLM and SGLang support).
* **prefill**: one background stream decodes steadily; a ``P``-token prompt is sent while it runs.
  The step that computes the prompt also decodes the background stream, so the background's
  chunk that arrives with the new request's first token ends a gap that *is* that mixed step
  (``P`` prefill tokens plus one decode): no HTTP or queueing time is in it.
* **front-end overhead**: the same prompts on an idle server, each after ``idle_gap_s`` of quiet;
  their time to first token minus the fitted prefill step is what the API server adds to every
  request (HTTP, request set-up, detokenisation, streaming, the engine's wake-up). The
  simulator models engine steps only, so every simulation with this cost-model file adds the
  constant to first-token and finish times (``SimConfig.frontend_overhead_s``).

Features are counted as the engine model counts them (:data:`kvbudget.perf.cost_model.FEATURES`,
context *after* the step). The fit is :func:`kvbudget.perf.fit.fit_linear_cost_model`.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from kvbudget.live.calibrate_partial import CalibrationProgress
from kvbudget.live.openai_client import ServerTarget, StreamResult, stream_completion
from kvbudget.live.replay import prompt_token_ids
from kvbudget.live.server import BackendUnavailable, ServerInfo, discover, with_model
from kvbudget.perf.cost_model import (
    FEATURES,
    LinearCostModel,
    save_cost_model,
)
from kvbudget.perf.fit import fit_linear_cost_model

if TYPE_CHECKING:
    import pandas as pd

    from kvbudget.perf.fit import FitResult

class CalibrationFailed(RuntimeError):
    """The profiling run could not time enough steps to fit the model."""


SAMPLE_COLUMNS = (*FEATURES, "step_time_s", "kind", "num_seqs", "seq_len", "repeat")
"""Columns of the samples table: the fit's inputs plus what each measurement was."""


@dataclass(frozen=True, slots=True)
class CalibrationPlan:
    """The profiling grid. Points that do not fit the server (KV capacity, ``max_model_len``,
    ``max_num_seqs``, one prefill chunk of ``max_num_batched_tokens``) are left out.
    ``idle_gap_s``: the quiet before each idle time-to-first-token probe (the front-end
    overhead), so that it sees a server that has been idle, as a request between bursts does.
    ``retries``: how many more times, within its repeat, a point is measured when its streams
    could not time it (a prefill stall hidden because its chunks came late, decode streams that
    did not overlap: on a loaded machine the API server falls behind the engine now and then)."""

    prefill_tokens: tuple[int, ...] = (16, 64, 128, 256, 512, 1024, 2048)
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    context_tokens: tuple[int, ...] = (64, 256, 1024)
    decode_tokens: int = 128
    background_tokens: int = 64
    repeats: int = 3
    warmup: int = 3
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    token_ids: tuple[int, int] = (10, 250)
    seed: int = 0
    idle_gap_s: float = 0.5
    retries: int = 2

    def __post_init__(self) -> None:
        if not (math.isfinite(self.idle_gap_s) and self.idle_gap_s >= 0):
            raise ValueError(f"idle_gap_s must be >= 0, got {self.idle_gap_s!r}")
        for name in ("prefill_tokens", "decode_batches", "context_tokens"):
            values = getattr(self, name)
            if not values or any(int(v) < 1 for v in values):
                raise ValueError(f"{name} must be positive integers, got {values!r}")
        for name in ("decode_tokens", "background_tokens"):
            if getattr(self, name) < 8:
                raise ValueError(f"{name} must be >= 8, got {getattr(self, name)!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats!r}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup!r}")
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries!r}")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 2:
            raise ValueError("max_num_seqs must be >= 1 and max_num_batched_tokens >= 2")


@dataclass(frozen=True, slots=True)
class GridPoint:
    """``prefill``: one ``seq_len``-token prompt; ``decode``: ``num_seqs`` streams of
    ``seq_len``-token prompts generating ``tokens`` tokens each."""

    kind: str  # "decode" or "prefill"
    num_seqs: int
    seq_len: int
    tokens: int = 1


BACKGROUND_PROMPT = 16
MIN_DECODE_TOKENS = 32


def plan_points(plan: CalibrationPlan, capacity_tokens: int, max_model_len: int | None
                ) -> list[GridPoint]:
    """The grid points that fit the server, prefill first. A decode point whose streams would
    not fit in the KV capacity with ``decode_tokens`` each generates fewer (down to
    ``MIN_DECODE_TOKENS``, or ``decode_tokens`` when that is smaller), so that the engine never preempts while it is measured."""
    return [p for p, why in _plan_grid(plan, capacity_tokens, max_model_len) if not why]


def left_out_points(plan: CalibrationPlan, capacity_tokens: int, max_model_len: int | None
                    ) -> list[str]:
    """One note for each point of the plan :func:`plan_points` leaves out, saying what of the
    server (or of the plan's limits) it does not fit."""
    return [f"{_point_name(p)}: left out, {why}"
            for p, why in _plan_grid(plan, capacity_tokens, max_model_len) if why]


def _plan_grid(plan: CalibrationPlan, capacity_tokens: int, max_model_len: int | None
               ) -> list[tuple[GridPoint, str]]:
    """Every point of the plan, prefill first, with why it does not fit ('' where it does)."""
    limit = max_model_len or 1 << 30
    grid: list[tuple[GridPoint, str]] = []
    bg = BACKGROUND_PROMPT + plan.background_tokens
    for p in sorted(set(plan.prefill_tokens)):
        why = (f"over max_model_len {max_model_len:,}" if p + 1 > limit else
               f"it and the background stream ({bg} tokens) over the KV capacity of "
               f"{capacity_tokens:,} tokens" if p + bg > capacity_tokens else
               f"over one step of max_num_batched_tokens {plan.max_num_batched_tokens:,}"
               if p + 1 > plan.max_num_batched_tokens else "")
        grid.append((GridPoint("prefill", 1, p), why))
    least = min(MIN_DECODE_TOKENS, plan.decode_tokens)
    for n in sorted(set(plan.decode_batches)):
        for c in sorted(set(plan.context_tokens)):
            k = min(plan.decode_tokens, capacity_tokens // n - c - 1, limit - c)
            why = (f"more streams than max_num_seqs {plan.max_num_seqs:,}"
                   if n > plan.max_num_seqs else
                   f"{n} x {c} prompt tokens over one step of max_num_batched_tokens "
                   f"{plan.max_num_batched_tokens:,}" if n * c > plan.max_num_batched_tokens
                   else "" if k >= least else
                   f"fewer than {least} tokens each to decode within max_model_len "
                   f"{max_model_len:,}" if limit - c < least else
                   f"{n} streams of {c} + {least} tokens over the KV capacity of "
                   f"{capacity_tokens:,} tokens")
            grid.append((GridPoint("decode", n, c, max(k, 1)), why))
    return grid


@dataclass(eq=False)
class Calibration:
    """A calibration's result: the fitted model, the front-end overhead, the samples."""

    fit: FitResult
    frontend_overhead_s: float
    samples: pd.DataFrame
    idle_ttft: pd.DataFrame
    info: ServerInfo
    plan: CalibrationPlan
    url: str
    notes: list[str] = field(default_factory=list)

    @property
    def model(self) -> LinearCostModel:
        return self.fit.model

    def save(self, path: Path, fitted_on: dict[str, Any] | None = None) -> None:
        """Write the cost-model file (``simulate --cost-model FILE`` reads it) with the fit's
        errors, the front-end overhead and the measurements; ``fitted_on``: the
        :func:`~kvbudget.perf.fitted_on_write.fitted_on_extra` of the server's GPU and model, when
        known (the file is then checked where it is used)."""
        extra = {**self.fit.to_json_extra(), **(fitted_on or {})}
        extra["frontend_overhead_s"] = self.frontend_overhead_s
        extra["calibration"] = {
            "url": self.url,
            "model": self.info.model,
            "max_model_len": self.info.max_model_len,
            "num_gpu_blocks": self.info.num_gpu_blocks,
            "usable_blocks": self.info.usable_blocks,
            "block_size": self.info.block_size,
            "kv_capacity_tokens": self.info.kv_capacity_tokens,
            "plan": asdict(self.plan),
            "idle_ttft": self.idle_ttft.to_dict(orient="records"),
            "notes": self.notes,
        }
        save_cost_model(self.model, path, extra=extra)


# --- measurements -----------------------------------------------------------------------------
class _Profiler:
    def __init__(self, client: httpx.AsyncClient, target: ServerTarget, plan: CalibrationPlan,
                 clock: Callable[[], float]) -> None:
        self.client = client
        self.target = target
        self.plan = plan
        self.clock = clock
        self._next_id = 0
        self.last_miss = ""
        """Why the last :meth:`decode_step` that returned None could not time a step."""

    def _prompt(self, length: int) -> list[int]:
        self._next_id += 1
        return prompt_token_ids(self._next_id, length, self.plan.seed, self.plan.token_ids)

    async def stream(self, prompt_len: int, max_tokens: int,
                     on_chunk: Callable[[int], None] | None = None) -> StreamResult:
        res = await stream_completion(self.client, self.target, self._prompt(prompt_len),
                                      max_tokens, clock=self.clock, on_chunk=on_chunk)
        if not res.ok:
            raise BackendUnavailable(f"calibration request failed: {res.error}")
        return res

    async def idle_ttft(self, p: int) -> float:
        """Time to first token of a ``p``-token prompt sent after ``idle_gap_s`` of quiet: a
        request that finds the server idle pays its wake-up (a CPU vLLM: 0.5-2 ms more than one
        sent right after another request)."""
        await asyncio.sleep(self.plan.idle_gap_s)
        res = await self.stream(p, 1)
        return res.ttft_s

    async def mixed_step(self, p: int) -> tuple[float, int] | None:
        """The duration of the step that prefills ``p`` tokens next to one decoding stream,
        and the background's context after it; None when it cannot be told apart.

        Between the background's last chunk before the prompt was sent (``a``) and its first
        chunk that came out with the prompt's first token (``b``), the engine ran ``k`` decode
        steps of the background alone and then the mixed step, so the mixed step is
        ``t_b - t_a - k * d`` with ``d`` the background's own decode step (median of its gaps
        before ``a``). Only the two ends are timed: a chunk delivered late inside the window
        (the API server busy with the new request) changes nothing.
        """
        started = asyncio.Event()
        warm = 8

        def on_chunk(tokens: int) -> None:
            if tokens >= warm:
                started.set()

        bg = asyncio.create_task(self.stream(BACKGROUND_PROMPT, self.plan.background_tokens,
                                             on_chunk))
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({bg, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if bg.done():
            await bg  # raises when the background request failed
            return None
        probe = await self.stream(p, 1)
        back = await bg
        return mixed_step_from(back, probe, tolerance_s=0.002)

    async def decode_step(self, n: int, c: int, k: int) -> tuple[float, float] | None:
        """Seconds per decode step of ``n`` sequences of about ``c`` tokens (each generating
        ``k``), and the mean context per sequence over the measured steps."""
        results = await asyncio.gather(*(self.stream(c, k) for _ in range(n)))
        start = max(r.chunk_s[0] for r in results)
        end = min(r.chunk_s[-1] for r in results)
        steps: list[float] = []
        contexts: list[float] = []
        merged = 0
        for r in results:
            idx = [i for i, t in enumerate(r.chunk_s) if start <= t <= end]
            if len(idx) < 2:
                continue
            i0, i1 = idx[0], idx[-1]
            tokens = r.chunk_tokens[i1] - r.chunk_tokens[i0]
            if tokens >= 4 and merged_fraction(r.chunk_tokens[i0:i1 + 1]) > MAX_MERGED:
                merged += 1
            if tokens < 4 or merged_fraction(r.chunk_tokens[i0:i1 + 1]) > MAX_MERGED:
                continue  # too short, or the chunks' times are not the steps' times
            steps.append((r.chunk_s[i1] - r.chunk_s[i0]) / tokens)
            contexts.append(c + (r.chunk_tokens[i0] + r.chunk_tokens[i1]) / 2 + 1)
        if not steps:
            self.last_miss = (
                f"the tokens of {merged} of its {n} streams came in bursts (over "
                f"{MAX_MERGED:.0%} of chunks with several tokens: the API server fell behind "
                "the engine)" if merged else
                f"its {n} streams did not decode together for 4 tokens")
            return None
        return statistics.median(steps), statistics.mean(contexts)


MAX_MERGED = 0.2
"""Above this fraction of chunks carrying more than one token, a stream's chunk times are not
its steps' times: the API server fell behind the engine and sent what had piled up at once
(it happens on an overloaded machine). Such a measurement is dropped."""


def merged_fraction(cumulative_tokens: Sequence[int]) -> float:
    """The fraction of chunks (after the first) that brought more than one token."""
    steps = [b - a for a, b in itertools.pairwise(cumulative_tokens)]
    return sum(1 for s in steps if s > 1) / len(steps) if steps else 0.0


def mixed_step_from(background: StreamResult, probe: StreamResult, *, tolerance_s: float
                    ) -> tuple[float, int] | None:
    """See :meth:`_Profiler.mixed_step`: (mixed step seconds, background context after it)."""
    times, tokens = background.chunk_s, background.chunk_tokens
    sent, first = probe.sent_s, probe.first_token_s
    before = [i for i, t in enumerate(times) if t <= sent]
    if len(before) < 4 or merged_fraction(tokens) > MAX_MERGED:
        return None  # too little background before the prompt, or its chunks merged
    per_token = [(times[i] - times[i - 1]) / max(tokens[i] - tokens[i - 1], 1)
                 for i in range(2, before[-1] + 1)]  # the first gap follows its prefill
    d = statistics.median(per_token)
    tol = min(tolerance_s, d / 3)
    # the background's chunk of the mixed step comes out with the prompt's first token; any
    # chunk delivered late arrives with it or before it, so take the last one of that moment
    with_first = [i for i, t in enumerate(times) if abs(t - first) <= tol]
    if not with_first or with_first[-1] <= before[-1]:
        return None
    a, b = before[-1], with_first[-1]
    k = tokens[b] - tokens[a] - 1
    mixed = times[b] - times[a] - k * d
    if k < 0 or mixed < 0.5 * d:
        return None
    return mixed, BACKGROUND_PROMPT + tokens[b]


def _sample(kind: str, n: int, seq_len: int, repeat: int, step_s: float, *, prefill: int,
            decode: int, context: float, attention: float, prefill_seqs: int) -> dict[str, Any]:
    return {"num_prefill_tokens": prefill, "num_decode_seqs": decode,
            "num_context_tokens": context, "prefill_attention": attention,
            "num_prefill_seqs": prefill_seqs,
            "step_time_s": step_s, "kind": kind, "num_seqs": n, "seq_len": seq_len,
            "repeat": repeat}


def _point_name(point: GridPoint) -> str:
    if point.kind == "prefill":
        return f"prefill {point.seq_len}"
    return f"decode {point.num_seqs}x{point.seq_len}"


async def _measure(prof: _Profiler, point: GridPoint, rep: int) -> dict[str, Any] | None:
    """One sample of ``point`` (a row of :data:`SAMPLE_COLUMNS`), or None when the streams
    could not time it."""
    if point.kind == "prefill":
        p = point.seq_len
        mixed = await prof.mixed_step(p)
        if mixed is None:
            return None
        step, bg_context = mixed
        return _sample("prefill", 1, p, rep, step, prefill=p, decode=1,
                       context=p + bg_context, attention=float(p) * p, prefill_seqs=1)
    dec = await prof.decode_step(point.num_seqs, point.seq_len, point.tokens)
    if dec is None:
        return None
    step, ctx = dec
    n = point.num_seqs
    return _sample("decode", n, point.seq_len, rep, step, prefill=0, decode=n,
                   context=n * ctx, attention=0.0, prefill_seqs=0)


async def profile_async(
    target: ServerTarget,
    plan: CalibrationPlan,
    *,
    capacity_tokens: int | None = None,
    on_point: Callable[[GridPoint, int, int], None] | None = None,
    clock: Callable[[], float] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: CalibrationProgress | None = None,
    resumed_from: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, ServerInfo, list[str]]:
    """Measure the grid; return (step samples, idle TTFT per prompt size, server info, notes).

    ``progress``: the measurements made so far (those kept by an interrupted run, read from
    the file ``resumed_from``; ValueError when they were made on another server or plan): the
    grid measurements it holds are not made again, and each one finished is added to it, so
    that whoever catches an interrupt can keep them.

    ``on_point(point, done, total)`` reports progress (``total`` counts every repeat).
    ``clock`` (seconds; ``time.perf_counter`` from the start by default) times every chunk;
    ``transport`` replaces the network (tests drive an in-process engine on a virtual clock
    with both, so that what they measure does not depend on the machine's load).
    """
    import pandas as pd

    if clock is None:
        t0 = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - t0

    notes: list[str] = []
    async with httpx.AsyncClient(timeout=target.timeout(), transport=transport,
                                 limits=httpx.Limits(max_connections=plan.max_num_seqs + 8)
                                 ) as client:
        info = await discover(client, target)
        capacity = capacity_tokens or info.kv_capacity_tokens
        if capacity is None:
            why = info.capacity_problem or "it does not tell the KV capacity"
            raise ValueError(f"{target.url('/metrics')}: {why}; give the capacity in tokens "
                             "explicitly")
        target = _profiling_target(target, info)
        points = plan_points(plan, capacity, info.max_model_len)
        left_out = left_out_points(plan, capacity, info.max_model_len)
        if not any(p.kind == "prefill" for p in points) or not any(
                p.kind == "decode" for p in points):
            raise ValueError(
                f"no prefill or no decode point of the plan fits the server (KV capacity "
                f"{capacity} tokens, max_model_len {info.max_model_len}): " + "; ".join(left_out)
            )
        kept = progress if progress is not None else CalibrationProgress()
        kept.check_same({"url": target.base_url, "model": info.model,
                         "kv_capacity_tokens": capacity, "max_model_len": info.max_model_len,
                         "plan": asdict(plan)}, resumed_from or "the kept measurements")
        prof = _Profiler(client, target, plan, clock)
        resumed = [] if not kept.num_done else [
            f"resumed: {kept.num_done} of the {len(points) * plan.repeats} grid measurements were "
            f"made by an earlier, interrupted run ({resumed_from or 'kept'}): a change of the "
            "server's speed between the two runs is in the fit"]
        await _measure_grid(prof, points, kept, on_point)
    samples = pd.DataFrame(kept.rows, columns=list(SAMPLE_COLUMNS))
    notes = list(kept.notes)
    _check_timed(samples, points, plan, notes)
    idle_ttft = pd.DataFrame(kept.idle, columns=["prompt_tokens", "repeat", "ttft_s"])
    return samples, idle_ttft, info, [*left_out, *resumed, *notes]


async def _measure_grid(prof: _Profiler, points: list[GridPoint], kept: CalibrationProgress,
                        on_point: Callable[[GridPoint, int, int], None] | None) -> None:
    """Measure every (point, repeat) not yet in ``kept``, adding each to it once finished (an
    interrupt then loses only the measurement under way)."""
    plan = prof.plan
    if kept.num_done < len(points) * plan.repeats:
        for _ in range(plan.warmup):
            await prof.stream(BACKGROUND_PROMPT, 16)
    total = len(points) * plan.repeats
    # round after round over the whole grid: a change in the machine's load during the
    # calibration then spreads over every point instead of skewing a few of them
    for rep in range(plan.repeats):
        for point in points:
            key = (point.kind, point.num_seqs, point.seq_len, rep)
            if kept.is_done(*key):
                continue
            idle = None
            if point.kind == "prefill":
                idle = {"prompt_tokens": point.seq_len, "repeat": rep,
                        "ttft_s": await prof.idle_ttft(point.seq_len)}
            rows, notes = [], []
            for attempt in range(1 + plan.retries):
                row = await _measure(prof, point, rep)
                if row is not None:
                    rows.append(row)
                    break
                what = ("stall not seen" if point.kind == "prefill" else "no overlap")
                notes.append(f"{_point_name(point)}: {what} (repeat {rep}, try {attempt + 1})")
            kept.rows.extend(rows)
            kept.idle.extend([idle] if idle is not None else [])
            kept.notes.extend(notes)
            kept.finish(*key)
            if on_point is not None:
                on_point(point, kept.num_done, total)


def _check_timed(samples: pd.DataFrame, points: list[GridPoint], plan: CalibrationPlan,
                 notes: list[str]) -> None:
    """:class:`CalibrationFailed` when fewer than two prefill or two decode points (of those
    planned) were timed, with the first ``notes`` of the misses."""
    for kind in ("prefill", "decode"):
        planned = sum(1 for p in points if p.kind == kind)
        of_kind = samples.loc[samples["kind"] == kind, ["num_seqs", "seq_len"]]
        measured = len(of_kind.drop_duplicates())
        if measured < min(2, planned):
            raise CalibrationFailed(
                f"timed {measured} of {planned} {kind} grid points (each tried "
                f"{1 + plan.retries} times a repeat): the server sent its tokens in bursts "
                "(its API server fell behind the engine, as on an overloaded machine) or the "
                "streams did not overlap; notes: " + "; ".join(notes[:6]))


def median_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per grid point: the median step time and features over its repeats."""
    keys = ["kind", "num_seqs", "seq_len"]
    agg = samples.groupby(keys, sort=True).median(numeric_only=True).reset_index()
    return agg.loc[:, [*FEATURES, "step_time_s", *keys]]


def frontend_overhead(idle_ttft: pd.DataFrame, model: LinearCostModel) -> float:
    """Median over idle requests of (time to first token - the fitted prefill step): what the
    API server adds to a request outside the engine's steps (>= 0)."""
    if len(idle_ttft) == 0:
        return 0.0
    p = idle_ttft["prompt_tokens"].to_numpy(dtype=float)
    predicted = model.step_time(p, p * 0.0, p, p * p, p * 0.0 + 1.0)
    excess = idle_ttft["ttft_s"].to_numpy(dtype=float) - predicted
    return max(0.0, float(statistics.median(excess.tolist())))


def fit_calibration(samples: pd.DataFrame, idle_ttft: pd.DataFrame, info: ServerInfo,
                    plan: CalibrationPlan, url: str, notes: Sequence[str] = ()) -> Calibration:
    """Fit the linear model to the per-point medians and derive the front-end overhead."""
    if len(samples) < 2:
        raise ValueError(f"calibration measured {len(samples)} step(s); need at least 2")
    fit = fit_linear_cost_model(median_samples(samples), source=f"calibrated against {url}")
    overhead = frontend_overhead(idle_ttft, fit.model)
    return Calibration(fit, overhead, samples, idle_ttft, info, plan, url, list(notes))


@dataclass(frozen=True, slots=True)
class SpeedCheck:
    """A decode step timed now against the calibrated model's prediction for it: how far the
    server's speed has moved since the calibration (machine load, clocks, another tenant)."""

    num_seqs: int
    seq_len: int
    measured_s: float
    predicted_s: float

    @property
    def drift(self) -> float:
        """``(measured - predicted) / predicted``: +0.2 means steps take 20% longer now."""
        return (self.measured_s - self.predicted_s) / self.predicted_s


def _profiling_target(target: ServerTarget, info: ServerInfo) -> ServerTarget:
    """The served model, and token counts on every chunk (``continuous_usage_stats``): the
    chunks of a stream then time the engine's steps."""
    stream_options = {"include_usage": True, "continuous_usage_stats": True}
    return replace(with_model(target, info),
                   extra_body={**target.extra_body, "stream_options": stream_options})


async def speed_check_async(target: ServerTarget, model: LinearCostModel, *, num_seqs: int = 4,
                            seq_len: int = 64, tokens: int = 48, repeats: int = 3,
                            seed: int = 1, info: ServerInfo | None = None,
                            misses: list[str] | None = None,
                            clock: Callable[[], float] | None = None,
                            transport: httpx.AsyncBaseTransport | None = None
                            ) -> SpeedCheck | None:
    """Time ``repeats`` decode steps of ``num_seqs`` streams (median) as ``calibrate`` does and
    compare with ``model``; None when no repeat could be timed. Takes a few seconds. ``info``:
    the server as :func:`~kvbudget.live.server.discover` found it (asked again when not given);
    ``misses``: gets why each repeat that could not be timed was not; ``clock`` and
    ``transport`` as in :func:`profile_async`."""
    t0 = time.perf_counter()
    plan = CalibrationPlan(seed=seed)
    async with httpx.AsyncClient(timeout=target.timeout(), transport=transport,
                                 limits=httpx.Limits(max_connections=num_seqs + 4)) as client:
        if info is None:
            info = await discover(client, target)
        target = _profiling_target(target, info)
        prof = _Profiler(client, target, plan, clock or (lambda: time.perf_counter() - t0))
        steps: list[float] = []
        contexts: list[float] = []
        for _ in range(repeats):
            got = await prof.decode_step(num_seqs, seq_len, tokens)
            if got is not None:
                steps.append(got[0])
                contexts.append(got[1])
            elif misses is not None:
                misses.append(prof.last_miss)
    if not steps:
        return None
    ctx = statistics.median(contexts)
    predicted = float(model.step_time(0.0, float(num_seqs), num_seqs * ctx, 0.0, 0.0))
    return SpeedCheck(num_seqs, seq_len, statistics.median(steps), predicted)


def calibrate(
    target: ServerTarget,
    plan: CalibrationPlan,
    *,
    capacity_tokens: int | None = None,
    on_point: Callable[[GridPoint, int, int], None] | None = None,
    clock: Callable[[], float] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: CalibrationProgress | None = None,
    resumed_from: str | None = None,
) -> Calibration:
    """Profile the live server and fit the cost model (runs its own event loop);
    ``clock``, ``transport``, ``progress`` and ``resumed_from`` as in :func:`profile_async`."""
    samples, idle, info, notes = asyncio.run(
        profile_async(target, plan, capacity_tokens=capacity_tokens, on_point=on_point,
                      clock=clock, transport=transport, progress=progress,
                      resumed_from=resumed_from)
    )
    return fit_calibration(samples, idle, info, plan, target.base_url, notes)
