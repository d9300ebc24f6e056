"""The one workload type every generator and trace loader produces: columnar, sorted by arrival.

Columns are numpy arrays (one entry per request), so a million-request workload costs a few tens
of MB and the simulator reads it without a Python object per request. The true output length
(``output_tokens``) is kept here, apart from the :class:`policies.Request` a gateway sees.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from kvbudget.policies import Request
from kvbudget.workloads.arrival_rate import gaps_said, mean_arrival_rate, span_said
from kvbudget.workloads.counted import counted

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival order.

    ``tier`` holds codes into ``tier_names``. ``deadline_s`` is NaN where a request has no
    explicit deadline (its tier's ``queue_timeout_s`` then applies). Prefix block hashes, when
    the source has them (Mooncake ``hash_ids``), are stored flat in ``prefix_hashes`` with
    ``prefix_offsets`` (length ``n + 1``): request ``i`` has
    ``prefix_hashes[prefix_offsets[i]:prefix_offsets[i + 1]]``; ``prefix_block_tokens`` is the
    number of tokens one hash covers. ``timeout_s``, when the source has it (a trace's
    ``timeout_s`` column), is each request's client timeout in seconds (NaN: its tier's client
    model decides).
    """

    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    max_output_tokens: IntArray
    tier: npt.NDArray[np.int16]
    tier_names: tuple[str, ...]
    deadline_s: FloatArray
    request_id: IntArray
    prefix_hashes: IntArray | None = None
    prefix_offsets: IntArray | None = None
    prefix_block_tokens: int = 512
    name: str = "workload"
    meta: dict[str, object] = field(default_factory=dict)
    timeout_s: FloatArray | None = None

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for col in (
            "prompt_tokens",
            "output_tokens",
            "max_output_tokens",
            "tier",
            "deadline_s",
            "request_id",
        ):
            if len(getattr(self, col)) != n:
                raise ValueError(f"column {col!r} has {len(getattr(self, col))} rows, expected {n}")
        if n:
            if not np.all(np.isfinite(self.arrival_s)):
                raise ValueError("arrival_s must be finite")
            if np.any(np.diff(self.arrival_s) < 0):
                raise ValueError("arrival_s must be sorted (non-decreasing)")
            if self.arrival_s[0] < 0:
                raise ValueError(f"arrival_s must be >= 0, got {self.arrival_s[0]!r}")
            if self.prompt_tokens.min() < 1:
                raise ValueError(f"prompt_tokens must be >= 1, got {self.prompt_tokens.min()!r}")
            if self.output_tokens.min() < 1:
                raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens.min()!r}")
            if self.max_output_tokens.min() < 1:
                raise ValueError(
                    f"max_output_tokens must be >= 1, got {self.max_output_tokens.min()!r}"
                )
            if np.any(self.output_tokens > self.max_output_tokens):
                i = int(np.argmax(self.output_tokens > self.max_output_tokens))
                raise ValueError(
                    f"request {int(self.request_id[i])}: output_tokens {int(self.output_tokens[i])}"
                    f" exceeds max_output_tokens {int(self.max_output_tokens[i])}"
                )
            if self.tier.min() < 0 or self.tier.max() >= len(self.tier_names):
                raise ValueError(f"tier codes must index tier_names {self.tier_names!r}")
            if not _all_distinct(self.request_id):
                raise ValueError("request_id values must be unique")
        if self.timeout_s is not None:
            if len(self.timeout_s) != n:
                raise ValueError(f"column 'timeout_s' has {len(self.timeout_s)} rows, expected {n}")
            bad = ~np.isnan(self.timeout_s) & ~(self.timeout_s > 0)
            if np.any(bad):
                i = int(np.argmax(bad))
                raise ValueError(f"request {int(self.request_id[i])}: timeout_s must be > 0, "
                                 f"got {float(self.timeout_s[i])!r}")
        if (self.prefix_hashes is None) != (self.prefix_offsets is None):
            raise ValueError("prefix_hashes and prefix_offsets go together")
        if self.prefix_offsets is not None and len(self.prefix_offsets) != n + 1:
            raise ValueError(f"prefix_offsets must have {n + 1} entries")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def __repr__(self) -> str:
        """What a notebook shows of a workload: its size, span, tiers and token percentiles,
        and what loading its file warned of or assumed (``meta``), not its arrays."""
        n = len(self)
        head = f"Workload {self.name!r}: {counted(n, 'request')}"
        if n > 1 and self.meta.get("timed", True):
            rate = mean_arrival_rate(n, self.span_s)
            head += (f" over {span_said(n, self.span_s)} s"
                     + (f" ({rate:.3g} req/s: {gaps_said(n)})" if rate is not None else ""))
        counts = np.bincount(self.tier, minlength=len(self.tier_names)) if n else ()
        tiers = ", ".join(f"{name} {int(c):,}" for name, c in zip(
            self.tier_names, counts, strict=False) if c)
        lines = [head + (f"; {tiers}" if tiers else "")]
        if n:
            lines.append("; ".join(
                f"{label} mean {float(np.mean(col)):,.0f}, p50 / p99 "
                + " / ".join(f"{v:,.0f}" for v in np.percentile(col, (50, 99)))
                for label, col in (("prompt tokens", self.prompt_tokens),
                                   ("output tokens", self.output_tokens),
                                   ("max_output_tokens", self.max_output_tokens))))
        for key, label in (("warnings", "warning"), ("assumed", "assumed")):
            said = self.meta.get(key)
            lines += [f"{label}: {text}" for text in (said if isinstance(said, tuple) else ())]
        return "\n".join(lines)

    @property
    def span_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    def tier_of(self, i: int) -> str:
        return self.tier_names[int(self.tier[i])]

    def prefix_of(self, i: int) -> tuple[int, ...]:
        if self.prefix_hashes is None or self.prefix_offsets is None:
            return ()
        lo, hi = self.prefix_offsets.item(i), self.prefix_offsets.item(i + 1)
        return tuple(self.prefix_hashes[lo:hi].tolist())

    def request(self, i: int) -> Request:
        """The :class:`policies.Request` of row ``i`` (what a gateway may see)."""
        deadline = float(self.deadline_s[i])
        return Request(
            request_id=int(self.request_id[i]),
            tier=self.tier_names[int(self.tier[i])],
            arrival_s=float(self.arrival_s[i]),
            prompt_tokens=int(self.prompt_tokens[i]),
            max_output_tokens=int(self.max_output_tokens[i]),
            deadline_s=None if np.isnan(deadline) else deadline,
            prefix_hashes=self.prefix_of(i),
        )

    def requests(self) -> Iterator[Request]:
        for i in range(len(self)):
            yield self.request(i)

    def take(self, index: npt.NDArray[np.int64] | Sequence[int]) -> Workload:
        """A sub-workload of the given rows (kept in arrival order)."""
        idx = np.sort(np.asarray(index, dtype=np.int64))
        hashes = offsets = None
        if self.prefix_hashes is not None and self.prefix_offsets is not None:
            lo, hi = self.prefix_offsets[idx], self.prefix_offsets[idx + 1]
            parts = [self.prefix_hashes[a:b] for a, b in zip(lo, hi, strict=True)]
            hashes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            offsets = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64)
        return Workload(
            arrival_s=self.arrival_s[idx],
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            max_output_tokens=self.max_output_tokens[idx],
            tier=self.tier[idx],
            tier_names=self.tier_names,
            deadline_s=self.deadline_s[idx],
            request_id=self.request_id[idx],
            prefix_hashes=hashes,
            prefix_offsets=offsets,
            prefix_block_tokens=self.prefix_block_tokens,
            name=self.name,
            meta=dict(self.meta),
            timeout_s=None if self.timeout_s is None else self.timeout_s[idx],
        )


def _all_distinct(values: IntArray) -> bool:
    """Whether all values differ: O(n) when increasing (the usual case), else a sort.

    (``np.unique`` of numpy 2.x hashes and is ~20x slower than this on a million ids.)
    """
    if len(values) < 2 or bool(np.all(values[1:] > values[:-1])):
        return True
    ordered = np.sort(values)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


def from_columns(
    arrival_s: Sequence[float] | FloatArray,
    prompt_tokens: Sequence[int] | IntArray,
    output_tokens: Sequence[int] | IntArray,
    *,
    max_output_tokens: Sequence[int] | IntArray | None = None,
    tiers: Sequence[str] | None = None,
    deadline_s: Sequence[float] | FloatArray | None = None,
    request_id: Sequence[int] | IntArray | None = None,
    name: str = "workload",
    timeout_s: Sequence[float] | FloatArray | None = None,
) -> Workload:
    """Build a workload from plain columns, sorting by arrival (stable) and naming tiers.

    ``max_output_tokens`` defaults to the true output length; ``tiers`` to ``"interactive"``.
    """
    arr = np.asarray(arrival_s, dtype=np.float64)
    n = len(arr)
    for key, col in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens),
                     ("max_output_tokens", max_output_tokens), ("tiers", tiers),
                     ("deadline_s", deadline_s), ("request_id", request_id),
                     ("timeout_s", timeout_s)):
        if col is not None and len(col) != n:  # not an IndexError from the sort below
            raise ValueError(f"{key}: {len(col):,} values for {n:,} arrivals (arrival_s)")
    order = np.argsort(arr, kind="stable")
    out = np.asarray(output_tokens, dtype=np.int64)
    mx = out.copy() if max_output_tokens is None else np.asarray(max_output_tokens, np.int64)
    tier_list = list(tiers) if tiers is not None else ["interactive"] * n
    names = tuple(dict.fromkeys(tier_list))
    code = {t: i for i, t in enumerate(names)}
    tier_codes = np.fromiter((code[t] for t in tier_list), dtype=np.int16, count=n)
    dl = np.full(n, np.nan) if deadline_s is None else np.asarray(deadline_s, np.float64)
    rid = np.arange(n, dtype=np.int64) if request_id is None else np.asarray(request_id, np.int64)
    return Workload(
        arrival_s=arr[order],
        prompt_tokens=np.asarray(prompt_tokens, dtype=np.int64)[order],
        output_tokens=out[order],
        max_output_tokens=mx[order],
        tier=tier_codes[order],
        tier_names=names or ("interactive",),
        deadline_s=dl[order],
        request_id=rid[order],
        name=name,
        timeout_s=None if timeout_s is None else np.asarray(timeout_s, np.float64)[order],
    )


def scale_rate(workload: Workload, factor: float) -> Workload:
    """The same requests offered ``factor`` times as fast: arrival times (measured from the
    first) divided by ``factor``; explicit deadlines keep their distance to the arrival
    (``sweep --rate-scale``'s load axis, and a synthetic workload's ``rate_scale``)."""
    if not (isinstance(factor, int | float) and np.isfinite(factor) and factor > 0):
        raise ValueError(f"rate_scale must be a finite number > 0, got {factor!r}")
    if factor == 1 or len(workload) == 0:
        return workload
    a = workload.arrival_s
    t0 = float(a[0])
    arrival = t0 + (a - t0) / float(factor)
    deadline = workload.deadline_s - a + arrival
    return replace(workload, arrival_s=arrival, deadline_s=deadline,
                   meta={**workload.meta, "rate_scale": float(factor)})
