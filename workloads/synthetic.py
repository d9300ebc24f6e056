"""Synthetic traffic: an arrival process, a tier mix, and per-tier length and deadline draws.

Everything random comes from the one ``numpy.random.Generator`` passed to
:func:`generate_workload`. It is split into independent streams (arrivals, tier choice, one per
tier) so that changing one tier's lengths leaves the arrival times and the other tiers' draws
unchanged (common random numbers for what-if comparisons). The same generator state gives
byte-identical arrays.

This module is the one import point for the building blocks: arrival processes
(:mod:`kvbudget.workloads.arrivals`), length and delay distributions and ``max_output_tokens`` rules
(:mod:`kvbudget.workloads.lengths`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kvbudget.workloads.arrivals import (
    MAX_REQUESTS,
    ArrivalProcess,
    ConstantArrivals,
    DiurnalArrivals,
    GammaArrivals,
    OnOffArrivals,
    PoissonArrivals,
    RateTableArrivals,
    split_streams,
)
from kvbudget.workloads.errors import SpecError
from kvbudget.workloads.lengths import (
    DelayDist,
    Empirical,
    ExponentialDelay,
    FactorOfTrue,
    Fixed,
    FixedCap,
    FixedDelay,
    IntArray,
    JointEmpirical,
    LengthDist,
    LogNormal,
    LogNormalDelay,
    MaxOutputRule,
    Pmf,
    QuantileCap,
    Uniform,
    UniformDelay,
    Zipf,
)
from kvbudget.workloads.workload import Workload

__all__ = [
    "MAX_REQUESTS",
    "ArrivalProcess",
    "ConstantArrivals",
    "DelayDist",
    "DiurnalArrivals",
    "Empirical",
    "ExponentialDelay",
    "FactorOfTrue",
    "Fixed",
    "FixedCap",
    "FixedDelay",
    "GammaArrivals",
    "JointEmpirical",
    "LengthDist",
    "LogNormal",
    "LogNormalDelay",
    "MaxOutputRule",
    "OnOffArrivals",
    "Pmf",
    "PoissonArrivals",
    "QuantileCap",
    "RateTableArrivals",
    "TierTraffic",
    "Uniform",
    "UniformDelay",
    "Zipf",
    "generate_workload",
    "split_streams",
]


def _valid_tier_name(name: object) -> bool:
    return isinstance(name, str) and bool(name) and name.replace("_", "").replace(
        "-", "").isalnum()


@dataclass(frozen=True)
class TierTraffic:
    """One tier's share of the requests and how its requests look.

    Give either ``prompt`` and ``output`` (drawn independently) or ``pairs`` (drawn jointly).
    ``max_output`` turns the true output length into the declared ``max_output_tokens``
    (default: a client that always asks for 2,048, raised to the true length where the true
    output is longer). ``deadline`` draws each request's admission deadline as a delay after
    its arrival; without it requests carry no deadline (their tier's queue timeout applies).
    """

    name: str
    share: float = 1.0
    prompt: LengthDist | None = None
    output: LengthDist | None = None
    pairs: JointEmpirical | None = None
    max_output: MaxOutputRule = field(default_factory=lambda: FixedCap(2048))
    deadline: DelayDist | None = None

    def __post_init__(self) -> None:
        if not _valid_tier_name(self.name):
            raise SpecError("name", "must be alphanumeric (with - or _)", self.name)
        if not (isinstance(self.share, int | float) and math.isfinite(self.share)
                and 0 < self.share <= 1):
            raise SpecError("share", "must be > 0 and <= 1", self.share)
        if self.pairs is not None:
            if self.prompt is not None or self.output is not None:
                raise SpecError("pairs", "replaces prompt and output: give one or the other",
                                None, show_value=False)
        elif self.prompt is None or self.output is None:
            missing = "prompt" if self.prompt is None else "output"
            raise SpecError(missing, "is required (or give pairs)", None, show_value=False)

    def output_quantile(self) -> Callable[[float], int]:
        if self.pairs is not None:
            return self.pairs.output_quantile
        assert self.output is not None
        return self.output.quantile

    def draw(self, rng: np.random.Generator, n: int) -> tuple[IntArray, IntArray, IntArray]:
        """``(prompt, output, max_output)`` for ``n`` requests of this tier."""
        if self.pairs is not None:
            prompt, output = self.pairs.sample(rng, n)
        else:
            assert self.prompt is not None and self.output is not None
            prompt = self.prompt.sample(rng, n)
            output = self.output.sample(rng, n)
        max_output, output = self.max_output.apply(output, self.output_quantile())
        return prompt, output, max_output


def generate_workload(
    arrivals: ArrivalProcess,
    tiers: Sequence[TierTraffic],
    rng: np.random.Generator,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
    name: str = "synthetic",
) -> Workload:
    """Draw a workload: arrivals, then a tier per request by share, then per-tier lengths.

    Shares must sum to 1 (within 1e-6). Request ids count from 0 in arrival order.
    """
    tiers = tuple(tiers)
    if not tiers:
        raise SpecError("tiers", "must name at least one tier", [], show_value=False)
    names = [t.name for t in tiers]
    if len(set(names)) != len(names):
        raise SpecError("tiers", "must have distinct names", names)
    shares = np.array([t.share for t in tiers], dtype=np.float64)
    if abs(float(shares.sum()) - 1.0) > 1e-6:
        raise SpecError("tiers", "shares must sum to 1", round(float(shares.sum()), 9))
    streams = split_streams(rng, 2 + len(tiers))
    arrival = arrivals.sample(streams[0], num_requests=num_requests, duration_s=duration_s)
    n = len(arrival)
    if len(tiers) == 1:
        codes = np.zeros(n, dtype=np.int16)
    else:
        codes = streams[1].choice(len(tiers), size=n, p=shares / shares.sum()).astype(np.int16)
    prompt = np.zeros(n, dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    max_output = np.zeros(n, dtype=np.int64)
    deadline = np.full(n, np.nan)
    for j, tier in enumerate(tiers):
        idx = np.flatnonzero(codes == j)
        tier_rng = streams[2 + j]
        p, o, m = tier.draw(tier_rng, len(idx))
        prompt[idx], output[idx], max_output[idx] = p, o, m
        if tier.deadline is not None:
            deadline[idx] = arrival[idx] + tier.deadline.sample(tier_rng, len(idx))
    return Workload(
        arrival_s=arrival,
        prompt_tokens=prompt,
        output_tokens=output,
        max_output_tokens=max_output,
        tier=codes,
        tier_names=tuple(names),
        deadline_s=deadline,
        request_id=np.arange(n, dtype=np.int64),
        name=name,
        meta={"source": "synthetic", "mean_rate_rps": arrivals.mean_rate_rps},
    )
