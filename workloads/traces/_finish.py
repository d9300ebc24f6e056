"""From the columns a format loader read to a validated, transformed :class:`Workload`.

Every loader fills a :class:`RawTrace` (columns as read, float64 so that a missing value is NaN)
and :func:`finish` does what all formats share, in this order: validate (errors name the line
and field; a bad *last* line of a file without a final newline is a truncated line: dropped),
drop failed requests (zero tokens, counted), synthesise arrivals for length-only tables, rebase
wall clocks, sort (repair, with a warning), spread equal timestamps, window, rate scale, sample,
assign tiers, apply the ``max_output_tokens`` rule, and build the workload.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.policies.tiers import MAX_LIMIT_S
from kvbudget.workloads.arrivals import PoissonArrivals
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import NO_DATA_ROWS, SpecError, TraceError
from kvbudget.workloads.max_output import MAX_TOKENS, empirical_quantile
from kvbudget.workloads.traces.options import (
    ARRIVAL_UNITS,
    DEFAULT_PREFIX_BLOCK_TOKENS,
    TraceOptions,
)
from kvbudget.workloads.traces.report import (
    DRAWN_ARRIVALS,
    DROP_FAILED,
    DROP_FAILED_OUTPUT,
    DROP_ZERO_OUTPUT,
    DROP_ZERO_PROMPT,
    LoadedTrace,
    LoadReport,
)
from kvbudget.workloads.workload import Workload

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Labels = tuple[IntArray, tuple[str, ...]]

DROP_TRUNCATED = "truncated last line"


@dataclass
class RawTrace:
    """Columns as a format loader read them (one entry per data row, in file order)."""

    path: Path
    format: str
    prompt: FloatArray
    output: FloatArray
    arrival: FloatArray | None = None
    max_output: FloatArray | None = None
    deadline: FloatArray | None = None
    request_id: FloatArray | None = None
    timeout: FloatArray | None = None
    """Per-request client timeout in seconds (NaN: the tier's client model)."""
    labels: dict[str, Labels] = field(default_factory=dict)
    tiers: Labels | None = None
    """Final tier names chosen by the loader (ServeGen clients); skips tier assignment."""
    prefix: tuple[IntArray, IntArray] | None = None
    fields: dict[str, str] = field(default_factory=dict)
    """Canonical column -> the file's name for it (error messages)."""
    absolute_clock: bool = False
    """Arrivals are wall-clock times: rebased so the first request arrives at 0."""
    clock_origin: str | None = None
    """Where the file's times count from, when its publisher names an origin they cannot
    precede (BurstGPT's README: "seconds from 0:00:00 on the first day"): a rebased clock on
    which a negative time is refused, naming the origin."""
    arrival_unit: str = "s"
    """The unit the loader took the file's times in (Mooncake's: ms), for a refusal's hint."""
    rows_read: int = 0
    line_of: Callable[[int], int] | None = None
    """Row -> 1-based line (text files); None reports the 0-based row instead (Parquet)."""
    unterminated: bool = False
    """The file does not end with a newline: a bad last row is a truncated line."""
    dropped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    """What the workload takes that the file does not say (a tier, a ``max_tokens``)."""
    default_arrival_note: bool = True
    completion_order: bool = False
    """The file's own tool writes its requests as they complete (a load tool's per-request
    file): sorting them by send time is expected, not a note."""
    prefix_block_tokens: int | None = None
    """Tokens a prefix hash names as the file says (a kvbudget Parquet trace's metadata)."""
    failure_mark: str | None = None
    """Where the publisher marks a failed request by 0 output tokens alone (BurstGPT's README:
    failures are rows whose ``Response tokens`` are 0), how it says so: such rows with prompt
    tokens are counted as failed requests, not as mere 0-token outputs."""


class Streams:
    """The independent random streams of one load, from ``TraceOptions.seed``.

    The four generators are spawned together (``SeedSequence(seed).spawn(4)``) when one of
    them is first used, so a load that draws nothing (a timed trace read whole) never imports
    ``numpy.random`` (~10 ms of a start) and the draws do not depend on which stream is used
    first. ``seed`` may be a function that gives the seed, called then (a scenario's trace:
    see :func:`kvbudget.workloads.traces.load.trace_seed`).
    """

    __slots__ = ("_generators", "_seed")

    def __init__(self, seed: int | Callable[[], int]) -> None:
        self._seed = seed
        self._generators: tuple[np.random.Generator, ...] | None = None

    @classmethod
    def from_seed(cls, seed: int | Callable[[], int]) -> Streams:
        return cls(seed)

    def _generator(self, index: int) -> np.random.Generator:
        if self._generators is None:
            seed = self._seed() if callable(self._seed) else self._seed
            self._generators = tuple(
                np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4))
        return self._generators[index]

    @property
    def drew(self) -> bool:
        """Whether the load drew anything (its generators exist only once one is used): a
        load that did not is the same whatever its seed."""
        return self._generators is not None

    @property
    def arrival(self) -> np.random.Generator:
        return self._generator(0)

    @property
    def sample(self) -> np.random.Generator:
        return self._generator(1)

    @property
    def tiers(self) -> np.random.Generator:
        return self._generator(2)

    @property
    def source(self) -> np.random.Generator:
        return self._generator(3)


def _error(raw: RawTrace, row: int, name: str, problem: str) -> TraceError:
    fname = raw.fields.get(name, name)
    if raw.line_of is not None:
        return TraceError(raw.path, problem, line=raw.line_of(row), field=fname)
    return TraceError(raw.path, problem, row=row, field=fname)


def _first_bad(values: FloatArray, *, integer: bool, optional: bool, allow_negative: bool,
               upper: float | None) -> tuple[int, str] | None:
    finite = np.isfinite(values)
    bad = ~finite
    if optional:
        bad &= ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        if not allow_negative:
            bad |= finite & (values < 0)
        if integer:
            bad |= finite & (values != np.floor(values))
        if upper is not None:
            bad |= finite & (values > upper)
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    v = float(values[row])
    if np.isnan(v):
        problem = "missing value (empty, NaN or null)"
    elif not np.isfinite(v):
        problem = f"not finite: {v}"
    elif v < 0 and not allow_negative:
        problem = f"negative value: {v:g}"
    elif integer and v != np.floor(v):
        problem = f"not a whole number: {v:g}"
    else:
        problem = f"implausibly large: {v:g} (the limit is {upper:,.0f})"
    return row, problem


def _as_written(raw: RawTrace, row: int, name: str, problem: str) -> str:
    """``problem`` with what the file says where the loader scaled the value (a negative
    Mooncake ``timestamp`` of -5 ms is read as -0.005 s) or the publisher names the origin a
    time cannot precede (BurstGPT's)."""
    if not problem.startswith("negative value") or name not in ("arrival_s", "deadline_s"):
        return problem
    if raw.arrival_unit in ARRIVAL_UNITS and raw.arrival_unit != "s":
        values = raw.arrival if name == "arrival_s" else raw.deadline
        if values is not None:
            written = float(values[row]) / ARRIVAL_UNITS[raw.arrival_unit]
            problem += f" s ({written:.6g} {raw.arrival_unit} as written)"
    if raw.clock_origin is not None:
        problem += f" ({raw.clock_origin})"
    return problem


def _validate(raw: RawTrace) -> RawTrace:
    """Raise on the first bad value; a bad last row of an unterminated file is dropped."""
    signed = raw.absolute_clock and raw.clock_origin is None
    while True:
        checks: list[tuple[str, FloatArray | None, dict[str, Any]]] = [
            ("arrival_s", raw.arrival, {"integer": False, "optional": False,
                                        "allow_negative": signed, "upper": None}),
            ("prompt_tokens", raw.prompt, {"integer": True, "optional": False,
                                           "allow_negative": False, "upper": MAX_TOKENS}),
            ("output_tokens", raw.output, {"integer": True, "optional": False,
                                           "allow_negative": False, "upper": MAX_TOKENS}),
            ("max_output_tokens", raw.max_output, {"integer": True, "optional": True,
                                                   "allow_negative": False,
                                                   "upper": MAX_TOKENS}),
            ("deadline_s", raw.deadline, {"integer": False, "optional": True,
                                          "allow_negative": signed,
                                          "upper": None}),
            ("timeout_s", raw.timeout, {"integer": False, "optional": True,
                                        "allow_negative": False, "upper": MAX_LIMIT_S}),
            ("id", raw.request_id, {"integer": True, "optional": False,
                                    "allow_negative": False, "upper": 2.0**53}),
        ]
        worst: tuple[int, str, str] | None = None
        for name, values, kw in checks:
            if values is None:
                continue
            found = _first_bad(values, **kw)
            if found is not None and (worst is None or found[0] < worst[0]):
                worst = (found[0], name, found[1])
        n = len(raw.prompt)
        if worst is None:
            return raw
        row, name, problem = worst
        if raw.unterminated and row == n - 1 and n > 1:
            _drop_rows(raw, np.arange(n) < n - 1)
            raw.dropped[DROP_TRUNCATED] += 1
            line = raw.line_of(row) if raw.line_of else row
            raw.warnings.append(f"the last line ({line}) looks truncated ({name}: {problem}): "
                                "dropped")
            raw.unterminated = False
            continue
        raise _error(raw, row, name, _as_written(raw, row, name, problem))


def _drop_rows(raw: RawTrace, keep: npt.NDArray[np.bool_]) -> None:
    for name in ("prompt", "output", "arrival", "max_output", "deadline", "request_id",
                 "timeout"):
        values = getattr(raw, name)
        if values is not None:
            setattr(raw, name, values[keep])
    raw.labels = {k: (codes[keep], vals) for k, (codes, vals) in raw.labels.items()}
    if raw.tiers is not None:
        raw.tiers = (raw.tiers[0][keep], raw.tiers[1])
    if raw.prefix is not None:
        raw.prefix = gather_csr(raw.prefix[0], raw.prefix[1], np.flatnonzero(keep))


def gather_csr(values: IntArray, offsets: IntArray, index: IntArray) -> tuple[IntArray, IntArray]:
    """Rows ``index`` of a flat (values, offsets) list column, vectorised."""
    lo = offsets[index]
    lengths = offsets[index + 1] - lo
    new_offsets = np.zeros(len(index) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    total = int(new_offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.int64), new_offsets
    pos = np.repeat(lo - new_offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return values[pos], new_offsets


def _opt_take(values: FloatArray | None, index: IntArray) -> FloatArray | None:
    return None if values is None else values[index]


@dataclass
class _Rows:
    """The kept rows, as integer columns, carried through the transformations.

    Columns the file does not have stay None (no NaN-filled copies of a million rows).
    """

    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    max_output: FloatArray | None  # NaN: not given for that row
    deadline: FloatArray | None
    timeout: FloatArray | None
    ids: IntArray
    rows: IntArray | None  # 0-based data row in the file (None: same as ids)
    labels: dict[str, Labels]
    tiers: Labels | None
    prefix: tuple[IntArray, IntArray] | None

    @property
    def file_rows(self) -> IntArray:
        return self.ids if self.rows is None else self.rows

    def take(self, index: IntArray) -> _Rows:
        if len(index) == len(self.arrival) and bool(np.all(index == np.arange(len(index)))):
            return self
        return _Rows(
            arrival=self.arrival[index],
            prompt=self.prompt[index],
            output=self.output[index],
            max_output=_opt_take(self.max_output, index),
            deadline=_opt_take(self.deadline, index),
            timeout=_opt_take(self.timeout, index),
            ids=self.ids[index],
            rows=None if self.rows is None else self.rows[index],
            labels={k: (codes[index], vals) for k, (codes, vals) in self.labels.items()},
            tiers=None if self.tiers is None else (self.tiers[0][index], self.tiers[1]),
            prefix=None if self.prefix is None else gather_csr(*self.prefix, index),
        )

    def shift(self, offset: float | FloatArray) -> None:
        """Move arrivals (and deadlines with them) by ``-offset``."""
        self.arrival = self.arrival - offset
        if self.deadline is not None:
            self.deadline = self.deadline - offset


def _drop_failed(raw: RawTrace) -> npt.NDArray[np.bool_]:
    prompt_zero = raw.prompt == 0
    output_zero = raw.output == 0
    failed = prompt_zero & output_zero
    marked = output_zero & ~failed if raw.failure_mark is not None else np.zeros_like(failed)
    masks = ((DROP_FAILED, failed), (DROP_FAILED_OUTPUT, marked),
             (DROP_ZERO_OUTPUT, output_zero & ~failed & ~marked),
             (DROP_ZERO_PROMPT, prompt_zero & ~failed))
    for reason, mask in masks:
        count = int(mask.sum())
        if count:
            raw.dropped[reason] += count
    keep: npt.NDArray[np.bool_] = ~(prompt_zero | output_zero)
    counts = [f"{int(m.sum()):,} with {what}" for what, m in (
        ("0 prompt and 0 output tokens (failed requests)", failed),
        (f"0 output tokens after a prompt (failed requests, {raw.failure_mark})", marked),
        ("0 output tokens", masks[2][1]), ("0 prompt tokens", masks[3][1])) if m.any()]
    if counts:  # requests a server was sent: the load offered here is less than the file's
        raw.warnings.append(f"dropped {len(keep) - int(keep.sum()):,} of the file's "
                            f"{counted(len(keep), 'row')}, with no tokens to serve: {', '.join(counts)}")
    return keep


def _check_relations(raw: RawTrace, keep: npt.NDArray[np.bool_]) -> None:
    if raw.max_output is not None:
        with np.errstate(invalid="ignore"):
            zero = ~np.isnan(raw.max_output) & (raw.max_output < 1)
        if zero.any():  # every row, dropped ones too: no client asks for no tokens
            row = int(np.argmax(zero))
            raise _error(raw, row, "max_output_tokens",
                         f"must be >= 1, got {raw.max_output[row]:g} (a request asks for at "
                         "least one token: vLLM refuses max_tokens=0)")
        with np.errstate(invalid="ignore"):
            bad = keep & ~np.isnan(raw.max_output) & (raw.max_output < np.maximum(raw.output, 1))
        if bad.any():
            row = int(np.argmax(bad))
            raise _error(raw, row, "max_output_tokens",
                         f"{raw.max_output[row]:g} is below output_tokens {raw.output[row]:g}")
    if raw.deadline is not None and raw.arrival is not None:
        with np.errstate(invalid="ignore"):
            bad = keep & ~np.isnan(raw.deadline) & (raw.deadline < raw.arrival)
        if bad.any():
            row = int(np.argmax(bad))
            raise _error(raw, row, "deadline_s",
                         f"{raw.deadline[row]:g} is before arrival_s {raw.arrival[row]:g}")
        with np.errstate(invalid="ignore"):
            far = keep & ~np.isnan(raw.deadline) & (raw.deadline - raw.arrival > MAX_SPAN_S)
        if far.any():
            row = int(np.argmax(far))
            raise _error(raw, row, "deadline_s",
                         f"{raw.deadline[row]:g} is over ten years after arrival_s "
                         f"{raw.arrival[row]:g} (leave it empty for no deadline)")
    if raw.request_id is not None:
        ids = raw.request_id[keep]
        ordered = np.sort(ids)
        same = ordered[1:] == ordered[:-1]
        if same.any():
            dup_value = ordered[1:][np.argmax(same)]
            rows = np.flatnonzero(keep)[ids == dup_value]
            first_row = int(rows[0])
            where = (f"line {raw.line_of(first_row)}" if raw.line_of else f"row {first_row}")
            raise _error(raw, int(rows[1]), "id", f"duplicate id {dup_value:.0f} (first at {where})")


def _block_tokens(raw: RawTrace, options: TraceOptions) -> int:
    """Tokens per prefix hash: the options', else the file's own, else Mooncake's 512. A file
    that says its hashes name blocks of another size than the options give is refused: its
    prefix hits would be counted over blocks of the wrong size, unsaid."""
    given, own = options.prefix_block_tokens, raw.prefix_block_tokens
    if given is not None and own is not None and given != own and raw.prefix is not None:
        raise TraceError(raw.path, f"its hash_ids name blocks of {own} tokens (the file's "
                         f"kvbudget.prefix_block_tokens), and prefix_block_tokens {given} was "
                         f"given: drop it (or give {own}), or write the trace again with "
                         "hashes of that size", field="prefix_block_tokens")
    return given if given is not None else own if own is not None else (
        DEFAULT_PREFIX_BLOCK_TOKENS)


def _check_hashes(raw: RawTrace, keep: npt.NDArray[np.bool_], block_tokens: int) -> None:
    """A prompt of ``p`` tokens has at most ``ceil(p / block_tokens)`` prefix hashes (Mooncake's
    ``hash_ids``: exactly that many, one a 512-token block): more means the file's hashes name
    smaller blocks, whose shared prefix would be counted ``block_tokens / size`` times over."""
    if raw.prefix is None:
        return
    counts = np.diff(raw.prefix[1])
    blocks = -(-raw.prompt // block_tokens)
    bad = keep & (counts > blocks)
    if bad.any():
        row = int(np.argmax(bad))
        raise _error(raw, row, "hash_ids",
                     f"{counts[row]} hashes for {raw.prompt[row]:.0f} prompt tokens: a hash names "
                     f"a block of {block_tokens} tokens (Mooncake's), so at most "
                     f"{blocks[row]:.0f} (hashes of smaller blocks: set their size, "
                     "[workload.options] prefix_block_tokens in a scenario)")


def _assign_tiers(rows: _Rows, options: TraceOptions, raw: RawTrace,
                  streams: Streams) -> tuple[npt.NDArray[np.int16], tuple[str, ...]]:
    n = len(rows.arrival)
    default = options.default_tier
    if options.tier_shares is not None:
        names = tuple(options.tier_shares)
        p = np.array([options.tier_shares[t] for t in names], dtype=np.float64)
        codes = streams.tiers.choice(len(names), size=n, p=p / p.sum())
        return _compact(codes.astype(np.int64), names)
    if rows.tiers is not None:
        return _compact(rows.tiers[0], rows.tiers[1])
    column = options.tier_column
    if column is None and "tier" in rows.labels:
        column = "tier"
    if column is None and options.tier_map is not None:
        raise SpecError("tier_map", "needs tier_column (the column whose values it maps); "
                        f"this trace's columns: {', '.join(sorted(rows.labels)) or 'none'}",
                        None, show_value=False)
    if column is None or column not in rows.labels:
        raw.assumed.append(f"the file names no tier: every request is {default!r} "
                           "(--tier-column, --tier-shares or --default-tier choose; in a scenario, "
                           "[workload.options] tier_column, tier_shares or default_tier)")
        return np.zeros(n, dtype=np.int16), (default,)
    codes, values = rows.labels[column]
    if options.tier_map is not None:
        mapped = [options.tier_map.get(v, default) for v in values]
        unmapped = [v for v in values if v not in options.tier_map]
        if unmapped:
            index = {v: i for i, v in enumerate(values)}
            count = int(np.isin(codes, [index[v] for v in unmapped]).sum())
            if count:
                shown = ", ".join(repr(v) for v in unmapped[:5])
                raw.warnings.append(f"{counted(count, 'row')} with {column} values not in the tier map "
                                    f"({shown}) got the default tier {default!r}")
    else:
        mapped = list(values)
        bad = [v for v in values if not v.replace("_", "").replace("-", "").isalnum()]
        if bad:
            raw.warnings.append(f"{column} values such as {bad[0]!r} are not valid tier names;"
                                " map them with a tier map")
    names = tuple(dict.fromkeys([*mapped, default]))
    lut = np.array([names.index(m) for m in mapped] + [names.index(default)], dtype=np.int64)
    final = lut[np.where(codes < 0, len(mapped), codes)]
    return _compact(final, names)


def _compact(codes: IntArray, names: tuple[str, ...]) -> tuple[npt.NDArray[np.int16],
                                                                tuple[str, ...]]:
    """Keep only the tier names used, in order of first use (stable names for equal input)."""
    if len(codes) == 0:
        return np.zeros(0, dtype=np.int16), names[:1]
    used, first = np.unique(codes, return_index=True)
    order = used[np.argsort(first, kind="stable")]
    remap = np.zeros(max(len(names), int(codes.max()) + 1), dtype=np.int16)
    remap[order] = np.arange(len(order), dtype=np.int16)
    return remap[codes], tuple(names[i] for i in order)


def _apply_max_output(rows: _Rows, tier_codes: npt.NDArray[np.int16], tier_names: tuple[str, ...],
                      options: TraceOptions) -> tuple[IntArray, IntArray]:
    output = rows.output
    if rows.max_output is None:
        max_out = np.zeros(len(output), dtype=np.int64)
        missing = np.ones(len(output), dtype=bool)
    else:
        missing = np.isnan(rows.max_output)
        max_out = np.where(missing, 0, rows.max_output).astype(np.int64)
    if options.max_output_by_tier is None:
        groups = [(missing, options.max_output)]
    else:
        groups = [(missing & (tier_codes == j), options.rule_for(name))
                  for j, name in enumerate(tier_names)]
    for mask, rule in groups:
        if not mask.any():
            continue
        if bool(mask.all()):
            mx, out = rule.apply(output, empirical_quantile(output))
            max_out, output = mx, out
            continue
        true_out = output[mask]
        mx, out = rule.apply(true_out, empirical_quantile(true_out))
        max_out[mask] = mx
        if out is not true_out:
            output = output.copy()
            output[mask] = out
    return max_out, output


ABSOLUTE_CLOCK_S = 1e8
"""A first arrival this late (about three years of seconds) is a wall-clock timestamp (Unix
epoch seconds, a Parquet timestamp column), not an offset into the trace: it is rebased to 0
with a note, so the simulation does not start decades before the first request."""
YEAR_S = 365.25 * 86400
MAX_SPAN_S = 10 * YEAR_S
"""Longer than any trace a deployment records: such arrival times are refused (wrong unit)."""


LATEST_CLOCK_S = 4102444800.0
"""2100-01-01 in Unix seconds: a first arrival later than this is no wall clock but times read
in too coarse a unit (a Mooncake-style file's nanoseconds read as its milliseconds)."""
_UNITS = ("s", "ms", "us", "ns")


def _past_any_date(first_s: float, unit: str, generic: bool) -> str:
    """Why a trace whose first arrival falls past :data:`LATEST_CLOCK_S` is refused, with the
    finer unit that puts it between 1990 and 2100 where one does."""
    problem = (f"the times read as {unit} put the first request {first_s:.4g} s after "
               "1970-01-01, past the year 2100: they are in a finer unit")
    at = _UNITS.index(unit) if unit in _UNITS else 0
    for step, finer in enumerate(_UNITS[at + 1:], start=1):
        if ABSOLUTE_CLOCK_S / 1.6 <= first_s / 1000.0 ** step <= LATEST_CLOCK_S:
            fix = (f"--arrival-unit {finer}" if generic else f"write them in {unit}, or read "
                   f"the file as the generic format (--format generic, --column "
                   f"arrival_s=COLUMN, --arrival-unit {finer})")
            return (f"{problem} (as {finer} since 1970 they fall on "
                    f"{_utc(first_s / 1000.0 ** step)}): {fix}; in a scenario, "
                    "[workload.options] arrival_unit")
    return problem


def _refuse_coarser_epoch(rows: _Rows, raw: RawTrace) -> None:
    """Refuse times read in a fine unit (Mooncake's ms) that are Unix-epoch times in a coarser
    one: the first request a day or more in, the rest within a thousandth of that, and the
    coarser unit putting it between 1990 and 2100 (epoch seconds read as milliseconds made
    five requests over 12 s arrive 20 days in, at 309 req/s)."""
    first = float(rows.arrival.min())
    span = float(rows.arrival.max()) - first
    if first < 86400.0 or span * 1000.0 > first:
        return
    at = _UNITS.index(raw.arrival_unit)
    for step in range(1, at + 1):
        as_epoch = first * 1000.0 ** step
        if ABSOLUTE_CLOCK_S / 1.6 <= as_epoch <= LATEST_CLOCK_S:
            coarser = _UNITS[at - step]
            generic = raw.format.startswith("generic")
            fix = (f"--arrival-unit {coarser}" if generic else f"write them in "
                   f"{raw.arrival_unit} from the trace's start, or read the file as the generic "
                   f"format (--format generic, --column arrival_s=COLUMN, --arrival-unit "
                   f"{coarser})")
            raise _error(raw, int(rows.file_rows[int(np.argmin(rows.arrival))]), "arrival_s",
                         f"the times read as {raw.arrival_unit} put the first request "
                         f"{first / 86400:.3g} days in and the last {span:.3g} s after it: as "
                         f"{coarser} since 1970 they fall on {_utc(as_epoch)}: {fix}; in a "
                         "scenario, [workload.options] arrival_unit")


def _utc(epoch_s: float) -> str:
    try:
        return datetime.datetime.fromtimestamp(epoch_s, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "far beyond any calendar date"


def finish(raw: RawTrace, options: TraceOptions, streams: Streams) -> LoadedTrace:
    """Validate and transform a loader's columns into the workload and its report."""
    n_parsed = len(raw.prompt)
    if n_parsed == 0 and not raw.dropped:
        raise TraceError(raw.path, NO_DATA_ROWS)
    raw = _validate(raw)
    keep = _drop_failed(raw)
    _check_relations(raw, keep)
    block_tokens = _block_tokens(raw, options)
    _check_hashes(raw, keep, block_tokens)
    n = int(keep.sum())
    if n == 0:
        reasons = "; ".join(f"{r}: {counted(c, 'row')}" for r, c in raw.dropped.items()) or \
            "none"
        raise TraceError(raw.path, f"no requests left: every row was dropped ({reasons})")
    index = np.flatnonzero(keep)
    timed = raw.arrival is not None
    if timed and options.arrival is not None:
        raise TraceError(raw.path, "has arrival times: an arrival process (--arrival) applies "
                         "to length-only tables; drop it", field="arrival")
    if not timed and options.spread_s is not None:
        raise TraceError(raw.path, "has no arrival times: spread_s (--spread-s) spaces requests "
                         "that share a recorded timestamp, and a length-only table's arrivals "
                         "are drawn (--arrival); drop it", field="spread_s")
    if raw.arrival is None:
        _draw_arrivals(raw, options, streams, index, n_parsed)
    rows = _kept_rows(raw, index)
    raw.prompt = raw.output = np.zeros(0)  # let the float copies go

    _say_window_origin(rows, raw, options)
    _rebase(rows, raw, timed, own_clock=options.window is not None)
    if timed:
        rows = _sorted_by_arrival(rows, raw)
    if options.spread_s is not None and timed:
        _spread(rows, options.spread_s)
    elif timed:
        _note_shared_timestamps(rows, raw)
    if options.window is not None:
        rows = _windowed(rows, raw, options.window)
    if options.rate_scale != 1.0:
        _rate_scale(rows, raw, options.rate_scale)
    rows = _sampled(rows, raw, options, streams)
    return _loaded(rows, raw, options, streams, timed)


def _draw_arrivals(raw: RawTrace, options: TraceOptions, streams: Streams, index: IntArray,
                   n_parsed: int) -> None:
    """Give a length-only table's kept rows arrival times from the arrival process (Poisson at
    1 req/s, with a warning, when none was chosen)."""
    process = options.arrival
    if process is None:
        process = PoissonArrivals(1.0)
        raw.warnings.append(DRAWN_ARRIVALS)
    arrival_all = np.zeros(n_parsed)
    arrival_all[index] = process.sample(streams.arrival, num_requests=len(index))
    raw.arrival = arrival_all


def _kept_rows(raw: RawTrace, index: IntArray) -> _Rows:
    """Rows ``index`` of the loader's columns, as integer columns (ids: the file's, else the
    row numbers)."""
    n_rows = len(raw.prompt)
    has_ids = raw.request_id is not None
    return _Rows(
        arrival=np.asarray(raw.arrival, dtype=np.float64),
        prompt=raw.prompt.astype(np.int64),
        output=raw.output.astype(np.int64),
        max_output=raw.max_output,
        deadline=raw.deadline,
        timeout=raw.timeout,
        ids=(raw.request_id.astype(np.int64) if raw.request_id is not None
             else np.arange(n_rows, dtype=np.int64)),
        rows=np.arange(n_rows, dtype=np.int64) if has_ids else None,
        labels=raw.labels,
        tiers=raw.tiers,
        prefix=raw.prefix,
    ).take(index)


def _rebase(rows: _Rows, raw: RawTrace, timed: bool, *, own_clock: bool = False) -> None:
    """Move wall-clock arrivals so the first is at 0 (with a note when the loader did not say
    they were wall-clock times); refuse a timed trace spanning over :data:`MAX_SPAN_S`. A
    relative clock with its publisher's origin (``RawTrace.clock_origin``, BurstGPT's) stays
    on it for a window (``own_clock``): the window is on the file's own clock, as on every
    clock but a wall clock's."""
    if raw.absolute_clock:
        if not (own_clock and raw.clock_origin is not None):
            rows.shift(float(rows.arrival.min()))
    elif timed and rows.arrival.size and float(rows.arrival.min()) >= ABSOLUTE_CLOCK_S:
        first = float(rows.arrival.min())
        if first > LATEST_CLOCK_S:
            raise _error(raw, int(rows.file_rows[int(np.argmin(rows.arrival))]), "arrival_s",
                         _past_any_date(first, raw.arrival_unit,
                                        raw.format.startswith("generic")))
        rows.shift(first)
        raw.warnings.append(
            f"arrival times look like absolute timestamps (the first is {first:.0f} s after "
            f"1970-01-01, {_utc(first)}): rebased so the first request arrives at 0")
    elif timed and rows.arrival.size and raw.arrival_unit in _UNITS[1:]:
        _refuse_coarser_epoch(rows, raw)
    if timed and rows.arrival.size:
        span = float(rows.arrival.max() - rows.arrival.min())
        if not span <= MAX_SPAN_S:
            last = int(np.argmax(rows.arrival))
            raise _error(raw, int(rows.file_rows[last]), "arrival_s",
                         f"the trace spans {span:.3g} s (over {MAX_SPAN_S / YEAR_S:.0f} years), "
                         "beyond any recorded deployment: are the times in seconds?")


def _say_window_origin(rows: _Rows, raw: RawTrace, options: TraceOptions) -> None:
    """Say that a window on a file whose publisher's clock has its own origin (BurstGPT's
    first day's midnight) counts on that clock, where the file's first request is not at 0 (a
    load without a window rebases it to 0)."""
    if options.window is None or raw.clock_origin is None or not rows.arrival.size:
        return
    first = float(rows.arrival.min())
    start, end = options.window
    raw.assumed.append(
        f"the window [{start:,.10g}, {'open' if end is None else f'{end:,.10g}'}) s counts on the "
        f"file's own clock ({raw.clock_origin}), where its first request is at {first:,.10g} "
        "s; the window's start becomes 0")


def _sorted_by_arrival(rows: _Rows, raw: RawTrace) -> _Rows:
    """``rows`` in arrival order (stable), with a warning naming the first row out of order
    (none for a file its tool writes in completion order: ``RawTrace.completion_order``)."""
    gaps = np.diff(rows.arrival)
    if not (gaps.size and bool((gaps < 0).any())):
        return rows
    first = int(np.argmax(gaps < 0)) + 1
    order = np.argsort(rows.arrival, kind="stable")
    if raw.completion_order:
        return rows.take(order)
    moved = int((order != np.arange(len(order))).sum())
    first_row = int(rows.file_rows[first])
    where = f"line {raw.line_of(first_row)}" if raw.line_of else f"row {first_row}"
    raw.warnings.append(f"timestamps are not in order (first at {where}): {counted(moved, 'row')} "
                        "were sorted by arrival time (stable)")
    return rows.take(order)


def _windowed(rows: _Rows, raw: RawTrace, window: tuple[float, float | None]) -> _Rows:
    """The rows arriving in ``[start, end)``, moved so the window starts at 0."""
    start, end = window
    upper = np.inf if end is None else end
    inside = np.flatnonzero((rows.arrival >= start) & (rows.arrival < upper))
    if inside.size == 0:
        first, last = (float(rows.arrival[0]), float(rows.arrival[-1])) if len(rows.arrival) \
            else (0.0, 0.0)
        clock = "" if raw.clock_origin is None else f" on the file's own clock ({raw.clock_origin})"
        raise TraceError(raw.path, f"the window [{start:,.10g}, {upper:,.10g}) s holds no requests "
                         f"(the trace spans {first:,.10g} to {last:,.10g} s{clock})",
                         field="window")
    rows = rows.take(inside)
    if start:
        rows.shift(start)
    return rows


def _rate_scale(rows: _Rows, raw: RawTrace, rate_scale: float) -> None:
    """Divide the arrival times by ``rate_scale`` (deadlines keep their wait); refuse a trace
    stretched over :data:`MAX_SPAN_S`."""
    wait = None if rows.deadline is None else rows.deadline - rows.arrival
    rows.arrival = rows.arrival / rate_scale
    if wait is not None:
        rows.deadline = rows.arrival + wait
    span = float(rows.arrival.max() - rows.arrival.min()) if rows.arrival.size else 0.0
    if not span <= MAX_SPAN_S:
        raise TraceError(raw.path, f"rate_scale {rate_scale:g} stretches the trace "
                         f"to {span:.3g} s (over {MAX_SPAN_S / YEAR_S:.0f} years), beyond "
                         "any recorded deployment", field="rate_scale")


def _sampled(rows: _Rows, raw: RawTrace, options: TraceOptions, streams: Streams) -> _Rows:
    """The sample the options ask for (a count or a fraction, without replacement, in order),
    or all rows."""
    total = len(rows.arrival)
    k = None
    if options.sample_count is not None:
        k = options.sample_count
        if k > total:
            raise TraceError(raw.path, f"asks for {k} requests but only {total} are left",
                             field="sample_count")
    elif options.sample_fraction is not None:
        k = max(1, round(options.sample_fraction * total))
    if k is not None and k < total:
        rows = rows.take(np.sort(streams.sample.choice(total, size=k, replace=False)))
    return rows


def _loaded(rows: _Rows, raw: RawTrace, options: TraceOptions, streams: Streams,
            timed: bool) -> LoadedTrace:
    """The workload of the final rows (tiers assigned, the max-output rule applied) and the
    load's report."""
    tier_codes, tier_names = _assign_tiers(rows, options, raw, streams)
    max_out, output = _apply_max_output(rows, tier_codes, tier_names, options)
    _say_max_output(rows, raw, options, tier_names)
    hashes, offsets = (None, None) if rows.prefix is None else rows.prefix
    workload = Workload(
        arrival_s=np.ascontiguousarray(rows.arrival, dtype=np.float64),
        prompt_tokens=rows.prompt,
        output_tokens=output,
        max_output_tokens=max_out,
        tier=tier_codes,
        tier_names=tier_names,
        deadline_s=(np.full(len(rows.arrival), np.nan) if rows.deadline is None
                    else np.ascontiguousarray(rows.deadline, dtype=np.float64)),
        request_id=rows.ids,
        prefix_hashes=hashes,
        prefix_offsets=offsets,
        prefix_block_tokens=_block_tokens(raw, options),
        name=raw.path.stem,
        meta={"source": str(raw.path), "format": raw.format, "timed": timed,
              "warnings": tuple(raw.warnings), "assumed": tuple(raw.assumed),
              "drawn": streams.drew},
        timeout_s=(None if rows.timeout is None or bool(np.isnan(rows.timeout).all())
                   else np.ascontiguousarray(rows.timeout, dtype=np.float64)),
    )
    report = LoadReport(
        path=str(raw.path),
        format=raw.format,
        rows_read=raw.rows_read,
        rows_loaded=len(workload),
        dropped=tuple(sorted(raw.dropped.items())),
        warnings=tuple(raw.warnings),
        timed=timed,
        assumed=tuple(raw.assumed),
    )
    return LoadedTrace(workload=workload, report=report)


def _say_max_output(rows: _Rows, raw: RawTrace, options: TraceOptions,
                    tier_names: tuple[str, ...]) -> None:
    """Say how many requests the file gives no ``max_tokens`` and what they declare instead:
    the gateway reserves prompt + ``max_output_tokens``, so the rule moves every answer."""
    n = len(rows.output)
    missing = n if rows.max_output is None else int(np.isnan(rows.max_output).sum())
    if not missing:
        return
    if options.max_output_by_tier is None:
        rule = options.max_output.said
    else:
        rule = "; ".join(f"{t}: {options.rule_for(t).said}" for t in tier_names)
    whose = "no max_tokens read from the file" if missing == n else (
        f"{missing:,} of {counted(n, 'request')} have no max_tokens read from the file")
    raw.assumed.append(f"{whose}: max_output_tokens {rule}, which a reserving policy "
                       "holds beside the prompt (--max-output chooses; in a scenario, [workload.options] "
                       "max_output or max_output_by_tier)")


SHARED_TIMESTAMPS_SHARE = 0.25
"""Where at least this share of a timed trace's requests share their timestamp with another,
its clock is coarse (the Kimi conversation trace's 3 s buckets): said, with the spread to give."""


def _note_shared_timestamps(rows: _Rows, raw: RawTrace) -> None:
    """Warn where many requests share a timestamp: each group arrives at one instant, a burst
    the clock's resolution made, unless ``spread_s`` spaces them."""
    starts = np.flatnonzero(np.concatenate([[True], np.diff(rows.arrival) > 0]))
    n = len(rows.arrival)
    if len(starts) < 2:
        return
    counts = np.diff(np.append(starts, n))
    shared = int(counts[counts > 1].sum())
    if shared < SHARED_TIMESTAMPS_SHARE * n:
        return
    gap = float(np.median(np.diff(rows.arrival[starts])))
    raw.warnings.append(
        f"{shared:,} of the {counted(n, 'request')} share their timestamp with another (up to "
        f"{int(counts.max()):,} at once; the distinct times are {gap:.3g} s apart at the "
        f"median): each group arrives at one instant; if the file's clock is that coarse, "
        f"spread them (--spread-s {gap:.3g}; in a scenario, [workload.options] spread_s)")


def _spread(rows: _Rows, spread_s: float) -> None:
    arrival = rows.arrival
    n = len(arrival)
    if n < 2:
        return
    starts = np.flatnonzero(np.concatenate([[True], np.diff(arrival) > 0]))
    counts = np.diff(np.append(starts, n))
    if int(counts.max()) == 1:
        return
    group_time = arrival[starts]
    room = np.append(np.diff(group_time), spread_s)
    width = np.minimum(room, spread_s)
    rank = np.arange(n) - np.repeat(starts, counts)
    offset: FloatArray = (np.repeat(width / counts, counts) * rank).astype(np.float64)
    rows.shift(-offset)
