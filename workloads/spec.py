"""The ``[workload]`` table of a scenario file: pydantic models, validation messages that name
the field, and :func:`build_workload`.

A synthetic workload::

    [workload]
    kind = "synthetic"
    duration_s = 300          # or num_requests = 2000 (with both, whichever comes first)
    arrival = { kind = "poisson", rate_rps = 6.0 }

    [[workload.tiers]]
    name = "interactive"
    share = 0.7
    prompt = { kind = "lognormal", mean = 1500, sigma = 0.8 }
    output = { kind = "lognormal", mean = 250, sigma = 0.9 }
    max_output = { kind = "fixed", tokens = 1024 }
    deadline = { kind = "fixed", seconds = 10 }

    [[workload.tiers]]
    name = "batch"
    share = 0.3
    pairs = { kind = "pairs", path = "lengths.csv" }   # (prompt, output) rows of any trace
    max_output = { kind = "quantile", q = 0.99 }

A recorded trace::

    [workload]
    kind = "trace"
    path = "traces/BurstGPT_1.csv"      # relative to the scenario file
    format = "burstgpt"                 # optional: detected from the header
    [workload.options]
    window = [0, 3600]
    rate_scale = 20
    tier_column = "Log Type"
    tier_map = { "Conversation log" = "interactive", "API log" = "batch" }
"""

from __future__ import annotations

import csv
import difflib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from kvbudget.workloads import arrivals as arr
from kvbudget.workloads import lengths as ln
from kvbudget.workloads.errors import SpecError, TraceError, show
from kvbudget.workloads.lengths import FactorOfTrue
from kvbudget.workloads.synthetic import TierTraffic, generate_workload
from kvbudget.workloads.traces import FORMATS, TraceOptions, load_trace
from kvbudget.workloads.traces.options import MAX_RATE_SCALE
from kvbudget.workloads.workload import Workload, scale_rate

DEFAULT_RATE_RPS = 5.5
"""Offered load of the default what-if scenario (Llama-3.1-8B on one H100-80GB): about 1.07x
the conservative policy's capacity at 90 % overall SLO attainment (``kvbudget capacity``
measures 5.14 req/s with 3 replications on this scenario's 1,650 requests; tests/unit/studies/test_default_load.py recomputes it
and keeps this rate within 1.0-1.3x of it), so the policies' trade-off shows at latencies a
vLLM user recognises (interactive p99 TTFT of a few seconds, not hundreds)."""


class WorkloadSpecError(ValueError):
    """A ``[workload]`` table that does not validate; the message is one line naming the field."""


def _allows_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_allows_bool(a) for a in get_args(annotation))


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_switch_as_number(cls, data: Any) -> Any:
        """``true`` is not a number (pydantic's lax mode would read ``num_requests = true``
        as one request)."""
        if isinstance(data, dict):
            for name, info in cls.model_fields.items():
                value = data.get(info.alias or name)
                if isinstance(value, bool) and not _allows_bool(info.annotation):
                    raise ValueError(f"{name} expects a number, got {str(value).lower()}")
        return data


def _resolve(path: str, base_dir: Path | None) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else base_dir / p


# ---------------------------------------------------------------------------------------------
# Arrival processes


class PoissonSpec(_Model):
    kind: Literal["poisson"] = "poisson"
    rate_rps: float = Field(gt=0, le=arr.MAX_RATE_RPS)

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        return arr.PoissonArrivals(self.rate_rps)


class GammaSpec(_Model):
    kind: Literal["gamma"] = "gamma"
    rate_rps: float = Field(gt=0, le=arr.MAX_RATE_RPS)
    cv: float = Field(ge=0.01, le=100)

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        return arr.GammaArrivals(self.rate_rps, self.cv)


class ConstantSpec(_Model):
    kind: Literal["constant"] = "constant"
    rate_rps: float = Field(gt=0, le=arr.MAX_RATE_RPS)

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        return arr.ConstantArrivals(self.rate_rps)


class OnOffSpec(_Model):
    kind: Literal["onoff"] = "onoff"
    on_rate_rps: float = Field(gt=0, le=arr.MAX_RATE_RPS)
    off_rate_rps: float = Field(default=0.0, ge=0, le=arr.MAX_RATE_RPS)
    mean_on_s: float = Field(gt=0, le=arr.MAX_SPAN_S)
    mean_off_s: float = Field(gt=0, le=arr.MAX_SPAN_S)
    start: Literal["on", "off", "stationary"] = "stationary"

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        return arr.OnOffArrivals(self.on_rate_rps, self.mean_on_s, self.mean_off_s,
                                 self.off_rate_rps, self.start)


class DiurnalSpec(_Model):
    kind: Literal["diurnal"] = "diurnal"
    mean_rate_rps: float = Field(gt=0, le=arr.MAX_RATE_RPS)
    amplitude: float = Field(default=0.5, ge=0, le=1)
    period_s: float = Field(default=86_400.0, gt=0, le=arr.MAX_SPAN_S)
    peak_s: float = 14 * 3600.0
    start_s: float = 0.0

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        return arr.DiurnalArrivals(self.mean_rate_rps, self.amplitude, self.period_s,
                                   self.peak_s, self.start_s)


class RateTableSpec(_Model):
    """A rate table inline (``times_s``, ``rates_rps``) or from a CSV with columns
    ``time_s,rate_rps`` (``path``)."""

    kind: Literal["rate_table"] = "rate_table"
    times_s: list[float] | None = None
    rates_rps: list[float] | None = None
    path: str | None = None
    interpolation: Literal["step", "linear"] = "step"
    period_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> RateTableSpec:
        if self.path is None:
            if self.times_s is None or self.rates_rps is None:
                raise SpecError("times_s", "and rates_rps are required (or give path)", None,
                                show_value=False)
            self.build()
        elif self.times_s is not None or self.rates_rps is not None:
            raise SpecError("path", "replaces times_s and rates_rps: give one or the other",
                            self.path)
        return self

    def build(self, base_dir: Path | None = None) -> arr.ArrivalProcess:
        times, rates = self.times_s, self.rates_rps
        if self.path is not None:
            times, rates = _read_rate_table(_resolve(self.path, base_dir))
        assert times is not None and rates is not None
        return arr.RateTableArrivals(times, rates, self.interpolation, self.period_s)


def _read_rate_table(path: Path) -> tuple[list[float], list[float]]:
    if not path.is_file():
        raise TraceError(path, "no such file")
    times: list[float] = []
    rates: list[float] = []
    with path.open(encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        for name in ("time_s", "rate_rps"):
            if name not in header:
                raise TraceError(path, f"missing column {name!r} (the header has: "
                                 f"{', '.join(header)})", line=1, field=name)
        it, ir = header.index("time_s"), header.index("rate_rps")
        for number, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                times.append(float(row[it]))
                rates.append(float(row[ir]))
            except (ValueError, IndexError):
                raise TraceError(path, "expected numbers in time_s and rate_rps",
                                 line=number) from None
    return times, rates


ArrivalSpec = Annotated[
    PoissonSpec | GammaSpec | ConstantSpec | OnOffSpec | DiurnalSpec | RateTableSpec,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------------------------
# Length distributions


class FixedSpec(_Model):
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1)

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        return ln.Fixed(self.tokens)


class UniformSpec(_Model):
    kind: Literal["uniform"] = "uniform"
    low: int = Field(ge=1)
    high: int = Field(ge=1)

    @model_validator(mode="after")
    def _check(self) -> UniformSpec:
        self.build()
        return self

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        return ln.Uniform(self.low, self.high)


class LogNormalSpec(_Model):
    kind: Literal["lognormal"] = "lognormal"
    mean: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)
    max_tokens: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> LogNormalSpec:
        self.build()
        return self

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        return ln.LogNormal(self.mean, self.sigma, self.max_tokens)


class ZipfSpec(_Model):
    kind: Literal["zipf"] = "zipf"
    a: float = Field(gt=0)
    max_tokens: int = Field(ge=1)
    min_tokens: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> ZipfSpec:
        if self.max_tokens < self.min_tokens:
            raise SpecError("max_tokens", f"must be >= min_tokens={self.min_tokens}",
                            self.max_tokens)
        return self

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        return ln.Zipf(self.a, self.max_tokens, self.min_tokens)


class EmpiricalSpec(_Model):
    """Resample observed lengths: inline ``values``, or one column (``prompt_tokens`` or
    ``output_tokens``) of any trace file ``path`` (format detected, or ``format``)."""

    kind: Literal["empirical"] = "empirical"
    values: list[int] | None = None
    path: str | None = None
    column: Literal["prompt_tokens", "output_tokens"] = "prompt_tokens"
    format: str | None = None

    @model_validator(mode="after")
    def _check(self) -> EmpiricalSpec:
        if (self.values is None) == (self.path is None):
            raise SpecError("values", "or path must be given (one of them)", None,
                            show_value=False)
        if self.values is not None:
            self.build()
        return self

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        if self.values is not None:
            return ln.Empirical(np.asarray(self.values, dtype=np.int64))
        assert self.path is not None
        workload = _load_lengths(_resolve(self.path, base_dir), self.format)
        column = getattr(workload, self.column)
        return ln.Empirical(column, source=f"{self.path}:{self.column}")


def _load_lengths(path: Path, fmt: str | None) -> Workload:
    # Only the lengths matter here: an oracle max_output keeps the file's true outputs.
    options = TraceOptions(format=fmt, max_output=FactorOfTrue(1.0),
                           arrival=arr.ConstantArrivals(1.0))
    return load_trace(path, options).workload


class PmfSpec(_Model):
    kind: Literal["pmf"] = "pmf"
    values: list[int] = Field(min_length=1)
    probs: list[float] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> PmfSpec:
        self.build()
        return self

    def build(self, base_dir: Path | None = None) -> ln.LengthDist:
        return ln.Pmf(np.asarray(self.values, dtype=np.int64),
                      np.asarray(self.probs, dtype=np.float64))


LengthSpec = Annotated[
    FixedSpec | UniformSpec | LogNormalSpec | ZipfSpec | EmpiricalSpec | PmfSpec,
    Field(discriminator="kind"),
]


class PairsSpec(_Model):
    """(prompt, output) pairs drawn together: inline lists or the rows of a trace file."""

    kind: Literal["pairs"] = "pairs"
    prompt: list[int] | None = None
    output: list[int] | None = None
    path: str | None = None
    format: str | None = None

    @model_validator(mode="after")
    def _check(self) -> PairsSpec:
        if self.path is None:
            if self.prompt is None or self.output is None:
                raise SpecError("prompt", "and output are required (or give path)", None,
                                show_value=False)
            self.build()
        elif self.prompt is not None or self.output is not None:
            raise SpecError("path", "replaces prompt and output: give one or the other",
                            self.path)
        return self

    def build(self, base_dir: Path | None = None) -> ln.JointEmpirical:
        if self.path is None:
            assert self.prompt is not None and self.output is not None
            return ln.JointEmpirical(np.asarray(self.prompt, dtype=np.int64),
                                     np.asarray(self.output, dtype=np.int64))
        workload = _load_lengths(_resolve(self.path, base_dir), self.format)
        return ln.JointEmpirical(workload.prompt_tokens, workload.output_tokens,
                                 source=self.path)


# ---------------------------------------------------------------------------------------------
# max_output_tokens rules and deadlines


class FixedCapSpec(_Model):
    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1)
    truncate: bool = False

    def build(self) -> ln.MaxOutputRule:
        return ln.FixedCap(self.tokens, self.truncate)


class FactorSpec(_Model):
    kind: Literal["factor"] = "factor"
    factor: float = Field(ge=1, le=1000)

    def build(self) -> ln.MaxOutputRule:
        return ln.FactorOfTrue(self.factor)


class QuantileSpec(_Model):
    kind: Literal["quantile"] = "quantile"
    q: float = Field(ge=0, le=1)
    truncate: bool = False

    def build(self) -> ln.MaxOutputRule:
        return ln.QuantileCap(self.q, self.truncate)


MaxOutputSpec = Annotated[FixedCapSpec | FactorSpec | QuantileSpec, Field(discriminator="kind")]


class FixedDelaySpec(_Model):
    kind: Literal["fixed"] = "fixed"
    seconds: float = Field(ge=0)

    def build(self) -> ln.DelayDist:
        return ln.FixedDelay(self.seconds)


class UniformDelaySpec(_Model):
    kind: Literal["uniform"] = "uniform"
    low_s: float = Field(ge=0)
    high_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _check(self) -> UniformDelaySpec:
        self.build()
        return self

    def build(self) -> ln.DelayDist:
        return ln.UniformDelay(self.low_s, self.high_s)


class ExponentialDelaySpec(_Model):
    kind: Literal["exponential"] = "exponential"
    mean_s: float = Field(gt=0)

    def build(self) -> ln.DelayDist:
        return ln.ExponentialDelay(self.mean_s)


class LogNormalDelaySpec(_Model):
    kind: Literal["lognormal"] = "lognormal"
    mean_s: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)

    def build(self) -> ln.DelayDist:
        return ln.LogNormalDelay(self.mean_s, self.sigma)


DelaySpec = Annotated[
    FixedDelaySpec | UniformDelaySpec | ExponentialDelaySpec | LogNormalDelaySpec,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------------------------
# Workloads


_TIER_NAME = r"^[A-Za-z0-9_-]+$"


class TierSpec(_Model):
    name: str = Field(pattern=_TIER_NAME)
    share: float = Field(default=1.0, gt=0, le=1)
    prompt: LengthSpec | None = None
    output: LengthSpec | None = None
    pairs: PairsSpec | None = None
    max_output: MaxOutputSpec = FixedCapSpec(tokens=2048)
    deadline: DelaySpec | None = None

    @model_validator(mode="after")
    def _check(self) -> TierSpec:
        if self.pairs is not None:
            if self.prompt is not None or self.output is not None:
                raise SpecError("pairs", "replaces prompt and output: give one or the other",
                                None, show_value=False)
        elif self.prompt is None or self.output is None:
            missing = "prompt" if self.prompt is None else "output"
            raise SpecError(missing, "is required (or give pairs)", None, show_value=False)
        return self

    def build(self, base_dir: Path | None = None) -> TierTraffic:
        return TierTraffic(
            name=self.name,
            share=self.share,
            prompt=None if self.prompt is None else self.prompt.build(base_dir),
            output=None if self.output is None else self.output.build(base_dir),
            pairs=None if self.pairs is None else self.pairs.build(base_dir),
            max_output=self.max_output.build(),
            deadline=None if self.deadline is None else self.deadline.build(),
        )


class SyntheticWorkloadSpec(_Model):
    kind: Literal["synthetic"] = "synthetic"
    arrival: ArrivalSpec
    tiers: list[TierSpec] = Field(min_length=1)
    num_requests: int | None = Field(default=None, ge=0, le=arr.MAX_REQUESTS)
    duration_s: float | None = Field(default=None, gt=0)
    name: str = "synthetic"
    rate_scale: float = Field(default=1.0, ge=1 / MAX_RATE_SCALE, le=MAX_RATE_SCALE)
    """``--rate-scale``: the drawn requests offered this many times as fast, as ``sweep
    --rate-scale`` scales them (:func:`~kvbudget.workloads.workload.scale_rate`): the same
    requests over ``1/rate_scale`` of the span, not more requests over the same duration
    (``arrival.rate_rps``)."""

    @model_validator(mode="after")
    def _check(self) -> SyntheticWorkloadSpec:
        if self.num_requests is None and self.duration_s is None:
            raise SpecError("duration_s", "or num_requests is required", None,
                            show_value=False)
        names = [t.name for t in self.tiers]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise SpecError(f"tiers[{i}].name", "repeats an earlier tier", name)
        total = sum(t.share for t in self.tiers)
        if abs(total - 1) > 1e-6:
            raise SpecError("tiers", "shares must sum to 1", round(total, 9))
        return self

    def build(self, rng: np.random.Generator, base_dir: Path | None = None) -> Workload:
        workload = generate_workload(
            self.arrival.build(base_dir),
            [t.build(base_dir) for t in self.tiers],
            rng,
            num_requests=self.num_requests,
            duration_s=self.duration_s,
            name=self.name,
        )
        workload = replace(workload, meta={**workload.meta, "generator": generator_said(self)})
        if self.rate_scale == 1:
            return workload
        scaled = scale_rate(workload, self.rate_scale)
        before = scaled.meta.get("assumed")
        return replace(scaled, meta={**scaled.meta, "assumed": (
            *(before if isinstance(before, tuple) else ()), rate_scale_said(
                len(workload), self.rate_scale, workload.span_s, self.duration_s))})


def generator_said(spec: SyntheticWorkloadSpec) -> dict[str, Any]:
    """What a synthetic workload is drawn from, as its keys name it (the words a user sets in
    ``[workload]``): ``arrival`` (``poisson(rate_rps 5.5) for 300 s``) and per tier its share
    and ``prompt`` / ``output`` distributions (``lognormal(mean 1,500, sigma 0.8, max_tokens
    16,384)``; ``pairs``: the pairs'), for :func:`kvbudget.workloads.mix.mix_of`."""
    d, n = spec.duration_s, spec.num_requests
    span = (f" for {d:g} s or {n:,} requests, whichever ends first" if d is not None
            and n is not None else f" for {d:g} s" if d is not None else f", {n:,} requests")
    return {"arrival": _said(spec.arrival) + span,
            "tiers": {t.name: {"share": t.share, **{
                k: _said(d) for k, d in (("prompt", t.prompt), ("output", t.output),
                                         ("pairs", t.pairs)) if d is not None}}
                      for t in spec.tiers}}


def _said(spec: BaseModel) -> str:
    """``kind(key value, ...)``: a distribution's or an arrival process's fields as given (a
    list of more than four values by its length)."""
    fields = spec.model_dump(exclude_none=True, exclude_defaults=False)
    kind = fields.pop("kind", type(spec).__name__)

    def value(v: Any) -> str:
        if isinstance(v, list):
            return f"{len(v):,} values" if len(v) > 4 else "[" + " ".join(map(value, v)) + "]"
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, int | float) and float(v).is_integer() and abs(v) >= 1000:
            return f"{int(v):,}"
        return f"{v:g}" if isinstance(v, float) else str(v)

    return f"{kind}(" + ", ".join(f"{k} {value(v)}" for k, v in fields.items()) + ")"


def rate_scale_said(num: int, scale: float, span_s: float, duration_s: float | None) -> str:
    """How a synthetic workload's ``rate_scale`` was taken: ``sweep --rate-scale``'s way, the
    drawn requests' arrival times divided by it (its span said before and after), where
    ``arrival.rate_rps`` would draw more requests over the same duration."""
    over = f" over the {duration_s:g} s duration" if duration_s is not None else ""
    return (f"rate scale {scale:g} taken as sweep --rate-scale takes it: the {num:,} requests "
            f"drawn at the arrival's rate, offered {scale:g}x as fast (their {span_s:,.1f} s of "
            f"arrivals in {span_s / scale:,.1f} s); workload.arrival.rate_rps x {scale:g} would "
            f"draw about {scale:g}x as many requests{over} instead")


class TraceOptionsSpec(_Model):
    """:class:`kvbudget.workloads.traces.TraceOptions` as written in a file (see its docs)."""

    window: list[float] | None = Field(default=None, min_length=1, max_length=2)
    rate_scale: float = Field(default=1.0, gt=0)
    sample_fraction: float | None = Field(default=None, gt=0, le=1)
    sample_count: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=0)
    tier_column: str | None = None
    tier_map: dict[str, Annotated[str, Field(pattern=_TIER_NAME)]] | None = None
    tier_shares: dict[str, float] | None = None
    default_tier: str = Field(default="interactive", pattern=_TIER_NAME)
    max_output: MaxOutputSpec = FixedCapSpec(tokens=2048)
    max_output_by_tier: dict[str, MaxOutputSpec] | None = None
    spread_s: float | None = Field(default=None, gt=0)
    arrival: ArrivalSpec | None = None
    columns: dict[str, str] | None = None
    arrival_unit: Literal["s", "ms", "us", "ns"] = "s"
    prefix_block_tokens: int | None = Field(default=None, ge=1)
    clients: list[int] | None = None
    servegen_arrivals: Literal["fitted_rate", "fitted", "rate_cv"] = "fitted_rate"

    @model_validator(mode="after")
    def _check(self) -> TraceOptionsSpec:
        self.build(None, None, validate_only=True)
        return self

    def build(self, fmt: str | None, base_dir: Path | None, *,
              validate_only: bool = False) -> Any:
        """The TraceOptions (``validate_only`` skips reading an arrival rate-table file)."""
        window: tuple[float, float | None] | None = None
        if self.window is not None:
            window = (self.window[0], self.window[1] if len(self.window) > 1 else None)
        return TraceOptions(
            format=fmt,
            window=window,
            rate_scale=self.rate_scale,
            sample_fraction=self.sample_fraction,
            sample_count=self.sample_count,
            seed=self.seed,
            tier_column=self.tier_column,
            tier_map=self.tier_map,
            tier_shares=self.tier_shares,
            default_tier=self.default_tier,
            max_output=self.max_output.build(),
            max_output_by_tier=(None if self.max_output_by_tier is None else
                                {k: v.build() for k, v in self.max_output_by_tier.items()}),
            spread_s=self.spread_s,
            arrival=(None if self.arrival is None or validate_only
                     else self.arrival.build(base_dir)),
            columns=self.columns,
            arrival_unit=self.arrival_unit,
            prefix_block_tokens=self.prefix_block_tokens,
            clients=None if self.clients is None else tuple(self.clients),
            servegen_arrivals=self.servegen_arrivals,
        )


class TraceWorkloadSpec(_Model):
    kind: Literal["trace"] = "trace"
    path: str = Field(min_length=1)
    format: str | None = None
    """One of the loader's :data:`~kvbudget.workloads.traces.FORMATS` (None: detected)."""
    options: TraceOptionsSpec = TraceOptionsSpec()

    @model_validator(mode="after")
    def _check(self) -> TraceWorkloadSpec:
        if self.format is not None and self.format not in FORMATS:
            *rest, last = (repr(f) for f in FORMATS)
            raise SpecError("format", f"must be {', '.join(rest)} or {last}", self.format)
        return self

    def build(self, rng: np.random.Generator, base_dir: Path | None = None) -> Workload:
        options = self.options.build(self.format, base_dir)
        if options.seed is None:
            options = replace(options, seed=int(rng.integers(0, 2**31 - 1)))
        return load_trace(_resolve(self.path, base_dir), options).workload


WorkloadSpec = Annotated[SyntheticWorkloadSpec | TraceWorkloadSpec, Field(discriminator="kind")]
"""A ``[workload]`` table: ``kind = "synthetic"`` or ``kind = "trace"``."""

_ADAPTER: TypeAdapter[SyntheticWorkloadSpec | TraceWorkloadSpec] = TypeAdapter(WorkloadSpec)


def build_workload(
    spec: SyntheticWorkloadSpec | TraceWorkloadSpec,
    rng: np.random.Generator,
    base_dir: Path | None = None,
) -> Workload:
    """The workload a spec describes. Relative paths resolve against ``base_dir`` (the
    scenario file's directory). Every random draw comes from ``rng``."""
    return spec.build(rng, base_dir)


def default_workload_spec() -> SyntheticWorkloadSpec:
    """The default what-if traffic: 70% interactive, 30% batch, Poisson at
    :data:`DEFAULT_RATE_RPS` (5.5 req/s) for 300 s: Llama-3.1-8B on one H100-80GB with vLLM's
    defaults and the ``vllm-v1`` step model serves its interactive share at 40-50 ms per token
    with the KV cache full, so that the admission policies' trade-off shows (the batch tier's
    long near-cap generations fill it).

    Interactive: prompts lognormal (mean 1,500, sigma 0.8, at most 16,384 tokens), true outputs
    lognormal (mean 250, sigma 0.9), ``max_tokens`` 1,024 (raised to the true length for the
    ~2% of answers that are longer). Batch: prompts lognormal (mean 4,000, sigma 0.6, at most
    24,576), true outputs uniform on 1,536..2,048 (long generations that mostly run
    close to their cap), ``max_tokens`` 2,048.
    """
    return SyntheticWorkloadSpec(
        arrival=PoissonSpec(rate_rps=DEFAULT_RATE_RPS),
        duration_s=300.0,
        name="default",
        tiers=[
            TierSpec(
                name="interactive",
                share=0.7,
                prompt=LogNormalSpec(mean=1500, sigma=0.8, max_tokens=16_384),
                output=LogNormalSpec(mean=250, sigma=0.9),
                max_output=FixedCapSpec(tokens=1024),
            ),
            TierSpec(
                name="batch",
                share=0.3,
                prompt=LogNormalSpec(mean=4000, sigma=0.6, max_tokens=24_576),
                output=UniformSpec(low=1536, high=2048),
                max_output=FixedCapSpec(tokens=2048),
            ),
        ],
    )


# ---------------------------------------------------------------------------------------------
# Validation messages


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<",
           "less_than_equal": "<="}


def _path(prefix: str, loc: tuple[int | str, ...], data: Any) -> list[int | str]:
    """The location without the discriminator tags pydantic inserts for tagged unions."""
    parts: list[int | str] = []
    node = data
    tag_skipped = False
    for item in loc:
        if (isinstance(item, str) and isinstance(node, Mapping) and not tag_skipped
                and node.get("kind") == item):
            tag_skipped = True
            continue
        tag_skipped = False
        parts.append(item)
        if isinstance(node, Mapping) and isinstance(item, str):
            node = node.get(item)
        elif isinstance(node, list | tuple) and isinstance(item, int) and 0 <= item < len(node):
            node = node[item]
        else:
            node = None
    return parts


def _join(prefix: str, parts: list[int | str]) -> str:
    text = prefix
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _describe(error: Mapping[str, Any]) -> tuple[str, list[int | str], bool]:
    """(problem, extra path parts, show the input?) for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "is required", [], False
    if kind == "extra_forbidden":
        return "is not a known field", [], False
    if kind in _BOUNDS:
        bound = next(iter(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")))
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {_BOUNDS[kind]} {bound}", [], True
    if kind == "union_tag_invalid":
        return f"must be one of {ctx.get('expected_tags')}", ["kind"], False
    if kind == "union_tag_not_found":
        return "is required", ["kind"], False
    if kind == "value_error":
        err = ctx.get("error")
        if isinstance(err, SpecError):
            text = err.problem + (f", got {show(err.value)}" if err.show_value else "")
            return text, list(_split_field(err.field)), False
        return str(err), [], False
    if kind == "string_pattern_mismatch":
        return "must be alphanumeric (with - or _)", [], True
    msg = str(error.get("msg", "is invalid"))
    msg = msg.replace("Input should be", "must be").replace("Value error, ", "")
    return msg, [], True


def _split_field(name: str) -> list[int | str]:
    out: list[int | str] = []
    for piece in name.replace("]", "").split("."):
        head, *indices = piece.split("[")
        if head:
            out.append(head)
        out.extend(int(i) if i.isdigit() else i for i in indices)
    return out


def _spec_models(hint: Any) -> list[type[_Model]]:
    """The spec models a field's annotation holds (through unions, ``| None``, ``list[...]``
    and ``Annotated``)."""
    if isinstance(hint, type) and issubclass(hint, _Model):
        return [hint]
    return [m for arg in get_args(hint) for m in _spec_models(arg)]


def _of_kind(models: list[type[_Model]], node: Any) -> list[type[_Model]]:
    """Of a tagged union's models, those of the ``kind`` the table gives (all without one)."""
    if not isinstance(node, Mapping) or not isinstance(node.get("kind"), str):
        return models
    tagged = [m for m in models if "kind" in m.model_fields
              and m.model_fields["kind"].default == node["kind"]]
    return tagged or models


def _closest_field(data: Any, prefix: str, parts: list[int | str]) -> str:
    """``" (did you mean workload.arrival.rate_rps?)"`` for an unknown key (the last of
    ``parts``) of a workload table: the table's known field closest to it, else a field of
    one of its tables that has that name (``rate_rps`` given at the top: it is the
    arrival's); ``""`` where none is."""
    models = _of_kind(_spec_models(WorkloadSpec), data)
    node = data
    for part in parts[:-1]:
        if isinstance(part, str):
            models = [m for model in models if part in model.model_fields
                      for m in _spec_models(model.model_fields[part].annotation)]
            node = node.get(part) if isinstance(node, Mapping) else None
        else:
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        models = _of_kind(models, node)
    unknown = parts[-1]
    if not isinstance(unknown, str):
        return ""
    names = list(dict.fromkeys(n for m in models for n in m.model_fields))
    inner: dict[str, list[str]] = {}  # a table field's own fields (not a list's: needs an index)
    for name in names:
        hints = [m.model_fields[name].annotation for m in models if name in m.model_fields]
        if not any(get_origin(h) is list for h in hints):
            sub = node.get(name) if isinstance(node, Mapping) else None  # its kind, if given
            inner[name] = list(dict.fromkeys(
                n for h in hints for m in _of_kind(_spec_models(h), sub) for n in m.model_fields))
    guesses = [[*parts[:-1], t, unknown] for t, fields in inner.items() if unknown in fields]
    if not guesses:
        guesses = [[*parts[:-1], n]
                   for n in difflib.get_close_matches(unknown, names, n=1, cutoff=0.6)]
    if not guesses:
        guesses = [[*parts[:-1], t, n] for t, fields in inner.items()
                   for n in difflib.get_close_matches(unknown, fields, n=1, cutoff=0.6)]
    if not guesses:
        return ""
    return f" (did you mean {' or '.join(_join(prefix, g) for g in guesses[:3])}?)"


def format_validation_error(exc: ValidationError, data: Any, prefix: str = "workload") -> str:
    """One line naming the first invalid field, e.g.
    ``workload.tiers[1].share must be > 0, got -1`` (and how many more errors there are)."""
    errors = exc.errors()
    first = errors[0]
    problem, extra, with_input = _describe(first)
    parts = _path(prefix, tuple(first["loc"]), data) + extra
    where = _join(prefix, parts)
    text = f"{where} {problem}"
    if first["type"] == "extra_forbidden":
        text += _closest_field(data, prefix, parts)
    if with_input:
        text += f", got {show(first.get('input'))}"
    if first["type"] == "union_tag_invalid":
        text += f", got {(first.get('ctx') or {}).get('tag')!r}"
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return text


def parse_workload_spec(data: Mapping[str, Any], prefix: str = "workload"
                        ) -> SyntheticWorkloadSpec | TraceWorkloadSpec:
    """Validate a ``[workload]`` table (as parsed from TOML); raises
    :class:`WorkloadSpecError` with one line that names the field."""
    try:
        return _ADAPTER.validate_python(dict(data))
    except ValidationError as exc:
        raise WorkloadSpecError(format_validation_error(exc, data, prefix)) from None
