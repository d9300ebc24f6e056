"""Alibaba ServeGen per-client data: generate requests for a time window.

One chunk is one client. ``chunk-N-trace.csv`` (no header) has one row per 600 s window:
``window_start_s, rate_req_per_s, cv_of_interarrival, arrival_dist (Gamma|Weibull|empty),
param1, param2``; the fitted distribution's parameters are ``(shape, scale)`` of the
inter-arrival time in seconds (for the Gamma rows ``shape * scale == 1 / rate`` and
``1 / sqrt(shape) == cv``). ``chunk-N-dataset.json`` maps a window start (every 6 h) to
``{"input_tokens": "<python dict literal tokens -> probability>", "output_tokens": ...}``,
parsed with :func:`ast.literal_eval` (never ``eval``), and only for the windows needed.

Within each rate window inter-arrivals are drawn, restarting at the window's start, from
(``servegen_arrivals``):

- ``"fitted_rate"`` (default): the fitted family and shape, with the scale set so the mean gap
  is ``1 / rate`` (the window's measured rate). Some fits imply a very different rate (chunk 143
  at 600 s: a Weibull fit whose mean gap means 44 req/s against 17.3 measured), so the fitted
  parameters as published over-produce chunk 143 by about 10% over a day;
- ``"fitted"``: the fitted distribution exactly as published;
- ``"rate_cv"``: a Gamma with the window's measured rate and CV.

Windows with a rate but no fit use the Gamma of ``"rate_cv"``. Lengths are drawn from
the PMFs of the dataset window in force at each arrival, the input and the output independently
(:data:`JOINT_ASSUMED`, said on every load).
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.workloads.arrivals import MAX_REQUESTS, split_streams
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MAX_TOKENS
from kvbudget.workloads.pmf import cdf_sample
from kvbudget.workloads.text_files import encoding_said, read_text, utf8_file
from kvbudget.workloads.traces._files import (
    SERVEGEN_CHUNK,
    check_readable,
    file_facts,
    refuse_run_directory,
)
from kvbudget.workloads.traces._finish import DROP_TRUNCATED, RawTrace, Streams
from kvbudget.workloads.traces.options import TraceOptions

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_WINDOW = (0.0, 3600.0)
_DISTS = ("Gamma", "Weibull", "")


def _chunks(path: Path, options: TraceOptions) -> list[tuple[int, Path, Path]]:
    if path.is_dir():
        ids = sorted({int(m.group(1)) for p in path.iterdir()
                      if (m := SERVEGEN_CHUNK.search(p.name))})
        if not ids:
            refuse_run_directory(path)
            raise TraceError(path, "holds no ServeGen chunk-N-trace.csv files")
        folder = path
    else:
        match = SERVEGEN_CHUNK.search(path.name)
        if match is None:
            raise TraceError(path, "is not a ServeGen chunk (expected chunk-N-trace.csv or "
                             "chunk-N-dataset.json, or a directory of them)")
        ids = [int(match.group(1))]
        folder = path.parent
    if options.clients is not None:
        missing = [c for c in options.clients if c not in ids]
        if missing:
            raise TraceError(path, f"has no chunk {missing[0]} (chunks: {ids})", field="clients")
        ids = [c for c in ids if c in options.clients]
    out = []
    for cid in ids:
        trace = folder / f"chunk-{cid}-trace.csv"
        dataset = folder / f"chunk-{cid}-dataset.json"
        for p in (trace, dataset):
            check_readable(p)
        out.append((cid, trace, dataset))
    return out


def _parse_float(path: Path, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, f"not a number: {text!r}", line=line, field=field) from None
    if not math.isfinite(value):
        raise TraceError(path, f"not finite: {text!r}", line=line, field=field)
    return value


_FIELDS = ("window_start_s", "rate", "cv", "arrival_dist", "param1", "param2")


def _read_windows(path: Path) -> tuple[list[tuple[float, float, float, str, float, float]],
                                       bool]:
    with utf8_file(path) as readable:  # a user's copy in UTF-16, or with a byte-order mark
        facts = file_facts(readable)
        lines = read_text(readable, errors="replace").splitlines()
    rows: list[tuple[float, float, float, str, float, float]] = []
    dropped_last = False
    numbered = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip()]
    for pos, (number, text) in enumerate(numbered):
        parts = [p.strip() for p in text.split(",")]
        try:
            if len(parts) != 6:
                raise TraceError(path, f"expected 6 fields, got {len(parts)}", line=number)
            start = _parse_float(path, number, "window_start_s", parts[0])
            rate = _parse_float(path, number, "rate", parts[1])
            cv = _parse_float(path, number, "cv", parts[2]) if parts[2] else 0.0
            dist = parts[3]
            if dist not in _DISTS:
                raise TraceError(path, f"unknown distribution {dist!r} (Gamma, Weibull or empty)",
                                 line=number, field="arrival_dist")
            p1 = _parse_float(path, number, "param1", parts[4]) if parts[4] else 0.0
            p2 = _parse_float(path, number, "param2", parts[5]) if parts[5] else 0.0
            for name, value in (("rate", rate), ("cv", cv), ("param1", p1), ("param2", p2)):
                if value < 0:
                    raise TraceError(path, f"negative value: {value:g}", line=number,
                                     field=name)
            if dist and rate > 0 and (p1 <= 0 or p2 <= 0):
                raise TraceError(path, f"{dist} parameters must be > 0, got {p1:g}, {p2:g}",
                                 line=number, field="param1")
            if rows and start <= rows[-1][0]:
                raise TraceError(path, f"window start {start:g} does not follow "
                                 f"{rows[-1][0]:g}", line=number, field="window_start_s")
        except TraceError:
            if pos == len(numbered) - 1 and facts.unterminated and rows:
                dropped_last = True
                break
            raise
        rows.append((start, rate, cv, dist, p1, p2))
    if not rows:
        raise TraceError(path, "has no data rows")
    return rows, dropped_last


def _gaps(rng: np.random.Generator, dist: str, rate: float, cv: float, p1: float, p2: float,
          mode: str, k: int) -> FloatArray:
    if mode != "rate_cv" and dist == "Gamma":
        scale = p2 if mode == "fitted" else 1.0 / (rate * p1)
        return rng.gamma(p1, scale, size=k)
    if mode != "rate_cv" and dist == "Weibull":
        scale = p2 if mode == "fitted" else 1.0 / (rate * math.gamma(1.0 + 1.0 / p1))
        return rng.weibull(p1, size=k) * scale
    if cv > 0:
        shape = 1.0 / cv**2
        return rng.gamma(shape, 1.0 / (rate * shape), size=k)
    return rng.exponential(1.0 / rate, size=k)


def _window_arrivals(rng: np.random.Generator, lo: float, hi: float, row: tuple[float, float,
                     float, str, float, float], mode: str) -> FloatArray:
    _, rate, cv, dist, p1, p2 = row
    if rate <= 0 or hi <= lo:
        return np.zeros(0)
    expected = rate * (hi - lo)
    chunk = int(min(1_000_000, expected * 1.5 + 6 * math.sqrt(expected) + 16))
    parts: list[FloatArray] = []
    t, count = lo, 0
    while t < hi:
        times = t + np.cumsum(_gaps(rng, dist, rate, cv, p1, p2, mode, chunk))
        parts.append(times)
        count += len(times)
        t = float(times[-1])
        if count > MAX_REQUESTS:
            raise TraceError(None, f"a ServeGen window at {row[0]:g} s would draw more than "
                             f"{MAX_REQUESTS:,} requests")
    times = np.concatenate(parts)
    return times[times < hi]


@dataclass(frozen=True)
class _Dist:
    """One published PMF: token counts (0 included: the data holds 0-token outputs, which
    ServeGen does not explain; a draw of one is dropped and counted as a 0-token output) and
    their cumulative weights."""

    values: IntArray
    cdf: FloatArray

    def sample(self, rng: np.random.Generator, n: int) -> IntArray:
        return cdf_sample(rng, self.values, self.cdf, n)


def _pmf(path: Path, key: str, field: str, value: Any) -> _Dist:
    where = f"{key}.{field}"
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise TraceError(path, "not a Python dict literal of token -> probability",
                             field=where) from None
    if not isinstance(value, dict) or not value:
        raise TraceError(path, "must be a non-empty mapping of token -> probability",
                         field=where)
    try:
        tokens = np.array([int(k) for k in value], dtype=np.int64)
        probs = np.array([float(v) for v in value.values()], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise TraceError(path, "keys must be token counts and values probabilities",
                         field=where) from None
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or tokens.min() < 0:
        raise TraceError(path, "has a negative probability or token count", field=where)
    if tokens.max() > MAX_TOKENS:
        raise TraceError(path, f"has a token count above {MAX_TOKENS:,}", field=where)
    total = float(probs.sum())
    if abs(total - 1) > 1e-3:
        raise TraceError(path, f"probabilities sum to {total:.6g}, not 1", field=where)
    order = np.argsort(tokens, kind="stable")
    return _Dist(tokens[order], np.cumsum((probs / total)[order]))


JOINT_ASSUMED = ("ServeGen gives a window's input and output lengths as two separate "
                 "distributions, not their joint: each request's two are drawn independently "
                 "(ServeGen's own generator draws both from one uniform, pairing the longest "
                 "prompts with the longest outputs)")
"""Said on every ServeGen load: the data hold only the marginals (``chunk-N-dataset.json``), and
ServeGen's reference generator (alibaba/ServeGen ``servegen/construct.py``,
``_sample_data_batch``) inverts every field's CDF at the same uniform draw per request."""

MODALITIES = ("image", "audio", "video")
"""A multimodal chunk's prompt (``data/multimodal``): ``text_tokens`` plus, for each modality,
``<m>_count`` items of ``<m>_tokens`` each, as ServeGen's own generator sums them."""


def _prompts(path: Path, entry: dict[str, Any], rng: np.random.Generator, n: int) -> IntArray:
    """``n`` prompt lengths from a dataset window: its ``input_tokens`` (language, reason), or
    a multimodal window's text plus its images', audios' and videos' tokens."""
    key = entry["key"]
    if "input_tokens" in entry:
        return _pmf(path, key, "input_tokens", entry["input_tokens"]).sample(rng, n)
    prompt = _pmf(path, key, "text_tokens", entry["text_tokens"]).sample(rng, n)
    for m in MODALITIES:
        counts = _pmf(path, key, f"{m}_count", entry[f"{m}_count"]).sample(rng, n)
        draws = _pmf(path, key, f"{m}_tokens", entry[f"{m}_tokens"]).sample(
            rng, int(counts.sum()))
        owner = np.repeat(np.arange(n), counts)
        prompt = prompt + np.bincount(owner, weights=draws, minlength=n).astype(np.int64)
    return prompt


def _dataset(path: Path) -> dict[float, dict[str, Any]]:
    check_readable(path)
    try:
        data = json.loads(read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        line = getattr(exc, "lineno", None)
        raise TraceError(path, f"not valid JSON ({exc})", line=line) from None
    if not isinstance(data, dict) or not data:
        raise TraceError(path, "must be a JSON object of window start -> length PMFs")
    out: dict[float, dict[str, Any]] = {}
    for key, entry in data.items():
        try:
            start = float(key)
        except ValueError:
            raise TraceError(path, f"window key {key!r} is not a number", field=key) from None
        if not isinstance(entry, dict):
            raise TraceError(path, "must map input_tokens and output_tokens", field=key)
        multimodal = "input_tokens" not in entry and "text_tokens" in entry
        needed = (("text_tokens", *(f"{m}_{f}" for m in MODALITIES for f in ("count",
                   "tokens"))) if multimodal else ("input_tokens",))
        for name in (*needed, "output_tokens"):
            if name not in entry:
                raise TraceError(path, "missing" if multimodal or name == "output_tokens" else
                                 "missing (a multimodal chunk gives text_tokens and its "
                                 "images', audios' and videos' counts and tokens instead)",
                                 field=f"{key}.{name}")
        out[start] = {"key": key, **entry}
    return dict(sorted(out.items()))


def _check_coverage(path: Path, window: tuple[float, float], data: tuple[float, float],
                    num_requests: int, warnings: list[str]) -> None:
    """Refuse a window that generated no request (saying whether it lies outside the data,
    the span ``data`` the clients' rate windows cover); warn how many seconds of one that
    reaches past the data have none (an open end, infinite, runs to the data's end)."""
    (lo, hi), (data_lo, data_hi) = window, data
    if num_requests == 0:
        there = ("is outside the data" if lo >= data_hi or hi <= data_lo else "holds no "
                 "requests (all rates are 0 there)")
        raise TraceError(path, f"the window [{lo:g}, {hi:g}) s {there} (the data covers "
                         f"{data_lo:g} to {data_hi:g} s)", field="window")
    if not math.isfinite(hi) or data_lo >= data_hi:
        return
    uncovered = (hi - lo) - max(0.0, min(hi, data_hi) - max(lo, data_lo))
    if uncovered > 0:
        warnings.append(f"the window [{lo:g}, {hi:g}) s reaches past the data (it covers "
                        f"{data_lo:g} to {data_hi:g} s): {uncovered:g} s of it "
                        f"({100 * uncovered / (hi - lo):.3g} %) has no data and no requests")


def load_servegen(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    chunks = _chunks(path, options)
    window = options.window
    warnings: list[str] = []
    if window is None:
        window = DEFAULT_WINDOW
        warnings.append("ServeGen data spans days: generated the first hour only "
                        "(choose another with the window option)")
    lo, hi = window[0], (window[1] if window[1] is not None else math.inf)
    client_rngs = split_streams(streams.source, len(chunks))
    arrivals: list[FloatArray] = []
    prompts: list[IntArray] = []
    outputs: list[IntArray] = []
    tiers: list[IntArray] = []
    names: list[str] = []
    rows_read = 0
    dropped = 0
    data_lo, data_hi = math.inf, -math.inf  # the span the clients' rate windows cover
    for (cid, trace_path, data_path), rng in zip(chunks, client_rngs, strict=True):
        rows, cut = _read_windows(trace_path)
        rows_read += len(rows) + int(cut)
        if cut:
            dropped += 1
            warnings.append(f"{trace_path.name}: the last line looks truncated: dropped")
        starts = np.array([r[0] for r in rows])
        step = float(np.median(np.diff(starts))) if len(rows) > 1 else 600.0
        if rows:
            data_lo, data_hi = min(data_lo, rows[0][0]), max(data_hi, rows[-1][0] + step)
        times: list[FloatArray] = []
        for i, row in enumerate(rows):
            w_lo = row[0]
            w_hi = rows[i + 1][0] if i + 1 < len(rows) else w_lo + step
            a, b = max(w_lo, lo), min(w_hi, hi)
            if b > a:
                times.append(_window_arrivals(rng, a, b, row, options.servegen_arrivals))
        t = np.concatenate(times) if times else np.zeros(0)
        dataset = _dataset(data_path)
        keys = np.array(list(dataset))
        which = np.searchsorted(keys, t, side="right") - 1
        if len(t) and int(which.min()) < 0:
            raise TraceError(data_path, f"has no length distribution for t = {t.min():g} s "
                             f"(first window starts at {keys[0]:g} s)")
        prompt = np.zeros(len(t), dtype=np.int64)
        output = np.zeros(len(t), dtype=np.int64)
        for w in np.unique(which):
            idx = np.flatnonzero(which == w)
            entry = dataset[float(keys[w])]
            prompt[idx] = _prompts(data_path, entry, rng, len(idx))
            output[idx] = _pmf(data_path, entry["key"], "output_tokens",
                               entry["output_tokens"]).sample(rng, len(idx))
        tier = (options.tier_map.get(str(cid), options.default_tier)
                if options.tier_map is not None else f"client-{cid}")
        if tier not in names:
            names.append(tier)
        arrivals.append(t)
        prompts.append(prompt)
        outputs.append(output)
        tiers.append(np.full(len(t), names.index(tier), dtype=np.int64))
    arrival = np.concatenate(arrivals)
    _check_coverage(path, (lo, hi), (data_lo, data_hi), len(arrival), warnings)
    order = np.argsort(arrival, kind="stable")
    raw = RawTrace(
        path=path,
        format="servegen",
        prompt=np.concatenate(prompts)[order].astype(np.float64),
        output=np.concatenate(outputs)[order].astype(np.float64),
        arrival=arrival[order],
        tiers=(np.concatenate(tiers)[order], tuple(names)),
        fields={"arrival_s": "window", "prompt_tokens": "input_tokens",
                "output_tokens": "output_tokens"},
        rows_read=rows_read,
        warnings=warnings,
    )
    raw.assumed.append(JOINT_ASSUMED)
    said = encoding_said([p for chunk in chunks for p in chunk[1:]])  # UTF-16 copies, as load_trace
    raw.assumed.extend([said] if said else [])
    if dropped:
        raw.dropped[DROP_TRUNCATED] += dropped
    return raw
