"""The engine's automatic prefix cache, over prompt-block hashes (Mooncake ``hash_ids``).

A hash names one full block of ``prefix_block_tokens`` prompt tokens *and everything before it*
(Mooncake's ids, like vLLM's block hashes, chain the prefix), so a request's cache hit is the
longest run of its leading hashes that are cached. A cached hash holds ``blocks_per_hash`` KV
blocks. Requests using a hash hold a reference to it; a hash nobody references stays cached but
its blocks count as free, and it is evicted least recently released first when blocks run out
(vLLM v1's ``KVCacheManager``: ``get_computed_blocks``, the free-block queue of
``BlockPool``; requests release their blocks tail first, so the deepest blocks of a prefix are
evicted before its head).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Reference-counted cached hashes with an LRU of the unreferenced ones."""

    def __init__(self, blocks_per_hash: int) -> None:
        if blocks_per_hash < 1:
            raise ValueError(f"blocks_per_hash must be >= 1, got {blocks_per_hash!r}")
        self.blocks_per_hash = blocks_per_hash
        self._refs: dict[int, int] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced, oldest first

    def __contains__(self, h: int) -> bool:
        return h in self._refs

    @property
    def num_cached(self) -> int:
        return len(self._refs)

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading ``hashes`` are cached."""
        for k, h in enumerate(hashes):
            if h not in self._refs:
                return k
        return len(hashes)

    def num_unreferenced(self, hashes: Sequence[int]) -> int:
        """How many of (cached) ``hashes`` nobody references now."""
        return sum(1 for h in hashes if self._refs[h] == 0)

    def acquire(self, hashes: Sequence[int]) -> int:
        """Reference cached ``hashes``; returns the blocks that left the evictable pool."""
        out = 0
        for h in hashes:
            if self._refs[h] == 0:
                del self._lru[h]
                out += self.blocks_per_hash
            self._refs[h] += 1
        return out

    def release(self, hashes: Sequence[int]) -> int:
        """Drop one reference to each of ``hashes`` (tail first); returns the blocks that
        became evictable."""
        out = 0
        for h in reversed(hashes):
            refs = self._refs[h] - 1
            self._refs[h] = refs
            if refs == 0:
                self._lru[h] = None
                out += self.blocks_per_hash
        return out

    def insert(self, h: int) -> bool:
        """Cache ``h`` referenced once (by the request that computed it); False, changing
        nothing, when it is cached already."""
        if h in self._refs:
            return False
        self._refs[h] = 1
        return True

    def evict(self, blocks: int) -> int:
        """Evict unreferenced hashes, least recently released first, until at least
        ``blocks`` blocks are freed (or none is left); returns the blocks freed."""
        freed = 0
        while freed < blocks and self._lru:
            h, _ = self._lru.popitem(last=False)
            del self._refs[h]
            freed += self.blocks_per_hash
        return freed
