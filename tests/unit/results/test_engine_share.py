"""One engine's share of a data-parallel server's KV blocks: one function for the recording
reader (refuses engines of different blocks) and the live gateway (takes the smallest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.live.server_metrics import snapshot
from kvbudget.results.engine_share import (
    REFUSE,
    SMALLEST,
    UnequalEngines,
    engine_blocks,
)
from kvbudget.results.recorded_records import server_config


def test_one_engine_holds_them_all() -> None:
    for unequal in (REFUSE, SMALLEST):
        assert engine_blocks(4003, 1, unequal=unequal) == 4003


def test_engines_that_agree_share_the_sum_equally() -> None:
    # vLLM 0.32.0 tells the front end's sum on every engine's series
    for unequal in (REFUSE, SMALLEST):
        assert engine_blocks(4002, 2, (4002, 4002), unequal=unequal) == 2001
        assert engine_blocks(4002, 2, unequal=unequal) == 2001


@pytest.mark.parametrize(("total", "by_engine", "kind", "smallest"), [
    (6002, (4002, 2000), "figures", 2000),
    (4003, (), "share", 2001),
    (4003, (4003, 4003), "share", 2001),
])
def test_engines_of_different_blocks_by_policy(total: int, by_engine: tuple[int, ...],
                                               kind: str, smallest: int) -> None:
    with pytest.raises(UnequalEngines) as err:
        engine_blocks(total, 2, by_engine, unequal=REFUSE)
    assert err.value.kind == kind
    assert engine_blocks(total, 2, by_engine, unequal=SMALLEST) == smallest


def test_a_figure_missing_for_an_engine_is_refused() -> None:
    with pytest.raises(UnequalEngines, match=r"told different KV blocks \(4002\)"):
        engine_blocks(4002, 2, (4002,), unequal=REFUSE)


@pytest.mark.parametrize(("engines", "blocks"), [(2, 4002), (4, 4004), (3, 999)])
def test_the_reader_and_the_gateway_agree_where_the_engines_do(engines: int,
                                                               blocks: int) -> None:
    """A page whose engines agree: the replay's simulated engine holds the blocks the live
    gateway budgets one engine for (less the null block each)."""
    page = "".join(f'vllm:cache_config_info{{engine="{i}",num_gpu_blocks="{blocks}",'
                   f'block_size="16"}} 1\n' for i in range(engines))
    snap = snapshot(page)
    told = server_config({"num_gpu_blocks": snap.num_gpu_blocks, "block_size": 16,
                          "num_engines": snap.num_engines,
                          "num_gpu_blocks_by_engine": list(snap.num_gpu_blocks_by_engine)},
                         {}, (Path("replay.json"), "server"))
    assert told["num_gpu_blocks"] * 16 == snap.engine_capacity_tokens
