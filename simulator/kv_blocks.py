"""The KV blocks of one engine replica: free ones, those each request holds, and those of the
automatic prefix cache (vLLM's ``KVCacheManager`` and ``BlockPool``, counted rather than
listed: ``vllm/v1/core/kv_cache_manager.py``).

A request's ``num_blocks`` covers its computed tokens (and, for engines that reserve ahead,
more). With prefix caching, blocks of prompt prefixes with equal hashes are shared: a shared
block counts once in the pool, for every request holding it in ``num_blocks``, and a cached
block nobody uses is *evictable*: free for an allocation, which evicts it (least recently used
first), but kept for a later hit until then. Every block is free, held by a request (its
private ones), or cached: :meth:`KVBlocks.num_held_blocks` plus ``num_free_blocks`` is
``num_gpu_blocks`` (the engine asserts it at each step it schedules).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kvbudget.simulator.prefix_cache import PrefixCaching
from kvbudget.simulator.small_arrays import isum

__all__ = ["KVBlocks"]


class KVBlocks:
    """The block pool of one engine and each request's blocks (``num_blocks``, by workload
    row). ``prefix`` is the prefix cache, None without prefix caching; ``pending_hit`` is the
    hit :meth:`look_up` found for the waiting head, until it starts or another is looked up."""

    __slots__ = ("block_size", "num_blocks", "num_evictable_blocks", "num_free_blocks",
                 "num_gpu_blocks", "pending_hit", "prefix", "prefix_hit_tokens",
                 "prefix_query_tokens")

    def __init__(
        self, num_gpu_blocks: int, block_size: int, num_rows: int, prefix: PrefixCaching | None
    ) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.block_size = block_size
        self.num_blocks = np.zeros(num_rows, np.int64)
        self.num_free_blocks = num_gpu_blocks
        self.num_evictable_blocks = 0  # blocks of cached prefixes no request uses
        self.prefix = prefix
        self.pending_hit: list[int] | None = None
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0

    # --- what the pool holds ------------------------------------------------------------
    @property
    def num_available_blocks(self) -> int:
        """Blocks an allocation may take: the free ones and those of unused cached prefixes."""
        return self.num_free_blocks + self.num_evictable_blocks

    @property
    def num_used_blocks(self) -> int:
        """Blocks some request references (cached prefixes nobody uses count as free)."""
        return self.num_gpu_blocks - self.num_free_blocks - self.num_evictable_blocks

    @property
    def num_running_blocks(self) -> int:
        """``num_blocks`` summed over the requests holding blocks (a shared prefix block
        counts once for every request holding it)."""
        held = self.num_gpu_blocks - self.num_free_blocks
        if self.prefix is None:
            return held
        return held - self.prefix.num_cached_blocks + self.prefix.num_shared_total

    def num_held_blocks(self, rows: npt.NDArray[np.int64] | None = None) -> int:
        """Blocks requests hold (their private ones) or the prefix cache holds, counted from
        the ``num_blocks`` of ``rows`` (of every row without: O(rows)), for the invariant."""
        blocks = self.num_blocks if rows is None else self.num_blocks[rows]
        if self.prefix is None:
            return isum(blocks)
        shared = self.prefix.num_shared_blocks
        private = isum(blocks) - isum(shared if rows is None else shared[rows])
        return private + self.prefix.num_cached_blocks

    # --- allocation -------------------------------------------------------------------------
    def allocate(self, i: int, tokens: int, reserve: int) -> bool:
        """Blocks for request ``i`` to hold ``tokens`` tokens in all, keeping ``reserve``
        available; False (nothing changed) when they do not fit."""
        need = -(-tokens // self.block_size)
        extra = need - self.num_blocks.item(i)
        if extra <= 0:
            return True
        if extra > self.num_free_blocks + self.num_evictable_blocks - reserve:
            return False
        self.num_blocks[i] = need
        self.take(extra)
        return True

    def look_up(self, i: int, num_tokens: int) -> None:
        """Look up the prefix-cache hit of waiting request ``i`` (``num_tokens`` tokens, none
        computed) as ``pending_hit``."""
        assert self.prefix is not None
        self.pending_hit = self.prefix.lookup(i, num_tokens)

    def prefix_hit_blocks(self) -> tuple[int, int]:
        """The blocks the pending hit would share, and how many of them are now unused
        (counted in :attr:`num_available_blocks`); (0, 0) without a hit."""
        hit = self.pending_hit
        if not hit or self.prefix is None:
            return 0, 0
        return self.prefix.hit_blocks(hit)

    def allocate_hit(self, i: int, tokens: int, reserve: int, num_tokens: int) -> int:
        """Blocks for the first ``tokens`` tokens of request ``i`` (``num_tokens`` tokens in
        all), sharing the pending hit's, keeping ``reserve`` available: the hit's tokens
        (now in KV), or -1 (nothing changed) when they do not fit."""
        hit, prefix = self.pending_hit, self.prefix
        assert hit is not None and prefix is not None
        shared, unused = prefix.hit_blocks(hit)  # unused: they leave the evictable pool
        need = -(-tokens // self.block_size) - shared
        if need > self.num_free_blocks + self.num_evictable_blocks - unused - reserve:
            return -1
        hit_tokens = len(hit) * prefix.hash_tokens
        self.num_evictable_blocks -= prefix.acquire(i, hit)
        self.num_blocks[i] = shared + need
        self.take(need)
        self.prefix_hit_tokens += hit_tokens
        self.prefix_query_tokens += num_tokens
        self.pending_hit = None
        return hit_tokens

    def take(self, blocks: int) -> None:
        """Take ``blocks`` free blocks, evicting cached prefixes (LRU) when needed; the caller
        has checked ``blocks <= num_available_blocks``."""
        if blocks > self.num_free_blocks:
            assert self.prefix is not None
            freed = self.prefix.cache.evict(blocks - self.num_free_blocks)
            self.num_evictable_blocks -= freed
            self.num_free_blocks += freed
        self.num_free_blocks -= blocks

    def reset_prefix_cache(self) -> None:
        """Drop every cached prefix no request uses, their blocks freed (vLLM's
        ``reset_prefix_cache``): what a replica that an autoscaler brings up again starts with,
        a new pod's empty cache."""
        if self.prefix is not None and self.num_evictable_blocks:
            freed = self.prefix.cache.evict(self.num_evictable_blocks)
            self.num_evictable_blocks -= freed
            self.num_free_blocks += freed

    def free(self, i: int) -> None:
        """Free request ``i``'s blocks (its shared ones go back to the prefix cache)."""
        blocks = self.num_blocks.item(i)
        self.num_blocks[i] = 0
        if self.prefix is not None:
            shared, evictable = self.prefix.release(i)
            blocks -= shared
            self.num_evictable_blocks += evictable
        self.num_free_blocks += blocks

    # --- rows -------------------------------------------------------------------------------
    def grow(self, num_rows: int) -> None:
        """Room for ``num_rows`` requests (the rows there keep their blocks)."""
        grown = np.zeros(num_rows, np.int64)
        grown[: len(self.num_blocks)] = self.num_blocks
        self.num_blocks = grown

    def drop(self) -> None:
        """Let the per-request blocks go (the engine is done)."""
        self.num_blocks = np.zeros(0, np.int64)

    def stats(self) -> dict[str, object]:
        """The prefix cache's figures for the engine's summary."""
        queries = self.prefix_query_tokens
        return {
            "prefix_caching": self.prefix is not None,
            "prefix_cache_query_tokens": queries,
            "prefix_cache_hit_tokens": self.prefix_hit_tokens,
            "prefix_cache_hit_rate": self.prefix_hit_tokens / queries if queries else None,
        }

