"""Arrival processes: when requests arrive.

Each process draws from the ``numpy.random.Generator`` it is given and returns sorted arrival
times in seconds (``t > 0``; the clock starts at 0), either a fixed number of them
(``num_requests``), all those before ``duration_s``, or, with both, whichever limit is reached
first. No process clips or rescales its distribution: a Gamma process with CV 4 really has
inter-arrival CV 4.

- :class:`PoissonArrivals`: exponential gaps.
- :class:`GammaArrivals`: Gamma gaps with a given mean rate and coefficient of variation (bursty
  for ``cv > 1``, smoother than Poisson for ``cv < 1``).
- :class:`ConstantArrivals`: evenly spaced (``k / rate``).
- :class:`OnOffArrivals`: a two-state Markov-modulated Poisson process (bursts): exponential
  sojourns in an *on* state with a high rate and an *off* state with a low (or zero) rate.
- :class:`DiurnalArrivals`, :class:`RateTableArrivals`: a non-homogeneous Poisson process with a
  time-varying rate (a cosine day curve, or a step/linear table), drawn by thinning
  (Lewis-Shedler: candidates at the peak rate, each kept with probability ``rate(t) / peak``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kvbudget.workloads.errors import SpecError

FloatArray = npt.NDArray[np.float64]

MAX_REQUESTS = 20_000_000
"""Most requests one draw may produce (about 1 GB of workload columns)."""
_MAX_CHUNK = 1_000_000
MAX_RATE_RPS = 1e7
"""The highest arrival rate: ten million requests a second, beyond any gateway's."""
MAX_SPAN_S = 10 * 365.25 * 86400.0
"""The longest span a draw may cover (ten years, as a trace may: longer is a wrong unit)."""


@runtime_checkable
class ArrivalProcess(Protocol):
    """Draws sorted arrival times (seconds)."""

    @property
    def mean_rate_rps(self) -> float:
        """The long-run mean arrival rate."""
        ...

    def sample(
        self,
        rng: np.random.Generator,
        *,
        num_requests: int | None = None,
        duration_s: float | None = None,
    ) -> FloatArray: ...


def _require(ok: bool, name: str, problem: str, value: object) -> None:
    if not ok:
        raise SpecError(name, problem, value)


def _rate(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value >= 0 if allow_zero else value > 0)
    _require(ok, name, "must be >= 0" if allow_zero else "must be > 0", value)
    timed = name.endswith("_s")
    bound = MAX_SPAN_S if timed else MAX_RATE_RPS
    what = "ten years" if timed else "ten million requests a second"
    _require(value <= bound, name, f"must be <= {bound:.4g} ({what}: beyond any deployment)",
             value)


def check_limits(num_requests: int | None, duration_s: float | None, mean_rate: float) -> None:
    """Validate the stopping rule of a draw."""
    if num_requests is None and duration_s is None:
        raise SpecError("num_requests", "or duration_s must be given", None, show_value=False)
    if num_requests is not None:
        _require(isinstance(num_requests, int) and 0 <= num_requests <= MAX_REQUESTS,
                 "num_requests", f"must be an integer in [0, {MAX_REQUESTS}]", num_requests)
    if duration_s is not None:
        _require(isinstance(duration_s, int | float) and math.isfinite(duration_s)
                 and duration_s > 0, "duration_s", "must be > 0", duration_s)
        _require(duration_s <= MAX_SPAN_S, "duration_s", f"must be <= {MAX_SPAN_S:.4g} s (ten "
                 "years: beyond any deployment's trace)", duration_s)
        expected = mean_rate * duration_s
        if num_requests is None and expected > MAX_REQUESTS:
            raise SpecError("duration_s", f"at {mean_rate:g} req/s would draw about "
                            f"{expected:,.0f} requests (more than {MAX_REQUESTS:,})", duration_s)
    if (num_requests is not None and num_requests > 1 and duration_s is None
            and mean_rate > 0 and (num_requests - 1) / mean_rate > MAX_SPAN_S):
        raise SpecError("rate_rps", f"is too low for {num_requests:,} requests: they would "
                        f"span about {(num_requests - 1) / mean_rate:.3g} s (over ten years, "
                        "beyond any deployment's trace)", mean_rate)


def _expected(n: int | None, duration_s: float | None, rate: float) -> float:
    counts = []
    if n is not None:
        counts.append(float(n))
    if duration_s is not None:
        counts.append(rate * duration_s)
    return min(counts)


def _chunk(expected: float) -> int:
    return int(min(_MAX_CHUNK, expected * 1.05 + 6 * math.sqrt(expected) + 16))


def _finish(times: FloatArray, n: int | None, duration_s: float | None) -> FloatArray:
    if duration_s is not None:
        times = times[: int(np.searchsorted(times, duration_s, side="left"))]
    if n is not None:
        times = times[:n]
    return np.ascontiguousarray(times, dtype=np.float64)


def _renewal(
    gaps: Callable[[int], FloatArray],
    rate: float,
    n: int | None,
    duration_s: float | None,
) -> FloatArray:
    """Arrivals of a renewal process with the given gap sampler."""
    if duration_s is None and n is not None:
        return np.cumsum(gaps(n)) if n else np.zeros(0)
    chunk = _chunk(_expected(n, duration_s, rate))
    parts: list[FloatArray] = []
    t, count = 0.0, 0
    while True:
        times = t + np.cumsum(gaps(chunk))
        parts.append(times)
        count += len(times)
        t = float(times[-1])
        if (duration_s is not None and t >= duration_s) or (n is not None and count >= n):
            break
    return _finish(np.concatenate(parts), n, duration_s)


@dataclass(frozen=True)
class PoissonArrivals:
    """A Poisson process: exponential inter-arrival times with mean ``1 / rate_rps``."""

    rate_rps: float

    def __post_init__(self) -> None:
        _rate("rate_rps", self.rate_rps)

    @property
    def mean_rate_rps(self) -> float:
        return float(self.rate_rps)

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        check_limits(num_requests, duration_s, self.rate_rps)
        scale = 1.0 / self.rate_rps
        return _renewal(lambda k: rng.exponential(scale, size=k), self.rate_rps, num_requests,
                        duration_s)


@dataclass(frozen=True)
class GammaArrivals:
    """Gamma inter-arrival times with mean ``1 / rate_rps`` and coefficient of variation ``cv``.

    Shape ``k = 1 / cv**2``, scale ``cv**2 / rate_rps``; ``cv = 1`` is Poisson.
    """

    rate_rps: float
    cv: float

    def __post_init__(self) -> None:
        _rate("rate_rps", self.rate_rps)
        _require(isinstance(self.cv, int | float) and math.isfinite(self.cv)
                 and 0.01 <= self.cv <= 100, "cv", "must be in [0.01, 100]", self.cv)

    @property
    def mean_rate_rps(self) -> float:
        return float(self.rate_rps)

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        check_limits(num_requests, duration_s, self.rate_rps)
        shape = 1.0 / self.cv**2
        scale = self.cv**2 / self.rate_rps
        return _renewal(lambda k: rng.gamma(shape, scale, size=k), self.rate_rps, num_requests,
                        duration_s)


@dataclass(frozen=True)
class ConstantArrivals:
    """Evenly spaced arrivals at ``k / rate_rps`` (``k = 1, 2, ...``); draws nothing."""

    rate_rps: float

    def __post_init__(self) -> None:
        _rate("rate_rps", self.rate_rps)

    @property
    def mean_rate_rps(self) -> float:
        return float(self.rate_rps)

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        check_limits(num_requests, duration_s, self.rate_rps)
        count = num_requests if num_requests is not None else MAX_REQUESTS
        if duration_s is not None:
            count = min(count, math.ceil(duration_s * self.rate_rps) + 1)
        times = np.arange(1, count + 1, dtype=np.float64) / self.rate_rps
        return _finish(times, num_requests, duration_s)


@dataclass(frozen=True)
class OnOffArrivals:
    """Two-state Markov-modulated Poisson process (on/off bursts).

    The process stays in *on* for an exponential time with mean ``mean_on_s`` (arrivals at
    ``on_rate_rps``), then in *off* for an exponential time with mean ``mean_off_s`` (arrivals at
    ``off_rate_rps``, possibly 0), and so on. ``start`` picks the first state: ``"on"``,
    ``"off"`` or ``"stationary"`` (on with probability ``mean_on / (mean_on + mean_off)``).
    """

    on_rate_rps: float
    mean_on_s: float
    mean_off_s: float
    off_rate_rps: float = 0.0
    start: Literal["on", "off", "stationary"] = "stationary"

    def __post_init__(self) -> None:
        _rate("on_rate_rps", self.on_rate_rps)
        _rate("off_rate_rps", self.off_rate_rps, allow_zero=True)
        _rate("mean_on_s", self.mean_on_s)
        _rate("mean_off_s", self.mean_off_s)
        _require(self.start in ("on", "off", "stationary"), "start",
                 "must be 'on', 'off' or 'stationary'", self.start)

    @property
    def mean_rate_rps(self) -> float:
        cycle = self.mean_on_s + self.mean_off_s
        return (self.on_rate_rps * self.mean_on_s + self.off_rate_rps * self.mean_off_s) / cycle

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        check_limits(num_requests, duration_s, self.mean_rate_rps)
        if num_requests == 0:
            return np.zeros(0)
        cycle_s = self.mean_on_s + self.mean_off_s
        per_cycle = self.mean_rate_rps * cycle_s
        if self.start == "stationary":
            on = bool(rng.random() < self.mean_on_s / cycle_s)
        else:
            on = self.start == "on"
        cycles = _expected(num_requests, duration_s, self.mean_rate_rps) / per_cycle
        periods = int(min(_MAX_CHUNK, 2 * (cycles * 1.2 + 4 * math.sqrt(cycles) + 8)))
        parts: list[FloatArray] = []
        t, count = 0.0, 0
        while True:
            state_on = np.zeros(periods, dtype=bool)
            state_on[(0 if on else 1)::2] = True
            mean_len = np.where(state_on, self.mean_on_s, self.mean_off_s)
            lengths = rng.exponential(1.0, size=periods) * mean_len
            starts = t + np.concatenate([[0.0], np.cumsum(lengths)[:-1]])
            rates = np.where(state_on, self.on_rate_rps, self.off_rate_rps)
            counts = rng.poisson(rates * lengths)
            total = int(counts.sum())
            pos = rng.random(total)
            times = np.repeat(starts, counts) + pos * np.repeat(lengths, counts)
            times.sort()
            parts.append(times)
            count += total
            t = float(starts[-1] + lengths[-1])
            on = not bool(state_on[-1])  # the next chunk starts in the other state
            if (duration_s is not None and t >= duration_s) or (
                num_requests is not None and count >= num_requests
            ):
                break
        return _finish(np.concatenate(parts), num_requests, duration_s)


def _thinned(
    rng: np.random.Generator,
    rate_at: Callable[[FloatArray], FloatArray],
    peak: float,
    mean: float,
    reaches_any_count: bool,
    num_requests: int | None,
    duration_s: float | None,
) -> FloatArray:
    """Non-homogeneous Poisson arrivals by thinning candidates drawn at the ``peak`` rate."""
    check_limits(num_requests, duration_s, peak)
    if duration_s is None and not reaches_any_count:
        raise SpecError("duration_s", "is needed: the rate falls to 0 for good, so "
                        "num_requests may never be reached", None, show_value=False)
    if num_requests == 0:
        return np.zeros(0)
    candidates_needed = []
    if duration_s is not None:
        candidates_needed.append(peak * duration_s)
    if num_requests is not None and mean > 0:
        candidates_needed.append(num_requests * peak / mean)
    chunk = _chunk(min(candidates_needed) if candidates_needed else 1024.0)
    parts: list[FloatArray] = []
    t, count = 0.0, 0
    while True:
        candidates = t + np.cumsum(rng.exponential(1.0 / peak, size=chunk))
        keep = rng.random(chunk) * peak < rate_at(candidates)
        times = candidates[keep]
        parts.append(times)
        count += len(times)
        t = float(candidates[-1])
        if (duration_s is not None and t >= duration_s) or (
            num_requests is not None and count >= num_requests
        ):
            break
    return _finish(np.concatenate(parts), num_requests, duration_s)


@dataclass(frozen=True)
class DiurnalArrivals:
    """A day curve: ``rate(t) = mean_rate_rps * (1 + amplitude * cos(2π (t + start_s - peak_s)
    / period_s))``.

    ``start_s`` is the time of day at which the workload's clock reads 0; the default curve
    peaks at 14:00 and bottoms out at 02:00.
    """

    mean_rate_rps: float
    amplitude: float = 0.5
    period_s: float = 86_400.0
    peak_s: float = 14 * 3600.0
    start_s: float = 0.0

    def __post_init__(self) -> None:
        _rate("mean_rate_rps", self.mean_rate_rps)
        _require(isinstance(self.amplitude, int | float) and 0 <= self.amplitude <= 1,
                 "amplitude", "must be in [0, 1]", self.amplitude)
        _rate("period_s", self.period_s)
        for name in ("peak_s", "start_s"):
            value = getattr(self, name)
            _require(isinstance(value, int | float) and math.isfinite(value), name,
                     "must be finite", value)

    @property
    def peak_rate_rps(self) -> float:
        return float(self.mean_rate_rps) * (1 + self.amplitude)

    def rate_at(self, t: FloatArray) -> FloatArray:
        phase = 2 * np.pi * (t + self.start_s - self.peak_s) / self.period_s
        return np.asarray(self.mean_rate_rps * (1 + self.amplitude * np.cos(phase)),
                          dtype=np.float64)

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        return _thinned(rng, self.rate_at, self.peak_rate_rps, float(self.mean_rate_rps), True,
                        num_requests, duration_s)


@dataclass(frozen=True, eq=False)
class RateTableArrivals:
    """A rate table: ``rates_rps[i]`` from ``times_s[i]`` (``times_s[0] == 0``, increasing).

    ``interpolation="step"`` holds each rate until the next point; ``"linear"`` interpolates.
    Past the last point the last rate holds, unless ``period_s`` is set: then the table repeats
    every ``period_s`` seconds (linear interpolation wraps from the last point to
    ``rates_rps[0]`` at ``period_s``).
    """

    times_s: Sequence[float]
    rates_rps: Sequence[float]
    interpolation: Literal["step", "linear"] = "step"
    period_s: float | None = None

    def __post_init__(self) -> None:
        times = np.asarray(self.times_s, dtype=np.float64)
        rates = np.asarray(self.rates_rps, dtype=np.float64)
        _require(times.ndim == 1 and len(times) >= 1, "times_s", "must list at least one time",
                 list(self.times_s))
        _require(bool(times[0] == 0), "times_s", "must start at 0", float(times[0]))
        _require(bool(np.all(np.isfinite(times)) and np.all(np.diff(times) > 0)), "times_s",
                 "must be finite and strictly increasing", times[:8].tolist())
        _require(rates.shape == times.shape, "rates_rps",
                 f"must have {len(times)} entries (one per time)", len(rates))
        _require(bool(np.all(np.isfinite(rates)) and np.all(rates >= 0)), "rates_rps",
                 "must be finite and >= 0", rates[:8].tolist())
        _require(float(rates.max()) > 0, "rates_rps", "must have a rate > 0", rates[:8].tolist())
        _require(self.interpolation in ("step", "linear"), "interpolation",
                 "must be 'step' or 'linear'", self.interpolation)
        if self.period_s is not None:
            _require(isinstance(self.period_s, int | float) and math.isfinite(self.period_s)
                     and self.period_s > times[-1], "period_s",
                     f"must be > the last time {times[-1]:g}", self.period_s)
        object.__setattr__(self, "times_s", tuple(float(x) for x in times))
        object.__setattr__(self, "rates_rps", tuple(float(x) for x in rates))

    def _points(self) -> tuple[FloatArray, FloatArray]:
        times = np.asarray(self.times_s, dtype=np.float64)
        rates = np.asarray(self.rates_rps, dtype=np.float64)
        if self.period_s is not None:
            times = np.append(times, self.period_s)
            rates = np.append(rates, rates[0] if self.interpolation == "linear" else rates[-1])
        return times, rates

    @property
    def peak_rate_rps(self) -> float:
        return float(max(self.rates_rps))

    @property
    def mean_rate_rps(self) -> float:
        if self.period_s is None:
            return float(self.rates_rps[-1])
        times, rates = self._points()
        widths = np.diff(times)
        if self.interpolation == "step":
            area = float(np.sum(rates[:-1] * widths))
        else:
            area = float(np.sum((rates[:-1] + rates[1:]) / 2 * widths))
        return area / self.period_s

    @property
    def reaches_any_count(self) -> bool:
        return self.period_s is not None or self.rates_rps[-1] > 0

    def rate_at(self, t: FloatArray) -> FloatArray:
        times, rates = self._points()
        if self.period_s is not None:
            t = np.mod(t, self.period_s)
        if self.interpolation == "linear":
            return np.interp(t, times, rates)
        idx = np.searchsorted(times, t, side="right") - 1
        return rates[np.clip(idx, 0, len(rates) - 1)]

    def sample(self, rng: np.random.Generator, *, num_requests: int | None = None,
               duration_s: float | None = None) -> FloatArray:
        return _thinned(rng, self.rate_at, self.peak_rate_rps, self.mean_rate_rps,
                        self.reaches_any_count, num_requests, duration_s)


def split_streams(rng: np.random.Generator, k: int) -> list[np.random.Generator]:
    """``k`` independent generators derived from one draw of ``rng`` (works for any generator)."""
    entropy = [int(x) for x in rng.integers(0, 2**63, size=2, dtype=np.int64)]
    return [np.random.default_rng(s) for s in np.random.SeedSequence(entropy).spawn(k)]
