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
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt


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


class PrefixCaching:
    """An engine's automatic prefix caching over a workload's prompt-block hashes: the
    :class:`PrefixCache` and what each request (workload row ``i``) has of it.

    Request ``i``'s hashes are ``hashes[offsets[i]:offsets[i + 1]]``, one per full block of
    ``hash_tokens`` prompt tokens (a trailing partial block is never cached, as in vLLM). A
    request *holds* the hashes of its hit and those it cached itself; their blocks are its
    ``num_shared_blocks``. The block counts go back to the engine, which keeps the free and
    evictable totals.
    """

    def __init__(
        self,
        block_size: int,
        prompt_tokens: npt.NDArray[np.int64],
        hashes: npt.NDArray[np.int64],
        offsets: npt.NDArray[np.int64] | None,
        hash_tokens: int,
    ) -> None:
        if offsets is None or hash_tokens % block_size:
            raise ValueError(
                f"prefix caching needs prefix_offsets and prefix_block_tokens "
                f"({hash_tokens}) a multiple of block_size ({block_size})"
            )
        self.cache = PrefixCache(hash_tokens // block_size)
        self.blocks_per_hash = self.cache.blocks_per_hash
        self.hash_tokens = hash_tokens
        self._hashes = hashes
        self._lo = offsets[:-1]
        self._num_full = np.minimum(offsets[1:] - offsets[:-1], prompt_tokens // hash_tokens)
        n = len(prompt_tokens)
        # called with the hashes a step computed for a request, in prompt order (the full
        # prompt blocks an offload tier stores as they are computed), when set
        self.on_computed: Callable[[list[int]], None] | None = None
        self._held: dict[int, list[int]] = {}
        self._next = np.zeros(n, np.int64)  # hashes of the request registered (or hit)
        self.num_shared_blocks = np.zeros(n, np.int64)
        self.num_shared_total = 0  # num_shared_blocks summed (over the requests holding any)

    @property
    def num_cached_blocks(self) -> int:
        return self.cache.num_cached * self.blocks_per_hash

    def lookup(self, i: int, num_tokens: int) -> list[int]:
        """The cached leading hashes of waiting request ``i`` with ``num_tokens`` tokens
        (nothing changes yet)."""
        # at least the last token is computed again (vLLM: the hit stops short of num_tokens)
        full = min(int(self._num_full[i]), (num_tokens - 1) // self.hash_tokens)
        lo = int(self._lo[i])
        hashes: list[int] = self._hashes[lo : lo + full].tolist()
        return hashes[: self.cache.match(hashes)]

    def candidates(self, i: int, num_tokens: int) -> list[int]:
        """The leading hashes :meth:`lookup` may hit for waiting request ``i`` with
        ``num_tokens`` tokens, cached or not (another tier looks up the rest of them)."""
        full = min(int(self._num_full[i]), (num_tokens - 1) // self.hash_tokens)
        lo = int(self._lo[i])
        hashes: list[int] = self._hashes[lo : lo + full].tolist()
        return hashes

    def hit_blocks(self, hit: list[int]) -> tuple[int, int]:
        """The blocks ``hit`` shares, and how many of them nobody references now."""
        b = self.blocks_per_hash
        return len(hit) * b, self.cache.num_unreferenced(hit) * b

    def acquire(self, i: int, hit: list[int]) -> int:
        """Request ``i`` starts with ``hit``; returns the blocks that left the evictable pool."""
        out = self.cache.acquire(hit)
        if hit:
            self._held[i] = list(hit)
        self._next[i] = len(hit)
        shared = len(hit) * self.blocks_per_hash
        self.num_shared_blocks[i] = shared
        self.num_shared_total += shared
        return out

    def release(self, i: int) -> tuple[int, int]:
        """Request ``i`` lets go of its hashes; returns its shared blocks and the blocks that
        became evictable."""
        shared = int(self.num_shared_blocks[i])
        held = self._held.pop(i, None)
        evictable = self.cache.release(held) if held else 0
        self.num_shared_blocks[i] = 0
        self.num_shared_total -= shared
        self._next[i] = 0
        return shared, evictable

    def register(self, rows: npt.NDArray[np.int64], computed: npt.NDArray[np.int64]) -> None:
        """Cache the full prompt blocks the step completed for ``rows`` (``computed`` tokens
        now), one hash each, first come first cached; a block whose hash is cached already
        stays private (vLLM does not dedupe)."""
        done = np.minimum(computed // self.hash_tokens, self._num_full[rows])
        todo = np.flatnonzero(self._next[rows] < done)
        if todo.size == 0:
            return
        b = self.blocks_per_hash
        for k in todo.tolist():
            i = int(rows[k])
            lo = int(self._lo[i])
            hashes_now: list[int] = self._hashes[lo + int(self._next[i]) : lo + int(done[k])].tolist()
            for h in hashes_now:
                if self.cache.insert(h):
                    self._held.setdefault(i, []).append(h)
                    self.num_shared_blocks[i] += b
                    self.num_shared_total += b
            self._next[i] = int(done[k])
            if self.on_computed is not None:
                self.on_computed(hashes_now)
