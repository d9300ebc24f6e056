"""Read a serving engine's Prometheus ``/metrics``: KV use, queue depths, preemptions, capacity.

The text format is parsed here (a few dozen lines; no client library needed). Names differ by
engine; each quantity has a list of known names, tried in order, summed over label sets (one
per engine of a data-parallel server):

* vLLM: ``vllm:kv_cache_usage_perc`` (a fraction, 1 = full; ``vllm:gpu_cache_usage_perc`` before
  v0.10), ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:num_preemptions_total``, and the capacity in ``vllm:cache_config_info``'s labels
  ``num_gpu_blocks`` and ``block_size``. vLLM v1 keeps one block of each engine as its "null
  block" and never allocates it, and its usage fraction is over the others
  (``vllm/v1/core/block_pool.py``, ``BlockPool.get_usage``: "Subtract 1 to account for null
  block"): the usable capacity is ``(num_gpu_blocks - 1) * block_size`` per engine.
* llama.cpp (``--metrics``): ``llamacpp:kv_cache_usage_ratio``, ``llamacpp:requests_processing``,
  ``llamacpp:requests_deferred``; it exposes no capacity (pass it explicitly).
* SGLang: ``sglang:token_usage``, ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  ``sglang:max_total_num_tokens`` (capacity in tokens).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from kvbudget.results.engine_share import SMALLEST, engine_blocks

Sample = tuple[dict[str, str], float]

KV_USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                  "llamacpp:kv_cache_usage_ratio", "sglang:token_usage")
RUNNING_NAMES = ("vllm:num_requests_running", "llamacpp:requests_processing",
                 "sglang:num_running_reqs")
WAITING_NAMES = ("vllm:num_requests_waiting", "llamacpp:requests_deferred",
                 "sglang:num_queue_reqs")
PREEMPTION_NAMES = ("vllm:num_preemptions_total", "vllm:num_preemptions")
CAPACITY_TOKEN_NAMES = ("sglang:max_total_num_tokens",)

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse_prometheus(text: str) -> dict[str, list[Sample]]:
    """Metric name -> [(labels, value)] from the Prometheus text exposition format.

    Comment lines and lines that do not parse are skipped (a scrape is best effort).
    """
    out: dict[str, list[Sample]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, _, label_text, value_text = m.group(1), m.group(2), m.group(3), m.group(4)
        try:
            value = float(value_text)
        except ValueError:
            continue
        labels: dict[str, str] = {}
        if label_text:
            pos = 0
            while pos < len(label_text):
                lm = _LABEL.match(label_text, pos)
                if lm is None:
                    break
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        out.setdefault(name, []).append((labels, value))
    return out


def _first(metrics: dict[str, list[Sample]], names: Iterable[str]) -> float | None:
    for name in names:
        samples = metrics.get(name)
        if samples:
            return float(sum(v for _, v in samples))
    return None


def _mean(metrics: dict[str, list[Sample]], names: Iterable[str]) -> float | None:
    for name in names:
        samples = metrics.get(name)
        if samples:
            return float(sum(v for _, v in samples) / len(samples))
    return None


MAX_COUNT = 2**53
"""Above this a count read from ``/metrics`` is no count (nor exact as a float): ignored."""
MAX_KV_CAPACITY_TOKENS = 10**12
"""A KV capacity beyond this many tokens is no server's (the largest hold ~10^7 per replica):
a page that claims one is not taken as the gateway's budget."""


def _int_label(labels: dict[str, str], key: str) -> int | None:
    try:
        value = int(labels.get(key, ""))
    except ValueError:
        return None
    return value if 0 < value <= MAX_COUNT else None


def _fraction(x: float | None) -> float | None:
    """A usage fraction as engines report it (0..1; a hair above 1 is rounding), else None."""
    if x is None or not (math.isfinite(x) and 0 <= x <= 1.01):
        return None
    return min(x, 1.0)


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One scrape. ``None`` where the server does not expose the quantity."""

    kv_usage: float | None
    num_running: int | None
    num_waiting: int | None
    num_preemptions_total: int | None
    num_gpu_blocks: int | None
    block_size: int | None
    capacity_tokens_direct: int | None = None
    num_engines: int = 1
    enable_prefix_caching: bool | None = None
    """vLLM's ``cache_config_info`` label of that name (None where the page has none)."""
    kv_cache_dtype: str | None = None
    """vLLM's ``--kv-cache-dtype`` as its ``cache_config_info`` tells it (label ``cache_dtype``)."""
    num_gpu_blocks_by_engine: tuple[int, ...] = ()
    """The ``num_gpu_blocks`` each engine's ``cache_config_info`` series tells, in the page's
    order, where there are several (a data-parallel server; () for one engine): equal on a vLLM
    0.32.0 page (each the front end's sum, see :func:`_all_engines_blocks`), so figures that
    differ say the engines hold different blocks."""

    @property
    def usable_blocks(self) -> int | None:
        """Blocks the engine can allocate: ``num_gpu_blocks`` less one null block per engine."""
        if self.num_gpu_blocks is None:
            return None
        return max(self.num_gpu_blocks - self.num_engines, 0)

    @property
    def reported_capacity_tokens(self) -> int | None:
        """The KV capacity in tokens as the page tells it: ``usable_blocks * block_size``
        (vLLM), or the server's own figure in tokens (SGLang); unchecked."""
        if self.usable_blocks is not None and self.block_size is not None:
            return self.usable_blocks * self.block_size
        return self.capacity_tokens_direct

    @property
    def capacity_problem(self) -> str:
        """Why the reported capacity is not taken ('' when it is, or when there is none)."""
        cap = self.reported_capacity_tokens
        if cap is None or 1 <= cap <= MAX_KV_CAPACITY_TOKENS:
            return ""
        how = (f"{self.num_gpu_blocks} blocks of {self.block_size} tokens, "
               f"{self.num_engines} null" if self.num_gpu_blocks is not None else "in tokens")
        return f"it reports a KV capacity of {cap} tokens ({how}), which no server has"

    @property
    def kv_capacity_tokens(self) -> int | None:
        """Usable KV capacity in tokens (:attr:`reported_capacity_tokens`), None where the
        page tells none or one no server has (1 to :data:`MAX_KV_CAPACITY_TOKENS`)."""
        return None if self.capacity_problem else self.reported_capacity_tokens

    @property
    def engine_capacity_tokens(self) -> int | None:
        """One engine's usable KV capacity in tokens, the most one request can hold (it runs
        on one engine): :attr:`kv_capacity_tokens` for a server of one engine; for several
        (data parallel), the smallest engine's where the page tells each its own blocks, else
        an equal share of the sum (a vLLM 0.32.0 page tells only the sum), less its null
        block (:func:`kvbudget.results.engine_share.engine_blocks`,
        :data:`~kvbudget.results.engine_share.SMALLEST`: the most one request can hold is
        the smallest engine's). None where there is no capacity or no engine holds a block."""
        cap = self.kv_capacity_tokens
        if cap is None or self.num_engines == 1 or self.num_gpu_blocks is None \
                or self.block_size is None:
            return cap
        blocks = engine_blocks(self.num_gpu_blocks, self.num_engines,
                               self.num_gpu_blocks_by_engine, unequal=SMALLEST)
        return (blocks - 1) * self.block_size if blocks > 1 else None

    def kv_used_tokens(self, capacity_tokens: int | None = None) -> int | None:
        """Tokens in allocated KV blocks: the usage fraction times the capacity."""
        cap = self.kv_capacity_tokens if capacity_tokens is None else capacity_tokens
        if self.kv_usage is None or cap is None or not math.isfinite(self.kv_usage):
            return None
        return round(self.kv_usage * cap)


def kv_used_unknown_said(num_unknown: int, where: str) -> str:
    """The ``assumed`` line of a live run whose timeline could not read the KV in use in
    ``num_unknown`` samples (``where``: whose ``/metrics``): those rows hold 0 tokens."""
    return (f"KV used: {num_unknown} of the timeline samples could not read it from {where} "
            "(no vllm:kv_cache_usage_perc, or no answer) and hold 0 tokens: the KV used "
            "figures (and the engines' preemptions) are not measured there")


def _all_engines_blocks(num: list[int]) -> int:
    """The KV blocks of all a server's engines from its ``cache_config_info`` series, one per
    engine (label ``engine``). vLLM 0.32.0 labels every engine's series with the front end's
    one ``CacheConfig``, whose ``num_gpu_blocks`` is already the sum over its data-parallel
    engines (``vllm/v1/engine/core_client.py`` ``_apply_ready_response``: "Sum num_gpu_blocks
    from all engines in DP case"; ``vllm/v1/metrics/loggers.py`` ``log_metrics_info``): equal
    figures are that total, taken once (summed, a server of N engines was read as N times its
    KV). Figures that differ can only be each engine's own, and are added up."""
    return num[0] if len(set(num)) == 1 else sum(num)


def snapshot(text: str) -> EngineSnapshot:
    """Read the quantities kvbudget uses from one ``/metrics`` page."""
    metrics = parse_prometheus(text)
    blocks = block_size = None
    engines = 1
    caching: bool | None = None
    cache_dtype: str | None = None
    by_engine: tuple[int, ...] = ()
    info = metrics.get("vllm:cache_config_info")
    if info:
        labels = info[0][0]
        caching = {"True": True, "False": False}.get(labels.get("enable_prefix_caching", ""))
        cache_dtype = labels.get("cache_dtype") or None
        num = [_int_label(labels, "num_gpu_blocks") for labels, _ in info]
        sizes = [_int_label(labels, "block_size") for labels, _ in info]
        if all(n is not None for n in num) and sizes and sizes[0] is not None:
            known = [n for n in num if n is not None]
            blocks = _all_engines_blocks(known)
            block_size = sizes[0]
            engines = len(num)
            by_engine = tuple(known) if engines > 1 else ()

    def as_int(x: float | None) -> int | None:
        """A count: finite, >= 0 and within MAX_COUNT (a negative or absurd one is ignored)."""
        return None if x is None or not (math.isfinite(x) and 0 <= x <= MAX_COUNT) else round(x)

    return EngineSnapshot(
        kv_usage=_fraction(_mean(metrics, KV_USAGE_NAMES)),
        num_running=as_int(_first(metrics, RUNNING_NAMES)),
        num_waiting=as_int(_first(metrics, WAITING_NAMES)),
        num_preemptions_total=as_int(_first(metrics, PREEMPTION_NAMES)),
        num_gpu_blocks=blocks,
        block_size=block_size,
        capacity_tokens_direct=as_int(_first(metrics, CAPACITY_TOKEN_NAMES)) or None,
        num_engines=engines,
        enable_prefix_caching=caching,
        kv_cache_dtype=cache_dtype,
        num_gpu_blocks_by_engine=by_engine,
    )
