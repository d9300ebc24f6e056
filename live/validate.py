"""The live half of ``kvbudget validate --url``: the calibrated model it checks, the server it
runs against, and the replay between two speed checks.

A notebook makes the same calls as the command::

    cal = load_live_cost_model(Path("cost_model.json"))
    info = discover_kv_server(target)
    run = run_live_validation(target, cal.model, info, replay, num_seqs=cal.max_num_seqs)

then hands ``run``'s figures to :func:`kvbudget.studies.validate.compare_live_validation`
(this package never imports the simulator).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from kvbudget.live.calibrate import SpeedCheck, speed_check_async
from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayOutcome
from kvbudget.live.server import BackendUnavailable, ServerInfo, discover
from kvbudget.perf.cost_model import LinearCostModel, read_cost_file
from kvbudget.perf.fitted_on import warned_said


@dataclass(frozen=True, slots=True)
class LiveCostModel:
    """A ``kvbudget calibrate --url`` file as a live validation uses it: the linear model, the
    calibrated front-end overhead, and the batch limits (the calibration plan's, unless given)."""

    model: LinearCostModel
    frontend_overhead_s: float
    max_num_seqs: int
    max_num_batched_tokens: int
    limits_from: str = ""
    """Where the batch limits came from, as a line says it (:func:`simulated_engine_line`)."""
    warnings: tuple[str, ...] = ()
    """What the file's calibration warned of (``calibration.warnings``), one line as every
    command that loads a cost file says it (:func:`~kvbudget.perf.fitted_on.warned_said`)."""


def load_live_cost_model(path: Path, *, max_num_seqs: int | None = None,
                         max_num_batched_tokens: int | None = None) -> LiveCostModel:
    """Read ``path``; ValueError (naming it) unless it holds a linear cost model. The batch
    limits default to the calibration plan's, else 256 and 2048 (``CalibrationPlan``'s)."""
    read = read_cost_file(path)  # validates the file, its calibration.warnings too
    loaded = read.model
    if not isinstance(loaded, LinearCostModel):
        raise ValueError(f"{path}: a live validate needs a linear cost model (kvbudget "
                         "calibrate --url writes one); validate a recorded run with --records")
    overhead = read.frontend_overhead_s
    plan = read.payload.get("calibration", {}).get("plan", {})
    return LiveCostModel(
        model=loaded, frontend_overhead_s=overhead,
        max_num_seqs=max_num_seqs or int(plan.get("max_num_seqs", 256)),
        max_num_batched_tokens=max_num_batched_tokens
        or int(plan.get("max_num_batched_tokens", 2048)),
        limits_from=_limits_from(path, plan, max_num_seqs, max_num_batched_tokens),
        warnings=warned_said(path, read.warned))


def _limits_from(path: Path, plan: dict[str, Any], max_num_seqs: int | None,
                 max_num_batched_tokens: int | None) -> str:
    """Where ``max_num_seqs`` and ``max_num_batched_tokens`` came from: the flags, else the
    calibration's plan in ``path`` (what calibrate was given, else its defaults), else
    kvbudget's defaults. Neither is told by a vLLM server (its ``/metrics`` has no such
    figure), so a line says which was taken."""
    flags = [f for f, v in (("--max-num-seqs", max_num_seqs),
                            ("--max-num-batched-tokens", max_num_batched_tokens)) if v]
    if len(flags) == 2:
        return "as given"
    where = (f"from {path.name}'s calibration plan, what calibrate was given or else its "
             "defaults," if plan else f"kvbudget's defaults ({path.name} records no plan),")
    return (f"{flags[0]} as given, the other {where}" if flags else where) + (
        " which the server does not tell (--max-num-seqs and --max-num-batched-tokens give "
        "the server's)")


def simulated_engine_line(info: ServerInfo, cal: LiveCostModel) -> str:
    """What ``validate --url`` simulates the server as, and where each figure came from: the
    KV blocks, block size and prefix caching its ``/metrics`` tells, its ``/v1/models``
    context, and the batch limits of :attr:`LiveCostModel.limits_from`."""
    caching = ("prefix caching on (vLLM's default; /metrics does not say)"
               if info.enable_prefix_caching is None
               else f"prefix caching {'on' if info.enable_prefix_caching else 'off'} (/metrics)")
    context = ("no max_model_len (/v1/models tells none)" if info.max_model_len is None
               else f"max_model_len {info.max_model_len:,} (/v1/models)")
    return (f"simulated the server as it tells itself: {info.usable_blocks:,} usable KV blocks "
            f"of {info.block_size} tokens (/metrics), {caching}, {context}; max_num_seqs "
            f"{cal.max_num_seqs:,} and max_num_batched_tokens {cal.max_num_batched_tokens:,} "
            f"{cal.limits_from}")


def discover_kv_server(target: ServerTarget) -> ServerInfo:
    """The server as :func:`~kvbudget.live.server.discover` finds it, which must expose its KV
    blocks and block size (``vllm:cache_config_info``); ValueError otherwise,
    :class:`~kvbudget.live.server.BackendUnavailable` when it cannot be reached."""

    async def ask() -> ServerInfo:
        async with httpx.AsyncClient() as client:
            return await discover(client, target)

    info = asyncio.run(ask())
    if info.capacity_problem:
        raise ValueError(f"{target.base_url}/metrics: {info.capacity_problem}; validate needs "
                         "the server's real KV blocks")
    if info.usable_blocks is None or info.block_size is None:
        raise ValueError(f"{target.base_url}/metrics does not expose vllm:cache_config_info; "
                         "validate needs the server's KV blocks")
    return info


class SpeedCheckFailed(BackendUnavailable):
    """The server refused or dropped a speed check."""


class NothingCompleted(BackendUnavailable):
    """The replay completed none of its requests: nothing to compare. ``by_gateway``: no
    request had an answer from the server (the gateway refused or expired every one, as what
    the trace's load assumed, a max_tokens, may explain)."""

    def __init__(self, message: str, *, by_gateway: bool) -> None:
        super().__init__(message)
        self.by_gateway = by_gateway


@dataclass(frozen=True, slots=True)
class LiveValidationRun:
    """A replay between two speed checks. ``checks``: before and after (None where not timed,
    or ``speed_check`` was off); ``info``: the server's figures (KV blocks, block size)."""

    live: ReplayOutcome
    info: ServerInfo
    checks: tuple[SpeedCheck | None, SpeedCheck | None]
    speed_checked: bool
    untimed_why: tuple[str, str] = ("", "")
    """Why a speed check (before, after) could not be timed ('' where it was, or was off)."""

    @property
    def block_size(self) -> int:
        """Tokens per KV block (:func:`discover_kv_server` made sure the server says)."""
        assert self.info.block_size is not None
        return self.info.block_size

    @property
    def num_gpu_blocks(self) -> int:
        """The server's usable KV blocks."""
        assert self.info.usable_blocks is not None
        return self.info.usable_blocks

    def drift_factor(self) -> float | None:
        """Mean measured / predicted step time of the timed checks; None if none was timed."""
        timed = [c for c in self.checks if c is not None]
        if not timed:
            return None
        return sum(c.measured_s / c.predicted_s for c in timed) / len(timed)

    def speed_check_meta(self) -> dict[str, dict[str, Any] | None]:
        """``{"before": ..., "after": ...}`` as ``validation.json`` records them."""
        return {when: None if c is None else {
            "num_seqs": c.num_seqs, "seq_len": c.seq_len, "measured_s": c.measured_s,
            "predicted_s": c.predicted_s, "drift": c.drift}
            for when, c in zip(("before", "after"), self.checks, strict=True)}


def run_live_validation(target: ServerTarget, model: LinearCostModel, info: ServerInfo,
                        replay: Callable[[], ReplayOutcome], *, num_seqs: int,
                        speed_check: bool = True) -> LiveValidationRun:
    """Time a decode step of up to 4 streams (at most ``num_seqs``) against ``model``, run
    ``replay`` (e.g. ``lambda: asyncio.run(replay_async(...))``; the command's adds a progress
    bar), time it again. :class:`SpeedCheckFailed` when the server fails a check."""

    untimed: list[str] = []

    def check() -> SpeedCheck | None:
        if not speed_check:
            untimed.append("")
            return None
        n = max(1, min(4, num_seqs))
        misses: list[str] = []
        try:
            got = asyncio.run(speed_check_async(target, model, num_seqs=n, info=info,
                                                misses=misses))
        except BackendUnavailable as exc:
            raise SpeedCheckFailed(f"speed check: {exc}") from exc
        untimed.append("" if got is not None else untimed_said(misses))
        return got

    before = check()
    live = replay()
    done = live.records["status"] == "completed"
    if not done.any():  # nothing measured: no comparison to make
        errors = live.records.loc[live.records["error"] != "", "error"]
        first = f"; first error: {errors.iloc[0]}" if len(errors) else ""
        statuses = live.records["status"].value_counts()
        how = ", ".join(f"{n} {status}" for status, n in statuses.items())
        raise NothingCompleted(f"the replay completed none of its {len(live.records)} "
                               f"requests ({how}{first}); nothing to validate against",
                               by_gateway=not len(errors))
    after = check()
    return LiveValidationRun(live=live, info=info, checks=(before, after),
                             speed_checked=speed_check, untimed_why=(untimed[0], untimed[1]))


def untimed_said(misses: list[str]) -> str:
    """Why a speed check timed none of its repeats: each distinct reason, with how many
    repeats it stopped."""
    counted = {why: misses.count(why) for why in dict.fromkeys(misses)}
    return "; ".join(f"{why} ({k} of {len(misses)} tries)" if len(counted) > 1 else
                     f"in none of its {len(misses)} tries: {why}" for why, k in counted.items())
