"""One engine's share of a data-parallel vLLM server's KV blocks, as its ``/metrics`` tells them.

vLLM 0.32.0 labels every data-parallel engine's ``cache_config_info`` series with the front
end's one ``CacheConfig``, whose ``num_gpu_blocks`` is already the sum over its engines
(``vllm/v1/engine/core_client.py`` ``_apply_ready_response``: "Sum num_gpu_blocks from all
engines in DP case"; ``vllm/v1/metrics/loggers.py`` ``log_metrics_info``): each engine holds an
equal share of that sum, the only split the page allows. Figures that differ between the
engines' series (``num_gpu_blocks_by_engine``) can only be each engine's own; so can a sum no
equal share makes. What to do with such engines is the caller's: a recording simulated as a
fleet of equal replicas refuses them (:data:`REFUSE`,
:func:`kvbudget.results.recorded_records.server_config`); a gateway budgeting for the largest
request one engine can hold takes the smallest engine (:data:`SMALLEST`,
:attr:`kvbudget.live.server_metrics.EngineSnapshot.engine_capacity_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Unequal = Literal["refuse", "smallest"]
REFUSE: Unequal = "refuse"
"""Engines that held different blocks raise :class:`UnequalEngines`."""
SMALLEST: Unequal = "smallest"
"""Engines that told different blocks give the smallest one's; a sum no equal share makes,
the share rounded down."""


class UnequalEngines(ValueError):
    """The engines held different blocks (``REFUSE``): ``kind`` ``figures`` where their series
    told different figures (or not one each), ``share`` where the sum makes no equal share."""

    def __init__(self, kind: Literal["figures", "share"], message: str) -> None:
        super().__init__(message)
        self.kind = kind


def engine_blocks(num_gpu_blocks: int, num_engines: int, by_engine: Sequence[int] = (), *,
                  unequal: Unequal) -> int:
    """Each engine's KV blocks (vLLM v1's null block included) of a server of
    ``num_engines`` that told ``num_gpu_blocks`` (its page's figure: the sum over its engines)
    and ``by_engine`` (each engine's series' figure, where it has several): the whole for one
    engine, an equal share of the sum for several whose series agree; for engines that held
    different blocks, ``unequal`` says (:data:`REFUSE` or :data:`SMALLEST`)."""
    if num_engines == 1:
        return num_gpu_blocks
    if by_engine and (len(by_engine) != num_engines or len(set(by_engine)) > 1):
        if unequal == SMALLEST:
            return min(by_engine)
        raise UnequalEngines("figures", f"the server's {num_engines} data-parallel engines "
                             f"told different KV blocks ({', '.join(map(str, by_engine))})")
    if num_gpu_blocks % num_engines and unequal == REFUSE:
        raise UnequalEngines("share", f"{num_gpu_blocks} blocks over the server's "
                             f"{num_engines} data-parallel engines (num_engines) is no equal share")
    return num_gpu_blocks // num_engines
